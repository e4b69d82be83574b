//! The msgpack value model of list and map elements: Aerospike's total
//! order over msgpack values, the container metadata (ordered-list and
//! ordered-map flags), a small msgpack writer, and the conversion of a
//! result element into a bin particle.
//!
//! Elements stay as the client's msgpack bytes; nothing is re-encoded, so
//! elements an op does not touch come back byte for byte.

use bolide_types::{particle, ResultCode};
use bolide_wire::msgpack::{Item, Reader};
use std::borrow::Cow;
use std::cmp::Ordering;

/// The ext type marking the comparison-only values (wildcard, infinity).
const CMP_EXT_TYPE: i8 = -1;

/// Container flag: an ordered list.
pub const LIST_ORDERED: u8 = 0x01;
/// Map flags: key-ordered, key-value-ordered, and "preserve order" (a
/// result map the clients unpack into a list of pairs).
pub const MAP_K_ORDERED: u8 = 0x01;
pub const MAP_KV_ORDERED: u8 = 0x03;
pub const MAP_PRESERVE_ORDER: u8 = 0x08;

/// Elements a container may hold (every element is at least one byte).
fn capacity_for(count: u32, bytes: &[u8]) -> usize {
    (count as usize).min(bytes.len())
}

/// The type ranks of Aerospike's value order: nil < false < true <
/// negative int < int < string < list < map < bytes < double < geojson <
/// other ext; wildcard matches anything and infinity is above everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Nil = 1,
    False,
    True,
    NegInt,
    Int,
    Str,
    List,
    Map,
    Bytes,
    Double,
    GeoJson,
    Ext,
    Wildcard,
    Inf,
}

/// One item's header as the comparison sees it.
struct Head<'a> {
    rank: Rank,
    int: u64,
    double: f64,
    data: &'a [u8],
    /// Elements (lists) or keys plus values (maps) that follow.
    children: u64,
}

fn raw_rank(data: &[u8]) -> Rank {
    match data.first() {
        None => Rank::Bytes,
        Some(&particle::STRING) => Rank::Str,
        Some(&particle::GEOJSON) => Rank::GeoJson,
        Some(_) => Rank::Bytes,
    }
}

fn is_ext_marker(byte: u8) -> bool {
    matches!(byte, 0xc7..=0xc9 | 0xd4..=0xd8)
}

/// Reads one item header; for a container starting with a metadata ext
/// element, skips that element (one item in a list, a pair in a map).
fn head<'a>(reader: &mut Reader<'a>) -> Result<Head<'a>, ResultCode> {
    let item = reader.item().map_err(|_| ResultCode::Parameter)?;
    let mut head = Head {
        rank: Rank::Nil,
        int: 0,
        double: 0.0,
        data: &[],
        children: 0,
    };
    match item {
        Item::Nil => {}
        Item::Bool(false) => head.rank = Rank::False,
        Item::Bool(true) => head.rank = Rank::True,
        Item::Int(value) => {
            head.rank = if value < 0 { Rank::NegInt } else { Rank::Int };
            head.int = value as u64;
        }
        Item::Uint(value) => {
            head.rank = Rank::Int;
            head.int = value;
        }
        Item::Float(value) => {
            head.rank = Rank::Double;
            head.double = value;
        }
        Item::Str(data) | Item::Bin(data) => {
            head.rank = raw_rank(data);
            head.data = data;
        }
        Item::Ext(kind, data) => {
            head.rank = match (kind, data) {
                (CMP_EXT_TYPE, [0]) => Rank::Wildcard,
                (CMP_EXT_TYPE, [1]) => Rank::Inf,
                _ => Rank::Ext,
            };
            head.data = data;
        }
        Item::Array(count) | Item::Map(count) => {
            let per = if matches!(item, Item::Array(_)) { 1 } else { 2 };
            head.rank = if per == 1 { Rank::List } else { Rank::Map };
            head.children = u64::from(count) * per;
            if count > 0 && skip_metadata(reader, per)? {
                head.children -= per;
            }
        }
    }
    Ok(head)
}

/// Skips a leading metadata ext element (and its nil value in a map);
/// true if there was one.
fn skip_metadata(reader: &mut Reader<'_>, items: u64) -> Result<bool, ResultCode> {
    let Some(&first) = reader.remaining().first() else {
        return Ok(false);
    };
    if !is_ext_marker(first) {
        return Ok(false);
    }
    let mut peek = reader.clone();
    if let Ok(Item::Ext(CMP_EXT_TYPE, _)) = peek.item() {
        return Ok(false);
    }
    for _ in 0..items {
        reader.skip().map_err(|_| ResultCode::Parameter)?;
    }
    Ok(true)
}

