//! The board as the device tree describes it: memory, CPUs, GIC, UART, PSCI conduit, timer
//! interrupts, reserved memory and the initrd. Nothing here is hard-coded for a board; the
//! hypervisor discovers one platform at run time (docs/architecture.md, "One image per architecture").
//!
//! Runs before the heap exists, so it uses fixed-capacity lists.

use core::fmt;

use crate::fdt::{Fdt, FdtError, Node};
use heapless::Vec as FixedVec;

/// How many physical CPUs the hypervisor manages; further CPUs are reported and left off.
pub const MAX_CPUS: usize = 8;
const MAX_MEMORY_RANGES: usize = 8;
const MAX_RESERVED_RANGES: usize = 16;
/// virtio-mmio transports the hypervisor looks at (QEMU's `virt` has 32).
pub const MAX_VIRTIO_MMIO: usize = 32;

/// A physical address range `[base, base + size)` as the device tree states it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PhysRange {
    pub base: u64,
    pub size: u64,
}

impl PhysRange {
    pub const fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }
    pub const fn overlaps(&self, other: &PhysRange) -> bool {
        self.base < other.end() && other.base < self.end()
    }
}

impl fmt::Display for PhysRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.base, self.end())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GicVersion {
    V2,
    V3,
}

/// The physical GIC. GICv3 has redistributors; GICv2 a CPU interface and, with the
/// virtualization extensions, the GICH control and GICV virtual CPU interface frames.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GicDescription {
    pub version: GicVersion,
    pub distributor: PhysRange,
    pub redistributors: Option<PhysRange>,
    pub cpu_interface: Option<PhysRange>,
    pub hyp_interface: Option<PhysRange>,
    pub virtual_cpu_interface: Option<PhysRange>,
    /// The maintenance interrupt (a PPI), as an INTID.
    pub maintenance_intid: Option<u32>,
}

/// How PSCI calls reach the firmware (the `/psci` node's `method`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PsciConduit {
    Smc,
    Hvc,
}

/// How a CPU is started, as its `enable-method` says
/// (Documentation/devicetree/bindings/arm/cpus.yaml).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CpuStart {
    /// PSCI CPU_ON, over the `/psci` conduit.
    Psci,
    /// A spin table: the CPU waits for an entry address at `release` (`cpu-release-addr`),
    /// as the Raspberry Pi 4's firmware leaves its CPUs.
    SpinTable { release: u64 },
    /// Versatile Express's own method, which its device trees give no `enable-method` for:
    /// the CPU waits in the board's firmware for an interrupt and an entry address in the
    /// motherboard's SYS_FLAGS register.
    SysFlags(SysFlags),
    /// No method this hypervisor knows (or none, as a boot CPU may have).
    Unknown,
}

/// The motherboard system registers of a Versatile Express (`arm,vexpress-sysreg`), through
/// which its CPUs are started: the boot CPU leaves an entry address alone in SYS_FLAGS (clear
/// every bit, then set the address) and sends the CPU an interrupt; the CPU, waiting in the
/// firmware for an interrupt, then jumps to the address if it is not 0. This is what QEMU's
/// `vexpress-a15` does for a `-kernel` it boots (its firmware stub in its SRAM) and ARM's own
/// boot monitor does on the boards (docs/deploy-armv7.md, "Versatile Express").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SysFlags {
    /// The system registers' window, as CPU physical addresses.
    pub registers: PhysRange,
}

impl SysFlags {
    /// SYS_FLAGSSET's offset in the window: a write sets the bits it holds (a read gives
    /// SYS_FLAGS).
    pub const SET: u64 = 0x30;
    /// SYS_FLAGSCLR's: a write clears the bits it holds.
    pub const CLEAR: u64 = 0x34;

    /// SYS_FLAGSSET's physical address.
    pub const fn set_register(&self) -> u64 {
        self.registers.base + Self::SET
    }

    /// SYS_FLAGSCLR's physical address.
    pub const fn clear_register(&self) -> u64 {
        self.registers.base + Self::CLEAR
    }
}

