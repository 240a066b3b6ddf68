//! Side cores: physical CPUs that run no vCPU and serve the virtio disks and NICs of the
//! VMs that name them (`io_cpu` in the manifest) by polling their virtqueues, so that a
//! guest's I/O needs no exit to start (docs/virtio.md, "The side core"; ELVIS).
//!
//! An [`IoCore`] is one such CPU: the devices it serves, its poll/sleep state
//! (`vdev::virtio::poll::PollLoop`) and whether it polls now. Its CPU's turn
//! (`Hypervisor::io_turn`) is one pass over its devices; when they have been idle for
//! [`IDLE_AFTER_US`] the guests are asked to notify again and the CPU waits for an
//! interrupt. A guest's QueueNotify on a served device only marks the queue and, unless the
//! core polls, kicks its CPU (`VirtioSlot`'s window): the vCPU's exit runs no device work.
//!
//! Locks: the list of devices is taken by the core for its pass, and by a VM's creation and
//! destruction to add and remove its devices, so once `remove_vm` returns the core has
//! finished any pass over them and never looks at them again: a VM's devices are shut down
//! and its requests drained only after that, and its capabilities revoked after both
//! (`Hypervisor::vm_ended`). Each device is touched under its own lock, as from an exit.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

use hyp_core::platform::MAX_CPUS;
use hyp_core::sync::Mutex;
use vdev::virtio::poll::{PollCounts, PollLoop};

use crate::arch::Arch;

/// How long a side core's queues stay idle (nothing taken, nothing completed, no request
/// in flight) before it asks for notifies again and sleeps, in microseconds. Long beside
/// the gap between a completion and the guest's next request (a few microseconds on
/// hardware, tens under QEMU's TCG), short beside a human's pause.
pub const IDLE_AFTER_US: u64 = 2_000;
/// How long a side core polls without work before it waits for an interrupt between
/// passes (a completion, a kick), in microseconds, and how long it waits at most then (a
/// timer): a chain the guest makes available meanwhile waits that long at most.
/// Spinning through a request's whole time would take the CPU from the board devices'
/// own work (a host thread under an emulator; a shared core's power on hardware).
pub const DOZE_AFTER_US: u64 = 50;
pub const DOZE_FOR_US: u64 = 100;

/// What a pass over a device found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Chains taken, or used rings moved (completions, frames received).
    pub work: bool,
    /// Requests still in flight on the board's devices.
    pub in_flight: bool,
}

/// A device a side core serves (a `VirtioSlot` of a disk or a NIC).
pub trait Polled: Send + Sync {
    /// One pass with notifies suppressed.
    fn pass(&self) -> Found;
    /// Asks for notifies again and reads the rings once more: true if a chain came
    /// meanwhile (the core must not sleep).
    fn enable_notifications(&self) -> bool;
}

/// One side core.
pub struct IoCore {
    /// Some VM names this CPU as its `io_cpu`.
    on: AtomicBool,
    /// It polls (notifies are off): a notify need not kick it.
    polling: AtomicBool,
    state: Mutex<PollLoop>,
    /// The devices it serves, by VM.
    devices: Mutex<Vec<(usize, Arc<dyn Polled>)>>,
    /// Counter ticks spent in passes that found something: the side core's work, without
    /// its idle polling (under `-icount shift=0` a tick is 16 instructions at 62.5 MHz).
    busy_ticks: AtomicU64,
    /// The longest a doze lasts, in counter ticks.
    doze_ticks: AtomicU64,
}

impl IoCore {
    const fn new() -> Self {
        IoCore {
            on: AtomicBool::new(false),
            polling: AtomicBool::new(false),
            state: Mutex::new(PollLoop::new(0)),
            devices: Mutex::new(Vec::new()),
            busy_ticks: AtomicU64::new(0),
            doze_ticks: AtomicU64::new(0),
        }
    }

    /// Its line of the management console's `list`: `io cpuN: polling|sleeping; P passes,
    /// B busy, D dozes, W wakes, S sleeps, L late chains, T busy ticks`.
    pub fn line(&self, cpu: usize) -> String {
        let c = self.counts();
        let mode = if self.is_polling() { "polling" } else { "sleeping" };
        format!(
            "io cpu{cpu}: {mode}; {} passes, {} busy, {} dozes, {} wakes, {} sleeps, {} late chains, {} busy ticks",
            c.passes,
            c.busy_passes,
            c.dozes,
            c.wakes,
            c.sleeps,
            c.late_chains,
            self.busy_ticks.load(Ordering::Relaxed)
        )
    }

    /// A guest notified a queue of a device this core serves: wake it, unless it polls.
    /// The caller marked the queue first; the fence orders that mark (and the guest's
    /// reading of the ring's notify suppression, which made it notify) before the read of
    /// `polling`, so that either this sees the core asleep and kicks it, or the core's last
    /// look at the rings before it sleeps sees the chain (see `go_to_sleep`).
    pub fn wake<A: Arch>(&self, cpu: usize) {
        fence(Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            A::kick_cpu(cpu);
        }
    }

    /// Adds VM `vm`'s devices to those it serves.
    pub fn add(&self, vm: usize, devices: impl Iterator<Item = Arc<dyn Polled>>) {
        self.devices.lock().extend(devices.map(|d| (vm, d)));
    }

