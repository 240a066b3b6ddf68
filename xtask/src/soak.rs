//! `cargo xtask soak`: three Linux VMs (manifests/three-vms.toml) with disk and network
//! traffic for a long while, the hypervisor's heap sampled through the management console's
//! `list`, and a verdict: no error anywhere, and no growth of the heap after the warm-up.
//! A long run, not a CI test (docs/management.md, "Soak").

use std::path::Path;
use std::time::{Duration, Instant};

use crate::bundle::BundleOptions;
use crate::images::{self, Hypervisor};
use crate::linux_guest;
use crate::manifest::{Board, DebianGuest, Manifest};
use crate::qemu::{Machine, Session};
use crate::util::{step, XtaskError};

/// One reading of the heap: seconds since the workloads started, KiB in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub seconds: u64,
    pub heap_kib: u64,
}

/// Samples before this many seconds are the warm-up (buffers allocated on first use).
pub const WARM_UP_SECONDS: u64 = 120;
/// What the heap may grow by after the warm-up: frames in flight when a sample is taken.
pub const GROWTH_ALLOWED_KIB: u64 = 256;
/// Exits each VM must make during the run for its workload to count as running.
pub const MIN_EXITS: u64 = 10_000;
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// Written by a workload when a command fails; the shell sees it typed as `SOAK-""ERROR`,
/// so the echo of the typed line does not match.
const ERROR_MARK: &str = "SOAK-ERROR";

/// Each VM's endless workload: its disk written, synced and read back, and traffic on the
/// switch to the others (web pings; db and batch fetch web's page).
const WORKLOADS: [(&str, &str); 3] = [
    ("web", "ping -c 2 -q 10.0.2.16 >/dev/null && ping -c 2 -q 10.0.2.17 >/dev/null || echo SOAK-\"\"ERROR ping"),
    ("db", "wget -q -O /dev/null http://10.0.2.15/ || echo SOAK-\"\"ERROR http"),
    ("batch", "wget -q -O /dev/null http://10.0.2.15/ || echo SOAK-\"\"ERROR http"),
];

fn workload(network: &str) -> String {
    format!(
        "(while true; do dd if=/dev/urandom of=/tmp/block bs=64k count=16 2>/dev/null; \
         dd if=/tmp/block of=/dev/vda bs=64k count=16 conv=fsync 2>/dev/null || echo SOAK-\"\"ERROR disk-write; \
         dd if=/dev/vda of=/tmp/back bs=64k count=16 2>/dev/null && cmp -s /tmp/block /tmp/back || echo SOAK-\"\"ERROR disk-read; \
         {network}; done) >/dev/null 2>&1 &"
    )
}

/// Each VM's exits in a `list` output: (name, exits), from lines `vmN NAME: ...; CPU time T
/// s; E exits, ...` (the counts are the last part).
pub fn exits(list: &str) -> Vec<(String, u64)> {
    list.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("vm")?;
            let (_, rest) = rest.split_once(' ')?;
            let (name, rest) = rest.split_once(": ")?;
            let (_, counts) = rest.rsplit_once("; ")?;
            Some((name.to_string(), counts.split_once(" exits")?.0.parse().ok()?))
        })
        .collect()
}

/// The KiB in use of the last `heap: N KiB of M KiB in use` line of `text`.
pub fn parse_heap(text: &str) -> Option<u64> {
    text.lines().rev().find_map(|l| l.trim().strip_prefix("heap: ")?.split_once(" KiB of ")?.0.parse().ok())
}

/// Lines of the console that say something went wrong: a workload's error mark, a panic,
/// a failed check, a VM that ended in failure, an I/O error a guest kernel logged.
pub fn errors(console: &str) -> Vec<String> {
    const SIGNS: [&str; 6] = [ERROR_MARK, "panic", "not ok", "(failed)", "I/O error", "Oops"];
    console.lines().filter(|l| SIGNS.iter().any(|s| l.contains(s))).map(str::to_string).collect()
}

/// Whether the run passed: no error line, every VM busy (its exits grew by at least
/// `MIN_EXITS` during the run: the workloads ran), samples after the warm-up, and the last of
/// them no more than `GROWTH_ALLOWED_KIB` above the first.
pub fn verdict(samples: &[Sample], work: &[(String, u64)], errors: &[String]) -> Result<(), String> {
    if let Some(first) = errors.first() {
        return Err(format!("{} error line(s), the first: {first}", errors.len()));
    }
    if let Some((idle, n)) = work.iter().find(|(_, n)| *n < MIN_EXITS) {
        return Err(format!("VM {idle} made only {n} exits during the run: its workload did not run"));
    }
    let settled: Vec<&Sample> = samples.iter().filter(|s| s.seconds >= WARM_UP_SECONDS).collect();
    let (Some(first), Some(last)) = (settled.first(), settled.last()) else {
        return Err(format!("no heap sample after the {WARM_UP_SECONDS} s warm-up: run for longer"));
    };
    let growth = last.heap_kib.saturating_sub(first.heap_kib);
    if growth > GROWTH_ALLOWED_KIB {
        return Err(format!(
            "the heap grew by {growth} KiB after the warm-up ({} KiB at {} s, {} KiB at {} s)",
            first.heap_kib, first.seconds, last.heap_kib, last.seconds
        ));
    }
    Ok(())
}

