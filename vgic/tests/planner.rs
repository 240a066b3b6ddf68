//! The pure list-register planner: examples, then properties over random
//! snapshots: it never writes a list register that is neither empty nor its own, never
//! drops a wanted interrupt without asking for a refill, and always shows the best ones.

use proptest::prelude::*;
use vgic::*;

fn lr(intid: u32, state: LrState, priority: u8) -> ListRegister {
    ListRegister { vintid: IntId(intid), state, priority, group1: true, ..ListRegister::INVALID }
}
fn want(intid: u32, state: LrState, priority: u8) -> Wanted {
    Wanted { lr: lr(intid, state, priority), refill_on_ack: false }
}

#[test]
fn resident_interrupts_stay_put_and_new_ones_take_free_registers() {
    let owned = [Some(lr(40, LrState::Pending, 0x10)), None, Some(lr(41, LrState::Pending, 0x20)), None];
    let wanted = [want(41, LrState::Pending, 0x20), want(42, LrState::Pending, 0x30)];
    let plan = ListRegisterPlanner::plan(&LrSnapshot {
        count: 4,
        empty: 0b1010,
        owned: &owned,
        wanted: &wanted,
        more_waiting: false,
        more_waiting_active: false,
    });
    assert_eq!(plan.action(2), LrAction::Keep, "41 unchanged: not rewritten");
    assert_eq!(plan.action(0), LrAction::Write(lr(42, LrState::Pending, 0x30)), "40's register reused for 42");
    assert_eq!(plan.changes().count(), 1);
    assert_eq!(plan.maintenance, Maintenance::default());
}

#[test]
fn unwanted_resident_interrupts_are_spilled() {
    let owned = [Some(lr(40, LrState::Pending, 0x10)), Some(lr(41, LrState::Active, 0x10))];
    let wanted = [want(41, LrState::Active, 0x10)];
    let plan = ListRegisterPlanner::plan(&LrSnapshot {
        count: 2,
        empty: 0,
        owned: &owned,
        wanted: &wanted,
        more_waiting: false,
        more_waiting_active: false,
    });
    assert_eq!(plan.changes().collect::<Vec<_>>(), [(0, LrAction::Spill)]);
}

#[test]
fn no_pending_maintenance_only_for_a_placed_interrupt_that_asks() {
    let wanted = [Wanted { refill_on_ack: true, ..want(1, LrState::Pending, 0) }];
    let snapshot =
        LrSnapshot { count: 1, empty: 1, owned: &[], wanted: &wanted, more_waiting: false, more_waiting_active: false };
    assert!(ListRegisterPlanner::plan(&snapshot).maintenance.no_pending);
    let nothing_free = LrSnapshot { empty: 0, ..snapshot };
    let plan = ListRegisterPlanner::plan(&nothing_free);
    assert_eq!(plan.maintenance, Maintenance { underflow: true, ..Maintenance::NONE });
    assert_eq!(plan.changes().count(), 0);
}

fn state() -> impl Strategy<Value = LrState> {
    prop_oneof![Just(LrState::Pending), Just(LrState::Active), Just(LrState::PendingActive)]
}

