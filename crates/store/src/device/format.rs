//! On-device byte layouts: the file header, block headers and entries.
//!
//! A storage file is a 256 KiB header (the file header in its first 64
//! bytes, two truncation-table slots at 64 KiB and 160 KiB) followed by
//! equal write blocks.
//! Every block starts with a 64-byte header; entries follow, each aligned
//! to 8 bytes, until the first position that does not hold a valid entry
//! of this block's incarnation.
//!
//! ```text
//! file header (first 64 bytes; all integers LE)
//!   0  [u8; 8]  b"BOLIDEv1"
//!   8  u32      write block size
//!  12  u32      file index in the namespace
//!  16  u64      usable bytes (header + blocks)
//!  24  u8       namespace name length, then the name (≤ 31 bytes)
//!  60  u32      crc32c of bytes 0..60
//!
//! block header (64 bytes)
//!   0  u32      BLOCK_MAGIC
//!   4  u32      crc32c of bytes 8..64
//!   8  u64      sequence number (write order across the namespace)
//!  16  u32      block size
//!  20..64       zero
//!
//! entry (8-byte aligned; `len` is the unpadded length)
//!   0  u32      ENTRY_MAGIC
//!   4  u32      crc32c of bytes 8..len
//!   8  u32      len
//!  12  u8       kind: 1 record, 2 tombstone
//!  13  u8       set name length (0 = no set)
//!  14  u16      generation
//!  16  u64      sequence number of the block it was written into
//!  24  [u8; 20] digest
//!  44  u32      void time (s since 2010, 0 = never)
//!  48  u64      last update (ms since 2010)
//!  56  set name, then
//!      record:    the record bytes (crate::record format)
//!      tombstone: u64 sequence number of the block the delete was first
//!                 written to
//! ```
//!
//! The sequence number inside each entry ties it to one incarnation of its
//! block: when a block is reused, bytes of the previous incarnation past the
//! new end no longer match and reading stops there.

use bolide_types::Digest;

pub const FILE_HEADER_BYTES: u64 = 256 * 1024;
pub const BLOCK_HEADER_BYTES: usize = 64;
pub const ENTRY_HEADER_BYTES: usize = 56;
pub const BLOCK_MAGIC: u32 = 0xB01D_B10C;
pub const ENTRY_MAGIC: u32 = 0xB01D_E27E;
const FILE_MAGIC: &[u8; 8] = b"BOLIDEv1";
const NAME_BYTES_MAX: usize = 31;

pub const KIND_RECORD: u8 = 1;
pub const KIND_TOMBSTONE: u8 = 2;

/// Rounds up to the entry alignment.
#[inline]
pub fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// The space an entry occupies in a block (padded).
#[inline]
pub fn record_entry_bytes(set_name_len: usize, record_len: usize) -> usize {
    align8(ENTRY_HEADER_BYTES + set_name_len + record_len)
}

#[inline]
pub fn tombstone_entry_bytes(set_name_len: usize) -> usize {
    align8(ENTRY_HEADER_BYTES + set_name_len + 8)
}

/// What a file's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub block_size: u32,
    pub file_index: u32,
    pub usable_bytes: u64,
    pub namespace: String,
}

impl FileHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; FILE_HEADER_BYTES as usize];
        out[0..8].copy_from_slice(FILE_MAGIC);
        out[8..12].copy_from_slice(&self.block_size.to_le_bytes());
        out[12..16].copy_from_slice(&self.file_index.to_le_bytes());
        out[16..24].copy_from_slice(&self.usable_bytes.to_le_bytes());
        let name = self.namespace.as_bytes();
        let name = &name[..name.len().min(NAME_BYTES_MAX)];
        out[24] = name.len() as u8;
        out[25..25 + name.len()].copy_from_slice(name);
        let crc = crc32c::crc32c(&out[0..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// `None` for a blank or foreign header (a new file).
    pub fn decode(bytes: &[u8]) -> Option<FileHeader> {
        let head = bytes.get(0..64)?;
        if &head[0..8] != FILE_MAGIC || crc32c::crc32c(&head[0..60]) != u32_at(head, 60)? {
            return None;
        }
        let name_len = usize::from(head[24]).min(NAME_BYTES_MAX);
        Some(FileHeader {
            block_size: u32_at(head, 8)?,
            file_index: u32_at(head, 12)?,
            usable_bytes: u64_at(head, 16)?,
            namespace: String::from_utf8_lossy(&head[25..25 + name_len]).into_owned(),
        })
    }

    /// Whether a file starts with our magic (even if the rest is damaged).
    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.get(0..8) == Some(&FILE_MAGIC[..])
    }
}

