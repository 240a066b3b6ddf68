//! Host tests of the ITS driver: the commands' fields against the spec's layouts, the queue
//! against a fake ITS on a thread (it reads the ring up to GITS_CWRITER and advances
//! GITS_CREADR), the bring-up and the redistributor registers over frames in ordinary memory.
//! The fakes are shared with the tests of `vlpis` (its/vlpis/tests.rs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::vec::Vec;

use super::command::*;
use super::queue::{ItsQueue, COMMAND_BYTES};
use super::redistributor::*;
use super::*;

// ---- the fakes ----

/// No CPU interface: the ITS driver uses only its store barrier.
pub(super) struct NoCpu;

impl CpuInterfaceRegisters for NoCpu {
    fn enable(_: u8) {}
    fn acknowledge() -> u32 {
        1023
    }
    fn end_of_interrupt(_: u32) {}
    fn priority_drop(_: u32) {}
    fn send_sgi(_: u64) {}
    fn store_barrier() {}
}

/// Memory from leaked vectors, aligned as asked, with a budget of bytes.
struct VecMemory {
    budget: usize,
    given: Vec<(usize, usize, usize)>,
}

impl VecMemory {
    fn new(budget: usize) -> Self {
        VecMemory { budget, given: Vec::new() }
    }
}

impl ItsMemory for VecMemory {
    fn allocate_zeroed(&mut self, bytes: usize, align: usize) -> Option<usize> {
        if bytes > self.budget {
            return None;
        }
        self.budget -= bytes;
        let words: &'static mut [u64] = Vec::leak(vec![0u64; (bytes + align) / 8 + 1]);
        let address = (words.as_mut_ptr() as usize).next_multiple_of(align);
        self.given.push((address, bytes, align));
        Some(address)
    }
}

/// Registers in ordinary memory (a register keeps what was last written to it).
#[derive(Clone, Copy)]
pub(super) struct Regs(pub(super) usize);

impl Regs {
    pub(super) fn new(bytes: usize) -> Self {
        Regs(Vec::leak(vec![0u64; bytes / 8]).as_mut_ptr() as usize)
    }
    pub(super) fn read64(self, at: usize) -> u64 {
        // SAFETY: inside the leaked words; the driver's accesses are volatile too.
        unsafe { ((self.0 + at) as *const u64).read_volatile() }
    }
    pub(super) fn write64(self, at: usize, value: u64) {
        // SAFETY: as for `read64`.
        unsafe { ((self.0 + at) as *mut u64).write_volatile(value) }
    }
    pub(super) fn read32(self, at: usize) -> u32 {
        // SAFETY: as for `read64`.
        unsafe { ((self.0 + at) as *const u32).read_volatile() }
    }
    pub(super) fn write32(self, at: usize, value: u32) {
        // SAFETY: as for `read64`.
        unsafe { ((self.0 + at) as *mut u32).write_volatile(value) }
    }
}

/// What the fake ITS does with the commands it reads.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Behaviour {
    /// Reads every command, one at a time.
    Consume,
    /// Stops at the first command with this number and reports GITS_CREADR.Stalled.
    StallAt(u8),
}

/// An ITS on a thread: reads the ring GITS_CBASER names from GITS_CREADR up to
/// GITS_CWRITER, records each command and advances GITS_CREADR. (The driver's volatile
/// accesses and the fake's meet in plain memory; each is one aligned word.)
pub(super) struct FakeIts {
    stop: Arc<AtomicBool>,
    read: Arc<Mutex<Vec<ItsCommand>>>,
    thread: Option<JoinHandle<()>>,
    _alone: MutexGuard<'static, ()>,
}

