//! The physical CPUs of this image: HTPIDR points at each CPU's `hyp_arch_arm::cpus::PerCpu`,
//! the other CPUs start in HYP mode through PSCI CPU_ON (`secondary_entry`, boot.rs), or
//! through the pen when the board releases them all alike (`pen_entry`, boot.rs; `PEN`),
//! with what `hyp_arch_arm::cpus::CpuStarts` gives them.

use aarch32_cpu::register::{Htpidr, Mpidr};
use hyp_arch_arm::cpus::{self, CpuStarts, Pen, SecondaryBoot};
use hyp_core::platform::Platform;

use crate::arch::HYPERVISOR;
use crate::mmu::MmuRegisters;

/// What a starting CPU reads with its MMU off (boot.rs reads it at its fields' offsets).
pub type Boot = SecondaryBoot<MmuRegisters>;

static STARTS: CpuStarts<MmuRegisters> = CpuStarts::new(MmuRegisters { hmair0: 0, htcr: 0, hsctlr: 0, httbr: 0 });

/// What CPU `index` reads with its MMU off when it starts (hyp_arch_arm::image::ArmImage),
/// cleaned to memory: its address. 0 before the boot CPU's MMU is on.
pub fn prepare_start(index: usize) -> u64 {
    let clean = |start, end| crate::mmu::dcache_range(start, end, crate::mmu::DcOp::Clean);
    // SAFETY: the boot flow calls this on the boot CPU, before it starts CPU `index`.
    crate::MMU_REGISTERS.get().map_or(0, |&regs| unsafe { STARTS.prepare(index, regs, clean) })
}

/// Where CPUs that Versatile Express's firmware releases wait to be let through (boot.rs,
/// `pen_entry`, reads it with its MMU off).
pub static PEN: Pen = Pen::new();

/// Lets CPU `index` through the pen with `boot` (`prepare_start`'s), cleaned to memory, and
/// wakes the CPUs waiting in it (SEV).
pub fn open_pen(index: usize, boot: u64) {
    let clean = |start, end| crate::mmu::dcache_range(start, end, crate::mmu::DcOp::Clean);
    PEN.open(index, cpus::mpidr_of(index), boot, clean);
    // `dcache_range` ended with a DSB: the entry is in memory before the event.
    aarch32_cpu::asm::sev();
}

/// The CPSR a CPU that came to the pen in a mode other than HYP left there, if one did.
pub fn pen_refusal() -> Option<usize> {
    PEN.refusal(|start, end| crate::mmu::dcache_range(start, end, crate::mmu::DcOp::Invalidate))
}

/// This CPU's MPIDR affinity (B4.1.106).
pub fn mpidr() -> u64 {
    u64::from(Mpidr::read().0) & cpus::MPIDR_AFFINITY_MASK
}

/// This CPU's index in the device tree's CPU list: one register read once it is online.
#[inline]
pub fn current_index() -> usize {
    cpus::index(Htpidr::read().0 as usize, mpidr)
}

/// The board's CPUs, as the device tree lists them; this CPU (the boot CPU) enters its
/// `PerCpu` (HTPIDR is UNKNOWN until then).
pub fn record_cpus(platform: &Platform<'_>) {
    enter_per_cpu(cpus::record_cpus(platform, mpidr()));
}

/// From now on HTPIDR of this CPU, CPU `index`, points at its `PerCpu`.
fn enter_per_cpu(index: usize) {
    // SAFETY: HTPIDR is the hypervisor's own (guests cannot reach HYP registers): the guest
    // exit path and `current_index` read it, and it points at this CPU's entry of a static
    // for the rest of the run.
    unsafe { Htpidr::write(Htpidr(cpus::entry(index) as u32)) };
}

/// Makes CPU `index` leave the guest it runs (or its WFI) and look at its state again.
pub fn kick(index: usize) {
    crate::gic::GIC.send_sgi(index, || cpus::mpidr_of(index), crate::gic::KICK_SGI);
}

/// Waits in WFI until an interrupt (a kick, console input) comes; interrupts that woke it are
/// acknowledged and ended here, since the hypervisor runs with them masked. A kick sent
/// before the WFI is pending, so the WFI returns at once: no wake-up is lost.
pub fn idle() {
    aarch32_cpu::asm::wfi();
    HYPERVISOR.take_interrupts(None);
}

/// One step of a bounded wait for another CPU (YIELD: an emulator running CPUs in turn goes
/// on to the next one at once).
pub fn wait_a_little() {
    // SAFETY: a hint; no effect on memory or registers.
    unsafe { core::arch::asm!("yield", options(nomem, nostack)) };
}

#[no_mangle]
extern "C" fn secondary_main(boot: &Boot) -> ! {
    let index = boot.cpu_index;
    enter_per_cpu(index);
    if !hyp_arch_arm::image::come_online::<crate::arch::Armv7>(index) {
        park()
    }
    cpu_loop(index)
}

/// A CPU's life after boot: the work other CPUs hand it (only the boot flow's check that it
/// answers a kick: this image has no test hooks), then the vCPUs the scheduler picks.
pub fn cpu_loop(cpu: usize) -> ! {
    loop {
        let _ = HYPERVISOR.cpus.take_work(cpu);
        if !HYPERVISOR.run_next(cpu) {
            idle();
        }
    }
}

pub fn park() -> ! {
    loop {
        aarch32_cpu::asm::wfe();
    }
}
