//! The board's physical CPUs as the runtime sees them while the machine boots: which are
//! online, the work a CPU is handed beside its vCPUs, and the check that every CPU answers
//! a kick, the path that later carries each vCPU kick. Starting a CPU is the arch's
//! (PSCI CPU_ON, a spin table); what it reports is kept here.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use hyp_core::platform::MAX_CPUS;

use crate::arch::Arch;

/// No work: the CPU runs the vCPUs the scheduler gives it.
const NO_WORK: usize = 0;
/// Answer the boot-time check (`Cpus::check_kicks`).
const PING: usize = usize::MAX;

/// Each CPU's place in the boot: online or not, and the work handed to it.
pub struct Cpus {
    online: [AtomicBool; MAX_CPUS],
    work: [AtomicUsize; MAX_CPUS],
    answered: [AtomicBool; MAX_CPUS],
}

impl Default for Cpus {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpus {
    pub const fn new() -> Self {
        Cpus {
            online: [const { AtomicBool::new(false) }; MAX_CPUS],
            work: [const { AtomicUsize::new(NO_WORK) }; MAX_CPUS],
            answered: [const { AtomicBool::new(false) }; MAX_CPUS],
        }
    }

    /// CPU `cpu` is up: its stack, MMU and interrupt controller ready, it takes work now.
    pub fn set_online(&self, cpu: usize) {
        if let Some(online) = self.online.get(cpu) {
            online.store(true, Ordering::Release);
        }
    }

    pub fn is_online(&self, cpu: usize) -> bool {
        self.online.get(cpu).is_some_and(|o| o.load(Ordering::Acquire))
    }

    pub fn online_count(&self) -> usize {
        self.online.iter().filter(|o| o.load(Ordering::Acquire)).count()
    }

    /// Waits until CPU `cpu` reports online, `wait` at a time, at most `steps` times.
    pub fn wait_online(&self, cpu: usize, steps: u64, wait: impl Fn()) -> bool {
        wait_until(steps, wait, || self.is_online(cpu))
    }

    /// Hands CPU `cpu` the image's work `work` (a nonzero value the image defines: a test
    /// hook's) and kicks it.
    pub fn give_work<A: Arch>(&self, cpu: usize, work: usize) {
        if let Some(slot) = self.work.get(cpu) {
            slot.store(work, Ordering::Release);
            A::kick_cpu(cpu);
        }
    }

    /// CPU `cpu`'s turn at its boot-time work: the check's ping is answered here; any other
    /// work is the image's to do.
    pub fn take_work(&self, cpu: usize) -> Option<usize> {
        match self.work.get(cpu)?.swap(NO_WORK, Ordering::AcqRel) {
            NO_WORK => None,
            PING => {
                self.answered[cpu].store(true, Ordering::Release);
                None
            }
            work => Some(work),
        }
    }

    /// Whether CPU `cpu` has answered the check.
    pub fn is_answered(&self, cpu: usize) -> bool {
        self.answered.get(cpu).is_some_and(|a| a.load(Ordering::Acquire))
    }

    /// Kicks every other online CPU and counts those that answer, each within `steps` waits:
    /// (answered, asked).
    pub fn check_kicks<A: Arch>(&self, steps: u64, wait: impl Fn()) -> (usize, usize) {
        let me = A::current_cpu();
        let others = || (0..MAX_CPUS).filter(move |&c| c != me && self.is_online(c));
        for cpu in others() {
            self.give_work::<A>(cpu, PING);
        }
        let answered = others().filter(|&c| wait_until(steps, &wait, || self.is_answered(c)));
        (answered.count(), others().count())
    }
}

fn wait_until(steps: u64, wait: impl Fn(), done: impl Fn() -> bool) -> bool {
    for _ in 0..steps {
        if done() {
            return true;
        }
        wait();
    }
    done()
}
