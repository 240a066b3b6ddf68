//! One split virtqueue as a driver sees it (virtio 1.2, 2.7): the hypervisor's own request
//! queue on the board's disk. Each of its `slots` requests in flight owns one descriptor of
//! the ring, whose index is the slot's, pointing at an indirect table of its own (2.7.5.3)
//! in the same memory; a request's parts (the header, the data runs, the status byte) are
//! written into that table straight from their physical addresses and lengths.
//!
//! Nothing is allocated per request, and no buffer is ever a Rust object: the device reads
//! and writes memory the driver only names, so a request naming the same memory twice
//! hands the device two descriptors of it and nothing more. Every structure the device
//! reads or writes lives in one [`RingMemory`], laid out as the legacy interface requires
//! (2.6.2: descriptors, then the available ring, then the used ring from the next page),
//! which a virtio 1.x transport takes as well.

use crate::virtio::chain::{
    DESCRIPTOR_SIZE, VIRTQ_DESC_F_INDIRECT as F_INDIRECT, VIRTQ_DESC_F_NEXT as F_NEXT, VIRTQ_DESC_F_WRITE as F_WRITE,
};
use crate::virtio::queue::{vring_need_event, VIRTQ_USED_F_NO_NOTIFY as USED_F_NO_NOTIFY};

const DESCRIPTOR: usize = DESCRIPTOR_SIZE as usize;
const PAGE: usize = 4096;

/// The memory a driver shares with its device for one queue. Offsets are bytes from its
/// start; every access is a single access of its width the device may see at once, and
/// every structure is little-endian (2.4).
pub trait RingMemory {
    fn read_u16(&self, offset: usize) -> u16;
    fn read_u32(&self, offset: usize) -> u32;
    fn write_u16(&self, offset: usize, value: u16);
    fn write_u32(&self, offset: usize, value: u32);
    fn write_u64(&self, offset: usize, value: u64);
    /// Writes one descriptor (2.7.5) at `offset`: its four fields, with one check of
    /// where it lies (a request's buffers are written a descriptor at a time).
    fn write_descriptor(&self, offset: usize, addr: u64, len: u32, flags: u16, next: u16) {
        self.write_u64(offset, addr);
        self.write_u32(offset + 8, len);
        self.write_u16(offset + 12, flags);
        self.write_u16(offset + 14, next);
    }
    /// Orders every access before it against every access after it, as the device sees
    /// them (a store and a later load included).
    fn fence(&self);
    /// The device's address of offset 0.
    fn address(&self) -> u64;
}

/// Where each part of a queue lies in its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLayout {
    /// Descriptors in the ring (QueueNum): a power of two.
    pub size: u16,
    /// Requests in flight at once, each with a table of `table_len` descriptors.
    pub slots: u16,
    pub table_len: u16,
    avail: usize,
    used: usize,
    tables: usize,
    bytes: usize,
}

/// Why a queue cannot be laid out, or a request not published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueError {
    /// The ring's size is not a power of two, has fewer descriptors than slots, or there
    /// are more slots than the driver can track (64).
    BadLayout { size: u16, slots: u16 },
    /// No such slot, or the slot's request is still with the device.
    SlotBusy { slot: u16 },
    /// A request of more parts than its table holds (at least two: a first and a last).
    BadLength { parts: usize, most: u16 },
}

impl core::fmt::Display for QueueError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QueueError::BadLayout { size, slots } => write!(
                f,
                "a ring of {size} descriptors cannot hold {slots} requests in flight (a power of two, at least one descriptor a request, at most 64 requests)"
            ),
            QueueError::SlotBusy { slot } => write!(f, "slot {slot} is not free for a request"),
            QueueError::BadLength { parts, most } => {
                write!(f, "a request of {parts} parts: its table holds {most}")
            }
        }
    }
}

const fn align_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl QueueLayout {
    pub fn new(size: u16, slots: u16, table_len: u16) -> Result<Self, QueueError> {
        if !size.is_power_of_two() || slots == 0 || slots > size || slots > 64 || table_len < 2 {
            return Err(QueueError::BadLayout { size, slots });
        }
        let n = usize::from(size);
        let avail = DESCRIPTOR * n;
        // flags, idx, ring[n], used_event (2.7.6); the used ring from the next page (2.6.2).
        let used = align_up(avail + 2 * (n + 3), PAGE);
        // flags, idx, ring[n] of (id, len), avail_event (2.7.8).
        let tables = align_up(used + 8 * n + 6, DESCRIPTOR);
        let bytes = tables + usize::from(slots) * usize::from(table_len) * DESCRIPTOR;
        Ok(QueueLayout { size, slots, table_len, avail, used, tables, bytes })
    }

    /// The bytes of memory the queue needs, page-aligned.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn table(&self, slot: u16) -> usize {
        self.tables + usize::from(slot) * usize::from(self.table_len) * DESCRIPTOR
    }
}

