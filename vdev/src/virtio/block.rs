//! The block device (virtio 1.2, 5.2; device ID 2): one request queue whose requests are
//! handed to a `BlockBackend` that moves the data, at once (`Started::Done`) or later
//! (`Started::Queued`: the backend gives the request's `Pending` back with its result and
//! the device finishes it with `VirtioBlock::complete`, virtio 1.2 2.7.8: used buffers may be
//! returned in any order). The device model reads each request header and writes its status
//! byte itself; the backend only sees data segments already checked to lie in the VM's RAM.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::virtio::chain::Chain;
use crate::virtio::device::{read_config_image, ConfigError, NeedsReset, QueueAccess, VirtioDevice};
use crate::virtio::incident::DeviceIncident;
use crate::virtio::memory::{GuestMemory, GuestMemoryError, Segment};

/// Feature bits (5.2.3).
pub const VIRTIO_BLK_F_SIZE_MAX: u64 = 1 << 1;
pub const VIRTIO_BLK_F_SEG_MAX: u64 = 1 << 2;
pub const VIRTIO_BLK_F_RO: u64 = 1 << 5;
pub const VIRTIO_BLK_F_BLK_SIZE: u64 = 1 << 6;
pub const VIRTIO_BLK_F_FLUSH: u64 = 1 << 9;

/// Request types (5.2.6).
pub const VIRTIO_BLK_T_IN: u32 = 0;
pub const VIRTIO_BLK_T_OUT: u32 = 1;
pub const VIRTIO_BLK_T_FLUSH: u32 = 4;
pub const VIRTIO_BLK_T_GET_ID: u32 = 8;

/// Status byte values (5.2.6).
pub const VIRTIO_BLK_S_OK: u8 = 0;
pub const VIRTIO_BLK_S_IOERR: u8 = 1;
pub const VIRTIO_BLK_S_UNSUPP: u8 = 2;

/// Sector size of the request protocol, whatever blk_size says (5.2.6).
pub const SECTOR_SIZE: u64 = 512;
/// QueueNumMax of the request queue.
pub const QUEUE_SIZE: u16 = 256;
/// seg_max (5.2.4): data segments per request, leaving room for the header and status
/// descriptors so a whole request fits one indirect table of QueueNumMax entries.
pub const SEG_MAX: u32 = QUEUE_SIZE as u32 - 2;
/// size_max (5.2.4): bytes per data segment. With `SEG_MAX` it bounds what one request can
/// carry, and so cost the hypervisor, to about 16 MiB; a request beyond either fails with
/// IOERR before anything is read or written. Linux sends 1.25 MiB requests at most by
/// default, of segments of a few pages.
pub const SIZE_MAX: u32 = 64 << 10;
/// Length of the VIRTIO_BLK_T_GET_ID answer (5.2.6).
pub const ID_BYTES: usize = 20;
/// The request header: le32 type, le32 reserved, le64 sector (5.2.6).
const HEADER_LEN: u64 = 16;
/// Size of the configuration space we expose (5.2.4, up to secure_erase_sector_alignment).
const CONFIG_LEN: usize = 72;

/// Why a backend could not serve a request; the guest sees VIRTIO_BLK_S_IOERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// The request reaches beyond the disk.
    OutOfRange { sector: u64, sectors: u64 },
    /// Guest memory refused a data segment.
    Memory(GuestMemoryError),
    /// The disk is read-only.
    ReadOnly,
    /// The storage under the backend failed.
    Io,
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockError::OutOfRange { sector, sectors } => {
                write!(f, "sectors {sector}..+{sectors} lie beyond the end of the disk")
            }
            BlockError::Memory(e) => write!(f, "data segment refused: {e}"),
            BlockError::ReadOnly => write!(f, "the disk is read-only"),
            BlockError::Io => write!(f, "the storage behind the disk failed; check the backend's log"),
        }
    }
}

