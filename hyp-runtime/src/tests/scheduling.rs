//! The scheduler glue: kicks reach the CPU whose answer changed, a vCPU blocking in WFI
//! never misses the interrupt that races with it, and blocked vCPUs' timers wake them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use sched::{Policy, VcpuState};

use super::leak;
use crate::arch::Arch;
use crate::fake::FakeArch;
use crate::scheduling::{vcpu_ref, Scheduling};

const SLICE: u64 = 1000;

fn scheduling(cpus: usize) -> &'static Scheduling<FakeArch> {
    let s = leak(Scheduling::new());
    s.init(cpus);
    s
}

#[test]
fn starting_a_vcpu_kicks_its_home_cpu_or_flags_this_one() {
    let s = scheduling(2);
    FakeArch::become_cpu(0);
    let (here, there) = (vcpu_ref(0, 0), vcpu_ref(0, 1));
    s.add(here, 0, Policy::Pinned).unwrap();
    s.add(there, 1, Policy::Pinned).unwrap();
    s.start(there).unwrap();
    assert_eq!(FakeArch::take_kicks(), vec![1], "an idle CPU is kicked to pick its vCPU");
    assert!(s.take_reschedule(1));
    s.start(here).unwrap();
    assert_eq!(FakeArch::take_kicks(), Vec::<usize>::new(), "this CPU is not kicked: it is in the hypervisor");
    assert!(s.take_reschedule(0), "but it asks again");
    assert!(!s.take_reschedule(0), "once");
    assert_eq!(s.pick(0).run, Some(here));
    assert_eq!(s.state(here), Some(VcpuState::Running));
}

#[test]
fn an_unknown_vcpu_is_an_error_not_a_panic() {
    let s = scheduling(1);
    assert!(s.start(vcpu_ref(3, 0)).is_err());
    assert!(s.stop(vcpu_ref(3, 0)).is_err());
    let waiting = AtomicBool::new(false);
    assert!(!s.block(vcpu_ref(3, 0), &waiting, || false), "a vCPU the scheduler does not know never blocks");
    assert!(!waiting.load(Ordering::SeqCst), "and is not left marked waiting");
    let unready: &Scheduling<FakeArch> = leak(Scheduling::new());
    assert!(unready.start(vcpu_ref(0, 0)).is_err(), "a scheduler not yet set up refuses");
}

#[test]
fn a_vcpu_with_an_interrupt_pending_does_not_block() {
    let s = scheduling(1);
    FakeArch::become_cpu(0);
    let v = vcpu_ref(0, 0);
    s.add(v, 0, Policy::Shared { slice: SLICE }).unwrap();
    s.start(v).unwrap();
    assert_eq!(s.pick(0).run, Some(v));
    let waiting = AtomicBool::new(false);
    assert!(!s.block(v, &waiting, || true));
    assert_eq!(s.state(v), Some(VcpuState::Running));
    assert!(!waiting.load(Ordering::SeqCst));
}

/// The race of docs/scheduler.md: a vCPU blocks in WFI on CPU 0 while CPU 1 makes an
/// interrupt pending for it and wakes it. Whatever the interleaving, the vCPU ends either
/// not blocked (it saw the interrupt) or woken (runnable again): never blocked with its
/// interrupt pending. Half the rounds race freely; a quarter make the interrupt pending
/// before the WFI's check and a quarter after the vCPU blocked, so both orders are taken
/// whatever the host's scheduler does with the two threads.
#[test]
fn no_wake_up_is_lost_when_an_interrupt_races_with_wfi() {
    let s = scheduling(2);
    let v = vcpu_ref(0, 0);
    s.add(v, 0, Policy::Shared { slice: SLICE }).unwrap();
    FakeArch::become_cpu(0);
    s.start(v).unwrap();
    const ROUNDS: usize = 20_000;
    #[derive(PartialEq)]
    enum Order {
        PendingFirst,
        BlockedFirst,
        Race,
    }
    let order = |round: usize| match round % 4 {
        0 => Order::PendingFirst,
        1 => Order::BlockedFirst,
        _ => Order::Race,
    };
    let pending = Arc::new(AtomicBool::new(false));
    let waiting = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(2));
    let waker = {
        let (pending, waiting, barrier) = (Arc::clone(&pending), Arc::clone(&waiting), Arc::clone(&barrier));
        thread::spawn(move || {
            FakeArch::become_cpu(1);
            for round in 0..ROUNDS {
                barrier.wait();
                match order(round) {
                    Order::PendingFirst => {
                        pending.store(true, Ordering::SeqCst);
                        barrier.wait();
                    }
                    Order::BlockedFirst => {
                        barrier.wait();
                        pending.store(true, Ordering::SeqCst);
                    }
                    Order::Race => pending.store(true, Ordering::SeqCst),
                }
                s.wake(v, &waiting);
                barrier.wait();
            }
        })
    };
    let mut blocked_rounds = 0;
    for round in 0..ROUNDS {
        assert_eq!(s.pick(0).run, Some(v), "round {round}: the vCPU runs");
        barrier.wait();
        if order(round) == Order::PendingFirst {
            barrier.wait();
        }
        // The interrupt's check is slow (the vGIC's lock, in the hypervisor): a waker that
        // comes while it runs must still be seen.
        let pending_now = || {
            let seen = pending.load(Ordering::SeqCst);
            (0..round % 64 * 16).for_each(|_| std::hint::spin_loop());
            seen
        };
        let blocked = s.block(v, &waiting, pending_now);
        match order(round) {
            Order::PendingFirst => assert!(!blocked, "round {round}: blocked with its interrupt pending"),
            Order::BlockedFirst => {
                assert!(blocked, "round {round}: nothing was pending, yet it did not block");
                barrier.wait();
            }
            Order::Race => {}
        }
        blocked_rounds += usize::from(blocked);
        barrier.wait();
        let state = s.state(v);
        assert!(
            matches!(state, Some(VcpuState::Running | VcpuState::Runnable)),
            "round {round}: the vCPU is {state:?} with its interrupt pending"
        );
        assert!(!waiting.load(Ordering::SeqCst), "round {round}: still marked waiting");
        pending.store(false, Ordering::SeqCst);
    }
    waker.join().unwrap();
    assert!((ROUNDS / 4..=ROUNDS * 3 / 4).contains(&blocked_rounds), "blocked in {blocked_rounds} of {ROUNDS} rounds");
}

