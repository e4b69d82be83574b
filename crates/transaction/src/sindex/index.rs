//! One secondary index: its entries (bval, digest) in [`SHARDS`] ordered
//! sets, each holding the entries of a block of consecutive partitions, so
//! a query finds the partitions holding a value with one descent per shard
//! (not one per partition), and a partition's entries are still its own:
//! every entry carries its record's digest, so its partition, and a query
//! of some partitions, or one resuming each partition after a (bval,
//! digest) pair as the clients' partition trackers ask, filters the entries
//! it walks by partition.
//!
//! Entries change under the record partition's write lock (through the
//! store's record observer), and each shard has its own lock, taken after
//! the record partition's lock and never the other way round.

use super::definition::Definition;
use super::keys;
use super::tree::EntrySet;
pub use super::tree::{Entry, ENTRY_BYTES};
use bolide_particles::expression::Expr;
use bolide_store::{Namespace, RecordMeta, RecordView};
use bolide_types::{now_citrusleaf_seconds, Digest, DIGEST_BYTES, PARTITION_COUNT};
use parking_lot::RwLock;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64};
use std::sync::OnceLock;
use std::time::Instant;

/// Ordered sets per index. A query descends each once per bval range; a
/// write locks the one of its partition. 8 keeps an equality query at 8
/// descents (each is mostly cache misses, and a profile of equality
/// queries put most of their index time there with 32 shards) and the
/// lock of a shard shared by 512 partitions.
pub const SHARDS: usize = 8;
/// Consecutive partitions per shard.
pub const PARTITIONS_PER_SHARD: usize = PARTITION_COUNT / SHARDS;
const _: () = assert!(PARTITIONS_PER_SHARD * SHARDS == PARTITION_COUNT);

/// The shard holding partition `partition`'s entries.
#[inline]
pub fn shard_of(partition: usize) -> usize {
    partition / PARTITIONS_PER_SHARD
}

/// A secondary index and its entries.
pub struct SecondaryIndex {
    pub definition: Definition,
    /// The definition's expression, parsed (expression indexes).
    expression: Option<Expr>,
    /// The index's name (a create with the same definition renames it).
    name: RwLock<String>,
    /// The set's id once the set exists (None: not yet, or no set).
    set_id: OnceLock<u16>,
    shards: Box<[RwLock<EntrySet>]>,
    entries: AtomicI64,
    /// Memory the shards hold (their own count, kept exact).
    bytes: AtomicI64,
    /// Share of partitions populated, 0..=100.
    load_pct: AtomicU32,
    load_started: Instant,
    load_time_ms: AtomicU64,
    readable: AtomicBool,
    dropped: AtomicBool,
    pub queries: AtomicU64,
}

impl SecondaryIndex {
    pub fn new(definition: Definition) -> SecondaryIndex {
        let shards = std::iter::repeat_with(|| RwLock::new(EntrySet::new()))
            .take(SHARDS)
            .collect();
        let expression = definition
            .expression
            .as_deref()
            .and_then(|bytes| bolide_particles::expression::parse(bytes).ok());
        SecondaryIndex {
            name: RwLock::new(definition.name.clone()),
            expression,
            definition,
            set_id: OnceLock::new(),
            shards,
            entries: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
            load_pct: AtomicU32::new(0),
            load_started: Instant::now(),
            load_time_ms: AtomicU64::new(0),
            readable: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            queries: AtomicU64::new(0),
        }
    }

    pub fn name(&self) -> String {
        self.name.read().clone()
    }

    pub(crate) fn rename(&self, name: &str) {
        *self.name.write() = name.to_owned();
    }

    pub fn entries(&self) -> u64 {
        self.entries.load(Relaxed).max(0) as u64
    }

    /// Memory the index holds: its entries in their leaves (counted by
    /// the sets themselves) and the shards.
    pub fn used_bytes(&self) -> u64 {
        let shards = SHARDS * std::mem::size_of::<RwLock<EntrySet>>();
        self.bytes.load(Relaxed).max(0) as u64 + shards as u64
    }

    pub fn load_pct(&self) -> u32 {
        self.load_pct.load(SeqCst)
    }

    pub fn load_time_ms(&self) -> u64 {
        self.load_time_ms.load(Relaxed)
    }

