//! A VM's virtual GIC as the MMIO bus sees it: the distributor and redistributor windows
//! forward trapped guest accesses to the VM's `vgic::Vgic`.

use alloc::sync::Arc;

use hyp_core::mmio::{MmioDevice, MmioError};
use hyp_core::syndrome::AccessWidth;
use spin::Mutex;
use vgic::{AccessError, Vgic};

pub type SharedVgic = Arc<Mutex<Vgic>>;

fn to_mmio(e: AccessError, width: AccessWidth) -> MmioError {
    match e {
        AccessError::BadWidth { offset, .. } | AccessError::Unaligned { offset } => MmioError::BadWidth { offset, width },
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
        self.0.lock().read(vcpu, offset, width.bytes() as u8).map_err(|e| to_mmio(e, width))
    }
    fn write_by(&mut self, vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.0.lock().write(vcpu, offset, width.bytes() as u8, value).map(|_| ()).map_err(|e| to_mmio(e, width))
    }
}

/// GICR: one RD and one SGI frame per vCPU, in vCPU order.
pub struct RedistributorWindow(pub SharedVgic);

impl MmioDevice for RedistributorWindow {
    fn name(&self) -> &'static str {
        "gic-redistributor"
    }
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.lock().read_redistributor(offset, width.bytes() as u8).map_err(|e| to_mmio(e, width))
    }
    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.0.lock().write_redistributor(offset, width.bytes() as u8, value).map(|_| ()).map_err(|e| to_mmio(e, width))
    }
}
