//! Console input: what the user types on the board's UART goes to the VM that has the input
//! focus (into its emulated PL011 or virtio console, whose interrupt the guest then takes),
//! until Ctrl-] opens the management console's command line (`hyp_core::management`,
//! carried out by `manage`).

use hyp_board_qemu_virt::uart::FOCUS;
use hyp_core::management::{Action, ConsoleMux};
use hyp_runtime::interrupts::Route;

use crate::arch::ROUTES;
use spin::Mutex;

use hyp_board_qemu_virt::uart as console;

static MUX: Mutex<ConsoleMux> = Mutex::new(ConsoleMux { line: None });

/// Turns console input on: the UART's interrupt `intid` goes to the CPU with this index and
/// MPIDR, which hands the bytes to the VM with the focus.
pub fn enable(intid: u32, cpu: usize, mpidr: u64) {
    if let Err(e) = ROUTES.set(intid, Route::ConsoleInput) {
        return println!("hypervisor: the UART's interrupt cannot be taken ({e}): no console input");
    }
    crate::gic::enable_spi(intid, cpu, mpidr);
    console::enable_input();
}

/// The UART's interrupt: what was typed goes to the VM with the focus, or to the command line.
pub fn uart_interrupt() {
    loop {
        let bytes = console::take_input();
        if bytes.is_empty() {
            break;
        }
        let actions = MUX.lock().feed(&bytes);
        for action in actions {
            match action {
                Action::ToVm(bytes) => {
                    if let Some(vm) = crate::vm_at(FOCUS.get()) {
                        vm.console_input(&bytes);
                    }
                }
                Action::Echo(bytes) => console::print(format_args!("{}", core::str::from_utf8(&bytes).unwrap_or(""))),
                Action::Run(command) => crate::manage::run(command),
                Action::Refused(e) => println!("hyp: {e}"),
            }
        }
    }
}
