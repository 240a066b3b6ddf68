//! Stage-2 translation tables: what IPA maps to what physical address, with which
//! attributes and permissions, in the hardware's own format. One walker serves VMSAv8-64
//! (4 KiB granule, 32- to 48-bit IPA) and ARMv7 LPAE (40-bit IPA): the formats differ only
//! in their geometry and in a few descriptor bits.
//!
//! Table memory and TLB maintenance are traits (`TableMemory`, `TlbMaintenance`): the arch
//! crate implements them on the hardware, `testing` fakes them so host tests inspect the
//! very tables the walker built.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

mod addr;
mod attrs;
mod descriptor;
mod error;
mod format;
mod memory;
mod table;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use addr::{Ipa, IpaRange, PhysAddr, PAGE_SIZE};
pub use attrs::{MappingAttributes, MemoryType, OwnershipState, Permissions};
pub use error::Stage2Error;
pub use format::{allowed_start_levels, Geometry, LevelDescription, LevelKind, TableFormat, LEVELS};
pub use memory::{TableMemory, TlbMaintenance};
pub use table::{Leaf, Stage2Table, Translation, FIRST_TOUCH_BLOCK};
#[cfg(test)]
mod tests;
