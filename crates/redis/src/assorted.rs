//! LPOS, LMPOP/BLMPOP, BLMOVE, BZPOPMIN/BZPOPMAX, the sorted-set algebra
//! (ZUNION, ZINTER, ZDIFF and their STORE forms, ZRANGESTORE), COPY,
//! OBJECT and BITFIELD, with Redis 7.0's replies and error strings.

use crate::collections::{move_element, parse_timeout, reply_members, sorted, zrange_select};
use crate::data::{
    collection, err, list_mut, lower, new_list, new_zset, parse_f64, string_of, zset_mut, Ran, R,
    SYNTAX_ERROR,
};
use crate::keyspace::{set_name, Db, Entry, WRONGTYPE};
use crate::resp::Out;
use crate::session::parse_i64;
use crate::value::Value;
use std::collections::BTreeMap;

const NOT_INTEGER: &str = "ERR value is not an integer or out of range";

pub fn run(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    match name {
        "lpos" => lpos(args, out, db)?,
        "lmpop" => return lmpop(args, 1, out, db, false),
        "blmpop" => {
            let timeout = parse_timeout(&args[1])?;
            return match lmpop(args, 2, out, db, true)? {
                Ran::Done => Ok(Ran::Done),
                Ran::Empty { .. } if blocking => Ok(Ran::Empty {
                    timeout,
                    null_bulk: false,
                }),
                Ran::Empty { .. } | Ran::Wait { .. } => {
                    out.null_array();
                    Ok(Ran::Done)
                }
            };
        }
        "blmove" => {
            let side = |arg: &[u8]| match lower(arg).as_str() {
                "left" => Ok(true),
                "right" => Ok(false),
                _ => err(SYNTAX_ERROR),
            };
            let (from_left, to_left) = (side(&args[3])?, side(&args[4])?);
            let timeout = parse_timeout(&args[5])?;
            match move_element(db, &args[1], &args[2], from_left, to_left)? {
                Some(element) => out.bulk(&element),
                None if blocking => {
                    return Ok(Ran::Empty {
                        timeout,
                        null_bulk: true,
                    })
                }
                None => out.null(),
            }
        }
        "bzpopmin" | "bzpopmax" => {
            let timeout = parse_timeout(&args[args.len() - 1])?;
            let min = name == "bzpopmin";
            for key in &args[1..args.len() - 1] {
                let popped = db.update(key, |slot| {
                    if slot.is_none() {
                        return Ok((None, false));
                    }
                    let zset = collection(slot, new_zset, zset_mut)?;
                    let items = sorted(zset);
                    let pick = if min { items.first() } else { items.last() };
                    let pick = pick.map(|(score, member)| (*score, (*member).clone()));
                    if let Some((_, member)) = &pick {
                        zset.remove(member);
                    }
                    let changed = pick.is_some();
                    Ok((pick, changed))
                })?;
                if let Some((score, member)) = popped {
                    out.array(3);
                    out.bulk(key);
                    out.bulk(&member);
                    out.double(score);
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
        "zunion" | "zinter" | "zdiff" => zalgebra(name, args, 1, None, out, db)?,
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            let base = &name[..name.len() - "store".len()];
            zalgebra(base, args, 2, Some(&args[1]), out, db)?;
        }
        "zrangestore" => {
            // ZRANGE's own parsing over `zrange src min max options…`.
            if args[5..].iter().any(|arg| lower(arg) == "withscores") {
                return err(SYNTAX_ERROR);
            }
            let mut zrange_args = vec![b"zrange".to_vec()];
            zrange_args.extend_from_slice(&args[2..]);
            let (selected, _) = zrange_select("zrange", &zrange_args, db)?;
            let count = selected.len();
            store_zset(db, &args[1], selected)?;
            out.int(count as i64);
        }
        "copy" => copy(args, out, db)?,
        "dump" => match db.get(&args[1])? {
            Some(entry) => out.bulk(&dump(&entry.value)),
            None => out.null(),
        },
        "restore" => restore(args, out, db)?,
        "object" => object(args, out, db)?,
        "bitfield" | "bitfield_ro" => bitfield(name, args, out, db)?,
        _ => return crate::extras::run(name, args, out, db, blocking),
    }
    Ok(Ran::Done)
}

/// A positive count option: `what` names it in the error.
fn positive(arg: &[u8], what: &str) -> R<i64> {
    let n = parse_i64(arg)?;
    if n < 0 {
        return err(&format!("ERR {what} can't be negative"));
    }
    Ok(n)
}

fn lpos(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let mut rank: i64 = 1;
    let mut count: Option<i64> = None;
    let mut maxlen: i64 = 0;
    let mut at = 3;
    while at < args.len() {
        let more = at + 1 < args.len();
        match lower(&args[at]).as_str() {
            "rank" if more => {
                rank = parse_i64(&args[at + 1])?;
                if rank == i64::MIN {
                    return err(NOT_INTEGER);
                }
                if rank == 0 {
                    return err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                         second ... or use negative to start from the end of the list",
                    );
                }
            }
            "count" if more => count = Some(positive(&args[at + 1], "COUNT")?),
            "maxlen" if more => maxlen = positive(&args[at + 1], "MAXLEN")?,
            _ => return err(SYNTAX_ERROR),
        }
        at += 2;
    }
    let list = match db.get(&args[1])? {
        None => None,
        Some(Entry {
            value: Value::List(list),
            ..
        }) => Some(list),
        Some(_) => return err(WRONGTYPE),
    };
    let Some(list) = list else {
        match count {
            Some(_) => out.array(0),
            None => out.null(),
        }
        return Ok(());
    };
    let wanted = match count {
        Some(0) => usize::MAX,
        Some(n) => n as usize,
        None => 1,
    };
    let limit = if maxlen == 0 {
        usize::MAX
    } else {
        maxlen as usize
    };
    let mut skip = rank.unsigned_abs() - 1;
    let mut found = Vec::new();
    let indices: Box<dyn Iterator<Item = usize>> = if rank > 0 {
        Box::new(0..list.len())
    } else {
        Box::new((0..list.len()).rev())
    };
    for (looked, index) in indices.enumerate() {
        if looked >= limit || found.len() >= wanted {
            break;
        }
        if list[index] == args[2] {
            if skip > 0 {
                skip -= 1;
            } else {
                found.push(index as i64);
            }
        }
    }
    match count {
        Some(_) => {
            out.array(found.len());
            for index in found {
                out.int(index);
            }
        }
        None => match found.first() {
            Some(index) => out.int(*index),
            None => out.null(),
        },
    }
    Ok(())
}

/// LMPOP (`numkeys` at `at`) and BLMPOP's non-blocking half: Empty when
/// every list is empty.
fn lmpop(args: &[Vec<u8>], at: usize, out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    let numkeys = parse_i64(&args[at])
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "ERR numkeys should be greater than 0".to_owned())?
        as usize;
    let where_at = at + 1 + numkeys;
    if numkeys > args.len().saturating_sub(at + 2) {
        return err(SYNTAX_ERROR);
    }
    let left = match lower(&args[where_at]).as_str() {
        "left" => true,
        "right" => false,
        _ => return err(SYNTAX_ERROR),
    };
    let mut count = 1usize;
    let mut counted = false;
    let mut option = where_at + 1;
    while option < args.len() {
        match lower(&args[option]).as_str() {
            "count" if option + 1 < args.len() && !counted => {
                counted = true;
                count = parse_i64(&args[option + 1])
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| "ERR count should be greater than 0".to_owned())?
                    as usize;
                option += 2;
            }
            _ => return err(SYNTAX_ERROR),
        }
    }
    for key in &args[at + 1..where_at] {
        let popped = db.update(key, |slot| {
            if slot.is_none() {
                return Ok((Vec::new(), false));
            }
            let list = collection(slot, new_list, list_mut)?;
            let mut popped = Vec::new();
            while popped.len() < count {
                let element = if left {
                    list.pop_front()
                } else {
                    list.pop_back()
                };
                match element {
                    Some(element) => popped.push(element),
                    None => break,
                }
            }
            let changed = !popped.is_empty();
            Ok((popped, changed))
        })?;
        if !popped.is_empty() {
            out.array(2);
            out.bulk(key);
            out.array(popped.len());
            for element in &popped {
                out.bulk(element);
            }
            return Ok(Ran::Done);
        }
    }
    if blocking {
        return Ok(Ran::Empty {
            timeout: None,
            null_bulk: false,
        });
    }
    out.null_array();
    Ok(Ran::Done)
}

