//! The invariants of docs/capability-model.md as executable predicates over the real state
//! (the capability table, the objects, and the stage-2 tables the VMs really have).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use stage2::{MappingAttributes, MemoryType, TableMemory};

use super::space::{CapKind, Object, ObjectId, RegionKind};
use super::{CapSpace, Rights};

/// Which invariant failed, and how.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

type Check = Result<(), Violation>;

fn fail(invariant: &'static str, detail: String) -> Check {
    Err(Violation { invariant, detail })
}

/// I1: a derived capability has no right its parent lacks.
pub fn rights_only_shrink(s: &CapSpace) -> Check {
    for (id, c) in &s.caps {
        if let Some(p) = c.parent.and_then(|p| s.caps.get(&p)) {
            // A mapping's rights are bounded by its region (I9) but never carry GRANT.
            if !p.rights.contains(c.rights.without(Rights::GRANT))
                || (c.rights.contains(Rights::GRANT) && !p.rights.contains(Rights::GRANT))
            {
                return fail(
                    "I1",
                    format!("cap {} has rights {:?} beyond its parent's {:?}", id.0, c.rights, p.rights),
                );
            }
        }
    }
    Ok(())
}

/// I2: every capability's parent exists.
pub fn no_orphans(s: &CapSpace) -> Check {
    for (id, c) in &s.caps {
        if let Some(p) = c.parent {
            if !s.caps.contains_key(&p) {
                return fail("I2", format!("cap {} outlived its parent {}", id.0, p.0));
            }
        }
        let named = match c.kind {
            CapKind::Object(o) => [Some(o), None],
            CapKind::Mapping { vm, region, .. } => [Some(vm), Some(region)],
            CapKind::EmulatedWindow { vm, shadow, .. } => [Some(vm), shadow],
            CapKind::InterruptGrant { vm, interrupt } => [Some(vm), Some(interrupt)],
        };
        if let Some(o) = named.into_iter().flatten().find(|o| !s.objects.contains_key(o)) {
            return fail("I2", format!("cap {} names object {}, which no longer exists", id.0, o.0));
        }
    }
    Ok(())
}

/// I3: regions carved from an untyped lie inside it and are pairwise disjoint; every carved
/// region exists and says it came from that untyped.
pub fn untyped_carved_once(s: &CapSpace) -> Check {
    for (uid, o) in &s.objects {
        let Object::Untyped { range, carved } = o else { continue };
        for (i, (r, region)) in carved.iter().enumerate() {
            if r.base < range.base || r.end() > range.end() {
                return fail("I3", format!("region {:#x}+{:#x} outside its untyped", r.base, r.size));
            }
            if carved[i + 1..].iter().any(|(q, _)| q.overlaps(r)) {
                return fail("I3", format!("two regions overlap at {:#x}", r.base));
            }
            match s.objects.get(region) {
                Some(Object::Region { range: rr, untyped: Some(u), .. }) if rr == r && u == uid => {}
                _ => return fail("I3", format!("carved piece {:#x} has no matching region", r.base)),
            }
        }
    }
    Ok(())
}

fn mapped_ranges(s: &CapSpace, mem: &impl TableMemory) -> Vec<(ObjectId, u64, u64)> {
    let mut out = Vec::new();
    for (id, o) in &s.objects {
        if let Object::Vm { table, .. } = o {
            table.for_each_leaf(mem, |l| out.push((*id, l.pa.0, l.pa.0 + l.size)));
        }
    }
    out
}

/// I4: a RAM region is mapped into at most one VM, and two VMs' tables share frames only
/// inside shared regions.
pub fn private_ram_is_private(s: &CapSpace, mem: &impl TableMemory) -> Check {
    let mut mapped: Vec<ObjectId> = Vec::new();
    for c in s.caps.values() {
        if let CapKind::Mapping { region, .. } = c.kind {
            let private = matches!(
                s.objects.get(&region),
                Some(Object::Region { kind: RegionKind::Ram | RegionKind::DeviceMmio, .. })
            );
            if private && mapped.contains(&region) {
                return fail("I4", format!("private region {} mapped twice", region.0));
            }
            mapped.push(region);
        }
    }
    let ranges = mapped_ranges(s, mem);
    for (i, (vm_a, a0, a1)) in ranges.iter().enumerate() {
        for (vm_b, b0, b1) in &ranges[i + 1..] {
            if vm_a != vm_b && a0 < b1 && b0 < a1 {
                // The whole overlap must lie in one region that may be shared.
                let (lo, hi) = (*a0.max(b0), *a1.min(b1));
                let shared = s.objects.values().any(|o| {
                    matches!(o, Object::Region { range, kind: RegionKind::Shared | RegionKind::BankedDevice, .. } if range.base <= lo && hi <= range.end())
                });
                if !shared {
                    return fail("I4", format!("VMs {} and {} both map {lo:#x}..{hi:#x}", vm_a.0, vm_b.0));
                }
            }
        }
    }
    Ok(())
}

