//! The VM's PCI host bridge: configuration accesses reach function 0 of a device that
//! exists and read as all ones elsewhere, a bad width is a data abort, a BAR decodes in the
//! memory window only while the guest's configuration says so, and an MSI lands only on the
//! GIC's doorbell.

use std::sync::{Arc, Mutex};

use hyp_core::mmio::{BusDevice, MmioError};
use hyp_core::syndrome::AccessWidth;
use stage2::Ipa;
use vdev::virtio::net::VirtioNet;
use vdev::virtio::pci::{Message, VirtioPci};
use vdev::virtio::VecMemory;
use vgic::{Distributor, GicVersion, VgicConfig};

use super::leak;
use crate::fake::FakeArch;
use crate::scheduling::Scheduling;
use crate::shared_vgic::GicRam;
use crate::shared_vgic::VgicHandle;
use crate::virtio::pci::{
    Doorbell, EcamWindow, MemoryWindow, MessageTarget, PciBus, PciFunction, Undelivered, V2mWindow,
};
use crate::virtio::switch_port::SwitchPort;

/// A virtio-pci NIC behind a plain lock: the bridge against a real function's
/// configuration space.
struct Function(Mutex<VirtioPci<VirtioNet<SwitchPort>>>);

impl Function {
    fn new() -> Arc<Self> {
        Arc::new(Function(Mutex::new(VirtioPci::new(VirtioNet::new([2, 0, 0, 0, 0, 1], SwitchPort::default())))))
    }
}

fn error(e: vdev::virtio::RegisterError, width: AccessWidth) -> MmioError {
    match e {
        vdev::virtio::RegisterError::BadWidth { offset, .. } => MmioError::BadWidth { offset, width },
        _ => MmioError::NoRegister { offset: 0 },
    }
}

impl PciFunction for Function {
    fn name(&self) -> &'static str {
        "net"
    }
    fn config_read(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.lock().unwrap().config_read(offset, width.bytes() as u8).map(u64::from).map_err(|e| error(e, width))
    }
    fn config_write(&self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let mem = VecMemory::new(0x4000_0000, 0x1000);
        self.0
            .lock()
            .unwrap()
            .config_write(&mem, offset, width.bytes() as u8, value as u32)
            .map_err(|e| error(e, width))
    }
    fn bar0(&self) -> Option<u64> {
        self.0.lock().unwrap().bar0()
    }
    fn bar_read(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.lock().unwrap().bar_read(offset, width.bytes() as u8).map_err(|e| error(e, width))
    }
    fn bar_write(&self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let mem = VecMemory::new(0x4000_0000, 0x1000);
        self.0.lock().unwrap().bar_write(&mem, offset, width.bytes() as u8, value).map_err(|e| error(e, width))
    }
}

const WINDOW: u64 = 0x0a20_0000;
/// Device 1's configuration space in the ECAM window.
const DEVICE_1: u64 = 1 << 15;
const COMMAND: u64 = 0x04;
const BAR0: u64 = 0x10;
const BAR1: u64 = 0x14;
const MEMORY_SPACE: u64 = 1 << 1;

fn bridge() -> (EcamWindow, MemoryWindow) {
    let function = Function::new() as Arc<dyn PciFunction>;
    let bus = Arc::new(PciBus::new([(1u8, function)]));
    (EcamWindow(Arc::clone(&bus)), MemoryWindow { bus, base: WINDOW })
}

