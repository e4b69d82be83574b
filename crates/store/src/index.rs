//! The primary index of one partition: digest → record metadata and data.
//!
//! An open-addressing hash table with linear probing, laid out as parallel
//! arrays: one byte of tag per slot (probing reads only these), then each
//! slot's packed entry (its digest and metadata, and in a persistent
//! namespace its storage block and extent, all as bytes, so no padding), and,
//! when the data is in memory, the 8-byte record pointer. A lookup or insert
//! touches the tag's cache line, the one or two lines of the entry and, in
//! memory, the pointer's line. The digest is already uniformly random, so its
//! bytes are the hash.
//!
//! Capacity is not a power of two: the table grows by 1.15× when it is 85%
//! full (so right after growing it is still 74% full) and shrinks when under
//! 30%. A growing table thus stays 74–85% full: an in-memory slot (43 bytes)
//! costs 51–58 bytes per record and a persistent one (47 bytes with the data
//! on the device, 51 with it in memory too) 55–69 (the anchor's figure is 64). Each record is moved about 1 / 0.15 ≈ 7 times
//! over a table's growth, cheap next to a request.
//! Deletion shifts later slots back, so there are no tombstones.
//!
//! ```text
//! slot i:  tags[i]       u8         0 = empty, else 0x80 | 7 hash bits
//!          entries[i]    [u8; 20]   digest                           (all layouts)
//!                        [u8; 2]    generation (LE)
//!                        [u8; 4]    void time (LE), seconds since 2010-01-01, 0 = never
//!                        [u8; 8]    stamp (LE): last-update ms (low 48 bits) | set id << 48
//!                        [u8; 4]    storage block of the current version (LE) (persistent)
//!                        [u8; 4]    the entry's padded size (LE)              (persistent)
//!                        [u8; 4]    the entry's offset in that block (LE)     (data on device)
//!          records[i]    8 bytes    thin pointer to the record's bytes (data in memory)
//! ```
//!
//! So a slot costs 43 bytes in memory (34-byte entry + pointer), 51 with the
//! data in memory and persisted (42 + pointer), and 47 with the data on the
//! device only (a 46-byte entry, no pointer). A persisted slot keeps its
//! entry's size because a compressed entry's size cannot be told from the
//! record: the block's live bytes must lose exactly what they gained.

use crate::blob::RecordBlob;
use bolide_types::Digest;

/// Bytes of index memory per slot of an in-memory namespace.
pub const SLOT_BYTES: usize = 1 + ENTRY_BYTES + std::mem::size_of::<Option<RecordBlob>>();

const LOAD_MAX_PERCENT: usize = 85;
const LOAD_MIN_PERCENT: usize = 30;
const GROWTH_NUMERATOR: usize = 115;
const GROWTH_DENOMINATOR: usize = 100;
const CAPACITY_MIN: usize = 8;
const LAST_UPDATE_MASK: u64 = (1 << 48) - 1;

/// Bytes of digest and metadata at the start of every entry.
const ENTRY_BYTES: usize = 34;

/// Byte offsets of the fields of an entry (see the module docs).
mod at {
    pub const DIGEST: usize = 0;
    pub const GENERATION: usize = 20;
    pub const VOID_TIME: usize = 22;
    pub const STAMP: usize = 26;
    pub const LOCATION: usize = 34;
    pub const EXTENT_BYTES: usize = 38;
    pub const EXTENT_OFFSET: usize = 42;
    pub const END: usize = 46;
}

const _: () = assert!(at::LOCATION == ENTRY_BYTES);
const _: () = assert!(std::mem::size_of::<Option<RecordBlob>>() == 8);

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
    /// The record's bytes in memory, and the padded size of its entry in
    /// storage (the block is the slot's location).
    Persisted(RecordBlob, u32),
    /// Only on the device (the block is the slot's location).
    OnDevice(Extent),
}

impl Data {
    /// Bytes the data accounts for: the record's length in memory, the
    /// entry's padded size on the device.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Data::InMemory(blob) | Data::Persisted(blob, _) => blob.len(),
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

impl Layout {
    /// Bytes of one slot's entry.
    #[inline]
    const fn stride(self) -> usize {
        match self {
            Layout::Memory => ENTRY_BYTES,
            Layout::Persisted => at::EXTENT_BYTES + 4,
            Layout::Device => at::END,
        }
    }

