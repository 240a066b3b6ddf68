//! What a VM's virtio devices (hyp_runtime::virtio) reach on an ARM image: the VM's RAM
//! through the identity map (`identity_map::GuestRam`), the interrupt line into its vGIC,
//! the switch of the image's hypervisor.

use alloc::sync::Arc;
use core::marker::PhantomData;

use hyp_core::cap::{CapError, CapId};
use hyp_core::platform::PhysRange;
use hyp_runtime::first_touch::{Fill, FirstTouch};
use hyp_runtime::shared_vgic::{SharedVgic, VgicLine};
use hyp_runtime::virtio::slot::VmEnv;
use hyp_runtime::vm::ShadowPage;
use stage2::{Ipa, IpaRange, PhysAddr};
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
        GuestRam { ipa, pa, size, first_touch, copy: I::copy_to_guest }
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
    fn window_shadow(vm: CapId, ipa: u64) -> Option<Arc<dyn ShadowPage>> {
        let page = I::hypervisor().window_shadow(vm, Ipa(ipa))?;
        // Nothing of the memory's last owner reaches the VM: zeros where the device has no
        // register, before the page is first shown.
        I::zero_for_guest(page.base, page.size);
        Some(Arc::new(WindowShadow::<I> { vm, ipa, page, image: PhantomData }))
    }
}

/// The page a VM reads an emulated window from (`hyp_runtime::vm::ShadowPage`): memory the
/// capability space retyped for the window, which the hypervisor writes through its identity
/// map and the VM reads through a read-only Device stage-2 leaf.
struct WindowShadow<I> {
    vm: CapId,
    /// The window's IPA.
    ipa: u64,
    page: PhysRange,
    image: PhantomData<fn() -> I>,
}

impl<I: ArmImage> ShadowPage for WindowShadow<I> {
    fn write(&self, offset: usize, words: &[u32]) {
        let len = (words.len() * 4) as u64;
        if offset as u64 + len > self.page.size {
            return;
        }
        let at = self.page.base + offset as u64;
        for (i, &word) in words.iter().enumerate() {
            // SAFETY: `at + 4 * i` lies in the page (checked above), memory the capability
            // space gave this window alone and the hypervisor maps as Normal memory at its
            // physical address; a word store, aligned (offset and base are).
            unsafe { core::ptr::write_volatile((at + 4 * i as u64) as *mut u32, word) };
        }
        // The VM reads the page as Device memory, which no cache holds for it.
        I::clean_for_guest(at, len);
    }
    fn read(&self, offset: usize) -> u32 {
        if offset as u64 + 4 > self.page.size {
            return 0;
        }
        // SAFETY: the word lies in the page (checked above), memory the capability space
        // gave this window alone and the hypervisor maps as Normal memory at its physical
        // address; an aligned word load (offset and base are aligned).
        unsafe { core::ptr::read_volatile((self.page.base + offset as u64) as *const u32) }
    }
    fn show(&self, visible: bool) -> Result<(), CapError> {
        I::hypervisor().show_window_shadow(&mut HeapTableMemory, I::stage2_tlb, self.vm, Ipa(self.ipa), visible)
    }
}
