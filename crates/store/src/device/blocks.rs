//! Block states, the free list and live-byte accounting.
//!
//! A block goes FREE → OPEN (being filled) → SEALED (full, waiting for the
//! flusher) → USED (on the device) → DEFRAG (claimed by the defragmenter) →
//! PENDING_FREE (its live entries copied; free once the copies are
//! durable) → FREE, its header erased first. Each block counts the padded
//! bytes of its live entries: the current version of a record, and a
//! tombstone while it may still hide an older version.

use super::format::BLOCK_HEADER_BYTES;
use super::Device;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

pub(super) const STATE_FREE: u8 = 0;
pub(super) const STATE_OPEN: u8 = 1;
pub(super) const STATE_SEALED: u8 = 2;
pub(super) const STATE_USED: u8 = 3;
pub(super) const STATE_DEFRAG: u8 = 4;
pub(super) const STATE_PENDING_FREE: u8 = 5;

#[derive(Default)]
pub(super) struct BlockInfo {
    pub(super) live: AtomicU32,
    pub(super) seq: AtomicU64,
    pub(super) state: AtomicU8,
}

impl Device {
    /// The sequence number of block `id`.
    pub fn block_seq(&self, id: u32) -> u64 {
        self.blocks
            .get(id as usize)
            .map_or(0, |b| b.seq.load(Ordering::Relaxed))
    }

    /// Adds `bytes` of a new entry to block `id`'s live count.
    pub fn add_live(&self, id: u32, bytes: usize) {
        let Some(info) = self.blocks.get(id as usize) else {
            return;
        };
        let before = info.live.fetch_add(bytes as u32, Ordering::Relaxed);
        // A block cannot hold more live bytes than it has room for.
        assert!(
            before as usize + bytes <= self.block_size() - BLOCK_HEADER_BYTES,
            "block {id}: {before} + {bytes} live bytes pass its size"
        );
        self.stats
            .live_bytes
            .fetch_add(bytes as i64, Ordering::Relaxed);
    }

