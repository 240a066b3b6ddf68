//! A VM's virtual GIC as the hypervisor shares it between CPUs: the VM's `vgic::Distributor`
//! behind its lock, each vCPU's list-register state behind the vCPU's own lock, the per-vCPU
//! hints and kicks that make vCPUs look at their interrupts, and the guest's trapped accesses
//! to the distributor and redistributor windows.
//!
//! **Locks.** A vCPU's list-register state (`lists[vcpu]`, `vgic::VcpuInterfaceState`) is
//! taken only by the CPU the vCPU runs on, on its exit and entry paths, and before the VM's
//! lock (`vgic`) when both are held (docs/architecture.md, "Lock order"). An exit whose list
//! registers came back as they went in takes the vCPU's lock alone; the VM's lock is taken to
//! fold a change into the distributor, to plan the list registers, and by every access that
//! changes an interrupt's state.
//!
//! **Posted SGIs.** A GICv3 guest's SGI to one other vCPU takes no lock: its sender posts
//! it (`post_sgi`, and the AArch64 vector the same steps), a bit in `posted`, and whoever
//! takes the VM's lock next makes it pending in the distributor before anything else
//! (`lock`): no reader of the distributor sees it without the SGI (docs/vgic.md, "Posted
//! SGIs").

use alloc::sync::Arc;
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use hyp_core::mmio::MmioError;
use hyp_core::sync::{Mutex, MutexGuard};
use hyp_core::syndrome::AccessWidth;
use vgic::{
    AccessError, ControlWords, Distributor, GicVersion, VcpuInterfaceState, VcpuMask, MAX_VCPUS_V2 as MAX_VCPUS,
};

use spin::Once;

use crate::arch::Arch;
use crate::direct_lpis::{BoardVlpis, VlpiError, VlpiVm};
use crate::scheduling::{vcpu_ref, Scheduling};

/// A VM's vGIC and, per vCPU, a hint that its deliverable interrupts may have changed: the
/// exit path checks only the hint (one load) before taking the lock and planning LRs.
pub struct VgicHandle<A: Arch> {
    /// Taken through `lock`, which delivers the posted SGIs first.
    distributor: Mutex<Distributor>,
    /// SGIs posted and not yet in the distributor. GICv3: the SGIs themselves
    /// (vgic::posted_sgi_bit: 8 bits a vCPU). GICv2, whose SGIs are pending per source: a bit
    /// per source whose word in `posted_by` may hold posts.
    posted: AtomicU64,
    /// GICv2: the SGIs each vCPU posted (vgic::posted_sgi_bit of each target).
    posted_by: [AtomicU64; MAX_VCPUS],
    /// The VM's vCPUs, a bit each; 0 on an image that posts none (`Arch::POSTS_SGIS`).
    posting_vcpus: u32,
    /// The VM's GIC is a GICv2: posts are per source.
    per_source: bool,
    /// The distributor's control words, copied for the AArch64 vector to answer a guest's
    /// word load of them (vgic::ControlWords): refreshed under `distributor`'s lock after a write
    /// at their offsets (`write_distributor`) and when the distributor is replaced.
    pub control_words: ControlWords,
    /// Each vCPU's list-register state, under the vCPU's own lock: taken before `vgic`.
    pub lists: [Mutex<VcpuInterfaceState>; MAX_VCPUS],
    /// The VM (its index), for the scheduler.
    vm: usize,
    /// The scheduler that wakes its vCPUs waiting for an interrupt.
    scheduling: &'static Scheduling<A>,
    /// Per vCPU, why it should look at its interrupts: `HINT_CHANGED`, `HINT_POSTED` or
    /// both. The run loop takes any; the AArch64 vector takes a kick itself only for a hint
    /// that is `HINT_POSTED` alone (docs/vgic.md, "The same SGI shown again in the vector").
    hints: [AtomicU8; MAX_VCPUS],
    /// The physical CPU each vCPU runs on (usize::MAX: none), to kick it.
    pub running_on: [AtomicUsize; MAX_VCPUS],
    /// Set while a vCPU waits for an interrupt off its CPU (blocked in a trapped WFI).
    pub waiting: [AtomicBool; MAX_VCPUS],
    /// The VM's vPEs and events on the board's GICv4.0, if its LPIs are injected there
    /// (crate::direct_lpis).
    direct: Once<VlpiVm>,
    /// Steps of the board's ITS for the VM that failed, and doorbells that rang for its
    /// vCPUs (said when the VM ends).
    direct_failures: AtomicU32,
    doorbells: AtomicU64,
}