/// The architected timer PPIs, as INTIDs, in the order of the binding
/// (Documentation/devicetree/bindings/timer/arm,arch_timer.yaml).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TimerInterrupts {
    pub secure_physical: u32,
    pub nonsecure_physical: u32,
    pub virtual_timer: u32,
    pub hyp_physical: u32,
}

#[derive(Clone, Debug)]
pub struct Platform<'a> {
    pub model: &'a str,
    pub memory: FixedVec<PhysRange, MAX_MEMORY_RANGES>,
    /// MPIDR affinity values of the CPUs that are enabled, boot CPU order as listed.
    pub cpus: FixedVec<u64, MAX_CPUS>,
    /// How each of `cpus` is started, in the same order.
    pub cpu_start: FixedVec<CpuStart, MAX_CPUS>,
    /// CPUs the device tree lists but that stay off: disabled, or beyond MAX_CPUS.
    pub cpus_left_off: usize,
    pub gic: GicDescription,
    pub uart: PhysRange,
    /// The UART's interrupt (its receive interrupt brings console input), if the device
    /// tree gives one that reaches the GIC: through the interrupt tree, as a Versatile
    /// Express's motherboard gives its UARTs' through its bus's `interrupt-map`.
    pub uart_intid: Option<u32>,
    /// The `/psci` node's conduit; none on a board whose firmware has no PSCI (its CPUs start
    /// by a spin table, and it cannot be powered off).
    pub psci: Option<PsciConduit>,
    pub timer: TimerInterrupts,
    /// `/memreserve/` entries and `/reserved-memory` children: never given to a VM.
    pub reserved: FixedVec<PhysRange, MAX_RESERVED_RANGES>,
    pub initrd: Option<PhysRange>,
    /// The board's virtio-mmio transports (`virtio,mmio`), which the hypervisor may drive as
    /// its own devices (the backends of its guests' virtio devices), with their interrupts.
    pub virtio_mmio: FixedVec<VirtioMmioTransport, MAX_VIRTIO_MMIO>,
    /// `/chosen/rng-seed`: random bytes the firmware (QEMU, U-Boot) gives the hypervisor;
    /// each VM's seed is derived from it (`entropy`).
    pub rng_seed: Option<&'a [u8]>,
}

/// A virtio-mmio transport of the board: its register window and interrupt (an INTID).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VirtioMmioTransport {
    pub window: PhysRange,
    pub intid: Option<u32>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PlatformError {
    /// The blob is not a flattened device tree.
    NotADeviceTree(FdtError),
    NoMemory,
    NoCpus,
    TooManyRanges(&'static str),
    /// No interrupt controller the hypervisor can drive.
    NoGic,
    /// A GICv2 without the virtualization extension frames (GICH, GICV).
    GicWithoutVirtualization,
    NoUart,
    UnknownPsciMethod,
    NoTimer,
    /// A property is present but malformed.
    BadProperty(&'static str),
}

impl fmt::Display for PlatformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADeviceTree(e) => write!(f, "x0 does not point to a flattened device tree this hypervisor reads ({e}); boot through a loader that passes one"),
            Self::NoMemory => write!(f, "the device tree has no /memory node with a reg property"),
            Self::NoCpus => write!(f, "the device tree lists no enabled CPU under /cpus"),
            Self::TooManyRanges(what) => write!(f, "the device tree lists more {what} ranges than the hypervisor supports"),
            Self::NoGic => write!(f, "no GICv2 (arm,gic-400 / arm,cortex-a15-gic) or GICv3 (arm,gic-v3) node in the device tree"),
            Self::GicWithoutVirtualization => write!(f, "the GICv2 node has no GICH/GICV frames: this GIC cannot run virtual machines"),
            Self::NoUart => write!(f, "no PL011 UART (arm,pl011) in the device tree"),
            Self::UnknownPsciMethod => write!(f, "/psci method is neither \"smc\" nor \"hvc\""),
            Self::NoTimer => write!(f, "no architected timer node (arm,armv8-timer / arm,armv7-timer) with 4 interrupts"),
            Self::BadProperty(p) => write!(f, "device tree property {p} is malformed"),
        }
    }
}

