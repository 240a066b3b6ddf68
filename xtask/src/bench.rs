//! `cargo xtask bench`: the hypervisor's costs in instructions (`-icount shift=0`), next to
//! the same guest run directly on QEMU without it: microbenchmarks, the Linux boot and a
//! CPU-bound workload, virtio throughput, and the hypervisor's exits per second by reason
//! during each Linux workload. Prints tables and writes `target/bench/`: `micro.json`,
//! `macro.json`, `io.json`, `exits.json` and the chart `ratios.svg`.

pub mod chart;
pub mod exits;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use self::chart::{Bar, Target};
use self::exits::{ExitSnapshot, WorkloadExits};
use crate::bundle::{self, BundleOptions, VmDevices, VmEntry};
use crate::qemu::{self, Machine};
use crate::util::step;
use crate::XtaskError;
use crate::{images, linux_guest};

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

/// Targets from the benchmark issue, in instructions.
fn target(name: &str) -> Option<f64> {
    match name {
        "hvc-unknown" | "hvc-smccc-version" => Some(150.0),
        "mmio-read" | "gicd-read" => Some(300.0),
        "virtual-ipi" => Some(1100.0),
        _ => None,
    }
}

fn run(what: &str, machine: Machine, kernel: &PathBuf, initrd: Option<&PathBuf>) -> Result<Figures, XtaskError> {
    step(&format!("running the microbenchmarks {what} (-icount shift=0)"));
    let mut cmd = machine.command(kernel, initrd);
    if initrd.is_none() {
        cmd.arg("-append").arg("");
    }
    let out = qemu::run_captured(cmd, TIMEOUT, false)?;
    if out.timed_out || out.status != Some(0) || !out.console.contains("microbench: done") {
        return Err(XtaskError::Failed(format!(
            "microbenchmarks {what} did not complete (status {:?}):\n{}",
            out.status, out.console
        )));
    }
    Ok(parse(&out.console))
}

