//! What a VM's virtio devices (hyp_runtime::virtio) reach on an ARM image: the VM's RAM
//! through the identity map (`identity_map::GuestRam`), the interrupt line into its vGIC,
//! the switch of the image's hypervisor.

use alloc::sync::Arc;
use core::marker::PhantomData;

use hyp_core::cap::{CapError, CapId};
use hyp_runtime::first_touch::{Fill, FirstTouch};
use hyp_runtime::shared_vgic::{SharedVgic, VgicLine};
use hyp_runtime::virtio::slot::VmEnv;
use stage2::{IpaRange, PhysAddr};
use vgic::IntId;

use crate::identity_map::{GuestRam, HeapTableMemory};
use crate::image::ArmImage;

/// The devices of VMs on image `I`.
pub struct Devices<I>(PhantomData<I>);

impl<I: ArmImage> VmEnv for Devices<I> {
    type Arch = I;
    type Board = I::Board;
    type Ram = GuestRam;
    type Line = VgicLine<I>;
    fn guest_ram(ipa: u64, pa: u64, size: u64, first_touch: Arc<FirstTouch>) -> GuestRam {
        GuestRam { ipa, pa, size, first_touch }
    }
    fn zero_on_first_touch(vm: CapId, range: IpaRange, fill: Fill) -> Result<u64, CapError> {
        let mut zero = |pa: PhysAddr, len| {
            // Overwritten: the loader writes every byte, then cleans them and invalidates
            // the instruction cache (`ArmVm::load`).
            if fill == Fill::Zeroed {
                I::zero_for_guest(pa.0, len)
            }
        };
        let bytes = I::hypervisor().zero_on_first_touch(&mut HeapTableMemory, I::stage2_tlb, vm, range, &mut zero)?;
        if bytes != 0 {
            // The instruction cache may hold what an earlier owner executed from this
            // memory: the guest's first fetches from it must read the zeros.
            I::make_visible_to_guest(0, 0);
        }
        Ok(bytes)
    }
    fn interrupt_line(vgic: &SharedVgic<I>, intid: IntId) -> VgicLine<I> {
        VgicLine { vgic: Arc::clone(vgic), intid }
    }
    fn forward_frame(from: usize, frame: &[u8]) {
        I::hypervisor().forward_frame(from, frame);
    }
}