/// What a backend is asked to do: the device checked the request (type, direction, limits,
/// range) before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRequest<'a> {
    /// Read from `sector` into the segments, in order (total a multiple of 512).
    Read { sector: u64, segments: &'a [Segment] },
    /// Write the segments, in order, from `sector`.
    Write { sector: u64, segments: &'a [Segment] },
    /// Everything written before (and completed) becomes durable.
    Flush,
}

/// A request a backend took and finishes later: what the device needs to finish it (where
/// its status byte goes, what it wrote, which chain it is). The backend keeps it while the
/// request is in flight and gives it back, untouched, to `VirtioBlock::complete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The chain's head descriptor, for the used ring.
    pub head: u16,
    /// The guest address of the status byte.
    status_at: u64,
    /// Data bytes the device writes to the guest when the request succeeds (a read's).
    written: u64,
    /// The device's generation when the request started: a request of an earlier one (the
    /// driver reset the device or took a queue down since) finishes nothing.
    generation: u32,
}

impl Pending {
    /// A request of chain `head` whose status byte is at `status_at` and which writes
    /// `written` data bytes if it succeeds, of the device's first generation: what the
    /// device hands a backend, for backends tested without a device.
    pub fn new(head: u16, status_at: u64, written: u64) -> Pending {
        Pending { head, status_at, written, generation: 0 }
    }
}

/// What became of a request handed to the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Served already, with this result.
    Done(Result<(), BlockError>),
    /// In flight: the backend gives its `Pending` back with the result later.
    Queued,
    /// The backend cannot take it now (its share of the disk's queue is in flight): the
    /// chain goes back on the available ring, untouched, and is taken again after a
    /// completion (`VirtioBlock::complete`, or the VM's hypervisor retrying a `waiting`
    /// device).
    Busy,
}

/// Where a block device's data lives.
pub trait BlockBackend {
    /// Capacity in 512-byte sectors.
    fn capacity_sectors(&self) -> u64;
    fn read_only(&self) -> bool;
    /// The VIRTIO_BLK_T_GET_ID answer (zero-padded).
    fn device_id(&self) -> [u8; 20];
    /// Starts `request`; `pending` is what the device needs to finish it, kept by a backend
    /// that answers `Started::Queued`.
    fn start(&mut self, mem: &dyn GuestMemory, request: BlockRequest<'_>, pending: Pending) -> Started;
    /// The driver reset the device: requests in flight finish nothing for the guest (their
    /// `Pending` are stale), and work of theirs not started yet need not start.
    fn reset(&mut self) {}
}

/// Counters for the hypervisor's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    pub requests: u64,
    pub errors: u64,
    pub unsupported: u64,
}

/// The virtio block device model.
pub struct VirtioBlock<B: BlockBackend> {
    backend: B,
    stats: BlockStats,
    /// Bumped at each device reset and each queue taken down (virtio 1.2 2.1, 4.2.2): what
    /// was in flight before belongs to rings the driver may have set up anew.
    generation: u32,
    /// The backend refused a chain for now (`Started::Busy`): it waits on the available
    /// ring for a completion.
    waiting: bool,
    /// A request's data segments, handed to the backend when they are not the chain's own
    /// buffers as they are (`data_segments`): one list whose capacity, grown (fallibly) by
    /// the first such requests, serves every request after them.
    segments: Vec<Segment>,
}

impl<B: BlockBackend> VirtioBlock<B> {
    pub fn new(backend: B) -> Self {
        VirtioBlock { backend, stats: BlockStats::default(), generation: 0, waiting: false, segments: Vec::new() }
    }

    /// Whether chains wait on the available ring because the backend was busy: the device
    /// takes them at its next completion, or when its owner retries it (`queue_notify`).
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Finishes a request the backend took (`Started::Queued`) with its result: the status
    /// byte, then the chain on the used ring (virtio 1.2 2.7.8, 5.2.6). A request of an
    /// earlier generation (the driver reset the device or took the queue down since it
    /// started) finishes nothing: its rings may be the driver's new ones. A status byte the
    /// device cannot write is a driver bug it cannot report in-band: NEEDS_RESET.
    pub fn complete(
        &mut self,
        pending: Pending,
        result: Result<(), BlockError>,
        q: &mut QueueAccess<'_>,
    ) -> Result<(), NeedsReset> {
        if pending.generation != self.generation {
            return Ok(());
        }
        let head = pending.head;
        let (status, written) = match result {
            Ok(()) => (VIRTIO_BLK_S_OK, pending.written),
            Err(_) => {
                self.stats.errors += 1;
                let what = "the disk behind the device failed the request";
                q.incident(DeviceIncident::RequestFailed { queue: 0, head, what });
                (VIRTIO_BLK_S_IOERR, 0)
            }
        };
        if let Err(error) = q.mem().write(pending.status_at, &[status]) {
            q.incident(DeviceIncident::RingOutsideRam { queue: 0, error });
            return Err(NeedsReset);
        }
        q.push_used(0, head, u32::try_from(written.saturating_add(1)).unwrap_or(u32::MAX))
    }

