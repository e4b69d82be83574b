//! The primary index of one partition: digest → record metadata and data.
//!
//! An open-addressing hash table with linear probing, laid out as three
//! parallel arrays: one byte of tag per slot (probing reads only these), the
//! 34-byte digest and metadata of each slot (byte arrays, so no padding), and
//! the 8-byte record pointer. A slot costs exactly [`SLOT_BYTES`] = 43 bytes,
//! and a lookup or insert touches three cache lines. The digest is already
//! uniformly random, so its bytes are the hash.
//!
//! Capacity is not a power of two: the table grows by 1.3× when it is 85%
//! full and shrinks when under 30%, so it stays 65–85% full and the index
//! costs about 43 / 0.75 ≈ 57 bytes per record (the anchor's figure is 64).
//! Deletion shifts later slots back, so there are no tombstones.
//!
//! ```text
//! slot i:  tags[i]     u8         0 = empty, else 0x80 | 7 hash bits
//!          entries[i]  [u8; 20]   digest
//!                      [u8; 2]    generation (LE)
//!                      [u8; 4]    void time (LE), seconds since 2010-01-01, 0 = never
//!                      [u8; 8]    stamp (LE): last-update ms (low 48 bits) | set id << 48
//!          records[i]  8 bytes    thin pointer to the record's bytes
//!                                 (only when the data is in memory)
//!          locations[i] u32       persistent namespaces: the storage block
//!                                 of the current version
//!          extents[i]  [u32; 2]   data on the device only: the entry's
//!                                 offset in its block and padded size
//! ```
//!
//! So a slot costs 43 bytes in memory, 47 with the data in memory and
//! persisted, and 47 with the data on the device only (no pointer, but
//! location and extent).

use crate::blob::RecordBlob;
use bolide_types::Digest;

/// Bytes of index memory per slot.
pub const SLOT_BYTES: usize =
    1 + std::mem::size_of::<SlotEntry>() + std::mem::size_of::<Option<RecordBlob>>();

const LOAD_MAX_PERCENT: usize = 85;
const LOAD_MIN_PERCENT: usize = 30;
const GROWTH_NUMERATOR: usize = 13;
const GROWTH_DENOMINATOR: usize = 10;
const CAPACITY_MIN: usize = 8;
const LAST_UPDATE_MASK: u64 = (1 << 48) - 1;

/// A record's metadata as the index holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordMeta {
    /// Bumped by every write; 1..=65535, wraps to 1.
    pub generation: u16,
    /// Expiry, seconds since 2010-01-01; 0 = never.
    pub void_time: u32,
    /// Milliseconds since 2010-01-01 of the last write.
    pub last_update_ms: u64,
    /// 0 = no set.
    pub set_id: u16,
}

impl RecordMeta {
    /// Whether the record is past its void time at `now` (citrusleaf seconds).
    #[inline]
    pub fn is_expired(&self, now: u32) -> bool {
        self.void_time != 0 && self.void_time <= now
    }

    fn stamp(&self) -> u64 {
        (self.last_update_ms & LAST_UPDATE_MASK) | (u64::from(self.set_id) << 48)
    }
}

/// Where a record's current version is in storage, when its data lives on
/// the device only: the entry's offset in its block and its padded size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    pub offset: u32,
    pub bytes: u32,
}

/// A record's data as a table holds it.
#[derive(Debug)]
pub enum Data {
    /// The record's bytes, in memory.
    InMemory(RecordBlob),
    /// Only on the device (the block is the slot's location).
    OnDevice(Extent),
}

