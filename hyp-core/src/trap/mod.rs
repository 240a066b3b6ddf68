//! A guest's synchronous exit, decoded into what it asks for, whatever the architecture
//! that trapped it: the AArch64 decoder ([`aarch64`], from ESR_EL2, FAR_EL2 and HPFAR_EL2)
//! and the AArch32 one ([`aarch32`], from HSR, HDFAR and HPFAR of an ARMv7 core in HYP
//! mode) produce the same [`Trap`], which `exit::handle` answers over the guest's registers
//! as [`GuestRegisters`] gives them. Both syndrome registers share one layout (EC, IL, ISS:
//! ARM ARM D24.2.40 for ESR_EL2, B3.13.6 for HSR), and so do their data-abort ISS fields.

pub mod aarch32;
pub mod aarch64;

use stage2::Ipa;

use crate::syndrome::{ExceptionClass, MmioAccess};
use crate::sysreg::SysRegAccess;

/// What one synchronous exit asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trap {
    /// HVC or SMC with its immediate. A trapped SMC leaves the PC at the SMC, an HVC past it.
    Call { immediate: u16, smc: bool },
    /// A load or store at `ipa` (VA `va`) the VM has no memory for: `access` is the
    /// emulatable access, None when the hardware gave no instruction syndrome.
    DataAbort { ipa: Ipa, va: u64, access: Option<MmioAccess>, write: bool },
    /// An instruction fetch from `ipa`, outside the VM's memory.
    InstructionAbort { ipa: Ipa, va: u64 },
    /// A stage-2 abort whose IPA the hardware does not give (HPFAR is UNKNOWN for its fault
    /// status `status`, e.g. an alignment fault a Device mapping causes): nothing is
    /// emulated or mapped for it, whatever HPFAR holds.
    AbortWithoutIpa { va: u64, status: u8, write: bool, instruction: bool },
    /// WFI (`interrupt`) or WFE.
    Wait { interrupt: bool },
    /// An AArch64 MSR, MRS or SYS (EC 0x18); `iss` for the log line.
    SystemRegister { access: SysRegAccess, iss: u32 },
    /// An AArch32 MCR or MRC to coprocessor `cp` (15 or 14: EC 0x03, 0x05), or a VMRS of
    /// an ID register (`cp` 10: EC 0x08).
    Coprocessor { cp: u8, access: CoprocessorAccess },
    /// An AArch32 MCRR or MRRC to coprocessor `cp` (15 or 14: EC 0x04, 0x0c).
    WideCoprocessor { cp: u8, access: WideCoprocessorAccess },
    /// An AArch32 instruction whose condition failed: it completes doing nothing.
    ConditionFailed,
    /// Anything else: the class of the exception.
    Other(ExceptionClass),
}

/// An AArch32 MCR or MRC (ISS for EC 0x03 and 0x05, ARM ARM B3.13.6): the register
/// `Rt` moves to or from coprocessor register (Opc1, CRn, CRm, Opc2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoprocessorAccess {
    pub opc1: u8,
    pub crn: u8,
    pub crm: u8,
    pub opc2: u8,
    pub rt: u8,
    /// MRC: the coprocessor register is read into Rt.
    pub is_read: bool,
}

impl CoprocessorAccess {
    /// The access in one `u64`, to cross a call in registers. On a 32-bit target the Rust
    /// ABI passes a struct of more than 4 bytes by reference; a reference into the decoded
    /// exit, given to the out-of-line handler of this rare exit, kept the whole exit in
    /// memory, and every ARMv7 exit stored each of its fields and matched its variant again
    /// from memory: 40 to 48 instructions (docs/performance.md, "ARMv7").
    pub fn to_bits(self) -> u64 {
        u64::from_le_bytes([self.opc1, self.crn, self.crm, self.opc2, self.rt, u8::from(self.is_read), 0, 0])
    }
    /// The access `to_bits` gave.
    pub fn from_bits(bits: u64) -> Self {
        let [opc1, crn, crm, opc2, rt, is_read, ..] = bits.to_le_bytes();
        CoprocessorAccess { opc1, crn, crm, opc2, rt, is_read: is_read != 0 }
    }
}

