//! The physical GIC, as the hypervisor itself uses it: the distributor and this CPU's
//! redistributor or CPU interface brought up, SGIs between physical CPUs (to hand a CPU work
//! or make it leave a guest), and acknowledging interrupts at EL2.
//!
//! GICv3: IHI 0069 (GICD 12.9, GICR 12.10/12.11, ICC system registers 12.2);
//! GICv2: IHI 0048B (GICD 4.3, GICC 4.4). EOImode 1 is set, so dropping the running priority
//! and deactivating are separate: interrupts forwarded to a guest are deactivated by it.

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use hyp_core::platform::{GicDescription, GicVersion, MAX_CPUS};

/// The SGI that asks a CPU to look at its work slot.
pub const SGI_KICK: u32 = 1;
pub const SPURIOUS: u32 = 1023;

static VERSION: AtomicU8 = AtomicU8::new(0);
static GICD: AtomicUsize = AtomicUsize::new(0);
static GICR: AtomicUsize = AtomicUsize::new(0);
static GICR_END: AtomicUsize = AtomicUsize::new(0);
static GICC: AtomicUsize = AtomicUsize::new(0);
/// GICv2 CPU interface number of each CPU index (GICD_SGIR targets interfaces, not MPIDRs).
static CPU_INTERFACE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];
/// GICv3 redistributor (RD frame) of each CPU index.
static REDISTRIBUTOR: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];

fn read32(addr: usize) -> u32 {
    // SAFETY: `addr` is a register of a GIC frame the device tree names, mapped
    // Device-nGnRE in the EL2 tables.
    unsafe { read_volatile(addr as *const u32) }
}

fn write32(addr: usize, value: u32) {
    // SAFETY: as for `read32`.
    unsafe { write_volatile(addr as *mut u32, value) }
}

fn write8(addr: usize, value: u8) {
    // SAFETY: as for `read32`; a byte of a byte-accessible register (GICD_IPRIORITYR,
    // GICD_ITARGETSR).
    unsafe { write_volatile(addr as *mut u8, value) }
}

fn read64(addr: usize) -> u64 {
    // SAFETY: as for `read32`; GICR_TYPER is a 64-bit register.
    unsafe { read_volatile(addr as *const u64) }
}

fn is_v3() -> bool {
    VERSION.load(Ordering::Relaxed) == 3
}

/// Once, on the boot CPU: records the frames and enables the distributor.
pub fn init_distributor(gic: &GicDescription) {
    let gicd = gic.distributor.base as usize;
    GICD.store(gicd, Ordering::Relaxed);
    match gic.version {
        GicVersion::V3 => {
            VERSION.store(3, Ordering::Relaxed);
            if let Some(r) = gic.redistributors {
                GICR.store(r.base as usize, Ordering::Relaxed);
                GICR_END.store(r.end() as usize, Ordering::Relaxed);
            }
            // GICD_CTLR: ARE_NS, EnableGrp1A, EnableGrp1 (12.9.4); wait for RWP.
            write32(gicd, read32(gicd) | (1 << 4) | (1 << 1) | 1);
            while read32(gicd) & (1 << 31) != 0 {}
        }
        GicVersion::V2 => {
            VERSION.store(2, Ordering::Relaxed);
            GICC.store(gic.cpu_interface.map_or(0, |c| c.base as usize), Ordering::Relaxed);
            write32(gicd, read32(gicd) | 1); // GICD_CTLR.EnableGrp1 (non-secure view)
        }
    }
}

/// This CPU's redistributor: the frame whose GICR_TYPER affinity is this CPU's MPIDR.
fn redistributor(mpidr: u64) -> Option<usize> {
    let affinity = ((mpidr >> 32 & 0xff) << 24) | (mpidr & 0xff_ffff);
    let (mut frame, end) = (GICR.load(Ordering::Relaxed), GICR_END.load(Ordering::Relaxed));
    while frame != 0 && frame < end {
        let typer = read64(frame + 0x8);
        if typer >> 32 == affinity {
            return Some(frame);
        }
        if typer & (1 << 4) != 0 {
            return None; // Last
        }
        // RD and SGI frames, plus two more with virtual LPIs (GICv4).
        frame += if typer & (1 << 1) != 0 { 0x4_0000 } else { 0x2_0000 };
    }
    None
}

