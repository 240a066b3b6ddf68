//! One split virtqueue as the device sees it (virtio 1.2, 2.7): its configuration from the
//! transport registers, the device's own indices, and the ring operations: taking the next
//! available chain (2.7.6), publishing a used element (2.7.8), event-index notification
//! suppression (2.7.7.2, 2.7.10).
//!
//! The ring addresses are checked against RAM and alignment when the queue is made ready and
//! cannot change while it is, so later ring accesses stay inside RAM.

use core::sync::atomic::{fence, Ordering};

use crate::virtio::chain::{read_chain, Chain, ChainRules, DESCRIPTOR_SIZE};
use crate::virtio::incident::DeviceIncident;
use crate::virtio::memory::{read_u16, write_u16, write_u32, GuestMemory, GuestMemoryError};

/// VIRTQ_AVAIL_F_NO_INTERRUPT (2.7.6).
const VIRTQ_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// VIRTQ_USED_F_NO_NOTIFY (2.7.8): the device asks the driver not to notify (without
/// EVENT_IDX; with it, avail_event says the same, 2.7.10).
pub const VIRTQ_USED_F_NO_NOTIFY: u16 = 1;

/// 2.7.7.2 / 2.7.10: whether an event index in (old, new] was crossed, modulo 2^16.
pub fn vring_need_event(event_idx: u16, new_idx: u16, old_idx: u16) -> bool {
    new_idx.wrapping_sub(event_idx).wrapping_sub(1) < new_idx.wrapping_sub(old_idx)
}

/// Configuration and device-side state of one queue.
#[derive(Clone, Debug)]
pub struct Virtqueue {
    pub max_size: u16,
    /// QueueNum as the driver wrote it; validated at QueueReady.
    pub num: u32,
    pub ready: bool,
    pub desc: u64,
    pub driver: u64,
    pub device: u64,
    /// Next available-ring entry the device will look at.
    pub last_avail: u16,
    /// The device's used->idx.
    pub used_idx: u16,
    /// The device told the driver not to notify (a side core polls this queue): `pop` on an
    /// empty ring leaves avail_event alone instead of asking for the next notify.
    pub suppressed: bool,
}

impl Virtqueue {
    pub fn new(max_size: u16) -> Self {
        Virtqueue {
            max_size,
            num: u32::from(max_size),
            ready: false,
            desc: 0,
            driver: 0,
            device: 0,
            last_avail: 0,
            used_idx: 0,
            suppressed: false,
        }
    }

    /// The queue size once ready (validated to fit in u16 at QueueReady).
    pub fn size(&self) -> u16 {
        u16::try_from(self.num).unwrap_or(0)
    }

    /// Checks the configuration when the driver sets QueueReady: size a power of two within
    /// QueueNumMax (2.7), rings aligned (2.7: descriptors 16, available 2, used 4) and in RAM.
    pub fn validate(&self, queue: u16, mem: &dyn GuestMemory) -> Result<(), DeviceIncident> {
        if self.num == 0 || !self.num.is_power_of_two() || self.num > u32::from(self.max_size) {
            return Err(DeviceIncident::BadQueueSize { queue, num: self.num, max: self.max_size });
        }
        let n = u64::from(self.num);
        let areas = [
            ("descriptor table", self.desc, 16u64, DESCRIPTOR_SIZE * n),
            ("available ring", self.driver, 2, 6 + 2 * n),
            ("used ring", self.device, 4, 6 + 8 * n),
        ];
        for (what, addr, align, len) in areas {
            if addr % align != 0 || mem.check(addr, len).is_err() {
                return Err(DeviceIncident::BadRingAddress { queue, what, addr });
            }
        }
        Ok(())
    }

    /// The ring slot of a free-running index. Only ready queues reach here, and their size was
    /// validated non-zero; the check keeps a division by zero impossible regardless.
    fn slot(&self, queue: u16, index: u16) -> Result<u64, DeviceIncident> {
        match index.checked_rem(self.size()) {
            Some(slot) => Ok(u64::from(slot)),
            None => Err(DeviceIncident::BadQueueSize { queue, num: self.num, max: self.max_size }),
        }
    }

