//! The board discovered from device trees: QEMU's own, and trees built here for boards
//! QEMU's dumps do not cover (a Raspberry Pi 4's shape).

use super::*;

const VIRT_GICV3: &[u8] = include_bytes!("../../tests/data/qemu-virt-gicv3-smp4.dtb");
const VIRT_GICV2: &[u8] = include_bytes!("../../tests/data/qemu-virt-gicv2-smp2.dtb");

/// QEMU's 32-bit `virt` without `virtualization=on` (a kernel entered in SVC mode): its
/// GIC has no virtualization frames, but its console is there to say so on.
#[test]
fn a_board_without_virtualization_still_names_its_console() {
    let dtb = include_bytes!("../../tests/data/qemu-virt-arm-svc.dtb");
    assert_eq!(Platform::from_device_tree(dtb).err(), Some(PlatformError::GicWithoutVirtualization));
    assert_eq!(console_uart(dtb), Some(PhysRange { base: 0x0900_0000, size: 0x1000 }));
    assert_eq!(console_uart(b"not a device tree"), None);
}

#[test]
fn qemu_virt_gicv3_is_discovered_from_its_device_tree() {
    let p = Platform::from_device_tree(VIRT_GICV3).unwrap();
    assert_eq!(p.model, "linux,dummy-virt");
    assert_eq!(p.memory.as_slice(), &[PhysRange { base: 0x4000_0000, size: 0x4000_0000 }]);
    assert_eq!(p.cpus.as_slice(), &[0, 1, 2, 3]);
    assert_eq!(p.cpus_left_off, 0);
    assert_eq!(p.gic.version, GicVersion::V3);
    assert_eq!(p.gic.distributor, PhysRange { base: 0x0800_0000, size: 0x1_0000 });
    assert_eq!(p.gic.redistributors, Some(PhysRange { base: 0x080a_0000, size: 0xf6_0000 }));
    assert_eq!(p.gic.maintenance_intid, Some(25));
    assert_eq!(p.gic.its, Some(PhysRange { base: 0x0808_0000, size: 0x2_0000 }), "its@8080000, a child of the GIC");
    assert_eq!(p.uart, PhysRange { base: 0x0900_0000, size: 0x1000 });
    assert_eq!(p.uart_intid, Some(33), "SPI 1");
    assert_eq!(p.psci, Some(PsciConduit::Smc));
    assert_eq!(p.cpu_start.as_slice(), &[CpuStart::Psci; 4]);
    assert_eq!(
        p.timer,
        TimerInterrupts { secure_physical: 29, nonsecure_physical: 30, virtual_timer: 27, hyp_physical: 26 }
    );
    assert_eq!(p.initrd, None);
    assert_eq!(p.virtio_mmio.len(), 32, "QEMU's virt has 32 virtio-mmio transports");
    assert_eq!(p.rng_seed.map(<[u8]>::len), Some(32), "QEMU gives 32 random bytes in /chosen/rng-seed");
    for (i, t) in p.virtio_mmio.iter().enumerate() {
        let i = i as u64;
        assert_eq!(t.window, PhysRange { base: 0x0a00_0000 + i * 0x200, size: 0x200 });
        assert_eq!(t.intid, Some(48 + i as u32), "SPI 16 upward");
    }
}

/// How `rpi4_board` differs from Debian's `bcm2711-rpi-4-b.dtb` as the firmware passes it.
struct Rpi4 {
    /// `/chosen/stdout-path`, if any (the Debian tree's is "serial1:115200n8").
    stdout_path: Option<&'static str>,
    /// The `/memreserve/` entry over the spin tables and QEMU's boot stub (0..0x1000).
    memreserve: bool,
}

const DEBIAN_RPI4: Rpi4 = Rpi4 { stdout_path: Some("serial1:115200n8"), memreserve: true };

