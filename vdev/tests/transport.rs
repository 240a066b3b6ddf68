//! The virtio-mmio register window (4.2.2): identification, feature negotiation, queue set-up,
//! access widths and directions, status and reset.

mod common;

use common::*;
use vdev::virtio::block::{RamDisk, VirtioBlock};
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::features::{status, TRANSPORT_FEATURES, VIRTIO_F_EVENT_IDX, VIRTIO_F_VERSION_1};
use vdev::virtio::net::{NetBackend, VirtioNet};
use vdev::virtio::transport::{regs, MAGIC, VENDOR_ID};
use vdev::virtio::{ConsoleBackend, DeviceIncident, GuestMemory, RegisterError};

#[derive(Default)]
struct Sink(Vec<u8>);
impl ConsoleBackend for Sink {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}
struct NoNet;
impl NetBackend for NoNet {
    fn transmit(&mut self, _frame: &[u8]) -> bool {
        true
    }
}

fn disk() -> VirtioBlock<RamDisk> {
    VirtioBlock::new(RamDisk::new(64, false, *b"test-disk-0000000000"))
}

#[test]
fn identification_registers_read_magic_version_device_and_vendor() {
    let mut b = Driver::bare(disk());
    assert_eq!(b.read(regs::MAGIC_VALUE), MAGIC);
    assert_eq!(b.read(regs::MAGIC_VALUE), 0x7472_6976);
    assert_eq!(b.read(regs::VERSION), 2);
    assert_eq!(b.read(regs::DEVICE_ID), 2);
    assert_eq!(b.read(regs::VENDOR_ID), VENDOR_ID);
    let mut n = Driver::bare(VirtioNet::new([2, 0, 0, 0, 0, 1], NoNet));
    assert_eq!(n.read(regs::DEVICE_ID), 1);
    let mut c = Driver::bare(VirtioConsole::new(Sink::default()));
    assert_eq!(c.read(regs::DEVICE_ID), 3);
    assert_eq!(c.read(regs::CONFIG_GENERATION), 0);
}

#[test]
fn device_features_include_the_transport_bits_and_high_selectors_read_zero() {
    let mut d = Driver::bare(VirtioConsole::new(Sink::default()));
    assert_eq!(d.device_features(), TRANSPORT_FEATURES);
    d.write(regs::DEVICE_FEATURES_SEL, 2);
    assert_eq!(d.read(regs::DEVICE_FEATURES), 0);
}

#[test]
fn negotiation_of_a_subset_sets_features_ok_and_reports_negotiated_features() {
    let mut d = Driver::bare(disk());
    d.init(VIRTIO_F_VERSION_1, None).unwrap();
    assert_eq!(d.mmio.negotiated_features(), VIRTIO_F_VERSION_1);
    assert_eq!(d.mmio.status() & 0xf, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK);
    assert!(d.mmio.take_incidents().is_empty());
}

#[test]
fn features_ok_is_refused_when_the_driver_accepts_an_unoffered_feature() {
    let mut d = Driver::bare(VirtioConsole::new(Sink::default()));
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    d.write_driver_features(VIRTIO_F_VERSION_1 | 1 << 3);
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    assert_eq!(d.read(regs::STATUS) & status::FEATURES_OK, 0);
    assert!(matches!(d.mmio.take_incidents()[..], [DeviceIncident::FeaturesRefused { .. }]));
    // DRIVER_OK without FEATURES_OK is refused too.
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::DRIVER_OK);
    assert_eq!(d.read(regs::STATUS) & status::DRIVER_OK, 0);
    assert_eq!(d.mmio.take_incidents(), vec![DeviceIncident::DriverOkWithoutFeaturesOk]);
}

#[test]
fn features_ok_is_refused_without_version_1_and_for_bits_beyond_the_second_word() {
    let mut d = Driver::bare(disk());
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    d.write_driver_features(VIRTIO_F_EVENT_IDX);
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    assert_eq!(d.read(regs::STATUS) & status::FEATURES_OK, 0);

    d.write(regs::STATUS, 0);
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    d.write_driver_features(VIRTIO_F_VERSION_1);
    d.write(regs::DRIVER_FEATURES_SEL, 2);
    d.write(regs::DRIVER_FEATURES, 1);
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    assert_eq!(d.read(regs::STATUS) & status::FEATURES_OK, 0);
}

#[test]
fn driver_features_written_after_features_ok_are_ignored() {
    let mut d = Driver::standard(disk());
    let before = d.mmio.negotiated_features();
    d.write(regs::DRIVER_FEATURES_SEL, 0);
    d.write(regs::DRIVER_FEATURES, 0);
    assert_eq!(d.mmio.negotiated_features(), before);
    assert_eq!(d.mmio.take_incidents(), vec![DeviceIncident::FeaturesAfterFeaturesOk]);
}

