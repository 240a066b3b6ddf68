//! The capability space: capabilities, the objects they name, and the operations. Each
//! operation is `decode_*` (every check, no side effect, `&self`) then `invoke_*` (applies
//! what was decoded), seL4's decode/invoke split.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use stage2::{
    Ipa, IpaRange, MappingAttributes, MemoryType, OwnershipState, PhysAddr, Stage2Table, TableFormat, TableMemory,
    TlbMaintenance, PAGE_SIZE,
};

use super::{CapError, Rights};
use crate::platform::PhysRange;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct CapId(pub u32);

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub(super) struct ObjectId(pub u32);

/// A VM, as the space names it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct VmId(pub u32);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RegionKind {
    /// Private RAM of one VM.
    Ram,
    /// Memory several VMs may map: a channel between them.
    Shared,
    /// A passthrough device's registers.
    DeviceMmio,
    /// Device registers banked per CPU, which every VM may map: each CPU sees its own bank
    /// (the GICv2 virtual CPU interface, GICV).
    BankedDevice,
    /// A device model's copy of its registers, which one VM reads at one emulated window
    /// (`CapSpace::add_shadowed_window`; docs/capability-model.md, S1-S5 and I14). Memory
    /// from untyped, mapped read-only Device at its window only, never by `map`; never
    /// zeroed on first touch; not subject to the identity rule (I12).
    Shadow,
}

impl RegionKind {
    pub fn is_device(self) -> bool {
        matches!(self, RegionKind::DeviceMmio | RegionKind::BankedDevice)
    }
}

