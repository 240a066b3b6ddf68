//! The management console on the hypervisor's UART: what the user types goes to the VM that
//! has the console, until the escape character (Ctrl-], as in telnet and virsh) opens a
//! command line (`hyp> `) for the hypervisor. Pure logic: the arch crate feeds it the bytes
//! typed and carries out what it returns.
//!
//! Commands (docs/management.md): `list`, `focus VM`, `destroy VM`, `restart VM`, `help`;
//! an empty line or Ctrl-] goes back to the VM. A VM is named by its index or its name.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Ctrl-]: opens and closes the command line.
pub const ESCAPE: u8 = 0x1d;
/// Longest command line; further characters are refused (the terminal bell).
pub const MAX_LINE: usize = 64;
pub const PROMPT: &str = "hyp> ";

/// A VM as a command names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmName {
    Index(usize),
    Name(String),
}

impl VmName {
    fn parse(word: &str) -> VmName {
        word.parse().map_or_else(|_| VmName::Name(word.into()), VmName::Index)
    }

    /// Whether it names the VM with this index and name.
    pub fn matches(&self, index: usize, name: &str) -> bool {
        match self {
            VmName::Index(i) => *i == index,
            VmName::Name(n) => n == name,
        }
    }
}

impl fmt::Display for VmName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmName::Index(i) => write!(f, "vm{i}"),
            VmName::Name(n) => write!(f, "{n}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    /// Every VM with its state, vCPUs and exits by reason.
    List,
    /// Console input goes to this VM.
    Focus(VmName),
    /// Stop the VM for good: its capabilities are revoked and its memory returned.
    Destroy(VmName),
    /// Destroy the VM and create it again from its manifest entry.
    Restart(VmName),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    Unknown(String),
    MissingVm(&'static str),
    TooManyWords(&'static str),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(word) => write!(f, "unknown command `{word}`; `help` lists the commands"),
            Self::MissingVm(cmd) => write!(f, "`{cmd}` needs a VM: its number or name (`list` shows them)"),
            Self::TooManyWords(cmd) => write!(f, "`{cmd}` takes one VM"),
        }
    }
}

pub const HELP: &str = "\
commands: list                 the VMs, their state, vCPUs and exits by reason, and the heap
          focus VM             console input goes to VM (a number or a name)
          destroy VM           stop VM, revoke its capabilities, return its memory
          restart VM           destroy VM and create it again from the manifest
          help                 this text
an empty line or Ctrl-] goes back to the VM";

/// The last line of `list`: the hypervisor heap's use (`cargo xtask soak` reads it).
pub fn heap_line(in_use: u64, size: u64) -> String {
    alloc::format!("heap: {} KiB of {} KiB in use", in_use / 1024, size / 1024)
}

impl Command {
    pub fn parse(line: &str) -> Result<Command, CommandError> {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { return Err(CommandError::Unknown(String::new())) };
        let vm = |cmd: &'static str, words: &mut core::str::SplitWhitespace<'_>| {
            let name = words.next().ok_or(CommandError::MissingVm(cmd))?;
            match words.next() {
                Some(_) => Err(CommandError::TooManyWords(cmd)),
                None => Ok(VmName::parse(name)),
            }
        };
        match first {
            "help" | "?" => Ok(Command::Help),
            "list" | "ls" => Ok(Command::List),
            "focus" => vm("focus", &mut words).map(Command::Focus),
            "destroy" => vm("destroy", &mut words).map(Command::Destroy),
            "restart" => vm("restart", &mut words).map(Command::Restart),
            other => Err(CommandError::Unknown(other.into())),
        }
    }
}

/// What the arch crate does with typed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Give these bytes to the VM that has the console.
    ToVm(Vec<u8>),
    /// Print this on the console (prompt, echo of the command line).
    Echo(Vec<u8>),
    Run(Command),
    /// The line was not a command: say this.
    Refused(CommandError),
}

/// The console's input state: passing bytes to the VM, or editing a command line.
#[derive(Debug, Default)]
pub struct ConsoleMux {
    /// The command line being typed, if one is open. Public so a `static` can hold a mux.
    pub line: Option<String>,
}

impl ConsoleMux {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a command line is open.
    pub fn in_command(&self) -> bool {
        self.line.is_some()
    }

