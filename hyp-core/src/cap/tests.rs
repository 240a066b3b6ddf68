//! The capability model's tests: each operation and each refusal, then every invariant
//! checked after every step of random operation sequences (proptest) and of every sequence
//! of four operations over a small universe (exhaustive).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use proptest::prelude::*;
use stage2::testing::{Event, RecordingTlb, VecTableMemory};
use stage2::{Ipa, IpaRange, MemoryType, Permissions, PhysAddr, TableFormat};

use super::invariants::{check_all, shadows_stay_at_their_window};
use super::*;
use crate::platform::PhysRange;

const MIB2: u64 = 2 << 20;
const UART: u64 = 0x0900_0000;
const UART_DEVICE: u32 = 3;
const FORMAT: TableFormat = TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 44 };

struct World {
    space: CapSpace,
    mem: VecTableMemory,
    tlb: RecordingTlb,
    untyped: Vec<CapId>,
    device: CapId,
    interrupt: CapId,
    /// Every capability created, in order (operations pick from it by index).
    made: Vec<CapId>,
    vms: Vec<CapId>,
}

impl World {
    fn new() -> World {
        let mut space = CapSpace::new(FORMAT);
        let mem = VecTableMemory::with_capacity(256);
        let tlb = RecordingTlb::sharing(&mem);
        let untyped = [0x4000_0000, 0x8000_0000]
            .map(|base| space.add_untyped(PhysRange { base, size: 8 * MIB2 }).unwrap())
            .to_vec();
        let device =
            space.add_device_region(PhysRange { base: 0x0900_0000, size: 0x1000 }, RegionKind::DeviceMmio).unwrap();
        let interrupt = space.add_interrupt(33).unwrap();
        let made = [untyped.clone(), Vec::from([device, interrupt])].concat();
        World { space, mem, tlb, untyped, device, interrupt, made, vms: Vec::new() }
    }
    fn check(&self) {
        if let Err(v) = check_all(&self.space, &self.mem) {
            panic!("{} violated: {}", v.invariant, v.detail);
        }
    }
    fn vm(&mut self) -> CapId {
        let vm = self.space.create_vm(&mut self.mem).unwrap();
        self.vms.push(vm);
        vm
    }
    fn map(&mut self, vm: CapId, region: CapId, ipa: u64, rights: Rights) -> Result<CapId, CapError> {
        self.space.map(&mut self.mem, &mut self.tlb, vm, region, Ipa(ipa), rights)
    }
    /// A shadowed window of one page at `ipa`, its shadow retyped from `untyped`.
    fn shadow(&mut self, vm: CapId, untyped: CapId, ipa: u64) -> Result<CapId, CapError> {
        let window = IpaRange::new(Ipa(ipa), 0x1000).unwrap();
        self.space.add_shadowed_window(&mut self.mem, &mut self.tlb, vm, untyped, window, UART_DEVICE)
    }
    fn show(&mut self, vm: CapId, ipa: u64, visible: bool) -> Result<(), CapError> {
        self.space.show_window_shadow(&mut self.mem, &mut self.tlb, vm, Ipa(ipa), visible)
    }
    /// The capability of the shadow region of window `window` (the space keeps it; only
    /// the tests pick it).
    fn shadow_cap(&self, window: CapId) -> CapId {
        let Some(super::space::CapKind::EmulatedWindow { shadow: Some(shadow), .. }) =
            self.space.caps.get(&window).map(|c| c.kind)
        else {
            panic!("cap {} is not a shadowed window", window.0)
        };
        let own = self.space.caps.iter().find(|(_, c)| c.kind == super::space::CapKind::Object(shadow));
        *own.expect("a shadow has its capability").0
    }
    /// What the VM's tables translate `ipa` to.
    fn at(&self, vm: CapId, ipa: u64) -> Option<stage2::Translation> {
        self.space.vm_table(self.space.vm_id(vm).unwrap()).unwrap().translate(&self.mem, Ipa(ipa))
    }
    fn leaves(&self, vm: CapId) -> Vec<stage2::Leaf> {
        let mut v = Vec::new();
        self.space.vm_table(self.space.vm_id(vm).unwrap()).unwrap().for_each_leaf(&self.mem, |l| v.push(l));
        v
    }
    /// The VM's first touch of the page at `ipa`: the blocks it had zeroed.
    fn touch(&mut self, vm: CapId, ipa: u64) -> Result<Vec<(PhysAddr, u64)>, CapError> {
        let mut zeroed = Vec::new();
        let page = IpaRange::new(Ipa(ipa), 0x1000).unwrap();
        self.space
            .zero_on_first_touch(&mut self.mem, &mut self.tlb, vm, page, &mut |pa, len| zeroed.push((pa, len)))?;
        Ok(zeroed)
    }
}

#[test]
fn only_a_translated_vm_s_private_ram_is_zeroed_on_first_touch() {
    let mut w = World::new();
    let (vm, identity) = (w.vm(), w.space.create_identity_vm(&mut w.mem).unwrap());
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, 2 * MIB2, MIB2).unwrap();
    let own = w.space.retype(w.untyped[0], RegionKind::Ram, MIB2, MIB2).unwrap();
    let chan = w.space.retype(w.untyped[1], RegionKind::Shared, MIB2, MIB2).unwrap();
    w.map(vm, ram, 0x4000_0000, Rights::RWX).unwrap();
    w.map(vm, chan, 0x1000_0000, Rights::RW).unwrap();
    w.map(vm, w.device, 0x0900_0000, Rights::RW).unwrap();
    let own_pa = w.space.region(own).unwrap().0.base;
    w.map(identity, own, own_pa, Rights::RWX).unwrap();
    let valid = |w: &World, vm: CapId, ipa| {
        w.space.vm_table(w.space.vm_id(vm).unwrap()).unwrap().translate(&w.mem, Ipa(ipa)).is_some()
    };
    assert!(valid(&w, vm, 0x1000_0000), "shared memory is mapped valid");
    assert!(valid(&w, vm, 0x0900_0000), "a device's registers are mapped valid");
    assert!(valid(&w, identity, own_pa), "an identity-mapped VM's RAM is mapped valid (its device may DMA)");
    assert!(!valid(&w, vm, 0x4000_0000) && !valid(&w, vm, 0x4020_0000));
    for ipa in [0x1000_0000, 0x0900_0000, 0x3000_0000] {
        assert_eq!(w.touch(vm, ipa), Err(CapError::NotPrivateRam { ipa }), "{ipa:#x}");
    }
    assert_eq!(w.touch(identity, own_pa), Ok(vec![]), "nothing of an identity-mapped VM is pending");
    assert_eq!(w.touch(w.device, 0x4000_0000), Err(CapError::WrongType { cap: w.device, expected: "a VM" }));
    w.check();
    // The second block only, once.
    assert_eq!(
        w.touch(vm, 0x4020_0000),
        Ok(vec![(w.space.region(ram).unwrap().0.base + MIB2, MIB2)]
            .into_iter()
            .map(|(b, l)| (PhysAddr(b), l))
            .collect())
    );
    assert_eq!(w.touch(vm, 0x4020_0000), Ok(vec![]));
    assert!(valid(&w, vm, 0x4020_0000) && !valid(&w, vm, 0x4000_0000));
    w.check();
}