#[test]
fn queue_num_max_and_queue_ready_read_zero_beyond_the_last_queue_and_writes_there_are_ignored() {
    let mut d = Driver::bare(disk());
    d.write(regs::QUEUE_SEL, 0);
    assert_eq!(d.read(regs::QUEUE_NUM_MAX), 256);
    d.write(regs::QUEUE_SEL, 1);
    assert_eq!(d.read(regs::QUEUE_NUM_MAX), 0);
    assert_eq!(d.read(regs::QUEUE_READY), 0);
    d.write(regs::QUEUE_NUM, 16);
    d.write(regs::QUEUE_READY, 1);
    assert_eq!(d.read(regs::QUEUE_READY), 0);
    d.write(regs::QUEUE_SEL, u32::MAX);
    assert_eq!(d.read(regs::QUEUE_NUM_MAX), 0);
    d.write(regs::QUEUE_NOTIFY, 7);
    let incidents = d.mmio.take_incidents();
    assert_eq!(incidents.len(), 3, "{incidents:?}");
    assert!(incidents.iter().all(|i| matches!(i, DeviceIncident::NoSuchQueue { .. })));
    let mut n = Driver::bare(VirtioNet::new([2, 0, 0, 0, 0, 1], NoNet));
    n.write(regs::QUEUE_SEL, 1);
    assert_eq!(n.read(regs::QUEUE_NUM_MAX), 256);
    n.write(regs::QUEUE_SEL, 2);
    assert_eq!(n.read(regs::QUEUE_NUM_MAX), 0);
}

#[test]
fn queue_num_not_a_power_of_two_or_above_the_maximum_leaves_the_queue_not_ready() {
    for num in [0u32, 3, 100, 512] {
        let mut d = Driver::bare(disk());
        assert_eq!(d.init(!0, Some(num)).unwrap_err(), "queue not ready", "QueueNum {num}");
        let incidents = d.mmio.take_incidents();
        assert!(
            matches!(incidents[..], [DeviceIncident::BadQueueSize { queue: 0, num: n, max: 256 }] if n == num),
            "{num}: {incidents:?}"
        );
    }
    // A smaller power of two is fine.
    let mut d = Driver::bare(disk());
    d.init(!0, Some(8)).unwrap();
}

#[test]
fn rings_outside_ram_or_misaligned_leave_the_queue_not_ready() {
    let mut d = Driver::bare(disk());
    d.write(regs::QUEUE_SEL, 0);
    d.write(regs::QUEUE_NUM, 16);
    d.write(regs::QUEUE_DESC_LOW, 0x1000);
    d.write(regs::QUEUE_DRIVER_LOW, (RAM_BASE + 0x2000) as u32);
    d.write(regs::QUEUE_DEVICE_LOW, (RAM_BASE + 0x3000) as u32);
    d.write(regs::QUEUE_READY, 1);
    assert_eq!(d.read(regs::QUEUE_READY), 0);
    d.write(regs::QUEUE_DESC_LOW, (RAM_BASE + 0x1008) as u32);
    d.write(regs::QUEUE_READY, 1);
    assert_eq!(d.read(regs::QUEUE_READY), 0);
    d.write(regs::QUEUE_DESC_LOW, (RAM_BASE + 0x1000) as u32);
    d.write(regs::QUEUE_READY, 1);
    assert_eq!(d.read(regs::QUEUE_READY), 1);
    let incidents = d.mmio.take_incidents();
    assert_eq!(incidents.len(), 2);
    assert!(matches!(incidents[0], DeviceIncident::BadRingAddress { what: "descriptor table", addr: 0x1000, .. }));
}

#[test]
fn queue_registers_cannot_change_while_the_queue_is_ready() {
    let mut d = Driver::standard(disk());
    d.write(regs::QUEUE_SEL, 0);
    d.write(regs::QUEUE_DESC_LOW, 0);
    d.write(regs::QUEUE_NUM, 2);
    assert_eq!(d.mmio.queue(0).unwrap().desc, d.queues[0].desc);
    assert_eq!(d.mmio.queue(0).unwrap().num, 256);
    let incidents = d.mmio.take_incidents();
    assert!(matches!(incidents[..], [DeviceIncident::QueueWriteWhileReady { queue: 0, offset: 0x80 }, _]));
}

#[test]
fn control_registers_take_only_aligned_32_bit_accesses() {
    let mut d = Driver::bare(disk());
    for (offset, width) in [(0u64, 1u8), (0, 2), (0, 8), (2, 4), (0x70, 2), (0x50, 1)] {
        assert_eq!(d.mmio.read(offset, width), Err(RegisterError::BadWidth { offset, width }));
        assert_eq!(d.mmio.write(&d.mem, offset, width, 0), Err(RegisterError::BadWidth { offset, width }));
    }
}

