//! The scheduler: every CPU's run queue and every vCPU's state, and the operations the
//! hypervisor performs on them (configuration, PSCI, WFI, virtual interrupts, slice ends).

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::cpu::{Cpu, CpuKind, Running};
use crate::vcpu::Vcpu;
use crate::{Decision, Policy, SchedError, VcpuRef, VcpuState};

/// The run queues of all physical CPUs and the state of every vCPU.
///
/// **Locking.** The arch crate keeps the whole `Scheduler` behind one spinlock, rather than
/// one lock per run queue, because the operations that cross CPUs (a device interrupt or an
/// SGI on one CPU waking a vCPU homed on another, PSCI CPU_ON/CPU_OFF from a sibling vCPU, VM
/// destruction) would otherwise need two locks and an order between them, and the invariants
/// (a vCPU is in exactly one place) would hold only under both. The lock is cheap to hold: it
/// is taken only on the slow paths (a trapped WFI, a wake-up, a slice end, a kick, PSCI), never
/// on an ordinary exit; a pinned vCPU, whose WFI does not trap and which has no tick, almost
/// never takes it; each operation is a map lookup and a short queue update, and nothing
/// allocates after [`Scheduler::add_vcpu`].
///
/// **Time.** Every `now` is a reading of the system counter (CNTPCT_EL0), which all CPUs
/// share. A reading slightly behind an earlier one (taken on another CPU) is harmless: time
/// differences saturate at 0.
///
/// **Decisions are idempotent.** [`Scheduler::pick`] depends only on the state and `now`, so a
/// spurious or late timer interrupt or kick costs an exit, never fairness; [`Scheduler::tick`]
/// is the same call under the name the timer handler uses.
#[derive(Clone, Debug)]
pub struct Scheduler {
    cpus: Vec<Cpu>,
    vcpus: BTreeMap<VcpuRef, Vcpu>,
}

impl Scheduler {
    /// A scheduler for `cpus` physical CPUs (numbered 0 to `cpus` - 1, the arch crate's logical
    /// CPU numbers), with no vCPU.
    pub fn new(cpus: usize) -> Self {
        Self { cpus: (0..cpus).map(|_| Cpu::new()).collect(), vcpus: BTreeMap::new() }
    }

    /// The number of physical CPUs.
    pub fn cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Adds vCPU `v`, Stopped, homed on `home_cpu` with `policy`. Everything is checked before
    /// anything changes, so an error leaves the scheduler as it was.
    ///
    /// A pinned vCPU needs a CPU of its own; shared vCPUs share a CPU only with other shared
    /// vCPUs (any slices). Allocates (the vCPU's record, room on its run queue) so that the
    /// other operations never do.
    pub fn add_vcpu(&mut self, v: VcpuRef, home_cpu: usize, policy: Policy) -> Result<(), SchedError> {
        if self.vcpus.contains_key(&v) {
            return Err(SchedError::Duplicate { vcpu: v });
        }
        let cpu = self.cpus.get(home_cpu).ok_or(SchedError::NoSuchCpu { cpu: home_cpu, cpus: self.cpus.len() })?;
        if policy == (Policy::Shared { slice: 0 }) {
            return Err(SchedError::ZeroSlice { vcpu: v });
        }
        let kind = match (cpu.kind, policy) {
            (CpuKind::Pinned(owner), _) => return Err(SchedError::CpuPinned { cpu: home_cpu, owner }),
            (CpuKind::Shared, Policy::Pinned) => {
                return Err(SchedError::CpuShared { cpu: home_cpu, sharer: self.first_homed_on(home_cpu).unwrap_or(v) })
            }
            (_, Policy::Pinned) => CpuKind::Pinned(v),
            (_, Policy::Shared { .. }) => CpuKind::Shared,
        };
        let cpu = &mut self.cpus[home_cpu];
        cpu.kind = kind;
        cpu.homed += 1;
        cpu.queue.reserve_total(cpu.homed);
        self.vcpus.insert(v, Vcpu { home: home_cpu, policy, state: VcpuState::Stopped, budget: 0, ran: 0, overrun: 0 });
        Ok(())
    }

    /// Removes vCPU `v` (its VM is destroyed), stopping it first. A CPU left with no vCPU is
    /// free again (it can be pinned). Returns the CPU to kick if it was running `v`: that CPU
    /// must leave the guest and [`Scheduler::pick`] again.
    pub fn remove_vcpu(&mut self, v: VcpuRef, now: u64) -> Result<Option<usize>, SchedError> {
        let kick = self.stop(v, now)?;
        if let Some(gone) = self.vcpus.remove(&v) {
            let cpu = &mut self.cpus[gone.home];
            cpu.homed -= 1;
            if cpu.homed == 0 {
                cpu.kind = CpuKind::Free;
            }
        }
        Ok(kick)
    }

