//! What running a vCPU on this CPU names of ARMv7 (`OnCpu`, the arch side of
//! hyp_runtime::vcpu_run): its HYP-mode state (stage 2, traps, identity, counter offset),
//! entry, syndrome reads, injection, what it leaves in the CPU. The VM itself is
//! hyp_arch_arm::vm's, shared with ARMv8.

use core::arch::asm;

use aarch32_cpu::register::{CntVoff, Cnthctl, CntvCtl, CntvCval, Hcr, Hdfar, Hifar, Hpfar, Hsr, Midr, Vmpidr, Vpidr};
use hyp_arch_arm::vm::ArmVm;
use hyp_core::debug_registers::DebugRegisters;
use hyp_core::exit::InjectedException;
use hyp_core::image::ExecutionState;
use hyp_core::set_way::SetWayState;
use hyp_core::syndrome::{ExceptionClass, Syndrome};
use hyp_core::sysreg::{Encoding, IdRegisters};
use hyp_core::trap::aarch32::HypExit;
use hyp_core::trap::{DecodedExit, GuestRegisters};
use hyp_core::vcpu_power::VcpuStart;
use hyp_runtime::tlb::OnEntry;
use hyp_runtime::vcpu_run::{CacheMaintenance, GuestExit, InVector, ResumeSlots, VcpuCpu};
use hyp_runtime::Hypervisor;
use vgic::{Distributor, IntId};

use crate::arch::{Armv7, HYPERVISOR};
use crate::exceptions::{run_guest, EXIT_FIQ, EXIT_IRQ, EXIT_SYNC};
use crate::gic::ListRegisterFile;
use crate::guest_regs::Registers;
use crate::sysregs::{Vtcr, Vttbr};
use crate::vcpu_state::{self, SavedVcpu};

/// HCR for a guest (ARM ARM B4.1.65): VM (stage 2), SWIO, FMO/IMO/AMO (physical interrupts
/// and asynchronous aborts to HYP mode), FB and BSU = inner shareable (broadcast
/// maintenance), TSC (trap SMC: bit 19, which `aarch32-cpu` does not name), TIDCP (trap
/// the IMPLEMENTATION DEFINED registers), TAC (trap ACTLR), TSW (trap set/way cache
/// maintenance), TID3 (trap ID group 3 reads, the CP15 ID registers and VMRS of MVFR0 and
/// MVFR1, which are sanitised as on the AArch64 image, `hyp_core::sysreg::sanitised_id`: no
/// Virtualization Extensions, debug or PMU offered).
fn hcr_guest() -> Hcr {
    const TSC: u32 = 1 << 19;
    Hcr::new_with_raw_value(TSC)
        .with_vm(true)
        .with_swio(true)
        .with_fmo(true)
        .with_imo(true)
        .with_amo(true)
        .with_fb(true)
        .with_bsu(aarch32_cpu::register::hyp::hcr::Bsu::InnerShareable)
        .with_tidcp(true)
        .with_tid3(true)
        .with_tac(true)
        .with_tsw(true)
}

/// HSTR (B4.1.72): T15 traps the guest's accesses to CP15 CRn = 15 (implementation defined).
const HSTR_GUEST: u32 = 1 << 15;
/// HDCR (B4.1.63): TDRA, TDOSA, TDA (every debug register access traps, into the vCPU's own
/// copy), TPM and TPMCR (the PMU is not offered to guests); HPMN, bits [4:0], is set to
/// every counter PMCR.N has.
const HDCR_TRAPS: u32 = (1 << 11) | (1 << 10) | (1 << 9) | (1 << 6) | (1 << 5);

/// A VM as this image runs it (hyp_arch_arm::vm).
pub type Vm = ArmVm<OnCpu>;

