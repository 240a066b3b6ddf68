//! A VM as the runtime builds it, through the fake image (`virtio::FakeEnv`): its device
//! tree and RAM contents, where its trapped accesses go, console input, ending and reset.

use hyp_core::bundle::{DiskSlice, VmSpec};
use hyp_core::cap::CapId;
use hyp_core::guest_map::{VirtioSlot, GICD_IPA, UART_IPA};
use hyp_core::mmio::{MmioDispatch, MmioError};
use hyp_core::platform::PhysRange;
use hyp_core::syndrome::AccessWidth;
use hyp_core::vcpu_power::{EndReason, VcpuStart};
use stage2::Ipa;

use super::virtio::{FakeEnv, LINES, RAM_PA, RAM_SIZE};
use super::{leak, spec};
use crate::fake::FakeArch;
use crate::scheduling::vcpu_ref;
use crate::scheduling::Scheduling;
use crate::vm::{CallEffect, Vm, VmBuild, VmError};
use crate::vm_resources::VmResources;
use hyp_core::smccc::{psci_status, Hypercall};
use sched::{Policy, VcpuState};

/// An arm64 `Image` header of a 64 KiB kernel (booting.rst).
fn kernel() -> &'static [u8] {
    let mut h = vec![0u8; 64];
    h[16..24].copy_from_slice(&(64u64 << 10).to_le_bytes());
    h[0x38..0x3c].copy_from_slice(b"ARM\x64");
    Box::leak(h.into_boxed_slice())
}

pub(super) fn vm_spec(disk: Option<DiskSlice>, nic: bool) -> VmSpec<'static> {
    let mut s = spec("guest", 2, None, false);
    s.memory = RAM_SIZE as u64;
    s.kernel = kernel();
    s.devices.disk = disk;
    s.devices.network = nic.then_some(None);
    s
}

fn build(spec: VmSpec<'static>, gic_v3: bool) -> Result<Vm<FakeEnv>, VmError> {
    build_with(spec, gic_v3).map(|(vm, _)| vm)
}

/// The VM and the scheduler its vCPUs start through (each vCPU homed on CPU 0, shared).
fn build_with(spec: VmSpec<'static>, gic_v3: bool) -> Result<(Vm<FakeEnv>, &'static Scheduling<FakeArch>), VmError> {
    build_vm(1, spec, gic_v3)
}

/// VM `id`, and the scheduler its vCPUs start through.
pub(super) fn build_vm(
    id: usize,
    spec: VmSpec<'static>,
    gic_v3: bool,
) -> Result<(Vm<FakeEnv>, &'static Scheduling<FakeArch>), VmError> {
    let granted = VmResources {
        vm_cap: CapId(7),
        ram: PhysRange { base: RAM_PA, size: RAM_SIZE as u64 },
        vttbr: 0x1000,
        vtcr: 0,
        ipa_bits: 40,
        table_frames: 3,
    };
    let scheduling = leak(Scheduling::new());
    scheduling.init(2);
    for v in 0..spec.vcpus as usize {
        scheduling.add(vcpu_ref(id, v), 0, Policy::Shared { slice: 100 }).unwrap();
    }
    let vm = Vm::create(
        VmBuild { id, spec, granted: &granted, gic_v3, passthrough: &[], seeds: None, disk_vms: 1 },
        scheduling,
    )?;
    Ok((vm, scheduling))
}

fn read(vm: &Vm<FakeEnv>, ipa: u64) -> Result<u64, MmioError> {
    vm.mmio().read(0, Ipa(ipa), AccessWidth::Word)
}

#[test]
fn a_vm_loads_its_kernel_and_a_device_tree_with_the_devices_its_manifest_names() {
    let vm = build(vm_spec(Some(DiskSlice { offset: 0, size: 8 << 9 }), true), true).unwrap();
    let mut placed = Vec::new();
    vm.load(|offset, bytes| placed.push((offset, bytes.to_vec())));
    assert_eq!(placed.len(), 2, "kernel and device tree (no initrd)");
    assert_eq!(placed[0].0, 0, "the kernel at the base of RAM");
    let (dtb_at, dtb) = &placed[1];
    assert!(*dtb_at as usize + dtb.len() <= RAM_SIZE);
    let text = String::from_utf8_lossy(dtb);
    assert_eq!(text.matches("virtio,mmio").count(), 3, "disk, NIC and console");
    assert!(text.contains("arm,gic-v3") && text.contains("arm,pl011"));
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines.iter().any(|l| l.starts_with("hypervisor: vm1 guest: 4 MiB RAM at IPA 0x40000000")), "{lines:?}");
}

#[test]
fn trapped_accesses_reach_the_vgic_the_uart_and_the_virtio_windows_and_nothing_else() {
    let vm = build(vm_spec(None, false), false).unwrap();
    let typer = read(&vm, GICD_IPA + 4).unwrap();
    assert_eq!(typer & 0x1f, 3, "GICD_TYPER.ITLinesNumber: 32 * (3 + 1) INTIDs, SPIs 32..127");
    assert_eq!((typer >> 5) & 7, 1, "GICD_TYPER.CPUNumber: 2 vCPUs");
    assert_eq!(read(&vm, UART_IPA + 0xfe0), Ok(0x11), "UARTPeriphID0 of a PL011");
    assert_eq!(read(&vm, VirtioSlot::Console.ipa()), Ok(0x7472_6976), "the console's MagicValue");
    assert_eq!(read(&vm, VirtioSlot::Console.ipa() + 8), Ok(3), "DeviceID: console");
    assert!(read(&vm, VirtioSlot::Disk.ipa()).is_err(), "no disk: nothing at its slot");
    assert!(read(&vm, GICD_IPA + 0x10_0000).is_err(), "GICv2 has no redistributors");
    assert_eq!(vm.mmio().device_name(Ipa(UART_IPA)), Some("pl011"));
    assert_eq!(vm.mmio().device_name(Ipa(0x0900_1000)), None);
}

