//! `cargo xtask bench --io-trace`: the hypervisor's instructions per 1 MiB disk request and
//! per TCP packet received and sent, counted exactly, CPU by CPU and function by function,
//! with and without a side core (docs/performance.md, "The side core"). The side core's
//! `busy ticks` (`io_cost`) are an upper bound only: under `-icount` the counter also runs
//! while QEMU runs the other CPUs in their turns.
//!
//! The run, for each configuration (the VM alone on 2 CPUs; with a side core, CPU 2 of 3):
//! the VM under `-icount shift=0`, booted at QEMU's usual speed; then, through QEMU's
//! monitor, one instruction per translation block and the `exec` log (filtered to the
//! hypervisor's image with `-dfilter`) are turned on around each window: an empty command
//! typed as long as the disk's (what measuring costs: the shell, the typed characters'
//! echo on the emulated UART), `REQUESTS` O_DIRECT writes of 1 MiB, as many reads,
//! `NET_BYTES` the host sends over TCP and as many the guest sends the host. Each log line
//! is one instruction; those at EL2 are counted per CPU and attributed to the function
//! symbol that holds their address (with LTO, the outermost function a hot path is inlined
//! into).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

use super::trace::{exception_level, image_base, parse_exec, Code};
use super::{
    boot, bundle, images, linux_guest, linux_vm, side_core_vm, BundleOptions, Hypervisor, Machine, VmDevices,
    NET_GUEST_PORT,
};
use crate::util::step;
use crate::XtaskError;

/// 1 MiB requests of each traced disk window.
const REQUESTS: usize = 8;
/// Bytes of each traced TCP window, the host's to the guest and the guest's to the host.
const NET_BYTES: usize = 4 << 20;
/// Where QEMU `virt` loads the hypervisor with 1 GiB of RAM (checked against its banner):
/// the `-dfilter` range, given when QEMU starts.
const IMAGE_BASE: u64 = 0x4020_0000;
const IMAGE_SPAN: u64 = 0x40_0000;
/// The side core's CPU (`super::SIDE_CORE_CPU`).
const SIDE_CPU: u32 = 2;

/// One traced window: EL2 instructions per CPU, and each CPU's by function.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// The configuration ("hypervisor", "side core").
    pub config: &'static str,
    pub name: String,
    /// Its units: 1 MiB requests, or packets the guest received or sent (0: the empty
    /// command).
    pub requests: usize,
    /// What a unit is.
    pub unit: &'static str,
    pub per_cpu: BTreeMap<u32, u64>,
    /// Per CPU, its instructions by function.
    pub functions: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Per CPU, its instructions by address (offset in the image): a CPU that spins on a
    /// lock shows as a few addresses that hold most of its count.
    pub addresses: BTreeMap<u32, BTreeMap<u64, u64>>,
    /// Calls of the bounds check of a buffer of the VM's RAM (`CHECK`), on any CPU: one for
    /// each buffer of a chain the device models walked and for each indirect table. A disk
    /// request's cost is mostly per buffer, and how many buffers a 1 MiB request makes
    /// changes from boot to boot, so its instructions per buffer are what compare.
    pub buffers_checked: u64,
}

/// The function whose calls `Window::buffers_checked` counts (its first instruction
/// executed).
const CHECK: &str = "_<hyp_arch_arm::identity_map::GuestRam as vdev::virtio::memory::GuestMemory>::check";

/// The function symbols of an ELF, by address: (start, end, name), sorted.
pub(crate) fn functions(elf: &[u8]) -> Result<Vec<(u64, u64, String)>, String> {
    let file = object::File::parse(elf).map_err(|e| format!("the hypervisor's ELF: {e}"))?;
    let mut f: Vec<(u64, u64, String)> = file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| Some((s.address(), s.address() + s.size(), demangle(s.name().ok()?))))
        .collect();
    f.sort();
    Ok(f)
}

/// A legacy-mangled Rust name (`_ZN4core3ptr13drop_in_place17h0123E`) as its path without
/// the hash (`core::ptr::drop_in_place`); anything else as it is.
pub fn demangle(name: &str) -> String {
    let Some(mut rest) = name.strip_prefix("_ZN") else { return name.to_string() };
    let mut parts = Vec::new();
    while let Some(digits) = rest.find(|c: char| !c.is_ascii_digit()).filter(|&n| n > 0) {
        let Ok(len) = rest[..digits].parse::<usize>() else { break };
        let Some(part) = rest.get(digits..digits + len) else { break };
        parts.push(part);
        rest = &rest[digits + len..];
    }
    if parts.last().is_some_and(|p| p.len() == 17 && p.starts_with('h')) {
        parts.pop();
    }
    parts.join("::").replace("$LT$", "<").replace("$GT$", ">").replace("$u20$", " ").replace("..", "::")
}

