//! Invariant 4 (docs/scheduler.md): a pinned vCPU is never preempted, gets no deadline
//! (tickless) and is told that WFI need not trap, whatever the shared CPUs beside it do.

mod common;

use common::*;
use proptest::prelude::*;
use sched::{Decision, Policy, Scheduler, VcpuRef};

#[test]
fn a_pinned_vcpu_runs_tickless_without_wfi_trap_and_keeps_its_cpu() {
    let mut s = Scheduler::new(2);
    let v = VcpuRef::new(0, 0);
    s.add_vcpu(v, 1, Policy::Pinned).unwrap();
    assert_eq!(s.pick(1, 0), Decision::IDLE, "stopped: nothing to run");
    assert_eq!(s.start(v), Ok(Some(1)), "CPU_ON kicks the idle CPU");
    let run = Decision { run: Some(v), until: None, trap_wfi: false };
    for now in [0, 1, 1_000_000, u64::MAX / 2, u64::MAX] {
        assert_eq!(s.pick(1, now), run);
        assert_eq!(s.tick(1, now), run, "a spurious timer interrupt changes nothing");
    }
    s.yield_now(v, 10).unwrap();
    assert_eq!(s.pick(1, 10), run, "yielding to no one keeps the CPU");
    assert_eq!(s.wake(v), Ok(None), "an interrupt for a running vCPU needs no rescheduling");
}

#[test]
fn a_pinned_vcpu_that_blocks_anyway_is_woken_with_a_kick() {
    // The arch crate need not trap WFI for a pinned vCPU, but may (or may block it for
    // another reason, e.g. PSCI CPU_SUSPEND): it still works.
    let mut s = Scheduler::new(1);
    let v = VcpuRef::new(3, 1);
    s.add_vcpu(v, 0, Policy::Pinned).unwrap();
    s.start(v).unwrap();
    s.pick(0, 0);
    s.block(v, 5).unwrap();
    assert_eq!(s.pick(0, 5), Decision::IDLE);
    assert_eq!(s.wake(v), Ok(Some(0)));
    assert_eq!(s.pick(0, 9), Decision { run: Some(v), until: None, trap_wfi: false });
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        Just(Behaviour::Busy),
        prop::collection::vec((1u64..=2000, 1u64..=2000), 1..5).prop_map(Behaviour::Bursty),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random machines: some CPUs hold one pinned vCPU each (busy, or sleeping in WFI that
    /// does not trap), the others shared vCPUs. Every decision is checked (`check_decision`:
    /// no deadline, no WFI trap for pinned), no pinned vCPU ever loses its CPU, and each has
    /// its CPU for the whole run.
    #[test]
    fn pinned_vcpus_are_never_preempted_and_run_tickless(
        cpus in 1usize..=4,
        pinned_mask in 0u8..16,
        shared in prop::collection::vec((0usize..4, 1u64..=1000, behaviour()), 0..8),
        pinned_behaviour in prop::collection::vec(behaviour(), 4),
    ) {
        let is_pinned = |c: usize| pinned_mask & (1 << c) != 0;
        let mut specs = Vec::new();
        for c in (0..cpus).filter(|&c| is_pinned(c)) {
            specs.push(Spec { home: c, policy: Policy::Pinned, behaviour: pinned_behaviour[c].clone() });
        }
        let shared_cpus: Vec<usize> = (0..cpus).filter(|&c| !is_pinned(c)).collect();
        if !shared_cpus.is_empty() {
            for (home, slice, b) in &shared {
                let home = shared_cpus[home % shared_cpus.len()];
                specs.push(Spec { home, policy: Policy::Shared { slice: *slice }, behaviour: b.clone() });
            }
        }
        let mut sim = Sim::new(cpus, &specs);
        let end = 500_000;
        sim.run_until(end);
        prop_assert_eq!(sim.preempted_pinned, 0);
        for v in sim.vcpus.iter().filter(|v| v.spec.policy == Policy::Pinned) {
            prop_assert_eq!(v.cpu_time, end, "{} did not have its CPU all the time", v.id);
        }
    }
}