#[test]
fn a_vm_gets_ram_through_retype_and_map() {
    let mut w = World::new();
    let vm = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, 4 * MIB2, MIB2).unwrap();
    w.map(vm, ram, 0x4000_0000, Rights::RWX).unwrap();
    let id = w.space.vm_id(vm).unwrap();
    assert_eq!(
        w.space.vm_table(id).unwrap().translate(&w.mem, Ipa(0x4000_1234)),
        None,
        "private RAM of a translated VM is pending until first touched"
    );
    assert_eq!(w.touch(vm, 0x4000_1000), Ok(vec![(PhysAddr(0x4000_0000), MIB2)]));
    let t = w.space.vm_table(id).unwrap().translate(&w.mem, Ipa(0x4000_1234)).unwrap();
    assert_eq!(t.pa, PhysAddr(0x4000_1234));
    assert_eq!(t.attrs.memory, MemoryType::NormalWriteBack);
    let info = w.space.lookup(id, Ipa(0x4000_1234)).unwrap();
    assert_eq!((info.kind, info.pa), (RangeKind::Region(RegionKind::Ram), Some(PhysAddr(0x4000_1234))));
    assert_eq!(w.space.lookup(id, Ipa(0x1000)), None);
    w.check();
}

#[test]
fn two_vms_private_ram_never_overlaps() {
    let mut w = World::new();
    let (a, b) = (w.vm(), w.vm());
    let ra = w.space.retype(w.untyped[0], RegionKind::Ram, 4 * MIB2, MIB2).unwrap();
    let rb = w.space.retype(w.untyped[0], RegionKind::Ram, 4 * MIB2, MIB2).unwrap();
    let (pa, pb) = (w.space.region(ra).unwrap().0, w.space.region(rb).unwrap().0);
    assert!(!pa.overlaps(&pb));
    w.map(a, ra, 0x4000_0000, Rights::RW).unwrap();
    w.map(b, rb, 0x4000_0000, Rights::RW).unwrap();
    assert_eq!(w.map(b, ra, 0x8000_0000, Rights::RW), Err(CapError::AlreadyMapped { cap: ra }));
    assert_eq!(w.space.retype(w.untyped[0], RegionKind::Ram, MIB2, MIB2), Err(CapError::OutOfUntyped { size: MIB2 }));
    w.check();
}

#[test]
fn shared_regions_map_into_several_vms_and_the_tables_say_who_owns_them() {
    let mut w = World::new();
    let (a, b) = (w.vm(), w.vm());
    let chan = w.space.retype(w.untyped[1], RegionKind::Shared, MIB2, MIB2).unwrap();
    w.map(a, chan, 0x1000_0000, Rights::RW).unwrap();
    w.map(b, chan, 0x2000_0000, Rights::READ).unwrap();
    let ta = w.space.vm_table(w.space.vm_id(a).unwrap()).unwrap().translate(&w.mem, Ipa(0x1000_0000)).unwrap();
    let tb = w.space.vm_table(w.space.vm_id(b).unwrap()).unwrap().translate(&w.mem, Ipa(0x2000_0000)).unwrap();
    assert_eq!(ta.pa, tb.pa);
    assert_eq!((ta.owner, tb.owner), (stage2::OwnershipState::Shared, stage2::OwnershipState::Borrowed));
    assert_eq!(tb.attrs.permissions, Permissions::RO);
    w.check();
}

#[test]
fn derivation_only_removes_rights() {
    let mut w = World::new();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, MIB2, MIB2).unwrap();
    let ro = w.space.derive(ram, Rights::READ).unwrap();
    assert_eq!(w.space.derive(ro, Rights::RW), Err(CapError::RightsNotASubset { cap: ro }));
    let vm = w.vm();
    assert_eq!(w.map(vm, ro, 0x4000_0000, Rights::RW), Err(CapError::RightsNotASubset { cap: ro }));
    let m = w.map(vm, ro, 0x4000_0000, Rights::READ).unwrap();
    assert!(matches!(w.space.derive(m, Rights::READ), Err(CapError::WrongType { .. })));
    let no_grant = w.space.derive(vm, Rights::RW).unwrap();
    assert_eq!(
        w.map(no_grant, ram, 0x5000_0000, Rights::READ),
        Err(CapError::MissingRight { cap: no_grant, right: "grant" })
    );
    w.check();
}

#[test]
fn revoking_a_region_removes_its_mappings_from_the_tables() {
    let mut w = World::new();
    let vm = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, 2 * MIB2, MIB2).unwrap();
    let copy = w.space.derive(ram, Rights::RW).unwrap();
    w.map(vm, copy, 0x4000_0000, Rights::RW).unwrap();
    w.space.revoke(&mut w.mem, &mut w.tlb, ram).unwrap();
    let id = w.space.vm_id(vm).unwrap();
    assert_eq!(w.space.vm_table(id).unwrap().translate(&w.mem, Ipa(0x4000_0000)), None);
    assert_eq!(w.map(vm, copy, 0x4000_0000, Rights::RW), Err(CapError::NoSuchCapability { cap: copy }));
    w.check();
}

#[test]
fn destroying_a_vm_returns_its_memory_for_the_next() {
    let mut w = World::new();
    let a = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, 8 * MIB2, MIB2).unwrap();
    w.map(a, ram, 0x4000_0000, Rights::RWX).unwrap();
    w.space.grant_interrupt(a, w.interrupt).unwrap();
    assert_eq!(w.space.retype(w.untyped[0], RegionKind::Ram, MIB2, MIB2), Err(CapError::OutOfUntyped { size: MIB2 }));
    let frames_before = w.mem.frames_in_use();
    w.space.destroy_vm(&mut w.mem, &mut w.tlb, a).unwrap();
    assert!(w.mem.frames_in_use() < frames_before, "the VM's tables were freed");
    assert_eq!(w.mem.frames_in_use(), 0);
    let b = w.vm();
    let again = w.space.retype(w.untyped[0], RegionKind::Ram, 8 * MIB2, MIB2).unwrap();
    assert_eq!(w.space.region(again).unwrap().0.base, 0x4000_0000);
    w.space.grant_interrupt(b, w.interrupt).unwrap();
    w.check();
}

