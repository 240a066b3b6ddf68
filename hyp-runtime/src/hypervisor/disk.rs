//! The board's disk as the VMs share it: a request is queued by the VM's virtio-blk device
//! during the guest's notify, which returns at once; the disk's interrupt (routed to the
//! boot CPU, `Route::Disk`) takes its completions and each VM's device finishes its own
//! (docs/virtio.md, "Where the data goes"). A VM's RAM is neither zeroed (reset) nor
//! returned (destroy) while the disk may still write it: both wait for its requests in
//! flight first (`drain_disk`).

use core::borrow::Borrow;
use core::sync::atomic::Ordering;

use super::{say, BoardOf, Hypervisor, Virtualization};
use crate::board::{Board, DiskQueue};
use crate::interrupts::Route;
use crate::vm::Vm;

impl<V: Virtualization> Hypervisor<V> {
    /// The board disk's interrupt goes to CPU `cpu`; a disk without one is polled at every
    /// CPU's turn (`run_next`).
    pub fn start_disk(&self, cpu: usize) {
        let Some(disk) = BoardOf::<V>::disk().map(DiskQueue::new) else { return };
        match disk.interrupt().map(|intid| (intid, self.routes.set(intid, Route::Disk))) {
            Some((intid, Ok(()))) => V::enable_interrupt(intid, cpu),
            Some((_, Err(e))) => {
                say!(V, "hypervisor: the board disk's interrupt cannot be taken ({e}): its completions are polled");
                self.disk_polled.store(true, Ordering::Release);
            }
            None => {
                say!(V, "hypervisor: the board's disk has no interrupt: its completions are polled");
                self.disk_polled.store(true, Ordering::Release);
            }
        }
    }

    /// The board disk's interrupt: its line lowered first (a completion that comes during
    /// the loop raises it again), then every completion finished.
    #[inline(never)]
    pub fn disk_interrupt(&self) {
        let Some(disk) = BoardOf::<V>::disk().map(DiskQueue::new) else { return };
        disk.acknowledge_interrupt();
        self.finish_disk_requests(disk);
    }

    /// Whether the board's disk is polled for completions (it has no interrupt).
    pub(crate) fn disk_polled(&self) -> bool {
        self.disk_polled.load(Ordering::Relaxed)
    }

    /// Takes the board disk's completions one at a time (its lock released before each is
    /// finished) and has each finished by its VM's device; then the VMs whose requests waited
    /// for room take them.
    pub(crate) fn finish_disk_requests(&self, disk: DiskQueue<<BoardOf<V> as Board>::Disk>) {
        let mut any = false;
        while let Some(completion) = disk.take_completed() {
            any = true;
            // A VM leaves the table only once its requests have completed (`drain_disk`);
            // a completion for no VM frees its request and nothing else.
            if let Some(vm) = self.vm(completion.owner) {
                Borrow::<Vm<V::Env>>::borrow(&*vm).disk_completed(completion);
            }
        }
        if any {
            for id in 0..self.vms.len() {
                if let Some(vm) = self.vm(id) {
                    Borrow::<Vm<V::Env>>::borrow(&*vm).retry_disk();
                }
            }
        }
    }

    /// Waits until the board's disk has completed every request of `vm`'s, finishing the
    /// completions it finds (any VM's), before `vm`'s RAM is zeroed or returned. The caller
    /// stopped the VM's disk device first (shut down or reset), so nothing new starts and
    /// the wait ends. It spins, taking completions itself: the disk's interrupt may be
    /// routed to this very CPU, whose interrupts are masked here.
    pub(crate) fn drain_disk(&self, vm: &Vm<V::Env>) {
        let Some(disk) = BoardOf::<V>::disk().map(DiskQueue::new) else { return };
        while vm.disk_in_flight() > 0 {
            self.finish_disk_requests(disk);
            hyp_core::sync::wait_step();
        }
    }
}
