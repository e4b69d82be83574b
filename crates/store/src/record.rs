//! The byte format of a record's data (what the index points at).
//!
//! ```text
//! u8 flags                      bit 0: a user key follows
//! [u8 key type · u32 LE len · key bytes]
//! u16 LE bin count
//! per bin: u8 name len · name · u8 particle type · u32 LE value len · value
//! ```
//!
//! Values are stored exactly as they arrived on the wire (integers as 8-byte
//! big-endian, lists and maps as the client's msgpack), so reads copy bytes
//! straight into responses.

const FLAG_HAS_KEY: u8 = 0x01;

/// One bin, borrowed from a record or a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bin<'a> {
    pub name: &'a [u8],
    pub particle_type: u8,
    pub value: &'a [u8],
}

/// A parsed view over stored record bytes.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    pub key: Option<(u8, &'a [u8])>,
    pub bin_count: u16,
    bins: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Parses stored record bytes. Returns `None` only if the bytes are not
    /// a record this module wrote.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Option<RecordView<'a>> {
        let (&flags, mut rest) = bytes.split_first()?;
        let mut key = None;
        if flags & FLAG_HAS_KEY != 0 {
            let (&key_type, after) = rest.split_first()?;
            let (len, after) = after.split_first_chunk::<4>()?;
            let len = u32::from_le_bytes(*len) as usize;
            if after.len() < len {
                return None;
            }
            let (key_bytes, after) = after.split_at(len);
            key = Some((key_type, key_bytes));
            rest = after;
        }
        let (count, bins) = rest.split_first_chunk::<2>()?;
        Some(RecordView {
            key,
            bin_count: u16::from_le_bytes(*count),
            bins,
        })
    }

    /// The bins in stored order.
    #[inline]
    pub fn bins(&self) -> BinIter<'a> {
        BinIter {
            rest: self.bins,
            left: self.bin_count,
        }
    }

    /// The bin named `name`, if present.
    pub fn bin(&self, name: &[u8]) -> Option<Bin<'a>> {
        self.bins().find(|bin| bin.name == name)
    }
}

/// Iterates the bins of a record.
pub struct BinIter<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for BinIter<'a> {
    type Item = Bin<'a>;

    #[inline]
    fn next(&mut self) -> Option<Bin<'a>> {
        if self.left == 0 {
            return None;
        }
        let (&name_len, after) = self.rest.split_first()?;
        let name_len = usize::from(name_len);
        if after.len() < name_len {
            return None;
        }
        let (name, after) = after.split_at(name_len);
        let (&particle_type, after) = after.split_first()?;
        let (len, after) = after.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if after.len() < len {
            return None;
        }
        let (value, after) = after.split_at(len);
        self.rest = after;
        self.left -= 1;
        Some(Bin {
            name,
            particle_type,
            value,
        })
    }
}

/// Bytes a record with these parts occupies.
pub fn encoded_len<'b>(key: Option<(u8, &[u8])>, bins: impl Iterator<Item = &'b Bin<'b>>) -> usize {
    let key_bytes = key.map_or(0, |(_, k)| 1 + 4 + k.len());
    1 + key_bytes
        + 2
        + bins
            .map(|b| 1 + b.name.len() + 1 + 4 + b.value.len())
            .sum::<usize>()
}

/// Appends an encoded record to `out`.
///
/// # Panics
/// If more than 65,535 bins or a name longer than 255 bytes is given;
/// callers validate against the protocol limits first.
pub fn encode<'b>(
    out: &mut Vec<u8>,
    key: Option<(u8, &[u8])>,
    bins: impl ExactSizeIterator<Item = Bin<'b>>,
) {
    assert!(bins.len() <= usize::from(u16::MAX));
    out.push(if key.is_some() { FLAG_HAS_KEY } else { 0 });
    if let Some((key_type, key_bytes)) = key {
        out.push(key_type);
        out.extend_from_slice(&(key_bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(key_bytes);
    }
    out.extend_from_slice(&(bins.len() as u16).to_le_bytes());
    for bin in bins {
        let name_len = u8::try_from(bin.name.len()).expect("bin name fits in a byte");
        out.push(name_len);
        out.extend_from_slice(bin.name);
        out.push(bin.particle_type);
        out.extend_from_slice(&(bin.value.len() as u32).to_le_bytes());
        out.extend_from_slice(bin.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_key_and_bins() {
        let bins = [
            Bin {
                name: b"a",
                particle_type: 1,
                value: &7i64.to_be_bytes(),
            },
            Bin {
                name: b"name",
                particle_type: 3,
                value: b"hello",
            },
            Bin {
                name: b"",
                particle_type: 4,
                value: b"",
            },
        ];
        for key in [None, Some((3u8, &b"k1"[..]))] {
            let mut out = Vec::new();
            encode(&mut out, key, bins.iter().copied());
            assert_eq!(out.len(), encoded_len(key, bins.iter()));
            let view = RecordView::parse(&out).expect("parses");
            assert_eq!(view.key, key);
            let got: Vec<Bin<'_>> = view.bins().collect();
            assert_eq!(got, bins);
            assert_eq!(view.bin(b"name").map(|b| b.value), Some(&b"hello"[..]));
        }
    }

    #[test]
    fn truncated_bytes_never_panic() {
        let mut out = Vec::new();
        encode(
            &mut out,
            Some((3, b"key")),
            [Bin {
                name: b"x",
                particle_type: 3,
                value: b"value",
            }]
            .into_iter(),
        );
        for cut in 0..out.len() {
            if let Some(view) = RecordView::parse(&out[..cut]) {
                let _ = view.bins().count();
            }
        }
    }
}