/// Writes a block header for `seq` into the start of `block`.
pub fn write_block_header(block: &mut [u8], seq: u64) {
    let size = block.len() as u32;
    let head = &mut block[..BLOCK_HEADER_BYTES];
    head.fill(0);
    head[0..4].copy_from_slice(&BLOCK_MAGIC.to_le_bytes());
    head[8..16].copy_from_slice(&seq.to_le_bytes());
    head[16..20].copy_from_slice(&size.to_le_bytes());
    let crc = crc32c::crc32c(&head[8..BLOCK_HEADER_BYTES]);
    head[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The sequence number of a valid block header.
pub fn read_block_header(block: &[u8]) -> Option<u64> {
    let head = block.get(..BLOCK_HEADER_BYTES)?;
    if u32_at(head, 0)? != BLOCK_MAGIC || crc32c::crc32c(&head[8..]) != u32_at(head, 4)? {
        return None;
    }
    match u64_at(head, 8)? {
        0 => None,
        seq => Some(seq),
    }
}

/// The fields of an entry other than its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHead {
    pub kind: u8,
    pub generation: u16,
    pub seq: u64,
    pub digest: Digest,
    pub void_time: u32,
    pub last_update_ms: u64,
}

/// Encodes an entry into `out` (which must be exactly the padded size).
pub fn write_entry(out: &mut [u8], head: &EntryHead, set_name: &[u8], payload: &[u8]) {
    let len = ENTRY_HEADER_BYTES + set_name.len() + payload.len();
    debug_assert!(out.len() == align8(len));
    out[0..4].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
    out[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    out[12] = head.kind;
    out[13] = set_name.len() as u8;
    out[14..16].copy_from_slice(&head.generation.to_le_bytes());
    out[16..24].copy_from_slice(&head.seq.to_le_bytes());
    out[24..44].copy_from_slice(&head.digest.0);
    out[44..48].copy_from_slice(&head.void_time.to_le_bytes());
    out[48..56].copy_from_slice(&head.last_update_ms.to_le_bytes());
    let name_end = ENTRY_HEADER_BYTES + set_name.len();
    out[ENTRY_HEADER_BYTES..name_end].copy_from_slice(set_name);
    out[name_end..len].copy_from_slice(payload);
    out[len..].fill(0);
    let crc = crc32c::crc32c(&out[8..len]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// One decoded entry, borrowing from the block.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'b> {
    pub head: EntryHead,
    pub set_name: &'b [u8],
    pub payload: &'b [u8],
    /// Offset of the entry in its block.
    pub offset: usize,
    /// Padded bytes it occupies.
    pub bytes: usize,
}

impl EntryRef<'_> {
    /// A tombstone's "first deleted in block" sequence number.
    pub fn deleted_seq(&self) -> u64 {
        u64_at(self.payload, 0).unwrap_or(0)
    }
}

/// Decodes the entry `bytes` hold, read back on its own, if it is intact
/// and of block incarnation `seq`.
pub fn decode_entry(bytes: &[u8], seq: u64) -> Option<EntryRef<'_>> {
    EntryIter {
        block: bytes,
        seq,
        at: 0,
        corrupt: 0,
    }
    .decode_at(0)
    .ok()
    .flatten()
}

/// Walks the entries of one block incarnation.
pub struct EntryIter<'b> {
    block: &'b [u8],
    seq: u64,
    at: usize,
    /// Entries that failed their checksum or had a bad length.
    pub corrupt: u64,
}

impl<'b> EntryIter<'b> {
    pub fn new(block: &'b [u8], seq: u64) -> EntryIter<'b> {
        EntryIter {
            block,
            seq,
            at: BLOCK_HEADER_BYTES,
            corrupt: 0,
        }
    }

    /// Decodes the entry at `at`: `Ok(None)` = no entry of this incarnation
    /// starts here (end of block), `Err(())` = damaged.
    fn decode_at(&self, at: usize) -> Result<Option<EntryRef<'b>>, ()> {
        let Some(head) = self.block.get(at..at + ENTRY_HEADER_BYTES) else {
            return Ok(None);
        };
        if u32_at(head, 0) != Some(ENTRY_MAGIC) {
            return Ok(None);
        }
        let len = u32_at(head, 8).ok_or(())? as usize;
        let seq = u64_at(head, 16).ok_or(())?;
        let body = match self.block.get(at..at + len) {
            Some(body) if len >= ENTRY_HEADER_BYTES => body,
            _ => return if seq == self.seq { Err(()) } else { Ok(None) },
        };
        if crc32c::crc32c(&body[8..]) != u32_at(head, 4).ok_or(())? {
            return if seq == self.seq { Err(()) } else { Ok(None) };
        }
        if seq != self.seq {
            // An intact entry of an earlier incarnation: the end.
            return Ok(None);
        }
        let set_len = usize::from(head[13]);
        if ENTRY_HEADER_BYTES + set_len > len {
            return Err(());
        }
        let mut digest = [0u8; 20];
        digest.copy_from_slice(&head[24..44]);
        Ok(Some(EntryRef {
            head: EntryHead {
                kind: head[12],
                generation: u16::from_le_bytes([head[14], head[15]]),
                seq,
                digest: Digest(digest),
                void_time: u32_at(head, 44).ok_or(())?,
                last_update_ms: u64_at(head, 48).ok_or(())?,
            },
            set_name: &body[ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + set_len],
            payload: &body[ENTRY_HEADER_BYTES + set_len..],
            offset: at,
            bytes: align8(len),
        }))
    }
}