    fn at(&self, queue: u16, base: u64, offset: u64) -> Result<u64, DeviceIncident> {
        base.checked_add(offset)
            .ok_or(DeviceIncident::RingOutsideRam { queue, error: GuestMemoryError { addr: base, len: offset } })
    }

    fn read16(&self, mem: &dyn GuestMemory, queue: u16, base: u64, offset: u64) -> Result<u16, DeviceIncident> {
        let addr = self.at(queue, base, offset)?;
        read_u16(mem, addr).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })
    }

    /// avail->idx, and how many entries it is ahead of the device (at most the queue size).
    fn pending(&self, mem: &dyn GuestMemory, queue: u16) -> Result<u16, DeviceIncident> {
        let idx = self.read16(mem, queue, self.driver, 2)?;
        let pending = idx.wrapping_sub(self.last_avail);
        if pending > self.size() {
            return Err(DeviceIncident::AvailIndexJump {
                queue,
                last_seen: self.last_avail,
                now: idx,
                size: self.size(),
            });
        }
        Ok(pending)
    }

    /// Takes the next available chain, if any. With EVENT_IDX, an empty ring first publishes
    /// avail_event = the next index the device wants (2.7.10) and looks once more, so a buffer
    /// the driver added while it still saw the old avail_event is not left unnoticed.
    pub(crate) fn pop(
        &mut self,
        mem: &dyn GuestMemory,
        queue: u16,
        event_idx: bool,
        indirect: bool,
    ) -> Result<Option<Chain>, DeviceIncident> {
        let mut pending = self.pending(mem, queue)?;
        if pending == 0 && event_idx && !self.suppressed {
            self.write_avail_event(mem, queue)?;
            // The store of avail_event before the load of avail->idx: the driver stores its
            // index, then loads avail_event (2.7.10). Without a full barrier between them,
            // each side could see the other's old value and neither act: a buffer added as
            // polling stops would wait for the driver's next notify.
            fence(Ordering::SeqCst);
            pending = self.pending(mem, queue)?;
        }
        if pending == 0 {
            return Ok(None);
        }
        let slot = self.slot(queue, self.last_avail)?;
        let head = self.read16(mem, queue, self.driver, 4 + 2 * slot)?;
        let rules = ChainRules { queue, size: self.size(), max_indirect: self.max_size, indirect };
        let chain = read_chain(mem, self.desc, head, rules)?;
        self.last_avail = self.last_avail.wrapping_add(1);
        Ok(Some(chain))
    }

    /// Gives back the chain `pop` just returned, untouched (e.g. a receive buffer too small).
    pub(crate) fn unpop(&mut self) {
        self.last_avail = self.last_avail.wrapping_sub(1);
    }

    /// 2.7.10: the used ring's trailing avail_event field, the next index the device wants
    /// a notify for.
    fn write_avail_event(&self, mem: &dyn GuestMemory, queue: u16) -> Result<(), DeviceIncident> {
        self.write_avail_event_as(mem, queue, self.last_avail)
    }

    fn write_avail_event_as(&self, mem: &dyn GuestMemory, queue: u16, value: u16) -> Result<(), DeviceIncident> {
        let addr = self.at(queue, self.device, 4 + 8 * u64::from(self.size()))?;
        write_u16(mem, addr, value).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })
    }

    fn write_used_flags(&self, mem: &dyn GuestMemory, queue: u16, flags: u16) -> Result<(), DeviceIncident> {
        write_u16(mem, self.device, flags).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })
    }

    /// Whether the driver has made chains available that the device has not taken.
    pub fn has_available(&self, mem: &dyn GuestMemory, queue: u16) -> Result<bool, DeviceIncident> {
        Ok(self.pending(mem, queue)? != 0)
    }

    /// Tells the driver not to notify this queue: the device polls it (a side core). With
    /// EVENT_IDX, avail_event one behind the device's next index, which the driver's next
    /// index cannot cross until it has made 65,535 more chains available (the driver
    /// notifies only when its index crosses avail_event, 2.7.10); it is written again each
    /// time (`refresh_suppression`), so it never gets that far behind. Without, the used
    /// ring's VIRTQ_USED_F_NO_NOTIFY (2.7.8). Either is a hint the driver may ignore: a
    /// notify that comes anyway does no harm.
    pub fn suppress_notifications(
        &mut self,
        mem: &dyn GuestMemory,
        queue: u16,
        event_idx: bool,
    ) -> Result<(), DeviceIncident> {
        self.suppressed = true;
        self.refresh_suppression(mem, queue, event_idx)
    }

    /// Keeps a suppressing avail_event one behind the device's index as it moves.
    pub fn refresh_suppression(
        &self,
        mem: &dyn GuestMemory,
        queue: u16,
        event_idx: bool,
    ) -> Result<(), DeviceIncident> {
        if event_idx {
            self.write_avail_event_as(mem, queue, self.last_avail.wrapping_sub(1))
        } else {
            self.write_used_flags(mem, queue, VIRTQ_USED_F_NO_NOTIFY)
        }
    }

    /// Asks the driver to notify again (the side core goes to sleep), then looks at the
    /// available index once more: a chain the driver made available while it still saw the
    /// suppression was not notified, and would wait for ever (virtio 1.2 2.7.10, the race
    /// `pop` handles the same way). Returns whether such a chain is there: the caller must
    /// then keep polling.
    pub fn enable_notifications(
        &mut self,
        mem: &dyn GuestMemory,
        queue: u16,
        event_idx: bool,
    ) -> Result<bool, DeviceIncident> {
        self.suppressed = false;
        if event_idx {
            self.write_avail_event(mem, queue)?;
        } else {
            self.write_used_flags(mem, queue, 0)?;
        }
        // The store that re-enables notifications before the load of avail->idx: the driver
        // stores its index, then loads avail_event or the flags (2.7.10, 2.7.7.2). Without a
        // full barrier each side could see the other's old value and neither act.
        fence(Ordering::SeqCst);
        self.has_available(mem, queue)
    }

    /// 2.7.8: writes the used element, then publishes it by bumping used->idx (the element
    /// must be visible before the index; the hypervisor's GuestMemory orders its writes).
    pub(crate) fn push_used(
        &mut self,
        mem: &dyn GuestMemory,
        queue: u16,
        head: u16,
        len: u32,
    ) -> Result<(), DeviceIncident> {
        let err = |error| DeviceIncident::RingOutsideRam { queue, error };
        let slot = self.slot(queue, self.used_idx)?;
        let elem = self.at(queue, self.device, 4 + 8 * slot)?;
        write_u32(mem, elem, u32::from(head)).map_err(err)?;
        write_u32(mem, self.at(queue, elem, 4)?, len).map_err(err)?;
        self.used_idx = self.used_idx.wrapping_add(1);
        write_u16(mem, self.at(queue, self.device, 2)?, self.used_idx).map_err(err)
    }

    /// Whether the used entries published since `old_used` call for an interrupt: with
    /// EVENT_IDX per used_event (2.7.7.2), else unless VIRTQ_AVAIL_F_NO_INTERRUPT (2.7.7.1).
    pub(crate) fn needs_interrupt(
        &self,
        mem: &dyn GuestMemory,
        queue: u16,
        old_used: u16,
        event_idx: bool,
    ) -> Result<bool, DeviceIncident> {
        if self.used_idx == old_used {
            return Ok(false);
        }
        // The store of used->idx (push_used) before the load of used_event or the flags:
        // the driver stores those, then loads used->idx (2.7.7.2, as Linux's virtio_mb()).
        // A store and a later load are not ordered without a full barrier (ARM, and the x86
        // hosts of TCG): both sides could see the other's old value and the interrupt be lost.
        fence(Ordering::SeqCst);
        if event_idx {
            let used_event = self.read16(mem, queue, self.driver, 4 + 2 * u64::from(self.size()))?;
            Ok(vring_need_event(used_event, self.used_idx, old_used))
        } else {
            let flags = self.read16(mem, queue, self.driver, 0)?;
            Ok(flags & VIRTQ_AVAIL_F_NO_INTERRUPT == 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn need_event_matches_the_spec_formula_across_wraparound() {
        assert!(vring_need_event(0, 1, 0));
        assert!(!vring_need_event(1, 1, 0));
        assert!(vring_need_event(4, 8, 2));
        assert!(!vring_need_event(8, 8, 2));
        assert!(!vring_need_event(1, 8, 2));
        assert!(vring_need_event(0xffff, 1, 0xfffe));
        assert!(vring_need_event(0, 1, 0xffff));
    }
}
