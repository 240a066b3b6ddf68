//! The hypercall ABI a guest sees: SMC Calling Convention 1.1 (ARM DEN 0028) function
//! identifiers, its own version and features calls, PSCI 1.1 (ARM DEN 0022) and the
//! hypervisor's vendor-specific calls. Pure decoding: `decode` reads the guest's x0..x3 and
//! says what to do; the arch crate does it.

/// SMCCC return value for an unknown function (DEN 0028 section 5.2).
pub const NOT_SUPPORTED: u64 = -1i64 as u64;

pub const SMCCC_VERSION: u32 = 0x8000_0000;
pub const SMCCC_ARCH_FEATURES: u32 = 0x8000_0001;
/// SMCCC version 1.1 as the call returns it (major << 16 | minor).
pub const SMCCC_VERSION_1_1: u64 = 0x1_0001;

pub const PSCI_VERSION: u32 = 0x8400_0000;
pub const PSCI_CPU_SUSPEND_32: u32 = 0x8400_0001;
pub const PSCI_CPU_OFF: u32 = 0x8400_0002;
pub const PSCI_CPU_ON_32: u32 = 0x8400_0003;
pub const PSCI_AFFINITY_INFO_32: u32 = 0x8400_0004;
pub const PSCI_MIGRATE_INFO_TYPE: u32 = 0x8400_0006;
pub const PSCI_SYSTEM_OFF: u32 = 0x8400_0008;
pub const PSCI_SYSTEM_RESET: u32 = 0x8400_0009;
pub const PSCI_FEATURES: u32 = 0x8400_000a;
pub const PSCI_CPU_SUSPEND_64: u32 = 0xc400_0001;
pub const PSCI_CPU_ON_64: u32 = 0xc400_0003;
pub const PSCI_AFFINITY_INFO_64: u32 = 0xc400_0004;
/// PSCI 1.1 as PSCI_VERSION returns it.
pub const PSCI_VERSION_1_1: u64 = 0x1_0001;

/// PSCI return codes (DEN 0022 section 5.2.2).
pub mod psci_status {
    pub const SUCCESS: u64 = 0;
    pub const NOT_SUPPORTED: u64 = -1i64 as u64;
    pub const INVALID_PARAMETERS: u64 = -2i64 as u64;
    pub const ALREADY_ON: u64 = -4i64 as u64;
    pub const ON_PENDING: u64 = -5i64 as u64;
    pub const INTERNAL_FAILURE: u64 = -6i64 as u64;
    /// MIGRATE_INFO_TYPE: no Trusted OS, migration not needed.
    pub const TRUSTED_OS_NOT_PRESENT: u64 = 2;
    /// AFFINITY_INFO states.
    pub const AFFINITY_ON: u64 = 0;
    pub const AFFINITY_OFF: u64 = 1;
}

/// Vendor-specific hypervisor service calls (owner 6, DEN 0028 table 6-4), 64-bit fast calls.
/// `HYP_VM_EXIT(status)`: the VM ends now with an exit status (0 means success); a test guest
/// uses it to report a failed check.
pub const HYP_VM_EXIT: u32 = 0xc600_0001;

/// Where a function identifier belongs (DEN 0028 section 2.5: bits [29:24] are the owner).
pub fn owner(function: u32) -> u8 {
    ((function >> 24) & 0x3f) as u8
}

/// What the guest asked for, decoded without side effects.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Hypercall {
    /// Answer in x0 (x1..x3 are left unchanged, as SMCCC 1.1 allows for these calls).
    Return(u64),
    CpuOn {
        target_mpidr: u64,
        entry: u64,
        context: u64,
    },
    CpuOff,
    AffinityInfo {
        target_mpidr: u64,
        lowest_level: u64,
    },
    /// CPU_SUSPEND: a standby that may return at once, like WFI.
    CpuSuspend,
    SystemOff,
    SystemReset,
    VmExit {
        status: u64,
    },
    /// Not a call this hypervisor implements: x0 = NOT_SUPPORTED, and a log line.
    Unknown {
        function: u32,
    },
}