/// A sorted set or a plain set (members scored 1) as scores.
fn zset_input(db: &mut Db<'_>, key: &[u8]) -> R<BTreeMap<Vec<u8>, f64>> {
    Ok(match db.get(key)? {
        None => BTreeMap::new(),
        Some(Entry {
            value: Value::ZSet(zset),
            ..
        }) => zset,
        Some(Entry {
            value: Value::Set(set),
            ..
        }) => set.into_iter().map(|member| (member, 1.0)).collect(),
        Some(_) => return err(WRONGTYPE),
    })
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

fn aggregate(how: Aggregate, a: f64, b: f64) -> f64 {
    match how {
        Aggregate::Sum => {
            let sum = a + b;
            // inf + -inf: Redis makes it 0.
            if sum.is_nan() {
                0.0
            } else {
                sum
            }
        }
        Aggregate::Min => a.min(b),
        Aggregate::Max => a.max(b),
    }
}

/// ZUNION/ZINTER/ZDIFF (`numkeys` at `at`), into `store` or the reply.
fn zalgebra(
    name: &str,
    args: &[Vec<u8>],
    at: usize,
    store: Option<&Vec<u8>>,
    out: &mut Out,
    db: &mut Db<'_>,
) -> R<()> {
    let full_name = match store {
        Some(_) => format!("{name}store"),
        None => name.to_owned(),
    };
    let numkeys = parse_i64(&args[at])?;
    if numkeys < 1 {
        return err(&format!(
            "ERR at least 1 input key is needed for '{full_name}' command"
        ));
    }
    let numkeys = numkeys as usize;
    if numkeys > args.len() - at - 1 {
        return err(SYNTAX_ERROR);
    }
    let keys = &args[at + 1..at + 1 + numkeys];
    let mut weights = vec![1.0; numkeys];
    let mut how = Aggregate::Sum;
    let mut with_scores = false;
    let mut option = at + 1 + numkeys;
    while option < args.len() {
        let rest = args.len() - option - 1;
        match lower(&args[option]).as_str() {
            "weights" if name != "zdiff" && rest >= numkeys => {
                for (i, weight) in weights.iter_mut().enumerate() {
                    *weight = parse_f64(&args[option + 1 + i])
                        .map_err(|_| "ERR weight value is not a float".to_owned())?;
                }
                option += numkeys;
            }
            "aggregate" if name != "zdiff" && rest >= 1 => {
                how = match lower(&args[option + 1]).as_str() {
                    "sum" => Aggregate::Sum,
                    "min" => Aggregate::Min,
                    "max" => Aggregate::Max,
                    _ => return err(SYNTAX_ERROR),
                };
                option += 1;
            }
            "withscores" if store.is_none() => with_scores = true,
            _ => return err(SYNTAX_ERROR),
        }
        option += 1;
    }
    let mut inputs = Vec::with_capacity(numkeys);
    for key in keys {
        inputs.push(zset_input(db, key)?);
    }
    let weighted = |score: f64, weight: f64| {
        let value = score * weight;
        if value.is_nan() {
            0.0
        } else {
            value
        }
    };
    let mut result: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
    match name {
        "zunion" => {
            for (input, &weight) in inputs.iter().zip(&weights) {
                for (member, &score) in input {
                    let score = weighted(score, weight);
                    result
                        .entry(member.clone())
                        .and_modify(|s| *s = aggregate(how, *s, score))
                        .or_insert(score);
                }
            }
        }
        "zinter" => {
            if let Some((first, rest)) = inputs.split_first() {
                'members: for (member, &score) in first {
                    let mut total = weighted(score, weights[0]);
                    for (input, &weight) in rest.iter().zip(&weights[1..]) {
                        match input.get(member) {
                            Some(&score) => total = aggregate(how, total, weighted(score, weight)),
                            None => continue 'members,
                        }
                    }
                    result.insert(member.clone(), total);
                }
            }
        }
        _ => {
            if let Some((first, rest)) = inputs.split_first() {
                for (member, &score) in first {
                    if !rest.iter().any(|input| input.contains_key(member)) {
                        result.insert(member.clone(), score);
                    }
                }
            }
        }
    }
    let items: Vec<(f64, Vec<u8>)> = sorted(&result)
        .into_iter()
        .map(|(score, member)| (score, member.clone()))
        .collect();
    match store {
        Some(destination) => {
            let count = items.len();
            store_zset(db, destination, items)?;
            out.int(count as i64);
        }
        None => reply_members(out, &items, with_scores),
    }
    Ok(())
}