impl<A: Arch> VgicHandle<A> {
    pub fn new(vm: usize, vgic: Distributor, scheduling: &'static Scheduling<A>) -> Self {
        let posting_vcpus = if A::POSTS_SGIS { VcpuMask::first(vgic.vcpus().min(MAX_VCPUS)).0 as u32 } else { 0 };
        let per_source = vgic.version() == GicVersion::V2;
        VgicHandle {
            control_words: ControlWords::new(&vgic),
            distributor: Mutex::new(vgic),
            posted: AtomicU64::new(0),
            posted_by: [const { AtomicU64::new(0) }; MAX_VCPUS],
            posting_vcpus,
            per_source,
            lists: [const { Mutex::new(VcpuInterfaceState::EMPTY) }; MAX_VCPUS],
            vm,
            scheduling,
            hints: [const { AtomicU8::new(0) }; MAX_VCPUS],
            running_on: [const { AtomicUsize::new(usize::MAX) }; MAX_VCPUS],
            waiting: [const { AtomicBool::new(false) }; MAX_VCPUS],
            direct: Once::new(),
            direct_failures: AtomicU32::new(0),
            doorbells: AtomicU64::new(0),
        }
    }

    /// The VM's LPIs injected by the board's GICv4.0 from now on, if the board has one with
    /// room (crate::direct_lpis); before any vCPU runs. Its vPEs start on CPU `cpu`'s
    /// redistributor. Otherwise, and for a VM without LPIs, they stay with the vGIC.
    pub fn inject_lpis_directly(&self, cpu: usize) -> Result<Option<VlpiVm>, VlpiError> {
        let Some(board) = A::vlpis() else { return Ok(None) };
        let mut vgic = self.lock();
        if vgic.lpis() == 0 || self.direct.is_completed() {
            return Ok(self.direct.get().copied());
        }
        let attached = board.attach(self.vm, vgic.vcpus(), cpu)?;
        if vgic.inject_lpis_directly().is_err() {
            board.detach(&attached);
            return Err(VlpiError::OutOfMemory);
        }
        Ok(Some(*self.direct.call_once(|| attached)))
    }

    /// The VM's vPEs and events on the board, if its LPIs are injected there.
    #[inline(always)]
    pub fn direct(&self) -> Option<&VlpiVm> {
        self.direct.get()
    }

    /// The board's GICv4.0 and the VM's part of it, if its LPIs are injected there.
    #[inline(always)]
    pub fn board(&self) -> Option<(&'static dyn BoardVlpis, &VlpiVm)> {
        A::vlpis().zip(self.direct.get())
    }

    /// The board's ITS brought to what the guest's ITS and its devices did to the LPIs,
    /// under the lock that changed them (vgic::Distributor::sync_direct).
    fn sync_direct(&self, vgic: &mut Distributor) {
        if let Some((board, direct)) = self.board() {
            vgic.sync_direct(|c| self.count_failure(board.apply(direct, c)));
        }
    }

