//! A VM as the runtime holds it, whatever the architecture runs its vCPUs: built from its
//! manifest entry and the resources its capabilities grant (its device tree, its devices on
//! the MMIO bus, its vGIC, its power state), fed from outside (console input, frames,
//! passthrough interrupts), reset, ended and shut down. Running a vCPU is the arch crate's:
//! it keeps this beside what it saves of each vCPU.

mod devices;
pub use devices::ShadowPage;
mod mmio;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use hyp_core::bundle::{VirtioTransport, VmSpec};
use hyp_core::cap::{CapError, CapId};
use hyp_core::entropy::GuestSeeds;
use hyp_core::exit::Incident;
use hyp_core::exit_stats::{ExitCounts, ExitReason};
use hyp_core::guest_fdt::{self, GuestFdtError, GuestGic, GuestPci, GuestPlatform};
use hyp_core::guest_layout::{self, GuestLayout, LayoutError};
use hyp_core::guest_map::{
    VirtioSlot as Slot, GICC_IPA, GICD_IPA, GICR_IPA, GICV2M_IPA, ITS_IPA, MBI_COUNT, MBI_FIRST_INTID, PCI_ECAM_IPA,
    PCI_ECAM_SIZE, PCI_MMIO_IPA, PCI_MMIO_SIZE, SPIS, UART_IPA, UART_SIZE, VIRTIO_IPA,
};
use hyp_core::image::ExecutionState;
use hyp_core::log_limit::GuestLogLimit;
use hyp_core::mmio::MmioBus;
use hyp_core::platform::PhysRange;
use hyp_core::smccc::{psci_status, Hypercall};
use hyp_core::sync::Mutex;
use hyp_core::vcpu_power::{EndReason, VmPower};
use stage2::{Ipa, IpaRange};
use vdev::virtio::net::VirtioNet;
use vgic::{Distributor, GicVersion, IntId, VgicConfig};

pub use devices::VirtioDevices;
pub use mmio::GuestMmio;

use crate::board::Board;
use crate::first_touch::FirstTouch;
use crate::focus::{ConsoleChoice, TrackedConsole};
use crate::passthrough::{spi_list, PassthroughDevice, PassthroughSpi};
use crate::scheduling::{vcpu_ref, Scheduling};
use crate::shared_vgic::{SharedVgic, VgicHandle};
use crate::tlb::Stage1Contexts;
use crate::virtio::disk_slice::DiskSliceError;
use crate::virtio::slot::{VirtioSlot, VmEnv};
use crate::virtio::switch_port::SwitchPort;
use crate::vm_resources::VmResources;
use devices::SharedUart;

/// Why a VM cannot be built.
#[derive(Debug)]
pub enum VmError {
    Layout(LayoutError),
    DeviceTree(GuestFdtError),
    Capability(CapError),
    /// The VM's RAM is smaller than its manifest says (an internal inconsistency).
    RamMismatch,
    /// The manifest asks for a GIC the vGIC cannot provide (too many vCPUs for GICv2).
    Vgic(vgic::VgicError),
    /// The manifest gives the VM a `disk`, and the board has no disk.
    NoBoardDisk,
    /// The VM's `disk` slice cannot be given.
    Disk(DiskSliceError),
    /// Its kernel runs in AArch64 and this hypervisor runs only AArch32 guests (ARMv7).
    Aarch64KernelOnArmv7,
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::Layout(e) => write!(f, "{e}"),
            VmError::DeviceTree(e) => write!(f, "{e}"),
            VmError::Capability(e) => write!(f, "{e}"),
            VmError::RamMismatch => write!(f, "RAM given to the VM is smaller than its manifest entry"),
            VmError::Vgic(e) => write!(f, "{e}"),
            VmError::NoBoardDisk => write!(f, "the board has no virtio disk for the VM's `disk`"),
            VmError::Disk(e) => write!(f, "{e}"),
            VmError::Aarch64KernelOnArmv7 => write!(
                f,
                "its kernel is an arm64 Image, and an ARMv7 CPU runs only 32-bit guests; give it a 32-bit zImage"
            ),
        }
    }
}

