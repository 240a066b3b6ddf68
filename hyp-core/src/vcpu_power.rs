//! The power states of a VM's vCPUs under PSCI (ARM DEN 0022 D.b, sections 5.6 CPU_ON,
//! 5.5 CPU_OFF, 5.7 AFFINITY_INFO) and the end of the VM: which vCPUs must stop when one
//! asks for SYSTEM_OFF or SYSTEM_RESET, and which stop is the last.
//!
//! Pure state: the arch crate keeps one per VM behind a lock and moves vCPUs between
//! physical CPUs as it says.

use alloc::vec;
use alloc::vec::Vec;

use crate::smccc::psci_status;

/// PSCI INVALID_ADDRESS (DEN 0022, table 6): CPU_ON with an entry point outside the VM.
pub const INVALID_ADDRESS: u64 = -9i64 as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Power {
    Off,
    /// CPU_ON accepted, or the VM's kernel about to boot on it (`kernel`, with the device
    /// tree as `context`); the vCPU has not run yet.
    OnPending {
        entry: u64,
        context: u64,
        kernel: bool,
    },
    On,
}

/// Why a VM is ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    PoweredOff,
    Reset,
    Exited(u64),
    AllVcpusOff,
    Crashed,
    /// The management console destroyed it.
    Destroyed,
    /// The management console restarts it: destroyed, then created again.
    Restart,
}

#[derive(Debug)]
pub struct VmPower {
    vcpus: Vec<Power>,
    ram: (u64, u64),
    ending: Option<EndReason>,
    /// The VM runs in AArch32: a CPU_ON entry point with bit 0 set is a T32 one.
    aarch32: bool,
}

/// A vCPU to start on a physical CPU of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    pub vcpu: usize,
    pub entry: u64,
    pub context: u64,
}

/// Where a vCPU starts: the VM's kernel (its boot protocol gives it the device tree,
/// `context`), or a PSCI CPU_ON entry point with its context ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuStart {
    pub entry: u64,
    pub context: u64,
    pub kernel: bool,
}

/// The vCPU index of an MPIDR the guest names: Aff0, with the other affinity levels zero
/// (the guest's device tree lists vCPU n with `reg = <n>`).
pub fn vcpu_of_mpidr(mpidr: u64) -> Option<usize> {
    if mpidr & !0xff != 0 {
        return None;
    }
    Some(mpidr as usize)
}

impl VmPower {
    /// A VM whose RAM is `[ram_base, ram_base + ram_size)` in IPA space; vCPU 0 starts at
    /// `entry` with x0 = `boot_x0` (the device tree, per the arm64 boot protocol).
    pub fn new(vcpus: usize, ram_base: u64, ram_size: u64, entry: u64, boot_x0: u64) -> Self {
        let mut v = vec![Power::Off; vcpus.max(1)];
        v[0] = Power::OnPending { entry, context: boot_x0, kernel: true };
        VmPower { vcpus: v, ram: (ram_base, ram_size), ending: None, aarch32: false }
    }

    /// The same, for a VM whose vCPUs run in AArch32, whose CPU_ON entry points may be T32
    /// ones (bit 0 set, DEN 0022 CPU_ON; `trap::aarch32::start_state`).
    pub fn aarch32(mut self) -> Self {
        self.aarch32 = true;
        self
    }

    pub fn vcpu_count(&self) -> usize {
        self.vcpus.len()
    }

    pub fn state(&self, vcpu: usize) -> Option<Power> {
        self.vcpus.get(vcpu).copied()
    }

    pub fn ending(&self) -> Option<EndReason> {
        self.ending
    }

    /// CPU_ON: Ok(start) when the vCPU is to be started, Err(PSCI status) otherwise.
    pub fn cpu_on(&mut self, target_mpidr: u64, entry: u64, context: u64) -> Result<Start, u64> {
        let vcpu =
            vcpu_of_mpidr(target_mpidr).filter(|v| *v < self.vcpus.len()).ok_or(psci_status::INVALID_PARAMETERS)?;
        if self.ending.is_some() {
            return Err(psci_status::INTERNAL_FAILURE);
        }
        let (base, size) = self.ram;
        // A64 and A32 instructions are words; an AArch32 caller's entry with bit 0 set is a
        // T32 one (DEN 0022, CPU_ON: bit 0 gives the instruction set), a halfword.
        let thumb = self.aarch32 && entry & 1 == 1;
        let instruction = if thumb { entry & !1 } else { entry };
        if instruction < base || instruction >= base + size || (!thumb && !entry.is_multiple_of(4)) {
            return Err(INVALID_ADDRESS);
        }
        match self.vcpus[vcpu] {
            Power::On => Err(psci_status::ALREADY_ON),
            Power::OnPending { .. } => Err(psci_status::ON_PENDING),
            Power::Off => {
                self.vcpus[vcpu] = Power::OnPending { entry, context, kernel: false };
                Ok(Start { vcpu, entry, context })
            }
        }
    }

