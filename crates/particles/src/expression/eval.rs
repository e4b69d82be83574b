//! Evaluation: an [`Expr`] tree against one record's metadata and bins.

use super::arithmetic::arithmetic;
use super::{code, kind, CallArg, CallSystem, Evaluated, Expr, GeoSide, Literal, Record};
use bolide_types::{particle, CITRUSLEAF_EPOCH_UNIX_SECONDS};
use std::borrow::Cow;

/// A value during evaluation; `Unknown` poisons comparisons.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value<'v> {
    Unknown,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Borrowed from the request or the record, or the result of a list or
    /// map read.
    Str(Cow<'v, [u8]>),
    /// A blob: its particle type (the client's blob kind) and bytes.
    Blob(u8, Cow<'v, [u8]>),
    /// GeoJSON text.
    Geo(&'v [u8]),
    /// A list or map (stored, literal or a call's result): its particle
    /// type and msgpack.
    Collection(u8, Cow<'v, [u8]>),
}

impl Value<'_> {
    pub(super) fn as_int(&self) -> Option<i64> {
        match *self {
            Value::Int(value) => Some(value),
            _ => None,
        }
    }

    pub(super) fn as_float(&self) -> Option<f64> {
        match *self {
            Value::Float(value) => Some(value),
            _ => None,
        }
    }
}

/// What evaluation reads: the record, and the time it runs at
/// (milliseconds since 2010-01-01T00:00:00Z).
struct Subject<'r> {
    record: &'r dyn Record,
    now_ms: u64,
}

/// Evaluates an expression against `record` at `now_ms` to a bin value.
pub fn evaluate(expr: &Expr, record: &dyn Record, now_ms: u64) -> Evaluated {
    let subject = Subject { record, now_ms };
    let (particle_type, bytes) = match eval(expr, &subject, &mut Vec::new()) {
        Value::Unknown => return Evaluated::Unknown,
        Value::Nil => return Evaluated::Nil,
        Value::Bool(value) => (particle::BOOL, vec![u8::from(value)]),
        Value::Int(value) => (particle::INTEGER, value.to_be_bytes().to_vec()),
        Value::Float(value) => (particle::FLOAT, value.to_be_bytes().to_vec()),
        Value::Str(bytes) => (particle::STRING, bytes.into_owned()),
        Value::Blob(particle_type, bytes) => (particle_type, bytes.into_owned()),
        Value::Geo(text) => {
            let mut stored = vec![0, 0, 0];
            stored.extend_from_slice(text);
            (particle::GEOJSON, stored)
        }
        Value::Collection(particle_type, bytes) => (particle_type, bytes.into_owned()),
    };
    Evaluated::Value(particle_type, bytes)
}

/// Whether `record` passes the filter at `now_ms`.
pub fn passes(expr: &Expr, record: &dyn Record, now_ms: u64) -> bool {
    let subject = Subject { record, now_ms };
    eval(expr, &subject, &mut Vec::new()) == Value::Bool(true)
}

/// Variables bound by enclosing `let`s, innermost last.
type Env<'v> = Vec<(&'v [u8], Value<'v>)>;

fn eval<'v>(expr: &'v Expr, subject: &'v Subject<'v>, env: &mut Env<'v>) -> Value<'v> {
    match expr {
        Expr::Literal(literal) => match literal {
            Literal::Nil => Value::Nil,
            Literal::Bool(value) => Value::Bool(*value),
            Literal::Int(value) => Value::Int(*value),
            Literal::Float(value) => Value::Float(*value),
            Literal::Str(bytes) => Value::Str(Cow::Borrowed(bytes)),
            Literal::Blob(particle_type, bytes) => {
                Value::Blob(*particle_type, Cow::Borrowed(bytes))
            }
            Literal::Geo(text) => Value::Geo(text),
            Literal::List(bytes) => Value::Collection(particle::LIST, Cow::Borrowed(bytes)),
            Literal::Map(bytes) => Value::Collection(particle::MAP, Cow::Borrowed(bytes)),
            Literal::Unknown => Value::Unknown,
        },
        Expr::Call { call, bin } => {
            let bin = eval(bin, subject, env);
            let payload = match call_payload(call, subject, env) {
                Some(payload) => payload,
                None => return Value::Unknown,
            };
            run_call(call, bin, &payload)
        }
        Expr::Geo(left, right) => match (
            geo_shape(left, subject, env),
            geo_shape(right, subject, env),
        ) {
            (Some(a), Some(b)) => Value::Bool(crate::geo::point_in_region(&a, &b)),
            _ => Value::Unknown,
        },
        Expr::Compare(op, left, right) => {
            let left = eval(left, subject, env);
            compare(*op, left, eval(right, subject, env))
        }
        Expr::And(children) => logic(children, subject, env, false),
        Expr::Or(children) => logic(children, subject, env, true),
        Expr::Not(child) => match eval(child, subject, env) {
            Value::Bool(value) => Value::Bool(!value),
            _ => Value::Unknown,
        },
        Expr::Exclusive(children) => {
            let mut trues = 0;
            for child in children {
                match eval(child, subject, env) {
                    Value::Bool(true) => trues += 1,
                    Value::Bool(false) => {}
                    _ => return Value::Unknown,
                }
            }
            Value::Bool(trues == 1)
        }
        Expr::Bin { name, kind } => bin_value(subject, name, *kind),
        Expr::Regex(regex, string) => match eval(string, subject, env) {
            Value::Str(bytes) => Value::Bool(regex.is_match(&bytes)),
            _ => Value::Unknown,
        },
        Expr::Arith(op, operands) => {
            let values: Vec<Value<'v>> = operands
                .iter()
                .map(|operand| eval(operand, subject, env))
                .collect();
            arithmetic(*op, &values)
        }
        Expr::Cond(parts) => {
            let mut pairs = parts.chunks_exact(2);
            for pair in pairs.by_ref() {
                match eval(&pair[0], subject, env) {
                    Value::Bool(true) => return eval(&pair[1], subject, env),
                    Value::Bool(false) => {}
                    _ => return Value::Unknown,
                }
            }
            match pairs.remainder() {
                [default] => eval(default, subject, env),
                _ => Value::Unknown,
            }
        }
        Expr::Let(definitions, body) => {
            let depth = env.len();
            for (name, value) in definitions {
                let value = eval(value, subject, env);
                env.push((name, value));
            }
            let result = eval(body, subject, env);
            env.truncate(depth);
            result
        }
        Expr::Var(name) => env
            .iter()
            .rev()
            .find(|(defined, _)| *defined == name.as_slice())
            .map_or(Value::Unknown, |(_, value)| value.clone()),
        Expr::BinType(name) => Value::Int(
            subject
                .record
                .bin(name)
                .map_or(i64::from(particle::NULL), |(particle_type, _)| {
                    i64::from(particle_type)
                }),
        ),
        Expr::Key(kind) => match subject.record.key() {
            Some((key_type, bytes)) => typed(key_type, bytes, *kind),
            None => Value::Unknown,
        },
        Expr::Meta(op) => meta(*op, subject),
        Expr::DigestModulo(modulus) => {
            // Digest bytes 16..20 as the server reads them: a host-order
            // (little-endian) u32. The remainder takes the dividend's sign,
            // as in C, so a negative modulus works like its absolute value.
            let mut four = [0u8; 4];
            four.copy_from_slice(&subject.record.digest().0[16..20]);
            Value::Int(i64::from(u32::from_le_bytes(four)) % modulus)
        }
    }
}

/// A CALL's payload: the fixed one, or its head with each argument
/// evaluated and packed; `None` if an argument is unknown.
fn call_payload<'v>(
    call: &'v super::Call,
    subject: &'v Subject<'v>,
    env: &mut Env<'v>,
) -> Option<Cow<'v, [u8]>> {
    if let Some(payload) = &call.fixed {
        return Some(Cow::Borrowed(payload.as_slice()));
    }
    let mut payload = call.head.clone();
    for arg in &call.args {
        match arg {
            CallArg::Value(bytes) => payload.extend_from_slice(bytes),
            CallArg::Expr(expr) => {
                if !pack(&eval(expr, subject, env), &mut payload) {
                    return None;
                }
            }
        }
    }
    Some(Cow::Owned(payload))
}

