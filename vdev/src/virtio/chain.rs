//! Descriptor chains (virtio 1.2, 2.7.5): walking a chain from its head through the
//! descriptor table and indirect tables, rejecting every malformed shape, and moving request
//! bytes in and out of the chain's buffers.
//!
//! Walking is bounded: a direct chain may visit at most `size` descriptors, an indirect table at
//! most its own entry count, and an indirect table holds at most `max_indirect` entries, so a
//! chain never holds more than `size + max_indirect` buffers whatever the guest wrote.

use alloc::vec::Vec;

use crate::virtio::incident::DeviceIncident;
use crate::virtio::memory::{GuestMemory, Segment};

/// Descriptor flags (2.7.5).
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;

/// Size of one descriptor in the table (2.7.5).
pub const DESCRIPTOR_SIZE: u64 = 16;

/// One buffer of a chain as the driver described it; `in_ram` says whether it passed `check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub addr: u64,
    pub len: u32,
    pub writable: bool,
    pub in_ram: bool,
    /// Index in the descriptor table (or in the indirect table), for incident messages.
    pub descriptor: u16,
}

/// A whole chain: device-readable buffers first, then device-writable ones (2.7.4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub head: u16,
    pub buffers: Vec<Buffer>,
}

/// What the walk may accept.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChainRules {
    pub queue: u16,
    /// QueueNum: the size of the descriptor table.
    pub size: u16,
    /// The most entries an indirect table may hold (the queue's QueueNumMax, see `read_chain`).
    pub max_indirect: u16,
    /// VIRTIO_F_INDIRECT_DESC negotiated.
    pub indirect: bool,
}

struct Descriptor {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

fn decode(raw: &[u8; 16]) -> Descriptor {
    let [a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, l3, f0, f1, n0, n1] = *raw;
    Descriptor {
        addr: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
        len: u32::from_le_bytes([l0, l1, l2, l3]),
        flags: u16::from_le_bytes([f0, f1]),
        next: u16::from_le_bytes([n0, n1]),
    }
}

fn read_descriptor(mem: &dyn GuestMemory, table: u64, index: u16, queue: u16) -> Result<Descriptor, DeviceIncident> {
    let addr = table.checked_add(u64::from(index) * DESCRIPTOR_SIZE).ok_or(DeviceIncident::RingOutsideRam {
        queue,
        error: crate::virtio::memory::GuestMemoryError { addr: table, len: DESCRIPTOR_SIZE },
    })?;
    let mut raw = [0u8; 16];
    mem.read(addr, &mut raw).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })?;
    Ok(decode(&raw))
}

/// Pushes one data buffer, enforcing readable-before-writable (2.7.4.2).
fn push(
    mem: &dyn GuestMemory,
    buffers: &mut Vec<Buffer>,
    d: &Descriptor,
    index: u16,
    queue: u16,
) -> Result<(), DeviceIncident> {
    let writable = d.flags & VIRTQ_DESC_F_WRITE != 0;
    if !writable && buffers.last().is_some_and(|b| b.writable) {
        return Err(DeviceIncident::ReadableAfterWritable { queue, descriptor: index });
    }
    let in_ram = mem.check(d.addr, u64::from(d.len)).is_ok();
    // A chain holds at most a queue's (or an indirect table's) worth of buffers; the heap
    // can still be exhausted, which must not panic the hypervisor.
    buffers.try_reserve(1).map_err(|_| DeviceIncident::OutOfMemory { queue })?;
    buffers.push(Buffer { addr: d.addr, len: d.len, writable, in_ram, descriptor: index });
    Ok(())
}

/// Walks the chain starting at `head` in the descriptor table at `table`. Every error returned
/// is a driver bug that makes the device need a reset (2.1.2); buffers outside RAM are not
/// errors here, they are marked and the device fails just that request.
///
/// Indirect tables may hold up to `max_indirect` entries, the queue's QueueNumMax rather than
/// QueueNum: Linux sizes indirect tables by the device's segment limit (seg_max + 2), which may
/// exceed a QueueNum the driver chose smaller than the maximum.
pub(crate) fn read_chain(
    mem: &dyn GuestMemory,
    table: u64,
    head: u16,
    rules: ChainRules,
) -> Result<Chain, DeviceIncident> {
    let queue = rules.queue;
    if head >= rules.size {
        return Err(DeviceIncident::BadHeadIndex { queue, head, size: rules.size });
    }
    let mut buffers = Vec::new();
    let mut index = head;
    let mut visited: u32 = 0;
    loop {
        visited += 1;
        if visited > u32::from(rules.size) {
            return Err(DeviceIncident::DescriptorLoop { queue, head, limit: rules.size });
        }
        let d = read_descriptor(mem, table, index, queue)?;
        if d.flags & VIRTQ_DESC_F_INDIRECT != 0 {
            if !rules.indirect {
                return Err(DeviceIncident::IndirectNotNegotiated { queue, descriptor: index });
            }
            // 2.7.5.3.1: INDIRECT and NEXT together are forbidden, so an indirect table ends the chain.
            if d.flags & VIRTQ_DESC_F_NEXT != 0 {
                return Err(DeviceIncident::IndirectWithNext { queue, descriptor: index });
            }
            read_indirect(mem, &d, index, rules, &mut buffers)?;
            break;
        }
        push(mem, &mut buffers, &d, index, queue)?;
        if d.flags & VIRTQ_DESC_F_NEXT == 0 {
            break;
        }
        if d.next >= rules.size {
            return Err(DeviceIncident::BadNextIndex { queue, descriptor: index, next: d.next, size: rules.size });
        }
        index = d.next;
    }
    Ok(Chain { head, buffers })
}

