//! RAM through the hypervisor's identity map, which an ARMv8-A image (EL2) and an ARMv7-A
//! one (HYP mode, LPAE) both keep, every physical address of RAM at the same virtual
//! address: stage-2 table frames from the heap (`HeapTableMemory`), a VM's RAM as its
//! devices see it (`GuestRam`), and the device tree the bootloader passed
//! (`device_tree`). The identity map is what makes these pointers valid; each image's MMU
//! code builds it (hyp-arch-armv8/src/mmu.rs).

use core::alloc::Layout;
use core::sync::atomic::{fence, Ordering};

use alloc::alloc::{alloc_zeroed, dealloc};
use alloc::sync::Arc;
use hyp_core::fdt::FdtError;
use hyp_core::platform::PlatformError;
use hyp_runtime::first_touch::FirstTouch;
use hyp_runtime::virtio::PhysicalRam;
use stage2::{PhysAddr, TableMemory};
use vdev::virtio::memory::{GuestMemory, GuestMemoryError};

/// Stage-2 table frames from the hypervisor heap: hypervisor memory, never any VM's.
pub struct HeapTableMemory;

const FRAME: usize = 4096;

fn frames_layout(count: usize) -> Option<Layout> {
    Layout::from_size_align(FRAME * count, FRAME * count).ok()
}

impl TableMemory for HeapTableMemory {
    fn allocate_zeroed_frames(&mut self, count: usize) -> Option<PhysAddr> {
        let layout = frames_layout(count).filter(|l| l.size() > 0)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(PhysAddr(ptr as u64))
    }

    fn free_frames(&mut self, base: PhysAddr, count: usize) {
        if let Some(layout) = frames_layout(count) {
            // SAFETY: `base` came from `allocate_zeroed_frames(count)` (the stage2 crate frees
            // only what it allocated, with the same count).
            unsafe { dealloc(base.0 as *mut u8, layout) };
        }
    }

    fn read_descriptor(&self, table: PhysAddr, index: usize) -> u64 {
        // SAFETY: `table` is a table frame this pool handed out (identity-mapped) and the
        // walker keeps `index` below 512 entries per frame of the table.
        unsafe { core::ptr::read_volatile((table.0 as *const u64).add(index)) }
    }

    fn write_descriptor(&mut self, table: PhysAddr, index: usize, value: u64) {
        // SAFETY: as for `read_descriptor`; a single aligned 64-bit store is single-copy
        // atomic, so the table walker never sees a torn descriptor.
        unsafe { core::ptr::write_volatile((table.0 as *mut u64).add(index), value) }
    }
}

/// A VM's RAM as its devices see it: IPAs checked against the one RAM region its
/// capabilities map, each block zeroed first if the VM never touched it (`first_touch`: a
/// device, or the board's disk, must never read what another VM left there, nor write
/// what a later zeroing would wipe), then reached through the identity map.
#[derive(Clone)]
pub struct GuestRam {
    pub ipa: u64,
    pub pa: u64,
    pub size: u64,
    pub first_touch: Arc<FirstTouch>,
    /// The image's copy between the VM's RAM and the hypervisor's memory
    /// (`ArmImage::copy_to_guest`): a frame or a header lies at any offset on either side,
    /// and the library's copy, built without unaligned accesses, moves a misaligned
    /// pair's bytes one at a time (22 instructions per 8 bytes; docs/performance.md).
    pub copy: fn(&mut [u8], &[u8]),
}

impl GuestRam {
    /// The physical address of `[addr, addr + len)` if all of it is the VM's RAM (one
    /// region, physically contiguous), without touching it.
    fn within(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        addr.checked_sub(self.ipa)
            .filter(|offset| offset.checked_add(len).is_some_and(|end| end <= self.size))
            .map(|offset| self.pa + offset)
            .ok_or(GuestMemoryError { addr, len })
    }
}

impl PhysicalRam for GuestRam {
    /// The common case, a range in one block the VM touched already, returns without a
    /// call: with the first touch's walk a call it may make, every access paid a frame
    /// that saved four register pairs (a disk request calls this once per run).
    #[inline]
    fn physical(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        let pa = self.within(addr, len)?;
        if self.first_touch.ready(addr, len) {
            return Ok(pa);
        }
        self.first_touched(addr, len, pa)
    }
}

impl GuestRam {
    /// `physical` for a range the VM has not touched yet, or across blocks: zeroed first.
    #[cold]
    #[inline(never)]
    fn first_touched(&self, addr: u64, len: u64, pa: u64) -> Result<u64, GuestMemoryError> {
        self.first_touch.prepare(addr, len).map_err(|_| GuestMemoryError { addr, len })?;
        Ok(pa)
    }
}

