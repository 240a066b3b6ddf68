//! A node's interrupts as its interrupt controller takes them: the interrupt tree of the
//! Devicetree Specification v0.4, §2.4. It owns finding a node's interrupt parent
//! (`interrupt-parent`, else the tree's parent, §2.4.1), splitting `interrupts` and
//! `interrupts-extended` into specifiers, and translating each through every interrupt
//! nexus on the way (`interrupt-map` and `interrupt-map-mask`, §2.4.3) to the controller
//! that finally takes it (`interrupt-controller`, §2.4.2).
//!
//! A board's devices need not name their controller directly: Versatile Express's
//! motherboard devices give one cell (their line on the motherboard) to a bus whose
//! `interrupt-map` turns it into a GIC SPI. Where the specification leaves a choice, this
//! reader does what Linux does, so a tree Linux boots reads the same here: an interrupt
//! parent without `#interrupt-cells` is passed through (its own interrupt parent is asked),
//! the child unit address an `interrupt-map` matches is the first cells of the device's own
//! `reg`, and a parent without `#address-cells` has no unit address cells in a map entry.
//!
//! Runs before the heap exists: specifiers are fixed-size arrays, and every walk is
//! bounded, whatever loop a malformed tree's phandles make.

use core::fmt;

use super::{be32, root_of, skip_subtree, AllNodes, Block, Found, Node, DEFAULT_CELLS, MAX_DEPTH};

/// The most cells of an interrupt specifier or of a unit address this reader handles (GIC
/// specifiers have 3 or 4, PCI unit addresses 3).
pub const MAX_INTERRUPT_CELLS: usize = 4;
/// The most interrupt parents asked on the way from a device to its controller, nexus nodes
/// and pass-through nodes together: beyond it the tree's phandles make a loop.
const MAX_HOPS: usize = 2 * MAX_DEPTH;

/// An interrupt as its controller takes it: the controller's node and the specifier in that
/// controller's `#interrupt-cells`.
#[derive(Clone, Copy)]
pub struct Interrupt<'a> {
    pub controller: Node<'a>,
    specifier: Cells,
}

impl<'a> Interrupt<'a> {
    /// The specifier's cells, as many as the controller's `#interrupt-cells`.
    pub fn specifier(&self) -> &[u32] {
        self.specifier.as_slice()
    }
}

impl fmt::Debug for Interrupt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Interrupt {{ controller: {:?}, specifier: {:?} }}", self.controller, self.specifier())
    }
}

