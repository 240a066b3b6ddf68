//! The contract between the transport and a device model: what a device declares (id,
//! features, queues, configuration space) and `QueueAccess`, the only way a device reaches its
//! queues, which records driver errors and turns fatal ones into DEVICE_NEEDS_RESET.

use crate::virtio::chain::Chain;
use crate::virtio::features::{VIRTIO_F_EVENT_IDX, VIRTIO_F_INDIRECT_DESC};
use crate::virtio::incident::{DeviceIncident, IncidentLog};
use crate::virtio::memory::GuestMemory;
use crate::virtio::queue::Virtqueue;
use core::fmt;

/// The driver broke a virtqueue rule: the device must set DEVICE_NEEDS_RESET (2.1.2) and stop.
/// The incident saying why was already recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeedsReset;

impl fmt::Display for NeedsReset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the driver broke a virtqueue rule; the device needs a reset")
    }
}

/// A refused configuration-space access; the transport turns it into a `RegisterError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// No field at this offset.
    NoField,
    /// Width not allowed for this field (4.2.2.2).
    BadWidth,
    /// The field cannot be written.
    ReadOnly,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoField => write!(f, "no configuration field at this offset"),
            ConfigError::BadWidth => write!(f, "configuration fields take aligned accesses of their own width"),
            ConfigError::ReadOnly => write!(f, "this configuration field is read-only"),
        }
    }
}

/// A virtio device model behind the virtio-mmio transport.
pub trait VirtioDevice {
    /// Device ID (5): 1 network, 2 block, 3 console.
    fn device_id(&self) -> u32;
    /// Device-specific feature bits (the transport adds its own, see `features`).
    fn device_features(&self) -> u64;
    fn num_queues(&self) -> u16;
    /// QueueNumMax of queue `queue` (< num_queues).
    fn queue_max_size(&self, queue: u16) -> u16;
    /// A read of `width` bytes at `offset` in the device configuration space.
    fn read_config(&self, offset: u64, width: u8) -> Result<u64, ConfigError>;
    /// A write into the configuration space; every field is read-only unless a device says otherwise.
    fn write_config(&mut self, offset: u64, width: u8, value: u64) -> Result<(), ConfigError> {
        let _ = (offset, width, value);
        Err(ConfigError::ReadOnly)
    }
    /// The driver set DRIVER_OK with these negotiated features.
    fn activate(&mut self, features: u64) {
        let _ = features;
    }
    /// The driver notified `queue` (DRIVER_OK set, queue ready, device not broken).
    fn queue_notify(&mut self, queue: u16, queues: &mut QueueAccess<'_>) -> Result<(), NeedsReset>;
    /// Whether the device needs the driver's notifies on `queue` to learn of new buffers. A
    /// network device's receive queue does not: it takes a buffer only when a frame
    /// arrives, so a side core keeps that queue's notifies off even while it sleeps.
    fn notify_needed(&self, queue: u16) -> bool {
        let _ = queue;
        true
    }
    /// Whether the device left work for later (it bounds what one notify does):
    /// `continue_work` should run soon, on the next exit of the VM.
    fn has_pending_work(&self) -> bool {
        false
    }
    /// Goes on with the work `has_pending_work` says is left.
    fn continue_work(&mut self, queues: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        let _ = queues;
        Ok(())
    }
    /// The driver took queue `queue` down (QueueReady = 0, 4.2.2): what the device still has
    /// in flight for it must not reach the rings the driver may set up next.
    fn queue_disabled(&mut self, queue: u16) {
        let _ = queue;
    }
    /// Device reset by the driver (Status = 0): forget everything the driver set up.
    fn reset(&mut self);
    /// Reset as at power-on (VM reboot); by default the same as `reset`.
    fn power_on_reset(&mut self) {
        self.reset()
    }
}

/// Reads a configuration field out of a byte image of the configuration space. 1, 2 and 4
/// byte accesses must be naturally aligned and inside the image; 8-byte accesses only at the
/// start of a 64-bit field listed in `wide_fields` (4.2.2.2 asks drivers for 32-bit accesses
/// to 64-bit fields; Linux does that, other drivers may use one 64-bit access).
pub fn read_config_image(image: &[u8], wide_fields: &[u64], offset: u64, width: u8) -> Result<u64, ConfigError> {
    let w = u64::from(width);
    match width {
        1 | 2 | 4 => {}
        8 if wide_fields.contains(&offset) => {}
        8 => return Err(ConfigError::BadWidth),
        _ => return Err(ConfigError::BadWidth),
    }
    let end = offset.checked_add(w).ok_or(ConfigError::NoField)?;
    if end > image.len() as u64 {
        return Err(ConfigError::NoField);
    }
    if !offset.is_multiple_of(w) {
        return Err(ConfigError::BadWidth);
    }
    let bytes = image.get(offset as usize..end as usize).ok_or(ConfigError::NoField)?;
    let mut v = [0u8; 8];
    v[..bytes.len()].copy_from_slice(bytes);
    Ok(u64::from_le_bytes(v))
}

/// How many chains one call may take from one queue, in queue sizes: a driver racing on
/// another vCPU could otherwise keep a notify busy for ever. What it leaves is served by
/// `VirtioMmio::continue_work` (`QueueAccess::budget_spent`).
const POP_BUDGET_PER_QUEUE_SIZE: u32 = 4;

/// A device's window onto its queues during one notify (or one receive).
pub struct QueueAccess<'a> {
    pub(crate) mem: &'a dyn GuestMemory,
    pub(crate) queues: &'a mut [Virtqueue],
    pub(crate) features: u64,
    pub(crate) incidents: &'a mut IncidentLog,
    pub(crate) popped: u32,
    /// Bit n: a `pop` of queue n found the budget spent; chains may be left there, which
    /// the transport has the device serve later (`VirtioMmio::has_pending_work`).
    pub(crate) budget_spent: u32,
}