#[test]
fn the_hypervisor_timer_fires_for_the_first_of_slice_end_and_blocked_timers() {
    let s = scheduling(1);
    FakeArch::become_cpu(0);
    let (a, b) = (vcpu_ref(0, 0), vcpu_ref(1, 0));
    for v in [a, b] {
        s.add(v, 0, Policy::Shared { slice: SLICE }).unwrap();
        s.start(v).unwrap();
    }
    let first = s.pick(0).run.unwrap();
    let waiting = AtomicBool::new(false);
    assert!(s.block(first, &waiting, || false));
    s.wake_at(0, first, 500);
    s.wake_at(0, first, 700);
    s.program_timer(0, Some(900));
    assert_eq!(FakeArch::timer(), Some(700), "a new deadline of the same vCPU replaces its last");
    s.program_timer(0, Some(600));
    assert_eq!(FakeArch::timer(), Some(600));
    s.program_timer(0, None);
    assert_eq!(FakeArch::timer(), Some(700), "no slice: the blocked vCPU's timer");

    FakeArch::set_now(699);
    let woken = std::cell::RefCell::new(Vec::new());
    s.timer_fired(0, |v| woken.borrow_mut().push(v));
    assert_eq!(FakeArch::timer(), None, "the timer is stopped when it fires");
    assert!(woken.borrow().is_empty(), "not due yet");
    FakeArch::set_now(700);
    s.timer_fired(0, |v| {
        woken.borrow_mut().push(v);
        s.wake(v, &waiting);
    });
    assert_eq!(*woken.borrow(), vec![first]);
    assert_eq!(s.state(first), Some(VcpuState::Runnable));
    s.program_timer(0, None);
    assert_eq!(FakeArch::timer(), None, "nothing left to wake: tickless");
}

#[test]
fn a_yielding_vcpu_gives_its_cpu_to_the_one_waiting() {
    let s = scheduling(1);
    FakeArch::become_cpu(0);
    let (a, b) = (vcpu_ref(0, 0), vcpu_ref(0, 1));
    for v in [a, b] {
        s.add(v, 0, Policy::Shared { slice: SLICE }).unwrap();
        s.start(v).unwrap();
    }
    let _ = s.take_reschedule(0);
    let first = s.pick(0).run.unwrap();
    s.yield_now(0, first);
    assert!(s.take_reschedule(0));
    let next = s.tick(0).run.unwrap();
    assert_ne!(next, first);
}

#[test]
fn a_vcpus_cpu_time_counts_its_stretches_on_its_cpu_and_nothing_while_it_waits() {
    let s = scheduling(1);
    FakeArch::become_cpu(0);
    let hz = FakeArch::counter_frequency();
    let (a, b) = (vcpu_ref(0, 0), vcpu_ref(1, 0));
    for v in [a, b] {
        s.add(v, 0, Policy::Shared { slice: hz / 100 }).unwrap();
    }
    FakeArch::set_now(0);
    s.start(a).unwrap();
    s.start(b).unwrap();
    assert_eq!(s.pick(0).run, Some(a));
    FakeArch::set_now(hz / 100);
    assert_eq!(s.run_time_us(a), 10_000, "running: the stretch so far");
    assert_eq!(s.pick(0).run, Some(b), "a's 10 ms slice is over");
    FakeArch::set_now(hz / 100 + hz / 200);
    assert_eq!((s.run_time_us(a), s.run_time_us(b)), (10_000, 5_000), "a waits, b runs");
    s.stop(b).unwrap();
    FakeArch::set_now(hz);
    assert_eq!(s.run_time_us(b), 5_000, "stopped: its time is kept and grows no more");
    assert_eq!(s.run_time_us(vcpu_ref(7, 0)), 0, "a vCPU the scheduler does not know has run for no time");
}
