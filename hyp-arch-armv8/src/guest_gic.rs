//! A VM's virtual GIC as the MMIO bus sees it: the distributor and redistributor windows
//! forward trapped guest accesses to the VM's `vgic::Distributor`.

use alloc::sync::Arc;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use hyp_core::mmio::{MmioDevice, MmioError};
use hyp_core::syndrome::AccessWidth;
use spin::Mutex;
use vgic::{AccessError, Distributor, MAX_VCPUS_V2 as MAX_VCPUS};

/// A VM's vGIC and, per vCPU, a hint that its deliverable interrupts may have changed: the
/// exit path checks only the hint (one load) before taking the lock and planning LRs.
pub struct VgicHandle {
    pub vgic: Mutex<Distributor>,
    /// The VM (its index), for the scheduler.
    vm: usize,
    hints: [AtomicBool; MAX_VCPUS],
    /// The physical CPU each vCPU runs on (usize::MAX: none), to kick it.
    pub running_on: [AtomicUsize; MAX_VCPUS],
    /// Set while a vCPU waits for an interrupt off its CPU (blocked in a trapped WFI).
    pub waiting: [AtomicBool; MAX_VCPUS],
}

impl VgicHandle {
    pub fn new(vm: usize, vgic: Distributor) -> Self {
        VgicHandle {
            vgic: Mutex::new(vgic),
            vm,
            hints: [const { AtomicBool::new(false) }; MAX_VCPUS],
            running_on: [const { AtomicUsize::new(usize::MAX) }; MAX_VCPUS],
            waiting: [const { AtomicBool::new(false) }; MAX_VCPUS],
        }
    }

    /// Makes the vCPUs in `mask` look at their interrupts: one running on another CPU
    /// leaves its guest, one waiting for an interrupt runs again. A vCPU of this CPU is in
    /// the hypervisor already and looks at its hint before it enters again.
    pub fn kick(&self, mask: u32) {
        let me = crate::cpus::current_index();
        for (v, cpu) in self.running_on.iter().enumerate().filter(|(v, _)| mask & (1 << v) != 0) {
            crate::scheduling::wake(crate::scheduling::vcpu_ref(self.vm, v), &self.waiting[v]);
            let cpu = cpu.load(Ordering::Acquire);
            if cpu != usize::MAX && cpu != me {
                crate::cpus::kick(cpu);
            }
        }
    }
    /// Something may have changed for the vCPUs in `mask`.
    pub fn hint(&self, mask: u32) {
        for (v, h) in self.hints.iter().enumerate() {
            if mask & (1 << v) != 0 {
                h.store(true, Ordering::Release);
            }
        }
    }
    pub fn take_hint(&self, vcpu: usize) -> bool {
        // A plain load first: the common case (no hint) costs no atomic read-modify-write.
        self.hints.get(vcpu).is_some_and(|h| h.load(Ordering::Relaxed) && h.swap(false, Ordering::AcqRel))
    }
}

pub type SharedVgic = Arc<VgicHandle>;

fn to_mmio(e: AccessError, width: AccessWidth) -> MmioError {
    match e {
        AccessError::BadWidth { offset, .. } | AccessError::Unaligned { offset, .. } => {
            MmioError::BadWidth { offset, width }
        }
        AccessError::OutsideFrame { offset } | AccessError::NotPresent { offset } => MmioError::NoRegister { offset },
        AccessError::NoSuchVcpu { .. } => MmioError::NoRegister { offset: 0 },
    }
}

/// GICD: banked per accessing vCPU where the GIC version banks registers.
pub struct DistributorWindow(pub SharedVgic);

impl MmioDevice for DistributorWindow {
    fn name(&self) -> &'static str {
        "gic-distributor"
    }
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.read_by(0, offset, width)
    }
    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.write_by(0, offset, width, value)
    }
    fn read_by(&mut self, vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.vgic.lock().read(vcpu, offset, width.bytes() as usize).map_err(|e| to_mmio(e, width))
    }
    fn write_by(&mut self, vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let changed = {
            let mut vgic = self.0.vgic.lock();
            vgic.write(vcpu, offset, width.bytes() as usize, value).map_err(|e| to_mmio(e, width))?;
            vgic.take_kicks().0 as u32
        };
        self.0.hint(changed);
        // GICv2 SGIs (GICD_SGIR) and pending bits set for others: make them look.
        self.0.kick(changed & !(1 << vcpu));
        Ok(())
    }
}

/// GICR: one RD and one SGI frame per vCPU, in vCPU order.
pub struct RedistributorWindow(pub SharedVgic);

impl MmioDevice for RedistributorWindow {
    fn name(&self) -> &'static str {
        "gic-redistributor"
    }
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.vgic.lock().read_redistributor(offset, width.bytes() as usize).map_err(|e| to_mmio(e, width))
    }
    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let changed = {
            let mut vgic = self.0.vgic.lock();
            vgic.write_redistributor(offset, width.bytes() as usize, value).map_err(|e| to_mmio(e, width))?;
            vgic.take_kicks().0 as u32
        };
        self.0.hint(changed);
        Ok(())
    }
}
