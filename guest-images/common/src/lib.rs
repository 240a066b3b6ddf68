//! What the bare-metal test guests share whatever their architecture (the AArch64 guests of
//! `guest-images/selftest`, the AArch32 ones of `guest-images/selftest32`): the console on
//! the VM's PL011 and `println!`, `ok N - ...` check reporting, the SMCCC and PSCI function
//! identifiers, the GIC as a guest drives it (all of it memory-mapped but the GICv3 CPU
//! interface, which each architecture reaches its own way: `gic::CpuInterface`), the
//! microbenchmarks' lines, a reader of the device tree the guest is given, and the register-leak
//! readers' report of a second vCPU.
//!
//! The guests run with their MMU off, so every address here is an IPA. Nothing here names
//! an architecture but `yield` (the same mnemonic in A32 and A64); the crate builds for the
//! host too, where its pure parts (`fdt`, `bench::nanoseconds`) are tested.
#![cfg_attr(not(test), no_std)]

pub mod bench;
pub mod checks;
pub mod console;
pub mod entry_report;
pub mod fdt;
pub mod gic;
pub mod smccc;

pub use checks::Checks;
pub use console::{Uart, UART};

/// A hint that this CPU waits for another: YIELD, on which QEMU's round-robin loop over its
/// vCPUs moves to the next one (a plain spin would keep the host thread, and the vCPU
/// waited for, until QEMU's time slice ends). `core::hint::spin_loop` is ISB on AArch64.
#[inline(always)]
pub fn yield_cpu() {
    #[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
    // SAFETY: a hint instruction, with no effect on memory or registers.
    unsafe {
        core::arch::asm!("yield")
    };
    #[cfg(not(any(target_arch = "aarch64", target_arch = "arm")))]
    core::hint::spin_loop();
}