    /// Whether slots hold a record pointer.
    #[inline]
    const fn has_records(self) -> bool {
        !matches!(self, Layout::Device)
    }
}

// --- entry fields, read and written as little-endian bytes ---

#[inline]
fn field<const N: usize>(entry: &[u8], at: usize) -> [u8; N] {
    entry
        .get(at..at + N)
        .and_then(|bytes| bytes.try_into().ok())
        .unwrap_or([0; N])
}

#[inline]
fn put(entry: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(field) = entry.get_mut(at..at + bytes.len()) {
        field.copy_from_slice(bytes);
    }
}

#[inline]
fn digest_of(entry: &[u8]) -> Option<&[u8; 20]> {
    entry.get(at::DIGEST..at::DIGEST + 20)?.try_into().ok()
}

#[inline]
fn meta_of(entry: &[u8]) -> RecordMeta {
    let stamp = u64::from_le_bytes(field(entry, at::STAMP));
    RecordMeta {
        generation: u16::from_le_bytes(field(entry, at::GENERATION)),
        void_time: u32::from_le_bytes(field(entry, at::VOID_TIME)),
        last_update_ms: stamp & LAST_UPDATE_MASK,
        set_id: (stamp >> 48) as u16,
    }
}

#[inline]
fn set_meta(entry: &mut [u8], meta: RecordMeta) {
    put(entry, at::GENERATION, &meta.generation.to_le_bytes());
    put(entry, at::VOID_TIME, &meta.void_time.to_le_bytes());
    put(entry, at::STAMP, &meta.stamp().to_le_bytes());
}

#[inline]
fn location_of(entry: &[u8]) -> u32 {
    u32::from_le_bytes(field(entry, at::LOCATION))
}

#[inline]
fn extent_of(entry: &[u8]) -> Extent {
    Extent {
        offset: u32::from_le_bytes(field(entry, at::EXTENT_OFFSET)),
        bytes: u32::from_le_bytes(field(entry, at::EXTENT_BYTES)),
    }
}

#[inline]
fn set_extent(entry: &mut [u8], extent: Extent) {
    put(entry, at::EXTENT_OFFSET, &extent.offset.to_le_bytes());
    put(entry, at::EXTENT_BYTES, &extent.bytes.to_le_bytes());
}

/// One partition's index.
#[derive(Default)]
pub struct IndexTable {
    tags: Vec<u8>,
    /// `layout.stride()` bytes per slot: digest and metadata, then the
    /// storage block and extent where the layout has them.
    entries: Vec<u8>,
    /// Data in memory only (empty otherwise, costing nothing).
    records: Vec<Option<RecordBlob>>,
    layout: Layout,
    len: usize,
    /// Deleted records remembered for a replicated namespace (see
    /// [`Tombstone`]); none allocated until the first.
    tombstones: Option<std::collections::HashMap<[u8; 20], Tombstone>>,
}

/// What a replicated namespace remembers of a deleted record, so that an
/// older copy arriving later (a migration, a late replica write, a node
/// that was away) does not bring it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// The delete's generation (the record's, plus one).
    pub generation: u16,
    /// The delete's last-update time, ms since 2010.
    pub last_update_ms: u64,
    pub set_id: u16,
}

