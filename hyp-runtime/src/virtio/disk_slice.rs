//! A VM's disk: a slice of the board's disk ([`BoardDisk`]), as the backend of its
//! virtio-blk device. A guest request is queued on the board's disk and the notify returns;
//! the disk's completion finishes it later (`Hypervisor::disk_interrupt`, then
//! `DiskSliceBackend::completed` and `VirtioBlock::complete` under the device's lock):
//! nothing here waits for the disk (docs/virtio.md, "Where the data goes").

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;

use hyp_core::bundle::DiskSlice;
use vdev::virtio::block::{BlockBackend, BlockError, BlockRequest, Pending, Started, SEG_MAX};
use vdev::virtio::bounce::{self, Route, BOUNCE_BYTES};
use vdev::virtio::memory::{GuestMemory, GuestMemoryError, Segment};

use super::PhysicalRam;
use crate::board::{BoardDisk, DiskData, DiskError, DiskOp, DiskQueue, DiskRequest, PhysicalRun, Rejected};

const SECTOR: u64 = 512;

/// Sectors `[first, first + count)` of the board's disk, over the VM's RAM `ram`.
pub struct DiskSliceBackend<K: 'static, M> {
    disk: DiskQueue<K>,
    /// The VM's index: the board's completions name it.
    owner: usize,
    first: u64,
    count: u64,
    ram: M,
    id: [u8; 20],
    /// For requests whose buffers are not whole sectors: allocated once, with
    /// the VM, so a request's size never decides an allocation (vdev::virtio::bounce). None
    /// while a chunk is in flight: the board's disk holds it then, and gives it back with
    /// the chunk's completion.
    bounce: Option<Box<[u8]>>,
    /// The request going through the bounce buffer, a chunk at a time (one at a time).
    job: Option<BounceJob>,
    /// The requests in flight straight to or from the VM's RAM (and flushes): their tags on
    /// the board's disk and what the device needs to finish them. Its capacity, `share`, is
    /// reserved with the VM: nothing is allocated per request for it.
    flights: Vec<(u16, Pending)>,
    /// At most this many requests in flight: the VM's share of the board disk's queue.
    share: usize,
    /// The VM is being destroyed: completions touch its RAM no more, nothing new starts.
    stopped: bool,
    /// A direct request's physical runs, for `MAX_RUNS` runs, reserved with the VM and
    /// reused by every request (`physical_runs`).
    physical: Vec<PhysicalRun>,
}

/// How many physical runs a direct request may have: the board's disk takes a request of
/// at most a queue's worth of descriptors (QEMU's virtio-blk: seg_max 254, as ours), and
/// the list of `physical_runs` is reserved this long once.
const MAX_RUNS: usize = SEG_MAX as usize;

/// The longest piece one physical run holds: a run's length is a `u32`, kept whole sectors.
const MAX_PIECE: u64 = u32::MAX as u64 & !(SECTOR - 1);

/// The runs of the VM's RAM a request of `segments` hands the board's disk, into
/// `physical`, in one pass over the segments: `Route::Direct` when each segment is whole
/// sectors and the request's bytes, in order, make at most `physical.capacity()`
/// physically contiguous runs, each of whole sectors; `Route::Bounce` otherwise. Segments
/// may share memory (`bounce::Route::Direct`). Each run of adjacent segments is translated
/// as one once the next segment does not continue it, a physically contiguous piece at a
/// time (`PhysicalRam::contiguous`: one call for a run of RAM that is one region), and a
/// piece that continues the run before it physically is merged with it: so a run never
/// spans two pieces of RAM that are not adjacent in physical memory, and never memory that
/// is not the VM's (refused, with its address). The list is the caller's, reserved once:
/// nothing is allocated here.
pub(crate) fn physical_runs<M: PhysicalRam>(
    ram: &M,
    segments: &[Segment],
    physical: &mut Vec<PhysicalRun>,
) -> Result<Route, GuestMemoryError> {
    physical.clear();
    let mut runs = PhysicalRuns { physical, partial: false };
    // The run of adjacent segments not translated yet: its address and length.
    let mut run: Option<(u64, u64)> = None;
    for s in segments {
        let len = u64::from(s.len);
        if len == 0 || !len.is_multiple_of(SECTOR) {
            runs.physical.clear();
            return Ok(Route::Bounce);
        }
        match &mut run {
            // At most `SEG_MAX` segments of under 4 GiB: the sum cannot wrap.
            Some((addr, run_len)) if addr.checked_add(*run_len) == Some(s.addr) => *run_len += len,
            _ => {
                if let Some((addr, run_len)) = run.replace((s.addr, len)) {
                    if !runs.translate(ram, addr, run_len)? {
                        return Ok(Route::Bounce);
                    }
                }
            }
        }
    }
    if let Some((addr, len)) = run {
        if !runs.translate(ram, addr, len)? {
            return Ok(Route::Bounce);
        }
    }
    // Only a piece cut at a break of the VM's RAM that is not a sector boundary can leave a
    // run that is not whole sectors.
    if runs.partial && !runs.physical.iter().all(|r| u64::from(r.len).is_multiple_of(SECTOR)) {
        runs.physical.clear();
        return Ok(Route::Bounce);
    }
    Ok(Route::Direct)
}

