//! `cargo xtask bench --scale`: many small Linux VMs on one board (docs/performance.md,
//! "Scale"). 32 VMs of 1 vCPU and 128 MiB, 8 sharing each CPU of a 4-CPU `virt` board with
//! 8 GiB: every one must reach its shell, answer a command and a ping; the run reports each
//! VM's boot time against one VM booting alone on the same board, each VM's share of its CPU
//! while all of them run a CPU-bound loop, the hypervisor's heap per VM and the boot
//! bundle's size. The system test `tests/scale.rs` runs the same code smaller (8 VMs on 2
//! CPUs).
//!
//! Wall time, not `-icount`: under `-icount` QEMU runs the board's CPUs in turn on one host
//! thread, so 4 CPUs would look like one. Boot times are read from each guest's virtual
//! counter (its count when its shell is ready; the VM's counter starts at its creation), so
//! the host's console latency is not in them; they move with the host's load, the shares do
//! not (both sides of a share see the same host).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::Samples;
use crate::bundle::{self, BundleOptions, Placement, Policy, VmDevices, VmEntry};
use crate::images::{self, Hypervisor};
use crate::linux_guest;
use crate::qemu::{Machine, Session};
use crate::util::step;
use crate::XtaskError;

/// The shape of a scale run.
#[derive(Clone, Copy, Debug)]
pub struct ScaleConfig {
    pub vms: usize,
    /// The board's CPUs; VM i shares CPU i mod `cpus`.
    pub cpus: u32,
    pub board_memory_mib: u32,
    pub vm_memory_mib: u64,
    /// How long every VM runs its CPU-bound loop while the shares are measured.
    pub load_seconds: u64,
}

impl ScaleConfig {
    /// The bench's run (issue: 32 VMs, 1 vCPU and 128 MiB each, on a 4-CPU board with 8 GiB).
    pub const BENCH: ScaleConfig =
        ScaleConfig { vms: 32, cpus: 4, board_memory_mib: 8192, vm_memory_mib: 128, load_seconds: 30 };
    /// The system test's: 8 VMs on 2 CPUs.
    pub const TEST: ScaleConfig =
        ScaleConfig { vms: 8, cpus: 2, board_memory_mib: 2048, vm_memory_mib: 128, load_seconds: 20 };
}

/// A share of a CPU is fair within this fraction of the mean share of the VMs on that CPU.
pub const FAIR_WITHIN: f64 = 0.05;

/// What one VM of the run did.
#[derive(Clone, Debug, PartialEq)]
pub struct VmFigures {
    pub name: String,
    pub cpu: u32,
    /// From its creation to its shell, by its own counter.
    pub boot_seconds: f64,
    /// It ran a command typed at its console and printed the answer.
    pub answered: bool,
    /// It answered a ping from another VM.
    pub pinged: bool,
    /// CPU time it got during the load window (the hypervisor's `list`).
    pub load_cpu_seconds: f64,
}

/// A whole scale run.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleRun {
    pub vms: Vec<VmFigures>,
    pub cpus: u32,
    /// One VM of the same shape booting alone on the same board.
    pub alone_boot_seconds: f64,
    /// The hypervisor heap in use (`list`) with one VM and with all of them, in KiB.
    pub heap_alone_kib: u64,
    pub heap_all_kib: u64,
    /// Stage-2 table frames of each VM when it was created (the hypervisor's log).
    pub stage2_frames: Vec<u64>,
    /// The boot bundle's size, and what it would be with a copy of the images per VM.
    pub bundle_bytes: u64,
    pub bundle_bytes_copy_per_vm: u64,
    pub load_seconds: f64,
    /// The counted cost of sharing a CPU, when it was measured too.
    pub sharing: Option<SharingCost>,
}

