//! `cargo xtask bench`: the hypervisor's costs in instructions (`-icount shift=0`), next to
//! the same guest run directly on QEMU without it. Prints a table and writes
//! `target/bench/micro.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::bundle::{self, BundleOptions, VmEntry};
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
    };
    let blob = bundle::write(&[vm], &BundleOptions { semihosting_exit: true, test_el2_fault_cpu: None })?;
    let bundle_path = images::images_dir().join("microbench.bundle");
    std::fs::write(&bundle_path, blob)
        .map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", bundle_path.display())))?;
    let machine = Machine { smp: 2, icount: true, semihosting: true, ..Machine::default() };
    let under = run("under the hypervisor", machine.clone(), &hyp, Some(&bundle_path))?;
    let native =
        run("directly on QEMU", Machine { virtualization: false, semihosting: false, ..machine }, &guest, None)?;
    Ok((under, native))
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
    let vm = VmEntry {
        name: "linux".into(),
        vcpus: 2,
        memory: 512 << 20,
        kernel: linux.kernel.clone(),
        initrd: Some(linux.initrd.clone()),
        bootargs: Some(linux_guest::BOOTARGS.into()),
        device_tree: None,
    };
    let blob = bundle::write(&[vm], &BundleOptions::default())?;
    let bundle_path = images::images_dir().join("linux-boot-bench.bundle");
    std::fs::write(&bundle_path, blob)
        .map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", bundle_path.display())))?;
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
