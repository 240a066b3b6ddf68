//! A virtio driver for tests, following the driver rules of virtio 1.2: initialisation
//! (3.1.1), virtqueue set-up (4.2.3.2) and supplying buffers (2.7.13), over a `VecMemory`.
//! It also offers raw access to the rings so tests can write what a buggy driver would.
#![allow(dead_code)]

use vdev::virtio::features::{status, VIRTIO_F_EVENT_IDX, VIRTIO_F_INDIRECT_DESC, VIRTIO_F_VERSION_1};
use vdev::virtio::transport::regs;
use vdev::virtio::{GuestMemory, VecMemory, VirtioDevice, VirtioMmio};

pub const RAM_BASE: u64 = 0x4000_0000;
pub const RAM_SIZE: usize = 1 << 20;
/// Rings of queue q live at RING_AREA + q * RING_STRIDE.
const RING_AREA: u64 = RAM_BASE + 0x1000;
const RING_STRIDE: u64 = 0x4000;
/// Data buffers are allocated from here upward.
const DATA_AREA: u64 = RAM_BASE + 0x2_0000;

pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;

/// A buffer the driver puts into a chain.
#[derive(Clone, Copy, Debug)]
pub struct Buf {
    pub addr: u64,
    pub len: u32,
    pub writable: bool,
}

pub fn ro(addr: u64, len: u32) -> Buf {
    Buf { addr, len, writable: false }
}

pub fn wr(addr: u64, len: u32) -> Buf {
    Buf { addr, len, writable: true }
}

#[derive(Clone, Debug)]
pub struct DriverQueue {
    pub size: u16,
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    /// Next descriptor index to hand out (round robin: tests never exceed the ring).
    pub next_desc: u16,
    pub avail_idx: u16,
    pub last_used: u16,
}

pub struct Driver<D: VirtioDevice> {
    pub mmio: VirtioMmio<D>,
    pub mem: VecMemory,
    pub queues: Vec<DriverQueue>,
    pub features: u64,
    next_data: u64,
}

impl<D: VirtioDevice> Driver<D> {
    /// A device with its driver fully initialised, accepting every offered feature in `wanted`.
    pub fn new(device: D, wanted: u64) -> Self {
        let mut d = Self::bare(device);
        d.init(wanted, None).expect("initialisation");
        d
    }

    /// The default: VERSION_1, and INDIRECT_DESC but not EVENT_IDX.
    pub fn standard(device: D) -> Self {
        Self::new(device, !VIRTIO_F_EVENT_IDX)
    }

    /// Not initialised at all.
    pub fn bare(device: D) -> Self {
        Self::bare_with_ram(device, RAM_SIZE)
    }

    /// Initialised as `standard`, with `ram` bytes of guest RAM.
    pub fn standard_with_ram(device: D, ram: usize) -> Self {
        let mut d = Self::bare_with_ram(device, ram);
        d.init(!VIRTIO_F_EVENT_IDX, None).expect("initialisation");
        d
    }

    fn bare_with_ram(device: D, ram: usize) -> Self {
        Driver {
            mmio: VirtioMmio::new(device),
            mem: VecMemory::new(RAM_BASE, ram),
            queues: Vec::new(),
            features: 0,
            next_data: DATA_AREA,
        }
    }

    pub fn read(&mut self, offset: u64) -> u32 {
        self.mmio.read(offset, 4).expect("register read") as u32
    }

    pub fn write(&mut self, offset: u64, value: u32) {
        self.mmio.write(&self.mem, offset, 4, u64::from(value)).expect("register write")
    }

    pub fn device_features(&mut self) -> u64 {
        self.write(regs::DEVICE_FEATURES_SEL, 0);
        let low = self.read(regs::DEVICE_FEATURES);
        self.write(regs::DEVICE_FEATURES_SEL, 1);
        let high = self.read(regs::DEVICE_FEATURES);
        u64::from(low) | (u64::from(high) << 32)
    }

    pub fn write_driver_features(&mut self, features: u64) {
        self.write(regs::DRIVER_FEATURES_SEL, 0);
        self.write(regs::DRIVER_FEATURES, features as u32);
        self.write(regs::DRIVER_FEATURES_SEL, 1);
        self.write(regs::DRIVER_FEATURES, (features >> 32) as u32);
    }

