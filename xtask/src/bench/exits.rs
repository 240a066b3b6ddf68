//! Exits per second by reason during a workload, from the management console's `list`
//! (docs/management.md): a snapshot of the VM's exit counts right before and right after
//! the workload, the difference divided by the workload's duration.

use std::collections::BTreeMap;

use crate::XtaskError;

/// A VM's exits since it was created, by reason, as the console's `list` printed them
/// (`vm0 linux: running, ...; 40123 exits, data-abort 36012, timer-irq 2100, ...`: the
/// `Display` of `hyp_core::exit_stats::ExitCounts`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExitSnapshot {
    pub total: u64,
    /// Reasons with at least one exit.
    pub by_reason: BTreeMap<String, u64>,
}

/// The exit counts of VM `vm` (its name) in the console output `listing`; the last of its
/// lines there if `list` ran more than once.
pub fn parse_list(listing: &str, vm: &str) -> Result<ExitSnapshot, XtaskError> {
    let line =
        listing.lines().rev().find_map(|l| listed_vm(l, vm)).ok_or_else(|| {
            XtaskError::Failed(format!("the console's `list` showed no line for VM {vm}:\n{listing}"))
        })?;
    let bad = |why: &str| XtaskError::Failed(format!("cannot read the exit counts of VM {vm} ({why}) in:\n{line}"));
    let (_, counts) = line.rsplit_once("; ").ok_or_else(|| bad("no `; N exits` after its state: is it destroyed?"))?;
    let mut parts = counts.trim().split(", ");
    let total = parts
        .next()
        .and_then(|p| p.strip_suffix(" exits"))
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| bad("it does not start with `N exits`"))?;
    let mut by_reason = BTreeMap::new();
    for part in parts {
        let (reason, n) = part.rsplit_once(' ').ok_or_else(|| bad("a reason without a count"))?;
        let n = n.parse::<u64>().map_err(|_| bad("a count that is not a number"))?;
        if reason.is_empty() || by_reason.insert(reason.to_string(), n).is_some() {
            return Err(bad("a reason given twice or without a name"));
        }
    }
    if by_reason.values().sum::<u64>() != total {
        return Err(bad("the counts by reason do not add up to the total"));
    }
    Ok(ExitSnapshot { total, by_reason })
}

/// `line` if it is `list`'s line of VM `vm`: `vmN NAME: ...`.
fn listed_vm<'a>(line: &'a str, vm: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {vm}: "))?;
    let head = &line[..at];
    let start = head.rfind("vm")?;
    let index = &head[start + 2..];
    (!index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())).then_some(&line[start..])
}

impl ExitSnapshot {
    /// The exits between `before` and this later snapshot of the same VM.
    pub fn since(&self, before: &ExitSnapshot) -> Result<ExitSnapshot, XtaskError> {
        let went_down = || {
            XtaskError::Failed(format!(
                "exit counts went down between two snapshots ({} then {} exits): was the VM restarted?",
                before.total, self.total
            ))
        };
        let total = self.total.checked_sub(before.total).ok_or_else(went_down)?;
        let mut by_reason = BTreeMap::new();
        for reason in self.by_reason.keys().chain(before.by_reason.keys()) {
            let after = self.by_reason.get(reason).copied().unwrap_or(0);
            let earlier = before.by_reason.get(reason).copied().unwrap_or(0);
            let n = after.checked_sub(earlier).ok_or_else(went_down)?;
            if n > 0 {
                by_reason.insert(reason.clone(), n);
            }
        }
        Ok(ExitSnapshot { total, by_reason })
    }

    /// Adds `other`'s exits to these: a workload run several times counts the exits of
    /// every run (each run's `since`).
    pub fn add(&mut self, other: &ExitSnapshot) {
        self.total += other.total;
        for (reason, n) in &other.by_reason {
            *self.by_reason.entry(reason.clone()).or_default() += n;
        }
    }
}

/// The exits of one workload under the hypervisor and how long it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadExits {
    pub workload: String,
    /// Which clock `seconds` is on (virtual time under `-icount`, or wall time).
    pub clock: &'static str,
    pub seconds: f64,
    pub exits: ExitSnapshot,
}

impl WorkloadExits {
    pub fn per_second(&self, reason: &str) -> f64 {
        self.exits.by_reason.get(reason).copied().unwrap_or(0) as f64 / self.seconds
    }