/// The physical runs of a request as `physical_runs` builds them.
struct PhysicalRuns<'a> {
    physical: &'a mut Vec<PhysicalRun>,
    /// A piece was cut at a break of the VM's RAM that is not a sector boundary.
    partial: bool,
}

impl PhysicalRuns<'_> {
    /// Appends the physical pieces of guest memory `[addr, addr + len)`, each merged with
    /// the run before it when it continues it physically; `false` (the list cleared) when
    /// they do not fit in the list's capacity. Inlined into both of its calls: called, it
    /// paid a frame of ten saved registers a run (traced: about 70 instructions a run, of
    /// which the translation is about 50).
    #[inline(always)]
    fn translate<M: PhysicalRam>(&mut self, ram: &M, mut addr: u64, mut left: u64) -> Result<bool, GuestMemoryError> {
        while left > 0 {
            let (pa, n) = ram.contiguous(addr, left)?;
            let n = n.min(left).min(MAX_PIECE);
            let next = addr.checked_add(n).filter(|_| n > 0).ok_or(GuestMemoryError { addr, len: left })?;
            self.partial |= !n.is_multiple_of(SECTOR);
            // n <= MAX_PIECE, a u32.
            let len = n as u32;
            let full = self.physical.len() == self.physical.capacity();
            match self.physical.last_mut() {
                Some(last)
                    if last.pa.checked_add(u64::from(last.len)) == Some(pa) && last.len.checked_add(len).is_some() =>
                {
                    last.len += len;
                }
                _ if full => {
                    self.physical.clear();
                    return Ok(false);
                }
                _ => self.physical.push(PhysicalRun { pa, len }),
            }
            addr = next;
            left -= n;
        }
        Ok(true)
    }
}

/// A request through the bounce buffer: each chunk's completion starts the next chunk.
struct BounceJob {
    pending: Pending,
    op: DiskOp,
    /// The guest's buffers, copied once (fallibly) when the request starts.
    segments: Vec<Segment>,
    /// Its first sector on the board's disk, its bytes, and the bytes done.
    sector: u64,
    total: u64,
    done: u64,
    /// The chunk in flight: its tag and length.
    chunk: Option<(u16, usize)>,
    /// The driver reset the device: the chunk in flight is the last.
    cancelled: bool,
}

/// Why a chunk did not start.
enum ChunkError {
    /// The board's queue is full.
    Full,
    Failed(BlockError),
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
    /// board's disk, for VM `vm`, one of `sharing` VMs with a disk: each may have an equal
    /// part of the board disk's queue in flight (at least one request), so a guest that
    /// never reads its used ring cannot take another VM's part.
    pub fn new(
        disk: DiskQueue<K>,
        slice: DiskSlice,
        ram: M,
        vm: usize,
        sharing: usize,
    ) -> Result<Self, DiskSliceError> {
        let capacity = disk.capacity();
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
        let share = (disk.slots() / sharing.max(1)).max(1);
        let mut flights = Vec::new();
        flights.try_reserve_exact(share).map_err(|_| DiskSliceError::NoMemory)?;
        let mut physical = Vec::new();
        physical.try_reserve_exact(MAX_RUNS).map_err(|_| DiskSliceError::NoMemory)?;
        Ok(DiskSliceBackend {
            disk,
            owner: vm,
            first,
            count,
            ram,
            id,
            bounce: Some(bounce.into_boxed_slice()),
            job: None,
            flights,
            share,
            stopped: false,
            physical,
        })
    }

