//! Copies of records between nodes: the whole-record images (or
//! tombstones) that replica writes and migrations carry, applied by
//! conflict resolution, and the partition snapshots and drops migrations
//! need. The store knows nothing of which copy should win: the caller
//! passes the rule.

use crate::device::{AppendError, CommitWait};
use crate::index::{RecordMeta, Tombstone};
use crate::namespace::{record_head, Namespace, PartitionWriter, SetError};
use bolide_types::{Digest, PARTITION_COUNT};
use std::sync::atomic::Ordering::Relaxed;

/// A generation and a last-update time: what decides between copies.
pub type Stamp = (u16, u64);

/// A record's image, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy<'a> {
    pub digest: Digest,
    pub generation: u16,
    /// ms since 2010-01-01.
    pub last_update_ms: u64,
    /// Seconds since 2010-01-01; 0 = never.
    pub void_time: u32,
    pub set_name: &'a [u8],
    /// The record's bytes (`record::encode` format); None for a tombstone.
    pub record: Option<&'a [u8]>,
}

impl Copy<'_> {
    pub fn stamp(&self) -> Stamp {
        (self.generation, self.last_update_ms)
    }

    pub fn to_owned_copy(&self) -> OwnedCopy {
        OwnedCopy {
            digest: self.digest,
            generation: self.generation,
            last_update_ms: self.last_update_ms,
            void_time: self.void_time,
            set_name: self.set_name.to_vec(),
            record: self.record.map(<[u8]>::to_vec),
        }
    }
}

/// A record's image, owned (a migration's snapshot of a partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedCopy {
    pub digest: Digest,
    pub generation: u16,
    pub last_update_ms: u64,
    pub void_time: u32,
    pub set_name: Vec<u8>,
    pub record: Option<Vec<u8>>,
}

impl OwnedCopy {
    pub fn as_copy(&self) -> Copy<'_> {
        Copy {
            digest: self.digest,
            generation: self.generation,
            last_update_ms: self.last_update_ms,
            void_time: self.void_time,
            set_name: &self.set_name,
            record: self.record.as_deref(),
        }
    }
}

/// Why a copy could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CopyError {
    /// Its set could not be named here (too many sets, bad name).
    Set(SetError),
    /// Storage refused it (full, failed, too big).
    Storage(AppendError),
}

impl Namespace {
    /// Whether deletes leave tombstones here (a replicated namespace):
    /// older copies of a deleted record must not bring it back.
    pub fn keeps_tombstones(&self) -> bool {
        self.config.replication_factor > 1 || self.config.strong_consistency
    }

    /// Every record and tombstone of partition `pid`, copied out under the
    /// partition's read lock. Records that cannot be read back from the
    /// device are skipped (and counted by the caller's `skipped`).
    pub fn snapshot_partition(&self, pid: usize, now: u32, skipped: &mut u64) -> Vec<OwnedCopy> {
        let Some(table) = self.read_partition(pid) else {
            return Vec::new();
        };
        let mut copies = Vec::with_capacity(table.len() + table.tombstone_count());
        let mut buf = Vec::new();
        table.for_each(|entry| {
            // Truncated records are gone everywhere: never sent.
            if self.is_doomed(&entry.meta, now) && !entry.meta.is_expired(now) {
                return;
            }
            let bytes = match self.record_bytes(&entry, &mut buf) {
                Ok(bytes) => bytes.to_vec(),
                Err(_) => {
                    *skipped += 1;
                    return;
                }
            };
            copies.push(OwnedCopy {
                digest: Digest(*entry.digest),
                generation: entry.meta.generation,
                last_update_ms: entry.meta.last_update_ms,
                void_time: entry.meta.void_time,
                set_name: self
                    .set_name(entry.meta.set_id)
                    .unwrap_or_default()
                    .as_bytes()
                    .to_vec(),
                record: Some(bytes),
            });
        });
        for (digest, tombstone) in table.tombstones() {
            copies.push(OwnedCopy {
                digest,
                generation: tombstone.generation,
                last_update_ms: tombstone.last_update_ms,
                void_time: 0,
                set_name: self
                    .set_name(tombstone.set_id)
                    .unwrap_or_default()
                    .as_bytes()
                    .to_vec(),
                record: None,
            });
        }
        copies
    }

    /// Forgets this node's copy of partition `pid`: every record and
    /// tombstone (another node holds the partition now).
    pub fn drop_partition(&self, pid: usize) -> u64 {
        let Some(partition) = self.partitions.get(pid) else {
            return 0;
        };
        let mut writer = PartitionWriter {
            namespace: self,
            table: partition.table.write(),
        };
        let digests = writer.table.select(|_| true);
        let mut dropped = 0;
        for digest in digests {
            if writer.remove(&digest) {
                dropped += 1;
            }
        }
        let tombstones = writer.table.retain_tombstones(|_| false);
        self.stats.tombstones.fetch_sub(tombstones as i64, Relaxed);
        dropped
    }