impl Data {
    /// Bytes the data accounts for: the record's length in memory, the
    /// entry's padded size on the device.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Data::InMemory(blob) => blob.len(),
            Data::OnDevice(extent) => extent.bytes as usize,
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A borrowed view of a slot's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored<'t> {
    /// The record's bytes.
    InMemory(&'t [u8]),
    /// The entry of the current version in storage block `block`.
    OnDevice { block: u32, extent: Extent },
}

impl<'t> Stored<'t> {
    /// The bytes if they are in memory.
    #[inline]
    pub fn in_memory(&self) -> Option<&'t [u8]> {
        match *self {
            Stored::InMemory(bytes) => Some(bytes),
            Stored::OnDevice { .. } => None,
        }
    }
}

/// What a table keeps per slot besides digest and metadata.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// The record's bytes (an in-memory namespace).
    #[default]
    Memory,
    /// The record's bytes and its storage block (data in memory, persisted).
    Persisted,
    /// The storage block and extent only (data on the device).
    Device,
}

/// Digest and metadata of one slot, as bytes: alignment 1, no padding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
struct SlotEntry {
    digest: [u8; 20],
    generation: [u8; 2],
    void_time: [u8; 4],
    stamp: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<SlotEntry>() == 34);
const _: () = assert!(std::mem::align_of::<SlotEntry>() == 1);

impl SlotEntry {
    fn new(digest: &Digest, meta: RecordMeta) -> SlotEntry {
        let mut entry = SlotEntry {
            digest: digest.0,
            ..SlotEntry::default()
        };
        entry.set_meta(meta);
        entry
    }

    #[inline]
    fn meta(&self) -> RecordMeta {
        let stamp = u64::from_le_bytes(self.stamp);
        RecordMeta {
            generation: u16::from_le_bytes(self.generation),
            void_time: u32::from_le_bytes(self.void_time),
            last_update_ms: stamp & LAST_UPDATE_MASK,
            set_id: (stamp >> 48) as u16,
        }
    }

    fn set_meta(&mut self, meta: RecordMeta) {
        self.generation = meta.generation.to_le_bytes();
        self.void_time = meta.void_time.to_le_bytes();
        self.stamp = meta.stamp().to_le_bytes();
    }
}

/// One partition's index.
#[derive(Default)]
pub struct IndexTable {
    tags: Vec<u8>,
    entries: Vec<SlotEntry>,
    /// Data in memory only (empty otherwise, costing nothing).
    records: Vec<Option<RecordBlob>>,
    /// Persistent namespaces only: the storage block holding each slot's
    /// current version.
    locations: Vec<u32>,
    /// Data on the device only: offset and size of each slot's entry.
    extents: Vec<Extent>,
    layout: Layout,
    len: usize,
}

/// The start of each slot array of one table, kept by a bulk loader (a cold
/// start) to prefetch the slots of records it will insert shortly, so that
/// several records' cache misses overlap. Never dereferenced.
#[derive(Clone, Copy, Debug)]
pub struct SlotAddresses {
    tags: *const u8,
    entries: *const u8,
    records: *const u8,
    locations: *const u32,
    extents: *const u8,
    capacity: usize,
}

impl SlotAddresses {
    /// Asks the CPU to start loading the lines a lookup or insert of
    /// `digest` touches first. A hint only.
    #[inline]
    pub fn prefetch(&self, digest: &Digest) {
        if self.capacity == 0 {
            return;
        }
        let home = ((u128::from(digest.hash_bits()) * self.capacity as u128) >> 64) as usize;
        prefetch_line(self.tags.wrapping_add(home));
        prefetch_line(
            self.entries
                .wrapping_add(home * std::mem::size_of::<SlotEntry>()),
        );
        if !self.records.is_null() {
            prefetch_line(
                self.records
                    .wrapping_add(home * std::mem::size_of::<Option<RecordBlob>>()),
            );
        }
        if !self.locations.is_null() {
            prefetch_line(self.locations.wrapping_add(home).cast());
        }
        if !self.extents.is_null() {
            prefetch_line(
                self.extents
                    .wrapping_add(home * std::mem::size_of::<Extent>()),
            );
        }
    }
}

/// A borrowed view of one occupied slot.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'t> {
    pub digest: &'t [u8; 20],
    pub meta: RecordMeta,
    pub record: Stored<'t>,
}

impl IndexTable {
    pub fn new() -> IndexTable {
        IndexTable::default()
    }

