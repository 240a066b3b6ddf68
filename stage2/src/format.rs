//! The two table formats and their geometry, in one place: the level description the one
//! walker is parameterised by (Bao's `page_table_dscr`), where the walk starts,
//! and how many concatenated tables the root has. The format-specific part is only which
//! sizes are allowed and how VTCR encodes them.
//!
//! Both formats use the same long-descriptor levels with 4 KiB tables of 512 entries: level 1
//! maps 1 GiB blocks, level 2 2 MiB blocks, level 3 4 KiB pages, and level 0 (VMSAv8-64 only)
//! holds tables only (ARM ARM D8.2.7 "Translation using the 4KB granule"; ARMv7 ARM B3.6.1
//! "Long-descriptor translation table format descriptors").
//!
//! VMSAv8-64 start level (ARM ARM D8.2.7 "Concatenated translation tables for the initial
//! stage 2 lookup", and the VTCR_EL2.{T0SZ, SL0} consistency rule of the pseudocode
//! `AArch64.S2InconsistentSL`): a walk starting at level L must resolve at least 1 and at
//! most 9 + 4 bits there, the 4 extra bits with up to 16 concatenated tables. Of the allowed
//! start levels this takes the one with the shortest walk (as KVM does): 32-34-bit IPA start
//! at level 2 (4 to 16 tables), 35-43 at level 1 (1 to 16 tables), 44-48 at level 0.
//!
//! ARMv7 LPAE (ARMv7 ARM B3.6.6 "Determining the required first lookup level for stage 2
//! translations", VTCR.{T0SZ, SL0}): a 40-bit IPA starts at level 1 with two concatenated
//! first-level tables (T0SZ = -8, SL0 = 0b01).

use crate::Stage2Error;

/// What an entry of one level may hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LevelKind {
    /// Table descriptors only (VMSAv8-64 level 0 with the 4 KiB granule).
    TablesOnly,
    /// Table or block descriptors (levels 1 and 2).
    BlocksOrTables,
    /// Page descriptors (level 3): the walk ends here.
    Pages,
}

/// One level of the walk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LevelDescription {
    pub level: u8,
    /// The lowest IPA bit an entry of this level resolves: an entry spans `1 << shift` bytes.
    pub shift: u32,
    pub kind: LevelKind,
}

impl LevelDescription {
    pub const fn span(&self) -> u64 {
        1 << self.shift
    }
    pub const fn is_last(&self) -> bool {
        matches!(self.kind, LevelKind::Pages)
    }
    /// Whether a leaf of this level can map `[start, end)` to `pa`: the range must cover the
    /// whole entry and the PA be aligned to it (ARM ARM D8.3.1: a block's output address is
    /// aligned to its size).
    pub fn can_map(&self, start: u64, end: u64, entry_start: u64, pa: u64) -> bool {
        match self.kind {
            LevelKind::Pages => true,
            LevelKind::TablesOnly => false,
            LevelKind::BlocksOrTables => {
                start == entry_start && end - start == self.span() && pa.is_multiple_of(self.span())
            }
        }
    }
}

/// The long-descriptor levels with the 4 KiB granule, shared by both formats.
pub const LEVELS: [LevelDescription; 4] = [
    LevelDescription { level: 0, shift: 39, kind: LevelKind::TablesOnly },
    LevelDescription { level: 1, shift: 30, kind: LevelKind::BlocksOrTables },
    LevelDescription { level: 2, shift: 21, kind: LevelKind::BlocksOrTables },
    LevelDescription { level: 3, shift: 12, kind: LevelKind::Pages },
];

pub const ENTRIES_PER_TABLE: usize = 512;
/// Concatenated root tables allowed (ARM ARM D8.2.7; ARMv7 ARM B3.6.6).
const MAX_ROOT_TABLES: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TableFormat {
    /// VMSAv8-64, 4 KiB granule. `pa_bits` is ID_AA64MMFR0_EL1.PARange (32, 36, 40, 42, 44,
    /// 48); `ipa_bits` is 32..=48 and at most `pa_bits` (VTCR_EL2.PS bounds the output).
    Vmsav8_64 { ipa_bits: u8, pa_bits: u8 },
    /// ARMv7 LPAE stage 2: 40-bit IPA, 40-bit physical addresses.
    ArmV7Lpae,
}

