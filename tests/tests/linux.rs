//! Debian Linux under the hypervisor, driven at its console like a user: boot to the shell,
//! look at the vCPUs and interrupts, run a workload, power off or reboot. Console input
//! goes host UART -> hypervisor -> the VM's PL011 -> its receive interrupt.

use system_tests::{
    assert_output_line, linux_vm, one_linux_at_a_time, run, start_session, wait_for_shell, BOOT_LIMIT, COMMAND_LIMIT,
    RUN_LIMIT,
};
use xtask::qemu::{Machine, Session};

/// The per-CPU counts of the /proc/interrupts line that ends with `name`.
fn interrupt_counts(interrupts: &str, name: &str, cpus: usize) -> Vec<u64> {
    let line = interrupts
        .lines()
        .find(|l| l.trim_end().ends_with(name))
        .unwrap_or_else(|| panic!("no {name} line in /proc/interrupts:\n{interrupts}"));
    let counts: Vec<u64> = line.split_whitespace().skip(1).take(cpus).filter_map(|c| c.parse().ok()).collect();
    assert_eq!(counts.len(), cpus, "a count per CPU in {line:?}");
    counts
}

/// Boot, look around, work, power off: the VM ends cleanly and QEMU exits 0.
fn boot_use_and_power_off(test: &str, machine: Machine, gic_label: &str) {
    let _alone = one_linux_at_a_time();
    let mut s = start_session(test, machine, &[linux_vm(2)], RUN_LIMIT);
    wait_for_shell(&mut s);

    assert_guest_is_seeded(&mut s);
    let uname = run(&mut s, "uname -a");
    assert!(uname.contains("Linux guest 6.") && uname.contains("aarch64"), "uname -a: {uname}");

    let processors = run(&mut s, "grep -c ^processor /proc/cpuinfo");
    assert_output_line(&processors, "2", "both vCPUs in /proc/cpuinfo");
    // The vCPUs share one last-level cache (hyp_core::guest_fdt): a block request completes
    // on the vCPU its interrupt reaches, without an IPI to the one that issued it.
    let llc = run(
        &mut s,
        "cat /sys/devices/system/cpu/cpu1/cache/index2/level /sys/devices/system/cpu/cpu1/cache/index2/shared_cpu_list",
    );
    assert_output_line(&llc, "2", "an L2 cache");
    assert_output_line(&llc, "0-1", "shared by both vCPUs");

    // A workload on both vCPUs: compress and checksum 8 MiB twice in parallel.
    let work = run(
        &mut s,
        "dd if=/dev/zero bs=1M count=8 2>/dev/null | gzip -c > /tmp/a.gz & \
         seq 1 200000 | sort -nr | head -n 1 > /tmp/b; wait; \
         gunzip -c /tmp/a.gz | sha256sum; cat /tmp/b",
    );
    assert!(
        work.contains("2daeb1f36095b44b318410b3f4e8b5d989dcc7bb023d1426c492dab0a3053e74"),
        "sha256 of 8 MiB of zeros after a gzip round trip: {work}"
    );
    assert_output_line(&work, "200000", "sort");

    let interrupts = run(&mut s, "cat /proc/interrupts");
    let timer = interrupt_counts(&interrupts, "arch_timer", 2);
    assert!(timer.iter().all(|&n| n > 0), "the timer ticks on both vCPUs: {timer:?}\n{interrupts}");
    let timer_line = interrupts.lines().find(|l| l.trim_end().ends_with("arch_timer")).unwrap_or_default();
    assert!(timer_line.contains(gic_label), "the timer is the {gic_label}'s PPI 27: {timer_line}");
    let uart = interrupt_counts(&interrupts, "uart-pl011", 2);
    assert!(uart.iter().sum::<u64>() > 0, "typed input raised the PL011's interrupt: {uart:?}");
    let ipis = interrupt_counts(&interrupts, "Rescheduling interrupts", 2);
    assert!(ipis.iter().sum::<u64>() > 0, "SGIs between the vCPUs: {ipis:?}");

    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0 after the VM powered off; console:\n{}", out.console);
}

