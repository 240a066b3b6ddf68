//! `cargo xtask bench`: the hypervisor's costs in instructions (`-icount shift=0`), next to
//! the same guest run directly on QEMU without it: microbenchmarks, the Linux boot and a
//! CPU-bound workload, virtio throughput, and the hypervisor's exits per second by reason
//! during each Linux workload. Prints tables and writes `target/bench/`: `micro.json`,
//! `macro.json`, `io.json`, `exits.json` and the chart `ratios.svg`. Every run boots the
//! hypervisor with the test hooks (the microbenchmarks end with its semihosting exit), so
//! all the figures are of one image; the hooks act only when a bundle asks for them, and
//! the Linux benchmarks' bundles do not. `--arch armv7` measures the ARMv7 image (which has
//! no test hooks) instead: the 32-bit guest's microbenchmarks (`micro-armv7.json`) and its
//! Linux boot; `--board raspi4b` the Linux boot on QEMU's Raspberry Pi 4B (`rpi4`).

pub mod a32;
pub mod a64;
pub mod chart;
pub mod exits;
pub mod io_cost;
pub mod io_trace;
pub mod rpi4;
pub mod scale;
pub mod trace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use self::chart::{Bar, Target};
use self::exits::{ExitSnapshot, WorkloadExits};
use crate::bundle::{self, BundleOptions, VmDevices, VmEntry};
use crate::images::{self, Hypervisor};
use crate::linux_guest;
use crate::qemu::{self, Machine};
use crate::util::step;
use crate::XtaskError;

const TIMEOUT: Duration = Duration::from_secs(300);

/// Instructions per operation, by benchmark, with the measuring overhead subtracted.
pub type Figures = BTreeMap<String, f64>;

/// The microbench guest's lines: `bench NAME iterations=N ns=T` (a loop of N operations;
/// the empty `loop` is subtracted) and `latency NAME samples=N ns=T` (N intervals between
/// two counter reads; two reads back to back, `counter`, are subtracted).
pub fn parse(console: &str) -> Figures {
    let mut loops = BTreeMap::new();
    let mut intervals = BTreeMap::new();
    for line in console.lines() {
        for (kind, figures) in [("bench ", &mut loops), ("latency ", &mut intervals)] {
            let Some((_, rest)) = line.rsplit_once(kind) else { continue };
            let mut words = rest.split_whitespace();
            let (Some(name), Some(n), Some(ns)) = (words.next(), words.next(), words.next()) else { continue };
            let value = |word: &str| word.split_once('=').and_then(|(_, v)| v.parse::<f64>().ok());
            if let (Some(n), Some(ns)) = (value(n), ns.strip_prefix("ns=").and_then(|v| v.parse::<f64>().ok())) {
                if n > 0.0 {
                    figures.insert(name.to_string(), ns / n);
                }
            }
        }
    }
    let mut figures = Figures::new();
    for (measured, overhead) in [(loops, "loop"), (intervals, "counter")] {
        let base = measured.get(overhead).copied().unwrap_or(0.0);
        figures.extend(measured.into_iter().filter(|(n, _)| n != overhead).map(|(n, v)| (n, (v - base).max(0.0))));
    }
    figures
}

/// Targets from the fast-paths issue, in instructions (the benchmark issue's before it:
/// 150, 300 and 1,100); a `/gicv2` row is the same benchmark on the GICv2 board
/// (`GICV2_SUFFIX`).
fn target(name: &str) -> Option<f64> {
    match name {
        "hvc-unknown" | "hvc-smccc-version" => Some(60.0),
        "mmio-read" | "virtio-read" | "virtio-write" | "gicd-read" => Some(150.0),
        "virtual-ipi" => Some(600.0),
        "virtual-ipi-round-trip" => Some(900.0),
        "virtual-ipi-round-trip/gicv2" => Some(700.0),
        "vtimer-periodic" => Some(500.0),
        _ => None,
    }
}

/// The rows the GICv2 board adds, each named with this suffix: the virtual IPI one way and
/// round trip, the periodic timer, and the WFI between its ticks that the hypervisor
/// returns from without one (a pinned vCPU's on a GICv2, docs/vgic.md; the rest of the
/// guest's figures do not depend on the GIC, or are the same path as on GICv3: their GICv2
/// figures are not reported).
pub const GICV2_SUFFIX: &str = "/gicv2";
const GICV2_ROWS: &[&str] = &["virtual-ipi", "virtual-ipi-round-trip", "vtimer-periodic", "vtimer-periodic-wake"];

/// `into` with the GICV2_ROWS of `gicv2`, each named with GICV2_SUFFIX.
pub fn add_gicv2(into: &mut Figures, gicv2: &Figures) {
    for name in GICV2_ROWS {
        if let Some(v) = gicv2.get(*name) {
            into.insert(format!("{name}{GICV2_SUFFIX}"), *v);
        }
    }
}

/// The periodic timer's line `microbench: periodic ticks=N wakes=W`: (N, W). A wake-up of
/// vCPU 0's WFI that was not a tick is work of the hypervisor's between ticks, which the
/// per-tick window (deadline to the handler's return) does not see.
pub fn periodic_wakes(console: &str) -> Option<(u64, u64)> {
    console.lines().find_map(|line| {
        let rest = line.split_once("microbench: periodic ")?.1;
        let mut words = rest.split_whitespace();
        let ticks = words.next()?.strip_prefix("ticks=")?.parse().ok()?;
        let wakes = words.next()?.strip_prefix("wakes=")?.parse().ok()?;
        Some((ticks, wakes))
    })
}

/// Targets from the ARMv7 issue for the 32-bit guest under the ARMv7 image, in instructions.
fn target_armv7(name: &str) -> Option<f64> {
    match name {
        "hvc-unknown" | "hvc-smccc-version" => Some(200.0),
        "mmio-read" | "virtio-read" | "virtio-write" | "gicd-read" => Some(350.0),
        _ => None,
    }
}

/// Runs a microbenchmark guest, which prints `done` when it has printed every figure.
fn run(
    what: &str,
    machine: Machine,
    kernel: &PathBuf,
    initrd: Option<&PathBuf>,
    done: &str,
) -> Result<Figures, XtaskError> {
    step(&format!("running the microbenchmarks {what} (-icount shift=0)"));
    let mut cmd = machine.command(kernel, initrd);
    if initrd.is_none() {
        cmd.arg("-append").arg("");
    }
    let out = qemu::run_captured(cmd, TIMEOUT, false)?;
    if out.timed_out || out.status != Some(0) || !out.console.contains(done) {
        return Err(XtaskError::Failed(format!(
            "microbenchmarks {what} did not complete (status {:?}):\n{}",
            out.status, out.console
        )));
    }
    if let Some((ticks, wakes)) = periodic_wakes(&out.console).filter(|(t, w)| w > t) {
        step(&format!(
            "  note: vCPU 0 woke {wakes} times from WFI for {ticks} periodic ticks: the hypervisor's work at the \
             other wake-ups is not in vtimer-periodic (it is vtimer-periodic-wake)"
        ));
    }
    Ok(parse(&out.console))
}

/// A microbenchmark guest's VM: 2 vCPUs, 64 MiB, no devices.
fn microbench_vm(name: &str, guest: &Path) -> VmEntry {
    VmEntry {
        name: name.into(),
        vcpus: 2,
        memory: 64 << 20,
        kernel: guest.to_path_buf(),
        initrd: None,
        bootargs: None,
        device_tree: None,
        devices: VmDevices::default(),
    }
}

pub fn micro() -> Result<(Figures, Figures), XtaskError> {
    let hyp = images::build_hypervisor(Hypervisor::TestHooks)?;
    let guest = images::build_test_guest("microbench")?;
    let vm = microbench_vm("microbench", &guest);
    let bundle_path =
        bundle::write_file("microbench", &[vm], &BundleOptions { semihosting_exit: true, test_el2_fault: None })?;
    let machine = Machine { smp: 2, icount: true, semihosting: true, ..Machine::default() };
    let done = "microbench: done";
    let mut under = run("under the hypervisor", machine.clone(), &hyp, Some(&bundle_path), done)?;
    let native_machine = Machine { virtualization: false, semihosting: false, ..machine.clone() };
    let mut native = run("directly on QEMU", native_machine.clone(), &guest, None, done)?;
    // The same guest on the GICv2 board: the hypervisor gives the VM a GICv2 (its CPU
    // interface the GICV frame), QEMU the guest its GICv2.
    let v2 = |m: Machine| Machine { gic_version: 2, ..m };
    let under_v2 = run("under the hypervisor, GICv2", v2(machine), &hyp, Some(&bundle_path), done)?;
    let native_v2 = run("directly on QEMU, GICv2", v2(native_machine), &guest, None, done)?;
    add_gicv2(&mut under, &under_v2);
    add_gicv2(&mut native, &native_v2);
    Ok((under, native))
}

/// The 32-bit microbenchmarks (`microbench32`, an AArch32 guest in SVC mode): under the
/// ARMv7 image in HYP mode, 2 vCPUs pinned on 2 CPUs, and directly on QEMU, which then
/// enters the same zImage in SVC mode and answers PSCI over HVC itself; the same `virt`
/// board with Cortex-A15s and a GICv2 (`qemu-system-arm`), `-icount shift=0`.
pub fn micro_armv7() -> Result<(Figures, Figures), XtaskError> {
    let hyp = images::build_hypervisor_armv7()?;
    let guest = images::build_test_guest32("microbench32")?;
    let vm = microbench_vm("microbench32", &guest);
    // No test hooks on the ARMv7 image: the guest's PSCI SYSTEM_OFF ends the run, status 0.
    let bundle_path = bundle::write_file("microbench32", &[vm], &BundleOptions::default())?;
    let machine = armv7_board(2);
    let done = "microbench32: done";
    let under = run("of the 32-bit guest under the ARMv7 hypervisor", machine.clone(), &hyp, Some(&bundle_path), done)?;
    let native = run(
        "of the 32-bit guest directly on QEMU (qemu-system-arm, SVC mode)",
        Machine { virtualization: false, ..machine },
        &guest,
        None,
        done,
    )?;
    Ok((under, native))
}

