//! Trapped AArch32 coprocessor accesses of a guest whose EL1 is AArch32: MCR/MRC and
//! MCRR/MRRC to CP15 (the system control registers) and CP14 (debug and trace), and VMRS of
//! an ID register. Each AArch32 System register is architecturally mapped to an AArch64
//! one, or to a half of one (ARM ARM G8, each register's "Configurations" paragraph, e.g.
//! "AArch32 System register DFAR bits [31:0] are architecturally mapped to AArch64 System
//! register FAR_EL1[31:0]"); so an access is emulated as that AArch64 register's
//! (`sysreg::emulate`), with the part of it the AArch32 view covers. The same traps are
//! set as for an AArch64 guest, and the same answers follow:
//! - the ID registers (CP15 c0, Opc1 0, CRm 1-3; MVFR0-2 by VMRS) read sanitised; the rest
//!   of the ID space (CRm 4-7) reads as zero, as the architecture defines it for AArch32;
//! - set/way cache maintenance (DCISW, DCCSW, DCCISW) goes to `set_way`, and while that
//!   watches the VM control registers their writes (SCTLR, TTBR0/1 by MCR or MCRR, TTBCR/2,
//!   DACR, DFSR, IFSR, ADFSR, AIFSR, DFAR, IFAR, PRRR/NMRR, AMAIR0/1, CONTEXTIDR) are
//!   carried out into the right half of the right register;
//! - ACTLR and ACTLR2 are RAZ/WI;
//! - CP14 (debug and trace): RAZ/WI. An AArch32 guest is not offered the debug
//!   architecture: DBGDIDR reads as zero and the ID registers say no debug or trace
//!   (`sysreg::sanitised_id`), so a Linux guest leaves hardware breakpoints off. Nothing of
//!   the CPU's debug state crosses between VMs;
//! - everything else (the IMPLEMENTATION DEFINED registers TIDCP traps, the physical timer,
//!   the PMU) is an undefined instruction, as on AArch64.

use crate::sysreg::{
    self, SgiGenerationRegister, SysRegAccess, SysRegAction, SysRegEnv, VmControlRegister, VmFeatures,
};
use crate::trap::{CoprocessorAccess, WideCoprocessorAccess};

/// The part of a 64-bit register an AArch32 register is a view of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterPart {
    Whole,
    /// Bits [31:0]; the upper half is kept.
    Low,
    /// Bits [63:32]; the lower half is kept.
    High,
}

impl RegisterPart {
    /// `old` with `value` written into this part.
    pub fn merge(self, old: u64, value: u64) -> u64 {
        match self {
            RegisterPart::Whole => value,
            RegisterPart::Low => (old & !0xffff_ffff) | (value & 0xffff_ffff),
            RegisterPart::High => (old & 0xffff_ffff) | (value << 32),
        }
    }
}

/// A VM control register as an AArch32 write reaches it: which register, which part.
type ControlView = (VmControlRegister, RegisterPart);

/// The VM control register (and its part) a CP15 register (Opc1 0, CRn, CRm, Opc2) is a
/// view of, for the registers HCR_EL2.TVM traps (ARM ARM D19, HCR_EL2.TVM, the AArch32 list).
fn control_view(crn: u8, crm: u8, opc2: u8) -> Option<ControlView> {
    use RegisterPart::{High, Low};
    use VmControlRegister as R;
    Some(match (crn, crm, opc2) {
        (1, 0, 0) => (R::Sctlr, Low),
        (2, 0, 0) => (R::Ttbr0, Low),
        (2, 0, 1) => (R::Ttbr1, Low),
        (2, 0, 2) => (R::Tcr, Low),
        (2, 0, 3) => (R::Tcr, High),
        (3, 0, 0) => (R::Dacr, Low),
        (5, 0, 0) => (R::Esr, Low),
        (5, 0, 1) => (R::Ifsr, Low),
        (5, 1, 0) => (R::Afsr0, Low),
        (5, 1, 1) => (R::Afsr1, Low),
        (6, 0, 0) => (R::Far, Low),
        (6, 0, 2) => (R::Far, High),
        (10, 2, 0) => (R::Mair, Low),
        (10, 2, 1) => (R::Mair, High),
        (10, 3, 0) => (R::Amair, Low),
        (10, 3, 1) => (R::Amair, High),
        (13, 0, 1) => (R::Contextidr, Low),
        _ => return None,
    })
}

/// What the access does, and for a control register write, the part it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoprocessorAnswer {
    pub action: SysRegAction,
    pub part: RegisterPart,
}

