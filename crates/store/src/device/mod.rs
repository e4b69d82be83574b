//! The log-structured storage engine behind persistent namespaces.
//!
//! Records are appended to one open write block at a time (per namespace);
//! a full block is sealed and handed to the flusher thread, which writes
//! it in one `pwrite` and syncs. The open block is also written, partially,
//! every `flush-max-ms`, and at once when a `commit-to-device` writer waits
//! for it: all writers waiting at that moment share one write and one sync
//! (group commit). Blocks are numbered across the namespace's files and
//! striped over them.
//!
//! Each block keeps a count of its live bytes. When a record is replaced or
//! removed its old entry's bytes leave the count; the defragmenter rewrites
//! the live entries of blocks below `defrag-lwm-pct` to the open block and
//! frees the block once those copies are durable.
//!
//! The index keeps, per record, the id of the block holding its current
//! version. With `data-in-memory true` the record bytes stay in memory too,
//! so reads never touch the device; by default (`false`) the index also
//! keeps the entry's offset and size, and reads fetch the entry: from the
//! open block or a sealed block still waiting for the flusher if it is
//! there, else from the file ([`Device::read_entry`]).

pub mod format;

use format::{EntryHead, FileHeader, BLOCK_HEADER_BYTES, FILE_HEADER_BYTES};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the truncation table lives in file 0: two slots written
/// alternately, so a torn write leaves the other intact.
const META_SLOT_OFFSETS: [u64; 2] = [64 * 1024, 160 * 1024];
const META_SLOT_BYTES: usize = 96 * 1024;
const META_MAGIC: u32 = 0xB01D_3E7A;
const OFFSET_BITS: u32 = 24;
/// Largest write block: offsets must fit in [`OFFSET_BITS`].
pub const WRITE_BLOCK_MAX: u32 = 8 * 1024 * 1024;
pub const WRITE_BLOCK_MIN: u32 = 4096;
/// First pause before writing again after a failed write; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Attempts a shutting-down flusher makes on a failing device before it
/// gives up (about 10 s with the pauses).
const SHUTDOWN_RETRIES: u32 = 15;

/// Settings of a persistent namespace's storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Files (created if missing) or raw block devices, striped.
    pub files: Vec<PathBuf>,
    /// Size of each file; for block devices 0 = the device's size.
    pub file_size: u64,
    pub write_block_size: u32,
    pub flush_max_ms: u64,
    pub commit_to_device: bool,
    pub defrag_lwm_pct: u32,
    /// Pause between two defragmented blocks, in microseconds.
    pub defrag_sleep_us: u64,
    /// Writes stop when less than this share of blocks is free.
    pub min_avail_pct: u32,
    /// Writes stop when live data exceeds this share of the device.
    pub max_used_pct: u32,
    /// Sealed blocks waiting for the flusher beyond this many bytes make
    /// writes fail with DEVICE_OVERLOAD (18).
    pub max_write_cache: u64,
    /// Keep every record's bytes in memory as well (reads never touch the
    /// device); else only the index is in memory.
    pub data_in_memory: bool,
}

impl DeviceConfig {
    pub fn new(files: Vec<PathBuf>, file_size: u64) -> DeviceConfig {
        DeviceConfig {
            files,
            file_size,
            write_block_size: 1024 * 1024,
            flush_max_ms: 1000,
            commit_to_device: false,
            defrag_lwm_pct: 50,
            defrag_sleep_us: 1000,
            min_avail_pct: 5,
            max_used_pct: 70,
            max_write_cache: 64 * 1024 * 1024,
            data_in_memory: false,
        }
    }
}

/// Why an append was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendError {
    /// No free block.
    OutOfSpace,
    /// Too many sealed blocks wait for the flusher.
    Overload,
    /// The entry does not fit in a write block.
    TooBig,
    /// A write to the device failed earlier; the device takes no more.
    Failed,
}

/// Who appends: clients obey the write-queue limit; deletes and the
/// defragmenter may use the last free blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Client,
    Delete,
    Defrag,
}

/// Where an appended entry went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub block: u32,
    /// Offset of the entry in the block.
    pub offset: u32,
    /// Padded bytes of the entry.
    pub bytes: u32,
    /// Write-order position just past the entry (see [`Device::durable`]).
    pub position: u64,
}

const STATE_FREE: u8 = 0;
const STATE_OPEN: u8 = 1;
const STATE_SEALED: u8 = 2;
const STATE_USED: u8 = 3;
const STATE_DEFRAG: u8 = 4;
const STATE_PENDING_FREE: u8 = 5;

#[derive(Default)]
struct BlockInfo {
    live: AtomicU32,
    seq: AtomicU64,
    state: AtomicU8,
}

struct Writer {
    buf: Vec<u8>,
    block: u32,
    seq: u64,
    used: usize,
    flushed: usize,
    open: bool,
    next_seq: u64,
}

struct Sealed {
    block: u32,
    seq: u64,
    /// Shared with readers that copy an entry out while it is written.
    buf: Arc<Vec<u8>>,
}

#[derive(Default)]
struct FlushQueue {
    sealed: VecDeque<Sealed>,
    /// Sealed blocks the flusher is writing now (still readable here).
    writing: Vec<Sealed>,
    sealed_bytes: u64,
    commit_requested: bool,
    pool: Vec<Vec<u8>>,
    /// Blocks emptied by defrag, free once this position is durable.
    pending_free: Vec<(u32, u64)>,
    shutdown: bool,
}

