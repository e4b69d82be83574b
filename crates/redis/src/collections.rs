//! Hashes, lists (with blocking pops), sets and sorted sets.

use crate::data::{
    bulk_or_null, collection, err, format_float, hash_mut, list_mut, lower, new_hash, new_list,
    new_set, new_zset, parse_f64, range, read, set_mut, zset_mut, Ran, R, SYNTAX_ERROR,
};
use crate::keyspace::{Db, Entry, WRONGTYPE};
use crate::resp::Out;
use crate::session::{glob, parse_i64};
use crate::value::Value;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub fn run(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    match name {
        // ---- hashes ----
        "hset" | "hmset" => {
            if !args.len().is_multiple_of(2) {
                return err(&format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            let added = db.update(&args[1], |slot| {
                let hash = collection(slot, new_hash, hash_mut)?;
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    added += i64::from(hash.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                Ok((added, true))
            })?;
            if name == "hset" {
                out.int(added);
            } else {
                out.ok();
            }
        }
        "hsetnx" => {
            let added = db.update(&args[1], |slot| {
                let hash = collection(slot, new_hash, hash_mut)?;
                if hash.contains_key(&args[2]) {
                    return Ok((false, false));
                }
                hash.insert(args[2].clone(), args[3].clone());
                Ok((true, true))
            })?;
            out.int(i64::from(added));
        }
        "hget" => {
            let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
            bulk_or_null(out, hash.get(&args[2]).map(|v| v.as_slice()));
        }
        "hmget" => {
            let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
            out.array(args.len() - 2);
            for field in &args[2..] {
                bulk_or_null(out, hash.get(field).map(|v| v.as_slice()));
            }
        }
        "hgetall" => {
            let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
            out.map(hash.len());
            for (field, value) in &hash {
                out.bulk(field);
                out.bulk(value);
            }
        }
        "hkeys" | "hvals" => {
            let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
            out.array(hash.len());
            for (field, value) in &hash {
                out.bulk(if name == "hkeys" { field } else { value });
            }
        }
        "hlen" => out.int(read(db, &args[1], hash_mut)?.map_or(0, |h| h.len()) as i64),
        "hexists" => {
            let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
            out.int(i64::from(hash.contains_key(&args[2])));
        }
        "hstrlen" => {
            let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
            out.int(hash.get(&args[2]).map_or(0, |v| v.len()) as i64);
        }
        "hdel" => {
            let removed = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let hash = collection(slot, new_hash, hash_mut)?;
                let removed = args[2..]
                    .iter()
                    .filter(|f| hash.remove(*f).is_some())
                    .count();
                Ok((removed as i64, removed > 0))
            })?;
            out.int(removed);
        }
        "hincrby" => {
            let by = parse_i64(&args[3])?;
            let value = db.update(&args[1], |slot| {
                let hash = collection(slot, new_hash, hash_mut)?;
                let current = match hash.get(&args[2]) {
                    Some(v) => {
                        parse_i64(v).map_err(|_| "ERR hash value is not an integer".to_owned())?
                    }
                    None => 0,
                };
                let next = current
                    .checked_add(by)
                    .ok_or_else(|| "ERR increment or decrement would overflow".to_owned())?;
                hash.insert(args[2].clone(), next.to_string().into_bytes());
                Ok((next, true))
            })?;
            out.int(value);
        }
        "hincrbyfloat" => {
            let by = parse_f64(&args[3])?;
            if !by.is_finite() {
                return err("ERR value is NaN or Infinity");
            }
            let text = db.update(&args[1], |slot| {
                let hash = collection(slot, new_hash, hash_mut)?;
                let current = match hash.get(&args[2]) {
                    Some(v) => {
                        parse_f64(v).map_err(|_| "ERR hash value is not a float".to_owned())?
                    }
                    None => 0.0,
                };
                let next = current + by;
                if !next.is_finite() {
                    return err("ERR increment would produce NaN or Infinity");
                }
                let text = format_float(next).into_bytes();
                hash.insert(args[2].clone(), text.clone());
                Ok((text, true))
            })?;
            out.bulk(&text);
        }
        "hscan" | "sscan" | "zscan" => {
            let pattern = scan_options(args)?;
            let keep = |member: &[u8]| pattern.as_ref().is_none_or(|p| glob(p, member));
            let mut items: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            match name {
                "hscan" => {
                    for (f, v) in read(db, &args[1], hash_mut)?.unwrap_or_default() {
                        if keep(&f) {
                            items.push((f, Some(v)));
                        }
                    }
                }
                "sscan" => {
                    for m in read(db, &args[1], set_mut)?.unwrap_or_default() {
                        if keep(&m) {
                            items.push((m, None));
                        }
                    }
                }
                _ => {
                    let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
                    for (score, m) in sorted(&zset) {
                        if keep(m) {
                            items.push((
                                m.clone(),
                                Some(crate::resp::format_score(score).into_bytes()),
                            ));
                        }
                    }
                }
            }
            out.array(2);
            out.bulk(b"0");
            let n: usize = items
                .iter()
                .map(|(_, v)| 1 + usize::from(v.is_some()))
                .sum();
            out.array(n);
            for (member, value) in items {
                out.bulk(&member);
                if let Some(value) = value {
                    out.bulk(&value);
                }
            }
        }
        // ---- lists ----
        "lpush" | "rpush" | "lpushx" | "rpushx" => {
            let only_existing = name.ends_with('x');
            let left = name.starts_with('l');
            let length = db.update(&args[1], |slot| {
                if only_existing && slot.is_none() {
                    return Ok((0, false));
                }
                let list = collection(slot, new_list, list_mut)?;
                for element in &args[2..] {
                    if left {
                        list.push_front(element.clone());
                    } else {
                        list.push_back(element.clone());
                    }
                }
                Ok((list.len(), true))
            })?;
            out.int(length as i64);
        }
        "lpop" | "rpop" => {
            let count = match args.get(2) {
                None => None,
                Some(arg) => match parse_i64(arg) {
                    Ok(n) if n >= 0 => Some(n as usize),
                    _ => return err("ERR value is out of range, must be positive"),
                },
            };
            if args.len() > 3 {
                return err(&format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            let left = name == "lpop";
            let popped = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((None, false));
                }
                let list = collection(slot, new_list, list_mut)?;
                let take = count.unwrap_or(1).min(list.len());
                let popped: Vec<Vec<u8>> = (0..take)
                    .filter_map(|_| {
                        if left {
                            list.pop_front()
                        } else {
                            list.pop_back()
                        }
                    })
                    .collect();
                Ok((Some(popped), take > 0))
            })?;
            match (popped, count) {
                (None, None) => out.null(),
                (None, Some(_)) => out.null_array(),
                (Some(popped), None) => bulk_or_null(out, popped.first().map(|v| v.as_slice())),
                (Some(popped), Some(_)) => {
                    out.array(popped.len());
                    for element in popped {
                        out.bulk(&element);
                    }
                }
            }
        }
        "llen" => out.int(read(db, &args[1], list_mut)?.map_or(0, |l| l.len()) as i64),
        "lrange" => {
            let start = parse_i64(&args[2])?;
            let end = parse_i64(&args[3])?;
            let list = read(db, &args[1], list_mut)?.unwrap_or_default();
            match range(start, end, list.len()) {
                Some((from, to)) => {
                    out.array(to - from + 1);
                    for element in list.range(from..=to) {
                        out.bulk(element);
                    }
                }
                None => out.array(0),
            }
        }
        "lindex" => {
            let index = parse_i64(&args[2])?;
            let list = read(db, &args[1], list_mut)?.unwrap_or_default();
            let at = if index < 0 {
                list.len() as i64 + index
            } else {
                index
            };
            bulk_or_null(
                out,
                usize::try_from(at)
                    .ok()
                    .and_then(|i| list.get(i))
                    .map(|v| v.as_slice()),
            );
        }
        "lset" => {
            let index = parse_i64(&args[2])?;
            db.update(&args[1], |slot| {
                if slot.is_none() {
                    return err("ERR no such key");
                }
                let list = collection(slot, new_list, list_mut)?;
                let at = if index < 0 {
                    list.len() as i64 + index
                } else {
                    index
                };
                let element = usize::try_from(at)
                    .ok()
                    .and_then(|i| list.get_mut(i))
                    .ok_or_else(|| "ERR index out of range".to_owned())?;
                *element = args[3].clone();
                Ok(((), true))
            })?;
            out.ok();
        }
        "lrem" => {
            let count = parse_i64(&args[2])?;
            let removed = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let list = collection(slot, new_list, list_mut)?;
                let limit = if count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let mut removed = 0;
                if count >= 0 {
                    let mut i = 0;
                    while i < list.len() && removed < limit {
                        if list[i] == args[3] {
                            list.remove(i);
                            removed += 1;
                        } else {
                            i += 1;
                        }
                    }
                } else {
                    let mut i = list.len();
                    while i > 0 && removed < limit {
                        i -= 1;
                        if list[i] == args[3] {
                            list.remove(i);
                            removed += 1;
                        }
                    }
                }
                Ok((removed as i64, removed > 0))
            })?;
            out.int(removed);
        }
        "ltrim" => {
            let start = parse_i64(&args[2])?;
            let end = parse_i64(&args[3])?;
            db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok(((), false));
                }
                let list = collection(slot, new_list, list_mut)?;
                match range(start, end, list.len()) {
                    Some((from, to)) => {
                        list.truncate(to + 1);
                        list.drain(..from);
                    }
                    None => list.clear(),
                }
                Ok(((), true))
            })?;
            out.ok();
        }
        "linsert" => {
            let before = match lower(&args[2]).as_str() {
                "before" => true,
                "after" => false,
                _ => return err(SYNTAX_ERROR),
            };
            let length = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let list = collection(slot, new_list, list_mut)?;
                match list.iter().position(|e| *e == args[3]) {
                    Some(at) => {
                        list.insert(if before { at } else { at + 1 }, args[4].clone());
                        Ok((list.len() as i64, true))
                    }
                    None => Ok((-1, false)),
                }
            })?;
            out.int(length);
        }
        "rpoplpush" | "lmove" => {
            let (from_left, to_left) = if name == "rpoplpush" {
                (false, true)
            } else {
                let side = |arg: &[u8]| match lower(arg).as_str() {
                    "left" => Ok(true),
                    "right" => Ok(false),
                    _ => err(SYNTAX_ERROR),
                };
                (side(&args[3])?, side(&args[4])?)
            };
            match move_element(db, &args[1], &args[2], from_left, to_left)? {
                Some(element) => out.bulk(&element),
                None => out.null(),
            }
        }
        "blpop" | "brpop" => {
            let timeout = parse_timeout(&args[args.len() - 1])?;
            let left = name == "blpop";
            for key in &args[1..args.len() - 1] {
                let popped = db.update(key, |slot| {
                    if slot.is_none() {
                        return Ok((None, false));
                    }
                    let list = collection(slot, new_list, list_mut)?;
                    let element = if left {
                        list.pop_front()
                    } else {
                        list.pop_back()
                    };
                    let changed = element.is_some();
                    Ok((element, changed))
                })?;
                if let Some(element) = popped {
                    out.array(2);
                    out.bulk(key);
                    out.bulk(&element);
                    return Ok(Ran::Done);
                }
            }
            if blocking {
                return Ok(Ran::Empty {
                    timeout,
                    null_bulk: false,
                });
            }
            out.null_array();
        }
        // ---- sets ----
        "sadd" => {
            let added = db.update(&args[1], |slot| {
                let set = collection(slot, new_set, set_mut)?;
                let added = args[2..]
                    .iter()
                    .filter(|m| set.insert((*m).clone()))
                    .count();
                Ok((added as i64, added > 0))
            })?;
            out.int(added);
        }
        "srem" => {
            let removed = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let set = collection(slot, new_set, set_mut)?;
                let removed = args[2..].iter().filter(|m| set.remove(*m)).count();
                Ok((removed as i64, removed > 0))
            })?;
            out.int(removed);
        }
        "smembers" => {
            let set = read(db, &args[1], set_mut)?.unwrap_or_default();
            out.set(set.len());
            for member in &set {
                out.bulk(member);
            }
        }
        "sismember" => {
            let set = read(db, &args[1], set_mut)?.unwrap_or_default();
            out.int(i64::from(set.contains(&args[2])));
        }
        "smismember" => {
            let set = read(db, &args[1], set_mut)?.unwrap_or_default();
            out.array(args.len() - 2);
            for member in &args[2..] {
                out.int(i64::from(set.contains(member)));
            }
        }
        "scard" => out.int(read(db, &args[1], set_mut)?.map_or(0, |s| s.len()) as i64),
        "sinter" | "sunion" | "sdiff" | "sinterstore" | "sunionstore" | "sdiffstore" => {
            let store = name.ends_with("store");
            let first = if store { 2 } else { 1 };
            let mut sets = Vec::new();
            for key in &args[first..] {
                sets.push(read(db, key, set_mut)?.unwrap_or_default());
            }
            let result: BTreeSet<Vec<u8>> = match name.trim_end_matches("store") {
                "sinter" => {
                    let mut iter = sets.iter();
                    let start = iter.next().cloned().unwrap_or_default();
                    iter.fold(start, |acc, s| acc.intersection(s).cloned().collect())
                }
                "sunion" => sets.iter().flatten().cloned().collect(),
                _ => {
                    let mut iter = sets.iter();
                    let start = iter.next().cloned().unwrap_or_default();
                    iter.fold(start, |acc, s| acc.difference(s).cloned().collect())
                }
            };
            if store {
                let length = result.len();
                db.update(&args[1], |slot| {
                    *slot = Some(Entry {
                        value: Value::Set(result.clone()),
                        expiry_ms: None,
                    });
                    Ok(((), true))
                })?;
                out.int(length as i64);
            } else {
                out.set(result.len());
                for member in &result {
                    out.bulk(member);
                }
            }
        }
        "smove" => {
            if read(db, &args[2], set_mut)?.is_none() && db.get(&args[2])?.is_some() {
                return err(WRONGTYPE);
            }
            let moved = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((false, false));
                }
                let set = collection(slot, new_set, set_mut)?;
                let removed = set.remove(&args[3]);
                Ok((removed, removed))
            })?;
            if moved {
                // A member the target already has leaves it unchanged
                // (WATCH does not see a change).
                db.update(&args[2], |slot| {
                    let set = collection(slot, new_set, set_mut)?;
                    let added = set.insert(args[3].clone());
                    Ok(((), added))
                })?;
            }
            out.int(i64::from(moved));
        }
        _ => return zset(name, args, out, db, blocking),
    }
    Ok(Ran::Done)
}

