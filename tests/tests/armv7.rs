//! The ARMv7 image (issue: ARMv7): the hypervisor in HYP mode on QEMU `virt` with
//! Cortex-A15s and a GICv2 runs Debian's armhf Linux (a zImage, 2 vCPUs) to its shell, with
//! the emulated PL011, a virtio disk whose contents outlive the VM, a virtio NIC on the
//! switch's uplink, its virtio console, and `poweroff` ending the run cleanly; and on QEMU's
//! Versatile Express (`vexpress-a15`), from Debian's device tree for it, with both CPUs and
//! console input.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use hyp_core::bundle::VirtioTransport;
use system_tests::{
    assert_output_line, check_virtio_console, linux_armhf, linux_vm_on_network, one_linux_at_a_time, placed, run,
    scratch_file, wait_for_shell, BOOT_LIMIT, COMMAND_LIMIT, RUN_LIMIT,
};
use xtask::bundle::{self, BundleOptions, DiskSlice, Policy, VmDevices, VmEntry};
use xtask::qemu::{Arch, Machine, QemuBoard, Session};

/// The ARMv7 hypervisor image (built once).
fn hypervisor() -> &'static std::path::PathBuf {
    static IMAGE: OnceLock<std::path::PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| xtask::images::build_hypervisor_armv7().unwrap_or_else(|e| panic!("the ARMv7 image: {e}")))
}

/// An armhf Linux VM with `vcpus` vCPUs at `address`, with the disk slice at `offset`
/// (`size` 0: to the disk's end).
fn armhf_vm(name: &str, vcpus: u32, address: &str, offset: u64, size: u64) -> VmEntry {
    let l = linux_armhf();
    let vm = linux_vm_on_network(name, vcpus, address);
    VmEntry {
        kernel: l.kernel.clone(),
        initrd: Some(l.initrd.clone()),
        devices: VmDevices { disk: Some(DiskSlice { offset, size }), ..vm.devices },
        ..vm
    }
}