/// The HYP-mode state of this vCPU on this CPU: its VM's stage 2, traps (`hcr`), identity,
/// timer offset; then the TLB maintenance `tlb` asks for.
fn enter_hyp_state(vm: &Vm, vcpu: usize, hcr: Hcr, tlb: OnEntry) {
    let pmcr: u32;
    // SAFETY: reading PMCR has no side effect.
    unsafe { asm!("mrc p15, 0, {}, c9, c12, 0", out(reg) pmcr, options(nomem, nostack)) };
    let counters = (pmcr >> 11) & 0x1f;
    // SAFETY: the VM's stage-2 tables (which its capabilities own) and their control, the
    // guest's traps, identity and counter offset; no guest runs on this CPU until the entry.
    unsafe {
        Vtcr::write(vm.vtcr as u32);
        Vttbr::write(vm.vttbr);
        Vmpidr::write(Vmpidr((1 << 31) | Distributor::vcpu_affinity(vcpu) as u32));
        Vpidr::write(Vpidr(Midr::read().raw_value()));
        aarch32_cpu::register::Hstr::write(aarch32_cpu::register::Hstr(HSTR_GUEST));
        aarch32_cpu::register::Hdcr::write(aarch32_cpu::register::Hdcr(HDCR_TRAPS | counters));
    }
    Hcr::write(hcr);
    // PL1PCTEN: the guest may read the physical counter. PL1PCEN clear: the PL1 physical
    // timer is refused (its accesses trap): its interrupt is not routed to guests, who use
    // the virtual timer.
    Cnthctl::write(Cnthctl::new_with_raw_value(0).with_pl1pcten(true).with_pl1pcen(false));
    CntVoff::write(CntVoff(vm.counter_offset));
    // The registers above are in force from here on (the VMID in VTTBR for the TLB
    // maintenance below).
    aarch32_cpu::asm::isb();
    if tlb == OnEntry::InvalidateStage1 {
        // SAFETY: TLB maintenance and barriers, no effect on memory. Another vCPU of this
        // VM ran on this CPU since this one did: this CPU's entries of the VMID in VTTBR are
        // dropped (TLBIALL in Hyp mode, this PE only: ARM ARM B4.2.2; it takes the VMID's
        // stage-2 entries too, which ARMv7 cannot keep apart) so that none of its stage-1
        // translations serves this vCPU (docs/capability-model.md, V3). No other VM's entry
        // can be hit here: a VMID was invalidated everywhere before it was reused (V1).
        unsafe { asm!("mcr p15, 0, {z}, c8, c7, 0", "dsb nsh", "isb", z = in(reg) 0u32, options(nostack)) };
    }
}

/// What a vCPU holds of its physical CPU while it runs there: the list registers, its traps
/// (HCR) and its debug registers' copy.
pub struct OnCpu {
    /// Its set/way emulation, which decides whether HCR.TVM is set.
    set_way: SetWayState,
    /// HCR but TVM and the TWI of `wfi_for_work`.
    hcr: Hcr,
    /// WFI traps though the vCPU is pinned (`VcpuCpu::trap_pinned_wfi`).
    wfi_for_work: bool,
    lrs: ListRegisterFile,
    /// The vCPU's debug registers (its accesses trap here; never loaded into the hardware
    /// yet on this image).
    debug: DebugRegisters,
}

impl OnCpu {
    /// HCR for the vCPU now.
    fn hcr(&self) -> Hcr {
        let hcr = self.hcr.with_tvm(self.set_way.trapping_controls());
        if self.wfi_for_work {
            hcr.with_twi(true)
        } else {
            hcr
        }
    }
}

impl VcpuCpu for OnCpu {
    type V = Armv7;
    /// HSR, HDFAR or HIFAR, HPFAR.
    type Trap = HypExit;
    /// r0-r12, LR_usr, PC and CPSR; the other banked registers stay in the CPU.
    type Registers = Registers;
    /// The registers are the AArch32 guest's, as HSR names them.
    type Aarch32<'a> = &'a mut Registers;
    type Saved = SavedVcpu;
    type IdRegisters = HardwareIdRegisters;
    type ListRegisters = ListRegisterFile;

    fn enter(vm: &Vm, vcpu: usize, shares: bool, resumed: Option<&SavedVcpu>, tlb: OnEntry) -> OnCpu {
        let lrs: ListRegisterFile = hyp_arch_arm::image::list_registers();
        lrs.reset();
        // TWI and TWE: WFI and WFE trap for vCPUs that share a CPU.
        let here = OnCpu {
            lrs,
            debug: DebugRegisters::AT_RESET,
            set_way: resumed.map_or(SetWayState::default(), |r| r.set_way),
            hcr: hcr_guest().with_twi(shares).with_twe(shares),
            wfi_for_work: false,
        };
        enter_hyp_state(vm, vcpu, here.hcr(), tlb);
        here
    }

    /// The kernel's boot: r0 = 0, r1 = the machine type, r2 = the device tree; a PSCI
    /// CPU_ON: r0 = the context ID (a T32 entry point has bit 0 set). Only AArch32 VMs are
    /// created on this image (`ArmImage::AARCH64_GUESTS`).
    fn fresh_registers(_: ExecutionState, start: VcpuStart) -> Registers {
        let s = hyp_core::trap::aarch32::start_state(start);
        let mut regs = Registers { pc: s.pc, cpsr: s.cpsr, ..Default::default() };
        regs.r[..3].copy_from_slice(&s.r);
        regs
    }

    #[inline(always)]
    fn in_aarch32(_: &Registers) -> bool {
        true
    }
    const ONLY_AARCH32: bool = true;

    fn aarch32(regs: &mut Registers) -> &mut Registers {
        regs
    }

