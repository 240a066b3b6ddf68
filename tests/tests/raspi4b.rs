//! The AArch64 hypervisor on QEMU's `raspi4b` (Raspberry Pi 4B), started as the Pi's
//! firmware starts a kernel: loaded at 0x80000, the device tree in x0 (Debian's
//! `bcm2711-rpi-4-b.dtb`, fixed up for QEMU: docs/deploy-rpi4.md), at EL2, the other three
//! CPUs waiting in a spin table, no PSCI. It finds the GIC-400 and the PL011 through the
//! buses' `ranges`, releases the three CPUs, runs a VM whose virtio devices are its own (the
//! board has none), and stops the machine through the power manager's watchdog.

use std::time::Duration;

use system_tests::{
    assert_line, assert_output_line, images, one_linux_at_a_time, run, scratch_file, selftest_vm, wait_for_shell,
    BOOT_LIMIT, COMMAND_LIMIT, QEMU_TIMEOUT, RUN_LIMIT,
};
use xtask::bundle::{self, BundleOptions};
use xtask::qemu::{self, Machine, QemuBoard, Session};

/// What the hypervisor prints of the board, whichever guest it runs.
const BOARD_LINES: &[&str] = &[
    "hypervisor 0.1.0 (AArch64, EL2) on Raspberry Pi 4 Model B",
    "  image       0x80000..",
    "  memory      0x0..0x3c000000 (960 MiB)",
    "  cpus        4 (MPIDR [0, 1, 2, 3])",
    "  gic         GICv2: GICD 0xff841000..0xff842000 GICC 0xff842000..0xff844000 GICH 0xff844000..0xff846000 GICV 0xff846000..0xff848000",
    "  uart        PL011 at 0xfe201000..0xfe201200 (stdout-path), INTID 153",
    "  power       BCM2835 power manager at 0xfe100000..0xfe100114",
    "  psci        none: the firmware has no /psci node",
    "hypervisor: cpu1 (MPIDR 0x1) released from its spin table (release address 0xe0)",
    "hypervisor: cpu1 (MPIDR 0x1) online",
    "hypervisor: cpu2 (MPIDR 0x2) released from its spin table (release address 0xe8)",
    "hypervisor: cpu2 (MPIDR 0x2) online",
    "hypervisor: cpu3 (MPIDR 0x3) released from its spin table (release address 0xf0)",
    "hypervisor: cpu3 (MPIDR 0x3) online",
    "hypervisor: 4 of 4 CPUs online",
    "hypervisor: SGIs reach the other CPUs: 3 of 3 answered",
];

/// How the run ends: the VMs are over and the machine has no PSCI.
const HALT_LINE: &str =
    "hypervisor: no PSCI: halting the machine through the BCM2835 power manager's watchdog at 0xfe100000";

/// What a newcomer runs: `cargo xtask qemu --board raspi4b` prints each change it made to
/// the device tree, boots to a Linux shell that answers, and `poweroff` ends the VM, then
/// the machine (QEMU exits 0, and so does xtask).
#[test]
fn cargo_xtask_qemu_board_raspi4b_boots_linux_on_four_cpus_from_a_spin_table_and_powers_off() {
    let _alone = one_linux_at_a_time();
    let root = xtask::images::workspace_root();
    let mut cmd = std::process::Command::new(env!("CARGO"));
    // Its own target directory: the one this test runs from is busy.
    cmd.current_dir(&root).env("CARGO_TARGET_DIR", root.join("target").join("xtask-run")).args([
        "run",
        "--quiet",
        "-p",
        "xtask",
        "--",
        "qemu",
        "--board",
        "raspi4b",
        "--timeout",
        "500",
    ]);
    let mut s = Session::spawn(cmd, RUN_LIMIT, false).unwrap_or_else(|e| panic!("{e}"));
    // xtask's own lines come on its stderr, which the session marks where each read of it
    // begins: a line may be split after its "xtask: ", so only what follows is looked for.
    s.wait_for_all(
        &[
            "  /chosen: stdout-path = \"serial0:115200n8\", was \"serial1:115200n8\"",
            "  /soc/interrupt-controller@7ef00100: status = \"disabled\"",
            "  /soc/hdmi@7ef00700: status = \"disabled\"",
        ],
        BOOT_LIMIT,
    )
    .unwrap_or_else(|e| panic!("the device tree's fix-ups are printed: {e}"));
    s.wait_for_all(BOARD_LINES, BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    wait_for_shell(&mut s);

    let uname = run(&mut s, "uname -m; grep -c ^processor /proc/cpuinfo");
    assert_output_line(&uname, "aarch64", "uname -m");
    assert_output_line(&uname, "2", "the VM's 2 vCPUs, on two of the CPUs the spin table released");
    // The VM's virtio devices: the hypervisor's emulation at the guest's virtio-mmio
    // windows (IPA 0x0a00_0000 up), a console (device ID 3) and a NIC (1).
    let virtio = run(&mut s, "cat /sys/bus/virtio/devices/*/device; grep virtio /proc/iomem");
    assert_output_line(&virtio, "0x0003", "a virtio console");
    assert_output_line(&virtio, "0x0001", "a virtio NIC");
    assert!(
        virtio.lines().any(|l| l.trim_start().starts_with("0a00") && l.contains("virtio")),
        "the virtio-mmio windows are at the guest's 0x0a00_0000: {virtio}"
    );

    s.send_line("poweroff").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: all 1 VM(s) ended: 1 clean, 0 failed", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(HALT_LINE, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.wait_for_end(Duration::from_secs(60)), "QEMU ends once the watchdog fires");
    let out = s.finish();
    assert!(!out.timed_out, "killed at the deadline; console:\n{}", out.console);
    assert_eq!(out.status, Some(0), "xtask exits 0 when QEMU does; console:\n{}", out.console);
}

/// The selftest guest checks the hypervisor from the inside on the Pi 4 (its PSCI CPU_ON
/// starts a vCPU on a CPU the spin table released; the GIC-400's virtual interface; the
/// device tree it is given), and the run ends with QEMU's exit status 0 through the
/// watchdog, the semihosting exit being only for failures.
#[test]
fn the_selftest_guest_passes_on_raspi4b() {
    let _alone = one_linux_at_a_time();
    let linux = system_tests::linux();
    let (dtb, _) = xtask::rpi4::qemu_device_tree(linux).unwrap_or_else(|e| panic!("the device tree: {e}"));
    let hypervisor = xtask::rpi4::image_at_firmware_address(&images().hypervisor)
        .unwrap_or_else(|e| panic!("the image at 0x80000: {e}"));
    let blob = bundle::write(&[selftest_vm(64 << 20)], &BundleOptions { semihosting_exit: true, test_el2_fault: None })
        .unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file("raspi4b-selftest.bundle");
    std::fs::write(&path, blob).expect("write bundle");
    let machine = Machine { board: QemuBoard::Raspi4b { dtb }, semihosting: true, ..Machine::default() };
    let out = qemu::run_captured(machine.command(&hypervisor, Some(&path)), QEMU_TIMEOUT, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"));
    assert!(!out.timed_out, "QEMU did not finish within {QEMU_TIMEOUT:?}; console:\n{}", out.console);
    for line in BOARD_LINES {
        assert_line(&out, line.trim_start());
    }
    assert_line(&out, "selftest | ok 15 - psci: CPU_ON starts vCPU 1 with its context id in x0");
    assert_line(&out, "selftest | selftest: all 28 checks passed; powering off with PSCI SYSTEM_OFF");
    assert_line(&out, HALT_LINE);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
}
