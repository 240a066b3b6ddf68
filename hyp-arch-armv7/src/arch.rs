//! The runtime's `Arch` and `Virtualization` for ARMv7 in HYP mode (hyp_runtime::arch,
//! hyp_runtime::hypervisor), and the runtime state this image keeps for it.

use aarch32_cpu::register::{CntPct, Cntfrq, CnthpCtl};
use hyp_core::bundle::{BootBundle, BundleError};
use hyp_core::platform::Platform;
use hyp_runtime::{Arch, Hypervisor};
use stage2::TableFormat;

use crate::memory::Stage2Tlb;
use crate::sysregs::CnthpCval;
use crate::vm::OnCpu;

pub struct Armv7;

impl Arch for Armv7 {
    /// The physical counter (CNTPCT), the same on every CPU.
    fn now() -> u64 {
        CntPct::read().0
    }

    /// CNTFRQ, as the firmware set it.
    fn counter_frequency() -> u64 {
        u64::from(Cntfrq::read().0)
    }

    /// This CPU's Hyp physical timer (CNTHP, ARM ARM B8.1.2; its compare value through
    /// sysregs.rs, not `aarch32-cpu`'s).
    fn set_hyp_timer(deadline: Option<u64>) {
        match deadline {
            Some(d) => {
                // SAFETY: the Hyp timer is the hypervisor's own; any compare value is valid.
                unsafe { CnthpCval::write(d) };
                CnthpCtl::write(CnthpCtl::new_with_raw_value(0).with_enable(true).with_imask(false));
            }
            None => CnthpCtl::write(CnthpCtl::new_with_raw_value(0)),
        }
        aarch32_cpu::asm::isb();
    }

    /// Through GICD_ICACTIVER, which any CPU may write.
    fn deactivate_spi(intid: u32) {
        hyp_arch_arm::image::deactivate::<Armv7>(vgic::IntId(intid), Self::current_cpu());
    }

    fn vlpis() -> Option<&'static dyn hyp_runtime::direct_lpis::BoardVlpis> {
        hyp_arch_arm::image::board_vlpis()
    }

    /// Its VMs have GICv2s (gic.rs), whose SGIs are not posted.
    const POSTS_SGIS: bool = false;

    /// From HTPIDR (cpus.rs).
    fn current_cpu() -> usize {
        crate::cpus::current_index()
    }

    /// An SGI through GICD_SGIR.
    fn kick_cpu(cpu: usize) {
        crate::cpus::kick(cpu);
    }
}

/// The state every CPU shares: the scheduler, the interrupt routes, the VMs.
pub static HYPERVISOR: Hypervisor<Armv7> = Hypervisor::new();

// Everything of it but running a vCPU (`vm::OnCpu`) is hyp_arch_arm's, shared with ARMv8.
hyp_arch_arm::arm_virtualization!(Armv7, OnCpu);

impl hyp_arch_arm::image::ArmImage for Armv7 {
    const AARCH64_GUESTS: bool = false;
    const MODE: &'static str = "ARMv7, HYP mode";
    type Board = hyp_board_qemu_virt::QemuVirt;
    /// A GICv3 is refused at boot (main.rs).
    type Icc = crate::gic::NoGicV3;
    type Stage2Tlb = Stage2Tlb;

    /// ARMv7 LPAE stage 2 (40-bit IPA and PA).
    fn stage2_format() -> TableFormat {
        TableFormat::ArmV7Lpae
    }

    fn stage2_tlb(vttbr: u64) -> Stage2Tlb {
        Stage2Tlb { vttbr }
    }

    fn zero_for_guest(pa: u64, len: u64) {
        crate::memory::zero_for_guest(pa, len);
    }

    fn copy_to_guest(dst: &mut [u8], src: &[u8]) {
        dst.copy_from_slice(src);
    }

    fn make_visible_to_guest(pa: u64, len: u64) {
        crate::memory::make_visible_to_guest(pa, len);
    }

    fn clean_for_guest(pa: u64, len: u64) {
        crate::mmu::dcache_range(pa, pa + len, crate::mmu::DcOp::Clean);
    }

    fn probe_board(platform: &Platform<'_>) -> Option<u64> {
        hyp_board_qemu_virt::virtio::probe_and_report(platform)
    }

    /// This image has no test hooks: it refuses a bundle that asks for one.
    fn apply_options(bundle: &BootBundle<'static>, _me: usize) -> Result<Option<usize>, BundleError<'static>> {
        bundle.options.check_no_test_hooks().map(|()| None)
    }

    fn init_this_cpu() {}

    fn cpu_entry() -> u64 {
        crate::boot::secondary_entry as *const () as u64
    }

    /// Spin tables are an arm64 boot protocol (Documentation/arch/arm64/booting.rst); no
    /// ARMv7 board this image knows starts its CPUs so.
    fn spin_table_entry() -> Option<u64> {
        None
    }

    fn open_pen(index: usize, boot: u64) -> Option<u64> {
        crate::cpus::open_pen(index, boot);
        Some(crate::boot::pen_entry as *const () as u64)
    }

    fn pen_refusal() -> Option<usize> {
        crate::cpus::pen_refusal()
    }

    fn clean_to_point_of_coherency(start: u64, end: u64) {
        crate::mmu::dcache_range(start, end, crate::mmu::DcOp::Clean);
    }

    fn send_event() {
        aarch32_cpu::asm::sev();
    }

    fn prepare_cpu_start(index: usize) -> u64 {
        crate::cpus::prepare_start(index)
    }

    fn mpidr() -> u64 {
        crate::cpus::mpidr()
    }

    fn wait_a_little() {
        crate::cpus::wait_a_little();
    }

    fn stop(clean: bool) -> ! {
        crate::finish(clean)
    }

    fn hypervisor() -> &'static Hypervisor<Armv7> {
        &HYPERVISOR
    }

    fn gic() -> &'static hyp_arch_arm::Gic<crate::gic::NoGicV3> {
        &crate::gic::GIC
    }
}
