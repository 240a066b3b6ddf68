//! A guest that reboots in a loop: each boot prints one line and calls PSCI SYSTEM_RESET at
//! once, until its virtual counter, which runs on across reboots (the VM's counter offset
//! is fixed when it is created), has passed `STORM_MS`; then it powers off. The hypervisor
//! logs each reboot within the VM's limit of lines (docs/hostile-guests.md): a guest must
//! not flood the console that every VM's output shares (tests/tests/many_vms.rs).
#![no_std]
#![no_main]

use selftest_guest::*;

/// How long the reboots go on, in the VM's virtual time since it was created.
pub const STORM_MS: u64 = 2000;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let now = counter_ms();
    if now < STORM_MS {
        println!("rebooter: boot at {now} ms, rebooting");
        hvc(PSCI_SYSTEM_RESET, 0);
    }
    println!("rebooter: {STORM_MS} ms of reboots over, powering off");
    hvc(PSCI_SYSTEM_OFF, 0);
    loop {
        core::hint::spin_loop();
    }
}
