//! One vCPU's list registers, kept per vCPU (never a shared "current" state that would leak
//! from one vCPU to the next: khypervisor issue 25), and the three moments the arch crate
//! calls: `flush_to_hw` before entering the guest, `sync_from_hw` after it exits, `put`
//! before the vCPU leaves its physical CPU.
//!
//! The vCPU's list-register state ([`VcpuInterfaceState`]) is not part of the
//! [`Distributor`]: the hypervisor keeps it under the vCPU's own lock, which only the CPU the
//! vCPU runs on takes, and hands it to these calls beside the distributor. An exit whose
//! list registers came back as they went in ([`VcpuInterfaceState::came_back_unchanged`])
//! needs that state only, not the VM-wide distributor (docs/vgic.md, "Locks").
//!
//! The software state is the truth while the vCPU is stopped: on exit each list register
//! this vCPU owns is taken back (read only if the empty and EOI status registers do not
//! already say it is empty), and on entry the planner decides what to write.

use crate::distributor::{NO_OWNER, PARKED};
use crate::line::{AssumeAsserted, LineSampler, RetiredLines};
use crate::lr::{GichLr, IchLr, ListRegister, ListRegisters, LrState, Maintenance};
use crate::mask::set_bits32;
use crate::planner::{active_left_out, ListRegisterPlanner, LrAction, LrPlan, LrSnapshot};
use crate::wanted::WantedList;
use crate::{Distributor, GicVersion, IntId, VgicError, MAX_LIST_REGISTERS};

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct VcpuInterfaceState {
    /// What the list registers this vCPU holds contain (raw, as last written or read back);
    /// 0: not this vCPU's.
    pub(crate) lr: [u64; MAX_LIST_REGISTERS],
    /// Bit n set: `lr[n]` is not 0. Kept with `lr` (by `set_lr`, its only writer) because
    /// every exit and entry asks, and a scan of the sixteen would cost more than the rest
    /// of a short exit.
    owned: u16,
    /// Bit n set: `lr[n]` shows a hardware-mapped interrupt pending (its input is sampled
    /// after each exit). Kept by `set_lr`.
    hw_pending: u16,
    /// The maintenance interrupts last asked for.
    maintenance: Maintenance,
}

impl VcpuInterfaceState {
    /// A vCPU that holds no list register (the `Default`).
    pub const EMPTY: VcpuInterfaceState =
        VcpuInterfaceState { lr: [0; MAX_LIST_REGISTERS], owned: 0, hw_pending: 0, maintenance: Maintenance::NONE };

    /// Bit n set: list register n holds one of this vCPU's interrupts.
    pub fn owned(&self) -> u32 {
        u32::from(self.owned)
    }
    pub fn in_use(&self) -> usize {
        self.owned.count_ones() as usize
    }
    pub fn maintenance(&self) -> Maintenance {
        self.maintenance
    }
    /// Records what list register `i` holds; `lr` is `raw` decoded.
    // Inlined, as `placed`: a call from the plan's fast path (`flush_one`) cost it a frame.
    #[inline(always)]
    pub(crate) fn set_lr(&mut self, i: usize, raw: u64, lr: &ListRegister) {
        if let Some(slot) = self.lr.get_mut(i) {
            *slot = raw;
            let bit = 1 << i;
            if raw == 0 {
                self.owned &= !bit;
            } else {
                self.owned |= bit;
            }
            if raw != 0 && lr.hw.is_some() && lr.state == LrState::Pending {
                self.hw_pending |= bit;
            } else {
                self.hw_pending &= !bit;
            }
        }
    }

    /// List register `i` holds nothing of this vCPU's any more (`set_lr` with 0, without
    /// looking at a decoded register).
    pub(crate) fn clear_lr(&mut self, i: usize) {
        if let Some(slot) = self.lr.get_mut(i) {
            *slot = 0;
            self.owned &= !(1 << i);
            self.hw_pending &= !(1 << i);
        }
    }

