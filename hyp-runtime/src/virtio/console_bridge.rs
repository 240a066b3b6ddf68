//! A VM's virtio console backend: what the guest writes goes to its console beside the
//! PL011's.

use vdev::pl011::ConsoleOutput;
use vdev::virtio::console::ConsoleBackend;

use crate::focus::TrackedConsole;

pub struct ConsoleBridge<O>(pub TrackedConsole<O>);

impl<O: ConsoleOutput> ConsoleBackend for ConsoleBridge<O> {
    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.0.put(b));
    }
}
