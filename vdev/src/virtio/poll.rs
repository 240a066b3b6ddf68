//! When a side core polls and when it sleeps (docs/virtio.md, "The side core"; the
//! fine-grained I/O scheduling of ELVIS): it polls its VMs' virtqueues while they are
//! busy, with the guests told not to notify; once nothing has happened for `idle_after`
//! counter ticks it asks for notifies again, looks at the available rings once more (a
//! chain made available while notifies were off was not notified: virtio 1.2 2.7.10), and
//! sleeps only if they are still empty. Anything that wakes it (a notify's kick, the board
//! disk's or NIC's interrupt) makes it poll again. Pure: the caller gives the time and
//! what each pass found, and does what [`Step`] says.

/// What the side core is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Notifies off, every queue looked at on each pass.
    Polling,
    /// Notifies on, the CPU waiting for an interrupt.
    Sleeping,
}

/// What to do after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Pass again.
    Poll,
    /// Nothing to do for a while, but requests in flight or work a short while ago: wait
    /// for an interrupt (a completion, or a timer a short while on), notifies still off.
    /// Spinning there would only take the CPU (a host thread, under an emulator) from the
    /// devices' own work.
    Doze,
    /// Idle for long enough: ask for notifies again (then report with
    /// [`PollLoop::notifications_enabled`]).
    EnableNotifications,
    /// Wait for an interrupt: the queues were empty after notifies were back on.
    Sleep,
}

/// How often each transition happened, for the log and the management console.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollCounts {
    /// Passes over the queues.
    pub passes: u64,
    /// Passes that found something.
    pub busy_passes: u64,
    /// Sleeping -> polling.
    pub wakes: u64,
    /// Polling -> sleeping.
    pub sleeps: u64,
    /// Chains found on the last look after notifies were re-enabled: the race 2.7.10
    /// describes, each one a request that would have waited without that look.
    pub late_chains: u64,
    /// Waits for an interrupt with requests in flight and notifies off.
    pub dozes: u64,
}

/// The side core's state between passes.
#[derive(Clone, Copy, Debug)]
pub struct PollLoop {
    idle_after: u64,
    doze_after: u64,
    mode: Mode,
    last_activity: u64,
    counts: PollCounts,
}

impl PollLoop {
    /// Sleeping at first: the guests' drivers are not started, and their first notify
    /// wakes it. `idle_after`: counter ticks without activity before it sleeps.
    pub const fn new(idle_after: u64) -> Self {
        PollLoop {
            idle_after,
            doze_after: idle_after,
            mode: Mode::Sleeping,
            last_activity: 0,
            counts: PollCounts { passes: 0, busy_passes: 0, wakes: 0, sleeps: 0, late_chains: 0, dozes: 0 },
        }
    }

