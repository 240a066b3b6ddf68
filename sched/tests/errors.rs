//! Invariant 7 (docs/scheduler.md): every refusal of `add_vcpu` and of the state operations,
//! with a message that says what to change, and nothing changed by a refused call.

use sched::{Policy, SchedError, Scheduler, VcpuRef, VcpuState};

const SHARED: Policy = Policy::Shared { slice: 1000 };

fn v(vm: u16, vcpu: u16) -> VcpuRef {
    VcpuRef::new(vm, vcpu)
}

/// Calls `add_vcpu` expecting `expected`, checks that nothing changed, and returns the message.
fn refused(s: &mut Scheduler, vcpu: VcpuRef, cpu: usize, policy: Policy, expected: SchedError) -> String {
    let before = format!("{s:?}");
    assert_eq!(s.add_vcpu(vcpu, cpu, policy), Err(expected));
    assert_eq!(format!("{s:?}"), before, "a refused add_vcpu changed the scheduler");
    s.check_invariants().unwrap();
    expected.to_string()
}

#[test]
fn a_cpu_that_does_not_exist() {
    let mut s = Scheduler::new(4);
    let msg = refused(&mut s, v(0, 0), 4, SHARED, SchedError::NoSuchCpu { cpu: 4, cpus: 4 });
    assert_eq!(msg, "CPU 4 does not exist: this machine has 4 CPUs (0 to 3); choose one of them");
    let mut one = Scheduler::new(1);
    let msg = refused(&mut one, v(0, 0), 7, Policy::Pinned, SchedError::NoSuchCpu { cpu: 7, cpus: 1 });
    assert!(msg.contains("has 1 CPU (0 to 0)"), "{msg}");
}

#[test]
fn a_pinned_cpu_already_has_its_vcpu() {
    let mut s = Scheduler::new(2);
    s.add_vcpu(v(0, 0), 1, Policy::Pinned).unwrap();
    let owner = v(0, 0);
    let msg = refused(&mut s, v(1, 0), 1, Policy::Pinned, SchedError::CpuPinned { cpu: 1, owner });
    assert_eq!(
        msg,
        "CPU 1 is reserved for pinned vCPU 0 of VM 0; give this vCPU another CPU, or make vCPU 0 of VM 0 shared"
    );
    // A shared vCPU cannot squeeze in either: the pinned one's promise would break.
    refused(&mut s, v(1, 0), 1, SHARED, SchedError::CpuPinned { cpu: 1, owner });
}

#[test]
fn a_pinned_vcpu_onto_a_cpu_with_shared_vcpus() {
    let mut s = Scheduler::new(2);
    s.add_vcpu(v(2, 3), 0, SHARED).unwrap();
    let msg = refused(&mut s, v(0, 0), 0, Policy::Pinned, SchedError::CpuShared { cpu: 0, sharer: v(2, 3) });
    assert!(msg.starts_with("CPU 0 already runs shared vCPUs (vCPU 3 of VM 2 among them)"), "{msg}");
    assert!(msg.contains("pin this vCPU to a free CPU or make it shared"), "{msg}");
}

#[test]
fn a_duplicate_vcpu() {
    let mut s = Scheduler::new(2);
    s.add_vcpu(v(1, 1), 0, SHARED).unwrap();
    let msg = refused(&mut s, v(1, 1), 1, SHARED, SchedError::Duplicate { vcpu: v(1, 1) });
    assert_eq!(msg, "vCPU 1 of VM 1 is given twice; each vCPU of a VM needs its own entry");
    // Duplicates are reported before anything else is wrong with the request.
    refused(&mut s, v(1, 1), 9, Policy::Pinned, SchedError::Duplicate { vcpu: v(1, 1) });
}

#[test]
fn a_zero_slice() {
    let mut s = Scheduler::new(1);
    let msg = refused(&mut s, v(0, 0), 0, Policy::Shared { slice: 0 }, SchedError::ZeroSlice { vcpu: v(0, 0) });
    assert!(msg.contains("time slice of 0 ticks"), "{msg}");
}

#[test]
fn a_cpu_freed_by_removal_can_be_pinned_again() {
    let mut s = Scheduler::new(1);
    s.add_vcpu(v(0, 0), 0, SHARED).unwrap();
    s.remove_vcpu(v(0, 0), 0).unwrap();
    s.add_vcpu(v(1, 0), 0, Policy::Pinned).unwrap();
    s.remove_vcpu(v(1, 0), 0).unwrap();
    s.add_vcpu(v(1, 0), 0, SHARED).unwrap();
    s.check_invariants().unwrap();
}

#[test]
fn operations_on_a_vcpu_in_the_wrong_state_or_unknown() {
    let mut s = Scheduler::new(1);
    let (a, b, ghost) = (v(0, 0), v(0, 1), v(9, 9));
    s.add_vcpu(a, 0, SHARED).unwrap();
    s.add_vcpu(b, 0, SHARED).unwrap();
    let unknown = SchedError::UnknownVcpu { vcpu: ghost };
    assert_eq!(s.start(ghost), Err(unknown));
    assert_eq!(s.stop(ghost, 0), Err(unknown));
    assert_eq!(s.wake(ghost), Err(unknown));
    assert_eq!(s.block(ghost, 0), Err(unknown));
    assert_eq!(s.yield_now(ghost, 0), Err(unknown));
    assert_eq!(s.remove_vcpu(ghost, 0), Err(unknown));
    assert_eq!(s.state(ghost), None);
    assert_eq!(unknown.to_string(), "vCPU 9 of VM 9 does not exist (never added, or its VM was destroyed)");

    assert_eq!(s.block(a, 0), Err(SchedError::NotRunning { vcpu: a, state: VcpuState::Stopped }));
    s.start(a).unwrap();
    let already = SchedError::NotStopped { vcpu: a, state: VcpuState::Runnable };
    assert_eq!(s.start(a), Err(already));
    assert_eq!(already.to_string(), "vCPU 0 of VM 0 cannot be started: it is runnable, not stopped");
    assert_eq!(s.yield_now(a, 0), Err(SchedError::NotRunning { vcpu: a, state: VcpuState::Runnable }));
    s.pick(0, 0);
    assert_eq!(s.start(a), Err(SchedError::NotStopped { vcpu: a, state: VcpuState::Running }));
    s.block(a, 1).unwrap();
    let blocked = SchedError::NotRunning { vcpu: a, state: VcpuState::Blocked };
    assert_eq!(s.block(a, 2), Err(blocked));
    assert_eq!(
        blocked.to_string(),
        "vCPU 0 of VM 0 cannot wait or yield: it is blocked in WFI, not running on its CPU"
    );
    s.check_invariants().unwrap();
}
