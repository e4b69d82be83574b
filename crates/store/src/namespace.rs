//! A namespace: its configuration, 4096 partitions each owning its part of
//! the primary index under its own lock, its sets, and live statistics.

use crate::blob::RecordBlob;
use crate::device::format::{self, EntryHead};
use crate::device::{compress, AppendError, CommitWait, Device, DeviceConfig, Method, Purpose};
use crate::index::{Data, Entry, Extent, IndexTable, Layout, RecordMeta, Stored};
use bolide_types::{Digest, PARTITION_COUNT};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

thread_local! {
    /// Where a reading thread decompresses records.
    static PLAIN: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Most sets a namespace may hold (set id 0 means "no set").
pub const SETS_MAX: usize = 1023;

/// How a namespace keeps its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageEngine {
    /// Records in RAM; persisted to files if `device` is set.
    Memory,
    /// Log-structured files or block devices (`device` is set).
    Device,
}

/// A namespace's configuration, as the config file or defaults give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    pub name: String,
    pub replication_factor: u32,
    pub default_ttl_seconds: u32,
    pub nsup_period_seconds: u32,
    pub allow_ttl_without_nsup: bool,
    pub max_record_size_bytes: usize,
    /// The memory budget for index + data.
    pub memory_size_bytes: u64,
    /// Writes stop above this share of `memory_size_bytes`.
    pub stop_writes_used_percent: u32,
    /// Eviction starts above this share of `memory_size_bytes`; 0 = never.
    pub evict_used_percent: u32,
    /// Share of evictable records removed per sweep, in tenths of a percent.
    pub evict_tenths_percent: u32,
    pub storage_engine: StorageEngine,
    /// Storage files of a persistent namespace.
    pub device: Option<DeviceConfig>,
    /// Copies of a record in conflict: the later update wins (else the
    /// higher generation).
    pub conflict_resolution_last_update_time: bool,
    /// Answer writes once applied on the master, whatever the client asks
    /// (`write-commit-level-override master`).
    pub write_commit_level_master: bool,
    /// Tombstones older than this are forgotten (when no migration runs).
    pub tomb_raider_eligible_age_seconds: u32,
    /// Pause after each migrated record, in microseconds.
    pub migrate_sleep_us: u32,
    /// Strong consistency (`strong-consistency true`): a roster owns the
    /// namespace, writes are acknowledged once every roster replica has
    /// them, partitions without a quorum are unavailable.
    pub strong_consistency: bool,
    /// SC only: deletes that leave no tombstone are allowed
    /// (`strong-consistency-allow-expunge true`); else refused with 22.
    pub strong_consistency_allow_expunge: bool,
    /// SC only (`auto-revive true`): at start, this node's copies that
    /// came back untrusted (`e`, an unclean stop without commit-to-device)
    /// are revived (`r`), as `revive:` would: a partition whose every copy
    /// is untrusted is then served with what they hold instead of dead.
    pub auto_revive: bool,
    /// The node's rack for this namespace (`rack-id`, 0: none), as
    /// configured at start; the cluster places replicas on distinct racks.
    pub rack_id: u32,
}

impl NamespaceConfig {
    /// The defaults of a namespace named `name`.
    pub fn with_name(name: &str) -> NamespaceConfig {
        NamespaceConfig {
            name: name.to_owned(),
            replication_factor: 1,
            default_ttl_seconds: 0,
            nsup_period_seconds: 120,
            allow_ttl_without_nsup: false,
            max_record_size_bytes: 1024 * 1024,
            memory_size_bytes: 4 * 1024 * 1024 * 1024,
            stop_writes_used_percent: 70,
            evict_used_percent: 0,
            evict_tenths_percent: 5,
            storage_engine: StorageEngine::Memory,
            device: None,
            conflict_resolution_last_update_time: false,
            write_commit_level_master: false,
            tomb_raider_eligible_age_seconds: 86_400,
            migrate_sleep_us: 1,
            strong_consistency: false,
            strong_consistency_allow_expunge: false,
            auto_revive: false,
            rack_id: 0,
        }
    }
}