    fn count_failure(&self, applied: Result<(), VlpiError>) {
        if applied.is_err() {
            self.direct_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many steps of the board's ITS for the VM failed: each an LPI that may not have
    /// reached the guest, or a mapping left behind.
    pub fn direct_failures(&self) -> u32 {
        self.direct_failures.load(Ordering::Relaxed)
    }

    /// A doorbell of vCPU `vcpu`'s vPE rang: a vLPI came while it was not resident. It runs
    /// again if it waits; the vLPI is the board's to deliver once it is resident.
    pub fn doorbell(&self, vcpu: usize) {
        self.doorbells.fetch_add(1, Ordering::Relaxed);
        self.kick(1 << vcpu);
    }

    /// How many doorbells rang for the VM's vCPUs.
    pub fn doorbells(&self) -> u64 {
        self.doorbells.load(Ordering::Relaxed)
    }

    /// The VM's distributor, with every SGI posted so far made pending in it.
    #[inline(always)]
    pub fn lock(&self) -> MutexGuard<'_, Distributor> {
        let mut vgic = self.distributor.lock();
        if A::POSTS_SGIS && self.posted.load(Ordering::Relaxed) != 0 {
            self.deliver_posted(&mut vgic);
        }
        vgic
    }

    /// The posted SGIs made pending in the distributor. Each target that gets one and runs on
    /// another CPU has its hint made `HINT_CHANGED`: its vector, which takes a kick itself
    /// only for a hint of posts alone and finds the posts it takes in the posted words, must
    /// not take a later post's hint past these, which are no longer there (docs/vgic.md, "The
    /// same SGI shown again in the vector"). The targets seen before the posts are taken are
    /// hinted before: a vector that took its hint earlier still finds the posts (and takes
    /// them itself, or leaves them). A post made between that look and the take is hinted
    /// after, and its target kicked again: its vector may have taken the hint in between.
    /// A target on this CPU is in its run loop, which holds this lock.
    #[inline(never)]
    fn deliver_posted(&self, vgic: &mut Distributor) {
        let here = A::current_cpu();
        let before = self.posted_targets();
        self.hint_changed(before, here);
        let posted = self.posted.swap(0, Ordering::Acquire);
        let mut targets = 0u64;
        if !self.per_source {
            vgic.deliver_posted_sgis(posted);
            targets = posted;
        } else {
            for source in VcpuMask(posted).iter() {
                if let Some(by) = self.posted_by.get(source) {
                    let by = by.swap(0, Ordering::Acquire);
                    vgic.deliver_posted_sgis_from(source, by);
                    targets |= by;
                }
            }
        }
        let late = self.hint_changed(vcpus_of(targets) & !before, here);
        self.kick(late);
    }

    /// The vCPUs the posted words hold posts for now.
    fn posted_targets(&self) -> u32 {
        let posted = self.posted.load(Ordering::Acquire);
        if !self.per_source {
            return vcpus_of(posted);
        }
        VcpuMask(posted)
            .iter()
            .filter_map(|source| self.posted_by.get(source))
            .fold(0, |vcpus, by| vcpus | vcpus_of(by.load(Ordering::Acquire)))
    }

    /// `HINT_CHANGED` for the vCPUs in `vcpus` that run on another CPU than `here`; returns
    /// them.
    fn hint_changed(&self, vcpus: u32, here: usize) -> u32 {
        let mut hinted = 0;
        for v in VcpuMask(u64::from(vcpus)).iter() {
            let (Some(hint), Some(cpu)) = (self.hints.get(v), self.running_on.get(v)) else { continue };
            if cpu.load(Ordering::Relaxed) != here {
                hint.store(HINT_CHANGED, Ordering::Release);
                hinted |= 1 << v;
            }
        }
        hinted
    }

    /// SGI `intid` for vCPU `vcpu` from vCPU `source`, from a write that names `vcpu` alone
    /// (ICC_SGI1R_EL1, vgic::single_sgi_target; GICD_SGIR, vgic::single_sgir_target),
    /// without the VM's lock: posted (on a GICv2 in `source`'s word, then `source` marked,
    /// a release), `vcpu` hinted (a release: whoever takes the hint finds the post), then,
    /// after a full barrier (a vCPU beginning to wait sets `waiting` before it looks for
    /// pending interrupts, `Scheduling::block`: one of the two sees the other), woken if it
    /// waits and kicked if it runs elsewhere. The AArch64 vector takes the same steps in the
    /// same order for a running target. False, with nothing done, for an SGI that is not
    /// posted (vgic::posted_sgi_bit) or a vCPU the VM lacks: the caller generates it under
    /// the lock.
    pub fn post_sgi(&self, source: usize, vcpu: usize, intid: u32) -> bool {
        let of_the_vm = |v: usize| v < 32 && self.posting_vcpus & (1 << v) != 0;
        let Some(bit) = vgic::posted_sgi_bit(vcpu, intid).filter(|_| of_the_vm(vcpu) && of_the_vm(source)) else {
            return false;
        };
        match self.posted_by.get(source).filter(|_| self.per_source) {
            Some(by) => {
                by.fetch_or(bit, Ordering::Relaxed);
                self.posted.fetch_or(1 << source, Ordering::Release);
            }
            None => {
                self.posted.fetch_or(bit, Ordering::Relaxed);
            }
        }
        if let Some(h) = self.hints.get(vcpu) {
            // ORed, not stored: a change hinted before must not read as a post alone.
            h.fetch_or(HINT_POSTED, Ordering::Release);
        }
        fence(Ordering::SeqCst);
        self.kick_one(vcpu);
        true
    }

    /// Whether some CPU holds the VM's lock now (for tests: it may change at once).
    pub fn is_locked(&self) -> bool {
        self.distributor.is_locked()
    }

    /// Where an image's exception vector finds, in a `VgicHandle`, what `post_sgi` uses
    /// (byte offsets): the posted word, GICv2's per source, the hints, the waiting flags, the
    /// CPU each vCPU runs on, and the mask of vCPUs that may be posted to (`posting_vcpus`,
    /// a u32).
    pub const POSTED_AT: usize = core::mem::offset_of!(Self, posted);
    pub const POSTED_BY_AT: usize = core::mem::offset_of!(Self, posted_by);
    pub const HINTS_AT: usize = core::mem::offset_of!(Self, hints);
    pub const WAITING_AT: usize = core::mem::offset_of!(Self, waiting);
    pub const RUNNING_ON_AT: usize = core::mem::offset_of!(Self, running_on);
    pub const POSTING_VCPUS_AT: usize = core::mem::offset_of!(Self, posting_vcpus);

    /// The vCPUs to which a write of ICC_SGI1R_EL1 or GICD_SGIR may post (`post_sgi`): the
    /// VM's, where the image posts SGIs.
    pub fn posting_vcpus(&self) -> u32 {
        self.posting_vcpus
    }

    /// Whether the VM's GIC is a GICv2, whose guest writes GICD_SGIR and whose SGIs are
    /// posted per source.
    pub fn posts_per_source(&self) -> bool {
        self.per_source
    }

    /// Makes the vCPUs in `mask` look at their interrupts: one running on another CPU
    /// leaves its guest, one waiting for an interrupt runs again. A vCPU of this CPU is in
    /// the hypervisor already and looks at its hint before it enters again.
    pub fn kick(&self, mask: u32) {
        // One vCPU (an IPI, a device's interrupt) without the walk of the mask, whose frame
        // (out of line) it would otherwise carry.
        if mask & mask.wrapping_sub(1) != 0 {
            return self.kick_each(mask);
        }
        if mask != 0 {
            self.kick_one(mask.trailing_zeros() as usize);
        }
    }

    #[inline(never)]
    fn kick_each(&self, mask: u32) {
        for v in VcpuMask(u64::from(mask)).iter() {
            self.kick_one(v);
        }
    }

    #[inline(always)]
    fn kick_one(&self, v: usize) {
        let (Some(waiting), Some(cpu)) = (self.waiting.get(v), self.running_on.get(v)) else { return };
        self.scheduling.wake(vcpu_ref(self.vm, v), waiting);
        let cpu = cpu.load(Ordering::Acquire);
        if cpu != usize::MAX && cpu != A::current_cpu() {
            A::kick_cpu(cpu);
        }
    }
    /// Something may have changed for the vCPUs in `mask`.
    pub fn hint(&self, mask: u32) {
        for h in VcpuMask(u64::from(mask)).iter().map_while(|v| self.hints.get(v)) {
            h.store(HINT_CHANGED, Ordering::Release);
        }
    }
    /// Something may have changed for vCPU `vcpu`: `hint` of one vCPU, one store instead of
    /// a walk of a mask (the exit path's physical interrupts, docs/performance.md).
    pub fn hint_vcpu(&self, vcpu: usize) {
        if let Some(h) = self.hints.get(vcpu) {
            h.store(HINT_CHANGED, Ordering::Release);
        }
    }
    /// Whether vCPU `vcpu` has a hint to take (it stays there).
    pub fn is_hinted(&self, vcpu: usize) -> bool {
        self.hints.get(vcpu).is_some_and(|h| h.load(Ordering::Relaxed) != 0)
    }
    /// vCPU `vcpu`'s hint as it is now (for tests).
    pub fn hint_of(&self, vcpu: usize) -> u8 {
        self.hints.get(vcpu).map_or(0, |h| h.load(Ordering::Relaxed))
    }
    /// A new distributor (a SYSTEM_RESET's), with its control words copied under its lock.
    /// A VM whose LPIs the board injects keeps that: the last boot's mappings are discarded
    /// on the board, and the fresh distributor starts with none.
    pub fn replace_distributor(&self, mut fresh: Distributor) {
        let mut vgic = self.lock();
        if let Some((board, direct)) = self.board() {
            vgic.release_direct(|c| self.count_failure(board.apply(direct, c)));
            // Allocated as the VM's first was; without it the LPIs go back to the vGIC,
            // which the board then never raises.
            let _ = fresh.inject_lpis_directly();
        }
        *vgic = fresh;
        self.control_words.refresh(&vgic);
    }

    pub fn take_hint(&self, vcpu: usize) -> bool {
        // A plain load first: the common case (no hint) costs no atomic read-modify-write.
        self.hints.get(vcpu).is_some_and(|h| h.load(Ordering::Relaxed) != 0 && h.swap(0, Ordering::AcqRel) != 0)
    }
}

/// The VM's vPEs and events given back to the board once nothing reaches its vGIC: no vCPU
/// runs and no device raises its LPIs.
impl<A: Arch> Drop for VgicHandle<A> {
    fn drop(&mut self) {
        if let Some((board, direct)) = self.board() {
            self.distributor.lock().release_direct(|c| {
                let _ = board.apply(direct, c);
            });
            board.detach(direct);
        }
    }
}

pub type SharedVgic<A> = Arc<VgicHandle<A>>;

/// The vCPUs a posted word names (8 bits a vCPU: vgic::posted_sgi_bit).
fn vcpus_of(posted: u64) -> u32 {
    (0..MAX_VCPUS).filter(|&v| posted >> (v * vgic::POSTED_SGIS as usize) & 0xff != 0).fold(0, |m, v| m | 1 << v)
}

/// A vCPU's hint: something else changed for it (any change of its interrupts, stored over
/// whatever was there: the run loop, which takes it, also delivers what was posted).
pub const HINT_CHANGED: u8 = 1;
/// A vCPU's hint: an SGI was posted to it (`post_sgi`, ORed in).
pub const HINT_POSTED: u8 = 2;

/// The vGIC's refusal as the bus's error. Cold and out of line: inlined, `map_err` matched
/// the read's whole result in a jump table, the `Ok` that every access returns among the
/// errors (docs/performance.md, "ARMv7").
#[cold]
#[inline(never)]
fn to_mmio(e: AccessError, width: AccessWidth) -> MmioError {
    match e {
        AccessError::BadWidth { offset, .. } | AccessError::Unaligned { offset, .. } => {
            MmioError::BadWidth { offset, width }
        }
        AccessError::OutsideFrame { offset } | AccessError::NotPresent { offset } | AccessError::NoIts { offset } => {
            MmioError::NoRegister { offset }
        }
        AccessError::NoSuchVcpu { .. } => MmioError::NoRegister { offset: 0 },
    }
}

/// The guest's accesses to its vGIC's windows, which the VM's data-abort path sends here
/// directly (the VM's `GuestMmio`): GICD, banked per accessing vCPU where the GIC version
/// banks registers, and GICR, one RD and one SGI frame per vCPU in vCPU order. Each out of
/// line: the exit path that calls them is inlined into the run loop, which should not carry
/// the registers the vGIC's decoders use.
impl<A: Arch> VgicHandle<A> {
    #[inline(never)]
    pub fn read_distributor(&self, vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.lock().read(vcpu, offset, width.bytes() as usize).map_err(|e| to_mmio(e, width))
    }

