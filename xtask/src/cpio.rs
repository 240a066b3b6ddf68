//! A `newc` cpio archive writer (the initramfs format Linux unpacks:
//! Documentation/driver-api/early-userspace/buffer-format.rst).

pub struct Cpio {
    out: Vec<u8>,
    inode: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Default for Cpio {
    fn default() -> Self {
        Cpio { out: Vec::new(), inode: 1 }
    }
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        let fields = [self.inode, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, rdev.0, rdev.1, name.len() as u32 + 1, 0];
        self.inode += 1;
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    pub fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, &[], (0, 0));
    }
    pub fn file(&mut self, name: &str, permissions: u32, data: &[u8]) {
        self.entry(name, S_IFREG | permissions, data, (0, 0));
    }
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, S_IFLNK | 0o777, target.as_bytes(), (0, 0));
    }
    pub fn char_device(&mut self, name: &str, permissions: u32, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | permissions, &[], (major, minor));
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_follow_the_newc_layout() {
        let mut c = Cpio::default();
        c.file("init", 0o755, b"hi");
        let out = c.finish();
        assert_eq!(&out[0..6], b"070701");
        // mode field (2nd), file size (7th) and name size (12th), each 8 hex digits.
        assert_eq!(&out[14..22], b"000081ed");
        assert_eq!(&out[54..62], b"00000002");
        assert_eq!(&out[94..102], b"00000005");
        assert_eq!(&out[110..115], b"init\0");
        // header 110 + name 5, padded to 116; data 2, padded to 120: then the trailer.
        assert_eq!(&out[116..118], b"hi");
        assert_eq!(&out[120..126], b"070701");
        assert_eq!(out.len() % 4, 0);
    }
}