/// A clean end: PSCI SYSTEM_OFF, HYP_VM_EXIT with status 0, or the console's destroy or
/// restart.
pub fn is_clean(end: EndReason) -> bool {
    matches!(end, EndReason::PoweredOff | EndReason::Exited(0) | EndReason::Destroyed | EndReason::Restart)
}

/// What a PSCI or VM call asks of the vCPU that made it (`Vm::call`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEffect {
    /// The guest goes on, with this result in its first register (None: registers as
    /// they are).
    Resume(Option<u64>),
    /// This vCPU stops (PSCI CPU_OFF).
    Stop,
    /// The whole VM ends for this reason (its other vCPUs are asked to stop); this vCPU
    /// stops.
    End(EndReason),
}

/// How the VM came to be: what its capabilities grant and what the board gives it.
pub struct VmBuild<'a> {
    pub id: usize,
    pub spec: VmSpec<'static>,
    pub granted: &'a VmResources,
    pub gic_v3: bool,
    pub passthrough: &'a [PassthroughDevice],
    pub seeds: Option<GuestSeeds>,
    /// How many VMs of the manifest have a disk: each gets an equal share of the board
    /// disk's queue.
    pub disk_vms: usize,
}

pub struct Vm<E: VmEnv> {
    pub id: usize,
    pub spec: VmSpec<'static>,
    /// The VM's capability: destroying or restarting the VM goes through it.
    pub cap: CapId,
    /// Its RAM, physically.
    pub ram: PhysRange,
    /// Which blocks of its RAM are zeroed and mapped (the rest are on first touch).
    pub first_touch: Arc<FirstTouch>,
    /// Its RAM as its vGIC reads it (the LPI configuration table, when a redistributor's
    /// GICR_CTLR.EnableLPIs is set).
    gic_ram: E::Ram,
    /// Where kernel, initrd and device tree go in RAM.
    layout: GuestLayout,
    /// The guest's device tree (generated from its manifest entry); its seeds are replaced
    /// when the VM resets itself.
    pub(crate) device_tree: Mutex<Vec<u8>>,
    /// The lines the guest causes (its mistakes, its devices' incidents, its refused frames)
    /// go through this limit: a guest must not be able to flood the console.
    pub guest_log: Arc<GuestLogLimit>,
    /// Set when one of its virtio devices left work for later: the next exit of any of its
    /// vCPUs goes on with it (a bounded notify; `VirtioSlot::continue_work`).
    pub device_work: Arc<AtomicBool>,
    /// Exits by reason, per vCPU.
    pub exits: Box<[ExitCounts]>,
    /// Its emulated devices but the vGIC, fixed once it is built: each device locks itself.
    bus: MmioBus,
    /// The VM's virtual GIC (its windows are not on the bus: `GuestMmio` decodes them first).
    pub vgic: SharedVgic<E::Arch>,
    vgic_config: VgicConfig,
    /// The VM's console UART (also on the bus), which console input reaches directly.
    uart: SharedUart,
    /// Its virtio devices (also on the bus), which the switch and console input reach.
    virtio: VirtioDevices<E>,
    /// Which console typed input goes to.
    console_choice: ConsoleChoice,
    pub power: Mutex<VmPower>,
    /// Set once the VM is ending: every vCPU leaves at its next exit.
    ending: AtomicBool,
    pub gic_v3: bool,
    pub stage2_ipa_bits: u8,
    /// The SPIs of its passthrough devices: physical INTID = virtual INTID, hardware-mapped.
    pub passthrough_spis: Vec<PassthroughSpi>,
    /// The scheduler its vCPUs are started through.
    scheduling: &'static Scheduling<E::Arch>,
    /// Whose stage-1 translations each CPU's TLB may hold: when a CPU invalidates before
    /// one of its vCPUs enters (crate::tlb).
    pub stage1: Stage1Contexts,
}

/// A line about vCPU `vcpu` of VM `vm`, on the hypervisor's console.
#[macro_export]
macro_rules! vm_log {
    ($env:ty, $vm:expr, $vcpu:expr, $($arg:tt)*) => {
        <<$env as $crate::virtio::slot::VmEnv>::Board as $crate::board::Board>::print(format_args!(
            "hypervisor: vm{} {} vcpu{}: {}",
            $vm.id,
            $vm.spec.name,
            $vcpu,
            format_args!($($arg)*)
        ))
    };
}

