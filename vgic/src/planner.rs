//! The list-register planner (CONVENTIONS 10, the shape of Bao's `vgic_add_lr`): pure.
//! Given how many list registers there are and what the vCPU should see, it says what to
//! write to which list register and whether to ask for the underflow maintenance interrupt.
//! It never panics, whatever the number of pending interrupts: those that do not fit wait in
//! the software state and come in at the next refill.

use alloc::vec::Vec;

use crate::distributor::Candidate;
use crate::lr::ListRegister;

/// A list register to write: index and contents.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LrSlot {
    pub index: usize,
    pub lr: ListRegister,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct EntryPlan {
    /// Written in order from LR 0: only the list registers in use are touched.
    pub writes: Vec<LrSlot>,
    /// More were deliverable than fit: enable the underflow maintenance interrupt
    /// (ICH_HCR_EL2.UIE / GICH_HCR.UIE) to refill when the guest has taken them.
    pub underflow: bool,
}

/// A CPU's hardware list registers (ICH_LR<n>_EL2 with ICH_HCR_EL2, or GICH_LR<n> with
/// GICH_HCR): the arch crate implements it, tests fake it.
pub trait ListRegisters {
    fn count(&self) -> usize;
    fn read(&self, n: usize) -> ListRegister;
    /// Writes LR `n`; None makes it invalid.
    fn write(&mut self, n: usize, lr: Option<&ListRegister>);
    /// The interface on, with the underflow maintenance interrupt if `underflow`.
    fn enable(&mut self, underflow: bool);
}

/// On entry to `vcpu`: writes what it should see into the list registers (clearing those
/// of the last entry that are no longer needed) and returns how many are now in use.
pub fn load(vgic: &crate::Vgic, vcpu: usize, lrs: &mut impl ListRegisters, in_use: usize) -> usize {
    let plan = plan_entry(lrs.count(), &vgic.candidates(vcpu));
    for w in &plan.writes {
        lrs.write(w.index, Some(&w.lr));
    }
    for stale in plan.writes.len()..in_use {
        lrs.write(stale, None);
    }
    lrs.enable(plan.underflow);
    plan.writes.len()
}

/// On exit from `vcpu`: reads back only the `in_use` list registers and gives their state to
/// the vGIC.
pub fn save(vgic: &mut crate::Vgic, vcpu: usize, lrs: &impl ListRegisters, in_use: usize) {
    const MAX: usize = 16;
    let empty = crate::IchLr(0).decode();
    let snapshot: [ListRegister; MAX] = core::array::from_fn(|i| if i < in_use { lrs.read(i) } else { empty });
    vgic.sync_from_lrs(vcpu, &snapshot[..in_use.min(MAX)]);
}

/// Fills the first list registers with the highest-priority candidates (`candidates` is
/// already in priority order), active ones first so an interrupt the guest is handling is
/// never dropped.
pub fn plan_entry(list_registers: usize, candidates: &[Candidate]) -> EntryPlan {
    let mut ordered: Vec<&Candidate> = candidates.iter().filter(|c| c.lr.state != crate::LrState::Pending).collect();
    ordered.extend(candidates.iter().filter(|c| c.lr.state == crate::LrState::Pending));
    // Keep priority order within the active-first arrangement only where it matters: an
    // active interrupt must stay visible; among the rest, priority decides.
    let writes: Vec<LrSlot> =
        ordered.iter().take(list_registers).enumerate().map(|(index, c)| LrSlot { index, lr: c.lr }).collect();
    EntryPlan { underflow: candidates.len() > writes.len(), writes }
}
