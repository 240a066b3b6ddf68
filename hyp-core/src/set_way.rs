//! Cache maintenance by set/way, for one vCPU. A guest cannot be given DC ISW/CSW/CISW
//! (HCR_EL2.TSW traps them): they act on the physical CPU's caches, not on the VM's memory,
//! and a vCPU may move or share its CPU (ARM ARM D7.5.9.x, "Performing cache maintenance
//! by set/way": only meaningful when the PE is alone, e.g. at power-up). What a guest wants
//! from them is its memory clean to the point of coherency, around turning its caches on or
//! off. So, as KVM does:
//! - the first set/way instruction cleans and invalidates the VM's whole RAM, and from then
//!   on the VM's control registers are trapped (HCR_EL2.TVM);
//! - further set/way instructions are hints and cost nothing;
//! - a write to SCTLR_EL1 that turns the caches on or off (M and C both set, or not) cleans
//!   the whole RAM again; once the caches are on, the control registers stop trapping.
//!
//! A clean of the whole RAM is long (hundreds of milliseconds for 512 MiB under emulation),
//! so it is done in parts of `PART` bytes, one per exit: the instruction that asked for it
//! stays where it is until the last part is done, so the guest executes it again after each
//! part and traps again. An interrupt due meanwhile (the end of a slice, a kick) is taken at
//! that re-entry, so the clean is preemptible and another vCPU of the CPU is never held off
//! for more than one part. The parts cover the RAM in order; a trap from another instruction
//! drops an unfinished clean (the guest moved on, an interrupt handler switched tasks): the
//! instruction that asked for it starts it again from the start if it comes back.

/// The RAM cleaned per exit: about half a millisecond of cache maintenance under emulation.
pub const PART: u64 = 2 << 20;

/// SCTLR_EL1.M [0] and C [2]: the stage-1 MMU and the data cache (ARM ARM D24.2.x).
const SCTLR_M_C: u64 = (1 << 0) | (1 << 2);

/// What trapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheTrap {
    /// DC ISW, DC CSW or DC CISW.
    SetWay,
    /// A write to SCTLR_EL1, trapped by HCR_EL2.TVM: `old` is its value, `new` the write.
    SctlrWrite { old: u64, new: u64 },
    /// A write to another register HCR_EL2.TVM traps.
    OtherControlWrite,
}

/// What the arch crate does for the trapped instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStep {
    /// Clean and invalidate `[offset, offset + len)` of the VM's RAM to the point of
    /// coherency. If `last`, the instruction then completes (a register write is applied,
    /// the PC moves on); if not, the guest re-enters at the same instruction.
    CleanPart { offset: u64, len: u64, last: bool },
    /// The instruction completes now.
    Complete,
}

/// A clean of the VM's RAM in progress, for the instruction at `pc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Clean {
    pc: u64,
    next: u64,
    /// The caches are on after the instruction completes: stop trapping the controls.
    caches_on_after: bool,
}

/// One vCPU's set/way emulation state (it travels with the vCPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetWayState {
    trapping_controls: bool,
    clean: Option<Clean>,
}

fn caches_on(sctlr: u64) -> bool {
    sctlr & SCTLR_M_C == SCTLR_M_C
}

impl SetWayState {
    /// Whether the VM's control registers trap (HCR_EL2.TVM) for this vCPU now.
    pub fn trapping_controls(&self) -> bool {
        self.trapping_controls
    }

    /// The trapped instruction at `pc`, in a VM of `ram_size` bytes: what to do.
    pub fn on_trap(&mut self, trap: CacheTrap, pc: u64, ram_size: u64) -> CacheStep {
        match self.clean {
            Some(clean) if clean.pc == pc => return self.next_part(clean, ram_size),
            // The guest moved on without completing that instruction: its clean is dropped
            // (if it comes back to it, it starts again).
            Some(_) => self.clean = None,
            None => {}
        }
        let caches_on_after = match trap {
            // A hint while the controls are watched: the RAM was cleaned when set/way
            // started, and is cleaned again when the caches are turned on or off.
            CacheTrap::SetWay if self.trapping_controls => return CacheStep::Complete,
            CacheTrap::SetWay => false,
            CacheTrap::SctlrWrite { old, new } if caches_on(old) != caches_on(new) => caches_on(new),
            CacheTrap::SctlrWrite { new, .. } => {
                self.trapping_controls &= !caches_on(new);
                return CacheStep::Complete;
            }
            CacheTrap::OtherControlWrite => return CacheStep::Complete,
        };
        self.trapping_controls = true;
        self.next_part(Clean { pc, next: 0, caches_on_after }, ram_size)
    }