    /// Queries are answered once the index holds every existing record.
    pub fn is_readable(&self) -> bool {
        self.readable.load(SeqCst)
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Relaxed)
    }

    pub(crate) fn drop_index(&self) {
        self.dropped.store(true, Relaxed);
    }

    /// Whether a record of set `set_id` belongs to this index.
    pub fn covers_set(&self, namespace: &Namespace, set_id: u16) -> bool {
        let Some(set) = &self.definition.set else {
            return true;
        };
        if let Some(&id) = self.set_id.get() {
            return id == set_id;
        }
        match namespace.existing_set_id(set.as_bytes()) {
            Some(id) => {
                let _ = self.set_id.set(id);
                id == set_id
            }
            None => false,
        }
    }

    /// The bvals this index files a record under (none if the record is
    /// not in the index's set).
    pub fn bvals_of(
        &self,
        namespace: &Namespace,
        digest: &Digest,
        meta: &RecordMeta,
        record: &RecordView<'_>,
        record_bytes: usize,
    ) -> Vec<i64> {
        if !self.covers_set(namespace, meta.set_id) {
            return Vec::new();
        }
        let indexed = keys::Indexed {
            record,
            digest,
            meta,
            set_name: namespace.set_name(meta.set_id),
            record_bytes,
        };
        keys::bvals(&self.definition, self.expression.as_ref(), &indexed)
    }

    /// Whether `record` holds a value of this index that `test` accepts.
    pub fn any_value(
        &self,
        namespace: &Namespace,
        digest: &Digest,
        meta: &RecordMeta,
        record: &RecordView<'_>,
        record_bytes: usize,
        test: &mut dyn FnMut(&keys::Value<'_>) -> bool,
    ) -> bool {
        let indexed = keys::Indexed {
            record,
            digest,
            meta,
            set_name: namespace.set_name(meta.set_id),
            record_bytes,
        };
        let mut matched = false;
        keys::for_each_value(
            &self.definition,
            self.expression.as_ref(),
            &indexed,
            &mut |value| {
                if !matched {
                    matched = test(&value);
                }
            },
        );
        matched
    }

    /// Moves a record's entries in partition `partition` from `old` to
    /// `new` bvals (both sorted and distinct).
    pub fn update(&self, partition: usize, digest: &Digest, old: &[i64], new: &[i64]) {
        if old == new {
            return;
        }
        let Some(shard) = self.shards.get(shard_of(partition)) else {
            return;
        };
        let mut set = shard.write();
        let before = set.bytes();
        let mut delta = 0i64;
        for bval in old.iter().filter(|bval| new.binary_search(bval).is_err()) {
            if set.remove(&Entry::new(*bval, digest)) {
                delta -= 1;
            }
        }
        for bval in new.iter().filter(|bval| old.binary_search(bval).is_err()) {
            if set.insert(Entry::new(*bval, digest)) {
                delta += 1;
            }
        }
        let bytes = set.bytes() as i64 - before as i64;
        drop(set);
        self.entries.fetch_add(delta, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }

    /// Calls `visit` with the entries of shard `shard` from `from`
    /// (included) upwards, in order, under the shard's read lock, until it
    /// returns false.
    pub fn walk(&self, shard: usize, from: &Entry, visit: impl FnMut(&Entry) -> bool) {
        if let Some(set) = self.shards.get(shard) {
            set.read().walk(from, visit);
        }
    }

    /// Entries of partition `partition` with a bval in `start..=end`,
    /// strictly after `resume` if given, in (bval, digest) order; at most
    /// `limit`.
    pub fn range(
        &self,
        partition: usize,
        start: i64,
        end: i64,
        resume: Option<(i64, &[u8; DIGEST_BYTES])>,
        limit: usize,
    ) -> Vec<(i64, Digest)> {
        let mut found = Vec::new();
        if start > end || limit == 0 {
            return found;
        }
        let after = resume.map(|(bval, digest)| Entry::new(bval, &Digest(*digest)));
        let upper = Entry::last_of(end);
        self.walk(shard_of(partition), &Entry::first_of(start), |entry| {
            if *entry > upper {
                return false;
            }
            if usize::from(entry.partition()) == partition
                && after.is_none_or(|after| *entry > after)
            {
                found.push((entry.bval(), entry.digest()));
            }
            found.len() < limit
        });
        found
    }

    /// Files every existing record of `namespace`, partition by partition
    /// (each under its read lock, so no write to it interleaves), while
    /// writes keep the index current through the record observer. Stops
    /// early if the index is dropped.
    pub fn populate(&self, namespace: &Namespace) {
        let started = Instant::now();
        let mut loaded = Vec::new();
        for partition in 0..PARTITION_COUNT {
            if self.is_dropped() {
                return;
            }
            let now = now_citrusleaf_seconds();
            if let Some(table) = namespace.read_partition(partition) {
                let mut records = Vec::new();
                table.for_each(|entry| {
                    if !namespace.is_doomed(&entry.meta, now)
                        && self.covers_set(namespace, entry.meta.set_id)
                    {
                        records.push(entry);
                    }
                });
                let mut fresh = Vec::new();
                for record in records {
                    let Ok(bytes) = namespace.record_bytes(&record, &mut loaded) else {
                        continue;
                    };
                    let Some(view) = RecordView::parse(bytes) else {
                        continue;
                    };
                    let digest = Digest(*record.digest);
                    let bvals = self.bvals_of(namespace, &digest, &record.meta, &view, bytes.len());
                    fresh.extend(bvals.into_iter().map(|bval| Entry::new(bval, &digest)));
                }
                self.insert_many(partition, fresh);
            }
            // 100 only once the index is readable: clients query as soon
            // as they see it.
            let done = ((partition + 1) * 100 / PARTITION_COUNT).min(99);
            self.load_pct.store(done as u32, Relaxed);
        }
        let elapsed = self.load_started.elapsed().max(started.elapsed());
        self.load_time_ms.store(elapsed.as_millis() as u64, Relaxed);
        self.readable.store(true, SeqCst);
        self.load_pct.store(100, SeqCst);
    }

    /// Adds a partition's entries to its shard, in order.
    fn insert_many(&self, partition: usize, mut fresh: Vec<Entry>) {
        let Some(shard) = self.shards.get(shard_of(partition)) else {
            return;
        };
        if fresh.is_empty() {
            return;
        }
        fresh.sort_unstable();
        let mut set = shard.write();
        let before = set.bytes();
        let mut added = 0i64;
        for entry in fresh {
            if set.insert(entry) {
                added += 1;
            }
        }
        let bytes = set.bytes() as i64 - before as i64;
        drop(set);
        self.entries.fetch_add(added, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }
}

#[cfg(test)]
impl SecondaryIndex {
    /// Every entry, shard by shard, after checking each shard's
    /// invariants and that the counts kept beside them agree.
    pub(crate) fn checked_entries(&self) -> Vec<Entry> {
        let mut all = Vec::new();
        let mut bytes = 0;
        for (shard, set) in self.shards.iter().enumerate() {
            let set = set.read();
            set.check();
            bytes += set.bytes();
            for entry in set.iter() {
                assert_eq!(shard_of(usize::from(entry.partition())), shard);
                all.push(*entry);
            }
        }
        assert_eq!(all.len() as u64, self.entries());
        assert_eq!(bytes as i64, self.bytes.load(Relaxed));
        all.sort_unstable();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::super::definition::{Collection, KeyType};
    use super::*;

    fn index() -> SecondaryIndex {
        SecondaryIndex::new(Definition {
            namespace: "test".into(),
            name: "i".into(),
            set: None,
            bin: "b".into(),
            key_type: KeyType::Numeric,
            collection: Collection::Default,
            context: None,
            expression: None,
        })
    }

    /// A digest of partition `partition`, distinct for each `n`.
    fn digest_in(partition: u16, n: u8) -> Digest {
        let mut d = [n; DIGEST_BYTES];
        d[..2].copy_from_slice(&partition.to_le_bytes());
        Digest(d)
    }

    #[test]
    fn entries_sort_by_signed_bval_then_digest_and_resume_after() {
        let index = index();
        let d = |n: u8| digest_in(0, n);
        for (bval, n) in [(-5, 1), (3, 2), (3, 1), (i64::MIN, 9), (i64::MAX, 9)] {
            index.update(0, &d(n), &[], &[bval]);
        }
        assert_eq!(index.entries(), 5);
        let all = index.range(0, i64::MIN, i64::MAX, None, usize::MAX);
        let got: Vec<(i64, u8)> = all.iter().map(|(b, d)| (*b, d.0[19])).collect();
        assert_eq!(
            got,
            vec![(i64::MIN, 9), (-5, 1), (3, 1), (3, 2), (i64::MAX, 9)]
        );
        let after = index.range(0, -10, 10, Some((3, &d(1).0)), usize::MAX);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].0, 3);
        assert_eq!(after[0].1 .0[19], 2);
        // A resume point before the range start reads from the start.
        assert_eq!(
            index
                .range(0, 0, 10, Some((-100, &[0; 20])), usize::MAX)
                .len(),
            2
        );
        index.update(0, &d(2), &[3], &[4]);
        assert_eq!(index.range(0, 4, 4, None, usize::MAX).len(), 1);
        index.update(0, &d(2), &[4], &[]);
        assert_eq!(index.entries(), 4);
        assert!(index.range(0, 5, 4, None, usize::MAX).is_empty());
    }

    #[test]
    fn partitions_sharing_a_shard_keep_their_own_entries_and_bytes_are_counted() {
        let index = index();
        let empty = index.used_bytes();
        assert_eq!(shard_of(0), shard_of(PARTITIONS_PER_SHARD - 1));
        assert_ne!(shard_of(0), shard_of(PARTITIONS_PER_SHARD));
        for n in 0..200u8 {
            for partition in [0u16, 1, PARTITIONS_PER_SHARD as u16] {
                let digest = digest_in(partition, n);
                index.update(usize::from(partition), &digest, &[], &[i64::from(n) % 10]);
            }
        }
        assert_eq!(index.entries(), 600);
        for partition in [0usize, 1, PARTITIONS_PER_SHARD] {
            let found = index.range(partition, 0, 9, None, usize::MAX);
            assert_eq!(found.len(), 200);
            assert!(found
                .iter()
                .all(|(_, digest)| digest.partition_id().index() == partition));
            assert_eq!(index.range(partition, 3, 3, None, usize::MAX).len(), 20);
            assert_eq!(index.range(partition, 0, 9, None, 7).len(), 7);
        }
        assert!(index.used_bytes() > empty + 600 * ENTRY_BYTES as u64);
        for n in 0..200u8 {
            for partition in [0u16, 1, PARTITIONS_PER_SHARD as u16] {
                let digest = digest_in(partition, n);
                index.update(usize::from(partition), &digest, &[i64::from(n) % 10], &[]);
            }
        }
        assert_eq!(index.entries(), 0);
        assert_eq!(index.used_bytes(), empty);
    }
}
