//! An exception delivered to an AArch32 guest's own vectors, as the CPU would have taken it
//! (ARM ARM B1.8.3, "Exception entry"; B1.8.1, the vector offsets; Table B1-7, the LR
//! offsets), and the IT state after an emulated Thumb instruction (B1.3.3, ITSTATE): what
//! an ARMv7 image needs to answer an exit of a 32-bit guest, computed here so that it is
//! tested on the host. The image writes the result into the guest's banked and CP15
//! registers.

use crate::exit::InjectedException;

/// CPSR.M of the modes an injected exception is taken to (B1.3.1).
pub const MODE_ABT: u32 = 0x17;
pub const MODE_UND: u32 = 0x1b;
/// CPSR.T: Thumb state.
pub const CPSR_T: u32 = 1 << 5;
const CPSR_I: u32 = 1 << 7;
const CPSR_A: u32 = 1 << 8;
const CPSR_E: u32 = 1 << 9;
const CPSR_J: u32 = 1 << 24;
const CPSR_IT: u32 = (0x3f << 10) | (0b11 << 25);
/// SCTLR.V (high vectors), EE (big-endian exception entry), TE (exceptions in Thumb state).
const SCTLR_V: u32 = 1 << 13;
const SCTLR_EE: u32 = 1 << 25;
const SCTLR_TE: u32 = 1 << 30;
/// TTBCR.EAE: the guest uses the long-descriptor format, and so its fault status format.
const TTBCR_EAE: u32 = 1 << 31;

/// The guest's PL1 registers an exception entry depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pl1State {
    pub sctlr: u32,
    pub vbar: u32,
    pub ttbcr: u32,
}

/// The fault status and address registers an abort sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultRegisters {
    /// DFSR and DFAR.
    Data { status: u32, address: u32 },
    /// IFSR and IFAR.
    Instruction { status: u32, address: u32 },
}

/// Where the guest goes, and what its new mode's registers hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aarch32Exception {
    /// The mode taken to (MODE_UND or MODE_ABT): its SPSR and LR are `spsr` and `lr`.
    pub mode: u32,
    pub cpsr: u32,
    pub spsr: u32,
    pub lr: u32,
    pub pc: u32,
    pub fault: Option<FaultRegisters>,
}

/// `exception` taken by a guest at `pc` (the faulting or undefined instruction) in state
/// `cpsr`. The abort is a synchronous external abort: long-descriptor STATUS 0b010000 with
/// the LPAE bit (9), or short-descriptor FS 0b01000 (B3.13.3, B3.13.6).
pub fn exception_entry(cpsr: u32, pc: u32, pl1: Pl1State, exception: InjectedException) -> Aarch32Exception {
    let thumb = cpsr & CPSR_T != 0;
    let external = if pl1.ttbcr & TTBCR_EAE != 0 { (1 << 9) | 0b01_0000 } else { 0b0_1000 };
    let (mode, offset, lr_offset, fault) = match exception {
        InjectedException::Undefined => (MODE_UND, 0x04, if thumb { 2 } else { 4 }, None),
        InjectedException::InstructionAbort { far } => {
            (MODE_ABT, 0x0c, 4, Some(FaultRegisters::Instruction { status: external, address: far as u32 }))
        }
        InjectedException::DataAbort { far } => {
            (MODE_ABT, 0x10, 8, Some(FaultRegisters::Data { status: external, address: far as u32 }))
        }
    };
    let base = if pl1.sctlr & SCTLR_V != 0 { 0xffff_0000 } else { pl1.vbar & !0x1f };
    // I is always set; A on an abort, not on an undefined instruction; T and E as SCTLR.TE
    // and EE say; the IT state and J cleared.
    let mut new = (cpsr & !(0x1f | CPSR_IT | CPSR_J | CPSR_T | CPSR_E)) | mode | CPSR_I;
    if mode == MODE_ABT {
        new |= CPSR_A;
    }
    if pl1.sctlr & SCTLR_TE != 0 {
        new |= CPSR_T;
    }
    if pl1.sctlr & SCTLR_EE != 0 {
        new |= CPSR_E;
    }
    Aarch32Exception {
        mode,
        cpsr: new,
        spsr: cpsr,
        lr: pc.wrapping_add(lr_offset),
        pc: base.wrapping_add(offset),
        fault,
    }
}

