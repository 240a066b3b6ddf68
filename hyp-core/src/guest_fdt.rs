//! The device tree a Linux guest boots with: what it sees of its virtual platform
//! (docs/architecture.md, "The guest's view"), generated from its manifest entry, never from the host
//! board. Bindings: Documentation/devicetree/bindings (arm,gic-v3, arm,gic, arm,arch_timer,
//! arm,psci, arm,pl011, virtio,mmio) and the devicetree specification, section 3.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use vm_fdt::FdtWriter;

use crate::entropy::GuestSeeds;
use crate::fdt::{DmaRange, Fdt, Node};

/// The properties of a passthrough device's board node that its guest node copies: those
/// that describe the controller itself and name no other node (docs/manifest.md, "What the
/// hypervisor does with a passthrough device"). Left out are what the board wired to it or
/// what names a node the VM does not have: power sequences (`mmc-pwrseq`), regulators
/// (`vmmc-supply`, `vqmmc-supply`), pin control, `clocks` (replaced by a fixed clock of
/// `clock_hz`), and `non-removable`, which on the board describes the soldered chip that is
/// the node's child (a Raspberry Pi 4's SDHCI and its Wi-Fi), not the card the VM is given.
/// Today the list is the MMC host binding's (Documentation/devicetree/bindings/mmc/
/// mmc-controller.yaml) bus and card-detect properties.
pub const COPIED_PROPERTIES: [&str; 11] = [
    "bus-width",
    "broken-cd",
    "cd-inverted",
    "wp-inverted",
    "disable-wp",
    "max-frequency",
    "cap-sd-highspeed",
    "cap-mmc-highspeed",
    "no-1-8-v",
    "no-sdio",
    "no-mmc",
];

/// Where a guest's interrupt controller sits and which version it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestGic {
    /// Distributor at `distributor`, one 128 KiB redistributor per vCPU from `redistributors`.
    V3 { distributor: u64, redistributors: u64 },
    /// Distributor, and the CPU interface (the hardware GICV frame mapped there).
    V2 { distributor: u64, cpu_interface: u64 },
}

pub const GICD_SIZE: u64 = 0x1_0000;
pub const GICR_SIZE_PER_CPU: u64 = 0x2_0000;
pub const GICC_SIZE: u64 = 0x2000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestPlatform {
    pub vcpus: u32,
    pub ram_base: u64,
    pub ram_size: u64,
    pub gic: GuestGic,
    pub uart_base: u64,
    /// SPI number (INTID - 32) of the PL011.
    pub uart_spi: u32,
    /// virtio-mmio transports: (base, SPI number).
    pub virtio_mmio: Vec<(u64, u32)>,
    /// The PCI host bridge of its virtio-pci functions, if it has them.
    pub pci: Option<GuestPci>,
    pub bootargs: String,
    /// The initrd's IPA range `[start, end)`.
    pub initrd: Option<(u64, u64)>,
    /// Board devices passed through to the VM, at the same address as on the board.
    pub passthrough: Vec<GuestPassthrough>,
    /// `/chosen/rng-seed` and `/chosen/kaslr-seed` (none if the board gave no seed).
    pub seeds: Option<GuestSeeds>,
}

/// A board device passed through to the VM (`[[vm.passthrough]]`), as its device tree node
/// says it: the board's `compatible` (copied verbatim, a string list), its register window
/// (the guest sees it where the board has it) and its SPIs with the board's trigger flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestPassthrough {
    pub base: u64,
    pub size: u64,
    /// The raw `compatible` property of the board's node (NUL-separated strings).
    pub compatible: Vec<u8>,
    /// (SPI number = INTID - 32, interrupt specifier flags of the board's node).
    pub spis: Vec<(u32, u32)>,
    /// The board node's properties of `COPIED_PROPERTIES`, as they are.
    pub properties: Vec<(String, Vec<u8>)>,
    /// The rate of a fixed clock the node names as its `clocks` (not for a PrimeCell, which
    /// gets the guest's bus clock).
    pub clock_hz: Option<u32>,
    /// For a DMA device of an identity-mapped VM whose buses translate its addresses: the
    /// windows (bus address, CPU address = IPA, size) of a `simple-bus` put around it, so
    /// the guest hands the device the bus addresses the board expects. Empty: none.
    pub dma_ranges: Vec<DmaRange>,
}

impl GuestPassthrough {
    /// The strings of `compatible`.
    fn compatibles(&self) -> impl Iterator<Item = &str> {
        self.compatible.split(|b| *b == 0).filter(|s| !s.is_empty()).filter_map(|s| core::str::from_utf8(s).ok())
    }

    fn is_primecell(&self) -> bool {
        self.compatibles().any(|c| c == "arm,primecell")
    }

    /// A node name: the model part of the first compatible string ("arm,pl031" -> "pl031"),
    /// in the characters node names allow (devicetree specification 2.2.1).
    fn node_name(&self) -> String {
        let model = self.compatibles().next().map_or("device", |c| c.rsplit(',').next().unwrap_or(c));
        let name: String = model
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || ",._+-".contains(c) { c } else { '_' })
            .take(31)
            .collect();
        let name = if name.is_empty() { "device".into() } else { name };
        format!("{name}@{:x}", self.base)
    }
}

/// A generic ECAM PCI host bridge (Documentation/devicetree/bindings/pci/host-generic-pci.yaml)
/// whose functions send their MSIs to the GIC: a GICv3's ITS (an `arm,gic-v3-its` child of
/// the GIC's node, each function's requester ID its DeviceID through `msi-map`), else a
/// GICv3's doorbell for message-based SPIs (arm,gic-v3 `msi-controller` and
/// `mbi-ranges`), a GICv2's GICv2m frame (an `arm,gic-v2m-frame` child of the GIC's node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestPci {
    /// Bus 0's configuration space.
    pub ecam: u64,
    pub ecam_size: u64,
    /// The 32-bit memory window for the functions' BARs (CPU address = PCI address).
    pub mmio: u64,
    pub mmio_size: u64,
    /// The SPIs messages may name: the first INTID and how many.
    pub mbi_first_intid: u32,
    pub mbi_count: u32,
    /// With a GICv2: the GICv2m frame's address (its MSI_TYPER names the SPIs).
    pub v2m: Option<u64>,
    /// With a GICv3: its ITS's address, if it has one.
    pub its: Option<u64>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct GuestFdtError(pub String);

