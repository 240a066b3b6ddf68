//! The vCPU scheduler at run time (docs/scheduler.md): one `sched::Scheduler` for all CPUs
//! behind one lock, asked by each CPU's loop what to run, and the kicks that make a CPU ask
//! again when its answer may have changed. It is called on slow paths only (a vCPU starting,
//! stopping, blocking or waking, a slice ending): a pinned vCPU's exits never reach it.

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

/// Makes CPU `cpu` ask the scheduler again, unless it is this CPU (which does so next).
fn kick(cpu: Option<usize>) {
    if let Some(cpu) = cpu.filter(|&c| c != cpus::current_index()) {
        cpus::kick(cpu);
    }
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
    SCHED.get().map_or(Decision::IDLE, |s| s.lock().pick(cpu, now()))
}