#[test]
fn vcpus_are_numbered_per_vm_and_go_with_it() {
    let mut w = World::new();
    let vm = w.vm();
    let v0 = w.space.create_vcpu(vm, 2).unwrap();
    w.space.create_vcpu(vm, 2).unwrap();
    assert_eq!(w.space.create_vcpu(vm, 2), Err(CapError::TooManyVcpus { max: 2 }));
    let id = w.space.vm_id(vm).unwrap();
    assert_eq!(w.space.vcpu_count(id), 2);
    assert!(matches!(w.space.create_vcpu(v0, 2), Err(CapError::WrongType { .. })));
    w.space.destroy_vm(&mut w.mem, &mut w.tlb, vm).unwrap();
    assert_eq!(w.space.vcpu_count(id), 0);
    assert_eq!(w.space.derive(v0, Rights::READ), Err(CapError::NoSuchCapability { cap: v0 }));
    w.check();
}

#[test]
fn an_interrupt_belongs_to_one_vm() {
    let mut w = World::new();
    let (a, b) = (w.vm(), w.vm());
    w.space.grant_interrupt(a, w.interrupt).unwrap();
    assert_eq!(w.space.grant_interrupt(b, w.interrupt), Err(CapError::InterruptAlreadyGranted { intid: 33 }));
    assert_eq!(w.space.add_interrupt(33), Err(CapError::DuplicateInterrupt { intid: 33 }));
    w.check();
}

#[test]
fn device_regions_map_as_device_memory_and_never_execute() {
    let mut w = World::new();
    let vm = w.vm();
    assert_eq!(
        w.map(vm, w.device, 0x0900_0000, Rights::RWX),
        Err(CapError::Stage2(stage2::Stage2Error::InvalidPermissions))
    );
    w.map(vm, w.device, 0x0900_0000, Rights::RW).unwrap();
    let t = w.space.vm_table(w.space.vm_id(vm).unwrap()).unwrap().translate(&w.mem, Ipa(0x0900_0004)).unwrap();
    assert_eq!(t.attrs.memory, MemoryType::DeviceNGnRE);
    assert!(matches!(
        w.space.retype(w.untyped[0], RegionKind::DeviceMmio, MIB2, MIB2),
        Err(CapError::WrongType { .. })
    ));
    w.check();
}

#[test]
fn a_banked_device_maps_into_every_vm_as_device_memory() {
    let mut w = World::new();
    let gicv =
        w.space.add_device_region(PhysRange { base: 0x0804_0000, size: 0x2000 }, RegionKind::BankedDevice).unwrap();
    let (a, b) = (w.vm(), w.vm());
    w.map(a, gicv, 0x0801_0000, Rights::RW).unwrap();
    w.map(b, gicv, 0x0801_0000, Rights::RW).unwrap();
    let t = w.space.vm_table(w.space.vm_id(b).unwrap()).unwrap().translate(&w.mem, Ipa(0x0801_0004)).unwrap();
    assert_eq!((t.pa, t.attrs.memory), (PhysAddr(0x0804_0004), MemoryType::DeviceNGnRE));
    assert_eq!(
        w.space.add_device_region(PhysRange { base: 0x2000_0000, size: 0x1000 }, RegionKind::Ram).unwrap_err(),
        CapError::WrongType { cap: CapId(0), expected: "a device region kind" }
    );
    w.check();
}

#[test]
fn impossible_arguments_are_typed_errors() {
    let mut w = World::new();
    let vm = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, MIB2, MIB2).unwrap();
    assert_eq!(
        w.space.retype(w.untyped[0], RegionKind::Ram, 100, 4096),
        Err(CapError::Unaligned { what: "size or alignment", value: 100 })
    );
    assert_eq!(w.space.retype(w.untyped[0], RegionKind::Ram, 0, 4096), Err(CapError::ZeroSize));
    assert_eq!(
        w.space.retype(vm, RegionKind::Ram, MIB2, MIB2),
        Err(CapError::WrongType { cap: vm, expected: "untyped memory" })
    );
    assert_eq!(
        w.map(vm, ram, 0x4000_0800, Rights::RW),
        Err(CapError::Unaligned { what: "IPA range", value: 0x4000_0800 })
    );
    assert_eq!(
        w.map(vm, ram, (1 << 40) - 0x1000, Rights::RW),
        Err(CapError::BeyondIpaSize { end: (1 << 40) - 0x1000 + MIB2 })
    );
    assert_eq!(w.map(ram, ram, 0x4000_0000, Rights::RW), Err(CapError::WrongType { cap: ram, expected: "a VM" }));
    w.map(vm, ram, 0x4000_0000, Rights::RW).unwrap();
    let window = IpaRange::new(Ipa(0x4010_0000), 0x1000).unwrap();
    assert_eq!(w.space.add_emulated_window(vm, window, 1), Err(CapError::OverlappingIpa { ipa: 0x4010_0000 }));
    assert_eq!(
        w.space.add_untyped(PhysRange { base: 0x4000_1000, size: 0x1000 }),
        Err(CapError::OverlappingMemory { base: 0x4000_1000 })
    );
    assert_eq!(
        w.space.add_untyped(PhysRange { base: 0x1000_0800, size: 0x1000 }),
        Err(CapError::Unaligned { what: "memory range", value: 0x1000_0800 })
    );
    w.space.delete(&mut w.mem, &mut w.tlb, ram).unwrap();
    assert_eq!(w.space.revoke(&mut w.mem, &mut w.tlb, ram), Err(CapError::NoSuchCapability { cap: ram }));
    w.check();
}

#[test]
fn emulated_windows_are_ranges_without_mappings() {
    let mut w = World::new();
    let vm = w.vm();
    let window = IpaRange::new(Ipa(0x0a00_0000), 0x1000).unwrap();
    w.space.add_emulated_window(vm, window, 7).unwrap();
    let id = w.space.vm_id(vm).unwrap();
    assert_eq!(w.space.lookup(id, Ipa(0x0a00_0010)).unwrap().kind, RangeKind::Emulated { device: 7 });
    assert_eq!(w.space.vm_table(id).unwrap().translate(&w.mem, Ipa(0x0a00_0010)), None);
    w.check();
}

#[test]
fn running_out_of_table_frames_changes_nothing() {
    let mut w = World::new();
    let vm = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, MIB2 + 0x1000, 0x1000).unwrap();
    let caps = w.space.capability_count();
    w.mem.set_budget(w.mem.frames_in_use());
    assert_eq!(w.map(vm, ram, 0x4000_0000, Rights::RW), Err(CapError::Stage2(stage2::Stage2Error::OutOfFrames)));
    assert_eq!(w.space.capability_count(), caps);
    w.check();
}