#[test]
fn configuration_reads_reach_the_function_and_read_all_ones_where_there_is_none() {
    let (ecam, _) = bridge();
    assert_eq!(ecam.read(0, DEVICE_1, AccessWidth::Word), Ok(0x1041_1af4), "virtio-net's vendor and device IDs");
    assert_eq!(ecam.read(0, DEVICE_1, AccessWidth::Halfword), Ok(0x1af4));
    for (offset, width, all_ones) in [
        (0, AccessWidth::Word, 0xffff_ffff),
        (2 << 15, AccessWidth::Halfword, 0xffff),
        (DEVICE_1 | (1 << 12), AccessWidth::Byte, 0xff),
        ((1 << 20) | DEVICE_1, AccessWidth::Word, 0xffff_ffff),
    ] {
        assert_eq!(ecam.read(0, offset, width), Ok(all_ones), "{offset:#x}: no function, no bus 1");
        assert_eq!(ecam.write(0, offset, width, 0), Ok(()), "ignored");
    }
    for (offset, width) in
        [(DEVICE_1, AccessWidth::Doubleword), (DEVICE_1 + 1, AccessWidth::Halfword), (DEVICE_1 + 2, AccessWidth::Word)]
    {
        assert_eq!(ecam.read(0, offset, width), Err(MmioError::BadWidth { offset, width }));
        assert_eq!(ecam.write(0, offset, width, u64::MAX), Err(MmioError::BadWidth { offset, width }));
    }
}

#[test]
fn a_bar_decodes_in_the_window_only_where_and_while_the_guest_placed_it() {
    let (ecam, memory) = bridge();
    let common_cfg_device_features = 0x04;
    assert_eq!(
        memory.read(0, common_cfg_device_features, AccessWidth::Word),
        Err(MmioError::Unmapped { ipa: Ipa(WINDOW + 4) }),
        "nothing decodes before the guest places a BAR"
    );
    ecam.write(0, DEVICE_1 | BAR0, AccessWidth::Word, WINDOW + 0x8000).unwrap();
    ecam.write(0, DEVICE_1 | BAR1, AccessWidth::Word, 0).unwrap();
    assert!(memory.read(0, 0x8004, AccessWidth::Word).is_err(), "placed, but Memory Space is off");
    ecam.write(0, DEVICE_1 | COMMAND, AccessWidth::Halfword, MEMORY_SPACE).unwrap();
    assert_ne!(memory.read(0, 0x8004, AccessWidth::Word), Ok(0), "DeviceFeatures word 0 through the BAR");
    assert_eq!(
        memory.read(0, 0x8000 + vdev::virtio::pci::BAR0_SIZE, AccessWidth::Word),
        Err(MmioError::Unmapped { ipa: Ipa(WINDOW + 0xc000) }),
        "past the BAR's end"
    );
    // Sizing the BAR takes it away; put back, it decodes again.
    ecam.write(0, DEVICE_1 | BAR0, AccessWidth::Word, 0xffff_ffff).unwrap();
    assert!(memory.read(0, 0x8004, AccessWidth::Word).is_err(), "a BAR being sized decodes nothing");
    ecam.write(0, DEVICE_1 | BAR0, AccessWidth::Word, WINDOW).unwrap();
    assert!(memory.read(0, 0x4, AccessWidth::Word).is_ok());
    ecam.write(0, DEVICE_1 | COMMAND, AccessWidth::Halfword, 0).unwrap();
    assert!(memory.read(0, 0x4, AccessWidth::Word).is_err(), "Memory Space off again");
    // A VM reset: nothing decodes until the guest places the BAR again.
    ecam.write(0, DEVICE_1 | COMMAND, AccessWidth::Halfword, MEMORY_SPACE).unwrap();
    assert!(memory.read(0, 0x4, AccessWidth::Word).is_ok());
    memory.bus.reset();
    assert_eq!(memory.read(0, 0x4, AccessWidth::Word), Err(MmioError::Unmapped { ipa: Ipa(WINDOW + 4) }));
}

/// GICD_ISENABLER<n>, GICD_ISPENDR<n>, GICD_ICFGR<n> (IHI 0069H 12.9).
const ISENABLER: u64 = 0x100;
const ISPENDR: u64 = 0x200;
const ICFGR: u64 = 0xc00;