/// The PSCI functions PSCI_FEATURES reports as implemented.
const PSCI_IMPLEMENTED: &[u32] = &[
    PSCI_VERSION,
    PSCI_CPU_OFF,
    PSCI_CPU_ON_32,
    PSCI_CPU_ON_64,
    PSCI_CPU_SUSPEND_32,
    PSCI_CPU_SUSPEND_64,
    PSCI_AFFINITY_INFO_32,
    PSCI_AFFINITY_INFO_64,
    PSCI_MIGRATE_INFO_TYPE,
    PSCI_SYSTEM_OFF,
    PSCI_SYSTEM_RESET,
    PSCI_FEATURES,
];

/// Whether `function` uses the SMC64/HVC64 calling convention (DEN 0028, 2.5: bit 30).
#[inline(always)]
pub const fn is_smc64(function: u32) -> bool {
    function & (1 << 30) != 0
}

/// Whether `function` is an SMC64/HVC64 function of the Arm architecture calls or of PSCI
/// (owners 0 and 4), which DEN 0028 2.5 makes AArch64's only: from AArch32 it is unknown.
/// The project's own calls (owner 6, [`HYP_VM_EXIT`]) take no 64-bit argument and serve a
/// guest in either state.
#[inline(always)]
pub const fn is_aarch64_only(function: u32) -> bool {
    is_smc64(function) && matches!((function >> 24) & 0x3f, 0 | 4)
}

/// Whether `function` asks whether another function is implemented (PSCI_FEATURES,
/// SMCCC_ARCH_FEATURES) and that one, `queried`, is AArch64's only ([`is_aarch64_only`]):
/// an AArch32 caller cannot call it, so for it the answer is NOT_SUPPORTED (as KVM answers).
#[inline(always)]
pub const fn asks_about_aarch64_only(function: u32, queried: u32) -> bool {
    matches!(function, PSCI_FEATURES | SMCCC_ARCH_FEATURES) && is_aarch64_only(queried)
}

/// Decodes a call made with HVC #0 (or a trapped SMC #0) from the guest's x0..x3.
///
/// A 32-bit call (bit 30 clear) uses only the low 32 bits of its arguments (DEN 0028
/// section 2.6: "the upper 32 bits are ignored"); the function id itself is W0.
#[inline(always)]
pub fn decode(x: [u64; 4]) -> Hypercall {
    let function = x[0] as u32;
    // The owning entity (DEN 0028, 2.5 "Function Identifier", bits [29:24]) comes first:
    // every call answered here belongs to the Arm architecture (0), the standard secure
    // service PSCI (4) or the hypervisor's vendor service (6), and a call for any other
    // entity is refused without comparing it against each identifier (the null-hypercall
    // path of the benchmarks).
    if !matches!((function >> 24) & 0x3f, 0 | 4 | 6) || function & (1 << 31) == 0 {
        return Hypercall::Unknown { function };
    }
    let is_64 = is_smc64(function);
    let arg = |i: usize| if is_64 { x[i] } else { x[i] & 0xffff_ffff };
    match function {
        SMCCC_VERSION => Hypercall::Return(SMCCC_VERSION_1_1),
        SMCCC_ARCH_FEATURES => Hypercall::Return(match arg(1) as u32 {
            SMCCC_VERSION | SMCCC_ARCH_FEATURES => 0,
            _ => NOT_SUPPORTED,
        }),
        PSCI_VERSION => Hypercall::Return(PSCI_VERSION_1_1),
        PSCI_FEATURES => {
            // Its argument is "a PSCI function ID or SMCCC_VERSION" (DEN 0022, PSCI_FEATURES):
            // SUCCESS for SMCCC_VERSION is how a PSCI caller learns it may ask for the SMCCC
            // version (Linux's `psci_init_smccc`), and then for SMCCC_ARCH_FEATURES.
            let queried = arg(1) as u32;
            let implemented = queried == SMCCC_VERSION || PSCI_IMPLEMENTED.contains(&queried);
            Hypercall::Return(if implemented { psci_status::SUCCESS } else { psci_status::NOT_SUPPORTED })
        }
        PSCI_MIGRATE_INFO_TYPE => Hypercall::Return(psci_status::TRUSTED_OS_NOT_PRESENT),
        PSCI_CPU_ON_32 | PSCI_CPU_ON_64 => Hypercall::CpuOn { target_mpidr: arg(1), entry: arg(2), context: arg(3) },
        PSCI_CPU_OFF => Hypercall::CpuOff,
        PSCI_CPU_SUSPEND_32 | PSCI_CPU_SUSPEND_64 => Hypercall::CpuSuspend,
        PSCI_AFFINITY_INFO_32 | PSCI_AFFINITY_INFO_64 => {
            Hypercall::AffinityInfo { target_mpidr: arg(1), lowest_level: arg(2) }
        }
        PSCI_SYSTEM_OFF => Hypercall::SystemOff,
        PSCI_SYSTEM_RESET => Hypercall::SystemReset,
        HYP_VM_EXIT => Hypercall::VmExit { status: x[1] },
        _ => Hypercall::Unknown { function },
    }
}

