//! The virtual GIC: what a guest sees of its interrupt controller, kept per VM and per
//! vCPU, and the plan for the hardware list registers. GICv3 (IHI 0069) with affinity
//! routing, and GICv2 (IHI 0048B) with per-source SGIs. The arch crate traps the guest's
//! distributor and redistributor accesses into `Vgic::read`/`write`, its ICC_SGI1R_EL1
//! writes into `Vgic::generate_sgi`, and applies `plan_entry` to the real list registers.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod distributor;
mod error;
mod irq;
mod lr;
mod planner;
#[cfg(test)]
mod tests;

pub use distributor::{GicVersion, Vgic, GICR_FRAME_SIZE};
pub use error::AccessError;
pub use irq::{IntId, IrqState, Trigger};
pub use lr::{GichLr, IchLr, ListRegister, LrState};
pub use planner::{load, plan_entry, save, EntryPlan, ListRegisters, LrSlot};

/// vCPUs one VM may have.
pub const MAX_VCPUS: usize = 8;
