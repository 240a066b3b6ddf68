//! What the runtime uses of the board's own devices (docs/architecture.md, "Boards"): for
//! now its disk, whose slices are the VMs' disks. Each board layer implements it for the
//! disk it has (QEMU `virt`: a virtio-mmio block device, hyp-arch-armv8/src/host_virtio.rs).

use core::fmt;

/// A run of a VM's RAM, by physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysicalRun {
    pub pa: u64,
    pub len: u32,
}

/// The board's disk refused or failed a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskError;

impl fmt::Display for DiskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the board's disk refused or failed the request")
    }
}

/// The board's disk, in sectors of 512 bytes. One call is one request of the disk, which
/// completes before the call returns.
pub trait BoardDisk: Send {
    /// Its size in sectors.
    fn capacity(&self) -> u64;

    /// Reads from `sector` into `runs`, in order. The runtime guarantees that the runs lie
    /// in the RAM of one VM, are whole sectors and are pairwise disjoint, so each may be
    /// handed to the disk as a buffer of its own.
    fn read_to_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError>;

    /// Writes `runs`, in order, from `sector` (the runs as for `read_to_guest`).
    fn write_from_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError>;

    /// Reads from `sector` into the hypervisor's buffer `buf` (whole sectors).
    fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError>;

    /// Writes the hypervisor's buffer `buf` (whole sectors) from `sector`.
    fn write(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError>;

    /// Returns once what was written before is on the disk's medium.
    fn flush(&mut self) -> Result<(), DiskError>;
}
