//! How many log lines one VM may cause: every line a guest's doing prints (a refused
//! hypercall, a bad MMIO access, a malformed virtio request, a spoofed frame) goes through
//! its VM's `GuestLogLimit`, so no guest can flood the console the VMs and the hypervisor
//! share (one guest once printed 10,700 lines in 14 s). The first `BURST` lines print in
//! full; after that, at most one a second, saying how many were left out since the last.

use core::sync::atomic::{AtomicU64, Ordering};

/// Lines a VM may print before the limit applies.
pub const BURST: u64 = 16;

/// Whether a guest-caused line is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Print it.
    Print,
    /// Print it, and say that `left_out` lines of this VM were left out before it.
    PrintAfter { left_out: u64 },
    /// Leave it out (it is counted).
    LeaveOut,
}

/// One VM's limit (shared by its vCPUs and devices, so lock-free).
#[derive(Debug, Default)]
pub struct GuestLogLimit {
    /// Lines asked for so far.
    asked: AtomicU64,
    /// When the last line after the burst was printed (counter ticks + 1; 0: never).
    last: AtomicU64,
    left_out: AtomicU64,
}

impl GuestLogLimit {
    pub const fn new() -> Self {
        GuestLogLimit { asked: AtomicU64::new(0), last: AtomicU64::new(0), left_out: AtomicU64::new(0) }
    }

    /// A line is about to be printed at time `now`, in a clock of `ticks_per_second`.
    pub fn admit(&self, now: u64, ticks_per_second: u64) -> Admit {
        if self.asked.fetch_add(1, Ordering::Relaxed) < BURST {
            return Admit::Print;
        }
        let last = self.last.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_add(1).saturating_sub(last) >= ticks_per_second;
        // One CPU wins the right to print this second's line; the others count theirs.
        if due && self.last.compare_exchange(last, now.saturating_add(1), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return match self.left_out.swap(0, Ordering::AcqRel) {
                0 => Admit::Print,
                left_out => Admit::PrintAfter { left_out },
            };
        }
        self.left_out.fetch_add(1, Ordering::Relaxed);
        Admit::LeaveOut
    }

    /// Lines asked for so far (printed or not).
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }

    /// Lines left out since the last one printed after the burst.
    pub fn left_out(&self) -> u64 {
        self.left_out.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1000;

    #[test]
    fn the_first_lines_print_then_one_a_second_with_the_count_left_out() {
        let limit = GuestLogLimit::new();
        for _ in 0..BURST {
            assert_eq!(limit.admit(0, HZ), Admit::Print);
        }
        assert_eq!(limit.admit(0, HZ), Admit::Print, "the first after the burst opens the first second");
        for t in 1..1000 {
            assert_eq!(limit.admit(t, HZ), Admit::LeaveOut, "at {t}");
        }
        assert_eq!(limit.left_out(), 999);
        assert_eq!(limit.admit(1000, HZ), Admit::PrintAfter { left_out: 999 });
        assert_eq!(limit.left_out(), 0);
        assert_eq!(limit.admit(1500, HZ), Admit::LeaveOut);
        assert_eq!(limit.admit(5000, HZ), Admit::PrintAfter { left_out: 1 });
        assert_eq!(limit.asked(), BURST + 1003);
    }

    #[test]
    fn a_flood_prints_a_bounded_number_of_lines() {
        // 10,700 lines asked for over 14 seconds, as one guest did: at most the burst and a
        // line a second.
        let limit = GuestLogLimit::new();
        let printed = (0..10_700u64).filter(|i| limit.admit(i * 14 * HZ / 10_700, HZ) != Admit::LeaveOut).count();
        assert!(printed as u64 <= BURST + 15, "{printed} lines");
        assert!(printed as u64 > BURST, "a flood still shows it goes on");
    }

    #[test]
    fn vms_have_limits_of_their_own() {
        let (a, b) = (GuestLogLimit::new(), GuestLogLimit::new());
        for _ in 0..100 {
            let _ = a.admit(0, HZ);
        }
        assert_eq!(b.admit(0, HZ), Admit::Print, "one VM's flood does not silence another");
    }

    #[test]
    fn a_time_before_the_last_line_does_not_open_the_gate() {
        let limit = GuestLogLimit::new();
        for _ in 0..=BURST {
            let _ = limit.admit(10_000, HZ);
        }
        assert_eq!(limit.admit(5, HZ), Admit::LeaveOut, "another CPU's older reading");
        assert_eq!(limit.admit(11_000, HZ), Admit::PrintAfter { left_out: 1 });
    }
}
