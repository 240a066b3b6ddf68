//! The runtime's `Arch` and `Virtualization` for AArch64 at EL2 (hyp_runtime::arch,
//! hyp_runtime::hypervisor), and the runtime state this image keeps for it.

use core::arch::asm;

use hyp_runtime::{Arch, Hypervisor};

use aarch64_cpu::registers::{Readable, ID_AA64MMFR0_EL1};
use hyp_core::bundle::{BootBundle, BundleError};
use hyp_core::platform::Platform;
use stage2::TableFormat;

use crate::memory::Stage2Tlb;
use crate::vm::OnCpu;

pub struct Aarch64;

impl Arch for Aarch64 {
    fn current_cpu() -> usize {
        crate::cpus::current_index()
    }

    fn kick_cpu(cpu: usize) {
        crate::cpus::kick(cpu);
    }

    /// The EL2 physical counter, the same on every CPU.
    fn now() -> u64 {
        sysreg!("cntpct_el0")
    }

    fn counter_frequency() -> u64 {
        sysreg!("cntfrq_el0")
    }

    /// YIELD: QEMU with `-icount` goes on to its next CPU, so a side core's polling does not
    /// spin through its whole turn of virtual time (docs/virtio.md, "The side core").
    fn pause() {
        crate::cpus::wait_a_little();
    }

    /// This CPU's EL2 physical timer (CNTHP, ARM ARM D12.8).
    fn set_hyp_timer(deadline: Option<u64>) {
        match deadline {
            // SAFETY: this CPU's EL2 physical timer belongs to the hypervisor: compare value,
            // then enabled and unmasked (CNTHP_CTL_EL2.ENABLE).
            Some(d) => unsafe {
                asm!("msr cnthp_cval_el2, {}", "msr cnthp_ctl_el2, {}", "isb", in(reg) d, in(reg) 1u64)
            },
            // SAFETY: as above; disabled.
            None => unsafe { asm!("msr cnthp_ctl_el2, xzr", "isb") },
        }
    }

    /// Through GICD_ICACTIVER, which any CPU may write.
    fn deactivate_spi(intid: u32) {
        hyp_arch_arm::image::deactivate::<Aarch64>(vgic::IntId(intid), Self::current_cpu());
    }

    fn vlpis() -> Option<&'static dyn hyp_runtime::direct_lpis::BoardVlpis> {
        hyp_arch_arm::image::board_vlpis()
    }
}

/// The state every CPU shares: the scheduler, the interrupt routes, the VMs.
pub static HYPERVISOR: Hypervisor<Aarch64> = Hypervisor::new();

// Everything of it but running a vCPU (`vm::OnCpu`) is hyp_arch_arm's, shared with ARMv7.
hyp_arch_arm::arm_virtualization!(Aarch64, OnCpu);

impl hyp_arch_arm::image::ArmImage for Aarch64 {
    const AARCH64_GUESTS: bool = true;
    const MODE: &'static str = "AArch64, EL2";
    type Board = hyp_board_qemu_virt::QemuVirt;
    type Icc = crate::gic::Icc;

    fn gic() -> &'static hyp_arch_arm::Gic<crate::gic::Icc> {
        &crate::gic::GIC
    }

    fn hypervisor() -> &'static Hypervisor<Aarch64> {
        &HYPERVISOR
    }

    fn mpidr() -> u64 {
        crate::cpus::mpidr()
    }

    fn init_this_cpu() {
        crate::debug_hw::init_cpu();
    }

    fn prepare_cpu_start(index: usize) -> u64 {
        crate::cpus::prepare_start(index)
    }

    fn cpu_entry() -> u64 {
        crate::boot::secondary_entry as *const () as u64
    }

    /// No pen: AArch64 boards start their CPUs through PSCI or spin tables, each CPU to its
    /// own context; the board that releases CPUs alike (Versatile Express) has 32-bit cores.
    fn open_pen(_index: usize, _boot: u64) -> Option<u64> {
        None
    }

    fn pen_refusal() -> Option<usize> {
        None
    }

    fn spin_table_entry() -> Option<u64> {
        Some(crate::boot::spin_table_entry as *const () as u64)
    }

    fn clean_to_point_of_coherency(start: u64, end: u64) {
        crate::mmu::clean_dcache_range(start, end);
    }

    fn send_event() {
        aarch64_cpu::asm::sev();
    }

    fn wait_a_little() {
        crate::cpus::wait_a_little();
    }

    fn probe_board(platform: &Platform<'_>) -> Option<u64> {
        hyp_board_qemu_virt::virtio::probe_and_report(platform)
    }

    /// VMSAv8-64 stage 2 over this CPU's physical address size (ID_AA64MMFR0_EL1.PARange,
    /// ARM ARM D24.2.64, at most 48 bits), the guests' IPA size within it.
    fn stage2_format() -> TableFormat {
        let pa_bits = match ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::PARange) {
            0 => 32,
            1 => 36,
            2 => 40,
            3 => 42,
            4 => 44,
            _ => 48,
        };
        TableFormat::Vmsav8_64 { ipa_bits: hyp_core::guest_map::IPA_BITS.min(pa_bits), pa_bits }
    }

    fn apply_options(bundle: &BootBundle<'static>, me: usize) -> Result<Option<usize>, BundleError<'static>> {
        crate::apply_options(bundle, me)
    }

    fn stop(clean: bool) -> ! {
        crate::finish(clean)
    }

    type Stage2Tlb = Stage2Tlb;

    fn stage2_tlb(vttbr: u64) -> Stage2Tlb {
        Stage2Tlb { vttbr }
    }

    fn zero_for_guest(pa: u64, len: u64) {
        crate::memory::zero_for_guest(pa, len);
    }

    fn copy_to_guest(dst: &mut [u8], src: &[u8]) {
        crate::memory::copy_fast(dst, src);
    }

    fn make_visible_to_guest(pa: u64, len: u64) {
        crate::memory::make_visible_to_guest(pa, len);
    }

    fn clean_for_guest(pa: u64, len: u64) {
        crate::mmu::clean_dcache_range(pa, pa + len);
    }
}
