//! SMC Calling Convention (ARM DEN 0028) and PSCI (ARM DEN 0022) function identifiers and
//! return values, as a guest calls them, and the hypervisor's own vendor call
//! (docs/hypercalls.md). The 32-bit calls (bit 30 clear) are the ones an AArch32 guest makes.

pub const SMCCC_VERSION: u32 = 0x8000_0000;
pub const PSCI_VERSION: u32 = 0x8400_0000;
pub const PSCI_CPU_OFF: u32 = 0x8400_0002;
pub const PSCI_CPU_ON_32: u32 = 0x8400_0003;
pub const PSCI_AFFINITY_INFO_32: u32 = 0x8400_0004;
pub const PSCI_SYSTEM_OFF: u32 = 0x8400_0008;
pub const PSCI_SYSTEM_RESET: u32 = 0x8400_0009;
pub const PSCI_CPU_ON_64: u32 = 0xc400_0003;
pub const PSCI_AFFINITY_INFO_64: u32 = 0xc400_0004;
/// `HYP_VM_EXIT(status)`: the VM ends with that status (the hypervisor's vendor service).
pub const HYP_VM_EXIT: u32 = 0xc600_0001;

/// SMCCC and PSCI version 1.1, as SMCCC_VERSION and PSCI_VERSION return it.
pub const VERSION_1_1: u32 = 0x1_0001;
/// The return value of a function no one implements (DEN 0028 5.2).
pub const NOT_SUPPORTED: i32 = -1;
/// PSCI return values (DEN 0022 5.2.2).
pub const PSCI_SUCCESS: i32 = 0;
pub const PSCI_INVALID_PARAMETERS: i32 = -2;
pub const PSCI_ALREADY_ON: i32 = -4;
