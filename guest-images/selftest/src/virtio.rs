//! A bare virtio-mmio driver (virtio 1.2, 4.2 and 2.7), for guests that drive a device's
//! queues by hand: they write descriptors and rings themselves, good or bad, and read what
//! the device did with them.

use core::ptr::{read_volatile, write_volatile};

/// The VM's virtio-mmio transports (docs/virtio.md): one window every 0x200 bytes.
pub const TRANSPORTS: usize = 0x0a00_0000;
const WINDOW: usize = 0x200;

const MAGIC_VALUE: usize = 0x000;
const VERSION: usize = 0x004;
const DEVICE_ID: usize = 0x008;
const DEVICE_FEATURES: usize = 0x010;
const DEVICE_FEATURES_SEL: usize = 0x014;
const DRIVER_FEATURES: usize = 0x020;
const DRIVER_FEATURES_SEL: usize = 0x024;
const QUEUE_SEL: usize = 0x030;
const QUEUE_NUM_MAX: usize = 0x034;
const QUEUE_NUM: usize = 0x038;
const QUEUE_READY: usize = 0x044;
const QUEUE_NOTIFY: usize = 0x050;
const INTERRUPT_STATUS: usize = 0x060;
const INTERRUPT_ACK: usize = 0x064;
const STATUS: usize = 0x070;
const QUEUE_DESC: usize = 0x080;
const QUEUE_DRIVER: usize = 0x090;
const QUEUE_DEVICE: usize = 0x0a0;

/// Device status bits (2.1).
pub const ACKNOWLEDGE: u32 = 1;
pub const DRIVER: u32 = 2;
pub const DRIVER_OK: u32 = 4;
pub const FEATURES_OK: u32 = 8;
pub const NEEDS_RESET: u32 = 0x40;

/// Descriptor flags (2.7.5).
pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;

/// VIRTIO_F_VERSION_1 (bit 32) and VIRTIO_F_INDIRECT_DESC (bit 28).
pub const FEATURES: u64 = (1 << 32) | (1 << 28);

fn read32(addr: usize) -> u32 {
    // SAFETY: RAM of this VM.
    unsafe { read_volatile(addr as *const u32) }
}

fn write32(addr: usize, value: u32) {
    // SAFETY: RAM of this VM.
    unsafe { write_volatile(addr as *mut u32, value) }
}

/// A register read as one plain `ldr`: an access the hypervisor can emulate must carry an
/// instruction syndrome (no writeback, no pair), which the compiler does not promise.
fn mmio_read32(addr: usize) -> u32 {
    let value: u32;
    // SAFETY: a register of the VM's virtio-mmio window (an absent one aborts, which only
    // `Device::find` provokes, under `expect_exception`).
    unsafe { core::arch::asm!("ldr {0:w}, [{1}]", out(reg) value, in(reg) addr, options(nostack)) };
    value
}

fn mmio_write32(addr: usize, value: u32) {
    // SAFETY: as for `mmio_read32`.
    unsafe { core::arch::asm!("str {0:w}, [{1}]", in(reg) value, in(reg) addr, options(nostack)) };
}

fn write16(addr: usize, value: u16) {
    // SAFETY: RAM of this VM (a ring).
    unsafe { write_volatile(addr as *mut u16, value) }
}

fn read16(addr: usize) -> u16 {
    // SAFETY: as for `write16`.
    unsafe { read_volatile(addr as *const u16) }
}

/// One virtio-mmio device.
#[derive(Clone, Copy)]
pub struct Device {
    base: usize,
}

/// One split virtqueue whose structures this guest placed at `at`: the descriptor table,
/// then the available ring at +0x1000, the used ring at +0x2000.
#[derive(Clone, Copy)]
pub struct Queue {
    pub index: u32,
    pub size: u16,
    pub desc: usize,
    pub avail: usize,
    pub used: usize,
}

