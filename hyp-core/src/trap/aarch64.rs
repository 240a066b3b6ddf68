//! The AArch64 decoder: ESR_EL2, FAR_EL2 and HPFAR_EL2 of an exit from EL1 or EL0 in
//! AArch64 (ARM ARM D24.2.40), as a `Trap`.

use super::{DecodedExit, Trap};
use crate::exit::SyncExit;
use crate::syndrome::ExceptionClass;
use crate::sysreg::SysRegAccess;

/// What the exit asks for. Inlined into the exit path: the decoded exit is matched on once,
/// right after.
#[inline(always)]
pub fn decode(exit: &SyncExit) -> DecodedExit {
    let s = exit.syndrome;
    let trap = match s.class() {
        ExceptionClass::HVC64 => Trap::Call { immediate: s.call_immediate(), smc: false },
        ExceptionClass::SMC64 => Trap::Call { immediate: s.call_immediate(), smc: true },
        ExceptionClass::DATA_ABORT_LOWER => {
            let abort = s.data_abort();
            if abort.ipa_is_known() {
                Trap::DataAbort {
                    ipa: exit.fault_ipa(),
                    va: exit.far,
                    access: abort.mmio_access(),
                    write: abort.is_write(),
                }
            } else {
                super::without_ipa(s, exit.far)
            }
        }
        ExceptionClass::INSTRUCTION_ABORT_LOWER if !s.data_abort().ipa_is_known() => super::without_ipa(s, exit.far),
        ExceptionClass::INSTRUCTION_ABORT_LOWER => Trap::InstructionAbort { ipa: exit.fault_ipa(), va: exit.far },
        // ISS.TI[1:0]: 0 is WFI; WFE (and WFIT, WFET) only yield.
        ExceptionClass::WFX => Trap::Wait { interrupt: s.iss() & 0b11 == 0 },
        ExceptionClass::SYSREG64 => Trap::SystemRegister { access: SysRegAccess::decode(s.iss()), iss: s.iss() },
        class => Trap::Other(class),
    };
    DecodedExit { trap, instruction_bytes: if s.instruction_is_32bit() { 4 } else { 2 } }
}