#[derive(Debug)]
pub enum GicError {
    NoRedistributor,
}

/// On every CPU: wakes its redistributor or sets up its CPU interface, enables the SGIs and
/// `ppis` at a middle priority, and turns on this CPU's interface in EOImode 1.
pub fn init_cpu(index: usize, mpidr: u64, ppis: &[u32]) -> Result<(), GicError> {
    let mut enable: u32 = 0xffff; // SGIs 0-15
    for ppi in ppis.iter().filter(|p| **p < 32) {
        enable |= 1 << ppi;
    }
    if is_v3() {
        let rd = redistributor(mpidr).ok_or(GicError::NoRedistributor)?;
        REDISTRIBUTOR[index].store(rd, Ordering::Relaxed);
        // GICR_WAKER: clear ProcessorSleep, wait until ChildrenAsleep clears (12.11.44).
        write32(rd + 0x14, read32(rd + 0x14) & !(1 << 1));
        while read32(rd + 0x14) & (1 << 2) != 0 {}
        let sgi = rd + 0x1_0000;
        write32(sgi + 0x80, 0xffff_ffff); // GICR_IGROUPR0: Group 1
        write32(sgi + 0x180, 0xffff_ffff); // GICR_ICENABLER0
        for i in 0..8 {
            write32(sgi + 0x400 + 4 * i, u32::from(PRIORITY) * 0x0101_0101); // GICR_IPRIORITYR<n>
        }
        write32(sgi + 0x100, enable); // GICR_ISENABLER0
                                      // SAFETY: ICC_SRE_EL2: SRE, DFB, DIB, and Enable (EL1 may use the system register
                                      // interface, which reaches the virtual CPU interface for guests); then this CPU's
                                      // priority mask, binary point, EOImode 1 and Group 1 enable.
        unsafe {
            asm!(
                "mrs {t}, icc_sre_el2",
                "orr {t}, {t}, #0xf",
                "msr icc_sre_el2, {t}",
                "isb",
                "msr icc_pmr_el1, {pmr}",
                "msr icc_bpr1_el1, xzr",
                "mrs {t}, icc_ctlr_el1",
                "orr {t}, {t}, #2",
                "msr icc_ctlr_el1, {t}",
                "msr icc_igrpen1_el1, {one}",
                "isb",
                t = out(reg) _,
                pmr = in(reg) u64::from(MASK_NONE),
                one = in(reg) 1u64,
                options(nostack)
            );
        }
    } else {
        let gicd = GICD.load(Ordering::Relaxed);
        let gicc = GICC.load(Ordering::Relaxed);
        write32(gicd + 0x180, 0xffff_ffff); // GICD_ICENABLER0 (banked)
        for i in 0..8 {
            write32(gicd + 0x400 + 4 * i, u32::from(PRIORITY) * 0x0101_0101); // GICD_IPRIORITYR (banked for 0-31)
        }
        write32(gicd + 0x100, enable);
        // GICD_ITARGETSR0 reads as this CPU's own interface mask (IHI 0048B 4.3.12).
        let mask = read32(gicd + 0x800) & 0xff;
        CPU_INTERFACE[index].store(mask.trailing_zeros() as u8, Ordering::Relaxed);
        write32(gicc + 0x4, MASK_NONE); // GICC_PMR
        write32(gicc, 1 | (1 << 9)); // GICC_CTLR: EnableGrp1, EOImodeNS
    }
    Ok(())
}

/// Clears the active state of private interrupt `intid` (a PPI) of the CPU with this index:
/// GICR_ICACTIVER0 (IHI 0069 12.10.7) or the banked GICD_ICACTIVER0 (IHI 0048B 4.3.6). For a
/// hardware-mapped interrupt whose vCPU stopped before deactivating it.
pub fn clear_active_private(intid: u32, index: usize) {
    set_active_private(intid, index, false);
}

