//! The board as the device tree describes it: memory, CPUs and how each starts (PSCI or a
//! spin table, and what a spin table's release address must be), GIC, UART (and whether it
//! is the one `/chosen/stdout-path` names), PSCI conduit, a power controller for boards
//! without PSCI, timer interrupts, reserved memory and the initrd. Nothing here is
//! hard-coded for a board; the hypervisor discovers one platform at run time
//! (docs/architecture.md, "One image per architecture").
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
    /// A GICv3's first ITS (its control and translation frames), if the board has one: the
    /// hypervisor's own, never a guest's (docs/vgic.md, "Direct injection of LPIs").
    pub its: Option<PhysRange>,
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

/// Why a CPU cannot be released from its spin table: the hypervisor writes the release
/// address through its identity map of RAM, and the waiting CPU reads it as one 64-bit word
/// (Documentation/arch/arm64/booting.rst, "spin-table").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SpinTableError {
    /// The release address is not 8-byte aligned: no CPU waits on such a word.
    Misaligned(u64),
    /// The release address lies in no `/memory` range: the hypervisor maps only RAM as memory,
    /// so it cannot write there.
    OutsideRam(u64),
}

impl fmt::Display for SpinTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Misaligned(a) => {
                write!(f, "its cpu-release-addr {a:#x} is not 8-byte aligned; fix the device tree's CPU node")
            }
            Self::OutsideRam(a) => write!(
                f,
                "its cpu-release-addr {a:#x} is in no /memory range, where the hypervisor could write it; \
                 fix the device tree's CPU or memory nodes"
            ),
        }
    }
}

/// Which UART the hypervisor's console is, and why: the device tree's `/chosen/stdout-path`
/// names the console the firmware chose, and the hypervisor drives a PL011 only.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ConsoleSource<'a> {
    /// The PL011 `stdout-path` names.
    StdoutPath,
    /// The first enabled PL011: the tree has no `stdout-path`.
    FirstPl011,
    /// The first enabled PL011, because `stdout-path` (`path`, as written) names a node
    /// (`node`, whose first compatible is `compatible`) that is not an enabled PL011, such as
    /// the Raspberry Pi's mini UART.
    StdoutNotPl011 { path: &'a str, node: &'a str, compatible: &'a str },
    /// The first enabled PL011, because `stdout-path` (`path`) names no node of the tree.
    StdoutUnresolved { path: &'a str },
}

impl fmt::Display for ConsoleSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StdoutPath => write!(f, "stdout-path"),
            Self::FirstPl011 => write!(f, "the first PL011: no stdout-path"),
            Self::StdoutNotPl011 { path, node, compatible } => write!(
                f,
                "the first PL011: stdout-path \"{path}\" names {node} ({compatible}), not an enabled PL011 \
                 this hypervisor drives"
            ),
            Self::StdoutUnresolved { path } => {
                write!(f, "the first PL011: stdout-path \"{path}\" names no node of the device tree")
            }
        }
    }
}

/// A board's own power controller, which stops the machine when the firmware has no PSCI.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PowerController {
    /// The BCM2835 power manager (the Raspberry Pi's; `brcm,bcm2835-pm-wdt`,
    /// `brcm,bcm2835-pm`, `brcm,bcm2711-pm`): its watchdog halts the machine
    /// (crate::bcm2835_pm). `registers` is its `pm` window.
    Bcm2835Pm { registers: PhysRange },
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
    /// Why `uart` is the console: the one stdout-path names, or the first PL011 and why.
    pub console_source: ConsoleSource<'a>,
    /// The UART's interrupt (its receive interrupt brings console input), if the device
    /// tree gives one that reaches the GIC: through the interrupt tree, as a Versatile
    /// Express's motherboard gives its UARTs' through its bus's `interrupt-map`.
    pub uart_intid: Option<u32>,
    /// The `/psci` node's conduit; none on a board whose firmware has no PSCI (its CPUs start
    /// by a spin table, and it cannot be powered off).
    pub psci: Option<PsciConduit>,
    /// The board's power controller, if the device tree names one the hypervisor drives.
    pub power_controller: Option<PowerController>,
    pub timer: TimerInterrupts,
    /// `/memreserve/` entries and the enabled `/reserved-memory` children with a `reg`:
    /// never given to a VM.
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
        // A child without `reg` (a `size` and `alloc-ranges`, as Linux's CMA pool) asks the
        // operating system to set memory aside from wherever it likes: the hypervisor sets
        // none aside, so nothing is kept. A disabled child reserves nothing (reserved-memory.yaml).
        if let Some(node) = fdt.find_node("/reserved-memory") {
            for child in node.children().filter(Node::is_enabled) {
                for range in regs(child).filter(|r| r.size > 0) {
                    reserved.push(range).map_err(|_| PlatformError::TooManyRanges("reserved memory"))?;
                }
            }
        }
        let (cpus, cpu_start, cpus_left_off) = cpus(&fdt)?;
        let (gic_node, gic_version) = gic_node(&fdt)?;
        let (uart_node, console_source) = uart(&fdt)?;
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
            console_source,
            psci: psci(&fdt)?,
            power_controller: power_controller(&fdt),
            timer: timer(&fdt, gic_node)?,
            reserved,
            initrd: initrd(&fdt)?,
            virtio_mmio: virtio_mmio(&fdt, gic_node),
            rng_seed: fdt.find_node("/chosen").and_then(|c| c.property("rng-seed")).map(|p| p.value),
        })
    }
}