/// Held by each fake ITS while it runs: one at a time. Each test's driver spins while its
/// fake ITS reads; with every such pair running at once on a host of few CPUs, each fake
/// waits long to be scheduled (the queue's wait, `NEW_QUEUE_POLLS`, is long in the tests,
/// but the runs were slow and timing-bound).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl FakeIts {
    pub(super) fn start(its: Regs, behaviour: Behaviour) -> Self {
        // A test that failed while holding it poisoned it, and left nothing to clean up.
        let alone = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let stop = Arc::new(AtomicBool::new(false));
        let read = Arc::new(Mutex::new(Vec::new()));
        let (stop2, read2) = (stop.clone(), read.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let cbaser = its.read64(GITS_CBASER);
                let creadr = its.read32(GITS_CREADR);
                let (ring, bytes) = ((cbaser & 0x000f_ffff_ffff_f000) as usize, ((cbaser & 0xff) as usize + 1) * 4096);
                let offset = (creadr & 0xf_ffe0) as usize;
                if cbaser >> 63 == 0 || creadr & 1 != 0 || offset == (its.read32(GITS_CWRITER) & 0xf_ffe0) as usize {
                    std::thread::yield_now();
                    continue;
                }
                let words = Regs(ring + offset);
                let command = ItsCommand([0, 8, 16, 24].map(|at| words.read64(at)));
                read2.lock().unwrap().push(command);
                if behaviour == Behaviour::StallAt(command.opcode()) {
                    its.write32(GITS_CREADR, offset as u32 | 1);
                } else {
                    its.write32(GITS_CREADR, ((offset + COMMAND_BYTES) % bytes) as u32);
                }
            }
        });
        FakeIts { stop, read, thread: Some(thread), _alone: alone }
    }

    pub(super) fn commands(&self) -> Vec<ItsCommand> {
        self.read.lock().unwrap().clone()
    }

    /// The commands read since the last `take`: what one step of a test sent.
    pub(super) fn take(&self) -> Vec<ItsCommand> {
        std::mem::take(&mut *self.read.lock().unwrap())
    }
}