impl ScaleRun {
    /// Each VM's CPU time in the load window over the mean of the VMs on its CPU.
    pub fn shares(&self) -> Vec<(String, f64)> {
        let mut per_cpu: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for vm in &self.vms {
            per_cpu.entry(vm.cpu).or_default().push(vm.load_cpu_seconds);
        }
        let mean = |cpu: u32| {
            let times = &per_cpu[&cpu];
            times.iter().sum::<f64>() / times.len() as f64
        };
        self.vms.iter().map(|vm| (vm.name.clone(), vm.load_cpu_seconds / mean(vm.cpu))).collect()
    }

    /// The hypervisor's heap for each VM beyond the first.
    pub fn heap_per_vm_kib(&self) -> f64 {
        self.heap_all_kib.saturating_sub(self.heap_alone_kib) as f64 / (self.vms.len().max(2) - 1) as f64
    }

    /// What failed: VMs that did not answer or were not reached, shares outside
    /// [`FAIR_WITHIN`]. Empty when the run passed.
    pub fn failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        for vm in &self.vms {
            if !vm.answered {
                failed.push(format!("{} did not answer a command", vm.name));
            }
            if !vm.pinged {
                failed.push(format!("{} did not answer a ping", vm.name));
            }
        }
        for (name, share) in self.shares() {
            if (share - 1.0).abs() > FAIR_WITHIN {
                failed.push(format!("{name} got {share:.3} of a fair share of its CPU"));
            }
        }
        failed
    }
}

/// The VMs of a run: `vmNN`, 1 vCPU, shared on CPU i mod `cpus`, on the switch at
/// 10.0.2.(20 + i).
fn vm_entries(config: &ScaleConfig, linux: &linux_guest::LinuxGuest) -> Vec<VmEntry> {
    (0..config.vms)
        .map(|i| VmEntry {
            name: vm_name(i),
            vcpus: 1,
            memory: config.vm_memory_mib << 20,
            kernel: linux.kernel.clone(),
            initrd: Some(linux.initrd.clone()),
            bootargs: Some(format!("{} guest.ip={} guest.gw=10.0.2.2", linux_guest::BOOTARGS, address(i))),
            device_tree: None,
            devices: VmDevices {
                network: Some(None),
                placement: Placement {
                    cpus: Some(vec![i as u32 % config.cpus]),
                    policy: Some(Policy::Shared),
                    slice_us: None,
                },
                ..VmDevices::default()
            },
        })
        .collect()
}

fn vm_name(i: usize) -> String {
    format!("vm{i:02}")
}

fn address(i: usize) -> String {
    format!("10.0.2.{}", 20 + i)
}

/// Boots the VMs of `config`, then one alone, and measures them.
pub fn run(config: &ScaleConfig) -> Result<ScaleRun, XtaskError> {
    let hypervisor = images::build_hypervisor(Hypervisor::TestHooks)?;
    let linux = linux_guest::debian_arm64()?;
    let vms = vm_entries(config, &linux);
    let bundle_path = bundle::write_file("scale", &vms, &BundleOptions::default())?;
    let image_bytes = |p: &PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let per_vm_images = image_bytes(&linux.kernel) + image_bytes(&linux.initrd);
    let bundle_bytes = image_bytes(&bundle_path);
    let machine = Machine { smp: config.cpus, memory_mib: config.board_memory_mib, ..Machine::default() };

    step(&format!(
        "booting {} Linux VMs (1 vCPU, {} MiB each, {} to a CPU) on {} CPUs with {} MiB; boot bundle {} MiB",
        config.vms,
        config.vm_memory_mib,
        config.vms.div_ceil(config.cpus as usize),
        config.cpus,
        config.board_memory_mib,
        bundle_bytes >> 20
    ));
    let mut all = Board::boot(machine.command(&hypervisor, Some(&bundle_path)), config.vms)?;
    let (figures, heap_all_kib) = all.measure(config)?;
    let stage2_frames = all.stage2_frames.clone();
    drop(all); // stops QEMU

    step("booting one of them alone on the same board");
    let alone_path = bundle::write_file("scale-alone", &vms[..1], &BundleOptions::default())?;
    let mut alone = Board::boot(machine.command(&hypervisor, Some(&alone_path)), 1)?;
    let heap_alone_kib = alone.heap_kib()?;
    Ok(ScaleRun {
        alone_boot_seconds: alone.boot_seconds[0],
        vms: figures,
        cpus: config.cpus,
        heap_alone_kib,
        heap_all_kib,
        stage2_frames,
        bundle_bytes,
        bundle_bytes_copy_per_vm: bundle_bytes + per_vm_images * (config.vms as u64 - 1),
        load_seconds: config.load_seconds as f64,
        sharing: None,
    })
}

