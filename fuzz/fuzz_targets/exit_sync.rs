//! A guest's synchronous exit, whatever the syndrome, addresses and registers: ESR_EL2,
//! FAR_EL2 and HPFAR_EL2 decoded by `hyp_core::exit::handle_sync` with an MMIO bus holding
//! the real PL011, the system registers (ID, debug, set/way, SGIs) and the hypercalls
//! behind it. Checked: no panic; an exit completes at most one instruction (the PC moves by
//! 0, 2 or 4 bytes) unless it enters the guest's vector (an injected exception, which the
//! arch crate then computes) or makes a call; a register the guest did not name is not
//! changed.
#![no_main]

use arbitrary::Arbitrary;
use hyp_core::debug_registers::DebugRegisters;
use hyp_core::exit::{handle_sync, GuestContext, Incident, IncidentLog, Outcome, SyncExit};
use hyp_core::mmio::{Locked, MmioBus};
use hyp_core::syndrome::Syndrome;
use hyp_core::sysreg::{Encoding, IdRegisters, SysRegEnv, VmFeatures};
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

struct Ids(u64);
impl IdRegisters for Ids {
    fn read(&self, e: Encoding) -> u64 {
        self.0.rotate_left(u32::from(e.3) * 8 + u32::from(e.4))
    }
}

struct Env {
    ids: Ids,
    features: VmFeatures,
    debug: DebugRegisters,
    /// Incidents logged during the current exit.
    incidents: usize,
}
impl IncidentLog for Env {
    fn incident(&mut self, _: Incident) {
        self.incidents += 1;
    }
}
impl SysRegEnv for Env {
    fn features(&self) -> VmFeatures {
        self.features
    }
    fn id_registers(&self) -> &impl IdRegisters {
        &self.ids
    }
    fn debug_registers(&mut self) -> &mut DebugRegisters {
        &mut self.debug
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    exits: Vec<(u32, u64, u64)>,
    x: [u64; 31],
    pc: u64,
    pstate: u64,
    ids: u64,
    gic_v3: bool,
}

fuzz_target!(|input: Input| {
    let mut bus = MmioBus::new();
    let uart = Pl011::new(Box::new(Sink), Box::new(Sink));
    bus.attach(IpaRange::new(Ipa(0x0900_0000), 0x1000).unwrap(), Box::new(Locked::new(uart))).unwrap();
    let mut env = Env {
        ids: Ids(input.ids),
        features: VmFeatures { gic_v3: input.gic_v3, ipa_bits: 40 },
        debug: DebugRegisters::AT_RESET,
        incidents: 0,
    };
    let mut ctx = GuestContext { x: input.x, pc: input.pc, pstate: input.pstate };
    for &(esr, far, hpfar) in input.exits.iter().take(64) {
        let before = ctx.clone();
        let exit = SyncExit { syndrome: Syndrome(u64::from(esr)), far, hpfar };
        env.incidents = 0;
        let outcome = handle_sync(&mut ctx, 0, &exit, &mut bus, &mut env);
        assert!(env.incidents <= 1, "{} incidents logged for ESR {esr:#x}", env.incidents);
        let moved = ctx.pc.wrapping_sub(before.pc);
        assert!(matches!(moved, 0 | 2 | 4), "the PC moved by {moved:#x} for ESR {esr:#x}");
        if !matches!(outcome, Outcome::Call) {
            // Only the instruction's own destination register (and x0 for a hypercall's
            // result) may change.
            let changed = (0..31).filter(|&i| ctx.x[i] != before.x[i]).count();
            assert!(changed <= 1, "{changed} registers changed for ESR {esr:#x}");
        }
        assert_eq!(ctx.pstate, before.pstate, "handle_sync never changes PSTATE itself");
    }
});
