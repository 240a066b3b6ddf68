//! The Ethernet switch between the VMs' NICs and the uplink (the board's NIC): pure
//! forwarding decisions, no frame is copied.
//!
//! It learns nothing from what it carries, so no port can teach it a lie. Each VM port has
//! the one MAC address its manifest (or the hypervisor) gave its NIC, fixed when the switch
//! is built:
//! - a frame from a VM port must come from that port's own address, or it is refused (a VM
//!   claiming another VM's or the gateway's address would receive their traffic);
//! - a unicast frame goes to the VM port with that destination address; one for no VM goes
//!   out of the uplink when it came from a VM (the rest of the network lies behind it), and
//!   is dropped when it came from the uplink;
//! - broadcast and multicast frames go to every other port.
//!
//! There is no MAC table to fill or evict: flooding source addresses changes nothing.

/// The shortest frame that has both addresses and the EtherType.
const ETHERNET_HEADER: usize = 14;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub usize);

/// Where a frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    To(PortId),
    /// Every port but the source (`except`), in port order.
    Flood {
        except: PortId,
    },
    /// Nowhere, and nothing is wrong: no port has its destination, or it is too short to be
    /// a frame.
    Drop,
    /// Refused: the frame breaks the switch's rule for its port.
    Refused(Refusal),
}

/// Why a frame was refused (the hypervisor logs it with the VM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A VM port sent from a source address that is not its own.
    SpoofedSource { port: PortId, source: [u8; 6], own: [u8; 6] },
    /// A VM port whose NIC has no address (the port is not connected).
    NotConnected { port: PortId },
}

/// A MAC address as `52:54:00:12:34:56`, written in place (a refusal is said for a frame a
/// guest sent: nothing on that path allocates).
pub struct Mac<'a>(pub &'a [u8; 6]);

impl core::fmt::Display for Mac<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Refusal::SpoofedSource { port, source, own } => write!(
                f,
                "switch port {}: frame from source address {}, not the NIC's own {}; dropped (a VM may send only from its own MAC)",
                port.0,
                Mac(source),
                Mac(own)
            ),
            Refusal::NotConnected { port } => write!(f, "switch port {}: no NIC is connected; frame dropped", port.0),
        }
    }
}

/// One port: the uplink, or a VM's NIC with its address (none: nothing connected).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    Uplink,
    Vm(Option<[u8; 6]>),
}

pub struct Switch {
    ports: alloc::vec::Vec<Port>,
}

fn is_multicast(mac: &[u8; 6]) -> bool {
    // The group bit, set in broadcast too (IEEE 802.3).
    mac[0] & 1 != 0
}

impl Switch {
    /// A switch with these ports (their index is their `PortId`).
    pub fn new(ports: alloc::vec::Vec<Port>) -> Self {
        Switch { ports }
    }

    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// The VM port whose NIC has address `mac`.
    pub fn port_of(&self, mac: [u8; 6]) -> Option<PortId> {
        self.ports.iter().position(|p| *p == Port::Vm(Some(mac))).map(PortId)
    }

    fn uplink(&self) -> Option<PortId> {
        self.ports.iter().position(|p| *p == Port::Uplink).map(PortId)
    }

    /// Decides where a frame from `from` goes.
    pub fn forward(&self, from: PortId, frame: &[u8]) -> Forward {
        let (Some(port), Some(header)) = (self.ports.get(from.0), frame.get(..ETHERNET_HEADER)) else {
            return Forward::Drop;
        };
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&header[0..6]);
        src.copy_from_slice(&header[6..12]);
        match *port {
            Port::Vm(None) => return Forward::Refused(Refusal::NotConnected { port: from }),
            Port::Vm(Some(own)) if own != src => {
                return Forward::Refused(Refusal::SpoofedSource { port: from, source: src, own })
            }
            _ => {}
        }
        if is_multicast(&dst) {
            return Forward::Flood { except: from };
        }
        match (self.port_of(dst), *port) {
            (Some(to), _) if to == from => Forward::Drop,
            (Some(to), _) => Forward::To(to),
            (None, Port::Vm(_)) => self.uplink().map_or(Forward::Drop, Forward::To),
            (None, Port::Uplink) => Forward::Drop,
        }
    }
}