/// The cost of sharing a CPU, counted: `vms` VMs booting on one CPU under `-icount
/// shift=0,sleep=off`, against one alone. Virtual time is then an instruction count (and an
/// idle CPU jumps to its next deadline), so the figures are the same on any host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharingCost {
    pub vms: usize,
    /// Virtual seconds (1 ns per instruction) from creation to the shell, one VM alone.
    pub alone_seconds: f64,
    /// The same, for the last of `vms` VMs sharing the CPU to reach its shell.
    pub last_seconds: f64,
}

impl SharingCost {
    /// The last shell's time over `vms` boots alone: 1 when sharing costs nothing.
    pub fn ratio(&self) -> f64 {
        self.last_seconds / (self.alone_seconds * self.vms as f64)
    }
}

/// Boots `vms` VMs sharing one CPU, then one alone, under `-icount`.
pub fn sharing_cost(vms: usize) -> Result<SharingCost, XtaskError> {
    let hypervisor = images::build_hypervisor(Hypervisor::TestHooks)?;
    let linux = linux_guest::debian_arm64()?;
    let config = ScaleConfig { vms, cpus: 1, board_memory_mib: 1024, ..ScaleConfig::TEST };
    let entries = vm_entries(&config, &linux);
    let machine = Machine { smp: 1, memory_mib: config.board_memory_mib, icount: true, ..Machine::default() };
    let boot = |name: &str, entries: &[VmEntry]| -> Result<f64, XtaskError> {
        let path = bundle::write_file(name, entries, &BundleOptions::default())?;
        let board = Board::boot(machine.command(&hypervisor, Some(&path)), entries.len())?;
        Ok(board.boot_seconds.iter().copied().fold(0.0, f64::max))
    };
    step(&format!("booting {vms} Linux VMs sharing one CPU, then one alone, under -icount shift=0"));
    let last_seconds = boot("scale-sharing", &entries)?;
    let alone_seconds = boot("scale-sharing-alone", &entries[..1])?;
    Ok(SharingCost { vms, alone_seconds, last_seconds })
}

/// The sharing cost's row.
pub fn sharing_table(cost: &SharingCost) -> String {
    let n = cost.vms;
    let mut t = format!("\n| {n} VMs booting on one CPU (-icount shift=0) | instructions |\n|---|---:|\n");
    t += &format!("| one VM alone, creation to shell | {:.1} M |\n", cost.alone_seconds * 1e3);
    t += &format!("| the last of {n} sharing the CPU | {:.1} M |\n", cost.last_seconds * 1e3);
    t += &format!("| ratio to {n} boots alone (1 = sharing costs nothing) | {:.4} |\n", cost.ratio());
    t
}

/// The longest any one step may take (a boot of all VMs, a command, a ping).
const STEP_LIMIT: Duration = Duration::from_secs(900);
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// A running board of VMs, driven through its console and the management console; QEMU
/// is stopped when it is dropped.
struct Board {
    s: Session,
    vms: usize,
    /// The VM the console's input goes to.
    focus: usize,
    boot_seconds: Vec<f64>,
    stage2_frames: Vec<u64>,
}

