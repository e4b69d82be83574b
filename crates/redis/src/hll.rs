//! HyperLogLog as Redis keeps it: a string value in Redis's dense format
//! (so GET/SET round-trip it and Redis's counts come out), with Redis's
//! hash (MurmurHash64A, seed 0xadc83b19) and estimator.
//!
//! ```text
//! "HYLL" · encoding u8 (0 dense) · 3 zero bytes · cached cardinality u64 LE
//! (its top bit set: stale) · 16,384 registers of 6 bits, packed LSB first
//! ```
//!
//! Bolide writes the dense form only; a sparse HLL written by Redis (SET of
//! its bytes) is read and turned dense on its first change.

pub const P: u32 = 14;
pub const REGISTERS: usize = 1 << P;
const Q: u32 = 64 - P;
const HEADER_BYTES: usize = 16;
pub const DENSE_BYTES: usize = HEADER_BYTES + (REGISTERS * 6).div_ceil(8);
const MAGIC: &[u8] = b"HYLL";
pub const INVALID: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";

/// Registers of an HLL string, or None if the bytes are not one.
pub fn registers(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC {
        return None;
    }
    let mut registers = vec![0u8; REGISTERS];
    match bytes[4] {
        0 => {
            if bytes.len() != DENSE_BYTES {
                return None;
            }
            let dense = &bytes[HEADER_BYTES..];
            for (index, register) in registers.iter_mut().enumerate() {
                *register = get_dense(dense, index);
            }
        }
        1 => {
            // Sparse: ZERO 00xxxxxx (1-64 zero registers), XZERO
            // 01xxxxxx yyyyyyyy (1-16384 zeros), VAL 1vvvvvxx (value
            // 1-32, run 1-4).
            let mut index = 0usize;
            let mut at = HEADER_BYTES;
            while at < bytes.len() {
                let byte = bytes[at];
                if byte & 0xc0 == 0 {
                    index += usize::from(byte & 0x3f) + 1;
                    at += 1;
                } else if byte & 0xc0 == 0x40 {
                    let low = *bytes.get(at + 1)?;
                    index += ((usize::from(byte & 0x3f) << 8) | usize::from(low)) + 1;
                    at += 2;
                } else {
                    let value = ((byte >> 2) & 0x1f) + 1;
                    let run = usize::from(byte & 0x03) + 1;
                    for _ in 0..run {
                        *registers.get_mut(index)? = value;
                        index += 1;
                    }
                    at += 1;
                }
            }
            if index != REGISTERS {
                return None;
            }
        }
        _ => return None,
    }
    Some(registers)
}

fn get_dense(dense: &[u8], index: usize) -> u8 {
    let bit = index * 6;
    let byte = bit / 8;
    let shift = bit % 8;
    let low = u16::from(dense[byte]);
    let high = u16::from(dense.get(byte + 1).copied().unwrap_or(0));
    (((low | (high << 8)) >> shift) & 0x3f) as u8
}

/// The dense string of `registers`, its cached cardinality marked stale.
pub fn encode(registers: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; DENSE_BYTES];
    out[..4].copy_from_slice(MAGIC);
    out[15] = 0x80;
    let dense = &mut out[HEADER_BYTES..];
    for (index, &value) in registers.iter().enumerate() {
        let bit = index * 6;
        let byte = bit / 8;
        let shift = bit % 8;
        let wide = u16::from(value & 0x3f) << shift;
        dense[byte] |= (wide & 0xff) as u8;
        if let Some(next) = dense.get_mut(byte + 1) {
            *next |= (wide >> 8) as u8;
        }
    }
    out
}

/// An empty HLL's registers.
pub fn empty() -> Vec<u8> {
    vec![0u8; REGISTERS]
}

/// Adds an element: whether a register changed.
pub fn add(registers: &mut [u8], element: &[u8]) -> bool {
    let hash = murmur64a(element, 0xadc8_3b19);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    let count = rest.trailing_zeros() as u8 + 1;
    if registers[index] < count {
        registers[index] = count;
        true
    } else {
        false
    }
}

/// The estimate (Redis's estimator: Ertl's improved raw estimate).
pub fn count(registers: &[u8]) -> u64 {
    let m = REGISTERS as f64;
    let mut histogram = [0u32; 64];
    for &register in registers {
        histogram[usize::from(register.min(63))] += 1;
    }
    let q = Q as usize;
    let mut z = m * tau((m - f64::from(histogram[q + 1])) / m);
    for j in (1..=q).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (0.721_347_520_444_481_7 * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

/// MurmurHash64A, as Redis's HyperLogLog hashes elements.
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut k = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &byte) in tail.iter().enumerate() {
            h ^= u64::from(byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_the_standard_error_and_round_trips() {
        let mut many = empty();
        assert_eq!(count(&many), 0);
        for i in 0..100_000u32 {
            add(&mut many, format!("element:{i}").as_bytes());
        }
        let estimate = count(&many) as f64;
        assert!(
            (estimate - 100_000.0).abs() / 100_000.0 < 0.03,
            "{estimate}"
        );
        let bytes = encode(&many);
        assert_eq!(bytes.len(), 12_304);
        assert_eq!(registers(&bytes).as_deref(), Some(many.as_slice()));
        let mut small = empty();
        assert!(add(&mut small, b"a"));
        assert!(!add(&mut small, b"a"));
        add(&mut small, b"b");
        add(&mut small, b"c");
        assert_eq!(count(&small), 3);
    }

    #[test]
    fn reads_redis_sparse_strings() {
        // Every register zero: two XZERO opcodes of 8192.
        let mut sparse = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        sparse.extend_from_slice(&[0x40 | 0x1f, 0xff, 0x40 | 0x1f, 0xff]);
        assert_eq!(registers(&sparse).map(|r| count(&r)), Some(0));
        assert_eq!(registers(b"HYLL\x00short"), None);
        assert_eq!(registers(b"not an hll at all"), None);
    }
}