/// Live counters of a namespace. Relaxed atomics: they are statistics.
#[derive(Default)]
pub struct NamespaceStats {
    pub objects: AtomicI64,
    pub data_used_bytes: AtomicI64,
    pub index_used_bytes: AtomicI64,
    pub expired_objects: AtomicU64,
    pub truncated_objects: AtomicU64,
    pub evicted_objects: AtomicU64,
    pub client_read_success: AtomicU64,
    pub client_read_not_found: AtomicU64,
    pub client_read_error: AtomicU64,
    pub client_write_success: AtomicU64,
    pub client_write_error: AtomicU64,
    pub client_delete_success: AtomicU64,
    pub client_delete_not_found: AtomicU64,
    pub client_delete_error: AtomicU64,
    pub fail_generation: AtomicU64,
    pub filtered_out: AtomicU64,
    pub fail_key_busy: AtomicU64,
    pub fail_record_too_big: AtomicU64,
    pub fail_out_of_space: AtomicU64,
    pub nsup_cycle_duration_ms: AtomicU64,
    pub nsup_cycles: AtomicU64,
    /// Tombstones kept in memory (replicated namespaces).
    pub tombstones: AtomicI64,
    /// (SC) Partitions `auto-revive` revived at this start.
    pub auto_revived_partitions: AtomicU64,
}

/// Per-set statistics.
#[derive(Default)]
pub struct SetStats {
    pub name: OnceLock<Box<str>>,
    pub objects: AtomicI64,
    pub data_used_bytes: AtomicI64,
    /// Records of this set last updated before this (ms since 2010) are
    /// truncated: never returned, removed by the next sweep.
    pub truncate_lut_ms: AtomicU64,
    /// The truncation point (the set's or the namespace's, whichever is
    /// later) the last finished sweep removed records up to.
    pub truncate_swept_ms: AtomicU64,
}

/// One record's bytes as stored, with its metadata.
#[derive(Clone, Copy, Debug)]
pub struct StoredRecord<'a> {
    pub meta: RecordMeta,
    pub bytes: &'a [u8],
}

/// One change to one record, as secondary indexes see it: its stored
/// bytes before (None: it did not exist) and after (None: it is gone).
#[derive(Clone, Copy, Debug)]
pub struct RecordChange<'a> {
    pub partition: usize,
    pub digest: &'a Digest,
    pub old: Option<StoredRecord<'a>>,
    pub new: Option<StoredRecord<'a>>,
}

/// Told of every change to a namespace's records (client writes and
/// deletes, expiry, eviction, truncation sweeps), under the partition's
/// write lock, while the namespace is observed. Secondary indexes live
/// above the store and keep themselves exact through this.
pub trait RecordObserver: Send + Sync {
    fn record_changed(&self, change: &RecordChange<'_>);
}

/// One partition: its part of the primary index under one lock.
#[derive(Default)]
pub struct Partition {
    pub(crate) table: RwLock<IndexTable>,
}

/// A namespace and everything it holds.
pub struct Namespace {
    pub config: NamespaceConfig,
    pub stats: NamespaceStats,
    pub(crate) partitions: Box<[Partition]>,
    pub(crate) device: Option<Arc<Device>>,
    /// Records' bytes live on the device only (the index is in memory).
    data_on_device: bool,
    set_ids: RwLock<HashMap<Box<[u8]>, u16>>,
    sets: Box<[SetStats]>,
    system_memory_stop: AtomicBool,
    /// Whole-namespace truncation point (ms since 2010); 0 = none.
    truncate_lut_ms: AtomicU64,
    /// Told of record changes while `observed` is set.
    observer: OnceLock<Arc<dyn RecordObserver>>,
    observed: AtomicBool,
    /// Node services defined in the layers above (secondary indexes, UDF
    /// modules), carried opaquely so that every request reaches them.
    attachment: OnceLock<Arc<dyn Any + Send + Sync>>,
}

/// Why a set could not be named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetError {
    /// More than [`SETS_MAX`] sets.
    TooMany,
    /// Name too long or not UTF-8.
    BadName,
}

/// Why a record's bytes could not be read from the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The read failed.
    Io,
    /// The entry read back is not the record's (checksum or digest).
    Damaged,
}

/// What one expiry/eviction sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub expired: u64,
    pub truncated: u64,
    pub evicted: u64,
}

impl Namespace {
    /// A namespace without storage files (its `device` config is ignored;
    /// see [`Namespace::open`]).
    pub fn new(config: NamespaceConfig) -> Namespace {
        Namespace::with_device(config, None)
    }

    pub(crate) fn with_device(config: NamespaceConfig, device: Option<Arc<Device>>) -> Namespace {
        let layout = match &device {
            None => Layout::Memory,
            Some(device)
                if device.config.data_in_memory
                    || config.storage_engine == StorageEngine::Memory =>
            {
                Layout::Persisted
            }
            Some(_) => Layout::Device,
        };
        let partitions = std::iter::repeat_with(|| Partition {
            table: RwLock::new(IndexTable::with_layout(layout)),
        })
        .take(PARTITION_COUNT)
        .collect();
        let sets = std::iter::repeat_with(SetStats::default)
            .take(SETS_MAX + 1)
            .collect();
        Namespace {
            config,
            stats: NamespaceStats::default(),
            partitions,
            data_on_device: layout == Layout::Device,
            device,
            set_ids: RwLock::new(HashMap::new()),
            sets,
            system_memory_stop: AtomicBool::new(false),
            truncate_lut_ms: AtomicU64::new(0),
            observer: OnceLock::new(),
            observed: AtomicBool::new(false),
            attachment: OnceLock::new(),
        }
    }

