//! The data commands: strings, keys and expiry, hashes, lists, sets,
//! sorted sets and bitmaps, each with Redis's replies and error strings.
//! Every change is one read-compute-write of its key (`Db::update`).

use crate::keyspace::{now_ms, Db, Entry, WRONGTYPE};
use crate::resp::{format_g, Out};
use crate::session::{glob, parse_i64};
use crate::value::{Value, BIN_HASH, BIN_LIST, BIN_SET, BIN_STRING, BIN_ZSET};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// How a data command ended.
pub enum Ran {
    Done,
    /// A blocking command found nothing; it waits at most `timeout`
    /// (None: forever). Nothing was written to the output. At the
    /// timeout it answers a null array, or with `null_bulk` a null bulk
    /// string (BLMOVE).
    Empty {
        timeout: Option<Duration>,
        null_bulk: bool,
    },
    /// A blocking stream read found nothing; it waits at most `timeout`
    /// (None: forever) and looks again with `resume` for arguments. At the
    /// timeout it answers a null array.
    Wait {
        timeout: Option<Duration>,
        resume: Vec<Vec<u8>>,
    },
}

const FLOAT_ERROR: &str = "ERR value is not a valid float";
pub(crate) const SYNTAX_ERROR: &str = "ERR syntax error";
const STRING_BYTES_MAX: usize = 512 << 20;

pub(crate) type R<T> = Result<T, String>;

pub(crate) fn err<T>(text: &str) -> R<T> {
    Err(text.to_owned())
}

pub(crate) fn lower(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_lowercase()
}

pub(crate) fn parse_f64(bytes: &[u8]) -> R<f64> {
    let text = std::str::from_utf8(bytes).map_err(|_| FLOAT_ERROR.to_owned())?;
    let value = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        t if t.is_empty() || t.contains("nan") || t.starts_with(' ') || t.ends_with(' ') => {
            return err(FLOAT_ERROR)
        }
        t => t.parse::<f64>().map_err(|_| FLOAT_ERROR.to_owned())?,
    };
    if value.is_nan() {
        return err(FLOAT_ERROR);
    }
    Ok(value)
}

/// A float as INCRBYFLOAT prints it: fixed notation, at most 17
/// significant digits, trailing zeros removed.
pub(crate) fn format_float(value: f64) -> String {
    let text = format_g(value, 17);
    let short = format_g(value, 15);
    // Prefer the 15-digit form when it reads back as the same number to
    // within the last digits (0.1 + 0.2 prints 0.3, as Redis's long
    // double arithmetic does).
    let text = if short
        .parse::<f64>()
        .ok()
        .is_some_and(|s| (s - value).abs() <= value.abs() * 1e-15)
    {
        short
    } else {
        text
    };
    if text.contains('e') {
        let fixed = format!("{value:.17}");
        let fixed = if fixed.contains('.') {
            fixed.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            fixed
        };
        return fixed;
    }
    text
}

pub(crate) fn string_of(entry: &Option<Entry>) -> R<Option<&Vec<u8>>> {
    match entry {
        None => Ok(None),
        Some(Entry {
            value: Value::Str(bytes),
            ..
        }) => Ok(Some(bytes)),
        Some(_) => err(WRONGTYPE),
    }
}

/// The collection in `slot`, created empty (as `make`) if missing;
/// WRONGTYPE if the key holds another type.
pub(crate) fn collection<T>(
    slot: &mut Option<Entry>,
    make: fn() -> Value,
    pick: fn(&mut Value) -> Option<&mut T>,
) -> R<&mut T> {
    let entry = slot.get_or_insert_with(|| Entry {
        value: make(),
        expiry_ms: None,
    });
    pick(&mut entry.value).ok_or_else(|| WRONGTYPE.to_owned())
}

