//! The physical CPU's self-hosted debug registers. Guests never reach them directly: their
//! accesses trap (MDCR_EL2.TDA, TDOSA, TDRA) into each vCPU's own copy
//! (`hyp_core::debug_registers`). The hardware holds a vCPU's breakpoints, watchpoints and
//! MDSCR_EL1 only while that vCPU runs and could take a debug exception; otherwise it holds
//! nothing enabled, so no VM's breakpoint can fire in another VM on the same CPU.

use core::arch::asm;

use hyp_core::debug_registers::{DebugGeometry, DebugRegisters};

/// The breakpoints and watchpoints this CPU has.
pub fn geometry() -> DebugGeometry {
    DebugGeometry::from_id_aa64dfr0(sysreg!("id_aa64dfr0_el1"))
}

/// Writes DBG{B,W}{V,C}R<n>_EL1 (`$kind` is bvr, bcr, wvr or wcr) for n < 16.
macro_rules! write_indexed {
    ($kind:literal, $n:expr, $value:expr) => {
        write_indexed!(@ $kind, $n, $value; 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14; 15)
    };
    (@ $kind:literal, $n:expr, $value:expr; $($i:literal),*; $last:literal) => {{
        let (n, v): (usize, u64) = ($n, $value);
        // SAFETY: a debug register of this CPU, below the count ID_AA64DFR0_EL1 gives (the
        // caller's loop bound); no guest runs while the hypervisor writes it, and debug
        // exceptions targeting EL1 are never taken at EL2 (ARM ARM D2.1, "About self-hosted
        // debug": a debug exception is not generated at an EL above the debug target EL).
        unsafe {
            match n {
                $( $i => asm!(concat!("msr dbg", $kind, $i, "_el1, {}"), in(reg) v, options(nostack)), )*
                _ => asm!(concat!("msr dbg", $kind, $last, "_el1, {}"), in(reg) v, options(nostack)),
            }
        }
    }};
}

/// Puts `debug` into this CPU's debug registers (its vCPU is about to run and has debug on).
pub fn load(debug: &DebugRegisters, geometry: DebugGeometry) {
    for n in 0..geometry.breakpoints.min(debug.bvr.len()) {
        write_indexed!("bvr", n, debug.bvr[n]);
        write_indexed!("bcr", n, debug.bcr[n]);
    }
    for n in 0..geometry.watchpoints.min(debug.wvr.len()) {
        write_indexed!("wvr", n, debug.wvr[n]);
        write_indexed!("wcr", n, debug.wcr[n]);
    }
    // SAFETY: MDSCR_EL1 of the vCPU about to run; the barrier makes the new breakpoints
    // apply from its first instruction.
    unsafe { asm!("msr mdscr_el1, {}", "isb", in(reg) debug.mdscr, options(nostack)) };
}

/// Leaves nothing of any vCPU's debug state in this CPU: every breakpoint and watchpoint
/// cleared, MDSCR_EL1 zero.
pub fn clear(geometry: DebugGeometry) {
    for n in 0..geometry.breakpoints {
        write_indexed!("bcr", n, 0);
        write_indexed!("bvr", n, 0);
    }
    for n in 0..geometry.watchpoints {
        write_indexed!("wcr", n, 0);
        write_indexed!("wvr", n, 0);
    }
    // SAFETY: as in `load`, with nothing enabled.
    unsafe { asm!("msr mdscr_el1, xzr", "isb", options(nostack)) };
}

/// At each CPU's start: the OS lock and double lock (set or UNKNOWN after a cold reset)
/// unlocked, so a vCPU's breakpoints take effect when they are loaded, and nothing enabled.
pub fn init_cpu() {
    // SAFETY: the OS lock and double lock of this CPU, which only the hypervisor touches
    // (guest accesses trap: MDCR_EL2.TDOSA).
    unsafe { asm!("msr oslar_el1, xzr", "msr osdlr_el1, xzr", "isb", options(nostack)) };
    clear(geometry());
}