fn scan_options(args: &[Vec<u8>]) -> R<Option<Vec<u8>>> {
    let cursor = std::str::from_utf8(&args[2])
        .ok()
        .and_then(|c| c.parse::<u64>().ok());
    if cursor.is_none() {
        return err("ERR invalid cursor");
    }
    let mut pattern = None;
    let mut at = 3;
    while at < args.len() {
        let Some(value) = args.get(at + 1) else {
            return err(SYNTAX_ERROR);
        };
        match lower(&args[at]).as_str() {
            "match" => pattern = Some(value.clone()),
            "count" => {
                if parse_i64(value)? < 1 {
                    return err(SYNTAX_ERROR);
                }
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 2;
    }
    Ok(pattern)
}

pub(crate) fn parse_timeout(arg: &[u8]) -> R<Option<Duration>> {
    let seconds =
        parse_f64(arg).map_err(|_| "ERR timeout is not a float or out of range".to_owned())?;
    if seconds < 0.0 {
        return err("ERR timeout is negative");
    }
    if !seconds.is_finite() || seconds > 1e12 {
        return err("ERR timeout is out of range");
    }
    Ok((seconds > 0.0).then(|| Duration::from_secs_f64(seconds)))
}

pub(crate) fn move_element(
    db: &mut Db<'_>,
    source: &[u8],
    target: &[u8],
    from_left: bool,
    to_left: bool,
) -> R<Option<Vec<u8>>> {
    if source == target {
        return db.update(source, |slot| {
            if slot.is_none() {
                return Ok((None, false));
            }
            let list = collection(slot, new_list, list_mut)?;
            let element = if from_left {
                list.pop_front()
            } else {
                list.pop_back()
            };
            if let Some(element) = &element {
                if to_left {
                    list.push_front(element.clone());
                } else {
                    list.push_back(element.clone());
                }
            }
            let changed = element.is_some();
            Ok((element, changed))
        });
    }
    // Nothing to move: the target's type does not matter yet (a blocking
    // move waits, as in Redis).
    match db.get(source)? {
        None => return Ok(None),
        Some(Entry {
            value: Value::List(list),
            ..
        }) if list.is_empty() => return Ok(None),
        Some(Entry {
            value: Value::List(_),
            ..
        }) => {}
        Some(_) => return err(WRONGTYPE),
    }
    // The target must be a list (or missing) before anything moves.
    if let Some(entry) = db.get(target)? {
        if !matches!(entry.value, Value::List(_)) {
            return err(WRONGTYPE);
        }
    }
    let element = db.update(source, |slot| {
        if slot.is_none() {
            return Ok((None, false));
        }
        let list = collection(slot, new_list, list_mut)?;
        let element = if from_left {
            list.pop_front()
        } else {
            list.pop_back()
        };
        let changed = element.is_some();
        Ok((element, changed))
    })?;
    if let Some(element) = &element {
        db.update(target, |slot| {
            let list = collection(slot, new_list, list_mut)?;
            if to_left {
                list.push_front(element.clone());
            } else {
                list.push_back(element.clone());
            }
            Ok(((), true))
        })?;
    }
    Ok(element)
}

/// Members in Redis order: score ascending, ties by member bytes.
pub(crate) fn sorted(zset: &BTreeMap<Vec<u8>, f64>) -> Vec<(f64, &Vec<u8>)> {
    let mut items: Vec<(f64, &Vec<u8>)> = zset.iter().map(|(m, s)| (*s, m)).collect();
    items.sort_by(|a, b| {
        a.0.partial_cmp(&b.0)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.1.cmp(b.1))
    });
    items
}

/// A score bound: value and whether it is exclusive.
fn score_bound(arg: &[u8]) -> R<(f64, bool)> {
    let bad = || "ERR min or max is not a float".to_owned();
    let (exclusive, text) = match arg.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, arg),
    };
    let value = parse_f64(text).map_err(|_| bad())?;
    Ok((value, exclusive))
}