/// I5: each VM's real stage-2 tables map exactly its mapping capabilities, plus each of its
/// shadowed windows' shadow (hidden or shown) at the window, read-only Device memory.
pub fn tables_refine_capabilities(s: &CapSpace, mem: &impl TableMemory) -> Check {
    for (vm_id, o) in &s.objects {
        let Object::Vm { table, .. } = o else { continue };
        // Expected: (IPA start, IPA end, PA start, memory type, permissions), merged into runs.
        let mut expected = Vec::new();
        for c in s.caps.values() {
            match c.kind {
                CapKind::Mapping { vm, region, ipa } if vm == *vm_id => {
                    let Some(Object::Region { range, kind, .. }) = s.objects.get(&region) else { continue };
                    let memory = if kind.is_device() { MemoryType::DeviceNGnRE } else { MemoryType::NormalWriteBack };
                    expected.push((ipa.start().0, ipa.end(), range.base, memory, c.rights.permissions()));
                }
                CapKind::EmulatedWindow { vm, ipa, shadow: Some(shadow), .. } if vm == *vm_id => {
                    let Some(Object::Region { range, .. }) = s.objects.get(&shadow) else { continue };
                    let MappingAttributes { memory, permissions } = MappingAttributes::READ_ONLY_DEVICE;
                    expected.push((ipa.start().0, ipa.end(), range.base, memory, permissions));
                }
                _ => {}
            }
        }
        let mut real = Vec::new();
        table.for_each_leaf(mem, |l| {
            real.push((l.ipa.0, l.ipa.0 + l.size, l.pa.0, l.attrs.memory, l.attrs.permissions))
        });
        if runs(expected.clone()) != runs(real.clone()) {
            return fail(
                "I5",
                format!("VM {}: tables map {:x?}, capabilities say {:x?}", vm_id.0, runs(real), runs(expected)),
            );
        }
    }
    Ok(())
}

type Run = (u64, u64, u64, MemoryType, stage2::Permissions);

fn runs(mut v: Vec<Run>) -> Vec<Run> {
    v.sort_by_key(|r| r.0);
    let mut out: Vec<Run> = Vec::new();
    for r in v {
        match out.last_mut() {
            Some(l) if l.1 == r.0 && l.2 + (l.1 - l.0) == r.2 && l.3 == r.3 && l.4 == r.4 => l.1 = r.1,
            _ => out.push(r),
        }
    }
    out
}

/// I6: every mapped physical address lies in a memory region (so never in hypervisor
/// memory, which is in no region).
pub fn only_region_memory_is_mapped(s: &CapSpace, mem: &impl TableMemory) -> Check {
    for (vm, start, end) in mapped_ranges(s, mem) {
        let inside = s
            .objects
            .values()
            .any(|o| matches!(o, Object::Region { range, .. } if range.base <= start && end <= range.end()));
        if !inside {
            return fail("I6", format!("VM {} maps {start:#x}..{end:#x}, which is in no region", vm.0));
        }
    }
    Ok(())
}

/// I7: an interrupt is granted to at most one VM.
pub fn interrupts_have_one_owner(s: &CapSpace) -> Check {
    let grants: Vec<ObjectId> = s
        .caps
        .values()
        .filter_map(|c| if let CapKind::InterruptGrant { interrupt, .. } = c.kind { Some(interrupt) } else { None })
        .collect();
    for (i, g) in grants.iter().enumerate() {
        if grants[i + 1..].contains(g) {
            return fail("I7", format!("interrupt object {} granted twice", g.0));
        }
    }
    Ok(())
}

/// I8: a VM's IPA ranges are disjoint and within its IPA size.
pub fn ipa_ranges_disjoint(s: &CapSpace) -> Check {
    let bits = s.format.geometry().map(|g| g.ipa_bits).unwrap_or(0);
    let mut ranges: Vec<(ObjectId, stage2::IpaRange)> = Vec::new();
    for c in s.caps.values() {
        if let CapKind::Mapping { vm, ipa, .. } | CapKind::EmulatedWindow { vm, ipa, .. } = c.kind {
            if ipa.end() > 1 << bits {
                return fail("I8", format!("VM {} range ends at {:#x}", vm.0, ipa.end()));
            }
            if let Some((_, r)) = ranges.iter().find(|(v, r)| *v == vm && r.overlaps(&ipa)) {
                return fail(
                    "I8",
                    format!("VM {} has overlapping ranges at {:#x} and {:#x}", vm.0, r.start().0, ipa.start().0),
                );
            }
            ranges.push((vm, ipa));
        }
    }
    Ok(())
}