/// The table `cargo xtask soak` prints.
pub fn report(samples: &[Sample], work: &[(String, u64)], errors: &[String], verdict: &Result<(), String>) -> String {
    let mut out = String::from("seconds   heap KiB\n");
    for s in samples {
        out.push_str(&format!("{:>7}   {:>8}\n", s.seconds, s.heap_kib));
    }
    for (vm, n) in work {
        out.push_str(&format!("{vm}: {n} exits during the run\n"));
    }
    let max = samples.iter().map(|s| s.heap_kib).max().unwrap_or(0);
    out.push_str(&format!("samples {}, heap at most {max} KiB, error lines {}\n", samples.len(), errors.len()));
    for e in errors.iter().take(10) {
        out.push_str(&format!("  {e}\n"));
    }
    out.push_str(&match verdict {
        Ok(()) => "verdict: passed (no error, no heap growth after the warm-up)\n".to_string(),
        Err(e) => format!("verdict: FAILED: {e}\n"),
    });
    out
}

fn console_command(s: &mut Session, line: &str) -> Result<(), XtaskError> {
    s.send_line(&format!("\x1d{line}")).map_err(XtaskError::Tool)
}

fn wait(s: &mut Session, text: &str, within: Duration) -> Result<String, XtaskError> {
    s.wait_for(text, within).map_err(|e| XtaskError::Tool(format!("soak: {e}")))
}

/// Boots the three VMs, starts their workloads, samples the heap every 30 s for `minutes`.
/// What a run saw: the heap samples, each VM's exits during it, and the error lines.
pub struct Soak {
    pub samples: Vec<Sample>,
    pub work: Vec<(String, u64)>,
    pub errors: Vec<String>,
}

