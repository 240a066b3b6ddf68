//! The list-register planner (the shape of Bao's `vgic_add_lr`): a pure
//! function from a snapshot of one vCPU's list registers and the interrupts it should see to
//! the writes that make the hardware show them.
//!
//! Rules: interrupts already in a list register keep it (no move, no rewrite unless their
//! state changed); active ones come first, because the guest must find them to deactivate
//! them, then pending ones by priority (KVM's `vgic_irq_cmp` rule); a list register is only
//! ever written if this vCPU owns it or the empty-status register says it is empty; what
//! does not fit stays in the software state and the underflow maintenance interrupt brings
//! it in later. It never panics, whatever the counts.

use crate::lr::{ListRegister, LrState, Maintenance};
use crate::MAX_LIST_REGISTERS;

/// One interrupt the vCPU should see, with the list-register contents it should have.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Wanted {
    pub lr: ListRegister,
    /// More of the same interrupt wait (other sources of a GICv2 SGI): ask for the
    /// no-pending maintenance interrupt so the next one comes in once this one is taken.
    pub refill_on_ack: bool,
}

/// What the planner looks at.
#[derive(Clone, Copy, Debug)]
pub struct LrSnapshot<'a> {
    /// Implemented list registers (at most `MAX_LIST_REGISTERS` are used).
    pub count: usize,
    /// ICH_ELRSR_EL2 / GICH_ELRSR: bit n set = LR n is empty.
    pub empty: u32,
    /// LR n holds `Some(contents)` of this vCPU (as last written or read back), `None` if it
    /// is not this vCPU's.
    pub owned: &'a [Option<ListRegister>],
    /// Wanted interrupts, best first: active ones, then by priority (lower value first),
    /// then by INTID. One entry per INTID.
    pub wanted: &'a [Wanted],
    /// More are wanted than `wanted` lists.
    pub more_waiting: bool,
    /// An active interrupt is among those `wanted` has no room for.
    pub more_waiting_active: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum LrAction {
    /// Leave the list register as it is.
    #[default]
    Keep,
    /// Write these contents (a new interrupt, replacing any previous one of this vCPU, or a
    /// new state of the same interrupt).
    Write(ListRegister),
    /// Give the interrupt back to the software state and make the list register empty.
    Spill,
}

/// One action per list register (the first `N`), and the maintenance interrupts to enable.
/// `flush_to_hw` plans into one of 4 when the GIC has 4 list registers or fewer (QEMU, the
/// GIC-400): made ready for 16, its 384 bytes cost a `memset` of about 60 instructions on
/// every plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LrPlan<const N: usize = MAX_LIST_REGISTERS> {
    actions: [LrAction; N],
    pub maintenance: Maintenance,
}

impl<const N: usize> Default for LrPlan<N> {
    fn default() -> Self {
        LrPlan { actions: [LrAction::Keep; N], maintenance: Maintenance::NONE }
    }
}

impl<const N: usize> LrPlan<N> {
    pub fn action(&self, index: usize) -> LrAction {
        self.actions.get(index).copied().unwrap_or_default()
    }
    /// The list registers to write, with what.
    pub fn changes(&self) -> impl Iterator<Item = (usize, LrAction)> + '_ {
        self.actions.iter().copied().enumerate().filter(|(_, a)| *a != LrAction::Keep)
    }
}

pub struct ListRegisterPlanner;

impl ListRegisterPlanner {
    pub fn plan(s: &LrSnapshot<'_>) -> LrPlan {
        let mut plan = LrPlan::default();
        Self::plan_into(s, &mut plan);
        plan
    }

    /// `plan` into a plan the caller owns (`LrPlan::default()`), which saves copying it back
    /// on the exit path; a plan of `N` looks at the first `N` list registers only.
    pub fn plan_into<const N: usize>(s: &LrSnapshot<'_>, plan: &mut LrPlan<N>) {
        let count = s.count.min(N);
        let owned = |i: usize| s.owned.get(i).copied().flatten();
        let empty = |i: usize| s.empty & (1 << i) != 0;
        let capacity = (0..count).filter(|&i| owned(i).is_some() || empty(i)).count();
        let chosen = &s.wanted[..s.wanted.len().min(capacity)];

        let mut assigned = 0u64; // list registers that hold a chosen interrupt
        let mut placed = 0u64; // chosen interrupts that have a list register

        for (k, w) in chosen.iter().enumerate() {
            let resident =
                (0..count).find(|&i| assigned & (1 << i) == 0 && owned(i).is_some_and(|lr| lr.vintid == w.lr.vintid));
            if let Some(i) = resident {
                assigned |= 1 << i;
                placed |= 1 << k;
                if owned(i) != Some(w.lr) {
                    plan.actions[i] = LrAction::Write(w.lr);
                }
            }
        }

        // Free list registers: this vCPU's that no chosen interrupt kept (written anyway, so
        // reusing them costs nothing extra), then empty ones.
        let mut free = [0usize; N];
        let mut n_free = 0;
        let reusable = (0..count).filter(|&i| owned(i).is_some() && assigned & (1 << i) == 0);
        let empties = (0..count).filter(|&i| owned(i).is_none() && empty(i));
        for i in reusable.chain(empties) {
            free[n_free] = i;
            n_free += 1;
        }
        let mut next = free[..n_free].iter();
        for (k, w) in chosen.iter().enumerate() {
            if placed & (1 << k) != 0 {
                continue;
            }
            if let Some(&i) = next.next() {
                plan.actions[i] = LrAction::Write(w.lr);
                assigned |= 1 << i;
            }
        }
        for i in (0..count).filter(|&i| owned(i).is_some() && assigned & (1 << i) == 0) {
            plan.actions[i] = LrAction::Spill;
        }

        let overflow = s.wanted.len() > capacity || s.more_waiting;
        plan.maintenance = Maintenance {
            // With no list register at all, UIE would fire forever: nothing can be shown.
            underflow: overflow && count > 0,
            no_pending: chosen.iter().any(|w| w.refill_on_ack && w.lr.state == LrState::Pending),
            entry_not_present: active_left_out(s.wanted, chosen.len(), s.more_waiting_active),
        };
    }
}

/// Whether an active interrupt is among those `wanted` (best first, active ones first)
/// lists beyond the first `shown`, or among those it has no room for: the guest may
/// deactivate one that no list register shows, which only EOIcount tells.
pub(crate) fn active_left_out(wanted: &[Wanted], shown: usize, more_waiting_active: bool) -> bool {
    more_waiting_active || wanted.get(shown).is_some_and(|w| w.lr.state.active())
}
