//! A VM's virtio devices at run time: the `vdev` models behind the VM's virtio-mmio
//! windows ([`slot`]), over the VM's RAM, with their backends: a slice of the board's disk
//! ([`disk_slice`]), a port of the virtual switch ([`switch_port`]), the VM's console
//! ([`console_bridge`]). Each device's interrupt is a level line into the VM's vGIC
//! (InterruptStatus != 0, virtio 1.2 section 4.2.3.4).

pub mod console_bridge;
pub mod disk_slice;
pub mod pci;
pub mod slot;
pub mod switch_port;

use vdev::virtio::memory::{GuestMemory, GuestMemoryError};

/// A VM's RAM as its devices see it, with where it is in physical memory: the board's disk
/// moves data straight to and from there.
pub trait PhysicalRam: GuestMemory {
    /// The physical address of `[addr, addr + len)`, if all of it is this VM's RAM at
    /// physically contiguous addresses.
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError>;

    /// The longest start of `[addr, addr + len)` that is this VM's RAM at physically
    /// contiguous addresses: its physical address and its length (at least 1 and at most
    /// `len`, for `len` > 0), made ready for a device to touch (zeroed on first touch). A
    /// request's run is handed to the board's disk in as few pieces as its physical layout
    /// allows, one call per piece, never one per page. Refused when `addr` is not the VM's
    /// RAM. The default, for RAM that is one physically contiguous region, is `physical`
    /// over the whole range.
    fn contiguous(&self, addr: u64, len: u64) -> Result<(u64, u64), GuestMemoryError> {
        self.physical(addr, len).map(|pa| (pa, len))
    }
}