    /// Takes every available chain the backend accepts, in ring order; the first one it
    /// cannot take now stays on the ring, with every one after it.
    fn serve_queue(&mut self, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        self.waiting = false;
        while let Some(chain) = q.pop(0)? {
            match self.handle(&chain, q)? {
                Outcome::Done(len) => q.push_used(0, chain.head, len)?,
                Outcome::Queued => {}
                Outcome::Busy => {
                    q.unpop(0);
                    self.waiting = true;
                    break;
                }
            }
        }
        Ok(())
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    pub fn stats(&self) -> BlockStats {
        self.stats
    }

    fn config_image(&self) -> [u8; CONFIG_LEN] {
        let mut c = [0u8; CONFIG_LEN];
        c[0..8].copy_from_slice(&self.backend.capacity_sectors().to_le_bytes());
        c[8..12].copy_from_slice(&SIZE_MAX.to_le_bytes());
        c[12..16].copy_from_slice(&SEG_MAX.to_le_bytes());
        c[20..24].copy_from_slice(&(SECTOR_SIZE as u32).to_le_bytes());
        c
    }

    /// Serves one request and writes its status byte, or hands it to the backend; a request
    /// served now gives its used length (5.2.6: data written plus the status byte). A chain
    /// whose status byte cannot be written is a driver bug the device cannot report in-band:
    /// NEEDS_RESET.
    fn handle(&mut self, chain: &Chain, q: &mut QueueAccess<'_>) -> Result<Outcome, NeedsReset> {
        let head = chain.head;
        let status_at = match chain.last_writable_byte() {
            Ok(addr) => addr,
            Err(None) => {
                q.incident(DeviceIncident::WrongDirection {
                    queue: 0,
                    head,
                    what: "the request has no device-writable status byte at its end",
                });
                return Err(NeedsReset);
            }
            Err(Some(b)) => {
                q.incident(DeviceIncident::DescriptorOutsideRam {
                    queue: 0,
                    descriptor: b.descriptor,
                    addr: b.addr,
                    len: b.len,
                });
                return Err(NeedsReset);
            }
        };
        let data_writable = chain.writable_len() - 1;
        let pending = Pending { head, status_at, written: 0, generation: self.generation };
        let (status, written) = match self.serve(chain, q, data_writable, pending) {
            Served::Now(status, written) => (status, written),
            Served::Queued => {
                self.stats.requests += 1;
                return Ok(Outcome::Queued);
            }
            Served::Busy => return Ok(Outcome::Busy),
        };
        self.stats.requests += 1;
        match status {
            VIRTIO_BLK_S_OK => {}
            VIRTIO_BLK_S_UNSUPP => self.stats.unsupported += 1,
            _ => self.stats.errors += 1,
        }
        if let Err(error) = q.mem().write(status_at, &[status]) {
            q.incident(DeviceIncident::RingOutsideRam { queue: 0, error });
            return Err(NeedsReset);
        }
        Ok(Outcome::Done(u32::try_from(written.saturating_add(1)).unwrap_or(u32::MAX)))
    }

    /// Checks and starts one request: served now (its status and the data bytes written to
    /// the guest), in flight, or refused for now. `data_writable` is the writable length
    /// before the status byte.
    fn serve(&mut self, chain: &Chain, q: &mut QueueAccess<'_>, data_writable: u64, pending: Pending) -> Served {
        let head = chain.head;
        let mem = q.mem();
        if let Some(b) = chain.outside_ram() {
            q.incident(DeviceIncident::DescriptorOutsideRam {
                queue: 0,
                descriptor: b.descriptor,
                addr: b.addr,
                len: b.len,
            });
            return Served::Now(VIRTIO_BLK_S_IOERR, 0);
        }
        let readable = chain.readable_len();
        let mut header = [0u8; HEADER_LEN as usize];
        if readable < HEADER_LEN || !chain.read_bytes(mem, 0, &mut header) {
            q.incident(DeviceIncident::BadLength {
                queue: 0,
                head,
                what: "the device-readable request header is shorter than 16 bytes",
                len: readable,
            });
            return Served::Now(VIRTIO_BLK_S_IOERR, 0);
        }
        let [t0, t1, t2, t3, _, _, _, _, s0, s1, s2, s3, s4, s5, s6, s7] = header;
        let kind = u32::from_le_bytes([t0, t1, t2, t3]);
        let sector = u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
        let readable_data = readable - HEADER_LEN;
        let fail = |q: &mut QueueAccess<'_>, incident: DeviceIncident| {
            q.incident(incident);
            Served::Now(VIRTIO_BLK_S_IOERR, 0)
        };
        match kind {
            VIRTIO_BLK_T_IN => {
                if readable_data != 0 {
                    let what = "the read request's data buffer is device-readable; the device must write into it";
                    return fail(q, DeviceIncident::WrongDirection { queue: 0, head, what });
                }
                // The data is the writable part less the status byte.
                let Some(segments) = data_segments(chain, &mut self.segments, true, 0, data_writable) else {
                    return Served::Now(VIRTIO_BLK_S_IOERR, 0);
                };
                if let Err(incident) = within_limits(head, chain, segments, data_writable).and(check_range(
                    &self.backend,
                    head,
                    sector,
                    data_writable,
                )) {
                    return fail(q, incident);
                }
                let pending = Pending { written: data_writable, ..pending };
                match self.backend.start(mem, BlockRequest::Read { sector, segments }, pending) {
                    Started::Done(Ok(())) => Served::Now(VIRTIO_BLK_S_OK, data_writable),
                    Started::Done(Err(_)) => {
                        fail(q, DeviceIncident::RequestFailed { queue: 0, head, what: "the backend failed to read" })
                    }
                    Started::Queued => Served::Queued,
                    Started::Busy => Served::Busy,
                }
            }
            VIRTIO_BLK_T_OUT => {
                if data_writable != 0 {
                    let what = "the write request's data buffer is device-writable; the device must read it";
                    return fail(q, DeviceIncident::WrongDirection { queue: 0, head, what });
                }
                // 5.2.6.2: a read-only device fails writes and writes no data.
                if self.backend.read_only() {
                    let what = "write request to a read-only disk";
                    return fail(q, DeviceIncident::RequestFailed { queue: 0, head, what });
                }
                // The data is the readable part after the header.
                let Some(segments) = data_segments(chain, &mut self.segments, false, HEADER_LEN, readable_data) else {
                    return Served::Now(VIRTIO_BLK_S_IOERR, 0);
                };
                if let Err(incident) = within_limits(head, chain, segments, readable_data).and(check_range(
                    &self.backend,
                    head,
                    sector,
                    readable_data,
                )) {
                    return fail(q, incident);
                }
                match self.backend.start(mem, BlockRequest::Write { sector, segments }, pending) {
                    Started::Done(Ok(())) => Served::Now(VIRTIO_BLK_S_OK, 0),
                    Started::Done(Err(_)) => {
                        fail(q, DeviceIncident::RequestFailed { queue: 0, head, what: "the backend failed to write" })
                    }
                    Started::Queued => Served::Queued,
                    Started::Busy => Served::Busy,
                }
            }
            VIRTIO_BLK_T_FLUSH => match self.backend.start(mem, BlockRequest::Flush, pending) {
                Started::Done(Ok(())) => Served::Now(VIRTIO_BLK_S_OK, 0),
                Started::Done(Err(_)) => {
                    fail(q, DeviceIncident::RequestFailed { queue: 0, head, what: "the backend failed to flush" })
                }
                Started::Queued => Served::Queued,
                Started::Busy => Served::Busy,
            },
            VIRTIO_BLK_T_GET_ID => {
                // The ID is up to 20 bytes; a shorter buffer gets what fits (as QEMU does).
                let id = self.backend.device_id();
                let n = usize::try_from(data_writable).unwrap_or(ID_BYTES).min(ID_BYTES);
                if chain.write_bytes(mem, 0, &id[..n]) {
                    Served::Now(VIRTIO_BLK_S_OK, n as u64)
                } else {
                    Served::Now(VIRTIO_BLK_S_IOERR, 0)
                }
            }
            _ => {
                let what = "unsupported request type (only IN, OUT, FLUSH and GET_ID are served)";
                q.incident(DeviceIncident::RequestFailed { queue: 0, head, what });
                Served::Now(VIRTIO_BLK_S_UNSUPP, 0)
            }
        }
    }
}

