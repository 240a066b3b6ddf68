//! A reader of the flattened device tree a guest is given (Devicetree Specification 0.4,
//! chapter 5): its header checked, and the `compatible` of a child of the root found, which
//! is all a test guest asks of it (which GIC its `/intc` is).

/// The header's magic, big-endian at offset 0.
pub const MAGIC: u32 = 0xd00d_feed;
const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROP: u32 = 3;
const NOP: u32 = 4;
const END: u32 = 9;

/// A device tree blob whose header was checked: the structure and strings blocks lie in it.
pub struct Fdt<'a> {
    structure: &'a [u8],
    strings: &'a [u8],
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The NUL-terminated string at `at`, and the offset past its NUL.
fn c_string(bytes: &[u8], at: usize) -> Option<(&str, usize)> {
    let rest = bytes.get(at..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    Some((core::str::from_utf8(&rest[..len]).ok()?, at + len + 1))
}

impl<'a> Fdt<'a> {
    /// The tree in `blob`, if its header has the magic and its blocks lie within it; else
    /// the first word found (the magic that was not there).
    pub fn new(blob: &'a [u8]) -> Result<Self, u32> {
        let magic = be32(blob, 0).unwrap_or(0);
        let field = |n: usize| be32(blob, 4 * n).map(|v| v as usize);
        let parse = || -> Option<Self> {
            let total = field(1)?;
            let blob = blob.get(..total)?;
            let (structure, strings) = (field(2)?, field(3)?);
            let (strings_size, structure_size) = (field(8)?, field(9)?);
            Some(Fdt {
                structure: blob.get(structure..structure.checked_add(structure_size)?)?,
                strings: blob.get(strings..strings.checked_add(strings_size)?)?,
            })
        };
        if magic != MAGIC {
            return Err(magic);
        }
        parse().ok_or(magic)
    }

    /// The tree at `addr` in the guest's memory.
    ///
    /// # Safety
    /// `addr` must be 4-byte aligned readable memory of at least 8 bytes and, if they begin
    /// with the magic, of the `totalsize` bytes the header gives, which nothing writes while
    /// the tree is used.
    pub unsafe fn at(addr: usize) -> Result<Fdt<'static>, u32> {
        // SAFETY: the caller's promise: 8 readable bytes.
        let header = unsafe { core::ptr::read_volatile(addr as *const [u32; 2]) };
        let (magic, total) = (u32::from_be(header[0]), u32::from_be(header[1]));
        if magic != MAGIC {
            return Err(magic);
        }
        // SAFETY: the caller's promise: `totalsize` readable bytes, not written meanwhile.
        Fdt::new(unsafe { core::slice::from_raw_parts(addr as *const u8, total as usize) })
    }

    /// The first string of the `compatible` property of the root's child named `name` (or
    /// `name@<unit address>`).
    pub fn root_child_compatible(&self, name: &str) -> Option<&'a str> {
        self.root_child_string(name, "compatible")
    }

    /// The first string of property `property` of the root's child named `name` (or
    /// `name@<unit address>`): `/chosen`'s `bootargs`, say.
    pub fn root_child_string(&self, name: &str, property: &str) -> Option<&'a str> {
        let s = self.structure;
        let (mut at, mut depth, mut wanted) = (0usize, 0usize, false);
        loop {
            let token = be32(s, at)?;
            at += 4;
            match token {
                BEGIN_NODE => {
                    let (node, end) = c_string(s, at)?;
                    at = end.next_multiple_of(4);
                    depth += 1;
                    if depth == 2 {
                        wanted = node == name || node.strip_prefix(name).is_some_and(|r| r.starts_with('@'));
                    }
                }
                END_NODE => depth = depth.checked_sub(1)?,
                PROP => {
                    let (len, name_at) = (be32(s, at)? as usize, be32(s, at + 4)? as usize);
                    let value = s.get(at + 8..at + 8 + len)?;
                    at = (at + 8 + len).next_multiple_of(4);
                    if depth == 2 && wanted && c_string(self.strings, name_at)?.0 == property {
                        return c_string(value, 0).map(|(first, _)| first);
                    }
                }
                NOP => {}
                END => return None,
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree: / { compatible; intc@8000000 { compatible = "arm,gic-v3", "x"; its { compatible = "its" } };
    /// uart { compatible = "arm,pl011" } }.
    fn blob() -> Vec<u8> {
        let strings = b"compatible\0#cells\0bootargs\0".to_vec();
        let mut s = Vec::new();
        let word = |s: &mut Vec<u8>, w: u32| s.extend_from_slice(&w.to_be_bytes());
        let node = |s: &mut Vec<u8>, name: &str| {
            word(s, BEGIN_NODE);
            s.extend_from_slice(name.as_bytes());
            s.push(0);
            s.resize(s.len().next_multiple_of(4), 0);
        };
        let prop = |s: &mut Vec<u8>, name_at: u32, value: &[u8]| {
            word(s, PROP);
            word(s, value.len() as u32);
            word(s, name_at);
            s.extend_from_slice(value);
            s.resize(s.len().next_multiple_of(4), 0);
        };
        node(&mut s, "");
        prop(&mut s, 0, b"linux,dummy-virt\0");
        node(&mut s, "its-parent");
        node(&mut s, "intc");
        prop(&mut s, 0, b"nested\0");
        word(&mut s, END_NODE);
        word(&mut s, END_NODE);
        node(&mut s, "intc@8000000");
        word(&mut s, NOP);
        prop(&mut s, 11, b"\0\0\0\x02");
        node(&mut s, "its@8080000");
        prop(&mut s, 0, b"arm,gic-v3-its\0");
        word(&mut s, END_NODE);
        prop(&mut s, 0, b"arm,gic-v3\0x\0");
        word(&mut s, END_NODE);
        node(&mut s, "pl011@9000000");
        prop(&mut s, 0, b"arm,pl011\0arm,primecell\0");
        word(&mut s, END_NODE);
        node(&mut s, "chosen");
        prop(&mut s, 18, b"trace=64\0");
        word(&mut s, END_NODE);
        word(&mut s, END_NODE);
        word(&mut s, END);
        let (structure_at, strings_at) = (40usize, 40 + s.len());
        let total = strings_at + strings.len();
        let mut b = Vec::new();
        for w in [MAGIC, total as u32, structure_at as u32, strings_at as u32, 40, 17, 16, 0] {
            word(&mut b, w);
        }
        word(&mut b, strings.len() as u32);
        word(&mut b, s.len() as u32);
        b.extend_from_slice(&s);
        b.extend_from_slice(&strings);
        b
    }

    #[test]
    fn a_root_child_s_compatible_is_found_by_its_name_not_a_grandchild_s() {
        let b = blob();
        let fdt = Fdt::new(&b).unwrap();
        assert_eq!(fdt.root_child_compatible("intc"), Some("arm,gic-v3"), "not the nested intc's, not the its'");
        assert_eq!(fdt.root_child_compatible("pl011"), Some("arm,pl011"));
        assert_eq!(fdt.root_child_compatible("its"), None, "a grandchild");
        assert_eq!(fdt.root_child_compatible("int"), None, "a prefix of the name is not the name");
    }

    #[test]
    fn any_string_property_of_a_root_child_is_found() {
        let b = blob();
        let fdt = Fdt::new(&b).unwrap();
        assert_eq!(fdt.root_child_string("chosen", "bootargs"), Some("trace=64"));
        assert_eq!(fdt.root_child_string("chosen", "compatible"), None);
        assert_eq!(fdt.root_child_string("pl011", "bootargs"), None);
    }

    #[test]
    fn a_bad_header_is_refused() {
        let b = blob();
        assert_eq!(Fdt::new(&b[..3]).err(), Some(0));
        let mut bad = b.clone();
        bad[0] = 0;
        assert_eq!(Fdt::new(&bad).err(), Some(0x000d_feed));
        assert!(Fdt::new(&b[..b.len() - 1]).is_err(), "totalsize beyond the blob");
        let mut truncated = b.clone();
        truncated[36..40].copy_from_slice(&4096u32.to_be_bytes());
        assert!(Fdt::new(&truncated).is_err(), "a structure block beyond the blob");
    }
}
