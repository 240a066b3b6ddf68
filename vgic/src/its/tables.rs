//! The ITS's own tables, held inside it rather than in guest memory (the GITS_BASER<n> are
//! unimplemented, GITS_TYPER.HCC holds the collections: IHI 0069H 5.2):
//! the device table (DeviceID to ITT), each device's ITT (EventID to translation) and the
//! collection table (ICID to vCPU). All of it is allocated when the ITS is created; nothing
//! here allocates afterwards, and nothing indexes with a value it has not checked.
//!
//! A device is one of `MAX_DEVICES` slots, each with an index of `MAX_EVENTS_PER_DEVICE`
//! entries into one shared, compact list of translations (at most `MAX_TRANSLATIONS`): a
//! translation is found in a binary search of the mapped DeviceIDs and one index, and
//! commands that walk every translation (MAPC, INVALL, MOVALL, the LPI-in-use check) walk
//! only the mapped ones.

use alloc::vec::Vec;

use super::error::ItsError;

/// Devices the ITS holds at once.
pub(super) const MAX_DEVICES: usize = 64;
/// Events a device may have: MAPD Size 7 (IHI 0069H 5.3, "MAPD": 2^(Size+1) EventIDs).
pub(super) const MAX_EVENTS_PER_DEVICE: usize = 256;
/// The largest MAPD Size the ITS accepts.
pub(super) const MAX_ITT_SIZE: u8 = 7;
/// Translations (mapped events) of all devices together.
pub(super) const MAX_TRANSLATIONS: usize = 1024;

/// An ITT entry with no translation.
const NO_TRANSLATION: u16 = u16::MAX;

/// One device slot: its ITT's size and where each of its events' translations is.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Device {
    /// The EventID bits of its ITT (MAPD Size + 1); 0 while the slot is free.
    event_bits: u8,
    /// For each EventID, its translation's place in `Tables::translations`, or `NO_TRANSLATION`.
    itt: [u16; MAX_EVENTS_PER_DEVICE],
}

/// One mapped event (an interrupt translation table entry, IHI 0069H 5.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Translation {
    pub device_id: u32,
    pub event_id: u8,
    pub lpi: u32,
    pub icid: u16,
    /// The vCPU the LPI was last routed to ([`super::LpiTable::route`]), if it has been since
    /// it was mapped: its collection's target, unless MOVALL moved it.
    pub routed: Option<u16>,
    /// Its device's slot.
    slot: u8,
}

#[derive(PartialEq, Eq, Debug)]
pub(super) struct Tables {
    devices: Vec<Device>,
    /// The mapped DeviceIDs with their slots, sorted by DeviceID.
    mapped: Vec<(u32, u8)>,
    translations: Vec<Translation>,
    /// Each collection's target vCPU, if it is mapped; one collection per vCPU.
    collections: Vec<Option<u16>>,
}

/// A copy with the same capacity reserved: a mapping made in the copy must not allocate
/// where one in the original would not. (The hypervisor never clones a VM's vGIC; the
/// tests do, and a copy of a `Vec` has only its length's capacity.)
impl Clone for Tables {
    fn clone(&self) -> Tables {
        fn copy<T: Clone>(v: &[T], capacity: usize) -> Vec<T> {
            let mut c = Vec::with_capacity(capacity);
            c.extend_from_slice(v);
            c
        }
        Tables {
            devices: copy(&self.devices, self.devices.capacity()),
            mapped: copy(&self.mapped, self.mapped.capacity()),
            translations: copy(&self.translations, self.translations.capacity()),
            collections: copy(&self.collections, self.collections.capacity()),
        }
    }
}

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), ItsError> {
    v.try_reserve_exact(n).map_err(|_| ItsError::OutOfMemory)
}

impl Tables {
    pub(super) fn new(vcpus: usize) -> Result<Tables, ItsError> {
        let mut t =
            Tables { devices: Vec::new(), mapped: Vec::new(), translations: Vec::new(), collections: Vec::new() };
        reserve(&mut t.devices, MAX_DEVICES)?;
        reserve(&mut t.mapped, MAX_DEVICES)?;
        reserve(&mut t.translations, MAX_TRANSLATIONS)?;
        reserve(&mut t.collections, vcpus)?;
        t.devices.resize(MAX_DEVICES, Device { event_bits: 0, itt: [NO_TRANSLATION; MAX_EVENTS_PER_DEVICE] });
        t.collections.resize(vcpus, None);
        Ok(t)
    }

    /// The collections the ITS holds (GITS_TYPER.HCC).
    pub(super) fn collections(&self) -> usize {
        self.collections.len()
    }

