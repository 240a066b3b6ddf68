//! QEMU command lines and runs: interactive on the terminal, or captured with a timeout for
//! the system tests and benchmarks.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::XtaskError;

/// The architecture of the emulated CPUs: QEMU's `virt` board for AArch64
/// (`qemu-system-aarch64`) or for 32-bit ARM (`qemu-system-arm`, its RAM and devices below
/// 4 GiB: `highmem=off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Aarch64,
    Armv7,
}

/// QEMU's board model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum QemuBoard {
    /// `virt`: the board the hypervisor's guests see too; QEMU writes its device tree, and
    /// the rest of `Machine` says its CPUs, GIC, RAM and virtio devices.
    #[default]
    Virt,
    /// `vexpress-a15`: ARM's Versatile Express with a CoreTile A15 (32-bit only), its
    /// device tree `dtb` (QEMU writes none for it: Debian's `VEXPRESS_A15_DTB`, which
    /// QEMU completes with memory, the initrd and its virtio-mmio transports). With
    /// `secure=off` and the virtualization extensions its CPUs enter the image in HYP mode;
    /// its GIC is the A15's GICv2 (`gic_version` is not used); `-audio none`: no sound
    /// device for its audio codec.
    VexpressA15 { dtb: PathBuf },
    /// `raspi4b` (Raspberry Pi 4B: 4 Cortex-A72s, a GIC-400, 2 GiB), which fixes its CPUs,
    /// GIC, RAM and devices, with the device tree `dtb` (xtask::rpi4).
    Raspi4b { dtb: PathBuf },
}

/// The device tree of the `vexpress-a15` board, in Debian's armhf kernel package.
pub const VEXPRESS_A15_DTB: &str = "vexpress-v2p-ca15-tc1.dtb";

/// The emulated board the hypervisor boots on.
#[derive(Clone, Debug)]
pub struct Machine {
    pub board: QemuBoard,
    pub arch: Arch,
    pub gic_version: u8,
    pub cpu: String,
    pub smp: u32,
    pub memory_mib: u32,
    /// Count instructions: 1 instruction = 1 ns of virtual time, and an idle machine jumps to
    /// its next timer deadline rather than following the host's clock (`-icount
    /// shift=0,sleep=off`: the figures do not move with the host's load).
    pub icount: bool,
    /// Enter the image at EL2 (`virtualization=on`). Off for reference runs of a guest
    /// directly on QEMU, which then enters it at EL1 and answers PSCI over HVC itself.
    pub virtualization: bool,
    /// Lets the hypervisor end the run with a non-zero status (trusted test guests only:
    /// semihosting is reachable from EL1 too).
    pub semihosting: bool,
    /// A raw disk image file as the board's virtio-blk device (`virt` only).
    pub disk: Option<PathBuf>,
    /// A QEMU `blkdebug` configuration for that disk: requests it names fail as it says
    /// (tests of a failing board disk).
    pub disk_errors: Option<PathBuf>,
    /// A virtio-net device on QEMU's user-mode network (`virt` only), with these TCP ports of
    /// 127.0.0.1 forwarded to the guest side (host port, guest port). Nothing listens
    /// anywhere but on the loopback address.
    pub network: Option<Vec<(u16, u16)>>,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            board: QemuBoard::Virt,
            arch: Arch::Aarch64,
            gic_version: 3,
            cpu: "cortex-a72".into(),
            smp: 4,
            memory_mib: 1024,
            icount: false,
            virtualization: true,
            semihosting: false,
            disk: None,
            disk_errors: None,
            network: None,
        }
    }
}

