//! Direct injection of a VM's LPIs through the board's GICv4.0 (docs/vgic.md, "Direct
//! injection of LPIs (GICv4.0)"): what the board's ITS must hold for the LPIs the guest's
//! own ITS translates, and the commands that bring it there.
//!
//! The guest's ITS stays the one the guest programs (`crate::its`); each of its LPIs with a
//! translation has an event of the hypervisor's on the board's ITS, mapped with VMAPTI to
//! the vPE of the vCPU the guest's collection names (IHI 0069H 5.3.22). Here is kept what
//! that mapping is (`Shown`: the vPE and the configuration byte the board was last given)
//! and what the guest changed since (`dirty`), so the board is brought to the guest's
//! state by the fewest commands, after the access that changed it and under the same lock
//! (`Distributor::sync_direct`). Nothing is pending in the vGIC for such an LPI: a device's
//! message and the guest's INT become a write of the board's event (`VlpiCommand::Raise`),
//! and the vPE's pending table holds it until the vCPU takes it.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::its::FIRST_LPI;
use crate::lpi::MAX_LPIS;
use crate::{Distributor, VgicError};

/// One step the board's ITS takes for a VM's LPI. `lpi` is the guest's INTID; the board's
/// event for it is the caller's (one per LPI of the VM).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VlpiCommand {
    /// The event is mapped to `vcpu`'s vPE with the guest's INTID (VMAPTI, IHI 0069H
    /// 5.3.22); it had no mapping.
    Map { lpi: u32, vcpu: usize },
    /// The event's mapping moves to `vcpu`'s vPE, its pending state with it (VMOVI,
    /// IHI 0069H 5.3.24).
    Move { lpi: u32, vcpu: usize },
    /// The event's mapping and pending state end (DISCARD, IHI 0069H 5.3.4).
    Discard { lpi: u32 },
    /// The LPI's byte of the VM's vLPI configuration table (GICR_VPROPBASER: priority [7:2],
    /// enable [0], IHI 0069H 5.1.1) is `config`; if the event is `mapped`, INV of it
    /// after, so the board reads it again (IHI 0069H 5.3.9). Before its mapping there is
    /// nothing to invalidate, and an INV of an unmapped event is a command error.
    Configure { lpi: u32, config: u8, mapped: bool },
    /// The event becomes pending: a device's message, or the guest's INT (a write of the
    /// board's GITS_TRANSLATER, or INT, IHI 0069H 5.3.10).
    Raise { lpi: u32 },
    /// The event's pending state ends (CLEAR, IHI 0069H 5.3.3).
    Clear { lpi: u32 },
}

/// What the board's ITS was last given for an LPI.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Shown {
    /// The vCPU whose vPE the event is mapped to; `NOT_MAPPED` if none.
    vcpu: u16,
    /// The configuration byte last written for it.
    config: u8,
}

const NOT_MAPPED: u16 = u16::MAX;
const WORDS: usize = MAX_LPIS.div_ceil(64);

/// A bit per LPI of the VM.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct LpiBits([u64; WORDS]);

impl LpiBits {
    fn set(&mut self, index: usize) {
        if let Some(w) = self.0.get_mut(index / 64) {
            *w |= 1 << (index % 64);
        }
    }
    fn clear(&mut self, index: usize) {
        if let Some(w) = self.0.get_mut(index / 64) {
            *w &= !(1 << (index % 64));
        }
    }
    /// Takes every set bit, in ascending order.
    fn take(&mut self) -> impl Iterator<Item = usize> {
        let words = core::mem::take(&mut self.0);
        words
            .into_iter()
            .enumerate()
            .flat_map(|(w, bits)| (0..64).filter(move |b| bits & (1 << b) != 0).map(move |b| w * 64 + b))
    }
}

/// A VM's LPIs as the board's ITS holds them, and what changed since it was told.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct DirectLpis {
    shown: Box<[Shown]>,
    /// LPIs whose route or configuration may differ from `shown`.
    dirty: LpiBits,
    /// LPIs made pending (a message, INT) since the last sync.
    raised: LpiBits,
    /// LPIs whose pending state ended (CLEAR, or an unmapping) since the last sync.
    cleared: LpiBits,
}

impl DirectLpis {
    fn new(lpis: usize) -> Result<DirectLpis, VgicError> {
        let mut shown = Vec::new();
        shown.try_reserve_exact(lpis).map_err(|_| VgicError::OutOfMemory)?;
        shown.resize(lpis, Shown { vcpu: NOT_MAPPED, config: 0 });
        Ok(DirectLpis {
            shown: shown.into_boxed_slice(),
            dirty: LpiBits::default(),
            raised: LpiBits::default(),
            cleared: LpiBits::default(),
        })
    }
}

fn index(lpi: u32) -> usize {
    lpi.wrapping_sub(FIRST_LPI) as usize
}

impl Distributor {
    /// From now on the VM's LPIs are injected by the board (a GICv4.0 with a vPE per vCPU):
    /// called once, after creation, before the guest runs. An error if the VM has no LPIs.
    pub fn inject_lpis_directly(&mut self) -> Result<(), VgicError> {
        if self.lpis == 0 {
            return Err(VgicError::NoLpis);
        }
        self.direct = Some(Box::new(DirectLpis::new(self.lpis)?));
        Ok(())
    }

