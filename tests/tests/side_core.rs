//! A Linux VM whose virtio disk and NIC a side core serves (docs/virtio.md, "The side
//! core"): CPU 2 runs no vCPU and polls the VM's virtqueues. Data written to the disk reads
//! back the same, the host reaches the guest's httpd through the NIC, the side core's log
//! shows it polling under load and sleeping when idle, more than once; and a VM destroyed
//! while its requests are in flight ends cleanly.

use system_tests::{
    assert_output_line, free_local_port, http_get, linux_vm_on_network, one_linux_at_a_time, run, scratch_file,
    start_session, wait_for_shell, COMMAND_LIMIT, RUN_LIMIT,
};
use xtask::bundle::{DiskSlice, VmDevices, VmEntry};
use xtask::qemu::{Machine, Session};

/// The side core's CPU: the VM's 2 vCPUs are pinned to CPUs 0 and 1.
const IO_CPU: u32 = 2;

fn served_vm() -> VmEntry {
    let vm = linux_vm_on_network("linux", 2, "10.0.2.15");
    let devices = VmDevices { disk: Some(DiskSlice { offset: 0, size: 0 }), io_cpu: Some(IO_CPU), ..vm.devices };
    VmEntry { devices, ..vm }
}

fn machine(name: &str, port: u16) -> Machine {
    let image = scratch_file(name);
    let _ = std::fs::remove_file(&image);
    xtask::images::create_disk(&image, 64 << 20).expect("create the disk image");
    Machine { smp: 3, disk: Some(image), network: Some(vec![(port, 80)]), ..Machine::default() }
}

/// The SHA-256 digest `sha256sum` printed for `file`.
fn digest(output: &str, file: &str) -> String {
    output
        .lines()
        .filter_map(|l| l.trim().strip_suffix(&format!("  {file}")))
        .find(|sum| sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("sha256sum of {file}: {output}"))
        .to_string()
}

/// The highest transition number of the side core's log lines `idle -> polling (wake N;`
/// or `polling -> idle (sleep N;`.
fn last_transition(console: &str, what: &str) -> u64 {
    let marker = format!("hypervisor: io cpu{IO_CPU}: {what} ");
    console
        .lines()
        .filter_map(|l| l.split_once(&marker).map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once(' ').and_then(|(_, n)| n.split(';').next()?.parse().ok()))
        .max()
        .unwrap_or(0)
}

/// The side core's wakes and sleeps so far, from the management console's `list` (its line
/// `io cpuN: MODE; P passes, B busy, D dozes, W wakes, S sleeps, ...`).
fn side_core_counts(s: &mut Session) -> (u64, u64) {
    s.send_line("\x1dlist").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(&format!("io cpu{IO_CPU}: "), COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let line = s.wait_for(" busy ticks", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let count = |what: &str| {
        line.split(", ")
            .find_map(|f| f.strip_suffix(what)?.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("`list` gives the side core's{what}: {line:?}"))
    };
    (count(" wakes"), count(" sleeps"))
}

/// Writes 16 MiB of random data to the disk with O_DIRECT, reads it back the same way and
/// compares the digests.
fn disk_round(s: &mut Session, seek_mib: u32) {
    let out = run(
        s,
        &format!(
            "dd if=/dev/urandom of=/tmp/src bs=1M count=16 2>/dev/null; sha256sum /tmp/src; \
             dd if=/tmp/src of=/dev/vda bs=1M seek={seek_mib} oflag=direct 2>/dev/null; \
             dd if=/dev/vda of=/tmp/back bs=1M skip={seek_mib} count=16 iflag=direct 2>/dev/null; \
             sha256sum /tmp/back; rm /tmp/src /tmp/back"
        ),
    );
    assert_eq!(digest(&out, "/tmp/src"), digest(&out, "/tmp/back"), "the disk gives back what was written: {out}");
}

#[test]
fn a_side_core_serves_the_disk_and_nic_of_a_linux_vm_polling_under_load_and_sleeping_when_idle() {
    let _alone = one_linux_at_a_time();
    let port = free_local_port();
    let mut s = start_session("side-core", machine("side-core.img", port), &[served_vm()], RUN_LIMIT);
    wait_for_shell(&mut s);
    assert!(
        s.console().contains(&format!("hypervisor: cpu{IO_CPU} is a side core")),
        "the side core is announced: {}",
        s.console()
    );
    // The boot's I/O (the drivers' probes) woke it already; it sleeps when they are idle.
    disk_round(&mut s, 0);
    run(&mut s, "sleep 1");
    assert!(
        last_transition(&s.console(), "idle -> polling") >= 1 && last_transition(&s.console(), "polling -> idle") >= 1,
        "idle -> polling -> idle under the disk's load, logged: {}",
        s.console()
    );
    // The log says only the first transitions and then every power of two; `list` counts all.
    let (wakes, sleeps) = side_core_counts(&mut s);
    assert!(wakes >= 1 && sleeps >= 1, "idle -> polling -> idle under the disk's load: {}", s.console());

    // The network: the host fetches the guest's page, the guest pings QEMU's gateway.
    let page = http_get(port, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}\nconsole:\n{}", s.console()));
    assert!(page.contains("200 OK") && page.contains("hello from guest"), "the guest's page: {page}");
    let ping = run(&mut s, "ping -c 3 -W 5 10.0.2.2");
    assert!(ping.contains("3 packets received"), "the guest pings the gateway: {ping}");

    // Idle again, then busy again: the side core wakes and sleeps once more at least.
    run(&mut s, "sleep 1");
    disk_round(&mut s, 32);
    run(&mut s, "sleep 1");
    let (wakes_now, sleeps_now) = side_core_counts(&mut s);
    let console = s.console();
    assert!(wakes_now > wakes, "woken again ({wakes} then {wakes_now} wakes): {console}");
    assert!(sleeps_now > sleeps, "asleep again ({sleeps} then {sleeps_now} sleeps): {console}");
    // The side core's log, for the test's output (`--nocapture`).
    for line in console.lines().filter(|l| l.contains(&format!("io cpu{IO_CPU}")) || l.contains("side core")) {
        eprintln!("{line}");
    }
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0; console:\n{}", out.console);
}

#[test]
fn a_vm_whose_side_core_has_requests_in_flight_is_destroyed_cleanly() {
    let _alone = one_linux_at_a_time();
    let port = free_local_port();
    let mut s = start_session("side-core-destroy", machine("side-core-destroy.img", port), &[served_vm()], RUN_LIMIT);
    wait_for_shell(&mut s);
    // Writes that go on until the VM is destroyed, in the background.
    let started = run(
        &mut s,
        "(while true; do dd if=/dev/zero of=/dev/vda bs=1M count=32 oflag=direct 2>/dev/null; done) & echo started",
    );
    assert_output_line(&started, "started", "the writes run");
    run(&mut s, "sleep 1");
    s.send_line("\x1ddestroy linux").unwrap();
    for line in [
        "hypervisor: vm0 linux ended: Destroyed (clean)",
        "hypervisor: vm0 linux: capabilities revoked",
        "hypervisor: all 1 VM(s) ended: 1 clean, 0 failed",
    ] {
        s.wait_for(line, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    }
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0; console:\n{}", out.console);
    assert!(!out.console.contains("panic"), "{}", out.console);
}
