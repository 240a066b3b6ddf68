//! The emulated PL011 UART a guest drives (`vdev::pl011`): any sequence of register
//! reads and writes of any width, and bytes typed. Checked: no panic; the interrupt line it
//! reports is the one it drove last.
#![no_main]

use std::sync::{Arc, Mutex};

use arbitrary::Arbitrary;
use hyp_core::mmio::MmioDevice;
use hyp_core::syndrome::AccessWidth;
use libfuzzer_sys::fuzz_target;
use vdev::pl011::{ConsoleOutput, InterruptLine, Pl011};

struct Sink;
impl ConsoleOutput for Sink {
    fn put(&mut self, _: u8) {}
}

struct Line(Arc<Mutex<bool>>);
impl InterruptLine for Line {
    fn set_level(&mut self, high: bool) {
        *self.0.lock().unwrap() = high;
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Read { offset: u16, width: u8 },
    Write { offset: u16, width: u8, value: u64 },
    Type(u8),
    Reset,
}

fn width(w: u8) -> AccessWidth {
    match w % 4 {
        0 => AccessWidth::Byte,
        1 => AccessWidth::Halfword,
        2 => AccessWidth::Word,
        _ => AccessWidth::Doubleword,
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let level = Arc::new(Mutex::new(false));
    let mut uart = Pl011::new(Box::new(Sink), Box::new(Line(Arc::clone(&level))));
    for op in ops.iter().take(4096) {
        match *op {
            Op::Read { offset, width: w } => {
                let _ = uart.read(u64::from(offset), width(w));
            }
            Op::Write { offset, width: w, value } => {
                let _ = uart.write(u64::from(offset), width(w), value);
            }
            Op::Type(b) => {
                uart.receive(b);
            }
            // The interrupt controller is reset with the UART (a VM reboot): the line is low.
            Op::Reset => {
                uart.reset();
                *level.lock().unwrap() = false;
            }
        }
        if !matches!(op, Op::Reset | Op::Type(_)) {
            assert_eq!(uart.interrupt_asserted(), *level.lock().unwrap(), "the line follows the UART's state");
        }
    }
});
