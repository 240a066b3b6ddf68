//! What each physical interrupt the hypervisor takes is for: one table, filled as the
//! hypervisor sets itself up (its PPIs and the kick SGI at boot, console input, the uplink
//! NIC, the board's disk, the passthrough SPIs), read by every CPU's interrupt path, which handles an
//! interrupt by its route instead of comparing it with each kind in turn.

use core::sync::atomic::{AtomicU8, Ordering};

/// The SGI a CPU sends another to make it leave its guest or its wait and look at its
/// state again (an IPI, an I/O completion, a reschedule).
pub const KICK_SGI: u32 = 1;

/// What a physical interrupt is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Route {
    /// Nothing the hypervisor set up: acknowledged and ended.
    Unrouted = 0,
    /// Another CPU made this one look at its state again (an SGI).
    Kick,
    /// The GIC's maintenance interrupt.
    Maintenance,
    /// The virtual timer of the vCPU running on this CPU.
    VirtualTimer,
    /// The hypervisor's own timer: a slice ended, or a blocked vCPU's timer is due.
    HypTimer,
    /// The board UART received what the user typed.
    ConsoleInput,
    /// The board's NIC, the virtual switch's uplink.
    Uplink,
    /// An SPI of a passthrough device, forwarded to the VM that owns it.
    Passthrough,
    /// The board's disk completed requests.
    Disk,
}

const ROUTES: [Route; 9] = [
    Route::Unrouted,
    Route::Kick,
    Route::Maintenance,
    Route::VirtualTimer,
    Route::HypTimer,
    Route::ConsoleInput,
    Route::Uplink,
    Route::Passthrough,
    Route::Disk,
];

/// INTIDs 0..1020 (1020-1023 are special: GIC architecture specification, INTID ranges).
const INTIDS: usize = 1020;

/// Why a route cannot be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// The INTID is not one an interrupt can have.
    NoSuchInterrupt { intid: u32 },
    /// The INTID has another route already: two uses of one interrupt would take each
    /// other's interrupts.
    Taken { intid: u32, route: Route },
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::NoSuchInterrupt { intid } => write!(f, "INTID {intid} is not an interrupt"),
            RouteError::Taken { intid, route } => write!(f, "INTID {intid} is taken already ({route:?})"),
        }
    }
}

pub struct Routes {
    route: [AtomicU8; INTIDS],
}

impl Default for Routes {
    fn default() -> Self {
        Self::new()
    }
}

impl Routes {
    pub const fn new() -> Self {
        Routes { route: [const { AtomicU8::new(Route::Unrouted as u8) }; INTIDS] }
    }

    /// From now on interrupt `intid` is for `route`. Setting the route it has is no change.
    pub fn set(&self, intid: u32, route: Route) -> Result<(), RouteError> {
        let slot = self.route.get(intid as usize).ok_or(RouteError::NoSuchInterrupt { intid })?;
        match slot.compare_exchange(Route::Unrouted as u8, route as u8, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(now) if now == route as u8 => Ok(()),
            Err(now) => Err(RouteError::Taken { intid, route: ROUTES[usize::from(now)] }),
        }
    }

    /// What interrupt `intid` is for.
    pub fn of(&self, intid: u32) -> Route {
        self.route
            .get(intid as usize)
            .and_then(|r| ROUTES.get(usize::from(r.load(Ordering::Relaxed))).copied())
            .unwrap_or(Route::Unrouted)
    }
}
