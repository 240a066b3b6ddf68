//! When a CPU invalidates its TLB before a vCPU enters (crate::tlb, docs/capability-model.md
//! "VMIDs and the TLB"): the corner cases one by one, then a model of the CPUs' TLBs driven
//! by random sequences of entries, resets, destructions and creations with two VMIDs (so
//! VMIDs are reused), which checks the security rule after every entry (no vCPU enters
//! where the TLB holds a stage-1 entry of its VMID that another VM, another vCPU or the VM
//! before its reset made) and that no CPU invalidates when nothing requires it.

use std::collections::BTreeSet;
use std::vec::Vec;

use proptest::prelude::*;

use crate::tlb::{OnEntry, Stage1Contexts};

use OnEntry::{InvalidateStage1 as Invalidate, Nothing};

#[test]
fn a_vcpu_entering_a_cpu_the_vm_never_used_invalidates_nothing() {
    let vm = Stage1Contexts::new();
    assert_eq!(vm.enter(0, 0), Nothing, "a new VM's VMID was invalidated everywhere before it was given");
    assert_eq!(vm.enter(1, 1), Nothing);
}

#[test]
fn two_vcpus_of_one_vm_alternating_on_one_cpu_invalidate_at_each_switch() {
    let vm = Stage1Contexts::new();
    assert_eq!(vm.enter(0, 0), Nothing);
    assert_eq!(vm.enter(0, 1), Invalidate, "vCPU 0's translations are in the TLB under the same VMID");
    assert_eq!(vm.enter(0, 0), Invalidate, "and now vCPU 1's");
    assert_eq!(vm.enter(0, 0), Nothing, "its own turn again: nothing of another vCPU came in between");
    assert_eq!(vm.enter(0, 1), Invalidate);
}

#[test]
fn a_vcpu_migrating_invalidates_only_where_another_vcpu_of_its_vm_ran() {
    let vm = Stage1Contexts::new();
    assert_eq!(vm.enter(0, 0), Nothing);
    assert_eq!(vm.enter(1, 0), Nothing, "CPU 1 holds nothing of the VM");
    assert_eq!(vm.enter(0, 0), Nothing, "back on CPU 0, which only it used");
    assert_eq!(vm.enter(2, 1), Nothing);
    assert_eq!(vm.enter(2, 0), Invalidate, "vCPU 1 ran on CPU 2");
    assert_eq!(vm.enter(1, 1), Invalidate, "vCPU 0 ran on CPU 1");
}

#[test]
fn two_vms_sharing_a_cpu_never_invalidate() {
    // Distinct VMIDs: neither VM can hit the other's entries.
    let (a, b) = (Stage1Contexts::new(), Stage1Contexts::new());
    for _ in 0..3 {
        assert_eq!(a.enter(0, 0), Nothing);
        assert_eq!(b.enter(0, 0), Nothing);
        assert_eq!(b.enter(0, 0), Nothing);
    }
}

#[test]
fn a_vmid_reused_after_its_vm_is_destroyed_starts_clean() {
    // The old VM's entries went with invalidate_vmid when it was destroyed (V1), on every
    // CPU: the new VM's record starts empty, whatever the old one held.
    let old = Stage1Contexts::new();
    assert_eq!(old.enter(0, 1), Nothing);
    assert_eq!(old.enter(1, 0), Nothing);
    let new = Stage1Contexts::new();
    assert_eq!(new.enter(0, 0), Nothing);
    assert_eq!(new.enter(1, 1), Nothing);
}

#[test]
fn after_a_reset_each_cpu_that_held_the_vm_invalidates_once() {
    let vm = Stage1Contexts::new();
    assert_eq!(vm.enter(0, 0), Nothing);
    assert_eq!(vm.enter(1, 1), Nothing);
    vm.forget();
    assert_eq!(vm.enter(0, 0), Invalidate, "the same vCPU, but the last boot's translations");
    assert_eq!(vm.enter(0, 0), Nothing);
    assert_eq!(vm.enter(1, 1), Invalidate);
    assert_eq!(vm.enter(2, 0), Nothing, "CPU 2 never held anything of the VM");
}

#[test]
fn a_cpu_beyond_the_table_always_invalidates() {
    let vm = Stage1Contexts::new();
    assert_eq!(vm.enter(hyp_core::platform::MAX_CPUS, 0), Invalidate);
}

const CPUS: usize = 3;
const VMIDS: u16 = 2;
const SLOTS: usize = 3;
const VCPUS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    /// vCPU `vcpu` of the VM in `slot` enters CPU `cpu` (off any other CPU first).
    Enter { cpu: usize, slot: usize, vcpu: usize },
    /// The vCPU on `cpu` leaves it (descheduled).
    Leave { cpu: usize },
    /// The guest on `cpu` invalidates its VMID's stage-1 entries (TLBI VMALLE1, broadcast by
    /// HCR_EL2.FB).
    GuestInvalidates { cpu: usize },
    /// SYSTEM_RESET of the VM in `slot`: its vCPUs stop, it boots again.
    Reset { slot: usize },
    /// The VM in `slot` ends and is destroyed: its VMID is invalidated on every CPU and free.
    Destroy { slot: usize },
    /// A VM is created in `slot` with the lowest free VMID.
    Create { slot: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..CPUS, 0..SLOTS, 0..VCPUS).prop_map(|(cpu, slot, vcpu)| Op::Enter { cpu, slot, vcpu }),
        2 => (0..CPUS).prop_map(|cpu| Op::Leave { cpu }),
        1 => (0..CPUS).prop_map(|cpu| Op::GuestInvalidates { cpu }),
        1 => (0..SLOTS).prop_map(|slot| Op::Reset { slot }),
        1 => (0..SLOTS).prop_map(|slot| Op::Destroy { slot }),
        2 => (0..SLOTS).prop_map(|slot| Op::Create { slot }),
    ]
}