    /// The vCPU begins to run: returns where, or None if it may not (the VM is ending, or
    /// it was never started).
    pub fn started(&mut self, vcpu: usize) -> Option<VcpuStart> {
        if self.ending.is_some() {
            return None;
        }
        match self.vcpus.get(vcpu).copied() {
            Some(Power::OnPending { entry, context, kernel }) => {
                self.vcpus[vcpu] = Power::On;
                Some(VcpuStart { entry, context, kernel })
            }
            _ => None,
        }
    }

    /// AFFINITY_INFO for a single vCPU (lowest affinity level 0); other levels are not
    /// supported by a flat VM topology.
    pub fn affinity_info(&self, target_mpidr: u64, lowest_level: u64) -> u64 {
        if lowest_level != 0 {
            return psci_status::INVALID_PARAMETERS;
        }
        match vcpu_of_mpidr(target_mpidr).and_then(|v| self.vcpus.get(v)) {
            None => psci_status::INVALID_PARAMETERS,
            Some(Power::On) => psci_status::AFFINITY_ON,
            Some(Power::Off) => psci_status::AFFINITY_OFF,
            Some(Power::OnPending { .. }) => 2, // ON_PENDING
        }
    }

    /// Marks the VM as ending (the first reason wins) and returns the vCPUs that are still
    /// on or about to be: the caller stops them.
    pub fn request_end(&mut self, reason: EndReason) -> Vec<usize> {
        if self.ending.is_none() {
            self.ending = Some(reason);
        }
        (0..self.vcpus.len()).filter(|&v| self.vcpus[v] != Power::Off).collect()
    }

    /// A vCPU stopped (CPU_OFF, or on the way out of an ending VM). Returns the VM's end
    /// when this was the last vCPU running.
    pub fn stopped(&mut self, vcpu: usize) -> Option<EndReason> {
        if let Some(p) = self.vcpus.get_mut(vcpu) {
            *p = Power::Off;
        }
        if self.vcpus.iter().any(|p| *p != Power::Off) {
            return None;
        }
        Some(*self.ending.get_or_insert(EndReason::AllVcpusOff))
    }

