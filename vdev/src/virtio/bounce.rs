//! Moving a block request's data between guest buffers and a disk through one fixed-size
//! bounce buffer, a chunk at a time (`transfer` for a disk that serves a chunk at once;
//! `gather` and `scatter` for one that finishes it later), for buffers the disk cannot take as they are (not whole
//! sectors). The buffer is the backend's own, allocated once: a request's size, which the
//! guest chooses, never decides an allocation (a 32 MiB request once made the hypervisor
//! allocate 32 MiB from its heap and panic).

use crate::virtio::block::{BlockError, SECTOR_SIZE};
use crate::virtio::memory::{GuestMemory, Segment};

/// Size of a backend's bounce buffer: one `size_max` segment, a whole number of sectors.
pub const BOUNCE_BYTES: usize = crate::virtio::block::SIZE_MAX as usize;

/// Which way the data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Disk to guest (VIRTIO_BLK_T_IN).
    Read,
    /// Guest to disk (VIRTIO_BLK_T_OUT).
    Write,
}

/// How a request's buffers may reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Each buffer as it is: every one is whole sectors. The disk is handed the buffers'
    /// physical runs, never Rust slices of them, so they may share memory: a guest that
    /// names the same memory twice in a read has it written twice, in an order it cannot
    /// rely on (as a device would on hardware), and twice in a write has it read twice.
    Direct,
    /// Through the bounce buffer: a buffer is not whole sectors.
    Bounce,
}

/// The route for `segments`.
pub fn route(segments: &[Segment]) -> Route {
    if segments.iter().all(|s| s.len > 0 && u64::from(s.len).is_multiple_of(SECTOR_SIZE)) {
        Route::Direct
    } else {
        Route::Bounce
    }
}

/// Transfers `segments` (a whole number of sectors in all) from or to the disk at `sector`,
/// `bounce.len()` bytes at a time (a non-zero multiple of 512): `disk(sector, chunk)` reads
/// into or writes from `chunk`. Stops at the first failure; on a read the guest buffers
/// before it hold what was read.
pub fn transfer(
    mem: &dyn GuestMemory,
    segments: &[Segment],
    sector: u64,
    bounce: &mut [u8],
    direction: Direction,
    mut disk: impl FnMut(u64, &mut [u8]) -> Result<(), BlockError>,
) -> Result<(), BlockError> {
    let total: u64 = segments.iter().map(|s| u64::from(s.len)).sum();
    let chunk_max = bounce.len() as u64 - bounce.len() as u64 % SECTOR_SIZE;
    if chunk_max == 0 || !total.is_multiple_of(SECTOR_SIZE) {
        return Err(BlockError::Io);
    }
    let mut done = 0u64;
    while done < total {
        let n = chunk_max.min(total - done);
        let chunk = &mut bounce[..n as usize];
        let at = sector.checked_add(done / SECTOR_SIZE).ok_or(BlockError::OutOfRange { sector, sectors: 0 })?;
        match direction {
            Direction::Write => {
                gather_or_scatter(mem, segments, done, chunk, direction)?;
                disk(at, chunk)?;
            }
            Direction::Read => {
                disk(at, chunk)?;
                gather_or_scatter(mem, segments, done, chunk, direction)?;
            }
        }
        done += n;
    }
    Ok(())
}

/// Copies the bytes `[offset, offset + chunk.len())` of the request's data out of the guest
/// buffers `segments` (which hold them in order) into `chunk`: a write's chunk, before it
/// goes to the disk.
pub fn gather(mem: &dyn GuestMemory, segments: &[Segment], offset: u64, chunk: &mut [u8]) -> Result<(), BlockError> {
    gather_or_scatter(mem, segments, offset, chunk, Direction::Write)
}

/// Copies `chunk`, the bytes `[offset, offset + chunk.len())` of the request's data, into
/// the guest buffers `segments`: a read's chunk, once the disk filled it.
pub fn scatter(mem: &dyn GuestMemory, segments: &[Segment], offset: u64, chunk: &[u8]) -> Result<(), BlockError> {
    let mut skip = offset;
    let mut done = 0usize;
    for s in segments {
        if done == chunk.len() {
            break;
        }
        let len = u64::from(s.len);
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = (len - skip).min((chunk.len() - done) as u64) as usize;
        let addr = s.addr.checked_add(skip).ok_or(BlockError::Io)?;
        mem.write(addr, &chunk[done..done + take]).map_err(BlockError::Memory)?;
        done += take;
        skip = 0;
    }
    if done == chunk.len() {
        Ok(())
    } else {
        Err(BlockError::Io)
    }
}