    /// Counter ticks of idle queues before it sleeps, and of no work but requests in flight
    /// before it dozes (set once the counter's rate is known).
    pub fn set_times(&mut self, idle_after: u64, doze_after: u64) {
        self.idle_after = idle_after;
        self.doze_after = doze_after;
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn counts(&self) -> PollCounts {
        self.counts
    }

    /// A pass starts at `now`; a sleeping core was woken (by whatever interrupt) and
    /// polls from now on. Returns whether the pass must suppress notifies (always: a pass
    /// is made while polling).
    pub fn begin_pass(&mut self, now: u64) -> bool {
        if self.mode == Mode::Sleeping {
            self.mode = Mode::Polling;
            self.last_activity = now;
            self.counts.wakes += 1;
        }
        self.counts.passes += 1;
        true
    }

    /// The pass found work (`work`: chains taken, used rings moved) or not, and whether
    /// requests are still in flight. Work keeps it polling; no work for `doze_after` makes
    /// it doze between passes (notifies stay off); with requests in flight it never goes
    /// further; with none, `idle_after` without work makes it ask for notifies again.
    pub fn end_pass(&mut self, now: u64, work: bool, in_flight: bool) -> Step {
        if work {
            self.counts.busy_passes += 1;
            self.last_activity = now;
            return Step::Poll;
        }
        let quiet = now.saturating_sub(self.last_activity);
        if in_flight {
            // Requests in flight are activity: it does not go to sleep while they are.
            if quiet >= self.doze_after {
                self.counts.dozes += 1;
                return Step::Doze;
            }
            return Step::Poll;
        }
        if quiet >= self.idle_after {
            Step::EnableNotifications
        } else if quiet >= self.doze_after {
            self.counts.dozes += 1;
            Step::Doze
        } else {
            Step::Poll
        }
    }

    /// Notifies are back on and the rings were read once more: `pending` if a chain had
    /// come meanwhile (then the core polls on and suppresses them again at its next pass).
    pub fn notifications_enabled(&mut self, now: u64, pending: bool) -> Step {
        if pending {
            self.counts.late_chains += 1;
            self.last_activity = now;
            return Step::Poll;
        }
        self.mode = Mode::Sleeping;
        self.counts.sleeps += 1;
        Step::Sleep
    }
}

/// Whether transition number `n` (1, 2, ...) is logged: the first 8, then each power of
/// two, so a busy side core's log stays short and still shows the counts growing.
pub fn logged_transition(n: u64) -> bool {
    n <= 8 || n.is_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_while_busy_and_sleeps_only_after_idle_and_a_last_empty_look() {
        let mut p = PollLoop::new(100);
        assert_eq!(p.mode(), Mode::Sleeping);
        assert!(p.begin_pass(1_000));
        assert_eq!((p.mode(), p.counts().wakes), (Mode::Polling, 1));
        assert_eq!(p.end_pass(1_000, true, false), Step::Poll);
        p.begin_pass(1_050);
        assert_eq!(p.end_pass(1_050, false, false), Step::Poll, "idle for 50 ticks only");
        p.begin_pass(1_099);
        assert_eq!(p.end_pass(1_099, false, false), Step::Poll);
        p.begin_pass(1_100);
        assert_eq!(p.end_pass(1_100, false, false), Step::EnableNotifications);
        assert_eq!(p.notifications_enabled(1_101, false), Step::Sleep);
        assert_eq!((p.mode(), p.counts().sleeps), (Mode::Sleeping, 1));
        // Woken: polls again, the idle time counted from the wake.
        p.begin_pass(5_000);
        assert_eq!(p.end_pass(5_050, false, false), Step::Poll);
        assert_eq!(p.counts(), PollCounts { passes: 5, busy_passes: 1, wakes: 2, sleeps: 1, late_chains: 0, dozes: 0 });
    }

    #[test]
    fn a_chain_found_after_notifies_came_back_keeps_it_polling() {
        let mut p = PollLoop::new(10);
        p.begin_pass(0);
        assert_eq!(p.end_pass(10, false, false), Step::EnableNotifications);
        // The driver made a chain available while it still saw the suppression: no notify
        // came, so the core must not sleep.
        assert_eq!(p.notifications_enabled(11, true), Step::Poll);
        assert_eq!((p.mode(), p.counts().late_chains), (Mode::Polling, 1));
        // And the idle time starts again from there.
        p.begin_pass(15);
        assert_eq!(p.end_pass(15, false, false), Step::Poll);
        p.begin_pass(21);
        assert_eq!(p.end_pass(21, false, false), Step::EnableNotifications);
    }

    #[test]
    fn with_requests_in_flight_it_dozes_and_never_sleeps() {
        let mut p = PollLoop::new(100);
        p.set_times(100, 10);
        p.begin_pass(0);
        assert_eq!(p.end_pass(0, true, true), Step::Poll, "work: polls");
        assert_eq!(p.end_pass(5, false, true), Step::Poll, "in flight, quiet for 5 ticks only");
        assert_eq!(p.end_pass(10, false, true), Step::Doze);
        // However long the requests take, it dozes: notifies stay off.
        assert_eq!(p.end_pass(1_000, false, true), Step::Doze);
        assert_eq!(p.mode(), Mode::Polling);
        // They complete (the used ring moves: work), and the idle time counts from there:
        // it polls a little, dozes (notifies still off: the guest's next request, made on
        // the completion, needs none), then asks for notifies again.
        assert_eq!(p.end_pass(1_000, true, false), Step::Poll);
        assert_eq!(p.end_pass(1_005, false, false), Step::Poll);
        assert_eq!(p.end_pass(1_050, false, false), Step::Doze);
        assert_eq!(p.end_pass(1_100, false, false), Step::EnableNotifications);
        assert_eq!(p.counts().dozes, 3);
    }

    #[test]
    fn the_log_keeps_the_first_transitions_and_then_powers_of_two() {
        let logged: Vec<u64> = (1..=40).filter(|&n| logged_transition(n)).collect();
        assert_eq!(logged, [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]);
    }
}