impl<E: VmEnv> Vm<E> {
    /// Builds the VM its manifest entry describes, with the resources its capabilities
    /// grant; its vCPUs wake through `scheduling`.
    pub fn create(build: VmBuild<'_>, scheduling: &'static Scheduling<E::Arch>) -> Result<Self, VmError> {
        let VmBuild { id, spec, granted, gic_v3, passthrough, seeds, disk_vms } = build;
        let ram = granted.ram;
        if ram.size < spec.memory {
            return Err(VmError::RamMismatch);
        }
        let initrd_len = spec.initrd.map(|i| i.len() as u64);
        let layout = guest_layout::layout(spec.memory, spec.kernel, initrd_len, 0).map_err(VmError::Layout)?;
        let device_tree = guest_device_tree(&spec, &layout, gic_v3, passthrough, seeds)?;
        let version = if gic_v3 { GicVersion::V3 } else { GicVersion::V2 };
        let passthrough_spis: Vec<PassthroughSpi> = passthrough.iter().flat_map(|d| d.spis.iter().copied()).collect();
        // Enough SPIs for the board's INTIDs it is given (the guest sees them unchanged).
        let spis = passthrough_spis.iter().map(|s| s.intid as usize - 31).fold(SPIS, usize::max);
        // A GICv3 VM's PCI functions send their MSIs to its ITS, which needs LPIs.
        let its = gic_v3 && spec.devices.transport == VirtioTransport::Pci;
        let lpis = if its { vgic::MAX_LPIS } else { 0 };
        let vgic_config = VgicConfig { version, vcpus: spec.vcpus as usize, spis, lpis };
        let mut distributor = Distributor::new(vgic_config).map_err(VmError::Vgic)?;
        map_passthrough_spis(&mut distributor, &passthrough_spis).map_err(VmError::Vgic)?;
        let vgic: SharedVgic<E::Arch> = Arc::new(VgicHandle::new(id, distributor, scheduling));
        // Its LPIs injected by the board's GICv4.0 where there is one (crate::direct_lpis).
        let say = |what: fmt::Arguments<'_>| E::Board::print(format_args!("hypervisor: vm{id} {}: {what}", spec.name));
        match vgic.inject_lpis_directly(<E::Arch as crate::arch::Arch>::current_cpu()) {
            Ok(Some(d)) => say(format_args!("its LPIs are injected by the board's GICv4.0 (vPEs of slot {})", d.slot)),
            Ok(None) => {}
            Err(e) => say(format_args!("its LPIs stay with its vGIC: {e}")),
        }
        let console_choice = ConsoleChoice::default();
        let uart_out = TrackedConsole::new(E::Board::vm_console(id, spec.name), &console_choice, false);
        let uart_line = E::interrupt_line(&vgic, IntId(32 + hyp_core::guest_map::UART_SPI));
        let uart = SharedUart::new(Box::new(uart_out), Box::new(uart_line), E::window_shadow(granted.vm_cap, UART_IPA));
        let guest_log = Arc::new(GuestLogLimit::new());
        let device_work = Arc::new(AtomicBool::new(false));
        // An identity-mapped VM's RAM is mapped whole and zeroed before it starts: its
        // device may DMA into memory its CPUs never touched.
        let identity = spec.identity_mapped.is_some();
        let first_touch =
            Arc::new(FirstTouch::new(granted.vm_cap, spec.ram_ipa(), spec.memory, identity, E::zero_on_first_touch));
        let setup = devices::Setup {
            id,
            spec: &spec,
            ram,
            vgic: &vgic,
            console_choice: &console_choice,
            first_touch: &first_touch,
            disk_vms,
            shadow: E::window_shadow(granted.vm_cap, VIRTIO_IPA),
        };
        let mut virtio = VirtioDevices::create(setup, (&guest_log, &device_work))?;
        let mut bus = MmioBus::new();
        let window = |base, size| IpaRange::new(Ipa(base), size).map_err(|e| VmError::Capability(CapError::Stage2(e)));
        // These windows are the ones the capability space granted; they cannot overlap.
        let _ = bus.attach(window(UART_IPA, UART_SIZE)?, Box::new(uart.clone()));
        virtio.attach(&mut bus)?;
        // An identity-mapped VM's RAM is at its physical address, any other's at RAM_IPA.
        let ram_ipa = spec.ram_ipa();
        let power =
            VmPower::new(spec.vcpus as usize, ram_ipa, spec.memory, ram_ipa + layout.kernel, ram_ipa + layout.dtb);
        // Its CPU_ON entry points may be T32 ones (`trap::aarch32::start_state`).
        let power = if layout.state == ExecutionState::Aarch32 { power.aarch32() } else { power };
        let vm = Vm {
            id,
            spec,
            cap: granted.vm_cap,
            ram,
            gic_ram: E::guest_ram(ram_ipa, ram.base, spec.memory, Arc::clone(&first_touch)),
            first_touch,
            layout,
            device_tree: Mutex::new(device_tree),
            guest_log,
            device_work,
            exits: (0..spec.vcpus).map(|_| ExitCounts::default()).collect(),
            bus,
            vgic,
            vgic_config,
            uart,
            virtio,
            console_choice,
            power: Mutex::new(power),
            ending: AtomicBool::new(false),
            gic_v3,
            stage2_ipa_bits: granted.ipa_bits,
            passthrough_spis,
            scheduling,
            stage1: Stage1Contexts::new(),
        };
        E::Board::print(format_args!(
            "hypervisor: vm{id} {}: {} MiB RAM at IPA {ram_ipa:#x} (PA {:#x}{}), {} vCPU(s), stage-2 tables in {} frame(s)",
            spec.name,
            spec.memory >> 20,
            ram.base,
            if spec.identity_mapped.is_some() { ", identity-mapped" } else { "" },
            spec.vcpus,
            granted.table_frames
        ));
        for device in passthrough {
            E::Board::print(format_args!(
                "hypervisor: vm{id} {}: passthrough {}: {} mapped at IPA {:#x} (Device-nGnRE, not executable), SPI(s) [{}] granted",
                spec.name,
                device.name,
                device.reg,
                device.reg.base,
                spi_list(&device.spis)
            ));
        }
        Ok(vm)
    }

