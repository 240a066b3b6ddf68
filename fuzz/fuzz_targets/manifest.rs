//! The manifest a user writes (`xtask::manifest::Manifest::parse`, TOML), checked against a
//! QEMU `virt` board. Any text; only names that read no file (`kernel = "debian"`, or a
//! path that does not exist) are followed, so the target reads nothing from the disk.
//! Checked: no panic; a manifest that parses becomes a bundle the hypervisor parses too, and
//! both check it alike.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use xtask::bundle::BundleOptions;
use xtask::manifest::{Board, DebianGuest, Manifest};
use xtask::XtaskError;

fuzz_target!(|text: &str| {
    // Paths in the manifest are relative to its folder: a folder that does not exist, and no
    // absolute paths or parent steps, keep every file name from reaching a real file.
    if text.contains('/') || text.contains("..") || text.contains('\\') {
        return;
    }
    let folder = Path::new("/nonexistent-fuzz-manifest-folder/m.toml");
    let mut debian = |_| -> Result<DebianGuest, XtaskError> { Ok(debian_files().clone()) };
    let Ok(manifest) = Manifest::parse(text, folder, &mut debian) else { return };
    let board = Board::qemu_virt(4, 4096, Some(1 << 30));
    if let Ok(blob) = manifest.bundle(&board, &BundleOptions::default()) {
        let parsed = hyp_core::bundle::BootBundle::parse(&blob);
        assert!(parsed.is_ok(), "xtask wrote a bundle the hypervisor refuses: {:?}", parsed.err());
    }
});

/// A minimal arm64 Image (its header's magic) and initramfs standing in for Debian's, in a
/// temporary folder, written once.
fn debian_files() -> &'static DebianGuest {
    static FILES: OnceLock<DebianGuest> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("hyp-fuzz-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let mut image = vec![0u8; 4096];
        image[0x38..0x3c].copy_from_slice(b"ARM\x64");
        let kernel: PathBuf = dir.join("Image");
        let initrd: PathBuf = dir.join("initrd");
        std::fs::write(&kernel, &image).expect("write the stand-in kernel");
        std::fs::write(&initrd, [0u8; 64]).expect("write the stand-in initrd");
        DebianGuest { kernel, initrd }
    })
}