#[derive(Clone)]
pub(crate) enum LexBound {
    Min,
    Max,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

pub(crate) fn lex_bound(arg: &[u8]) -> R<LexBound> {
    match arg.split_first() {
        Some((b'-', [])) => Ok(LexBound::Min),
        Some((b'+', [])) => Ok(LexBound::Max),
        Some((b'[', rest)) => Ok(LexBound::Inclusive(rest.to_vec())),
        Some((b'(', rest)) => Ok(LexBound::Exclusive(rest.to_vec())),
        _ => err("ERR min or max not valid string range item"),
    }
}

pub(crate) fn above_min(member: &[u8], min: &LexBound) -> bool {
    match min {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::Inclusive(b) => member >= b.as_slice(),
        LexBound::Exclusive(b) => member > b.as_slice(),
    }
}

pub(crate) fn below_max(member: &[u8], max: &LexBound) -> bool {
    match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Inclusive(b) => member <= b.as_slice(),
        LexBound::Exclusive(b) => member < b.as_slice(),
    }
}

fn in_score(score: f64, min: (f64, bool), max: (f64, bool)) -> bool {
    let above = if min.1 { score > min.0 } else { score >= min.0 };
    let below = if max.1 { score < max.0 } else { score <= max.0 };
    above && below
}

pub(crate) fn reply_members(out: &mut Out, items: &[(f64, Vec<u8>)], with_scores: bool) {
    if with_scores && out.resp3 {
        out.array(items.len());
        for (score, member) in items {
            out.array(2);
            out.bulk(member);
            out.double(*score);
        }
    } else {
        out.array(items.len() * if with_scores { 2 } else { 1 });
        for (score, member) in items {
            out.bulk(member);
            if with_scores {
                out.double(*score);
            }
        }
    }
}