    /// Whether the VM's LPIs are injected by the board.
    pub fn injects_lpis_directly(&self) -> bool {
        self.direct.is_some()
    }

    /// `lpi`'s translation or configuration may have changed.
    pub(crate) fn direct_changed(&mut self, lpi: u32) {
        if let Some(d) = self.direct.as_mut() {
            d.dirty.set(index(lpi));
        }
    }

    /// `lpi` made pending (true) or its pending state ended (false), if the board holds it:
    /// then the vGIC keeps nothing of it.
    pub(crate) fn direct_pending(&mut self, lpi: u32, pending: bool) -> bool {
        let Some(d) = self.direct.as_mut() else { return false };
        let i = index(lpi);
        if pending {
            d.raised.set(i);
        } else {
            d.raised.clear(i);
            d.cleared.set(i);
        }
        true
    }

    /// Brings the board's ITS to the guest's LPIs: every command that changes since the last
    /// call, in an order the board accepts (a pending state ended before a move, a mapping
    /// before its configuration and before it is raised), handed to `board`. A raise of an
    /// LPI with no mapping is dropped, as the board would drop a message with no
    /// translation. Allocates nothing; a VM without direct injection gives nothing.
    pub fn sync_direct(&mut self, mut board: impl FnMut(VlpiCommand)) {
        let Some(mut d) = self.direct.take() else { return };
        for i in d.cleared.take() {
            let lpi = FIRST_LPI + i as u32;
            if d.shown.get(i).is_some_and(|s| s.vcpu != NOT_MAPPED) {
                board(VlpiCommand::Clear { lpi });
            }
        }
        for i in d.dirty.take() {
            let lpi = FIRST_LPI + i as u32;
            let Some(shown) = d.shown.get_mut(i) else { continue };
            let (vcpu, config) = self.wanted_direct(lpi);
            match (shown.vcpu, vcpu) {
                (NOT_MAPPED, None) => continue,
                (_, None) => {
                    board(VlpiCommand::Discard { lpi });
                    *shown = Shown { vcpu: NOT_MAPPED, config: 0 };
                    continue;
                }
                (NOT_MAPPED, Some(v)) => {
                    // The configuration first: a mapped event is delivered at once.
                    board(VlpiCommand::Configure { lpi, config, mapped: false });
                    board(VlpiCommand::Map { lpi, vcpu: v });
                }
                (was, Some(v)) => {
                    if shown.config != config {
                        board(VlpiCommand::Configure { lpi, config, mapped: true });
                    }
                    if usize::from(was) != v {
                        board(VlpiCommand::Move { lpi, vcpu: v });
                    }
                }
            }
            *shown = Shown { vcpu: vcpu.map_or(NOT_MAPPED, |v| v as u16), config };
        }
        for i in d.raised.take() {
            if d.shown.get(i).is_some_and(|s| s.vcpu != NOT_MAPPED) {
                board(VlpiCommand::Raise { lpi: FIRST_LPI + i as u32 });
            }
        }
        self.direct = Some(d);
    }

    /// Every mapping the board holds for the VM ended (DISCARD each): before the VM is
    /// destroyed or its vGIC replaced at a reset, so no event of the board's still names one
    /// of its vPEs.
    pub fn release_direct(&mut self, mut board: impl FnMut(VlpiCommand)) {
        let Some(d) = self.direct.as_mut() else { return };
        for (i, shown) in d.shown.iter_mut().enumerate() {
            if shown.vcpu != NOT_MAPPED {
                board(VlpiCommand::Discard { lpi: FIRST_LPI + i as u32 });
                *shown = Shown { vcpu: NOT_MAPPED, config: 0 };
            }
        }
        d.dirty = LpiBits::default();
        d.raised = LpiBits::default();
        d.cleared = LpiBits::default();
    }

    /// Whether the board holds a mapping for `lpi` now (for tests and the fuzzer).
    pub fn direct_mapping(&self, lpi: u32) -> Option<usize> {
        let d = self.direct.as_ref()?;
        let s = d.shown.get(index(lpi))?;
        (s.vcpu != NOT_MAPPED).then_some(usize::from(s.vcpu))
    }

    /// What the board should hold for `lpi`: the vCPU its translation routes it to, if any
    /// (an LPI the guest's ITS translates no event to has none), and its configuration byte.
    fn wanted_direct(&self, lpi: u32) -> (Option<usize>, u8) {
        let vcpu = self.lpi_target(crate::IntId(lpi));
        let config = self.irq(0, lpi).map_or(0, |s| s.priority | u8::from(s.enabled()));
        (vcpu, config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_taken_in_order_and_cleared() {
        let mut b = LpiBits::default();
        for i in [1023, 0, 64, 63] {
            b.set(i);
        }
        b.set(MAX_LPIS); // beyond the VM's LPIs: ignored
        b.clear(64);
        assert_eq!(b.take().collect::<Vec<_>>(), [0, 63, 1023]);
        assert_eq!(b.take().count(), 0);
    }
}
