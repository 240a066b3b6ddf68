//! The hypervisor's own console: the board's PL011, found in the device tree, shared by
//! every CPU under one lock. How the VMs' output and the hypervisor's share it, line by
//! line, is `hyp_core::console_lines`; which VM's output is interactive, the input focus
//! (hyp_runtime::focus).

use core::fmt;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::console_lines::{HostConsole, Transmit, VmConsoleLines};
use hyp_core::sync::Mutex;
use hyp_runtime::focus::Focus;
use vdev::pl011::ConsoleOutput;

/// PL011 registers used to transmit and receive (ARM DDI 0183G 3.3.1, 3.3.3, 3.3.10, 3.3.14).
const UARTDR: usize = 0x000;
const UARTFR: usize = 0x018;
const UARTIMSC: usize = 0x038;
const UARTICR: usize = 0x044;
const FR_RXFE: u32 = 1 << 4;
const FR_TXFF: u32 = 1 << 5;
/// The receive and receive-timeout interrupts (IMSC, ICR bits).
const INT_RX_RT: u32 = (1 << 4) | (1 << 6);

struct HostUart {
    base: usize,
}

impl Transmit for HostUart {
    fn put(&mut self, byte: u8) {
        // SAFETY: `base` is the PL011 the device tree names, mapped Device-nGnRE in the EL2
        // tables (mmu.rs) or reached with the MMU off; these are its FR and DR registers.
        unsafe {
            while read_volatile((self.base + UARTFR) as *const u32) & FR_TXFF != 0 {}
            write_volatile((self.base + UARTDR) as *mut u32, u32::from(byte));
        }
    }
}

impl HostUart {
    fn register(&self, offset: usize) -> *mut u32 {
        (self.base + offset) as *mut u32
    }

    /// Unmasks the receive interrupts: typed bytes raise the UART's interrupt.
    fn enable_receive_interrupt(&mut self) {
        // SAFETY: UARTIMSC of the PL011 the device tree names (see `put`).
        unsafe { write_volatile(self.register(UARTIMSC), read_volatile(self.register(UARTIMSC)) | INT_RX_RT) };
    }

    /// Takes the bytes waiting in the receive FIFO. The receive interrupts are cleared
    /// first: a byte that arrives after the last look at the FIFO raises them again, where
    /// clearing them afterwards would leave it unread with no interrupt.
    /// What the receive FIFO holds, into `into`; how many bytes.
    fn receive(&mut self, into: &mut [u8]) -> usize {
        let mut n = 0;
        // SAFETY: UARTFR, UARTDR and UARTICR of the PL011 the device tree names (see `put`).
        unsafe {
            write_volatile(self.register(UARTICR), INT_RX_RT);
            while n < into.len() && read_volatile(self.register(UARTFR)) & FR_RXFE == 0 {
                into[n] = read_volatile(self.register(UARTDR)) as u8;
                n += 1;
            }
        }
        n
    }
}

static CONSOLE: Mutex<Option<HostConsole<HostUart>>> = Mutex::new(None);
/// The VM that receives console input; its console output is interactive.
pub static FOCUS: Focus = Focus::new();
/// The same UART's base, for printing without the lock.
static UART_BASE: AtomicUsize = AtomicUsize::new(0);

/// Called once the EL2 MMU is on (the lock needs cacheable memory for its exclusives).
pub fn init(base: u64) {
    *CONSOLE.lock() = Some(HostConsole::new(HostUart { base: base as usize }));
    UART_BASE.store(base as usize, Ordering::Release);
}

/// Console input from here on raises the UART's interrupt.
pub fn enable_input() {
    if let Some(console) = CONSOLE.lock().as_mut() {
        console.uart().enable_receive_interrupt();
    }
}

/// The bytes the user typed since the last call, into `buf`; how many.
pub fn take_input(buf: &mut [u8]) -> usize {
    CONSOLE.lock().as_mut().map_or(0, |console| console.uart().receive(buf))
}

pub fn print(args: fmt::Arguments<'_>) {
    if let Some(console) = CONSOLE.lock().as_mut() {
        console.print(args);
    }
}

/// For the exception and panic handlers: prints under the console lock if it can be had
/// within a bounded wait, so the report is not interleaved with another CPU's lines, and
/// without it otherwise (this or another CPU may have died holding it: lines may then
/// interleave, which is better than printing nothing).
pub fn print_unlocked(args: fmt::Arguments<'_>) {
    /// About a millisecond of spinning on a 1 GHz core: other CPUs hold the lock for one
    /// line at a time.
    const SPINS: u32 = 1 << 20;
    for _ in 0..SPINS {
        if let Some(mut console) = CONSOLE.try_lock() {
            if let Some(console) = console.as_mut() {
                console.print(args);
                return;
            }
            break;
        }
        hyp_core::sync::wait_step();
    }
    let base = UART_BASE.load(Ordering::Acquire);
    if base != 0 {
        HostConsole::new(HostUart { base }).print(args);
    }
}

#[macro_export]
macro_rules! println {
    () => { $crate::uart::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::uart::print(format_args!("{}\n", format_args!($($arg)*))) };
}

/// A VM's console: bytes from its emulated UART, attributed to it on the host console.
pub struct VmConsole {
    lines: VmConsoleLines,
    focus: &'static Focus,
}

impl VmConsole {
    /// VM `vm`'s, interactive while it has `focus`.
    pub fn new(vm: usize, name: &'static str, focus: &'static Focus) -> Self {
        VmConsole { lines: VmConsoleLines::new(vm, name), focus }
    }
}

impl ConsoleOutput for VmConsole {
    fn put(&mut self, byte: u8) {
        let interactive = self.focus.is(self.lines.vm());
        self.lines.put(byte, interactive, |print| {
            if let Some(console) = CONSOLE.lock().as_mut() {
                print(console);
            }
        });
    }
}
