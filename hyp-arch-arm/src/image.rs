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
    /// The architecture and mode, as the banner says them ("AArch64, EL2").
    const MODE: &'static str;
    /// Whether the CPU can run a guest whose EL1 is AArch64 (ARMv8), or only AArch32 ones.
    const AARCH64_GUESTS: bool;
    /// The board layer: its console, disk and NIC.
    type Board: Board;
    /// This CPU's GICv3 system-register interface (unused with a GICv2).
    type Icc: CpuInterfaceRegisters;
    /// TLB maintenance of one VM's stage 2.
    type Stage2Tlb: TlbMaintenance;

    fn gic() -> &'static Gic<Self::Icc>;
    fn hypervisor() -> &'static Hypervisor<Self>;

    // The CPUs.
    /// This CPU's MPIDR affinity.
    fn mpidr() -> u64;
    /// CPU `cpu`'s MPIDR affinity, as the device tree listed it.
    fn mpidr_of(cpu: usize) -> u64 {
        crate::cpus::mpidr_of(cpu)
    }
    /// What this CPU needs beside its GIC interface before it runs vCPUs.
    fn init_this_cpu();
    /// What CPU `index` reads with its MMU off when it starts (its stack, the MMU's
    /// registers, its index), written and cleaned to memory: its address, which CPU_ON
    /// passes the CPU.
    fn prepare_cpu_start(index: usize) -> u64;
    /// Where a started CPU begins, its MMU off: a physical address.
    fn cpu_entry() -> u64;
    /// Lets CPU `index` through the pen (`cpus::Pen`) with `boot` (what `prepare_cpu_start`
    /// returned for it), and returns where a CPU that the board releases with no argument
    /// begins, its MMU off: the pen's entry. None if this image has no pen.
    fn open_pen(index: usize, boot: u64) -> Option<u64>;
    /// The CPSR of a CPU that came to the pen in a mode this image cannot run in and stopped
    /// there, if one did.
    fn pen_refusal() -> Option<usize>;
    /// Where a CPU released from a spin table begins (a physical address: it finds its
    /// `SecondaryBoot` in `spin_table::SPIN_TABLE_CPUS`, then goes `cpu_entry`'s way); None
    /// on an image that does not drive spin tables.
    fn spin_table_entry() -> Option<u64>;
    /// Cleans `[start, end)` to the point of coherency, completed (a DSB): a CPU reading
    /// with its MMU off sees what this one wrote.
    fn clean_to_point_of_coherency(start: u64, end: u64);
    /// Wakes every CPU waiting in WFE (SEV).
    fn send_event();
    /// One step of a bounded wait for another CPU.
    fn wait_a_little();
    /// Stops the machine (`clean`: every VM ended cleanly); never returns.
    fn stop(clean: bool) -> !;

    // The board and the boot bundle.
    /// Finds the board's devices the hypervisor drives: its disk's size in sectors.
    fn probe_board(platform: &Platform<'_>) -> Option<u64>;
    /// What the boot bundle's options ask of the image (its test hooks, which an image
    /// without them refuses), before any VM is created: the CPU set aside for them, if any.
    fn apply_options(bundle: &BootBundle<'static>, me: usize) -> Result<Option<usize>, BundleError<'static>>;

    // The VMs' memory.
    /// The stage-2 format of this CPU on this board.
    fn stage2_format() -> TableFormat;
    /// TLB maintenance of the stage 2 whose VTTBR is `vttbr`.
    fn stage2_tlb(vttbr: u64) -> Self::Stage2Tlb;
    /// Zeroes `[pa, pa + len)` of a VM's RAM and cleans it to the point of coherency.
    fn zero_for_guest(pa: u64, len: u64);
    /// Copies `src` into `dst` (the same length), as fast as the CPU can.
    fn copy_to_guest(dst: &mut [u8], src: &[u8]);
    /// Cleans `[pa, pa + len)` to the point of coherency and invalidates the instruction
    /// cache: a guest starting with its MMU off reads memory, not the caches.
    fn make_visible_to_guest(pa: u64, len: u64);
    /// Cleans `[pa, pa + len)` to the point of coherency: a guest reading it as Device (or
    /// Non-cacheable) memory reads memory, not the caches the hypervisor wrote through.
    fn clean_for_guest(pa: u64, len: u64);
}

/// The PPIs the hypervisor takes: the GIC maintenance interrupt, the virtual timer
/// (forwarded to the vCPU running on this CPU) and the hypervisor timer (slices of vCPUs
/// that share a CPU, and blocked vCPUs' timers), as the device tree gives them.
pub(crate) static PPIS: Once<[u32; 3]> = Once::new();
/// This board's GICv2 virtual interface control frame (GICH), if its GIC is a GICv2 (the
/// list registers are then memory-mapped, the same kind on every CPU).
pub(crate) static GICH: Once<Option<usize>> = Once::new();

/// The board's GICv4.0, once the boot CPU brought it up for direct injection of LPIs
/// (`its::vlpis`); never on a board without one.
pub(crate) static VLPIS: Once<&'static dyn hyp_runtime::direct_lpis::BoardVlpis> = Once::new();

/// The board's GICv4.0 as the runtime's `Arch::vlpis` gives it.
#[inline(always)]
pub fn board_vlpis() -> Option<&'static dyn hyp_runtime::direct_lpis::BoardVlpis> {
    VLPIS.get().copied()
}

