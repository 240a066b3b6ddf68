//! The A64 instructions whose cost an instruction count hides, told apart by their encoding
//! (ARM ARM C5, "The A64 System Instruction Class"; C6.2 for each instruction): system
//! register reads and writes (MRS, MSR), barriers (DSB, DMB, ISB), TLB maintenance (TLBI),
//! cache maintenance (DC, IC) and address translation (AT). Everything else is `Other`.
//!
//! Every system instruction is `1101 0101 00 L op0 op1 CRn CRm op2 Rt`: L [21] (1 for MRS
//! and SYSL), op0 [20:19], op1 [18:16], CRn [15:12], CRm [11:8], op2 [7:5], Rt [4:0] (ARM
//! ARM C5.1, "System instruction class encoding overview"). op0 says which group:
//! 0b00 hints, barriers and PSTATE writes (`MSR <pstatefield>, #imm`), 0b01 the SYS
//! instructions (AT, DC, IC, TLBI and a few others), 0b10 and 0b11 the system registers.

use std::fmt;

/// What an instruction is, as far as its cost beyond one instruction goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// MRS: a system register read.
    Mrs,
    /// MSR: a system register write, or a PSTATE field's (`MSR DAIFSet, #imm`).
    Msr,
    Dsb,
    Dmb,
    Isb,
    Tlbi,
    /// Data cache maintenance, DC ZVA included.
    Dc,
    /// Instruction cache maintenance.
    Ic,
    /// Address translation (AT S1E1R, ...).
    At,
    Other,
}

/// The fields of a system instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct System {
    read: bool,
    op0: u32,
    op1: u32,
    crn: u32,
    crm: u32,
    op2: u32,
}

fn system(word: u32) -> Option<System> {
    (word & 0xffc0_0000 == 0xd500_0000).then_some(System {
        read: word >> 21 & 1 == 1,
        op0: word >> 19 & 0b11,
        op1: word >> 16 & 0b111,
        crn: word >> 12 & 0xf,
        crm: word >> 8 & 0xf,
        op2: word >> 5 & 0b111,
    })
}

/// The class of the A64 instruction `word`.
pub fn classify(word: u32) -> Class {
    let Some(s) = system(word) else { return Class::Other };
    match (s.op0, s.read) {
        // Barriers (C6.2, DSB, DMB, ISB): CRn 3, op1 3; CRm is the option. DSB with nXS
        // (FEAT_XS) is op2 0b001 with CRm<1:0> = 0b10.
        (0b00, false) if s.crn == 0b0011 && s.op1 == 0b011 => match s.op2 {
            0b100 => Class::Dsb,
            0b001 if s.crm & 0b11 == 0b10 => Class::Dsb,
            0b101 => Class::Dmb,
            0b110 => Class::Isb,
            _ => Class::Other,
        },
        // MSR (immediate): a PSTATE field, CRn 4 (C6.2, MSR (immediate)).
        (0b00, false) if s.crn == 0b0100 => Class::Msr,
        (0b01, false) => match s.crn {
            // TLBI, and the nXS forms of FEAT_XS (CRn 9).
            0b1000 | 0b1001 => Class::Tlbi,
            0b0111 => match s.crm {
                0b1000 | 0b1001 => Class::At,
                0b0001 | 0b0101 => Class::Ic,
                // CFP, DVP, CPP (prediction restriction by context): not cache maintenance.
                0b0011 => Class::Other,
                _ => Class::Dc,
            },
            _ => Class::Other,
        },
        (0b10 | 0b11, false) => Class::Msr,
        (0b10 | 0b11, true) => Class::Mrs,
        _ => Class::Other,
    }
}