impl fmt::Display for GuestFdtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "generating the guest device tree: {}", self.0)
    }
}

fn err(e: vm_fdt::Error) -> GuestFdtError {
    GuestFdtError(e.to_string())
}

const GIC_PHANDLE: u32 = 1;
const CLOCK_PHANDLE: u32 = 2;
/// The last-level cache the vCPUs share.
const LLC_PHANDLE: u32 = 3;
/// A GICv2's GICv2m frame, the PCI host bridge's `msi-parent` (a GICv3's is the GIC).
const V2M_PHANDLE: u32 = 4;
/// A GICv3's ITS, the PCI host bridge's `msi-map` target.
const ITS_PHANDLE: u32 = 5;
/// The fixed clock of passthrough device n (`clock_hz`) is phandle `DEVICE_CLOCK_PHANDLE + n`.
const DEVICE_CLOCK_PHANDLE: u32 = 16;
/// Interrupt specifier types and flags (dt-bindings/interrupt-controller/arm-gic.h).
const GIC_SPI: u32 = 0;
const GIC_PPI: u32 = 1;
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;

fn reg(base: u64, size: u64) -> [u64; 2] {
    [base, size]
}

pub fn build(p: &GuestPlatform) -> Result<Vec<u8>, GuestFdtError> {
    if p.vcpus == 0 {
        return Err(GuestFdtError("a VM needs at least one vCPU".into()));
    }
    if p.pci.is_some_and(|pci| pci.v2m.is_none()) && matches!(p.gic, GuestGic::V2 { .. }) {
        return Err(GuestFdtError("virtio over PCI on a GICv2 needs its GICv2m frame for the MSIs".into()));
    }
    let mut f = FdtWriter::new().map_err(err)?;
    let root = f.begin_node("").map_err(err)?;
    f.property_string("compatible", "linux,dummy-virt").map_err(err)?;
    f.property_string("model", "hypervisor virtual machine").map_err(err)?;
    f.property_u32("#address-cells", 2).map_err(err)?;
    f.property_u32("#size-cells", 2).map_err(err)?;
    f.property_u32("interrupt-parent", GIC_PHANDLE).map_err(err)?;

    let uart_path = format!("/pl011@{:x}", p.uart_base);
    let chosen = f.begin_node("chosen").map_err(err)?;
    f.property_string("bootargs", &p.bootargs).map_err(err)?;
    f.property_string("stdout-path", &uart_path).map_err(err)?;
    if let Some((start, end)) = p.initrd {
        f.property_u64("linux,initrd-start", start).map_err(err)?;
        f.property_u64("linux,initrd-end", end).map_err(err)?;
    }
    write_seeds(&mut f, p.seeds)?;
    f.end_node(chosen).map_err(err)?;

    let memory = f.begin_node(&format!("memory@{:x}", p.ram_base)).map_err(err)?;
    f.property_string("device_type", "memory").map_err(err)?;
    f.property_array_u64("reg", &reg(p.ram_base, p.ram_size)).map_err(err)?;
    f.end_node(memory).map_err(err)?;

    let cpus = f.begin_node("cpus").map_err(err)?;
    f.property_u32("#address-cells", 1).map_err(err)?;
    f.property_u32("#size-cells", 0).map_err(err)?;
    for i in 0..p.vcpus {
        let cpu = f.begin_node(&format!("cpu@{i:x}")).map_err(err)?;
        f.property_string("device_type", "cpu").map_err(err)?;
        f.property_string("compatible", "arm,armv8").map_err(err)?;
        f.property_u32("reg", i).map_err(err)?;
        f.property_string("enable-method", "psci").map_err(err)?;
        f.property_u32("next-level-cache", LLC_PHANDLE).map_err(err)?;
        f.end_node(cpu).map_err(err)?;
    }
    // One unified level-2 cache behind every vCPU (Documentation/devicetree/bindings/cache/
    // cache.yaml; the devicetree specification 3.8): every board the hypervisor runs on has
    // its cores share one (the Raspberry Pi 4's four Cortex-A72 their 1 MiB L2, a Cortex-A15
    // cluster its L2, QEMU's `virt` CPUs the L2 their CLIDR_EL1 reports), wherever a vCPU
    // runs. Without it Linux takes each vCPU for a cache domain of its own and completes a
    // block request with an IPI to the CPU that issued it, one more exit on each side.
    let llc = f.begin_node("l2-cache").map_err(err)?;
    f.property_string("compatible", "cache").map_err(err)?;
    f.property_null("cache-unified").map_err(err)?;
    f.property_u32("cache-level", 2).map_err(err)?;
    f.property_phandle(LLC_PHANDLE).map_err(err)?;
    f.end_node(llc).map_err(err)?;
    f.end_node(cpus).map_err(err)?;

    let psci = f.begin_node("psci").map_err(err)?;
    f.property_string_list("compatible", ["arm,psci-1.0".into(), "arm,psci-0.2".into()].to_vec()).map_err(err)?;
    f.property_string("method", "hvc").map_err(err)?;
    f.end_node(psci).map_err(err)?;

    // PPI specifiers on GICv2 carry a mask of the CPUs they reach in bits [15:8].
    let ppi_flags = match p.gic {
        GuestGic::V3 { .. } => IRQ_TYPE_LEVEL_HIGH,
        GuestGic::V2 { .. } => IRQ_TYPE_LEVEL_HIGH | (((1u32 << p.vcpus.min(8)) - 1) << 8),
    };
    let (gic_name, gic_compatible, gic_reg) = match p.gic {
        GuestGic::V3 { distributor, redistributors } => (
            format!("intc@{distributor:x}"),
            "arm,gic-v3",
            [distributor, GICD_SIZE, redistributors, GICR_SIZE_PER_CPU * u64::from(p.vcpus)].to_vec(),
        ),
        GuestGic::V2 { distributor, cpu_interface } => (
            format!("intc@{distributor:x}"),
            "arm,cortex-a15-gic",
            [distributor, GICD_SIZE, cpu_interface, GICC_SIZE].to_vec(),
        ),
    };
    let gic = f.begin_node(&gic_name).map_err(err)?;
    f.property_string("compatible", gic_compatible).map_err(err)?;
    f.property_null("interrupt-controller").map_err(err)?;
    f.property_u32("#interrupt-cells", 3).map_err(err)?;
    f.property_array_u64("reg", &gic_reg).map_err(err)?;
    if let GuestGic::V3 { .. } = p.gic {
        f.property_u32("#redistributor-regions", 1).map_err(err)?;
    }
    f.property_phandle(GIC_PHANDLE).map_err(err)?;
    match (&p.pci, p.gic) {
        (None, _) => {}
        (Some(GuestPci { its: Some(base), .. }), GuestGic::V3 { .. }) => {
            // The ITS is a child of the GIC's node, its address one to one (`ranges`).
            f.property_u32("#address-cells", 2).map_err(err)?;
            f.property_u32("#size-cells", 2).map_err(err)?;
            f.property_null("ranges").map_err(err)?;
            let its = f.begin_node(&format!("msi-controller@{base:x}")).map_err(err)?;
            f.property_string("compatible", "arm,gic-v3-its").map_err(err)?;
            f.property_null("msi-controller").map_err(err)?;
            f.property_u32("#msi-cells", 1).map_err(err)?;
            f.property_array_u64("reg", &reg(*base, 0x2_0000)).map_err(err)?;
            f.property_phandle(ITS_PHANDLE).map_err(err)?;
            f.end_node(its).map_err(err)?;
        }
        (Some(pci), GuestGic::V3 { .. }) => {
            f.property_null("msi-controller").map_err(err)?;
            f.property_array_u32("mbi-ranges", &[pci.mbi_first_intid, pci.mbi_count]).map_err(err)?;
        }
        (Some(pci), GuestGic::V2 { .. }) => {
            // The frame is a child of the GIC's node, its address one to one (`ranges`).
            f.property_u32("#address-cells", 2).map_err(err)?;
            f.property_u32("#size-cells", 2).map_err(err)?;
            f.property_null("ranges").map_err(err)?;
            let base = pci.v2m.unwrap_or_default();
            let frame = f.begin_node(&format!("v2m@{base:x}")).map_err(err)?;
            f.property_string("compatible", "arm,gic-v2m-frame").map_err(err)?;
            f.property_null("msi-controller").map_err(err)?;
            f.property_array_u64("reg", &reg(base, 0x1000)).map_err(err)?;
            f.property_phandle(V2M_PHANDLE).map_err(err)?;
            f.end_node(frame).map_err(err)?;
        }
    }
    f.end_node(gic).map_err(err)?;

    // Secure physical, non-secure physical, virtual, hypervisor physical (PPIs 13, 14, 11, 10).
    let timer = f.begin_node("timer").map_err(err)?;
    f.property_string_list("compatible", ["arm,armv8-timer".into(), "arm,armv7-timer".into()].to_vec()).map_err(err)?;
    let mut cells = Vec::new();
    for ppi in [13, 14, 11, 10] {
        cells.extend_from_slice(&[GIC_PPI, ppi, ppi_flags]);
    }
    f.property_array_u32("interrupts", &cells).map_err(err)?;
    f.property_null("always-on").map_err(err)?;
    f.end_node(timer).map_err(err)?;

    let clock = f.begin_node("apb-pclk").map_err(err)?;
    f.property_string("compatible", "fixed-clock").map_err(err)?;
    f.property_u32("#clock-cells", 0).map_err(err)?;
    f.property_u32("clock-frequency", 24_000_000).map_err(err)?;
    f.property_string("clock-output-names", "clk24mhz").map_err(err)?;
    f.property_phandle(CLOCK_PHANDLE).map_err(err)?;
    f.end_node(clock).map_err(err)?;

    let uart = f.begin_node(&uart_path[1..]).map_err(err)?;
    f.property_string_list("compatible", ["arm,pl011".into(), "arm,primecell".into()].to_vec()).map_err(err)?;
    f.property_array_u64("reg", &reg(p.uart_base, 0x1000)).map_err(err)?;
    f.property_array_u32("interrupts", &[GIC_SPI, p.uart_spi, IRQ_TYPE_LEVEL_HIGH]).map_err(err)?;
    f.property_array_u32("clocks", &[CLOCK_PHANDLE, CLOCK_PHANDLE]).map_err(err)?;
    f.property_string_list("clock-names", ["uartclk".into(), "apb_pclk".into()].to_vec()).map_err(err)?;
    f.end_node(uart).map_err(err)?;

    for (base, spi) in &p.virtio_mmio {
        let node = f.begin_node(&format!("virtio_mmio@{base:x}")).map_err(err)?;
        f.property_string("compatible", "virtio,mmio").map_err(err)?;
        f.property_array_u64("reg", &reg(*base, 0x200)).map_err(err)?;
        // Level: the line is high while InterruptStatus is non-zero (virtio 1.2, 4.2.3.4).
        f.property_array_u32("interrupts", &[GIC_SPI, *spi, IRQ_TYPE_LEVEL_HIGH]).map_err(err)?;
        f.property_null("dma-coherent").map_err(err)?;
        f.end_node(node).map_err(err)?;
    }

    if let Some(pci) = &p.pci {
        write_pci(&mut f, pci)?;
    }

    for (i, device) in p.passthrough.iter().enumerate() {
        write_passthrough(&mut f, device, DEVICE_CLOCK_PHANDLE + i as u32)?;
    }

    f.end_node(root).map_err(err)?;
    f.finish().map_err(err)
}

