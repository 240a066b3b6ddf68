//! Moving a block request's data between guest buffers and a disk through one fixed-size
//! bounce buffer, a chunk at a time (`transfer` for a disk that serves a chunk at once;
//! `gather` and `scatter` for one that finishes it later), for buffers the disk cannot take as they are (not whole
//! sectors). The buffer is the backend's own, allocated once: a request's size, which the
//! guest chooses, never decides an allocation (a 32 MiB request once made the hypervisor
//! allocate 32 MiB from its heap and panic).

use alloc::collections::TryReserveError;
use alloc::vec::Vec;

use crate::virtio::block::{BlockError, SECTOR_SIZE};
use crate::virtio::memory::{GuestMemory, Segment};
use crate::virtio::pages::PageSet;

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
    /// Each buffer as it is: every one is whole sectors and, for a read, no two share a
    /// byte of guest memory, so the disk may be handed each as its own mutable slice. A
    /// write's buffers are only read by the disk, handed as shared slices, which may alias:
    /// a guest that names the same memory twice in a write has it written twice.
    Direct,
    /// Through the bounce buffer: a buffer is not whole sectors, or two of a read's overlap
    /// (a guest may name the same memory twice; two mutable slices of it would alias).
    Bounce,
}

/// The route for `segments` going `direction` (at most `seg_max`, so the pairwise check is
/// bounded).
pub fn route(segments: &[Segment], direction: Direction) -> Route {
    let whole = segments.iter().all(|s| s.len > 0 && u64::from(s.len).is_multiple_of(SECTOR_SIZE));
    let end = |s: &Segment| s.addr.saturating_add(u64::from(s.len));
    let overlap = direction == Direction::Read
        && segments
            .iter()
            .enumerate()
            .any(|(i, a)| segments[i + 1..].iter().any(|b| a.addr < end(b) && b.addr < end(a)));
    if whole && !overlap {
        Route::Direct
    } else {
        Route::Bounce
    }
}

/// What [`plan`] decides in, reserved once with a device and never grown: the pages a
/// request's runs claim, and a list to sort them in when that does not settle it.
pub struct PlanScratch {
    pages: PageSet,
    sorted: Vec<Segment>,
}

impl PlanScratch {
    /// For requests of up to `runs` runs.
    pub fn new(runs: usize) -> Result<Self, TryReserveError> {
        let mut sorted = Vec::new();
        sorted.try_reserve_exact(runs)?;
        Ok(PlanScratch { pages: PageSet::new()?, sorted })
    }

    /// The most runs it sorts.
    pub fn capacity(&self) -> usize {
        self.sorted.capacity()
    }
}

/// The route for `segments` going `direction`, as [`route`] decides it, and for
/// `Route::Direct` the runs the disk is handed: `runs` holds the segments with each run of
/// adjacent ones merged, in order (as [`merge_adjacent`] gives them). It allocates nothing:
/// `runs` and `scratch` are the caller's, reserved once (`SEG_MAX` runs for a block
/// device), and never grown here. A request with more runs than `runs` holds goes through
/// the bounce buffer. Whether two of a read's segments overlap is decided on the runs (a
/// run's segments follow each other, so two segments share a byte exactly when their runs
/// do), in time linear in the runs when they come in ascending or descending order of
/// address or no two touch the same page ([`PageSet`]: a guest's page cache gives its pages
/// in no order), else by sorting them; a write's are not compared (`Route::Direct`).
pub fn plan(segments: &[Segment], runs: &mut Vec<Segment>, scratch: &mut PlanScratch, direction: Direction) -> Route {
    runs.clear();
    for s in segments {
        if s.len == 0 || !u64::from(s.len).is_multiple_of(SECTOR_SIZE) {
            return Route::Bounce;
        }
        if let Some(last) = runs.last_mut() {
            if last.addr.checked_add(u64::from(last.len)) == Some(s.addr) {
                if let Some(len) = last.len.checked_add(s.len) {
                    last.len = len;
                    continue;
                }
            }
        }
        if runs.len() == runs.capacity() {
            return Route::Bounce;
        }
        runs.push(*s);
    }
    if direction == Direction::Write {
        return Route::Direct;
    }
    let end = |s: &Segment| s.addr.saturating_add(u64::from(s.len));
    // Each run starting at or after the end of the one before (whose end is past its own
    // start), or each ending at or before the start of the one before: every run lies wholly
    // on one side of all the runs before it, so no two share a byte.
    if runs.windows(2).all(|w| w[1].addr >= end(&w[0])) || runs.windows(2).all(|w| end(&w[1]) <= w[0].addr) {
        return Route::Direct;
    }
    if scratch.pages.claim_each_once(runs) {
        return Route::Direct;
    }
    let sorted = &mut scratch.sorted;
    sorted.clear();
    if runs.len() > sorted.capacity() {
        return Route::Bounce;
    }
    sorted.extend_from_slice(runs);
    sorted.sort_unstable_by_key(|s| s.addr);
    // Sorted by start, with every length non-zero: disjoint pairwise exactly when each run
    // starts at or after the end of the one before it.
    if sorted.windows(2).all(|w| w[1].addr >= end(&w[0])) {
        Route::Direct
    } else {
        Route::Bounce
    }
}

