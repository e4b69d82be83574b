//! The defragmenter: moves the live entries of mostly empty blocks to the
//! open block and frees the blocks once the copies are durable.

use crate::device::format::{self, EntryIter, EntryRef};
use crate::device::{Device, Purpose};
use crate::index::{Extent, Stored};
use crate::namespace::{record_head, Namespace, PartitionWriter};
use bolide_types::Digest;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the defragmenter looks for work when it found none. Looking
/// is a pass over one atomic per block (16K blocks for 16 GiB at 1 MiB).
const DEFRAG_IDLE: Duration = Duration::from_millis(10);
/// Blocks defragmented per pass before the candidates are chosen afresh.
const DEFRAG_BATCH: usize = 64;
/// While space is plentiful, defrag moves at most this many times the
/// rate at which blocks are being written. In a steady state defrag runs at
/// about the write rate (each block it empties makes room for one), so this
/// leaves room to catch up while keeping bursts (many blocks crossing the
/// mark together, as the blocks of an initial load do) from taking the
/// CPU from client work all at once.
const DEFRAG_RATE_NUMERATOR: u64 = 5;
const DEFRAG_RATE_DENOMINATOR: u64 = 4;
/// Bytes of blocks per second defrag may always move, however few blocks
/// are being written (an idle node still cleans up, at a modest pace).
const DEFRAG_RATE_FLOOR_BYTES: u64 = 8 << 20;
/// Blocks of credit defrag may save up while it has nothing to do.
const DEFRAG_BURST_BLOCKS: f64 = 4.0;
/// Defrag is paced only with room to spare: at least this share of the
/// blocks free (or twice `min-avail-pct` plus 10, if that is more), at
/// least [`DEFRAG_PACED_MIN_FREE_BYTES`] free, and enough free blocks for
/// [`DEFRAG_HEADROOM_SECONDS`] of writes at the current rate. Otherwise
/// space is tight: defrag runs unpaced and asks for its copies to be made
/// durable at once, so emptied blocks come back soonest. (Pacing holds
/// work back; near the mark, or on a small device, a surge of writes could
/// reach stop-writes before paced defrag caught up.)
const DEFRAG_PACED_MIN_AVAIL_PCT: u32 = 50;
const DEFRAG_PACED_MIN_FREE_BYTES: u64 = 256 << 20;
const DEFRAG_HEADROOM_SECONDS: f64 = 10.0;
/// How often the pacer measures the block write rate.
const DEFRAG_RATE_WINDOW: Duration = Duration::from_millis(250);