/// The host bridge's node: bus 0 only, one 32-bit non-prefetchable memory window mapped one
/// to one (`ranges`: PCI address space code 0b10 in the first cell, then the PCI address, the
/// CPU address and the size), MSIs to the GIC, no legacy INTx (no `interrupt-map`: the
/// functions have none). Linux assigns the BARs itself within the window.
fn write_pci(f: &mut FdtWriter, pci: &GuestPci) -> Result<(), GuestFdtError> {
    const MEMORY_32: u32 = 0x0200_0000;
    let split = |v: u64| [(v >> 32) as u32, v as u32];
    let node = f.begin_node(&format!("pcie@{:x}", pci.ecam)).map_err(err)?;
    f.property_string("compatible", "pci-host-ecam-generic").map_err(err)?;
    f.property_string("device_type", "pci").map_err(err)?;
    f.property_u32("#address-cells", 3).map_err(err)?;
    f.property_u32("#size-cells", 2).map_err(err)?;
    f.property_array_u64("reg", &reg(pci.ecam, pci.ecam_size)).map_err(err)?;
    f.property_array_u32("bus-range", &[0, 0]).map_err(err)?;
    f.property_u32("linux,pci-domain", 0).map_err(err)?;
    let [mmio_hi, mmio_lo] = split(pci.mmio);
    let [size_hi, size_lo] = split(pci.mmio_size);
    f.property_array_u32("ranges", &[MEMORY_32, mmio_hi, mmio_lo, mmio_hi, mmio_lo, size_hi, size_lo]).map_err(err)?;
    match (pci.its, pci.v2m) {
        // Requester IDs 0 to 0xffff are DeviceIDs 0 to 0xffff (rid-base, its phandle,
        // msi-base, length: Documentation/devicetree/bindings/pci/pci-msi.txt).
        (Some(_), _) => f.property_array_u32("msi-map", &[0, ITS_PHANDLE, 0, 0x1_0000]).map_err(err)?,
        (None, Some(_)) => f.property_u32("msi-parent", V2M_PHANDLE).map_err(err)?,
        (None, None) => f.property_u32("msi-parent", GIC_PHANDLE).map_err(err)?,
    }
    f.property_null("dma-coherent").map_err(err)?;
    f.end_node(node).map_err(err)
}