    pub fn total_per_second(&self) -> f64 {
        self.exits.total as f64 / self.seconds
    }
}

/// Every reason that occurred in any workload, the most frequent overall first.
fn reasons(workloads: &[WorkloadExits]) -> Vec<String> {
    let mut rates: BTreeMap<&str, f64> = BTreeMap::new();
    for w in workloads {
        for reason in w.exits.by_reason.keys() {
            *rates.entry(reason).or_default() += w.per_second(reason);
        }
    }
    let mut reasons: Vec<(&str, f64)> = rates.into_iter().collect();
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    reasons.into_iter().map(|(r, _)| r.to_string()).collect()
}

/// Exits per second by reason (rows) and workload (columns), with each workload's duration
/// and total.
pub fn table(workloads: &[WorkloadExits]) -> String {
    let width = workloads.iter().map(|w| w.workload.len()).max().unwrap_or(0).max(11) + 1;
    let mut t = format!("{:<16}", "exits/s");
    for w in workloads {
        t.push_str(&format!("{:>width$}", w.workload));
    }
    t.push('\n');
    t.push_str(&format!("{:<16}", "  seconds"));
    for w in workloads {
        t.push_str(&format!(
            "{:>width$}",
            format!("{:.3}{}", w.seconds, if w.clock.starts_with("virtual") { "v" } else { "w" })
        ));
    }
    t.push('\n');
    for reason in reasons(workloads) {
        t.push_str(&format!("{reason:<16}"));
        for w in workloads {
            t.push_str(&format!("{:>width$}", rate(w.per_second(&reason))));
        }
        t.push('\n');
    }
    t.push_str(&format!("{:<16}", "total"));
    for w in workloads {
        t.push_str(&format!("{:>width$}", rate(w.total_per_second())));
    }
    t.push_str("\n  (v: virtual seconds under -icount shift=0; w: wall seconds)\n");
    t
}

fn rate(r: f64) -> String {
    if r == 0.0 {
        "-".into()
    } else if r < 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.0}")
    }
}