impl Namespace {
    pub(super) fn run_defrag(&self, stop: &AtomicBool) {
        let Some(device) = self.device.clone() else {
            return;
        };
        let pause = Duration::from_micros(device.config.defrag_sleep_us);
        let mut buf = Vec::new();
        let mut pacer = DefragPacer::new(&device);
        while !stop.load(Relaxed) {
            let candidates = device.defrag_candidates(DEFRAG_BATCH);
            if candidates.is_empty() {
                if device.has_pending_free() && pacer.space_is_tight(&device) {
                    device.flush_soon();
                }
                pacer.idle(&device);
                std::thread::sleep(DEFRAG_IDLE);
                continue;
            }
            for block in candidates {
                if stop.load(Relaxed) || !pacer.wait_for_turn(&device, stop) {
                    return;
                }
                match self.defrag_one(&device, block, &mut buf) {
                    Some(true) => {}
                    Some(false) => {
                        std::thread::sleep(DEFRAG_IDLE);
                        break;
                    }
                    None => continue,
                }
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            // With space tight, get the copies durable now so the emptied
            // blocks come back soon; otherwise the flusher's timer does it.
            if pacer.space_is_tight(&device) {
                device.flush_soon();
            }
        }
    }

    /// Defragments one block if it can claim it: `None` if it could not
    /// (no longer a candidate), `Some(false)` if the copies found no room
    /// (the block stays used, nothing lost), `Some(true)` once its live
    /// entries are copied (it is freed when the copies are durable).
    fn defrag_one(&self, device: &Arc<Device>, block: u32, buf: &mut Vec<u8>) -> Option<bool> {
        if !device.claim_for_defrag(block) {
            return None;
        }
        if self.defrag_block(device, block, buf) {
            device.stats.defrag_blocks.fetch_add(1, Relaxed);
            device.free_after_durable(block);
            Some(true)
        } else {
            device.unclaim(block);
            Some(false)
        }
    }

    /// One pass of the defragmenter over every candidate block, without
    /// pacing (tests drive the engine step by step). Returns the blocks
    /// emptied.
    #[cfg(test)]
    pub(crate) fn defrag_now(&self) -> usize {
        let Some(device) = self.device.clone() else {
            return 0;
        };
        let mut buf = Vec::new();
        device
            .defrag_candidates(usize::MAX)
            .into_iter()
            .filter(|&block| self.defrag_one(&device, block, &mut buf) == Some(true))
            .count()
    }

    /// Moves the live entries of `block` to the open block. Returns false
    /// if it could not (no space for the copies); nothing is lost then,
    /// and it may run again over the same block.
    fn defrag_block(&self, device: &Arc<Device>, block: u32, buf: &mut Vec<u8>) -> bool {
        if device.live_bytes_of(block) == 0 {
            return true;
        }
        let seq = device.block_seq(block);
        let readable = device.read_block(block, buf).is_ok();
        device.stats.defrag_reads.fetch_add(1, Relaxed);
        if readable && format::read_block_header(buf) == Some(seq) {
            let oldest = device.oldest_used_seq();
            for entry in EntryIter::new(buf, seq) {
                let mut writer = self.write(&entry.head.digest);
                let moved = match entry.head.kind {
                    format::KIND_RECORD => relocate_if_live(&mut writer, device, block, &entry),
                    format::KIND_TOMBSTONE => keep_tombstone(&mut writer, device, &entry, oldest),
                    _ => Ok(()),
                };
                if moved.is_err() {
                    return false;
                }
            }
            // Only once every copy is made do the tombstones leave the
            // block's count (those it counted): a pass that stopped for
            // want of room runs again and must not release them twice.
            for entry in EntryIter::new(buf, seq) {
                if entry.head.kind == format::KIND_TOMBSTONE
                    && device.tombstone_counted(block, entry.deleted_seq())
                {
                    device.release(block, entry.bytes);
                }
            }
        }
        if device.live_bytes_of(block) == 0 {
            return true;
        }
        // Some live record's entry could not be read back: find the records
        // the index places in this block and copy them from memory (or
        // entry by entry from the device).
        tracing::warn!(
            namespace = self.name(),
            block,
            "defrag: damaged block, moving its records one by one"
        );
        for index in 0..self.partitions.len() {
            let Some(partition) = self.partitions.get(index) else {
                continue;
            };
            let mut writer = PartitionWriter {
                namespace: self,
                table: partition.table.write(),
            };
            let mut digests = Vec::new();
            writer.table.for_each(|e| digests.push(Digest(*e.digest)));
            for digest in digests {
                if writer.table.location(&digest) != Some(block) {
                    continue;
                }
                match relocate(&mut writer, device, &digest, None) {
                    Ok(()) => {}
                    Err(Unmoved::NoSpace) => return false,
                    Err(Unmoved::Unreadable) => {
                        // Its only copy is damaged: the record is lost. A
                        // tombstone keeps older versions from returning.
                        tracing::error!(
                            namespace = self.name(),
                            block,
                            "defrag: a record's entry is damaged; the record is removed"
                        );
                        writer.remove_durably(&digest);
                    }
                }
            }
        }
        // Whatever is left are tombstones that could not be read: harmless.
        true
    }
}

/// Paces defrag to the rate blocks are being written (a token bucket
/// refilled at [`DEFRAG_RATE_NUMERATOR`]/[`DEFRAG_RATE_DENOMINATOR`] times
/// that rate, at least [`DEFRAG_RATE_FLOOR_BYTES`] a second), unless space
/// is tight.
pub(super) struct DefragPacer {
    tokens: f64,
    last: Instant,
    /// Blocks written as of the start of the current measuring window.
    window_start: (Instant, u64),
    /// Blocks written per second, smoothed.
    pub(super) write_rate: f64,
    floor: f64,
}

impl DefragPacer {
    pub(super) fn new(device: &Device) -> DefragPacer {
        let now = Instant::now();
        DefragPacer {
            tokens: DEFRAG_BURST_BLOCKS,
            last: now,
            window_start: (now, device.stats.blocks_written.load(Relaxed)),
            write_rate: 0.0,
            floor: (DEFRAG_RATE_FLOOR_BYTES / device.block_size().max(1) as u64).max(1) as f64,
        }
    }

    fn allowed_rate(&self) -> f64 {
        (self.write_rate * DEFRAG_RATE_NUMERATOR as f64 / DEFRAG_RATE_DENOMINATOR as f64)
            .max(self.floor)
    }

    /// Whether space is tight (see [`DEFRAG_PACED_MIN_AVAIL_PCT`]).
    pub(super) fn space_is_tight(&self, device: &Device) -> bool {
        let free = u64::from(device.free_blocks());
        device.available_pct()
            < DEFRAG_PACED_MIN_AVAIL_PCT.max(device.config.min_avail_pct * 2 + 10)
            || free * device.block_size() as u64 <= DEFRAG_PACED_MIN_FREE_BYTES
            || (free as f64) < self.write_rate * DEFRAG_HEADROOM_SECONDS
    }

    /// Adds the credit earned since the last call and updates the write
    /// rate every [`DEFRAG_RATE_WINDOW`].
    fn refill(&mut self, device: &Device) {
        let now = Instant::now();
        let (since, written_then) = self.window_start;
        let window = now.duration_since(since).as_secs_f64();
        if window >= DEFRAG_RATE_WINDOW.as_secs_f64() {
            let written = device.stats.blocks_written.load(Relaxed);
            let rate = written.saturating_sub(written_then) as f64 / window;
            self.write_rate = (self.write_rate + rate) / 2.0;
            self.window_start = (now, written);
        }
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.allowed_rate()).min(DEFRAG_BURST_BLOCKS);
    }

