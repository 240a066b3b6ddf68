//! An exception delivered to an AArch32 guest's own vectors: where it goes and what its new
//! mode's registers hold is computed by `hyp_core::exit::exception_to_aarch32`
//! (host-tested); here
//! it is written into the guest's banked and CP15 registers, live in this CPU.

use core::arch::asm;

use hyp_core::exit::{exception_to_aarch32, InjectedException};
use hyp_core::trap::aarch32::mode;

use crate::guest_regs::{write_banked, Registers};

/// Reads `MRC p15, 0, Rt, $crn, $crm, $op2` of the guest running on this CPU.
macro_rules! read_cp15 {
    ($crn:literal, $crm:literal, $op2:literal) => {{
        let v: u32;
        // SAFETY: reading a PL1 register of the guest from HYP mode has no side effect.
        unsafe { asm!(concat!("mrc p15, 0, {}, ", $crn, ", ", $crm, ", ", $op2), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

/// Delivers `exception` to the guest on this CPU: its new mode's SPSR and LR, the fault
/// registers of an abort, then its PC and CPSR.
pub fn inject(regs: &mut Registers, exception: InjectedException) {
    let (sctlr, vbar) = (read_cp15!("c1", "c0", "0"), read_cp15!("c12", "c0", "0"));
    // TTBCR.EAE [31]: long descriptors, and their fault status format.
    let long_descriptors = read_cp15!("c2", "c0", "2") >> 31 == 1;
    let e = exception_to_aarch32(regs.cpsr, regs.pc, sctlr, vbar, long_descriptors, exception);
    if e.mode == mode::UND {
        write_banked!("spsr_und", e.spsr);
        write_banked!("lr_und", e.lr);
    } else {
        write_banked!("spsr_abt", e.spsr);
        write_banked!("lr_abt", e.lr);
    }
    match e.fault {
        // SAFETY: DFSR and DFAR of the guest on this CPU, as the abort it is given says.
        Some(f) if !f.instruction => unsafe {
            asm!("mcr p15, 0, {}, c5, c0, 0", "mcr p15, 0, {}, c6, c0, 0", in(reg) f.status, in(reg) f.address, options(nostack))
        },
        // SAFETY: IFSR and IFAR of the guest on this CPU, as above.
        Some(f) => unsafe {
            asm!("mcr p15, 0, {}, c5, c0, 1", "mcr p15, 0, {}, c6, c0, 2", in(reg) f.status, in(reg) f.address, options(nostack))
        },
        None => {}
    }
    regs.pc = e.pc;
    regs.cpsr = e.cpsr;
}