/// Sets or clears the active state of private interrupt `intid` of the CPU with this index
/// (GICR_ISACTIVER0 / GICR_ICACTIVER0, or the banked GICD_ISACTIVER0 / GICD_ICACTIVER0 of
/// the calling CPU on GICv2): a hardware-mapped interrupt whose virtual interrupt is active
/// or pending is held active, so it does not fire at EL2 while the guest has it.
pub fn set_active_private(intid: u32, index: usize, active: bool) {
    if intid >= 32 {
        return;
    }
    let offset = if active { 0x300 } else { 0x380 };
    if is_v3() {
        let rd = REDISTRIBUTOR[index].load(Ordering::Relaxed);
        if rd != 0 {
            write32(rd + 0x1_0000 + offset, 1 << intid);
        }
    } else {
        // Banked: only the calling CPU's copy is reachable.
        write32(GICD.load(Ordering::Relaxed) + offset, 1 << intid);
    }
}

/// Whether SPI `intid` is pending (GICD_ISPENDR, IHI 0069 12.9.25 / IHI 0048B 4.3.7): for a
/// level-sensitive SPI held active, whether its input is still asserted.
pub fn spi_pending(intid: u32) -> bool {
    if !(32..1020).contains(&intid) {
        return false;
    }
    let gicd = GICD.load(Ordering::Relaxed);
    read32(gicd + 0x200 + 4 * (intid as usize / 32)) & (1 << (intid % 32)) != 0
}

/// Deactivates SPI `intid` (GICD_ICACTIVER, IHI 0069 12.9.8 / IHI 0048B 4.3.10): a
/// hardware-mapped SPI whose virtual interrupt was retired before the guest took it.
pub fn deactivate_spi(intid: u32) {
    if !(32..1020).contains(&intid) {
        return;
    }
    write32(GICD.load(Ordering::Relaxed) + 0x380 + 4 * (intid as usize / 32), 1 << (intid % 32));
}

/// The priority of every interrupt the hypervisor takes (SGIs, PPIs, SPIs).
const PRIORITY: u8 = 0xa0;
/// A higher one, for an SPI a CPU waits for in `wait_for_spi`, and a priority mask between
/// the two: while it waits, only that SPI is signalled to the CPU.
const PRIORITY_AWAITED: u8 = 0x80;
const MASK_BELOW_AWAITED: u32 = 0x90;
/// The priority mask otherwise: every priority is signalled.
const MASK_NONE: u32 = 0xff;

/// Enables SPI `intid` (level-sensitive, as the device tree gives them) at the middle
/// priority, delivered to the CPU with this index and MPIDR: GICD_IGROUPR, GICD_IPRIORITYR,
/// GICD_IROUTER (GICv3, IHI 0069 12.9.22) or GICD_ITARGETSR (GICv2, IHI 0048B 4.3.12),
/// GICD_ISENABLER.
pub fn enable_spi(intid: u32, index: usize, mpidr: u64) {
    if !(32..1020).contains(&intid) {
        return;
    }
    configure_spi_delivery(intid, PRIORITY);
    route_and_enable_spi(intid, index, mpidr);
}

/// Group 1 and `priority`, both set once and before the SPI is enabled: GICD_IGROUPR is
/// read, modified and written (it has no byte access), so it must not race with another
/// CPU's setup; GICD_IPRIORITYR is written by its byte (IHI 0069 12.9.18, IHI 0048B 4.3.11).
fn configure_spi_delivery(intid: u32, priority: u8) {
    let gicd = GICD.load(Ordering::Relaxed);
    if is_v3() {
        let (word, bit) = (4 * (intid as usize / 32), 1u32 << (intid % 32));
        write32(gicd + 0x80 + word, read32(gicd + 0x80 + word) | bit); // Group 1, as the PPIs
    }
    write8(gicd + 0x400 + intid as usize, priority);
}

/// Routes SPI `intid` to the CPU with this index and MPIDR and enables it; neither write
/// touches another SPI's state.
fn route_and_enable_spi(intid: u32, index: usize, mpidr: u64) {
    let gicd = GICD.load(Ordering::Relaxed);
    if is_v3() {
        let affinity = ((mpidr >> 32 & 0xff) << 32) | (mpidr & 0xff_ffff);
        // SAFETY: GICD_IROUTER<n> is a 64-bit register of the distributor frame.
        unsafe { write_volatile((gicd + 0x6000 + 8 * intid as usize) as *mut u64, affinity) };
    } else {
        let interface = CPU_INTERFACE[index].load(Ordering::Relaxed);
        write8(gicd + 0x800 + intid as usize, 1 << interface); // GICD_ITARGETSR, byte-accessible
    }
    write32(gicd + 0x100 + 4 * (intid as usize / 32), 1 << (intid % 32));
}