fn zset(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    match name {
        "zadd" => zadd(args, out, db)?,
        "zincrby" => {
            let by = parse_f64(&args[2])?;
            let score = db.update(&args[1], |slot| {
                let zset = collection(slot, new_zset, zset_mut)?;
                let next = zset.get(&args[3]).copied().unwrap_or(0.0) + by;
                if next.is_nan() {
                    return err("ERR resulting score is not a number (NaN)");
                }
                zset.insert(args[3].clone(), next);
                Ok((next, true))
            })?;
            out.double(score);
        }
        "zrem" => {
            let removed = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let zset = collection(slot, new_zset, zset_mut)?;
                let removed = args[2..]
                    .iter()
                    .filter(|m| zset.remove(*m).is_some())
                    .count();
                Ok((removed as i64, removed > 0))
            })?;
            out.int(removed);
        }
        "zscore" => {
            let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
            match zset.get(&args[2]) {
                Some(score) => out.double(*score),
                None => out.null(),
            }
        }
        "zmscore" => {
            let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
            out.array(args.len() - 2);
            for member in &args[2..] {
                match zset.get(member) {
                    Some(score) => out.double(*score),
                    None => out.null(),
                }
            }
        }
        "zcard" => out.int(read(db, &args[1], zset_mut)?.map_or(0, |z| z.len()) as i64),
        "zcount" => {
            let min = score_bound(&args[2])?;
            let max = score_bound(&args[3])?;
            let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
            out.int(zset.values().filter(|s| in_score(**s, min, max)).count() as i64);
        }
        "zlexcount" => {
            let min = lex_bound(&args[2])?;
            let max = lex_bound(&args[3])?;
            let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
            out.int(
                zset.keys()
                    .filter(|m| above_min(m, &min) && below_max(m, &max))
                    .count() as i64,
            );
        }
        "zrank" | "zrevrank" => {
            let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
            let items = sorted(&zset);
            match items.iter().position(|(_, m)| **m == args[2]) {
                Some(at) => out.int(if name == "zrank" {
                    at
                } else {
                    items.len() - 1 - at
                } as i64),
                None => out.null(),
            }
        }
        "zrange" | "zrevrange" | "zrangebyscore" | "zrevrangebyscore" | "zrangebylex"
        | "zrevrangebylex" => zrange(name, args, out, db)?,
        "zpopmin" | "zpopmax" => {
            let count = match args.get(2) {
                None => None,
                Some(arg) => match parse_i64(arg) {
                    Ok(n) if n >= 0 => Some(n as usize),
                    _ => return err("ERR value is out of range, must be positive"),
                },
            };
            if args.len() > 3 {
                return err(SYNTAX_ERROR);
            }
            let min = name == "zpopmin";
            let popped = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((Vec::new(), false));
                }
                let zset = collection(slot, new_zset, zset_mut)?;
                let mut items: Vec<(f64, Vec<u8>)> = sorted(zset)
                    .into_iter()
                    .map(|(s, m)| (s, m.clone()))
                    .collect();
                if !min {
                    items.reverse();
                }
                items.truncate(count.unwrap_or(1));
                for (_, member) in &items {
                    zset.remove(member);
                }
                let changed = !items.is_empty();
                Ok((items, changed))
            })?;
            if count.is_none() || !out.resp3 {
                // A single pop is a flat [member, score] in RESP3 too.
                out.array(popped.len() * 2);
                for (score, member) in &popped {
                    out.bulk(member);
                    out.double(*score);
                }
            } else {
                reply_members(out, &popped, true);
            }
        }
        "zremrangebyscore" | "zremrangebyrank" => {
            let by_rank = name == "zremrangebyrank";
            let (start, end) = if by_rank {
                (parse_i64(&args[2])?, parse_i64(&args[3])?)
            } else {
                (0, 0)
            };
            let (min, max) = if by_rank {
                ((0.0, false), (0.0, false))
            } else {
                (score_bound(&args[2])?, score_bound(&args[3])?)
            };
            let removed = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let zset = collection(slot, new_zset, zset_mut)?;
                let items: Vec<(f64, Vec<u8>)> = sorted(zset)
                    .into_iter()
                    .map(|(s, m)| (s, m.clone()))
                    .collect();
                let doomed: Vec<Vec<u8>> = if by_rank {
                    match range(start, end, items.len()) {
                        Some((from, to)) => {
                            items[from..=to].iter().map(|(_, m)| m.clone()).collect()
                        }
                        None => Vec::new(),
                    }
                } else {
                    items
                        .iter()
                        .filter(|(s, _)| in_score(*s, min, max))
                        .map(|(_, m)| m.clone())
                        .collect()
                };
                for member in &doomed {
                    zset.remove(member);
                }
                Ok((doomed.len() as i64, !doomed.is_empty()))
            })?;
            out.int(removed);
        }
        _ => return crate::assorted::run(name, args, out, db, blocking),
    }
    Ok(Ran::Done)
}

