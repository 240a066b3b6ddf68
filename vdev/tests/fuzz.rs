//! Property tests: random register accesses and random ring contents never panic, never make
//! the device touch memory outside RAM (VecMemory counts refused reads and writes), and a
//! reset always brings the device back.

mod common;

use common::*;
use proptest::prelude::*;
use vdev::virtio::block::{RamDisk, VirtioBlock, VIRTIO_BLK_S_OK, VIRTIO_BLK_T_FLUSH};
use vdev::virtio::console::{ConsoleBackend, VirtioConsole};
use vdev::virtio::net::{NetBackend, VirtioNet};
use vdev::virtio::{GuestMemory, VecMemory, VirtioDevice, VirtioMmio};

struct Sink;
impl ConsoleBackend for Sink {
    fn write(&mut self, _bytes: &[u8]) {}
}
impl NetBackend for Sink {
    fn transmit(&mut self, frame: &[u8]) -> bool {
        assert!(frame.len() <= 65550);
        true
    }
}

const DATA: u64 = RAM_BASE + 0x2_0000;
const TABLES: u64 = RAM_BASE + 0x3_0000;
const END: u64 = RAM_BASE + RAM_SIZE as u64;

/// Addresses a buggy or hostile driver might name: in RAM, at its edges, or outside.
fn address() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..0x1000).prop_map(|o| DATA + o),
        2 => (0u64..8).prop_map(|k| TABLES + 16 * k),
        1 => (0u64..64).prop_map(|o| END - o),
        1 => (0u64..64).prop_map(|o| END + o),
        1 => Just(0u64),
        1 => (0u64..64).prop_map(|o| u64::MAX - o),
        1 => any::<u64>(),
    ]
}

fn length() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..600, 1 => Just(16), 1 => Just(128), 1 => any::<u32>()]
}

#[derive(Clone, Debug)]
struct RawDesc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

fn desc() -> impl Strategy<Value = RawDesc> {
    // Mostly plausible flags (NEXT, WRITE), sometimes INDIRECT or garbage, so that chains get
    // both served and caught.
    let flags = prop_oneof![12 => 0u16..4, 2 => 0u16..8, 1 => any::<u16>()];
    (address(), length(), flags, prop_oneof![8 => 0u16..16, 1 => 16u16..20, 1 => any::<u16>()])
        .prop_map(|(addr, len, flags, next)| RawDesc { addr, len, flags, next })
}

#[derive(Clone, Debug)]
struct Rings {
    descs: Vec<RawDesc>,
    tables: Vec<RawDesc>,
    heads: Vec<u16>,
    avail_idx: u16,
    used_event: u16,
    avail_flags: u16,
    data: Vec<u8>,
    features: u64,
}

fn rings() -> impl Strategy<Value = Rings> {
    (
        prop::collection::vec(desc(), 16),
        prop::collection::vec(desc(), 8),
        prop::collection::vec(prop_oneof![4 => 0u16..16, 1 => any::<u16>()], 16),
        prop_oneof![4 => 0u16..17, 1 => any::<u16>()],
        any::<u16>(),
        0u16..4,
        prop::collection::vec(any::<u8>(), 0x1000),
        prop_oneof![Just(!0u64), Just(!vdev::virtio::features::VIRTIO_F_EVENT_IDX), Just(1u64 << 32)],
    )
        .prop_map(|(descs, tables, heads, avail_idx, used_event, avail_flags, data, features)| Rings {
            descs,
            tables,
            heads,
            avail_idx,
            used_event,
            avail_flags,
            data,
            features,
        })
}

/// Writes the random rings into queue `q` of an initialised driver.
fn fill<D: VirtioDevice>(d: &mut Driver<D>, q: usize, r: &Rings) {
    d.mem.write(DATA, &r.data).unwrap();
    // Some well-formed block headers among the noise, so requests get past the header check.
    for (k, kind) in [0u32, 1, 4, 8].iter().enumerate() {
        let at = DATA + 0x100 * k as u64;
        d.mem.write(at, &kind.to_le_bytes()).unwrap();
        d.mem.write(at + 8, &(k as u64).to_le_bytes()).unwrap();
    }
    for (i, t) in r.tables.iter().enumerate() {
        write_desc_at(&d.mem, TABLES + 16 * i as u64, t.addr, t.len, t.flags, t.next);
    }
    for (i, x) in r.descs.iter().enumerate() {
        d.write_desc(q, i as u16, x.addr, x.len, x.flags, x.next);
    }
    let dq = d.queues[q].clone();
    for (slot, &h) in r.heads.iter().enumerate() {
        d.poke16(dq.avail + 4 + 2 * slot as u64, h);
    }
    d.poke16(dq.avail + 2, r.avail_idx);
    d.set_avail_flags(q, r.avail_flags);
    d.set_used_event(q, r.used_event);
}

