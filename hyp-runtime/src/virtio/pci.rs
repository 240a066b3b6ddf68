//! A VM's PCI host bridge (docs/virtio.md, "The virtio-pci transport"): bus 0's
//! configuration space (ECAM) and the memory window the guest places its functions' BARs
//! in, each a window on the VM's MMIO bus ([`EcamWindow`], [`MemoryWindow`]), dispatching
//! to the functions by device number and by BAR; and where a function's MSI-X messages go
//! ([`MessageTarget`]), with a GICv2's GICv2m frame ([`V2mWindow`]).

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

use hyp_core::mmio::{BusDevice, MmioError};
use hyp_core::syndrome::AccessWidth;
use stage2::Ipa;
use vdev::virtio::pci::ecam::EcamAddress;
use vdev::virtio::pci::{Message, BAR0_SIZE};
use vgic::V2mFrame;

use crate::arch::Arch;
use crate::shared_vgic::SharedVgic;

/// Devices on bus 0 (PCI Local Bus 3.0, 6.2.1: a device number is 5 bits).
pub const DEVICES: usize = 32;

/// A function of the bus: its configuration space and its one memory BAR.
pub trait PciFunction: Send + Sync {
    fn name(&self) -> &'static str;
    /// A read of its configuration space at `offset` (< 4 KiB).
    fn config_read(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError>;
    fn config_write(&self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError>;
    /// BAR0's address while the function decodes it (`VirtioPci::bar0`).
    fn bar0(&self) -> Option<u64>;
    /// An access at `offset` within BAR0.
    fn bar_read(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError>;
    fn bar_write(&self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError>;
}

/// Bus 0: function 0 of each device number that has one.
pub struct PciBus {
    functions: [Option<Arc<dyn PciFunction>>; DEVICES],
    /// Each function's BAR0 while it decodes (`NONE` otherwise), as its last configuration
    /// write left it: a BAR access finds its function without taking any function's lock.
    bars: [AtomicU64; DEVICES],
}

const NONE: u64 = u64::MAX;

impl PciBus {
    /// The bus with `functions`, each at its device number.
    pub fn new(functions: impl IntoIterator<Item = (u8, Arc<dyn PciFunction>)>) -> Self {
        let mut bus = PciBus { functions: Default::default(), bars: core::array::from_fn(|_| AtomicU64::new(NONE)) };
        for (device, function) in functions {
            if let Some(slot) = bus.functions.get_mut(usize::from(device)) {
                *slot = Some(function);
            }
        }
        bus
    }

    /// After the functions' power-on reset (a VM reset): no BAR decodes until the guest
    /// places it again.
    pub fn reset(&self) {
        for bar in &self.bars {
            bar.store(NONE, Ordering::Release);
        }
    }

    fn function(&self, at: EcamAddress) -> Option<&Arc<dyn PciFunction>> {
        // Only bus 0 is behind the bridge (`bus-range`), and each device has function 0 alone.
        if at.bus != 0 || at.function != 0 {
            return None;
        }
        self.functions.get(usize::from(at.device))?.as_ref()
    }

    /// The function whose BAR0 holds `ipa`, and the offset there. Two BARs the guest placed
    /// over each other: the lower device number's answers.
    fn decoding(&self, ipa: u64) -> Option<(&Arc<dyn PciFunction>, u64)> {
        self.bars.iter().zip(&self.functions).find_map(|(bar, function)| {
            let base = bar.load(Ordering::Acquire);
            let offset = ipa.checked_sub(base).filter(|&o| base != NONE && o < BAR0_SIZE)?;
            Some((function.as_ref()?, offset))
        })
    }
}

/// Configuration accesses are 1, 2 or 4 bytes, naturally aligned (PCI Express Base 7.2.2:
/// ECAM); anything else is a data abort.
fn config_width(offset: u64, width: AccessWidth) -> Result<(), MmioError> {
    let bytes = width.bytes();
    if bytes > 4 || !offset.is_multiple_of(bytes) {
        return Err(MmioError::BadWidth { offset, width });
    }
    Ok(())
}

/// The ECAM window (`guest_map::PCI_ECAM_IPA`).
pub struct EcamWindow(pub Arc<PciBus>);

impl BusDevice for EcamWindow {
    fn name(&self) -> &'static str {
        "pci-ecam"
    }

    /// A function that does not exist reads as all ones (its Vendor ID 0xffff: PCI Local
    /// Bus 3.0, 6.2.1), as a master abort would.
    fn read(&self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        config_width(offset, width)?;
        let at = EcamAddress::decode(offset);
        match self.0.function(at) {
            Some(f) => f.config_read(u64::from(at.register), width),
            None => Ok(u64::MAX >> (64 - 8 * width.bytes())),
        }
    }

    /// Writes to a function that does not exist are ignored. After a write to one that
    /// does, its BAR0 is looked at again: the write may have moved it or switched its
    /// decoding on or off.
    fn write(&self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        config_width(offset, width)?;
        let at = EcamAddress::decode(offset);
        let Some(f) = self.0.function(at) else { return Ok(()) };
        let written = f.config_write(u64::from(at.register), width, value);
        self.0.bars[usize::from(at.device)].store(f.bar0().unwrap_or(NONE), Ordering::Release);
        written
    }
}

/// The memory window the BARs are placed in (`guest_map::PCI_MMIO_IPA`), at `base`. An
/// access where no BAR decodes is a data abort, as an access where nothing is mapped.
pub struct MemoryWindow {
    pub bus: Arc<PciBus>,
    pub base: u64,
}

impl MemoryWindow {
    fn decode(&self, offset: u64) -> Result<(&Arc<dyn PciFunction>, u64), MmioError> {
        let ipa = self.base + offset;
        self.bus.decoding(ipa).ok_or(MmioError::Unmapped { ipa: Ipa(ipa) })
    }
}

impl BusDevice for MemoryWindow {
    fn name(&self) -> &'static str {
        "pci-memory"
    }
    fn read(&self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let (f, at) = self.decode(offset)?;
        f.bar_read(at, width)
    }
    fn write(&self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let (f, at) = self.decode(offset)?;
        f.bar_write(at, width, value)
    }
}

/// Where a VM's MSIs land: an MSI is a write of its data to its address, and the only
/// address of the VM that takes one is its GIC's doorbell: a GICv3 distributor's
/// GICD_SETSPI_NSR, for its message-based SPIs (`vgic::GICD_SETSPI_NSR`), or a GICv2's
/// GICv2m frame's MSI_SETSPI_NS (`frame`). A message to anywhere else (the guest's RAM,
/// another register) is not written: the device model never writes the VM's memory but
/// through its rings.
pub struct MessageTarget<A: Arch> {
    pub vgic: SharedVgic<A>,
    /// The IPA of the doorbell register.
    pub doorbell: u64,
    /// A GICv2's GICv2m frame, whose SPIs a message may name; None: a GICv3's distributor.
    pub frame: Option<V2mFrame>,
}

impl<A: Arch> MessageTarget<A> {
    /// Sends `m`; false if it names no doorbell (dropped: the caller logs it).
    pub fn send(&self, m: &Message) -> bool {
        if m.address != self.doorbell {
            return false;
        }
        match &self.frame {
            None => {
                let _ = self.vgic.write_distributor_as_device(vgic::GICD_SETSPI_NSR, m.data);
            }
            Some(frame) => {
                if let Some(intid) = frame.spi(m.data) {
                    self.vgic.inject_edge_as_device(intid);
                }
            }
        }
        true
    }
}

/// A GICv2's GICv2m frame on the VM's bus (`guest_map::GICV2M_IPA`): the guest reads its
/// MSI_TYPER, and may write MSI_SETSPI_NS itself as its devices' messages do.
pub struct V2mWindow<A: Arch> {
    pub vgic: SharedVgic<A>,
    pub frame: V2mFrame,
}

impl<A: Arch> BusDevice for V2mWindow<A> {
    fn name(&self) -> &'static str {
        "gicv2m"
    }
    fn read(&self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.frame.read(offset, width.bytes() as usize).map_err(|_| MmioError::BadWidth { offset, width })
    }
    fn write(&self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let spi = self
            .frame
            .write(offset, width.bytes() as usize, value)
            .map_err(|_| MmioError::BadWidth { offset, width })?;
        if let Some(intid) = spi {
            self.vgic.inject_edge_as_device(intid);
        }
        Ok(())
    }
}
