//! The hypervisor as a whole, once its CPUs are up:
//! - the VMs of the boot bundle created and started ([`boot`]);
//! - every CPU's turn at running vCPUs, and VMs ended, destroyed, reset and created again
//!   ([`lifecycle`]);
//! - the physical interrupts every CPU takes ([`interrupts`]);
//! - the board's console, disk and NIC as the VMs share them ([`console`], [`disk`],
//!   [`uplink`]).
//!
//! [`Hypervisor`] holds the state every CPU shares; an image keeps one in a `static`. What
//! it needs of the architecture beyond [`Arch`] is [`Virtualization`]: building a VM's
//! stage 2 and running a vCPU are the architecture's.

pub mod boot;
pub mod console;
pub mod disk;
pub mod interrupts;
pub mod lifecycle;
pub mod uplink;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::sync::atomic::AtomicBool;

use hyp_core::cap::{CapError, CapId, CapSpace};
use hyp_core::entropy::{GuestSeeds, SeedSource};
use hyp_core::management::ConsoleMux;
use hyp_core::platform::PhysRange;
use hyp_core::sync::Mutex;
use hyp_core::vcpu_power::EndReason;
use sched::{Decision, VcpuRef};
use spin::Once;
use stage2::{Ipa, IpaRange, PhysAddr, TableMemory, TlbMaintenance};

use crate::arch::Arch;
use crate::cpus::Cpus;
use crate::interrupts::Routes;
use crate::io_core::{IoCores, Turn};
use crate::network::Network;
use crate::passthrough::PassthroughDevice;
use crate::scheduling::Scheduling;
use crate::virtio::slot::VmEnv;
use crate::vm::{Vm, VmBuild, VmError};
use crate::vm_resources::{vttbr_of, VmRequest, VmResources};
use crate::vm_table::VmTable;

/// What the runtime asks of the architecture's virtualization: a VM's stage-2 tables and
/// their TLB maintenance, the CPU state it keeps beside the runtime's VM, and running one of
/// its vCPUs. Like [`Arch`], associated functions: one architecture per image.
pub trait Virtualization: Arch + Sized {
    /// What the VM's devices reach (its RAM, its interrupt lines, the board).
    type Env: VmEnv<Arch = Self>;
    /// A VM as this architecture runs it: the runtime's VM and the CPU state beside it.
    type Vm: Borrow<Vm<Self::Env>> + Send + Sync + 'static;

    /// A new VM's capabilities and stage-2 tables (crate::vm_resources::grant_resources
    /// with this architecture's table memory and TLB maintenance).
    fn grant_resources(
        caps: &mut CapSpace,
        untyped: &[CapId],
        request: &VmRequest<'_>,
    ) -> Result<VmResources, CapError>;
    /// Builds the VM `build` describes, its vCPUs started through `scheduling`.
    fn create_vm(build: VmBuild<'_>, scheduling: &'static Scheduling<Self>) -> Result<Self::Vm, VmError>;
    /// Zeroes the VM's RAM and loads its kernel, initrd and device tree (crate::vm::Vm::load)
    /// so that a vCPU with its MMU off reads them.
    fn load_vm(vm: &Self::Vm);
    /// After a SYSTEM_RESET stopped every vCPU: the VM as at power-on, loaded again.
    fn reset_vm(vm: &Self::Vm, seeds: Option<GuestSeeds>);
    /// Destroys an ended VM through its capability (its passthrough interrupts are quiet
    /// already): its capabilities revoked, its memory returned.
    fn destroy_vm(caps: &mut CapSpace, vm: &Self::Vm) -> Result<(), CapError>;
    /// Runs vCPU `vcpu` on this CPU (`cpu`) as the scheduler decided, until it leaves it.
    fn run_vcpu(vm: &Self::Vm, vcpu: usize, cpu: usize, decision: &Decision) -> VcpuExit;
    /// The board's interrupt `intid` is enabled and taken on CPU `cpu`.
    fn enable_interrupt(intid: u32, cpu: usize);
    /// Acknowledges this CPU's highest-priority pending interrupt: the value to end it with
    /// and its INTID; none if nothing is pending.
    fn acknowledge_interrupt() -> Option<(u32, u32)>;
    /// Ends an acknowledged interrupt: its priority dropped and it is deactivated.
    fn end_interrupt(iar: u32);
    /// Drops an acknowledged interrupt's priority only: the guest it is forwarded to
    /// deactivates it (a hardware-mapped virtual interrupt).
    fn drop_interrupt_priority(iar: u32);
    /// A passthrough SPI disabled at the board's interrupt controller, the write complete
    /// (nothing more is signalled) when this returns.
    fn disable_spi(intid: u32);
    /// A passthrough SPI's pending and active states cleared.
    fn clear_spi(intid: u32);
    /// A passthrough SPI edge- or level-triggered, as its device is.
    fn configure_spi(intid: u32, edge: bool);
    /// Whether a passthrough SPI is enabled.
    fn spi_enabled(intid: u32) -> bool;
    /// Whether an SPI is pending at the board's interrupt controller (a level SPI held
    /// active is pending exactly while its input is asserted).
    fn spi_pending(intid: u32) -> bool;
    /// Bytes of the hypervisor's heap in use, and its size.
    fn heap_usage() -> (u64, u64);
    /// Every VM has ended (`clean`: none failed): the machine stops. Never returns on a
    /// board.
    fn all_vms_ended(clean: bool);
}

