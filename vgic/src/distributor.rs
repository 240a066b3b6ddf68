//! The vGIC of one VM: its configuration, the state of every interrupt (private ones per
//! vCPU, in its `Redistributor`), SPI routing, and the API for device models and timers.
//! Register emulation is in `gicd` and `gicr`, list registers in `interface`.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::gicr::Redistributor;
use crate::its::{Its, FIRST_LPI};
use crate::lpi::{MAX_LPIS, UNROUTED};
use crate::mask::{set_bits, Cache};
use crate::retired::RetiredSpis;
use crate::state::IrqState;
use crate::{IntId, VcpuMask, VgicError, MAX_LIST_REGISTERS, MAX_SPIS, MAX_VCPUS, MAX_VCPUS_V2};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GicVersion {
    V2,
    V3,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VgicConfig {
    pub version: GicVersion,
    pub vcpus: usize,
    /// SPIs (INTIDs from 32 up); rounded up to a multiple of 32, as GICD_TYPER.ITLinesNumber
    /// counts them, but never beyond INTID 1019.
    pub spis: usize,
    /// LPIs (INTIDs from 8192 up), translated by an ITS the VM gets with them; 0: no ITS.
    /// GICv3 only.
    pub lpis: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Trigger {
    Edge,
    Level,
}

/// One interrupt as a vCPU sees it (for the hypervisor's inspection and for tests).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct InterruptState {
    pub enabled: bool,
    pub pending: bool,
    pub active: bool,
    pub priority: u8,
    pub group1: bool,
    pub trigger: Trigger,
    pub hw: Option<IntId>,
}

/// No vCPU holds this SPI in a list register.
pub(crate) const NO_OWNER: u8 = u8::MAX;
/// Beside a vCPU in `spi_owner`: the SPI left that vCPU's list registers (`put`, or
/// spilled) while active. No list register shows it, yet its active state is still that
/// vCPU's: only the guest's deactivation there ends it (IHI 0069H 4.1, "Interrupt
/// lifecycle"), whatever the routing says since, which names where a pending interrupt
/// goes. Shown to another vCPU, whose guest never acknowledged it, it would stay active
/// for good.
pub(crate) const PARKED: u8 = 0x80;
const _: () = assert!(MAX_VCPUS <= PARKED as usize);

/// The vCPU an SPI belongs to whatever its routing, given its `spi_owner` entry: the one
/// whose list register holds it, or the one it stays active on (`PARKED`).
pub(crate) fn spi_holder(owner: u8, irq: IrqState) -> Option<usize> {
    match owner {
        NO_OWNER => None,
        o if o & PARKED == 0 => Some(usize::from(o)),
        o if irq.active() => Some(usize::from(o & !PARKED)),
        _ => None,
    }
}

/// GICD_IROUTER<n>.Interrupt_Routing_Mode: any participating PE (1 of N).
pub(crate) const IRM: u32 = 1 << 31;

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Distributor {
    pub(crate) version: GicVersion,
    pub(crate) vcpus: usize,
    pub(crate) spis: usize,
    pub(crate) lpis: usize,
    pub(crate) enable_grp0: bool,
    pub(crate) enable_grp1: bool,
    // Per shared interrupt (SPIs, then LPIs: `shared_slot`) and per vCPU (`vcpus` long).
    // On the heap: at 64 vCPUs and 988 SPIs they take 28 KiB, too much to move around on a
    // hypervisor stack.
    pub(crate) spi: Box<[IrqState]>,
    /// The shared interrupts that may not be quiet, so finding what to show a vCPU looks at
    /// those only.
    pub(crate) live_spis: Cache<LiveSpis>,
    /// GICv3: GICD_IROUTER<n> without Aff3 (GICD_TYPER.A3V = 0); GICv2: GICD_ITARGETSR<n>.
    /// An LPI's: the affinity of the vCPU its ITS collection names, or `UNROUTED`.
    pub(crate) route: Box<[u32]>,
    /// The vCPU whose list register holds the SPI, so no other vCPU shows it too.
    pub(crate) spi_owner: Box<[u8]>,
    pub(crate) redistributors: Box<[Redistributor]>,
    pub(crate) kicks: VcpuMask,
    /// Hardware-mapped SPIs whose physical interrupt the hypervisor must deactivate.
    pub(crate) retired: RetiredSpis,
    /// The ITS of a VM with LPIs (`crate::lpi`).
    pub(crate) its: Option<Its>,
    /// The board's part in the LPIs, when it injects them (`crate::direct`).
    pub(crate) direct: Option<Box<crate::direct::DirectLpis>>,
}

/// A bit per SPI, set whenever its state may have changed (every change goes through
/// `Distributor::irq_mut`) and cleared when it is found quiet; and a bit per word of those
/// that may be non-zero (`words`), so that asking whether any SPI may be busy, which every
/// entry that plans does, is one test, and forgetting the quiet ones visits only the words
/// that hold a bit (a VM of 988 SPIs has 16 words, all of them zero most of the time).
#[derive(Clone, Debug)]
pub(crate) struct LiveSpis {
    bits: Box<[u64]>,
    /// Bit w set: `bits[w]` may be non-zero (32 words at most: 988 SPIs and 1,024 LPIs).
    words: u32,
}

const _: () = assert!((MAX_SPIS + MAX_LPIS).div_ceil(64) <= 32);

impl LiveSpis {
    fn new(spis: usize) -> Result<LiveSpis, VgicError> {
        Ok(LiveSpis { bits: boxed(0, spis.div_ceil(64))?, words: 0 })
    }
    /// The set slots, in ascending order.
    pub(crate) fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        set_bits(u64::from(self.words))
            .filter_map(|w| Some((w, *self.bits.get(w)?)))
            .flat_map(|(w, bits)| set_bits(bits).map(move |b| w * 64 + b))
    }
    /// Clears the bits of the slots `quiet` says are quiet.
    fn forget(&mut self, quiet: impl Fn(usize) -> bool) {
        for w in set_bits(u64::from(self.words)) {
            let Some(word) = self.bits.get_mut(w) else { continue };
            for b in set_bits(*word) {
                if quiet(w * 64 + b) {
                    *word &= !(1 << b);
                }
            }
            if *word == 0 {
                self.words &= !(1 << w);
            }
        }
    }
    /// No SPI may be busy.
    pub(crate) fn is_empty(&self) -> bool {
        self.words == 0
    }
    fn mark(&mut self, slot: usize) {
        let w = slot / 64;
        if let Some(word) = self.bits.get_mut(w) {
            *word |= 1 << (slot % 64);
            self.words |= 1 << w;
        }
    }
}

