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
/// per list register.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetiredLines {
    physical: [u32; MAX_LIST_REGISTERS],
    len: usize,
}

impl RetiredLines {
    pub(crate) fn push(&mut self, physical: IntId) {
        if let Some(slot) = self.physical.get_mut(self.len) {
            *slot = physical.0;
            self.len += 1;
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = IntId> + '_ {
        self.physical[..self.len].iter().map(|&p| IntId(p))
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
