//! VMs at run time on AArch64: building one from its manifest entry (stage 2, emulated
//! devices, the kernel loaded per the arm64 boot protocol), and running a vCPU on this CPU.

use alloc::boxed::Box;
use core::arch::asm;
use core::sync::atomic::Ordering;

use hyp_core::cap::{CapError, CapSpace};
use hyp_core::debug_registers::{DebugGeometry, DebugRegisters};
use hyp_core::entropy::GuestSeeds;
use hyp_core::exit::{self, GuestContext, Incident, InjectedException, Outcome, SyncExit, SysRegEnv};
use hyp_core::exit_stats::{ExitCounts, ExitReason};
use hyp_core::guest_map::VTIMER_PPI;
use hyp_core::set_way::{CacheStep, CacheTrap, SetWayState};
use hyp_core::smccc::Hypercall;
use hyp_core::syndrome::{ExceptionClass, Syndrome};
use hyp_core::sysreg::{Encoding, IdRegisters, SgiGenerationRegister, VmControlRegister, VmFeatures};
use hyp_core::vcpu_power::EndReason;
use spin::Mutex;

use crate::arch::{Aarch64, HYPERVISOR};
use crate::exceptions::{run_guest, sysreg, EXIT_FIQ, EXIT_IRQ, EXIT_SERROR, EXIT_SYNC};
use crate::list_registers::ListRegisterFile;
use crate::memory::{copy_fast, make_visible_to_guest, zero_for_guest, HeapTableMemory, Stage2Tlb};
use crate::vcpu_state::{self, SavedVcpu};
use crate::vdev::Devices;
use hyp_runtime::hypervisor::VcpuExit;
use hyp_runtime::interrupts::Route;
use hyp_runtime::scheduling::vcpu_ref;
use hyp_runtime::scheduling::Scheduling;
use hyp_runtime::vm::{CallEffect, Vm as VmCore, VmBuild, VmError};
use hyp_runtime::vm_resources::revoke_all;
use hyp_runtime::Arch;
use sched::Decision;
use vgic::{Distributor, IntId, RetiredLines, SgiRegister};

/// PSTATE at a guest's first instruction: EL1h, D, A, I, F masked (booting.rst).
const PSTATE_EL1H_MASKED: u64 = 0x3c5;
/// MDCR_EL2 traps (ARM ARM D24.2.x, MDCR_EL2): TPMCR [5] and TPM [6], PMU accesses; TDA [9],
/// TDOSA [10] and TDRA [11], debug register accesses.
const MDCR_TPMCR: u64 = 1 << 5;
const MDCR_TPM: u64 = 1 << 6;
const MDCR_TDA: u64 = 1 << 9;
const MDCR_TDOSA: u64 = 1 << 10;
const MDCR_TDRA: u64 = 1 << 11;
/// HCR_EL2.TWI and TWE: WFI and WFE trap (vCPUs that share a CPU: a vCPU waiting for an
/// interrupt or for a spinlock's holder gives its CPU to the others, which include that
/// holder if it shares the CPU).
const HCR_TWI: u64 = 1 << 13;
const HCR_TWE: u64 = 1 << 14;
/// HCR_EL2.TVM: writes to the VM control registers trap (while set/way maintenance is
/// watched: hyp_core::set_way).
const HCR_TVM: u64 = 1 << 26;
/// HCR_EL2 for a guest (ARM ARM D24.2.48): VM (stage 2), SWIO, FMO/IMO/AMO (physical
/// interrupts and SErrors to EL2), FB and BSU = inner shareable (broadcast maintenance), TSC
/// (trap SMC), TIDCP (trap IMPLEMENTATION DEFINED registers), TACR (trap ACTLR), TSW (trap
/// set/way cache maintenance), TID3 (trap ID group 3 reads, which are sanitised: sysreg.rs),
/// RW (EL1 is AArch64).
const HCR_GUEST: u64 = (1 << 0)
    | (1 << 1)
    | (1 << 3)
    | (1 << 4)
    | (1 << 5)
    | (1 << 9)
    | (1 << 10)
    | (1 << 18)
    | (1 << 19)
    | (1 << 20)
    | (1 << 21)
    | (1 << 22)
    | (1 << 31);

/// A descheduled vCPU: its general registers and what it left in the CPU.
struct Resume {
    ctx: GuestContext,
    state: SavedVcpu,
    last_unknown: Option<u32>,
}