impl<'b> Iterator for EntryIter<'b> {
    type Item = EntryRef<'b>;

    fn next(&mut self) -> Option<EntryRef<'b>> {
        if let Ok(Some(entry)) = self.decode_at(self.at) {
            self.at += entry.bytes;
            return Some(entry);
        }
        // No intact entry here: either the end of this incarnation, or a
        // damaged entry. An intact entry of this incarnation further on
        // tells them apart; skip to it and count the damage.
        let mut probe = self.at + 8;
        while probe + ENTRY_HEADER_BYTES <= self.block.len() {
            if let Ok(Some(entry)) = self.decode_at(probe) {
                self.corrupt += 1;
                self.at = probe + entry.bytes;
                return Some(entry);
            }
            probe += 8;
        }
        self.at = self.block.len();
        None
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at + 8)?;
    let mut eight = [0u8; 8];
    eight.copy_from_slice(b);
    Some(u64::from_le_bytes(eight))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(n: u8, seq: u64) -> EntryHead {
        EntryHead {
            kind: KIND_RECORD,
            generation: u16::from(n),
            seq,
            digest: Digest([n; 20]),
            void_time: 7,
            last_update_ms: 1000 + u64::from(n),
        }
    }

    fn block_with(seq: u64, count: u8) -> Vec<u8> {
        let mut block = vec![0u8; 4096];
        write_block_header(&mut block, seq);
        let mut at = BLOCK_HEADER_BYTES;
        for n in 0..count {
            let payload = vec![n; usize::from(n) * 3];
            let bytes = record_entry_bytes(3, payload.len());
            write_entry(&mut block[at..at + bytes], &head(n, seq), b"set", &payload);
            at += bytes;
        }
        block
    }

    #[test]
    fn entries_round_trip() {
        let block = block_with(9, 10);
        assert_eq!(read_block_header(&block), Some(9));
        let entries: Vec<_> = EntryIter::new(&block, 9).collect();
        assert_eq!(entries.len(), 10);
        for (n, entry) in entries.iter().enumerate() {
            assert_eq!(entry.head, head(n as u8, 9));
            assert_eq!(entry.set_name, b"set");
            assert_eq!(entry.payload, vec![n as u8; n * 3].as_slice());
        }
    }

    #[test]
    fn a_flipped_byte_loses_only_its_entry() {
        let clean = block_with(3, 10);
        let offsets: Vec<usize> = EntryIter::new(&clean, 3).map(|e| e.offset).collect();
        for victim in 0..10 {
            let mut block = clean.clone();
            block[offsets[victim] + 30] ^= 0x40;
            let mut iter = EntryIter::new(&block, 3);
            let got: Vec<u16> = iter.by_ref().map(|e| e.head.generation).collect();
            let want: Vec<u16> = (0..10u16).filter(|&n| n as usize != victim).collect();
            assert_eq!(got, want, "victim {victim}");
            // Damage to the last entry looks like the end of the block.
            assert_eq!(iter.corrupt, u64::from(victim < 9));
        }
    }

    #[test]
    fn stale_entries_of_an_earlier_incarnation_end_the_block() {
        let old = block_with(3, 10);
        let mut block = old.clone();
        // New incarnation with two entries written over the start.
        write_block_header(&mut block, 8);
        let mut at = BLOCK_HEADER_BYTES;
        for n in 0..2 {
            let bytes = record_entry_bytes(3, usize::from(n) * 3);
            write_entry(
                &mut block[at..at + bytes],
                &head(n, 8),
                b"set",
                &vec![n; usize::from(n) * 3],
            );
            at += bytes;
        }
        let mut iter = EntryIter::new(&block, 8);
        assert_eq!(iter.by_ref().count(), 2);
        assert_eq!(iter.corrupt, 0);
    }

    #[test]
    fn any_garbage_never_panics() {
        let mut state = 0x1234_5678u64;
        for _ in 0..200 {
            let mut block = block_with(5, 20);
            for _ in 0..20 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let at = (state >> 33) as usize % block.len();
                block[at] = (state >> 17) as u8;
            }
            let _ = EntryIter::new(&block, 5).count();
        }
    }

    #[test]
    fn file_header_round_trips() {
        let header = FileHeader {
            block_size: 1 << 20,
            file_index: 2,
            usable_bytes: 1 << 30,
            namespace: "test".into(),
        };
        let bytes = header.encode();
        assert_eq!(FileHeader::decode(&bytes), Some(header));
        let mut damaged = bytes.clone();
        damaged[10] ^= 1;
        assert_eq!(FileHeader::decode(&damaged), None);
        assert!(FileHeader::has_magic(&damaged));
    }
}
