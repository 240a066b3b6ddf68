//! The manifest's VMs, by index: each one's manifest entry, and the VM while it exists (the
//! management console destroys and restarts VMs), with how many still run. Every part of
//! the hypervisor reaches a VM through this table, and a VM taken out of it is reached no
//! more, whoever still holds it.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::bundle::VmSpec;
use hyp_core::sync::Mutex;
use spin::Once;

struct Slot<V> {
    spec: VmSpec<'static>,
    vm: Mutex<Option<Arc<V>>>,
}

pub struct VmTable<V> {
    slots: Once<Vec<Slot<V>>>,
    /// VMs that exist and have not ended.
    running: AtomicUsize,
    /// VMs that ended with a failure.
    failed: AtomicUsize,
}

/// Every VM has ended: how many there were and how many failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    pub total: usize,
    pub failed: usize,
}

impl<V> Default for VmTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> VmTable<V> {
    pub const fn new() -> Self {
        VmTable { slots: Once::new(), running: AtomicUsize::new(0), failed: AtomicUsize::new(0) }
    }

    /// Once, at boot: the VMs created from the manifest, in its order, all running.
    pub fn fill(&self, vms: Vec<(VmSpec<'static>, V)>) {
        let count = vms.len();
        self.slots.call_once(|| {
            vms.into_iter().map(|(spec, vm)| Slot { spec, vm: Mutex::new(Some(Arc::new(vm))) }).collect()
        });
        self.running.store(count, Ordering::Release);
    }

    /// How many VMs the manifest has.
    pub fn len(&self) -> usize {
        self.slots.get().map_or(0, Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// VM `id`'s manifest entry.
    pub fn spec(&self, id: usize) -> Option<VmSpec<'static>> {
        self.slots.get()?.get(id).map(|s| s.spec)
    }

    /// VM `id`, if it exists now.
    pub fn get(&self, id: usize) -> Option<Arc<V>> {
        self.slots.get()?.get(id)?.vm.lock().clone()
    }

    /// VM `id` is being destroyed: from now on the table gives it to no one.
    pub fn take(&self, id: usize) -> Option<Arc<V>> {
        self.slots.get()?.get(id)?.vm.lock().take()
    }

    /// VM `id` exists (again); returns false for an id the manifest does not have.
    pub fn put(&self, id: usize, vm: V) -> bool {
        match self.slots.get().and_then(|s| s.get(id)) {
            Some(slot) => {
                *slot.vm.lock() = Some(Arc::new(vm));
                true
            }
            None => false,
        }
    }

    /// A destroyed VM was created again by the console: it counts as running again.
    pub fn running_again(&self) {
        self.running.fetch_add(1, Ordering::AcqRel);
    }

    /// A VM ended for good (`clean` or not). Returns the end of the run when it was the
    /// last one running.
    pub fn ended(&self, clean: bool) -> Option<RunEnd> {
        if !clean {
            self.failed.fetch_add(1, Ordering::AcqRel);
        }
        (self.running.fetch_sub(1, Ordering::AcqRel) == 1)
            .then(|| RunEnd { total: self.len(), failed: self.failed.load(Ordering::Acquire) })
    }
}
