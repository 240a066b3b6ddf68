//! A VM's virtio devices at run time, over a fake RAM and a fake board disk: the disk slice
//! maps the VM's sectors onto its part of the board's disk, merges adjacent buffers into one
//! request, bounces what cannot go straight, and answers a bad request with an error; a
//! device's window logs what the guest got wrong and goes quiet once the VM is shut down.

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex as StdMutex};

use hyp_core::bundle::DiskSlice;
use hyp_core::log_limit::GuestLogLimit;
use hyp_core::mmio::BusDevice;
use hyp_core::sync::Mutex;
use hyp_core::syndrome::AccessWidth;
use vdev::pl011::InterruptLine;
use vdev::virtio::block::{BlockBackend, BlockError, BlockRequest, Pending, Started, VirtioBlock};
use vdev::virtio::memory::{GuestMemory, GuestMemoryError, Segment};
use vdev::virtio::net::{NetBackend, MAX_FRAME};

use super::leak;
use crate::board::{
    BoardDisk, DiskCompletion, DiskData, DiskError, DiskOp, DiskQueue, DiskRequest, PhysicalRun, Rejected,
};
use crate::fake::FakePage;
use crate::virtio::disk_slice::{DiskSliceBackend, DiskSliceError};
use crate::virtio::slot::{Signal, SlotSetup, VirtioSlot, VmEnv, Window, WindowPage};
use crate::virtio::switch_port::{SwitchPort, OUTBOX_BYTES};
use crate::virtio::PhysicalRam;

pub(crate) const RAM_IPA: u64 = 0x4000_0000;
pub(crate) const RAM_PA: u64 = 0x8000_0000;
pub(crate) const RAM_SIZE: usize = 4 << 20;
const SECTOR: usize = 512;

/// A VM's RAM: `RAM_SIZE` bytes at an IPA (`RAM_IPA`, or `RAM_PA` for an identity-mapped
/// VM), "physical" address `RAM_PA`.
#[derive(Clone)]
pub struct FakeRam(Arc<StdMutex<Vec<u8>>>, u64, Arc<std::sync::atomic::AtomicBool>);

impl FakeRam {
    fn new() -> FakeRam {
        FakeRam(Arc::new(StdMutex::new(vec![0; RAM_SIZE])), RAM_IPA, Arc::default())
    }
    /// The same RAM seen at IPA `ipa`.
    fn at(self, ipa: u64) -> FakeRam {
        FakeRam(self.0, ipa, self.2)
    }
    /// The VM's capabilities are revoked: a device touching its RAM from now on is a bug,
    /// and the test fails.
    fn revoke(&self) {
        self.2.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn touched(&self) {
        assert!(!self.2.load(std::sync::atomic::Ordering::SeqCst), "a device touched the RAM of a destroyed VM");
    }
    fn offset(addr: u64, base: u64, len: u64) -> Result<usize, GuestMemoryError> {
        addr.checked_sub(base)
            .filter(|o| o.checked_add(len).is_some_and(|end| end <= RAM_SIZE as u64))
            .map(|o| o as usize)
            .ok_or(GuestMemoryError { addr, len })
    }
    fn fill(&self, ipa: u64, bytes: &[u8]) {
        let at = (ipa - self.1) as usize;
        self.0.lock().unwrap()[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn bytes(&self, ipa: u64, len: usize) -> Vec<u8> {
        let at = (ipa - self.1) as usize;
        self.0.lock().unwrap()[at..at + len].to_vec()
    }
}

impl GuestMemory for FakeRam {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        self.touched();
        let at = Self::offset(addr, self.1, buf.len() as u64)?;
        buf.copy_from_slice(&self.0.lock().unwrap()[at..at + buf.len()]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        self.touched();
        let at = Self::offset(addr, self.1, data.len() as u64)?;
        self.0.lock().unwrap()[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        Self::offset(addr, self.1, len).map(|_| ())
    }
}

impl PhysicalRam for FakeRam {
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        Self::offset(addr, self.1, len).map(|o| RAM_PA + o as u64)
    }
}

/// One request the board's disk got.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Request {
    ToGuest { sector: u64, runs: Vec<PhysicalRun> },
    FromGuest { sector: u64, runs: Vec<PhysicalRun> },
    Read { sector: u64, len: usize },
    Write { sector: u64, len: usize },
    Flush,
}

/// A request the fake disk holds until the test completes it.
struct Queued {
    owner: usize,
    op: DiskOp,
    sector: u64,
    runs: Vec<PhysicalRun>,
    bounce: Option<(Box<[u8]>, usize)>,
}

/// The interrupt of the fake board's disk.
pub(crate) const DISK_INTID: u32 = 79;

/// A board disk of `sectors` sectors that reaches the VM's RAM by physical address. It
/// takes up to `slots` requests and moves their data only when the test completes them
/// (or, with `complete_when_polled`, when the hypervisor looks for completions).
pub struct FakeDisk {
    data: Vec<u8>,
    ram: FakeRam,
    requests: Vec<Request>,
    failing: bool,
    slots: usize,
    /// By tag.
    queued: Vec<Option<Queued>>,
    done: std::collections::VecDeque<DiskCompletion>,
    pub(crate) complete_when_polled: bool,
    /// Times the interrupt was acknowledged.
    acknowledged: usize,
}

impl FakeDisk {
    fn new(ram: FakeRam, slots: usize) -> FakeDisk {
        let data = (0..64u8).flat_map(|s| [s; SECTOR]).collect();
        FakeDisk {
            data,
            ram,
            requests: vec![],
            failing: false,
            slots,
            queued: vec![],
            done: Default::default(),
            complete_when_polled: false,
            acknowledged: 0,
        }
    }
    fn at(&self, sector: u64, len: usize) -> Result<usize, DiskError> {
        let at = sector as usize * SECTOR;
        (!self.failing && len.is_multiple_of(SECTOR) && at + len <= self.data.len()).then_some(at).ok_or(DiskError)
    }
    fn ram_offset(run: &PhysicalRun) -> usize {
        (run.pa - RAM_PA) as usize
    }
    pub(crate) fn in_flight(&self) -> usize {
        self.queued.iter().flatten().count()
    }
    /// The tags in flight, oldest first.
    pub(crate) fn tags(&self) -> Vec<u16> {
        self.queued.iter().enumerate().filter(|(_, q)| q.is_some()).map(|(t, _)| t as u16).collect()
    }
    /// The disk does request `tag` now: its data moves, its completion can be taken.
    pub(crate) fn complete(&mut self, tag: u16) {
        let q = self.queued[usize::from(tag)].take().expect("in flight");
        let mut bounce = q.bounce;
        let len = q.runs.iter().map(|r| r.len as usize).sum::<usize>() + bounce.as_ref().map_or(0, |b| b.1);
        let result = match q.op {
            DiskOp::Flush if self.failing => Err(DiskError),
            DiskOp::Flush => Ok(()),
            DiskOp::Read | DiskOp::Write => self.at(q.sector, len).map(|mut at| {
                let mut ram = self.ram.0.lock().unwrap();
                for run in &q.runs {
                    let (o, len) = (Self::ram_offset(run), run.len as usize);
                    if q.op == DiskOp::Read {
                        ram[o..o + len].copy_from_slice(&self.data[at..at + len]);
                    } else {
                        self.data[at..at + len].copy_from_slice(&ram[o..o + len]);
                    }
                    at += len;
                }
                if let Some((buffer, len)) = bounce.as_mut() {
                    if q.op == DiskOp::Read {
                        buffer[..*len].copy_from_slice(&self.data[at..at + *len]);
                    } else {
                        self.data[at..at + *len].copy_from_slice(&buffer[..*len]);
                    }
                }
            }),
        };
        let bounce = bounce.map(|b| b.0);
        self.done.push_back(DiskCompletion { owner: q.owner, tag, result, bounce });
    }
    /// Every request in flight done, in tag order.
    pub(crate) fn complete_all(&mut self) {
        for tag in self.tags() {
            self.complete(tag);
        }
    }
}

impl BoardDisk for FakeDisk {
    fn capacity(&self) -> u64 {
        (self.data.len() / SECTOR) as u64
    }
    fn slots(&self) -> usize {
        self.slots
    }
    fn interrupt(&self) -> Option<u32> {
        Some(DISK_INTID)
    }
    fn submit(&mut self, request: DiskRequest<'_>) -> Result<u16, Rejected> {
        let DiskRequest { owner, op, sector, data } = request;
        let (runs, bounce) = match data {
            DiskData::None => (vec![], None),
            DiskData::Guest(runs) => (runs.to_vec(), None),
            DiskData::Bounce { buffer, len } => (vec![], Some((buffer, len))),
        };
        if self.in_flight() == self.slots {
            return Err(Rejected { full: true, bounce: bounce.map(|b| b.0) });
        }
        self.requests.push(match (op, &bounce) {
            (DiskOp::Flush, _) => Request::Flush,
            (DiskOp::Read, None) => Request::ToGuest { sector, runs: runs.clone() },
            (DiskOp::Write, None) => Request::FromGuest { sector, runs: runs.clone() },
            (DiskOp::Read, Some((_, len))) => Request::Read { sector, len: *len },
            (DiskOp::Write, Some((_, len))) => Request::Write { sector, len: *len },
        });
        let tag = match self.queued.iter().position(Option::is_none) {
            Some(t) => t,
            None => {
                self.queued.push(None);
                self.queued.len() - 1
            }
        };
        self.queued[tag] = Some(Queued { owner, op, sector, runs, bounce });
        Ok(tag as u16)
    }
    fn acknowledge_interrupt(&mut self) {
        self.acknowledged += 1;
    }
    fn take_completed(&mut self) -> Option<DiskCompletion> {
        if self.complete_when_polled {
            for tag in self.tags() {
                let owner = self.queued[usize::from(tag)].as_ref().map_or(0, |q| q.owner);
                super::hypervisor::event(format!("disk completes tag {tag} of vm{owner}"));
                self.complete(tag);
            }
        }
        self.done.pop_front()
    }
}

/// A board disk of 64 sectors whose sector n holds bytes of value n, taking `slots`
/// requests at once, and a VM's RAM.
fn disk_of(slots: usize) -> (&'static Mutex<FakeDisk>, FakeRam) {
    let ram = FakeRam::new();
    (leak(Mutex::new(FakeDisk::new(ram.clone(), slots))), ram)
}

fn disk() -> (&'static Mutex<FakeDisk>, FakeRam) {
    disk_of(8)
}

/// Sectors 16..48 of the board's disk, for VM 3, one of `sharing` VMs with a disk.
fn slice_of(disk: &'static Mutex<FakeDisk>, ram: &FakeRam, sharing: usize) -> DiskSliceBackend<FakeDisk, FakeRam> {
    let slice = DiskSlice { offset: 16 * SECTOR as u64, size: 32 * SECTOR as u64 };
    DiskSliceBackend::new(DiskQueue::new(disk), slice, ram.clone(), 3, sharing).unwrap()
}

fn slice(disk: &'static Mutex<FakeDisk>, ram: &FakeRam) -> DiskSliceBackend<FakeDisk, FakeRam> {
    slice_of(disk, ram, 1)
}

fn seg(addr: u64, len: usize) -> Segment {
    Segment { addr, len: len as u32 }
}

/// Starts `request` on `backend` and lets the disk complete every request, chunk after
/// chunk, until it is finished: its result.
fn served(
    backend: &mut DiskSliceBackend<FakeDisk, FakeRam>,
    disk: &'static Mutex<FakeDisk>,
    ram: &FakeRam,
    request: BlockRequest<'_>,
) -> Result<(), BlockError> {
    match backend.start(ram, request, Pending::new(7, RAM_IPA, 0)) {
        Started::Done(result) => return result,
        Started::Busy => panic!("busy"),
        Started::Queued => {}
    }
    loop {
        disk.lock().complete_all();
        let completion = disk.lock().take_completed().expect("a request was in flight");
        if let Some((pending, result)) = backend.completed(completion.tag, completion.result, completion.bounce) {
            assert_eq!(pending.head, 7);
            assert_eq!(backend.in_flight(), 0);
            return result;
        }
    }
}

fn read<'a>(sector: u64, segments: &'a [Segment]) -> BlockRequest<'a> {
    BlockRequest::Read { sector, segments }
}

