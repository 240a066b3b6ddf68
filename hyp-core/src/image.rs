//! A guest kernel's header: how it says which execution state it runs in, where it wants
//! to sit in RAM and how much room it needs. An arm64 `Image` (Documentation/arch/arm64/
//! booting.rst, "Call the kernel image") runs in AArch64; a 32-bit ARM `zImage`
//! (Documentation/arch/arm/booting.rst, "Calling the kernel image", and the header that
//! arch/arm/boot/compressed/head.S writes) in AArch32.

use core::fmt;

pub const HEADER_SIZE: usize = 64;
/// "ARM\x64", little-endian at offset 0x38.
pub const MAGIC: u32 = 0x644d_5241;
/// booting.rst: "if image_size is zero, a text_offset of 0x80000 is to be assumed".
const LEGACY_TEXT_OFFSET: u64 = 0x8_0000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Arm64Image {
    pub text_offset: u64,
    /// Bytes the kernel occupies from its load address, including BSS (at least the file).
    pub image_size: u64,
    pub flags: u64,
}

/// The execution state a guest's kernel starts in (ARM ARM D1.1): its EL1 is AArch64 or
/// AArch32, and so is its EL0.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExecutionState {
    Aarch64,
    Aarch32,
}

/// "zImage" magic at offset 0x24 of a 32-bit ARM kernel (head.S, `_magic_sig`).
pub const ZIMAGE_MAGIC: u32 = 0x016f_2818;
/// At 0x30: the endianness flag as a little-endian kernel writes it.
const ZIMAGE_LITTLE_ENDIAN: u32 = 0x0403_0201;
/// At 0x34: the header has a table of tags, its offset at 0x38 (head.S, `_magic_table`).
const ZIMAGE_TABLE_MARK: u32 = 0x4545_4545;
/// The table's tag giving the decompressed kernel's size and BSS size ("KLSZ").
const ZIMAGE_TAG_KERNEL_SIZE: u32 = 0x5a53_4c4b;
/// booting.rst: the decompressed kernel goes at the start of RAM plus 32 KiB.
const ZIMAGE_TEXT_OFFSET: u64 = 0x8000;
/// booting.rst: "It is recommended that [the zImage] is loaded above 32MiB in order to
/// avoid the need to relocate prior to decompression".
const ZIMAGE_LOAD_OFFSET: u64 = 32 << 20;
/// What the decompressor uses past the zImage's end: its stack, and its heap (64 KiB,
/// arch/arm/boot/compressed/Makefile MALLOC_SIZE), rounded up generously.
const ZIMAGE_DECOMPRESSOR_ROOM: u64 = 1 << 20;

/// A 32-bit ARM `zImage`: self-decompressing, position independent.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ZImage {
    /// The file's size (head.S `_magic_end - _magic_start`).
    pub size: u64,
    /// The decompressed kernel's size with its BSS, when the header's table says it.
    pub decompressed: Option<u64>,
}

/// A guest kernel of either execution state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KernelImage {
    Arm64(Arm64Image),
    Arm32(ZImage),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ImageError {
    TooShort {
        len: usize,
    },
    BadMagic {
        found: u32,
    },
    /// A zImage header that contradicts itself or the file.
    BadZImage {
        reason: &'static str,
    },
    BigEndian,
    /// The kernel and its BSS do not fit in the VM's RAM.
    TooBig {
        needed: u64,
        ram: u64,
    },
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { len } => write!(f, "the kernel file has {len} bytes, less than an arm64 Image header (64)"),
            Self::BadMagic { found } => write!(f, "neither an arm64 Image (magic at offset 0x38 is {found:#010x}, expected 0x644d5241, \"ARM\\x64\") nor a 32-bit ARM zImage (0x016f2818 at offset 0x24); pass the raw Image or the zImage, not vmlinux or a compressed file"),
            Self::BadZImage { reason } => write!(f, "a broken 32-bit ARM zImage: {reason}"),
            Self::BigEndian => write!(f, "the kernel is big-endian; only little-endian guests are supported"),
            Self::TooBig { needed, ram } => write!(f, "the kernel needs {needed:#x} bytes from the start of RAM but the VM has {ram:#x}; give the VM more memory"),
        }
    }
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

impl Arm64Image {
    pub fn parse(file: &[u8]) -> Result<Self, ImageError> {
        if file.len() < HEADER_SIZE {
            return Err(ImageError::TooShort { len: file.len() });
        }
        let magic = u32::from_le_bytes([file[0x38], file[0x39], file[0x3a], file[0x3b]]);
        if magic != MAGIC {
            return Err(ImageError::BadMagic { found: magic });
        }
        let (mut text_offset, mut image_size, flags) = (le_u64(file, 8), le_u64(file, 16), le_u64(file, 24));
        if image_size == 0 {
            text_offset = LEGACY_TEXT_OFFSET;
        }
        if flags & 1 != 0 {
            return Err(ImageError::BigEndian);
        }
        image_size = image_size.max(file.len() as u64);
        Ok(Arm64Image { text_offset, image_size, flags })
    }

