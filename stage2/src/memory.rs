//! The two things the walker needs from the machine.

use crate::{Ipa, PhysAddr};

/// Where table pages come from and how the walker reads and writes them. The arch crate
/// implements it over the hypervisor's identity map; `testing::VecTableMemory` over a Vec.
pub trait TableMemory {
    /// `count` (a power of two, 1..=16) physically contiguous zeroed 4 KiB frames aligned
    /// to `count * 4096`, or None when memory is exhausted.
    fn allocate_zeroed_frames(&mut self, count: usize) -> Option<PhysAddr>;
    fn free_frames(&mut self, base: PhysAddr, count: usize);
    /// Entry `index` (0..512) of the table frame at `table`.
    fn read_descriptor(&self, table: PhysAddr, index: usize) -> u64;
    fn write_descriptor(&mut self, table: PhysAddr, index: usize, value: u64);
}

/// Stage-2 TLB maintenance, performed through a trait so tests can see it.
pub trait TlbMaintenance {
    /// After a descriptor was made invalid (the break of break-before-make), before anything
    /// new is written: DSB ISHST; TLBI IPAS2E1IS for the IPA; DSB ISH; TLBI VMALLE1IS; DSB ISH.
    fn invalidate_ipa(&mut self, vmid: u16, ipa: Ipa);
    fn invalidate_vmid(&mut self, vmid: u16);
    /// Makes newly written valid descriptors visible to the table walker (DSB ISHST).
    fn publish(&mut self);
}
