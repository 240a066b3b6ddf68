//! The identity-mapped VM rules (docs/capability-model.md, D1 to D3) on a tree shaped like
//! the Raspberry Pi 4's: each refusal and its message, and a property test that the checks
//! accept exactly the placements the rules allow.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use proptest::prelude::*;

use super::super::{check, check_vms, BoardLimits, DeviceTreeDevices, HeldMemory, Holder, ManifestError};
use crate::bundle::{Passthrough, PassthroughList, Placement, U32List, VmDevices, VmSpec};
use crate::fdt::test_trees::rpi4_sd_board;
use crate::platform::PhysRange;

const MIB: u64 = 1 << 20;
const SDHCI: PhysRange = PhysRange { base: 0xfe30_0000, size: 0x1000 };
const RAM: [PhysRange; 1] = [PhysRange { base: 0, size: 0x3c00_0000 }];
const UART: PhysRange = PhysRange { base: 0xfe20_1000, size: 0x200 };
/// Where QEMU raspi4b's run puts things (docs/deploy-rpi4.md's banner).
const HELD: [HeldMemory; 4] = [
    HeldMemory { range: PhysRange { base: 0, size: 0x1000 }, holder: Holder::Firmware },
    HeldMemory { range: PhysRange { base: 0x8_0000, size: 0x12_0000 }, holder: Holder::Image },
    HeldMemory { range: PhysRange { base: 0x800_0000, size: 0x28f_3000 }, holder: Holder::BootBundle },
    HeldMemory { range: PhysRange { base: 0xb00_0000, size: 0x200_0000 }, holder: Holder::Heap },
];

fn cells(values: &[u32]) -> U32List<'static> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
    U32List::new(Box::leak(bytes.into_boxed_slice())).unwrap()
}

fn devices() -> &'static DeviceTreeDevices<'static> {
    let blob: &'static [u8] = Box::leak(rpi4_sd_board(|_| {}).into_boxed_slice());
    Box::leak(Box::new(DeviceTreeDevices::new(blob).unwrap()))
}

fn board(devices: &'static DeviceTreeDevices<'static>) -> BoardLimits<'static> {
    BoardLimits { cpus: 4, memory: 4 << 30, ram: &RAM, hypervisor_devices: &[UART], disk: None, devices, held: &HELD }
}

/// VM `name` with 256 MiB, the SDHCI (INTID 158, its clock given) and RAM at `base`.
fn sd_vm(name: &'static str, base: Option<u64>, memory: u64) -> VmSpec<'static> {
    let mut passthrough = PassthroughList::default();
    let sdhci = Passthrough { name: "sdhci", reg: SDHCI, interrupts: cells(&[158]), clock_hz: Some(100_000_000) };
    passthrough.push(sdhci).unwrap();
    VmSpec {
        name,
        vcpus: 1,
        memory,
        kernel: b"kernel",
        initrd: None,
        bootargs: None,
        device_tree: None,
        devices: VmDevices::default(),
        placement: Placement::default(),
        passthrough,
        identity_mapped: base,
    }
}

/// The Pi 4's EMMC2 (its SPI left out: it shares SPI 126 with the SDHCI).
fn emmc2() -> Passthrough<'static> {
    let reg = PhysRange { base: 0xfe34_0000, size: 0x1000 };
    Passthrough { name: "emmc2", reg, interrupts: cells(&[]), clock_hz: Some(100_000_000) }
}

fn with_only(mut vm: VmSpec<'static>, device: Passthrough<'static>) -> VmSpec<'static> {
    vm.passthrough = PassthroughList::default();
    vm.passthrough.push(device).unwrap();
    vm
}