impl Board {
    /// Starts QEMU and waits until each of the `vms` VMs' shells is ready.
    fn boot(cmd: std::process::Command, vms: usize) -> Result<Board, XtaskError> {
        let mut s = Session::start(cmd, STEP_LIMIT * 3, false)?;
        let ready: Vec<String> =
            (0..vms).map(|i| format!("{} | guest: shell ready at virtual count ", vm_name(i))).collect();
        let texts: Vec<&str> = ready.iter().map(String::as_str).collect();
        s.wait_for_all(&texts, STEP_LIMIT).map_err(|e| XtaskError::Failed(tail(&e)))?;
        // Every line has ended once the prompt of the last one is printed.
        std::thread::sleep(Duration::from_secs(2));
        let console = s.console();
        let hz = counter_hz(&console)?;
        let mut boot_seconds = Vec::new();
        let mut stage2_frames = Vec::new();
        for i in 0..vms {
            let name = vm_name(i);
            let count = shell_count(&console, &name)
                .ok_or_else(|| XtaskError::Failed(format!("{name}: no count at its shell")))?;
            boot_seconds.push(count / hz);
            let frames = after(&console, &format!("vm{i} {name}: "))
                .and_then(|line| line.split("stage-2 tables in ").nth(1).map(str::to_string))
                .and_then(|rest| rest.split(' ').next().and_then(|n| n.parse().ok()))
                .ok_or_else(|| XtaskError::Failed(format!("{name}: no stage-2 table count at its creation")))?;
            stage2_frames.push(frames);
        }
        Ok(Board { s, vms, focus: 0, boot_seconds, stage2_frames })
    }

    /// Commands, pings and the CPU shares under load; then the heap in use.
    fn measure(&mut self, config: &ScaleConfig) -> Result<(Vec<VmFigures>, u64), XtaskError> {
        step("  every VM answers a command at its console");
        let mut answered = Vec::new();
        for i in 0..self.vms {
            answered.push(
                self.ask(i, &format!("echo answer-$((40+2))-{}", vm_name(i)), &format!("answer-42-{}", vm_name(i)))
                    .is_ok(),
            );
        }
        step(&format!("  {} pings every other VM, and {} pings {}", vm_name(0), vm_name(1), vm_name(0)));
        let mut pinged = vec![false; self.vms];
        let peers: Vec<String> = (1..self.vms).map(address).collect();
        let script = format!(
            "for a in {}; do if ping -c 2 -W 5 $a >/dev/null; then echo pong-$a; fi; done; echo pings-$((1+1))",
            peers.join(" ")
        );
        if let Ok(out) = self.ask(0, &script, "pings-2") {
            for (i, peer) in peers.iter().enumerate() {
                pinged[i + 1] = out.lines().any(|l| l.trim_end().ends_with(&format!("pong-{peer}")));
            }
        }
        if self.vms > 1 {
            let script =
                format!("ping -c 2 -W 5 {} >/dev/null && echo pong-$((1+1)); echo pinged-$((1+1))", address(0));
            pinged[0] = self.ask(1, &script, "pinged-2").is_ok_and(|out| out.contains("pong-2"));
        }

        step(&format!("  a CPU-bound loop in every VM, then their CPU time over {} s", config.load_seconds));
        for i in 0..self.vms {
            self.ask(i, "(while :; do :; done) & echo spinning-$((1+1))", "spinning-2")?;
        }
        let before = self.cpu_times()?;
        std::thread::sleep(Duration::from_secs(config.load_seconds));
        let after = self.cpu_times()?;
        let heap = self.heap_kib()?;
        let figures = (0..self.vms)
            .map(|i| VmFigures {
                name: vm_name(i),
                cpu: i as u32 % config.cpus,
                boot_seconds: self.boot_seconds[i],
                answered: answered[i],
                pinged: pinged[i],
                load_cpu_seconds: after[i] - before[i],
            })
            .collect();
        Ok((figures, heap))
    }