    /// A table that also records each record's storage block.
    pub fn with_locations() -> IndexTable {
        IndexTable::with_layout(Layout::Persisted)
    }

    pub fn with_layout(layout: Layout) -> IndexTable {
        IndexTable {
            layout,
            ..IndexTable::default()
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Index bytes per slot of this table.
    #[inline]
    fn slot_bytes(&self) -> usize {
        match self.layout {
            Layout::Memory => SLOT_BYTES,
            Layout::Persisted => SLOT_BYTES + 4,
            Layout::Device => {
                SLOT_BYTES - std::mem::size_of::<Option<RecordBlob>>()
                    + 4
                    + std::mem::size_of::<Extent>()
            }
        }
    }

    /// Records in the table.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots allocated.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.tags.len()
    }

    /// Index memory in bytes (slots × slot size).
    #[inline]
    pub fn index_bytes(&self) -> usize {
        self.capacity() * self.slot_bytes()
    }

    /// Looks a digest up.
    // PERF: hot path.
    #[inline]
    pub fn get(&self, digest: &Digest) -> Option<Entry<'_>> {
        let slot = self.find(digest)?;
        self.entry(slot)
    }

    /// Inserts or replaces a record; returns the old record's metadata and
    /// bytes if there was one.
    pub fn upsert(
        &mut self,
        digest: &Digest,
        meta: RecordMeta,
        record: RecordBlob,
    ) -> Option<(RecordMeta, RecordBlob)> {
        match self.upsert_at(digest, meta, Data::InMemory(record), 0) {
            Some((meta, Data::InMemory(blob), _)) => Some((meta, blob)),
            _ => None,
        }
    }

    /// [`IndexTable::upsert`] recording the storage block of the new
    /// version; also returns the old version's block. The data must suit
    /// the table's layout (bytes for memory layouts, an extent for the
    /// device layout).
    pub fn upsert_at(
        &mut self,
        digest: &Digest,
        meta: RecordMeta,
        data: Data,
        location: u32,
    ) -> Option<(RecordMeta, Data, u32)> {
        debug_assert_eq!(
            matches!(data, Data::OnDevice(_)),
            self.layout == Layout::Device
        );
        if let Some(slot) = self.find(digest) {
            let entry = self.entries.get_mut(slot)?;
            let old_meta = entry.meta();
            entry.set_meta(meta);
            let old_location = match self.locations.get_mut(slot) {
                Some(l) => std::mem::replace(l, location),
                None => 0,
            };
            let old = self.replace_data(slot, data);
            return old.map(|data| (old_meta, data, old_location));
        }
        if (self.len + 1) * 100 > self.capacity() * LOAD_MAX_PERCENT {
            let grown = (self.capacity() * GROWTH_NUMERATOR / GROWTH_DENOMINATOR).max(CAPACITY_MIN);
            self.resize(grown.max(self.capacity() + 1));
        }
        let slot = self.vacant_slot_for(digest);
        self.fill(slot, SlotEntry::new(digest, meta), data, location);
        self.len += 1;
        assert!(self.len <= self.capacity());
        None
    }

    /// Changes a present record's metadata only (touch).
    pub fn set_meta_of(&mut self, digest: &Digest, meta: RecordMeta) -> bool {
        match self
            .find(digest)
            .and_then(|slot| self.entries.get_mut(slot))
        {
            Some(entry) => {
                entry.set_meta(meta);
                true
            }
            None => false,
        }
    }

    /// Removes a record, returning its metadata and bytes.
    pub fn remove(&mut self, digest: &Digest) -> Option<(RecordMeta, RecordBlob)> {
        match self.remove_at(digest) {
            Some((meta, Data::InMemory(blob), _)) => Some((meta, blob)),
            _ => None,
        }
    }

