//! The MSI-X function state (PCI Local Bus 3.0, 6.8.2): the vector table, the Pending Bit
//! Array, the Function Mask and MSI-X Enable bits of Message Control, and the rule that turns
//! a signal on a vector into a message now, a pending bit, or nothing.

use super::MAX_VECTORS;

/// One MSI-X message: a 32-bit memory write of `data` to `address` (PCI Local Bus 3.0,
/// 6.8.2.4-6.8.2.8). The hypervisor delivers it (into the virtual GIC's ITS or GICv2m frame).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pub address: u64,
    pub data: u32,
}

/// The messages one `VirtioPci::take_messages` hands over: at most one a vector (an MSI is
/// an edge; two signals of a vector before the caller looked are one interrupt, as two
/// signals while masked are one pending bit), so a fixed array holds them all.
#[derive(Clone, Copy, Debug, Default)]
pub struct Messages {
    messages: [Message; MAX_VECTORS],
    vectors: [u16; MAX_VECTORS],
    len: usize,
}

impl Messages {
    pub fn iter(&self) -> impl Iterator<Item = &Message> {
        self.messages.iter().take(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds `vector`'s message unless that vector already has one here.
    pub(super) fn push(&mut self, vector: u16, message: Message) {
        if self.vectors.iter().take(self.len).any(|&v| v == vector) {
            return;
        }
        if let (Some(m), Some(v)) = (self.messages.get_mut(self.len), self.vectors.get_mut(self.len)) {
            *m = message;
            *v = vector;
            self.len += 1;
        }
    }
}

/// Vector Control bit 0 (PCI Local Bus 3.0, 6.8.2.9).
const VECTOR_MASKED: u32 = 1;
/// Message Control (PCI Local Bus 3.0, 6.8.2.3).
pub(super) const FUNCTION_MASK: u16 = 1 << 14;
pub(super) const MSIX_ENABLE: u16 = 1 << 15;

#[derive(Clone, Copy, Debug)]
struct Entry {
    address: u64,
    data: u32,
    masked: bool,
}

/// "Each entry's Mask bit is set after reset" (PCI Local Bus 3.0, 6.8.2.9).
impl Default for Entry {
    fn default() -> Self {
        Entry { address: 0, data: 0, masked: true }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Msix {
    entries: [Entry; MAX_VECTORS],
    /// Table Size: the vectors that exist (`entries` beyond it are never used).
    size: u16,
    enabled: bool,
    function_mask: bool,
    /// The Pending Bit Array: bit n, vector n (MAX_VECTORS fits in one qword).
    pending: u64,
}

impl Msix {
    pub(super) fn new(size: u16) -> Self {
        Msix {
            entries: [Entry::default(); MAX_VECTORS],
            size: size.clamp(1, MAX_VECTORS as u16),
            enabled: false,
            function_mask: false,
            pending: 0,
        }
    }

    pub(super) fn size(&self) -> u16 {
        self.size
    }

    /// Message Control: Table Size - 1 in bits 10:0 (read-only), Function Mask, MSI-X Enable.
    pub(super) fn message_control(&self) -> u16 {
        (self.size - 1)
            | if self.function_mask { FUNCTION_MASK } else { 0 }
            | if self.enabled { MSIX_ENABLE } else { 0 }
    }

    /// Only Function Mask and MSI-X Enable are writable (6.8.2.3).
    pub(super) fn write_message_control(&mut self, value: u16) {
        self.function_mask = value & FUNCTION_MASK != 0;
        self.enabled = value & MSIX_ENABLE != 0;
    }

    /// Dword `index` of the table (four a vector: address low, address high, data, vector
    /// control), `None` beyond the table.
    pub(super) fn table_dword(&self, index: u64) -> Option<u32> {
        let e = self.entry(index)?;
        Some(match index % 4 {
            0 => e.address as u32,
            1 => (e.address >> 32) as u32,
            2 => e.data,
            _ => u32::from(e.masked),
        })
    }

    /// A write of table dword `index`; false beyond the table.
    pub(super) fn write_table_dword(&mut self, index: u64, value: u32) -> bool {
        let size = self.size;
        let Some(e) =
            usize::try_from(index / 4).ok().filter(|&v| v < usize::from(size)).and_then(|v| self.entries.get_mut(v))
        else {
            return false;
        };
        match index % 4 {
            // Message Address bits 1:0 are zero: a message is a dword write (6.8.2.6).
            0 => e.address = (e.address & !0xffff_ffff) | u64::from(value & !3),
            1 => e.address = (e.address & 0xffff_ffff) | (u64::from(value) << 32),
            2 => e.data = value,
            // Vector Control bits 31:1 are reserved and read as 0 (6.8.2.9).
            _ => e.masked = value & VECTOR_MASKED != 0,
        }
        true
    }

    fn entry(&self, index: u64) -> Option<&Entry> {
        usize::try_from(index / 4).ok().filter(|&v| v < usize::from(self.size)).and_then(|v| self.entries.get(v))
    }

    /// Dword `index` (0 or 1) of the Pending Bit Array.
    pub(super) fn pba_dword(&self, index: u64) -> u32 {
        match index {
            0 => self.pending as u32,
            1 => (self.pending >> 32) as u32,
            _ => 0,
        }
    }

    /// The device signals `vector`. With MSI-X disabled there is nothing to send (the
    /// function would use INTx, which this device does not offer; the event stays in the
    /// virtio ISR status, virtio 1.2 4.1.5.3). A vector that does not exist (NO_VECTOR among
    /// them) sends nothing (4.1.5.3.1, 4.1.5.4.1). A masked vector — its Mask bit or the
    /// Function Mask — sets its pending bit instead (6.8.2.9 and 6.8.2.3), as does a function
    /// whose Bus Master Enable is clear: an MSI is a memory write the function may not make.
    pub(super) fn signal(&mut self, vector: u16, bus_master: bool) -> Option<Message> {
        if !self.enabled || vector >= self.size {
            return None;
        }
        let e = self.entries.get(usize::from(vector))?;
        if e.masked || self.function_mask || !bus_master {
            self.pending |= 1 << vector;
            return None;
        }
        Some(Message { address: e.address, data: e.data })
    }

    /// Sends what is pending on vectors no longer masked: "if a masked vector has its
    /// Pending bit set, and the associated underlying interrupt events are somehow
    /// satisfied ... [else] the function must send the message" once unmasked (6.8.2.9).
    /// The same holds when the Function Mask clears, MSI-X is enabled or the function may
    /// write memory again.
    pub(super) fn release(&mut self, bus_master: bool, out: &mut Messages) {
        if !self.enabled || self.function_mask || !bus_master || self.pending == 0 {
            return;
        }
        for (vector, e) in self.entries.iter().enumerate().take(usize::from(self.size)) {
            let bit = 1u64 << vector;
            if self.pending & bit != 0 && !e.masked {
                self.pending &= !bit;
                out.push(vector as u16, Message { address: e.address, data: e.data });
            }
        }
    }

    /// The virtio device was reset: its events are gone, so nothing stays pending for them.
    pub(super) fn clear_pending(&mut self) {
        self.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programmed(size: u16) -> Msix {
        let mut m = Msix::new(size);
        m.write_message_control(MSIX_ENABLE);
        for v in 0..u64::from(size) {
            m.write_table_dword(v * 4, 0x0800_0040 + 4 * v as u32);
            m.write_table_dword(v * 4 + 2, 100 + v as u32);
        }
        m
    }

    #[test]
    fn entries_reset_masked_and_a_masked_signal_is_pending_until_unmasked() {
        let mut m = programmed(2);
        assert_eq!(m.table_dword(3), Some(1), "masked after reset");
        assert_eq!(m.signal(1, true), None);
        assert_eq!(m.pba_dword(0), 0b10);
        m.write_table_dword(7, 0);
        let mut out = Messages::default();
        m.release(true, &mut out);
        assert_eq!(out.iter().copied().collect::<std::vec::Vec<_>>(), [Message { address: 0x0800_0044, data: 101 }]);
        assert_eq!(m.pba_dword(0), 0);
        assert_eq!(m.signal(1, true), Some(Message { address: 0x0800_0044, data: 101 }));
    }

    #[test]
    fn nothing_exists_beyond_the_table_size() {
        let mut m = programmed(2);
        assert_eq!(m.table_dword(8), None);
        assert!(!m.write_table_dword(8, 1));
        assert_eq!(m.signal(2, true), None);
        assert_eq!(m.signal(0xffff, true), None);
        assert_eq!(m.pba_dword(0), 0);
        assert_eq!(m.message_control() & 0x7ff, 1, "Table Size is encoded as N-1");
    }

    #[test]
    fn messages_hold_one_per_vector() {
        let mut out = Messages::default();
        out.push(1, Message { address: 1, data: 1 });
        out.push(1, Message { address: 2, data: 2 });
        out.push(0, Message { address: 3, data: 3 });
        assert_eq!(out.len(), 2);
        for v in 0..40 {
            out.push(v, Message::default());
        }
        assert_eq!(out.len(), MAX_VECTORS, "never more than the capacity");
    }
}
