//! A VM's disk: a slice of the board's disk ([`BoardDisk`]), as the backend of its
//! virtio-blk device.

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;

use hyp_core::bundle::DiskSlice;
use spin::Mutex;
use vdev_virtio::block::{BlockBackend, BlockError};
use vdev_virtio::bounce::{self, Direction, Route, BOUNCE_BYTES};
use vdev_virtio::memory::{GuestMemory, Segment};

use super::PhysicalRam;
use crate::board::{BoardDisk, PhysicalRun};

const SECTOR: u64 = 512;

/// Sectors `[first, first + count)` of the board's disk, over the VM's RAM `ram`.
pub struct DiskSliceBackend<K: 'static, M> {
    disk: &'static Mutex<K>,
    first: u64,
    count: u64,
    ram: M,
    id: [u8; 20],
    /// For requests whose buffers are not whole sectors or overlap: allocated once, with
    /// the VM, so a request's size never decides an allocation (vdev_virtio::bounce).
    bounce: Box<[u8]>,
}

/// Why a VM's `disk` cannot be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskSliceError {
    /// The slice does not fit in the board's disk (or is empty).
    OutsideDisk { first: u64, count: u64, capacity: u64 },
    /// No heap is left for the slice's bounce buffer.
    NoMemory,
}

impl core::fmt::Display for DiskSliceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DiskSliceError::OutsideDisk { first, count, capacity } => write!(
                f,
                "the VM's `disk` slice (sectors {first}..{}) does not fit in the board's disk of {capacity} sectors",
                first.saturating_add(*count)
            ),
            DiskSliceError::NoMemory => f.write_str("no heap left for the disk's bounce buffer"),
        }
    }
}

impl<K: BoardDisk, M: PhysicalRam> DiskSliceBackend<K, M> {
    /// The slice the manifest gives (size 0: the rest of the disk), checked against the
    /// board's disk, for VM `vm`.
    pub fn new(disk: &'static Mutex<K>, slice: DiskSlice, ram: M, vm: usize) -> Result<Self, DiskSliceError> {
        let capacity = disk.lock().capacity();
        let first = slice.offset / SECTOR;
        let count = if slice.size == 0 { capacity.saturating_sub(first) } else { slice.size / SECTOR };
        if count == 0 || first.checked_add(count).is_none_or(|end| end > capacity) {
            return Err(DiskSliceError::OutsideDisk { first, count, capacity });
        }
        let mut id = [0u8; 20];
        let name = format!("hyp-vm{vm}-disk");
        let len = name.len().min(id.len());
        id[..len].copy_from_slice(&name.as_bytes()[..len]);
        let mut bounce = Vec::new();
        bounce.try_reserve_exact(BOUNCE_BYTES).map_err(|_| DiskSliceError::NoMemory)?;
        bounce.resize(BOUNCE_BYTES, 0);
        Ok(DiskSliceBackend { disk, first, count, ram, id, bounce: bounce.into_boxed_slice() })
    }

    /// Moves the request's data between the disk and the guest's buffers in one request of
    /// the board's disk: straight into the guest's buffers when each is whole sectors and no
    /// two overlap (adjacent ones merged into one run), through the bounce buffer a chunk at
    /// a time otherwise. The device model already bounded the request (seg_max, size_max);
    /// nothing here allocates more than a list of its runs, and that fallibly and before the
    /// disk's lock is taken: a failure is an I/O error for the guest, never a panic with the
    /// lock held.
    fn transfer(&mut self, sector: u64, segments: &[Segment], write: bool) -> Result<(), BlockError> {
        let total: u64 = segments.iter().map(|s| u64::from(s.len)).sum();
        let sectors = total / SECTOR;
        if !total.is_multiple_of(SECTOR) || sector.checked_add(sectors).is_none_or(|end| end > self.count) {
            return Err(BlockError::OutOfRange { sector, sectors });
        }
        let at = self.first + sector;
        if bounce::route(segments) == Route::Direct {
            let mut runs = Vec::new();
            runs.try_reserve_exact(segments.len()).map_err(|_| BlockError::Io)?;
            for run in bounce::merge_adjacent(segments) {
                let pa = self.ram.physical(run.addr, u64::from(run.len)).map_err(BlockError::Memory)?;
                runs.push(PhysicalRun { pa, len: run.len });
            }
            let mut disk = self.disk.lock();
            let done = if write { disk.write_from_guest(at, &runs) } else { disk.read_to_guest(at, &runs) };
            return done.map_err(|_| BlockError::Io);
        }
        let mut disk = self.disk.lock();
        let direction = if write { Direction::Write } else { Direction::Read };
        bounce::transfer(&self.ram, segments, at, &mut self.bounce, direction, |sector, chunk| {
            let done = if write { disk.write(sector, chunk) } else { disk.read(sector, chunk) };
            done.map_err(|_| BlockError::Io)
        })
    }
}

impl<K: BoardDisk, M: PhysicalRam> BlockBackend for DiskSliceBackend<K, M> {
    fn capacity_sectors(&self) -> u64 {
        self.count
    }
    fn read_only(&self) -> bool {
        false
    }
    fn device_id(&self) -> [u8; 20] {
        self.id
    }
    fn read(&mut self, _mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        self.transfer(sector, segments, false)
    }
    fn write(&mut self, _mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        self.transfer(sector, segments, true)
    }
    fn flush(&mut self) -> Result<(), BlockError> {
        self.disk.lock().flush().map_err(|_| BlockError::Io)
    }
}
