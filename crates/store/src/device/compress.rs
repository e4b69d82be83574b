//! Storage compression: the methods a record's entry may be stored with,
//! and the namespace setting (`compression`, `compression-level`,
//! `compression-acceleration`, as Aerospike Enterprise names them).
//!
//! Only the record bytes of an entry are compressed; the entry header and
//! the set name stay plain, and the header records the method and the
//! uncompressed length. A record that does not get smaller is stored plain.
//! Each thread keeps its own compressor state (zstd's contexts, snappy's
//! hash table), so compressing costs no allocation and takes no lock.

use std::cell::RefCell;

/// How one entry's record bytes are stored (byte 56 of a version-2 entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Method {
    #[default]
    None = 0,
    Lz4 = 1,
    Snappy = 2,
    Zstd = 3,
}

impl Method {
    pub const ALL: [Method; 4] = [Method::None, Method::Lz4, Method::Snappy, Method::Zstd];

    /// The name the configuration and info use.
    pub fn name(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::Lz4 => "lz4",
            Method::Snappy => "snappy",
            Method::Zstd => "zstd",
        }
    }

    pub fn parse(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The method a stored byte names; None for an unknown byte.
    pub fn from_byte(byte: u8) -> Option<Method> {
        Method::ALL.into_iter().find(|&m| m as u8 == byte)
    }
}

/// `compression-level`: 1 (fastest) to 9 (smallest), zstd only.
pub const LEVEL_MAX: u32 = 9;
/// The zstd level when none is set (Aerospike's `NS_COMPRESSION_LEVEL`).
pub const LEVEL_DEFAULT: u32 = 9;
/// `compression-acceleration`: 1 to 65537, lz4 only; higher is faster
/// with a lower ratio.
pub const ACCELERATION_MAX: u32 = 65_537;
pub const ACCELERATION_DEFAULT: u32 = 1;

/// A namespace's compression setting. Level and acceleration 0 mean
/// "not set": zstd then uses level 9 and lz4 acceleration 1, and info shows
/// those.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compression {
    pub method: Method,
    pub level: u32,
    pub acceleration: u32,
}

impl Compression {
    /// The zstd level in effect.
    pub fn effective_level(&self) -> u32 {
        if self.level == 0 {
            LEVEL_DEFAULT
        } else {
            self.level.min(LEVEL_MAX)
        }
    }

    /// The lz4 acceleration in effect.
    pub fn effective_acceleration(&self) -> u32 {
        if self.acceleration == 0 {
            ACCELERATION_DEFAULT
        } else {
            self.acceleration.min(ACCELERATION_MAX)
        }
    }

    /// Packs the setting into one word (the device keeps it in an atomic,
    /// so `set-config` changes it while writes go on).
    pub(crate) fn pack(self) -> u64 {
        u64::from(self.method as u8)
            | u64::from(self.level.min(0xFF)) << 8
            | u64::from(self.acceleration) << 16
    }

    pub(crate) fn unpack(word: u64) -> Compression {
        Compression {
            method: Method::from_byte(word as u8).unwrap_or_default(),
            level: (word >> 8) as u32 & 0xFF,
            acceleration: (word >> 16) as u32,
        }
    }
}

/// Why stored bytes could not be decompressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Undecodable;

struct Codecs {
    zstd: Option<zstd::bulk::Compressor<'static>>,
    zstd_out: Option<zstd::bulk::Decompressor<'static>>,
    snappy: snap::raw::Encoder,
    snappy_out: snap::raw::Decoder,
}

thread_local! {
    static CODECS: RefCell<Codecs> = RefCell::new(Codecs {
        zstd: None,
        zstd_out: None,
        snappy: snap::raw::Encoder::new(),
        snappy_out: snap::raw::Decoder::new(),
    });
}

/// Compresses `input` with `setting` into `out` (replacing its contents).
/// False if the method is `none` or the codec failed: store plain then.
/// The caller decides whether the result is small enough to be worth it.
pub fn compress(setting: Compression, input: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    match setting.method {
        Method::None => false,
        Method::Lz4 => {
            let Ok(bound) = lz4::block::compress_bound(input.len()) else {
                return false;
            };
            out.resize(bound, 0);
            let acceleration = setting.effective_acceleration() as i32;
            let mode = Some(lz4::block::CompressionMode::FAST(acceleration));
            match lz4::block::compress_to_buffer(input, mode, false, out) {
                Ok(written) => {
                    out.truncate(written);
                    true
                }
                Err(_) => false,
            }
        }
        Method::Snappy => CODECS.with(|codecs| {
            let mut codecs = codecs.borrow_mut();
            out.resize(snap::raw::max_compress_len(input.len()), 0);
            match codecs.snappy.compress(input, out) {
                Ok(written) => {
                    out.truncate(written);
                    true
                }
                Err(_) => false,
            }
        }),
        Method::Zstd => CODECS.with(|codecs| {
            let mut codecs = codecs.borrow_mut();
            let level = setting.effective_level() as i32;
            if codecs.zstd.is_none() {
                codecs.zstd = zstd::bulk::Compressor::new(level).ok();
            }
            let Some(compressor) = codecs.zstd.as_mut() else {
                return false;
            };
            if compressor.set_compression_level(level).is_err() {
                return false;
            }
            out.reserve(zstd::zstd_safe::compress_bound(input.len()));
            compressor.compress_to_buffer(input, out).is_ok()
        }),
    }
}

