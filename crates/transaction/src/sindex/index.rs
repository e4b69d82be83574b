//! One secondary index: per partition, an ordered set of (bval, digest)
//! entries, so a query visits only the partitions it is asked for, reads
//! only the entries in its range, and resumes after a (bval, digest) pair
//! exactly as the clients' partition trackers expect.
//!
//! Entries change under the record partition's write lock (through the
//! store's record observer), and each tree has its own lock, taken after
//! the record partition's lock and never the other way round.

use super::definition::Definition;
use super::keys;
use bolide_particles::expression::Expr;
use bolide_store::{Namespace, RecordMeta, RecordView};
use bolide_types::{now_citrusleaf_seconds, Digest, DIGEST_BYTES, PARTITION_COUNT};
use parking_lot::RwLock;
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64};
use std::sync::OnceLock;
use std::time::Instant;

/// Bytes of one entry: the bval (sign-flipped, big-endian, so byte order
/// is numeric order) then the digest.
pub const ENTRY_BYTES: usize = 8 + DIGEST_BYTES;

/// One entry, ordered by bval then digest: the same order as its bytes',
/// but the bval is compared as one integer (a query descends every
/// partition's tree, and a byte-wise compare is a call to `memcmp`). 28
/// bytes, no padding.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Entry([u8; ENTRY_BYTES]);

