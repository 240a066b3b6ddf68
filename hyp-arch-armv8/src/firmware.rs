//! Calls from the hypervisor to the firmware: PSCI over the conduit the device tree names
//! (ARM DEN 0022), and (test hooks only) the semihosting exit that lets a test run set
//! QEMU's exit status.

use core::arch::asm;

use hyp_core::platform::PsciConduit;
use hyp_core::smccc;

static mut CONDUIT: PsciConduit = PsciConduit::Smc;

pub fn init(conduit: PsciConduit) {
    // SAFETY: written once by the boot CPU before any other CPU runs.
    unsafe { CONDUIT = conduit };
}

fn call(function: u32, a1: u64, a2: u64, a3: u64) -> u64 {
    let mut x0 = u64::from(function);
    // SAFETY: an SMCCC call: the firmware may clobber x0-x17 (SMCCC 1.1 section 2.6) and
    // leaves memory the hypervisor owns alone.
    unsafe {
        // SAFETY: read of a value written once at boot.
        match CONDUIT {
            PsciConduit::Smc => asm!("smc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _,
                inout("x3") a3 => _, out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _, out("x14") _,
                out("x15") _, out("x16") _, out("x17") _, options(nostack)),
            PsciConduit::Hvc => asm!("hvc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _,
                inout("x3") a3 => _, out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _, out("x14") _,
                out("x15") _, out("x16") _, out("x17") _, options(nostack)),
        }
    }
    x0
}

pub fn psci_version() -> u64 {
    call(smccc::PSCI_VERSION, 0, 0, 0)
}

/// Starts the CPU `mpidr` at `entry` (a physical address) with x0 = `context`.
pub fn cpu_on(mpidr: u64, entry: u64, context: u64) -> i64 {
    call(smccc::PSCI_CPU_ON_64, mpidr, entry, context) as i64
}

pub fn system_off() -> ! {
    call(smccc::PSCI_SYSTEM_OFF, 0, 0, 0);
    crate::cpus::park()
}

/// SYS_EXIT_EXTENDED (semihosting 2.0, operation 0x20) with ADS_ApplicationExit and `code`:
/// QEMU exits with that status. Only called when the boot bundle says the run enabled
/// semihosting; without it the HLT would be an undefined instruction. A test hook: the
/// deployed image has no semihosting call at all (docs/security.md, "Test hooks").
#[cfg(feature = "test-hooks")]
pub fn semihosting_exit(code: u32) -> ! {
    let block: [u64; 2] = [0x20026, u64::from(code)];
    // SAFETY: the semihosting call reads the two-word parameter block and does not return.
    unsafe {
        asm!("hlt #0xf000", in("x0") 0x20u64, in("x1") block.as_ptr(), options(nostack));
    }
    crate::cpus::park()
}