fn error(vms: &[VmSpec<'static>]) -> String {
    check(vms.iter().copied(), &board(devices())).unwrap_err().to_string()
}

#[test]
fn the_raspberry_pi_4_s_sdhci_goes_to_an_identity_mapped_vm_in_the_first_gib() {
    let vm = sd_vm("sd", Some(0x2000_0000), 256 * MIB);
    check([vm].into_iter(), &board(devices())).unwrap();
    // The EMMC2 beside it, on its own bus with the same reach, to a second VM.
    let second = with_only(sd_vm("card", Some(0x3000_0000), 128 * MIB), emmc2());
    check([vm, second].into_iter(), &board(devices())).unwrap();
}

#[test]
fn a_dma_device_goes_only_to_an_identity_mapped_vm() {
    assert_eq!(
        error(&[sd_vm("sd", None, 256 * MIB)]),
        "VM sd: passthrough sdhci: the board's device at 0xfe300000..0xfe300100 is not one known to have no DMA \
         (its first `compatible` is not among arm,pl031, arm,pl061, arm,sp804, arm,sp805, arm,pl011), and with no \
         SMMU to confine it, it could read and write the hypervisor's and other VMs' memory; give a device that \
         cannot master the bus, or map the VM's RAM at IPA = PA with `identity_mapped` (docs/manifest.md)"
    );
}

#[test]
fn a_device_behind_an_iommu_is_refused_even_to_an_identity_mapped_vm() {
    let behind = Passthrough {
        name: "master",
        reg: PhysRange { base: 0xfe31_0000, size: 0x1000 },
        interrupts: cells(&[]),
        clock_hz: None,
    };
    assert_eq!(
        error(&[with_only(sd_vm("sd", Some(0x2000_0000), 256 * MIB), behind)]),
        "VM sd: passthrough master: the board's device at 0xfe310000..0xfe311000 sits behind an IOMMU (`iommus`), \
         which this hypervisor does not program: its DMA would go through translations nobody set up; give \
         another device"
    );
}

#[test]
fn the_base_must_be_2_mib_blocks_within_the_ipa_space() {
    let message = |base| error(&[sd_vm("sd", Some(base), 256 * MIB)]);
    assert_eq!(
        message(0x2010_0000),
        "VM sd: field `identity_mapped`: base 0x20100000 must be a multiple of 2 MiB with base + memory within the \
         VM's 40-bit IPA space"
    );
    assert!(message((1 << 40) - 128 * MIB).starts_with("VM sd: field `identity_mapped`: base 0xfff8000000 must"));
    assert!(message(u64::MAX - 0x1f_ffff).contains("must be a multiple of 2 MiB"), "no overflow on the way");
}

#[test]
fn an_identity_mapped_vm_needs_a_device_that_does_dma() {
    let mut vm = sd_vm("sd", Some(0x2000_0000), 256 * MIB);
    vm.passthrough = PassthroughList::default();
    assert_eq!(
        check_vms([vm].into_iter()).unwrap_err().to_string(),
        "VM sd: field `identity_mapped` is for a VM given a device that does DMA (`[[vm.passthrough]]`); without one \
         its RAM can lie anywhere: remove it"
    );
    let uart = Passthrough {
        name: "uart",
        reg: PhysRange { base: 0xfe20_1000, size: 0x1000 },
        interrupts: cells(&[]),
        clock_hz: None,
    };
    let devices = devices();
    let limits = BoardLimits { hypervisor_devices: &[], ..board(devices) };
    assert_eq!(
        check([with_only(sd_vm("sd", Some(0x2000_0000), 256 * MIB), uart)].into_iter(), &limits)
            .unwrap_err()
            .to_string(),
        "VM sd: field `identity_mapped`: none of its passthrough devices can DMA, so nothing needs its RAM at IPA = \
         PA; remove it"
    );
}

#[test]
fn its_ram_misses_the_guests_emulated_windows_and_other_identity_mapped_vms() {
    assert_eq!(
        check_vms([sd_vm("sd", Some(0x0800_0000), 256 * MIB)].into_iter()).unwrap_err().to_string(),
        "VM sd: field `identity_mapped`: its RAM 0x8000000..0x18000000 overlaps the guest's emulated devices (GIC, \
         UART, virtio) at 0x8000000..0xa001000; give a base outside them"
    );
    let b = with_only(sd_vm("b", Some(0x2000_0000), 256 * MIB), emmc2());
    let a = sd_vm("a", Some(0x2800_0000), 128 * MIB);
    assert_eq!(
        check_vms([a, b].into_iter()).unwrap_err().to_string(),
        "VM b: field `identity_mapped`: its RAM 0x20000000..0x30000000 overlaps VM a's (0x28000000..0x30000000); \
         give each its own physical memory"
    );
}

/// The PCI host bridge's windows are the VM's only with the PCI transport: RAM there is
/// refused then, and accepted with virtio-mmio (as a Raspberry Pi 4's SD card VM has it).
#[test]
fn with_the_pci_transport_its_ram_misses_the_host_bridges_windows_too() {
    use crate::bundle::VirtioTransport;
    let at_bridge = sd_vm("sd", Some(0x0a20_0000), 256 * MIB);
    check_vms([at_bridge].into_iter()).unwrap();
    let pci = VmSpec { devices: VmDevices { transport: VirtioTransport::Pci, ..at_bridge.devices }, ..at_bridge };
    assert_eq!(
        check_vms([pci].into_iter()).unwrap_err().to_string(),
        "VM sd: field `identity_mapped`: its RAM 0xa200000..0x1a200000 overlaps the PCI host bridge's windows at \
         0xa100000..0xa300000, which `virtio_transport = \"pci\"` gives it; give a base outside them, or leave its \
         transport \"mmio\""
    );
    let above = sd_vm("sd", Some(0x0a40_0000), 256 * MIB);
    check_vms(
        [VmSpec { devices: VmDevices { transport: VirtioTransport::Pci, ..above.devices }, ..above }].into_iter(),
    )
    .unwrap();
}

#[test]
fn its_ram_is_board_ram_that_nothing_holds_and_its_device_reaches() {
    assert_eq!(
        error(&[sd_vm("sd", Some(0x3800_0000), 256 * MIB)]),
        "VM sd: field `identity_mapped`: its RAM 0x38000000..0x48000000 is not inside one of the board's RAM \
         ranges (the banner's `memory` line); give a base that puts it there"
    );
    assert_eq!(
        error(&[sd_vm("sd", Some(0x0c00_0000), 256 * MIB)]),
        "VM sd: field `identity_mapped`: its RAM 0xc000000..0x1c000000 overlaps the hypervisor's heap at \
         0xb000000..0xd000000; give a base outside it"
    );
    assert!(error(&[sd_vm("sd", Some(0), 64 * MIB)]).contains("overlaps memory the firmware reserves at 0x0..0x1000"));
    // A board with RAM above the first GiB, which the SDHCI's DMA does not reach.
    let ram = [PhysRange { base: 0, size: 0x8000_0000 }];
    let devices = devices();
    let limits = BoardLimits { ram: &ram, ..board(devices) };
    assert_eq!(
        check([sd_vm("sd", Some(0x4000_0000), 256 * MIB)].into_iter(), &limits).unwrap_err().to_string(),
        "VM sd: field `identity_mapped`: its RAM 0x40000000..0x50000000 is out of the DMA reach of passthrough \
         sdhci (CPU addresses 0x0..0x40000000, through its buses' `dma-ranges`); give a base that puts it there"
    );
    assert!(
        check([sd_vm("sd", Some(0x3000_0000), 256 * MIB)].into_iter(), &limits).is_ok(),
        "the last 256 MiB below 1 GiB"
    );
}

#[test]
fn a_clocked_device_needs_its_rate_and_a_shared_page_is_refused() {
    let mut vm = sd_vm("sd", Some(0x2000_0000), 256 * MIB);
    vm = with_only(vm, Passthrough { clock_hz: None, ..vm.passthrough.as_slice()[0] });
    assert_eq!(
        error(&[vm]),
        "VM sd: passthrough sdhci: the board's device at 0xfe300000..0xfe300100 is driven by a clock (`clocks`) the \
         VM has no controller for; give its rate in `clock_hz` (the rate the firmware set)"
    );
    // A device in the rest of the SDHCI's page: the page would give the VM both.
    let blob: &'static [u8] = Box::leak(
        rpi4_sd_board(|f| {
            let n = f.begin_node("other@7e300800").unwrap();
            f.property_array_u32("reg", &[0x7e30_0800, 0x100]).unwrap();
            f.end_node(n).unwrap();
        })
        .into_boxed_slice(),
    );
    let devices: &'static DeviceTreeDevices<'static> = Box::leak(Box::new(DeviceTreeDevices::new(blob).unwrap()));
    assert_eq!(
        check([sd_vm("sd", Some(0x2000_0000), 256 * MIB)].into_iter(), &board(devices)).unwrap_err().to_string(),
        "VM sd: passthrough sdhci: field `reg` 0xfe300000..0xfe301000 also holds the registers of the board's device \
         at 0xfe300800..0xfe300900; a page given to a VM must hold one device's registers only"
    );
}

