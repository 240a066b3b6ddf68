//! The vCPU scheduler at run time (docs/scheduler.md): one `sched::Scheduler` for all CPUs
//! behind one lock, asked by each CPU's loop what to run, and the kicks that make a CPU ask
//! again when its answer may have changed. It is called on slow paths only (a vCPU starting,
//! stopping, blocking or waking, a slice ending): a pinned vCPU's exits never reach it.

use alloc::vec::Vec;
use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

use hyp_core::platform::MAX_CPUS;
use sched::{Decision, Policy, SchedError, Scheduler, VcpuRef};
use spin::{Mutex, Once};

use crate::cpus;
use crate::exceptions::sysreg;

static SCHED: Once<Mutex<Scheduler>> = Once::new();

pub fn init(cpus: usize) {
    SCHED.call_once(|| Mutex::new(Scheduler::new(cpus)));
}

fn with<R>(f: impl FnOnce(&mut Scheduler) -> Result<R, SchedError>) -> Result<R, SchedError> {
    match SCHED.get() {
        Some(s) => f(&mut s.lock()),
        None => Err(SchedError::NoSuchCpu { cpu: cpus::current_index(), cpus: 0 }),
    }
}

/// The scheduler's clock: the EL2 physical counter, the same on every CPU.
pub fn now() -> u64 {
    sysreg!("cntpct_el0")
}

/// Per CPU: the scheduler's answer for it may have changed since it last asked.
static RESCHEDULE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Makes CPU `cpu` ask the scheduler again: another CPU by an SGI; this CPU at the next
/// exit of the shared vCPU it runs (it is in the hypervisor now, on that vCPU's behalf).
fn kick(cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    request_reschedule(cpu);
    if cpu != cpus::current_index() {
        cpus::kick(cpu);
    }
}

/// Whether this CPU must ask the scheduler again (and forgets it: it asks now).
pub fn take_reschedule(cpu: usize) -> bool {
    RESCHEDULE.get(cpu).is_some_and(|f| f.load(Ordering::Relaxed) && f.swap(false, Ordering::AcqRel))
}

pub fn vcpu_ref(vm: usize, vcpu: usize) -> VcpuRef {
    VcpuRef::new(vm as u16, vcpu as u16)
}

/// Gives the vCPU a home CPU and a policy; it starts stopped.
pub fn add(v: VcpuRef, home: usize, policy: Policy) -> Result<(), SchedError> {
    with(|s| s.add_vcpu(v, home, policy))
}

/// PSCI CPU_ON, or a VM (re)starting: the vCPU becomes runnable on its home CPU.
pub fn start(v: VcpuRef) -> Result<(), SchedError> {
    with(|s| s.start(v)).map(kick)
}

/// The vCPU stopped (PSCI CPU_OFF, the VM ending).
pub fn stop(v: VcpuRef) -> Result<(), SchedError> {
    with(|s| s.stop(v)).map(kick)
}

/// What this CPU runs now.
pub fn pick(cpu: usize) -> Decision {
    let _ = take_reschedule(cpu);
    SCHED.get().map_or(Decision::IDLE, |s| s.lock().pick(cpu, now()))
}

/// The vCPU waits for an interrupt (a trapped WFI), unless `pending` says one is already
/// there. Checked under the scheduler's lock after the vCPU's `waiting` flag is set, and a
/// waker makes its interrupt pending before it looks at that flag: whichever comes second
/// sees the other, so no wake-up is lost (docs/scheduler.md).
pub fn block(v: VcpuRef, waiting: &AtomicBool, pending: impl FnOnce() -> bool) -> bool {
    let Some(s) = SCHED.get() else { return false };
    let mut s = s.lock();
    waiting.store(true, Ordering::SeqCst);
    if pending() || s.block(v, now()).is_err() {
        waiting.store(false, Ordering::SeqCst);
        return false;
    }
    true
}

