//! The block device over a backend that finishes requests later (as the hypervisor's board
//! disk does): completions in any order finish the right chains (virtio 1.2 2.7.8), a busy
//! backend leaves chains on the available ring until a completion, a device reset or a
//! queue taken down makes late completions finish nothing, a failed request fails alone,
//! and a malformed request still gets its error without reaching the backend.

mod common;

use common::*;
use vdev::virtio::block::*;
use vdev::virtio::memory::{GuestMemory, Segment};
use vdev::virtio::transport::regs;

const ID: [u8; 20] = *b"hyp-disk-serial-0001";

/// One request the backend took: what it was and what the device needs to finish it.
#[derive(Debug)]
struct Taken {
    write: bool,
    flush: bool,
    sector: u64,
    segments: Vec<Segment>,
    pending: Pending,
}

/// A disk in memory that takes up to `limit` requests at once and moves their data only
/// when the test completes them.
struct LaterDisk {
    disk: RamDisk,
    limit: usize,
    taken: Vec<Option<Taken>>,
    /// Times the device asked it to start a request.
    starts: usize,
    resets: usize,
}

impl LaterDisk {
    fn new(limit: usize) -> LaterDisk {
        LaterDisk { disk: RamDisk::new(64, false, ID), limit, taken: Vec::new(), starts: 0, resets: 0 }
    }
    fn in_flight(&self) -> usize {
        self.taken.iter().flatten().count()
    }
}

