//! The register-leak readers' second vCPU (tests/tests/register_leak.rs and
//! register_leak32.rs): started with PSCI CPU_ON, it compares its registers at entry with a
//! fresh vCPU's and reports how many it compared and how many differed; the first vCPU
//! waits for that report and checks it.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::Checks;

/// `differ` before the report.
const NOT_YET: u32 = u32::MAX;

/// One vCPU's report, shared between the two vCPUs.
pub struct EntryReport {
    compared: AtomicU32,
    differ: AtomicU32,
}

impl Default for EntryReport {
    fn default() -> EntryReport {
        EntryReport::new()
    }
}

impl EntryReport {
    pub const fn new() -> EntryReport {
        EntryReport { compared: AtomicU32::new(0), differ: AtomicU32::new(NOT_YET) }
    }

    /// Before the vCPU is started: nothing reported yet.
    pub fn expect(&self) {
        self.differ.store(NOT_YET, Ordering::SeqCst);
    }

    /// By the started vCPU: it compared `compared` registers, `differ` of them not at a fresh
    /// vCPU's value.
    pub fn report(&self, compared: u32, differ: u32) {
        self.compared.store(compared, Ordering::SeqCst);
        self.differ.store(differ, Ordering::SeqCst);
    }

    /// Waits up to 5 s of `now_ms` for the report of the vCPU CPU_ON started (`started`,
    /// its PSCI status), and checks that every register it compared was at its reset value.
    pub fn check(&self, c: &mut Checks, started: i64, when: &str, now_ms: impl Fn() -> u64) {
        let deadline = now_ms() + 5000;
        while self.differ.load(Ordering::SeqCst) == NOT_YET && now_ms() < deadline {
            core::hint::spin_loop();
        }
        let (compared, differ) = (self.compared.load(Ordering::SeqCst), self.differ.load(Ordering::SeqCst));
        let reported = differ != NOT_YET;
        if !reported {
            crate::println!("# vCPU 1 did not report within 5 s (CPU_ON returned {started})");
        }
        c.check(
            started == 0 && reported && differ == 0 && compared > 0,
            format_args!(
                "leak: vCPU 1 started with CPU_ON {when}: {compared} registers at their reset value ({} not)",
                if reported { differ } else { compared }
            ),
        );
    }
}