    /// Moves the console to VM `i`, types `line`, and waits for `answer`, which the line
    /// must print but not contain (`echo done-$((1+1))` prints `done-2`: the echo of the
    /// typed line does not match); returns the output before it.
    fn ask(&mut self, i: usize, line: &str, answer: &str) -> Result<String, XtaskError> {
        if self.focus != i {
            self.management(&format!("focus {}", vm_name(i)))?;
            self.focus = i;
        }
        self.s.send_line(line).map_err(XtaskError::Failed)?;
        self.s.wait_for(answer, COMMAND_LIMIT).map_err(|e| XtaskError::Failed(tail(&e)))
    }

    fn management(&mut self, command: &str) -> Result<(), XtaskError> {
        let escape = hyp_core::management::ESCAPE as char;
        self.s.send_line(&format!("{escape}{command}")).map_err(XtaskError::Failed)
    }

    /// `list`: each VM's CPU time in seconds, and the heap line.
    fn list(&mut self) -> Result<String, XtaskError> {
        self.management("list")?;
        let first = format!("vm0 {}: ", vm_name(0));
        self.s.wait_for(&first, COMMAND_LIMIT).map_err(|e| XtaskError::Failed(tail(&e)))?;
        let listing = self.s.wait_for(" KiB in use", COMMAND_LIMIT).map_err(|e| XtaskError::Failed(tail(&e)))?;
        Ok(format!("{first}{listing} KiB in use"))
    }

    fn cpu_times(&mut self) -> Result<Vec<f64>, XtaskError> {
        let listing = self.list()?;
        (0..self.vms).map(|i| cpu_time(&listing, i)).collect()
    }

    fn heap_kib(&mut self) -> Result<u64, XtaskError> {
        heap_kib(&self.list()?)
    }
}

/// VM `i`'s CPU time in a `list` (`vmI NAME: running, ...; CPU time 12.345 s; ...`).
fn cpu_time(listing: &str, i: usize) -> Result<f64, XtaskError> {
    let line = listing
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("vm{i} {}: ", vm_name(i))))
        .ok_or_else(|| XtaskError::Failed(format!("`list` has no line for vm{i}:\n{listing}")))?;
    line.split("; CPU time ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| XtaskError::Failed(format!("no CPU time in `{line}`")))
}

/// The KiB in use of `list`'s last line (`heap: N KiB of M KiB in use`).
fn heap_kib(listing: &str) -> Result<u64, XtaskError> {
    listing
        .split("heap: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| XtaskError::Failed(format!("no heap line in `list`:\n{listing}")))
}

/// The counter frequency the first guest's kernel logs (`timer(s) running at 62.50MHz`).
fn counter_hz(console: &str) -> Result<f64, XtaskError> {
    after(console, "timer(s) running at ")
        .and_then(|rest| rest.split("MHz").next().and_then(|n| n.parse::<f64>().ok()))
        .map(|mhz| mhz * 1e6)
        .ok_or_else(|| XtaskError::Failed("no guest logged its counter frequency".into()))
}

/// The virtual count VM `name` printed when its shell was ready. The VM with the console
/// may show a line in part first (interrupted by another's) and then whole: the whole one
/// counts.
fn shell_count(console: &str, name: &str) -> Option<f64> {
    let marker = format!("{name} | guest: shell ready at virtual count ");
    console.lines().rev().find_map(|l| l.split_once(&marker)?.1.trim().parse().ok())
}

/// The rest of the first line of `text` that contains `marker`, after it.
fn after(text: &str, marker: &str) -> Option<String> {
    text.lines().find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim().to_string()))
}

/// The last lines of a failed wait's message (the console of 32 VMs is too long to show).
fn tail(message: &str) -> String {
    let lines: Vec<&str> = message.lines().collect();
    let (first, rest) = lines.split_first().map_or(("", &[][..]), |(f, r)| (*f, r));
    format!("{first}\n...\n{}", rest[rest.len().saturating_sub(60)..].join("\n"))
}