pub(crate) fn hash_mut(value: &mut Value) -> Option<&mut BTreeMap<Vec<u8>, Vec<u8>>> {
    match value {
        Value::Hash(map) => Some(map),
        _ => None,
    }
}
pub(crate) fn list_mut(value: &mut Value) -> Option<&mut VecDeque<Vec<u8>>> {
    match value {
        Value::List(list) => Some(list),
        _ => None,
    }
}
pub(crate) fn set_mut(value: &mut Value) -> Option<&mut BTreeSet<Vec<u8>>> {
    match value {
        Value::Set(set) => Some(set),
        _ => None,
    }
}
pub(crate) fn zset_mut(value: &mut Value) -> Option<&mut BTreeMap<Vec<u8>, f64>> {
    match value {
        Value::ZSet(zset) => Some(zset),
        _ => None,
    }
}
pub(crate) fn new_hash() -> Value {
    Value::Hash(BTreeMap::new())
}
pub(crate) fn new_list() -> Value {
    Value::List(VecDeque::new())
}
pub(crate) fn new_set() -> Value {
    Value::Set(BTreeSet::new())
}
pub(crate) fn new_zset() -> Value {
    Value::ZSet(BTreeMap::new())
}

/// Reads a collection of one type: None if missing, WRONGTYPE if other.
pub(crate) fn read<T: Default>(
    db: &mut Db<'_>,
    key: &[u8],
    pick: fn(&mut Value) -> Option<&mut T>,
) -> R<Option<T>> {
    match db.get(key)? {
        None => Ok(None),
        Some(mut entry) => match pick(&mut entry.value) {
            Some(collection) => Ok(Some(std::mem::take(collection))),
            None => err(WRONGTYPE),
        },
    }
}