/// The shape of one VM's tables.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Geometry {
    pub ipa_bits: u8,
    pub pa_bits: u8,
    /// Level of the first lookup (0 to 2).
    pub start_level: u8,
    /// Concatenated tables at the start level (1 to 16).
    pub root_tables: usize,
}

impl Geometry {
    /// The levels the walk goes through, the root level first.
    pub fn levels(&self) -> &'static [LevelDescription] {
        LEVELS.get(usize::from(self.start_level)..).unwrap_or(&[])
    }
    /// The first IPA beyond the IPA space.
    pub fn ipa_limit(&self) -> u64 {
        1 << self.ipa_bits
    }
    pub fn pa_limit(&self) -> u64 {
        1 << self.pa_bits
    }
}

/// The allowed start levels of a VMSAv8-64 stage-2 walk for a `ipa_bits` IPA, with the
/// concatenated tables each needs (`AArch64.S2InconsistentSL` with the 4 KiB granule:
/// stride 9, at least 1 bit and at most 9 + 4 bits resolved at the start level).
pub fn allowed_start_levels(ipa_bits: u8) -> impl Iterator<Item = (u8, usize)> {
    LEVELS.iter().filter_map(move |l| {
        let at_root = u32::from(ipa_bits).checked_sub(l.shift)?;
        let tables = (1usize << at_root).div_ceil(ENTRIES_PER_TABLE);
        (at_root >= 1 && tables <= MAX_ROOT_TABLES && !l.is_last()).then_some((l.level, tables))
    })
}

impl TableFormat {
    pub fn geometry(&self) -> Result<Geometry, Stage2Error> {
        let (ipa_bits, pa_bits) = match *self {
            TableFormat::Vmsav8_64 { ipa_bits, pa_bits } => (ipa_bits, pa_bits),
            TableFormat::ArmV7Lpae => (40, 40),
        };
        let unsupported = Stage2Error::UnsupportedFormat { ipa_bits, pa_bits };
        let supported_pa = [32, 36, 40, 42, 44, 48].contains(&pa_bits);
        if !supported_pa || !(32..=48).contains(&ipa_bits) || ipa_bits > pa_bits {
            return Err(unsupported);
        }
        // The shortest walk: the deepest allowed start level.
        let (start_level, root_tables) = allowed_start_levels(ipa_bits).last().ok_or(unsupported)?;
        Ok(Geometry { ipa_bits, pa_bits, start_level, root_tables })
    }

