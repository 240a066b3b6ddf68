//! The hypervisor's own console: the board's PL011, found in the device tree, shared by
//! every CPU under one lock, and each VM's console output, attributed line by line.

use core::fmt::{self, Write};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicUsize, Ordering};

use alloc::string::String;
use hyp_core::pl011::ConsoleOutput;
use spin::Mutex;

/// PL011 registers used to transmit (ARM DDI 0183G 3.3.1, 3.3.3).
const UARTDR: usize = 0x000;
const UARTFR: usize = 0x018;
const FR_TXFF: u32 = 1 << 5;

struct HostUart {
    base: usize,
}

impl HostUart {
    fn put(&mut self, byte: u8) {
        // SAFETY: `base` is the PL011 the device tree names, mapped Device-nGnRE in the EL2
        // tables (mmu.rs) or reached with the MMU off; these are its FR and DR registers.
        unsafe {
            while read_volatile((self.base + UARTFR) as *const u32) & FR_TXFF != 0 {}
            write_volatile((self.base + UARTDR) as *mut u32, u32::from(byte));
        }
    }
}

impl Write for HostUart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.put(b'\r');
            }
            self.put(b);
        }
        Ok(())
    }
}

static UART: Mutex<Option<HostUart>> = Mutex::new(None);
/// The same UART's base, for printing without the lock.
static UART_BASE: AtomicUsize = AtomicUsize::new(0);

/// Called once the EL2 MMU is on (the lock needs cacheable memory for its exclusives).
pub fn init(base: u64) {
    *UART.lock() = Some(HostUart { base: base as usize });
    UART_BASE.store(base as usize, Ordering::Release);
}

pub fn print(args: fmt::Arguments<'_>) {
    if let Some(uart) = UART.lock().as_mut() {
        let _ = uart.write_fmt(args);
    }
}

/// For the exception and panic handlers: prints even if this or another CPU died holding
/// the lock (lines may interleave; that is better than printing nothing).
pub fn print_unlocked(args: fmt::Arguments<'_>) {
    let base = UART_BASE.load(Ordering::Acquire);
    if base != 0 {
        let _ = HostUart { base }.write_fmt(args);
    }
}

#[macro_export]
macro_rules! println {
    () => { $crate::console::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::print(format_args!("{}\n", format_args!($($arg)*))) };
}

/// A VM's console: bytes from its emulated UART, printed as whole lines prefixed with the
/// VM's name, so the output of several VMs stays readable.
pub struct VmConsole {
    prefix: &'static str,
    line: String,
}

impl VmConsole {
    pub fn new(prefix: &'static str) -> Self {
        VmConsole { prefix, line: String::new() }
    }
}

const MAX_LINE: usize = 256;

impl ConsoleOutput for VmConsole {
    fn put(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                print(format_args!("{} | {}\n", self.prefix, self.line));
                self.line.clear();
            }
            b'\r' => {}
            _ => {
                self.line.push(if byte == b'\t' || (byte.is_ascii() && !byte.is_ascii_control()) {
                    byte as char
                } else {
                    '?'
                });
                if self.line.len() >= MAX_LINE {
                    print(format_args!("{} | {}\n", self.prefix, self.line));
                    self.line.clear();
                }
            }
        }
    }
}