    #[inline(never)]
    pub fn write_distributor(&self, vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        // A GICv2 SGI to one other vCPU, posted.
        if A::POSTS_SGIS && self.per_source && offset == vgic::GICD_SGIR && width == AccessWidth::Word {
            let vcpus = self.posting_vcpus.count_ones() as usize;
            let target = vgic::single_sgir_target(value as u32, vcpu, vcpus);
            if target.is_some_and(|(target, intid)| self.post_sgi(vcpu, target, intid)) {
                return Ok(());
            }
        }
        let changed = {
            let mut vgic = self.lock();
            let written = vgic.write(vcpu, offset, width.bytes() as usize, value);
            self.control_words.after_write(&vgic, offset);
            written.map_err(|e| to_mmio(e, width))?;
            // A passthrough SPI the guest cleared (GICD_ICPENDR, GICD_ICACTIVER).
            deactivate_retired::<A>(&mut vgic);
            vgic.take_kicks().0 as u32
        };
        self.hint(changed);
        // GICv2 SGIs (GICD_SGIR) and pending bits set for others: make them look.
        self.kick(changed & !(1 << vcpu));
        Ok(())
    }

    /// A device's write of the distributor: an MSI's, of GICD_SETSPI_NSR. As a guest's
    /// write, but made by no vCPU, so every vCPU it changes is kicked, the one on this CPU
    /// (if any) by its hint.
    pub fn write_distributor_as_device(&self, offset: u64, value: u32) -> Result<(), MmioError> {
        let changed = {
            let mut vgic = self.lock();
            vgic.write(0, offset, 4, u64::from(value)).map_err(|e| to_mmio(e, AccessWidth::Word))?;
            vgic.take_kicks().0 as u32
        };
        self.hint(changed);
        self.kick(changed);
        Ok(())
    }