/// Runs a CALL's op on the value its bin expression gave. A modify op
/// works on a copy and answers the modified value; reads answer the op's
/// result. Bit and HyperLogLog answers must be of the declared type (as
/// the server checks); anything that fails is unknown.
fn run_call(call: &super::Call, bin: Value<'_>, payload: &[u8]) -> Value<'static> {
    let answer = match (call.system, bin) {
        (CallSystem::Cdt, Value::Collection(particle_type, bytes)) => {
            match crate::cdt::execute(Some((particle_type, &bytes)), payload, call.modify) {
                Ok(outcome) if call.modify => match outcome.bin {
                    Some((particle_type, value)) => call_result(Some((particle_type, value))),
                    None => Value::Collection(particle_type, Cow::Owned(bytes.into_owned())),
                },
                Ok(outcome) => return call_result(outcome.result),
                Err(_) => return Value::Unknown,
            }
        }
        (CallSystem::Bits, Value::Blob(particle_type, bytes)) if call.modify => {
            match crate::bits::modify(Some((particle_type, &bytes)), payload) {
                Ok(Some(value)) => Value::Blob(particle::BLOB, Cow::Owned(value)),
                Ok(None) => Value::Blob(particle_type, Cow::Owned(bytes.into_owned())),
                Err(_) => return Value::Unknown,
            }
        }
        (CallSystem::Bits, Value::Blob(particle_type, bytes)) => {
            match crate::bits::read((particle_type, &bytes), payload) {
                Ok(answer) => call_result(Some(answer)),
                Err(_) => return Value::Unknown,
            }
        }
        // A modify on nil works as on a missing bin: insert and resize,
        // init and add, list and map writes create the value.
        (CallSystem::Cdt, Value::Nil) if call.modify => {
            match crate::cdt::execute(None, payload, true) {
                Ok(outcome) => call_result(outcome.bin),
                Err(_) => return Value::Unknown,
            }
        }
        (CallSystem::Bits, Value::Nil) if call.modify => match crate::bits::modify(None, payload) {
            Ok(value) => call_result(value.map(|value| (particle::BLOB, value))),
            Err(_) => return Value::Unknown,
        },
        (CallSystem::Hll, Value::Nil) if call.modify => match crate::hll::modify(None, payload) {
            Ok((value, _)) => call_result(value.map(|value| (particle::HLL, value))),
            Err(_) => return Value::Unknown,
        },
        (CallSystem::Hll, Value::Blob(particle::HLL, bytes)) => {
            match crate::hll::call(&bytes, payload, call.modify) {
                Ok(answer) => call_result(Some(answer)),
                Err(_) => return Value::Unknown,
            }
        }
        _ => return Value::Unknown,
    };
    if kind_matches(&answer, call.result_kind) {
        answer
    } else {
        Value::Unknown
    }
}

/// Whether a value is of the expression type `kind` (the server's
/// `bin_is_type`).
fn kind_matches(value: &Value<'_>, kind: i64) -> bool {
    match value {
        Value::Nil => kind == kind::NIL,
        Value::Bool(_) => kind == kind::BOOL,
        Value::Int(_) => kind == kind::INT,
        Value::Float(_) => kind == kind::FLOAT,
        Value::Str(_) => kind == kind::STRING,
        Value::Blob(particle::HLL, _) => kind == kind::HLL,
        Value::Blob(particle::BLOB, _) => kind == kind::BLOB,
        Value::Geo(_) => kind == kind::GEO,
        Value::Collection(particle::LIST, _) => kind == kind::LIST,
        Value::Collection(particle::MAP, _) => kind == kind::MAP,
        _ => false,
    }
}

/// A geo side's shape: the literal's, or the GeoJSON its expression gives.
fn geo_shape<'v>(
    side: &'v GeoSide,
    subject: &'v Subject<'v>,
    env: &mut Env<'v>,
) -> Option<Cow<'v, crate::geo::Shape>> {
    match side {
        GeoSide::Shape(shape) => Some(Cow::Borrowed(shape)),
        GeoSide::Expr(expr) => match eval(expr, subject, env) {
            Value::Geo(text) => crate::geo::Shape::parse(text).map(Cow::Owned),
            _ => None,
        },
    }
}

