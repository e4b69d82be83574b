//! The cold start: every used block is read and its entries applied in
//! write order, so the index holds the newest version of every record.

use super::super::blob::RecordBlob;
use crate::device::compress;
use crate::device::format::{self, EntryIter, EntryRef};
use crate::device::{Device, Method};
use crate::index::{Data, Extent, IndexTable, RecordMeta, SlotAddresses};
use crate::namespace::{Namespace, SETS_MAX};
use bolide_types::now_citrusleaf_seconds;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Threads rebuilding the index at a cold start (one per core, at most).
const COLD_START_THREADS_MAX: usize = 8;
/// Blocks whose entries are counted to size the index before a cold start.
const PRESIZE_SAMPLE_BLOCKS: usize = 4;
/// How many records ahead a cold start prefetches index slots.
const PREFETCH_AHEAD: usize = 4;
/// Bytes of blocks read and decoded per step of a cold start.
const COLD_START_BATCH_BYTES: usize = 32 << 20;

/// A block read at a cold start: its id and its intact entries (None for
/// a block skipped whole).
type DecodedBlock<'b> = (u32, Option<Vec<EntryRef<'b>>>);

/// What a cold start found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColdStart {
    pub blocks: u64,
    pub records: u64,
    pub corrupt_entries: u64,
    pub bad_blocks: u64,
    pub millis: u64,
}

/// One loading thread's counts during a cold start.
struct Tally {
    objects: i64,
    data_bytes: i64,
    /// Net live bytes per block.
    live: Vec<i64>,
    /// (objects, bytes) per set id.
    sets: Vec<(i64, i64)>,
    last_set: Option<(Vec<u8>, u16)>,
    /// Where compressed records are decompressed (data in memory).
    plain: Vec<u8>,
    /// Records whose compressed bytes did not decompress.
    undecodable: u64,
}

impl Tally {
    fn new(blocks: usize) -> Tally {
        Tally {
            objects: 0,
            data_bytes: 0,
            live: vec![0; blocks],
            sets: vec![(0, 0); SETS_MAX + 1],
            last_set: None,
            plain: Vec::new(),
            undecodable: 0,
        }
    }

    /// A record version came, `data_len` bytes as [`Data::len`] counts them.
    fn came(&mut self, block: u32, entry_bytes: usize, set_id: u16, data_len: usize) {
        self.objects += 1;
        self.data_bytes += data_len as i64;
        if let Some(live) = self.live.get_mut(block as usize) {
            *live += entry_bytes as i64;
        }
        if let Some(set) = self
            .sets
            .get_mut(usize::from(set_id))
            .filter(|_| set_id != 0)
        {
            set.0 += 1;
            set.1 += data_len as i64;
        }
    }

    fn gone(&mut self, namespace: &Namespace, meta: &RecordMeta, data: &Data, block: u32) {
        let record_len = data.len();
        self.objects -= 1;
        self.data_bytes -= record_len as i64;
        if let Some(live) = self.live.get_mut(block as usize) {
            *live -= namespace.entry_bytes(meta.set_id, data) as i64;
        }
        if let Some(set) = self
            .sets
            .get_mut(usize::from(meta.set_id))
            .filter(|_| meta.set_id != 0)
        {
            set.0 -= 1;
            set.1 -= record_len as i64;
        }
    }
}

