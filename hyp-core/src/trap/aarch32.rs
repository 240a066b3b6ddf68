//! The AArch32 decoder: the syndrome of an exit from an AArch32 guest, to HYP mode on an
//! ARMv7 core with the Virtualization Extensions (HSR, HDFAR, HPFAR: ARM ARM B3.13.6, "Use
//! of the HSR") or to EL2 on an ARMv8 core (ESR_EL2, FAR_EL2, HPFAR_EL2 of an exception from
//! AArch32 EL1), as a `Trap`. The syndrome's layout is ESR_EL2's (EC, IL, ISS) and so is a
//! data abort's ISS, without the AArch64-only SF and AR bits.
//!
//! What only AArch32 has: a trapped instruction may be conditional, and one whose condition
//! fails may still trap (B3.13.6, "Conditional execution"): it must then do nothing. And the
//! general registers are banked by processor mode. HSR names a register as the instruction
//! does (R0-R14 of the current mode); ESR_EL2 gives the AArch64 view, the X register that
//! holds it while the exception is taken to AArch64 ([`aarch64_register`]), so on an ARMv8
//! core the exit frame's X registers are the guest's registers as named ([`Aarch32View`]).

use super::{CoprocessorAccess, DecodedExit, GuestRegisters, Trap, WideCoprocessorAccess};
use crate::exit::{GuestContext, SyncExit};
use crate::syndrome::{ExceptionClass, Syndrome};
use crate::vcpu_power::VcpuStart;

/// The registers read on a synchronous exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HypExit {
    pub hsr: u32,
    /// HDFAR (data aborts) or HIFAR (prefetch aborts): the faulting virtual address.
    pub far: u32,
    /// HPFAR: the faulting IPA's page (bits [31:4] = IPA[39:12]).
    pub hpfar: u32,
    /// The guest's CPSR when it trapped (SPSR_hyp, SPSR_EL2): its condition flags and IT
    /// state decide whether a conditional instruction executes.
    pub cpsr: u32,
    /// The syndrome names registers in their AArch64 view (ESR_EL2 of an ARMv8 core: five
    /// bits, X0-X30), not as the instruction does (HSR: four bits, R0-R14).
    pub aarch64_view: bool,
}

/// An AArch32 guest's r0..r14 and PC, as an exit handler reads and writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    pub r: [u32; 15],
    pub pc: u32,
}

impl GuestRegisters for Registers {
    const AARCH32: bool = true;
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

/// CPSR.M, the processor modes (ARM ARM G1, "AArch32 processor modes").
pub mod mode {
    pub const USR: u32 = 0x10;
    pub const FIQ: u32 = 0x11;
    pub const IRQ: u32 = 0x12;
    pub const SVC: u32 = 0x13;
    pub const ABT: u32 = 0x17;
    pub const HYP: u32 = 0x1a;
    pub const UND: u32 = 0x1b;
    pub const SYS: u32 = 0x1f;
}

/// CPSR.T [5]: the guest executes T32.
pub const CPSR_T: u32 = 1 << 5;

/// The AArch64 register that holds AArch32 register `n` (0-14) of `mode` while the
/// exception is taken to AArch64 (ARM ARM D1, "Mapping of the general-purpose registers
/// between the Execution states": R0-R12 are X0-X12 but FIQ's R8-R12 are X24-X28; SP and
/// LR of each mode are in X13-X30). None for a register no mode has.
pub fn aarch64_register(mode: u32, n: u8) -> Option<usize> {
    let n = usize::from(n);
    Some(match (mode & 0x1f, n) {
        (_, 0..=7) => n,
        (mode::FIQ, 8..=14) => n + 16,
        (_, 8..=12) => n,
        (mode::USR | mode::SYS, 13 | 14) => n,
        (mode::HYP, 13) => 15,
        (mode::HYP, 14) => 14,
        (mode::IRQ, 13 | 14) => 30 - n,
        (mode::SVC, 13 | 14) => 32 - n,
        (mode::ABT, 13 | 14) => 34 - n,
        (mode::UND, 13 | 14) => 36 - n,
        _ => return None,
    })
}

/// An AArch32 guest's registers in the AArch64 exit frame of an ARMv8 hypervisor, as its
/// syndrome names them (the AArch64 view: register `n` is X`n`, whose low half is the
/// AArch32 register).
pub struct Aarch32View<'a>(pub &'a mut GuestContext);