    /// After a reset: every vCPU off but vCPU 0, which starts again at `entry`.
    pub fn reset(&mut self, entry: u64, boot_x0: u64) {
        self.vcpus.iter_mut().for_each(|p| *p = Power::Off);
        self.vcpus[0] = Power::OnPending { entry, context: boot_x0, kernel: true };
        self.ending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RAM: u64 = 0x4000_0000;

    fn vm(vcpus: usize) -> VmPower {
        let mut p = VmPower::new(vcpus, RAM, 64 << 20, RAM + 0x20_0000, RAM + 0x3e0_0000);
        assert_eq!(p.started(0), Some(VcpuStart { entry: RAM + 0x20_0000, context: RAM + 0x3e0_0000, kernel: true }));
        p
    }

    #[test]
    fn cpu_on_starts_an_off_vcpu_once() {
        let mut p = vm(2);
        assert_eq!(p.cpu_on(1, RAM + 0x1000, 7), Ok(Start { vcpu: 1, entry: RAM + 0x1000, context: 7 }));
        assert_eq!(p.cpu_on(1, RAM + 0x1000, 7), Err(psci_status::ON_PENDING));
        assert_eq!(p.affinity_info(1, 0), 2);
        assert_eq!(p.started(1), Some(VcpuStart { entry: RAM + 0x1000, context: 7, kernel: false }));
        assert_eq!(p.cpu_on(1, RAM, 0), Err(psci_status::ALREADY_ON));
        assert_eq!(p.affinity_info(1, 0), psci_status::AFFINITY_ON);
        assert_eq!(p.cpu_on(0, RAM, 0), Err(psci_status::ALREADY_ON));
    }

    #[test]
    fn cpu_on_refuses_bad_targets_and_entry_points() {
        let mut p = vm(2);
        assert_eq!(p.cpu_on(2, RAM, 0), Err(psci_status::INVALID_PARAMETERS));
        assert_eq!(p.cpu_on(0x100, RAM, 0), Err(psci_status::INVALID_PARAMETERS), "Aff1 != 0");
        assert_eq!(p.cpu_on(1, 0x1000, 0), Err(INVALID_ADDRESS));
        assert_eq!(p.cpu_on(1, RAM + (64 << 20), 0), Err(INVALID_ADDRESS));
        assert_eq!(p.cpu_on(1, RAM + 2, 0), Err(INVALID_ADDRESS));
        assert_eq!(p.state(1), Some(Power::Off));
    }

    /// DEN 0022, CPU_ON: an AArch32 caller's entry point with bit 0 set starts the core in
    /// T32 state (`trap::aarch32::start_state` does), at the halfword-aligned address below.
    #[test]
    fn an_aarch32_vm_may_start_a_vcpu_at_a_t32_entry_point() {
        let mut p = VmPower::new(3, RAM, 64 << 20, RAM + 0x20_0000, RAM + 0x3e0_0000).aarch32();
        assert_eq!(p.cpu_on(1, RAM + 0x8001, 7), Ok(Start { vcpu: 1, entry: RAM + 0x8001, context: 7 }));
        assert_eq!(p.cpu_on(2, RAM + 0x8003, 7), Ok(Start { vcpu: 2, entry: RAM + 0x8003, context: 7 }));
        let mut p = VmPower::new(3, RAM, 64 << 20, RAM + 0x20_0000, RAM + 0x3e0_0000).aarch32();
        assert_eq!(p.cpu_on(1, RAM + 0x8002, 7), Err(INVALID_ADDRESS), "A32 needs a word-aligned entry");
        assert_eq!(p.cpu_on(1, RAM - 1, 7), Err(INVALID_ADDRESS), "T32, but outside RAM");
        assert_eq!(p.cpu_on(1, RAM + (64 << 20) + 1, 7), Err(INVALID_ADDRESS));
        assert_eq!(
            p.cpu_on(1, RAM + (64 << 20) - 1, 7),
            Ok(Start { vcpu: 1, entry: RAM + (64 << 20) - 1, context: 7 })
        );
        // An AArch64 VM's entry point is an A64 instruction: word-aligned, bit 0 no state.
        assert_eq!(vm(2).cpu_on(1, RAM + 0x8001, 7), Err(INVALID_ADDRESS));
    }

    #[test]
    fn the_vm_ends_when_its_last_vcpu_turns_off() {
        let mut p = vm(2);
        p.cpu_on(1, RAM, 0).unwrap();
        p.started(1);
        assert_eq!(p.stopped(0), None);
        assert_eq!(p.affinity_info(0, 0), psci_status::AFFINITY_OFF);
        assert_eq!(p.stopped(1), Some(EndReason::AllVcpusOff));
    }

    #[test]
    fn system_off_stops_every_running_vcpu_and_the_last_stop_reports_it() {
        let mut p = vm(3);
        p.cpu_on(1, RAM, 0).unwrap();
        p.started(1);
        p.cpu_on(2, RAM, 0).unwrap();
        assert_eq!(p.request_end(EndReason::PoweredOff), vec![0, 1, 2]);
        assert_eq!(p.request_end(EndReason::Crashed), vec![0, 1, 2], "the first reason wins");
        assert_eq!(p.started(2), None, "a pending vCPU does not start in an ending VM");
        assert_eq!(p.cpu_on(2, RAM, 0), Err(psci_status::INTERNAL_FAILURE));
        assert_eq!(p.stopped(2), None);
        assert_eq!(p.stopped(1), None);
        assert_eq!(p.stopped(0), Some(EndReason::PoweredOff));
    }

    #[test]
    fn reset_leaves_only_vcpu0_to_start() {
        let mut p = vm(2);
        p.cpu_on(1, RAM, 0).unwrap();
        p.request_end(EndReason::Reset);
        p.stopped(1);
        assert_eq!(p.stopped(0), Some(EndReason::Reset));
        p.reset(RAM + 0x20_0000, RAM + 0x3e0_0000);
        assert_eq!(p.ending(), None);
        assert_eq!(p.started(0), Some(VcpuStart { entry: RAM + 0x20_0000, context: RAM + 0x3e0_0000, kernel: true }));
        assert_eq!(p.state(1), Some(Power::Off));
    }

    #[test]
    fn affinity_info_needs_level_zero_and_a_real_vcpu() {
        let p = vm(1);
        assert_eq!(p.affinity_info(0, 1), psci_status::INVALID_PARAMETERS);
        assert_eq!(p.affinity_info(5, 0), psci_status::INVALID_PARAMETERS);
    }

    proptest! {
        /// Whatever the guests do, exactly one stop reports the end, and only once every
        /// vCPU is off.
        #[test]
        fn exactly_one_stop_reports_the_end(ops in prop::collection::vec((0u8..5, 0usize..4, 0u64..3), 1..40)) {
            let mut p = vm(4);
            let mut ends = 0;
            for (op, v, arg) in ops {
                match op {
                    0 => { let _ = p.cpu_on(v as u64, RAM + arg * 4, 0); }
                    1 => { let _ = p.started(v); }
                    2 => { if p.state(v) == Some(Power::On) && p.stopped(v).is_some() { ends += 1; } }
                    3 => { let _ = p.request_end(EndReason::PoweredOff); }
                    _ => { let _ = p.affinity_info(v as u64, arg); }
                }
                if ends > 0 {
                    prop_assert!((0..4).all(|v| p.state(v) == Some(Power::Off)));
                    break;
                }
            }
            prop_assert!(ends <= 1);
        }
    }
}