/// Device counters, for `namespace/NAME` info.
#[derive(Default)]
pub struct DeviceStats {
    pub live_bytes: AtomicI64,
    pub blocks_written: AtomicU64,
    pub partial_flushes: AtomicU64,
    pub syncs: AtomicU64,
    pub defrag_blocks: AtomicU64,
    pub defrag_reads: AtomicU64,
    pub defrag_writes: AtomicU64,
    pub tombstones_dropped: AtomicU64,
    pub cold_start_ms: AtomicU64,
    pub cold_start_records: AtomicU64,
    pub cold_start_blocks: AtomicU64,
    pub cold_start_corrupt_entries: AtomicU64,
    pub cold_start_bad_blocks: AtomicU64,
    pub write_errors: AtomicU64,
}

/// One persistent namespace's files and write machinery.
pub struct Device {
    pub config: DeviceConfig,
    files: Vec<File>,
    /// First global block id of each file, plus the total at the end.
    file_base: Vec<u32>,
    blocks: Box<[BlockInfo]>,
    free: Mutex<VecDeque<u32>>,
    free_count: AtomicU32,
    writer: Mutex<Writer>,
    queue: Mutex<FlushQueue>,
    queue_signal: Condvar,
    durable: AtomicU64,
    durable_lock: Mutex<()>,
    durable_signal: Condvar,
    durable_watch: tokio::sync::watch::Sender<u64>,
    failed: AtomicBool,
    /// The last write or sync failed; the flusher retries.
    failing: AtomicBool,
    meta_slot: Mutex<(usize, u64)>,
    pub stats: DeviceStats,
}

/// The persisted truncation points.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruncateTable {
    pub namespace_lut_ms: u64,
    pub sets: Vec<(String, u64)>,
}

/// A wait for one write to become durable (commit-to-device).
pub struct CommitWait {
    device: Arc<Device>,
    position: u64,
}

impl CommitWait {
    /// Whether both waits are on the same storage.
    pub fn same_device(&self, other: &CommitWait) -> bool {
        Arc::ptr_eq(&self.device, &other.device)
    }

    /// Extends this wait to cover `other` too (same device: the later
    /// position covers both).
    pub fn absorb(&mut self, other: CommitWait) {
        if self.same_device(&other) {
            self.position = self.position.max(other.position);
        }
    }

    pub fn is_durable(&self) -> bool {
        self.device.durable() >= self.position
    }

    /// Waits on the calling thread.
    pub fn wait_blocking(&self) -> Result<(), AppendError> {
        self.device.wait_durable_blocking(self.position)
    }

    /// Waits without blocking a thread.
    pub async fn wait(self) -> Result<(), AppendError> {
        if self.is_durable() {
            return Ok(());
        }
        let mut watch = self.device.durable_watch.subscribe();
        self.device.request_commit();
        let position = self.position;
        let failed = &self.device.failed;
        let _ = watch
            .wait_for(|&durable| durable >= position || failed.load(Ordering::Relaxed))
            .await;
        if self.device.durable() >= position {
            Ok(())
        } else {
            Err(AppendError::Failed)
        }
    }
}

impl std::fmt::Debug for CommitWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommitWait({:#x})", self.position)
    }
}

fn position(seq: u64, offset: usize) -> u64 {
    (seq << OFFSET_BITS) | offset as u64
}

impl Device {
    /// Opens (creating if needed) the files of namespace `namespace` and
    /// reads every block header. Returns the device and the used blocks
    /// with their sequence numbers, oldest first, for the cold start.
    pub fn open(config: DeviceConfig, namespace: &str) -> Result<(Device, Vec<u32>), String> {
        let block_size = config.write_block_size;
        if !(WRITE_BLOCK_MIN..=WRITE_BLOCK_MAX).contains(&block_size)
            || !block_size.is_power_of_two()
        {
            return Err(format!(
                "write-block-size {block_size} must be a power of two from {WRITE_BLOCK_MIN} to {WRITE_BLOCK_MAX}"
            ));
        }
        if config.files.is_empty() {
            return Err("storage-engine device needs at least one file or device".into());
        }
        let mut files = Vec::new();
        let mut file_base = vec![0u32];
        for (index, path) in config.files.iter().enumerate() {
            let (file, blocks) = open_file(path, index as u32, &config, namespace)?;
            files.push(file);
            let last = *file_base.last().unwrap_or(&0);
            file_base.push(last + blocks);
        }
        let total = *file_base.last().unwrap_or(&0);
        let blocks: Box<[BlockInfo]> = std::iter::repeat_with(BlockInfo::default)
            .take(total as usize)
            .collect();
        // Read every block header.
        let mut used: Vec<(u64, u32)> = Vec::new();
        let mut head = [0u8; BLOCK_HEADER_BYTES];
        let mut bad_blocks = 0u64;
        for id in 0..total {
            let (file, offset) = locate(&files, &file_base, block_size, id);
            if file.read_exact_at(&mut head, offset).is_err() {
                bad_blocks += 1;
                continue;
            }
            match format::read_block_header(&head) {
                Some(seq) => used.push((seq, id)),
                None if head.iter().any(|&b| b != 0)
                    && head[0..4] == format::BLOCK_MAGIC.to_le_bytes() =>
                {
                    bad_blocks += 1;
                    tracing::warn!(namespace, block = id, "block header damaged: block skipped");
                }
                None => {}
            }
        }
        used.sort_unstable();
        let next_seq = used.last().map_or(1, |&(seq, _)| seq + 1);
        for &(seq, id) in &used {
            if let Some(info) = blocks.get(id as usize) {
                info.seq.store(seq, Ordering::Relaxed);
                info.state.store(STATE_USED, Ordering::Relaxed);
            }
        }
        let (durable_watch, _) = tokio::sync::watch::channel(0u64);
        let device = Device {
            writer: Mutex::new(Writer {
                buf: Vec::new(),
                block: 0,
                seq: 0,
                used: 0,
                flushed: 0,
                open: false,
                next_seq,
            }),
            files,
            file_base,
            blocks,
            free: Mutex::new(VecDeque::new()),
            free_count: AtomicU32::new(0),
            queue: Mutex::new(FlushQueue::default()),
            queue_signal: Condvar::new(),
            durable: AtomicU64::new(0),
            durable_lock: Mutex::new(()),
            durable_signal: Condvar::new(),
            durable_watch,
            failed: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            meta_slot: Mutex::new((0, 0)),
            stats: DeviceStats::default(),
            config,
        };
        device
            .stats
            .cold_start_bad_blocks
            .store(bad_blocks, Ordering::Relaxed);
        Ok((device, used.into_iter().map(|(_, id)| id).collect()))
    }

