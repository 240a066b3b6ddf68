//! Building the images under `target/images/`: the hypervisor for AArch64 (as deployed, and
//! with the test hooks for the tests and benchmarks) and the AArch64 bare-metal test guests,
//! each as an arm64 `Image`; the ARMv7 hypervisor and the AArch32 test guests, each as a
//! zImage.

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
    features: &[&str],
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
        .args(features.iter().flat_map(|f| ["--features", f]))
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        .env_remove("RUSTFLAGS");
    run(&mut cmd)?;
    Ok(target_dir.join(target).join("release").join(bin))
}

fn read_elf(elf_path: &Path) -> Result<Vec<u8>, XtaskError> {
    std::fs::read(elf_path).map_err(|e| XtaskError::Build(format!("cannot read {}: {e}", elf_path.display())))
}

fn write_image(bytes: &[u8], name: &str) -> Result<PathBuf, XtaskError> {
    let image = elf::to_image(bytes, name)?;
    let dir = images_dir();
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let out = dir.join(format!("{name}.Image"));
    std::fs::write(&out, image).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", out.display())))?;
    Ok(out)
}

/// Which hypervisor image to build (docs/security.md, "Test hooks").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hypervisor {
    /// The image a user deploys, without the test hooks: `cargo xtask qemu` (the Linux guest,
    /// a manifest), `cargo xtask image`, the soak run. `target/images/hypervisor.Image`.
    Deployed,
    /// With hyp-arch-armv8's `test-hooks` feature (the deliberate EL2 fault, the semihosting
    /// exit): the system tests, the benchmarks, `cargo xtask qemu --guest selftest`.
    /// `target/images/hypervisor-test-hooks.Image`, built in a target directory of its own
    /// so that neither build overwrites the other's output.
    TestHooks,
}

impl Hypervisor {
    /// The image's name under `target/images/` (without `.Image`).
    pub fn name(self) -> &'static str {
        match self {
            Hypervisor::Deployed => "hypervisor",
            Hypervisor::TestHooks => "hypervisor-test-hooks",
        }
    }

    fn features(self) -> &'static [&'static str] {
        match self {
            Hypervisor::Deployed => &[],
            Hypervisor::TestHooks => &["test-hooks"],
        }
    }

    /// Its target directory under `target/`.
    fn target_subdir(self) -> &'static str {
        match self {
            Hypervisor::Deployed => "hyp",
            Hypervisor::TestHooks => "hyp-test-hooks",
        }
    }
}

/// The hypervisor: a position-independent executable that relocates itself (src/boot.rs).
/// The image is checked to hold the test hooks exactly when it should (`test_hooks_in`).
pub fn build_hypervisor(kind: Hypervisor) -> Result<PathBuf, XtaskError> {
    let with = match kind {
        Hypervisor::Deployed => "without test hooks",
        Hypervisor::TestHooks => "with test hooks",
    };
    step(&format!("building the hypervisor (hyp-arch-armv8, {HYPERVISOR_TARGET}, {with})"));
    let elf_path = cargo_build(
        "hyp-arch-armv8",
        "hypervisor",
        kind.features(),
        HYPERVISOR_TARGET,
        kind.target_subdir(),
        "-Crelocation-model=pic",
    )?;
    let bytes = read_elf(&elf_path)?;
    let found = test_hooks_in(&bytes)?;
    match kind {
        Hypervisor::Deployed if !found.is_empty() => {
            return Err(XtaskError::Build(format!(
                "{}: the image built without the `test-hooks` feature holds {}",
                elf_path.display(),
                found.join(" and ")
            )))
        }
        Hypervisor::TestHooks if found.len() < TestHook::ALL.len() => {
            let missing: Vec<&str> = TestHook::ALL.iter().map(|h| h.what()).filter(|w| !found.contains(w)).collect();
            return Err(XtaskError::Build(format!(
                "{}: the image built with the `test-hooks` feature lacks {}: has the check `test_hooks_in` \
                 gone stale?",
                elf_path.display(),
                missing.join(" and ")
            )));
        }
        _ => {}
    }
    write_image(&bytes, kind.name())
}

