//! The physical CPUs as both ARM images keep them: what each CPU keeps of its own
//! (`PerCpu`, which the image's per-CPU register points at: TPIDR_EL2 on AArch64, HTPIDR in
//! HYP mode), which CPU this is, and what a CPU started through PSCI CPU_ON reads with its
//! MMU off (its stack, the MMU's registers, its index: `CpuStarts`). Which CPUs are online,
//! and their boot-time work, is the runtime's (hyp_runtime::cpus).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::platform::{Platform, MAX_CPUS};

/// The affinity fields of an MPIDR (Aff3 on AArch64, Aff2..Aff0): what the device tree's
/// `reg` of a CPU holds.
pub const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// What one CPU keeps of its own. The image's per-CPU register points at its entry in
/// `PER_CPU` from the time it is online, so finding it takes one register read.
#[repr(C)]
pub struct PerCpu {
    /// The guest registers of the vCPU this CPU is running: the guest exit path stores the
    /// guest's registers there (the images' exception code relies on it being the first
    /// field).
    pub guest: AtomicUsize,
    /// Its MPIDR affinity, as the device tree listed it.
    mpidr: AtomicUsize,
}

pub static PER_CPU: [PerCpu; MAX_CPUS] =
    [const { PerCpu { guest: AtomicUsize::new(0), mpidr: AtomicUsize::new(usize::MAX) } }; MAX_CPUS];

const _: () = assert!(core::mem::offset_of!(PerCpu, guest) == 0);

/// This CPU's index in the device tree's CPU list: from the per-CPU register's value `entry`
/// once it is online (an address in `PER_CPU`), by its MPIDR affinity before.
#[inline]
pub fn index(entry: usize, mpidr: impl FnOnce() -> u64) -> usize {
    let first = PER_CPU.as_ptr() as usize;
    match entry.checked_sub(first).map(|offset| offset / core::mem::size_of::<PerCpu>()) {
        Some(index) if index < MAX_CPUS => index,
        _ => position((mpidr() & MPIDR_AFFINITY_MASK) as usize).unwrap_or(0),
    }
}

fn position(mpidr: usize) -> Option<usize> {
    PER_CPU.iter().position(|c| c.mpidr.load(Ordering::Relaxed) == mpidr)
}

/// Records the board's CPUs, as the device tree lists them; returns the index of the CPU
/// whose MPIDR is `mine` (the boot CPU), which then enters its `PerCpu`.
pub fn record_cpus(platform: &Platform<'_>, mine: u64) -> usize {
    for (cpu, m) in PER_CPU.iter().zip(platform.cpus.iter()) {
        cpu.mpidr.store((*m & MPIDR_AFFINITY_MASK) as usize, Ordering::Relaxed);
    }
    position((mine & MPIDR_AFFINITY_MASK) as usize).unwrap_or(0)
}

/// The address of CPU `index`'s `PerCpu`: what its per-CPU register holds.
pub fn entry(index: usize) -> usize {
    &PER_CPU[index.min(MAX_CPUS - 1)] as *const PerCpu as usize
}

/// CPU `index`'s MPIDR affinity, as the device tree listed it.
pub fn mpidr_of(index: usize) -> u64 {
    PER_CPU.get(index).map_or(0, |c| c.mpidr.load(Ordering::Relaxed) as u64)
}

/// Each started CPU's stack.
pub const STACK_SIZE: usize = 64 * 1024;

#[repr(C, align(16))]
pub struct Stack([u8; STACK_SIZE]);

/// What a starting CPU reads with its MMU off (the image's entry code reads it at these
/// offsets): its stack's top, the registers that turn its MMU on (`M`, the image's), and
/// its index.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct SecondaryBoot<M> {
    pub stack_top: usize,
    pub mmu: M,
    pub cpu_index: usize,
}

/// The stacks of the CPUs started after the boot CPU, and what each reads when it starts.
pub struct CpuStarts<M> {
    stacks: UnsafeCell<[Stack; MAX_CPUS]>,
    boot: UnsafeCell<[SecondaryBoot<M>; MAX_CPUS]>,
}

// SAFETY: only the boot CPU writes a CPU's entry (`prepare`), before it starts that CPU,
// which alone reads it (and uses its stack) from then on.
unsafe impl<M> Sync for CpuStarts<M> {}

impl<M: Copy> CpuStarts<M> {
    /// `off`: the image's MMU registers before they are known.
    pub const fn new(off: M) -> Self {
        CpuStarts {
            stacks: UnsafeCell::new([const { Stack([0; STACK_SIZE]) }; MAX_CPUS]),
            boot: UnsafeCell::new([SecondaryBoot { stack_top: 0, mmu: off, cpu_index: 0 }; MAX_CPUS]),
        }
    }

    /// Writes what CPU `index` reads when it starts, and has `clean` (start, end) clean it to
    /// the point of coherency (the CPU reads it with its MMU off); returns its address, which
    /// CPU_ON passes the CPU.
    ///
    /// # Safety
    /// Called by the boot CPU only, before it starts CPU `index`.
    pub unsafe fn prepare(&self, index: usize, mmu: M, clean: impl FnOnce(u64, u64)) -> u64 {
        let index = index.min(MAX_CPUS - 1);
        // SAFETY: the caller's promise: no other CPU reads or writes these entries now.
        let stack_top = unsafe { (&raw const (*self.stacks.get())[index]) as usize + STACK_SIZE };
        // SAFETY: as above.
        let boot = unsafe { &mut (*self.boot.get())[index] };
        *boot = SecondaryBoot { stack_top, mmu, cpu_index: index };
        let at = boot as *const SecondaryBoot<M> as usize as u64;
        clean(at, at + core::mem::size_of::<SecondaryBoot<M>>() as u64);
        at
    }
}