fn write<'a>(sector: u64, segments: &'a [Segment]) -> BlockRequest<'a> {
    BlockRequest::Write { sector, segments }
}

#[test]
fn a_vms_sector_is_its_slices_and_adjacent_buffers_are_one_run() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    assert_eq!(backend.capacity_sectors(), 32);
    assert_eq!(&backend.device_id()[..13], b"hyp-vm3-disk\0");
    let buffers = [seg(RAM_IPA, SECTOR), seg(RAM_IPA + SECTOR as u64, 2 * SECTOR), seg(RAM_IPA + 0x1000, SECTOR)];
    served(&mut backend, disk, &ram, read(2, &buffers)).unwrap();
    assert_eq!(
        disk.lock().requests,
        vec![Request::ToGuest {
            sector: 18,
            runs: vec![
                PhysicalRun { pa: RAM_PA, len: 3 * SECTOR as u32 },
                PhysicalRun { pa: RAM_PA + 0x1000, len: SECTOR as u32 }
            ]
        }],
        "one request of the board's disk, the first two buffers merged"
    );
    assert_eq!(ram.bytes(RAM_IPA, 3 * SECTOR), [[18u8; SECTOR], [19; SECTOR], [20; SECTOR]].concat());
    assert_eq!(ram.bytes(RAM_IPA + 0x1000, SECTOR), vec![21u8; SECTOR]);

    ram.fill(RAM_IPA + 0x2000, &[0xaa; SECTOR]);
    served(&mut backend, disk, &ram, write(31, &[seg(RAM_IPA + 0x2000, SECTOR)])).unwrap();
    assert_eq!(disk.lock().data[47 * SECTOR..48 * SECTOR], [0xaa; SECTOR], "the slice's last sector");
    assert_eq!(disk.lock().data[48 * SECTOR], 48, "the next VM's first sector is untouched");
}

#[test]
fn buffers_naming_the_same_memory_go_straight_to_the_disk_and_partial_sector_ones_are_bounced() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    // One buffer named twice in a read: two runs of the same memory, handed to the disk as
    // they are (its device writes it twice; no Rust slice of it is made).
    served(&mut backend, disk, &ram, read(0, &[seg(RAM_IPA, SECTOR), seg(RAM_IPA, SECTOR)])).unwrap();
    let run = PhysicalRun { pa: RAM_PA, len: SECTOR as u32 };
    assert_eq!(std::mem::take(&mut disk.lock().requests), vec![Request::ToGuest { sector: 16, runs: vec![run, run] }]);
    assert_eq!(ram.bytes(RAM_IPA, SECTOR), vec![17u8; SECTOR], "the later buffer's data wins, as in order");
    // Written, likewise, twice.
    ram.fill(RAM_IPA + 0x1000, &[0x5a; SECTOR]);
    let twice = [seg(RAM_IPA + 0x1000, SECTOR), seg(RAM_IPA + 0x1000, SECTOR)];
    served(&mut backend, disk, &ram, write(8, &twice)).unwrap();
    let run = PhysicalRun { pa: RAM_PA + 0x1000, len: SECTOR as u32 };
    assert_eq!(
        std::mem::take(&mut disk.lock().requests),
        vec![Request::FromGuest { sector: 24, runs: vec![run, run] }]
    );
    assert_eq!(disk.lock().data[24 * SECTOR..26 * SECTOR], [0x5a; 2 * SECTOR]);
    // Two halves of a sector.
    ram.fill(RAM_IPA + 0x3000, &[1; 256]);
    ram.fill(RAM_IPA + 0x5000, &[2; 256]);
    served(&mut backend, disk, &ram, write(4, &[seg(RAM_IPA + 0x3000, 256), seg(RAM_IPA + 0x5000, 256)])).unwrap();
    assert_eq!(disk.lock().requests, vec![Request::Write { sector: 20, len: SECTOR }]);
    assert_eq!(disk.lock().data[20 * SECTOR..21 * SECTOR], [[1u8; 256], [2; 256]].concat());
}

#[test]
fn a_bounced_request_goes_a_chunk_at_a_time_each_completion_starting_the_next() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    // 160 sectors would not fit the slice: 24 sectors of odd buffers, in a 64 KiB bounce
    // buffer, are one chunk; make the chunks small by using the whole slice twice over.
    let whole = 32 * SECTOR;
    let odd: Vec<Segment> = (0..whole / 256).map(|i| seg(RAM_IPA + 0x10000 + i as u64 * 512, 256)).collect();
    assert_eq!(backend.start(&ram, write(0, &odd), Pending::new(1, RAM_IPA, 0)), Started::Queued);
    assert_eq!(disk.lock().in_flight(), 1, "one chunk at a time");
    assert_eq!(backend.in_flight(), 1);
    // A second bounced request waits for the buffer: it stays on the guest's ring.
    let also_odd = [seg(RAM_IPA, 100), seg(RAM_IPA + 0x800, 412)];
    assert_eq!(backend.start(&ram, write(0, &also_odd), Pending::new(2, RAM_IPA, 0)), Started::Busy);
    disk.lock().complete_all();
    let c = disk.lock().take_completed().unwrap();
    assert_eq!(backend.completed(c.tag, c.result, c.bounce).map(|(p, r)| (p.head, r)), Some((1, Ok(()))));
    assert_eq!(disk.lock().requests, vec![Request::Write { sector: 16, len: whole }], "16 KiB: one chunk");
    assert_eq!(backend.in_flight(), 0);

    // 64 sectors through a 64 KiB buffer, in a slice of the whole disk: two chunks of 128
    // sectors would not fit; 96 sectors of half-sector buffers are one and a half.
    let (disk, ram) = disk_of(8);
    let mut backend =
        DiskSliceBackend::new(DiskQueue::new(disk), DiskSlice { offset: 0, size: 0 }, ram.clone(), 0, 1).unwrap();
    let halves: Vec<Segment> = (0..128).map(|i| seg(RAM_IPA + 0x20000 + i * 1024, 256)).collect();
    assert_eq!(backend.start(&ram, read(0, &halves), Pending::new(3, RAM_IPA, 0)), Started::Queued);
    let mut chunks = 0;
    let finished = loop {
        assert_eq!(disk.lock().in_flight(), 1, "one chunk at a time");
        let tag = disk.lock().tags()[0];
        disk.lock().complete(tag);
        chunks += 1;
        let c = disk.lock().take_completed().unwrap();
        if let Some(done) = backend.completed(c.tag, c.result, c.bounce) {
            break done;
        }
    };
    assert_eq!((finished.0.head, finished.1), (3, Ok(())));
    assert_eq!(chunks, 1, "64 sectors fit one 64 KiB chunk");
    assert_eq!(ram.bytes(RAM_IPA + 0x20000 + 127 * 1024, 256), vec![63u8; 256], "the last half sector");
}