/// A VM as this image runs it: the runtime's VM, with its stage-2 registers, its counter
/// offset and the saved state of each descheduled vCPU.
pub struct Vm {
    core: VmCore<Devices>,
    /// The saved state of each descheduled vCPU.
    saved: Box<[Mutex<Option<Box<Resume>>>]>,
    /// CNTVOFF_EL2: the physical count when the VM was created, so its virtual counter
    /// starts at zero.
    cntvoff: u64,
    /// VTTBR_EL2 and VTCR_EL2 of the VM's stage-2 tables (which the capability space owns).
    vttbr: u64,
    vtcr: u64,
}

impl core::borrow::Borrow<VmCore<Devices>> for Vm {
    fn borrow(&self) -> &VmCore<Devices> {
        &self.core
    }
}

impl core::ops::Deref for Vm {
    type Target = VmCore<Devices>;
    fn deref(&self) -> &VmCore<Devices> {
        &self.core
    }
}

/// A line about vCPU `vcpu` of VM `vm` (hyp_runtime::vm_log).
macro_rules! vm_log {
    ($vm:expr, $vcpu:expr, $($arg:tt)*) => {
        hyp_runtime::vm_log!(Devices, $vm, $vcpu, $($arg)*)
    };
}

impl Vm {
    /// Builds the VM `spec` describes, with the resources its capabilities grant; its
    /// passthrough SPIs are configured as the board says and left off, nothing pending or
    /// active, until it runs.
    pub fn create(build: VmBuild<'_>, scheduling: &'static Scheduling<Aarch64>) -> Result<Vm, VmError> {
        let (id, spec, vttbr, vtcr) = (build.id, build.spec, build.granted.vttbr, build.granted.vtcr);
        let core = VmCore::create(build, scheduling)?;
        let vm = Vm {
            saved: (0..spec.vcpus).map(|_| Mutex::new(None)).collect(),
            cntvoff: sysreg!("cntpct_el0"),
            vttbr,
            vtcr,
            core,
        };
        println!("hypervisor: vm{id} {}: its virtual counter starts at physical count {}", spec.name, vm.cntvoff);
        for spi in &vm.passthrough_spis {
            crate::gic::disable_spi(spi.intid);
            crate::gic::clear_spi(spi.intid);
            crate::gic::configure_spi(spi.intid, spi.edge());
            HYPERVISOR.spi_owners.claim(spi.intid, id);
        }
        Ok(vm)
    }

    /// Zeroes the VM's RAM (no data of an earlier VM leaks) and loads the kernel, initrd and
    /// device tree, all cleaned to the point of coherency (booting.rst: the guest starts with
    /// its MMU off).
    pub fn load(&self) {
        zero_for_guest(self.ram.base, self.spec.memory);
        // SAFETY: `ram` belongs to this VM alone, is identity-mapped Normal memory at EL2, and
        // no vCPU of this VM runs while it is loaded.
        let ram = unsafe { core::slice::from_raw_parts_mut(self.ram.base as *mut u8, self.spec.memory as usize) };
        let base = self.ram.base;
        self.core.load(|offset, bytes| {
            let at = offset as usize;
            copy_fast(&mut ram[at..at + bytes.len()], bytes);
            make_visible_to_guest(base + offset, bytes.len() as u64);
        });
    }

    /// After a SYSTEM_RESET has stopped every vCPU: its passthrough SPIs off (and not left
    /// active) until vCPU 0 starts again, the VM as at power-on (hyp_runtime::vm), no vCPU
    /// state kept, the kernel reloaded.
    pub fn reset(&self, seeds: Option<GuestSeeds>) {
        for spi in &self.passthrough_spis {
            crate::gic::disable_spi(spi.intid);
            crate::gic::clear_spi(spi.intid);
        }
        self.core.reset(seeds);
        self.saved.iter().for_each(|s| *s.lock() = None);
        self.load();
    }