/// A GICv3 VM's ITS, booted as Linux boots it (docs/vgic.md, "The ITS"): its tables in
/// `ram`, LPIs enabled on vCPU 0, a queue, collection 0 on vCPU 0, device `device` mapped
/// with event 0 translated to LPI 8192, enabled at priority 0xa0.
fn its_with_one_lpi(vgic: &VgicHandle<FakeArch>, ram: &VecMemory, device: u64) {
    use vdev::virtio::GuestMemory as _;
    let (queue, props) = (ram.base(), ram.base() + 0x1_0000);
    let ram_view = GicRam(ram);
    let mut next = 0;
    let mut command = |dw: [u64; 4]| {
        let bytes: Vec<u8> = dw.iter().flat_map(|d| d.to_le_bytes()).collect();
        ram.write(queue + next, &bytes).unwrap();
        next += 32;
        let errors = vgic.write_its(0x88, AccessWidth::Doubleword, next, &ram_view).unwrap();
        assert_eq!(errors.count(), 0, "{:?}", errors.first());
    };
    vgic.write_redistributor(0x70, AccessWidth::Doubleword, props | 13, &ram_view).unwrap();
    vgic.write_redistributor(0x00, AccessWidth::Word, 1, &ram_view).unwrap();
    vgic.write_its(0x80, AccessWidth::Doubleword, 1 << 63 | queue, &ram_view).unwrap();
    vgic.write_its(0x00, AccessWidth::Word, 1, &ram_view).unwrap();
    ram.write(props, &[0xa0 | 1]).unwrap();
    command([0x09, 0, 1 << 63, 0]); // MAPC 0 -> vCPU 0
    command([0x08 | device << 32, 1, 1 << 63 | (queue + 0x2_0000), 0]); // MAPD, 4 events
    command([0x0a | device << 32, 8192 << 32, 0, 0]); // MAPTI event 0 -> 8192
    command([0x0c | device << 32, 0, 0, 0]); // INV
}

#[test]
fn an_msi_lands_only_on_the_doorbell_of_the_vms_gic() {
    let scheduling = leak(Scheduling::<FakeArch>::new());
    scheduling.init(1);
    let gic = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 96, lpis: 64 }).unwrap();
    let vgic = Arc::new(VgicHandle::new(0, gic, scheduling));
    vgic.lock().write(0, 0, 4, 0b11).unwrap(); // GICD_CTLR: both groups
    let translater = 0x0808_0000 + vgic::GITS_TRANSLATER;
    // Device 3 of bus 0: requester ID 3 << 3.
    let target =
        MessageTarget { vgic: Arc::clone(&vgic), doorbell: translater, kind: Doorbell::Its { device_id: 3 << 3 } };
    let pending = |t: &MessageTarget<FakeArch>| t.vgic.lock().interrupt(0, vgic::IntId(8192)).unwrap().pending;
    assert_eq!(target.send(&Message { address: 0x4000_0000, data: 0 }), Err(Undelivered::NoDoorbell), "RAM");
    assert_eq!(
        target.send(&Message { address: 0x0800_0040, data: 96 }),
        Err(Undelivered::NoDoorbell),
        "nor GICD_SETSPI_NSR: the VM's MSIs go to its ITS"
    );
    assert!(
        matches!(target.send(&Message { address: translater, data: 0 }), Err(Undelivered::Untranslated(_))),
        "nothing mapped yet"
    );
    let ram = VecMemory::new(0x4000_0000, 0x3_0000);
    its_with_one_lpi(&vgic, &ram, 3 << 3);
    assert!(!pending(&target));
    // vCPU 0, the LPI's target, runs on CPU 1; the message is sent on CPU 0 (a side core's
    // pass, another vCPU's exit): CPU 1 is kicked.
    FakeArch::become_cpu(0);
    let _ = FakeArch::take_kicks();
    target.vgic.running_on[0].store(1, std::sync::atomic::Ordering::Release);
    assert_eq!(target.send(&Message { address: translater, data: 0 }), Ok(()));
    assert!(pending(&target), "the LPI the event translates to");
    assert_eq!(FakeArch::take_kicks(), vec![1], "the target vCPU's CPU");
    assert!(target.vgic.take_hint(0));
    // Sent on the target's own CPU: no kick, the hint is enough.
    FakeArch::become_cpu(1);
    assert_eq!(target.send(&Message { address: translater, data: 0 }), Ok(()));
    assert!(FakeArch::take_kicks().is_empty());
    assert!(target.vgic.take_hint(0));
    // Another function's requester ID has no translation.
    let other =
        MessageTarget { vgic: Arc::clone(&vgic), doorbell: translater, kind: Doorbell::Its { device_id: 4 << 3 } };
    assert!(matches!(other.send(&Message { address: translater, data: 0 }), Err(Undelivered::Untranslated(_))));
}

