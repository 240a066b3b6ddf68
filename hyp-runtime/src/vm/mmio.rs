//! Where a VM's trapped MMIO accesses go. The vGIC's windows, at fixed IPAs and the most
//! used (Linux reads and writes the distributor on every interrupt it configures), go to
//! the vGIC at once; the rest goes through the bus, which takes no lock (each device locks
//! itself).

use hyp_core::guest_fdt::GICD_SIZE;
use hyp_core::guest_map::{GICD_IPA, GICR_IPA, UART_IPA};
use hyp_core::mmio::{MmioDispatch, MmioError};
use hyp_core::syndrome::AccessWidth;
use stage2::Ipa;
use vgic::GICR_FRAME_SIZE;

use super::Vm;
use crate::shared_vgic::GicRam;
use crate::virtio::slot::VmEnv;

// The redistributors of the most vCPUs a VM may have end below the UART (`vgic_window`).
const _: () = assert!(GICR_IPA + GICR_FRAME_SIZE * vgic::MAX_VCPUS as u64 <= UART_IPA);

pub struct GuestMmio<'a, E: VmEnv>(&'a Vm<E>);

#[derive(Clone, Copy)]
enum VgicWindow {
    Distributor,
    Redistributors,
}

impl<'a, E: VmEnv> GuestMmio<'a, E> {
    pub(super) fn new(vm: &'a Vm<E>) -> Self {
        GuestMmio(vm)
    }

    /// The offset of `ipa` in the distributor window, or in the redistributors' (GICv3).
    #[inline(always)]
    fn vgic_window(&self, ipa: Ipa) -> Option<(VgicWindow, u64)> {
        // One test for every other device (they all lie above: the UART first).
        if !(GICD_IPA..UART_IPA).contains(&ipa.0) {
            return None;
        }
        if let Some(offset) = ipa.0.checked_sub(GICD_IPA).filter(|&o| o < GICD_SIZE) {
            return Some((VgicWindow::Distributor, offset));
        }
        let redistributors = GICR_FRAME_SIZE * u64::from(self.0.spec.vcpus);
        let offset = ipa.0.checked_sub(GICR_IPA).filter(|&o| self.0.gic_v3 && o < redistributors)?;
        Some((VgicWindow::Redistributors, offset))
    }
}

/// `read` and `write` are inlined into the exit path, each a test of the vGIC's windows and
/// a call of the vGIC or the bus: out of line, the function saved and restored every
/// register the vGIC's inlined decoder used, on the bus's path too, and returned its answer
/// through memory (docs/performance.md, "Trapped MMIO accesses").
impl<E: VmEnv> MmioDispatch for GuestMmio<'_, E> {
    #[inline(always)]
    fn read(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth) -> Result<u64, MmioError> {
        match self.vgic_window(ipa) {
            Some((VgicWindow::Distributor, offset)) => self.0.vgic.read_distributor(vcpu, offset, width),
            Some((VgicWindow::Redistributors, offset)) => self.0.vgic.read_redistributor(offset, width),
            None => self.0.bus.read(vcpu, ipa, width),
        }
    }
    #[inline(always)]
    fn write(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let value = value & width.mask();
        match self.vgic_window(ipa) {
            Some((VgicWindow::Distributor, offset)) => self.0.vgic.write_distributor(vcpu, offset, width, value),
            Some((VgicWindow::Redistributors, offset)) => {
                self.0.vgic.write_redistributor(offset, width, value, &GicRam(&self.0.gic_ram))
            }
            None => self.0.bus.write(vcpu, ipa, width, value),
        }
    }
    fn device_name(&mut self, ipa: Ipa) -> Option<&'static str> {
        match self.vgic_window(ipa) {
            Some((VgicWindow::Distributor, _)) => Some("gic-distributor"),
            Some((VgicWindow::Redistributors, _)) => Some("gic-redistributor"),
            None => self.0.bus.device_name(ipa),
        }
    }
    fn first_touch(&mut self, ipa: Ipa) -> bool {
        self.0.first_touch.fault(ipa.0)
    }
}
