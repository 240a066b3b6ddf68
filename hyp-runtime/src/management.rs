//! The management console's commands, decided (docs/management.md): list the VMs, move the
//! console input, destroy or restart a VM. Deciding needs only a view of the VMs
//! ([`VmDirectory`]); the answer is the lines to print and at most one [`Effect`], which the
//! runtime then applies. A VM with running vCPUs ends when its last vCPU has stopped, on
//! that vCPU's CPU.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use hyp_core::bundle::VmSpec;
use hyp_core::exit_stats::ExitCounts;
use hyp_core::management::{heap_line, Command, VmName, HELP};
use hyp_core::vcpu_power::EndReason;

/// A VM as the commands see it now.
pub enum VmState {
    Running {
        exits: ExitCounts,
        /// How long its vCPUs have run on their CPUs, together (`sched::Scheduler::run_time`).
        cpu_time_us: u64,
    },
    /// Its vCPUs stop at their next exit.
    Ending { exits: ExitCounts, cpu_time_us: u64 },
    /// Its capabilities are revoked; its manifest entry can create it again.
    Destroyed,
}

/// What the commands may look at: the manifest's VMs by index, and the hypervisor's heap.
pub trait VmDirectory {
    /// How many VMs the manifest has.
    fn count(&self) -> usize;
    /// VM `id`'s manifest entry.
    fn spec(&self, id: usize) -> Option<VmSpec<'static>>;
    fn state(&self, id: usize) -> VmState;
    /// The VM console input goes to.
    fn focus(&self) -> usize;
    /// Bytes of the hypervisor's heap in use, and its size.
    fn heap(&self) -> (u64, u64);
    /// One line per side core (crate::io_core): its state and counts.
    fn io_lines(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What a command changes, for the runtime to apply after printing the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Console input goes to this VM from now on.
    SetFocus(usize),
    /// The VM ends for this reason (`Destroyed`, or `Restart`: created again when it has).
    End { vm: usize, reason: EndReason },
    /// The destroyed VM is created again from its manifest entry.
    CreateAgain(usize),
}

/// A command's answer: lines for the console, then its effect.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub lines: Vec<String>,
    pub effect: Option<Effect>,
}

impl Reply {
    fn line(line: String) -> Reply {
        Reply { lines: alloc::vec![line], effect: None }
    }
}

/// What `command` says to print and do, given the VMs as `vms` shows them.
pub fn decide(command: &Command, vms: &impl VmDirectory) -> Reply {
    let find = |name: &VmName| {
        (0..vms.count())
            .find(|&i| vms.spec(i).is_some_and(|s| name.matches(i, s.name)))
            .ok_or_else(|| Reply::line(format!("hyp: no VM {name} (`list` shows them)")))
    };
    let name_of = |id: usize| vms.spec(id).map_or("?", |s| s.name);
    match command {
        Command::Help => Reply::line(String::from(HELP)),
        Command::List => list(vms),
        Command::Focus(name) => match find(name) {
            Ok(id) => Reply {
                lines: alloc::vec![format!("hyp: console input goes to vm{id} {} (Ctrl-] for commands)", name_of(id))],
                effect: Some(Effect::SetFocus(id)),
            },
            Err(reply) => reply,
        },
        Command::Destroy(name) => find(name).map_or_else(|r| r, |id| end(vms, id, EndReason::Destroyed)),
        Command::Restart(name) => match find(name) {
            Err(reply) => reply,
            Ok(id) if !matches!(vms.state(id), VmState::Destroyed) => end(vms, id, EndReason::Restart),
            Ok(id) => Reply {
                lines: alloc::vec![format!("hyp: vm{id} {}: creating it again from its manifest entry", name_of(id))],
                effect: Some(Effect::CreateAgain(id)),
            },
        },
    }
}

fn end(vms: &impl VmDirectory, id: usize, reason: EndReason) -> Reply {
    let name = vms.spec(id).map_or("?", |s| s.name);
    match vms.state(id) {
        VmState::Destroyed => {
            Reply::line(format!("hyp: vm{id} {name} is destroyed already (`restart {id}` creates it again)"))
        }
        VmState::Ending { .. } => Reply::line(format!("hyp: vm{id} {name} is ending already")),
        VmState::Running { .. } => Reply {
            lines: alloc::vec![format!(
                "hyp: vm{id} {name}: {}",
                if reason == EndReason::Restart { "restarting" } else { "destroying" }
            )],
            effect: Some(Effect::End { vm: id, reason }),
        },
    }
}

fn list(vms: &impl VmDirectory) -> Reply {
    let mut lines = Vec::new();
    for id in 0..vms.count() {
        let Some(spec) = vms.spec(id) else { continue };
        let placement = match spec.placement.cpus {
            Some(cpus) => {
                let cpus: Vec<u32> = cpus.iter().collect();
                format!("{} on CPUs {cpus:?}", spec.placement.policy.name())
            }
            None => String::from("pinned"),
        };
        let focus = if vms.focus() == id { ", has the console" } else { "" };
        let (name, vcpus, mib) = (spec.name, spec.vcpus, spec.memory >> 20);
        lines.push(match vms.state(id) {
            VmState::Running { exits, cpu_time_us } => {
                let time = cpu_time(cpu_time_us);
                format!("vm{id} {name}: running, {vcpus} vCPU(s) {placement}, {mib} MiB{focus}; {time}; {exits}")
            }
            VmState::Ending { exits, cpu_time_us } => {
                let time = cpu_time(cpu_time_us);
                format!("vm{id} {name}: ending, {vcpus} vCPU(s) {placement}, {mib} MiB{focus}; {time}; {exits}")
            }
            VmState::Destroyed => {
                format!("vm{id} {name}: destroyed, {vcpus} vCPU(s) {placement}, {mib} MiB{focus}")
            }
        });
    }
    lines.extend(vms.io_lines());
    let (in_use, size) = vms.heap();
    lines.push(heap_line(in_use, size));
    Reply { lines, effect: None }
}

/// A VM's CPU time as `list` says it, to the millisecond.
fn cpu_time(us: u64) -> String {
    format!("CPU time {}.{:03} s", us / 1_000_000, us / 1000 % 1000)
}
