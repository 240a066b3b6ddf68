//! The physical GIC, as the hypervisor itself uses it: the distributor and this CPU's
//! redistributor or CPU interface brought up, SGIs between physical CPUs (to hand a CPU work
//! or make it leave a guest), SPIs enabled, routed and waited for, and interrupts
//! acknowledged and ended at EL2 (HYP mode on ARMv7).
//!
//! Everything memory-mapped is here, the same on ARMv7-A and ARMv8-A; the GICv3 CPU
//! interface is system registers (MRS/MSR on AArch64, MCR/MRC on AArch32), which the image
//! gives through `CpuInterfaceRegisters`.
//!
//! GICv3: IHI 0069 (GICD 12.9, GICR 12.10/12.11, ICC system registers 12.2);
//! GICv2: IHI 0048B (GICD 4.3, GICC 4.4). EOImode 1 is set, so dropping the running priority
//! and deactivating are separate: interrupts forwarded to a guest are deactivated by it.

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use arm_gic::gicv3::registers::GicrSgi;
use arm_gic::gicv3::{GicRedistributor, Group};
use arm_gic::{IntId, UniqueMmioPointer};
use hyp_core::platform::{GicDescription, GicVersion, MAX_CPUS};
use vgic::FIRST_LPI;

use crate::mmio::Frame;
use crate::registers::*;

/// The INTID an acknowledge returns when nothing is pending.
pub const SPURIOUS: u32 = 1023;

/// The priority of every interrupt the hypervisor takes (SGIs, PPIs, SPIs).
pub const PRIORITY: u8 = 0xa0;
/// The priority mask: every priority is signalled.
pub const MASK_NONE: u8 = 0xff;
// A lower value is a higher priority, and an interrupt is signalled when its priority is
// higher than the mask (IHI 0069H 4.8 / IHI 0048B 3.3).
const _: () = assert!(PRIORITY < MASK_NONE);

/// The INTID of an acknowledged interrupt (GICC_IAR also carries the source CPU of a GICv2 SGI).
#[inline(always)]
pub const fn interrupt_id(iar: u32) -> u32 {
    // ICC_IAR1_EL1's INTID is [23:0], an LPI's from 8192 (IHI 0069H 12.2.12); GICC_IAR's
    // [9:0], with a GICv2 SGI's source CPU in [12:10] (IHI 0048B 4.4.4), below 8192.
    if iar >= FIRST_LPI {
        iar & 0xff_ffff
    } else {
        iar & 0x3ff
    }
}

/// Whether an acknowledged INTID is an interrupt, not one of the special INTIDs 1020 to
/// 1023 (SPURIOUS among them).
#[inline(always)]
pub const fn is_interrupt(intid: u32) -> bool {
    intid < 1020 || intid >= FIRST_LPI
}

/// What the shared driver asks of the CPU architecture: the GICv3 CPU interface's system
/// registers at the hypervisor's level (ICC_*, IHI 0069 12.2: MRS/MSR on AArch64, MCR/MRC and
/// MCRR on AArch32), and the two instructions it needs around the GIC. Associated functions:
/// an image has one architecture, and a call costs what a direct call costs.
pub trait CpuInterfaceRegisters {
    /// Turns this CPU's system-register interface on: ICC_SRE_EL2 (ICC_HSRE) SRE, DFB, DIB and
    /// Enable (a guest may use the system registers, which reach its virtual CPU interface);
    /// the priority mask `pmr`, binary point 0, EOImode 1 and Group 1 enabled.
    fn enable(pmr: u8);
    /// Reads ICC_IAR1_EL1: acknowledges the highest-priority pending Group 1 interrupt.
    fn acknowledge() -> u32;
    /// ICC_EOIR1_EL1 then ICC_DIR_EL1 (EOImode 1): priority drop and deactivation.
    fn end_of_interrupt(iar: u32);
    /// ICC_EOIR1_EL1 alone: priority drop.
    fn priority_drop(iar: u32);
    /// Writes ICC_SGI1R_EL1 after a store barrier (DSB ISHST), so that what this CPU wrote
    /// before is visible to the target when it takes the SGI.
    fn send_sgi(sgi1r: u64);
    /// DSB ISHST: before a GICv2 SGI, written to the distributor.
    fn store_barrier();
    /// An interrupt the image's exception vector acknowledged and left to the run loop,
    /// taken (once): the next acknowledgement returns it before it reads the GIC. None on
    /// an image whose vector acknowledges nothing.
    #[inline(always)]
    fn left_by_vector() -> Option<u32> {
        None
    }
}

