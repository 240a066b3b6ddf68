//! The common configuration structure (virtio 1.2, 4.1.4.3) at the start of BAR0, translated
//! to the virtio-mmio core's registers: the selectors and ring addresses read back here,
//! where virtio-mmio's are write-only, so the selectors are shadowed and the queue fields
//! read from the core's queues; the MSI-X vector of each event lives here (4.1.5.1.2).

use super::{VirtioPci, NO_VECTOR};
use crate::virtio::device::VirtioDevice;
use crate::virtio::incident::DeviceIncident;
use crate::virtio::memory::GuestMemory;
use crate::virtio::transport::{regs, RegisterError, MAX_QUEUES};

/// Field offsets of `struct virtio_pci_common_cfg` (4.1.4.3).
pub mod field {
    pub const DEVICE_FEATURE_SELECT: u64 = 0x00;
    pub const DEVICE_FEATURE: u64 = 0x04;
    pub const DRIVER_FEATURE_SELECT: u64 = 0x08;
    pub const DRIVER_FEATURE: u64 = 0x0c;
    pub const CONFIG_MSIX_VECTOR: u64 = 0x10;
    pub const NUM_QUEUES: u64 = 0x12;
    pub const DEVICE_STATUS: u64 = 0x14;
    pub const CONFIG_GENERATION: u64 = 0x15;
    pub const QUEUE_SELECT: u64 = 0x16;
    pub const QUEUE_SIZE: u64 = 0x18;
    pub const QUEUE_MSIX_VECTOR: u64 = 0x1a;
    pub const QUEUE_ENABLE: u64 = 0x1c;
    pub const QUEUE_NOTIFY_OFF: u64 = 0x1e;
    pub const QUEUE_DESC: u64 = 0x20;
    pub const QUEUE_DRIVER: u64 = 0x28;
    pub const QUEUE_DEVICE: u64 = 0x30;
    /// End of the structure as offered: queue_notify_data and queue_reset (0x38..0x3c)
    /// exist only with VIRTIO_F_NOTIF_CONFIG_DATA and VIRTIO_F_RING_RESET, not offered.
    pub const END: u64 = 0x38;
}

/// The PCI-only state of the common configuration.
#[derive(Clone, Debug)]
pub(super) struct CommonCfg {
    pub(super) device_feature_select: u32,
    pub(super) driver_feature_select: u32,
    pub(super) queue_select: u16,
    pub(super) config_msix_vector: u16,
    pub(super) queue_msix_vector: [u16; MAX_QUEUES],
}

/// "The device MUST have all queue and configuration change events unmapped upon reset"
/// (virtio 1.2, 4.1.5.1.2.1); the selectors start at 0 as the core's do.
impl Default for CommonCfg {
    fn default() -> Self {
        CommonCfg {
            device_feature_select: 0,
            driver_feature_select: 0,
            queue_select: 0,
            config_msix_vector: NO_VECTOR,
            queue_msix_vector: [NO_VECTOR; MAX_QUEUES],
        }
    }
}

/// The ring address fields, their halves and the core registers they go to.
const RING_FIELDS: [(u64, u64, u64); 3] = [
    (field::QUEUE_DESC, regs::QUEUE_DESC_LOW, regs::QUEUE_DESC_HIGH),
    (field::QUEUE_DRIVER, regs::QUEUE_DRIVER_LOW, regs::QUEUE_DRIVER_HIGH),
    (field::QUEUE_DEVICE, regs::QUEUE_DEVICE_LOW, regs::QUEUE_DEVICE_HIGH),
];

/// The natural width of the field at `offset`, for the ring addresses also their 32-bit
/// halves (4.1.3.1: 64-bit fields are two 32-bit fields; we take one 64-bit access too).
fn width_fits(offset: u64, width: u8) -> bool {
    match offset {
        field::DEVICE_FEATURE_SELECT | field::DEVICE_FEATURE | field::DRIVER_FEATURE_SELECT | field::DRIVER_FEATURE => {
            width == 4
        }
        field::DEVICE_STATUS | field::CONFIG_GENERATION => width == 1,
        field::CONFIG_MSIX_VECTOR
        | field::NUM_QUEUES
        | field::QUEUE_SELECT
        | field::QUEUE_SIZE
        | field::QUEUE_MSIX_VECTOR
        | field::QUEUE_ENABLE
        | field::QUEUE_NOTIFY_OFF => width == 2,
        field::QUEUE_DESC | field::QUEUE_DRIVER | field::QUEUE_DEVICE => width == 4 || width == 8,
        o if (field::QUEUE_DESC..field::END).contains(&o) && o % 8 == 4 => width == 4,
        _ => false,
    }
}

impl<D: VirtioDevice> VirtioPci<D> {
    fn selected_queue(&self) -> Option<usize> {
        let q = usize::from(self.common.queue_select);
        (q < self.core.queues.len()).then_some(q)
    }

    /// A vector the table has, or NO_VECTOR: a mapping to a vector beyond the table fails
    /// and reads back NO_VECTOR (4.1.5.1.2.1).
    fn mapped(&self, vector: u16) -> u16 {
        if vector < self.msix.size() {
            vector
        } else {
            NO_VECTOR
        }
    }

