//! What running a vCPU on this CPU names of AArch64 (`OnCpu`, the arch side of
//! hyp_runtime::vcpu_run): its EL2 state (stage 2, traps, identity, counter offset), entry,
//! syndrome reads, injection, what it leaves in the CPU. The VM itself is
//! hyp_arch_arm::vm's, shared with ARMv7.

use core::arch::asm;

use aarch64_cpu::registers::*;
use hyp_arch_arm::cpus::{KickInVector, SgiPosting, VectorCalls};
use hyp_arch_arm::vm::ArmVm;
use hyp_core::debug_registers::{DebugGeometry, DebugRegisters};
use hyp_core::exit::{self, GuestContext, InjectedException, SyncExit};
use hyp_core::exit_stats::{ExitCounts, ExitReason};
use hyp_core::image::ExecutionState;
use hyp_core::set_way::SetWayState;
use hyp_core::syndrome::{ExceptionClass, Syndrome};
use hyp_core::sysreg::{Encoding, IdRegisters};
use hyp_core::trap::aarch32::{mode, Aarch32View};
use hyp_core::trap::{DecodedExit, GuestRegisters};
use hyp_core::vcpu_power::VcpuStart;

use crate::arch::{Aarch64, HYPERVISOR};
use crate::exceptions::{run_guest, EXIT_ANSWERED, EXIT_FIQ, EXIT_IRQ, EXIT_SERROR, EXIT_SYNC, RESUME_GUEST};
use crate::ich::ListRegisterFile;
use crate::vcpu_state::{self, SavedVcpu};
use hyp_runtime::shared_vgic::VgicHandle;
use hyp_runtime::tlb::OnEntry;
use hyp_runtime::vcpu_run::{CacheMaintenance, GuestExit, InVector, ResumeSlots, VcpuCpu, VectorAnswer, VectorKick};
use hyp_runtime::Hypervisor;
use vgic::{Distributor, IntId};

/// PSTATE at a guest's first instruction: EL1h, D, A, I, F masked (booting.rst).
const PSTATE_EL1H_MASKED: u64 = 0x3c5;
/// PSTATE.nRW [4]: the guest trapped from AArch32.
const PSTATE_AARCH32: u64 = 1 << 4;
/// HCR_EL2 for a guest (ARM ARM D24.2.48): VM (stage 2), SWIO, FMO/IMO/AMO (physical
/// interrupts and SErrors to EL2), FB and BSU = inner shareable (broadcast maintenance), TSC
/// (trap SMC), TIDCP (trap IMPLEMENTATION DEFINED registers), TACR (trap ACTLR), TSW (trap
/// set/way cache maintenance), TID3 (trap ID group 3 reads, which are sanitised:
/// hyp_core::sysreg), RW (EL1 is AArch64).
const HCR_GUEST: u64 = HCR_EL2::VM::SET.value
    | HCR_EL2::SWIO::SET.value
    | HCR_EL2::FMO::SET.value
    | HCR_EL2::IMO::SET.value
    | HCR_EL2::AMO::SET.value
    | HCR_EL2::FB::SET.value
    | HCR_EL2::BSU::InnerShareable.value
    | HCR_EL2::TID3::SET.value
    | HCR_EL2::TSC::SET.value
    | HCR_EL2::TIDCP::SET.value
    | HCR_EL2::TACR::SET.value
    | HCR_EL2::TSW::SET.value
    | HCR_EL2::RW::EL1IsAarch64.value;
/// HCR_EL2.TWI and TWE: WFI and WFE trap (vCPUs that share a CPU: a vCPU waiting for an
/// interrupt or for a spinlock's holder gives its CPU to the others, which include that
/// holder if it shares the CPU).
const HCR_WFX: u64 = HCR_EL2::TWI::SET.value | HCR_EL2::TWE::SET.value;
/// HSTR_EL2.T15 (ARM ARM D24.2, HSTR_EL2): an AArch32 EL1's accesses to CP15 CRn 15 trap.
const HSTR_T15: u64 = 1 << 15;
/// HCR_EL2.TVM: writes to the VM control registers trap (while set/way maintenance is
/// watched: hyp_core::set_way).
const HCR_TVM: u64 = HCR_EL2::TVM::SET.value;

