//! ELF to a flat image: the loadable segments laid out from the lowest address. An arm64
//! `Image` (ELF64) gets the header's `image_size` set to the whole memory footprint (BSS
//! included), which is what a loader must reserve (Documentation/arch/arm64/booting.rst); a
//! 32-bit zImage (the ARMv7 image) its end address (Documentation/arch/arm/booting.rst).

use object::{Object, ObjectSegment};

use crate::XtaskError;

const IMAGE_SIZE_OFFSET: usize = 16;
const MAGIC_OFFSET: usize = 0x38;
const ARM64_MAGIC: &[u8; 4] = b"ARM\x64";
/// p_flags' execute permission (ELF specification, program header).
const PF_X: u32 = 1;

/// A PT_LOAD segment as the program header describes it.
pub(crate) struct Segment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub flags: u32,
}

/// The PT_LOAD segments of an ELF file (32- or 64-bit: the `object` crate reads both) that
/// take memory.
fn segments(elf: &[u8]) -> Option<Vec<Segment>> {
    let file = object::File::parse(elf).ok()?;
    if file.format() != object::BinaryFormat::Elf {
        return None;
    }
    let segments = file.segments().filter(|s| s.size() > 0).map(|s| {
        let (offset, filesz) = s.file_range();
        let flags = match s.flags() {
            object::SegmentFlags::Elf { p_flags } => p_flags,
            _ => 0,
        };
        Segment { offset, vaddr: s.address(), filesz, memsz: s.size(), flags }
    });
    Some(segments.collect())
}

/// A loadable segment's bytes in the file, where they load, and whether they are code.
pub struct Loaded<'a> {
    pub vaddr: u64,
    pub bytes: &'a [u8],
    pub executable: bool,
}

/// The loadable segments of `elf` that have bytes in the file; None if it is not an ELF
/// file or a segment lies beyond its end.
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

/// The loadable segments of `elf` laid out from the lowest address (the bytes in the file),
/// and the whole memory footprint, BSS included.
fn flatten(elf: &[u8], what: &str) -> Result<(Vec<u8>, u64), XtaskError> {
    let bad = |why: &str| XtaskError::Build(format!("{what}: {why}"));
    let segments = segments(elf).ok_or_else(|| bad("not an ELF file"))?;
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
    Ok((image, mem_end - base))
}

/// The flat image of `elf`, whose first bytes must be an arm64 Image header.
pub fn to_image(elf: &[u8], what: &str) -> Result<Vec<u8>, XtaskError> {
    let (mut image, footprint) = flatten(elf, what)?;
    if image.get(MAGIC_OFFSET..MAGIC_OFFSET + 4) != Some(ARM64_MAGIC.as_slice()) {
        return Err(XtaskError::Build(format!("{what}: the first loadable bytes are not an arm64 Image header")));
    }
    let image_size = footprint.next_multiple_of(4096);
    image[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8].copy_from_slice(&image_size.to_le_bytes());
    Ok(image)
}

/// Where a 32-bit ARM zImage header (arch/arm/boot/compressed/head.S) has its magic number,
/// its start address (0: position independent) and its end address.
const ZIMAGE_MAGIC_OFFSET: usize = 0x24;
const ZIMAGE_MAGIC: u32 = 0x016f_2818;
const ZIMAGE_END_OFFSET: usize = 0x2c;

