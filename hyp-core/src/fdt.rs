//! A reader of flattened device trees (the Devicetree Specification v0.4, chapter 5, "Flattened
//! Devicetree (DTB) Format") that cannot panic on any input: the board's tree, the boot
//! bundle and a user's `--dtb` all come from outside the hypervisor.
//!
//! [`Fdt::new`] checks the whole blob once (header, memory reservation block, every token of
//! the structure block, every property name in the strings block, nesting, properties before
//! subnodes), so walking a tree it accepted is total. The walks still read with checked slice
//! access: a tree that somehow passed the check ends a walk early rather than panicking.
//!
//! Runs before the heap exists, so nothing here allocates: nodes are found by walking.
//! Interrupts, which need the tree beyond one node (its interrupt parent, the nexus nodes
//! on the way to its controller), are `interrupts`'.

use core::fmt;

mod dma;
mod interrupts;
pub use dma::{DmaRange, DmaReach, MAX_DMA_RANGES};
pub use interrupts::{Interrupt, InterruptError, Interrupts, MAX_INTERRUPT_CELLS};

/// `0xd00dfeed`, big-endian (§5.2).
const MAGIC: u32 = 0xd00d_feed;
const HEADER_SIZE: usize = 40;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;
/// Nodes nested deeper than this are refused (trees of real boards nest about six deep).
pub const MAX_DEPTH: usize = 32;
/// The most buses between the root and a node whose `reg` is translated
/// (`Node::physical_reg`): a Versatile Express peripheral sits under three.
const MAX_BUSES: usize = 6;
/// `#address-cells` and `#size-cells` when a node does not say (§2.3.5).
const DEFAULT_CELLS: Cells = Cells { address: 2, size: 1 };

/// Why a blob is not a device tree this reader accepts; `at` is a byte offset in the blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdtError {
    TooShort,
    BadMagic,
    UnsupportedVersion {
        version: u32,
        last_compatible: u32,
    },
    /// A block the header names does not lie within the blob.
    BlockOutOfRange(&'static str),
    /// The memory reservation list runs off its block without its (0, 0) terminator.
    UnterminatedReservations,
    /// A token or its payload runs past the structure block.
    Truncated {
        at: usize,
    },
    UnknownToken {
        at: usize,
        token: u32,
    },
    /// A node or property name is not NUL-terminated UTF-8.
    BadName {
        at: usize,
    },
    /// A property's name offset is outside the strings block.
    BadNameOffset {
        at: usize,
    },
    TooDeep {
        at: usize,
    },
    PropertyAfterSubnode {
        at: usize,
    },
    /// The structure block does not hold exactly one root node followed by FDT_END.
    Unbalanced {
        at: usize,
    },
}

impl fmt::Display for FdtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort => write!(f, "shorter than a device tree header ({HEADER_SIZE} bytes)"),
            Self::BadMagic => write!(f, "no device tree magic (0xd00dfeed) at its start"),
            Self::UnsupportedVersion { version, last_compatible } => write!(
                f,
                "device tree version {version} (compatible back to {last_compatible}); versions 16 and 17 are read"
            ),
            Self::BlockOutOfRange(block) => write!(f, "its {block} lies outside the blob"),
            Self::UnterminatedReservations => write!(f, "its memory reservation list has no (0, 0) terminator"),
            Self::Truncated { at } => write!(f, "a token at byte {at} runs past the structure block"),
            Self::UnknownToken { at, token } => write!(f, "unknown token {token:#x} at byte {at}"),
            Self::BadName { at } => write!(f, "the name at byte {at} is not NUL-terminated UTF-8"),
            Self::BadNameOffset { at } => {
                write!(f, "the property at byte {at} names a string outside the strings block")
            }
            Self::TooDeep { at } => write!(f, "the node at byte {at} nests deeper than {MAX_DEPTH} levels"),
            Self::PropertyAfterSubnode { at } => write!(f, "the property at byte {at} follows a subnode"),
            Self::Unbalanced { at } => write!(f, "its nodes do not close into one root before FDT_END (byte {at})"),
        }
    }
}

