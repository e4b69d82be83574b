//! Redis values and how they sit in a record (one record per Redis key;
//! docs/redis.md has the table). The record has one value bin named after
//! the type, and, when the key has a TTL, a `pexp` bin:
//!
//! ```text
//! string  bin "str"   blob (raw bytes; bitmaps and HyperLogLogs too)
//! hash    bin "hash"  map  {field: value}
//! list    bin "list"  list [element, …]
//! set     bin "set"   map  {member: nil}
//! zset    bin "zset"  map  {member: score (double)}
//! stream  bin "stream" map (crate::streams has the layout)
//! expiry  bin "pexp"  integer: absolute expiry, ms since the Unix epoch
//! ```
//!
//! Strings inside lists and maps are msgpack strings with Aerospike's
//! particle-type prefix (3: string when the bytes are UTF-8, else 4: blob),
//! so the Aerospike clients read them as their own strings and bytes.

use bolide_types::particle;
use bolide_wire::msgpack::{Item, Reader};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub const BIN_STRING: &[u8] = b"str";
pub const BIN_HASH: &[u8] = b"hash";
pub const BIN_LIST: &[u8] = b"list";
pub const BIN_SET: &[u8] = b"set";
pub const BIN_ZSET: &[u8] = b"zset";
pub const BIN_EXPIRY: &[u8] = b"pexp";

/// One Redis value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    List(VecDeque<Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    /// member → score.
    ZSet(BTreeMap<Vec<u8>, f64>),
    Stream(Box<crate::streams::Stream>),
}

impl Value {
    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    /// An empty collection: its key must not exist.
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(map) => map.is_empty(),
            Value::List(list) => list.is_empty(),
            Value::Set(set) => set.is_empty(),
            Value::ZSet(zset) => zset.is_empty(),
            // An empty stream keeps its key, as in Redis.
            Value::Stream(_) => false,
        }
    }

    /// The value bin: name, particle type, value bytes.
    pub fn encode(&self) -> (&'static [u8], u8, Vec<u8>) {
        match self {
            Value::Str(bytes) => (BIN_STRING, particle::BLOB, bytes.clone()),
            Value::Hash(map) => {
                let mut out = Vec::new();
                map_header(&mut out, map.len());
                for (field, value) in map {
                    string(&mut out, field);
                    string(&mut out, value);
                }
                (BIN_HASH, particle::MAP, out)
            }
            Value::List(list) => {
                let mut out = Vec::new();
                array_header(&mut out, list.len());
                for element in list {
                    string(&mut out, element);
                }
                (BIN_LIST, particle::LIST, out)
            }
            Value::Set(set) => {
                let mut out = Vec::new();
                map_header(&mut out, set.len());
                for member in set {
                    string(&mut out, member);
                    out.push(0xc0);
                }
                (BIN_SET, particle::MAP, out)
            }
            Value::ZSet(zset) => {
                let mut out = Vec::new();
                map_header(&mut out, zset.len());
                for (member, score) in zset {
                    string(&mut out, member);
                    out.push(0xcb);
                    out.extend_from_slice(&score.to_bits().to_be_bytes());
                }
                (BIN_ZSET, particle::MAP, out)
            }
            Value::Stream(stream) => (crate::streams::BIN_STREAM, particle::MAP, stream.encode()),
        }
    }

    /// The value a bin holds, if it is one of the Redis bins. Values an
    /// Aerospike client wrote (integers, doubles in a hash) read as their
    /// decimal text.
    pub fn decode(name: &[u8], particle_type: u8, bytes: &[u8]) -> Option<Value> {
        match name {
            BIN_STRING => Some(Value::Str(match particle_type {
                particle::INTEGER => i64::from_be_bytes(bytes.try_into().ok()?)
                    .to_string()
                    .into_bytes(),
                _ => bytes.to_vec(),
            })),
            BIN_HASH => {
                let mut reader = Reader::new(bytes);
                let n = map_len(&mut reader)?;
                let mut map = BTreeMap::new();
                for _ in 0..n {
                    let field = scalar(&mut reader)?;
                    let value = scalar(&mut reader)?;
                    map.insert(field, value);
                }
                Some(Value::Hash(map))
            }
            BIN_LIST => {
                let mut reader = Reader::new(bytes);
                let n = match reader.item().ok()? {
                    Item::Array(n) => n,
                    _ => return None,
                };
                let mut list = VecDeque::new();
                for index in 0..n {
                    if index == 0 {
                        // An ordered list carries an ext header first.
                        let mut peek = reader.clone();
                        if let Ok(Item::Ext(..)) = peek.item() {
                            reader = peek;
                            continue;
                        }
                    }
                    list.push_back(scalar(&mut reader)?);
                }
                Some(Value::List(list))
            }
            BIN_SET => {
                let mut reader = Reader::new(bytes);
                let n = map_len(&mut reader)?;
                let mut set = BTreeSet::new();
                for _ in 0..n {
                    set.insert(scalar(&mut reader)?);
                    reader.skip().ok()?;
                }
                Some(Value::Set(set))
            }
            BIN_ZSET => {
                let mut reader = Reader::new(bytes);
                let n = map_len(&mut reader)?;
                let mut zset = BTreeMap::new();
                for _ in 0..n {
                    let member = scalar(&mut reader)?;
                    let score = match reader.item().ok()? {
                        Item::Float(f) => f,
                        Item::Int(i) => i as f64,
                        Item::Uint(u) => u as f64,
                        _ => return None,
                    };
                    zset.insert(member, score);
                }
                Some(Value::ZSet(zset))
            }
            crate::streams::BIN_STREAM => {
                crate::streams::Stream::decode(bytes).map(|s| Value::Stream(Box::new(s)))
            }
            _ => None,
        }
    }
}