/// Aerospike's order of two msgpack values (lists element by element then
/// by length; maps by size, then pairs in stored order). A wildcard equals
/// anything, infinity is above anything.
pub fn compare(a: &[u8], b: &[u8]) -> Result<Ordering, ResultCode> {
    let mut left = Reader::new(a);
    let mut right = Reader::new(b);
    let mut count: u64 = 1;
    let mut result = Ordering::Equal;
    let mut i: u64 = 0;
    while i < count {
        let x = head(&mut left)?;
        let y = head(&mut right)?;
        if x.rank == Rank::Wildcard || y.rank == Rank::Wildcard {
            return Ok(Ordering::Equal);
        }
        match x.rank.cmp(&y.rank) {
            Ordering::Equal => {}
            other => return Ok(other),
        }
        match x.rank {
            Rank::NegInt | Rank::Int => match x.int.cmp(&y.int) {
                Ordering::Equal => {}
                other => return Ok(other),
            },
            Rank::Str | Rank::Bytes | Rank::GeoJson | Rank::Ext => match x.data.cmp(y.data) {
                Ordering::Equal => {}
                other => return Ok(other),
            },
            Rank::Double => match x.double.partial_cmp(&y.double) {
                Some(Ordering::Equal) | None => {}
                Some(other) => return Ok(other),
            },
            Rank::List => {
                if x.children == y.children {
                    count += x.children;
                } else {
                    // The shorter list is less unless an element differs
                    // first; nothing after these elements matters.
                    let shorter = x.children.min(y.children);
                    result = x.children.cmp(&y.children);
                    count = shorter + i + 1;
                }
            }
            Rank::Map => {
                match x.children.cmp(&y.children) {
                    Ordering::Equal => {}
                    other => return Ok(other),
                }
                count += x.children;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(result)
}

/// Checks that `bytes` is exactly one well-formed item (bounded depth).
pub fn check_one(bytes: &[u8]) -> Result<(), ResultCode> {
    let mut reader = Reader::new(bytes);
    reader.skip().map_err(|_| ResultCode::Parameter)?;
    if reader.remaining().is_empty() {
        Ok(())
    } else {
        Err(ResultCode::Parameter)
    }
}

/// Splits the next whole item off a reader.
pub fn next_item<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], ResultCode> {
    let before = reader.remaining();
    reader.skip().map_err(|_| ResultCode::Parameter)?;
    let used = before.len() - reader.remaining().len();
    before.get(..used).ok_or(ResultCode::Parameter)
}

/// Whether a value is one of the comparison-only values (never stored).
pub fn is_comparison_only(bytes: &[u8]) -> bool {
    let mut reader = Reader::new(bytes);
    matches!(reader.item(), Ok(Item::Ext(CMP_EXT_TYPE, _)))
}

/// Whether a value is a list (`Some(true)`), a map (`Some(false)`), or
/// neither.
pub fn container_kind(bytes: &[u8]) -> Option<bool> {
    match Reader::new(bytes).item() {
        Ok(Item::Array(_)) => Some(true),
        Ok(Item::Map(_)) => Some(false),
        _ => None,
    }
}

/// A list: its flags and its elements' msgpack bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct List<'a> {
    pub flags: u8,
    pub items: Vec<Cow<'a, [u8]>>,
}

impl<'a> List<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<List<'a>, ResultCode> {
        let mut reader = Reader::new(bytes);
        let Ok(Item::Array(count)) = reader.item() else {
            return Err(ResultCode::IncompatibleType);
        };
        let mut list = List {
            flags: 0,
            items: Vec::with_capacity(capacity_for(count, reader.remaining())),
        };
        for i in 0..count {
            let item = next_item(&mut reader)?;
            if i == 0 {
                if let Ok(Item::Ext(kind, _)) = Reader::new(item).item() {
                    if kind != CMP_EXT_TYPE {
                        list.flags = kind as u8;
                        continue;
                    }
                }
            }
            list.items.push(Cow::Borrowed(item));
        }
        if !reader.remaining().is_empty() {
            return Err(ResultCode::Parameter);
        }
        Ok(list)
    }

    pub fn is_ordered(&self) -> bool {
        self.flags & LIST_ORDERED != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self.items.iter().map(|item| item.len()).sum();
        let mut out = Vec::with_capacity(size + 8);
        let meta = usize::from(self.flags != 0);
        write_array_header(&mut out, self.items.len() + meta);
        if self.flags != 0 {
            write_ext_flags(&mut out, self.flags);
        }
        for item in &self.items {
            out.extend_from_slice(item);
        }
        out
    }
}