    /// Physical interrupts that brought the guest out: the virtual timer's becomes the
    /// vCPU's (hardware-mapped, left active until the guest deactivates it); the kick SGIs
    /// and the maintenance interrupt only make the exit path look again.
    fn physical_interrupts(&self, vcpu: usize) {
        loop {
            let iar = crate::gic::acknowledge();
            let intid = crate::gic::interrupt_id(iar);
            if intid >= crate::gic::SPURIOUS {
                break;
            }
            // The most frequent first, before the table: another CPU made this vCPU look
            // (an IPI, an I/O completion).
            let route = if intid == crate::gic::SGI_KICK { Route::Kick } else { HYPERVISOR.routes.of(intid) };
            match route {
                Route::Kick => {
                    self.count_exit(vcpu, ExitReason::Kick);
                    crate::gic::end_of_interrupt(iar);
                }
                Route::Passthrough if crate::passthrough::forward(intid, iar) => {
                    self.count_exit(vcpu, ExitReason::OtherInterrupt);
                }
                Route::VirtualTimer => {
                    self.count_exit(vcpu, ExitReason::TimerInterrupt);
                    crate::gic::priority_drop(iar);
                    let _ = self.vgic.vgic.lock().set_level(IntId(VTIMER_PPI), vcpu, true);
                }
                Route::ConsoleInput => {
                    self.count_exit(vcpu, ExitReason::ConsoleInput);
                    HYPERVISOR.console_interrupt();
                    crate::gic::end_of_interrupt(iar);
                }
                Route::Uplink => {
                    self.count_exit(vcpu, ExitReason::OtherInterrupt);
                    HYPERVISOR.uplink_interrupt();
                    crate::gic::end_of_interrupt(iar);
                }
                Route::HypTimer => {
                    self.count_exit(vcpu, ExitReason::SliceEnd);
                    HYPERVISOR.scheduling.timer_fired(crate::cpus::current_index(), |v| HYPERVISOR.wake_waiting(v));
                    HYPERVISOR.scheduling.request_reschedule(crate::cpus::current_index());
                    crate::gic::end_of_interrupt(iar);
                }
                Route::Maintenance => {
                    self.count_exit(vcpu, ExitReason::Maintenance);
                    crate::gic::end_of_interrupt(iar);
                }
                Route::Passthrough | Route::Unrouted => {
                    self.count_exit(vcpu, ExitReason::OtherInterrupt);
                    crate::gic::end_of_interrupt(iar);
                }
            }
            self.vgic.hint(1 << vcpu);
        }
    }

    /// Its passthrough SPIs are routed to this CPU (`cpu`, where vCPU `vcpu` starts) at the
    /// hypervisor's priority and enabled. Guest routing (GICD_IROUTER, GICD_ITARGETSR) moves
    /// only the virtual SPI: the physical one keeps coming here and is forwarded (a kick)
    /// to whichever vCPU the guest chose.
    fn route_passthrough(&self, vcpu: usize, cpu: usize) {
        for spi in &self.passthrough_spis {
            crate::gic::enable_spi(spi.intid, cpu, crate::cpus::mpidr_of(cpu));
            vm_log!(
                self,
                vcpu,
                "passthrough SPI INTID {} ({}) routed to cpu{cpu} and enabled",
                spi.intid,
                if spi.edge() { "edge" } else { "level" }
            );
        }
    }

    /// Before the VM's capabilities are revoked: each passthrough SPI stops being forwarded,
    /// is disabled (GICD_ICENABLER, waiting for RWP) and has its pending and active states
    /// cleared (a guest that stopped before deactivating it leaves it active).
    pub fn release_passthrough(&self) {
        for spi in &self.passthrough_spis {
            crate::gic::disable_spi(spi.intid);
            HYPERVISOR.spi_owners.release(spi.intid);
            crate::gic::clear_spi(spi.intid);
            println!(
                "hypervisor: vm{} {}: passthrough SPI INTID {} disabled and deactivated (enabled: {})",
                self.id,
                self.spec.name,
                spi.intid,
                crate::gic::spi_enabled(spi.intid)
            );
        }
    }

    /// Destroys the ended VM through its capability (hyp_runtime::vm_resources::revoke_all),
    /// its passthrough SPIs quiet first.
    pub fn destroy(&self, caps: &mut CapSpace) -> Result<(), CapError> {
        self.release_passthrough();
        revoke_all(caps, &mut HeapTableMemory, &mut Stage2Tlb { vttbr: self.vttbr }, self.cap)
    }

    /// This vCPU leaves the CPU to another one: its state goes into the VM (the timer is
    /// stopped before the timer PPI's active state is cleared, so the PPI does not fire for
    /// the next vCPU), its list registers into the vGIC.
    fn deschedule(&self, vcpu: usize, here: &mut OnCpu, resume: Resume) -> VcpuExit {
        let state = SavedVcpu { set_way: here.set_way, ..vcpu_state::save(here.lrs, here.debug) };
        self.leave_cpu(vcpu, here, Some(Box::new(Resume { state, ..resume })));
        VcpuExit::Descheduled
    }

