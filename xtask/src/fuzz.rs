//! `cargo xtask fuzz`: runs the libFuzzer targets of `fuzz/` (docs/fuzzing.md) with
//! cargo-fuzz, installing a nightly toolchain and cargo-fuzz first if they are missing, and
//! prints what each did. `cargo xtask test` runs a short pass of every target.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::util::{run_quiet, step, XtaskError};

/// Every target, in `fuzz/Cargo.toml`'s order.
pub const TARGETS: [&str; 15] = [
    "exit_sync",
    "exit_aarch32",
    "cpu_state",
    "vgic",
    "pl011",
    "virtio_block",
    "virtio_net",
    "virtio_console",
    "virtio_pci",
    "switch",
    "psci",
    "boot_bundle",
    "device_tree",
    "manifest",
    "its",
];

/// How long or how far each target runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    Seconds(u64),
    Runs(u64),
}

/// What one target did.
#[derive(Clone, Debug, PartialEq)]
pub struct FuzzResult {
    pub target: String,
    pub executions: u64,
    pub seconds: f64,
    /// libFuzzer's average executions per second.
    pub rate: u64,
    /// The input that made it fail, if it did (its file under fuzz/artifacts/).
    pub crash: Option<String>,
}

/// A nightly toolchain and cargo-fuzz, installed if missing (both from the registries).
pub fn ensure_tools() -> Result<(), XtaskError> {
    let toolchains = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map_err(|e| XtaskError::Tool(format!("cannot run rustup ({e}); install it from rustup.rs")))?;
    if !String::from_utf8_lossy(&toolchains.stdout).lines().any(|l| l.starts_with("nightly")) {
        step("installing a nightly Rust toolchain with rustup (cargo-fuzz builds with sanitizers)");
        run_quiet(Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))?;
    }
    let has_fuzz =
        Command::new("cargo").args(["+nightly", "fuzz", "--version"]).output().is_ok_and(|o| o.status.success());
    if !has_fuzz {
        step("installing cargo-fuzz with cargo install (a few minutes, once)");
        run_quiet(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}

/// Runs `targets` (all when empty) one after the other, each within `budget`.
pub fn run(root: &Path, targets: &[String], budget: Budget) -> Result<Vec<FuzzResult>, XtaskError> {
    let chosen: Vec<String> =
        if targets.is_empty() { TARGETS.iter().map(|t| t.to_string()).collect() } else { targets.to_vec() };
    if let Some(unknown) = chosen.iter().find(|t| !TARGETS.contains(&t.as_str())) {
        return Err(XtaskError::Usage(format!(
            "unknown fuzz target `{unknown}`; the targets are: {}",
            TARGETS.join(", ")
        )));
    }
    let mut results = Vec::new();
    for target in chosen {
        let limit = match budget {
            Budget::Seconds(s) => format!("-max_total_time={s}"),
            Budget::Runs(n) => format!("-runs={n}"),
        };
        step(&format!("fuzzing {target} ({limit})"));
        let start = Instant::now();
        let out = Command::new("cargo")
            .current_dir(root)
            .args(["+nightly", "fuzz", "run", "--release", &target, "--", &limit, "-print_final_stats=1"])
            .args(["-rss_limit_mb=2048", "-max_len=65536"])
            .output()
            .map_err(|e| XtaskError::Tool(format!("cannot run cargo fuzz: {e}")))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let result = FuzzResult {
            target: target.clone(),
            executions: executions(&log).unwrap_or(0),
            // libFuzzer's own time, without the build; the wall time if it never said.
            seconds: fuzzing_seconds(&log).unwrap_or_else(|| start.elapsed().as_secs_f64()),
            rate: stat(&log, "average_exec_per_sec").unwrap_or(0),
            crash: (!out.status.success()).then(|| crash_file(&log).unwrap_or_else(|| last_lines(&log, 20))),
        };
        // Said as each target ends: a long run stopped part way keeps what it found.
        step(&format!(
            "{target}: {} executions in {:.0} s{}",
            result.executions,
            result.seconds,
            if result.crash.is_some() { ", FAILED" } else { ", no failure" }
        ));
        results.push(result);
    }
    Ok(results)
}

/// libFuzzer's final count of executions (`stat::number_of_executed_units: N`).
pub fn executions(log: &str) -> Option<u64> {
    stat(log, "number_of_executed_units")
}

/// One of libFuzzer's final statistics (`stat::NAME: N`).
fn stat(log: &str, name: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| l.strip_prefix("stat::")?.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

/// How long libFuzzer ran (`Done N runs in S second(s)`).
pub fn fuzzing_seconds(log: &str) -> Option<f64> {
    log.lines().rev().find_map(|l| {
        let rest = l.strip_prefix("Done ")?;
        let (_, after) = rest.split_once(" runs in ")?;
        after.split_whitespace().next()?.parse().ok()
    })
}

/// Where libFuzzer wrote the failing input (`Test unit written to PATH`).
pub fn crash_file(log: &str) -> Option<String> {
    log.lines().find_map(|l| l.split_once("Test unit written to ").map(|(_, path)| path.trim().to_string()))
}

fn last_lines(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The table `cargo xtask fuzz` prints.
pub fn report(results: &[FuzzResult]) -> String {
    let mut out = format!("{:<16} {:>14} {:>9} {:>11}  result\n", "target", "executions", "seconds", "exec/s");
    for r in results {
        let rate = r.rate;
        let result = match &r.crash {
            None => "no failure".to_string(),
            Some(what) => format!("FAILED: {what}"),
        };
        out.push_str(&format!("{:<16} {:>14} {:>9.0} {:>11}  {result}\n", r.target, r.executions, r.seconds, rate));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "#1048576 pulse  cov: 812 ft: 2113 corp: 301/18Kb exec/s: 34952 rss: 71Mb\n\
        Done 1103122 runs in 31 second(s)\n\
        stat::number_of_executed_units: 1103122\n\
        stat::average_exec_per_sec:     35584\n";

    #[test]
    fn the_execution_count_and_time_come_from_libfuzzers_final_lines() {
        assert_eq!(executions(LOG), Some(1_103_122));
        assert_eq!(executions("nothing here"), None);
        assert_eq!(fuzzing_seconds(LOG), Some(31.0));
        assert_eq!(stat(LOG, "average_exec_per_sec"), Some(35_584));
        assert_eq!(fuzzing_seconds("nothing here"), None);
    }

    #[test]
    fn a_crash_names_the_input_that_made_it() {
        let log = "==1234== ERROR: libFuzzer: deadly signal\n\
            artifact_prefix='fuzz/artifacts/vgic/'; Test unit written to fuzz/artifacts/vgic/crash-0badc0de\n";
        assert_eq!(crash_file(log).as_deref(), Some("fuzz/artifacts/vgic/crash-0badc0de"));
        assert_eq!(crash_file(LOG), None);
    }

    #[test]
    fn the_report_has_a_row_per_target_and_says_which_failed() {
        let results = [
            FuzzResult { target: "vgic".into(), executions: 1_000_000, seconds: 10.0, rate: 100_000, crash: None },
            FuzzResult { target: "pl011".into(), executions: 5, seconds: 1.0, rate: 5, crash: Some("crash-1".into()) },
        ];
        let table = report(&results);
        assert!(table.contains("vgic") && table.contains("1000000") && table.contains("100000  no failure"), "{table}");
        assert!(table.contains("FAILED: crash-1"), "{table}");
    }

    #[test]
    fn an_unknown_target_is_refused_with_the_list() {
        let err = run(Path::new("."), &["nope".into()], Budget::Runs(1)).unwrap_err().to_string();
        assert!(err.contains("unknown fuzz target `nope`") && err.contains("exit_sync"), "{err}");
    }

    #[test]
    fn every_target_has_a_source_file_and_a_cargo_entry() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        for t in TARGETS {
            assert!(root.join("fuzz_targets").join(format!("{t}.rs")).is_file(), "{t}.rs");
            assert!(manifest.contains(&format!("name = \"{t}\"")), "{t} in fuzz/Cargo.toml");
        }
    }
}
