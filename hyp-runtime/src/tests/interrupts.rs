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
    for intid in [1020, 1023, u32::MAX] {
        assert_eq!(routes.set(intid, Route::Uplink), Err(RouteError::NoSuchInterrupt { intid }));
        assert_eq!(routes.of(intid), Route::Unrouted);
    }
}