/// Walks an indirect table (2.7.5.3). Its WRITE flag is ignored (2.7.5.3.2).
fn read_indirect(
    mem: &dyn GuestMemory,
    d: &Descriptor,
    index: u16,
    rules: ChainRules,
    buffers: &mut Vec<Buffer>,
) -> Result<(), DeviceIncident> {
    let queue = rules.queue;
    let entries = u64::from(d.len) / DESCRIPTOR_SIZE;
    let bad_len =
        DeviceIncident::BadIndirectLength { queue, descriptor: index, len: d.len, max_entries: rules.max_indirect };
    if d.len == 0 || u64::from(d.len) % DESCRIPTOR_SIZE != 0 || entries > u64::from(rules.max_indirect) {
        return Err(bad_len);
    }
    // Bounded by max_indirect (a u16) above, so the cast cannot truncate.
    let entries = entries as u16;
    mem.check(d.addr, u64::from(d.len)).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })?;
    let mut at = 0u16;
    let mut visited: u32 = 0;
    loop {
        visited += 1;
        if visited > u32::from(entries) {
            return Err(DeviceIncident::DescriptorLoop { queue, head: index, limit: entries });
        }
        let e = read_descriptor(mem, d.addr, at, queue)?;
        if e.flags & VIRTQ_DESC_F_INDIRECT != 0 {
            return Err(DeviceIncident::IndirectInIndirect { queue, descriptor: at });
        }
        push(mem, buffers, &e, at, queue)?;
        if e.flags & VIRTQ_DESC_F_NEXT == 0 {
            return Ok(());
        }
        if e.next >= entries {
            return Err(DeviceIncident::BadNextIndex { queue, descriptor: at, next: e.next, size: entries });
        }
        at = e.next;
    }
}

impl Chain {
    pub fn readable(&self) -> impl Iterator<Item = &Buffer> {
        self.buffers.iter().filter(|b| !b.writable)
    }

    pub fn writable(&self) -> impl Iterator<Item = &Buffer> {
        self.buffers.iter().filter(|b| b.writable)
    }

    pub fn readable_len(&self) -> u64 {
        self.readable().map(|b| u64::from(b.len)).sum()
    }

    pub fn writable_len(&self) -> u64 {
        self.writable().map(|b| u64::from(b.len)).sum()
    }

    /// The first buffer outside the VM's RAM, if any.
    pub fn outside_ram(&self) -> Option<&Buffer> {
        self.buffers.iter().find(|b| !b.in_ram)
    }

    /// The guest memory holding bytes [offset, offset+len) of the readable (or writable) part,
    /// split at buffer boundaries; `None` if that part is shorter, a buffer is outside RAM, or
    /// the heap has no room for the list.
    pub fn segments(&self, writable: bool, offset: u64, len: u64) -> Option<Vec<Segment>> {
        let mut out = Vec::new();
        let mut skip = offset;
        let mut left = len;
        for b in self.buffers.iter().filter(|b| b.writable == writable) {
            if left == 0 {
                break;
            }
            let blen = u64::from(b.len);
            if skip >= blen {
                skip -= blen;
                continue;
            }
            if !b.in_ram {
                return None;
            }
            let take = (blen - skip).min(left);
            out.try_reserve(1).ok()?;
            // take <= b.len (a u32), so the cast is exact; skip < blen so the sum stays in the buffer.
            out.push(Segment { addr: b.addr.checked_add(skip)?, len: take as u32 });
            left -= take;
            skip = 0;
        }
        if left == 0 {
            Some(out)
        } else {
            None
        }
    }

    /// Copies readable bytes from `offset` into `buf`; false if not all were available in RAM.
    pub fn read_bytes(&self, mem: &dyn GuestMemory, offset: u64, buf: &mut [u8]) -> bool {
        let Some(segments) = self.segments(false, offset, buf.len() as u64) else {
            return false;
        };
        let mut at = 0usize;
        for s in segments {
            let end = at + s.len as usize;
            let Some(dst) = buf.get_mut(at..end) else {
                return false;
            };
            if mem.read(s.addr, dst).is_err() {
                return false;
            }
            at = end;
        }
        true
    }

    /// Copies `data` into the writable part from `offset`; false if it did not all fit in RAM.
    pub fn write_bytes(&self, mem: &dyn GuestMemory, offset: u64, data: &[u8]) -> bool {
        let Some(segments) = self.segments(true, offset, data.len() as u64) else {
            return false;
        };
        let mut at = 0usize;
        for s in segments {
            let end = at + s.len as usize;
            let Some(src) = data.get(at..end) else {
                return false;
            };
            if mem.write(s.addr, src).is_err() {
                return false;
            }
            at = end;
        }
        true
    }
}