    /// Removes a record, returning its metadata, data and storage block.
    pub fn remove_at(&mut self, digest: &Digest) -> Option<(RecordMeta, Data, u32)> {
        let slot = self.find(digest)?;
        let meta = self.entries.get(slot)?.meta();
        let record = self.take_data(slot);
        let location = self.locations.get(slot).copied().unwrap_or(0);
        self.vacate(slot);
        self.len -= 1;
        if self.len == 0 {
            // An empty partition holds no index memory at all.
            *self = IndexTable::with_layout(self.layout);
            return record.map(|data| (meta, data, location));
        }
        if self.capacity() > CAPACITY_MIN * 2 && self.len * 100 < self.capacity() * LOAD_MIN_PERCENT
        {
            let target = (self.len * 100 / 70).max(CAPACITY_MIN);
            self.resize(target);
        }
        record.map(|data| (meta, data, location))
    }

    /// Grows the table once so that `records` fit under the growth mark
    /// (a cold start knows roughly how many are coming).
    pub fn reserve(&mut self, records: usize) {
        let target = (records * 100 / LOAD_MAX_PERCENT + 1).max(CAPACITY_MIN);
        if target > self.capacity() && records > self.len {
            self.resize(target);
        }
    }

    /// Shrinks the table to the smallest capacity under the growth mark if
    /// it is more than a growth step larger (used once a cold start has
    /// inserted everything: the estimate it was sized for counts dead
    /// versions too).
    pub fn compact(&mut self) {
        let target = (self.len * 100 / LOAD_MAX_PERCENT + 1).max(CAPACITY_MIN);
        if target * GROWTH_NUMERATOR / GROWTH_DENOMINATOR < self.capacity() {
            self.resize(target);
        }
    }

    /// Where this table's slot arrays are, for [`SlotAddresses::prefetch`].
    /// Valid until the table next grows or shrinks; a stale copy only makes
    /// the hint useless, never wrong.
    #[inline]
    pub fn slot_addresses(&self) -> SlotAddresses {
        SlotAddresses {
            tags: self.tags.as_ptr(),
            entries: self.entries.as_ptr().cast(),
            records: if self.records.is_empty() {
                std::ptr::null()
            } else {
                self.records.as_ptr().cast()
            },
            locations: if self.locations.is_empty() {
                std::ptr::null()
            } else {
                self.locations.as_ptr()
            },
            extents: if self.extents.is_empty() {
                std::ptr::null()
            } else {
                self.extents.as_ptr().cast()
            },
            capacity: self.capacity(),
        }
    }

    /// The storage block of a record's current version.
    pub fn location(&self, digest: &Digest) -> Option<u32> {
        let slot = self.find(digest)?;
        self.locations.get(slot).copied()
    }

    /// Moves a record's current version to another storage block (and,
    /// with the data on the device, to `extent` in it).
    pub fn set_location(&mut self, digest: &Digest, location: u32, extent: Extent) -> bool {
        let Some(slot) = self.find(digest) else {
            return false;
        };
        if let Some(e) = self.extents.get_mut(slot) {
            *e = extent;
        }
        match self.locations.get_mut(slot) {
            Some(l) => {
                *l = location;
                true
            }
            None => false,
        }
    }

    /// Digests of records for which `predicate(meta)` holds.
    pub fn select(&self, mut predicate: impl FnMut(&RecordMeta) -> bool) -> Vec<Digest> {
        self.occupied()
            .filter_map(|slot| self.entries.get(slot))
            .filter(|entry| predicate(&entry.meta()))
            .map(|entry| Digest(entry.digest))
            .collect()
    }

    /// Visits every record.
    pub fn for_each<'t>(&'t self, mut visit: impl FnMut(Entry<'t>)) {
        for slot in self.occupied() {
            if let Some(entry) = self.entry(slot) {
                visit(entry);
            }
        }
    }

    // --- private: probing ---

