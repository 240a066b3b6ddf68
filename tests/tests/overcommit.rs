//! Overcommit (issue: isolation, point 6): several vCPUs of one VM take turns on one CPU. A
//! 2-vCPU Linux VM on a single CPU (with a GICv3, and with a GICv2) and a 4-vCPU one on two
//! CPUs boot, run a workload with a process per vCPU, and power off.

use system_tests::{
    assert_output_line, linux_vm, one_linux_at_a_time, placed, run, start_session, wait_for_shell, COMMAND_LIMIT,
    RUN_LIMIT,
};
use xtask::bundle::Policy;
use xtask::qemu::Machine;

/// The user and system ticks each CPU has run, from /proc/stat (`cpuN user nice system ...`).
fn busy_ticks(stat: &str, cpus: usize) -> Vec<u64> {
    (0..cpus)
        .map(|n| {
            let line = stat
                .lines()
                .find(|l| l.starts_with(&format!("cpu{n} ")))
                .unwrap_or_else(|| panic!("no cpu{n} line in /proc/stat:\n{stat}"));
            let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
            f.first().copied().unwrap_or(0) + f.get(2).copied().unwrap_or(0)
        })
        .collect()
}

fn overcommitted(test: &str, vcpus: u32, cpus: &[u32], machine: Machine) {
    let _alone = one_linux_at_a_time();
    let vm = placed(linux_vm(vcpus), cpus, Policy::Shared);
    let mut s = start_session(test, machine, &[vm], RUN_LIMIT);
    wait_for_shell(&mut s);
    let processors = run(&mut s, "grep -c ^processor /proc/cpuinfo");
    assert_output_line(&processors, &vcpus.to_string(), "every vCPU is online");
    // A process per vCPU: each compresses 4 MiB and checks the round trip.
    let jobs: Vec<String> = (0..vcpus)
        .map(|n| format!("(dd if=/dev/zero bs=1M count=4 2>/dev/null | gzip -c | gunzip -c | wc -c > /tmp/j{n}) &"))
        .collect();
    let work = run(&mut s, &format!("{} wait; cat /tmp/j*", jobs.join(" ")));
    let done = work.lines().filter(|l| l.trim() == "4194304").count();
    assert_eq!(done, vcpus as usize, "every job finished with its 4 MiB: {work}");
    // The workload once seen to stop a 2-vCPU VM on one CPU (docs/scheduler.md).
    let work = run(
        &mut s,
        "dd if=/dev/zero bs=1M count=8 2>/dev/null | gzip -c > /tmp/a.gz & \
         seq 1 200000 | sort -nr | head -n 1 > /tmp/b; wait; gunzip -c /tmp/a.gz | wc -c; cat /tmp/b",
    );
    assert_output_line(&work, "8388608", "gzip round trip");
    assert_output_line(&work, "200000", "sort");
    let stat = run(&mut s, "cat /proc/stat");
    let ticks = busy_ticks(&stat, vcpus as usize);
    assert!(ticks.iter().all(|&t| t > 0), "every vCPU ran: {ticks:?}\n{stat}");
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0; console:\n{}", out.console);
}

#[test]
fn two_vcpus_of_one_linux_vm_on_one_cpu_boot_and_work() {
    overcommitted("overcommit-2-on-1", 2, &[1, 1], Machine { smp: 2, ..Machine::default() });
}

#[test]
fn four_vcpus_of_one_linux_vm_on_two_cpus_boot_and_work() {
    overcommitted("overcommit-4-on-2", 4, &[1, 1, 2, 2], Machine { smp: 3, ..Machine::default() });
}

/// The same on a GICv2, whose SGIs between the two vCPUs are GICD_SGIR writes posted per
/// source (docs/vgic.md, "Posted SGIs"), to a vCPU waiting off its CPU or not running.
#[test]
fn two_vcpus_of_one_linux_vm_on_one_cpu_of_a_gicv2_boot_and_work() {
    overcommitted("overcommit-2-on-1-gicv2", 2, &[1, 1], Machine { smp: 2, gic_version: 2, ..Machine::default() });
}