    /// Attaches the node's services (once; false if already attached).
    pub fn attach(&self, services: Arc<dyn Any + Send + Sync>) -> bool {
        self.attachment.set(services).is_ok()
    }

    /// The attached services, if they are of type `T`.
    pub fn attached<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.attachment.get()?.downcast_ref::<T>()
    }

    /// Installs the namespace's record observer (once; false if one was
    /// already installed). It is told of changes while
    /// [`Namespace::set_observed`] is on.
    pub fn set_observer(&self, observer: Arc<dyn RecordObserver>) -> bool {
        self.observer.set(observer).is_ok()
    }

    /// Turns change notifications on or off (on while any secondary index
    /// exists). A write that starts after this returns is seen.
    pub fn set_observed(&self, observed: bool) {
        self.observed
            .store(observed, std::sync::atomic::Ordering::SeqCst);
    }

    /// The observer, if it is to be told of changes now.
    // PERF: hot path (one relaxed load when nothing observes).
    #[inline]
    fn active_observer(&self) -> Option<&Arc<dyn RecordObserver>> {
        if self.observed.load(Relaxed) {
            self.observer.get()
        } else {
            None
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Read access to the partition owning `digest`.
    // PERF: hot path.
    #[inline]
    pub fn read(&self, digest: &Digest) -> RwLockReadGuard<'_, IndexTable> {
        self.partition(digest).table.read()
    }

    /// Write access to the partition owning `digest`; all changes go through
    /// the returned writer so statistics stay exact.
    // PERF: hot path.
    #[inline]
    pub fn write(&self, digest: &Digest) -> PartitionWriter<'_> {
        PartitionWriter {
            namespace: self,
            table: self.partition(digest).table.write(),
        }
    }

    /// Whether records' bytes live on the device only.
    pub fn data_on_device(&self) -> bool {
        self.data_on_device
    }

    /// The bytes of `entry`'s record: borrowed from memory, or read from
    /// the device into `buf` (checksum and digest checked). The caller
    /// still holds the partition lock `entry` came from.
    pub fn record_bytes<'a>(
        &self,
        entry: &Entry<'a>,
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], ReadError> {
        let (block, extent) = match entry.record {
            Stored::InMemory(bytes) => return Ok(bytes),
            Stored::OnDevice { block, extent } => (block, extent),
        };
        let device = self.device.as_ref().ok_or(ReadError::Damaged)?;
        buf.clear();
        buf.resize(extent.bytes as usize, 0);
        if let Err(error) = device.read_at(block, extent.offset, buf) {
            tracing::error!(namespace = self.name(), block, %error, "record read failed");
            return Err(ReadError::Io);
        }
        let stored = match format::decode_entry(buf, device.block_seq(block)) {
            Some(read)
                if read.head.digest.0 == *entry.digest && read.head.kind == format::KIND_RECORD =>
            {
                let at = read.payload.as_ptr() as usize - buf.as_ptr() as usize;
                Some((
                    read.head.compression,
                    read.head.plain_len,
                    at..at + read.payload.len(),
                ))
            }
            _ => None,
        };
        let Some((method, plain_len, payload)) = stored else {
            tracing::error!(
                namespace = self.name(),
                block,
                offset = extent.offset,
                "record damaged on the device"
            );
            return Err(ReadError::Damaged);
        };
        if method == Method::None {
            let buf: &'a Vec<u8> = buf;
            return buf.get(payload).ok_or(ReadError::Damaged);
        }
        // Compressed: decompressed into a scratch buffer that then takes
        // the place of `buf` (the entry's bytes go back as the scratch).
        PLAIN.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let input = buf.get(payload).ok_or(ReadError::Damaged)?;
            compress::decompress(method, input, plain_len as usize, &mut scratch).map_err(
                |_| {
                    tracing::error!(
                        namespace = self.name(),
                        block,
                        offset = extent.offset,
                        "compressed record does not decompress"
                    );
                    ReadError::Damaged
                },
            )?;
            std::mem::swap(&mut *scratch, buf);
            Ok(())
        })?;
        let buf: &'a Vec<u8> = buf;
        Ok(buf)
    }

    /// Read access to partition `index` (0..4096), for sweeps and scans.
    pub fn read_partition(&self, index: usize) -> Option<RwLockReadGuard<'_, IndexTable>> {
        self.partitions.get(index).map(|p| p.table.read())
    }

    /// The id of set `name`, registering it if new. Empty name = no set (0).
    pub fn set_id(&self, name: &[u8]) -> Result<u16, SetError> {
        if name.is_empty() {
            return Ok(0);
        }
        if let Some(&id) = self.set_ids.read().get(name) {
            return Ok(id);
        }
        if name.len() > bolide_types::SET_NAME_BYTES_MAX {
            return Err(SetError::BadName);
        }
        let text = std::str::from_utf8(name).map_err(|_| SetError::BadName)?;
        let mut ids = self.set_ids.write();
        if let Some(&id) = ids.get(name) {
            return Ok(id);
        }
        let id = ids.len() + 1;
        if id > SETS_MAX {
            return Err(SetError::TooMany);
        }
        let stats = self.sets.get(id).ok_or(SetError::TooMany)?;
        let _ = stats.name.set(text.into());
        ids.insert(name.into(), id as u16);
        Ok(id as u16)
    }

    /// The id of an existing set, without registering.
    pub fn existing_set_id(&self, name: &[u8]) -> Option<u16> {
        if name.is_empty() {
            return Some(0);
        }
        self.set_ids.read().get(name).copied()
    }

    /// Name of set `id`.
    pub fn set_name(&self, id: u16) -> Option<&str> {
        self.sets
            .get(usize::from(id))
            .and_then(|s| s.name.get())
            .map(|n| &**n)
    }

    /// Statistics of every registered set, in id order.
    pub fn sets(&self) -> impl Iterator<Item = (&str, &SetStats)> {
        self.sets
            .iter()
            .skip(1)
            .filter_map(|s| s.name.get().map(|n| (&**n, s)))
    }

    /// Whether a record is gone for clients: past its void time, or
    /// written before a truncation of its namespace or set.
    // PERF: hot path.
    #[inline]
    pub fn is_doomed(&self, meta: &RecordMeta, now: u32) -> bool {
        meta.is_expired(now) || self.is_truncated(meta)
    }

    fn is_truncated(&self, meta: &RecordMeta) -> bool {
        let namespace_lut = self.truncate_lut_ms.load(Relaxed);
        let set_lut = match meta.set_id {
            0 => 0,
            id => self
                .sets
                .get(usize::from(id))
                .map_or(0, |set| set.truncate_lut_ms.load(Relaxed)),
        };
        meta.last_update_ms < namespace_lut.max(set_lut)
    }

    /// Truncates the namespace, or one set of it: every record last
    /// updated before `before_ms` (ms since 2010) disappears for clients at
    /// once and is removed by the next sweep. Returns false for an unknown
    /// set (nothing to do).
    ///
    /// In a persistent namespace the truncation points are written to
    /// storage before this returns; an error means the truncation holds
    /// now but would not survive a restart.
    pub fn truncate(&self, set: Option<&[u8]>, before_ms: u64) -> Result<bool, String> {
        let known = self.truncate_in_memory(set, before_ms);
        if known {
            self.persist_truncation()?;
        }
        Ok(known)
    }

    pub(crate) fn truncate_in_memory(&self, set: Option<&[u8]>, before_ms: u64) -> bool {
        match set {
            None => {
                self.truncate_lut_ms.fetch_max(before_ms, Relaxed);
                true
            }
            Some(name) => match self
                .existing_set_id(name)
                .and_then(|id| self.sets.get(usize::from(id)))
            {
                Some(set) => {
                    set.truncate_lut_ms.fetch_max(before_ms, Relaxed);
                    true
                }
                None => false,
            },
        }
    }

    /// The last-update time to stamp on a write to `set_id` now: the
    /// clock, but always after any truncation point, so a write that
    /// follows a truncation within the same millisecond survives it.
    pub fn update_stamp_ms(&self, set_id: u16, now_ms: u64) -> u64 {
        let set_lut = match set_id {
            0 => 0,
            id => self
                .sets
                .get(usize::from(id))
                .map_or(0, |set| set.truncate_lut_ms.load(Relaxed)),
        };
        now_ms.max(self.truncate_lut_ms.load(Relaxed).max(set_lut) + 1)
    }

    /// The namespace's truncation point (ms since 2010).
    pub fn truncate_lut_ms(&self) -> u64 {
        self.truncate_lut_ms.load(Relaxed)
    }

    /// Whether records of `set` truncated (with the set or the whole
    /// namespace) are still waiting for a sweep to remove them.
    pub fn is_truncating(&self, set: &SetStats) -> bool {
        let point = set
            .truncate_lut_ms
            .load(Relaxed)
            .max(self.truncate_lut_ms.load(Relaxed));
        point > set.truncate_swept_ms.load(Relaxed)
    }

    /// Index + data bytes in memory (the index alone when the data is on
    /// the device).
    pub fn memory_used_bytes(&self) -> u64 {
        let data = if self.data_on_device {
            0
        } else {
            self.stats.data_used_bytes.load(Relaxed).max(0) as u64
        };
        let index = self.stats.index_used_bytes.load(Relaxed).max(0) as u64;
        data + index
    }

    /// Whether writes must be refused: the namespace is over its
    /// stop-writes share of memory, or the machine is nearly out of memory.
    #[inline]
    pub fn is_stop_writes(&self) -> bool {
        let limit =
            self.config.memory_size_bytes / 100 * u64::from(self.config.stop_writes_used_percent);
        self.memory_used_bytes() >= limit
            || self.system_memory_stop.load(Relaxed)
            || self.device.as_ref().is_some_and(|d| d.is_stop_writes())
    }

    /// The storage of a persistent namespace.
    pub fn device(&self) -> Option<&Arc<Device>> {
        self.device.as_ref()
    }

    /// Set by the node when the machine's free memory runs low.
    pub fn set_system_memory_stop(&self, stop: bool) {
        self.system_memory_stop.store(stop, Relaxed);
    }

    /// Whether the machine-memory guard is on.
    pub fn system_memory_stop(&self) -> bool {
        self.system_memory_stop.load(Relaxed)
    }

    /// Removes expired records, then evicts the records closest to expiry
    /// if memory use is over the eviction mark. Works partition by
    /// partition, holding each lock briefly.
    pub fn sweep(&self, now: u32) -> SweepReport {
        let mut report = SweepReport::default();
        // The truncation points this sweep removes records up to.
        let namespace_lut = self.truncate_lut_ms.load(Relaxed);
        let points: Vec<u64> = self
            .sets
            .iter()
            .map(|set| set.truncate_lut_ms.load(Relaxed).max(namespace_lut))
            .collect();
        self.remove_where(
            |meta| self.is_doomed(meta, now),
            |meta| {
                if meta.is_expired(now) {
                    report.expired += 1;
                } else {
                    report.truncated += 1;
                }
            },
        );
        self.stats
            .expired_objects
            .fetch_add(report.expired, Relaxed);
        self.stats
            .truncated_objects
            .fetch_add(report.truncated, Relaxed);
        for (set, point) in self.sets.iter().zip(points) {
            set.truncate_swept_ms.fetch_max(point, Relaxed);
        }
        report.evicted = self.evict_if_needed();
        self.stats
            .evicted_objects
            .fetch_add(report.evicted, Relaxed);
        report
    }

    fn evict_if_needed(&self) -> u64 {
        let percent = u64::from(self.config.evict_used_percent);
        if percent == 0 || !self.over_eviction_mark(percent) {
            return 0;
        }
        // Find the void time below which evict-tenths-pct of the records
        // that can expire lie, and remove those (never records without TTL).
        let mut void_times: Vec<u32> = Vec::new();
        for partition in self.partitions.iter() {
            partition.table.read().for_each(|entry| {
                if entry.meta.void_time != 0 {
                    void_times.push(entry.meta.void_time);
                }
            });
        }
        if void_times.is_empty() {
            return 0;
        }
        let share = (void_times.len() * self.config.evict_tenths_percent as usize / 1000).max(1);
        let cut_index = share.min(void_times.len()) - 1;
        let (_, &mut cutoff, _) = void_times.select_nth_unstable(cut_index);
        let mut evicted = 0;
        self.remove_where(
            |meta| meta.void_time != 0 && meta.void_time <= cutoff,
            |_| evicted += 1,
        );
        evicted
    }

    /// Whether eviction is on and use is over its mark (`hwm_breached`).
    pub fn hwm_breached(&self) -> bool {
        let percent = u64::from(self.config.evict_used_percent);
        percent != 0 && self.over_eviction_mark(percent)
    }

    /// Whether use is at or above `percent`: of the device when the data
    /// lives there, else of the memory budget.
    fn over_eviction_mark(&self, percent: u64) -> bool {
        match &self.device {
            Some(device) if self.data_on_device => u64::from(device.used_pct()) >= percent,
            _ => self.memory_used_bytes() >= self.config.memory_size_bytes / 100 * percent,
        }
    }

    /// Removes, partition by partition, every record whose metadata
    /// satisfies `doomed`, calling `removed` for each. Candidates are
    /// chosen under the read lock and checked again under the write lock,
    /// since a write may have renewed them in between.
    fn remove_where(
        &self,
        doomed: impl Fn(&RecordMeta) -> bool,
        mut removed: impl FnMut(&RecordMeta),
    ) {
        for partition in self.partitions.iter() {
            let candidates = partition.table.read().select(&doomed);
            if candidates.is_empty() {
                continue;
            }
            let mut writer = PartitionWriter {
                namespace: self,
                table: partition.table.write(),
            };
            for digest in candidates {
                let Some(meta) = writer.table.get(&digest).map(|entry| entry.meta) else {
                    continue;
                };
                if doomed(&meta) {
                    if self.is_truncated(&meta) {
                        // The persisted truncation table keeps it gone.
                        writer.remove(&digest);
                    } else {
                        // Expired or evicted: a tombstone, or an older
                        // version (without this TTL) could come back at a
                        // cold start once this version's block is reused.
                        writer.remove_durably(&digest);
                    }
                    removed(&meta);
                }
            }
        }
    }

    /// The padded size of the storage entry holding `data`.
    pub(crate) fn entry_bytes(&self, set_id: u16, data: &Data) -> usize {
        match data {
            Data::OnDevice(extent) => extent.bytes as usize,
            Data::Persisted(_, bytes) => *bytes as usize,
            Data::InMemory(blob) => {
                let set_len = self.set_name(set_id).map_or(0, str::len);
                format::record_entry_bytes(set_len, blob.len())
            }
        }
    }

    /// Adds to a set's counts (cold start totals).
    pub(crate) fn account_set_totals(&self, set_id: u16, objects: i64, bytes: i64) {
        if let Some(set) = self.sets.get(usize::from(set_id)).filter(|_| set_id != 0) {
            set.objects.fetch_add(objects, Relaxed);
            set.data_used_bytes.fetch_add(bytes, Relaxed);
        }
    }

    #[inline]
    pub(crate) fn partition(&self, digest: &Digest) -> &Partition {
        // partition_id() < PARTITION_COUNT == partitions.len() by construction.
        let index = digest.partition_id().index();
        assert!(index < self.partitions.len());
        &self.partitions[index]
    }
}