/// The GICv2 virtual interface control frame (GICH) the list registers are in, each CPU's
/// own bank at the same address; None on a GICv3 (or before the boot CPU looked).
pub fn gich_address() -> Option<usize> {
    GICH.get().copied().flatten()
}

/// The maintenance, virtual timer and hypervisor timer PPIs (QEMU `virt`'s until the boot
/// CPU has read the device tree).
pub fn board_ppis() -> [u32; 3] {
    PPIS.get().copied().unwrap_or([25, 27, 26])
}

/// The board's virtual timer PPI (the physical interrupt behind the guests' virtual timer).
pub fn timer_ppi() -> u32 {
    board_ppis()[1]
}

/// Holds the virtual timer's physical PPI active on CPU `cpu` (or not): what both images'
/// vCPUs do (hyp_runtime::vcpu_run::VcpuCpu).
pub fn set_timer_ppi_active<I: ArmImage>(cpu: usize, active: bool) {
    I::gic().set_active_private(timer_ppi(), cpu, active);
}

/// A hardware-mapped interrupt the guest will not deactivate, deactivated at the GIC: a PPI
/// on CPU `cpu`, or an SPI.
pub fn deactivate<I: ArmImage>(physical: vgic::IntId, cpu: usize) {
    if physical.is_private() {
        I::gic().clear_active_private(physical.0, cpu);
    } else {
        I::gic().deactivate_spi(physical.0);
    }
}

/// This CPU's list registers: the GICH frame of a GICv2, else (and until the boot CPU has
/// looked) the GICv3 system registers `S`.
#[inline]
pub fn list_registers<S: ListRegisterAccess>() -> ListRegisterFile<S> {
    match GICH.get() {
        // SAFETY: the device tree's GICH frame, which the identity map maps Device-nGnRE
        // (hyp_map), each CPU's own bank at the same address.
        Some(&Some(gich)) => unsafe { ListRegisterFile::v2(gich) },
        _ => ListRegisterFile::v3(),
    }
}

/// This CPU's GIC interface (with the hypervisor's PPIs) and what else it needs, on every
/// CPU, by that CPU.
pub fn init_cpu<I: ArmImage>(index: usize) -> Result<(), crate::GicError> {
    I::gic().init_cpu(index, I::mpidr(), &board_ppis())?;
    I::init_this_cpu();
    Ok(())
}

/// A CPU the boot flow started, its MMU on and its per-CPU register pointing at its
/// `cpus::PerCpu`: its GIC interface and what else it needs, then online. False, said on
/// the console, if its GIC interface cannot be set up: it stays off.
pub fn come_online<I: ArmImage>(index: usize) -> bool {
    if let Err(e) = init_cpu::<I>(index) {
        <I::Board as Board>::print(format_args!(
            "hypervisor: cpu{index} (MPIDR {:#x}): GIC: {e:?}; this CPU stays off",
            I::mpidr()
        ));
        return false;
    }
    <I::Board as Board>::print(format_args!("hypervisor: cpu{index} (MPIDR {:#x}) online", I::mpidr()));
    I::hypervisor().cpus.set_online(index);
    true
}

