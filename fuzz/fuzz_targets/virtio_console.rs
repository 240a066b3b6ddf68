//! The virtio console (`virtio_common` says what is driven and checked), with typed input at
//! any time (`Op::Input`). Also checked: one notify or one continued turn writes out at most
//! `TX_BUDGET` bytes (no guest can hold an exit on its output).
#![no_main]

#[path = "virtio_common.rs"]
mod common;

use std::cell::Cell;
use std::rc::Rc;

use libfuzzer_sys::fuzz_target;
use vdev::virtio::console::{ConsoleBackend, VirtioConsole, TX_BUDGET};

struct Screen(Rc<Cell<u64>>);
impl ConsoleBackend for Screen {
    fn write(&mut self, bytes: &[u8]) {
        self.0.set(self.0.get() + bytes.len() as u64);
        assert!(self.0.get() <= TX_BUDGET, "more than the budget in one turn");
    }
}

fuzz_target!(|input: common::Input| {
    let written = Rc::new(Cell::new(0));
    let counter = Rc::clone(&written);
    // The budget is per turn: the count starts again at every operation.
    common::run(
        VirtioConsole::new(Screen(counter)),
        &input,
        move || written.set(0),
        |mmio, mem, bytes| {
            let _ = mmio.receive_input(mem, bytes);
        },
    );
});
