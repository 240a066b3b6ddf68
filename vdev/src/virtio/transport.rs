//! The virtio-mmio transport, version 2 (virtio 1.2, 4.2.2): the 0x200-byte register window a
//! guest sees, feature negotiation and device status (2.1, 2.2, 3.1.1), queue set-up, and the
//! dispatch of queue notifications to the device model with interrupt decisions afterwards.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::virtio::device::{ConfigError, NeedsReset, QueueAccess, VirtioDevice};
use crate::virtio::features::{interrupt, status, TRANSPORT_FEATURES, VIRTIO_F_EVENT_IDX, VIRTIO_F_VERSION_1};
use crate::virtio::incident::{DeviceIncident, IncidentLog};
use crate::virtio::memory::GuestMemory;
use crate::virtio::queue::Virtqueue;

/// Register offsets of the version-2 layout (4.2.2, table "MMIO Device Register Layout").
pub mod regs {
    pub const MAGIC_VALUE: u64 = 0x000;
    pub const VERSION: u64 = 0x004;
    pub const DEVICE_ID: u64 = 0x008;
    pub const VENDOR_ID: u64 = 0x00c;
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    pub const QUEUE_NOTIFY: u64 = 0x050;
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    pub const SHM_SEL: u64 = 0x0ac;
    pub const SHM_LEN_LOW: u64 = 0x0b0;
    pub const SHM_LEN_HIGH: u64 = 0x0b4;
    pub const SHM_BASE_LOW: u64 = 0x0b8;
    pub const SHM_BASE_HIGH: u64 = 0x0bc;
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// Registers of the legacy layout only (4.2.4, "Legacy interface"): GuestPageSize,
    /// QueueAlign, QueuePFN.
    pub const LEGACY_GUEST_PAGE_SIZE: u64 = 0x028;
    pub const LEGACY_QUEUE_ALIGN: u64 = 0x03c;
    pub const LEGACY_QUEUE_PFN: u64 = 0x040;
    pub const CONFIG: u64 = 0x100;
    /// Size of one transport's window.
    pub const WINDOW_SIZE: u64 = 0x200;
}

/// "virt" in little-endian ASCII (4.2.2).
pub const MAGIC: u32 = 0x7472_6976;
/// The non-legacy register layout (4.2.2).
pub const VERSION: u32 = 2;
/// Our own vendor ID: "HYVR" in little-endian ASCII. Linux ignores it; it only tells a curious
/// guest which implementation it runs on (QEMU uses "QEMU", 0x554d4551).
pub const VENDOR_ID: u32 = 0x5256_5948;

/// A guest register access the transport refuses; the hypervisor answers with a data abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterError {
    NoRegister { offset: u64 },
    BadWidth { offset: u64, width: u8 },
    ReadOnly { offset: u64 },
    WriteOnly { offset: u64 },
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RegisterError::NoRegister { offset } => {
                write!(f, "virtio-mmio: no register at offset {offset:#x}")
            }
            RegisterError::BadWidth { offset, width } => write!(
                f,
                "virtio-mmio: {width}-byte access at offset {offset:#x} refused: control registers take aligned 32-bit accesses, configuration fields their own aligned width (virtio 4.2.2.2)"
            ),
            RegisterError::ReadOnly { offset } => write!(f, "virtio-mmio: register at offset {offset:#x} is read-only"),
            RegisterError::WriteOnly { offset } => {
                write!(f, "virtio-mmio: register at offset {offset:#x} is write-only")
            }
        }
    }
}

/// The legacy-only registers: on this version-2 device they read as zero and ignore writes,
/// with an incident (as QEMU does), so an old driver that probes them before it reads
/// Version is not killed by an external abort and can see the version and give up.
const LEGACY_ONLY: [u64; 3] = [regs::LEGACY_GUEST_PAGE_SIZE, regs::LEGACY_QUEUE_ALIGN, regs::LEGACY_QUEUE_PFN];

const WRITE_ONLY: [u64; 14] = [
    regs::DEVICE_FEATURES_SEL,
    regs::DRIVER_FEATURES,
    regs::DRIVER_FEATURES_SEL,
    regs::QUEUE_SEL,
    regs::QUEUE_NUM,
    regs::QUEUE_NOTIFY,
    regs::INTERRUPT_ACK,
    regs::QUEUE_DESC_LOW,
    regs::QUEUE_DESC_HIGH,
    regs::QUEUE_DRIVER_LOW,
    regs::QUEUE_DRIVER_HIGH,
    regs::QUEUE_DEVICE_LOW,
    regs::QUEUE_DEVICE_HIGH,
    regs::SHM_SEL,
];

