//! The physical CPUs: which one this is, starting the others through PSCI CPU_ON with their
//! own stacks, and handing them work.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use hyp_core::platform::{Platform, MAX_CPUS};
use hyp_runtime::interrupts::Route;

use crate::firmware;
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

static ONLINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// MPIDR affinity of each CPU index, as the device tree listed them.
static MPIDRS: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(usize::MAX) }; MAX_CPUS];
/// Boot-time work for a CPU beside its vCPUs (which the scheduler gives): 0 = none,
/// `WORK_PING` or `WORK_EL2_FAULT` (`main::cpu_loop`).
static WORK: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];

pub const WORK_EL2_FAULT: usize = usize::MAX;

const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

fn mpidr() -> u64 {
    crate::exceptions::sysreg!("mpidr_el1") & MPIDR_AFFINITY_MASK
}

/// This CPU's index in the device tree's CPU list.
pub fn current_index() -> usize {
    let me = mpidr() as usize;
    MPIDRS.iter().position(|m| m.load(Ordering::Relaxed) == me).unwrap_or(0)
}

pub fn record_cpus(platform: &Platform<'_>) {
    for (i, m) in platform.cpus.iter().enumerate() {
        MPIDRS[i].store((*m & MPIDR_AFFINITY_MASK) as usize, Ordering::Relaxed);
    }
}

pub fn mpidr_of(index: usize) -> u64 {
    MPIDRS.get(index).map_or(0, |m| m.load(Ordering::Relaxed) as u64)
}

/// Hands CPU `index` work and wakes it with an SGI.
pub fn give_work(index: usize, work: usize) {
    WORK[index].store(work, Ordering::Release);
    crate::gic::send_sgi(index, mpidr_of(index), crate::gic::SGI_KICK);
}

/// Makes CPU `index` leave the guest it runs (or its WFI) and look at its state again.
pub fn kick(index: usize) {
    crate::gic::send_sgi(index, mpidr_of(index), crate::gic::SGI_KICK);
}

/// Takes this CPU's boot-time work, if any.
pub fn take_work(index: usize) -> usize {
    WORK.get(index).map_or(0, |w| w.swap(0, Ordering::AcqRel))
}

/// Waits in WFI until an interrupt (a kick, console input) comes; interrupts that woke it are
/// acknowledged and ended here, since the hypervisor runs with them masked. A kick sent
/// before the WFI is pending, so the WFI returns at once: no wake-up is lost.
pub fn idle() {
    aarch64_cpu::asm::wfi();
    drain_interrupts();
}

/// Acknowledges and ends every pending physical interrupt: the kick SGIs carry no data;
/// console input is handed on.
pub fn drain_interrupts() {
    loop {
        let iar = crate::gic::acknowledge();
        let intid = crate::gic::interrupt_id(iar);
        if intid >= crate::gic::SPURIOUS {
            break;
        }
        match crate::arch::ROUTES.of(intid) {
            Route::Passthrough if crate::passthrough::forward(intid, iar) => continue,
            Route::ConsoleInput => crate::input::uart_interrupt(),
            Route::Uplink => crate::network::uplink_interrupt(),
            Route::HypTimer => crate::arch::SCHEDULING.timer_fired(current_index(), crate::vm::wake_waiting),
            _ => {}
        }
        crate::gic::end_of_interrupt(iar);
    }
}

/// Work value of the boot-time SGI check: answer in `PONG`.
pub const WORK_PING: usize = usize::MAX - 1;
pub static PONG: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Sends each other online CPU an SGI and counts the answers: proves the physical GIC path
/// that later carries vCPU kicks.
pub fn check_sgis() -> (usize, usize) {
    let me = current_index();
    let others: heapless::Vec<usize, MAX_CPUS> = (0..MAX_CPUS).filter(|&c| c != me && is_online(c)).collect();
    for &c in &others {
        give_work(c, WORK_PING);
    }
    let answered = others
        .iter()
        .filter(|&&c| {
            let mut spins = 0u64;
            while !PONG[c].load(Ordering::Acquire) && spins < 100_000_000 {
                wait_a_little();
                spins += 1;
            }
            PONG[c].load(Ordering::Acquire)
        })
        .count();
    (answered, others.len())
}

/// One step of a bounded wait for another CPU. YIELD tells the machine that this CPU only
/// waits: an emulator running CPUs in turn (QEMU with `-icount`) goes on to the next one at
/// once, instead of letting this one spin through its whole turn.
fn wait_a_little() {
    // SAFETY: a hint; no effect on memory or registers.
    unsafe { core::arch::asm!("yield", options(nomem, nostack)) };
}

pub fn online_count() -> usize {
    ONLINE.iter().filter(|o| o.load(Ordering::Acquire)).count()
}

pub fn is_online(index: usize) -> bool {
    ONLINE.get(index).is_some_and(|o| o.load(Ordering::Acquire))
}

/// Starts every other CPU and waits for each to report online (or gives up on it after a
/// bounded wait, saying so).
pub fn start_secondaries(platform: &Platform<'_>, mmu_regs: &MmuRegisters) {
    let me = current_index();
    ONLINE[me].store(true, Ordering::Release);
    println!("hypervisor: cpu{me} (MPIDR {:#x}) online (boot CPU)", mpidr());
    for (index, &target) in platform.cpus.iter().enumerate() {
        if index == me {
            continue;
        }
        // SAFETY: only the boot CPU writes these, before starting the CPU that reads them.
        let boot = unsafe {
            let stack_top = (&raw const STACKS[index]) as u64 + STACK_SIZE as u64;
            #[allow(clippy::deref_addrof)] // a `static mut` reached through a raw pointer
            let boot = &mut (*(&raw mut SECONDARY_BOOT))[index];
            *boot = SecondaryBoot { stack_top, mmu: *mmu_regs, cpu_index: index as u64 };
            boot as *const SecondaryBoot as u64
        };
        // The new CPU reads it with its MMU off, from memory.
        mmu::clean_dcache_range(boot, boot + core::mem::size_of::<SecondaryBoot>() as u64);
        let status = firmware::cpu_on(target, crate::boot::secondary_entry as *const () as u64, boot);
        if status != 0 {
            println!("hypervisor: cpu{index} (MPIDR {target:#x}) did not start: PSCI CPU_ON returned {status}");
            continue;
        }
        let mut spins = 0u64;
        while !ONLINE[index].load(Ordering::Acquire) && spins < 200_000_000 {
            wait_a_little();
            spins += 1;
        }
        if !ONLINE[index].load(Ordering::Acquire) {
            println!("hypervisor: cpu{index} (MPIDR {target:#x}) started but never reported online");
        }
    }
}

#[no_mangle]
extern "C" fn secondary_main(boot: &SecondaryBoot) -> ! {
    let index = boot.cpu_index as usize;
    if let Err(e) = crate::gic::init_cpu(index, mpidr(), &crate::board_ppis()) {
        println!("hypervisor: cpu{index} (MPIDR {:#x}): GIC: {e:?}; this CPU stays off", mpidr());
        park()
    }
    crate::debug_hw::init_cpu();
    println!("hypervisor: cpu{index} (MPIDR {:#x}) online", mpidr());
    ONLINE[index].store(true, Ordering::Release);
    crate::cpu_loop(index)
}

pub fn park() -> ! {
    loop {
        aarch64_cpu::asm::wfe();
    }
}