#[test]
fn a_request_beyond_the_slice_or_of_part_of_a_sector_is_refused_before_the_disk() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    let one = [seg(RAM_IPA, SECTOR)];
    assert_eq!(
        served(&mut backend, disk, &ram, read(32, &one)),
        Err(BlockError::OutOfRange { sector: 32, sectors: 1 })
    );
    assert_eq!(
        served(&mut backend, disk, &ram, write(u64::MAX, &one)),
        Err(BlockError::OutOfRange { sector: u64::MAX, sectors: 1 })
    );
    assert!(served(&mut backend, disk, &ram, read(0, &[seg(RAM_IPA, 100)])).is_err());
    assert!(disk.lock().requests.is_empty(), "{:?}", disk.lock().requests);
}

#[test]
fn a_buffer_outside_the_vms_ram_is_a_memory_error_and_no_request() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    let outside = RAM_IPA + RAM_SIZE as u64;
    let err = served(&mut backend, disk, &ram, read(0, &[seg(RAM_IPA, SECTOR), seg(outside, SECTOR)])).unwrap_err();
    assert!(matches!(err, BlockError::Memory(GuestMemoryError { addr, .. }) if addr == outside), "{err:?}");
    assert!(served(&mut backend, disk, &ram, write(0, &[seg(u64::MAX - 100, SECTOR)])).is_err());
    assert!(disk.lock().requests.is_empty(), "{:?}", disk.lock().requests);
}

/// A VM's RAM of `PAGES` pages of 4 KiB whose physical layout is not its IPA layout: page
/// `p` of the IPA space is physical page `layout[p]` (`None`: a page the VM does not own, a
/// hole), for the translation of a request's runs.
struct PagedRam {
    layout: Vec<Option<u64>>,
    /// `contiguous` calls, to see that a run of RAM that is one region costs one.
    calls: std::cell::Cell<usize>,
}

const PAGE: u64 = 4096;
const PAGED_PA: u64 = 0x9000_0000;

impl PagedRam {
    fn new(layout: Vec<Option<u64>>) -> PagedRam {
        PagedRam { layout, calls: Default::default() }
    }
    fn page_pa(&self, page: u64) -> Option<u64> {
        self.layout.get(usize::try_from(page).ok()?).copied().flatten().map(|p| PAGED_PA + p * PAGE)
    }
    /// The IPA a physical address of this RAM is the view of.
    fn ipa_of(&self, pa: u64) -> Option<u64> {
        let page = (pa.checked_sub(PAGED_PA)?) / PAGE;
        let i = self.layout.iter().position(|p| *p == Some(page))?;
        Some(RAM_IPA + i as u64 * PAGE + pa % PAGE)
    }
}

impl GuestMemory for PagedRam {
    fn read(&self, addr: u64, _: &mut [u8]) -> Result<(), GuestMemoryError> {
        Err(GuestMemoryError { addr, len: 0 })
    }
    fn write(&self, addr: u64, _: &[u8]) -> Result<(), GuestMemoryError> {
        Err(GuestMemoryError { addr, len: 0 })
    }
    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        self.physical(addr, len).map(|_| ())
    }
}

impl PhysicalRam for PagedRam {
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        match self.contiguous(addr, len) {
            Ok((pa, n)) if n == len => Ok(pa),
            _ => Err(GuestMemoryError { addr, len }),
        }
    }
    fn contiguous(&self, addr: u64, len: u64) -> Result<(u64, u64), GuestMemoryError> {
        self.calls.set(self.calls.get() + 1);
        let err = GuestMemoryError { addr, len };
        let offset = addr.checked_sub(RAM_IPA).ok_or(err)?;
        let mut page = offset / PAGE;
        let pa = self.page_pa(page).ok_or(err)? + offset % PAGE;
        let mut n = PAGE - offset % PAGE;
        while n < len && self.page_pa(page + 1) == Some(pa + n) {
            page += 1;
            n += PAGE;
        }
        Ok((pa, n.min(len)))
    }
}

fn plan_on(
    ram: &PagedRam,
    segments: &[Segment],
) -> (Result<vdev::virtio::bounce::Route, GuestMemoryError>, Vec<PhysicalRun>) {
    plan_with(ram, segments, vdev::virtio::block::SEG_MAX as usize)
}

fn plan_with(
    ram: &PagedRam,
    segments: &[Segment],
    cap: usize,
) -> (Result<vdev::virtio::bounce::Route, GuestMemoryError>, Vec<PhysicalRun>) {
    let mut physical = Vec::with_capacity(cap);
    let route = crate::virtio::disk_slice::physical_runs(ram, segments, &mut physical);
    assert_eq!(physical.capacity(), cap, "nothing allocated");
    (route, physical)
}

#[test]
fn a_run_of_ram_that_is_one_region_is_translated_once_and_pages_apart_in_memory_stay_apart() {
    use vdev::virtio::bounce::Route;
    // Linear RAM: Linux's 1 MiB request of 254 segments, some adjacent, in 85 runs: one
    // translation each, not one a page.
    let linear = PagedRam::new((0..1024).map(Some).collect());
    let pages: Vec<_> = (0..254u64).map(|i| seg(RAM_IPA + (i + i / 3) * PAGE, PAGE as usize)).collect();
    let (route, physical) = plan_on(&linear, &pages);
    assert_eq!((route, physical.len(), linear.calls.get()), (Ok(Route::Direct), 85, 85));
    // A 64 KiB segment over pages swapped pairwise in physical memory: a run per page, the
    // pages in the request's order.
    let swapped = PagedRam::new((0..32).map(|p| Some(p ^ 1)).collect());
    let (route, physical) = plan_on(&swapped, &[seg(RAM_IPA, 16 * PAGE as usize)]);
    assert_eq!(route, Ok(Route::Direct));
    assert_eq!(physical.len(), 16);
    assert_eq!(physical[0], PhysicalRun { pa: PAGED_PA + PAGE, len: PAGE as u32 });
    assert_eq!(physical[1], PhysicalRun { pa: PAGED_PA, len: PAGE as u32 });
    // Two segments apart in the IPA space whose pages are adjacent physically: one run.
    let (route, physical) = plan_on(&swapped, &[seg(RAM_IPA + PAGE, PAGE as usize), seg(RAM_IPA, 512)]);
    assert_eq!((route, physical), (Ok(Route::Direct), vec![PhysicalRun { pa: PAGED_PA, len: PAGE as u32 + 512 }]));
    // A segment across a page the VM does not own: refused, with the hole's address.
    let holed = PagedRam::new((0..8).map(|p| (p != 3).then_some(p)).collect());
    let (route, physical) = plan_on(&holed, &[seg(RAM_IPA + 2 * PAGE, 2 * PAGE as usize)]);
    assert_eq!(route, Err(GuestMemoryError { addr: RAM_IPA + 3 * PAGE, len: PAGE }));
    assert!(physical.iter().all(|r| r.pa + u64::from(r.len) <= PAGED_PA + 3 * PAGE), "nothing of the hole");
    // A piece of a sector on each side of a physical break: not whole sectors, bounced.
    let (route, physical) = plan_on(&swapped, &[seg(RAM_IPA + PAGE - 256, 512)]);
    assert_eq!((route, physical.len()), (Ok(Route::Bounce), 0));
}

#[test]
fn only_segments_that_follow_each_other_are_merged_and_a_request_of_too_many_runs_is_bounced() {
    use vdev::virtio::bounce::Route;
    let linear = PagedRam::new((0..1024).map(Some).collect());
    // The same pages in descending order follow each other in neither space.
    let down: Vec<_> = (0..254u64).rev().map(|i| seg(RAM_IPA + i * PAGE, PAGE as usize)).collect();
    let (route, physical) = plan_on(&linear, &down);
    assert_eq!((route, physical.len(), linear.calls.get()), (Ok(Route::Direct), 254, 254));
    // A segment inside an earlier one's memory is not merged into it.
    let inside = [seg(RAM_IPA + PAGE, 1024), seg(RAM_IPA, 2 * PAGE as usize), seg(RAM_IPA + 2 * PAGE, 512)];
    let want =
        vec![PhysicalRun { pa: PAGED_PA + PAGE, len: 1024 }, PhysicalRun { pa: PAGED_PA, len: 2 * PAGE as u32 + 512 }];
    assert_eq!(plan_on(&linear, &inside), (Ok(Route::Direct), want));
    // Three runs where the list holds two: bounced, the list left empty and not grown.
    let three = [seg(RAM_IPA, 512), seg(RAM_IPA + 1024, 512), seg(RAM_IPA + 512, 512)];
    assert_eq!(plan_with(&linear, &three, 2), (Ok(Route::Bounce), vec![]));
    // Three adjacent segments are one run, which a list of one holds.
    let adjacent = [seg(RAM_IPA, 512), seg(RAM_IPA + 512, 512), seg(RAM_IPA + 1024, 512)];
    assert_eq!(plan_with(&linear, &adjacent, 1), (Ok(Route::Direct), vec![PhysicalRun { pa: PAGED_PA, len: 1536 }]));
    // Pages swapped pairwise: a segment of two pages is two runs, 254 of them 508.
    let swapped = PagedRam::new((0..1024).map(|p| Some(p ^ 1)).collect());
    let pairs: Vec<_> = (0..254u64).map(|i| seg(RAM_IPA + 4 * i * PAGE, 2 * PAGE as usize)).collect();
    assert_eq!(plan_on(&swapped, &pairs), (Ok(Route::Bounce), vec![]));
    // A segment that is not whole sectors after runs already translated: bounced, nothing kept.
    let late = [seg(RAM_IPA, 512), seg(RAM_IPA + PAGE, 512), seg(RAM_IPA + 2 * PAGE, 513)];
    assert_eq!(plan_on(&linear, &late), (Ok(Route::Bounce), vec![]));
    assert_eq!(plan_on(&linear, &[]), (Ok(Route::Direct), vec![]));
}