/// A test hook as it shows in the hypervisor's ELF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TestHook {
    /// `firmware::semihosting_exit`: the semihosting call, `hlt #0xf000`, in its code.
    SemihostingExit,
    /// `fault_test::provoke`: the line it prints when a deliberate EL2 fault did not fault.
    El2Fault,
}

/// `hlt #0xf000`, the AArch64 semihosting call (firmware.rs), as it is encoded: HLT is
/// 0xd4400000 with its 16-bit immediate in bits 20 to 5 (`llvm-objdump -d` shows it so).
const HLT_SEMIHOSTING: u32 = 0xd440_0000 | (0xf000 << 5);
/// Part of the line `fault_test::provoke` prints: no other code has it.
const EL2_FAULT_LINE: &[u8] = b"did not fault (W^X broken)";

impl TestHook {
    const ALL: [TestHook; 2] = [TestHook::SemihostingExit, TestHook::El2Fault];

    fn what(self) -> &'static str {
        match self {
            TestHook::SemihostingExit => "the semihosting exit (an `hlt #0xf000` in its code)",
            TestHook::El2Fault => "the deliberate EL2 fault (fault_test.rs's line in its read-only data)",
        }
    }

    fn is_in(self, elf: &[u8]) -> Result<bool, XtaskError> {
        let bad = || XtaskError::Build("the hypervisor is not an ELF file".into());
        let loaded = elf::loadable(elf).ok_or_else(bad)?;
        Ok(match self {
            TestHook::SemihostingExit => loaded.iter().filter(|s| s.executable).any(|s| {
                let skip = (4 - (s.vaddr % 4) as usize) % 4;
                s.bytes
                    .get(skip..)
                    .unwrap_or_default()
                    .chunks_exact(4)
                    .any(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) == HLT_SEMIHOSTING)
            }),
            TestHook::El2Fault => {
                loaded.iter().any(|s| s.bytes.windows(EL2_FAULT_LINE.len()).any(|w| w == EL2_FAULT_LINE))
            }
        })
    }
}

/// The test hooks the hypervisor ELF file `elf` holds, each said in words: none in the
/// deployed image, every one in the image built with the `test-hooks` feature.
pub fn test_hooks_in(elf: &[u8]) -> Result<Vec<&'static str>, XtaskError> {
    let mut found = Vec::new();
    for hook in TestHook::ALL {
        if hook.is_in(elf)? {
            found.push(hook.what());
        }
    }
    Ok(found)
}

/// The ELF file the last `build_hypervisor(kind)` built.
pub fn hypervisor_elf(kind: Hypervisor) -> PathBuf {
    workspace_root()
        .join("target")
        .join(kind.target_subdir())
        .join(HYPERVISOR_TARGET)
        .join("release")
        .join("hypervisor")
}

/// The ARMv7 hypervisor (hyp-arch-armv7, HYP mode on a Cortex-A15), as a zImage that
/// relocates itself: `target/images/hypervisor-armv7.zImage`. It has no test hooks.
pub fn build_hypervisor_armv7() -> Result<PathBuf, XtaskError> {
    step(&format!("building the ARMv7 hypervisor (hyp-arch-armv7, {ARMV7_TARGET})"));
    let elf_path =
        cargo_build("hyp-arch-armv7", "hypervisor", &[], ARMV7_TARGET, "hyp-armv7", "-Crelocation-model=pic")?;
    write_zimage(&read_elf(&elf_path)?, "hypervisor-armv7")
}

/// The ELF file the last `build_hypervisor_armv7` built (its symbols name the code the
/// instruction trace counts).
pub fn hypervisor_armv7_elf() -> PathBuf {
    workspace_root().join("target").join("hyp-armv7").join(ARMV7_TARGET).join("release").join("hypervisor")
}

/// `target/images/<name>.zImage`: the flat image of a 32-bit ELF file that starts with a
/// zImage header (`elf::to_zimage`).
fn write_zimage(bytes: &[u8], name: &str) -> Result<PathBuf, XtaskError> {
    let image = elf::to_zimage(bytes, name)?;
    let dir = images_dir();
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let out = dir.join(format!("{name}.zImage"));
    std::fs::write(&out, image).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", out.display())))?;
    Ok(out)
}