#[test]
fn a_vm_without_frames_for_its_root_table_is_not_created() {
    let mut w = World::new();
    let caps = w.space.capability_count();
    w.mem.set_budget(w.mem.frames_in_use());
    assert_eq!(w.space.create_vm(&mut w.mem), Err(CapError::Stage2(stage2::Stage2Error::OutOfFrames)));
    assert_eq!(w.space.capability_count(), caps);
    w.check();
}

#[test]
fn decoding_changes_nothing_and_invoking_does_what_was_decoded() {
    let mut w = World::new();
    let vm = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, 2 * MIB2, MIB2).unwrap();
    w.map(vm, ram, 0x4000_0000, Rights::RWX).unwrap();
    w.space.grant_interrupt(vm, w.interrupt).unwrap();
    w.space.create_vcpu(vm, 1).unwrap();
    let before = w.fingerprint();
    let ops = [
        w.space.decode_destroy_vm(vm).unwrap(),
        w.space.decode_revoke(w.untyped[0]).unwrap(),
        w.space.decode_delete(ram).unwrap(),
    ];
    let _ = (
        w.space.decode_retype(w.untyped[0], RegionKind::Ram, MIB2, MIB2).unwrap(),
        w.space.decode_derive(vm, Rights::READ).unwrap(),
        w.space.decode_shadowed_window(vm, w.untyped[1], IpaRange::new(Ipa(UART), 0x1000).unwrap(), 3).unwrap(),
    );
    assert_eq!(w.fingerprint(), before, "decoding left a trace");
    drop(ops);
    let op = w.space.decode_destroy_vm(vm).unwrap();
    w.space.invoke_remove(&mut w.mem, &mut w.tlb, op);
    // The untyped, device, interrupt and their root capabilities stay; all the VM had went.
    assert_eq!(w.space.capability_count(), 4);
    assert_eq!(w.mem.frames_in_use(), 0);
    let next = w.vm();
    w.space.grant_interrupt(next, w.interrupt).expect("the interrupt is free again");
    w.check();
}

#[test]
fn an_identity_mapped_vm_maps_memory_only_at_its_own_address() {
    let mut w = World::new();
    let vm = w.space.create_identity_vm(&mut w.mem).unwrap();
    w.vms.push(vm);
    let id = w.space.vm_id(vm).unwrap();
    assert!(w.space.is_identity_vm(id));
    let at = PhysRange { base: 0x4040_0000, size: 2 * MIB2 };
    let ram = w.space.retype_at(w.untyped[0], RegionKind::Ram, at).unwrap();
    assert_eq!(w.space.region(ram).unwrap().0, at, "exactly the range asked for");
    assert_eq!(
        w.map(vm, ram, 0x4000_0000, Rights::RWX),
        Err(CapError::NotIdentity { ipa: 0x4000_0000, pa: 0x4040_0000 }),
        "RAM anywhere but its own address is refused"
    );
    w.check();
    w.map(vm, ram, at.base, Rights::RWX).unwrap();
    let table = w.space.vm_table(id).unwrap();
    assert_eq!(table.translate(&w.mem, Ipa(at.base + 0x1234)).map(|t| t.pa), Some(PhysAddr(at.base + 0x1234)));
    // Device regions keep their own rule (the runtime maps them at their address anyway).
    w.map(vm, w.device, 0x0900_0000, Rights::RW).unwrap();
    // The range is taken: retyping it again, or a piece of it, or beyond the untyped fails.
    assert_eq!(
        w.space.retype_at(w.untyped[0], RegionKind::Ram, PhysRange { base: 0x4060_0000, size: MIB2 }),
        Err(CapError::NotFree { base: 0x4060_0000, size: MIB2 })
    );
    assert!(matches!(
        w.space.retype_at(w.untyped[0], RegionKind::Ram, PhysRange { base: 0x40e0_0000, size: 2 * MIB2 }),
        Err(CapError::NotFree { .. })
    ));
    assert!(matches!(
        w.space.retype_at(w.untyped[0], RegionKind::DeviceMmio, PhysRange { base: 0x4000_0000, size: MIB2 }),
        Err(CapError::WrongType { .. })
    ));
    // A translated VM may map RAM anywhere, as before.
    let translated = w.vm();
    assert!(!w.space.is_identity_vm(w.space.vm_id(translated).unwrap()));
    let other = w.space.retype(w.untyped[1], RegionKind::Ram, MIB2, MIB2).unwrap();
    w.map(translated, other, 0x4000_0000, Rights::RWX).unwrap();
    w.check();
    // Destroyed, its memory is free for the same exact range again.
    w.space.destroy_vm(&mut w.mem, &mut w.tlb, vm).unwrap();
    w.space.retype_at(w.untyped[0], RegionKind::Ram, at).unwrap();
    w.check();
}

#[test]
fn a_shadowed_window_reads_through_its_page_only_when_shown() {
    let mut w = World::new();
    let vm = w.vm();
    let window = w.shadow(vm, w.untyped[1], UART).unwrap();
    let id = w.space.vm_id(vm).unwrap();
    let shadow = w.space.window_shadow(id, Ipa(UART + 0x18)).expect("the window has a shadow");
    assert_eq!(shadow.size, 0x1000);
    assert_eq!(w.space.region(w.shadow_cap(window)).unwrap(), (shadow, RegionKind::Shadow));
    // Faults on it are still the device model's, and lookup says where the copy is.
    let info = w.space.lookup(id, Ipa(UART + 0x18)).unwrap();
    assert_eq!((info.kind, info.pa, info.shadow), (RangeKind::Emulated { device: UART_DEVICE }, None, Some(shadow)));
    // Hidden at first: in the tables, invalid to the hardware.
    let leaves = w.leaves(vm);
    assert_eq!(leaves.len(), 1);
    assert!(leaves[0].is_hidden() && leaves[0].ipa == Ipa(UART) && leaves[0].pa == PhysAddr(shadow.base));
    assert_eq!(w.at(vm, UART + 0x18), None);
    w.check();
    w.show(vm, UART + 0x18, true).unwrap();
    let t = w.at(vm, UART + 0x18).expect("shown: reads go through the page");
    assert_eq!(t.pa, PhysAddr(shadow.base + 0x18));
    assert_eq!(t.attrs, stage2::MappingAttributes::READ_ONLY_DEVICE, "read-only Device, never executable");
    assert!(!t.attrs.permissions.write && !t.attrs.permissions.execute);
    w.check();
    w.show(vm, UART, false).unwrap();
    assert_eq!(w.at(vm, UART + 0x18), None, "hidden again: every access traps");
    assert!(w.leaves(vm)[0].is_hidden());
    w.check();
    // Never zeroed on first touch: it is not private RAM.
    assert_eq!(w.touch(vm, UART), Err(CapError::NotPrivateRam { ipa: UART }));
    w.check();
}

