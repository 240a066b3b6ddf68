//! What a VM's virtio devices (hyp_runtime::virtio) reach on AArch64: the VM's RAM through
//! the EL2 identity map, the interrupt line into its vGIC, the log and the switch.

use core::sync::atomic::{fence, Ordering};

use hyp_runtime::virtio::slot::VmEnv;
use hyp_runtime::virtio::PhysicalRam;
use vdev_virtio::memory::{GuestMemory, GuestMemoryError};

use crate::arch::Aarch64;
use hyp_board_qemu_virt::QemuVirt;
use hyp_runtime::shared_vgic::{SharedVgic, VgicLine};
use vgic::IntId;

/// A VM's RAM as its devices see it: IPAs checked against the one RAM region its
/// capabilities map, then reached through the hypervisor's identity map.
#[derive(Clone, Copy, Debug)]
pub struct GuestRam {
    pub ipa: u64,
    pub pa: u64,
    pub size: u64,
}

impl PhysicalRam for GuestRam {
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        addr.checked_sub(self.ipa)
            .filter(|offset| offset.checked_add(len).is_some_and(|end| end <= self.size))
            .map(|offset| self.pa + offset)
            .ok_or(GuestMemoryError { addr, len })
    }
}

impl GuestMemory for GuestRam {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        let pa = self.physical(addr, buf.len() as u64)?;
        // SAFETY: `pa` is this VM's RAM, identity-mapped Normal memory, and not a Rust object:
        // the guest may write it concurrently, so what is read is treated as untrusted bytes.
        unsafe { core::ptr::copy_nonoverlapping(pa as *const u8, buf.as_mut_ptr(), buf.len()) };
        // What the driver published before (the ring index) is seen before what follows it
        // (the entries): the driver side's barrier pairs with this one (virtio 1.2, 2.7.13).
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        let pa = self.physical(addr, data.len() as u64)?;
        // Used elements are visible before the used index that publishes them.
        fence(Ordering::SeqCst);
        // SAFETY: as for `read`; the bytes written are the device's own.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), pa as *mut u8, data.len()) };
        Ok(())
    }

    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        self.physical(addr, len).map(|_| ())
    }
}

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
