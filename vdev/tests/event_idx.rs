//! VIRTIO_F_EVENT_IDX (2.7.7.2, 2.7.10): the device writes avail_event and interrupts exactly
//! when used->idx passes the driver's used_event.

mod common;

use common::*;
use vdev::virtio::block::{RamDisk, VirtioBlock};
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::features::VIRTIO_F_EVENT_IDX;
use vdev::virtio::net::VirtioNet;
use vdev::virtio::GuestMemory;

fn console() -> Driver<VirtioConsole<Screen>> {
    let d = Driver::new(VirtioConsole::new(Screen::default()), !0);
    assert_ne!(d.mmio.negotiated_features() & VIRTIO_F_EVENT_IDX, 0);
    d
}

/// Transmits `n` one-byte chains in one notify; returns whether the interrupt line rose.
fn transmit(d: &mut Driver<VirtioConsole<Screen>>, n: usize) -> bool {
    let b = d.alloc(1, b'.');
    for _ in 0..n {
        d.add_chain(1, &[ro(b, 1)]);
    }
    d.notify(1);
    let level = d.mmio.interrupt_level();
    d.ack_interrupt();
    level
}

/// The definition in words: interrupt when used_event lies in [old, new), modulo 2^16.
fn expected(used_event: u16, old: u16, new: u16) -> bool {
    used_event.wrapping_sub(old) < new.wrapping_sub(old)
}

#[test]
fn the_device_publishes_avail_event_after_processing() {
    let mut d = console();
    transmit(&mut d, 3);
    assert_eq!(d.avail_event(1), 3);
    transmit(&mut d, 2);
    assert_eq!(d.avail_event(1), 5);
}

#[test]
fn interrupts_come_only_when_used_idx_passes_used_event() {
    let mut d = console();
    d.set_used_event(1, 2);
    assert!(!transmit(&mut d, 1), "used idx 1: not yet");
    assert!(!transmit(&mut d, 1), "used idx 2: not yet");
    assert!(transmit(&mut d, 1), "used idx 3: entry 2 used, interrupt");
    assert!(!transmit(&mut d, 1), "used idx 4: used_event left behind");
}

#[test]
fn a_batch_crossing_used_event_interrupts_once_and_one_ending_before_it_does_not() {
    let mut d = console();
    d.set_used_event(1, 1);
    assert!(transmit(&mut d, 3));
    d.set_used_event(1, 10);
    assert!(!transmit(&mut d, 3));
    assert!(!transmit(&mut d, 4), "used idx 10: entry 10 not used yet");
    assert!(transmit(&mut d, 1));
}

#[test]
fn with_event_idx_the_no_interrupt_flag_is_ignored() {
    let mut d = console();
    d.set_avail_flags(1, 1);
    d.set_used_event(1, 0);
    assert!(transmit(&mut d, 1));
}

#[test]
fn interrupt_decisions_match_vring_need_event_for_many_positions() {
    let mut d = console();
    let mut old = 0u16;
    for step in 0..300u32 {
        let n = (step % 5 + 1) as usize;
        let used_event = old.wrapping_add((step * 7 % 9) as u16).wrapping_sub(2);
        d.set_used_event(1, used_event);
        let new = old.wrapping_add(n as u16);
        assert_eq!(
            transmit(&mut d, n),
            expected(used_event, old, new),
            "step {step}: event {used_event} old {old} new {new}"
        );
        old = new;
    }
    assert_eq!(d.used_idx(1), old);
}

#[test]
fn received_frames_follow_used_event_too() {
    let mut d = Driver::new(VirtioNet::new([2, 0, 0, 0, 0, 9], NoNet), !0);
    let b = d.alloc(4 * 128, 0);
    for k in 0..4 {
        d.add_chain(0, &[wr(b + 128 * k, 128)]);
    }
    d.set_used_event(0, 1);
    d.mmio.receive_frame(&d.mem, &[1; 60]).unwrap();
    assert!(!d.mmio.interrupt_level());
    d.mmio.receive_frame(&d.mem, &[2; 60]).unwrap();
    assert!(d.mmio.interrupt_level());
}

#[test]
fn without_event_idx_every_batch_interrupts() {
    let mut d = Driver::standard(VirtioConsole::new(Screen::default()));
    for _ in 0..5 {
        assert!(transmit(&mut d, 1));
    }
}

/// Guest memory as a driver on another vCPU sees it while the device serves a notify: each
/// time the device reads queue `queue`'s available index, the driver has published one
/// more chain (the head `head` again, its last instance already used), `left` times in all.
struct RacingDriver<'a> {
    mem: &'a vdev::virtio::VecMemory,
    avail: u64,
    size: u16,
    head: u16,
    left: std::cell::Cell<u32>,
}

