//! The physical CPUs: what each keeps of its own (`PerCpu`, reached through TPIDR_EL2),
//! which one this is, starting the others through PSCI CPU_ON with their own stacks (which
//! CPUs are online, and their boot-time work: hyp_runtime::cpus).

use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::platform::{Platform, MAX_CPUS};

use crate::arch::HYPERVISOR;
use crate::mmu::{self, MmuRegisters};

const STACK_SIZE: usize = 64 * 1024;

#[repr(C, align(16))]
struct Stack([u8; STACK_SIZE]);

static mut STACKS: [Stack; MAX_CPUS] = [const { Stack([0; STACK_SIZE]) }; MAX_CPUS];

/// What a starting CPU reads with its MMU off (layout used by `secondary_entry`).
#[repr(C)]
pub struct SecondaryBoot {
    stack_top: u64,
    mmu: MmuRegisters,
    cpu_index: u64,
}

static mut SECONDARY_BOOT: [SecondaryBoot; MAX_CPUS] =
    [const { SecondaryBoot { stack_top: 0, mmu: MmuRegisters { mair: 0, tcr: 0, ttbr0: 0, sctlr: 0 }, cpu_index: 0 } };
        MAX_CPUS];

/// What one CPU keeps of its own. TPIDR_EL2 points at its entry in `PER_CPU` from the time
/// it is online, so finding it takes one register read.
#[repr(C)]
pub struct PerCpu {
    /// The `GuestContext` of the vCPU this CPU is running: the guest exit path stores the
    /// guest's registers there (exceptions.rs relies on it being the first field).
    guest: AtomicUsize,
    /// Its MPIDR affinity, as the device tree listed it.
    mpidr: AtomicUsize,
}

static PER_CPU: [PerCpu; MAX_CPUS] =
    [const { PerCpu { guest: AtomicUsize::new(0), mpidr: AtomicUsize::new(usize::MAX) } }; MAX_CPUS];

/// The boot-time work of the test hooks (hyp_runtime::cpus): take the deliberate EL2 fault.
#[cfg(feature = "test-hooks")]
pub const WORK_EL2_FAULT: usize = 1;

const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

pub fn mpidr() -> u64 {
    sysreg!("mpidr_el1") & MPIDR_AFFINITY_MASK
}

/// This CPU's index in the device tree's CPU list: from TPIDR_EL2 once it is online (an
/// address in `PER_CPU`), by its MPIDR before.
pub fn current_index() -> usize {
    let entry = sysreg!("tpidr_el2") as usize;
    let first = PER_CPU.as_ptr() as usize;
    match entry.checked_sub(first).map(|offset| offset / core::mem::size_of::<PerCpu>()) {
        Some(index) if index < MAX_CPUS => index,
        _ => {
            let me = mpidr() as usize;
            PER_CPU.iter().position(|c| c.mpidr.load(Ordering::Relaxed) == me).unwrap_or(0)
        }
    }
}

/// The board's CPUs, as the device tree lists them; this CPU (the boot CPU) enters its
/// `PerCpu` (TPIDR_EL2 is UNKNOWN until then).
pub fn record_cpus(platform: &Platform<'_>) {
    for (cpu, m) in PER_CPU.iter().zip(platform.cpus.iter()) {
        cpu.mpidr.store((*m & MPIDR_AFFINITY_MASK) as usize, Ordering::Relaxed);
    }
    let me = mpidr() as usize;
    enter_per_cpu(PER_CPU.iter().position(|c| c.mpidr.load(Ordering::Relaxed) == me).unwrap_or(0));
}

/// From now on TPIDR_EL2 of this CPU, CPU `index`, points at its `PerCpu`.
fn enter_per_cpu(index: usize) {
    let entry = &PER_CPU[index] as *const PerCpu as u64;
    // SAFETY: TPIDR_EL2 is the hypervisor's own: the guest exit path and `current_index`
    // read it, and it points at this CPU's entry of a static for the rest of the run.
    unsafe { core::arch::asm!("msr tpidr_el2, {}", in(reg) entry, options(nostack)) };
}

pub fn mpidr_of(index: usize) -> u64 {
    PER_CPU.get(index).map_or(0, |c| c.mpidr.load(Ordering::Relaxed) as u64)
}

/// Makes CPU `index` leave the guest it runs (or its WFI) and look at its state again.
pub fn kick(index: usize) {
    crate::gic::GIC.send_sgi(index, mpidr_of(index), crate::gic::KICK_SGI);
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
    let Some(&mmu) = crate::MMU_REGISTERS.get() else { return 0 };
    // SAFETY: only the boot CPU writes these, before starting the CPU that reads them.
    let boot = unsafe {
        let stack_top = (&raw const STACKS[index]) as u64 + STACK_SIZE as u64;
        #[allow(clippy::deref_addrof)] // a `static mut` reached through a raw pointer
        let boot = &mut (*(&raw mut SECONDARY_BOOT))[index];
        *boot = SecondaryBoot { stack_top, mmu, cpu_index: index as u64 };
        boot as *const SecondaryBoot as u64
    };
    mmu::clean_dcache_range(boot, boot + core::mem::size_of::<SecondaryBoot>() as u64);
    boot
}

#[no_mangle]
extern "C" fn secondary_main(boot: &SecondaryBoot) -> ! {
    let index = boot.cpu_index as usize;
    enter_per_cpu(index);
    if let Err(e) = hyp_arch_arm::image::init_cpu::<crate::arch::Aarch64>(index) {
        println!("hypervisor: cpu{index} (MPIDR {:#x}): GIC: {e:?}; this CPU stays off", mpidr());
        park()
    }
    println!("hypervisor: cpu{index} (MPIDR {:#x}) online", mpidr());
    HYPERVISOR.cpus.set_online(index);
    crate::cpu_loop(index)
}

pub fn park() -> ! {
    loop {
        aarch64_cpu::asm::wfe();
    }
}

const _: () = assert!(core::mem::offset_of!(PerCpu, guest) == 0);