const GICV2_COMPATIBLES: &[&str] = &["arm,gic-400", "arm,cortex-a15-gic", "arm,cortex-a7-gic", "arm,cortex-a9-gic"];
const GICV3_COMPATIBLES: &[&str] = &["arm,gic-v3"];
const TIMER_COMPATIBLES: &[&str] = &["arm,armv8-timer", "arm,armv7-timer"];

impl<'a> Platform<'a> {
    pub fn from_device_tree(blob: &'a [u8]) -> Result<Self, PlatformError> {
        let fdt = Fdt::new(blob).map_err(PlatformError::NotADeviceTree)?;
        let mut reserved = FixedVec::new();
        for r in fdt.memory_reservations() {
            let range = PhysRange { base: r.address, size: r.size };
            reserved.push(range).map_err(|_| PlatformError::TooManyRanges("reserved memory"))?;
        }
        if let Some(node) = fdt.find_node("/reserved-memory") {
            for child in node.children() {
                for range in regs(child) {
                    reserved.push(range).map_err(|_| PlatformError::TooManyRanges("reserved memory"))?;
                }
            }
        }
        let (cpus, cpu_start, cpus_left_off) = cpus(&fdt)?;
        let (gic_node, gic_version) = gic_node(&fdt)?;
        let uart_node = uart(&fdt)?;
        let uart = regs(uart_node).next().ok_or(PlatformError::BadProperty("PL011 reg"))?;
        Ok(Platform {
            model: fdt.root().property("model").and_then(|p| p.as_str()).unwrap_or("unknown"),
            memory: memory(&fdt)?,
            cpus,
            cpu_start,
            cpus_left_off,
            gic: gic(gic_node, gic_version)?,
            uart,
            uart_intid: first_interrupt(uart_node, gic_node),
            psci: psci(&fdt)?,
            timer: timer(&fdt, gic_node)?,
            reserved,
            initrd: initrd(&fdt)?,
            virtio_mmio: virtio_mmio(&fdt, gic_node),
            rng_seed: fdt.find_node("/chosen").and_then(|c| c.property("rng-seed")).map(|p| p.value),
        })
    }
}

/// The board's console alone (its PL011), from a device tree the rest of which may not
/// describe a board the hypervisor can use: where to say why it stops.
pub fn console_uart(blob: &[u8]) -> Option<PhysRange> {
    regs(uart(&Fdt::new(blob).ok()?).ok()?).next()
}

/// The node's `reg` ranges as CPU physical addresses (through its buses' `ranges`). Ranges
/// with no size are skipped: they name registers, not memory.
fn regs<'a>(node: Node<'a>) -> impl Iterator<Item = PhysRange> + 'a {
    node.physical_reg().filter_map(|r| r.size.map(|size| PhysRange { base: r.address, size }))
}

fn memory(fdt: &Fdt<'_>) -> Result<FixedVec<PhysRange, MAX_MEMORY_RANGES>, PlatformError> {
    let mut memory = FixedVec::new();
    let memory_nodes = fdt
        .all_nodes()
        .filter(|n| n.property("device_type").and_then(|p| p.as_str()) == Some("memory") && n.is_enabled());
    for node in memory_nodes {
        for range in regs(node).filter(|r| r.size > 0) {
            memory.push(range).map_err(|_| PlatformError::TooManyRanges("memory"))?;
        }
    }
    if memory.is_empty() {
        return Err(PlatformError::NoMemory);
    }
    Ok(memory)
}

fn be_cells(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
}

/// A number of one or two cells, as `linux,initrd-start` or a CPU's `reg` may be.
fn cells_value(bytes: &[u8], what: &'static str) -> Result<u64, PlatformError> {
    match bytes.len() {
        4 => Ok(u64::from(be_cells(bytes).next().unwrap_or(0))),
        8 => {
            let mut cells = be_cells(bytes);
            let hi = u64::from(cells.next().unwrap_or(0));
            let lo = u64::from(cells.next().unwrap_or(0));
            Ok(hi << 32 | lo)
        }
        _ => Err(PlatformError::BadProperty(what)),
    }
}

