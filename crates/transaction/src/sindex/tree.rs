//! An ordered set of secondary-index entries that knows its own size.
//!
//! Entries live in sorted leaves of at most [`LEAF_MAX`] entries, each a
//! vector whose capacity grows and shrinks by [`LEAF_STEP`] entries, so a
//! leaf's memory is its entries' plus less than a step whatever the order
//! entries arrive in (a `BTreeSet` keeps nodes about two thirds full after
//! random inserts and full after a sorted build: 45 or 33 bytes per entry,
//! and which one it holds cannot be told from outside). A `BTreeMap` keyed
//! by each leaf's lower fence finds the leaf of an entry: the first leaf's
//! fence is the lowest possible entry, each other leaf's is its first entry
//! when it was split off, so a leaf holds the entries from its fence up to
//! the next leaf's. No leaf is ever empty; a leaf under [`LEAF_MIN`] is
//! merged with a neighbour when they fit in one.
//!
//! [`EntrySet::bytes`] is the memory the set holds: leaf capacities, an
//! allocator header and slack per leaf and the map's share per leaf.

use bolide_types::{Digest, DIGEST_BYTES};
use std::collections::BTreeMap;
use std::ops::Bound;

/// Bytes of one entry: the bval (sign-flipped, big-endian, so byte order
/// is numeric order) then the digest.
pub const ENTRY_BYTES: usize = 8 + DIGEST_BYTES;

/// Most entries in a leaf; a leaf that grows past it is split in two.
pub const LEAF_MAX: usize = 64;
/// A leaf with fewer entries is merged with a neighbour if they fit.
const LEAF_MIN: usize = 16;
/// Entries a leaf's capacity grows or shrinks by.
const LEAF_STEP: usize = 8;
/// Memory per leaf besides its entries: the allocator's header and
/// rounding (16), the leaf's place in the map (a 28-byte fence and a
/// 24-byte vector in B-tree nodes of 11 slots, about 3/4 full, with
/// their inner nodes: 72), and the allocator's slack (128): a leaf grows
/// by reallocation a step at a time, and chunks a moved leaf leaves
/// behind stay in the allocator's free lists. Building an index over
/// 1,000,000 records (`bench/sindex.py`), the node's resident set grew by
/// about 4 bytes an entry (some 180 a leaf) more than the leaves' heap;
/// 128 is rounded down from that, as a heap with fewer moves has less.
const LEAF_OVERHEAD_BYTES: usize = 16 + 72 + 128;

/// One entry, ordered by bval then digest: the same order as its bytes',
/// but the bval is compared as one integer. 28 bytes, no padding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry(pub [u8; ENTRY_BYTES]);

impl Entry {
    /// The lowest entry there is.
    pub const MIN: Entry = Entry([0; ENTRY_BYTES]);

    pub fn new(bval: i64, digest: &Digest) -> Entry {
        let mut entry = [0u8; ENTRY_BYTES];
        entry[..8].copy_from_slice(&((bval as u64) ^ (1 << 63)).to_be_bytes());
        entry[8..].copy_from_slice(&digest.0);
        Entry(entry)
    }

    /// The first entry of `bval` (lowest digest).
    pub fn first_of(bval: i64) -> Entry {
        Entry::new(bval, &Digest([0; DIGEST_BYTES]))
    }

    /// The last entry of `bval` (highest digest).
    pub fn last_of(bval: i64) -> Entry {
        Entry::new(bval, &Digest([0xff; DIGEST_BYTES]))
    }

    #[inline]
    fn bval_key(&self) -> u64 {
        let mut bval = [0u8; 8];
        bval.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(bval)
    }

    #[inline]
    pub fn bval(&self) -> i64 {
        (self.bval_key() ^ (1 << 63)) as i64
    }

    #[inline]
    pub fn digest_bytes(&self) -> &[u8; DIGEST_BYTES] {
        self.0[8..].try_into().unwrap_or(&[0; DIGEST_BYTES])
    }

    #[inline]
    pub fn digest(&self) -> Digest {
        Digest(*self.digest_bytes())
    }

    /// The partition of the entry's record (the digest's low 12 bits).
    #[inline]
    pub fn partition(&self) -> u16 {
        Digest(*self.digest_bytes()).partition_id().0
    }
}

impl Ord for Entry {
    #[inline]
    fn cmp(&self, other: &Entry) -> std::cmp::Ordering {
        self.bval_key()
            .cmp(&other.bval_key())
            .then_with(|| self.0[8..].cmp(&other.0[8..]))
    }
}

impl PartialOrd for Entry {
    #[inline]
    fn partial_cmp(&self, other: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Entry({}, {:02x?})", self.bval(), &self.0[8..12])
    }
}

/// An ordered set of entries in leaves (see the module docs).
#[derive(Default)]
pub struct EntrySet {
    /// Leaves by lower fence.
    leaves: BTreeMap<Entry, Vec<Entry>>,
    len: usize,
    /// Sum of the leaves' capacities, in entries.
    capacity: usize,
}