    /// Every register a guest can read, as at reset, in the CPU (`SavedVcpu::at_reset`).
    fn restore_at_reset(&mut self) {
        vcpu_state::restore(&SavedVcpu::at_reset(), self.lrs);
    }

    fn trap_pinned_wfi(&mut self, trap: bool) {
        if self.wfi_for_work != trap {
            self.wfi_for_work = trap;
            Hcr::write(self.hcr());
        }
    }

    /// What the vCPU left in the CPU, back in it; its debug registers' copy back here.
    fn restore(&mut self, saved: &SavedVcpu) {
        self.debug = saved.debug;
        vcpu_state::restore(saved, self.lrs);
    }

    fn save(&mut self) -> SavedVcpu {
        SavedVcpu { set_way: self.set_way, ..vcpu_state::save(self.lrs, self.debug) }
    }

    /// The timer was stopped (`save`) or the vCPU is gone before the timer PPI's active
    /// state is cleared, so the PPI does not fire for the next vCPU.
    fn leave(&mut self) {
        crate::gic::GIC.clear_active_private(Self::timer_ppi(), crate::cpus::current_index());
        leave_guest_regime();
    }

    fn list_registers(&mut self) -> &mut ListRegisterFile {
        &mut self.lrs
    }

    fn resume_slots(vm: &Vm) -> &ResumeSlots<OnCpu> {
        &vm.saved
    }

    fn hypervisor() -> &'static Hypervisor<Armv7> {
        &HYPERVISOR
    }

    /// At the GIC, as on ARMv8 (hyp_arch_arm).
    fn deactivate(physical: IntId, cpu: usize) {
        hyp_arch_arm::image::deactivate::<Armv7>(physical, cpu);
    }

    /// The ARMv7 vector answers nothing itself: an exit to the run loop costs less here
    /// (the registers saved and restored by STM and LDM, the hypervisor's in one PUSH and
    /// one POP), and the answer in the vector, tried, was no cheaper (docs/performance.md,
    /// "Answered in the vector").
    const ANSWERS_IN_VECTOR: bool = false;

    #[inline(always)]
    fn run_guest(&mut self, regs: &mut Registers, _: &InVector<'_, Self>) -> GuestExit {
        match run_guest(regs) {
            EXIT_SYNC => GuestExit::Sync,
            EXIT_IRQ | EXIT_FIQ => GuestExit::Interrupt,
            other => GuestExit::Unknown(u64::from(other)),
        }
    }

    /// HSR, HDFAR (HIFAR for a prefetch abort) and HPFAR.
    #[inline(always)]
    fn read_trap() -> HypExit {
        let hsr = Hsr::read().raw_value();
        let far = if hsr >> 26 == u32::from(ExceptionClass::INSTRUCTION_ABORT_LOWER.0) {
            Hifar::read().0
        } else {
            Hdfar::read().0
        };
        // The CPSR is the guest's, in its registers: `decode` adds it.
        HypExit { hsr, far, hpfar: Hpfar::read().0, cpsr: 0, aarch64_view: false }
    }

    #[inline(always)]
    fn syndrome(exit: &HypExit) -> Syndrome {
        Syndrome(u64::from(exit.hsr))
    }

    #[inline(always)]
    fn decode(exit: &HypExit, regs: &Registers) -> DecodedExit {
        hyp_core::trap::aarch32::decode(&HypExit { cpsr: regs.cpsr, ..*exit })
    }

    fn debug_registers(&mut self) -> &mut DebugRegisters {
        &mut self.debug
    }

    /// The hardware debug registers are not loaded for guests on this image yet (their
    /// accesses trap: HDCR); nothing of a vCPU's debug state reaches the CPU.
    fn follow_debug(&mut self) {}

    /// A part of the VM's RAM cleaned, and the instruction completed if that was the last
    /// or none was needed (a control register write applied first).
    fn cache_maintenance(&mut self, vm: &Vm, regs: &mut Registers, bytes: u8, trap: CacheMaintenance) {
        let trapping = self.set_way.trapping_controls();
        let sctlr = || {
            let old: u32;
            // SAFETY: reading the guest's SCTLR has no side effect.
            unsafe { asm!("mrc p15, 0, {}, c1, c0, 0", out(reg) old, options(nomem, nostack)) };
            u64::from(old)
        };
        let clean = |start, end| crate::mmu::dcache_range(start, end, crate::mmu::DcOp::CleanInvalidate);
        let (pc, ram) = (u64::from(regs.pc), (vm.ram.base, vm.spec.memory));
        let Some(write) = hyp_arch_arm::vm::cache_maintenance_step(&mut self.set_way, trap, pc, ram, sctlr, clean)
        else {
            return;
        };
        if let Some((register, part, value)) = write {
            vcpu_state::write_control_register(register, part, value);
        }
        regs.advance_pc(bytes);
        if self.set_way.trapping_controls() != trapping {
            Hcr::write(self.hcr());
            aarch32_cpu::asm::isb();
        }
    }

    /// To the guest's own vector (its CP15 and banked registers are live in this CPU).
    fn inject(&mut self, regs: &mut Registers, exception: InjectedException, _bytes: u8) {
        crate::inject::inject(regs, exception);
    }

    /// CNTV_CVAL is in the VM's virtual count: its physical deadline adds CNTVOFF.
    fn timer_deadline(vm: &Vm) -> Option<u64> {
        let ctl = CntvCtl::read();
        (ctl.enable() && !ctl.imask()).then(|| CntvCval::read().0.wrapping_add(vm.counter_offset))
    }

    /// Asserted when CNTV_CTL's ENABLE and ISTATUS are set and IMASK is clear.
    fn timer_line() -> bool {
        let ctl = CntvCtl::read();
        ctl.enable() && ctl.istatus() && !ctl.imask()
    }

    /// The timer's physical PPI, from the device tree, as on ARMv8 (hyp_arch_arm).
    fn timer_ppi() -> u32 {
        hyp_arch_arm::image::timer_ppi()
    }

    fn set_timer_ppi_active(cpu: usize, active: bool) {
        hyp_arch_arm::image::set_timer_ppi_active::<Armv7>(cpu, active);
    }
}