type Cpus = (FixedVec<u64, MAX_CPUS>, FixedVec<CpuStart, MAX_CPUS>, usize);

/// Versatile Express's system registers, if the board is one (its root is compatible with
/// `arm,vexpress`, as Linux's support for it matches) and its device tree gives them.
fn versatile_express_sys_flags(fdt: &Fdt<'_>) -> Result<Option<SysFlags>, PlatformError> {
    if !fdt.root().compatible().any(|c| c == "arm,vexpress") {
        return Ok(None);
    }
    let Some(sysreg) = fdt.all_nodes().find(|n| n.compatible().any(|c| c == "arm,vexpress-sysreg") && n.is_enabled())
    else {
        return Ok(None);
    };
    let registers = regs(sysreg).next().ok_or(PlatformError::BadProperty("arm,vexpress-sysreg reg"))?;
    if registers.size < SysFlags::CLEAR + 4 {
        return Err(PlatformError::BadProperty("arm,vexpress-sysreg reg"));
    }
    Ok(Some(SysFlags { registers }))
}

fn cpus(fdt: &Fdt<'_>) -> Result<Cpus, PlatformError> {
    let node = fdt.find_node("/cpus").ok_or(PlatformError::NoCpus)?;
    let sys_flags = versatile_express_sys_flags(fdt)?;
    let mut cpus = FixedVec::new();
    let mut starts = FixedVec::new();
    let mut left_off = 0;
    let cpu_nodes = node.children().filter(|c| c.property("device_type").and_then(|p| p.as_str()) == Some("cpu"));
    for cpu in cpu_nodes {
        let reg = cpu.property("reg").ok_or(PlatformError::BadProperty("/cpus/cpu reg"))?;
        let mpidr = cells_value(reg.value, "/cpus/cpu reg")?;
        let start = match cpu.property("enable-method").and_then(|p| p.as_str()) {
            Some("psci") => CpuStart::Psci,
            Some("spin-table") => {
                let release = cpu.property("cpu-release-addr").ok_or(PlatformError::BadProperty("cpu-release-addr"))?;
                CpuStart::SpinTable { release: cells_value(release.value, "cpu-release-addr")? }
            }
            // A Versatile Express's CPUs name no method: the board's is meant.
            None => sys_flags.map_or(CpuStart::Unknown, CpuStart::SysFlags),
            Some(_) => CpuStart::Unknown,
        };
        // CPUs marked disabled are not waited for (a known source of slow boots).
        if !cpu.is_enabled() || cpus.push(mpidr).is_err() {
            left_off += 1;
        } else {
            // As many as `cpus` holds: this push cannot fail.
            let _ = starts.push(start);
        }
    }
    if cpus.is_empty() {
        return Err(PlatformError::NoCpus);
    }
    Ok((cpus, starts, left_off))
}

/// Decodes one 3-cell GIC interrupt specifier (type, number, flags) into an INTID
/// (Documentation/devicetree/bindings/interrupt-controller/arm,gic.yaml: type 0 is an SPI,
/// INTID 32 + n; type 1 a PPI, INTID 16 + n).
fn gic_intid(kind: u32, number: u32) -> Option<u32> {
    match kind {
        0 => number.checked_add(32),
        1 => number.checked_add(16),
        _ => None,
    }
}

/// The GIC's node and version.
fn gic_node<'a>(fdt: &Fdt<'a>) -> Result<(Node<'a>, GicVersion), PlatformError> {
    if let Some(n) = fdt.find_compatible(GICV3_COMPATIBLES) {
        Ok((n, GicVersion::V3))
    } else if let Some(n) = fdt.find_compatible(GICV2_COMPATIBLES) {
        Ok((n, GicVersion::V2))
    } else {
        Err(PlatformError::NoGic)
    }
}