    pub(super) fn common_read(&self, offset: u64, width: u8) -> Result<u64, RegisterError> {
        if !width_fits(offset, width) {
            return Err(RegisterError::BadWidth { offset, width });
        }
        let queue = self.selected_queue().and_then(|q| self.core.queues.get(q));
        let c = &self.common;
        let value = match offset {
            field::DEVICE_FEATURE_SELECT => u64::from(c.device_feature_select),
            // 4.1.4.3.1: bits from device_feature_select * 32; 0 beyond the second word.
            field::DEVICE_FEATURE => match c.device_feature_select {
                0 => self.core.offered_features() & 0xffff_ffff,
                1 => self.core.offered_features() >> 32,
                _ => 0,
            },
            field::DRIVER_FEATURE_SELECT => u64::from(c.driver_feature_select),
            field::DRIVER_FEATURE => u64::from(self.core.driver_features_word(c.driver_feature_select)),
            field::CONFIG_MSIX_VECTOR => u64::from(c.config_msix_vector),
            field::NUM_QUEUES => self.core.queues.len() as u64,
            field::DEVICE_STATUS => u64::from(self.core.status() as u8),
            // The configuration never changes under the driver's feet.
            field::CONFIG_GENERATION => 0,
            field::QUEUE_SELECT => u64::from(c.queue_select),
            // The maximum until the driver writes a size; "0 means the queue is
            // unavailable" (4.1.4.3).
            field::QUEUE_SIZE => queue.map_or(0, |q| u64::from(q.num as u16)),
            field::QUEUE_MSIX_VECTOR => self
                .selected_queue()
                .and_then(|q| c.queue_msix_vector.get(q))
                .map_or(u64::from(NO_VECTOR), |&v| u64::from(v)),
            field::QUEUE_ENABLE => queue.map_or(0, |q| u64::from(q.ready)),
            // notify_off_multiplier is 0: every queue's notify address is the region's start.
            field::QUEUE_NOTIFY_OFF => 0,
            o => {
                let Some(&(base, _, _)) = RING_FIELDS.iter().find(|(base, _, _)| (*base..*base + 8).contains(&o))
                else {
                    return Err(RegisterError::NoRegister { offset });
                };
                let address = queue.map_or(0, |q| match base {
                    field::QUEUE_DESC => q.desc,
                    field::QUEUE_DRIVER => q.driver,
                    _ => q.device,
                });
                match (width, o == base) {
                    (8, _) => address,
                    (_, true) => address & 0xffff_ffff,
                    (_, false) => address >> 32,
                }
            }
        };
        Ok(value)
    }

    pub(super) fn common_write(
        &mut self,
        mem: &dyn GuestMemory,
        offset: u64,
        width: u8,
        value: u64,
    ) -> Result<(), RegisterError> {
        if !width_fits(offset, width) {
            return Err(RegisterError::BadWidth { offset, width });
        }
        let v = value as u32;
        match offset {
            field::DEVICE_FEATURE_SELECT => {
                self.common.device_feature_select = v;
                self.core.write(mem, regs::DEVICE_FEATURES_SEL, 4, u64::from(v))?;
            }
            field::DRIVER_FEATURE_SELECT => {
                self.common.driver_feature_select = v;
                self.core.write(mem, regs::DRIVER_FEATURES_SEL, 4, u64::from(v))?;
            }
            field::DRIVER_FEATURE => self.core.write(mem, regs::DRIVER_FEATURES, 4, u64::from(v))?,
            field::CONFIG_MSIX_VECTOR => self.common.config_msix_vector = self.mapped(v as u16),
            field::DEVICE_STATUS => {
                self.core.write(mem, regs::STATUS, 4, u64::from(v as u8))?;
                if v as u8 == 0 {
                    self.device_reset();
                }
            }
            field::QUEUE_SELECT => {
                self.common.queue_select = v as u16;
                self.core.write(mem, regs::QUEUE_SEL, 4, u64::from(v as u16))?;
            }
            // The core ignores (and logs) a write for no queue or a ready queue.
            field::QUEUE_SIZE => self.core.write(mem, regs::QUEUE_NUM, 4, u64::from(v as u16))?,
            field::QUEUE_MSIX_VECTOR => {
                let vector = self.mapped(v as u16);
                match self.selected_queue().and_then(|q| self.common.queue_msix_vector.get_mut(q)) {
                    Some(slot) => *slot = vector,
                    None => self
                        .core
                        .incidents
                        .record(DeviceIncident::NoSuchQueue { queue: u32::from(self.common.queue_select) }),
                }
            }
            field::QUEUE_ENABLE => self.core.write(mem, regs::QUEUE_READY, 4, u64::from(v as u16))?,
            field::DEVICE_FEATURE | field::NUM_QUEUES | field::CONFIG_GENERATION | field::QUEUE_NOTIFY_OFF => {
                return Err(RegisterError::ReadOnly { offset })
            }
            o => {
                let Some(&(base, low, high)) = RING_FIELDS.iter().find(|(base, _, _)| (*base..*base + 8).contains(&o))
                else {
                    return Err(RegisterError::NoRegister { offset });
                };
                if width == 8 {
                    self.core.write(mem, low, 4, value & 0xffff_ffff)?;
                    self.core.write(mem, high, 4, value >> 32)?;
                } else {
                    let register = if o == base { low } else { high };
                    self.core.write(mem, register, 4, u64::from(v))?;
                }
            }
        }
        Ok(())
    }

    /// The driver reset the device (device_status 0, virtio 1.2 2.4 and 4.1.4.3.1): the core
    /// reset itself; here the selectors go back to 0 and the events are unmapped
    /// (4.1.5.1.2.1). What was pending for the old events is forgotten with them.
    pub(super) fn device_reset(&mut self) {
        self.common = super::common_cfg::CommonCfg::default();
        self.msix.clear_pending();
    }
}