/// One part of a request: `len` bytes at the device's address `addr`, which the device
/// writes (`device_writes`) or reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub addr: u64,
    pub len: u32,
    pub device_writes: bool,
}

/// A request the device has finished: its slot and the bytes it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    pub slot: u16,
    pub written: u32,
}

/// The driver's side of one split virtqueue.
pub struct DriverQueue<M> {
    memory: M,
    layout: QueueLayout,
    event_idx: bool,
    /// The next avail->idx, and the used->idx up to which requests were taken back.
    avail_idx: u16,
    last_used: u16,
    /// Bit n: slot n's request is with the device.
    in_flight: u64,
    /// Used elements naming no request in flight, skipped (a device's error).
    strays: u64,
}

impl<M: RingMemory> DriverQueue<M> {
    /// A queue over `memory` (at least `layout.bytes()`, zeroed): each slot's ring
    /// descriptor points at its indirect table. `event_idx`: VIRTIO_F_EVENT_IDX was
    /// negotiated; VIRTIO_F_INDIRECT_DESC must have been.
    pub fn new(memory: M, layout: QueueLayout, event_idx: bool) -> Self {
        for slot in 0..layout.slots {
            let at = usize::from(slot) * DESCRIPTOR;
            memory.write_u64(at, memory.address() + layout.table(slot) as u64);
            memory.write_u16(at + 12, F_INDIRECT);
        }
        memory.fence();
        DriverQueue { memory, layout, event_idx, avail_idx: 0, last_used: 0, in_flight: 0, strays: 0 }
    }

    pub fn layout(&self) -> QueueLayout {
        self.layout
    }

    /// The device's addresses of the descriptor table, the driver area (available ring)
    /// and the device area (used ring), for the transport's queue registers.
    pub fn areas(&self) -> (u64, u64, u64) {
        let base = self.memory.address();
        (base, base + self.layout.avail as u64, base + self.layout.used as u64)
    }

    /// Whether `slot` is free for a request.
    pub fn is_free(&self, slot: u16) -> bool {
        slot < self.layout.slots && self.in_flight & (1 << slot) == 0
    }

    /// Used elements the device returned that named no request in flight.
    pub fn strays(&self) -> u64 {
        self.strays
    }

    /// Makes a request available in `slot`: its `first` part, the parts of `middle`, and
    /// its `last` part, device-readable ones before device-writable ones (2.7.4.2).
    /// Returns whether the device asks to be notified (2.7.10, 2.7.7.2). Nothing is made
    /// available on an error.
    pub fn publish(
        &mut self,
        slot: u16,
        first: Part,
        middle: impl IntoIterator<Item = Part>,
        last: Part,
    ) -> Result<bool, QueueError> {
        if !self.is_free(slot) {
            return Err(QueueError::SlotBusy { slot });
        }
        let (memory, table, most) = (&self.memory, self.layout.table(slot), self.layout.table_len);
        let flags = |p: &Part| if p.device_writes { F_WRITE } else { 0 };
        memory.write_descriptor(table, first.addr, first.len, F_NEXT | flags(&first), 1);
        // The parts written so far; the last takes one more place.
        let mut count = 1u16;
        for part in middle {
            if count + 1 >= most {
                return Err(QueueError::BadLength { parts: usize::from(count) + 2, most });
            }
            let at = table + usize::from(count) * DESCRIPTOR;
            count += 1;
            memory.write_descriptor(at, part.addr, part.len, F_NEXT | flags(&part), count);
        }
        if count >= most {
            return Err(QueueError::BadLength { parts: usize::from(count) + 1, most });
        }
        memory.write_descriptor(table + usize::from(count) * DESCRIPTOR, last.addr, last.len, flags(&last), 0);
        count += 1;
        memory.write_u32(usize::from(slot) * DESCRIPTOR + 8, u32::from(count) * DESCRIPTOR as u32);
        let (avail, n) = (self.layout.avail, self.layout.size);
        memory.write_u16(avail + 4 + 2 * usize::from(self.avail_idx % n), slot);
        // The table and the ring entry before the index that publishes them (2.7.13).
        memory.fence();
        let old = self.avail_idx;
        self.avail_idx = old.wrapping_add(1);
        memory.write_u16(avail + 2, self.avail_idx);
        self.in_flight |= 1 << slot;
        // The index's store before the load of avail_event or the flags: the device stores
        // those, then loads the index (2.7.10); without a full barrier each side could see
        // the other's old value and the notify be lost.
        memory.fence();
        let used = self.layout.used;
        Ok(if self.event_idx {
            let avail_event = memory.read_u16(used + 4 + 8 * usize::from(n));
            vring_need_event(avail_event, self.avail_idx, old)
        } else {
            memory.read_u16(used) & USED_F_NO_NOTIFY == 0
        })
    }