/// The same as JSON: per workload, the clock, the duration, and per reason the count and
/// the rate.
pub fn json(workloads: &[WorkloadExits]) -> String {
    let entries: Vec<String> = workloads
        .iter()
        .map(|w| {
            let reasons: Vec<String> = w
                .exits
                .by_reason
                .iter()
                .map(|(r, n)| format!("        \"{r}\": {{\"exits\": {n}, \"per_second\": {:.1}}}", w.per_second(r)))
                .collect();
            format!(
                "    {{\n      \"workload\": \"{}\",\n      \"clock\": \"{}\",\n      \"seconds\": {:.6},\n      \
                 \"exits\": {},\n      \"per_second\": {:.1},\n      \"by_reason\": {{\n{}\n      }}\n    }}",
                w.workload,
                w.clock,
                w.seconds,
                w.exits.total,
                w.total_per_second(),
                reasons.join(",\n")
            )
        })
        .collect();
    format!(
        "{{\n  \"unit\": \"exits per second of the workload's duration, under the hypervisor\",\n  \"workloads\": [\n{}\n  ]\n}}\n",
        entries.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "linux | / # \nhyp> list\n\
        vm0 linux: running, 2 vCPU(s) pinned, 512 MiB, has the console; 40123 exits, data-abort 36012, \
        timer-irq 2100, wfi 2000, kick 11\n";

    #[test]
    fn the_list_line_of_the_vm_gives_its_counts_by_reason() {
        let s = parse_list(LISTING, "linux").unwrap();
        assert_eq!(s.total, 40123);
        assert_eq!(s.by_reason.len(), 4);
        assert_eq!(s.by_reason["data-abort"], 36012);
        assert_eq!(s.by_reason["kick"], 11);
        // A VM that has not exited yet, and the last of several listings.
        let fresh = "vm1 db: running, 1 vCPU(s) shared on CPUs [2, 3], 256 MiB; 0 exits\n";
        assert_eq!(parse_list(fresh, "db").unwrap(), ExitSnapshot::default());
        let twice = format!("{LISTING}vm0 linux: running, 2 vCPU(s) pinned, 512 MiB; 5 exits, wfi 5\n");
        assert_eq!(parse_list(&twice, "linux").unwrap().total, 5);
    }

    #[test]
    fn other_vms_guest_lines_and_broken_lines_are_not_taken_for_counts() {
        let err = |text: &str, vm: &str| parse_list(text, vm).unwrap_err().to_string();
        assert!(err(LISTING, "db").contains("no line for VM db"));
        // The guest's own console lines carry the VM's name too, as `linux | ...`.
        assert!(err("linux | linux: 5 exits, wfi 5\n", "linux").contains("no line for VM linux"));
        assert!(err("vm3 secret: destroyed, 1 vCPU(s) pinned, 64 MiB\n", "secret").contains("is it destroyed"));
        assert!(err("vm0 linux: running; 7 exits, wfi 5\n", "linux").contains("do not add up"));
        assert!(err("vm0 linux: running; 7 exits, wfi x\n", "linux").contains("not a number"));
        assert!(err("vm0 linux: running; lots of exits\n", "linux").contains("`N exits`"));
        assert!(err("vm0 linux: running; 4 exits, wfi 2, wfi 2\n", "linux").contains("twice"));
    }

    #[test]
    fn a_workload_gets_the_difference_of_two_snapshots_per_second() {
        let before = parse_list(LISTING, "linux").unwrap();
        let after = parse_list(
            "vm0 linux: running, 2 vCPU(s) pinned, 512 MiB; 40623 exits, data-abort 36012, timer-irq 2500, \
             wfi 2100, kick 11\n",
            "linux",
        )
        .unwrap();
        let diff = after.since(&before).unwrap();
        assert_eq!(diff.total, 500);
        assert_eq!(diff.by_reason.len(), 2, "reasons that did not move are left out: {diff:?}");
        assert_eq!((diff.by_reason["timer-irq"], diff.by_reason["wfi"]), (400, 100));
        assert!(before.since(&after).unwrap_err().to_string().contains("was the VM restarted"));

        let w = WorkloadExits { workload: "sha256sum".into(), clock: "virtual", seconds: 2.0, exits: diff.clone() };
        assert_eq!((w.per_second("timer-irq"), w.per_second("wfi"), w.per_second("kick")), (200.0, 50.0, 0.0));
        assert_eq!(w.total_per_second(), 250.0);

        // Two runs' windows add up by reason, a reason of only one of them included.
        let mut both = diff.clone();
        both.add(&ExitSnapshot { total: 3, by_reason: [("kick".to_string(), 3)].into_iter().collect() });
        both.add(&diff);
        assert_eq!(both.total, 1003);
        assert_eq!((both.by_reason["timer-irq"], both.by_reason["wfi"], both.by_reason["kick"]), (800, 200, 3));
        assert_eq!(both.by_reason.values().sum::<u64>(), both.total);
    }

    #[test]
    fn the_table_has_a_row_per_reason_and_a_column_per_workload() {
        let snapshot = |pairs: &[(&str, u64)]| ExitSnapshot {
            total: pairs.iter().map(|p| p.1).sum(),
            by_reason: pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
        };
        let boot = WorkloadExits {
            workload: "boot".into(),
            clock: "virtual",
            seconds: 0.5,
            exits: snapshot(&[("data-abort", 1000), ("wfi", 10)]),
        };
        let disk = WorkloadExits {
            workload: "disk write".into(),
            clock: "wall",
            seconds: 4.0,
            exits: snapshot(&[("hypercall", 4000), ("wfi", 2)]),
        };
        let t = table(&[boot.clone(), disk.clone()]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("exits/s") && lines[0].contains("boot") && lines[0].contains("disk write"));
        assert!(lines[1].contains("0.500v") && lines[1].contains("4.000w"), "{t}");
        // Most frequent first: data-abort 2000/s, hypercall 1000/s, wfi 20.5/s.
        let row = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(row(2), ["data-abort", "2000", "-"]);
        assert_eq!(row(3), ["hypercall", "-", "1000"]);
        assert_eq!(row(4), ["wfi", "20", "0.5"]);
        assert_eq!(row(5), ["total", "2020", "1000"]);

        let j = json(&[boot, disk]);
        assert_eq!(j.matches("\"workload\":").count(), 2);
        assert!(j.contains("\"data-abort\": {\"exits\": 1000, \"per_second\": 2000.0}"), "{j}");
        assert!(j.contains("\"seconds\": 4.000000"));
        assert_eq!(j.matches('{').count(), j.matches('}').count());
        assert_eq!(j.matches('[').count(), j.matches(']').count());
    }
}
