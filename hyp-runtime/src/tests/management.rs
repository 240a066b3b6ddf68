//! The management console's commands decide lines and one effect, from the VMs' states.

use std::cell::RefCell;

use hyp_core::bundle::VmSpec;
use hyp_core::exit_stats::{ExitCounts, ExitReason};
use hyp_core::management::{Command, VmName};
use hyp_core::vcpu_power::EndReason;

use super::spec;
use crate::management::{decide, Effect, Reply, VmDirectory, VmState};

#[derive(Clone, Copy, PartialEq)]
enum State {
    Running,
    Ending,
    Destroyed,
}

struct Vms {
    specs: Vec<VmSpec<'static>>,
    states: RefCell<Vec<State>>,
    focus: usize,
}

impl VmDirectory for Vms {
    fn count(&self) -> usize {
        self.specs.len()
    }
    fn spec(&self, id: usize) -> Option<VmSpec<'static>> {
        self.specs.get(id).copied()
    }
    fn state(&self, id: usize) -> VmState {
        let exits = ExitCounts::default();
        exits.record(ExitReason::Hypercall);
        match self.states.borrow().get(id) {
            Some(State::Running) => VmState::Running { exits, cpu_time_us: 12_345_678 },
            Some(State::Ending) => VmState::Ending { exits, cpu_time_us: 999 },
            _ => VmState::Destroyed,
        }
    }
    fn focus(&self) -> usize {
        self.focus
    }
    fn heap(&self) -> (u64, u64) {
        (448 << 10, 32 << 20)
    }
}

fn vms(states: &[State]) -> Vms {
    let names = ["web", "db", "batch"];
    Vms {
        specs: states.iter().enumerate().map(|(i, _)| spec(names[i], 1, None, false)).collect(),
        states: RefCell::new(states.to_vec()),
        focus: 0,
    }
}

fn command(line: &str) -> Command {
    Command::parse(line).unwrap()
}

#[test]
fn focus_names_a_vm_by_name_or_index() {
    let vms = vms(&[State::Running, State::Running]);
    for line in ["focus db", "focus 1"] {
        let reply = decide(&command(line), &vms);
        assert_eq!(reply.effect, Some(Effect::SetFocus(1)), "{line}");
        assert_eq!(reply.lines, vec!["hyp: console input goes to vm1 db (Ctrl-] for commands)"]);
    }
}

#[test]
fn a_vm_that_does_not_exist_changes_nothing_and_says_so() {
    let vms = vms(&[State::Running]);
    for line in ["focus nosuch", "destroy 7", "restart nosuch"] {
        let reply = decide(&command(line), &vms);
        assert_eq!(reply.effect, None, "{line}");
        assert_eq!(reply.lines.len(), 1);
        assert!(
            reply.lines[0].starts_with("hyp: no VM ") && reply.lines[0].ends_with("(`list` shows them)"),
            "{reply:?}"
        );
    }
}

#[test]
fn destroy_ends_a_running_vm_only() {
    let vms = vms(&[State::Running, State::Ending, State::Destroyed]);
    let reply = decide(&command("destroy web"), &vms);
    assert_eq!(reply.effect, Some(Effect::End { vm: 0, reason: EndReason::Destroyed }));
    assert_eq!(reply.lines, vec!["hyp: vm0 web: destroying"]);
    let reply = decide(&command("destroy db"), &vms);
    assert_eq!(reply, Reply { lines: vec!["hyp: vm1 db is ending already".into()], effect: None });
    let reply = decide(&command("destroy batch"), &vms);
    assert_eq!(reply.effect, None);
    assert_eq!(reply.lines, vec!["hyp: vm2 batch is destroyed already (`restart 2` creates it again)"]);
}

#[test]
fn restart_ends_a_running_vm_and_creates_a_destroyed_one() {
    let vms = vms(&[State::Running, State::Destroyed]);
    let reply = decide(&command("restart web"), &vms);
    assert_eq!(reply.effect, Some(Effect::End { vm: 0, reason: EndReason::Restart }));
    assert_eq!(reply.lines, vec!["hyp: vm0 web: restarting"]);
    let reply = decide(&command("restart db"), &vms);
    assert_eq!(reply.effect, Some(Effect::CreateAgain(1)));
    assert_eq!(reply.lines, vec!["hyp: vm1 db: creating it again from its manifest entry"]);
}

#[test]
fn list_gives_each_vm_its_state_and_ends_with_the_heap() {
    let mut vms = vms(&[State::Running, State::Ending, State::Destroyed]);
    vms.focus = 2;
    vms.specs[1].placement.policy = hyp_core::manifest::Policy::Shared;
    vms.specs[1].placement.cpus = hyp_core::bundle::U32List::new(&[0, 0, 0, 1]);
    let reply = decide(&Command::List, &vms);
    assert_eq!(reply.effect, None);
    assert_eq!(reply.lines.len(), 4, "{reply:?}");
    assert!(
        reply.lines[0].starts_with("vm0 web: running, 1 vCPU(s) pinned, 64 MiB; CPU time 12.345 s; "),
        "{}",
        reply.lines[0]
    );
    assert!(reply.lines[0].contains("hypercall"), "its exits: {}", reply.lines[0]);
    assert!(
        reply.lines[1].starts_with("vm1 db: ending, 1 vCPU(s) shared on CPUs [1], 64 MiB; CPU time 0.000 s; "),
        "{}",
        reply.lines[1]
    );
    assert_eq!(reply.lines[2], "vm2 batch: destroyed, 1 vCPU(s) pinned, 64 MiB, has the console");
    assert_eq!(reply.lines[3], "heap: 448 KiB of 32768 KiB in use");
}

#[test]
fn help_lists_the_commands() {
    let reply = decide(&Command::Help, &vms(&[]));
    assert_eq!(reply.effect, None);
    for word in ["list", "focus", "destroy", "restart"] {
        assert!(reply.lines[0].contains(word), "{}", reply.lines[0]);
    }
}

#[test]
fn names_match_as_the_parser_reads_them() {
    let vms = vms(&[State::Running, State::Running]);
    assert!(matches!(command("focus 1"), Command::Focus(VmName::Index(1))));
    assert_eq!(decide(&command("focus web"), &vms).effect, Some(Effect::SetFocus(0)));
}