    fn next_part(&mut self, clean: Clean, ram_size: u64) -> CacheStep {
        let offset = clean.next.min(ram_size);
        let len = PART.min(ram_size - offset);
        let last = offset + len >= ram_size;
        if last {
            self.clean = None;
            self.trapping_controls &= !clean.caches_on_after;
        } else {
            self.clean = Some(Clean { next: offset + len, ..clean });
        }
        CacheStep::CleanPart { offset, len, last }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAM: u64 = 7 * PART + 4096;
    const CACHES_ON: u64 = 0x30d0_0805;
    const CACHES_OFF: u64 = 0x30d0_0800;

    /// Runs `trap` at `pc` until the instruction completes, as the arch crate does; returns
    /// the parts cleaned, in order.
    fn run(s: &mut SetWayState, trap: CacheTrap, pc: u64) -> Vec<(u64, u64)> {
        let mut parts = Vec::new();
        for _ in 0..1000 {
            match s.on_trap(trap, pc, RAM) {
                CacheStep::Complete => return parts,
                CacheStep::CleanPart { offset, len, last } => {
                    parts.push((offset, len));
                    if last {
                        return parts;
                    }
                }
            }
        }
        panic!("the instruction never completed");
    }

    /// The parts cover the RAM exactly once, in order, each at most `PART`.
    fn covers_the_ram(parts: &[(u64, u64)]) -> bool {
        let mut at = 0;
        for &(offset, len) in parts {
            if offset != at || len == 0 || len > PART {
                return false;
            }
            at += len;
        }
        at == RAM
    }

    #[test]
    fn the_first_set_way_operation_cleans_the_whole_ram_in_parts_then_the_controls_trap() {
        let mut s = SetWayState::default();
        assert!(!s.trapping_controls());
        let parts = run(&mut s, CacheTrap::SetWay, 0x100);
        assert_eq!(parts.len(), 8);
        assert!(covers_the_ram(&parts), "{parts:?}");
        assert!(s.trapping_controls());
    }

    #[test]
    fn later_set_way_operations_are_hints_that_clean_nothing() {
        let mut s = SetWayState::default();
        run(&mut s, CacheTrap::SetWay, 0x100);
        for pc in [0x100, 0x104, 0x2000] {
            assert_eq!(s.on_trap(CacheTrap::SetWay, pc, RAM), CacheStep::Complete);
        }
    }

    #[test]
    fn turning_the_caches_on_or_off_cleans_the_ram_and_caches_on_stops_the_trapping() {
        let mut s = SetWayState::default();
        run(&mut s, CacheTrap::SetWay, 0x100);
        // Off to off: no toggle, no clean; the controls still trap.
        assert!(run(&mut s, CacheTrap::SctlrWrite { old: CACHES_OFF, new: CACHES_OFF | 0x1000 }, 0x200).is_empty());
        assert!(s.trapping_controls());
        // Off to on: a clean, and no more trapping.
        let parts = run(&mut s, CacheTrap::SctlrWrite { old: CACHES_OFF, new: CACHES_ON }, 0x204);
        assert!(covers_the_ram(&parts));
        assert!(!s.trapping_controls());
        // A later set/way operation starts it all again.
        assert!(covers_the_ram(&run(&mut s, CacheTrap::SetWay, 0x300)));
        assert!(s.trapping_controls());
        // On to off: a clean, and the controls keep trapping (set/way may follow).
        let parts = run(&mut s, CacheTrap::SctlrWrite { old: CACHES_ON, new: CACHES_OFF }, 0x400);
        assert!(covers_the_ram(&parts));
        assert!(s.trapping_controls());
    }

    #[test]
    fn an_sctlr_write_that_leaves_the_caches_on_stops_the_trapping_without_a_clean() {
        let mut s = SetWayState::default();
        run(&mut s, CacheTrap::SetWay, 0x100);
        assert!(run(&mut s, CacheTrap::SctlrWrite { old: CACHES_ON, new: CACHES_ON | 0x1000 }, 0x200).is_empty());
        assert!(!s.trapping_controls());
    }

    #[test]
    fn other_control_writes_complete_at_once() {
        let mut s = SetWayState::default();
        run(&mut s, CacheTrap::SetWay, 0x100);
        assert_eq!(s.on_trap(CacheTrap::OtherControlWrite, 0x500, RAM), CacheStep::Complete);
        assert!(s.trapping_controls());
    }

    #[test]
    fn an_instruction_trapping_again_after_an_interruption_goes_on_where_it_stopped() {
        let mut s = SetWayState::default();
        let first = s.on_trap(CacheTrap::SetWay, 0x100, RAM);
        assert_eq!(first, CacheStep::CleanPart { offset: 0, len: PART, last: false });
        // The guest took an interrupt, and came back to the same instruction.
        assert_eq!(
            s.on_trap(CacheTrap::SetWay, 0x100, RAM),
            CacheStep::CleanPart { offset: PART, len: PART, last: false }
        );
    }

    #[test]
    fn another_instruction_abandons_an_unfinished_clean_which_starts_again_from_the_start() {
        let mut s = SetWayState::default();
        run(&mut s, CacheTrap::SetWay, 0x100);
        let toggle = CacheTrap::SctlrWrite { old: CACHES_OFF, new: CACHES_ON };
        s.on_trap(toggle, 0x200, RAM);
        s.on_trap(toggle, 0x200, RAM);
        // The guest went elsewhere (an interrupt handler switched tasks): a set/way operation
        // there is a hint, and the unfinished write did not take effect.
        assert_eq!(s.on_trap(CacheTrap::SetWay, 0x900, RAM), CacheStep::Complete);
        assert!(s.trapping_controls());
        // Back at the write: its clean starts from the start.
        let parts = run(&mut s, toggle, 0x200);
        assert!(covers_the_ram(&parts), "{parts:?}");
        assert!(!s.trapping_controls());
    }

    #[test]
    fn no_part_is_longer_than_part_whatever_the_ram_size() {
        for ram in [4096, PART - 4096, PART, PART + 4096, 512 << 20] {
            let mut s = SetWayState::default();
            let mut at = 0;
            loop {
                match s.on_trap(CacheTrap::SetWay, 0, ram) {
                    CacheStep::CleanPart { offset, len, last } => {
                        assert!(offset == at && len <= PART && len > 0);
                        at += len;
                        if last {
                            break;
                        }
                    }
                    CacheStep::Complete => panic!("a first set/way operation cleans"),
                }
            }
            assert_eq!(at, ram);
        }
    }
}
