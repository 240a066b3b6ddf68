//! The VM table: a destroyed VM is reached by no one, a restarted one is there again, and
//! the run ends when the last running VM ends.

use super::spec;
use crate::vm_table::{RunEnd, VmTable};

fn table() -> VmTable<&'static str> {
    let table = VmTable::new();
    table.fill(vec![(spec("web", 1, None, false), "web"), (spec("db", 1, None, false), "db")]);
    table
}

#[test]
fn a_taken_vm_is_reached_by_no_one_until_it_is_put_back() {
    let table = table();
    assert_eq!(table.len(), 2);
    assert_eq!(table.get(1).as_deref(), Some(&"db"));
    let held = table.take(1).unwrap();
    assert!(table.get(1).is_none(), "destroyed: the table gives it to no one");
    assert_eq!(*held, "db", "whoever held it still may, until they drop it");
    assert_eq!(table.spec(1).map(|s| s.name), Some("db"), "its manifest entry stays");
    assert!(table.put(1, "db again"));
    assert_eq!(table.get(1).as_deref(), Some(&"db again"));
    assert!(!table.put(2, "no such"), "only the manifest's VMs");
    assert!(table.get(2).is_none() && table.take(2).is_none() && table.spec(2).is_none());
}

#[test]
fn the_run_ends_with_the_last_vm_and_counts_the_failures() {
    let table = table();
    assert_eq!(table.ended(false), None, "one VM still runs");
    assert_eq!(table.ended(true), Some(RunEnd { total: 2, failed: 1 }));
}

#[test]
fn a_vm_the_console_creates_again_runs_again() {
    let table = table();
    assert_eq!(table.ended(true), None);
    table.running_again();
    assert_eq!(table.ended(true), None, "the restarted VM and the other one ran");
    assert_eq!(table.ended(true), Some(RunEnd { total: 2, failed: 0 }));
}

#[test]
fn an_empty_table_reaches_nothing() {
    let table: VmTable<()> = VmTable::new();
    assert!(table.is_empty() && table.get(0).is_none() && table.spec(0).is_none());
}