/// The CPSR after one instruction of a Thumb IT block completes (an emulated one): the
/// block ends after its last instruction (IT[2:0] zero), else IT[4:0] shifts left. ITSTATE
/// is CPSR[15:10] = IT[7:2] and CPSR[26:25] = IT[1:0].
pub fn advance_it_state(cpsr: u32) -> u32 {
    let it = ((cpsr >> 8) & 0xfc) | ((cpsr >> 25) & 0b11);
    if cpsr & CPSR_T == 0 || it == 0 {
        return cpsr;
    }
    let next = if it & 0b111 == 0 { 0 } else { (it & 0xe0) | ((it << 1) & 0x1f) };
    (cpsr & !CPSR_IT) | ((next & 0xfc) << 8) | ((next & 0b11) << 25)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC_ARM: u32 = 0x6000_01d3; // Z C set, A I F masked, SVC
    const PL1: Pl1State = Pl1State { sctlr: 0x00c5_0078, vbar: 0x4000_0000, ttbcr: 0 };

    fn it_cpsr(it: u32) -> u32 {
        0x30 | CPSR_T | ((it & 0xfc) << 8) | ((it & 0b11) << 25)
    }

    #[test]
    fn an_undefined_instruction_goes_to_und_mode_at_vbar_plus_4_with_lr_past_it() {
        let e = exception_entry(SVC_ARM, 0x4000_1000, PL1, InjectedException::Undefined);
        assert_eq!((e.mode, e.pc, e.lr, e.spsr), (MODE_UND, 0x4000_0004, 0x4000_1004, SVC_ARM));
        assert_eq!(e.cpsr, 0x6000_01db, "UND mode, flags kept, A I F still masked");
        assert_eq!(e.fault, None);
        // From Thumb: LR is 2 past; a user-mode guest with nothing masked gets only I set.
        let e = exception_entry(0x30, 0x8002, PL1, InjectedException::Undefined);
        assert_eq!((e.lr, e.cpsr), (0x8004, MODE_UND | CPSR_I), "ARM state (SCTLR.TE clear)");
    }

    #[test]
    fn aborts_go_to_abt_mode_with_their_fault_registers_in_the_guest_s_format() {
        let far = 0x1000_0008;
        let e = exception_entry(0x10, 0x4000_2000, PL1, InjectedException::DataAbort { far });
        assert_eq!((e.mode, e.pc, e.lr), (MODE_ABT, 0x4000_0010, 0x4000_2008));
        assert_eq!(e.cpsr, MODE_ABT | CPSR_I | CPSR_A);
        assert_eq!(e.fault, Some(FaultRegisters::Data { status: 0b0_1000, address: 0x1000_0008 }));
        let lpae = Pl1State { ttbcr: TTBCR_EAE, ..PL1 };
        let e = exception_entry(0x10, 0x4000_2000, lpae, InjectedException::InstructionAbort { far });
        assert_eq!((e.pc, e.lr), (0x4000_000c, 0x4000_2004));
        assert_eq!(e.fault, Some(FaultRegisters::Instruction { status: 0x210, address: 0x1000_0008 }));
    }

    #[test]
    fn high_vectors_thumb_and_big_endian_entry_follow_sctlr_and_it_is_cleared() {
        let pl1 = Pl1State { sctlr: SCTLR_V | SCTLR_TE | SCTLR_EE, ..PL1 };
        let e = exception_entry(it_cpsr(0b0000_1100), 0x9000, pl1, InjectedException::Undefined);
        assert_eq!(e.pc, 0xffff_0004);
        assert_eq!(e.cpsr, MODE_UND | CPSR_I | CPSR_T | CPSR_E, "no IT state, Thumb, big-endian");
    }

    #[test]
    fn the_it_state_moves_on_and_ends_after_the_block_s_last_instruction() {
        // ITTE EQ: firstcond 0000, mask 0b0110 -> IT = 0000_0110 shifting left.
        assert_eq!(advance_it_state(it_cpsr(0b0000_0110)), it_cpsr(0b0000_1100));
        assert_eq!(advance_it_state(it_cpsr(0b0000_1100)), it_cpsr(0b0001_1000));
        assert_eq!(advance_it_state(it_cpsr(0b0001_1000)), it_cpsr(0), "the last one: the block ends");
        assert_eq!(advance_it_state(0x30 | CPSR_T), 0x30 | CPSR_T, "no IT block");
        assert_eq!(advance_it_state(SVC_ARM), SVC_ARM, "ARM state");
    }
}