/// The calls the image's exception vector may answer itself, before any of the guest's
/// state is saved (docs/hypercalls.md, "Answered in the vector"): the answer `decode` and
/// the exit handler give, for an HVC with immediate 0 whose x0 is `x0`, when the handler
/// would change nothing but x0 and log nothing. `last_unknown` is the function this vCPU
/// was last told was unknown (already logged: a repeat is not logged again). The vector's
/// code implements exactly this; the tests below hold the two to the handler.
pub fn answered_in_vector(x0: u64, last_unknown: Option<u32>) -> Option<u64> {
    let function = x0 as u32;
    if function == SMCCC_VERSION {
        Some(SMCCC_VERSION_1_1)
    } else if last_unknown == Some(function) {
        Some(NOT_SUPPORTED)
    } else {
        None
    }
}

/// `last_unknown` as the vector compares it with W0 zero-extended: the function, or a value
/// no W0 can have (bit 32 set) when there is none.
pub fn vector_unknown_word(last_unknown: Option<u32>) -> u64 {
    last_unknown.map_or(1 << 32, u64::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the vector answers is what `decode` answers, whatever x1..x3 and the upper half
    /// of x0 hold: an unknown function stays unknown, and SMCCC_VERSION answers only x0.
    #[test]
    fn the_vector_answers_only_what_decode_answers_alike_for_every_argument() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let x = [next(), next(), next(), next()];
            // Half the time a known call, the upper half of x0 left random.
            let known = [SMCCC_VERSION, SMCCC_ARCH_FEATURES, PSCI_VERSION, PSCI_FEATURES, PSCI_CPU_ON_64, HYP_VM_EXIT];
            let x0 = match known.get((x[1] % 12) as usize) {
                Some(&f) => (x[0] & !0xffff_ffff) | u64::from(f),
                None => x[0],
            };
            let function = x0 as u32;
            // The handler remembers only functions it found unknown.
            let unknown = |f: u32| matches!(decode([u64::from(f), 0, 0, 0]), Hypercall::Unknown { .. });
            for last in [None, Some(function), Some(function ^ 1)].into_iter().filter(|l| l.is_none_or(unknown)) {
                let answer = answered_in_vector(x0, last);
                match decode([x0, x[1], x[2], x[3]]) {
                    Hypercall::Return(v) => {
                        assert!(answer.is_none() || answer == Some(v), "{x0:#x}: vector {answer:?}, decode {v:#x}")
                    }
                    Hypercall::Unknown { function: f } => {
                        assert_eq!(f, function);
                        let expected = (last == Some(f)).then_some(NOT_SUPPORTED);
                        assert_eq!(answer, expected, "{x0:#x}, last unknown {last:?}");
                    }
                    other => assert_eq!(answer, None, "{x0:#x} is {other:?}: it changes the VM, never the vector's"),
                }
            }
        }
        assert_eq!(answered_in_vector(0xffff_ffff_0000_0000 | SMCCC_VERSION as u64, None), Some(SMCCC_VERSION_1_1));
        assert_eq!(answered_in_vector(PSCI_VERSION as u64, None), None, "answered by the handler");
    }

    #[test]
    fn no_w0_matches_the_vectors_word_for_no_unknown_function() {
        assert_eq!(vector_unknown_word(Some(u32::MAX)), 0xffff_ffff);
        assert_eq!(vector_unknown_word(Some(0)), 0);
        assert!(vector_unknown_word(None) > u64::from(u32::MAX));
    }

    #[test]
    fn versions_are_1_1() {
        assert_eq!(decode([PSCI_VERSION as u64, 0, 0, 0]), Hypercall::Return(0x1_0001));
        assert_eq!(decode([SMCCC_VERSION as u64, 0, 0, 0]), Hypercall::Return(0x1_0001));
    }

    #[test]
    fn unknown_functions_are_not_supported() {
        for f in [0x8000_ff00u32, 0xc200_0000, 0x8400_00ff, 0x0000_0000, 0xffff_ffff] {
            assert_eq!(decode([f as u64, 1, 2, 3]), Hypercall::Unknown { function: f });
        }
        assert_eq!(NOT_SUPPORTED as i64, -1);
    }

    #[test]
    fn only_fast_calls_of_the_three_owners_served_here_are_decoded() {
        // Each known call with another owning entity, or as a yielding call (bit 31 clear):
        // refused, never mistaken for the call it resembles.
        for known in [SMCCC_VERSION, PSCI_VERSION, PSCI_CPU_ON_64, PSCI_SYSTEM_OFF, HYP_VM_EXIT] {
            for other_owner in [1u32, 2, 3, 5, 7, 0x30, 0x3f] {
                let f = (known & !(0x3f << 24)) | (other_owner << 24);
                assert_eq!(decode([f as u64, 0, 0, 0]), Hypercall::Unknown { function: f }, "{f:#x}");
            }
            let yielding = known & !(1 << 31);
            assert_eq!(decode([yielding as u64, 0, 0, 0]), Hypercall::Unknown { function: yielding });
            assert_ne!(decode([known as u64, 0, 0, 0]), Hypercall::Unknown { function: known });
        }
    }

    #[test]
    fn the_function_id_is_w0_only() {
        let x0 = 0xdead_beef_0000_0000 | PSCI_VERSION as u64;
        assert_eq!(decode([x0, 0, 0, 0]), Hypercall::Return(PSCI_VERSION_1_1));
    }

    #[test]
    fn thirty_two_bit_calls_ignore_the_upper_argument_bits() {
        let call = decode([PSCI_CPU_ON_32 as u64, 0xffff_0000_0000_0001, 0x1_4000_0000, 7]);
        assert_eq!(call, Hypercall::CpuOn { target_mpidr: 1, entry: 0x4000_0000, context: 7 });
        let call = decode([PSCI_CPU_ON_64 as u64, 1, 0x1_4000_0000, 7]);
        assert_eq!(call, Hypercall::CpuOn { target_mpidr: 1, entry: 0x1_4000_0000, context: 7 });
    }

    #[test]
    fn psci_features_reports_what_is_implemented() {
        assert_eq!(decode([PSCI_FEATURES as u64, PSCI_SYSTEM_OFF as u64, 0, 0]), Hypercall::Return(0));
        assert_eq!(decode([PSCI_FEATURES as u64, 0x8400_0012, 0, 0]), Hypercall::Return(psci_status::NOT_SUPPORTED));
    }

    /// PSCI_FEATURES takes "a PSCI function ID or SMCCC_VERSION" (DEN 0022, PSCI_FEATURES):
    /// a caller learns from it that SMCCC_VERSION may be called (Linux's `psci_init_smccc`
    /// calls SMCCC_VERSION, and then SMCCC_ARCH_FEATURES, only when it answers SUCCESS).
    #[test]
    fn psci_features_reports_smccc_version_as_implemented() {
        assert_eq!(decode([PSCI_FEATURES as u64, SMCCC_VERSION as u64, 0, 0]), Hypercall::Return(0));
        // A 32-bit call: the upper half of the argument is ignored.
        assert_eq!(
            decode([PSCI_FEATURES as u64, 0xffff_ffff_0000_0000 | SMCCC_VERSION as u64, 0, 0]),
            Hypercall::Return(0)
        );
        // SMCCC_ARCH_FEATURES is discovered through SMCCC_VERSION, not through PSCI_FEATURES.
        assert_eq!(
            decode([PSCI_FEATURES as u64, SMCCC_ARCH_FEATURES as u64, 0, 0]),
            Hypercall::Return(psci_status::NOT_SUPPORTED)
        );
    }

    #[test]
    fn owners_are_read_from_bits_29_24() {
        assert_eq!(owner(PSCI_VERSION), 4);
        assert_eq!(owner(HYP_VM_EXIT), 6);
        assert_eq!(owner(SMCCC_VERSION), 0);
    }
}
