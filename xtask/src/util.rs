//! Errors, progress messages and process helpers shared by the xtask commands.

use std::fmt;
use std::process::Command;

#[derive(Debug)]
pub enum XtaskError {
    /// A tool is missing or failed; the message says what to do.
    Tool(String),
    /// A build step failed.
    Build(String),
    /// The user asked for something impossible (bad argument, missing file).
    Usage(String),
    /// A run or test did not give the expected result.
    Failed(String),
}

impl fmt::Display for XtaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XtaskError::Tool(m) => write!(f, "tool: {m}"),
            XtaskError::Build(m) => write!(f, "build: {m}"),
            XtaskError::Usage(m) => write!(f, "{m}"),
            XtaskError::Failed(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for XtaskError {}

/// Says what xtask is doing, on stderr so it never mixes with a guest's console.
pub fn step(message: &str) {
    eprintln!("xtask: {message}");
}

/// Runs a command, showing its output only when it fails.
pub fn run_quiet(cmd: &mut Command) -> Result<(), XtaskError> {
    let out = cmd.output().map_err(|e| XtaskError::Tool(format!("cannot run {cmd:?}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(XtaskError::Tool(format!(
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Runs a command with its output going to the terminal.
pub fn run(cmd: &mut Command) -> Result<(), XtaskError> {
    let status = cmd.status().map_err(|e| XtaskError::Tool(format!("cannot run {cmd:?}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(XtaskError::Build(format!("{cmd:?} failed ({status})")))
    }
}

/// A directory a test made for itself, removed with what it holds when the test ends (a
/// test's kernels and disks are tens of MiB each).
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}