/// A node's `#address-cells` and `#size-cells`: how its children's `reg` entries are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cells {
    address: u32,
    size: u32,
}

/// One entry of the memory reservation block (§5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReservation {
    pub address: u64,
    pub size: u64,
}

/// A checked device tree.
#[derive(Clone, Copy)]
pub struct Fdt<'a> {
    structure: Block<'a>,
    reservations: &'a [u8],
}

/// The structure block with the strings block it names into, and where it lies in the blob
/// (for error offsets).
#[derive(Clone, Copy)]
struct Block<'a> {
    bytes: &'a [u8],
    strings: &'a [u8],
    offset: usize,
}

/// A node of a checked tree. `Copy`: it is a position in the blob.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub name: &'a str,
    block: Block<'a>,
    /// Where its properties start, in the structure block.
    body: usize,
    /// Its parent's cells, which say how its own `reg` reads.
    parent_cells: Cells,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Property<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// One `reg` entry: an address and, when the parent's `#size-cells` is not 0, a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    pub address: u64,
    pub size: Option<u64>,
}

enum Token<'a> {
    BeginNode(&'a str),
    EndNode,
    Property(RawProperty<'a>),
    Nop,
    End,
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from(be32(bytes, at)?) << 32 | u64::from(be32(bytes, at.checked_add(4)?)?))
}

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// A property as a walk meets it: its name still an offset into the strings block, read
/// (`Block::property_name`) or compared (`Block::is_named`) only where a walk needs it. A
/// lookup by name then costs a byte comparison per property, not a NUL search and a UTF-8
/// validation of every name it passes (the hypervisor's boot decoded about 77,000 tokens
/// and spent about 15 million instructions in them, docs/performance.md).
#[derive(Clone, Copy)]
struct RawProperty<'a> {
    name_offset: usize,
    value: &'a [u8],
}

