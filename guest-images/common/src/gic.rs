//! The guest side of the GIC, as Linux drives it: a GICv3 through its distributor and
//! redistributors (memory-mapped) and the CPU interface's system registers (ICV_* under the
//! hypervisor), or a GICv2 through the distributor and the CPU interface at 0x0801_0000.
//! Every interrupt is group 1 (GICv3) or group 0 (GICv2, the only group a GICv2 guest
//! without security enables) at priority 0x80.
//!
//! The GICv3 system registers are MSR/MRS on AArch64 and MCR/MRC/MCRR on AArch32 (IHI 0069,
//! 12.1): each guest gives them as a `CpuInterface`, and calls the functions here with it.

use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU8, Ordering};

pub const GICD: usize = 0x0800_0000;
pub const GICC: usize = 0x0801_0000;
pub const GICR: usize = 0x080a_0000;
const GICR_FRAME: usize = 0x2_0000;
const SGI_FRAME: usize = 0x1_0000;
pub const GICD_TYPER: usize = GICD + 0x4;
/// The virtual timer's PPI.
pub const VTIMER: u32 = 27;

/// The GICv3 CPU interface's system registers as an architecture reaches them, and what
/// the driver needs of the CPU beside them.
pub trait CpuInterface {
    /// The ID register's GIC field: the system register interface is there (GICv3).
    fn has_system_registers() -> bool;
    /// ICC_SRE.SRE on, ICC_PMR 0xff, ICC_BPR1 0, ICC_IGRPEN1 1.
    fn enable_system_registers();
    /// ICC_IAR1.
    fn acknowledge_group1() -> u32;
    /// ICC_EOIR1.
    fn end_group1(iar: u32);
    /// ICC_SGI1R.
    fn generate_sgi1(value: u64);
    /// IRQs unmasked at the guest's exception level.
    fn unmask_irqs();
}

pub fn write32(addr: usize, v: u32) {
    // SAFETY: a register of the VM's GIC (emulated by the hypervisor, or QEMU's natively).
    unsafe { write_volatile(addr as *mut u32, v) }
}

pub fn read32(addr: usize) -> u32 {
    // SAFETY: as above.
    unsafe { read_volatile(addr as *const u32) }
}

/// Whether the GIC is a GICv3, read once from the ID register: the hypervisor traps ID
/// register reads, and an interrupt handler that paid for one on every acknowledge would
/// distort the benchmarks.
static VERSION: AtomicU8 = AtomicU8::new(0);

/// The system register interface, so a GICv3.
pub fn is_v3<C: CpuInterface>() -> bool {
    match VERSION.load(Ordering::Relaxed) {
        0 => {
            let v3 = C::has_system_registers();
            VERSION.store(if v3 { 3 } else { 2 }, Ordering::Relaxed);
            v3
        }
        version => version == 3,
    }
}

/// Enables the distributor: GICv3 with affinity routing (GICD_CTLR.ARE | EnableGrp1, as
/// with a single Security state, IHI 0069H §12.9.4), GICv2 EnableGrp0.
pub fn enable_distributor<C: CpuInterface>() {
    write32(GICD, if is_v3::<C>() { 0x12 } else { 1 });
}

/// This vCPU's CPU interface on, with the private interrupts in `ppis_and_sgis` (a mask of
/// INTIDs 0-31) enabled, and IRQs unmasked.
pub fn bring_up_cpu_interface<C: CpuInterface>(vcpu: usize, ppis_and_sgis: u32) {
    if is_v3::<C>() {
        let rd = GICR + vcpu * GICR_FRAME;
        write32(rd + 0x14, read32(rd + 0x14) & !(1 << 1)); // GICR_WAKER.ProcessorSleep
        while read32(rd + 0x14) & (1 << 2) != 0 {} // ChildrenAsleep
        let sgi = rd + SGI_FRAME;
        write32(sgi + 0x80, 0xffff_ffff); // GICR_IGROUPR0: group 1
        for n in 0..8 {
            write32(sgi + 0x400 + 4 * n, 0x8080_8080); // GICR_IPRIORITYR<n>
        }
        write32(sgi + 0x100, ppis_and_sgis); // GICR_ISENABLER0
        C::enable_system_registers();
    } else {
        for n in 0..8 {
            write32(GICD + 0x400 + 4 * n, 0x8080_8080); // GICD_IPRIORITYR<n>, banked
        }
        write32(GICD + 0x100, ppis_and_sgis); // GICD_ISENABLER0, banked
        write32(GICC + 0x4, 0xf8); // GICC_PMR
        write32(GICC, 1); // GICC_CTLR.EnableGrp0
    }
    C::unmask_irqs();
}

/// Enables (`on`) or disables SGI or PPI `intid` of vCPU `vcpu`, which must be the caller
/// on a GICv2 (GICD_ISENABLER0 and GICD_ICENABLER0 are banked per CPU; on GICv3 its
/// redistributor's GICR_ISENABLER0 or GICR_ICENABLER0).
pub fn set_private_enabled<C: CpuInterface>(vcpu: usize, intid: u32, on: bool) {
    let base = if is_v3::<C>() { GICR + vcpu * GICR_FRAME + SGI_FRAME } else { GICD };
    write32(base + if on { 0x100 } else { 0x180 }, 1 << intid);
}

/// Whether SGI or PPI `intid` of vCPU `vcpu` (the caller, on a GICv2) reads enabled.
pub fn private_enabled<C: CpuInterface>(vcpu: usize, intid: u32) -> bool {
    let base = if is_v3::<C>() { GICR + vcpu * GICR_FRAME + SGI_FRAME } else { GICD };
    read32(base + 0x100) & (1 << intid) != 0
}

/// Acknowledges the highest-priority pending interrupt: the IAR value (INTID in bits 9:0,
/// and on GICv2 the source CPU of an SGI in bits 12:10).
pub fn acknowledge<C: CpuInterface>() -> u32 {
    if is_v3::<C>() {
        C::acknowledge_group1()
    } else {
        read32(GICC + 0xc) // GICC_IAR
    }
}

/// Ends the interrupt `iar` (EOImode 0: priority drop and deactivation).
pub fn end_of_interrupt<C: CpuInterface>(iar: u32) {
    if is_v3::<C>() {
        C::end_group1(iar);
    } else {
        write32(GICC + 0x10, iar); // GICC_EOIR
    }
}

/// Sends SGI `intid` to vCPU `target` (Aff0 = `target`, the other affinity levels 0).
pub fn send_sgi<C: CpuInterface>(intid: u32, target: usize) {
    if is_v3::<C>() {
        C::generate_sgi1((u64::from(intid) << 24) | (1u64 << target)); // ICC_SGI1R TargetList
    } else {
        write32(GICD + 0xf00, (1 << (16 + target)) | intid); // GICD_SGIR CPUTargetList
    }
}
