//! The values an index definition takes from a record, and the 64-bit keys
//! ("bvals", as the protocol calls them) they are filed under: an integer
//! itself, a hash of a string or blob, the geo cells of a GeoJSON value.
//!
//! A bval only finds candidates; queries check the value itself again
//! (`matches`), so hash collisions and coarse geo cells never produce a
//! wrong answer.

use super::cells;
use super::definition::{Collection, Definition, KeyType};
use bolide_particles::cdt::value::{List, Map};
use bolide_particles::expression::{self, Evaluated, Expr};
use bolide_particles::geo::Shape;
use bolide_types::particle;
use bolide_wire::msgpack::{Item, Reader};

/// Strings and blobs longer than this are not indexed (as on the server).
pub const VALUE_BYTES_MAX: usize = 2048;

/// One indexable value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Int(i64),
    Str(&'a [u8]),
    Blob(&'a [u8]),
    /// GeoJSON text.
    Geo(&'a [u8]),
}

/// A record as an index sees it: its bins and what an expression index's
/// expression may read besides.
pub use crate::record::Stored as Indexed;

/// Calls `found` with every value of `definition`'s type in `record`
/// (`expression` is the definition's expression, parsed).
pub fn for_each_value(
    definition: &Definition,
    expression: Option<&Expr>,
    indexed: &Indexed<'_>,
    found: &mut dyn FnMut(Value<'_>),
) {
    let mut wanted = |value: Value<'_>| {
        if is_of_type(definition.key_type, &value) {
            found(value);
        }
    };
    if let Some(expression) = expression {
        let now_ms = bolide_types::now_citrusleaf_milliseconds();
        if let Evaluated::Value(particle_type, bytes) =
            expression::evaluate(expression, indexed, now_ms)
        {
            from_particle(definition.collection, particle_type, &bytes, &mut wanted);
        }
        return;
    }
    let Some(bin) = indexed.record.bin(definition.bin.as_bytes()) else {
        return;
    };
    match &definition.context {
        None => from_particle(
            definition.collection,
            bin.particle_type,
            bin.value,
            &mut wanted,
        ),
        Some(context) => {
            if bin.particle_type != particle::LIST && bin.particle_type != particle::MAP {
                return;
            }
            let Ok(Some(element)) = bolide_particles::cdt::read_context(bin.value, context) else {
                return;
            };
            from_element(definition.collection, &element, &mut wanted);
        }
    }
}

/// The sorted, distinct bvals `definition` files `record` under.
pub fn bvals(
    definition: &Definition,
    expression: Option<&Expr>,
    indexed: &Indexed<'_>,
) -> Vec<i64> {
    let mut keys = Vec::new();
    for_each_value(definition, expression, indexed, &mut |value| match value {
        Value::Int(v) => keys.push(v),
        Value::Str(bytes) | Value::Blob(bytes) => keys.push(hash(bytes)),
        Value::Geo(text) => {
            if let Some(shape) = Shape::parse(text) {
                keys.extend(cells::shape_cells(&shape).into_iter().map(|c| c as i64));
            }
        }
    });
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The bval of a string or blob: 64-bit FNV-1a.
pub fn hash(bytes: &[u8]) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

fn is_of_type(key_type: KeyType, value: &Value<'_>) -> bool {
    match (key_type, value) {
        (KeyType::Numeric, Value::Int(_)) | (KeyType::Geo, Value::Geo(_)) => true,
        (KeyType::String, Value::Str(bytes)) | (KeyType::Blob, Value::Blob(bytes)) => {
            bytes.len() <= VALUE_BYTES_MAX
        }
        _ => false,
    }
}

/// Values of a bin's particle.
fn from_particle(
    collection: Collection,
    particle_type: u8,
    value: &[u8],
    found: &mut dyn FnMut(Value<'_>),
) {
    match (collection, particle_type) {
        (Collection::Default, particle::INTEGER) => {
            if let Ok(bytes) = <[u8; 8]>::try_from(value) {
                found(Value::Int(i64::from_be_bytes(bytes)));
            }
        }
        (Collection::Default, particle::STRING) => found(Value::Str(value)),
        (Collection::Default, particle::BLOB) => found(Value::Blob(value)),
        (Collection::Default, particle::GEOJSON) => {
            if let Some(text) = bolide_particles::geo::stored_text(value) {
                found(Value::Geo(text));
            }
        }
        (Collection::Default, _) => {}
        (_, particle::LIST | particle::MAP) => from_element(collection, value, found),
        _ => {}
    }
}

/// Values of a msgpack element (a context's target, or a list or map bin).
fn from_element(collection: Collection, element: &[u8], found: &mut dyn FnMut(Value<'_>)) {
    match collection {
        Collection::Default => {
            if let Some(value) = scalar(element) {
                found(value);
            }
        }
        Collection::List => {
            if let Ok(list) = List::parse(element) {
                for item in &list.items {
                    if let Some(value) = scalar(item) {
                        found(value);
                    }
                }
            }
        }
        Collection::MapKeys | Collection::MapValues => {
            if bolide_particles::cdt::value::container_kind(element) != Some(false) {
                return;
            }
            if let Ok(map) = Map::parse(element) {
                for (key, value) in &map.pairs {
                    let item = if collection == Collection::MapKeys {
                        key
                    } else {
                        value
                    };
                    if let Some(value) = scalar(item) {
                        found(value);
                    }
                }
            }
        }
    }
}

/// An integer, string, blob or GeoJSON msgpack item (strings and blobs
/// carry their particle type in their first byte).
fn scalar(bytes: &[u8]) -> Option<Value<'_>> {
    match Reader::new(bytes).item().ok()? {
        Item::Int(v) => Some(Value::Int(v)),
        Item::Uint(v) => i64::try_from(v).ok().map(Value::Int),
        Item::Str(data) | Item::Bin(data) => {
            let (&kind, rest) = data.split_first()?;
            match kind {
                particle::STRING => Some(Value::Str(rest)),
                particle::BLOB => Some(Value::Blob(rest)),
                particle::GEOJSON => Some(Value::Geo(rest)),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_store::record::{encode, Bin};
    use bolide_store::{RecordMeta, RecordView};
    use bolide_types::Digest;

    fn definition(key_type: KeyType, collection: Collection) -> Definition {
        Definition {
            namespace: "test".into(),
            name: "i".into(),
            set: None,
            bin: "b".into(),
            key_type,
            collection,
            context: None,
            expression: None,
        }
    }

    fn record(particle_type: u8, value: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        encode(
            &mut bytes,
            None,
            [Bin {
                name: b"b",
                particle_type,
                value,
            }]
            .into_iter(),
        );
        bytes
    }

    fn bvals(definition: &Definition, record: &RecordView<'_>) -> Vec<i64> {
        let indexed = Indexed {
            record,
            digest: &Digest([0; 20]),
            meta: &RecordMeta::default(),
            set_name: None,
            record_bytes: 0,
        };
        super::bvals(definition, None, &indexed)
    }

    #[test]
    fn values_by_collection_type() {
        let bytes = record(particle::INTEGER, &7i64.to_be_bytes());
        let view = RecordView::parse(&bytes).expect("record");
        assert_eq!(
            bvals(&definition(KeyType::Numeric, Collection::Default), &view),
            vec![7]
        );
        assert!(bvals(&definition(KeyType::String, Collection::Default), &view).is_empty());
        // [3, "x", 3, 1] with "x" as a client string (type byte 3).
        let list = [0x94, 3, 0xa2, 3, b'x', 3, 1];
        let bytes = record(particle::LIST, &list);
        let view = RecordView::parse(&bytes).expect("record");
        assert_eq!(
            bvals(&definition(KeyType::Numeric, Collection::List), &view),
            vec![1, 3]
        );
        assert_eq!(
            bvals(&definition(KeyType::String, Collection::List), &view),
            vec![hash(b"x")]
        );
        assert!(bvals(&definition(KeyType::Numeric, Collection::Default), &view).is_empty());
        // {"k": 5}
        let map = [0x81, 0xa2, 3, b'k', 5];
        let bytes = record(particle::MAP, &map);
        let view = RecordView::parse(&bytes).expect("record");
        assert_eq!(
            bvals(&definition(KeyType::String, Collection::MapKeys), &view),
            vec![hash(b"k")]
        );
        assert_eq!(
            bvals(&definition(KeyType::Numeric, Collection::MapValues), &view),
            vec![5]
        );
        let mut with_context = definition(KeyType::Numeric, Collection::Default);
        // Map key "k".
        with_context.context = Some(vec![0x92, 0x22, 0xa2, 3, b'k']);
        assert_eq!(bvals(&with_context, &view), vec![5]);
    }
}
