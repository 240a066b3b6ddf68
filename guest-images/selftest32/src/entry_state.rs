//! The register-leak test's view of an AArch32 vCPU's first instruction
//! (tests/tests/register_leak32.rs): the reader's entries (src/bin/leak-reader32.rs, before
//! anything else runs) store every register a PL1 guest can read into an `EntryState`, and
//! `compare_with_reset` compares it with what a fresh vCPU must start with.
//!
//! What a fresh vCPU starts with: the core registers as the boot protocol or PSCI CPU_ON
//! set them (r0-r2, CPSR: ARM ARM DDI 0406C B1.3.1; PSCI DEN 0022, 5.6), SCTLR at its reset
//! value (B4.1.130, with the MMU and caches off), and every other register zero: the banked
//! SP, LR and SPSR of each mode, the CP15 registers whose reset value is UNKNOWN
//! (B4.1: TTBR0/1, TTBCR, DACR, PRRR, NMRR, AMAIR0/1, VBAR, CONTEXTIDR, the thread ID
//! registers, the fault status and address registers, PAR, CSSELR, CNTKCTL, the virtual
//! timer, B8.2) and the VFP and Advanced SIMD registers (B1.11) are zero on both images
//! (hyp-arch-armv7 and hyp-arch-armv8 `SavedVcpu::at_reset`, docs/security.md): the value the
//! hypervisor documents, so that nothing another VM left shows through.

/// The words the reader's entry stores, in its order; a 64-bit register is two words, low first.
pub const NAMES: [&str; WORDS - 64] = [
    "r0",
    "r1",
    "r2",
    "r3",
    "r4",
    "r5",
    "r6",
    "r7",
    "r8",
    "r9",
    "r10",
    "r11",
    "r12", // 0..13
    "SP_svc",
    "LR_svc",
    "SPSR_svc",
    "CPSR",
    "SP_usr",
    "LR_usr", // 13..19
    "SP_abt",
    "LR_abt",
    "SPSR_abt",
    "SP_und",
    "LR_und",
    "SPSR_und", // 19..25
    "SP_irq",
    "LR_irq",
    "SPSR_irq",
    "SP_fiq",
    "LR_fiq",
    "SPSR_fiq", // 25..31
    "R8_fiq",
    "R9_fiq",
    "R10_fiq",
    "R11_fiq",
    "R12_fiq", // 31..36
    "SCTLR",
    "CPACR",
    "TTBCR",
    "DACR",
    "DFSR",
    "IFSR",
    "ADFSR",
    "AIFSR",
    "DFAR",
    "IFAR", // 36..46
    "PRRR",
    "NMRR",
    "AMAIR0",
    "AMAIR1",
    "VBAR",
    "CONTEXTIDR",
    "TPIDRURW",
    "TPIDRURO", // 46..54
    "TPIDRPRW",
    "CNTKCTL",
    "CSSELR",
    "CNTV_CTL", // 54..58
    "TTBR0",
    "TTBR0[63:32]",
    "TTBR1",
    "TTBR1[63:32]",
    "PAR",
    "PAR[63:32]", // 58..64
    "CNTV_CVAL",
    "CNTV_CVAL[63:32]",
    "FPEXC",
    "FPSCR", // 64..68
];
/// Words in all: the names above, then d0-d31 (two words each).
pub const WORDS: usize = 68 + 64;
/// The registers `compare_with_reset` compares (the 64-bit ones and the d registers once
/// each; SPSR_svc apart).
pub const REGISTERS: u32 = 68 - 4 + 32 - 1;
const R2: usize = 2;
/// SPSR_svc, which `compare_with_reset` leaves to its caller.
pub const SPSR_SVC: usize = 15;
const CPSR: usize = 16;
const SCTLR: usize = 36;
const D0: usize = 68;

/// Every register at a vCPU's first instruction, as the reader's entry stored it.
#[repr(C, align(8))]
pub struct EntryState(pub [u32; WORDS]);

/// SCTLR as each image documents a fresh vCPU's (MMU and caches off): a Cortex-A15's reset
/// value on the ARMv7 image (hyp-arch-armv7 `SCTLR_RESET`), the same with bit 11, RES1 in
/// ARMv8's AArch32 SCTLR (DDI 0487 G8.2), on the ARMv8 image.
pub fn sctlr_reset(armv8: bool) -> u32 {
    if armv8 {
        0x00c5_0878
    } else {
        0x00c5_0078
    }
}

/// CPSR at a vCPU's first instruction: SVC mode, A32, asynchronous aborts, IRQs and FIQs
/// masked (B1.3.1; the Linux boot protocol and PSCI CPU_ON).
pub const CPSR_AT_START: u32 = 0x1d3;

/// Compares `state` but SPSR_svc with a fresh vCPU's: r0-r2 as `r` says (r2 of a kernel's boot: a device
/// tree, whose address is the hypervisor's choice, checked by its magic), `armv8` for the
/// image's SCTLR. Prints each register that differs, saying when it holds a secret-holder's
/// marker (0x5ec2 in its top half); returns (registers compared, registers that differ).
pub fn compare_with_reset(state: &EntryState, r: [u32; 3], r2_is_device_tree: bool, armv8: bool) -> (u32, u32) {
    let (mut compared, mut differ) = (0, 0);
    let mut expect = |name: &dyn core::fmt::Display, value: u64, wanted: u64| {
        compared += 1;
        if value != wanted {
            differ += 1;
            let marker = if value >> 16 & 0xffff == 0x5ec2 || value >> 48 == 0x5ec2 { " (a marker)" } else { "" };
            crate::println!("# {name} is {value:#x}, not {wanted:#x}{marker}");
        }
    };
    let w = &state.0;
    let mut i = 0;
    while i < D0 {
        let name = NAMES[i];
        let wanted = match i {
            0 | 1 => r[i],
            R2 if r2_is_device_tree => {
                // Read only if r2 is in this VM's RAM (the first 64 MiB at IPA 0x4000_0000,
                // as the test gives it).
                let magic = if (0x4000_0000..0x4400_0000).contains(&w[R2]) {
                    // SAFETY: a word of this VM's RAM (checked above); the MMU is off.
                    let word = unsafe { core::ptr::read_volatile(w[R2] as *const u32) };
                    u32::from_be(word)
                } else {
                    0
                };
                if magic == 0xd00d_feed {
                    w[R2]
                } else {
                    crate::println!("# r2 {:#x} points to no device tree (magic {magic:#x})", w[R2]);
                    !w[R2]
                }
            }
            R2 => r[2],
            CPSR => CPSR_AT_START,
            SCTLR => sctlr_reset(armv8),
            _ => 0,
        };
        if name.ends_with("[63:32]") || i == SPSR_SVC {
            i += 1;
            continue;
        }
        let is64 = NAMES.get(i + 1).is_some_and(|n| n.ends_with("[63:32]"));
        let value = if is64 { u64::from(w[i]) | u64::from(w[i + 1]) << 32 } else { u64::from(w[i]) };
        expect(&name, value, u64::from(wanted));
        i += 1;
    }
    for n in 0..32 {
        let value = u64::from(w[D0 + 2 * n]) | u64::from(w[D0 + 2 * n + 1]) << 32;
        expect(&format_args!("d{n}"), value, 0);
    }
    (compared, differ)
}
