//! The copy of the distributor's control words the AArch64 vector answers from
//! (`ControlWords`, docs/vgic.md "The control words answered in the vector") against the
//! distributor itself, after any guest's writes: the copy's rule (refreshed after a write
//! at offsets 0x000-0x00f only) must never leave it behind what a read under the lock says.

mod common;

use common::*;
use proptest::prelude::*;
use vgic::*;

fn width() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1usize), Just(2), Just(4), Just(8)]
}

/// Offsets anywhere in the frames, often among the four words.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..0x20, 0u64..0x1_0000, Just(u64::MAX - 3)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn the_copy_reads_as_the_distributor_after_any_writes(
        v2_gic in any::<bool>(),
        writes in prop::collection::vec((offset(), width(), any::<u64>(), 0usize..3, any::<bool>()), 1..40),
    ) {
        let version = if v2_gic { GicVersion::V2 } else { GicVersion::V3 };
        let mut d = gic(version, 2);
        let words = ControlWords::new(&d);
        for (offset, width, value, vcpu, redistributor) in writes {
            if redistributor {
                // Not followed by a refresh: the redistributors' frames hold none of them.
                let _ = d.write_redistributor(offset % (2 * GICR_FRAME_SIZE), width, value);
            } else {
                // vCPU 2 does not exist: refused, and the copy still follows the rule.
                let _ = d.write(vcpu, offset, width, value);
                words.after_write(&d, offset);
            }
            for offset in (0..CONTROL_WORDS_END).step_by(4) {
                for reader in 0..2 {
                    prop_assert_eq!(words.read(offset).map(u64::from), d.read(reader, offset, 4).ok(), "offset {:#x}", offset);
                }
            }
        }
    }
}
