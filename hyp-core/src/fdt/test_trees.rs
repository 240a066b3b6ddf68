//! Device trees the tests of more than one module read (tests only): a Versatile Express
//! with a CoreTile A15, shaped as its device tree is (its motherboard's devices behind three
//! buses, their interrupts given to the first bus's `interrupt-map`), with what the
//! hypervisor reads of a board and little else.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use vm_fdt::FdtWriter;

/// A string list property's value.
pub fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|&s| s.into()).collect()
}

/// The GIC's phandle in `versatile_express_board`.
pub const GIC_PHANDLE: u32 = 1;
/// `bus@8000000`'s phandle (the real tree gives it none; tests name it as a parent).
pub const BUS_PHANDLE: u32 = 8;
/// Motherboard interrupt lines the first bus's `interrupt-map` gives the GIC: line n is SPI n.
pub const MOTHERBOARD_LINES: u32 = 43;

/// A Versatile Express with two Cortex-A15s, as QEMU's `vexpress-a15` is given it: RAM at
/// 0x8000_0000; the GIC at 0x2c00_1000 (its phandle `GIC_PHANDLE`, the root's interrupt
/// parent); the CPUs with no `enable-method`; on the motherboard, behind `bus@8000000`
/// (whose `interrupt-map` takes one cell, the line, masked to 6 bits, to GIC SPI n), the
/// motherboard bus (chip select, offset) and the I/O FPGA on chip select 3: the system
/// registers at offset 0x10000 (`arm,vexpress-sysreg`) and the console's PL011 at 0x90000
/// on line 5; a virtio-mmio transport at the root that names its interrupt parent, as QEMU
/// adds it.
/// `extra` adds nodes inside `bus@8000000`.
pub fn versatile_express_board(extra: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
    let mut f = FdtWriter::new().unwrap();
    let root = f.begin_node("").unwrap();
    f.property_string("model", "V2P-CA15").unwrap();
    f.property_string_list(
        "compatible",
        strings(&["arm,vexpress,v2p-ca15,tc1", "arm,vexpress,v2p-ca15", "arm,vexpress"]),
    )
    .unwrap();
    f.property_u32("interrupt-parent", GIC_PHANDLE).unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 2).unwrap();

    let bus = f.begin_node("bus@8000000").unwrap();
    f.property_string("compatible", "simple-bus").unwrap();
    f.property_u32("#address-cells", 1).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_u32("#interrupt-cells", 1).unwrap();
    f.property_array_u32("interrupt-map-mask", &[0, 0x3f]).unwrap();
    let map: Vec<u32> = (0..MOTHERBOARD_LINES).flat_map(|n| [0, n, GIC_PHANDLE, 0, n, 4]).collect();
    f.property_array_u32("interrupt-map", &map).unwrap();
    f.property_array_u32("ranges", &[0x0800_0000, 0, 0x0800_0000, 0x1800_0000]).unwrap();
    f.property_u32("phandle", BUS_PHANDLE).unwrap();
    let board = f.begin_node("motherboard-bus@8000000").unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_array_u32("ranges", &[3, 0, 0x1c00_0000, 0x0400_0000]).unwrap();
    let fpga = f.begin_node("iofpga-bus@300000000").unwrap();
    f.property_u32("#address-cells", 1).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_array_u32("ranges", &[0, 3, 0, 0x20_0000]).unwrap();
    let sysreg = f.begin_node("sysreg@10000").unwrap();
    f.property_string("compatible", "arm,vexpress-sysreg").unwrap();
    f.property_array_u32("reg", &[0x1_0000, 0x1000]).unwrap();
    f.end_node(sysreg).unwrap();
    let uart = f.begin_node("serial@90000").unwrap();
    f.property_string_list("compatible", strings(&["arm,pl011", "arm,primecell"])).unwrap();
    f.property_array_u32("reg", &[0x9_0000, 0x1000]).unwrap();
    f.property_u32("interrupts", 5).unwrap();
    f.end_node(uart).unwrap();
    let mmc = f.begin_node("mmc@50000").unwrap();
    f.property_array_u32("reg", &[0x5_0000, 0x1000]).unwrap();
    f.property_array_u32("interrupts", &[9, 10]).unwrap();
    f.end_node(mmc).unwrap();
    f.end_node(fpga).unwrap();
    f.end_node(board).unwrap();
    extra(&mut f);
    f.end_node(bus).unwrap();

    let cpus = f.begin_node("cpus").unwrap();
    f.property_u32("#address-cells", 1).unwrap();
    f.property_u32("#size-cells", 0).unwrap();
    for n in 0..2u32 {
        let cpu = f.begin_node(&format!("cpu@{n}")).unwrap();
        f.property_string("device_type", "cpu").unwrap();
        f.property_string("compatible", "arm,cortex-a15").unwrap();
        f.property_u32("reg", n).unwrap();
        f.end_node(cpu).unwrap();
    }
    f.end_node(cpus).unwrap();
    let memory = f.begin_node("memory@80000000").unwrap();
    f.property_string("device_type", "memory").unwrap();
    f.property_array_u32("reg", &[0, 0x8000_0000, 0, 0x4000_0000]).unwrap();
    f.end_node(memory).unwrap();
    let gic = f.begin_node("interrupt-controller@2c001000").unwrap();
    f.property_string_list("compatible", strings(&["arm,cortex-a15-gic", "arm,cortex-a9-gic"])).unwrap();
    f.property_u32("#interrupt-cells", 3).unwrap();
    f.property_u32("#address-cells", 0).unwrap();
    f.property_null("interrupt-controller").unwrap();
    let frames = [0x2c00_1000u32, 0x1000, 0x2c00_2000, 0x2000, 0x2c00_4000, 0x2000, 0x2c00_6000, 0x2000];
    let reg: Vec<u32> = frames.chunks(2).flat_map(|r| [0, r[0], 0, r[1]]).collect();
    f.property_array_u32("reg", &reg).unwrap();
    f.property_array_u32("interrupts", &[1, 9, 0xf04]).unwrap();
    f.property_u32("phandle", GIC_PHANDLE).unwrap();
    f.end_node(gic).unwrap();
    let timer = f.begin_node("timer").unwrap();
    f.property_string("compatible", "arm,armv7-timer").unwrap();
    f.property_array_u32("interrupts", &[1, 13, 0xf08, 1, 14, 0xf08, 1, 11, 0xf08, 1, 10, 0xf08]).unwrap();
    f.end_node(timer).unwrap();
    let virtio = f.begin_node("virtio_mmio@1c130000").unwrap();
    f.property_string("compatible", "virtio,mmio").unwrap();
    f.property_array_u32("reg", &[0, 0x1c13_0000, 0, 0x200]).unwrap();
    f.property_u32("interrupt-parent", GIC_PHANDLE).unwrap();
    f.property_array_u32("interrupts", &[0, 40, 1]).unwrap();
    f.end_node(virtio).unwrap();
    f.end_node(root).unwrap();
    f.finish().unwrap()
}
