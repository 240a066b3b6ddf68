//! The console device (5.3): output to the backend, typed input into receive buffers with a
//! bounded backlog delivered later.

mod common;

use common::*;
use vdev::virtio::console::*;
use vdev::virtio::DeviceIncident;

type Con = Driver<VirtioConsole<Screen>>;

fn console() -> Con {
    Driver::standard(VirtioConsole::new(Screen::default()))
}

#[test]
fn transmitted_bytes_reach_the_backend_in_order() {
    let mut d = console();
    let a = d.alloc_with(b"hello, ");
    let b = d.alloc_with(b"world\n");
    let long: Vec<u8> = (0..1000).map(|i| b'a' + (i % 26) as u8).collect();
    let c = d.alloc_with(&long);
    d.add_chain(1, &[ro(a, 7), ro(b, 6)]);
    d.add_chain(1, &[ro(c, 1000)]);
    d.notify(1);
    assert_eq!(d.mmio.device().backend().0, [b"hello, world\n".to_vec(), long].concat());
    assert_eq!(d.take_used(1), [(0, 0), (2, 0)]);
}

#[test]
fn malformed_transmit_chains_are_used_empty_with_an_incident() {
    let mut d = console();
    let a = d.alloc(8, b'z');
    d.add_chain(1, &[wr(a, 8)]);
    d.add_chain(1, &[ro(0x10, 8)]);
    d.notify(1);
    assert!(d.mmio.device().backend().0.is_empty());
    assert_eq!(d.take_used(1), [(0, 0), (1, 0)]);
    assert_eq!(d.mmio.take_incidents().len(), 2);
    assert_eq!(d.mem.refused_accesses(), 0);
}

#[test]
fn typed_input_fills_receive_buffers_and_reports_bytes_written() {
    let mut d = console();
    let a = d.alloc(4, 0);
    let b = d.alloc(4, 0);
    d.add_chain(0, &[wr(a, 4)]);
    d.add_chain(0, &[wr(b, 4)]);
    d.notify(0);
    assert_eq!(d.mmio.receive_input(&d.mem, b"ls -l\n"), 6);
    assert_eq!(d.peek(a, 4), b"ls -");
    assert_eq!(d.peek(b, 2), b"l\n");
    assert_eq!(d.take_used(0), [(0, 4), (1, 2)]);
    assert!(d.mmio.interrupt_level());
    assert_eq!(d.mmio.device().backlog_len(), 0);
}

#[test]
fn input_without_buffers_waits_in_the_backlog_and_arrives_when_buffers_are_added() {
    let mut d = console();
    assert_eq!(d.mmio.receive_input(&d.mem, b"echo hi\n"), 8);
    assert_eq!(d.mmio.device().backlog_len(), 8);
    let a = d.alloc(5, 0);
    let b = d.alloc(16, 0);
    d.add_chain(0, &[wr(a, 5)]);
    d.notify(0);
    assert_eq!(d.peek(a, 5), b"echo ");
    assert_eq!(d.mmio.device().backlog_len(), 3);
    d.add_chain(0, &[wr(b, 16)]);
    d.notify(0);
    assert_eq!(d.peek(b, 3), b"hi\n");
    assert_eq!(d.take_used(0), [(0, 5), (1, 3)]);
}

#[test]
fn input_before_the_driver_is_running_is_kept_across_its_reset() {
    let mut d = Driver::bare(VirtioConsole::new(Screen::default()));
    assert_eq!(d.mmio.receive_input(&d.mem, b"early"), 5);
    d.init(!0, None).unwrap();
    let a = d.alloc(8, 0);
    d.add_chain(0, &[wr(a, 8)]);
    d.notify(0);
    assert_eq!(d.peek(a, 5), b"early");
    // A power-on reset (VM reboot) forgets it.
    d.mmio.receive_input(&d.mem, b"late");
    d.mmio.reset();
    assert_eq!(d.mmio.device().backlog_len(), 0);
}

