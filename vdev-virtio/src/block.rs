//! The block device (virtio 1.2, 5.2; device ID 2): one request queue whose requests are
//! served synchronously during the notify, against a `BlockBackend` that moves the data.
//! The device model reads each request header and writes its status byte itself; the backend
//! only sees data segments already checked to lie in the VM's RAM.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::chain::Chain;
use crate::device::{read_config_image, ConfigError, NeedsReset, QueueAccess, VirtioDevice};
use crate::incident::DeviceIncident;
use crate::memory::{GuestMemory, GuestMemoryError, Segment};

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

/// Where a block device's data lives.
pub trait BlockBackend {
    /// Capacity in 512-byte sectors.
    fn capacity_sectors(&self) -> u64;
    fn read_only(&self) -> bool;
    /// The VIRTIO_BLK_T_GET_ID answer (zero-padded).
    fn device_id(&self) -> [u8; 20];
    /// Reads from `sector` into the segments, in order (total a multiple of 512).
    fn read(&mut self, mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError>;
    fn write(&mut self, mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError>;
    /// Returns only when everything written before is durable.
    fn flush(&mut self) -> Result<(), BlockError>;
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
}

impl<B: BlockBackend> VirtioBlock<B> {
    pub fn new(backend: B) -> Self {
        VirtioBlock { backend, stats: BlockStats::default() }
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

    /// Serves one request and writes its status byte; returns the used length (5.2.6: data
    /// written plus the status byte). A chain whose status byte cannot be written is a driver
    /// bug the device cannot report in-band: NEEDS_RESET.
    fn handle(&mut self, chain: &Chain, q: &mut QueueAccess<'_>) -> Result<u32, NeedsReset> {
        let head = chain.head;
        let writable = chain.writable_len();
        let Some(status_at) = writable.checked_sub(1) else {
            q.incident(DeviceIncident::WrongDirection {
                queue: 0,
                head,
                what: "the request has no device-writable status byte at its end",
            });
            return Err(NeedsReset);
        };
        let Some(status_segment) = chain.segments(true, status_at, 1).and_then(|s| s.first().copied()) else {
            if let Some(b) = chain.writable().last() {
                q.incident(DeviceIncident::DescriptorOutsideRam {
                    queue: 0,
                    descriptor: b.descriptor,
                    addr: b.addr,
                    len: b.len,
                });
            }
            return Err(NeedsReset);
        };
        self.stats.requests += 1;
        let (status, written) = self.serve(chain, q, status_at);
        match status {
            VIRTIO_BLK_S_OK => {}
            VIRTIO_BLK_S_UNSUPP => self.stats.unsupported += 1,
            _ => self.stats.errors += 1,
        }
        if let Err(error) = q.mem().write(status_segment.addr, &[status]) {
            q.incident(DeviceIncident::RingOutsideRam { queue: 0, error });
            return Err(NeedsReset);
        }
        Ok(u32::try_from(written.saturating_add(1)).unwrap_or(u32::MAX))
    }

    /// Checks and runs one request; returns the status and the data bytes written to the guest.
    /// `data_writable` is the writable length before the status byte.
    fn serve(&mut self, chain: &Chain, q: &mut QueueAccess<'_>, data_writable: u64) -> (u8, u64) {
        let head = chain.head;
        let mem = q.mem();
        if let Some(b) = chain.outside_ram() {
            q.incident(DeviceIncident::DescriptorOutsideRam {
                queue: 0,
                descriptor: b.descriptor,
                addr: b.addr,
                len: b.len,
            });
            return (VIRTIO_BLK_S_IOERR, 0);
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
            return (VIRTIO_BLK_S_IOERR, 0);
        }
        let [t0, t1, t2, t3, _, _, _, _, s0, s1, s2, s3, s4, s5, s6, s7] = header;
        let kind = u32::from_le_bytes([t0, t1, t2, t3]);
        let sector = u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
        let readable_data = readable - HEADER_LEN;
        let fail = |q: &mut QueueAccess<'_>, incident: DeviceIncident| {
            q.incident(incident);
            (VIRTIO_BLK_S_IOERR, 0)
        };
        match kind {
            VIRTIO_BLK_T_IN => {
                if readable_data != 0 {
                    let what = "the read request's data buffer is device-readable; the device must write into it";
                    return fail(q, DeviceIncident::WrongDirection { queue: 0, head, what });
                }
                let Some(segments) = chain.segments(true, 0, data_writable) else {
                    return (VIRTIO_BLK_S_IOERR, 0);
                };
                if let Err(incident) = within_limits(head, &segments).and(self.check_range(head, sector, data_writable))
                {
                    return fail(q, incident);
                }
                match self.backend.read(mem, sector, &segments) {
                    Ok(()) => (VIRTIO_BLK_S_OK, data_writable),
                    Err(_) => {
                        fail(q, DeviceIncident::RequestFailed { queue: 0, head, what: "the backend failed to read" })
                    }
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
                let Some(segments) = chain.segments(false, HEADER_LEN, readable_data) else {
                    return (VIRTIO_BLK_S_IOERR, 0);
                };
                if let Err(incident) = within_limits(head, &segments).and(self.check_range(head, sector, readable_data))
                {
                    return fail(q, incident);
                }
                match self.backend.write(mem, sector, &segments) {
                    Ok(()) => (VIRTIO_BLK_S_OK, 0),
                    Err(_) => {
                        fail(q, DeviceIncident::RequestFailed { queue: 0, head, what: "the backend failed to write" })
                    }
                }
            }
            VIRTIO_BLK_T_FLUSH => match self.backend.flush() {
                Ok(()) => (VIRTIO_BLK_S_OK, 0),
                Err(_) => {
                    fail(q, DeviceIncident::RequestFailed { queue: 0, head, what: "the backend failed to flush" })
                }
            },
            VIRTIO_BLK_T_GET_ID => {
                // The ID is up to 20 bytes; a shorter buffer gets what fits (as QEMU does).
                let id = self.backend.device_id();
                let n = usize::try_from(data_writable).unwrap_or(ID_BYTES).min(ID_BYTES);
                if chain.write_bytes(mem, 0, &id[..n]) {
                    (VIRTIO_BLK_S_OK, n as u64)
                } else {
                    (VIRTIO_BLK_S_IOERR, 0)
                }
            }
            _ => {
                let what = "unsupported request type (only IN, OUT, FLUSH and GET_ID are served)";
                q.incident(DeviceIncident::RequestFailed { queue: 0, head, what });
                (VIRTIO_BLK_S_UNSUPP, 0)
            }
        }
    }

    /// A data length that is a multiple of 512 and sectors inside the disk.
    fn check_range(&self, head: u16, sector: u64, len: u64) -> Result<(), DeviceIncident> {
        if !len.is_multiple_of(SECTOR_SIZE) {
            let what = "the data length is not a multiple of 512 bytes";
            return Err(DeviceIncident::BadLength { queue: 0, head, what, len });
        }
        let end = sector.checked_add(len / SECTOR_SIZE);
        if end.is_none_or(|end| end > self.backend.capacity_sectors()) {
            let what = "the request reaches beyond the disk's capacity";
            return Err(DeviceIncident::RequestFailed { queue: 0, head, what });
        }
        Ok(())
    }
}

/// A request's data segments within the limits the device advertises (seg_max, size_max:
/// 5.2.4), so no request costs more than `MAX_REQUEST_BYTES`.
fn within_limits(head: u16, segments: &[Segment]) -> Result<(), DeviceIncident> {
    let total: u64 = segments.iter().map(|s| u64::from(s.len)).sum();
    let what = if segments.len() > SEG_MAX as usize {
        "more data segments than seg_max (254)"
    } else if segments.iter().any(|s| s.len > SIZE_MAX) {
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
        while let Some(chain) = q.pop(0)? {
            let len = self.handle(&chain, q)?;
            q.push_used(0, chain.head, len)?;
        }
        Ok(())
    }

    fn reset(&mut self) {}
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

    fn read(&mut self, mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        let mut at = self.span(sector, segments)?;
        for s in segments {
            let end = at + s.len as usize;
            let src = self.data.get(at..end).ok_or(BlockError::Io)?;
            mem.write(s.addr, src).map_err(BlockError::Memory)?;
            at = end;
        }
        Ok(())
    }

    fn write(&mut self, mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
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

    fn flush(&mut self) -> Result<(), BlockError> {
        self.flushes += 1;
        self.writes_since_flush = 0;
        Ok(())
    }
}