    fn occupied(&self) -> impl Iterator<Item = usize> + '_ {
        self.tags
            .iter()
            .enumerate()
            .filter(|(_, &tag)| tag != 0)
            .map(|(slot, _)| slot)
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.capacity() as u128) >> 64) as usize
    }

    #[inline]
    fn tag(hash: u64) -> u8 {
        0x80 | (hash as u8 & 0x7f)
    }

    #[inline]
    fn find(&self, digest: &Digest) -> Option<usize> {
        let capacity = self.capacity();
        if capacity == 0 {
            return None;
        }
        let hash = digest.hash_bits();
        let tag = Self::tag(hash);
        let mut slot = self.home(hash);
        // The table is never full, so an empty slot ends every probe.
        for _ in 0..capacity {
            let slot_tag = *self.tags.get(slot)?;
            if slot_tag == 0 {
                return None;
            }
            if slot_tag == tag
                && self
                    .entries
                    .get(slot)
                    .is_some_and(|entry| entry.digest == digest.0)
            {
                return Some(slot);
            }
            slot += 1;
            if slot == capacity {
                slot = 0;
            }
        }
        None
    }

    fn vacant_slot_for(&self, digest: &Digest) -> usize {
        let capacity = self.capacity();
        let mut slot = self.home(digest.hash_bits());
        while self.tags.get(slot).is_some_and(|&t| t != 0) {
            slot += 1;
            if slot == capacity {
                slot = 0;
            }
        }
        slot
    }

    fn fill(&mut self, slot: usize, entry: SlotEntry, data: Data, location: u32) {
        assert!(self.tags.get(slot) == Some(&0), "filling an occupied slot");
        if let Some(t) = self.tags.get_mut(slot) {
            *t = Self::tag(Digest(entry.digest).hash_bits());
        }
        if let Some(e) = self.entries.get_mut(slot) {
            *e = entry;
        }
        self.replace_data(slot, data);
        if let Some(l) = self.locations.get_mut(slot) {
            *l = location;
        }
    }

    /// Puts `data` into `slot`, returning what was there.
    fn replace_data(&mut self, slot: usize, data: Data) -> Option<Data> {
        match data {
            Data::InMemory(blob) => self
                .records
                .get_mut(slot)
                .and_then(|r| r.replace(blob))
                .map(Data::InMemory),
            Data::OnDevice(extent) => {
                let e = self.extents.get_mut(slot)?;
                let old = std::mem::replace(e, extent);
                (old.bytes != 0).then_some(Data::OnDevice(old))
            }
        }
    }

    /// Takes the data out of `slot`.
    fn take_data(&mut self, slot: usize) -> Option<Data> {
        if self.layout == Layout::Device {
            let extent = std::mem::take(self.extents.get_mut(slot)?);
            (extent.bytes != 0).then_some(Data::OnDevice(extent))
        } else {
            self.records
                .get_mut(slot)
                .and_then(Option::take)
                .map(Data::InMemory)
        }
    }

    /// Empties `slot` and shifts following entries back so that every
    /// entry stays reachable from its home without tombstones.
    fn vacate(&mut self, mut hole: usize) {
        let capacity = self.capacity();
        let mut next = hole;
        loop {
            next += 1;
            if next == capacity {
                next = 0;
            }
            if self.tags.get(next).is_none_or(|&t| t == 0) {
                break;
            }
            let home = self
                .entries
                .get(next)
                .map_or(next, |entry| self.home(Digest(entry.digest).hash_bits()));
            // The entry at `next` may move to `hole` if its home is not in the
            // cyclic range (hole, next].
            let stays = if hole <= next {
                hole < home && home <= next
            } else {
                hole < home || home <= next
            };
            if !stays {
                self.tags.swap(next, hole);
                self.entries.swap(next, hole);
                match self.layout {
                    Layout::Memory => self.records.swap(next, hole),
                    Layout::Persisted => {
                        self.records.swap(next, hole);
                        self.locations.swap(next, hole);
                    }
                    Layout::Device => {
                        self.locations.swap(next, hole);
                        self.extents.swap(next, hole);
                    }
                }
                hole = next;
            }
        }
        if let Some(t) = self.tags.get_mut(hole) {
            *t = 0;
        }
    }

    fn resize(&mut self, capacity: usize) {
        assert!(capacity > self.len);
        let old = std::mem::take(self);
        self.tags = vec![0; capacity];
        self.entries = vec![SlotEntry::default(); capacity];
        self.layout = old.layout;
        if self.layout != Layout::Device {
            self.records = std::iter::repeat_with(|| None).take(capacity).collect();
        }
        if self.layout != Layout::Memory {
            self.locations = vec![0; capacity];
        }
        if self.layout == Layout::Device {
            self.extents = vec![Extent::default(); capacity];
        }
        self.len = old.len;
        let IndexTable {
            tags,
            entries,
            records,
            locations,
            extents,
            ..
        } = old;
        let mut records = records.into_iter();
        let mut locations = locations.into_iter();
        let mut extents = extents.into_iter();
        for (tag, entry) in tags.into_iter().zip(entries) {
            let record = records.next().flatten();
            let location = locations.next().unwrap_or(0);
            let extent = extents.next();
            if tag == 0 {
                continue;
            }
            let data = match (record, extent) {
                (Some(blob), _) => Data::InMemory(blob),
                (None, Some(extent)) => Data::OnDevice(extent),
                (None, None) => continue,
            };
            let slot = self.vacant_slot_for(&Digest(entry.digest));
            self.fill(slot, entry, data, location);
        }
    }

    // --- private: slot access ---

    #[inline]
    fn entry(&self, slot: usize) -> Option<Entry<'_>> {
        let entry = self.entries.get(slot)?;
        let record = match self.layout {
            Layout::Device => Stored::OnDevice {
                block: self.locations.get(slot).copied().unwrap_or(0),
                extent: self.extents.get(slot).copied().unwrap_or_default(),
            },
            _ => Stored::InMemory(
                self.records
                    .get(slot)
                    .and_then(Option::as_ref)
                    .map_or(&[], RecordBlob::as_bytes),
            ),
        };
        Some(Entry {
            digest: &entry.digest,
            meta: entry.meta(),
            record,
        })
    }
}