/// One passthrough device's node (and its fixed clock, and the bus that carries its DMA
/// translation, if it has them); `clock_phandle` is the phandle its clock gets.
fn write_passthrough(f: &mut FdtWriter, device: &GuestPassthrough, clock_phandle: u32) -> Result<(), GuestFdtError> {
    if device.compatible.is_empty() {
        return Err(GuestFdtError(format!(
            "the passthrough device at {:#x} has no `compatible` in the board's device tree",
            device.base
        )));
    }
    let clock = device.clock_hz.filter(|_| !device.is_primecell());
    if let Some(hz) = clock {
        let node = f.begin_node(&format!("clock-{:x}", device.base)).map_err(err)?;
        f.property_string("compatible", "fixed-clock").map_err(err)?;
        f.property_u32("#clock-cells", 0).map_err(err)?;
        f.property_u32("clock-frequency", hz).map_err(err)?;
        f.property_phandle(clock_phandle).map_err(err)?;
        f.end_node(node).map_err(err)?;
    }
    // A bus as the board's: CPU addresses one to one (`ranges;`), DMA addresses as the
    // board's buses translate them (docs/capability-model.md, D3).
    let bus = if device.dma_ranges.is_empty() {
        None
    } else {
        let bus = f.begin_node(&format!("dma-bus@{:x}", device.base)).map_err(err)?;
        f.property_string("compatible", "simple-bus").map_err(err)?;
        f.property_u32("#address-cells", 2).map_err(err)?;
        f.property_u32("#size-cells", 2).map_err(err)?;
        f.property_null("ranges").map_err(err)?;
        let cells: Vec<u64> = device.dma_ranges.iter().flat_map(|r| [r.bus, r.cpu, r.size]).collect();
        f.property_array_u64("dma-ranges", &cells).map_err(err)?;
        Some(bus)
    };
    let node = f.begin_node(&device.node_name()).map_err(err)?;
    f.property("compatible", &device.compatible).map_err(err)?;
    f.property_array_u64("reg", &reg(device.base, device.size)).map_err(err)?;
    if !device.spis.is_empty() {
        let cells: Vec<u32> = device.spis.iter().flat_map(|&(spi, flags)| [GIC_SPI, spi, flags]).collect();
        f.property_array_u32("interrupts", &cells).map_err(err)?;
    }
    // An AMBA (PrimeCell) device is probed by Linux only with its bus clock.
    if device.is_primecell() {
        f.property_u32("clocks", CLOCK_PHANDLE).map_err(err)?;
        f.property_string("clock-names", "apb_pclk").map_err(err)?;
    } else if clock.is_some() {
        f.property_u32("clocks", clock_phandle).map_err(err)?;
    }
    for (name, value) in &device.properties {
        f.property(name, value).map_err(err)?;
    }
    f.end_node(node).map_err(err)?;
    if let Some(bus) = bus {
        f.end_node(bus).map_err(err)?;
    }
    Ok(())
}

/// A device tree the user brought (`--dtb`) with its `/chosen` node set as the hypervisor
/// places things: `bootargs`, and `linux,initrd-start`/`-end` (or none), as QEMU does with
/// `-dtb`. Everything else is copied as it is, memory reservations included.
pub fn with_chosen(
    tree: &[u8],
    bootargs: &str,
    initrd: Option<(u64, u64)>,
    seeds: Option<GuestSeeds>,
) -> Result<Vec<u8>, GuestFdtError> {
    let fdt = Fdt::new(tree).map_err(|e| GuestFdtError(format!("the given device tree is not valid: {e}")))?;
    let root = fdt.root();
    let reserved: Vec<vm_fdt::FdtReserveEntry> =
        fdt.memory_reservations().filter_map(|r| vm_fdt::FdtReserveEntry::new(r.address, r.size).ok()).collect();
    let mut f = FdtWriter::new_with_mem_reserv(&reserved).map_err(err)?;
    let top = f.begin_node("").map_err(err)?;
    copy_properties(&mut f, root)?;
    let mut chosen_seen = false;
    for child in root.children() {
        if child.name == "chosen" {
            chosen_seen = true;
            write_chosen(&mut f, Some(child), bootargs, initrd, seeds)?;
        } else {
            copy_node(&mut f, child)?;
        }
    }
    if !chosen_seen {
        write_chosen(&mut f, None, bootargs, initrd, seeds)?;
    }
    f.end_node(top).map_err(err)?;
    f.finish().map_err(err)
}

