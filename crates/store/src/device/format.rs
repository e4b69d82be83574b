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
//!   0  [u8; 8]  b"BOLIDEv1" (the same in every format version)
//!   8  u32      write block size
//!  12  u32      file index in the namespace
//!  16  u64      usable bytes (header + blocks)
//!  24  u8       namespace name length, then the name (≤ 31 bytes)
//!  56  u32      format version (0 in version-1 files, which read as 1)
//!  60  u32      checksum of bytes 0..60: crc32c in version 1; from
//!               version 2 its complement, so that a version-1 binary takes
//!               the header for damaged and refuses the file instead of
//!               reading entries it does not know (and freeing their blocks)
//!
//! block header (64 bytes)
//!   0  u32      BLOCK_MAGIC
//!   4  u32      crc32c of bytes 8..64
//!   8  u64      sequence number (write order across the namespace)
//!  16  u32      block size
//!  20..64       zero
//!
//! entry, version 2 (8-byte aligned; `len` is the unpadded length)
//!   0  u32      ENTRY_MAGIC (0xB01D_E27F)
//!   4  u32      crc32c of bytes 8..len
//!   8  u32      len
//!  12  u8       kind: 1 record, 2 tombstone
//!  13  u8       set name length (0 = no set)
//!  14  u16      generation
//!  16  u64      sequence number of the block it was written into
//!  24  [u8; 20] digest
//!  44  u32      void time (s since 2010, 0 = never)
//!  48  u64      last update (ms since 2010)
//!  56  u8       compression of the payload: 0 none, 1 lz4, 2 snappy, 3 zstd
//!  57  u8       flags (0)
//!  58  u16      reserved (0)
//!  60  u32      the payload's uncompressed length
//!  64  set name, then
//!      record:    the record bytes (crate::record format), compressed
//!                 with the method at 56
//!      tombstone: u64 sequence number of the block the delete was first
//!                 written to
//!
//! entry, version 1 (read only): bytes 0..56 as above with ENTRY_MAGIC_V1
//! (0xB01D_E27E), the set name at 56, then the plain payload.
//! ```
//!
//! The sequence number inside each entry ties it to one incarnation of its
//! block: when a block is reused, bytes of the previous incarnation past the
//! new end no longer match and reading stops there. Each entry names its
//! own layout by its magic, so a file written by version 1 and continued by
//! version 2 holds both kinds, block by block.

use super::compress::Method;
use bolide_types::Digest;

pub const FILE_HEADER_BYTES: u64 = 256 * 1024;
pub const BLOCK_HEADER_BYTES: usize = 64;
/// Header bytes of an entry as written now (format version 2).
pub const ENTRY_HEADER_BYTES: usize = 64;
/// Header bytes of a version-1 entry.
pub const ENTRY_HEADER_BYTES_V1: usize = 56;
pub const BLOCK_MAGIC: u32 = 0xB01D_B10C;
pub const ENTRY_MAGIC: u32 = 0xB01D_E27F;
pub const ENTRY_MAGIC_V1: u32 = 0xB01D_E27E;
const FILE_MAGIC: &[u8; 8] = b"BOLIDEv1";
/// The format this engine writes.
pub const FORMAT_VERSION: u32 = 2;
/// Largest uncompressed payload an entry may claim (the largest block).
const PLAIN_LEN_MAX: usize = 8 << 20;