/// An interrupt became pending for a vCPU whose `waiting` flag is set: it runs again.
pub fn wake(v: VcpuRef, waiting: &AtomicBool) {
    if !waiting.load(Ordering::SeqCst) {
        return;
    }
    let kicked = SCHED.get().and_then(|s| {
        let mut s = s.lock();
        // Cleared under the lock: a vCPU between setting it and blocking holds the lock.
        waiting.swap(false, Ordering::SeqCst).then(|| s.wake(v).ok().flatten()).flatten()
    });
    kick(kicked);
}

/// A shared vCPU waits for an event (WFE, a spinlock's wait): its turn ends, so that the
/// vCPU it waits for, which may share its CPU, can run.
pub fn yield_now(cpu: usize, v: VcpuRef) {
    if SCHED.get().is_some_and(|s| s.lock().yield_now(v, now()).is_ok()) {
        request_reschedule(cpu);
    }
}

/// The running shared vCPU's slice may be over, or another vCPU may have become runnable:
/// what this CPU runs now.
pub fn tick(cpu: usize) -> Decision {
    SCHED.get().map_or(Decision::IDLE, |s| s.lock().tick(cpu, now()))
}

/// CPU `cpu` asks the scheduler again at its shared vCPU's next exit (a slice ended, the
/// vCPU yielded, another vCPU became runnable).
pub fn request_reschedule(cpu: usize) {
    if let Some(flag) = RESCHEDULE.get(cpu) {
        flag.store(true, Ordering::Release);
    }
}

/// Virtual timer deadlines of blocked vCPUs, by home CPU: the EL2 physical timer wakes them.
static TIMER_WAKEUPS: [Mutex<Vec<(VcpuRef, u64)>>; MAX_CPUS] = [const { Mutex::new(Vec::new()) }; MAX_CPUS];

/// A blocked vCPU of `cpu` whose virtual timer fires at physical count `deadline`.
pub fn wake_at(cpu: usize, v: VcpuRef, deadline: u64) {
    if let Some(list) = TIMER_WAKEUPS.get(cpu) {
        let mut list = list.lock();
        list.retain(|(w, _)| *w != v);
        list.push((v, deadline));
    }
}

/// Programs this CPU's EL2 physical timer (CNTHP, ARM ARM D12.8) for the end of the
/// running vCPU's slice or the first timer of a blocked vCPU, whichever comes first; off
/// when there is neither (a pinned vCPU runs tickless).
pub fn program_timer(cpu: usize, slice_end: Option<u64>) {
    let first_wakeup = TIMER_WAKEUPS.get(cpu).and_then(|l| l.lock().iter().map(|(_, d)| *d).min());
    let deadline = match (slice_end, first_wakeup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match deadline {
        // SAFETY: this CPU's EL2 physical timer belongs to the hypervisor: compare value,
        // then enabled and unmasked (CNTHP_CTL_EL2.ENABLE).
        Some(d) => unsafe { asm!("msr cnthp_cval_el2, {}", "msr cnthp_ctl_el2, {}", "isb", in(reg) d, in(reg) 1u64) },
        // SAFETY: as above; disabled.
        None => unsafe { asm!("msr cnthp_ctl_el2, xzr", "isb") },
    }
}

/// The EL2 physical timer fired on `cpu`: it is stopped, and the blocked vCPUs whose
/// virtual timer is due run again (their timer interrupt is raised by the hardware as soon
/// as their timer registers are back in a CPU).
pub fn timer_fired(cpu: usize, wake_waiting: impl Fn(VcpuRef)) {
    // SAFETY: as for `program_timer`.
    unsafe { asm!("msr cnthp_ctl_el2, xzr", "isb") };
    let Some(list) = TIMER_WAKEUPS.get(cpu) else { return };
    let now = now();
    let due: Vec<VcpuRef> = {
        let mut list = list.lock();
        let due = list.iter().filter(|(_, d)| *d <= now).map(|(v, _)| *v).collect();
        list.retain(|(_, d)| *d > now);
        due
    };
    due.into_iter().for_each(wake_waiting);
}
