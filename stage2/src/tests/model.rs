//! The tables refine an abstract model: random map / unmap / protect / hidden map / show /
//! hide sequences on every format, checked after every step against a map from IPA to (PA,
//! attributes, owner, hidden).

use proptest::prelude::*;

use super::*;

/// One mapped interval `[start, end)` of the model: the PA of `start`, attributes, owner,
/// and whether it is hidden (present, invalid to the hardware until shown).
type Interval = (u64, u64, u64, MappingAttributes, OwnershipState, bool);

/// The abstract model: disjoint intervals, equivalent to a map from each 4 KiB page's IPA to
/// (PA, attributes, owner) but cheap for gigabyte mappings.
#[derive(Clone, Debug, Default)]
struct Model(Vec<Interval>);

impl Model {
    fn overlapping(&self, a: u64, b: u64) -> impl Iterator<Item = &Interval> {
        self.0.iter().filter(move |(s, e, ..)| *s < b && a < *e)
    }
    /// Cuts every interval at `a` and `b`.
    fn cut(&mut self, a: u64, b: u64) {
        let mut out = Vec::new();
        for &(s, e, pa, attrs, owner, hidden) in &self.0 {
            let mut points = vec![s];
            points.extend([a, b].into_iter().filter(|p| s < *p && *p < e));
            points.push(e);
            out.extend(points.windows(2).map(|w| (w[0], w[1], pa + (w[0] - s), attrs, owner, hidden)));
        }
        self.0 = out;
    }
    fn unmap(&mut self, a: u64, b: u64) {
        self.cut(a, b);
        self.0.retain(|(s, e, ..)| !(a <= *s && *e <= b));
    }
    fn protect(&mut self, a: u64, b: u64, p: Permissions) {
        self.cut(a, b);
        for i in self.0.iter_mut().filter(|i| a <= i.0 && i.1 <= b) {
            i.3.permissions = p;
        }
    }
    /// Sets `hidden` over `[a, b)` where the attributes are those of a shadow page.
    fn set_hidden(&mut self, a: u64, b: u64, hidden: bool) {
        self.cut(a, b);
        for i in self.0.iter_mut().filter(|i| a <= i.0 && i.1 <= b && i.3 == MappingAttributes::READ_ONLY_DEVICE) {
            i.5 = hidden;
        }
    }
    /// What the hardware reads: nothing where hidden.
    fn lookup(&self, ipa: u64) -> Option<(PhysAddr, MappingAttributes, OwnershipState)> {
        self.0
            .iter()
            .find(|(s, e, .., hidden)| *s <= ipa && ipa < *e && !hidden)
            .map(|&(s, _, pa, attrs, owner, _)| (PhysAddr(pa + ipa - s), attrs, owner))
    }
    /// Maximal runs: adjacent intervals with contiguous PAs and equal attributes merged.
    fn runs(mut v: Vec<Interval>) -> Vec<Interval> {
        v.sort_by_key(|i| i.0);
        let mut out: Vec<Interval> = Vec::new();
        for i in v {
            match out.last_mut() {
                Some(last)
                    if last.1 == i.0
                        && last.2 + (last.1 - last.0) == i.2
                        && (last.3, last.4, last.5) == (i.3, i.4, i.5) =>
                {
                    last.1 = i.1
                }
                _ => out.push(i),
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
enum Op {
    Map {
        ipa: u64,
        size: u64,
        pa: u64,
        device: bool,
        owner: OwnershipState,
    },
    Unmap {
        ipa: u64,
        size: u64,
    },
    Protect {
        ipa: u64,
        size: u64,
        permissions: Permissions,
    },
    /// A shadow page or a few, hidden.
    MapHidden {
        ipa: u64,
        pages: u64,
        pa: u64,
    },
    Show {
        ipa: u64,
        size: u64,
    },
    Hide {
        ipa: u64,
        size: u64,
    },
}

/// The formats, each with a window of IPAs (the operations reach up to 8 GiB into it) of IPAs that crosses an interesting boundary: the
/// end of a 32-bit space, the two concatenated root frames of a 40-bit space (at 512 GiB),
/// two level-0 entries of a 48-bit space (also at 512 GiB).
fn format() -> impl Strategy<Value = (TableFormat, u64)> {
    prop_oneof![
        Just((TableFormat::Vmsav8_64 { ipa_bits: 32, pa_bits: 36 }, 0)),
        Just((v8_40(), 510 * GIB)),
        Just((TableFormat::Vmsav8_64 { ipa_bits: 48, pa_bits: 48 }, 510 * GIB)),
        Just((TableFormat::ArmV7Lpae, 510 * GIB)),
    ]
}

/// IPAs and sizes in units that hit page, 2 MiB and 1 GiB boundaries in the window.
fn op() -> impl Strategy<Value = Op> {
    let unit = prop_oneof![Just(KIB4), Just(MIB2), Just(GIB / 4)];
    let ipa = (0u64..16, 0u64..3).prop_map(|(g, k)| g * (GIB / 4) + k * (MIB2 - KIB4));
    let size = (unit, 1u64..5).prop_map(|(u, n)| u * n);
    // PAs congruent with their IPA modulo 1 GiB (blocks wherever the IPA allows), off by
    // 2 MiB (level-2 blocks, never level 1) or off by a page (pages only: kept to a few
    // MiB, so that the thousands of cases stay fast).
    let small_size = (prop_oneof![Just(KIB4), Just(MIB2)], 1u64..5).prop_map(|(u, n)| u * n);
    let pa_offset_and_size = prop_oneof![
        2 => (prop_oneof![Just(0), Just(MIB2)], size.clone()),
        1 => (Just(KIB4), small_size),
    ];
    let pa_base = (0u64..8, pa_offset_and_size).prop_map(|(g, (off, size))| (4 * GIB + g * GIB + off, size));
    let owner = prop_oneof![Just(OwnershipState::Owned), Just(OwnershipState::Shared), Just(OwnershipState::Borrowed)];
    let permissions = (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(read, write, execute)| Permissions {
        read,
        write,
        execute,
    });
    prop_oneof![
        (ipa.clone(), pa_base, any::<bool>(), owner).prop_map(|(ipa, (pa, size), device, owner)| Op::Map {
            ipa,
            size,
            pa: pa + (ipa & (GIB - 1)),
            device,
            owner
        }),
        (ipa.clone(), size.clone()).prop_map(|(ipa, size)| Op::Unmap { ipa, size }),
        (ipa.clone(), size.clone(), permissions).prop_map(|(ipa, size, permissions)| Op::Protect {
            ipa,
            size,
            permissions
        }),
        (ipa.clone(), 1u64..4, 0u64..8).prop_map(|(ipa, pages, g)| Op::MapHidden { ipa, pages, pa: 4 * GIB + g * GIB }),
        (ipa.clone(), size.clone()).prop_map(|(ipa, size)| Op::Show { ipa, size }),
        (ipa, size).prop_map(|(ipa, size)| Op::Hide { ipa, size }),
    ]
}

/// The real tables against the model: the same leaves (as maximal runs), and translate
/// agrees at every boundary of the model and at `probes`.
fn check(f: &Fixture, model: &Model, probes: &[u64]) -> Result<(), TestCaseError> {
    // Hidden in the model: present but invalid (this test maps no RAM pending, so only the
    // hidden maps, and protect of what they mapped, give such leaves).
    let real = f.leaves().iter().map(|l| (l.ipa.0, l.ipa.0 + l.size, l.pa.0, l.attrs, l.owner, l.pending)).collect();
    prop_assert!(f.leaves().iter().all(|l| !l.pending || l.attrs.memory == MemoryType::DeviceNGnRE));
    prop_assert_eq!(Model::runs(real), Model::runs(model.0.clone()));
    let bounds = model.0.iter().flat_map(|&(s, e, ..)| [s.wrapping_sub(1), s, e - 1, e]);
    for ipa in bounds.chain(probes.iter().copied()) {
        let real = f.at(ipa).map(|t| (t.pa, t.attrs, t.owner));
        prop_assert_eq!(real, model.lookup(ipa), "IPA {:#x}", ipa);
    }
    prop_assert_eq!(f.mem.frames_in_use(), f.frames(), "a frame leaked");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn tables_refine_the_interval_model(
        (format, window) in format(),
        ops in prop::collection::vec(op(), 1..12),
        probes in prop::collection::vec(0u64..9 * GIB, 8),
    ) {
        let mut f = fixture(format, 4096);
        let limit = 1u64 << f.table.geometry().ipa_bits;
        let probes: Vec<u64> = probes.iter().map(|p| window + p).collect();
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Map { ipa, size, pa, device, owner } => {
                    let ipa = window + ipa;
                    let attrs = if device { DEVICE } else { RAM };
                    let result = f.map_owned(ipa, size, pa, attrs, owner);
                    if ipa + size > limit {
                        prop_assert_eq!(result, Err(Stage2Error::BeyondIpaSize { end: ipa + size, ipa_bits: f.table.geometry().ipa_bits }));
                    } else if let Some(&(s, ..)) = model.overlapping(ipa, ipa + size).min_by_key(|i| i.0) {
                        prop_assert_eq!(result, Err(Stage2Error::AlreadyMapped { ipa: s.max(ipa) }));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.0.push((ipa, ipa + size, pa, attrs, owner, false));
                    }
                }
                Op::MapHidden { ipa, pages, pa } => {
                    let (ipa, size, pa) = (window + ipa, pages * KIB4, pa + (ipa & (GIB - 1)));
                    let shadow = MappingAttributes::READ_ONLY_DEVICE;
                    let result = f.table.map_range_hidden(&mut f.mem, &mut f.tlb, range(ipa, size), PhysAddr(pa), shadow, OwnershipState::Owned);
                    if ipa + size > limit {
                        prop_assert_eq!(result, Err(Stage2Error::BeyondIpaSize { end: ipa + size, ipa_bits: f.table.geometry().ipa_bits }));
                    } else if let Some(&(s, ..)) = model.overlapping(ipa, ipa + size).min_by_key(|i| i.0) {
                        prop_assert_eq!(result, Err(Stage2Error::AlreadyMapped { ipa: s.max(ipa) }));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.0.push((ipa, ipa + size, pa, shadow, OwnershipState::Owned, true));
                    }
                    prop_assert!(f.leaves().iter().filter(|l| l.is_hidden()).all(|l| l.size == KIB4 || l.level < 3));
                }
                Op::Show { ipa, size } | Op::Hide { ipa, size } => {
                    // Whole leaves: those overlapping the range that change (hidden shadow
                    // pages to show; valid read-only device leaves to hide).
                    let (a, b) = (window + ipa, (window + ipa + size).min(limit));
                    let show = matches!(op, Op::Show { .. });
                    let changing: Vec<(u64, u64)> = f
                        .leaves()
                        .iter()
                        .filter(|l| l.ipa.0 < b && a < l.ipa.0 + l.size && l.attrs == MappingAttributes::READ_ONLY_DEVICE && l.pending == show)
                        .map(|l| (l.ipa.0, l.ipa.0 + l.size))
                        .collect();
                    let tlb_before = f.tlb.events().len();
                    let whole = range(window + ipa, size);
                    let bytes = if show {
                        f.table.show_range(&mut f.mem, &mut f.tlb, whole)
                    } else {
                        f.table.hide_range(&mut f.mem, &mut f.tlb, whole)
                    };
                    prop_assert_eq!(bytes, changing.iter().map(|(s, e)| e - s).sum::<u64>());
                    for &(s, e) in &changing {
                        model.set_hidden(s, e, !show);
                    }
                    // Hiding invalidates each leaf it hid, once; showing invalidates nothing.
                    let invalidated: Vec<u64> = f.tlb.events()[tlb_before..]
                        .iter()
                        .filter_map(|e| if let Event::InvalidateIpa { ipa, .. } = e { Some(ipa.0) } else { None })
                        .collect();
                    let expected: Vec<u64> = if show { vec![] } else { changing.iter().map(|(s, _)| *s).collect() };
                    prop_assert_eq!(invalidated, expected);
                }
                Op::Unmap { ipa, size } => {
                    let ipa = window + ipa;
                    let result = f.unmap(ipa, size);
                    if ipa + size > limit {
                        let refused = matches!(result, Err(Stage2Error::BeyondIpaSize { .. }));
                        prop_assert!(refused, "{:?}", result);
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.unmap(ipa, ipa + size);
                    }
                }
                Op::Protect { ipa, size, permissions } => {
                    let ipa = window + ipa;
                    let result = f.protect(ipa, size, permissions);
                    let device = model.overlapping(ipa, ipa + size).any(|i| i.3.memory == MemoryType::DeviceNGnRE);
                    if ipa + size > limit {
                        let refused = matches!(result, Err(Stage2Error::BeyondIpaSize { .. }));
                        prop_assert!(refused, "{:?}", result);
                    } else if permissions.execute && device {
                        prop_assert_eq!(result, Err(Stage2Error::InvalidPermissions));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.protect(ipa, ipa + size, permissions);
                    }
                }
            }
            check(&f, &model, &probes)?;
        }
        assert_break_before_make(&f.tlb.events());
        let (a, b) = (window, (window + 9 * GIB).min(limit));
        prop_assert_eq!(f.unmap(a, b - a), Ok(()));
        prop_assert_eq!(f.frames(), f.root_tables());
        prop_assert_eq!(f.mem.frames_in_use(), f.root_tables());
    }
}
