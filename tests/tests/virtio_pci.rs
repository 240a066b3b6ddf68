//! Linux guests whose virtio devices are PCI functions (`virtio_transport = "pci"`,
//! docs/virtio.md, "The virtio-pci transport"): found on the generic ECAM host bridge,
//! their BARs placed by Linux, their interrupts MSI-X messages through a GICv3's ITS
//! (LPIs) or a GICv2's GICv2m frame; the disk backed by an image file on the
//! host, the NIC by QEMU's user-mode network (127.0.0.1 only).

use std::path::Path;

use hyp_core::bundle::VirtioTransport;
use system_tests::{
    assert_output_line, free_local_port, http_get, linux_vm_on_network, one_linux_at_a_time, run, start_session,
    wait_for_shell, COMMAND_LIMIT, RUN_LIMIT,
};
use xtask::bundle::{DiskSlice, Placement, Policy, VmDevices, VmEntry};
use xtask::qemu::Machine;

fn over_pci(vm: VmEntry, io_cpu: Option<u32>) -> VmEntry {
    let devices = VmDevices {
        disk: Some(DiskSlice { offset: 0, size: 0 }),
        transport: VirtioTransport::Pci,
        io_cpu,
        ..vm.devices
    };
    VmEntry { devices, ..vm }
}

fn image_contains(image: &Path, text: &str) -> bool {
    let bytes = std::fs::read(image).expect("read the disk image");
    bytes.windows(text.len()).any(|w| w == text.as_bytes())
}

/// The MSI-X interrupts of the guest's virtio devices that fired, by name (Linux names a
/// virtio-pci function's vectors `virtioN-config` and `virtioN-<queue>`), from
/// /proc/interrupts; a line for INTx would be a bare `virtioN`.
fn virtio_interrupts(interrupts: &str) -> Vec<(String, u64)> {
    interrupts
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().last()?;
            name.starts_with("virtio").then_some(())?;
            let count = l.split_whitespace().skip(1).take_while(|w| w.bytes().all(|b| b.is_ascii_digit()));
            Some((name.to_string(), count.map(|c| c.parse::<u64>().unwrap_or(0)).sum()))
        })
        .collect()
}

/// What a user of the PCI transport does: the devices are on the bus, the disk reads and
/// writes (the data in the host's image), the network reaches the host both ways, every
/// completion is an MSI-X message, and nothing the guest did was refused.
fn disk_and_network_over_pci(test: &str, io_cpu: Option<u32>, gic_version: u8) {
    disk_and_network_over_pci_placed(test, io_cpu, gic_version, None)
}