fn logic<'v>(
    children: &'v [Expr],
    subject: &'v Subject<'v>,
    env: &mut Env<'v>,
    any: bool,
) -> Value<'v> {
    let mut unknown = false;
    for child in children {
        match eval(child, subject, env) {
            Value::Bool(value) if value == any => return Value::Bool(any),
            Value::Bool(_) => {}
            _ => unknown = true,
        }
    }
    if unknown {
        Value::Unknown
    } else {
        Value::Bool(!any)
    }
}

fn compare(op: i64, left: Value<'_>, right: Value<'_>) -> Value<'static> {
    use std::cmp::Ordering;
    let ordering = match (left, right) {
        (Value::Int(a), Value::Int(b)) => a.cmp(&b),
        (Value::Float(a), Value::Float(b)) => match a.partial_cmp(&b) {
            Some(ordering) => ordering,
            None => return Value::Unknown,
        },
        (Value::Str(a), Value::Str(b)) | (Value::Blob(_, a), Value::Blob(_, b)) => a.cmp(&b),
        (Value::Bool(a), Value::Bool(b)) => a.cmp(&b),
        (Value::Nil, Value::Nil) => Ordering::Equal,
        (Value::Collection(a_type, a), Value::Collection(b_type, b)) => {
            match compare_collections(a_type, &a, b_type, &b) {
                Some(ordering) => ordering,
                None => return Value::Unknown,
            }
        }
        _ => return Value::Unknown,
    };
    Value::Bool(match op {
        code::EQ => ordering == Ordering::Equal,
        code::NE => ordering != Ordering::Equal,
        code::GT => ordering == Ordering::Greater,
        code::GE => ordering != Ordering::Less,
        code::LT => ordering == Ordering::Less,
        _ => ordering != Ordering::Greater,
    })
}

