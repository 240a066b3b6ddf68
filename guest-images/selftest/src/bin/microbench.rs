//! The microbenchmark guest (docs/performance.md): times hypervisor paths with the virtual
//! counter around many iterations. Run with QEMU's `-icount shift=0`, where one nanosecond
//! of virtual time is one instruction, so the figures are instruction counts. The same image
//! runs directly on QEMU (EL1, no hypervisor) for the reference row.
//!
//! Prints `bench NAME iterations=N ns=T` per benchmark, then powers off.
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::read_volatile;

use selftest_guest::*;

const ITERATIONS: u64 = 10_000;
/// A function id no one implements (owner 2, "SiP service", function 0): NOT_SUPPORTED.
const UNKNOWN_FUNCTION: u64 = 0xc200_0000;
const UARTFR: usize = UART + 0x18;
const GICD_TYPER: usize = 0x0800_0004;

fn counter() -> u64 {
    let v: u64;
    // SAFETY: the virtual counter is readable at EL1; the ISB keeps it in program order.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", "isb", out(reg) v) };
    v
}

fn frequency() -> u64 {
    let v: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL1.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) v) };
    v
}

fn bench(name: &str, mut body: impl FnMut()) {
    let start = counter();
    for _ in 0..ITERATIONS {
        body();
    }
    let ticks = counter() - start;
    let ns = (u128::from(ticks) * 1_000_000_000 / u128::from(frequency())) as u64;
    println!("bench {name} iterations={ITERATIONS} ns={ns}");
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    println!("microbench: EL{}, counter at {} Hz", current_el(), frequency());
    // The loop and counter overhead, subtracted from every figure.
    bench("loop", || core::hint::black_box(()));
    bench("hvc-unknown", || {
        core::hint::black_box(hvc(UNKNOWN_FUNCTION, 0));
    });
    bench("hvc-smccc-version", || {
        core::hint::black_box(hvc(SMCCC_VERSION, 0));
    });
    bench("mmio-read", || {
        // SAFETY: UARTFR of the VM's PL011, emulated by the hypervisor (or QEMU natively).
        core::hint::black_box(unsafe { read_volatile(UARTFR as *const u32) });
    });
    bench("gicd-read", || {
        // SAFETY: GICD_TYPER of the VM's GIC distributor (the vGIC, or QEMU's GIC natively).
        core::hint::black_box(unsafe { read_volatile(GICD_TYPER as *const u32) });
    });
    println!("microbench: done");
    hvc(PSCI_SYSTEM_OFF, 0);
    loop {
        core::hint::spin_loop();
    }
}