/// The instruction `word` as a line of a report names it: `mrs ESR_EL2`, `msr DAIFSet`,
/// `dsb ish`, `tlbi vmalle1`, ...; a register or operation without a name here as the
/// generic `S<op0>_<op1>_C<n>_C<m>_<op2>` (C5.3).
pub fn describe(word: u32) -> String {
    let Some(s) = system(word) else { return format!("{word:#010x}") };
    let generic = || format!("S{}_{}_C{}_C{}_{}", s.op0, s.op1, s.crn, s.crm, s.op2);
    match classify(word) {
        Class::Mrs | Class::Msr if s.op0 == 0 => {
            let field = match (s.op1, s.op2) {
                (0b011, 0b110) => "DAIFSet".to_string(),
                (0b011, 0b111) => "DAIFClr".to_string(),
                (0b000, 0b101) => "SPSel".to_string(),
                _ => format!("pstate op1={} op2={}", s.op1, s.op2),
            };
            format!("msr {field}")
        }
        Class::Mrs => format!("mrs {}", register_name(s).unwrap_or_else(generic)),
        Class::Msr => format!("msr {}", register_name(s).unwrap_or_else(generic)),
        Class::Dsb | Class::Dmb => {
            let option = match s.crm {
                0b1111 => "sy",
                0b1110 => "st",
                0b1101 => "ld",
                0b1011 => "ish",
                0b1010 => "ishst",
                0b1001 => "ishld",
                0b0111 => "nsh",
                0b0110 => "nshst",
                0b0101 => "nshld",
                0b0011 => "osh",
                0b0010 => "oshst",
                0b0001 => "oshld",
                _ => "?",
            };
            let name = if classify(word) == Class::Dsb { "dsb" } else { "dmb" };
            format!("{name} {option}")
        }
        Class::Isb => "isb".to_string(),
        Class::Tlbi => format!("tlbi {}", tlbi_name(s).unwrap_or_else(generic)),
        Class::Dc => format!("dc {}", dc_name(s).unwrap_or_else(generic)),
        Class::Ic => format!("ic {}", ic_name(s).unwrap_or_else(generic)),
        Class::At => format!("at {}", generic()),
        Class::Other => generic(),
    }
}

/// The registers the hypervisor's exit paths read and write, by encoding (ARM ARM D24, each
/// register's "Accessing" section; the GIC's in IHI 0069 12).
fn register_name(s: System) -> Option<String> {
    let name = match (s.op0, s.op1, s.crn, s.crm, s.op2) {
        (3, 0, 0, 0, 5) => "MPIDR_EL1",
        (3, 0, 1, 0, 0) => "SCTLR_EL1",
        (3, 0, 4, 6, 0) => "ICC_PMR_EL1",
        (3, 0, 12, 11, 1) => "ICC_DIR_EL1",
        (3, 0, 12, 11, 5) => "ICC_SGI1R_EL1",
        (3, 0, 12, 12, 0) => "ICC_IAR1_EL1",
        (3, 0, 12, 12, 1) => "ICC_EOIR1_EL1",
        (3, 3, 4, 2, 1) => "DAIF",
        (3, 3, 14, 0, 1) => "CNTPCT_EL0",
        (3, 3, 14, 0, 2) => "CNTVCT_EL0",
        (3, 3, 14, 3, 1) => "CNTV_CTL_EL0",
        (3, 3, 14, 3, 2) => "CNTV_CVAL_EL0",
        (3, 4, 1, 1, 0) => "HCR_EL2",
        (3, 4, 2, 1, 0) => "VTTBR_EL2",
        (3, 4, 4, 0, 0) => "SPSR_EL2",
        (3, 4, 4, 0, 1) => "ELR_EL2",
        (3, 4, 5, 2, 0) => "ESR_EL2",
        (3, 4, 6, 0, 0) => "FAR_EL2",
        (3, 4, 6, 0, 4) => "HPFAR_EL2",
        (3, 4, 12, 8, n) => return Some(format!("ICH_AP0R{n}_EL2")),
        (3, 4, 12, 9, n) => return Some(format!("ICH_AP1R{n}_EL2")),
        (3, 4, 12, 11, 0) => "ICH_HCR_EL2",
        (3, 4, 12, 11, 1) => "ICH_VTR_EL2",
        (3, 4, 12, 11, 2) => "ICH_MISR_EL2",
        (3, 4, 12, 11, 3) => "ICH_EISR_EL2",
        (3, 4, 12, 11, 5) => "ICH_ELRSR_EL2",
        (3, 4, 12, 11, 7) => "ICH_VMCR_EL2",
        (3, 4, 12, 12, n) => return Some(format!("ICH_LR{n}_EL2")),
        (3, 4, 12, 13, n) => return Some(format!("ICH_LR{}_EL2", n + 8)),
        (3, 4, 13, 0, 2) => "TPIDR_EL2",
        (3, 4, 14, 0, 3) => "CNTVOFF_EL2",
        (3, 4, 14, 1, 0) => "CNTHCTL_EL2",
        (3, 4, 14, 2, 0) => "CNTHP_TVAL_EL2",
        (3, 4, 14, 2, 1) => "CNTHP_CTL_EL2",
        (3, 4, 14, 2, 2) => "CNTHP_CVAL_EL2",
        _ => return None,
    };
    Some(name.to_string())
}