/// Runs data command `name`. `blocking`: a blocking pop may wait.
pub fn run(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    match name {
        // ---- strings ----
        "get" => match string_of(&db.get(&args[1])?)? {
            Some(bytes) => out.bulk(bytes),
            None => out.null(),
        },
        "set" => set(args, out, db)?,
        "setnx" => {
            let value = args[2].clone();
            let written = db.update(&args[1], |slot| {
                if slot.is_some() {
                    return Ok((false, false));
                }
                *slot = Some(Entry {
                    value: Value::Str(value.clone()),
                    expiry_ms: None,
                });
                Ok((true, true))
            })?;
            out.int(i64::from(written));
        }
        "setex" | "psetex" => {
            let amount = parse_i64(&args[2])?;
            let unit = if name == "setex" { 1000 } else { 1 };
            let expiry = relative_expiry(amount, unit, name)?;
            let entry = Entry {
                value: Value::Str(args[3].clone()),
                expiry_ms: Some(expiry),
            };
            db.put(&args[1], Some(&entry))?;
            out.ok();
        }
        "mget" => {
            out.array(args.len() - 1);
            for key in &args[1..] {
                match db.get(key)? {
                    Some(Entry {
                        value: Value::Str(bytes),
                        ..
                    }) => out.bulk(&bytes),
                    _ => out.null(),
                }
            }
        }
        "mset" | "msetnx" => {
            if args.len().is_multiple_of(2) {
                return err(&format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            if name == "msetnx" {
                for pair in args[1..].chunks(2) {
                    if db.get(&pair[0])?.is_some() {
                        out.int(0);
                        return Ok(Ran::Done);
                    }
                }
            }
            for pair in args[1..].chunks(2) {
                let entry = Entry {
                    value: Value::Str(pair[1].clone()),
                    expiry_ms: None,
                };
                db.put(&pair[0], Some(&entry))?;
            }
            if name == "mset" {
                out.ok();
            } else {
                out.int(1);
            }
        }
        "getset" => {
            let value = args[2].clone();
            let old = db.update(&args[1], |slot| {
                let old = string_of(slot)?.cloned();
                *slot = Some(Entry {
                    value: Value::Str(value.clone()),
                    expiry_ms: None,
                });
                Ok((old, true))
            })?;
            bulk_or_null(out, old.as_deref());
        }
        "getdel" => {
            let old = db.update(&args[1], |slot| {
                let old = string_of(slot)?.cloned();
                let found = old.is_some();
                if found {
                    *slot = None;
                }
                Ok((old, found))
            })?;
            bulk_or_null(out, old.as_deref());
        }
        "getex" => {
            let mut change: Option<Option<u64>> = None;
            let mut at = 2;
            while at < args.len() {
                let option = lower(&args[at]);
                match option.as_str() {
                    "persist" if change.is_none() => {
                        change = Some(None);
                        at += 1;
                    }
                    "ex" | "px" | "exat" | "pxat" if change.is_none() && at + 1 < args.len() => {
                        let amount = parse_i64(&args[at + 1])?;
                        change = Some(Some(expiry_option(&option, amount, "getex")?));
                        at += 2;
                    }
                    _ => return err(SYNTAX_ERROR),
                }
            }
            let value = db.update(&args[1], |slot| {
                let value = string_of(slot)?.cloned();
                if let (Some(change), Some(entry)) = (change, slot.as_mut()) {
                    entry.expiry_ms = change;
                    return Ok((value, true));
                }
                Ok((value, false))
            })?;
            bulk_or_null(out, value.as_deref());
        }
        "incr" | "decr" | "incrby" | "decrby" => {
            let by = match name {
                "incr" => 1,
                "decr" => -1,
                "incrby" => parse_i64(&args[2])?,
                _ => {
                    let by = parse_i64(&args[2])?;
                    if by == i64::MIN {
                        return err("ERR decrement would overflow");
                    }
                    -by
                }
            };
            let value = db.update(&args[1], |slot| {
                let current = match string_of(slot)? {
                    Some(bytes) => parse_i64(bytes)?,
                    None => 0,
                };
                let next = current
                    .checked_add(by)
                    .ok_or_else(|| "ERR increment or decrement would overflow".to_owned())?;
                let expiry_ms = slot.as_ref().and_then(|e| e.expiry_ms);
                *slot = Some(Entry {
                    value: Value::Str(next.to_string().into_bytes()),
                    expiry_ms,
                });
                Ok((next, true))
            })?;
            out.int(value);
        }
        "incrbyfloat" => {
            let by = parse_f64(&args[2])?;
            let text = db.update(&args[1], |slot| {
                let current = match string_of(slot)? {
                    Some(bytes) => parse_f64(bytes)?,
                    None => 0.0,
                };
                let next = current + by;
                if !next.is_finite() {
                    return err("ERR increment would produce NaN or Infinity");
                }
                let text = format_float(next).into_bytes();
                let expiry_ms = slot.as_ref().and_then(|e| e.expiry_ms);
                *slot = Some(Entry {
                    value: Value::Str(text.clone()),
                    expiry_ms,
                });
                Ok((text, true))
            })?;
            out.bulk(&text);
        }
        "append" => {
            let tail = args[2].clone();
            let length = db.update(&args[1], |slot| {
                string_of(slot)?;
                let entry = slot.get_or_insert_with(|| Entry {
                    value: Value::Str(Vec::new()),
                    expiry_ms: None,
                });
                let Value::Str(bytes) = &mut entry.value else {
                    return err(WRONGTYPE);
                };
                if bytes.len() + tail.len() > STRING_BYTES_MAX {
                    return err("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
                }
                bytes.extend_from_slice(&tail);
                Ok((bytes.len(), true))
            })?;
            out.int(length as i64);
        }
        "strlen" => {
            let entry = db.get(&args[1])?;
            out.int(string_of(&entry)?.map_or(0, |b| b.len()) as i64);
        }
        "getrange" | "substr" => {
            let start = parse_i64(&args[2])?;
            let end = parse_i64(&args[3])?;
            let entry = db.get(&args[1])?;
            let bytes = string_of(&entry)?.map(|b| b.as_slice()).unwrap_or_default();
            match range(start, end, bytes.len()) {
                Some((from, to)) => out.bulk(&bytes[from..=to]),
                None => out.bulk(b""),
            }
        }
        "setrange" => {
            let offset = parse_i64(&args[2])?;
            if offset < 0 {
                return err("ERR offset is out of range");
            }
            let offset = offset as usize;
            let value = args[3].clone();
            if offset + value.len() > STRING_BYTES_MAX {
                return err("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
            }
            let length = db.update(&args[1], |slot| {
                let existing = string_of(slot)?.map_or(0, |b| b.len());
                if value.is_empty() {
                    return Ok((existing, false));
                }
                let entry = slot.get_or_insert_with(|| Entry {
                    value: Value::Str(Vec::new()),
                    expiry_ms: None,
                });
                let Value::Str(bytes) = &mut entry.value else {
                    return err(WRONGTYPE);
                };
                if bytes.len() < offset + value.len() {
                    bytes.resize(offset + value.len(), 0);
                }
                bytes[offset..offset + value.len()].copy_from_slice(&value);
                Ok((bytes.len(), true))
            })?;
            out.int(length as i64);
        }
        // ---- keys ----
        "del" | "unlink" => {
            let mut removed = 0;
            for key in &args[1..] {
                let existed = db.update(key, |slot| {
                    let existed = slot.is_some();
                    *slot = None;
                    Ok((existed, existed))
                })?;
                removed += i64::from(existed);
            }
            out.int(removed);
        }
        "exists" | "touch" => {
            let mut found = 0;
            for key in &args[1..] {
                found += i64::from(db.get(key)?.is_some());
            }
            out.int(found);
        }
        "type" => {
            let entry = db.get(&args[1])?;
            out.simple(entry.map_or("none", |e| e.value.type_name()));
        }
        "rename" | "renamenx" => {
            let Some(entry) = db.get(&args[1])? else {
                return err("ERR no such key");
            };
            if args[1] == args[2] {
                if name == "rename" {
                    out.ok();
                } else {
                    out.int(0);
                }
                return Ok(Ran::Done);
            }
            let only_new = name == "renamenx";
            let written = db.update(&args[2], |slot| {
                if only_new && slot.is_some() {
                    return Ok((false, false));
                }
                *slot = Some(entry.clone());
                Ok((true, true))
            })?;
            if written {
                db.update(&args[1], |slot| {
                    *slot = None;
                    Ok(((), true))
                })?;
            }
            if name == "rename" {
                out.ok();
            } else {
                out.int(i64::from(written));
            }
        }
        "scan" => {
            let cursor = std::str::from_utf8(&args[1])
                .ok()
                .and_then(|c| c.parse::<u64>().ok())
                .ok_or_else(|| "ERR invalid cursor".to_owned())?;
            let mut pattern = None;
            let mut count = 10usize;
            let mut kind = None;
            let mut at = 2;
            while at < args.len() {
                let option = lower(&args[at]);
                let Some(value) = args.get(at + 1) else {
                    return err(SYNTAX_ERROR);
                };
                match option.as_str() {
                    "match" => pattern = Some(value.clone()),
                    "count" => {
                        let n = parse_i64(value)?;
                        if n < 1 {
                            return err(SYNTAX_ERROR);
                        }
                        count = n as usize;
                    }
                    "type" => kind = Some(lower(value)),
                    _ => return err(SYNTAX_ERROR),
                }
                at += 2;
            }
            let start = usize::try_from(cursor)
                .unwrap_or(usize::MAX)
                .min(bolide_types::PARTITION_COUNT);
            let (keys, next) = if start >= bolide_types::PARTITION_COUNT {
                (Vec::new(), 0)
            } else {
                db.scan(start, count, &mut |key, bin| {
                    pattern.as_ref().is_none_or(|p| glob(p, key))
                        && kind.as_ref().is_none_or(|k| type_of_bin(bin) == k)
                })
            };
            out.array(2);
            out.bulk(next.to_string().as_bytes());
            out.array(keys.len());
            for key in keys {
                out.bulk(&key);
            }
        }
        "keys" => {
            let pattern = args[1].clone();
            let (keys, _) = db.scan(0, usize::MAX, &mut |key, _| glob(&pattern, key));
            out.array(keys.len());
            for key in keys {
                out.bulk(&key);
            }
        }
        "randomkey" => {
            let start =
                (now_ms() as usize).wrapping_mul(2_654_435_761) % bolide_types::PARTITION_COUNT;
            let (mut keys, _) = db.scan(start, 1, &mut |_, _| true);
            if keys.is_empty() {
                keys = db.scan(0, 1, &mut |_, _| true).0;
            }
            match keys.first() {
                Some(key) => out.bulk(key),
                None => out.null(),
            }
        }
        "dbsize" => out.int(count_keys(db) as i64),
        "flushdb" => {
            db.flush()?;
            out.ok();
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(name, args, out, db)?,
        "ttl" | "pttl" | "expiretime" | "pexpiretime" => {
            let answer = match db.get(&args[1])? {
                None => -2,
                Some(Entry {
                    expiry_ms: None, ..
                }) => -1,
                Some(Entry {
                    expiry_ms: Some(at),
                    ..
                }) => {
                    let left = at.saturating_sub(now_ms()) as i64;
                    match name {
                        "ttl" => (left + 500) / 1000,
                        "pttl" => left,
                        "expiretime" => (at / 1000) as i64,
                        _ => at as i64,
                    }
                }
            };
            out.int(answer);
        }
        "persist" => {
            let removed = db.update(&args[1], |slot| match slot {
                Some(entry) if entry.expiry_ms.is_some() => {
                    entry.expiry_ms = None;
                    Ok((true, true))
                }
                _ => Ok((false, false)),
            })?;
            out.int(i64::from(removed));
        }
        // ---- bitmaps ----
        "setbit" => {
            let offset = bit_offset(&args[2])?;
            let bit = match args[3].as_slice() {
                b"0" => false,
                b"1" => true,
                _ => return err("ERR bit is not an integer or out of range"),
            };
            let old = db.update(&args[1], |slot| {
                string_of(slot)?;
                let entry = slot.get_or_insert_with(|| Entry {
                    value: Value::Str(Vec::new()),
                    expiry_ms: None,
                });
                let Value::Str(bytes) = &mut entry.value else {
                    return err(WRONGTYPE);
                };
                let byte = (offset / 8) as usize;
                if bytes.len() <= byte {
                    bytes.resize(byte + 1, 0);
                }
                let mask = 0x80u8 >> (offset % 8);
                let old = bytes[byte] & mask != 0;
                if bit {
                    bytes[byte] |= mask;
                } else {
                    bytes[byte] &= !mask;
                }
                Ok((old, true))
            })?;
            out.int(i64::from(old));
        }
        "getbit" => {
            let offset = bit_offset(&args[2])?;
            let entry = db.get(&args[1])?;
            let bytes = string_of(&entry)?.map(|b| b.as_slice()).unwrap_or_default();
            let bit = bytes
                .get((offset / 8) as usize)
                .is_some_and(|byte| byte & (0x80 >> (offset % 8)) != 0);
            out.int(i64::from(bit));
        }
        "bitcount" => {
            let entry = db.get(&args[1])?;
            let bytes = string_of(&entry)?.map(|b| b.as_slice()).unwrap_or_default();
            let count = match args.len() {
                2 => bytes.iter().map(|b| b.count_ones() as i64).sum(),
                4 | 5 => {
                    let start = parse_i64(&args[2])?;
                    let end = parse_i64(&args[3])?;
                    let bits = match args.get(4).map(|a| lower(a)) {
                        None => false,
                        Some(unit) if unit == "byte" => false,
                        Some(unit) if unit == "bit" => true,
                        Some(_) => return err(SYNTAX_ERROR),
                    };
                    if bits {
                        match range(start, end, bytes.len() * 8) {
                            Some((from, to)) => (from..=to)
                                .filter(|&i| bytes[i / 8] & (0x80 >> (i % 8)) != 0)
                                .count() as i64,
                            None => 0,
                        }
                    } else {
                        match range(start, end, bytes.len()) {
                            Some((from, to)) => {
                                bytes[from..=to].iter().map(|b| b.count_ones() as i64).sum()
                            }
                            None => 0,
                        }
                    }
                }
                _ => return err(SYNTAX_ERROR),
            };
            out.int(count);
        }
        "bitpos" => {
            let bit = match args[2].as_slice() {
                b"0" => false,
                b"1" => true,
                _ => return err("ERR The bit argument must be 1 or 0."),
            };
            let entry = db.get(&args[1])?;
            let bytes = string_of(&entry)?.map(|b| b.as_slice()).unwrap_or_default();
            if entry.is_none() {
                out.int(if bit { -1 } else { 0 });
                return Ok(Ran::Done);
            }
            let start = args.get(3).map(|a| parse_i64(a)).transpose()?.unwrap_or(0);
            let end_given = args.len() > 4;
            let end = args.get(4).map(|a| parse_i64(a)).transpose()?.unwrap_or(-1);
            let bits = match args.get(5).map(|a| lower(a)) {
                None => false,
                Some(unit) if unit == "byte" => false,
                Some(unit) if unit == "bit" => true,
                Some(_) => return err(SYNTAX_ERROR),
            };
            let (length, scale) = if bits {
                (bytes.len() * 8, 1)
            } else {
                (bytes.len(), 8)
            };
            let found = range(start, end, length).and_then(|(from, to)| {
                (from * scale..(to + 1) * scale)
                    .find(|&i| (bytes[i / 8] & (0x80 >> (i % 8)) != 0) == bit)
            });
            let answer = match found {
                Some(position) => position as i64,
                // Looking for a clear bit past the end of the string
                // finds the first bit after it, unless a range was given.
                None if !bit && !end_given => (bytes.len() * 8) as i64,
                None => -1,
            };
            out.int(answer);
        }
        "bitop" => {
            let operation = lower(&args[1]);
            if !matches!(operation.as_str(), "and" | "or" | "xor" | "not") {
                return err(SYNTAX_ERROR);
            }
            if operation == "not" && args.len() != 4 {
                return err("ERR BITOP NOT must be called with a single source key.");
            }
            let mut sources = Vec::new();
            for key in &args[3..] {
                let entry = db.get(key)?;
                sources.push(string_of(&entry)?.cloned().unwrap_or_default());
            }
            let length = sources.iter().map(Vec::len).max().unwrap_or(0);
            let mut result = vec![0u8; length];
            for (i, byte) in result.iter_mut().enumerate() {
                let at = |s: &Vec<u8>| s.get(i).copied().unwrap_or(0);
                *byte = match operation.as_str() {
                    "not" => !at(&sources[0]),
                    "and" => sources.iter().map(at).fold(0xff, |a, b| a & b),
                    "or" => sources.iter().map(at).fold(0, |a, b| a | b),
                    _ => sources.iter().map(at).fold(0, |a, b| a ^ b),
                };
            }
            db.update(&args[2], |slot| {
                *slot = (!result.is_empty()).then(|| Entry {
                    value: Value::Str(result.clone()),
                    expiry_ms: None,
                });
                Ok(((), true))
            })?;
            out.int(length as i64);
        }
        "pfadd" => {
            let changed = db.update(&args[1], |slot| {
                let created = slot.is_none();
                let mut registers = match string_of(slot)? {
                    Some(bytes) => crate::hll::registers(bytes)
                        .ok_or_else(|| crate::hll::INVALID.to_owned())?,
                    None => crate::hll::empty(),
                };
                let mut changed = created;
                for element in &args[2..] {
                    changed |= crate::hll::add(&mut registers, element);
                }
                if changed {
                    let expiry_ms = slot.as_ref().and_then(|e| e.expiry_ms);
                    *slot = Some(Entry {
                        value: Value::Str(crate::hll::encode(&registers)),
                        expiry_ms,
                    });
                }
                Ok((changed, changed))
            })?;
            out.int(i64::from(changed));
        }
        "pfcount" | "pfmerge" => {
            let sources = &args[1..];
            let mut union = crate::hll::empty();
            for key in sources {
                let entry = db.get(key)?;
                if let Some(bytes) = string_of(&entry)? {
                    let registers = crate::hll::registers(bytes)
                        .ok_or_else(|| crate::hll::INVALID.to_owned())?;
                    for (u, r) in union.iter_mut().zip(registers) {
                        *u = (*u).max(r);
                    }
                }
            }
            if name == "pfcount" {
                out.int(crate::hll::count(&union) as i64);
            } else {
                db.update(&args[1], |slot| {
                    string_of(slot)?;
                    let expiry_ms = slot.as_ref().and_then(|e| e.expiry_ms);
                    *slot = Some(Entry {
                        value: Value::Str(crate::hll::encode(&union)),
                        expiry_ms,
                    });
                    Ok(((), true))
                })?;
                out.ok();
            }
        }
        "xadd" | "xlen" | "xrange" | "xrevrange" | "xdel" | "xtrim" | "xread" | "xreadgroup"
        | "xgroup" | "xack" | "xpending" | "xclaim" | "xautoclaim" | "xinfo" | "xsetid" => {
            return crate::streams::run(name, args, out, db, blocking)
        }
        _ => return crate::collections::run(name, args, out, db, blocking),
    }
    Ok(Ran::Done)
}

fn type_of_bin(bin: &[u8]) -> &'static str {
    match bin {
        BIN_STRING => "string",
        BIN_HASH => "hash",
        BIN_LIST => "list",
        BIN_SET => "set",
        BIN_ZSET => "zset",
        crate::streams::BIN_STREAM => "stream",
        _ => "none",
    }
}

pub fn count_keys(db: &mut Db<'_>) -> usize {
    db.scan(0, usize::MAX, &mut |_, _| true).0.len()
}

pub(crate) fn bulk_or_null(out: &mut Out, value: Option<&[u8]>) {
    match value {
        Some(bytes) => out.bulk(bytes),
        None => out.null(),
    }
}

fn bit_offset(arg: &[u8]) -> R<u64> {
    match parse_i64(arg) {
        Ok(offset) if (0..(1i64 << 32)).contains(&offset) => Ok(offset as u64),
        _ => err("ERR bit offset is not an integer or out of range"),
    }
}

/// An inclusive [start, end] of a sequence of `length`, negative indexes
/// from the end, clamped; None if empty.
pub(crate) fn range(start: i64, end: i64, length: usize) -> Option<(usize, usize)> {
    // Redis's order of adjustments: negative indexes count from the end,
    // a start still negative is 0, and an end before the start (however
    // negative) is an empty range.
    let length = length as i64;
    let start = if start < 0 { length + start } else { start }.max(0);
    let mut end = if end < 0 { length + end } else { end };
    if start > end || start >= length {
        return None;
    }
    if end >= length {
        end = length - 1;
    }
    Some((start as usize, end as usize))
}

/// `now + amount × unit` ms, or Redis's invalid-expire error.
fn relative_expiry(amount: i64, unit: i64, command: &str) -> R<u64> {
    let invalid = || format!("ERR invalid expire time in '{command}' command");
    if amount <= 0 {
        return Err(invalid());
    }
    let ms = amount.checked_mul(unit).ok_or_else(invalid)?;
    (now_ms() as i64)
        .checked_add(ms)
        .map(|at| at as u64)
        .ok_or_else(invalid)
}

fn expiry_option(option: &str, amount: i64, command: &str) -> R<u64> {
    match option {
        "ex" => relative_expiry(amount, 1000, command),
        "px" => relative_expiry(amount, 1, command),
        "exat" | "pxat" => {
            if amount <= 0 {
                return Err(format!("ERR invalid expire time in '{command}' command"));
            }
            let unit = if option == "exat" { 1000 } else { 1 };
            amount
                .checked_mul(unit)
                .map(|at| at as u64)
                .ok_or_else(|| format!("ERR invalid expire time in '{command}' command"))
        }
        _ => err(SYNTAX_ERROR),
    }
}

fn set(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let mut nx = false;
    let mut xx = false;
    let mut get = false;
    let mut keep_ttl = false;
    let mut expiry: Option<u64> = None;
    let mut expiry_given = false;
    let mut at = 3;
    while at < args.len() {
        let option = lower(&args[at]);
        match option.as_str() {
            "nx" if !xx => nx = true,
            "xx" if !nx => xx = true,
            "get" => get = true,
            "keepttl" if !expiry_given => keep_ttl = true,
            "ex" | "px" | "exat" | "pxat" if !expiry_given && !keep_ttl && at + 1 < args.len() => {
                let amount = parse_i64(&args[at + 1])?;
                expiry = Some(expiry_option(&option, amount, "set")?);
                expiry_given = true;
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    let value = args[2].clone();
    if !nx && !xx && !get && !keep_ttl {
        // A plain SET replaces whatever the key holds: one write.
        db.put(
            &args[1],
            Some(&Entry {
                value: Value::Str(value),
                expiry_ms: expiry,
            }),
        )?;
        out.ok();
        return Ok(());
    }
    let (old, written) = db.update(&args[1], |slot| {
        let old = if get { string_of(slot)?.cloned() } else { None };
        let blocked = (nx && slot.is_some()) || (xx && slot.is_none());
        if blocked {
            return Ok(((old, false), false));
        }
        let expiry_ms = if keep_ttl {
            slot.as_ref().and_then(|e| e.expiry_ms)
        } else {
            expiry
        };
        *slot = Some(Entry {
            value: Value::Str(value.clone()),
            expiry_ms,
        });
        Ok(((old, true), true))
    })?;
    if get {
        bulk_or_null(out, old.as_deref());
    } else if written {
        out.ok();
    } else {
        out.null();
    }
    Ok(())
}

fn expire(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let amount = parse_i64(&args[2])?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        match lower(option).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            _ => {
                return err(&format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(option)
                ))
            }
        }
    }
    if nx && (xx || gt || lt) {
        return err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return err("ERR GT and LT options at the same time are not compatible");
    }
    let invalid = || format!("ERR invalid expire time in '{name}' command");
    let unit: i64 = if name.starts_with('p') { 1 } else { 1000 };
    let ms = amount.checked_mul(unit).ok_or_else(invalid)?;
    let at = if name.ends_with("at") {
        ms
    } else {
        ms.checked_add(now_ms() as i64).ok_or_else(invalid)?
    };
    let at = at.max(0) as u64;
    let set = db.update(&args[1], |slot| {
        let Some(entry) = slot.as_mut() else {
            return Ok((false, false));
        };
        let current = entry.expiry_ms;
        let allowed = if nx {
            current.is_none()
        } else if xx && current.is_none() {
            false
        } else if gt {
            current.is_some_and(|c| at > c)
        } else if lt {
            current.is_none_or(|c| at < c)
        } else {
            true
        };
        if !allowed {
            return Ok((false, false));
        }
        if at <= now_ms() {
            *slot = None;
        } else {
            entry.expiry_ms = Some(at);
        }
        Ok((true, true))
    })?;
    out.int(i64::from(set));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn ranges_follow_redis() {
        assert_eq!(range(0, -1, 4), Some((0, 3)));
        // An end before the start, however negative, is empty (LRANGE,
        // ZRANGE 0 -5 of four members).
        assert_eq!(range(0, -5, 4), None);
        assert_eq!(range(-10, -5, 4), None);
        assert_eq!(range(-10, 1, 4), Some((0, 1)));
        assert_eq!(range(2, 100, 4), Some((2, 3)));
        assert_eq!(range(4, 10, 4), None);
        assert_eq!(range(0, 0, 0), None);
    }
}
