//! A learning Ethernet switch between ports (VM NICs and the uplink): pure forwarding
//! decisions, no frame is copied. The MAC table is bounded; the least recently seen entry
//! makes room for a new one.

use alloc::vec::Vec;

/// Entries in the MAC table.
pub const MAC_TABLE_SIZE: usize = 256;
/// The shortest frame that has both addresses and the EtherType.
const ETHERNET_HEADER: usize = 14;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub usize);

/// Where a frame goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forward {
    To(PortId),
    /// Every port but the source, in port order.
    Flood(Vec<PortId>),
    Drop,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    mac: [u8; 6],
    port: PortId,
    /// When it was last seen as a source, for eviction.
    stamp: u64,
}

pub struct Switch {
    ports: usize,
    table: Vec<Entry>,
    clock: u64,
}

fn is_multicast(mac: &[u8; 6]) -> bool {
    // The group bit, set in broadcast too (IEEE 802.3).
    mac[0] & 1 != 0
}

impl Switch {
    pub fn new(ports: usize) -> Self {
        Switch { ports, table: Vec::new(), clock: 0 }
    }

    pub fn ports(&self) -> usize {
        self.ports
    }

    /// The port a MAC was learned on.
    pub fn lookup(&self, mac: [u8; 6]) -> Option<PortId> {
        self.table.iter().find(|e| e.mac == mac).map(|e| e.port)
    }

    /// Learned entries.
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// Learns the source and decides where a frame from `from` goes.
    pub fn forward(&mut self, from: PortId, frame: &[u8]) -> Forward {
        if from.0 >= self.ports {
            return Forward::Drop;
        }
        let Some(header) = frame.get(..ETHERNET_HEADER) else {
            return Forward::Drop;
        };
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&header[0..6]);
        src.copy_from_slice(&header[6..12]);
        if !is_multicast(&src) {
            self.learn(src, from);
        }
        if !is_multicast(&dst) {
            if let Some(port) = self.lookup(dst) {
                return if port == from { Forward::Drop } else { Forward::To(port) };
            }
        }
        Forward::Flood((0..self.ports).filter(|&p| p != from.0).map(PortId).collect())
    }

    fn learn(&mut self, mac: [u8; 6], port: PortId) {
        self.clock += 1;
        let stamp = self.clock;
        if let Some(e) = self.table.iter_mut().find(|e| e.mac == mac) {
            // A MAC that moved is re-learned on its new port.
            e.port = port;
            e.stamp = stamp;
            return;
        }
        if self.table.len() >= MAC_TABLE_SIZE {
            if let Some(oldest) = self.table.iter().enumerate().min_by_key(|(_, e)| e.stamp).map(|(i, _)| i) {
                self.table.swap_remove(oldest);
            }
        }
        self.table.push(Entry { mac, port, stamp });
    }
}