/// A tree shaped like the Raspberry Pi 4's (Debian's `bcm2711-rpi-4-b.dtb` with the memory
/// a 8 GiB board's firmware fills in): no /psci, its CPUs waiting in spin tables, its
/// peripherals and GIC-400 under `/soc`, whose `ranges` map the VideoCore's bus addresses
/// (0x7e.., and 0x40.. for the GIC) to the CPU's (0xfe.., 0xff8..), RAM in three banks,
/// the PL011 (UART0) and the mini UART, the power manager's watchdog, and a
/// `/reserved-memory` with a CMA pool (no `reg`), a disabled node and one real reservation.
fn rpi4_board(shape: Rpi4) -> std::vec::Vec<u8> {
    use vm_fdt::{FdtReserveEntry, FdtWriter};
    let reserve = if shape.memreserve { std::vec![FdtReserveEntry::new(0, 0x1000).unwrap()] } else { std::vec![] };
    let mut fdt = FdtWriter::new_with_mem_reserv(&reserve).unwrap();
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<std::vec::Vec<_>>();
    let root = fdt.begin_node("").unwrap();
    fdt.property_string("model", "Raspberry Pi 4 Model B").unwrap();
    // As in Debian's tree: the GIC-400 (phandle 1 here) takes every interrupt.
    fdt.property_u32("interrupt-parent", 1).unwrap();
    fdt.property_u32("#address-cells", 2).unwrap();
    fdt.property_u32("#size-cells", 1).unwrap();
    let aliases = fdt.begin_node("aliases").unwrap();
    fdt.property_string("serial0", "/soc/serial@7e201000").unwrap();
    fdt.property_string("serial1", "/soc/serial@7e215040").unwrap();
    fdt.end_node(aliases).unwrap();
    let chosen = fdt.begin_node("chosen").unwrap();
    if let Some(path) = shape.stdout_path {
        fdt.property_string("stdout-path", path).unwrap();
    }
    fdt.end_node(chosen).unwrap();
    let reserved = fdt.begin_node("reserved-memory").unwrap();
    fdt.property_u32("#address-cells", 2).unwrap();
    fdt.property_u32("#size-cells", 1).unwrap();
    fdt.property_null("ranges").unwrap();
    let cma = fdt.begin_node("linux,cma").unwrap();
    fdt.property_string("compatible", "shared-dma-pool").unwrap();
    fdt.property_u32("size", 0x400_0000).unwrap();
    fdt.property_array_u32("alloc-ranges", &[0, 0, 0x4000_0000]).unwrap();
    fdt.end_node(cma).unwrap();
    let nvram = fdt.begin_node("nvram@0").unwrap();
    fdt.property_array_u32("reg", &[0, 0, 0]).unwrap();
    fdt.property_string("status", "disabled").unwrap();
    fdt.end_node(nvram).unwrap();
    let firmware = fdt.begin_node("firmware@3b300000").unwrap();
    fdt.property_array_u32("reg", &[0, 0x3b30_0000, 0x10_0000]).unwrap();
    fdt.property_null("no-map").unwrap();
    fdt.end_node(firmware).unwrap();
    fdt.end_node(reserved).unwrap();
    let soc = fdt.begin_node("soc").unwrap();
    fdt.property_string("compatible", "simple-bus").unwrap();
    fdt.property_u32("#address-cells", 1).unwrap();
    fdt.property_u32("#size-cells", 1).unwrap();
    let ranges = [0x7e00_0000, 0, 0xfe00_0000, 0x180_0000, 0x7c00_0000, 0, 0xfc00_0000, 0x200_0000];
    fdt.property_array_u32("ranges", &[&ranges[..], &[0x4000_0000, 0, 0xff80_0000, 0x80_0000]].concat()).unwrap();
    let node = |fdt: &mut FdtWriter, name: &str, compatible: &[&str], reg: &[u32], interrupts: &[u32]| {
        let n = fdt.begin_node(name).unwrap();
        fdt.property_string_list("compatible", strings(compatible)).unwrap();
        fdt.property_array_u32("reg", reg).unwrap();
        if !interrupts.is_empty() {
            fdt.property_array_u32("interrupts", interrupts).unwrap();
        }
        fdt.end_node(n).unwrap();
    };
    let pm = ["brcm,bcm2711-pm", "brcm,bcm2835-pm-wdt"];
    node(&mut fdt, "watchdog@7e100000", &pm, &[0x7e10_0000, 0x114, 0x7e00_a000, 0x24], &[]);
    node(&mut fdt, "serial@7e201000", &["arm,pl011", "arm,primecell"], &[0x7e20_1000, 0x200], &[0, 0x79, 4]);
    node(&mut fdt, "serial@7e215040", &["brcm,bcm2835-aux-uart"], &[0x7e21_5040, 0x40], &[0, 0x5d, 4]);
    let gic = fdt.begin_node("interrupt-controller@40041000").unwrap();
    fdt.property_string("compatible", "arm,gic-400").unwrap();
    fdt.property_array_u32(
        "reg",
        &[0x4004_1000, 0x1000, 0x4004_2000, 0x2000, 0x4004_4000, 0x2000, 0x4004_6000, 0x2000],
    )
    .unwrap();
    fdt.property_array_u32("interrupts", &[1, 9, 0xf04]).unwrap();
    fdt.property_null("interrupt-controller").unwrap();
    fdt.property_u32("#interrupt-cells", 3).unwrap();
    fdt.property_u32("phandle", 1).unwrap();
    fdt.end_node(gic).unwrap();
    fdt.end_node(soc).unwrap();
    let timer = fdt.begin_node("timer").unwrap();
    fdt.property_string("compatible", "arm,armv8-timer").unwrap();
    fdt.property_array_u32("interrupts", &[1, 13, 0xf08, 1, 14, 0xf08, 1, 11, 0xf08, 1, 10, 0xf08]).unwrap();
    fdt.end_node(timer).unwrap();
    let cpus = fdt.begin_node("cpus").unwrap();
    fdt.property_u32("#address-cells", 1).unwrap();
    fdt.property_u32("#size-cells", 0).unwrap();
    for n in 0..4u32 {
        let cpu = fdt.begin_node(&std::format!("cpu@{n}")).unwrap();
        fdt.property_string("device_type", "cpu").unwrap();
        fdt.property_u32("reg", n).unwrap();
        fdt.property_string("enable-method", "spin-table").unwrap();
        fdt.property_array_u32("cpu-release-addr", &[0, 0xd8 + 8 * n]).unwrap();
        fdt.end_node(cpu).unwrap();
    }
    fdt.end_node(cpus).unwrap();
    let memory = fdt.begin_node("memory@0").unwrap();
    fdt.property_string("device_type", "memory").unwrap();
    fdt.property_array_u32("reg", &[0, 0, 0x3b40_0000, 0, 0x4000_0000, 0xbc00_0000, 1, 0, 0x8000_0000]).unwrap();
    fdt.end_node(memory).unwrap();
    fdt.end_node(root).unwrap();
    fdt.finish().unwrap()
}