#[test]
fn hiding_a_shadow_invalidates_the_tlb_for_its_ipa() {
    let mut w = World::new();
    let vm = w.vm();
    let vmid = w.space.vm_table(w.space.vm_id(vm).unwrap()).unwrap().vmid();
    w.shadow(vm, w.untyped[0], UART).unwrap();
    let invalidations =
        |w: &World| w.tlb.events().into_iter().filter(|e| matches!(e, Event::InvalidateIpa { .. })).collect::<Vec<_>>();
    w.show(vm, UART, true).unwrap();
    assert!(invalidations(&w).is_empty(), "showing needs no TLB invalidation");
    let before = w.tlb.events().len();
    w.show(vm, UART + 0xffc, false).unwrap();
    let events = w.tlb.events()[before..].to_vec();
    assert!(
        matches!(events[..], [Event::Write { old, new, .. }, Event::InvalidateIpa { vmid: v, ipa: Ipa(UART) }]
            if old & 1 == 1 && new & 1 == 0 && v == vmid),
        "the descriptor made invalid, then its IPA invalidated: {events:x?}"
    );
    // Hidden already: nothing to invalidate.
    w.show(vm, UART, false).unwrap();
    assert_eq!(invalidations(&w).len(), 1);
    w.check();
}

#[test]
fn a_shadow_goes_with_its_window() {
    let mut w = World::new();
    let vm = w.vm();
    let window = w.shadow(vm, w.untyped[1], UART).unwrap();
    let shadow = w.space.window_shadow(w.space.vm_id(vm).unwrap(), Ipa(UART)).unwrap();
    w.show(vm, UART, true).unwrap();
    let before = w.tlb.events().len();
    // Deleting the window unmaps the shown page (with its TLB invalidation) and returns
    // the memory to the untyped; the VM stays.
    w.space.delete(&mut w.mem, &mut w.tlb, window).unwrap();
    assert!(w.leaves(vm).is_empty());
    assert!(w.tlb.events()[before..].contains(&Event::InvalidateIpa { vmid: 1, ipa: Ipa(UART) }));
    assert_eq!(w.space.window_shadow(w.space.vm_id(vm).unwrap(), Ipa(UART)), None);
    let again = w.space.retype(w.untyped[1], RegionKind::Ram, 0x1000, 0x1000).unwrap();
    assert_eq!(w.space.region(again).unwrap().0, shadow, "the shadow's memory is free again");
    w.check();
    // Revoking the untyped a shadow came from removes the shadow, and with it its window.
    let window = w.shadow(vm, w.untyped[0], UART).unwrap();
    w.space.revoke(&mut w.mem, &mut w.tlb, w.untyped[0]).unwrap();
    assert_eq!(w.space.lookup(w.space.vm_id(vm).unwrap(), Ipa(UART)), None);
    assert_eq!(w.space.derive(window, Rights::READ), Err(CapError::NoSuchCapability { cap: window }));
    assert!(w.leaves(vm).is_empty());
    w.check();
    // Revoking the VM's capability removes the window it allowed, and its shadow.
    let window = w.shadow(vm, w.untyped[0], UART).unwrap();
    let shadow_cap = w.shadow_cap(window);
    w.space.revoke(&mut w.mem, &mut w.tlb, vm).unwrap();
    assert_eq!(w.space.region(shadow_cap), Err(CapError::NoSuchCapability { cap: shadow_cap }));
    assert!(w.leaves(vm).is_empty());
    w.check();
}

#[test]
fn destroying_a_vm_returns_its_shadow_page_to_untyped() {
    let mut w = World::new();
    let vm = w.vm();
    // While the shadow holds a page of it, the whole untyped (16 MiB) cannot be retyped.
    let window = w.shadow(vm, w.untyped[0], UART).unwrap();
    let shadow = w.shadow_cap(window);
    w.show(vm, UART, true).unwrap();
    assert_eq!(
        w.space.retype(w.untyped[0], RegionKind::Ram, 8 * MIB2, 0x1000),
        Err(CapError::OutOfUntyped { size: 8 * MIB2 })
    );
    w.space.destroy_vm(&mut w.mem, &mut w.tlb, vm).unwrap();
    assert_eq!(w.mem.frames_in_use(), 0);
    assert_eq!(w.space.region(shadow), Err(CapError::NoSuchCapability { cap: shadow }), "the shadow went with the VM");
    assert_eq!(w.space.capability_count(), 4, "the untyped, device and interrupt capabilities only");
    let all = w.space.retype(w.untyped[0], RegionKind::Ram, 8 * MIB2, MIB2).unwrap();
    assert_eq!(w.space.region(all).unwrap().0, PhysRange { base: 0x4000_0000, size: 8 * MIB2 });
    w.check();
}

#[test]
fn a_refused_shadowed_window_changes_nothing() {
    let mut w = World::new();
    let vm = w.vm();
    let ram = w.space.retype(w.untyped[0], RegionKind::Ram, 8 * MIB2, MIB2).unwrap();
    w.map(vm, ram, 0x4000_0000, Rights::RW).unwrap();
    w.space.add_emulated_window(vm, IpaRange::new(Ipa(0x0a00_0000), 0x1000).unwrap(), 1).unwrap();
    let no_grant = w.space.derive(vm, Rights::RW).unwrap();
    let untyped_no_read = w.space.derive(w.untyped[1], Rights::GRANT).unwrap();
    let before = w.fingerprint();
    let page = |ipa| IpaRange::new(Ipa(ipa), 0x1000).unwrap();
    let refused = |w: &mut World, vm, untyped, ipa: IpaRange, err: CapError| {
        let r = w.space.add_shadowed_window(&mut w.mem, &mut w.tlb, vm, untyped, ipa, UART_DEVICE);
        assert_eq!(r, Err(err), "{ipa:x?}");
        assert_eq!(w.fingerprint(), before, "refused with {err:?}, yet something changed");
        assert!(err.to_string().len() > 20, "{err:?} says what to do");
    };
    let (u0, u1) = (w.untyped[0], w.untyped[1]);
    refused(&mut w, vm, u1, page(0x4010_0000), CapError::OverlappingIpa { ipa: 0x4010_0000 });
    refused(&mut w, vm, u1, page(0x0a00_0000), CapError::OverlappingIpa { ipa: 0x0a00_0000 });
    refused(
        &mut w,
        vm,
        u1,
        IpaRange::new(Ipa(UART + 8), 0x1000).unwrap(),
        CapError::Unaligned { what: "IPA range", value: UART + 8 },
    );
    refused(&mut w, vm, u1, page(1 << 40), CapError::BeyondIpaSize { end: (1 << 40) + 0x1000 });
    refused(&mut w, vm, u0, page(UART), CapError::OutOfUntyped { size: 0x1000 });
    refused(&mut w, vm, ram, page(UART), CapError::WrongType { cap: ram, expected: "untyped memory" });
    refused(&mut w, ram, u1, page(UART), CapError::WrongType { cap: ram, expected: "a VM" });
    refused(&mut w, no_grant, u1, page(UART), CapError::MissingRight { cap: no_grant, right: "grant" });
    refused(&mut w, vm, untyped_no_read, page(UART), CapError::MissingRight { cap: untyped_no_read, right: "read" });
    // Out of table frames: stage 2 refuses before anything is recorded.
    w.mem.set_budget(w.mem.frames_in_use());
    let before = w.fingerprint();
    let r = w.shadow(vm, u1, 0xff_ffe0_0000);
    assert_eq!(r, Err(CapError::Stage2(stage2::Stage2Error::OutOfFrames)));
    assert_eq!(w.fingerprint(), before, "out of frames, yet something changed");
    w.check();
}

