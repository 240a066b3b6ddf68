//! The physical CPUs of this image: TPIDR_EL2 points at each CPU's
//! `hyp_arch_arm::cpus::PerCpu`, the other CPUs start through PSCI CPU_ON with what
//! `hyp_arch_arm::cpus::CpuStarts` gives them (which CPUs are online, and their boot-time
//! work: hyp_runtime::cpus).

use hyp_arch_arm::cpus::{self, CpuStarts, SecondaryBoot};
use hyp_core::platform::Platform;

use crate::arch::HYPERVISOR;
use crate::mmu::{self, MmuRegisters};

/// The boot-time work of the test hooks (hyp_runtime::cpus): take the deliberate EL2 fault.
#[cfg(feature = "test-hooks")]
pub const WORK_EL2_FAULT: usize = 1;

/// What a starting CPU reads with its MMU off (layout used by `secondary_entry`).
pub type Boot = SecondaryBoot<MmuRegisters>;

static STARTS: CpuStarts<MmuRegisters> = CpuStarts::new(MmuRegisters { mair: 0, tcr: 0, ttbr0: 0, sctlr: 0 });

pub fn mpidr() -> u64 {
    sysreg!("mpidr_el1") & cpus::MPIDR_AFFINITY_MASK
}

/// This CPU's index in the device tree's CPU list: one register read once it is online.
pub fn current_index() -> usize {
    cpus::index(sysreg!("tpidr_el2") as usize, mpidr)
}

/// The board's CPUs, as the device tree lists them; this CPU (the boot CPU) enters its
/// `PerCpu` (TPIDR_EL2 is UNKNOWN until then).
pub fn record_cpus(platform: &Platform<'_>) {
    enter_per_cpu(cpus::record_cpus(platform, mpidr()));
}

/// From now on TPIDR_EL2 of this CPU, CPU `index`, points at its `PerCpu`.
fn enter_per_cpu(index: usize) {
    let entry = cpus::entry(index) as u64;
    // SAFETY: TPIDR_EL2 is the hypervisor's own: the guest exit path and `current_index`
    // read it, and it points at this CPU's entry of a static for the rest of the run.
    unsafe { core::arch::asm!("msr tpidr_el2, {}", in(reg) entry, options(nostack)) };
}

/// Makes CPU `index` leave the guest it runs (or its WFI) and look at its state again.
pub fn kick(index: usize) {
    crate::gic::GIC.send_sgi(index, || cpus::mpidr_of(index), crate::gic::KICK_SGI);
}

/// Waits in WFI until an interrupt (a kick, console input) comes; interrupts that woke it are
/// acknowledged and ended here, since the hypervisor runs with them masked. A kick sent
/// before the WFI is pending, so the WFI returns at once: no wake-up is lost.
pub fn idle() {
    aarch64_cpu::asm::wfi();
    drain_interrupts();
}

/// Takes every pending physical interrupt (hyp_runtime::hypervisor::interrupts): the
/// kick SGIs carry no data; console input is handed on.
pub fn drain_interrupts() {
    HYPERVISOR.take_interrupts(None);
}

/// One step of a bounded wait for another CPU. YIELD tells the machine that this CPU only
/// waits: an emulator running CPUs in turn (QEMU with `-icount`) goes on to the next one at
/// once, instead of letting this one spin through its whole turn.
pub fn wait_a_little() {
    // SAFETY: a hint; no effect on memory or registers.
    unsafe { core::arch::asm!("yield", options(nomem, nostack)) };
}

/// What CPU `index` reads with its MMU off when it starts (hyp_arch_arm::image::ArmImage),
/// cleaned to memory: its address.
pub fn prepare_start(index: usize) -> u64 {
    let Some(&regs) = crate::MMU_REGISTERS.get() else { return 0 };
    // SAFETY: the boot flow calls this on the boot CPU, before it starts CPU `index`.
    unsafe { STARTS.prepare(index, regs, mmu::clean_dcache_range) }
}

#[no_mangle]
extern "C" fn secondary_main(boot: &Boot) -> ! {
    let index = boot.cpu_index;
    enter_per_cpu(index);
    if !hyp_arch_arm::image::come_online::<crate::arch::Aarch64>(index) {
        park()
    }
    crate::cpu_loop(index)
}

pub fn park() -> ! {
    loop {
        aarch64_cpu::asm::wfe();
    }
}
