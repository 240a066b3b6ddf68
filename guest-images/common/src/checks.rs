//! Check reporting, one line per check in the style of the Test Anything Protocol:
//! `ok N - what` or `not ok N - what`, numbered from 1. The system tests match these lines.

use core::fmt;

#[derive(Default)]
pub struct Checks {
    pub number: u32,
    pub failed: u32,
}

impl Checks {
    pub fn check(&mut self, passed: bool, what: fmt::Arguments<'_>) {
        self.number += 1;
        if passed {
            crate::println!("ok {} - {}", self.number, what);
        } else {
            self.failed += 1;
            crate::println!("not ok {} - {}", self.number, what);
        }
    }

    /// The closing line: `NAME: all N checks passed; powering off with PSCI SYSTEM_OFF`, or
    /// `NAME: F of N checks failed`. Whether all passed.
    pub fn summary(&self, name: &str) -> bool {
        if self.failed == 0 {
            crate::println!("{name}: all {} checks passed; powering off with PSCI SYSTEM_OFF", self.number);
        } else {
            crate::println!("{name}: {} of {} checks failed", self.failed, self.number);
        }
        self.failed == 0
    }
}