#[test]
fn a_raspberry_pi_4_is_found_through_its_buses_with_its_ram_banks_and_spin_tables() {
    let blob = rpi4_board(DEBIAN_RPI4);
    let p = Platform::from_device_tree(&blob).unwrap();
    assert_eq!(p.psci, None);
    assert_eq!(
        p.memory.as_slice(),
        &[
            PhysRange { base: 0, size: 0x3b40_0000 },
            PhysRange { base: 0x4000_0000, size: 0xbc00_0000 },
            PhysRange { base: 0x1_0000_0000, size: 0x8000_0000 },
        ],
        "three banks, the second below the peripherals at 0xfc00_0000"
    );
    assert_eq!(p.cpus.as_slice(), &[0, 1, 2, 3]);
    let releases: std::vec::Vec<CpuStart> = (0..4).map(|n| CpuStart::SpinTable { release: 0xd8 + 8 * n }).collect();
    assert_eq!(p.cpu_start.as_slice(), releases.as_slice());
    // The GIC-400 at 0x4004_1000 on the bus is at 0xff84_1000 for the CPU.
    assert_eq!(p.gic.version, GicVersion::V2);
    assert_eq!(p.gic.distributor, PhysRange { base: 0xff84_1000, size: 0x1000 });
    assert_eq!(p.gic.cpu_interface, Some(PhysRange { base: 0xff84_2000, size: 0x2000 }));
    assert_eq!(p.gic.hyp_interface, Some(PhysRange { base: 0xff84_4000, size: 0x2000 }));
    assert_eq!(p.gic.virtual_cpu_interface, Some(PhysRange { base: 0xff84_6000, size: 0x2000 }));
    assert_eq!(p.gic.maintenance_intid, Some(25));
    assert_eq!(p.uart, PhysRange { base: 0xfe20_1000, size: 0x200 });
    assert_eq!(p.uart_intid, Some(153), "SPI 121");
    assert_eq!(
        p.power_controller,
        Some(PowerController::Bcm2835Pm { registers: PhysRange { base: 0xfe10_0000, size: 0x114 } })
    );
    assert!(p.virtio_mmio.is_empty());
}

