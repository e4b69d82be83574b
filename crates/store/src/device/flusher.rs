//! The flusher: writes sealed blocks, and the open block's new bytes on the
//! timer or when a committing writer asks, syncs, publishes the durable
//! position and frees defragmented blocks.
//!
//! A failed write or sync is never skipped: the blocks of the failed round
//! stay in `writing` (still readable there), the open block's flushed mark
//! goes back, and the whole round is written again after a pause (50 ms
//! doubling to 1 s) until it succeeds. Rewriting from these buffers, rather
//! than calling `fsync` again, matters on Linux: a failed `fsync` may drop
//! the dirty pages, so a second `fsync` could report success for data that
//! never reached the device. From the failure until a round succeeds, no
//! new data is taken (appends answer [`AppendError::Failing`], or
//! [`AppendError::DeviceFull`] after `ENOSPC`): the node does not accept
//! writes it already knows it may not keep.
//!
//! [`AppendError::Failing`]: super::AppendError::Failing
//! [`AppendError::DeviceFull`]: super::AppendError::DeviceFull

use super::blocks::{STATE_SEALED, STATE_USED};
use super::format::{self, BLOCK_HEADER_BYTES};
use super::meta::SEQ_RESERVE;
use super::{disk, position, Device, FAILURE_FULL, FAILURE_IO, FAILURE_NONE, OFFSET_BITS};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First pause before writing again after a failed write; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Attempts a shutting-down flusher makes on a failing device before it
/// gives up (about 10 s with the pauses).
const SHUTDOWN_RETRIES: u32 = 15;
/// Emptied buffers kept for reuse.
const POOL_MAX: usize = 4;

pub(super) struct Sealed {
    pub(super) block: u32,
    pub(super) seq: u64,
    /// Shared with readers that copy an entry out while it is written.
    pub(super) buf: Arc<Vec<u8>>,
}

#[derive(Default)]
pub(super) struct FlushQueue {
    pub(super) sealed: VecDeque<Sealed>,
    /// Sealed blocks the flusher is writing now (still readable here).
    pub(super) writing: Vec<Sealed>,
    pub(super) sealed_bytes: u64,
    pub(super) commit_requested: bool,
    pub(super) pool: Vec<Vec<u8>>,
    /// Blocks emptied by defrag, free once this position is durable.
    pub(super) pending_free: Vec<(u32, u64)>,
    pub(super) shutdown: bool,
}

/// What one flush round did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// Everything it wrote is durable (possibly nothing to write).
    Done,
    /// A write or sync failed; nothing of the round counts as durable.
    Failed,
}

