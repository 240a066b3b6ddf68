//! The per-vCPU state a guest drives through trapped instructions: set/way maintenance and
//! its watch of the VM control registers (`hyp_core::set_way`), and the debug registers
//! (`hyp_core::debug_registers`). Checked: no panic; every clean asked for lies inside the
//! VM's RAM, is at most `PART` long and follows the previous part of the same clean; a
//! refused debug access changes nothing; the hardware is needed only when MDSCR_EL1 enables
//! a debug exception and the OS lock is unlocked.
#![no_main]

use arbitrary::Arbitrary;
use hyp_core::debug_registers::{DebugAccess, DebugGeometry, DebugRegisters};
use hyp_core::set_way::{CacheStep, CacheTrap, SetWayState, PART};
use hyp_core::sysreg::SysRegAccess;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    SetWay { pc: u8 },
    Sctlr { pc: u8, old: u64, new: u64 },
    OtherControl { pc: u8 },
    Debug { op1: u8, crn: u8, crm: u8, op2: u8, read: bool, value: u64 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    ram_pages: u16,
    brps: u8,
    wrps: u8,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let ram = u64::from(input.ram_pages) * 4096;
    let mut set_way = SetWayState::default();
    let mut expected_next: Option<(u64, u64)> = None;
    let geometry =
        DebugGeometry { breakpoints: usize::from(input.brps % 16) + 1, watchpoints: usize::from(input.wrps % 16) + 1 };
    let mut debug = DebugRegisters::AT_RESET;
    for op in input.ops.iter().take(512) {
        let (trap, pc) = match *op {
            Op::SetWay { pc } => (CacheTrap::SetWay, pc),
            Op::Sctlr { pc, old, new } => (CacheTrap::SctlrWrite { old, new }, pc),
            Op::OtherControl { pc } => (CacheTrap::OtherControlWrite, pc),
            Op::Debug { op1, crn, crm, op2, read, value } => {
                let access = SysRegAccess {
                    op0: 2,
                    op1: op1 & 7,
                    crn: crn & 15,
                    crm: crm & 15,
                    op2: op2 & 7,
                    rt: 0,
                    is_read: read,
                };
                let before = debug;
                let result = debug.access(&access, value, geometry);
                if result == DebugAccess::Undefined || read {
                    assert_eq!(debug, before, "a read or a refused access changes nothing");
                }
                let mdscr_enables = debug.mdscr & ((1 << 0) | (1 << 13) | (1 << 15)) != 0;
                assert_eq!(debug.needs_hardware(), mdscr_enables && !debug.os_lock());
                continue;
            }
        };
        let pc = u64::from(pc) * 4;
        match set_way.on_trap(trap, pc, ram) {
            CacheStep::CleanPart { offset, len, last } => {
                assert!(len <= PART && offset.checked_add(len).is_some_and(|end| end <= ram), "{offset:#x}+{len:#x}");
                if let Some((at, next_pc)) = expected_next.filter(|&(_, p)| p == pc) {
                    assert_eq!(offset, at, "the same clean goes on where it stopped");
                    let _ = next_pc;
                } else {
                    assert_eq!(offset, 0, "a new clean starts at the start");
                }
                expected_next = if last { None } else { Some((offset + len, pc)) };
            }
            CacheStep::Complete => expected_next = None,
        }
    }
});
