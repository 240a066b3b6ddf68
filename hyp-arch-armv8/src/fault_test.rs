//! Deliberate faults at EL2, which only a system test's boot bundle asks for
//! (`test-el2-fault`): they show that an exception at EL2 is reported and stops only its CPU,
//! and that the EL2 map is W^X (mmu.rs): a store into the hypervisor's code or read-only
//! data, or a jump to an instruction in its writable data or on its heap, is a permission
//! fault. Were it not, the line after each would print, and the test looks for it.
//! And the semihosting exit that lets a test run set QEMU's exit status. Test hooks: built
//! only with the `test-hooks` feature (docs/security.md, "Test hooks").

use alloc::boxed::Box;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::bundle::El2Fault;

/// `ret`: what the jumps land on, so that a jump the map failed to refuse comes back.
const RET: u32 = 0xd65f_03c0;
/// An address in the EL2 VA range that the identity map leaves unmapped.
const UNMAPPED_EL2_VA: usize = 0x7f_ffff_f000;

/// Read-only data to store into.
static READ_ONLY: u64 = 0x005e_c2e7;
/// Writable data holding an instruction to jump to.
static mut WRITABLE_CODE: [u32; 2] = [RET, RET];

/// The CPU that has reported its fault (or that the fault did not happen), plus one; 0
/// while none has.
static REPORTED: AtomicUsize = AtomicUsize::new(0);
/// The longest the boot CPU waits for that report.
const REPORT_WAIT_SECONDS: u64 = 5;

/// `cpu` has printed all it prints of its fault: the EL2 exception report is out
/// (exceptions.rs), or `provoke` came back and said so.
pub fn reported(cpu: usize) {
    REPORTED.store(cpu + 1, Ordering::Release);
}

/// Waits until `cpu` has reported its fault, for at most REPORT_WAIT_SECONDS. The boot CPU
/// creates no VM before: the report prints without the console lock (the fault may come
/// while its CPU holds it), so a VM's lines printed meanwhile would run into its lines.
pub fn wait_for_report(cpu: usize) -> bool {
    let now = || sysreg!("cntpct_el0");
    let until = now().saturating_add(sysreg!("cntfrq_el0").saturating_mul(REPORT_WAIT_SECONDS));
    while REPORTED.load(Ordering::Acquire) != cpu + 1 {
        if now() >= until {
            return false;
        }
        core::hint::spin_loop();
    }
    true
}

/// Makes `fault` happen on this CPU; returns only if the EL2 map let it through.
pub fn provoke(fault: El2Fault, cpu: usize) {
    match fault {
        El2Fault::ReadUnmapped => {
            // SAFETY: a deliberate translation fault; the EL2 vector reports it and parks this
            // CPU. Requested only by the boot bundle of a system test.
            let _ = unsafe { read_volatile(UNMAPPED_EL2_VA as *const u64) };
        }
        El2Fault::WriteText => {
            let target = provoke as *const () as *mut u32;
            // SAFETY: as above: a store the map must refuse (permission fault); were it to
            // succeed, it writes back the instruction that is there.
            unsafe { write_volatile(target, read_volatile(target)) };
        }
        El2Fault::WriteRodata => {
            // SAFETY: as above.
            unsafe { write_volatile(&raw const READ_ONLY as *mut u64, 0) };
        }
        El2Fault::ExecuteData => {
            // SAFETY: as above: an instruction fetch the map must refuse; what is there is a
            // `ret`, so a fetch that succeeds comes back here.
            let f: extern "C" fn() = unsafe { core::mem::transmute(&raw const WRITABLE_CODE as usize) };
            f();
        }
        El2Fault::ExecuteHeap => {
            let code: Box<[u32; 2]> = Box::new([RET, RET]);
            let at = &*code as *const [u32; 2] as usize;
            crate::mmu::clean_dcache_range(at as u64, at as u64 + 8);
            // SAFETY: as for `ExecuteData`.
            let f: extern "C" fn() = unsafe { core::mem::transmute(at) };
            f();
        }
    }
    println!("hypervisor: cpu{cpu}: the deliberate EL2 fault {} did not fault (W^X broken)", fault.name());
    reported(cpu);
}

/// SYS_EXIT_EXTENDED (semihosting 2.0, operation 0x20) with ADS_ApplicationExit and `code`:
/// QEMU exits with that status. Only called when the boot bundle says the run enabled
/// semihosting; without it the HLT would be an undefined instruction. A test hook: the
/// deployed image has no semihosting call at all (docs/security.md, "Test hooks").
pub fn semihosting_exit(code: u32) -> ! {
    let block: [u64; 2] = [0x20026, u64::from(code)];
    // SAFETY: the semihosting call reads the two-word parameter block and does not return.
    unsafe {
        core::arch::asm!("hlt #0xf000", in("x0") 0x20u64, in("x1") block.as_ptr(), options(nostack));
    }
    crate::cpus::park()
}
