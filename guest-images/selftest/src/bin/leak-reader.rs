//! The reader of the register-leak test (tests/tests/register_leak.rs): its vCPU 0 shares a
//! CPU with one secret-holder, its vCPU 1 (started with PSCI CPU_ON) shares another with a
//! second one. Each vCPU checks that it started with every register it can read at its reset
//! value, whatever the secret-holder left in the CPU; vCPU 0 then runs over the secret's
//! breakpoint and watchpoint, which must not fire here. It does it all again after a PSCI
//! SYSTEM_RESET, then powers off.
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::write_volatile;

use guest_common::entry_report::EntryReport;
use selftest_guest::entry_state::{check_reset, compare_with_reset, BOOT_ENTRY_STATE, SECONDARY_ENTRY_STATE};
use selftest_guest::*;

/// Where the secret-holder put its breakpoint and watchpoint (in its own RAM, the same IPAs).
const CODE: usize = 0x4100_0100;
const DATA: usize = 0x4100_0000;
/// When the first boot resets the VM; a boot that starts later is the second.
const RESET_AT_MS: u64 = 3000;

static VCPU1: EntryReport = EntryReport::new();

/// The debug registers and the GICv3 CPU interface as a fresh vCPU must see them: nothing
/// enabled, nothing set, the OS lock unlocked. Returns (compared, differ).
fn compare_debug_and_gic() -> (u32, u32) {
    let (breakpoints, watchpoints) = debug::counts();
    let (mut compared, mut differ) = (0, 0);
    let mut expect = |name: &dyn core::fmt::Display, value: u64, wanted: u64| {
        compared += 1;
        if value != wanted {
            differ += 1;
            println!("# {name} is {value:#x}, not {wanted:#x}");
        }
    };
    for n in 0..breakpoints {
        expect(&format_args!("DBGBVR{n}_EL1"), debug::bvr(n), 0);
        expect(&format_args!("DBGBCR{n}_EL1"), debug::bcr(n), 0);
    }
    for n in 0..watchpoints {
        expect(&format_args!("DBGWVR{n}_EL1"), debug::wvr(n), 0);
        expect(&format_args!("DBGWCR{n}_EL1"), debug::wcr(n), 0);
    }
    expect(&"OSLSR_EL1", debug::oslsr(), 0b1000);
    expect(&"DBGCLAIMCLR_EL1", debug::claim_tags(), 0);
    if gic::is_v3() {
        let (pmr, igrpen1): (u64, u64);
        // SAFETY: this vCPU's (virtual) GIC CPU interface registers.
        unsafe { asm!("mrs {}, S3_0_C4_C6_0", "mrs {}, S3_0_C12_C12_7", out(reg) pmr, out(reg) igrpen1) };
        expect(&"ICC_PMR_EL1", pmr, 0);
        expect(&"ICC_IGRPEN1_EL1", igrpen1, 0);
    }
    (compared, differ)
}

extern "C" fn vcpu1_main(context: u64) {
    // SAFETY: written by `secondary_entry` before this vCPU ran anything else; read once.
    let state = unsafe { &*core::ptr::addr_of!(SECONDARY_ENTRY_STATE) };
    let (a, b) = compare_with_reset(state, context);
    let (c, d) = compare_debug_and_gic();
    VCPU1.report(a + c, b + d);
    hvc(PSCI_CPU_OFF, 0);
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let second = counter_ms() >= RESET_AT_MS;
    let when = if second { "after SYSTEM_RESET" } else { "at its first start" };
    // SAFETY: written by `_start` before any Rust ran; read once.
    let state = unsafe { &*core::ptr::addr_of!(BOOT_ENTRY_STATE) };
    check_reset(&mut c, state, boot_x0(), format_args!("leak: vCPU 0 {when}"));
    let (compared, differ) = compare_debug_and_gic();
    c.check(
        differ == 0,
        format_args!("leak: vCPU 0 {when}: {compared} debug and GIC registers at reset ({differ} not)"),
    );

    // The secret-holders have marked their CPUs by now.
    wait_ms(300);
    VCPU1.expect();
    let started = start_vcpu(1, vcpu1_main, 0);
    VCPU1.check(&mut c, started, when, counter_ms);

    // The secret-holder's breakpoint and watchpoint, on these same IPAs, never fire here
    // (an unexpected exception ends this VM with a `not ok` line).
    place_code(CODE, &[RET, RET]);
    debug::unmask_debug_exceptions(true);
    call_code(CODE);
    // SAFETY: this VM's own RAM.
    unsafe { write_volatile(DATA as *mut u64, 1) };
    debug::unmask_debug_exceptions(false);
    c.check(true, format_args!("leak: {when}, no breakpoint or watchpoint of another VM fired in this one"));

    if !second {
        while counter_ms() < RESET_AT_MS {
            core::hint::spin_loop();
        }
        println!("leak-reader: rebooting with PSCI SYSTEM_RESET");
        hvc(PSCI_SYSTEM_RESET, 0);
        println!("not ok - SYSTEM_RESET returned");
    }
    finish("leak-reader", &c)
}
