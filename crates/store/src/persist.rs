//! A persistent namespace's life: the cold start that rebuilds the index
//! from storage, the persisted truncation table, and the defragmenter.

use crate::blob::RecordBlob;
use crate::device::format::{self, EntryIter, EntryRef};
use crate::device::{Device, Purpose, TruncateTable};
use crate::index::RecordMeta;
use crate::namespace::{record_head, Namespace, NamespaceConfig, PartitionWriter};
use bolide_types::{now_citrusleaf_seconds, Digest};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the defragmenter looks for work when it found none. Looking
/// is a pass over one atomic per block (16K blocks for 16 GiB at 1 MiB).
const DEFRAG_IDLE: Duration = Duration::from_millis(10);
/// Blocks defragmented per pass before the candidates are chosen afresh.
const DEFRAG_BATCH: usize = 64;
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What a cold start found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColdStart {
    pub blocks: u64,
    pub records: u64,
    pub corrupt_entries: u64,
    pub bad_blocks: u64,
    pub millis: u64,
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
        let mut buf = Vec::new();
        let mut last_log = Instant::now();
        for (done, &block) in used.iter().enumerate() {
            if last_log.elapsed() >= PROGRESS_EVERY {
                last_log = Instant::now();
                tracing::info!(
                    namespace = self.name(),
                    blocks = done,
                    of = used.len(),
                    records = self.stats.objects.load(Relaxed),
                    "cold start: reading storage"
                );
            }
            let seq = device.block_seq(block);
            if let Err(error) = device.read_block(block, &mut buf) {
                tracing::warn!(namespace = self.name(), block, %error, "cold start: block unreadable, skipped");
                report.bad_blocks += 1;
                continue;
            }
            if format::read_block_header(&buf) != Some(seq) {
                tracing::warn!(
                    namespace = self.name(),
                    block,
                    "cold start: block header changed, skipped"
                );
                report.bad_blocks += 1;
                continue;
            }
            report.blocks += 1;
            let mut entries = EntryIter::new(&buf, seq);
            for entry in entries.by_ref() {
                self.load_entry(&device, block, &entry, now, oldest_seq);
            }
            if entries.corrupt > 0 {
                tracing::warn!(
                    namespace = self.name(),
                    block,
                    damaged = entries.corrupt,
                    "cold start: damaged entries skipped"
                );
                report.corrupt_entries += entries.corrupt;
            }
        }
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

    /// Applies one entry read back from storage. Entries arrive in write
    /// order, so each replaces what came before for its digest.
    fn load_entry(
        &self,
        device: &Device,
        block: u32,
        entry: &EntryRef<'_>,
        now: u32,
        oldest_seq: u64,
    ) {
        let digest = entry.head.digest;
        let mut writer = self.write(&digest);
        match entry.head.kind {
            format::KIND_RECORD => {
                let Ok(set_id) = self.set_id(entry.set_name) else {
                    tracing::warn!(
                        namespace = self.name(),
                        "cold start: record with a bad set name skipped"
                    );
                    return;
                };
                let meta = RecordMeta {
                    generation: entry.head.generation,
                    void_time: entry.head.void_time,
                    last_update_ms: entry.head.last_update_ms,
                    set_id,
                };
                if self.is_doomed(&meta, now) {
                    // Expired or truncated: gone, and so is any older version.
                    writer.remove(&digest);
                    return;
                }
                device.add_live(block, entry.bytes);
                writer.install(&digest, meta, RecordBlob::new(entry.payload), block);
            }
            format::KIND_TOMBSTONE => {
                writer.remove(&digest);
                // Kept (counted live) while older versions may remain.
                if entry.deleted_seq() >= oldest_seq {
                    device.add_live(block, entry.bytes);
                }
            }
            _ => {}
        }
    }

    /// Writes the truncation points to storage (no-op in memory).
    pub(crate) fn persist_truncation(&self) {
        let Some(device) = &self.device else { return };
        let table = TruncateTable {
            namespace_lut_ms: self.truncate_lut_ms(),
            sets: self
                .sets()
                .map(|(name, stats)| (name.to_owned(), stats.truncate_lut_ms.load(Relaxed)))
                .filter(|&(_, lut)| lut > 0)
                .collect(),
        };
        if let Err(error) = device.write_truncate_table(&table) {
            tracing::error!(namespace = self.name(), %error, "cannot persist truncation");
        }
    }

    /// Starts the flusher and the defragmenter of a persistent namespace.
    pub fn start_storage(self: &Arc<Self>) -> Option<StorageThreads> {
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
                .spawn(move || namespace.run_defrag(&stop))
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
        while !stop.load(Relaxed) {
            let candidates = device.defrag_candidates(DEFRAG_BATCH);
            if candidates.is_empty() {
                if device.has_pending_free() {
                    device.flush_soon();
                }
                std::thread::sleep(DEFRAG_IDLE);
                continue;
            }
            for block in candidates {
                if stop.load(Relaxed) {
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
            // Get the copies durable so the emptied blocks come back soon.
            device.flush_soon();
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
        // the index places in this block and copy them from memory.
        tracing::warn!(
            namespace = self.name(),
            block,
            "defrag: damaged block, moving its records from memory"
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
                if writer.table.location(&digest) == Some(block)
                    && relocate(&mut writer, device, &digest).is_err()
                {
                    return false;
                }
            }
        }
        // Whatever is left are tombstones that could not be read: harmless.
        true
    }
}

/// Copies a record's current version out of `block` if `entry` is it.
fn relocate_if_live(
    writer: &mut PartitionWriter<'_>,
    device: &Arc<Device>,
    block: u32,
    entry: &EntryRef<'_>,
) -> Result<(), ()> {
    let digest = entry.head.digest;
    let Some(current) = writer.table.get(&digest) else {
        return Ok(());
    };
    let is_this_version = writer.table.location(&digest) == Some(block)
        && current.meta.generation == entry.head.generation
        && current.meta.last_update_ms == entry.head.last_update_ms
        && current.meta.void_time == entry.head.void_time;
    if !is_this_version {
        return Ok(());
    }
    relocate(writer, device, &digest)
}

/// Appends the current version of `digest` anew and points the index at it.
fn relocate(
    writer: &mut PartitionWriter<'_>,
    device: &Arc<Device>,
    digest: &Digest,
) -> Result<(), ()> {
    let Some(current) = writer.table.get(digest) else {
        return Ok(());
    };
    let meta = current.meta;
    let old_block = writer.table.location(digest).unwrap_or(0);
    let set_name = writer.namespace.set_name(meta.set_id).unwrap_or_default();
    let placed = device
        .append(
            record_head(digest, &meta),
            set_name.as_bytes(),
            current.record,
            Purpose::Defrag,
        )
        .map_err(|_| ())?;
    let bytes = format::record_entry_bytes(set_name.len(), current.record.len());
    writer.table.set_location(digest, placed.block);
    device.release(old_block, bytes);
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
) -> Result<(), ()> {
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
        .map_err(|_| ())
}