#[derive(Debug)]
pub enum GicError {
    /// No redistributor frame in the device tree's range has this CPU's affinity.
    NoRedistributor,
}

/// The physical GIC's frames and what the hypervisor learnt of each CPU's interface. An image
/// has one, in a static; the host tests make their own.
pub struct Gic<C> {
    version: AtomicU8,
    gicd: AtomicUsize,
    gicr: AtomicUsize,
    gicr_end: AtomicUsize,
    gicc: AtomicUsize,
    /// GICv2 CPU interface number of each CPU index (GICD_SGIR targets interfaces, not MPIDRs).
    cpu_interface: [AtomicU8; MAX_CPUS],
    /// GICv3 redistributor (RD frame) of each CPU index, once it is brought up.
    redistributor: [AtomicUsize; MAX_CPUS],
    /// The target fields of an SGI to each CPU index (ICC_SGI1R_EL1's affinity and target
    /// list, or GICD_SGIR's CPUTargetList), recorded when the CPU brings its interface up
    /// (`init_cpu`); 0 until then. A kick then costs one load, not the MPIDR's load and the
    /// encoding of its affinity.
    sgi_target: [AtomicU64; MAX_CPUS],
    /// Held while a CPU looks for its redistributor and brings it up: then no other CPU
    /// reads or writes a redistributor frame (`init_cpu`).
    bringing_up: AtomicBool,
    cpu: PhantomData<fn() -> C>,
}

impl<C: CpuInterfaceRegisters> Gic<C> {
    /// A GIC whose frames are not known yet.
    ///
    /// # Safety
    ///
    /// `init_distributor` runs before any other method is called on it (on any CPU): until
    /// then it names no frame, and an access would be to address 0.
    pub const unsafe fn new() -> Self {
        Gic {
            version: AtomicU8::new(0),
            gicd: AtomicUsize::new(0),
            gicr: AtomicUsize::new(0),
            gicr_end: AtomicUsize::new(0),
            gicc: AtomicUsize::new(0),
            cpu_interface: [const { AtomicU8::new(0) }; MAX_CPUS],
            redistributor: [const { AtomicUsize::new(0) }; MAX_CPUS],
            sgi_target: [const { AtomicU64::new(0) }; MAX_CPUS],
            bringing_up: AtomicBool::new(false),
            cpu: PhantomData,
        }
    }

    /// Each CPU's SGI target fields (`send_sgi`), for an image's exception vector to kick a
    /// CPU itself: ICC_SGI1R_EL1's on a GICv3, GICD_SGIR's on a GICv2 with the address of
    /// the board's GICD_SGIR (which the exception vector writes, after a DSB, as `send_sgi`).
    /// The GICv2 CPU interface's address (GICC), for the vector that takes a kick itself;
    /// None on a GICv3.
    pub fn gicc_address(&self) -> Option<usize> {
        (!self.is_v3()).then(|| self.gicc.load(Ordering::Relaxed))
    }

    pub fn kick_targets(&self) -> (&[AtomicU64; MAX_CPUS], Option<usize>) {
        let sgir = (!self.is_v3()).then(|| self.gicd.load(Ordering::Relaxed) + GICD_SGIR);
        (&self.sgi_target, sgir)
    }

    #[inline(always)]
    fn is_v3(&self) -> bool {
        self.version.load(Ordering::Relaxed) == 3
    }

    #[inline(always)]
    fn gicd(&self) -> Frame {
        // SAFETY: the address `init_distributor`'s caller gave as the distributor's.
        unsafe { Frame::new(self.gicd.load(Ordering::Relaxed)) }
    }

    #[inline(always)]
    fn gicc(&self) -> Frame {
        // SAFETY: the address `init_distributor`'s caller gave as the GICv2 CPU interface's.
        unsafe { Frame::new(self.gicc.load(Ordering::Relaxed)) }
    }