/// Sets SPI `intid` up for `wait_for_spi`, once, before any wait: its group and priority.
pub fn prepare_awaited_spi(intid: u32) {
    if (32..1020).contains(&intid) {
        configure_spi_delivery(intid, PRIORITY_AWAITED);
    }
}

/// GICv3: waits until a distributor register write has taken effect (GICD_CTLR.RWP, IHI
/// 0069 12.9.4): after clearing an enable, before relying on the interrupt being off.
fn wait_for_distributor() {
    if is_v3() {
        let gicd = GICD.load(Ordering::Relaxed);
        while read32(gicd) & (1 << 31) != 0 {}
    }
}

/// Disables SPI `intid` (GICD_ICENABLER, IHI 0069 12.9.10 / IHI 0048B 4.3.6) and waits until
/// the distributor no longer forwards it.
pub fn disable_spi(intid: u32) {
    if !(32..1020).contains(&intid) {
        return;
    }
    let gicd = GICD.load(Ordering::Relaxed);
    write32(gicd + 0x180 + 4 * (intid as usize / 32), 1 << (intid % 32));
    wait_for_distributor();
}

/// Waits in WFI, on the CPU with this index and MPIDR, until `done()`: SPI `intid` (set up
/// by `prepare_awaited_spi`) is enabled for this CPU above a priority mask that keeps every other interrupt from being
/// signalled, so only it (or a virtual interrupt of the vCPU this CPU runs) ends a WFI;
/// the others stay pending and are taken after. PSTATE.I stays set: the SPI wakes the WFI
/// (ARM DDI 0487, "WFI wake-up events": an interrupt masked by PSTATE.I still is one) and is
/// never taken. It is disabled and cleared before this returns; its device must lower its
/// line afterwards (for a level-sensitive SPI), or the next wait ends at once.
pub fn wait_for_spi(intid: u32, index: usize, mpidr: u64, mut done: impl FnMut() -> bool) {
    if !(32..1020).contains(&intid) {
        while !done() {
            core::hint::spin_loop();
        }
        return;
    }
    route_and_enable_spi(intid, index, mpidr);
    set_priority_mask(MASK_BELOW_AWAITED);
    while !done() {
        aarch64_cpu::asm::wfi();
    }
    set_priority_mask(MASK_NONE);
    disable_spi(intid);
    clear_spi(intid);
}

/// ICC_PMR_EL1 (IHI 0069 12.2.20) or GICC_PMR (IHI 0048B 4.4.2): interrupts of this
/// priority or lower are not signalled to this CPU.
fn set_priority_mask(mask: u32) {
    if is_v3() {
        // SAFETY: the priority mask changes which interrupts are signalled, nothing in memory.
        unsafe { asm!("msr icc_pmr_el1, {}", "isb", in(reg) u64::from(mask), options(nostack)) };
    } else {
        write32(GICC.load(Ordering::Relaxed) + 0x4, mask);
    }
}

/// Clears SPI `intid`'s pending and active states (GICD_ICPENDR, GICD_ICACTIVER: IHI 0069
/// 12.9.9, 12.9.8 / IHI 0048B 4.3.8, 4.3.10): an interrupt a guest left active (its vCPU
/// stopped before deactivating it through a hardware-mapped list register) can fire again.
pub fn clear_spi(intid: u32) {
    if !(32..1020).contains(&intid) {
        return;
    }
    let gicd = GICD.load(Ordering::Relaxed);
    let (word, bit) = (4 * (intid as usize / 32), 1u32 << (intid % 32));
    write32(gicd + 0x280 + word, bit);
    write32(gicd + 0x380 + word, bit);
}

/// Whether SPI `intid` is enabled (GICD_ISENABLER reads the enables).
pub fn spi_enabled(intid: u32) -> bool {
    if !(32..1020).contains(&intid) {
        return false;
    }
    let gicd = GICD.load(Ordering::Relaxed);
    read32(gicd + 0x100 + 4 * (intid as usize / 32)) & (1 << (intid % 32)) != 0
}