    /// The execution state its kernel runs in (its vCPUs start in).
    pub fn execution_state(&self) -> ExecutionState {
        self.layout.state
    }

    /// What goes into the VM's RAM before it starts: the kernel, the initrd and the device
    /// tree, each at its offset (`place` copies it there; `guest_layout` checked that each
    /// fits in RAM without overlapping another).
    pub fn load(&self, mut place: impl FnMut(u64, &[u8])) {
        place(self.layout.kernel, self.spec.kernel);
        if let (Some((offset, _)), Some(initrd)) = (self.layout.initrd, self.spec.initrd) {
            place(offset, initrd);
        }
        place(self.layout.dtb, &self.device_tree.lock());
    }

    /// After a SYSTEM_RESET has stopped every vCPU: the interrupt controller, UART and
    /// virtio devices as at power-on, `seeds` in its device tree (a reboot must not repeat
    /// the random seeds of the last boot), what the CPUs' TLBs hold of the last boot no
    /// vCPU's (each CPU that ran it invalidates at its next entry), vCPU 0 to start again. The caller quiets the
    /// passthrough SPIs before and loads the RAM again after.
    pub fn reset(&self, seeds: Option<GuestSeeds>) {
        if let Some(seeds) = seeds {
            if let Err(e) = guest_fdt::reseed(&mut self.device_tree.lock(), seeds) {
                self.log_caused(
                    0,
                    format_args!(
                        "SYSTEM_RESET: the random seeds cannot be replaced ({e}); it boots with the last ones"
                    ),
                );
            }
        }
        if let Ok(mut fresh) = Distributor::new(self.vgic_config) {
            let _ = map_passthrough_spis(&mut fresh, &self.passthrough_spis);
            self.vgic.replace_distributor(fresh);
        }
        // Every vCPU put its list registers back when it left its CPU; nothing is left of
        // the last boot's.
        for lists in &self.vgic.lists {
            *lists.lock() = vgic::VcpuInterfaceState::EMPTY;
        }
        self.uart.reset();
        self.virtio.reset();
        let ram_ipa = self.spec.ram_ipa();
        self.power.lock().reset(ram_ipa + self.layout.kernel, ram_ipa + self.layout.dtb);
        self.stage1.forget();
        self.ending.store(false, Ordering::Release);
        self.log_caused(0, format_args!("SYSTEM_RESET: the VM reboots"));
    }

