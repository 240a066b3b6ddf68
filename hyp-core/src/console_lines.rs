//! Several VMs' console output and the hypervisor's own on the one host UART: each VM's
//! lines carry its name (`web | ...`), and no line is left unreadable by another's.
//!
//! The VM with the input focus is interactive: its bytes go out as they come, so its prompt
//! shows before its line ends and line editing works. The others' are printed as whole
//! lines. Anything printed while the interactive VM's line is unfinished starts on a fresh
//! line, and when that VM goes on, its line so far is shown again after its name (as a
//! shell redraws its prompt after a background job's message). So every line a VM finishes
//! appears whole on one console line, whatever interrupted it: what a user reads or
//! searches in a log of several VMs is never split.

use alloc::vec::Vec;
use core::fmt;

/// The host UART's transmitter.
pub trait Transmit {
    fn put(&mut self, byte: u8);
}

/// A VM's line longer than this is printed in pieces of this size (and only its last piece
/// is shown again after an interruption).
pub const MAX_LINE: usize = 256;

/// The host UART and which VM's unfinished line its cursor is on.
pub struct HostConsole<T> {
    uart: T,
    open_line: Option<usize>,
}

impl<T: Transmit> HostConsole<T> {
    pub const fn new(uart: T) -> Self {
        HostConsole { uart, open_line: None }
    }

    pub fn uart(&mut self) -> &mut T {
        &mut self.uart
    }

    /// Ends the interactive VM's unfinished line, if the cursor is on one.
    fn fresh_line(&mut self) {
        if self.open_line.take().is_some() {
            self.uart.put(b'\r');
            self.uart.put(b'\n');
        }
    }

    /// The hypervisor's own text, from a fresh line.
    pub fn print(&mut self, args: fmt::Arguments<'_>) {
        self.fresh_line();
        let _ = fmt::Write::write_fmt(self, args);
    }

    fn put_prefix(&mut self, name: &str) {
        name.bytes().chain(*b" | ").for_each(|b| self.uart.put(b));
    }

    /// A whole line of a VM without the focus; control characters other than tab show as
    /// `?`, so a guest cannot move the cursor over another VM's output.
    fn print_line(&mut self, name: &str, line: &[u8]) {
        self.fresh_line();
        self.put_prefix(name);
        for &b in line.iter().filter(|&&b| b != b'\r') {
            self.uart.put(if b == b'\t' || (b.is_ascii() && !b.is_ascii_control()) { b } else { b'?' });
        }
        self.uart.put(b'\r');
        self.uart.put(b'\n');
    }

    /// `byte` of the interactive VM `vm`, passed through as it is (the guest's terminal
    /// driver sends its own carriage returns). Unless the cursor is on this VM's line with
    /// `so_far` already shown, the line starts afresh with the VM's name and `so_far`.
    fn print_interactive(&mut self, vm: usize, name: &str, so_far: &[u8], so_far_shown: bool, byte: u8) {
        if self.open_line != Some(vm) || !so_far_shown {
            self.fresh_line();
            self.put_prefix(name);
            so_far.iter().for_each(|&b| self.uart.put(b));
        }
        self.uart.put(byte);
        self.open_line = if byte == b'\n' { None } else { Some(vm) };
    }
}

impl<T: Transmit> fmt::Write for HostConsole<T> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.uart.put(b'\r');
            }
            self.uart.put(b);
        }
        Ok(())
    }
}

/// One VM's console output (the bytes its UARTs transmit): its unfinished line.
pub struct VmConsoleLines {
    vm: usize,
    name: &'static str,
    line: Vec<u8>,
    /// Whether every byte of `line` is on the console (it came while the VM was interactive).
    shown: bool,
}

impl VmConsoleLines {
    pub fn new(vm: usize, name: &'static str) -> Self {
        VmConsoleLines { vm, name, line: Vec::with_capacity(MAX_LINE), shown: true }
    }

    pub fn vm(&self) -> usize {
        self.vm
    }

