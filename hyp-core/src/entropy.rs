//! Random seeds for the VMs (docs/entropy.md). A guest kernel whose random number generator
//! starts unseeded is slower on every system call until it has gathered entropy (Linux asks
//! its CRNG for a value on each one) and randomizes nothing at boot; the bootloader's way to
//! seed it is the device tree's `/chosen/rng-seed` and `/chosen/kaslr-seed` (Linux:
//! `early_init_dt_scan_chosen` credits `rng-seed` to the CRNG). The hypervisor is the
//! bootloader of its VMs: it derives each VM's seeds from the board's own `rng-seed`.
//!
//! Rules: no two VMs, and no two creations or boots of one VM, get the same seed; a VM's
//! seed tells it nothing about the board's seed or another VM's (each is SHA-256 of the
//! board seed with the VM's index and a count of seeds given, and SHA-256 is one-way); a
//! board without a seed gives its VMs none, rather than a guessable one.

use sha2::{Digest, Sha256};

/// What a VM's `/chosen` gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestSeeds {
    /// `rng-seed`: 32 bytes for the guest's random number generator.
    pub rng_seed: [u8; 32],
    /// `kaslr-seed`: where the guest kernel places itself in its address space.
    pub kaslr_seed: u64,
}

/// The board's seed and how many VM seeds came from it.
pub struct SeedSource {
    board: [u8; 32],
    issued: u64,
}

impl SeedSource {
    /// From the board's `/chosen/rng-seed` bytes; `None` if there are none.
    pub fn from_board_seed(seed: &[u8]) -> Option<SeedSource> {
        if seed.is_empty() {
            return None;
        }
        Some(SeedSource { board: Sha256::digest(seed).into(), issued: 0 })
    }

    /// Fresh seeds for VM `vm`, created now.
    pub fn next_for(&mut self, vm: usize) -> GuestSeeds {
        self.issued += 1;
        let derive = |purpose: &[u8]| -> [u8; 32] {
            Sha256::new()
                .chain_update(b"hypervisor guest seed v1\0")
                .chain_update(purpose)
                .chain_update(self.board)
                .chain_update((vm as u64).to_le_bytes())
                .chain_update(self.issued.to_le_bytes())
                .finalize()
                .into()
        };
        let kaslr = derive(b"kaslr-seed\0");
        GuestSeeds {
            rng_seed: derive(b"rng-seed\0"),
            kaslr_seed: u64::from_le_bytes([
                kaslr[0], kaslr[1], kaslr[2], kaslr[3], kaslr[4], kaslr[5], kaslr[6], kaslr[7],
            ]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn a_board_without_a_seed_gives_none() {
        assert!(SeedSource::from_board_seed(&[]).is_none());
    }

    #[test]
    fn every_vm_and_every_creation_gets_different_seeds() {
        let mut source = SeedSource::from_board_seed(&[7; 32]).unwrap();
        let seeds: Vec<GuestSeeds> = [0, 1, 2, 0, 1, 2].iter().map(|&vm| source.next_for(vm)).collect();
        for (i, a) in seeds.iter().enumerate() {
            for b in &seeds[i + 1..] {
                assert_ne!(a.rng_seed, b.rng_seed);
                assert_ne!(a.kaslr_seed, b.kaslr_seed);
            }
            assert_ne!(&a.rng_seed[..8], &a.kaslr_seed.to_le_bytes(), "the two seeds are independent");
        }
    }

    #[test]
    fn the_seeds_depend_on_the_board_seed_and_reveal_nothing_of_it() {
        let first = SeedSource::from_board_seed(&[1; 32]).unwrap().next_for(0);
        let again = SeedSource::from_board_seed(&[1; 32]).unwrap().next_for(0);
        let other_board = SeedSource::from_board_seed(&[2; 32]).unwrap().next_for(0);
        assert_eq!(first, again, "derived, not drawn from elsewhere");
        assert_ne!(first.rng_seed, other_board.rng_seed);
        assert!(!first.rng_seed.windows(4).any(|w| w == [1; 4]), "no trace of the board's bytes");
    }
}