/// As `disk_and_network_over_pci`, the VM's two vCPUs sharing CPU `shared` if given (a
/// vCPU that waits then leaves its CPU, and on a GICv4 its doorbell wakes it).
fn disk_and_network_over_pci_placed(test: &str, io_cpu: Option<u32>, gic_version: u8, shared: Option<u32>) {
    let _alone = one_linux_at_a_time();
    let image = system_tests::scratch_file(&format!("{test}.img"));
    let _ = std::fs::remove_file(&image);
    xtask::images::create_disk(&image, 64 << 20).expect("create the disk image");
    let port = free_local_port();
    let smp = if io_cpu.is_some() { 3 } else { 2 };
    let machine =
        Machine { disk: Some(image.clone()), network: Some(vec![(port, 80)]), smp, gic_version, ..Machine::default() };
    let mut vm = over_pci(linux_vm_on_network("linux", 2, "10.0.2.15"), io_cpu);
    if let Some(cpu) = shared {
        vm.devices.placement = Placement { cpus: Some(vec![cpu, cpu]), policy: Some(Policy::Shared), slice_us: None };
    }
    let mut s = start_session(test, machine, &[vm], RUN_LIMIT);
    wait_for_shell(&mut s);

    // Disk 00:00.0, NIC 00:01.0, console 00:02.0: virtio's vendor and modern device IDs.
    let ids = run(&mut s, "for d in /sys/bus/pci/devices/*; do echo $d $(cat $d/vendor $d/device); done");
    for line in ["0000:00:00.0 0x1af4 0x1042", "0000:00:01.0 0x1af4 0x1041", "0000:00:02.0 0x1af4 0x1043"] {
        assert!(ids.contains(line), "{line} on the bus: {ids}");
    }
    // Counted by the guest: a kernel line about a virtio device may come between the
    // command and its output on the console.
    let mmio = run(&mut s, "echo mmio-devices=$(ls /sys/bus/platform/drivers/virtio-mmio | grep -c virtio)");
    assert_output_line(&mmio, "mmio-devices=0", "no virtio-mmio device");

    let size = run(&mut s, "cat /sys/block/vda/size");
    assert_output_line(&size, "131072", "the whole 64 MiB image, in 512-byte sectors");
    let written = run(
        &mut s,
        "for i in $(seq 1 300); do echo \"virtio-pci-test line $i\"; done > /tmp/data.txt; \
         dd if=/tmp/data.txt of=/dev/vda bs=4096 conv=fsync 2>/dev/null; \
         dd if=/dev/vda bs=1M count=64 2>/dev/null | sha256sum; \
         dd if=/dev/zero bs=1M count=64 2>/dev/null | sha256sum; \
         dd if=/dev/vda bs=4096 count=3 2>/dev/null | head -n 300 | sha256sum; sha256sum < /tmp/data.txt",
    );
    let sums: Vec<&str> =
        written.lines().filter_map(|l| l.split_whitespace().next()).filter(|w| w.len() == 64).collect();
    assert_eq!(sums.len(), 4, "{written}");
    assert_ne!(sums[0], sums[1], "the disk holds what was written, not zeros: {written}");
    assert_eq!(sums[2], sums[3], "read back as written: {written}");

    let page = http_get(port, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}\nconsole:\n{}", s.console()));
    assert!(page.contains("200 OK") && page.contains("hello from guest"), "the guest's page: {page}");
    let ping = run(&mut s, "ping -c 2 -W 5 10.0.2.2");
    assert!(ping.contains("2 packets received"), "the guest pings the gateway: {ping}");

    if gic_version == 2 {
        let frame = run(&mut s, "dmesg | grep GICv2m");
        assert!(frame.contains("SPI[96:127]"), "the GICv2m frame's SPIs: {frame}");
    } else {
        // Counted by the guest, as above: each virtio vector's line names its chip.
        let its = run(&mut s, "echo its-msi=$(grep virtio /proc/interrupts | grep -c ITS-MSI)");
        assert!(
            its.lines()
                .any(|l| l.strip_prefix("its-msi=").and_then(|n| n.trim().parse::<u32>().ok()).is_some_and(|n| n >= 5)),
            "every virtio vector an LPI of the ITS: {its}\n{}",
            run(&mut s, "dmesg | grep -i -e its -e lpi; cat /proc/interrupts")
        );
    }
    let interrupts = virtio_interrupts(&run(&mut s, "cat /proc/interrupts"));
    let fired = |name: &str| interrupts.iter().find(|(n, _)| n == name).map(|(_, c)| *c);
    assert!(fired("virtio0-req.0").is_some_and(|c| c > 0), "the disk's queue by MSI-X: {interrupts:?}");
    assert!(fired("virtio1-input.0").is_some_and(|c| c > 0), "the NIC's receive queue: {interrupts:?}");
    assert!(fired("virtio0-config").is_some(), "a vector for configuration changes: {interrupts:?}");
    assert!(!interrupts.iter().any(|(n, _)| n == "virtio0" || n == "virtio1"), "no INTx: {interrupts:?}");

    // A reboot: the functions as at power-on, their BARs placed and their vectors set up
    // again by the new kernel, the disk as it was left.
    s.send_line("reboot").unwrap();
    s.wait_for("SYSTEM_RESET: the VM reboots", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    wait_for_shell(&mut s);
    let again = run(&mut s, "cat /sys/bus/pci/devices/0000:00:00.0/device; dd if=/dev/vda bs=4096 count=3 2>/dev/null | head -n 300 | sha256sum");
    assert_output_line(&again, "0x1042", "the disk on the bus again");
    assert!(again.contains(sums[3]), "what was written, read after the reboot: {again}");

    s.send_line("poweroff").unwrap();
    s.wait_for("hypervisor: vm0 linux ended: PoweredOff (clean)", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    let out = s.finish();
    assert_eq!(out.status, Some(0), "QEMU exits 0; console:\n{}", out.console);
    for refused in
        ["virtio-blk:", "virtio-net:", "virtio-console:", "names no doorbell", "dropped", "ITS:", "data abort"]
    {
        assert!(!out.console.contains(refused), "nothing refused ({refused}); console:\n{}", out.console);
    }
    for line in [1, 150, 300] {
        assert!(image_contains(&image, &format!("virtio-pci-test line {line}\n")), "line {line} in the host image");
    }
    // On a GICv4 the board injects the LPIs (docs/vgic.md, "Direct injection of LPIs"):
    // every vector above fired through it, none through the vGIC, and no command of the
    // board's ITS failed; vCPUs that wait off their CPU were woken by their doorbells.
    let direct = "vm0 linux: its LPIs are injected by the board's GICv4.0";
    assert_eq!(out.console.contains(direct), gic_version == 4, "{direct}; console:\n{}", out.console);
    if gic_version == 4 {
        let summary = out
            .console
            .lines()
            .find_map(|l| l.split_once("its LPIs were injected by the board's GICv4.0: ").map(|(_, r)| r.to_string()))
            .unwrap_or_else(|| panic!("the VM's end says what the board did; console:\n{}", out.console));
        let doorbells: u64 = summary.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a count");
        assert!(summary.contains("; 0 command(s) of the board's ITS failed"), "{summary}");
        assert_eq!(doorbells > 0, shared.is_some(), "doorbells ring only for vCPUs waiting off their CPU: {summary}");
    }
}

#[test]
fn a_linux_vm_uses_its_disk_and_network_as_pci_functions_with_msix() {
    disk_and_network_over_pci("virtio-pci", None, 3);
}

#[test]
fn a_side_core_serves_pci_functions_and_their_messages() {
    disk_and_network_over_pci("virtio-pci-side-core", Some(2), 3);
}

/// A GICv2 has no doorbell of its own: the VM's MSIs go to its GICv2m frame.
#[test]
fn a_gicv2_vm_gets_its_msis_through_a_gicv2m_frame() {
    disk_and_network_over_pci("virtio-pci-gicv2", None, 2);
}

/// A board whose GIC is a GICv4 (QEMU `virt`, `gic-version=4`: redistributors of four
/// frames, an ITS with virtual LPIs) runs the same, the hypervisor driving it as a GICv3:
/// what its direct injection of LPIs will be built on (docs/vgic.md, "Direct injection of
/// LPIs (GICv4.0)").
#[test]
fn a_gicv4_board_runs_the_same_through_the_side_core() {
    disk_and_network_over_pci("virtio-pci-gicv4", Some(2), 4);
}

/// On a GICv4 board, the VM's two vCPUs share one CPU: a vCPU that waits for an interrupt
/// leaves the CPU with its vPE not resident, and a completion for it rings its doorbell,
/// which wakes it (docs/vgic.md, "Direct injection of LPIs (GICv4.0)").
#[test]
fn on_a_gicv4_board_vcpus_that_share_a_cpu_are_woken_by_their_doorbells() {
    disk_and_network_over_pci_placed("virtio-pci-gicv4-shared", Some(2), 4, Some(0));
}
