//! The A32 instructions whose cost an instruction count hides (the ARMv7 image's, which is
//! built for A32, not T32), told apart by their encoding in the classes of `a64::Class`
//! (ARM DDI 0406C, A5 "ARM Instruction Set Encoding"; B3.17 and B4.2 for the CP15 register
//! space, B4.2.1 and B4.2.2 for cache and TLB maintenance):
//! - MCR and MCRR to CP14 or CP15 write a system register, MRC and MRRC read one, but a
//!   CP15 c7 write is cache maintenance (c7, c8 address translation; the CP15 barriers
//!   c7, c10, 4 and 5 and c7, c5, 4), a CP15 c8 write TLB maintenance;
//! - MRS and MSR (register, immediate or banked: the hypervisor's ELR_hyp and the guest's
//!   modes' SPSRs and LRs) count as system register reads and writes, as AArch64's MRS of
//!   ELR_EL2 does;
//! - DSB, DMB and ISB are unconditional (`1111 0101 0111 1111 1111 0000 0100 option`, 0101
//!   and 0110).

use super::a64::Class;

/// The fields of an MCR or MRC (`cond 1110 opc1 L CRn Rt coproc opc2 1 CRm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Coprocessor {
    read: bool,
    coproc: u32,
    opc1: u32,
    crn: u32,
    crm: u32,
    opc2: u32,
}

fn coprocessor(word: u32) -> Option<Coprocessor> {
    (word & 0x0f00_0010 == 0x0e00_0010 && word >> 28 != 0xf).then_some(Coprocessor {
        read: word >> 20 & 1 == 1,
        coproc: word >> 8 & 0xf,
        opc1: word >> 21 & 0b111,
        crn: word >> 16 & 0xf,
        crm: word & 0xf,
        opc2: word >> 5 & 0b111,
    })
}

/// An MCRR or MRRC (`cond 1100 010L Rt2 Rt coproc opc1 CRm`): read, coproc, opc1, CRm.
fn coprocessor64(word: u32) -> Option<(bool, u32, u32, u32)> {
    (word & 0x0fe0_0000 == 0x0c40_0000 && word >> 28 != 0xf).then_some((
        word >> 20 & 1 == 1,
        word >> 8 & 0xf,
        word >> 4 & 0xf,
        word & 0xf,
    ))
}

/// MRS or MSR (register or banked): `cond 0001 0R(0)0 ...  0000` and `cond 0001 0R10 ...
/// 0000`; MSR (immediate): `cond 0011 0R10 mask`, whose mask 0 with R 0 is the hints' space
/// instead (NOP, YIELD, WFE, WFI, SEV: A5.2.11).
fn status_register(word: u32) -> Option<Class> {
    if word >> 28 == 0xf {
        return None;
    }
    let hint = word >> 22 & 1 == 0 && word >> 16 & 0xf == 0;
    match (word >> 23 & 0x1f, word >> 20 & 0b11, word >> 4 & 0xf) {
        (0b00010, 0b00, 0) => Some(Class::Mrs),
        (0b00010, 0b10, 0) => Some(Class::Msr),
        (0b00110, 0b10, _) if !hint => Some(Class::Msr),
        _ => None,
    }
}

/// The class of the A32 instruction `word`.
pub fn classify(word: u32) -> Class {
    match word & 0xffff_fff0 {
        0xf57f_f040 => return Class::Dsb,
        0xf57f_f050 => return Class::Dmb,
        0xf57f_f060 => return Class::Isb,
        _ => {}
    }
    if let Some(c) = coprocessor(word) {
        if c.coproc != 14 && c.coproc != 15 {
            return Class::Other;
        }
        return match (c.coproc, c.read, c.crn, c.opc1, c.crm, c.opc2) {
            (_, true, ..) => Class::Mrs,
            (15, false, 7, 0, 10, 4) => Class::Dsb,
            (15, false, 7, 0, 10, 5) => Class::Dmb,
            (15, false, 7, 0, 5, 4) => Class::Isb,
            (15, false, 7, _, 8, _) => Class::At,
            // ICIALLUIS, ICIALLU, ICIMVAU, and the branch predictor's (BPIALL ...).
            (15, false, 7, 0, 1 | 5, _) => Class::Ic,
            (15, false, 7, ..) => Class::Dc,
            (15, false, 8, ..) => Class::Tlbi,
            _ => Class::Msr,
        };
    }
    if let Some((read, coproc, _, _)) = coprocessor64(word) {
        return match (coproc, read) {
            (14 | 15, true) => Class::Mrs,
            (14 | 15, false) => Class::Msr,
            _ => Class::Other,
        };
    }
    status_register(word).unwrap_or(Class::Other)
}

