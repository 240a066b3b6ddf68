//! Installs what the build and the QEMU runs need, on a fresh Debian machine, and says so.
//!
//! Rust targets come from rustup; QEMU from Debian's `bookworm-backports` (10.0, which has
//! the `raspi4b` board) when running as root, otherwise the exact command is printed.

use std::path::Path;
use std::process::Command;

use crate::util::{run_quiet, step, XtaskError};

/// Bare-metal targets the images are built for.
const RUST_TARGETS: &[&str] = &["aarch64-unknown-none", "aarch64-unknown-none-softfloat", "armv7a-none-eabi"];
/// The QEMU we test against: `raspi4b` and the figures in docs/ need at least this.
const QEMU_MIN_MAJOR: u32 = 10;
const DEBIAN_SOURCES: &str = "/etc/apt/sources.list.d/debian.sources";
const BACKPORTS_SOURCES: &str = "/etc/apt/sources.list.d/hyp-bookworm-backports.sources";

pub fn ensure_rust_targets() -> Result<(), XtaskError> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| XtaskError::Tool(format!("cannot run rustup ({e}); install it from rustup.rs")))?;
    let installed = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&str> =
        RUST_TARGETS.iter().copied().filter(|t| !installed.lines().any(|l| l.trim() == *t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    step(&format!("installing Rust targets {} with rustup", missing.join(", ")));
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add"]).args(&missing);
    run_quiet(&mut cmd)?;
    let mut cmd = Command::new("rustup");
    cmd.args(["component", "add", "rust-src", "llvm-tools"]);
    run_quiet(&mut cmd)
}

/// A component `cargo xtask test` runs (clippy for the lints, rustfmt for the formatting
/// check), as `cargo <subcommand>`: rust-toolchain.toml lists it, but rustup adds a listed
/// component only when it installs the toolchain, so a toolchain installed before may lack
/// it.
pub fn ensure_component(component: &str, subcommand: &str) -> Result<(), XtaskError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if Command::new(&cargo).args([subcommand, "--version"]).output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    step(&format!("installing {component} with rustup"));
    run_quiet(Command::new("rustup").args(["component", "add", component]))
}

/// The major version of `qemu-system-aarch64`, or None when it is not installed.
fn qemu_major() -> Option<u32> {
    let out = Command::new("qemu-system-aarch64").arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-1~bpo12+1)"
    let version = text.split("version ").nth(1)?;
    version.split('.').next()?.trim().parse().ok()
}

pub fn ensure_qemu() -> Result<(), XtaskError> {
    match qemu_major() {
        Some(major) if major >= QEMU_MIN_MAJOR => return Ok(()),
        Some(major) => {
            step(&format!("qemu-system-aarch64 {major}.x found; this project needs {QEMU_MIN_MAJOR}.x or later"))
        }
        None => step("qemu-system-aarch64 not found"),
    }
    let is_root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    let source = backports_source()?;
    if !is_root {
        return Err(XtaskError::Tool(format!(
            "QEMU {QEMU_MIN_MAJOR} is missing. As root, run:\n  cat > {BACKPORTS_SOURCES} <<'EOF'\n{source}EOF\n  \
             apt-get update && apt-get install -y -t bookworm-backports qemu-system-arm"
        )));
    }
    if !Path::new(BACKPORTS_SOURCES).exists() {
        step(&format!("adding the Debian bookworm-backports source in {BACKPORTS_SOURCES}"));
        std::fs::write(BACKPORTS_SOURCES, &source)
            .map_err(|e| XtaskError::Tool(format!("cannot write {BACKPORTS_SOURCES}: {e}")))?;
    }
    step("apt-get update");
    run_quiet(Command::new("apt-get").arg("update"))?;
    step("installing qemu-system-arm from bookworm-backports (apt-get, a few minutes)");
    run_quiet(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "--no-install-recommends", "-t", "bookworm-backports"])
            .args(["qemu-system-arm", "ipxe-qemu"]),
    )?;
    match qemu_major() {
        Some(major) if major >= QEMU_MIN_MAJOR => Ok(()),
        _ => Err(XtaskError::Tool("apt-get finished but qemu-system-aarch64 10 is still missing".into())),
    }
}

/// An e2fsprogs program (`mke2fs`, `debugfs`): on the `PATH`, or in the sbin directories
/// where Debian puts them (a user's `PATH` may lack those).
pub fn e2fs_tool(name: &str) -> Option<std::path::PathBuf> {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    on_path.chain(["/usr/sbin".into(), "/sbin".into()]).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// e2fsprogs, which the SD card's system test makes and reads its card image with:
/// installed with apt-get when missing and running as root, otherwise the command is said.
pub fn ensure_e2fsprogs() -> Result<(), XtaskError> {
    if e2fs_tool("mke2fs").is_some() && e2fs_tool("debugfs").is_some() {
        return Ok(());
    }
    let is_root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    if !is_root {
        return Err(XtaskError::Tool("e2fsprogs is missing. As root, run:\n  apt-get install -y e2fsprogs".into()));
    }
    step("installing e2fsprogs (apt-get): mke2fs and debugfs make and read the SD card test's image");
    run_quiet(Command::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args([
        "install",
        "-y",
        "--no-install-recommends",
        "e2fsprogs",
    ]))?;
    match (e2fs_tool("mke2fs"), e2fs_tool("debugfs")) {
        (Some(_), Some(_)) => Ok(()),
        _ => Err(XtaskError::Tool("apt-get finished but mke2fs or debugfs is still missing".into())),
    }
}

/// A deb822 entry for bookworm-backports with the URI and keyring of the machine's own
/// Debian entry, so the repository never names a mirror.
fn backports_source() -> Result<String, XtaskError> {
    let text = std::fs::read_to_string(DEBIAN_SOURCES)
        .map_err(|e| XtaskError::Tool(format!("cannot read {DEBIAN_SOURCES} ({e}): is this Debian 12 (bookworm)?")))?;
    backports_entry(&text)
        .ok_or_else(|| XtaskError::Tool(format!("{DEBIAN_SOURCES} has no entry for the suite `bookworm`")))
}

fn backports_entry(sources: &str) -> Option<String> {
    let stanza = sources
        .split("\n\n")
        .find(|s| s.lines().any(|l| l.starts_with("Suites:") && l.split_whitespace().any(|w| w == "bookworm")))?;
    let field = |name: &str| stanza.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
    let uris = field("URIs:")?;
    let mut entry = format!("Types: deb\nURIs: {uris}\nSuites: bookworm-backports\nComponents: main\n");
    if let Some(key) = field("Signed-By:") {
        entry.push_str(&format!("Signed-By: {key}\n"));
    }
    Some(entry)
}

#[cfg(test)]
mod tests {
    use super::backports_entry;

    #[test]
    fn backports_entry_copies_uri_and_keyring_of_the_bookworm_stanza() {
        let sources = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                       Components: main\nSigned-By: /usr/share/keyrings/k.gpg\n\n\
                       Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n";
        let entry = backports_entry(sources).unwrap();
        assert_eq!(
            entry,
            "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm-backports\nComponents: main\n\
             Signed-By: /usr/share/keyrings/k.gpg\n"
        );
    }

    #[test]
    fn backports_entry_needs_a_bookworm_stanza() {
        assert_eq!(backports_entry("Types: deb\nURIs: x\nSuites: bookworm-security\n"), None);
    }
}
