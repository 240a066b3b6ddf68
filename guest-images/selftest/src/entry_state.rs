//! Every register a guest can read, as the hypervisor started a vCPU: stored by the entry
//! code (the `SNAPSHOT` macro in lib.rs) before anything else runs, for guests that check
//! that a fresh vCPU starts from the reset state and sees nothing of an earlier context.

use crate::{println, Checks};

/// The system registers the entry code stores, in its order.
pub const SYSTEM_REGISTERS: [&str; 28] = [
    "SCTLR_EL1",
    "CPACR_EL1",
    "TTBR0_EL1",
    "TTBR1_EL1",
    "TCR_EL1",
    "ESR_EL1",
    "AFSR0_EL1",
    "AFSR1_EL1",
    "FAR_EL1",
    "MAIR_EL1",
    "VBAR_EL1",
    "CONTEXTIDR_EL1",
    "AMAIR_EL1",
    "CNTKCTL_EL1",
    "PAR_EL1",
    "TPIDR_EL1",
    "SP_EL0",
    "ELR_EL1",
    "SPSR_EL1",
    "TPIDR_EL0",
    "TPIDRRO_EL0",
    "CSSELR_EL1",
    "CNTV_CTL_EL0",
    "CNTV_CVAL_EL0",
    "MDSCR_EL1",
    "DAIF",
    "NZCV",
    "ACTLR_EL1",
];

/// A vCPU's registers at its first instruction (layout shared with `SNAPSHOT`).
#[repr(C, align(16))]
pub struct EntryState {
    /// x0-x30; x17 is the entry code's base register and reads 0.
    pub x: [u64; 31],
    pub sp: u64,
    pub system: [u64; 28],
    pub v: [u128; 32],
    pub fpcr: u64,
    pub fpsr: u64,
}

const _: () = assert!(core::mem::offset_of!(EntryState, system) == 256);
const _: () = assert!(core::mem::offset_of!(EntryState, v) == 480);
const _: () = assert!(core::mem::offset_of!(EntryState, fpcr) == 992);

const ZERO: EntryState = EntryState { x: [0; 31], sp: 0, system: [0; 28], v: [0; 32], fpcr: 0, fpsr: 0 };

/// Stored by `_start` (in .data: the .bss is cleared after the entry code stored it).
#[no_mangle]
#[link_section = ".data.entry_state"]
pub static mut BOOT_ENTRY_STATE: EntryState = ZERO;

/// Stored by `secondary_entry` (a vCPU started with PSCI CPU_ON).
#[no_mangle]
#[link_section = ".data.entry_state"]
pub static mut SECONDARY_ENTRY_STATE: EntryState = ZERO;

/// SCTLR_EL1's RES1 bits (ARMv8.0), the only bits a vCPU starts with set.
pub const SCTLR_EL1_RESET: u64 = 0x30d0_0800;
/// PSTATE.D, A, I and F masked, as the arm64 boot protocol and PSCI CPU_ON start a CPU.
pub const DAIF_RESET: u64 = 0x3c0;

/// What a register should read at a vCPU's first instruction: zero but for SCTLR_EL1's RES1
/// bits and DAIF's masks.
fn reset_value(name: &str) -> u64 {
    match name {
        "SCTLR_EL1" => SCTLR_EL1_RESET,
        "DAIF" => DAIF_RESET,
        _ => 0,
    }
}

/// Compares `state` with the reset state (x0 = `x0`, the boot argument), printing each
/// register that differs; returns (registers compared, registers that differ).
pub fn compare_with_reset(state: &EntryState, x0: u64) -> (u32, u32) {
    let (mut compared, mut differ) = (0, 0);
    let mut expect = |name: &dyn core::fmt::Display, value: u128, wanted: u128| {
        compared += 1;
        if value != wanted {
            differ += 1;
            println!("# {name} is {value:#x}, not {wanted:#x}");
        }
    };
    for (n, &value) in state.x.iter().enumerate() {
        let wanted = if n == 0 { x0 } else { 0 };
        expect(&format_args!("x{n}"), u128::from(value), u128::from(wanted));
    }
    expect(&"SP", u128::from(state.sp), 0);
    for (name, &value) in SYSTEM_REGISTERS.iter().zip(state.system.iter()) {
        expect(name, u128::from(value), u128::from(reset_value(name)));
    }
    for (n, &value) in state.v.iter().enumerate() {
        expect(&format_args!("v{n}"), value, 0);
    }
    expect(&"FPCR", u128::from(state.fpcr), 0);
    expect(&"FPSR", u128::from(state.fpsr), 0);
    (compared, differ)
}

/// One check: `state` is the reset state.
pub fn check_reset(c: &mut Checks, state: &EntryState, x0: u64, what: core::fmt::Arguments<'_>) {
    let (compared, differ) = compare_with_reset(state, x0);
    c.check(differ == 0, format_args!("{what}: {compared} registers at their reset value ({differ} not)"));
}
