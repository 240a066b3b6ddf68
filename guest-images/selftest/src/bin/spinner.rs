//! A guest gone wrong in the worst way for its neighbours: it masks every interrupt and
//! spins without ever exiting (no WFI, no WFE, no hypercall, no MMIO). Only the
//! hypervisor's slice timer, an EL2 interrupt the guest's PSTATE cannot mask, takes its CPU
//! back (issue: many VMs, "a guest that spins with interrupts off affects no other VM").
#![no_std]
#![no_main]

use core::arch::asm;

use selftest_guest::*;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    println!("spinner: spinning forever with interrupts masked");
    // SAFETY: masks this vCPU's own debug, SError, IRQ and FIQ exceptions.
    unsafe { asm!("msr daifset, #0xf", options(nomem, nostack)) };
    let mut turns = 0u64;
    loop {
        // A plain add, not YIELD or WFE: nothing here hints the CPU that it could go elsewhere.
        turns = core::hint::black_box(turns.wrapping_add(1));
    }
}