    /// The vCPU's list registers go back into the vGIC, a timer interrupt it left active is
    /// deactivated (or the timer could not fire again on this CPU), the CPU leaves the VM's
    /// translation regime; `saved` is what the vCPU resumes from, if it does.
    fn leave_cpu(&self, vcpu: usize, here: &mut OnCpu, saved: Option<Box<Resume>>) {
        let _ = self.vgic.vgic.lock().put(vcpu, &mut here.lrs);
        if here.debug_loaded {
            crate::debug_hw::clear(here.geometry);
            here.debug_loaded = false;
        }
        if let Some(slot) = self.saved.get(vcpu) {
            *slot.lock() = saved;
        }
        crate::gic::clear_active_private(VTIMER_PPI, crate::cpus::current_index());
        leave_guest_regime();
        self.vgic.running_on[vcpu].store(usize::MAX, Ordering::Release);
    }

    /// A trapped WFI of a vCPU that shares its CPU: unless an interrupt is pending for it,
    /// it waits off the CPU, woken by an interrupt or by its virtual timer.
    fn wait_for_interrupt(&self, vcpu: usize, here: &mut OnCpu, resume: Resume) -> Option<VcpuExit> {
        let v = vcpu_ref(self.id, vcpu);
        let timer =
            (sysreg!("cntv_ctl_el0") & 0b11 == 0b01).then(|| sysreg!("cntv_cval_el0").wrapping_add(self.cntvoff));
        if timer.is_some_and(|deadline| deadline <= Aarch64::now()) {
            return None;
        }
        let waiting = &self.vgic.waiting[vcpu];
        if !HYPERVISOR.scheduling.block(v, waiting, || self.vgic.vgic.lock().has_pending(vcpu)) {
            return None;
        }
        if let Some(deadline) = timer {
            HYPERVISOR.scheduling.wake_at(crate::cpus::current_index(), v, deadline);
        }
        Some(self.deschedule(vcpu, here, resume))
    }

    /// After an exit of a vCPU holding list registers: their state goes back into the vGIC,
    /// and a hardware-mapped level interrupt still pending there whose input went low is
    /// retired (its physical interrupt deactivated here). Returns whether anything changed.
    fn take_back_list_registers(&self, vcpu: usize, cpu: usize, here: &mut OnCpu) -> bool {
        let mut retired = RetiredLines::default();
        let changed = self
            .vgic
            .vgic
            .lock()
            .sync_from_hw_sampling(vcpu, &mut here.lrs, &mut HwLines, &mut retired)
            .unwrap_or(true);
        for physical in retired.iter() {
            if physical.is_private() {
                crate::gic::clear_active_private(physical.0, cpu);
            } else {
                crate::gic::deactivate_spi(physical.0);
            }
        }
        changed
    }

    /// When the vCPU comes onto this CPU (its timer registers restored): the timer's line as
    /// it is now goes into the vGIC (a stale level from before it left is dropped), and the
    /// physical PPI is held active while the virtual one is active or pending, so it does
    /// not fire at EL2 while the guest has it (the guest's deactivation reaches it).
    fn load_timer_line(&self, vcpu: usize, cpu: usize) {
        let line = timer_line();
        let active = {
            let mut vgic = self.vgic.vgic.lock();
            let _ = vgic.set_level(IntId(VTIMER_PPI), vcpu, line);
            vgic.interrupt(vcpu, IntId(VTIMER_PPI)).is_ok_and(|s| s.active)
        };
        crate::gic::set_active_private(VTIMER_PPI, cpu, active || line);
        if line {
            self.vgic.hint(1 << vcpu);
        }
    }

    /// A trapped set/way instruction or VM control register write (hyp_core::set_way): a
    /// part of the VM's RAM cleaned, and the instruction completed if that was the last or
    /// none was needed (`write` applied first). Otherwise the PC stays, and the guest traps
    /// again at the same instruction after any interrupt due now has been taken.
    fn set_way(
        &self,
        ctx: &mut GuestContext,
        syndrome: Syndrome,
        here: &mut OnCpu,
        trap: CacheTrap,
        write: Option<(VmControlRegister, u64)>,
    ) {
        let trapping = here.set_way.trapping_controls();
        match here.set_way.on_trap(trap, ctx.pc, self.spec.memory) {
            CacheStep::CleanPart { offset, len, last } => {
                crate::mmu::clean_invalidate_dcache_range(self.ram.base + offset, self.ram.base + offset + len);
                if !last {
                    return;
                }
            }
            CacheStep::Complete => {}
        }
        if let Some((register, value)) = write {
            vcpu_state::write_control_register(register, value);
        }
        ctx.skip_instruction(syndrome);
        if here.set_way.trapping_controls() != trapping {
            write_hcr(here.hcr());
        }
    }