/// Lists compare element by element (Aerospike's value order); two maps
/// compare with their top-level pairs in key order, so the order a map was
/// written in does not matter.
fn compare_collections(a_type: u8, a: &[u8], b_type: u8, b: &[u8]) -> Option<std::cmp::Ordering> {
    use crate::cdt::value::{compare, encode_pairs, Map};
    if a_type == particle::MAP && b_type == particle::MAP {
        let sorted = |bytes: &[u8]| -> Option<Vec<u8>> {
            let mut map = Map::parse(bytes).ok()?;
            let mut failed = false;
            map.pairs.sort_by(|x, y| {
                compare(&x.0, &y.0).unwrap_or_else(|_| {
                    failed = true;
                    std::cmp::Ordering::Equal
                })
            });
            (!failed)
                .then(|| encode_pairs(0, map.pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))))
        };
        return compare(&sorted(a)?, &sorted(b)?).ok();
    }
    compare(a, b).ok()
}

fn bin_value<'v>(subject: &'v Subject<'v>, name: &[u8], kind: i64) -> Value<'v> {
    match subject.record.bin(name) {
        Some((particle_type, value)) => typed(particle_type, value, kind),
        None => Value::Unknown,
    }
}

/// A value as a CDT op's argument (msgpack, strings and blobs with their
/// particle type first); false for unknown.
fn pack(value: &Value<'_>, out: &mut Vec<u8>) -> bool {
    use crate::cdt::value::{float_bytes, write_int, write_typed_bytes, Raw};
    match value {
        Value::Unknown => return false,
        Value::Nil => out.push(0xc0),
        Value::Bool(value) => out.push(if *value { 0xc3 } else { 0xc2 }),
        Value::Int(value) => write_int(out, *value),
        Value::Float(value) => out.extend_from_slice(&float_bytes(*value)),
        Value::Str(bytes) => write_typed_bytes(out, Raw::Str, particle::STRING, bytes),
        Value::Blob(particle_type, bytes) => {
            write_typed_bytes(out, Raw::Bin, *particle_type, bytes)
        }
        Value::Geo(text) => write_typed_bytes(out, Raw::Str, particle::GEOJSON, text),
        Value::Collection(_, bytes) => out.extend_from_slice(bytes),
    }
    true
}