/// Where one table's slot arrays start, kept by a bulk loader (a cold
/// start) to prefetch the slots of records it will insert shortly, so that
/// several records' cache misses overlap. Never dereferenced.
#[derive(Clone, Copy, Debug)]
pub struct SlotAddresses {
    tags: *const u8,
    entries: *const u8,
    records: *const u8,
    stride: usize,
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
        let entry = self.entries.wrapping_add(home * self.stride);
        prefetch_line(entry);
        // An entry may straddle two lines.
        prefetch_line(entry.wrapping_add(self.stride - 1));
        if !self.records.is_null() {
            prefetch_line(
                self.records
                    .wrapping_add(home * std::mem::size_of::<Option<RecordBlob>>()),
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
        let pointer = if self.layout.has_records() {
            std::mem::size_of::<Option<RecordBlob>>()
        } else {
            0
        };
        1 + self.layout.stride() + pointer
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
        let data = match self.layout {
            Layout::Persisted => Data::Persisted(record, 0),
            _ => Data::InMemory(record),
        };
        match self.upsert_at(digest, meta, data, 0) {
            Some((meta, Data::InMemory(blob) | Data::Persisted(blob, _), _)) => Some((meta, blob)),
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
        debug_assert!(matches!(
            (&data, self.layout),
            (Data::InMemory(_), Layout::Memory)
                | (Data::Persisted(..), Layout::Persisted)
                | (Data::OnDevice(_), Layout::Device)
        ));
        if let Some(slot) = self.find(digest) {
            let persistent = self.layout != Layout::Memory;
            let entry = self.entry_bytes_mut(slot)?;
            let old_meta = meta_of(entry);
            set_meta(entry, meta);
            let old_location = if persistent {
                let old = location_of(entry);
                put(entry, at::LOCATION, &location.to_le_bytes());
                old
            } else {
                0
            };
            let old = self.replace_data(slot, data);
            // The caller counts a replacement, not an insert, only if the
            // old data comes back.
            assert!(old.is_some(), "an occupied slot without its data");
            return old.map(|data| (old_meta, data, old_location));
        }
        if (self.len + 1) * 100 > self.capacity() * LOAD_MAX_PERCENT {
            let grown = (self.capacity() * GROWTH_NUMERATOR / GROWTH_DENOMINATOR).max(CAPACITY_MIN);
            self.resize(grown.max(self.capacity() + 1));
        }
        let slot = self.vacant_slot_for(digest);
        self.fill(slot, digest, meta, data, location);
        self.len += 1;
        assert!(self.len <= self.capacity());
        debug_assert!(self.find(digest) == Some(slot), "inserted, not found");
        None
    }

    /// Changes a present record's metadata only (touch).
    pub fn set_meta_of(&mut self, digest: &Digest, meta: RecordMeta) -> bool {
        match self
            .find(digest)
            .and_then(|slot| self.entry_bytes_mut(slot))
        {
            Some(entry) => {
                set_meta(entry, meta);
                true
            }
            None => false,
        }
    }

    /// Removes a record, returning its metadata and bytes.
    pub fn remove(&mut self, digest: &Digest) -> Option<(RecordMeta, RecordBlob)> {
        match self.remove_at(digest) {
            Some((meta, Data::InMemory(blob) | Data::Persisted(blob, _), _)) => Some((meta, blob)),
            _ => None,
        }
    }

    /// Removes a record, returning its metadata, data and storage block.
    pub fn remove_at(&mut self, digest: &Digest) -> Option<(RecordMeta, Data, u32)> {
        let slot = self.find(digest)?;
        let entry = self.entry_bytes(slot)?;
        let meta = meta_of(entry);
        let location = if self.layout == Layout::Memory {
            0
        } else {
            location_of(entry)
        };
        let record = self.take_data(slot);
        // Every record went in with its data; a slot without it would make
        // the caller skip its accounting (objects, bytes, the block's live
        // bytes) while the record leaves the table.
        assert!(record.is_some(), "an occupied slot without its data");
        assert!(self.len > 0, "removing from an empty table");
        self.vacate(slot);
        self.len -= 1;
        debug_assert!(self.find(digest).is_none(), "removed, still found");
        if self.len == 0 {
            // An empty partition holds no index memory at all.
            let tombstones = self.tombstones.take();
            *self = IndexTable::with_layout(self.layout);
            self.tombstones = tombstones;
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
            entries: self.entries.as_ptr(),
            records: if self.records.is_empty() {
                std::ptr::null()
            } else {
                self.records.as_ptr().cast()
            },
            stride: self.layout.stride(),
            capacity: self.capacity(),
        }
    }

    /// The storage block of a record's current version.
    pub fn location(&self, digest: &Digest) -> Option<u32> {
        if self.layout == Layout::Memory {
            return None;
        }
        let slot = self.find(digest)?;
        self.entry_bytes(slot).map(location_of)
    }

    /// Moves a record's current version to another storage block (and,
    /// with the data on the device, to `extent` in it).
    pub fn set_location(&mut self, digest: &Digest, location: u32, extent: Extent) -> bool {
        let layout = self.layout;
        if layout == Layout::Memory {
            return false;
        }
        let Some(entry) = self
            .find(digest)
            .and_then(|slot| self.entry_bytes_mut(slot))
        else {
            return false;
        };
        put(entry, at::LOCATION, &location.to_le_bytes());
        match layout {
            Layout::Device => set_extent(entry, extent),
            _ => put(entry, at::EXTENT_BYTES, &extent.bytes.to_le_bytes()),
        }
        true
    }

    /// The padded size of the storage entry of `digest`'s current version
    /// (persistent layouts).
    pub fn stored_bytes(&self, digest: &Digest) -> Option<u32> {
        if self.layout == Layout::Memory {
            return None;
        }
        let slot = self.find(digest)?;
        self.entry_bytes(slot)
            .map(|entry| u32::from_le_bytes(field(entry, at::EXTENT_BYTES)))
    }

    /// The tombstone of a deleted record, if one is kept.
    pub fn tombstone(&self, digest: &Digest) -> Option<Tombstone> {
        self.tombstones.as_ref()?.get(&digest.0).copied()
    }

    /// Keeps (or replaces) a tombstone.
    pub fn put_tombstone(&mut self, digest: &Digest, tombstone: Tombstone) {
        self.tombstones
            .get_or_insert_with(Default::default)
            .insert(digest.0, tombstone);
    }

    /// Forgets a tombstone; whether there was one.
    pub fn remove_tombstone(&mut self, digest: &Digest) -> bool {
        let Some(map) = self.tombstones.as_mut() else {
            return false;
        };
        let removed = map.remove(&digest.0).is_some();
        if map.is_empty() {
            self.tombstones = None;
        }
        removed
    }

    /// Every tombstone, by digest.
    pub fn tombstones(&self) -> impl Iterator<Item = (Digest, Tombstone)> + '_ {
        self.tombstones
            .iter()
            .flat_map(|map| map.iter().map(|(digest, t)| (Digest(*digest), *t)))
    }

    pub fn tombstone_count(&self) -> usize {
        self.tombstones.as_ref().map_or(0, |map| map.len())
    }

    /// Forgets the tombstones `drop` chooses; how many.
    pub fn retain_tombstones(&mut self, mut keep: impl FnMut(&Tombstone) -> bool) -> usize {
        let Some(map) = self.tombstones.as_mut() else {
            return 0;
        };
        let before = map.len();
        map.retain(|_, tombstone| keep(tombstone));
        let dropped = before - map.len();
        if map.is_empty() {
            self.tombstones = None;
        }
        dropped
    }

    /// Digests of records for which `predicate(meta)` holds.
    pub fn select(&self, mut predicate: impl FnMut(&RecordMeta) -> bool) -> Vec<Digest> {
        self.occupied()
            .filter_map(|slot| self.entry_bytes(slot))
            .filter(|entry| predicate(&meta_of(entry)))
            .filter_map(|entry| digest_of(entry).map(|d| Digest(*d)))
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
                    .entry_bytes(slot)
                    .and_then(digest_of)
                    .is_some_and(|d| *d == digest.0)
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

    /// Writes every field of the vacant `slot`.
    fn fill(&mut self, slot: usize, digest: &Digest, meta: RecordMeta, data: Data, location: u32) {
        assert!(self.tags.get(slot) == Some(&0), "filling an occupied slot");
        if let Some(t) = self.tags.get_mut(slot) {
            *t = Self::tag(digest.hash_bits());
        }
        let layout = self.layout;
        if let Some(entry) = self.entry_bytes_mut(slot) {
            put(entry, at::DIGEST, &digest.0);
            set_meta(entry, meta);
            if layout != Layout::Memory {
                put(entry, at::LOCATION, &location.to_le_bytes());
            }
            if layout != Layout::Memory {
                // The slot was vacant: whatever extent it held is stale.
                set_extent(entry, Extent::default());
            }
        }
        self.replace_data(slot, data);
    }

    /// Puts `data` into `slot`, returning what was there.
    fn replace_data(&mut self, slot: usize, data: Data) -> Option<Data> {
        match data {
            Data::InMemory(blob) => self
                .records
                .get_mut(slot)
                .and_then(|r| r.replace(blob))
                .map(Data::InMemory),
            Data::Persisted(blob, bytes) => {
                let entry = self.entry_bytes_mut(slot)?;
                let old_bytes = u32::from_le_bytes(field(entry, at::EXTENT_BYTES));
                put(entry, at::EXTENT_BYTES, &bytes.to_le_bytes());
                self.records
                    .get_mut(slot)
                    .and_then(|r| r.replace(blob))
                    .map(|old| Data::Persisted(old, old_bytes))
            }
            Data::OnDevice(extent) => {
                let entry = self.entry_bytes_mut(slot)?;
                let old = extent_of(entry);
                set_extent(entry, extent);
                (old.bytes != 0).then_some(Data::OnDevice(old))
            }
        }
    }

    /// Takes the data out of `slot`.
    fn take_data(&mut self, slot: usize) -> Option<Data> {
        if self.layout == Layout::Device {
            let entry = self.entry_bytes_mut(slot)?;
            let extent = extent_of(entry);
            set_extent(entry, Extent::default());
            (extent.bytes != 0).then_some(Data::OnDevice(extent))
        } else if self.layout == Layout::Persisted {
            let entry = self.entry_bytes_mut(slot)?;
            let bytes = u32::from_le_bytes(field(entry, at::EXTENT_BYTES));
            put(entry, at::EXTENT_BYTES, &0u32.to_le_bytes());
            self.records
                .get_mut(slot)
                .and_then(Option::take)
                .map(|blob| Data::Persisted(blob, bytes))
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
        let stride = self.layout.stride();
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
                .entry_bytes(next)
                .and_then(digest_of)
                .map_or(next, |d| self.home(Digest(*d).hash_bits()));
            // The entry at `next` may move to `hole` if its home is not in the
            // cyclic range (hole, next].
            let stays = if hole <= next {
                hole < home && home <= next
            } else {
                hole < home || home <= next
            };
            if !stays {
                self.tags.swap(next, hole);
                self.entries
                    .copy_within(next * stride..(next + 1) * stride, hole * stride);
                if self.layout.has_records() {
                    self.records.swap(next, hole);
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
        let layout = self.layout;
        let stride = layout.stride();
        let tags = std::mem::replace(&mut self.tags, vec![0; capacity]);
        let entries = std::mem::replace(&mut self.entries, vec![0; capacity * stride]);
        let records = std::mem::take(&mut self.records);
        if layout.has_records() {
            self.records = std::iter::repeat_with(|| None).take(capacity).collect();
        }
        let mut records = records.into_iter();
        for (tag, entry) in tags.into_iter().zip(entries.chunks_exact(stride)) {
            let record = records.next().flatten();
            if tag == 0 {
                continue;
            }
            let Some(digest) = digest_of(entry) else {
                continue;
            };
            let slot = self.vacant_slot_for(&Digest(*digest));
            if let Some(t) = self.tags.get_mut(slot) {
                *t = tag;
            }
            if let Some(e) = self.entry_bytes_mut(slot) {
                e.copy_from_slice(entry);
            }
            if let Some(r) = self.records.get_mut(slot) {
                *r = record;
            }
        }
    }

    // --- private: slot access ---

    #[inline]
    fn entry_bytes(&self, slot: usize) -> Option<&[u8]> {
        let stride = self.layout.stride();
        self.entries.get(slot * stride..(slot + 1) * stride)
    }

    #[inline]
    fn entry_bytes_mut(&mut self, slot: usize) -> Option<&mut [u8]> {
        let stride = self.layout.stride();
        self.entries.get_mut(slot * stride..(slot + 1) * stride)
    }

    #[inline]
    fn entry(&self, slot: usize) -> Option<Entry<'_>> {
        let entry = self.entry_bytes(slot)?;
        let record = match self.layout {
            Layout::Device => Stored::OnDevice {
                block: location_of(entry),
                extent: extent_of(entry),
            },
            _ => Stored::InMemory(
                self.records
                    .get(slot)
                    .and_then(Option::as_ref)
                    .map_or(&[], RecordBlob::as_bytes),
            ),
        };
        Some(Entry {
            digest: digest_of(entry)?,
            meta: meta_of(entry),
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
                Data::Persisted(RecordBlob::new(b"v"), 72),
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
    fn a_growing_device_table_stays_within_sixty_four_bytes_a_record() {
        let mut table = IndexTable::with_layout(Layout::Device);
        let mut worst = 0.0f64;
        for n in 0..200_000u64 {
            table.upsert_at(
                &digest(n),
                meta(1),
                Data::OnDevice(Extent {
                    offset: 64,
                    bytes: 160,
                }),
                1,
            );
            if table.len() >= 100 {
                worst = worst.max(table.index_bytes() as f64 / table.len() as f64);
            }
        }
        assert!(worst <= 64.0, "{worst:.1} index bytes per record");
        assert!(worst > 60.0, "{worst:.1}: the table never grew?");
    }

    #[test]
    fn slot_costs_forty_three_bytes() {
        assert_eq!(SLOT_BYTES, 43);
    }

    /// What a persistent table should answer for a key: generation, block,
    /// extent (device layout) or bytes (persisted layout).
    type Model = HashMap<u64, (u16, u32, Extent)>;

    fn data_for(layout: Layout, key: u64, extent: Extent) -> Data {
        match layout {
            Layout::Device => Data::OnDevice(extent),
            _ => Data::Persisted(RecordBlob::new(&key.to_le_bytes()), extent.bytes),
        }
    }

    /// Runs `ops` (key, action, value) against a table of `layout` and a
    /// model; every answer and, at the end, every slot must agree.
    fn check_persistent_layout(
        layout: Layout,
        ops: &[(u64, u8, u32)],
    ) -> Result<(), TestCaseError> {
        let mut table = IndexTable::with_layout(layout);
        let mut model = Model::new();
        for &(key, action, value) in ops {
            let d = digest(key);
            let extent = Extent {
                offset: value,
                bytes: value % 977 + 1,
            };
            match action {
                0 | 1 => {
                    let generation = model.get(&key).map_or(1, |e| e.0.wrapping_add(1).max(1));
                    let old =
                        table.upsert_at(&d, meta(generation), data_for(layout, key, extent), value);
                    let want = model.insert(key, (generation, value, extent));
                    prop_assert_eq!(
                        old.as_ref().map(|(m, _, block)| (m.generation, *block)),
                        want.map(|w| (w.0, w.1))
                    );
                    if let (Some((_, Data::OnDevice(got), _)), Some(want)) = (&old, want) {
                        prop_assert_eq!(*got, want.2);
                    }
                    if let (Some((_, Data::Persisted(_, got), _)), Some(want)) = (&old, want) {
                        prop_assert_eq!(*got, want.2.bytes);
                    }
                }
                2 => {
                    let moved = table.set_location(&d, value / 2, extent);
                    prop_assert_eq!(moved, model.contains_key(&key));
                    if let Some(entry) = model.get_mut(&key) {
                        entry.1 = value / 2;
                        if layout == Layout::Device {
                            entry.2 = extent;
                        } else {
                            entry.2.bytes = extent.bytes;
                        }
                    }
                }
                _ => {
                    let old = table.remove_at(&d);
                    let want = model.remove(&key);
                    prop_assert_eq!(
                        old.map(|(m, _, block)| (m.generation, block)),
                        want.map(|w| (w.0, w.1))
                    );
                }
            }
            prop_assert_eq!(table.len(), model.len());
        }
        for (key, (generation, block, extent)) in &model {
            let entry = table.get(&digest(*key));
            prop_assert!(entry.is_some(), "key {} lost", key);
            let Some(entry) = entry else { continue };
            prop_assert_eq!(entry.digest, &digest(*key).0);
            prop_assert_eq!(entry.meta, meta(*generation));
            prop_assert_eq!(table.location(&digest(*key)), Some(*block));
            prop_assert_eq!(table.stored_bytes(&digest(*key)), Some(extent.bytes));
            let want = match layout {
                Layout::Device => Stored::OnDevice {
                    block: *block,
                    extent: *extent,
                },
                _ => Stored::InMemory(&[]),
            };
            match (entry.record, want) {
                (Stored::InMemory(bytes), Stored::InMemory(_)) => {
                    prop_assert_eq!(bytes, &key.to_le_bytes()[..])
                }
                (got, want) => prop_assert_eq!(got, want),
            }
        }
        let mut visited = 0;
        table.for_each(|_| visited += 1);
        prop_assert_eq!(visited, model.len());
        let slot = if layout == Layout::Device { 47 } else { 51 };
        prop_assert_eq!(table.index_bytes(), table.capacity() * slot);
        Ok(())
    }

    proptest! {
        #[test]
        fn device_layout_behaves_like_a_hash_map(ops in prop::collection::vec((0u64..300, 0u8..4, 0u32..1 << 20), 1..3000)) {
            check_persistent_layout(Layout::Device, &ops)?;
        }

        #[test]
        fn persisted_layout_behaves_like_a_hash_map(ops in prop::collection::vec((0u64..300, 0u8..4, 0u32..1 << 20), 1..3000)) {
            check_persistent_layout(Layout::Persisted, &ops)?;
        }

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