pub fn run(root: &Path, minutes: u64) -> Result<Soak, XtaskError> {
    let manifest = Manifest::load(&root.join("manifests").join("three-vms.toml"), &mut |arch| {
        let linux = linux_guest::debian(arch)?;
        Ok(DebianGuest { kernel: linux.kernel, initrd: linux.initrd })
    })?;
    let (smp, memory_mib) = (manifest.board_cpus.unwrap_or(4), manifest.board_memory_mib.unwrap_or(2048));
    let disk = root.join("target").join("soak").join("soak.img");
    let _ = std::fs::remove_file(&disk);
    images::create_disk(&disk, images::DISK_SIZE)?;
    let board = Board::qemu_virt(smp, memory_mib, Some(images::DISK_SIZE));
    let bundle = root.join("target").join("soak").join("three-vms.bundle");
    std::fs::write(&bundle, manifest.bundle(&board, &BundleOptions::default())?)
        .map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", bundle.display())))?;
    // The image a user deploys: the soak runs what they would run.
    let hypervisor = images::build_hypervisor(Hypervisor::Deployed)?;
    // The guests' httpd is reached only from the other VMs: no host port is forwarded.
    let machine = Machine { smp, memory_mib, disk: Some(disk), network: Some(Vec::new()), ..Machine::default() };
    let length = Duration::from_secs(minutes * 60);
    step(&format!("soak: three Linux VMs with disk and network traffic for {minutes} minute(s)"));
    let mut s = Session::start(machine.command(&hypervisor, Some(&bundle)), length + Duration::from_secs(900), false)?;
    let boot = Duration::from_secs(600);
    s.wait_for_all(
        &["web | guest: eth0 is 10.0.2.15", "db | guest: eth0 is 10.0.2.16", "batch | guest: eth0 is 10.0.2.17"],
        boot,
    )
    .map_err(|e| XtaskError::Tool(format!("soak: {e}")))?;
    for (vm, network) in WORKLOADS {
        console_command(&mut s, &format!("focus {vm}"))?;
        wait(&mut s, "console input goes to vm", boot)?;
        s.send_line("").map_err(XtaskError::Tool)?;
        wait(&mut s, "/ # ", boot)?;
        s.send_line(&workload(network)).map_err(XtaskError::Tool)?;
        wait(&mut s, "/ # ", boot)?;
        step(&format!("soak: {vm}'s workload started"));
    }
    let start = Instant::now();
    let mut samples = Vec::new();
    let (mut first_list, mut last_list) = (None, String::new());
    while start.elapsed() < length {
        std::thread::sleep(SAMPLE_EVERY.min(length.saturating_sub(start.elapsed())));
        console_command(&mut s, "list")?;
        last_list = wait(&mut s, "heap: ", Duration::from_secs(60))?;
        first_list.get_or_insert_with(|| last_list.clone());
        let kib = wait(&mut s, " KiB of", Duration::from_secs(60))?;
        let heap_kib =
            kib.trim().parse().map_err(|_| XtaskError::Tool(format!("soak: cannot read the heap from {kib:?}")))?;
        let sample = Sample { seconds: start.elapsed().as_secs(), heap_kib };
        step(&format!("soak: {} s, heap {} KiB in use", sample.seconds, sample.heap_kib));
        samples.push(sample);
    }
    let before = exits(first_list.as_deref().unwrap_or(""));
    let work = exits(&last_list)
        .into_iter()
        .map(|(vm, n)| {
            let earlier = before.iter().find(|(v, _)| *v == vm).map_or(0, |(_, e)| *e);
            (vm, n.saturating_sub(earlier))
        })
        .collect();
    // Every VM powers off: the hypervisor ends, and QEMU with it.
    for (vm, _) in WORKLOADS {
        console_command(&mut s, &format!("focus {vm}"))?;
        wait(&mut s, "console input goes to vm", Duration::from_secs(60))?;
        s.send_line("poweroff").map_err(XtaskError::Tool)?;
        wait(&mut s, &format!(" {vm} ended: "), Duration::from_secs(120))?;
    }
    let out = s.finish();
    Ok(Soak { samples, work, errors: errors(&out.console) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_is_read_from_the_last_list() {
        let text = "vm0 web: running\nheap: 100 KiB of 32768 KiB in use\nvm0 web: running\nheap: 2048 KiB of 32768 KiB in use\n";
        assert_eq!(parse_heap(text), Some(2048));
        assert_eq!(parse_heap("no heap here"), None);
    }

    #[test]
    fn error_lines_are_found_but_not_the_typed_workload() {
        let console = format!(
            "web | / # (while true; do ... || echo SOAK-\"\"ERROR ping; done)\nweb | {ERROR_MARK} ping\n\
             db | [  12.0] blk_update_request: I/O error, dev vda\nhypervisor: vm2 batch ended: Exited(1) (failed)\n"
        );
        let found = errors(&console);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(errors("hypervisor: vm0 web ended: PoweredOff (clean)").is_empty(), "a clean end is no error");
        assert!(found[0].ends_with("SOAK-ERROR ping"));
    }

    #[test]
    fn growth_after_the_warm_up_fails_and_noise_does_not() {
        let samples = |kib: &[u64]| -> Vec<Sample> {
            kib.iter().enumerate().map(|(i, &k)| Sample { seconds: 30 * i as u64, heap_kib: k }).collect()
        };
        let busy = [("web".to_string(), 50_000), ("db".to_string(), 40_000)];
        let steady = samples(&[100, 900, 1000, 1100, 1010, 1050, 1200]);
        assert_eq!(verdict(&steady, &busy, &[]), Ok(()), "warm-up growth and noise within the bound");
        let leaking = samples(&[100, 900, 1000, 1100, 1400, 1700, 2000]);
        assert!(verdict(&leaking, &busy, &[]).unwrap_err().contains("grew by 600 KiB"));
        assert!(verdict(&samples(&[100, 200]), &busy, &[]).unwrap_err().contains("warm-up"));
        assert!(verdict(&steady, &busy, &["web | SOAK-ERROR http".into()]).unwrap_err().contains("1 error line"));
        let idle = [("web".to_string(), 50_000), ("db".to_string(), 12)];
        assert!(verdict(&steady, &idle, &[]).unwrap_err().contains("VM db made only 12 exits"));
        let table = report(&steady, &busy, &[], &verdict(&steady, &busy, &[]));
        assert!(table.contains("verdict: passed") && table.contains("heap at most 1200 KiB"), "{table}");
        assert!(table.contains("web: 50000 exits during the run"), "{table}");
    }

    #[test]
    fn exits_are_read_per_vm_from_a_list() {
        let list =
            "vm0 web: running, 1 vCPU(s) pinned on CPUs [0], 256 MiB, has the console; CPU time 1.000 s; 1234 exits, \
             data-abort 1000\n\
                    vm1 db: running, 1 vCPU(s) shared on CPUs [2], 256 MiB; CPU time 0.250 s; 77 exits\n\
                    vm2 batch: destroyed, 2 vCPU(s) shared on CPUs [2, 3], 256 MiB\n";
        assert_eq!(exits(list), [("web".to_string(), 1234), ("db".to_string(), 77)]);
    }
}