    /// An edge on SPI `intid` from a device (a GICv2m frame's MSI): pending until taken,
    /// every vCPU it changes kicked as by `write_distributor_as_device`.
    pub fn inject_edge_as_device(&self, intid: vgic::IntId) {
        let changed = {
            let mut vgic = self.lock();
            if vgic.inject_edge(intid, 0).is_err() {
                return;
            }
            vgic.take_kicks().0 as u32
        };
        self.hint(changed);
        self.kick(changed);
    }

    /// A guest read of the ITS's frames, after the next commands waiting in the VM's `ram`
    /// have run; every vCPU whose LPIs they changed looks again.
    pub fn read_its(
        &self,
        offset: u64,
        width: AccessWidth,
        ram: &impl vgic::GuestMemory,
    ) -> Result<(u64, vgic::CommandErrors), MmioError> {
        let (read, changed) = {
            let mut vgic = self.lock();
            let read = vgic.read_its(offset, width.bytes() as usize, ram).map_err(|e| to_mmio(e, width))?;
            self.sync_direct(&mut vgic);
            (read, vgic.take_kicks().0 as u32)
        };
        self.hint(changed);
        self.kick(changed);
        Ok(read)
    }

    /// A guest write of the ITS's frames: a GITS_CWRITER write runs the commands it
    /// queued in the VM's `ram`; every vCPU whose LPIs they changed looks again.
    pub fn write_its(
        &self,
        offset: u64,
        width: AccessWidth,
        value: u64,
        ram: &impl vgic::GuestMemory,
    ) -> Result<vgic::CommandErrors, MmioError> {
        let (errors, changed) = {
            let mut vgic = self.lock();
            let errors = vgic.write_its(offset, width.bytes() as usize, value, ram).map_err(|e| to_mmio(e, width))?;
            self.sync_direct(&mut vgic);
            (errors, vgic.take_kicks().0 as u32)
        };
        self.hint(changed);
        self.kick(changed);
        Ok(errors)
    }