/// The report's table.
pub fn table(run: &ScaleRun) -> String {
    let boots = Samples::new(run.vms.iter().map(|v| v.boot_seconds).collect());
    let shares = Samples::new(run.shares().into_iter().map(|(_, s)| s).collect());
    let (Some(boots), Some(shares)) = (boots, shares) else {
        return "\nthe scale run has no VM\n".to_string();
    };
    let (boot_min, boot_median, boot_max) = (boots.min(), boots.median(), boots.max());
    let (share_min, share_max) = (shares.min(), shares.max());
    let answered = run.vms.iter().filter(|v| v.answered).count();
    let pinged = run.vms.iter().filter(|v| v.pinged).count();
    let n = run.vms.len();
    let per_cpu = n.div_ceil(run.cpus as usize);
    let frames = run.stage2_frames.iter().sum::<u64>() as f64 / run.stage2_frames.len().max(1) as f64;
    let fair = yes(shares.values().iter().all(|s| (s - 1.0).abs() <= FAIR_WITHIN));
    let mut t = format!("\n{n} Linux VMs, 1 vCPU each, {per_cpu} to a CPU on {} CPUs (wall time)\n\n", run.cpus);
    t += "| figure | value | target | met |\n|---|---:|---:|---|\n";
    t += &format!("| reached the shell and answered a command | {answered} of {n} | all | {} |\n", yes(answered == n));
    t += &format!("| answered a ping from another VM | {pinged} of {n} | all | {} |\n", yes(pinged == n));
    t += &format!("| boot to the shell, one VM alone | {:.1} s | | |\n", run.alone_boot_seconds);
    t += &format!(
        "| boot to the shell, all at once: min / median / max | {boot_min:.1} / {:.1} / {boot_max:.1} s ({:.1} / {:.1} / {:.1} x alone) | | |\n",
        boot_median,
        boot_min / run.alone_boot_seconds,
        boot_median / run.alone_boot_seconds,
        boot_max / run.alone_boot_seconds
    );
    t += &format!(
        "| CPU share under a CPU-bound loop in every VM, of fair ({} s): min / max | {share_min:.3} / {share_max:.3} | within {:.0}% | {fair} |\n",
        run.load_seconds,
        FAIR_WITHIN * 100.0
    );
    t += &format!(
        "| hypervisor heap per VM (stage-2 tables, vCPU, vGIC and device state) | {:.0} KiB | | |\n",
        run.heap_per_vm_kib()
    );
    t += &format!("| of which stage-2 tables at creation | {frames:.1} frames ({:.0} KiB) | | |\n", frames * 4.0);
    t += &format!("| hypervisor heap in use: one VM / all | {} / {} KiB | | |\n", run.heap_alone_kib, run.heap_all_kib);
    t += &format!(
        "| boot bundle | {:.1} MiB (a copy of the images per VM: {:.1} MiB) | | |\n",
        run.bundle_bytes as f64 / 1048576.0,
        run.bundle_bytes_copy_per_vm as f64 / 1048576.0
    );
    t
}

fn yes(met: bool) -> &'static str {
    if met {
        "yes"
    } else {
        "NO"
    }
}

/// Writes [`json`] to `target/bench/scale.json`.
pub fn write_json(run: &ScaleRun) -> Result<PathBuf, XtaskError> {
    super::write_bench_file("scale.json", &json(run))
}