    /// After an exit: whether this vCPU holds at most one list register and that one (if
    /// any) came back empty, the case of `Distributor::take_back_one_and_plan`; asked before
    /// the distributor's lock is taken.
    pub fn holds_at_most_one_emptied(&self, lrs: &impl ListRegisters) -> bool {
        let owned = self.owned();
        owned & owned.wrapping_sub(1) == 0 && lrs.empty_status() & owned == owned
    }

    /// After an exit: whether every list register this vCPU holds came back as it went in
    /// (the guest took nothing, completed nothing) and none of them shows a hardware-mapped
    /// interrupt still pending, whose input `sync_from_hw_sampling` would sample. Then
    /// `sync_from_hw_sampling` would change nothing and return `false`, so the exit need not
    /// call it, nor take the lock of the distributor it needs. Reads the list registers that
    /// the empty and EOI status registers do not already say are empty.
    pub fn came_back_unchanged(&self, lrs: &impl ListRegisters) -> bool {
        let owned = self.owned();
        if owned == 0 {
            return true;
        }
        // An active interrupt left out of the list registers: the guest may have deactivated
        // it, which only EOIcount says (`take_back`).
        if self.hw_pending != 0
            || self.maintenance.entry_not_present
            || (lrs.empty_status() | lrs.eoi_status()) & owned != 0
        {
            return false;
        }
        set_bits32(owned).all(|i| lrs.read_lr(i) == self.lr[i])
    }
}

#[inline(always)]
pub(crate) fn set_maintenance(state: &mut VcpuInterfaceState, lrs: &mut impl ListRegisters, m: Maintenance) {
    if state.maintenance != m {
        state.maintenance = m;
        lrs.set_maintenance(m);
    }
}

impl Distributor {
    pub(crate) fn decode(&self, raw: u64) -> ListRegister {
        match self.version {
            GicVersion::V3 => IchLr(raw).decode(),
            GicVersion::V2 => GichLr(raw as u32).decode(),
        }
    }
    #[inline(always)]
    pub(crate) fn encode(&self, lr: &ListRegister) -> u64 {
        match self.version {
            GicVersion::V3 => IchLr::encode(lr).0,
            GicVersion::V2 => u64::from(GichLr::encode(lr).0),
        }
    }
    /// The virtual INTID an encoded list register shows, without decoding the rest.
    pub(crate) fn vintid_of(&self, raw: u64) -> u32 {
        match self.version {
            GicVersion::V3 => IchLr(raw).vintid(),
            GicVersion::V2 => GichLr(raw as u32).vintid(),
        }
    }
    /// Whether an encoded list register asks for the EOI maintenance interrupt (HW = 0, EOI
    /// = 1), without decoding the rest.
    pub(crate) fn asks_eoi_maintenance(&self, raw: u64) -> bool {
        match self.version {
            GicVersion::V3 => !IchLr(raw).hw() && raw & (1 << 41) != 0,
            GicVersion::V2 => !GichLr(raw as u32).hw() && raw & (1 << 19) != 0,
        }
    }
    /// Whether an encoded list register has HW = 1, without decoding the rest.
    pub(crate) fn is_hw(&self, raw: u64) -> bool {
        match self.version {
            GicVersion::V3 => IchLr(raw).hw(),
            GicVersion::V2 => GichLr(raw as u32).hw(),
        }
    }