/// Replaces `key` with a sorted set of `items` (none: deletes it).
fn store_zset(db: &mut Db<'_>, key: &[u8], items: Vec<(f64, Vec<u8>)>) -> R<()> {
    let zset: BTreeMap<Vec<u8>, f64> = items.into_iter().map(|(s, m)| (m, s)).collect();
    let entry = Entry {
        value: Value::ZSet(zset),
        expiry_ms: None,
    };
    db.put(key, Some(&entry))
}

fn copy(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let mut target_db: Option<usize> = None;
    let mut replace = false;
    let mut at = 3;
    while at < args.len() {
        match lower(&args[at]).as_str() {
            "replace" => replace = true,
            "db" if at + 1 < args.len() => {
                let index = parse_i64(&args[at + 1])?;
                if !(0..crate::session::DATABASES as i64).contains(&index) {
                    return err("ERR DB index is out of range");
                }
                target_db = Some(index as usize);
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    let source_set = db.set.clone();
    let target_set = target_db.map_or_else(|| source_set.clone(), set_name);
    if args[1] == args[2] && target_set == source_set {
        return err("ERR source and destination objects are the same");
    }
    let Some(entry) = db.get(&args[1])? else {
        out.int(0);
        return Ok(());
    };
    db.set = target_set;
    let copied = (|| {
        if !replace && db.get(&args[2])?.is_some() {
            return Ok(false);
        }
        db.put(&args[2], Some(&entry)).map(|()| true)
    })();
    db.set = source_set;
    out.int(i64::from(copied?));
    Ok(())
}

/// DUMP's payload format version (Bolide's own format, not Redis's RDB
/// serialization: RESTORE takes what Bolide's DUMP gave).
const DUMP_VERSION: u8 = 1;

/// A value as DUMP serializes it: its bin's particle type and name, the
/// bin's bytes, then the format version and a 64-bit FNV-1a checksum of
/// everything before it (little-endian), as Redis ends its payloads with a
/// version and a CRC.
fn dump(value: &Value) -> Vec<u8> {
    let (name, particle_type, bytes) = value.encode();
    let mut out = Vec::with_capacity(bytes.len() + name.len() + 12);
    out.push(particle_type);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&bytes);
    out.push(DUMP_VERSION);
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The value a DUMP payload holds; None when it is not one.
fn undump(payload: &[u8]) -> Option<Value> {
    let (body, sum) = payload.split_at_checked(payload.len().checked_sub(8)?)?;
    if fnv1a(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let (&version, body) = body.split_last()?;
    if version != DUMP_VERSION {
        return None;
    }
    let (&particle_type, rest) = body.split_first()?;
    let (&name_length, rest) = rest.split_first()?;
    let (name, bytes) = rest.split_at_checked(usize::from(name_length))?;
    Value::decode(name, particle_type, bytes)
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]`.
fn restore(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let ttl = parse_i64(&args[2])?;
    let (mut replace, mut absolute) = (false, false);
    let mut at = 4;
    while at < args.len() {
        match lower(&args[at]).as_str() {
            "replace" => replace = true,
            "absttl" => absolute = true,
            "idletime" if at + 1 < args.len() => {
                if parse_i64(&args[at + 1])? < 0 {
                    return err("ERR Invalid IDLETIME value, must be >= 0");
                }
                at += 1;
            }
            "freq" if at + 1 < args.len() => {
                let freq = parse_i64(&args[at + 1])?;
                if !(0..=255).contains(&freq) {
                    return err("ERR Invalid FREQ value, must be >= 0 and <= 255");
                }
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    if ttl < 0 {
        return err("ERR Invalid TTL value, must be >= 0");
    }
    if !replace && db.get(&args[1])?.is_some() {
        return err("BUSYKEY Target key name already exists.");
    }
    let Some(value) = undump(&args[3]) else {
        return err("ERR DUMP payload version or checksum are wrong");
    };
    let expiry_ms = match ttl {
        0 => None,
        ttl if absolute => Some(ttl as u64),
        ttl => Some(crate::keyspace::now_ms().saturating_add(ttl as u64)),
    };
    let entry = Entry { value, expiry_ms };
    let written = db.update(&args[1], |slot| {
        if slot.is_some() && !replace {
            return err("BUSYKEY Target key name already exists.");
        }
        // An expiry already past deletes the key (the write drops it).
        *slot = Some(entry.clone());
        Ok(((), true))
    });
    written?;
    out.ok();
    Ok(())
}

/// The encoding Redis 7.0 would report for a value under `limits`.
fn encoding(value: &Value, limits: crate::keyspace::Encodings) -> &'static str {
    match value {
        Value::Str(bytes) => {
            let canonical = std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.parse::<i64>().ok().map(|n| n.to_string() == text));
            if bytes.len() <= 20 && canonical == Some(true) {
                "int"
            } else if bytes.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
        Value::Hash(hash) => {
            let small = |bytes: &Vec<u8>| bytes.len() <= limits.hash_value_bytes;
            if hash.len() <= limits.hash_entries && hash.iter().all(|(f, v)| small(f) && small(v)) {
                "listpack"
            } else {
                "hashtable"
            }
        }
        Value::List(_) => "quicklist",
        Value::Set(set) => {
            let integers = set.iter().all(|member| {
                std::str::from_utf8(member)
                    .ok()
                    .and_then(|text| text.parse::<i64>().ok().map(|n| n.to_string() == text))
                    == Some(true)
            });
            if integers && set.len() <= limits.set_intset_entries {
                "intset"
            } else {
                "hashtable"
            }
        }
        Value::ZSet(zset) => {
            if zset.len() <= limits.zset_entries
                && zset
                    .keys()
                    .all(|member| member.len() <= limits.zset_value_bytes)
            {
                "listpack"
            } else {
                "skiplist"
            }
        }
        Value::Stream(_) => "stream",
    }
}

fn object(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let sub = lower(&args[1]);
    let key_arity = |n: usize| -> R<()> {
        if args.len() == n {
            Ok(())
        } else {
            err(&format!(
                "ERR wrong number of arguments for 'object|{sub}' command"
            ))
        }
    };
    match sub.as_str() {
        "encoding" | "refcount" | "idletime" | "freq" => {
            key_arity(3)?;
            let Some(entry) = db.get(&args[2])? else {
                out.null();
                return Ok(());
            };
            match sub.as_str() {
                "encoding" => out.bulk(encoding(&entry.value, db.encodings).as_bytes()),
                "refcount" => out.int(1),
                "idletime" => out.int(0),
                _ => {
                    return err(
                        "ERR An LFU maxmemory policy is not selected, access frequency not \
                         tracked. Please note that when switching between policies at runtime \
                         LRU and LFU data will take some time to adjust.",
                    )
                }
            }
        }
        "help" => {
            let lines: [&[u8]; 4] = [
                b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                b"ENCODING <key>",
                b"REFCOUNT <key>",
                b"IDLETIME <key>",
            ];
            out.array(lines.len());
            for line in lines {
                out.simple(&String::from_utf8_lossy(line));
            }
        }
        _ => {
            return err(&format!(
                "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                String::from_utf8_lossy(&args[1])
            ))
        }
    }
    Ok(())
}

/// A BITFIELD type: signed and bit width.
#[derive(Clone, Copy)]
struct Field {
    signed: bool,
    bits: u32,
}

fn field_type(arg: &[u8]) -> R<Field> {
    const BAD: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is \
                       not supported but i64 is.";
    let text = std::str::from_utf8(arg).map_err(|_| BAD.to_owned())?;
    let (signed, digits) = match text.as_bytes().first() {
        Some(b'i' | b'I') => (true, &text[1..]),
        Some(b'u' | b'U') => (false, &text[1..]),
        _ => return err(BAD),
    };
    let bits: u32 = digits.parse().map_err(|_| BAD.to_owned())?;
    if bits < 1 || (signed && bits > 64) || (!signed && bits > 63) {
        return err(BAD);
    }
    Ok(Field { signed, bits })
}

fn field_offset(arg: &[u8], field: Field) -> R<u64> {
    const BAD: &str = "ERR bit offset is not an integer or out of range";
    let (multiply, digits) = match arg.first() {
        Some(b'#') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let n = parse_i64(digits).map_err(|_| BAD.to_owned())?;
    if n < 0 {
        return err(BAD);
    }
    let offset = if multiply {
        (n as u64).checked_mul(u64::from(field.bits))
    } else {
        Some(n as u64)
    };
    // Strings are at most 512 MiB: 2^32 bits.
    match offset {
        Some(offset) if offset + u64::from(field.bits) <= 1 << 32 => Ok(offset),
        _ => err(BAD),
    }
}

fn get_bits(bytes: &[u8], offset: u64, field: Field) -> i64 {
    let mut value: u64 = 0;
    for i in 0..u64::from(field.bits) {
        let bit = offset + i;
        let byte = bytes.get((bit / 8) as usize).copied().unwrap_or(0);
        let set = (byte >> (7 - (bit % 8))) & 1;
        value = (value << 1) | u64::from(set);
    }
    if field.signed && field.bits < 64 && value & (1 << (field.bits - 1)) != 0 {
        (value | (u64::MAX << field.bits)) as i64
    } else {
        value as i64
    }
}

fn set_bits(bytes: &mut Vec<u8>, offset: u64, field: Field, value: i64) {
    let end = ((offset + u64::from(field.bits)).div_ceil(8)) as usize;
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    let value = value as u64;
    for i in 0..u64::from(field.bits) {
        let bit = offset + i;
        let set = (value >> (u64::from(field.bits) - 1 - i)) & 1;
        let byte = &mut bytes[(bit / 8) as usize];
        let mask = 1u8 << (7 - (bit % 8));
        if set == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

/// `value` (as i128, from a SET or an INCRBY sum) fitted to `field` under
/// `overflow`: None when FAIL refuses it.
fn fit(value: i128, field: Field, overflow: Overflow) -> Option<i64> {
    let (min, max): (i128, i128) = if field.signed {
        (
            -(1i128 << (field.bits - 1)),
            (1i128 << (field.bits - 1)) - 1,
        )
    } else {
        (0, (1i128 << field.bits) - 1)
    };
    if (min..=max).contains(&value) {
        return Some(value as i64);
    }
    match overflow {
        Overflow::Fail => None,
        Overflow::Sat => Some(if value < min { min } else { max } as i64),
        Overflow::Wrap => {
            let span = 1i128 << field.bits;
            let wrapped = value.rem_euclid(span);
            let wrapped = if field.signed && wrapped > max {
                wrapped - span
            } else {
                wrapped
            };
            Some(wrapped as i64)
        }
    }
}

enum BitOp {
    Get(Field, u64),
    Set(Field, u64, i64, Overflow),
    Incr(Field, u64, i64, Overflow),
}

fn bitfield(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let read_only = name == "bitfield_ro";
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut at = 2;
    while at < args.len() {
        let rest = args.len() - at - 1;
        match lower(&args[at]).as_str() {
            "get" if rest >= 2 => {
                let field = field_type(&args[at + 1])?;
                ops.push(BitOp::Get(field, field_offset(&args[at + 2], field)?));
                at += 3;
            }
            "set" if rest >= 3 && !read_only => {
                let field = field_type(&args[at + 1])?;
                let offset = field_offset(&args[at + 2], field)?;
                let value = parse_i64(&args[at + 3])?;
                ops.push(BitOp::Set(field, offset, value, overflow));
                at += 4;
            }
            "incrby" if rest >= 3 && !read_only => {
                let field = field_type(&args[at + 1])?;
                let offset = field_offset(&args[at + 2], field)?;
                let value = parse_i64(&args[at + 3])?;
                ops.push(BitOp::Incr(field, offset, value, overflow));
                at += 4;
            }
            "overflow" if rest >= 1 && !read_only => {
                overflow = match lower(&args[at + 1]).as_str() {
                    "wrap" => Overflow::Wrap,
                    "sat" => Overflow::Sat,
                    "fail" => Overflow::Fail,
                    _ => return err("ERR Invalid OVERFLOW type specified"),
                };
                at += 2;
            }
            "set" | "incrby" | "overflow" if read_only => {
                return err("ERR BITFIELD_RO only supports the GET subcommand")
            }
            _ => return err(SYNTAX_ERROR),
        }
    }
    let writes = ops.iter().any(|op| !matches!(op, BitOp::Get(..)));
    let results: Vec<Option<i64>> = if writes {
        db.update(&args[1], |slot| {
            let mut bytes = string_of(slot)?.cloned().unwrap_or_default();
            let before = bytes.clone();
            let mut results = Vec::with_capacity(ops.len());
            for op in &ops {
                results.push(match *op {
                    BitOp::Get(field, offset) => Some(get_bits(&bytes, offset, field)),
                    BitOp::Set(field, offset, value, overflow) => {
                        let old = get_bits(&bytes, offset, field);
                        match fit(i128::from(value), field, overflow) {
                            Some(new) => {
                                set_bits(&mut bytes, offset, field, new);
                                Some(old)
                            }
                            None => None,
                        }
                    }
                    BitOp::Incr(field, offset, by, overflow) => {
                        let old = get_bits(&bytes, offset, field);
                        match fit(i128::from(old) + i128::from(by), field, overflow) {
                            Some(new) => {
                                set_bits(&mut bytes, offset, field, new);
                                Some(new)
                            }
                            None => None,
                        }
                    }
                });
            }
            let changed = bytes != before || slot.is_none() && !bytes.is_empty();
            if changed {
                let expiry_ms = slot.as_ref().and_then(|entry| entry.expiry_ms);
                *slot = Some(Entry {
                    value: Value::Str(bytes),
                    expiry_ms,
                });
            }
            Ok((results, changed))
        })?
    } else {
        let entry = db.get(&args[1])?;
        let bytes = string_of(&entry)?.cloned().unwrap_or_default();
        ops.iter()
            .map(|op| match *op {
                BitOp::Get(field, offset) => Some(get_bits(&bytes, offset, field)),
                _ => None,
            })
            .collect()
    };
    out.array(results.len());
    for result in results {
        match result {
            Some(value) => out.int(value),
            None => out.null(),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitfield_fits_as_redis() {
        let u8f = Field {
            signed: false,
            bits: 8,
        };
        let i8f = Field {
            signed: true,
            bits: 8,
        };
        assert_eq!(fit(300, u8f, Overflow::Wrap), Some(44));
        assert_eq!(fit(300, u8f, Overflow::Sat), Some(255));
        assert_eq!(fit(300, u8f, Overflow::Fail), None);
        assert_eq!(fit(-1, u8f, Overflow::Wrap), Some(255));
        assert_eq!(fit(128, i8f, Overflow::Wrap), Some(-128));
        assert_eq!(fit(-129, i8f, Overflow::Sat), Some(-128));
        let mut bytes = Vec::new();
        set_bits(&mut bytes, 0, u8f, 255);
        set_bits(
            &mut bytes,
            4,
            Field {
                signed: false,
                bits: 4,
            },
            0,
        );
        assert_eq!(bytes, vec![0xF0]);
        assert_eq!(get_bits(&bytes, 0, i8f), -16);
        assert_eq!(get_bits(&bytes, 100, u8f), 0);
    }
}