    /// This vCPU stops for good (`leave_cpu`, with nothing to resume from); the scheduler
    /// and the VM's power state learn it.
    fn stop(&self, vcpu: usize, here: &mut OnCpu) -> VcpuExit {
        self.leave_cpu(vcpu, here, None);
        self.vcpu_stopped(vcpu).map_or(VcpuExit::Stopped, VcpuExit::VmEnded)
    }

    /// The EL2 state of this vCPU on this CPU: its VM's stage 2, traps (`hcr`: `OnCpu::hcr`),
    /// identity, timer offset.
    fn enter_el2_state(&self, vcpu: usize, hcr: u64) {
        let mdcr_hpmn = (sysreg!("pmcr_el0") >> 11) & 0x1f;
        let midr = sysreg!("midr_el1");
        // SAFETY: configures this CPU's EL2 state for this VM's vCPU; the stage-2 tables at
        // VTTBR_EL2 map only this VM's memory.
        unsafe {
            asm!(
                "msr vtcr_el2, {vtcr}",
                "msr vttbr_el2, {vttbr}",
                "msr hcr_el2, {hcr}",
                "msr vmpidr_el2, {vmpidr}",
                "msr vpidr_el2, {midr}",
                "msr cnthctl_el2, {cnthctl}",
                "msr cntvoff_el2, {cntvoff}",
                "msr mdcr_el2, {mdcr}",
                "isb",
                "tlbi vmalls12e1",
                "dsb nsh",
                "isb",
                vtcr = in(reg) self.vtcr,
                vttbr = in(reg) self.vttbr,
                hcr = in(reg) hcr,
                vmpidr = in(reg) (1u64 << 31) | Distributor::vcpu_affinity(vcpu),
                midr = in(reg) midr,
                // EL1PCTEN: the guest may read the physical counter. EL1PCEN clear: the EL1
                // physical timer is refused (its accesses are undefined instructions): its
                // interrupt is not routed to guests, who use the virtual timer.
                cnthctl = in(reg) 0b01u64,
                cntvoff = in(reg) self.cntvoff,
                // TPM, TPMCR: the PMU is not offered to guests (accesses become UNDEF).
                // TDA, TDOSA, TDRA: every debug register access traps into the vCPU's own
                // copy (hyp_core::debug_registers), so none crosses to another VM.
                mdcr = in(reg) mdcr_hpmn | MDCR_TPMCR | MDCR_TPM | MDCR_TDA | MDCR_TDOSA | MDCR_TDRA,
                options(nostack)
            );
        }
    }