    /// Takes `byte`, the VM being `interactive` (having the focus) or not. `console` is
    /// called, with the host console, when something is to be printed: only then does the
    /// caller take the lock that shares it.
    pub fn put<T: Transmit>(
        &mut self,
        byte: u8,
        interactive: bool,
        mut console: impl FnMut(&mut dyn FnMut(&mut HostConsole<T>)),
    ) {
        let (vm, name) = (self.vm, self.name);
        if interactive {
            let (so_far, shown) = (&self.line, self.shown);
            console(&mut |c| c.print_interactive(vm, name, so_far, shown, byte));
            self.shown = true;
        }
        let line_ends = byte == b'\n';
        if line_ends || self.line.len() == MAX_LINE {
            if !interactive {
                let line = &self.line;
                console(&mut |c| c.print_line(name, line));
            }
            self.line.clear();
            self.shown = true;
        }
        if !line_ends {
            self.line.push(byte);
            self.shown &= interactive;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    impl Transmit for Vec<u8> {
        fn put(&mut self, byte: u8) {
            self.push(byte);
        }
    }

    /// The host console and the VMs `web` (VM 0) and `db` (VM 1).
    struct Screen {
        console: HostConsole<Vec<u8>>,
        vms: [VmConsoleLines; 2],
        focus: usize,
    }

    impl Screen {
        fn new() -> Self {
            Screen {
                console: HostConsole::new(Vec::new()),
                vms: [VmConsoleLines::new(0, "web"), VmConsoleLines::new(1, "db")],
                focus: 0,
            }
        }

        fn guest(&mut self, vm: usize, text: &str) {
            for b in text.bytes() {
                let console = &mut self.console;
                self.vms[vm].put(b, self.focus == vm, |write| write(console));
            }
        }

        fn text(&self) -> String {
            String::from_utf8_lossy(&self.console.uart).replace('\r', "")
        }
    }

    #[test]
    fn a_vm_without_the_focus_is_printed_as_whole_lines_with_its_name() {
        let mut s = Screen::new();
        s.guest(1, "booting\r\n");
        s.guest(1, "almost");
        assert_eq!(s.text(), "db | booting\n");
        s.guest(1, " done\n");
        assert_eq!(s.text(), "db | booting\ndb | almost done\n");
    }

    #[test]
    fn the_interactive_vm_is_printed_as_its_bytes_come() {
        let mut s = Screen::new();
        s.guest(0, "/ # ");
        assert_eq!(s.text(), "web | / # ");
        s.guest(0, "ls\r\n");
        assert_eq!(s.console.uart, b"web | / # ls\r\n");
    }

    #[test]
    fn an_interrupted_interactive_line_is_shown_whole_again_when_the_vm_goes_on() {
        let mut s = Screen::new();
        s.guest(0, "guest: eth0 is 10.");
        s.guest(1, "db | a line of db's\n");
        s.console.print(format_args!("hypervisor: a line of its own\n"));
        s.guest(0, "0.2.15\n");
        assert_eq!(
            s.text(),
            "web | guest: eth0 is 10.\ndb | db | a line of db's\nhypervisor: a line of its own\n\
             web | guest: eth0 is 10.0.2.15\n"
        );
    }

    #[test]
    fn an_uninterrupted_interactive_line_is_not_repeated() {
        let mut s = Screen::new();
        s.guest(0, "one ");
        s.guest(1, "unfinished");
        s.guest(0, "line\n");
        assert_eq!(s.text(), "web | one line\n");
    }

    #[test]
    fn a_line_begun_without_the_focus_is_shown_when_the_vm_gets_it() {
        let mut s = Screen::new();
        s.focus = 1;
        s.guest(0, "/ # ");
        assert_eq!(s.text(), "");
        s.focus = 0;
        s.guest(0, "x");
        assert_eq!(s.text(), "web | / # x");
    }

    #[test]
    fn a_line_that_loses_the_focus_is_printed_whole_when_it_ends() {
        let mut s = Screen::new();
        s.guest(0, "begun ");
        s.focus = 1;
        s.guest(0, "and ended\n");
        assert_eq!(s.text(), "web | begun \nweb | begun and ended\n");
    }

    #[test]
    fn a_vm_without_the_focus_cannot_send_control_characters() {
        let mut s = Screen::new();
        s.guest(1, "\x1b[2Jcleared?\tno\x08\n");
        assert_eq!(s.text(), "db | ?[2Jcleared?\tno?\n");
    }

    #[test]
    fn a_long_line_is_printed_in_pieces_and_its_last_piece_shown_again() {
        let mut s = Screen::new();
        let long = "x".repeat(MAX_LINE + 10);
        s.guest(1, &long);
        assert_eq!(s.text(), format!("db | {}\n", "x".repeat(MAX_LINE)));

        let mut s = Screen::new();
        s.guest(0, &long);
        s.console.print(format_args!("!\n"));
        s.guest(0, "\n");
        assert_eq!(s.text(), format!("web | {long}\n!\nweb | {}\n", "x".repeat(10)));
    }
}
