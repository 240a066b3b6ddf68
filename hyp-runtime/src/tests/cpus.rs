//! The boot-time CPU roster: online reports, handed work, the check that CPUs answer kicks.

use std::sync::Arc;
use std::thread;

use crate::cpus::Cpus;
use crate::fake::FakeArch;

#[test]
fn the_check_counts_the_online_cpus_that_answer_and_kicks_each_once() {
    let cpus = Arc::new(Cpus::new());
    for cpu in [0, 1, 2] {
        cpus.set_online(cpu);
    }
    assert_eq!(cpus.online_count(), 3);
    assert!(!cpus.is_online(3) && !cpus.is_online(usize::MAX));
    // CPU 1 takes its work until it has answered; CPU 2 never looks; CPU 3 is off.
    let one = {
        let cpus = cpus.clone();
        thread::spawn(move || {
            FakeArch::become_cpu(1);
            while !cpus.is_answered(1) {
                assert_eq!(cpus.take_work(1), None, "a ping is no work for the image");
                thread::yield_now();
            }
        })
    };
    FakeArch::become_cpu(0);
    assert_eq!(cpus.check_kicks::<FakeArch>(1_000_000, thread::yield_now), (1, 2));
    one.join().unwrap();
    assert_eq!(FakeArch::take_kicks(), [1, 2], "each other online CPU kicked once");
}

#[test]
fn work_handed_to_a_cpu_is_taken_once_and_wakes_it() {
    let cpus = Cpus::new();
    FakeArch::become_cpu(0);
    cpus.give_work::<FakeArch>(2, 7);
    assert_eq!(FakeArch::take_kicks(), [2]);
    assert_eq!(cpus.take_work(2), Some(7));
    assert_eq!(cpus.take_work(2), None);
    cpus.give_work::<FakeArch>(MAX, 7);
    assert_eq!(FakeArch::take_kicks(), [], "no such CPU, nobody kicked");
    assert!(!cpus.wait_online(1, 3, || {}), "never online: the wait gives up");
    cpus.set_online(1);
    assert!(cpus.wait_online(1, 0, || {}));
}

const MAX: usize = hyp_core::platform::MAX_CPUS;
