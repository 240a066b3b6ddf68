//! What a VM's virtio devices (hyp_runtime::virtio) reach on this image: the VM's RAM
//! through the EL2 identity map (hyp_arch_arm::identity_map), the interrupt line into its
//! vGIC, the switch.

use hyp_runtime::virtio::slot::VmEnv;

use crate::arch::Aarch64;
use hyp_arch_arm::identity_map::GuestRam;
use hyp_board_qemu_virt::QemuVirt;
use hyp_runtime::shared_vgic::{SharedVgic, VgicLine};
use vgic::IntId;

/// The devices of VMs on this image.
pub struct Devices;

impl VmEnv for Devices {
    type Arch = Aarch64;
    type Board = QemuVirt;
    type Ram = GuestRam;
    type Line = VgicLine<Aarch64>;
    fn guest_ram(ipa: u64, pa: u64, size: u64) -> GuestRam {
        GuestRam { ipa, pa, size }
    }
    fn interrupt_line(vgic: &SharedVgic<Aarch64>, intid: IntId) -> VgicLine<Aarch64> {
        VgicLine { vgic: alloc::sync::Arc::clone(vgic), intid }
    }
    fn forward_frame(from: usize, frame: &[u8]) {
        crate::arch::HYPERVISOR.forward_frame(from, frame);
    }
}