/// Exclusive access to one partition that keeps namespace and set
/// statistics in step with every change.
pub struct PartitionWriter<'n> {
    pub(crate) namespace: &'n Namespace,
    pub(crate) table: RwLockWriteGuard<'n, IndexTable>,
}

impl<'n> PartitionWriter<'n> {
    /// The partition's index, read-only.
    #[inline]
    pub fn table(&self) -> &IndexTable {
        &self.table
    }

    /// Stores a record (new or replacing). In a persistent namespace the
    /// record is first appended to storage; if that fails nothing changes.
    /// With commit-to-device the caller must wait on the returned wait
    /// before acknowledging.
    pub fn put(
        &mut self,
        digest: &Digest,
        meta: RecordMeta,
        record: &[u8],
    ) -> Result<Option<CommitWait>, AppendError> {
        let Some(observer) = self.namespace.active_observer() else {
            return self.put_unobserved(digest, meta, record);
        };
        let mut old_bytes = Vec::new();
        let old_meta = self.copy_current(digest, &mut old_bytes);
        let wait = self.put_unobserved(digest, meta, record)?;
        observer.record_changed(&RecordChange {
            partition: digest.partition_id().index(),
            digest,
            old: old_meta.map(|meta| StoredRecord {
                meta,
                bytes: &old_bytes,
            }),
            new: Some(StoredRecord {
                meta,
                bytes: record,
            }),
        });
        Ok(wait)
    }

