//! A set of vCPUs of one VM: SGI targets, and the vCPUs the hypervisor should kick because
//! something may have become deliverable to them; the walk over a bit mask's set bits that
//! the vGIC's other masks (live interrupts, owned list registers) share; and `Cache`, how
//! those masks stay out of the vGIC's equality.

use core::ops::BitOr;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct VcpuMask(pub u64);

impl VcpuMask {
    pub const EMPTY: VcpuMask = VcpuMask(0);

    pub const fn single(vcpu: usize) -> VcpuMask {
        if vcpu < 64 {
            VcpuMask(1 << vcpu)
        } else {
            VcpuMask(0)
        }
    }
    /// vCPUs 0 to `n - 1`: every vCPU of a VM of `n` (at most 64).
    pub const fn first(n: usize) -> VcpuMask {
        if n >= 64 {
            VcpuMask(u64::MAX)
        } else {
            VcpuMask((1 << n) - 1)
        }
    }
    pub const fn contains(self, vcpu: usize) -> bool {
        vcpu < 64 && self.0 & (1 << vcpu) != 0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The vCPUs in the set, lowest first: one step per vCPU in it.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        set_bits(self.0)
    }
    pub(crate) fn insert(&mut self, vcpu: usize) {
        *self = *self | VcpuMask::single(vcpu);
    }
}

impl BitOr for VcpuMask {
    type Output = VcpuMask;
    fn bitor(self, rhs: VcpuMask) -> VcpuMask {
        VcpuMask(self.0 | rhs.0)
    }
}

/// The indices of the set bits of a mask, lowest first: one step per set bit, not per bit.
macro_rules! set_bits {
    ($(#[$doc:meta])* $name:ident, $mask:ty) => {
        $(#[$doc])*
        pub(crate) fn $name(mut mask: $mask) -> impl Iterator<Item = usize> {
            core::iter::from_fn(move || {
                (mask != 0).then(|| {
                    let i = mask.trailing_zeros() as usize;
                    mask &= mask - 1;
                    i
                })
            })
        }
    };
}

set_bits!(set_bits, u64);
set_bits!(
    /// The list registers' masks, in 32 bits: a 32-bit CPU handles them in one register.
    set_bits32,
    u32
);

/// A value kept beside the GIC state to find things faster (the live masks), not part of
/// it: two vGICs with the same interrupt states compare equal whatever their caches hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cache<T>(pub(crate) T);

impl<T> PartialEq for Cache<T> {
    fn eq(&self, _: &Cache<T>) -> bool {
        true
    }
}
impl<T> Eq for Cache<T> {}
