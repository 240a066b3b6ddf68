//! An AArch32 guest's synchronous exit, whatever the syndrome, addresses and registers:
//! HSR, HDFAR and HPFAR decoded by `hyp_core::trap::aarch32` and answered by
//! `hyp_core::exit::handle` with an MMIO bus holding the real PL011 and the hypercalls
//! behind it. Checked: no panic; an exit completes at most one instruction (the PC moves by
//! 0, 2 or 4 bytes); a register the guest did not name is not changed unless it makes a
//! call.
#![no_main]

use arbitrary::Arbitrary;
use hyp_core::debug_registers::DebugRegisters;
use hyp_core::exit::{handle, Incident, IncidentLog, Outcome};
use hyp_core::mmio::{Locked, MmioBus};
use hyp_core::sysreg::{Encoding, IdRegisters, SysRegEnv, VmFeatures};
use hyp_core::trap::aarch32::{decode, HypExit, Registers};
use libfuzzer_sys::fuzz_target;
use stage2::{Ipa, IpaRange};
use vdev::pl011::{ConsoleOutput, InterruptLine, Pl011};

struct Sink;
impl ConsoleOutput for Sink {
    fn put(&mut self, _: u8) {}
}
impl InterruptLine for Sink {
    fn set_level(&mut self, _: bool) {}
}

struct Ids;
impl IdRegisters for Ids {
    fn read(&self, _: Encoding) -> u64 {
        0
    }
}

/// The vCPU's debug registers, and how many incidents the current exit logged.
struct Env(DebugRegisters, usize);
impl IncidentLog for Env {
    fn incident(&mut self, _: Incident) {
        self.1 += 1;
    }
}
impl SysRegEnv for Env {
    fn features(&self) -> VmFeatures {
        VmFeatures { gic_v3: false, ipa_bits: 40 }
    }
    fn id_registers(&self) -> &impl IdRegisters {
        &Ids
    }
    fn debug_registers(&mut self) -> &mut DebugRegisters {
        &mut self.0
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    exits: Vec<(u32, u32, u32, u32)>,
    r: [u32; 15],
    pc: u32,
}

fuzz_target!(|input: Input| {
    let mut bus = MmioBus::new();
    let uart = Pl011::new(Box::new(Sink), Box::new(Sink));
    bus.attach(IpaRange::new(Ipa(0x0900_0000), 0x1000).unwrap(), Box::new(Locked::new(uart))).unwrap();
    let mut env = Env(DebugRegisters::AT_RESET, 0);
    let mut regs = Registers { r: input.r, pc: input.pc };
    for &(hsr, far, hpfar, cpsr) in input.exits.iter().take(64) {
        let before = regs.clone();
        let exit = decode(&HypExit { hsr, far, hpfar, cpsr, aarch64_view: false });
        env.1 = 0;
        let outcome = handle(&exit, &mut regs, 0, &mut bus, &mut env);
        assert!(env.1 <= 1, "{} incidents logged for HSR {hsr:#x}", env.1);
        let moved = regs.pc.wrapping_sub(before.pc);
        assert!(matches!(moved, 0 | 2 | 4), "the PC moved by {moved:#x} for HSR {hsr:#x}");
        if !matches!(outcome, Outcome::Call) {
            // One register, or two for an MRRC.
            let changed = (0..15).filter(|&i| regs.r[i] != before.r[i]).count();
            assert!(changed <= 2, "{changed} registers changed for HSR {hsr:#x}");
        }
    }
});
