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

/// Entries of an indirect table read from guest memory at once.
const BATCH: usize = 16;

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

/// A whole chain: device-readable buffers first, then device-writable ones (2.7.4.2). Its
/// two parts' lengths and its first buffer outside RAM are counted once, when it is made
/// (`Chain::new`), so a device asks for them without another pass over a chain of up to
/// `size + max_indirect` buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub head: u16,
    buffers: Vec<Buffer>,
    readable_len: u64,
    writable_len: u64,
    /// Index in `buffers` of the first buffer outside the VM's RAM.
    first_outside: Option<usize>,
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

/// Descriptors as read from guest memory, 8-byte aligned: each field is then decoded with
/// one load of its width. In a byte array (alignment 1) the compiler, for these
/// strict-align targets, assembled each descriptor's address from eight byte loads, and
/// its other fields likewise: about 25 instructions a descriptor.
#[repr(C, align(8))]
struct Table<const N: usize>([[u8; DESCRIPTOR_SIZE as usize]; N]);

impl<const N: usize> Table<N> {
    fn new() -> Self {
        Table([[0; DESCRIPTOR_SIZE as usize]; N])
    }
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
    let mut raw = Table::<1>::new();
    mem.read(addr, raw.0.as_flattened_mut()).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })?;
    Ok(decode(&raw.0[0]))
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
    Ok(Chain::new(head, buffers))
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
    // One allocation for the whole table (a chain holds at most this many buffers more).
    buffers.try_reserve(usize::from(entries)).map_err(|_| DeviceIncident::OutOfMemory { queue })?;
    // The table is read `BATCH` entries at a time, not one: a driver chains an indirect
    // table's entries in order, so a 1 MiB request of 256 entries costs 16 reads of guest
    // memory, each with its check and barrier, instead of 256.
    let mut batch = Table::<BATCH>::new();
    let mut batch_first: Option<u16> = None;
    let mut at = 0u16;
    let mut visited: u32 = 0;
    loop {
        visited += 1;
        if visited > u32::from(entries) {
            return Err(DeviceIncident::DescriptorLoop { queue, head: index, limit: entries });
        }
        let first = at - at % BATCH as u16;
        if batch_first != Some(first) {
            let n = usize::from((entries - first).min(BATCH as u16)) * DESCRIPTOR_SIZE as usize;
            let addr = d.addr + u64::from(first) * DESCRIPTOR_SIZE;
            let bytes = &mut batch.0.as_flattened_mut()[..n];
            mem.read(addr, bytes).map_err(|error| DeviceIncident::RingOutsideRam { queue, error })?;
            batch_first = Some(first);
        }
        let e = decode(&batch.0[usize::from(at - first)]);
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
    /// The chain of `buffers` (readable ones first) from descriptor `head`, counted in one
    /// pass after the walk: counted as the walk pushed each buffer, the walk's loop kept
    /// the counts in memory and cost more than the passes it saved.
    pub(crate) fn new(head: u16, buffers: Vec<Buffer>) -> Chain {
        let (mut readable_len, mut writable_len, mut first_outside) = (0u64, 0u64, None);
        for (i, b) in buffers.iter().enumerate() {
            // At most `size + max_indirect` buffers of under 4 GiB each: the sums cannot wrap.
            if b.writable {
                writable_len += u64::from(b.len);
            } else {
                readable_len += u64::from(b.len);
            }
            if !b.in_ram && first_outside.is_none() {
                first_outside = Some(i);
            }
        }
        Chain { head, buffers, readable_len, writable_len, first_outside }
    }

    /// Every buffer, in chain order (for tests: a device asks for lengths and segments).
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    pub fn readable_len(&self) -> u64 {
        self.readable_len
    }

    pub fn writable_len(&self) -> u64 {
        self.writable_len
    }

    /// The first buffer outside the VM's RAM, if any.
    pub fn outside_ram(&self) -> Option<&Buffer> {
        self.buffers.get(self.first_outside?)
    }

    /// The guest address of the writable part's last byte (a block request's status byte,
    /// virtio 1.2 5.2.6), found from the chain's end: `Err(None)` when the writable part
    /// is empty, `Err(Some(buffer))` when the buffer holding it is outside RAM.
    pub fn last_writable_byte(&self) -> Result<u64, Option<&Buffer>> {
        // Writable buffers come last (2.7.4.2), so the last non-empty buffer holds the
        // writable part's last byte whenever that part is not empty.
        if self.writable_len == 0 {
            return Err(None);
        }
        let b = self.buffers.iter().rev().find(|b| b.len != 0).filter(|b| b.writable).ok_or(None)?;
        if !b.in_ram {
            return Err(Some(b));
        }
        b.addr.checked_add(u64::from(b.len) - 1).ok_or(Some(b))
    }

    /// The guest memory holding bytes [offset, offset+len) of the readable (or writable) part,
    /// split at buffer boundaries, into `out` (cleared first, and kept by the caller so that
    /// its capacity serves the next chain); `false` if that part is shorter, a buffer is
    /// outside RAM, or the heap has no room for the list.
    pub fn segments_into(&self, out: &mut Vec<Segment>, writable: bool, offset: u64, len: u64) -> bool {
        out.clear();
        // One allocation at most, whatever the count (at most a queue's and a table's worth).
        if out.try_reserve(self.buffers.len()).is_err() {
            return false;
        }
        // Within the capacity just reserved: one segment per buffer at most.
        self.each_segment(writable, offset, len, |s| {
            out.push(s);
            true
        })
    }

    /// As `segments_into`, in a list of its own (for tests: a device keeps its list).
    #[cfg(test)]
    pub(crate) fn segments(&self, writable: bool, offset: u64, len: u64) -> Option<Vec<Segment>> {
        let mut out = Vec::new();
        self.segments_into(&mut out, writable, offset, len).then_some(out)
    }

    /// Calls `f` with each piece of guest memory holding bytes [offset, offset+len) of the
    /// readable (or writable) part, in order, until it returns false; whether that part is
    /// that long, in RAM, and `f` took all of it. Allocates nothing.
    fn each_segment(&self, writable: bool, offset: u64, len: u64, mut f: impl FnMut(Segment) -> bool) -> bool {
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
                return false;
            }
            let take = (blen - skip).min(left);
            // take <= b.len (a u32), so the cast is exact; skip < blen so the sum stays in the buffer.
            let Some(addr) = b.addr.checked_add(skip) else { return false };
            if !f(Segment { addr, len: take as u32 }) {
                return false;
            }
            left -= take;
            skip = 0;
        }
        left == 0
    }

    /// Copies readable bytes from `offset` into `buf`; false if not all were available in RAM.
    pub fn read_bytes(&self, mem: &dyn GuestMemory, offset: u64, buf: &mut [u8]) -> bool {
        let mut at = 0usize;
        self.each_segment(false, offset, buf.len() as u64, |s| {
            let end = at + s.len as usize;
            let Some(dst) = buf.get_mut(at..end) else { return false };
            at = end;
            mem.read(s.addr, dst).is_ok()
        })
    }

    /// Copies `data` into the writable part from `offset`; false if it did not all fit in RAM.
    pub fn write_bytes(&self, mem: &dyn GuestMemory, offset: u64, data: &[u8]) -> bool {
        let mut at = 0usize;
        self.each_segment(true, offset, data.len() as u64, |s| {
            let end = at + s.len as usize;
            let Some(src) = data.get(at..end) else { return false };
            at = end;
            mem.write(s.addr, src).is_ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::memory::VecMemory;
    use alloc::vec::Vec;

    const BASE: u64 = 0x4000_0000;
    const TABLE: u64 = BASE + 0x1000;

    fn put(mem: &VecMemory, table: u64, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&addr.to_le_bytes());
        raw[8..12].copy_from_slice(&len.to_le_bytes());
        raw[12..14].copy_from_slice(&flags.to_le_bytes());
        raw[14..].copy_from_slice(&next.to_le_bytes());
        mem.write(table + u64::from(index) * 16, &raw).unwrap();
    }

    /// An indirect table of `n` entries at `BASE + 0x8000`, walked in the order `order`
    /// (entry `order[i]` links to `order[i + 1]`; the walk starts at entry 0), each entry's
    /// buffer 512 bytes at an address that names it; the chain's head descriptor points at it.
    fn chain_through(order: &[u16]) -> (VecMemory, Vec<u64>) {
        let mem = VecMemory::new(BASE, 0x40000);
        let indirect = BASE + 0x8000;
        for (i, &e) in order.iter().enumerate() {
            let next = order.get(i + 1).copied();
            let flags = VIRTQ_DESC_F_WRITE | if next.is_some() { VIRTQ_DESC_F_NEXT } else { 0 };
            put(&mem, indirect, e, BASE + 0x10000 + u64::from(e) * 512, 512, flags, next.unwrap_or(0));
        }
        put(&mem, TABLE, 0, indirect, order.len() as u32 * 16, VIRTQ_DESC_F_INDIRECT, 0);
        (mem, order.iter().map(|&e| BASE + 0x10000 + u64::from(e) * 512).collect())
    }

    const RULES: ChainRules = ChainRules { queue: 0, size: 8, max_indirect: 256, indirect: true };

    #[test]
    fn an_indirect_table_read_in_batches_gives_its_entries_in_link_order() {
        // In order, a whole number of batches and one more entry; and links that jump back
        // and forth across batches.
        let in_order: Vec<u16> = (0..256).collect();
        let mut jumping: Vec<u16> = (0..40).collect();
        jumping[1..].reverse();
        jumping.swap(5, 30);
        for order in [in_order, (0..17).collect(), jumping, alloc::vec![0]] {
            let (mem, want) = chain_through(&order);
            let chain = read_chain(&mem, TABLE, 0, RULES).unwrap();
            let got: Vec<u64> = chain.buffers().iter().map(|b| b.addr).collect();
            assert_eq!(got, want, "{} entries", order.len());
            assert!(chain.buffers().iter().all(|b| b.writable && b.in_ram && b.len == 512));
        }
    }

    #[test]
    fn an_indirect_table_whose_links_loop_across_batches_is_a_loop() {
        let (mem, _) = chain_through(&(0..40).collect::<Vec<_>>());
        // Entry 39 links back to entry 3, in another batch.
        put(&mem, BASE + 0x8000, 39, BASE + 0x10000, 512, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 3);
        assert!(matches!(read_chain(&mem, TABLE, 0, RULES), Err(DeviceIncident::DescriptorLoop { .. })));
    }

    #[test]
    fn segments_and_bytes_of_a_chain_allocate_once_and_stop_at_ram() {
        let mem = VecMemory::new(BASE, 0x40000);
        let chain = Chain::new(
            0,
            alloc::vec![
                Buffer { addr: BASE, len: 16, writable: false, in_ram: true, descriptor: 0 },
                Buffer { addr: BASE + 0x100, len: 8, writable: false, in_ram: true, descriptor: 1 },
                Buffer { addr: BASE + 0x200, len: 4, writable: true, in_ram: false, descriptor: 2 },
            ],
        );
        mem.write(BASE + 12, &[1, 2, 3, 4]).unwrap();
        mem.write(BASE + 0x100, &[5, 6]).unwrap();
        let mut b = [0u8; 6];
        assert!(chain.read_bytes(&mem, 12, &mut b));
        assert_eq!(b, [1, 2, 3, 4, 5, 6]);
        assert!(!chain.read_bytes(&mem, 20, &mut b), "past the readable part");
        assert_eq!(
            chain.segments(false, 8, 12),
            Some(alloc::vec![Segment { addr: BASE + 8, len: 8 }, Segment { addr: BASE + 0x100, len: 4 }])
        );
        assert_eq!(chain.segments(true, 0, 1), None, "a buffer outside RAM");
        assert!(!chain.write_bytes(&mem, 0, &[1]));
        assert_eq!((chain.readable_len(), chain.writable_len()), (24, 4));
        assert_eq!(chain.outside_ram().map(|b| b.descriptor), Some(2));
        assert_eq!(chain.last_writable_byte().map_err(|b| b.map(|b| b.descriptor)), Err(Some(2)));
    }

    fn buffer(descriptor: u16, len: u32, writable: bool, in_ram: bool) -> Buffer {
        Buffer { addr: BASE + u64::from(descriptor) * 0x1000, len, writable, in_ram, descriptor }
    }

    #[test]
    fn the_status_byte_is_the_last_byte_of_the_last_non_empty_writable_buffer() {
        let chain_of = |buffers: &[Buffer]| Chain::new(0, buffers.to_vec());
        let status = |buffers: &[Buffer]| chain_of(buffers).last_writable_byte().map_err(|b| b.map(|b| b.descriptor));
        assert_eq!(status(&[]), Err(None), "no buffer");
        assert_eq!(status(&[buffer(0, 16, false, true)]), Err(None), "no writable part");
        assert_eq!(status(&[buffer(0, 16, false, true), buffer(1, 0, true, true)]), Err(None), "an empty one");
        let data = [buffer(0, 16, false, true), buffer(1, 512, true, true), buffer(2, 1, true, true)];
        assert_eq!(status(&data), Ok(BASE + 0x2000));
        // Empty writable buffers after it, and one after the readable part, change nothing.
        let trailing =
            [buffer(0, 16, false, true), buffer(1, 0, true, true), buffer(2, 8, true, true), buffer(3, 0, true, true)];
        assert_eq!(status(&trailing), Ok(BASE + 0x2000 + 7));
        // Outside RAM: the buffer that holds it, not an empty one after it.
        let outside = [buffer(0, 16, false, true), buffer(1, 4, true, false), buffer(2, 0, true, true)];
        assert_eq!(status(&outside), Err(Some(1)));
        // A buffer before it outside RAM is not the status byte's concern.
        let earlier = [buffer(0, 16, false, false), buffer(1, 1, true, true)];
        assert_eq!(status(&earlier), Ok(BASE + 0x1000));
    }

    proptest::proptest! {
        /// What the walk counts is what a pass over the buffers finds.
        #[test]
        fn the_counted_lengths_and_first_buffer_outside_ram_are_those_of_the_buffers(
            parts in proptest::collection::vec((0u32..=u32::MAX, proptest::bool::ANY), 0..40),
            readable in 0usize..40,
        ) {
            let buffers: Vec<Buffer> = parts
                .iter()
                .enumerate()
                .map(|(i, &(len, in_ram))| buffer(i as u16, len, i >= readable, in_ram))
                .collect();
            let chain = Chain::new(0, buffers.clone());
            let sum = |writable: bool| buffers.iter().filter(|b| b.writable == writable).map(|b| u64::from(b.len)).sum::<u64>();
            proptest::prop_assert_eq!(chain.readable_len(), sum(false));
            proptest::prop_assert_eq!(chain.writable_len(), sum(true));
            proptest::prop_assert_eq!(chain.outside_ram(), buffers.iter().find(|b| !b.in_ram));
            let want = if sum(true) == 0 { None } else { chain.segments(true, sum(true) - 1, 1).map(|s| s[0].addr) };
            if let Some(addr) = want {
                proptest::prop_assert_eq!(chain.last_writable_byte(), Ok(addr));
            } else {
                proptest::prop_assert!(chain.last_writable_byte().is_err());
            }
        }
    }
}