    /// Runs vCPU `vcpu` on this CPU (`cpu`) from its PSCI entry point until it stops.
    pub fn run_vcpu(&self, vcpu: usize, cpu: usize, decision: &Decision) -> VcpuExit {
        self.vgic.running_on[vcpu].store(cpu, Ordering::Release);
        // List registers: how many the hardware has (GICv3 guests), and how many are in use.
        let lrs = crate::LIST_REGISTERS.get().copied().unwrap_or(ListRegisterFile::V3);
        lrs.reset();
        let resumed = self.saved.get(vcpu).and_then(|s| s.lock().take());
        // Only a vCPU that shares its CPU is ever descheduled (and its WFI traps).
        let shared = decision.trap_wfi;
        let mut here = OnCpu {
            lrs,
            debug: DebugRegisters::AT_RESET,
            debug_loaded: false,
            geometry: crate::debug_hw::geometry(),
            set_way: resumed.as_ref().map_or(SetWayState::default(), |r| r.state.set_way),
            hcr: HCR_GUEST | if shared { HCR_TWI | HCR_TWE } else { 0 },
        };
        self.enter_el2_state(vcpu, here.hcr());
        // The last unknown function this vCPU called: a guest repeating it is logged once.
        let (mut ctx, mut last_unknown) = match resumed {
            Some(resume) => {
                vcpu_state::restore(&resume.state, here.lrs);
                here.debug = resume.state.debug;
                // Its list registers went back into the vGIC: planned again before entry.
                self.vgic.hint(1 << vcpu);
                (resume.ctx, resume.last_unknown)
            }
            None => {
                let Some((entry, context)) = self.power.lock().started(vcpu) else {
                    return self.stop(vcpu, &mut here);
                };
                if vcpu == 0 {
                    vm_log!(self, vcpu, "starting at IPA {entry:#x}");
                    self.route_passthrough(vcpu, cpu);
                }
                // Every register the guest can read, as at reset: nothing of the context
                // that ran here before (another VM's, or this vCPU's last life) shows.
                vcpu_state::restore(&SavedVcpu::at_reset(), here.lrs);
                let mut ctx = GuestContext { pc: entry, pstate: PSTATE_EL1H_MASKED, ..Default::default() };
                ctx.x[0] = context;
                (ctx, None)
            }
        };
        here.follow_debug();
        HYPERVISOR.scheduling.program_timer(cpu, decision.until);
        let no_counts = ExitCounts::default();
        let exits = self.exits.get(vcpu).unwrap_or(&no_counts);
        // The virtual timer's PPI is the physical one, deactivated by the guest.
        let _ = self.vgic.vgic.lock().set_hw(IntId(VTIMER_PPI), vcpu, Some(IntId(VTIMER_PPI)));
        self.load_timer_line(vcpu, cpu);
        // Whether this vCPU holds list registers (then they are taken back on every exit),
        // and whether what came back changed (then they are planned again before entry).
        let (mut lrs_in_use, mut lrs_changed) = (false, false);
        loop {
            if self.is_ending() {
                return self.stop(vcpu, &mut here);
            }
            if self.device_work.load(Ordering::Relaxed) && self.device_work.swap(false, Ordering::AcqRel) {
                self.continue_device_work();
            }
            // The common case, nothing in flight and nothing new: one load, no lock.
            if lrs_changed || self.vgic.take_hint(vcpu) {
                let mut vgic = self.vgic.vgic.lock();
                let _ = vgic.flush_to_hw(vcpu, &mut here.lrs);
                lrs_in_use = vgic.interface(vcpu).is_some_and(|i| i.in_use() > 0);
            }
            let exit_kind = run_guest(&mut ctx);
            lrs_changed = lrs_in_use && self.take_back_list_registers(vcpu, cpu, &mut here);
            match exit_kind {
                EXIT_SYNC => {
                    let exit = SyncExit {
                        syndrome: Syndrome(sysreg!("esr_el2")),
                        far: sysreg!("far_el2"),
                        hpfar: sysreg!("hpfar_el2"),
                    };
                    exits.record_sync(exit.syndrome);
                    // WFE (ISS.TI = 1) of a shared vCPU: its turn ends (lock-holder preemption).
                    if shared && exit.syndrome.class() == ExceptionClass::WFX && exit.syndrome.iss() & 0b11 == 1 {
                        HYPERVISOR.scheduling.yield_now(cpu, vcpu_ref(self.id, vcpu));
                    }
                    let mut sysregs = VcpuSysRegs { vm: self, debug: &mut here.debug };
                    let (outcome, incident) = exit::handle_sync(&mut ctx, vcpu, &exit, &mut self.mmio(), &mut sysregs);
                    match incident {
                        Some(Incident::UnknownHypercall { function }) if last_unknown == Some(function) => {}
                        Some(incident) => {
                            if let Incident::UnknownHypercall { function } = incident {
                                last_unknown = Some(function);
                            }
                            self.log_incident(vcpu, incident);
                        }
                        None => {}
                    }
                    let il = exit.syndrome.instruction_is_32bit();
                    match outcome {
                        Outcome::WaitForInterrupt if shared => {
                            let resume = Resume { ctx: ctx.clone(), state: SavedVcpu::default(), last_unknown };
                            if let Some(exit) = self.wait_for_interrupt(vcpu, &mut here, resume) {
                                return exit;
                            }
                        }
                        Outcome::Resume | Outcome::WaitForInterrupt => {}
                        Outcome::SetWay => self.set_way(&mut ctx, exit.syndrome, &mut here, CacheTrap::SetWay, None),
                        Outcome::ControlWrite { register, value } => {
                            let trap = match register {
                                VmControlRegister::Sctlr => {
                                    CacheTrap::SctlrWrite { old: sysreg!("sctlr_el1"), new: value }
                                }
                                _ => CacheTrap::OtherControlWrite,
                            };
                            self.set_way(&mut ctx, exit.syndrome, &mut here, trap, Some((register, value)))
                        }
                        Outcome::DebugStateChanged => here.follow_debug(),
                        Outcome::GenerateSgi { register, value } => {
                            let register = match register {
                                SgiGenerationRegister::Sgi1r => SgiRegister::Sgi1r,
                                SgiGenerationRegister::Asgi1r => SgiRegister::Asgi1r,
                                SgiGenerationRegister::Sgi0r => SgiRegister::Sgi0r,
                            };
                            let targets =
                                self.vgic.vgic.lock().generate_sgi(vcpu, register, value).map_or(0, |m| m.0 as u32);
                            self.vgic.hint(targets);
                            self.vgic.kick(targets & !(1 << vcpu));
                        }
                        Outcome::InjectAbort { instruction: false, far } => {
                            inject(&mut ctx, InjectedException::DataAbort { far }, il)
                        }
                        Outcome::InjectAbort { instruction: true, far } => {
                            inject(&mut ctx, InjectedException::InstructionAbort { far }, il)
                        }
                        Outcome::InjectUndefined => inject(&mut ctx, InjectedException::Undefined, il),
                        Outcome::Call(call) => {
                            if let Some(exit) = self.vm_call(&mut ctx, vcpu, call, &mut here) {
                                return exit;
                            }
                        }
                    }
                }
                // Kick SGIs, the maintenance and timer interrupts, console input, passthrough SPIs.
                EXIT_IRQ | EXIT_FIQ => self.physical_interrupts(vcpu),
                EXIT_SERROR => {
                    self.count_exit(vcpu, ExitReason::SError);
                    vm_log!(self, vcpu, "SError (ESR_EL2 {:#x}): the VM is stopped", sysreg!("esr_el2"));
                    let _ = self.end(vcpu, EndReason::Crashed);
                    return self.stop(vcpu, &mut here);
                }
                other => {
                    vm_log!(self, vcpu, "exit of unknown kind {other}: the VM is stopped");
                    let _ = self.end(vcpu, EndReason::Crashed);
                    return self.stop(vcpu, &mut here);
                }
            }
            // A shared vCPU's slice ended, or another vCPU of this CPU became runnable.
            if shared && HYPERVISOR.scheduling.take_reschedule(cpu) {
                let next = HYPERVISOR.scheduling.tick(cpu);
                if next.run != Some(vcpu_ref(self.id, vcpu)) {
                    let resume = Resume { ctx, state: SavedVcpu::default(), last_unknown };
                    return self.deschedule(vcpu, &mut here, resume);
                }
                HYPERVISOR.scheduling.program_timer(cpu, next.until);
            }
        }
    }