/// `len` copies of `value` on the heap; running out of memory is an error, not an abort.
fn boxed<T: Clone>(value: T, len: usize) -> Result<Box<[T]>, VgicError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| VgicError::OutOfMemory)?;
    v.resize(len, value);
    Ok(v.into_boxed_slice())
}

impl Distributor {
    /// A vGIC with everything disabled, as after a GIC reset.
    pub fn new(config: VgicConfig) -> Result<Distributor, VgicError> {
        let max_vcpus = match config.version {
            GicVersion::V2 => MAX_VCPUS_V2,
            GicVersion::V3 => MAX_VCPUS,
        };
        if config.vcpus == 0 {
            return Err(VgicError::NoVcpus);
        }
        if config.vcpus > max_vcpus {
            return Err(VgicError::TooManyVcpus { requested: config.vcpus, max: max_vcpus });
        }
        if config.spis > MAX_SPIS {
            return Err(VgicError::TooManySpis { requested: config.spis, max: MAX_SPIS });
        }
        if config.lpis > 0 && config.version != GicVersion::V3 {
            return Err(VgicError::WrongVersion { needs: GicVersion::V3 });
        }
        if config.lpis > MAX_LPIS {
            return Err(VgicError::TooManyLpis { requested: config.lpis, max: MAX_LPIS });
        }
        let spis = config.spis.next_multiple_of(32).min(MAX_SPIS);
        let shared = spis + config.lpis;
        let mut private = [IrqState::default(); 32];
        for sgi in private.iter_mut().take(16) {
            // SGIs are edge-triggered: GICD_ICFGR0 / GICR_ICFGR0 are read-only.
            sgi.set_edge(true);
            // GICv2: SGI enable bits are RAO/WI here (IHI 0048B 4.3.5 lets an implementation
            // choose), as on GIC-400.
            sgi.set_enabled(config.version == GicVersion::V2);
        }
        let mut spi = boxed(IrqState::default(), shared)?;
        // GICv2: CPU 0; GICv3: affinity 0.0.0.0, that is vCPU 0 (reset values are
        // UNKNOWN; these make a guest that never routes its SPIs still work).
        let mut route = boxed(if config.version == GicVersion::V2 { 1 } else { 0 }, shared)?;
        for (lpi, r) in spi.iter_mut().zip(route.iter_mut()).skip(spis) {
            // LPIs are edge-triggered Group 1 interrupts (IHI 0069H 5.1), reaching no vCPU
            // until an ITS command maps one.
            lpi.set_edge(true);
            lpi.set_group1(true);
            *r = UNROUTED;
        }
        let its = if config.lpis > 0 {
            Some(Its::new(config.vcpus, config.lpis as u32).map_err(|_| VgicError::OutOfMemory)?)
        } else {
            None
        };
        Ok(Distributor {
            version: config.version,
            vcpus: config.vcpus,
            spis,
            lpis: config.lpis,
            enable_grp0: false,
            enable_grp1: false,
            spi,
            live_spis: Cache(LiveSpis::new(shared)?),
            route,
            spi_owner: boxed(NO_OWNER, shared)?,
            redistributors: boxed(Redistributor::new(private), config.vcpus)?,
            kicks: VcpuMask::EMPTY,
            retired: RetiredSpis::new(boxed(0, spis.div_ceil(64))?),
            its,
            direct: None,
        })
    }

