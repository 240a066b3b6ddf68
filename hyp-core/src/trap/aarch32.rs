//! The AArch32 decoder: HSR, HDFAR and HPFAR of an exit to HYP mode from a guest on an
//! ARMv7 core with the Virtualization Extensions (ARM ARM B3.13.6, "Use of the HSR"), as a
//! `Trap`. The syndrome's layout is ESR_EL2's (EC, IL, ISS) and so is a data abort's ISS,
//! without the AArch64-only SF and AR bits.

use super::{CoprocessorAccess, DecodedExit, GuestRegisters, Trap};
use crate::exit::SyncExit;
use crate::syndrome::{ExceptionClass, Syndrome};

/// The registers HYP mode reads on a synchronous exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HypExit {
    pub hsr: u32,
    /// HDFAR (data aborts) or HIFAR (prefetch aborts): the faulting virtual address.
    pub far: u32,
    /// HPFAR: the faulting IPA's page (bits [31:4] = IPA[39:12]).
    pub hpfar: u32,
}

/// An AArch32 guest's r0..r14 and PC, as an exit handler reads and writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub r: [u32; 15],
    pub pc: u32,
}

impl GuestRegisters for Registers {
    fn reg(&self, n: u8) -> u64 {
        self.r.get(usize::from(n)).map_or(0, |&v| u64::from(v))
    }
    fn set_reg(&mut self, n: u8, value: u64) {
        if let Some(r) = self.r.get_mut(usize::from(n)) {
            // The 32-bit register takes the low half, as an AArch32 write does.
            *r = value as u32;
        }
    }
    fn advance_pc(&mut self, bytes: u8) {
        self.pc = self.pc.wrapping_add(u32::from(bytes));
    }
}

/// What the exit asks for.
pub fn decode(exit: &HypExit) -> DecodedExit {
    let s = Syndrome(u64::from(exit.hsr));
    let sync = SyncExit { syndrome: s, far: u64::from(exit.far), hpfar: u64::from(exit.hpfar) };
    let iss = s.iss();
    let trap = match s.class() {
        ExceptionClass::HVC32 => Trap::Call { immediate: s.call_immediate(), smc: false },
        // A trapped SMC's ISS has no immediate (B3.13.6): the call is identified by r0.
        ExceptionClass::SMC32 => Trap::Call { immediate: 0, smc: true },
        ExceptionClass::DATA_ABORT_LOWER => {
            let abort = s.data_abort();
            // SF is RES0 in an HSR: every access is to a 32-bit register.
            let access = abort.mmio_access().map(|a| crate::syndrome::MmioAccess { register_is_64bit: false, ..a });
            Trap::DataAbort { ipa: sync.fault_ipa(), va: sync.far, access, write: abort.is_write() }
        }
        ExceptionClass::INSTRUCTION_ABORT_LOWER => Trap::InstructionAbort { ipa: sync.fault_ipa(), va: sync.far },
        ExceptionClass::WFX => Trap::Wait { interrupt: iss & 1 == 0 },
        ExceptionClass::CP15_MCR_MRC => Trap::Coprocessor { cp: 15, access: coprocessor_access(iss) },
        ExceptionClass::CP14_MCR_MRC => Trap::Coprocessor { cp: 14, access: coprocessor_access(iss) },
        class => Trap::Other(class),
    };
    DecodedExit { trap, instruction_bytes: if s.instruction_is_32bit() { 4 } else { 2 } }
}

