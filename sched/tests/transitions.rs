//! Invariants 5 and 6 (docs/scheduler.md), and the structural invariants S1-S5: random
//! sequences of every operation, valid or not, on random machines. After each operation the
//! transition predicate holds for every vCPU, each operation made exactly the transition the
//! table gives it (and refused calls changed nothing), the structure is consistent, and no
//! decision names a stopped or removed vCPU.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use sched::{Policy, SchedError, Scheduler, VcpuRef, VcpuState};

use VcpuState::*;

#[derive(Clone, Debug)]
enum Op {
    Add(usize, usize, Option<u64>),
    Remove(usize),
    Start(usize),
    Stop(usize),
    Block(usize),
    Wake(usize),
    Yield(usize),
    Pick(usize),
    Advance(u64),
}

const IDS: usize = 6;

fn id(i: usize) -> VcpuRef {
    VcpuRef::new((i / 2) as u16, (i % 2) as u16)
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0..IDS;
    prop_oneof![
        (i.clone(), 0usize..4, prop::option::of(0u64..50)).prop_map(|(v, c, s)| Op::Add(v, c, s)),
        i.clone().prop_map(Op::Remove),
        i.clone().prop_map(Op::Start),
        i.clone().prop_map(Op::Stop),
        i.clone().prop_map(Op::Block),
        i.clone().prop_map(Op::Wake),
        i.prop_map(Op::Yield),
        (0usize..4).prop_map(Op::Pick),
        (0usize..4).prop_map(Op::Pick),
        (0u64..80).prop_map(Op::Advance),
    ]
}

