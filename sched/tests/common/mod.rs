//! Test support: the allowed state transitions (the table of `docs/scheduler.md`, written
//! again here as an independent predicate), a checker that applies it and the scheduler's own
//! structural invariants after every operation, and a deterministic simulator of physical CPUs
//! running vCPUs in virtual time.
#![allow(dead_code)] // each test file uses a different part

use std::collections::BTreeMap;

use sched::{Decision, Policy, Scheduler, VcpuRef, VcpuState};

use VcpuState::*;

/// The allowed transitions (docs/scheduler.md, "States"), besides staying in the same state.
pub const TRANSITIONS: &[(VcpuState, VcpuState, &str)] = &[
    (Stopped, Runnable, "start"),
    (Runnable, Running, "pick"),
    (Running, Runnable, "pick (slice over) or yield_now"),
    (Running, Blocked, "block"),
    (Blocked, Runnable, "wake"),
    (Runnable, Stopped, "stop / remove_vcpu"),
    (Running, Stopped, "stop / remove_vcpu"),
    (Blocked, Stopped, "stop / remove_vcpu"),
];

/// Whether a vCPU may go from `from` to `to` in one operation (`None`: not added, or removed).
/// A vCPU appears Stopped and can disappear from any state (removal stops it first).
pub fn allowed(from: Option<VcpuState>, to: Option<VcpuState>) -> bool {
    match (from, to) {
        (None, None) | (None, Some(Stopped)) | (Some(_), None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(b)) => a == b || TRANSITIONS.iter().any(|&(f, t, _)| f == a && t == b),
    }
}

/// Checks, after an operation, the transition predicate for every vCPU and the scheduler's
/// structural invariants; reports what changed.
#[derive(Default)]
pub struct Checker {
    prev: BTreeMap<VcpuRef, Option<VcpuState>>,
}

impl Checker {
    pub fn check(&mut self, s: &Scheduler, ids: &[VcpuRef], op: &str) -> Vec<(VcpuRef, Option<VcpuState>)> {
        if let Err(e) = s.check_invariants() {
            panic!("after {op}: invariant broken: {e}");
        }
        let mut changed = Vec::new();
        for &v in ids {
            let now = s.state(v);
            let before = self.prev.get(&v).copied().flatten();
            assert!(allowed(before, now), "after {op}: {v} went from {before:?} to {now:?}, which the table forbids");
            if before != now {
                changed.push((v, before));
            }
            self.prev.insert(v, now);
        }
        changed
    }
}

