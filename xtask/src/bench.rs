//! `cargo xtask bench`: the hypervisor's costs in instructions (`-icount shift=0`), next to
//! the same guest run directly on QEMU without it. Prints a table and writes
//! `target/bench/micro.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
        name: "linux".into(),
        vcpus: 2,
        memory: 512 << 20,
        kernel: linux.kernel.clone(),
        initrd: Some(linux.initrd.clone()),
        bootargs: Some(bootargs.into()),
        device_tree: None,
        devices,
    }
}

/// Instructions from QEMU's start until the Linux guest's shell is ready.
#[derive(Clone, Copy, Debug)]
pub struct BootFigures {
    pub under: f64,
    pub native: f64,
}

/// Linux boot to its shell, under the hypervisor (2 vCPUs on 2 CPUs) and directly on QEMU
/// (2 CPUs), same kernel, initramfs and command line. The guest prints its virtual count
/// when its shell is ready (`/bin/cntvct`); under the hypervisor the VM's counter started at
/// its creation, so the count the hypervisor reports then is added. Counts become
/// instructions with the counter frequency the kernel reports (1 instruction = 1 ns).
pub fn linux_boot() -> Result<BootFigures, XtaskError> {
    let hyp = images::build_hypervisor()?;
    let linux = linux_guest::debian_arm64()?;
    let vm = linux_vm(&linux, linux_guest::BOOTARGS, VmDevices::default());
    let bundle_path = bundle::write_file("linux-boot-bench", &[vm], &BundleOptions::default())?;
    let machine = Machine { smp: 2, icount: true, ..Machine::default() };
    step("booting Linux to its shell under the hypervisor (-icount shift=0)");
    let under = boot_instructions(machine.command(&hyp, Some(&bundle_path)), true)?;
    step("booting Linux to its shell directly on QEMU (-icount shift=0)");
    let mut cmd =
        Machine { virtualization: false, memory_mib: 512, ..machine }.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(linux_guest::BOOTARGS);
    let native = boot_instructions(cmd, false)?;
    Ok(BootFigures { under, native })
}