/// QEMU `virt` with `smp` Cortex-A15s and a GICv2, below 4 GiB (`qemu-system-arm`),
/// counting instructions: the board of the ARMv7 benchmarks.
pub(crate) fn armv7_board(smp: u32) -> Machine {
    Machine {
        arch: qemu::Arch::Armv7,
        cpu: "cortex-a15".into(),
        gic_version: 2,
        smp,
        icount: true,
        ..Machine::default()
    }
}

/// The Debian guest as every Linux benchmark runs it: 2 vCPUs, 512 MiB.
fn linux_vm(linux: &linux_guest::LinuxGuest, bootargs: &str, devices: VmDevices) -> VmEntry {
    VmEntry {
        name: LINUX_VM.into(),
        vcpus: 2,
        memory: 512 << 20,
        kernel: linux.kernel.clone(),
        initrd: Some(linux.initrd.clone()),
        bootargs: Some(bootargs.into()),
        device_tree: None,
        devices,
    }
}

/// The benchmarks' Linux VM's name: its console lines say `linux | `, the management
/// console's `list` `vm0 linux: `.
const LINUX_VM: &str = "linux";
/// The guest shell's prompt (BusyBox ash as root).
const PROMPT: &str = "/ # ";
/// The longest a Linux benchmark run may take, from QEMU's start to its end (each wait
/// inside it is bounded by TIMEOUT too).
const RUN_LIMIT: Duration = Duration::from_secs(1200);
/// The `clock` of a workload timed in virtual time under `-icount shift=0`.
const VIRTUAL_CLOCK: &str = "virtual (-icount shift=0: instructions / 1e9)";

/// Ratio targets from the benchmark issue (the ARMv7 and Raspberry Pi 4 boots keep the
/// boot's).
pub const BOOT_TARGET: Target = Target::AtMost(1.05);
pub const SHA256_TARGET: Target = Target::AtMost(1.01);
pub const IO_TARGET: Target = Target::AtLeast(0.8);
/// The AArch64 Linux runs' targets since the fast-paths issue (21): the boot within 0.5%,
/// sha256sum held within 0.05%.
pub const FAST_PATHS_BOOT_TARGET: Target = Target::AtMost(1.005);
pub const FAST_PATHS_SHA256_TARGET: Target = Target::AtMost(1.0005);
/// The side-core issue's: throughput at least 0.95 of QEMU's devices given to the guest.
pub const SIDE_CORE_TARGET: Target = Target::AtLeast(0.95);

/// The CPU-bound workload: `sha256sum` of a file of SHA256_MIB MiB of zeros in the guest's
/// tmpfs `/tmp` (RAM: no device is involved).
const SHA256_FILE: &str = "/tmp/f";
const SHA256_MIB: usize = 64;
/// SHA-256 of 64 MiB of zero bytes (`head -c 64M /dev/zero | sha256sum`): checks that the
/// guest computed the whole digest.
const SHA256_OF_ZEROS: &str = "3b6a07d0d404fab4e23b6d34bc6696a6a312dd92821332385e5af7c01c421351";

/// A figure measured under the hypervisor and directly on QEMU.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    pub under: f64,
    pub native: f64,
}

impl Pair {
    pub fn ratio(&self) -> f64 {
        self.under / self.native
    }
}

/// The Linux figures in instructions (`-icount shift=0`), and the hypervisor's exits during
/// them.
#[derive(Clone, Debug)]
pub struct MacroFigures {
    /// From QEMU's start until the guest's shell is ready.
    pub boot: Pair,
    /// `sha256sum` of the file in tmpfs, less `overhead`.
    pub sha256: Pair,
    /// Reading the counter around an empty command (`:`), subtracted from `sha256`.
    pub overhead: Pair,
    /// Whether the guest's CRNG was seeded when the workload ran (under the hypervisor,
    /// directly on QEMU): see `crng_ready`.
    pub crng_ready: (bool, bool),
    /// Exits by reason under the hypervisor: the boot and the sha256sum.
    pub exits: Vec<WorkloadExits>,
}

/// The Linux boot to its shell and then the CPU-bound workload, in one boot, under the
/// hypervisor (2 vCPUs on 2 CPUs) and directly on QEMU (2 CPUs), same kernel, initramfs
/// and command line, with `-icount shift=0`. See `boot` for how the boot is timed; the
/// workload is timed by `/bin/cntvct` around it.
pub fn linux_macro() -> Result<MacroFigures, XtaskError> {
    let hyp = images::build_hypervisor(Hypervisor::TestHooks)?;
    let linux = linux_guest::debian_arm64()?;
    let vm = linux_vm(&linux, linux_guest::BOOTARGS, VmDevices::default());
    let bundle_path = bundle::write_file("linux-macro-bench", &[vm], &BundleOptions::default())?;
    let machine = Machine { smp: 2, icount: true, ..Machine::default() };
    step(&format!(
        "booting Linux to its shell, then sha256sum of {SHA256_MIB} MiB in tmpfs, under the hypervisor \
         (-icount shift=0)"
    ));
    let under = macro_run(machine.command(&hyp, Some(&bundle_path)), true)?;
    step(&format!(
        "booting Linux to its shell, then sha256sum of {SHA256_MIB} MiB in tmpfs, directly on QEMU (-icount shift=0)"
    ));
    let mut cmd =
        Machine { virtualization: false, memory_mib: 512, ..machine }.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(linux_guest::BOOTARGS);
    let native = macro_run(cmd, false)?;
    Ok(MacroFigures {
        boot: Pair { under: under.boot, native: native.boot },
        sha256: Pair { under: under.sha256, native: native.sha256 },
        overhead: Pair { under: under.overhead, native: native.overhead },
        crng_ready: (under.crng_ready, native.crng_ready),
        exits: under.exits,
    })
}

/// The 32-bit boots, in instructions (`-icount shift=0`): Debian's armhf kernel and
/// initramfs to its shell under the ARMv7 hypervisor in HYP mode and directly on QEMU, on
/// the same `virt` board with Cortex-A15s and a GICv2, timed as `linux_macro` times the
/// arm64 boot (the VM's virtual count at the shell plus its offset, at the counter
/// frequency its kernel logs).
///
/// On one CPU with one vCPU: with 2 the figure is mostly waiting. Under `-icount` QEMU
/// runs the CPUs in turn, and 32-bit Linux's `cpu_relax()` is no YIELD (arm64's is, and
/// QEMU moves to the next CPU on it), so each `stop_machine` (two when the kernel frees its
/// init memory and makes its text read-only) spins through whole turns: about 55,000 M
/// instructions to the shell against about 3,500 M with 1 CPU (Debian's 6.1.0-50-armmp;
/// the kernel reports a soft lockup in `multi_cpu_stop`).
pub fn linux_boot_armv7() -> Result<Pair, XtaskError> {
    let hyp = images::build_hypervisor_armv7()?;
    let linux = linux_guest::debian_armhf()?;
    let vm = VmEntry { vcpus: 1, ..linux_vm(&linux, linux_guest::BOOTARGS, VmDevices::default()) };
    let bundle_path = bundle::write_file("linux-armv7-bench", &[vm], &BundleOptions::default())?;
    let board = armv7_board(1);
    step("booting the armhf guest to its shell under the ARMv7 hypervisor (1 vCPU, 1 CPU, -icount shift=0)");
    let under = boot_instructions(board.command(&hyp, Some(&bundle_path)), true)?;
    step("booting the armhf guest to its shell directly on QEMU (1 CPU, GICv2, -icount shift=0)");
    let native = Machine { virtualization: false, memory_mib: 512, ..board };
    let mut cmd = native.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(linux_guest::BOOTARGS);
    Ok(Pair { under, native: boot_instructions(cmd, false)? })
}

/// Instructions from QEMU's start until the guest's shell is ready (`boot`); the guest is
/// powered off after.
fn boot_instructions(cmd: std::process::Command, hypervisor: bool) -> Result<f64, XtaskError> {
    let b = boot(cmd, hypervisor)?;
    let instructions = (b.offset_ticks + b.vm_ticks) * 1e9 / b.hz;
    b.shell.power_off();
    Ok(instructions)
}

/// The ARMv7 table: the 32-bit Linux boot beside the same boot without the hypervisor.
pub fn armv7_report(boot: &Pair) -> String {
    boot_table("ARMv7 (HYP mode, Cortex-A15, GICv2; instructions)", boot)
}

/// A board's table of one row: its Linux boot to the shell, with and without the
/// hypervisor, against the boot target.
pub(crate) fn boot_table(title: &str, boot: &Pair) -> String {
    let ratio = boot.ratio();
    format!(
        "{title}\n{:<24} {:>12} {:>12} {:>8} {:>8} {:>5}\n\
         {:<24} {:>11.1}M {:>11.1}M {ratio:>8.4} {:>8} {:>5}\n",
        "",
        "hypervisor",
        "no hyp.",
        "ratio",
        "target",
        "met",
        "Linux boot to shell",
        boot.under / 1e6,
        boot.native / 1e6,
        target_text(BOOT_TARGET),
        met(BOOT_TARGET, ratio)
    )
}

/// One run's figures in instructions.
struct MacroRun {
    boot: f64,
    sha256: f64,
    overhead: f64,
    crng_ready: bool,
    exits: Vec<WorkloadExits>,
}

/// Whether the guest kernel's random number generator was seeded before the workload
/// (`crng-ready N`: N lines `random: crng init done` in its log). Unseeded, every
/// `get_random_*` of the kernel takes the slow path, and Linux takes one per system call
/// (the kernel stack offset is randomised on each): about 9,000 instructions more per call
/// on this kernel. Both sides seed it (`rng-seed` in the device tree: QEMU's, or the one the
/// hypervisor writes for each VM, docs/entropy.md); a difference is reported.
fn crng_ready(output: &str) -> Result<bool, XtaskError> {
    output
        .lines()
        .find_map(|l| strip_vm_name(l).strip_prefix("crng-ready ").and_then(|n| n.trim().parse::<u32>().ok()))
        .map(|n| n > 0)
        .ok_or_else(|| XtaskError::Failed(format!("the guest did not say whether its CRNG is seeded:\n{output}")))
}