    /// Blocks across all files.
    pub fn block_count(&self) -> u32 {
        self.blocks.len() as u32
    }

    pub fn block_size(&self) -> usize {
        self.config.write_block_size as usize
    }

    /// Usable bytes of all blocks.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.block_count()) * self.config.write_block_size as u64
    }

    /// The sequence number of block `id`.
    pub fn block_seq(&self, id: u32) -> u64 {
        self.blocks
            .get(id as usize)
            .map_or(0, |b| b.seq.load(Ordering::Relaxed))
    }

    /// Reads a whole block.
    pub fn read_block(&self, id: u32, buf: &mut Vec<u8>) -> std::io::Result<()> {
        buf.resize(self.block_size(), 0);
        let (file, offset) = locate(
            &self.files,
            &self.file_base,
            self.config.write_block_size,
            id,
        );
        file.read_exact_at(buf, offset)
    }

    /// Asks the kernel to start reading block `id` into the page cache now
    /// (`POSIX_FADV_WILLNEED`), so that a later [`Device::read_block`] finds
    /// it there. A hint: errors are ignored. A cold start hints the next
    /// batch of blocks before it applies the current one, so that the disk
    /// reads while the index is being filled.
    pub fn advise_will_need(&self, id: u32) {
        let (file, offset) = locate(
            &self.files,
            &self.file_base,
            self.config.write_block_size,
            id,
        );
        advise_will_need(file, offset, u64::from(self.config.write_block_size));
    }

    /// Copies `buf.len()` bytes at `offset` of block `id` into `buf`: from
    /// the open block or a sealed block not yet written if it is one of
    /// those, else from the file. The caller holds the lock of the
    /// partition whose record lives there, so the block cannot be freed
    /// and reused meanwhile.
    pub fn read_at(&self, id: u32, offset: u32, buf: &mut [u8]) -> std::io::Result<()> {
        let state = self
            .blocks
            .get(id as usize)
            .map_or(STATE_FREE, |b| b.state.load(Ordering::Acquire));
        let range = offset as usize..offset as usize + buf.len();
        if state == STATE_OPEN || state == STATE_SEALED {
            {
                let writer = self.writer.lock();
                if writer.open && writer.block == id {
                    let bytes = writer.buf.get(range).ok_or_else(out_of_block)?;
                    buf.copy_from_slice(bytes);
                    return Ok(());
                }
            }
            let sealed = {
                let queue = self.queue.lock();
                queue
                    .sealed
                    .iter()
                    .chain(&queue.writing)
                    .find(|s| s.block == id)
                    .map(|s| Arc::clone(&s.buf))
            };
            if let Some(block) = sealed {
                let bytes = block.get(range).ok_or_else(out_of_block)?;
                buf.copy_from_slice(bytes);
                return Ok(());
            }
            // Written since the state was read: on the file now.
        }
        if offset as usize + buf.len() > self.block_size() {
            return Err(out_of_block());
        }
        let (file, at) = locate(
            &self.files,
            &self.file_base,
            self.config.write_block_size,
            id,
        );
        file.read_exact_at(buf, at + u64::from(offset))
    }

    /// After the cold start: blocks holding nothing live become free, the
    /// others stay used; the write position starts after the newest block.
    pub fn finish_cold_start(&self) -> Result<(), String> {
        let files = self.files.len().max(1);
        let mut per_file: Vec<Vec<u32>> = vec![Vec::new(); files];
        let mut emptied = Vec::new();
        for (id, info) in self.blocks.iter().enumerate() {
            let used = info.state.load(Ordering::Relaxed) == STATE_USED;
            if used && info.live.load(Ordering::Relaxed) > 0 {
                continue;
            }
            if used {
                emptied.push(id as u32);
            }
            info.state.store(STATE_FREE, Ordering::Relaxed);
            info.live.store(0, Ordering::Relaxed);
            let file = self.file_of(id as u32);
            if let Some(list) = per_file.get_mut(file) {
                list.push(id as u32);
            }
        }
        // Stripe: alternate files.
        let mut free = self.free.lock();
        free.clear();
        let longest = per_file.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            for list in &per_file {
                if let Some(&id) = list.get(i) {
                    free.push_back(id);
                }
            }
        }
        self.free_count.store(free.len() as u32, Ordering::Relaxed);
        drop(free);
        // Everything read back is on the device.
        let next_seq = self.writer.lock().next_seq;
        self.publish_durable(position(next_seq.saturating_sub(1), (1 << OFFSET_BITS) - 1));
        if !emptied.is_empty() && !self.erase_headers(&emptied) {
            return Err("cannot erase the headers of emptied blocks".into());
        }
        Ok(())
    }

    fn file_of(&self, id: u32) -> usize {
        self.file_base
            .iter()
            .rposition(|&base| base <= id)
            .unwrap_or(0)
            .min(self.files.len().saturating_sub(1))
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u32 {
        self.free_count.load(Ordering::Relaxed)
    }

    /// Share of blocks free, 0–100.
    pub fn available_pct(&self) -> u32 {
        match self.block_count() {
            0 => 0,
            total => (u64::from(self.free_blocks()) * 100 / u64::from(total)) as u32,
        }
    }

    /// Share of the device holding live data, 0–100.
    pub fn used_pct(&self) -> u32 {
        let live = self.stats.live_bytes.load(Ordering::Relaxed).max(0) as u64;
        (live * 100 / self.total_bytes().max(1)) as u32
    }

    /// Whether client writes must stop (min-avail-pct / max-used-pct).
    #[inline]
    pub fn is_stop_writes(&self) -> bool {
        self.available_pct() < self.config.min_avail_pct
            || self.used_pct() >= self.config.max_used_pct
            || self.failed.load(Ordering::Relaxed)
    }

    /// Full blocks not yet on the device: sealed and waiting, or taken by
    /// the flusher and being written (a stalled device keeps them there).
    pub fn write_queue(&self) -> usize {
        let queue = self.queue.lock();
        queue.sealed.len() + queue.writing.len()
    }

    /// Blocks below the defrag mark waiting for the defragmenter.
    pub fn defrag_queue(&self) -> usize {
        self.defrag_candidates(usize::MAX).len()
    }

    /// Adds `bytes` of a new entry to block `id`'s live count.
    pub fn add_live(&self, id: u32, bytes: usize) {
        if let Some(info) = self.blocks.get(id as usize) {
            info.live.fetch_add(bytes as u32, Ordering::Relaxed);
            self.stats
                .live_bytes
                .fetch_add(bytes as i64, Ordering::Relaxed);
        }
    }

    /// Removes `bytes` of a dead entry from block `id`'s live count.
    pub fn release(&self, id: u32, bytes: usize) {
        if let Some(info) = self.blocks.get(id as usize) {
            let before = info
                .live
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                    Some(live.saturating_sub(bytes as u32))
                })
                .unwrap_or(0);
            let released = before.min(bytes as u32);
            self.stats
                .live_bytes
                .fetch_sub(i64::from(released), Ordering::Relaxed);
        }
    }

    /// Appends one entry of `bytes` (padded) built by `fill` to the open
    /// block. The caller holds the record's partition lock, so entries of
    /// one record are in write order.
    pub fn append(
        &self,
        head: EntryHead,
        set_name: &[u8],
        payload: &[u8],
        purpose: Purpose,
    ) -> Result<Placement, AppendError> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(AppendError::Failed);
        }
        let bytes = format::align8(format::ENTRY_HEADER_BYTES + set_name.len() + payload.len());
        if bytes > self.block_size() - BLOCK_HEADER_BYTES {
            return Err(AppendError::TooBig);
        }
        let mut writer = self.writer.lock();
        if !writer.open || writer.used + bytes > self.block_size() {
            self.open_next_block(&mut writer, purpose)?;
        }
        let at = writer.used;
        let seq = writer.seq;
        let block = writer.block;
        let Some(slot) = writer.buf.get_mut(at..at + bytes) else {
            return Err(AppendError::TooBig);
        };
        format::write_entry(slot, &EntryHead { seq, ..head }, set_name, payload);
        writer.used += bytes;
        self.add_live(block, bytes);
        Ok(Placement {
            block,
            offset: at as u32,
            bytes: bytes as u32,
            position: position(seq, writer.used),
        })
    }

    /// Appends a tombstone for a record deleted now. It names the newest
    /// block that can hold an older version (the one open at this moment),
    /// read under the same lock as the append.
    pub fn append_tombstone(
        &self,
        head: EntryHead,
        set_name: &[u8],
    ) -> Result<Placement, AppendError> {
        let deleted_seq = {
            let writer = self.writer.lock();
            if writer.open {
                writer.seq
            } else {
                writer.next_seq.saturating_sub(1)
            }
        };
        // The caller holds the record's partition lock, so every older
        // version of it is in this block or an earlier one, even if another
        // record's append opens a new block before the one below.
        self.append(
            EntryHead {
                kind: format::KIND_TOMBSTONE,
                ..head
            },
            set_name,
            &deleted_seq.max(1).to_le_bytes(),
            Purpose::Delete,
        )
    }

    fn open_next_block(&self, writer: &mut Writer, purpose: Purpose) -> Result<(), AppendError> {
        // Lock order: writer, then queue, then free.
        let mut queue = self.queue.lock();
        if purpose == Purpose::Client && queue.sealed_bytes >= self.config.max_write_cache {
            return Err(AppendError::Overload);
        }
        let reserve = match purpose {
            // Clients leave a few blocks for deletes and defrag.
            Purpose::Client => 2,
            Purpose::Delete => 1,
            Purpose::Defrag => 0,
        };
        let next = {
            let mut free = self.free.lock();
            if free.len() <= reserve {
                return Err(AppendError::OutOfSpace);
            }
            let next = free.pop_front().ok_or(AppendError::OutOfSpace)?;
            self.free_count.store(free.len() as u32, Ordering::Relaxed);
            next
        };
        if writer.open {
            let buf = std::mem::take(&mut writer.buf);
            if let Some(info) = self.blocks.get(writer.block as usize) {
                info.state.store(STATE_SEALED, Ordering::Relaxed);
            }
            queue.sealed_bytes += buf.len() as u64;
            queue.sealed.push_back(Sealed {
                block: writer.block,
                seq: writer.seq,
                buf: Arc::new(buf),
            });
            self.queue_signal.notify_one();
        }
        let mut buf = queue
            .pool
            .pop()
            .unwrap_or_else(|| vec![0u8; self.block_size()]);
        drop(queue);
        buf.resize(self.block_size(), 0);
        let seq = writer.next_seq;
        writer.next_seq += 1;
        format::write_block_header(&mut buf, seq);
        if let Some(info) = self.blocks.get(next as usize) {
            info.seq.store(seq, Ordering::Relaxed);
            info.live.store(0, Ordering::Relaxed);
            info.state.store(STATE_OPEN, Ordering::Relaxed);
        }
        *writer = Writer {
            buf,
            block: next,
            seq,
            used: BLOCK_HEADER_BYTES,
            flushed: 0,
            open: true,
            next_seq: writer.next_seq,
        };
        Ok(())
    }

    /// The write-order position up to which everything is on the device.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The position just past the last appended entry.
    pub fn appended(&self) -> u64 {
        let writer = self.writer.lock();
        if writer.open {
            position(writer.seq, writer.used)
        } else {
            // Nothing open yet: everything before the next block.
            position(writer.next_seq.saturating_sub(1), (1 << OFFSET_BITS) - 1)
        }
    }

    /// A wait for `position` (from a [`Placement`]), if the namespace
    /// acknowledges writes only once durable.
    pub fn commit_wait(self: &Arc<Self>, position: u64) -> Option<CommitWait> {
        self.config.commit_to_device.then(|| CommitWait {
            device: Arc::clone(self),
            position,
        })
    }

    fn request_commit(&self) {
        let mut queue = self.queue.lock();
        if !queue.commit_requested {
            queue.commit_requested = true;
            self.queue_signal.notify_one();
        }
    }

    /// Blocks until `position` is durable (or the device failed).
    pub fn wait_durable_blocking(&self, position: u64) -> Result<(), AppendError> {
        if self.durable() >= position {
            return Ok(());
        }
        self.request_commit();
        let mut guard = self.durable_lock.lock();
        while self.durable() < position {
            if self.failed.load(Ordering::Relaxed) {
                return Err(AppendError::Failed);
            }
            self.durable_signal
                .wait_for(&mut guard, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Marks a defragmented block free once everything appended so far is
    /// durable (its live records were copied to newer blocks).
    pub fn free_after_durable(&self, id: u32) {
        let target = self.appended();
        if let Some(info) = self.blocks.get(id as usize) {
            info.state.store(STATE_PENDING_FREE, Ordering::Relaxed);
        }
        self.queue.lock().pending_free.push((id, target));
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
            b.state.store(STATE_USED, Ordering::Relaxed);
        }
    }

    pub fn live_bytes_of(&self, id: u32) -> u32 {
        self.blocks
            .get(id as usize)
            .map_or(0, |b| b.live.load(Ordering::Relaxed))
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

    /// Marks a block used during the cold start (its entries are loaded).
    pub fn set_failed(&self) {
        self.failed.store(true, Ordering::Relaxed);
        self.durable_watch.send_modify(|_| {});
        self.durable_signal.notify_all();
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// The flusher: writes sealed blocks, flushes the open block on the
    /// timer or when a committing writer asks, syncs, publishes the durable
    /// position and frees defragmented blocks. Runs until [`Device::shutdown`].
    pub fn run_flusher(&self) {
        let flush_every = Duration::from_millis(self.config.flush_max_ms.max(1));
        let mut next_timed = Instant::now() + flush_every;
        let mut scratch: Vec<u8> = Vec::new();
        let mut backoff = RETRY_FIRST;
        let mut shutdown_retries = 0u32;
        loop {
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
            // Snapshot the open block first: every block sealed before the
            // snapshot is then in the queue drained below (lock order).
            let partial = if commit || timed || shutdown || self.is_failing() {
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
            for (block, seq, buf) in &to_write {
                ok = ok && self.write_at(*block, 0, buf);
                reached = reached.max(position(*seq, (1 << OFFSET_BITS) - 1));
            }
            let written_blocks = to_write.len();
            drop(to_write);
            if let Some((block, seq, from, used)) = partial {
                ok = ok && self.write_at(block, from, &scratch);
                reached = reached.max(position(seq, used));
            }
            if reached > 0 && ok {
                ok = self.sync_all();
            }
            if !ok {
                // Nothing of this round counts as durable. The blocks stay in
                // `writing`, the open block's unflushed mark goes back, and
                // all of it is written again after a pause: a device that
                // comes back loses nothing. Meanwhile writes go on into
                // memory until max-write-cache, then answer 18.
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                if let Some((block, seq, from, _)) = partial {
                    let mut writer = self.writer.lock();
                    if writer.open && writer.block == block && writer.seq == seq {
                        writer.flushed = writer.flushed.min(from);
                    }
                }
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "storage write failed: retrying until the device takes writes again"
                    );
                }
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
            if self.failing.swap(false, Ordering::Relaxed) {
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
                        let _ = info.state.compare_exchange(
                            STATE_SEALED,
                            STATE_USED,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                    }
                    // A reader may still hold the buffer: then it goes.
                    if let Ok(mut buf) = Arc::try_unwrap(block.buf) {
                        if queue.pool.len() < 4 {
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
            if shutdown {
                let queue = self.queue.lock();
                if queue.sealed.is_empty() && queue.writing.is_empty() {
                    return;
                }
            }
        }
    }

    /// Whether the last attempt to write to the device failed (writes are
    /// being retried).
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    fn publish_durable(&self, reached: u64) {
        let previous = self.durable.fetch_max(reached, Ordering::AcqRel);
        if reached > previous {
            let _guard = self.durable_lock.lock();
            self.durable_signal.notify_all();
            self.durable_watch.send_replace(reached.max(previous));
        }
    }

    fn release_pending_free(&self) {
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
            self.failing.store(true, Ordering::Relaxed);
            let mut queue = self.queue.lock();
            queue
                .pending_free
                .extend(ready.into_iter().map(|id| (id, 0)));
            return;
        }
        let mut free = self.free.lock();
        for id in ready {
            if let Some(info) = self.blocks.get(id as usize) {
                info.live.store(0, Ordering::Relaxed);
                info.state.store(STATE_FREE, Ordering::Relaxed);
            }
            free.push_back(id);
        }
        self.free_count.store(free.len() as u32, Ordering::Relaxed);
    }

    fn erase_headers(&self, ids: &[u32]) -> bool {
        let zeros = [0u8; BLOCK_HEADER_BYTES];
        ids.iter().all(|&id| self.write_at(id, 0, &zeros)) && self.sync_all()
    }

    /// Whether defragmented blocks are waiting for their copies to be durable.
    pub fn has_pending_free(&self) -> bool {
        !self.queue.lock().pending_free.is_empty()
    }

    /// Asks the flusher to write the open block now.
    pub fn flush_soon(&self) {
        self.request_commit();
    }

    fn write_at(&self, id: u32, from: usize, bytes: &[u8]) -> bool {
        let (file, offset) = locate(
            &self.files,
            &self.file_base,
            self.config.write_block_size,
            id,
        );
        match file.write_all_at(bytes, offset + from as u64) {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(block = id, %error, "write to storage failed");
                false
            }
        }
    }

    fn sync_all(&self) -> bool {
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        self.files.iter().all(|file| match file.sync_data() {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, "storage sync failed");
                false
            }
        })
    }

    /// Stops the flusher after it has written and synced everything.
    pub fn shutdown(&self) {
        let mut queue = self.queue.lock();
        queue.shutdown = true;
        self.queue_signal.notify_all();
    }

    /// Reads the persisted truncation table (file 0).
    pub fn read_truncate_table(&self) -> TruncateTable {
        let Some(file) = self.files.first() else {
            return TruncateTable::default();
        };
        let mut best: Option<(u64, usize, TruncateTable)> = None;
        let mut buf = vec![0u8; META_SLOT_BYTES];
        for (slot, &offset) in META_SLOT_OFFSETS.iter().enumerate() {
            if file.read_exact_at(&mut buf, offset).is_err() {
                continue;
            }
            if let Some((counter, table)) = decode_meta(&buf) {
                if best.as_ref().is_none_or(|(c, _, _)| counter > *c) {
                    best = Some((counter, slot, table));
                }
            }
        }
        match best {
            Some((counter, slot, table)) => {
                *self.meta_slot.lock() = (slot, counter);
                table
            }
            None => TruncateTable::default(),
        }
    }

    /// Persists the truncation table (alternating slots, synced).
    pub fn write_truncate_table(&self, table: &TruncateTable) -> std::io::Result<()> {
        self.write_truncate_table_with(|| table.clone())
    }

    /// Persists the table `current` builds, calling it under the table
    /// lock so concurrent writers cannot overwrite a newer table with an
    /// older one.
    pub fn write_truncate_table_with(
        &self,
        current: impl FnOnce() -> TruncateTable,
    ) -> std::io::Result<()> {
        let Some(file) = self.files.first() else {
            return Ok(());
        };
        let mut slot = self.meta_slot.lock();
        let table = &current();
        let next_slot = 1 - slot.0.min(1);
        let counter = slot.1 + 1;
        let bytes = encode_meta(counter, table)
            .ok_or_else(|| std::io::Error::other("truncate table too large"))?;
        file.write_all_at(&bytes, META_SLOT_OFFSETS[next_slot])?;
        file.sync_data()?;
        *slot = (next_slot, counter);
        Ok(())
    }
}

fn out_of_block() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "entry beyond its block")
}