    pub fn version(&self) -> GicVersion {
        self.version
    }
    pub fn vcpus(&self) -> usize {
        self.vcpus
    }
    /// SPIs this VM has (INTIDs 32 to 31 + spis).
    pub fn spis(&self) -> usize {
        self.spis
    }

    /// The MPIDR_EL1 affinity fields (Aff0 [7:0], Aff1 [15:8]) the vCPU must have
    /// (VMPIDR_EL2): clusters of 16, so SGIs never need GICD_TYPER.RSS.
    pub fn vcpu_affinity(vcpu: usize) -> u64 {
        ((vcpu as u64 / 16) << 8) | (vcpu as u64 % 16)
    }

    pub fn redistributor(&self, vcpu: usize) -> Option<&Redistributor> {
        self.redistributors.get(vcpu)
    }

    /// The vCPUs that may have something new to show since the last call: the hypervisor
    /// makes them look (an IPI if they are running elsewhere, a wake-up if they sleep).
    pub fn take_kicks(&mut self) -> VcpuMask {
        core::mem::take(&mut self.kicks)
    }

    /// Whether a hardware-mapped SPI's physical interrupt waits for the hypervisor to
    /// deactivate it ([`Distributor::deactivate_retired`]).
    #[inline(always)]
    pub fn has_retired(&self) -> bool {
        !self.retired.is_empty()
    }

