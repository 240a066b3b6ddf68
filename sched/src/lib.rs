//! vCPU scheduling: which vCPU each physical CPU runs next, and until when.
//!
//! Pure logic, no hardware: the arch crate calls it from each physical CPU at EL2 with the
//! time as a count of ticks of the EL2 physical counter (CNTPCT_EL0, common to all CPUs), and
//! applies the answer ([`Decision`]): enter the named vCPU, program the EL2 physical timer
//! (CNTHP_CVAL_EL2) for the end of its slice or leave it off (tickless), and set HCR_EL2.TWI
//! as told: WFI traps for a shared vCPU (the CPU can run another meanwhile), not for a pinned one.
//!
//! Two policies ([`Policy`]): a *pinned* vCPU owns its physical CPU (no tick, WFI does not
//! trap, never preempted); *shared* vCPUs take round-robin turns of their slice on their home
//! CPU, and one woken by a virtual interrupt runs at the end of the current slice. The model,
//! the invariants and the tests that check them are in `docs/scheduler.md`.
//!
//! One [`Scheduler`] holds every CPU; the arch crate keeps it behind one lock (see
//! [`Scheduler`] for why). Nothing here allocates after [`Scheduler::add_vcpu`], reads a clock
//! or panics on a caller's mistake: misuse is a [`SchedError`].
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

mod cpu;
mod decision;
mod error;
mod policy;
mod queue;
mod scheduler;
mod state;
mod vcpu;

pub use decision::Decision;
pub use error::SchedError;
pub use policy::Policy;
pub use scheduler::Scheduler;
pub use state::VcpuState;
pub use vcpu::VcpuRef;
