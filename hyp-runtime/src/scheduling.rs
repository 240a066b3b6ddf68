//! The vCPU scheduler at run time (docs/scheduler.md): one `sched::Scheduler` for all CPUs
//! behind one lock, asked by each CPU's loop what to run, and the kicks that make a CPU ask
//! again when its answer may have changed. It is called on slow paths only (a vCPU starting,
//! stopping, blocking or waking, a slice ending): a pinned vCPU's exits never reach it.

use alloc::vec::Vec;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, Ordering};

use hyp_core::platform::MAX_CPUS;
use hyp_core::sync::Mutex;
use sched::{Decision, Policy, SchedError, Scheduler, VcpuRef, VcpuState};
use spin::Once;

use crate::arch::Arch;

/// The scheduler of every CPU, with what each CPU must be told.
pub struct Scheduling<A: Arch> {
    scheduler: Once<Mutex<Scheduler>>,
    /// Per CPU: the scheduler's answer for it may have changed since it last asked.
    reschedule: [AtomicBool; MAX_CPUS],
    /// Virtual timer deadlines of blocked vCPUs, by home CPU: the hypervisor timer wakes them.
    timer_wakeups: [Mutex<Vec<(VcpuRef, u64)>>; MAX_CPUS],
    arch: PhantomData<fn() -> A>,
}

/// The reference the scheduler knows vCPU `vcpu` of VM `vm` by.
pub fn vcpu_ref(vm: usize, vcpu: usize) -> VcpuRef {
    VcpuRef::new(vm as u16, vcpu as u16)
}

impl<A: Arch> Default for Scheduling<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: Arch> Scheduling<A> {
    pub const fn new() -> Self {
        Scheduling {
            scheduler: Once::new(),
            reschedule: [const { AtomicBool::new(false) }; MAX_CPUS],
            timer_wakeups: [const { Mutex::new(Vec::new()) }; MAX_CPUS],
            arch: PhantomData,
        }
    }

    /// Once, at boot, for the board's `cpus` CPUs.
    pub fn init(&self, cpus: usize) {
        self.scheduler.call_once(|| Mutex::new(Scheduler::new(cpus)));
    }

    fn with<R>(&self, f: impl FnOnce(&mut Scheduler) -> Result<R, SchedError>) -> Result<R, SchedError> {
        match self.scheduler.get() {
            Some(s) => f(&mut s.lock()),
            None => Err(SchedError::NoSuchCpu { cpu: A::current_cpu(), cpus: 0 }),
        }
    }

    /// Makes CPU `cpu` ask the scheduler again: another CPU by a kick; this CPU at the next
    /// exit of the shared vCPU it runs (it is in the hypervisor now, on that vCPU's behalf).
    fn kick(&self, cpu: Option<usize>) {
        let Some(cpu) = cpu else { return };
        self.request_reschedule(cpu);
        if cpu != A::current_cpu() {
            A::kick_cpu(cpu);
        }
    }

    /// Where vCPU `v` is in its life, if the scheduler knows it.
    pub fn state(&self, v: VcpuRef) -> Option<VcpuState> {
        self.scheduler.get().and_then(|s| s.lock().state(v))
    }