/// Boots the ARMv7 hypervisor with `vms` on a 2-CPU Cortex-A15 board with the disk `disk`
/// and an uplink, until its banner.
fn start_vms(test: &str, disk: &Path, vms: &[VmEntry]) -> Session {
    let blob = bundle::write(vms, &BundleOptions::default()).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file(&format!("{test}.bundle"));
    std::fs::write(&path, blob).expect("write bundle");
    let machine = Machine {
        arch: Arch::Armv7,
        cpu: "cortex-a15".into(),
        gic_version: 2,
        smp: 2,
        disk: Some(disk.to_path_buf()),
        network: Some(Vec::new()),
        ..Machine::default()
    };
    let mut s = Session::start(machine.command(hypervisor(), Some(&path)), RUN_LIMIT, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"));
    s.wait_for("hypervisor 0.1.0 (ARMv7, HYP mode)", BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s
}

/// Boots the ARMv7 hypervisor with the armhf Linux guest (2 vCPUs), its disk `disk`, until
/// its shell.
fn boot(test: &str, disk: &Path) -> Session {
    let mut s = start_vms(test, disk, &[armhf_vm("linux", 2, "10.0.2.15", 0, 0)]);
    wait_for_shell(&mut s);
    s
}

fn power_off(mut s: Session) -> String {
    s.send_line("poweroff").unwrap_or_else(|e| panic!("{e}"));
    assert!(s.wait_for_end(Duration::from_secs(120)), "QEMU ends when the VM powers off; console:\n{}", s.console());
    s.finish().console
}

#[test]
fn armhf_linux_runs_on_the_armv7_hypervisor_with_its_disk_and_network_and_powers_off() {
    let _alone = one_linux_at_a_time();
    let disk = scratch_file("armv7-disk.img");
    let _ = std::fs::remove_file(&disk);
    xtask::images::create_disk(&disk, 64 << 20).expect("create the disk image");

    let mut s = boot("armv7-first", &disk);
    let cpu = run(&mut s, "uname -m; grep -c ^processor /proc/cpuinfo; grep -m1 'CPU part' /proc/cpuinfo");
    assert_output_line(&cpu, "armv7l", "a 32-bit ARMv7 kernel and userland");
    assert_output_line(&cpu, "2", "both vCPUs are up (PSCI CPU_ON through the hypervisor)");
    assert_output_line(&cpu, "CPU part\t: 0xc0f", "the Cortex-A15 it runs on, as VPIDR says");
    let ping = run(&mut s, "ping -c 3 -W 5 10.0.2.2");
    assert!(ping.contains("3 packets transmitted, 3 packets received"), "QEMU's gateway, through the uplink: {ping}");
    check_virtio_console(&mut s);
    let made = run(
        &mut s,
        "mke2fs -q /dev/vda && mount -t ext4 /dev/vda /mnt && uname -a > /mnt/written && sync && umount /mnt && \
         echo written",
    );
    assert_output_line(&made, "written", "the disk formatted, written and unmounted");
    let console = power_off(s);
    assert!(console.contains("hypervisor: vm0 linux ended: PoweredOff (clean)"), "{console}");
    assert!(console.contains("all 1 VM(s) ended: 1 clean, 0 failed"), "{console}");

    let mut s = boot("armv7-second", &disk);
    let read = run(&mut s, "mount -t ext4 /dev/vda /mnt && cat /mnt/written && umount /mnt");
    assert!(read.contains("armv7l GNU/Linux"), "what the first boot wrote is on the disk: {read}");
    power_off(s);
}

/// The PCI transport on the ARMv7 image: a GICv2, so the armhf guest's MSIs go through its
/// GICv2m frame (docs/virtio.md, "The virtio-pci transport").
#[test]
fn armhf_linux_uses_its_virtio_devices_as_pci_functions_on_the_armv7_hypervisor() {
    let _alone = one_linux_at_a_time();
    let disk = scratch_file("armv7-pci-disk.img");
    let _ = std::fs::remove_file(&disk);
    xtask::images::create_disk(&disk, 64 << 20).expect("create the disk image");
    let vm = armhf_vm("linux", 2, "10.0.2.15", 0, 0);
    let vm = VmEntry { devices: VmDevices { transport: VirtioTransport::Pci, ..vm.devices }, ..vm };
    let mut s = start_vms("armv7-pci", &disk, &[vm]);
    wait_for_shell(&mut s);
    let ids = run(&mut s, "cat /sys/bus/pci/devices/0000:00:00.0/device /sys/block/vda/size");
    assert_output_line(&ids, "0x1042", "the disk is a virtio-pci function");
    assert_output_line(&ids, "131072", "the whole 64 MiB image");
    let ping = run(&mut s, "ping -c 3 -W 5 10.0.2.2");
    assert!(ping.contains("3 packets transmitted, 3 packets received"), "QEMU's gateway, through the uplink: {ping}");
    let written = run(&mut s, "dd if=/dev/zero of=/dev/vda bs=64k count=16 conv=fsync 2>/dev/null && echo written");
    assert_output_line(&written, "written", "a write to the disk completes");
    let interrupts = run(&mut s, "grep virtio0-req /proc/interrupts; dmesg | grep GICv2m");
    assert!(
        interrupts.contains("virtio0-req.0") && interrupts.contains("SPI[96:127]"),
        "MSI-X through the frame: {interrupts}"
    );
    let console = power_off(s);
    assert!(console.contains("hypervisor: vm0 linux ended: PoweredOff (clean)"), "{console}");
    assert!(!console.contains("names no doorbell"), "{console}");
}

#[test]
fn two_armhf_vms_pinned_and_shared_ping_each_other_and_the_console_manages_them() {
    let _alone = one_linux_at_a_time();
    let disk = scratch_file("armv7-two-disk.img");
    let _ = std::fs::remove_file(&disk);
    xtask::images::create_disk(&disk, 128 << 20).expect("create the disk image");
    let vms = [
        placed(armhf_vm("front", 1, "10.0.2.15", 0, 64 << 20), &[0], Policy::Pinned),
        placed(armhf_vm("back", 2, "10.0.2.16", 64 << 20, 64 << 20), &[1, 1], Policy::Shared),
    ];
    let mut s = start_vms("armv7-two", &disk, &vms);
    // In any order: which VM's boot ends first depends on how the host schedules QEMU's CPU
    // threads. Waited for in turn (front's shell, then back's line), a back that was up first
    // was passed over and waited for until the limit.
    s.wait_for_all(&["front | guest: Linux 6.1", "back | guest: Linux 6.1", "front | / # "], BOOT_LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let ping = run(&mut s, "ping -c 6 -W 3 10.0.2.16");
    assert!(ping.contains("6 packets transmitted, 6 packets received"), "front reaches back: {ping}");
    s.send_line("\x1dlist").unwrap_or_else(|e| panic!("{e}"));
    let list = s.wait_for("vm1 back", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(list.contains("vm0 front"), "the console lists both VMs: {list}");
    s.send_line("\x1ddestroy back").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: vm1 back ended: Destroyed (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let console = power_off(s);
    assert!(console.contains("all 2 VM(s) ended: 2 clean, 0 failed"), "{console}");
}

/// QEMU's `vexpress-a15` (ARM's Versatile Express with a CoreTile A15: RAM at 0x8000_0000,
/// its GIC, PL011 and timers at the board's own addresses, its peripherals behind two buses
/// whose `ranges` translate them) with Debian's device tree for it, entered in HYP mode: the
/// hypervisor finds the board from the device tree alone, starts the second CPU the board's
/// own way (no PSCI: the entry address in the motherboard's SYS_FLAGS and an SGI), finds its
/// UART's interrupt through the motherboard bus's `interrupt-map` (INTID 37), drives the
/// virtio-mmio disk and NIC QEMU adds to the board, and boots the armhf guest with 2 vCPUs on
/// the 2 CPUs to its shell, which answers what is typed at the console, as the management
/// console does. Nothing can power the board off (no PSCI): the run ends at the shell.
#[test]
fn the_armv7_image_boots_armhf_linux_on_versatile_express_from_its_device_tree() {
    let _alone = one_linux_at_a_time();
    let l = linux_armhf();
    let dtb = l.board_device_tree(xtask::qemu::VEXPRESS_A15_DTB).unwrap_or_else(|e| panic!("{e}"));
    let disk = scratch_file("vexpress-disk.img");
    let _ = std::fs::remove_file(&disk);
    xtask::images::create_disk(&disk, 64 << 20).expect("create the disk image");
    let vm = armhf_vm("linux", 2, "10.0.2.15", 0, 0);
    let blob = bundle::write(&[vm], &BundleOptions::default()).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file("vexpress.bundle");
    std::fs::write(&path, blob).expect("write bundle");
    let machine = Machine {
        board: QemuBoard::VexpressA15 { dtb },
        arch: Arch::Armv7,
        cpu: "cortex-a15".into(),
        gic_version: 2,
        smp: 2,
        disk: Some(disk),
        network: Some(Vec::new()),
        ..Machine::default()
    };
    let mut s = Session::start(machine.command(hypervisor(), Some(&path)), RUN_LIMIT, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"));
    s.wait_for_all(
        &[
            "hypervisor 0.1.0 (ARMv7, HYP mode) on V2P-CA15",
            "gic         GICv2: GICD 0x2c001000..0x2c002000 GICC 0x2c002000..0x2c004000 GICH 0x2c004000..0x2c006000 GICV 0x2c006000..0x2c008000",
            "uart        PL011 at 0x1c090000..0x1c091000 (the first PL011: no stdout-path), INTID 37",
            "hypervisor: cpu0 (MPIDR 0x0) online (boot CPU)",
            "hypervisor: cpu1 (MPIDR 0x1) online",
            "hypervisor: 2 of 2 CPUs online",
            "hypervisor: SGIs reach the other CPUs: 1 of 1 answered",
            "hypervisor: virtio disk of 64 MiB",
            "hypervisor: virtio NIC",
            "2 vCPU(s)",
        ],
        BOOT_LIMIT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    wait_for_shell(&mut s);
    let console = s.console();
    let up = console.lines().find(|l| l.starts_with("linux | guest: Linux 6.1")).unwrap_or_default();
    assert!(up.contains("up with 2 CPU(s)"), "the guest's init counts both vCPUs: {up:?}");
    for absent in ["did not start", "never reported online", "no console input", "the UART has no interrupt"] {
        assert!(!console.contains(absent), "{absent:?} on the console:\n{console}");
    }
    // Typed at the console: the UART's receive interrupt brings each line to the guest.
    let cpus = run(&mut s, "nproc; grep -c ^processor /proc/cpuinfo; echo typed-$((20+22))");
    assert_output_line(&cpus, "typed-42", "the shell ran the line typed at the console");
    assert_eq!(
        cpus.lines().map(str::trim).filter(|l| *l == "2").count(),
        2,
        "Linux has both vCPUs online (nproc, /proc/cpuinfo):\n{cpus}"
    );
    // QEMU's virtio-mmio transports on this board, driven by the hypervisor.
    let ping = run(&mut s, "ping -c 3 -W 5 10.0.2.2");
    assert!(ping.contains("3 packets transmitted, 3 packets received"), "QEMU's gateway, through the uplink: {ping}");
    let made = run(
        &mut s,
        "mke2fs -q /dev/vda && mount -t ext4 /dev/vda /mnt && echo kept > /mnt/f && umount /mnt && \
         mount -t ext4 /dev/vda /mnt && cat /mnt/f && umount /mnt",
    );
    assert_output_line(&made, "kept", "the disk formatted, written and read back");
    // Ctrl-] then a command: the management console, through the same input interrupt.
    s.send_line("\x1dlist").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("vm0 linux: running, 2 vCPU(s)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("has the console", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
}
