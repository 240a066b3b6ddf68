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
use hyp_core::pl011::InterruptLine;
use hyp_core::syndrome::AccessWidth;
use spin::Mutex;
use vdev_virtio::block::{BlockBackend, BlockError, VirtioBlock};
use vdev_virtio::memory::{GuestMemory, GuestMemoryError, Segment};
use vdev_virtio::net::{NetBackend, MAX_FRAME};

use super::leak;
use crate::board::{BoardDisk, DiskError, PhysicalRun};
use crate::virtio::disk_slice::{DiskSliceBackend, DiskSliceError};
use crate::virtio::slot::{SlotSetup, VirtioSlot, VmEnv, Window};
use crate::virtio::switch_port::{SwitchPort, OUTBOX_BYTES};
use crate::virtio::PhysicalRam;

pub(crate) const RAM_IPA: u64 = 0x4000_0000;
pub(crate) const RAM_PA: u64 = 0x8000_0000;
pub(crate) const RAM_SIZE: usize = 4 << 20;
const SECTOR: usize = 512;

/// A VM's RAM: `RAM_SIZE` bytes at IPA `RAM_IPA`, "physical" address `RAM_PA`.
#[derive(Clone)]
pub struct FakeRam(Arc<StdMutex<Vec<u8>>>);

impl FakeRam {
    fn new() -> FakeRam {
        FakeRam(Arc::new(StdMutex::new(vec![0; RAM_SIZE])))
    }
    fn offset(addr: u64, base: u64, len: u64) -> Result<usize, GuestMemoryError> {
        addr.checked_sub(base)
            .filter(|o| o.checked_add(len).is_some_and(|end| end <= RAM_SIZE as u64))
            .map(|o| o as usize)
            .ok_or(GuestMemoryError { addr, len })
    }
    fn fill(&self, ipa: u64, bytes: &[u8]) {
        let at = (ipa - RAM_IPA) as usize;
        self.0.lock().unwrap()[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn bytes(&self, ipa: u64, len: usize) -> Vec<u8> {
        let at = (ipa - RAM_IPA) as usize;
        self.0.lock().unwrap()[at..at + len].to_vec()
    }
}

impl GuestMemory for FakeRam {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        let at = Self::offset(addr, RAM_IPA, buf.len() as u64)?;
        buf.copy_from_slice(&self.0.lock().unwrap()[at..at + buf.len()]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        let at = Self::offset(addr, RAM_IPA, data.len() as u64)?;
        self.0.lock().unwrap()[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        Self::offset(addr, RAM_IPA, len).map(|_| ())
    }
}

impl PhysicalRam for FakeRam {
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        Self::offset(addr, RAM_IPA, len).map(|o| RAM_PA + o as u64)
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

/// A board disk of `sectors` sectors that reaches the VM's RAM by physical address.
pub struct FakeDisk {
    data: Vec<u8>,
    ram: FakeRam,
    requests: Vec<Request>,
    failing: bool,
}

impl FakeDisk {
    fn at(&self, sector: u64, len: usize) -> Result<usize, DiskError> {
        let at = sector as usize * SECTOR;
        (!self.failing && len.is_multiple_of(SECTOR) && at + len <= self.data.len()).then_some(at).ok_or(DiskError)
    }
    fn ram_offset(run: &PhysicalRun) -> usize {
        (run.pa - RAM_PA) as usize
    }
}

impl BoardDisk for FakeDisk {
    fn capacity(&self) -> u64 {
        (self.data.len() / SECTOR) as u64
    }
    fn read_to_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError> {
        self.requests.push(Request::ToGuest { sector, runs: runs.to_vec() });
        let mut at = self.at(sector, runs.iter().map(|r| r.len as usize).sum())?;
        let mut ram = self.ram.0.lock().unwrap();
        for run in runs {
            let (o, len) = (Self::ram_offset(run), run.len as usize);
            ram[o..o + len].copy_from_slice(&self.data[at..at + len]);
            at += len;
        }
        Ok(())
    }
    fn write_from_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError> {
        self.requests.push(Request::FromGuest { sector, runs: runs.to_vec() });
        let mut at = self.at(sector, runs.iter().map(|r| r.len as usize).sum())?;
        let ram = self.ram.0.lock().unwrap();
        for run in runs {
            let (o, len) = (Self::ram_offset(run), run.len as usize);
            self.data[at..at + len].copy_from_slice(&ram[o..o + len]);
            at += len;
        }
        Ok(())
    }
    fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.requests.push(Request::Read { sector, len: buf.len() });
        let at = self.at(sector, buf.len())?;
        buf.copy_from_slice(&self.data[at..at + buf.len()]);
        Ok(())
    }
    fn write(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.requests.push(Request::Write { sector, len: buf.len() });
        let at = self.at(sector, buf.len())?;
        self.data[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), DiskError> {
        self.requests.push(Request::Flush);
        if self.failing {
            return Err(DiskError);
        }
        Ok(())
    }
}

/// A board disk of 64 sectors whose sector n holds bytes of value n, and a VM's RAM.
fn disk() -> (&'static Mutex<FakeDisk>, FakeRam) {
    let ram = FakeRam::new();
    let data = (0..64u8).flat_map(|s| [s; SECTOR]).collect();
    (leak(Mutex::new(FakeDisk { data, ram: ram.clone(), requests: vec![], failing: false })), ram)
}

/// Sectors 16..48 of the board's disk.
fn slice(disk: &'static Mutex<FakeDisk>, ram: &FakeRam) -> DiskSliceBackend<FakeDisk, FakeRam> {
    DiskSliceBackend::new(disk, DiskSlice { offset: 16 * SECTOR as u64, size: 32 * SECTOR as u64 }, ram.clone(), 3)
        .unwrap()
}

fn seg(addr: u64, len: usize) -> Segment {
    Segment { addr, len: len as u32 }
}

#[test]
fn a_vms_sector_is_its_slices_and_adjacent_buffers_are_one_run() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    assert_eq!(backend.capacity_sectors(), 32);
    assert_eq!(&backend.device_id()[..13], b"hyp-vm3-disk\0");
    let buffers = [seg(RAM_IPA, SECTOR), seg(RAM_IPA + SECTOR as u64, 2 * SECTOR), seg(RAM_IPA + 0x1000, SECTOR)];
    backend.read(&ram, 2, &buffers).unwrap();
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
    backend.write(&ram, 31, &[seg(RAM_IPA + 0x2000, SECTOR)]).unwrap();
    assert_eq!(disk.lock().data[47 * SECTOR..48 * SECTOR], [0xaa; SECTOR], "the slice's last sector");
    assert_eq!(disk.lock().data[48 * SECTOR], 48, "the next VM's first sector is untouched");
}

#[test]
fn overlapping_or_partial_sector_buffers_go_through_the_bounce_buffer() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    // One buffer named twice: the disk must never get two mutable views of it.
    backend.read(&ram, 0, &[seg(RAM_IPA, SECTOR), seg(RAM_IPA, SECTOR)]).unwrap();
    let requests = std::mem::take(&mut disk.lock().requests);
    assert!(requests.iter().all(|r| matches!(r, Request::Read { .. })), "{requests:?}");
    assert_eq!(ram.bytes(RAM_IPA, SECTOR), vec![17u8; SECTOR], "the later buffer's data wins, as in order");
    // Two halves of a sector.
    ram.fill(RAM_IPA + 0x3000, &[1; 256]);
    ram.fill(RAM_IPA + 0x5000, &[2; 256]);
    backend.write(&ram, 4, &[seg(RAM_IPA + 0x3000, 256), seg(RAM_IPA + 0x5000, 256)]).unwrap();
    assert_eq!(disk.lock().requests, vec![Request::Write { sector: 20, len: SECTOR }]);
    assert_eq!(disk.lock().data[20 * SECTOR..21 * SECTOR], [[1u8; 256], [2; 256]].concat());
}

#[test]
fn a_request_beyond_the_slice_or_of_part_of_a_sector_is_refused_before_the_disk() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    let one = [seg(RAM_IPA, SECTOR)];
    assert_eq!(backend.read(&ram, 32, &one), Err(BlockError::OutOfRange { sector: 32, sectors: 1 }));
    assert_eq!(backend.write(&ram, u64::MAX, &one), Err(BlockError::OutOfRange { sector: u64::MAX, sectors: 1 }));
    assert!(backend.read(&ram, 0, &[seg(RAM_IPA, 100)]).is_err());
    assert!(disk.lock().requests.is_empty(), "{:?}", disk.lock().requests);
}

#[test]
fn a_buffer_outside_the_vms_ram_is_a_memory_error_and_no_request() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    let outside = RAM_IPA + RAM_SIZE as u64;
    let err = backend.read(&ram, 0, &[seg(RAM_IPA, SECTOR), seg(outside, SECTOR)]).unwrap_err();
    assert!(matches!(err, BlockError::Memory(GuestMemoryError { addr, .. }) if addr == outside), "{err:?}");
    assert!(backend.write(&ram, 0, &[seg(u64::MAX - 100, SECTOR)]).is_err());
    assert!(disk.lock().requests.is_empty(), "{:?}", disk.lock().requests);
}