/// How a vCPU's run on a CPU ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuExit {
    /// It stopped; the VM goes on (or others will report its end).
    Stopped,
    /// It was the VM's last vCPU: the VM ended, for this reason.
    VmEnded(EndReason),
    /// It left the CPU to another vCPU (its slice ended, or it waits for an interrupt); its
    /// state is saved in the VM and it goes on when the scheduler picks it again.
    Descheduled,
}

/// What creating a VM takes from the board, kept for restarts.
pub(crate) struct VmFactory {
    /// The free memory for translated VMs.
    untyped: Vec<CapId>,
    /// Each identity-mapped VM's untyped, exactly its RAM, by VM index; `None` for a
    /// translated VM.
    identity_untyped: Vec<Option<CapId>>,
    gicv: Option<CapId>,
    gic_v3: bool,
    /// Each VM's passthrough devices with their capabilities, by VM index.
    passthrough: Vec<Vec<PassthroughDevice>>,
    /// Where each VM's random seeds come from (none if the board gave none).
    seeds: Option<Mutex<SeedSource>>,
    /// How many VMs of the manifest have a disk (they share the board disk's queue).
    disk_vms: usize,
}

/// The state every CPU shares.
pub struct Hypervisor<V: Virtualization> {
    /// The scheduler of every CPU.
    pub scheduling: Scheduling<V>,
    /// What each physical interrupt is for, and which VM each passthrough SPI is forwarded to.
    pub routes: Routes,
    /// Which CPUs are online, and their boot-time work.
    pub cpus: Cpus,
    /// The manifest's VMs, by index.
    pub vms: VmTable<V::Vm>,
    /// Every VM's rights; it owns their stage-2 tables.
    caps: Once<Mutex<CapSpace>>,
    factory: Once<VmFactory>,
    network: Network,
    console: Mutex<ConsoleMux>,
    /// The board's disk has no interrupt: its completions are polled (`run_next`).
    disk_polled: AtomicBool,
    /// The CPUs that serve VMs' virtqueues by polling (docs/virtio.md, "The side core").
    pub io: IoCores,
}

impl<V: Virtualization> Default for Hypervisor<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Virtualization> Hypervisor<V> {
    pub const fn new() -> Self {
        Hypervisor {
            scheduling: Scheduling::new(),
            routes: Routes::new(),
            cpus: Cpus::new(),
            vms: VmTable::new(),
            caps: Once::new(),
            factory: Once::new(),
            network: Network::new(),
            console: Mutex::new(ConsoleMux { line: None }),
            disk_polled: AtomicBool::new(false),
            io: IoCores::new(),
        }
    }

    /// VM `id`, if it exists now.
    pub fn vm(&self, id: usize) -> Option<Arc<V::Vm>> {
        self.vms.get(id)
    }

    /// The first touch of `range` of VM `vm`'s private RAM (`VmEnv::zero_on_first_touch`):
    /// its pending stage-2 leaves handed to `zero`, then made valid, under the capability
    /// space's lock (taken after the VM's `FirstTouch` lock, never before); `tlb` gives the
    /// TLB maintenance of the VM whose stage-2 root is the argument.
    pub fn zero_on_first_touch<M: TableMemory, T: TlbMaintenance>(
        &self,
        mem: &mut M,
        tlb: impl FnOnce(u64) -> T,
        vm: CapId,
        range: IpaRange,
        zero: &mut impl FnMut(PhysAddr, u64),
    ) -> Result<u64, CapError> {
        let caps = self.caps.get().ok_or(CapError::NoSuchCapability { cap: vm })?.lock();
        caps.zero_on_first_touch(mem, &mut tlb(vttbr_of(&caps, vm)), vm, range, zero)
    }

    /// The page VM `vm` may read its window at `ipa` from (`CapSpace::window_shadow`).
    pub fn window_shadow(&self, vm: CapId, ipa: Ipa) -> Option<PhysRange> {
        let caps = self.caps.get()?.lock();
        caps.window_shadow(caps.vm_id(vm).ok()?, ipa)
    }

