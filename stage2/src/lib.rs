//! Stage-2 translation tables. (Being written.)
#![cfg_attr(not(test), no_std)]