impl BlockBackend for LaterDisk {
    fn capacity_sectors(&self) -> u64 {
        self.disk.capacity_sectors()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn device_id(&self) -> [u8; 20] {
        ID
    }
    fn start(&mut self, _: &dyn GuestMemory, request: BlockRequest<'_>, pending: Pending) -> Started {
        self.starts += 1;
        if self.in_flight() == self.limit {
            return Started::Busy;
        }
        let taken = match request {
            BlockRequest::Read { sector, segments } => {
                Taken { write: false, flush: false, sector, segments: segments.to_vec(), pending }
            }
            BlockRequest::Write { sector, segments } => {
                Taken { write: true, flush: false, sector, segments: segments.to_vec(), pending }
            }
            BlockRequest::Flush => Taken { write: false, flush: true, sector: 0, segments: vec![], pending },
        };
        self.taken.push(Some(taken));
        Started::Queued
    }
    fn reset(&mut self) {
        self.resets += 1;
    }
}

type Blk = Driver<VirtioBlock<LaterDisk>>;

fn blk(limit: usize) -> Blk {
    let mut d = Driver::standard(VirtioBlock::new(LaterDisk::new(limit)));
    for s in 0..64u8 {
        d.mmio.device_mut().backend_mut().disk.data_mut()[s as usize * 512..][..512].fill(s);
    }
    d
}

fn header(kind: u32, sector: u64) -> Vec<u8> {
    let mut h = kind.to_le_bytes().to_vec();
    h.extend_from_slice(&[0; 4]);
    h.extend_from_slice(&sector.to_le_bytes());
    h
}

/// A request made available (not notified): its head, its data buffer and its status byte.
fn add(d: &mut Blk, kind: u32, sector: u64, len: u32) -> (u16, u64, u64) {
    let h = d.alloc_with(&header(kind, sector));
    let data = d.alloc(len as usize, 0xee);
    let st = d.alloc(1, 0xff);
    let data_buf = if kind == VIRTIO_BLK_T_IN { wr(data, len) } else { ro(data, len) };
    let head = d.add_chain(0, &[ro(h, 16), data_buf, wr(st, 1)]);
    (head, data, st)
}

/// The test completes request `i` of the backend (in the order it took them): the data
/// moves, then the device finishes the chain as the hypervisor's completion path does.
fn complete(d: &mut Blk, i: usize, ok: bool) {
    let taken = d.mmio.device_mut().backend_mut().taken[i].take().expect("in flight");
    let result = if !ok {
        Err(BlockError::Io)
    } else if taken.flush {
        Ok(())
    } else if taken.write {
        d.mmio.device_mut().backend_mut().disk.write(&d.mem, taken.sector, &taken.segments)
    } else {
        d.mmio.device_mut().backend_mut().disk.read(&d.mem, taken.sector, &taken.segments)
    };
    let _ = d.mmio.run(&d.mem, |blk, q| {
        blk.complete(taken.pending, result, q)?;
        vdev::virtio::VirtioDevice::queue_notify(blk, 0, q)
    });
}

#[test]
fn completions_in_any_order_finish_the_right_chains_with_the_right_status() {
    let mut d = blk(8);
    let a = add(&mut d, VIRTIO_BLK_T_IN, 3, 512);
    let b = add(&mut d, VIRTIO_BLK_T_IN, 5, 1024);
    let c = add(&mut d, VIRTIO_BLK_T_IN, 9, 512);
    d.notify(0);
    assert_eq!(d.used_idx(0), 0, "nothing finished during the notify");
    assert_eq!(d.mmio.device_mut().backend_mut().in_flight(), 3);
    assert_eq!(d.read(regs::INTERRUPT_STATUS), 0, "no interrupt before a completion");

    complete(&mut d, 2, false);
    complete(&mut d, 0, true);
    complete(&mut d, 1, true);
    let used = d.take_used(0);
    assert_eq!(
        used,
        [(u32::from(c.0), 1), (u32::from(a.0), 513), (u32::from(b.0), 1025)],
        "in completion order; a failed read wrote only its status byte"
    );
    assert_eq!(d.peek(c.2, 1)[0], VIRTIO_BLK_S_IOERR, "the failed request alone");
    assert_eq!(d.peek(a.2, 1)[0], VIRTIO_BLK_S_OK);
    assert_eq!(d.peek(b.2, 1)[0], VIRTIO_BLK_S_OK);
    assert_eq!(d.peek(a.1, 512), vec![3u8; 512]);
    assert_eq!(d.peek(b.1, 1024), [[5u8; 512], [6; 512]].concat());
    assert_eq!(d.read(regs::INTERRUPT_STATUS) & 1, 1, "used-buffer interrupt");
    let stats = d.mmio.device().stats();
    assert_eq!((stats.requests, stats.errors), (3, 1));
    let incidents = d.mmio.take_incidents();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
}

#[test]
fn a_busy_backend_leaves_chains_on_the_ring_in_order_and_they_are_served_after_completions() {
    let mut d = blk(2);
    let heads: Vec<_> = (0..5).map(|i| add(&mut d, VIRTIO_BLK_T_IN, i, 512)).collect();
    d.notify(0);
    assert_eq!(d.mmio.device_mut().backend_mut().in_flight(), 2, "the backend's bound");
    assert_eq!(d.mmio.queue(0).unwrap().last_avail, 2, "three chains wait on the available ring");
    assert!(d.mmio.device().waiting());
    let sectors = |d: &mut Blk| -> Vec<u64> {
        d.mmio.device_mut().backend_mut().taken.iter().flatten().map(|t| t.sector).collect()
    };
    assert_eq!(sectors(&mut d), [0, 1]);

    complete(&mut d, 1, true);
    assert_eq!(sectors(&mut d), [0, 2], "the next chain in ring order, taken at the completion");
    complete(&mut d, 0, true);
    complete(&mut d, 2, true);
    complete(&mut d, 3, true);
    assert_eq!(d.mmio.queue(0).unwrap().last_avail, 5);
    assert!(!d.mmio.device().waiting());
    complete(&mut d, 4, true);
    let mut used: Vec<_> = d.take_used(0).into_iter().map(|(head, _)| head).collect();
    used.sort();
    let mut expected: Vec<_> = heads.iter().map(|h| u32::from(h.0)).collect();
    expected.sort();
    assert_eq!(used, expected, "every chain served once, none dropped");
    for (i, (_, data, st)) in heads.iter().enumerate() {
        assert_eq!(d.peek(*st, 1)[0], VIRTIO_BLK_S_OK);
        assert_eq!(d.peek(*data, 512), vec![i as u8; 512]);
    }
}

#[test]
fn after_a_device_reset_a_late_completion_touches_neither_the_new_rings_nor_the_status() {
    let mut d = blk(8);
    let (_, _, st) = add(&mut d, VIRTIO_BLK_T_OUT, 1, 512);
    d.notify(0);
    let resets = d.mmio.device_mut().backend_mut().resets;
    // The driver resets the device and sets it up again: the same ring addresses, zeroed.
    d.reinit(!vdev::virtio::features::VIRTIO_F_EVENT_IDX);
    assert!(d.mmio.device_mut().backend_mut().resets > resets, "the backend was told");
    d.ack_interrupt();
    complete(&mut d, 0, true);
    assert_eq!(d.used_idx(0), 0, "the new used ring is untouched");
    assert_eq!(d.peek(st, 1)[0], 0xff, "the status byte is not written");
    assert_eq!(d.read(regs::INTERRUPT_STATUS), 0, "no interrupt");

    // A request of the new generation finishes as usual.
    let (head, _, st) = add(&mut d, VIRTIO_BLK_T_IN, 2, 512);
    d.notify(0);
    complete(&mut d, 1, true);
    assert_eq!(d.take_used(0), [(u32::from(head), 513)]);
    assert_eq!(d.peek(st, 1)[0], VIRTIO_BLK_S_OK);
}

#[test]
fn a_queue_taken_down_and_set_up_again_gets_no_late_completion() {
    let mut d = blk(8);
    add(&mut d, VIRTIO_BLK_T_IN, 1, 512);
    d.notify(0);
    d.write(regs::QUEUE_SEL, 0);
    d.write(regs::QUEUE_READY, 0);
    // The same rings, zeroed, made ready again.
    let used = d.queues[0].used;
    d.mem.write(used, &[0; 16]).unwrap();
    d.write(regs::QUEUE_READY, 1);
    assert_eq!(d.read(regs::QUEUE_READY), 1);
    d.queues[0].last_used = 0;
    complete(&mut d, 0, true);
    assert_eq!(d.used_idx(0), 0, "the late completion wrote nothing");
}

#[test]
fn malformed_requests_get_their_error_without_reaching_the_backend() {
    let mut d = blk(8);
    // A read whose data buffer is device-readable.
    let h = d.alloc_with(&header(VIRTIO_BLK_T_IN, 0));
    let data = d.alloc(512, 0);
    let st = d.alloc(1, 0xff);
    let bad = d.add_chain(0, &[ro(h, 16), ro(data, 512), wr(st, 1)]);
    // A write beyond the disk.
    let h2 = d.alloc_with(&header(VIRTIO_BLK_T_OUT, 64));
    let st2 = d.alloc(1, 0xff);
    let beyond = d.add_chain(0, &[ro(h2, 16), ro(data, 512), wr(st2, 1)]);
    // A data buffer outside RAM.
    let h3 = d.alloc_with(&header(VIRTIO_BLK_T_IN, 0));
    let st3 = d.alloc(1, 0xff);
    let outside = d.add_chain(0, &[ro(h3, 16), wr(RAM_BASE + RAM_SIZE as u64, 512), wr(st3, 1)]);
    d.notify(0);
    assert_eq!(d.mmio.device_mut().backend_mut().starts, 0, "the backend saw none of them");
    assert_eq!(d.take_used(0), [(u32::from(bad), 1), (u32::from(beyond), 1), (u32::from(outside), 1)]);
    for st in [st, st2, st3] {
        assert_eq!(d.peek(st, 1)[0], VIRTIO_BLK_S_IOERR);
    }
    // No status byte at all: the device needs a reset, with or without requests in flight.
    add(&mut d, VIRTIO_BLK_T_IN, 0, 512);
    let h4 = d.alloc_with(&header(VIRTIO_BLK_T_IN, 0));
    d.add_chain(0, &[ro(h4, 16)]);
    d.notify(0);
    assert!(d.needs_reset());
    assert_eq!(d.mmio.device_mut().backend_mut().in_flight(), 1);
    complete(&mut d, 0, true);
    assert_eq!(d.used_idx(0), 3, "a device that needs a reset finishes nothing more");
}