    /// Collection `icid`: None if it does not exist, Some(None) if it is not mapped.
    pub(super) fn collection(&self, icid: u16) -> Option<Option<usize>> {
        self.collections.get(usize::from(icid)).map(|c| c.map(usize::from))
    }

    pub(super) fn set_collection(&mut self, icid: u16, target: Option<usize>) {
        if let Some(c) = self.collections.get_mut(usize::from(icid)) {
            *c = target.and_then(|v| u16::try_from(v).ok());
        }
    }

    /// The slot of device `device_id`, if it is mapped: a binary search, O(log devices).
    fn slot(&self, device_id: u32) -> Option<u8> {
        let i = self.mapped.binary_search_by_key(&device_id, |&(id, _)| id).ok()?;
        self.mapped.get(i).map(|&(_, slot)| slot)
    }

    /// The number of events of device `device_id`'s ITT, if it is mapped.
    pub(super) fn events(&self, device_id: u32) -> Option<u32> {
        let device = self.devices.get(usize::from(self.slot(device_id)?))?;
        Some(1 << device.event_bits)
    }

    /// Where event `event_id` of device `device_id`'s translation is, if it has one.
    pub(super) fn find(&self, device_id: u32, event_id: u32) -> Option<usize> {
        let device = self.devices.get(usize::from(self.slot(device_id)?))?;
        let i = *device.itt.get(usize::try_from(event_id).ok()?)?;
        (i != NO_TRANSLATION).then_some(usize::from(i))
    }

    pub(super) fn translation(&self, i: usize) -> Option<&Translation> {
        self.translations.get(i)
    }

    pub(super) fn translation_mut(&mut self, i: usize) -> Option<&mut Translation> {
        self.translations.get_mut(i)
    }

    pub(super) fn translations(&self) -> &[Translation] {
        &self.translations
    }

    pub(super) fn translations_mut(&mut self) -> &mut [Translation] {
        &mut self.translations
    }

    /// The translation whose LPI is `lpi`, if one is (at most one is: `Its` refuses a second).
    pub(super) fn owner_of(&self, lpi: u32) -> Option<usize> {
        self.translations.iter().position(|t| t.lpi == lpi)
    }

    /// Whether a device slot is free.
    pub(super) fn has_free_device(&self) -> bool {
        self.mapped.len() < MAX_DEVICES
    }

    /// Maps device `device_id` with an ITT of 2^`event_bits` events, without translations:
    /// false if every slot is taken. A mapped device must have been unmapped first.
    pub(super) fn map_device(&mut self, device_id: u32, event_bits: u8) -> bool {
        let Err(at) = self.mapped.binary_search_by_key(&device_id, |&(id, _)| id) else { return false };
        let Some(slot) = self.devices.iter().position(|d| d.event_bits == 0) else { return false };
        let (Ok(slot8), Some(device)) = (u8::try_from(slot), self.devices.get_mut(slot)) else { return false };
        if self.mapped.len() >= MAX_DEVICES {
            return false;
        }
        device.event_bits = event_bits;
        // Within the capacity reserved in `new`: no allocation.
        self.mapped.insert(at, (device_id, slot8));
        true
    }

    /// Unmaps device `device_id` (if mapped), calling `unmapped` with each LPI its events
    /// translated to.
    pub(super) fn unmap_device(&mut self, device_id: u32, unmapped: impl FnMut(u32)) {
        let Ok(at) = self.mapped.binary_search_by_key(&device_id, |&(id, _)| id) else { return };
        self.clear_itt(device_id, unmapped);
        let slot = self.mapped.remove(at).1;
        if let Some(device) = self.devices.get_mut(usize::from(slot)) {
            device.event_bits = 0;
        }
    }

    /// Removes every translation of device `device_id`, calling `unmapped` with each LPI.
    pub(super) fn clear_itt(&mut self, device_id: u32, mut unmapped: impl FnMut(u32)) {
        let Some(slot) = self.slot(device_id) else { return };
        for event in 0..MAX_EVENTS_PER_DEVICE {
            let Some(i) = self.devices.get(usize::from(slot)).and_then(|d| d.itt.get(event)).copied() else { break };
            if i != NO_TRANSLATION {
                if let Some(t) = self.remove(usize::from(i)) {
                    unmapped(t.lpi);
                }
            }
        }
    }

