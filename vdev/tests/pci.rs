//! The virtio-pci transport driven as Linux's virtio_pci_modern driver drives it: discovery
//! through the configuration space, BAR sizing, MSI-X set-up, the common cfg, a block
//! request with its completion as one MSI-X message; then masking, the ISR, and the corners
//! a conformance suite or an attacker would try.

mod common;

use common::{write_desc_at, F_NEXT, F_WRITE, RAM_BASE, RAM_SIZE};
use proptest::prelude::*;
use vdev::virtio::block::{RamDisk, VirtioBlock, VIRTIO_BLK_S_OK, VIRTIO_BLK_T_IN};
use vdev::virtio::features::{status, VIRTIO_F_VERSION_1};
use vdev::virtio::pci::{common_field as cf, layout, Message, VirtioPci, BAR0_SIZE, NO_VECTOR};
use vdev::virtio::{DeviceIncident, GuestMemory, RegisterError, VecMemory};

const ID: [u8; 20] = *b"hyp-disk-serial-0001";
const BAR_ADDRESS: u64 = 0x8_1000_0000;
const MSI_ADDRESS: u64 = 0x0802_0040;
const QUEUE_SIZE: u16 = 16;
const DESC: u64 = RAM_BASE + 0x1000;
const AVAIL: u64 = RAM_BASE + 0x2000;
const USED: u64 = RAM_BASE + 0x3000;
const DATA: u64 = RAM_BASE + 0x8000;

type Blk = VirtioPci<VirtioBlock<RamDisk>>;

/// What the capability walk found: virtio structures by cfg_type (bar, offset, length) and
/// where the MSI-X capability is.
#[derive(Default, Debug)]
struct Caps {
    virtio: Vec<(u8, u8, u32, u32)>,
    msix: Option<u64>,
    pci_cfg: Option<u64>,
    notify_multiplier: Option<u32>,
}

struct Guest {
    dev: Blk,
    mem: VecMemory,
}

impl Guest {
    fn new() -> Self {
        let mut disk = RamDisk::new(64, false, ID);
        for (i, b) in disk.data_mut().iter_mut().enumerate() {
            *b = (i * 13 + 5) as u8;
        }
        Guest { dev: VirtioPci::new(VirtioBlock::new(disk)), mem: VecMemory::new(RAM_BASE, RAM_SIZE) }
    }

    fn cfg(&mut self, offset: u64, width: u8) -> u32 {
        self.dev.config_read(offset, width).expect("config read")
    }

    fn set_cfg(&mut self, offset: u64, width: u8, value: u32) {
        self.dev.config_write(&self.mem, offset, width, value).expect("config write")
    }

    fn bar(&mut self, offset: u64, width: u8) -> u64 {
        self.dev.bar_read(offset, width).expect("BAR read")
    }

    fn set_bar(&mut self, offset: u64, width: u8, value: u64) {
        self.dev.bar_write(&self.mem, offset, width, value).expect("BAR write")
    }

    fn walk_caps(&mut self) -> Caps {
        let mut caps = Caps::default();
        assert_ne!(self.cfg(0x06, 2) & (1 << 4), 0, "Status says there is a capability list");
        let mut at = u64::from(self.cfg(0x34, 1));
        let mut seen = 0;
        while at != 0 {
            seen += 1;
            assert!(seen < 16, "the list ends");
            let id = self.cfg(at, 1);
            let next = u64::from(self.cfg(at + 1, 1));
            match id {
                0x09 => {
                    let cfg_type = self.cfg(at + 3, 1) as u8;
                    let bar = self.cfg(at + 4, 1) as u8;
                    let (offset, length) = (self.cfg(at + 8, 4), self.cfg(at + 12, 4));
                    caps.virtio.push((cfg_type, bar, offset, length));
                    if cfg_type == 2 {
                        caps.notify_multiplier = Some(self.cfg(at + 16, 4));
                    }
                    if cfg_type == 5 {
                        caps.pci_cfg = Some(at);
                    }
                }
                0x11 => caps.msix = Some(at),
                other => panic!("unexpected capability {other:#x}"),
            }
            at = next;
        }
        caps
    }