/// One map entry: key and value bytes.
pub type Pair<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// A map: its flags and its key/value pairs in stored order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Map<'a> {
    pub flags: u8,
    pub pairs: Vec<Pair<'a>>,
}

impl<'a> Map<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Map<'a>, ResultCode> {
        let mut reader = Reader::new(bytes);
        let Ok(Item::Map(count)) = reader.item() else {
            return Err(ResultCode::IncompatibleType);
        };
        let mut map = Map {
            flags: 0,
            pairs: Vec::with_capacity(capacity_for(count, reader.remaining()) / 2),
        };
        for i in 0..count {
            let key = next_item(&mut reader)?;
            let value = next_item(&mut reader)?;
            if i == 0 {
                if let Ok(Item::Ext(kind, _)) = Reader::new(key).item() {
                    if kind != CMP_EXT_TYPE {
                        map.flags = kind as u8;
                        continue;
                    }
                }
            }
            map.pairs.push((Cow::Borrowed(key), Cow::Borrowed(value)));
        }
        if !reader.remaining().is_empty() {
            return Err(ResultCode::Parameter);
        }
        Ok(map)
    }

    pub fn is_key_ordered(&self) -> bool {
        self.flags & MAP_K_ORDERED != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_pairs(
            self.flags,
            self.pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref())),
        )
    }
}

/// A map from pairs, with a metadata element when `flags` is not zero.
pub fn encode_pairs<'b>(
    flags: u8,
    pairs: impl ExactSizeIterator<Item = (&'b [u8], &'b [u8])>,
) -> Vec<u8> {
    let mut out = Vec::new();
    write_map_header(&mut out, pairs.len() + usize::from(flags != 0));
    if flags != 0 {
        write_ext_flags(&mut out, flags);
        out.push(0xc0);
    }
    for (key, value) in pairs {
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }
    out
}

/// A plain list of the given items.
pub fn encode_items<'b>(items: impl ExactSizeIterator<Item = &'b [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_header(&mut out, items.len());
    for item in items {
        out.extend_from_slice(item);
    }
    out
}

pub fn write_array_header(out: &mut Vec<u8>, count: usize) {
    if count < 16 {
        out.push(0x90 | count as u8);
    } else if let Ok(count) = u16::try_from(count) {
        out.push(0xdc);
        out.extend_from_slice(&count.to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(count as u32).to_be_bytes());
    }
}

pub fn write_map_header(out: &mut Vec<u8>, count: usize) {
    if count < 16 {
        out.push(0x80 | count as u8);
    } else if let Ok(count) = u16::try_from(count) {
        out.push(0xde);
        out.extend_from_slice(&count.to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&(count as u32).to_be_bytes());
    }
}

/// The metadata element: an empty ext whose type carries the flags.
fn write_ext_flags(out: &mut Vec<u8>, flags: u8) {
    out.extend_from_slice(&[0xc7, 0x00, flags]);
}