fn locate<'f>(files: &'f [File], base: &[u32], block_size: u32, id: u32) -> (&'f File, u64) {
    let index = base
        .iter()
        .rposition(|&b| b <= id)
        .unwrap_or(0)
        .min(files.len().saturating_sub(1));
    let within = u64::from(id - base.get(index).copied().unwrap_or(0));
    (
        &files[index],
        FILE_HEADER_BYTES + within * u64::from(block_size),
    )
}

fn open_file(
    path: &PathBuf,
    index: u32,
    config: &DeviceConfig,
    namespace: &str,
) -> Result<(File, u32), String> {
    let shown = path.display();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("cannot open storage file {shown}: {e}"))?;
    let metadata = file
        .metadata()
        .map_err(|e| format!("cannot stat {shown}: {e}"))?;
    let is_block_device = {
        use std::os::unix::fs::FileTypeExt;
        metadata.file_type().is_block_device()
    };
    let size = if is_block_device {
        let end = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0))
            .map_err(|e| format!("cannot size device {shown}: {e}"))?;
        if config.file_size > 0 {
            config.file_size.min(end)
        } else {
            end
        }
    } else {
        if config.file_size == 0 {
            return Err(format!("file {shown} needs a filesize"));
        }
        config.file_size
    };
    let block = u64::from(config.write_block_size);
    if size < FILE_HEADER_BYTES + 4 * block {
        return Err(format!(
            "{shown}: size {size} is too small: it must hold the {FILE_HEADER_BYTES}-byte header and at least 4 write blocks of {block}"
        ));
    }
    let blocks = u32::try_from((size - FILE_HEADER_BYTES) / block)
        .map_err(|_| format!("{shown}: too many write blocks"))?;
    let usable = FILE_HEADER_BYTES + u64::from(blocks) * block;
    let mut head = vec![0u8; 64];
    let read = file.read_at(&mut head, 0).unwrap_or(0);
    let expected = FileHeader {
        block_size: config.write_block_size,
        file_index: index,
        usable_bytes: usable,
        namespace: namespace.to_owned(),
    };
    match FileHeader::decode(&head[..read.min(64)]) {
        Some(found) => {
            if found.block_size != config.write_block_size {
                return Err(format!(
                    "{shown} was written with write-block-size {}, not {}",
                    found.block_size, config.write_block_size
                ));
            }
            if found.namespace != expected.namespace || found.file_index != index {
                return Err(format!(
                    "{shown} belongs to namespace '{}' as file {}, not '{namespace}' file {index}",
                    found.namespace, found.file_index
                ));
            }
            if found.usable_bytes > usable {
                return Err(format!(
                    "{shown} held {} bytes of blocks and is now configured for {usable}: shrinking loses data",
                    found.usable_bytes
                ));
            }
        }
        None if FileHeader::has_magic(&head) => {
            return Err(format!(
                "{shown}: file header is damaged; refusing to reinitialize it"
            ));
        }
        None => {
            // A new file (or a blank device): reserve it and write the header.
            if !is_block_device {
                reserve(&file, usable)
                    .map_err(|e| format!("cannot size {shown} to {usable} bytes: {e}"))?;
            }
            file.write_all_at(&expected.encode(), 0)
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot initialize {shown}: {e}"))?;
        }
    }
    if !is_block_device && metadata.len() < usable {
        reserve(&file, usable)
            .map_err(|e| format!("cannot grow {shown} to {usable} bytes: {e}"))?;
    }
    Ok((file, blocks))
}

