//! Linux guests using the hypervisor's virtio devices, whose backends are QEMU's own
//! devices driven by the hypervisor: a disk image file on the host, QEMU's user-mode network
//! (`hostfwd` on 127.0.0.1 only) through the virtual switch, and the VM's console.

use std::path::Path;

use system_tests::{
    assert_output_line, check_virtio_console, free_local_port, http_get, linux_vm, linux_vm_on_network,
    one_linux_at_a_time, run, scratch_file, start_session, wait_for_shell, wait_for_shell_and, COMMAND_LIMIT,
    RUN_LIMIT,
};
use xtask::bundle::{DiskSlice, VmDevices, VmEntry};
use xtask::qemu::{Machine, Session};

/// Lines of the test file: each names its number, so the image can be searched for one.
const LINES: u32 = 300;

fn power_off(mut s: Session, vm: &str) {
    s.send_line("poweroff").unwrap();
    s.wait_for(&format!("hypervisor: vm0 {vm} ended: PoweredOff (clean)"), COMMAND_LIMIT)
        .unwrap_or_else(|e| panic!("{e}"));
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0; console:\n{}", out.console);
}

fn with_disk(vm: VmEntry) -> VmEntry {
    VmEntry { devices: VmDevices { disk: Some(DiskSlice { offset: 0, size: 0 }), ..vm.devices }, ..vm }
}

fn image_contains(image: &Path, text: &str) -> bool {
    let bytes = std::fs::read(image).expect("read the disk image");
    bytes.windows(text.len()).any(|w| w == text.as_bytes())
}

/// The guest formats its disk, writes a file and powers off: the data is in the host's image
/// file; a second boot reads it back.
#[test]
fn a_file_written_on_the_virtio_disk_is_in_the_host_image_and_survives_a_reboot() {
    let _alone = one_linux_at_a_time();
    let image = scratch_file("virtio-disk.img");
    let _ = std::fs::remove_file(&image);
    xtask::images::create_disk(&image, 64 << 20).expect("create the disk image");
    let machine = Machine { disk: Some(image.clone()), ..Machine::default() };
    let vm = with_disk(linux_vm(2));

    let mut s = start_session("virtio-disk-1", machine.clone(), std::slice::from_ref(&vm), RUN_LIMIT);
    wait_for_shell(&mut s);
    let size = run(&mut s, "cat /sys/block/vda/size");
    assert_output_line(&size, "131072", "the whole 64 MiB image, in 512-byte sectors");
    let made = run(&mut s, "mke2fs -q /dev/vda && mount -t ext4 /dev/vda /mnt && echo mounted");
    assert_output_line(&made, "mounted", "format and mount");
    let written = run(
        &mut s,
        &format!(
            "for i in $(seq 1 {LINES}); do echo \"virtio-disk-test line $i\"; done > /mnt/data.txt; \
             sync; sha256sum /mnt/data.txt; umount /mnt && echo unmounted"
        ),
    );
    assert_output_line(&written, "unmounted", "the file written, synced and the disk unmounted");
    let sum = written
        .lines()
        .filter_map(|l| l.trim().strip_suffix("  /mnt/data.txt"))
        .find(|sum| sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("sha256sum: {written}"))
        .to_string();
    power_off(s, "linux");

    for line in [1, 150, LINES] {
        let text = format!("virtio-disk-test line {line}\n");
        assert!(image_contains(&image, &text), "the host image holds {text:?}");
    }

    let mut s = start_session("virtio-disk-2", machine, &[vm], RUN_LIMIT);
    wait_for_shell(&mut s);
    let read = run(&mut s, "mount -t ext4 /dev/vda /mnt && sha256sum /mnt/data.txt && tail -n 1 /mnt/data.txt");
    assert!(read.contains(&sum), "the same file after a reboot ({sum}): {read}");
    assert!(read.contains(&format!("virtio-disk-test line {LINES}")), "{read}");
    run(&mut s, "umount /mnt");
    power_off(s, "linux");
}

/// The host fetches a page from the guest's httpd: 127.0.0.1 -> QEMU's hostfwd -> the
/// board's NIC -> the hypervisor's switch -> the guest's virtio NIC, and back.
#[test]
fn the_host_fetches_a_page_from_the_guest_through_the_switch_and_uplink() {
    let _alone = one_linux_at_a_time();
    let port = free_local_port();
    let machine = Machine { network: Some(vec![(port, 80)]), ..Machine::default() };
    let vm = linux_vm_on_network("linux", 2, "10.0.2.15");
    let mut s = start_session("virtio-net-http", machine, &[vm], RUN_LIMIT);
    wait_for_shell(&mut s);
    let page = http_get(port, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}\nconsole:\n{}", s.console()));
    assert!(page.contains("200 OK") && page.contains("hello from guest"), "the guest's page: {page}");
    // And the other way: the guest reaches QEMU's gateway on the user network.
    let ping = run(&mut s, "ping -c 2 -W 5 10.0.2.2");
    assert!(ping.contains("2 packets received"), "the guest pings the gateway: {ping}");
    power_off(s, "linux");
}

/// Two VMs on the switch, no uplink: they reach each other by ARP and ICMP.
#[test]
fn two_vms_ping_each_other_through_the_switch() {
    let _alone = one_linux_at_a_time();
    let first = linux_vm_on_network("linux", 1, "10.0.2.15");
    let second = linux_vm_on_network("peer", 1, "10.0.2.16");
    let machine = Machine { smp: 2, ..Machine::default() };
    let mut s = start_session("virtio-net-ping", machine, &[first, second], RUN_LIMIT);
    wait_for_shell_and(&mut s, "linux", &["peer | guest: eth0 is 10.0.2.16"]);
    let ping = run(&mut s, "ping -c 3 -W 5 10.0.2.16");
    assert!(ping.contains("3 packets transmitted, 3 packets received"), "vm0 pings vm1: {ping}");
    let neighbours = run(&mut s, "cat /proc/net/arp");
    assert!(neighbours.contains("10.0.2.16") && neighbours.contains("52:54:00:12:35:11"), "{neighbours}");
    // vm0 takes vm1's MAC address: the switch refuses every frame it sends from it, and
    // with its own address back it reaches vm1 again (issue: isolation, point 8).
    let set_mac = |mac: &str| format!("ip link set eth0 down; ip link set eth0 address {mac}; ip link set eth0 up");
    let spoofed = run(&mut s, &format!("{}; ping -c 2 -W 2 10.0.2.2", set_mac("52:54:00:12:35:11")));
    assert!(spoofed.contains("0 packets received"), "nothing gets through from a stolen address: {spoofed}");
    s.wait_for(
        "hypervisor: vm0 linux: switch port 1: frame from source address 52:54:00:12:35:11, not the NIC's own 52:54:00:12:35:10; dropped",
        COMMAND_LIMIT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let again = run(&mut s, &format!("{}; ping -c 3 -W 5 10.0.2.16", set_mac("52:54:00:12:35:10")));
    assert!(again.contains("3 packets received"), "vm0 with its own address: {again}");
    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
}

/// The guest's virtio console (hvc0) is its console too (check_virtio_console).
#[test]
fn the_virtio_console_is_bridged_to_the_vm_console() {
    let _alone = one_linux_at_a_time();
    let mut s = start_session("virtio-console", Machine::default(), &[linux_vm(1)], RUN_LIMIT);
    wait_for_shell(&mut s);
    check_virtio_console(&mut s);
    power_off(s, "linux");
}