    /// Requests of this VM's on the board's disk (its RAM may be written by the disk until
    /// this is 0).
    pub fn in_flight(&self) -> usize {
        self.flights.len() + usize::from(self.job.as_ref().is_some_and(|j| j.chunk.is_some()))
    }

    /// How many requests this VM may have in flight.
    pub fn share(&self) -> usize {
        self.share
    }

    /// The VM is being destroyed: from now on no completion touches its RAM and nothing
    /// new starts; what is in flight still completes (and must, before its RAM goes).
    pub fn stop(&mut self) {
        self.stopped = true;
        if let Some(job) = self.job.as_mut() {
            job.cancelled = true;
        }
    }

    /// The board's disk finished request `tag` of this VM's: the request it finished, with
    /// its result, for the device to finish for the guest; none while a bounced request
    /// has chunks to go (the next one started here).
    pub fn completed(
        &mut self,
        tag: u16,
        result: Result<(), DiskError>,
        bounce: Option<Box<[u8]>>,
    ) -> Option<(Pending, Result<(), BlockError>)> {
        if let Some(i) = self.flights.iter().position(|(t, _)| *t == tag) {
            let (_, pending) = self.flights.swap_remove(i);
            return Some((pending, result.map_err(|_| BlockError::Io)));
        }
        let job = self.job.as_mut().filter(|j| j.chunk.is_some_and(|(t, _)| t == tag))?;
        let len = job.chunk.take().map_or(0, |(_, len)| len);
        let Some(buffer) = bounce else {
            // The board kept the buffer: no more bounced requests for this VM (each waits
            // for a buffer that never comes back) rather than a new allocation.
            return self.finish(Err(BlockError::Io));
        };
        let mut outcome = result.map_err(|_| BlockError::Io);
        if outcome.is_ok() && job.op == DiskOp::Read && !job.cancelled {
            outcome = bounce::scatter(&self.ram, &job.segments, job.done, &buffer[..len]);
        }
        self.bounce = Some(buffer);
        job.done += len as u64;
        if outcome.is_err() || job.done == job.total || job.cancelled {
            return self.finish(outcome);
        }
        match self.next_chunk() {
            Ok(()) => None,
            // Each VM's share keeps the board's queue from filling while this VM has a
            // request in flight, unless the board has fewer descriptors than requests
            // (no indirect descriptors): then the guest gets an I/O error.
            Err(ChunkError::Full) => self.finish(Err(BlockError::Io)),
            Err(ChunkError::Failed(e)) => self.finish(Err(e)),
        }
    }

    fn finish(&mut self, outcome: Result<(), BlockError>) -> Option<(Pending, Result<(), BlockError>)> {
        self.job.take().map(|job| (job.pending, outcome))
    }

    /// Queues a request of the guest's RAM (or a flush): in flight, refused for now (the
    /// board's queue is full), or failed.
    fn submit(&mut self, op: DiskOp, sector: u64, data: DiskData<'_>, pending: Pending) -> Started {
        match self.disk.submit(DiskRequest { owner: self.owner, op, sector, data }) {
            Ok(tag) => {
                // Within the capacity reserved with the VM: `start` keeps `in_flight` below
                // `share`.
                self.flights.push((tag, pending));
                Started::Queued
            }
            Err(Rejected { full: true, .. }) => Started::Busy,
            Err(Rejected { full: false, .. }) => Started::Done(Err(BlockError::Io)),
        }
    }