    /// Forgets tombstones last updated before `before_ms` (ms since 2010);
    /// how many.
    pub fn raid_tombstones(&self, before_ms: u64) -> u64 {
        let mut raided = 0;
        for pid in 0..PARTITION_COUNT {
            let Some(partition) = self.partitions.get(pid) else {
                continue;
            };
            if partition.table.read().tombstone_count() == 0 {
                continue;
            }
            let dropped = partition
                .table
                .write()
                .retain_tombstones(|t| t.last_update_ms >= before_ms);
            raided += dropped as u64;
        }
        self.stats.tombstones.fetch_sub(raided as i64, Relaxed);
        raided
    }

    /// Records and tombstones in partition `pid`.
    pub fn partition_counts(&self, pid: usize) -> (usize, usize) {
        self.read_partition(pid)
            .map_or((0, 0), |table| (table.len(), table.tombstone_count()))
    }
}

impl PartitionWriter<'_> {
    /// What this partition holds for `digest`: the record's stamp, or its
    /// tombstone's (`true` for a tombstone).
    pub fn held_stamp(&self, digest: &Digest) -> Option<(Stamp, bool)> {
        if let Some(entry) = self.table.get(digest) {
            return Some(((entry.meta.generation, entry.meta.last_update_ms), false));
        }
        self.table
            .tombstone(digest)
            .map(|t| ((t.generation, t.last_update_ms), true))
    }

    /// Applies `copy` if `wins(held, incoming)` says it beats what is held.
    /// Returns whether it was applied, and the wait before it is durable.
    pub fn apply_copy(
        &mut self,
        copy: &Copy<'_>,
        wins: impl FnOnce(Option<Stamp>, Stamp) -> bool,
    ) -> Result<(bool, Option<CommitWait>), CopyError> {
        let held = self.held_stamp(&copy.digest).map(|(stamp, _)| stamp);
        if !wins(held, copy.stamp()) {
            return Ok((false, None));
        }
        let set_id = self
            .namespace
            .set_id(copy.set_name)
            .map_err(CopyError::Set)?;
        match copy.record {
            Some(record) => {
                let meta = RecordMeta {
                    generation: copy.generation,
                    void_time: copy.void_time,
                    last_update_ms: copy.last_update_ms,
                    set_id,
                };
                let wait = self
                    .put(&copy.digest, meta, record)
                    .map_err(CopyError::Storage)?;
                if self.table.remove_tombstone(&copy.digest) {
                    self.namespace.stats.tombstones.fetch_sub(1, Relaxed);
                }
                Ok((true, wait))
            }
            None => {
                let tombstone = Tombstone {
                    generation: copy.generation,
                    last_update_ms: copy.last_update_ms,
                    set_id,
                };
                let wait = self
                    .delete_keeping_tombstone(&copy.digest, tombstone)
                    .map_err(CopyError::Storage)?
                    .1;
                Ok((true, wait))
            }
        }
    }

    /// Deletes a record and keeps a tombstone for it (also when the record
    /// is not here: a delete copied from another node). In a persistent
    /// namespace the delete is written to storage too. Returns whether the
    /// record was here, and the commit wait.
    pub fn delete_keeping_tombstone(
        &mut self,
        digest: &Digest,
        tombstone: Tombstone,
    ) -> Result<(bool, Option<CommitWait>), AppendError> {
        let mut wait = None;
        let present = self.table.get(digest).is_some();
        if let Some(device) = &self.namespace.device {
            let set_name = self
                .namespace
                .set_name(tombstone.set_id)
                .unwrap_or_default();
            let meta = RecordMeta {
                generation: tombstone.generation,
                void_time: 0,
                last_update_ms: tombstone.last_update_ms,
                set_id: tombstone.set_id,
            };
            let placed =
                device.append_tombstone(record_head(digest, &meta), set_name.as_bytes())?;
            wait = device.commit_wait(placed.position);
        }
        if present {
            self.remove(digest);
        }
        if self.table.tombstone(digest).is_none() {
            self.namespace.stats.tombstones.fetch_add(1, Relaxed);
        }
        self.table.put_tombstone(digest, tombstone);
        Ok((present, wait))
    }

    /// Forgets the tombstone of a record written again.
    pub fn clear_tombstone(&mut self, digest: &Digest) {
        if self.table.remove_tombstone(digest) {
            self.namespace.stats.tombstones.fetch_sub(1, Relaxed);
        }
    }

    /// The tombstone kept for `digest`, if any.
    pub fn tombstone(&self, digest: &Digest) -> Option<Tombstone> {
        self.table.tombstone(digest)
    }
}
