//! A device a side core polls (docs/virtio.md, "The side core"): the guest's notifies only
//! mark their queue, the side core's passes do the work with notifies suppressed
//! (VIRTIO_F_EVENT_IDX's avail_event, 2.7.10; else VIRTQ_USED_F_NO_NOTIFY, 2.7.8), and when
//! it goes to sleep a chain made available while notifies were off is still found.

mod common;

use common::*;
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::features::VIRTIO_F_EVENT_IDX;
use vdev::virtio::net::VirtioNet;
use vdev::virtio::poll::{PollLoop, Step};
use vdev::virtio::queue::{vring_need_event, VIRTQ_USED_F_NO_NOTIFY};

const TX: usize = 1;

fn polled_console(wanted: u64) -> Driver<VirtioConsole<Screen>> {
    let mut d = Driver::new(VirtioConsole::new(Screen::default()), wanted);
    d.mmio.set_polled(true);
    d
}

/// What the guest's driver does after making chains available (2.7.13.4, Linux's
/// virtqueue_kick_prepare): with EVENT_IDX it notifies only if its index crossed
/// avail_event; without, unless the used ring's flags say NO_NOTIFY.
fn driver_would_notify(d: &Driver<VirtioConsole<Screen>>, old: u16) -> bool {
    let q = &d.queues[TX];
    if d.features & VIRTIO_F_EVENT_IDX != 0 {
        vring_need_event(d.avail_event(TX), q.avail_idx, old)
    } else {
        d.peek16(q.used) & VIRTQ_USED_F_NO_NOTIFY == 0
    }
}

fn add_byte(d: &mut Driver<VirtioConsole<Screen>>, byte: u8) -> u16 {
    let old = d.queues[TX].avail_idx;
    let b = d.alloc(1, byte);
    d.add_chain(TX, &[ro(b, 1)]);
    old
}

#[test]
fn a_notify_only_marks_the_queue_and_the_pass_does_the_work() {
    let mut d = polled_console(!0);
    add_byte(&mut d, b'a');
    d.notify(TX);
    assert!(d.mmio.device().backend().0.is_empty(), "the vCPU's exit ran no device work");
    let pass = d.mmio.poll(&d.mem, true);
    assert!(pass.took && pass.completed);
    assert_eq!(d.mmio.device().backend().0, b"a");
    assert_eq!(d.used_idx(TX), 1);
    // Nothing new: the pass finds nothing.
    assert!(!d.mmio.poll(&d.mem, true).active());
}

#[test]
fn while_polling_the_driver_is_told_not_to_notify_with_or_without_event_idx() {
    for wanted in [!0, !VIRTIO_F_EVENT_IDX] {
        let mut d = polled_console(wanted);
        // Before the first pass (the side core asleep) the driver notifies.
        let old = add_byte(&mut d, b'x');
        assert!(driver_would_notify(&d, old));
        d.mmio.poll(&d.mem, true);
        // While polling, chain after chain goes without a notify, however many.
        for i in 0..300u32 {
            let old = add_byte(&mut d, b'0' + (i % 10) as u8);
            assert!(!driver_would_notify(&d, old), "features {wanted:#x}, chain {i}");
            d.mmio.poll(&d.mem, true);
        }
        assert_eq!(d.mmio.device().backend().0.len(), 301);
        // Asleep: notifies are wanted again, from the very next chain.
        assert!(!d.mmio.enable_notifications(&d.mem));
        let old = add_byte(&mut d, b'y');
        assert!(driver_would_notify(&d, old), "features {wanted:#x}");
    }
}

#[test]
fn a_chain_made_available_as_notifies_come_back_is_found_not_lost() {
    let mut d = polled_console(!0);
    let mut p = PollLoop::new(10);
    p.begin_pass(0);
    d.mmio.poll(&d.mem, true);
    assert_eq!(p.end_pass(10, false, false), Step::EnableNotifications);
    // The driver publishes a chain and reads avail_event before the side core's store: it
    // sees the suppression and does not notify (2.7.10's race).
    let old = add_byte(&mut d, b'!');
    assert!(!driver_would_notify(&d, old));
    // The side core's look after enabling notifies finds it: it must not sleep.
    let pending = d.mmio.enable_notifications(&d.mem);
    assert!(pending);
    assert_eq!(p.notifications_enabled(11, pending), Step::Poll);
    d.mmio.poll(&d.mem, true);
    assert_eq!(d.mmio.device().backend().0, b"!");
    // Empty now: it may sleep.
    assert_eq!(p.end_pass(30, false, false), Step::EnableNotifications);
    assert_eq!(p.notifications_enabled(31, d.mmio.enable_notifications(&d.mem)), Step::Sleep);
}

#[test]
fn a_notify_while_asleep_is_found_by_the_next_pass_even_with_the_ring_read_before() {
    let mut d = polled_console(!0);
    d.mmio.poll(&d.mem, true);
    assert!(!d.mmio.enable_notifications(&d.mem));
    add_byte(&mut d, b'n');
    d.notify(TX);
    assert!(d.mmio.enable_notifications(&d.mem), "a marked queue keeps the core awake");
    assert!(d.mmio.poll(&d.mem, true).took);
    assert_eq!(d.mmio.device().backend().0, b"n");
}

#[test]
fn a_nics_receive_queue_stays_quiet_even_while_the_core_sleeps() {
    let mut d = Driver::new(VirtioNet::new([2, 0, 0, 0, 0, 9], NoNet), !0);
    d.mmio.set_polled(true);
    d.mmio.poll(&d.mem, true);
    assert!(!d.mmio.enable_notifications(&d.mem));
    // Receive buffers added: the device takes them when frames come, and never asks for a
    // notify for them (avail_event stays one behind).
    let b = d.alloc(2 * 128, 0);
    let old = d.queues[0].avail_idx;
    d.add_chain(0, &[wr(b, 128)]);
    d.add_chain(0, &[wr(b + 128, 128)]);
    assert!(!vring_need_event(d.avail_event(0), d.queues[0].avail_idx, old));
    d.mmio.receive_frame(&d.mem, &[7; 60]).unwrap();
    assert_eq!(d.used_idx(0), 1);
    // The transmit queue does want its notifies while the core sleeps.
    assert_eq!(d.avail_event(1), 0);
}

#[test]
fn a_reset_while_polled_starts_again_with_notifies_on() {
    let mut d = polled_console(!0);
    add_byte(&mut d, b'a');
    d.mmio.poll(&d.mem, true);
    d.reinit(!0);
    // The fresh queue is not suppressed until the next pass; a notify only marks it.
    let old = add_byte(&mut d, b'b');
    assert!(driver_would_notify(&d, old));
    d.notify(TX);
    assert!(d.mmio.poll(&d.mem, true).took);
    assert_eq!(d.mmio.device().backend().0, b"ab");
}
