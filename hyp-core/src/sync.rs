//! The hypervisor's spin lock: `spin`'s, whose waiting CPU gives way after each failed try
//! with the image's wait hint (AArch64 and AArch32: YIELD, ARM ARM C6.2 "YIELD").
//!
//! Why a hint and not only `core::hint::spin_loop` (an ISB on AArch64): a CPU that waits
//! for a lock whose holder is not running can only wait. On hardware the holder runs on
//! its own CPU and YIELD costs a cycle, but where CPUs take turns on fewer host CPUs
//! (QEMU under `-icount`, which runs them one at a time, or a hypervisor nested in another)
//! a waiter that does not yield keeps its turn to the end, up to a guest tick of spinning
//! counted as the hypervisor's work (docs/performance.md, "Spinning under -icount"). QEMU
//! ends a CPU's turn at YIELD. Until the image sets its hint (`set_wait_hint`, as its boot
//! starts), and in host tests, a waiter spins with `spin_loop`.

use spin::mutex::{SpinMutex, SpinMutexGuard};
use spin::Once;

/// A spin lock that gives way while it waits. Its contended path is out of line: a
/// function that takes a lock pays for nothing but the one atomic try (with the wait's
/// call inline in its loop, every such function kept its values in callee-saved registers,
/// saved and restored around its body).
pub struct Mutex<T: ?Sized>(SpinMutex<T>);

pub type MutexGuard<'a, T> = SpinMutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub const fn new(value: T) -> Self {
        Mutex(SpinMutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    #[inline(always)]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        match self.0.try_lock() {
            Some(guard) => guard,
            None => self.lock_contended(),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) -> MutexGuard<'_, T> {
        loop {
            wait_step();
            if let Some(guard) = self.0.try_lock() {
                return guard;
            }
        }
    }

    #[inline(always)]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock()
    }

    /// Whether some CPU holds it now (for tests and checks: it may change at once).
    pub fn is_locked(&self) -> bool {
        self.0.is_locked()
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

/// The image's wait hint, set once.
static WAIT_HINT: Once<fn()> = Once::new();

/// Sets the hint every waiter calls from now on; a second call changes nothing.
pub fn set_wait_hint(hint: fn()) {
    WAIT_HINT.call_once(|| hint);
}

/// One step of a wait for another CPU: the image's hint, else `spin_loop`.
pub fn wait_step() {
    match WAIT_HINT.get() {
        Some(hint) => hint(),
        None => core::hint::spin_loop(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static HINTS: AtomicUsize = AtomicUsize::new(0);

    fn counted_hint() {
        HINTS.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn a_waiter_calls_the_hint_until_the_holder_lets_go() {
        set_wait_hint(counted_hint);
        let lock = std::sync::Arc::new(Mutex::new(0u32));
        let guard = lock.lock();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || *lock.lock() += 1)
        };
        while HINTS.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(guard);
        waiter.join().unwrap();
        assert_eq!(*lock.lock(), 1);
        // Set once: a second hint is not taken.
        set_wait_hint(|| {});
        let before = HINTS.load(Ordering::SeqCst);
        wait_step();
        assert_eq!(HINTS.load(Ordering::SeqCst), before + 1);
    }
}