impl Namespace {
    pub(super) fn cold_start(&self, used: &[u32]) -> Result<ColdStart, String> {
        let Some(device) = self.device.clone() else {
            return Ok(ColdStart::default());
        };
        let started = Instant::now();
        let table = device.read_truncate_table();
        self.truncate_in_memory(None, table.namespace_lut_ms);
        for (set, lut) in &table.sets {
            if self.set_id(set.as_bytes()).is_ok() {
                self.truncate_in_memory(Some(set.as_bytes()), *lut);
            }
        }
        let now = now_citrusleaf_seconds();
        let oldest_seq = used.first().map_or(0, |&id| device.block_seq(id));
        let mut report = ColdStart {
            bad_blocks: device.stats.cold_start_bad_blocks.load(Relaxed),
            ..ColdStart::default()
        };
        self.presize(&device, used);
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, COLD_START_THREADS_MAX);
        let mut tallies: Vec<Tally> = (0..threads)
            .map(|_| Tally::new(device.block_count() as usize))
            .collect();
        let batch_blocks = (COLD_START_BATCH_BYTES / device.block_size()).max(threads);
        let mut buffers: Vec<Vec<u8>> = (0..batch_blocks).map(|_| Vec::new()).collect();
        let mut last_log = Instant::now();
        let batches: Vec<&[u32]> = used.chunks(batch_blocks).collect();
        for (number, &batch) in batches.iter().enumerate() {
            if last_log.elapsed() >= PROGRESS_EVERY {
                last_log = Instant::now();
                tracing::info!(
                    namespace = self.name(),
                    blocks = number * batch_blocks,
                    of = used.len(),
                    records = tallies.iter().map(|t| t.objects).sum::<i64>(),
                    "cold start: reading storage"
                );
            }
            let buffers = buffers.get_mut(..batch.len()).unwrap_or_default();
            let blocks = self.read_batch(&device, batch, buffers, threads, &mut report)?;
            // The disk reads the next batch while this one is applied (for
            // blocks already in the page cache the hint costs next to nothing).
            for &block in batches.get(number + 1).copied().unwrap_or_default() {
                device.advise_will_need(block);
            }
            self.apply_batch(&blocks, &mut tallies, now, oldest_seq)?;
        }
        report.corrupt_entries += self.merge_tallies(&device, tallies);
        device.finish_cold_start(oldest_seq)?;
        report.records = self.stats.objects.load(Relaxed).max(0) as u64;
        report.millis = started.elapsed().as_millis() as u64;
        let stats = &device.stats;
        stats.cold_start_ms.store(report.millis, Relaxed);
        stats.cold_start_records.store(report.records, Relaxed);
        stats.cold_start_blocks.store(report.blocks, Relaxed);
        stats
            .cold_start_corrupt_entries
            .store(report.corrupt_entries, Relaxed);
        stats
            .cold_start_bad_blocks
            .store(report.bad_blocks, Relaxed);
        tracing::info!(
            namespace = self.name(),
            records = report.records,
            blocks = report.blocks,
            damaged_entries = report.corrupt_entries,
            bad_blocks = report.bad_blocks,
            millis = report.millis,
            "cold start done"
        );
        Ok(report)
    }

    /// Sizes every partition's table for the records a cold start will
    /// bring, estimated from the fullest of the newest few blocks (the
    /// newest alone may be a partly filled one) times the blocks in use:
    /// growing 1.15x at a time would move each record about seven times.
    /// Dead entries make this an overestimate; the tables shrink again at
    /// the end.
    fn presize(&self, device: &Device, used: &[u32]) {
        let mut buf = Vec::new();
        let per_block = used
            .iter()
            .rev()
            .take(PRESIZE_SAMPLE_BLOCKS)
            .filter_map(|&block| {
                device.read_block(block, &mut buf).ok()?;
                Some(EntryIter::new(&buf, device.block_seq(block)).count())
            })
            .max()
            .unwrap_or(0);
        let estimate = per_block.saturating_mul(used.len());
        if estimate == 0 {
            return;
        }
        tracing::info!(
            namespace = self.name(),
            records = estimate,
            "cold start: index sized for the records the blocks can hold"
        );
        // Partitions get the mean plus room for the spread of a binomial
        // draw (4 standard deviations), so almost none has to grow (rehash)
        // near the end of the load.
        let mean = estimate / self.partitions.len().max(1);
        let per_partition = mean + 4 * mean.isqrt() + 1;
        // Bounded: never more than the blocks could hold at 64 bytes each.
        let bound =
            used.len().saturating_mul(device.block_size() / 64) / self.partitions.len().max(1);
        for partition in self.partitions.iter() {
            partition
                .table
                .write()
                .reserve(per_partition.min(bound + 1));
        }
    }

    /// Reads and decodes one batch of blocks, the blocks split between
    /// `threads` threads: each block is read and checksummed once. A block
    /// that cannot be read or has changed since the scan of headers comes
    /// back as `None`.
    fn read_batch<'b>(
        &self,
        device: &Device,
        batch: &[u32],
        buffers: &'b mut [Vec<u8>],
        threads: usize,
        report: &mut ColdStart,
    ) -> Result<Vec<DecodedBlock<'b>>, String> {
        let share = batch.len().div_ceil(threads).max(1);
        type Decoded<'b> = (Option<Vec<EntryRef<'b>>>, u64);
        let parts: Vec<Vec<Decoded<'b>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = batch
                .chunks(share)
                .zip(buffers.chunks_mut(share))
                .map(|(ids, buffers)| {
                    scope.spawn(move || {
                        ids.iter()
                            .zip(buffers)
                            .map(|(&block, buf)| self.read_entries(device, block, buf))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .filter_map(|worker| worker.join().ok())
                .collect()
        });
        if parts.len() != batch.len().div_ceil(share) {
            return Err("a cold start thread failed".into());
        }
        let mut blocks = Vec::with_capacity(batch.len());
        for (&block, (entries, corrupt)) in batch.iter().zip(parts.into_iter().flatten()) {
            match entries {
                Some(_) => report.blocks += 1,
                None => report.bad_blocks += 1,
            }
            report.corrupt_entries += corrupt;
            blocks.push((block, entries));
        }
        Ok(blocks)
    }

    /// Reads one block and decodes its intact entries; returns them (None
    /// for a block skipped whole) and the count of damaged entries.
    fn read_entries<'b>(
        &self,
        device: &Device,
        block: u32,
        buf: &'b mut Vec<u8>,
    ) -> (Option<Vec<EntryRef<'b>>>, u64) {
        let seq = device.block_seq(block);
        if let Err(error) = device.read_block(block, buf) {
            tracing::warn!(namespace = self.name(), block, %error, "cold start: block unreadable, skipped");
            return (None, 0);
        }
        let buf: &'b Vec<u8> = buf;
        if format::read_block_header(buf) != Some(seq) {
            tracing::warn!(
                namespace = self.name(),
                block,
                "cold start: block header changed, skipped"
            );
            return (None, 0);
        }
        let mut iter = EntryIter::new(buf, seq);
        let entries: Vec<EntryRef<'b>> = iter.by_ref().collect();
        if iter.corrupt > 0 {
            tracing::warn!(
                namespace = self.name(),
                block,
                damaged = iter.corrupt,
                "cold start: damaged entries skipped"
            );
        }
        (Some(entries), iter.corrupt)
    }

    /// Applies a decoded batch in write order, the partitions split between
    /// the threads (partition `p` goes to tally `p % threads`), so each
    /// record's versions are applied by one thread in the order written.
    fn apply_batch(
        &self,
        blocks: &[DecodedBlock<'_>],
        tallies: &mut [Tally],
        now: u32,
        oldest_seq: u64,
    ) -> Result<(), String> {
        let shares = tallies.len();
        let applied = std::thread::scope(|scope| {
            let workers: Vec<_> = tallies
                .iter_mut()
                .enumerate()
                .map(|(share, tally)| {
                    scope.spawn(move || {
                        self.apply_share(blocks, share, shares, tally, now, oldest_seq);
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().is_ok())
                .filter(|&ok| ok)
                .count()
        });
        if applied != shares {
            return Err("a cold start thread failed".into());
        }
        Ok(())
    }

    /// One thread's part of [`Namespace::apply_batch`]: its entries in
    /// block order (so the block buffers are read sequentially). Inserts
    /// miss the cache on every slot array, so while one record goes in, the
    /// partition and index slots of the record [`PREFETCH_AHEAD`] further
    /// on are prefetched (from the slot addresses seen when that partition
    /// was last locked), overlapping the misses of several records.
    fn apply_share(
        &self,
        blocks: &[DecodedBlock<'_>],
        share: usize,
        shares: usize,
        tally: &mut Tally,
        now: u32,
        oldest_seq: u64,
    ) {
        let mine: Vec<(u32, &EntryRef<'_>)> = blocks
            .iter()
            .flat_map(|(block, entries)| entries.iter().flatten().map(move |e| (*block, e)))
            .filter(|(_, entry)| entry.head.digest.partition_id().index() % shares == share)
            .collect();
        let mut addresses: Vec<Option<SlotAddresses>> = vec![None; self.partitions.len()];
        for (i, &(block, entry)) in mine.iter().enumerate() {
            if let Some((_, ahead)) = mine.get(i + PREFETCH_AHEAD) {
                let digest = &ahead.head.digest;
                if let Some(Some(slots)) = addresses.get(digest.partition_id().index()) {
                    slots.prefetch(digest);
                }
            }
            let p = entry.head.digest.partition_id().index();
            let Some(partition) = self.partitions.get(p) else {
                continue;
            };
            let mut table = partition.table.write();
            self.load_entry(&mut table, block, entry, now, oldest_seq, tally);
            if let Some(slots) = addresses.get_mut(p) {
                *slots = Some(table.slot_addresses());
            }
        }
    }

    /// Applies one entry read back from storage. Entries arrive in write
    /// order, so each replaces what came before for its digest. Counts go
    /// to the thread's `tally`, merged once at the end (shared counters
    /// would bounce between the loading threads on every record).
    fn load_entry(
        &self,
        table: &mut IndexTable,
        block: u32,
        entry: &EntryRef<'_>,
        now: u32,
        oldest_seq: u64,
        tally: &mut Tally,
    ) {
        let digest = entry.head.digest;
        match entry.head.kind {
            format::KIND_RECORD => {
                let set_id = match &tally.last_set {
                    Some((name, id)) if name.as_slice() == entry.set_name => *id,
                    _ => match self.set_id(entry.set_name) {
                        Ok(id) => {
                            tally.last_set = Some((entry.set_name.to_vec(), id));
                            id
                        }
                        Err(_) => {
                            tracing::warn!(
                                namespace = self.name(),
                                "cold start: record with a bad set name skipped"
                            );
                            return;
                        }
                    },
                };
                let meta = RecordMeta {
                    generation: entry.head.generation,
                    void_time: entry.head.void_time,
                    last_update_ms: entry.head.last_update_ms,
                    set_id,
                };
                if self.is_doomed(&meta, now) {
                    // Expired or truncated: gone, and so is any older version.
                    if let Some((old, data, location)) = table.remove_at(&digest) {
                        tally.gone(self, &old, &data, location);
                    }
                    return;
                }
                let data = if self.data_on_device() {
                    Data::OnDevice(Extent {
                        offset: entry.offset as u32,
                        bytes: entry.bytes as u32,
                    })
                } else if entry.head.compression == Method::None {
                    Data::Persisted(RecordBlob::new(entry.payload), entry.bytes as u32)
                } else {
                    let plain = &mut tally.plain;
                    let len = entry.head.plain_len as usize;
                    if compress::decompress(entry.head.compression, entry.payload, len, plain)
                        .is_err()
                    {
                        // Its checksum held, so this is not a torn write.
                        // Older versions must not come back in its place.
                        tracing::error!(
                            namespace = self.name(),
                            block,
                            "cold start: a compressed record does not decompress; removed"
                        );
                        tally.undecodable += 1;
                        if let Some((old, data, location)) = table.remove_at(&digest) {
                            tally.gone(self, &old, &data, location);
                        }
                        return;
                    }
                    Data::Persisted(RecordBlob::new(plain), entry.bytes as u32)
                };
                let data_len = data.len();
                if let Some((old, data, location)) = table.upsert_at(&digest, meta, data, block) {
                    tally.gone(self, &old, &data, location);
                }
                tally.came(block, entry.bytes, set_id, data_len);
            }
            format::KIND_TOMBSTONE => {
                if let Some((old, data, location)) = table.remove_at(&digest) {
                    tally.gone(self, &old, &data, location);
                }
                // Kept (counted live) while older versions may remain.
                if entry.deleted_seq() >= oldest_seq {
                    tally.live[block as usize] += entry.bytes as i64;
                }
            }
            _ => {}
        }
    }

    /// Adds the tallies of the loading threads to the live statistics.
    /// Returns the records that did not decompress.
    fn merge_tallies(&self, device: &Device, tallies: Vec<Tally>) -> u64 {
        let mut live = vec![0i64; device.block_count() as usize];
        let mut sets: HashMap<u16, (i64, i64)> = HashMap::new();
        let mut undecodable = 0;
        for tally in tallies {
            undecodable += tally.undecodable;
            for (sum, delta) in live.iter_mut().zip(&tally.live) {
                *sum += delta;
            }
            self.stats.objects.fetch_add(tally.objects, Relaxed);
            self.stats
                .data_used_bytes
                .fetch_add(tally.data_bytes, Relaxed);
            for (set, (objects, bytes)) in tally.sets.into_iter().enumerate() {
                if objects != 0 || bytes != 0 {
                    let sum = sets.entry(set as u16).or_default();
                    sum.0 += objects;
                    sum.1 += bytes;
                }
            }
        }
        for (block, bytes) in live.into_iter().enumerate() {
            // Every version that left counted its bytes when it came.
            assert!(
                bytes >= 0,
                "block {block}: {bytes} live bytes after the cold start"
            );
            if bytes > 0 {
                device.add_live(block as u32, bytes as usize);
            }
        }
        for (set, (objects, bytes)) in sets {
            self.account_set_totals(set, objects, bytes);
        }
        // Tables grew 1.15x at a time while loading; the record count is
        // final now, so each shrinks to just under its growth mark.
        let index: usize = self
            .partitions
            .iter()
            .map(|p| {
                let mut table = p.table.write();
                table.compact();
                table.index_bytes()
            })
            .sum();
        self.stats.index_used_bytes.fetch_add(index as i64, Relaxed);
        undecodable
    }
}