/// ISS of a trapped MCR or MRC: Opc2 [19:17], Opc1 [16:14], CRn [13:10], Rt [8:5], CRm
/// [4:1], Direction [0] (1: MRC, a read).
fn coprocessor_access(iss: u32) -> CoprocessorAccess {
    CoprocessorAccess {
        opc2: (iss >> 17 & 7) as u8,
        opc1: (iss >> 14 & 7) as u8,
        crn: (iss >> 10 & 0xf) as u8,
        rt: (iss >> 5 & 0xf) as u8,
        crm: (iss >> 1 & 0xf) as u8,
        is_read: iss & 1 != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syndrome::AccessWidth;
    use stage2::Ipa;

    fn hsr(class: u8, il: bool, iss: u32) -> u32 {
        (u32::from(class) << 26) | (u32::from(il) << 25) | iss
    }

    fn decode_hsr(hsr: u32) -> Trap {
        decode(&HypExit { hsr, far: 0x8000_1234, hpfar: 0x0900_0000 >> 8 }).trap
    }

    #[test]
    fn hvc_and_smc_are_calls() {
        assert_eq!(decode_hsr(hsr(0x12, true, 0x0000)), Trap::Call { immediate: 0, smc: false });
        assert_eq!(decode_hsr(hsr(0x12, true, 0x1234)), Trap::Call { immediate: 0x1234, smc: false });
        assert_eq!(decode_hsr(hsr(0x13, true, 0)), Trap::Call { immediate: 0, smc: true });
    }

    #[test]
    fn a_data_abort_with_a_syndrome_is_a_32_bit_register_access_at_the_ipa() {
        // ISV, SAS = word, SSE = 0, SRT = r3, WnR = 1 (a store), DFSC translation fault.
        let iss = (1 << 24) | (2 << 22) | (3 << 16) | (1 << 6) | 0x05;
        let trap = decode(&HypExit { hsr: hsr(0x24, true, iss), far: 0x0900_0018, hpfar: 0x0900_0000 >> 8 }).trap;
        let Trap::DataAbort { ipa, va, access: Some(access), write: true } = trap else { panic!("{trap:?}") };
        assert_eq!(ipa, Ipa(0x0900_0018));
        assert_eq!(va, 0x0900_0018);
        assert_eq!(
            (access.width, access.register, access.is_write, access.register_is_64bit),
            (AccessWidth::Word, 3, true, false)
        );
        // No instruction syndrome (an LDM, say): nothing to emulate.
        let trap = decode_hsr(hsr(0x24, true, 0x05));
        assert!(matches!(trap, Trap::DataAbort { access: None, write: false, .. }), "{trap:?}");
    }

    #[test]
    fn mcr_and_mrc_name_their_coprocessor_register() {
        // MRC p15, 0, r2, c1, c0, 0 (SCTLR): Opc2 0, Opc1 0, CRn 1, Rt 2, CRm 0, read.
        let iss = (1 << 10) | (2 << 5) | 1;
        let access = CoprocessorAccess { opc1: 0, crn: 1, crm: 0, opc2: 0, rt: 2, is_read: true };
        assert_eq!(decode_hsr(hsr(0x03, true, iss)), Trap::Coprocessor { cp: 15, access });
        // MCR p14, 0, r5, c0, c7, 6 (a debug register): written.
        let iss = (6 << 17) | (5 << 5) | (7 << 1);
        let access = CoprocessorAccess { opc1: 0, crn: 0, crm: 7, opc2: 6, rt: 5, is_read: false };
        assert_eq!(decode_hsr(hsr(0x05, true, iss)), Trap::Coprocessor { cp: 14, access });
    }

    #[test]
    fn wfi_waits_for_an_interrupt_and_a_16_bit_instruction_is_two_bytes() {
        let wfi = decode(&HypExit { hsr: hsr(0x01, false, 0), far: 0, hpfar: 0 });
        assert_eq!(wfi, DecodedExit { trap: Trap::Wait { interrupt: true }, instruction_bytes: 2 });
        assert_eq!(decode_hsr(hsr(0x01, true, 1)), Trap::Wait { interrupt: false });
    }

    #[test]
    fn every_other_class_is_named() {
        for class in [0x00u8, 0x04, 0x06, 0x07, 0x11, 0x21, 0x3f] {
            assert_eq!(decode_hsr(hsr(class, true, 0)), Trap::Other(ExceptionClass(class)), "EC {class:#x}");
        }
    }
}
