//! What ARMv7-A and ARMv8-A images share: the GIC hardware, everything of it memory-mapped,
//! RAM through the identity map both keep, and how the machine's CPUs are started and the
//! machine stopped.
//!
//! - `gic`: the physical GIC as the hypervisor uses it: the distributor (GICD), the GICv3
//!   redistributors (GICR, brought up through the `arm-gic` crate), the GICv2 CPU interface
//!   (GICC); SGIs, SPIs, acknowledge and end of interrupt.
//! - `list_registers`: the GICv2 virtual interface control frame (GICH) and the list
//!   registers of either GIC version, for the vGIC (`vgic::ListRegisters`).
//! - `its`: the board's ITS and the GICv4.0 redistributor registers, for direct injection of
//!   a guest's LPIs (vLPIs): its tables, command queue and commands, a vPE's residency.
//! - `registers`: the frames' register offsets and the values computed for them.
//! - `mmio`: the volatile accesses to the GIC frames and the one board register here.
//! - `sys_flags`: Versatile Express's SYS_FLAGS, which its firmware reads for where a
//!   waiting CPU starts.
//! - `boot`: the boot CPU's way from the device tree to running VMs, over the steps the
//!   image gives (`image::ArmImage`), on the board only.
//! - `cpus`: what each CPU keeps of its own (`PerCpu`), which CPU this is, what a started
//!   CPU reads with its MMU off, and the pen where CPUs the board releases alike wait.
//! - `devices`: what a VM's virtio devices reach (its RAM, its vGIC, the switch).
//! - `firmware`: PSCI calls to the firmware (CPU_ON, SYSTEM_OFF), on the board only.
//! - `spin_table`: a CPU released from the firmware's spin table, where a board has no PSCI.
//! - `power`: stopping the machine: PSCI SYSTEM_OFF, or a board's power controller.
//! - `heap`: the hypervisor's heap, the image's global allocator.
//! - `hyp_map`: the hypervisor's own identity map (EL2 / HYP stage 1), writable XOR
//!   executable.
//! - `vm`: a VM as an ARM image runs it (its stage-2 registers, its counter offset, its
//!   descheduled vCPUs), built, loaded, reset and destroyed.
//! - `identity_map`: stage-2 table frames from the heap, a VM's RAM as its devices see it,
//!   the device tree the bootloader passed.
//!
//! What differs between the two architectures is the GICv3 CPU interface, which is system
//! registers (MRS/MSR on AArch64, MCR/MRC on AArch32): the image implements
//! `CpuInterfaceRegisters` (ICC_*) and `ListRegisterAccess` (ICH_*) for it, and the driver
//! here is generic over them (hyp-arch-armv8/src/gic.rs and ich.rs for AArch64;
//! docs/architecture.md, "The physical GIC").
//!
//! It names no board and builds for the host: its tests run the driver over frames in
//! ordinary memory.

#![cfg_attr(not(test), no_std)]

extern crate alloc;

#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub mod boot;
pub mod cpus;
pub mod devices;
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub mod firmware;
pub mod gic;
pub mod heap;
pub mod hyp_map;
pub mod identity_map;
pub mod image;
pub mod its;
pub mod list_registers;
mod mmio;
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub mod power;
pub mod registers;
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub mod spin_table;
pub mod sys_flags;
pub mod vm;

pub use gic::{CpuInterfaceRegisters, Gic, GicError};
pub use list_registers::{Gich, InterfaceState, ListRegisterAccess, ListRegisterFile};

#[cfg(test)]
mod tests;