const _: () = assert!(ENTRY_HEADER_BYTES.is_multiple_of(8));
const _: () = assert!(ENTRY_HEADER_BYTES_V1.is_multiple_of(8));
const _: () = assert!(BLOCK_HEADER_BYTES.is_multiple_of(8));
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
    /// Format version (1 or 2).
    pub version: u32,
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
        if self.version >= 2 {
            out[56..60].copy_from_slice(&self.version.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out[0..60]);
        let check = if self.version >= 2 { !crc } else { crc };
        out[60..64].copy_from_slice(&check.to_le_bytes());
        out
    }

    /// `None` for a blank, foreign or damaged header.
    pub fn decode(bytes: &[u8]) -> Option<FileHeader> {
        let head = bytes.get(0..64)?;
        if &head[0..8] != FILE_MAGIC {
            return None;
        }
        let crc = crc32c::crc32c(&head[0..60]);
        let version = match u32_at(head, 56)? {
            0 if crc == u32_at(head, 60)? => 1,
            0 | 1 => return None,
            version if !crc == u32_at(head, 60)? => version,
            _ => return None,
        };
        let name_len = usize::from(head[24]).min(NAME_BYTES_MAX);
        Some(FileHeader {
            version,
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
    /// How the payload is stored.
    pub compression: Method,
    /// The payload's length uncompressed (its length when stored plain).
    pub plain_len: u32,
    pub generation: u16,
    pub seq: u64,
    pub digest: Digest,
    pub void_time: u32,
    pub last_update_ms: u64,
}

/// Encodes an entry (format version 2) into `out`, which must be exactly
/// the padded size. `payload` is stored as it is: compressed already if
/// `head.compression` says so, `head.plain_len` its uncompressed length.
pub fn write_entry(out: &mut [u8], head: &EntryHead, set_name: &[u8], payload: &[u8]) {
    let len = ENTRY_HEADER_BYTES + set_name.len() + payload.len();
    assert!(
        out.len() == align8(len),
        "entry slot is not the padded size"
    );
    assert!(head.compression != Method::None || head.plain_len as usize == payload.len());
    out[0..4].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
    out[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    out[12] = head.kind;
    out[13] = set_name.len() as u8;
    out[14..16].copy_from_slice(&head.generation.to_le_bytes());
    out[16..24].copy_from_slice(&head.seq.to_le_bytes());
    out[24..44].copy_from_slice(&head.digest.0);
    out[44..48].copy_from_slice(&head.void_time.to_le_bytes());
    out[48..56].copy_from_slice(&head.last_update_ms.to_le_bytes());
    out[56] = head.compression as u8;
    out[57..60].fill(0);
    out[60..64].copy_from_slice(&head.plain_len.to_le_bytes());
    let name_end = ENTRY_HEADER_BYTES + set_name.len();
    out[ENTRY_HEADER_BYTES..name_end].copy_from_slice(set_name);
    out[name_end..len].copy_from_slice(payload);
    out[len..].fill(0);
    let crc = crc32c::crc32c(&out[8..len]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes an entry in the version-1 layout (tests only: to make old files).
#[cfg(test)]
pub fn write_entry_v1(out: &mut [u8], head: &EntryHead, set_name: &[u8], payload: &[u8]) {
    let len = ENTRY_HEADER_BYTES_V1 + set_name.len() + payload.len();
    assert!(out.len() == align8(len));
    out[0..4].copy_from_slice(&ENTRY_MAGIC_V1.to_le_bytes());
    out[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    out[12] = head.kind;
    out[13] = set_name.len() as u8;
    out[14..16].copy_from_slice(&head.generation.to_le_bytes());
    out[16..24].copy_from_slice(&head.seq.to_le_bytes());
    out[24..44].copy_from_slice(&head.digest.0);
    out[44..48].copy_from_slice(&head.void_time.to_le_bytes());
    out[48..56].copy_from_slice(&head.last_update_ms.to_le_bytes());
    let name_end = ENTRY_HEADER_BYTES_V1 + set_name.len();
    out[ENTRY_HEADER_BYTES_V1..name_end].copy_from_slice(set_name);
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
        let Some(head) = self.block.get(at..at + ENTRY_HEADER_BYTES_V1) else {
            return Ok(None);
        };
        let header_bytes = match u32_at(head, 0) {
            Some(ENTRY_MAGIC) => ENTRY_HEADER_BYTES,
            Some(ENTRY_MAGIC_V1) => ENTRY_HEADER_BYTES_V1,
            _ => return Ok(None),
        };
        let len = u32_at(head, 8).ok_or(())? as usize;
        let seq = u64_at(head, 16).ok_or(())?;
        let body = match self.block.get(at..at.saturating_add(len)) {
            Some(body) if len >= header_bytes => body,
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
        if header_bytes + set_len > len {
            return Err(());
        }
        let payload = &body[header_bytes + set_len..];
        let (compression, plain_len) = if header_bytes == ENTRY_HEADER_BYTES {
            let method = Method::from_byte(body[56]).ok_or(())?;
            let plain_len = u32_at(body, 60).ok_or(())?;
            let plain = plain_len as usize;
            // A plain payload is its own length; a compressed one claims
            // no more than a block can hold (what a reader allocates).
            if (method == Method::None && plain != payload.len()) || plain > PLAIN_LEN_MAX {
                return Err(());
            }
            (method, plain_len)
        } else {
            (Method::None, payload.len() as u32)
        };
        let mut digest = [0u8; 20];
        digest.copy_from_slice(&head[24..44]);
        Ok(Some(EntryRef {
            head: EntryHead {
                kind: head[12],
                compression,
                plain_len,
                generation: u16::from_le_bytes([head[14], head[15]]),
                seq,
                digest: Digest(digest),
                void_time: u32_at(head, 44).ok_or(())?,
                last_update_ms: u64_at(head, 48).ok_or(())?,
            },
            set_name: &body[header_bytes..header_bytes + set_len],
            payload,
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
        while probe + ENTRY_HEADER_BYTES_V1 <= self.block.len() {
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
            compression: Method::None,
            plain_len: u32::from(n) * 3,
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
    fn file_header_round_trips_in_both_versions() {
        for version in [1, 2] {
            let header = FileHeader {
                version,
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

    #[test]
    fn a_version_1_reader_takes_a_version_2_header_for_damaged() {
        let bytes = FileHeader {
            version: 2,
            block_size: 4096,
            file_index: 0,
            usable_bytes: 1 << 20,
            namespace: "test".into(),
        }
        .encode();
        // What version 1 checked: the magic, and crc32c(0..60) at 60.
        assert_eq!(&bytes[0..8], b"BOLIDEv1");
        assert_ne!(
            crc32c::crc32c(&bytes[0..60]),
            u32_at(&bytes, 60).unwrap_or(0)
        );
    }

    #[test]
    fn version_1_and_2_entries_read_side_by_side_with_their_methods() {
        let mut block = vec![0u8; 4096];
        write_block_header(&mut block, 4);
        let mut at = BLOCK_HEADER_BYTES;
        // A version-1 entry, then version-2 entries plain and compressed.
        let old = head(1, 4);
        let bytes = align8(ENTRY_HEADER_BYTES_V1 + 3 + 3);
        write_entry_v1(&mut block[at..at + bytes], &old, b"set", &[1, 1, 1]);
        at += bytes;
        let plain = head(2, 4);
        let bytes = record_entry_bytes(3, 6);
        write_entry(&mut block[at..at + bytes], &plain, b"set", &[2; 6]);
        at += bytes;
        let packed = EntryHead {
            compression: Method::Zstd,
            plain_len: 5000,
            ..head(3, 4)
        };
        let bytes = record_entry_bytes(0, 20);
        write_entry(&mut block[at..at + bytes], &packed, b"", &[3; 20]);
        let entries: Vec<_> = EntryIter::new(&block, 4).collect();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].head, old);
        assert_eq!(entries[0].payload, &[1, 1, 1]);
        assert_eq!(entries[0].bytes, 64);
        assert_eq!(entries[1].head, plain);
        assert_eq!(entries[1].payload, &[2; 6]);
        assert_eq!(entries[2].head, packed);
        assert_eq!(entries[2].payload, &[3; 20]);
        assert_eq!(entries[2].set_name, b"");
    }

    #[test]
    fn an_entry_claiming_an_impossible_length_is_damaged() {
        let mut block = vec![0u8; 4096];
        write_block_header(&mut block, 4);
        let at = BLOCK_HEADER_BYTES;
        let bytes = record_entry_bytes(0, 8);
        let lying = EntryHead {
            compression: Method::Lz4,
            plain_len: u32::MAX,
            ..head(0, 4)
        };
        write_entry(&mut block[at..at + bytes], &lying, b"", &[0; 8]);
        assert_eq!(EntryIter::new(&block, 4).count(), 0);
        // Method "none" with a length other than the payload's.
        let lying = EntryHead {
            plain_len: 9,
            ..head(0, 4)
        };
        let mut slot = vec![0u8; bytes];
        // (write_entry refuses to write it; build it by hand.)
        write_entry(
            &mut slot,
            &EntryHead {
                plain_len: 8,
                ..lying
            },
            b"",
            &[0; 8],
        );
        slot[60..64].copy_from_slice(&9u32.to_le_bytes());
        let crc = crc32c::crc32c(&slot[8..ENTRY_HEADER_BYTES + 8]);
        slot[4..8].copy_from_slice(&crc.to_le_bytes());
        block[at..at + bytes].copy_from_slice(&slot);
        assert_eq!(EntryIter::new(&block, 4).count(), 0);
    }
}