/// The ID registers of the CPU this runs on: the AArch32 ones (CRn 0, CRm 1 and 2: ID_PFR0 to
/// ID_ISAR5 and ID_MMFR4; MVFR0 and MVFR1, which VMRS reads), found by the encoding of their
/// AArch64 views (S3_0_C0_C<crm>_<op2>, ARM ARM D17.2); the AArch64-only ones read as zero,
/// as on an ARMv7 CPU.
#[derive(Default)]
pub struct HardwareIdRegisters;

impl IdRegisters for HardwareIdRegisters {
    fn read(&self, register: Encoding) -> u64 {
        use aarch32_cpu::register::*;
        let Encoding(_, _, _, crm, op2) = register;
        u64::from(match (crm, op2) {
            (1, 0) => IdPfr0::read().0,
            (1, 1) => IdPfr1::read().0,
            (1, 2) => IdDfr0::read().0,
            (1, 3) => IdAfr0::read().0,
            (1, 4) => IdMmfr0::read().0,
            (1, 5) => IdMmfr1::read().0,
            (1, 6) => IdMmfr2::read().0,
            (1, 7) => IdMmfr3::read().0,
            (2, 0) => IdIsar0::read().0,
            (2, 1) => IdIsar1::read().0,
            (2, 2) => IdIsar2::read().0,
            (2, 3) => IdIsar3::read().0,
            (2, 4) => IdIsar4::read().0,
            (2, 5) => IdIsar5::read().0,
            (2, 6) => IdMmfr4::read().0,
            (3, 0) => mvfr(Mvfr::Mvfr0),
            (3, 1) => mvfr(Mvfr::Mvfr1),
            _ => 0,
        })
    }
}

/// The floating-point feature registers an ARMv7 CPU has (MVFR2 is ARMv8's).
enum Mvfr {
    Mvfr0,
    Mvfr1,
}

/// MVFR0 or MVFR1, read with VMRS: readable in Hyp mode whatever FPEXC.EN (the ARMv7 ARM's
/// VMRS: only an FPSCR access checks it), and reading it touches no floating-point register
/// (the hypervisor never does: it is built soft-float, and a running vCPU's VFP state stays
/// in the CPU).
fn mvfr(which: Mvfr) -> u32 {
    let v: u32;
    // SAFETY: reads an ID register; no floating-point register or state is touched.
    unsafe {
        match which {
            Mvfr::Mvfr0 => asm!(".fpu vfpv3", "vmrs {}, mvfr0", out(reg) v, options(nomem, nostack, preserves_flags)),
            Mvfr::Mvfr1 => asm!(".fpu vfpv3", "vmrs {}, mvfr1", out(reg) v, options(nomem, nostack, preserves_flags)),
        }
    }
    v
}

/// Takes this CPU out of any VM's translation regime (HCR.VM off, no VTTBR), so no walk can
/// reach a VM's tables once they are freed; the guest's virtual timer is stopped so it cannot
/// interrupt an idle CPU.
fn leave_guest_regime() {
    Hcr::write(Hcr::new_with_raw_value(0));
    // SAFETY: at HYP mode with no guest running on this CPU: no stage-2 tables.
    unsafe { Vttbr::write(0) };
    vcpu_state::stop_timer();
}
