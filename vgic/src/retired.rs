//! Hardware-mapped SPIs (a passthrough device's) whose physical interrupt the hypervisor
//! must deactivate itself: the guest discarded their virtual pending or active state
//! otherwise than through the hardware-mapped list register that would have deactivated
//! the physical one with it (IHI 0069H 12.4.6, ICH_LR<n>_EL2.HW; IHI 0048B 5.3.2,
//! GICH_LRn.HW: a list register with HW = 1 forwards the guest's deactivation). The
//! hypervisor holds such a physical interrupt active from its acknowledgement until that
//! deactivation, so one the guest cleared through GICD_ICPENDR or GICD_ICACTIVER, or one a
//! list register still showed pending when the guest cleared it, would stay active at the
//! board's GIC and never fire again (docs/vgic.md, "Hardware-mapped interrupts the guest
//! discards").

use alloc::boxed::Box;

use crate::mask::set_bits;

/// A bit per SPI slot of the VM (INTID 32 + slot), and whether any is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RetiredSpis {
    bits: Box<[u64]>,
    any: bool,
}

impl RetiredSpis {
    pub(crate) fn new(bits: Box<[u64]>) -> RetiredSpis {
        RetiredSpis { bits, any: false }
    }
    pub(crate) fn insert(&mut self, slot: usize) {
        if let Some(word) = self.bits.get_mut(slot / 64) {
            *word |= 1 << (slot % 64);
            self.any = true;
        }
    }
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        !self.any
    }
    /// The slots set, emptied.
    pub(crate) fn take(&mut self) -> impl Iterator<Item = usize> + '_ {
        self.any = false;
        self.bits.iter_mut().enumerate().flat_map(|(w, word)| set_bits(core::mem::take(word)).map(move |b| w * 64 + b))
    }
}