    /// PSCI and VM calls that change the VM's state. Returns how this vCPU's run ends, if
    /// it does.
    fn vm_call(&self, ctx: &mut GuestContext, vcpu: usize, call: Hypercall, here: &mut OnCpu) -> Option<VcpuExit> {
        match self.call(vcpu, call) {
            CallEffect::Resume(result) => {
                if let Some(x0) = result {
                    ctx.x[0] = x0;
                }
                None
            }
            CallEffect::Stop => Some(self.stop(vcpu, here)),
            CallEffect::End(reason) => {
                let _ = self.end(vcpu, reason);
                Some(self.stop(vcpu, here))
            }
        }
    }
}

/// What a vCPU holds of its physical CPU while it runs there: the list registers, its traps
/// (HCR_EL2) and, while its debug is on, the hardware debug registers.
struct OnCpu {
    /// Its set/way emulation, which decides whether HCR_EL2.TVM is set.
    set_way: SetWayState,
    /// HCR_EL2 but TVM.
    hcr: u64,
    lrs: ListRegisterFile,
    /// The vCPU's debug registers (its accesses trap here).
    debug: DebugRegisters,
    /// Whether `debug` is in the hardware now.
    debug_loaded: bool,
    geometry: DebugGeometry,
}

impl OnCpu {
    /// HCR_EL2 for the vCPU now.
    fn hcr(&self) -> u64 {
        self.hcr | if self.set_way.trapping_controls() { HCR_TVM } else { 0 }
    }

    /// The hardware debug registers follow the vCPU's: loaded while something of it could
    /// fire, cleared otherwise (debug_hw).
    fn follow_debug(&mut self) {
        if self.debug.needs_hardware() {
            crate::debug_hw::load(&self.debug, self.geometry);
            self.debug_loaded = true;
        } else if self.debug_loaded {
            crate::debug_hw::clear(self.geometry);
            self.debug_loaded = false;
        }
    }
}

/// The system-register view of one exiting vCPU.
struct VcpuSysRegs<'a> {
    vm: &'a Vm,
    debug: &'a mut DebugRegisters,
}

