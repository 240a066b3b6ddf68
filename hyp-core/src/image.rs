//! The Linux arm64 `Image` header (Documentation/arch/arm64/booting.rst, "Call the kernel
//! image"): how a guest kernel says where it wants to sit in RAM and how much room it needs.

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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ImageError {
    TooShort {
        len: usize,
    },
    BadMagic {
        found: u32,
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
            Self::BadMagic { found } => write!(f, "not an arm64 Image: magic at offset 0x38 is {found:#010x}, expected 0x644d5241 (\"ARM\\x64\"); pass the raw Image, not vmlinux, a zImage or a compressed file"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