fn tlbi_name(s: System) -> Option<String> {
    let name = match (s.op1, s.crn, s.crm, s.op2) {
        (0, 8, 7, 0) => "vmalle1",
        (0, 8, 3, 0) => "vmalle1is",
        (4, 8, 7, 6) => "vmalls12e1",
        (4, 8, 3, 6) => "vmalls12e1is",
        (4, 8, 0, 1) => "ipas2e1is",
        (4, 8, 4, 1) => "ipas2e1",
        (4, 8, 7, 0) => "alle2",
        (4, 8, 3, 0) => "alle2is",
        (4, 8, 7, 4) => "alle1",
        (4, 8, 3, 4) => "alle1is",
        _ => return None,
    };
    Some(name.to_string())
}

fn dc_name(s: System) -> Option<String> {
    let name = match (s.op1, s.crm, s.op2) {
        (3, 4, 1) => "zva",
        (0, 6, 1) => "ivac",
        (0, 6, 2) => "isw",
        (3, 10, 1) => "cvac",
        (0, 10, 2) => "csw",
        (3, 11, 1) => "cvau",
        (3, 14, 1) => "civac",
        (0, 14, 2) => "cisw",
        _ => return None,
    };
    Some(name.to_string())
}

fn ic_name(s: System) -> Option<String> {
    let name = match (s.op1, s.crm, s.op2) {
        (0, 1, 0) => "ialluis",
        (0, 5, 0) => "iallu",
        (3, 5, 1) => "ivau",
        _ => return None,
    };
    Some(name.to_string())
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Class::Mrs => "MRS",
            Class::Msr => "MSR",
            Class::Dsb => "DSB",
            Class::Dmb => "DMB",
            Class::Isb => "ISB",
            Class::Tlbi => "TLBI",
            Class::Dc => "DC",
            Class::Ic => "IC",
            Class::At => "AT",
            Class::Other => "other",
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodings as LLVM's assembler gives them (`llvm-mc -triple=aarch64 -show-encoding`).
    const ENCODED: &[(u32, Class, &str)] = &[
        (0xd503_3fdf, Class::Isb, "isb"),
        (0xd503_3f9f, Class::Dsb, "dsb sy"),
        (0xd503_3b9f, Class::Dsb, "dsb ish"),
        (0xd503_3a9f, Class::Dsb, "dsb ishst"),
        (0xd503_379f, Class::Dsb, "dsb nsh"),
        (0xd503_369f, Class::Dsb, "dsb nshst"),
        (0xd503_3bbf, Class::Dmb, "dmb ish"),
        (0xd503_39bf, Class::Dmb, "dmb ishld"),
        (0xd503_30ff, Class::Other, "S0_3_C3_C0_7"),  // sb
        (0xd503_3f5f, Class::Other, "S0_3_C3_C15_2"), // clrex
        (0xd503_201f, Class::Other, "S0_3_C2_C0_0"),  // nop
        (0xd503_203f, Class::Other, "S0_3_C2_C0_1"),  // yield
        (0xd503_207f, Class::Other, "S0_3_C2_C0_3"),  // wfi
        (0xd503_42df, Class::Msr, "msr DAIFSet"),
        (0xd503_4fff, Class::Msr, "msr DAIFClr"),
        (0xd500_41bf, Class::Msr, "msr SPSel"),
        (0xd508_871f, Class::Tlbi, "tlbi vmalle1"),
        (0xd50c_83df, Class::Tlbi, "tlbi vmalls12e1is"),
        (0xd50c_8023, Class::Tlbi, "tlbi ipas2e1is"),
        (0xd50c_871f, Class::Tlbi, "tlbi alle2"),
        (0xd508_831f, Class::Tlbi, "tlbi vmalle1is"),
        (0xd508_751f, Class::Ic, "ic iallu"),
        (0xd508_711f, Class::Ic, "ic ialluis"),
        (0xd50b_7521, Class::Ic, "ic ivau"),
        (0xd50b_7a20, Class::Dc, "dc cvac"),
        (0xd50b_7e22, Class::Dc, "dc civac"),
        (0xd50b_7424, Class::Dc, "dc zva"),
        (0xd508_7645, Class::Dc, "dc isw"),
        (0xd508_7800, Class::At, "at S1_0_C7_C8_0"), // at s1e1r
        (0xd50c_7881, Class::At, "at S1_4_C7_C8_4"), // at s12e1r
        (0xd50b_7380, Class::Other, "S1_3_C7_C3_4"), // cfp rctx
        (0xd528_1260, Class::Other, "S1_0_C1_C2_3"), // sysl
        (0xd53c_5200, Class::Mrs, "mrs ESR_EL2"),
        (0xd53c_6001, Class::Mrs, "mrs FAR_EL2"),
        (0xd53c_6082, Class::Mrs, "mrs HPFAR_EL2"),
        (0xd51c_2100, Class::Msr, "msr VTTBR_EL2"),
        (0xd51c_4023, Class::Msr, "msr ELR_EL2"),
        (0xd53c_d045, Class::Mrs, "mrs TPIDR_EL2"),
        (0xd530_0246, Class::Mrs, "mrs S2_0_C0_C2_2"), // mdscr_el1
        (0xd510_0081, Class::Msr, "msr S2_0_C0_C0_4"), // dbgbvr0_el1
        (0xd538_cc07, Class::Mrs, "mrs ICC_IAR1_EL1"),
        (0xd518_cc27, Class::Msr, "msr ICC_EOIR1_EL1"),
        (0xd51c_cc02, Class::Msr, "msr ICH_LR0_EL2"),
        (0xd53b_e048, Class::Mrs, "mrs CNTVCT_EL0"),
        (0xd69f_03e0, Class::Other, "0xd69f03e0"), // eret
        (0xd400_0002, Class::Other, "0xd4000002"), // hvc #0
        (0x9100_0400, Class::Other, "0x91000400"), // add x0, x0, #1
    ];

    #[test]
    fn each_encoding_is_classed_and_named_as_the_assembler_wrote_it() {
        for &(word, class, name) in ENCODED {
            assert_eq!((classify(word), describe(word).as_str()), (class, name), "{word:#010x}");
        }
    }

    #[test]
    fn every_register_number_of_the_list_registers_is_named() {
        // ICH_LR<n>_EL2: CRm 12 holds 0-7, CRm 13 holds 8-15 (op2 = n mod 8).
        assert_eq!(describe(0xd51c_cc02 | 7 << 5), "msr ICH_LR7_EL2");
        assert_eq!(describe(0xd51c_cd02 | 7 << 5), "msr ICH_LR15_EL2");
    }

    #[test]
    fn every_word_has_one_class_and_only_system_instructions_are_counted() {
        // Outside the system instruction class nothing is counted, whatever its fields.
        for word in [0u32, 0xffff_ffff, 0xd5c0_0000, 0xd4ff_ffff, 0x1f20_03d5] {
            assert_eq!(classify(word), Class::Other, "{word:#x}");
        }
    }
}
