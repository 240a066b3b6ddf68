//! Where what the user types goes: to the VM with the input focus ([`Focus`], moved by the
//! management console), and there to the one of its two consoles (its PL011 and its virtio
//! console) the guest wrote to last ([`ConsoleChoice`]), the one its shell is on. Feeding
//! both would hand a reader of the other one everything typed for the shell.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use vdev::pl011::ConsoleOutput;

/// The VM (by index) that receives console input; vm0 at boot.
#[derive(Default)]
pub struct Focus(AtomicUsize);

impl Focus {
    pub const fn new() -> Self {
        Focus(AtomicUsize::new(0))
    }
    /// Whether VM `vm` has the focus: its console output is interactive.
    pub fn is(&self, vm: usize) -> bool {
        self.0.load(Ordering::Relaxed) == vm
    }
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
    /// Console input goes to VM `vm` from now on.
    pub fn set(&self, vm: usize) {
        self.0.store(vm, Ordering::Relaxed);
    }
}

/// Which of a VM's two consoles the guest wrote to last.
#[derive(Clone, Default)]
pub struct ConsoleChoice(Arc<AtomicBool>);

impl ConsoleChoice {
    pub fn virtio_is_active(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A VM console output that marks itself as the one the guest uses.
pub struct TrackedConsole<O> {
    out: O,
    choice: ConsoleChoice,
    is_virtio: bool,
}

impl<O: ConsoleOutput> TrackedConsole<O> {
    pub fn new(out: O, choice: &ConsoleChoice, is_virtio: bool) -> Self {
        TrackedConsole { out, choice: choice.clone(), is_virtio }
    }
}

impl<O: ConsoleOutput> ConsoleOutput for TrackedConsole<O> {
    fn put(&mut self, byte: u8) {
        self.choice.0.store(self.is_virtio, Ordering::Relaxed);
        self.out.put(byte);
    }
}