fn macro_run(cmd: std::process::Command, hypervisor: bool) -> Result<MacroRun, XtaskError> {
    let mut b = boot(cmd, hypervisor)?;
    let hz = b.hz;
    let instructions = |ticks: f64| ticks * 1e9 / hz;
    let mut exits = Vec::new();
    if hypervisor {
        step(&format!(
            "  {:.0}M instructions before the VM was created, {:.0}M in the VM to its shell",
            instructions(b.offset_ticks) / 1e6,
            instructions(b.vm_ticks) / 1e6
        ));
        // The VM's counts since its creation, at its shell prompt.
        let at_shell = b.shell.exits(None)?;
        exits.push(WorkloadExits {
            workload: "boot".into(),
            clock: VIRTUAL_CLOCK,
            seconds: b.vm_ticks / hz,
            exits: at_shell,
        });
    }
    let file = b.shell.run(&format!(
        "grep ' /tmp ' /proc/mounts; echo crng-ready $(dmesg | grep -c 'random: crng init done'); \
         dd if=/dev/zero of={SHA256_FILE} bs=1M count={SHA256_MIB} 2>/dev/null; wc -c < {SHA256_FILE}"
    ))?;
    let crng_ready = crng_ready(&file)?;
    if !file.lines().any(|l| strip_vm_name(l).starts_with("tmpfs /tmp tmpfs")) {
        return Err(XtaskError::Failed(format!(
            "/tmp is not a tmpfs in the guest (see RCS in xtask/src/linux_guest.rs):\n{file}"
        )));
    }
    if !file.lines().any(|l| strip_vm_name(l) == (SHA256_MIB << 20).to_string()) {
        return Err(XtaskError::Failed(format!(
            "the guest could not write {SHA256_MIB} MiB to {SHA256_FILE}:\n{file}"
        )));
    }
    let (out, _) = b.shell.measured(&timed(":"), false)?;
    let overhead = guest_ticks(&out)?;
    let (out, window) = b.shell.measured(&timed(&format!("sha256sum {SHA256_FILE}")), hypervisor)?;
    let ticks = guest_ticks(&out)?;
    match sha256_digest(&out) {
        Some(d) if d == SHA256_OF_ZEROS => {}
        other => {
            return Err(XtaskError::Failed(format!(
                "sha256sum in the guest gave {other:?}, not the digest of {SHA256_MIB} MiB of zeros:\n{out}"
            )))
        }
    }
    if let Some(window) = window {
        exits.push(WorkloadExits {
            workload: "sha256sum".into(),
            clock: VIRTUAL_CLOCK,
            seconds: ticks / hz,
            exits: window,
        });
    }
    b.shell.power_off();
    Ok(MacroRun {
        boot: instructions(b.offset_ticks + b.vm_ticks),
        sha256: instructions(ticks - overhead),
        overhead: instructions(overhead),
        crng_ready,
        exits,
    })
}

/// A Linux guest at its shell prompt.
struct Booted {
    shell: GuestShell,
    /// The guest's counter frequency, from the kernel's log.
    hz: f64,
    /// Under the hypervisor, the physical count when the VM was created (its virtual
    /// counter starts then); 0 directly on QEMU.
    offset_ticks: f64,
    /// The guest's virtual count when its shell started.
    vm_ticks: f64,
}

/// Starts QEMU and waits for the guest's shell. The guest prints its virtual count when its
/// shell is ready (`/bin/cntvct`); under the hypervisor the VM's counter started at its
/// creation, and the hypervisor prints the physical count then. Under `-icount shift=0`
/// `offset_ticks + vm_ticks` at `hz` is the instructions since QEMU's start (1 per ns).
fn boot(cmd: std::process::Command, hypervisor: bool) -> Result<Booted, XtaskError> {
    let mut shell = GuestShell { s: qemu::Session::start(cmd, RUN_LIMIT, false)?, io_line: None };
    let mut after = |marker: &str, end: &str| -> Result<String, XtaskError> {
        shell.wait(marker)?;
        shell.wait(end)
    };
    let number = |text: String, what: &str| -> Result<f64, XtaskError> {
        text.trim().parse::<f64>().map_err(|_| XtaskError::Failed(format!("{what}: `{text}` is not a number")))
    };
    let offset_ticks = if hypervisor {
        number(after("its virtual counter starts at physical count ", "\n")?, "the VM's counter offset")?
    } else {
        0.0
    };
    let hz = number(after("timer(s) running at ", "MHz")?, "the counter frequency")? * 1e6;
    let vm_ticks = number(after("shell ready at virtual count ", "\n")?, "the count at the shell")?;
    shell.wait(PROMPT)?;
    Ok(Booted { shell, hz, offset_ticks, vm_ticks })
}

/// The guest's shell on a QEMU session's console, and under the hypervisor its management
/// console (Ctrl-], docs/management.md) on the same UART.
struct GuestShell {
    s: qemu::Session,
    /// The side core's line of the last `list` (`io cpuN: ...`), if the hypervisor has one.
    io_line: Option<String>,
}

impl GuestShell {
    fn wait(&mut self, text: &str) -> Result<String, XtaskError> {
        self.s.wait_for(text, TIMEOUT).map_err(XtaskError::Failed)
    }

    fn type_line(&mut self, line: &str) -> Result<(), XtaskError> {
        self.s.send_line(line).map_err(XtaskError::Failed)
    }

    /// Runs `command` in the guest's shell and returns what it printed (after the echoed
    /// command line), once the prompt is back.
    fn run(&mut self, command: &str) -> Result<String, XtaskError> {
        self.type_line(&format!("{command}; echo @@io$((6*7))"))?;
        let out = self.wait("@@io42")?;
        self.wait(PROMPT)?;
        Ok(out)
    }

    /// The VM's exit counts now, from the management console's `list`; then, if `then` is
    /// given, that line goes to the guest in the same write (the console runs the command
    /// before it passes the rest on).
    fn exits(&mut self, then: Option<&str>) -> Result<ExitSnapshot, XtaskError> {
        let escape = hyp_core::management::ESCAPE as char;
        self.type_line(&match then {
            Some(line) => format!("{escape}list\n{line}"),
            None => format!("{escape}list"),
        })?;
        let vm_line = format!("vm0 {LINUX_VM}: ");
        self.wait(&vm_line)?;
        let rest = self.wait("\n")?;
        // The side cores' lines come after the VMs', before the heap's.
        let tail = self.wait("heap: ")?;
        self.io_line = tail.lines().find_map(|l| l.split_once("io cpu").map(|(_, rest)| format!("io cpu{rest}")));
        exits::parse_list(&format!("{vm_line}{rest}"), LINUX_VM)
    }

    /// Runs `command` with, if `count_exits`, the VM's exit counts taken right before and
    /// right after it: the guest's shell waits (`read`) with the command line typed and
    /// echoed, the counts are listed, and the Enter that starts the command follows in the
    /// same write; the second list is typed when the prompt is back. The difference holds the
    /// command, its output, and two console-input exits of the lists themselves.
    fn measured(&mut self, command: &str, count_exits: bool) -> Result<(String, Option<ExitSnapshot>), XtaskError> {
        self.type_line(&format!("echo @@ready$((1+1)); read -r go; {command}; echo @@io$((6*7))"))?;
        self.wait("@@ready2")?;
        let before = if count_exits {
            Some(self.exits(Some(""))?)
        } else {
            self.type_line("")?;
            None
        };
        let out = self.wait("@@io42")?;
        self.wait(PROMPT)?;
        let window = match before {
            Some(before) => Some(self.exits(None)?.since(&before)?),
            None => None,
        };
        Ok((out, window))
    }

    /// `poweroff`, and waits a little for QEMU to end (the figures are taken already: if it
    /// does not end, it is stopped and the run goes on).
    fn power_off(mut self) {
        let powered_off = self.type_line("poweroff").is_ok()
            && self.s.wait_for("reboot: Power down", Duration::from_secs(60)).is_ok();
        if !powered_off || !self.s.wait_for_end(Duration::from_secs(30)) {
            step("  the guest did not power off, or QEMU did not end after it: QEMU is stopped");
            return;
        }
        let console = self.s.finish().console;
        if let Some(at) = console.find("hypervisor: panic") {
            let report: String = console[at..].lines().take(8).collect::<Vec<_>>().join("\n");
            step(&format!("  the hypervisor panicked after the guest powered off:\n{report}"));
        }
    }
}

/// `line` without the `NAME | ` the hypervisor puts before a VM's console lines.
fn strip_vm_name(line: &str) -> &str {
    line.strip_prefix(&format!("{LINUX_VM} | ")).unwrap_or(line).trim()
}

/// `command` between two reads of the guest's counter, printing `guest-ticks N` (the counter
/// ticks in between) and `FAILED` on a line of its own if the command failed. BusyBox's
/// tools print no timing, and the counter is the same clock in every run.
fn timed(command: &str) -> String {
    format!(
        "s=$(/bin/cntvct | od -An -tu8); {command} || echo FAILED; \
         e=$(/bin/cntvct | od -An -tu8); echo guest-ticks $((e - s))"
    )
}

/// The counter ticks a `timed` command printed. The last such line counts: the VM has the
/// console, so a line something interrupted shows first in part, then whole
/// (`hyp_core::console_lines`).
fn guest_ticks(output: &str) -> Result<f64, XtaskError> {
    // The echoed command line says FAILED too: only a line of its own counts.
    if output.lines().any(|l| strip_vm_name(l) == "FAILED") {
        return Err(XtaskError::Failed(format!("the command failed in the guest:\n{output}")));
    }
    output
        .lines()
        .rev()
        .filter_map(|l| l.split("guest-ticks ").nth(1))
        .find_map(|t| t.trim().parse::<f64>().ok())
        .filter(|&t| t > 0.0)
        .ok_or_else(|| XtaskError::Failed(format!("no timing from the guest:\n{output}")))
}

/// The digest `sha256sum` printed for SHA256_FILE.
fn sha256_digest(output: &str) -> Option<String> {
    output.lines().find_map(|l| {
        let mut words = strip_vm_name(l).split_whitespace();
        let (digest, file) = (words.next()?, words.next()?);
        (file == SHA256_FILE && digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| digest.to_string())
    })
}

/// Repeated runs of one throughput figure, in MB/s, in the order they ran (at least one).
/// On a shared 2-core machine a single run moves by a factor of 2 or more with the other
/// work on it; the median of several runs in one boot moves much less, and the range shows
/// the reader how noisy the runs were.
#[derive(Clone, Debug, PartialEq)]
pub struct Samples {
    values: Vec<f64>,
}

