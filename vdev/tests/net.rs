//! The network device (5.1): transmit to the backend without the header, receive into guest
//! buffers with a zeroed header, drops counted.

mod common;

use common::*;
use vdev::virtio::features::status;
use vdev::virtio::net::*;
use vdev::virtio::transport::regs;
use vdev::virtio::DeviceIncident;

#[derive(Default)]
struct Wire(Vec<Vec<u8>>);
impl NetBackend for Wire {
    fn transmit(&mut self, frame: &[u8]) -> bool {
        self.0.push(frame.to_vec());
        true
    }
}

const MAC: [u8; 6] = [0x52, 0x54, 0, 0xab, 0xcd, 0xef];
type Net = Driver<VirtioNet<Wire>>;

fn net() -> Net {
    Driver::standard(VirtioNet::new(MAC, Wire::default()))
}

fn frame(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn features_are_mac_and_status_only() {
    let mut d = Driver::bare(VirtioNet::new(MAC, Wire::default()));
    let f = d.device_features() & 0xffff_ffff & !(3 << 28);
    assert_eq!(f, VIRTIO_NET_F_MAC | VIRTIO_NET_F_STATUS);
}

#[test]
fn transmitted_frames_reach_the_backend_without_the_header() {
    let mut d = net();
    let f = frame(60);
    let hdr = d.alloc(NET_HDR_LEN, 0);
    let body = d.alloc_with(&f);
    d.add_chain(TRANSMITQ as usize, &[ro(hdr, 12), ro(body, 60)]);
    // A frame in one buffer with its header, too (framing is free, 2.6.4).
    let whole = d.alloc_with(&[vec![0; 12], f.clone()].concat());
    d.add_chain(TRANSMITQ as usize, &[ro(whole, 72)]);
    d.notify(TRANSMITQ as usize);
    assert_eq!(d.mmio.device().backend().0, vec![f.clone(), f]);
    assert_eq!(d.take_used(1).iter().map(|u| u.1).collect::<Vec<_>>(), [0, 0]);
    assert_eq!(d.mmio.device().stats().tx_frames, 2);
    assert!(d.mmio.interrupt_level());
}

#[test]
fn transmit_chains_that_are_writable_or_too_short_are_dropped_and_used_empty() {
    let mut d = net();
    let buf = d.alloc(100, 0);
    d.add_chain(1, &[ro(buf, 12), wr(buf + 12, 60)]);
    d.add_chain(1, &[ro(buf, 11)]);
    d.add_chain(1, &[ro(buf, 12), ro(RAM_BASE + RAM_SIZE as u64 - 8, 60)]);
    d.notify(1);
    assert!(d.mmio.device().backend().0.is_empty());
    assert_eq!(d.take_used(1).iter().map(|u| u.1).collect::<Vec<_>>(), [0, 0, 0]);
    assert_eq!(d.mmio.device().stats().tx_dropped, 3);
    let incidents = d.mmio.take_incidents();
    assert!(matches!(
        incidents[..],
        [
            DeviceIncident::WrongDirection { .. },
            DeviceIncident::BadLength { .. },
            DeviceIncident::DescriptorOutsideRam { .. }
        ]
    ));
    assert!(!d.needs_reset());
    assert_eq!(d.mem.refused_accesses(), 0);
}

#[test]
fn received_frames_land_in_guest_buffers_after_a_zeroed_header_with_num_buffers_one() {
    let mut d = net();
    let buf = d.alloc(1526, 0xee);
    let head = d.add_chain(RECEIVEQ as usize, &[wr(buf, 1526)]);
    d.ack_interrupt();
    let f = frame(100);
    d.mmio.receive_frame(&d.mem, &f).unwrap();
    assert_eq!(d.peek(buf, 12), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(d.peek(buf + 12, 100), f);
    assert_eq!(d.peek(buf + 112, 1), [0xee], "nothing written past the frame");
    assert_eq!(d.take_used(0), [(u32::from(head), 112)]);
    assert!(d.mmio.interrupt_level());
    assert_eq!(d.mmio.device().stats().rx_frames, 1);
}

#[test]
fn a_received_frame_may_span_several_buffers_of_one_chain() {
    let mut d = net();
    let a = d.alloc(10, 0);
    let b = d.alloc(100, 0);
    d.add_chain(0, &[wr(a, 10), wr(b, 100)]);
    let f = frame(90);
    d.mmio.receive_frame(&d.mem, &f).unwrap();
    let mut got = d.peek(a, 10);
    got.extend(d.peek(b, 100));
    assert_eq!(&got[12..102], &f[..]);
    assert_eq!(got[10], 1, "num_buffers");
}

#[test]
fn without_a_receive_buffer_the_frame_is_dropped_and_counted() {
    let mut d = net();
    assert_eq!(d.mmio.receive_frame(&d.mem, &frame(60)), Err(RxError::NoBuffer));
    assert_eq!(d.mmio.receive_frame(&d.mem, &frame(60)), Err(RxError::NoBuffer));
    assert_eq!(d.mmio.device().stats().rx_dropped_no_buffer, 2);
    assert!(!d.mmio.interrupt_level());
}

#[test]
fn before_driver_ok_frames_are_refused_as_not_ready() {
    let mut d = Driver::bare(VirtioNet::new(MAC, Wire::default()));
    assert_eq!(d.mmio.receive_frame(&d.mem, &frame(60)), Err(RxError::NotReady));
    d.write(regs::STATUS, status::ACKNOWLEDGE);
    assert_eq!(d.mmio.receive_frame(&d.mem, &frame(60)), Err(RxError::NotReady));
    assert_eq!(d.mmio.device().stats().rx_dropped_not_ready, 2);
}

#[test]
fn a_frame_too_big_for_the_buffer_is_dropped_and_the_buffer_kept_for_the_next() {
    let mut d = net();
    let buf = d.alloc(112, 0);
    let head = d.add_chain(0, &[wr(buf, 112)]);
    assert_eq!(d.mmio.receive_frame(&d.mem, &frame(101)), Err(RxError::TooBig { len: 101, room: 112 }));
    assert_eq!(d.used_idx(0), 0);
    d.mmio.receive_frame(&d.mem, &frame(100)).unwrap();
    assert_eq!(d.take_used(0), [(u32::from(head), 112)]);
    assert!(matches!(d.mmio.receive_frame(&d.mem, &frame(MAX_FRAME + 1)), Err(RxError::TooBig { .. })));
}

#[test]
fn a_device_readable_receive_buffer_is_returned_empty_and_the_frame_dropped() {
    let mut d = net();
    let buf = d.alloc(200, 0x11);
    let head = d.add_chain(0, &[ro(buf, 200)]);
    assert_eq!(d.mmio.receive_frame(&d.mem, &frame(60)), Err(RxError::BadBuffer));
    assert_eq!(d.take_used(0), [(u32::from(head), 0)]);
    assert_eq!(d.peek(buf, 200), vec![0x11; 200]);
    assert!(matches!(d.mmio.take_incidents()[..], [DeviceIncident::WrongDirection { queue: 0, .. }]));
}

#[test]
fn config_space_carries_the_mac_and_link_up() {
    let mut d = net();
    let mac: Vec<u8> = (0..6).map(|i| d.mmio.read(0x100 + i, 1).unwrap() as u8).collect();
    assert_eq!(mac, MAC);
    assert_eq!(d.mmio.read(0x106, 2), Ok(u64::from(VIRTIO_NET_S_LINK_UP)));
}

/// A backend that takes `room` frames, then is not ready until the test empties it; with
/// `refuse`, it has no memory for any frame.
#[derive(Default)]
struct Port {
    sent: Vec<Vec<u8>>,
    room: usize,
    refuse: bool,
}
impl NetBackend for Port {
    fn transmit(&mut self, frame: &[u8]) -> bool {
        if self.refuse {
            return false;
        }
        self.sent.push(frame.to_vec());
        true
    }
    fn ready(&self) -> bool {
        self.sent.len() < self.room
    }
}

#[test]
fn a_backend_that_is_not_ready_leaves_the_rest_of_the_queue_for_later_and_drops_nothing() {
    let mut d = Driver::standard(VirtioNet::new(MAC, Port { room: 2, ..Port::default() }));
    let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(60 + i)).collect();
    for f in &frames {
        let at = d.alloc_with(&[vec![0; 12], f.clone()].concat());
        d.add_chain(TRANSMITQ as usize, &[ro(at, 12 + f.len() as u32)]);
    }
    d.notify(TRANSMITQ as usize);
    assert_eq!(d.mmio.device().backend().sent, frames[..2], "one exit takes what the backend has room for");
    assert_eq!(d.take_used(1).len(), 2, "the others stay in the queue, not used");
    assert!(d.mmio.has_pending_work());
    d.mmio.continue_work(&d.mem);
    assert_eq!(d.take_used(1).len(), 0, "still no room: nothing moves");
    let mut sent = core::mem::take(&mut d.mmio.device_mut().backend_mut().sent);
    while d.mmio.has_pending_work() {
        d.mmio.continue_work(&d.mem);
        sent.append(&mut d.mmio.device_mut().backend_mut().sent);
    }
    assert_eq!(sent, frames, "every frame, in order");
    assert_eq!(d.take_used(1).len(), 3);
    let stats = d.mmio.device().stats();
    assert_eq!((stats.tx_frames, stats.tx_dropped), (5, 0));
}

#[test]
fn a_frame_the_backend_has_no_memory_for_is_dropped_counted_and_used() {
    let mut d = Driver::standard(VirtioNet::new(MAC, Port { room: usize::MAX, refuse: true, ..Port::default() }));
    let at = d.alloc_with(&[vec![0; 12], frame(60)].concat());
    d.add_chain(TRANSMITQ as usize, &[ro(at, 72)]);
    d.notify(TRANSMITQ as usize);
    assert_eq!(d.take_used(1), [(0, 0)]);
    assert_eq!(d.mmio.device().stats().tx_dropped, 1);
    assert!(matches!(d.mmio.take_incidents()[..], [DeviceIncident::RequestFailed { .. }]));
}