    /// PSCI CPU_ON: Stopped → Runnable, at the back of its CPU's queue with a fresh turn.
    /// Returns the CPU to kick (an SGI) if it would not otherwise look at its queue: it is
    /// idle, or runs a vCPU without a deadline. An error if `v` is not stopped (PSCI answers
    /// ALREADY_ON).
    pub fn start(&mut self, v: VcpuRef) -> Result<Option<usize>, SchedError> {
        let entry = self.vcpus.get_mut(&v).ok_or(SchedError::UnknownVcpu { vcpu: v })?;
        if entry.state != VcpuState::Stopped {
            return Err(SchedError::NotStopped { vcpu: v, state: entry.state });
        }
        entry.state = VcpuState::Runnable;
        entry.budget = 0;
        let cpu = &mut self.cpus[entry.home];
        cpu.queue.push_back(v);
        Ok(cpu.needs_kick().then_some(entry.home))
    }

    /// PSCI CPU_OFF, or the VM ends: any state → Stopped; it leaves its run queue and loses
    /// its turn. Stopping a stopped vCPU does nothing. Returns the CPU to kick if it was
    /// running `v` (possibly the caller's own CPU): until that CPU picks again it is still in
    /// the guest, but no decision will name `v` again.
    pub fn stop(&mut self, v: VcpuRef, now: u64) -> Result<Option<usize>, SchedError> {
        let entry = self.vcpus.get_mut(&v).ok_or(SchedError::UnknownVcpu { vcpu: v })?;
        let cpu = &mut self.cpus[entry.home];
        let mut kick = None;
        if let Some(running) = cpu.running.filter(|r| r.vcpu == v) {
            charge(entry, &running, now);
            cpu.running = None;
            kick = Some(entry.home);
        }
        cpu.queue.remove(v);
        entry.state = VcpuState::Stopped;
        entry.budget = 0;
        Ok(kick)
    }

    /// The running vCPU `v` executed a trapped WFI with no interrupt pending: Running →
    /// Blocked, off the run queue until [`Scheduler::wake`]. The time it ran is charged to its
    /// turn, and what is left of the turn is kept for when it wakes. Then call
    /// [`Scheduler::pick`] for its CPU. An error if its CPU is not running it.
    pub fn block(&mut self, v: VcpuRef, now: u64) -> Result<(), SchedError> {
        let entry = self.vcpus.get_mut(&v).ok_or(SchedError::UnknownVcpu { vcpu: v })?;
        let cpu = &mut self.cpus[entry.home];
        let running = match cpu.running {
            Some(r) if r.vcpu == v => r,
            _ => return Err(SchedError::NotRunning { vcpu: v, state: entry.state }),
        };
        charge(entry, &running, now);
        entry.state = VcpuState::Blocked;
        cpu.running = None;
        Ok(())
    }

    /// An interrupt was made pending for `v`. A Blocked vCPU becomes Runnable: in front of the
    /// round-robin queue if its turn has time left (it runs when the current slice ends),
    /// else at the back with a fresh turn. Returns the CPU to kick, as [`Scheduler::start`].
    ///
    /// For a vCPU in any other state this does nothing and returns `None`: a running one
    /// needs no rescheduling (getting the interrupt to it is the vGIC's business, which may
    /// also kick its CPU), a runnable one will run anyway, and a stopped one starts only by
    /// PSCI CPU_ON.
    pub fn wake(&mut self, v: VcpuRef) -> Result<Option<usize>, SchedError> {
        let entry = self.vcpus.get_mut(&v).ok_or(SchedError::UnknownVcpu { vcpu: v })?;
        if entry.state != VcpuState::Blocked {
            return Ok(None);
        }
        entry.state = VcpuState::Runnable;
        let cpu = &mut self.cpus[entry.home];
        if entry.budget > 0 {
            cpu.queue.push_woken(v);
        } else {
            cpu.queue.push_back(v);
        }
        Ok(cpu.needs_kick().then_some(entry.home))
    }

