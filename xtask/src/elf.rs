//! ELF64 to a flat arm64 `Image`: the loadable segments laid out from the lowest address,
//! and the header's `image_size` set to the whole memory footprint (BSS included), which
//! is what a loader must reserve (Documentation/arch/arm64/booting.rst).

use crate::XtaskError;

const PT_LOAD: u32 = 1;
const IMAGE_SIZE_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 0x38;
const ARM64_MAGIC: &[u8; 4] = b"ARM\x64";

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

const PF_X: u32 = 1;

struct Segment {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    flags: u32,
}

fn segments(elf: &[u8]) -> Option<Vec<Segment>> {
    if elf.get(0..4)? != b"\x7fELF" || *elf.get(4)? != 2 {
        return None;
    }
    let phoff = u64_at(elf, 0x20)? as usize;
    let phentsize = u16_at(elf, 0x36)? as usize;
    let phnum = u16_at(elf, 0x38)? as usize;
    let mut out = Vec::new();
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(elf, ph)? != PT_LOAD {
            continue;
        }
        let s = Segment {
            flags: u32_at(elf, ph + 4)?,
            offset: u64_at(elf, ph + 8)?,
            vaddr: u64_at(elf, ph + 16)?,
            filesz: u64_at(elf, ph + 32)?,
            memsz: u64_at(elf, ph + 40)?,
        };
        if s.memsz > 0 {
            out.push(s);
        }
    }
    Some(out)
}

/// A loadable segment's bytes in the file, where they load, and whether they are code.
pub struct Loaded<'a> {
    pub vaddr: u64,
    pub bytes: &'a [u8],
    pub executable: bool,
}

/// The loadable segments of `elf` that have bytes in the file; None if it is not a 64-bit
/// ELF file or a segment lies beyond its end.
pub fn loadable(elf: &[u8]) -> Option<Vec<Loaded<'_>>> {
    segments(elf)?
        .iter()
        .filter(|s| s.filesz > 0)
        .map(|s| {
            let bytes =
                elf.get(usize::try_from(s.offset).ok()?..usize::try_from(s.offset.checked_add(s.filesz)?).ok()?)?;
            Some(Loaded { vaddr: s.vaddr, bytes, executable: s.flags & PF_X != 0 })
        })
        .collect()
}

/// The flat image of `elf`, whose first bytes must be an arm64 Image header.
pub fn to_image(elf: &[u8], what: &str) -> Result<Vec<u8>, XtaskError> {
    let bad = |why: &str| XtaskError::Build(format!("{what}: {why}"));
    let segments = segments(elf).ok_or_else(|| bad("not a 64-bit ELF file"))?;
    let base = segments.iter().map(|s| s.vaddr).min().ok_or_else(|| bad("no loadable segment"))?;
    let file_end = segments.iter().filter(|s| s.filesz > 0).map(|s| s.vaddr + s.filesz).max().unwrap_or(base);
    let mem_end = segments.iter().map(|s| s.vaddr + s.memsz).max().unwrap_or(base);
    let mut image = vec![0u8; (file_end - base) as usize];
    for s in segments.iter().filter(|s| s.filesz > 0) {
        let src = elf
            .get(s.offset as usize..(s.offset + s.filesz) as usize)
            .ok_or_else(|| bad("segment beyond the end of the file"))?;
        let at = (s.vaddr - base) as usize;
        image[at..at + src.len()].copy_from_slice(src);
    }
    if image.get(MAGIC_OFFSET..MAGIC_OFFSET + 4) != Some(ARM64_MAGIC.as_slice()) {
        return Err(bad("the first loadable bytes are not an arm64 Image header"));
    }
    let image_size = (mem_end - base).next_multiple_of(4096);
    image[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8].copy_from_slice(&image_size.to_le_bytes());
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with two PT_LOAD segments: a header-bearing text at 0x1000 and a
    /// BSS-only segment after it.
    fn elf() -> Vec<u8> {
        let mut e = vec![0u8; 0x200];
        e[0..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        let ph = |e: &mut Vec<u8>, at: usize, offset: u64, vaddr: u64, filesz: u64, memsz: u64| {
            e[at..at + 4].copy_from_slice(&PT_LOAD.to_le_bytes());
            e[at + 8..at + 16].copy_from_slice(&offset.to_le_bytes());
            e[at + 16..at + 24].copy_from_slice(&vaddr.to_le_bytes());
            e[at + 32..at + 40].copy_from_slice(&filesz.to_le_bytes());
            e[at + 40..at + 48].copy_from_slice(&memsz.to_le_bytes());
        };
        ph(&mut e, 0x40, 0x100, 0x1000, 0x40, 0x40);
        ph(&mut e, 0x40 + 56, 0, 0x3000, 0, 0x2800);
        e[0x100 + MAGIC_OFFSET..0x100 + MAGIC_OFFSET + 4].copy_from_slice(ARM64_MAGIC);
        e[0x100] = 0xaa;
        e
    }

    #[test]
    fn segments_are_laid_out_flat_and_image_size_covers_bss() {
        let image = to_image(&elf(), "test").unwrap();
        assert_eq!(image.len(), 0x40);
        assert_eq!(image[0], 0xaa);
        assert_eq!(u64_at(&image, IMAGE_SIZE_OFFSET), Some(0x5000), "0x5800 - 0x1000 rounded up to 4 KiB");
    }

    #[test]
    fn non_elf_and_headerless_files_are_refused() {
        assert!(to_image(b"not an elf", "x").is_err());
        let mut e = elf();
        e[0x100 + MAGIC_OFFSET] = 0;
        assert!(to_image(&e, "x").unwrap_err().to_string().contains("not an arm64 Image header"));
    }
}