impl Device {
    /// The flusher thread's loop. Runs until [`Device::shutdown`].
    pub fn run_flusher(&self) {
        let flush_every = Duration::from_millis(self.config.flush_max_ms.max(1));
        let mut next_timed = Instant::now() + flush_every;
        let mut scratch: Vec<u8> = Vec::new();
        let mut backoff = RETRY_FIRST;
        let mut shutdown_retries = 0u32;
        loop {
            if self.is_failed() {
                // Failed for good: nothing more will be written.
                return;
            }
            let (commit, shutdown) = {
                let mut queue = self.queue.lock();
                while queue.sealed.is_empty()
                    && queue.writing.is_empty()
                    && !queue.commit_requested
                    && !queue.shutdown
                    && Instant::now() < next_timed
                {
                    self.queue_signal.wait_until(&mut queue, next_timed);
                }
                (std::mem::take(&mut queue.commit_requested), queue.shutdown)
            };
            let timed = Instant::now() >= next_timed;
            if timed {
                next_timed = Instant::now() + flush_every;
            }
            let partial = commit || timed || shutdown || self.is_failing();
            if self.flush_round(&mut scratch, partial) == Round::Failed {
                if shutdown {
                    shutdown_retries += 1;
                    if shutdown_retries >= SHUTDOWN_RETRIES {
                        tracing::error!(
                            "storage still failing at shutdown: giving up on the blocks not yet written"
                        );
                        self.set_failed();
                        return;
                    }
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(RETRY_MAX);
                continue;
            }
            backoff = RETRY_FIRST;
            if shutdown {
                let queue = self.queue.lock();
                if queue.sealed.is_empty() && queue.writing.is_empty() {
                    return;
                }
            }
        }
    }

    /// One round of the flusher: writes every sealed block and, if
    /// `partial`, the open block's bytes not yet written; syncs; publishes
    /// the durable position; frees defragmented blocks whose copies are
    /// now durable. Tests drive the engine one round at a time.
    pub fn flush_round(&self, scratch: &mut Vec<u8>, partial: bool) -> Round {
        // Snapshot the open block first: every block sealed before the
        // snapshot is then in the queue drained below (lock order).
        let partial = if partial {
            let mut writer = self.writer.lock();
            if writer.open && writer.used > writer.flushed {
                let from = writer.flushed & !4095;
                scratch.clear();
                scratch.extend_from_slice(&writer.buf[from..writer.used]);
                let snapshot = (writer.block, writer.seq, from, writer.used);
                writer.flushed = writer.used;
                Some(snapshot)
            } else {
                None
            }
        } else {
            None
        };
        // The blocks stay readable in `writing` until they are written;
        // blocks whose write failed stay there and go again first.
        let to_write: Vec<(u32, u64, Arc<Vec<u8>>)> = {
            let mut queue = self.queue.lock();
            let queue = &mut *queue;
            queue.writing.extend(queue.sealed.drain(..));
            queue
                .writing
                .iter()
                .map(|s| (s.block, s.seq, Arc::clone(&s.buf)))
                .collect()
        };
        let mut reached = 0u64;
        let mut ok = true;
        let io = self.io_lock.lock();
        for (block, seq, buf) in &to_write {
            // The header checked just before it goes out.
            assert!(
                format::read_block_header(buf) == Some(*seq),
                "sealed block {block} lost its header"
            );
            ok = ok && self.write_block_bytes(*block, 0, buf);
            reached = reached.max(position(*seq, (1 << OFFSET_BITS) - 1));
        }
        let written_blocks = to_write.len();
        drop(to_write);
        if let Some((block, seq, from, used)) = partial {
            debug_assert!(from > 0 || format::read_block_header(scratch) == Some(seq));
            ok = ok && self.write_block_bytes(block, from, scratch);
            reached = reached.max(position(seq, used));
        }
        if reached > 0 && ok {
            ok = self.sync_all();
        }
        drop(io);
        if !ok {
            // Nothing of this round counts as durable. The blocks stay in
            // `writing`, the open block's unflushed mark goes back, and all
            // of it is written again by the next round.
            self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
            if let Some((block, seq, from, _)) = partial {
                let mut writer = self.writer.lock();
                if writer.open && writer.block == block && writer.seq == seq {
                    writer.flushed = writer.flushed.min(from);
                }
            }
            return Round::Failed;
        }
        if self.failure.swap(FAILURE_NONE, Ordering::Relaxed) != FAILURE_NONE {
            tracing::warn!("storage writes succeed again");
        }
        self.stats
            .blocks_written
            .fetch_add(written_blocks as u64, Ordering::Relaxed);
        if partial.is_some() {
            self.stats.partial_flushes.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut queue = self.queue.lock();
            let written: Vec<Sealed> = queue.writing.drain(..).collect();
            for block in written {
                queue.sealed_bytes = queue.sealed_bytes.saturating_sub(block.buf.len() as u64);
                if let Some(info) = self.blocks.get(block.block as usize) {
                    let moved = info.state.compare_exchange(
                        STATE_SEALED,
                        STATE_USED,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                    assert!(
                        moved.is_ok(),
                        "written block {} was not sealed",
                        block.block
                    );
                }
                // A reader may still hold the buffer: then it goes.
                if let Ok(mut buf) = Arc::try_unwrap(block.buf) {
                    if queue.pool.len() < POOL_MAX {
                        buf.fill(0);
                        queue.pool.push(buf);
                    }
                }
            }
        }
        if reached > 0 {
            self.publish_durable(reached);
        }
        self.release_pending_free();
        // Sequences are reserved ahead, so that opening a block never waits.
        let next_seq = self.writer.lock().next_seq;
        if next_seq + SEQ_RESERVE / 2 >= self.seq_floor() {
            if let Err(error) = self.raise_seq_floor(next_seq + SEQ_RESERVE) {
                tracing::error!(%error, "cannot raise the storage sequence floor");
                self.note_failure(FAILURE_IO);
                return Round::Failed;
            }
        }
        Round::Done
    }

    /// Writes `bytes` at `from` in block `id`; on failure notes why (a full
    /// file system, or anything else) so that appends are refused.
    pub(super) fn write_block_bytes(&self, id: u32, from: usize, bytes: &[u8]) -> bool {
        assert!(
            from + bytes.len() <= self.block_size(),
            "write past block {id}"
        );
        assert!(from >= BLOCK_HEADER_BYTES || from == 0);
        let (file, offset) = self.locate(id);
        match disk::write_all_at(file, bytes, offset + from as u64) {
            Ok(()) => true,
            Err(error) => {
                let full = error.raw_os_error() == Some(libc::ENOSPC)
                    || error.kind() == std::io::ErrorKind::StorageFull;
                self.note_failure(if full { FAILURE_FULL } else { FAILURE_IO });
                tracing::error!(block = id, %error, "write to storage failed");
                false
            }
        }
    }

    pub(super) fn sync_all(&self) -> bool {
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        self.files.iter().all(|file| match file.sync() {
            Ok(()) => true,
            Err(error) => {
                let full = error.raw_os_error() == Some(libc::ENOSPC);
                self.note_failure(if full { FAILURE_FULL } else { FAILURE_IO });
                tracing::error!(%error, "storage sync failed");
                false
            }
        })
    }

    pub(super) fn note_failure(&self, why: u8) {
        if self.failure.swap(why, Ordering::Relaxed) == FAILURE_NONE {
            tracing::error!(
                "storage write failed: retrying until the device takes writes again; new writes are refused meanwhile"
            );
        }
    }

    /// Stops the flusher after it has written and synced everything.
    pub fn shutdown(&self) {
        let mut queue = self.queue.lock();
        queue.shutdown = true;
        self.queue_signal.notify_all();
    }
}
