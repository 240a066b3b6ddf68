//! An exception delivered to an AArch32 guest's own vectors, as the CPU would have taken it
//! (ARM ARM B1.8.3, "Exception entry"; B1.8.1 the vector offsets; Table B1-7 the LR offsets):
//! the mode it is taken to, the CPSR and LR that mode gets, the vector, and the fault status
//! and address registers of an abort.

use core::arch::asm;

use hyp_core::exit::InjectedException;

use crate::guest_regs::{write_banked, Registers, CPSR_T, MODE_ABT, MODE_UND};

/// SCTLR.V (high vectors), TE (exceptions in Thumb state), EE (big-endian exception entry).
const SCTLR_V: u32 = 1 << 13;
const SCTLR_TE: u32 = 1 << 30;
const SCTLR_EE: u32 = 1 << 25;
/// TTBCR.EAE: the guest uses the long-descriptor format (its fault status format follows).
const TTBCR_EAE: u32 = 1 << 31;
/// CPSR's A, I, F, T, E and the IT bits (B1.3.3).
const CPSR_A: u32 = 1 << 8;
const CPSR_I: u32 = 1 << 7;
const CPSR_E: u32 = 1 << 9;
const CPSR_IT: u32 = (0x3f << 10) | (0b11 << 25);
const CPSR_J: u32 = 1 << 24;

/// Where the guest goes, and what its new mode's registers hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aarch32Exception {
    pub mode: u32,
    pub cpsr: u32,
    pub spsr: u32,
    pub lr: u32,
    pub pc: u32,
    /// DFSR and DFAR, or IFSR and IFAR: (is_data, status, address).
    pub fault: Option<(bool, u32, u32)>,
}

/// `exception` taken from the guest state `regs` with SCTLR, VBAR and TTBCR as given.
pub fn exception_entry(
    regs: &Registers,
    sctlr: u32,
    vbar: u32,
    ttbcr: u32,
    exception: InjectedException,
) -> Aarch32Exception {
    let thumb = regs.cpsr & CPSR_T != 0;
    // Synchronous external abort: long-descriptor STATUS 0b010000 with the LPAE bit (9), or
    // short-descriptor FS 0b01000 (B3.13.3, B3.13.6).
    let external = if ttbcr & TTBCR_EAE != 0 { (1 << 9) | 0b01_0000 } else { 0b0_1000 };
    let (mode, offset, lr_offset, mask_a, fault) = match exception {
        InjectedException::Undefined => (MODE_UND, 0x04, if thumb { 2 } else { 4 }, false, None),
        InjectedException::InstructionAbort { far } => (MODE_ABT, 0x0c, 4, true, Some((false, external, far as u32))),
        InjectedException::DataAbort { far } => (MODE_ABT, 0x10, 8, true, Some((true, external, far as u32))),
    };
    let base = if sctlr & SCTLR_V != 0 { 0xffff_0000 } else { vbar & !0x1f };
    let mut cpsr = (regs.cpsr & !(0x1f | CPSR_IT | CPSR_J | CPSR_T | CPSR_E)) | mode | CPSR_I;
    if mask_a {
        cpsr |= CPSR_A;
    }
    if sctlr & SCTLR_TE != 0 {
        cpsr |= CPSR_T;
    }
    if sctlr & SCTLR_EE != 0 {
        cpsr |= CPSR_E;
    }
    Aarch32Exception {
        mode,
        cpsr,
        spsr: regs.cpsr,
        lr: regs.pc.wrapping_add(lr_offset),
        pc: base.wrapping_add(offset),
        fault,
    }
}

/// Reads `MRC p15, 0, Rt, $crn, $crm, $op2` of the guest running on this CPU.
macro_rules! read_cp15 {
    ($crn:literal, $crm:literal, $op2:literal) => {{
        let v: u32;
        // SAFETY: reading a PL1 register of the guest from HYP mode has no side effect.
        unsafe { asm!(concat!("mrc p15, 0, {}, ", $crn, ", ", $crm, ", ", $op2), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

/// Delivers `exception` to the guest on this CPU (its CP15 and banked registers are live
/// here): its new mode's SPSR and LR, the fault registers of an abort, then its PC and CPSR.
pub fn inject(regs: &mut Registers, exception: InjectedException) {
    let e = exception_entry(
        regs,
        read_cp15!("c1", "c0", "0"),
        read_cp15!("c12", "c0", "0"),
        read_cp15!("c2", "c0", "2"),
        exception,
    );
    if e.mode == MODE_UND {
        write_banked!("spsr_und", e.spsr);
        write_banked!("lr_und", e.lr);
    } else {
        write_banked!("spsr_abt", e.spsr);
        write_banked!("lr_abt", e.lr);
    }
    match e.fault {
        // SAFETY: DFSR and DFAR of the guest on this CPU, as the abort it is given says.
        Some((true, status, address)) => unsafe {
            asm!("mcr p15, 0, {}, c5, c0, 0", "mcr p15, 0, {}, c6, c0, 0", in(reg) status, in(reg) address, options(nostack))
        },
        // SAFETY: IFSR and IFAR of the guest on this CPU, as above.
        Some((false, status, address)) => unsafe {
            asm!("mcr p15, 0, {}, c5, c0, 1", "mcr p15, 0, {}, c6, c0, 2", in(reg) status, in(reg) address, options(nostack))
        },
        None => {}
    }
    regs.pc = e.pc;
    regs.cpsr = e.cpsr;
}