    /// Removes VM `vm`'s devices. Once this returns the core never looks at them again: a
    /// pass holds the list's lock.
    pub fn remove_vm(&self, vm: usize) {
        self.devices.lock().retain(|(owner, _)| *owner != vm);
    }

    /// The transitions so far.
    pub fn counts(&self) -> PollCounts {
        self.state.lock().counts()
    }

    /// Whether it polls now.
    pub fn is_polling(&self) -> bool {
        self.polling.load(Ordering::Acquire)
    }

    /// Whether some VM names this CPU as its `io_cpu`.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }
}

/// What a side core's turn ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// It polls on: its CPU makes the next pass at once.
    Polled,
    /// It woke from its sleep (the transition number).
    Woke(u64),
    /// It went to sleep: its CPU waits for an interrupt (the transition number).
    Slept(u64),
    /// No work for a while: its CPU waits for an interrupt, at most this many counter ticks
    /// (notifies stay off).
    Dozed(u64),
}

/// The side cores of the board, by CPU.
pub struct IoCores {
    cores: [IoCore; MAX_CPUS],
}

impl Default for IoCores {
    fn default() -> Self {
        Self::new()
    }
}

impl IoCores {
    pub const fn new() -> Self {
        IoCores { cores: [const { IoCore::new() }; MAX_CPUS] }
    }

    /// CPU `cpu` is a side core from now on, for a counter of `hz`: it sleeps after
    /// `IDLE_AFTER_US` of idle queues, dozes after `DOZE_AFTER_US` with requests in flight.
    pub fn set_on(&self, cpu: usize, hz: u64) {
        if let Some(core) = self.cores.get(cpu) {
            let ticks = |us: u64| us * hz / 1_000_000;
            core.state.lock().set_times(ticks(IDLE_AFTER_US), ticks(DOZE_AFTER_US));
            core.doze_ticks.store(ticks(DOZE_FOR_US), Ordering::Relaxed);
            core.on.store(true, Ordering::Release);
        }
    }

    /// The side core on CPU `cpu`, if it is one.
    pub fn get(&self, cpu: usize) -> Option<&IoCore> {
        self.cores.get(cpu).filter(|c| c.is_on())
    }

    /// The first side core's CPU: it takes the board disk's and NIC's interrupts.
    pub fn first(&self) -> Option<usize> {
        self.cores.iter().position(IoCore::is_on)
    }

    /// Removes VM `vm`'s devices from every side core (`IoCore::remove_vm`).
    pub fn remove_vm(&self, vm: usize) {
        self.cores.iter().filter(|c| c.is_on()).for_each(|c| c.remove_vm(vm));
    }
}

impl IoCore {
    /// One pass over the devices at counter value `now` (`before_pass` runs first, after
    /// the core is marked polling: the board's interrupts it takes may complete requests);
    /// when they have been idle long enough, the guests are asked to notify again and the
    /// core sleeps unless a chain came meanwhile.
    pub fn turn(&self, now: impl Fn() -> u64, before_pass: impl FnOnce()) -> Turn {
        // Only this core's CPU makes turns. The state's lock is not held across
        // `before_pass`: the interrupts it takes may run a console command (`list` reads the
        // counts, `destroy` removes a VM's devices) on this very CPU.
        let (was_sleeping, start) = {
            let mut state = self.state.lock();
            let start = now();
            let was_sleeping = state.mode() == vdev::virtio::poll::Mode::Sleeping;
            state.begin_pass(start);
            (was_sleeping, start)
        };
        self.polling.store(true, Ordering::SeqCst);
        before_pass();
        let found = {
            let devices = self.devices.lock();
            // Every device, not stopping at the first that found work: each must be served.
            devices.iter().fold(Found::default(), |all, (_, d)| {
                let found = d.pass();
                Found { work: all.work | found.work, in_flight: all.in_flight | found.in_flight }
            })
        };
        let end = now();
        if found.work {
            self.busy_ticks.fetch_add(end.saturating_sub(start), Ordering::Relaxed);
        }
        let mut state = self.state.lock();
        match state.end_pass(end, found.work, found.in_flight) {
            vdev::virtio::poll::Step::EnableNotifications if self.go_to_sleep(&mut state, now()) => {
                return Turn::Slept(state.counts().sleeps);
            }
            vdev::virtio::poll::Step::Doze if !was_sleeping => {
                return Turn::Dozed(self.doze_ticks.load(Ordering::Relaxed));
            }
            _ => {}
        }
        if was_sleeping {
            Turn::Woke(state.counts().wakes)
        } else {
            Turn::Polled
        }
    }

    /// Notifies back on, one more look at the rings (virtio 1.2 2.7.10): the core is
    /// marked not polling before that look, so a guest that notifies after it kicks the
    /// CPU (`wake`), and one that made a chain available before it is found by the look.
    /// True if it sleeps.
    fn go_to_sleep(&self, state: &mut PollLoop, now: u64) -> bool {
        self.polling.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let pending = {
            let devices = self.devices.lock();
            devices.iter().fold(false, |pending, (_, d)| d.enable_notifications() | pending)
        };
        match state.notifications_enabled(now, pending) {
            vdev::virtio::poll::Step::Sleep => true,
            _ => {
                self.polling.store(true, Ordering::SeqCst);
                false
            }
        }
    }
}