    /// A device's MSI to the VM's ITS: the LPI it translates to made pending, its vCPU
    /// kicked as by `write_distributor_as_device`.
    pub fn send_msi_as_device(&self, device_id: u32, event_id: u32) -> Result<(), vgic::MsiError> {
        let changed = {
            let mut vgic = self.lock();
            vgic.send_msi(device_id, event_id)?;
            self.sync_direct(&mut vgic);
            vgic.take_kicks().0 as u32
        };
        self.hint(changed);
        self.kick(changed);
        Ok(())
    }

    #[inline(never)]
    pub fn read_redistributor(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.lock().read_redistributor(offset, width.bytes() as usize).map_err(|e| to_mmio(e, width))
    }

    /// A guest write of the redistributors; `ram` is the VM's, where setting
    /// GICR_CTLR.EnableLPIs reads the LPI configuration table.
    #[inline(never)]
    pub fn write_redistributor(
        &self,
        offset: u64,
        width: AccessWidth,
        value: u64,
        ram: &impl vgic::GuestMemory,
    ) -> Result<(), MmioError> {
        let changed = {
            let mut vgic = self.lock();
            vgic.write_redistributor_in(offset, width.bytes() as usize, value, ram).map_err(|e| to_mmio(e, width))?;
            self.sync_direct(&mut vgic);
            vgic.take_kicks().0 as u32
        };
        self.hint(changed);
        // Any vCPU's frames are the guest's to write: a pending bit set in another's must
        // reach it where it runs or waits (the writer's own kick sends nothing).
        self.kick(changed);
        Ok(())
    }
}

/// The VM's RAM as its vGIC reads it: the ITS's command queue, the LPI configuration
/// table.
pub struct GicRam<'a, R: vdev::virtio::GuestMemory>(pub &'a R);

