//! The guest side of the GIC on AArch64: `guest_common::gic` (shared with the AArch32
//! guests) with the GICv3 CPU interface through its system registers (ICV_* under the
//! hypervisor), whichever ID_AA64PFR0_EL1.GIC says.

use core::arch::asm;

use guest_common::gic::{self as common, CpuInterface};
pub use guest_common::gic::{read32, write32, GICC, GICD, GICR, VTIMER};

/// The GICv3 CPU interface's AArch64 system registers.
pub struct Icc;

impl CpuInterface for Icc {
    fn has_system_registers() -> bool {
        let pfr0: u64;
        // SAFETY: an ID register read (trapped and sanitised by the hypervisor).
        unsafe { asm!("mrs {}, id_aa64pfr0_el1", out(reg) pfr0) };
        (pfr0 >> 24) & 0xf != 0
    }

    fn enable_system_registers() {
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
    }

    fn acknowledge_group1() -> u32 {
        let v: u64;
        // SAFETY: ICC_IAR1_EL1.
        unsafe { asm!("mrs {}, S3_0_C12_C12_0", out(reg) v) };
        v as u32
    }

    fn end_group1(iar: u32) {
        // SAFETY: ICC_EOIR1_EL1.
        unsafe { asm!("msr S3_0_C12_C12_1, {}", "isb", in(reg) u64::from(iar)) };
    }

    fn generate_sgi1(value: u64) {
        // SAFETY: an SGI generation register write; the hypervisor traps and emulates it.
        unsafe { asm!("msr S3_0_C12_C11_5, {}", "isb", in(reg) value) };
    }

    fn unmask_irqs() {
        // SAFETY: unmasking IRQs at EL1; the handler is installed by the caller.
        unsafe { asm!("msr daifclr, #2") };
    }
}

/// The system register interface, so a GICv3.
pub fn is_v3() -> bool {
    common::is_v3::<Icc>()
}

/// Enables the distributor (`guest_common::gic::enable_distributor`).
pub fn enable_distributor() {
    common::enable_distributor::<Icc>()
}

/// This vCPU's CPU interface on, with the private interrupts in `ppis_and_sgis` (a mask of
/// INTIDs 0-31) enabled, and IRQs unmasked at EL1.
pub fn bring_up_cpu_interface(vcpu: usize, ppis_and_sgis: u32) {
    common::bring_up_cpu_interface::<Icc>(vcpu, ppis_and_sgis)
}

/// Enables or disables private interrupt `intid` of `vcpu`
/// (`guest_common::gic::set_private_enabled`).
pub fn set_private_enabled(vcpu: usize, intid: u32, on: bool) {
    common::set_private_enabled::<Icc>(vcpu, intid, on)
}

/// Whether private interrupt `intid` of `vcpu` reads enabled
/// (`guest_common::gic::private_enabled`).
pub fn private_enabled(vcpu: usize, intid: u32) -> bool {
    common::private_enabled::<Icc>(vcpu, intid)
}

/// Acknowledges the highest-priority pending interrupt: the IAR value.
pub fn acknowledge() -> u32 {
    common::acknowledge::<Icc>()
}

/// Ends the interrupt `iar` (EOImode 0: priority drop and deactivation).
pub fn end_of_interrupt(iar: u32) {
    common::end_of_interrupt::<Icc>(iar)
}

/// Sends SGI `intid` to vCPU `target`.
pub fn send_sgi(intid: u32, target: usize) {
    common::send_sgi::<Icc>(intid, target)
}

/// ICC_CTLR_EL1.EOImode (GICv3; ICV_CTLR_EL1 under the hypervisor): with `split`, an EOI
/// only drops the running priority and `deactivate` ends the interrupt.
pub fn set_eoi_mode(split: bool) {
    // SAFETY: this vCPU's own CPU interface control register, bit 1 (EOImode).
    unsafe {
        asm!(
            "mrs {t}, S3_0_C12_C12_4", "bic {t}, {t}, #2", "orr {t}, {t}, {m}", "msr S3_0_C12_C12_4, {t}", "isb",
            t = out(reg) _, m = in(reg) u64::from(split) << 1,
        );
    }
}

/// ICC_DIR_EL1 (GICv3): deactivates `intid` (EOImode 1).
pub fn deactivate(intid: u32) {
    // SAFETY: a write of the CPU interface's deactivation register.
    unsafe { asm!("msr S3_0_C12_C11_1, {}", "isb", in(reg) u64::from(intid)) };
}