impl Samples {
    /// None without a value: a figure needs at least one run.
    pub fn new(values: Vec<f64>) -> Option<Samples> {
        (!values.is_empty()).then_some(Samples { values })
    }

    /// Every run's figure, in the order they ran.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The middle value, or with an even count the mean of the two middle ones: one run
    /// slowed (or sped up) by the rest of the machine hardly moves it, where it would move
    /// a mean.
    pub fn median(&self) -> f64 {
        let sorted = self.sorted();
        let mid = sorted.len() / 2;
        if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        }
    }

    pub fn min(&self) -> f64 {
        self.values.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }

    /// The value below which `p` percent of the values lie (nearest rank: the
    /// `ceil(p / 100 * n)`-th smallest), as for a round trip's 99th percentile.
    pub fn percentile(&self, p: f64) -> f64 {
        let sorted = self.sorted();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    fn sorted(&self) -> Vec<f64> {
        let mut sorted = self.values.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
    }

    /// `median (min..max)`, one decimal: the terminal table's cell.
    fn spread_text(&self) -> String {
        format!("{:.1} ({:.1}..{:.1})", self.median(), self.min(), self.max())
    }

    /// `{"median": .., "min": .., "max": .., "samples": [..]}`, two decimals.
    fn json(&self) -> String {
        let samples: Vec<String> = self.values.iter().map(|v| format!("{v:.2}")).collect();
        format!(
            "{{\"median\": {:.2}, \"min\": {:.2}, \"max\": {:.2}, \"samples\": [{}]}}",
            self.median(),
            self.min(),
            self.max(),
            samples.join(", ")
        )
    }
}

/// Throughput of the guest's virtio devices in MB/s (wall time: under `-icount` virtual time
/// jumps while the guest waits for I/O), under the hypervisor and with the same QEMU devices
/// given straight to the guest: every run of each transfer.
#[derive(Clone, Debug)]
pub struct IoFigures {
    pub disk_write: Samples,
    pub disk_read: Samples,
    pub net_to_guest: Samples,
    /// Round trips of 1 byte over TCP, host to the guest's echo and back, in microseconds.
    pub round_trip: Samples,
}

/// The throughput runs: both sides' figures, and the hypervisor's exits during each
/// workload (all its runs together).
#[derive(Clone, Debug)]
pub struct IoRun {
    pub under: IoFigures,
    pub native: IoFigures,
    pub exits: Vec<WorkloadExits>,
    /// Under the hypervisor with a side core serving the VM's disk and NIC (one more CPU:
    /// docs/virtio.md, "The side core"); its exits are in `exits` as "... (side core)".
    pub side: Option<IoFigures>,
    /// The same side core serving the VM's devices as PCI functions on a GICv4 board, whose
    /// ITS injects their completions (docs/vgic.md, "Direct injection of LPIs (GICv4.0)");
    /// its exits are in `exits` as "... (side core, GICv4)".
    pub gicv4: Option<IoFigures>,
}

/// Bytes each disk run moves, and the runs of each of write and read in one boot. A run of
/// 64 MiB lasted only 0.2 to 0.4 s, short beside a stretch of other work on the machine;
/// 128 MiB at the 200 to 560 MB/s seen takes 0.25 to 0.7 s, and the 10 runs of a side
/// 3 to 6 s of transfer.
const DISK_RUN_BYTES: usize = 128 << 20;
const DISK_RUNS: usize = 5;
/// Bytes each TCP run sends, and the runs in one boot. QEMU's user-mode network moves 2 to
/// 7 MB/s here, so a run lasts 2.4 to 8.4 s (long beside the connection's start: still a
/// steady rate) and the 3 runs stay under about 25 s per side.
const NET_RUN_BYTES: usize = 16 << 20;
const NET_RUNS: usize = 3;
/// The guest's port for `nc -l`, forwarded from a free port of 127.0.0.1.
const NET_GUEST_PORT: u16 = 5001;

/// The exits' clocks: the seconds of all a workload's runs, summed.
const DISK_CLOCK: &str = "wall (the guest's counter around dd), summed over the runs";
const NET_CLOCK: &str = "wall (the host, from connect to the guest's close), summed over the runs";

pub fn virtio_io() -> Result<IoRun, XtaskError> {
    let hyp = images::build_hypervisor(Hypervisor::TestHooks)?;
    let linux = linux_guest::debian_arm64()?;
    let disk = bench_dir()?.join("io-disk.img");
    allocated_disk(&disk, DISK_RUN_BYTES)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| XtaskError::Tool(format!("no free port on 127.0.0.1: {e}")))?;
    let bootargs = format!("{} {}", linux_guest::BOOTARGS, linux_guest::NETWORK_BOOTARGS);
    let machine =
        Machine { smp: 2, disk: Some(disk), network: Some(vec![(port, NET_GUEST_PORT)]), ..Machine::default() };
    let vm = linux_vm(
        &linux,
        &bootargs,
        VmDevices { disk: Some(bundle::DiskSlice { offset: 0, size: 0 }), network: Some(None), ..Default::default() },
    );
    let bundle_path = bundle::write_file("io-bench", std::slice::from_ref(&vm), &BundleOptions::default())?;
    let runs = format!(
        "{DISK_RUNS} x {} MiB dd write and read with O_DIRECT, {NET_RUNS} x {} MiB TCP from the host",
        DISK_RUN_BYTES >> 20,
        NET_RUN_BYTES >> 20
    );
    step(&format!("virtio throughput under the hypervisor ({runs}), with its exits"));
    let (under, mut exits) = io_run(machine.command(&hyp, Some(&bundle_path)), port, true)?;
    step(&samples_text(&under));
    step(&format!(
        "virtio throughput under the hypervisor with a side core (CPU {SIDE_CORE_CPU} of 3 polls the VM's virtqueues; \
         {runs}), with its exits"
    ));
    let side_bundle = bundle::write_file("io-bench-side-core", &[side_core_vm(&vm)], &BundleOptions::default())?;
    let side_machine = Machine { smp: 3, ..machine.clone() };
    let (side, side_exits) = io_run(side_machine.command(&hyp, Some(&side_bundle)), port, true)?;
    step(&samples_text(&side));
    exits
        .extend(side_exits.into_iter().map(|w| WorkloadExits { workload: format!("{} (side core)", w.workload), ..w }));
    step(&format!(
        "virtio throughput under the hypervisor with a side core on a GICv4 board (the VM's devices PCI functions, \
         their completions injected by the board's ITS; {runs}), with its exits"
    ));
    let pci = VmEntry {
        devices: VmDevices { transport: hyp_core::bundle::VirtioTransport::Pci, ..side_core_vm(&vm).devices },
        ..vm.clone()
    };
    let gicv4_bundle = bundle::write_file("io-bench-gicv4", &[pci], &BundleOptions::default())?;
    let gicv4_machine = Machine { smp: 3, gic_version: 4, ..machine.clone() };
    let (gicv4, gicv4_exits) = io_run(gicv4_machine.command(&hyp, Some(&gicv4_bundle)), port, true)?;
    step(&samples_text(&gicv4));
    exits.extend(
        gicv4_exits.into_iter().map(|w| WorkloadExits { workload: format!("{} (side core, GICv4)", w.workload), ..w }),
    );
    step(&format!("virtio throughput with QEMU's devices given straight to the guest ({runs})"));
    let mut cmd =
        Machine { virtualization: false, memory_mib: 512, ..machine }.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(&bootargs);
    let (native, _) = io_run(cmd, port, false)?;
    step(&samples_text(&native));
    Ok(IoRun { under, native, exits, side: Some(side), gicv4: Some(gicv4) })
}

/// The CPU a benchmark's side core runs on: the VM's 2 vCPUs are pinned to CPUs 0 and 1.
const SIDE_CORE_CPU: u32 = 2;

/// `vm` with its disk and NIC served by a side core on `SIDE_CORE_CPU`.
fn side_core_vm(vm: &VmEntry) -> VmEntry {
    VmEntry { devices: VmDevices { io_cpu: Some(SIDE_CORE_CPU), ..vm.devices.clone() }, ..vm.clone() }
}

