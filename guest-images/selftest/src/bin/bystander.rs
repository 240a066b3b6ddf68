//! The bystander of tests/tests/hostile.rs: while a hostile VM attacks the hypervisor on
//! other CPUs, it writes a pattern to its own disk and RAM and keeps reading both back, and
//! watches how long it is ever kept off its CPU. Every check must pass, as if it ran alone.
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

use selftest_guest::virtio::*;
use selftest_guest::*;

const QUEUE: usize = 0x4100_0000;
const BUFFER: usize = 0x4110_0000;
const READ_BACK: usize = 0x4120_0000;
const CANARY: usize = 0x4130_0000;
const CANARY_LEN: usize = 1 << 20;
/// As long as the hostile guest needs (the test checks it finished first).
const WATCH_MS: u64 = 60_000;
const CHUNK: u32 = 64 * 1024;
const CHUNKS: u64 = 16;

fn pattern(at: usize) -> u8 {
    (at as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) as u8
}

fn counter_us() -> u64 {
    let (now, freq): (u64, u64);
    // SAFETY: the virtual counter registers are readable at EL1.
    unsafe {
        asm!("isb", "mrs {}, cntvct_el0", out(reg) now);
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
    }
    now / (freq / 1_000_000).max(1)
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let Some(blk) = Block::new(QUEUE) else {
        c.check(false, format_args!("bystander: its disk"));
        finish("bystander", &c)
    };
    for i in 0..CANARY_LEN {
        // SAFETY: this VM's RAM.
        unsafe { write_volatile((CANARY + i) as *mut u8, pattern(CANARY + i)) };
    }
    let mut written = 0;
    for chunk in 0..CHUNKS {
        for i in 0..CHUNK as usize {
            // SAFETY: this VM's RAM.
            unsafe { write_volatile((BUFFER + i) as *mut u8, pattern(chunk as usize * CHUNK as usize + i)) };
        }
        let sector = chunk * u64::from(CHUNK) / 512;
        written += u32::from(
            blk.transfer(BLK_T_OUT, sector, BUFFER, CHUNK) == Completion::Used { status: BLK_S_OK, written: 1 },
        );
    }
    c.check(written == CHUNKS as u32, format_args!("bystander: wrote {CHUNKS} x 64 KiB to its disk"));

    let start = counter_us();
    let (mut rounds, mut bad_reads, mut bad_bytes, mut bad_canary) = (0u32, 0u32, 0u32, 0u32);
    let mut last = start;
    let mut longest = 0;
    while last - start < WATCH_MS * 1000 {
        let chunk = u64::from(rounds) % CHUNKS;
        let sector = chunk * u64::from(CHUNK) / 512;
        if blk.transfer(BLK_T_IN, sector, READ_BACK, CHUNK)
            != (Completion::Used { status: BLK_S_OK, written: CHUNK + 1 })
        {
            bad_reads += 1;
        }
        for i in (0..CHUNK as usize).step_by(61) {
            // SAFETY: this VM's RAM.
            let b = unsafe { read_volatile((READ_BACK + i) as *const u8) };
            bad_bytes += u32::from(b != pattern(chunk as usize * CHUNK as usize + i));
        }
        for i in (0..CANARY_LEN).step_by(4093) {
            // SAFETY: this VM's RAM.
            bad_canary += u32::from(unsafe { read_volatile((CANARY + i) as *const u8) } != pattern(CANARY + i));
        }
        let now = counter_us();
        longest = longest.max(now - last);
        last = now;
        rounds += 1;
    }
    c.check(
        bad_reads == 0 && bad_bytes == 0,
        format_args!("bystander: {rounds} reads of its disk, every one OK and as written ({bad_reads} failed, {bad_bytes} bytes differ)"),
    );
    c.check(bad_canary == 0, format_args!("bystander: its RAM is as it wrote it ({bad_canary} bytes differ)"));
    c.check(longest < 1_000_000, format_args!("bystander: one round took at most {} ms (limit 1000)", longest / 1000));
    finish("bystander", &c)
}
