//! The shared vGIC: a change for a vCPU reaches it wherever it is (running on another CPU:
//! kicked; blocked in WFI: woken; on this CPU: its hint), and a bad access is an MMIO error.

use std::sync::atomic::Ordering;

use hyp_core::mmio::MmioError;
use hyp_core::syndrome::AccessWidth;
use sched::{Policy, VcpuState};
use vgic::{Distributor, GicVersion, VgicConfig};

use super::leak;
use crate::fake::FakeArch;
use crate::scheduling::{vcpu_ref, Scheduling};
use crate::shared_vgic::VgicHandle;

/// GICD_SGIR (GICv2): TargetListFilter 0, the CPU target list in bits [23:16].
const GICD_SGIR: u64 = 0xf00;

fn vgic(vcpus: usize) -> (&'static Scheduling<FakeArch>, VgicHandle<FakeArch>) {
    let scheduling = leak(Scheduling::new());
    scheduling.init(4);
    let config = VgicConfig { version: GicVersion::V2, vcpus, spis: 32 };
    (scheduling, VgicHandle::new(0, Distributor::new(config).unwrap(), scheduling))
}

#[test]
fn an_sgi_kicks_the_cpu_its_target_runs_on_and_hints_it() {
    let (_, vgic) = vgic(3);
    FakeArch::become_cpu(0);
    vgic.running_on[0].store(0, Ordering::Release);
    vgic.running_on[1].store(2, Ordering::Release);
    // vCPU 0 sends SGI 3 to vCPUs 1 and 2; vCPU 2 runs nowhere.
    vgic.write_distributor(0, GICD_SGIR, AccessWidth::Word, (0b110 << 16) | 3).unwrap();
    assert_eq!(FakeArch::take_kicks(), vec![2], "vCPU 1's CPU only: vCPU 2 is not on a CPU");
    assert!(vgic.take_hint(1) && vgic.take_hint(2));
    assert!(!vgic.take_hint(1), "a hint is taken once");
    assert!(!vgic.take_hint(0), "the sender had no change");
}

/// A guest may write any vCPU's redistributor frames (IHI 0069H 12.10): an SGI made
/// pending through another vCPU's GICR_ISPENDR0 reaches that vCPU where it runs.
#[test]
fn a_pending_bit_set_in_another_vcpus_redistributor_kicks_that_vcpu() {
    let scheduling = leak(Scheduling::new());
    scheduling.init(4);
    let config = VgicConfig { version: GicVersion::V3, vcpus: 2, spis: 32 };
    let vgic = VgicHandle::<FakeArch>::new(0, Distributor::new(config).unwrap(), scheduling);
    FakeArch::become_cpu(0);
    vgic.running_on[0].store(0, Ordering::Release);
    vgic.running_on[1].store(2, Ordering::Release);
    FakeArch::take_kicks();
    // vCPU 1's frames follow vCPU 0's two; GICR_ISENABLER0 then GICR_ISPENDR0 of its SGI frame.
    vgic.write_redistributor(0x2_0000 + 0x1_0100, AccessWidth::Word, 1 << 5).unwrap();
    FakeArch::take_kicks();
    let _ = vgic.take_hint(1);
    vgic.write_redistributor(0x2_0000 + 0x1_0200, AccessWidth::Word, 1 << 5).unwrap();
    assert!(vgic.take_hint(1), "vCPU 1 looks");
    assert_eq!(FakeArch::take_kicks(), vec![2], "on CPU 2, where it runs");
}

#[test]
fn a_vcpu_on_this_cpu_is_not_kicked() {
    let (_, vgic) = vgic(2);
    FakeArch::become_cpu(1);
    vgic.running_on[1].store(1, Ordering::Release);
    vgic.kick(0b10);
    assert!(FakeArch::take_kicks().is_empty());
}