    /// Gives `deactivate` the physical INTID of every hardware-mapped SPI whose virtual
    /// pending or active state the guest discarded since the last call otherwise than
    /// through a hardware-mapped list register (GICD_ICPENDR, GICD_ICACTIVER, or a list
    /// register it cleared while it was shown): the hypervisor deactivates each at the
    /// board's GIC, or it would never fire again (docs/vgic.md, "Hardware-mapped
    /// interrupts the guest discards").
    pub fn deactivate_retired(&mut self, mut deactivate: impl FnMut(IntId)) {
        let spi = &self.spi;
        for slot in self.retired.take() {
            if let Some(physical) = spi.get(slot).and_then(|s| s.hw()) {
                deactivate(IntId(physical));
            }
        }
    }

    /// `intid`, a hardware-mapped SPI no list register holds, is neither pending nor active
    /// after a change that does not reach its physical interrupt: that one is deactivated
    /// by the hypervisor (`deactivate_retired`). Its line goes low, as at the guest's own
    /// deactivation (`fold`): if the input is still asserted, the physical interrupt fires
    /// again and comes back as a new rise (an SPI the guest configured edge-triggered sees
    /// a rise only from low).
    pub(crate) fn retire_if_discarded(&mut self, intid: u32) {
        let Some(slot) = self.shared_slot(intid) else { return };
        let Some(s) = self.spi.get_mut(slot) else { return };
        if s.hw().is_some() && !s.pending_view() && !s.active() {
            s.set_line(false);
            s.set_refired(false);
            self.retired.insert(slot);
        }
    }

    pub(crate) fn check_vcpu(&self, vcpu: usize) -> Result<(), VgicError> {
        if vcpu < self.vcpus {
            Ok(())
        } else {
            Err(VgicError::NoSuchVcpu { vcpu, vcpus: self.vcpus })
        }
    }

    /// GICv2: the CPU-mask bits of the VM's vCPUs (at most 8); other bits are RAZ/WI.
    pub(crate) fn v2_cpu_mask(&self) -> u8 {
        (u32::MAX >> (32 - self.vcpus.min(MAX_VCPUS_V2))) as u8
    }

    pub(crate) fn is_v2_sgi(&self, intid: u32) -> bool {
        self.version == GicVersion::V2 && intid < 16
    }

    /// Where a shared interrupt's state is kept: an SPI's at `intid - 32`, an LPI's after
    /// every SPI's. None for INTIDs the VM does not have.
    #[inline(always)]
    pub(crate) fn shared_slot(&self, intid: u32) -> Option<usize> {
        let spi = (intid as usize).wrapping_sub(32);
        if spi < self.spis {
            return Some(spi);
        }
        let lpi = (intid as usize).wrapping_sub(FIRST_LPI as usize);
        (lpi < self.lpis).then_some(self.spis + lpi)
    }

    /// The INTID whose state `slot` keeps (`shared_slot` undone).
    pub(crate) fn shared_intid(&self, slot: usize) -> u32 {
        if slot < self.spis {
            slot as u32 + 32
        } else {
            (slot - self.spis) as u32 + FIRST_LPI
        }
    }

    /// The state of `intid` for `vcpu` (private interrupts are per vCPU), if it exists.
    pub(crate) fn irq(&self, vcpu: usize, intid: u32) -> Option<&IrqState> {
        if intid < 32 {
            self.redistributors.get(vcpu)?.irq(intid)
        } else {
            self.spi.get(self.shared_slot(intid)?)
        }
    }
    pub(crate) fn irq_mut(&mut self, vcpu: usize, intid: u32) -> Option<&mut IrqState> {
        if intid < 32 {
            self.redistributors.get_mut(vcpu)?.irq_mut(intid)
        } else {
            let slot = self.shared_slot(intid)?;
            let irq = self.spi.get_mut(slot)?;
            self.live_spis.0.mark(slot);
            Some(irq)
        }
    }

