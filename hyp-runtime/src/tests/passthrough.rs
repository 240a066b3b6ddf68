//! Passthrough devices from the board's device tree, and who owns their interrupts.

use hyp_core::bundle::{Passthrough, U32List};
use hyp_core::cap::{CapError, CapSpace};
use hyp_core::fdt::DmaRange;
use hyp_core::guest_fdt::{self, GuestGic, GuestPassthrough, GuestPlatform};
use hyp_core::manifest::DeviceTreeDevices;
use hyp_core::platform::PhysRange;
use stage2::TableFormat;

use super::spec;
use crate::passthrough::{from_board, spi_list, PassthroughError};

/// A board with an edge-triggered device at 0x1c09_0000 (SPIs 37, 38) and a level one at
/// 0x1c0a_0000 (SPI 39), described the way a device tree does.
fn board() -> Vec<u8> {
    guest_fdt::build(&GuestPlatform {
        vcpus: 1,
        ram_base: 0x4000_0000,
        ram_size: 256 << 20,
        gic: GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 },
        uart_base: 0x0900_0000,
        uart_spi: 1,
        virtio_mmio: vec![],
        pci: None,
        bootargs: String::new(),
        initrd: None,
        passthrough: vec![
            GuestPassthrough {
                base: 0x1c09_0000,
                size: 0x1000,
                compatible: b"arm,pl031\0".to_vec(),
                spis: vec![(5, 1), (6, 1)],
                ..GuestPassthrough::default()
            },
            GuestPassthrough {
                base: 0x1c0a_0000,
                size: 0x1000,
                compatible: b"acme,dev\0".to_vec(),
                spis: vec![(7, 4)],
                ..GuestPassthrough::default()
            },
        ],
        seeds: None,
    })
    .unwrap()
}

fn cells(values: &[u32]) -> U32List<'static> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
    U32List::new(Box::leak(bytes.into_boxed_slice())).unwrap()
}

fn with_device(name: &'static str, base: u64, spis: &[u32]) -> hyp_core::bundle::VmSpec<'static> {
    let mut vm = spec(name, 1, None, false);
    vm.passthrough
        .push(Passthrough {
            name: "dev",
            reg: PhysRange { base, size: 0x1000 },
            interrupts: cells(spis),
            clock_hz: None,
        })
        .unwrap();
    vm
}

fn caps() -> CapSpace {
    CapSpace::new(TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 40 })
}

#[test]
fn each_device_gets_its_board_node_trigger_and_capabilities() {
    let tree = board();
    let board = DeviceTreeDevices::new(&tree).unwrap();
    let mut caps = caps();
    let vms = [with_device("a", 0x1c09_0000, &[37, 38]), with_device("b", 0x1c0a_0000, &[39])];
    let devices = from_board(&mut caps, vms.into_iter(), &board).unwrap();
    assert_eq!(devices.len(), 2);
    let (a, b) = (&devices[0][0], &devices[1][0]);
    assert!(a.spis.iter().all(|s| s.edge()), "{a:?}");
    assert!(!b.spis[0].edge(), "{b:?}");
    assert_eq!(spi_list(&a.spis), "37, 38");
    assert_eq!(a.compatible, b"arm,pl031\0");
    let node = a.guest_node();
    assert_eq!((node.base, node.size), (0x1c09_0000, 0x1000));
    assert_eq!(node.spis, vec![(5, 1), (6, 1)], "the guest's node has the board's SPI numbers and flags");
    assert_ne!(a.region, b.region);
}

#[test]
fn a_window_the_board_has_no_device_at_is_refused() {
    let tree = board();
    let board = DeviceTreeDevices::new(&tree).unwrap();
    let err = from_board(&mut caps(), [with_device("a", 0x1c0b_0000, &[])].into_iter(), &board).unwrap_err();
    assert!(matches!(err, PassthroughError::NoBoardNode { vm: "a", .. }), "{err}");
    assert!(err.to_string().contains("has no device at"), "{err}");
}

