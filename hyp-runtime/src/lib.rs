//! The hypervisor's runtime, the part of it that names no architecture: where vCPUs run
//! ([`placement`]), the scheduler at run time ([`scheduling`]), a VM's virtual GIC as the
//! CPUs share it ([`shared_vgic`]), passthrough devices and who owns their interrupts
//! ([`passthrough`]), where console input goes ([`focus`]) and the management console's
//! commands ([`management`]).
//!
//! It is generic over two traits, [`Arch`] (the CPU architecture) and [`Board`] (the
//! board's console and disk), which an arch crate (`hyp-arch-armv8`) and a board layer
//! implement; its host tests implement them with fakes whose CPUs are threads.
//! docs/architecture.md draws the crates and the seam.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod arch;
pub mod board;
pub mod focus;
pub mod interrupts;
pub mod management;
pub mod network;
pub mod passthrough;
pub mod placement;
pub mod scheduling;
pub mod shared_vgic;
pub mod virtio;
pub mod vm;
pub mod vm_resources;
pub mod vm_table;

pub use arch::Arch;
pub use board::Board;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