    /// The running vCPU `v` gives up the rest of its turn (a trapped WFE: it is probably
    /// spinning on a lock another vCPU holds). If another vCPU waits on its CPU, Running →
    /// Runnable at the back of the queue; otherwise nothing changes. Then call
    /// [`Scheduler::pick`]. An error if its CPU is not running it.
    pub fn yield_now(&mut self, v: VcpuRef, now: u64) -> Result<(), SchedError> {
        let entry = self.vcpus.get_mut(&v).ok_or(SchedError::UnknownVcpu { vcpu: v })?;
        let cpu = &mut self.cpus[entry.home];
        let running = match cpu.running {
            Some(r) if r.vcpu == v => r,
            _ => return Err(SchedError::NotRunning { vcpu: v, state: entry.state }),
        };
        if cpu.queue.is_empty() {
            return Ok(());
        }
        charge(entry, &running, now);
        entry.budget = 0;
        entry.state = VcpuState::Runnable;
        cpu.queue.push_back(v);
        cpu.running = None;
        Ok(())
    }

    /// What CPU `cpu` runs from `now` on. Call it at boot, after `block`, `yield_now` or a
    /// `stop` of the running vCPU, when the slice timer fires ([`Scheduler::tick`]), and when
    /// kicked.
    ///
    /// The running vCPU's time since the last decision is charged to its turn (unless it was
    /// running tickless, alone). It keeps the CPU while its turn has time left, or while no
    /// one else waits (then tickless); a pinned vCPU always keeps it. Otherwise it goes to the
    /// back of the queue and the first waiting vCPU runs, starting a new turn if it has none
    /// in progress. The deadline is set only when another vCPU waits. An unknown `cpu` idles.
    pub fn pick(&mut self, cpu: usize, now: u64) -> Decision {
        let Some(c) = self.cpus.get_mut(cpu) else {
            return Decision::IDLE;
        };
        if let Some(running) = c.running.take() {
            if let Some(cur) = self.vcpus.get_mut(&running.vcpu) {
                charge(cur, &running, now);
                let until = if c.queue.is_empty() || cur.policy == Policy::Pinned {
                    // Alone: no tick. A turn used up while no one waited starts afresh, since
                    // it deprived no one.
                    if cur.budget == 0 {
                        cur.new_turn();
                    }
                    Some(None)
                } else if cur.budget > 0 {
                    Some(Some(now.saturating_add(cur.budget)))
                } else {
                    None
                };
                if let Some(until) = until {
                    c.running = Some(Running { vcpu: running.vcpu, since: now, until });
                    return decision(running.vcpu, cur, until);
                }
                // Its turn is over and someone waits: to the back of the queue.
                cur.state = VcpuState::Runnable;
                c.queue.push_back(running.vcpu);
            }
        }
        while let Some(next) = c.queue.pop_front() {
            let Some(n) = self.vcpus.get_mut(&next) else {
                continue; // cannot happen (removal empties the queue of it); skip rather than run it
            };
            n.state = VcpuState::Running;
            if n.budget == 0 {
                n.new_turn();
            }
            let until = match n.policy {
                Policy::Shared { .. } if !c.queue.is_empty() => Some(now.saturating_add(n.budget)),
                _ => None,
            };
            c.running = Some(Running { vcpu: next, since: now, until });
            return decision(next, n, until);
        }
        Decision::IDLE
    }

    /// The slice timer (CNTHP) fired on `cpu`, or it was kicked: the same as
    /// [`Scheduler::pick`] (decisions depend only on the state and `now`, so an early, late or
    /// spurious call is harmless).
    pub fn tick(&mut self, cpu: usize, now: u64) -> Decision {
        self.pick(cpu, now)
    }

    /// The state of `v`, or `None` if it does not exist.
    pub fn state(&self, v: VcpuRef) -> Option<VcpuState> {
        self.vcpus.get(&v).map(|e| e.state)
    }

    /// How long `v` has run on its CPU up to `now`, in counter ticks: every stretch from a
    /// decision naming it to the next decision, its stop, or `now` if it is running. A CPU
    /// that runs a vCPU spends part of that time in the hypervisor on its behalf (its exits),
    /// which is charged to it too. `None` if `v` does not exist.
    pub fn run_time(&self, v: VcpuRef, now: u64) -> Option<u64> {
        let e = self.vcpus.get(&v)?;
        let current = match self.cpus[e.home].running {
            Some(r) if r.vcpu == v => now.saturating_sub(r.since),
            _ => 0,
        };
        Some(e.ran.saturating_add(current))
    }

    /// The home CPU of `v`, or `None` if it does not exist.
    pub fn home(&self, v: VcpuRef) -> Option<usize> {
        self.vcpus.get(&v).map(|e| e.home)
    }

