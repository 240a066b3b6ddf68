use alloc::vec::Vec;

use vm_fdt::FdtWriter;

use super::super::test_trees::{versatile_express_board, BUS_PHANDLE, GIC_PHANDLE, MOTHERBOARD_LINES};
use super::super::Fdt;
use super::*;

const VIRT_GICV2: &[u8] = include_bytes!("../../../tests/data/qemu-virt-gicv2-smp2.dtb");

/// Each interrupt of the node at `path`: its controller's name and specifier, or the error.
fn interrupts_of<'a>(fdt: &Fdt<'a>, path: &str) -> Vec<Result<(&'a str, Vec<u32>), InterruptError<'a>>> {
    let node = fdt.find_node(path).unwrap_or_else(|| panic!("{path} is in the tree"));
    node.interrupts().map(|i| i.map(|i| (i.controller.name, i.specifier().to_vec()))).collect()
}

const GIC: &str = "interrupt-controller@2c001000";
const FPGA: &str = "/bus@8000000/motherboard-bus@8000000/iofpga-bus@300000000";

#[test]
fn a_motherboard_line_reaches_the_gic_through_the_bus_interrupt_map() {
    let blob = versatile_express_board(|_| {});
    let fdt = Fdt::new(&blob).unwrap();
    let uart = fdt.find_node(&alloc::format!("{FPGA}/serial@90000")).unwrap();
    assert_eq!(uart.interrupt_parent().unwrap().name, "bus@8000000", "the buses without #interrupt-cells pass it on");
    assert_eq!(
        interrupts_of(&fdt, &alloc::format!("{FPGA}/serial@90000")),
        [Ok((GIC, [0, 5, 4].to_vec()))],
        "line 5 is SPI 5, level high"
    );
    assert_eq!(
        interrupts_of(&fdt, &alloc::format!("{FPGA}/mmc@50000")),
        [Ok((GIC, [0, 9, 4].to_vec())), Ok((GIC, [0, 10, 4].to_vec()))],
        "each of its interrupts is translated"
    );
    assert_eq!(interrupts_of(&fdt, "/virtio_mmio@1c130000"), [Ok((GIC, [0, 40, 1].to_vec()))], "named parent");
    assert_eq!(interrupts_of(&fdt, &alloc::format!("/{GIC}")), [Ok((GIC, [1, 9, 0xf04].to_vec()))], "its own");
    assert!(interrupts_of(&fdt, "/cpus").is_empty(), "no interrupts");
}

/// A device on `bus@8000000` with `interrupts = <line>` (and `reg`, for the map's address).
fn device_on_the_bus(name: &'static str, line: u32) -> impl FnOnce(&mut FdtWriter) {
    move |f: &mut FdtWriter| {
        let node = f.begin_node(name).unwrap();
        f.property_array_u32("reg", &[0x1234_5678, 0x1000]).unwrap();
        f.property_u32("interrupts", line).unwrap();
        f.end_node(node).unwrap();
    }
}

#[test]
fn the_map_mask_is_applied_to_the_unit_address_and_the_specifier() {
    // 0x45 & 0x3f is line 5; the device's address is masked away entirely (mask cell 0).
    let blob = versatile_express_board(device_on_the_bus("dev@12345678", 0x45));
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(interrupts_of(&fdt, "/bus@8000000/dev@12345678"), [Ok((GIC, [0, 5, 4].to_vec()))]);
    // 0x2b (43) masked is itself, and the map stops at line 42.
    let blob = versatile_express_board(device_on_the_bus("dev@12345678", MOTHERBOARD_LINES));
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(
        interrupts_of(&fdt, "/bus@8000000/dev@12345678"),
        [Err(InterruptError::NotMapped { nexus: "bus@8000000" })]
    );
}

/// Two nexus nodes, each matching on the unit address too (as PCI's do): `outer` under the
/// root maps device slot `slot` INTA of `inner` (its child) onto its own line `slot`, and
/// the board's `bus@8000000` then maps that line to the GIC. Returns the tree.
fn two_nexus_levels(device_address: u32) -> Vec<u8> {
    versatile_express_board(|f| {
        let outer = f.begin_node("outer@0").unwrap();
        f.property_u32("#address-cells", 1).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        f.property_u32("#interrupt-cells", 1).unwrap();
        // (slot address, INTA) -> bus@8000000's (address 0, line 20 + slot).
        f.property_array_u32("interrupt-map-mask", &[0xf800, 7]).unwrap();
        f.property_array_u32("interrupt-map", &[0x0800, 1, BUS_PHANDLE, 0, 21, 0x1000, 1, BUS_PHANDLE, 0, 22]).unwrap();
        let inner = f.begin_node("inner@0").unwrap();
        f.property_u32("#address-cells", 1).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        let dev = f.begin_node("dev").unwrap();
        f.property_array_u32("reg", &[device_address, 0x100]).unwrap();
        f.property_u32("interrupts", 1).unwrap();
        f.end_node(dev).unwrap();
        f.end_node(inner).unwrap();
        f.end_node(outer).unwrap();
    })
}

#[test]
fn a_nexus_above_a_nexus_is_followed_with_the_unit_address_each_map_gives() {
    let blob = two_nexus_levels(0x1000);
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(interrupts_of(&fdt, "/bus@8000000/outer@0/inner@0/dev"), [Ok((GIC, [0, 22, 4].to_vec()))]);
    let blob = two_nexus_levels(0x0800);
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(interrupts_of(&fdt, "/bus@8000000/outer@0/inner@0/dev"), [Ok((GIC, [0, 21, 4].to_vec()))]);
    let blob = two_nexus_levels(0x1800);
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(
        interrupts_of(&fdt, "/bus@8000000/outer@0/inner@0/dev"),
        [Err(InterruptError::NotMapped { nexus: "outer@0" })],
        "no entry for slot 3"
    );
}

#[test]
fn interrupts_extended_names_each_parent_and_wins_over_interrupts() {
    let blob = versatile_express_board(|f| {
        let dev = f.begin_node("dev@0").unwrap();
        f.property_u32("interrupts", 5).unwrap();
        f.property_array_u32("interrupts-extended", &[GIC_PHANDLE, 0, 7, 4, BUS_PHANDLE, 6]).unwrap();
        f.end_node(dev).unwrap();
    });
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(
        interrupts_of(&fdt, "/bus@8000000/dev@0"),
        [Ok((GIC, [0, 7, 4].to_vec())), Ok((GIC, [0, 6, 4].to_vec()))],
        "one straight to the GIC, one through bus@8000000's map"
    );
}

/// A tree with one device, `dev`, whose interrupts and parents `build` writes at the root.
fn one_device(build: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
    let mut f = FdtWriter::new().unwrap();
    let root = f.begin_node("").unwrap();
    build(&mut f);
    f.end_node(root).unwrap();
    f.finish().unwrap()
}

fn node(f: &mut FdtWriter, name: &str, properties: &[(&str, &[u32])]) {
    let n = f.begin_node(name).unwrap();
    for (property, cells) in properties {
        if cells.is_empty() {
            f.property_null(property).unwrap();
        } else {
            f.property_array_u32(property, cells).unwrap();
        }
    }
    f.end_node(n).unwrap();
}

/// The one item `/dev`'s interrupts give: an error, which ends the walk.
fn first(blob: &[u8]) -> InterruptError<'_> {
    let fdt = Fdt::new(blob).unwrap();
    let dev = fdt.find_node("/dev").unwrap();
    let all: Vec<_> = dev.interrupts().collect();
    assert_eq!(all.len(), 1, "one error ends the walk");
    all[0].map(|i| i.controller.name).unwrap_err()
}

