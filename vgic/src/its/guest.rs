//! What the ITS reaches outside itself: the guest's RAM, where its command queue is
//! (IHI 0069H 5.2), and the LPIs' own state, which the distributor
//! keeps (IHI 0069H 5.1: the ITS only translates; pending state and configuration belong to
//! the redistributors).

use core::fmt;

/// Guest memory the ITS reads: its command queue.
pub trait GuestMemory {
    /// Fills `buf` from the VM's RAM at intermediate physical address `ipa`; Err if any byte
    /// of it is not the VM's RAM.
    fn read(&self, ipa: u64, buf: &mut [u8]) -> Result<(), OutsideRam>;
}

/// A read the ITS asked of [`GuestMemory`] reached beyond the VM's RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutsideRam;

impl fmt::Display for OutsideRam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the address is not the VM's RAM")
    }
}

/// What the ITS's commands do to the LPIs, whose state the distributor keeps.
pub trait LpiTable {
    /// `lpi` is now translated to `vcpu` (MAPTI, MAPI, MOVI, MAPC of its collection to another vCPU, MOVALL).
    fn route(&mut self, lpi: u32, vcpu: usize);
    /// `lpi` is no longer the translation of any event (DISCARD, MAPD V=0, a MAPTI/MAPI over its event): its pending state ends.
    fn unmap(&mut self, lpi: u32);
    /// INT: `lpi` becomes pending, as an edge.
    fn set_pending(&mut self, lpi: u32);
    /// CLEAR: `lpi`'s pending state ends.
    fn clear_pending(&mut self, lpi: u32);
    /// INV, INVALL, MAPTI, MAPI: `lpi`'s configuration (priority, enable) must be read again from the guest's LPI configuration table.
    fn invalidate(&mut self, lpi: u32);
}