    pub fn count_exit(&self, vcpu: usize, reason: ExitReason) {
        if let Some(counts) = self.exits.get(vcpu) {
            counts.record(reason);
        }
    }

    /// Exits of all its vCPUs, by reason.
    pub fn exit_counts(&self) -> ExitCounts {
        let total = ExitCounts::default();
        self.exits.iter().for_each(|c| total.add(c));
        total
    }

    /// Bytes the user typed for this VM: they go to the console the guest wrote to last,
    /// and wait there for the guest to read them.
    pub fn console_input(&self, bytes: &[u8]) {
        if self.console_choice.virtio_is_active() {
            let taken = self.virtio.console.with_device(|console, ram| console.receive_input(ram, bytes)).unwrap_or(0);
            if taken < bytes.len() {
                crate::vm_log!(
                    E,
                    self,
                    0,
                    "console input: {} byte(s) dropped, the guest is not reading hvc0",
                    bytes.len() - taken
                );
            }
            return;
        }
        let dropped = self.uart.receive(bytes);
        if dropped > 0 {
            crate::vm_log!(E, self, 0, "console input: {dropped} byte(s) dropped, the guest is not reading its UART");
        }
    }

    /// The VM's NIC, if its manifest gives it one.
    pub fn nic(&self) -> Option<Arc<VirtioSlot<VirtioNet<SwitchPort>, E>>> {
        self.virtio.nic.clone()
    }

    /// Asks the whole VM to end: every vCPU but `vcpu` is kicked out of the guest (or woken,
    /// if it waits for an interrupt) and stops at its next exit. Returns how many vCPUs run.
    pub fn end(&self, vcpu: usize, reason: EndReason) -> usize {
        let running = self.power.lock().request_end(reason);
        self.ending.store(true, Ordering::Release);
        self.vgic.kick(running.iter().filter(|v| **v != vcpu).fold(0, |mask, v| mask | 1 << v));
        running.len()
    }

    /// From outside the VM (the management console): the VM ends for `reason`, at once if
    /// no vCPU runs, else when its last vCPU has stopped. Returns whether it ended at once.
    pub fn request_end(&self, reason: EndReason) -> bool {
        self.end(usize::MAX, reason) == 0
    }

    /// vCPU `vcpu` left its CPU for good (CPU_OFF, or on the way out of an ending VM): the
    /// scheduler forgets it. Returns the VM's end when it was the last vCPU running.
    pub fn vcpu_stopped(&self, vcpu: usize) -> Option<EndReason> {
        if let Err(e) = self.scheduling.stop(vcpu_ref(self.id, vcpu)) {
            crate::vm_log!(E, self, vcpu, "the scheduler does not know this vCPU: {e}");
        }
        self.power.lock().stopped(vcpu)
    }

