//! Faults of real devices and hosts: a board disk that fails requests, a VM destroyed in
//! the middle of its writes, and data a Linux guest synced before a reboot and before a
//! console `destroy` (after a `poweroff`: tests/tests/virtio.rs). Each checks the host's
//! disk image byte for byte, from outside the hypervisor.

use std::path::Path;

use system_tests::{
    assert_line, assert_output_line, boot, images, linux_vm, one_linux_at_a_time, run, scratch_file, start_session,
    test_vm, wait_for_shell, COMMAND_LIMIT, RUN_LIMIT,
};
use xtask::bundle::{DiskSlice, VmDevices, VmEntry};
use xtask::qemu::{Machine, Session};

const MIB: u64 = 1 << 20;
const SLICE: u64 = 16 * MIB;

fn with_disk(vm: VmEntry, offset: u64, size: u64) -> VmEntry {
    VmEntry { devices: VmDevices { disk: Some(DiskSlice { offset, size }), ..vm.devices }, ..vm }
}

/// The bystander guest's disk pattern (bystander.rs: byte `at` of its first MiB).
fn bystander_pattern(at: u64) -> u8 {
    at.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) as u8
}

/// What the test writes over the whole image before the boot: a byte no guest writes.
fn prefill(at: u64) -> u8 {
    ((at / 512) as u8) ^ 0x3c
}

/// A fresh image of `size` bytes holding `prefill`.
fn prefilled_image(name: &str, size: u64) -> std::path::PathBuf {
    let image = scratch_file(name);
    std::fs::write(&image, (0..size).map(prefill).collect::<Vec<u8>>()).expect("write the disk image");
    image
}

/// The first byte of `[from, to)` of `disk` that is not `expected(at)`.
fn first_difference(disk: &[u8], from: u64, to: u64, expected: impl Fn(u64) -> u8) -> Option<u64> {
    (from..to).find(|&at| disk[at as usize] != expected(at))
}

/// A management console command (Ctrl-] opens the command line).
fn command(s: &mut Session, line: &str) {
    s.send_line(&format!("\x1d{line}")).unwrap_or_else(|e| panic!("{e}"));
}