impl Machine {
    pub fn command(&self, kernel: &PathBuf, initrd: Option<&PathBuf>) -> Command {
        let (qemu, highmem) = match self.arch {
            Arch::Aarch64 => ("qemu-system-aarch64", ""),
            Arch::Armv7 => ("qemu-system-arm", ",highmem=off"),
        };
        let mut cmd = Command::new(qemu);
        let virtualization = if self.virtualization { "on" } else { "off" };
        match &self.board {
            QemuBoard::Virt => {
                let board = format!("virt,virtualization={virtualization},gic-version={}{highmem}", self.gic_version);
                cmd.args(["-M", &board]);
            }
            QemuBoard::VexpressA15 { dtb } => {
                let board = format!("vexpress-a15,secure=off,virtualization={virtualization}");
                cmd.args(["-M", &board, "-audio", "none", "-dtb"]).arg(dtb);
            }
            QemuBoard::Raspi4b { dtb } => return self.raspi4b_command(dtb, kernel, initrd),
        }
        cmd.args(["-cpu", &self.cpu])
            .args(["-smp", &self.smp.to_string()])
            .args(["-m", &format!("{}M", self.memory_mib)])
            .arg("-kernel")
            .arg(kernel)
            .arg("-no-reboot");
        self.loader_and_counting_args(&mut cmd, initrd);
        // virtio 1.x on the virtio-mmio transports (version 2), not the legacy interface.
        cmd.args(["-global", "virtio-mmio.force-legacy=false"]);
        if let Some(disk) = &self.disk {
            // `cache=none`: a write the guest flushed is in the host file, not in QEMU.
            let file = match &self.disk_errors {
                Some(config) => format!("blkdebug:{}:{}", config.display(), disk.display()),
                None => disk.display().to_string(),
            };
            cmd.arg("-drive")
                .arg(format!("file={file},if=none,format=raw,id=disk0,cache=none"))
                .args(["-device", "virtio-blk-device,drive=disk0"]);
        }
        if let Some(forwards) = &self.network {
            let mut netdev = String::from("user,id=net0");
            for (host, guest) in forwards {
                netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{host}-:{guest}"));
            }
            cmd.args(["-netdev", &netdev]).args(["-device", "virtio-net-device,netdev=net0"]);
        }
        cmd
    }
}

impl Machine {
    /// What every board's command shares: the initrd, instruction counting, semihosting.
    fn loader_and_counting_args(&self, cmd: &mut Command, initrd: Option<&PathBuf>) {
        if let Some(initrd) = initrd {
            cmd.arg("-initrd").arg(initrd);
        }
        if self.icount {
            cmd.args(["-icount", "shift=0,sleep=off"]);
        }
        if self.semihosting {
            cmd.args(["-semihosting-config", "enable=on,target=native"]);
        }
    }

    /// `raspi4b` with `dtb`: QEMU starts `kernel` at EL2 with x0 = the device tree, and the
    /// other CPUs in its spin-table stub, as the Pi's firmware does. It has no virtio-mmio
    /// transport, so `disk` and `network` are not given it; `-no-reboot` makes a reset end
    /// the run.
    fn raspi4b_command(&self, dtb: &PathBuf, kernel: &PathBuf, initrd: Option<&PathBuf>) -> Command {
        let mut cmd = Command::new("qemu-system-aarch64");
        cmd.args(["-M", "raspi4b"]).arg("-dtb").arg(dtb).arg("-kernel").arg(kernel).arg("-no-reboot");
        self.loader_and_counting_args(&mut cmd, initrd);
        cmd
    }
}

/// What a captured run printed and how it ended.
#[derive(Debug)]
pub struct RunOutput {
    pub console: String,
    /// QEMU's exit status; None when it was killed at the timeout.
    pub status: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
}

/// Runs QEMU headless with the serial console captured (and echoed to stderr when `echo`),
/// killing it after `timeout`.
pub fn run_captured(cmd: Command, timeout: Duration, echo: bool) -> Result<RunOutput, XtaskError> {
    Ok(Session::start(cmd, timeout, echo)?.finish())
}

/// Runs QEMU on this terminal: the serial console is the terminal, multiplexed with QEMU's
/// monitor (`mon:stdio`: Ctrl-A X stops QEMU, Ctrl-A C switches to the monitor). Stopped
/// after `timeout` if one is given. Returns QEMU's exit status (None: stopped at the timeout).
pub fn run_interactive(mut cmd: Command, timeout: Option<Duration>) -> Result<Option<i32>, XtaskError> {
    cmd.args(["-display", "none", "-serial", "mon:stdio"]);
    let mut child = cmd.spawn().map_err(|e| XtaskError::Tool(format!("cannot start {:?}: {e}", cmd.get_program())))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| XtaskError::Tool(format!("waiting for QEMU: {e}")))? {
            return Ok(status.code());
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A QEMU run driven like a user at the serial console: wait for some output, type a line,
/// and so on. Every wait is bounded, and the whole run is killed at its deadline.
pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Everything the console printed (carriage returns removed), and whether QEMU's
    /// output has ended, with a condition variable signalled on each change.
    console: Arc<(Mutex<Console>, Condvar)>,
    /// How far `wait_for` has matched: each wait looks only at newer output.
    cursor: usize,
    readers: Vec<JoinHandle<()>>,
    start: Instant,
    deadline: Instant,
}

#[derive(Default)]
struct Console {
    text: Vec<u8>,
    /// Output streams that reached their end (QEMU exited): nothing more will come.
    closed: usize,
}

