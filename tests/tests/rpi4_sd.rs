//! A VM that owns the Raspberry Pi 4's SDHCI on QEMU's `raspi4b` must be identity-mapped
//! (its RAM at IPA = PA, as a controller that does DMA on a Pi needs:
//! docs/capability-model.md, "Identity-mapped VMs"), and the hypervisor checks at boot, on
//! the board it found, that the RAM the manifest names is free: a placement over memory it
//! holds is refused before any VM is created. The VM that uses the card runs in the Pi
//! manifest's test (tests/raspi4b.rs), beside a second VM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use system_tests::{images, linux, one_linux_at_a_time, scratch_file, BOOT_LIMIT, COMMAND_LIMIT, QEMU_TIMEOUT};
use xtask::bundle::{self, BundleOptions, VmEntry};
use xtask::qemu::{Machine, QemuBoard, Session};
use xtask::rpi4_sd::{sd_card_args, sd_vm, sdhci_passthrough, write_card};

/// The VM's RAM.
const RAM: u64 = 256 << 20;
/// The file the host puts on the card.
const HELLO: &[u8] = b"hello from the host, on the card\n";

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
