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

/// One buffer of a chain as the driver described it, as a device names it in an incident
/// (a buffer outside RAM); `in_ram` says whether it passed `check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub addr: u64,
    pub len: u32,
    pub writable: bool,
    pub in_ram: bool,
    /// Index in the descriptor table (or in the indirect table), for incident messages.
    pub descriptor: u16,
}

/// The buffers of a chain as the walk reads them: only their memory, one segment each
/// (so that a device hands a backend a run of whole buffers as the chain holds them,
/// `Chain::whole_buffers`); the rest is where the chain's part changes and its buffers
/// outside RAM, which are rare.
#[derive(Default)]
struct Buffers {
    segments: Vec<Segment>,
    /// Index of the first writable buffer.
    first_writable: Option<usize>,
    /// The first buffer outside the VM's RAM, and the last non-empty one, with their indices.
    first_outside: Option<(usize, Buffer)>,
    last_outside: Option<(usize, Buffer)>,
}

/// A whole chain: device-readable buffers first, then device-writable ones (2.7.4.2). Its
/// two parts' lengths, whether a buffer is empty and its longest buffer are counted once,
/// when it is made (`Chain::new`), so a device asks for them without another pass over a
/// chain of up to `size + max_indirect` buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub head: u16,
    /// Each buffer's memory, in chain order.
    segments: Vec<Segment>,
    readable_len: u64,
    writable_len: u64,
    /// Index of the first writable buffer (the number of buffers if none is).
    first_writable: usize,
    /// The first buffer outside the VM's RAM, and the last non-empty one, with their
    /// indices: every buffer before the first is in RAM.
    first_outside: Option<(usize, Buffer)>,
    last_outside: Option<(usize, Buffer)>,
    /// A buffer of length 0.
    has_empty: bool,
    /// The longest buffer's length.
    longest: u32,
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