fn expect(s: &mut Session, text: &str) {
    s.wait_for(text, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
}

/// QEMU's blkdebug fails the board disk's reads at one sector and writes at another (EIO);
/// the VM whose slice holds them gets VIRTIO_BLK_S_IOERR for exactly those requests and
/// nothing else, its disk works after, and a bystander on another slice never notices.
#[test]
fn a_failing_board_disk_gives_the_guest_an_io_error_and_touches_nothing_else() {
    let _alone = one_linux_at_a_time();
    let image = prefilled_image("disk-faults.img", 4 * SLICE);
    let config = scratch_file("disk-faults.blkdebug");
    // Sector 2048 lies in the guest's read of its chunk 16; 8448 in its write of chunk 2
    // (its writes start at sector 8192).
    std::fs::write(
        &config,
        "[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\nsector = \"2048\"\n\n\
         [inject-error]\nevent = \"write_aio\"\nerrno = \"5\"\nsector = \"8448\"\n",
    )
    .expect("write the blkdebug configuration");
    let i = images();
    let vms = [
        with_disk(test_vm("faulty", &i.disk_faults, 64 << 20), 0, SLICE),
        with_disk(test_vm("bystander", &i.bystander, 64 << 20), 2 * SLICE, SLICE),
    ];
    let machine = Machine { disk: Some(image.clone()), disk_errors: Some(config), ..Machine::default() };
    let out = boot("disk-faults", machine, &vms);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "faulty | ok 1 - disk-faults: reads of 64 x 64 KiB: 63 OK, 1 IOERR (first at sector 2048)");
    assert_line(&out, "faulty | ok 2 - disk-faults: writes of 64 x 64 KiB: 63 OK, 1 IOERR (first at sector 8448)");
    assert_line(&out, "faulty | ok 3 - disk-faults: a read after the errors: Used { status: 0, written: 4097 }");
    assert_line(&out, "bystander | bystander: all 4 checks passed; powering off with PSCI SYSTEM_OFF");
    assert_line(&out, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");
    assert!(!out.console.contains("panic"), "{}", out.console);

    let disk = std::fs::read(&image).expect("read the disk image");
    let bystander = 2 * SLICE;
    assert_eq!(first_difference(&disk, bystander, bystander + MIB, |at| bystander_pattern(at - bystander)), None);
    assert_eq!(first_difference(&disk, bystander + MIB, 4 * SLICE, prefill), None, "nothing else was written");
    assert_eq!(first_difference(&disk, 0, 4 * MIB, prefill), None, "the faulty VM only read its first 4 MiB");
    assert_eq!(first_difference(&disk, 8 * MIB, 2 * SLICE, prefill), None, "nor wrote beyond its next 4 MiB");
    // The failed write changed nothing of its 64 KiB; the others wrote.
    let failed = 8448 * 512;
    assert_eq!(first_difference(&disk, failed, failed + 64 * 1024, prefill), None, "a failed write wrote nothing");
}

/// A VM writing its whole slice over and over is destroyed from the management console;
/// every other byte of the board's disk is as it was, and the bystander VM finishes.
#[test]
fn a_vm_destroyed_in_the_middle_of_its_writes_leaves_every_other_slice_as_it_was() {
    let _alone = one_linux_at_a_time();
    let image = prefilled_image("destroy-mid-write.img", 4 * SLICE);
    let i = images();
    let vms = [
        with_disk(test_vm("writer", &i.disk_writer, 64 << 20), SLICE, SLICE),
        with_disk(test_vm("bystander", &i.bystander, 64 << 20), 2 * SLICE, SLICE),
    ];
    let machine = Machine { disk: Some(image.clone()), ..Machine::default() };
    let mut s = start_session("destroy-mid-write", machine, &vms, RUN_LIMIT);
    expect(&mut s, "writer | disk-writer: one round done");
    command(&mut s, "destroy writer");
    expect(&mut s, "hypervisor: vm0 writer ended: Destroyed (clean)");
    expect(&mut s, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0; console:\n{}", out.console);
    assert!(out.console.contains("bystander | bystander: all 4 checks passed"), "{}", out.console);

    let disk = std::fs::read(&image).expect("read the disk image");
    assert_eq!(first_difference(&disk, 0, SLICE, prefill), None, "the slice before the writer's");
    let written = (SLICE..2 * SLICE).filter(|&at| disk[at as usize] == 0xab).count() as u64;
    assert_eq!(
        (SLICE..2 * SLICE).find(|&at| disk[at as usize] != 0xab && disk[at as usize] != prefill(at)),
        None,
        "the writer's slice holds only what it wrote and what was there"
    );
    assert!(written >= SLICE, "its first round is on the disk ({written} bytes of 0xab)");
    let bystander = 2 * SLICE;
    assert_eq!(first_difference(&disk, bystander, bystander + MIB, |at| bystander_pattern(at - bystander)), None);
    assert_eq!(first_difference(&disk, bystander + MIB, 4 * SLICE, prefill), None, "the rest of the disk");
}

fn image_contains(image: &Path, text: &str) -> bool {
    let bytes = std::fs::read(image).expect("read the disk image");
    bytes.windows(text.len()).any(|w| w == text.as_bytes())
}

/// Writes `marker` to the disk at `sector`, synced (dd with fsync, then sync).
fn write_synced(s: &mut Session, marker: &str, sector: u32) {
    let out = run(
        s,
        &format!("echo {marker} | dd of=/dev/vda bs=512 seek={sector} conv=fsync 2>/dev/null; sync; echo synced"),
    );
    assert_output_line(&out, "synced", "the marker written and synced");
}

/// A Linux guest writes and syncs, reboots, writes and syncs again, and is destroyed from
/// the management console: both writes are on the host's image.
#[test]
fn data_a_linux_guest_synced_is_on_the_host_image_after_a_reboot_and_after_a_console_destroy() {
    let _alone = one_linux_at_a_time();
    let image = scratch_file("synced-writes.img");
    let _ = std::fs::remove_file(&image);
    xtask::images::create_disk(&image, 64 * MIB).expect("create the disk image");
    let vm = with_disk(linux_vm(2), 0, 0);
    let machine = Machine { disk: Some(image.clone()), ..Machine::default() };
    let mut s = start_session("synced-writes", machine, &[vm], RUN_LIMIT);
    wait_for_shell(&mut s);
    write_synced(&mut s, "synced-before-reboot-5f1c", 100);
    s.send_line("reboot").unwrap();
    expect(&mut s, "SYSTEM_RESET: the VM reboots");
    wait_for_shell(&mut s);
    write_synced(&mut s, "synced-before-destroy-9a3e", 200);
    command(&mut s, "destroy linux");
    expect(&mut s, "hypervisor: vm0 linux ended: Destroyed (clean)");
    let out = s.finish();
    assert!(!out.console.contains("hypervisor: panic"), "{}", out.console);
    assert!(image_contains(&image, "synced-before-reboot-5f1c"), "the write synced before the reboot is on the host");
    assert!(image_contains(&image, "synced-before-destroy-9a3e"), "the write synced before the destroy is on the host");
}