/// A VM as this image runs it (hyp_arch_arm::vm).
pub type Vm = ArmVm<OnCpu>;

/// The EL2 state of this vCPU on this CPU: its VM's stage 2, traps (`hcr`: `OnCpu::hcr`),
/// identity, timer offset; then the TLB maintenance `tlb` asks for.
fn enter_el2_state(vm: &Vm, vcpu: usize, hcr: u64, tlb: OnEntry) {
    VTCR_EL2.set(vm.vtcr);
    VTTBR_EL2.set(vm.vttbr);
    HCR_EL2.set(hcr);
    VMPIDR_EL2.set((1 << 31) | Distributor::vcpu_affinity(vcpu));
    // SAFETY: the guest reads the CPU's own identification (VPIDR_EL2, which aarch64-cpu
    // lacks); no memory is touched.
    unsafe { asm!("msr vpidr_el2, {}", in(reg) MIDR_EL1.get(), options(nomem, nostack)) };
    // EL1PCTEN: the guest may read the physical counter. EL1PCEN clear: the EL1 physical
    // timer is refused (its accesses are undefined instructions): its interrupt is not routed
    // to guests, who use the virtual timer.
    CNTHCTL_EL2.write(CNTHCTL_EL2::EL1PCTEN::SET + CNTHCTL_EL2::EL1PCEN::CLEAR);
    CNTVOFF_EL2.set(vm.counter_offset);
    // TPM, TPMCR: the PMU is not offered to guests (accesses become UNDEF); HPMN keeps every
    // counter PMCR_EL0.N has. TDA, TDOSA, TDRA: every debug register access traps into the
    // vCPU's own copy (hyp_core::debug_registers), so none crosses to another VM.
    let counters = (sysreg!("pmcr_el0") >> 11) & 0x1f;
    MDCR_EL2.write(
        MDCR_EL2::HPMN.val(counters)
            + MDCR_EL2::TPMCR::SET
            + MDCR_EL2::TPM::SET
            + MDCR_EL2::TDA::SET
            + MDCR_EL2::TDOSA::SET
            + MDCR_EL2::TDRA::SET,
    );
    // SAFETY: HSTR_EL2 (which aarch64-cpu lacks): T15 traps an AArch32 EL1's accesses to CP15
    // CRn 15, all IMPLEMENTATION DEFINED (L2ACTLR, CPUACTLR, ...), which HCR_EL2.TIDCP
    // leaves alone in AArch32 (ARM ARM D24.2.48: its AArch32 list is CRn 9, 10 and 11); they
    // become undefined instructions, as the AArch64 view's S3_x_C15 registers are and as the
    // ARMv7 image's HSTR.T15 makes them. No effect on an AArch64 EL1. No memory is touched.
    unsafe { asm!("msr hstr_el2, {}", in(reg) HSTR_T15, options(nomem, nostack)) };
    // SAFETY: a barrier: the registers above are in force from here on (the VMID in
    // VTTBR_EL2 for the TLB maintenance below).
    unsafe { asm!("isb", options(nostack)) };
    if tlb == OnEntry::InvalidateStage1 {
        // SAFETY: TLB maintenance and barriers, no effect on memory. Another vCPU of this
        // VM ran on this CPU since this one did: this CPU's stage-1 entries of the VMID in
        // VTTBR_EL2 (TLBI VMALLE1, this PE only: ARM ARM, TLBI VMALLE1 at EL2) are dropped so
        // that none of its translations serves this vCPU (docs/capability-model.md, V3). The
        // stage-2 entries are the VM's, the same for every vCPU, and stay. No other VM's
        // entry can be hit here: a VMID was invalidated everywhere before it was reused (V1).
        unsafe { asm!("tlbi vmalle1", "dsb nsh", "isb", options(nostack)) };
    }
}

