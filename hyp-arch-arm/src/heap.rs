//! The hypervisor's heap (VM objects, stage-2 tables, device models): a buddy allocator over
//! RAM the boot CPU sets aside (hyp_core::memory_map::plan), the image's global allocator
//! on a board. Host tests keep the host's allocator.

use buddy_system_allocator::LockedHeap;

#[cfg_attr(target_os = "none", global_allocator)]
static HEAP: LockedHeap<33> = LockedHeap::empty();

/// Bytes of the hypervisor heap.
pub const HEAP_SIZE: u64 = 32 << 20;

/// Bytes of the heap allocated now (as the allocator rounds them: what is really taken),
/// for the management console's `list` and `cargo xtask soak`.
pub fn in_use() -> u64 {
    HEAP.lock().stats_alloc_actual() as u64
}

/// # Safety
/// `[base, base + size)` is identity-mapped RAM that nothing else uses, now or later.
pub unsafe fn init(base: u64, size: u64) {
    // SAFETY: the caller gives memory nobody else owns.
    unsafe { HEAP.lock().init(base as usize, size as usize) };
}