#[test]
fn typed_bytes_wait_in_the_uart_until_the_guest_reads_them() {
    let vm = build(vm_spec(None, false), true).unwrap();
    vm.console_input(b"hi");
    let mut got = vec![];
    for _ in 0..3 {
        got.push(read(&vm, UART_IPA).unwrap() as u8);
    }
    assert_eq!(&got[..2], b"hi");
    assert_eq!(read(&vm, UART_IPA + 0x18).unwrap() & (1 << 4), 1 << 4, "UARTFR.RXFE: empty again");
}

#[test]
fn a_vm_ends_when_its_last_vcpu_stops_and_a_reset_starts_it_again() {
    let vm = build(vm_spec(None, false), true).unwrap();
    assert!(!vm.is_ending());
    assert!(!vm.request_end(EndReason::Destroyed), "vCPU 0 is on: the VM ends when it stops");
    assert!(vm.is_ending(), "its vCPUs leave at their next exit");
    assert_eq!(vm.power.lock().stopped(0), Some(EndReason::Destroyed), "the last vCPU's stop ends it");
    let ctlr = |vm: &Vm<FakeEnv>| vm.vgic.read_distributor(0, 0, AccessWidth::Word).unwrap() as u32;
    vm.vgic.write_distributor(0, 0, AccessWidth::Word, 0b11).unwrap();
    assert_eq!(ctlr(&vm) & 0b11, 0b11, "GICD_CTLR's group enables");
    assert_eq!(vm.vgic.control_words.read(0), Some(ctlr(&vm)), "the vector's copy of GICD_CTLR");
    vm.reset(None);
    assert!(!vm.is_ending());
    assert!(vm.power.lock().started(0).is_some(), "vCPU 0 starts again at its entry");
    assert_eq!(ctlr(&vm) & 0b11, 0, "GICD_CTLR as at power-on");
    assert_eq!(vm.vgic.control_words.read(0), Some(ctlr(&vm)), "the vector's copy of it too");
}

#[test]
fn a_disk_slice_the_board_disk_cannot_hold_is_a_vm_error() {
    let too_far = DiskSlice { offset: 1 << 30, size: 512 };
    let err = build(vm_spec(Some(too_far), false), true).err().expect("refused");
    assert!(matches!(err, VmError::Disk(_)), "{err}");
    assert!(err.to_string().contains("does not fit in the board's disk"), "{err}");
}

#[test]
fn psci_cpu_on_starts_a_vcpu_through_the_scheduler_once() {
    let (vm, scheduling) = build_with(vm_spec(None, false), true).unwrap();
    let entry = hyp_core::guest_map::RAM_IPA + 0x1000;
    let on = |target_mpidr| Hypercall::CpuOn { target_mpidr, entry, context: 7 };
    assert_eq!(vm.call(0, on(1)), CallEffect::Resume(Some(psci_status::SUCCESS)));
    assert_eq!(scheduling.state(vcpu_ref(1, 1)), Some(VcpuState::Runnable), "vCPU 1 waits for its CPU");
    assert_eq!(
        vm.power.lock().started(1),
        Some(VcpuStart { entry, context: 7, kernel: false }),
        "it starts at the entry with its context"
    );
    assert_eq!(vm.call(0, on(1)), CallEffect::Resume(Some(psci_status::ALREADY_ON)));
    assert_eq!(vm.call(0, on(5)), CallEffect::Resume(Some(psci_status::INVALID_PARAMETERS)), "no vCPU 5");
    let outside = Hypercall::CpuOn { target_mpidr: 1, entry: 0x10, context: 0 };
    let invalid_address = CallEffect::Resume(Some(hyp_core::vcpu_power::INVALID_ADDRESS));
    assert_eq!(vm.call(0, outside), invalid_address, "an entry outside the VM's RAM");
    let info = Hypercall::AffinityInfo { target_mpidr: 1, lowest_level: 0 };
    assert_eq!(vm.call(0, info), CallEffect::Resume(Some(psci_status::AFFINITY_ON)));
}

#[test]
fn psci_power_calls_stop_the_vcpu_or_end_the_vm() {
    let (vm, _) = build_with(vm_spec(None, false), true).unwrap();
    assert_eq!(vm.call(0, Hypercall::CpuOff), CallEffect::Stop);
    assert_eq!(vm.call(0, Hypercall::SystemOff), CallEffect::End(EndReason::PoweredOff));
    assert_eq!(vm.call(0, Hypercall::SystemReset), CallEffect::End(EndReason::Reset));
    assert_eq!(vm.call(1, Hypercall::VmExit { status: 3 }), CallEffect::End(EndReason::Exited(3)));
    assert_eq!(vm.call(0, Hypercall::CpuSuspend), CallEffect::Resume(Some(psci_status::SUCCESS)));
    assert_eq!(vm.call(0, Hypercall::Unknown { function: 0x8400_00ff }), CallEffect::Resume(None));
}