/// The state the table gives `v` after `op`, from `before` (`None`: absent).
fn expected(op: &Op, target: usize, before: Option<VcpuState>, alone: bool) -> Option<VcpuState> {
    match (op, before) {
        (Op::Remove(_), _) => None,
        (_, None) => None,
        (Op::Start(_), Some(Stopped)) => Some(Runnable),
        (Op::Stop(_), Some(_)) => Some(Stopped),
        (Op::Block(_), Some(Running)) => Some(Blocked),
        (Op::Wake(_), Some(Blocked)) => Some(Runnable),
        (Op::Yield(_), Some(Running)) if !alone => Some(Runnable),
        _ => {
            let _ = target;
            before
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn every_operation_makes_only_allowed_transitions_and_stopped_vcpus_never_run(
        cpus in 1usize..=3,
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut s = Scheduler::new(cpus);
        let ids: Vec<VcpuRef> = (0..IDS).map(id).collect();
        let mut checker = Checker::default();
        let mut policies: BTreeMap<VcpuRef, Policy> = BTreeMap::new();
        // Stopped or removed, and not started since: must never be named by a decision.
        let mut dead: BTreeSet<VcpuRef> = ids.iter().copied().collect();
        let mut now = 0u64;
        checker.check(&s, &ids, "new");
        for op in &ops {
            let states: Vec<Option<VcpuState>> = ids.iter().map(|&v| s.state(v)).collect();
            let before = format!("{s:?}");
            let name = format!("{op:?}");
            let mut refused = false;
            let target = match *op {
                Op::Add(i, cpu, slice) => {
                    let policy = slice.map_or(Policy::Pinned, |slice| Policy::Shared { slice });
                    let r = s.add_vcpu(ids[i], cpu, policy);
                    if r.is_ok() {
                        policies.insert(ids[i], policy);
                        prop_assert!(states[i].is_none());
                    } else {
                        refused = true;
                    }
                    Some(i)
                }
                Op::Remove(i) => {
                    refused = s.remove_vcpu(ids[i], now).is_err();
                    dead.insert(ids[i]);
                    Some(i)
                }
                Op::Start(i) => {
                    let r = s.start(ids[i]);
                    if r.is_ok() {
                        dead.remove(&ids[i]);
                    }
                    refused = r.is_err();
                    Some(i)
                }
                Op::Stop(i) => {
                    refused = s.stop(ids[i], now).is_err();
                    dead.insert(ids[i]);
                    Some(i)
                }
                Op::Block(i) => {
                    refused = s.block(ids[i], now).is_err();
                    Some(i)
                }
                Op::Wake(i) => {
                    refused = s.wake(ids[i]).is_err();
                    Some(i)
                }
                Op::Yield(i) => {
                    let r = s.yield_now(ids[i], now);
                    let running_refused = matches!(r, Err(SchedError::NotRunning { state: Running, .. }));
                    prop_assert!(!running_refused, "a running vCPU was refused a yield");
                    refused = r.is_err();
                    Some(i)
                }
                Op::Pick(cpu) => {
                    let d = s.pick(cpu, now);
                    check_decision(&s, cpu, now, d, |v| policies[&v]);
                    if let Some(v) = d.run {
                        prop_assert!(!dead.contains(&v), "decision names stopped or removed {}", v);
                    }
                    None
                }
                Op::Advance(dt) => {
                    now += dt;
                    None
                }
            };
            if refused {
                prop_assert_eq!(format!("{s:?}"), before, "refused {} changed the scheduler", name);
            }
            checker.check(&s, &ids, &name);
            for (j, &v) in ids.iter().enumerate() {
                let after = s.state(v);
                match (op, target) {
                    (Op::Pick(cpu), _) => {
                        // A pick changes only vCPUs of that CPU, and only Runnable <-> Running.
                        if s.home(v) != Some(*cpu) {
                            prop_assert_eq!(after, states[j]);
                        } else if after != states[j] {
                            prop_assert!(matches!((states[j], after), (Some(Runnable), Some(Running)) | (Some(Running), Some(Runnable))));
                        }
                    }
                    (_, Some(i)) if i == j && !matches!(op, Op::Add(..)) => {
                        let alone = s.queue(s.home(v).unwrap_or(0)).next().is_none() && after == Some(Running);
                        prop_assert_eq!(after, expected(op, i, states[j], alone), "{} on {}", name, v);
                    }
                    (Op::Add(..), Some(i)) if i == j => {
                        prop_assert!(after == states[j] || (states[j].is_none() && after == Some(Stopped)));
                    }
                    _ => prop_assert_eq!(after, states[j], "{} changed {}", name, v),
                }
                if dead.contains(&v) {
                    let live = after == Some(Running) || after == Some(Runnable);
                    prop_assert!(!live, "{} is {:?} after {}", v, after, name);
                    prop_assert!((0..cpus).all(|c| s.running_on(c) != Some(v)));
                }
            }
        }
    }

    /// Invariant 6 in the simulator: vCPUs stopped at random times (PSCI CPU_OFF) while the
    /// others run, block and wake never run again, and the others keep their bounds.
    #[test]
    fn stopped_vcpus_never_run_again_in_the_simulator(
        cpus in 1usize..=3,
        vcpus in prop::collection::vec((0usize..3, 1u64..=500, any::<bool>()), 2..=8),
        stops in prop::collection::vec((0usize..8, 1u64..50_000), 1..4),
    ) {
        let specs: Vec<Spec> = vcpus
            .iter()
            .map(|&(home, slice, busy)| Spec {
                home: home % cpus,
                policy: Policy::Shared { slice },
                behaviour: if busy { Behaviour::Busy } else { Behaviour::Bursty(vec![(300, 700), (50, 20)]) },
            })
            .collect();
        let mut sim = Sim::new(cpus, &specs);
        let mut stops = stops;
        stops.sort_by_key(|s| s.1);
        let mut stopped = BTreeSet::new();
        for (i, at) in stops {
            let at = at.max(sim.now);
            sim.run_until(at);
            let i = i % specs.len();
            sim.stop(i);
            stopped.insert(i);
            let frozen: Vec<u64> = stopped.iter().map(|&j| sim.vcpus[j].cpu_time).collect();
            sim.run_until(at + 20_000);
            let after: Vec<u64> = stopped.iter().map(|&j| sim.vcpus[j].cpu_time).collect();
            prop_assert_eq!(frozen, after, "a stopped vCPU got CPU time");
            for &j in &stopped {
                prop_assert_eq!(sim.sched.state(sim.vcpus[j].id), Some(Stopped));
            }
        }
    }
}

#[test]
fn the_transition_table_allows_exactly_the_documented_moves() {
    let all = [Running, Runnable, Blocked, Stopped];
    let mut allowed_moves = Vec::new();
    for a in all {
        for b in all {
            if a != b && allowed(Some(a), Some(b)) {
                allowed_moves.push((a, b));
            }
        }
    }
    assert_eq!(allowed_moves.len(), 8);
    for forbidden in [(Stopped, Running), (Stopped, Blocked), (Blocked, Running), (Runnable, Blocked)] {
        assert!(!allowed(Some(forbidden.0), Some(forbidden.1)), "{forbidden:?}");
    }
    assert!(!allowed(None, Some(Runnable)), "a vCPU is created stopped");
}