/// Whether `offset` is the first instruction of a function named `name`.
fn is_entry_of(functions: &[(u64, u64, String)], offset: u64, name: &str) -> bool {
    let i = functions.partition_point(|f| f.0 < offset);
    functions.get(i).is_some_and(|(start, _, n)| *start == offset && n == name)
}

pub(crate) fn function_at(functions: &[(u64, u64, String)], offset: u64) -> &str {
    let i = functions.partition_point(|f| f.0 <= offset);
    match i.checked_sub(1).map(|i| &functions[i]) {
        Some((start, end, name)) if (*start..*end).contains(&offset) => name,
        _ => "?",
    }
}

/// Counts one window's log.
pub fn count(
    log: impl BufRead,
    code: &Code,
    base: u64,
    functions: &[(u64, u64, String)],
    window: &mut Window,
) -> Result<(), String> {
    for line in log.lines() {
        let line = line.map_err(|e| format!("reading the trace: {e}"))?;
        let Some(exec) = parse_exec(&line) else { continue };
        if exception_level(exec.flags) != Some(2) || code.word(exec.pc).is_none() {
            continue;
        }
        *window.per_cpu.entry(exec.cpu).or_default() += 1;
        *window.addresses.entry(exec.cpu).or_default().entry(exec.pc - base).or_default() += 1;
        let name = function_at(functions, exec.pc - base);
        *window.functions.entry(exec.cpu).or_default().entry(name.to_string()).or_default() += 1;
        if name == CHECK && is_entry_of(functions, exec.pc - base, CHECK) {
            window.buffers_checked += 1;
        }
    }
    Ok(())
}

/// Traces both configurations' windows, each in a boot of its own.
pub fn run() -> Result<Vec<Window>, XtaskError> {
    let hyp = images::build_hypervisor(Hypervisor::TestHooks)?;
    let hyp_elf = std::fs::read(images::hypervisor_elf(Hypervisor::TestHooks))
        .map_err(|e| XtaskError::Build(format!("cannot read the hypervisor's ELF: {e}")))?;
    let functions = functions(&hyp_elf).map_err(XtaskError::Failed)?;
    let linux = linux_guest::debian_arm64()?;
    let disk = super::bench_dir()?.join("io-trace-disk.img");
    super::allocated_disk(&disk, REQUESTS << 20)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| XtaskError::Tool(format!("no free port on 127.0.0.1: {e}")))?;
    let vm = linux_vm(
        &linux,
        &format!("{} {}", linux_guest::BOOTARGS, linux_guest::NETWORK_BOOTARGS),
        VmDevices { disk: Some(bundle::DiskSlice { offset: 0, size: 0 }), network: Some(None), ..Default::default() },
    );
    let mut out = Vec::new();
    for (config, vm, smp) in [("hypervisor", vm.clone(), 2), ("side core", side_core_vm(&vm), 3)] {
        step(&format!(
            "tracing the virtio paths, {config}: {REQUESTS} x 1 MiB O_DIRECT write and read, {} MiB TCP from the \
             host and to it, every EL2 instruction (-icount shift=0, one instruction per block while traced)",
            NET_BYTES >> 20
        ));
        let bundle_path = bundle::write_file(&format!("io-trace-{smp}"), &[vm], &BundleOptions::default())?;
        let machine = Machine {
            smp,
            icount: true,
            disk: Some(disk.clone()),
            network: Some(vec![(port, NET_GUEST_PORT)]),
            ..Machine::default()
        };
        out.extend(trace_config(machine.command(&hyp, Some(&bundle_path)), config, port, &hyp_elf, &functions)?);
    }
    write(&super::bench_dir()?.join("io-trace.txt"), &report(&out))?;
    Ok(out)
}

