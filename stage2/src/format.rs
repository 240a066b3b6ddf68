//! The two table formats and their geometry: how many levels, where the walk starts, and
//! how many concatenated tables the root has.
//!
//! VMSAv8-64 with the 4 KiB granule (ARM ARM D8.2.7, "Concatenated translation tables for
//! the initial stage 2 lookup", and the VTCR_EL2.{T0SZ, SL0} rules): each level resolves 9
//! bits, and the first stage-2 lookup may resolve up to 4 more with up to 16 concatenated
//! tables. The walk starts at the lowest level that needs no more than 16 root tables, so
//! the walk is as short as the rules allow (the choice KVM makes too).
//! ARMv7 LPAE (ARMv7 ARM B3.6.6, "Determining the required first lookup level for stage 2
//! translations"): a 40-bit IPA starts at level 1 with two concatenated tables.

use crate::Stage2Error;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TableFormat {
    /// VMSAv8-64, 4 KiB granule. `pa_bits` is ID_AA64MMFR0_EL1.PARange (32, 36, 40, 42, 44,
    /// 48); `ipa_bits` is 32..=48 and at most `pa_bits` (VTCR_EL2.PS bounds the output).
    Vmsav8_64 { ipa_bits: u8, pa_bits: u8 },
    /// ARMv7 LPAE stage 2: 40-bit IPA, 40-bit physical addresses.
    ArmV7Lpae,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Geometry {
    pub ipa_bits: u8,
    pub pa_bits: u8,
    /// Level of the first lookup (0 to 2).
    pub start_level: u8,
    /// Concatenated tables at the start level (1 to 16).
    pub root_tables: usize,
}

pub const ENTRIES_PER_TABLE: usize = 512;

/// The lowest IPA bit a descriptor at `level` resolves.
pub const fn level_shift(level: u8) -> u32 {
    12 + 9 * (3 - level as u32)
}

/// The span of one entry at `level`: 4 KiB at level 3, 2 MiB at 2, 1 GiB at 1, 512 GiB at 0.
pub const fn entry_span(level: u8) -> u64 {
    1 << level_shift(level)
}

impl TableFormat {
    pub fn geometry(&self) -> Result<Geometry, Stage2Error> {
        let (ipa_bits, pa_bits) = match *self {
            TableFormat::Vmsav8_64 { ipa_bits, pa_bits } => (ipa_bits, pa_bits),
            TableFormat::ArmV7Lpae => (40, 40),
        };
        let supported_pa = [32, 36, 40, 42, 44, 48].contains(&pa_bits);
        if !supported_pa || !(32..=48).contains(&ipa_bits) || ipa_bits > pa_bits {
            return Err(Stage2Error::UnsupportedFormat { ipa_bits, pa_bits });
        }
        // Levels needed with up to 4 bits resolved by concatenation: ceil((ipa - 4 - 12) / 9).
        let levels = (u32::from(ipa_bits) - 16).div_ceil(9);
        let start_level = (4 - levels) as u8;
        let root_entries = 1usize << (u32::from(ipa_bits) - level_shift(start_level));
        let root_tables = root_entries.div_ceil(ENTRIES_PER_TABLE);
        Ok(Geometry { ipa_bits, pa_bits, start_level, root_tables })
    }

    /// The VTCR_EL2 (VMSAv8-64, ARM ARM D24.2.198) or VTCR (ARMv7, B4.1.159) value for
    /// these tables: inner shareable, inner and outer write-back read/write-allocate walks.
    pub fn vtcr(&self, g: &Geometry) -> u64 {
        const WALK_ATTRIBUTES: u64 = (0b01 << 8) | (0b01 << 10) | (0b11 << 12); // IRGN0, ORGN0, SH0
        const RES1: u64 = 1 << 31;
        // SL0 for the 4 KiB granule: 0 = start at level 2, 1 = level 1, 2 = level 0.
        let sl0 = u64::from(2 - g.start_level) << 6;
        match self {
            TableFormat::Vmsav8_64 { .. } => {
                let ps: u64 = match g.pa_bits {
                    32 => 0,
                    36 => 1,
                    40 => 2,
                    42 => 3,
                    44 => 4,
                    _ => 5,
                };
                (64 - u64::from(g.ipa_bits)) | sl0 | WALK_ATTRIBUTES | (ps << 16) | RES1 // TG0 = 0: 4 KiB
            }
            // T0SZ is a signed 4-bit field (IPA = 32 - T0SZ): -8 is 0b1000, with S = T0SZ[3].
            TableFormat::ArmV7Lpae => 0b1000 | (1 << 4) | sl0 | WALK_ATTRIBUTES | RES1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v8(ipa_bits: u8) -> Geometry {
        TableFormat::Vmsav8_64 { ipa_bits, pa_bits: 48 }.geometry().unwrap()
    }

    #[test]
    fn start_level_and_concatenation_follow_the_vtcr_rules() {
        // (IPA bits, start level, concatenated root tables)
        let expected = [
            (32, 2, 4), (33, 2, 8), (34, 2, 16), (35, 1, 1), (36, 1, 1), (39, 1, 1), (40, 1, 2),
            (42, 1, 8), (43, 1, 16), (44, 0, 1), (47, 0, 1), (48, 0, 1),
        ];
        for (bits, level, tables) in expected {
            let g = v8(bits);
            assert_eq!((g.start_level, g.root_tables), (level, tables), "{bits}-bit IPA");
        }
    }

    #[test]
    fn unsupported_sizes_are_refused() {
        for (ipa_bits, pa_bits) in [(31, 40), (49, 48), (44, 40), (40, 41), (40, 52)] {
            assert_eq!(
                TableFormat::Vmsav8_64 { ipa_bits, pa_bits }.geometry(),
                Err(Stage2Error::UnsupportedFormat { ipa_bits, pa_bits })
            );
        }
    }

    #[test]
    fn vtcr_el2_fields() {
        let f = TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 44 };
        let v = f.vtcr(&f.geometry().unwrap());
        assert_eq!(v & 0x3f, 24, "T0SZ");
        assert_eq!(v >> 6 & 3, 1, "SL0: level 1");
        assert_eq!(v >> 8 & 0x3f, 0b11_01_01, "SH0, ORGN0, IRGN0");
        assert_eq!(v >> 14 & 3, 0, "TG0: 4 KiB");
        assert_eq!(v >> 16 & 7, 4, "PS: 44 bits");
        assert_eq!(v >> 31 & 1, 1, "RES1");
        let f = TableFormat::Vmsav8_64 { ipa_bits: 48, pa_bits: 48 };
        let v = f.vtcr(&f.geometry().unwrap());
        assert_eq!((v & 0x3f, v >> 6 & 3, v >> 16 & 7), (16, 2, 5));
    }

    #[test]
    fn armv7_lpae_is_40_bits_from_level_1() {
        let f = TableFormat::ArmV7Lpae;
        let g = f.geometry().unwrap();
        assert_eq!((g.ipa_bits, g.start_level, g.root_tables), (40, 1, 2));
        let v = f.vtcr(&g);
        assert_eq!(v & 0x1f, 0b1_1000, "T0SZ = -8 with S");
        assert_eq!(v >> 6 & 3, 1, "SL0: level 1");
    }
}