    /// The actions for `bytes` typed by the user, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut to_vm = Vec::new();
        for &b in bytes {
            let Some(line) = self.line.as_mut() else {
                if b == ESCAPE {
                    push_bytes(&mut actions, Action::ToVm(core::mem::take(&mut to_vm)));
                    self.line = Some(String::new());
                    actions.push(Action::Echo(alloc::format!("\r\n{PROMPT}").into_bytes()));
                } else {
                    to_vm.push(b);
                }
                continue;
            };
            match b {
                ESCAPE => {
                    self.line = None;
                    actions.push(Action::Echo(b"\r\n".to_vec()));
                }
                b'\r' | b'\n' => {
                    let text = core::mem::take(line);
                    self.line = None;
                    actions.push(Action::Echo(b"\r\n".to_vec()));
                    if !text.trim().is_empty() {
                        actions.push(match Command::parse(&text) {
                            Ok(c) => Action::Run(c),
                            Err(e) => Action::Refused(e),
                        });
                    }
                }
                // Backspace and DEL erase the last character.
                0x08 | 0x7f => {
                    if line.pop().is_some() {
                        actions.push(Action::Echo(b"\x08 \x08".to_vec()));
                    }
                }
                b' '..=b'~' if line.len() < MAX_LINE => {
                    line.push(b as char);
                    actions.push(Action::Echo(alloc::vec![b]));
                }
                // Other control characters, or a full line: the bell.
                _ => actions.push(Action::Echo(b"\x07".to_vec())),
            }
        }
        push_bytes(&mut actions, Action::ToVm(to_vm));
        actions
    }
}

fn push_bytes(actions: &mut Vec<Action>, action: Action) {
    if !matches!(&action, Action::ToVm(b) if b.is_empty()) {
        actions.push(action);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<Command, CommandError> {
        Command::parse(line)
    }

    #[test]
    fn the_heap_line_says_kib_in_use_of_the_whole() {
        assert_eq!(heap_line(1536 * 1024 + 100, 32 << 20), "heap: 1536 KiB of 32768 KiB in use");
    }

    #[test]
    fn commands_parse_with_a_vm_by_number_or_name() {
        assert_eq!(run("list"), Ok(Command::List));
        assert_eq!(run("  ls "), Ok(Command::List));
        assert_eq!(run("help"), Ok(Command::Help));
        assert_eq!(run("focus 2"), Ok(Command::Focus(VmName::Index(2))));
        assert_eq!(run("destroy web"), Ok(Command::Destroy(VmName::Name("web".into()))));
        assert_eq!(run("restart 0"), Ok(Command::Restart(VmName::Index(0))));
        assert!(VmName::Index(1).matches(1, "x") && VmName::Name("x".into()).matches(5, "x"));
        assert!(!VmName::Name("x".into()).matches(5, "y"));
    }

    #[test]
    fn bad_commands_say_what_to_do() {
        assert_eq!(run("reboot").unwrap_err().to_string(), "unknown command `reboot`; `help` lists the commands");
        assert_eq!(
            run("destroy").unwrap_err().to_string(),
            "`destroy` needs a VM: its number or name (`list` shows them)"
        );
        assert_eq!(run("focus a b").unwrap_err().to_string(), "`focus` takes one VM");
    }

    #[test]
    fn bytes_go_to_the_vm_until_the_escape_and_after_the_command() {
        let mut mux = ConsoleMux::new();
        assert_eq!(mux.feed(b"ls\r"), [Action::ToVm(b"ls\r".to_vec())]);
        let actions = mux.feed(b"ab\x1dlist\rcd");
        assert_eq!(actions[0], Action::ToVm(b"ab".to_vec()));
        assert_eq!(actions[1], Action::Echo(b"\r\nhyp> ".to_vec()));
        assert!(actions.contains(&Action::Run(Command::List)));
        assert_eq!(actions.last(), Some(&Action::ToVm(b"cd".to_vec())));
        assert!(!mux.in_command());
    }

    #[test]
    fn the_command_line_edits_and_can_be_left_without_a_command() {
        let mut mux = ConsoleMux::new();
        mux.feed(b"\x1d");
        assert!(mux.in_command());
        let actions = mux.feed(b"lsx\x7f\r");
        assert!(actions.contains(&Action::Echo(b"\x08 \x08".to_vec())));
        assert!(actions.contains(&Action::Run(Command::List)), "{actions:?}");
        mux.feed(b"\x1dfoo\x1d");
        assert!(!mux.in_command(), "Ctrl-] leaves the command line");
        assert_eq!(mux.feed(b"x"), [Action::ToVm(b"x".to_vec())], "and nothing was run");
        mux.feed(b"\x1d");
        assert!(!mux.feed(b"\r").iter().any(|a| matches!(a, Action::Run(_) | Action::Refused(_))));
        assert!(!mux.in_command(), "an empty line goes back to the VM");
    }

    #[test]
    fn a_line_is_bounded_and_control_characters_ring_the_bell() {
        let mut mux = ConsoleMux::new();
        mux.feed(b"\x1d");
        let long = [b'a'; MAX_LINE + 10];
        let actions = mux.feed(&long);
        assert_eq!(actions.iter().filter(|a| **a == Action::Echo(b"\x07".to_vec())).count(), 10);
        assert_eq!(mux.feed(b"\x01"), [Action::Echo(b"\x07".to_vec())]);
        let refused = mux.feed(b"\r");
        assert!(matches!(refused.last(), Some(Action::Refused(CommandError::Unknown(w))) if w.len() == MAX_LINE));
    }
}