    /// Shows VM `vm`'s shadow page at its window at `ipa`, or hides it
    /// (`CapSpace::show_window_shadow`), under the capability space's lock; `tlb` as for
    /// `zero_on_first_touch`.
    pub fn show_window_shadow<M: TableMemory, T: TlbMaintenance>(
        &self,
        mem: &mut M,
        tlb: impl FnOnce(u64) -> T,
        vm: CapId,
        ipa: Ipa,
        visible: bool,
    ) -> Result<(), CapError> {
        let caps = self.caps.get().ok_or(CapError::NoSuchCapability { cap: vm })?.lock();
        caps.show_window_shadow(mem, &mut tlb(vttbr_of(&caps, vm)), vm, ipa, visible)
    }

    /// One turn of CPU `cpu`: runs the vCPU the scheduler picks until it leaves the CPU, and
    /// carries out how its VM ended if it did. Returns false if nothing could run (the CPU
    /// may wait for an interrupt).
    pub fn run_next(&'static self, cpu: usize) -> bool {
        if self.io.get(cpu).is_some() {
            return self.io_turn(cpu);
        }
        if self.disk_polled() {
            if let Some(disk) = <BoardOf<V> as crate::board::Board>::disk() {
                self.finish_disk_requests(crate::board::DiskQueue::new(disk));
            }
        }
        let decision = self.scheduling.pick(cpu);
        let Some(v) = decision.run else {
            // Only blocked vCPUs' timers can need this CPU now.
            self.scheduling.program_timer(cpu, None);
            return false;
        };
        let Some(vm) = self.vm(usize::from(v.vm)) else {
            let _ = self.scheduling.stop(v);
            return true;
        };
        match V::run_vcpu(&vm, usize::from(v.vcpu), cpu, &decision) {
            VcpuExit::Stopped | VcpuExit::Descheduled => {}
            VcpuExit::VmEnded(EndReason::Reset) => self.reboot(&vm),
            VcpuExit::VmEnded(end) => self.vm_ended(&vm, end),
        }
        true
    }

    /// A side core's turn: one pass over the virtqueues it serves, the board's interrupts
    /// taken first (its disk's completions, frames from the uplink, kicks). False when it
    /// went to sleep: the CPU waits for an interrupt (a notify's kick wakes it).
    pub fn io_turn(&'static self, cpu: usize) -> bool {
        let Some(core) = self.io.get(cpu) else { return false };
        let turn = core.turn(V::now, || {
            if self.disk_polled() {
                if let Some(disk) = <BoardOf<V> as crate::board::Board>::disk() {
                    self.finish_disk_requests(crate::board::DiskQueue::new(disk));
                }
            }
            self.take_interrupts(None);
        });
        let logged = vdev::virtio::poll::logged_transition;
        match turn {
            Turn::Polled => {
                V::pause();
                true
            }
            // The board's interrupts (a completion) or the timer end the wait; this CPU runs
            // no vCPU, so its hypervisor timer is free for it.
            Turn::Dozed(ticks) => {
                V::set_hyp_timer(Some(V::now().saturating_add(ticks)));
                false
            }
            Turn::Woke(n) => {
                if logged(n) {
                    let c = core.counts();
                    say!(
                        V,
                        "hypervisor: io cpu{cpu}: idle -> polling (wake {n}; {} passes, {} busy, {} late chains)",
                        c.passes,
                        c.busy_passes,
                        c.late_chains
                    );
                }
                true
            }
            Turn::Slept(n) => {
                if logged(n) {
                    let c = core.counts();
                    say!(
                        V,
                        "hypervisor: io cpu{cpu}: polling -> idle (sleep {n}; {} passes, {} busy, {} late chains)",
                        c.passes,
                        c.busy_passes,
                        c.late_chains
                    );
                }
                false
            }
        }
    }

    /// A blocked vCPU whose virtual timer is due runs again.
    pub fn wake_waiting(&self, v: VcpuRef) {
        if let Some(vm) = self.vm(usize::from(v.vm)) {
            let core: &Vm<V::Env> = (*vm).borrow();
            if let Some(flag) = core.vgic.waiting.get(usize::from(v.vcpu)) {
                self.scheduling.wake(v, flag);
            }
        }
    }

    /// Fresh random seeds for VM `id`, none if the board gave the hypervisor none.
    fn next_seeds(&self, id: usize) -> Option<GuestSeeds> {
        self.factory.get()?.seeds.as_ref().map(|s| s.lock().next_for(id))
    }
}

/// The board of the image whose architecture is `V`.
pub(crate) type BoardOf<V> = <<V as Virtualization>::Env as VmEnv>::Board;

/// A line of the hypervisor's on the board's console.
macro_rules! say {
    ($v:ty, $($arg:tt)*) => {
        <$crate::hypervisor::BoardOf<$v> as $crate::board::Board>::print(format_args!($($arg)*))
    };
}
pub(crate) use say;