/// Puts `seeds` in place of the `/chosen/rng-seed` and `/chosen/kaslr-seed` a tree of
/// `build` or `with_chosen` holds, in place (the values keep their sizes, so nothing else of
/// the tree moves): a VM that resets itself boots again with new seeds (docs/entropy.md).
pub fn reseed(tree: &mut [u8], seeds: GuestSeeds) -> Result<(), GuestFdtError> {
    let kaslr = seeds.kaslr_seed.to_be_bytes();
    let [rng_at, kaslr_at] = {
        let fdt = Fdt::new(tree).map_err(|e| GuestFdtError(format!("the device tree is not valid: {e}")))?;
        let chosen = fdt.find_node("/chosen").ok_or_else(|| GuestFdtError("the device tree has no /chosen".into()))?;
        let base = tree.as_ptr() as usize;
        let value_at = |name: &str, len: usize| match chosen.property(name) {
            Some(p) if p.value.len() == len => Ok(p.value.as_ptr() as usize - base),
            Some(p) => Err(GuestFdtError(format!("/chosen/{name} has {} bytes, not {len}", p.value.len()))),
            None => Err(GuestFdtError(format!("the device tree has no /chosen/{name} to replace"))),
        };
        [value_at("rng-seed", seeds.rng_seed.len())?, value_at("kaslr-seed", kaslr.len())?]
    };
    tree[rng_at..rng_at + seeds.rng_seed.len()].copy_from_slice(&seeds.rng_seed);
    tree[kaslr_at..kaslr_at + kaslr.len()].copy_from_slice(&kaslr);
    Ok(())
}

/// Recursion is bounded: `Fdt::new` refuses a tree nested deeper than `fdt::MAX_DEPTH`.
fn copy_node(f: &mut FdtWriter, node: Node<'_>) -> Result<(), GuestFdtError> {
    let n = f.begin_node(node.name).map_err(err)?;
    copy_properties(f, node)?;
    for child in node.children() {
        copy_node(f, child)?;
    }
    f.end_node(n).map_err(err)
}

fn copy_properties(f: &mut FdtWriter, node: Node<'_>) -> Result<(), GuestFdtError> {
    for p in node.properties() {
        f.property(p.name, p.value).map_err(err)?;
    }
    Ok(())
}

/// The properties `with_chosen` sets; the given tree's values for them are dropped (a seed
/// baked into a tree file would be the same at every boot).
const CHOSEN_SET: [&str; 5] = ["bootargs", "linux,initrd-start", "linux,initrd-end", "rng-seed", "kaslr-seed"];

fn write_seeds(f: &mut FdtWriter, seeds: Option<GuestSeeds>) -> Result<(), GuestFdtError> {
    if let Some(seeds) = seeds {
        f.property("rng-seed", &seeds.rng_seed).map_err(err)?;
        f.property_u64("kaslr-seed", seeds.kaslr_seed).map_err(err)?;
    }
    Ok(())
}