/// A data length that is a multiple of 512 and sectors inside the disk.
fn check_range(backend: &impl BlockBackend, head: u16, sector: u64, len: u64) -> Result<(), DeviceIncident> {
    if !len.is_multiple_of(SECTOR_SIZE) {
        let what = "the data length is not a multiple of 512 bytes";
        return Err(DeviceIncident::BadLength { queue: 0, head, what, len });
    }
    let end = sector.checked_add(len / SECTOR_SIZE);
    if end.is_none_or(|end| end > backend.capacity_sectors()) {
        let what = "the request reaches beyond the disk's capacity";
        return Err(DeviceIncident::RequestFailed { queue: 0, head, what });
    }
    Ok(())
}

/// The `len` data bytes of the readable (or writable) part of `chain` from `offset`, the
/// rest of the part being the header before them or the status byte after them: the
/// chain's own buffers when those are whole buffers (Linux gives the header and the status
/// byte a buffer each), else their segments copied into `list`; `None` when the part does
/// not hold them in RAM or the heap has no room for the list.
fn data_segments<'a>(
    chain: &'a Chain,
    list: &'a mut Vec<Segment>,
    writable: bool,
    offset: u64,
    len: u64,
) -> Option<&'a [Segment]> {
    let part = if writable { chain.writable_len() } else { chain.readable_len() };
    let whole = part.checked_sub(offset).and_then(|rest| rest.checked_sub(len));
    if let Some(segments) = whole.and_then(|trim| chain.whole_buffers(writable, offset, trim)) {
        return Some(segments);
    }
    chain.segments_into(list, writable, offset, len).then_some(list.as_slice())
}

