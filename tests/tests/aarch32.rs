//! 32-bit guests on the AArch64 hypervisor (issue: ARMv7, point 4): Debian's armhf kernel
//! (a zImage) runs at EL1 in AArch32 beside an arm64 VM on one board. Both boot to their
//! shells; the 32-bit one sees an ARMv7 CPU and its two vCPUs, has its virtio console,
//! reaches the arm64 VM over the hypervisor's switch, and keeps what it wrote on its disk
//! slice across a second boot.

use std::time::Duration;

use system_tests::{
    assert_output_line, check_virtio_console, linux_armhf, linux_vm_on_network, one_linux_at_a_time, placed, run,
    scratch_file, start_session, wait_for_shell_and, RUN_LIMIT,
};
use xtask::bundle::{DiskSlice, Policy, VmEntry};
use xtask::qemu::{Machine, Session};

const SLICE: u64 = 64 << 20;

/// The two VMs: "arm32" (armhf, 2 vCPUs on CPUs 0 and 1, the first disk slice) and "arm64"
/// (1 vCPU on CPU 2, the second), each on the switch.
fn vms() -> [VmEntry; 2] {
    let l = linux_armhf();
    let arm32 = linux_vm_on_network("arm32", 2, "10.0.2.16");
    let arm32 = VmEntry { kernel: l.kernel.clone(), initrd: Some(l.initrd.clone()), ..arm32 };
    let with_disk = |vm: VmEntry, offset| VmEntry {
        devices: xtask::bundle::VmDevices { disk: Some(DiskSlice { offset, size: SLICE }), ..vm.devices },
        ..vm
    };
    [
        placed(with_disk(arm32, 0), &[0, 1], Policy::Pinned),
        placed(with_disk(linux_vm_on_network("arm64", 1, "10.0.2.15"), SLICE), &[2], Policy::Pinned),
    ]
}

fn boot_both(test: &str, disk: &std::path::Path) -> Session {
    let machine = Machine {
        smp: 3,
        memory_mib: 2048,
        disk: Some(disk.to_path_buf()),
        network: Some(Vec::new()),
        ..Machine::default()
    };
    let mut s = start_session(test, machine, &vms(), RUN_LIMIT);
    // arm32, the first VM, has the console.
    wait_for_shell_and(&mut s, "arm32", &["arm32 | guest: eth0 is 10.0.2.16", "arm64 | guest: eth0 is 10.0.2.15"]);
    s
}

/// Ends the run: the arm64 VM through the management console, then arm32 by `poweroff`.
fn power_off(mut s: Session) -> String {
    s.send_line("\x1ddestroy arm64").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: vm1 arm64 ended: Destroyed (clean)", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    s.send_line("poweroff").unwrap_or_else(|e| panic!("{e}"));
    assert!(s.wait_for_end(Duration::from_secs(120)), "QEMU ends when both VMs have");
    s.finish().console
}

#[test]
fn an_armhf_linux_vm_runs_in_aarch32_beside_an_arm64_one_reaches_it_and_keeps_its_disk() {
    let _alone = one_linux_at_a_time();
    let disk = scratch_file("aarch32-disk.img");
    let _ = std::fs::remove_file(&disk);
    xtask::images::create_disk(&disk, 2 * SLICE).expect("create the disk image");

    let mut s = boot_both("aarch32-first", &disk);
    assert!(s.console().contains("hypervisor: vm0 arm32 vcpu0: starting at IPA 0x42000000 (Aarch32)"));
    let cpu = run(&mut s, "uname -m; grep -c ^processor /proc/cpuinfo; grep -m1 'CPU architecture' /proc/cpuinfo");
    assert_output_line(&cpu, "armv7l", "the guest runs a 32-bit ARMv7 userland and kernel");
    assert_output_line(&cpu, "2", "both vCPUs are up");
    assert_output_line(&cpu, "CPU architecture: 7", "an ARMv7 CPU, as the sanitised ID registers say");
    let gateway = run(&mut s, "ping -c 3 -W 5 10.0.2.2");
    assert!(gateway.contains("3 packets transmitted, 3 packets received"), "QEMU's gateway: {gateway}");
    check_virtio_console(&mut s);
    // Through the switch to the arm64 VM; on a failure, what arm32's stack and NIC saw.
    let ping = run(&mut s, "ping -c 6 -W 3 10.0.2.15");
    if !ping.contains("6 packets transmitted, 6 packets received") {
        let seen = run(
            &mut s,
            "grep -A1 -E '^(Ip|Icmp):' /proc/net/snmp; grep eth0 /proc/net/dev; grep virtio /proc/interrupts",
        );
        panic!("arm32 reaches arm64: {ping}\n{seen}");
    }
    let made = run(
        &mut s,
        "mke2fs -q /dev/vda && mount -t ext4 /dev/vda /mnt && uname -a > /mnt/written-by-arm32 && sync && \
         umount /mnt && echo written",
    );
    assert_output_line(&made, "written", "its disk slice formatted, written and unmounted");
    let console = power_off(s);
    assert!(console.contains("all 2 VM(s) ended: 2 clean, 0 failed"), "{console}");

    // Again: what it wrote is on its slice.
    let mut s = boot_both("aarch32-second", &disk);
    let read = run(&mut s, "mount -t ext4 /dev/vda /mnt && cat /mnt/written-by-arm32 && umount /mnt");
    assert!(read.contains("armv7l GNU/Linux"), "the file the first boot wrote: {read}");
    power_off(s);
}