/// An exception into an AArch32 guest's EL1: its Undefined or Abort mode's LR (held in X22
/// or X20) and SPSR, its fault status and address registers (DFSR is ESR_EL1[31:0], DFAR
/// FAR_EL1[31:0], IFSR IFSR32_EL2, IFAR FAR_EL1[63:32]), then its vector.
fn inject_aarch32(ctx: &mut GuestContext, exception: InjectedException) {
    let sctlr = sysreg!("sctlr_el1") as u32;
    let vbar = sysreg!("vbar_el1") as u32;
    // TTBCR.EAE [31]: the guest uses long descriptors, and their fault status format.
    let long_descriptors = sysreg!("tcr_el1") >> 31 & 1 == 1;
    let e = exit::exception_to_aarch32(ctx.pstate as u32, ctx.pc as u32, sctlr, vbar, long_descriptors, exception);
    let far = sysreg!("far_el1");
    // SAFETY: writes the guest's AArch32 exception registers, which belong to the running
    // vCPU.
    unsafe {
        if e.mode == mode::UND {
            asm!("msr spsr_und, {}", in(reg) u64::from(e.spsr), options(nostack));
        } else {
            asm!("msr spsr_abt, {}", in(reg) u64::from(e.spsr), options(nostack));
        }
        if let Some(f) = e.fault {
            let (fsr, far) = (u64::from(f.status), f.far_el1(far));
            if f.instruction {
                asm!("msr ifsr32_el2, {}", "msr far_el1, {}", in(reg) fsr, in(reg) far, options(nostack));
            } else {
                asm!("msr esr_el1, {}", "msr far_el1, {}", in(reg) fsr, in(reg) far, options(nostack));
            }
        }
    }
    if let Some(lr) = hyp_core::trap::aarch32::aarch64_register(e.mode, 14) {
        ctx.x[lr] = u64::from(e.lr);
    }
    ctx.pc = u64::from(e.pc);
    ctx.pstate = u64::from(e.cpsr);
}

/// What a vCPU holds of its physical CPU while it runs there: the list registers, its traps
/// (HCR_EL2) and, while its debug is on, the hardware debug registers.
pub struct OnCpu {
    /// Its set/way emulation, which decides whether HCR_EL2.TVM is set.
    set_way: SetWayState,
    /// HCR_EL2 but TVM and the TWI of `wfi_for_work`.
    hcr: u64,
    /// WFI traps though the vCPU is pinned (`VcpuCpu::trap_pinned_wfi`).
    wfi_for_work: bool,
    /// The execution state the VM's kernel started in.
    state: ExecutionState,
    lrs: ListRegisterFile,
    /// The vCPU's debug registers (its accesses trap here).
    debug: DebugRegisters,
    /// Whether `debug` is in the hardware now.
    debug_loaded: bool,
    geometry: DebugGeometry,
    /// This CPU's state for the calls its vector answers.
    vector_calls: &'static VectorCalls,
}

impl OnCpu {
    /// HCR_EL2 for the vCPU now.
    fn hcr(&self) -> u64 {
        self.hcr
            | if self.set_way.trapping_controls() { HCR_TVM } else { 0 }
            | if self.wfi_for_work { HCR_EL2::TWI::SET.value } else { 0 }
    }
}

impl VcpuCpu for OnCpu {
    type V = Aarch64;
    type Registers = GuestContext;
    type Aarch32<'a> = Aarch32View<'a>;
    type Saved = SavedVcpu;
    type ListRegisters = ListRegisterFile;
    type IdRegisters = HardwareIdRegisters;
    type Trap = SyncExit;