/// Why an interrupt of a node does not reach a controller. Each names the node where the walk
/// stopped, as the tree spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptError<'a> {
    /// Neither the node nor any node above it (through `interrupt-parent` or the tree) has
    /// `#interrupt-cells`: nothing says which controller takes its interrupts.
    NoInterruptParent { node: &'a str },
    /// An `interrupt-parent`, `interrupts-extended` or `interrupt-map` names a phandle that no
    /// node has.
    UnknownPhandle { node: &'a str, phandle: u32 },
    /// A specifier or unit address has more cells than `MAX_INTERRUPT_CELLS`, or
    /// `#interrupt-cells` is 0.
    UnsupportedCells { node: &'a str },
    /// The interrupt parent has `#interrupt-cells` but is neither an `interrupt-controller`
    /// nor a nexus with an `interrupt-map`.
    NotAController { node: &'a str },
    /// The nexus's `interrupt-map` has no entry for the interrupt (once masked).
    NotMapped { nexus: &'a str },
    /// A property's length is not whole entries of the cells it is read with.
    Malformed { node: &'a str, property: &'static str },
    /// More than `MAX_HOPS` interrupt parents on the way: the phandles make a loop.
    TooManyHops { node: &'a str },
}

impl fmt::Display for InterruptError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoInterruptParent { node } => write!(
                f,
                "no interrupt parent for {node}: give it (or a node above it) an interrupt-parent whose node has \
                 #interrupt-cells"
            ),
            Self::UnknownPhandle { node, phandle } => {
                write!(f, "{node} names phandle {phandle:#x}, which no node of the device tree has")
            }
            Self::UnsupportedCells { node } => write!(
                f,
                "{node}: #interrupt-cells or #address-cells is 0 or more than {MAX_INTERRUPT_CELLS}, which this \
                 hypervisor does not read"
            ),
            Self::NotAController { node } => {
                write!(f, "{node} has #interrupt-cells but neither interrupt-controller nor interrupt-map")
            }
            Self::NotMapped { nexus } => write!(f, "the interrupt-map of {nexus} has no entry for this interrupt"),
            Self::Malformed { node, property } => {
                write!(f, "{property} of {node} is not whole entries of the cells it is read with")
            }
            Self::TooManyHops { node } => write!(
                f,
                "more than {MAX_HOPS} interrupt parents on the way from {node}: the device tree's phandles make a loop"
            ),
        }
    }
}

/// Up to `MAX_INTERRUPT_CELLS` cells: a specifier or a unit address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Cells {
    cells: [u32; MAX_INTERRUPT_CELLS],
    len: usize,
}

impl Cells {
    fn as_slice(&self) -> &[u32] {
        &self.cells[..self.len]
    }

    /// `count` cells of `value` from cell `at`; cells past its end read as 0 (a unit address
    /// longer than the `reg` it comes from, as Linux pads it). None if `count` is too many.
    fn read(value: &[u8], at: usize, count: usize) -> Option<Cells> {
        if count > MAX_INTERRUPT_CELLS {
            return None;
        }
        let mut cells = Cells { len: count, ..Cells::default() };
        for (i, cell) in cells.cells[..count].iter_mut().enumerate() {
            *cell = be32(value, 4 * (at + i)).unwrap_or(0);
        }
        Some(cells)
    }
}

impl<'a> super::Fdt<'a> {
    /// The node whose `phandle` (or older `linux,phandle`) is `phandle` (§2.3.3).
    pub fn node_by_phandle(&self, phandle: u32) -> Option<Node<'a>> {
        by_phandle(self.structure, phandle)
    }

    /// The node the root's `interrupt-parent` names, kept with the checked tree.
    pub(super) fn find_root_interrupt_parent(&self) -> Option<Found<'a>> {
        let phandle = self.root().property("interrupt-parent")?.as_u32()?;
        let node = by_phandle(self.structure, phandle)?;
        let Node { name, body, parent_cells, depth, .. } = node;
        Some(Found { phandle, name, body, parent_cells, depth })
    }
}

fn by_phandle(block: Block<'_>, phandle: u32) -> Option<Node<'_>> {
    if let Some(Found { phandle: p, name, body, parent_cells, depth }) = block.root_interrupt_parent {
        if p == phandle {
            return Some(Node { name, block, body, parent_cells, depth });
        }
    }
    let all = AllNodes { block, at: 0, depth: 0, cells: [DEFAULT_CELLS; MAX_DEPTH + 1] };
    let mut found = all.filter(|n| {
        let value = n.property("phandle").or_else(|| n.property("linux,phandle")).and_then(|p| p.as_u32());
        value == Some(phandle)
    });
    found.next()
}

impl PartialEq for Node<'_> {
    /// The same node of the same blob.
    fn eq(&self, other: &Self) -> bool {
        self.body == other.body && core::ptr::eq(self.block.bytes, other.block.bytes)
    }
}

impl Eq for Node<'_> {}

impl fmt::Debug for Node<'_> {
    /// Its name and where its body starts in the structure block (which tells two nodes of
    /// the same name apart).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Node({:?} at {})", self.name, self.body)
    }
}