/// A bare-metal test guest from `guest-images/selftest`, for AArch64: an arm64 Image.
pub fn build_test_guest(bin: &str) -> Result<PathBuf, XtaskError> {
    step(&format!("building the test guest `{bin}` (guest-images, {AARCH64_TARGET})"));
    let elf = cargo_build("selftest-guest", bin, &[], AARCH64_TARGET, "guest", "")?;
    write_image(&read_elf(&elf)?, bin)
}

/// The ELF file the last `build_test_guest(bin)` built (its symbols name the guest's
/// addresses: it runs with its MMU off, where it is linked).
pub fn test_guest_elf(bin: &str) -> PathBuf {
    workspace_root().join("target").join("guest").join(AARCH64_TARGET).join("release").join(bin)
}

/// A bare-metal test guest from `guest-images/selftest32`, for AArch32 (`selftest32`,
/// `microbench32`): a zImage, which the hypervisor runs in AArch32 on either image and
/// QEMU's `-kernel` loads as a 32-bit kernel. Linked at the address the hypervisor loads a
/// zImage at, it copies itself there when loaded elsewhere; built with the static
/// relocation model (the workspace's `-Crelocation-model=pic` is the ARMv7 hypervisor's).
pub fn build_test_guest32(bin: &str) -> Result<PathBuf, XtaskError> {
    step(&format!("building the 32-bit test guest `{bin}` (guest-images/selftest32, {ARMV7_TARGET})"));
    let elf = cargo_build("selftest32-guest", bin, &[], ARMV7_TARGET, "guest32", "")?;
    write_zimage(&read_elf(&elf)?, bin)
}

/// The ELF file the last `build_test_guest32(bin)` built (linked where it runs: it copies
/// itself there with its MMU off).
pub fn test_guest32_elf(bin: &str) -> PathBuf {
    workspace_root().join("target").join("guest32").join(ARMV7_TARGET).join("release").join(bin)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 file with a code segment holding `code` and a read-only one holding `data`
    /// (the layout of the hypervisor's: code at 0, read-only data after it).
    fn elf(code: &[u8], data: &[u8]) -> Vec<u8> {
        let (code_at, data_at) = (0x100usize, 0x200usize);
        let segment = |offset: usize, bytes: &[u8], flags| elf::Segment {
            offset: offset as u64,
            vaddr: offset as u64 * 16,
            filesz: bytes.len() as u64,
            memsz: bytes.len() as u64,
            flags,
        };
        let mut e = elf::elf64(data_at + data.len(), &[segment(code_at, code, 5), segment(data_at, data, 4)]);
        e[code_at..code_at + code.len()].copy_from_slice(code);
        e[data_at..data_at + data.len()].copy_from_slice(data);
        e
    }

    const NOP: [u8; 4] = 0xd503_201fu32.to_le_bytes();
    const HLT: [u8; 4] = HLT_SEMIHOSTING.to_le_bytes();

    #[test]
    fn the_semihosting_call_is_found_in_code_only_and_as_an_instruction_only() {
        assert_eq!(HLT, [0x00, 0x00, 0x5e, 0xd4], "as llvm-objdump shows `hlt #0xf000`");
        let code = [NOP, HLT, NOP].concat();
        assert_eq!(test_hooks_in(&elf(&code, b"")).unwrap(), [TestHook::SemihostingExit.what()]);
        assert_eq!(test_hooks_in(&elf(&[NOP, NOP].concat(), &HLT)).unwrap(), Vec::<&str>::new(), "data is not code");
        let unaligned = [&[0u8, 0][..], &HLT, &[0, 0]].concat();
        assert_eq!(test_hooks_in(&elf(&unaligned, b"")).unwrap(), Vec::<&str>::new(), "not an instruction");
    }

    #[test]
    fn the_el2_fault_is_found_by_its_line() {
        let data = b"hypervisor: cpu: the deliberate EL2 fault  did not fault (W^X broken)";
        assert_eq!(
            test_hooks_in(&elf(&HLT, data)).unwrap(),
            [TestHook::SemihostingExit.what(), TestHook::El2Fault.what()]
        );
        assert_eq!(test_hooks_in(&elf(&NOP, b"did not fault")).unwrap(), Vec::<&str>::new());
        assert!(test_hooks_in(b"not an ELF file").is_err());
    }
}