    /// Once, on the boot CPU: records the frames and enables the distributor.
    ///
    /// # Safety
    ///
    /// The frames `gic` names (distributor, redistributors, CPU interface) are this GIC's,
    /// mapped as device memory at their addresses for the rest of the program; this runs
    /// once, before any other method of this `Gic` and before another CPU uses the GIC.
    pub unsafe fn init_distributor(&self, gic: &GicDescription) {
        self.gicd.store(gic.distributor.base as usize, Ordering::Relaxed);
        let gicd = self.gicd();
        match gic.version {
            GicVersion::V3 => {
                self.version.store(3, Ordering::Relaxed);
                if let Some(r) = gic.redistributors {
                    self.gicr.store(r.base as usize, Ordering::Relaxed);
                    self.gicr_end.store(r.end() as usize, Ordering::Relaxed);
                }
                gicd.write32(GICD_CTLR, gicd.read32(GICD_CTLR) | CTLR_V3_ENABLE);
                self.wait_for_distributor();
            }
            GicVersion::V2 => {
                self.version.store(2, Ordering::Relaxed);
                self.gicc.store(gic.cpu_interface.map_or(0, |c| c.base as usize), Ordering::Relaxed);
                gicd.write32(GICD_CTLR, gicd.read32(GICD_CTLR) | CTLR_V2_ENABLE);
            }
        }
    }

    /// The redistributor of the CPU with this MPIDR: the RD frame whose GICR_TYPER affinity is
    /// its, in the device tree's range. Only GICR_TYPER of each frame is read.
    fn find_redistributor(&self, mpidr: u64) -> Option<usize> {
        let affinity = redistributor_affinity(mpidr);
        let (mut frame, end) = (self.gicr.load(Ordering::Relaxed), self.gicr_end.load(Ordering::Relaxed));
        while frame != 0 && frame < end {
            // SAFETY: a frame inside the redistributor range `init_distributor`'s caller gave.
            let typer = unsafe { Frame::new(frame) }.read64(GICR_TYPER);
            if typer >> 32 == affinity {
                return Some(frame);
            }
            if typer & GICR_TYPER_LAST != 0 {
                return None;
            }
            // RD and SGI frames, plus two more with virtual LPIs (GICv4).
            frame += if typer & GICR_TYPER_VLPIS != 0 { 0x4_0000 } else { 0x2_0000 };
        }
        None
    }

    /// On every CPU, once, on that CPU: wakes its redistributor or sets up its CPU interface,
    /// enables the SGIs and `ppis` at `PRIORITY`, and turns on this CPU's interface in
    /// EOImode 1.
    pub fn init_cpu(&self, index: usize, mpidr: u64, ppis: &[u32]) -> Result<(), GicError> {
        let enable = private_enables(ppis);
        if self.is_v3() {
            while self.bringing_up.swap(true, Ordering::Acquire) {
                hyp_core::sync::wait_step();
            }
            let found = self.find_redistributor(mpidr).and_then(|rd| NonNull::new(rd as *mut GicrSgi));
            if let Some(frames) = found {
                // SAFETY: this CPU's RD and SGI frames (128 KiB, in the range
                // `init_distributor`'s caller gave). While `bringing_up` is held no other CPU
                // reads or writes a redistributor frame: another CPU's search waits for it, and
                // `set_active_private` reaches only a frame published in `redistributor`,
                // which this one is not yet.
                let mut redistributor = GicRedistributor::new(unsafe { UniqueMmioPointer::new(frames) });
                bring_up_redistributor(&mut redistributor, enable);
            }
            self.bringing_up.store(false, Ordering::Release);
            let rd = found.ok_or(GicError::NoRedistributor)?;
            self.redistributor[index].store(rd.as_ptr() as usize, Ordering::Relaxed);
            self.sgi_target[index].store(sgi1r(mpidr, 0), Ordering::Relaxed);
            C::enable(MASK_NONE);
        } else {
            // GICD_ICENABLER0, GICD_IPRIORITYR0-7 and GICD_ISENABLER0 are banked: this CPU's.
            let gicd = self.gicd();
            gicd.write32(GICD_ICENABLER, 0xffff_ffff);
            for i in 0..8 {
                gicd.write32(GICD_IPRIORITYR + 4 * i, u32::from(PRIORITY) * 0x0101_0101);
            }
            gicd.write32(GICD_ISENABLER, enable);
            // GICD_ITARGETSR0 reads as this CPU's own interface mask (IHI 0048B 4.3.12).
            let mask = gicd.read32(GICD_ITARGETSR) & 0xff;
            let interface = mask.trailing_zeros() as u8;
            self.cpu_interface[index].store(interface, Ordering::Relaxed);
            self.sgi_target[index].store(u64::from(gicv2_sgir(interface, 0)), Ordering::Relaxed);
            let gicc = self.gicc();
            gicc.write32(GICC_PMR, u32::from(MASK_NONE));
            gicc.write32(GICC_CTLR, GICC_CTLR_ENABLE_EOIMODE);
        }
        Ok(())
    }