/// I9: a mapping's rights are within its region capability's; device memory never executes.
pub fn mapping_rights_bounded(s: &CapSpace) -> Check {
    for (id, c) in &s.caps {
        if let CapKind::Mapping { region, .. } = c.kind {
            if c.rights.contains(Rights::GRANT) {
                return fail("I9", format!("mapping {} carries GRANT", id.0));
            }
            if matches!(s.objects.get(&region), Some(Object::Region { kind, .. }) if kind.is_device())
                && c.rights.contains(Rights::EXECUTE)
            {
                return fail("I9", format!("mapping {} executes device memory", id.0));
            }
        }
    }
    Ok(())
}

/// I11: every vCPU belongs to a live VM, and a VM's vCPU indices are unique.
pub fn vcpus_belong_to_live_vms(s: &CapSpace) -> Check {
    let vcpus: Vec<(ObjectId, u32)> = s
        .objects
        .values()
        .filter_map(|o| if let Object::Vcpu { vm, index } = o { Some((*vm, *index)) } else { None })
        .collect();
    for (i, (vm, index)) in vcpus.iter().enumerate() {
        if !matches!(s.objects.get(vm), Some(Object::Vm { .. })) {
            return fail("I11", format!("vCPU {index} outlived its VM {}", vm.0));
        }
        if vcpus[i + 1..].contains(&(*vm, *index)) {
            return fail("I11", format!("VM {} has two vCPUs {index}", vm.0));
        }
    }
    Ok(())
}

/// I10: VMIDs are unique.
pub fn vmids_unique(s: &CapSpace) -> Check {
    let vmids: Vec<u16> =
        s.objects.values().filter_map(|o| if let Object::Vm { vmid, .. } = o { Some(*vmid) } else { None }).collect();
    for (i, v) in vmids.iter().enumerate() {
        if vmids[i + 1..].contains(v) {
            return fail("I10", format!("VMID {v} used twice"));
        }
    }
    Ok(())
}

/// I12: in an identity-mapped VM every RAM and shared region is mapped at IPA = PA.
pub fn identity_vms_map_memory_at_its_address(s: &CapSpace) -> Check {
    for (id, c) in &s.caps {
        let CapKind::Mapping { vm, region, ipa } = c.kind else { continue };
        let identity = matches!(s.objects.get(&vm), Some(Object::Vm { identity: true, .. }));
        let Some(Object::Region { range, kind, .. }) = s.objects.get(&region) else { continue };
        if identity && !kind.is_device() && ipa.start().0 != range.base {
            return fail(
                "I12",
                format!(
                    "mapping cap {} puts PA {:#x} at IPA {:#x} in identity-mapped VM object {}",
                    id.0,
                    range.base,
                    ipa.start().0,
                    vm.0
                ),
            );
        }
    }
    Ok(())
}

/// I13: a leaf present but invalid to the hardware is either pending (zeroed on first
/// touch), in a `Ram` region mapped into a translated VM, so the only memory a VM reaches
/// through a first-touch fault is its own private RAM, which the hypervisor zeroes then; or
/// a hidden shadow (read-only Device), in one of the VM's shadowed windows.
pub fn only_private_ram_is_pending(s: &CapSpace, mem: &impl TableMemory) -> Check {
    for (vm_id, o) in &s.objects {
        let Object::Vm { table, identity, .. } = o else { continue };
        let mut stray = None;
        table.for_each_leaf(mem, |l| {
            if !l.pending || stray.is_some() {
                return;
            }
            if l.is_hidden() {
                let in_a_shadowed_window = s.caps.values().any(|c| {
                    matches!(c.kind, CapKind::EmulatedWindow { vm, ipa, shadow: Some(_), .. }
                        if vm == *vm_id && ipa.contains(l.ipa))
                });
                if !in_a_shadowed_window {
                    stray = Some(l.ipa.0);
                }
                return;
            }
            let in_private_ram = !identity
                && s.caps.values().any(|c| match c.kind {
                    CapKind::Mapping { vm, region, ipa } if vm == *vm_id && ipa.contains(l.ipa) => {
                        matches!(s.objects.get(&region), Some(Object::Region { kind: RegionKind::Ram, .. }))
                    }
                    _ => false,
                });
            if !in_private_ram {
                stray = Some(l.ipa.0);
            }
        });
        if let Some(ipa) = stray {
            return fail(
                "I13",
                format!(
                    "VM {}: IPA {ipa:#x} is pending but neither private RAM of a translated VM nor a window's shadow",
                    vm_id.0
                ),
            );
        }
    }
    Ok(())
}

