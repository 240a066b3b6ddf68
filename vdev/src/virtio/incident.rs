//! Driver errors the device noticed, kept in a small bounded log for the hypervisor to print.
//! A guest can cause any number of them, so the log keeps only the newest and counts the rest.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use crate::virtio::memory::GuestMemoryError;

/// How many incidents are kept between two `take_incidents` calls.
pub const INCIDENT_LOG_CAPACITY: usize = 16;

/// One mistake of the guest's driver (or a refused request), with what the driver should fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceIncident {
    /// Older incidents were dropped because the log was full.
    Dropped { count: u64 },
    /// A buffer descriptor names memory outside the VM's RAM; the request failed.
    DescriptorOutsideRam { queue: u16, descriptor: u16, addr: u64, len: u32 },
    /// A descriptor table, ring or indirect table lies (partly) outside the VM's RAM.
    RingOutsideRam { queue: u16, error: GuestMemoryError },
    /// The available ring names a head descriptor beyond the queue size.
    BadHeadIndex { queue: u16, head: u16, size: u16 },
    /// A descriptor's `next` lies beyond the queue (or indirect table) size.
    BadNextIndex { queue: u16, descriptor: u16, next: u16, size: u16 },
    /// A chain visits more descriptors than its table holds: it loops.
    DescriptorLoop { queue: u16, head: u16, limit: u16 },
    /// An indirect descriptor inside an indirect table (2.7.5.3.1 forbids it).
    IndirectInIndirect { queue: u16, descriptor: u16 },
    /// An indirect descriptor that also has NEXT set (2.7.5.3.1 forbids it).
    IndirectWithNext { queue: u16, descriptor: u16 },
    /// An indirect table whose length is zero, not a multiple of 16 or beyond the bound.
    BadIndirectLength { queue: u16, descriptor: u16, len: u32, max_entries: u16 },
    /// An indirect descriptor although VIRTIO_F_INDIRECT_DESC was not negotiated.
    IndirectNotNegotiated { queue: u16, descriptor: u16 },
    /// A device-readable descriptor after a device-writable one (2.7.4.2).
    ReadableAfterWritable { queue: u16, descriptor: u16 },
    /// avail->idx moved by more than the queue size since the device last looked.
    AvailIndexJump { queue: u16, last_seen: u16, now: u16, size: u16 },
    /// A request's buffers go the wrong way: `what` says which part.
    WrongDirection { queue: u16, head: u16, what: &'static str },
    /// A request's buffers are too short or too long for what it asks.
    BadLength { queue: u16, head: u16, what: &'static str, len: u64 },
    /// A request the device could not serve, with why (backend error, out of range...).
    RequestFailed { queue: u16, head: u16, what: &'static str },
    /// QueueNum was zero, not a power of two or above QueueNumMax when QueueReady was set.
    BadQueueSize { queue: u16, num: u32, max: u16 },
    /// A ring address is misaligned or outside RAM when QueueReady was set.
    BadRingAddress { queue: u16, what: &'static str, addr: u64 },
    /// A queue register was written while that queue was ready; the write was ignored.
    QueueWriteWhileReady { queue: u16, offset: u64 },
    /// A queue register was used with QueueSel beyond the device's queues; ignored.
    NoSuchQueue { queue: u32 },
    /// The driver accepted features the device did not offer, or not VIRTIO_F_VERSION_1.
    FeaturesRefused { offered: u64, accepted: u64 },
    /// The driver wrote DriverFeatures after FEATURES_OK; ignored.
    FeaturesAfterFeaturesOk,
    /// The driver set DRIVER_OK without FEATURES_OK; refused.
    DriverOkWithoutFeaturesOk,
    /// The hypervisor's heap had no room to read a chain: the device needs a reset.
    OutOfMemory { queue: u16 },
    /// A register of the legacy interface only (virtio 4.2.4); read as zero, write ignored.
    LegacyRegister { offset: u64, write: bool },
}

impl fmt::Display for DeviceIncident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DeviceIncident::*;
        match *self {
            Dropped { count } => write!(f, "{count} older incidents were dropped (log full)"),
            DescriptorOutsideRam { queue, descriptor, addr, len } => write!(
                f,
                "queue {queue}: descriptor {descriptor} names guest memory {addr:#x}..+{len:#x} outside the VM's RAM; request failed"
            ),
            RingOutsideRam { queue, error } => write!(f, "queue {queue}: virtqueue structure unreadable: {error}"),
            BadHeadIndex { queue, head, size } => {
                write!(f, "queue {queue}: available ring names head descriptor {head}, beyond the queue size {size}")
            }
            BadNextIndex { queue, descriptor, next, size } => write!(
                f,
                "queue {queue}: descriptor {descriptor} chains to {next}, beyond the table size {size}"
            ),
            DescriptorLoop { queue, head, limit } => write!(
                f,
                "queue {queue}: the chain from head {head} is longer than {limit} descriptors: it loops"
            ),
            IndirectInIndirect { queue, descriptor } => write!(
                f,
                "queue {queue}: indirect table entry {descriptor} is itself indirect (forbidden by virtio 2.7.5.3.1)"
            ),
            IndirectWithNext { queue, descriptor } => write!(
                f,
                "queue {queue}: descriptor {descriptor} has both INDIRECT and NEXT (forbidden by virtio 2.7.5.3.1)"
            ),
            BadIndirectLength { queue, descriptor, len, max_entries } => write!(
                f,
                "queue {queue}: descriptor {descriptor} names an indirect table of {len} bytes; it must be a non-zero multiple of 16 and at most {max_entries} entries"
            ),
            IndirectNotNegotiated { queue, descriptor } => write!(
                f,
                "queue {queue}: descriptor {descriptor} is indirect but VIRTIO_F_INDIRECT_DESC was not negotiated"
            ),
            ReadableAfterWritable { queue, descriptor } => write!(
                f,
                "queue {queue}: device-readable descriptor {descriptor} follows a device-writable one (virtio 2.7.4.2)"
            ),
            AvailIndexJump { queue, last_seen, now, size } => write!(
                f,
                "queue {queue}: avail->idx moved from {last_seen} to {now}, more than the queue size {size}"
            ),
            WrongDirection { queue, head, what } => {
                write!(f, "queue {queue}: request at head {head}: {what}; request failed")
            }
            BadLength { queue, head, what, len } => {
                write!(f, "queue {queue}: request at head {head}: {what} ({len} bytes); request failed")
            }
            RequestFailed { queue, head, what } => write!(f, "queue {queue}: request at head {head} failed: {what}"),
            BadQueueSize { queue, num, max } => write!(
                f,
                "queue {queue}: QueueNum {num} refused: it must be a power of two between 1 and QueueNumMax {max}; queue left not ready"
            ),
            BadRingAddress { queue, what, addr } => write!(
                f,
                "queue {queue}: {what} at {addr:#x} is misaligned or outside the VM's RAM; queue left not ready"
            ),
            QueueWriteWhileReady { queue, offset } => write!(
                f,
                "queue {queue}: register {offset:#x} written while the queue is ready; ignored (set QueueReady to 0 first)"
            ),
            NoSuchQueue { queue } => write!(f, "QueueSel {queue} names no queue of this device; access ignored"),
            FeaturesRefused { offered, accepted } => write!(
                f,
                "FEATURES_OK refused: driver accepted features {accepted:#x}, device offers {offered:#x} and requires VIRTIO_F_VERSION_1"
            ),
            FeaturesAfterFeaturesOk => write!(f, "DriverFeatures written after FEATURES_OK; ignored"),
            DriverOkWithoutFeaturesOk => write!(f, "DRIVER_OK set before FEATURES_OK; refused (legacy drivers are not supported)"),
            OutOfMemory { queue } => write!(
                f,
                "queue {queue}: the hypervisor has no memory left to read a descriptor chain; the device needs a reset"
            ),
            LegacyRegister { offset, write } => write!(
                f,
                "{} of legacy register {offset:#x} on a version 2 device: {} (a legacy driver must read Version first)",
                if write { "write" } else { "read" },
                if write { "ignored" } else { "reads as zero" }
            ),
        }
    }
}

/// A bounded log: the newest `INCIDENT_LOG_CAPACITY` incidents and a count of the dropped ones.
/// Its room is allocated with it, so recording what a guest did never allocates.
pub struct IncidentLog {
    entries: VecDeque<DeviceIncident>,
    dropped: u64,
}

impl Default for IncidentLog {
    fn default() -> Self {
        IncidentLog { entries: VecDeque::with_capacity(INCIDENT_LOG_CAPACITY), dropped: 0 }
    }
}

impl IncidentLog {
    pub fn record(&mut self, incident: DeviceIncident) {
        if self.entries.len() >= INCIDENT_LOG_CAPACITY {
            self.entries.pop_front();
            self.dropped = self.dropped.saturating_add(1);
        }
        self.entries.push_back(incident);
    }

    /// Everything since the last call; a leading `Dropped` entry when some were lost. With no
    /// heap for the list, the incidents are counted as dropped instead (a log, not a panic).
    pub fn take(&mut self) -> Vec<DeviceIncident> {
        let mut out = Vec::new();
        // The usual case, after every register access: nothing to take, nothing allocated.
        if self.is_empty() {
            return out;
        }
        if out.try_reserve_exact(self.entries.len() + 1).is_err() {
            self.dropped = self.dropped.saturating_add(self.entries.len() as u64);
            self.entries.clear();
            return out;
        }
        if self.dropped > 0 {
            out.push(DeviceIncident::Dropped { count: self.dropped });
            self.dropped = 0;
        }
        out.extend(self.entries.drain(..));
        out
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.dropped == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incident_log_keeps_newest_and_counts_dropped() {
        let mut log = IncidentLog::default();
        for q in 0..20u32 {
            log.record(DeviceIncident::NoSuchQueue { queue: q });
        }
        let got = log.take();
        assert_eq!(got.len(), INCIDENT_LOG_CAPACITY + 1);
        assert_eq!(got[0], DeviceIncident::Dropped { count: 4 });
        assert_eq!(got[1], DeviceIncident::NoSuchQueue { queue: 4 });
        assert!(log.take().is_empty());
    }
}