/// Who made a TLB entry: which VM (numbered at creation, never reused), which boot of it,
/// which vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Context {
    vm: usize,
    boot: usize,
    vcpu: usize,
}

struct ModelVm {
    number: usize,
    vmid: u16,
    boot: usize,
    contexts: Stage1Contexts,
}

#[derive(Default)]
struct Model {
    vms: [Option<ModelVm>; SLOTS],
    created: usize,
    /// Per CPU: the stage-1 entries its TLB holds, by VMID and maker.
    tlb: [BTreeSet<(u16, Context)>; CPUS],
    /// Per CPU: the VM slot and vCPU running there.
    running: [Option<(usize, usize)>; CPUS],
    invalidations: usize,
    /// Whether a guest's own maintenance removed entries: the record may then say "another
    /// vCPU's" where nothing is left, so the decision is checked for safety only.
    guest_maintenance: bool,
}

impl Model {
    fn stop_vm(&mut self, slot: usize) {
        self.running.iter_mut().filter(|r| r.is_some_and(|(s, _)| s == slot)).for_each(|r| *r = None);
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Enter { cpu, slot, vcpu } => {
                let Some(vm) = &self.vms[slot] else { return Ok(()) };
                // One vCPU runs on one CPU at a time: it leaves wherever it is.
                self.running.iter_mut().filter(|r| **r == Some((slot, vcpu))).for_each(|r| *r = None);
                let me = Context { vm: vm.number, boot: vm.boot, vcpu };
                let foreign = self.tlb[cpu].iter().any(|&(vmid, who)| vmid == vm.vmid && who != me);
                let decision = vm.contexts.enter(cpu, vcpu);
                if decision == Invalidate {
                    self.invalidations += 1;
                    self.tlb[cpu].retain(|&(vmid, _)| vmid != vm.vmid);
                }
                let left: Vec<_> =
                    self.tlb[cpu].iter().filter(|&&(vmid, who)| vmid == vm.vmid && who != me).copied().collect();
                prop_assert!(left.is_empty(), "{me:?} enters CPU {cpu} over {left:?}");
                if !self.guest_maintenance {
                    prop_assert_eq!(decision == Invalidate, foreign, "{:?} on CPU {}: needless or missing", me, cpu);
                }
                self.running[cpu] = Some((slot, vcpu));
                // The guest runs: it caches translations.
                self.tlb[cpu].insert((vm.vmid, me));
            }
            Op::Leave { cpu } => self.running[cpu] = None,
            Op::GuestInvalidates { cpu } => {
                if let Some((slot, _)) = self.running[cpu] {
                    let vmid = self.vms[slot].as_ref().map(|v| v.vmid);
                    for tlb in &mut self.tlb {
                        tlb.retain(|&(v, _)| Some(v) != vmid);
                    }
                    self.guest_maintenance = true;
                }
            }
            Op::Reset { slot } => {
                self.stop_vm(slot);
                if let Some(vm) = &mut self.vms[slot] {
                    vm.boot += 1;
                    vm.contexts.forget();
                }
            }
            Op::Destroy { slot } => {
                self.stop_vm(slot);
                if let Some(vm) = self.vms[slot].take() {
                    // invalidate_vmid: TLBI VMALLS12E1IS, every CPU.
                    for tlb in &mut self.tlb {
                        tlb.retain(|&(v, _)| v != vm.vmid);
                    }
                }
            }
            Op::Create { slot } => {
                if self.vms[slot].is_some() {
                    return Ok(());
                }
                let used: Vec<u16> = self.vms.iter().flatten().map(|v| v.vmid).collect();
                let Some(vmid) = (1..=VMIDS).find(|v| !used.contains(v)) else { return Ok(()) };
                self.created += 1;
                self.vms[slot] = Some(ModelVm { number: self.created, vmid, boot: 0, contexts: Stage1Contexts::new() });
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn no_vcpu_ever_enters_over_a_stage_1_entry_it_did_not_make(
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut model = Model::default();
        // Two VMs to start with, as at boot.
        model.apply(&Op::Create { slot: 0 })?;
        model.apply(&Op::Create { slot: 1 })?;
        for op in &ops {
            model.apply(op)?;
        }
    }
}

#[test]
fn the_model_reuses_vmids_and_invalidates() {
    // The model's searches above reach the cases that matter: a VMID given to a second VM
    // while a CPU held the first one's entries, and invalidations.
    let mut model = Model::default();
    let ops = [
        Op::Create { slot: 0 },
        Op::Enter { cpu: 0, slot: 0, vcpu: 0 },
        Op::Enter { cpu: 0, slot: 0, vcpu: 1 },
        Op::Destroy { slot: 0 },
        Op::Create { slot: 1 },
        Op::Enter { cpu: 0, slot: 1, vcpu: 0 },
    ];
    for op in &ops {
        model.apply(op).unwrap();
    }
    assert_eq!(model.vms[1].as_ref().map(|v| v.vmid), Some(1), "the destroyed VM's VMID");
    assert_eq!(model.invalidations, 1, "vCPU 1 over vCPU 0; none for the new VM");
}