#[test]
fn read_only_write_only_and_missing_registers_are_refused() {
    let mut d = Driver::bare(disk());
    for offset in [regs::MAGIC_VALUE, regs::VERSION, regs::DEVICE_ID, regs::QUEUE_NUM_MAX, regs::INTERRUPT_STATUS] {
        assert_eq!(d.mmio.write(&d.mem, offset, 4, 1), Err(RegisterError::ReadOnly { offset }));
    }
    for offset in
        [regs::QUEUE_NOTIFY, regs::INTERRUPT_ACK, regs::QUEUE_SEL, regs::DRIVER_FEATURES, regs::QUEUE_DESC_LOW]
    {
        assert_eq!(d.mmio.read(offset, 4), Err(RegisterError::WriteOnly { offset }));
    }
    for offset in [0x018u64, 0x0c0, 0x0f8, 0x200, 0x1000, u64::MAX - 3] {
        assert_eq!(d.mmio.read(offset, 4), Err(RegisterError::NoRegister { offset }), "{offset:#x}");
    }
    assert_eq!(d.read(regs::MAGIC_VALUE), MAGIC, "nothing changed");
    let msg = RegisterError::ReadOnly { offset: 0 }.to_string();
    assert!(msg.contains("read-only"), "{msg}");
}

#[test]
fn legacy_only_registers_read_as_zero_and_ignore_writes_with_an_incident() {
    // virtio 1.2 4.2.4: GuestPageSize (0x028), QueueAlign (0x03c) and QueuePFN (0x040) exist
    // in the legacy layout only; an old driver probing them must not get an external abort.
    let mut d = Driver::bare(disk());
    d.mmio.take_incidents();
    assert!(!d.mmio.has_incidents());
    assert_eq!(d.mmio.read(regs::MAGIC_VALUE, 4), Ok(u64::from(MAGIC)));
    assert!(!d.mmio.has_incidents(), "a good read logs nothing");
    for offset in [regs::LEGACY_GUEST_PAGE_SIZE, regs::LEGACY_QUEUE_ALIGN, regs::LEGACY_QUEUE_PFN] {
        assert_eq!(d.mmio.read(offset, 4), Ok(0), "{offset:#x}");
        assert!(d.mmio.has_incidents(), "{offset:#x}: the runtime takes and logs it (has_incidents)");
        assert_eq!(d.mmio.write(&d.mem, offset, 4, 0x1000), Ok(()), "{offset:#x}");
        assert_eq!(d.mmio.read(offset, 4), Ok(0), "{offset:#x}: the write kept nothing");
    }
    let incidents = d.mmio.take_incidents();
    assert!(!d.mmio.has_incidents(), "taken");
    assert_eq!(incidents.len(), 9);
    assert_eq!(incidents[1], DeviceIncident::LegacyRegister { offset: 0x28, write: true });
    assert!(incidents[0].to_string().contains("read of legacy register 0x28 on a version 2 device: reads as zero"));
    assert_eq!(d.read(regs::VERSION), 2, "the driver then finds version 2");
    assert_eq!(d.mmio.read(0x2a, 2), Err(RegisterError::BadWidth { offset: 0x2a, width: 2 }), "widths still apply");
}

#[test]
fn config_space_accepts_natural_widths_and_a_64_bit_read_of_capacity() {
    let mut d = Driver::bare(disk());
    assert_eq!(d.mmio.read(0x100, 8), Ok(64));
    assert_eq!(d.mmio.read(0x100, 4), Ok(64));
    assert_eq!(d.mmio.read(0x104, 4), Ok(0));
    assert_eq!(d.mmio.read(0x10c, 4), Ok(254), "seg_max");
    assert_eq!(d.mmio.read(0x114, 4), Ok(512), "blk_size");
    assert_eq!(d.mmio.read(0x114, 2), Ok(512));
    assert_eq!(d.mmio.read(0x115, 1), Ok(2));
    assert_eq!(d.mmio.read(0x10c, 8), Err(RegisterError::BadWidth { offset: 0x10c, width: 8 }));
    assert_eq!(d.mmio.read(0x101, 2), Err(RegisterError::BadWidth { offset: 0x101, width: 2 }));
    assert_eq!(d.mmio.read(0x100, 3), Err(RegisterError::BadWidth { offset: 0x100, width: 3 }));
    assert_eq!(d.mmio.read(0x1fc, 4), Err(RegisterError::NoRegister { offset: 0x1fc }));
    assert_eq!(d.mmio.write(&d.mem, 0x100, 4, 1), Err(RegisterError::ReadOnly { offset: 0x100 }));
    assert_eq!(d.mmio.write(&d.mem, 0x1f0, 4, 1), Err(RegisterError::NoRegister { offset: 0x1f0 }));
    let mut n = Driver::bare(VirtioNet::new([0x52, 0x54, 0, 0x12, 0x34, 0x56], NoNet));
    let mac: Vec<u8> = (0..6).map(|i| n.mmio.read(0x100 + i, 1).unwrap() as u8).collect();
    assert_eq!(mac, [0x52, 0x54, 0, 0x12, 0x34, 0x56]);
    assert_eq!(n.mmio.read(0x106, 2), Ok(1), "link up");
}