#[test]
fn a_failing_disk_is_an_io_error_for_the_guest() {
    let (disk, ram) = disk();
    let mut backend = slice(disk, &ram);
    disk.lock().failing = true;
    assert_eq!(backend.read(&ram, 0, &[seg(RAM_IPA, SECTOR)]), Err(BlockError::Io));
    assert_eq!(backend.write(&ram, 0, &[seg(RAM_IPA, 100), seg(RAM_IPA + 512, 412)]), Err(BlockError::Io));
    assert_eq!(backend.flush(), Err(BlockError::Io));
    disk.lock().failing = false;
    assert_eq!(backend.flush(), Ok(()));
}

#[test]
fn a_slice_that_does_not_fit_the_board_disk_is_refused_and_size_zero_is_the_rest() {
    let (disk, ram) = disk();
    let refused = DiskSliceBackend::new(disk, DiskSlice { offset: 60 * 512, size: 8 * 512 }, ram.clone(), 0);
    let err = refused.err().unwrap();
    assert_eq!(err, DiskSliceError::OutsideDisk { first: 60, count: 8, capacity: 64 });
    assert_eq!(
        err.to_string(),
        "the VM's `disk` slice (sectors 60..68) does not fit in the board's disk of 64 sectors"
    );
    assert!(DiskSliceBackend::new(disk, DiskSlice { offset: 64 * 512, size: 0 }, ram.clone(), 0).is_err());
    let rest = DiskSliceBackend::new(disk, DiskSlice { offset: 40 * 512, size: 0 }, ram, 0).unwrap();
    assert_eq!(rest.capacity_sectors(), 24);
}