/// The NUL-terminated UTF-8 string at `at`, and the offset just past its NUL.
fn c_str(bytes: &[u8], at: usize) -> Option<(&str, usize)> {
    let rest = bytes.get(at..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    let s = core::str::from_utf8(rest.get(..len)?).ok()?;
    Some((s, at + len + 1))
}

impl<'a> Block<'a> {
    /// The token at `at` and the offset of the next one, or what is wrong with it. A
    /// property's name is checked (`names`: `check`, once for the whole block) or left for
    /// whoever reads it (every later walk of the checked block).
    fn token(&self, at: usize, names: bool) -> Result<(Token<'a>, usize), FdtError> {
        let here = self.offset + at;
        let truncated = FdtError::Truncated { at: here };
        let token = be32(self.bytes, at).ok_or(truncated)?;
        let payload = at + 4;
        match token {
            FDT_BEGIN_NODE => {
                let (name, end) = c_str(self.bytes, payload).ok_or(FdtError::BadName { at: here })?;
                Ok((Token::BeginNode(name), align4(end).ok_or(truncated)?))
            }
            FDT_END_NODE => Ok((Token::EndNode, payload)),
            FDT_NOP => Ok((Token::Nop, payload)),
            FDT_END => Ok((Token::End, payload)),
            FDT_PROP => {
                let len = be32(self.bytes, payload).ok_or(truncated)? as usize;
                let name_offset = be32(self.bytes, payload + 4).ok_or(truncated)? as usize;
                let value_at = payload + 8;
                let value_end = value_at.checked_add(len).ok_or(truncated)?;
                let value = self.bytes.get(value_at..value_end).ok_or(truncated)?;
                if name_offset >= self.strings.len() {
                    return Err(FdtError::BadNameOffset { at: here });
                }
                if names {
                    c_str(self.strings, name_offset).ok_or(FdtError::BadName { at: here })?;
                }
                Ok((Token::Property(RawProperty { name_offset, value }), align4(value_end).ok_or(truncated)?))
            }
            _ => Err(FdtError::UnknownToken { at: here, token }),
        }
    }

    /// The token at `at` of a checked block; a token that does not read ends the walk.
    fn next(&self, at: usize) -> (Token<'a>, usize) {
        self.token(at, false).unwrap_or((Token::End, at))
    }

    /// A property's name (`check` saw that it reads).
    fn property_name(&self, p: RawProperty<'a>) -> Option<&'a str> {
        c_str(self.strings, p.name_offset).map(|(name, _)| name)
    }

    /// Whether a property's name is `name`: its bytes, then the NUL.
    fn is_named(&self, p: RawProperty<'a>, name: &str) -> bool {
        let rest = self.strings.get(p.name_offset..).unwrap_or(&[]);
        rest.strip_prefix(name.as_bytes()).is_some_and(|after| after.first() == Some(&0))
    }

    /// Checks every token: one root, balanced, not too deep, properties before subnodes.
    fn check(&self) -> Result<(), FdtError> {
        let mut at = 0;
        let mut depth = 0usize;
        let mut root_seen = false;
        // Whether the innermost open node has had a subnode (its properties are over).
        let mut subnode_seen = [false; MAX_DEPTH + 1];
        loop {
            let here = self.offset + at;
            let (token, next) = self.token(at, true)?;
            match token {
                Token::BeginNode(_) => {
                    if depth == 0 && root_seen {
                        return Err(FdtError::Unbalanced { at: here });
                    }
                    if depth == MAX_DEPTH {
                        return Err(FdtError::TooDeep { at: here });
                    }
                    subnode_seen[depth] = true;
                    depth += 1;
                    subnode_seen[depth] = false;
                    root_seen = true;
                }
                Token::EndNode => {
                    depth = depth.checked_sub(1).ok_or(FdtError::Unbalanced { at: here })?;
                }
                Token::Property(_) => {
                    if depth == 0 {
                        return Err(FdtError::Unbalanced { at: here });
                    }
                    if subnode_seen[depth] {
                        return Err(FdtError::PropertyAfterSubnode { at: here });
                    }
                }
                Token::Nop => {}
                Token::End => {
                    return if depth == 0 && root_seen { Ok(()) } else { Err(FdtError::Unbalanced { at: here }) };
                }
            }
            at = next;
        }
    }
}

/// `[offset, offset + size)` of the blob, if it lies within it.
fn block<'a>(blob: &'a [u8], offset: u32, size: u32, name: &'static str) -> Result<&'a [u8], FdtError> {
    let start = offset as usize;
    let end = start.checked_add(size as usize).ok_or(FdtError::BlockOutOfRange(name))?;
    blob.get(start..end).ok_or(FdtError::BlockOutOfRange(name))
}

impl<'a> Fdt<'a> {
    /// Checks `blob` whole; every walk of the result is then total.
    pub fn new(blob: &'a [u8]) -> Result<Self, FdtError> {
        let header = |i: usize| be32(blob, 4 * i).ok_or(FdtError::TooShort);
        if blob.len() < HEADER_SIZE {
            return Err(FdtError::TooShort);
        }
        if header(0)? != MAGIC {
            return Err(FdtError::BadMagic);
        }
        let total_size = header(1)? as usize;
        let blob = blob.get(..total_size).ok_or(FdtError::BlockOutOfRange("total size"))?;
        let (off_struct, off_strings, off_reservations) = (header(2)?, header(3)?, header(4)?);
        let (version, last_compatible) = (header(5)?, header(6)?);
        if version < 16 || last_compatible > 17 {
            return Err(FdtError::UnsupportedVersion { version, last_compatible });
        }
        let size_strings = header(8)?;
        // Version 16 headers have no size_dt_struct: the block runs to the end of the blob.
        let size_struct = if version >= 17 { header(9)? } else { (total_size as u32).saturating_sub(off_struct) };
        if off_struct % 4 != 0 || off_reservations % 8 != 0 {
            return Err(FdtError::BlockOutOfRange("structure or reservation block (misaligned)"));
        }
        let structure = Block {
            bytes: block(blob, off_struct, size_struct, "structure block")?,
            strings: block(blob, off_strings, size_strings, "strings block")?,
            offset: off_struct as usize,
        };
        let reservations =
            blob.get(off_reservations as usize..).ok_or(FdtError::BlockOutOfRange("reservation block"))?;
        let fdt = Fdt { structure, reservations };
        let mut entries = fdt.reservation_entries();
        loop {
            match entries.next() {
                None => return Err(FdtError::UnterminatedReservations),
                Some(None) => break,
                Some(Some(_)) => {}
            }
        }
        structure.check()?;
        Ok(fdt)
    }

    /// Each entry of the reservation block: `Some(entry)` until the terminator (`None`).
    fn reservation_entries(&self) -> impl Iterator<Item = Option<MemoryReservation>> + 'a {
        let bytes = self.reservations;
        (0..bytes.len() / 16).map(move |i| {
            let address = be64(bytes, 16 * i).unwrap_or(0);
            let size = be64(bytes, 16 * i + 8).unwrap_or(0);
            (address != 0 || size != 0).then_some(MemoryReservation { address, size })
        })
    }

    /// The memory reservation block's entries (§5.3).
    pub fn memory_reservations(&self) -> impl Iterator<Item = MemoryReservation> + 'a {
        self.reservation_entries().map_while(|e| e)
    }

    pub fn root(&self) -> Node<'a> {
        let mut at = 0;
        loop {
            match self.structure.next(at) {
                (Token::BeginNode(name), body) => {
                    return Node { name, block: self.structure, body, parent_cells: DEFAULT_CELLS }
                }
                (Token::Nop, next) if next > at => at = next,
                // `new` saw a root; an empty node stands in should that ever be wrong.
                _ => {
                    return Node {
                        name: "",
                        block: self.structure,
                        body: self.structure.bytes.len(),
                        parent_cells: DEFAULT_CELLS,
                    }
                }
            }
        }
    }

    /// The node at `path` ("/" is the root; "/cpus/cpu@0"). A component without a unit
    /// address matches a node whose name has one ("memory" finds "memory@40000000").
    pub fn find_node(&self, path: &str) -> Option<Node<'a>> {
        let mut node = self.root();
        for component in path.split('/').filter(|c| !c.is_empty()) {
            node = node.children().find(|c| c.is_named(component))?;
        }
        Some(node)
    }

    /// Every node, depth first, the root first.
    pub fn all_nodes(&self) -> AllNodes<'a> {
        AllNodes { block: self.structure, at: 0, depth: 0, cells: [DEFAULT_CELLS; MAX_DEPTH + 1] }
    }

    /// The first node whose `compatible` holds one of `compatibles`.
    pub fn find_compatible(&self, compatibles: &[&str]) -> Option<Node<'a>> {
        self.all_nodes().find(|n| n.compatible().any(|c| compatibles.contains(&c)))
    }

    /// The node `/chosen/stdout-path` names (§3.6), through `/aliases` if it is an alias;
    /// any `:options` after the path are ignored.
    pub fn stdout(&self) -> Option<Node<'a>> {
        let chosen = self.find_node("/chosen")?;
        let value = chosen.property("stdout-path").or_else(|| chosen.property("linux,stdout-path"))?.as_str()?;
        let path = value.split(':').next()?;
        if path.starts_with('/') {
            return self.find_node(path);
        }
        let target = self.find_node("/aliases")?.property(path)?.as_str()?;
        if target.starts_with('/') {
            self.find_node(target)
        } else {
            None
        }
    }
}

