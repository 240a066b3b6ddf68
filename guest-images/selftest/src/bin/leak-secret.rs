//! The secret-holder of the register-leak test (tests/tests/register_leak.rs): checks that
//! its own breakpoint and watchpoint fire, then fills every register it can write with a
//! marker (the FP/SIMD registers, FPCR, FPSR, the EL0 and EL1 system registers, the virtual
//! timer, the GIC CPU interface, the debug registers with a breakpoint and a watchpoint
//! enabled on IPAs the reader uses) and spins on a CPU it shares with the reader's vCPUs,
//! which must find none of it.
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::ptr::write_volatile;

use selftest_guest::debug::{self, BCR_EL1_EL0_ADDRESS, MDSCR_KDE_MDE, WCR_EL1_EL0_8_BYTES};
use selftest_guest::*;

/// Where the breakpoint and the watchpoint are, in this VM and in the reader's.
pub const CODE: usize = 0x4100_0100;
pub const DATA: usize = 0x4100_0000;
/// How long it holds its markers (virtual counter): past the reader's two boots.
const HOLD_UNTIL_MS: u64 = 8000;

/// A different 128-bit marker in each of v0-v31.
#[no_mangle]
static MARKERS: [u128; 32] = {
    let mut m = [0u128; 32];
    let mut i = 0;
    while i < 32 {
        m[i] = 0x5ec2_e700_0000_0000_5ec2_e700_0000_0000 | (i as u128) << 64 | i as u128;
        i += 1;
    }
    m
};

global_asm!(
    r#"
    // void hold_markers(u64 until): marks every register, spins until CNTVCT_EL0 >= until.
    .section .text, "ax"
    .global hold_markers
hold_markers:
    adrp    x1, MARKERS
    add     x1, x1, :lo12:MARKERS
    ldp     q0, q1, [x1, #0]
    ldp     q2, q3, [x1, #32]
    ldp     q4, q5, [x1, #64]
    ldp     q6, q7, [x1, #96]
    ldp     q8, q9, [x1, #128]
    ldp     q10, q11, [x1, #160]
    ldp     q12, q13, [x1, #192]
    ldp     q14, q15, [x1, #224]
    ldp     q16, q17, [x1, #256]
    ldp     q18, q19, [x1, #288]
    ldp     q20, q21, [x1, #320]
    ldp     q22, q23, [x1, #352]
    ldp     q24, q25, [x1, #384]
    ldp     q26, q27, [x1, #416]
    ldp     q28, q29, [x1, #448]
    ldp     q30, q31, [x1, #480]
    mov     x2, #0x03c00000         // FPCR: DN, FZ, RMode toward zero
    msr     fpcr, x2
    mov     x2, #0x9f               // FPSR: every cumulative flag
    msr     fpsr, x2
    movz    x2, #0x5ec2, lsl #48
    movk    x2, #0xe7e7, lsl #32
    movk    x2, #0x1234, lsl #16
    movk    x2, #0x5000
    msr     tpidr_el0, x2
    msr     tpidrro_el0, x2
    msr     tpidr_el1, x2
    msr     far_el1, x2
    msr     elr_el1, x2
    msr     sp_el0, x2
    msr     mair_el1, x2
    msr     ttbr0_el1, x2
    msr     ttbr1_el1, x2
    msr     cntv_cval_el0, x2
    msr     par_el1, x2
    msr     amair_el1, x2
    mov     x2, #0x5ec2
    msr     contextidr_el1, x2
    msr     afsr0_el1, x2
    msr     afsr1_el1, x2
    movz    x2, #0x9600, lsl #16    // ESR_EL1: a data abort's syndrome
    movk    x2, #0x0045
    msr     esr_el1, x2
    mov     x2, #0x3c5
    msr     spsr_el1, x2
    mov     x2, #0x19               // TCR_EL1.T0SZ
    msr     tcr_el1, x2
    mov     x2, #2                  // CSSELR_EL1: the level 2 cache
    msr     csselr_el1, x2
    mov     x2, #3                  // CNTKCTL_EL1: EL0 reads both counters
    msr     cntkctl_el1, x2
    mov     x2, #3                  // CNTV_CTL_EL0: enabled, masked
    msr     cntv_ctl_el0, x2
    isb
1:  isb
    mrs     x3, cntvct_el0
    cmp     x3, x0
    b.lo    1b
    ret
"#
);

extern "C" {
    fn hold_markers(until: u64);
}

/// ICC_PMR_EL1 and ICC_IGRPEN1_EL1 (the GICv3 virtual CPU interface): priority mask and
/// group 1 enable, left set.
fn mark_gic_interface() {
    if gic::is_v3() {
        // SAFETY: this vCPU's own (virtual) CPU interface registers.
        unsafe { asm!("msr S3_0_C4_C6_0, {}", "msr S3_0_C12_C12_7, {}", "isb", in(reg) 0xf0u64, in(reg) 1u64) };
    }
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let (breakpoints, watchpoints) = debug::counts();
    place_code(CODE, &[RET, RET]);
    debug::set_bvr(0, CODE as u64);
    debug::set_bcr(0, BCR_EL1_EL0_ADDRESS);
    debug::set_wvr(0, DATA as u64);
    debug::set_wcr(0, WCR_EL1_EL0_8_BYTES);
    debug::set_mdscr(MDSCR_KDE_MDE);
    debug::unmask_debug_exceptions(true);
    let breakpoint = expect_exception(|| call_code(CODE));
    // SAFETY: this VM's RAM, watched by its own watchpoint.
    let watchpoint = expect_exception(|| unsafe { write_volatile(DATA as *mut u64, 1) });
    debug::unmask_debug_exceptions(false);
    c.check(
        matches!(breakpoint, Some((esr, _)) if esr >> 26 == 0x31),
        format_args!("debug: this vCPU's own breakpoint fires (a breakpoint exception, EC 0x31)"),
    );
    c.check(
        matches!(watchpoint, Some((esr, far)) if esr >> 26 == 0x35 && far == DATA as u64),
        format_args!("debug: this vCPU's own watchpoint fires (a watchpoint exception, EC 0x35, at {DATA:#x})"),
    );
    // The other breakpoints and watchpoints hold markers too (disabled), and the claim tags.
    for n in 1..breakpoints {
        debug::set_bvr(n, 0x5ec2_0000 | (n as u64) << 4);
        debug::set_bcr(n, 0b1111 << 5);
    }
    for n in 1..watchpoints {
        debug::set_wvr(n, 0x5ec2_0000 | (n as u64) << 4);
        debug::set_wcr(n, 0xff << 5);
    }
    debug::set_claim_tags(0xa5);
    mark_gic_interface();
    println!("leak-secret: holding markers in every register until {HOLD_UNTIL_MS} ms");
    // SAFETY: spins with this vCPU's registers marked; returns after the deadline.
    unsafe { hold_markers(HOLD_UNTIL_MS * counter_frequency() / 1000) };
    finish("leak-secret", &c)
}

fn counter_frequency() -> u64 {
    let freq: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL1.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) freq) };
    freq
}