thread_local! {
    pub(crate) static LINES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    static FRAMES: RefCell<Vec<(usize, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
}

pub struct FakeEnv;

#[derive(Default)]
pub struct Level(Arc<StdMutex<Vec<bool>>>);

impl InterruptLine for Level {
    fn set_level(&mut self, high: bool) {
        self.0.lock().unwrap().push(high);
    }
}

/// A VM console that keeps what the guest wrote.
pub struct Recorded(pub(crate) Arc<StdMutex<Vec<u8>>>);

impl hyp_core::pl011::ConsoleOutput for Recorded {
    fn put(&mut self, byte: u8) {
        self.0.lock().unwrap().push(byte);
    }
}

thread_local! {
    /// What every VM console of this thread received.
    pub(crate) static CONSOLE: Arc<StdMutex<Vec<u8>>> = Arc::default();
}

/// The board disk the fake image has: 64 sectors.
pub(crate) fn board_disk() -> &'static Mutex<FakeDisk> {
    static DISK: std::sync::OnceLock<&'static Mutex<FakeDisk>> = std::sync::OnceLock::new();
    DISK.get_or_init(|| disk().0)
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
    fn receive(&mut self, _: &mut Vec<u8>) -> bool {
        false
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
    fn guest_ram(ipa: u64, pa: u64, size: u64) -> FakeRam {
        assert_eq!((ipa, pa, size as usize), (RAM_IPA, RAM_PA, RAM_SIZE), "the fake image has one RAM");
        FakeRam::new()
    }
    fn interrupt_line(_: &crate::shared_vgic::SharedVgic<crate::fake::FakeArch>, _: vgic::IntId) -> Level {
        Level::default()
    }
    fn forward_frame(from: usize, frame: &[u8]) {
        FRAMES.with(|f| f.borrow_mut().push((from, frame.to_vec())));
    }
}

type BlockSlot = VirtioSlot<VirtioBlock<DiskSliceBackend<FakeDisk, FakeRam>>, FakeEnv>;

fn block_slot() -> Arc<BlockSlot> {
    let (disk, ram) = disk();
    let setup = SlotSetup {
        vm: 3,
        name: "blk",
        ram: ram.clone(),
        line: Level::default(),
        log: Arc::new(GuestLogLimit::new()),
        work: Arc::new(std::sync::atomic::AtomicBool::new(false)),
    };
    Arc::new(VirtioSlot::new(setup, VirtioBlock::new(slice(disk, &ram)), 0))
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