impl<'a> Node<'a> {
    /// Its parent in the tree; None for the root.
    pub fn parent(&self) -> Option<Node<'a>> {
        let mut node = root_of(self.block);
        if node == *self {
            return None;
        }
        // Most devices hang off the root (or a bus that does): found without a walk.
        if self.depth == 1 {
            return Some(node);
        }
        loop {
            let holds = |c: &Node<'a>| c.body <= self.body && self.body < skip_subtree(c.block, c.body);
            let next = node.children().find(holds)?;
            if next == *self {
                return Some(node);
            }
            node = next;
        }
    }

    /// A cell count property of its own (`#interrupt-cells`, `#address-cells`), if it has it.
    fn own_u32(&self, name: &str) -> Option<u32> {
        self.property(name).and_then(|p| p.as_u32())
    }

    /// Its interrupt parent (§2.4.1): the node its `interrupt-parent` names, else its parent
    /// in the tree; a node that is not an interrupt domain (no `#interrupt-cells`) passes
    /// the question on to its own interrupt parent.
    pub fn interrupt_parent(&self) -> Result<Node<'a>, InterruptError<'a>> {
        let mut node = *self;
        for _ in 0..MAX_HOPS {
            let parent = match node.property("interrupt-parent") {
                Some(p) => {
                    let phandle = p
                        .as_u32()
                        .ok_or(InterruptError::Malformed { node: node.name, property: "interrupt-parent" })?;
                    by_phandle(self.block, phandle)
                        .ok_or(InterruptError::UnknownPhandle { node: node.name, phandle })?
                }
                None => node.parent().ok_or(InterruptError::NoInterruptParent { node: self.name })?,
            };
            if parent.own_u32("#interrupt-cells").is_some() {
                return Ok(parent);
            }
            node = parent;
        }
        Err(InterruptError::TooManyHops { node: self.name })
    }

    /// Its interrupts, each as the controller that takes it sees it: `interrupts-extended`
    /// (each entry names its parent), else `interrupts` with its interrupt parent, each
    /// translated through every nexus on the way (§2.4). An interrupt that reaches no
    /// controller is an error in its place; an error about the property as a whole (no
    /// interrupt parent, a length that is not whole specifiers) is the last item.
    pub fn interrupts(&self) -> Interrupts<'a> {
        let (value, extended) = match self.property("interrupts-extended") {
            Some(p) => (p.value, true),
            None => (self.property("interrupts").map_or(&[][..], |p| p.value), false),
        };
        Interrupts { node: *self, value, at: 0, extended, failed: false }
    }

    /// The controller's view of `specifier`, an interrupt this node raises with interrupt
    /// parent `parent`: through each nexus's `interrupt-map` until an
    /// `interrupt-controller` (§2.4.3).
    fn through_the_tree(
        &self,
        mut parent: Node<'a>,
        mut specifier: Cells,
    ) -> Result<Interrupt<'a>, InterruptError<'a>> {
        // The unit address a nexus matches: at the first, the device's own `reg`, raw, in
        // the nexus's `#address-cells`; at a nexus above it, the parent unit address of the
        // map entry that led there.
        let mut address: Option<Cells> = None;
        for _ in 0..MAX_HOPS {
            if parent.property("interrupt-controller").is_some() {
                return Ok(Interrupt { controller: parent, specifier });
            }
            let Some(map) = parent.property("interrupt-map") else {
                return Err(InterruptError::NotAController { node: parent.name });
            };
            let nexus = parent;
            let child_address = match address {
                Some(a) => a,
                None => {
                    let reg = self.property("reg").map_or(&[][..], |p| p.value);
                    let cells = nexus.own_u32("#address-cells").unwrap_or(DEFAULT_CELLS.address) as usize;
                    Cells::read(reg, 0, cells).ok_or(InterruptError::UnsupportedCells { node: nexus.name })?
                }
            };
            (parent, specifier, address) = map_entry(nexus, map.value, child_address, specifier)
                .map(|(parent, specifier, address)| (parent, specifier, Some(address)))?;
        }
        Err(InterruptError::TooManyHops { node: self.name })
    }
}