/// A GICv2's MSIs go to its GICv2m frame: a message there makes the SPI it names pending if
/// the frame has it, and the guest's own write of MSI_SETSPI_NS does the same.
#[test]
fn a_gicv2_vm_s_msis_land_on_its_gicv2m_frame() {
    let scheduling = leak(Scheduling::<FakeArch>::new());
    scheduling.init(1);
    let mut gic = Distributor::new(VgicConfig { version: GicVersion::V2, vcpus: 1, spis: 96, lpis: 0 }).unwrap();
    for intid in [40u32, 100] {
        gic.write(0, ICFGR + 4 * u64::from(intid / 16), 4, 2 << (2 * (intid % 16))).unwrap();
        gic.write(0, ISENABLER + 4 * u64::from(intid / 32), 4, 1 << (intid % 32)).unwrap();
    }
    let vgic = Arc::new(VgicHandle::new(0, gic, scheduling));
    let frame = vgic::V2mFrame::new(96, 32).unwrap();
    let target = MessageTarget { vgic: Arc::clone(&vgic), doorbell: 0x0802_0040, kind: Doorbell::V2m(frame) };
    let pending =
        |intid: u32| vgic.lock().read(0, ISPENDR + 4 * u64::from(intid / 32), 4).unwrap() & (1 << (intid % 32)) != 0;
    FakeArch::become_cpu(0);
    vgic.running_on[0].store(1, std::sync::atomic::Ordering::Release);
    let _ = FakeArch::take_kicks();
    assert_eq!(
        target.send(&Message { address: 0x0800_0040, data: 100 }),
        Err(Undelivered::NoDoorbell),
        "a GICv2 has no GICD_SETSPI_NSR"
    );
    assert_eq!(
        target.send(&Message { address: 0x0802_0040, data: 40 }),
        Ok(()),
        "on the doorbell, but no SPI of the frame"
    );
    assert!(!pending(40));
    assert_eq!(target.send(&Message { address: 0x0802_0040, data: 100 }), Ok(()));
    assert!(pending(100));
    assert_eq!(FakeArch::take_kicks(), vec![1]);

    let window = V2mWindow { vgic: Arc::clone(&vgic), frame };
    assert_eq!(window.read(0, 0x008, AccessWidth::Word), Ok((96 << 16) | 32), "MSI_TYPER");
    vgic.lock().write(0, 0x280 + 4 * (100 / 32), 4, 1 << (100 % 32)).unwrap();
    assert!(!pending(100));
    window.write(0, 0x040, AccessWidth::Word, 100).unwrap();
    assert!(pending(100), "the guest's own write of MSI_SETSPI_NS");
    assert!(window.write(0, 0x040, AccessWidth::Halfword, 100).is_err());
}

/// A GICv3 VM of one vCPU with `lpis` LPIs, on a board (this thread's) with a GICv4.0.
fn vgic_on_a_gicv4(lpis: usize) -> Arc<VgicHandle<FakeArch>> {
    let scheduling = leak(Scheduling::<FakeArch>::new());
    scheduling.init(2);
    FakeArch::give_gicv4(true);
    let gic = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 96, lpis }).unwrap();
    Arc::new(VgicHandle::new(0, gic, scheduling))
}

