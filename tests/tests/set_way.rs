//! Set/way cache maintenance is bounded and preemptible (issue: isolation, point 3): a guest
//! that turns its caches on and off with a set/way instruction before each turn, so that
//! each costs a clean of its whole 512 MiB, cannot hold the VM sharing its CPU off it for
//! more than two time slices. Run with `-icount shift=0`, so the time a clean takes is its
//! instruction count and the limit does not depend on the host's load.

use system_tests::{assert_line, boot, images, placed, test_vm};
use xtask::bundle::Policy;
use xtask::qemu::Machine;

#[test]
fn a_set_way_storm_cannot_hold_the_vm_sharing_its_cpu_off_it_for_more_than_two_slices() {
    let i = images();
    let vms = [
        placed(test_vm("storm", &i.setway_storm, 512 << 20), &[1], Policy::Shared),
        placed(test_vm("watcher", &i.watcher, 64 << 20), &[1], Policy::Shared),
    ];
    let machine = Machine { smp: 2, memory_mib: 1536, icount: true, ..Machine::default() };
    let out = boot("set-way", machine, &vms);
    for line in out.console.lines().filter(|l| l.starts_with("storm |") || l.starts_with("watcher |")) {
        println!("{line}");
    }
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert!(!out.console.contains("not ok"), "a check failed; console:\n{}", out.console);
    assert_line(&out, "storm | ok 1 - set/way storm: ");
    assert_line(&out, "watcher | ok 1 - watcher: off its CPU ");
    assert_line(&out, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");
}
