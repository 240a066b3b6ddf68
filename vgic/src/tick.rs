//! A hardware-mapped level interrupt of one vCPU that fired again while that vCPU ran (the
//! virtual timer's tick): its last list register taken back, its line raised and the list
//! registers planned, in one step under the locks the plan takes anyway (docs/vgic.md, "The
//! virtual timer's tick").
//!
//! The physical interrupt can fire again only once the guest deactivated the virtual one
//! (HW = 1: the deactivation reached it), so the common case is known without the general
//! machinery: the vCPU holds at most one list register, the one that showed this interrupt
//! and came back empty, and nothing else of it or of the VM's SPIs is busy. Then the
//! deactivation is folded, the line raised, and the interrupt written pending into the
//! lowest empty list register, exactly as the take-back, `set_level` and `flush_to_hw` would
//! (`tests/robustness.rs` compares the two at every tick it generates). Anything else is
//! left to the caller's three steps in that order: the fold of the deactivation drops the
//! line, so it must come before the new tick's rise, or the tick is lost.

use crate::interface::set_maintenance;
use crate::lr::{ListRegisters, LrState, Maintenance};
use crate::{Distributor, IntId, VcpuInterfaceState, VgicError, MAX_LIST_REGISTERS};

impl Distributor {
    /// After an exit on which `vcpu`'s hardware-mapped level interrupt `intid` (a PPI) fired
    /// again, in its common case (the module's comment): the same as the take-back
    /// (`sync_from_hw_sampling`, unless the exit's list registers were already `taken_back`), `set_level(intid, vcpu, true)`
    /// and `flush_to_hw`, in that order, except that no kick is asked for `vcpu`, which is
    /// planned here. Returns `false`, with nothing changed, where the common case does not
    /// hold: the caller then takes those steps itself, in that order.
    pub fn hw_level_fired(
        &mut self,
        vcpu: usize,
        intid: IntId,
        taken_back: bool,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> bool {
        let intid = intid.0;
        if intid >= 32 || !self.live_spis.0.is_empty() {
            return false;
        }
        let Some(rd) = self.redistributors.get(vcpu) else { return false };
        if rd.live() & !(1 << intid) != 0 {
            return false;
        }
        let Some(&before) = rd.irq(intid) else { return false };
        if before.edge() || before.latch() || before.hw().is_none() {
            return false;
        }
        let owned = state.owned();
        let held = if owned == 0 {
            // Nothing shown: nothing to take back, and nothing to fold (an active state
            // would be shown again, which the general plan decides).
            if before.active() {
                return false;
            }
            None
        } else {
            // The one register held showed this interrupt with HW = 1 and came back empty:
            // the guest deactivated it (a HW = 1 register never asks for EOI maintenance,
            // so the empty status alone says so).
            let i = owned.trailing_zeros() as usize;
            let raw = state.lr[i];
            if taken_back
                || owned & owned.wrapping_sub(1) != 0
                || lrs.empty_status() & (1 << i) == 0
                || self.vintid_of(raw) != intid
                || !self.is_hw(raw)
            {
                return false;
            }
            Some(i)
        };
        // The fold of the deactivation (`fold`: not active, its pending state consumed, the
        // line dropped with the physical interrupt), then the new rise (`set_level`).
        let mut after = before;
        after.set_active(false);
        after.set_lr_pending(false);
        after.set_line(true);
        let Some(w) = self.want(after, intid, true).filter(|w| w.lr.state == LrState::Pending) else { return false };
        let count = lrs.count().min(MAX_LIST_REGISTERS);
        // `count` is at most 16; the register held is empty, so it is among these.
        let free = lrs.empty_status() & ((1 << count) - 1);
        if free == 0 {
            return false;
        }
        let j = free.trailing_zeros() as usize;
        if let Some(irq) = self.redistributors.get_mut(vcpu).and_then(|rd| rd.irq_mut(intid)) {
            *irq = after;
        }
        if let Some(i) = held {
            state.clear_lr(i);
        }
        let raw = self.encode(&w.lr);
        state.set_lr(j, raw, &w.lr);
        lrs.write_lr(j, raw);
        set_maintenance(state, lrs, Maintenance::NONE);
        true
    }
}

impl Distributor {
    /// After an exit of `vcpu` that asks for a plan (a kick: another CPU changed its
    /// interrupts) where the vCPU holds at most one list register and that one came back
    /// empty without asking for EOI maintenance (the guest completed it): the take-back
    /// (`sync_from_hw_sampling`) is then only the fold of that register, done here, and the
    /// plan (`flush_to_hw`) follows under the same locks. Returns `false`, with nothing
    /// changed, in any other case: the caller takes the list registers back itself.
    pub fn take_back_one_and_plan(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
    ) -> Result<bool, VgicError> {
        self.check_vcpu(vcpu)?;
        let owned = state.owned();
        // An active interrupt left out of the list registers: the take-back reads EOIcount.
        if owned & owned.wrapping_sub(1) != 0 || state.maintenance().entry_not_present {
            return Ok(false);
        }
        if owned != 0 {
            let i = owned.trailing_zeros() as usize;
            let raw = state.lr[i];
            // Empty, and no EOI status to clear: what `take_back` finds of a register whose
            // interrupt the guest completed, with nothing to write back.
            if lrs.empty_status() & (1 << i) == 0 || self.asks_eoi_maintenance(raw) {
                return Ok(false);
            }
            self.fold(vcpu, self.vintid_of(raw), LrState::Invalid);
            state.clear_lr(i);
        }
        self.flush_checked(vcpu, state, lrs);
        Ok(true)
    }
}