    /// Adds or replaces the translation of event `event_id` of mapped device `device_id`:
    /// the translation it replaced, or Err(()) if the event is beyond the ITT or every
    /// translation is taken.
    pub(super) fn insert(
        &mut self,
        device_id: u32,
        event_id: u32,
        lpi: u32,
        icid: u16,
        routed: Option<u16>,
    ) -> Result<Option<Translation>, ()> {
        let slot = self.slot(device_id).ok_or(())?;
        if event_id >= self.events(device_id).ok_or(())? {
            return Err(());
        }
        let event = u8::try_from(event_id).map_err(|_| ())?;
        let t = Translation { device_id, event_id: event, lpi, icid, routed, slot };
        let entry = self.devices.get_mut(usize::from(slot)).and_then(|d| d.itt.get_mut(usize::from(event))).ok_or(())?;
        if *entry != NO_TRANSLATION {
            let old = self.translations.get_mut(usize::from(*entry)).ok_or(())?;
            return Ok(Some(core::mem::replace(old, t)));
        }
        if self.translations.len() >= MAX_TRANSLATIONS {
            return Err(());
        }
        *entry = u16::try_from(self.translations.len()).map_err(|_| ())?;
        // Within the capacity reserved in `new`: no allocation.
        self.translations.push(t);
        Ok(None)
    }

    /// Removes translation `i`, keeping the list compact (the last one takes its place).
    pub(super) fn remove(&mut self, i: usize) -> Option<Translation> {
        if i >= self.translations.len() {
            return None;
        }
        let t = self.translations.swap_remove(i);
        self.set_itt(t.slot, t.event_id, NO_TRANSLATION);
        if let Some(&moved) = self.translations.get(i) {
            self.set_itt(moved.slot, moved.event_id, i as u16);
        }
        Some(t)
    }

    fn set_itt(&mut self, slot: u8, event: u8, i: u16) {
        if let Some(e) = self.devices.get_mut(usize::from(slot)).and_then(|d| d.itt.get_mut(usize::from(event))) {
            *e = i;
        }
    }

    /// Back to the state at creation (capacity kept).
    pub(super) fn clear(&mut self) {
        for d in &mut self.devices {
            d.event_bits = 0;
            d.itt = [NO_TRANSLATION; MAX_EVENTS_PER_DEVICE];
        }
        self.mapped.clear();
        self.translations.clear();
        self.collections.iter_mut().for_each(|c| *c = None);
    }

    /// The capacities reserved at creation are still the capacities (nothing grew).
    #[cfg(test)]
    pub(super) fn capacities(&self) -> [usize; 4] {
        [self.devices.capacity(), self.mapped.capacity(), self.translations.capacity(), self.collections.capacity()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_a_translation_moves_the_last_into_its_place() {
        let mut t = Tables::new(2).unwrap();
        assert!(t.map_device(7, 2));
        assert!(t.map_device(3, 8));
        assert_eq!(t.events(7), Some(4));
        assert_eq!(t.events(3), Some(256));
        assert_eq!(t.insert(7, 0, 8192, 0, None), Ok(None));
        assert_eq!(t.insert(3, 255, 8193, 1, None), Ok(None));
        assert_eq!(t.insert(7, 3, 8194, 0, None), Ok(None));
        assert_eq!(t.insert(7, 4, 8195, 0, None), Err(()), "beyond the ITT's index");
        let removed = t.remove(t.find(7, 0).unwrap()).unwrap();
        assert_eq!(removed.lpi, 8192);
        assert_eq!(t.find(7, 0), None);
        assert_eq!(t.translation(t.find(7, 3).unwrap()).unwrap().lpi, 8194);
        assert_eq!(t.translation(t.find(3, 255).unwrap()).unwrap().lpi, 8193);
        let mut gone = Vec::new();
        t.unmap_device(7, |lpi| gone.push(lpi));
        assert_eq!(gone, [8194]);
        assert_eq!(t.events(7), None);
        assert_eq!(t.translations().len(), 1);
        assert_eq!(t.translation(t.find(3, 255).unwrap()).unwrap().lpi, 8193);
    }

    #[test]
    fn the_tables_never_grow_past_what_new_reserved() {
        let mut t = Tables::new(4).unwrap();
        let before = t.capacities();
        for d in 0..MAX_DEVICES as u32 {
            assert!(t.map_device(d * 3, 8), "{d}");
        }
        assert!(!t.map_device(1000, 1), "every slot taken");
        let mut n = 0;
        'fill: for d in 0..MAX_DEVICES as u32 {
            for e in 0..256 {
                if t.insert(d * 3, e, 8192 + n, 0, None).is_err() {
                    break 'fill;
                }
                n += 1;
            }
        }
        assert_eq!(n as usize, MAX_TRANSLATIONS);
        assert_eq!(t.capacities(), before);
        t.clear();
        assert_eq!(t.capacities(), before);
        assert_eq!(t.translations().len(), 0);
        assert_eq!(t.events(0), None);
    }
}
