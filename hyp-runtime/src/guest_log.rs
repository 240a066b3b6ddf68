//! Printing a line a guest caused (its mistakes, its devices' incidents, its refused
//! frames) through its VM's limit (hyp_core::log_limit): the first lines in full, then one
//! a second with the count of those left out. A guest must not be able to flood the
//! console.

use core::fmt;

use hyp_core::log_limit::{Admit, GuestLogLimit};

use crate::arch::Arch;
use crate::board::Board;

/// Prints `line` on the board's console if `limit` admits it now.
pub fn guest_line<A: Arch, B: Board>(limit: &GuestLogLimit, line: fmt::Arguments<'_>) {
    match limit.admit(A::now(), A::counter_frequency()) {
        Admit::Print => B::print(line),
        Admit::PrintAfter { left_out } => {
            B::print(format_args!("{line} ({left_out} earlier line(s) of this VM left out)"))
        }
        Admit::LeaveOut => {}
    }
}
