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

fn vgic_of(version: GicVersion, vcpus: usize) -> (&'static Scheduling<FakeArch>, VgicHandle<FakeArch>) {
    let scheduling = leak(Scheduling::new());
    scheduling.init(4);
    let config = VgicConfig { version, vcpus, spis: 32, lpis: 0 };
    (scheduling, VgicHandle::new(0, Distributor::new(config).unwrap(), scheduling))
}

fn vgic(vcpus: usize) -> (&'static Scheduling<FakeArch>, VgicHandle<FakeArch>) {
    vgic_of(GicVersion::V2, vcpus)
}

/// vCPU 1, sharing CPU 0, blocked in a trapped WFI.
fn block_vcpu_1(scheduling: &Scheduling<FakeArch>, vgic: &VgicHandle<FakeArch>) -> sched::VcpuRef {
    FakeArch::become_cpu(0);
    let v = vcpu_ref(0, 1);
    scheduling.add(v, 0, Policy::Shared { slice: 100 }).unwrap();
    scheduling.start(v).unwrap();
    assert_eq!(scheduling.pick(0).run, Some(v));
    assert!(scheduling.block(v, &vgic.waiting[1], || false));
    assert_eq!(scheduling.state(v), Some(VcpuState::Blocked));
    v
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
    let (_, vgic) = v3_vgic(2);
    FakeArch::become_cpu(0);
    vgic.running_on[0].store(0, Ordering::Release);
    vgic.running_on[1].store(2, Ordering::Release);
    FakeArch::take_kicks();
    // vCPU 1's frames follow vCPU 0's two; GICR_ISENABLER0 then GICR_ISPENDR0 of its SGI frame.
    vgic.write_redistributor(0x2_0000 + 0x1_0100, AccessWidth::Word, 1 << 5, &vgic::NoMemory).unwrap();
    FakeArch::take_kicks();
    let _ = vgic.take_hint(1);
    vgic.write_redistributor(0x2_0000 + 0x1_0200, AccessWidth::Word, 1 << 5, &vgic::NoMemory).unwrap();
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
    let v = block_vcpu_1(scheduling, &vgic);
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
    assert!(
        vgic.write_redistributor(0, AccessWidth::Word, u64::MAX, &vgic::NoMemory).is_err(),
        "GICv2 has no redistributors"
    );
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
        let mut d = vgic.lock();
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

fn v3_vgic(vcpus: usize) -> (&'static Scheduling<FakeArch>, VgicHandle<FakeArch>) {
    vgic_of(GicVersion::V3, vcpus)
}

fn pending(vgic: &VgicHandle<FakeArch>, vcpu: usize, sgi: u32) -> bool {
    vgic.lock().interrupt(vcpu, vgic::IntId(sgi)).unwrap().pending
}

/// A posted SGI (docs/vgic.md, "Posted SGIs"): hinted and kicked at once, pending for
/// whoever takes the VM's lock next, and delivered once: its guest took it, it is not
/// pending again.
#[test]
fn a_posted_sgi_is_hinted_kicked_and_pending_for_the_next_holder_of_the_lock() {
    let (_, vgic) = v3_vgic(6);
    FakeArch::become_cpu(0);
    vgic.running_on[5].store(3, Ordering::Release);
    FakeArch::take_kicks();
    assert!(vgic.post_sgi(0, 5, 6));
    assert!(!vgic.is_locked(), "no lock taken");
    assert_eq!(FakeArch::take_kicks(), vec![3], "vCPU 5's CPU");
    assert!(vgic.take_hint(5));
    assert!(pending(&vgic, 5, 6), "delivered under the lock");
    assert!((0..16).filter(|&i| i != 6).all(|i| !pending(&vgic, 5, i)));
    assert!((0..5).all(|v| (0..16).all(|i| !pending(&vgic, v, i))), "no other vCPU's");
    // The guest takes it: acknowledged, then deactivated (GICR_ICPENDR0 stands in here),
    // and nothing posted brings it back.
    vgic.write_redistributor(5 * 0x2_0000 + 0x1_0280, AccessWidth::Word, 1 << 6, &vgic::NoMemory).unwrap();
    assert!(!pending(&vgic, 5, 6), "delivered once");
}

/// Every reader of the distributor sees a posted SGI: a register read by another vCPU
/// (GICR_ISPENDR0 of the target's SGI frame) and the check a vCPU makes before it waits.
#[test]
fn a_posted_sgi_is_seen_by_every_reader_of_the_distributor() {
    let (_, vgic) = v3_vgic(2);
    assert!(vgic.post_sgi(0, 1, 4));
    let ispendr0 = vgic.read_redistributor(0x2_0000 + 0x1_0200, AccessWidth::Word).unwrap();
    assert_eq!(ispendr0, 1 << 4);
    // Deliverable once posted: the SGI enabled (GICR_ISENABLER0), its group 0 too
    // (GICD_CTLR.EnableGrp0).
    let (_, vgic) = v3_vgic(2);
    vgic.write_redistributor(0x2_0000 + 0x1_0100, AccessWidth::Word, 1 << 4, &vgic::NoMemory).unwrap();
    vgic.write_distributor(0, 0, AccessWidth::Word, 1).unwrap();
    assert!(!vgic.lock().has_pending(1));
    assert!(vgic.post_sgi(0, 1, 4));
    assert!(vgic.lock().has_pending(1), "a vCPU about to wait finds it");
}

/// A vCPU that began to wait for an interrupt is woken by an SGI posted for it, and one
/// running on this CPU (it shares the sender's, and does not run now) is not kicked.
#[test]
fn a_posted_sgi_wakes_a_waiting_vcpu_and_kicks_no_vcpu_of_this_cpu() {
    let (scheduling, vgic) = v3_vgic(2);
    let v = block_vcpu_1(scheduling, &vgic);
    assert!(vgic.post_sgi(0, 1, 0));
    assert_eq!(scheduling.state(v), Some(VcpuState::Runnable));
    assert!(!vgic.waiting[1].load(Ordering::SeqCst));
    vgic.running_on[1].store(0, Ordering::Release);
    FakeArch::take_kicks();
    assert!(vgic.post_sgi(0, 1, 0));
    assert!(FakeArch::take_kicks().is_empty());
}

/// Posting is for SGIs 0 to 7 of the VM's own vCPUs, from one of its vCPUs: for SGI 8, for
/// a vCPU the VM lacks or from one it lacks (a GICv2's posts are per source) it does
/// nothing and says so (the caller generates the SGI under the lock), and a SYSTEM_RESET's
/// new distributor does not get an SGI posted to the old one.
#[test]
fn only_sgis_0_to_7_of_the_vm_s_vcpus_are_posted_and_a_reset_drops_them() {
    let (_, v2) = vgic(2);
    assert_eq!(v2.posting_vcpus(), 0b11);
    assert!(!v2.post_sgi(2, 1, 3), "from a vCPU the VM lacks");
    assert!(!v2.take_hint(1) && !v2.lock().has_pending(1));
    let (_, v3) = v3_vgic(3);
    assert_eq!(v3.posting_vcpus(), 0b111);
    assert!(!v3.post_sgi(0, 3, 3) && !v3.post_sgi(0, usize::MAX, 3) && !v3.post_sgi(0, 2, 8));
    assert!(!v3.take_hint(2) && !v3.take_hint(3));
    assert!(!pending(&v3, 2, 8));
    for (version, vgic) in [(GicVersion::V2, v2), (GicVersion::V3, v3)] {
        let config = VgicConfig { version, vcpus: 2, spis: 32, lpis: 0 };
        assert!(vgic.post_sgi(0, 1, 3));
        vgic.replace_distributor(Distributor::new(config).unwrap());
        assert!(!pending(&vgic, 1, 3), "posted before the reset ({version:?})");
    }
}

/// GICv2 (docs/vgic.md, "Posted SGIs"): a GICD_SGIR write naming one other vCPU is posted
/// in its source's word, and delivered pending from that source; the same SGI from two
/// sources is two interrupts, as written.
#[test]
fn a_gicv2_sgi_to_one_vcpu_is_posted_per_source() {
    let (_, vgic) = vgic(3);
    FakeArch::become_cpu(0);
    vgic.running_on[2].store(3, Ordering::Release);
    FakeArch::take_kicks();
    vgic.write_distributor(0, GICD_SGIR, AccessWidth::Word, (0b100 << 16) | 5).unwrap();
    assert!(!vgic.is_locked());
    assert_eq!(FakeArch::take_kicks(), vec![3]);
    assert!(vgic.take_hint(2));
    vgic.write_distributor(1, GICD_SGIR, AccessWidth::Word, (0b100 << 16) | 5).unwrap();
    // GICD_SPENDSGIR1 as vCPU 2 reads it: SGI 5 is its byte 1, a bit per source.
    let spendsgir1 = vgic.read_distributor(2, 0xf24, AccessWidth::Word).unwrap();
    assert_eq!(spendsgir1, 0b11 << 8, "from CPU 0 and from CPU 1");
    assert_eq!(vgic.read_distributor(1, 0xf24, AccessWidth::Word).unwrap(), 0, "vCPU 1's own: nothing");
}

/// A post hints its target `HINT_POSTED` alone, ORed into a change hinted before; once a
/// holder of the VM's lock on another CPU delivered it into the distributor, the target's
/// hint is `HINT_CHANGED`, so that its vector does not take a later post's hint for this one,
/// which is no longer in the posted words (docs/vgic.md, "The same SGI shown again in the
/// vector"). A target on the lock holder's CPU is left as it is: it is that CPU's run loop.
#[test]
fn a_post_is_hinted_as_a_post_until_another_cpu_s_lock_delivers_it() {
    use crate::shared_vgic::{HINT_CHANGED, HINT_POSTED};
    for version in [GicVersion::V3, GicVersion::V2] {
        let (_, vgic) = vgic_of(version, 3);
        FakeArch::become_cpu(0);
        vgic.running_on[1].store(2, Ordering::Release);
        vgic.running_on[2].store(0, Ordering::Release);
        assert!(vgic.post_sgi(0, 1, 3));
        assert!(vgic.post_sgi(0, 2, 3));
        assert_eq!((vgic.hint_of(1), vgic.hint_of(2)), (HINT_POSTED, HINT_POSTED), "{version:?}");
        FakeArch::take_kicks();
        drop(vgic.lock());
        assert_eq!(vgic.hint_of(1), HINT_CHANGED, "delivered for vCPU 1, on CPU 2 ({version:?})");
        // Hinted before the posts were taken: the post's own kick is the one vCPU 1 needs.
        assert!(FakeArch::take_kicks().is_empty(), "no second kick ({version:?})");
        assert_eq!(vgic.hint_of(2), HINT_POSTED, "vCPU 2 is this CPU's ({version:?})");
        // A change hinted before a post stays there.
        vgic.hint_vcpu(0);
        assert!(vgic.post_sgi(1, 0, 3));
        assert_eq!(vgic.hint_of(0), HINT_CHANGED | HINT_POSTED, "{version:?}");
        assert!(vgic.take_hint(0) && vgic.hint_of(0) == 0);
    }
}
