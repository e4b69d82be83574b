//! A node's records in memory: one register (a u64, or a tombstone) per
//! key, behind the cluster crate's `RecordStore`, so the data-path
//! machines apply, fetch, snapshot and drop them exactly as the server's
//! store is asked to.

use bolide_cluster::conflict::{self, Stamp};
use bolide_cluster::datapath::{Applied, OwnedImage, RecordStore, StoreFailed};
use bolide_cluster::fabric::Image;
use bolide_cluster::routing::ConflictPolicy;
use bolide_types::{DIGEST_BYTES, PARTITION_COUNT};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A record's value (None: a tombstone) with the stamp that orders its
/// versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    pub stamp: Stamp,
    pub value: Option<u64>,
}

/// The partition of a simulated key (spread like digests are).
pub fn partition_of(key: u32) -> usize {
    (key.wrapping_mul(2_654_435_761) >> 20) as usize & (PARTITION_COUNT - 1)
}

/// The digest of a simulated key: its partition in the first 12 bits, as
/// the clients compute it, then the key.
pub fn digest_of(key: u32) -> [u8; DIGEST_BYTES] {
    let pid = partition_of(key) as u16;
    let mut digest = [0u8; DIGEST_BYTES];
    digest[..2].copy_from_slice(&pid.to_le_bytes());
    digest[2..6].copy_from_slice(&key.to_le_bytes());
    digest
}

/// One node's records, per partition.
pub struct MemStore {
    partitions: RefCell<Vec<BTreeMap<[u8; DIGEST_BYTES], Rec>>>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore {
            partitions: RefCell::new(vec![BTreeMap::new(); PARTITION_COUNT]),
        }
    }

    pub fn get(&self, key: u32) -> Option<Rec> {
        let digest = digest_of(key);
        self.partitions.borrow()[partition_of(key)]
            .get(&digest)
            .copied()
    }

    /// A client write applied here (the node is the working master).
    pub fn put(&self, key: u32, rec: Rec) {
        let digest = digest_of(key);
        self.partitions.borrow_mut()[partition_of(key)].insert(digest, rec);
    }

    /// Whether it holds no record at all.
    pub fn is_empty(&self) -> bool {
        self.partitions.borrow().iter().all(BTreeMap::is_empty)
    }

    /// Partitions holding anything (a restart's versions).
    pub fn holds(&self, pid: usize) -> bool {
        !self.partitions.borrow()[pid].is_empty()
    }

    /// Every record (and tombstone) of a partition with its stamp.
    pub fn stamps(&self, pid: usize) -> Vec<([u8; DIGEST_BYTES], Stamp)> {
        self.partitions.borrow()[pid]
            .iter()
            .map(|(digest, rec)| (*digest, rec.stamp))
            .collect()
    }

    fn image(digest: &[u8; DIGEST_BYTES], rec: &Rec) -> OwnedImage {
        OwnedImage {
            digest: *digest,
            generation: rec.stamp.generation,
            last_update_ms: rec.stamp.last_update_ms,
            void_time: 0,
            set_name: Vec::new(),
            record: rec.value.map(|value| value.to_le_bytes().to_vec()),
        }
    }
}

impl RecordStore for MemStore {
    type Wait = ();

    fn apply(
        &self,
        namespace: usize,
        image: &Image<'_>,
        policy: ConflictPolicy,
    ) -> Result<Applied<()>, StoreFailed> {
        assert_eq!(namespace, 0, "the simulator has one namespace");
        let value = match image.record {
            None => None,
            Some(bytes) => Some(u64::from_le_bytes(
                bytes.try_into().map_err(|_| StoreFailed)?,
            )),
        };
        let pid = usize::from(bolide_cluster::datapath::pid_of(&image.digest));
        let mut partitions = self.partitions.borrow_mut();
        let records = &mut partitions[pid];
        let incoming = Stamp {
            generation: image.generation,
            last_update_ms: image.last_update_ms,
        };
        let held = records.get(&image.digest).map(|rec| rec.stamp);
        let applied = conflict::incoming_wins(policy, held, incoming);
        if applied {
            records.insert(
                image.digest,
                Rec {
                    stamp: incoming,
                    value,
                },
            );
        }
        Ok(Applied {
            applied,
            wait: None,
        })
    }

    fn fetch(&self, namespace: usize, digest: &[u8; DIGEST_BYTES]) -> Option<OwnedImage> {
        assert_eq!(namespace, 0, "the simulator has one namespace");
        let pid = usize::from(bolide_cluster::datapath::pid_of(digest));
        self.partitions.borrow()[pid]
            .get(digest)
            .map(|rec| MemStore::image(digest, rec))
    }

    fn snapshot(&self, namespace: usize, pid: u16, _skipped: &mut u64) -> Vec<OwnedImage> {
        assert_eq!(namespace, 0, "the simulator has one namespace");
        self.partitions.borrow()[usize::from(pid)]
            .iter()
            .map(|(digest, rec)| MemStore::image(digest, rec))
            .collect()
    }

    fn drop_partition(&self, namespace: usize, pid: u16) -> u64 {
        assert_eq!(namespace, 0, "the simulator has one namespace");
        let dropped = std::mem::take(&mut self.partitions.borrow_mut()[usize::from(pid)]);
        dropped.len() as u64
    }
}