fn gic(node: Node<'_>, version: GicVersion) -> Result<GicDescription, PlatformError> {
    let mut frames = regs(node);
    let distributor = frames.next().ok_or(PlatformError::BadProperty("GIC reg"))?;
    let maintenance_intid = first_interrupt(node, node);
    let gic = match version {
        GicVersion::V3 => {
            // reg = GICD, GICR regions..., then (optional) GICC, GICH, GICV.
            let redistributors = frames.next().ok_or(PlatformError::BadProperty("GICv3 reg (GICR)"))?;
            GicDescription {
                version,
                distributor,
                redistributors: Some(redistributors),
                cpu_interface: None,
                hyp_interface: None,
                virtual_cpu_interface: None,
                maintenance_intid,
            }
        }
        GicVersion::V2 => {
            let cpu_interface = frames.next();
            let hyp_interface = frames.next();
            let virtual_cpu_interface = frames.next();
            if hyp_interface.is_none() || virtual_cpu_interface.is_none() {
                return Err(PlatformError::GicWithoutVirtualization);
            }
            GicDescription {
                version,
                distributor,
                redistributors: None,
                cpu_interface,
                hyp_interface,
                virtual_cpu_interface,
                maintenance_intid,
            }
        }
    };
    Ok(gic)
}

/// The console's node: the PL011 the loader chose, if it chose one; otherwise the first.
fn uart<'a>(fdt: &Fdt<'a>) -> Result<Node<'a>, PlatformError> {
    let is_pl011 = |n: &Node<'_>| n.compatible().any(|s| s == "arm,pl011") && n.is_enabled();
    let chosen = fdt.stdout().filter(is_pl011);
    chosen.or_else(|| fdt.all_nodes().find(is_pl011)).ok_or(PlatformError::NoUart)
}

/// A node's interrupts as INTIDs of the GIC `gic`, in order, each found through the
/// interrupt tree (its interrupt parent and any nexus on the way: fdt::Node::interrupts).
/// None for one that reaches another controller, or none.
fn gic_intids<'a>(node: Node<'a>, gic: Node<'a>) -> impl Iterator<Item = Option<u32>> + 'a {
    node.interrupts().map(move |interrupt| {
        let interrupt = interrupt.ok().filter(|i| i.controller == gic)?;
        match interrupt.specifier() {
            [kind, number, ..] => gic_intid(*kind, *number),
            _ => None,
        }
    })
}

/// The first interrupt of a node, as an INTID of the GIC `gic`.
fn first_interrupt<'a>(node: Node<'a>, gic: Node<'a>) -> Option<u32> {
    gic_intids(node, gic).next().flatten()
}

/// Enabled `virtio,mmio` nodes with a window, in address order (how QEMU numbers them);
/// beyond `MAX_VIRTIO_MMIO` they are left off.
fn virtio_mmio<'a>(fdt: &Fdt<'a>, gic: Node<'a>) -> FixedVec<VirtioMmioTransport, MAX_VIRTIO_MMIO> {
    let mut found: FixedVec<VirtioMmioTransport, MAX_VIRTIO_MMIO> = fdt
        .all_nodes()
        .filter(|n| n.compatible().any(|s| s == "virtio,mmio") && n.is_enabled())
        .filter_map(|n| Some(VirtioMmioTransport { window: regs(n).next()?, intid: first_interrupt(n, gic) }))
        .take(MAX_VIRTIO_MMIO)
        .collect();
    found.sort_unstable_by_key(|t| t.window.base);
    found
}

fn psci(fdt: &Fdt<'_>) -> Result<Option<PsciConduit>, PlatformError> {
    let Some(node) = fdt.find_node("/psci") else { return Ok(None) };
    match node.property("method").and_then(|p| p.as_str()) {
        Some("smc") => Ok(Some(PsciConduit::Smc)),
        Some("hvc") => Ok(Some(PsciConduit::Hvc)),
        _ => Err(PlatformError::UnknownPsciMethod),
    }
}