const READ_ONLY: [u64; 12] = [
    regs::MAGIC_VALUE,
    regs::VERSION,
    regs::DEVICE_ID,
    regs::VENDOR_ID,
    regs::DEVICE_FEATURES,
    regs::QUEUE_NUM_MAX,
    regs::INTERRUPT_STATUS,
    regs::SHM_LEN_LOW,
    regs::SHM_LEN_HIGH,
    regs::SHM_BASE_LOW,
    regs::SHM_BASE_HIGH,
    regs::CONFIG_GENERATION,
];

/// InterruptStatus (4.2.2) as one atomic word: the status bits in its low byte (the
/// transport defines bits 0 and 1), above them a count of the word's changes. The device
/// raises bits under its owner's lock; the owner may let a guest acknowledge them without
/// that lock (a side core's device: `hyp_runtime::virtio::slot`). Both are
/// read-modify-writes of this word, so each takes effect in the word's one order: an
/// acknowledgement clears only bits raised before it, and a bit raised after it (a
/// completion during a side core's pass) stays raised. The count orders the levels that
/// different CPUs show on the device's line: the one of the latest change wins.
#[derive(Debug, Default)]
pub struct InterruptWord(AtomicU64);

/// The word's status bits and its change count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterruptState {
    pub status: u32,
    /// How many times the word changed (56 bits: it never wraps).
    pub change: u64,
}

impl InterruptWord {
    const BITS: u64 = 0xff;

    pub fn load(&self) -> InterruptState {
        Self::state(self.0.load(Ordering::Acquire))
    }

    fn state(word: u64) -> InterruptState {
        InterruptState { status: (word & Self::BITS) as u32, change: word >> 8 }
    }

    /// `f` applied to the status bits, as one change; the state after it. Release: what the
    /// device wrote before (the used ring) is seen by whoever sees the change; acquire: the
    /// acknowledging CPU's guest then sees it too.
    fn update(&self, f: impl Fn(u32) -> u32) -> InterruptState {
        let mut old = self.0.load(Ordering::Relaxed);
        loop {
            let status = u64::from(f((old & Self::BITS) as u32)) & Self::BITS;
            let new = ((old >> 8).wrapping_add(1) << 8) | status;
            match self.0.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Self::state(new),
                Err(now) => old = now,
            }
        }
    }

    /// The device raises `bits`.
    pub fn raise(&self, bits: u32) -> InterruptState {
        self.update(|s| s | bits)
    }

    /// The driver acknowledges `bits` (InterruptACK).
    pub fn acknowledge(&self, bits: u32) -> InterruptState {
        self.update(|s| s & !bits)
    }

    /// A reset: no bit raised.
    pub fn clear(&self) -> InterruptState {
        self.update(|_| 0)
    }
}

/// One virtio-mmio device: transport state plus the device model.
pub struct VirtioMmio<D: VirtioDevice> {
    pub(crate) device: D,
    pub(crate) status: u32,
    device_features_sel: u32,
    driver_features: u64,
    driver_features_sel: u32,
    /// The driver set a bit in a DriverFeatures word beyond the second (no feature lives there).
    driver_features_beyond: bool,
    queue_sel: u32,
    pub(crate) queues: Vec<Virtqueue>,
    /// InterruptStatus, shared with the device's owner (`interrupt_word`).
    interrupt: Arc<InterruptWord>,
    pub(crate) incidents: IncidentLog,
    /// A side core serves the queues (`poll`): a QueueNotify only marks the queue
    /// (`notified`), and no guest register write runs the device model.
    polled: bool,
    /// Queues notified since the side core's last pass (bit n: queue n).
    notified: u32,
    /// Queues whose last notify stopped at its budget (`QueueAccess::pop`) with chains
    /// perhaps left (bit n: queue n): served again by `continue_work`. With EVENT_IDX the
    /// driver notifies only when its index passes avail_event, which the device moves only
    /// once it finds the ring empty (2.7.10): a chain left there would wait for ever.
    unfinished: u32,
    /// The sum of the queues' used indices at the last pass: a change is device activity.
    used_seen: u32,
    /// The interrupts raised since the owner last asked (`take_raised`): a transport whose
    /// interrupts name their source (virtio-pci's MSI-X vectors) maps them to messages. The
    /// virtio-mmio owner ignores it; keeping it costs a bit-or where an interrupt is raised.
    raised: Raised,
}

