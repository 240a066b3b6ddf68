//! A virtio-mmio window as words of memory (docs/virtio.md, "The transports' shadow page"):
//! what every read of the window returns, so that a page holding these words can serve the
//! guest's reads without a trap. No read of the version-2 window has a side effect (virtio
//! 1.2, 4.2.2), so the page may be read at any time; writes still trap to the model.
//!
//! The words fall in three kinds, by what changes them: the fixed ones (identification,
//! the shared-memory registers, ConfigGeneration and the configuration space, which no
//! device here changes), the four a driver's write or the device's own error changes
//! (`CHANGING`), and InterruptStatus, which changes without the device's lock
//! (`InterruptWord`) and so is published by whoever changed it.

use crate::virtio::device::VirtioDevice;
use crate::virtio::transport::{regs, VirtioMmio};

/// The words whose value a write to the window or the device's own error changes, in the
/// order `VirtioMmio::changing_words` gives them.
pub const CHANGING: [u64; 4] = [regs::DEVICE_FEATURES, regs::QUEUE_NUM_MAX, regs::QUEUE_READY, regs::STATUS];

/// Words of one window (0x200 bytes).
pub const WINDOW_WORDS: usize = (regs::WINDOW_SIZE / 4) as usize;

/// The registers whose value never changes once the device exists: identification, the
/// shared-memory registers, ConfigGeneration (no device here changes its configuration).
const FIXED: [u64; 9] = [
    regs::MAGIC_VALUE,
    regs::VERSION,
    regs::DEVICE_ID,
    regs::VENDOR_ID,
    regs::SHM_LEN_LOW,
    regs::SHM_LEN_HIGH,
    regs::SHM_BASE_LOW,
    regs::SHM_BASE_HIGH,
    regs::CONFIG_GENERATION,
];

impl<D: VirtioDevice> VirtioMmio<D> {
    /// The window's words that never change once the device exists, as (offset, value): the
    /// `FIXED` registers and the configuration space. Every other word but `CHANGING` and
    /// InterruptStatus reads as zero (a write-only or reserved offset, or a legacy register).
    pub fn fixed_words(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        let registers = FIXED.into_iter().map(|offset| (offset, self.register(offset).unwrap_or(0)));
        let config = (regs::CONFIG..regs::WINDOW_SIZE).step_by(4).map(|offset| (offset, self.config_word(offset)));
        registers.chain(config)
    }

    /// The `CHANGING` words now.
    pub fn changing_words(&self) -> [u32; 4] {
        CHANGING.map(|offset| self.register(offset).unwrap_or(0))
    }

