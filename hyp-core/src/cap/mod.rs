//! The capability model (docs/capability-model.md): what a VM may touch exists only as a
//! capability, derivation only removes rights, revocation removes everything derived, and
//! untyped memory is carved at most once at a time, so VMs' private RAM cannot overlap.

mod error;
pub mod invariants;
mod rights;
mod space;

pub use error::CapError;
pub use rights::Rights;
pub use space::{CapId, CapSpace, CreateOp, IpaRangeInfo, MapOp, RangeKind, RegionKind, RemoveOp, ShadowOp, VmId};
#[cfg(test)]
mod tests;