#[test]
fn show_on_a_window_without_shadow_or_of_another_vm_is_a_typed_error() {
    let mut w = World::new();
    let (a, b) = (w.vm(), w.vm());
    w.shadow(a, w.untyped[0], UART).unwrap();
    w.space.add_emulated_window(b, IpaRange::new(Ipa(UART), 0x1000).unwrap(), UART_DEVICE).unwrap();
    let before = w.fingerprint();
    assert_eq!(w.show(b, UART, true), Err(CapError::NoShadowedWindow { ipa: UART }), "b's window has no shadow");
    assert_eq!(w.show(b, 0x0a00_0000, false), Err(CapError::NoShadowedWindow { ipa: 0x0a00_0000 }));
    assert_eq!(w.show(a, UART + 0x1000, true), Err(CapError::NoShadowedWindow { ipa: UART + 0x1000 }));
    assert_eq!(w.show(w.device, UART, true), Err(CapError::WrongType { cap: w.device, expected: "a VM" }));
    assert_eq!(w.fingerprint(), before);
    assert!(CapError::NoShadowedWindow { ipa: UART }.to_string().contains("add_shadowed_window"));
    // a's shadow is a's alone: showing it shows nothing in b.
    w.show(a, UART, true).unwrap();
    assert!(w.at(a, UART).is_some() && w.at(b, UART).is_none());
    w.check();
}

#[test]
fn a_shadow_is_never_mapped_copied_or_retyped_by_hand() {
    let mut w = World::new();
    let (vm, other) = (w.vm(), w.vm());
    let window = w.shadow(vm, w.untyped[0], UART).unwrap();
    let shadow = w.shadow_cap(window);
    for (v, ipa) in [(vm, 0x5000_0000), (other, UART)] {
        assert!(matches!(w.map(v, shadow, ipa, Rights::READ), Err(CapError::WrongType { .. })));
    }
    assert!(matches!(w.space.derive(shadow, Rights::READ), Err(CapError::WrongType { .. })));
    assert!(matches!(w.space.derive(window, Rights::READ), Err(CapError::WrongType { .. })));
    assert!(matches!(
        w.space.retype(w.untyped[1], RegionKind::Shadow, 0x1000, 0x1000),
        Err(CapError::WrongType { .. })
    ));
    assert!(matches!(
        w.space.retype_at(w.untyped[1], RegionKind::Shadow, PhysRange { base: 0x8000_0000, size: 0x1000 }),
        Err(CapError::WrongType { .. })
    ));
    assert!(w.space.add_device_region(PhysRange { base: 0x2000_0000, size: 0x1000 }, RegionKind::Shadow).is_err());
    // An identity-mapped VM may have one: the shadow is not its RAM (I12 does not apply).
    let identity = w.space.create_identity_vm(&mut w.mem).unwrap();
    w.vms.push(identity);
    w.shadow(identity, w.untyped[1], UART).unwrap();
    w.check();
    // Deleting the shadow's own capability takes the window with it.
    w.space.delete(&mut w.mem, &mut w.tlb, shadow).unwrap();
    assert_eq!(w.space.lookup(w.space.vm_id(vm).unwrap(), Ipa(UART)), None);
    assert!(w.leaves(vm).is_empty());
    w.check();
}

/// I14's predicate has teeth: each way of breaking a shadow is caught (the state is broken
/// by hand, behind the operations' back).
#[test]
fn a_broken_shadow_fails_i14() {
    let fails = |w: &World, what: &str| {
        let v = shadows_stay_at_their_window(&w.space, &w.mem).expect_err(what);
        assert_eq!(v.invariant, "I14", "{what}: {}", v.detail);
    };
    let ro_device = stage2::MappingAttributes::READ_ONLY_DEVICE;
    // The shadow also mapped into another VM, as the right attributes.
    let mut w = World::new();
    let (a, b) = (w.vm(), w.vm());
    w.shadow(a, w.untyped[0], UART).unwrap();
    let shadow = w.space.window_shadow(w.space.vm_id(a).unwrap(), Ipa(UART)).unwrap();
    let page = IpaRange::new(Ipa(UART), 0x1000).unwrap();
    let id_b = vm_object(&w, b);
    if let Some(super::space::Object::Vm { table, .. }) = w.space.objects.get_mut(&id_b) {
        table
            .map_range(&mut w.mem, &mut w.tlb, page, PhysAddr(shadow.base), ro_device, stage2::OwnershipState::Owned)
            .unwrap();
    }
    fails(&w, "a shadow mapped into a second VM");
    // The shadow mapped writable at its own window (instead of hidden read-only).
    let mut w = World::new();
    let a = w.vm();
    w.shadow(a, w.untyped[0], UART).unwrap();
    let shadow = w.space.window_shadow(w.space.vm_id(a).unwrap(), Ipa(UART)).unwrap();
    let id_a = vm_object(&w, a);
    if let Some(super::space::Object::Vm { table, .. }) = w.space.objects.get_mut(&id_a) {
        table.unmap_range(&mut w.mem, &mut w.tlb, page).unwrap();
        let rw = stage2::MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RW };
        table
            .map_range(&mut w.mem, &mut w.tlb, page, PhysAddr(shadow.base), rw, stage2::OwnershipState::Owned)
            .unwrap();
    }
    fails(&w, "a shadow mapped writable");
    // The window gone, its shadow left behind (and still mapped).
    let mut w = World::new();
    let a = w.vm();
    let window = w.shadow(a, w.untyped[0], UART).unwrap();
    w.space.caps.remove(&window);
    fails(&w, "a shadow outliving its window");
    // The shadow's capability copied.
    let mut w = World::new();
    let a = w.vm();
    let window = w.shadow(a, w.untyped[0], UART).unwrap();
    let own = w.space.caps[&w.shadow_cap(window)];
    w.space.caps.insert(CapId(999), own);
    fails(&w, "a shadow with two capabilities");
    // The shadow's leaf unmapped while the window stays.
    let mut w = World::new();
    let a = w.vm();
    w.shadow(a, w.untyped[0], UART).unwrap();
    let id_a = vm_object(&w, a);
    if let Some(super::space::Object::Vm { table, .. }) = w.space.objects.get_mut(&id_a) {
        table.unmap_range(&mut w.mem, &mut w.tlb, page).unwrap();
    }
    fails(&w, "a window whose shadow is not mapped");
}

