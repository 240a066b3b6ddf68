//! The management console's commands (docs/management.md), carried out: the runtime
//! decides each (hyp_runtime::management) from the VM table, and its effect is applied
//! here. They run where the console input is taken (the UART's interrupt, on the boot
//! CPU); a VM with running vCPUs ends when its last vCPU has stopped, on that vCPU's CPU
//! (`main::vm_ended`).

use hyp_core::bundle::VmSpec;
use hyp_core::management::Command;
use hyp_runtime::management::{decide, Effect, VmDirectory, VmState};

use crate::{vm_at, VMS};
use hyp_board_qemu_virt::uart::FOCUS;

/// The VM table as the commands see it.
struct VmTable;

impl VmDirectory for VmTable {
    fn count(&self) -> usize {
        VMS.len()
    }
    fn spec(&self, id: usize) -> Option<VmSpec<'static>> {
        VMS.spec(id)
    }
    fn state(&self, id: usize) -> VmState {
        match vm_at(id) {
            Some(vm) if vm.is_ending() => VmState::Ending { exits: vm.exit_counts() },
            Some(vm) => VmState::Running { exits: vm.exit_counts() },
            None => VmState::Destroyed,
        }
    }
    fn focus(&self) -> usize {
        FOCUS.get()
    }
    fn heap(&self) -> (u64, u64) {
        (crate::memory::heap_in_use(), crate::memory::HEAP_SIZE)
    }
}

pub fn run(command: Command) {
    let reply = decide(&command, &VmTable);
    for line in &reply.lines {
        println!("{line}");
    }
    match reply.effect {
        None => {}
        Some(Effect::SetFocus(id)) => FOCUS.set(id),
        Some(Effect::End { vm: id, reason }) => {
            // It may have ended since the command was decided: then there is nothing to end.
            if let Some(vm) = vm_at(id) {
                if vm.request_end(reason) {
                    // No vCPU runs to see it end: it ends here.
                    crate::vm_ended(&vm, reason);
                }
            }
        }
        Some(Effect::CreateAgain(id)) => {
            if let Err(e) = crate::start_again(id) {
                println!("hyp: {e}");
            }
        }
    }
}
