//! What each physical interrupt the hypervisor takes is for: one table, filled as the
//! hypervisor sets itself up (its PPIs and the kick SGI at boot, console input, the uplink
//! NIC, the board's disk, the passthrough SPIs), read by every CPU's interrupt path, which
//! handles an interrupt by its route instead of comparing it with each kind in turn. A
//! passthrough SPI's entry also names the VM it is forwarded to while that VM lives: one
//! load tells the interrupt path both.

use core::sync::atomic::{AtomicU32, Ordering};

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
    /// A doorbell of the board's GICv4.0 (an LPI): a vCPU waiting off its CPU has a vLPI
    /// (crate::direct_lpis).
    Doorbell,
}

/// The routes by their number, padded to 16 so that a table entry's low four bits index it
/// without a bounds check (the interrupt path reads it at every interrupt).
const ROUTES: [Route; 16] = {
    let mut routes = [Route::Unrouted; 16];
    let all = [
        Route::Kick,
        Route::Maintenance,
        Route::VirtualTimer,
        Route::HypTimer,
        Route::ConsoleInput,
        Route::Uplink,
        Route::Passthrough,
        Route::Disk,
        Route::Doorbell,
    ];
    let mut i = 0;
    while i < all.len() {
        routes[all[i] as usize] = all[i];
        i += 1;
    }
    routes
};

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

/// Each entry: the route in its low byte; above it, for a passthrough SPI, its VM's index
/// plus one (0: no VM owns it now).
pub struct Routes {
    route: [AtomicU32; INTIDS],
}

const ROUTE: u32 = 0xff;
const OWNER_SHIFT: u32 = 8;

impl Default for Routes {
    fn default() -> Self {
        Self::new()
    }
}

impl Routes {
    pub const fn new() -> Self {
        Routes { route: [const { AtomicU32::new(Route::Unrouted as u32) }; INTIDS] }
    }

    /// From now on interrupt `intid` is for `route`. Setting the route it has is no change.
    pub fn set(&self, intid: u32, route: Route) -> Result<(), RouteError> {
        let slot = self.route.get(intid as usize).ok_or(RouteError::NoSuchInterrupt { intid })?;
        match slot.compare_exchange(Route::Unrouted as u32, route as u32, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(now) if now & ROUTE == route as u32 => Ok(()),
            Err(now) => Err(RouteError::Taken { intid, route: ROUTES[(now & 15) as usize] }),
        }
    }

    /// What interrupt `intid` is for.
    /// Every LPI is a doorbell: the hypervisor maps no other.
    pub fn of(&self, intid: u32) -> Route {
        match self.route.get(intid as usize) {
            Some(r) => ROUTES[(r.load(Ordering::Relaxed) & 15) as usize],
            None if intid >= vgic::FIRST_LPI => Route::Doorbell,
            None => Route::Unrouted,
        }
    }

    /// From now on passthrough SPI `intid` is forwarded to VM `vm` (by index). Returns false,
    /// changing nothing, for an interrupt not routed to passthrough or a VM index out of
    /// range.
    pub fn claim(&self, intid: u32, vm: usize) -> bool {
        let Some(slot) = self.route.get(intid as usize) else { return false };
        let owner = vm.checked_add(1).and_then(|o| u32::try_from(o).ok()).filter(|o| *o < 1 << (32 - OWNER_SHIFT));
        let Some(owner) = owner else { return false };
        let passthrough = Route::Passthrough as u32;
        slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
            (now & ROUTE == passthrough).then_some(passthrough | owner << OWNER_SHIFT)
        })
        .is_ok()
    }

    /// Passthrough SPI `intid` is no longer forwarded (its route stays).
    pub fn release(&self, intid: u32) {
        if let Some(slot) = self.route.get(intid as usize) {
            slot.fetch_and(ROUTE, Ordering::AcqRel);
        }
    }

    /// The VM physical interrupt `intid` is forwarded to, if it is a passthrough SPI of a
    /// live VM.
    pub fn owner(&self, intid: u32) -> Option<usize> {
        let entry = self.route.get(intid as usize)?.load(Ordering::Acquire);
        let owner = (entry >> OWNER_SHIFT) as usize;
        (entry & ROUTE == Route::Passthrough as u32).then(|| owner.checked_sub(1))?
    }
}