    /// The kernel's offset from the (2 MiB-aligned) start of a RAM region of `ram` bytes,
    /// checking it fits with its BSS.
    pub fn load_offset(&self, ram: u64) -> Result<u64, ImageError> {
        let needed = self.text_offset.saturating_add(self.image_size);
        if needed > ram {
            return Err(ImageError::TooBig { needed, ram });
        }
        Ok(self.text_offset)
    }
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

impl ZImage {
    pub fn parse(file: &[u8]) -> Result<Self, ImageError> {
        if file.len() < 0x34 {
            return Err(ImageError::TooShort { len: file.len() });
        }
        let word = |at| le_u32(file, at).ok_or(ImageError::TooShort { len: file.len() });
        if word(0x24)? != ZIMAGE_MAGIC {
            return Err(ImageError::BadMagic { found: le_u32(file, 0x38).unwrap_or(0) });
        }
        let (start, end) = (word(0x28)?, word(0x2c)?);
        let size = u64::from(end.wrapping_sub(start));
        if end < start || size > file.len() as u64 || size < 0x30 {
            return Err(ImageError::BadZImage {
                reason: "its start and end addresses (at 0x28, 0x2c) do not fit the file",
            });
        }
        if word(0x30)? != ZIMAGE_LITTLE_ENDIAN {
            return Err(ImageError::BigEndian);
        }
        Ok(ZImage { size, decompressed: Self::decompressed_size(file, size)? })
    }

    /// The "KLSZ" tag of the header's table, if it has one: the decompressed kernel's size
    /// (a word inside the zImage, at the offset the tag names) plus its BSS.
    fn decompressed_size(file: &[u8], size: u64) -> Result<Option<u64>, ImageError> {
        if le_u32(file, 0x34) != Some(ZIMAGE_TABLE_MARK) {
            return Ok(None);
        }
        let broken = ImageError::BadZImage { reason: "its table of tags (offset at 0x38) lies outside it" };
        let at = le_u32(file, 0x38).ok_or(broken)? as usize;
        // The first tag; its words follow its magic. Today's kernels write only this one.
        match le_u32(file, at).filter(|_| (at as u64) < size).ok_or(broken)? {
            ZIMAGE_TAG_KERNEL_SIZE => {
                let size_at = le_u32(file, at + 4).ok_or(broken)? as usize;
                let bss = le_u32(file, at + 8).ok_or(broken)?;
                let kernel = le_u32(file, size_at).ok_or(broken)?;
                Ok(Some(u64::from(kernel) + u64::from(bss)))
            }
            _ => Ok(None),
        }
    }

    /// Where in a RAM region of `ram` bytes the zImage goes: above the kernel it
    /// decompresses at the start of RAM, so it never has to move itself first.
    pub fn load_offset(&self, ram: u64) -> Result<u64, ImageError> {
        let kernel_end = ZIMAGE_TEXT_OFFSET + self.decompressed.unwrap_or(0);
        let offset = ZIMAGE_LOAD_OFFSET.max(kernel_end.next_multiple_of(2 << 20));
        let needed = offset.saturating_add(self.footprint());
        if needed > ram {
            return Err(ImageError::TooBig { needed, ram });
        }
        Ok(offset)
    }

    /// The bytes from its load address that the zImage and its decompressor use.
    pub fn footprint(&self) -> u64 {
        self.size + ZIMAGE_DECOMPRESSOR_ROOM
    }
}

impl KernelImage {
    /// An arm64 Image or a zImage, as its header says.
    pub fn parse(file: &[u8]) -> Result<Self, ImageError> {
        if le_u32(file, 0x24) == Some(ZIMAGE_MAGIC) {
            return ZImage::parse(file).map(KernelImage::Arm32);
        }
        Arm64Image::parse(file).map(KernelImage::Arm64)
    }

    pub fn execution_state(&self) -> ExecutionState {
        match self {
            KernelImage::Arm64(_) => ExecutionState::Aarch64,
            KernelImage::Arm32(_) => ExecutionState::Aarch32,
        }
    }