fn check_ring_bounds<D: VirtioDevice>(d: &Driver<D>) {
    assert_eq!(d.mem.refused_accesses(), 0, "the device tried to touch memory outside RAM");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn random_register_accesses_never_panic_or_touch_memory_outside_ram(
        ops in prop::collection::vec(
            (prop_oneof![4 => (0u64..0x80).prop_map(|o| o * 4), 1 => 0u64..0x220, 1 => any::<u64>()],
             prop_oneof![4 => Just(4u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(8u8), 1 => any::<u8>()],
             prop_oneof![3 => 0u64..300, 1 => (0u64..0x10000).prop_map(|o| RAM_BASE + o * 4), 1 => any::<u64>()],
             any::<bool>()),
            0..200),
        seed in any::<u8>(),
    ) {
        let mem = VecMemory::new(RAM_BASE, 0x4_0000);
        mem.write(RAM_BASE, &vec![seed; 0x4_0000]).unwrap();
        let mut blk = VirtioMmio::new(VirtioBlock::new(RamDisk::new(8, false, [0; 20])));
        let mut net = VirtioMmio::new(VirtioNet::new([2, 0, 0, 0, 0, 1], Sink));
        let mut con = VirtioMmio::new(VirtioConsole::new(Sink));
        for (offset, width, value, write) in ops {
            if write {
                let _ = blk.write(&mem, offset, width, value);
                let _ = net.write(&mem, offset, width, value);
                let _ = con.write(&mem, offset, width, value);
            } else {
                let _ = blk.read(offset, width);
                let _ = net.read(offset, width);
                let _ = con.read(offset, width);
            }
            let _ = net.receive_frame(&mem, &[0xaa; 60]);
            let _ = con.receive_input(&mem, b"x");
        }
        prop_assert_eq!(mem.refused_accesses(), 0);
        prop_assert!(blk.take_incidents().len() <= 17);
    }

    #[test]
    fn random_block_rings_never_panic_and_a_reset_recovers(r in rings()) {
        let mut d = Driver::bare(VirtioBlock::new(RamDisk::new(8, false, [0; 20])));
        d.init(r.features, Some(16)).unwrap();
        fill(&mut d, 0, &r);
        d.notify(0);
        d.notify(0);
        check_ring_bounds(&d);
        let _ = d.mmio.take_incidents();
        d.init(r.features, Some(16)).unwrap();
        let h = d.alloc_with(&[VIRTIO_BLK_T_FLUSH.to_le_bytes(), [0; 4], [0; 4], [0; 4]].concat());
        let st = d.alloc(1, 0xff);
        d.add_chain(0, &[ro(h, 16), wr(st, 1)]);
        d.notify(0);
        prop_assert_eq!(d.peek(st, 1), vec![VIRTIO_BLK_S_OK]);
    }

    #[test]
    fn random_net_rings_never_panic(r in rings(), frame_len in 0usize..2000) {
        let mut d = Driver::bare(VirtioNet::new([2, 0, 0, 0, 0, 1], Sink));
        d.init(r.features, Some(16)).unwrap();
        fill(&mut d, 0, &r);
        fill(&mut d, 1, &r);
        d.notify(1);
        for _ in 0..20 {
            let _ = d.mmio.receive_frame(&d.mem, &vec![0x55; frame_len]);
        }
        check_ring_bounds(&d);
    }

    #[test]
    fn random_console_rings_never_panic(r in rings(), input in prop::collection::vec(any::<u8>(), 0..5000)) {
        let mut d = Driver::bare(VirtioConsole::new(Sink));
        d.init(r.features, Some(16)).unwrap();
        fill(&mut d, 0, &r);
        fill(&mut d, 1, &r);
        d.notify(1);
        let accepted = d.mmio.receive_input(&d.mem, &input);
        prop_assert!(accepted <= input.len());
        d.notify(0);
        check_ring_bounds(&d);
    }
}

/// The random rings above are only worth something if they reach both outcomes: requests
/// served and driver bugs caught. Count them over a fixed number of cases.
#[test]
fn random_rings_reach_both_served_requests_and_needs_reset() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut broken, mut served, mut failed_requests) = (0, 0, 0);
    for _ in 0..300 {
        let r = rings().new_tree(&mut runner).unwrap().current();
        let mut d = Driver::bare(VirtioBlock::new(RamDisk::new(8, false, [0; 20])));
        d.init(r.features, Some(16)).unwrap();
        fill(&mut d, 0, &r);
        d.notify(0);
        check_ring_bounds(&d);
        broken += usize::from(d.needs_reset());
        served += usize::from(d.used_idx(0) > 0);
        failed_requests += d.mmio.device().stats().errors;
    }
    eprintln!("{broken} broken, {served} served, {failed_requests} failed");
    assert!(
        broken > 10 && served > 10 && failed_requests > 10,
        "{broken} broken, {served} served, {failed_requests} failed"
    );
}
