//! The BCM2835 power manager's watchdog (the Raspberry Pi's PM block: `PM_RSTC`, `PM_RSTS`,
//! `PM_WDOG`) as the way to stop a board whose firmware has no PSCI: what to write, in
//! which order. The register accesses are the arch crate's (hyp_arch_arm::power).
//!
//! It is how Linux's `bcm2835_wdt` driver powers a Pi off: the reset status register's
//! partition field set to 63, then a full reset by the watchdog. After the reset the Pi's
//! firmware reads partition 63 as "halt" and stays halted; QEMU's model of the block
//! (`raspi4b`) turns the same writes into a shutdown, so QEMU exits. Every write carries
//! the block's password in its top byte, or the hardware ignores it.

/// The reset control register: its WRCFG field says what the watchdog does when it fires.
pub const RSTC: u64 = 0x1c;
/// The reset status register, whose partition field survives the reset.
pub const RSTS: u64 = 0x20;
/// The watchdog's count, in ticks of 1/65536 s (about 15 microseconds).
pub const WDOG: u64 = 0x24;

/// The top byte every write must carry.
pub const PASSWORD: u32 = 0x5a00_0000;
const PASSWORD_MASK: u32 = 0xff00_0000;
/// The partition field's bits are the even bits 0 to 10; partition 63 sets all six.
pub const RSTS_PARTITION_63: u32 = 0x555;
/// RSTC.WRCFG (bits 5:4): a full reset when the watchdog fires.
const RSTC_WRCFG_MASK: u32 = 0x30;
pub const RSTC_WRCFG_FULL_RESET: u32 = 0x20;
/// About 150 microseconds, as Linux waits: long enough for the writes before it to land.
const WDOG_TICKS: u32 = 10;

/// The PM block's registers, 32 bits each, at the offsets above.
pub trait PmRegisters {
    fn read(&mut self, offset: u64) -> u32;
    fn write(&mut self, offset: u64, value: u32);
}

/// Asks the machine to halt: partition 63 in RSTS (its other bits kept), the watchdog
/// armed, a full reset on its expiry. Returns once the writes are issued; the machine stops
/// a few ticks later, or never if the board ignores them (the caller bounds its wait).
pub fn halt(pm: &mut impl PmRegisters) {
    let status = pm.read(RSTS) & !PASSWORD_MASK;
    pm.write(RSTS, PASSWORD | status | RSTS_PARTITION_63);
    pm.write(WDOG, PASSWORD | WDOG_TICKS);
    let control = pm.read(RSTC) & !(PASSWORD_MASK | RSTC_WRCFG_MASK);
    pm.write(RSTC, PASSWORD | control | RSTC_WRCFG_FULL_RESET);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    enum Fired {
        Halt,
        Reset,
    }

    /// The PM block as QEMU 10's `bcm2835_powermgt` models it (its reset values, a write
    /// without the password ignored, a reset requested through RSTC.WRCFG a shutdown when the
    /// partition in RSTS is 63), and as the Pi's firmware reads it after the reset.
    struct Block {
        rstc: u32,
        rsts: u32,
        wdog: u32,
        fired: Option<Fired>,
    }

    impl Block {
        fn at_reset() -> Block {
            Block { rstc: 0x102, rsts: 0x1000, wdog: 0, fired: None }
        }
    }

    impl PmRegisters for Block {
        fn read(&mut self, offset: u64) -> u32 {
            match offset {
                RSTC => self.rstc,
                RSTS => self.rsts,
                WDOG => self.wdog,
                _ => 0,
            }
        }
        fn write(&mut self, offset: u64, value: u32) {
            if value & PASSWORD_MASK != PASSWORD {
                return;
            }
            let value = value & !PASSWORD_MASK;
            match offset {
                RSTC => {
                    self.rstc = value;
                    if value & RSTC_WRCFG_FULL_RESET != 0 {
                        let halt = self.rsts & 0xfff == RSTS_PARTITION_63;
                        self.fired = Some(if halt { Fired::Halt } else { Fired::Reset });
                    }
                }
                RSTS => self.rsts = value,
                WDOG => self.wdog = value,
                _ => {}
            }
        }
    }

    #[test]
    fn halting_sets_partition_63_then_fires_a_full_reset_that_the_board_reads_as_a_halt() {
        let mut pm = Block::at_reset();
        halt(&mut pm);
        assert_eq!(pm.fired, Some(Fired::Halt));
        assert_eq!(pm.rsts, 0x1555, "the status bit QEMU resets to (0x1000) is kept");
        assert_eq!(pm.rstc, 0x122, "RSTC's other bits kept, WRCFG a full reset");
        assert_eq!(pm.wdog, WDOG_TICKS);
    }

    #[test]
    fn a_partition_already_chosen_becomes_63_and_wrcfg_is_replaced_not_ored() {
        let mut pm = Block { rstc: 0x110, rsts: 0x1004, ..Block::at_reset() };
        halt(&mut pm);
        assert_eq!(pm.fired, Some(Fired::Halt));
        assert_eq!(pm.rstc & RSTC_WRCFG_MASK, RSTC_WRCFG_FULL_RESET, "WRCFG 0b01 replaced by 0b10");
    }
}