#[test]
fn linux_boots_to_a_shell_that_works_on_gicv3_and_powers_off() {
    boot_use_and_power_off("linux-gicv3", Machine::default(), "GICv3");
}

#[test]
fn linux_boots_to_a_shell_that_works_on_gicv2_and_powers_off() {
    boot_use_and_power_off("linux-gicv2", Machine { gic_version: 2, smp: 2, ..Machine::default() }, "GIC-0");
}

#[test]
fn linux_reboots_and_comes_back() {
    let _alone = one_linux_at_a_time();
    let mut s = start_session("linux-reboot", Machine::default(), &[linux_vm(2)], RUN_LIMIT);
    wait_for_shell(&mut s);
    run(&mut s, "echo first boot > /tmp/marker");
    let first_start = kernel_start_address(&mut s);
    s.send_line("reboot").unwrap();
    s.wait_for("SYSTEM_RESET: the VM reboots", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    wait_for_shell(&mut s);
    let marker = run(&mut s, "cat /tmp/marker 2>&1; grep -c ^processor /proc/cpuinfo");
    assert!(marker.contains("No such file"), "a fresh boot, tmpfs empty: {marker}");
    assert_output_line(&marker, "2", "both vCPUs again");
    // New seeds (docs/entropy.md): with another kaslr-seed the kernel lies elsewhere.
    let second_start = kernel_start_address(&mut s);
    assert_ne!(first_start, second_start, "the reboot got the first boot's kaslr-seed again");
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.finish().status, Some(0));
}

/// Where the kernel placed itself (KASLR), from /proc/kallsyms.
fn kernel_start_address(s: &mut Session) -> u64 {
    let out = run(s, "grep -w _stext /proc/kallsyms");
    out.lines()
        .find_map(|l| l.trim().strip_suffix(" T _stext"))
        .and_then(|address| u64::from_str_radix(address, 16).ok())
        .filter(|&address| address != 0)
        .unwrap_or_else(|| panic!("no address of _stext in /proc/kallsyms: {out}"))
}