#[test]
fn writing_zero_to_status_resets_the_device_and_it_can_be_initialised_again() {
    let mut d = Driver::standard(disk());
    d.write(regs::STATUS, 0);
    assert_eq!(d.read(regs::STATUS), 0);
    assert_eq!(d.mmio.negotiated_features(), 0);
    d.write(regs::QUEUE_SEL, 0);
    assert_eq!(d.read(regs::QUEUE_READY), 0);
    assert!(!d.mmio.interrupt_level());
    d.reinit(!0);
    d.write(regs::QUEUE_SEL, 0);
    assert_eq!(d.read(regs::QUEUE_READY), 1);
}

#[test]
fn the_driver_cannot_clear_status_bits_or_set_needs_reset() {
    let mut d = Driver::standard(disk());
    d.write(regs::STATUS, status::ACKNOWLEDGE);
    assert_ne!(d.read(regs::STATUS) & status::DRIVER_OK, 0);
    d.write(regs::STATUS, status::DEVICE_NEEDS_RESET | status::ACKNOWLEDGE);
    assert_eq!(d.read(regs::STATUS) & status::DEVICE_NEEDS_RESET, 0);
}

#[test]
fn power_on_reset_returns_every_register_to_its_initial_value() {
    let mut d = Driver::standard(disk());
    d.write(regs::QUEUE_SEL, 9);
    d.mmio.reset();
    assert_eq!(d.mmio.status(), 0);
    assert_eq!(d.read(regs::QUEUE_NUM_MAX), 256, "QueueSel back to 0");
    assert_eq!(d.read(regs::QUEUE_READY), 0);
    assert!(d.mmio.take_incidents().is_empty());
}

#[test]
fn interrupt_ack_clears_only_the_acknowledged_bits() {
    let mut d = Driver::standard(VirtioConsole::new(Sink::default()));
    let buf = d.alloc(4, b'x');
    d.add_chain(1, &[ro(buf, 4)]);
    d.notify(1);
    assert!(d.mmio.interrupt_level());
    assert_eq!(d.read(regs::INTERRUPT_STATUS), 1);
    d.write(regs::INTERRUPT_ACK, 2);
    assert!(d.mmio.interrupt_level());
    d.write(regs::INTERRUPT_ACK, 1);
    assert!(!d.mmio.interrupt_level());
    assert_eq!(d.mmio.device().backend().0, b"xxxx");
}

#[test]
fn notifications_before_driver_ok_wait_until_driver_ok_is_set() {
    let mut d = Driver::bare(VirtioConsole::new(Sink::default()));
    // Set everything up but DRIVER_OK, by hand.
    d.init(!0, None).unwrap();
    d.write(regs::STATUS, 0);
    d.init(!0, None).unwrap();
    let buf = d.alloc(2, b'k');
    d.write(regs::STATUS, 0);
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    d.write_driver_features(VIRTIO_F_VERSION_1);
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    for q in 0..2u32 {
        let dq = d.queues[q as usize].clone();
        d.mem.write(dq.desc, &vec![0; 0x3000]).unwrap();
        d.queues[q as usize].avail_idx = 0;
        d.queues[q as usize].next_desc = 0;
        d.queues[q as usize].last_used = 0;
        d.write(regs::QUEUE_SEL, q);
        d.write(regs::QUEUE_NUM, u32::from(dq.size));
        d.write(regs::QUEUE_DESC_LOW, dq.desc as u32);
        d.write(regs::QUEUE_DRIVER_LOW, dq.avail as u32);
        d.write(regs::QUEUE_DEVICE_LOW, dq.used as u32);
        d.write(regs::QUEUE_READY, 1);
    }
    d.add_chain(1, &[ro(buf, 2)]);
    d.notify(1);
    assert!(d.mmio.device().backend().0.is_empty());
    d.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK);
    assert_eq!(d.mmio.device().backend().0, b"kk");
}