/// The instruction `word` as a line of a report names it: `mrc HSR`, `mcrr VTTBR`,
/// `dsb ish`, `mcr TLBIALL`, ...; a register without a name here as
/// `p<coproc>, <opc1>, c<n>, c<m>, <opc2>` (or `p<coproc>, <opc1>, c<m>` for 64 bits).
pub fn describe(word: u32) -> String {
    let class = classify(word);
    if let Some(c) = coprocessor(word) {
        let name = register_name(c)
            .map_or_else(|| format!("p{}, {}, c{}, c{}, {}", c.coproc, c.opc1, c.crn, c.crm, c.opc2), str::to_string);
        return format!("{} {name}", if c.read { "mrc" } else { "mcr" });
    }
    if let Some((read, coproc, opc1, crm)) = coprocessor64(word) {
        let name = match (coproc, opc1, crm) {
            (15, 0, 2) => "TTBR0".to_string(),
            (15, 4, 2) => "HTTBR".to_string(),
            (15, 6, 2) => "VTTBR".to_string(),
            (15, 1, 14) => "CNTVCT".to_string(),
            (15, 0, 14) => "CNTPCT".to_string(),
            (15, 3, 14) => "CNTV_CVAL".to_string(),
            (15, 4, 14) => "CNTVOFF".to_string(),
            (15, 6, 14) => "CNTHP_CVAL".to_string(),
            _ => format!("p{coproc}, {opc1}, c{crm}"),
        };
        return format!("{} {name}", if read { "mrrc" } else { "mcrr" });
    }
    match class {
        Class::Dsb | Class::Dmb => {
            let option = match word & 0xf {
                0b1111 => "sy",
                0b1110 => "st",
                0b1011 => "ish",
                0b1010 => "ishst",
                0b0111 => "nsh",
                0b0110 => "nshst",
                0b0011 => "osh",
                0b0010 => "oshst",
                _ => "?",
            };
            format!("{} {option}", if class == Class::Dsb { "dsb" } else { "dmb" })
        }
        Class::Isb => "isb".to_string(),
        Class::Mrs if word >> 9 & 1 == 1 => "mrs (banked)".to_string(),
        Class::Msr if word >> 9 & 1 == 1 && word >> 25 & 1 == 0 => "msr (banked)".to_string(),
        Class::Mrs => format!("mrs {}", if word >> 22 & 1 == 1 { "SPSR" } else { "CPSR" }),
        Class::Msr => format!("msr {}", if word >> 22 & 1 == 1 { "SPSR" } else { "CPSR" }),
        _ => format!("{word:#010x}"),
    }
}