impl<'a> Property<'a> {
    /// The value as a string, without its terminating NUL(s).
    pub fn as_str(&self) -> Option<&'a str> {
        core::str::from_utf8(self.value).ok().map(|s| s.trim_end_matches('\0'))
    }

    /// The value as one 32-bit cell.
    pub fn as_u32(&self) -> Option<u32> {
        (self.value.len() == 4).then(|| be32(self.value, 0)).flatten()
    }

    /// The value as one or two cells (a 64-bit number may be written either way).
    pub fn as_u64(&self) -> Option<u64> {
        match self.value.len() {
            4 => be32(self.value, 0).map(u64::from),
            8 => be64(self.value, 0),
            _ => None,
        }
    }

    /// The value's 32-bit cells; a trailing part shorter than a cell is left off.
    pub fn cells(&self) -> impl Iterator<Item = u32> + 'a {
        let value = self.value;
        (0..value.len() / 4).filter_map(move |i| be32(value, 4 * i))
    }
}

impl<'a> Node<'a> {
    fn is_named(&self, component: &str) -> bool {
        self.name == component || (!component.contains('@') && self.name.split('@').next() == Some(component))
    }

    pub fn properties(&self) -> impl Iterator<Item = Property<'a>> + 'a {
        let block = self.block;
        self.raw_properties().map_while(move |p| Some(Property { name: block.property_name(p)?, value: p.value }))
    }