fn timer<'a>(fdt: &Fdt<'a>, gic: Node<'a>) -> Result<TimerInterrupts, PlatformError> {
    let node = fdt.find_compatible(TIMER_COMPATIBLES).ok_or(PlatformError::NoTimer)?;
    let intids: FixedVec<Option<u32>, 4> = gic_intids(node, gic).take(4).collect();
    let intid = |i: usize| -> Result<u32, PlatformError> {
        intids.get(i).ok_or(PlatformError::NoTimer)?.ok_or(PlatformError::BadProperty("timer interrupts"))
    };
    Ok(TimerInterrupts {
        secure_physical: intid(0)?,
        nonsecure_physical: intid(1)?,
        virtual_timer: intid(2)?,
        hyp_physical: intid(3)?,
    })
}

fn initrd(fdt: &Fdt<'_>) -> Result<Option<PhysRange>, PlatformError> {
    let chosen = match fdt.find_node("/chosen") {
        Some(c) => c,
        None => return Ok(None),
    };
    let (start, end) = match (chosen.property("linux,initrd-start"), chosen.property("linux,initrd-end")) {
        (Some(s), Some(e)) => (s, e),
        _ => return Ok(None),
    };
    let start = cells_value(start.value, "linux,initrd-start")?;
    let end = cells_value(end.value, "linux,initrd-end")?;
    if end < start {
        return Err(PlatformError::BadProperty("linux,initrd-end"));
    }
    Ok(Some(PhysRange { base: start, size: end - start }))
}

