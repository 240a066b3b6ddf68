//! What a mapping allows: its memory type, its permissions, and who owns the memory.

/// The stage-2 memory type (ARM ARM D8.6.5, "Stage 2 memory type and Cacheability
/// attributes when FEAT_S2FWB is not implemented").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemoryType {
    /// Normal, inner and outer write-back cacheable: RAM.
    NormalWriteBack,
    /// Device-nGnRE: passthrough device registers.
    DeviceNGnRE,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Permissions {
    pub read: bool,
    pub write: bool,
    pub execute: bool,
}

impl Permissions {
    pub const RWX: Permissions = Permissions { read: true, write: true, execute: true };
    pub const RW: Permissions = Permissions { read: true, write: true, execute: false };
    pub const RO: Permissions = Permissions { read: true, write: false, execute: false };
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MappingAttributes {
    pub memory: MemoryType,
    pub permissions: Permissions,
}

impl MappingAttributes {
    /// Device-nGnRE, read-only, never executable: the only attributes a hidden leaf
    /// (`Stage2Table::map_range_hidden`: an emulated window's shadow page) may have. The
    /// page is memory, but to the guest it stays a device's registers: Device keeps its
    /// reads uncached and unmerged whatever its stage 1 says (stage 2 can only make the
    /// combined type more restrictive, ARM ARM D8.6.5), read-only makes every write a
    /// stage-2 Permission fault for the device model, and a device leaf never executes.
    /// The hypervisor writes the page through its own cacheable mapping, so it must clean
    /// what it wrote to the point of coherency before the guest's uncached read can see it
    /// (ARM ARM B2, "Mismatched memory attributes").
    pub const READ_ONLY_DEVICE: MappingAttributes =
        MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RO };
}

/// Who owns the memory behind a mapping, kept in the descriptor's software bits so the
/// tables and the ownership can never disagree (Hafnium's `mm.h`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OwnershipState {
    /// Private to this VM.
    Owned,
    /// Owned by this VM and shared with another.
    Shared,
    /// Owned by another VM, mapped here through a shared-region capability.
    Borrowed,
}