#[test]
fn an_spi_given_to_two_vms_is_refused() {
    let tree = board();
    let board = DeviceTreeDevices::new(&tree).unwrap();
    let vms = [with_device("a", 0x1c09_0000, &[37]), with_device("b", 0x1c0a_0000, &[37])];
    let err = from_board(&mut caps(), vms.into_iter(), &board).unwrap_err();
    assert!(
        matches!(
            err,
            PassthroughError::Interrupt { vm: "b", intid: 37, error: CapError::DuplicateInterrupt { .. }, .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("give each SPI to one VM"), "{err}");
}

/// The manifest lets one device list an INTID twice (hyp_core::manifest: "harmless"); the
/// boot that follows its check must then not refuse it: the SPI is the device's once.
#[test]
fn an_spi_listed_twice_for_one_device_is_its_once() {
    let tree = board();
    let board = DeviceTreeDevices::new(&tree).unwrap();
    let vms = [with_device("a", 0x1c09_0000, &[37, 38, 37])];
    hyp_core::manifest::check_vms(vms.iter().copied()).expect("the manifest's rules accept it");
    let mut caps = caps();
    let devices = from_board(&mut caps, vms.into_iter(), &board).unwrap();
    assert_eq!(spi_list(&devices[0][0].spis), "37, 38");
    assert_eq!(devices[0][0].guest_node().spis, vec![(5, 1), (6, 1)]);
}

#[test]
fn a_window_over_memory_handed_to_vms_is_refused() {
    let tree = board();
    let board = DeviceTreeDevices::new(&tree).unwrap();
    let mut caps = caps();
    caps.add_untyped(PhysRange { base: 0x1c00_0000, size: 0x20_0000 }).unwrap();
    let err = from_board(&mut caps, [with_device("a", 0x1c09_0000, &[])].into_iter(), &board).unwrap_err();
    assert!(matches!(err, PassthroughError::Region { vm: "a", .. }), "{err}");
}

/// A board whose bus translates DMA addresses (as a Raspberry Pi 4's `/soc`): its SD host
/// controller at 0xfe30_0000 in a bus with `dma-ranges`, with a bus width, a clock and
/// properties that describe what the board wired to it.
fn board_with_a_dma_bus() -> Vec<u8> {
    guest_fdt::build(&GuestPlatform {
        vcpus: 1,
        ram_base: 0,
        ram_size: 0x3c00_0000,
        gic: GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 },
        uart_base: 0x0900_0000,
        uart_spi: 1,
        virtio_mmio: vec![],
        pci: None,
        bootargs: String::new(),
        initrd: None,
        passthrough: vec![GuestPassthrough {
            base: 0xfe30_0000,
            size: 0x1000,
            compatible: b"brcm,bcm2835-sdhci\0".to_vec(),
            spis: vec![(126, 4)],
            properties: vec![("bus-width".into(), 4u32.to_be_bytes().to_vec())],
            clock_hz: Some(50_000_000),
            dma_ranges: vec![DmaRange { bus: 0xc000_0000, cpu: 0, size: 0x4000_0000 }],
        }],
        seeds: None,
    })
    .unwrap()
}

#[test]
fn an_identity_mapped_vm_s_device_carries_the_board_s_dma_translation_and_its_own_properties() {
    let tree = board_with_a_dma_bus();
    let board = DeviceTreeDevices::new(&tree).unwrap();
    let mut vm = spec("sd", 1, None, false);
    vm.identity_mapped = Some(0x2000_0000);
    let clocked = Passthrough {
        name: "sdhci",
        reg: PhysRange { base: 0xfe30_0000, size: 0x1000 },
        interrupts: cells(&[158]),
        clock_hz: Some(100_000_000),
    };
    vm.passthrough.push(clocked).unwrap();
    let devices = from_board(&mut caps(), [vm].into_iter(), &board).unwrap();
    let sdhci = &devices[0][0];
    assert_eq!(sdhci.dma_ranges, vec![DmaRange { bus: 0xc000_0000, cpu: 0, size: 0x4000_0000 }]);
    assert_eq!(sdhci.properties, vec![("bus-width".to_string(), 4u32.to_be_bytes().to_vec())], "not `clocks`");
    assert_eq!(sdhci.clock_hz, Some(100_000_000), "the manifest's rate, not the board's");
    let node = sdhci.guest_node();
    assert_eq!((node.dma_ranges.len(), node.clock_hz), (1, Some(100_000_000)));
    // A translated VM's device gets no translation: its guest gives it no bus addresses.
    let translated = with_device("plain", 0xfe30_0000, &[158]);
    let devices = from_board(&mut caps(), [translated].into_iter(), &board).unwrap();
    assert!(devices[0][0].dma_ranges.is_empty());
}