pub fn write_int(out: &mut Vec<u8>, value: i64) {
    if (-32..128).contains(&value) {
        // positive and negative fixints
        out.push(value as u8);
    } else if let Ok(small) = i8::try_from(value) {
        out.extend_from_slice(&[0xd0, small as u8]);
    } else if let Ok(small) = i16::try_from(value) {
        out.push(0xd1);
        out.extend_from_slice(&small.to_be_bytes());
    } else if let Ok(small) = i32::try_from(value) {
        out.push(0xd2);
        out.extend_from_slice(&small.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// The msgpack family a string or blob is written as.
pub enum Raw {
    Str,
    Bin,
}

/// A msgpack str or bin holding the particle type byte, then `bytes`: how
/// list and map values carry strings, blobs and GeoJSON.
pub fn write_typed_bytes(out: &mut Vec<u8>, raw: Raw, particle_type: u8, bytes: &[u8]) {
    let len = bytes.len() + 1;
    match (raw, u16::try_from(len), u8::try_from(len)) {
        (Raw::Str, _, _) if len < 32 => out.push(0xa0 | len as u8),
        (Raw::Str, _, Ok(len)) => out.extend_from_slice(&[0xd9, len]),
        (Raw::Bin, _, Ok(len)) => out.extend_from_slice(&[0xc4, len]),
        (raw, Ok(len), _) => {
            out.push(if matches!(raw, Raw::Str) { 0xda } else { 0xc5 });
            out.extend_from_slice(&len.to_be_bytes());
        }
        (raw, Err(_), _) => {
            out.push(if matches!(raw, Raw::Str) { 0xdb } else { 0xc6 });
            // Values are bounded by the record size, far below 4 GiB.
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
    out.push(particle_type);
    out.extend_from_slice(bytes);
}

pub fn int_bytes(value: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    write_int(&mut out, value);
    out
}

pub fn float_bytes(value: f64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(0xcb);
    out.extend_from_slice(&value.to_bits().to_be_bytes());
    out
}

/// A number element: integer or double.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    /// `current + delta` as the element an increment stores: an integer
    /// stays an integer (a double delta is truncated and integer overflow
    /// wraps, as the server does), a double stays a double; with no current
    /// element the delta itself.
    pub fn incremented(current: Option<Number>, delta: Number) -> Vec<u8> {
        let sum = match (current, delta) {
            (None, delta) => delta,
            (Some(Number::Int(base)), Number::Int(delta)) => Number::Int(base.wrapping_add(delta)),
            (Some(Number::Int(base)), Number::Float(delta)) => {
                Number::Int(base.wrapping_add(delta as i64))
            }
            (Some(Number::Float(base)), Number::Int(delta)) => Number::Float(base + delta as f64),
            (Some(Number::Float(base)), Number::Float(delta)) => Number::Float(base + delta),
        };
        match sum {
            Number::Int(value) => int_bytes(value),
            Number::Float(value) => float_bytes(value),
        }
    }
}

/// Position of the first element equal to `target` in the server's value
/// order.
pub fn position_of<'x>(
    items: impl IntoIterator<Item = &'x [u8]>,
    target: &[u8],
) -> Result<Option<usize>, ResultCode> {
    for (i, item) in items.into_iter().enumerate() {
        if compare(item, target)? == Ordering::Equal {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

pub fn number(bytes: &[u8]) -> Option<Number> {
    match Reader::new(bytes).item() {
        Ok(Item::Int(value)) => Some(Number::Int(value)),
        Ok(Item::Uint(value)) => Some(Number::Int(value as i64)),
        Ok(Item::Float(value)) => Some(Number::Float(value)),
        _ => None,
    }
}

/// A bin particle: type and value bytes.
pub type Particle = (u8, Vec<u8>);

/// Converts one msgpack element into the particle a result bin carries
/// (integers as 8 bytes, strings without their type byte, lists and maps
/// as msgpack).
pub fn to_particle(bytes: &[u8]) -> Particle {
    let mut reader = Reader::new(bytes);
    match reader.item() {
        Ok(Item::Nil) | Err(_) => (particle::NULL, Vec::new()),
        Ok(Item::Bool(value)) => (particle::BOOL, vec![u8::from(value)]),
        Ok(Item::Int(value)) => (particle::INTEGER, value.to_be_bytes().to_vec()),
        Ok(Item::Uint(value)) => (particle::INTEGER, value.to_be_bytes().to_vec()),
        Ok(Item::Float(value)) => (particle::FLOAT, value.to_bits().to_be_bytes().to_vec()),
        Ok(Item::Str(data) | Item::Bin(data)) => match data.split_first() {
            Some((&particle::STRING, rest)) => (particle::STRING, rest.to_vec()),
            Some((&particle::GEOJSON, rest)) => {
                let mut geo = vec![0, 0, 0];
                geo.extend_from_slice(rest);
                (particle::GEOJSON, geo)
            }
            Some((&kind, rest)) if particle::is_blob(kind) => (kind, rest.to_vec()),
            Some((_, rest)) => (particle::BLOB, rest.to_vec()),
            None => (particle::BLOB, Vec::new()),
        },
        Ok(Item::Array(_)) => (particle::LIST, bytes.to_vec()),
        Ok(Item::Map(_)) => (particle::MAP, bytes.to_vec()),
        Ok(Item::Ext(..)) => (particle::BLOB, bytes.to_vec()),
    }
}

pub fn int_particle(value: i64) -> Particle {
    (particle::INTEGER, value.to_be_bytes().to_vec())
}

pub fn bool_particle(value: bool) -> Particle {
    (particle::BOOL, vec![u8::from(value)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Vec<u8> {
        let mut out = vec![0xa0 | (text.len() as u8 + 1), particle::STRING];
        out.extend_from_slice(text.as_bytes());
        out
    }

    fn cmp(a: &[u8], b: &[u8]) -> Ordering {
        compare(a, b).expect("valid")
    }

    #[test]
    fn type_order() {
        let ordered: Vec<Vec<u8>> = vec![
            vec![0xc0],
            vec![0xc2],
            vec![0xc3],
            vec![0xd0, 0x80],
            vec![0xff],
            vec![0x00],
            vec![0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            s(""),
            s("a"),
            s("b"),
            vec![0x90],
            vec![0x91, 0x01],
            vec![0x80],
            vec![0xc4, 0x02, 0x04, 0x00],
            float_bytes(-1.0),
            float_bytes(2.0),
            vec![0xd4, 0xff, 0x01],
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(cmp(a, b), i.cmp(&j), "{a:x?} vs {b:x?}");
            }
        }
    }

    #[test]
    fn int_encodings_compare_equal() {
        assert_eq!(cmp(&[0x05], &[0xcc, 0x05]), Ordering::Equal);
        assert_eq!(
            cmp(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 5], &[0x05]),
            Ordering::Equal
        );
        assert_eq!(cmp(&[0xff], &[0xd0, 0xff]), Ordering::Equal);
    }

    #[test]
    fn lists_and_maps() {
        // [1, 2] < [1, 3] < [2]; [1] < [1, 0]
        assert_eq!(cmp(&[0x92, 1, 2], &[0x92, 1, 3]), Ordering::Less);
        assert_eq!(cmp(&[0x92, 1, 3], &[0x91, 2]), Ordering::Less);
        assert_eq!(cmp(&[0x91, 1], &[0x92, 1, 0]), Ordering::Less);
        // [[1], 5] vs [[1, 2], 0]: the inner prefix decides.
        assert_eq!(
            cmp(&[0x92, 0x91, 1, 5], &[0x92, 0x92, 1, 2, 0]),
            Ordering::Less
        );
        // Maps: size first.
        assert_eq!(cmp(&[0x81, 9, 9], &[0x82, 1, 1, 2, 2]), Ordering::Less);
        // Ordered-list metadata is skipped.
        assert_eq!(
            cmp(&[0x93, 0xc7, 0x00, 0x01, 1, 2], &[0x92, 1, 2]),
            Ordering::Equal
        );
    }

    #[test]
    fn wildcard_and_infinity() {
        let wildcard = [0xd4, 0xff, 0x00];
        let inf = [0xd4, 0xff, 0x01];
        assert_eq!(
            cmp(&[0x92, 1, 0x05], &[0x92, 1, 0xd4, 0xff, 0x00]),
            Ordering::Equal
        );
        assert_eq!(cmp(&wildcard, &s("x")), Ordering::Equal);
        assert_eq!(cmp(&inf, &float_bytes(1e300)), Ordering::Greater);
        assert_eq!(
            cmp(&[0x92, 1, 0xd4, 0xff, 0x01], &[0x92, 1, 0x80]),
            Ordering::Greater
        );
    }

    #[test]
    fn parse_and_encode_round_trip() {
        let ordered = [0x93, 0xc7, 0x00, 0x01, 0x01, 0x02];
        let list = List::parse(&ordered).expect("list");
        assert!(list.is_ordered());
        assert_eq!(list.items.len(), 2);
        assert_eq!(list.encode(), ordered);
        let map_bytes = [0x82, 0xc7, 0x00, 0x01, 0xc0, 0x01, 0x02];
        let map = Map::parse(&map_bytes).expect("map");
        assert!(map.is_key_ordered());
        assert_eq!(map.encode(), map_bytes);
        assert!(List::parse(&[0x92, 0x01]).is_err());
        assert_eq!(List::parse(&[0x01]), Err(ResultCode::IncompatibleType));
    }

    #[test]
    fn particles() {
        assert_eq!(to_particle(&[0x05]), int_particle(5));
        assert_eq!(to_particle(&s("ab")), (particle::STRING, b"ab".to_vec()));
        assert_eq!(to_particle(&[0xc0]), (particle::NULL, vec![]));
        assert_eq!(to_particle(&[0x90]), (particle::LIST, vec![0x90]));
        for value in [
            0i64,
            127,
            128,
            -1,
            -32,
            -33,
            -129,
            40_000,
            -40_000,
            1 << 40,
            i64::MIN,
        ] {
            assert_eq!(number(&int_bytes(value)), Some(Number::Int(value)));
        }
    }
}
