//! Accesses the GIC specification makes an error: the guest gets an external abort.

use core::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessError {
    /// The register does not allow an access of this size (IHI 0069, "GIC memory-mapped register
    /// access": byte accesses only
    /// to IPRIORITYR, ITARGETSR, SPENDSGIR/CPENDSGIR; 64-bit only to IROUTER and GICR_TYPER).
    BadWidth { offset: u64, bytes: u8 },
    /// Not aligned to its size.
    Unaligned { offset: u64 },
    /// The vCPU does not exist.
    NoSuchVcpu { vcpu: usize },
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadWidth { offset, bytes } => {
                write!(f, "GIC register at offset {offset:#x} does not allow {bytes}-byte accesses")
            }
            Self::Unaligned { offset } => write!(f, "unaligned GIC access at offset {offset:#x}"),
            Self::NoSuchVcpu { vcpu } => write!(f, "vCPU {vcpu} does not exist"),
        }
    }
}