#[test]
fn reserved_memory_is_the_memreserve_entries_and_the_enabled_reservations_with_a_reg() {
    let blob = rpi4_board(DEBIAN_RPI4);
    let p = Platform::from_device_tree(&blob).unwrap();
    // Not the CMA pool (a size to allocate from anywhere, no reg) nor the disabled nvram@0.
    assert_eq!(
        p.reserved.as_slice(),
        &[PhysRange { base: 0, size: 0x1000 }, PhysRange { base: 0x3b30_0000, size: 0x10_0000 }]
    );
}

#[test]
fn the_console_is_the_pl011_stdout_path_names_or_the_first_and_the_banner_says_why() {
    let console = |stdout_path| {
        let blob = rpi4_board(Rpi4 { stdout_path, ..DEBIAN_RPI4 });
        let p = Platform::from_device_tree(&blob).unwrap();
        assert_eq!(p.uart, PhysRange { base: 0xfe20_1000, size: 0x200 }, "the PL011 whatever stdout-path says");
        let line = p.to_string().lines().find(|l| l.starts_with("  uart")).unwrap_or_default().to_string();
        (std::format!("{:?}", p.console_source), line)
    };
    // Debian's tree names the mini UART through an alias, with options after the colon.
    let (source, line) = console(Some("serial1:115200n8"));
    assert_eq!(
        source,
        r#"StdoutNotPl011 { path: "serial1:115200n8", node: "serial@7e215040", compatible: "brcm,bcm2835-aux-uart" }"#
    );
    assert_eq!(
        line,
        "  uart        PL011 at 0xfe201000..0xfe201200 (the first PL011: stdout-path \"serial1:115200n8\" names \
         serial@7e215040 (brcm,bcm2835-aux-uart), not an enabled PL011 this hypervisor drives), INTID 153"
    );
    // The PL011 by its alias, or by its path.
    for path in ["serial0:115200n8", "serial0", "/soc/serial@7e201000"] {
        let (source, line) = console(Some(path));
        assert_eq!(source, "StdoutPath", "{path}");
        assert_eq!(line, "  uart        PL011 at 0xfe201000..0xfe201200 (stdout-path), INTID 153");
    }
    assert_eq!(console(Some("serial7")).0, r#"StdoutUnresolved { path: "serial7" }"#);
    assert_eq!(console(Some("/soc/serial@7e999000")).0, r#"StdoutUnresolved { path: "/soc/serial@7e999000" }"#);
    assert_eq!(console(None).0, "FirstPl011");
}

#[test]
fn a_release_address_must_be_an_aligned_word_of_ram() {
    let blob = rpi4_board(DEBIAN_RPI4);
    let p = Platform::from_device_tree(&blob).unwrap();
    assert_eq!(p.check_release_address(0xd8), Ok(()));
    assert_eq!(p.check_release_address(0x4000_0000), Ok(()), "the second bank");
    assert_eq!(p.check_release_address(0xdc), Err(SpinTableError::Misaligned(0xdc)));
    assert_eq!(p.check_release_address(0x3b40_0000), Err(SpinTableError::OutsideRam(0x3b40_0000)));
    assert_eq!(p.check_release_address(0x3b3f_fffc), Err(SpinTableError::Misaligned(0x3b3f_fffc)));
    assert_eq!(p.check_release_address(0xfe00_0000), Err(SpinTableError::OutsideRam(0xfe00_0000)), "a device");
    assert_eq!(p.check_release_address(0x3b3f_fff8), Ok(()), "the last word of the first bank");
}

/// A CPU spins on its release word until it is released: a heap or VM given that word would
/// send the CPU wherever its first non-zero store points. The words are kept from both even
/// when the device tree forgot to reserve them.
#[test]
fn the_spin_tables_are_never_free_memory_even_when_not_reserved() {
    let blob = rpi4_board(Rpi4 { memreserve: false, ..DEBIAN_RPI4 });
    let p = Platform::from_device_tree(&blob).unwrap();
    assert!(p.reserved.iter().all(|r| r.base != 0), "no reservation covers the spin tables: {:?}", p.reserved);
    let kept = p.firmware_memory();
    for n in 0..4 {
        assert!(kept.contains(&PhysRange { base: 0xd8 + 8 * n, size: 8 }), "{kept:?}");
    }
    let plan = crate::memory_map::plan(&p.memory, &kept, 32 << 20, 2 << 20).unwrap();
    let given = plan.free.iter().chain(core::iter::once(&plan.heap));
    for range in given {
        assert!(range.base > 0xf8, "{range} holds a spin table's release word");
    }
    // And with the reservation, the same and the reservation itself.
    let reserved = rpi4_board(DEBIAN_RPI4);
    let p = Platform::from_device_tree(&reserved).unwrap();
    assert_eq!(p.firmware_memory().len(), 2 + 4);
}

#[test]
fn the_banner_names_the_power_manager_of_a_board_without_psci() {
    let banner = Platform::from_device_tree(&rpi4_board(DEBIAN_RPI4)).unwrap().to_string();
    assert!(
        banner.lines().any(|l| l
            == "  power       BCM2835 power manager at 0xfe100000..0xfe100114 (its watchdog can halt the machine)"),
        "{banner}"
    );
    let virt = Platform::from_device_tree(VIRT_GICV2).unwrap().to_string();
    assert!(!virt.contains("power"), "QEMU's virt has PSCI and no power manager: {virt}");
}

#[test]
fn qemu_virt_gicv2_has_virtualization_frames() {
    let p = Platform::from_device_tree(VIRT_GICV2).unwrap();
    assert_eq!(p.memory.as_slice(), &[PhysRange { base: 0x4000_0000, size: 0x8000_0000 }]);
    assert_eq!(p.cpus.as_slice(), &[0, 1]);
    assert_eq!(p.gic.version, GicVersion::V2);
    assert_eq!(p.gic.cpu_interface, Some(PhysRange { base: 0x0801_0000, size: 0x1_0000 }));
    assert_eq!(p.gic.hyp_interface, Some(PhysRange { base: 0x0803_0000, size: 0x1_0000 }));
    assert_eq!(p.gic.virtual_cpu_interface, Some(PhysRange { base: 0x0804_0000, size: 0x1_0000 }));
}

#[test]
fn the_banner_shows_every_device_the_hypervisor_found() {
    let banner = Platform::from_device_tree(VIRT_GICV2).unwrap().to_string();
    let lines: std::vec::Vec<&str> = banner.lines().collect();
    assert_eq!(lines[0], "  memory      0x40000000..0xc0000000 (2048 MiB)");
    assert_eq!(lines[1], "  cpus        2 (MPIDR [0, 1])");
    assert!(lines[2].starts_with("  gic         GICv2: GICD 0x8000000..0x8010000 GICC 0x8010000..0x8020000 GICH "));
    assert_eq!(lines[3], "              maintenance interrupt INTID 25");
    assert_eq!(lines[4], "  uart        PL011 at 0x9000000..0x9001000 (stdout-path), INTID 33");
    assert_eq!(lines[5], "  timer       INTIDs: EL1 physical 30, virtual 27, EL2 physical 26, secure physical 29");
    assert_eq!(lines[6], "  boot bundle none");
}

#[test]
fn garbage_is_not_a_device_tree() {
    assert_eq!(Platform::from_device_tree(&[0u8; 64]).unwrap_err(), PlatformError::NotADeviceTree(FdtError::BadMagic));
    assert_eq!(Platform::from_device_tree(&[]).unwrap_err(), PlatformError::NotADeviceTree(FdtError::TooShort));
}

#[test]
fn a_truncated_device_tree_is_refused_without_panic() {
    for len in [8, 40, 100, VIRT_GICV3.len() / 2] {
        assert!(Platform::from_device_tree(&VIRT_GICV3[..len]).is_err(), "length {len}");
    }
}

#[test]
fn cells_value_reads_one_or_two_cells() {
    assert_eq!(cells_value(&[0, 0, 0x10, 0], "x"), Ok(0x1000));
    assert_eq!(cells_value(&[0, 0, 0, 1, 0x80, 0, 0, 0], "x"), Ok(0x1_8000_0000));
    assert_eq!(cells_value(&[1, 2, 3], "x"), Err(PlatformError::BadProperty("x")));
}

#[test]
fn gic_specifiers_map_to_intids() {
    assert_eq!(gic_intid(0, 1), Some(33));
    assert_eq!(gic_intid(1, 9), Some(25));
    assert_eq!(gic_intid(2, 1), None);
    assert_eq!(gic_intid(0, u32::MAX), None);
}

#[test]
fn a_versatile_express_is_read_through_its_buses_and_its_interrupt_map() {
    let blob = crate::fdt::test_trees::versatile_express_board(|_| {});
    let p = Platform::from_device_tree(&blob).unwrap();
    assert_eq!(p.model, "V2P-CA15");
    assert_eq!(p.memory.as_slice(), &[PhysRange { base: 0x8000_0000, size: 0x4000_0000 }]);
    assert_eq!(p.cpus.as_slice(), &[0, 1]);
    let flags = SysFlags { registers: PhysRange { base: 0x1c01_0000, size: 0x1000 } };
    assert_eq!(p.cpu_start.as_slice(), &[CpuStart::SysFlags(flags); 2], "no enable-method: the board's own");
    assert_eq!((flags.set_register(), flags.clear_register()), (0x1c01_0030, 0x1c01_0034));
    assert_eq!(p.psci, None);
    assert_eq!(p.uart, PhysRange { base: 0x1c09_0000, size: 0x1000 });
    assert_eq!(p.uart_intid, Some(37), "motherboard line 5 is SPI 5 through bus@8000000's interrupt-map");
    assert_eq!(p.gic.maintenance_intid, Some(25));
    assert_eq!(
        p.timer,
        TimerInterrupts { secure_physical: 29, nonsecure_physical: 30, virtual_timer: 27, hyp_physical: 26 }
    );
    assert_eq!(
        p.virtio_mmio.as_slice(),
        &[VirtioMmioTransport { window: PhysRange { base: 0x1c13_0000, size: 0x200 }, intid: Some(72) }]
    );
    let banner = p.to_string();
    assert!(
        banner.contains("  uart        PL011 at 0x1c090000..0x1c091000 (the first PL011: no stdout-path), INTID 37\n"),
        "{banner}"
    );
}

#[test]
fn an_interrupt_another_controller_takes_is_no_gic_intid() {
    let blob = crate::fdt::test_trees::versatile_express_board(|f| {
        let other = f.begin_node("gpio-intc@0").unwrap();
        f.property_u32("#interrupt-cells", 3).unwrap();
        f.property_null("interrupt-controller").unwrap();
        f.property_u32("phandle", 5).unwrap();
        f.end_node(other).unwrap();
        let virtio = f.begin_node("virtio@8000100").unwrap();
        f.property_string("compatible", "virtio,mmio").unwrap();
        f.property_array_u32("reg", &[0x0800_0100, 0x200]).unwrap();
        f.property_u32("interrupt-parent", 5).unwrap();
        f.property_array_u32("interrupts", &[0, 41, 1]).unwrap();
        f.end_node(virtio).unwrap();
    });
    let p = Platform::from_device_tree(&blob).unwrap();
    let other = p.virtio_mmio.iter().find(|t| t.window.base == 0x0800_0100).unwrap();
    assert_eq!(other.intid, None, "its specifier looks like a GIC SPI, but the GIC does not take it");
}

/// `blob` with `from` (which it holds once) replaced by `to`, of the same length.
fn patched(blob: &[u8], from: &[u8], to: &[u8]) -> std::vec::Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at: std::vec::Vec<usize> = (0..blob.len()).filter(|&i| blob[i..].starts_with(from)).collect();
    assert_eq!(at.len(), 1, "{from:?} is in the tree once");
    let mut blob = blob.to_vec();
    blob[at[0]..at[0] + to.len()].copy_from_slice(to);
    blob
}

#[test]
fn only_a_versatile_express_with_its_system_registers_starts_cpus_through_them() {
    let blob = crate::fdt::test_trees::versatile_express_board(|_| {});
    let starts = |blob: &[u8]| Platform::from_device_tree(blob).map(|p| p.cpu_start.to_vec());
    let other_board = patched(&blob, b"arm,vexpress\0", b"arm,vexpresz\0");
    assert_eq!(starts(&other_board), Ok([CpuStart::Unknown; 2].to_vec()), "a board with no method named");
    let no_sysreg = patched(&blob, b"arm,vexpress-sysreg\0", b"arm,vexpress-sysrex\0");
    assert_eq!(starts(&no_sysreg), Ok([CpuStart::Unknown; 2].to_vec()));
    // reg = <0x10000 0x30>: SYS_FLAGSSET and SYS_FLAGSCLR lie beyond it.
    let small = patched(&blob, &[0, 1, 0, 0, 0, 0, 0x10, 0], &[0, 1, 0, 0, 0, 0, 0, 0x30]);
    assert_eq!(starts(&small), Err(PlatformError::BadProperty("arm,vexpress-sysreg reg")));
}