/// The entry of `nexus`'s `interrupt-map` (`map`) that `address` and `specifier` match once
/// both are masked by its `interrupt-map-mask` (all ones if it has none): the parent it
/// names, the parent's specifier and the parent's unit address (for a nexus above).
fn map_entry<'a>(
    nexus: Node<'a>,
    map: &[u8],
    address: Cells,
    specifier: Cells,
) -> Result<(Node<'a>, Cells, Cells), InterruptError<'a>> {
    let malformed = |property| InterruptError::Malformed { node: nexus.name, property };
    let unsupported = InterruptError::UnsupportedCells { node: nexus.name };
    let key_cells = address.len + specifier.len;
    let mask = nexus.property("interrupt-map-mask").map(|p| p.value);
    if mask.is_some_and(|m| m.len() != 4 * key_cells) {
        return Err(malformed("interrupt-map-mask"));
    }
    let mask_cell = |i: usize| mask.map_or(u32::MAX, |m| be32(m, 4 * i).unwrap_or(0));
    let key = |i: usize| if i < address.len { address.cells[i] } else { specifier.cells[i - address.len] };
    let total = map.len() / 4;
    if !map.len().is_multiple_of(4) {
        return Err(malformed("interrupt-map"));
    }
    let mut at = 0;
    while at < total {
        let matches =
            (0..key_cells).all(|i| be32(map, 4 * (at + i)).unwrap_or(0) & mask_cell(i) == key(i) & mask_cell(i));
        let phandle_at = at + key_cells;
        let phandle = be32(map, 4 * phandle_at).ok_or(malformed("interrupt-map"))?;
        let parent =
            by_phandle(nexus.block, phandle).ok_or(InterruptError::UnknownPhandle { node: nexus.name, phandle })?;
        // Every entry's length depends on its parent's cells, so each parent is looked up.
        let parent_address = parent.own_u32("#address-cells").unwrap_or(0) as usize;
        let parent_interrupt =
            parent.own_u32("#interrupt-cells").ok_or(InterruptError::NotAController { node: parent.name })? as usize;
        if parent_address > MAX_INTERRUPT_CELLS || parent_interrupt == 0 || parent_interrupt > MAX_INTERRUPT_CELLS {
            return Err(InterruptError::UnsupportedCells { node: parent.name });
        }
        let address_at = phandle_at + 1;
        let specifier_at = address_at + parent_address;
        let end = specifier_at + parent_interrupt;
        if end > total {
            return Err(malformed("interrupt-map"));
        }
        if matches {
            let next = Cells::read(map, specifier_at, parent_interrupt).ok_or(unsupported)?;
            let next_address = Cells::read(map, address_at, parent_address).ok_or(unsupported)?;
            return Ok((parent, next, next_address));
        }
        at = end;
    }
    Err(InterruptError::NotMapped { nexus: nexus.name })
}

/// The interrupts of a node (`Node::interrupts`).
pub struct Interrupts<'a> {
    node: Node<'a>,
    value: &'a [u8],
    /// The next specifier's offset in `value`, in cells.
    at: usize,
    extended: bool,
    /// An error about the property as a whole was given: nothing follows it.
    failed: bool,
}

impl<'a> Interrupts<'a> {
    /// The next entry's parent and specifier, and the offset past it.
    fn next_entry(&self) -> Result<(Node<'a>, Cells, usize), InterruptError<'a>> {
        let node = self.node;
        let property = if self.extended { "interrupts-extended" } else { "interrupts" };
        let malformed = InterruptError::Malformed { node: node.name, property };
        let (parent, at) = if self.extended {
            let phandle = be32(self.value, 4 * self.at).ok_or(malformed)?;
            let parent =
                by_phandle(node.block, phandle).ok_or(InterruptError::UnknownPhandle { node: node.name, phandle })?;
            (parent, self.at + 1)
        } else {
            (node.interrupt_parent()?, self.at)
        };
        let cells = parent.own_u32("#interrupt-cells").ok_or(InterruptError::NotAController { node: parent.name })?;
        let cells = cells as usize;
        if cells == 0 || cells > MAX_INTERRUPT_CELLS {
            return Err(InterruptError::UnsupportedCells { node: parent.name });
        }
        if 4 * (at + cells) > self.value.len() {
            return Err(malformed);
        }
        let specifier = Cells::read(self.value, at, cells).ok_or(malformed)?;
        Ok((parent, specifier, at + cells))
    }
}

impl<'a> Iterator for Interrupts<'a> {
    type Item = Result<Interrupt<'a>, InterruptError<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || 4 * self.at >= self.value.len() {
            return None;
        }
        match self.next_entry() {
            Ok((parent, specifier, next)) => {
                self.at = next;
                Some(self.node.through_the_tree(parent, specifier))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests;
