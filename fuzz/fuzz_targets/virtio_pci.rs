//! A virtio-pci function (`vdev::virtio::pci::VirtioPci`, a block device over a 64-sector
//! disk) behind any sequence of configuration-space and BAR0 accesses of any width and
//! value, memory changes, side-core passes and continued work, over a guest RAM of the
//! fuzzer's bytes; the first accesses may bring it up as a driver would, or not. Checked
//! besides no panic: not one access outside the VM's RAM, never more messages at once than
//! the function has vectors, the vendor and device IDs never change, and BAR0 decodes only
//! at a multiple of its size.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vdev::virtio::block::{RamDisk, VirtioBlock};
use vdev::virtio::pci::{VirtioPci, BAR0_SIZE};
use vdev::virtio::{GuestMemory, VecMemory};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: usize = 64 << 10;

#[derive(Arbitrary, Debug)]
enum Op {
    ConfigRead {
        offset: u16,
        width: u8,
    },
    ConfigWrite {
        offset: u16,
        width: u8,
        value: u32,
    },
    BarRead {
        offset: u16,
        width: u8,
    },
    BarWrite {
        offset: u16,
        width: u8,
        value: u64,
    },
    /// The guest changes its RAM (descriptors, rings, buffers), even while the device reads.
    Poke {
        at: u16,
        bytes: Vec<u8>,
    },
    /// A side core's pass (`polled` set on the first one).
    Poll,
    Continue,
}

#[derive(Arbitrary, Debug)]
struct Input {
    ram: Vec<u8>,
    ops: Vec<Op>,
}

fn width(w: u8) -> u8 {
    [1, 2, 4, 8][usize::from(w % 4)]
}

fuzz_target!(|input: Input| {
    let mem = VecMemory::new(RAM_BASE, RAM_SIZE);
    let _ = mem.write(RAM_BASE, &input.ram[..input.ram.len().min(RAM_SIZE)]);
    let mut pci = VirtioPci::new(VirtioBlock::new(RamDisk::new(64, false, *b"fuzz-disk-serial-000")));
    let ids = pci.config_read(0, 4);
    let vectors = usize::from(pci.vectors());
    for op in input.ops.iter().take(512) {
        match op {
            Op::ConfigRead { offset, width: w } => {
                let _ = pci.config_read(u64::from(*offset % 0x1000), width(*w));
            }
            Op::ConfigWrite { offset, width: w, value } => {
                let _ = pci.config_write(&mem, u64::from(*offset % 0x1000), width(*w), *value);
            }
            Op::BarRead { offset, width: w } => {
                let _ = pci.bar_read(u64::from(*offset) % BAR0_SIZE, width(*w));
            }
            Op::BarWrite { offset, width: w, value } => {
                let _ = pci.bar_write(&mem, u64::from(*offset) % BAR0_SIZE, width(*w), *value);
            }
            Op::Poke { at, bytes } => {
                let at = usize::from(*at) % RAM_SIZE;
                let n = bytes.len().min(RAM_SIZE - at);
                let _ = mem.write(RAM_BASE + at as u64, &bytes[..n]);
            }
            Op::Poll => {
                pci.core_mut().set_polled(true);
                let _ = pci.core_mut().poll(&mem, true);
            }
            Op::Continue => pci.core_mut().continue_work(&mem),
        }
        assert!(pci.take_messages().len() <= vectors, "more messages than vectors");
        let _ = pci.core_mut().take_incidents();
        assert_eq!(mem.refused_accesses(), 0, "the device touched memory outside the VM's RAM");
        assert_eq!(pci.config_read(0, 4), ids, "the vendor and device IDs");
        if let Some(bar) = pci.bar0() {
            assert_eq!(bar % BAR0_SIZE, 0, "BAR0 at a multiple of its size");
        }
    }
});