    /// The redistributor of the CPU with this index, for its LPI registers (the doorbells'
    /// tables, a vPE's residency: `its::redistributor`); None before `init_cpu` found it, or
    /// on a GICv2.
    pub fn lpi_redistributor(&self, index: usize) -> Option<crate::its::redistributor::LpiRedistributor> {
        let rd = self.redistributor.get(index)?.load(Ordering::Relaxed);
        // SAFETY: the RD frame `init_cpu` found in the range `init_distributor`'s caller gave,
        // which holds every frame of each redistributor (`find_redistributor` steps over them).
        (self.is_v3() && rd != 0).then(|| unsafe { crate::its::redistributor::LpiRedistributor::new(rd) })
    }

    /// Clears the active state of private interrupt `intid` (a PPI) of the CPU with this index:
    /// GICR_ICACTIVER0 (IHI 0069 12.10.7) or the banked GICD_ICACTIVER0 (IHI 0048B 4.3.6). For a
    /// hardware-mapped interrupt whose vCPU stopped before deactivating it.
    pub fn clear_active_private(&self, intid: u32, index: usize) {
        self.set_active_private(intid, index, false);
    }

    /// Sets or clears the active state of private interrupt `intid` of the CPU with this index
    /// (GICR_ISACTIVER0 / GICR_ICACTIVER0, or the banked GICD_ISACTIVER0 / GICD_ICACTIVER0 of
    /// the calling CPU on GICv2): a hardware-mapped interrupt whose virtual interrupt is active
    /// or pending is held active, so it does not fire at EL2 while the guest has it.
    pub fn set_active_private(&self, intid: u32, index: usize, active: bool) {
        if intid >= 32 {
            return;
        }
        if self.is_v3() {
            let rd = self.redistributor[index].load(Ordering::Relaxed);
            if rd != 0 {
                let offset = if active { GICR_ISACTIVER0 } else { GICR_ICACTIVER0 };
                // SAFETY: the RD frame `init_cpu` found in the range `init_distributor`'s
                // caller gave.
                unsafe { Frame::new(rd) }.write32(offset, 1 << intid);
            }
        } else {
            // Banked: only the calling CPU's copy is reachable.
            let offset = if active { GICD_ISACTIVER } else { GICD_ICACTIVER };
            self.gicd().write32(offset, 1 << intid);
        }
    }

    /// Whether SPI `intid` is pending (GICD_ISPENDR, IHI 0069 12.9.25 / IHI 0048B 4.3.7): for a
    /// level-sensitive SPI held active, whether its input is still asserted.
    pub fn spi_pending(&self, intid: u32) -> bool {
        if !is_spi(intid) {
            return false;
        }
        let (word, bit) = bit_of(intid);
        self.gicd().read32(GICD_ISPENDR + word) & bit != 0
    }

    /// Deactivates SPI `intid` (GICD_ICACTIVER, IHI 0069 12.9.8 / IHI 0048B 4.3.10): a
    /// hardware-mapped SPI whose virtual interrupt was retired before the guest took it.
    pub fn deactivate_spi(&self, intid: u32) {
        if !is_spi(intid) {
            return;
        }
        let (word, bit) = bit_of(intid);
        self.gicd().write32(GICD_ICACTIVER + word, bit);
    }