/// The object a VM capability names (the tests reach into the space to break it).
fn vm_object(w: &World, vm: CapId) -> super::space::ObjectId {
    super::space::ObjectId(w.space.vm_id(vm).unwrap().0)
}

/// One operation of the random and exhaustive searches; indices pick among what exists.
#[derive(Clone, Copy, Debug)]
enum Op {
    CreateVm,
    CreateIdentityVm,
    /// Exactly the 2 MiB block `block` of an untyped.
    RetypeAt {
        untyped: usize,
        block: u64,
    },
    Retype {
        untyped: usize,
        shared: bool,
        blocks: u64,
    },
    Map {
        vm: usize,
        cap: usize,
        ipa: usize,
        rights: u8,
    },
    Derive {
        cap: usize,
        rights: u8,
    },
    Revoke {
        cap: usize,
    },
    Delete {
        cap: usize,
    },
    GrantInterrupt {
        vm: usize,
    },
    CreateVcpu {
        vm: usize,
    },
    Window {
        vm: usize,
        ipa: usize,
    },
    DestroyVm {
        vm: usize,
    },
    /// The VM's first touch of the page at `IPAS[ipa]`.
    Touch {
        vm: usize,
        ipa: usize,
    },
    /// A shadowed window of one page at `IPAS[ipa]`, its shadow from an untyped.
    ShadowWindow {
        vm: usize,
        untyped: usize,
        ipa: usize,
    },
    /// Shows or hides the shadow of the window at `IPAS[ipa]`.
    ShowShadow {
        vm: usize,
        ipa: usize,
        visible: bool,
    },
}

const IPAS: [u64; 4] = [0x4000_0000, 0x4020_0000, 0x0900_0000, 0xff_ffe0_0000];
/// A `Map` IPA index past `IPAS`: the region's own physical address (IPA = PA).
const OWN_PA: usize = IPAS.len();

impl World {
    fn pick(list: &[CapId], i: usize) -> Option<CapId> {
        (!list.is_empty()).then(|| list[i % list.len()])
    }

    /// Applies `op` and says whether it was refused; errors are fine (they must be typed,
    /// which the signature guarantees), panics are not.
    fn apply(&mut self, op: Op) -> bool {
        let made = self.made.clone();
        let vms = self.vms.clone();
        let result: Result<Option<CapId>, CapError> = match op {
            Op::CreateVm => self.space.create_vm(&mut self.mem).map(|c| {
                self.vms.push(c);
                Some(c)
            }),
            Op::CreateIdentityVm => self.space.create_identity_vm(&mut self.mem).map(|c| {
                self.vms.push(c);
                Some(c)
            }),
            Op::RetypeAt { untyped, block } => {
                let u = self.untyped[untyped % 2];
                let base = [0x4000_0000, 0x8000_0000][untyped % 2] + block * MIB2;
                self.space.retype_at(u, RegionKind::Ram, PhysRange { base, size: MIB2 }).map(Some)
            }
            Op::Retype { untyped, shared, blocks } => {
                let kind = if shared { RegionKind::Shared } else { RegionKind::Ram };
                self.space.retype(self.untyped[untyped % 2], kind, blocks * MIB2, MIB2).map(Some)
            }
            Op::Map { vm, cap, ipa, rights } => match (Self::pick(&vms, vm), Self::pick(&made, cap)) {
                (Some(v), Some(c)) => {
                    let at = match ipa % (OWN_PA + 1) {
                        OWN_PA => self.space.region(c).map_or(IPAS[0], |(range, _)| range.base),
                        i => IPAS[i],
                    };
                    self.map(v, c, at, Rights::from_bits(rights)).map(Some)
                }
                _ => Ok(None),
            },
            Op::Derive { cap, rights } => match Self::pick(&made, cap) {
                Some(c) => self.space.derive(c, Rights::from_bits(rights)).map(Some),
                None => Ok(None),
            },
            Op::Revoke { cap } => match Self::pick(&made, cap) {
                Some(c) => self.space.revoke(&mut self.mem, &mut self.tlb, c).map(|_| None),
                None => Ok(None),
            },
            Op::Delete { cap } => match Self::pick(&made, cap) {
                Some(c) => self.space.delete(&mut self.mem, &mut self.tlb, c).map(|_| None),
                None => Ok(None),
            },
            Op::GrantInterrupt { vm } => match Self::pick(&vms, vm) {
                Some(v) => self.space.grant_interrupt(v, self.interrupt).map(Some),
                None => Ok(None),
            },
            Op::CreateVcpu { vm } => match Self::pick(&vms, vm) {
                Some(v) => self.space.create_vcpu(v, 2).map(Some),
                None => Ok(None),
            },
            Op::Window { vm, ipa } => match Self::pick(&vms, vm) {
                Some(v) => self
                    .space
                    .add_emulated_window(v, IpaRange::new(Ipa(IPAS[ipa % IPAS.len()]), 0x1000).unwrap(), 1)
                    .map(Some),
                None => Ok(None),
            },
            Op::DestroyVm { vm } => match Self::pick(&vms, vm) {
                Some(v) => self.space.destroy_vm(&mut self.mem, &mut self.tlb, v).map(|_| None),
                None => Ok(None),
            },
            Op::Touch { vm, ipa } => match Self::pick(&vms, vm) {
                Some(v) => self.touch(v, IPAS[ipa % IPAS.len()]).map(|_| None),
                None => Ok(None),
            },
            Op::ShadowWindow { vm, untyped, ipa } => match Self::pick(&vms, vm) {
                Some(v) => self.shadow(v, self.untyped[untyped % 2], IPAS[ipa % IPAS.len()]).map(|window| {
                    // The shadow's own capability too, so that later operations map, copy,
                    // revoke and delete it.
                    let shadow = self.shadow_cap(window);
                    self.made.push(shadow);
                    Some(window)
                }),
                None => Ok(None),
            },
            Op::ShowShadow { vm, ipa, visible } => match Self::pick(&vms, vm) {
                Some(v) => self.show(v, IPAS[ipa % IPAS.len()], visible).map(|_| None),
                None => Ok(None),
            },
        };
        if let Ok(Some(c)) = result {
            self.made.push(c);
        }
        // Capabilities that no longer exist stay in `made`: using them must give an error.
        result.is_err()
    }

