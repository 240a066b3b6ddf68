//! Where a guest's kernel, initrd and device tree go in its RAM, following the arm64 boot
//! protocol (Documentation/arch/arm64/booting.rst): the kernel at a 2 MiB-aligned base plus
//! its text_offset, the device tree 8-byte aligned in its own 2 MiB block (it must not cross
//! a 2 MiB boundary when smaller than that), the initrd anywhere in RAM outside both. The
//! device tree and initrd go at the top of RAM, away from the kernel's BSS and early
//! allocations. A 32-bit zImage goes where `image::ZImage` says (above the kernel it
//! decompresses at the start of RAM); the rest as for arm64, which also satisfies the 32-bit
//! protocol (Documentation/arch/arm/booting.rst: device tree 8-byte aligned, initrd and
//! device tree clear of the decompressed kernel).

use core::fmt;

use crate::image::{ExecutionState, ImageError, KernelImage};

const MIB2: u64 = 2 << 20;
const PAGE: u64 = 4096;
/// The largest device tree booting.rst allows.
pub const MAX_DTB: u64 = 2 << 20;

/// Offsets from the start of the VM's RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestLayout {
    pub kernel: u64,
    pub kernel_end: u64,
    pub initrd: Option<(u64, u64)>,
    pub dtb: u64,
    /// The execution state the kernel starts in.
    pub state: ExecutionState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    Image(ImageError),
    DeviceTreeTooBig {
        size: u64,
    },
    /// Kernel, initrd and device tree do not fit in RAM together.
    DoesNotFit {
        needed: u64,
        ram: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Image(e) => write!(f, "{e}"),
            Self::DeviceTreeTooBig { size } => {
                write!(f, "the guest device tree has {size} bytes, more than the 2 MiB booting.rst allows")
            }
            Self::DoesNotFit { needed, ram } => write!(
                f,
                "kernel, initrd and device tree need {} MiB of RAM, the VM has {} MiB; give the VM more memory",
                needed.div_ceil(1 << 20),
                ram >> 20
            ),
        }
    }
}

pub fn layout(ram: u64, kernel: &[u8], initrd_len: Option<u64>, dtb_len: u64) -> Result<GuestLayout, LayoutError> {
    let image = KernelImage::parse(kernel).map_err(LayoutError::Image)?;
    let (kernel_offset, kernel_size) = image.placement(ram).map_err(LayoutError::Image)?;
    let kernel_end = (kernel_offset + kernel_size).next_multiple_of(PAGE);
    if dtb_len > MAX_DTB {
        return Err(LayoutError::DeviceTreeTooBig { size: dtb_len });
    }
    let initrd_size = initrd_len.map_or(0, |l| l.next_multiple_of(PAGE));
    let needed = kernel_end + initrd_size + MIB2;
    let dtb = ram.checked_sub(MIB2).filter(|_| needed <= ram).ok_or(LayoutError::DoesNotFit { needed, ram })?;
    let initrd = initrd_len.map(|len| (dtb - initrd_size, len));
    Ok(GuestLayout { kernel: kernel_offset, kernel_end, initrd, dtb, state: image.execution_state() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(text_offset: u64, image_size: u64) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[8..16].copy_from_slice(&text_offset.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[0x38..0x3c].copy_from_slice(b"ARM\x64");
        h
    }

    #[test]
    fn linux_sits_at_the_base_and_the_rest_at_the_top() {
        let l = layout(1 << 30, &kernel(0, 40 << 20), Some(3_000_000), 10_000).unwrap();
        assert_eq!(l.kernel, 0);
        assert_eq!(l.kernel_end, 40 << 20);
        assert_eq!(l.dtb, (1 << 30) - (2 << 20));
        let (start, len) = l.initrd.unwrap();
        assert_eq!(len, 3_000_000);
        assert_eq!(start % 4096, 0);
        assert!(start + len <= l.dtb && start >= l.kernel_end);
    }

    #[test]
    fn a_vm_too_small_for_everything_is_refused() {
        let e = layout(64 << 20, &kernel(0, 40 << 20), Some(30 << 20), 10_000).unwrap_err();
        assert_eq!(e, LayoutError::DoesNotFit { needed: (40 << 20) + (30 << 20) + (2 << 20), ram: 64 << 20 });
        assert_eq!(
            e.to_string(),
            "kernel, initrd and device tree need 72 MiB of RAM, the VM has 64 MiB; give the VM more memory"
        );
    }

    #[test]
    fn device_trees_over_2_mib_and_bad_kernels_are_refused() {
        assert_eq!(
            layout(1 << 30, &kernel(0, 4096), None, 3 << 20),
            Err(LayoutError::DeviceTreeTooBig { size: 3 << 20 })
        );
        assert!(matches!(layout(1 << 30, &[0; 64], None, 100), Err(LayoutError::Image(ImageError::BadMagic { .. }))));
    }
}