    /// Whether the VM is ending (its vCPUs stop at their next exit).
    pub fn is_ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }

    /// The flag `is_ending` reads, for an image's exception vector that checks it as the
    /// run loop does (`vcpu_run::VectorKick`).
    pub fn ending_flag(&self) -> &AtomicBool {
        &self.ending
    }

    /// Work its virtio devices left for later, a bounded step of it. Out of line: the run
    /// loop reaches it only when a device left work, and inlined, the devices' access paths
    /// took registers from the loop's exit paths (docs/performance.md, "Where the targets
    /// stand").
    #[inline(never)]
    pub fn continue_device_work(&self) {
        self.virtio.continue_work();
    }

    /// From here on no device of the VM touches its RAM: before its memory is revoked (and
    /// after its disk's requests in flight have completed: `Hypervisor::drain_disk`).
    pub fn shut_down_devices(&self) {
        self.virtio.shut_down();
        self.uart.forget_shadow();
    }

    /// From now on the side core `core` on CPU `cpu` serves its disk and NIC
    /// (`VirtioDevices::serve_from`): the devices to add to the core's list.
    pub fn serve_from(
        &self,
        core: &'static crate::io_core::IoCore,
        cpu: usize,
    ) -> Vec<Arc<dyn crate::io_core::Polled>> {
        self.virtio.serve_from(core, cpu)
    }

    /// The board's disk finished a request of the VM's disk.
    pub fn disk_completed(&self, completion: crate::board::DiskCompletion) {
        self.virtio.disk_completed(completion);
    }

    /// Requests of the VM's disk in flight on the board's disk: until this is 0 the disk
    /// may write the VM's RAM.
    pub fn disk_in_flight(&self) -> usize {
        self.virtio.disk_in_flight()
    }

    /// Requests of its disk that waited for room on the board's disk are taken now.
    pub fn retry_disk(&self) {
        self.virtio.retry_disk();
    }

    /// Before a reboot: its disk device reset, so nothing new starts and what is in flight
    /// finishes nothing for the guest.
    pub fn reset_disk(&self) {
        self.virtio.reset_disk();
    }

    /// A physical passthrough SPI fired (its priority dropped, still active): it becomes
    /// pending in the vGIC, hardware-mapped, for the vCPU the guest routed it to.
    pub fn passthrough_interrupt(&self, intid: u32) {
        let edge = self.passthrough_spis.iter().find(|s| s.intid == intid).is_none_or(|s| s.edge());
        let targets = {
            let mut vgic = self.vgic.lock();
            // A level SPI's pending state follows its line from now on (its physical
            // interrupt is held active, the line sampled at each exit).
            let _ = if edge { vgic.inject_edge(IntId(intid), 0) } else { vgic.set_level(IntId(intid), 0, true) };
            vgic.take_kicks().0 as u32
        };
        self.vgic.hint(targets);
        self.vgic.kick(targets);
    }

    /// A PSCI or VM call of vCPU `vcpu` (hyp_core::smccc decoded it): what it changes of
    /// the VM's power state, and what the vCPU does next. CPU_ON starts the target through
    /// the scheduler; a vCPU the scheduler cannot start is powered off again.
    pub fn call(&self, vcpu: usize, call: Hypercall) -> CallEffect {
        match call {
            Hypercall::SystemOff => {
                crate::vm_log!(E, self, vcpu, "PSCI SYSTEM_OFF: the VM powers off");
                CallEffect::End(EndReason::PoweredOff)
            }
            Hypercall::SystemReset => CallEffect::End(EndReason::Reset),
            Hypercall::VmExit { status } => {
                crate::vm_log!(E, self, vcpu, "HYP_VM_EXIT with status {status}");
                CallEffect::End(EndReason::Exited(status))
            }
            Hypercall::CpuOff => CallEffect::Stop,
            Hypercall::CpuOn { target_mpidr, entry, context } => {
                let start = self.power.lock().cpu_on(target_mpidr, entry, context);
                CallEffect::Resume(Some(match start {
                    Err(status) => status,
                    Ok(start) => match self.scheduling.start(vcpu_ref(self.id, start.vcpu)) {
                        Ok(()) => psci_status::SUCCESS,
                        Err(e) => {
                            self.power.lock().stopped(start.vcpu);
                            self.log_caused(vcpu, format_args!("PSCI CPU_ON of vCPU {}: {e}", start.vcpu));
                            psci_status::INTERNAL_FAILURE
                        }
                    },
                }))
            }
            Hypercall::AffinityInfo { target_mpidr, lowest_level } => {
                CallEffect::Resume(Some(self.power.lock().affinity_info(target_mpidr, lowest_level)))
            }
            Hypercall::CpuSuspend => CallEffect::Resume(Some(psci_status::SUCCESS)),
            Hypercall::Return(_) | Hypercall::Unknown { .. } => CallEffect::Resume(None),
        }
    }

    /// Logs a mistake of the guest, within its VM's limit (hyp_core::log_limit). Written out
    /// rather than through `log_caused`: the exit paths inline it, and through the other
    /// their code moved (ARMv7's `virtio-read` 343 -> 351, docs/performance.md, "ARMv7").
    pub fn log_incident(&self, vcpu: usize, incident: Incident) {
        crate::guest_log::guest_line::<E::Arch, E::Board>(
            &self.guest_log,
            format_args!("hypervisor: vm{} {} vcpu{}: {incident}", self.id, self.spec.name, vcpu),
        );
    }

    /// Logs what the guest's own request caused (a reboot, vCPU 0 started again by it, a
    /// CPU_ON that failed), within its VM's limit as its mistakes are: a guest that reboots
    /// in a loop must not flood the console every VM's output shares
    /// (docs/hostile-guests.md).
    pub fn log_caused(&self, vcpu: usize, line: core::fmt::Arguments<'_>) {
        crate::guest_log::guest_line::<E::Arch, E::Board>(
            &self.guest_log,
            format_args!("hypervisor: vm{} {} vcpu{}: {line}", self.id, self.spec.name, vcpu),
        );
    }

    /// Where the vCPUs' trapped MMIO accesses go.
    pub fn mmio(&self) -> GuestMmio<'_, E> {
        GuestMmio::new(self)
    }
}