    /// Before entering `vcpu`: puts its highest-priority interrupts in the list registers
    /// (writing only those that change) and asks for a maintenance interrupt when more wait.
    /// With nothing to show and nothing shown, it touches no list register.
    pub fn flush_to_hw(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> Result<(), VgicError> {
        self.check_vcpu(vcpu)?;
        self.flush_checked(vcpu, state, lrs);
        Ok(())
    }

    /// `flush_to_hw` for a vCPU already checked: the fast path inlined into the caller (a
    /// call of its own cost a frame of every callee-saved register), the general path not.
    #[inline(always)]
    pub(crate) fn flush_checked(&mut self, vcpu: usize, state: &mut VcpuInterfaceState, lrs: &mut impl ListRegisters) {
        // A take-back drops every register the guest emptied from the record: one still
        // held here means the plan would start from a record older than the registers (a
        // completed interrupt rewritten as active, docs/vgic.md, "QEMU's GICv2 and the timer
        // of a pinned vCPU"). Checked in the host tests only: the read of the empty status
        // costs every plan.
        debug_assert_eq!(
            state.owned() & lrs.empty_status(),
            0,
            "vCPU {vcpu}: planned from a record of list registers the guest has emptied since (take them back first)"
        );
        if !self.flush_one(vcpu, state, lrs) {
            self.flush_general(vcpu, state, lrs);
        }
    }

    /// `flush_to_hw` without its fast path (`flush_one`), for the tests that check the fast
    /// path writes what the general one would.
    #[doc(hidden)]
    pub fn flush_to_hw_general(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> Result<(), VgicError> {
        self.check_vcpu(vcpu)?;
        self.flush_general(vcpu, state, lrs);
        Ok(())
    }

    /// `flush_to_hw`'s fast path alone: `false` (and nothing written) where it would take
    /// the general path. For the tests.
    #[doc(hidden)]
    pub fn flush_to_hw_fast(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> Result<bool, VgicError> {
        self.check_vcpu(vcpu)?;
        Ok(self.flush_one(vcpu, state, lrs))
    }

    /// The fast path of `flush_to_hw` (docs/vgic.md, "One interrupt in place"): when the
    /// vCPU holds at most one list register, no SPI may be busy (`live_spis` empty, once
    /// its quiet ones are forgotten) and at most one of its private interrupts may be (its
    /// `live` mask, likewise), what the planner would decide is known without building its
    /// inputs:
    /// - nothing wanted and nothing held: no list register is touched, no maintenance;
    /// - one wanted, none held: it goes into the first empty list register (`fill_empty`);
    /// - one wanted, and the one held is the same INTID: that register is kept, or rewritten
    ///   in place if its state changed (the planner's resident rule).
    ///
    /// Every other case (more wanted or held, a held register that shows another INTID or
    /// is no longer wanted, no empty register) returns `false` and takes the general path.
    /// Whatever it writes, the general path would have written the same registers with the
    /// same contents and asked for the same maintenance interrupts (`tests/robustness.rs`,
    /// `the_fast_path_writes_what_the_general_one_would`).
    #[inline(always)]
    fn flush_one(&mut self, vcpu: usize, state: &mut VcpuInterfaceState, lrs: &mut impl ListRegisters) -> bool {
        let owned = state.owned();
        if owned & owned.wrapping_sub(1) != 0 {
            return false;
        }
        // Quiet interrupts are forgotten (`forget_quiet`) only where one could send the plan
        // down the general path: a live SPI, or more than one live private interrupt. A
        // single quiet one is wanted by nobody and forgotten below.
        if !self.live_spis.0.is_empty() {
            self.forget_quiet_spis();
            if !self.live_spis.0.is_empty() {
                return false;
            }
        }
        let Some(rd) = self.redistributors.get_mut(vcpu) else { return false };
        let mut live = rd.live();
        if live & live.wrapping_sub(1) != 0 {
            rd.forget_quiet();
            live = rd.live();
            if live & live.wrapping_sub(1) != 0 {
                return false;
            }
        }
        let Some(rd) = self.redistributors.get(vcpu) else { return false };
        let want = if live == 0 { None } else { self.want_private_of(rd, live.trailing_zeros()) };
        let Some(w) = want else {
            if let Some(rd) = self.redistributors.get_mut(vcpu).filter(|_| live != 0) {
                rd.forget_quiet();
            }
            if owned != 0 {
                return false;
            }
            set_maintenance(state, lrs, Maintenance::NONE);
            return true;
        };
        // Compared and written encoded: the list registers hold what `encode` wrote, with
        // only their state changed by the guest, and a wanted interrupt encodes and decodes
        // back to itself, so equal encodings are equal registers (`old == w.lr` of the
        // planner's resident rule) without decoding the old one.
        let raw = self.encode(&w.lr);
        let m = Maintenance { no_pending: w.refill_on_ack && w.lr.state == LrState::Pending, ..Maintenance::NONE };
        let count = lrs.count().min(MAX_LIST_REGISTERS);
        let i = if owned == 0 {
            // `count` is at most 16.
            let free = lrs.empty_status() & ((1 << count) - 1);
            if free == 0 {
                return false;
            }
            free.trailing_zeros() as usize
        } else {
            let i = owned.trailing_zeros() as usize;
            if i >= count || self.vintid_of(state.lr[i]) != w.lr.vintid.0 {
                return false;
            }
            i
        };
        self.placed(vcpu, &w.lr);
        if state.lr[i] != raw {
            state.set_lr(i, raw, &w.lr);
            lrs.write_lr(i, raw);
        }
        set_maintenance(state, lrs, m);
        true
    }

    /// The general plan of `flush_to_hw`. Out of line: its lists take about 1.3 KiB of stack
    /// and most callee-saved registers, which the fast path (`flush_one`) would otherwise pay
    /// for on every entry.
    #[inline(never)]
    fn flush_general(&mut self, vcpu: usize, state: &mut VcpuInterfaceState, lrs: &mut impl ListRegisters) {
        self.forget_quiet(vcpu);
        // Only the implemented list registers are looked at (QEMU and the GIC-400 have 4),
        // and no more wanted interrupts are kept than they could show.
        let count = lrs.count().min(MAX_LIST_REGISTERS);
        if count <= 4 && state.owned() >> 4 == 0 {
            self.flush_wanted::<4>(vcpu, state, lrs, count);
        } else {
            self.flush_wanted::<MAX_LIST_REGISTERS>(vcpu, state, lrs, count);
        }
    }

    fn flush_wanted<const N: usize>(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
        count: usize,
    ) {
        let mut wanted = WantedList::<N>::new();
        self.wanted(vcpu, &mut wanted);
        let owned_mask = state.owned();
        if wanted.is_empty() && owned_mask == 0 {
            set_maintenance(state, lrs, Maintenance::default());
            return;
        }
        if owned_mask == 0 {
            self.fill_empty(vcpu, state, lrs, &wanted, count);
            return;
        }
        // The vCPU's list registers decoded, and the plan, for the first N only (4 on QEMU and
        // the GIC-400): `flush_to_hw` takes N = 4 only when `count` and every list register
        // the vCPU holds are below 4.
        let mut owned = [None; N];
        for i in set_bits32(owned_mask) {
            if let Some(o) = owned.get_mut(i) {
                *o = Some(self.decode(state.lr[i]));
            }
        }
        let owned = &owned[..count.max(32 - owned_mask.leading_zeros() as usize).min(N)];
        let snapshot = LrSnapshot {
            count,
            empty: lrs.empty_status(),
            owned,
            wanted: wanted.as_slice(),
            more_waiting: wanted.more_waiting(),
            more_waiting_active: wanted.more_waiting_active(),
        };
        let mut plan = LrPlan::<N>::default();
        ListRegisterPlanner::plan_into(&snapshot, &mut plan);
        for (i, old) in owned.iter().enumerate() {
            match plan.action(i) {
                LrAction::Keep => {
                    if let Some(lr) = old {
                        self.placed(vcpu, lr);
                    }
                }
                LrAction::Write(lr) => {
                    if let Some(old) = old.filter(|o| o.vintid != lr.vintid) {
                        self.released(vcpu, &old);
                    }
                    self.placed(vcpu, &lr);
                    let raw = self.encode(&lr);
                    state.set_lr(i, raw, &lr);
                    lrs.write_lr(i, raw);
                }
                LrAction::Spill => {
                    if let Some(old) = old {
                        self.released(vcpu, old);
                    }
                    state.clear_lr(i);
                    lrs.write_lr(i, 0);
                }
            }
        }
        set_maintenance(state, lrs, plan.maintenance);
    }

    /// `flush_to_hw` when `vcpu` holds no list register (the common case of an interrupt
    /// arriving for a vCPU that had none): what the planner decides then, without building
    /// its inputs. The best wanted interrupts go into the empty list registers in order; the
    /// underflow maintenance interrupt is asked for if some did not fit, the no-pending one
    /// if a GICv2 SGI has more sources waiting (`ListRegisterPlanner::plan` with no owned
    /// list register: `tests/planner.rs` states the rule, `tests/robustness.rs` runs both).
    fn fill_empty<const N: usize>(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
        wanted: &WantedList<N>,
        count: usize,
    ) {
        let empty = lrs.empty_status();
        let mut free = (0..count).filter(|&i| empty & (1 << i) != 0);
        let (mut shown, mut no_pending) = (0, false);
        for w in wanted.as_slice() {
            let Some(i) = free.next() else { break };
            self.placed(vcpu, &w.lr);
            let raw = self.encode(&w.lr);
            state.set_lr(i, raw, &w.lr);
            lrs.write_lr(i, raw);
            shown += 1;
            no_pending |= w.refill_on_ack && w.lr.state == LrState::Pending;
        }
        let overflow = wanted.as_slice().len() > shown || wanted.more_waiting();
        let entry_not_present = active_left_out(wanted.as_slice(), shown, wanted.more_waiting_active());
        set_maintenance(state, lrs, Maintenance { underflow: overflow && count > 0, no_pending, entry_not_present });
    }

    /// After `vcpu` exits: takes back the state of the list registers it owns. An empty one
    /// means the guest deactivated the interrupt: a level line is sampled again at the next
    /// entry, the next source of a GICv2 SGI comes in. A hardware-mapped interrupt's
    /// deactivation already reached the physical GIC. Returns whether the next entry must
    /// plan the list registers again: after any change but one, an interrupt the guest only
    /// acknowledged (pending to active) while nothing else waited (no maintenance interrupt
    /// asked for), for which the planner would keep every list register as it is (an active
    /// interrupt is shown active, as its register now shows it). If nothing else changed,
    /// and nothing new was raised (the hypervisor's hint), the next entry need not look
    /// again. (Planning only when something waited, or a completed interrupt was pending
    /// again, was measured: the Linux boot took 30 M instructions more, docs/performance.md.)
    pub fn sync_from_hw(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> Result<bool, VgicError> {
        self.sync_from_hw_sampling(vcpu, state, lrs, &mut AssumeAsserted, &mut RetiredLines::default())
    }

    /// `sync_from_hw`, and then the input of every hardware-mapped level-sensitive interrupt
    /// that a list register still shows pending (the guest has not taken it) is sampled: if
    /// it went low, the interrupt is no longer pending (IHI 0069H 4.1: a level-sensitive
    /// interrupt is pending while its input is asserted; a guest that turned its timer off
    /// or cleared its device's interrupt with interrupts masked must not take it later). Its
    /// list register is emptied, and its physical interrupt, which the hypervisor holds
    /// active, goes into `retired` for the hypervisor to deactivate.
    pub fn sync_from_hw_sampling(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
        sampler: &mut impl LineSampler,
        retired: &mut RetiredLines,
    ) -> Result<bool, VgicError> {
        let mut changed = self.take_back(vcpu, state, lrs, retired)?;
        for i in set_bits32(state.owned() & u32::from(state.hw_pending)) {
            let lr = self.decode(state.lr[i]);
            let (Some(physical), LrState::Pending) = (lr.hw, lr.state) else { continue };
            let Some(&s) = self.irq(vcpu, lr.vintid.0) else { continue };
            if s.edge() || s.latch() || s.lr_pending() || sampler.is_asserted(lr.vintid, IntId(physical)) {
                continue;
            }
            if let Some(s) = self.irq_mut(vcpu, lr.vintid.0) {
                s.set_line(false);
            }
            self.release_owner(vcpu, lr.vintid.0);
            state.clear_lr(i);
            lrs.write_lr(i, 0);
            retired.push(IntId(physical));
            changed = true;
        }
        Ok(changed)
    }

    /// The list-register part of `sync_from_hw`.
    pub(crate) fn take_back(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
        retired: &mut RetiredLines,
    ) -> Result<bool, VgicError> {
        self.check_vcpu(vcpu)?;
        let unlisted = if state.maintenance.entry_not_present { self.deactivations_counted(lrs) } else { 0 };
        let owned = state.owned();
        if owned == 0 && unlisted == 0 {
            return Ok(false);
        }
        let done = lrs.empty_status() | lrs.eoi_status();
        // Nothing was left waiting when they were last planned (no maintenance interrupt
        // asked for): an acknowledgement alone then changes nothing the planner would write.
        let nothing_waits = state.maintenance == Maintenance::NONE;
        let mut changed = false;
        for i in set_bits32(owned) {
            let raw = if done & (1 << i) != 0 { 0 } else { lrs.read_lr(i) };
            if raw == state.lr[i] {
                continue;
            }
            let old = self.decode(state.lr[i]);
            let now = self.decode(raw);
            let completed = now.state == LrState::Invalid;
            changed |= !(nothing_waits && old.state == LrState::Pending && now.state == LrState::Active);
            if completed && old.eoi_maintenance {
                // Clears the EOI status, or the maintenance interrupt would stay asserted.
                lrs.write_lr(i, 0);
            }
            self.fold(vcpu, old.vintid.0, now.state);
            if completed {
                state.clear_lr(i);
            } else {
                state.set_lr(i, raw, &now);
            }
        }
        if unlisted != 0 {
            // After the list registers' own deactivations are folded: what is active and
            // not shown is what the guest's counted deactivations were for.
            self.deactivate_unlisted(vcpu, state, unlisted, retired);
            changed = true;
        }
        Ok(changed)
    }

    /// Before `vcpu` leaves its physical CPU (or another vCPU uses these list registers):
    /// takes its state back and empties its list registers. The arch crate saves and
    /// restores the rest of the virtual CPU interface (ICH_VMCR_EL2 and ICH_AP*R / GICH_VMCR
    /// and GICH_APR) itself.
    pub fn put(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> Result<(), VgicError> {
        self.sync_from_hw(vcpu, state, lrs)?;
        let owned = state.owned();
        for i in set_bits32(owned) {
            let old = self.decode(state.lr[i]);
            self.released(vcpu, &old);
            state.clear_lr(i);
            lrs.write_lr(i, 0);
        }
        set_maintenance(state, lrs, Maintenance::default());
        Ok(())
    }

    fn set_owner(&mut self, intid: u32, owner: u8) {
        if let Some(o) = self.shared_slot(intid).and_then(|s| self.spi_owner.get_mut(s)) {
            *o = owner;
        }
    }

    /// `lr` is (still) in one of `vcpu`'s list registers: a pending state it shows moves
    /// out of the software latch (so an edge, or a GICD_ISPENDR write, arriving later is a
    /// new one); one it no longer shows goes back to the latch. A level interrupt's line is
    /// not a latch: its pending state stays the line's.
    // Inlined into the plan's fast path (`flush_one`): out of line, the list register it is
    // given went through memory and the fast path saved six register pairs for the call.
    #[inline(always)]
    fn placed(&mut self, vcpu: usize, lr: &ListRegister) {
        let intid = lr.vintid.0;
        self.set_owner(intid, vcpu as u8);
        if !lr.state.pending() {
            self.return_pending(vcpu, intid);
        } else if self.is_v2_sgi(intid) {
            self.redistributors[vcpu].sgi_to_lr(intid, lr.source);
        } else if let Some(s) = self.irq_mut(vcpu, intid).filter(|s| s.edge() || s.latch()) {
            s.set_latch(false);
            s.set_lr_pending(true);
        }
        if self.is_v2_sgi(intid) {
            self.redistributors[vcpu].sgi_lr_source[intid as usize] = lr.source & 7;
        }
    }

    /// `old` leaves `vcpu`'s list registers: spilled for a higher-priority interrupt, or no
    /// longer deliverable here, or the vCPU leaves its CPU (`put`). Its pending state goes
    /// back to software; an active state stays in the software state, and an active SPI
    /// stays this vCPU's (`PARKED`), so `wanted` shows it here again and nowhere else. An
    /// LPI's active state ends instead (`crate::lpi`: no EOI would reach it).
    pub(crate) fn released(&mut self, vcpu: usize, old: &ListRegister) {
        let intid = old.vintid.0;
        self.return_pending(vcpu, intid);
        let slot = self.shared_slot(intid).unwrap_or(usize::MAX);
        if self.is_lpi_slot(slot) {
            if let Some(s) = self.irq_mut(vcpu, intid) {
                s.set_active(false);
            }
        }
        if self.spi.get(slot).is_some_and(|s| s.active()) && self.spi_owner.get(slot) == Some(&(vcpu as u8)) {
            self.set_owner(intid, vcpu as u8 | PARKED);
        } else {
            self.release_owner(vcpu, intid);
        }
        // Shown pending, its physical interrupt active, but cleared since (GICD_ICPENDR):
        // no deactivation will reach that one now.
        self.retire_if_discarded(intid);
    }

    /// Whether a vCPU's list register holds SPI `intid` (not one it left active, `PARKED`).
    pub(crate) fn in_list_register(&self, intid: u32) -> bool {
        let owner = self.shared_slot(intid).and_then(|s| self.spi_owner.get(s));
        owner.is_some_and(|&o| o != NO_OWNER && o & PARKED == 0)
    }

    /// An SPI that left a vCPU's list registers active (`PARKED`) was deactivated
    /// otherwise (GICD_ICACTIVER): it is that vCPU's no longer.
    pub(crate) fn unpark(&mut self, intid: u32) {
        if let Some(o) = self.shared_slot(intid).and_then(|s| self.spi_owner.get_mut(s)) {
            if *o != NO_OWNER && *o & PARKED != 0 {
                *o = NO_OWNER;
            }
        }
    }

    // Inlined: a private interrupt's fold (an IPI's, the timer's) tests its INTID and goes
    // on, where a call cost a kick's exit about 10 instructions.
    #[inline(always)]
    fn release_owner(&mut self, vcpu: usize, intid: u32) {
        if intid >= 32 && self.shared_slot(intid).and_then(|s| self.spi_owner.get(s)) == Some(&(vcpu as u8)) {
            self.release_spi(vcpu, intid);
        }
    }

    #[inline(never)]
    fn release_spi(&mut self, vcpu: usize, intid: u32) {
        self.set_owner(intid, NO_OWNER);
        // Still pending, and routed to another vCPU since (GICD_IROUTER<n>, IHI 0069H 12.9;
        // GICD_ITARGETSR<n>, IHI 0048B 4.3.12): that vCPU may have looked while this one
        // held it, found it not its own, and gone to sleep. It looks again.
        let busy = self.shared_slot(intid).and_then(|s| self.spi.get(s)).is_some_and(|s| !s.quiet());
        if let Some(target) = self.target(vcpu, intid).filter(|&t| busy && t != vcpu) {
            self.kicks.insert(target);
        }
    }

    fn return_pending(&mut self, vcpu: usize, intid: u32) {
        if self.is_v2_sgi(intid) {
            self.redistributors[vcpu].sgi_from_lr(intid);
        } else if let Some(s) = self.irq_mut(vcpu, intid).filter(|s| s.lr_pending()) {
            s.set_lr_pending(false);
            s.set_latch(true);
        }
    }

    /// The state a list register that showed `intid` came back with.
    // Inlined into the one-register take-back with plan (`take_back_one_and_plan`), a
    // kick's exit: about 20 instructions of call and frame there.
    #[inline(always)]
    pub(crate) fn fold(&mut self, vcpu: usize, intid: u32, state: LrState) {
        if let Some(s) = self.irq_mut(vcpu, intid) {
            s.set_active(state.active());
            // A latched pending state the register took (`placed`) is still there, or was
            // consumed by the guest's acknowledgement; a level interrupt's line is what
            // remains, and a latch set since (an edge, a GICD_ISPENDR write while the guest
            // had it active) is a new pending state (IHI 0069H 4.1, "Interrupt lifecycle").
            s.set_lr_pending(state.pending() && s.lr_pending());
            if state == LrState::Invalid && s.hw().is_some() {
                // Deactivated, and with it the physical interrupt (HW = 1): if its input is
                // still asserted it fires again, and comes back as a new `set_level`, unless
                // it already did, on another CPU, before this take-back (`refired`).
                s.set_line(s.refired());
                s.set_refired(false);
            }
        }
        if state == LrState::Invalid {
            // Nothing pending is left to give back (`released` would find nothing): only
            // the SPI's owner goes.
            self.release_owner(vcpu, intid);
        }
    }
}