fn boot_instructions(cmd: std::process::Command, under_hypervisor: bool) -> Result<f64, XtaskError> {
    let mut s = qemu::Session::start(cmd, TIMEOUT, false)?;
    let mut after = |marker: &str, end: &str| -> Result<String, XtaskError> {
        s.wait_for(marker, TIMEOUT).and_then(|_| s.wait_for(end, TIMEOUT)).map_err(XtaskError::Failed)
    };
    let number = |text: String, what: &str| -> Result<f64, XtaskError> {
        text.trim().parse::<f64>().map_err(|_| XtaskError::Failed(format!("{what}: `{text}` is not a number")))
    };
    let offset = if under_hypervisor {
        number(after("its virtual counter starts at physical count ", "\n")?, "the VM's counter offset")?
    } else {
        0.0
    };
    let mhz = number(after("timer(s) running at ", "MHz")?, "the counter frequency")?;
    let count = number(after("shell ready at virtual count ", "\n")?, "the count at the shell")?;
    if under_hypervisor {
        step(&format!(
            "  {:.0}M instructions before the VM was created, {:.0}M in the VM to its shell",
            offset * 1000.0 / mhz / 1e6,
            count * 1000.0 / mhz / 1e6
        ));
    }
    Ok((offset + count) * 1000.0 / mhz)
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

/// Bytes each throughput figure moves.
const IO_BYTES: usize = 64 << 20;

pub fn virtio_io() -> Result<(IoFigures, IoFigures), XtaskError> {
    let hyp = images::build_hypervisor()?;
    let linux = linux_guest::debian_arm64()?;
    let bench_dir = images::workspace_root().join("target").join("bench");
    let disk = bench_dir.join("io-disk.img");
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
    step("virtio throughput under the hypervisor (dd with O_DIRECT, TCP from the host)");
    let under = io_run(machine.command(&hyp, Some(&bundle_path)), port)?;
    step("virtio throughput with QEMU's devices given straight to the guest");
    let mut cmd =
        Machine { virtualization: false, memory_mib: 512, ..machine }.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(&bootargs);
    let native = io_run(cmd, port)?;
    Ok((under, native))
}

/// Boots, runs the three transfers, powers off.
fn io_run(cmd: std::process::Command, port: u16) -> Result<IoFigures, XtaskError> {
    let mut s = qemu::Session::start(cmd, TIMEOUT, false)?;
    s.wait_for("guest: shell ready", TIMEOUT).map_err(XtaskError::Failed)?;
    s.wait_for("/ # ", TIMEOUT).map_err(XtaskError::Failed)?;
    let mut shell = |command: &str| -> Result<String, XtaskError> {
        s.send_line(&format!("{command}; echo @@io$((6*7))")).map_err(XtaskError::Failed)?;
        let out = s.wait_for("@@io42", TIMEOUT).map_err(XtaskError::Failed)?;
        s.wait_for("/ # ", TIMEOUT).map_err(XtaskError::Failed)?;
        Ok(out)
    };
    let count = IO_BYTES >> 20;
    // busybox dd prints no timing: the guest's virtual counter (real time without -icount)
    // is read around each transfer.
    let timed = |command: &str| {
        format!(
            "s=$(/bin/cntvct | od -An -tu8); {command} || echo FAILED; \
             e=$(/bin/cntvct | od -An -tu8); echo io-ticks $((e - s))"
        )
    };
    let write = shell(&timed(&format!("dd if=/dev/zero of=/dev/vda bs=1M count={count} oflag=direct 2>/dev/null")))?;
    let read = shell(&timed(&format!("dd if=/dev/vda of=/dev/null bs=1M count={count} iflag=direct 2>/dev/null")))?;
    shell("(nc -l -p 5001 > /dev/null &) ; sleep 1")?;
    let net_to_guest = send_to_guest(port)?;
    s.send_line("poweroff").map_err(XtaskError::Failed)?;
    let console = s.finish().console;
    let hz = counter_hz(&console)?;
    Ok(IoFigures { disk_write: io_rate(&write, hz)?, disk_read: io_rate(&read, hz)?, net_to_guest })
}

/// The guest's counter frequency, from the kernel's `arch_timer: ... running at 62.50MHz`.
fn counter_hz(console: &str) -> Result<f64, XtaskError> {
    console
        .split("timer(s) running at ")
        .nth(1)
        .and_then(|rest| rest.split("MHz").next())
        .and_then(|mhz| mhz.trim().parse::<f64>().ok())
        .map(|mhz| mhz * 1e6)
        .ok_or_else(|| XtaskError::Failed("the guest kernel did not say its counter frequency".into()))
}

/// MB/s of one IO_BYTES transfer that took `io-ticks N` counter ticks at `hz`.
pub fn io_rate(output: &str, hz: f64) -> Result<f64, XtaskError> {
    // The echoed command line says FAILED too: only a line of its own counts.
    if output.lines().any(|l| l.trim_start_matches("linux | ").trim() == "FAILED") {
        return Err(XtaskError::Failed(format!("the transfer failed in the guest:\n{output}")));
    }
    let ticks = output
        .lines()
        .filter_map(|l| l.split("io-ticks ").nth(1))
        .find_map(|t| t.trim().parse::<f64>().ok())
        .filter(|&t| t > 0.0)
        .ok_or_else(|| XtaskError::Failed(format!("no timing from the guest:\n{output}")))?;
    Ok(IO_BYTES as f64 / (ticks / hz) / 1e6)
}

/// Sends IO_BYTES to the guest's `nc -l` through QEMU's hostfwd and waits until the guest
/// closes the connection (it has read everything): MB/s.
fn send_to_guest(port: u16) -> Result<f64, XtaskError> {
    use std::io::{Read, Write};
    let failed = |e: std::io::Error| XtaskError::Failed(format!("TCP to the guest on 127.0.0.1:{port}: {e}"));
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(failed)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(failed)?;
    let chunk = vec![0x5au8; 1 << 16];
    let start = std::time::Instant::now();
    for _ in 0..IO_BYTES / chunk.len() {
        stream.write_all(&chunk).map_err(failed)?;
    }
    stream.shutdown(std::net::Shutdown::Write).map_err(failed)?;
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    Ok(IO_BYTES as f64 / start.elapsed().as_secs_f64() / 1e6)
}

/// The throughput figures as table rows and JSON.
pub fn io_report(under: &IoFigures, native: &IoFigures) -> Result<String, XtaskError> {
    let rows = [
        ("disk write (O_DIRECT)", under.disk_write, native.disk_write),
        ("disk read (O_DIRECT)", under.disk_read, native.disk_read),
        ("TCP host -> guest", under.net_to_guest, native.net_to_guest),
    ];
    let mut table =
        format!("{:<24} {:>10} {:>10} {:>8} {:>8} {:>5}\n", "MB/s", "hypervisor", "no hyp.", "ratio", "target", "met");
    let mut json = Vec::new();
    for (name, u, n) in rows {
        let ratio = u / n;
        let met = if ratio >= 0.8 { "yes" } else { "NO" };
        table.push_str(&format!("{name:<24} {u:>10.1} {n:>10.1} {ratio:>8.2} {:>8} {met:>5}\n", ">= 0.8"));
        json.push(format!(
            "    {{\"name\": \"{name}\", \"hypervisor\": {u:.2}, \"native\": {n:.2}, \"ratio\": {ratio:.3}}}"
        ));
    }
    let dir = images::workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("io.json");
    let body = format!("{{\n  \"unit\": \"MB/s (wall time)\",\n  \"io\": [\n{}\n  ]\n}}\n", json.join(",\n"));
    std::fs::write(&path, body).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(table)
}

/// The boot figures as table rows and JSON.
pub fn boot_report(boot: &BootFigures) -> Result<String, XtaskError> {
    let ratio = boot.under / boot.native;
    let table = format!(
        "{:<20} {:>12} {:>12} {:>10} {:>8}\n{:<20} {:>11.0}M {:>11.0}M {:>10} {:>8}\n{:<20} {:>12.3} {:>12} {:>10} {:>8}\n",
        "linux boot to shell",
        "hypervisor",
        "no hyp.",
        "target",
        "met",
        "  instructions",
        boot.under / 1e6,
        boot.native / 1e6,
        "-",
        "-",
        "  ratio",
        ratio,
        "1",
        "<= 1.05",
        if ratio <= 1.05 { "yes" } else { "NO" }
    );
    let json = format!(
        "{{\n  \"unit\": \"instructions (-icount shift=0)\",\n  \"linux_boot_to_shell\": {{\"hypervisor\": {:.0}, \"native\": {:.0}, \"ratio\": {ratio:.4}}}\n}}\n",
        boot.under, boot.native
    );
    let dir = images::workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("macro.json");
    std::fs::write(&path, json).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(table)
}

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
    let dir = images::workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("micro.json");
    std::fs::write(
        &path,
        format!(
            "{{\n  \"unit\": \"instructions per operation (-icount shift=0)\",\n  \"micro\": [\n{}\n  ]\n}}\n",
            json.join(",\n")
        ),
    )
    .map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_times_become_megabytes_per_second() {
        let out = "linux | s=$(...); dd ... || echo FAILED; echo io-ticks $((e - s))\nlinux | io-ticks 31250000\n";
        assert!((io_rate(out, 62.5e6).unwrap() - 134.217728).abs() < 1e-6, "64 MiB in 0.5 s");
        assert!(io_rate("linux | FAILED\nlinux | io-ticks 5\n", 62.5e6).is_err());
        assert!(io_rate("nothing", 62.5e6).is_err());
        let boot = "[    0.000000] arch_timer: cp15 timer(s) running at 62.50MHz (virt).";
        assert_eq!(counter_hz(boot).unwrap(), 62.5e6);
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
