//! The values a UDF sees and returns, and their conversion to and from bin
//! particles and the clients' msgpack (UDF arguments, list and map bins).
//!
//! Inside msgpack, strings, blobs and GeoJSON are msgpack str items whose
//! first byte is the particle type, as the clients pack them.

use bolide_types::particle;
use bolide_wire::msgpack::{Item, Reader};

/// Deepest list/map nesting converted (deeper input is refused).
pub const DEPTH_MAX: usize = 64;

/// A UDF value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
    /// A blob and its particle type (4, or a language blob 7–12, or HLL).
    Bytes(u8, Vec<u8>),
    /// GeoJSON text.
    Geo(Vec<u8>),
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

/// Why bytes could not become a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadValue;

impl Value {
    /// The value of a stored bin.
    pub fn from_particle(particle_type: u8, bytes: &[u8]) -> Result<Value, BadValue> {
        Ok(match particle_type {
            particle::NULL => Value::Nil,
            particle::INTEGER => {
                Value::Int(i64::from_be_bytes(bytes.try_into().map_err(|_| BadValue)?))
            }
            particle::FLOAT => Value::Float(f64::from_bits(u64::from_be_bytes(
                bytes.try_into().map_err(|_| BadValue)?,
            ))),
            particle::STRING => Value::Str(bytes.to_vec()),
            particle::BOOL => Value::Bool(bytes.first().is_some_and(|&b| b != 0)),
            particle::GEOJSON => Value::Geo(geo_text(bytes).ok_or(BadValue)?.to_vec()),
            particle::LIST | particle::MAP => Value::from_msgpack(bytes)?,
            other => Value::Bytes(other, bytes.to_vec()),
        })
    }

    /// The particle type and bytes this value is stored as.
    pub fn to_particle(&self) -> (u8, Vec<u8>) {
        match self {
            Value::Nil => (particle::NULL, Vec::new()),
            Value::Bool(b) => (particle::BOOL, vec![u8::from(*b)]),
            Value::Int(i) => (particle::INTEGER, i.to_be_bytes().to_vec()),
            Value::Float(f) => (particle::FLOAT, f.to_bits().to_be_bytes().to_vec()),
            Value::Str(s) => (particle::STRING, s.clone()),
            Value::Bytes(kind, bytes) => (*kind, bytes.clone()),
            Value::Geo(text) => {
                // Flags, no cells, then the text (as the clients send it).
                let mut stored = vec![0, 0, 0];
                stored.extend_from_slice(text);
                (particle::GEOJSON, stored)
            }
            Value::List(_) => (particle::LIST, self.to_msgpack()),
            Value::Map(_) => (particle::MAP, self.to_msgpack()),
        }
    }

    /// One msgpack item (the whole input).
    pub fn from_msgpack(bytes: &[u8]) -> Result<Value, BadValue> {
        let mut reader = Reader::new(bytes);
        let value = read(&mut reader, 0)?;
        if reader.remaining().is_empty() {
            Ok(value)
        } else {
            Err(BadValue)
        }
    }

    /// A msgpack array's elements (UDF_ARGLIST).
    pub fn list_from_msgpack(bytes: &[u8]) -> Result<Vec<Value>, BadValue> {
        match Value::from_msgpack(bytes)? {
            Value::List(items) => Ok(items),
            _ => Err(BadValue),
        }
    }

    pub fn to_msgpack(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_msgpack(&mut out);
        out
    }

