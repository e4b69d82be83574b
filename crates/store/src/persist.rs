//! A persistent namespace's life: the cold start that rebuilds the index
//! from storage, the persisted truncation table, and the defragmenter.

use crate::blob::RecordBlob;
use crate::device::format::{self, EntryIter, EntryRef};
use crate::device::{Device, Purpose, TruncateTable};
use crate::index::{Data, Extent, IndexTable, RecordMeta, SlotAddresses, Stored};
use crate::namespace::{record_head, Namespace, NamespaceConfig, PartitionWriter, SETS_MAX};
use bolide_types::{now_citrusleaf_seconds, Digest};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
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
}

impl Tally {
    fn new(blocks: usize) -> Tally {
        Tally {
            objects: 0,
            data_bytes: 0,
            live: vec![0; blocks],
            sets: vec![(0, 0); SETS_MAX + 1],
            last_set: None,
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

/// Background threads of a persistent namespace.
pub struct StorageThreads {
    device: Arc<Device>,
    stop: Arc<AtomicBool>,
    flusher: Option<JoinHandle<()>>,
    defrag: Option<JoinHandle<()>>,
}

impl StorageThreads {
    /// Stops the defragmenter, then lets the flusher write and sync
    /// everything and waits for it.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(defrag) = self.defrag.take() {
            let _ = defrag.join();
        }
        self.device.shutdown();
        if let Some(flusher) = self.flusher.take() {
            let _ = flusher.join();
        }
    }
}

impl Drop for StorageThreads {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl Namespace {
    /// Opens a namespace: for a persistent one, opens its files and
    /// rebuilds the index from them.
    pub fn open(config: NamespaceConfig) -> Result<Namespace, String> {
        let Some(device_config) = config.device.clone() else {
            return Ok(Namespace::new(config));
        };
        let name = config.name.clone();
        let (device, used) = Device::open(device_config, &name)?;
        let namespace = Namespace::with_device(config, Some(Arc::new(device)));
        namespace.cold_start(&used)?;
        Ok(namespace)
    }

    fn cold_start(&self, used: &[u32]) -> Result<ColdStart, String> {
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
        self.merge_tallies(&device, tallies);
        device.finish_cold_start()?;
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
                } else {
                    Data::InMemory(RecordBlob::new(entry.payload))
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
    fn merge_tallies(&self, device: &Device, tallies: Vec<Tally>) {
        let mut live = vec![0i64; device.block_count() as usize];
        let mut sets: HashMap<u16, (i64, i64)> = HashMap::new();
        for tally in tallies {
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
    }

    /// Writes the truncation points to storage (no-op in memory).
    pub(crate) fn persist_truncation(&self) -> Result<(), String> {
        let Some(device) = &self.device else {
            return Ok(());
        };
        // The table is read under the device's table lock, so of two
        // concurrent truncations the later write holds both.
        device
            .write_truncate_table_with(|| TruncateTable {
                namespace_lut_ms: self.truncate_lut_ms(),
                sets: self
                    .sets()
                    .map(|(name, stats)| (name.to_owned(), stats.truncate_lut_ms.load(Relaxed)))
                    .filter(|&(_, lut)| lut > 0)
                    .collect(),
            })
            .map_err(|error| {
                tracing::error!(namespace = self.name(), %error, "cannot persist truncation");
                format!("cannot persist truncation: {error}")
            })
    }

    /// Starts the flusher and the defragmenter of a persistent namespace.
    pub fn start_storage(self: &Arc<Self>) -> Option<StorageThreads> {
        self.start_storage_with(Arc::new(|| {}))
    }

    /// As [`Namespace::start_storage`]; `background` runs first on the
    /// defragmenter's thread.
    pub fn start_storage_with(
        self: &Arc<Self>,
        background: Arc<dyn Fn() + Send + Sync>,
    ) -> Option<StorageThreads> {
        let device = self.device.clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let device = Arc::clone(&device);
            std::thread::Builder::new()
                .name(format!("flush-{}", self.name()))
                .spawn(move || device.run_flusher())
                .ok()
        };
        let defrag = {
            let namespace = Arc::clone(self);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("defrag-{}", self.name()))
                .spawn(move || {
                    background();
                    namespace.run_defrag(&stop)
                })
                .ok()
        };
        Some(StorageThreads {
            device,
            stop,
            flusher,
            defrag,
        })
    }