/// The CP15 registers and operations the ARMv7 image's exit paths use (ARM DDI 0406C, B3.17
/// "Organization of the CP15 registers in a VMSA implementation", B4.1 for each).
fn register_name(c: Coprocessor) -> Option<&'static str> {
    if c.coproc != 15 {
        return None;
    }
    Some(match (c.crn, c.opc1, c.crm, c.opc2) {
        (0, 0, 0, 5) => "MPIDR",
        (0, 4, 0, 0) => "VPIDR",
        (0, 4, 0, 5) => "VMPIDR",
        (1, 0, 0, 0) => "SCTLR",
        (1, 4, 1, 0) => "HCR",
        (1, 4, 1, 1) => "HDCR",
        (1, 4, 1, 3) => "HSTR",
        (2, 4, 1, 2) => "VTCR",
        (5, 4, 2, 0) => "HSR",
        (6, 4, 0, 0) => "HDFAR",
        (6, 4, 0, 2) => "HIFAR",
        (6, 4, 0, 4) => "HPFAR",
        (7, 0, 5, 0) => "ICIALLU",
        (7, 0, 1, 0) => "ICIALLUIS",
        (7, 0, 5, 4) => "CP15ISB",
        (7, 0, 10, 4) => "CP15DSB",
        (7, 0, 10, 5) => "CP15DMB",
        (8, 0, 7, 0) => "TLBIALL",
        (8, 0, 3, 0) => "TLBIALLIS",
        (8, 4, 7, 0) => "TLBIALLH",
        (8, 4, 3, 0) => "TLBIALLHIS",
        (8, 4, 7, 4) => "TLBIALLNSNH",
        (8, 4, 3, 4) => "TLBIALLNSNHIS",
        (12, 4, 0, 0) => "HVBAR",
        (13, 0, 0, 4) => "TPIDRPRW",
        (13, 4, 0, 2) => "HTPIDR",
        (14, 0, 3, 1) => "CNTV_CTL",
        (14, 4, 1, 0) => "CNTHCTL",
        (14, 4, 2, 1) => "CNTHP_CTL",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_register_accesses_and_maintenance_are_told_apart() {
        // mrc p15, 4, r0, c5, c2, 0 (HSR); mcr p15, 4, r0, c1, c1, 0 (HCR).
        assert_eq!((classify(0xee950f12), describe(0xee950f12).as_str()), (Class::Mrs, "mrc HSR"));
        assert_eq!((classify(0xee810f11), describe(0xee810f11).as_str()), (Class::Msr, "mcr HCR"));
        // mcrr p15, 6, r0, r1, c2 (VTTBR); mrrc p15, 1, r0, r1, c14 (CNTVCT).
        assert_eq!((classify(0xec410f62), describe(0xec410f62).as_str()), (Class::Msr, "mcrr VTTBR"));
        assert_eq!((classify(0xec510f1e), describe(0xec510f1e).as_str()), (Class::Mrs, "mrrc CNTVCT"));
        // mcr p15, 0, r0, c8, c7, 0 (TLBIALL); mcr p15, 0, r0, c7, c5, 0 (ICIALLU);
        // mcr p15, 0, r0, c7, c14, 1 (DCCIMVAC); mcr p15, 0, r0, c7, c8, 0 (ATS1CPR).
        assert_eq!((classify(0xee080f17), describe(0xee080f17).as_str()), (Class::Tlbi, "mcr TLBIALL"));
        assert_eq!(classify(0xee070f15), Class::Ic);
        assert_eq!(classify(0xee070f3e), Class::Dc);
        assert_eq!(classify(0xee070f18), Class::At);
        // dsb ish, dmb ish, isb sy.
        assert_eq!((classify(0xf57ff04b), describe(0xf57ff04b).as_str()), (Class::Dsb, "dsb ish"));
        assert_eq!((classify(0xf57ff05b), describe(0xf57ff05b).as_str()), (Class::Dmb, "dmb ish"));
        assert_eq!(classify(0xf57ff06f), Class::Isb);
        // mrs r0, ELR_hyp (banked); msr SPSR_fsxc, r0; mrs r0, CPSR.
        assert_eq!((classify(0xe10e0300), describe(0xe10e0300).as_str()), (Class::Mrs, "mrs (banked)"));
        assert_eq!((classify(0xe16ff000), describe(0xe16ff000).as_str()), (Class::Msr, "msr SPSR"));
        assert_eq!(classify(0xe10f0000), Class::Mrs);
        // msr APSR_nzcvq, #0xf0000000: an immediate to a status register, not a hint.
        assert_eq!(classify(0xe328f20f), Class::Msr);
    }

    #[test]
    fn ordinary_instructions_are_other() {
        for word in [
            0xe3a00000u32, // mov r0, #0
            0xe5910000,    // ldr r0, [r1]
            0xe92d4010,    // push {r4, lr}
            0xe12fff1e,    // bx lr
            0xe160006e,    // eret
            0xe1a00000,    // nop (mov r0, r0)
            0xee000a10,    // vmov s0, r0 (coprocessor 10: VFP, not a system register)
            0xf57ff01f,    // clrex
            0xe320f003,    // wfi
            0xe320f002,    // wfe
            0xe320f000,    // nop
        ] {
            assert_eq!(classify(word), Class::Other, "{word:#010x}");
        }
    }
}