/// The runtime's `Virtualization` for ARM image `$image`, whose vCPUs run as `$cpu` (its
/// `hyp_runtime::vcpu_run::VcpuCpu`): all of it but running a vCPU is the same on ARMv7 and
/// ARMv8 (a VM is a `vm::ArmVm`, its stage-2 tables come from the heap, interrupts go
/// through the physical GIC), so both images implement it with this.
#[macro_export]
macro_rules! arm_virtualization {
    ($image:ty, $cpu:ty) => {
        impl hyp_runtime::Virtualization for $image {
            type Env = $crate::devices::Devices<$image>;
            type Vm = $crate::vm::ArmVm<$cpu>;

            fn grant_resources(
                caps: &mut hyp_core::cap::CapSpace,
                untyped: &[hyp_core::cap::CapId],
                request: &hyp_runtime::vm_resources::VmRequest<'_>,
            ) -> Result<hyp_runtime::vm_resources::VmResources, hyp_core::cap::CapError> {
                $crate::vm::grant_resources::<$image>(caps, untyped, request)
            }
            fn create_vm(
                build: hyp_runtime::vm::VmBuild<'_>,
                scheduling: &'static hyp_runtime::scheduling::Scheduling<Self>,
            ) -> Result<Self::Vm, hyp_runtime::vm::VmError> {
                $crate::vm::ArmVm::create(build, scheduling)
            }
            fn load_vm(vm: &Self::Vm) {
                vm.load();
            }
            fn reset_vm(vm: &Self::Vm, seeds: Option<hyp_core::entropy::GuestSeeds>) {
                vm.reset(seeds);
            }
            fn destroy_vm(caps: &mut hyp_core::cap::CapSpace, vm: &Self::Vm) -> Result<(), hyp_core::cap::CapError> {
                vm.destroy(caps)
            }
            fn run_vcpu(
                vm: &Self::Vm,
                vcpu: usize,
                cpu: usize,
                decision: &sched::Decision,
            ) -> hyp_runtime::hypervisor::VcpuExit {
                hyp_runtime::vcpu_run::run_vcpu::<$cpu>(vm, vcpu, cpu, decision)
            }
            fn acknowledge_interrupt() -> Option<(u32, u32)> {
                let iar = <$image as $crate::image::ArmImage>::gic().acknowledge();
                let intid = $crate::gic::interrupt_id(iar);
                $crate::gic::is_interrupt(intid).then_some((iar, intid))
            }
            fn end_interrupt(iar: u32) {
                <$image as $crate::image::ArmImage>::gic().end_of_interrupt(iar);
            }
            fn drop_interrupt_priority(iar: u32) {
                <$image as $crate::image::ArmImage>::gic().priority_drop(iar);
            }
            fn enable_interrupt(intid: u32, cpu: usize) {
                let mpidr = <$image as $crate::image::ArmImage>::mpidr_of(cpu);
                <$image as $crate::image::ArmImage>::gic().enable_spi(intid, cpu, mpidr);
            }
            fn disable_spi(intid: u32) {
                <$image as $crate::image::ArmImage>::gic().disable_spi(intid)
            }
            fn clear_spi(intid: u32) {
                <$image as $crate::image::ArmImage>::gic().clear_spi(intid)
            }
            fn configure_spi(intid: u32, edge: bool) {
                <$image as $crate::image::ArmImage>::gic().configure_spi(intid, edge)
            }
            fn spi_enabled(intid: u32) -> bool {
                <$image as $crate::image::ArmImage>::gic().spi_enabled(intid)
            }
            #[inline(always)]
            fn spi_pending(intid: u32) -> bool {
                <$image as $crate::image::ArmImage>::gic().spi_pending(intid)
            }
            fn heap_usage() -> (u64, u64) {
                ($crate::heap::in_use(), $crate::heap::HEAP_SIZE)
            }
            fn all_vms_ended(clean: bool) {
                <$image as $crate::image::ArmImage>::stop(clean)
            }
        }
    };
}