    /// The invariant behind the live masks (`live_spis`, each redistributor's), for property
    /// tests: every interrupt that is not quiet has its live bit set (or a vCPU would never
    /// be shown it).
    #[doc(hidden)]
    pub fn live_masks_cover_every_busy_interrupt(&self) -> bool {
        let live: Vec<usize> = self.live_spis.0.slots().collect();
        self.spi.iter().enumerate().all(|(slot, irq)| irq.quiet() || live.binary_search(&slot).is_ok())
            && self.redistributors.iter().all(Redistributor::live_covers_every_busy_interrupt)
    }

    /// Clears the live bits of the SPIs, and of `vcpu`'s private interrupts, that turned out
    /// quiet.
    pub(crate) fn forget_quiet(&mut self, vcpu: usize) {
        if let Some(rd) = self.redistributors.get_mut(vcpu) {
            rd.forget_quiet();
        }
        self.forget_quiet_spis();
    }

    /// Clears the live bits of the SPIs that turned out quiet.
    pub(crate) fn forget_quiet_spis(&mut self) {
        let spi = &self.spi;
        self.live_spis.0.forget(|slot| spi.get(slot).is_none_or(|s| s.quiet()));
    }

    /// The vCPU that `intid` is delivered to: the owner for private interrupts; for SPIs,
    /// GICD_IROUTER (the vCPU with that affinity; IRM = 1 picks vCPU 0, a valid 1-of-N
    /// choice) or GICD_ITARGETSR (the lowest CPU in the mask). None: it reaches no vCPU.
    pub(crate) fn target(&self, vcpu: usize, intid: u32) -> Option<usize> {
        if intid < 32 {
            return (vcpu < self.vcpus).then_some(vcpu);
        }
        let route = *self.route.get(self.shared_slot(intid)?)?;
        let target = match self.version {
            GicVersion::V3 if route & IRM != 0 => 0,
            GicVersion::V3 => {
                let (aff0, aff1, aff2) = (route & 0xff, (route >> 8) & 0xff, (route >> 16) & 0xff);
                if aff0 >= 16 || aff2 != 0 {
                    return None;
                }
                (aff1 * 16 + aff0) as usize
            }
            GicVersion::V2 if self.vcpus == 1 => 0,
            GicVersion::V2 if route & 0xff == 0 => return None,
            GicVersion::V2 => (route & 0xff).trailing_zeros() as usize,
        };
        (target < self.vcpus).then_some(target)
    }

    pub(crate) fn group_enabled(&self, irq: IrqState) -> bool {
        if irq.group1() {
            self.enable_grp1
        } else {
            self.enable_grp0
        }
    }

    pub(crate) fn kick_target(&mut self, vcpu: usize, intid: u32) {
        if let Some(t) = self.target(vcpu, intid) {
            self.kicks.insert(t);
        }
    }

    fn line_irq(&mut self, intid: IntId, vcpu: usize) -> Result<&mut IrqState, VgicError> {
        if intid.is_sgi() {
            return Err(VgicError::SgiIsNotALine { intid: intid.0 });
        }
        if !intid.is_private() && !intid.is_spi() {
            // An LPI is a message, through the ITS (`send_msi`).
            return Err(VgicError::NoSuchInterrupt { intid: intid.0 });
        }
        if intid.is_private() {
            self.check_vcpu(vcpu)?;
        }
        self.irq_mut(vcpu, intid.0).ok_or(VgicError::NoSuchInterrupt { intid: intid.0 })
    }

