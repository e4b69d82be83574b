//! Bolide's node-to-node framing and field encoding. Only Bolide nodes
//! speak it: heartbeat and fabric connections carry frames, each with a
//! magic number, a protocol version and a checksum of its body. A frame
//! that fails any check is an error; the connection that sent it is
//! dropped and nothing in it is trusted.
//!
//! ```text
//! 0       4        5        6        8            12           16
//! +-------+--------+--------+--------+------------+------------+------ ...
//! | magic | version| kind   | 0      | body bytes | crc32c     | body
//! | BLDE  | 1      |        |        | u32 LE     | of body LE |
//! +-------+--------+--------+--------+------------+------------+------ ...
//! ```
//!
//! Bodies are little-endian fields read by [`Reader`], which fails on any
//! short or oversized field instead of panicking.

use std::fmt;

pub const MAGIC: u32 = u32::from_be_bytes(*b"BLDE");
/// The frame format version. A peer sending another version is dropped.
pub const VERSION: u8 = 1;
pub const FRAME_HEADER_BYTES: usize = 16;
/// Largest frame body: a proxied client message (128 MiB) plus headroom.
pub const FRAME_BODY_BYTES_MAX: usize = 129 * 1024 * 1024;
/// Longest string or byte field inside a control message.
const FIELD_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most items in a list field of a control message.
const LIST_ITEMS_MAX: usize = 1 << 20;

/// Why a frame or body was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    BadMagic(u32),
    BadVersion(u8),
    Reserved(u16),
    TooLarge(usize),
    ChecksumMismatch { expected: u32, actual: u32 },
    Truncated,
    TrailingBytes(usize),
    UnknownKind(u8),
    Invalid(&'static str),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::BadMagic(magic) => write!(f, "bad magic {magic:#010x}"),
            CodecError::BadVersion(version) => write!(f, "unsupported version {version}"),
            CodecError::Reserved(bits) => write!(f, "reserved bits set: {bits:#06x}"),
            CodecError::TooLarge(bytes) => write!(f, "frame body of {bytes} bytes is too large"),
            CodecError::ChecksumMismatch { expected, actual } => {
                write!(f, "checksum {actual:#010x}, expected {expected:#010x}")
            }
            CodecError::Truncated => write!(f, "truncated field"),
            CodecError::TrailingBytes(n) => write!(f, "{n} bytes after the last field"),
            CodecError::UnknownKind(kind) => write!(f, "unknown message kind {kind}"),
            CodecError::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

impl std::error::Error for CodecError {}

/// A frame header, as read off the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: u8,
    pub body_bytes: usize,
    pub checksum: u32,
}

/// Appends a whole frame: header, then `body` written by `fill`.
pub fn write_frame(out: &mut Vec<u8>, kind: u8, fill: impl FnOnce(&mut Writer<'_>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
    fill(&mut Writer { out });
    let body_bytes = out.len() - start - FRAME_HEADER_BYTES;
    assert!(body_bytes <= FRAME_BODY_BYTES_MAX);
    let checksum = crc32c::crc32c(&out[start + FRAME_HEADER_BYTES..]);
    let header = &mut out[start..start + FRAME_HEADER_BYTES];
    header[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    header[4] = VERSION;
    header[5] = kind;
    header[6..8].copy_from_slice(&[0, 0]);
    header[8..12].copy_from_slice(&(body_bytes as u32).to_le_bytes());
    header[12..16].copy_from_slice(&checksum.to_le_bytes());
}

/// Reads a frame header from the first 16 bytes of `bytes`.
pub fn read_header(bytes: &[u8; FRAME_HEADER_BYTES]) -> Result<FrameHeader, CodecError> {
    let [m0, m1, m2, m3, version, kind, r0, r1, b0, b1, b2, b3, c0, c1, c2, c3] = *bytes;
    let magic = u32::from_be_bytes([m0, m1, m2, m3]);
    if magic != MAGIC {
        return Err(CodecError::BadMagic(magic));
    }
    if version != VERSION {
        return Err(CodecError::BadVersion(version));
    }
    let reserved = u16::from_le_bytes([r0, r1]);
    if reserved != 0 {
        return Err(CodecError::Reserved(reserved));
    }
    let body_bytes = u32::from_le_bytes([b0, b1, b2, b3]) as usize;
    if body_bytes > FRAME_BODY_BYTES_MAX {
        return Err(CodecError::TooLarge(body_bytes));
    }
    Ok(FrameHeader {
        kind,
        body_bytes,
        checksum: u32::from_le_bytes([c0, c1, c2, c3]),
    })
}

/// Checks a frame body against its header's checksum.
pub fn check_body(header: &FrameHeader, body: &[u8]) -> Result<(), CodecError> {
    if body.len() != header.body_bytes {
        return Err(CodecError::Truncated);
    }
    let actual = crc32c::crc32c(body);
    if actual != header.checksum {
        return Err(CodecError::ChecksumMismatch {
            expected: header.checksum,
            actual,
        });
    }
    Ok(())
}

/// One whole frame at the front of a buffer: its header, its checked body
/// and its total length.
pub type SplitFrame<'a> = (FrameHeader, &'a [u8], usize);

/// Splits one complete frame off the front of `buffer`: `Ok(None)` when
/// more bytes are needed.
pub fn split_frame(buffer: &[u8]) -> Result<Option<SplitFrame<'_>>, CodecError> {
    let Some(head) = buffer.first_chunk::<FRAME_HEADER_BYTES>() else {
        return Ok(None);
    };
    let header = read_header(head)?;
    let total = FRAME_HEADER_BYTES + header.body_bytes;
    let Some(body) = buffer.get(FRAME_HEADER_BYTES..total) else {
        return Ok(None);
    };
    check_body(&header, body)?;
    Ok(Some((header, body, total)))
}