/// What `handle` did with a chain.
enum Outcome {
    /// Served: the used length.
    Done(u32),
    /// In flight in the backend.
    Queued,
    /// Refused for now: the chain goes back on the ring.
    Busy,
}

/// What `serve` did with a request.
enum Served {
    /// Served now: the status and the data bytes written to the guest.
    Now(u8, u64),
    Queued,
    Busy,
}

/// A request's data segments, `total` bytes of `chain`, within the limits the device
/// advertises (seg_max, size_max: 5.2.4), so no request moves more than `SEG_MAX` x
/// `SIZE_MAX` bytes. The segments are looked at one by one only when a buffer of the chain
/// is longer than size_max.
fn within_limits(head: u16, chain: &Chain, segments: &[Segment], total: u64) -> Result<(), DeviceIncident> {
    let what = if segments.len() > SEG_MAX as usize {
        "more data segments than seg_max (254)"
    } else if chain.longest() > SIZE_MAX && segments.iter().any(|s| s.len > SIZE_MAX) {
        "a data segment longer than size_max (65536 bytes)"
    } else {
        return Ok(());
    };
    Err(DeviceIncident::BadLength { queue: 0, head, what, len: total })
}

impl<B: BlockBackend> VirtioDevice for VirtioBlock<B> {
    fn device_id(&self) -> u32 {
        2
    }

    fn device_features(&self) -> u64 {
        let ro = if self.backend.read_only() { VIRTIO_BLK_F_RO } else { 0 };
        VIRTIO_BLK_F_FLUSH | VIRTIO_BLK_F_SIZE_MAX | VIRTIO_BLK_F_SEG_MAX | VIRTIO_BLK_F_BLK_SIZE | ro
    }

