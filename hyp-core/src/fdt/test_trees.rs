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

/// The parts of a Raspberry Pi 4's device tree (Debian's `bcm2711-rpi-4-b.dtb`) that its
/// SD controllers' passthrough reads: RAM 0..0x3c00_0000; `/soc` (one cell, `ranges` from
/// bus address 0x7e00_0000 to CPU 0xfe00_0000, and `dma-ranges` giving the first GiB at bus
/// address 0xc000_0000); in it the GIC-400 (phandle `GIC_PHANDLE`), the PL011 console
/// (a PrimeCell with `clocks`), the SDHCI at bus 0x7e30_0000 (0x100 bytes, SPI 126, a clock,
/// `bus-width`, `non-removable`, `mmc-pwrseq` and its Wi-Fi child) and a device behind an
/// IOMMU at 0x7e31_0000; `emmc2bus` (two cells, the same translations) with EMMC2 at bus
/// 0x7e34_0000 on SPI 126 too, as on the board; `extra` adds nodes to `/soc`.
pub fn rpi4_sd_board(extra: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
    let mut f = FdtWriter::new().unwrap();
    let root = f.begin_node("").unwrap();
    f.property_string("model", "Raspberry Pi 4 Model B").unwrap();
    f.property_string("compatible", "raspberrypi,4-model-b").unwrap();
    f.property_u32("interrupt-parent", GIC_PHANDLE).unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    let memory = f.begin_node("memory@0").unwrap();
    f.property_string("device_type", "memory").unwrap();
    f.property_array_u32("reg", &[0, 0, 0x3c00_0000]).unwrap();
    f.end_node(memory).unwrap();
    let soc = f.begin_node("soc").unwrap();
    f.property_string("compatible", "simple-bus").unwrap();
    f.property_u32("#address-cells", 1).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_array_u32("ranges", &[0x7e00_0000, 0, 0xfe00_0000, 0x180_0000, 0x4000_0000, 0, 0xff80_0000, 0x80_0000])
        .unwrap();
    f.property_array_u32("dma-ranges", &[0xc000_0000, 0, 0, 0x4000_0000]).unwrap();
    let gic = f.begin_node("interrupt-controller@40041000").unwrap();
    f.property_string("compatible", "arm,gic-400").unwrap();
    f.property_u32("#interrupt-cells", 3).unwrap();
    f.property_null("interrupt-controller").unwrap();
    f.property_array_u32("reg", &[0x4004_1000, 0x1000, 0x4004_2000, 0x2000, 0x4004_4000, 0x2000, 0x4004_6000, 0x2000])
        .unwrap();
    f.property_array_u32("interrupts", &[1, 9, 0xf04]).unwrap();
    f.property_u32("phandle", GIC_PHANDLE).unwrap();
    f.end_node(gic).unwrap();
    let uart = f.begin_node("serial@7e201000").unwrap();
    f.property_string_list("compatible", strings(&["arm,pl011", "arm,primecell"])).unwrap();
    f.property_array_u32("reg", &[0x7e20_1000, 0x200]).unwrap();
    f.property_array_u32("interrupts", &[0, 121, 4]).unwrap();
    f.property_array_u32("clocks", &[7, 19, 7, 20]).unwrap();
    f.end_node(uart).unwrap();
    let sdhci = f.begin_node("mmc@7e300000").unwrap();
    f.property_string("compatible", "brcm,bcm2835-sdhci").unwrap();
    f.property_array_u32("reg", &[0x7e30_0000, 0x100]).unwrap();
    f.property_array_u32("interrupts", &[0, 126, 4]).unwrap();
    f.property_array_u32("clocks", &[7, 28]).unwrap();
    f.property_string("status", "okay").unwrap();
    f.property_u32("#address-cells", 1).unwrap();
    f.property_u32("#size-cells", 0).unwrap();
    f.property_u32("bus-width", 4).unwrap();
    f.property_null("non-removable").unwrap();
    f.property_u32("mmc-pwrseq", 16).unwrap();
    let wifi = f.begin_node("wifi@1").unwrap();
    f.property_u32("reg", 1).unwrap();
    f.property_string("compatible", "brcm,bcm4329-fmac").unwrap();
    f.end_node(wifi).unwrap();
    f.end_node(sdhci).unwrap();
    let behind = f.begin_node("dma-master@7e310000").unwrap();
    f.property_string("compatible", "vendor,bus-master").unwrap();
    f.property_array_u32("reg", &[0x7e31_0000, 0x1000]).unwrap();
    f.property_u32("iommus", 9).unwrap();
    f.end_node(behind).unwrap();
    extra(&mut f);
    f.end_node(soc).unwrap();
    let emmc2bus = f.begin_node("emmc2bus").unwrap();
    f.property_string("compatible", "simple-bus").unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_array_u32("ranges", &[0, 0x7e00_0000, 0, 0xfe00_0000, 0x180_0000]).unwrap();
    f.property_array_u32("dma-ranges", &[0, 0xc000_0000, 0, 0, 0x4000_0000]).unwrap();
    let emmc2 = f.begin_node("mmc@7e340000").unwrap();
    f.property_string("compatible", "brcm,bcm2711-emmc2").unwrap();
    f.property_array_u32("reg", &[0, 0x7e34_0000, 0x100]).unwrap();
    f.property_array_u32("interrupts", &[0, 126, 4]).unwrap();
    f.property_array_u32("clocks", &[7, 51]).unwrap();
    f.property_u32("vqmmc-supply", 32).unwrap();
    f.property_null("broken-cd").unwrap();
    f.end_node(emmc2).unwrap();
    f.end_node(emmc2bus).unwrap();
    f.end_node(root).unwrap();
    f.finish().unwrap()
}