/// `target/bench/scale.json`: every VM's figures and the run's.
pub fn json(run: &ScaleRun) -> String {
    let shares: BTreeMap<String, f64> = run.shares().into_iter().collect();
    let vms: Vec<String> = run
        .vms
        .iter()
        .map(|v| {
            format!(
                "    {{\"name\": \"{}\", \"cpu\": {}, \"boot_seconds\": {:.3}, \"answered\": {}, \"pinged\": {}, \
                 \"load_cpu_seconds\": {:.3}, \"share_of_fair\": {:.4}}}",
                v.name, v.cpu, v.boot_seconds, v.answered, v.pinged, v.load_cpu_seconds, shares[&v.name]
            )
        })
        .collect();
    format!(
        "{{\n  \"cpus\": {},\n  \"alone_boot_seconds\": {:.3},\n  \"load_seconds\": {},\n  \"heap_alone_kib\": {},\n  \
         \"heap_all_kib\": {},\n  \"heap_per_vm_kib\": {:.1},\n  \"stage2_frames\": {:?},\n  \"bundle_bytes\": {},\n  \
         \"bundle_bytes_copy_per_vm\": {},\n  \"sharing\": {},\n  \"vms\": [\n{}\n  ]\n}}\n",
        run.cpus,
        run.alone_boot_seconds,
        run.load_seconds,
        run.heap_alone_kib,
        run.heap_all_kib,
        run.heap_per_vm_kib(),
        run.stage2_frames,
        run.bundle_bytes,
        run.bundle_bytes_copy_per_vm,
        run.sharing.map_or("null".to_string(), |c| format!(
            "{{\"vms\": {}, \"alone_seconds\": {:.6}, \"last_seconds\": {:.6}, \"ratio\": {:.4}}}",
            c.vms,
            c.alone_seconds,
            c.last_seconds,
            c.ratio()
        )),
        vms.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str =
        "vm0 vm00: running, 1 vCPU(s) shared on CPUs [0], 128 MiB, has the console; CPU time 12.345 s; 40 exits, wfi 40
vm01 | a line of vm01's that came between
vm1 vm01: running, 1 vCPU(s) shared on CPUs [1], 128 MiB; CPU time 0.007 s; 3 exits, hypercall 3
heap: 1234 KiB of 32768 KiB in use";

    #[test]
    fn cpu_times_and_the_heap_are_read_from_list() {
        assert_eq!(cpu_time(LISTING, 0).unwrap(), 12.345);
        assert_eq!(cpu_time(LISTING, 1).unwrap(), 0.007);
        assert!(cpu_time(LISTING, 2).unwrap_err().to_string().contains("no line for vm2"));
        assert_eq!(heap_kib(LISTING).unwrap(), 1234);
        assert!(heap_kib("vm0 vm00: running").is_err());
        let old_format = "vm0 vm00: running, 1 vCPU(s) pinned, 128 MiB; 40 exits, wfi 40";
        assert!(cpu_time(old_format, 0).unwrap_err().to_string().contains("no CPU time"));
    }

    #[test]
    fn a_shell_count_shown_in_part_first_is_read_from_the_whole_line() {
        let console = "vm00 | guest: shell ready at virtual count \nvm01 | other\n\
                       vm00 | guest: shell ready at virtual count 6250000\n";
        assert_eq!(shell_count(console, "vm00"), Some(6_250_000.0));
        assert_eq!(shell_count(console, "vm01"), None);
    }

    #[test]
    fn the_counter_frequency_is_the_kernels() {
        let console = "vm00 | [    0.000000] arch_timer: cp15 timer(s) running at 62.50MHz (virt).\n";
        assert_eq!(counter_hz(console).unwrap(), 62.5e6);
        assert!(counter_hz("nothing").is_err());
    }

    fn vm(name: &str, cpu: u32, load: f64) -> VmFigures {
        VmFigures { name: name.into(), cpu, boot_seconds: 10.0, answered: true, pinged: true, load_cpu_seconds: load }
    }

    fn scale_run(vms: Vec<VmFigures>) -> ScaleRun {
        ScaleRun {
            vms,
            cpus: 2,
            alone_boot_seconds: 5.0,
            heap_alone_kib: 1000,
            heap_all_kib: 4000,
            stage2_frames: vec![3, 3, 3, 3],
            bundle_bytes: 37 << 20,
            bundle_bytes_copy_per_vm: 4 * (37 << 20),
            load_seconds: 20.0,
            sharing: None,
        }
    }

    #[test]
    fn a_share_is_against_the_mean_of_the_vms_on_the_same_cpu() {
        // CPU 0's VMs got 5 s each, CPU 1's 4.9 and 5.1: all within 5% of their CPU's mean.
        let run = scale_run(vec![vm("a", 0, 5.0), vm("b", 1, 4.9), vm("c", 0, 5.0), vm("d", 1, 5.1)]);
        let shares = run.shares();
        assert_eq!(shares[0], ("a".to_string(), 1.0));
        assert!((shares[1].1 - 0.98).abs() < 1e-9 && (shares[3].1 - 1.02).abs() < 1e-9, "{shares:?}");
        assert!(run.failures().is_empty(), "{:?}", run.failures());
        assert_eq!(run.heap_per_vm_kib(), 1000.0, "(4000 - 1000) KiB over the 3 VMs beyond the first");
        let table = table(&run);
        assert!(table.contains("| reached the shell and answered a command | 4 of 4 | all | yes |"), "{table}");
        assert!(table.contains("of fair (20 s): min / max | 0.980 / 1.020 | within 5% | yes |"), "{table}");
        assert!(table.contains(
            "| boot to the shell, all at once: min / median / max | 10.0 / 10.0 / 10.0 s (2.0 / 2.0 / 2.0 x alone)"
        ));
        let json = json(&run);
        assert!(json.contains("{\"name\": \"d\", \"cpu\": 1, \"boot_seconds\": 10.000, \"answered\": true, \"pinged\": true, \"load_cpu_seconds\": 5.100, \"share_of_fair\": 1.0200}"), "{json}");
    }

    #[test]
    fn sharing_costs_nothing_when_the_last_shell_comes_after_n_boots_alone() {
        let cost = SharingCost { vms: 4, alone_seconds: 1.1378, last_seconds: 4.5632 };
        assert!((cost.ratio() - 1.00264).abs() < 1e-4, "{}", cost.ratio());
        let table = sharing_table(&cost);
        assert!(table.contains("\n| one VM alone, creation to shell | 1137.8 M |\n"), "{table}");
        assert!(table.ends_with("\n| ratio to 4 boots alone (1 = sharing costs nothing) | 1.0026 |\n"), "{table}");
        let mut run = scale_run(vec![vm("a", 0, 1.0)]);
        assert!(json(&run).contains("\"sharing\": null,"));
        run.sharing = Some(cost);
        assert!(json(&run).contains(
            "\"sharing\": {\"vms\": 4, \"alone_seconds\": 1.137800, \"last_seconds\": 4.563200, \"ratio\": 1.0026},"
        ));
    }

    #[test]
    fn an_unfair_share_a_silent_vm_and_a_lost_ping_fail_the_run() {
        let mut silent = vm("c", 0, 5.0);
        silent.answered = false;
        let mut unreachable = vm("d", 1, 4.0);
        unreachable.pinged = false;
        let run = scale_run(vec![vm("a", 0, 5.0), vm("b", 1, 5.0), silent, unreachable]);
        assert_eq!(
            run.failures(),
            [
                "c did not answer a command",
                "d did not answer a ping",
                "b got 1.111 of a fair share of its CPU",
                "d got 0.889 of a fair share of its CPU"
            ]
        );
        assert!(table(&run).contains("| answered a ping from another VM | 3 of 4 | all | NO |"));
    }

    #[test]
    fn vms_are_spread_over_the_cpus_each_on_the_switch_with_an_address_of_its_own() {
        let linux = linux_guest::LinuxGuest { kernel: "k".into(), initrd: "i".into(), release: String::new() };
        let vms = vm_entries(&ScaleConfig::BENCH, &linux);
        assert_eq!(vms.len(), 32);
        let on_cpu = |c: u32| vms.iter().filter(|v| v.devices.placement.cpus == Some(vec![c])).count();
        assert_eq!([on_cpu(0), on_cpu(1), on_cpu(2), on_cpu(3)], [8, 8, 8, 8]);
        assert!(vms.iter().all(|v| v.vcpus == 1 && v.memory == 128 << 20 && v.devices.network == Some(None)));
        assert!(vms[31].bootargs.as_deref().unwrap().contains("guest.ip=10.0.2.51 "));
        assert_eq!(vms[7].name, "vm07");
    }
}