/// Pushes one data buffer, enforcing readable-before-writable (2.7.4.2). Inlined into both
/// walks: called, it cost a frame a buffer (traced: about 42 instructions a buffer).
#[inline(always)]
fn push(
    mem: &dyn GuestMemory,
    buffers: &mut Buffers,
    d: &Descriptor,
    index: u16,
    queue: u16,
) -> Result<(), DeviceIncident> {
    let writable = d.flags & VIRTQ_DESC_F_WRITE != 0;
    let at = buffers.segments.len();
    if writable {
        buffers.first_writable.get_or_insert(at);
    } else if buffers.first_writable.is_some() {
        return Err(DeviceIncident::ReadableAfterWritable { queue, descriptor: index });
    }
    if mem.check(d.addr, u64::from(d.len)).is_err() {
        buffers.note_outside(at, Buffer { addr: d.addr, len: d.len, writable, in_ram: false, descriptor: index });
    }
    // A chain holds at most a queue's (or an indirect table's) worth of buffers; the heap
    // can still be exhausted, which must not panic the hypervisor.
    buffers.segments.try_reserve(1).map_err(|_| DeviceIncident::OutOfMemory { queue })?;
    buffers.segments.push(Segment { addr: d.addr, len: d.len });
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
    let mut buffers = Buffers::default();
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
    buffers: &mut Buffers,
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
    buffers.segments.try_reserve(usize::from(entries)).map_err(|_| DeviceIncident::OutOfMemory { queue })?;
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

impl Buffers {
    /// Buffer `b`, at index `at`, is outside the VM's RAM.
    fn note_outside(&mut self, at: usize, b: Buffer) {
        self.first_outside.get_or_insert((at, b));
        if b.len != 0 {
            self.last_outside = Some((at, b));
        }
    }
}

impl Chain {
    /// The chain of `buffers`, counted in one pass after the walk: counted as the walk
    /// pushed each buffer, the walk's loop kept the counts in memory and cost more than
    /// the passes it saved.
    fn new(head: u16, buffers: Buffers) -> Chain {
        let Buffers { segments, first_writable, first_outside, last_outside } = buffers;
        let n = segments.len();
        let first_writable = first_writable.unwrap_or(n);
        let (mut readable_len, mut writable_len) = (0u64, 0u64);
        let (mut has_empty, mut longest) = (false, 0u32);
        for (i, s) in segments.iter().enumerate() {
            // At most `size + max_indirect` buffers of under 4 GiB each: the sums cannot wrap.
            if i < first_writable {
                readable_len += u64::from(s.len);
            } else {
                writable_len += u64::from(s.len);
            }
            has_empty |= s.len == 0;
            longest = longest.max(s.len);
        }
        Chain {
            head,
            segments,
            readable_len,
            writable_len,
            first_writable,
            first_outside,
            last_outside,
            has_empty,
            longest,
        }
    }

    /// The chain of `buffers` (readable ones first), for tests of the devices' use of it.
    #[cfg(test)]
    pub(crate) fn of_buffers(head: u16, buffers: &[Buffer]) -> Chain {
        let mut walked = Buffers::default();
        for (i, b) in buffers.iter().enumerate() {
            if b.writable {
                walked.first_writable.get_or_insert(i);
            }
            if !b.in_ram {
                walked.note_outside(i, *b);
            }
            walked.segments.push(Segment { addr: b.addr, len: b.len });
        }
        Chain::new(head, walked)
    }

    /// Every buffer's memory, in chain order (for tests: a device asks for lengths and
    /// segments).
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether buffer `i` is device-writable (for tests).
    #[cfg(test)]
    pub(crate) fn is_writable(&self, i: usize) -> bool {
        i >= self.first_writable
    }

    pub fn readable_len(&self) -> u64 {
        self.readable_len
    }

    pub fn writable_len(&self) -> u64 {
        self.writable_len
    }

    /// The longest buffer's length: a device whose limit it meets need not look at each.
    pub fn longest(&self) -> u32 {
        self.longest
    }

    /// The first buffer outside the VM's RAM, if any.
    pub fn outside_ram(&self) -> Option<Buffer> {
        self.first_outside.map(|(_, b)| b)
    }

    /// The guest address of the writable part's last byte (a block request's status byte,
    /// virtio 1.2 5.2.6), found from the chain's end: `Err(None)` when the writable part
    /// is empty, `Err(Some(buffer))` when the buffer holding it is outside RAM.
    pub fn last_writable_byte(&self) -> Result<u64, Option<Buffer>> {
        // Writable buffers come last (2.7.4.2), so the last non-empty buffer holds the
        // writable part's last byte whenever that part is not empty.
        if self.writable_len == 0 {
            return Err(None);
        }
        let i = self.segments.iter().rposition(|s| s.len != 0).filter(|&i| i >= self.first_writable).ok_or(None)?;
        // The last non-empty buffer outside RAM, if it is this one.
        if let Some((_, b)) = self.last_outside.filter(|&(at, _)| at == i) {
            return Err(Some(b));
        }
        // In RAM, so its end does not wrap.
        let s = self.segments[i];
        s.addr.checked_add(u64::from(s.len) - 1).ok_or(None)
    }

    /// The readable (or writable) part's buffers after its first `skip` bytes and before
    /// its last `trim` bytes, as the chain holds them, when `skip` is the part's first
    /// buffer whole (or 0), `trim` its last buffer whole (or 0), no buffer of the chain is
    /// empty and all are in RAM: a block request's data between its header and its status
    /// byte, handed to the backend without a copy. `None` otherwise (`segments_into`
    /// copies the bytes' segments).
    pub fn whole_buffers(&self, writable: bool, skip: u64, trim: u64) -> Option<&[Segment]> {
        if self.has_empty || self.first_outside.is_some() {
            return None;
        }
        let (mut from, mut to) = self.part(writable);
        if skip != 0 {
            (from < to && u64::from(self.segments[from].len) == skip).then_some(())?;
            from += 1;
        }
        if trim != 0 {
            (from < to && u64::from(self.segments[to - 1].len) == trim).then_some(())?;
            to -= 1;
        }
        self.segments.get(from..to)
    }

    /// The indices of the readable (or writable) part's buffers.
    fn part(&self, writable: bool) -> (usize, usize) {
        if writable {
            (self.first_writable, self.segments.len())
        } else {
            (0, self.first_writable)
        }
    }

    /// The guest memory holding bytes [offset, offset+len) of the readable (or writable) part,
    /// split at buffer boundaries, into `out` (cleared first, and kept by the caller so that
    /// its capacity serves the next chain); `false` if that part is shorter, a buffer from
    /// the first one outside RAM on is among them, or the heap has no room for the list.
    pub fn segments_into(&self, out: &mut Vec<Segment>, writable: bool, offset: u64, len: u64) -> bool {
        out.clear();
        // One allocation at most, whatever the count (at most a queue's and a table's worth).
        if out.try_reserve(self.segments.len()).is_err() {
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
    /// that long, before the first buffer outside RAM, and `f` took all of it. Allocates
    /// nothing.
    fn each_segment(&self, writable: bool, offset: u64, len: u64, mut f: impl FnMut(Segment) -> bool) -> bool {
        let mut skip = offset;
        let mut left = len;
        let (from, to) = self.part(writable);
        // Buffers from the first outside RAM on are not looked at one by one: any of them
        // touched fails the call, as each device refuses such a chain anyway.
        let in_ram = self.first_outside.map_or(to, |(at, _)| at);
        for (i, s) in self.segments.iter().enumerate().take(to).skip(from) {
            if left == 0 {
                break;
            }
            let blen = u64::from(s.len);
            if skip >= blen {
                skip -= blen;
                continue;
            }
            if i >= in_ram {
                return false;
            }
            let take = (blen - skip).min(left);
            // take <= s.len (a u32), so the cast is exact; skip < blen so the sum stays in the buffer.
            let Some(addr) = s.addr.checked_add(skip) else { return false };
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
            assert!(chain.buffers().iter().enumerate().all(|(i, b)| chain.is_writable(i) && b.len == 512));
            assert_eq!(chain.outside_ram(), None);
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
        let chain = Chain::of_buffers(
            0,
            &[
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
        let chain_of = |buffers: &[Buffer]| Chain::of_buffers(0, buffers);
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

    #[test]
    fn a_request_s_data_between_buffers_of_its_own_is_the_chain_s_buffers_as_they_are() {
        // Linux's shape: a 16-byte header, the data, a 1-byte status.
        let header = buffer(0, 16, false, true);
        let status = buffer(9, 1, true, true);
        let out = [header, buffer(1, 4096, false, true), buffer(2, 512, false, true), status];
        let chain = Chain::of_buffers(0, &out);
        let data = [Segment { addr: BASE + 0x1000, len: 4096 }, Segment { addr: BASE + 0x2000, len: 512 }];
        assert_eq!(chain.whole_buffers(false, 16, 0), Some(&data[..]));
        assert_eq!(chain.whole_buffers(true, 0, 1), Some(&[][..]), "a write's writable part is its status alone");
        let into = [header, buffer(1, 4096, true, true), buffer(2, 512, true, true), status];
        assert_eq!(Chain::of_buffers(0, &into).whole_buffers(true, 0, 1), Some(&data[..]));
        // Not whole buffers: the header and the data in one, a status byte at a buffer's end.
        let joined = [buffer(0, 16 + 512, false, true), status];
        assert_eq!(Chain::of_buffers(0, &joined).whole_buffers(false, 16, 0), None);
        let tail = [header, buffer(1, 513, true, true)];
        assert_eq!(Chain::of_buffers(0, &tail).whole_buffers(true, 0, 1), None);
        // A header asked of an empty part is not the other part's first buffer.
        let no_readable = [buffer(0, 16, true, true), status];
        assert_eq!(Chain::of_buffers(0, &no_readable).whole_buffers(false, 16, 0), None);
        // An empty buffer anywhere, or one outside RAM: the segments are made one by one.
        let empty = [header, buffer(1, 0, false, true), buffer(2, 512, false, true), status];
        assert_eq!(Chain::of_buffers(0, &empty).whole_buffers(false, 16, 0), None);
        let outside = [header, buffer(1, 512, false, false), status];
        assert_eq!(Chain::of_buffers(0, &outside).whole_buffers(false, 16, 0), None);
    }

    proptest::proptest! {
        /// Whenever the chain's own buffers are handed as a part's bytes, they are exactly
        /// the segments those bytes are made of, one by one.
        #[test]
        fn whole_buffers_are_the_segments_of_the_same_bytes(
            lens in proptest::collection::vec(proptest::sample::select(alloc::vec![0u32, 1, 16, 512, 4096]), 0..8),
            readable in 0usize..8,
            outside in proptest::option::of(0usize..8),
            writable in proptest::bool::ANY,
            skip_first in proptest::bool::ANY,
            trim_last in proptest::bool::ANY,
        ) {
            let buffers: Vec<Buffer> = lens
                .iter()
                .enumerate()
                .map(|(i, &len)| buffer(i as u16, len, i >= readable, outside != Some(i)))
                .collect();
            let chain = Chain::of_buffers(0, &buffers);
            let part: Vec<&Buffer> = buffers.iter().filter(|b| b.writable == writable).collect();
            let skip = if skip_first { part.first().map_or(16, |b| u64::from(b.len)) } else { 0 };
            let trim = if trim_last { part.last().map_or(1, |b| u64::from(b.len)) } else { 0 };
            let total = part.iter().map(|b| u64::from(b.len)).sum::<u64>();
            if let Some(whole) = chain.whole_buffers(writable, skip, trim) {
                let len = total.checked_sub(skip + trim);
                proptest::prop_assert!(len.is_some(), "skip {} and trim {} of a part of {}", skip, trim, total);
                let one_by_one = chain.segments(writable, skip, len.unwrap_or(0));
                proptest::prop_assert_eq!(Some(whole.to_vec()), one_by_one);
            }
            let plain = buffers.iter().all(|b| b.len != 0 && b.in_ram) && part.len() >= usize::from(skip_first) + usize::from(trim_last);
            proptest::prop_assert_eq!(chain.whole_buffers(writable, skip, trim).is_some(), plain, "whenever it can");
        }

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
            let chain = Chain::of_buffers(0, &buffers);
            let sum = |writable: bool| buffers.iter().filter(|b| b.writable == writable).map(|b| u64::from(b.len)).sum::<u64>();
            proptest::prop_assert_eq!(chain.readable_len(), sum(false));
            proptest::prop_assert_eq!(chain.writable_len(), sum(true));
            proptest::prop_assert_eq!(chain.outside_ram(), buffers.iter().find(|b| !b.in_ram).copied());
            // The status byte: the last byte of the last non-empty buffer, if it is writable;
            // refused with that buffer when it is outside RAM.
            let want = match buffers.iter().rev().find(|b| b.len != 0).filter(|b| b.writable) {
                None => Err(None),
                Some(b) if !b.in_ram => Err(Some(*b)),
                Some(b) => Ok(b.addr + u64::from(b.len) - 1),
            };
            proptest::prop_assert_eq!(chain.last_writable_byte(), want);
            if chain.outside_ram().is_none() && sum(true) != 0 {
                let by_segments = chain.segments(true, sum(true) - 1, 1).map(|s| s[0].addr);
                proptest::prop_assert_eq!(chain.last_writable_byte().ok(), by_segments);
            }
        }
    }
}