/// What the device raised since `VirtioMmio::take_raised` was last called: which queues'
/// new used entries called for a used buffer notification, and whether a configuration
/// change notification was sent (virtio 1.2, 2.1.2 and 4.1.5.3/4.1.5.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Raised {
    /// Bit n: queue n.
    pub queues: u32,
    pub config: bool,
}

impl Raised {
    pub fn is_empty(&self) -> bool {
        self.queues == 0 && !self.config
    }
}

/// What one side-core pass over a device found (`VirtioMmio::poll`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollPass {
    /// Chains taken from an available ring, or work left from the last pass done.
    pub took: bool,
    /// Used rings moved since the last pass (completions, frames received).
    pub completed: bool,
}

impl PollPass {
    /// Anything at all: the side core keeps polling.
    pub fn active(&self) -> bool {
        self.took || self.completed
    }
}

/// Queues a device may have (its own choice, not the guest's; ours have at most two).
pub const MAX_QUEUES: usize = 8;

impl<D: VirtioDevice> VirtioMmio<D> {
    pub fn new(device: D) -> Self {
        let count = device.num_queues().min(MAX_QUEUES as u16);
        let queues = (0..count).map(|q| Virtqueue::new(device.queue_max_size(q))).collect();
        VirtioMmio {
            device,
            status: 0,
            device_features_sel: 0,
            driver_features: 0,
            driver_features_sel: 0,
            driver_features_beyond: false,
            queue_sel: 0,
            queues,
            interrupt: Arc::new(InterruptWord::default()),
            incidents: IncidentLog::default(),
            polled: false,
            notified: 0,
            unfinished: 0,
            used_seen: 0,
            raised: Raised::default(),
        }
    }

    /// The interrupts raised since the last call (`Raised`), forgotten by it.
    pub fn take_raised(&mut self) -> Raised {
        core::mem::take(&mut self.raised)
    }

    /// A side core serves this device from now on (docs/virtio.md, "The side core"): the
    /// guest's notifies only mark their queue, and `poll` does the device work.
    pub fn set_polled(&mut self, polled: bool) {
        self.polled = polled;
    }

    pub fn is_polled(&self) -> bool {
        self.polled
    }

    /// One pass of the side core over the device: while it polls (`suppress`), every ready
    /// queue is told not to notify; each queue with available chains (or notified since
    /// the last pass) is processed as a notify would be, and work left from the last pass
    /// goes on. Interrupt decisions and driver errors as for a notify (`run`).
    pub fn poll(&mut self, mem: &dyn GuestMemory, suppress: bool) -> PollPass {
        let mut pass = PollPass::default();
        let notified = core::mem::take(&mut self.notified);
        if !self.running() {
            return pass;
        }
        let event_idx = self.negotiated_features() & VIRTIO_F_EVENT_IDX != 0;
        let mut broken = false;
        for (index, q) in self.queues.iter_mut().enumerate() {
            if !q.ready {
                continue;
            }
            // Queue counts come from the device (a u16).
            let queue = index as u16;
            let wanted = suppress || !self.device.notify_needed(queue);
            if wanted && !q.suppressed {
                if let Err(incident) = q.suppress_notifications(mem, queue, event_idx) {
                    self.incidents.record(incident);
                    broken = true;
                }
            }
        }
        if broken {
            self.set_needs_reset();
            return pass;
        }
        for queue in 0..self.queues.len() as u16 {
            // A queue whose buffers the device takes on its own events (a NIC's receive
            // queue) has nothing to serve on a pass.
            if !self.device.notify_needed(queue) {
                continue;
            }
            let Some(q) = self.queues.get(usize::from(queue)).filter(|q| q.ready) else { continue };
            let available = match q.has_available(mem, queue) {
                Ok(available) => available,
                Err(incident) => {
                    self.incidents.record(incident);
                    self.set_needs_reset();
                    return pass;
                }
            };
            if !available && notified & (1 << queue) == 0 {
                continue;
            }
            let before = q.last_avail;
            self.process(mem, queue);
            let Some(q) = self.queues.get(usize::from(queue)) else { continue };
            pass.took |= q.last_avail != before;
            // A suppressing avail_event follows the device's index (`refresh_suppression`).
            if q.ready && q.suppressed && event_idx && self.running() {
                if let Err(incident) = q.refresh_suppression(mem, queue, event_idx) {
                    self.incidents.record(incident);
                    self.set_needs_reset();
                }
            }
        }
        // Work a bounded step left: the device's own goes on now; chains a budget left on a
        // queue are the next pass's, which looks at every queue (served again here, one
        // pass would take two budgets).
        if self.has_pending_work() {
            pass.took = true;
            self.unfinished = 0;
            self.continue_work(mem);
        }
        let used = self.queues.iter().fold(0u32, |sum, q| sum.wrapping_add(u32::from(q.used_idx)));
        pass.completed = used != core::mem::replace(&mut self.used_seen, used);
        pass
    }