impl Device {
    /// The first transport whose device has `id` (2: block, 1: network, 3: console).
    pub fn find(id: u32) -> Option<Device> {
        // A slot without a device reads as zeros (from the transports' shadow page,
        // docs/virtio.md) or aborts (without the page; beyond it).
        (0..32).map(|i| Device { base: TRANSPORTS + i * WINDOW }).find(|d| {
            let mut magic = 0;
            let present = crate::expect_exception(|| magic = mmio_read32(d.base + MAGIC_VALUE)).is_none();
            present && magic == 0x7472_6976 && d.register(VERSION) == 2 && d.register(DEVICE_ID) == id
        })
    }

    pub fn register(&self, offset: usize) -> u32 {
        mmio_read32(self.base + offset)
    }

    pub fn set_register(&self, offset: usize, value: u32) {
        mmio_write32(self.base + offset, value)
    }

    pub fn status(&self) -> u32 {
        self.register(STATUS)
    }

    /// Reset, then ACKNOWLEDGE, DRIVER and `FEATURES` as far as the device offers them;
    /// returns whether FEATURES_OK held.
    pub fn begin(&self) -> bool {
        self.set_register(STATUS, 0);
        self.set_register(STATUS, ACKNOWLEDGE | DRIVER);
        for sel in 0..2 {
            self.set_register(DEVICE_FEATURES_SEL, sel);
            let offered = self.register(DEVICE_FEATURES);
            self.set_register(DRIVER_FEATURES_SEL, sel);
            self.set_register(DRIVER_FEATURES, offered & (FEATURES >> (32 * sel)) as u32);
        }
        self.set_register(STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK);
        self.status() & FEATURES_OK != 0
    }

    /// Queue `index` of `size` entries with its structures at `at` (16 KiB of zeroed RAM).
    pub fn queue(&self, index: u32, size: u16, at: usize) -> Queue {
        for offset in (0..0x3000).step_by(4) {
            write32(at + offset, 0);
        }
        let q = Queue { index, size, desc: at, avail: at + 0x1000, used: at + 0x2000 };
        self.set_register(QUEUE_SEL, index);
        let size = size.min(self.register(QUEUE_NUM_MAX) as u16);
        self.set_register(QUEUE_NUM, u32::from(size));
        for (offset, addr) in [(QUEUE_DESC, q.desc), (QUEUE_DRIVER, q.avail), (QUEUE_DEVICE, q.used)] {
            self.set_register(offset, addr as u32);
            self.set_register(offset + 4, (addr as u64 >> 32) as u32);
        }
        self.set_register(QUEUE_READY, 1);
        Queue { size, ..q }
    }

    pub fn driver_ok(&self) {
        self.set_register(STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK | DRIVER_OK);
    }

    pub fn notify(&self, q: &Queue) {
        self.set_register(QUEUE_NOTIFY, q.index);
    }

    /// Acknowledges whatever interrupt the device raised.
    pub fn acknowledge_interrupt(&self) {
        let status = self.register(INTERRUPT_STATUS);
        self.set_register(INTERRUPT_ACK, status);
    }
}

impl Queue {
    /// Writes descriptor `i`.
    pub fn set_descriptor(&self, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = self.desc + 16 * usize::from(i % self.size);
        write32(at, addr as u32);
        write32(at + 4, (addr >> 32) as u32);
        write32(at + 8, len);
        write16(at + 12, flags);
        write16(at + 14, next);
    }

    /// Makes the chain at `head` available.
    pub fn publish(&self, head: u16) {
        let idx = read16(self.avail + 2);
        write16(self.avail + 4 + 2 * usize::from(idx % self.size), head);
        // SAFETY: a barrier: the entry before the index that publishes it (2.7.13).
        unsafe { core::arch::asm!("dmb ish") };
        write16(self.avail + 2, idx.wrapping_add(1));
    }

    pub fn used_index(&self) -> u16 {
        read16(self.used + 2)
    }

    /// Used element `n`: (descriptor head, length written).
    pub fn used(&self, n: u16) -> (u32, u32) {
        let at = self.used + 4 + 8 * usize::from(n % self.size);
        (read32(at), read32(at + 4))
    }
}