/// An AArch32 MCRR or MRRC (ISS for EC 0x04 and 0x0c, ARM ARM B3.13.6): registers `Rt`
/// (low word) and `Rt2` (high word) move to or from the 64-bit coprocessor register
/// (Opc1, CRm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WideCoprocessorAccess {
    pub opc1: u8,
    pub crm: u8,
    pub rt: u8,
    pub rt2: u8,
    /// MRRC: the coprocessor register is read into Rt and Rt2.
    pub is_read: bool,
}

impl WideCoprocessorAccess {
    /// The access in one `u64`, to cross a call in registers (`CoprocessorAccess::to_bits`).
    pub fn to_bits(self) -> u64 {
        u64::from_le_bytes([self.opc1, self.crm, self.rt, self.rt2, u8::from(self.is_read), 0, 0, 0])
    }
    /// The access `to_bits` gave.
    pub fn from_bits(bits: u64) -> Self {
        let [opc1, crm, rt, rt2, is_read, ..] = bits.to_le_bytes();
        WideCoprocessorAccess { opc1, crm, rt, rt2, is_read: is_read != 0 }
    }
}

/// One decoded exit: what it asks for, and the length of the instruction that trapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedExit {
    pub trap: Trap,
    /// 4, or 2 for a 16-bit T32 instruction (the syndrome's IL bit).
    pub instruction_bytes: u8,
}

/// A vCPU's general registers and PC as an exit handler reads and writes them.
pub trait GuestRegisters {
    /// Register `n` as an instruction sees it (AArch64: 31 is the zero register).
    fn reg(&self, n: u8) -> u64;
    fn set_reg(&mut self, n: u8, value: u64);
    /// The PC moves past the trapped instruction of `bytes` bytes (it completed).
    fn advance_pc(&mut self, bytes: u8);
    /// The arguments of an SMCCC call: registers 0 to 3.
    fn call_arguments(&self) -> [u64; 4] {
        [self.reg(0), self.reg(1), self.reg(2), self.reg(3)]
    }
    /// The guest runs in AArch32 (these are its registers): an SMCCC call's SMC64/HVC64
    /// function is none of its (DEN 0028, 2.5).
    const AARCH32: bool = false;
}

/// A handler given a borrowed view of the registers (an ARMv7 image's AArch32 registers
/// are already the guest's view: `VcpuCpu::aarch32`).
impl<R: GuestRegisters> GuestRegisters for &mut R {
    const AARCH32: bool = R::AARCH32;
    fn reg(&self, n: u8) -> u64 {
        (**self).reg(n)
    }
    fn set_reg(&mut self, n: u8, value: u64) {
        (**self).set_reg(n, value)
    }
    fn advance_pc(&mut self, bytes: u8) {
        (**self).advance_pc(bytes)
    }
}

/// A stage-2 abort whose fault status gives no IPA (`DataAbort::ipa_is_known`), out of the
/// exit path's line: rare, and only its log line and the guest's abort follow.
#[cold]
#[inline(never)]
fn without_ipa(s: crate::syndrome::Syndrome, far: u64) -> Trap {
    let abort = s.data_abort();
    let instruction = s.class() == crate::syndrome::ExceptionClass::INSTRUCTION_ABORT_LOWER;
    // WnR is RES0 in an instruction abort's ISS.
    Trap::AbortWithoutIpa { va: far, status: abort.status_code(), write: !instruction && abort.is_write(), instruction }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coprocessor_access_crosses_a_call_in_one_word_unchanged() {
        for (i, is_read) in [(0u8, false), (7, true), (0xff, true)] {
            let access = CoprocessorAccess { opc1: i, crn: i ^ 1, crm: i ^ 2, opc2: i ^ 3, rt: i ^ 4, is_read };
            assert_eq!(CoprocessorAccess::from_bits(access.to_bits()), access);
            let wide = WideCoprocessorAccess { opc1: i, crm: i ^ 1, rt: i ^ 2, rt2: i ^ 3, is_read };
            assert_eq!(WideCoprocessorAccess::from_bits(wide.to_bits()), wide);
        }
    }
}
