//! The block device (5.2) driven like a driver would: reads, writes, flush, GET_ID, errors,
//! multi-segment and indirect requests.

mod common;

use common::*;
use vdev::virtio::block::*;
use vdev::virtio::features::{VIRTIO_F_EVENT_IDX, VIRTIO_F_VERSION_1};
use vdev::virtio::transport::regs;
use vdev::virtio::DeviceIncident;

const ID: [u8; 20] = *b"hyp-disk-serial-0001";
type Blk = Driver<VirtioBlock<RamDisk>>;

fn blk(sectors: usize, read_only: bool) -> Blk {
    Driver::standard(VirtioBlock::new(RamDisk::new(sectors, read_only, ID)))
}

fn header(kind: u32, sector: u64) -> Vec<u8> {
    let mut h = kind.to_le_bytes().to_vec();
    h.extend_from_slice(&[0; 4]);
    h.extend_from_slice(&sector.to_le_bytes());
    h
}

/// Submits header + data buffers + status byte (direct or indirect), notifies, and returns
/// the status byte and the used length.
fn submit(d: &mut Blk, kind: u32, sector: u64, data: &[Buf], indirect: bool) -> (u8, u32) {
    let h = d.alloc_with(&header(kind, sector));
    let st = d.alloc(1, 0xff);
    let mut bufs = vec![ro(h, 16)];
    bufs.extend_from_slice(data);
    bufs.push(wr(st, 1));
    let head = if indirect { d.add_indirect(0, &bufs) } else { d.add_chain(0, &bufs) };
    d.notify(0);
    let used = d.take_used(0);
    assert_eq!(used.len(), 1, "one request, one used element");
    assert_eq!(used[0].0, u32::from(head));
    (d.peek(st, 1)[0], used[0].1)
}

#[test]
fn features_offer_flush_seg_max_blk_size_and_ro_only_when_read_only() {
    let mut rw = Driver::bare(VirtioBlock::new(RamDisk::new(8, false, ID)));
    let f = rw.device_features();
    assert_ne!(f & VIRTIO_BLK_F_FLUSH, 0);
    assert_ne!(f & VIRTIO_BLK_F_SEG_MAX, 0);
    assert_ne!(f & VIRTIO_BLK_F_SIZE_MAX, 0);
    assert_eq!(rw.mmio.read(0x108, 4), Ok(u64::from(SIZE_MAX)), "size_max");
    assert_eq!(rw.mmio.read(0x10c, 4), Ok(u64::from(SEG_MAX)), "seg_max");
    assert_ne!(f & VIRTIO_BLK_F_BLK_SIZE, 0);
    assert_eq!(f & VIRTIO_BLK_F_RO, 0);
    let mut ro_disk = Driver::bare(VirtioBlock::new(RamDisk::new(8, true, ID)));
    assert_ne!(ro_disk.device_features() & VIRTIO_BLK_F_RO, 0);
}

#[test]
fn a_written_sector_reads_back_and_lands_on_the_backend() {
    let mut d = blk(64, false);
    let pattern: Vec<u8> = (0..1024).map(|i| (i * 7) as u8).collect();
    let src = d.alloc_with(&pattern);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_OUT, 3, &[ro(src, 1024)], false), (VIRTIO_BLK_S_OK, 1));
    assert_eq!(&d.mmio.device().backend().data()[3 * 512..5 * 512], &pattern[..]);
    let dst = d.alloc(1024, 0);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 3, &[wr(dst, 1024)], false), (VIRTIO_BLK_S_OK, 1025));
    assert_eq!(d.peek(dst, 1024), pattern);
    assert!(d.mmio.interrupt_level());
    assert!(d.mmio.take_incidents().is_empty());
    assert_eq!(d.mem.refused_accesses(), 0);
}

#[test]
fn multi_segment_requests_scatter_and_gather_in_order_even_with_a_split_header() {
    let mut d = blk(64, false);
    let parts: Vec<Vec<u8>> = (0..3).map(|k| vec![k as u8 + 1; 512]).collect();
    let a = d.alloc_with(&parts[0][..256]);
    let b = d.alloc_with(&[&parts[0][256..], &parts[1][..]].concat());
    let c = d.alloc_with(&parts[2]);
    // The header split across two descriptors: framing is free (2.6.4).
    let h = d.alloc_with(&header(VIRTIO_BLK_T_OUT, 10));
    let st = d.alloc(1, 0xff);
    d.add_chain(0, &[ro(h, 5), ro(h + 5, 11), ro(a, 256), ro(b, 768), ro(c, 512), wr(st, 1)]);
    d.notify(0);
    assert_eq!(d.peek(st, 1), [VIRTIO_BLK_S_OK]);
    assert_eq!(d.take_used(0).len(), 1);
    assert_eq!(&d.mmio.device().backend().data()[10 * 512..13 * 512], &parts.concat()[..]);

    let x = d.alloc(1000, 0);
    let y = d.alloc(536, 0);
    // Data buffers split off sector boundaries.
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 10, &[wr(x, 1000), wr(y, 536)], false).1, 1537);
    let mut got = d.peek(x, 1000);
    got.extend(d.peek(y, 536));
    assert_eq!(&got[..1536], &parts.concat()[..]);
}