fn zadd(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut at = 2;
    while at < args.len() {
        match lower(&args[at]).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            "ch" => ch = true,
            "incr" => incr = true,
            _ => break,
        }
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return err(SYNTAX_ERROR);
    }
    if nx && xx {
        return err("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs.len() != 2 {
        return err("ERR INCR option supports a single increment-element pair");
    }
    let mut parsed = Vec::new();
    for pair in pairs.chunks(2) {
        parsed.push((parse_f64(&pair[0])?, pair[1].clone()));
    }
    let (count, score) = db.update(&args[1], |slot| {
        let zset = collection(slot, new_zset, zset_mut)?;
        let mut added = 0i64;
        let mut changed = 0i64;
        let mut result = None;
        for (score, member) in &parsed {
            let current = zset.get(member).copied();
            let mut next = *score;
            if incr {
                next += current.unwrap_or(0.0);
                if next.is_nan() {
                    return err("ERR resulting score is not a number (NaN)");
                }
            }
            let allowed = match current {
                None => !xx,
                Some(old) => !nx && (!gt || next > old) && (!lt || next < old),
            };
            if !allowed {
                continue;
            }
            result = Some(next);
            match current {
                None => {
                    added += 1;
                    zset.insert(member.clone(), next);
                }
                Some(old) if old != next => {
                    changed += 1;
                    zset.insert(member.clone(), next);
                }
                Some(_) => {}
            }
        }
        let modified = added + changed > 0;
        Ok(((if ch { added + changed } else { added }, result), modified))
    })?;
    if incr {
        match score {
            Some(score) => out.double(score),
            None => out.null(),
        }
    } else {
        out.int(count);
    }
    Ok(())
}

