//! The self-hosted debug registers from EL1: breakpoints, watchpoints, MDSCR_EL1, the OS
//! lock and the claim tags (ARM ARM D19), for guests that check how the hypervisor keeps
//! them per vCPU.

use core::arch::asm;

/// Reads or writes DBG{B,W}{V,C}R<n>_EL1 for n < 16 (`$kind`: bvr, bcr, wvr, wcr).
macro_rules! indexed {
    (read $kind:literal, $n:expr) => {{
        let v: u64;
        // SAFETY: a debug register of this vCPU, below the count ID_AA64DFR0_EL1 gives.
        unsafe {
            match $n {
                0 => asm!(concat!("mrs {}, dbg", $kind, "0_el1"), out(reg) v),
                1 => asm!(concat!("mrs {}, dbg", $kind, "1_el1"), out(reg) v),
                2 => asm!(concat!("mrs {}, dbg", $kind, "2_el1"), out(reg) v),
                3 => asm!(concat!("mrs {}, dbg", $kind, "3_el1"), out(reg) v),
                4 => asm!(concat!("mrs {}, dbg", $kind, "4_el1"), out(reg) v),
                5 => asm!(concat!("mrs {}, dbg", $kind, "5_el1"), out(reg) v),
                6 => asm!(concat!("mrs {}, dbg", $kind, "6_el1"), out(reg) v),
                7 => asm!(concat!("mrs {}, dbg", $kind, "7_el1"), out(reg) v),
                8 => asm!(concat!("mrs {}, dbg", $kind, "8_el1"), out(reg) v),
                9 => asm!(concat!("mrs {}, dbg", $kind, "9_el1"), out(reg) v),
                10 => asm!(concat!("mrs {}, dbg", $kind, "10_el1"), out(reg) v),
                11 => asm!(concat!("mrs {}, dbg", $kind, "11_el1"), out(reg) v),
                12 => asm!(concat!("mrs {}, dbg", $kind, "12_el1"), out(reg) v),
                13 => asm!(concat!("mrs {}, dbg", $kind, "13_el1"), out(reg) v),
                14 => asm!(concat!("mrs {}, dbg", $kind, "14_el1"), out(reg) v),
                _ => asm!(concat!("mrs {}, dbg", $kind, "15_el1"), out(reg) v),
            }
        }
        v
    }};
    (write $kind:literal, $n:expr, $value:expr) => {{
        let v: u64 = $value;
        // SAFETY: as above.
        unsafe {
            match $n {
                0 => asm!(concat!("msr dbg", $kind, "0_el1, {}"), in(reg) v),
                1 => asm!(concat!("msr dbg", $kind, "1_el1, {}"), in(reg) v),
                2 => asm!(concat!("msr dbg", $kind, "2_el1, {}"), in(reg) v),
                3 => asm!(concat!("msr dbg", $kind, "3_el1, {}"), in(reg) v),
                4 => asm!(concat!("msr dbg", $kind, "4_el1, {}"), in(reg) v),
                5 => asm!(concat!("msr dbg", $kind, "5_el1, {}"), in(reg) v),
                6 => asm!(concat!("msr dbg", $kind, "6_el1, {}"), in(reg) v),
                7 => asm!(concat!("msr dbg", $kind, "7_el1, {}"), in(reg) v),
                8 => asm!(concat!("msr dbg", $kind, "8_el1, {}"), in(reg) v),
                9 => asm!(concat!("msr dbg", $kind, "9_el1, {}"), in(reg) v),
                10 => asm!(concat!("msr dbg", $kind, "10_el1, {}"), in(reg) v),
                11 => asm!(concat!("msr dbg", $kind, "11_el1, {}"), in(reg) v),
                12 => asm!(concat!("msr dbg", $kind, "12_el1, {}"), in(reg) v),
                13 => asm!(concat!("msr dbg", $kind, "13_el1, {}"), in(reg) v),
                14 => asm!(concat!("msr dbg", $kind, "14_el1, {}"), in(reg) v),
                _ => asm!(concat!("msr dbg", $kind, "15_el1, {}"), in(reg) v),
            }
        }
    }};
}