    /// Enables SPI `intid` (level-sensitive, as the device tree gives them) at `PRIORITY`,
    /// delivered to the CPU with this index and MPIDR: GICD_IGROUPR, GICD_IPRIORITYR,
    /// GICD_IROUTER (GICv3, IHI 0069 12.9.22) or GICD_ITARGETSR (GICv2, IHI 0048B 4.3.12),
    /// GICD_ISENABLER.
    pub fn enable_spi(&self, intid: u32, index: usize, mpidr: u64) {
        if !is_spi(intid) {
            return;
        }
        self.configure_spi_delivery(intid, PRIORITY);
        self.route_and_enable_spi(intid, index, mpidr);
    }

    /// Group 1 and `priority`, both set once and before the SPI is enabled: GICD_IGROUPR is
    /// read, modified and written (it has no byte access), so it must not race with another
    /// CPU's setup; GICD_IPRIORITYR is written by its byte (IHI 0069 12.9.18, IHI 0048B 4.3.11).
    fn configure_spi_delivery(&self, intid: u32, priority: u8) {
        let gicd = self.gicd();
        if self.is_v3() {
            let (word, bit) = bit_of(intid);
            gicd.write32(GICD_IGROUPR + word, gicd.read32(GICD_IGROUPR + word) | bit);
            // Group 1, as the PPIs
        }
        gicd.write8(GICD_IPRIORITYR + intid as usize, priority);
    }

    /// Routes SPI `intid` to the CPU with this index and MPIDR and enables it; neither write
    /// touches another SPI's state.
    fn route_and_enable_spi(&self, intid: u32, index: usize, mpidr: u64) {
        let gicd = self.gicd();
        if self.is_v3() {
            gicd.write64(GICD_IROUTER + 8 * intid as usize, irouter(mpidr));
        } else {
            let interface = self.cpu_interface[index].load(Ordering::Relaxed);
            gicd.write8(GICD_ITARGETSR + intid as usize, 1 << interface); // byte-accessible
        }
        let (word, bit) = bit_of(intid);
        gicd.write32(GICD_ISENABLER + word, bit);
    }

    /// GICv3: waits until a distributor register write has taken effect (GICD_CTLR.RWP, IHI
    /// 0069 12.9.4): after clearing an enable, before relying on the interrupt being off.
    fn wait_for_distributor(&self) {
        if self.is_v3() {
            let gicd = self.gicd();
            while gicd.read32(GICD_CTLR) & CTLR_RWP != 0 {}
        }
    }

    /// Disables SPI `intid` (GICD_ICENABLER, IHI 0069 12.9.10 / IHI 0048B 4.3.6) and waits until
    /// the distributor no longer forwards it.
    pub fn disable_spi(&self, intid: u32) {
        if !is_spi(intid) {
            return;
        }
        let (word, bit) = bit_of(intid);
        self.gicd().write32(GICD_ICENABLER + word, bit);
        self.wait_for_distributor();
    }

    /// Clears SPI `intid`'s pending and active states (GICD_ICPENDR, GICD_ICACTIVER: IHI 0069
    /// 12.9.9, 12.9.8 / IHI 0048B 4.3.8, 4.3.10): an interrupt a guest left active (its vCPU
    /// stopped before deactivating it through a hardware-mapped list register) can fire again.
    pub fn clear_spi(&self, intid: u32) {
        if !is_spi(intid) {
            return;
        }
        let gicd = self.gicd();
        let (word, bit) = bit_of(intid);
        gicd.write32(GICD_ICPENDR + word, bit);
        gicd.write32(GICD_ICACTIVER + word, bit);
    }

    /// Whether SPI `intid` is enabled (GICD_ISENABLER reads the enables).
    pub fn spi_enabled(&self, intid: u32) -> bool {
        if !is_spi(intid) {
            return false;
        }
        let (word, bit) = bit_of(intid);
        self.gicd().read32(GICD_ISENABLER + word) & bit != 0
    }

    /// Sets SPI `intid` edge-triggered or level-sensitive: GICD_ICFGR<n>.Int_config[1] (IHI
    /// 0069 12.9.7 / IHI 0048B 4.3.13). Only while the SPI is disabled (changing it while
    /// enabled is UNPREDICTABLE).
    pub fn configure_spi(&self, intid: u32, edge: bool) {
        if !is_spi(intid) {
            return;
        }
        let gicd = self.gicd();
        let (word, bit) = edge_bit_of(intid);
        let config = gicd.read32(GICD_ICFGR + word);
        gicd.write32(GICD_ICFGR + word, if edge { config | bit } else { config & !bit });
    }

