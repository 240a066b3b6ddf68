//! The AArch64 hypervisor on QEMU's `raspi4b` (Raspberry Pi 4B), started as the Pi's
//! firmware starts a kernel: loaded at 0x80000, the device tree in x0 (Debian's
//! `bcm2711-rpi-4-b.dtb`, fixed up for QEMU: docs/deploy-rpi4.md), at EL2, the other three
//! CPUs waiting in a spin table, no PSCI. It finds the GIC-400 and the PL011 through the
//! buses' `ranges`, releases the three CPUs, runs a VM whose virtio devices are its own (the
//! board has none), and stops the machine through the power manager's watchdog. What
//! `cargo xtask qemu --board raspi4b` boots is what `cargo xtask deploy rpi4` writes for the
//! Pi's boot partition: the two-VM Pi manifest runs there, one VM owning the SD card and
//! the other pinging it, and its files are compared.

use std::time::Duration;

use system_tests::{
    assert_line, assert_output_line, images, one_linux_at_a_time, run, scratch_file, selftest_vm, wait_for_shell,
    BOOT_LIMIT, COMMAND_LIMIT, PROMPT, QEMU_TIMEOUT, RUN_LIMIT,
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

/// `cargo xtask ARGS` as a user runs it, in a target directory of its own (the one this
/// test runs from is busy).
fn xtask(args: &[&str]) -> std::process::Command {
    let root = xtask::images::workspace_root();
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.current_dir(&root)
        .env("CARGO_TARGET_DIR", root.join("target").join("xtask-run"))
        .args(["run", "--quiet", "-p", "xtask", "--"])
        .args(args);
    cmd
}

/// What a newcomer runs: `cargo xtask qemu --board raspi4b` prints each change it made to
/// the device tree, boots to a Linux shell that answers, and `poweroff` ends the VM, then
/// the machine (QEMU exits 0, and so does xtask).
#[test]
fn cargo_xtask_qemu_board_raspi4b_boots_linux_on_four_cpus_from_a_spin_table_and_powers_off() {
    let _alone = one_linux_at_a_time();
    let cmd = xtask(&["qemu", "--board", "raspi4b", "--timeout", "500"]);
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

/// Types a management console command (Ctrl-] opens its command line).
fn command(s: &mut Session, line: &str) {
    s.send_line(&format!("\x1d{line}")).unwrap_or_else(|e| panic!("{e}"));
}

/// The file the host puts on the card, and what the VM writes.
const HELLO: &[u8] = b"hello from the host, on the card\n";
const WRITTEN: &str = "written by the VM on its SD card";

/// The Pi manifest (manifests/rpi4-two-vms.toml) on QEMU raspi4b, as `cargo xtask qemu
/// --board raspi4b --manifest` boots it, with an SD card made on the host (an MBR and one
/// ext4 partition holding a file) in the SDHCI's slot: the board found and its four CPUs
/// started through the spin table; "front", identity-mapped, owning the SDHCI (its window
/// and SPI, docs/deploy-rpi4.md "The SD card in a VM"), mounts the card, reads the host's
/// file and writes its own; "back" pings it through the hypervisor's switch; the
/// management console lists both; the run ends with both powered off and the watchdog,
/// and the host finds front's file on the card. Then `cargo xtask deploy rpi4` into an
/// empty directory writes byte for byte the files QEMU booted. QEMU's SDHCI does PIO, so
/// DMA itself is not exercised: what is checked is the layout DMA relies on (the guest's
/// RAM where the board has it, the board's DMA translation in the guest's tree).
#[test]
fn the_two_vm_pi_manifest_boots_from_the_files_deploy_writes_one_vm_uses_the_sd_card_and_the_other_pings_it() {
    let _alone = one_linux_at_a_time();
    let manifest = "manifests/rpi4-two-vms.toml";
    let card = scratch_file("rpi4-two-vms-sd.img");
    xtask::rpi4_sd::write_card(&card, &[("hello.txt", HELLO)]).unwrap_or_else(|e| panic!("the card: {e}"));
    let card_arg = card.display().to_string();
    let cmd = xtask(&["qemu", "--board", "raspi4b", "--manifest", manifest, "--sd", &card_arg, "--timeout", "550"]);
    let mut s = Session::spawn(cmd, RUN_LIMIT, false).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("the boot partition `cargo xtask deploy rpi4` writes, in ", BOOT_LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let booted = std::path::PathBuf::from(s.wait_for("; QEMU loads", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}")));
    s.wait_for(&format!("the SD card {card_arg} in the SDHCI's slot, for VM front, which owns the SDHCI"), BOOT_LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    s.wait_for_all(BOARD_LINES, BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for_all(
        &[
            "hypervisor: vm0 front: 256 MiB RAM at IPA 0x20000000 (PA 0x20000000, identity-mapped)",
            "hypervisor: vm0 front: passthrough sdhci: 0xfe300000..0xfe301000 mapped at IPA 0xfe300000 \
             (Device-nGnRE, not executable), SPI(s) [158] granted",
            "front | guest: eth0 is 10.0.2.15",
            "back | guest: eth0 is 10.0.2.16",
        ],
        BOOT_LIMIT,
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // front has the console. Its view: its RAM where the board has it, and the controller
    // inside a bus that carries the board's DMA translation (bus 0xc000_0000 is CPU 0x0,
    // 1 GiB).
    s.send_line("").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(PROMPT, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let cpus = run(&mut s, "grep -c ^processor /proc/cpuinfo");
    assert_output_line(&cpus, "1", "front's one vCPU");
    let iomem = run(&mut s, "grep -i 'system ram' /proc/iomem");
    assert_output_line(&iomem, "20000000-2fffffff : System RAM", "front's RAM at IPA = PA");
    let bus = "/sys/firmware/devicetree/base/dma-bus@fe300000";
    let tree = run(&mut s, &format!("ls -1 {bus}; od -An -tx1 {bus}/dma-ranges | tr -d ' \\n'; echo"));
    assert_output_line(&tree, "bcm2835-sdhci@fe300000", "the controller's node, in the bus");
    assert_output_line(
        &tree,
        "00000000c000000000000000000000000000000040000000",
        "dma-ranges: bus 0xc0000000, CPU 0x0, 0x40000000 bytes",
    );
    // The card: the host's file read, front's own written and synced.
    let partitions = run(&mut s, "cat /proc/partitions");
    assert!(partitions.contains("mmcblk0p1"), "the card's partition:\n{partitions}");
    let read = run(&mut s, "mount -t ext4 /dev/mmcblk0p1 /mnt && cat /mnt/hello.txt");
    assert_output_line(&read, std::str::from_utf8(HELLO).unwrap().trim_end(), "the host's file, read by the VM");
    let wrote =
        run(&mut s, &format!("echo '{WRITTEN}' > /mnt/from-vm.txt && sync && umount /mnt && echo unmounted-$((40+2))"));
    assert_output_line(&wrote, "unmounted-42", "written, synced, unmounted");

    // The management console lists both VMs, running, each on a CPU of its own.
    command(&mut s, "list");
    let listed = s.wait_for("vm1 back:", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let listed = format!("{listed}vm1 back:{}", s.wait_for("\n", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}")));
    for vm in [
        "vm0 front: running, 1 vCPU(s) shared on CPUs [1], 256 MiB, has the console; ",
        "vm1 back: running, 1 vCPU(s) shared on CPUs [2], 256 MiB; ",
    ] {
        assert!(listed.contains(vm), "`list` shows {vm:?}:\n{listed}");
    }

    // back pings front through the switch; once front has powered off, no one answers.
    command(&mut s, "focus back");
    s.wait_for("hyp: console input goes to vm1 back", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.send_line("").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(PROMPT, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let ping = run(&mut s, "ping -c 3 -W 5 10.0.2.15");
    assert!(ping.contains("3 packets transmitted, 3 packets received"), "back pings front: {ping}");
    command(&mut s, "focus front");
    s.wait_for("hyp: console input goes to vm0 front", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.send_line("poweroff").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: vm0 front ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    command(&mut s, "focus back");
    s.wait_for("hyp: console input goes to vm1 back", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.send_line("").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(PROMPT, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let ping = run(&mut s, "ping -c 1 -W 2 10.0.2.15 >/dev/null; echo ping-status-$?");
    assert_output_line(&ping, "ping-status-1", "front is gone: back's ping finds no one");
    s.send_line("poweroff").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: vm1 back ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: all 2 VM(s) ended: 2 clean, 0 failed", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(HALT_LINE, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.wait_for_end(Duration::from_secs(60)), "QEMU ends once the watchdog fires");
    let out = s.finish();
    assert!(!out.timed_out, "killed at the deadline; console:\n{}", out.console);
    assert_eq!(out.status, Some(0), "xtask exits 0 when QEMU does; console:\n{}", out.console);
    assert!(!out.console.contains("hypervisor: panic"), "{}", out.console);
    let found =
        xtask::rpi4_sd::read_from_card(&card, "from-vm.txt").unwrap_or_else(|e| panic!("reading the card: {e}"));
    assert_eq!(found.as_deref(), Some(format!("{WRITTEN}\n").as_bytes()), "front's file is on the card");
    let hello = xtask::rpi4_sd::read_from_card(&card, "hello.txt").unwrap_or_else(|e| panic!("reading the card: {e}"));
    assert_eq!(hello.as_deref(), Some(HELLO), "the host's file is as it was");

    // What deploy writes for the card is what QEMU booted, byte for byte.
    let card = scratch_file("rpi4-deploy-card");
    let _ = std::fs::remove_dir_all(&card);
    let deployed = xtask(&["deploy", "rpi4", &card.display().to_string(), "--manifest", manifest])
        .output()
        .expect("run cargo xtask deploy");
    let said = String::from_utf8_lossy(&deployed.stderr);
    assert!(deployed.status.success(), "deploy: {said}");
    for name in ["config.txt", "hypervisor8.img", "hypervisor.bundle"] {
        let (on_card, booted_file) = (card.join(name), booted.join(name));
        let (a, b) =
            (std::fs::read(&on_card).expect("deploy wrote it"), std::fs::read(&booted_file).expect("QEMU booted it"));
        assert!(
            a == b,
            "{} ({} bytes) differs from {} ({} bytes)",
            on_card.display(),
            a.len(),
            booted_file.display(),
            b.len()
        );
    }
    for f in xtask::deploy::FIRMWARE_FILES {
        assert!(said.contains(f.path), "deploy names the firmware's {}: {said}", f.path);
        assert!(!card.join(f.path).exists(), "deploy downloads nothing: {} is the user's to copy", f.path);
    }
    // On QEMU the firmware's device tree is Debian's, fixed up: the one every raspi4b run uses.
    let fixed = xtask::images::images_dir().join("bcm2711-rpi-4-b-qemu.dtb");
    assert_eq!(std::fs::read(booted.join("bcm2711-rpi-4-b.dtb")).unwrap(), std::fs::read(fixed).unwrap());
    std::fs::remove_dir_all(&card).unwrap();
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
    assert_line(&out, "selftest | ok 16 - psci: CPU_ON starts vCPU 1 with its context id in x0");
    assert_line(&out, "selftest | selftest: all 29 checks passed; powering off with PSCI SYSTEM_OFF");
    assert_line(&out, HALT_LINE);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
}