    fn run_defrag(&self, stop: &AtomicBool) {
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
                if !device.claim_for_defrag(block) {
                    continue;
                }
                if self.defrag_block(&device, block, &mut buf) {
                    device.stats.defrag_blocks.fetch_add(1, Relaxed);
                    device.free_after_durable(block);
                } else {
                    device.unclaim(block);
                    std::thread::sleep(DEFRAG_IDLE);
                    break;
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

    /// Moves the live entries of `block` to the open block. Returns false
    /// if it could not (no space for the copies); nothing is lost then.
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
                if entry.head.kind == format::KIND_TOMBSTONE {
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
struct DefragPacer {
    tokens: f64,
    last: Instant,
    /// Blocks written as of the start of the current measuring window.
    window_start: (Instant, u64),
    /// Blocks written per second, smoothed.
    write_rate: f64,
    floor: f64,
}

impl DefragPacer {
    fn new(device: &Device) -> DefragPacer {
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
    fn space_is_tight(&self, device: &Device) -> bool {
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
    fn wait_for_turn(&mut self, device: &Device, stop: &AtomicBool) -> bool {
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
    relocate(writer, device, &digest, Some(entry.payload))
}

/// Appends the current version of `digest` anew and points the index at
/// it. Its bytes come from memory, else from `read` (the entry as the
/// defragmenter read it), else from the device.
fn relocate(
    writer: &mut PartitionWriter<'_>,
    device: &Arc<Device>,
    digest: &Digest,
    read: Option<&[u8]>,
) -> Result<(), Unmoved> {
    let Some(current) = writer.table.get(digest) else {
        return Ok(());
    };
    let meta = current.meta;
    let old_block = writer.table.location(digest).unwrap_or(0);
    let set_name = writer.namespace.set_name(meta.set_id).unwrap_or_default();
    let mut buf = Vec::new();
    let (record, old_bytes) = match (current.record, read) {
        (Stored::InMemory(bytes), _) => (
            bytes,
            format::record_entry_bytes(set_name.len(), bytes.len()),
        ),
        (Stored::OnDevice { extent, .. }, Some(bytes)) => (bytes, extent.bytes as usize),
        (Stored::OnDevice { extent, .. }, None) => (
            writer
                .namespace
                .record_bytes(&current, &mut buf)
                .map_err(|_| Unmoved::Unreadable)?,
            extent.bytes as usize,
        ),
    };
    let placed = device
        .append(
            record_head(digest, &meta),
            set_name.as_bytes(),
            record,
            Purpose::Defrag,
        )
        .map_err(|_| Unmoved::NoSpace)?;
    let extent = Extent {
        offset: placed.offset,
        bytes: placed.bytes,
    };
    writer.table.set_location(digest, placed.block, extent);
    device.release(old_block, old_bytes);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::format::FILE_HEADER_BYTES;
    use crate::device::DeviceConfig;
    use crate::namespace::tests::digest;
    use crate::record::{self, Bin};

    /// Both ways of keeping the data: on the device only, and in memory.
    const DATA_IN_MEMORY: [bool; 2] = [false, true];

    fn config(dir: &std::path::Path, data_in_memory: bool) -> NamespaceConfig {
        let mut config = NamespaceConfig::with_name("test");
        let mut device = DeviceConfig::new(vec![dir.join("test.dat")], 0);
        device.write_block_size = 64 * 1024;
        device.file_size = FILE_HEADER_BYTES + 64 * 64 * 1024;
        device.flush_max_ms = 10;
        device.data_in_memory = data_in_memory;
        config.device = Some(device);
        config.storage_engine = crate::StorageEngine::Device;
        config
    }

    fn record(value: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        let value = value.to_be_bytes();
        record::encode(
            &mut bytes,
            None,
            [Bin {
                name: b"v",
                particle_type: 4,
                value: &value,
            }]
            .into_iter(),
        );
        bytes
    }

    fn value_of(namespace: &Namespace, n: u32) -> Option<u32> {
        let table = namespace.read(&digest(n));
        let entry = table.get(&digest(n))?;
        let mut buf = Vec::new();
        let bytes = namespace.record_bytes(&entry, &mut buf).expect("readable");
        let view = crate::RecordView::parse(bytes)?;
        let bin = view.bin(b"v")?;
        Some(u32::from_be_bytes(bin.value.try_into().ok()?))
    }

    fn open(dir: &std::path::Path) -> (Arc<Namespace>, StorageThreads) {
        open_with(dir, false)
    }

    fn open_with(dir: &std::path::Path, data_in_memory: bool) -> (Arc<Namespace>, StorageThreads) {
        let namespace = Arc::new(Namespace::open(config(dir, data_in_memory)).expect("open"));
        assert_eq!(namespace.data_on_device(), !data_in_memory);
        let threads = namespace.start_storage().expect("persistent");
        (namespace, threads)
    }

    fn put(namespace: &Namespace, n: u32, value: u32, set_id: u16) {
        let meta = RecordMeta {
            generation: 1,
            set_id,
            last_update_ms: 1_000 + u64::from(value),
            ..RecordMeta::default()
        };
        namespace
            .write(&digest(n))
            .put(&digest(n), meta, &record(value))
            .expect("put");
    }

    #[test]
    fn a_restart_restores_the_newest_versions_deletes_and_truncations() {
        for in_memory in DATA_IN_MEMORY {
            restart_restores_newest_versions(in_memory);
        }
    }

    fn restart_restores_newest_versions(in_memory: bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (namespace, threads) = open_with(dir.path(), in_memory);
            let set = namespace.set_id(b"demo").expect("set");
            for n in 0..2_000 {
                put(&namespace, n, n, set);
            }
            for n in (0..2_000).step_by(3) {
                put(&namespace, n, n + 10_000, set);
            }
            for n in (0..2_000).step_by(5) {
                let (present, _) = namespace
                    .write(&digest(n))
                    .delete(&digest(n))
                    .expect("delete");
                assert!(present);
            }
            let gone = namespace.set_id(b"gone").expect("set");
            for n in 5_000..5_100 {
                put(&namespace, n, n, gone);
            }
            assert_eq!(namespace.truncate(Some(b"gone"), 1_000_000), Ok(true));
            threads.shutdown();
        }
        let (namespace, threads) = open_with(dir.path(), in_memory);
        for n in 0..2_000 {
            let want = match n {
                n if n % 5 == 0 => None,
                n if n % 3 == 0 => Some(n + 10_000),
                n => Some(n),
            };
            assert_eq!(value_of(&namespace, n), want, "record {n}");
        }
        assert!((5_000..5_100).all(|n| value_of(&namespace, n).is_none()));
        assert_eq!(namespace.stats.objects.load(Relaxed), 1_600);
        let (_, demo) = namespace
            .sets()
            .find(|(name, _)| *name == "demo")
            .expect("set demo");
        assert_eq!(demo.objects.load(Relaxed), 1_600);
        threads.shutdown();
    }

    #[test]
    fn concurrent_truncations_all_survive_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names: Vec<String> = (0..8).map(|n| format!("set{n}")).collect();
        {
            let (namespace, threads) = open(dir.path());
            std::thread::scope(|scope| {
                for name in &names {
                    let namespace = &namespace;
                    scope.spawn(move || {
                        namespace.set_id(name.as_bytes()).expect("set");
                        for lut in 1..=50u64 {
                            assert_eq!(namespace.truncate(Some(name.as_bytes()), lut), Ok(true));
                        }
                    });
                }
            });
            threads.shutdown();
        }
        let (namespace, threads) = open(dir.path());
        for name in &names {
            let (_, set) = namespace
                .sets()
                .find(|(found, _)| found == name)
                .expect("set restored from the table");
            assert_eq!(set.truncate_lut_ms.load(Relaxed), 50, "{name}");
        }
        threads.shutdown();
    }

    #[test]
    fn expiry_writes_a_tombstone_so_no_older_version_returns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (namespace, threads) = open(dir.path());
        put(&namespace, 1, 1, 0);
        // A newer version that expires (void time 1 is long past).
        let meta = RecordMeta {
            generation: 2,
            void_time: 1,
            last_update_ms: 5_000,
            set_id: 0,
        };
        namespace
            .write(&digest(1))
            .put(&digest(1), meta, &record(2))
            .expect("put");
        let device = Arc::clone(namespace.device().expect("device"));
        let before = device.appended();
        let report = namespace.sweep(now_citrusleaf_seconds());
        assert_eq!(report.expired, 1);
        assert!(device.appended() > before, "a tombstone was appended");
        // After a restart the record stays gone. (Without the tombstone it
        // would come back once the expiring version's block is reused while
        // the first version's block is not; the tombstone covers that.)
        threads.shutdown();
        drop(namespace);
        let (namespace, threads) = open(dir.path());
        assert_eq!(value_of(&namespace, 1), None);
        threads.shutdown();
    }

    #[test]
    fn defrag_is_paced_only_while_space_is_plentiful() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The usual small test device: always tight, never paced.
        let (small, threads) = open(dir.path());
        let device = small.device().expect("device");
        let pacer = DefragPacer::new(device);
        assert!(
            pacer.space_is_tight(device),
            "4 MiB is under the 256 MiB floor"
        );
        threads.shutdown();
        // 320 MiB of blocks, all free.
        let mut config = config(&dir.path().join("big"), false);
        std::fs::create_dir_all(dir.path().join("big")).expect("dir");
        if let Some(device) = config.device.as_mut() {
            device.file_size = FILE_HEADER_BYTES + 5120 * 64 * 1024;
        }
        let namespace = Arc::new(Namespace::open(config).expect("open"));
        let threads = namespace.start_storage().expect("persistent");
        let device = namespace.device().expect("device");
        let mut pacer = DefragPacer::new(device);
        assert!(!pacer.space_is_tight(device));
        // A write rate that would use up the free blocks in under 10 s
        // makes space tight.
        pacer.write_rate = 600.0;
        assert!(pacer.space_is_tight(device));
        pacer.write_rate = 0.0;
        let stop = AtomicBool::new(false);
        // Nothing written: the floor, 8 MiB/s of 64 KiB blocks = 128/s.
        let started = Instant::now();
        for _ in 0..4 + 32 {
            assert!(pacer.wait_for_turn(device, &stop));
        }
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200),
            "32 blocks past the burst took {took:?}"
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
        stop.store(true, Relaxed);
        assert!(!pacer.wait_for_turn(device, &stop));
        threads.shutdown();
    }

    #[test]
    fn defrag_keeps_every_record_while_reusing_blocks() {
        for in_memory in DATA_IN_MEMORY {
            defrag_keeps_every_record(in_memory);
        }
    }

    fn defrag_keeps_every_record(in_memory: bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (namespace, threads) = open_with(dir.path(), in_memory);
            // ~80 bytes per entry: 64 blocks of 64 KiB hold ~50K entries;
            // write 4x that by overwriting 1,000 records.
            for round in 0..200u32 {
                for n in 0..1_000 {
                    let mut attempts = 0;
                    loop {
                        let meta = RecordMeta {
                            generation: 1,
                            last_update_ms: u64::from(round),
                            ..RecordMeta::default()
                        };
                        match namespace
                            .write(&digest(n))
                            .put(&digest(n), meta, &record(round))
                        {
                            Ok(_) => break,
                            Err(_) if attempts < 500 => {
                                attempts += 1;
                                std::thread::sleep(Duration::from_millis(2));
                            }
                            Err(error) => panic!("round {round}: {error:?}"),
                        }
                    }
                }
            }
            let device = namespace.device().expect("device");
            assert!(device.stats.defrag_blocks.load(Relaxed) > 10);
            assert!((0..1_000).all(|n| value_of(&namespace, n) == Some(199)));
            threads.shutdown();
        }
        let (namespace, threads) = open_with(dir.path(), in_memory);
        assert_eq!(namespace.stats.objects.load(Relaxed), 1_000);
        assert!((0..1_000).all(|n| value_of(&namespace, n) == Some(199)));
        threads.shutdown();
    }
}
