//! Links the hypervisor as a position-independent executable with our linker script: the
//! image applies its own R_ARM_RELATIVE relocations at entry (src/boot.rs), so a loader may
//! put it anywhere in RAM, as it would put a zImage.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=link.ld");
    let script = format!("-T{dir}/link.ld");
    for arg in [script.as_str(), "-pie", "-znotext", "--no-dynamic-linker", "-zmax-page-size=4096"] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