impl GuestMemory for GuestRam {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        let pa = self.physical(addr, buf.len() as u64)?;
        // SAFETY: `pa` is this VM's RAM, identity-mapped Normal memory, and not a Rust object:
        // the guest may write it concurrently, so what is read is treated as untrusted bytes
        // (the slice lives for this copy alone, and nothing reads it as anything but bytes).
        let guest = unsafe { core::slice::from_raw_parts(pa as *const u8, buf.len()) };
        (self.copy)(buf, guest);
        // What the driver published before (the ring index) is seen before what follows it
        // (the entries): the driver side's barrier pairs with this one (virtio 1.2, 2.7.13).
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        let pa = self.physical(addr, data.len() as u64)?;
        // Used elements are visible before the used index that publishes them.
        fence(Ordering::SeqCst);
        // SAFETY: as for `read`; the bytes written are the device's own, and `data` is the
        // hypervisor's memory, not the VM's (a `&[u8]` the caller holds), so they do not overlap.
        let guest = unsafe { core::slice::from_raw_parts_mut(pa as *mut u8, data.len()) };
        (self.copy)(guest, data);
        Ok(())
    }

    /// Bounds only: a check touches nothing, so nothing needs zeroing first (every access
    /// that follows goes through `physical`, which does).
    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        self.within(addr, len).map(|_| ())
    }
}

/// The device tree blob at physical address `dtb`, sized by its header.
///
/// # Safety
/// `dtb`, if it is not 0, is where the bootloader put a device tree: mapped, 8-byte aligned
/// (Documentation/arch/arm64/booting.rst; the ARM boot protocol's r2 on ARMv7), never
/// written or freed while the hypervisor runs.
pub unsafe fn device_tree(dtb: u64) -> Result<&'static [u8], PlatformError> {
    if dtb == 0 || !dtb.is_multiple_of(8) {
        return Err(PlatformError::NotADeviceTree(FdtError::BadMagic));
    }
    // SAFETY: the caller's promise; the first 8 bytes are its magic and total size.
    let header = unsafe { core::slice::from_raw_parts(dtb as *const u8, 8) };
    if header[0..4] != [0xd0, 0x0d, 0xfe, 0xed] {
        return Err(PlatformError::NotADeviceTree(FdtError::BadMagic));
    }
    let size = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    // SAFETY: as above, for the size the header states.
    Ok(unsafe { core::slice::from_raw_parts(dtb as *const u8, size) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zero_nothing(
        _: hyp_core::cap::CapId,
        _: stage2::IpaRange,
        _: hyp_runtime::first_touch::Fill,
    ) -> Result<u64, hyp_core::cap::CapError> {
        Ok(0)
    }

    /// A VM's "RAM" in this process: on the host, its address space is the identity map.
    fn ram(bytes: &mut [u8]) -> GuestRam {
        let size = bytes.len() as u64;
        let first_touch = Arc::new(FirstTouch::new(hyp_core::cap::CapId(1), 0x4000_0000, size, true, zero_nothing));
        GuestRam { ipa: 0x4000_0000, pa: bytes.as_mut_ptr() as u64, size, first_touch, copy: <[u8]>::copy_from_slice }
    }

    #[test]
    fn a_device_reaches_its_vm_s_ram_and_nothing_past_either_end() {
        let mut bytes = vec![0u8; 4096];
        let ram = ram(&mut bytes);
        ram.write(0x4000_0ffc, b"abcd").unwrap();
        let mut back = [0u8; 4];
        ram.read(0x4000_0ffc, &mut back).unwrap();
        assert_eq!(&back, b"abcd");
        for (addr, len) in [(0x4000_0ffd, 4), (0x3fff_ffff, 1), (0x4000_1000, 0x1), (u64::MAX, 2)] {
            assert_eq!(ram.check(addr, len), Err(GuestMemoryError { addr, len }), "{addr:#x}+{len}");
            assert!(ram.write(addr, &vec![1; len as usize]).is_err());
        }
        assert_eq!(ram.physical(0x4000_0000, 4096), Ok(bytes.as_ptr() as u64));
        assert!(bytes[..0xffc].iter().all(|&b| b == 0), "a refused write wrote nothing");
    }

    #[test]
    fn the_device_tree_is_sized_by_its_header_and_anything_else_is_refused() {
        let dtb = include_bytes!("../../hyp-core/tests/data/qemu-virt-gicv2-smp2.dtb");
        let mut aligned = vec![0u64; dtb.len().div_ceil(8)];
        // SAFETY: the Vec's buffer holds at least dtb.len() bytes.
        unsafe { core::ptr::copy_nonoverlapping(dtb.as_ptr(), aligned.as_mut_ptr().cast::<u8>(), dtb.len()) };
        let at = aligned.as_ptr() as u64;
        // SAFETY: a device tree, 8-byte aligned, alive and unwritten for the test.
        assert_eq!(unsafe { device_tree(at) }.unwrap(), &dtb[..]);
        // SAFETY: 0 and a misaligned address are refused before anything is read.
        assert!(unsafe { device_tree(0) }.is_err() && unsafe { device_tree(at + 4) }.is_err());
        aligned[0] = 0;
        // SAFETY: as above; the magic is gone.
        assert!(unsafe { device_tree(at) }.is_err());
    }

    #[test]
    fn table_frames_come_zeroed_and_aligned_to_their_size_and_go_back() {
        let mut frames = HeapTableMemory;
        let two = frames.allocate_zeroed_frames(2).unwrap();
        assert_eq!(two.0 % 8192, 0);
        frames.write_descriptor(two, 1023, 0x1234);
        assert_eq!((frames.read_descriptor(two, 0), frames.read_descriptor(two, 1023)), (0, 0x1234));
        frames.free_frames(two, 2);
        assert!(frames.allocate_zeroed_frames(0).is_none(), "no zero-sized allocation");
    }
}