#[test]
fn each_broken_interrupt_tree_gets_its_error() {
    let no_parent = one_device(|f| node(f, "dev", &[("interrupts", &[1])]));
    assert_eq!(first(&no_parent), InterruptError::NoInterruptParent { node: "dev" });
    let unknown = one_device(|f| node(f, "dev", &[("interrupt-parent", &[9]), ("interrupts", &[1])]));
    assert_eq!(first(&unknown), InterruptError::UnknownPhandle { node: "dev", phandle: 9 });
    let loop_of_parents = one_device(|f| {
        node(f, "a", &[("phandle", &[1]), ("interrupt-parent", &[2])]);
        node(f, "b", &[("phandle", &[2]), ("interrupt-parent", &[1])]);
        node(f, "dev", &[("interrupt-parent", &[1]), ("interrupts", &[1])]);
    });
    assert_eq!(first(&loop_of_parents), InterruptError::TooManyHops { node: "dev" });
    let map_to_itself = one_device(|f| {
        let n = f.begin_node("m").unwrap();
        f.property_u32("phandle", 2).unwrap();
        f.property_u32("#interrupt-cells", 1).unwrap();
        f.property_u32("#address-cells", 0).unwrap();
        f.property_array_u32("interrupt-map", &[1, 2, 1]).unwrap();
        f.end_node(n).unwrap();
        node(f, "dev", &[("interrupt-parent", &[2]), ("interrupts", &[1])]);
    });
    assert_eq!(first(&map_to_itself), InterruptError::TooManyHops { node: "dev" });
    let not_a_controller = one_device(|f| {
        node(f, "n", &[("phandle", &[1]), ("#interrupt-cells", &[1])]);
        node(f, "dev", &[("interrupt-parent", &[1]), ("interrupts", &[1])]);
    });
    assert_eq!(first(&not_a_controller), InterruptError::NotAController { node: "n" });
    let controller = |f: &mut FdtWriter, cells: u32| {
        node(f, "intc", &[("phandle", &[1]), ("#interrupt-cells", &[cells]), ("interrupt-controller", &[])]);
    };
    let partial = one_device(|f| {
        controller(f, 3);
        node(f, "dev", &[("interrupt-parent", &[1]), ("interrupts", &[0, 1])]);
    });
    assert_eq!(first(&partial), InterruptError::Malformed { node: "dev", property: "interrupts" });
    let too_wide = one_device(|f| {
        controller(f, 5);
        node(f, "dev", &[("interrupt-parent", &[1]), ("interrupts", &[0, 1, 2, 3, 4])]);
    });
    assert_eq!(first(&too_wide), InterruptError::UnsupportedCells { node: "intc" });
    let bad_mask = one_device(|f| {
        controller(f, 1);
        let n = f.begin_node("nexus").unwrap();
        f.property_u32("phandle", 2).unwrap();
        f.property_u32("#interrupt-cells", 1).unwrap();
        f.property_u32("#address-cells", 0).unwrap();
        f.property_array_u32("interrupt-map-mask", &[0, 1]).unwrap();
        f.property_array_u32("interrupt-map", &[1, 1, 1]).unwrap();
        f.end_node(n).unwrap();
        node(f, "dev", &[("interrupt-parent", &[2]), ("interrupts", &[1])]);
    });
    assert_eq!(first(&bad_mask), InterruptError::Malformed { node: "nexus", property: "interrupt-map-mask" });
    let short_map = one_device(|f| {
        controller(f, 2);
        let n = f.begin_node("nexus").unwrap();
        f.property_u32("phandle", 2).unwrap();
        f.property_u32("#interrupt-cells", 1).unwrap();
        f.property_u32("#address-cells", 0).unwrap();
        f.property_array_u32("interrupt-map", &[1, 1, 1]).unwrap();
        f.end_node(n).unwrap();
        node(f, "dev", &[("interrupt-parent", &[2]), ("interrupts", &[1])]);
    });
    assert_eq!(first(&short_map), InterruptError::Malformed { node: "nexus", property: "interrupt-map" });
    for e in [InterruptError::NoInterruptParent { node: "dev" }, InterruptError::NotMapped { nexus: "bus" }] {
        assert!(!alloc::string::ToString::to_string(&e).is_empty());
    }
}

