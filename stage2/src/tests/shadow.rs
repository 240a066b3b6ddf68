//! Hidden leaves (an emulated window's shadow page): read-only Device pages, present in the
//! tables, invalid to the hardware until shown, and invalidated in the TLB when hidden again.
//! Neither they nor pending RAM can be made valid by the other's operation.

use super::*;

const SHADOW: MappingAttributes = MappingAttributes::READ_ONLY_DEVICE;
/// An emulated UART window and its shadow page.
const WINDOW: u64 = 0x0900_0000;
const PAGE_PA: u64 = 0x4800_0000;

impl Fixture {
    fn map_hidden(&mut self, ipa: u64, size: u64, pa: u64, attrs: MappingAttributes) -> Result<(), Stage2Error> {
        self.table.map_range_hidden(
            &mut self.mem,
            &mut self.tlb,
            range(ipa, size),
            PhysAddr(pa),
            attrs,
            OwnershipState::Owned,
        )
    }
    fn show(&mut self, ipa: u64, size: u64) -> u64 {
        self.table.show_range(&mut self.mem, &mut self.tlb, range(ipa, size))
    }
    fn hide(&mut self, ipa: u64, size: u64) -> u64 {
        self.table.hide_range(&mut self.mem, &mut self.tlb, range(ipa, size))
    }
    fn invalidations(&self) -> Vec<Ipa> {
        self.tlb
            .events()
            .iter()
            .filter_map(|e| match *e {
                Event::InvalidateIpa { vmid: 1, ipa } => Some(ipa),
                Event::InvalidateIpa { vmid, .. } => panic!("invalidated for VMID {vmid}, not the table's"),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn a_hidden_page_is_mapped_for_the_tables_and_faults_for_the_guest() {
    let mut f = fixture(v8_40(), 64);
    f.map_hidden(WINDOW, 2 * KIB4, PAGE_PA, SHADOW).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 2);
    assert!(leaves.iter().all(|l| l.pending && l.is_hidden() && l.size == KIB4 && l.attrs == SHADOW));
    assert_eq!(leaves[1].pa, PhysAddr(PAGE_PA + KIB4));
    assert_eq!(f.at(WINDOW), None, "hidden: every access is a Translation fault");
    assert_eq!(f.map(WINDOW + KIB4, KIB4, 0x5000_0000, DEVICE), Err(Stage2Error::AlreadyMapped { ipa: WINDOW + KIB4 }));
}

#[test]
fn only_read_only_never_executable_device_pages_are_mapped_hidden() {
    let mut f = fixture(v8_40(), 64);
    let before = f.mem.snapshot();
    let ram_ro = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RO };
    let device_rx = MappingAttributes {
        memory: MemoryType::DeviceNGnRE,
        permissions: Permissions { read: true, write: false, execute: true },
    };
    for attrs in [RAM, ram_ro, DEVICE, device_rx] {
        assert_eq!(f.map_hidden(WINDOW, KIB4, PAGE_PA, attrs), Err(Stage2Error::HiddenNotReadOnlyDevice), "{attrs:?}");
    }
    assert_eq!(f.mem.snapshot(), before, "a refused map changes nothing");
    // Out of frames: nothing changed either.
    f.mem.set_budget(f.mem.frames_in_use());
    assert_eq!(f.map_hidden(WINDOW, KIB4, PAGE_PA, SHADOW), Err(Stage2Error::OutOfFrames));
    assert_eq!(f.mem.snapshot(), before);
}

#[test]
fn a_window_aligned_to_a_block_is_still_pages() {
    let mut f = fixture(v8_40(), 64);
    f.map_hidden(GIB, MIB2, 3 * GIB, SHADOW).unwrap();
    assert_eq!(f.leaves().len(), 512);
    assert!(f.leaves().iter().all(|l| l.level == 3));
}

#[test]
fn shown_the_page_reads_through_and_hidden_again_it_faults_after_a_tlb_invalidation() {
    let mut f = fixture(v8_40(), 64);
    f.map_hidden(WINDOW, 2 * KIB4, PAGE_PA, SHADOW).unwrap();
    let writes_before = f.tlb.events().len();
    assert_eq!(f.show(WINDOW, 2 * KIB4), 2 * KIB4);
    let t = f.at(WINDOW + KIB4 + 0x18).unwrap();
    assert_eq!((t.pa, t.attrs, t.level), (PhysAddr(PAGE_PA + KIB4 + 0x18), SHADOW, 3));
    assert!(!f.table.translate(&f.mem, Ipa(WINDOW)).unwrap().attrs.permissions.write, "writes still trap");
    assert!(f.invalidations().is_empty(), "invalid to valid needs no TLB invalidation");
    assert_eq!(f.tlb.events().last(), Some(&Event::Publish), "the DSB that publishes the descriptors");
    assert!(f.tlb.events().len() > writes_before);
    assert_eq!(f.show(WINDOW, 2 * KIB4), 0, "shown twice: nothing to do");
    // Hiding one page invalidates that page only, after its descriptor is made invalid.
    assert_eq!(f.hide(WINDOW + KIB4, KIB4), KIB4);
    assert_eq!(f.invalidations(), [Ipa(WINDOW + KIB4)]);
    assert_eq!(f.at(WINDOW + KIB4), None);
    assert!(f.at(WINDOW).is_some());
    assert_eq!(f.hide(WINDOW, 2 * KIB4), KIB4, "only what was valid is hidden again");
    assert_eq!(f.invalidations(), [Ipa(WINDOW + KIB4), Ipa(WINDOW)]);
    assert_eq!(f.hide(WINDOW, 2 * KIB4), 0);
    assert_eq!(f.invalidations().len(), 2, "a hidden page is in no TLB: nothing more to invalidate");
    let leaves = f.leaves();
    assert!(leaves.iter().all(|l| l.is_hidden()), "PA and attributes kept: {leaves:?}");
    assert_eq!((leaves[0].pa, leaves[1].pa), (PhysAddr(PAGE_PA), PhysAddr(PAGE_PA + KIB4)));
    assert_break_before_make(&f.tlb.events());
    // Shown again, then unmapped: every table frame is freed.
    f.show(WINDOW, KIB4);
    f.unmap(WINDOW, 2 * KIB4).unwrap();
    assert!(f.leaves().is_empty());
    assert_eq!(f.mem.frames_in_use(), f.root_tables());
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn showing_never_exposes_unzeroed_ram_and_the_first_touch_never_zeroes_a_shadow() {
    let mut f = fixture(v8_40(), 64);
    f.table
        .map_range_pending(&mut f.mem, &mut f.tlb, range(GIB, MIB2), PhysAddr(3 * GIB), RAM, OwnershipState::Owned)
        .unwrap();
    f.map(
        2 * GIB,
        KIB4,
        0x0a00_0000,
        MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RO },
    )
    .unwrap();
    f.map(2 * GIB + KIB4, KIB4, 4 * GIB, RAM).unwrap();
    f.map_hidden(WINDOW, KIB4, PAGE_PA, SHADOW).unwrap();
    // Show over everything: only the shadow page becomes valid.
    let everything = range(0, 4 * GIB);
    assert_eq!(f.table.show_range(&mut f.mem, &mut f.tlb, everything), KIB4);
    assert_eq!(f.at(GIB), None, "pending RAM stays pending until zeroed");
    // Hide over everything: the shadow page, and the read-only device page mapped valid (the
    // same attributes; the capability space never hides a range but its windows'), but not RAM.
    assert_eq!(f.table.hide_range(&mut f.mem, &mut f.tlb, everything), 2 * KIB4);
    assert!(f.at(2 * GIB + KIB4).is_some(), "valid RAM is never hidden (its first touch would zero it)");
    // The first touch over everything zeroes the RAM only.
    let mut zeroed = Vec::new();
    f.table.activate_range(&mut f.mem, &mut f.tlb, everything, &mut |pa, len| zeroed.push((pa, len)));
    assert_eq!(zeroed, [(PhysAddr(3 * GIB), MIB2)]);
    assert_eq!(f.at(WINDOW), None, "the shadow is still hidden");
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn show_and_hide_past_the_ipa_space_touch_nothing_there() {
    let mut f = fixture(TableFormat::Vmsav8_64 { ipa_bits: 32, pa_bits: 36 }, 64);
    f.map_hidden((4 * GIB) - KIB4, KIB4, PAGE_PA, SHADOW).unwrap();
    assert_eq!(f.show(4 * GIB - KIB4, 2 * GIB), KIB4);
    assert_eq!(f.show(4 * GIB, 2 * GIB), 0);
    assert_eq!(f.hide(4 * GIB - KIB4, 8 * GIB), KIB4);
    let mut zeroed = 0;
    f.table.activate_range(&mut f.mem, &mut f.tlb, range(5 * GIB, KIB4), &mut |_, _| zeroed += 1);
    assert_eq!(zeroed, 0);
}
