//! `cargo xtask bench --io-trace`: the hypervisor's instructions per 1 MiB disk request,
//! counted exactly, CPU by CPU and on the side core function by function (docs/performance.md,
//! "The side core"). The side core's `busy ticks` (`io_cost`) are an upper bound only: under
//! `-icount` the counter also runs while QEMU runs the other CPUs in their turns.
//!
//! The run: the VM with a side core (CPU 2 of 3) under `-icount shift=0`, booted at QEMU's
//! usual speed; then, through QEMU's monitor, one instruction per translation block and the
//! `exec` log (filtered to the hypervisor's image with `-dfilter`) are turned on around each
//! window: an empty command (what measuring costs), `REQUESTS` O_DIRECT writes of 1 MiB, as
//! many reads. Each log line is one instruction; those at EL2 are counted per CPU, and on
//! the side core's CPU attributed to the function symbol that holds their address (with
//! LTO, the outermost function a hot path is inlined into).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

use super::trace::{exception_level, image_base, parse_exec, Code};
use super::{boot, bundle, images, linux_guest, linux_vm, side_core_vm, BundleOptions, Hypervisor, Machine, VmDevices};
use crate::util::step;
use crate::XtaskError;

/// 1 MiB requests of each traced disk window.
const REQUESTS: usize = 8;
/// Where QEMU `virt` loads the hypervisor with 1 GiB of RAM (checked against its banner):
/// the `-dfilter` range, given when QEMU starts.
const IMAGE_BASE: u64 = 0x4020_0000;
const IMAGE_SPAN: u64 = 0x40_0000;
/// The side core's CPU (`super::SIDE_CORE_CPU`).
const SIDE_CPU: u32 = 2;

/// One traced window: EL2 instructions per CPU, and the side core's by function.
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub name: String,
    pub requests: usize,
    pub per_cpu: BTreeMap<u32, u64>,
    /// Per CPU, its instructions by function.
    pub functions: BTreeMap<u32, BTreeMap<String, u64>>,
}

/// The function symbols of an ELF, by address: (start, end, name), sorted.
fn functions(elf: &[u8]) -> Result<Vec<(u64, u64, String)>, String> {
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

fn function_at(functions: &[(u64, u64, String)], offset: u64) -> &str {
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
        let name = function_at(functions, exec.pc - base);
        *window.functions.entry(exec.cpu).or_default().entry(name.to_string()).or_default() += 1;
    }
    Ok(())
}