#[test]
fn a_descriptor_over_memory_the_vm_does_not_own_fails_the_request_before_the_disk() {
    let (disk, _) = disk();
    let holed = PagedRam::new((0..8).map(|p| (p != 3).then_some(p)).collect());
    let slice = DiskSlice { offset: 0, size: 0 };
    let mut backend = DiskSliceBackend::new(DiskQueue::new(disk), slice, holed, 0, 1).unwrap();
    let across = [seg(RAM_IPA, 512), seg(RAM_IPA + 3 * PAGE - 512, 1024)];
    let ram = PagedRam::new(vec![]);
    let started = backend.start(&ram, read(0, &across), Pending::new(1, RAM_IPA, 0));
    assert_eq!(
        started,
        Started::Done(Err(BlockError::Memory(GuestMemoryError { addr: RAM_IPA + 3 * PAGE, len: 512 })))
    );
    assert!(disk.lock().requests.is_empty());
    assert_eq!(backend.in_flight(), 0);
}

proptest::proptest! {
    /// Whatever the segments (overlapping ones among them) and the RAM's physical layout (a
    /// permutation of its pages, with holes): a direct request's physical runs are whole
    /// sectors, at most `SEG_MAX`, and their bytes, in order, are the views of exactly the
    /// segments' bytes, in order (so no run spans pages that are not physically adjacent,
    /// nor a page of no one's); a refusal names a byte of a segment that is not the VM's.
    #[test]
    fn physical_runs_are_exactly_the_requests_bytes(
        shuffled in proptest::strategy::Strategy::prop_shuffle(proptest::strategy::Just((0u64..16).collect::<Vec<_>>())),
        linear in proptest::bool::ANY,
        holes in proptest::collection::vec(proptest::bool::weighted(0.1), 16),
        raw in proptest::collection::vec((0u64..128, 1u64..20), 1..12),
    ) {
        let order = if linear { (0..16).collect() } else { shuffled };
        let layout: Vec<Option<u64>> = order.iter().zip(&holes).map(|(&p, &h)| (!h).then_some(p)).collect();
        let ram = PagedRam::new(layout);
        let segments: Vec<Segment> = raw.iter().map(|&(at, n)| seg(RAM_IPA + at * 512, (n * 512) as usize)).collect();
        let (route, physical) = plan_on(&ram, &segments);
        match route {
            Ok(vdev::virtio::bounce::Route::Direct) => {
                let mut got = Vec::new();
                for r in &physical {
                    proptest::prop_assert_eq!(r.len % 512, 0);
                    for s in 0..u64::from(r.len) / 512 {
                        got.push(ram.ipa_of(r.pa + s * 512));
                    }
                }
                let want: Vec<Option<u64>> =
                    segments.iter().flat_map(|s| (0..u64::from(s.len) / 512).map(move |i| Some(s.addr + i * 512))).collect();
                proptest::prop_assert_eq!(got, want);
            }
            Ok(vdev::virtio::bounce::Route::Bounce) => {
                proptest::prop_assert_eq!(
                    vdev::virtio::bounce::route(&segments),
                    vdev::virtio::bounce::Route::Bounce
                );
            }
            Err(e) => {
                let owned = |ipa: u64| ram.physical(ipa, 1).is_ok();
                proptest::prop_assert!(!owned(e.addr), "{:#x} is the VM's", e.addr);
                proptest::prop_assert!(segments.iter().any(|s| s.addr <= e.addr && e.addr < s.addr + u64::from(s.len)));
            }
        }
    }
}

#[test]
fn a_failing_disk_is_an_io_error_for_the_guest() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    disk.lock().failing = true;
    assert_eq!(served(&mut backend, disk, &ram, read(0, &[seg(RAM_IPA, SECTOR)])), Err(BlockError::Io));
    let odd = [seg(RAM_IPA, 100), seg(RAM_IPA + 512, 412)];
    assert_eq!(served(&mut backend, disk, &ram, write(0, &odd)), Err(BlockError::Io));
    assert_eq!(served(&mut backend, disk, &ram, BlockRequest::Flush), Err(BlockError::Io));
    disk.lock().failing = false;
    assert_eq!(served(&mut backend, disk, &ram, BlockRequest::Flush), Ok(()));
    assert_eq!(backend.in_flight(), 0);
}

#[test]
fn each_vm_has_its_share_of_the_board_queue_and_a_full_queue_leaves_the_request_for_later() {
    let (disk, ram) = disk_of(4);
    // Two VMs share the board's four slots: two each.
    let mut a = slice_of(disk, &ram, 2);
    let mut b = slice_of(disk, &ram, 2);
    assert_eq!((a.share(), b.share()), (2, 2));
    let one = [seg(RAM_IPA, SECTOR)];
    for head in 0..2 {
        assert_eq!(a.start(&ram, read(0, &one), Pending::new(head, RAM_IPA, 0)), Started::Queued);
    }
    assert_eq!(a.start(&ram, read(0, &one), Pending::new(2, RAM_IPA, 0)), Started::Busy, "a's share is in flight");
    for head in 0..2 {
        assert_eq!(b.start(&ram, read(0, &one), Pending::new(head, RAM_IPA, 0)), Started::Queued, "b's is its own");
    }
    // A board queue full for another reason (fewer slots than shares): busy, not failed.
    let mut c = slice_of(disk, &ram, 2);
    assert_eq!(c.start(&ram, read(0, &one), Pending::new(0, RAM_IPA, 0)), Started::Busy);
    let tag = disk.lock().tags()[0];
    disk.lock().complete(tag);
    let done = disk.lock().take_completed().unwrap();
    assert!(a.completed(done.tag, done.result, done.bounce).is_some());
    assert_eq!(c.start(&ram, read(0, &one), Pending::new(0, RAM_IPA, 0)), Started::Queued, "room again");
}

#[test]
fn a_slice_that_does_not_fit_the_board_disk_is_refused_and_size_zero_is_the_rest() {
    let (disk, ram) = disk();
    let queue = DiskQueue::new(disk);
    let refused = DiskSliceBackend::new(queue, DiskSlice { offset: 60 * 512, size: 8 * 512 }, ram.clone(), 0, 1);
    let err = refused.err().unwrap();
    assert_eq!(err, DiskSliceError::OutsideDisk { first: 60, count: 8, capacity: 64 });
    assert_eq!(
        err.to_string(),
        "the VM's `disk` slice (sectors 60..68) does not fit in the board's disk of 64 sectors"
    );
    assert!(DiskSliceBackend::new(queue, DiskSlice { offset: 64 * 512, size: 0 }, ram.clone(), 0, 1).is_err());
    let rest = DiskSliceBackend::new(queue, DiskSlice { offset: 40 * 512, size: 0 }, ram, 0, 1).unwrap();
    assert_eq!(rest.capacity_sectors(), 24);
}

thread_local! {
    pub(crate) static LINES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    static FRAMES: RefCell<Vec<(usize, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
}

pub struct FakeEnv;

/// A device's line: its levels, and with a shadow page, each level among the page's events
/// (what the guest could read when the line changed).
#[derive(Default)]
pub struct Level(Arc<StdMutex<Vec<bool>>>, Option<Arc<FakePage>>);

impl InterruptLine for Level {
    fn set_level(&mut self, high: bool) {
        self.0.lock().unwrap().push(high);
        if let Some(page) = &self.1 {
            page.events.lock().unwrap().push(format!("line {high}"));
        }
    }
}

/// A VM console that keeps what the guest wrote.
pub struct Recorded(pub(crate) Arc<StdMutex<Vec<u8>>>);

impl vdev::pl011::ConsoleOutput for Recorded {
    fn put(&mut self, byte: u8) {
        self.0.lock().unwrap().push(byte);
    }
}

thread_local! {
    /// What every VM console of this thread received.
    pub(crate) static CONSOLE: Arc<StdMutex<Vec<u8>>> = Arc::default();
}

thread_local! {
    /// The fake image's RAM on this thread: every device of its VMs and its board disk reach
    /// this one (a test is one board).
    static IMAGE_RAM: FakeRam = FakeRam::new();
    static BOARD_DISK: &'static Mutex<FakeDisk> = leak(Mutex::new(FakeDisk::new(image_ram(), 8)));
}

/// The RAM of the fake image's VMs on this thread.
pub(crate) fn image_ram() -> FakeRam {
    IMAGE_RAM.with(FakeRam::clone)
}

/// The board disk the fake image has on this thread: 64 sectors, 8 requests at once.
pub(crate) fn board_disk() -> &'static Mutex<FakeDisk> {
    BOARD_DISK.with(|d| *d)
}

/// The fake image's board: its console records, its disk is `board_disk`, its lines go to
/// `LINES`.
pub struct FakeBoard;

/// The fake board's NIC: what it sends goes to this thread's `SENT`.
pub struct FakeNic;