    /// Starts the next chunk of the bounced request: a write's chunk is copied from the
    /// guest's buffers first; a read's is copied to them when it completes.
    fn next_chunk(&mut self) -> Result<(), ChunkError> {
        let Some(job) = self.job.as_mut() else { return Err(ChunkError::Failed(BlockError::Io)) };
        let Some(mut buffer) = self.bounce.take() else { return Err(ChunkError::Failed(BlockError::Io)) };
        let chunk_max = buffer.len() as u64 - buffer.len() as u64 % SECTOR;
        let len = chunk_max.min(job.total - job.done) as usize;
        if len == 0 {
            self.bounce = Some(buffer);
            return Err(ChunkError::Failed(BlockError::Io));
        }
        if job.op == DiskOp::Write {
            if let Err(e) = bounce::gather(&self.ram, &job.segments, job.done, &mut buffer[..len]) {
                self.bounce = Some(buffer);
                return Err(ChunkError::Failed(e));
            }
        }
        let sector = job.sector + job.done / SECTOR;
        let request = DiskRequest { owner: self.owner, op: job.op, sector, data: DiskData::Bounce { buffer, len } };
        match self.disk.submit(request) {
            Ok(tag) => {
                job.chunk = Some((tag, len));
                Ok(())
            }
            Err(Rejected { full, bounce }) => {
                self.bounce = bounce;
                Err(if full { ChunkError::Full } else { ChunkError::Failed(BlockError::Io) })
            }
        }
    }

    /// A request through the bounce buffer, one at a time: its first chunk queued.
    fn start_bounced(
        &mut self,
        op: DiskOp,
        sector: u64,
        segments: &[Segment],
        total: u64,
        pending: Pending,
    ) -> Started {
        if self.job.is_some() || self.bounce.is_none() {
            // The buffer's request completes first (it is in flight: its completion takes
            // this chain again).
            return Started::Busy;
        }
        let mut copy = Vec::new();
        if copy.try_reserve_exact(segments.len()).is_err() {
            return Started::Done(Err(BlockError::Io));
        }
        copy.extend_from_slice(segments);
        let job = BounceJob { pending, op, segments: copy, sector, total, done: 0, chunk: None, cancelled: false };
        self.job = Some(job);
        match self.next_chunk() {
            Ok(()) => Started::Queued,
            Err(ChunkError::Full) => {
                self.job = None;
                Started::Busy
            }
            Err(ChunkError::Failed(e)) => {
                self.job = None;
                Started::Done(Err(e))
            }
        }
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

    /// Queues the request on the board's disk: straight into the guest's buffers when each
    /// is whole sectors (adjacent ones merged into one run),
    /// through the bounce buffer a chunk at a time otherwise. The device model already bounded the
    /// request (seg_max, size_max); a direct request allocates nothing (its lists of runs
    /// are the backend's, reserved with the VM: `physical_runs`), a bounced one a copy of
    /// its segments, fallibly: a failure is an I/O error for the guest, never a panic. A VM
    /// at its share of the board's queue gets `Busy`: the chain waits on its ring for one
    /// of its completions.
    fn start(&mut self, _: &dyn GuestMemory, request: BlockRequest<'_>, pending: Pending) -> Started {
        if self.stopped {
            return Started::Done(Err(BlockError::Io));
        }
        if self.in_flight() >= self.share {
            return Started::Busy;
        }
        let (op, sector, segments) = match request {
            BlockRequest::Flush => return self.submit(DiskOp::Flush, 0, DiskData::None, pending),
            BlockRequest::Read { sector, segments } => (DiskOp::Read, sector, segments),
            BlockRequest::Write { sector, segments } => (DiskOp::Write, sector, segments),
        };
        let total: u64 = segments.iter().map(|s| u64::from(s.len)).sum();
        let sectors = total / SECTOR;
        if total == 0 || !total.is_multiple_of(SECTOR) || sector.checked_add(sectors).is_none_or(|end| end > self.count)
        {
            return Started::Done(Err(BlockError::OutOfRange { sector, sectors }));
        }
        let at = self.first + sector;
        match physical_runs(&self.ram, segments, &mut self.physical) {
            Ok(Route::Direct) => {}
            Ok(Route::Bounce) => return self.start_bounced(op, at, segments, total, pending),
            Err(e) => return Started::Done(Err(BlockError::Memory(e))),
        }
        let physical = core::mem::take(&mut self.physical);
        let started = self.submit(op, at, DiskData::Guest(&physical), pending);
        self.physical = physical;
        started
    }

    /// The driver reset the device: a bounced request stops after its chunk in flight
    /// (its `Pending` is stale; the device finishes nothing of it).
    fn reset(&mut self) {
        if let Some(job) = self.job.as_mut() {
            job.cancelled = true;
        }
    }
}