    pub fn write_msgpack(&self, out: &mut Vec<u8>) {
        match self {
            Value::Nil => out.push(0xc0),
            Value::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Value::Int(i) => write_int(out, *i),
            Value::Float(f) => {
                out.push(0xcb);
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
            Value::Str(s) => write_typed(out, particle::STRING, s),
            Value::Bytes(kind, bytes) => write_typed(out, *kind, bytes),
            Value::Geo(text) => write_typed(out, particle::GEOJSON, text),
            Value::List(items) => {
                write_header(out, 0x90, 0xdc, items.len());
                for item in items {
                    item.write_msgpack(out);
                }
            }
            Value::Map(pairs) => {
                write_header(out, 0x80, 0xde, pairs.len());
                for (key, value) in pairs {
                    key.write_msgpack(out);
                    value.write_msgpack(out);
                }
            }
        }
    }
}

/// The text of a stored GeoJSON particle: flags, u16 cell count, cells, text.
fn geo_text(value: &[u8]) -> Option<&[u8]> {
    let count = u16::from_be_bytes([*value.get(1)?, *value.get(2)?]) as usize;
    value.get(3 + 8 * count..)
}

fn read(reader: &mut Reader<'_>, depth: usize) -> Result<Value, BadValue> {
    if depth > DEPTH_MAX {
        return Err(BadValue);
    }
    Ok(match reader.item().map_err(|_| BadValue)? {
        Item::Nil => Value::Nil,
        Item::Bool(b) => Value::Bool(b),
        Item::Int(i) => Value::Int(i),
        // Above i64: kept as its bit pattern, as the server's msgpack reader does.
        Item::Uint(u) => Value::Int(u as i64),
        Item::Float(f) => Value::Float(f),
        Item::Str(data) | Item::Bin(data) => match data.split_first() {
            None => Value::Str(Vec::new()),
            Some((&particle::STRING, rest)) => Value::Str(rest.to_vec()),
            Some((&particle::GEOJSON, rest)) => Value::Geo(rest.to_vec()),
            Some((&kind, rest)) => Value::Bytes(kind, rest.to_vec()),
        },
        Item::Array(count) => {
            let mut items = Vec::with_capacity((count as usize).min(reader.remaining().len()));
            for i in 0..count {
                let item = read(reader, depth + 1)?;
                // An ordered list's leading flags element is not a value.
                if i == 0 && is_metadata(&item) {
                    continue;
                }
                items.push(item);
            }
            Value::List(items)
        }
        Item::Map(count) => {
            let mut pairs = Vec::with_capacity((count as usize).min(reader.remaining().len()));
            for i in 0..count {
                let key = read(reader, depth + 1)?;
                let value = read(reader, depth + 1)?;
                if i == 0 && is_metadata(&key) {
                    continue;
                }
                pairs.push((key, value));
            }
            Value::Map(pairs)
        }
        // Ext items (order metadata, wildcards) carry no value.
        Item::Ext(..) => Value::Bytes(0xff, Vec::new()),
    })
}

fn is_metadata(value: &Value) -> bool {
    matches!(value, Value::Bytes(0xff, bytes) if bytes.is_empty())
}

fn write_typed(out: &mut Vec<u8>, kind: u8, bytes: &[u8]) {
    let len = bytes.len() + 1;
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len < 256 {
        out.push(0xd9);
        out.push(len as u8);
    } else if len < 65536 {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.push(kind);
    out.extend_from_slice(bytes);
}

fn write_header(out: &mut Vec<u8>, fix: u8, wide: u8, count: usize) {
    if count < 16 {
        out.push(fix | count as u8);
    } else if count < 65536 {
        out.push(wide);
        out.extend_from_slice(&(count as u16).to_be_bytes());
    } else {
        out.push(wide + 1);
        out.extend_from_slice(&(count as u32).to_be_bytes());
    }
}

fn write_int(out: &mut Vec<u8>, value: i64) {
    if (-32..128).contains(&value) {
        // Positive and negative fixints.
        out.push(value as u8);
    } else if value >= 0 {
        if value < 256 {
            out.push(0xcc);
            out.push(value as u8);
        } else if value < 65536 {
            out.push(0xcd);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        } else if value <= i64::from(u32::MAX) {
            out.push(0xce);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(value as u64).to_be_bytes());
        }
    } else if value >= -128 {
        out.push(0xd0);
        out.push(value as u8);
    } else if value >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(value as i16).to_be_bytes());
    } else if value >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(value as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_msgpack_and_particles() {
        let value = Value::List(vec![
            Value::Int(-1),
            Value::Int(300),
            Value::Int(i64::MIN),
            Value::Str(b"abc".to_vec()),
            Value::Bytes(4, vec![1, 2]),
            Value::Map(vec![(Value::Str(b"k".to_vec()), Value::Float(1.5))]),
            Value::Bool(true),
            Value::Nil,
            Value::Geo(br#"{"type":"Point","coordinates":[1,2]}"#.to_vec()),
        ]);
        assert_eq!(Value::from_msgpack(&value.to_msgpack()), Ok(value.clone()));
        let (kind, bytes) = value.to_particle();
        assert_eq!(kind, particle::LIST);
        assert_eq!(Value::from_particle(kind, &bytes), Ok(value));
        for scalar in [
            Value::Int(7),
            Value::Float(-2.5),
            Value::Str(b"x".to_vec()),
            Value::Bool(false),
        ] {
            let (kind, bytes) = scalar.to_particle();
            assert_eq!(Value::from_particle(kind, &bytes), Ok(scalar));
        }
    }

    #[test]
    fn hostile_msgpack_is_refused() {
        assert_eq!(Value::from_msgpack(&[0x91; 200]), Err(BadValue));
        assert_eq!(
            Value::from_msgpack(&[0xdd, 0xff, 0xff, 0xff, 0xff]),
            Err(BadValue)
        );
        assert_eq!(Value::from_msgpack(&[0x01, 0x02]), Err(BadValue));
        assert_eq!(
            Value::from_particle(particle::INTEGER, &[1, 2]),
            Err(BadValue)
        );
        for len in 0..64 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 53 + 0x80) as u8).collect();
            let _ = Value::from_msgpack(&bytes);
        }
    }
}