thread_local! {
    /// The frames this thread sent out of the fake board's NIC.
    pub(crate) static SENT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

impl crate::network::BoardNic for FakeNic {
    fn send(&mut self, frame: &[u8]) -> bool {
        SENT.with(|s| s.borrow_mut().push(frame.to_vec()));
        true
    }
    fn acknowledge_interrupt(&mut self) {}
    fn take_back_sent(&mut self) {}
    fn receive(&mut self) -> Option<crate::network::ReceivedFrame> {
        None
    }
    fn give_back(&mut self, _: crate::network::ReceivedFrame) -> bool {
        true
    }
    fn interrupt(&self) -> Option<u32> {
        None
    }
}

thread_local! {
    /// What the user of this thread's board typed and the hypervisor has not taken yet.
    pub(crate) static TYPED: RefCell<std::collections::VecDeque<u8>> = RefCell::default();
    /// The focus of this thread's board.
    static FOCUS: &'static crate::focus::Focus = super::leak(crate::focus::Focus::new());
}

impl crate::board::Board for FakeBoard {
    type Disk = FakeDisk;
    type Console = Recorded;
    type Nic = FakeNic;
    fn disk() -> Option<&'static Mutex<FakeDisk>> {
        Some(board_disk())
    }
    fn nic() -> Option<&'static Mutex<FakeNic>> {
        static NIC: Mutex<FakeNic> = Mutex::new(FakeNic);
        Some(&NIC)
    }
    fn vm_console(_: usize, _: &'static str) -> Recorded {
        Recorded(CONSOLE.with(Arc::clone))
    }
    fn print(line: fmt::Arguments<'_>) {
        LINES.with(|l| l.borrow_mut().push(line.to_string()));
    }
    fn write(text: fmt::Arguments<'_>) {
        Self::print(text);
    }
    fn focus() -> &'static crate::focus::Focus {
        FOCUS.with(|f| *f)
    }
    fn enable_console_input() {}
    fn take_console_input(buf: &mut [u8]) -> usize {
        TYPED.with(|t| {
            let mut typed = t.borrow_mut();
            let n = typed.len().min(buf.len());
            typed.drain(..n).zip(buf.iter_mut()).for_each(|(b, out)| *out = b);
            n
        })
    }
}

impl VmEnv for FakeEnv {
    type Arch = crate::fake::FakeArch;
    type Board = FakeBoard;
    type Ram = FakeRam;
    type Line = Level;
    fn guest_ram(ipa: u64, pa: u64, size: u64, _: Arc<crate::first_touch::FirstTouch>) -> FakeRam {
        assert_eq!((pa, size as usize), (RAM_PA, RAM_SIZE), "the fake image has one RAM");
        assert!(ipa == RAM_IPA || ipa == RAM_PA, "at the guest's RAM address, or identity-mapped: {ipa:#x}");
        image_ram().at(ipa)
    }
    fn interrupt_line(_: &crate::shared_vgic::SharedVgic<crate::fake::FakeArch>, _: vgic::IntId) -> Level {
        Level::default()
    }
    fn forward_frame(from: usize, frame: &[u8]) {
        FRAMES.with(|f| f.borrow_mut().push((from, frame.to_vec())));
    }
    /// The fake image's RAM is zeroed when made: every block is done.
    fn zero_on_first_touch(
        _: hyp_core::cap::CapId,
        range: stage2::IpaRange,
        _: crate::first_touch::Fill,
    ) -> Result<u64, hyp_core::cap::CapError> {
        Ok(range.size())
    }
}

type BlockSlot = VirtioSlot<VirtioBlock<DiskSliceBackend<FakeDisk, FakeRam>>, FakeEnv>;

fn block_slot() -> Arc<BlockSlot> {
    let (disk, ram) = disk();
    block_slot_on(disk, &ram, 3, 1).0
}

/// The disk device of VM `vm` over sectors 16..48 of `disk`, one of `sharing` VMs with a
/// disk, and its interrupt line's levels.
fn block_slot_on(
    disk: &'static Mutex<FakeDisk>,
    ram: &FakeRam,
    vm: usize,
    sharing: usize,
) -> (Arc<BlockSlot>, Arc<StdMutex<Vec<bool>>>) {
    block_slot_with(disk, ram, vm, sharing, None)
}

/// As `block_slot_on`, its window at `shadow` in a shadow page if given.
fn block_slot_with(
    disk: &'static Mutex<FakeDisk>,
    ram: &FakeRam,
    vm: usize,
    sharing: usize,
    shadow: Option<(Arc<FakePage>, usize)>,
) -> (Arc<BlockSlot>, Arc<StdMutex<Vec<bool>>>) {
    let line = Level(Arc::default(), shadow.as_ref().map(|(page, _)| Arc::clone(page)));
    let levels = Arc::clone(&line.0);
    let setup = SlotSetup {
        vm,
        name: "blk",
        ram: ram.clone(),
        signal: Signal::Line(line),
        log: Arc::new(GuestLogLimit::new()),
        work: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        shadow: shadow.map(|(page, offset)| WindowPage { page, offset }),
    };
    let slice = DiskSlice { offset: 16 * SECTOR as u64, size: 32 * SECTOR as u64 };
    let backend = DiskSliceBackend::new(DiskQueue::new(disk), slice, ram.clone(), vm, sharing).unwrap();
    (Arc::new(VirtioSlot::new(setup, VirtioBlock::new(backend), 0)), levels)
}

/// A guest's virtio-blk driver (virtio 1.2 3.1.1, 2.7.13) over the fake RAM: one queue of 16
/// descriptors at `base`, its data after it; `reg` writes a register of the device.
pub(crate) struct BlkGuest {
    reg: Box<dyn Fn(u64, u32)>,
    ram: FakeRam,
    base: u64,
    avail_idx: u16,
    next_desc: u16,
    next_data: u64,
}

const QUEUE: u16 = 16;

/// A driver's initialisation (virtio 1.2 3.1.1) through `reg`, a register write of the
/// device: VERSION_1 only, and queue `queue` of `QUEUE` descriptors at `base` (its available
/// ring at +0x200, its used ring at +0x400, zeroed), ready.
fn driver_ready(reg: &dyn Fn(u64, u32), ram: &FakeRam, base: u64, queue: u32) {
    use vdev::virtio::features::status::*;
    use vdev::virtio::transport::regs::*;
    ram.fill(base, &[0; 0x1000]);
    reg(STATUS, 0);
    reg(STATUS, ACKNOWLEDGE | DRIVER);
    reg(DRIVER_FEATURES_SEL, 1);
    reg(DRIVER_FEATURES, 1); // VERSION_1 only
    reg(STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK);
    reg(QUEUE_SEL, queue);
    reg(QUEUE_NUM, u32::from(QUEUE));
    for (low, addr) in [(QUEUE_DESC_LOW, base), (QUEUE_DRIVER_LOW, base + 0x200), (QUEUE_DEVICE_LOW, base + 0x400)] {
        reg(low, addr as u32);
        reg(low + 4, (addr >> 32) as u32);
    }
    reg(QUEUE_READY, 1);
    reg(STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK | DRIVER_OK);
}

/// A guest's virtio console driver (virtio 1.2 5.3) through `reg`, its transmit queue at
/// `base`, writes `len` bytes of `byte` as one chain and notifies.
pub(crate) fn console_write(reg: &dyn Fn(u64, u32), ram: &FakeRam, base: u64, len: u32, byte: u8) {
    use vdev::virtio::console::TRANSMITQ;
    driver_ready(reg, ram, base, u32::from(TRANSMITQ));
    let data = base + 0x1000;
    ram.fill(data, &vec![byte; len as usize]);
    let mut descriptor = data.to_le_bytes().to_vec();
    descriptor.extend_from_slice(&len.to_le_bytes());
    // Flags 0 (device-readable, the last of its chain), next 0.
    descriptor.extend_from_slice(&[0; 4]);
    ram.fill(base, &descriptor);
    // The available ring: flags 0, idx 1, ring[0] = descriptor 0.
    ram.fill(base + 0x200, &[0, 0, 1, 0, 0, 0]);
    reg(vdev::virtio::transport::regs::QUEUE_NOTIFY, u32::from(TRANSMITQ));
}

impl BlkGuest {
    pub(crate) fn new(reg: Box<dyn Fn(u64, u32)>, ram: FakeRam, base: u64) -> BlkGuest {
        driver_ready(&*reg, &ram, base, 0);
        BlkGuest { reg, ram, base, avail_idx: 0, next_desc: 0, next_data: base + 0x1000 }
    }

    fn alloc(&mut self, len: usize, fill: u8) -> u64 {
        let at = self.next_data;
        self.ram.fill(at, &vec![fill; len]);
        self.next_data += (len as u64 + 15) & !15;
        at
    }

    /// A request of `len` bytes at `sector` (read or write) made available, not notified:
    /// its head, its data and its status byte.
    pub(crate) fn request(&mut self, write: bool, sector: u64, len: usize) -> (u16, u64, u64) {
        let mut header = (if write { 1u32 } else { 0 }).to_le_bytes().to_vec();
        header.extend_from_slice(&[0; 4]);
        header.extend_from_slice(&sector.to_le_bytes());
        let h = self.alloc(16, 0);
        self.ram.fill(h, &header);
        let data = self.alloc(len, 0xee);
        let status = self.alloc(1, 0xff);
        let head = self.next_desc;
        let bufs = [(h, 16u32, 0u16), (data, len as u32, if write { 0 } else { 2 }), (status, 1, 2)];
        for (k, (addr, len, flags)) in bufs.iter().enumerate() {
            let index = (head + k as u16) % QUEUE;
            let last = k == bufs.len() - 1;
            let mut d = addr.to_le_bytes().to_vec();
            d.extend_from_slice(&len.to_le_bytes());
            d.extend_from_slice(&(flags | if last { 0 } else { 1 }).to_le_bytes());
            d.extend_from_slice(&(if last { 0 } else { (index + 1) % QUEUE }).to_le_bytes());
            self.ram.fill(self.base + 16 * u64::from(index), &d);
        }
        self.next_desc = (head + 3) % QUEUE;
        let slot = u64::from(self.avail_idx % QUEUE);
        self.ram.fill(self.base + 0x200 + 4 + 2 * slot, &head.to_le_bytes());
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.ram.fill(self.base + 0x200 + 2, &self.avail_idx.to_le_bytes());
        (head, data, status)
    }

