//! The open write block: appends (compressing records as the namespace
//! says), sealing full blocks for the flusher, and reading entries back
//! from blocks not yet on the device.

use super::blocks::{STATE_FREE, STATE_OPEN, STATE_SEALED};
use super::compress::{self, Method};
use super::flusher::Sealed;
use super::format::{self, EntryHead, BLOCK_HEADER_BYTES};
use super::meta::SEQ_RESERVE;
use super::{disk, position, AppendError, Device, Placement, Purpose, OFFSET_BITS};
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Records over which `data_compression_ratio` is averaged (Aerospike's
/// figure covers roughly the last 100,000 to 1,000,000 writes).
const RATIO_WINDOW: f64 = 100_000.0;

pub(super) struct Writer {
    pub(super) buf: Vec<u8>,
    pub(super) block: u32,
    pub(super) seq: u64,
    pub(super) used: usize,
    pub(super) flushed: usize,
    pub(super) open: bool,
    pub(super) next_seq: u64,
    /// Moving averages of compressed records' sizes, before and after.
    ratio: RatioAverage,
}

#[derive(Clone, Copy, Default)]
struct RatioAverage {
    plain: f64,
    stored: f64,
    samples: f64,
}

impl RatioAverage {
    /// Adds one record: over the first [`RATIO_WINDOW`] records the plain
    /// mean, then an exponential average over about that many.
    fn add(&mut self, plain: usize, stored: usize) {
        self.samples = (self.samples + 1.0).min(RATIO_WINDOW);
        self.plain += (plain as f64 - self.plain) / self.samples;
        self.stored += (stored as f64 - self.stored) / self.samples;
    }
}

impl Writer {
    pub(super) fn new(next_seq: u64) -> Writer {
        Writer {
            buf: Vec::new(),
            block: 0,
            seq: 0,
            used: 0,
            flushed: 0,
            open: false,
            next_seq,
            ratio: RatioAverage::default(),
        }
    }
}

thread_local! {
    /// Where a writing thread compresses records.
    static COMPRESSED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Device {
    /// Appends a record version, compressed if the namespace compresses
    /// and that makes its entry smaller. The size limit is the record's
    /// uncompressed size (as Aerospike's): a record fits a write block
    /// whether or not it compresses, so it also fits if it is later stored
    /// plain.
    pub fn append_record(
        &self,
        head: EntryHead,
        set_name: &[u8],
        record: &[u8],
        purpose: Purpose,
    ) -> Result<Placement, AppendError> {
        let plain_bytes = format::record_entry_bytes(set_name.len(), record.len());
        if plain_bytes > self.block_size() - BLOCK_HEADER_BYTES {
            return Err(AppendError::TooBig);
        }
        let plain_len = record.len() as u32;
        let setting = self.compression();
        if setting.method == Method::None {
            let head = EntryHead {
                compression: Method::None,
                plain_len,
                ..head
            };
            return self.append_sampled(head, set_name, record, purpose, None);
        }
        COMPRESSED.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let packed = compress::compress(setting, record, &mut scratch)
                && format::record_entry_bytes(set_name.len(), scratch.len()) < plain_bytes;
            let (method, payload) = if packed {
                self.stats
                    .compressed_records
                    .fetch_add(1, Ordering::Relaxed);
                (setting.method, &scratch[..])
            } else {
                self.stats
                    .uncompressible_records
                    .fetch_add(1, Ordering::Relaxed);
                (Method::None, record)
            };
            let head = EntryHead {
                compression: method,
                plain_len,
                ..head
            };
            let sample = Some((record.len(), payload.len()));
            self.append_sampled(head, set_name, payload, purpose, sample)
        })
    }

    /// Appends one entry, its payload stored as it is (`head.compression`
    /// and `head.plain_len` describe it): tombstones, and entries the
    /// defragmenter moves in their stored form. The caller holds the
    /// record's partition lock, so entries of one record are in write order.
    pub fn append(
        &self,
        head: EntryHead,
        set_name: &[u8],
        payload: &[u8],
        purpose: Purpose,
    ) -> Result<Placement, AppendError> {
        self.append_sampled(head, set_name, payload, purpose, None)
    }

    fn append_sampled(
        &self,
        head: EntryHead,
        set_name: &[u8],
        payload: &[u8],
        purpose: Purpose,
        sample: Option<(usize, usize)>,
    ) -> Result<Placement, AppendError> {
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        let bytes = format::record_entry_bytes(set_name.len(), payload.len());
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
        assert!(at + bytes <= self.block_size(), "entry past its block");
        assert!(at.is_multiple_of(8), "entry not aligned");
        let Some(slot) = writer.buf.get_mut(at..at + bytes) else {
            return Err(AppendError::TooBig);
        };
        format::write_entry(slot, &EntryHead { seq, ..head }, set_name, payload);
        writer.used += bytes;
        if let Some((plain, stored)) = sample {
            writer.ratio.add(plain, stored);
        }
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
                compression: Method::None,
                plain_len: 8,
                ..head
            },
            set_name,
            &deleted_seq.max(1).to_le_bytes(),
            Purpose::Delete,
        )
    }

    fn open_next_block(&self, writer: &mut Writer, purpose: Purpose) -> Result<(), AppendError> {
        // The flusher raises the sequence floor ahead of need; if it has not
        // (a failing device), the sequence waits until it is raised here.
        if writer.next_seq >= self.seq_floor() {
            if let Err(error) = self.raise_seq_floor(writer.next_seq + SEQ_RESERVE) {
                tracing::error!(%error, "cannot raise the storage sequence floor");
                self.note_failure(super::FAILURE_IO);
                return Err(AppendError::Failing);
            }
        }
        // Lock order: writer, then queue, then free, then meta, then io.
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
        let next = self.take_free(reserve).ok_or(AppendError::OutOfSpace)?;
        if writer.open {
            let buf = std::mem::take(&mut writer.buf);
            if let Some(info) = self.blocks.get(writer.block as usize) {
                let was = info.state.swap(STATE_SEALED, Ordering::Relaxed);
                assert!(
                    was == STATE_OPEN,
                    "sealing block {} in state {was}",
                    writer.block
                );
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
            let was = info.state.swap(STATE_OPEN, Ordering::Relaxed);
            assert!(was == STATE_FREE, "opening block {next} in state {was}");
        }
        writer.buf = buf;
        writer.block = next;
        writer.seq = seq;
        writer.used = BLOCK_HEADER_BYTES;
        writer.flushed = 0;
        writer.open = true;
        Ok(())
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

    /// The stored size of recently written records over their size before
    /// compression (`data_compression_ratio`): 1 when the namespace does
    /// not compress or has not compressed anything yet.
    pub fn compression_ratio(&self) -> f64 {
        if self.compression().method == Method::None {
            return 1.0;
        }
        let ratio = self.writer.lock().ratio;
        if ratio.plain > 0.0 {
            ratio.stored / ratio.plain
        } else {
            1.0
        }
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
        let (file, at) = self.locate(id);
        disk::read_exact_at(file, buf, at + u64::from(offset))
    }
}

fn out_of_block() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "entry beyond its block")
}