impl EntrySet {
    pub fn new() -> EntrySet {
        EntrySet::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory the set holds, in bytes.
    pub fn bytes(&self) -> usize {
        self.capacity * ENTRY_BYTES + self.leaves.len() * LEAF_OVERHEAD_BYTES
    }

    /// Adds `entry`; false if it was already there.
    pub fn insert(&mut self, entry: Entry) -> bool {
        let Some((_, leaf)) = self.leaves.range_mut(..=entry).next_back() else {
            let mut leaf = Vec::with_capacity(LEAF_STEP);
            leaf.push(entry);
            self.capacity += leaf.capacity();
            self.leaves.insert(Entry::MIN, leaf);
            self.len = 1;
            return true;
        };
        let Err(at) = leaf.binary_search(&entry) else {
            return false;
        };
        if leaf.len() == leaf.capacity() {
            let before = leaf.capacity();
            leaf.reserve_exact(LEAF_STEP);
            self.capacity += leaf.capacity() - before;
        }
        leaf.insert(at, entry);
        self.len += 1;
        if leaf.len() > LEAF_MAX {
            let before = leaf.capacity();
            let half = leaf.len() / 2;
            let mut right = Vec::with_capacity(leaf.len() - half + LEAF_STEP);
            right.extend_from_slice(&leaf[half..]);
            leaf.truncate(half);
            leaf.shrink_to(half + LEAF_STEP);
            let after = leaf.capacity() + right.capacity();
            self.capacity = self.capacity + after - before;
            if let Some(&right_fence) = right.first() {
                self.leaves.insert(right_fence, right);
            }
        }
        true
    }

    /// Removes `entry`; false if it was not there.
    pub fn remove(&mut self, entry: &Entry) -> bool {
        let Some((&fence, leaf)) = self.leaves.range_mut(..=*entry).next_back() else {
            return false;
        };
        let Ok(at) = leaf.binary_search(entry) else {
            return false;
        };
        leaf.remove(at);
        self.len -= 1;
        let before = leaf.capacity();
        if leaf.capacity() - leaf.len() > 2 * LEAF_STEP {
            leaf.shrink_to(leaf.len() + LEAF_STEP);
        }
        self.capacity = self.capacity + leaf.capacity() - before;
        if leaf.len() < LEAF_MIN {
            self.merge(fence);
        }
        true
    }

    /// Merges the small leaf at `fence` into its left neighbour, or its
    /// right neighbour into it, if the two fit in one leaf; an empty set
    /// holds no leaf at all.
    fn merge(&mut self, fence: Entry) {
        let len = self.leaves.get(&fence).map_or(0, Vec::len);
        let previous = self
            .leaves
            .range(..fence)
            .next_back()
            .map(|(&f, leaf)| (f, leaf.len()));
        if let Some((previous, previous_len)) = previous {
            if previous_len + len <= LEAF_MAX {
                if let Some(moved) = self.leaves.remove(&fence) {
                    self.capacity -= moved.capacity();
                    self.append(previous, &moved);
                }
                return;
            }
        }
        let next = self
            .leaves
            .range((Bound::Excluded(fence), Bound::Unbounded))
            .next()
            .map(|(&f, leaf)| (f, leaf.len()));
        match next {
            Some((next, next_len)) if len + next_len <= LEAF_MAX => {
                if let Some(moved) = self.leaves.remove(&next) {
                    self.capacity -= moved.capacity();
                    self.append(fence, &moved);
                }
            }
            // The only leaf: kept unless empty.
            None if len == 0 && previous.is_none() => {
                if let Some(leaf) = self.leaves.remove(&fence) {
                    self.capacity -= leaf.capacity();
                }
            }
            _ => {}
        }
    }

    /// Appends `entries` (all above the leaf's) to the leaf at `fence`.
    fn append(&mut self, fence: Entry, entries: &[Entry]) {
        if let Some(leaf) = self.leaves.get_mut(&fence) {
            let before = leaf.capacity();
            let wanted = leaf.len() + entries.len() + LEAF_STEP;
            if leaf.capacity() < leaf.len() + entries.len() {
                leaf.reserve_exact(wanted - leaf.len());
            }
            leaf.extend_from_slice(entries);
            self.capacity = self.capacity + leaf.capacity() - before;
        }
    }

    /// Calls `visit` with each entry from `from` (included) upwards, in
    /// order, until it returns false or the entries end.
    pub fn walk(&self, from: &Entry, mut visit: impl FnMut(&Entry) -> bool) {
        // One descent to the leaf of `from`; the next leaves only if the
        // walk goes on past it (a selective query mostly ends in it).
        let Some((&fence, leaf)) = self.leaves.range(..=*from).next_back() else {
            return;
        };
        let at = leaf.partition_point(|entry| entry < from);
        for entry in leaf.get(at..).unwrap_or_default() {
            if !visit(entry) {
                return;
            }
        }
        let next = self
            .leaves
            .range((Bound::Excluded(fence), Bound::Unbounded));
        for (_, leaf) in next {
            for entry in leaf {
                if !visit(entry) {
                    return;
                }
            }
        }
    }

    /// Every entry, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.leaves.values().flatten()
    }