impl Session {
    /// Starts QEMU headless with the serial console on its stdin and stdout; it is killed
    /// `timeout` from now if it has not ended.
    pub fn start(mut cmd: Command, timeout: Duration, echo: bool) -> Result<Session, XtaskError> {
        cmd.args(["-display", "none", "-monitor", "none", "-serial", "stdio"]);
        Session::spawn(cmd, timeout, echo)
    }

    /// Runs `cmd` (QEMU, or a command that runs it on its terminal, like `cargo xtask qemu`)
    /// with its stdin and stdout as the console; killed `timeout` from now.
    pub fn spawn(mut cmd: Command, timeout: Duration, echo: bool) -> Result<Session, XtaskError> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|e| XtaskError::Tool(format!("cannot start {cmd:?}: {e}")))?;
        let console = Arc::new((Mutex::new(Console::default()), Condvar::new()));
        let mut readers = Vec::new();
        for (stream, is_stderr) in [
            (child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>), false),
            (child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>), true),
        ] {
            let Some(mut stream) = stream else { continue };
            let console = Arc::clone(&console);
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if echo {
                        eprint!("{}", String::from_utf8_lossy(&buf[..n]));
                    }
                    let (text, added) = &*console;
                    if let Ok(mut c) = text.lock() {
                        if is_stderr {
                            c.text.extend_from_slice(b"[qemu stderr] ");
                        }
                        c.text.extend(buf[..n].iter().filter(|&&b| b != b'\r'));
                        added.notify_all();
                    }
                }
                let (text, added) = &*console;
                if let Ok(mut c) = text.lock() {
                    c.closed += 1;
                    added.notify_all();
                }
            }));
        }
        let stdin = child.stdin.take();
        Ok(Session { child, stdin, console, cursor: 0, readers, start, deadline: start + timeout })
    }

    /// Waits until `text` appears in the output after what earlier waits matched, for at
    /// most `within` (and never past the run's deadline), and returns the output before it.
    /// On failure, says what it waited for and shows the console.
    pub fn wait_for(&mut self, text: &str, within: Duration) -> Result<String, String> {
        let until = (Instant::now() + within).min(self.deadline);
        let (console, added) = &*self.console;
        let mut c = console.lock().map_err(|_| "console lock poisoned".to_string())?;
        loop {
            let seen = &c.text[self.cursor.min(c.text.len())..];
            if let Some(at) = seen.windows(text.len().max(1)).position(|w| w == text.as_bytes()) {
                let before = String::from_utf8_lossy(&seen[..at]).into_owned();
                self.cursor += at + text.len();
                return Ok(before);
            }
            if c.closed == self.readers.len() {
                return Err(format!(
                    "waited for {text:?} but QEMU ended first; console:\n{}",
                    String::from_utf8_lossy(&c.text)
                ));
            }
            let now = Instant::now();
            if now >= until {
                return Err(format!(
                    "waited {:?} for {text:?} and it did not come; console:\n{}",
                    within,
                    String::from_utf8_lossy(&c.text)
                ));
            }
            c = added.wait_timeout(c, until - now).map_err(|_| "console lock poisoned".to_string())?.0;
        }
    }

    /// Waits until every one of `texts` has appeared after what earlier waits matched, in
    /// any order (several VMs print at once), for at most `within`; later waits look only
    /// after the last of them.
    pub fn wait_for_all(&mut self, texts: &[&str], within: Duration) -> Result<(), String> {
        let until = (Instant::now() + within).min(self.deadline);
        let (console, added) = &*self.console;
        let mut c = console.lock().map_err(|_| "console lock poisoned".to_string())?;
        loop {
            let seen = &c.text[self.cursor.min(c.text.len())..];
            let ends: Vec<Option<usize>> = texts
                .iter()
                .map(|t| seen.windows(t.len().max(1)).position(|w| w == t.as_bytes()).map(|at| at + t.len()))
                .collect();
            if ends.iter().all(Option::is_some) {
                self.cursor += ends.into_iter().flatten().max().unwrap_or(0);
                return Ok(());
            }
            let missing: Vec<&str> = texts.iter().zip(&ends).filter(|(_, e)| e.is_none()).map(|(t, _)| *t).collect();
            let now = Instant::now();
            if now >= until || c.closed == self.readers.len() {
                return Err(format!(
                    "waited {within:?} for {missing:?} and they did not come; console:\n{}",
                    String::from_utf8_lossy(&c.text)
                ));
            }
            c = added.wait_timeout(c, until - now).map_err(|_| "console lock poisoned".to_string())?.0;
        }
    }

    /// Waits up to `within` (never past the run's deadline) for QEMU's output to end, as it
    /// does when QEMU exits; says whether it did.
    pub fn wait_for_end(&mut self, within: Duration) -> bool {
        let until = (Instant::now() + within).min(self.deadline);
        let (console, added) = &*self.console;
        let Ok(mut c) = console.lock() else { return false };
        loop {
            if c.closed == self.readers.len() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            c = match added.wait_timeout(c, until - now) {
                Ok((c, _)) => c,
                Err(_) => return false,
            };
        }
    }

    /// Types `line` and Enter at the console.
    pub fn send_line(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the console input is closed")?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("typing {line:?} at the console: {e}"))
    }

    /// The console so far.
    pub fn console(&self) -> String {
        self.console.0.lock().map(|c| String::from_utf8_lossy(&c.text).into_owned()).unwrap_or_default()
    }

    /// Waits for QEMU to end (killing it at the deadline) and returns the whole run.
    pub fn finish(mut self) -> RunOutput {
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if Instant::now() < self.deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    timed_out = true;
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        self.stdin.take();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        RunOutput { console: self.console(), status, timed_out, elapsed: self.start.elapsed() }
    }
}

