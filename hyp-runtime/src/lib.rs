//! The hypervisor's runtime, the part of it that names no architecture and no board:
//! - VMs: a VM built from its manifest entry and run by the arch crate ([`vm`]), the
//!   capabilities it is granted and gives back ([`vm_resources`]), the table every part of
//!   the hypervisor reaches VMs through ([`vm_table`]);
//! - devices: a VM's virtio devices and their backends ([`virtio`]), the virtual switch
//!   ([`network`]), passthrough devices and who owns their interrupts ([`passthrough`]);
//! - CPUs: which are online and their boot-time work ([`cpus`]), where vCPUs run
//!   ([`placement`]), side cores that serve virtqueues by polling ([`io_core`]), the
//!   scheduler at run time ([`scheduling`]), a VM's virtual GIC as the CPUs share it
//!   ([`shared_vgic`]), its LPIs injected by a board's GICv4.0 ([`direct_lpis`]), what each physical interrupt is for ([`interrupts`]), when a CPU
//!   invalidates its TLB for a vCPU ([`tlb`]);
//! - the console: where input goes ([`focus`]) and the management console's commands
//!   ([`management`]);
//! - the hypervisor as a whole ([`hypervisor`]): the VMs created at boot, each CPU's turn at
//!   running vCPUs, VMs ended, destroyed and created again, the console and the uplink.
//!
//! It is generic over two traits, [`Arch`] (the CPU architecture, with
//! [`Virtualization`] for building and running VMs) and [`Board`] (the board's console,
//! disk and NIC), which an arch crate (`hyp-arch-armv8`) and a board layer
//! (`boards/qemu-virt`) implement; its host tests implement them with fakes whose CPUs are
//! threads. docs/architecture.md draws the crates and the seam.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod arch;
pub mod board;
pub mod cpus;
pub mod direct_lpis;
pub mod first_touch;
pub mod focus;
pub mod guest_log;
pub mod hypervisor;
pub mod interrupts;
pub mod io_core;
pub mod management;
pub mod network;
pub mod passthrough;
pub mod placement;
pub mod scheduling;
pub mod shared_vgic;
pub mod tlb;
pub mod vcpu_run;
pub mod virtio;
pub mod vm;
pub mod vm_resources;
pub mod vm_table;

pub use arch::Arch;
pub use board::Board;
pub use hypervisor::{Hypervisor, Virtualization};

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
