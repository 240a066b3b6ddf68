//! A Linux VM that owns the Raspberry Pi 4's SDHCI on QEMU's `raspi4b` (docs/deploy-rpi4.md,
//! "The SD card in a VM"): the controller's window and SPI come from the board's device
//! tree, the VM is identity-mapped (its RAM at IPA = PA, as a controller that does DMA on a
//! Pi needs: docs/capability-model.md, "Identity-mapped VMs"), and the card is a raw image
//! made on the host with one ext4 partition. The VM mounts it, reads the host's file, writes
//! its own, syncs and powers off; the host then finds that file in the image. QEMU's SDHCI
//! does PIO, so DMA itself is not exercised here: what is checked is the layout the DMA
//! relies on (the guest's RAM where the board has it, the board's DMA translation in the
//! guest's tree) and that the hypervisor refuses a placement over memory it holds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use system_tests::{
    assert_output_line, images, linux, one_linux_at_a_time, run, scratch_file, wait_for_shell, BOOT_LIMIT,
    COMMAND_LIMIT, QEMU_TIMEOUT, RUN_LIMIT,
};
use xtask::bundle::{self, BundleOptions, Placement, Policy, VmEntry};
use xtask::qemu::{Machine, QemuBoard, Session};
use xtask::rpi4_sd::{read_from_card, sd_card_args, sd_vm, sdhci_passthrough, write_card};

/// Where the VM's RAM is, physically and in its IPA space: below the first GiB, which the
/// Pi's SDHCI and EMMC2 reach through their buses' `dma-ranges`, clear of the hypervisor's
/// image, heap and the boot bundle QEMU loads at 128 MiB.
const RAM_BASE: u64 = 0x2000_0000;
const RAM: u64 = 256 << 20;
/// The file the host puts on the card, and what the VM writes.
const HELLO: &[u8] = b"hello from the host, on the card\n";
const WRITTEN: &str = "written by the VM on its SD card";

const HALT_LINE: &str =
    "hypervisor: no PSCI: halting the machine through the BCM2835 power manager's watchdog at 0xfe100000";

/// The board's device tree (Debian's, fixed up for QEMU) and the hypervisor at the
/// firmware's address.
fn board() -> (PathBuf, PathBuf) {
    let (dtb, _) = xtask::rpi4::qemu_device_tree(linux()).unwrap_or_else(|e| panic!("the device tree: {e}"));
    let hypervisor = xtask::rpi4::image_at_firmware_address(&images().hypervisor)
        .unwrap_or_else(|e| panic!("the image at 0x80000: {e}"));
    (dtb, hypervisor)
}

/// QEMU raspi4b booting `vm` with `card` in its SD slot, as a console session.
fn start(test: &str, dtb: PathBuf, hypervisor: &Path, vm: VmEntry, card: &Path, limit: Duration) -> Session {
    let blob = bundle::write(&[vm], &BundleOptions::default()).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file(&format!("{test}.bundle"));
    std::fs::write(&path, blob).expect("write bundle");
    let machine = Machine { board: QemuBoard::Raspi4b { dtb }, ..Machine::default() };
    let mut cmd = machine.command(&hypervisor.to_path_buf(), Some(&path));
    cmd.args(sd_card_args(card));
    Session::start(cmd, limit, false).unwrap_or_else(|e| panic!("running QEMU: {e}"))
}

/// `vm` with its vCPU on CPU 1, shared (its WFI traps and its slice ends), not pinned:
/// QEMU 10's GICv2 loses a hardware-mapped interrupt that becomes pending again while
/// active when the guest deactivates it (its vCPU-interface EOI updates the virtual
/// interface only, not the physical one), so a pinned vCPU idling in an untrapped WFI can
/// wait forever for its virtual timer (docs/deploy-rpi4.md, "QEMU's GICv2 and a pinned
/// vCPU"). A shared vCPU's WFI and slice end are exits, at which the hypervisor samples the
/// timer's line itself.
fn shared_on_cpu_1(mut vm: VmEntry) -> VmEntry {
    vm.devices.placement = Placement { cpus: Some(vec![1]), policy: Some(Policy::Shared), slice_us: None };
    vm
}