    pub(crate) fn notify(&self) {
        (self.reg)(vdev::virtio::transport::regs::QUEUE_NOTIFY, 0);
    }

    /// The used ring: (head, length) of each element published.
    pub(crate) fn used(&self) -> Vec<(u32, u32)> {
        let idx = u16::from_le_bytes(self.ram.bytes(self.base + 0x402, 2).try_into().unwrap());
        (0..idx)
            .map(|i| {
                let e = self.ram.bytes(self.base + 0x404 + 8 * u64::from(i % QUEUE), 8);
                (u32::from_le_bytes(e[..4].try_into().unwrap()), u32::from_le_bytes(e[4..].try_into().unwrap()))
            })
            .collect()
    }

    pub(crate) fn byte(&self, at: u64) -> u8 {
        self.ram.bytes(at, 1)[0]
    }
}

/// A guest of `slot`'s device, its rings at `base`.
fn guest_of(slot: &Arc<BlockSlot>, ram: &FakeRam, base: u64) -> BlkGuest {
    let slot = Arc::clone(slot);
    let reg = move |offset, value| {
        slot.with_device(|d, ram| d.write(ram, offset, 4, u64::from(value))).unwrap().unwrap();
    };
    BlkGuest::new(Box::new(reg), ram.clone(), base)
}

/// What the board disk's interrupt does: every completion to its VM's device.
fn finish_completions(disk: &'static Mutex<FakeDisk>, devices: &[(usize, &Arc<BlockSlot>)]) {
    while let Some(c) = DiskQueue::new(disk).take_completed() {
        let (_, slot) = devices.iter().find(|(vm, _)| *vm == c.owner).expect("a device of the owner");
        slot.disk_completed(c);
    }
}

#[test]
fn no_lock_is_held_while_a_request_is_in_flight_and_other_requests_and_completions_go_on() {
    let (disk, ram) = disk();
    let (a, a_line) = block_slot_on(disk, &ram, 3, 2);
    let (b, _) = block_slot_on(disk, &ram, 4, 2);
    let mut guest_a = guest_of(&a, &ram, RAM_IPA + 0x10_0000);
    let mut guest_b = guest_of(&b, &ram, RAM_IPA + 0x20_0000);

    let (head_a, data_a, status_a) = guest_a.request(false, 1, SECTOR);
    guest_a.notify();
    assert_eq!(disk.lock().in_flight(), 1, "queued on the board's disk");
    assert!(guest_a.used().is_empty(), "the notify returned before the disk completed it");
    assert_eq!(guest_a.byte(status_a), 0xff);
    assert!(a.device.try_lock().is_some(), "the device's lock is not held while its request is in flight");
    assert!(disk.try_lock().is_some(), "nor is the board disk's");

    // The second VM's request is queued and completes while the first is outstanding.
    let (head_b, data_b, status_b) = guest_b.request(true, 2, SECTOR);
    ram.fill(data_b, &[0x5b; SECTOR]);
    guest_b.notify();
    assert_eq!(disk.lock().in_flight(), 2);
    let tag_b = disk.lock().tags()[1];
    disk.lock().complete(tag_b);
    finish_completions(disk, &[(3, &a), (4, &b)]);
    assert_eq!(guest_b.used(), [(u32::from(head_b), 1)]);
    assert_eq!(guest_b.byte(status_b), 0);
    assert_eq!(disk.lock().data[18 * SECTOR..19 * SECTOR], [0x5b; SECTOR]);
    assert!(guest_a.used().is_empty(), "the first is still in flight");

    disk.lock().complete_all();
    finish_completions(disk, &[(3, &a), (4, &b)]);
    assert_eq!(guest_a.used(), [(u32::from(head_a), SECTOR as u32 + 1)]);
    assert_eq!(guest_a.byte(status_a), 0);
    assert_eq!(ram.bytes(data_a, SECTOR), vec![17u8; SECTOR], "sector 1 of the slice");
    assert_eq!(a_line.lock().unwrap().last(), Some(&true), "the device's interrupt raised by the completion");
    assert_eq!(a.in_flight() + b.in_flight(), 0);
}

#[test]
fn a_failed_board_request_fails_its_chain_only() {
    let (disk, ram) = disk();
    let (a, _) = block_slot_on(disk, &ram, 3, 1);
    let mut guest = guest_of(&a, &ram, RAM_IPA + 0x10_0000);
    let first = guest.request(false, 1, SECTOR);
    let second = guest.request(false, 2, SECTOR);
    guest.notify();
    let tags = disk.lock().tags();
    disk.lock().failing = true;
    disk.lock().complete(tags[1]);
    disk.lock().failing = false;
    disk.lock().complete(tags[0]);
    finish_completions(disk, &[(3, &a)]);
    assert_eq!(guest.used(), [(u32::from(second.0), 1), (u32::from(first.0), SECTOR as u32 + 1)]);
    assert_eq!(guest.byte(second.2), vdev::virtio::block::VIRTIO_BLK_S_IOERR);
    assert_eq!(guest.byte(first.2), 0);
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines.iter().any(|l| l.starts_with("hypervisor: vm3 virtio-blk: ") && l.contains("failed")), "{lines:?}");
}

#[test]
fn a_guest_at_its_share_waits_on_its_ring_and_another_vm_still_gets_the_disk() {
    // Four slots, two VMs: two requests each in flight at most.
    let (disk, ram) = disk_of(4);
    let (a, _) = block_slot_on(disk, &ram, 3, 2);
    let (b, _) = block_slot_on(disk, &ram, 4, 2);
    let mut guest_a = guest_of(&a, &ram, RAM_IPA + 0x10_0000);
    let mut guest_b = guest_of(&b, &ram, RAM_IPA + 0x20_0000);
    let heads: Vec<_> = (0..3).map(|i| guest_a.request(false, i, SECTOR).0).collect();
    guest_a.notify();
    assert_eq!(disk.lock().in_flight(), 2, "a's share");
    assert!(a.waiting(), "the other chain waits on a's ring");
    guest_b.request(false, 5, SECTOR);
    guest_b.notify();
    assert_eq!(disk.lock().in_flight(), 3, "b is not held back by a guest that never reads its used ring");
    // A completion of a's takes its waiting chain.
    let tag = disk.lock().tags()[0];
    disk.lock().complete(tag);
    finish_completions(disk, &[(3, &a), (4, &b)]);
    assert_eq!(guest_a.used(), [(u32::from(heads[0]), SECTOR as u32 + 1)]);
    assert_eq!(a.in_flight(), 2, "the chain that waited is in flight now");
    assert!(!a.waiting());
}

#[test]
fn a_shut_down_device_frees_its_requests_without_touching_the_vms_ram() {
    let (disk, ram) = disk();
    let (a, _) = block_slot_on(disk, &ram, 3, 1);
    let mut guest = guest_of(&a, &ram, RAM_IPA + 0x10_0000);
    let (_, _, status) = guest.request(false, 1, SECTOR);
    guest.notify();
    a.shut_down();
    assert_eq!(a.in_flight(), 1);
    disk.lock().complete_all();
    finish_completions(disk, &[(3, &a)]);
    assert_eq!(a.in_flight(), 0, "freed");
    assert!(guest.used().is_empty(), "no used element");
    assert_eq!(guest.byte(status), 0xff, "no status byte");
}

#[test]
fn a_devices_window_answers_and_logs_what_the_guest_got_wrong_with_its_vm() {
    let window = Window(block_slot());
    assert_eq!(window.read(0, 0, AccessWidth::Word), Ok(0x7472_6976), "MagicValue, virtio 1.2 4.2.2");
    assert_eq!(window.read(0, 4, AccessWidth::Word), Ok(2), "a modern device");
    // GuestPageSize is a legacy register: ignored on a modern device, with a line.
    assert_eq!(window.write(0, 0x28, AccessWidth::Word, 0x1000), Ok(()));
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("hypervisor: vm3 virtio-blk: "), "{lines:?}");
}

#[test]
fn a_shut_down_device_is_not_reached_again() {
    let slot = block_slot();
    let window = Window(Arc::clone(&slot));
    slot.shut_down();
    assert_eq!(window.read(0, 0, AccessWidth::Word), Ok(0), "reads as zero");
    assert_eq!(window.write(0, 0x70, AccessWidth::Word, 0xf), Ok(()), "the write is dropped");
    assert!(slot.with_device(|_, _| ()).is_none());
    assert_eq!(slot.device.lock().read(0x70, 4), Ok(0), "the status the guest wrote never arrived");
}

#[test]
fn a_switch_port_holds_a_bounded_outbox_and_gives_frames_back_in_order() {
    let mut port = SwitchPort::default();
    let mut sent = 0;
    while port.ready() {
        assert!(port.transmit(&vec![sent as u8; MAX_FRAME]));
        sent += 1;
    }
    assert_eq!(sent * MAX_FRAME, OUTBOX_BYTES, "six maximum-size frames in one exit");
    let frames = port.take_frames();
    assert_eq!(frames.len(), sent);
    assert!(frames.iter().enumerate().all(|(i, f)| f[0] == i as u8));
    assert!(port.ready(), "empty again");
    assert!(port.take_frames().is_empty());
}