fn write_chosen(
    f: &mut FdtWriter,
    given: Option<Node<'_>>,
    bootargs: &str,
    initrd: Option<(u64, u64)>,
    seeds: Option<GuestSeeds>,
) -> Result<(), GuestFdtError> {
    let chosen = f.begin_node("chosen").map_err(err)?;
    for p in given.iter().flat_map(|g| g.properties()).filter(|p| !CHOSEN_SET.contains(&p.name)) {
        f.property(p.name, p.value).map_err(err)?;
    }
    f.property_string("bootargs", bootargs).map_err(err)?;
    if let Some((start, end)) = initrd {
        f.property_u64("linux,initrd-start", start).map_err(err)?;
        f.property_u64("linux,initrd-end", end).map_err(err)?;
    }
    write_seeds(f, seeds)?;
    for child in given.iter().flat_map(|g| g.children()) {
        copy_node(f, child)?;
    }
    f.end_node(chosen).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::{GicVersion, PhysRange, Platform, PsciConduit, TimerInterrupts};

    /// A node's `interrupts` property as its cells.
    fn interrupt_cells(node: &Node<'_>) -> Vec<u32> {
        let value = node.property("interrupts").unwrap().value;
        value.chunks(4).map(|c| u32::from_be_bytes(c.try_into().unwrap())).collect()
    }

    fn virt(gic: GuestGic, vcpus: u32) -> GuestPlatform {
        GuestPlatform {
            vcpus,
            ram_base: 0x4000_0000,
            ram_size: 0x4000_0000,
            gic,
            uart_base: 0x0900_0000,
            uart_spi: 1,
            virtio_mmio: [(0x0a00_0000, 16), (0x0a00_0200, 17)].to_vec(),
            pci: None,
            bootargs: "console=ttyAMA0 earlycon".into(),
            initrd: Some((0x4800_0000, 0x4820_0000)),
            passthrough: Vec::new(),
            seeds: None,
        }
    }

    /// A node's property as 32-bit cells.
    fn cells(node: &Node<'_>, name: &str) -> Vec<u32> {
        let value = node.property(name).unwrap().value;
        value.chunks(4).map(|c| u32::from_be_bytes(c.try_into().unwrap())).collect()
    }

    /// `virt`'s host bridge (hyp_core::guest_map), its MSIs to a GICv3's doorbell.
    fn virt_pci() -> GuestPci {
        GuestPci {
            ecam: 0x0a10_0000,
            ecam_size: 0x10_0000,
            mmio: 0x0a20_0000,
            mmio_size: 0x10_0000,
            mbi_first_intid: 96,
            mbi_count: 32,
            v2m: None,
            its: None,
        }
    }

    #[test]
    fn virtio_over_pci_gets_a_generic_host_bridge_whose_msis_go_to_the_gics_doorbell() {
        let pci = virt_pci();
        let v3 = GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 };
        let blob = build(&GuestPlatform { pci: Some(pci), virtio_mmio: Vec::new(), ..virt(v3, 2) }).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let bridge = fdt.find_compatible(&["pci-host-ecam-generic"]).unwrap();
        assert_eq!(bridge.name, "pcie@a100000");
        assert_eq!(bridge.property("device_type").and_then(|p| p.as_str()), Some("pci"));
        assert_eq!(cells(&bridge, "reg"), [0, 0x0a10_0000, 0, 0x10_0000]);
        assert_eq!(cells(&bridge, "bus-range"), [0, 0]);
        assert_eq!(
            cells(&bridge, "ranges"),
            [0x0200_0000, 0, 0x0a20_0000, 0, 0x0a20_0000, 0, 0x10_0000],
            "32-bit memory, PCI address = CPU address"
        );
        assert_eq!(cells(&bridge, "msi-parent"), [GIC_PHANDLE]);
        assert!(bridge.property("interrupt-map").is_none(), "no INTx");
        let gic = fdt.find_compatible(&["arm,gic-v3"]).unwrap();
        assert!(gic.property("msi-controller").is_some());
        assert_eq!(cells(&gic, "mbi-ranges"), [96, 32]);
        assert!(fdt.find_compatible(&["virtio,mmio"]).is_none());

        let v2 = GuestGic::V2 { distributor: 0x0800_0000, cpu_interface: 0x0801_0000 };
        let e = build(&GuestPlatform { pci: Some(pci), ..virt(v2, 1) }).unwrap_err();
        assert!(e.to_string().contains("needs its GICv2m frame"), "{e}");
        // A GICv2's MSIs go to its GICv2m frame, a child of its node.
        let with_frame = GuestPci { v2m: Some(0x0802_0000), ..pci };
        let blob = build(&GuestPlatform { pci: Some(with_frame), ..virt(v2, 1) }).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let frame = fdt.find_compatible(&["arm,gic-v2m-frame"]).unwrap();
        assert_eq!(frame.name, "v2m@8020000");
        assert!(frame.property("msi-controller").is_some());
        assert_eq!(frame.physical_reg().next().map(|r| (r.address, r.size)), Some((0x0802_0000, Some(0x1000))));
        let gic = fdt.find_compatible(&["arm,cortex-a15-gic"]).unwrap();
        assert!(gic.property("mbi-ranges").is_none() && gic.property("msi-controller").is_none());
        let bridge = fdt.find_compatible(&["pci-host-ecam-generic"]).unwrap();
        assert_eq!(cells(&bridge, "msi-parent"), cells(&frame, "phandle"), "the frame takes the MSIs");
        let blob = build(&virt(v3, 1)).unwrap();
        let gic = Fdt::new(&blob).unwrap().find_compatible(&["arm,gic-v3"]).unwrap();
        assert!(gic.property("msi-controller").is_none(), "no doorbell without PCI");
    }

    #[test]
    fn a_gicv3_with_an_its_takes_the_functions_msis_by_their_requester_ids() {
        let pci = GuestPci { its: Some(0x0808_0000), ..virt_pci() };
        let v3 = GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 };
        let blob = build(&GuestPlatform { pci: Some(pci), virtio_mmio: Vec::new(), ..virt(v3, 2) }).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let its = fdt.find_compatible(&["arm,gic-v3-its"]).unwrap();
        assert_eq!(its.name, "msi-controller@8080000");
        assert!(its.property("msi-controller").is_some());
        assert_eq!(cells(&its, "#msi-cells"), [1]);
        assert_eq!(its.physical_reg().next().map(|r| (r.address, r.size)), Some((0x0808_0000, Some(0x2_0000))));
        let gic = fdt.find_compatible(&["arm,gic-v3"]).unwrap();
        assert!(gic.property("mbi-ranges").is_none() && gic.property("msi-controller").is_none(), "one MSI controller");
        let bridge = fdt.find_compatible(&["pci-host-ecam-generic"]).unwrap();
        assert!(bridge.property("msi-parent").is_none());
        let phandle = cells(&its, "phandle")[0];
        assert_eq!(cells(&bridge, "msi-map"), [0, phandle, 0, 0x1_0000], "requester ID n is DeviceID n");
    }

    #[test]
    fn every_vcpu_names_the_one_l2_cache_they_share() {
        let blob = build(&virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 3)).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let l2 = fdt.find_node("/cpus/l2-cache").unwrap();
        assert_eq!(l2.property("compatible").and_then(|p| p.as_str()), Some("cache"));
        assert_eq!(cells(&l2, "cache-level"), [2]);
        assert!(l2.property("cache-unified").is_some());
        for cpu in 0..3 {
            let node = fdt.find_node(&format!("/cpus/cpu@{cpu}")).unwrap();
            assert_eq!(cells(&node, "next-level-cache"), cells(&l2, "phandle"), "cpu@{cpu}");
        }
    }

    #[test]
    fn a_passthrough_device_gets_a_node_with_the_boards_compatible_reg_and_interrupts() {
        let rtc = GuestPassthrough {
            base: 0x0901_0000,
            size: 0x1000,
            compatible: b"arm,pl031\0arm,primecell\0".to_vec(),
            spis: [(2, IRQ_TYPE_LEVEL_HIGH)].to_vec(),
            ..GuestPassthrough::default()
        };
        let blob = build(&GuestPlatform {
            passthrough: [rtc].to_vec(),
            ..virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 1)
        })
        .unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let node = fdt.find_compatible(&["arm,pl031"]).unwrap();
        assert_eq!(node.name, "pl031@9010000");
        assert_eq!(node.compatible().collect::<Vec<_>>(), ["arm,pl031", "arm,primecell"]);
        let regs: Vec<_> = node.reg().map(|r| (r.address, r.size.unwrap())).collect();
        assert_eq!(regs, [(0x0901_0000, 0x1000)]);
        let cells = interrupt_cells(&node);
        assert_eq!(cells, [0, 2, 4], "SPI 2 (INTID 34), level high");
        assert_eq!(node.property("clock-names").and_then(|p| p.as_str()), Some("apb_pclk"));
    }

    /// The Raspberry Pi 4's SDHCI given to an identity-mapped VM: its RAM where the board
    /// has it, the node Linux's sdhci-iproc binds with a fixed clock, the bus width copied,
    /// and the board's DMA translation on a bus around it.
    #[test]
    fn a_dma_device_of_an_identity_mapped_vm_sits_in_a_bus_with_the_boards_dma_ranges() {
        let sdhci = GuestPassthrough {
            base: 0xfe30_0000,
            size: 0x1000,
            compatible: b"brcm,bcm2835-sdhci\0".to_vec(),
            spis: [(126, IRQ_TYPE_LEVEL_HIGH)].to_vec(),
            properties: [("bus-width".into(), 4u32.to_be_bytes().to_vec()), ("broken-cd".into(), Vec::new())].to_vec(),
            clock_hz: Some(100_000_000),
            dma_ranges: [DmaRange { bus: 0xc000_0000, cpu: 0, size: 0x4000_0000 }].to_vec(),
        };
        let blob = build(&GuestPlatform {
            ram_base: 0x2000_0000,
            ram_size: 0x1000_0000,
            passthrough: [sdhci].to_vec(),
            ..virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 1)
        })
        .unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let p = Platform::from_device_tree(&blob).unwrap();
        assert_eq!(p.memory.as_slice(), &[PhysRange { base: 0x2000_0000, size: 0x1000_0000 }], "RAM at IPA = PA");
        let node = fdt.find_node("/dma-bus@fe300000/bcm2835-sdhci@fe300000").expect("the device inside its bus");
        assert_eq!(node.physical_reg().next().map(|r| (r.address, r.size)), Some((0xfe30_0000, Some(0x1000))));
        let board_reach = DmaRange { bus: 0xc000_0000, cpu: 0, size: 0x4000_0000 };
        let windows = heapless::Vec::from_slice(&[board_reach]).unwrap();
        assert_eq!(node.dma_reach(), Some(crate::fdt::DmaReach::Windows(windows)), "the board's translation");
        assert!(node.dma_reach().unwrap().covers(0x2000_0000, 0x1000_0000), "the VM's RAM is within the reach");
        let bus = fdt.find_node("/dma-bus@fe300000").unwrap();
        assert_eq!(bus.property("compatible").and_then(|p| p.as_str()), Some("simple-bus"));
        assert_eq!(bus.property("ranges").map(|p| p.value.len()), Some(0), "CPU addresses one to one");
        assert_eq!(interrupt_cells(&node), [0, 126, 4]);
        assert_eq!(node.property("bus-width").and_then(|p| p.as_u32()), Some(4));
        assert!(node.property("broken-cd").is_some());
        for absent in ["non-removable", "mmc-pwrseq", "vqmmc-supply", "clock-names"] {
            assert!(node.property(absent).is_none(), "{absent}");
        }
        let clock = node.property("clocks").and_then(|p| p.as_u32()).unwrap();
        let clock = fdt.node_by_phandle(clock).expect("its clock");
        assert_eq!(clock.property("compatible").and_then(|p| p.as_str()), Some("fixed-clock"));
        assert_eq!(clock.property("clock-frequency").and_then(|p| p.as_u32()), Some(100_000_000));
    }

    #[test]
    fn a_passthrough_device_without_compatible_is_an_error() {
        let device = GuestPassthrough { base: 0x0901_0000, size: 0x1000, ..GuestPassthrough::default() };
        let e = build(&GuestPlatform {
            passthrough: [device].to_vec(),
            ..virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 1)
        })
        .unwrap_err();
        assert!(e.to_string().contains("no `compatible`"), "{e}");
    }

    #[test]
    fn a_gicv3_guest_tree_reads_back_as_the_platform_it_describes() {
        let blob = build(&virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 2)).unwrap();
        let p = Platform::from_device_tree(&blob).unwrap();
        assert_eq!(p.memory.as_slice(), &[PhysRange { base: 0x4000_0000, size: 0x4000_0000 }]);
        assert_eq!(p.cpus.as_slice(), &[0, 1]);
        assert_eq!(p.gic.version, GicVersion::V3);
        assert_eq!(p.gic.distributor, PhysRange { base: 0x0800_0000, size: 0x1_0000 });
        assert_eq!(p.gic.redistributors, Some(PhysRange { base: 0x080a_0000, size: 0x4_0000 }));
        assert_eq!(p.uart, PhysRange { base: 0x0900_0000, size: 0x1000 });
        assert_eq!(p.psci, Some(PsciConduit::Hvc));
        assert_eq!(
            p.timer,
            TimerInterrupts { secure_physical: 29, nonsecure_physical: 30, virtual_timer: 27, hyp_physical: 26 }
        );
        assert_eq!(p.initrd, Some(PhysRange { base: 0x4800_0000, size: 0x20_0000 }));
    }

    #[test]
    fn a_gicv2_guest_tree_names_the_cpu_interface_and_cpu_masks() {
        let blob = build(&virt(GuestGic::V2 { distributor: 0x0800_0000, cpu_interface: 0x0801_0000 }, 4)).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let gic = fdt.find_compatible(&["arm,cortex-a15-gic"]).unwrap();
        let regs: Vec<_> = gic.reg().map(|r| (r.address, r.size.unwrap())).collect();
        assert_eq!(regs, [(0x0800_0000, 0x1_0000), (0x0801_0000, 0x2000)]);
        let timer = fdt.find_compatible(&["arm,armv8-timer"]).unwrap();
        let cells = interrupt_cells(&timer);
        assert_eq!(&cells[0..3], &[1, 13, 0xf04], "PPI to all 4 CPUs, level high");
    }

    #[test]
    fn chosen_and_virtio_nodes_are_present() {
        let blob = build(&virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 1)).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            fdt.find_node("/chosen").unwrap().property("bootargs").and_then(|p| p.as_str()),
            Some("console=ttyAMA0 earlycon")
        );
        assert_eq!(fdt.stdout().map(|n| n.name), Some("pl011@9000000"));
        let virtio: Vec<_> = fdt.all_nodes().filter(|n| n.name.starts_with("virtio_mmio@")).map(|n| n.name).collect();
        assert_eq!(virtio, ["virtio_mmio@a000000", "virtio_mmio@a000200"]);
    }

    #[test]
    fn a_given_tree_is_copied_with_chosen_set_by_the_hypervisor() {
        let given = build(&GuestPlatform {
            bootargs: "quiet".into(),
            initrd: Some((1, 2)),
            ..virt(GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 }, 2)
        })
        .unwrap();
        let tree = with_chosen(&given, "console=ttyAMA0", Some((0x4800_0000, 0x4900_0000)), None).unwrap();
        let fdt = Fdt::new(&tree).unwrap();
        assert_eq!(
            fdt.find_node("/chosen").unwrap().property("bootargs").and_then(|p| p.as_str()),
            Some("console=ttyAMA0")
        );
        let chosen = fdt.find_node("/chosen").unwrap();
        let start = chosen.property("linux,initrd-start").unwrap().value;
        assert_eq!(start, 0x4800_0000u64.to_be_bytes());
        assert!(chosen.property("stdout-path").is_some(), "other /chosen properties are kept");
        // Everything else reads back as the original.
        let original = Fdt::new(&given).unwrap();
        let names = |f: &Fdt<'_>| f.all_nodes().map(|n| n.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&fdt), names(&original));
        assert_eq!(fdt.find_node("/cpus").unwrap().children().filter(|c| c.name.starts_with("cpu@")).count(), 2);
        let no_initrd = with_chosen(&given, "x", None, None).unwrap();
        assert!(Fdt::new(&no_initrd).unwrap().find_node("/chosen").unwrap().property("linux,initrd-start").is_none());
    }

    #[test]
    fn a_tree_without_chosen_gets_one_and_garbage_is_refused() {
        let mut w = FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.property_u32("#address-cells", 2).unwrap();
        w.end_node(root).unwrap();
        let bare = w.finish().unwrap();
        let tree = with_chosen(&bare, "init=/bin/sh", None, None).unwrap();
        assert_eq!(
            Fdt::new(&tree).unwrap().find_node("/chosen").unwrap().property("bootargs").and_then(|p| p.as_str()),
            Some("init=/bin/sh")
        );
        let err = with_chosen(b"not a device tree at all", "", None, None).unwrap_err();
        assert!(err.to_string().contains("the given device tree is not valid"), "{err}");
    }

    #[test]
    fn the_vms_seeds_are_in_chosen_and_a_given_trees_own_are_replaced() {
        let seeds = GuestSeeds { rng_seed: [0xa5; 32], kaslr_seed: 0x1234_5678_9abc_def0 };
        let read = |tree: &[u8]| {
            let fdt = Fdt::new(tree).unwrap();
            let chosen = fdt.find_node("/chosen").unwrap();
            let rng = chosen.property("rng-seed").map(|p| p.value.to_vec());
            let kaslr = chosen.property("kaslr-seed").map(|p| p.value.to_vec());
            (rng, kaslr)
        };
        let gic = GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 };
        let built = build(&GuestPlatform { seeds: Some(seeds), ..virt(gic, 1) }).unwrap();
        assert_eq!(read(&built), (Some([0xa5; 32].to_vec()), Some(0x1234_5678_9abc_def0u64.to_be_bytes().to_vec())));
        assert_eq!(read(&build(&virt(gic, 1)).unwrap()), (None, None), "no seed from a board without one");
        let other = GuestSeeds { rng_seed: [0x5a; 32], kaslr_seed: 7 };
        let given = with_chosen(&built, "x", None, Some(other)).unwrap();
        assert_eq!(read(&given), (Some([0x5a; 32].to_vec()), Some(7u64.to_be_bytes().to_vec())));
        let unseeded = with_chosen(&built, "x", None, None).unwrap();
        assert_eq!(read(&unseeded), (None, None), "a seed baked into a tree file is not reused");
    }

    #[test]
    fn reseeding_replaces_both_seeds_and_nothing_else() {
        let first = GuestSeeds { rng_seed: [0xa5; 32], kaslr_seed: 0x1234_5678_9abc_def0 };
        let second = GuestSeeds { rng_seed: [0x3c; 32], kaslr_seed: 0x0fed_cba9_8765_4321 };
        let gic = GuestGic::V3 { distributor: 0x0800_0000, redistributors: 0x080a_0000 };
        let generated = |seeds| build(&GuestPlatform { seeds: Some(seeds), ..virt(gic, 2) }).unwrap();
        let given = |seeds| with_chosen(&build(&virt(gic, 1)).unwrap(), "x", None, Some(seeds)).unwrap();
        for (mut tree, expected) in [(generated(first), generated(second)), (given(first), given(second))] {
            assert_ne!(tree, expected);
            reseed(&mut tree, second).unwrap();
            assert_eq!(tree, expected, "the same tree as one built with the new seeds");
        }
        let mut unseeded = build(&virt(gic, 1)).unwrap();
        let err = reseed(&mut unseeded, second).unwrap_err();
        assert!(err.to_string().contains("no /chosen/rng-seed to replace"), "{err}");
    }

    #[test]
    fn zero_vcpus_is_an_error() {
        assert!(build(&virt(GuestGic::V3 { distributor: 0, redistributors: 0 }, 0)).is_err());
    }
}