/// The flat image of a 32-bit `elf` whose first bytes are a zImage header: its end address
/// is set to the image's length, which is what a loader copies (`bootz`). The image zeroes
/// its own BSS, which lies past that end: like a zImage's decompressor, it needs the memory
/// after it free.
pub fn to_zimage(elf: &[u8], what: &str) -> Result<Vec<u8>, XtaskError> {
    let (mut image, _) = flatten(elf, what)?;
    let word = |at: usize| image.get(at..at + 4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    if word(ZIMAGE_MAGIC_OFFSET) != Some(ZIMAGE_MAGIC) {
        return Err(XtaskError::Build(format!("{what}: the first loadable bytes are not a zImage header")));
    }
    let end = u32::try_from(image.len()).map_err(|_| XtaskError::Build(format!("{what}: larger than 4 GiB")))?;
    image[ZIMAGE_END_OFFSET..ZIMAGE_END_OFFSET + 4].copy_from_slice(&end.to_le_bytes());
    Ok(image)
}

/// An ELF64 file of `len` bytes for AArch64 with `segments` as its PT_LOAD program headers
/// (right after its header) and nothing else: the tests' stand-in for a linked image.
#[cfg(test)]
pub(crate) fn elf64(len: usize, segments: &[Segment]) -> Vec<u8> {
    let mut e = vec![0u8; len];
    // ELFCLASS64, ELFDATA2LSB, EV_CURRENT; ET_EXEC for EM_AARCH64; a 64-byte header.
    e[0..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    e[0x10..0x12].copy_from_slice(&2u16.to_le_bytes());
    e[0x12..0x14].copy_from_slice(&183u16.to_le_bytes());
    e[0x14..0x18].copy_from_slice(&1u32.to_le_bytes());
    e[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
    e[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
    e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    e[0x38..0x3a].copy_from_slice(&(segments.len() as u16).to_le_bytes());
    for (i, s) in segments.iter().enumerate() {
        let ph = 0x40 + i * 56;
        e[ph..ph + 4].copy_from_slice(&object::elf::PT_LOAD.to_le_bytes());
        e[ph + 4..ph + 8].copy_from_slice(&s.flags.to_le_bytes());
        for (at, value) in [(8, s.offset), (16, s.vaddr), (32, s.filesz), (40, s.memsz)] {
            e[ph + at..ph + at + 8].copy_from_slice(&value.to_le_bytes());
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with two PT_LOAD segments: a header-bearing text at 0x1000 and a
    /// BSS-only segment after it.
    fn elf() -> Vec<u8> {
        let segments = [
            Segment { offset: 0x100, vaddr: 0x1000, filesz: 0x40, memsz: 0x40, flags: 5 },
            Segment { offset: 0, vaddr: 0x3000, filesz: 0, memsz: 0x2800, flags: 6 },
        ];
        let mut e = elf64(0x200, &segments);
        e[0x100 + MAGIC_OFFSET..0x100 + MAGIC_OFFSET + 4].copy_from_slice(ARM64_MAGIC);
        e[0x100] = 0xaa;
        e
    }

    #[test]
    fn segments_are_laid_out_flat_and_image_size_covers_bss() {
        let image = to_image(&elf(), "test").unwrap();
        assert_eq!(image.len(), 0x40);
        assert_eq!(image[0], 0xaa);
        assert_eq!(
            image[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8],
            0x5000u64.to_le_bytes(),
            "0x5800 - 0x1000 rounded up to 4 KiB"
        );
    }

    #[test]
    fn non_elf_and_headerless_files_are_refused() {
        assert!(to_image(b"not an elf", "x").is_err());
        let mut e = elf();
        e[0x100 + MAGIC_OFFSET] = 0;
        assert!(to_image(&e, "x").unwrap_err().to_string().contains("not an arm64 Image header"));
    }

    /// An ELF32 for ARM (an ARMv7 image) with one executable PT_LOAD segment of `len` bytes
    /// at file offset 0x80, loaded at 0x8000 (and a BSS of 0x1000 after it).
    fn elf32(len: u32) -> Vec<u8> {
        let mut e = vec![0u8; 0x80 + len as usize];
        e[0..7].copy_from_slice(b"\x7fELF\x01\x01\x01");
        e[0x10..0x12].copy_from_slice(&2u16.to_le_bytes());
        e[0x12..0x14].copy_from_slice(&40u16.to_le_bytes());
        e[0x14..0x18].copy_from_slice(&1u32.to_le_bytes());
        e[0x1c..0x20].copy_from_slice(&0x34u32.to_le_bytes());
        e[0x28..0x2a].copy_from_slice(&52u16.to_le_bytes());
        e[0x2a..0x2c].copy_from_slice(&32u16.to_le_bytes());
        e[0x2c..0x2e].copy_from_slice(&1u16.to_le_bytes());
        let ph = 0x34;
        for (at, value) in
            [(0, object::elf::PT_LOAD), (4, 0x80), (8, 0x8000), (16, len), (20, len + 0x1000), (24, PF_X)]
        {
            e[ph + at..ph + at + 4].copy_from_slice(&value.to_le_bytes());
        }
        e
    }

    #[test]
    fn a_32_bit_elf_s_segments_are_read() {
        let mut e = elf32(16);
        e[0x80..0x90].fill(0x5a);
        let loaded = loadable(&e).unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!((loaded[0].vaddr, loaded[0].bytes, loaded[0].executable), (0x8000, &[0x5a; 16][..], true));
    }

    #[test]
    fn a_zimage_s_end_is_its_length_and_its_magic_is_checked() {
        let mut e = elf32(0x40);
        e[0x80 + ZIMAGE_MAGIC_OFFSET..0x80 + ZIMAGE_MAGIC_OFFSET + 4].copy_from_slice(&ZIMAGE_MAGIC.to_le_bytes());
        let image = to_zimage(&e, "test").unwrap();
        assert_eq!(image.len(), 0x40, "the BSS is not in the file");
        assert_eq!(image[ZIMAGE_END_OFFSET..ZIMAGE_END_OFFSET + 4], 0x40u32.to_le_bytes());
        assert_eq!(image[ZIMAGE_MAGIC_OFFSET..ZIMAGE_MAGIC_OFFSET + 4], [0x18, 0x28, 0x6f, 0x01]);
        assert!(to_zimage(&elf32(0x40), "x").unwrap_err().to_string().contains("not a zImage header"));
        assert!(to_image(&e, "x").is_err(), "not an arm64 Image");
    }
}