/// One configuration's boot and windows.
fn trace_config(
    mut cmd: std::process::Command,
    config: &'static str,
    port: u16,
    hyp_elf: &[u8],
    functions: &[(u64, u64, String)],
) -> Result<Vec<Window>, XtaskError> {
    let socket = std::env::temp_dir().join(format!("xtask-io-monitor-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    cmd.args(["-dfilter", &format!("{IMAGE_BASE:#x}+{IMAGE_SPAN:#x}"), "-monitor"]);
    cmd.arg(format!("unix:{},server=on,wait=off", socket.display()));
    let mut b = boot(cmd, true)?;
    let banner = b.shell.s.console();
    let base = image_base(&banner).unwrap_or(IMAGE_BASE);
    if base != IMAGE_BASE {
        return Err(XtaskError::Failed(format!(
            "the hypervisor loaded at {base:#x}, not {IMAGE_BASE:#x}: -dfilter missed"
        )));
    }
    let code = Code::new(hyp_elf, base).map_err(XtaskError::Failed)?;
    let dir = super::bench_dir()?;
    // Traced around `what`, a window of `units` units.
    let traced = |name: &str, unit: &'static str, what: &mut dyn FnMut() -> Result<usize, XtaskError>| {
        let log = dir.join("io-trace.log");
        let _ = std::fs::remove_file(&log);
        let result = (|| -> Result<Window, String> {
            super::trace::monitor(&socket, &format!("logfile {}", log.display()))?;
            super::trace::monitor(&socket, "one-insn-per-tb on")?;
            super::trace::monitor(&socket, "log exec,nochain")?;
            let units = what().map_err(|e| e.to_string())?;
            super::trace::monitor(&socket, "log none")?;
            super::trace::monitor(&socket, "one-insn-per-tb off")?;
            let file = std::fs::File::open(&log).map_err(|e| format!("cannot open {}: {e}", log.display()))?;
            let mut w = Window { config, name: name.into(), requests: units, unit, ..Window::default() };
            count(BufReader::with_capacity(1 << 20, file), &code, base, functions, &mut w)?;
            Ok(w)
        })();
        // XTASK_KEEP_TRACE=1 keeps each window's log (1 to 3 GB), to be read by hand.
        if std::env::var_os("XTASK_KEEP_TRACE").is_some() {
            let kept = dir.join(format!("io-trace-{}-{}.log", config.replace(' ', "-"), name.replace(' ', "-")));
            let _ = std::fs::rename(&log, kept);
        }
        let _ = std::fs::remove_file(&log);
        result.map_err(|e| XtaskError::Failed(format!("tracing `{name}` ({config}): {e}")))
    };
    // Warm up (the first requests allocate the guest's page cache and the disk's blocks).
    b.shell.run("dd if=/dev/zero of=/dev/vda bs=1M count=2 oflag=direct 2>/dev/null")?;
    let write_dd = format!("dd if=/dev/zero of=/dev/vda bs=1M count={REQUESTS} oflag=direct 2>/dev/null");
    let read_dd = format!("dd if=/dev/vda of=/dev/null bs=1M count={REQUESTS} iflag=direct 2>/dev/null");
    let mut out = Vec::new();
    // The empty command is the write's, behind `:` (which runs nothing): the same
    // characters typed and echoed, so that the windows less it are the requests' alone.
    for (name, command, units) in [
        ("empty command", format!(": {write_dd}"), 0),
        ("disk write", write_dd.clone(), REQUESTS),
        ("disk read", read_dd, REQUESTS),
    ] {
        let shell = &mut b.shell;
        out.push(traced(name, "1 MiB request", &mut || shell.run(&command).map(|_| units))?);
    }
    super::listen_in_guest(&mut b.shell)?;
    let before = super::packet_counts(&mut b.shell)?.0;
    let shell = &mut b.shell;
    let mut tcp =
        traced("TCP receive", "packet received", &mut || super::send_to_guest(shell, port, NET_BYTES).map(|_| 0))?;
    tcp.requests = (super::packet_counts(&mut b.shell)?.0.saturating_sub(before) as usize).max(1);
    out.push(tcp);
    super::serve_from_guest(&mut b.shell, NET_BYTES)?;
    let before = super::packet_counts(&mut b.shell)?.1;
    let mut tcp = traced("TCP send", "packet sent", &mut || super::receive_from_guest(port, NET_BYTES).map(|_| 0))?;
    tcp.requests = (super::packet_counts(&mut b.shell)?.1.saturating_sub(before) as usize).max(1);
    out.push(tcp);
    let _ = std::fs::remove_file(&socket);
    b.shell.power_off();
    Ok(out)
}

fn write(path: &Path, text: &str) -> Result<PathBuf, XtaskError> {
    std::fs::write(path, text).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(path.to_path_buf())
}

/// Per configuration and window: each CPU's EL2 instructions per unit (the empty command's
/// in all), a disk window's less the empty command's, and each CPU's costliest functions
/// (25 on the side core, 8 on the others).
pub fn report(windows: &[Window]) -> String {
    let mut s = String::new();
    for w in windows {
        let per = w.requests.max(1) as f64;
        let unit = if w.requests > 0 { format!(" per {} ({})", w.unit, w.requests) } else { " in all".to_string() };
        let cpus: Vec<String> = w.per_cpu.iter().map(|(cpu, n)| format!("cpu{cpu} {:.0}", *n as f64 / per)).collect();
        s.push_str(&format!("{}, {}: EL2 instructions{unit}: {}\n", w.config, w.name, cpus.join(", ")));
        let empty = windows.iter().find(|e| e.config == w.config && e.requests == 0);
        if let Some(empty) = empty.filter(|_| w.requests > 0 && w.unit == "1 MiB request") {
            let less = |n: u64, cpu: &u32| n.saturating_sub(empty.per_cpu.get(cpu).copied().unwrap_or(0)) as f64 / per;
            let cpus: Vec<String> = w.per_cpu.iter().map(|(cpu, n)| format!("cpu{cpu} {:.0}", less(*n, cpu))).collect();
            let all: f64 = w.per_cpu.iter().map(|(cpu, n)| less(*n, cpu)).sum();
            s.push_str(&format!("  less the empty command: {} (all {all:.0})\n", cpus.join(", ")));
            if w.buffers_checked > 0 {
                let buffers = w.buffers_checked as f64 / per;
                s.push_str(&format!(
                    "  buffers checked per request: {buffers:.1}; less the empty command, per buffer: {:.1}\n",
                    all / buffers
                ));
            }
        }
        for (cpu, functions) in &w.functions {
            let side = w.config == "side core" && *cpu == SIDE_CPU;
            s.push_str(&format!("  cpu{cpu}{}:\n", if side { " (the side core)" } else { "" }));
            let mut f: Vec<(&String, &u64)> = functions.iter().collect();
            f.sort_by(|a, b| b.1.cmp(a.1));
            for (name, n) in f.into_iter().take(if side { 25 } else { 8 }) {
                s.push_str(&format!("    {:>10.0}  {name}\n", *n as f64 / per));
            }
            // The hottest addresses, when one holds a tenth of the CPU's count (a spin).
            let total = w.per_cpu.get(cpu).copied().unwrap_or(0);
            let mut hot: Vec<(&u64, &u64)> = w.addresses.get(cpu).map(|a| a.iter().collect()).unwrap_or_default();
            hot.sort_by(|a, b| b.1.cmp(a.1));
            if hot.first().is_some_and(|(_, n)| **n * 10 >= total && total > 0) {
                let hot: Vec<String> =
                    hot.iter().take(4).map(|(a, n)| format!("{a:#x} {:.0}", **n as f64 / per)).collect();
                s.push_str(&format!("    hottest image offsets: {}\n", hot.join(", ")));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_mangled_name_is_its_path_without_the_hash() {
        assert_eq!(demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"), "core::ptr::drop_in_place");
        assert_eq!(
            demangle("_ZN4vdev6virtio5chain10read_chain17h0123456789abcdefE"),
            "vdev::virtio::chain::read_chain"
        );
        assert_eq!(demangle("memcpy"), "memcpy");
    }

    #[test]
    fn a_disk_window_is_reported_per_request_and_less_the_empty_command_of_its_configuration() {
        let window = |config, name: &str, requests, unit, cpus: &[(u32, u64)]| Window {
            config,
            name: name.into(),
            requests,
            unit,
            per_cpu: cpus.iter().copied().collect(),
            ..Window::default()
        };
        let windows = [
            window("hypervisor", "empty command", 0, "1 MiB request", &[(0, 800), (1, 80)]),
            window("hypervisor", "disk write", 8, "1 MiB request", &[(0, 8_800), (1, 160)]),
            window("side core", "empty command", 0, "1 MiB request", &[(0, 400), (2, 1_600)]),
            Window {
                buffers_checked: 800,
                ..window("side core", "disk write", 8, "1 MiB request", &[(0, 4_400), (2, 9_600)])
            },
            window("side core", "TCP receive", 100, "packet received", &[(0, 1_000), (2, 5_000)]),
        ];
        let report = report(&windows);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(
            lines,
            [
                "hypervisor, empty command: EL2 instructions in all: cpu0 800, cpu1 80",
                "hypervisor, disk write: EL2 instructions per 1 MiB request (8): cpu0 1100, cpu1 20",
                "  less the empty command: cpu0 1000, cpu1 10 (all 1010)",
                "side core, empty command: EL2 instructions in all: cpu0 400, cpu2 1600",
                "side core, disk write: EL2 instructions per 1 MiB request (8): cpu0 550, cpu2 1200",
                "  less the empty command: cpu0 500, cpu2 1000 (all 1500)",
                "  buffers checked per request: 100.0; less the empty command, per buffer: 15.0",
                "side core, TCP receive: EL2 instructions per packet received (100): cpu0 10, cpu2 50",
            ]
        );
    }

    #[test]
    fn the_function_at_an_address_is_the_one_whose_range_holds_it() {
        let f = vec![(0x10, 0x20, "a".to_string()), (0x30, 0x40, "b".to_string())];
        assert!(is_entry_of(&f, 0x30, "b") && is_entry_of(&f, 0x10, "a"));
        assert!(!is_entry_of(&f, 0x34, "b") && !is_entry_of(&f, 0x30, "a") && !is_entry_of(&f, 0x50, "b"));
        assert_eq!(function_at(&f, 0x10), "a");
        assert_eq!(function_at(&f, 0x1f), "a");
        assert_eq!(function_at(&f, 0x20), "?");
        assert_eq!(function_at(&f, 0x3f), "b");
        assert_eq!(function_at(&f, 0x5), "?");
    }
}
