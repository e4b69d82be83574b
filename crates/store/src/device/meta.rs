//! The metadata slots in file 0's header area: the persisted truncation
//! table and the sequence floor, in two checksummed slots written
//! alternately, so a torn write leaves the other intact.
//!
//! The sequence floor is a number no block sequence has reached: every
//! sequence given to a block is below the floor as it is on the device.
//! A cold start continues from the floor (or after the newest block, if
//! that is later), so a sequence number is never given twice, not even
//! across crashes and blocks whose headers were erased. Reusing one would
//! let entries left in a block by an earlier incarnation of the same
//! number (written but never made durable, or emptied by defrag) read as
//! entries of the new one.

use super::{disk, Device};
use std::sync::atomic::Ordering;

/// Where the slots live in file 0.
pub(super) const META_SLOT_OFFSETS: [u64; 2] = [64 * 1024, 160 * 1024];
const META_SLOT_BYTES: usize = 96 * 1024;
const META_MAGIC: u32 = 0xB01D_3E7A;
/// Block sequences reserved at a time by raising the floor (fewer in tests,
/// so that raising it is exercised).
pub(super) const SEQ_RESERVE: u64 = if cfg!(test) { 16 } else { 1024 };

/// The persisted truncation points.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruncateTable {
    pub namespace_lut_ms: u64,
    pub sets: Vec<(String, u64)>,
}

/// The slot written last, and what it holds.
#[derive(Default)]
pub(super) struct MetaState {
    slot: usize,
    counter: u64,
    table: TruncateTable,
}

impl Device {
    /// Reads the persisted truncation table (file 0), and the sequence
    /// floor with it.
    pub fn read_truncate_table(&self) -> TruncateTable {
        let Some(file) = self.files.first() else {
            return TruncateTable::default();
        };
        let mut best: Option<(u64, usize, TruncateTable, u64)> = None;
        let mut buf = vec![0u8; META_SLOT_BYTES];
        for (slot, &offset) in META_SLOT_OFFSETS.iter().enumerate() {
            if disk::read_exact_at(&**file, &mut buf, offset).is_err() {
                continue;
            }
            if let Some((counter, table, floor)) = decode_meta(&buf) {
                if best.as_ref().is_none_or(|(c, ..)| counter > *c) {
                    best = Some((counter, slot, table, floor));
                }
            }
        }
        match best {
            Some((counter, slot, table, floor)) => {
                *self.meta.lock() = MetaState {
                    slot,
                    counter,
                    table: table.clone(),
                };
                self.seq_floor.fetch_max(floor, Ordering::Relaxed);
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
        let mut meta = self.meta.lock();
        let table = current();
        let floor = self.seq_floor.load(Ordering::Relaxed);
        self.write_meta(&mut meta, table, floor)
    }

    /// The sequence floor as it is on the device.
    pub(super) fn seq_floor(&self) -> u64 {
        self.seq_floor.load(Ordering::Relaxed)
    }

    /// Raises the floor on the device to at least `floor` (written and
    /// synced before any sequence below it but above the old floor is used).
    pub(super) fn raise_seq_floor(&self, floor: u64) -> std::io::Result<()> {
        let mut meta = self.meta.lock();
        if floor <= self.seq_floor.load(Ordering::Relaxed) {
            return Ok(());
        }
        let table = meta.table.clone();
        self.write_meta(&mut meta, table, floor)?;
        self.seq_floor.fetch_max(floor, Ordering::Relaxed);
        Ok(())
    }

    fn write_meta(
        &self,
        meta: &mut MetaState,
        table: TruncateTable,
        floor: u64,
    ) -> std::io::Result<()> {
        let Some(file) = self.files.first() else {
            return Ok(());
        };
        let next_slot = 1 - meta.slot.min(1);
        let counter = meta.counter + 1;
        let bytes = encode_meta(counter, &table, floor)
            .ok_or_else(|| std::io::Error::other("truncate table too large"))?;
        {
            // No flusher sync may run between this write and its sync: a
            // failed one could drop this write while ours reports success.
            let _io = self.io_lock.lock();
            disk::write_all_at(&**file, &bytes, META_SLOT_OFFSETS[next_slot])?;
            file.sync()?;
        }
        *meta = MetaState {
            slot: next_slot,
            counter,
            table,
        };
        Ok(())
    }
}

fn encode_meta(counter: u64, table: &TruncateTable, floor: u64) -> Option<Vec<u8>> {
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
    // Format 2 adds the sequence floor after the sets (format 1 ends there).
    out.extend_from_slice(&floor.to_le_bytes());
    let len = out.len() as u32;
    out[28..32].copy_from_slice(&len.to_le_bytes());
    if out.len() > META_SLOT_BYTES {
        return None;
    }
    let crc = crc32c::crc32c(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

fn decode_meta(buf: &[u8]) -> Option<(u64, TruncateTable, u64)> {
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
    let floor = if at + 8 <= len { u64_at(at)? } else { 0 };
    Some((
        counter,
        TruncateTable {
            namespace_lut_ms,
            sets,
        },
        floor,
    ))
}
