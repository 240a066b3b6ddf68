//! The interrupt routing table.

use crate::interrupts::{Route, RouteError, Routes};

#[test]
fn each_interrupt_has_the_route_it_was_given_and_no_other() {
    let routes = Routes::new();
    routes.set(1, Route::Kick).unwrap();
    routes.set(26, Route::HypTimer).unwrap();
    routes.set(33, Route::ConsoleInput).unwrap();
    routes.set(40, Route::Passthrough).unwrap();
    assert_eq!(
        [1, 26, 33, 40, 27, 0].map(|i| routes.of(i)),
        [Route::Kick, Route::HypTimer, Route::ConsoleInput, Route::Passthrough, Route::Unrouted, Route::Unrouted]
    );
    assert_eq!(routes.set(33, Route::ConsoleInput), Ok(()), "the same route again changes nothing");
    assert_eq!(routes.set(33, Route::Uplink), Err(RouteError::Taken { intid: 33, route: Route::ConsoleInput }));
    assert_eq!(routes.of(33), Route::ConsoleInput, "a refused route leaves the first");
}

#[test]
fn intids_beyond_the_gics_are_refused_and_unrouted() {
    let routes = Routes::new();
    for intid in [1020, 1023, 8191] {
        assert_eq!(routes.set(intid, Route::Uplink), Err(RouteError::NoSuchInterrupt { intid }));
        assert_eq!(routes.of(intid), Route::Unrouted);
    }
    // Every LPI is a doorbell of the board's GICv4.0, none settable as another route.
    for intid in [8192, 8192 + 127, u32::MAX] {
        assert_eq!(routes.set(intid, Route::Uplink), Err(RouteError::NoSuchInterrupt { intid }));
        assert_eq!(routes.of(intid), Route::Doorbell);
    }
}

#[test]
fn a_passthrough_spi_is_forwarded_to_its_owner_until_released() {
    let routes = Routes::new();
    routes.set(40, Route::Passthrough).unwrap();
    routes.set(41, Route::Passthrough).unwrap();
    routes.set(33, Route::ConsoleInput).unwrap();
    assert_eq!(routes.owner(40), None, "routed, but no VM owns it yet");
    assert!(routes.claim(40, 0));
    assert!(routes.claim(41, 3));
    assert_eq!((routes.owner(40), routes.owner(41)), (Some(0), Some(3)));
    assert_eq!(routes.of(41), Route::Passthrough, "an owner leaves the route as it was");
    assert_eq!(routes.set(41, Route::Passthrough), Ok(()), "and the same route again changes nothing");
    assert_eq!(routes.set(41, Route::Uplink), Err(RouteError::Taken { intid: 41, route: Route::Passthrough }));
    routes.release(40);
    assert_eq!(routes.owner(40), None);
    assert_eq!(routes.of(40), Route::Passthrough, "released, still routed for the VM created again");
    assert_eq!(routes.owner(41), Some(3), "another SPI keeps its owner");
    // Only what boot routed to passthrough can be owned: not the console's interrupt, not an
    // unrouted one, not beyond the GIC's INTIDs.
    for intid in [33, 42, 0, 27, 1020, 1023, u32::MAX] {
        assert!(!routes.claim(intid, 1), "INTID {intid}");
        assert_eq!(routes.owner(intid), None, "INTID {intid}");
        routes.release(intid);
    }
    assert_eq!(routes.of(33), Route::ConsoleInput, "a release of another route changes nothing");
    assert!(!routes.claim(41, usize::MAX), "a VM index beyond the entry's bits");
}
