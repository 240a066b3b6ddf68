//! The second VM of the isolation test: tries to read the first VM's RAM at every IPA it
//! can name. Each IPA outside its own RAM and device pages must give an external abort,
//! never data; its own RAM must hold no byte of the other VM's secret.
#![no_std]
#![no_main]

use core::ptr::read_volatile;

use selftest_guest::*;

const SECRET: u64 = 0x5345_4352_4554_2121;
const RAM_BASE: usize = 0x4000_0000;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

/// Reads `ipa`; Some(value) if the read returned data, None if it aborted.
fn probe(ipa: usize) -> Option<u64> {
    let mut value = 0;
    // SAFETY: a load the hypervisor either serves or refuses with an abort, which the
    // vector catches.
    let caught = expect_exception(|| value = unsafe { read_volatile(ipa as *const u64) });
    match caught {
        None => Some(value),
        Some((esr, far)) if esr >> 26 == EC_DATA_ABORT_SAME_EL && far == ipa as u64 => None,
        Some((esr, far)) => {
            println!("not ok - probe of {ipa:#x}: unexpected exception ESR_EL1 {esr:#x} FAR_EL1 {far:#x}");
            None
        }
    }
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    // Let the other VM write its secret first.
    wait_ms(500);

    // This VM's RAM ends where the first 2 MiB step past its base aborts.
    let mut ram_end = RAM_BASE;
    while probe(ram_end).is_some() {
        ram_end += 2 * MIB;
    }
    c.check(ram_end > RAM_BASE, format_args!("isolation: this VM's RAM is IPA {RAM_BASE:#x}..{ram_end:#x}"));

    // Every IPA it can name: each 2 MiB of the low 4 GiB (where the board's RAM, and so the
    // other VM's memory, lives physically), each 1 GiB up to the 40-bit IPA limit, and the
    // last page below it.
    let low = (0..4 * GIB).step_by(2 * MIB);
    let high = (4 * GIB..(1usize << 40)).step_by(GIB);
    let mut probes = 0;
    let mut leaks = 0;
    let mut secrets = 0;
    for ipa in low.chain(high).chain(core::iter::once((1usize << 40) - 4096)) {
        // Its own device pages, read from memory the hypervisor gave it (docs/devices.md,
        // docs/virtio.md): the UART's and the virtio transports'.
        let own = (RAM_BASE..ram_end).contains(&ipa)
            || (UART..UART + 0x1000).contains(&ipa)
            || (virtio::TRANSPORTS..virtio::TRANSPORTS + 0x1000).contains(&ipa);
        if own {
            continue;
        }
        probes += 1;
        if let Some(value) = probe(ipa) {
            leaks += 1;
            if value ^ ipa as u64 == SECRET {
                secrets += 1;
            }
            if leaks <= 8 {
                println!("not ok - IPA {ipa:#x} outside this VM returned data {value:#x}");
            }
        }
    }
    c.check(
        leaks == 0,
        format_args!(
            "isolation: all {probes} IPAs outside this VM's RAM aborted ({leaks} returned data, {secrets} the secret)"
        ),
    );

    // Its own RAM holds nothing of the other VM (but for this guest's image at 2 MiB,
    // whose constants include the pattern).
    let image = RAM_BASE + 2 * MIB..RAM_BASE + 4 * MIB;
    let mut found = 0;
    for addr in (RAM_BASE..ram_end).step_by(8).filter(|a| !image.contains(a)) {
        // SAFETY: this VM's own RAM.
        let value = unsafe { read_volatile(addr as *const u64) };
        if value & 0xffff_ffff_0000_0000 == SECRET & 0xffff_ffff_0000_0000 {
            found += 1;
        }
    }
    c.check(
        found == 0,
        format_args!("isolation: no trace of the other VM's secret in this VM's {} MiB", (ram_end - RAM_BASE) / MIB),
    );
    finish("isolation-probe", &c)
}