/// Sizes a storage file and allocates its blocks on the file system now,
/// so a full file system is an error at start, not a failed write later
/// (a sparse file would promise space it may not get). File systems that
/// cannot preallocate get a sized (sparse) file.
fn reserve(file: &File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let length = libc::off_t::try_from(bytes).map_err(std::io::Error::other)?;
    #[expect(unsafe_code, reason = "posix_fallocate on our own open file")]
    // SAFETY: the descriptor is valid for the borrow of `file`;
    // posix_fallocate reads only its integer arguments.
    let code = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length) };
    match code {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => {
            tracing::warn!("file system cannot preallocate; storage file is sparse");
            file.set_len(bytes)
        }
        code => Err(std::io::Error::from_raw_os_error(code)),
    }
}

/// `posix_fadvise(WILLNEED)` of `bytes` at `offset`; a hint, errors ignored.
fn advise_will_need(file: &File, offset: u64, bytes: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(length)) = (libc::off_t::try_from(offset), libc::off_t::try_from(bytes))
    else {
        return;
    };
    #[expect(unsafe_code, reason = "posix_fadvise on our own open file")]
    // SAFETY: the descriptor is valid for the borrow of `file`;
    // posix_fadvise reads only its integer arguments.
    let _ =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, length, libc::POSIX_FADV_WILLNEED) };
}

