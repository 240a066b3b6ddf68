//! A VM's virtio devices at run time: the `vdev` models behind the VM's virtio-mmio
//! windows ([`slot`]), over the VM's RAM, with their backends: a slice of the board's disk
//! ([`disk_slice`]), a port of the virtual switch ([`switch_port`]), the VM's console
//! ([`console_bridge`]). Each device's interrupt is a level line into the VM's vGIC
//! (InterruptStatus != 0, virtio 1.2 section 4.2.3.4).

pub mod console_bridge;
pub mod disk_slice;
pub mod slot;
pub mod switch_port;

use vdev::virtio::memory::{GuestMemory, GuestMemoryError};

/// A VM's RAM as its devices see it, with where it is in physical memory: the board's disk
/// moves data straight to and from there.
pub trait PhysicalRam: GuestMemory {
    /// The physical address of `[addr, addr + len)`, if all of it is this VM's RAM.
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError>;
}
