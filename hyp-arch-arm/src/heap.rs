//! The hypervisor's heap (VM objects, stage-2 tables, device models): a buddy allocator over
//! RAM the boot CPU sets aside (hyp_core::memory_map::plan), the image's global allocator
//! on a board. Host tests keep the host's allocator. Its lock is the hypervisor's own
//! (hyp_core::sync), whose waiter gives way, not the allocator crate's.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

use hyp_core::sync::Mutex;

struct Heap(Mutex<buddy_system_allocator::Heap<33>>);

#[cfg_attr(target_os = "none", global_allocator)]
static HEAP: Heap = Heap(Mutex::new(buddy_system_allocator::Heap::empty()));

// SAFETY: the buddy allocator hands out each block once until it is freed, aligned and
// sized as the layout asks (it rounds up, never down), and its state is behind the lock.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0.lock().alloc(layout).map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(ptr) = NonNull::new(ptr) {
            // SAFETY: GlobalAlloc's caller gives back a block this allocator gave, with the
            // layout it was given for.
            unsafe { self.0.lock().dealloc(ptr, layout) };
        }
    }
}

/// Bytes of the hypervisor heap.
pub const HEAP_SIZE: u64 = 32 << 20;

/// Bytes of the heap allocated now (as the allocator rounds them: what is really taken),
/// for the management console's `list` and `cargo xtask soak`.
pub fn in_use() -> u64 {
    HEAP.0.lock().stats_alloc_actual() as u64
}

/// # Safety
/// `[base, base + size)` is identity-mapped RAM that nothing else uses, now or later.
pub unsafe fn init(base: u64, size: u64) {
    // SAFETY: the caller gives memory nobody else owns.
    unsafe { HEAP.0.lock().init(base as usize, size as usize) };
}