/// I14: a `Shadow` region is mapped only at its own window, into that window's VM,
/// read-only Device memory, never executable, and by nothing else; it goes with its window.
pub fn shadows_stay_at_their_window(s: &CapSpace, mem: &impl TableMemory) -> Check {
    // Every shadow: one window names it, of its size, and one capability it never shares.
    let mut shadows = Vec::new();
    for (id, o) in &s.objects {
        let Object::Region { range, kind: RegionKind::Shadow, .. } = o else { continue };
        let windows: Vec<(ObjectId, stage2::IpaRange)> = s
            .caps
            .values()
            .filter_map(|c| match c.kind {
                CapKind::EmulatedWindow { vm, ipa, shadow: Some(sh), .. } if sh == *id => Some((vm, ipa)),
                _ => None,
            })
            .collect();
        let [(vm, window)] = windows[..] else {
            return fail("I14", format!("shadow region {} is the shadow of {} windows, not one", id.0, windows.len()));
        };
        if window.size() != range.size {
            return fail(
                "I14",
                format!("shadow region {} has {:#x} bytes, its window {:#x}", id.0, range.size, window.size()),
            );
        }
        let own = s.caps.values().filter(|c| c.kind == CapKind::Object(*id)).count();
        if own != 1 {
            return fail("I14", format!("shadow region {} has {own} capabilities, not one", id.0));
        }
        if s.caps.values().any(|c| matches!(c.kind, CapKind::Mapping { region, .. } if region == *id)) {
            return fail("I14", format!("shadow region {} is mapped by a mapping capability", id.0));
        }
        shadows.push((*range, vm, window));
    }
    // Every window's shadow is a shadow region.
    for (id, c) in &s.caps {
        if let CapKind::EmulatedWindow { shadow: Some(sh), .. } = c.kind {
            if !matches!(s.objects.get(&sh), Some(Object::Region { kind: RegionKind::Shadow, .. })) {
                return fail(
                    "I14",
                    format!("window cap {} has object {} as its shadow, not a shadow region", id.0, sh.0),
                );
            }
        }
    }
    if shadows.is_empty() {
        return Ok(()); // no shadow memory for a table to map (and a walk less per state)
    }
    // In the tables: each leaf over a shadow's memory lies in its window, in its VM, at the
    // window's offset, read-only Device, never executable; and the window is mapped whole.
    for (vm_id, o) in &s.objects {
        let Object::Vm { table, .. } = o else { continue };
        let mut wrong = None;
        let mut covered = alloc::vec![0u64; shadows.len()];
        table.for_each_leaf(mem, |l| {
            let (pa, end) = (l.pa.0, l.pa.0 + l.size);
            for (i, (range, vm, window)) in shadows.iter().enumerate() {
                if !(pa < range.end() && range.base < end) {
                    continue;
                }
                let at_its_window = vm == vm_id
                    && window.start().0 <= l.ipa.0
                    && l.ipa.0 + l.size <= window.end()
                    && pa.checked_sub(range.base) == Some(l.ipa.0 - window.start().0);
                if !at_its_window || l.attrs != MappingAttributes::READ_ONLY_DEVICE {
                    wrong.get_or_insert((l.ipa.0, pa, l.attrs));
                } else {
                    covered[i] += l.size;
                }
            }
        });
        if let Some((ipa, pa, attrs)) = wrong {
            return fail(
                "I14",
                format!(
                    "VM {} maps shadow memory {pa:#x} at IPA {ipa:#x} ({attrs:?}), not as its window's shadow",
                    vm_id.0
                ),
            );
        }
        for ((range, vm, window), bytes) in shadows.iter().zip(covered) {
            if vm == vm_id && bytes != range.size {
                return fail(
                    "I14",
                    format!(
                        "VM {}: window {:#x} maps {bytes:#x} of its shadow's {:#x} bytes",
                        vm.0,
                        window.start().0,
                        range.size
                    ),
                );
            }
        }
    }
    Ok(())
}

pub fn check_all(s: &CapSpace, mem: &impl TableMemory) -> Check {
    rights_only_shrink(s)?;
    no_orphans(s)?;
    untyped_carved_once(s)?;
    private_ram_is_private(s, mem)?;
    tables_refine_capabilities(s, mem)?;
    only_region_memory_is_mapped(s, mem)?;
    interrupts_have_one_owner(s)?;
    ipa_ranges_disjoint(s)?;
    mapping_rights_bounded(s)?;
    vmids_unique(s)?;
    vcpus_belong_to_live_vms(s)?;
    identity_vms_map_memory_at_its_address(s)?;
    only_private_ram_is_pending(s, mem)?;
    shadows_stay_at_their_window(s, mem)
}