/// `segments` with each run of buffers that follow each other in guest memory as one (the
/// disk takes fewer, longer buffers).
pub fn merge_adjacent(segments: &[Segment]) -> impl Iterator<Item = Segment> + '_ {
    let mut i = 0;
    core::iter::from_fn(move || {
        let mut run = *segments.get(i)?;
        i += 1;
        while let Some(next) = segments.get(i).filter(|n| run.addr.checked_add(u64::from(run.len)) == Some(n.addr)) {
            let Some(len) = run.len.checked_add(next.len) else { break };
            run.len = len;
            i += 1;
        }
        Some(run)
    })
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
    fn overlapping_or_partial_sector_buffers_go_through_the_bounce_buffer() {
        let seg = |addr: u64, len: u32| Segment { addr, len };
        let route = |segments: &[Segment]| route(segments, Direction::Read);
        assert_eq!(route(&[seg(BASE, 512), seg(BASE + 512, 1024)]), Route::Direct, "adjacent is not overlapping");
        assert_eq!(route(&[seg(BASE, 1024), seg(BASE + 512, 512)]), Route::Bounce, "the second inside the first");
        assert_eq!(route(&[seg(BASE, 16 << 20), seg(BASE, 16 << 20)]), Route::Bounce, "the same buffer twice");
        assert_eq!(route(&[seg(BASE + 4096, 512), seg(BASE, 8192)]), Route::Bounce, "overlap in either order");
        let far_apart = [seg(BASE, 512), seg(BASE + 4096, 512), seg(BASE + 1024, 512)];
        assert_eq!(route(&far_apart), Route::Direct);
        let mut with_a_repeat = far_apart.to_vec();
        with_a_repeat.push(seg(BASE + 4096 + 511, 512));
        assert_eq!(route(&with_a_repeat), Route::Bounce, "one byte shared is enough");
        assert_eq!(route(&[seg(BASE, 513)]), Route::Bounce, "not whole sectors");
        assert_eq!(route(&[seg(BASE, 0), seg(BASE + 512, 512)]), Route::Bounce, "an empty buffer");
        assert_eq!(
            route(&[seg(u64::MAX - 511, 512), seg(u64::MAX - 1023, 1024)]),
            Route::Bounce,
            "at the top of the address space"
        );
        // The largest request the device model lets through: 254 separate 64 KiB buffers.
        let largest: Vec<_> = (0..254).map(|i| seg(BASE + i * (128 << 10), 64 << 10)).collect();
        assert_eq!(route(&largest), Route::Direct);
    }

    #[test]
    fn a_write_s_buffers_may_overlap_but_must_be_whole_sectors() {
        let seg = |addr: u64, len: u32| Segment { addr, len };
        let write = |segments: &[Segment]| route(segments, Direction::Write);
        assert_eq!(write(&[seg(BASE, 1024), seg(BASE + 512, 512)]), Route::Direct, "the second inside the first");
        assert_eq!(write(&[seg(BASE, 16 << 20), seg(BASE, 16 << 20)]), Route::Direct, "the same buffer twice");
        assert_eq!(write(&[seg(BASE, 513)]), Route::Bounce, "not whole sectors");
        assert_eq!(write(&[seg(BASE, 0), seg(BASE + 512, 512)]), Route::Bounce, "an empty buffer");
        let (r, runs) = plan_of(&[seg(BASE + 4096, 1024), seg(BASE, 8192), seg(BASE + 8192, 512)], 4, Direction::Write);
        assert_eq!((r, runs), (Route::Direct, vec![seg(BASE + 4096, 1024), seg(BASE, 8704)]), "merged, not compared");
        let (r, _) = plan_of(&[seg(BASE + 4096, 1024), seg(BASE, 8192), seg(BASE + 8192, 512)], 4, Direction::Read);
        assert_eq!(r, Route::Bounce, "the same buffers read into");
    }

    fn plan_of(segments: &[Segment], capacity: usize, direction: Direction) -> (Route, Vec<Segment>) {
        let mut runs = Vec::with_capacity(capacity);
        let mut scratch = PlanScratch::new(capacity).unwrap();
        let route = plan(segments, &mut runs, &mut scratch, direction);
        assert!(runs.capacity() == capacity && scratch.capacity() == capacity, "nothing grown");
        (route, runs)
    }

    #[test]
    fn a_plan_merges_adjacent_buffers_and_routes_as_route_does() {
        let seg = |addr: u64, len: u32| Segment { addr, len };
        // Linux's 1 MiB request of scattered pages, some of them adjacent, in ascending order.
        let pages: Vec<_> = (0..254u64).map(|i| seg(BASE + (i + i / 3) * 4096, 4096)).collect();
        let (r, runs) = plan_of(&pages, 254, Direction::Read);
        assert_eq!(r, Route::Direct);
        assert_eq!(runs, merge_adjacent(&pages).collect::<Vec<_>>());
        assert_eq!(runs.len(), 85, "three adjacent pages a run");
        // Descending: still direct, the runs in request order.
        let mut down = pages.clone();
        down.reverse();
        let (r, runs) = plan_of(&down, 254, Direction::Read);
        assert_eq!((r, runs.len()), (Route::Direct, 254), "descending pages are not adjacent");
        // Descending, then a segment merged onto the last run that reaches into the first.
        let (r, _) =
            plan_of(&[seg(BASE + 4096, 1024), seg(BASE + 3072, 1024), seg(BASE + 4096, 512)], 4, Direction::Read);
        assert_eq!(r, Route::Bounce, "the merged run overlaps the first");
        let (r, runs) =
            plan_of(&[seg(BASE + 4096, 1024), seg(BASE + 2048, 1024), seg(BASE + 3072, 512)], 4, Direction::Read);
        assert_eq!((r, runs.len()), (Route::Direct, 2), "merged up to, not into, the first");
        let (r, _) = plan_of(&[seg(BASE + 8192, 512), seg(BASE, 8192 + 1)], 4, Direction::Read);
        assert_eq!(r, Route::Bounce, "not whole sectors");
        let (r, _) = plan_of(&[seg(BASE + 8192, 1024), seg(BASE, 8192 + 512)], 4, Direction::Read);
        assert_eq!(r, Route::Bounce, "the second overlaps the first, out of order");
        let (r, _) = plan_of(&[seg(BASE, 512), seg(BASE + 1024, 512), seg(BASE + 512, 512)], 2, Direction::Read);
        assert_eq!(r, Route::Bounce, "more runs than the capacity reserved");
        let (r, runs) = plan_of(&[seg(BASE, 512), seg(BASE + 512, 512), seg(BASE + 1024, 512)], 1, Direction::Read);
        assert_eq!((r, runs), (Route::Direct, vec![seg(BASE, 1536)]), "one run fits a capacity of one");
        let (r, runs) = plan_of(&[], 4, Direction::Read);
        assert_eq!((r, runs.len()), (Route::Direct, 0));
    }

    /// `plan` decides as the pairwise `route` does, either way, and its runs are
    /// `merge_adjacent`'s.
    fn plan_agrees_with_route(segments: &[Segment]) -> Result<(), proptest::test_runner::TestCaseError> {
        for direction in [Direction::Read, Direction::Write] {
            let (r, runs) = plan_of(segments, 64, direction);
            proptest::prop_assert_eq!(r, route(segments, direction));
            if r == Route::Direct {
                proptest::prop_assert_eq!(runs, merge_adjacent(segments).collect::<Vec<_>>());
            }
        }
        Ok(())
    }

    proptest::proptest! {
        /// Whatever the segments (few distinct addresses, so that overlaps and adjacency are
        /// common), `plan` decides as the pairwise `route` does, and its runs are
        /// `merge_adjacent`'s: each covers exactly the bytes of the segments it merged, in
        /// order.
        #[test]
        fn a_plan_agrees_with_the_pairwise_route(
            raw in proptest::collection::vec((0u64..24, 0u32..5, 0u32..3), 0..40)
        ) {
            let segments: Vec<Segment> = raw
                .iter()
                .map(|&(page, sectors, odd)| Segment {
                    addr: BASE + page * 1024 + u64::from(odd == 2) * 100,
                    len: sectors * 512 + u32::from(odd == 1),
                })
                .collect();
            plan_agrees_with_route(&segments)?;
        }

        /// Buffers over many pages in no order, as a guest's page cache gives them (the
        /// runs' pages decide, `PageSet`), some of them sharing a page or a byte (the sort
        /// decides): `plan` still decides as the pairwise `route` does.
        #[test]
        fn a_plan_of_scattered_pages_agrees_with_the_pairwise_route(
            raw in proptest::collection::vec((0u64..96, 0u64..8, 1u32..12), 0..60)
        ) {
            let segments: Vec<Segment> = raw
                .iter()
                .map(|&(page, sector, sectors)| Segment { addr: BASE + page * 4096 + sector * 512, len: sectors * 512 })
                .collect();
            plan_agrees_with_route(&segments)?;
        }
    }

    #[test]
    fn scattered_pages_are_direct_and_a_shared_page_is_decided_by_its_bytes() {
        let seg = |addr: u64, len: u32| Segment { addr, len };
        let scattered: Vec<_> = (0..254u64).map(|i| seg(BASE + (i * 7919 % 1021) * 4096, 4096)).collect();
        assert_eq!(plan_of(&scattered, 254, Direction::Read).0, Route::Direct);
        let mut shared = scattered.clone();
        shared[100] = seg(scattered[7].addr + 2048, 512);
        assert_eq!(plan_of(&shared, 254, Direction::Read).0, Route::Bounce, "inside another's page: overlapping");
        shared[7].len = 2048;
        assert_eq!(plan_of(&shared, 254, Direction::Read).0, Route::Direct, "the same page, not the same bytes");
    }

    #[test]
    fn adjacent_buffers_merge_and_others_stay_apart() {
        let seg = |addr: u64, len: u32| Segment { addr, len };
        let merged: Vec<_> =
            merge_adjacent(&[seg(BASE, 512), seg(BASE + 512, 512), seg(BASE + 4096, 512), seg(BASE, 512)]).collect();
        assert_eq!(merged, [seg(BASE, 1024), seg(BASE + 4096, 512), seg(BASE, 512)]);
        let wrapping = [seg(u64::MAX - 511, 512), seg(0, 512)];
        assert_eq!(merge_adjacent(&wrapping).count(), 2, "an address that wraps is not adjacent");
        assert_eq!(merge_adjacent(&[]).count(), 0);
    }

    #[test]
    fn segments_not_whole_sectors_in_all_or_a_useless_bounce_buffer_are_refused() {
        let mem = VecMemory::new(BASE, 0x10000);
        let odd = [Segment { addr: BASE, len: 700 }];
        let mut disk = Disk::new(4);
        let mut bounce = vec![0u8; 1024];
        assert_eq!(
            transfer(&mem, &odd, 0, &mut bounce, Direction::Read, disk.io(Direction::Read)),
            Err(BlockError::Io)
        );
        let mut tiny = vec![0u8; 100];
        assert_eq!(
            transfer(&mem, &segments(), 0, &mut tiny, Direction::Read, disk.io(Direction::Read)),
            Err(BlockError::Io)
        );
        assert!(disk.chunks.is_empty(), "the disk was never touched");
    }
}
