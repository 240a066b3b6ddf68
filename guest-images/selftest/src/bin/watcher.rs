//! A guest that measures how long it is kept off its CPU: it spins reading the virtual
//! counter for a while and reports the longest gap between two reads, against a limit of
//! two time slices (tests/tests/set_way.rs: it shares its CPU with a guest that storms the
//! hypervisor with set/way cache maintenance).
#![no_std]
#![no_main]

use core::arch::asm;

use selftest_guest::*;

/// The time slice of the VMs it shares its CPU with (the manifest's default).
const SLICE_MS: u64 = 10;
const WATCH_MS: u64 = 1500;

fn counter() -> u64 {
    let v: u64;
    // SAFETY: the virtual counter is readable at EL1.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", out(reg) v) };
    v
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let freq: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL1.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) freq) };
    let ticks_per_ms = (freq / 1000).max(1);
    let start = counter();
    let (mut last, mut longest, mut gaps) = (start, 0, 0u32);
    while last - start < WATCH_MS * ticks_per_ms {
        let now = counter();
        let gap = now - last;
        // A gap of more than 100 µs is a time off the CPU (a spin iteration is far shorter).
        if gap > ticks_per_ms / 10 {
            gaps += 1;
        }
        longest = longest.max(gap);
        last = now;
    }
    let longest_us = longest * 1000 / ticks_per_ms;
    c.check(
        longest_us <= 2 * SLICE_MS * 1000 && gaps > 0,
        format_args!(
            "watcher: off its CPU {gaps} times in {WATCH_MS} ms, at most {longest_us} us (limit two slices, {} us)",
            2 * SLICE_MS * 1000
        ),
    );
    finish("watcher", &c)
}