impl Entry {
    fn bval_key(&self) -> u64 {
        let mut bval = [0u8; 8];
        bval.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(bval)
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Entry) -> std::cmp::Ordering {
        self.bval_key()
            .cmp(&other.bval_key())
            .then_with(|| self.0[8..].cmp(&other.0[8..]))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Memory per entry the `used_bytes` statistic assumes: the resident
/// memory an index of 1,000,000 integers added, 48.2 bytes per entry
/// (`bench/sindex.py`, BENCHMARKS.md): 28 bytes of entry in B-tree leaves
/// of 11 at the fill random inserts leave, inner nodes, allocator slack.
const BYTES_PER_ENTRY_ESTIMATE: u64 = 48;

/// A secondary index and its entries.
pub struct SecondaryIndex {
    pub definition: Definition,
    /// The definition's expression, parsed (expression indexes).
    expression: Option<Expr>,
    /// The index's name (a create with the same definition renames it).
    name: RwLock<String>,
    /// The set's id once the set exists (None: not yet, or no set).
    set_id: OnceLock<u16>,
    trees: Box<[RwLock<BTreeSet<Entry>>]>,
    entries: AtomicI64,
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
        let trees = std::iter::repeat_with(|| RwLock::new(BTreeSet::new()))
            .take(PARTITION_COUNT)
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
            trees,
            entries: AtomicI64::new(0),
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

    /// Estimated memory of the entries (see [`BYTES_PER_ENTRY_ESTIMATE`]).
    pub fn used_bytes(&self) -> u64 {
        self.entries() * BYTES_PER_ENTRY_ESTIMATE
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
        let Some(tree) = self.trees.get(partition) else {
            return;
        };
        let mut tree = tree.write();
        let mut delta = 0i64;
        for bval in old.iter().filter(|bval| new.binary_search(bval).is_err()) {
            if tree.remove(&entry(*bval, digest)) {
                delta -= 1;
            }
        }
        for bval in new.iter().filter(|bval| old.binary_search(bval).is_err()) {
            if tree.insert(entry(*bval, digest)) {
                delta += 1;
            }
        }
        drop(tree);
        self.entries.fetch_add(delta, Relaxed);
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
        let Some(tree) = self.trees.get(partition) else {
            return Vec::new();
        };
        if start > end {
            return Vec::new();
        }
        let lower = match resume {
            Some((bval, digest)) if bval >= start => Bound::Excluded(entry(bval, &Digest(*digest))),
            _ => Bound::Included(entry(start, &Digest([0; DIGEST_BYTES]))),
        };
        let upper = entry(end, &Digest([0xff; DIGEST_BYTES]));
        if let Bound::Excluded(low) = &lower {
            if *low >= upper {
                return Vec::new();
            }
        }
        // One descent to the lower bound, then a walk that stops at the
        // first entry past the upper one: a query visits every partition's
        // tree, mostly to find nothing, and a two-sided range would descend
        // twice.
        tree.read()
            .range((lower, Bound::Unbounded))
            .take_while(|entry| **entry <= upper)
            .take(limit)
            .map(split)
            .collect()
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
                    fresh.extend(bvals.into_iter().map(|bval| entry(bval, &digest)));
                }
                self.bulk_insert(partition, fresh);
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
}

impl SecondaryIndex {
    /// Adds many entries to a partition's tree at once: the tree is built
    /// again from the sorted entries, which packs its nodes full (entries
    /// inserted one by one leave B-tree nodes about two thirds full).
    fn bulk_insert(&self, partition: usize, fresh: Vec<Entry>) {
        let Some(tree) = self.trees.get(partition) else {
            return;
        };
        if fresh.is_empty() {
            return;
        }
        let mut tree = tree.write();
        let before = tree.len();
        let mut all: Vec<Entry> = std::mem::take(&mut *tree).into_iter().collect();
        all.extend(fresh);
        // Sorted, deduplicated, and built bottom-up with full nodes.
        *tree = all.into_iter().collect();
        let added = tree.len() - before;
        drop(tree);
        self.entries.fetch_add(added as i64, Relaxed);
    }
}

fn entry(bval: i64, digest: &Digest) -> Entry {
    let mut entry = [0u8; ENTRY_BYTES];
    entry[..8].copy_from_slice(&((bval as u64) ^ (1 << 63)).to_be_bytes());
    entry[8..].copy_from_slice(&digest.0);
    Entry(entry)
}

fn split(entry: &Entry) -> (i64, Digest) {
    let mut digest = [0u8; DIGEST_BYTES];
    digest.copy_from_slice(&entry.0[8..]);
    ((entry.bval_key() ^ (1 << 63)) as i64, Digest(digest))
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

    #[test]
    fn entry_order_is_byte_order() {
        let values = [i64::MIN, -256, -1, 0, 1, 255, 256, i64::MAX];
        let digests = [Digest([0; DIGEST_BYTES]), Digest([7; DIGEST_BYTES]), {
            let mut d = [0xff; DIGEST_BYTES];
            d[0] = 0;
            Digest(d)
        }];
        let mut entries = Vec::new();
        for &bval in &values {
            for digest in &digests {
                entries.push(entry(bval, digest));
            }
        }
        for a in &entries {
            for b in &entries {
                assert_eq!(a.cmp(b), a.0.cmp(&b.0), "{:?} {:?}", split(a), split(b));
            }
            assert_eq!(split(a), split(&entry(split(a).0, &split(a).1)));
        }
    }

    #[test]
    fn entries_sort_by_signed_bval_then_digest_and_resume_after() {
        let index = index();
        let d = |n: u8| Digest([n; DIGEST_BYTES]);
        for (bval, n) in [(-5, 1), (3, 2), (3, 1), (i64::MIN, 9), (i64::MAX, 9)] {
            index.update(0, &d(n), &[], &[bval]);
        }
        assert_eq!(index.entries(), 5);
        let all = index.range(0, i64::MIN, i64::MAX, None, usize::MAX);
        let got: Vec<(i64, u8)> = all.iter().map(|(b, d)| (*b, d.0[0])).collect();
        assert_eq!(
            got,
            vec![(i64::MIN, 9), (-5, 1), (3, 1), (3, 2), (i64::MAX, 9)]
        );
        let after = index.range(0, -10, 10, Some((3, &[1; DIGEST_BYTES])), usize::MAX);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].0, 3);
        assert_eq!(after[0].1 .0[0], 2);
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
}