impl Platform<'_> {
    /// Checks that CPU release address `release` is one the hypervisor can write and a CPU
    /// can wait on: 8-byte aligned, in RAM.
    pub fn check_release_address(&self, release: u64) -> Result<(), SpinTableError> {
        if !release.is_multiple_of(8) {
            return Err(SpinTableError::Misaligned(release));
        }
        let word = PhysRange { base: release, size: 8 };
        if !self.memory.iter().any(|m| m.base <= word.base && word.end() <= m.end()) {
            return Err(SpinTableError::OutsideRam(release));
        }
        Ok(())
    }

    /// Memory that is not the hypervisor's to give out: the reserved ranges, and each spin
    /// table's release word. A CPU waiting in its spin table reads that word until it is
    /// released, and jumps to whatever it finds there that is not zero, so the heap or a VM
    /// must never be given it, even where the device tree forgot to reserve it.
    pub fn firmware_memory(&self) -> FixedVec<PhysRange, { MAX_RESERVED_RANGES + MAX_CPUS }> {
        let release_words = self.cpu_start.iter().filter_map(|s| match s {
            CpuStart::SpinTable { release } => Some(PhysRange { base: *release, size: 8 }),
            _ => None,
        });
        // At most MAX_RESERVED_RANGES and MAX_CPUS of each: all fit.
        self.reserved.iter().copied().chain(release_words).collect()
    }
}

/// The board's console alone (its PL011), from a device tree the rest of which may not
/// describe a board the hypervisor can use: where to say why it stops.
pub fn console_uart(blob: &[u8]) -> Option<PhysRange> {
    uart(&Fdt::new(blob).ok()?).ok().and_then(|(node, _)| regs(node).next())
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
                its: its(node),
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
                its: None,
            }
        }
    };
    Ok(gic)
}

/// The first enabled ITS under a GICv3's node
/// (Documentation/devicetree/bindings/interrupt-controller/arm,gic-v3.yaml: a child
/// `arm,gic-v3-its` whose first `reg` holds its two 64 KiB frames).
fn its(gic: Node<'_>) -> Option<PhysRange> {
    gic.children()
        .filter(|n| n.is_enabled() && n.compatible().any(|c| c == "arm,gic-v3-its"))
        .find_map(|n| regs(n).next())
}

/// The console's node: the PL011 the loader chose (`stdout-path`), if it is one; otherwise
/// the first PL011, and why.
fn uart<'a>(fdt: &Fdt<'a>) -> Result<(Node<'a>, ConsoleSource<'a>), PlatformError> {
    let is_pl011 = |n: &Node<'_>| n.compatible().any(|s| s == "arm,pl011") && n.is_enabled();
    let path = fdt
        .find_node("/chosen")
        .and_then(|c| c.property("stdout-path").or_else(|| c.property("linux,stdout-path")))
        .and_then(|p| p.as_str());
    let (node, source) = match (path, fdt.stdout()) {
        (_, Some(stdout)) if is_pl011(&stdout) => (stdout, ConsoleSource::StdoutPath),
        (Some(path), Some(stdout)) => {
            let compatible = stdout.compatible().next().unwrap_or("no compatible");
            let first = fdt.all_nodes().find(is_pl011).ok_or(PlatformError::NoUart)?;
            (first, ConsoleSource::StdoutNotPl011 { path, node: stdout.name, compatible })
        }
        (Some(path), None) => {
            (fdt.all_nodes().find(is_pl011).ok_or(PlatformError::NoUart)?, ConsoleSource::StdoutUnresolved { path })
        }
        (None, _) => (fdt.all_nodes().find(is_pl011).ok_or(PlatformError::NoUart)?, ConsoleSource::FirstPl011),
    };
    Ok((node, source))
}

/// The compatibles of the BCM2835 power manager, whose first `reg` window is its `pm` block
/// (Documentation/devicetree/bindings/soc/bcm/brcm,bcm2835-pm.yaml, and the older
/// watchdog/brcm,bcm2835-pm-wdog.txt).
const BCM2835_PM_COMPATIBLES: &[&str] = &["brcm,bcm2835-pm-wdt", "brcm,bcm2835-pm", "brcm,bcm2711-pm"];

fn power_controller(fdt: &Fdt<'_>) -> Option<PowerController> {
    let node =
        fdt.all_nodes().find(|n| n.is_enabled() && n.compatible().any(|c| BCM2835_PM_COMPATIBLES.contains(&c)))?;
    regs(node).next().map(|registers| PowerController::Bcm2835Pm { registers })
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
            Some(intid) => {
                writeln!(f, "  uart        PL011 at {} ({}), INTID {intid}", self.uart, self.console_source)?
            }
            None => writeln!(
                f,
                "  uart        PL011 at {} ({}), no interrupt (no console input)",
                self.uart, self.console_source
            )?,
        }
        if let Some(PowerController::Bcm2835Pm { registers }) = self.power_controller {
            writeln!(f, "  power       BCM2835 power manager at {registers} (its watchdog can halt the machine)")?;
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
mod tests;