impl Drop for FakeIts {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

fn frame(regs: Regs) -> Frame {
    // SAFETY: the leaked words of `Regs::new`, never freed, large enough for the ITS frames.
    unsafe { Frame::new(regs.0) }
}

fn commands(n: u32) -> Vec<ItsCommand> {
    (0..n).map(|i| ItsCommand::int(DeviceId(i), EventId(i))).collect()
}

// ---- the commands ----

/// Every field of every command, at the bit positions of IHI 0069H 5.3. Checked against
/// QEMU's decoder too (its arm_gicv3_its.c process_* functions and the command-field
/// definitions of gicv3_internal.h, read for this test): the command numbers; DeviceID
/// DW0 [63:32], EventID DW1 [31:0]; MAPC ICID DW2 [15:0], RDbase from DW2 bit 16 (QEMU keeps
/// its low 16 bits, a processor number), V DW2 [63]; MAPD Size DW1 [4:0], ITT_addr DW2
/// [51:8], V DW2 [63]; MAPTI pINTID DW1 [63:32], ICID DW2 [15:0]; VMAPTI vPEID DW1 [47:32],
/// vINTID DW2 [31:0], doorbell DW2 [63:32] (1023 for none); VMAPP vPEID DW1 [47:32], RDbase
/// DW2 [51:16], V DW2 [63], VPT_size DW3 [4:0] (QEMU's 8-bit field takes GICv4.0's [7:6] as
/// RES0), VPT_addr DW3 [51:16]; VMOVI vPEID DW1 [47:32], D DW2 [0], doorbell DW2 [63:32];
/// VMOVP vPEID DW1 [47:32], RDbase DW2 [51:16]; VINVALL vPEID DW1 [47:32]. QEMU's SYNC and
/// VSYNC read no field.
#[test]
fn commands_place_every_field_where_the_spec_does() {
    let (dev, ev, vpe) = (DeviceId(0xdead_beef), EventId(0x1234_5678), VpeId(0xabcd));
    assert_eq!(
        ItsCommand::mapc(CollectionId(0x2345), Some(RdBase::processor(0xfedc))).0,
        [0x09, 0, 1 << 63 | 0xfedc << 16 | 0x2345, 0]
    );
    assert_eq!(ItsCommand::mapc(CollectionId(7), None).0, [0x09, 0, 7, 0], "V clear: unmapped");
    assert_eq!(RdBase::address(0x8_1234_0000).field(), 0x8_1234, "PA [51:16]");
    assert_eq!(ItsCommand::sync(RdBase::address(0xf_ffff_ffff_0000)).0[2], 0xf_ffff_ffff_0000, "RDbase [51:16]");

    let mapd = ItsCommand::mapd(dev, Some((0x8_0000_1f00 | 0xff, 5))).0;
    assert_eq!(mapd, [0xdead_beef << 32 | 0x08, 4, 1 << 63 | 0x8_0000_1f00, 0], "ITT_addr [51:8], Size bits - 1");
    assert_eq!(ItsCommand::mapd(dev, None).0[2], 0, "V clear: unmapped");

    assert_eq!(
        ItsCommand::mapti(dev, ev, Lpi(8192 + 5), CollectionId(3)).0,
        [0xdead_beef << 32 | 0x0a, (8192 + 5) << 32 | 0x1234_5678, 3, 0]
    );
    for (command, opcode) in [
        (ItsCommand::inv(dev, ev), 0x0c),
        (ItsCommand::discard(dev, ev), 0x0f),
        (ItsCommand::clear(dev, ev), 0x04),
        (ItsCommand::int(dev, ev), 0x03),
    ] {
        assert_eq!(command.0, [0xdead_beef << 32 | opcode, 0x1234_5678, 0, 0]);
    }
    assert_eq!(ItsCommand::sync(RdBase::processor(2)).0, [0x05, 0, 2 << 16, 0]);

    assert_eq!(
        ItsCommand::vmapp(vpe, Some((RdBase::processor(1), 0x4_0003_0000 | 0xffff, 16))).0,
        [0x29, 0xabcd << 32, 1 << 63 | 1 << 16, 0x4_0003_0000 | 15]
    );
    assert_eq!(ItsCommand::vmapp(vpe, None).0, [0x29, 0xabcd << 32, 0, 0]);
    assert_eq!(
        ItsCommand::vmapti(dev, ev, vpe, Lpi(8200), Doorbell::Lpi(Lpi(8193))).0,
        [0xdead_beef << 32 | 0x2a, 0xabcd << 32 | 0x1234_5678, 8193 << 32 | 8200, 0]
    );
    assert_eq!(ItsCommand::vmapti(dev, ev, vpe, Lpi(8200), Doorbell::None).0[2] >> 32, 1023);
    assert_eq!(
        ItsCommand::vmovi(dev, ev, vpe, Some(Doorbell::Lpi(Lpi(8194)))).0,
        [0xdead_beef << 32 | 0x21, 0xabcd << 32 | 0x1234_5678, 8194 << 32 | 1, 0]
    );
    assert_eq!(ItsCommand::vmovi(dev, ev, vpe, None).0[2], 0, "D clear: the doorbell kept");
    assert_eq!(ItsCommand::vmovp(vpe, RdBase::processor(3)).0, [0x22, 0xabcd << 32, 3 << 16, 0]);
    assert_eq!(ItsCommand::vinvall(vpe).0, [0x2d, 0xabcd << 32, 0, 0]);
    assert_eq!(ItsCommand::vsync(vpe).0, [0x25, 0xabcd << 32, 0, 0]);
}

#[test]
fn typer_fields_give_the_features_and_the_rdbase() {
    // QEMU's GICv4 ITS: Physical, Virtual, 12-byte ITT entries, 16 EventID and DeviceID bits,
    // PTA 0, CIL with 16 collection bits, VMOVP.
    let qemu = 1 | 1 << 1 | 11 << 4 | 15 << 8 | 15 << 13 | 1 << 36 | 15 << 32 | 1 << 37;
    let features = ItsFeatures::from_typer(qemu);
    assert_eq!(
        features,
        ItsFeatures {
            physical: true,
            virtual_lpis: true,
            itt_entry_size: 12,
            event_id_bits: 16,
            device_id_bits: 16,
            rdbase_is_address: false,
            held_collections: 0,
        }
    );
    let gicr_typer = 0x0100_0000_0000_0000 | 5 << 8 | 1 << 1;
    assert_eq!(features.rdbase(gicr_typer, 0x080a_0000), RdBase::processor(5));
    let pta = ItsFeatures::from_typer(qemu | 1 << 19 | 4 << 24);
    assert_eq!((pta.rdbase(gicr_typer, 0x080a_0000), pta.held_collections), (RdBase::address(0x080a_0000), 4));
    assert!(!ItsFeatures::from_typer(qemu & !2).virtual_lpis, "a GICv3 ITS");
}

// ---- the queue ----

fn queue(its: Regs, pages: usize) -> ItsQueue<NoCpu> {
    ItsQueue::new(frame(its), pages, &mut VecMemory::new(1 << 20)).unwrap()
}

#[test]
fn the_queue_names_its_ring_in_cbaser() {
    let its = Regs::new(ITS_SIZE);
    its.write32(GITS_CWRITER, 0x40);
    let mut memory = VecMemory::new(1 << 20);
    let queue = ItsQueue::<NoCpu>::new(frame(its), 2, &mut memory).unwrap();
    let (ring, bytes, align) = memory.given[0];
    assert_eq!((bytes, align, queue.slots()), (8192, 4096, 256));
    let cbaser = its.read64(GITS_CBASER);
    assert_eq!(cbaser, 1 << 63 | 0b111 << 59 | 1 << 10 | ring as u64 | 1, "Valid, cacheable, 2 pages");
    assert_eq!(its.read32(GITS_CWRITER), 0, "the writer at the ring's start");
    assert_eq!(ItsQueue::<NoCpu>::new(frame(its), 257, &mut memory).err(), Some(ItsError::QueueSize { pages: 257 }));
    assert!(matches!(ItsQueue::<NoCpu>::new(frame(its), 1, &mut VecMemory::new(0)), Err(ItsError::OutOfMemory { .. })));
}

#[test]
fn commands_reach_the_its_in_order_across_the_rings_end() {
    let its = Regs::new(ITS_SIZE);
    let mut queue = queue(its, 1);
    let fake = FakeIts::start(its, Behaviour::Consume);
    // 128 slots: 3 commands, then 300 (chunks of 127) wrap the ring twice.
    queue.send(&commands(3)).unwrap();
    let many = commands(300);
    queue.send(&many).unwrap();
    let read = fake.commands();
    assert_eq!(read.len(), 303);
    assert_eq!(read[..3], commands(3)[..]);
    assert_eq!(read[3..], many[..]);
    assert_eq!(its.read32(GITS_CWRITER), ((303 % 128) * 32) as u32);
    assert_eq!(its.read32(GITS_CREADR), its.read32(GITS_CWRITER));
}

#[test]
fn a_stalled_its_is_an_error_naming_the_command() {
    let its = Regs::new(ITS_SIZE);
    let mut queue = queue(its, 1);
    let _fake = FakeIts::start(its, Behaviour::StallAt(0x0f));
    let sent = [ItsCommand::int(DeviceId(0), EventId(1)), ItsCommand::discard(DeviceId(0), EventId(1))];
    assert_eq!(queue.send(&sent), Err(ItsError::Stalled { command: 0x0f, offset: 32 }));
}

#[test]
fn an_its_that_never_reads_is_an_error_not_a_hang() {
    let its = Regs::new(ITS_SIZE);
    let mut queue = queue(its, 1);
    queue.set_polls(1000);
    assert_eq!(queue.send(&commands(2)), Err(ItsError::NoProgress { creadr: 0, cwriter: 64 }));
}

// ---- the bring-up ----

/// An ITS frame as QEMU's GICv4 ITS resets: GITS_TYPER, GITS_BASER0 devices (8-byte
/// entries), 1 collections (8), 2 vPEs (8), each with 64 KiB pages until written.
pub(super) fn qemu_its(virtual_lpis: bool) -> Regs {
    let its = Regs::new(ITS_SIZE);
    its.write64(GITS_TYPER, 1 | (virtual_lpis as u64) << 1 | 11 << 4 | 15 << 8 | 15 << 13);
    its.write64(GITS_BASER, 1 << 56 | 7 << 48 | 2 << 8);
    its.write64(GITS_BASER + 8, 4 << 56 | 7 << 48 | 2 << 8);
    if virtual_lpis {
        its.write64(GITS_BASER + 16, 2 << 56 | 7 << 48 | 2 << 8);
    }
    its
}

fn init(its: Regs, vpes: usize, memory: &mut VecMemory) -> Result<BoardIts<NoCpu>, ItsError> {
    // SAFETY: the leaked words of `Regs::new`, ITS_SIZE bytes, this test's alone.
    unsafe { BoardIts::init(its.0, vpes, memory) }
}

#[test]
fn bring_up_gives_each_table_its_pages_then_the_queue_then_enables() {
    let its = qemu_its(true);
    let mut memory = VecMemory::new(1 << 20);
    let board = init(its, 1000, &mut memory).unwrap();
    assert!(board.features().virtual_lpis);
    let tables: Vec<_> = memory.given.iter().map(|&(at, bytes, align)| (at as u64, bytes, align)).collect();
    // Devices: DeviceID 0 in one page; collections: 8 CPUs in one; vPEs: 1000 × 8 in two.
    assert_eq!(
        tables.iter().map(|t| (t.1, t.2)).collect::<Vec<_>>(),
        [(4096, 4096), (4096, 4096), (8192, 4096), (4096, 4096)]
    );
    let attributes = 1 << 63 | 0b111 << 59 | 1 << 10 | 7 << 48;
    assert_eq!(its.read64(GITS_BASER), attributes | 1 << 56 | tables[0].0, "Page_Size 4K, 1 page");
    assert_eq!(its.read64(GITS_BASER + 8), attributes | 4 << 56 | tables[1].0);
    assert_eq!(its.read64(GITS_BASER + 16), attributes | 2 << 56 | tables[2].0 | 1, "2 pages");
    assert_eq!(its.read64(GITS_BASER + 24), 0, "unimplemented: untouched");
    assert_eq!(its.read64(GITS_CBASER) & 0xf_ffff_ffff_f000, tables[3].0, "the queue after the tables");
    assert_eq!(its.read32(GITS_CTLR), 1, "Enabled last");
}

#[test]
fn bring_up_of_a_gicv3_its_has_no_vpe_table_and_says_so() {
    let its = qemu_its(false);
    let board = init(its, 4, &mut VecMemory::new(1 << 20)).unwrap();
    assert!(!board.features().virtual_lpis);
    assert_eq!(its.read64(GITS_BASER + 16), 0);
}

#[test]
fn bring_up_refuses_what_it_cannot_build() {
    let mut memory = VecMemory::new(1 << 20);
    // 256 pages of 8-byte entries hold 131072 vPEs.
    assert_eq!(
        init(qemu_its(true), 200_000, &mut memory).err(),
        Some(ItsError::TableTooLarge { baser: 2, pages: 391 })
    );
    assert_eq!(
        init(qemu_its(true), usize::MAX, &mut memory).err(),
        Some(ItsError::TableTooLarge { baser: 2, pages: usize::MAX })
    );
    let none = Regs::new(ITS_SIZE);
    assert_eq!(init(none, 1, &mut memory).err(), Some(ItsError::NoTable { table_type: TABLE_DEVICES }));
    assert!(matches!(init(qemu_its(true), 1, &mut VecMemory::new(4096)), Err(ItsError::OutOfMemory { .. })));
    // A firmware's enabled ITS that never reports Quiescent.
    let busy = qemu_its(true);
    busy.write32(GITS_CTLR, 1);
    assert_eq!(init(busy, 1, &mut memory).err(), Some(ItsError::NotQuiescent));
}

#[test]
fn collections_and_device_zero_are_mapped_through_the_queue() {
    let its = qemu_its(true);
    let mut memory = VecMemory::new(1 << 20);
    let mut board = init(its, 2, &mut memory).unwrap();
    let fake = FakeIts::start(its, Behaviour::Consume);
    board.map_collection(CollectionId(1), RdBase::processor(1)).unwrap();
    let itt = board.map_device(DeviceId(0), 100, &mut memory).unwrap();
    assert_eq!(itt.event_id_bits, 7, "100 events: 128 EventIDs");
    let &(at, bytes, align) = memory.given.last().unwrap();
    assert_eq!((at as u64, bytes, align), (itt.address, 12 * 128, 256));
    assert_eq!(
        fake.commands(),
        [
            ItsCommand::mapc(CollectionId(1), Some(RdBase::processor(1))),
            ItsCommand::sync(RdBase::processor(1)),
            ItsCommand::mapd(DeviceId(0), Some((itt.address, 7))),
        ]
    );
    let one = board.map_device(DeviceId(0), 1, &mut memory).unwrap();
    assert_eq!(one.event_id_bits, 1, "MAPD's Size is at least one bit");
    assert_eq!(
        board.map_device(DeviceId(0), 1 << 17, &mut memory),
        Err(ItsError::TooManyEvents { events: 1 << 17, max_bits: 16 })
    );
    assert_eq!(
        board.map_device(DeviceId(0), u32::MAX, &mut memory),
        Err(ItsError::TooManyEvents { events: u32::MAX, max_bits: 16 })
    );
    assert_eq!(board.map_device(DeviceId(0), 0, &mut memory), Err(ItsError::TooManyEvents { events: 0, max_bits: 16 }));
    assert_eq!(board.map_device(DeviceId(512), 1, &mut memory), Err(ItsError::DeviceOutOfRange { device: 512 }));
}

#[test]
fn an_event_is_raised_by_a_32_bit_write_of_translater() {
    let its = qemu_its(true);
    let board = init(its, 1, &mut VecMemory::new(1 << 20)).unwrap();
    its.write32(GITS_TRANSLATER - 4, u32::MAX);
    its.write32(GITS_TRANSLATER + 4, u32::MAX);
    board.translater().raise(EventId(42));
    assert_eq!(its.read32(GITS_TRANSLATER), 42);
    assert_eq!(
        (its.read32(GITS_TRANSLATER - 4), its.read32(GITS_TRANSLATER + 4)),
        (u32::MAX, u32::MAX),
        "32 bits only"
    );
}

// ---- the redistributor ----

/// A GICv4 redistributor's four frames, GICR_TYPER with VLPIS (or not) and `processor` as
/// its affinity and Processor_Number.
pub(super) fn fake_redistributor(processor: u16, vlpis: bool) -> (Regs, LpiRedistributor) {
    let rd = Regs::new(0x4_0000);
    let processor = u64::from(processor);
    rd.write64(GICR_TYPER, processor << 32 | processor << 8 | (vlpis as u64) << 1 | 1);
    // SAFETY: the leaked words, all four frames.
    (rd, unsafe { LpiRedistributor::new(rd.0) })
}

#[test]
fn lpis_are_enabled_after_the_tables_are_given() {
    let (rd, redistributor) = fake_redistributor(3, true);
    assert_eq!(redistributor.processor_number(), 3);
    let mut memory = VecMemory::new(1 << 20);
    let config = LpiConfigTable::allocate(14, &mut memory).unwrap();
    assert_eq!(memory.given[0].1, 8192, "one byte per LPI from 8192 to 16383");
    config.set(Lpi(8192 + 3), 0xa3, true).unwrap();
    assert_eq!(config.get(Lpi(8195)), Some(0xa0 | 0b11), "priority [7:2], RES1, Enable");
    assert_eq!(config.set(Lpi(16384), 0xa0, true), Err(ItsError::NotAnLpi { intid: 16384 }));
    assert_eq!(config.set(Lpi(8191), 0xa0, true), Err(ItsError::NotAnLpi { intid: 8191 }));
    let pending = redistributor.enable_lpis(&config, &mut memory).unwrap();
    assert_eq!((memory.given[1].1, memory.given[1].2, pending % 0x1_0000), (2048, 0x1_0000, 0));
    let attributes = 0b111 << 7 | 1 << 10;
    assert_eq!(rd.read64(GICR_PROPBASER), config.address() | attributes | 13, "IDbits: 14 - 1");
    assert_eq!(rd.read64(GICR_PENDBASER), pending | attributes | 1 << 62, "PTZ");
    assert_eq!(rd.read32(GICR_CTLR), 1, "EnableLPIs");
    assert_eq!(redistributor.enable_lpis(&config, &mut memory), Err(ItsError::LpisAlreadyEnabled));
    assert_eq!(LpiConfigTable::allocate(13, &mut memory).err(), Some(ItsError::IdBits { bits: 13 }));
    assert_eq!(lpi_config(0xff, false), 0xfe);
}

#[test]
fn a_vpe_is_made_resident_and_not_resident() {
    let (rd, redistributor) = fake_redistributor(3, true);
    let (vprop, vpt) = (0x8000_3000, 0x8005_0000);
    redistributor.make_resident(vprop, 16, vpt).unwrap();
    let attributes = 0b111 << 7 | 1 << 10;
    assert_eq!(rd.read64(GICR_VPROPBASER), vprop | attributes | 15, "VLPI frame + 0x70, IDbits 16 - 1");
    let resident = vpt | attributes | VPENDBASER_VALID | VPENDBASER_IDAI | VPENDBASER_PENDING_LAST;
    assert_eq!(rd.read64(GICR_VPENDBASER), resident, "VLPI frame + 0x78, Valid");
    assert_eq!(GICR_VPENDBASER, 0x2_0078);
    assert_eq!(redistributor.make_resident(vprop, 16, vpt), Err(ItsError::AlreadyResident));
    // Memory keeps what was written: Valid, PendingLast and Dirty all clear.
    assert_eq!(redistributor.make_non_resident(), Ok(false));
    assert_eq!(rd.read64(GICR_VPENDBASER), vpt | attributes, "the table kept, the status bits cleared");
    assert_eq!(redistributor.make_non_resident(), Ok(false), "not resident: nothing to do");
    assert!(matches!(redistributor.make_resident(vprop, 16, vpt + 0x1000), Err(ItsError::Misaligned { .. })));
    assert!(matches!(redistributor.make_resident(vprop + 8, 16, vpt), Err(ItsError::Misaligned { .. })));
    let (_, v3) = fake_redistributor(3, false);
    assert_eq!(v3.make_resident(vprop, 16, vpt), Err(ItsError::NoVirtualLpis));
    assert_eq!(v3.make_non_resident(), Err(ItsError::NoVirtualLpis));
}

#[test]
fn leaving_waits_for_dirty_and_reports_pending_last() {
    let mut reads = [VPENDBASER_DIRTY, VPENDBASER_DIRTY, VPENDBASER_PENDING_LAST].into_iter();
    assert_eq!(settle(|| reads.next().unwrap(), 10), Ok(VPENDBASER_PENDING_LAST));
    let mut count = 0;
    assert_eq!(
        settle(
            || {
                count += 1;
                VPENDBASER_DIRTY
            },
            10
        ),
        Err(ItsError::StillDirty)
    );
    assert_eq!(count, 10, "bounded");
}

#[test]
fn the_gic_hands_out_a_cpus_redistributor_once_found() {
    use crate::gic::Gic;
    use hyp_core::platform::{GicDescription, GicVersion, PhysRange};
    let gicd = Regs::new(0x1_0000);
    let (rd, _) = fake_redistributor(3, true);
    rd.write64(GICR_TYPER, rd.read64(GICR_TYPER) | 1 << 4); // Last
    let description = GicDescription {
        version: GicVersion::V3,
        distributor: PhysRange { base: gicd.0 as u64, size: 0x1_0000 },
        redistributors: Some(PhysRange { base: rd.0 as u64, size: 0x4_0000 }),
        cpu_interface: None,
        hyp_interface: None,
        virtual_cpu_interface: None,
        maintenance_intid: Some(25),
        its: None,
    };
    // SAFETY: `init_distributor` first; the frames are leaked memory, never freed.
    let gic: Gic<NoCpu> = unsafe { Gic::new() };
    // SAFETY: as above.
    unsafe { gic.init_distributor(&description) };
    assert!(gic.lpi_redistributor(0).is_none(), "not before init_cpu");
    gic.init_cpu(0, 3, &[]).unwrap();
    let found = gic.lpi_redistributor(0).unwrap();
    assert_eq!((found.address(), found.processor_number()), (rd.0 as u64, 3));
    assert!(gic.lpi_redistributor(crate::its::MAX_CPUS).is_none());
}