    fn hypervisor() -> &'static Hypervisor<Aarch64> {
        &HYPERVISOR
    }

    fn resume_slots(vm: &Vm) -> &ResumeSlots<OnCpu> {
        &vm.saved
    }

    fn enter(vm: &Vm, vcpu: usize, shares: bool, resumed: Option<&SavedVcpu>, tlb: OnEntry) -> OnCpu {
        let lrs: ListRegisterFile = hyp_arch_arm::image::list_registers();
        lrs.reset();
        let here = OnCpu {
            lrs,
            debug: DebugRegisters::AT_RESET,
            debug_loaded: false,
            geometry: crate::debug_hw::geometry(),
            vector_calls: &hyp_arch_arm::cpus::PER_CPU[crate::cpus::current_index()].vector_calls,
            set_way: resumed.map_or(SetWayState::default(), |r| r.set_way),
            state: vm.execution_state(),
            hcr: match vm.execution_state() {
                ExecutionState::Aarch64 => HCR_GUEST,
                // RW clear: EL1 (and so EL0) is AArch32.
                ExecutionState::Aarch32 => HCR_GUEST & !HCR_EL2::RW::EL1IsAarch64.value,
            } | if shares { HCR_WFX } else { 0 },
            wfi_for_work: false,
        };
        enter_el2_state(vm, vcpu, here.hcr(), tlb);
        here
    }

    fn trap_pinned_wfi(&mut self, trap: bool) {
        if self.wfi_for_work != trap {
            self.wfi_for_work = trap;
            write_hcr(self.hcr());
        }
    }

    fn restore(&mut self, saved: &SavedVcpu) {
        vcpu_state::restore(saved, self.lrs);
        self.debug = saved.debug;
    }

    fn restore_at_reset(&mut self) {
        vcpu_state::restore(&SavedVcpu::at_reset(self.state), self.lrs);
    }

    fn fresh_registers(state: ExecutionState, start: VcpuStart) -> GuestContext {
        let mut ctx = GuestContext::default();
        match state {
            ExecutionState::Aarch64 => {
                (ctx.pc, ctx.pstate, ctx.x[0]) = (start.entry, PSTATE_EL1H_MASKED, start.context);
            }
            ExecutionState::Aarch32 => {
                let s = hyp_core::trap::aarch32::start_state(start);
                (ctx.pc, ctx.pstate) = (u64::from(s.pc), u64::from(s.cpsr));
                ctx.x[..3].iter_mut().zip(s.r).for_each(|(x, r)| *x = u64::from(r));
            }
        }
        ctx
    }

    #[inline(always)]
    fn in_aarch32(ctx: &GuestContext) -> bool {
        ctx.pstate & PSTATE_AARCH32 != 0
    }
    const ONLY_AARCH32: bool = false;

    fn aarch32(ctx: &mut GuestContext) -> Aarch32View<'_> {
        Aarch32View(ctx)
    }

    fn save(&mut self) -> SavedVcpu {
        SavedVcpu { set_way: self.set_way, ..vcpu_state::save(self.lrs, self.debug) }
    }

    /// The timer was stopped (`save`) or the vCPU is gone before the timer PPI's active
    /// state is cleared, so the PPI does not fire for the next vCPU.
    fn leave(&mut self) {
        if self.debug_loaded {
            crate::debug_hw::clear(self.geometry);
            self.debug_loaded = false;
        }
        let cpu = crate::cpus::current_index();
        crate::gic::GIC.clear_active_private(Self::timer_ppi(), cpu);
        hyp_arch_arm::cpus::PER_CPU[cpu].vector_calls.unload();
        leave_guest_regime();
    }

    fn vector_calls(
        &mut self,
        exits: &ExitCounts,
        vgic: &VgicHandle<Aarch64>,
        at: (usize, usize),
        last_unknown: Option<u32>,
        kick: VectorKick<'_>,
    ) {
        let counter = |class| exits.class_counter(class);
        let counters = [counter(ExceptionClass::HVC64), counter(ExceptionClass::DATA_ABORT_LOWER)];
        // An AArch64 vCPU: its SGIs to one other vCPU are posted in the vector
        // (exceptions.rs), written to ICC_SGI1R_EL1 on a GICv3 and to GICD_SGIR on a GICv2.
        let (kick_targets, board_sgir) = crate::gic::GIC.kick_targets();
        let gicd_sgir = board_sgir.is_some();
        let class = if gicd_sgir { ExceptionClass::DATA_ABORT_LOWER } else { ExceptionClass::SYSREG64 };
        let posts = vgic.posting_vcpus() != 0 && vgic.posts_per_source() == gicd_sgir;
        let posting = (posts && self.state == ExecutionState::Aarch64).then(|| SgiPosting {
            vgic: core::ptr::from_ref(vgic).cast(),
            gicd_sgir,
            exits: counter(class),
            vcpu: at.0,
            cpu: at.1,
            kick_targets,
            board_sgir,
        });
        // A pinned vCPU whose SGIs the vector posts: a kick for an SGI posted to it may be
        // taken in the vector (exceptions.rs, docs/vgic.md "The same SGI shown again in the
        // vector"), by the code for its GIC.
        let count = vgic::ListRegisters::count(&self.lrs);
        let gicv2 = crate::gic::GIC.gicc_address().zip(hyp_arch_arm::image::gich_address());
        let kicks = posting.filter(|p| !kick.shared && p.gicd_sgir == gicv2.is_some()).map(|_| KickInVector {
            entry: crate::exceptions::kick_entry(gicv2.is_some()),
            gicv2,
            exits: exits.reason_counter(ExitReason::Kick),
            ending: kick.ending,
            device_work: kick.device_work,
            all_empty: (1u64 << count) - 1,
        });
        self.vector_calls.load(counters, &vgic.control_words, last_unknown, posting, kicks);
    }

    fn vector_list_registers(&mut self, in_use: bool, show_again: Option<(usize, u64)>) {
        self.vector_calls.list_registers(in_use, show_again);
    }

    fn vector_unknown_call(function: u32) {
        hyp_arch_arm::cpus::PER_CPU[crate::cpus::current_index()].vector_calls.remember_unknown(function);
    }

    fn list_registers(&mut self) -> &mut ListRegisterFile {
        &mut self.lrs
    }

    const ANSWERS_IN_VECTOR: bool = true;

    #[inline(always)]
    fn run_guest(&mut self, ctx: &mut GuestContext, here: &InVector<'_, Self>) -> GuestExit {
        match run_guest(ctx, core::ptr::from_ref(here).cast()) {
            EXIT_SYNC => GuestExit::Sync,
            EXIT_IRQ | EXIT_FIQ => GuestExit::Interrupt,
            EXIT_SERROR => GuestExit::SError,
            EXIT_ANSWERED => GuestExit::Answered,
            other => GuestExit::Unknown(other),
        }
    }

    #[inline(always)]
    fn read_trap() -> SyncExit {
        SyncExit { syndrome: Syndrome(sysreg!("esr_el2")), far: sysreg!("far_el2"), hpfar: sysreg!("hpfar_el2") }
    }

    #[inline(always)]
    fn syndrome(exit: &SyncExit) -> Syndrome {
        exit.syndrome
    }

    #[inline(always)]
    fn decode(exit: &SyncExit, _: &GuestContext) -> DecodedExit {
        hyp_core::trap::aarch64::decode(exit)
    }

    /// Out of line: AArch64's decoder stays fused with the handler.
    #[inline(never)]
    fn decode_aarch32(exit: &SyncExit, ctx: &GuestContext) -> DecodedExit {
        hyp_core::trap::aarch32::decode_at_el2(exit, ctx.pstate as u32)
    }

    fn debug_registers(&mut self) -> &mut DebugRegisters {
        &mut self.debug
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

    /// A part of the VM's RAM cleaned, and the instruction completed if that was the last
    /// or none was needed (a control register write applied first). Otherwise the PC stays,
    /// and the guest traps again at the same instruction after any interrupt due now has
    /// been taken.
    fn cache_maintenance(&mut self, vm: &Vm, ctx: &mut GuestContext, bytes: u8, trap: CacheMaintenance) {
        let trapping = self.set_way.trapping_controls();
        let (ram, sctlr) = ((vm.ram.base, vm.spec.memory), || sysreg!("sctlr_el1"));
        let clean = crate::mmu::clean_invalidate_dcache_range;
        let Some(write) = hyp_arch_arm::vm::cache_maintenance_step(&mut self.set_way, trap, ctx.pc, ram, sctlr, clean)
        else {
            return;
        };
        if let Some((register, part, value)) = write {
            vcpu_state::write_control_register(register, part, value);
        }
        if Self::in_aarch32(ctx) {
            Aarch32View(ctx).advance_pc(bytes);
        } else {
            ctx.advance_pc(bytes);
        }
        if self.set_way.trapping_controls() != trapping {
            write_hcr(self.hcr());
        }
    }

    /// To the guest's EL1 vector (its registers are live in this CPU).
    fn inject(&mut self, ctx: &mut GuestContext, exception: InjectedException, bytes: u8) {
        if Self::in_aarch32(ctx) {
            return inject_aarch32(ctx, exception);
        }
        let e = exit::exception_to_el1(ctx, sysreg!("vbar_el1"), exception, bytes == 4);
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

    /// CNTV_CVAL_EL0 is in the VM's virtual count: its physical deadline adds CNTVOFF.
    fn timer_deadline(vm: &Vm) -> Option<u64> {
        CNTV_CTL_EL0
            .matches_all(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR)
            .then(|| CNTV_CVAL_EL0.get().wrapping_add(vm.counter_offset))
    }

    /// Asserted when CNTV_CTL_EL0.ENABLE and ISTATUS are set and IMASK is clear (ARM ARM
    /// D12.x, "The virtual timer").
    fn timer_line() -> bool {
        CNTV_CTL_EL0.matches_all(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::ISTATUS::SET + CNTV_CTL_EL0::IMASK::CLEAR)
    }

    fn timer_ppi() -> u32 {
        hyp_arch_arm::image::timer_ppi()
    }

    fn set_timer_ppi_active(cpu: usize, active: bool) {
        hyp_arch_arm::image::set_timer_ppi_active::<Aarch64>(cpu, active);
    }

    fn deactivate(physical: IntId, cpu: usize) {
        hyp_arch_arm::image::deactivate::<Aarch64>(physical, cpu);
    }
}

/// A synchronous exit the vector offers (exceptions.rs), the guest's registers saved in
/// `registers`, to the run loop's `InVector` (`here`) for the vCPU on this CPU: what the
/// vector does next (hyp_runtime::vcpu_run::in_vector).
#[no_mangle]
extern "C" fn answer_in_vector(here: *const InVector<'static, OnCpu>, registers: *mut GuestContext) -> u64 {
    // SAFETY: `here` and `registers` are what `OnCpu::run_guest` gave `enter_guest` for the
    // guest whose exit this is, and the vector calls this only before it returns from that
    // `enter_guest`: `here` is a shared reference the run loop holds for the whole call (its
    // lifetime is not 'static, but nothing here outlives this call), `registers` an
    // exclusive one, which nothing else touches while the guest is out.
    let (here, registers) = unsafe { (&*here, &mut *registers) };
    match hyp_runtime::vcpu_run::in_vector::answer(here, registers) {
        VectorAnswer::NotHere => EXIT_SYNC,
        VectorAnswer::Answered => EXIT_ANSWERED,
        VectorAnswer::Resume => RESUME_GUEST,
    }
}

/// The vector posted the SGI of a write of ICC_SGI1R_EL1 by the vCPU on this CPU and found
/// its target to be woken or kicked by the run loop's code (`registers` saved as for
/// `answer_in_vector`): what the vector does next (hyp_runtime::vcpu_run::in_vector::answer_posted).
#[no_mangle]
extern "C" fn answer_posted_in_vector(here: *const InVector<'static, OnCpu>, registers: *mut GuestContext) -> u64 {
    // SAFETY: as for `answer_in_vector`, whose way from the vector this takes.
    let (here, registers) = unsafe { (&*here, &mut *registers) };
    match hyp_runtime::vcpu_run::in_vector::answer_posted(here, registers) {
        VectorAnswer::NotHere => EXIT_SYNC,
        VectorAnswer::Answered => EXIT_ANSWERED,
        VectorAnswer::Resume => RESUME_GUEST,
    }
}

/// The ID registers of the CPU this runs on.
#[derive(Default)]
pub struct HardwareIdRegisters;

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