    /// The kernel's offset in a RAM region of `ram` bytes and the bytes it takes from
    /// there (with its BSS, or the decompressor's room).
    pub fn placement(&self, ram: u64) -> Result<(u64, u64), ImageError> {
        match self {
            KernelImage::Arm64(image) => Ok((image.load_offset(ram)?, image.image_size)),
            KernelImage::Arm32(image) => Ok((image.load_offset(ram)?, image.footprint())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn header(text_offset: u64, image_size: u64, flags: u64) -> [u8; 64] {
        let mut h = [0u8; 64];
        h[8..16].copy_from_slice(&text_offset.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[24..32].copy_from_slice(&flags.to_le_bytes());
        h[0x38..0x3c].copy_from_slice(&MAGIC.to_le_bytes());
        h
    }

    #[test]
    fn a_modern_header_is_read() {
        let img = Arm64Image::parse(&header(0, 0x200_0000, 0b1010)).unwrap();
        assert_eq!(img, Arm64Image { text_offset: 0, image_size: 0x200_0000, flags: 0b1010 });
        assert_eq!(img.load_offset(0x400_0000), Ok(0));
    }

    #[test]
    fn a_zero_image_size_means_the_legacy_text_offset() {
        let img = Arm64Image::parse(&header(0x1234, 0, 0)).unwrap();
        assert_eq!(img.text_offset, 0x8_0000);
        assert_eq!(img.image_size, 64);
    }

    #[test]
    fn bad_images_are_refused_with_a_reason() {
        assert_eq!(Arm64Image::parse(&[0; 10]), Err(ImageError::TooShort { len: 10 }));
        assert_eq!(Arm64Image::parse(&[0; 64]), Err(ImageError::BadMagic { found: 0 }));
        assert_eq!(Arm64Image::parse(&header(0, 64, 1)), Err(ImageError::BigEndian));
        let img = Arm64Image::parse(&header(0x8_0000, 0x100_0000, 0)).unwrap();
        assert_eq!(img.load_offset(0x100_0000), Err(ImageError::TooBig { needed: 0x108_0000, ram: 0x100_0000 }));
    }

    /// A zImage header as head.S writes it, with a "KLSZ" table when `decompressed` is given
    /// (kernel size word at 0x100, BSS size in the tag).
    fn zimage(size: u32, decompressed: Option<(u32, u32)>) -> Vec<u8> {
        let mut f = vec![0u8; size as usize];
        let mut put = |at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put(0x24, ZIMAGE_MAGIC);
        put(0x28, 0);
        put(0x2c, size);
        put(0x30, ZIMAGE_LITTLE_ENDIAN);
        if let Some((kernel, bss)) = decompressed {
            put(0x34, ZIMAGE_TABLE_MARK);
            put(0x38, 0x80);
            put(0x80, ZIMAGE_TAG_KERNEL_SIZE);
            put(0x84, 0x100);
            put(0x88, bss);
            put(0x100, kernel);
        }
        f
    }

    #[test]
    fn a_zimage_is_an_aarch32_kernel_placed_above_what_it_decompresses() {
        let small = KernelImage::parse(&zimage(0x1000, Some((20 << 20, 1 << 20)))).unwrap();
        assert_eq!(small.execution_state(), ExecutionState::Aarch32);
        assert_eq!(small, KernelImage::Arm32(ZImage { size: 0x1000, decompressed: Some(21 << 20) }));
        assert_eq!(small.placement(512 << 20), Ok((32 << 20, 0x1000 + (1 << 20))));
        // A kernel that decompresses past 32 MiB pushes the zImage up, 2 MiB-aligned.
        let big = KernelImage::parse(&zimage(0x1000, Some((40 << 20, 1 << 20)))).unwrap();
        assert_eq!(big.placement(512 << 20), Ok((42 << 20, 0x1000 + (1 << 20))));
        assert_eq!(
            big.placement(40 << 20),
            Err(ImageError::TooBig { needed: (42 << 20) + 0x1000 + (1 << 20), ram: 40 << 20 })
        );
        // Without the table, the recommended 32 MiB.
        let plain = KernelImage::parse(&zimage(0x1000, None)).unwrap();
        assert_eq!(plain.placement(64 << 20), Ok((32 << 20, 0x1000 + (1 << 20))));
        let arm64 = KernelImage::parse(&header(0, 0x200_0000, 0)).unwrap();
        assert_eq!(arm64.execution_state(), ExecutionState::Aarch64);
    }

    #[test]
    fn broken_zimages_are_refused_with_a_reason() {
        let mut f = zimage(0x1000, None);
        f[0x2c..0x30].copy_from_slice(&0x2000u32.to_le_bytes());
        assert!(matches!(KernelImage::parse(&f), Err(ImageError::BadZImage { .. })), "end past the file");
        let mut f = zimage(0x1000, Some((1, 1)));
        f[0x38..0x3c].copy_from_slice(&0x4000u32.to_le_bytes());
        assert!(matches!(KernelImage::parse(&f), Err(ImageError::BadZImage { .. })), "table past the file");
        let mut f = zimage(0x1000, None);
        f[0x30..0x34].copy_from_slice(&0x0102_0304u32.to_le_bytes());
        assert_eq!(KernelImage::parse(&f), Err(ImageError::BigEndian));
        assert_eq!(KernelImage::parse(&zimage(0x1000, None)[..0x30]), Err(ImageError::TooShort { len: 0x30 }));
        let e = KernelImage::parse(&[0; 64]).unwrap_err().to_string();
        assert!(e.contains("neither an arm64 Image") && e.contains("zImage"), "{e}");
    }
}