impl GuestRegisters for Aarch32View<'_> {
    const AARCH32: bool = true;
    fn reg(&self, n: u8) -> u64 {
        self.0.x.get(usize::from(n)).map_or(0, |x| x & 0xffff_ffff)
    }
    fn set_reg(&mut self, n: u8, value: u64) {
        if let Some(x) = self.0.x.get_mut(usize::from(n)) {
            *x = value & 0xffff_ffff;
        }
    }
    fn advance_pc(&mut self, bytes: u8) {
        self.0.pc = (self.0.pc + u64::from(bytes)) & 0xffff_ffff;
        self.0.pstate = u64::from(advance_it_state(self.0.pstate as u32));
    }
}

/// CPSR.IT after the instruction it governs completes (ARM ARM, "ITSTATE", and the IT
/// instruction's description): the mask shifts, and the block ends with its last
/// instruction. Outside an IT block (IT all zero) nothing changes.
pub fn advance_it_state(cpsr: u32) -> u32 {
    let it = it_state(cpsr);
    if it == 0 || cpsr & CPSR_T == 0 {
        return cpsr;
    }
    let next = if it & 0x7 == 0 { 0 } else { (it & 0xe0) | ((it << 1) & 0x1f) };
    (cpsr & !(0x0600_fc00)) | ((next & 0x3) << 25) | ((next >> 2) << 10)
}

/// IT[7:0]: IT[1:0] in CPSR[26:25], IT[7:2] in CPSR[15:10].
fn it_state(cpsr: u32) -> u32 {
    ((cpsr >> 25) & 0x3) | (((cpsr >> 10) & 0x3f) << 2)
}

/// Whether condition `cond` holds for the NZCV flags of `cpsr` (ARM ARM F1, "Conditional
/// execution": the condition codes).
pub fn condition_holds(cond: u32, cpsr: u32) -> bool {
    let (n, z, c, v) = (cpsr >> 31 & 1 == 1, cpsr >> 30 & 1 == 1, cpsr >> 29 & 1 == 1, cpsr >> 28 & 1 == 1);
    let holds = match cond >> 1 {
        0 => z,
        1 => c,
        2 => n,
        3 => v,
        4 => c && !z,
        5 => n == v,
        6 => !z && n == v,
        _ => return true, // AL, and 0b1111 (unconditional)
    };
    holds != (cond & 1 == 1)
}

/// Whether a trapped instruction with syndrome `s` executes, for a guest whose CPSR is
/// `cpsr`: the syndrome's condition when valid (CV), else the IT block's (a T32 instruction
/// in an IT block; B3.13.6), else it is unconditional.
fn executes(s: Syndrome, cpsr: u32) -> bool {
    // The classes whose ISS has CV [24] and COND [23:20].
    if !matches!(s.class().0, 0x01..=0x08 | 0x0c) {
        return true;
    }
    let iss = s.iss();
    let cond = if iss >> 24 & 1 == 1 {
        iss >> 20 & 0xf
    } else {
        match it_state(cpsr) {
            0 => return true,
            it => it >> 4,
        }
    };
    condition_holds(cond, cpsr)
}

/// A vCPU's first state in AArch32: Supervisor mode with asynchronous aborts, IRQs and FIQs
/// masked, T32 if the entry point's bit 0 says so; the kernel's boot protocol puts r0 = 0,
/// r1 = the machine type (~0: the device tree describes the machine) and r2 = the device
/// tree (Documentation/arch/arm/booting.rst), PSCI CPU_ON r0 = the context ID (DEN 0022,
/// 6.4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartState {
    pub pc: u32,
    pub cpsr: u32,
    /// r0, r1, r2.
    pub r: [u32; 3],
}

pub fn start_state(start: VcpuStart) -> StartState {
    let thumb = (start.entry & 1) as u32;
    let context = start.context as u32;
    let r = if start.kernel { [0, 0xffff_ffff, context] } else { [context, 0, 0] };
    StartState { pc: start.entry as u32 & !1, cpsr: mode::SVC | (0b111 << 6) | thumb << 5, r }
}

