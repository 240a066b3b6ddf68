//! Hypercalls: `hyp_core::smccc::decode` over any x0-x3, and the PSCI power state of a VM
//! (`hyp_core::vcpu_power`) under any sequence of CPU_ON, AFFINITY_INFO, starts, stops,
//! ends and resets. Checked: no panic; CPU_ON succeeds only for a stopped vCPU of the VM with
//! an entry point in its RAM, and a vCPU is started at most once per CPU_ON.
#![no_main]

use arbitrary::Arbitrary;
use hyp_core::smccc;
use hyp_core::vcpu_power::{EndReason, Power, VmPower};
use libfuzzer_sys::fuzz_target;

const RAM: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 64 << 20;

#[derive(Arbitrary, Debug)]
enum Op {
    Decode([u64; 4]),
    CpuOn { mpidr: u64, entry: u64, context: u64 },
    Affinity { mpidr: u64, level: u64 },
    Started(u8),
    Stopped(u8),
    End(u8),
    Reset { entry: u64 },
}

fuzz_target!(|input: (u8, Vec<Op>)| {
    let vcpus = usize::from(input.0 % 8) + 1;
    let mut power = VmPower::new(vcpus, RAM, RAM_SIZE, RAM + 0x20_0000, RAM);
    for op in input.1.iter().take(512) {
        match *op {
            Op::Decode(x) => {
                let _ = smccc::decode(x);
            }
            Op::CpuOn { mpidr, entry, context } => {
                let before: Vec<Option<Power>> = (0..vcpus).map(|v| power.state(v)).collect();
                if let Ok(start) = power.cpu_on(mpidr, entry, context) {
                    assert!(start.vcpu < vcpus);
                    assert_eq!(before[start.vcpu], Some(Power::Off), "CPU_ON of a vCPU that was not off");
                    assert!((RAM..RAM + RAM_SIZE).contains(&entry), "CPU_ON with an entry outside RAM");
                }
            }
            Op::Affinity { mpidr, level } => {
                let _ = power.affinity_info(mpidr, level);
            }
            Op::Started(v) => {
                let _ = power.started(usize::from(v));
            }
            Op::Stopped(v) => {
                let _ = power.stopped(usize::from(v));
            }
            Op::End(r) => {
                let reason = [EndReason::PoweredOff, EndReason::Reset, EndReason::Destroyed][usize::from(r % 3)];
                let _ = power.request_end(reason);
            }
            Op::Reset { entry } => power.reset(entry, RAM),
        }
    }
});
