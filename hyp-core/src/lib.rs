//! The architecture-independent core of the hypervisor.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod bcm2835_pm;
pub mod bundle;
pub mod cap;
pub mod console_lines;
pub mod coprocessor;
pub mod debug_registers;
pub mod entropy;
pub mod exit;
pub mod exit_stats;
pub mod fdt;
pub mod guest_fdt;
pub mod guest_layout;
pub mod guest_map;
pub mod hyp_fault;
pub mod image;
pub mod log_limit;
pub mod management;
pub mod manifest;
pub mod memory_map;
pub mod mmio;
pub mod platform;
pub mod set_way;
pub mod smccc;
pub mod sync;
pub mod syndrome;
pub mod sysreg;
pub mod trap;
pub mod vcpu_power;