    /// The side core goes to sleep: the queues whose notifies the device needs are asked
    /// for them again, and their available index read once more (virtio 1.2 2.7.10; see
    /// `Virtqueue::enable_notifications`). True if a chain came while they were suppressed:
    /// the side core must not sleep.
    pub fn enable_notifications(&mut self, mem: &dyn GuestMemory) -> bool {
        if !self.running() {
            return false;
        }
        let event_idx = self.negotiated_features() & VIRTIO_F_EVENT_IDX != 0;
        let mut pending = false;
        let mut broken = false;
        for (index, q) in self.queues.iter_mut().enumerate() {
            let queue = index as u16;
            if !q.ready || !q.suppressed || !self.device.notify_needed(queue) {
                continue;
            }
            match q.enable_notifications(mem, queue, event_idx) {
                Ok(available) => pending |= available,
                Err(incident) => {
                    self.incidents.record(incident);
                    broken = true;
                }
            }
        }
        if broken {
            self.set_needs_reset();
        }
        pending || self.notified != 0
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Everything offered: the device's bits and the transport's (6).
    pub fn offered_features(&self) -> u64 {
        self.device.device_features() | TRANSPORT_FEATURES
    }

    /// The features in force: what the driver accepted, once FEATURES_OK stuck.
    pub fn negotiated_features(&self) -> u64 {
        if self.status & status::FEATURES_OK != 0 {
            self.driver_features
        } else {
            0
        }
    }

    /// Device status register (2.1), including DEVICE_NEEDS_RESET (64) when set.
    pub fn status(&self) -> u32 {
        self.status
    }

    pub fn needs_reset(&self) -> bool {
        self.status & status::DEVICE_NEEDS_RESET != 0
    }

    /// The level of the device's interrupt line: InterruptStatus != 0 (level-triggered).
    pub fn interrupt_level(&self) -> bool {
        self.interrupt.load().status != 0
    }

    /// InterruptStatus (bit 0 used buffer, bit 1 configuration change).
    pub fn interrupt_status(&self) -> u32 {
        self.interrupt.load().status
    }

    /// InterruptStatus with its change count.
    pub fn interrupt_state(&self) -> InterruptState {
        self.interrupt.load()
    }

    /// The word that holds InterruptStatus, for an owner that lets the driver acknowledge
    /// without its lock (`InterruptWord`).
    pub fn interrupt_word(&self) -> Arc<InterruptWord> {
        Arc::clone(&self.interrupt)
    }

    /// The word itself, for the transports of this crate (virtio-pci's ISR status).
    pub(crate) fn interrupt_ref(&self) -> &InterruptWord {
        &self.interrupt
    }

    /// DriverFeatures word `select` as the driver wrote it (0 beyond the second word): what
    /// virtio-pci's `driver_feature` reads back, where virtio-mmio's is write-only.
    pub(crate) fn driver_features_word(&self, select: u32) -> u32 {
        match select {
            0 => self.driver_features as u32,
            1 => (self.driver_features >> 32) as u32,
            _ => 0,
        }
    }

    /// Queue `index` as the device sees it (for logs and tests).
    pub fn queue(&self, index: u16) -> Option<&Virtqueue> {
        self.queues.get(usize::from(index))
    }

    /// Errors the guest's driver made since the last call (bounded; a leading `Dropped` entry
    /// counts the ones that did not fit).
    pub fn take_incidents(&mut self) -> Vec<DeviceIncident> {
        self.incidents.take()
    }

    /// Whether the driver made an error since the last `take_incidents`: a plain test, so
    /// an access that made none (nearly all) takes and logs nothing.
    pub fn has_incidents(&self) -> bool {
        !self.incidents.is_empty()
    }

    /// Reset as at power-on (VM reboot).
    pub fn reset(&mut self) {
        self.reset_transport();
        self.device.power_on_reset();
        self.incidents = IncidentLog::default();
    }

    /// Device reset by the driver writing 0 to Status (2.1, 4.2.2).
    fn reset_transport(&mut self) {
        self.status = 0;
        self.device_features_sel = 0;
        self.driver_features = 0;
        self.driver_features_sel = 0;
        self.driver_features_beyond = false;
        self.queue_sel = 0;
        for q in &mut self.queues {
            *q = Virtqueue::new(q.max_size);
        }
        self.interrupt.clear();
        self.notified = 0;
        self.unfinished = 0;
        self.used_seen = 0;
        self.raised = Raised::default();
    }

    /// Queues are processed only once DRIVER_OK is set and until the device needs a reset.
    pub(crate) fn running(&self) -> bool {
        self.status & (status::DRIVER_OK | status::DEVICE_NEEDS_RESET) == status::DRIVER_OK
    }

    pub(crate) fn queue_ready(&self, queue: u16) -> bool {
        self.queues.get(usize::from(queue)).is_some_and(|q| q.ready)
    }

    /// 2.1.2: the device hit a driver error it cannot recover from. It stops processing and,
    /// if DRIVER_OK is set, tells the driver with a configuration change notification.
    pub(crate) fn set_needs_reset(&mut self) {
        self.status |= status::DEVICE_NEEDS_RESET;
        if self.status & status::DRIVER_OK != 0 {
            self.interrupt.raise(interrupt::CONFIG_CHANGE);
            self.raised.config = true;
        }
    }

    /// Runs `f` against the device and its queues, then raises the used-buffer interrupt for
    /// every queue whose new used entries call for one, and DEVICE_NEEDS_RESET on a driver bug.
    /// Nothing runs (`Err(NeedsReset)`, the status unchanged) unless the device is running:
    /// DRIVER_OK set and no reset needed. A device that finishes requests later (a block
    /// device's completions) does it through this, as a notify would.
    pub fn run<R>(
        &mut self,
        mem: &dyn GuestMemory,
        f: impl FnOnce(&mut D, &mut QueueAccess<'_>) -> Result<R, NeedsReset>,
    ) -> Result<R, NeedsReset> {
        if !self.running() {
            return Err(NeedsReset);
        }
        let features = self.negotiated_features();
        // A guest's notify must not allocate: the used indices fit in an array.
        let mut before = [0u16; MAX_QUEUES];
        for (b, q) in before.iter_mut().zip(&self.queues) {
            *b = q.used_idx;
        }
        let mut access = QueueAccess {
            mem,
            queues: &mut self.queues,
            features,
            incidents: &mut self.incidents,
            popped: 0,
            budget_spent: 0,
        };
        let mut result = f(&mut self.device, &mut access);
        self.unfinished |= access.budget_spent;
        let event_idx = features & VIRTIO_F_EVENT_IDX != 0;
        for (index, (q, old)) in self.queues.iter().zip(before).enumerate() {
            if !q.ready {
                continue;
            }
            // The queue count comes from the device (a u16), so the index fits.
            match q.needs_interrupt(mem, index as u16, old, event_idx) {
                Ok(true) => {
                    self.interrupt.raise(interrupt::USED_BUFFER);
                    self.raised.queues |= 1 << index;
                }
                Ok(false) => {}
                Err(incident) => {
                    self.incidents.record(incident);
                    result = Err(NeedsReset);
                }
            }
        }
        if result.is_err() {
            self.set_needs_reset();
        }
        result
    }

    /// A guest read of `width` bytes (1, 2, 4 or 8) at `offset` in the window.
    pub fn read(&mut self, offset: u64, width: u8) -> Result<u64, RegisterError> {
        if offset >= regs::CONFIG {
            return self.read_config(offset, width);
        }
        if width != 4 || !offset.is_multiple_of(4) {
            return Err(RegisterError::BadWidth { offset, width });
        }
        if let Some(value) = self.register(offset) {
            return Ok(u64::from(value));
        }
        match offset {
            o if LEGACY_ONLY.contains(&o) => {
                self.incidents.record(DeviceIncident::LegacyRegister { offset, write: false });
                Ok(0)
            }
            o if WRITE_ONLY.contains(&o) => Err(RegisterError::WriteOnly { offset }),
            _ => Err(RegisterError::NoRegister { offset }),
        }
    }

    /// The value of the readable control register at `offset` (a multiple of 4 below the
    /// configuration space), `None` where no register reads: what a 32-bit read returns,
    /// with nothing changed (the transports' shadow page is rendered from it too,
    /// `crate::virtio::shadow`).
    pub(crate) fn register(&self, offset: u64) -> Option<u32> {
        Some(match offset {
            regs::MAGIC_VALUE => MAGIC,
            regs::VERSION => VERSION,
            regs::DEVICE_ID => self.device.device_id(),
            regs::VENDOR_ID => VENDOR_ID,
            regs::DEVICE_FEATURES => match self.device_features_sel {
                0 => self.offered_features() as u32,
                1 => (self.offered_features() >> 32) as u32,
                _ => 0,
            },
            regs::QUEUE_NUM_MAX => self.selected().map_or(0, |q| u32::from(q.max_size)),
            regs::QUEUE_READY => self.selected().map_or(0, |q| u32::from(q.ready)),
            regs::INTERRUPT_STATUS => self.interrupt.load().status,
            regs::STATUS => self.status,
            // No shared memory regions: a non-existent region reads as length -1 (4.2.2).
            regs::SHM_LEN_LOW | regs::SHM_LEN_HIGH | regs::SHM_BASE_LOW | regs::SHM_BASE_HIGH => u32::MAX,
            // The configuration never changes under the driver's feet.
            regs::CONFIG_GENERATION => 0,
            _ => return None,
        })
    }

    fn read_config(&self, offset: u64, width: u8) -> Result<u64, RegisterError> {
        if offset >= regs::WINDOW_SIZE {
            return Err(RegisterError::NoRegister { offset });
        }
        self.device.read_config(offset - regs::CONFIG, width).map_err(|e| config_error(e, offset, width))
    }

    /// A guest write. A QueueNotify write processes that queue at once against `mem`.
    pub fn write(&mut self, mem: &dyn GuestMemory, offset: u64, width: u8, value: u64) -> Result<(), RegisterError> {
        if offset >= regs::CONFIG {
            return self.write_config(offset, width, value);
        }
        if width != 4 || !offset.is_multiple_of(4) {
            return Err(RegisterError::BadWidth { offset, width });
        }
        // A 32-bit access: the upper half of `value` is not part of it.
        let v = value as u32;
        match offset {
            regs::DEVICE_FEATURES_SEL => self.device_features_sel = v,
            regs::DRIVER_FEATURES => self.write_driver_features(v),
            regs::DRIVER_FEATURES_SEL => self.driver_features_sel = v,
            regs::QUEUE_SEL => self.queue_sel = v,
            regs::QUEUE_NUM => self.with_idle_queue(offset, |q| q.num = v),
            regs::QUEUE_READY => self.write_queue_ready(mem, v),
            regs::QUEUE_NOTIFY => self.notify(mem, v),
            regs::INTERRUPT_ACK => {
                self.interrupt.acknowledge(v);
            }
            regs::STATUS => self.write_status(mem, v),
            regs::QUEUE_DESC_LOW => self.with_idle_queue(offset, |q| q.desc = set_low(q.desc, v)),
            regs::QUEUE_DESC_HIGH => self.with_idle_queue(offset, |q| q.desc = set_high(q.desc, v)),
            regs::QUEUE_DRIVER_LOW => self.with_idle_queue(offset, |q| q.driver = set_low(q.driver, v)),
            regs::QUEUE_DRIVER_HIGH => self.with_idle_queue(offset, |q| q.driver = set_high(q.driver, v)),
            regs::QUEUE_DEVICE_LOW => self.with_idle_queue(offset, |q| q.device = set_low(q.device, v)),
            regs::QUEUE_DEVICE_HIGH => self.with_idle_queue(offset, |q| q.device = set_high(q.device, v)),
            // No shared memory regions: the selector has nothing to select.
            regs::SHM_SEL => {}
            o if LEGACY_ONLY.contains(&o) => {
                self.incidents.record(DeviceIncident::LegacyRegister { offset, write: true })
            }
            o if READ_ONLY.contains(&o) => return Err(RegisterError::ReadOnly { offset }),
            _ => return Err(RegisterError::NoRegister { offset }),
        }
        Ok(())
    }

    fn write_config(&mut self, offset: u64, width: u8, value: u64) -> Result<(), RegisterError> {
        // The read decides whether the field exists and the width fits it.
        self.read_config(offset, width)?;
        // A refused write is reported through the RegisterError (the hypervisor logs it).
        self.device.write_config(offset - regs::CONFIG, width, value).map_err(|e| config_error(e, offset, width))
    }

    fn selected(&self) -> Option<&Virtqueue> {
        usize::try_from(self.queue_sel).ok().and_then(|i| self.queues.get(i))
    }

    /// Queue address and size registers may change only while the queue is not ready (4.2.2).
    fn with_idle_queue(&mut self, offset: u64, f: impl FnOnce(&mut Virtqueue)) {
        let sel = self.queue_sel;
        match usize::try_from(sel).ok().and_then(|i| self.queues.get_mut(i)) {
            None => self.incidents.record(DeviceIncident::NoSuchQueue { queue: sel }),
            Some(q) if q.ready => {
                self.incidents.record(DeviceIncident::QueueWriteWhileReady { queue: sel as u16, offset })
            }
            Some(q) => f(q),
        }
    }

    fn write_queue_ready(&mut self, mem: &dyn GuestMemory, v: u32) {
        let sel = self.queue_sel;
        let Some(q) = usize::try_from(sel).ok().and_then(|i| self.queues.get_mut(i)) else {
            self.incidents.record(DeviceIncident::NoSuchQueue { queue: sel });
            return;
        };
        // The selector named an existing queue, and queue counts are u16.
        let queue = sel as u16;
        if v & 1 == 0 {
            let was_ready = core::mem::replace(&mut q.ready, false);
            if was_ready {
                self.device.queue_disabled(queue);
            }
            return;
        }
        if q.ready {
            return;
        }
        match q.validate(queue, mem) {
            Ok(()) => {
                q.ready = true;
                q.last_avail = 0;
                q.used_idx = 0;
            }
            Err(incident) => self.incidents.record(incident),
        }
    }

    fn write_driver_features(&mut self, v: u32) {
        if self.status & status::FEATURES_OK != 0 {
            // 3.1.1: the driver must not accept features after FEATURES_OK.
            self.incidents.record(DeviceIncident::FeaturesAfterFeaturesOk);
            return;
        }
        match self.driver_features_sel {
            0 => self.driver_features = set_low(self.driver_features, v),
            1 => self.driver_features = set_high(self.driver_features, v),
            _ => self.driver_features_beyond |= v != 0,
        }
    }

    fn write_status(&mut self, mem: &dyn GuestMemory, v: u32) {
        if v == 0 {
            self.reset_transport();
            self.device.reset();
            return;
        }
        // 2.1.1: the driver never clears a bit (only a reset does), and DEVICE_NEEDS_RESET is
        // the device's: so bits accumulate and the driver cannot set or clear bit 64.
        let old = self.status;
        let mut new = old | (v & !status::DEVICE_NEEDS_RESET);
        if new & status::FEATURES_OK != 0 && old & status::FEATURES_OK == 0 {
            let offered = self.offered_features();
            let accepted = self.driver_features;
            // 2.2.2 / 6.1: only offered features, and VERSION_1 is required (no legacy interface).
            if self.driver_features_beyond || accepted & !offered != 0 || accepted & VIRTIO_F_VERSION_1 == 0 {
                self.incidents.record(DeviceIncident::FeaturesRefused { offered, accepted });
                new &= !status::FEATURES_OK;
            }
        }
        let starting = new & status::DRIVER_OK != 0 && old & status::DRIVER_OK == 0;
        if starting && new & status::FEATURES_OK == 0 {
            self.incidents.record(DeviceIncident::DriverOkWithoutFeaturesOk);
            new &= !status::DRIVER_OK;
        }
        self.status = new;
        if starting && new & status::DRIVER_OK != 0 {
            self.device.activate(self.driver_features);
            if self.polled {
                // The side core's next pass serves what is already available.
                self.notified = u32::MAX >> (32 - MAX_QUEUES as u32);
                return;
            }
            // Buffers the driver made available (and notified) before DRIVER_OK are served now.
            for queue in 0..self.device.num_queues() {
                if self.queue_ready(queue) {
                    self.process(mem, queue);
                }
            }
        }
    }

    fn notify(&mut self, mem: &dyn GuestMemory, v: u32) {
        // Without VIRTIO_F_NOTIFICATION_DATA the value is the queue index (4.2.2).
        let Ok(queue) = u16::try_from(v) else {
            self.incidents.record(DeviceIncident::NoSuchQueue { queue: v });
            return;
        };
        if queue >= self.device.num_queues() {
            self.incidents.record(DeviceIncident::NoSuchQueue { queue: v });
            return;
        }
        if self.polled {
            // The side core's next pass takes it (the slot wakes it).
            self.notified |= 1 << queue;
            return;
        }
        if self.running() && self.queue_ready(queue) {
            self.process(mem, queue);
        }
    }

    /// Marks `queue` notified for the side core's next pass, without the device's model:
    /// what a polled device's QueueNotify does (the slot calls it without the guest's
    /// write reaching `write`, so an exit never runs device work).
    pub fn mark_notified(&mut self, queue: u16) {
        if usize::from(queue) < self.queues.len() {
            self.notified |= 1 << queue;
        } else {
            self.incidents.record(DeviceIncident::NoSuchQueue { queue: u32::from(queue) });
        }
    }

    /// Whether the device has work left from an earlier notify (`continue_work`).
    pub fn has_pending_work(&self) -> bool {
        self.running() && (self.unfinished != 0 || self.device.has_pending_work())
    }

    /// Goes on with the work a bounded notify left, as a notify would (interrupt decisions
    /// afterwards, a driver bug making the device need a reset): the device's own, then the
    /// queues whose notify stopped at its budget, each served as if notified again.
    pub fn continue_work(&mut self, mem: &dyn GuestMemory) {
        if self.running() && self.device.has_pending_work() {
            let _ = self.run(mem, |device, access| device.continue_work(access));
        }
        let mut unfinished = core::mem::take(&mut self.unfinished);
        while unfinished != 0 && self.running() {
            let queue = unfinished.trailing_zeros() as u16;
            unfinished &= unfinished - 1;
            self.process(mem, queue);
        }
    }

    fn process(&mut self, mem: &dyn GuestMemory, queue: u16) {
        // A driver bug already became DEVICE_NEEDS_RESET inside `run`.
        let _ = self.run(mem, |device, access| device.queue_notify(queue, access));
    }
}

pub(crate) fn config_error(e: ConfigError, offset: u64, width: u8) -> RegisterError {
    match e {
        ConfigError::NoField => RegisterError::NoRegister { offset },
        ConfigError::BadWidth => RegisterError::BadWidth { offset, width },
        ConfigError::ReadOnly => RegisterError::ReadOnly { offset },
    }
}

fn set_low(old: u64, v: u32) -> u64 {
    (old & !0xffff_ffff) | u64::from(v)
}

fn set_high(old: u64, v: u32) -> u64 {
    (old & 0xffff_ffff) | (u64::from(v) << 32)
}

#[cfg(test)]
mod interrupt_word_tests {
    use super::InterruptWord;
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    #[test]
    fn each_change_is_counted_and_an_acknowledgement_clears_only_what_it_names() {
        let w = InterruptWord::default();
        assert_eq!((w.load().status, w.load().change), (0, 0));
        assert_eq!(w.raise(1).status, 1);
        assert_eq!(w.raise(2).status, 3);
        let acked = w.acknowledge(1);
        assert_eq!((acked.status, acked.change), (2, 3));
        // A bit raised after an acknowledgement stays raised.
        assert_eq!(w.raise(1).status, 3);
        assert_eq!(w.acknowledge(0xffff_ff00).status, 3, "bits beyond the status byte name nothing");
        assert_eq!(w.clear().status, 0);
        assert_eq!(w.load().change, 6);
    }

    /// A device that pushes a used entry, then raises the bit, on one thread; a driver that
    /// acknowledges, then reads the ring, on another: however they interleave, the driver
    /// never ends with the bit clear and an entry unread.
    #[test]
    fn no_raise_is_lost_to_an_acknowledgement_made_at_the_same_time() {
        const N: u64 = 20_000;
        let word = InterruptWord::default();
        let pushed = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        let mut seen = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=N {
                    pushed.store(i, Ordering::Relaxed);
                    word.raise(1);
                }
                done.store(true, Ordering::Release);
            });
            loop {
                let finished = done.load(Ordering::Acquire);
                if word.load().status & 1 != 0 {
                    word.acknowledge(1);
                    seen = pushed.load(Ordering::Relaxed);
                } else if finished {
                    break;
                }
            }
        });
        assert_eq!(seen, N, "the last entry was announced and read");
    }
}
