//! Links the hypervisor as a position-independent executable with our linker script: the
//! image relocates itself at entry (src/boot.rs), so any loader may place it anywhere.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
    println!("cargo:rustc-link-arg-bins=-pie");
    println!("cargo:rustc-link-arg-bins=-znotext");
    println!("cargo:rustc-link-arg-bins=--no-dynamic-linker");
    println!("cargo:rustc-link-arg-bins=-zmax-page-size=4096");
}
