//! Virtual GIC. (Being written.)
#![cfg_attr(not(test), no_std)]