    /// The input of an interrupt (an SPI, or a PPI of `vcpu`) goes high or low. A
    /// level-sensitive interrupt is pending while it is high; an edge-triggered one becomes
    /// pending when it rises (IHI 0069H 4.1, "Interrupt lifecycle"; IHI 0048B 1.4.2). For a
    /// hardware-mapped interrupt, high means the physical interrupt fired (the hypervisor
    /// holds it active until the guest deactivates the virtual one), low that its input was
    /// found low before the guest took it (`sync_from_hw_sampling`).
    ///
    /// A hardware-mapped SPI held in a list register fires again only once the guest
    /// deactivated it there (the physical one with it); raised on another CPU before the
    /// holder's exit takes that deactivation back, the rise is kept through it (`refired`).
    pub fn set_level(&mut self, intid: IntId, vcpu: usize, level: bool) -> Result<(), VgicError> {
        let held = intid.is_spi() && self.spi_owner.get(intid.0 as usize - 32).is_some_and(|&o| o & PARKED == 0);
        let irq = self.line_irq(intid, vcpu)?;
        if level && irq.edge() && !irq.line() {
            irq.set_latch(true);
        }
        if level && held && irq.line() && !irq.edge() && irq.hw().is_some() {
            irq.set_refired(true);
        }
        if !level {
            // The input seen low since it fired again: the take-back's fold must not raise
            // the line for a firing that is over (IHI 0069H 4.1: a level interrupt is pending
            // while its input is asserted).
            irq.set_refired(false);
        }
        irq.set_line(level);
        self.kick_target(vcpu, intid.0);
        Ok(())
    }

    /// An edge on an interrupt (an SPI, or a PPI of `vcpu`): pending until taken, whatever
    /// its configured trigger (as a GICD_ISPENDR write).
    pub fn inject_edge(&mut self, intid: IntId, vcpu: usize) -> Result<(), VgicError> {
        self.line_irq(intid, vcpu)?.set_latch(true);
        self.kick_target(vcpu, intid.0);
        Ok(())
    }

    /// Maps `intid` (a PPI of `vcpu`, or an SPI) to a physical PPI or SPI: the list register
    /// gets HW = 1 and the guest's deactivation deactivates the physical interrupt
    /// (passthrough devices, the virtual timer).
    pub fn set_hw(&mut self, intid: IntId, vcpu: usize, physical: Option<IntId>) -> Result<(), VgicError> {
        if let Some(p) = physical {
            if !(p.is_ppi() || p.is_spi()) {
                return Err(VgicError::BadPhysicalIntId { intid: p.0 });
            }
        }
        self.line_irq(intid, vcpu)?.set_hw(physical.map(|p| p.0));
        Ok(())
    }

    /// The vCPU an SPI is delivered to now, as the guest routed it (GICD_IROUTER or
    /// GICD_ITARGETSR). `None` for a private interrupt, an SPI the VM lacks, or a route that
    /// reaches no vCPU. (The hypervisor does not route a passthrough SPI's physical
    /// interrupt by it: that stays on the CPU its VM started on, and is forwarded from
    /// there; docs/vgic.md, "Hardware-mapped level interrupts follow their line".)
    pub fn spi_target(&self, intid: IntId) -> Option<usize> {
        if !intid.is_spi() {
            return None;
        }
        self.target(0, intid.0)
    }

    /// `intid` as `vcpu` sees it.
    pub fn interrupt(&self, vcpu: usize, intid: IntId) -> Result<InterruptState, VgicError> {
        self.check_vcpu(vcpu)?;
        let irq = *self.irq(vcpu, intid.0).ok_or(VgicError::NoSuchInterrupt { intid: intid.0 })?;
        let pending = if self.is_v2_sgi(intid.0) {
            self.redistributors[vcpu].sgi_pending_sources(intid.0, irq) != 0
        } else {
            irq.pending_view()
        };
        Ok(InterruptState {
            enabled: irq.enabled(),
            pending,
            active: irq.active(),
            priority: irq.priority,
            group1: irq.group1(),
            trigger: if irq.edge() { Trigger::Edge } else { Trigger::Level },
            hw: irq.hw().map(IntId),
        })
    }

    /// Whether `vcpu` has an interrupt to take: wakes it from WFI.
    pub fn has_pending(&self, vcpu: usize) -> bool {
        if vcpu >= self.vcpus {
            return false;
        }
        let mut wanted = crate::wanted::WantedList::<MAX_LIST_REGISTERS>::new();
        self.wanted(vcpu, &mut wanted);
        wanted.any_pending()
    }
}
