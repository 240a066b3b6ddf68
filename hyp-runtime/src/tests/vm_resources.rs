//! A VM's capabilities: created, destroyed and created again with everything it was given
//! revoked and its memory returned; a failure halfway leaves nothing behind.

use hyp_core::cap::{CapError, CapId, CapSpace, RegionKind};
use hyp_core::guest_map::{RAM_IPA, UART_IPA, UART_SIZE};
use hyp_core::platform::PhysRange;
use std::cell::RefCell;
use std::rc::Rc;

use stage2::testing::VecTableMemory;
use stage2::{Ipa, PhysAddr, TableFormat, TlbMaintenance};

use crate::passthrough::{PassthroughDevice, PassthroughSpi};
use crate::vm_resources::{grant_resources, revoke_all, VmRequest, VmResources};

const MIB: u64 = 1 << 20;
const UNTYPED: PhysRange = PhysRange { base: 0x4000_0000, size: 64 * MIB };
const DEVICE: PhysRange = PhysRange { base: 0x1c09_0000, size: 0x1000 };

struct World {
    caps: CapSpace,
    mem: VecTableMemory,
    untyped: Vec<CapId>,
    device: PassthroughDevice,
}

impl World {
    fn new() -> World {
        let mut caps = CapSpace::new(TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 40 });
        let untyped = vec![caps.add_untyped(UNTYPED).unwrap()];
        let region = caps.add_device_region(DEVICE, RegionKind::DeviceMmio).unwrap();
        let spi = PassthroughSpi { intid: 37, cap: caps.add_interrupt(37).unwrap(), flags: 4 };
        let device = PassthroughDevice {
            name: "rtc",
            reg: DEVICE,
            region,
            spis: vec![spi],
            compatible: vec![],
            properties: vec![],
            clock_hz: None,
            dma_ranges: vec![],
        };
        World { caps, mem: VecTableMemory::with_capacity(256), untyped, device }
    }

    fn grant(&mut self, memory: u64, passthrough: bool) -> Result<VmResources, CapError> {
        self.grant_with(memory, passthrough, false)
    }

    fn grant_with(&mut self, memory: u64, passthrough: bool, pci: bool) -> Result<VmResources, CapError> {
        let devices = if passthrough { std::slice::from_ref(&self.device) } else { &[] };
        let request = VmRequest {
            memory,
            vcpus: 2,
            gicv: None,
            passthrough: devices,
            ram_at: None,
            shadow_from: &self.untyped,
            pci,
        };
        grant_resources(&mut self.caps, &mut self.mem, |_| Tlb::default(), &self.untyped, &request)
    }

    /// The VM's first touch of the page at `ipa`: the blocks zeroed (physical address, size).
    fn touch(&mut self, vm: &VmResources, ipa: u64) -> Vec<(u64, u64)> {
        let mut zeroed = Vec::new();
        let page = stage2::IpaRange::new(Ipa(ipa), 0x1000).unwrap();
        let mut zero = |pa: PhysAddr, len| zeroed.push((pa.0, len));
        self.caps.zero_on_first_touch(&mut self.mem, &mut Tlb::default(), vm.vm_cap, page, &mut zero).unwrap();
        zeroed
    }

    /// Destroys the VM; the TLB maintenance it did.
    fn revoke(&mut self, vm: &VmResources) -> Vec<Maintenance> {
        let mut tlb = Tlb::default();
        revoke_all(&mut self.caps, &mut self.mem, &mut tlb, vm.vm_cap).unwrap();
        tlb.0.take()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maintenance {
    Ipa,
    Vmid(u16),
    Publish,
}

#[derive(Default)]
struct Tlb(Rc<RefCell<Vec<Maintenance>>>);

impl TlbMaintenance for Tlb {
    fn invalidate_ipa(&mut self, _: u16, _: Ipa) {
        self.0.borrow_mut().push(Maintenance::Ipa);
    }
    fn invalidate_vmid(&mut self, vmid: u16) {
        self.0.borrow_mut().push(Maintenance::Vmid(vmid));
    }
    fn publish(&mut self) {
        self.0.borrow_mut().push(Maintenance::Publish);
    }
}

#[test]
fn a_vm_gets_its_ram_at_the_guest_address_and_gives_everything_back() {
    let mut world = World::new();
    let caps_before = world.caps.capability_count();
    let vm = world.grant(16 * MIB, true).unwrap();
    assert_eq!(vm.ram.size, 16 * MIB);
    assert!(vm.ram.base >= UNTYPED.base && vm.ram.base + vm.ram.size <= UNTYPED.base + UNTYPED.size);
    assert_eq!(vm.ram.base % (2 * MIB), 0, "2 MiB-aligned: stage 2 maps it in blocks");
    assert!(vm.table_frames > 0 && vm.vttbr != 0);
    let table = world.caps.vm_table(world.caps.vm_id(vm.vm_cap).unwrap()).unwrap();
    assert_eq!(table.translate(&world.mem, Ipa(RAM_IPA)), None, "RAM is zeroed and mapped on first touch");
    assert_eq!(world.touch(&vm, RAM_IPA), vec![(vm.ram.base, 2 * MIB)]);
    let table = world.caps.vm_table(world.caps.vm_id(vm.vm_cap).unwrap()).unwrap();
    assert_eq!(table.translate(&world.mem, Ipa(RAM_IPA)).map(|t| t.pa), Some(PhysAddr(vm.ram.base)));
    let device = table.translate(&world.mem, Ipa(DEVICE.base)).map(|t| t.pa);
    assert_eq!(device, Some(PhysAddr(DEVICE.base)), "IPA = PA");
    let vmid = table.vmid();
    // The UART's window has its shadow page (docs/devices.md), hidden until the UART shows it.
    let id = world.caps.vm_id(vm.vm_cap).unwrap();
    let shadow = world.caps.window_shadow(id, Ipa(UART_IPA)).expect("the UART's window has a shadow page");
    assert_eq!(shadow.size, UART_SIZE);
    assert!(shadow.base + shadow.size <= vm.ram.base || shadow.base >= vm.ram.base + vm.ram.size, "not in its RAM");
    assert_eq!(table.translate(&world.mem, Ipa(UART_IPA)), None, "hidden: every access traps");
    world.caps.show_window_shadow(&mut world.mem, &mut Tlb::default(), vm.vm_cap, Ipa(UART_IPA), true).unwrap();
    let table = world.caps.vm_table(id).unwrap();
    assert_eq!(table.translate(&world.mem, Ipa(UART_IPA + 0x18)).map(|t| t.pa), Some(PhysAddr(shadow.base + 0x18)));

    let events = world.revoke(&vm);
    assert!(events.contains(&Maintenance::Vmid(vmid)), "its TLB entries go: {events:?}");
    assert_eq!(world.mem.frames_in_use(), 0, "its stage-2 tables are freed");
    assert_eq!(world.caps.capability_count(), caps_before, "every capability it was given is gone");
    // All the memory is back: one VM may now take all of it.
    let whole = world.grant(UNTYPED.size, false).unwrap();
    assert_eq!(whole.ram, UNTYPED);
}

#[test]
fn create_destroy_and_restart_many_times_leak_nothing() {
    let mut world = World::new();
    let caps_before = world.caps.capability_count();
    for round in 0..50 {
        let vm = world.grant(8 * MIB, round % 2 == 0).unwrap_or_else(|e| panic!("round {round}: {e}"));
        world.revoke(&vm);
        assert_eq!(world.mem.frames_in_use(), 0, "round {round}");
        assert_eq!(world.caps.capability_count(), caps_before, "round {round}");
    }
}

#[test]
fn a_passthrough_device_belongs_to_one_live_vm_at_a_time() {
    let mut world = World::new();
    let first = world.grant(8 * MIB, true).unwrap();
    let caps_with_first = world.caps.capability_count();
    let frames_with_first = world.mem.frames_in_use();
    assert!(world.grant(8 * MIB, true).is_err(), "the device is the first VM's");
    assert_eq!(world.caps.capability_count(), caps_with_first, "the failed VM left nothing behind");
    assert_eq!(world.mem.frames_in_use(), frames_with_first, "nor its tables");
    world.revoke(&first);
    let second = world.grant(8 * MIB, true).expect("free again once the first VM is destroyed");
    world.revoke(&second);
}

#[test]
fn a_vm_larger_than_the_free_memory_is_refused_and_leaves_nothing() {
    let mut world = World::new();
    let caps_before = world.caps.capability_count();
    let err = world.grant(UNTYPED.size + 2 * MIB, false).unwrap_err();
    assert_eq!(err, CapError::OutOfUntyped { size: UNTYPED.size + 2 * MIB });
    assert_eq!(world.caps.capability_count(), caps_before);
    assert_eq!(world.mem.frames_in_use(), 0);
}

/// An identity-mapped VM (docs/capability-model.md, D4): its RAM is exactly the range it
/// names, at IPA = PA and nowhere else, the same range each time it is created again, and
/// an untyped that does not hold that range free gives it nothing.
#[test]
fn an_identity_mapped_vm_gets_exactly_its_range_at_ipa_equal_pa_each_time() {
    let mut world = World::new();
    let caps_before = world.caps.capability_count();
    let base = UNTYPED.base + 16 * MIB;
    let identity = |world: &mut World| {
        let devices = std::slice::from_ref(&world.device);
        let request = VmRequest {
            memory: 8 * MIB,
            vcpus: 1,
            gicv: None,
            passthrough: devices,
            ram_at: Some(base),
            shadow_from: &world.untyped,
            pci: false,
        };
        grant_resources(&mut world.caps, &mut world.mem, |_| Tlb::default(), &world.untyped, &request)
    };
    for round in 0..3 {
        let vm = identity(&mut world).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(vm.ram, PhysRange { base, size: 8 * MIB });
        let id = world.caps.vm_id(vm.vm_cap).unwrap();
        assert!(world.caps.is_identity_vm(id));
        let table = world.caps.vm_table(id).unwrap();
        for offset in [0, 0x1234, 8 * MIB - 8] {
            let pa = table.translate(&world.mem, Ipa(base + offset)).map(|t| t.pa);
            assert_eq!(pa, Some(PhysAddr(base + offset)), "IPA = PA at +{offset:#x}");
        }
        assert_eq!(table.translate(&world.mem, Ipa(RAM_IPA)).map(|t| t.pa), None, "nothing at the usual RAM_IPA");
        world.revoke(&vm);
        assert_eq!(world.caps.capability_count(), caps_before, "round {round}");
    }
    // Taken by a translated VM first (first fit from the untyped's start), the range is not
    // free: the identity-mapped VM is refused and leaves nothing.
    let squatter = world.grant(UNTYPED.size, false).unwrap();
    let caps_with_squatter = world.caps.capability_count();
    assert_eq!(identity(&mut world), Err(CapError::NotFree { base, size: 8 * MIB }));
    assert_eq!(world.caps.capability_count(), caps_with_squatter);
    world.revoke(&squatter);
}

/// The zeroing rule (docs/capability-model.md, "Zeroing"): RAM a destroyed VM used goes to
/// the next VM pending, every block of it, so that VM reaches none of it before the
/// hypervisor has zeroed it; and each block is zeroed exactly when first touched.
#[test]
fn ram_a_destroyed_vm_used_reaches_the_next_vm_only_through_its_zeroing() {
    let mut world = World::new();
    let first = world.grant(UNTYPED.size, false).unwrap();
    for block in 0..UNTYPED.size / (2 * MIB) {
        world.touch(&first, RAM_IPA + block * 2 * MIB + 0x800);
    }
    let table = world.caps.vm_table(world.caps.vm_id(first.vm_cap).unwrap()).unwrap();
    let mut valid = 0;
    table.for_each_leaf(&world.mem, |l| valid += u64::from(!l.pending) * l.size);
    assert_eq!(valid, UNTYPED.size, "the first VM touched all of it");
    world.revoke(&first);

    let next = world.grant(UNTYPED.size, false).unwrap();
    assert_eq!(next.ram, first.ram, "the same memory");
    let id = world.caps.vm_id(next.vm_cap).unwrap();
    let mut leaves = Vec::new();
    world.caps.vm_table(id).unwrap().for_each_leaf(&world.mem, |l| leaves.push(l));
    assert!(leaves.iter().all(|l| l.pending && l.size == 2 * MIB), "nothing of it is reachable yet");
    assert_eq!(leaves.iter().map(|l| l.size).sum::<u64>(), UNTYPED.size);
    for ipa in [RAM_IPA, RAM_IPA + 17 * MIB, RAM_IPA + UNTYPED.size - 1] {
        assert_eq!(world.caps.vm_table(id).unwrap().translate(&world.mem, Ipa(ipa)), None, "{ipa:#x}");
    }
    let zeroed = world.touch(&next, RAM_IPA + 17 * MIB);
    assert_eq!(zeroed, vec![(next.ram.base + 16 * MIB, 2 * MIB)], "the block is zeroed before it is mapped");
    assert!(world.touch(&next, RAM_IPA + 17 * MIB).is_empty(), "and only once");
}

/// A VM whose virtio devices are PCI functions has the host bridge's two windows, every
/// access trapped, and not the virtio-mmio page; one with virtio-mmio the other way round.
#[test]
fn a_pci_vm_gets_the_host_bridges_windows_instead_of_the_virtio_page() {
    use crate::vm_resources::{DEVICE_PCI_ECAM, DEVICE_PCI_MEMORY, DEVICE_VIRTIO};
    use hyp_core::cap::RangeKind;
    use hyp_core::guest_map::{PCI_ECAM_IPA, PCI_ECAM_SIZE, PCI_MMIO_IPA, PCI_MMIO_SIZE, VIRTIO_IPA};
    let mut world = World::new();
    let kind = |world: &World, vm: &VmResources, ipa: u64| {
        let info = world.caps.lookup(world.caps.vm_id(vm.vm_cap).unwrap(), Ipa(ipa))?;
        Some((info.kind, info.shadow.is_some()))
    };
    let pci = world.grant_with(16 * MIB, false, true).unwrap();
    let emulated = |device| Some((RangeKind::Emulated { device }, false));
    assert_eq!(kind(&world, &pci, PCI_ECAM_IPA), emulated(DEVICE_PCI_ECAM));
    assert_eq!(kind(&world, &pci, PCI_ECAM_IPA + PCI_ECAM_SIZE - 1), emulated(DEVICE_PCI_ECAM));
    assert_eq!(kind(&world, &pci, PCI_MMIO_IPA + PCI_MMIO_SIZE - 4), emulated(DEVICE_PCI_MEMORY));
    assert_eq!(kind(&world, &pci, VIRTIO_IPA), None, "no virtio-mmio page");
    let mmio = world.grant_with(16 * MIB, false, false).unwrap();
    assert_eq!(kind(&world, &mmio, PCI_ECAM_IPA), None);
    assert_eq!(kind(&world, &mmio, VIRTIO_IPA).map(|k| k.0), Some(RangeKind::Emulated { device: DEVICE_VIRTIO }));
}