impl GuestMemory for RacingDriver<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), vdev::virtio::GuestMemoryError> {
        if addr == self.avail + 2 && self.left.get() > 0 {
            self.left.set(self.left.get() - 1);
            let mut idx = [0u8; 2];
            self.mem.read(self.avail + 2, &mut idx)?;
            let idx = u16::from_le_bytes(idx);
            let slot = self.avail + 4 + 2 * u64::from(idx % self.size);
            self.mem.write(slot, &self.head.to_le_bytes())?;
            self.mem.write(self.avail + 2, &idx.wrapping_add(1).to_le_bytes())?;
        }
        self.mem.read(addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), vdev::virtio::GuestMemoryError> {
        self.mem.write(addr, data)
    }
    fn check(&self, addr: u64, len: u64) -> Result<(), vdev::virtio::GuestMemoryError> {
        self.mem.check(addr, len)
    }
}

/// Notifies `queue` (whose first chain, `head`, the driver made available) while a driver on
/// another vCPU keeps adding a chain each time the device looks, up to six queues' worth,
/// more than one notify takes; then the driver adds nothing more and notifies no more (with
/// EVENT_IDX it notifies only when its index passes avail_event). Returns how many chains
/// the driver made available.
fn notify_while_racing<D: vdev::virtio::VirtioDevice>(d: &mut Driver<D>, queue: usize, head: u16) -> u32 {
    let dq = d.queues[queue].clone();
    let racing = 6 * u32::from(dq.size);
    let racer = RacingDriver { mem: &d.mem, avail: dq.avail, size: dq.size, head, left: std::cell::Cell::new(racing) };
    d.mmio.write(&racer, vdev::virtio::transport::regs::QUEUE_NOTIFY, 4, queue as u64).unwrap();
    let made_available = 1 + racing - racer.left.get();
    assert!(racer.left.get() > 0, "the notify stopped at its budget: {made_available} chains made available");
    // The driver's next chain would not be notified (2.7.10): only the device can go on.
    let idx = d.peek16(dq.avail + 2);
    assert!(!expected(d.avail_event(queue), idx, idx.wrapping_add(1)), "the driver would notify");
    made_available
}

/// How many chains of `queue` were used, once the device had gone on with what it left for
/// later, as at the VM's next exits.
fn used_after_continuing<D: vdev::virtio::VirtioDevice>(d: &mut Driver<D>, queue: usize) -> usize {
    let mut turns = 0;
    while d.mmio.has_pending_work() {
        d.mmio.continue_work(&d.mem);
        turns += 1;
        assert!(turns < 100, "it ends");
    }
    d.take_used(queue).len()
}

/// A notify takes at most four queues' worth of chains (a racing driver cannot hold the exit
/// for ever), and the chains it left are served later without another notify: with
/// EVENT_IDX, the driver notifies again only when its index passes avail_event, which the
/// device had not moved past the chains it left, so they would wait for ever.
#[test]
fn chains_a_notify_left_for_its_budget_are_served_without_another_notify() {
    let mut nic = Driver::new(VirtioNet::new([2, 0, 0, 0, 0, 9], common::NoNet), !0);
    assert_ne!(nic.mmio.negotiated_features() & VIRTIO_F_EVENT_IDX, 0);
    let frame = nic.alloc(72, 0);
    let head = nic.add_chain(1, &[ro(frame, 72)]);
    let available = notify_while_racing(&mut nic, 1, head);
    assert_eq!(used_after_continuing(&mut nic, 1), available as usize, "every frame is sent");
    // What a driver's reset leaves is not served for the next driver's queues.
    notify_while_racing(&mut nic, 1, head);
    assert!(nic.mmio.has_pending_work());
    nic.reinit(!0);
    assert!(!nic.mmio.has_pending_work(), "the old queue's chains are forgotten");

    let mut disk = Driver::new(VirtioBlock::new(RamDisk::new(8, false, [7; 20])), !0);
    let (header, status) = (disk.alloc(16, 0), disk.alloc(1, 0xff));
    // A flush: a header and the status byte (5.2.6).
    disk.mem.write(header, &4u32.to_le_bytes()).unwrap();
    let head = disk.add_chain(0, &[ro(header, 16), wr(status, 1)]);
    let available = notify_while_racing(&mut disk, 0, head);
    assert_eq!(used_after_continuing(&mut disk, 0), available as usize, "every request is served");
}