#[test]
fn a_linux_vm_that_owns_the_sdhci_mounts_the_card_reads_the_hosts_file_and_writes_one_the_host_finds() {
    let _alone = one_linux_at_a_time();
    let (dtb, hypervisor) = board();
    let sdhci = sdhci_passthrough(&std::fs::read(&dtb).expect("read the device tree"))
        .unwrap_or_else(|e| panic!("the SDHCI: {e}"));
    assert_eq!((sdhci.base, sdhci.size, &sdhci.interrupts[..]), (0xfe30_0000, 0x1000, &[158][..]), "from the dtb");
    let card = scratch_file("rpi4-sd.img");
    write_card(&card, &[("hello.txt", HELLO)]).unwrap_or_else(|e| panic!("the card: {e}"));

    let vm = shared_on_cpu_1(sd_vm(linux(), sdhci, RAM_BASE, RAM));
    let mut s = start("rpi4-sd", dtb, &hypervisor, vm, &card, RUN_LIMIT);
    s.wait_for_all(
        &[
            "hypervisor: vm0 sd: 256 MiB RAM at IPA 0x20000000 (PA 0x20000000, identity-mapped)",
            "hypervisor: vm0 sd: passthrough sdhci: 0xfe300000..0xfe301000 mapped at IPA 0xfe300000 (Device-nGnRE, \
             not executable), SPI(s) [158] granted",
        ],
        BOOT_LIMIT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    wait_for_shell(&mut s);

    // The guest's view: its RAM where the board has it, and the controller inside a bus
    // that carries the board's DMA translation (bus 0xc000_0000 is CPU 0x0, 1 GiB).
    let iomem = run(&mut s, "grep -i 'system ram' /proc/iomem");
    assert_output_line(&iomem, "20000000-2fffffff : System RAM", "the VM's RAM at IPA = PA");
    let bus = "/sys/firmware/devicetree/base/dma-bus@fe300000";
    let tree = run(&mut s, &format!("ls -1 {bus}; od -An -tx1 {bus}/dma-ranges | tr -d ' \\n'; echo"));
    assert_output_line(&tree, "bcm2835-sdhci@fe300000", "the controller's node, in the bus");
    assert_output_line(
        &tree,
        "00000000c000000000000000000000000000000040000000",
        "dma-ranges: bus 0xc0000000, CPU 0x0, 0x40000000 bytes",
    );
    let partitions = run(&mut s, "cat /proc/partitions");
    assert!(partitions.contains("mmcblk0p1"), "the card's partition:\n{partitions}");

    let read = run(&mut s, "mount -t ext4 /dev/mmcblk0p1 /mnt && cat /mnt/hello.txt");
    assert_output_line(&read, std::str::from_utf8(HELLO).unwrap().trim_end(), "the host's file, read by the VM");
    let wrote =
        run(&mut s, &format!("echo '{WRITTEN}' > /mnt/from-vm.txt && sync && umount /mnt && echo unmounted-$((40+2))"));
    assert_output_line(&wrote, "unmounted-42", "written, synced, unmounted");

    s.send_line("poweroff").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hypervisor: vm0 sd ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(HALT_LINE, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.wait_for_end(Duration::from_secs(60)), "QEMU ends once the watchdog fires");
    let out = s.finish();
    assert!(!out.timed_out, "killed at the deadline; console:\n{}", out.console);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);

    let found = read_from_card(&card, "from-vm.txt").unwrap_or_else(|e| panic!("reading the card: {e}"));
    assert_eq!(found.as_deref(), Some(format!("{WRITTEN}\n").as_bytes()), "the VM's file is on the card");
    let hello = read_from_card(&card, "hello.txt").unwrap_or_else(|e| panic!("reading the card: {e}"));
    assert_eq!(hello.as_deref(), Some(HELLO), "the host's file is as it was");
}

/// The checks against memory the hypervisor holds run at boot, on the board it found: an
/// identity-mapped VM whose RAM starts at 0x0a20_0000 (the lowest base off the guest's
/// emulated windows) runs into the boot bundle QEMU loads at 128 MiB (a Linux bundle is
/// about 35 MiB), or what follows it (the device tree, the heap), and is refused before any
/// VM is created, with a line naming what it runs into.
#[test]
fn an_identity_mapped_vm_over_memory_the_hypervisor_holds_is_refused_at_boot() {
    let _alone = one_linux_at_a_time();
    let (dtb, hypervisor) = board();
    let sdhci = sdhci_passthrough(&std::fs::read(&dtb).expect("read the device tree"))
        .unwrap_or_else(|e| panic!("the SDHCI: {e}"));
    let card = scratch_file("rpi4-sd-refused.img");
    write_card(&card, &[("hello.txt", HELLO)]).unwrap_or_else(|e| panic!("the card: {e}"));
    let vm = sd_vm(linux(), sdhci, 0x0a20_0000, RAM);
    let mut s = start("rpi4-sd-refused", dtb, &hypervisor, vm, &card, QEMU_TIMEOUT);
    s.wait_for(
        "hypervisor: error: boot bundle: VM sd: field `identity_mapped`: its RAM 0xa200000..0x1a200000 overlaps ",
        BOOT_LIMIT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let holder = s.wait_for("; give a base outside it", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        ["the boot bundle at 0x8000000..", "the board's device tree at ", "the hypervisor's heap at "]
            .iter()
            .any(|h| holder.starts_with(h)),
        "what it runs into: {holder:?}"
    );
    assert!(s.wait_for_end(Duration::from_secs(60)), "the machine stops (the watchdog ends QEMU)");
    let out = s.finish();
    assert!(!out.timed_out, "killed at the deadline; console:\n{}", out.console);
    assert!(!out.console.contains("hypervisor: vm0 sd:"), "no VM was created:\n{}", out.console);
}
