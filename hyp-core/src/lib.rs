//! The architecture-independent core of the hypervisor.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod platform;
pub mod mmio;
pub mod smccc;
pub mod syndrome;
pub mod pl011;
pub mod bundle;
pub mod image;
pub mod memory_map;
pub mod exit;
pub mod guest_fdt;
pub mod vcpu_power;
pub mod sysreg;
pub mod guest_layout;
pub mod cap;
