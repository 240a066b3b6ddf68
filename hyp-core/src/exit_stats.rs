//! Exit counts by reason, per VM: what the management console and the benchmarks report,
//! and the first thing to look at when a guest runs slower than it should.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::syndrome::{ExceptionClass, Syndrome};

/// Why a vCPU left its guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitReason {
    Hypercall,
    SystemRegister,
    /// A stage-2 data abort: an emulated device register, or a bad address.
    DataAbort,
    InstructionAbort,
    WaitForInterrupt,
    /// Any other synchronous exception class.
    OtherSync,
    /// The virtual timer's physical interrupt, forwarded to the vCPU.
    TimerInterrupt,
    /// A kick from another CPU (an SGI for this vCPU, the VM ending).
    Kick,
    /// The GIC's maintenance interrupt (list registers to refill).
    Maintenance,
    /// Console input arrived.
    ConsoleInput,
    OtherInterrupt,
    SError,
}

impl ExitReason {
    pub const ALL: [ExitReason; 12] = [
        ExitReason::Hypercall,
        ExitReason::SystemRegister,
        ExitReason::DataAbort,
        ExitReason::InstructionAbort,
        ExitReason::WaitForInterrupt,
        ExitReason::OtherSync,
        ExitReason::TimerInterrupt,
        ExitReason::Kick,
        ExitReason::Maintenance,
        ExitReason::ConsoleInput,
        ExitReason::OtherInterrupt,
        ExitReason::SError,
    ];

    /// The reason of a synchronous exit with this syndrome.
    pub fn of_sync(syndrome: Syndrome) -> ExitReason {
        match syndrome.class() {
            ExceptionClass::HVC64 | ExceptionClass::HVC32 | ExceptionClass::SMC64 | ExceptionClass::SMC32 => {
                ExitReason::Hypercall
            }
            ExceptionClass::SYSREG64 => ExitReason::SystemRegister,
            ExceptionClass::DATA_ABORT_LOWER => ExitReason::DataAbort,
            ExceptionClass::INSTRUCTION_ABORT_LOWER => ExitReason::InstructionAbort,
            ExceptionClass::WFX => ExitReason::WaitForInterrupt,
            _ => ExitReason::OtherSync,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExitReason::Hypercall => "hypercall",
            ExitReason::SystemRegister => "sysreg",
            ExitReason::DataAbort => "data-abort",
            ExitReason::InstructionAbort => "insn-abort",
            ExitReason::WaitForInterrupt => "wfi",
            ExitReason::OtherSync => "other-sync",
            ExitReason::TimerInterrupt => "timer-irq",
            ExitReason::Kick => "kick",
            ExitReason::Maintenance => "maintenance",
            ExitReason::ConsoleInput => "console-input",
            ExitReason::OtherInterrupt => "other-irq",
            ExitReason::SError => "serror",
        }
    }
}

/// Counts of exits by reason, updated by every vCPU of a VM without a lock.
pub struct ExitCounts([AtomicU64; ExitReason::ALL.len()]);

impl Default for ExitCounts {
    fn default() -> Self {
        ExitCounts([const { AtomicU64::new(0) }; ExitReason::ALL.len()])
    }
}

impl ExitCounts {
    pub fn record(&self, reason: ExitReason) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self, reason: ExitReason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }

    pub fn total(&self) -> u64 {
        ExitReason::ALL.iter().map(|r| self.count(*r)).sum()
    }

    pub fn reset(&self) {
        self.0.iter().for_each(|c| c.store(0, Ordering::Relaxed));
    }
}

/// `total N: reason n, ...` with the reasons that occurred, most frequent first.
impl fmt::Display for ExitCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut counts = ExitReason::ALL.map(|r| (r, self.count(r)));
        counts.sort_by_key(|c| core::cmp::Reverse(c.1));
        write!(f, "{} exits", self.total())?;
        for (reason, n) in counts.iter().filter(|(_, n)| *n > 0) {
            write!(f, ", {} {n}", reason.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn counts_are_kept_per_reason_and_shown_most_frequent_first() {
        let c = ExitCounts::default();
        assert_eq!(c.to_string(), "0 exits");
        c.record(ExitReason::Kick);
        for _ in 0..3 {
            c.record(ExitReason::Hypercall);
        }
        assert_eq!(c.count(ExitReason::Hypercall), 3);
        assert_eq!(c.total(), 4);
        assert_eq!(c.to_string(), "4 exits, hypercall 3, kick 1");
        c.reset();
        assert_eq!(c.total(), 0);
    }

    #[test]
    fn synchronous_exits_are_classified_by_their_exception_class() {
        let of = |ec: u64| ExitReason::of_sync(Syndrome(ec << 26));
        assert_eq!(of(0x16), ExitReason::Hypercall);
        assert_eq!(of(0x17), ExitReason::Hypercall);
        assert_eq!(of(0x18), ExitReason::SystemRegister);
        assert_eq!(of(0x24), ExitReason::DataAbort);
        assert_eq!(of(0x20), ExitReason::InstructionAbort);
        assert_eq!(of(0x01), ExitReason::WaitForInterrupt);
        assert_eq!(of(0x3c), ExitReason::OtherSync);
    }
}
