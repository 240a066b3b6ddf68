//! Versatile Express's SYS_FLAGS register, where its firmware looks for the address a
//! waiting CPU jumps to (hyp_core::platform::SysFlags): the one board register this crate
//! writes, through mmio.rs.

use hyp_core::platform::SysFlags;

use crate::mmio::Frame;

/// Leaves `entry` alone in SYS_FLAGS: every bit cleared (SYS_FLAGSCLR), then the entry's set
/// (SYS_FLAGSSET). The caller then wakes the CPUs with an SGI; a CPU whose firmware reads
/// SYS_FLAGS before this write reaches it sees 0 and waits again, and the SGI, which it
/// does not acknowledge there, ends that wait at once: it reads again.
///
/// # Safety
///
/// `flags.registers` is the board's system register window, mapped as device memory at its
/// address for the rest of the program (hyp_map maps the window of every CPU started this
/// way).
pub unsafe fn leave_entry(flags: &SysFlags, entry: u32) {
    // SAFETY: the caller's promise; SYS_FLAGSSET and SYS_FLAGSCLR lie inside the window
    // (hyp_core::platform checks its size).
    let registers = unsafe { Frame::new(flags.registers.base as usize) };
    registers.write32(SysFlags::CLEAR as usize, u32::MAX);
    registers.write32(SysFlags::SET as usize, entry);
}

#[cfg(test)]
mod tests {
    use hyp_core::platform::PhysRange;

    use super::*;

    #[test]
    fn the_entry_is_left_alone_in_the_flags() {
        let window = std::vec![0u32; 0x1000 / 4].leak();
        let flags = SysFlags { registers: PhysRange { base: window.as_ptr() as u64, size: 0x1000 } };
        window[SysFlags::SET as usize / 4] = 0x8000_0000;
        // SAFETY: ordinary memory standing in for the window, which lives for the test.
        unsafe { leave_entry(&flags, 0x8001_2340) };
        assert_eq!(window[SysFlags::CLEAR as usize / 4], u32::MAX, "every bit cleared first");
        assert_eq!(window[SysFlags::SET as usize / 4], 0x8001_2340, "then the entry's set");
        assert!(window.iter().enumerate().all(|(i, &w)| w == 0 || [0x30 / 4, 0x34 / 4].contains(&i)), "nothing else");
    }
}