    fn raw_properties(&self) -> impl Iterator<Item = RawProperty<'a>> + 'a {
        let block = self.block;
        let mut at = self.body;
        core::iter::from_fn(move || loop {
            match block.next(at) {
                (Token::Property(p), next) => {
                    at = next;
                    return Some(p);
                }
                (Token::Nop, next) if next > at => at = next,
                _ => return None,
            }
        })
    }

    pub fn property(&self, name: &str) -> Option<Property<'a>> {
        let block = self.block;
        let found = self.raw_properties().find(|p| block.is_named(*p, name))?;
        Some(Property { name: block.property_name(found)?, value: found.value })
    }

    /// The strings of its `compatible` property (none if it has none).
    pub fn compatible(&self) -> impl Iterator<Item = &'a str> + 'a {
        let value = self.property("compatible").map_or(&[][..], |p| p.value);
        value.split(|&b| b == 0).filter(|s| !s.is_empty()).filter_map(|s| core::str::from_utf8(s).ok())
    }

    /// `status` absent, "okay" or "ok" (§2.3.4).
    pub fn is_enabled(&self) -> bool {
        self.property("status").and_then(|p| p.as_str()).is_none_or(|s| s == "okay" || s == "ok")
    }

    /// Its own `#address-cells` and `#size-cells`, which its children's `reg` use.
    fn own_cells(&self) -> Cells {
        let cells = |name, default| self.property(name).and_then(|p| p.as_u32()).unwrap_or(default);
        Cells {
            address: cells("#address-cells", DEFAULT_CELLS.address),
            size: cells("#size-cells", DEFAULT_CELLS.size),
        }
    }

    /// Its direct subnodes, in order.
    pub fn children(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        let block = self.block;
        let cells = self.own_cells();
        let mut at = self.body;
        core::iter::from_fn(move || loop {
            match block.next(at) {
                (Token::Property(_) | Token::Nop, next) if next > at => at = next,
                (Token::BeginNode(name), body) => {
                    at = skip_subtree(block, body);
                    return Some(Node { name, block, body, parent_cells: cells });
                }
                _ => return None,
            }
        })
    }

    /// Its `reg` entries, read with its parent's cells. Entries whose address or size takes
    /// more than two cells are not numbers this hypervisor can use, and are left off.
    pub fn reg(&self) -> impl Iterator<Item = Reg> + 'a {
        let Cells { address, size } = self.parent_cells;
        let usable = (1..=2).contains(&address) && size <= 2;
        let value = self.property("reg").filter(|_| usable).map_or(&[][..], |p| p.value);
        let entry = if usable { 4 * (address + size) as usize } else { 4 };
        let number = |bytes: &[u8], cells: u32| match cells {
            1 => be32(bytes, 0).map(u64::from),
            _ => be64(bytes, 0),
        };
        value.chunks_exact(entry).filter_map(move |e| {
            let address_bytes = e.get(..4 * address as usize)?;
            let size_bytes = e.get(4 * address as usize..)?;
            let size = if size == 0 { None } else { Some(number(size_bytes, size)?) };
            Some(Reg { address: number(address_bytes, address)?, size })
        })
    }
}