/// Checks a decision for `cpu` against invariants 4 and 6 (docs/scheduler.md): it names only
/// a Running vCPU of that CPU (so never a stopped or removed one), a pinned vCPU gets no
/// deadline and no WFI trap, a shared one traps WFI and gets a deadline within its slice
/// exactly when another vCPU waits, and an idle CPU has nothing waiting.
pub fn check_decision(s: &Scheduler, cpu: usize, now: u64, d: Decision, policy_of: impl Fn(VcpuRef) -> Policy) {
    let waiting = s.queue(cpu).count();
    match d.run {
        None => {
            assert_eq!(d, Decision::IDLE, "an idle decision programs nothing");
            assert_eq!(waiting, 0, "CPU {cpu} idles while {waiting} vCPU(s) wait");
        }
        Some(v) => {
            assert_eq!(s.state(v), Some(Running), "CPU {cpu} told to run {v}, which is {:?}", s.state(v));
            assert_eq!(s.home(v), Some(cpu), "{v} runs on CPU {cpu}, not its home");
            assert_eq!(s.running_on(cpu), Some(v));
            match policy_of(v) {
                Policy::Pinned => {
                    assert_eq!(d.until, None, "pinned {v} given a deadline");
                    assert!(!d.trap_wfi, "pinned {v} told to trap WFI");
                }
                Policy::Shared { slice } => {
                    assert!(d.trap_wfi, "shared {v} not told to trap WFI");
                    match d.until {
                        None => assert_eq!(waiting, 0, "{v} tickless while {waiting} vCPU(s) wait"),
                        Some(t) => {
                            assert!(waiting > 0, "{v} given a deadline with no one waiting");
                            assert!(
                                t > now && t - now <= slice,
                                "deadline {t} at {now} is not within {v}'s slice {slice}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// What a simulated vCPU does when it runs.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Always has work: never blocks.
    Busy,
    /// Cycles through (run, sleep) pairs: after `run` ticks of CPU time it executes WFI, and
    /// an interrupt for it arrives `sleep` ticks later. Both at least 1.
    Bursty(Vec<(u64, u64)>),
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub home: usize,
    pub policy: Policy,
    pub behaviour: Behaviour,
}

/// One wait on a run queue, from becoming Runnable to running.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    pub vcpu: usize,
    pub since: u64,
    pub ran: u64,
    /// It became Runnable by `wake`.
    pub woken: bool,
    /// How many vCPUs of the same CPU, woken before it, were still waiting to run then.
    pub woken_ahead: usize,
}

pub struct SimVcpu {
    pub id: VcpuRef,
    pub spec: Spec,
    step: usize,
    work_left: u64,
    pub wake_at: Option<u64>,
    /// In a WFI that did not trap (pinned): still Running for the scheduler.
    in_guest_wfi: bool,
    /// Ticks spent on a physical CPU.
    pub cpu_time: u64,
    /// Since when, and how, it waits on its run queue.
    queued: Option<Wait>,
}

#[derive(Clone, Copy, Default)]
struct SimCpu {
    running: Option<usize>,
    deadline: Option<u64>,
    trap_wfi: bool,
}

/// Physical CPUs running vCPUs in virtual time: each CPU does what its last decision says, the
/// slice timer fires exactly at the deadline, kicks are delivered at once, and every
/// scheduler call is followed by the checks above.
pub struct Sim {
    pub sched: Scheduler,
    pub now: u64,
    pub vcpus: Vec<SimVcpu>,
    cpus: Vec<SimCpu>,
    ids: Vec<VcpuRef>,
    checker: Checker,
    pub waits: Vec<Wait>,
    pub decisions: usize,
    /// How many times a decision took a CPU from a pinned vCPU that was still Running.
    pub preempted_pinned: usize,
    /// How late each slice timer fires after its deadline, in turn (empty: on time), as on
    /// a loaded host where a vCPU's thread is descheduled past its deadline.
    pub tick_lateness: Vec<u64>,
    ticks_set: usize,
}

impl Sim {
    /// Adds every vCPU (vCPU i is `VcpuRef { vm: i / 4, vcpu: i % 4 }`), starts them all at
    /// time 0 and lets every CPU pick.
    pub fn new(cpus: usize, specs: &[Spec]) -> Sim {
        let mut sched = Scheduler::new(cpus);
        let ids: Vec<VcpuRef> = (0..specs.len()).map(|i| VcpuRef::new((i / 4) as u16, (i % 4) as u16)).collect();
        for (spec, &id) in specs.iter().zip(&ids) {
            sched.add_vcpu(id, spec.home, spec.policy).expect("valid configuration");
        }
        let vcpus = specs
            .iter()
            .zip(&ids)
            .map(|(spec, &id)| SimVcpu {
                id,
                spec: spec.clone(),
                step: 0,
                work_left: first_run(&spec.behaviour),
                wake_at: None,
                in_guest_wfi: false,
                cpu_time: 0,
                queued: None,
            })
            .collect();
        let mut sim = Sim {
            sched,
            now: 0,
            vcpus,
            cpus: vec![SimCpu::default(); cpus],
            ids,
            checker: Checker::default(),
            waits: Vec::new(),
            decisions: 0,
            preempted_pinned: 0,
            tick_lateness: Vec::new(),
            ticks_set: 0,
        };
        sim.observe("add_vcpu", None);
        for i in 0..sim.vcpus.len() {
            let kick = sim.sched.start(sim.ids[i]).expect("start a stopped vCPU");
            sim.observe("start", None);
            if let Some(cpu) = kick {
                sim.pick(cpu);
            }
        }
        for cpu in 0..cpus {
            sim.pick(cpu);
        }
        sim
    }

    /// Runs until virtual time `end`.
    pub fn run_until(&mut self, end: u64) {
        loop {
            while self.process_due() {}
            let next = self.next_event().unwrap_or(u64::MAX);
            if next > end {
                self.advance(end);
                return;
            }
            self.advance(next);
        }
    }

    /// The slice of vCPU `i`, or 0 if pinned.
    pub fn slice(&self, i: usize) -> u64 {
        match self.vcpus[i].spec.policy {
            Policy::Shared { slice } => slice,
            Policy::Pinned => 0,
        }
    }

    fn policy_of(&self, v: VcpuRef) -> Policy {
        self.vcpus[self.index(v)].spec.policy
    }

    fn index(&self, v: VcpuRef) -> usize {
        self.ids.iter().position(|&w| w == v).expect("a simulated vCPU")
    }

    fn next_event(&self) -> Option<u64> {
        let deadlines = self.cpus.iter().filter_map(|c| c.deadline);
        let blocks = self.cpus.iter().filter_map(|c| c.running).filter_map(|i| {
            let v = &self.vcpus[i];
            (!v.in_guest_wfi && matches!(v.spec.behaviour, Behaviour::Bursty(_))).then(|| self.now + v.work_left)
        });
        let wakes = self.vcpus.iter().filter_map(|v| v.wake_at);
        deadlines.chain(blocks).chain(wakes).min()
    }

    fn advance(&mut self, to: u64) {
        let dt = to - self.now;
        for c in &self.cpus {
            if let Some(i) = c.running {
                let v = &mut self.vcpus[i];
                v.cpu_time += dt;
                if !v.in_guest_wfi {
                    v.work_left = v.work_left.saturating_sub(dt);
                }
            }
        }
        self.now = to;
    }

    /// Handles one event due now (slice timers first, then WFIs, then interrupts); returns
    /// whether there was one.
    fn process_due(&mut self) -> bool {
        let now = self.now;
        if let Some(cpu) = self.cpus.iter().position(|c| c.deadline == Some(now)) {
            let d = self.sched.tick(cpu, now);
            self.observe("tick", None);
            self.apply(cpu, d);
            return true;
        }
        for cpu in 0..self.cpus.len() {
            let Some(i) = self.cpus[cpu].running else { continue };
            let v = &self.vcpus[i];
            let Behaviour::Bursty(steps) = &v.spec.behaviour else { continue };
            if v.in_guest_wfi || v.work_left > 0 {
                continue;
            }
            let sleep = steps[v.step % steps.len()].1;
            self.vcpus[i].wake_at = Some(now + sleep);
            if self.cpus[cpu].trap_wfi {
                self.sched.block(self.ids[i], now).expect("the running vCPU can block");
                self.observe("block", None);
                self.pick(cpu);
            } else {
                // WFI does not trap: the vCPU idles the physical CPU and stays Running.
                self.vcpus[i].in_guest_wfi = true;
            }
            return true;
        }
        if let Some(i) = self.vcpus.iter().position(|v| v.wake_at == Some(now)) {
            let v = &mut self.vcpus[i];
            v.wake_at = None;
            v.step += 1;
            if let Behaviour::Bursty(steps) = &v.spec.behaviour {
                v.work_left = steps[v.step % steps.len()].0;
            }
            let in_guest = std::mem::take(&mut v.in_guest_wfi);
            let kick = self.sched.wake(self.ids[i]).expect("a known vCPU");
            self.observe("wake", Some(i));
            if in_guest {
                assert_eq!(kick, None, "waking a vCPU that is still running needs no rescheduling");
                assert_eq!(self.sched.state(self.ids[i]), Some(Running));
            }
            if let Some(cpu) = kick {
                self.pick(cpu);
            }
            return true;
        }
        false
    }

    /// Lets `cpu` decide (boot, after a block, or kicked).
    pub fn pick(&mut self, cpu: usize) {
        let d = self.sched.pick(cpu, self.now);
        self.observe("pick", None);
        self.apply(cpu, d);
    }

    /// Stops vCPU `i` now (PSCI CPU_OFF), handling the kick.
    pub fn stop(&mut self, i: usize) {
        let kick = self.sched.stop(self.ids[i], self.now).expect("a known vCPU");
        self.observe("stop", None);
        self.vcpus[i].wake_at = None;
        self.vcpus[i].in_guest_wfi = false;
        if let Some(cpu) = kick {
            self.cpus[cpu].running = None; // the CPU leaves the guest at once
            self.pick(cpu);
        }
    }

    fn apply(&mut self, cpu: usize, d: Decision) {
        self.decisions += 1;
        check_decision(&self.sched, cpu, self.now, d, |v| self.policy_of(v));
        let before = self.cpus[cpu].running;
        let now_running = d.run.map(|v| self.index(v));
        if let Some(b) = before {
            let pinned = self.vcpus[b].spec.policy == Policy::Pinned;
            if pinned && now_running != Some(b) && self.sched.state(self.ids[b]) == Some(Running) {
                self.preempted_pinned += 1;
            }
        }
        let late = match (d.until, self.tick_lateness.len()) {
            (Some(_), n) if n > 0 => {
                self.ticks_set += 1;
                self.tick_lateness[self.ticks_set % n]
            }
            _ => 0,
        };
        let deadline = d.until.map(|t| t + late);
        self.cpus[cpu] = SimCpu { running: now_running, deadline, trap_wfi: d.trap_wfi };
    }

    /// Runs the checker and records the waits that started or ended. `woken` is the vCPU a
    /// `wake` was for.
    fn observe(&mut self, op: &str, woken: Option<usize>) {
        for (i, v) in self.vcpus.iter().enumerate() {
            // The scheduler's account of each vCPU's time is the time its CPU ran it.
            assert_eq!(self.sched.run_time(self.ids[i], self.now), Some(v.cpu_time), "{} after {op}", self.ids[i]);
        }
        let changed = self.checker.check(&self.sched, &self.ids, op);
        for (v, _before) in changed {
            let i = self.index(v);
            match self.sched.state(v) {
                Some(Runnable) => {
                    let home = self.vcpus[i].spec.home;
                    let is_woken = woken == Some(i);
                    let woken_ahead =
                        self.vcpus.iter().filter(|w| w.spec.home == home && w.queued.is_some_and(|q| q.woken)).count();
                    self.vcpus[i].queued =
                        Some(Wait { vcpu: i, since: self.now, ran: 0, woken: is_woken, woken_ahead });
                }
                Some(Running) => {
                    let mut w = self.vcpus[i].queued.take().expect("a vCPU runs only after waiting");
                    w.ran = self.now;
                    self.waits.push(w);
                }
                _ => self.vcpus[i].queued = None,
            }
        }
    }
}

fn first_run(b: &Behaviour) -> u64 {
    match b {
        Behaviour::Busy => u64::MAX,
        Behaviour::Bursty(steps) => steps[0].0,
    }
}
