//! Console input: what the user types on the board's UART goes to the VM that has the input
//! focus, into its emulated PL011 (whose receive interrupt the guest then takes).

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::console;

/// The board UART's interrupt, once console input is on (0: off).
static UART_INTID: AtomicU32 = AtomicU32::new(0);
/// The VM (by index) that receives console input.
static FOCUS: AtomicUsize = AtomicUsize::new(0);

/// Turns console input on: the UART's interrupt `intid` goes to the CPU with this index and
/// MPIDR, which hands the bytes to the VM with the focus.
pub fn enable(intid: u32, cpu: usize, mpidr: u64) {
    UART_INTID.store(intid, Ordering::Release);
    crate::gic::enable_spi(intid, cpu, mpidr);
    console::enable_input();
}

/// Whether VM `vm` (by index) has the input focus: its console is interactive.
pub fn has_focus(vm: usize) -> bool {
    FOCUS.load(Ordering::Relaxed) == vm
}

/// Whether physical interrupt `intid` is the UART's.
pub fn is_uart_interrupt(intid: u32) -> bool {
    intid != 0 && intid == UART_INTID.load(Ordering::Relaxed)
}

/// The UART's interrupt: takes what was typed and gives it to the VM with the focus.
pub fn uart_interrupt() {
    loop {
        let bytes = console::take_input();
        if bytes.is_empty() {
            break;
        }
        let focus = FOCUS.load(Ordering::Relaxed);
        if let Some(vm) = crate::VMS.get().and_then(|vms| vms.get(focus)) {
            vm.console_input(&bytes);
        }
    }
}
