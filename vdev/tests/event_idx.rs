//! VIRTIO_F_EVENT_IDX (2.7.7.2, 2.7.10): the device writes avail_event and interrupts exactly
//! when used->idx passes the driver's used_event.

mod common;

use common::*;
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::features::VIRTIO_F_EVENT_IDX;
use vdev::virtio::net::VirtioNet;

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