    /// The VTCR_EL2 value (ARM ARM D24.2 "VTCR_EL2, Virtualization Translation Control
    /// Register") or the ARMv7 VTCR value (ARMv7 ARM B4.1.159 "VTCR, Virtualization
    /// Translation Control Register") for these tables: walks inner shareable, inner and
    /// outer write-back read/write-allocate, 8-bit VMIDs.
    pub fn vtcr(&self, g: &Geometry) -> u64 {
        // IRGN0 [9:8] = 0b01, ORGN0 [11:10] = 0b01 (write-back write-allocate), SH0 [13:12] =
        // 0b11 (inner shareable): the same bits in both registers.
        const WALK_ATTRIBUTES: u64 = (0b01 << 8) | (0b01 << 10) | (0b11 << 12);
        // VTCR_EL2 bit 31 is RES1; ARMv7 VTCR bit 31 is UNK/SBOP (should be written as one).
        const BIT31: u64 = 1 << 31;
        // SL0 [7:6] with the 4 KiB granule: 0b00 = start at level 2, 0b01 = level 1, 0b10 =
        // level 0 (VMSAv8-64 only).
        let sl0 = u64::from(2 - g.start_level.min(2)) << 6;
        match self {
            TableFormat::Vmsav8_64 { .. } => {
                // T0SZ [5:0]; PS [18:16] the PARange encoding; TG0 [15:14] = 0b00: 4 KiB.
                let t0sz = 64 - u64::from(g.ipa_bits);
                let ps: u64 = match g.pa_bits {
                    32 => 0b000,
                    36 => 0b001,
                    40 => 0b010,
                    42 => 0b011,
                    44 => 0b100,
                    _ => 0b101,
                };
                t0sz | sl0 | WALK_ATTRIBUTES | (ps << 16) | BIT31
            }
            // T0SZ [3:0] is a signed field, the IPA being 32 - T0SZ bits: -8 is 0b1000, and
            // S [4] must equal T0SZ[3].
            TableFormat::ArmV7Lpae => 0b1000 | (1 << 4) | sl0 | WALK_ATTRIBUTES | BIT31,
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
    fn start_level_and_concatenation_follow_the_arm_arm_table() {
        // ARM ARM D8.2.7, stage 2 with the 4 KiB granule: (IPA bits, start level, tables).
        let expected = [
            (32, 2, 4),
            (33, 2, 8),
            (34, 2, 16),
            (35, 1, 1),
            (36, 1, 1),
            (39, 1, 1),
            (40, 1, 2),
            (41, 1, 4),
            (42, 1, 8),
            (43, 1, 16),
            (44, 0, 1),
            (47, 0, 1),
            (48, 0, 1),
        ];
        for (bits, level, tables) in expected {
            let g = v8(bits);
            assert_eq!((g.start_level, g.root_tables), (level, tables), "{bits}-bit IPA");
            assert_eq!(g.levels().first().map(|l| l.level), Some(level));
            assert_eq!(g.levels().last().map(|l| l.level), Some(3));
        }
    }

    #[test]
    fn the_start_level_satisfies_the_sl0_consistency_rule() {
        // AArch64.S2InconsistentSL, 4 KiB granule: sl_min = levels * 9 + 12 + 1 and
        // sl_max = sl_min + 8 + 4, where levels = 3 - start level.
        for bits in 32..=48u8 {
            let g = v8(bits);
            let levels = 3 - u32::from(g.start_level);
            let sl_min = levels * 9 + 12 + 1;
            assert!((sl_min..=sl_min + 12).contains(&u32::from(bits)), "{bits}-bit IPA from level {}", g.start_level);
            // The deepest consistent start level: starting one level lower would resolve
            // more than 13 bits at the root.
            if g.start_level < 2 {
                assert!(u32::from(bits) > (levels - 1) * 9 + 12 + 1 + 12, "{bits}-bit IPA could start lower");
            }
            assert_eq!(
                g.root_tables << 9,
                (1usize << (u32::from(bits) - LEVELS[usize::from(g.start_level)].shift)).max(512)
            );
        }
    }

    #[test]
    fn unsupported_sizes_are_refused() {
        for (ipa_bits, pa_bits) in [(31, 40), (49, 48), (44, 40), (40, 41), (40, 52), (0, 0), (255, 255)] {
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
        assert_eq!(v >> 19 & 1, 0, "VS: 8-bit VMID");
        assert_eq!(v >> 31 & 1, 1, "RES1");
        assert_eq!(v, 0x8004_3558);
        // (IPA bits, PA bits) -> (T0SZ, SL0, PS)
        for (ipa_bits, pa_bits, t0sz, sl0, ps) in [
            (32, 32, 32, 0, 0),
            (36, 36, 28, 1, 1),
            (40, 40, 24, 1, 2),
            (42, 42, 22, 1, 3),
            (44, 44, 20, 2, 4),
            (48, 48, 16, 2, 5),
        ] {
            let f = TableFormat::Vmsav8_64 { ipa_bits, pa_bits };
            let v = f.vtcr(&f.geometry().unwrap());
            assert_eq!((v & 0x3f, v >> 6 & 3, v >> 16 & 7), (t0sz, sl0, ps), "{ipa_bits}-bit IPA, {pa_bits}-bit PA");
        }
    }

    #[test]
    fn armv7_lpae_is_40_bits_from_level_1() {
        let f = TableFormat::ArmV7Lpae;
        let g = f.geometry().unwrap();
        assert_eq!((g.ipa_bits, g.pa_bits, g.start_level, g.root_tables), (40, 40, 1, 2));
        let v = f.vtcr(&g);
        assert_eq!(v & 0x1f, 0b1_1000, "T0SZ = -8 with S");
        assert_eq!(v >> 6 & 3, 1, "SL0: level 1");
        assert_eq!(v >> 8 & 0x3f, 0b11_01_01, "SH0, ORGN0, IRGN0");
        assert_eq!(v, 0x8000_3558);
    }
}