    /// The vCPU that `cpu`'s last decision named, if it still holds (for the vGIC's kicks and
    /// for diagnostics).
    pub fn running_on(&self, cpu: usize) -> Option<VcpuRef> {
        self.cpus.get(cpu)?.running.map(|r| r.vcpu)
    }

    /// The vCPUs waiting on `cpu`'s run queue, next first.
    pub fn queue(&self, cpu: usize) -> impl Iterator<Item = VcpuRef> + '_ {
        self.cpus.get(cpu).into_iter().flat_map(|c| c.queue.iter())
    }

    /// Checks the internal invariants (numbered in `docs/scheduler.md`, "Structural
    /// invariants"): each vCPU is in exactly the place its state says, on its home CPU; CPU
    /// kinds match the policies of their vCPUs; turns never exceed a slice. For tests and
    /// debug builds; returns the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (&v, e) in &self.vcpus {
            let c = self
                .cpus
                .get(e.home)
                .ok_or_else(|| format!("S1: {v} has home CPU {}, which does not exist", e.home))?;
            let queued = c.queue.iter().filter(|&w| w == v).count();
            let running = c.running.is_some_and(|r| r.vcpu == v);
            let placed = match e.state {
                VcpuState::Runnable => queued == 1 && !running,
                VcpuState::Running => queued == 0 && running,
                VcpuState::Blocked | VcpuState::Stopped => queued == 0 && !running,
            };
            if !placed {
                return Err(format!(
                    "S2: {v} is {} but is queued {queued} time(s) and {}running on CPU {}",
                    e.state,
                    if running { "" } else { "not " },
                    e.home
                ));
            }
            match (c.kind, e.policy) {
                (CpuKind::Pinned(owner), Policy::Pinned) if owner == v => {}
                (CpuKind::Shared, Policy::Shared { .. }) => {}
                (kind, policy) => return Err(format!("S3: {v} is {policy:?} on CPU {} of kind {kind:?}", e.home)),
            }
            if e.budget > e.slice() {
                return Err(format!(
                    "S4: {v} has {} ticks left in its turn, more than its slice {}",
                    e.budget,
                    e.slice()
                ));
            }
        }
        for (i, c) in self.cpus.iter().enumerate() {
            let homed = self.vcpus.values().filter(|e| e.home == i).count();
            let kind_ok = match c.kind {
                CpuKind::Free => homed == 0,
                CpuKind::Pinned(_) => homed == 1,
                CpuKind::Shared => homed >= 1,
            };
            if homed != c.homed || !kind_ok {
                return Err(format!("S3: CPU {i} is {:?} with {homed} vCPUs (counted {})", c.kind, c.homed));
            }
            for w in c.queue.iter() {
                if !self.vcpus.get(&w).is_some_and(|e| e.home == i && e.state == VcpuState::Runnable) {
                    return Err(format!("S2: CPU {i} queues {w}, which is not a runnable vCPU of that CPU"));
                }
            }
            if let Some(r) = c.running {
                if !self.vcpus.get(&r.vcpu).is_some_and(|e| e.home == i && e.state == VcpuState::Running) {
                    return Err(format!("S2: CPU {i} runs {}, which is not a running vCPU of that CPU", r.vcpu));
                }
            }
            for w in c.queue.iter().take(c.queue.woken()) {
                if self.vcpus.get(&w).is_some_and(|e| e.budget == 0) {
                    return Err(format!("S5: {w} waits in front of CPU {i}'s queue with no turn left"));
                }
            }
        }
        Ok(())
    }

    /// Any vCPU homed on `cpu` (to name in an error).
    fn first_homed_on(&self, cpu: usize) -> Option<VcpuRef> {
        self.vcpus.iter().find(|(_, e)| e.home == cpu).map(|(&v, _)| v)
    }
}

/// Charges the time `cur` ran since the last decision to its turn, unless it ran tickless
/// (alone, or pinned): only time during which someone else waited counts against a turn.
/// Charges `cur` for running since the last decision: to its turn if it has a deadline (what
/// it ran past the turn's end to its overrun), and always to the time it has run.
fn charge(cur: &mut Vcpu, running: &Running, now: u64) {
    let ran = now.saturating_sub(running.since);
    if running.until.is_some() {
        cur.overrun = cur.overrun.saturating_add(ran.saturating_sub(cur.budget));
        cur.budget = cur.budget.saturating_sub(ran);
    }
    cur.ran = cur.ran.saturating_add(ran);
}

fn decision(v: VcpuRef, e: &Vcpu, until: Option<u64>) -> Decision {
    Decision { run: Some(v), until, trap_wfi: matches!(e.policy, Policy::Shared { .. }) }
}
