//! Literals to Aerospike values, and values to JSON and table text.

use super::parse::Literal;
use aerospike::Value;
use base64::Engine;
use std::collections::HashMap;

pub fn to_value(literal: &Literal) -> Value {
    match literal {
        Literal::Int(int) => Value::from(*int),
        Literal::Float(float) => Value::from(*float),
        Literal::Str(text) => Value::from(text.clone()),
        Literal::Bool(flag) => Value::from(*flag),
        Literal::Json(json) => from_json(json),
    }
}

fn from_json(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(flag) => Value::from(*flag),
        serde_json::Value::Number(number) => match number.as_i64() {
            Some(int) => Value::from(int),
            None => Value::from(number.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(text) => Value::from(text.clone()),
        serde_json::Value::Array(items) => {
            Value::from(items.iter().map(from_json).collect::<Vec<_>>())
        }
        serde_json::Value::Object(map) => Value::from(
            map.iter()
                .map(|(key, value)| (Value::from(key.clone()), from_json(value)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// A value as JSON: maps with string keys as objects, other maps as lists
/// of `[key, value]` pairs, bytes as base64 strings.
pub fn to_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Value::Nil => J::Null,
        Value::Bool(flag) => J::Bool(*flag),
        Value::Int(int) => J::from(*int),
        Value::Float(float) => J::from(f64::from(float)),
        Value::String(text) | Value::GeoJson(text) => J::String(text.clone()),
        Value::Blob(bytes) | Value::Hll(bytes) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        Value::List(items) | Value::MultiResult(items) => {
            J::Array(items.iter().map(to_json).collect())
        }
        Value::HashMap(map) => pairs_to_json(map.iter()),
        Value::OrderedMap(map) => pairs_to_json(map.iter()),
        Value::SortedMap(map) => pairs_to_json(map.iter()),
        Value::KeyValueList(pairs) => pairs_to_json(pairs.iter().map(|(k, v)| (k, v))),
        other => J::String(other.to_string()),
    }
}

fn pairs_to_json<'a>(pairs: impl Iterator<Item = (&'a Value, &'a Value)>) -> serde_json::Value {
    let pairs: Vec<(&Value, &Value)> = pairs.collect();
    if pairs.iter().all(|(key, _)| matches!(key, Value::String(_))) {
        let mut object = serde_json::Map::new();
        for (key, value) in pairs {
            if let Value::String(key) = key {
                object.insert(key.clone(), to_json(value));
            }
        }
        serde_json::Value::Object(object)
    } else {
        serde_json::Value::Array(
            pairs
                .into_iter()
                .map(|(key, value)| serde_json::Value::Array(vec![to_json(key), to_json(value)]))
                .collect(),
        )
    }
}

/// A value as a table cell: strings bare, everything else as JSON.
pub fn to_cell(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => to_json(other).to_string(),
    }
}
