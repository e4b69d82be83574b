//! What the engine asks of a protocol: encode a request for a key, and
//! split one complete reply off the front of the received bytes.
//!
//! Requests on one connection are answered in order by both Aerospike and
//! Redis, so the engine pipelines by writing N requests and then decoding N
//! replies.

use crate::config::BinSpec;
use crate::stats::Outcome;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// One request on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Read every bin of the record.
    Read,
    /// Write every bin with fresh values.
    Write,
    /// Read up to `length` records starting near the key.
    Scan { length: u32 },
}

/// One decoded reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub outcome: Outcome,
    /// Records returned (scans).
    pub records: u64,
}

impl Reply {
    pub fn of(outcome: Outcome) -> Reply {
        Reply {
            outcome,
            records: 0,
        }
    }
}

/// A protocol's request encoder and reply decoder. One per connection.
pub trait Codec: Send {
    /// Appends one complete request frame to `out`.
    fn encode(&mut self, request: Request, key: u64, out: &mut Vec<u8>);

    /// Decodes one reply to `request` from the front of `input`: `Ok(None)`
    /// while incomplete, else the reply and the bytes it used. An error
    /// means the stream is unusable.
    fn decode(&mut self, request: Request, input: &[u8]) -> Result<Option<(Reply, usize)>, String>;

    /// The text of an error reply seen since the last call, if the
    /// protocol has error texts (Redis does; Aerospike sends codes only).
    fn take_error_text(&mut self) -> Option<String> {
        None
    }
}

/// Bytes of random printable text values are cut from; a value of n bytes is
/// a window of this pool at a random offset, so writes cost no generation.
/// Small, so it stays in cache: with 64 KiB, copying values out of it was a
/// sixth of the client's CPU on a busy machine.
const VALUE_POOL_BYTES: usize = 4 * 1024;

/// Fresh bin values for writes.
pub struct ValueSource {
    bins: Vec<BinSpec>,
    pool: Vec<u8>,
    rng: SmallRng,
}

impl ValueSource {
    pub fn new(bins: Vec<BinSpec>, seed: u64) -> ValueSource {
        assert!(!bins.is_empty());
        let mut rng = SmallRng::seed_from_u64(seed);
        let longest = bins
            .iter()
            .map(|spec| match spec {
                BinSpec::Integer => 8,
                BinSpec::String { bytes } | BinSpec::Blob { bytes } => *bytes,
            })
            .max()
            .unwrap_or(8);
        let pool_bytes = VALUE_POOL_BYTES.max(longest * 2);
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let pool = (0..pool_bytes)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
            .collect();
        ValueSource { bins, pool, rng }
    }

    pub fn bins(&self) -> &[BinSpec] {
        &self.bins
    }

    /// Calls `each(index, spec, value)` for every bin with a fresh value.
    // PERF: hot path
    pub fn for_each_value(&mut self, mut each: impl FnMut(usize, BinSpec, &[u8])) {
        for (index, spec) in self.bins.iter().enumerate() {
            match *spec {
                BinSpec::Integer => {
                    let value: i64 = self.rng.random();
                    each(index, *spec, &value.to_be_bytes());
                }
                BinSpec::String { bytes } | BinSpec::Blob { bytes } => {
                    let offset = self.rng.random_range(0..=self.pool.len() - bytes);
                    each(index, *spec, &self.pool[offset..offset + bytes]);
                }
            }
        }
    }
}

/// The name of bin `index`: `bin0`, `bin1`, … (well under 15 bytes).
pub fn bin_name(index: usize) -> String {
    format!("bin{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_the_asked_sizes_and_are_text() {
        let mut source = ValueSource::new(
            vec![
                BinSpec::Integer,
                BinSpec::String { bytes: 100 },
                BinSpec::Blob { bytes: 200_000 },
            ],
            9,
        );
        let mut sizes = Vec::new();
        source.for_each_value(|index, _, value| {
            sizes.push((index, value.len()));
            assert!(value.is_ascii() || index == 0);
        });
        assert_eq!(sizes, vec![(0, 8), (1, 100), (2, 200_000)]);
    }
}