impl Drop for Session {
    /// A session dropped early (a failed test) leaves no QEMU behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    /// QEMU's `virt` board with Cortex-A15s for a 32-bit guest run directly on it (the
    /// reference runs of the armhf guest): `highmem=off` keeps all RAM and every device below
    /// 4 GiB, which a kernel without LPAE (Debian's `armmp`) needs.
    fn armv7_native() -> Machine {
        Machine {
            arch: Arch::Armv7,
            cpu: "cortex-a15".into(),
            gic_version: 2,
            smp: 2,
            memory_mib: 512,
            virtualization: false,
            ..Machine::default()
        }
    }

    #[test]
    fn raspi4b_takes_its_device_tree_and_nothing_the_board_fixes() {
        let board = QemuBoard::Raspi4b { dtb: "fixed.dtb".into() };
        let machine = Machine { board, disk: Some("disk.img".into()), network: Some(vec![]), ..Machine::default() };
        let cmd = machine.command(&"hyp.Image".into(), Some(&"bundle".into()));
        assert_eq!(cmd.get_program(), "qemu-system-aarch64");
        let a = args(&cmd).join(" ");
        assert_eq!(a, "-M raspi4b -dtb fixed.dtb -kernel hyp.Image -no-reboot -initrd bundle");
    }

    #[test]
    fn a_32_bit_guest_runs_on_qemu_system_arm_below_4_gib() {
        let kernel = PathBuf::from("vmlinuz");
        let cmd = Machine { icount: true, ..armv7_native() }.command(&kernel, Some(&"initrd".into()));
        assert_eq!(cmd.get_program(), "qemu-system-arm");
        let a = args(&cmd).join(" ");
        for part in [
            "-M virt,virtualization=off,gic-version=2,highmem=off",
            "-cpu cortex-a15",
            "-smp 2",
            "-m 512M",
            "-kernel vmlinuz",
            "-initrd initrd",
            "-icount shift=0,sleep=off",
        ] {
            assert!(a.contains(part), "{part:?} missing from {a:?}");
        }
        let gic3 = Machine { gic_version: 3, ..armv7_native() }.command(&kernel, None);
        let a = args(&gic3).join(" ");
        assert!(a.contains("gic-version=3") && !a.contains("-initrd") && !a.contains("-icount"), "{a:?}");
    }

    #[test]
    fn versatile_express_is_entered_in_hyp_mode_with_its_device_tree() {
        let dtb = PathBuf::from("boot/vexpress.dtb");
        let board = QemuBoard::VexpressA15 { dtb };
        let machine = Machine { board, virtualization: true, ..armv7_native() };
        let a = args(&machine.command(&PathBuf::from("hyp.zImage"), Some(&"bundle".into()))).join(" ");
        for part in [
            "-M vexpress-a15,secure=off,virtualization=on -audio none -dtb boot/vexpress.dtb",
            "-cpu cortex-a15",
            "-smp 2",
            "-kernel hyp.zImage",
            "-initrd bundle",
        ] {
            assert!(a.contains(part), "{part:?} missing from {a:?}");
        }
        assert!(!a.contains("virt,") && !a.contains("gic-version"), "{a:?}");
    }
}
