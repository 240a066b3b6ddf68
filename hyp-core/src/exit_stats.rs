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
    /// The EL2 physical timer: a shared vCPU's slice ended, or a blocked vCPU's timer is due.
    SliceEnd,
    OtherInterrupt,
    SError,
}

impl ExitReason {
    pub const ALL: [ExitReason; 13] = [
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
        ExitReason::SliceEnd,
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
            ExitReason::SliceEnd => "slice-end",
            ExitReason::OtherInterrupt => "other-irq",
            ExitReason::SError => "serror",
        }
    }
}

/// Counts of exits of one vCPU: it alone writes them (a load and a store, no atomic
/// read-modify-write on the exit path); anyone may read them. Synchronous exits are counted
/// by raw exception class (an index, no classification on the exit path) and grouped into
/// reasons when read.
pub struct ExitCounts {
    by_class: [AtomicU64; 64],
    /// Exits that are not synchronous, by `ExitReason` discriminant.
    other: [AtomicU64; ExitReason::ALL.len()],
}

impl Default for ExitCounts {
    fn default() -> Self {
        ExitCounts {
            by_class: [const { AtomicU64::new(0) }; 64],
            other: [const { AtomicU64::new(0) }; ExitReason::ALL.len()],
        }
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl ExitCounts {
    /// One more synchronous exit with this syndrome. Only the owning vCPU calls this.
    pub fn record_sync(&self, syndrome: Syndrome) {
        bump(&self.by_class[syndrome.class().0 as usize & 63], 1);
    }

    /// The counter of synchronous exits of exception class `class`, for code that counts
    /// outside `record_sync` (the vector's answered calls); only the owning vCPU's CPU
    /// writes it.
    pub fn class_counter(&self, class: ExceptionClass) -> &AtomicU64 {
        &self.by_class[class.0 as usize & 63]
    }

    /// The counter `record(reason)` increments, for an image's exception vector that counts
    /// an exit it takes itself (a kick).
    pub fn reason_counter(&self, reason: ExitReason) -> &AtomicU64 {
        &self.other[reason as usize]
    }

    /// One more exit for `reason` (an interrupt or an SError; synchronous exits go through
    /// `record_sync`). Only the owning vCPU calls this.
    pub fn record(&self, reason: ExitReason) {
        bump(&self.other[reason as usize], 1);
    }

    /// Adds `other`'s counts to these (a VM's total from its vCPUs'); not concurrently
    /// with another writer of these.
    pub fn add(&self, other: &ExitCounts) {
        let pairs = self.by_class.iter().zip(&other.by_class).chain(self.other.iter().zip(&other.other));
        for (mine, theirs) in pairs {
            bump(mine, theirs.load(Ordering::Relaxed));
        }
    }

    pub fn count(&self, reason: ExitReason) -> u64 {
        let sync: u64 = (0..64u64)
            .filter(|ec| ExitReason::of_sync(Syndrome(ec << 26)) == reason)
            .map(|ec| self.by_class[ec as usize].load(Ordering::Relaxed))
            .sum();
        sync + self.other[reason as usize].load(Ordering::Relaxed)
    }

    pub fn total(&self) -> u64 {
        self.by_class.iter().chain(&self.other).map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub fn reset(&self) {
        self.by_class.iter().chain(&self.other).for_each(|c| c.store(0, Ordering::Relaxed));
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
            c.record_sync(Syndrome(0x16 << 26));
        }
        assert_eq!(c.count(ExitReason::Hypercall), 3);
        assert_eq!(c.total(), 4);
        assert_eq!(c.to_string(), "4 exits, hypercall 3, kick 1");
        let sum = ExitCounts::default();
        sum.add(&c);
        sum.add(&c);
        assert_eq!(sum.to_string(), "8 exits, hypercall 6, kick 2");
        c.reset();
        assert_eq!(c.total(), 0);
    }

    #[test]
    fn a_reason_s_counter_is_the_one_its_record_increments() {
        let c = ExitCounts::default();
        c.reason_counter(ExitReason::Kick).fetch_add(2, Ordering::Relaxed);
        c.record(ExitReason::Kick);
        assert_eq!(c.count(ExitReason::Kick), 3);
        assert_eq!(c.count(ExitReason::TimerInterrupt), 0);
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