impl<'a> Node<'a> {
    /// Its `reg` entries as CPU physical addresses: each translated through the `ranges` of
    /// every bus node above it (§2.3.8; an empty `ranges` maps one to one). An entry that a
    /// bus does not map (it has no `ranges`, or no range holds the address), or under more
    /// than `MAX_BUSES` buses, is left off: it names no place the CPU can reach.
    pub fn physical_reg(&self) -> impl Iterator<Item = Reg> + 'a {
        let buses = self.buses();
        self.reg().filter_map(move |r| {
            let (path, depth) = buses?;
            let address = path[..depth].iter().rev().flatten().try_fold(r.address, |a, bus| bus.translate(a))?;
            Some(Reg { address, size: r.size })
        })
    }

    /// The nodes between the root and this one, outermost first (the root's children that
    /// lead here, and so on), and how many: the buses its `reg` goes through. None when it
    /// lies under more than `MAX_BUSES` of them.
    fn buses(&self) -> Option<([Option<Node<'a>>; MAX_BUSES], usize)> {
        let (mut path, mut depth) = ([None; MAX_BUSES], 0);
        let mut node = root_of(self.block);
        while node.body != self.body {
            let holds = |c: &Node<'a>| c.body <= self.body && self.body < skip_subtree(c.block, c.body);
            let next = node.children().find(holds)?;
            if next.body == self.body {
                break;
            }
            *path.get_mut(depth)? = Some(next);
            depth += 1;
            node = next;
        }
        Some((path, depth))
    }

    /// `address`, on this bus, as an address on its parent's (its `ranges`: child address,
    /// parent address, length, each in its cells).
    fn translate(&self, address: u64) -> Option<u64> {
        let ranges = self.property("ranges")?.value;
        if ranges.is_empty() {
            return Some(address);
        }
        let (child, parent, size) = (self.own_cells().address, self.parent_cells.address, self.own_cells().size);
        if ![child, parent, size].iter().all(|c| (1..=2).contains(c)) {
            return None;
        }
        let number = |bytes: &[u8], cells: u32| if cells == 1 { be32(bytes, 0).map(u64::from) } else { be64(bytes, 0) };
        let (c, p) = (4 * child as usize, 4 * (child + parent) as usize);
        ranges.chunks_exact(4 * (child + parent + size) as usize).find_map(|e| {
            let (from, to, length) = (number(&e[..c], child)?, number(&e[c..p], parent)?, number(&e[p..], size)?);
            let offset = address.checked_sub(from).filter(|&o| o < length)?;
            to.checked_add(offset)
        })
    }
}

/// The root node of the tree `block` holds.
fn root_of(block: Block<'_>) -> Node<'_> {
    Fdt { structure: block, reservations: &[] }.root()
}

/// The offset just past the END_NODE that closes the node whose body starts at `at`.
fn skip_subtree(block: Block<'_>, mut at: usize) -> usize {
    let mut depth = 1usize;
    loop {
        match block.next(at) {
            (Token::BeginNode(_), next) => {
                depth += 1;
                at = next;
            }
            (Token::EndNode, next) => {
                depth -= 1;
                at = next;
                if depth == 0 {
                    return at;
                }
            }
            (Token::Property(_) | Token::Nop, next) if next > at => at = next,
            _ => return block.bytes.len(),
        }
    }
}

/// Every node of a tree, depth first; tracks each open node's cells for its children's `reg`.
pub struct AllNodes<'a> {
    block: Block<'a>,
    at: usize,
    depth: usize,
    cells: [Cells; MAX_DEPTH + 1],
}

impl<'a> Iterator for AllNodes<'a> {
    type Item = Node<'a>;
    fn next(&mut self) -> Option<Node<'a>> {
        loop {
            let (token, next) = self.block.next(self.at);
            if next <= self.at {
                return None;
            }
            self.at = next;
            match token {
                Token::BeginNode(name) => {
                    let parent_cells = match self.depth {
                        0 => DEFAULT_CELLS,
                        d => self.cells[d - 1],
                    };
                    let node = Node { name, block: self.block, body: next, parent_cells };
                    *self.cells.get_mut(self.depth)? = node.own_cells();
                    self.depth += 1;
                    return Some(node);
                }
                Token::EndNode => self.depth = self.depth.checked_sub(1)?,
                Token::Property(_) | Token::Nop => {}
                Token::End => return None,
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod test_trees;
#[cfg(test)]
mod tests;
