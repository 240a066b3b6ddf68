//! The guest of tests/tests/faults.rs that is destroyed in the middle of its writes: it
//! writes 0xab over its whole disk slice, 64 KiB per request, round after round, until the
//! management console destroys it.
#![no_std]
#![no_main]

use selftest_guest::virtio::*;
use selftest_guest::*;

const QUEUE: usize = 0x4100_0000;
const BUFFER: usize = 0x4110_0000;
const CHUNK: u32 = 64 * 1024;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let Some(blk) = Block::new(QUEUE) else {
        c.check(false, format_args!("disk-writer: its disk"));
        finish("disk-writer", &c)
    };
    for i in 0..CHUNK as usize {
        // SAFETY: this VM's RAM.
        unsafe { core::ptr::write_volatile((BUFFER + i) as *mut u8, 0xab) };
    }
    let chunks = blk.capacity() / u64::from(CHUNK / 512);
    println!("disk-writer: writing its {chunks} x 64 KiB until it is destroyed");
    let mut round = 0u64;
    loop {
        for chunk in 0..chunks {
            let got = blk.transfer(BLK_T_OUT, chunk * u64::from(CHUNK / 512), BUFFER, CHUNK);
            if got != (Completion::Used { status: BLK_S_OK, written: 1 }) {
                c.check(false, format_args!("disk-writer: round {round}, chunk {chunk}: {got:?}"));
                finish("disk-writer", &c)
            }
        }
        round += 1;
        if round == 1 {
            println!("disk-writer: one round done");
        }
    }
}