/// Sets SPI `intid` edge-triggered or level-sensitive: GICD_ICFGR<n>.Int_config[1] (IHI
/// 0069 12.9.7 / IHI 0048B 4.3.13). Only while the SPI is disabled (changing it while
/// enabled is UNPREDICTABLE).
pub fn configure_spi(intid: u32, edge: bool) {
    if !(32..1020).contains(&intid) {
        return;
    }
    let gicd = GICD.load(Ordering::Relaxed);
    let config = gicd + 0xc00 + 4 * (intid as usize / 16);
    let bit = 1u32 << (2 * (intid % 16) + 1);
    write32(config, if edge { read32(config) | bit } else { read32(config) & !bit });
}

/// Sends SGI `intid` to the CPU with this index and MPIDR.
pub fn send_sgi(index: usize, mpidr: u64, intid: u32) {
    if is_v3() {
        // ICC_SGI1R_EL1 (12.2.23): Aff3, Aff2, INTID, Aff1, TargetList (one bit, Aff0 < 16).
        let value = ((mpidr >> 32 & 0xff) << 48)
            | ((mpidr >> 16 & 0xff) << 32)
            | (u64::from(intid & 0xf) << 24)
            | ((mpidr >> 8 & 0xff) << 16)
            | (1 << (mpidr & 0xf));
        // SAFETY: generating an SGI has no effect on memory; the DSB makes earlier stores
        // visible to the target before it takes the interrupt.
        unsafe { asm!("dsb ishst", "msr icc_sgi1r_el1, {}", "isb", in(reg) value, options(nostack)) };
    } else {
        let interface = u32::from(CPU_INTERFACE[index].load(Ordering::Relaxed));
        // SAFETY: a barrier, as above.
        unsafe { asm!("dsb ishst", options(nostack)) };
        write32(GICD.load(Ordering::Relaxed) + 0xf00, (1 << (16 + interface)) | (intid & 0xf));
        // GICD_SGIR
    }
}

/// Acknowledges the highest-priority pending interrupt: its INTID, or SPURIOUS.
pub fn acknowledge() -> u32 {
    if is_v3() {
        let intid: u64;
        // SAFETY: reading ICC_IAR1_EL1 acknowledges an interrupt; nothing else changes.
        unsafe { asm!("mrs {}, icc_iar1_el1", out(reg) intid, options(nostack)) };
        intid as u32
    } else {
        read32(GICC.load(Ordering::Relaxed) + 0xc) // GICC_IAR (the whole value, CPUID included)
    }
}

/// Priority drop and deactivation of an interrupt the hypervisor handled itself.
pub fn end_of_interrupt(iar: u32) {
    if is_v3() {
        // SAFETY: ICC_EOIR1_EL1 then ICC_DIR_EL1 (EOImode 1) for an acknowledged INTID.
        unsafe {
            asm!("msr icc_eoir1_el1, {0}", "msr icc_dir_el1, {0}", "isb", in(reg) u64::from(iar), options(nostack))
        };
    } else {
        let gicc = GICC.load(Ordering::Relaxed);
        write32(gicc + 0x10, iar); // GICC_EOIR
        write32(gicc + 0x1000, iar); // GICC_DIR
    }
}

/// Priority drop only (EOImode 1): the interrupt stays active until a guest deactivates it
/// through a hardware-mapped list register.
pub fn priority_drop(iar: u32) {
    if is_v3() {
        // SAFETY: ICC_EOIR1_EL1 for an acknowledged INTID.
        unsafe { asm!("msr icc_eoir1_el1, {0}", "isb", in(reg) u64::from(iar), options(nostack)) };
    } else {
        write32(GICC.load(Ordering::Relaxed) + 0x10, iar); // GICC_EOIR
    }
}

pub fn interrupt_id(iar: u32) -> u32 {
    iar & 0x3ff
}

/// How the board's drivers wait for a device's interrupt on this image: the SPI prepared
/// with `prepare_awaited_spi`, the wait in `wait_for_spi` on the CPU that waits.
pub const INTERRUPT_WAIT: hyp_board_qemu_virt::virtio::InterruptWait = hyp_board_qemu_virt::virtio::InterruptWait {
    prepare: prepare_awaited_spi,
    wait: |intid, done| {
        let cpu = crate::cpus::current_index();
        wait_for_spi(intid, cpu, crate::cpus::mpidr_of(cpu), done);
    },
};