    /// Copies the stored bytes of `digest`'s current version into `buf`
    /// (from memory or the device) and returns its metadata; None if there
    /// is no record or its bytes cannot be read back (then nothing of it
    /// can be unindexed; queries check every record they return anyway).
    fn copy_current(&self, digest: &Digest, buf: &mut Vec<u8>) -> Option<RecordMeta> {
        let entry = self.table.get(digest)?;
        let meta = entry.meta;
        match entry.record {
            Stored::InMemory(bytes) => buf.extend_from_slice(bytes),
            Stored::OnDevice { .. } => {
                let mut loaded = Vec::new();
                let bytes = self.namespace.record_bytes(&entry, &mut loaded).ok()?;
                buf.extend_from_slice(bytes);
            }
        }
        Some(meta)
    }

    fn put_unobserved(
        &mut self,
        digest: &Digest,
        meta: RecordMeta,
        record: &[u8],
    ) -> Result<Option<CommitWait>, AppendError> {
        let Some(device) = &self.namespace.device else {
            self.install(digest, meta, Data::InMemory(RecordBlob::new(record)), 0);
            return Ok(None);
        };
        let set_name = self.namespace.set_name(meta.set_id).unwrap_or_default();
        let placed = device.append_record(
            record_head(digest, &meta),
            set_name.as_bytes(),
            record,
            Purpose::Client,
        )?;
        let wait = device.commit_wait(placed.position);
        let data = if self.namespace.data_on_device {
            Data::OnDevice(Extent {
                offset: placed.offset,
                bytes: placed.bytes,
            })
        } else {
            Data::Persisted(RecordBlob::new(record), placed.bytes)
        };
        self.install(digest, meta, data, placed.block);
        Ok(wait)
    }

