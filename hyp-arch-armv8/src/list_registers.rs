//! The list registers of this CPU for the vCPU run loop: the shared file
//! (`hyp_arch_arm::ListRegisterFile`: GICv2's GICH frame, memory-mapped) over the ICH_* system
//! registers of GICv3 (`ich::Ich`).

pub use hyp_arch_arm::InterfaceState;

pub type ListRegisterFile = hyp_arch_arm::ListRegisterFile<crate::ich::Ich>;
