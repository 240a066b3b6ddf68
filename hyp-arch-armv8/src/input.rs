//! Console input: what the user types on the board's UART goes to the VM that has the input
//! focus (into its emulated PL011 or virtio console, whose interrupt the guest then takes),
//! until Ctrl-] opens the management console's command line (`hyp_core::management`,
//! carried out by `manage`).

use core::sync::atomic::{AtomicU32, Ordering};

use hyp_core::management::{Action, ConsoleMux};
use hyp_runtime::focus::Focus;
use spin::Mutex;

use crate::console;

/// The board UART's interrupt, once console input is on (0: off).
static UART_INTID: AtomicU32 = AtomicU32::new(0);
/// The VM that receives console input.
pub static FOCUS: Focus = Focus::new();
static MUX: Mutex<ConsoleMux> = Mutex::new(ConsoleMux { line: None });

/// Turns console input on: the UART's interrupt `intid` goes to the CPU with this index and
/// MPIDR, which hands the bytes to the VM with the focus.
pub fn enable(intid: u32, cpu: usize, mpidr: u64) {
    UART_INTID.store(intid, Ordering::Release);
    crate::gic::enable_spi(intid, cpu, mpidr);
    console::enable_input();
}

/// Whether physical interrupt `intid` is the UART's.
pub fn is_uart_interrupt(intid: u32) -> bool {
    intid != 0 && intid == UART_INTID.load(Ordering::Relaxed)
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
