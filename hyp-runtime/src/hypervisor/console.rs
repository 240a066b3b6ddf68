//! The board's console as the VMs share it: what the user types goes to the VM with the
//! input focus (into its emulated PL011 or virtio console), until Ctrl-] opens the
//! management console's command line (hyp_core::management). A command is decided by
//! crate::management and its effect is carried out here. Both run where the console's
//! interrupt is taken, on the boot CPU; a VM with running vCPUs ends when its last vCPU has
//! stopped, on that vCPU's CPU.

use alloc::string::String;
use alloc::vec::Vec;
use core::borrow::Borrow;

use hyp_core::bundle::VmSpec;
use hyp_core::management::{Action, Command};

use super::{say, BoardOf, Hypervisor, Virtualization};
use crate::board::Board;
use crate::management::{decide, Effect, VmDirectory, VmState};
use crate::scheduling::vcpu_ref;
use crate::vm::Vm;

/// At most this many typed bytes are taken at a time (the PL011's FIFO holds 32).
const INPUT_BATCH: usize = 64;

impl<V: Virtualization> Hypervisor<V> {
    /// Console input from here on: the console's interrupt `intid` goes to CPU `cpu`.
    pub fn enable_console_input(&self, intid: u32, cpu: usize) {
        if let Err(e) = self.routes.set(intid, crate::interrupts::Route::ConsoleInput) {
            return say!(V, "hypervisor: the console's interrupt cannot be taken ({e}): no console input");
        }
        V::enable_interrupt(intid, cpu);
        BoardOf::<V>::enable_console_input();
    }

    /// The console's interrupt: what was typed goes to the VM with the focus, or to the
    /// command line.
    #[inline(never)]
    pub fn console_interrupt(&'static self) {
        let mut buf = [0u8; INPUT_BATCH];
        loop {
            let n = BoardOf::<V>::take_console_input(&mut buf);
            if n == 0 {
                break;
            }
            let actions = self.console.lock().feed(&buf[..n]);
            for action in actions {
                match action {
                    Action::ToVm(bytes) => {
                        if let Some(vm) = self.vm(BoardOf::<V>::focus().get()) {
                            (*vm).borrow().console_input(&bytes);
                        }
                    }
                    Action::Echo(bytes) => {
                        BoardOf::<V>::write(format_args!("{}", core::str::from_utf8(&bytes).unwrap_or("")))
                    }
                    Action::Run(command) => self.run_command(command),
                    Action::Refused(e) => say!(V, "hyp: {e}"),
                }
            }
        }
    }

    /// A management command, decided and carried out.
    pub fn run_command(&'static self, command: Command) {
        let reply = decide(&command, self);
        for line in &reply.lines {
            say!(V, "{line}");
        }
        match reply.effect {
            None => {}
            Some(Effect::SetFocus(id)) => BoardOf::<V>::focus().set(id),
            Some(Effect::End { vm: id, reason }) => {
                // It may have ended since the command was decided: then there is nothing to end.
                if let Some(vm) = self.vm(id) {
                    if (*vm).borrow().request_end(reason) {
                        // No vCPU runs to see it end: it ends here.
                        self.vm_ended(&vm, reason);
                    }
                }
            }
            Some(Effect::CreateAgain(id)) => {
                if let Err(e) = self.start_again(id) {
                    say!(V, "hyp: {e}");
                }
            }
        }
    }
}

impl<V: Virtualization> Hypervisor<V> {
    /// How long VM `id`'s vCPUs have run, together, in microseconds.
    fn cpu_time_us(&self, id: usize) -> u64 {
        let vcpus = self.vms.spec(id).map_or(0, |s| s.vcpus as usize);
        (0..vcpus).map(|i| self.scheduling.run_time_us(vcpu_ref(id, i))).sum()
    }
}

/// The VM table as the commands see it.
impl<V: Virtualization> VmDirectory for Hypervisor<V> {
    fn count(&self) -> usize {
        self.vms.len()
    }
    fn spec(&self, id: usize) -> Option<VmSpec<'static>> {
        self.vms.spec(id)
    }
    fn state(&self, id: usize) -> VmState {
        match self.vm(id) {
            Some(vm) => {
                let vm: &Vm<V::Env> = (*vm).borrow();
                let exits = vm.exit_counts();
                let cpu_time_us = self.cpu_time_us(id);
                if vm.is_ending() {
                    VmState::Ending { exits, cpu_time_us }
                } else {
                    VmState::Running { exits, cpu_time_us }
                }
            }
            None => VmState::Destroyed,
        }
    }
    fn focus(&self) -> usize {
        BoardOf::<V>::focus().get()
    }
    fn heap(&self) -> (u64, u64) {
        V::heap_usage()
    }
    fn io_lines(&self) -> Vec<String> {
        (0..hyp_core::platform::MAX_CPUS).filter_map(|cpu| self.io.get(cpu).map(|core| core.line(cpu))).collect()
    }
}
