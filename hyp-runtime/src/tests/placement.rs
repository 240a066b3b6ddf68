//! Where vCPUs go: the manifest's CPUs, shared or pinned; VMs without `cpus` on the CPUs no
//! VM names, every VM's vCPU 0 first and vm0 on the boot CPU.

use sched::Policy;

use super::spec;
use crate::placement::{place_vcpus, Home, PlacementError};
use crate::scheduling::vcpu_ref;

const TICKS_PER_US: u64 = 62;

fn homes(vms: &[hyp_core::bundle::VmSpec<'static>], boot: usize, cpus: usize) -> Result<Vec<Home>, PlacementError> {
    place_vcpus(vms, boot, cpus, |c| c < cpus, TICKS_PER_US)
}

#[test]
fn vms_without_cpus_get_a_cpu_each_vcpu_zero_first_and_vm0_on_the_boot_cpu() {
    let vms = [spec("a", 2, None, false), spec("b", 2, None, false)];
    let placed = homes(&vms, 2, 4).unwrap();
    let cpu_of = |vm, vcpu| placed.iter().find(|h| h.vcpu == vcpu_ref(vm, vcpu)).map(|h| (h.cpu, h.policy));
    assert_eq!(cpu_of(0, 0), Some((2, Policy::Pinned)), "vm0's vCPU 0 on the boot CPU");
    assert_eq!(cpu_of(1, 0), Some((0, Policy::Pinned)), "then every VM's vCPU 0");
    assert_eq!(cpu_of(0, 1), Some((1, Policy::Pinned)));
    assert_eq!(cpu_of(1, 1), Some((3, Policy::Pinned)));
    assert_eq!(placed.len(), 4);
}

#[test]
fn named_cpus_are_kept_and_shared_vcpus_get_their_slice_in_counter_ticks() {
    let vms = [spec("shared", 2, Some(&[1, 1]), true), spec("free", 1, None, false)];
    let placed = homes(&vms, 0, 2).unwrap();
    let slice = u64::from(hyp_core::manifest::DEFAULT_SLICE_US) * TICKS_PER_US;
    assert_eq!(
        placed,
        vec![
            Home { vcpu: vcpu_ref(0, 0), cpu: 1, policy: Policy::Shared { slice } },
            Home { vcpu: vcpu_ref(0, 1), cpu: 1, policy: Policy::Shared { slice } },
            Home { vcpu: vcpu_ref(1, 0), cpu: 0, policy: Policy::Pinned },
        ]
    );
}

#[test]
fn a_named_cpu_that_is_not_usable_is_refused_with_the_vm_and_vcpu() {
    let vms = [spec("web", 2, Some(&[0, 3]), false)];
    let err = place_vcpus(&vms, 0, 4, |c| c != 3, TICKS_PER_US).unwrap_err();
    assert_eq!(err, PlacementError::CpuNotOnline { vm: 0, name: "web", vcpu: 1, cpu: 3 });
    assert_eq!(err.to_string(), "vm0 web: vCPU 1: cpu3 is not online");
}

#[test]
fn more_unnamed_vcpus_than_free_cpus_is_refused_not_doubled_up() {
    let vms = [spec("named", 1, Some(&[0]), false), spec("a", 2, None, false)];
    let err = homes(&vms, 0, 2).unwrap_err();
    assert_eq!(err, PlacementError::NotEnoughFreeCpus { vcpus: 2, free: 1 });
}

#[test]
fn no_cpu_is_given_twice_to_pinned_vcpus() {
    // Every mix of up to 4 VMs of up to 2 vCPUs, named or not, on 4 CPUs: a placement
    // either fails or gives each pinned vCPU a CPU of its own that no named vCPU has.
    for mask in 0u32..256 {
        let vms: Vec<_> = (0..4)
            .filter(|i| mask >> (2 * i) & 1 == 1)
            .map(|i| {
                let vcpus = 1 + (mask >> (2 * i + 1) & 1);
                spec("v", vcpus, None, false)
            })
            .collect();
        let Ok(placed) = homes(&vms, 0, 4) else {
            assert!(vms.iter().map(|s| s.vcpus).sum::<u32>() > 4);
            continue;
        };
        let mut cpus: Vec<usize> = placed.iter().map(|h| h.cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        assert_eq!(cpus.len(), placed.len(), "mask {mask:#x}: {placed:?}");
    }
}

#[test]
fn an_io_cpu_gets_no_vcpu_even_the_boot_cpu() {
    // vm0 asks for the boot CPU (0) as its I/O CPU: its vCPUs go to CPUs 1 and 2.
    let mut vm = spec("io", 2, None, false);
    vm.devices.io_cpu = Some(0);
    vm.devices.network = Some(None);
    let placed = homes(&[vm], 0, 3).unwrap();
    let cpus: Vec<usize> = placed.iter().map(|h| h.cpu).collect();
    assert_eq!(cpus, vec![1, 2]);
    assert_eq!(homes(&[vm], 0, 2).unwrap_err(), PlacementError::NotEnoughFreeCpus { vcpus: 2, free: 1 });
}
