//! What a VM's virtio devices (hyp_runtime::virtio) reach on an ARM image: the VM's RAM
//! through the identity map (`identity_map::GuestRam`), the interrupt line into its vGIC,
//! the switch of the image's hypervisor.

use alloc::sync::Arc;
use core::marker::PhantomData;

use hyp_runtime::shared_vgic::{SharedVgic, VgicLine};
use hyp_runtime::virtio::slot::VmEnv;
use vgic::IntId;

use crate::identity_map::GuestRam;
use crate::image::ArmImage;

/// The devices of VMs on image `I`.
pub struct Devices<I>(PhantomData<I>);

impl<I: ArmImage> VmEnv for Devices<I> {
    type Arch = I;
    type Board = I::Board;
    type Ram = GuestRam;
    type Line = VgicLine<I>;
    fn guest_ram(ipa: u64, pa: u64, size: u64) -> GuestRam {
        GuestRam { ipa, pa, size }
    }
    fn interrupt_line(vgic: &SharedVgic<I>, intid: IntId) -> VgicLine<I> {
        VgicLine { vgic: Arc::clone(vgic), intid }
    }
    fn forward_frame(from: usize, frame: &[u8]) {
        I::hypervisor().forward_frame(from, frame);
    }
}
