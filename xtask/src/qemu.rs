//! QEMU command lines and runs: interactive on the terminal, or captured with a timeout for
//! the system tests and benchmarks.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::XtaskError;

/// The emulated board the hypervisor boots on.
#[derive(Clone, Debug)]
pub struct Machine {
    pub gic_version: u8,
    pub cpu: String,
    pub smp: u32,
    pub memory_mib: u32,
    /// Count instructions: 1 instruction = 1 ns of virtual time (`-icount shift=0`).
    pub icount: bool,
    /// Enter the image at EL2 (`virtualization=on`). Off for reference runs of a guest
    /// directly on QEMU, which then enters it at EL1 and answers PSCI over HVC itself.
    pub virtualization: bool,
    /// Lets the hypervisor end the run with a non-zero status (trusted test guests only:
    /// semihosting is reachable from EL1 too).
    pub semihosting: bool,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            gic_version: 3,
            cpu: "cortex-a72".into(),
            smp: 4,
            memory_mib: 1024,
            icount: false,
            virtualization: true,
            semihosting: false,
        }
    }
}

impl Machine {
    pub fn command(&self, kernel: &PathBuf, initrd: Option<&PathBuf>) -> Command {
        let mut cmd = Command::new("qemu-system-aarch64");
        let virtualization = if self.virtualization { "on" } else { "off" };
        cmd.args(["-M", &format!("virt,virtualization={virtualization},gic-version={}", self.gic_version)])
            .args(["-cpu", &self.cpu])
            .args(["-smp", &self.smp.to_string()])
            .args(["-m", &format!("{}M", self.memory_mib)])
            .arg("-kernel")
            .arg(kernel)
            .arg("-no-reboot");
        if let Some(initrd) = initrd {
            cmd.arg("-initrd").arg(initrd);
        }
        if self.icount {
            cmd.args(["-icount", "shift=0"]);
        }
        if self.semihosting {
            cmd.args(["-semihosting-config", "enable=on,target=native"]);
        }
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
pub fn run_captured(mut cmd: Command, timeout: Duration, echo: bool) -> Result<RunOutput, XtaskError> {
    cmd.args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| XtaskError::Tool(format!("cannot start qemu-system-aarch64: {e}")))?;
    let console = Arc::new(Mutex::new(Vec::<u8>::new()));
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
                if let Ok(mut c) = console.lock() {
                    if is_stderr {
                        c.extend_from_slice(b"[qemu stderr] ");
                    }
                    c.extend_from_slice(&buf[..n]);
                }
            }
        }));
    }
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| XtaskError::Tool(format!("waiting for QEMU: {e}")))? {
            break status.code();
        }
        if start.elapsed() >= timeout {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for r in readers {
        let _ = r.join();
    }
    let console = console.lock().map(|c| String::from_utf8_lossy(&c).replace('\r', "")).unwrap_or_default();
    Ok(RunOutput { console, status, timed_out, elapsed: start.elapsed() })
}