impl From<SysRegAction> for CoprocessorAnswer {
    fn from(action: SysRegAction) -> Self {
        CoprocessorAnswer { action, part: RegisterPart::Whole }
    }
}

/// Emulates an MCR/MRC to coprocessor `cp` (15, 14, or 10 for VMRS) of the vCPU `env`
/// describes; `value` is what an MCR writes.
pub fn emulate(cp: u8, a: &CoprocessorAccess, value: u64, env: &mut impl SysRegEnv) -> CoprocessorAnswer {
    let raz_wi = if a.is_read { SysRegAction::Read(0) } else { SysRegAction::WriteIgnored };
    let as_aarch64 = |op0, op1, crn, crm, op2| SysRegAccess { op0, op1, crn, crm, op2, rt: a.rt, is_read: a.is_read };
    match cp {
        // Debug (Opc1 0) and trace (Opc1 1): not offered.
        14 if a.opc1 <= 1 => raz_wi.into(),
        // VMRS MVFR0 (c7), MVFR1 (c6), MVFR2 (c5): MVFRn_EL1, S3_0_C0_C3_n.
        10 if a.is_read && a.opc1 == 7 && (5..=7).contains(&a.crn) => {
            sysreg::emulate(&as_aarch64(3, 0, 0, 3, 7 - a.crn), value, env).into()
        }
        15 => match (a.opc1, a.crn, a.crm, a.opc2) {
            (0, 0, 1..=3, _) => sysreg::emulate(&as_aarch64(3, 0, 0, a.crm, a.opc2), value, env).into(),
            (0, 0, 4..=7, _) if a.is_read => SysRegAction::Read(0).into(),
            (0, 1, 0, 1 | 3) => raz_wi.into(),
            // ICC_DIR (MCR p15, 0, <Rt>, c12, c11, 1): ICC_DIR_EL1.
            (0, 12, 11, 1) => sysreg::emulate(&as_aarch64(3, 0, 12, 11, 1), value, env).into(),
            // Cache maintenance: DCISW, DCCSW, DCCISW are DC ISW, CSW, CISW (op0 1).
            (0, 7, _, _) => sysreg::emulate(&as_aarch64(1, 0, 7, a.crm, a.opc2), value, env).into(),
            (0, crn, crm, opc2) if !a.is_read => match control_view(crn, crm, opc2) {
                Some((register, part)) => CoprocessorAnswer { action: SysRegAction::ControlWrite(register), part },
                None => SysRegAction::Undefined.into(),
            },
            _ => SysRegAction::Undefined.into(),
        },
        _ => SysRegAction::Undefined.into(),
    }
}

