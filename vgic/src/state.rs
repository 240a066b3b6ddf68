//! One interrupt's state as the distributor keeps it (IHI 0069H 4.1, "Interrupt lifecycle";
//! IHI 0048B 1.4.1, "Interrupt states"), packed in four bytes so a VM with 64 vCPUs and 988
//! SPIs stays small.
//!
//! Pending is split in three so that no edge is lost while the interrupt sits in a list
//! register of a running vCPU: `latch` holds edges (and ISPENDR writes) that are not in a
//! list register yet, `lr_pending` says a list register holds the pending state, and `line`
//! is the input of a level-sensitive interrupt. Placing a pending interrupt in a list
//! register moves `latch` into `lr_pending` (a level interrupt's line stays its own);
//! taking the list register back on exit keeps `lr_pending` only while the register still
//! shows it pending, so an edge or an ISPENDR write that arrived meanwhile stays in `latch`.
//!
//! A hardware-mapped interrupt keeps its trigger's semantics: a level-sensitive one (the
//! virtual timer, a level passthrough SPI) is pending while its `line` is high, and the
//! line is the physical input as the hypervisor last saw it (`line`: high when the
//! physical interrupt fired, low when the guest deactivated it or when the input was
//! sampled low before the guest took it). `refired` says that a hardware-mapped SPI's
//! physical interrupt fired again, on another CPU, while a list register still held the
//! last one: the guest's deactivation of that one let it fire, and the take-back that folds
//! the deactivation keeps the line high instead of dropping it.

const ENABLED: u8 = 1 << 0;
const LATCH: u8 = 1 << 1;
const LINE: u8 = 1 << 2;
const ACTIVE: u8 = 1 << 3;
const GROUP1: u8 = 1 << 4;
const EDGE: u8 = 1 << 5;
const LR_PENDING: u8 = 1 << 6;
const REFIRED: u8 = 1 << 7;

/// Priority bits implemented: 5, as in GICH_LR<n>.Priority and in typical ICH_VTR_EL2.PRIbits;
/// the low three bits of IPRIORITYR are RAZ/WI (IHI 0069H 12.9, GICD_IPRIORITYR<n>; IHI 0048B 4.3.11).
pub(crate) const PRIORITY_MASK: u8 = 0xf8;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct IrqState {
    flags: u8,
    pub(crate) priority: u8,
    /// Physical INTID of a hardware-mapped interrupt; 0 = none (SGIs cannot be mapped).
    hw: u16,
}

macro_rules! flag {
    ($get:ident, $set:ident, $bit:ident) => {
        pub(crate) const fn $get(self) -> bool {
            self.flags & $bit != 0
        }
        pub(crate) fn $set(&mut self, on: bool) {
            if on {
                self.flags |= $bit
            } else {
                self.flags &= !$bit
            }
        }
    };
}

impl IrqState {
    flag!(enabled, set_enabled, ENABLED);
    flag!(latch, set_latch, LATCH);
    flag!(line, set_line, LINE);
    flag!(active, set_active, ACTIVE);
    flag!(group1, set_group1, GROUP1);
    flag!(edge, set_edge, EDGE);
    flag!(lr_pending, set_lr_pending, LR_PENDING);
    flag!(refired, set_refired, REFIRED);

    /// Neither pending in any form nor active: nothing a list register could show.
    pub(crate) const fn quiet(self) -> bool {
        self.flags & (LATCH | LINE | ACTIVE | LR_PENDING) == 0
    }

    pub(crate) const fn hw(self) -> Option<u32> {
        if self.hw == 0 {
            None
        } else {
            Some(self.hw as u32)
        }
    }
    pub(crate) fn set_hw(&mut self, physical: Option<u32>) {
        self.hw = physical.map_or(0, |p| p as u16);
    }

    /// What GICD_ISPENDR reads (for all but GICv2 SGIs, which are pending per source).
    pub(crate) const fn pending_view(self) -> bool {
        self.flags & (LATCH | LR_PENDING) != 0 || self.flags & (EDGE | LINE) == LINE
    }

    /// Whether the interrupt should be shown pending in a list register, given that its
    /// pending state may be forwarded at all. A level interrupt that is active is sampled
    /// again when it is deactivated (IHI 0069H 4.1, "Interrupt lifecycle"), not before.
    /// (One test of the flags for each term: an edge's line and activity do not count.)
    pub(crate) const fn wants_pending(self) -> bool {
        self.flags & (LATCH | LR_PENDING) != 0 || self.flags & (EDGE | LINE | ACTIVE) == LINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pending tests are written as masks of the flags; each says what the lifecycle
    /// says (IHI 0069H 4.1) in every combination of them.
    #[test]
    fn the_pending_tests_follow_the_lifecycle_in_every_state() {
        for flags in 0..=u8::MAX {
            let s = IrqState { flags, ..IrqState::default() };
            let latched = s.latch() || s.lr_pending();
            let (level_pending, level_wanted) = (s.line(), s.line() && !s.active());
            let view = latched || (!s.edge() && level_pending);
            let wanted = latched || (!s.edge() && level_wanted);
            assert_eq!(s.pending_view(), view, "pending_view of {flags:#010b}");
            assert_eq!(s.wants_pending(), wanted, "wants_pending of {flags:#010b}");
        }
    }
}