#[test]
fn the_error_names_the_rule_for_each_kind() {
    let e = check_vms([sd_vm("sd", Some(0x0900_0000), 2 * MIB)].into_iter()).unwrap_err();
    assert!(matches!(e, ManifestError::IdentityOverGuestDevices { vm: "sd", .. }));
}

/// What the rules say of one identity-mapped VM's RAM at `base`, written apart from the
/// checks: 2 MiB-aligned, inside the board's RAM, outside what is held, outside the guest's
/// emulated windows, inside the SDHCI's DMA reach (the first GiB).
fn allowed(base: u64, size: u64) -> bool {
    let end = base + size;
    let disjoint = |b: u64, e: u64| end <= b || e <= base;
    base.is_multiple_of(2 * MIB)
        && end <= 0x3c00_0000
        && HELD.iter().all(|h| disjoint(h.range.base, h.range.end()))
        && disjoint(0x0800_0000, 0x0a00_1000)
        && end <= 0x4000_0000
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The checks accept one identity-mapped VM exactly where the rules allow it; when they
    /// refuse, it is with an identity rule's error for that VM.
    #[test]
    fn one_vm_is_accepted_exactly_where_the_rules_allow(block in 0u64..600, page in prop::bool::weighted(0.1), blocks in 1u64..160) {
        let base = block * 2 * MIB + if page { 0x1000 } else { 0 };
        let size = blocks * 2 * MIB;
        let result = check([sd_vm("sd", Some(base), size)].into_iter(), &board(devices()));
        prop_assert_eq!(result.is_ok(), allowed(base, size), "base {:#x} size {:#x}: {:?}", base, size, result);
        if let Err(e) = result {
            let identity_error = matches!(
                e,
                ManifestError::IdentityBase { vm: "sd", .. }
                    | ManifestError::IdentityOverGuestDevices { vm: "sd", .. }
                    | ManifestError::IdentityNotInRam { vm: "sd", .. }
                    | ManifestError::IdentityOverHeld { vm: "sd", .. }
                    | ManifestError::IdentityBeyondDma { vm: "sd", .. }
            );
            prop_assert!(identity_error, "{:?}", e);
        }
    }

    /// Two identity-mapped VMs, each placed where the rules allow it alone, are accepted
    /// together exactly when their RAM does not overlap.
    #[test]
    fn two_vms_are_accepted_exactly_when_their_ram_is_disjoint(a in 0u64..480, b in 0u64..480, sa in 1u64..32, sb in 1u64..32) {
        let (a, b, sa, sb) = (a * 2 * MIB, b * 2 * MIB, sa * 2 * MIB, sb * 2 * MIB);
        prop_assume!(allowed(a, sa) && allowed(b, sb));
        let second = with_only(sd_vm("b", Some(b), sb), emmc2());
        let result = check([sd_vm("a", Some(a), sa), second].into_iter(), &board(devices()));
        let disjoint = a + sa <= b || b + sb <= a;
        prop_assert_eq!(result.is_ok(), disjoint, "{:?}", result);
        if !disjoint {
            let overlap = matches!(result, Err(ManifestError::IdentityOverlap { vm: "b", other: "a", .. }));
            prop_assert!(overlap);
        }
    }
}