#[test]
fn indirect_descriptors_carry_a_whole_request() {
    let mut d = blk(64, false);
    let data = vec![0x5a; 2048];
    let src = d.alloc_with(&data);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_OUT, 0, &[ro(src, 1024), ro(src + 1024, 1024)], true).0, VIRTIO_BLK_S_OK);
    let dst = d.alloc(2048, 0);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 0, &[wr(dst, 2048)], true), (VIRTIO_BLK_S_OK, 2049));
    assert_eq!(d.peek(dst, 2048), data);
}

#[test]
fn flush_reaches_the_backend() {
    let mut d = blk(8, false);
    let src = d.alloc(512, 1);
    submit(&mut d, VIRTIO_BLK_T_OUT, 0, &[ro(src, 512)], false);
    assert_eq!(d.mmio.device().backend().writes_since_flush(), 1);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_FLUSH, 0, &[], false), (VIRTIO_BLK_S_OK, 1));
    assert_eq!(d.mmio.device().backend().flushes(), 1);
    assert_eq!(d.mmio.device().backend().writes_since_flush(), 0);
}

#[test]
fn get_id_writes_the_backend_serial() {
    let mut d = blk(8, false);
    let dst = d.alloc(20, 0);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_GET_ID, 0, &[wr(dst, 20)], false), (VIRTIO_BLK_S_OK, 21));
    assert_eq!(d.peek(dst, 20), ID);
}

#[test]
fn requests_beyond_the_capacity_fail_with_ioerr_and_touch_nothing() {
    let mut d = blk(8, false);
    let src = d.alloc(1024, 9);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_OUT, 7, &[ro(src, 1024)], false), (VIRTIO_BLK_S_IOERR, 1));
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, u64::MAX, &[wr(src, 512)], false).0, VIRTIO_BLK_S_IOERR);
    assert!(d.mmio.device().backend().data().iter().all(|&b| b == 0));
    assert_eq!(d.peek(src, 1024), vec![9; 1024]);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 7, &[wr(src, 512)], false).0, VIRTIO_BLK_S_OK, "last sector fine");
    assert!(!d.needs_reset());
}

#[test]
fn a_read_only_disk_refuses_writes_with_ioerr() {
    let mut d = blk(8, true);
    let src = d.alloc(512, 7);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_OUT, 0, &[ro(src, 512)], false), (VIRTIO_BLK_S_IOERR, 1));
    assert!(d.mmio.device().backend().data().iter().all(|&b| b == 0));
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 0, &[wr(src, 512)], false).0, VIRTIO_BLK_S_OK);
}

#[test]
fn unsupported_request_types_get_unsupp() {
    let mut d = blk(8, false);
    for kind in [2u32, 11, 13, 0xffff_ffff] {
        assert_eq!(submit(&mut d, kind, 0, &[], false), (VIRTIO_BLK_S_UNSUPP, 1), "type {kind}");
    }
    assert_eq!(d.mmio.device().stats().unsupported, 4);
    assert!(!d.needs_reset());
}

#[test]
fn a_data_length_not_a_multiple_of_512_fails_with_ioerr() {
    let mut d = blk(8, false);
    let src = d.alloc(700, 3);
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_OUT, 0, &[ro(src, 700)], false), (VIRTIO_BLK_S_IOERR, 1));
    assert!(matches!(d.mmio.take_incidents()[..], [DeviceIncident::BadLength { .. }]));
}

#[test]
fn a_short_header_fails_with_ioerr() {
    let mut d = blk(8, false);
    let h = d.alloc_with(&header(VIRTIO_BLK_T_IN, 0));
    let st = d.alloc(1, 0xff);
    d.add_chain(0, &[ro(h, 8), wr(st, 1)]);
    d.notify(0);
    assert_eq!(d.peek(st, 1), [VIRTIO_BLK_S_IOERR]);
}