    /// Removes `bytes` of a dead entry from block `id`'s live count.
    pub fn release(&self, id: u32, bytes: usize) {
        let Some(info) = self.blocks.get(id as usize) else {
            return;
        };
        let before = info
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                Some(live.saturating_sub(bytes as u32))
            })
            .unwrap_or(0);
        // Releasing more than the block holds means an entry was counted
        // twice or never: the block could then be freed with live records.
        assert!(
            before as usize >= bytes,
            "block {id}: releasing {bytes} bytes of {before} live"
        );
        self.stats
            .live_bytes
            .fetch_sub(bytes as i64, Ordering::Relaxed);
    }

    pub fn live_bytes_of(&self, id: u32) -> u32 {
        self.blocks
            .get(id as usize)
            .map_or(0, |b| b.live.load(Ordering::Relaxed))
    }

    /// Whether a tombstone read back from block `block` counts as live
    /// bytes there: every tombstone written since the cold start does, and
    /// of those the cold start read, the ones that may still hide an older
    /// version (see [`Device::finish_cold_start`]).
    pub fn tombstone_counted(&self, block: u32, deleted_seq: u64) -> bool {
        self.block_seq(block) >= self.first_new_seq.load(Ordering::Relaxed)
            || deleted_seq >= self.tombstones_counted_from.load(Ordering::Relaxed)
    }

    /// Takes a block off the free list, leaving `reserve` blocks there.
    pub(super) fn take_free(&self, reserve: usize) -> Option<u32> {
        let mut free = self.free.lock();
        if free.len() <= reserve {
            return None;
        }
        let next = free.pop_front()?;
        self.free_count.store(free.len() as u32, Ordering::Relaxed);
        let info = self.blocks.get(next as usize)?;
        assert!(
            info.state.load(Ordering::Relaxed) == STATE_FREE,
            "block {next} on the free list is not free"
        );
        assert!(info.live.load(Ordering::Relaxed) == 0);
        Some(next)
    }

    /// Marks a defragmented block free once everything appended so far is
    /// durable (its live records were copied to newer blocks).
    pub fn free_after_durable(&self, id: u32) {
        let target = self.appended();
        if let Some(info) = self.blocks.get(id as usize) {
            let was = info.state.swap(STATE_PENDING_FREE, Ordering::Relaxed);
            assert!(
                was == STATE_DEFRAG,
                "block {id} freed by defrag in state {was}"
            );
        }
        self.queue.lock().pending_free.push((id, target));
    }

    /// Frees the defragmented blocks whose copies are durable now.
    pub(super) fn release_pending_free(&self) {
        let durable = self.durable();
        let ready: Vec<u32> = {
            let mut queue = self.queue.lock();
            let mut ready = Vec::new();
            queue.pending_free.retain(|&(id, target)| {
                if target <= durable {
                    ready.push(id);
                    false
                } else {
                    true
                }
            });
            ready
        };
        if ready.is_empty() {
            return;
        }
        // Erase the headers first: a freed block must never be read back
        // at a cold start (its stale versions could outlive a dropped
        // tombstone). If that fails they stay pending and go again later.
        if !self.erase_headers(&ready) {
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            self.failure.fetch_max(super::FAILURE_IO, Ordering::Relaxed);
            let mut queue = self.queue.lock();
            queue
                .pending_free
                .extend(ready.into_iter().map(|id| (id, 0)));
            return;
        }
        let mut free = self.free.lock();
        for id in ready {
            if let Some(info) = self.blocks.get(id as usize) {
                // Tombstones defrag could not read (a damaged block) may
                // remain counted: they leave the totals with the block.
                let left = info.live.swap(0, Ordering::Relaxed);
                self.stats
                    .live_bytes
                    .fetch_sub(i64::from(left), Ordering::Relaxed);
                let was = info.state.swap(STATE_FREE, Ordering::Relaxed);
                assert!(was == STATE_PENDING_FREE, "block {id} freed in state {was}");
            }
            free.push_back(id);
        }
        self.free_count.store(free.len() as u32, Ordering::Relaxed);
    }

    /// Zeroes the headers of `ids` and syncs.
    pub(super) fn erase_headers(&self, ids: &[u32]) -> bool {
        let zeros = [0u8; BLOCK_HEADER_BYTES];
        let _io = self.io_lock.lock();
        ids.iter().all(|&id| self.write_block_bytes(id, 0, &zeros)) && self.sync_all()
    }

    /// Whether defragmented blocks are waiting for their copies to be durable.
    pub fn has_pending_free(&self) -> bool {
        !self.queue.lock().pending_free.is_empty()
    }

    /// Used blocks whose live bytes are under the defrag mark, emptiest
    /// first, at most `limit`.
    pub fn defrag_candidates(&self, limit: usize) -> Vec<u32> {
        let mark = self.block_size() as u64 * u64::from(self.config.defrag_lwm_pct) / 100;
        let mut found: Vec<(u32, u32)> = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.state.load(Ordering::Relaxed) == STATE_USED)
            .filter(|(_, b)| u64::from(b.live.load(Ordering::Relaxed)) < mark)
            .map(|(id, b)| (b.live.load(Ordering::Relaxed), id as u32))
            .collect();
        found.sort_unstable();
        found.truncate(limit);
        found.into_iter().map(|(_, id)| id).collect()
    }

    /// Claims a used block for defragmentation.
    pub fn claim_for_defrag(&self, id: u32) -> bool {
        self.blocks.get(id as usize).is_some_and(|b| {
            b.state
                .compare_exchange(
                    STATE_USED,
                    STATE_DEFRAG,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        })
    }

    /// Gives a claimed block back (defrag could not finish it).
    pub fn unclaim(&self, id: u32) {
        if let Some(b) = self.blocks.get(id as usize) {
            let was = b.state.swap(STATE_USED, Ordering::Relaxed);
            assert!(was == STATE_DEFRAG, "block {id} unclaimed in state {was}");
        }
    }

    /// The oldest sequence number of any block still holding data.
    pub fn oldest_used_seq(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| {
                // Every block whose header is still valid on the device.
                b.state.load(Ordering::Relaxed) != STATE_FREE
            })
            .map(|b| b.seq.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Whether block `id` is in use (holds entries that count), for checks.
    pub fn is_used(&self, id: u32) -> bool {
        self.blocks
            .get(id as usize)
            .is_some_and(|b| b.state.load(Ordering::Relaxed) == STATE_USED)
    }

    /// The live bytes of every block, summed, against the total kept in
    /// the statistics (a test of the accounting).
    pub fn live_bytes_total(&self) -> (u64, i64) {
        let sum = self
            .blocks
            .iter()
            .map(|b| u64::from(b.live.load(Ordering::Relaxed)))
            .sum();
        (sum, self.stats.live_bytes.load(Ordering::Relaxed))
    }
}
