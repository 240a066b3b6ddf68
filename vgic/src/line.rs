//! The inputs of hardware-mapped level-sensitive interrupts (the virtual timer, a level
//! passthrough SPI), which only the hypervisor can see: it samples them for the vGIC
//! (`LineSampler`), and deactivates the physical interrupts of those the vGIC retired
//! because their input went low before the guest took them (`RetiredLines`).

use crate::{IntId, MAX_LIST_REGISTERS};

/// Samples the input of a hardware-mapped level-sensitive interrupt now.
pub trait LineSampler {
    /// Whether the input of virtual interrupt `vintid`, mapped to physical `physical`, is
    /// asserted (the timer's condition met, the device's line high).
    fn is_asserted(&mut self, vintid: IntId, physical: IntId) -> bool;
}

/// A sampler for callers that do not sample: every input stays as the vGIC last knew it.
pub struct AssumeAsserted;

impl LineSampler for AssumeAsserted {
    fn is_asserted(&mut self, _: IntId, _: IntId) -> bool {
        true
    }
}

/// Physical interrupts the hypervisor must deactivate: their virtual interrupt was
/// retired before the guest took it, so no guest deactivation will reach them. At most one
/// per list register. A physical INTID of a list register has 13 bits (ICH_LR<n>_EL2.pINTID;
/// GICH_LR<n>'s has 10), so 16 bits each: made ready on every exit that takes list registers
/// back, 32-bit entries (72 bytes) cost a `memset` call of about 45 instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetiredLines {
    physical: [u16; MAX_LIST_REGISTERS],
    len: u8,
}

impl RetiredLines {
    pub(crate) fn push(&mut self, physical: IntId) {
        if let (Some(slot), Ok(p)) = (self.physical.get_mut(usize::from(self.len)), u16::try_from(physical.0)) {
            *slot = p;
            self.len += 1;
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = IntId> + '_ {
        self.physical[..usize::from(self.len)].iter().map(|&p| IntId(u32::from(p)))
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_lines_keep_every_physical_intid_a_list_register_can_name() {
        let mut r = RetiredLines::default();
        assert!(r.is_empty());
        for p in [27, 1019, 8191] {
            r.push(IntId(p));
        }
        assert_eq!(r.iter().collect::<Vec<_>>(), [IntId(27), IntId(1019), IntId(8191)]);
        for _ in 0..20 {
            r.push(IntId(30));
        }
        assert_eq!(r.iter().count(), MAX_LIST_REGISTERS, "one per list register at most");
    }
}