    /// Puts a record into the index already placed in storage block
    /// `location`.
    pub(crate) fn install(&mut self, digest: &Digest, meta: RecordMeta, data: Data, location: u32) {
        let index_before = self.table.index_bytes();
        let new_bytes = data.len() as i64;
        let set_id = meta.set_id;
        let old = self.table.upsert_at(digest, meta, data, location);
        let stats = &self.namespace.stats;
        let (old_bytes, old_set) = match &old {
            Some((old_meta, data, old_location)) => {
                self.release_storage(*old_location, old_meta.set_id, data);
                (data.len() as i64, Some(old_meta.set_id))
            }
            None => {
                stats.objects.fetch_add(1, Relaxed);
                (0, None)
            }
        };
        stats
            .data_used_bytes
            .fetch_add(new_bytes - old_bytes, Relaxed);
        self.account_index(index_before);
        if let Some(old_set) = old_set {
            self.account_set(old_set, -1, -old_bytes);
        }
        self.account_set(set_id, 1, new_bytes);
    }

    /// Deletes a record at a client's request: in a persistent namespace
    /// a tombstone is appended first, so the delete survives a restart.
    /// Returns whether the record was there, and the commit wait.
    pub fn delete(&mut self, digest: &Digest) -> Result<(bool, Option<CommitWait>), AppendError> {
        let Some(meta) = self.table.get(digest).map(|entry| entry.meta) else {
            return Ok((false, None));
        };
        let mut wait = None;
        if let Some(device) = &self.namespace.device {
            let set_name = self.namespace.set_name(meta.set_id).unwrap_or_default();
            let placed =
                device.append_tombstone(record_head(digest, &meta), set_name.as_bytes())?;
            wait = device.commit_wait(placed.position);
        }
        Ok((self.remove(digest), wait))
    }