    /// Checks the leaves' invariants and the set's counts (for tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut count = 0;
        let mut capacity = 0;
        let mut last: Option<Entry> = None;
        for (i, (fence, leaf)) in self.leaves.iter().enumerate() {
            assert!(!leaf.is_empty(), "empty leaf");
            assert!(leaf.len() <= LEAF_MAX, "leaf over the maximum");
            assert!(
                leaf.capacity() <= leaf.len() + 2 * LEAF_STEP + LEAF_STEP,
                "leaf capacity {} for {} entries",
                leaf.capacity(),
                leaf.len()
            );
            if i == 0 {
                assert_eq!(*fence, Entry::MIN);
            }
            for entry in leaf {
                assert!(entry >= fence, "entry below its leaf's fence");
                assert!(last.is_none_or(|last| last < *entry), "out of order");
                last = Some(*entry);
            }
            count += leaf.len();
            capacity += leaf.capacity();
        }
        assert_eq!(count, self.len);
        assert_eq!(capacity, self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn entry(bval: i64, n: u16) -> Entry {
        let mut digest = [0u8; DIGEST_BYTES];
        digest[..2].copy_from_slice(&n.to_le_bytes());
        digest[19] = n as u8;
        Entry::new(bval, &Digest(digest))
    }

    #[test]
    fn entry_order_is_byte_order_and_round_trips() {
        let values = [i64::MIN, -256, -1, 0, 1, 255, 256, i64::MAX];
        let mut entries = Vec::new();
        for &bval in &values {
            for n in [0u16, 7, 0xffff] {
                entries.push(entry(bval, n));
            }
        }
        for a in &entries {
            for b in &entries {
                assert_eq!(a.cmp(b), a.0.cmp(&b.0));
            }
            assert_eq!(Entry::new(a.bval(), &a.digest()), *a);
        }
        assert_eq!(Entry::first_of(i64::MIN), Entry::MIN);
        assert_eq!(entry(5, 4095).partition(), 4095);
    }

    #[test]
    fn sequential_and_reverse_fills_stay_within_a_step_per_leaf() {
        for reverse in [false, true] {
            let mut set = EntrySet::new();
            let mut bvals: Vec<i64> = (0..10_000).collect();
            if reverse {
                bvals.reverse();
            }
            for bval in bvals {
                assert!(set.insert(entry(bval, 1)));
            }
            set.check();
            assert_eq!(set.len(), 10_000);
            // Leaves at least half full: at most 28 * 2 + step per entry.
            assert!(set.bytes() < 10_000 * 2 * ENTRY_BYTES, "{}", set.bytes());
            for bval in 0..10_000 {
                assert!(set.remove(&entry(bval, 1)));
                if bval % 997 == 0 {
                    set.check();
                }
            }
            set.check();
            assert!(set.is_empty());
            assert_eq!(set.bytes(), 0);
        }
    }

    #[test]
    fn walks_from_any_entry() {
        let mut set = EntrySet::new();
        for bval in (0..1000).map(|b| b * 2) {
            set.insert(entry(bval, 3));
        }
        let mut seen = Vec::new();
        set.walk(&Entry::first_of(501), |e| {
            seen.push(e.bval());
            seen.len() < 3
        });
        assert_eq!(seen, vec![502, 504, 506]);
        let mut all = 0;
        set.walk(&Entry::MIN, |_| {
            all += 1;
            true
        });
        assert_eq!(all, 1000);
        let mut none = 0;
        set.walk(&Entry::first_of(5000), |_| {
            none += 1;
            true
        });
        assert_eq!(none, 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a BTreeSet: the same answers to inserts and removes,
        /// the same order, and every invariant after each step.
        #[test]
        fn behaves_like_a_btreeset(ops in proptest::collection::vec((any::<bool>(), -200i64..200, 0u16..4), 1..3000)) {
            let mut set = EntrySet::new();
            let mut model = BTreeSet::new();
            for (i, (insert, bval, n)) in ops.into_iter().enumerate() {
                let e = entry(bval, n);
                if insert {
                    prop_assert_eq!(set.insert(e), model.insert(e));
                } else {
                    prop_assert_eq!(set.remove(&e), model.remove(&e));
                }
                if i % 101 == 0 {
                    set.check();
                }
            }
            set.check();
            let got: Vec<Entry> = set.iter().copied().collect();
            let want: Vec<Entry> = model.iter().copied().collect();
            prop_assert_eq!(got, want);
            let from = entry(0, 0);
            let mut walked = Vec::new();
            set.walk(&from, |e| { walked.push(*e); true });
            let want: Vec<Entry> = model.range(from..).copied().collect();
            prop_assert_eq!(walked, want);
        }
    }
}