    /// Whether CPU `cpu` must ask the scheduler again (it stays asked).
    pub fn reschedule_requested(&self, cpu: usize) -> bool {
        self.reschedule.get(cpu).is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// Whether CPU `cpu` must ask the scheduler again (and forgets it: it asks now).
    pub fn take_reschedule(&self, cpu: usize) -> bool {
        self.reschedule.get(cpu).is_some_and(|f| f.load(Ordering::Relaxed) && f.swap(false, Ordering::AcqRel))
    }

    /// Gives the vCPU a home CPU and a policy; it starts stopped.
    pub fn add(&self, v: VcpuRef, home: usize, policy: Policy) -> Result<(), SchedError> {
        self.with(|s| s.add_vcpu(v, home, policy))
    }

    /// PSCI CPU_ON, or a VM (re)starting: the vCPU becomes runnable on its home CPU.
    pub fn start(&self, v: VcpuRef) -> Result<(), SchedError> {
        self.with(|s| s.start(v)).map(|cpu| self.kick(cpu))
    }

    /// The vCPU stopped (PSCI CPU_OFF, the VM ending).
    pub fn stop(&self, v: VcpuRef) -> Result<(), SchedError> {
        self.with(|s| s.stop(v, A::now())).map(|cpu| self.kick(cpu))
    }

    /// How long vCPU `v` has run on its CPU, in microseconds (0 if the scheduler does not
    /// know it).
    pub fn run_time_us(&self, v: VcpuRef) -> u64 {
        let ticks = self.scheduler.get().and_then(|s| s.lock().run_time(v, A::now())).unwrap_or(0);
        let us = u128::from(ticks) * 1_000_000 / u128::from(A::counter_frequency().max(1));
        u64::try_from(us).unwrap_or(u64::MAX)
    }

    /// What CPU `cpu` runs now.
    pub fn pick(&self, cpu: usize) -> Decision {
        let _ = self.take_reschedule(cpu);
        self.scheduler.get().map_or(Decision::IDLE, |s| s.lock().pick(cpu, A::now()))
    }

    /// The vCPU waits for an interrupt (a trapped WFI), unless `pending` says one is already
    /// there. Checked under the scheduler's lock after the vCPU's `waiting` flag is set, and a
    /// waker makes its interrupt pending before it looks at that flag: whichever comes second
    /// sees the other, so no wake-up is lost (docs/scheduler.md). Returns whether it blocked.
    pub fn block(&self, v: VcpuRef, waiting: &AtomicBool, pending: impl FnOnce() -> bool) -> bool {
        let Some(s) = self.scheduler.get() else { return false };
        let mut s = s.lock();
        waiting.store(true, Ordering::SeqCst);
        if pending() || s.block(v, A::now()).is_err() {
            waiting.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// An interrupt became pending for a vCPU whose `waiting` flag is set: it runs again.
    #[inline]
    pub fn wake(&self, v: VcpuRef, waiting: &AtomicBool) {
        if waiting.load(Ordering::SeqCst) {
            self.wake_waiting(v, waiting);
        }
    }

    /// `wake` of a vCPU that was waiting. Out of line: a kick of a running vCPU (an IPI's
    /// sender) would otherwise carry the scheduler's lock in its frame.
    #[cold]
    #[inline(never)]
    fn wake_waiting(&self, v: VcpuRef, waiting: &AtomicBool) {
        let kicked = self.scheduler.get().and_then(|s| {
            let mut s = s.lock();
            // Cleared under the lock: a vCPU between setting it and blocking holds the lock.
            waiting.swap(false, Ordering::SeqCst).then(|| s.wake(v).ok().flatten()).flatten()
        });
        self.kick(kicked);
    }

    /// A shared vCPU waits for an event (WFE, a spinlock's wait): its turn ends, so that the
    /// vCPU it waits for, which may share its CPU, can run.
    pub fn yield_now(&self, cpu: usize, v: VcpuRef) {
        if self.scheduler.get().is_some_and(|s| s.lock().yield_now(v, A::now()).is_ok()) {
            self.request_reschedule(cpu);
        }
    }

    /// The running shared vCPU's slice may be over, or another vCPU may have become
    /// runnable: what CPU `cpu` runs now.
    pub fn tick(&self, cpu: usize) -> Decision {
        self.scheduler.get().map_or(Decision::IDLE, |s| s.lock().tick(cpu, A::now()))
    }

    /// CPU `cpu` asks the scheduler again at its shared vCPU's next exit (a slice ended, the
    /// vCPU yielded, another vCPU became runnable).
    pub fn request_reschedule(&self, cpu: usize) {
        if let Some(flag) = self.reschedule.get(cpu) {
            flag.store(true, Ordering::Release);
        }
    }

    /// A blocked vCPU of `cpu` whose virtual timer fires at counter value `deadline`.
    pub fn wake_at(&self, cpu: usize, v: VcpuRef, deadline: u64) {
        if let Some(list) = self.timer_wakeups.get(cpu) {
            let mut list = list.lock();
            list.retain(|(w, _)| *w != v);
            list.push((v, deadline));
        }
    }

    /// Programs this CPU's hypervisor timer for the end of the running vCPU's slice or the
    /// first timer of a blocked vCPU, whichever comes first; off when there is neither (a
    /// pinned vCPU runs tickless).
    pub fn program_timer(&self, cpu: usize, slice_end: Option<u64>) {
        let first_wakeup = self.timer_wakeups.get(cpu).and_then(|l| l.lock().iter().map(|(_, d)| *d).min());
        let deadline = match (slice_end, first_wakeup) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        A::set_hyp_timer(deadline);
    }

    /// The hypervisor timer fired on `cpu`: it is stopped, and the blocked vCPUs whose
    /// virtual timer is due run again (`wake_waiting`; their timer interrupt is raised by the
    /// hardware as soon as their timer registers are back in a CPU).
    pub fn timer_fired(&self, cpu: usize, wake_waiting: impl Fn(VcpuRef)) {
        A::set_hyp_timer(None);
        let Some(list) = self.timer_wakeups.get(cpu) else { return };
        let now = A::now();
        let due: Vec<VcpuRef> = {
            let mut list = list.lock();
            let due = list.iter().filter(|(_, d)| *d <= now).map(|(v, _)| *v).collect();
            list.retain(|(_, d)| *d > now);
            due
        };
        due.into_iter().for_each(wake_waiting);
    }
}