#[test]
fn a_guest_flooding_the_log_is_held_to_its_vms_limit() {
    let limit = GuestLogLimit::new();
    LINES.with(|l| l.borrow_mut().clear());
    crate::fake::FakeArch::set_now(0);
    for i in 0..100 {
        crate::guest_log::guest_line::<crate::fake::FakeArch, FakeBoard>(&limit, format_args!("line {i}"));
    }
    let printed = LINES.with(|l| l.take());
    // The burst, then the first line of the first second.
    let burst = hyp_core::log_limit::BURST as usize;
    assert_eq!(printed.len(), burst + 1, "{printed:?}");
    assert_eq!(limit.left_out(), 100 - burst as u64 - 1);
    // A second later one more line is printed, saying how many were left out.
    crate::fake::FakeArch::set_now(<crate::fake::FakeArch as crate::arch::Arch>::counter_frequency());
    crate::guest_log::guest_line::<crate::fake::FakeArch, FakeBoard>(&limit, format_args!("later"));
    let printed = LINES.with(|l| l.take());
    assert_eq!(printed.len(), 1, "{printed:?}");
    assert!(
        printed[0].starts_with("later (") && printed[0].contains("earlier line(s) of this VM left out"),
        "{printed:?}"
    );
}

// A side core (crate::io_core): the disk of VM 3 served by CPU 2's polling.

use crate::fake::FakeArch;
use crate::io_core::{IoCore, IoCores, Polled, Turn};

/// A counter of 50 kHz: `IDLE_AFTER_US` is 100 ticks, `DOZE_AFTER_US` 2, `DOZE_FOR_US` 5.
const HZ: u64 = 50_000;
const IDLE: u64 = 100;

fn side_core() -> &'static IoCore {
    let cores: &'static IoCores = leak(IoCores::new());
    cores.set_on(2, HZ);
    cores.get(2).unwrap()
}

/// A guest whose register writes go through the device's window, as its exits do.
fn guest_through_window(slot: &Arc<BlockSlot>, ram: &FakeRam, base: u64) -> BlkGuest {
    let window = Window(Arc::clone(slot));
    let reg = move |offset, value| window.write(0, offset, AccessWidth::Word, u64::from(value)).unwrap();
    BlkGuest::new(Box::new(reg), ram.clone(), base)
}

/// A disk of VM 3 served by `core` on CPU 2.
fn served_disk(core: &'static IoCore) -> (&'static Mutex<FakeDisk>, FakeRam, Arc<BlockSlot>) {
    let (disk, ram) = disk();
    let (slot, _) = block_slot_on(disk, &ram, 3, 1);
    slot.serve_from(core, 2);
    core.add(3, [Arc::clone(&slot) as Arc<dyn Polled>].into_iter());
    (disk, ram, slot)
}

fn turn(core: &IoCore, now: u64) -> Turn {
    core.turn(|| now, || {})
}

#[test]
fn a_notify_of_a_side_cores_device_only_wakes_the_core_which_does_the_work() {
    FakeArch::become_cpu(0);
    let core = side_core();
    let (disk, ram, slot) = served_disk(core);
    let mut guest = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    FakeArch::take_kicks();
    let (head, _, status) = guest.request(false, 1, SECTOR);
    guest.notify();
    assert_eq!(disk.lock().in_flight(), 0, "the vCPU's exit queued nothing: no device work on it");
    assert_eq!(FakeArch::take_kicks(), [2], "the sleeping side core is kicked");
    assert_eq!(turn(core, 1_000), Turn::Woke(1));
    assert!(core.is_polling());
    assert_eq!(disk.lock().in_flight(), 1, "the side core queued the request");
    // While it polls, requests need no notify: the guest is told not to (no EVENT_IDX
    // here: VIRTQ_USED_F_NO_NOTIFY), and one that notifies anyway does not kick it.
    assert_eq!(u16::from_le_bytes(ram.bytes(RAM_IPA + 0x10_0400, 2).try_into().unwrap()), 1, "NO_NOTIFY");
    guest.request(false, 2, SECTOR);
    guest.notify();
    assert!(FakeArch::take_kicks().is_empty());
    assert_eq!(turn(core, 1_010), Turn::Polled);
    assert_eq!(disk.lock().in_flight(), 2);
    // Completions (the board disk's interrupt, taken on the side core) finish them.
    disk.lock().complete_all();
    finish_completions(disk, &[(3, &slot)]);
    assert_eq!(guest.used().first(), Some(&(u32::from(head), SECTOR as u32 + 1)));
    assert_eq!(guest.byte(status), 0);
    // The guest's handler reads InterruptStatus without waiting for a pass that holds the
    // device's lock (here, the test holds it).
    let held = slot.device.lock();
    let isr = Window(Arc::clone(&slot)).read(0, vdev::virtio::transport::regs::INTERRUPT_STATUS, AccessWidth::Word);
    drop(held);
    assert_eq!(isr, Ok(1), "the used-buffer bit");
}

#[test]
fn a_side_cores_guest_acknowledges_its_interrupt_without_the_devices_lock_and_a_later_completion_stays_raised() {
    FakeArch::become_cpu(0);
    let core = side_core();
    let (disk, ram) = disk();
    let (slot, levels) = block_slot_on(disk, &ram, 3, 1);
    slot.serve_from(core, 2);
    core.add(3, [Arc::clone(&slot) as Arc<dyn Polled>].into_iter());
    let mut guest = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    guest.request(false, 1, SECTOR);
    guest.request(false, 2, SECTOR);
    guest.notify();
    assert_eq!(turn(core, 1_000), Turn::Woke(1));
    assert_eq!(disk.lock().in_flight(), 2);
    let first = disk.lock().tags()[0];
    disk.lock().complete(first);
    finish_completions(disk, &[(3, &slot)]);
    assert_eq!(levels.lock().unwrap().last(), Some(&true), "the first completion raised the line");
    let window = Window(Arc::clone(&slot));
    use vdev::virtio::transport::regs::{INTERRUPT_ACK, INTERRUPT_STATUS};
    // The handler reads and acknowledges while a pass holds the device's lock (the test
    // holds it): neither waits, the line goes low, the status reads 0.
    let held = slot.device.lock();
    assert_eq!(window.read(0, INTERRUPT_STATUS, AccessWidth::Word), Ok(1));
    assert_eq!(window.write(0, INTERRUPT_ACK, AccessWidth::Word, 1), Ok(()));
    assert_eq!(window.read(0, INTERRUPT_STATUS, AccessWidth::Word), Ok(0));
    assert_eq!(levels.lock().unwrap().last(), Some(&false));
    drop(held);
    // The device's own view agrees (one word), and the second completion, after the
    // acknowledgement, raises it again.
    assert_eq!(slot.device.lock().interrupt_status(), 0);
    disk.lock().complete_all();
    finish_completions(disk, &[(3, &slot)]);
    assert_eq!(window.read(0, INTERRUPT_STATUS, AccessWidth::Word), Ok(1));
    assert_eq!(levels.lock().unwrap().last(), Some(&true), "a completion after the acknowledgement is announced");
    // Another width goes the usual way, through the lock (and is refused as before).
    assert!(window.write(0, INTERRUPT_ACK, AccessWidth::Byte, 1).is_err());
    assert_eq!(window.read(0, INTERRUPT_STATUS, AccessWidth::Word), Ok(1));
}

#[test]
fn the_side_core_polls_while_requests_are_in_flight_and_sleeps_after_it_is_idle() {
    FakeArch::become_cpu(0);
    let core = side_core();
    let (disk, ram, slot) = served_disk(core);
    let mut guest = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    guest.request(true, 1, SECTOR);
    guest.notify();
    assert_eq!(turn(core, 0), Turn::Woke(1));
    // Long past the idle time, but a request is in flight: it dozes (waits for the
    // completion's interrupt, or 5 ticks), notifies still off, and never sleeps.
    assert_eq!(turn(core, 10 * IDLE), Turn::Dozed(5));
    assert_eq!(turn(core, 10 * IDLE + 1), Turn::Dozed(5));
    assert!(core.is_polling(), "a notify need not kick it");
    disk.lock().complete_all();
    finish_completions(disk, &[(3, &slot)]);
    assert_eq!(turn(core, 10 * IDLE + 1), Turn::Polled, "the used ring moved: activity");
    assert_eq!(turn(core, 10 * IDLE + 2), Turn::Polled, "idle for a tick only");
    assert_eq!(turn(core, 10 * IDLE + 50), Turn::Dozed(5), "idle for a while: it waits between passes");
    assert_eq!(turn(core, 11 * IDLE + 1), Turn::Slept(1));
    assert!(!core.is_polling());
    assert_eq!(u16::from_le_bytes(ram.bytes(RAM_IPA + 0x10_0400, 2).try_into().unwrap()), 0, "notifies wanted again");
    // Asleep, a notify kicks it, and it polls again.
    FakeArch::take_kicks();
    guest.request(false, 3, SECTOR);
    guest.notify();
    assert_eq!(FakeArch::take_kicks(), [2]);
    assert_eq!(turn(core, 20 * IDLE), Turn::Woke(2));
    assert_eq!(disk.lock().in_flight(), 1);
    let counts = core.counts();
    assert_eq!((counts.wakes, counts.sleeps, counts.late_chains), (2, 1, 0));
}

#[test]
fn a_request_made_as_the_side_core_goes_to_sleep_is_not_lost() {
    FakeArch::become_cpu(0);
    let core = side_core();
    let (disk, ram, slot) = served_disk(core);
    let mut guest = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    guest.notify();
    assert_eq!(turn(core, 0), Turn::Woke(1));
    // The guest makes a request available and, seeing NO_NOTIFY, does not notify; the
    // core's idle time runs out just then. Its last look after re-enabling notifies finds
    // the request: it polls on, and the request is queued.
    guest.request(false, 1, SECTOR);
    slot.enable_notifications();
    let turned = core.turn(|| IDLE, || {});
    assert_eq!(turned, Turn::Polled);
    assert_eq!(disk.lock().in_flight(), 1);
}

