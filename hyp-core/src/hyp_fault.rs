//! The report of an exception the hypervisor took in its own mode (EL2, or HYP mode on
//! ARMv7): a hypervisor bug or a hardware fault. It says, in one piece, everything a person
//! needs to find it: the kind, the CPU, the exception class, the registers that say where
//! and why, and every general register.

use core::fmt;

use crate::syndrome::Syndrome;

/// An exception taken in the hypervisor's own mode, as its CPU reports it.
pub struct HypFault<'a> {
    /// "synchronous", "IRQ", "FIQ" or "SError".
    pub kind: &'static str,
    /// The mode it was taken in ("EL2").
    pub mode: &'static str,
    pub cpu: usize,
    pub syndrome: Syndrome,
    /// The syndrome register and the other registers that say where and why, by name
    /// (ESR_EL2, FAR_EL2, ELR_EL2, SPSR_EL2).
    pub named: [(&'static str, u64); 4],
    /// The general registers, named by `prefix` and their number (x0..x30, r0..r14).
    pub general: &'a [u64],
    pub prefix: char,
}

impl fmt::Display for HypFault<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = self.cpu;
        writeln!(
            f,
            "\nhypervisor: unexpected {} exception at {} on cpu{cpu}: {}",
            self.kind,
            self.mode,
            self.syndrome.class()
        )?;
        for (name, value) in self.named {
            write!(f, "  {name} {value:#018x}")?;
        }
        writeln!(f)?;
        for (row, values) in self.general.chunks(4).enumerate() {
            for (i, value) in values.iter().enumerate() {
                write!(f, "  {}{:<2} {value:#018x}", self.prefix, row * 4 + i)?;
            }
            writeln!(f)?;
        }
        write!(f, "hypervisor: cpu{cpu} stopped")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn the_report_names_the_cpu_the_class_and_every_register() {
        let general: [u64; 6] = [0, 1, 2, 3, 4, 0xdead];
        let fault = HypFault {
            kind: "synchronous",
            mode: "EL2",
            cpu: 3,
            syndrome: Syndrome(0x9600_0045),
            named: [("ESR_EL2", 0x9600_0045), ("FAR_EL2", 0x1000), ("ELR_EL2", 0x4020_0000), ("SPSR_EL2", 0x3c9)],
            general: &general,
            prefix: 'x',
        };
        let text = format!("{fault}");
        let lines: alloc::vec::Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            "hypervisor: unexpected synchronous exception at EL2 on cpu3: EC 0x25 (data abort at the same EL)"
        );
        assert_eq!(
            lines[2],
            "  ESR_EL2 0x0000000096000045  FAR_EL2 0x0000000000001000  ELR_EL2 0x0000000040200000  SPSR_EL2 0x00000000000003c9"
        );
        assert_eq!(
            lines[3],
            "  x0  0x0000000000000000  x1  0x0000000000000001  x2  0x0000000000000002  x3  0x0000000000000003"
        );
        assert_eq!(lines[4], "  x4  0x0000000000000004  x5  0x000000000000dead");
        assert_eq!(lines[5], "hypervisor: cpu3 stopped");
    }
}
