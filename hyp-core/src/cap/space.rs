//! The capability space: capabilities, the objects they name, and the operations. Each
//! operation is `decode_*` (every check, no side effect, `&self`) then `invoke_*` (applies
//! what was decoded), seL4's decode/invoke split (CONVENTIONS 6).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use stage2::{Ipa, IpaRange, MappingAttributes, MemoryType, OwnershipState, PhysAddr, Stage2Table, TableFormat, TableMemory, TlbMaintenance, PAGE_SIZE};

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
    Emulated { device: u32 },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpaRangeInfo {
    pub range: IpaRange,
    pub kind: RangeKind,
    /// The physical address the IPA maps to (mapped ranges only).
    pub pa: Option<PhysAddr>,
    pub rights: Rights,
}

pub(super) enum Object {
    Untyped { range: PhysRange, carved: Vec<(PhysRange, ObjectId)> },
    Region { range: PhysRange, kind: RegionKind, untyped: Option<ObjectId> },
    Vm { vmid: u16, table: Stage2Table },
    /// vCPU `index` of VM `vm` (its MPIDR Aff0 in the guest).
    Vcpu { vm: ObjectId, index: u32 },
    Interrupt { intid: u32 },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum CapKind {
    Object(ObjectId),
    Mapping { vm: ObjectId, region: ObjectId, ipa: IpaRange },
    EmulatedWindow { vm: ObjectId, ipa: IpaRange, device: u32 },
    InterruptGrant { vm: ObjectId, interrupt: ObjectId },
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
}

/// A decoded `retype`.
pub struct RetypeOp {
    untyped_cap: CapId,
    untyped: ObjectId,
    range: PhysRange,
    kind: RegionKind,
    rights: Rights,
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
            CapKind::Object(id) => self.objects.get(&id).map(|o| (id, o, c.rights)).ok_or(CapError::NoSuchCapability { cap }),
            _ => Err(CapError::WrongType { cap, expected: "an object" }),
        }
    }

    fn require(cap: CapId, have: Rights, need: Rights, name: &'static str) -> Result<(), CapError> {
        if have.contains(need) { Ok(()) } else { Err(CapError::MissingRight { cap, right: name }) }
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
        if !aligned(range.base, PAGE_SIZE) || !aligned(range.size, PAGE_SIZE) || range.base.checked_add(range.size).is_none() {
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

    pub fn decode_retype(&self, untyped_cap: CapId, kind: RegionKind, size: u64, align: u64) -> Result<RetypeOp, CapError> {
        let (untyped, object, rights) = self.object_of(untyped_cap)?;
        let Object::Untyped { range, carved } = object else {
            return Err(CapError::WrongType { cap: untyped_cap, expected: "untyped memory" });
        };
        Self::require(untyped_cap, rights, Rights::GRANT, "grant")?;
        if kind.is_device() {
            return Err(CapError::WrongType { cap: untyped_cap, expected: "device memory (untyped becomes RAM or shared memory only)" });
        }
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
                return Ok(RetypeOp { untyped_cap, untyped, range: PhysRange { base, size }, kind, rights });
            }
            if let Some(p) = pieces.iter().find(|p| p.base == gap_end) {
                cursor = cursor.max(p.end());
            }
        }
        Err(CapError::OutOfUntyped { size })
    }

    pub fn invoke_retype(&mut self, op: RetypeOp) -> CapId {
        let region = self.new_object(Object::Region { range: op.range, kind: op.kind, untyped: Some(op.untyped) });
        if let Some(Object::Untyped { carved, .. }) = self.objects.get_mut(&op.untyped) {
            carved.push((op.range, region));
        }
        self.new_cap(CapKind::Object(region), op.rights, Some(op.untyped_cap))
    }

    /// Carves `size` bytes aligned to `align` out of the untyped as a region of `kind`.
    pub fn retype(&mut self, untyped_cap: CapId, kind: RegionKind, size: u64, align: u64) -> Result<CapId, CapError> {
        let op = self.decode_retype(untyped_cap, kind, size, align)?;
        Ok(self.invoke_retype(op))
    }

    /// A new VM with empty stage-2 tables and the lowest free VMID.
    pub fn create_vm(&mut self, mem: &mut impl TableMemory) -> Result<CapId, CapError> {
        let used: Vec<u16> = self.objects.values().filter_map(|o| if let Object::Vm { vmid, .. } = o { Some(*vmid) } else { None }).collect();
        let vmid = (1..=255u16).find(|v| !used.contains(v)).ok_or(CapError::NoVmid)?;
        let table = Stage2Table::new(self.format, vmid, mem)?;
        let id = self.new_object(Object::Vm { vmid, table });
        Ok(self.new_cap(CapKind::Object(id), Rights::ALL, None))
    }

    /// A new vCPU of the VM, with the lowest index the VM does not use yet.
    pub fn create_vcpu(&mut self, vm_cap: CapId, max_vcpus: u32) -> Result<CapId, CapError> {
        let (vm, rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, rights, Rights::GRANT, "grant")?;
        let used: Vec<u32> = self.objects.values().filter_map(|o| match o {
            Object::Vcpu { vm: v, index } if *v == vm => Some(*index),
            _ => None,
        }).collect();
        let index = (0..max_vcpus).find(|i| !used.contains(i)).ok_or(CapError::TooManyVcpus { max: max_vcpus })?;
        let id = self.new_object(Object::Vcpu { vm, index });
        Ok(self.new_cap(CapKind::Object(id), Rights::ALL, Some(vm_cap)))
    }

    /// The vCPUs of a VM, by index.
    pub fn vcpu_count(&self, vm: VmId) -> usize {
        self.objects.values().filter(|o| matches!(o, Object::Vcpu { vm: v, .. } if v.0 == vm.0)).count()
    }

    fn vm_ranges(&self, vm: ObjectId) -> impl Iterator<Item = (CapId, IpaRange)> + '_ {
        self.caps.iter().filter_map(move |(id, c)| match c.kind {
            CapKind::Mapping { vm: v, ipa, .. } | CapKind::EmulatedWindow { vm: v, ipa, .. } if v == vm => Some((*id, ipa)),
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
        if !region_rights.contains(rights.without(Rights::GRANT)) {
            return Err(CapError::RightsNotASubset { cap: region_cap });
        }
        if kind.is_device() && rights.contains(Rights::EXECUTE) {
            return Err(CapError::Stage2(stage2::Stage2Error::InvalidPermissions));
        }
        let ipa = IpaRange::new(ipa, range.size).map_err(CapError::Stage2)?;
        self.check_ipa(vm, ipa)?;
        let mapped_elsewhere = self.caps.values().any(|c| matches!(c.kind, CapKind::Mapping { region: r, .. } if r == region));
        let owner = match kind {
            RegionKind::Ram | RegionKind::DeviceMmio if mapped_elsewhere => return Err(CapError::AlreadyMapped { cap: region_cap }),
            RegionKind::Ram | RegionKind::DeviceMmio => OwnershipState::Owned,
            RegionKind::Shared | RegionKind::BankedDevice if mapped_elsewhere => OwnershipState::Borrowed,
            RegionKind::Shared | RegionKind::BankedDevice => OwnershipState::Shared,
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
        })
    }

    /// Maps the decoded region. Fails only when the table memory runs out, and then nothing
    /// changed (stage 2 prepares before it commits).
    pub fn invoke_map(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, op: MapOp) -> Result<CapId, CapError> {
        let Some(Object::Vm { table, .. }) = self.objects.get_mut(&op.vm) else {
            return Err(CapError::WrongType { cap: op.region_cap, expected: "a VM" });
        };
        table.map_range(mem, tlb, op.ipa, op.pa, op.attrs, op.owner)?;
        Ok(self.new_cap(CapKind::Mapping { vm: op.vm, region: op.region, ipa: op.ipa }, op.rights, Some(op.region_cap)))
    }

    /// Maps the whole region of `region_cap` into the VM at `ipa` with `rights`.
    pub fn map(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, vm_cap: CapId, region_cap: CapId, ipa: Ipa, rights: Rights) -> Result<CapId, CapError> {
        let op = self.decode_map(vm_cap, region_cap, ipa, rights)?;
        self.invoke_map(mem, tlb, op)
    }

    /// An IPA range of the VM whose accesses trap to device model `device`.
    pub fn add_emulated_window(&mut self, vm_cap: CapId, ipa: IpaRange, device: u32) -> Result<CapId, CapError> {
        let (vm, rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, rights, Rights::GRANT, "grant")?;
        self.check_ipa(vm, ipa)?;
        Ok(self.new_cap(CapKind::EmulatedWindow { vm, ipa, device }, Rights::RW, Some(vm_cap)))
    }

    pub fn grant_interrupt(&mut self, vm_cap: CapId, interrupt_cap: CapId) -> Result<CapId, CapError> {
        let (vm, vm_rights) = self.vm_object(vm_cap)?;
        Self::require(vm_cap, vm_rights, Rights::GRANT, "grant")?;
        let (interrupt, object, rights) = self.object_of(interrupt_cap)?;
        let Object::Interrupt { intid } = *object else {
            return Err(CapError::WrongType { cap: interrupt_cap, expected: "a physical interrupt" });
        };
        Self::require(interrupt_cap, rights, Rights::GRANT, "grant")?;
        if self.caps.values().any(|c| matches!(c.kind, CapKind::InterruptGrant { interrupt: i, .. } if i == interrupt)) {
            return Err(CapError::InterruptAlreadyGranted { intid });
        }
        Ok(self.new_cap(CapKind::InterruptGrant { vm, interrupt }, Rights::RW, Some(interrupt_cap)))
    }

    /// A copy of the object capability `cap` with `rights`, a subset of its rights.
    /// Mappings, windows and grants are not copied: each exists once, so deleting it undoes
    /// exactly what it did.
    pub fn derive(&mut self, cap: CapId, rights: Rights) -> Result<CapId, CapError> {
        let c = *self.cap(cap)?;
        if !matches!(c.kind, CapKind::Object(_)) {
            return Err(CapError::WrongType { cap, expected: "an object (mappings, windows and grants are not copied)" });
        }
        if !c.rights.contains(rights) {
            return Err(CapError::RightsNotASubset { cap });
        }
        Ok(self.new_cap(c.kind, rights, Some(cap)))
    }

    fn children(&self, cap: CapId) -> Vec<CapId> {
        self.caps.iter().filter(|(_, c)| c.parent == Some(cap)).map(|(id, _)| *id).collect()
    }

    /// Deletes everything derived from `cap` (with its mappings and grants); `cap` stays.
    pub fn revoke(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, cap: CapId) -> Result<(), CapError> {
        self.cap(cap)?;
        for child in self.children(cap) {
            self.delete(mem, tlb, child)?;
        }
        Ok(())
    }

    /// Revokes `cap`, then removes it and what it did: a mapping leaves the VM's tables, a
    /// grant ends; the last capability to an object destroys it (a region's memory returns to
    /// its untyped; a VM's tables are freed).
    pub fn delete(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, cap: CapId) -> Result<(), CapError> {
        self.revoke(mem, tlb, cap)?;
        let Some(c) = self.caps.remove(&cap) else { return Ok(()) };
        match c.kind {
            CapKind::Mapping { vm, ipa, .. } => {
                if let Some(Object::Vm { table, .. }) = self.objects.get_mut(&vm) {
                    // The mapping's range holds only its own blocks: no split, no allocation.
                    table.unmap_range(mem, tlb, ipa)?;
                }
            }
            CapKind::EmulatedWindow { .. } | CapKind::InterruptGrant { .. } => {}
            CapKind::Object(object) => {
                let still_named = self.caps.values().any(|c| c.kind == CapKind::Object(object));
                if !still_named {
                    self.destroy_object(mem, tlb, object)?;
                }
            }
        }
        Ok(())
    }

    fn destroy_object(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, object: ObjectId) -> Result<(), CapError> {
        // Whatever else refers to the object goes first: mappings of a region, everything
        // of a VM, grants of an interrupt.
        let dependents: Vec<CapId> = self
            .caps
            .iter()
            .filter(|(_, c)| match c.kind {
                CapKind::Mapping { vm, region, .. } => vm == object || region == object,
                CapKind::EmulatedWindow { vm, .. } => vm == object,
                CapKind::InterruptGrant { vm, interrupt } => vm == object || interrupt == object,
                CapKind::Object(_) => false,
            })
            .map(|(id, _)| *id)
            .collect();
        for cap in dependents {
            self.delete(mem, tlb, cap)?;
        }
        // A VM's vCPUs go with it, whoever holds their capabilities.
        let vcpus: Vec<ObjectId> =
            self.objects.iter().filter(|(_, o)| matches!(o, Object::Vcpu { vm, .. } if *vm == object)).map(|(id, _)| *id).collect();
        for vcpu in vcpus {
            let caps: Vec<CapId> = self.caps.iter().filter(|(_, c)| c.kind == CapKind::Object(vcpu)).map(|(id, _)| *id).collect();
            for cap in caps {
                self.caps.remove(&cap);
            }
            self.objects.remove(&vcpu);
        }
        match self.objects.remove(&object) {
            Some(Object::Region { untyped: Some(u), .. }) => {
                if let Some(Object::Untyped { carved, .. }) = self.objects.get_mut(&u) {
                    carved.retain(|(_, r)| *r != object);
                }
            }
            Some(Object::Vm { vmid, table }) => {
                table.destroy(mem);
                tlb.invalidate_vmid(vmid);
            }
            _ => {}
        }
        Ok(())
    }

    /// Ends a VM: its mappings, windows and grants, the private RAM regions mapped into it
    /// (their memory returns to untyped), and the VM with its tables.
    pub fn destroy_vm(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, vm_cap: CapId) -> Result<(), CapError> {
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
        let region_caps: Vec<CapId> =
            self.caps.iter().filter(|(_, c)| matches!(c.kind, CapKind::Object(o) if private.contains(&o))).map(|(id, _)| *id).collect();
        for cap in region_caps {
            self.delete(mem, tlb, cap)?;
        }
        let vm_caps: Vec<CapId> = self.caps.iter().filter(|(_, c)| c.kind == CapKind::Object(vm)).map(|(id, _)| *id).collect();
        for cap in vm_caps {
            self.delete(mem, tlb, cap)?;
        }
        Ok(())
    }

    // Queries.

    pub fn vm_id(&self, vm_cap: CapId) -> Result<VmId, CapError> {
        self.vm_object(vm_cap).map(|(id, _)| VmId(id.0))
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
                Some(IpaRangeInfo { range: r, kind: RangeKind::Region(*kind), pa: Some(PhysAddr(range.base + (ipa.0 - r.start().0))), rights: c.rights })
            }
            CapKind::EmulatedWindow { vm: v, ipa: r, device } if v == vm && r.contains(ipa) => {
                Some(IpaRangeInfo { range: r, kind: RangeKind::Emulated { device }, pa: None, rights: c.rights })
            }
            _ => None,
        })
    }

    pub fn capability_count(&self) -> usize {
        self.caps.len()
    }
}
