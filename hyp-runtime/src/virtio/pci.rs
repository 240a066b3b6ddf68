//! A VM's PCI host bridge (docs/virtio.md, "The virtio-pci transport"): bus 0's
//! configuration space (ECAM) and the memory window the guest places its functions' BARs
//! in, each a window on the VM's MMIO bus ([`EcamWindow`], [`MemoryWindow`]), dispatching
//! to the functions by device number and by BAR; and where a function's MSI-X messages go
//! ([`MessageTarget`]): a GICv3's ITS ([`ItsWindow`]), a GICv2's GICv2m frame
//! ([`V2mWindow`]).

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

use hyp_core::mmio::{BusDevice, MmioError};
use hyp_core::syndrome::AccessWidth;
use stage2::Ipa;
use vdev::virtio::pci::ecam::EcamAddress;
use vdev::virtio::pci::{Message, BAR0_SIZE};
use vgic::V2mFrame;

use crate::arch::Arch;
use crate::shared_vgic::{GicRam, SharedVgic};

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
/// address of the VM that takes one is its GIC's doorbell: a GICv3's ITS's
/// GITS_TRANSLATER, or a GICv2's GICv2m frame's MSI_SETSPI_NS. A message to anywhere else
/// (the guest's RAM, another register) is not written: the device model never writes the
/// VM's memory but through its rings.
pub struct MessageTarget<A: Arch> {
    pub vgic: SharedVgic<A>,
    /// The IPA of the doorbell register.
    pub doorbell: u64,
    pub kind: Doorbell,
}

/// Which doorbell a function's messages go to, and what it knows of the function.
#[derive(Clone, Copy, Debug)]
pub enum Doorbell {
    /// A GICv3's ITS, which names the function by its requester ID (its DeviceID through
    /// the bridge's `msi-map`) and the message by its data (the EventID).
    Its { device_id: u32 },
    /// A GICv2's GICv2m frame, whose SPIs a message may name.
    V2m(V2mFrame),
}

/// Why a message made nothing pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// It is addressed to no doorbell of the VM.
    NoDoorbell,
    /// The ITS has no translation for it (the guest mapped no LPI to that event).
    Untranslated(vgic::MsiError),
}

impl<A: Arch> MessageTarget<A> {
    /// Sends `m` (a GICv2m frame's SPIs outside its range are ignored, as the frame does).
    pub fn send(&self, m: &Message) -> Result<(), Undelivered> {
        if m.address != self.doorbell {
            return Err(Undelivered::NoDoorbell);
        }
        match self.kind {
            Doorbell::Its { device_id } => {
                self.vgic.send_msi_as_device(device_id, m.data).map_err(Undelivered::Untranslated)?
            }
            Doorbell::V2m(frame) => {
                if let Some(intid) = frame.spi(m.data) {
                    self.vgic.inject_edge_as_device(intid);
                }
            }
        }
        Ok(())
    }
}

/// A GICv3's ITS on the VM's bus (`guest_map::ITS_IPA`): the guest's driver writes its
/// command queue's registers; the queue and the LPI configuration table are read from the
/// VM's RAM. Commands the ITS refused are said, with the VM and vCPU, through its limit.
pub struct ItsWindow<A: Arch, B: crate::board::Board, R: vdev::virtio::GuestMemory> {
    pub vm: usize,
    pub vgic: SharedVgic<A>,
    pub ram: R,
    pub log: Arc<hyp_core::log_limit::GuestLogLimit>,
    pub board: core::marker::PhantomData<fn() -> B>,
}

impl<A: Arch, B: crate::board::Board, R: vdev::virtio::GuestMemory + Send + Sync> BusDevice for ItsWindow<A, B, R> {
    fn name(&self) -> &'static str {
        "gic-its"
    }
    fn read(&self, vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let (value, errors) = self.vgic.read_its(offset, width, &GicRam(&self.ram))?;
        self.say(vcpu, errors);
        Ok(value)
    }
    fn write(&self, vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let errors = self.vgic.write_its(offset, width, value, &GicRam(&self.ram))?;
        self.say(vcpu, errors);
        Ok(())
    }
}

impl<A: Arch, B: crate::board::Board, R: vdev::virtio::GuestMemory> ItsWindow<A, B, R> {
    /// The commands the ITS refused in one access, in a line through the VM's limit.
    fn say(&self, vcpu: usize, errors: vgic::CommandErrors) {
        if let Some(first) = errors.first() {
            crate::guest_log::guest_line::<A, B>(
                &self.log,
                format_args!(
                    "hypervisor: vm{} vcpu{vcpu}: ITS: {} command(s) refused and skipped, the first: {first}",
                    self.vm,
                    errors.count()
                ),
            );
        }
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