/// Copies between `chunk` and the bytes `[offset, offset + chunk.len())` of the request's
/// data, which the segments hold in order: into the chunk for a write, out of it for a read.
fn gather_or_scatter(
    mem: &dyn GuestMemory,
    segments: &[Segment],
    offset: u64,
    chunk: &mut [u8],
    direction: Direction,
) -> Result<(), BlockError> {
    let mut skip = offset;
    let mut filled = 0usize;
    for s in segments {
        if filled == chunk.len() {
            break;
        }
        let len = u64::from(s.len);
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = (len - skip).min((chunk.len() - filled) as u64) as usize;
        let addr = s.addr.checked_add(skip).ok_or(BlockError::Io)?;
        let part = &mut chunk[filled..filled + take];
        match direction {
            Direction::Write => mem.read(addr, part),
            Direction::Read => mem.write(addr, part),
        }
        .map_err(BlockError::Memory)?;
        filled += take;
        skip = 0;
    }
    if filled == chunk.len() {
        Ok(())
    } else {
        Err(BlockError::Io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::memory::VecMemory;
    use alloc::vec;
    use alloc::vec::Vec;

    const BASE: u64 = 0x4000_0000;

    /// A disk of `sectors` sectors whose byte i is i * 7 (mod 251), and the chunks it saw.
    struct Disk {
        data: Vec<u8>,
        chunks: Vec<(u64, usize)>,
    }

    impl Disk {
        fn new(sectors: usize) -> Disk {
            Disk { data: (0..sectors * 512).map(|i| (i * 7 % 251) as u8).collect(), chunks: vec![] }
        }
        fn io(&mut self, direction: Direction) -> impl FnMut(u64, &mut [u8]) -> Result<(), BlockError> + '_ {
            move |sector, chunk| {
                let at = sector as usize * 512;
                self.chunks.push((sector, chunk.len()));
                let span = self.data.get_mut(at..at + chunk.len()).ok_or(BlockError::Io)?;
                match direction {
                    Direction::Read => chunk.copy_from_slice(span),
                    Direction::Write => span.copy_from_slice(chunk),
                }
                Ok(())
            }
        }
    }

    /// Odd-sized segments over 5 sectors, out of order in guest memory.
    fn segments() -> Vec<Segment> {
        vec![
            Segment { addr: BASE + 0x3000, len: 100 },
            Segment { addr: BASE + 0x1000, len: 1000 },
            Segment { addr: BASE + 0x8000, len: 1460 },
        ]
    }

    #[test]
    fn a_read_lands_in_the_guest_buffers_in_order_whatever_the_chunk_size() {
        for bounce_len in [512, 1024, 1536, 4096] {
            let mem = VecMemory::new(BASE, 0x10000);
            let mut disk = Disk::new(16);
            let mut bounce = vec![0u8; bounce_len];
            transfer(&mem, &segments(), 3, &mut bounce, Direction::Read, disk.io(Direction::Read)).unwrap();
            let mut got = Vec::new();
            for s in segments() {
                let mut part = vec![0u8; s.len as usize];
                mem.read(s.addr, &mut part).unwrap();
                got.extend(part);
            }
            assert_eq!(got, disk.data[3 * 512..8 * 512], "bounce of {bounce_len}");
            assert!(disk.chunks.iter().all(|&(_, n)| n <= bounce_len && n % 512 == 0), "{:?}", disk.chunks);
            assert_eq!(disk.chunks.iter().map(|c| c.1).sum::<usize>(), 5 * 512);
        }
    }

    #[test]
    fn a_write_gathers_the_guest_buffers_in_order() {
        let mem = VecMemory::new(BASE, 0x10000);
        let mut expected = Vec::new();
        for (i, s) in segments().iter().enumerate() {
            let bytes: Vec<u8> = (0..s.len).map(|b| (b as usize + i * 31) as u8).collect();
            mem.write(s.addr, &bytes).unwrap();
            expected.extend(bytes);
        }
        let mut disk = Disk::new(16);
        let mut bounce = vec![0u8; 1024];
        transfer(&mem, &segments(), 2, &mut bounce, Direction::Write, disk.io(Direction::Write)).unwrap();
        assert_eq!(disk.data[2 * 512..7 * 512], expected[..]);
        assert_eq!(disk.chunks, [(2, 1024), (4, 1024), (6, 512)]);
    }

    #[test]
    fn a_disk_failure_stops_the_transfer_with_an_error() {
        let mem = VecMemory::new(BASE, 0x10000);
        let mut bounce = vec![0u8; 1024];
        let mut calls = 0;
        let failing = |_: u64, _: &mut [u8]| {
            calls += 1;
            if calls == 2 {
                Err(BlockError::Io)
            } else {
                Ok(())
            }
        };
        assert_eq!(transfer(&mem, &segments(), 0, &mut bounce, Direction::Read, failing), Err(BlockError::Io));
        assert_eq!(calls, 2, "nothing after the failure");
    }

    #[test]
    fn partial_sector_buffers_go_through_the_bounce_buffer_and_shared_memory_does_not() {
        let seg = |addr: u64, len: u32| Segment { addr, len };
        assert_eq!(route(&[seg(BASE, 512), seg(BASE + 512, 1024)]), Route::Direct);
        assert_eq!(route(&[seg(BASE, 1024), seg(BASE + 512, 512)]), Route::Direct, "the second inside the first");
        assert_eq!(route(&[seg(BASE, 16 << 20), seg(BASE, 16 << 20)]), Route::Direct, "the same buffer twice");
        assert_eq!(route(&[seg(BASE, 513)]), Route::Bounce, "not whole sectors");
        assert_eq!(route(&[seg(BASE, 0), seg(BASE + 512, 512)]), Route::Bounce, "an empty buffer");
        // The largest request the device model lets through: 254 separate 64 KiB buffers.
        let largest: Vec<_> = (0..254).map(|i| seg(BASE + i * (128 << 10), 64 << 10)).collect();
        assert_eq!(route(&largest), Route::Direct);
    }
}
