//! Building the images: the hypervisor for AArch64 and the bare-metal test guests, each as
//! an arm64 `Image` under `target/images/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{run, step};
use crate::{elf, XtaskError};

pub const AARCH64_TARGET: &str = "aarch64-unknown-none";
/// The hypervisor's target: no floating-point or SIMD registers in its code, so a guest's
/// are never overwritten by an exit (nothing needs to save them while vCPUs stay on their
/// CPUs).
pub const HYPERVISOR_TARGET: &str = "aarch64-unknown-none-softfloat";
/// ARMv7-A (Cortex-A15, HYP mode): what the AArch64 and ARMv7 images share (hyp-arch-arm)
/// builds for it too.
pub const ARMV7_TARGET: &str = "armv7a-none-eabi";

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

pub fn images_dir() -> PathBuf {
    workspace_root().join("target").join("images")
}

fn cargo_build(
    package: &str,
    bin: &str,
    target: &str,
    target_subdir: &str,
    rustflags: &str,
) -> Result<PathBuf, XtaskError> {
    let root = workspace_root();
    let target_dir = root.join("target").join(target_subdir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--quiet", "--release", "--target", target, "-p", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        .env_remove("RUSTFLAGS");
    run(&mut cmd)?;
    Ok(target_dir.join(target).join("release").join(bin))
}

fn write_image(elf_path: &Path, name: &str) -> Result<PathBuf, XtaskError> {
    let bytes =
        std::fs::read(elf_path).map_err(|e| XtaskError::Build(format!("cannot read {}: {e}", elf_path.display())))?;
    let image = elf::to_image(&bytes, name)?;
    let dir = images_dir();
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let out = dir.join(format!("{name}.Image"));
    std::fs::write(&out, image).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", out.display())))?;
    Ok(out)
}

/// The hypervisor: a position-independent executable that relocates itself (src/boot.rs).
pub fn build_hypervisor() -> Result<PathBuf, XtaskError> {
    step(&format!("building the hypervisor (hyp-arch-armv8, {HYPERVISOR_TARGET})"));
    let elf = cargo_build("hyp-arch-armv8", "hypervisor", HYPERVISOR_TARGET, "hyp", "-Crelocation-model=pic")?;
    write_image(&elf, "hypervisor")
}

/// A bare-metal test guest from `guest-images/`.
pub fn build_test_guest(bin: &str) -> Result<PathBuf, XtaskError> {
    step(&format!("building the test guest `{bin}` (guest-images, {AARCH64_TARGET})"));
    let elf = cargo_build("selftest-guest", bin, AARCH64_TARGET, "guest", "")?;
    write_image(&elf, bin)
}

/// Size of a disk image `create_disk` makes (sparse: it takes no room until written).
pub const DISK_SIZE: u64 = 1 << 30;

/// A raw disk image at `path`, created empty (`size` bytes, sparse) if it does not exist.
pub fn create_disk(path: &Path, size: u64) -> Result<(), XtaskError> {
    if path.exists() {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    }
    step(&format!("creating the disk image {} ({} MiB, empty)", path.display(), size >> 20));
    let file =
        std::fs::File::create(path).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", path.display())))?;
    file.set_len(size).map_err(|e| XtaskError::Build(format!("cannot size {}: {e}", path.display())))
}

/// The disk of `cargo xtask qemu`'s Linux guest: `vm-disks/linux.img` in the workspace,
/// kept between runs (and by `cargo clean`).
pub fn default_disk() -> Result<PathBuf, XtaskError> {
    let path = workspace_root().join("vm-disks").join("linux.img");
    create_disk(&path, DISK_SIZE)?;
    Ok(path)
}