/// The exit of a guest in AArch32 to AArch64 EL2: FAR_EL2 holds HDFAR in [31:0] and HIFAR in
/// [63:32], and ESR_EL2 names registers in their AArch64 view.
pub fn decode_at_el2(exit: &SyncExit, cpsr: u32) -> DecodedExit {
    let instruction = exit.syndrome.class() == ExceptionClass::INSTRUCTION_ABORT_LOWER;
    let far = if instruction { exit.far >> 32 } else { exit.far };
    let hsr = exit.syndrome.0 as u32;
    decode(&HypExit { hsr, far: far as u32, hpfar: exit.hpfar as u32, cpsr, aarch64_view: true })
}

/// What the exit asks for.
pub fn decode(exit: &HypExit) -> DecodedExit {
    let s = Syndrome(u64::from(exit.hsr));
    let sync = SyncExit { syndrome: s, far: u64::from(exit.far), hpfar: u64::from(exit.hpfar) };
    let iss = s.iss();
    // A register field: 5 bits in the AArch64 view, 4 in HSR's.
    let rt = if exit.aarch64_view { 0x1f } else { 0xf };
    let trap = match s.class() {
        // These classes have no condition (`executes`): matched first, they are not slowed
        // by its test.
        ExceptionClass::HVC32 => Trap::Call { immediate: s.call_immediate(), smc: false },
        // A trapped SMC's ISS has no immediate (B3.13.6): the call is identified by r0.
        ExceptionClass::SMC32 => Trap::Call { immediate: 0, smc: true },
        ExceptionClass::DATA_ABORT_LOWER if !s.data_abort().ipa_is_known() => super::without_ipa(s, sync.far),
        ExceptionClass::DATA_ABORT_LOWER => {
            let abort = s.data_abort();
            // SF is RES0 in an HSR: every access is to a 32-bit register.
            let access = abort.mmio_access().map(|a| a.to_32bit_register());
            Trap::DataAbort { ipa: sync.fault_ipa(), va: sync.far, access, write: abort.is_write() }
        }
        ExceptionClass::INSTRUCTION_ABORT_LOWER if !s.data_abort().ipa_is_known() => super::without_ipa(s, sync.far),
        ExceptionClass::INSTRUCTION_ABORT_LOWER => Trap::InstructionAbort { ipa: sync.fault_ipa(), va: sync.far },
        _ if !executes(s, exit.cpsr) => Trap::ConditionFailed,
        ExceptionClass::WFX => Trap::Wait { interrupt: iss & 1 == 0 },
        ExceptionClass::CP15_MCR_MRC => Trap::Coprocessor { cp: 15, access: coprocessor_access(iss, rt) },
        ExceptionClass::CP14_MCR_MRC => Trap::Coprocessor { cp: 14, access: coprocessor_access(iss, rt) },
        // VMRS is MRC p10, 7, Rt, c<reg>, c0, 0 and has that ISS (B3.13.6, EC 0x08).
        ExceptionClass::VMRS_ID => Trap::Coprocessor { cp: 10, access: coprocessor_access(iss, rt) },
        ExceptionClass::CP15_MCRR_MRRC => Trap::WideCoprocessor { cp: 15, access: wide_coprocessor_access(iss, rt) },
        ExceptionClass::CP14_MRRC => Trap::WideCoprocessor { cp: 14, access: wide_coprocessor_access(iss, rt) },
        class => Trap::Other(class),
    };
    DecodedExit { trap, instruction_bytes: if s.instruction_is_32bit() { 4 } else { 2 } }
}

/// ISS of a trapped MCR or MRC: Opc2 [19:17], Opc1 [16:14], CRn [13:10], Rt [8:5] (HSR)
/// or [9:5] (ESR_EL2), CRm [4:1], Direction [0] (1: MRC, a read). `rt` masks Rt.
fn coprocessor_access(iss: u32, rt: u32) -> CoprocessorAccess {
    CoprocessorAccess {
        opc2: (iss >> 17 & 7) as u8,
        opc1: (iss >> 14 & 7) as u8,
        crn: (iss >> 10 & 0xf) as u8,
        rt: (iss >> 5 & rt) as u8,
        crm: (iss >> 1 & 0xf) as u8,
        is_read: iss & 1 != 0,
    }
}