/// The board as the hypervisor's banner shows it, a line per device: memory, CPUs, GIC,
/// UART, PSCI conduit, timer interrupts and the boot bundle.
impl fmt::Display for Platform<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let none = PhysRange { base: 0, size: 0 };
        for m in &self.memory {
            writeln!(f, "  memory      {m} ({} MiB)", m.size >> 20)?;
        }
        let left_off = if self.cpus_left_off > 0 { " and some left off" } else { "" };
        writeln!(f, "  cpus        {} (MPIDR {:x?}){left_off}", self.cpus.len(), self.cpus.as_slice())?;
        let gic = &self.gic;
        match gic.version {
            GicVersion::V3 => writeln!(
                f,
                "  gic         GICv3: GICD {} GICR {}",
                gic.distributor,
                gic.redistributors.unwrap_or(none)
            )?,
            GicVersion::V2 => writeln!(
                f,
                "  gic         GICv2: GICD {} GICC {} GICH {} GICV {}",
                gic.distributor,
                gic.cpu_interface.unwrap_or(none),
                gic.hyp_interface.unwrap_or(none),
                gic.virtual_cpu_interface.unwrap_or(none)
            )?,
        }
        if let Some(intid) = gic.maintenance_intid {
            writeln!(f, "              maintenance interrupt INTID {intid}")?;
        }
        match self.uart_intid {
            Some(intid) => writeln!(f, "  uart        PL011 at {}, INTID {intid}", self.uart)?,
            None => writeln!(f, "  uart        PL011 at {}, no interrupt (no console input)", self.uart)?,
        }
        let t = self.timer;
        writeln!(
            f,
            "  timer       INTIDs: EL1 physical {}, virtual {}, EL2 physical {}, secure physical {}",
            t.nonsecure_physical, t.virtual_timer, t.hyp_physical, t.secure_physical
        )?;
        match self.initrd {
            Some(r) => write!(f, "  boot bundle {r}"),
            None => write!(f, "  boot bundle none"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIRT_GICV3: &[u8] = include_bytes!("../tests/data/qemu-virt-gicv3-smp4.dtb");
    const VIRT_GICV2: &[u8] = include_bytes!("../tests/data/qemu-virt-gicv2-smp2.dtb");

    /// QEMU's 32-bit `virt` without `virtualization=on` (a kernel entered in SVC mode): its
    /// GIC has no virtualization frames, but its console is there to say so on.
    #[test]
    fn a_board_without_virtualization_still_names_its_console() {
        let dtb = include_bytes!("../tests/data/qemu-virt-arm-svc.dtb");
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

    /// A board like the Raspberry Pi 4: no /psci, its CPUs released from spin tables, a
    /// GIC-400 (the compatible, frames and cells of Documentation/devicetree/bindings/
    /// interrupt-controller/arm,gic.yaml; the root's interrupt parent), a PL011.
    fn spin_table_board() -> std::vec::Vec<u8> {
        let mut fdt = vm_fdt::FdtWriter::new().unwrap();
        let root = fdt.begin_node("").unwrap();
        fdt.property_string("model", "Raspberry Pi 4 Model B").unwrap();
        fdt.property_u32("interrupt-parent", 1).unwrap();
        fdt.property_u32("#address-cells", 2).unwrap();
        fdt.property_u32("#size-cells", 1).unwrap();
        let memory = fdt.begin_node("memory@0").unwrap();
        fdt.property_string("device_type", "memory").unwrap();
        fdt.property_array_u32("reg", &[0, 0, 0x3b40_0000]).unwrap();
        fdt.end_node(memory).unwrap();
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
        let gic = fdt.begin_node("interrupt-controller@ff841000").unwrap();
        fdt.property_string("compatible", "arm,gic-400").unwrap();
        fdt.property_u32("#interrupt-cells", 3).unwrap();
        fdt.property_null("interrupt-controller").unwrap();
        fdt.property_u32("phandle", 1).unwrap();
        let frames = [0xff84_1000u32, 0x1000, 0xff84_2000, 0x2000, 0xff84_4000, 0x2000, 0xff84_6000, 0x2000];
        let reg: std::vec::Vec<u32> = frames.chunks(2).flat_map(|f| [0, f[0], f[1]]).collect();
        fdt.property_array_u32("reg", &reg).unwrap();
        fdt.property_array_u32("interrupts", &[1, 9, 0xf04]).unwrap();
        fdt.end_node(gic).unwrap();
        let uart = fdt.begin_node("serial@fe201000").unwrap();
        fdt.property_string("compatible", "arm,pl011").unwrap();
        fdt.property_array_u32("reg", &[0, 0xfe20_1000, 0x200]).unwrap();
        fdt.property_array_u32("interrupts", &[0, 121, 4]).unwrap();
        fdt.end_node(uart).unwrap();
        let timer = fdt.begin_node("timer").unwrap();
        fdt.property_string("compatible", "arm,armv8-timer").unwrap();
        fdt.property_array_u32("interrupts", &[1, 13, 0xf08, 1, 14, 0xf08, 1, 11, 0xf08, 1, 10, 0xf08]).unwrap();
        fdt.end_node(timer).unwrap();
        fdt.end_node(root).unwrap();
        fdt.finish().unwrap()
    }

    #[test]
    fn a_board_without_psci_has_its_cpus_started_from_spin_tables() {
        let blob = spin_table_board();
        let p = Platform::from_device_tree(&blob).unwrap();
        assert_eq!(p.psci, None);
        assert_eq!(p.cpus.as_slice(), &[0, 1, 2, 3]);
        let releases: std::vec::Vec<CpuStart> = (0..4).map(|n| CpuStart::SpinTable { release: 0xd8 + 8 * n }).collect();
        assert_eq!(p.cpu_start.as_slice(), releases.as_slice());
        assert_eq!(p.gic.version, GicVersion::V2);
        assert_eq!(p.gic.hyp_interface, Some(PhysRange { base: 0xff84_4000, size: 0x2000 }));
        assert_eq!(p.uart, PhysRange { base: 0xfe20_1000, size: 0x200 });
        assert_eq!(p.uart_intid, Some(153));
        assert!(p.virtio_mmio.is_empty());
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
        assert!(banner.contains("  uart        PL011 at 0x1c090000..0x1c091000, INTID 37\n"), "{banner}");
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
        assert_eq!(lines[4], "  uart        PL011 at 0x9000000..0x9001000, INTID 33");
        assert_eq!(lines[5], "  timer       INTIDs: EL1 physical 30, virtual 27, EL2 physical 26, secure physical 29");
        assert_eq!(lines[6], "  boot bundle none");
    }

    #[test]
    fn garbage_is_not_a_device_tree() {
        assert_eq!(
            Platform::from_device_tree(&[0u8; 64]).unwrap_err(),
            PlatformError::NotADeviceTree(FdtError::BadMagic)
        );
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
}