    fn num_queues(&self) -> u16 {
        1
    }

    fn queue_max_size(&self, _queue: u16) -> u16 {
        QUEUE_SIZE
    }

    fn read_config(&self, offset: u64, width: u8) -> Result<u64, ConfigError> {
        // capacity (offset 0) is the only 64-bit field we fill.
        read_config_image(&self.config_image(), &[0], offset, width)
    }

    fn queue_notify(&mut self, queue: u16, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        if queue != 0 {
            return Ok(());
        }
        self.serve_queue(q)
    }

    fn queue_disabled(&mut self, _queue: u16) {
        self.generation = self.generation.wrapping_add(1);
        self.waiting = false;
        self.backend.reset();
    }

    fn reset(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.waiting = false;
        self.backend.reset();
    }
}

/// A disk in host memory: for tests, and for a VM whose disk image the hypervisor holds.
pub struct RamDisk {
    data: Vec<u8>,
    read_only: bool,
    id: [u8; 20],
    flushes: u64,
    writes_since_flush: u64,
}

impl RamDisk {
    /// A zeroed disk of `sectors` 512-byte sectors.
    pub fn new(sectors: usize, read_only: bool, id: [u8; 20]) -> Self {
        RamDisk { data: vec![0; sectors * SECTOR_SIZE as usize], read_only, id, flushes: 0, writes_since_flush: 0 }
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// How many FLUSH requests reached the backend.
    pub fn flushes(&self) -> u64 {
        self.flushes
    }

    /// Write requests since the last flush.
    pub fn writes_since_flush(&self) -> u64 {
        self.writes_since_flush
    }

    /// The byte range of `segments` starting at `sector`, if wholly on the disk.
    fn span(&self, sector: u64, segments: &[Segment]) -> Result<usize, BlockError> {
        let total: u64 = segments.iter().map(|s| u64::from(s.len)).sum();
        let sectors = total / SECTOR_SIZE;
        let start = sector.checked_mul(SECTOR_SIZE).ok_or(BlockError::OutOfRange { sector, sectors })?;
        let end = start.checked_add(total).ok_or(BlockError::OutOfRange { sector, sectors })?;
        if end > self.data.len() as u64 {
            return Err(BlockError::OutOfRange { sector, sectors });
        }
        usize::try_from(start).map_err(|_| BlockError::OutOfRange { sector, sectors })
    }
}

impl BlockBackend for RamDisk {
    fn capacity_sectors(&self) -> u64 {
        self.data.len() as u64 / SECTOR_SIZE
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn device_id(&self) -> [u8; 20] {
        self.id
    }

    /// Served at once: the data is in memory.
    fn start(&mut self, mem: &dyn GuestMemory, request: BlockRequest<'_>, _: Pending) -> Started {
        Started::Done(match request {
            BlockRequest::Read { sector, segments } => self.read(mem, sector, segments),
            BlockRequest::Write { sector, segments } => self.write(mem, sector, segments),
            BlockRequest::Flush => self.flush(),
        })
    }
}

impl RamDisk {
    /// Reads from `sector` into the segments, in order (total a multiple of 512).
    pub fn read(&mut self, mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        let mut at = self.span(sector, segments)?;
        for s in segments {
            let end = at + s.len as usize;
            let src = self.data.get(at..end).ok_or(BlockError::Io)?;
            mem.write(s.addr, src).map_err(BlockError::Memory)?;
            at = end;
        }
        Ok(())
    }

    /// Writes the segments, in order, from `sector`.
    pub fn write(&mut self, mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        if self.read_only {
            return Err(BlockError::ReadOnly);
        }
        let mut at = self.span(sector, segments)?;
        for s in segments {
            let end = at + s.len as usize;
            let dst = self.data.get_mut(at..end).ok_or(BlockError::Io)?;
            mem.read(s.addr, dst).map_err(BlockError::Memory)?;
            at = end;
        }
        self.writes_since_flush += 1;
        Ok(())
    }

    /// Everything written before is durable (it is: the disk is memory).
    pub fn flush(&mut self) -> Result<(), BlockError> {
        self.flushes += 1;
        self.writes_since_flush = 0;
        Ok(())
    }
}