    /// BAR sizing as Linux's __pci_read_base does, then the address assigned.
    fn size_and_assign_bar0(&mut self) -> u64 {
        let low = self.cfg(0x10, 4);
        assert_eq!(low & 0xf, 0b0100, "memory, 64-bit, not prefetchable");
        self.set_cfg(0x10, 4, u32::MAX);
        self.set_cfg(0x14, 4, u32::MAX);
        let mask = u64::from(self.cfg(0x10, 4) & !0xf) | (u64::from(self.cfg(0x14, 4)) << 32);
        assert_eq!(self.dev.bar0(), None, "not an address while sized");
        let size = !mask + 1;
        self.set_cfg(0x10, 4, BAR_ADDRESS as u32);
        self.set_cfg(0x14, 4, (BAR_ADDRESS >> 32) as u32);
        size
    }

    fn program_vectors(&mut self, msix: u64, n: u16) {
        for v in 0..u64::from(n) {
            let entry = layout::MSIX_TABLE + 16 * v;
            self.set_bar(entry, 4, MSI_ADDRESS);
            self.set_bar(entry + 4, 4, 0);
            self.set_bar(entry + 8, 4, 0x40 + v);
            self.set_bar(entry + 12, 4, 0);
        }
        let control = self.cfg(msix + 2, 2);
        self.set_cfg(msix + 2, 2, control | 0x8000);
    }

    fn status(&mut self, s: u32) {
        self.set_bar(cf::DEVICE_STATUS, 1, u64::from(s));
    }