impl<'a> QueueAccess<'a> {
    pub fn mem(&self) -> &'a dyn GuestMemory {
        self.mem
    }

    /// Negotiated features.
    pub fn features(&self) -> u64 {
        self.features
    }

    pub fn is_ready(&self, queue: u16) -> bool {
        self.queues.get(usize::from(queue)).is_some_and(|q| q.ready)
    }

    /// Records a driver error that did not need a reset (the request failed).
    pub fn incident(&mut self, incident: DeviceIncident) {
        self.incidents.record(incident);
    }

    fn fatal(&mut self, incident: DeviceIncident) -> NeedsReset {
        self.incidents.record(incident);
        NeedsReset
    }

    /// The next available chain of a ready queue; `None` when the ring is empty, the queue is
    /// not ready, or this call's budget is spent.
    pub fn pop(&mut self, queue: u16) -> Result<Option<Chain>, NeedsReset> {
        let event_idx = self.features & VIRTIO_F_EVENT_IDX != 0;
        let indirect = self.features & VIRTIO_F_INDIRECT_DESC != 0;
        let mem = self.mem;
        let Some(q) = self.queues.get_mut(usize::from(queue)).filter(|q| q.ready) else {
            return Ok(None);
        };
        if self.popped >= POP_BUDGET_PER_QUEUE_SIZE * u32::from(q.size()) {
            self.budget_spent |= 1 << queue;
            return Ok(None);
        }
        match q.pop(mem, queue, event_idx, indirect) {
            Ok(Some(chain)) => {
                self.popped += 1;
                Ok(Some(chain))
            }
            Ok(None) => Ok(None),
            Err(incident) => Err(self.fatal(incident)),
        }
    }

    /// Gives back the chain just popped from `queue`, untouched.
    pub fn unpop(&mut self, queue: u16) {
        if let Some(q) = self.queues.get_mut(usize::from(queue)) {
            q.unpop();
            self.popped = self.popped.saturating_sub(1);
        }
    }

    /// Returns a chain to the driver with `len` bytes written by the device (2.7.8).
    pub fn push_used(&mut self, queue: u16, head: u16, len: u32) -> Result<(), NeedsReset> {
        let mem = self.mem;
        let Some(q) = self.queues.get_mut(usize::from(queue)).filter(|q| q.ready) else {
            return Ok(());
        };
        match q.push_used(mem, queue, head, len) {
            Ok(()) => Ok(()),
            Err(incident) => Err(self.fatal(incident)),
        }
    }
}