/// The fake RAM as a driver on another vCPU makes it while the device serves the queue at
/// `avail`: each time the device reads the available index, the chain `head` is made
/// available once more, `left` times.
struct RacingDriver {
    ram: FakeRam,
    avail: u64,
    head: u16,
    left: std::cell::Cell<u32>,
}

impl GuestMemory for RacingDriver {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        if addr == self.avail + 2 && self.left.get() > 0 {
            self.left.set(self.left.get() - 1);
            let idx = u16::from_le_bytes(self.ram.bytes(addr, 2).try_into().unwrap());
            self.ram.fill(self.avail + 4 + 2 * u64::from(idx % QUEUE), &self.head.to_le_bytes());
            self.ram.fill(addr, &idx.wrapping_add(1).to_le_bytes());
        }
        self.ram.read(addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        self.ram.write(addr, data)
    }
    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        self.ram.check(addr, len)
    }
}

/// A side core's pass that stopped at its budget (a driver refilling the ring as fast as it
/// is emptied) leaves the rest to the core's next pass: a vCPU's exit that goes on with its
/// VM's device work (another device of the VM asked for it) does not serve it, since that
/// work may wait for the board's disk.
#[test]
fn work_a_side_core_left_is_not_done_on_a_vcpus_exit() {
    FakeArch::become_cpu(0);
    let core = side_core();
    let (_, ram, slot) = served_disk(core);
    let base = RAM_IPA + 0x10_0000;
    let mut guest = guest_through_window(&slot, &ram, base);
    // A read past the disk's end: answered at once with an error, nothing queued.
    let (head, _, _) = guest.request(false, 1 << 40, SECTOR);
    let racer =
        RacingDriver { ram: ram.clone(), avail: base + 0x200, head, left: std::cell::Cell::new(8 * u32::from(QUEUE)) };
    let _ = slot.device.lock().poll(&racer, true);
    assert!(racer.left.get() > 0, "the pass stopped at its budget");
    let served = guest.used().len();
    // The slot learns the device's state at its next access.
    slot.with_device(|_, _| ());
    slot.continue_work();
    assert_eq!(guest.used().len(), served, "nothing served on the vCPU's exit");
    assert_eq!(turn(core, 1_000), Turn::Woke(1));
    let made_available = 1 + 8 * u32::from(QUEUE) - racer.left.get();
    assert_eq!(guest.used().len(), made_available as usize, "the side core served the rest");
}

/// A side core's NIC whose transmit queue holds more than one pass sends (its switch port's
/// outbox takes six maximum-size frames an access) goes on at the core's next pass; a
/// vCPU's exit that goes on with its VM's device work (another device of the VM asked for
/// it) does not send for it: sending may wait for the board's NIC.
#[test]
fn a_side_cores_nic_sends_what_a_pass_left_at_the_next_pass_not_on_a_vcpus_exit() {
    use vdev::virtio::net::VirtioNet;
    FakeArch::become_cpu(0);
    FRAMES.with(|f| f.borrow_mut().clear());
    let core = side_core();
    let ram = FakeRam::new();
    let setup = SlotSetup {
        vm: 3,
        name: "net",
        ram: ram.clone(),
        signal: Signal::Line(Level(Arc::default(), None)),
        log: Arc::new(GuestLogLimit::new()),
        work: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        shadow: None,
    };
    let nic = VirtioNet::new([2, 0, 0, 0, 0, 3], SwitchPort::default());
    let slot: Arc<VirtioSlot<VirtioNet<SwitchPort>, FakeEnv>> = Arc::new(VirtioSlot::new(setup, nic, 1));
    slot.serve_from(core, 2);
    core.add(3, [Arc::clone(&slot) as Arc<dyn Polled>].into_iter());
    // The driver: its transmit queue (1) at `base`, eight maximum-size frames each with its
    // 12-byte header in one buffer.
    let window = Window(Arc::clone(&slot));
    let reg = |offset, value: u32| window.write(0, offset, AccessWidth::Word, u64::from(value)).unwrap();
    let base = RAM_IPA + 0x10_0000;
    driver_ready(&reg, &ram, base, 1);
    let len = 12 + MAX_FRAME as u64;
    for k in 0..8u16 {
        let data = base + 0x1000 + u64::from(k) * len;
        let mut d = data.to_le_bytes().to_vec();
        d.extend_from_slice(&(len as u32).to_le_bytes());
        d.extend_from_slice(&[0; 4]);
        ram.fill(base + 16 * u64::from(k), &d);
        ram.fill(base + 0x200 + 4 + 2 * u64::from(k), &k.to_le_bytes());
    }
    ram.fill(base + 0x200 + 2, &8u16.to_le_bytes());
    reg(vdev::virtio::transport::regs::QUEUE_NOTIFY, 1);
    let used = || u16::from_le_bytes(ram.bytes(base + 0x402, 2).try_into().unwrap());
    assert_eq!(turn(core, 1_000), Turn::Woke(1));
    assert_eq!(used(), 6, "one pass sends what the outbox takes");
    slot.continue_work();
    assert_eq!(used(), 6, "nothing sent on the vCPU's exit");
    assert_eq!(turn(core, 1_010), Turn::Polled);
    assert_eq!(used(), 8, "the next pass sends the rest");
    assert_eq!(FRAMES.with(|f| f.borrow().len()), 8, "every frame reached the switch");
}

#[test]
fn a_vm_destroyed_with_requests_in_flight_is_let_go_by_its_side_core_before_its_ram_goes() {
    FakeArch::become_cpu(0);
    let core = side_core();
    let (disk, ram, slot) = served_disk(core);
    let mut guest = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    let (_, _, status) = guest.request(false, 1, SECTOR);
    guest.notify();
    assert_eq!(turn(core, 0), Turn::Woke(1));
    assert_eq!(slot.in_flight(), 1);
    // The side core polls on another CPU all the while, the guest's ring full of requests.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            FakeArch::become_cpu(2);
            let mut now = 1;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                core.turn(|| now, || {});
                now += 1;
            }
        })
    };
    for i in 2..4 {
        guest.request(false, i, SECTOR);
    }
    // `Hypervisor::vm_ended`'s order: the side core lets go, the device is shut down, the
    // requests in flight drain (completions free them without touching the RAM), then the
    // capabilities are revoked.
    core.remove_vm(3);
    slot.shut_down();
    let in_flight = disk.lock().in_flight();
    assert!((1..=3).contains(&in_flight), "{in_flight}");
    disk.lock().complete_all();
    finish_completions(disk, &[(3, &slot)]);
    assert_eq!(slot.in_flight(), 0);
    ram.revoke();
    guest.request(false, 5, SECTOR);
    guest.notify();
    std::thread::sleep(std::time::Duration::from_millis(20));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    poller.join().expect("the side core touched no RAM of the destroyed VM");
    assert_eq!(disk.lock().in_flight(), 0, "nothing new started");
    assert_eq!(guest.byte(status), 0xff, "no status written after the shut-down");
}

/// Every word of the window the model answers a trapped 32-bit read of, as the page holds it
/// at `offset`.
fn page_answers_every_read(
    page: &FakePage,
    window: &Window<VirtioBlock<DiskSliceBackend<FakeDisk, FakeRam>>, FakeEnv>,
    offset: usize,
) {
    for register in (0..0x200u64).step_by(4) {
        if let Ok(value) = window.read(0, register, AccessWidth::Word) {
            assert_eq!(u64::from(page.word(offset + register as usize)), value, "the word at {register:#x}");
        }
    }
}

#[test]
fn the_page_holds_what_every_read_returns_and_the_status_before_the_line_shows_it() {
    use vdev::virtio::transport::regs::{INTERRUPT_ACK, MAGIC_VALUE, STATUS};
    let (disk, ram) = disk();
    let page = FakePage::new();
    let (slot, _) = block_slot_with(disk, &ram, 3, 1, Some((Arc::clone(&page), 0x200)));
    let window = Window(Arc::clone(&slot));
    assert_eq!(page.word(0x200 + MAGIC_VALUE as usize), vdev::virtio::transport::MAGIC);
    page_answers_every_read(&page, &window, 0x200);
    let mut guest = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    assert_eq!(page.word(0x200 + STATUS as usize), 15, "the driver's status, written as it set it");
    page_answers_every_read(&page, &window, 0x200);
    page.take_events();

    let (head, _, _) = guest.request(false, 1, SECTOR);
    guest.notify();
    disk.lock().complete_all();
    finish_completions(disk, &[(3, &slot)]);
    assert_eq!(guest.used().first().map(|u| u.0), Some(u32::from(head)));
    assert_eq!(page.take_events(), ["write 0x260 1", "line true"], "InterruptStatus written before the line rose");
    // The acknowledgement takes no lock (the test holds the device's), on a device no side
    // core serves too.
    let held = slot.device.lock();
    window.write(0, INTERRUPT_ACK, AccessWidth::Word, 1).unwrap();
    drop(held);
    assert_eq!(page.take_events(), ["write 0x260 0", "line false"]);
    page_answers_every_read(&page, &window, 0x200);

    // A VM reset: the page as the model after it.
    slot.reset();
    page_answers_every_read(&page, &window, 0x200);
    // The VM ends: nothing writes its page once its devices are shut down.
    let _ = guest_through_window(&slot, &ram, RAM_IPA + 0x10_0000);
    page.take_events();
    slot.shut_down();
    slot.reset();
    let _ = window.write(0, STATUS, AccessWidth::Word, 0);
    let _ = window.write(0, INTERRUPT_ACK, AccessWidth::Word, 1);
    assert!(page.take_events().is_empty(), "written after the VM's end");
}