#[test]
fn a_blocked_vcpu_is_woken_by_an_interrupt_for_it() {
    let (scheduling, vgic) = vgic(2);
    FakeArch::become_cpu(0);
    let v = vcpu_ref(0, 1);
    scheduling.add(v, 0, Policy::Shared { slice: 100 }).unwrap();
    scheduling.start(v).unwrap();
    assert_eq!(scheduling.pick(0).run, Some(v));
    assert!(scheduling.block(v, &vgic.waiting[1], || false));
    assert_eq!(scheduling.state(v), Some(VcpuState::Blocked));
    vgic.write_distributor(0, GICD_SGIR, AccessWidth::Word, (0b10 << 16) | 1).unwrap();
    assert_eq!(scheduling.state(v), Some(VcpuState::Runnable));
    assert!(!vgic.waiting[1].load(Ordering::SeqCst));
}

#[test]
fn kicks_and_hints_beyond_the_vcpus_are_ignored() {
    let (_, vgic) = vgic(2);
    vgic.hint(u32::MAX);
    vgic.kick(u32::MAX);
    assert!(!vgic.take_hint(usize::MAX));
    assert!(vgic.take_hint(0) && vgic.take_hint(1));
}

#[test]
fn bad_accesses_are_mmio_errors() {
    let (_, vgic) = vgic(1);
    let unaligned = vgic.read_distributor(0, 0x101, AccessWidth::Word);
    assert!(matches!(unaligned, Err(MmioError::BadWidth { offset: 0x101, .. })), "{unaligned:?}");
    assert!(vgic.read_distributor(0, 0x10_0000, AccessWidth::Word).is_err());
    assert!(vgic.write_redistributor(0, AccessWidth::Word, u64::MAX).is_err(), "GICv2 has no redistributors");
}

/// A passthrough device's edge SPI fired (its physical interrupt held active for the guest)
/// and the guest cleared it through GICD_ICPENDR before taking it: no deactivation of the
/// guest's will reach the physical one, so the write deactivates it at the board's GIC,
/// once (docs/vgic.md, "Hardware-mapped interrupts the guest discards").
#[test]
fn a_passthrough_spi_the_guest_clears_is_deactivated_at_the_board_s_gic() {
    let (_, vgic) = vgic(1);
    FakeArch::become_cpu(0);
    {
        let mut d = vgic.vgic.lock();
        d.write(0, 0x100 + 4, 4, 1 << 8).unwrap(); // GICD_ISENABLER1: SPI 40
        d.set_hw(vgic::IntId(40), 0, Some(vgic::IntId(72))).unwrap();
        d.inject_edge(vgic::IntId(40), 0).unwrap();
    }
    FakeArch::take_deactivated_spis();
    vgic.write_distributor(0, 0x280 + 4, AccessWidth::Word, 1 << 8).unwrap(); // GICD_ICPENDR1
    assert_eq!(FakeArch::take_deactivated_spis(), [72], "the physical SPI behind it");
    vgic.write_distributor(0, 0x280 + 4, AccessWidth::Word, 1 << 8).unwrap();
    assert!(FakeArch::take_deactivated_spis().is_empty(), "nothing is left to deactivate");
}

/// The copy the AArch64 vector answers GICD_CTLR from follows each write of it, refused
/// widths included, and a write elsewhere leaves it alone (vgic::ControlWords).
#[test]
fn the_vector_s_copy_of_gicd_ctlr_follows_the_guest_s_writes() {
    let (_, vgic) = vgic(2);
    let read = |offset| vgic.read_distributor(0, offset, AccessWidth::Word).unwrap() as u32;
    assert_eq!(vgic.control_words.read(0), Some(0), "GICv2 GICD_CTLR at reset");
    vgic.write_distributor(1, 0, AccessWidth::Word, u64::MAX).unwrap();
    assert_eq!(vgic.control_words.read(0), Some(0b11), "both groups' enables of a GICv2 distributor");
    assert!(vgic.write_distributor(0, 0, AccessWidth::Byte, 0).is_err(), "a byte of GICD_CTLR: refused");
    vgic.write_distributor(0, 0x100, AccessWidth::Word, 1).unwrap();
    for offset in [0, 4, 8, 0xc] {
        assert_eq!(vgic.control_words.read(offset), Some(read(offset)), "offset {offset:#x}");
    }
    vgic.write_distributor(0, 0, AccessWidth::Word, 0).unwrap();
    assert_eq!(vgic.control_words.read(0), Some(0));
}