    /// Nothing to defragment: credit still accrues, up to the burst.
    fn idle(&mut self, device: &Device) {
        self.refill(device);
    }

    /// Waits until one more block may be defragmented (at once when space
    /// is tight). False if asked to stop meanwhile.
    pub(super) fn wait_for_turn(&mut self, device: &Device, stop: &AtomicBool) -> bool {
        loop {
            if stop.load(Relaxed) {
                return false;
            }
            self.refill(device);
            if self.tokens >= 1.0 || self.space_is_tight(device) {
                self.tokens = (self.tokens - 1.0).max(0.0);
                return true;
            }
            let short = (1.0 - self.tokens) / self.allowed_rate();
            std::thread::sleep(Duration::from_secs_f64(short.clamp(0.001, 0.05)));
        }
    }
}

/// Why defrag could not move a record.
enum Unmoved {
    /// No room for the copy; nothing changed.
    NoSpace,
    /// Its data is on the device only and cannot be read back.
    Unreadable,
}

/// Copies a record's current version out of `block` if `entry` is it.
fn relocate_if_live(
    writer: &mut PartitionWriter<'_>,
    device: &Arc<Device>,
    block: u32,
    entry: &EntryRef<'_>,
) -> Result<(), Unmoved> {
    let digest = entry.head.digest;
    let Some(current) = writer.table.get(&digest) else {
        return Ok(());
    };
    let is_this_version = match current.record {
        Stored::OnDevice { block: at, extent } => {
            at == block && extent.offset as usize == entry.offset
        }
        Stored::InMemory(_) => {
            writer.table.location(&digest) == Some(block)
                && current.meta.generation == entry.head.generation
                && current.meta.last_update_ms == entry.head.last_update_ms
                && current.meta.void_time == entry.head.void_time
        }
    };
    if !is_this_version {
        return Ok(());
    }
    relocate(writer, device, &digest, Some(entry))
}

/// Appends the current version of `digest` anew and points the index at
/// it. With `read` (the entry as the defragmenter read it) the entry is
/// copied in its stored form, so a record keeps the compression it was
/// written with; else its bytes come from memory or the device and are
/// stored as the namespace compresses now.
fn relocate(
    writer: &mut PartitionWriter<'_>,
    device: &Arc<Device>,
    digest: &Digest,
    read: Option<&EntryRef<'_>>,
) -> Result<(), Unmoved> {
    let Some(current) = writer.table.get(digest) else {
        return Ok(());
    };
    let meta = current.meta;
    let old_block = writer.table.location(digest).unwrap_or(0);
    let old_bytes = match current.record {
        Stored::OnDevice { extent, .. } => extent.bytes,
        Stored::InMemory(_) => writer.table.stored_bytes(digest).unwrap_or(0),
    };
    let set_name = writer.namespace.set_name(meta.set_id).unwrap_or_default();
    let head = record_head(digest, &meta);
    let mut buf = Vec::new();
    let placed = match (read, current.record) {
        (Some(entry), _) => device.append(
            crate::device::format::EntryHead {
                compression: entry.head.compression,
                plain_len: entry.head.plain_len,
                ..head
            },
            set_name.as_bytes(),
            entry.payload,
            Purpose::Defrag,
        ),
        (None, Stored::InMemory(bytes)) => {
            device.append_record(head, set_name.as_bytes(), bytes, Purpose::Defrag)
        }
        (None, Stored::OnDevice { .. }) => {
            let record = writer
                .namespace
                .record_bytes(&current, &mut buf)
                .map_err(|_| Unmoved::Unreadable)?;
            device.append_record(head, set_name.as_bytes(), record, Purpose::Defrag)
        }
    }
    .map_err(|_| Unmoved::NoSpace)?;
    let extent = Extent {
        offset: placed.offset,
        bytes: placed.bytes,
    };
    writer.table.set_location(digest, placed.block, extent);
    device.release(old_block, old_bytes as usize);
    device.stats.defrag_writes.fetch_add(1, Relaxed);
    Ok(())
}

/// Copies a tombstone forward while an older version of its record may
/// still be on the device and the record was not written again.
fn keep_tombstone(
    writer: &mut PartitionWriter<'_>,
    device: &Arc<Device>,
    entry: &EntryRef<'_>,
    oldest: u64,
) -> Result<(), Unmoved> {
    let recreated = writer.table.get(&entry.head.digest).is_some();
    if recreated || entry.deleted_seq() < oldest {
        device.stats.tombstones_dropped.fetch_add(1, Relaxed);
        return Ok(());
    }
    device
        .append(entry.head, entry.set_name, entry.payload, Purpose::Defrag)
        .map(|_| {
            device.stats.defrag_writes.fetch_add(1, Relaxed);
        })
        .map_err(|_| Unmoved::NoSpace)
}
