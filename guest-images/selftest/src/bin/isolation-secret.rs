//! The first VM of the isolation test: fills 16 MiB of its RAM with a secret pattern, keeps
//! it there while the probe VM looks for it, then powers off.
#![no_std]
#![no_main]

use core::ptr::{read_volatile, write_volatile};

use selftest_guest::*;

/// "SECRET!!" followed by the address: easy to recognise, different in every word.
pub const SECRET: u64 = 0x5345_4352_4554_2121;
const REGION: usize = 0x4100_0000;
const REGION_SIZE: usize = 16 << 20;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    for addr in (REGION..REGION + REGION_SIZE).step_by(8) {
        // SAFETY: this VM's own RAM (the test gives it 64 MiB from IPA 0x4000_0000).
        unsafe { write_volatile(addr as *mut u64, SECRET ^ addr as u64) };
    }
    let intact = (REGION..REGION + REGION_SIZE)
        .step_by(4096)
        // SAFETY: this VM's own RAM (the test gives it 64 MiB from IPA 0x4000_0000).
        .all(|a| unsafe { read_volatile(a as *const u64) } == SECRET ^ a as u64);
    c.check(intact, format_args!("isolation: wrote a 16 MiB secret at IPA {REGION:#x}"));
    // Stay alive while the probe runs on its own CPU.
    wait_ms(3000);
    let intact = (REGION..REGION + REGION_SIZE)
        .step_by(8)
        // SAFETY: this VM's own RAM (the test gives it 64 MiB from IPA 0x4000_0000).
        .all(|a| unsafe { read_volatile(a as *const u64) } == SECRET ^ a as u64);
    c.check(intact, format_args!("isolation: the secret is intact after the probe ran"));
    finish("isolation-secret", &c)
}
