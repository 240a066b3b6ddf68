//! What the virtio targets share: a guest RAM whose bytes the fuzzer chooses, a driver that
//! brings the device up with its queues at fixed places in that RAM, and then any sequence
//! of register accesses, notifications, memory changes and continued work. Checked for
//! every device: no panic, and not one access to memory outside the VM's RAM (the device
//! checks every guest address before it touches it: `VecMemory` counts refused accesses).

use arbitrary::Arbitrary;
use vdev::virtio::transport::{regs, VirtioMmio};
use vdev::virtio::{GuestMemory, VecMemory, VirtioDevice};

pub const RAM_BASE: u64 = 0x4000_0000;
pub const RAM_SIZE: usize = 64 << 10;

#[derive(Arbitrary, Debug)]
pub enum Op {
    Read {
        offset: u16,
        width: u8,
    },
    Write {
        offset: u16,
        width: u8,
        value: u64,
    },
    Notify {
        queue: u8,
    },
    /// The guest changes its RAM (descriptors, rings, buffers), even while the device reads.
    Poke {
        at: u16,
        bytes: Vec<u8>,
    },
    Continue,
    /// For the device's own extra input (a received frame, typed bytes).
    Input(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    pub ram: Vec<u8>,
    pub queue_num: u8,
    pub features: u64,
    pub ops: Vec<Op>,
}

/// Where queue `q`'s descriptor table, driver and device areas are.
fn queue_area(q: u32) -> (u64, u64, u64) {
    let base = RAM_BASE + u64::from(q) * 0x3000;
    (base, base + 0x1000, base + 0x2000)
}

fn width(w: u8) -> u8 {
    [1, 2, 4, 8][usize::from(w % 4)]
}

/// Runs `input` against `device`; `turn` runs before each operation, `extra` handles
/// `Op::Input`.
pub fn run<D: VirtioDevice>(
    device: D,
    input: &Input,
    mut turn: impl FnMut(),
    mut extra: impl FnMut(&mut VirtioMmio<D>, &VecMemory, &[u8]),
) {
    let mem = VecMemory::new(RAM_BASE, RAM_SIZE);
    let _ = mem.write(RAM_BASE, &input.ram[..input.ram.len().min(RAM_SIZE)]);
    let mut mmio = VirtioMmio::new(device);
    let w = |m: &mut VirtioMmio<D>, offset: u64, value: u64| {
        let _ = m.write(&mem, offset, 4, value);
    };
    // The driver's side of 3.1.1: ACKNOWLEDGE, DRIVER, features, FEATURES_OK, the queues,
    // DRIVER_OK.
    w(&mut mmio, regs::STATUS, 1);
    w(&mut mmio, regs::STATUS, 3);
    for sel in 0..2u64 {
        w(&mut mmio, regs::DEVICE_FEATURES_SEL, sel);
        let offered = mmio.read(regs::DEVICE_FEATURES, 4).unwrap_or(0);
        w(&mut mmio, regs::DRIVER_FEATURES_SEL, sel);
        w(&mut mmio, regs::DRIVER_FEATURES, offered & (input.features >> (32 * sel)) | if sel == 1 { 1 } else { 0 });
    }
    w(&mut mmio, regs::STATUS, 0xb);
    for q in 0..4u32 {
        w(&mut mmio, regs::QUEUE_SEL, u64::from(q));
        w(&mut mmio, regs::QUEUE_NUM, u64::from(input.queue_num));
        let (desc, driver, device) = queue_area(q);
        for (low, value) in
            [(regs::QUEUE_DESC_LOW, desc), (regs::QUEUE_DRIVER_LOW, driver), (regs::QUEUE_DEVICE_LOW, device)]
        {
            w(&mut mmio, low, value & 0xffff_ffff);
            w(&mut mmio, low + 4, value >> 32);
        }
        w(&mut mmio, regs::QUEUE_READY, 1);
    }
    w(&mut mmio, regs::STATUS, 0xf);
    for op in input.ops.iter().take(256) {
        turn();
        match op {
            Op::Read { offset, width: wd } => {
                let _ = mmio.read(u64::from(*offset), width(*wd));
            }
            Op::Write { offset, width: wd, value } => {
                let _ = mmio.write(&mem, u64::from(*offset), width(*wd), *value);
            }
            Op::Notify { queue } => w(&mut mmio, regs::QUEUE_NOTIFY, u64::from(*queue % 4)),
            Op::Poke { at, bytes } => {
                let at = usize::from(*at) % RAM_SIZE;
                let n = bytes.len().min(RAM_SIZE - at);
                let _ = mem.write(RAM_BASE + at as u64, &bytes[..n]);
            }
            Op::Continue => mmio.continue_work(&mem),
            Op::Input(bytes) => extra(&mut mmio, &mem, bytes),
        }
        let _ = mmio.take_incidents();
        assert_eq!(mem.refused_accesses(), 0, "the device touched memory outside the VM's RAM");
    }
}