    /// Removes a record, with a tombstone in a persistent namespace if the
    /// device takes one (expiry, eviction); if it does not (full), the
    /// record is removed from memory anyway. Whether it was there.
    pub fn remove_durably(&mut self, digest: &Digest) -> bool {
        match self.delete(digest) {
            Ok((present, _)) => present,
            Err(error) => {
                tracing::debug!(?error, "no room for a tombstone; removed without one");
                self.remove(digest)
            }
        }
    }

    /// Removes a record from the index without a tombstone (truncation,
    /// and the cold start); whether it was there.
    pub fn remove(&mut self, digest: &Digest) -> bool {
        let Some(observer) = self.namespace.active_observer() else {
            return self.remove_unobserved(digest);
        };
        let mut old_bytes = Vec::new();
        let old_meta = self.copy_current(digest, &mut old_bytes);
        let removed = self.remove_unobserved(digest);
        if let (true, Some(meta)) = (removed, old_meta) {
            observer.record_changed(&RecordChange {
                partition: digest.partition_id().index(),
                digest,
                old: Some(StoredRecord {
                    meta,
                    bytes: &old_bytes,
                }),
                new: None,
            });
        }
        removed
    }

    fn remove_unobserved(&mut self, digest: &Digest) -> bool {
        let index_before = self.table.index_bytes();
        let Some((meta, data, location)) = self.table.remove_at(digest) else {
            return false;
        };
        self.release_storage(location, meta.set_id, &data);
        let bytes = data.len() as i64;
        drop(data);
        self.namespace.stats.objects.fetch_sub(1, Relaxed);
        self.namespace
            .stats
            .data_used_bytes
            .fetch_sub(bytes, Relaxed);
        self.account_index(index_before);
        self.account_set(meta.set_id, -1, -bytes);
        true
    }

    /// The old version's entry in block `location` is dead now.
    fn release_storage(&self, location: u32, set_id: u16, data: &Data) {
        if let Some(device) = &self.namespace.device {
            device.release(location, self.namespace.entry_bytes(set_id, data));
        }
    }

    fn account_index(&self, before: usize) {
        let after = self.table.index_bytes();
        if after != before {
            self.namespace
                .stats
                .index_used_bytes
                .fetch_add(after as i64 - before as i64, Relaxed);
        }
    }

