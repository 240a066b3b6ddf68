//! Why a capability operation is impossible.

use core::fmt;

use stage2::Stage2Error;

use super::CapId;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CapError {
    NoSuchCapability {
        cap: CapId,
    },
    WrongType {
        cap: CapId,
        expected: &'static str,
    },
    MissingRight {
        cap: CapId,
        right: &'static str,
    },
    /// A derived capability may not have more rights than its source.
    RightsNotASubset {
        cap: CapId,
    },
    Unaligned {
        what: &'static str,
        value: u64,
    },
    ZeroSize,
    /// No free piece of the untyped memory is large enough.
    OutOfUntyped {
        size: u64,
    },
    /// A new untyped or device range overlaps one the space already has.
    OverlappingMemory {
        base: u64,
    },
    /// The IPA range overlaps one the VM already has.
    OverlappingIpa {
        ipa: u64,
    },
    BeyondIpaSize {
        end: u64,
    },
    /// A private (RAM or device) region is already mapped into a VM.
    AlreadyMapped {
        cap: CapId,
    },
    InterruptAlreadyGranted {
        intid: u32,
    },
    DuplicateInterrupt {
        intid: u32,
    },
    TooManyVcpus {
        max: u32,
    },
    /// All 255 VMIDs are in use.
    NoVmid,
    /// The exact range asked of an untyped is not free in it (outside it, or carved).
    NotFree {
        base: u64,
        size: u64,
    },
    /// Memory mapped into an identity-mapped VM at an IPA other than its physical address.
    NotIdentity {
        ipa: u64,
        pa: u64,
    },
    /// A first touch outside the VM's private RAM (only that is zeroed on first touch).
    NotPrivateRam {
        ipa: u64,
    },
    /// Showing or hiding a shadow where the VM has no shadowed emulated window.
    NoShadowedWindow {
        ipa: u64,
    },
    Stage2(Stage2Error),
}

impl fmt::Display for CapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchCapability { cap } => {
                write!(f, "capability {} does not exist (revoked or never created)", cap.0)
            }
            Self::WrongType { cap, expected } => write!(f, "capability {} does not name {expected}", cap.0),
            Self::MissingRight { cap, right } => write!(f, "capability {} lacks the {right} right", cap.0),
            Self::RightsNotASubset { cap } => {
                write!(f, "a capability derived from {} may only have fewer rights", cap.0)
            }
            Self::Unaligned { what, value } => write!(f, "{what} {value:#x} is not aligned as required"),
            Self::ZeroSize => write!(f, "an empty range"),
            Self::OutOfUntyped { size } => write!(f, "no free untyped memory of {size:#x} bytes"),
            Self::OverlappingMemory { base } => {
                write!(f, "physical range at {base:#x} overlaps memory the space already has")
            }
            Self::OverlappingIpa { ipa } => write!(f, "IPA {ipa:#x} overlaps a range the VM already has"),
            Self::BeyondIpaSize { end } => write!(f, "IPA range ends at {end:#x}, beyond the VM's IPA size"),
            Self::AlreadyMapped { cap } => {
                write!(f, "region of capability {} is private and already mapped into a VM", cap.0)
            }
            Self::InterruptAlreadyGranted { intid } => write!(f, "interrupt {intid} already belongs to a VM"),
            Self::DuplicateInterrupt { intid } => write!(f, "interrupt {intid} already has a capability"),
            Self::TooManyVcpus { max } => write!(f, "the VM already has its {max} vCPUs"),
            Self::NoVmid => write!(f, "no VMID left: destroy a VM first"),
            Self::NotFree { base, size } => write!(
                f,
                "physical memory {base:#x}..{:#x} is not free untyped memory (outside the untyped, or given out)",
                base.saturating_add(*size)
            ),
            Self::NotIdentity { ipa, pa } => write!(
                f,
                "memory at PA {pa:#x} mapped at IPA {ipa:#x} in an identity-mapped VM, whose memory is at IPA = PA"
            ),
            Self::NotPrivateRam { ipa } => {
                write!(f, "IPA {ipa:#x} is not in the VM's private RAM, the only memory zeroed on first touch")
            }
            Self::NoShadowedWindow { ipa } => write!(
                f,
                "IPA {ipa:#x} is in no shadowed emulated window of the VM: only a window made by add_shadowed_window has a shadow to show or hide"
            ),
            Self::Stage2(e) => write!(f, "stage 2: {e}"),
        }
    }
}

impl From<Stage2Error> for CapError {
    fn from(e: Stage2Error) -> Self {
        CapError::Stage2(e)
    }
}