/// Decompresses `input`, stored with `method`, into `out` (replacing its
/// contents); it must come to exactly `plain_len` bytes.
pub fn decompress(
    method: Method,
    input: &[u8],
    plain_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), Undecodable> {
    out.clear();
    let written = match method {
        Method::None => {
            out.extend_from_slice(input);
            input.len()
        }
        Method::Lz4 => {
            out.resize(plain_len, 0);
            let size = i32::try_from(plain_len).map_err(|_| Undecodable)?;
            lz4::block::decompress_to_buffer(input, Some(size), out).map_err(|_| Undecodable)?
        }
        Method::Snappy => CODECS.with(|codecs| {
            if snap::raw::decompress_len(input).ok() != Some(plain_len) {
                return Err(Undecodable);
            }
            out.resize(plain_len, 0);
            codecs
                .borrow_mut()
                .snappy_out
                .decompress(input, out)
                .map_err(|_| Undecodable)
        })?,
        Method::Zstd => CODECS.with(|codecs| {
            let mut codecs = codecs.borrow_mut();
            if codecs.zstd_out.is_none() {
                codecs.zstd_out = zstd::bulk::Decompressor::new().ok();
            }
            let decompressor = codecs.zstd_out.as_mut().ok_or(Undecodable)?;
            // The output goes into the capacity reserved and never beyond
            // it: a damaged frame claiming more fails instead of allocating.
            out.reserve(plain_len);
            decompressor
                .decompress_to_buffer(input, out)
                .map_err(|_| Undecodable)
        })?,
    };
    if written != plain_len || out.len() != plain_len {
        return Err(Undecodable);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_like(n: usize) -> Vec<u8> {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "{{\"id\":{i},\"name\":\"user-{i}\",\"active\":true,\"tags\":[\"a\",\"b\"]}},"
            ));
        }
        text.into_bytes()
    }

    fn random(n: usize, mut state: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) as u8
            })
            .collect()
    }

    #[test]
    fn every_method_round_trips_and_shrinks_what_repeats() {
        let input = json_like(50);
        for method in [Method::Lz4, Method::Snappy, Method::Zstd] {
            for (level, acceleration) in [(0, 0), (1, 1), (9, 100)] {
                let setting = Compression {
                    method,
                    level,
                    acceleration,
                };
                let mut packed = Vec::new();
                assert!(compress(setting, &input, &mut packed), "{method:?}");
                // Much smaller at the defaults; smaller at any setting (lz4's
                // acceleration 100 trades most of the ratio for speed).
                let bound = if acceleration > 1 { 1 } else { 3 };
                assert!(
                    packed.len() * bound < input.len(),
                    "{method:?}: {}",
                    packed.len()
                );
                let mut back = Vec::new();
                decompress(method, &packed, input.len(), &mut back).expect("decodes");
                assert_eq!(back, input);
                assert_eq!(Compression::unpack(setting.pack()), setting);
            }
        }
    }

    #[test]
    fn damaged_or_mislabelled_input_is_refused_not_trusted() {
        let input = json_like(20);
        for method in [Method::Lz4, Method::Snappy, Method::Zstd] {
            let setting = Compression {
                method,
                ..Compression::default()
            };
            let mut packed = Vec::new();
            assert!(compress(setting, &input, &mut packed));
            let mut out = Vec::new();
            // The wrong length.
            assert_eq!(
                decompress(method, &packed, input.len() + 1, &mut out),
                Err(Undecodable)
            );
            // Random bytes under every method, at every length: never a panic.
            for n in 0..64 {
                let junk = random(n, n as u64);
                let _ = decompress(method, &junk, 100, &mut out);
            }
        }
    }

    #[test]
    fn random_bytes_do_not_shrink() {
        let input = random(4096, 7);
        for method in [Method::Lz4, Method::Snappy, Method::Zstd] {
            let mut packed = Vec::new();
            let setting = Compression {
                method,
                ..Compression::default()
            };
            let compressed = compress(setting, &input, &mut packed);
            assert!(!compressed || packed.len() >= input.len(), "{method:?}");
        }
        assert!(!compress(Compression::default(), &input, &mut Vec::new()));
    }

    #[test]
    fn methods_parse_by_name_and_byte() {
        for method in Method::ALL {
            assert_eq!(Method::parse(method.name()), Some(method));
            assert_eq!(Method::from_byte(method as u8), Some(method));
        }
        assert_eq!(Method::parse("gzip"), None);
        assert_eq!(Method::from_byte(9), None);
    }
}