pub fn micro() -> Result<(Figures, Figures), XtaskError> {
    let hyp = images::build_hypervisor()?;
    let guest = images::build_test_guest("microbench")?;
    let vm = VmEntry {
        name: "microbench".into(),
        vcpus: 2,
        memory: 64 << 20,
        kernel: guest.clone(),
        initrd: None,
        bootargs: None,
        device_tree: None,
        devices: VmDevices::default(),
    };
    let bundle_path =
        bundle::write_file("microbench", &[vm], &BundleOptions { semihosting_exit: true, test_el2_fault_cpu: None })?;
    let machine = Machine { smp: 2, icount: true, semihosting: true, ..Machine::default() };
    let under = run("under the hypervisor", machine.clone(), &hyp, Some(&bundle_path))?;
    let native =
        run("directly on QEMU", Machine { virtualization: false, semihosting: false, ..machine }, &guest, None)?;
    Ok((under, native))
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

/// Ratio targets from the benchmark issue.
pub const BOOT_TARGET: Target = Target::AtMost(1.05);
pub const SHA256_TARGET: Target = Target::AtMost(1.01);
pub const IO_TARGET: Target = Target::AtLeast(0.8);

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
    let hyp = images::build_hypervisor()?;
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
    let mut shell = GuestShell { s: qemu::Session::start(cmd, RUN_LIMIT, false)? };
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

/// The counter ticks a `timed` command printed.
fn guest_ticks(output: &str) -> Result<f64, XtaskError> {
    // The echoed command line says FAILED too: only a line of its own counts.
    if output.lines().any(|l| strip_vm_name(l) == "FAILED") {
        return Err(XtaskError::Failed(format!("the command failed in the guest:\n{output}")));
    }
    output
        .lines()
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

/// Throughput of the guest's virtio devices in MB/s (wall time: under `-icount` virtual time
/// jumps while the guest waits for I/O), under the hypervisor and with the same QEMU devices
/// given straight to the guest.
#[derive(Clone, Copy, Debug, Default)]
pub struct IoFigures {
    pub disk_write: f64,
    pub disk_read: f64,
    pub net_to_guest: f64,
}

/// The throughput runs: both sides' figures, and the hypervisor's exits during each.
#[derive(Clone, Debug)]
pub struct IoRun {
    pub under: IoFigures,
    pub native: IoFigures,
    pub exits: Vec<WorkloadExits>,
}

/// Bytes each throughput figure moves.
const IO_BYTES: usize = 64 << 20;

pub fn virtio_io() -> Result<IoRun, XtaskError> {
    let hyp = images::build_hypervisor()?;
    let linux = linux_guest::debian_arm64()?;
    let disk = bench_dir()?.join("io-disk.img");
    let _ = std::fs::remove_file(&disk);
    images::create_disk(&disk, 2 * IO_BYTES as u64)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| XtaskError::Tool(format!("no free port on 127.0.0.1: {e}")))?;
    let bootargs = format!("{} {}", linux_guest::BOOTARGS, linux_guest::NETWORK_BOOTARGS);
    let machine = Machine { smp: 2, disk: Some(disk), network: Some(vec![(port, 5001)]), ..Machine::default() };
    let vm = linux_vm(
        &linux,
        &bootargs,
        VmDevices { disk: Some(bundle::DiskSlice { offset: 0, size: 0 }), network: Some(None), ..Default::default() },
    );
    let bundle_path = bundle::write_file("io-bench", &[vm], &BundleOptions::default())?;
    step("virtio throughput under the hypervisor (dd with O_DIRECT, TCP from the host), with its exits");
    let (under, exits) = io_run(machine.command(&hyp, Some(&bundle_path)), port, true)?;
    step("virtio throughput with QEMU's devices given straight to the guest");
    let mut cmd =
        Machine { virtualization: false, memory_mib: 512, ..machine }.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(&bootargs);
    let (native, _) = io_run(cmd, port, false)?;
    Ok(IoRun { under, native, exits })
}

/// Boots, runs the three transfers (with the hypervisor's exit counts around each when
/// `hypervisor`), powers off.
fn io_run(
    cmd: std::process::Command,
    port: u16,
    hypervisor: bool,
) -> Result<(IoFigures, Vec<WorkloadExits>), XtaskError> {
    let mut b = boot(cmd, hypervisor)?;
    let count = IO_BYTES >> 20;
    let mut exits = Vec::new();
    let mut rates = Vec::new();
    for (workload, command) in [
        ("disk write", format!("dd if=/dev/zero of=/dev/vda bs=1M count={count} oflag=direct 2>/dev/null")),
        ("disk read", format!("dd if=/dev/vda of=/dev/null bs=1M count={count} iflag=direct 2>/dev/null")),
    ] {
        let (out, window) = b.shell.measured(&timed(&command), hypervisor)?;
        let seconds = guest_ticks(&out)? / b.hz;
        rates.push(IO_BYTES as f64 / seconds / 1e6);
        if let Some(window) = window {
            exits.push(WorkloadExits {
                workload: workload.into(),
                clock: "wall (the guest's counter around dd)",
                seconds,
                exits: window,
            });
        }
    }
    b.shell.run("(nc -l -p 5001 > /dev/null &) ; sleep 1")?;
    let before = if hypervisor { Some(b.shell.exits(None)?) } else { None };
    let seconds = send_to_guest(port)?;
    if let Some(before) = before {
        let window = b.shell.exits(None)?.since(&before)?;
        exits.push(WorkloadExits {
            workload: "TCP receive".into(),
            clock: "wall (the host, from connect to the guest's close)",
            seconds,
            exits: window,
        });
    }
    b.shell.power_off();
    Ok((IoFigures { disk_write: rates[0], disk_read: rates[1], net_to_guest: IO_BYTES as f64 / seconds / 1e6 }, exits))
}

/// Sends IO_BYTES to the guest's `nc -l` through QEMU's hostfwd and waits until the guest
/// closes the connection (it has read everything): the seconds that took.
fn send_to_guest(port: u16) -> Result<f64, XtaskError> {
    use std::io::{Read, Write};
    let failed = |e: std::io::Error| XtaskError::Failed(format!("TCP to the guest on 127.0.0.1:{port}: {e}"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(failed)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(failed)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(failed)?;
    let chunk = vec![0x5au8; 1 << 16];
    let start = std::time::Instant::now();
    for _ in 0..IO_BYTES / chunk.len() {
        stream.write_all(&chunk).map_err(failed)?;
    }
    stream.shutdown(std::net::Shutdown::Write).map_err(failed)?;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    Ok(start.elapsed().as_secs_f64())
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
    let mut table =
        format!("{:<24} {:>10} {:>10} {:>8} {:>8} {:>5}\n", "MB/s", "hypervisor", "no hyp.", "ratio", "target", "met");
    let mut json = Vec::new();
    for (name, u, n) in io_rows(io) {
        let ratio = u / n;
        table.push_str(&format!(
            "{name:<24} {u:>10.1} {n:>10.1} {ratio:>8.2} {:>8} {:>5}\n",
            target_text(IO_TARGET),
            met(IO_TARGET, ratio)
        ));
        json.push(format!(
            "    {{\"name\": \"{name}\", \"hypervisor\": {u:.2}, \"native\": {n:.2}, \"ratio\": {ratio:.3}, \
             \"target\": \"{}\"}}",
            target_text(IO_TARGET)
        ));
    }
    let body = format!("{{\n  \"unit\": \"MB/s (wall time)\",\n  \"io\": [\n{}\n  ]\n}}\n", json.join(",\n"));
    write_bench_file("io.json", &body)?;
    Ok(table)
}

fn io_rows(io: &IoRun) -> [(&'static str, f64, f64); 3] {
    [
        ("disk write (O_DIRECT)", io.under.disk_write, io.native.disk_write),
        ("disk read (O_DIRECT)", io.under.disk_read, io.native.disk_read),
        ("TCP host -> guest", io.under.net_to_guest, io.native.net_to_guest),
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
        ("linux boot to shell", "linux_boot_to_shell", m.boot, BOOT_TARGET),
        ("sha256sum 64 MiB", "sha256sum_64mib", m.sha256, SHA256_TARGET),
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
        bars.extend(io_rows(io).into_iter().map(|(name, u, n)| Bar {
            label: name.replace(" (O_DIRECT)", "").replace("->", "→"),
            ratio: u / n,
            target: Some(IO_TARGET),
        }));
    }
    write_bench_file("ratios.svg", &chart::svg("hypervisor / no hypervisor (cargo xtask bench)", &bars))
}

/// The microbenchmark figures as table rows, and `target/bench/micro.json`.
pub fn report(under: &Figures, native: &Figures) -> Result<String, XtaskError> {
    let mut table = String::new();
    table.push_str(&format!(
        "{:<20} {:>12} {:>12} {:>10} {:>8}\n",
        "instructions/op", "hypervisor", "no hyp.", "target", "met"
    ));
    let mut json = Vec::new();
    for (name, value) in under {
        let reference = native.get(name).copied();
        let target = target(name);
        let met = target.map_or("-", |t| if *value <= t { "yes" } else { "NO" });
        table.push_str(&format!(
            "{:<20} {:>12.0} {:>12} {:>10} {:>8}\n",
            name,
            value,
            reference.map_or("-".into(), |r| format!("{r:.0}")),
            target.map_or("-".into(), |t| format!("<= {t:.0}")),
            met
        ));
        json.push(format!(
            "    {{\"name\": \"{name}\", \"hypervisor\": {value:.1}, \"native\": {}, \"target\": {}}}",
            reference.map_or("null".into(), |r| format!("{r:.1}")),
            target.map_or("null".into(), |t| format!("{t:.0}"))
        ));
    }
    write_bench_file(
        "micro.json",
        &format!(
            "{{\n  \"unit\": \"instructions per operation (-icount shift=0)\",\n  \"micro\": [\n{}\n  ]\n}}\n",
            json.join(",\n")
        ),
    )?;
    Ok(table)
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