/// With the board's GICv4.0 (crate::direct_lpis), a VM with an ITS is attached to it: the
/// guest's mapping goes to the board's ITS, a device's message is the board's to raise
/// (no kick, nothing pending in the vGIC), and the VM's events and vPEs are given back
/// when its vGIC goes.
#[test]
fn with_a_gicv4_a_message_is_raised_by_the_board_and_the_vgic_keeps_nothing() {
    let vgic = vgic_on_a_gicv4(64);
    let attached = vgic.inject_lpis_directly(1).unwrap().expect("attached");
    assert_eq!(vgic.inject_lpis_directly(1), Ok(Some(attached)), "once");
    vgic.lock().write(0, 0, 4, 0b11).unwrap();
    assert_eq!(FakeArch::take_vlpi_events(), ["attach vm0 1 vcpus cpu1"]);
    let ram = VecMemory::new(0x4000_0000, 0x3_0000);
    its_with_one_lpi(&vgic, &ram, 3 << 3);
    assert_eq!(
        FakeArch::take_vlpi_events(),
        ["Configure { lpi: 8192, config: 161, mapped: false }", "Map { lpi: 8192, vcpu: 0 }"],
        "configured, then mapped, by the guest's own commands"
    );
    let translater = 0x0808_0000 + vgic::GITS_TRANSLATER;
    let target =
        MessageTarget { vgic: Arc::clone(&vgic), doorbell: translater, kind: Doorbell::Its { device_id: 3 << 3 } };
    FakeArch::become_cpu(0);
    let _ = FakeArch::take_kicks();
    target.vgic.running_on[0].store(1, std::sync::atomic::Ordering::Release);
    let _ = target.vgic.take_hint(0);
    assert_eq!(target.send(&Message { address: translater, data: 0 }), Ok(()));
    assert_eq!(FakeArch::take_vlpi_events(), ["Raise { lpi: 8192 }"]);
    assert!(FakeArch::take_kicks().is_empty(), "the board delivers it: no kick");
    assert!(!target.vgic.take_hint(0));
    assert!(!vgic.lock().interrupt(0, vgic::IntId(8192)).unwrap().pending, "nothing pending in the vGIC");
    // A message the guest's ITS does not translate is refused as before.
    let other =
        MessageTarget { vgic: Arc::clone(&vgic), doorbell: translater, kind: Doorbell::Its { device_id: 4 << 3 } };
    assert!(matches!(other.send(&Message { address: translater, data: 0 }), Err(Undelivered::Untranslated(_))));
    assert!(FakeArch::take_vlpi_events().is_empty());
    // A step the board's ITS refuses is counted, for the line at the VM's end.
    assert_eq!(vgic.direct_failures(), 0);
    FakeArch::refuse_vlpi_commands(true);
    assert_eq!(target.send(&Message { address: translater, data: 0 }), Ok(()), "the guest's message was taken");
    FakeArch::refuse_vlpi_commands(false);
    assert_eq!(FakeArch::take_vlpi_events(), ["Raise { lpi: 8192 }"]);
    assert_eq!(vgic.direct_failures(), 1);
    drop((target, other));
    drop(vgic);
    assert_eq!(FakeArch::take_vlpi_events(), ["Discard { lpi: 8192 }", "detach vm0"]);
    FakeArch::give_gicv4(false);
}

/// A VM without LPIs (a GICv2, or no ITS) is never attached, GICv4 or not.
#[test]
fn a_vm_without_lpis_keeps_its_interrupts_in_its_vgic_on_a_gicv4() {
    let vgic = vgic_on_a_gicv4(0);
    assert_eq!(vgic.inject_lpis_directly(0), Ok(None));
    drop(vgic);
    assert!(FakeArch::take_vlpi_events().is_empty());
    FakeArch::give_gicv4(false);
}
