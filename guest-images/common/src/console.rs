//! The console: the VM's PL011 (emulated by the hypervisor, or QEMU's own natively), written
//! one byte at a time to its data register, and read a byte at a time when asked.

use core::fmt::{self, Write};
use core::ptr::write_volatile;

/// The PL011 of QEMU's `virt` board and of every VM (`hyp_core::guest_map`).
pub const UART: usize = 0x0900_0000;
/// UARTDR and UARTFR.
pub const UARTDR: usize = UART;
pub const UARTFR: usize = UART + 0x18;

pub struct Uart;

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            // SAFETY: the VM's PL011 data register (MMIO); a write sends one character.
            unsafe { write_volatile(UARTDR as *mut u32, u32::from(b)) };
        }
        Ok(())
    }
}

/// Prints to the console, without a newline.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{ use core::fmt::Write as _; let _ = write!($crate::console::Uart, $($arg)*); }};
}

/// Prints a line to the console.
#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {{ use core::fmt::Write as _; let _ = writeln!($crate::console::Uart, $($arg)*); }};
}

/// Writes `args` to the console (for code that formats its own line).
pub fn write(args: fmt::Arguments<'_>) {
    let _ = Uart.write_fmt(args);
}

/// UARTFR.RXFE: the receive FIFO is empty.
const RXFE: u32 = 1 << 4;

/// Waits for a byte typed at the console and returns it (polling UARTFR, each read an exit
/// under the hypervisor).
pub fn read_byte() -> u8 {
    // SAFETY: the VM's PL011 flag register (MMIO), read only.
    while unsafe { core::ptr::read_volatile(UARTFR as *const u32) } & RXFE != 0 {
        core::hint::spin_loop();
    }
    // SAFETY: the VM's PL011 data register; a read takes the received byte.
    (unsafe { core::ptr::read_volatile(UARTDR as *const u32) } & 0xff) as u8
}