/// Prefetch hint for the cache line holding `address` (x86-64 only).
#[inline]
fn prefetch_line(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    #[expect(unsafe_code, reason = "prefetch hint")]
    // SAFETY: a prefetch never faults and has no architectural effect, so
    // any address is allowed; callers pass addresses inside the table.
    unsafe {
        std::arch::x86_64::_mm_prefetch(address.cast(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn digest(n: u64) -> Digest {
        // Spread like real digests: mix n into all bytes.
        let mut bytes = [0u8; 20];
        let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        for chunk in bytes.chunks_mut(8) {
            x ^= x >> 31;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let b = x.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        Digest(bytes)
    }

    fn meta(generation: u16) -> RecordMeta {
        RecordMeta {
            generation,
            void_time: 7,
            last_update_ms: 123_456,
            set_id: 3,
        }
    }

    #[test]
    fn reserve_avoids_growth_and_compact_shrinks_only_oversized_tables() {
        let mut table = IndexTable::with_locations();
        table.reserve(1000);
        let reserved = table.capacity();
        for n in 0..1000 {
            let slots = table.slot_addresses();
            slots.prefetch(&digest(n)); // a hint: must change nothing
            table.upsert_at(
                &digest(n),
                meta(1),
                Data::InMemory(RecordBlob::new(b"v")),
                n as u32,
            );
        }
        assert_eq!(table.capacity(), reserved, "grew although reserved");
        // Within a growth step of the right size: left alone.
        table.compact();
        assert_eq!(table.capacity(), reserved);
        // Far larger than needed (most of an estimate was dead versions).
        for n in 100..1000 {
            assert!(table.remove_at(&digest(n)).is_some());
        }
        table.compact();
        assert!(
            table.capacity() < reserved / 5,
            "{} slots for 100 records",
            table.capacity()
        );
        for n in 0..100 {
            assert_eq!(table.location(&digest(n)), Some(n as u32));
            assert_eq!(
                table.get(&digest(n)).and_then(|e| e.record.in_memory()),
                Some(&b"v"[..])
            );
        }
    }

    #[test]
    fn insert_get_remove() {
        let mut table = IndexTable::new();
        for n in 0..10_000 {
            assert!(table
                .upsert(&digest(n), meta(1), RecordBlob::new(&n.to_le_bytes()))
                .is_none());
        }
        assert_eq!(table.len(), 10_000);
        for n in 0..10_000 {
            let entry = table.get(&digest(n)).expect("present");
            assert_eq!(entry.record.in_memory(), Some(&n.to_le_bytes()[..]));
            assert_eq!(entry.meta, meta(1));
        }
        for n in (0..10_000).step_by(2) {
            assert!(table.remove(&digest(n)).is_some());
        }
        for n in 0..10_000 {
            assert_eq!(table.get(&digest(n)).is_some(), n % 2 == 1, "digest {n}");
        }
        let load = table.len() as f64 / table.capacity() as f64;
        assert!(load > 0.29 && load <= 0.85, "load {load}");
    }

    #[test]
    fn device_tables_keep_block_and_extent_through_growth_and_removal() {
        let mut table = IndexTable::with_layout(Layout::Device);
        let extent = |n: u64| Extent {
            offset: 64 + 8 * n as u32,
            bytes: 8 + n as u32,
        };
        for n in 0..5000 {
            let old = table.upsert_at(&digest(n), meta(1), Data::OnDevice(extent(n)), n as u32);
            assert!(old.is_none());
        }
        // Replacing returns the old extent and block.
        let old = table.upsert_at(&digest(7), meta(2), Data::OnDevice(extent(9999)), 42);
        assert!(
            matches!(old, Some((m, Data::OnDevice(e), 7)) if m.generation == 1 && e == extent(7))
        );
        for n in (0..5000).step_by(3) {
            assert!(table.remove_at(&digest(n)).is_some());
        }
        for n in 0..5000 {
            let entry = table.get(&digest(n));
            if n % 3 == 0 {
                assert!(entry.is_none());
                continue;
            }
            let (block, want) = if n == 7 {
                (42, extent(9999))
            } else {
                (n as u32, extent(n))
            };
            assert_eq!(
                entry.map(|e| e.record),
                Some(Stored::OnDevice {
                    block,
                    extent: want
                }),
                "digest {n}"
            );
        }
        assert!(table.set_location(&digest(8), 3, extent(1)));
        assert_eq!(
            table.get(&digest(8)).map(|e| e.record),
            Some(Stored::OnDevice {
                block: 3,
                extent: extent(1)
            })
        );
        // 1 tag + 34 digest/meta + 4 block + 8 extent bytes per slot.
        assert_eq!(table.index_bytes(), table.capacity() * 47);
    }

    #[test]
    fn slot_costs_forty_three_bytes() {
        assert_eq!(SLOT_BYTES, 43);
    }

    proptest! {
        #[test]
        fn behaves_like_a_hash_map(ops in prop::collection::vec((0u64..200, 0u8..3), 1..2000)) {
            let mut table = IndexTable::new();
            let mut model: HashMap<u64, u16> = HashMap::new();
            for (key, action) in ops {
                let d = digest(key);
                match action {
                    0 | 1 => {
                        let generation = model.get(&key).map_or(1, |g| g.wrapping_add(1).max(1));
                        let old = table.upsert(&d, meta(generation), RecordBlob::new(&key.to_be_bytes()));
                        prop_assert_eq!(old.map(|(m, _)| m.generation), model.insert(key, generation));
                    }
                    _ => {
                        let old = table.remove(&d);
                        prop_assert_eq!(old.map(|(m, _)| m.generation), model.remove(&key));
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for (key, generation) in &model {
                let entry = table.get(&digest(*key));
                prop_assert!(entry.is_some());
                prop_assert_eq!(entry.map(|e| e.meta.generation), Some(*generation));
            }
        }
    }
}