/// An MCRR/MRRC to coprocessor `cp` (15 or 14) of a vCPU of a VM with `vm`'s features:
/// what it does. A write's value is Rt2:Rt.
pub fn emulate_wide(cp: u8, a: &WideCoprocessorAccess, vm: VmFeatures) -> CoprocessorAnswer {
    match (cp, a.opc1, a.crm, a.is_read) {
        // ICC_SGI1R, ICC_ASGI1R, ICC_SGI0R: a GICv3 guest's SGIs (HCR.IMO/FMO trap them).
        (15, 0, 12, false) if vm.gic_v3 => SysRegAction::GenerateSgi(SgiGenerationRegister::Sgi1r).into(),
        (15, 1, 12, false) if vm.gic_v3 => SysRegAction::GenerateSgi(SgiGenerationRegister::Asgi1r).into(),
        (15, 2, 12, false) if vm.gic_v3 => SysRegAction::GenerateSgi(SgiGenerationRegister::Sgi0r).into(),
        // MRRC DBGDRAR, DBGDSAR: no debug ROM table.
        (14, 0, 1 | 2, true) => SysRegAction::Read(0).into(),
        // MCRR TTBR0, TTBR1 (the 64-bit LPAE form): the whole register.
        (15, 0, 2, false) => SysRegAction::ControlWrite(VmControlRegister::Ttbr0).into(),
        (15, 1, 2, false) => SysRegAction::ControlWrite(VmControlRegister::Ttbr1).into(),
        _ => SysRegAction::Undefined.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debug_registers::DebugRegisters;
    use crate::sysreg::{Encoding, IdRegisters};

    /// ID registers as a Cortex-A72 reports them, in their AArch64 encodings.
    struct A72;
    impl IdRegisters for A72 {
        fn read(&self, r: Encoding) -> u64 {
            match r {
                Encoding(3, 0, 0, 1, 0) => 0x0000_0131, // ID_PFR0
                Encoding(3, 0, 0, 1, 1) => 0x1001_1011, // ID_PFR1: GIC, Virtualization
                Encoding(3, 0, 0, 1, 2) => 0x0301_0066, // ID_DFR0: PerfMon 3, CopDbg 6
                Encoding(3, 0, 0, 3, 0) => 0x1011_1111, // MVFR0
                Encoding(3, 0, 0, 3, 1) => 0x1211_1111, // MVFR1
                Encoding(3, 0, 0, 4, 0) => 0x2222,      // ID_AA64PFR0: must not show
                _ => 0x5555,
            }
        }
    }
    /// A vCPU of a VM on a GICv3 (`.1`) or a GICv2.
    struct Vcpu(DebugRegisters, bool);
    impl SysRegEnv for Vcpu {
        fn features(&self) -> VmFeatures {
            VmFeatures { gic_v3: self.1, ipa_bits: 32 }
        }
        fn id_registers(&self) -> &impl IdRegisters {
            &A72
        }
        fn debug_registers(&mut self) -> &mut DebugRegisters {
            &mut self.0
        }
    }

    fn access(opc1: u8, crn: u8, crm: u8, opc2: u8, is_read: bool) -> CoprocessorAccess {
        CoprocessorAccess { opc1, crn, crm, opc2, rt: 3, is_read }
    }

    fn run(cp: u8, a: CoprocessorAccess) -> CoprocessorAnswer {
        emulate(cp, &a, 0x1234_5678, &mut Vcpu(DebugRegisters::AT_RESET, false))
    }

    fn read(cp: u8, a: CoprocessorAccess) -> u64 {
        match run(cp, a).action {
            SysRegAction::Read(v) => v,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn id_registers_read_sanitised_and_the_aarch64_ones_stay_hidden() {
        assert_eq!(read(15, access(0, 0, 1, 0, true)), 0x131, "ID_PFR0");
        let pfr1 = read(15, access(0, 0, 1, 1, true));
        assert_eq!((pfr1 >> 28, pfr1 >> 12 & 0xf), (0, 0), "no GICv3 system registers, no virtualization");
        let dfr0 = read(15, access(0, 0, 1, 2, true));
        assert_eq!((dfr0 >> 24 & 0xf, dfr0 & 0xf), (0, 0), "no PMU, no debug");
        for crm in 4..=7 {
            assert_eq!(read(15, access(0, 0, crm, 0, true)), 0, "c0, c{crm} reads as zero in AArch32");
        }
        assert_eq!(run(15, access(0, 0, 1, 0, false)).action, SysRegAction::Undefined, "ID writes");
        // VMRS r3, MVFR0 / MVFR1 / MVFR2.
        assert_eq!(read(10, access(7, 7, 0, 0, true)), 0x1011_1111);
        assert_eq!(read(10, access(7, 6, 0, 0, true)), 0x1211_1111);
        assert_eq!(read(10, access(7, 5, 0, 0, true)), 0x5555);
        assert_eq!(run(10, access(7, 0, 0, 0, true)).action, SysRegAction::Undefined, "FPSID is not trapped");
    }

    #[test]
    fn set_way_actlr_and_debug_get_the_aarch64_answers() {
        for crm in [6, 10, 14] {
            assert_eq!(run(15, access(0, 7, crm, 2, false)).action, SysRegAction::SetWay, "c7, c{crm}, 2");
        }
        assert_eq!(read(15, access(0, 1, 0, 1, true)), 0, "ACTLR");
        assert_eq!(run(15, access(0, 1, 0, 1, false)).action, SysRegAction::WriteIgnored);
        assert_eq!(read(15, access(0, 1, 0, 3, true)), 0, "ACTLR2");
        assert_eq!(read(14, access(0, 0, 0, 0, true)), 0, "DBGDIDR");
        assert_eq!(run(14, access(0, 0, 0, 4, false)).action, SysRegAction::WriteIgnored, "DBGBVR0");
        assert_eq!(run(14, access(6, 0, 0, 0, true)).action, SysRegAction::Undefined, "ThumbEE");
        assert_eq!(run(15, access(1, 9, 0, 2, true)).action, SysRegAction::Undefined, "L2CTLR (TIDCP)");
        // CRn 15 (HSTR.T15, HSTR_EL2.T15): every register is IMPLEMENTATION DEFINED.
        for (opc1, crm, is_read) in [(1, 0, true), (1, 0, false), (4, 0, true), (0, 1, true)] {
            let c15 = access(opc1, 15, crm, 0, is_read);
            assert_eq!(run(15, c15).action, SysRegAction::Undefined, "{c15:?}: L2ACTLR, CBAR, ...");
        }
        assert_eq!(run(15, access(0, 9, 12, 0, true)).action, SysRegAction::Undefined, "PMCR (TPM)");
        assert_eq!(run(15, access(0, 14, 2, 1, false)).action, SysRegAction::Undefined, "CNTP_CTL");
    }

    #[test]
    fn control_register_writes_name_the_part_they_write() {
        use RegisterPart::{High, Low};
        use VmControlRegister as R;
        let write = |crn, crm, opc2| run(15, access(0, crn, crm, opc2, false));
        let cases = [
            ((1, 0, 0), R::Sctlr, Low),
            ((2, 0, 3), R::Tcr, High),
            ((3, 0, 0), R::Dacr, Low),
            ((5, 0, 1), R::Ifsr, Low),
            ((6, 0, 0), R::Far, Low),
            ((6, 0, 2), R::Far, High),
            ((10, 2, 1), R::Mair, High),
            ((13, 0, 1), R::Contextidr, Low),
        ];
        for ((crn, crm, opc2), register, part) in cases {
            let answer = write(crn, crm, opc2);
            assert_eq!(answer, CoprocessorAnswer { action: SysRegAction::ControlWrite(register), part }, "c{crn}");
        }
        assert_eq!(run(15, access(0, 1, 0, 0, true)).action, SysRegAction::Undefined, "reads are not trapped");
        let v2 = VmFeatures { gic_v3: false, ipa_bits: 32 };
        let ttbr1 = WideCoprocessorAccess { opc1: 1, crm: 2, rt: 0, rt2: 1, is_read: false };
        assert_eq!(emulate_wide(15, &ttbr1, v2), SysRegAction::ControlWrite(R::Ttbr1).into());
        let cntvct = WideCoprocessorAccess { opc1: 1, crm: 14, rt: 0, rt2: 1, is_read: true };
        assert_eq!(emulate_wide(15, &cntvct, v2).action, SysRegAction::Undefined);
        let dbgdrar = WideCoprocessorAccess { opc1: 0, crm: 1, rt: 0, rt2: 1, is_read: true };
        assert_eq!(emulate_wide(14, &dbgdrar, v2).action, SysRegAction::Read(0));
    }

    #[test]
    fn a_gicv3_guest_generates_sgis_with_mcrr() {
        use crate::sysreg::SgiGenerationRegister as Sgi;
        let v3 = VmFeatures { gic_v3: true, ipa_bits: 32 };
        let v2 = VmFeatures { gic_v3: false, ipa_bits: 32 };
        for (opc1, register) in [(0, Sgi::Sgi1r), (1, Sgi::Asgi1r), (2, Sgi::Sgi0r)] {
            let mcrr = WideCoprocessorAccess { opc1, crm: 12, rt: 0, rt2: 1, is_read: false };
            assert_eq!(emulate_wide(15, &mcrr, v3).action, SysRegAction::GenerateSgi(register));
            assert_eq!(emulate_wide(15, &mcrr, v2).action, SysRegAction::Undefined, "no GICv3 CPU interface");
        }
    }

    #[test]
    fn a_gicv3_guest_s_icc_dir_write_is_its_deactivation() {
        let dir = access(0, 12, 11, 1, false);
        let on = |gic_v3| emulate(15, &dir, 36, &mut Vcpu(DebugRegisters::AT_RESET, gic_v3)).action;
        assert_eq!(on(true), SysRegAction::Deactivate);
        assert_eq!(on(false), SysRegAction::Undefined, "no GICv3 CPU interface");
        let read = emulate(15, &access(0, 12, 11, 1, true), 0, &mut Vcpu(DebugRegisters::AT_RESET, true));
        assert_eq!(read.action, SysRegAction::Undefined, "write-only");
    }

    #[test]
    fn a_part_is_merged_into_the_register() {
        let old = 0x1111_2222_3333_4444;
        assert_eq!(RegisterPart::Low.merge(old, 0xffff_aaaa_bbbb), 0x1111_2222_aaaa_bbbb);
        assert_eq!(RegisterPart::High.merge(old, 0xcccc_dddd), 0xcccc_dddd_3333_4444);
        assert_eq!(RegisterPart::Whole.merge(old, 5), 5);
    }
}