/// Boots the side core's configuration and traces the windows.
pub fn run() -> Result<Vec<Window>, XtaskError> {
    let hyp = images::build_hypervisor(Hypervisor::TestHooks)?;
    let hyp_elf = std::fs::read(images::hypervisor_elf(Hypervisor::TestHooks))
        .map_err(|e| XtaskError::Build(format!("cannot read the hypervisor's ELF: {e}")))?;
    let linux = linux_guest::debian_arm64()?;
    let disk = super::bench_dir()?.join("io-trace-disk.img");
    super::allocated_disk(&disk, REQUESTS << 20)?;
    let vm = linux_vm(
        &linux,
        linux_guest::BOOTARGS,
        VmDevices { disk: Some(bundle::DiskSlice { offset: 0, size: 0 }), ..Default::default() },
    );
    let bundle_path = bundle::write_file("io-trace", &[side_core_vm(&vm)], &BundleOptions::default())?;
    let dir = super::bench_dir()?;
    let socket = std::env::temp_dir().join(format!("xtask-io-monitor-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let mut cmd =
        Machine { smp: 3, icount: true, disk: Some(disk), ..Machine::default() }.command(&hyp, Some(&bundle_path));
    cmd.args(["-dfilter", &format!("{IMAGE_BASE:#x}+{IMAGE_SPAN:#x}"), "-monitor"]);
    cmd.arg(format!("unix:{},server=on,wait=off", socket.display()));
    step(&format!(
        "tracing the side core's disk path: {REQUESTS} x 1 MiB O_DIRECT write and read, every EL2 instruction \
         (-icount shift=0, one instruction per block while traced)"
    ));
    let functions = functions(&hyp_elf).map_err(XtaskError::Failed)?;
    let mut b = boot(cmd, true)?;
    let banner = b.shell.s.console();
    let base = image_base(&banner).unwrap_or(IMAGE_BASE);
    if base != IMAGE_BASE {
        return Err(XtaskError::Failed(format!(
            "the hypervisor loaded at {base:#x}, not {IMAGE_BASE:#x}: -dfilter missed"
        )));
    }
    let code = Code::new(&hyp_elf, base).map_err(XtaskError::Failed)?;
    // Warm up (the first requests allocate the guest's page cache and the disk's blocks).
    b.shell.run("dd if=/dev/zero of=/dev/vda bs=1M count=2 oflag=direct 2>/dev/null")?;
    let windows = [
        ("empty command", ":".to_string(), 0),
        (
            "disk write",
            format!("dd if=/dev/zero of=/dev/vda bs=1M count={REQUESTS} oflag=direct 2>/dev/null"),
            REQUESTS,
        ),
        ("disk read", format!("dd if=/dev/vda of=/dev/null bs=1M count={REQUESTS} iflag=direct 2>/dev/null"), REQUESTS),
    ];
    let mut out = Vec::new();
    for (name, command, requests) in windows {
        let log = dir.join("io-trace.log");
        let _ = std::fs::remove_file(&log);
        let traced = (|| -> Result<Window, String> {
            super::trace::monitor(&socket, &format!("logfile {}", log.display()))?;
            super::trace::monitor(&socket, "one-insn-per-tb on")?;
            super::trace::monitor(&socket, "log exec,nochain")?;
            b.shell.run(&command).map_err(|e| e.to_string())?;
            super::trace::monitor(&socket, "log none")?;
            super::trace::monitor(&socket, "one-insn-per-tb off")?;
            let file = std::fs::File::open(&log).map_err(|e| format!("cannot open {}: {e}", log.display()))?;
            let mut w = Window { name: name.into(), requests, ..Window::default() };
            count(BufReader::with_capacity(1 << 20, file), &code, base, &functions, &mut w)?;
            Ok(w)
        })();
        let _ = std::fs::remove_file(&log);
        out.push(traced.map_err(|e| XtaskError::Failed(format!("tracing `{name}`: {e}")))?);
    }
    let _ = std::fs::remove_file(&socket);
    b.shell.power_off();
    write(&dir.join("io-trace.txt"), &report(&out))?;
    Ok(out)
}

fn write(path: &Path, text: &str) -> Result<PathBuf, XtaskError> {
    std::fs::write(path, text).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(path.to_path_buf())
}

/// Per window: each CPU's EL2 instructions per request (the empty command's as they are),
/// the side core's 25 costliest functions and the vCPUs' CPUs' 8.
pub fn report(windows: &[Window]) -> String {
    let mut s = String::new();
    for w in windows {
        let per = w.requests.max(1) as f64;
        let unit = if w.requests > 0 { " per 1 MiB request" } else { " in all" };
        let cpus: Vec<String> = w.per_cpu.iter().map(|(cpu, n)| format!("cpu{cpu} {:.0}", *n as f64 / per)).collect();
        s.push_str(&format!("{}: EL2 instructions{unit}: {}\n", w.name, cpus.join(", ")));
        for (cpu, functions) in &w.functions {
            s.push_str(&format!("  cpu{cpu}{}:\n", if *cpu == SIDE_CPU { " (the side core)" } else { "" }));
            let mut f: Vec<(&String, &u64)> = functions.iter().collect();
            f.sort_by(|a, b| b.1.cmp(a.1));
            for (name, n) in f.into_iter().take(if *cpu == SIDE_CPU { 25 } else { 8 }) {
                s.push_str(&format!("    {:>10.0}  {name}\n", *n as f64 / per));
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
    fn the_function_at_an_address_is_the_one_whose_range_holds_it() {
        let f = vec![(0x10, 0x20, "a".to_string()), (0x30, 0x40, "b".to_string())];
        assert_eq!(function_at(&f, 0x10), "a");
        assert_eq!(function_at(&f, 0x1f), "a");
        assert_eq!(function_at(&f, 0x20), "?");
        assert_eq!(function_at(&f, 0x3f), "b");
        assert_eq!(function_at(&f, 0x5), "?");
    }
}