    /// The configuration space's word at window offset `offset`, a byte at a time: a field
    /// narrower than the word, or bytes past the device's configuration, read as zero.
    fn config_word(&self, offset: u64) -> u32 {
        let byte = |i: u64| self.device.read_config(offset - regs::CONFIG + i, 1).map_or(0, |b| b as u8);
        u32::from_le_bytes([byte(0), byte(1), byte(2), byte(3)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::block::{RamDisk, VirtioBlock};
    use crate::virtio::console::{ConsoleBackend, VirtioConsole};
    use crate::virtio::memory::VecMemory;
    use crate::virtio::net::{NetBackend, VirtioNet};
    use crate::virtio::transport::regs::INTERRUPT_STATUS;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    struct Sink;
    impl ConsoleBackend for Sink {
        fn write(&mut self, _bytes: &[u8]) {}
    }
    impl NetBackend for Sink {
        fn transmit(&mut self, _frame: &[u8]) -> bool {
            true
        }
    }

    /// The page as the runtime keeps it: the fixed words once, then the changing words and
    /// InterruptStatus after every access.
    fn page<D: VirtioDevice>(mmio: &VirtioMmio<D>) -> Vec<u8> {
        let mut words = vec![0u32; WINDOW_WORDS];
        for (offset, value) in mmio.fixed_words() {
            words[offset as usize / 4] = value;
        }
        for (offset, value) in CHANGING.iter().zip(mmio.changing_words()) {
            words[*offset as usize / 4] = value;
        }
        words[INTERRUPT_STATUS as usize / 4] = mmio.interrupt_status();
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Every aligned read of every width that the model answers returns the page's bytes.
    fn page_matches_reads<D: VirtioDevice>(mmio: &mut VirtioMmio<D>) {
        let page = page(mmio);
        for width in [1u8, 2, 4, 8] {
            for offset in (0..regs::WINDOW_SIZE).step_by(usize::from(width)) {
                if let Ok(value) = mmio.read(offset, width) {
                    let at = offset as usize;
                    let mut bytes = [0u8; 8];
                    bytes[..usize::from(width)].copy_from_slice(&page[at..at + usize::from(width)]);
                    assert_eq!(value, u64::from_le_bytes(bytes), "{width}-byte read at {offset:#x}");
                }
            }
        }
        let _ = mmio.take_incidents();
    }

    /// Register writes a driver makes, in any order and with any value, on a queue of any
    /// index, then a notify or an acknowledgement; `reset` as a VM reboot.
    fn ops() -> impl Strategy<Value = Vec<(u64, u64)>> {
        let offset = prop_oneof![
            Just(regs::DEVICE_FEATURES_SEL),
            Just(regs::DRIVER_FEATURES),
            Just(regs::DRIVER_FEATURES_SEL),
            Just(regs::QUEUE_SEL),
            Just(regs::QUEUE_NUM),
            Just(regs::QUEUE_READY),
            Just(regs::QUEUE_NOTIFY),
            Just(regs::INTERRUPT_ACK),
            Just(regs::STATUS),
            Just(regs::QUEUE_DESC_LOW),
            Just(regs::QUEUE_DRIVER_LOW),
            Just(regs::QUEUE_DEVICE_LOW),
            (0u64..0x80).prop_map(|w| w * 4),
        ];
        let value = prop_oneof![3 => 0u64..16, 1 => Just(0x4000_1000u64), 1 => any::<u32>().prop_map(u64::from)];
        prop::collection::vec((offset, value), 0..60)
    }

    /// A driver's whole set-up (3.1.1): VERSION_1 accepted, every queue of 8 entries given
    /// rings in RAM and made ready, DRIVER_OK; the random writes then start from a running
    /// device as well as from a fresh one.
    fn set_up(queues: u16) -> Vec<(u64, u64)> {
        let mut ops =
            vec![(regs::STATUS, 3), (regs::DRIVER_FEATURES_SEL, 1), (regs::DRIVER_FEATURES, 1), (regs::STATUS, 11)];
        for q in 0..u64::from(queues) {
            let rings = 0x4000_0000 + q * 0x1000;
            ops.extend([(regs::QUEUE_SEL, q), (regs::QUEUE_NUM, 8), (regs::QUEUE_DESC_LOW, rings)]);
            ops.extend([(regs::QUEUE_DRIVER_LOW, rings + 0x400), (regs::QUEUE_DEVICE_LOW, rings + 0x800)]);
            ops.push((regs::QUEUE_READY, 1));
        }
        ops.push((regs::STATUS, 15));
        ops
    }

    fn run<D: VirtioDevice>(mut mmio: VirtioMmio<D>, set_up_first: bool, ops: &[(u64, u64)]) {
        let mem = VecMemory::new(0x4000_0000, 0x1_0000);
        page_matches_reads(&mut mmio);
        let first = if set_up_first { set_up(mmio.device().num_queues()) } else { Vec::new() };
        for &(offset, value) in first.iter().chain(ops) {
            let _ = mmio.write(&mem, offset, 4, value);
            page_matches_reads(&mut mmio);
        }
        mmio.reset();
        page_matches_reads(&mut mmio);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

        #[test]
        fn the_page_is_what_every_read_returns_whatever_the_driver_wrote(set_up_first in any::<bool>(), ops in ops()) {
            run(VirtioMmio::new(VirtioBlock::new(RamDisk::new(8, false, [7; 20]))), set_up_first, &ops);
            run(VirtioMmio::new(VirtioNet::new([2, 0, 0, 0, 0, 1], Sink)), set_up_first, &ops);
            run(VirtioMmio::new(VirtioConsole::new(Sink)), set_up_first, &ops);
        }
    }

    #[test]
    fn the_set_up_runs_the_device_with_every_queue_ready() {
        let mem = VecMemory::new(0x4000_0000, 0x1_0000);
        let mut mmio = VirtioMmio::new(VirtioNet::new([2, 0, 0, 0, 0, 1], Sink));
        for (offset, value) in set_up(mmio.device().num_queues()) {
            mmio.write(&mem, offset, 4, value).unwrap();
        }
        assert_eq!(mmio.status(), 15);
        assert!((0..mmio.device().num_queues()).all(|q| mmio.queue(q).is_some_and(|q| q.ready)));
    }
}