/// A random snapshot: up to 20 list registers (more than the 16 used), some owned, some
/// foreign, some empty; wanted interrupts with unique INTIDs, some already resident.
fn snapshot() -> impl Strategy<Value = (usize, u32, Vec<Option<ListRegister>>, Vec<Wanted>, bool)> {
    (
        0usize..20,
        any::<u32>(),
        prop::collection::vec((any::<bool>(), state(), any::<u8>()), 20),
        prop::collection::vec((any::<bool>(), state(), any::<u8>()), 0..40),
        any::<bool>(),
    )
        .prop_map(|(count, empty, owned_spec, wanted_spec, more)| {
            // Owned LR i holds INTID 100 + i; wanted INTIDs are 100.. (resident ones) or 200..
            let owned: Vec<Option<ListRegister>> = owned_spec
                .iter()
                .enumerate()
                .map(|(i, &(own, s, p))| (own && i < count).then(|| lr(100 + i as u32, s, p)))
                .collect();
            let mut wanted: Vec<Wanted> = wanted_spec
                .iter()
                .enumerate()
                .map(|(k, &(resident, s, p))| {
                    want(if resident && k < 20 { 100 + k as u32 } else { 200 + k as u32 }, s, p)
                })
                .collect();
            wanted.sort_by_key(|w| (!w.lr.state.active(), w.lr.priority, w.lr.vintid));
            (count, empty, owned, wanted, more)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_planner_respects_ownership_and_priority((count, empty, owned, wanted, more) in snapshot()) {
        let s = LrSnapshot { count, empty, owned: &owned, wanted: &wanted, more_waiting: more, more_waiting_active: false };
        let plan = ListRegisterPlanner::plan(&s);
        let used = count.min(MAX_LIST_REGISTERS);
        let usable = |i: usize| i < used && (owned[i].is_some() || empty & (1 << i) != 0);
        for (i, _) in plan.changes() {
            prop_assert!(usable(i), "LR {} written: neither empty nor owned", i);
        }
        // The list registers afterwards, as far as this vCPU is concerned.
        let after: Vec<Option<ListRegister>> = (0..used)
            .map(|i| match plan.action(i) {
                LrAction::Keep => owned[i],
                LrAction::Write(l) => Some(l),
                LrAction::Spill => None,
            })
            .collect();
        let capacity = (0..used).filter(|&i| usable(i)).count();
        let shown: Vec<ListRegister> = after.iter().flatten().copied().collect();
        let mut shown_ids: Vec<u32> = shown.iter().map(|l| l.vintid.0).collect();
        shown_ids.sort();
        shown_ids.dedup();
        prop_assert_eq!(shown_ids.len(), shown.len(), "an INTID in two list registers");
        // Exactly the best min(capacity, wanted) are shown, with the wanted contents.
        let best = &wanted[..wanted.len().min(capacity)];
        prop_assert_eq!(shown.len(), best.len());
        for w in best {
            prop_assert!(shown.contains(&w.lr), "{:?} not shown", w.lr);
        }
        // A resident interrupt that stays is not moved, and not rewritten if unchanged.
        for (i, o) in owned.iter().enumerate().take(used) {
            if let Some(o) = o {
                if let Some(w) = best.iter().find(|w| w.lr.vintid == o.vintid) {
                    prop_assert_eq!(after[i], Some(w.lr));
                    prop_assert_eq!(plan.action(i) == LrAction::Keep, w.lr == *o);
                }
            }
        }
        // Whatever does not fit is asked for again through the underflow interrupt.
        prop_assert_eq!(plan.maintenance.underflow, (wanted.len() > capacity || more) && used > 0);
    }
}

proptest! {
    /// With no list register of its own, the planner writes the best wanted interrupts into
    /// the empty list registers in order, and asks for underflow when some did not fit: the
    /// rule `Distributor::flush_to_hw` applies directly in that case (`fill_empty`), without
    /// calling the planner.
    #[test]
    fn with_nothing_owned_the_best_go_into_the_empty_registers_in_order(
        count in 0usize..6,
        empty in any::<u32>(),
        n in 0usize..8,
        more_waiting in any::<bool>(),
        refill in any::<bool>(),
    ) {
        let wanted: Vec<Wanted> =
            (0..n as u32).map(|i| Wanted { refill_on_ack: refill && i == 0, ..want(32 + i, LrState::Pending, i as u8 * 8) }).collect();
        let plan = ListRegisterPlanner::plan(&LrSnapshot { count, empty, owned: &[], wanted: &wanted, more_waiting, more_waiting_active: false });
        let free: Vec<usize> = (0..count).filter(|i| empty & (1 << i) != 0).collect();
        let shown = n.min(free.len());
        let expected: Vec<(usize, LrAction)> = free.iter().zip(&wanted).map(|(&i, w)| (i, LrAction::Write(w.lr))).collect();
        prop_assert_eq!(plan.changes().collect::<Vec<_>>(), expected);
        prop_assert_eq!(plan.maintenance.underflow, (n > shown || more_waiting) && count > 0);
        prop_assert_eq!(plan.maintenance.no_pending, refill && shown > 0);
    }
}