#[test]
fn a_controller_found_through_a_pass_through_node_takes_the_rest_of_the_interrupts() {
    let blob = one_device(|f| {
        node(f, "intc", &[("phandle", &[1]), ("#interrupt-cells", &[2]), ("interrupt-controller", &[])]);
        node(f, "glue", &[("phandle", &[2]), ("interrupt-parent", &[1])]);
        node(f, "dev", &[("interrupt-parent", &[2]), ("interrupts", &[3, 4, 5, 6])]);
    });
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(
        interrupts_of(&fdt, "/dev"),
        [Ok(("intc", [3, 4].to_vec())), Ok(("intc", [5, 6].to_vec()))],
        "glue has no #interrupt-cells: its own interrupt parent is asked"
    );
}

#[test]
fn parents_and_phandles_are_found() {
    let fdt = Fdt::new(VIRT_GICV2).unwrap();
    assert!(fdt.root().parent().is_none());
    let cpu = fdt.find_node("/cpus/cpu@1").unwrap();
    assert_eq!(cpu.parent().unwrap().name, "cpus");
    assert_eq!(cpu.parent().unwrap().parent().unwrap(), fdt.root());
    let gic = fdt.find_compatible(&["arm,cortex-a15-gic"]).unwrap();
    let phandle = gic.property("phandle").and_then(|p| p.as_u32()).unwrap();
    assert_eq!(fdt.node_by_phandle(phandle), Some(gic));
    assert_eq!(fdt.node_by_phandle(0xdead_beef), None);
    // QEMU's virt: every device's interrupts go straight to the GIC (the root names it).
    let uart = fdt.stdout().unwrap();
    assert_eq!(uart.interrupt_parent().unwrap(), gic);
    assert_eq!(interrupts_of(&fdt, "/pl011@9000000"), [Ok((gic.name, [0, 1, 4].to_vec()))]);
}