    fn account_set(&self, set_id: u16, objects: i64, bytes: i64) {
        if set_id == 0 {
            return;
        }
        if let Some(set) = self.namespace.sets.get(usize::from(set_id)) {
            set.objects.fetch_add(objects, Relaxed);
            set.data_used_bytes.fetch_add(bytes, Relaxed);
        }
    }
}

/// The entry head of a record version (the device stamps the sequence).
pub(crate) fn record_head(digest: &Digest, meta: &RecordMeta) -> EntryHead {
    EntryHead {
        kind: format::KIND_RECORD,
        compression: Method::None,
        plain_len: 0,
        generation: meta.generation,
        seq: 0,
        digest: *digest,
        void_time: meta.void_time,
        last_update_ms: meta.last_update_ms,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A digest spread like a real one, from a number (shared by the
    /// store's tests).
    pub(crate) fn digest(n: u32) -> Digest {
        let mut bytes = [0u8; 20];
        bytes[..4].copy_from_slice(&n.to_le_bytes());
        bytes[4..8].copy_from_slice(&n.wrapping_mul(2_654_435_761).to_le_bytes());
        Digest(bytes)
    }

    #[test]
    fn statistics_follow_puts_and_removes() {
        let namespace = Namespace::new(NamespaceConfig::with_name("test"));
        let set = namespace.set_id(b"demo").expect("set");
        for n in 0..100 {
            let meta = RecordMeta {
                generation: 1,
                set_id: set,
                ..RecordMeta::default()
            };
            namespace
                .write(&digest(n))
                .put(&digest(n), meta, &[0; 10])
                .expect("memory put");
        }
        assert_eq!(namespace.stats.objects.load(Relaxed), 100);
        assert_eq!(namespace.stats.data_used_bytes.load(Relaxed), 1000);
        assert!(namespace.stats.index_used_bytes.load(Relaxed) > 0);
        let (_, stats) = namespace.sets().next().expect("one set");
        assert_eq!(stats.objects.load(Relaxed), 100);
        for n in 0..100 {
            assert!(namespace.write(&digest(n)).remove(&digest(n)));
        }
        assert_eq!(namespace.stats.objects.load(Relaxed), 0);
        assert_eq!(namespace.stats.data_used_bytes.load(Relaxed), 0);
        assert_eq!(stats.objects.load(Relaxed), 0);
    }

    #[test]
    fn sweep_removes_only_expired() {
        let namespace = Namespace::new(NamespaceConfig::with_name("test"));
        for n in 0..50 {
            let void_time = if n % 2 == 0 { 100 } else { 0 };
            let meta = RecordMeta {
                generation: 1,
                void_time,
                ..RecordMeta::default()
            };
            namespace
                .write(&digest(n))
                .put(&digest(n), meta, b"x")
                .expect("memory put");
        }
        let report = namespace.sweep(100);
        assert_eq!(report.expired, 25);
        assert_eq!(namespace.stats.objects.load(Relaxed), 25);
    }

    #[test]
    fn a_set_is_truncating_until_a_sweep_removes_its_records() {
        let namespace = Namespace::new(NamespaceConfig::with_name("test"));
        let set_id = namespace.set_id(b"demo").expect("set");
        for n in 0..10 {
            let meta = RecordMeta {
                generation: 1,
                set_id,
                last_update_ms: 1_000,
                ..RecordMeta::default()
            };
            namespace
                .write(&digest(n))
                .put(&digest(n), meta, b"x")
                .expect("memory put");
        }
        let stats = || {
            namespace
                .sets()
                .find(|(name, _)| *name == "demo")
                .expect("demo")
                .1
        };
        assert!(!namespace.is_truncating(stats()));
        assert!(namespace.truncate(Some(b"demo"), 2_000).expect("truncate"));
        assert!(namespace.is_truncating(stats()));
        assert_eq!(namespace.sweep(0).truncated, 10);
        assert!(!namespace.is_truncating(stats()));
        // A truncation of the whole namespace counts for its sets too.
        assert!(namespace.truncate(None, 3_000).expect("truncate"));
        assert!(namespace.is_truncating(stats()));
        namespace.sweep(0);
        assert!(!namespace.is_truncating(stats()));
    }

    #[test]
    fn stop_writes_at_the_configured_share() {
        let mut config = NamespaceConfig::with_name("test");
        config.memory_size_bytes = 100_000;
        config.stop_writes_used_percent = 50;
        let namespace = Namespace::new(config);
        let mut n = 0;
        while !namespace.is_stop_writes() {
            namespace
                .write(&digest(n))
                .put(&digest(n), RecordMeta::default(), &[0; 1000])
                .expect("memory put");
            n += 1;
            assert!(n < 1000);
        }
        assert!(namespace.memory_used_bytes() >= 50_000);
    }
}