    /// Sends SGI `intid` to the CPU with this index: ICC_SGI1R (GICv3) or GICD_SGIR (GICv2),
    /// after a store barrier. Its target is the one recorded when the CPU brought its
    /// interface up; for a CPU that has not yet, `mpidr` gives its MPIDR (GICv3).
    #[inline]
    pub fn send_sgi(&self, index: usize, mpidr: impl FnOnce() -> u64, intid: u32) {
        let target = self.sgi_target.get(index).map_or(0, |t| t.load(Ordering::Relaxed));
        if self.is_v3() {
            let target = if target != 0 { target } else { sgi1r(mpidr(), 0) };
            C::send_sgi(target | sgi1r_intid(intid));
        } else {
            let target = if target != 0 {
                target as u32
            } else {
                gicv2_sgir(self.cpu_interface.get(index).map_or(0, |i| i.load(Ordering::Relaxed)), 0)
            };
            C::store_barrier();
            self.gicd().write32(GICD_SGIR, target | gicv2_sgir_intid(intid));
        }
    }

    /// Sends SGI `intid` to every CPU but this one, as `send_sgi` does to one. For a CPU that
    /// has not run the hypervisor yet: on GICv2 its CPU interface number is known only once
    /// it reads its own GICD_ITARGETSR0 (`init_cpu`), so it cannot be named.
    pub fn send_sgi_to_others(&self, intid: u32) {
        if self.is_v3() {
            C::send_sgi(sgi1r_to_others(intid));
        } else {
            C::store_barrier();
            self.gicd().write32(GICD_SGIR, gicv2_sgir_to_others(intid));
        }
    }

    /// Acknowledges the highest-priority pending interrupt: its INTID, or SPURIOUS (GICC_IAR:
    /// the whole value, the source CPU of an SGI included, for `end_of_interrupt`).
    #[inline]
    pub fn acknowledge(&self) -> u32 {
        if let Some(iar) = C::left_by_vector() {
            return iar;
        }
        if self.is_v3() {
            C::acknowledge()
        } else {
            self.gicc().read32(GICC_IAR)
        }
    }

    /// Priority drop and deactivation of an interrupt the hypervisor handled itself.
    #[inline]
    pub fn end_of_interrupt(&self, iar: u32) {
        if self.is_v3() {
            C::end_of_interrupt(iar);
        } else {
            let gicc = self.gicc();
            gicc.write32(GICC_EOIR, iar);
            gicc.write32(GICC_DIR, iar);
        }
    }

    /// Priority drop only (EOImode 1): the interrupt stays active until a guest deactivates it
    /// through a hardware-mapped list register.
    #[inline]
    pub fn priority_drop(&self, iar: u32) {
        if self.is_v3() {
            C::priority_drop(iar);
        } else {
            self.gicc().write32(GICC_EOIR, iar);
        }
    }
}

fn is_spi(intid: u32) -> bool {
    (32..1020).contains(&intid)
}

/// A CPU's redistributor brought up through `arm-gic`: powered up (a GIC-600 or GIC-700 needs
/// GICR_PWRR first), woken (GICR_WAKER.ProcessorSleep cleared, then ChildrenAsleep waited
/// for: IHI 0069 12.11), its private interrupts disabled, put in Group 1 at `PRIORITY`, then
/// the SGIs and the PPIs of `enable` enabled.
fn bring_up_redistributor(redistributor: &mut GicRedistributor<'_>, enable: u32) {
    redistributor.power_on();
    // AlreadyAwake: the firmware woke it (it was never asleep for this image).
    let _ = redistributor.mark_core_awake();
    redistributor.enable_all_interrupts(false);
    redistributor.wait_for_pending_write();
    for intid in IntId::private() {
        // Neither fails for an SGI or a PPI.
        let _ = redistributor.set_group(intid, Group::Group1NS);
        let _ = redistributor.set_interrupt_priority(intid, PRIORITY);
    }
    for intid in IntId::private().filter(|i| enable & 1 << u32::from(*i) != 0) {
        let _ = redistributor.enable_interrupt(intid, true);
    }
}