#[test]
fn the_backlog_is_bounded_and_counts_what_it_drops() {
    let mut d = console();
    let big = vec![b'x'; BACKLOG_CAPACITY + 100];
    assert_eq!(d.mmio.receive_input(&d.mem, &big), BACKLOG_CAPACITY);
    assert_eq!(d.mmio.receive_input(&d.mem, b"more"), 0);
    assert_eq!(d.mmio.device().stats().rx_dropped, 104);
    // Buffers free room: new input is accepted again.
    let a = d.alloc(1000, 0);
    d.add_chain(0, &[wr(a, 1000)]);
    d.notify(0);
    assert_eq!(d.mmio.device().backlog_len(), BACKLOG_CAPACITY - 1000);
    assert_eq!(d.mmio.receive_input(&d.mem, b"more"), 4);
}

#[test]
fn input_larger_than_the_backlog_is_accepted_when_buffers_take_it() {
    let mut d = console();
    let bufs: Vec<u64> = (0..3).map(|_| d.alloc(4096, 0)).collect();
    for &b in &bufs {
        d.add_chain(0, &[wr(b, 4096)]);
    }
    let big: Vec<u8> = (0..10000).map(|i| (i % 256) as u8).collect();
    assert_eq!(d.mmio.receive_input(&d.mem, &big), 10000);
    let got: Vec<u8> = bufs.iter().flat_map(|&b| d.peek(b, 4096)).collect();
    assert_eq!(&got[..10000], &big[..]);
}

#[test]
fn a_device_readable_receive_buffer_is_used_empty_and_the_next_one_taken() {
    let mut d = console();
    let a = d.alloc(4, 0x77);
    let b = d.alloc(4, 0);
    d.add_chain(0, &[ro(a, 4)]);
    d.add_chain(0, &[wr(b, 4)]);
    assert_eq!(d.mmio.receive_input(&d.mem, b"ok"), 2);
    assert_eq!(d.peek(a, 4), [0x77; 4]);
    assert_eq!(d.peek(b, 2), b"ok");
    assert_eq!(d.take_used(0), [(0, 0), (1, 2)]);
    assert!(matches!(d.mmio.take_incidents()[..], [DeviceIncident::WrongDirection { .. }]));
}

/// One notify writes out at most TX_BUDGET bytes; the rest goes out, in order and whole, on
/// later turns (`continue_work`, at the VM's next exits), and a chain is used only once all
/// of it is out: a guest that queues megabytes of output cannot hold an exit for seconds.
#[test]
fn output_beyond_the_budget_of_one_exit_goes_out_on_later_turns_in_order_and_whole() {
    let mut d = Driver::standard_with_ram(VirtioConsole::new(Screen::default()), 4 << 20);
    let mut expected = Vec::new();
    for n in 0..3u8 {
        let bytes: Vec<u8> = (0..MAX_TX_CHAIN).map(|i| b'a' + ((i as u8).wrapping_add(n)) % 26).collect();
        let at = d.alloc_with(&bytes);
        d.add_chain(1, &[ro(at, MAX_TX_CHAIN as u32)]);
        expected.extend(bytes);
    }
    d.notify(1);
    assert_eq!(d.mmio.device().backend().0.len() as u64, TX_BUDGET, "one notify, one budget");
    assert!(d.take_used(1).is_empty(), "no chain is used before all of it is out");
    assert!(d.mmio.has_pending_work());
    let mut turns = 1;
    while d.mmio.has_pending_work() {
        let before = d.mmio.device().backend().0.len() as u64;
        d.mmio.continue_work(&d.mem);
        assert!(d.mmio.device().backend().0.len() as u64 - before <= TX_BUDGET);
        turns += 1;
        assert!(turns < 1000, "it ends");
    }
    assert_eq!(d.mmio.device().backend().0, expected, "nothing lost, nothing reordered");
    assert_eq!(d.take_used(1), [(0, 0), (1, 0), (2, 0)]);
    assert_eq!(turns as u64, 3 * MAX_TX_CHAIN / TX_BUDGET, "a budget a turn, and no empty turn at the end");
}

#[test]
fn a_driver_reset_forgets_output_in_progress() {
    let mut d = console();
    let long = vec![b'x'; 3000];
    let at = d.alloc_with(&long);
    d.add_chain(1, &[ro(at, 3000)]);
    d.notify(1);
    assert!(d.mmio.has_pending_work());
    d.reinit(!vdev::virtio::features::VIRTIO_F_EVENT_IDX);
    assert!(!d.mmio.has_pending_work(), "the old queue's chain is not the new driver's");
    d.mmio.continue_work(&d.mem);
    assert_eq!(d.mmio.device().backend().0.len() as u64, TX_BUDGET);
}
