//! What an ARM image gives the code both images share (`ArmImage`: the steps that name its
//! architecture or its board), and what the boot CPU records for every CPU: the
//! hypervisor's PPIs and the kind of list registers.

use hyp_core::bundle::{BootBundle, BundleError};
use hyp_core::platform::Platform;
use hyp_runtime::{Board, Hypervisor, Virtualization};
use spin::Once;
use stage2::{TableFormat, TlbMaintenance};

use crate::gic::{CpuInterfaceRegisters, Gic};
use crate::list_registers::{ListRegisterAccess, ListRegisterFile};

/// What the shared code asks of the image: the steps that name its architecture or its
/// board.
pub trait ArmImage: Virtualization {
    /// The board layer: its console, disk and NIC.
    type Board: Board;
    /// This CPU's GICv3 system-register interface (unused with a GICv2).
    type Icc: CpuInterfaceRegisters;
    fn gic() -> &'static Gic<Self::Icc>;
    fn hypervisor() -> &'static Hypervisor<Self>;
    /// This CPU's MPIDR affinity.
    fn mpidr() -> u64;
    /// What this CPU needs beside its GIC interface before it runs vCPUs.
    fn init_this_cpu();
    /// What CPU `index` reads with its MMU off when it starts (its stack, the MMU's
    /// registers, its index), written and cleaned to memory: its address, which CPU_ON
    /// passes the CPU.
    fn prepare_cpu_start(index: usize) -> u64;
    /// Where a started CPU begins, its MMU off: a physical address.
    fn cpu_entry() -> u64;
    /// One step of a bounded wait for another CPU.
    fn wait_a_little();
    /// Finds the board's devices the hypervisor drives: its disk's size in sectors.
    fn probe_board(platform: &Platform<'_>) -> Option<u64>;
    /// The stage-2 format of this CPU on this board.
    fn stage2_format() -> TableFormat;
    /// What the boot bundle's options ask of the image (its test hooks, which an image
    /// without them refuses), before any VM is created: the CPU set aside for them, if any.
    fn apply_options(bundle: &BootBundle<'static>, me: usize) -> Result<Option<usize>, BundleError<'static>>;
    /// Stops the machine, failed; never returns.
    fn halt() -> !;
    /// TLB maintenance of the stage 2 whose VTTBR is `vttbr`.
    type Stage2Tlb: TlbMaintenance;
    fn stage2_tlb(vttbr: u64) -> Self::Stage2Tlb;
    /// Zeroes `[pa, pa + len)` of a VM's RAM and cleans it to the point of coherency.
    fn zero_for_guest(pa: u64, len: u64);
    /// Copies `src` into `dst` (the same length), as fast as the CPU can.
    fn copy_to_guest(dst: &mut [u8], src: &[u8]);
    /// Cleans `[pa, pa + len)` to the point of coherency and invalidates the instruction
    /// cache: a guest starting with its MMU off reads memory, not the caches.
    fn make_visible_to_guest(pa: u64, len: u64);
}

/// The PPIs the hypervisor takes: the GIC maintenance interrupt, the virtual timer
/// (forwarded to the vCPU running on this CPU) and the hypervisor timer (slices of vCPUs
/// that share a CPU, and blocked vCPUs' timers), as the device tree gives them.
pub(crate) static PPIS: Once<[u32; 3]> = Once::new();
/// This board's GICv2 virtual interface control frame (GICH), if its GIC is a GICv2 (the
/// list registers are then memory-mapped, the same kind on every CPU).
pub(crate) static GICH: Once<Option<usize>> = Once::new();

/// The maintenance, virtual timer and hypervisor timer PPIs (QEMU `virt`'s until the boot
/// CPU has read the device tree).
pub fn board_ppis() -> [u32; 3] {
    PPIS.get().copied().unwrap_or([25, 27, 26])
}

/// This CPU's list registers: the GICH frame of a GICv2, else (and until the boot CPU has
/// looked) the GICv3 system registers `S`.
#[inline]
pub fn list_registers<S: ListRegisterAccess>() -> ListRegisterFile<S> {
    match GICH.get() {
        // SAFETY: the device tree's GICH frame, which the identity map maps Device-nGnRE
        // (hyp_map), each CPU's own bank at the same address.
        Some(&Some(gich)) => unsafe { ListRegisterFile::v2(gich) },
        _ => ListRegisterFile::V3,
    }
}

/// This CPU's GIC interface (with the hypervisor's PPIs) and what else it needs, on every
/// CPU, by that CPU.
pub fn init_cpu<I: ArmImage>(index: usize) -> Result<(), crate::GicError> {
    I::gic().init_cpu(index, I::mpidr(), &board_ppis())?;
    I::init_this_cpu();
    Ok(())
}
