//! The management console's commands, carried out (docs/management.md): list the VMs,
//! move the console input, destroy or restart a VM. They run where the console input is
//! taken (the UART's interrupt, on the boot CPU); a VM with running vCPUs ends when its last
//! vCPU has stopped, on that vCPU's CPU (`main::vm_ended`).

use hyp_core::management::{Command, VmName, HELP};
use hyp_core::vcpu_power::EndReason;

use crate::{input, vm_at, VMS};

pub fn run(command: Command) {
    match command {
        Command::Help => println!("{HELP}"),
        Command::List => list(),
        Command::Focus(name) => {
            if let Some(id) = find(&name) {
                input::set_focus(id);
                println!("hyp: console input goes to vm{id} {} (Ctrl-] for commands)", spec_name(id));
            }
        }
        Command::Destroy(name) => {
            if let Some(id) = find(&name) {
                end(id, EndReason::Destroyed);
            }
        }
        Command::Restart(name) => {
            let Some(id) = find(&name) else { return };
            if vm_at(id).is_some() {
                return end(id, EndReason::Restart);
            }
            println!("hyp: vm{id} {}: creating it again from its manifest entry", spec_name(id));
            if let Err(e) = crate::start_again(id) {
                println!("hyp: {e}");
            }
        }
    }
}

fn spec_name(id: usize) -> &'static str {
    VMS.get().and_then(|s| s.get(id)).map_or("?", |s| s.spec.name)
}

/// The VM a command names, or says why there is none.
fn find(name: &VmName) -> Option<usize> {
    let found = VMS.get().and_then(|slots| slots.iter().enumerate().position(|(i, s)| name.matches(i, s.spec.name)));
    if found.is_none() {
        println!("hyp: no VM {name} (`list` shows them)");
    }
    found
}

fn end(id: usize, reason: EndReason) {
    let Some(vm) = vm_at(id) else {
        return println!("hyp: vm{id} {} is destroyed already (`restart {id}` creates it again)", spec_name(id));
    };
    if vm.is_ending() {
        return println!("hyp: vm{id} {} is ending already", vm.spec.name);
    }
    println!(
        "hyp: vm{id} {}: {}",
        vm.spec.name,
        if reason == EndReason::Restart { "restarting" } else { "destroying" }
    );
    if vm.request_end(reason) {
        // No vCPU runs to see it end: it ends here.
        crate::vm_ended(&vm, reason);
    }
}

fn list() {
    let Some(slots) = VMS.get() else { return };
    for (id, slot) in slots.iter().enumerate() {
        let spec = slot.spec;
        let placement = match spec.placement.cpus {
            Some(cpus) => {
                let cpus: alloc::vec::Vec<u32> = cpus.iter().collect();
                alloc::format!("{} on CPUs {cpus:?}", spec.placement.policy.name())
            }
            None => alloc::string::String::from("pinned"),
        };
        let focus = if input::has_focus(id) { ", has the console" } else { "" };
        match vm_at(id) {
            Some(vm) => {
                let state = if vm.is_ending() { "ending" } else { "running" };
                println!(
                    "vm{id} {}: {state}, {} vCPU(s) {placement}, {} MiB{focus}; {}",
                    spec.name,
                    spec.vcpus,
                    spec.memory >> 20,
                    vm.exit_counts()
                );
            }
            None => println!(
                "vm{id} {}: destroyed, {} vCPU(s) {placement}, {} MiB{focus}",
                spec.name,
                spec.vcpus,
                spec.memory >> 20
            ),
        }
    }
    println!("{}", hyp_core::management::heap_line(crate::memory::heap_in_use(), crate::memory::HEAP_SIZE));
}