/// Appends little-endian fields.
pub struct Writer<'a> {
    pub out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    pub fn u8(&mut self, value: u8) {
        self.out.push(value);
    }
    pub fn bool(&mut self, value: bool) {
        self.out.push(u8::from(value));
    }
    pub fn u16(&mut self, value: u16) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u64(&mut self, value: u64) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }
    /// A u32 length, then the bytes.
    pub fn bytes(&mut self, value: &[u8]) {
        assert!(value.len() <= FIELD_BYTES_MAX);
        self.u32(value.len() as u32);
        self.out.extend_from_slice(value);
    }
    pub fn str(&mut self, value: &str) {
        self.bytes(value.as_bytes());
    }
    /// A u32 count, then each item.
    pub fn list<T>(&mut self, items: &[T], mut each: impl FnMut(&mut Self, &T)) {
        assert!(items.len() <= LIST_ITEMS_MAX);
        self.u32(items.len() as u32);
        for item in items {
            each(self, item);
        }
    }
    /// Raw bytes with no length (the rest of a body).
    pub fn raw(&mut self, value: &[u8]) {
        self.out.extend_from_slice(value);
    }
}

/// Reads little-endian fields, failing on anything short or oversized.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.bytes.len() < n {
            return Err(CodecError::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }
    pub fn bool(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CodecError::Invalid("boolean")),
        }
    }
    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = self.u32()? as usize;
        if len > FIELD_BYTES_MAX {
            return Err(CodecError::TooLarge(len));
        }
        self.take(len)
    }
    pub fn str(&mut self) -> Result<&'a str, CodecError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| CodecError::Invalid("utf-8 string"))
    }
    /// A u32 count, then `each` per item. The count is bounded, and each
    /// item must consume at least `min_item_bytes` so a forged count cannot
    /// make a huge allocation.
    pub fn list<T>(
        &mut self,
        min_item_bytes: usize,
        mut each: impl FnMut(&mut Self) -> Result<T, CodecError>,
    ) -> Result<Vec<T>, CodecError> {
        let count = self.u32()? as usize;
        if count > LIST_ITEMS_MAX || count.saturating_mul(min_item_bytes.max(1)) > self.bytes.len()
        {
            return Err(CodecError::Invalid("list count"));
        }
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(each(self)?);
        }
        Ok(items)
    }
    /// What is left, consumed.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }
    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<(), CodecError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(CodecError::TrailingBytes(self.bytes.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_damage() {
        let mut out = Vec::new();
        write_frame(&mut out, 7, |w| {
            w.u64(42);
            w.str("hello");
            w.list(&[1u16, 2, 3], |w, v| w.u16(*v));
        });
        let (header, body, total) = split_frame(&out).expect("valid").expect("complete");
        assert_eq!(header.kind, 7);
        assert_eq!(total, out.len());
        let mut reader = Reader::new(body);
        assert_eq!(reader.u64(), Ok(42));
        assert_eq!(reader.str(), Ok("hello"));
        assert_eq!(reader.list(2, |r| r.u16()), Ok(vec![1, 2, 3]));
        assert!(reader.finish().is_ok());
        // Every prefix is incomplete, never an error.
        for cut in 0..out.len() {
            assert_eq!(split_frame(&out[..cut]), Ok(None));
        }
        // Any flipped body bit fails the checksum.
        for at in FRAME_HEADER_BYTES..out.len() {
            let mut bad = out.clone();
            bad[at] ^= 0x10;
            assert!(matches!(
                split_frame(&bad),
                Err(CodecError::ChecksumMismatch { .. })
            ));
        }
        let mut bad = out.clone();
        bad[4] = 2;
        assert_eq!(split_frame(&bad), Err(CodecError::BadVersion(2)));
        let mut bad = out.clone();
        bad[0] = b'X';
        assert!(matches!(split_frame(&bad), Err(CodecError::BadMagic(_))));
    }

    #[test]
    fn forged_counts_and_lengths_fail_cleanly() {
        let mut body = Vec::new();
        Writer { out: &mut body }.u32(u32::MAX);
        assert!(Reader::new(&body).list(1, |r| r.u8()).is_err());
        assert!(Reader::new(&body).bytes().is_err());
        assert_eq!(Reader::new(&[1, 2]).u32(), Err(CodecError::Truncated));
        assert_eq!(
            Reader::new(&[2]).bool(),
            Err(CodecError::Invalid("boolean"))
        );
    }
}