/// What a newcomer runs: `cargo xtask qemu` with no arguments reaches a shell on the
/// terminal, with 2 vCPUs, and `poweroff` ends it with status 0.
#[test]
fn cargo_xtask_qemu_with_no_arguments_gives_a_usable_shell() {
    let _alone = one_linux_at_a_time();
    let root = xtask::images::workspace_root();
    let mut cmd = std::process::Command::new(env!("CARGO"));
    // Its own target directory: the one this test runs from is busy.
    // Its own disk and a free port, so a developer's `vm-disks/` and port 8080 are left alone.
    let disk = system_tests::scratch_file("xtask-qemu-disk.img");
    let _ = std::fs::remove_file(&disk);
    xtask::images::create_disk(&disk, 64 << 20).expect("create the disk image");
    let port = system_tests::free_local_port().to_string();
    cmd.current_dir(&root).env("CARGO_TARGET_DIR", root.join("target").join("xtask-run")).args([
        "run",
        "--quiet",
        "-p",
        "xtask",
        "--",
        "qemu",
        "--timeout",
        "500",
        "--disk",
        disk.to_str().expect("a UTF-8 path"),
        "--http-port",
        &port,
    ]);
    let mut s = Session::spawn(cmd, RUN_LIMIT, false).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("to leave: `poweroff` in the guest", BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    wait_for_shell(&mut s);
    let processors = run(&mut s, "grep -c ^processor /proc/cpuinfo");
    assert_output_line(&processors, "2", "the default VM has 2 vCPUs");
    let disk = run(&mut s, "cat /sys/block/vda/size");
    assert_output_line(&disk, "131072", "its disk is the 64 MiB image given with --disk, in sectors");
    let page = system_tests::http_get(port.parse().expect("a port"), COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(page.contains("hello from guest"), "the guest's httpd answers on the forwarded port: {page}");
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let out = s.finish();
    assert_eq!(out.status, Some(0), "cargo xtask qemu exits 0; console:\n{}", out.console);
}

/// `--dtb`: the tree the user gives is the one Linux boots with (here: the generated one
/// with its model renamed), with /chosen still set by the hypervisor (the initramfs is
/// found, the console is the PL011).
#[test]
fn a_given_device_tree_is_the_one_linux_boots_with() {
    let _alone = one_linux_at_a_time();
    let mut tree = hyp_core::guest_fdt::build(&hyp_core::guest_fdt::GuestPlatform {
        vcpus: 2,
        ram_base: 0x4000_0000,
        ram_size: 256 << 20,
        gic: hyp_core::guest_fdt::GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 },
        uart_base: 0x0900_0000,
        uart_spi: 1,
        virtio_mmio: Vec::new(),
        pci: None,
        passthrough: Vec::new(),
        bootargs: "this is replaced".into(),
        initrd: None,
        seeds: None,
    })
    .expect("a device tree");
    // Same length, so the tree's offsets stay valid.
    let (generated, given) = (b"hypervisor virtual machine", b"user-given virtual machine");
    let at = tree.windows(generated.len()).position(|w| w == generated).expect("the model in the tree");
    tree[at..at + given.len()].copy_from_slice(given);
    let path = system_tests::scratch_file("user-given.dtb");
    std::fs::write(&path, tree).expect("write the tree");

    let vm = xtask::bundle::VmEntry { device_tree: Some(path), ..linux_vm(2) };
    let mut s = start_session("linux-dtb", Machine::default(), &[vm], RUN_LIMIT);
    wait_for_shell(&mut s);
    let seen = run(&mut s, "cat /proc/device-tree/model; echo; cat /proc/cmdline");
    assert!(seen.contains("user-given virtual machine"), "the given tree's model: {seen}");
    assert!(seen.contains("console=ttyAMA0 earlycon"), "the hypervisor set /chosen/bootargs: {seen}");
    assert_guest_is_seeded(&mut s);
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.finish().status, Some(0));
}

/// The hypervisor gave the guest `/chosen/rng-seed` and `kaslr-seed` (docs/entropy.md): its
/// random number generator is ready from the start and its kernel placed at random.
fn assert_guest_is_seeded(s: &mut Session) {
    let log = run(s, "dmesg | grep -e 'crng init done' -e KASLR");
    assert!(log.contains("crng init done"), "the guest's CRNG was seeded at boot: {log}");
    assert!(!log.contains("KASLR disabled"), "the guest had a KASLR seed: {log}");
}

/// A guest kernel that panics stops only its own VM: the other VM's shell goes on working
/// and powers off cleanly.
#[test]
fn a_guest_that_panics_does_not_stop_the_other_vm() {
    let _alone = one_linux_at_a_time();
    let panicking = xtask::bundle::VmEntry {
        name: "doomed".into(),
        // No init in the initramfs and no root filesystem: the kernel panics and, with
        // panic=0, spins for ever.
        bootargs: Some("console=ttyAMA0 panic=0 rdinit=/no/such/init init=/no/such/init".into()),
        ..linux_vm(1)
    };
    let mut s = start_session("linux-panic", Machine::default(), &[linux_vm(2), panicking], RUN_LIMIT);
    let before = s.wait_for("Kernel panic - not syncing", BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let line = before.rsplit('\n').next().unwrap_or_default();
    assert!(line.starts_with("doomed | "), "the panic is the doomed VM's: {line:?}");
    wait_for_shell(&mut s);
    let work = run(&mut s, "seq 1 1000 | sort -nr | head -n 1");
    assert_output_line(&work, "1000", "the healthy VM works");
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    // The panicked VM still holds its CPU: the machine runs on until the session is dropped.
    assert!(!s.console().contains("hypervisor: all"), "the panicked VM did not end:\n{}", s.console());
    assert!(!s.console().contains("hypervisor: panic"), "{}", s.console());
}
