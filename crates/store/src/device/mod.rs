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
//! there, else from the file ([`Device::read_at`]).
//!
//! The parts, one file each:
//!
//! | file          | what                                                        |
//! |---------------|-------------------------------------------------------------|
//! | `open.rs`     | opening the files, checking their headers, the block scan   |
//! | `writer.rs`   | the open write block: appends, compression, reads of it     |
//! | `blocks.rs`   | block states, the free list, live-byte accounting            |
//! | `flusher.rs`  | writing sealed and partial blocks, syncing, retrying         |
//! | `commit.rs`   | the durable position and commit-to-device waits              |
//! | `meta.rs`     | the persisted truncation table                               |
//! | `disk.rs`     | the [`Disk`] trait and plain files behind it                 |
//! | `format.rs`   | byte layouts                                                 |
//! | `compress.rs` | storage compression methods                                  |
//! | `faults.rs`   | a simulated disk for fault-injection tests (tests only)      |

mod blocks;
mod commit;
pub mod compress;
pub mod disk;
#[cfg(test)]
pub(crate) mod faults;
mod flusher;
pub mod format;
mod meta;
mod open;
mod writer;

pub use commit::CommitWait;
pub use compress::{Compression, Method};
pub use disk::{Disk, Disks, Files};
pub use flusher::Round;
pub use meta::TruncateTable;

use blocks::BlockInfo;
use flusher::FlushQueue;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use writer::Writer;

const OFFSET_BITS: u32 = 24;
/// Largest write block: offsets must fit in [`OFFSET_BITS`].
pub const WRITE_BLOCK_MAX: u32 = 8 * 1024 * 1024;
pub const WRITE_BLOCK_MIN: u32 = 4096;

const _: () = assert!(WRITE_BLOCK_MAX <= 1 << OFFSET_BITS);

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
    /// How new record entries are compressed (changed at run time with
    /// [`Device::set_compression`]).
    pub compression: Compression,
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
            compression: Compression::default(),
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
    /// The last write or sync to the device failed; no new data is taken
    /// until the flusher has written everything again and synced.
    Failing,
    /// The file system reported no space left (`ENOSPC`) for a write; as
    /// [`AppendError::Failing`] until a write succeeds again.
    DeviceFull,
    /// The device failed for good (a shutdown gave up on it); nothing more
    /// until the namespace is opened again.
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
    /// Record entries written compressed / stored plain although the
    /// namespace compresses (they did not get smaller).
    pub compressed_records: AtomicU64,
    pub uncompressible_records: AtomicU64,
}

/// Why the flusher's last round failed (`Device::failure`).
const FAILURE_NONE: u8 = 0;
const FAILURE_IO: u8 = 1;
const FAILURE_FULL: u8 = 2;

/// One persistent namespace's files and write machinery.
pub struct Device {
    pub config: DeviceConfig,
    files: Vec<Box<dyn Disk>>,
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
    /// The last write or sync failed (`FAILURE_*`); the flusher retries and
    /// clients are refused meanwhile.
    failure: AtomicU8,
    /// The compression setting for new record entries ([`Compression::pack`]).
    compression: AtomicU64,
    /// Tombstones read at the cold start count as live only if they may
    /// still hide an older version: those deleting from a block at least
    /// this old. Defrag releases exactly the ones counted.
    tombstones_counted_from: AtomicU64,
    /// The first block sequence written since the cold start.
    first_new_seq: AtomicU64,
    meta: Mutex<meta::MetaState>,
    /// No block sequence has reached this, on the device (see `meta.rs`).
    seq_floor: AtomicU64,
    /// Held from a write to the sync that makes it durable, by the flusher
    /// and the metadata writers alike: a sync that fails may drop the dirty
    /// pages of writes it did not make, and only its caller hears of it.
    io_lock: Mutex<()>,
    pub stats: DeviceStats,
}

fn position(seq: u64, offset: usize) -> u64 {
    (seq << OFFSET_BITS) | offset as u64
}

impl Device {
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

    /// The file holding block `id`, and the block's offset in it.
    fn locate(&self, id: u32) -> (&dyn Disk, u64) {
        assert!((id as usize) < self.blocks.len(), "block {id} out of range");
        let index = self.file_of(id);
        let within = u64::from(id - self.file_base.get(index).copied().unwrap_or(0));
        (
            &*self.files[index],
            format::FILE_HEADER_BYTES + within * u64::from(self.config.write_block_size),
        )
    }

    fn file_of(&self, id: u32) -> usize {
        self.file_base
            .iter()
            .rposition(|&base| base <= id)
            .unwrap_or(0)
            .min(self.files.len().saturating_sub(1))
    }

    /// Reads a whole block.
    pub fn read_block(&self, id: u32, buf: &mut Vec<u8>) -> std::io::Result<()> {
        buf.resize(self.block_size(), 0);
        let (disk, offset) = self.locate(id);
        disk::read_exact_at(disk, buf, offset)
    }

    /// Asks the kernel to start reading block `id` into the page cache now
    /// (`POSIX_FADV_WILLNEED`), so that a later [`Device::read_block`] finds
    /// it there. A hint: errors are ignored. A cold start hints the next
    /// batch of blocks before it applies the current one, so that the disk
    /// reads while the index is being filled.
    pub fn advise_will_need(&self, id: u32) {
        let (disk, offset) = self.locate(id);
        disk.will_need(offset, u64::from(self.config.write_block_size));
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

    /// The compression setting new record entries get.
    pub fn compression(&self) -> Compression {
        Compression::unpack(self.compression.load(Ordering::Relaxed))
    }

    /// Changes the compression of new record entries (`set-config`); what
    /// is stored keeps its method.
    pub fn set_compression(&self, setting: Compression) {
        self.compression.store(setting.pack(), Ordering::Relaxed);
    }

    /// Marks the device failed for good: appends and commit waits fail
    /// until the namespace is opened again.
    pub fn set_failed(&self) {
        self.failed.store(true, Ordering::Relaxed);
        self.durable_watch.send_modify(|_| {});
        self.durable_signal.notify_all();
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Whether the last attempt to write to the device failed (writes are
    /// being retried, clients refused).
    pub fn is_failing(&self) -> bool {
        self.failure.load(Ordering::Relaxed) != FAILURE_NONE
    }

    /// Why appends are refused now, if they are.
    #[inline]
    pub fn refusal(&self) -> Option<AppendError> {
        if self.failed.load(Ordering::Relaxed) {
            return Some(AppendError::Failed);
        }
        match self.failure.load(Ordering::Relaxed) {
            FAILURE_NONE => None,
            FAILURE_FULL => Some(AppendError::DeviceFull),
            _ => Some(AppendError::Failing),
        }
    }
}

#[cfg(test)]
mod tests;