#[test]
fn used_buffer_interrupts_follow_no_interrupt_flag_without_event_idx() {
    let mut d = Driver::new(VirtioBlock::new(RamDisk::new(8, false, ID)), VIRTIO_F_VERSION_1);
    assert_eq!(d.mmio.negotiated_features() & VIRTIO_F_EVENT_IDX, 0);
    d.set_avail_flags(0, 1);
    submit(&mut d, VIRTIO_BLK_T_FLUSH, 0, &[], false);
    assert!(!d.mmio.interrupt_level());
    d.set_avail_flags(0, 0);
    submit(&mut d, VIRTIO_BLK_T_FLUSH, 0, &[], false);
    assert_eq!(d.read(regs::INTERRUPT_STATUS), 1);
}

#[test]
fn many_requests_in_one_notify_wrap_the_rings() {
    let mut d = Driver::new(VirtioBlock::new(RamDisk::new(8, false, ID)), !0);
    d.reinit(!0);
    let h = d.alloc_with(&header(VIRTIO_BLK_T_FLUSH, 0));
    let st = d.alloc(1, 0xff);
    for round in 0..3 {
        for _ in 0..200 {
            d.add_chain(0, &[ro(h, 16), wr(st, 1)]);
        }
        d.notify(0);
        assert_eq!(d.take_used(0).len(), 200, "round {round}");
    }
    assert_eq!(d.mmio.device().backend().flushes(), 600);
    assert_eq!(d.used_idx(0), 600);
}

#[test]
fn data_and_status_byte_may_share_one_writable_buffer() {
    let mut d = blk(8, false);
    d.mmio.device_mut().backend_mut().data_mut()[..512].fill(0x42);
    let h = d.alloc_with(&header(VIRTIO_BLK_T_IN, 0));
    let buf = d.alloc(513, 0xff);
    d.add_chain(0, &[ro(h, 16), wr(buf, 513)]);
    d.notify(0);
    assert_eq!(d.take_used(0), [(0, 513)]);
    assert_eq!(d.peek(buf, 512), vec![0x42; 512]);
    assert_eq!(d.peek(buf + 512, 1), [VIRTIO_BLK_S_OK]);
}

/// A read that asks for more than the advertised limits: two overlapping 32 MiB buffers
/// (any VM can ask for that much with two descriptors), a segment just over size_max, or one
/// segment more than seg_max. Each fails with IOERR and reads nothing (the request that once
/// made the hypervisor allocate a 32 MiB bounce buffer and panic).
#[test]
fn requests_beyond_size_max_or_seg_max_fail_with_ioerr_before_any_data_moves() {
    let mut d = Driver::standard_with_ram(VirtioBlock::new(RamDisk::new(1 << 17, false, ID)), 40 << 20);
    let buf = d.alloc(32 << 20, 0xaa);
    let huge = [wr(buf, 32 << 20), wr(buf, 32 << 20)];
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 0, &huge, true).0, VIRTIO_BLK_S_IOERR);
    let over = [wr(buf, SIZE_MAX + 512)];
    assert_eq!(submit(&mut d, VIRTIO_BLK_T_IN, 0, &over, true).0, VIRTIO_BLK_S_IOERR);
    // seg_max + 1 data segments fit a full indirect table when the status byte shares the
    // last data buffer.
    let h = d.alloc_with(&header(VIRTIO_BLK_T_IN, 0));
    let last = d.alloc(513, 0xaa);
    let mut too_many = vec![ro(h, 16)];
    too_many.extend((0..SEG_MAX).map(|_| wr(buf, 512)));
    too_many.push(wr(last, 513));
    d.add_indirect(0, &too_many);
    d.notify(0);
    assert_eq!(d.take_used(0).len(), 1);
    assert_eq!(d.peek(last + 512, 1), [VIRTIO_BLK_S_IOERR]);
    assert!(d.peek(buf, 32 << 20).iter().all(|&b| b == 0xaa), "nothing was read into the buffers");
    let incidents = d.mmio.take_incidents();
    assert!(
        incidents.iter().any(|i| i.to_string().contains("longer than size_max"))
            && incidents.iter().any(|i| i.to_string().contains("more data segments than seg_max")),
        "{incidents:?}"
    );
    // Exactly at the limits works: seg_max segments (they may overlap), one of size_max.
    let sectors = SEG_MAX as usize - 1 + SIZE_MAX as usize / 512;
    let mut big = Driver::standard(VirtioBlock::new(RamDisk::new(sectors, false, ID)));
    let buf = big.alloc(SIZE_MAX as usize, 0);
    let mut at_limit: Vec<Buf> = (1..SEG_MAX).map(|_| wr(buf, 512)).collect();
    at_limit.push(wr(buf, SIZE_MAX));
    assert_eq!(submit(&mut big, VIRTIO_BLK_T_IN, 0, &at_limit, true), (VIRTIO_BLK_S_OK, sectors as u32 * 512 + 1));
}