/// A new disk image of `size` bytes, every block written once. A sparse image makes the
/// first write into each block pay for the host file system's allocation (on this
/// machine's ext4 a first O_DIRECT pass over 128 MiB took 0.14 s, the next ones 0.05 to
/// 0.08 s), and only the side that runs first would pay it.
fn allocated_disk(path: &Path, size: usize) -> Result<(), XtaskError> {
    use std::io::Write;
    let _ = std::fs::remove_file(path);
    images::create_disk(path, size as u64)?;
    let failed = |e: std::io::Error| XtaskError::Build(format!("cannot fill {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new().write(true).open(path).map_err(failed)?;
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..size.div_ceil(chunk.len()) {
        file.write_all(&chunk).map_err(failed)?;
    }
    file.sync_all().map_err(failed)
}

/// `  MB/s run by run: disk write a b c ...; disk read ...; TCP ...`: the order shows a
/// trend (a first run slower than the rest, or the load changing) that the range hides.
fn samples_text(f: &IoFigures) -> String {
    let runs = |s: &Samples| s.values().iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(" ");
    format!(
        "  MB/s run by run: disk write {}; disk read {}; TCP {}",
        runs(&f.disk_write),
        runs(&f.disk_read),
        runs(&f.net_to_guest)
    )
}

/// Boots, runs the transfers (with the hypervisor's exit counts around each run when
/// `hypervisor`), powers off.
fn io_run(
    cmd: std::process::Command,
    port: u16,
    hypervisor: bool,
) -> Result<(IoFigures, Vec<WorkloadExits>), XtaskError> {
    let mut b = boot(cmd, hypervisor)?;
    let count = DISK_RUN_BYTES >> 20;
    let write_command = timed(&format!("dd if=/dev/zero of=/dev/vda bs=1M count={count} oflag=direct 2>/dev/null"));
    let read_command = timed(&format!("dd if=/dev/vda of=/dev/null bs=1M count={count} iflag=direct 2>/dev/null"));
    let mut exits = Vec::new();
    let (mut write, mut read) = (Vec::new(), Vec::new());
    // Write and read take turns, so a stretch of load on the machine falls on both.
    for _ in 0..DISK_RUNS {
        for (workload, command, rates) in
            [("disk write", &write_command, &mut write), ("disk read", &read_command, &mut read)]
        {
            let (out, window) = b.shell.measured(command, hypervisor)?;
            let seconds = guest_ticks(&out)? / b.hz;
            rates.push(DISK_RUN_BYTES as f64 / seconds / 1e6);
            if let Some(window) = window {
                add_run_exits(&mut exits, workload, DISK_CLOCK, seconds, &window);
            }
        }
    }
    let mut net = Vec::new();
    // The round trips first: the guest's echo (`nc -e cat`) on the forwarded port.
    b.shell.run(&format!("(nc -l -p {NET_GUEST_PORT} -e cat > /dev/null 2>&1 &) ; sleep 1"))?;
    let before = if hypervisor { Some(b.shell.exits(None)?) } else { None };
    let (round_trips, seconds) = round_trips(port)?;
    if let Some(before) = before {
        let window = b.shell.exits(None)?.since(&before)?;
        add_run_exits(&mut exits, "TCP round trip", NET_CLOCK, seconds, &window);
    }
    for _ in 0..NET_RUNS {
        // A new `nc` for each run: it ends with its connection.
        listen_in_guest(&mut b.shell)?;
        let before = if hypervisor { Some(b.shell.exits(None)?) } else { None };
        let seconds = send_to_guest(&mut b.shell, port, NET_RUN_BYTES)?;
        net.push(NET_RUN_BYTES as f64 / seconds / 1e6);
        if let Some(before) = before {
            let window = b.shell.exits(None)?.since(&before)?;
            add_run_exits(&mut exits, "TCP receive", NET_CLOCK, seconds, &window);
        }
    }
    b.shell.power_off();
    let samples = |values: Vec<f64>, what: &str| {
        Samples::new(values).ok_or_else(|| XtaskError::Failed(format!("no run of the {what} throughput")))
    };
    let figures = IoFigures {
        disk_write: samples(write, "disk write")?,
        disk_read: samples(read, "disk read")?,
        net_to_guest: samples(net, "TCP")?,
        round_trip: samples(round_trips, "TCP round trip")?,
    };
    Ok((figures, exits))
}

/// Adds one run's exits to its workload's entry (made at its first run): a workload's
/// exits per second are the exits of all its runs over their summed seconds. Every run's
/// window counts the same per second of its own, and the time between runs (the shell
/// starting the next one) is in neither the exits nor the seconds.
fn add_run_exits(
    all: &mut Vec<WorkloadExits>,
    workload: &str,
    clock: &'static str,
    seconds: f64,
    window: &ExitSnapshot,
) {
    match all.iter_mut().find(|w| w.workload == workload) {
        Some(w) => {
            w.seconds += seconds;
            w.exits.add(window);
        }
        None => all.push(WorkloadExits { workload: workload.into(), clock, seconds, exits: window.clone() }),
    }
}

/// What the guest's listener says on its console once it has read a whole connection
/// (`listen_in_guest`): typed as `$((6*7))`, so the command's echo does not match it.
const RECEIVED: &str = "@@tcp-received42";

/// Starts the guest's `nc -l` for one connection on `NET_GUEST_PORT`; it prints `RECEIVED`
/// once it has read the connection to its end. Its input is empty, so it ends its own
/// sending half at once: the host's end sees the connection closed as soon as its data is
/// in the buffers between them (the host's socket, QEMU's user network), before the guest
/// has read it, so that close says nothing of the guest's progress.
fn listen_in_guest(shell: &mut GuestShell) -> Result<(), XtaskError> {
    shell.run(&format!("(nc -l -p {NET_GUEST_PORT} > /dev/null; echo @@tcp-received$((6*7))) & sleep 1")).map(|_| ())
}

/// Sends `bytes` to the guest's listener (`listen_in_guest`) through QEMU's hostfwd and
/// waits until the guest says it has read them all: the seconds that took.
fn send_to_guest(shell: &mut GuestShell, port: u16, bytes: usize) -> Result<f64, XtaskError> {
    use std::io::{Read, Write};
    let failed = |e: std::io::Error| XtaskError::Failed(format!("TCP to the guest on 127.0.0.1:{port}: {e}"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(failed)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(failed)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(failed)?;
    let chunk = vec![0x5au8; 1 << 16];
    let start = std::time::Instant::now();
    for _ in 0..bytes / chunk.len() {
        stream.write_all(&chunk).map_err(failed)?;
    }
    stream.shutdown(std::net::Shutdown::Write).map_err(failed)?;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    shell.wait(RECEIVED)?;
    Ok(start.elapsed().as_secs_f64())
}

/// The packets the guest's eth0 has received and sent: its `rx_packets` and `tx_packets`.
fn packet_counts(shell: &mut GuestShell) -> Result<(u64, u64), XtaskError> {
    let out = shell.run("cat /sys/class/net/eth0/statistics/rx_packets /sys/class/net/eth0/statistics/tx_packets")?;
    let numbers: Vec<u64> = out.lines().map(strip_vm_name).filter_map(|l| l.trim().parse().ok()).collect();
    match numbers[..] {
        [.., rx, tx] => Ok((rx, tx)),
        _ => Err(XtaskError::Failed(format!("no packet counts in: {out}"))),
    }
}

/// Starts the guest's `nc -l` for one connection on `NET_GUEST_PORT`, fed `bytes` zeros to
/// send (`receive_from_guest`).
fn serve_from_guest(shell: &mut GuestShell, bytes: usize) -> Result<(), XtaskError> {
    shell.run(&format!("(head -c {bytes} /dev/zero | nc -l -p {NET_GUEST_PORT} > /dev/null) & sleep 1")).map(|_| ())
}

/// Connects to the guest's `serve_from_guest` through QEMU's hostfwd (127.0.0.1 only) and
/// reads until all its `bytes` have come (its nc may end before its kernel has sent them):
/// the seconds from the connection to the last byte.
fn receive_from_guest(port: u16, bytes: usize) -> Result<f64, XtaskError> {
    use std::io::Read;
    let failed = |e: std::io::Error| XtaskError::Failed(format!("TCP from the guest on 127.0.0.1:{port}: {e}"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(failed)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(failed)?;
    let mut buffer = vec![0u8; 1 << 16];
    let (start, mut received) = (std::time::Instant::now(), 0);
    while received < bytes {
        match stream.read(&mut buffer).map_err(failed)? {
            0 => break,
            n => received += n,
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    if received != bytes {
        return Err(XtaskError::Failed(format!("the guest sent {received} bytes over TCP where it was given {bytes}")));
    }
    Ok(seconds)
}

/// Round trips measured, after `ROUND_TRIP_WARM_UP` not counted.
const ROUND_TRIPS: usize = 2000;
const ROUND_TRIP_WARM_UP: usize = 100;

/// 1-byte request/response round trips over TCP with the guest's echo through QEMU's
/// hostfwd (127.0.0.1 only), one at a time, Nagle off: each one's microseconds, and the
/// seconds they took together (for the exits per second).
fn round_trips(port: u16) -> Result<(Vec<f64>, f64), XtaskError> {
    use std::io::{Read, Write};
    let failed =
        |e: std::io::Error| XtaskError::Failed(format!("TCP round trips with the guest on 127.0.0.1:{port}: {e}"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(failed)?;
    stream.set_nodelay(true).map_err(failed)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(failed)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(failed)?;
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    let mut byte = [0u8; 1];
    let mut start_all = std::time::Instant::now();
    for i in 0..ROUND_TRIP_WARM_UP + ROUND_TRIPS {
        if i == ROUND_TRIP_WARM_UP {
            start_all = std::time::Instant::now();
        }
        let start = std::time::Instant::now();
        stream.write_all(&[i as u8]).map_err(failed)?;
        stream.read_exact(&mut byte).map_err(failed)?;
        let micros = start.elapsed().as_secs_f64() * 1e6;
        if byte[0] != i as u8 {
            return Err(XtaskError::Failed(format!("the guest's echo sent {} for {}", byte[0], i as u8)));
        }
        if i >= ROUND_TRIP_WARM_UP {
            times.push(micros);
        }
    }
    let seconds = start_all.elapsed().as_secs_f64();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok((times, seconds))
}

/// `target/bench/`, created if needed.
fn bench_dir() -> Result<PathBuf, XtaskError> {
    let dir = images::workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// Writes `target/bench/NAME`.
fn write_bench_file(name: &str, body: &str) -> Result<PathBuf, XtaskError> {
    let path = bench_dir()?.join(name);
    std::fs::write(&path, body).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

fn met(target: Target, ratio: f64) -> &'static str {
    if target.met(ratio) {
        "yes"
    } else {
        "NO"
    }
}

fn target_text(target: Target) -> String {
    match target {
        Target::AtMost(v) => format!("<= {v}"),
        Target::AtLeast(v) => format!(">= {v}"),
    }
}

/// The throughput figures as table rows, and `target/bench/io.json`.
pub fn io_report(io: &IoRun) -> Result<String, XtaskError> {
    write_bench_file("io.json", &io_json(io))?;
    Ok(io_table(io))
}

/// Per figure the runs, each side's `median (min..max)` and the ratio of the medians.
fn io_table(io: &IoRun) -> String {
    let mut table = format!(
        "{:<24} {:>4} {:>22} {:>22} {:>6} {:>8} {:>5} {:>22} {:>6}\n",
        "MB/s: median (min..max)", "runs", "hypervisor", "no hyp.", "ratio", "target", "met", "side core", "ratio"
    );
    let side = io.side.as_ref().map(|s| [&s.disk_write, &s.disk_read, &s.net_to_guest]);
    for (i, (name, u, n, _)) in io_rows(io).into_iter().enumerate() {
        let ratio = u.median() / n.median();
        let (side_text, side_ratio) = match side {
            Some(side) => (side[i].spread_text(), format!("{:.2}", side[i].median() / n.median())),
            None => ("-".into(), "-".into()),
        };
        table.push_str(&format!(
            "{name:<24} {:>4} {:>22} {:>22} {ratio:>6.2} {:>8} {:>5} {side_text:>22} {side_ratio:>6}\n",
            u.values().len(),
            u.spread_text(),
            n.spread_text(),
            target_text(IO_TARGET),
            met(IO_TARGET, ratio)
        ));
    }
    table.push_str(&format!(
        "  (disk: {} MiB per run, write and read taking turns; TCP: {} MiB per run; the ratio is of the medians)\n",
        DISK_RUN_BYTES >> 20,
        NET_RUN_BYTES >> 20
    ));
    table.push_str(&round_trip_table(io));
    if let Some(g) = &io.gicv4 {
        table.push_str(&gicv4_table(io, g));
    }
    table
}

/// The side core on a GICv4 board (PCI functions, completions injected by the board): its
/// throughputs against QEMU's devices given to the guest, and its round trip against the
/// hypervisor's without a side core.
fn gicv4_table(io: &IoRun, g: &IoFigures) -> String {
    let mut t = String::from("side core on a GICv4 board (virtio-pci, LPIs injected by the board):\n");
    let runs = [&g.disk_write, &g.disk_read, &g.net_to_guest];
    for ((name, _, n, _), s) in io_rows(io).into_iter().zip(runs) {
        t.push_str(&format!("  {name:<22} {:>22} MB/s, {:.2} of no hyp.\n", s.spread_text(), s.median() / n.median()));
    }
    t.push_str(&format!(
        "  {:<22} {:.0} / {:.0} us (median / p99), {:.2} / {:.2} of the hypervisor's without a side core\n",
        "TCP round trip",
        g.round_trip.median(),
        g.round_trip.percentile(99.0),
        g.round_trip.median() / io.under.round_trip.median(),
        g.round_trip.percentile(99.0) / io.under.round_trip.percentile(99.0)
    ));
    t
}

/// The 1-byte TCP round trips: per configuration the median and the 99th percentile, and
/// the side core's against the hypervisor's without it (the target: no worse).
fn round_trip_table(io: &IoRun) -> String {
    let cell = |s: &Samples| format!("{:.0} / {:.0}", s.median(), s.percentile(99.0));
    let side = io.side.as_ref().map(|s| &s.round_trip);
    let mut t = format!(
        "{:<24} {:>16} {:>16} {:>16} {:>16}\n",
        "TCP round trip, us", "hypervisor", "no hyp.", "side core", "side / hyp."
    );
    let ratio = |s: &Samples| {
        format!(
            "{:.2} / {:.2}",
            s.median() / io.under.round_trip.median(),
            s.percentile(99.0) / io.under.round_trip.percentile(99.0)
        )
    };
    t.push_str(&format!(
        "{:<24} {:>16} {:>16} {:>16} {:>16}\n",
        "  median / p99",
        cell(&io.under.round_trip),
        cell(&io.native.round_trip),
        side.map_or("-".into(), cell),
        side.map_or("-".into(), ratio)
    ));
    t.push_str(&format!(
        "  ({ROUND_TRIPS} round trips of 1 byte each, host to the guest's `nc -e cat` and back, after \
         {ROUND_TRIP_WARM_UP} not counted)\n"
    ));
    t
}

/// `io.json`: per figure the bytes per run, each side's median, min, max and every run in
/// order, the ratio of the medians and the target.
fn io_json(io: &IoRun) -> String {
    let side = io.side.as_ref().map(|s| [&s.disk_write, &s.disk_read, &s.net_to_guest]);
    let gicv4 = io.gicv4.as_ref().map(|s| [&s.disk_write, &s.disk_read, &s.net_to_guest]);
    let rows: Vec<String> = io_rows(io)
        .into_iter()
        .enumerate()
        .map(|(i, (name, u, n, bytes))| {
            let side = side.map_or_else(|| "null".to_string(), |s| s[i].json());
            let gicv4 = gicv4.map_or_else(|| "null".to_string(), |s| s[i].json());
            format!(
                "    {{\n      \"name\": \"{name}\",\n      \"bytes_per_run\": {bytes},\n      \"hypervisor\": {},\n      \
                 \"native\": {},\n      \"ratio\": {:.3},\n      \"target\": \"{}\",\n      \"side_core\": {side},\n      \
                 \"side_core_gicv4\": {gicv4}\n    }}",
                u.json(),
                n.json(),
                u.median() / n.median(),
                target_text(IO_TARGET)
            )
        })
        .collect();
    let rt = |s: &Samples| format!("{{\"median\": {:.1}, \"p99\": {:.1}}}", s.median(), s.percentile(99.0));
    let round_trip = format!(
        "{{\"unit\": \"microseconds (wall time), 1 byte each way over TCP\", \"round_trips\": {ROUND_TRIPS}, \
         \"hypervisor\": {}, \"native\": {}, \"side_core\": {}, \"side_core_gicv4\": {}}}",
        rt(&io.under.round_trip),
        rt(&io.native.round_trip),
        io.side.as_ref().map_or("null".into(), |s| rt(&s.round_trip)),
        io.gicv4.as_ref().map_or("null".into(), |s| rt(&s.round_trip))
    );
    format!(
        "{{\n  \"unit\": \"MB/s (wall time)\",\n  \"statistic\": \"per side the median of its runs in one boot, with \
         the min, the max and every run in order; ratio: hypervisor median / native median\",\n  \"io\": [\n{}\n  \
         ],\n  \"round_trip\": {round_trip}\n}}\n",
        rows.join(",\n")
    )
}

/// Per figure: its name, the hypervisor's runs, the reference runs, the bytes of one run.
fn io_rows(io: &IoRun) -> [(&'static str, &Samples, &Samples, usize); 3] {
    [
        ("disk write (O_DIRECT)", &io.under.disk_write, &io.native.disk_write, DISK_RUN_BYTES),
        ("disk read (O_DIRECT)", &io.under.disk_read, &io.native.disk_read, DISK_RUN_BYTES),
        ("TCP host -> guest", &io.under.net_to_guest, &io.native.net_to_guest, NET_RUN_BYTES),
    ]
}

/// The Linux boot and sha256sum figures as table rows, and `target/bench/macro.json`.
pub fn macro_report(m: &MacroFigures) -> Result<String, XtaskError> {
    let mut table = format!(
        "{:<24} {:>12} {:>12} {:>8} {:>8} {:>5}\n",
        "instructions", "hypervisor", "no hyp.", "ratio", "target", "met"
    );
    let mut json = Vec::new();
    for (name, key, pair, target) in macro_rows(m) {
        let ratio = pair.ratio();
        table.push_str(&format!(
            "{name:<24} {:>11.1}M {:>11.1}M {ratio:>8.4} {:>8} {:>5}\n",
            pair.under / 1e6,
            pair.native / 1e6,
            target_text(target),
            met(target, ratio)
        ));
        json.push(format!(
            "  \"{key}\": {{\"hypervisor\": {:.0}, \"native\": {:.0}, \"ratio\": {ratio:.4}, \"target\": \"{}\"}}",
            pair.under,
            pair.native,
            target_text(target)
        ));
    }
    table.push_str(&format!(
        "  (sha256sum: {SHA256_MIB} MiB of zeros in tmpfs /tmp; the counter reads around it, {:.1}M and {:.1}M \
         instructions, are subtracted)\n",
        m.overhead.under / 1e6,
        m.overhead.native / 1e6
    ));
    json.push(format!(
        "  \"sha256sum_measuring_overhead\": {{\"hypervisor\": {:.0}, \"native\": {:.0}}}",
        m.overhead.under, m.overhead.native
    ));
    if m.crng_ready.0 != m.crng_ready.1 {
        let seeded = |ready: bool| if ready { "seeded" } else { "NOT seeded" };
        table.push_str(&format!(
            "  note: the guest's CRNG was {} under the hypervisor and {} directly on QEMU: an unseeded one costs \
             about 9,000 instructions per system call (docs/performance.md)\n",
            seeded(m.crng_ready.0),
            seeded(m.crng_ready.1)
        ));
    }
    json.push(format!(
        "  \"guest_crng_seeded\": {{\"hypervisor\": {}, \"native\": {}}}",
        m.crng_ready.0, m.crng_ready.1
    ));
    let body = format!(
        "{{\n  \"unit\": \"instructions (-icount shift=0)\",\n  \"sha256sum_file\": \"{SHA256_MIB} MiB of zeros in \
         {SHA256_FILE}, a tmpfs\",\n{}\n}}\n",
        json.join(",\n")
    );
    write_bench_file("macro.json", &body)?;
    Ok(table)
}

fn macro_rows(m: &MacroFigures) -> [(&'static str, &'static str, Pair, Target); 2] {
    [
        ("linux boot to shell", "linux_boot_to_shell", m.boot, FAST_PATHS_BOOT_TARGET),
        ("sha256sum 64 MiB", "sha256sum_64mib", m.sha256, FAST_PATHS_SHA256_TARGET),
    ]
}

/// The exits table, and `target/bench/exits.json`.
pub fn exits_report(workloads: &[WorkloadExits]) -> Result<String, XtaskError> {
    write_bench_file("exits.json", &exits::json(workloads))?;
    Ok(exits::table(workloads))
}

/// `target/bench/ratios.svg`: one bar per Linux figure (the microbenchmarks' targets are
/// instruction counts, and their reference is the guest side alone, so they have no ratio
/// to chart).
pub fn write_chart(m: &MacroFigures, io: Option<&IoRun>) -> Result<PathBuf, XtaskError> {
    let mut bars: Vec<Bar> = macro_rows(m)
        .into_iter()
        .map(|(name, _, pair, target)| Bar { label: name.into(), ratio: pair.ratio(), target: Some(target) })
        .collect();
    if let Some(io) = io {
        bars.extend(io_bars(io));
    }
    write_bench_file("ratios.svg", &chart::svg("hypervisor / no hypervisor (cargo xtask bench)", &bars))
}

/// The virtio figures' bars: each throughput without and with each side core run (its target
/// that of the side-core issue), then the round trip's median without and with it, the side
/// core's target being the round trip without it.
fn io_bars(io: &IoRun) -> Vec<Bar> {
    let label = |name: &str| name.replace(" (O_DIRECT)", "").replace("->", "→");
    let mut bars: Vec<Bar> = io_rows(io)
        .into_iter()
        .map(|(name, u, n, _)| Bar { label: label(name), ratio: u.median() / n.median(), target: Some(IO_TARGET) })
        .collect();
    let rt = io.under.round_trip.median() / io.native.round_trip.median();
    bars.push(Bar { label: "TCP round trip".into(), ratio: rt, target: None });
    let sides = [(", side core", &io.side), (", side core, GICv4", &io.gicv4)];
    for (suffix, side) in sides.into_iter().filter_map(|(suffix, side)| Some((suffix, side.as_ref()?))) {
        let side_rows = [&side.disk_write, &side.disk_read, &side.net_to_guest];
        bars.extend(io_rows(io).into_iter().zip(side_rows).map(|((name, _, n, _), s)| Bar {
            label: format!("{}{suffix}", label(name)),
            ratio: s.median() / n.median(),
            target: Some(SIDE_CORE_TARGET),
        }));
        bars.push(Bar {
            label: format!("TCP round trip{suffix}"),
            ratio: side.round_trip.median() / io.native.round_trip.median(),
            target: Some(Target::AtMost(rt)),
        });
    }
    bars
}

/// `bench --io`'s chart, `target/bench/ratios-io.svg`: the virtio bars alone (the full
/// bench puts them beside the Linux figures in ratios.svg).
pub fn write_io_chart(io: &IoRun) -> Result<PathBuf, XtaskError> {
    write_bench_file(
        "ratios-io.svg",
        &chart::svg("virtio: hypervisor / no hypervisor (cargo xtask bench --io)", &io_bars(io)),
    )
}

/// The microbenchmark figures as table rows, and `target/bench/micro.json`.
pub fn report(under: &Figures, native: &Figures) -> Result<String, XtaskError> {
    let (table, json) = micro_table(under, native, target);
    write_bench_file("micro.json", &json)?;
    Ok(table)
}

/// The 32-bit microbenchmark figures under the ARMv7 image as table rows under a title, and
/// `target/bench/micro-armv7.json`.
pub fn report_armv7(under: &Figures, native: &Figures) -> Result<String, XtaskError> {
    let (table, json) = micro_table(under, native, target_armv7);
    write_bench_file("micro-armv7.json", &json)?;
    Ok(format!("ARMv7 (HYP mode, Cortex-A15, GICv2): the 32-bit guest's microbenchmarks\n{table}"))
}

/// The table of `under` beside `native` and their `targets`, and its JSON.
fn micro_table(under: &Figures, native: &Figures, target: fn(&str) -> Option<f64>) -> (String, String) {
    let mut table = String::new();
    table.push_str(&format!(
        "{:<24} {:>12} {:>12} {:>10} {:>8}\n",
        "instructions/op", "hypervisor", "no hyp.", "target", "met"
    ));
    let mut json = Vec::new();
    for (name, value) in under {
        let reference = native.get(name).copied();
        let target = target(name);
        let met = target.map_or("-", |t| if *value <= t { "yes" } else { "NO" });
        table.push_str(&format!(
            "{:<24} {:>12.0} {:>12} {:>10} {:>8}\n",
            name,
            value,
            reference.map_or("-".into(), |r| format!("{r:.0}")),
            target.map_or("-".into(), |t| format!("<= {t:.0}")),
            met
        ));
        json.push(format!(
            "    {{\"name\": \"{name}\", \"hypervisor\": {value:.1}, \"native\": {}, \"target\": {}, \"met\": {}}}",
            reference.map_or("null".into(), |r| format!("{r:.1}")),
            target.map_or("null".into(), |t| format!("{t:.0}")),
            target.map_or("null", |t| if *value <= t { "true" } else { "false" })
        ));
    }
    let json = format!(
        "{{\n  \"unit\": \"instructions per operation (-icount shift=0)\",\n  \"micro\": [\n{}\n  ]\n}}\n",
        json.join(",\n")
    );
    (table, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_reads_around_a_command_give_its_ticks() {
        let out =
            "linux | s=$(...); dd ... || echo FAILED; echo guest-ticks $((e - s))\nlinux | guest-ticks 31250000\n";
        assert_eq!(guest_ticks(out).unwrap(), 31_250_000.0);
        assert!(guest_ticks("linux | FAILED\nlinux | guest-ticks 5\n").unwrap_err().to_string().contains("failed"));
        assert!(guest_ticks("FAILED\nguest-ticks 5\n").is_err(), "without the hypervisor's prefix too");
        assert!(guest_ticks("guest-ticks 0\n").is_err());
        assert!(guest_ticks("nothing").is_err());
        let interrupted = "linux | guest-ticks 312\nhypervisor: a log line\nlinux | guest-ticks 31250000\n";
        assert_eq!(guest_ticks(interrupted).unwrap(), 31_250_000.0, "the whole line, not the part before it");
    }

    #[test]
    fn the_digest_is_the_one_printed_for_the_file() {
        let out = format!(
            "linux | echo ...; sha256sum /tmp/f || echo FAILED\nlinux | {SHA256_OF_ZEROS}  /tmp/f\nlinux | guest-ticks 9\n"
        );
        assert_eq!(sha256_digest(&out).as_deref(), Some(SHA256_OF_ZEROS));
        assert_eq!(sha256_digest(&format!("{SHA256_OF_ZEROS}  /tmp/f\n")).as_deref(), Some(SHA256_OF_ZEROS));
        assert_eq!(sha256_digest(&format!("{SHA256_OF_ZEROS}  /tmp/g\n")), None, "another file");
        assert_eq!(sha256_digest("sha256sum: /tmp/f: No such file or directory\n"), None);
        assert_eq!(sha256_digest("3b6a07d0  /tmp/f\n"), None, "a short digest");
    }

    #[test]
    fn the_crng_state_comes_from_the_kernel_log_count() {
        assert!(crng_ready("tmpfs /tmp tmpfs rw 0 0\ncrng-ready 1\n67108864\n").unwrap());
        assert!(!crng_ready("linux | echo crng-ready $(dmesg | ...)\nlinux | crng-ready 0\n").unwrap());
        assert!(crng_ready("linux | echo crng-ready $(dmesg | grep -c x)\n").is_err(), "only the echoed command");
    }

    #[test]
    fn ratios_and_targets() {
        let p = Pair { under: 1053.0, native: 1000.0 };
        assert!((p.ratio() - 1.053).abs() < 1e-12);
        assert!(!BOOT_TARGET.met(p.ratio()) && SHA256_TARGET.met(1.0) && IO_TARGET.met(0.9));
        assert_eq!((met(SHA256_TARGET, 1.02), met(IO_TARGET, 1.8)), ("NO", "yes"));
        assert_eq!((target_text(SHA256_TARGET).as_str(), target_text(IO_TARGET).as_str()), ("<= 1.01", ">= 0.8"));
        // 0.9955 and 1.0002, the merged main's: within the fast-paths issue's targets.
        assert!(FAST_PATHS_BOOT_TARGET.met(0.9955) && !FAST_PATHS_BOOT_TARGET.met(1.006));
        assert!(FAST_PATHS_SHA256_TARGET.met(1.0002) && !FAST_PATHS_SHA256_TARGET.met(1.0006));
        assert_eq!(target_text(FAST_PATHS_BOOT_TARGET), "<= 1.005");
    }

    fn samples(values: &[f64]) -> Samples {
        Samples::new(values.to_vec()).unwrap()
    }

    #[test]
    fn the_median_is_the_middle_run_and_the_range_its_extremes() {
        let odd = samples(&[210.0, 90.0, 200.0, 400.0, 205.0]);
        assert_eq!((odd.median(), odd.min(), odd.max()), (205.0, 90.0, 400.0), "one slow and one fast run ignored");
        assert_eq!(odd.values(), [210.0, 90.0, 200.0, 400.0, 205.0], "in the order they ran");
        let even = samples(&[4.0, 2.0, 3.0, 1.0]);
        assert_eq!((even.median(), even.min(), even.max()), (2.5, 1.0, 4.0), "the mean of the two middle runs");
        let one = samples(&[5.0]);
        assert_eq!((one.median(), one.min(), one.max()), (5.0, 5.0, 5.0));
        assert_eq!(Samples::new(Vec::new()), None, "no figure without a run");
        assert_eq!(odd.spread_text(), "205.0 (90.0..400.0)");
        assert_eq!(
            samples(&[2.126, 3.0, 1.0]).json(),
            "{\"median\": 2.13, \"min\": 1.00, \"max\": 3.00, \"samples\": [2.13, 3.00, 1.00]}"
        );
    }

    fn io_run_for_tests() -> IoRun {
        IoRun {
            under: IoFigures {
                disk_write: samples(&[160.0, 170.0, 150.0, 165.0, 90.0]),
                disk_read: samples(&[150.0, 160.0, 155.0, 150.0, 158.0]),
                net_to_guest: samples(&[4.0, 2.0, 5.0]),
                round_trip: samples(&[300.0, 320.0, 310.0, 900.0]),
            },
            native: IoFigures {
                disk_write: samples(&[200.0, 210.0, 190.0, 205.0, 300.0]),
                disk_read: samples(&[300.0, 310.0, 305.0, 290.0, 320.0]),
                net_to_guest: samples(&[2.5, 2.0, 3.0]),
                round_trip: samples(&[200.0, 210.0, 205.0, 400.0]),
            },
            exits: Vec::new(),
            side: None,
            gicv4: None,
        }
    }

    #[test]
    fn the_io_table_shows_each_sides_spread_and_the_ratio_of_the_medians() {
        let t = io_table(&io_run_for_tests());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("MB/s: median (min..max)") && lines[0].contains("runs"), "{t}");
        let row = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>().join(" ");
        // 160 / 205 = 0.78; 4 / 2.5 = 1.60.
        assert_eq!(
            row(1),
            "disk write (O_DIRECT) 5 160.0 (90.0..170.0) 205.0 (190.0..300.0) 0.78 >= 0.8 NO - -",
            "no side-core run: dashes"
        );
        assert_eq!(row(3), "TCP host -> guest 3 4.0 (2.0..5.0) 2.5 (2.0..3.0) 1.60 >= 0.8 yes - -");
        assert!(lines[4].contains("128 MiB per run") && lines[4].contains("16 MiB per run"), "{t}");
    }

    #[test]
    fn the_round_trips_give_median_and_99th_percentile_per_configuration_and_the_side_cores_ratio() {
        let many = samples(&(1..=200).map(f64::from).collect::<Vec<_>>());
        assert_eq!((many.median(), many.percentile(99.0), many.percentile(100.0)), (100.5, 198.0, 200.0));
        assert_eq!(samples(&[7.0]).percentile(99.0), 7.0);
        let mut io = io_run_for_tests();
        let t = round_trip_table(&io);
        // Medians 315 and 207.5; p99 the largest of four.
        assert!(t.contains("315 / 900") && t.contains("208 / 400"), "{t}");
        assert!(t.lines().nth(1).is_some_and(|l| l.trim_end().ends_with('-')), "no side core: a dash: {t}");
        io.side = Some(IoFigures { round_trip: samples(&[630.0, 630.0, 630.0, 1800.0]), ..io.under.clone() });
        assert!(round_trip_table(&io).contains("2.00 / 2.00"), "{}", round_trip_table(&io));
        let j = io_json(&io);
        assert!(
            j.contains("\"round_trip\": {\"unit\"")
                && j.contains("\"side_core\": {\"median\": 630.0, \"p99\": 1800.0}"),
            "{j}"
        );
        assert_eq!(j.matches('{').count(), j.matches('}').count());
    }

    #[test]
    fn the_chart_has_the_side_cores_bars_beside_the_hypervisors() {
        let mut io = io_run_for_tests();
        let labels = |bars: &[Bar]| bars.iter().map(|b| b.label.clone()).collect::<Vec<_>>();
        assert_eq!(labels(&io_bars(&io)), ["disk write", "disk read", "TCP host → guest", "TCP round trip"]);
        io.side = Some(IoFigures { round_trip: samples(&[310.0]), ..io.native.clone() });
        let bars = io_bars(&io);
        assert_eq!(bars.len(), 8);
        assert_eq!(bars[4].label, "disk write, side core");
        assert_eq!((bars[4].ratio, bars[4].target), (1.0, Some(SIDE_CORE_TARGET)));
        // The side core's round trip against the hypervisor's without it: 310 / 207.5 over
        // 315 / 207.5, met.
        assert_eq!(bars[7].target, Some(Target::AtMost(315.0 / 207.5)));
        assert!(bars[7].target.unwrap().met(bars[7].ratio));
    }

    #[test]
    fn the_gicv4_side_core_has_its_own_rows_bars_and_json() {
        let mut io = io_run_for_tests();
        assert!(!io_table(&io).contains("GICv4") && io_json(&io).contains("\"side_core_gicv4\": null"));
        io.gicv4 = Some(IoFigures { round_trip: samples(&[630.0, 630.0, 630.0, 1800.0]), ..io.native.clone() });
        let t = io_table(&io);
        let (_, gicv4) = t.split_once("side core on a GICv4 board").unwrap_or_else(|| panic!("{t}"));
        let row = |name: &str| gicv4.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_default().to_string();
        assert!(row("disk write (O_DIRECT)").ends_with("1.00 of no hyp."), "{t}");
        // 630 / 315 and 1800 / 900 of the hypervisor's round trip without a side core.
        assert!(row("TCP round trip").contains("630 / 1800 us (median / p99), 2.00 / 2.00"), "{t}");
        let bars = io_bars(&io);
        assert_eq!(bars.len(), 8);
        assert_eq!(bars[4].label, "disk write, side core, GICv4");
        assert_eq!(bars[7].target, Some(Target::AtMost(315.0 / 207.5)));
        let j = io_json(&io);
        assert!(j.contains("\"side_core_gicv4\": {\"median\": 630.0, \"p99\": 1800.0}"), "{j}");
        assert_eq!(j.matches('{').count(), j.matches('}').count());
    }

    #[test]
    fn io_json_keeps_every_run_and_the_ratio_of_the_medians() {
        let j = io_json(&io_run_for_tests());
        assert_eq!(j.matches("\"name\":").count(), 3);
        assert!(
            j.contains("\"hypervisor\": {\"median\": 160.00, \"min\": 90.00, \"max\": 170.00, \"samples\": ["),
            "{j}"
        );
        assert!(j.contains("\"samples\": [160.00, 170.00, 150.00, 165.00, 90.00]"), "every run, in order: {j}");
        assert!(j.contains("\"ratio\": 0.780") && j.contains("\"ratio\": 1.600"), "{j}");
        assert!(
            j.contains(&format!("\"bytes_per_run\": {}", 128 << 20))
                && j.contains(&format!("\"bytes_per_run\": {}", 16 << 20))
        );
        assert_eq!(j.matches('{').count(), j.matches('}').count());
        assert_eq!(j.matches('[').count(), j.matches(']').count());
    }

    #[test]
    fn a_workloads_exits_are_those_of_all_its_runs_over_their_summed_seconds() {
        let window =
            |total: u64| ExitSnapshot { total, by_reason: [("data-abort".to_string(), total)].into_iter().collect() };
        let mut all = Vec::new();
        add_run_exits(&mut all, "disk write", DISK_CLOCK, 0.5, &window(1000));
        add_run_exits(&mut all, "disk read", DISK_CLOCK, 0.25, &window(300));
        add_run_exits(&mut all, "disk write", DISK_CLOCK, 1.5, &window(1000));
        assert_eq!(all.len(), 2, "one entry per workload, in the order they first ran");
        assert_eq!((all[0].workload.as_str(), all[0].seconds, all[0].exits.total), ("disk write", 2.0, 2000));
        assert_eq!(all[0].total_per_second(), 1000.0);
        assert_eq!((all[1].workload.as_str(), all[1].total_per_second()), ("disk read", 1200.0));
    }

    #[test]
    fn the_armv7_microbenchmarks_have_the_targets_of_the_armv7_issue() {
        let under: Figures = [("hvc-unknown", 180.0), ("mmio-read", 351.0), ("virtual-ipi-round-trip", 3000.0)]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        let native: Figures = [("hvc-unknown".to_string(), 7.0)].into_iter().collect();
        let (table, json) = micro_table(&under, &native, target_armv7);
        let row = |name: &str| {
            let line = table.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {table}"));
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert_eq!(row("hvc-unknown"), "hvc-unknown 180 7 <= 200 yes");
        assert_eq!(row("mmio-read"), "mmio-read 351 - <= 350 NO");
        assert_eq!(row("virtual-ipi-round-trip"), "virtual-ipi-round-trip 3000 - - -");
        assert!(
            json.contains(
                "{\"name\": \"hvc-unknown\", \"hypervisor\": 180.0, \"native\": 7.0, \"target\": 200, \"met\": true}"
            ),
            "{json}"
        );
        assert_eq!(
            (target("hvc-unknown"), target_armv7("gicd-read"), target_armv7("virtual-ipi")),
            (Some(60.0), Some(350.0), None)
        );
    }

    #[test]
    fn the_gicv2_board_adds_its_ipi_and_timer_rows_with_their_targets() {
        let figures = |rows: &[(&str, f64)]| -> Figures { rows.iter().map(|(n, v)| (n.to_string(), *v)).collect() };
        let mut under = figures(&[("virtual-ipi", 1200.0), ("virtual-ipi-round-trip", 1500.0)]);
        let v2 = figures(&[
            ("virtual-ipi", 1000.0),
            ("virtual-ipi-round-trip", 1300.0),
            ("vtimer-periodic", 800.0),
            ("hvc-unknown", 30.0),
        ]);
        add_gicv2(&mut under, &v2);
        assert_eq!(under.get("virtual-ipi-round-trip/gicv2"), Some(&1300.0));
        assert_eq!(under.get("vtimer-periodic/gicv2"), Some(&800.0));
        assert_eq!(under.get("virtual-ipi"), Some(&1200.0), "the GICv3 row is kept");
        assert_eq!(under.get("hvc-unknown/gicv2"), None, "only the GIC's rows");
        assert_eq!(under.len(), 5);
        assert_eq!(
            (target("virtual-ipi-round-trip"), target("virtual-ipi-round-trip/gicv2"), target("vtimer-periodic")),
            (Some(900.0), Some(700.0), Some(500.0))
        );
        assert_eq!((target("virtual-ipi/gicv2"), target("vtimer-periodic/gicv2")), (None, None));
        let native = figures(&[("virtual-ipi-round-trip/gicv2", 200.0)]);
        let (table, json) = micro_table(&under, &native, target);
        let row = |name: &str| {
            let line = table.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{table}"));
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert_eq!(row("virtual-ipi-round-trip/gicv2"), "virtual-ipi-round-trip/gicv2 1300 200 <= 700 NO");
        assert_eq!(row("virtual-ipi-round-trip"), "virtual-ipi-round-trip 1500 - <= 900 NO");
        assert!(json.contains("\"name\": \"vtimer-periodic/gicv2\", \"hypervisor\": 800.0"), "{json}");
        assert!(
            json.contains("\"virtual-ipi-round-trip/gicv2\", \"hypervisor\": 1300.0, \"native\": 200.0, \"target\": 700, \"met\": false}"),
            "{json}"
        );
        assert!(json.contains(
            "\"vtimer-periodic/gicv2\", \"hypervisor\": 800.0, \"native\": null, \"target\": null, \"met\": null}"
        ));
    }

    #[test]
    fn the_periodic_timers_wake_ups_are_read_from_its_line() {
        let console = "microbench | latency vtimer-periodic samples=10000 ns=5\n\
                       microbench | microbench: periodic ticks=10000 wakes=10001\nmicrobench: done\n";
        assert_eq!(periodic_wakes(console), Some((10_000, 10_001)));
        assert_eq!(periodic_wakes("microbench: periodic ticks=3 wakes=3"), Some((3, 3)), "without the VM's name");
        assert_eq!(periodic_wakes("microbench: periodic ticks=x wakes=3"), None);
        assert_eq!(periodic_wakes("microbench: done"), None);
    }

    #[test]
    fn figures_are_per_operation_less_the_measuring_overhead() {
        let console = "selftest | microbench: EL1\nmicrobench | bench loop iterations=1000 ns=5000\n\
                       microbench | bench hvc-unknown iterations=1000 ns=105000\nbench broken iterations=x ns=1\n\
                       microbench | latency counter samples=100 ns=800\n\
                       microbench | latency virtual-ipi samples=100 ns=60800\n";
        let f = parse(console);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f.get("hvc-unknown"), Some(&100.0));
        assert_eq!(f.get("virtual-ipi"), Some(&600.0));
    }
}