/// ISS of a trapped MCRR or MRRC: Opc1 [19:16], Rt2 [13:10] and Rt [8:5] (HSR) or [14:10]
/// and [9:5] (ESR_EL2), CRm [4:1], Direction [0] (1: MRRC, a read). `rt` masks Rt and Rt2.
fn wide_coprocessor_access(iss: u32, rt: u32) -> WideCoprocessorAccess {
    WideCoprocessorAccess {
        opc1: (iss >> 16 & 0xf) as u8,
        rt2: (iss >> 10 & rt) as u8,
        rt: (iss >> 5 & rt) as u8,
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
        decode(&HypExit { hsr, far: 0x8000_1234, hpfar: 0x0900_0000 >> 8, cpsr: mode::SVC, aarch64_view: false }).trap
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
        let trap = decode(&HypExit {
            hsr: hsr(0x24, true, iss),
            far: 0x0900_0018,
            hpfar: 0x0900_0000 >> 8,
            cpsr: mode::SVC,
            aarch64_view: false,
        })
        .trap;
        let Trap::DataAbort { ipa, va, access: Some(access), write: true } = trap else { panic!("{trap:?}") };
        assert_eq!(ipa, Ipa(0x0900_0018));
        assert_eq!(va, 0x0900_0018);
        assert_eq!(
            (access.width(), access.register(), access.is_write(), access.register_is_64bit()),
            (AccessWidth::Word, 3, true, false)
        );
        // No instruction syndrome (an LDM, say): nothing to emulate.
        let trap = decode_hsr(hsr(0x24, true, 0x05));
        assert!(matches!(trap, Trap::DataAbort { access: None, write: false, .. }), "{trap:?}");
        // An alignment fault (a stage-2 Device mapping) with the same syndrome: HPFAR is
        // UNKNOWN for it, so no IPA is taken from it.
        let trap = decode(&HypExit {
            hsr: hsr(0x24, true, (iss & !0x3f) | 0x21),
            far: 0x0900_0019,
            hpfar: 0x0900_0000 >> 8,
            cpsr: mode::SVC,
            aarch64_view: false,
        })
        .trap;
        assert_eq!(trap, Trap::AbortWithoutIpa { va: 0x0900_0019, status: 0x21, write: true, instruction: false });
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
        let wfi = decode(&HypExit { hsr: hsr(0x01, false, 0), far: 0, hpfar: 0, cpsr: mode::SVC, aarch64_view: false });
        assert_eq!(wfi, DecodedExit { trap: Trap::Wait { interrupt: true }, instruction_bytes: 2 });
        assert_eq!(decode_hsr(hsr(0x01, true, 1)), Trap::Wait { interrupt: false });
    }

    #[test]
    fn every_other_class_is_named() {
        for class in [0x00u8, 0x06, 0x07, 0x11, 0x21, 0x3f] {
            assert_eq!(decode_hsr(hsr(class, true, 0)), Trap::Other(ExceptionClass(class)), "EC {class:#x}");
        }
    }

    #[test]
    fn esr_el2_names_the_aarch64_view_of_a_register_in_five_bits() {
        // MRC p15, 0, lr, c0, c1, 4 from Supervisor mode: HSR says r14, ESR_EL2 says x18.
        let trap = |aarch64_view, iss| {
            decode(&HypExit { hsr: hsr(0x03, true, iss), far: 0, hpfar: 0, cpsr: mode::SVC, aarch64_view }).trap
        };
        let rt = |t| match t {
            Trap::Coprocessor { access, .. } => access.rt,
            other => panic!("{other:?}"),
        };
        assert_eq!(rt(trap(true, 0x1e8_0243)), 18);
        assert_eq!(rt(trap(false, 0x1e8_01c3)), 14);
        // MCRR p15, 0, r4 (x4), r8_fiq (x24), c2: Rt2 in [14:10].
        let mcrr = decode(&HypExit {
            hsr: hsr(0x04, true, (24 << 10) | (4 << 5) | (2 << 1)),
            far: 0,
            hpfar: 0,
            cpsr: mode::FIQ,
            aarch64_view: true,
        })
        .trap;
        assert_eq!(
            mcrr,
            Trap::WideCoprocessor {
                cp: 15,
                access: WideCoprocessorAccess { opc1: 0, crm: 2, rt: 4, rt2: 24, is_read: false }
            }
        );
    }

    #[test]
    fn mcrr_and_vmrs_name_their_registers() {
        // MCRR p15, 0, r2, r3, c2 (TTBR0): Opc1 0, Rt2 3, Rt 2, CRm 2, write.
        let iss = (3 << 10) | (2 << 5) | (2 << 1);
        let access = WideCoprocessorAccess { opc1: 0, rt2: 3, rt: 2, crm: 2, is_read: false };
        assert_eq!(decode_hsr(hsr(0x04, true, iss)), Trap::WideCoprocessor { cp: 15, access });
        // VMRS r1, MVFR0: MRC p10, 7, r1, c7, c0, 0.
        let iss = (7 << 14) | (7 << 10) | (1 << 5) | 1;
        let access = CoprocessorAccess { opc1: 7, crn: 7, crm: 0, opc2: 0, rt: 1, is_read: true };
        assert_eq!(decode_hsr(hsr(0x08, true, iss)), Trap::Coprocessor { cp: 10, access });
    }

    #[test]
    fn a_trapped_instruction_whose_condition_fails_does_nothing() {
        // MCREQ (CV = 1, COND = EQ) with Z clear: fails; with Z set: executes.
        let mcreq = hsr(0x03, true, (1 << 24) | (1 << 10));
        let z = 1 << 30;
        let exit = |cpsr| decode(&HypExit { hsr: mcreq, far: 0, hpfar: 0, cpsr, aarch64_view: false }).trap;
        assert_eq!(exit(mode::SVC), Trap::ConditionFailed);
        assert!(matches!(exit(mode::SVC | z), Trap::Coprocessor { cp: 15, .. }));
        // CV = 0 in a T32 IT block: the block's condition (ITSTATE = 0b0000_1000: EQ, one
        // instruction) decides.
        let in_it_block = mode::SVC | CPSR_T | (0b10 << 10);
        let wfi = hsr(0x01, false, 0);
        assert_eq!(
            decode(&HypExit { hsr: wfi, far: 0, hpfar: 0, cpsr: in_it_block, aarch64_view: false }).trap,
            Trap::ConditionFailed
        );
        let t = decode(&HypExit { hsr: wfi, far: 0, hpfar: 0, cpsr: in_it_block | z, aarch64_view: false }).trap;
        assert_eq!(t, Trap::Wait { interrupt: true });
        // A data abort has no condition: it always executes.
        let abort =
            decode(&HypExit { hsr: hsr(0x24, true, 0x05), far: 0, hpfar: 0, cpsr: mode::SVC, aarch64_view: false })
                .trap;
        assert!(matches!(abort, Trap::DataAbort { .. }));
    }

    #[test]
    fn every_condition_code_follows_the_flags() {
        let (n, z, c, v) = (1u32 << 31, 1 << 30, 1 << 29, 1 << 28);
        let cases = [
            (0x0, z, 0),     // EQ / NE
            (0x2, c, 0),     // CS / CC
            (0x4, n, 0),     // MI / PL
            (0x6, v, 0),     // VS / VC
            (0x8, c, c | z), // HI / LS
            (0xa, n | v, n), // GE / LT
            (0xc, 0, z),     // GT / LE
        ];
        for (cond, holds, fails) in cases {
            assert!(condition_holds(cond, holds) && !condition_holds(cond, fails), "cond {cond:#x}");
            assert!(!condition_holds(cond | 1, holds) && condition_holds(cond | 1, fails), "cond {:#x}", cond | 1);
        }
        assert!(condition_holds(0xe, 0) && condition_holds(0xf, 0));
    }

    #[test]
    fn each_mode_sees_its_own_banked_registers_in_the_aarch64_frame() {
        let expect = [
            (mode::USR, [13, 14], 8),
            (mode::SYS, [13, 14], 8),
            (mode::HYP, [15, 14], 8),
            (mode::IRQ, [17, 16], 8),
            (mode::SVC, [19, 18], 8),
            (mode::ABT, [21, 20], 8),
            (mode::UND, [23, 22], 8),
            (mode::FIQ, [29, 30], 24),
        ];
        for (m, [sp, lr], r8) in expect {
            assert_eq!(aarch64_register(m, 13), Some(sp), "SP of mode {m:#x}");
            assert_eq!(aarch64_register(m, 14), Some(lr), "LR of mode {m:#x}");
            assert_eq!(aarch64_register(m, 8), Some(r8), "R8 of mode {m:#x}");
            assert_eq!(aarch64_register(m, 12), Some(r8 + 4), "R12 of mode {m:#x}");
            assert_eq!(aarch64_register(m, 7), Some(7));
        }
        assert_eq!(aarch64_register(0x16, 13), None, "monitor mode has no AArch64 mapping");
        assert_eq!(aarch64_register(mode::SVC, 15), None, "the PC is not a general register here");
        let mut ctx = GuestContext { pstate: u64::from(mode::SVC), ..Default::default() };
        ctx.x[19] = 0xffff_ffff_8000_0000;
        let mut view = Aarch32View(&mut ctx);
        assert_eq!(view.reg(19), 0x8000_0000, "only the low half is the AArch32 register");
        view.set_reg(18, u64::MAX);
        assert_eq!(ctx.x[18], 0xffff_ffff);
    }

    #[test]
    fn completing_an_instruction_in_an_it_block_moves_the_it_state_on() {
        // ITTE EQ: three instructions, at ITSTATE 0x06, 0x0c and 0x18; then the block ends.
        let cpsr = |it: u32| mode::SVC | CPSR_T | ((it & 3) << 25) | ((it >> 2) << 10);
        assert_eq!(it_state(advance_it_state(cpsr(0x06))), 0x0c);
        assert_eq!(it_state(advance_it_state(cpsr(0x0c))), 0x18);
        assert_eq!(it_state(advance_it_state(cpsr(0x18))), 0, "the third and last");
        assert_eq!(it_state(advance_it_state(cpsr(0x08))), 0, "the last instruction ends the block");
        assert_eq!(advance_it_state(mode::SVC), mode::SVC, "A32: nothing");
        let mut ctx = GuestContext { pc: 0x8000_0002, pstate: u64::from(cpsr(0x08)), ..Default::default() };
        Aarch32View(&mut ctx).advance_pc(2);
        assert_eq!((ctx.pc, it_state(ctx.pstate as u32)), (0x8000_0004, 0));
    }

    #[test]
    fn a_vcpu_starts_per_the_boot_protocol_or_its_cpu_on() {
        let kernel = start_state(VcpuStart { entry: 0x4200_0000, context: 0x5fe0_0000, kernel: true });
        assert_eq!(kernel, StartState { pc: 0x4200_0000, cpsr: 0x1d3, r: [0, 0xffff_ffff, 0x5fe0_0000] });
        let thumb = start_state(VcpuStart { entry: 0x4000_8001, context: 7, kernel: false });
        assert_eq!(thumb, StartState { pc: 0x4000_8000, cpsr: 0x1d3 | CPSR_T, r: [7, 0, 0] });
    }

    #[test]
    fn at_el2_the_fault_address_is_the_half_of_far_el2_the_abort_names() {
        let far = 0x1111_2222_3333_4444;
        let hpfar = 0x0900_0000 >> 8;
        let abort = |class: u64| SyncExit { syndrome: Syndrome((class << 26) | (1 << 25) | 0x05), far, hpfar };
        let Trap::DataAbort { va, .. } = decode_at_el2(&abort(0x24), mode::SVC).trap else { panic!() };
        assert_eq!(va, 0x3333_4444, "HDFAR");
        let Trap::InstructionAbort { va, .. } = decode_at_el2(&abort(0x20), mode::SVC).trap else { panic!() };
        assert_eq!(va, 0x1111_2222, "HIFAR");
    }
}
