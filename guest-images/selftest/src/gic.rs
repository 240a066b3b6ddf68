//! The guest side of the GIC, as Linux drives it: GICv3 through the system registers (ICV_*
//! under the hypervisor) and the redistributors, or GICv2 through the CPU interface at
//! 0x0801_0000, whichever ID_AA64PFR0_EL1.GIC says. Every interrupt is group 1 (GICv3) or
//! group 0 (GICv2, the only group a GICv2 guest without security enables) at priority 0x80.

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU8, Ordering};

pub const GICD: usize = 0x0800_0000;
pub const GICC: usize = 0x0801_0000;
pub const GICR: usize = 0x080a_0000;
const GICR_FRAME: usize = 0x2_0000;
const SGI_FRAME: usize = 0x1_0000;
pub const VTIMER: u32 = 27;

pub fn write32(addr: usize, v: u32) {
    // SAFETY: a register of the VM's GIC (emulated by the hypervisor, or QEMU's natively).
    unsafe { write_volatile(addr as *mut u32, v) }
}

pub fn read32(addr: usize) -> u32 {
    // SAFETY: as above.
    unsafe { read_volatile(addr as *const u32) }
}

/// ID_AA64PFR0_EL1.GIC, read once: the hypervisor traps ID register reads, and an interrupt
/// handler that paid for one on every acknowledge would distort the benchmarks.
static VERSION: AtomicU8 = AtomicU8::new(0);

/// The system register interface, so a GICv3.
pub fn is_v3() -> bool {
    match VERSION.load(Ordering::Relaxed) {
        0 => {
            let pfr0: u64;
            // SAFETY: an ID register read (trapped and sanitised by the hypervisor).
            unsafe { asm!("mrs {}, id_aa64pfr0_el1", out(reg) pfr0) };
            let v3 = (pfr0 >> 24) & 0xf != 0;
            VERSION.store(if v3 { 3 } else { 2 }, Ordering::Relaxed);
            v3
        }
        version => version == 3,
    }
}

/// Enables the distributor: GICv3 with affinity routing (GICD_CTLR.ARE | EnableGrp1, as
/// with a single Security state, IHI 0069H §12.9.4), GICv2 EnableGrp0.
pub fn enable_distributor() {
    write32(GICD, if is_v3() { 0x12 } else { 1 });
}

/// This vCPU's CPU interface on, with the private interrupts in `ppis_and_sgis` (a mask of
/// INTIDs 0-31) enabled, and IRQs unmasked at EL1.
pub fn bring_up_cpu_interface(vcpu: usize, ppis_and_sgis: u32) {
    if is_v3() {
        let rd = GICR + vcpu * GICR_FRAME;
        write32(rd + 0x14, read32(rd + 0x14) & !(1 << 1)); // GICR_WAKER.ProcessorSleep
        while read32(rd + 0x14) & (1 << 2) != 0 {} // ChildrenAsleep
        let sgi = rd + SGI_FRAME;
        write32(sgi + 0x80, 0xffff_ffff); // GICR_IGROUPR0: group 1
        for n in 0..8 {
            write32(sgi + 0x400 + 4 * n, 0x8080_8080); // GICR_IPRIORITYR<n>
        }
        write32(sgi + 0x100, ppis_and_sgis); // GICR_ISENABLER0
                                             // SAFETY: the CPU interface's system registers (ICV_* under the hypervisor).
        unsafe {
            asm!(
                "mrs {t}, S3_0_C12_C12_5", "orr {t}, {t}, #1", "msr S3_0_C12_C12_5, {t}", "isb", // ICC_SRE_EL1.SRE
                "msr S3_0_C4_C6_0, {pmr}",  // ICC_PMR_EL1
                "msr S3_0_C12_C12_3, xzr",  // ICC_BPR1_EL1
                "msr S3_0_C12_C12_7, {one}", // ICC_IGRPEN1_EL1
                "isb",
                t = out(reg) _, pmr = in(reg) 0xffu64, one = in(reg) 1u64,
            );
        }
    } else {
        for n in 0..8 {
            write32(GICD + 0x400 + 4 * n, 0x8080_8080); // GICD_IPRIORITYR<n>, banked
        }
        write32(GICD + 0x100, ppis_and_sgis); // GICD_ISENABLER0, banked
        write32(GICC + 0x4, 0xf8); // GICC_PMR
        write32(GICC, 1); // GICC_CTLR.EnableGrp0
    }
    // SAFETY: unmasking IRQs at EL1; the handler is installed by the caller.
    unsafe { asm!("msr daifclr, #2") };
}

/// Acknowledges the highest-priority pending interrupt: the IAR value (INTID in bits 9:0,
/// and on GICv2 the source CPU of an SGI in bits 12:10).
pub fn acknowledge() -> u32 {
    if is_v3() {
        let v: u64;
        // SAFETY: ICC_IAR1_EL1.
        unsafe { asm!("mrs {}, S3_0_C12_C12_0", out(reg) v) };
        v as u32
    } else {
        read32(GICC + 0xc) // GICC_IAR
    }
}

/// Ends the interrupt `iar` (EOImode 0: priority drop and deactivation).
pub fn end_of_interrupt(iar: u32) {
    if is_v3() {
        // SAFETY: ICC_EOIR1_EL1.
        unsafe { asm!("msr S3_0_C12_C12_1, {}", "isb", in(reg) u64::from(iar)) };
    } else {
        write32(GICC + 0x10, iar); // GICC_EOIR
    }
}

/// Sends SGI `intid` to vCPU `target` (Aff0 = `target`, the other affinity levels 0).
pub fn send_sgi(intid: u32, target: usize) {
    if is_v3() {
        let sgi = (u64::from(intid) << 24) | (1u64 << target); // ICC_SGI1R_EL1 TargetList
                                                               // SAFETY: an SGI generation register write; the hypervisor traps and emulates it.
        unsafe { asm!("msr S3_0_C12_C11_5, {}", "isb", in(reg) sgi) };
    } else {
        write32(GICD + 0xf00, (1 << (16 + target)) | intid); // GICD_SGIR CPUTargetList
    }
}