/// Breakpoints and watchpoints of this CPU (ID_AA64DFR0_EL1.BRPs and WRPs, plus one).
pub fn counts() -> (usize, usize) {
    let dfr0: u64;
    // SAFETY: an ID register, readable at EL1.
    unsafe { asm!("mrs {}, id_aa64dfr0_el1", out(reg) dfr0) };
    (((dfr0 >> 12) & 0xf) as usize + 1, ((dfr0 >> 20) & 0xf) as usize + 1)
}

pub fn bvr(n: usize) -> u64 {
    indexed!(read "bvr", n)
}
pub fn bcr(n: usize) -> u64 {
    indexed!(read "bcr", n)
}
pub fn wvr(n: usize) -> u64 {
    indexed!(read "wvr", n)
}
pub fn wcr(n: usize) -> u64 {
    indexed!(read "wcr", n)
}
pub fn set_bvr(n: usize, v: u64) {
    indexed!(write "bvr", n, v)
}
pub fn set_bcr(n: usize, v: u64) {
    indexed!(write "bcr", n, v)
}
pub fn set_wvr(n: usize, v: u64) {
    indexed!(write "wvr", n, v)
}
pub fn set_wcr(n: usize, v: u64) {
    indexed!(write "wcr", n, v)
}

/// MDSCR_EL1.KDE and MDE: breakpoints and watchpoints enabled at EL1 and EL0.
pub const MDSCR_KDE_MDE: u64 = (1 << 13) | (1 << 15);

pub fn mdscr() -> u64 {
    let v: u64;
    // SAFETY: MDSCR_EL1 of this vCPU.
    unsafe { asm!("mrs {}, mdscr_el1", out(reg) v) };
    v
}
pub fn set_mdscr(v: u64) {
    // SAFETY: as above; the ISB makes the change apply to the next instruction.
    unsafe { asm!("msr mdscr_el1, {}", "isb", in(reg) v) };
}

/// OSLSR_EL1.
pub fn oslsr() -> u64 {
    let v: u64;
    // SAFETY: the OS lock status of this vCPU.
    unsafe { asm!("mrs {}, oslsr_el1", out(reg) v) };
    v
}
pub fn set_os_lock(locked: bool) {
    // SAFETY: the OS lock of this vCPU.
    unsafe { asm!("msr oslar_el1, {}", "isb", in(reg) u64::from(locked)) };
}

/// The claim tags set (DBGCLAIMCLR_EL1 reads them).
pub fn claim_tags() -> u64 {
    let v: u64;
    // SAFETY: the claim tags of this vCPU.
    unsafe { asm!("mrs {}, dbgclaimclr_el1", out(reg) v) };
    v
}
pub fn set_claim_tags(v: u64) {
    // SAFETY: as above.
    unsafe { asm!("msr dbgclaimset_el1, {}", in(reg) v) };
}

/// An instruction breakpoint at `address` for EL1 and EL0: DBGBCR E, PMC = 0b11, BAS = 0b1111.
pub const BCR_EL1_EL0_ADDRESS: u64 = 1 | (0b11 << 1) | (0b1111 << 5);
/// A watchpoint on the 8 bytes at an aligned address, loads and stores, EL1 and EL0: DBGWCR
/// E, PAC = 0b11, LSC = 0b11, BAS = 0xff.
pub const WCR_EL1_EL0_8_BYTES: u64 = 1 | (0b11 << 1) | (0b11 << 3) | (0xff << 5);

/// Unmasks (or masks) debug exceptions at EL1: PSTATE.D.
pub fn unmask_debug_exceptions(unmask: bool) {
    // SAFETY: PSTATE.D of this vCPU.
    unsafe {
        if unmask {
            asm!("msr daifclr, #8", "isb");
        } else {
            asm!("msr daifset, #8", "isb");
        }
    }
}