    /// The next request the device has finished, its slot free again. When none is left
    /// it asks (with EVENT_IDX) to be interrupted for the next one and looks once more: a
    /// request finished while it still saw the old used_event would otherwise wait for
    /// another one's interrupt (2.7.7.2).
    pub fn take_used(&mut self) -> Option<Used> {
        let (memory, used, n) = (&self.memory, self.layout.used, self.layout.size);
        loop {
            if memory.read_u16(used + 2) == self.last_used {
                if !self.event_idx {
                    return None;
                }
                memory.write_u16(self.layout.avail + 4 + 2 * usize::from(n), self.last_used);
                memory.fence();
                if memory.read_u16(used + 2) == self.last_used {
                    return None;
                }
            }
            // The index before the element it published.
            memory.fence();
            let elem = used + 4 + 8 * usize::from(self.last_used % n);
            let (id, written) = (memory.read_u32(elem), memory.read_u32(elem + 4));
            self.last_used = self.last_used.wrapping_add(1);
            match u16::try_from(id) {
                Ok(slot) if slot < self.layout.slots && self.in_flight & (1 << slot) != 0 => {
                    self.in_flight &= !(1 << slot);
                    return Some(Used { slot, written });
                }
                _ => self.strays += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::chain::Chain;
    use crate::virtio::memory::{GuestMemory, VecMemory};
    use crate::virtio::queue::Virtqueue;
    use alloc::vec::Vec;

    const BASE: u64 = 0x4000_0000;

    /// The queue's memory as the device model sees guest memory: the project's own device
    /// side of the split ring is the other end.
    struct Shared<'a>(&'a VecMemory);

    impl RingMemory for Shared<'_> {
        fn read_u16(&self, offset: usize) -> u16 {
            let mut b = [0; 2];
            self.0.read(BASE + offset as u64, &mut b).unwrap();
            u16::from_le_bytes(b)
        }
        fn read_u32(&self, offset: usize) -> u32 {
            let mut b = [0; 4];
            self.0.read(BASE + offset as u64, &mut b).unwrap();
            u32::from_le_bytes(b)
        }
        fn write_u16(&self, offset: usize, value: u16) {
            self.0.write(BASE + offset as u64, &value.to_le_bytes()).unwrap();
        }
        fn write_u32(&self, offset: usize, value: u32) {
            self.0.write(BASE + offset as u64, &value.to_le_bytes()).unwrap();
        }
        fn write_u64(&self, offset: usize, value: u64) {
            self.0.write(BASE + offset as u64, &value.to_le_bytes()).unwrap();
        }
        fn fence(&self) {}
        fn address(&self) -> u64 {
            BASE
        }
    }

    struct Device {
        queue: Virtqueue,
        event_idx: bool,
    }

    impl Device {
        fn new(driver: &DriverQueue<Shared<'_>>, mem: &VecMemory, event_idx: bool) -> Self {
            let layout = driver.layout();
            let mut queue = Virtqueue::new(layout.size);
            (queue.desc, queue.driver, queue.device) = driver.areas();
            queue.num = u32::from(layout.size);
            queue.validate(0, mem).expect("the device accepts the driver's rings");
            queue.ready = true;
            Device { queue, event_idx }
        }
        fn pop(&mut self, mem: &VecMemory) -> Option<Chain> {
            self.queue.pop(mem, 0, self.event_idx, true).expect("the driver's chains are well-formed")
        }
        fn complete(&mut self, mem: &VecMemory, head: u16, written: u32) -> bool {
            let old = self.queue.used_idx;
            self.queue.push_used(mem, 0, head, written).unwrap();
            self.queue.needs_interrupt(mem, 0, old, self.event_idx).unwrap()
        }
    }

    fn parts(first: u64, count: usize) -> Vec<Part> {
        (0..count)
            .map(|i| Part {
                addr: first + i as u64 * 0x1000,
                len: 512 * (i as u32 % 8 + 1),
                device_writes: i + 1 >= count - count / 4,
            })
            .collect()
    }

    /// `request` (at least two parts) published in `slot`.
    fn publish(driver: &mut DriverQueue<Shared<'_>>, slot: u16, request: &[Part]) -> Result<bool, QueueError> {
        let (first, rest) = request.split_first().unwrap();
        let (last, middle) = rest.split_last().unwrap();
        driver.publish(slot, *first, middle.iter().copied(), *last)
    }

    fn as_parts(chain: &Chain) -> Vec<Part> {
        let parts = chain.buffers().iter().enumerate();
        parts.map(|(i, b)| Part { addr: b.addr, len: b.len, device_writes: chain.is_writable(i) }).collect()
    }

    #[test]
    fn the_device_sees_each_request_s_parts_in_order_through_its_slot_s_indirect_table() {
        let layout = QueueLayout::new(256, 32, 256).unwrap();
        let mem = VecMemory::new(BASE, layout.bytes() + (64 << 20));
        let mut driver = DriverQueue::new(Shared(&mem), layout, true);
        let mut device = Device::new(&driver, &mem, true);
        let data = BASE + (32 << 20);
        for (slot, count) in [(0u16, 2usize), (31, 256), (7, 3)] {
            let request = parts(data + u64::from(slot) * 0x10_0000, count);
            publish(&mut driver, slot, &request).unwrap();
            let chain = device.pop(&mem).expect("published");
            assert_eq!(chain.head, slot, "the slot's own ring descriptor");
            assert_eq!(as_parts(&chain), request);
        }
        assert!(device.pop(&mem).is_none());
    }

    #[test]
    fn a_request_that_does_not_fit_its_table_or_a_busy_slot_publishes_nothing() {
        let layout = QueueLayout::new(8, 4, 4).unwrap();
        let mem = VecMemory::new(BASE, layout.bytes() + 0x10000);
        let mut driver = DriverQueue::new(Shared(&mem), layout, false);
        let mut device = Device::new(&driver, &mem, false);
        let data = BASE + 0x8000;
        assert_eq!(publish(&mut driver, 0, &parts(data, 5)), Err(QueueError::BadLength { parts: 5, most: 4 }));
        assert_eq!(publish(&mut driver, 0, &parts(data, 9)), Err(QueueError::BadLength { parts: 5, most: 4 }));
        assert_eq!(publish(&mut driver, 4, &parts(data, 2)), Err(QueueError::SlotBusy { slot: 4 }));
        assert!(device.pop(&mem).is_none(), "nothing was made available");
        assert!(driver.is_free(0));
        publish(&mut driver, 0, &parts(data, 4)).unwrap();
        assert_eq!(publish(&mut driver, 0, &parts(data, 2)), Err(QueueError::SlotBusy { slot: 0 }));
        assert_eq!(as_parts(&device.pop(&mem).unwrap()), parts(data, 4));
        assert!(device.pop(&mem).is_none());
    }

    #[test]
    fn a_ring_that_cannot_hold_its_slots_is_refused() {
        assert!(QueueLayout::new(6, 4, 4).is_err(), "not a power of two");
        assert!(QueueLayout::new(4, 8, 4).is_err(), "more slots than descriptors");
        assert!(QueueLayout::new(128, 65, 4).is_err(), "more slots than the driver tracks");
        assert!(QueueLayout::new(8, 0, 4).is_err());
        assert!(QueueLayout::new(8, 4, 1).is_err(), "a table too short for a first and a last part");
        let layout = QueueLayout::new(256, 32, 256).unwrap();
        assert_eq!(layout.used % PAGE, 0, "the legacy layout's used ring starts a page");
        assert_eq!(layout.tables % DESCRIPTOR, 0);
    }

    #[test]
    fn a_stray_used_element_is_skipped_and_counted() {
        let layout = QueueLayout::new(8, 4, 4).unwrap();
        let mem = VecMemory::new(BASE, layout.bytes() + 0x10000);
        let mut driver = DriverQueue::new(Shared(&mem), layout, false);
        let mut device = Device::new(&driver, &mem, false);
        publish(&mut driver, 2, &parts(BASE + 0x8000, 2)).unwrap();
        let chain = device.pop(&mem).unwrap();
        device.complete(&mem, 3, 0);
        device.complete(&mem, 0xffff, 0);
        device.complete(&mem, chain.head, 512);
        assert_eq!(driver.take_used(), Some(Used { slot: 2, written: 512 }));
        assert_eq!(driver.strays(), 2);
        device.complete(&mem, chain.head, 512);
        assert_eq!(driver.take_used(), None, "a request taken back once only");
        assert_eq!(driver.strays(), 3);
    }

    proptest::proptest! {
        /// Requests published and finished in any order, the device idle (asking for a
        /// notify) or polling (asking for none) by turns, past the 16-bit indices' wrap:
        /// the driver notifies exactly when the device asks, each request comes back once
        /// with its slot, and a request finished after the driver last looked always raises
        /// an interrupt (the driver's handler runs only after one).
        #[test]
        fn requests_come_back_once_and_no_notify_or_interrupt_is_lost(
            event_idx: bool,
            script in proptest::collection::vec((0u8..5, 0u16..32, 2usize..7), 1..300),
            rounds in 1usize..250,
        ) {
            let layout = QueueLayout::new(64, 32, 8).unwrap();
            let mem = VecMemory::new(BASE, layout.bytes() + 0x10000);
            let mut driver = DriverQueue::new(Shared(&mem), layout, event_idx);
            let mut device = Device::new(&driver, &mem, event_idx);
            let data = BASE + 0x8000;
            let (mut with_device, mut finished) = (Vec::new(), 0usize);
            let (mut polling, mut interrupted) = (false, false);
            // The idle device has asked for the first notify.
            proptest::prop_assert!(device.pop(&mem).is_none());
            for _ in 0..rounds {
                for &(action, slot, count) in &script {
                    match action {
                        0 | 4 => {
                            let free = driver.is_free(slot);
                            let request = parts(data, count);
                            match publish(&mut driver, slot, &request) {
                                Ok(notify) => {
                                    proptest::prop_assert!(free);
                                    proptest::prop_assert_eq!(notify, !polling, "a notify exactly when asked");
                                    let chain = device.pop(&mem).unwrap();
                                    proptest::prop_assert_eq!(chain.head, slot);
                                    proptest::prop_assert_eq!(as_parts(&chain), request);
                                    with_device.push(slot);
                                    if polling {
                                        device.queue.refresh_suppression(&mem, 0, event_idx).unwrap();
                                    } else {
                                        proptest::prop_assert!(device.pop(&mem).is_none());
                                    }
                                }
                                Err(e) => {
                                    proptest::prop_assert!(!free);
                                    proptest::prop_assert_eq!(e, QueueError::SlotBusy { slot });
                                }
                            }
                        }
                        1 => {
                            polling = !polling;
                            if polling {
                                device.queue.suppress_notifications(&mem, 0, event_idx).unwrap();
                            } else {
                                proptest::prop_assert!(!device.queue.enable_notifications(&mem, 0, event_idx).unwrap());
                            }
                        }
                        2 if !with_device.is_empty() => {
                            let head = with_device.remove(usize::from(slot) % with_device.len());
                            interrupted |= device.complete(&mem, head, u32::from(slot));
                            finished += 1;
                        }
                        _ if interrupted => {
                            interrupted = false;
                            while let Some(used) = driver.take_used() {
                                proptest::prop_assert!(!with_device.contains(&used.slot));
                                proptest::prop_assert!(driver.is_free(used.slot));
                                finished -= 1;
                            }
                            proptest::prop_assert_eq!(finished, 0, "every finished request taken");
                        }
                        _ => {}
                    }
                }
            }
            proptest::prop_assert!(finished == 0 || interrupted, "a finished request with no interrupt to fetch it");
            proptest::prop_assert_eq!(driver.strays(), 0);
        }
    }

    #[test]
    fn the_indices_wrap_without_losing_a_request() {
        let layout = QueueLayout::new(4, 2, 2).unwrap();
        let mem = VecMemory::new(BASE, layout.bytes() + 0x10000);
        let mut driver = DriverQueue::new(Shared(&mem), layout, true);
        let mut device = Device::new(&driver, &mem, true);
        for i in 0..70_000u32 {
            let slot = (i % 2) as u16;
            publish(&mut driver, slot, &parts(BASE + 0x8000, 2)).unwrap();
            let chain = device.pop(&mem).unwrap();
            assert!(device.complete(&mem, chain.head, i), "the driver asked for each completion");
            assert_eq!(driver.take_used(), Some(Used { slot, written: i }));
            assert_eq!(driver.take_used(), None);
        }
    }
}