/// A map's entry count, skipping the ext header an ordered map starts with.
pub(crate) fn map_len(reader: &mut Reader<'_>) -> Option<u32> {
    let n = match reader.item().ok()? {
        Item::Map(n) => n,
        _ => return None,
    };
    let mut peek = reader.clone();
    if let Ok(Item::Ext(..)) = peek.item() {
        // Ordered map: [ext, nil] first.
        peek.skip().ok()?;
        *reader = peek;
        return Some(n.saturating_sub(1));
    }
    Some(n)
}

/// A string, blob, number or nil inside a collection, as Redis bytes.
fn scalar(reader: &mut Reader<'_>) -> Option<Vec<u8>> {
    Some(match reader.item().ok()? {
        Item::Str(bytes) | Item::Bin(bytes) => match bytes.split_first() {
            Some((&prefix, rest)) if prefix == particle::STRING || prefix == particle::BLOB => {
                rest.to_vec()
            }
            Some((&prefix, rest)) if (7..=12).contains(&prefix) => rest.to_vec(),
            _ => bytes.to_vec(),
        },
        Item::Int(i) => i.to_string().into_bytes(),
        Item::Uint(u) => u.to_string().into_bytes(),
        Item::Float(f) => crate::resp::format_g(f, 17).into_bytes(),
        Item::Bool(b) => (if b { "1" } else { "0" }).as_bytes().to_vec(),
        Item::Nil => Vec::new(),
        _ => return None,
    })
}

pub(crate) fn map_header(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x80 | n as u8);
    } else if n <= 0xffff {
        out.push(0xde);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

pub(crate) fn array_header(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= 0xffff {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Bytes as a msgpack string with Aerospike's particle prefix.
pub(crate) fn string(out: &mut Vec<u8>, bytes: &[u8]) {
    let prefix = if std::str::from_utf8(bytes).is_ok() {
        particle::STRING
    } else {
        particle::BLOB
    };
    let n = bytes.len() + 1;
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.push(0xd9);
        out.push(n as u8);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.push(prefix);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_bin() {
        let mut hash = BTreeMap::new();
        hash.insert(b"f".to_vec(), b"v".to_vec());
        hash.insert(vec![0xff, 0], vec![b'x'; 300]);
        let mut zset = BTreeMap::new();
        zset.insert(b"a".to_vec(), 1.5);
        zset.insert(b"b".to_vec(), f64::NEG_INFINITY);
        let values = [
            Value::Str(b"bytes\0".to_vec()),
            Value::Hash(hash),
            Value::List((0..40).map(|i| format!("e{i}").into_bytes()).collect()),
            Value::Set([b"m".to_vec(), b"n".to_vec()].into_iter().collect()),
            Value::ZSet(zset),
        ];
        for value in values {
            let (name, particle_type, bytes) = value.encode();
            assert_eq!(Value::decode(name, particle_type, &bytes), Some(value));
        }
    }
}