/// virtio-blk request types and status values (virtio 1.2, 5.2.6).
pub const BLK_T_IN: u32 = 0;
pub const BLK_T_OUT: u32 = 1;
pub const BLK_S_OK: u8 = 0;
pub const BLK_S_IOERR: u8 = 1;

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The device used the chain: (status byte, bytes written).
    Used { status: u8, written: u32 },
    /// The device set DEVICE_NEEDS_RESET instead.
    NeedsReset,
    /// Neither within the wait.
    Nothing,
}

/// A block device driven through queue 0 with its structures at `at` (16 KiB), a request
/// header at `at + 0x3000` and a status byte at `at + 0x3100`.
pub struct Block {
    pub device: Device,
    pub queue: Queue,
    pub header: usize,
    pub status: usize,
    at: usize,
}

impl Block {
    pub fn new(at: usize) -> Option<Block> {
        let device = Device::find(2)?;
        let mut b = Block {
            device,
            queue: Queue { index: 0, size: 0, desc: 0, avail: 0, used: 0 },
            header: at + 0x3000,
            status: at + 0x3100,
            at,
        };
        b.reset().then_some(b)
    }

    /// Resets the device and sets its queue up again, as a driver does after NEEDS_RESET.
    pub fn reset(&mut self) -> bool {
        if !self.device.begin() {
            return false;
        }
        self.queue = self.device.queue(0, 16, self.at);
        self.device.driver_ok();
        true
    }

    /// Writes a request header (type, sector) and a status byte of 0xff.
    pub fn prepare(&self, kind: u32, sector: u64) {
        write32(self.header, kind);
        write32(self.header + 4, 0);
        write32(self.header + 8, sector as u32);
        write32(self.header + 12, (sector >> 32) as u32);
        // SAFETY: RAM of this VM.
        unsafe { write_volatile(self.status as *mut u8, 0xff) };
    }

    /// Descriptors 0.. as given (address, length, flags; F_NEXT links each to the next),
    /// published, notified, and waited for up to `ms`.
    pub fn submit(&self, chain: &[(u64, u32, u16)], ms: u64) -> Completion {
        for (i, &(addr, len, flags)) in chain.iter().enumerate() {
            self.queue.set_descriptor(i as u16, addr, len, flags, i as u16 + 1);
        }
        self.publish_and_wait(0, ms)
    }

    /// Publishes the chain at `head`, notifies, and waits for the device.
    pub fn publish_and_wait(&self, head: u16, ms: u64) -> Completion {
        let seen = self.queue.used_index();
        self.queue.publish(head);
        self.device.notify(&self.queue);
        let start = crate::counter_ms();
        while crate::counter_ms() - start < ms {
            if self.queue.used_index() != seen {
                let (_, written) = self.queue.used(seen);
                // SAFETY: RAM of this VM.
                let status = unsafe { read_volatile(self.status as *const u8) };
                self.device.acknowledge_interrupt();
                return Completion::Used { status, written };
            }
            if self.device.status() & NEEDS_RESET != 0 {
                self.device.acknowledge_interrupt();
                return Completion::NeedsReset;
            }
        }
        Completion::Nothing
    }

    /// A well-formed request of `len` bytes at `buffer`: the device's status byte.
    pub fn transfer(&self, kind: u32, sector: u64, buffer: usize, len: u32) -> Completion {
        self.prepare(kind, sector);
        let data_flags = if kind == BLK_T_IN { F_NEXT | F_WRITE } else { F_NEXT };
        self.submit(
            &[(self.header as u64, 16, F_NEXT), (buffer as u64, len, data_flags), (self.status as u64, 1, F_WRITE)],
            5000,
        )
    }

    /// The capacity in 512-byte sectors (configuration space, 5.2.4).
    pub fn capacity(&self) -> u64 {
        u64::from(self.device.register(0x100)) | u64::from(self.device.register(0x104)) << 32
    }
}
