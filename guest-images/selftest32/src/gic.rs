//! The guest side of the GIC on AArch32: `guest_common::gic` (shared with the AArch64
//! guests) with the GICv3 CPU interface through CP15 (IHI 0069, 12.1: ICC_IAR1 is MRC p15,
//! 0, Rt, c12, c12, 0, ICC_SGI1R is MCRR p15, 0, Rt, Rt2, c12, ...), whichever ID_PFR1.GIC
//! says: the ICV_* registers under the hypervisor when the VM has a GICv3, the GICv2 CPU
//! interface at 0x0801_0000 otherwise (the ARMv7 image, or a GICv2 board).

use core::arch::asm;

use guest_common::gic::{self as common, CpuInterface};
pub use guest_common::gic::{read32, write32, GICC, GICD, GICD_TYPER, GICR, VTIMER};

use crate::cp15;

/// The GICv3 CPU interface's AArch32 system registers.
pub struct Icc;

impl CpuInterface for Icc {
    fn has_system_registers() -> bool {
        cp15::id_pfr1() >> 28 != 0
    }

    fn enable_system_registers() {
        // SAFETY: the CPU interface's system registers (ICV_* under the hypervisor): ICC_SRE.SRE,
        // ICC_PMR, ICC_BPR1, ICC_IGRPEN1.
        unsafe {
            asm!(
                "mrc p15, 0, {t}, c12, c12, 5", "orr {t}, {t}, #1", "mcr p15, 0, {t}, c12, c12, 5", "isb",
                "mcr p15, 0, {pmr}, c4, c6, 0",
                "mcr p15, 0, {zero}, c12, c12, 3",
                "mcr p15, 0, {one}, c12, c12, 7",
                "isb",
                t = out(reg) _, pmr = in(reg) 0xffu32, zero = in(reg) 0u32, one = in(reg) 1u32,
                options(nostack),
            );
        }
    }

    fn acknowledge_group1() -> u32 {
        let v: u32;
        // SAFETY: ICC_IAR1.
        unsafe { asm!("mrc p15, 0, {}, c12, c12, 0", out(reg) v, options(nostack)) };
        v
    }

    fn end_group1(iar: u32) {
        // SAFETY: ICC_EOIR1.
        unsafe { asm!("mcr p15, 0, {}, c12, c12, 1", "isb", in(reg) iar, options(nostack)) };
    }

    fn generate_sgi1(value: u64) {
        // SAFETY: ICC_SGI1R (MCRR): an SGI; the hypervisor traps and emulates it.
        unsafe {
            asm!("mcrr p15, 0, {}, {}, c12", "isb", in(reg) value as u32, in(reg) (value >> 32) as u32, options(nostack))
        };
    }

    fn unmask_irqs() {
        // SAFETY: unmasking IRQs in this mode; the handler is installed by the caller.
        unsafe { asm!("cpsie i", options(nostack)) };
    }
}

/// The system register interface, so a GICv3.
pub fn is_v3() -> bool {
    common::is_v3::<Icc>()
}

/// Enables the distributor.
pub fn enable_distributor() {
    common::enable_distributor::<Icc>()
}

/// This vCPU's CPU interface on, with the private interrupts in `ppis_and_sgis` enabled, and
/// IRQs unmasked.
pub fn bring_up_cpu_interface(vcpu: usize, ppis_and_sgis: u32) {
    common::bring_up_cpu_interface::<Icc>(vcpu, ppis_and_sgis)
}

/// Acknowledges the highest-priority pending interrupt: the IAR value.
pub fn acknowledge() -> u32 {
    common::acknowledge::<Icc>()
}

/// Ends the interrupt `iar`.
pub fn end_of_interrupt(iar: u32) {
    common::end_of_interrupt::<Icc>(iar)
}

/// Sends SGI `intid` to vCPU `target`.
pub fn send_sgi(intid: u32, target: usize) {
    common::send_sgi::<Icc>(intid, target)
}