    /// 3.1.1 step by step; `queue_num` overrides QueueNum (else QueueNumMax).
    pub fn init(&mut self, wanted: u64, queue_num: Option<u32>) -> Result<(), &'static str> {
        self.write(regs::STATUS, 0);
        if self.read(regs::STATUS) != 0 {
            return Err("status not 0 after reset");
        }
        self.write(regs::STATUS, status::ACKNOWLEDGE);
        self.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
        let offered = self.device_features();
        let accepted = offered & wanted;
        self.write_driver_features(accepted);
        self.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
        if self.read(regs::STATUS) & status::FEATURES_OK == 0 {
            return Err("FEATURES_OK refused");
        }
        self.features = accepted;
        self.queues.clear();
        let mut q = 0u16;
        loop {
            self.write(regs::QUEUE_SEL, u32::from(q));
            let max = self.read(regs::QUEUE_NUM_MAX) as u16;
            if max == 0 {
                break;
            }
            if self.read(regs::QUEUE_READY) != 0 {
                return Err("queue already ready");
            }
            // Tests may ask for an invalid QueueNum on purpose.
            let num = queue_num.unwrap_or(u32::from(max));
            let size = num as u16;
            let base = RING_AREA + u64::from(q) * RING_STRIDE;
            let dq = DriverQueue {
                size,
                desc: base,
                avail: base + 0x1000,
                used: base + 0x2000,
                next_desc: 0,
                avail_idx: 0,
                last_used: 0,
            };
            // Fresh rings are zeroed by the driver.
            self.mem.write(base, &vec![0; RING_STRIDE as usize]).unwrap();
            self.write(regs::QUEUE_NUM, num);
            self.write(regs::QUEUE_DESC_LOW, dq.desc as u32);
            self.write(regs::QUEUE_DESC_HIGH, (dq.desc >> 32) as u32);
            self.write(regs::QUEUE_DRIVER_LOW, dq.avail as u32);
            self.write(regs::QUEUE_DRIVER_HIGH, (dq.avail >> 32) as u32);
            self.write(regs::QUEUE_DEVICE_LOW, dq.used as u32);
            self.write(regs::QUEUE_DEVICE_HIGH, (dq.used >> 32) as u32);
            self.write(regs::QUEUE_READY, 1);
            if self.read(regs::QUEUE_READY) != 1 {
                return Err("queue not ready");
            }
            self.queues.push(dq);
            q += 1;
        }
        self.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK);
        Ok(())
    }

    /// Driver-side reset then full initialisation again.
    pub fn reinit(&mut self, wanted: u64) {
        self.init(wanted, None).expect("re-initialisation");
    }

    /// A fresh data buffer in RAM, filled with `fill`.
    pub fn alloc(&mut self, len: usize, fill: u8) -> u64 {
        let addr = self.next_data;
        self.next_data = (self.next_data + len as u64 + 15) & !15;
        assert!(self.mem.check(addr, len as u64).is_ok(), "test data area exhausted");
        self.mem.write(addr, &vec![fill; len]).unwrap();
        addr
    }

    pub fn alloc_with(&mut self, data: &[u8]) -> u64 {
        let addr = self.alloc(data.len(), 0);
        self.mem.write(addr, data).unwrap();
        addr
    }

    pub fn peek(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mem.read(addr, &mut b).unwrap();
        b
    }

    pub fn poke16(&self, addr: u64, v: u16) {
        self.mem.write(addr, &v.to_le_bytes()).unwrap();
    }

    pub fn peek16(&self, addr: u64) -> u16 {
        let b = self.peek(addr, 2);
        u16::from_le_bytes([b[0], b[1]])
    }

    /// Writes descriptor `index` of queue `q` as given (no checks: tests use it to misbehave).
    pub fn write_desc(&self, q: usize, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = self.queues[q].desc + 16 * u64::from(index);
        write_desc_at(&self.mem, at, addr, len, flags, next);
    }

    /// Puts `head` in the next available slot and publishes it (2.7.13.2-3).
    pub fn publish(&mut self, q: usize, head: u16) {
        let dq = self.queues[q].clone();
        let slot = u64::from(dq.avail_idx % dq.size);
        self.poke16(dq.avail + 4 + 2 * slot, head);
        self.queues[q].avail_idx = dq.avail_idx.wrapping_add(1);
        self.poke16(dq.avail + 2, self.queues[q].avail_idx);
    }

    fn take_descs(&mut self, q: usize, n: usize) -> Vec<u16> {
        let dq = &mut self.queues[q];
        (0..n)
            .map(|_| {
                let i = dq.next_desc;
                dq.next_desc = (dq.next_desc + 1) % dq.size;
                i
            })
            .collect()
    }

    /// Makes a chain of direct descriptors available (not notified); returns the head.
    pub fn add_chain(&mut self, q: usize, bufs: &[Buf]) -> u16 {
        let idx = self.take_descs(q, bufs.len());
        for (k, b) in bufs.iter().enumerate() {
            let last = k + 1 == bufs.len();
            let flags = if b.writable { F_WRITE } else { 0 } | if last { 0 } else { F_NEXT };
            let next = if last { 0 } else { idx[k + 1] };
            self.write_desc(q, idx[k], b.addr, b.len, flags, next);
        }
        self.publish(q, idx[0]);
        idx[0]
    }

    /// Makes a chain available through one indirect table (2.7.5.3); returns the head.
    pub fn add_indirect(&mut self, q: usize, bufs: &[Buf]) -> u16 {
        let table = self.alloc(16 * bufs.len(), 0);
        for (k, b) in bufs.iter().enumerate() {
            let last = k + 1 == bufs.len();
            let flags = if b.writable { F_WRITE } else { 0 } | if last { 0 } else { F_NEXT };
            write_desc_at(&self.mem, table + 16 * k as u64, b.addr, b.len, flags, (k + 1) as u16);
        }
        let head = self.take_descs(q, 1)[0];
        self.write_desc(q, head, table, 16 * bufs.len() as u32, F_INDIRECT, 0);
        self.publish(q, head);
        head
    }

    pub fn notify(&mut self, q: usize) {
        self.write(regs::QUEUE_NOTIFY, q as u32);
    }

    pub fn used_idx(&self, q: usize) -> u16 {
        self.peek16(self.queues[q].used + 2)
    }

    /// Used elements (id, len) published since the last call.
    pub fn take_used(&mut self, q: usize) -> Vec<(u32, u32)> {
        let dq = self.queues[q].clone();
        let idx = self.used_idx(q);
        let mut out = Vec::new();
        let mut i = dq.last_used;
        while i != idx {
            let at = dq.used + 4 + 8 * u64::from(i % dq.size);
            let b = self.peek(at, 8);
            out.push((
                u32::from_le_bytes(b[0..4].try_into().unwrap()),
                u32::from_le_bytes(b[4..8].try_into().unwrap()),
            ));
            i = i.wrapping_add(1);
        }
        self.queues[q].last_used = idx;
        out
    }

    /// 2.7.7.2: used_event, in the available ring after the ring entries.
    pub fn set_used_event(&self, q: usize, v: u16) {
        let dq = &self.queues[q];
        self.poke16(dq.avail + 4 + 2 * u64::from(dq.size), v);
    }

    /// 2.7.10: avail_event, in the used ring after the used elements.
    pub fn avail_event(&self, q: usize) -> u16 {
        let dq = &self.queues[q];
        self.peek16(dq.used + 4 + 8 * u64::from(dq.size))
    }

    pub fn set_avail_flags(&self, q: usize, flags: u16) {
        self.poke16(self.queues[q].avail, flags);
    }

    /// Reads and acknowledges InterruptStatus, as an interrupt handler does.
    pub fn ack_interrupt(&mut self) -> u32 {
        let s = self.read(regs::INTERRUPT_STATUS);
        self.write(regs::INTERRUPT_ACK, s);
        s
    }

    pub fn needs_reset(&self) -> bool {
        self.mmio.status() & status::DEVICE_NEEDS_RESET != 0
    }
}

pub fn write_desc_at(mem: &VecMemory, at: u64, addr: u64, len: u32, flags: u16, next: u16) {
    let mut d = [0u8; 16];
    d[0..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&flags.to_le_bytes());
    d[14..16].copy_from_slice(&next.to_le_bytes());
    mem.write(at, &d).unwrap();
}

pub const ALL_TRANSPORT: u64 = VIRTIO_F_VERSION_1 | VIRTIO_F_INDIRECT_DESC | VIRTIO_F_EVENT_IDX;

/// A console backend that keeps what the device wrote.
#[derive(Default)]
pub struct Screen(pub Vec<u8>);
impl vdev::virtio::console::ConsoleBackend for Screen {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// A NIC backend that takes every frame and sends nothing.
pub struct NoNet;
impl vdev::virtio::net::NetBackend for NoNet {
    fn transmit(&mut self, _frame: &[u8]) -> bool {
        true
    }
}