impl<R: vdev::virtio::GuestMemory> vgic::GuestMemory for GicRam<'_, R> {
    fn read(&self, ipa: u64, buf: &mut [u8]) -> Result<(), vgic::OutsideRam> {
        self.0.read(ipa, buf).map_err(|_| vgic::OutsideRam)
    }
}

/// Deactivates at the board's GIC the passthrough SPIs whose virtual state the guest
/// discarded (vgic::Distributor::deactivate_retired), after any step that may have: a
/// write of the distributor, a plan or a `put` of list registers.
#[inline(always)]
pub(crate) fn deactivate_retired<A: Arch>(vgic: &mut vgic::Distributor) {
    if vgic.has_retired() {
        deactivate_retired_now::<A>(vgic);
    }
}

#[cold]
#[inline(never)]
fn deactivate_retired_now<A: Arch>(vgic: &mut vgic::Distributor) {
    vgic.deactivate_retired(|physical| A::deactivate_spi(physical.0));
}

/// An interrupt line of a VM's device into its vGIC: a level change makes the target vCPU
/// look at its interrupts (kicked out of its guest if it runs on another CPU).
pub struct VgicLine<A: Arch> {
    pub vgic: SharedVgic<A>,
    pub intid: vgic::IntId,
}

impl<A: Arch> vdev::pl011::InterruptLine for VgicLine<A> {
    fn set_level(&mut self, high: bool) {
        let targets = {
            let mut vgic = self.vgic.lock();
            let _ = vgic.set_level(self.intid, 0, high);
            vgic.take_kicks().0 as u32
        };
        self.vgic.hint(targets);
        self.vgic.kick(targets);
    }
}