    /// Everything the abstract and the real state hold: capabilities, objects, every table
    /// frame's contents.
    fn fingerprint(&self) -> String {
        let objects: Vec<String> = self
            .space
            .objects
            .iter()
            .map(|(id, o)| match o {
                super::space::Object::Untyped { range, carved } => format!("{id:?} untyped {range:?} {carved:?}"),
                super::space::Object::Region { range, kind, untyped } => {
                    format!("{id:?} region {range:?} {kind:?} {untyped:?}")
                }
                super::space::Object::Vm { vmid, table, identity } => {
                    format!("{id:?} vm {vmid} identity {identity} root {:?}", table.root())
                }
                super::space::Object::Vcpu { vm, index } => format!("{id:?} vcpu {vm:?} {index}"),
                super::space::Object::Interrupt { intid } => format!("{id:?} interrupt {intid}"),
            })
            .collect();
        format!("{:?} {objects:?} {:?}", self.space.caps, self.mem.snapshot())
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::CreateVm),
        Just(Op::CreateIdentityVm),
        (0usize..2, 0u64..9).prop_map(|(untyped, block)| Op::RetypeAt { untyped, block }),
        (0usize..2, any::<bool>(), 1u64..4).prop_map(|(untyped, shared, blocks)| Op::Retype {
            untyped,
            shared,
            blocks
        }),
        (0usize..4, 0usize..16, 0usize..=OWN_PA, 0u8..16).prop_map(|(vm, cap, ipa, rights)| Op::Map {
            vm,
            cap,
            ipa,
            rights
        }),
        (0usize..16, 0u8..16).prop_map(|(cap, rights)| Op::Derive { cap, rights }),
        (0usize..16).prop_map(|cap| Op::Revoke { cap }),
        (0usize..16).prop_map(|cap| Op::Delete { cap }),
        (0usize..4).prop_map(|vm| Op::GrantInterrupt { vm }),
        (0usize..4).prop_map(|vm| Op::CreateVcpu { vm }),
        (0usize..4, 0usize..4).prop_map(|(vm, ipa)| Op::Window { vm, ipa }),
        (0usize..4).prop_map(|vm| Op::DestroyVm { vm }),
        (0usize..4, 0usize..4).prop_map(|(vm, ipa)| Op::Touch { vm, ipa }),
        (0usize..4, 0usize..2, 0usize..4).prop_map(|(vm, untyped, ipa)| Op::ShadowWindow { vm, untyped, ipa }),
        (0usize..4, 0usize..4, any::<bool>()).prop_map(|(vm, ipa, visible)| Op::ShowShadow { vm, ipa, visible }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Every invariant holds after every step of any sequence of operations.
    #[test]
    fn invariants_hold_after_every_operation(ops in prop::collection::vec(op(), 1..10)) {
        let mut w = World::new();
        for op in ops {
            w.apply(op);
            if let Err(v) = check_all(&w.space, &w.mem) {
                prop_assert!(false, "{} violated after {:?}: {}", v.invariant, op, v.detail);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// With table frames scarce (a budget of 0 to 7 more frames), a refused operation,
    /// out of frames included, leaves the capabilities, the objects and every table frame
    /// exactly as they were: decode has no side effect, and stage 2 prepares before it
    /// commits.
    #[test]
    fn a_refused_operation_changes_nothing(spare in 0usize..8, ops in prop::collection::vec(op(), 1..10)) {
        let mut w = World::new();
        w.mem.set_budget(w.mem.frames_in_use() + spare);
        for op in ops {
            let before = w.fingerprint();
            if w.apply(op) {
                prop_assert!(w.fingerprint() == before, "refused {:?} changed the state", op);
            }
            if let Err(v) = check_all(&w.space, &w.mem) {
                prop_assert!(false, "{} violated after {:?}: {}", v.invariant, op, v.detail);
            }
        }
    }
}

/// Every sequence of four operations drawn from a small universe: two untyped ranges, up
/// to three VMs (the second or third identity-mapped when made by `CreateIdentityVm`), one
/// region kind each, a few IPAs and a region's own address, a shadowed window at the UART
/// address shown and hidden, and the operations on the first capabilities made (a shadowed
/// window made first is capability 5, its shadow 6).
#[test]
fn every_sequence_of_four_operations() {
    let alphabet = [
        Op::CreateVm,
        Op::Retype { untyped: 0, shared: false, blocks: 1 },
        Op::Retype { untyped: 1, shared: true, blocks: 1 },
        Op::Map { vm: 0, cap: 5, ipa: 0, rights: 15 },
        Op::Map { vm: 1, cap: 5, ipa: 1, rights: 3 },
        Op::Map { vm: 0, cap: 2, ipa: 2, rights: 3 },
        Op::Derive { cap: 5, rights: 1 },
        Op::Revoke { cap: 0 },
        Op::Delete { cap: 5 },
        Op::GrantInterrupt { vm: 0 },
        Op::CreateVcpu { vm: 0 },
        Op::DestroyVm { vm: 0 },
        Op::CreateIdentityVm,
        Op::Map { vm: 1, cap: 5, ipa: OWN_PA, rights: 3 },
        Op::ShadowWindow { vm: 0, untyped: 0, ipa: 2 },
        Op::ShowShadow { vm: 0, ipa: 2, visible: true },
        Op::ShowShadow { vm: 0, ipa: 2, visible: false },
    ];
    let n = alphabet.len();
    // Split over the host's CPUs (each thread builds its own worlds: they are not `Send`).
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let run = |first: usize| {
        let mut sequences = 0;
        for code in (first..n.pow(4)).step_by(threads) {
            let mut w = World::new();
            w.apply(Op::CreateVm);
            let mut c = code;
            for step in 0..4 {
                let op = alphabet[c % n];
                c /= n;
                w.apply(op);
                if let Err(v) = check_all(&w.space, &w.mem) {
                    panic!("{} violated at step {step} of sequence {code}: {}", v.invariant, v.detail);
                }
            }
            sequences += 1;
        }
        sequences
    };
    let sequences: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads).map(|t| scope.spawn(move || run(t))).collect();
        workers.into_iter().map(|w| w.join().expect("a sequence violated an invariant")).sum()
    });
    assert_eq!(sequences, 83_521);
}
