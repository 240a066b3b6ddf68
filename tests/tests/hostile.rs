//! The malicious-guest suite (docs/hostile-guests.md): a guest that attacks every surface
//! the hypervisor offers a VM, beside a bystander VM that must finish its own checks as if it
//! ran alone, on both GIC versions. The register-leak reader beside a secret-holder on a
//! shared CPU is tests/tests/register_leak.rs; every stray IPA, tests/tests/isolation.rs.

use system_tests::{assert_line, boot, images, one_linux_at_a_time, scratch_file, test_vm};
use xtask::bundle::{DiskSlice, VmDevices, VmEntry};
use xtask::qemu::{Machine, RunOutput};

const SLICE: u64 = 32 << 20;

/// The bystander's disk pattern (as `bystander.rs` writes it: byte i of its first MiB).
fn pattern(at: u64) -> u8 {
    at.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) as u8
}

fn run_suite(gic_version: u8) -> (RunOutput, Vec<u8>) {
    let i = images();
    let image = scratch_file(&format!("hostile-gicv{gic_version}.img"));
    let _ = std::fs::remove_file(&image);
    xtask::images::create_disk(&image, 2 * SLICE).expect("create the disk image");
    let with_disk = |vm: VmEntry, offset: u64| VmEntry {
        devices: VmDevices { disk: Some(DiskSlice { offset, size: SLICE }), ..vm.devices },
        ..vm
    };
    let hostile = with_disk(VmEntry { vcpus: 3, ..test_vm("hostile", &i.hostile, 64 << 20) }, 0);
    let bystander = with_disk(test_vm("bystander", &i.bystander, 64 << 20), SLICE);
    let machine = Machine { gic_version, disk: Some(image.clone()), ..Machine::default() };
    let out = boot(&format!("hostile-gicv{gic_version}"), machine, &[hostile, bystander]);
    let disk = std::fs::read(&image).expect("read the disk image");
    // Kept for a reader: what each attack got, and the hypervisor's log of it.
    std::fs::write(scratch_file(&format!("hostile-gicv{gic_version}.console")), &out.console)
        .expect("write the console");
    (out, disk)
}

fn check(gic_version: u8) {
    let _alone = one_linux_at_a_time();
    let (out, disk) = run_suite(gic_version);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    let hostile_done = out.console.find("hostile | hostile: all ").expect("the hostile guest finished its checks");
    let bystander_done =
        out.console.find("bystander | bystander: all ").unwrap_or_else(|| panic!("bystander failed:\n{}", out.console));
    assert!(hostile_done < bystander_done, "the bystander ran for the whole attack:\n{}", out.console);
    assert!(!out.console.contains("not ok"), "a check failed:\n{}", out.console);
    assert!(
        out.console.contains(
            "uart: every offset at widths 1/2/4/8: 7680 reads served, 0 aborted; 2000 bytes looped back, 0 not seen at once"
        ),
        "the UART attack:\n{}",
        out.console
    );
    assert!(
        out.console.contains(
            "virtio page: every offset at widths 1/2/4/8: 7680 reads served, 0 aborted, the absent NIC's window zeros: true"
        ),
        "the virtio page attack:\n{}",
        out.console
    );
    assert!(!out.console.contains("panic"), "the hypervisor or a guest panicked:\n{}", out.console);
    assert_line(&out, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");

    // The guest's attacks were logged, within the per-VM limit: 16 lines, then one a second.
    let lines = out.console.lines().filter(|l| l.starts_with("hypervisor: vm0 hostile")).count();
    let left_out: usize = out
        .console
        .lines()
        .find_map(|l| {
            l.strip_prefix("hypervisor: vm0 hostile: ")?.split_once(" more line(s) the guest caused were left out")
        })
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of the lines left out; console:\n{}", out.console));
    assert!(left_out > 0, "the attacks caused more incidents than the limit lets through:\n{}", out.console);
    assert!(lines < 16 + 120, "{lines} hypervisor lines for the hostile VM:\n{}", out.console);

    // On the host's disk: the bystander's slice holds what it wrote; of the hostile VM's
    // slice, only the 4 KiB it wrote changed (no attack wrote anywhere).
    let (own, theirs) = disk.split_at(SLICE as usize);
    assert!(own[..4096].iter().all(|&b| b == 0x5a), "the hostile VM's one good write is on its slice");
    assert!(own[4096..].iter().all(|&b| b == 0), "nothing else was written to the hostile VM's slice");
    let mismatch = (0..(1u64 << 20)).find(|&a| theirs[a as usize] != pattern(a));
    assert_eq!(mismatch, None, "the bystander's slice holds its pattern");
    assert!(theirs[1 << 20..].iter().all(|&b| b == 0), "nothing beyond what the bystander wrote");
}

#[test]
fn a_hostile_guest_gets_the_architected_answer_everywhere_and_a_bystander_is_untouched_on_gicv3() {
    check(3);
}

#[test]
fn a_hostile_guest_gets_the_architected_answer_everywhere_and_a_bystander_is_untouched_on_gicv2() {
    check(2);
}

/// A guest that reboots in a loop (PSCI SYSTEM_RESET at once on every boot, for 2 s of its
/// time) beside a bystander: each reboot's lines go through the VM's limit (16, then one a
/// second), so the console that every VM's output shares is not flooded, and the bystander
/// finishes as if it ran alone.
#[test]
fn a_guest_that_reboots_in_a_loop_does_not_flood_the_console() {
    let _alone = one_linux_at_a_time();
    let i = images();
    let rebooter = test_vm("rebooter", &i.rebooter, 64 << 20);
    let bystander = test_vm("ticker", &i.ticker, 64 << 20);
    let out = boot("rebooter", Machine { smp: 2, ..Machine::default() }, &[rebooter, bystander]);
    std::fs::write(scratch_file("rebooter.console"), &out.console).expect("write the console");
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert!(!out.console.contains("panic"), "the hypervisor or a guest panicked:\n{}", out.console);
    assert_line(&out, "rebooter | rebooter: 2000 ms of reboots over, powering off");
    assert!(out.console.contains("ticker | ok 1 - ticker: "), "the bystander's ticks:\n{}", out.console);
    assert_line(&out, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");
    // Each reboot asks for two lines (the reset, vCPU 0 starting again); 16 print, then one
    // a second of the storm's 2 (the VM's counter and the limit's run at the same rate).
    let boots = out.console.lines().filter(|l| l.starts_with("rebooter | rebooter: boot at ")).count();
    let printed = out
        .console
        .lines()
        .filter(|l| l.starts_with("hypervisor: vm0 rebooter vcpu0: ") && !l.contains("SYSTEM_OFF"))
        .count();
    // At least 40 reboots (about 250 on an idle 2-core host): 80 lines asked for, against
    // the 19 the limit may let through in the storm's 2 s.
    assert!(boots >= 40, "a storm of reboots ({boots}):\n{}", out.console);
    assert!(printed <= 16 + 3, "{printed} hypervisor lines for {boots} reboots:\n{}", out.console);
    assert!(
        out.console.contains("hypervisor: vm0 rebooter: ")
            && out.console.contains(" more line(s) the guest caused were left out"),
        "the lines left out are counted:\n{}",
        out.console
    );
}
