//! Every way a stage-2 request can be impossible, each with a message a user can act on.

use core::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stage2Error {
    ZeroSize,
    Overflow {
        start: u64,
        size: u64,
    },
    /// An IPA, physical address or size not aligned to 4 KiB.
    Unaligned {
        what: &'static str,
        value: u64,
    },
    BeyondIpaSize {
        end: u64,
        ipa_bits: u8,
    },
    BeyondPaSize {
        end: u64,
        pa_bits: u8,
    },
    /// Something is already mapped in the range: nothing was changed.
    AlreadyMapped {
        ipa: u64,
    },
    /// The table memory ran out: nothing was changed.
    OutOfFrames,
    UnsupportedFormat {
        ipa_bits: u8,
        pa_bits: u8,
    },
    /// A permission the memory type cannot have (execute on device memory).
    InvalidPermissions,
    /// A hidden leaf (an emulated window's shadow page, `map_range_hidden`) asked with other
    /// attributes than Device-nGnRE, read-only, never executable.
    HiddenNotReadOnlyDevice,
    /// VMIDs are 8 bits (VTCR_EL2.VS = 0, and the only size ARMv7 has).
    VmidTooLarge {
        vmid: u16,
    },
}

impl fmt::Display for Stage2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => write!(f, "an empty range: give a size of at least 4 KiB"),
            Self::Overflow { start, size } => write!(f, "range {start:#x} + {size:#x} wraps around the address space"),
            Self::Unaligned { what, value } => write!(f, "{what} {value:#x} is not aligned to 4 KiB"),
            Self::BeyondIpaSize { end, ipa_bits } => write!(f, "range ends at {end:#x}, beyond the VM's {ipa_bits}-bit IPA space"),
            Self::BeyondPaSize { end, pa_bits } => write!(f, "physical range ends at {end:#x}, beyond the {pa_bits}-bit physical address space"),
            Self::AlreadyMapped { ipa } => write!(f, "IPA {ipa:#x} is already mapped: unmap it first (nothing was changed)"),
            Self::OutOfFrames => write!(f, "no memory left for stage-2 tables (nothing was changed)"),
            Self::UnsupportedFormat { ipa_bits, pa_bits } => write!(
                f, "a {ipa_bits}-bit IPA space with {pa_bits}-bit physical addresses is not supported (IPA 32 to 48 bits, not above the PA size; PA 32, 36, 40, 42, 44 or 48 bits)"
            ),
            Self::InvalidPermissions => write!(f, "device memory can never be executable: map or protect it without execute"),
            Self::HiddenNotReadOnlyDevice => write!(
                f, "a hidden (shadow) page must be Device-nGnRE, read-only and never executable: map it with MappingAttributes::READ_ONLY_DEVICE (nothing was changed)"
            ),
            Self::VmidTooLarge { vmid } => write!(f, "VMID {vmid} does not fit in 8 bits: use 0 to 255"),
        }
    }
}