/// The guest's device tree: the one its manifest entry gives, with /chosen set, or one
/// generated for the guest's view (docs/architecture.md, "The guest's view").
fn guest_device_tree(
    spec: &VmSpec<'static>,
    layout: &GuestLayout,
    gic_v3: bool,
    passthrough: &[PassthroughDevice],
    seeds: Option<GuestSeeds>,
) -> Result<Vec<u8>, VmError> {
    let gic = if gic_v3 {
        GuestGic::V3 { distributor: GICD_IPA, redistributors: GICR_IPA }
    } else {
        GuestGic::V2 { distributor: GICD_IPA, cpu_interface: GICC_IPA }
    };
    let bootargs = spec.command_line();
    let ram_ipa = spec.ram_ipa();
    let initrd = layout.initrd.map(|(offset, len)| (ram_ipa + offset, ram_ipa + offset + len));
    let device_tree = match spec.device_tree {
        Some(given) => guest_fdt::with_chosen(given, bootargs, initrd, seeds),
        None => guest_fdt::build(&GuestPlatform {
            vcpus: spec.vcpus,
            ram_base: ram_ipa,
            ram_size: spec.memory,
            gic,
            uart_base: UART_IPA,
            uart_spi: hyp_core::guest_map::UART_SPI,
            virtio_mmio: match spec.devices.transport {
                VirtioTransport::Mmio => Slot::of(&spec.devices).map(|s| (s.ipa(), s.spi())).collect(),
                VirtioTransport::Pci => Vec::new(),
            },
            pci: (spec.devices.transport == VirtioTransport::Pci).then_some(GuestPci {
                ecam: PCI_ECAM_IPA,
                ecam_size: PCI_ECAM_SIZE,
                mmio: PCI_MMIO_IPA,
                mmio_size: PCI_MMIO_SIZE,
                mbi_first_intid: MBI_FIRST_INTID,
                mbi_count: MBI_COUNT,
                v2m: (!gic_v3).then_some(GICV2M_IPA),
                its: gic_v3.then_some(ITS_IPA),
            }),
            bootargs: bootargs.into(),
            initrd,
            passthrough: passthrough.iter().map(PassthroughDevice::guest_node).collect(),
            seeds,
        }),
    }
    .map_err(VmError::DeviceTree)?;
    if device_tree.len() as u64 > guest_layout::MAX_DTB {
        return Err(VmError::Layout(LayoutError::DeviceTreeTooBig { size: device_tree.len() as u64 }));
    }
    Ok(device_tree)
}

/// Each passthrough SPI as the VM's virtual SPI of the same INTID, hardware-mapped to the
/// physical one (the guest's deactivation deactivates it).
fn map_passthrough_spis(vgic: &mut Distributor, spis: &[PassthroughSpi]) -> Result<(), vgic::VgicError> {
    for spi in spis {
        vgic.set_hw(IntId(spi.intid), 0, Some(IntId(spi.intid)))?;
    }
    Ok(())
}