impl SysRegEnv for VcpuSysRegs<'_> {
    fn features(&self) -> VmFeatures {
        VmFeatures { gic_v3: self.vm.gic_v3, ipa_bits: self.vm.stage2_ipa_bits }
    }
    fn id_registers(&self) -> &impl IdRegisters {
        &HardwareIdRegisters
    }
    fn debug_registers(&mut self) -> &mut DebugRegisters {
        self.debug
    }
}

/// The ID registers of the CPU this runs on.
struct HardwareIdRegisters;

/// `mrs` of ID register space encoding S3_0_C0_C<crm>_<op2>, for every CRm 1-7, op2 0-7.
macro_rules! read_id_space {
    ($crm:expr, $op2:expr; $($c:literal),*; $($o:literal),*) => {{
        let mut value = 0u64;
        read_id_space!(@crm value, $crm, $op2; [$($c),*]; [$($o),*]);
        value
    }};
    (@crm $v:ident, $crm:expr, $op2:expr; [$($c:literal),*]; $os:tt) => {
        $( if $crm == $c { read_id_space!(@op2 $v, $c, $op2; $os); } )*
    };
    (@op2 $v:ident, $c:literal, $op2:expr; [$($o:literal),*]) => {
        $( if $op2 == $o {
            // SAFETY: reading an ID register has no side effect; unallocated encodings in this
            // space read as zero (ARM ARM D23.1).
            unsafe { core::arch::asm!(concat!("mrs {}, S3_0_C0_C", $c, "_", $o), out(reg) $v, options(nomem, nostack)) };
        } )*
    };
}

impl IdRegisters for HardwareIdRegisters {
    fn read(&self, register: Encoding) -> u64 {
        let Encoding(_, _, _, crm, op2) = register;
        read_id_space!(crm, op2; 1, 2, 3, 4, 5, 6, 7; 0, 1, 2, 3, 4, 5, 6, 7)
    }
}

/// The virtual timer's output on this CPU (ARM ARM D12.x, "The virtual timer"): asserted
/// when CNTV_CTL_EL0.ENABLE and ISTATUS are set and IMASK is clear.
fn timer_line() -> bool {
    sysreg!("cntv_ctl_el0") & 0b111 == 0b101
}

/// The inputs of a VM's hardware-mapped level interrupts, as the vGIC asks for them after an
/// exit, on the CPU of the vCPU that exited: its virtual timer, or a passthrough SPI's pending
/// state at the distributor (held active, a level SPI is pending exactly while its input is
/// asserted).
struct HwLines;

impl vgic::LineSampler for HwLines {
    fn is_asserted(&mut self, _: IntId, physical: IntId) -> bool {
        if physical.0 == VTIMER_PPI {
            timer_line()
        } else if physical.is_spi() {
            crate::gic::spi_pending(physical.0)
        } else {
            true
        }
    }
}

fn write_hcr(hcr: u64) {
    // SAFETY: the traps of the vCPU running on this CPU; RW, VM and the interrupt routing
    // are part of every value `OnCpu::hcr` gives.
    unsafe { asm!("msr hcr_el2, {}", "isb", in(reg) hcr, options(nostack)) };
}

/// Takes this CPU out of any VM's translation regime (HCR_EL2.VM off, no VTTBR), so no
/// walk can reach a VM's tables once they are freed.
fn leave_guest_regime() {
    // SAFETY: at EL2 with no guest running on this CPU; RW stays set for the next guest. The
    // guest's virtual timer is stopped so it cannot interrupt an idle CPU.
    unsafe {
        asm!("msr hcr_el2, {}", "msr vttbr_el2, xzr", "msr cntv_ctl_el0, xzr", "isb", in(reg) 1u64 << 31, options(nostack))
    };
}

/// Delivers `exception` to the guest's EL1 vector (the registers are live in this CPU).
fn inject(ctx: &mut GuestContext, exception: InjectedException, il: bool) {
    let e = exit::exception_to_el1(ctx, sysreg!("vbar_el1"), exception, il);
    // SAFETY: writes the guest's EL1 exception registers, which belong to the running vCPU.
    unsafe {
        asm!(
            "msr esr_el1, {esr}",
            "msr elr_el1, {elr}",
            "msr spsr_el1, {spsr}",
            esr = in(reg) e.esr_el1,
            elr = in(reg) e.elr_el1,
            spsr = in(reg) e.spsr_el1,
            options(nostack)
        );
        if let Some(far) = e.far_el1 {
            asm!("msr far_el1, {}", in(reg) far, options(nostack));
        }
    }
    ctx.pc = e.pc;
    ctx.pstate = e.pstate;
}