pub(crate) fn zrange(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let (selected, with_scores) = zrange_select(name, args, db)?;
    reply_members(out, &selected, with_scores);
    Ok(())
}

/// Sorted-set members with their scores, in order.
pub(crate) type Scored = Vec<(f64, Vec<u8>)>;

/// What a ZRANGE-family command selects, and whether WITHSCORES was given.
pub(crate) fn zrange_select(name: &str, args: &[Vec<u8>], db: &mut Db<'_>) -> R<(Scored, bool)> {
    #[derive(PartialEq)]
    enum By {
        Rank,
        Score,
        Lex,
    }
    let (mut by, mut rev) = match name {
        "zrevrange" => (By::Rank, true),
        "zrangebyscore" => (By::Score, false),
        "zrevrangebyscore" => (By::Score, true),
        "zrangebylex" => (By::Lex, false),
        "zrevrangebylex" => (By::Lex, true),
        _ => (By::Rank, false),
    };
    let mut with_scores = false;
    let mut limit: Option<(i64, i64)> = None;
    let mut at = 4;
    while at < args.len() {
        match lower(&args[at]).as_str() {
            "withscores" if by != By::Lex || name == "zrange" => with_scores = true,
            "limit" if at + 2 < args.len() && name != "zrevrange" => {
                limit = Some((parse_i64(&args[at + 1])?, parse_i64(&args[at + 2])?));
                at += 2;
            }
            "byscore" if name == "zrange" && by == By::Rank => by = By::Score,
            "bylex" if name == "zrange" && by == By::Rank => by = By::Lex,
            "rev" if name == "zrange" => rev = true,
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    if limit.is_some() && by == By::Rank {
        return err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if with_scores && by == By::Lex {
        return err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    // With REV through ZRANGE, the bounds come max first.
    let (low, high) = if rev && by != By::Rank {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
    let mut items: Vec<(f64, Vec<u8>)> = sorted(&zset)
        .into_iter()
        .map(|(s, m)| (s, m.clone()))
        .collect();
    let selected: Vec<(f64, Vec<u8>)> = match by {
        By::Rank => {
            let start = parse_i64(&args[2])?;
            let end = parse_i64(&args[3])?;
            if rev {
                items.reverse();
            }
            match range(start, end, items.len()) {
                Some((from, to)) => items.drain(from..=to).collect(),
                None => Vec::new(),
            }
        }
        By::Score => {
            let min = score_bound(low)?;
            let max = score_bound(high)?;
            let mut hits: Vec<_> = items
                .into_iter()
                .filter(|(s, _)| in_score(*s, min, max))
                .collect();
            if rev {
                hits.reverse();
            }
            hits
        }
        By::Lex => {
            let min = lex_bound(low)?;
            let max = lex_bound(high)?;
            let mut hits: Vec<_> = items
                .into_iter()
                .filter(|(_, m)| above_min(m, &min) && below_max(m, &max))
                .collect();
            if rev {
                hits.reverse();
            }
            hits
        }
    };
    let selected = match limit {
        Some((offset, count)) => {
            if offset < 0 {
                Vec::new()
            } else {
                let rest = selected.into_iter().skip(offset as usize);
                if count < 0 {
                    rest.collect()
                } else {
                    rest.take(count as usize).collect()
                }
            }
        }
        None => selected,
    };
    Ok((selected, with_scores))
}
