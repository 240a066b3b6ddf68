//! The guest of tests/tests/faults.rs whose board disk fails some requests (QEMU's blkdebug):
//! it reads the first 4 MiB of its disk and writes the next 4 MiB in 64 KiB requests and
//! says which got an I/O error; every request must end OK or with VIRTIO_BLK_S_IOERR (never
//! a device that needs a reset, never silence), and the disk must work after the errors.
#![no_std]
#![no_main]

use selftest_guest::virtio::*;
use selftest_guest::*;

const QUEUE: usize = 0x4100_0000;
const BUFFER: usize = 0x4110_0000;
const CHUNK: u32 = 64 * 1024;
const CHUNKS: u64 = 64;

/// Runs `CHUNKS` requests of `kind` from `first_sector`: (OK, IOERR, other, first IOERR's sector).
fn sweep(blk: &Block, kind: u32, first_sector: u64) -> (u32, u32, u32, Option<u64>) {
    let (mut ok, mut ioerr, mut other, mut first) = (0, 0, 0, None);
    let written = if kind == BLK_T_IN { CHUNK + 1 } else { 1 };
    for chunk in 0..CHUNKS {
        let sector = first_sector + chunk * u64::from(CHUNK) / 512;
        match blk.transfer(kind, sector, BUFFER, CHUNK) {
            Completion::Used { status: BLK_S_OK, written: w } if w == written => ok += 1,
            Completion::Used { status: BLK_S_IOERR, .. } => {
                ioerr += 1;
                first = first.or(Some(sector));
            }
            got => {
                other += 1;
                println!("# sector {sector}: {got:?}");
            }
        }
    }
    (ok, ioerr, other, first)
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let Some(blk) = Block::new(QUEUE) else {
        c.check(false, format_args!("disk-faults: its disk"));
        finish("disk-faults", &c)
    };
    for (kind, name, first_sector) in [(BLK_T_IN, "reads", 0), (BLK_T_OUT, "writes", 8192)] {
        let (ok, ioerr, other, first) = sweep(&blk, kind, first_sector);
        let first = first.map_or(-1, |s| s as i64);
        c.check(
            other == 0,
            format_args!("disk-faults: {name} of {CHUNKS} x 64 KiB: {ok} OK, {ioerr} IOERR (first at sector {first})"),
        );
    }
    let after = blk.transfer(BLK_T_IN, 0, BUFFER, 4096);
    c.check(
        after == Completion::Used { status: BLK_S_OK, written: 4097 },
        format_args!("disk-faults: a read after the errors: {after:?}"),
    );
    finish("disk-faults", &c)
}