/// A list or map op's result as a value.
fn call_result(result: Option<(u8, Vec<u8>)>) -> Value<'static> {
    match result {
        None => Value::Nil,
        Some((particle::INTEGER, bytes)) => bytes
            .as_slice()
            .try_into()
            .map_or(Value::Unknown, |b| Value::Int(i64::from_be_bytes(b))),
        Some((particle::FLOAT, bytes)) => bytes
            .as_slice()
            .try_into()
            .map_or(Value::Unknown, |b| Value::Float(f64::from_be_bytes(b))),
        Some((particle::BOOL, bytes)) => Value::Bool(bytes.first().is_some_and(|&b| b != 0)),
        Some((particle::NULL, _)) => Value::Nil,
        Some((particle::STRING, bytes)) => Value::Str(Cow::Owned(bytes)),
        Some((particle::HLL, bytes)) => Value::Blob(particle::HLL, Cow::Owned(bytes)),
        Some((particle_type, bytes)) if particle::is_blob(particle_type) => {
            Value::Blob(particle_type, Cow::Owned(bytes))
        }
        Some((particle_type @ (particle::LIST | particle::MAP), bytes)) => {
            Value::Collection(particle_type, Cow::Owned(bytes))
        }
        Some(_) => Value::Unknown,
    }
}

/// A stored value as the expression type asks for it; a mismatch is unknown.
fn typed(particle_type: u8, bytes: &[u8], kind: i64) -> Value<'_> {
    match (kind, particle_type) {
        (kind::INT, particle::INTEGER) => bytes
            .try_into()
            .map_or(Value::Unknown, |b| Value::Int(i64::from_be_bytes(b))),
        (kind::FLOAT, particle::FLOAT) => bytes
            .try_into()
            .map_or(Value::Unknown, |b| Value::Float(f64::from_be_bytes(b))),
        (kind::STRING, particle::STRING) => Value::Str(Cow::Borrowed(bytes)),
        (kind::LIST, particle::LIST) | (kind::MAP, particle::MAP) => {
            Value::Collection(particle_type, Cow::Borrowed(bytes))
        }
        (kind::GEO, particle::GEOJSON) => {
            crate::geo::stored_text(bytes).map_or(Value::Unknown, Value::Geo)
        }
        (kind::BLOB, p) if particle::is_blob(p) => Value::Blob(p, Cow::Borrowed(bytes)),
        (kind::HLL, particle::HLL) => Value::Blob(particle::HLL, Cow::Borrowed(bytes)),
        (kind::BOOL, particle::BOOL) => Value::Bool(bytes.first().is_some_and(|&b| b != 0)),
        (kind::NIL, _) => Value::Nil,
        _ => Value::Unknown,
    }
}

fn meta<'v>(op: i64, subject: &'v Subject<'v>) -> Value<'v> {
    let record = subject.record;
    let epoch_ms = CITRUSLEAF_EPOCH_UNIX_SECONDS * 1000;
    match op {
        code::LAST_UPDATE => Value::Int(((record.last_update_ms() + epoch_ms) * 1_000_000) as i64),
        code::SINCE_UPDATE => {
            Value::Int(subject.now_ms.saturating_sub(record.last_update_ms()) as i64)
        }
        code::VOID_TIME => match record.void_time() {
            0 => Value::Int(-1),
            void => Value::Int(
                ((u64::from(void) + CITRUSLEAF_EPOCH_UNIX_SECONDS) * 1_000_000_000) as i64,
            ),
        },
        code::TTL => match record.void_time() {
            0 => Value::Int(-1),
            void => Value::Int(i64::from(void) - (subject.now_ms / 1000) as i64),
        },
        code::SET_NAME => Value::Str(Cow::Borrowed(record.set_name().unwrap_or("").as_bytes())),
        code::KEY_EXISTS => Value::Bool(record.key().is_some()),
        code::IS_TOMBSTONE => Value::Bool(false),
        code::RECORD_SIZE | code::MEMORY_SIZE => Value::Int(record.size_bytes() as i64),
        code::DEVICE_SIZE => Value::Int(0),
        _ => Value::Unknown,
    }
}