/// What an IPA of a VM is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RangeKind {
    Region(RegionKind),
    /// Trapped to a device model: no stage-2 mapping.
    Emulated {
        device: u32,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpaRangeInfo {
    pub range: IpaRange,
    pub kind: RangeKind,
    /// The physical address the IPA maps to (mapped ranges only).
    pub pa: Option<PhysAddr>,
    pub rights: Rights,
    /// A shadowed emulated window's shadow (`add_shadowed_window`): where the device model
    /// keeps the copy of its registers the VM may read while it is shown. None otherwise.
    pub shadow: Option<PhysRange>,
}

pub(super) enum Object {
    Untyped {
        range: PhysRange,
        carved: Vec<(PhysRange, ObjectId)>,
    },
    Region {
        range: PhysRange,
        kind: RegionKind,
        untyped: Option<ObjectId>,
    },
    Vm {
        vmid: u16,
        table: Stage2Table,
        /// RAM and shared memory only at IPA = PA (docs/capability-model.md, D4 and I12).
        identity: bool,
    },
    /// vCPU `index` of VM `vm` (its MPIDR Aff0 in the guest).
    Vcpu {
        vm: ObjectId,
        index: u32,
    },
    Interrupt {
        intid: u32,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum CapKind {
    Object(ObjectId),
    Mapping {
        vm: ObjectId,
        region: ObjectId,
        ipa: IpaRange,
    },
    /// An IPA range trapped to device model `device`; `shadow`, a `Shadow` region mapped at
    /// it, which goes with it (I14).
    EmulatedWindow {
        vm: ObjectId,
        ipa: IpaRange,
        device: u32,
        shadow: Option<ObjectId>,
    },
    InterruptGrant {
        vm: ObjectId,
        interrupt: ObjectId,
    },
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Cap {
    pub kind: CapKind,
    pub rights: Rights,
    pub parent: Option<CapId>,
}

pub struct CapSpace {
    pub(super) caps: BTreeMap<CapId, Cap>,
    pub(super) objects: BTreeMap<ObjectId, Object>,
    next_cap: u32,
    next_object: u32,
    pub(super) format: TableFormat,
}

/// A decoded `map`: everything checked.
pub struct MapOp {
    vm: ObjectId,
    region: ObjectId,
    region_cap: CapId,
    ipa: IpaRange,
    pa: PhysAddr,
    rights: Rights,
    attrs: MappingAttributes,
    owner: OwnershipState,
    /// Zeroed on first touch: the leaves are written pending (`Stage2Table::
    /// map_range_pending`) and made valid by `zero_on_first_touch`. A translated VM's
    /// private RAM only: shared memory is reachable by another VM already, a device's
    /// registers are never zeroed, and an identity-mapped VM's device may DMA into memory
    /// its CPUs never touched.
    pending: bool,
}

/// A decoded `add_shadowed_window`: everything checked, the shadow's place in the untyped
/// chosen.
pub struct ShadowOp {
    vm: ObjectId,
    vm_cap: CapId,
    untyped: ObjectId,
    untyped_cap: CapId,
    ipa: IpaRange,
    device: u32,
    shadow: PhysRange,
}

/// A decoded operation that adds one capability, and perhaps the object it names: retype,
/// derive, grant an interrupt, an emulated window, a vCPU. Invoking it cannot fail.
pub struct CreateOp {
    what: NewCap,
    rights: Rights,
    parent: Option<CapId>,
}

enum NewCap {
    Cap(CapKind),
    Region { untyped: ObjectId, range: PhysRange, kind: RegionKind },
    Vcpu { vm: ObjectId, index: u32 },
}

/// A decoded revoke, delete or VM destruction: every capability and object that goes,
/// computed without side effects. Invoking it cannot fail.
#[derive(Default)]
pub struct RemoveOp {
    caps: BTreeSet<CapId>,
    objects: BTreeSet<ObjectId>,
}

fn aligned(value: u64, align: u64) -> bool {
    align.is_power_of_two() && value & (align - 1) == 0
}

impl CapSpace {
    /// An empty space whose VMs get stage-2 tables of `format`.
    pub fn new(format: TableFormat) -> Self {
        CapSpace { caps: BTreeMap::new(), objects: BTreeMap::new(), next_cap: 1, next_object: 1, format }
    }

    fn new_object(&mut self, o: Object) -> ObjectId {
        let id = ObjectId(self.next_object);
        self.next_object += 1;
        self.objects.insert(id, o);
        id
    }

    fn new_cap(&mut self, kind: CapKind, rights: Rights, parent: Option<CapId>) -> CapId {
        let id = CapId(self.next_cap);
        self.next_cap += 1;
        self.caps.insert(id, Cap { kind, rights, parent });
        id
    }

    fn cap(&self, cap: CapId) -> Result<&Cap, CapError> {
        self.caps.get(&cap).ok_or(CapError::NoSuchCapability { cap })
    }

    fn object_of(&self, cap: CapId) -> Result<(ObjectId, &Object, Rights), CapError> {
        let c = self.cap(cap)?;
        match c.kind {
            CapKind::Object(id) => {
                self.objects.get(&id).map(|o| (id, o, c.rights)).ok_or(CapError::NoSuchCapability { cap })
            }
            _ => Err(CapError::WrongType { cap, expected: "an object" }),
        }
    }

    fn require(cap: CapId, have: Rights, need: Rights, name: &'static str) -> Result<(), CapError> {
        if have.contains(need) {
            Ok(())
        } else {
            Err(CapError::MissingRight { cap, right: name })
        }
    }

    fn vm_object(&self, cap: CapId) -> Result<(ObjectId, Rights), CapError> {
        match self.object_of(cap)? {
            (id, Object::Vm { .. }, rights) => Ok((id, rights)),
            _ => Err(CapError::WrongType { cap, expected: "a VM" }),
        }
    }

    fn all_memory(&self) -> impl Iterator<Item = PhysRange> + '_ {
        self.objects.values().filter_map(|o| match o {
            Object::Untyped { range, .. } => Some(*range),
            Object::Region { range, untyped: None, .. } => Some(*range),
            _ => None,
        })
    }

    fn add_memory(&mut self, range: PhysRange, object: Object) -> Result<CapId, CapError> {
        if range.size == 0 {
            return Err(CapError::ZeroSize);
        }
        if !aligned(range.base, PAGE_SIZE)
            || !aligned(range.size, PAGE_SIZE)
            || range.base.checked_add(range.size).is_none()
        {
            return Err(CapError::Unaligned { what: "memory range", value: range.base });
        }
        if self.all_memory().any(|r| r.overlaps(&range)) {
            return Err(CapError::OverlappingMemory { base: range.base });
        }
        let id = self.new_object(object);
        Ok(self.new_cap(CapKind::Object(id), Rights::ALL, None))
    }

    /// Boot: free RAM the hypervisor hands to VMs (never its own memory).
    pub fn add_untyped(&mut self, range: PhysRange) -> Result<CapId, CapError> {
        self.add_memory(range, Object::Untyped { range, carved: Vec::new() })
    }

    /// Boot: a passthrough device's register range (`DeviceMmio`, one VM at a time) or a
    /// per-CPU banked one (`BankedDevice`, every VM).
    pub fn add_device_region(&mut self, range: PhysRange, kind: RegionKind) -> Result<CapId, CapError> {
        if !kind.is_device() {
            return Err(CapError::WrongType { cap: CapId(0), expected: "a device region kind" });
        }
        self.add_memory(range, Object::Region { range, kind, untyped: None })
    }

    /// Boot: a physical interrupt the board has.
    pub fn add_interrupt(&mut self, intid: u32) -> Result<CapId, CapError> {
        if self.objects.values().any(|o| matches!(o, Object::Interrupt { intid: i } if *i == intid)) {
            return Err(CapError::DuplicateInterrupt { intid });
        }
        let id = self.new_object(Object::Interrupt { intid });
        Ok(self.new_cap(CapKind::Object(id), Rights::ALL, None))
    }

    pub fn decode_retype(
        &self,
        untyped_cap: CapId,
        kind: RegionKind,
        size: u64,
        align: u64,
    ) -> Result<CreateOp, CapError> {
        let (_, object, rights) = self.object_of(untyped_cap)?;
        if !matches!(object, Object::Untyped { .. }) {
            return Err(CapError::WrongType { cap: untyped_cap, expected: "untyped memory" });
        }
        Self::require(untyped_cap, rights, Rights::GRANT, "grant")?;
        Self::retypable(untyped_cap, kind)?;
        self.place(untyped_cap, size, align).map(|(untyped, range)| CreateOp {
            what: NewCap::Region { untyped, range, kind },
            rights,
            parent: Some(untyped_cap),
        })
    }

    /// Only RAM and shared memory are retyped by hand: device regions come from the board,
    /// a shadow only with its window (`add_shadowed_window`).
    fn retypable(untyped_cap: CapId, kind: RegionKind) -> Result<(), CapError> {
        match kind {
            RegionKind::Ram | RegionKind::Shared => Ok(()),
            RegionKind::DeviceMmio | RegionKind::BankedDevice => Err(CapError::WrongType {
                cap: untyped_cap,
                expected: "device memory (untyped becomes RAM or shared memory only)",
            }),
            RegionKind::Shadow => Err(CapError::WrongType {
                cap: untyped_cap,
                expected: "a shadow page (retyped only with its window, by add_shadowed_window)",
            }),
        }
    }

    /// Where `size` bytes aligned to `align` fit in the untyped (first fit), with no side
    /// effect.
    fn place(&self, untyped_cap: CapId, size: u64, align: u64) -> Result<(ObjectId, PhysRange), CapError> {
        let (untyped, object, _) = self.object_of(untyped_cap)?;
        let Object::Untyped { range, carved } = object else {
            return Err(CapError::WrongType { cap: untyped_cap, expected: "untyped memory" });
        };
        if size == 0 {
            return Err(CapError::ZeroSize);
        }
        if !aligned(size, PAGE_SIZE) || !align.is_power_of_two() || align < PAGE_SIZE {
            return Err(CapError::Unaligned { what: "size or alignment", value: size });
        }
        // First fit among the gaps between carved pieces.
        let mut cursor = range.base;
        let mut pieces: Vec<PhysRange> = carved.iter().map(|(r, _)| *r).collect();
        pieces.sort_by_key(|r| r.base);
        for gap_end in pieces.iter().map(|r| r.base).chain(core::iter::once(range.end())) {
            let base = cursor.next_multiple_of(align);
            if base.checked_add(size).is_some_and(|end| end <= gap_end) {
                return Ok((untyped, PhysRange { base, size }));
            }
            if let Some(p) = pieces.iter().find(|p| p.base == gap_end) {
                cursor = cursor.max(p.end());
            }
        }
        Err(CapError::OutOfUntyped { size })
    }

    /// Adds what was decoded: the capability, and the region or vCPU object it names.
    pub fn invoke_create(&mut self, op: CreateOp) -> CapId {
        let kind = match op.what {
            NewCap::Cap(kind) => kind,
            NewCap::Region { untyped, range, kind } => {
                let region = self.new_object(Object::Region { range, kind, untyped: Some(untyped) });
                if let Some(Object::Untyped { carved, .. }) = self.objects.get_mut(&untyped) {
                    carved.push((range, region));
                }
                CapKind::Object(region)
            }
            NewCap::Vcpu { vm, index } => CapKind::Object(self.new_object(Object::Vcpu { vm, index })),
        };
        self.new_cap(kind, op.rights, op.parent)
    }

    /// Like `decode_retype`, but the region is exactly `range`: for an identity-mapped VM,
    /// whose RAM is the physical memory its manifest names (docs/capability-model.md, D4).
    /// `range` must lie in the untyped and miss every piece carved from it.
    pub fn decode_retype_at(
        &self,
        untyped_cap: CapId,
        kind: RegionKind,
        range: PhysRange,
    ) -> Result<CreateOp, CapError> {
        let (untyped, object, rights) = self.object_of(untyped_cap)?;
        let Object::Untyped { range: whole, carved } = object else {
            return Err(CapError::WrongType { cap: untyped_cap, expected: "untyped memory" });
        };
        Self::require(untyped_cap, rights, Rights::GRANT, "grant")?;
        Self::retypable(untyped_cap, kind)?;
        if range.size == 0 {
            return Err(CapError::ZeroSize);
        }
        if !aligned(range.base, PAGE_SIZE) || !aligned(range.size, PAGE_SIZE) {
            return Err(CapError::Unaligned { what: "region", value: range.base });
        }
        let inside = range.base >= whole.base && range.base.checked_add(range.size).is_some_and(|e| e <= whole.end());
        if !inside || carved.iter().any(|(piece, _)| piece.overlaps(&range)) {
            return Err(CapError::NotFree { base: range.base, size: range.size });
        }
        Ok(CreateOp { what: NewCap::Region { untyped, range, kind }, rights, parent: Some(untyped_cap) })
    }

    /// Carves exactly `range` out of the untyped as a region of `kind`.
    pub fn retype_at(&mut self, untyped_cap: CapId, kind: RegionKind, range: PhysRange) -> Result<CapId, CapError> {
        let op = self.decode_retype_at(untyped_cap, kind, range)?;
        Ok(self.invoke_create(op))
    }

    /// Carves `size` bytes aligned to `align` out of the untyped as a region of `kind`.
    pub fn retype(&mut self, untyped_cap: CapId, kind: RegionKind, size: u64, align: u64) -> Result<CapId, CapError> {
        let op = self.decode_retype(untyped_cap, kind, size, align)?;
        Ok(self.invoke_create(op))
    }

    /// A new VM with empty stage-2 tables and the lowest free VMID.
    pub fn create_vm(&mut self, mem: &mut impl TableMemory) -> Result<CapId, CapError> {
        self.new_vm(mem, false)
    }

    /// A new identity-mapped VM: `map` gives it RAM and shared memory only at IPA = PA
    /// (docs/capability-model.md, "Identity-mapped VMs").
    pub fn create_identity_vm(&mut self, mem: &mut impl TableMemory) -> Result<CapId, CapError> {
        self.new_vm(mem, true)
    }

    /// Whether the VM is identity-mapped.
    pub fn is_identity_vm(&self, vm: VmId) -> bool {
        matches!(self.objects.get(&ObjectId(vm.0)), Some(Object::Vm { identity: true, .. }))
    }

    fn new_vm(&mut self, mem: &mut impl TableMemory, identity: bool) -> Result<CapId, CapError> {
        let used: Vec<u16> = self
            .objects
            .values()
            .filter_map(|o| if let Object::Vm { vmid, .. } = o { Some(*vmid) } else { None })
            .collect();
        let vmid = (1..=255u16).find(|v| !used.contains(v)).ok_or(CapError::NoVmid)?;
        let table = Stage2Table::new(self.format, vmid, mem)?;
        let id = self.new_object(Object::Vm { vmid, table, identity });
        Ok(self.new_cap(CapKind::Object(id), Rights::ALL, None))
    }

    pub fn decode_create_vcpu(&self, vm_cap: CapId, max_vcpus: u32) -> Result<CreateOp, CapError> {
        let (vm, rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, rights, Rights::GRANT, "grant")?;
        let used: Vec<u32> = self
            .objects
            .values()
            .filter_map(|o| match o {
                Object::Vcpu { vm: v, index } if *v == vm => Some(*index),
                _ => None,
            })
            .collect();
        let index = (0..max_vcpus).find(|i| !used.contains(i)).ok_or(CapError::TooManyVcpus { max: max_vcpus })?;
        Ok(CreateOp { what: NewCap::Vcpu { vm, index }, rights: Rights::ALL, parent: Some(vm_cap) })
    }

    /// A new vCPU of the VM, with the lowest index below `max_vcpus` the VM does not use yet.
    pub fn create_vcpu(&mut self, vm_cap: CapId, max_vcpus: u32) -> Result<CapId, CapError> {
        let op = self.decode_create_vcpu(vm_cap, max_vcpus)?;
        Ok(self.invoke_create(op))
    }

    /// The vCPUs of a VM, by index.
    pub fn vcpu_count(&self, vm: VmId) -> usize {
        self.objects.values().filter(|o| matches!(o, Object::Vcpu { vm: v, .. } if v.0 == vm.0)).count()
    }

    fn vm_ranges(&self, vm: ObjectId) -> impl Iterator<Item = (CapId, IpaRange)> + '_ {
        self.caps.iter().filter_map(move |(id, c)| match c.kind {
            CapKind::Mapping { vm: v, ipa, .. } | CapKind::EmulatedWindow { vm: v, ipa, .. } if v == vm => {
                Some((*id, ipa))
            }
            _ => None,
        })
    }

    fn check_ipa(&self, vm: ObjectId, ipa: IpaRange) -> Result<(), CapError> {
        if !aligned(ipa.start().0, PAGE_SIZE) || !aligned(ipa.size(), PAGE_SIZE) {
            return Err(CapError::Unaligned { what: "IPA range", value: ipa.start().0 });
        }
        let bits = self.format.geometry().map_err(CapError::Stage2)?.ipa_bits;
        if ipa.end() > 1 << bits {
            return Err(CapError::BeyondIpaSize { end: ipa.end() });
        }
        if let Some((_, other)) = self.vm_ranges(vm).find(|(_, r)| r.overlaps(&ipa)) {
            return Err(CapError::OverlappingIpa { ipa: other.start().0.max(ipa.start().0) });
        }
        Ok(())
    }

    pub fn decode_map(&self, vm_cap: CapId, region_cap: CapId, ipa: Ipa, rights: Rights) -> Result<MapOp, CapError> {
        let (vm, vm_rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, vm_rights, Rights::GRANT, "grant")?;
        let (region, object, region_rights) = self.object_of(region_cap)?;
        let Object::Region { range, kind, .. } = *object else {
            return Err(CapError::WrongType { cap: region_cap, expected: "a memory region" });
        };
        if kind == RegionKind::Shadow {
            return Err(CapError::WrongType {
                cap: region_cap,
                expected: "a region that may be mapped (a shadow page is mapped only at its window)",
            });
        }
        if !region_rights.contains(rights.without(Rights::GRANT)) {
            return Err(CapError::RightsNotASubset { cap: region_cap });
        }
        if kind.is_device() && rights.contains(Rights::EXECUTE) {
            return Err(CapError::Stage2(stage2::Stage2Error::InvalidPermissions));
        }
        let identity = matches!(self.objects.get(&vm), Some(Object::Vm { identity: true, .. }));
        if identity && !kind.is_device() && ipa.0 != range.base {
            return Err(CapError::NotIdentity { ipa: ipa.0, pa: range.base });
        }
        let ipa = IpaRange::new(ipa, range.size).map_err(CapError::Stage2)?;
        self.check_ipa(vm, ipa)?;
        let mapped_elsewhere =
            self.caps.values().any(|c| matches!(c.kind, CapKind::Mapping { region: r, .. } if r == region));
        let owner = match kind {
            RegionKind::Ram | RegionKind::DeviceMmio if mapped_elsewhere => {
                return Err(CapError::AlreadyMapped { cap: region_cap })
            }
            RegionKind::Ram | RegionKind::DeviceMmio => OwnershipState::Owned,
            RegionKind::Shared | RegionKind::BankedDevice if mapped_elsewhere => OwnershipState::Borrowed,
            RegionKind::Shared | RegionKind::BankedDevice => OwnershipState::Shared,
            // Refused above; named so that a new kind must say how it is owned.
            RegionKind::Shadow => return Err(CapError::WrongType { cap: region_cap, expected: "a mappable region" }),
        };
        let memory = if kind.is_device() { MemoryType::DeviceNGnRE } else { MemoryType::NormalWriteBack };
        let rights = rights.without(Rights::GRANT);
        Ok(MapOp {
            vm,
            region,
            region_cap,
            ipa,
            pa: PhysAddr(range.base),
            rights,
            attrs: MappingAttributes { memory, permissions: rights.permissions() },
            owner,
            pending: kind == RegionKind::Ram && !identity,
        })
    }

    /// Maps the decoded region. Fails only when the table memory runs out, and then nothing
    /// changed (stage 2 prepares before it commits).
    pub fn invoke_map(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        op: MapOp,
    ) -> Result<CapId, CapError> {
        let Some(Object::Vm { table, .. }) = self.objects.get_mut(&op.vm) else {
            return Err(CapError::WrongType { cap: op.region_cap, expected: "a VM" });
        };
        if op.pending {
            table.map_range_pending(mem, tlb, op.ipa, op.pa, op.attrs, op.owner)?;
        } else {
            table.map_range(mem, tlb, op.ipa, op.pa, op.attrs, op.owner)?;
        }
        Ok(self.new_cap(CapKind::Mapping { vm: op.vm, region: op.region, ipa: op.ipa }, op.rights, Some(op.region_cap)))
    }

    /// Maps the whole region of `region_cap` into the VM at `ipa` with `rights`.
    pub fn map(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        vm_cap: CapId,
        region_cap: CapId,
        ipa: Ipa,
        rights: Rights,
    ) -> Result<CapId, CapError> {
        let op = self.decode_map(vm_cap, region_cap, ipa, rights)?;
        self.invoke_map(mem, tlb, op)
    }

    pub fn decode_emulated_window(&self, vm_cap: CapId, ipa: IpaRange, device: u32) -> Result<CreateOp, CapError> {
        let (vm, rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, rights, Rights::GRANT, "grant")?;
        self.check_ipa(vm, ipa)?;
        Ok(CreateOp {
            what: NewCap::Cap(CapKind::EmulatedWindow { vm, ipa, device, shadow: None }),
            rights: Rights::RW,
            parent: Some(vm_cap),
        })
    }

    /// An IPA range of the VM whose accesses trap to device model `device` (no stage-2
    /// mapping: the fault handler finds it with `lookup`).
    pub fn add_emulated_window(&mut self, vm_cap: CapId, ipa: IpaRange, device: u32) -> Result<CapId, CapError> {
        let op = self.decode_emulated_window(vm_cap, ipa, device)?;
        Ok(self.invoke_create(op))
    }

    /// Checks an emulated window with a shadow page: the window as `decode_emulated_window`
    /// checks it, and room for a page-aligned `Shadow` region of its size in the untyped,
    /// whose capability must carry `grant` (to carve it) and `read` (the VM reads it). No
    /// side effect.
    pub fn decode_shadowed_window(
        &self,
        vm_cap: CapId,
        untyped_cap: CapId,
        ipa: IpaRange,
        device: u32,
    ) -> Result<ShadowOp, CapError> {
        let (vm, rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, rights, Rights::GRANT, "grant")?;
        self.check_ipa(vm, ipa)?;
        let (_, object, untyped_rights) = self.object_of(untyped_cap)?;
        if !matches!(object, Object::Untyped { .. }) {
            return Err(CapError::WrongType { cap: untyped_cap, expected: "untyped memory" });
        }
        Self::require(untyped_cap, untyped_rights, Rights::GRANT, "grant")?;
        Self::require(untyped_cap, untyped_rights, Rights::READ, "read")?;
        let (untyped, shadow) = self.place(untyped_cap, ipa.size(), PAGE_SIZE)?;
        Ok(ShadowOp { vm, vm_cap, untyped, untyped_cap, ipa, device, shadow })
    }

    /// Maps the decoded shadow hidden at its window, then records the `Shadow` region (a
    /// child of the untyped capability, `READ` only) and the window (a child of the VM
    /// capability) that names it; returns the window's capability. Fails only when stage 2
    /// refuses the mapping (out of table frames, or a physical address beyond the VM's PA
    /// size), and then nothing changed: nothing is recorded before stage 2 accepted it.
    pub fn invoke_shadowed_window(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        op: ShadowOp,
    ) -> Result<CapId, CapError> {
        let Some(Object::Vm { table, .. }) = self.objects.get_mut(&op.vm) else {
            return Err(CapError::WrongType { cap: op.vm_cap, expected: "a VM" });
        };
        table.map_range_hidden(
            mem,
            tlb,
            op.ipa,
            PhysAddr(op.shadow.base),
            MappingAttributes::READ_ONLY_DEVICE,
            OwnershipState::Owned,
        )?;
        let region =
            self.new_object(Object::Region { range: op.shadow, kind: RegionKind::Shadow, untyped: Some(op.untyped) });
        if let Some(Object::Untyped { carved, .. }) = self.objects.get_mut(&op.untyped) {
            carved.push((op.shadow, region));
        }
        self.new_cap(CapKind::Object(region), Rights::READ, Some(op.untyped_cap));
        let window = CapKind::EmulatedWindow { vm: op.vm, ipa: op.ipa, device: op.device, shadow: Some(region) };
        Ok(self.new_cap(window, Rights::RW, Some(op.vm_cap)))
    }

    /// An emulated window of the VM at `ipa` for device model `device`, as
    /// `add_emulated_window`, with a shadow page: a `Shadow` region of the window's size
    /// retyped from the untyped, mapped hidden at the window (docs/capability-model.md,
    /// S1). Faults on the window stay the device model's; `show_window_shadow` lets the VM
    /// read the page. A refused call changes nothing, out of table frames included.
    pub fn add_shadowed_window(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        vm_cap: CapId,
        untyped_cap: CapId,
        ipa: IpaRange,
        device: u32,
    ) -> Result<CapId, CapError> {
        let op = self.decode_shadowed_window(vm_cap, untyped_cap, ipa, device)?;
        self.invoke_shadowed_window(mem, tlb, op)
    }

    pub fn decode_grant_interrupt(&self, vm_cap: CapId, interrupt_cap: CapId) -> Result<CreateOp, CapError> {
        let (vm, vm_rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, vm_rights, Rights::GRANT, "grant")?;
        let (interrupt, object, rights) = self.object_of(interrupt_cap)?;
        let Object::Interrupt { intid } = *object else {
            return Err(CapError::WrongType { cap: interrupt_cap, expected: "a physical interrupt" });
        };
        Self::require(interrupt_cap, rights, Rights::GRANT, "grant")?;
        if self.caps.values().any(|c| matches!(c.kind, CapKind::InterruptGrant { interrupt: i, .. } if i == interrupt))
        {
            return Err(CapError::InterruptAlreadyGranted { intid });
        }
        Ok(CreateOp {
            what: NewCap::Cap(CapKind::InterruptGrant { vm, interrupt }),
            rights: Rights::RW,
            parent: Some(interrupt_cap),
        })
    }

    /// Gives the VM the physical interrupt; it belongs to at most one VM at a time.
    pub fn grant_interrupt(&mut self, vm_cap: CapId, interrupt_cap: CapId) -> Result<CapId, CapError> {
        let op = self.decode_grant_interrupt(vm_cap, interrupt_cap)?;
        Ok(self.invoke_create(op))
    }

    /// Mappings, windows and grants are not copied: each exists once, so deleting it undoes
    /// exactly what it did.
    pub fn decode_derive(&self, cap: CapId, rights: Rights) -> Result<CreateOp, CapError> {
        let c = self.cap(cap)?;
        let CapKind::Object(object) = c.kind else {
            return Err(CapError::WrongType {
                cap,
                expected: "an object (mappings, windows and grants are not copied)",
            });
        };
        if matches!(self.objects.get(&object), Some(Object::Region { kind: RegionKind::Shadow, .. })) {
            return Err(CapError::WrongType {
                cap,
                expected: "an object that may be copied (a shadow page has one capability and goes with its window)",
            });
        }
        if !c.rights.contains(rights) {
            return Err(CapError::RightsNotASubset { cap });
        }
        Ok(CreateOp { what: NewCap::Cap(c.kind), rights, parent: Some(cap) })
    }

    /// A copy of the object capability `cap` with `rights`, a subset of its rights, as a
    /// child of `cap` in the derivation tree.
    pub fn derive(&mut self, cap: CapId, rights: Rights) -> Result<CapId, CapError> {
        let op = self.decode_derive(cap, rights)?;
        Ok(self.invoke_create(op))
    }

    /// Everything that goes when the capabilities `roots` are deleted: their descendants in
    /// the derivation tree; each object whose last capability goes; and with an object,
    /// every capability that refers to it (a region's mappings; a VM's mappings, windows,
    /// grants and vCPUs; an interrupt's grant), until nothing more follows.
    fn plan_removal(&self, roots: Vec<CapId>) -> RemoveOp {
        let mut op = RemoveOp::default();
        let mut work = roots;
        while let Some(cap) = work.pop() {
            let Some(c) = self.caps.get(&cap) else { continue };
            if !op.caps.insert(cap) {
                continue;
            }
            work.extend(self.children(cap));
            if let CapKind::EmulatedWindow { shadow: Some(shadow), .. } = c.kind {
                // A shadow goes with its window (I14).
                work.extend(self.caps.iter().filter(|(_, c)| c.kind == CapKind::Object(shadow)).map(|(id, _)| *id));
            }
            let CapKind::Object(object) = c.kind else { continue };
            let last = self.caps.iter().all(|(id, c)| c.kind != CapKind::Object(object) || op.caps.contains(id));
            if last && op.objects.insert(object) {
                work.extend(self.caps.iter().filter(|(_, c)| self.refers_to(c.kind, object)).map(|(id, _)| *id));
            }
        }
        op
    }

    fn children(&self, cap: CapId) -> impl Iterator<Item = CapId> + '_ {
        self.caps.iter().filter(move |(_, c)| c.parent == Some(cap)).map(|(id, _)| *id)
    }

    /// Whether a capability of `kind` depends on `object` other than by naming it.
    fn refers_to(&self, kind: CapKind, object: ObjectId) -> bool {
        match kind {
            CapKind::Mapping { vm, region, .. } => vm == object || region == object,
            CapKind::EmulatedWindow { vm, shadow, .. } => vm == object || shadow == Some(object),
            CapKind::InterruptGrant { vm, interrupt } => vm == object || interrupt == object,
            CapKind::Object(o) => matches!(self.objects.get(&o), Some(Object::Vcpu { vm, .. }) if *vm == object),
        }
    }

    /// Revoking `cap` removes everything derived from it; `cap` stays.
    pub fn decode_revoke(&self, cap: CapId) -> Result<RemoveOp, CapError> {
        self.cap(cap)?;
        Ok(self.plan_removal(self.children(cap).collect()))
    }

    /// Deleting `cap` revokes it, then removes it.
    pub fn decode_delete(&self, cap: CapId) -> Result<RemoveOp, CapError> {
        self.cap(cap)?;
        Ok(self.plan_removal(alloc::vec![cap]))
    }

    /// Destroying a VM deletes every capability to it and to the private RAM regions mapped
    /// into it, so that memory returns to its untyped; its windows' shadows go with the
    /// windows.
    pub fn decode_destroy_vm(&self, vm_cap: CapId) -> Result<RemoveOp, CapError> {
        let (vm, _) = self.vm_object(vm_cap)?;
        let private: Vec<ObjectId> = self
            .caps
            .values()
            .filter_map(|c| match c.kind {
                CapKind::Mapping { vm: v, region, .. } if v == vm => Some(region),
                _ => None,
            })
            .filter(|r| matches!(self.objects.get(r), Some(Object::Region { kind: RegionKind::Ram, .. })))
            .collect();
        let roots =
            self.caps.iter().filter(|(_, c)| matches!(c.kind, CapKind::Object(o) if o == vm || private.contains(&o)));
        Ok(self.plan_removal(roots.map(|(id, _)| *id).collect()))
    }

    /// Removes what was decoded: mappings leave the tables of VMs that stay, regions' memory
    /// returns to their untyped, VMs' tables are freed and their TLB entries invalidated.
    pub fn invoke_remove(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, op: RemoveOp) {
        for cap in &op.caps {
            let (vm, ipa) = match self.caps.remove(cap) {
                Some(Cap { kind: CapKind::Mapping { vm, ipa, .. }, .. }) => (vm, ipa),
                Some(Cap { kind: CapKind::EmulatedWindow { vm, ipa, shadow: Some(_), .. }, .. }) => (vm, ipa),
                _ => continue,
            };
            if op.objects.contains(&vm) {
                continue; // the whole table goes below
            }
            if let Some(Object::Vm { table, .. }) = self.objects.get_mut(&vm) {
                // Cannot fail: the range passed the same checks when it was mapped, and it
                // holds only the entries `map` (or `map_range_hidden`, pages) made for it,
                // so no block is split and no frame is needed. A valid leaf is invalidated
                // in the TLB as it goes. I5 (tables_refine_capabilities) would show it
                // otherwise.
                let _ = table.unmap_range(mem, tlb, ipa);
            }
        }
        for object in &op.objects {
            match self.objects.remove(object) {
                Some(Object::Region { untyped: Some(u), .. }) => {
                    if let Some(Object::Untyped { carved, .. }) = self.objects.get_mut(&u) {
                        carved.retain(|(_, r)| r != object);
                    }
                }
                Some(Object::Vm { vmid, table, .. }) => {
                    table.destroy(mem);
                    tlb.invalidate_vmid(vmid);
                }
                _ => {}
            }
        }
    }

    /// Deletes everything derived from `cap` (with its mappings and grants); `cap` stays.
    pub fn revoke(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        cap: CapId,
    ) -> Result<(), CapError> {
        let op = self.decode_revoke(cap)?;
        self.invoke_remove(mem, tlb, op);
        Ok(())
    }

    /// Revokes `cap`, then removes it and what it did: a mapping leaves the VM's tables, a
    /// grant ends; the last capability to an object destroys it (a region's memory returns to
    /// its untyped; a VM's tables are freed, with its vCPUs).
    pub fn delete(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        cap: CapId,
    ) -> Result<(), CapError> {
        let op = self.decode_delete(cap)?;
        self.invoke_remove(mem, tlb, op);
        Ok(())
    }

    /// Ends a VM: its mappings, windows, grants and vCPUs, the private RAM regions mapped
    /// into it (their memory returns to untyped), and the VM with its tables.
    pub fn destroy_vm(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        vm_cap: CapId,
    ) -> Result<(), CapError> {
        let op = self.decode_destroy_vm(vm_cap)?;
        self.invoke_remove(mem, tlb, op);
        Ok(())
    }

    // Queries.

    pub fn vm_id(&self, vm_cap: CapId) -> Result<VmId, CapError> {
        self.vm_object(vm_cap).map(|(id, _)| VmId(id.0))
    }

    /// The VM's first touch of `range`, which lies in its private RAM: every pending leaf
    /// overlapping it is handed to `zero` (its physical address and size) and then made
    /// valid (`Stage2Table::activate_range`); returns the bytes made valid, 0 when all of it
    /// was valid already. Changes no capability, so it needs only `&self`; the caller keeps
    /// two of these for one VM from running at once.
    pub fn zero_on_first_touch(
        &self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        vm_cap: CapId,
        range: IpaRange,
        zero: &mut impl FnMut(PhysAddr, u64),
    ) -> Result<u64, CapError> {
        let (vm, _) = self.vm_object(vm_cap)?;
        let Some(Object::Vm { table, .. }) = self.objects.get(&vm) else {
            return Err(CapError::WrongType { cap: vm_cap, expected: "a VM" });
        };
        let private_ram = self.caps.values().any(|c| match c.kind {
            CapKind::Mapping { vm: v, region, ipa }
                if v == vm && ipa.start() <= range.start() && range.end() <= ipa.end() =>
            {
                matches!(self.objects.get(&region), Some(Object::Region { kind: RegionKind::Ram, .. }))
            }
            _ => false,
        });
        if !private_ram {
            return Err(CapError::NotPrivateRam { ipa: range.start().0 });
        }
        Ok(table.activate_range(mem, tlb, range, zero))
    }

    /// The shadow of the VM's shadowed window that contains `ipa`: where the hypervisor
    /// writes the device model's copy of its registers (through its own mapping; cleaned to
    /// the point of coherency before the VM reads it, docs/capability-model.md S4).
    pub fn window_shadow(&self, vm: VmId, ipa: Ipa) -> Option<PhysRange> {
        self.shadowed_window(ObjectId(vm.0), ipa).map(|(_, shadow)| shadow)
    }

    /// The VM's shadowed window containing `ipa`, and its shadow.
    fn shadowed_window(&self, vm: ObjectId, ipa: Ipa) -> Option<(IpaRange, PhysRange)> {
        self.caps.values().find_map(|c| match c.kind {
            CapKind::EmulatedWindow { vm: v, ipa: r, shadow: Some(shadow), .. } if v == vm && r.contains(ipa) => {
                match self.objects.get(&shadow) {
                    Some(Object::Region { range, .. }) => Some((r, *range)),
                    _ => None,
                }
            }
            _ => None,
        })
    }

    /// Shows (`visible`) or hides the whole shadow of the VM's shadowed window containing
    /// `ipa`: shown, the VM's reads of the window are served by the page without trapping
    /// (writes still trap); hidden, every access traps to the device model, and the TLBs of
    /// every CPU hold nothing of it when this returns (`Stage2Table::hide_range`). Changes no
    /// capability, so it needs only `&self`: the caller holds the space's lock. Allocates
    /// nothing; fails only when `vm_cap` is not a VM or the VM has no shadowed window at
    /// `ipa` (`NoShadowedWindow`), and then changes nothing.
    pub fn show_window_shadow(
        &self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        vm_cap: CapId,
        ipa: Ipa,
        visible: bool,
    ) -> Result<(), CapError> {
        let (vm, _) = self.vm_object(vm_cap)?;
        let Some(Object::Vm { table, .. }) = self.objects.get(&vm) else {
            return Err(CapError::WrongType { cap: vm_cap, expected: "a VM" });
        };
        let (window, _) = self.shadowed_window(vm, ipa).ok_or(CapError::NoShadowedWindow { ipa: ipa.0 })?;
        if visible {
            table.show_range(mem, tlb, window);
        } else {
            table.hide_range(mem, tlb, window);
        }
        Ok(())
    }

    pub fn vm_table(&self, vm: VmId) -> Option<&Stage2Table> {
        match self.objects.get(&ObjectId(vm.0)) {
            Some(Object::Vm { table, .. }) => Some(table),
            _ => None,
        }
    }

    pub fn region(&self, cap: CapId) -> Result<(PhysRange, RegionKind), CapError> {
        match self.object_of(cap)? {
            (_, Object::Region { range, kind, .. }, _) => Ok((*range, *kind)),
            _ => Err(CapError::WrongType { cap, expected: "a memory region" }),
        }
    }

    /// What `ipa` is in the VM: the range, its kind and where it maps (the fault handler
    /// decides between emulation and an abort with this).
    pub fn lookup(&self, vm: VmId, ipa: Ipa) -> Option<IpaRangeInfo> {
        let vm = ObjectId(vm.0);
        self.caps.values().find_map(|c| match c.kind {
            CapKind::Mapping { vm: v, region, ipa: r } if v == vm && r.contains(ipa) => {
                let Some(Object::Region { range, kind, .. }) = self.objects.get(&region) else { return None };
                Some(IpaRangeInfo {
                    range: r,
                    kind: RangeKind::Region(*kind),
                    pa: Some(PhysAddr(range.base + (ipa.0 - r.start().0))),
                    rights: c.rights,
                    shadow: None,
                })
            }
            CapKind::EmulatedWindow { vm: v, ipa: r, device, shadow } if v == vm && r.contains(ipa) => {
                let shadow = shadow.and_then(|o| match self.objects.get(&o) {
                    Some(Object::Region { range, .. }) => Some(*range),
                    _ => None,
                });
                Some(IpaRangeInfo {
                    range: r,
                    kind: RangeKind::Emulated { device },
                    pa: None,
                    rights: c.rights,
                    shadow,
                })
            }
            _ => None,
        })
    }

    pub fn capability_count(&self) -> usize {
        self.caps.len()
    }
}