fn encode_meta(counter: u64, table: &TruncateTable) -> Option<Vec<u8>> {
    let mut out = vec![0u8; 32];
    out[0..4].copy_from_slice(&META_MAGIC.to_le_bytes());
    out[8..16].copy_from_slice(&counter.to_le_bytes());
    out[16..24].copy_from_slice(&table.namespace_lut_ms.to_le_bytes());
    out[24..28].copy_from_slice(&(table.sets.len() as u32).to_le_bytes());
    for (name, lut) in &table.sets {
        let name = name.as_bytes();
        out.push(u8::try_from(name.len()).ok()?);
        out.extend_from_slice(name);
        out.extend_from_slice(&lut.to_le_bytes());
    }
    let len = out.len() as u32;
    out[28..32].copy_from_slice(&len.to_le_bytes());
    if out.len() > META_SLOT_BYTES {
        return None;
    }
    let crc = crc32c::crc32c(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

fn decode_meta(buf: &[u8]) -> Option<(u64, TruncateTable)> {
    let u32_at = |at: usize| -> Option<u32> {
        buf.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| -> Option<u64> {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(buf.get(at..at + 8)?);
        Some(u64::from_le_bytes(eight))
    };
    if u32_at(0)? != META_MAGIC {
        return None;
    }
    let len = u32_at(28)? as usize;
    let body = buf.get(8..len)?;
    if crc32c::crc32c(body) != u32_at(4)? {
        return None;
    }
    let counter = u64_at(8)?;
    let namespace_lut_ms = u64_at(16)?;
    let count = u32_at(24)? as usize;
    let mut at = 32;
    let mut sets = Vec::new();
    for _ in 0..count {
        let name_len = usize::from(*buf.get(at)?);
        let name = buf.get(at + 1..at + 1 + name_len)?;
        let lut = u64_at(at + 1 + name_len)?;
        sets.push((String::from_utf8_lossy(name).into_owned(), lut));
        at += 1 + name_len + 8;
    }
    Some((
        counter,
        TruncateTable {
            namespace_lut_ms,
            sets,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_types::Digest;

    fn config(dir: &std::path::Path, blocks: u64) -> DeviceConfig {
        let mut config = DeviceConfig::new(vec![dir.join("ns.dat")], 0);
        config.write_block_size = 64 * 1024;
        config.file_size = FILE_HEADER_BYTES + blocks * 64 * 1024;
        config.flush_max_ms = 20;
        config
    }

    fn head(n: u8) -> EntryHead {
        EntryHead {
            kind: format::KIND_RECORD,
            generation: 1,
            seq: 0,
            digest: Digest([n; 20]),
            void_time: 0,
            last_update_ms: 5,
        }
    }

    #[test]
    fn appends_become_durable_and_readable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = config(dir.path(), 8);
        config.commit_to_device = true;
        let (device, used) = Device::open(config, "test").expect("open");
        assert!(used.is_empty());
        device.finish_cold_start().expect("cold start");
        let device = Arc::new(device);
        let flusher = {
            let device = Arc::clone(&device);
            std::thread::spawn(move || device.run_flusher())
        };
        let mut last = None;
        for n in 0..50u8 {
            let placed = device
                .append(head(n), b"s", &[n; 3000], Purpose::Client)
                .expect("append");
            last = Some(placed);
        }
        let placed = last.expect("placed");
        let wait = device.commit_wait(placed.position).expect("commit mode");
        wait.wait_blocking().expect("durable");
        assert!(device.durable() >= placed.position);
        let mut buf = Vec::new();
        device.read_block(placed.block, &mut buf).expect("read");
        let seq = format::read_block_header(&buf).expect("header");
        assert_eq!(seq, device.block_seq(placed.block));
        let count = format::EntryIter::new(&buf, seq).count();
        assert!(count > 0);
        device.shutdown();
        flusher.join().expect("flusher");
    }

    #[test]
    fn out_of_space_when_blocks_run_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (device, _) = Device::open(config(dir.path(), 4), "test").expect("open");
        device.finish_cold_start().expect("cold start");
        let mut refused = None;
        for n in 0..200u8 {
            if let Err(error) = device.append(head(n), b"", &[0; 8000], Purpose::Client) {
                refused = Some(error);
                break;
            }
        }
        assert_eq!(refused, Some(AppendError::OutOfSpace));
        // Deletes may still use the reserve.
        assert!(device
            .append(head(1), b"", &[0; 8], Purpose::Delete)
            .is_ok());
    }

    #[test]
    fn truncate_table_survives_reopen_and_a_torn_slot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let table = TruncateTable {
            namespace_lut_ms: 7,
            sets: vec![("demo".into(), 99), ("other".into(), 5)],
        };
        {
            let (device, _) = Device::open(config(dir.path(), 4), "test").expect("open");
            device.write_truncate_table(&table).expect("write");
            let mut newer = table.clone();
            newer.namespace_lut_ms = 8;
            device.write_truncate_table(&newer).expect("write");
        }
        let (device, _) = Device::open(config(dir.path(), 4), "test").expect("reopen");
        assert_eq!(device.read_truncate_table().namespace_lut_ms, 8);
        // Tear the newer slot: the older one is used.
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join("ns.dat"))
            .expect("open");
        // Writes alternate slots 1, 0, ...: the newer table is in slot 0.
        file.write_all_at(&[0xff; 16], META_SLOT_OFFSETS[0] + 40)
            .expect("tear");
        let (device, _) = Device::open(config(dir.path(), 4), "test").expect("reopen");
        assert_eq!(device.read_truncate_table(), table);
    }

    #[test]
    fn a_new_file_is_allocated_not_sparse() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Device::open(config(dir.path(), 8), "test").expect("open"));
        let metadata = std::fs::metadata(dir.path().join("ns.dat")).expect("stat");
        assert_eq!(metadata.len(), FILE_HEADER_BYTES + 8 * 64 * 1024);
        assert!(
            metadata.blocks() * 512 >= metadata.len(),
            "{} blocks",
            metadata.blocks()
        );
    }

    #[test]
    fn a_changed_block_size_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Device::open(config(dir.path(), 4), "test").expect("open"));
        let mut other = config(dir.path(), 4);
        other.write_block_size = 128 * 1024;
        other.file_size = FILE_HEADER_BYTES + 8 * 128 * 1024;
        let error = Device::open(other, "test").err().expect("refused");
        assert!(error.contains("write-block-size"), "{error}");
    }
}