    /// Everything up to DRIVER_OK, with queue 0 on `queue_vector` and configuration changes
    /// on vector 0.
    fn init(&mut self, queue_vector: u16) {
        self.status(0);
        assert_eq!(self.bar(cf::DEVICE_STATUS, 1), 0);
        self.status(status::ACKNOWLEDGE);
        self.status(status::ACKNOWLEDGE | status::DRIVER);
        self.set_bar(cf::DEVICE_FEATURE_SELECT, 4, 1);
        let high = self.bar(cf::DEVICE_FEATURE, 4);
        assert_ne!(high & 1, 0, "VERSION_1 offered");
        self.set_bar(cf::DRIVER_FEATURE_SELECT, 4, 0);
        self.set_bar(cf::DRIVER_FEATURE, 4, 0);
        self.set_bar(cf::DRIVER_FEATURE_SELECT, 4, 1);
        self.set_bar(cf::DRIVER_FEATURE, 4, VIRTIO_F_VERSION_1 >> 32);
        assert_eq!(self.bar(cf::DRIVER_FEATURE, 4), 1, "driver_feature reads back");
        self.status(status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
        assert_ne!(self.bar(cf::DEVICE_STATUS, 1) as u32 & status::FEATURES_OK, 0);
        self.set_bar(cf::CONFIG_MSIX_VECTOR, 2, 0);
        assert_eq!(self.bar(cf::CONFIG_MSIX_VECTOR, 2), 0);
        self.set_bar(cf::QUEUE_SELECT, 2, 0);
        assert_eq!(self.bar(cf::QUEUE_SIZE, 2), 256, "the maximum until written");
        self.set_bar(cf::QUEUE_SIZE, 2, u64::from(QUEUE_SIZE));
        assert_eq!(self.bar(cf::QUEUE_SIZE, 2), u64::from(QUEUE_SIZE));
        self.set_bar(cf::QUEUE_MSIX_VECTOR, 2, u64::from(queue_vector));
        assert_eq!(self.bar(cf::QUEUE_MSIX_VECTOR, 2), u64::from(queue_vector));
        self.mem.write(DESC, &[0; 0x3000]).unwrap();
        self.set_bar(cf::QUEUE_DESC, 4, DESC & 0xffff_ffff);
        self.set_bar(cf::QUEUE_DESC + 4, 4, DESC >> 32);
        self.set_bar(cf::QUEUE_DRIVER, 4, AVAIL & 0xffff_ffff);
        self.set_bar(cf::QUEUE_DRIVER + 4, 4, AVAIL >> 32);
        self.set_bar(cf::QUEUE_DEVICE, 4, USED & 0xffff_ffff);
        self.set_bar(cf::QUEUE_DEVICE + 4, 4, USED >> 32);
        assert_eq!(self.bar(cf::QUEUE_NOTIFY_OFF, 2), 0);
        self.set_bar(cf::QUEUE_ENABLE, 2, 1);
        assert_eq!(self.bar(cf::QUEUE_ENABLE, 2), 1);
        self.status(status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK);
        assert!(self.dev.core_mut().take_incidents().is_empty());
    }

    /// A fully probed device: BAR at BAR_ADDRESS, memory + bus master, MSI-X on with every
    /// vector programmed and unmasked, queue 0 on vector 1.
    fn probed() -> Self {
        let mut g = Guest::new();
        let caps = g.walk_caps();
        g.size_and_assign_bar0();
        g.set_cfg(0x04, 2, 0x6);
        let n = g.dev.vectors();
        g.program_vectors(caps.msix.unwrap(), n);
        g.init(1);
        g
    }

    /// A read of sector `sector` into DATA (the `n`th request: descriptors 3n..3n+2).
    fn submit_read(&mut self, n: u16, sector: u64) {
        let header = DATA + 0x1000 * u64::from(n);
        let mut h = VIRTIO_BLK_T_IN.to_le_bytes().to_vec();
        h.extend_from_slice(&[0; 4]);
        h.extend_from_slice(&sector.to_le_bytes());
        self.mem.write(header, &h).unwrap();
        self.mem.write(header + 0x10, &[0xff]).unwrap();
        let d = 3 * n;
        write_desc_at(&self.mem, DESC + 16 * u64::from(d), header, 16, F_NEXT, d + 1);
        write_desc_at(&self.mem, DESC + 16 * u64::from(d + 1), header + 0x100, 512, F_NEXT | F_WRITE, d + 2);
        write_desc_at(&self.mem, DESC + 16 * u64::from(d + 2), header + 0x10, 1, F_WRITE, 0);
        let slot = u64::from(n % QUEUE_SIZE);
        self.mem.write(AVAIL + 4 + 2 * slot, &d.to_le_bytes()).unwrap();
        self.mem.write(AVAIL + 2, &(n + 1).to_le_bytes()).unwrap();
    }

    fn used_idx(&self) -> u16 {
        let mut b = [0; 2];
        self.mem.read(USED + 2, &mut b).unwrap();
        u16::from_le_bytes(b)
    }

    fn notify(&mut self) {
        assert!(Blk::is_notify(layout::NOTIFY, 2));
        self.set_bar(layout::NOTIFY, 2, 0);
    }

    fn messages(&mut self) -> Vec<Message> {
        self.dev.take_messages().iter().copied().collect()
    }

    fn pba(&mut self) -> u64 {
        self.bar(layout::MSIX_PBA, 8)
    }
}

fn msg(vector: u32) -> Message {
    Message { address: MSI_ADDRESS, data: 0x40 + vector }
}

#[test]
fn a_linux_like_probe_reads_a_sector_and_gets_one_message_on_the_queue_s_vector() {
    let mut g = Guest::new();
    assert_eq!(g.cfg(0x00, 2), 0x1af4, "virtio vendor");
    assert_eq!(g.cfg(0x02, 2), 0x1040 + 2, "non-transitional block device");
    assert_eq!(g.cfg(0x08, 1), 1, "revision 1");
    assert_eq!(g.cfg(0x08, 4) >> 8, 0x01_80_00, "mass storage, other");
    assert_eq!(g.cfg(0x0e, 1), 0, "header type 0");
    assert_eq!(g.cfg(0x2c, 2), 0x1af4);
    assert!(g.cfg(0x2e, 2) >= 0x40, "subsystem id of a non-transitional device");
    assert_eq!(g.cfg(0x3d, 1), 0, "no INTx pin");
    let caps = g.walk_caps();
    let types: Vec<u8> = caps.virtio.iter().map(|c| c.0).collect();
    assert_eq!(types, [1, 2, 3, 4, 5], "common, notify, ISR, device, PCI cfg");
    assert!(caps.virtio.iter().all(|c| c.1 == 0), "all in BAR0");
    assert_eq!(caps.virtio[0].2 as u64, layout::COMMON_CFG);
    assert!(caps.virtio[0].3 >= 0x38, "the whole common cfg");
    assert_eq!(caps.virtio[1].2 as u64, layout::NOTIFY);
    assert_eq!(caps.notify_multiplier, Some(0));
    assert_eq!(caps.virtio[2].2 as u64, layout::ISR);
    assert_eq!(caps.virtio[3].2 as u64, layout::DEVICE_CFG);
    let device_cfg_len = caps.virtio[3].3;
    assert!(device_cfg_len >= 24 && device_cfg_len.is_multiple_of(4), "virtio_blk_config at least up to blk_size");
    assert!(g.dev.bar_read(layout::DEVICE_CFG + u64::from(device_cfg_len), 1).is_err(), "nothing beyond");
    let msix = caps.msix.expect("MSI-X capability");
    assert_eq!(g.cfg(msix + 2, 2) & 0x7ff, 1, "two vectors: the queue's and the configuration's");
    assert_eq!(g.cfg(msix + 4, 4), layout::MSIX_TABLE as u32, "table in BAR0 (BIR 0)");
    assert_eq!(g.cfg(msix + 8, 4), layout::MSIX_PBA as u32);

    assert_eq!(g.size_and_assign_bar0(), BAR0_SIZE);
    assert_eq!(g.dev.bar0(), None, "memory space still disabled");
    g.set_cfg(0x04, 2, 0x6);
    assert_eq!(g.dev.bar0(), Some(BAR_ADDRESS));
    g.program_vectors(msix, 2);
    g.init(1);
    assert_eq!(g.bar(layout::DEVICE_CFG, 8), 64, "capacity through the device cfg");

    g.submit_read(0, 5);
    g.notify();
    assert_eq!(g.used_idx(), 1, "the request is done");
    let mut got = vec![0; 512];
    g.mem.read(DATA + 0x100, &mut got).unwrap();
    assert_eq!(got, g.dev.core().device().backend().data()[5 * 512..6 * 512]);
    let mut st = [0xff];
    g.mem.read(DATA + 0x10, &mut st).unwrap();
    assert_eq!(st[0], VIRTIO_BLK_S_OK);
    assert_eq!(g.messages(), [msg(1)], "exactly one message, the queue's vector");
    assert!(g.dev.take_messages().is_empty(), "taken once");
}

#[test]
fn a_masked_vector_keeps_its_signal_pending_until_unmasked() {
    let mut g = Guest::probed();
    let entry = layout::MSIX_TABLE + 16;
    g.set_bar(entry + 12, 4, 1);
    g.submit_read(0, 1);
    g.notify();
    assert!(g.messages().is_empty(), "masked: no message");
    assert_eq!(g.pba(), 0b10, "vector 1 pending");
    g.set_bar(entry + 12, 4, 0);
    assert_eq!(g.messages(), [msg(1)], "unmasking sends it");
    assert_eq!(g.pba(), 0);
}

#[test]
fn the_function_mask_holds_every_vector_until_it_clears() {
    let mut g = Guest::probed();
    let msix = g.walk_caps().msix.unwrap();
    g.set_cfg(msix + 2, 2, 0xc000);
    g.submit_read(0, 1);
    g.notify();
    assert!(g.messages().is_empty());
    assert_eq!(g.pba(), 0b10);
    assert_eq!(g.cfg(msix + 2, 2) & 0xc000, 0xc000, "Function Mask reads back");
    g.set_cfg(msix + 2, 2, 0x8000);
    assert_eq!(g.messages(), [msg(1)]);
    assert_eq!(g.pba(), 0);
}

#[test]
fn no_message_without_msix_enable_or_bus_master() {
    let mut g = Guest::probed();
    let msix = g.walk_caps().msix.unwrap();
    g.set_cfg(msix + 2, 2, 0);
    g.submit_read(0, 1);
    g.notify();
    assert_eq!(g.used_idx(), 1);
    assert!(g.messages().is_empty(), "MSI-X disabled");
    assert_eq!(g.pba(), 0, "nothing pending: with MSI-X off the event is the ISR's");
    assert_eq!(g.bar(layout::ISR, 1), 1, "the ISR has it");
    g.set_cfg(msix + 2, 2, 0x8000);
    assert!(g.messages().is_empty());

    g.set_cfg(0x04, 2, 0x2);
    g.submit_read(1, 2);
    g.notify();
    assert_eq!(g.used_idx(), 2);
    assert!(g.messages().is_empty(), "bus master off: the function may not write memory");
    assert_eq!(g.pba(), 0b10);
    g.set_cfg(0x04, 2, 0x6);
    assert_eq!(g.messages(), [msg(1)], "sent once the function may");
}

#[test]
fn the_isr_reads_once_and_a_driver_error_goes_to_the_config_vector() {
    let mut g = Guest::probed();
    // A head beyond the queue size: the device needs a reset (2.1.2).
    g.mem.write(AVAIL + 4, &100u16.to_le_bytes()).unwrap();
    g.mem.write(AVAIL + 2, &1u16.to_le_bytes()).unwrap();
    g.notify();
    assert_ne!(g.bar(cf::DEVICE_STATUS, 1) as u32 & status::DEVICE_NEEDS_RESET, 0);
    assert_eq!(g.messages(), [msg(0)], "configuration change on config_msix_vector");
    assert_eq!(g.bar(layout::ISR, 1), 2, "configuration change bit");
    assert_eq!(g.bar(layout::ISR, 1), 0, "cleared by the read");
    assert_eq!(g.dev.bar_write(&g.mem, layout::ISR, 1, 0), Err(RegisterError::ReadOnly { offset: layout::ISR }));
    assert!(matches!(g.dev.core_mut().take_incidents()[..], [DeviceIncident::BadHeadIndex { .. }]));
}

#[test]
fn a_device_reset_unmaps_every_event() {
    let mut g = Guest::probed();
    g.status(0);
    assert_eq!(g.bar(cf::CONFIG_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
    assert_eq!(g.bar(cf::QUEUE_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
    assert_eq!(g.bar(cf::QUEUE_ENABLE, 2), 0);
    assert_eq!(g.bar(cf::QUEUE_SIZE, 2), 256, "size back to the maximum");
    // Set up again with the queue unmapped: its completion sends nothing.
    g.init(NO_VECTOR);
    g.submit_read(0, 1);
    g.notify();
    assert_eq!(g.used_idx(), 1);
    assert!(g.messages().is_empty());
    assert_eq!(g.pba(), 0, "no vector, nothing pending");
}

#[test]
fn a_vector_beyond_the_table_reads_back_no_vector() {
    let mut g = Guest::probed();
    let n = g.dev.vectors();
    g.set_bar(cf::QUEUE_MSIX_VECTOR, 2, u64::from(n));
    assert_eq!(g.bar(cf::QUEUE_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
    g.set_bar(cf::CONFIG_MSIX_VECTOR, 2, 0x7ff);
    assert_eq!(g.bar(cf::CONFIG_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
    g.set_bar(cf::CONFIG_MSIX_VECTOR, 2, u64::from(n - 1));
    assert_eq!(g.bar(cf::CONFIG_MSIX_VECTOR, 2), u64::from(n - 1));
}

#[test]
fn a_queue_select_beyond_the_queues_reads_zero_and_ignores_writes() {
    let mut g = Guest::new();
    g.set_bar(cf::QUEUE_SELECT, 2, 5);
    assert_eq!(g.bar(cf::QUEUE_SELECT, 2), 5);
    assert_eq!(g.bar(cf::QUEUE_SIZE, 2), 0, "0: the queue is unavailable");
    g.set_bar(cf::QUEUE_SIZE, 2, 8);
    g.set_bar(cf::QUEUE_MSIX_VECTOR, 2, 0);
    g.set_bar(cf::QUEUE_DESC, 8, DESC);
    assert_eq!(g.bar(cf::QUEUE_SIZE, 2), 0);
    assert_eq!(g.bar(cf::QUEUE_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
    assert_eq!(g.bar(cf::QUEUE_DESC, 8), 0);
    let incidents = g.dev.core_mut().take_incidents();
    assert!(incidents.len() >= 3 && incidents.iter().all(|i| *i == DeviceIncident::NoSuchQueue { queue: 5 }));
    g.set_bar(cf::QUEUE_SELECT, 2, 0);
    assert_eq!(g.bar(cf::QUEUE_SIZE, 2), 256);
}

#[test]
fn a_notify_for_a_queue_that_does_not_exist_is_logged() {
    let mut g = Guest::probed();
    g.set_bar(layout::NOTIFY, 2, 7);
    assert_eq!(g.dev.core_mut().take_incidents(), [DeviceIncident::NoSuchQueue { queue: 7 }]);
    assert!(g.messages().is_empty());
}

#[test]
fn a_ring_address_written_in_halves_or_whole_reads_back() {
    let mut g = Guest::new();
    g.set_bar(cf::QUEUE_DRIVER, 4, 0x8765_4320);
    g.set_bar(cf::QUEUE_DRIVER + 4, 4, 0x1);
    assert_eq!(g.bar(cf::QUEUE_DRIVER, 8), 0x1_8765_4320);
    assert_eq!(g.bar(cf::QUEUE_DRIVER + 4, 4), 1);
    g.set_bar(cf::QUEUE_DEVICE, 8, 0x2_0000_1000);
    assert_eq!(g.bar(cf::QUEUE_DEVICE, 4), 0x1000);
    assert_eq!(g.bar(cf::QUEUE_DEVICE + 4, 4), 2);
    assert_eq!(g.dev.core().queue(0).unwrap().device, 0x2_0000_1000, "the core has it");
}

#[test]
fn bad_widths_and_misaligned_accesses_are_refused_and_change_nothing() {
    let mut g = Guest::probed();
    for (offset, width) in [
        (0x0, 2),
        (0x4, 8),
        (0x14, 2),
        (0x14, 4),
        (0x18, 4),
        (0x21, 1),
        (0x22, 2),
        (0x24, 8),
        (0x1000, 2),
        (0x3000, 4),
        (0x3000, 1),
        (0x3804, 8),
        (0x3801, 1),
        (0x3800, 2),
        (0x3c00, 1),
        (0x3, 2),
        (0x7, 3),
    ] {
        assert!(g.dev.bar_read(offset, width).is_err(), "read {offset:#x}/{width}");
        assert!(g.dev.bar_write(&g.mem, offset, width, u64::MAX).is_err(), "write {offset:#x}/{width}");
    }
    for offset in [0x38, 0x800, 0x1001, 0x3002, 0x3820, 0x3c08, BAR0_SIZE, u64::MAX - 3] {
        assert!(g.dev.bar_read(offset, 4).is_err(), "no register at {offset:#x}");
    }
    for (offset, width) in [(1, 2), (2, 4), (0, 8), (0, 3), (4096, 4), (u64::MAX, 1)] {
        assert!(g.dev.config_read(offset, width).is_err());
        assert!(g.dev.config_write(&g.mem, offset, width, 0).is_err());
    }
    assert_eq!(g.bar(cf::DEVICE_STATUS, 1) as u32 & status::DRIVER_OK, status::DRIVER_OK, "still running");
    assert!(g.dev.core_mut().take_incidents().is_empty(), "refusals record nothing");
    assert_eq!(g.bar(layout::MSIX_TABLE + 16 + 8, 4), 0x41, "table intact");
}

#[test]
fn all_ones_everywhere_changes_no_read_only_field() {
    let mut g = Guest::probed();
    let before: Vec<u32> = (0..1024).map(|d| g.cfg(4 * d, 4)).collect();
    for d in 0..1024u64 {
        g.set_cfg(4 * d, 4, u32::MAX);
    }
    for offset in (0..BAR0_SIZE).step_by(4) {
        let _ = g.dev.bar_write(&g.mem, offset, 4, u64::from(u32::MAX));
        let _ = g.dev.bar_write(&g.mem, offset, 2, 0xffff);
        let _ = g.dev.bar_write(&g.mem, offset, 1, 0xff);
    }
    let after: Vec<u32> = (0..1024).map(|d| g.cfg(4 * d, 4)).collect();
    assert_eq!(after[0], before[0], "vendor and device ID");
    assert_eq!(after[2], before[2], "class and revision");
    assert_eq!(after[0x2c / 4], before[0x2c / 4], "subsystem");
    assert_eq!(after[0x10 / 4], (!(BAR0_SIZE as u32 - 1)) | 0b100, "BAR0 reads its size mask");
    assert_eq!(after[0x14 / 4], u32::MAX);
    assert_eq!(after[1] & 0xffff, 0x0406, "only Memory, Bus Master and INTx Disable are writable");
    assert_eq!(after[1] >> 16, before[1] >> 16, "status");
    for d in [6, 7, 8, 9, 0xc] {
        assert_eq!(after[d], 0, "BAR2-5 and the expansion ROM read 0");
    }
    for d in 0x40 / 4..0x84 / 4 {
        assert_eq!(after[d], before[d], "virtio capability at {:#x} is read-only", 4 * d);
    }
    assert_eq!(after[0x98 / 4] & 0x07ff_ffff, before[0x98 / 4] & 0x07ff_ffff, "MSI-X id, next, table size");
    assert_eq!(g.dev.bar0(), None, "being sized");
    // The driver wrote every vector's all-ones: they read NO_VECTOR.
    assert_eq!(g.bar(cf::CONFIG_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
    assert_eq!(g.bar(cf::DEVICE_FEATURE_SELECT, 4), u64::from(u32::MAX), "selectors read back");
    assert_eq!(g.bar(cf::DEVICE_FEATURE, 4), 0, "no features beyond the second word");
    assert!(g.take_all_ok());
}

impl Guest {
    fn take_all_ok(&mut self) -> bool {
        self.dev.take_messages().len() <= usize::from(self.dev.vectors())
    }
}

#[test]
fn the_pci_cfg_window_reaches_bar0_like_a_bar_access() {
    let mut g = Guest::probed();
    let at = g.walk_caps().pci_cfg.unwrap();
    // Read num_queues (2 bytes at 0x12) through the window.
    g.set_cfg(at + 4, 1, 0);
    g.set_cfg(at + 8, 4, cf::NUM_QUEUES as u32);
    g.set_cfg(at + 12, 4, 2);
    assert_eq!(g.cfg(at + 16, 2), 1);
    // A notify through the window runs the queue.
    g.submit_read(0, 3);
    g.set_cfg(at + 8, 4, layout::NOTIFY as u32);
    g.set_cfg(at + 16, 2, 0);
    assert_eq!(g.used_idx(), 1);
    assert_eq!(g.messages(), [msg(1)]);
    // A window the driver may not use (misaligned, another BAR) reads as it was, no fault.
    g.set_cfg(at + 8, 4, 0x13);
    assert_eq!(g.dev.config_read(at + 16, 4).map(|_| ()), Ok(()));
    g.set_cfg(at + 4, 1, 2);
    g.set_cfg(at + 8, 4, 0);
    g.set_cfg(at + 12, 4, 4);
    g.set_cfg(at + 16, 4, 7);
    assert_eq!(g.bar(cf::DEVICE_FEATURE_SELECT, 4), 1, "BAR2 does not exist: nothing written");
    g.set_cfg(at + 4, 1, 0);
    g.set_cfg(at + 16, 4, 7);
    assert_eq!(g.bar(cf::DEVICE_FEATURE_SELECT, 4), 7, "BAR0 through the window");
}

#[test]
fn a_side_core_s_completions_become_messages_too() {
    let mut g = Guest::probed();
    g.dev.core_mut().set_polled(true);
    g.submit_read(0, 4);
    g.notify();
    assert_eq!(g.used_idx(), 0, "a polled device's notify only marks the queue");
    assert!(g.messages().is_empty());
    let pass = g.dev.core_mut().poll(&g.mem, true);
    assert!(pass.took);
    assert_eq!(g.used_idx(), 1);
    assert_eq!(g.messages(), [msg(1)]);
}

#[test]
fn a_power_on_reset_forgets_the_configuration_space_and_msix() {
    let mut g = Guest::probed();
    let msix = g.walk_caps().msix.unwrap();
    g.dev.reset();
    assert_eq!(g.cfg(0x04, 2), 0);
    assert_eq!(g.cfg(0x10, 4), 0b100);
    assert_eq!(g.cfg(msix + 2, 2), 1, "MSI-X off, table size 2");
    assert_eq!(g.bar(layout::MSIX_TABLE + 12, 4), 1, "entries masked");
    assert_eq!(g.bar(cf::DEVICE_STATUS, 1), 0);
    assert_eq!(g.bar(cf::QUEUE_MSIX_VECTOR, 2), u64::from(NO_VECTOR));
}

/// One guest access of the property test.
#[derive(Clone, Debug)]
enum Access {
    Config { offset: u64, width: u8, value: u32, write: bool },
    Bar { offset: u64, width: u8, value: u64, write: bool },
}

fn access() -> impl Strategy<Value = Access> {
    let width = prop_oneof![Just(1u8), Just(2), Just(4), Just(8), 0u8..16];
    prop_oneof![
        (0u64..0x1100, width.clone(), any::<u32>(), any::<bool>())
            .prop_map(|(offset, width, value, write)| Access::Config { offset, width, value, write }),
        (
            prop_oneof![
                0u64..0x40,
                Just(0x1000u64),
                0x2000u64..0x2020,
                Just(0x3000u64),
                0x3800u64..0x3840,
                0x3c00u64..0x3c10,
                0u64..0x4100
            ],
            width,
            prop_oneof![any::<u64>(), 0u64..16],
            any::<bool>()
        )
            .prop_map(|(offset, width, value, write)| Access::Bar { offset, width, value, write }),
    ]
}

proptest! {
    #[test]
    fn arbitrary_accesses_never_panic_and_keep_the_invariants(accesses in prop::collection::vec(access(), 1..200)) {
        let mut g = Guest::probed();
        let n = usize::from(g.dev.vectors());
        for a in accesses {
            match a {
                Access::Config { offset, width, value, write: true } => { let _ = g.dev.config_write(&g.mem, offset, width, value); }
                Access::Config { offset, width, write: false, .. } => { let _ = g.dev.config_read(offset, width); }
                Access::Bar { offset, width, value, write: true } => { let _ = g.dev.bar_write(&g.mem, offset, width, value); }
                Access::Bar { offset, width, write: false, .. } => { let _ = g.dev.bar_read(offset, width); }
            }
            prop_assert!(g.dev.take_messages().len() <= n);
            prop_assert_eq!(g.dev.config_read(0, 4), Ok(0x1042_1af4));
            let low = g.dev.config_read(0x10, 4).unwrap();
            prop_assert_eq!(low & 0xf, 0b100);
            prop_assert_eq!(u64::from(low & !0xf) % BAR0_SIZE, 0);
            if let Some(base) = g.dev.bar0() {
                prop_assert_eq!(base % BAR0_SIZE, 0);
            }
        }
    }
}
