//! Redis 6.2/7.0 commands over the existing types: HRANDFIELD,
//! ZRANDMEMBER, SRANDMEMBER and SPOP (uniform picks), SINTERCARD,
//! ZINTERCARD, ZMPOP/BZMPOP, BRPOPLPUSH, ZREMRANGEBYLEX and LCS, with
//! Redis 7.0's replies and error strings.

use crate::collections::{move_element, parse_timeout};
use crate::data::{
    bulk_or_null, collection, err, hash_mut, lower, new_set, new_zset, read, set_mut, string_of,
    zset_mut, Ran, R, SYNTAX_ERROR,
};
use crate::keyspace::{Db, Entry, WRONGTYPE};
use crate::resp::Out;
use crate::session::parse_i64;
use crate::value::Value;
use std::cell::Cell;
use std::collections::BTreeSet;

const OUT_OF_RANGE: &str = "ERR value is out of range";

thread_local! {
    static RANDOM: Cell<u64> = Cell::new({
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let here = &nanos as *const u64 as u64;
        nanos ^ here.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15
    });
}

/// A pseudo-random number (splitmix64 on a per-thread state).
pub(crate) fn random_u64() -> u64 {
    RANDOM.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A uniform index below `n` (n > 0).
pub(crate) fn random_below(n: usize) -> usize {
    ((u128::from(random_u64()) * n as u128) >> 64) as usize
}

/// `count` distinct indexes below `n` (count <= n), in random order.
fn distinct_indexes(n: usize, count: usize) -> Vec<usize> {
    let mut indexes: Vec<usize> = (0..n).collect();
    for i in 0..count {
        let j = i + random_below(n - i);
        indexes.swap(i, j);
    }
    indexes.truncate(count);
    indexes
}

/// Which elements a `*RAND*` command with a count returns: indexes into
/// the collection, repeats allowed when `count` was negative.
fn picks(size: usize, count: i64) -> Vec<usize> {
    if size == 0 || count == 0 {
        return Vec::new();
    }
    if count < 0 {
        let n = count.unsigned_abs() as usize;
        return (0..n).map(|_| random_below(size)).collect();
    }
    let n = (count as usize).min(size);
    if n == size {
        return (0..size).collect();
    }
    distinct_indexes(size, n)
}

pub fn run(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    match name {
        "hrandfield" => hrandfield(args, out, db)?,
        "zrandmember" => zrandmember(args, out, db)?,
        "srandmember" => srandmember(args, out, db)?,
        "spop" => spop(args, out, db)?,
        "sintercard" | "zintercard" => intercard(name, args, out, db)?,
        "zmpop" => return zmpop(args, 1, out, db, None),
        "bzmpop" => {
            let timeout = parse_timeout(&args[1])?;
            let blocking = blocking.then_some(timeout);
            return zmpop(args, 2, out, db, blocking);
        }
        "brpoplpush" => {
            let timeout = parse_timeout(&args[3])?;
            match move_element(db, &args[1], &args[2], false, true)? {
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
        "zremrangebylex" => {
            let min = crate::collections::lex_bound(&args[2])?;
            let max = crate::collections::lex_bound(&args[3])?;
            let removed = db.update(&args[1], |slot| {
                if slot.is_none() {
                    return Ok((0, false));
                }
                let zset = collection(slot, new_zset, zset_mut)?;
                let doomed: Vec<Vec<u8>> = zset
                    .keys()
                    .filter(|member| {
                        crate::collections::above_min(member, &min)
                            && crate::collections::below_max(member, &max)
                    })
                    .cloned()
                    .collect();
                for member in &doomed {
                    zset.remove(member);
                }
                Ok((doomed.len() as i64, !doomed.is_empty()))
            })?;
            out.int(removed);
        }
        "lcs" => lcs(args, out, db)?,
        "memory" => memory(args, out, db)?,
        _ => return crate::sort::run(name, args, out, db, blocking),
    }
    Ok(Ran::Done)
}

/// `MEMORY USAGE|STATS|DOCTOR|MALLOC-STATS|PURGE|HELP`. USAGE is the
/// size of the key's record as stored (value bin, expiry and key) plus
/// the 64-byte index entry.
fn memory(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let sub = lower(&args[1]);
    match sub.as_str() {
        "usage" => {
            if args.len() != 3 && !(args.len() == 5 && lower(&args[3]) == "samples") {
                return err(if args.len() < 3 {
                    "ERR wrong number of arguments for 'memory|usage' command"
                } else {
                    SYNTAX_ERROR
                });
            }
            if args.len() == 5 {
                parse_i64(&args[4])?;
            }
            match db.get(&args[2])? {
                Some(entry) => {
                    let (name, _, bytes) = entry.value.encode();
                    let expiry = if entry.expiry_ms.is_some() { 16 } else { 0 };
                    out.int((64 + args[2].len() + name.len() + bytes.len() + expiry) as i64);
                }
                None => out.null(),
            }
        }
        "stats" => {
            let used = db
                .records
                .store()
                .namespace(db.namespace)
                .map_or(0, |ns| ns.memory_used_bytes());
            out.map(3);
            out.bulk(b"peak.allocated");
            out.int(used as i64);
            out.bulk(b"total.allocated");
            out.int(used as i64);
            out.bulk(b"keys.count");
            out.int(crate::data::count_keys(db) as i64);
        }
        "doctor" => out.verbatim(b"Hi Sam, I can't find any memory issue in your instance."),
        "malloc-stats" => out.verbatim(b"Stats not supported for the current allocator"),
        "purge" => out.ok(),
        "help" => {
            let lines = [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "MALLOC-STATS",
                "PURGE",
                "STATS",
                "USAGE <key> [SAMPLES <count>]",
                "HELP",
            ];
            out.array(lines.len());
            for line in lines {
                out.simple(line);
            }
        }
        _ => {
            return err(&format!(
                "ERR unknown subcommand '{}'. Try MEMORY HELP.",
                String::from_utf8_lossy(&args[1])
            ))
        }
    }
    Ok(())
}

/// A `*RAND*` count: its value, or Redis's range error.
fn rand_count(arg: &[u8], pairs: bool) -> R<i64> {
    let count = parse_i64(arg)?;
    let limit = if pairs { i64::MAX / 2 } else { i64::MAX };
    if count < -limit || count > limit {
        return err(OUT_OF_RANGE);
    }
    Ok(count)
}

fn with_option(args: &[Vec<u8>], word: &str) -> R<bool> {
    match args.len() {
        3 => Ok(false),
        4 if lower(&args[3]) == word => Ok(true),
        _ => err(SYNTAX_ERROR),
    }
}

fn hrandfield(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    if args.len() == 2 {
        let hash = read(db, &args[1], hash_mut)?.unwrap_or_default();
        let field = (!hash.is_empty()).then(|| random_below(hash.len()));
        bulk_or_null(
            out,
            field
                .and_then(|at| hash.keys().nth(at))
                .map(|f| f.as_slice()),
        );
        return Ok(());
    }
    let with_values = with_option(args, "withvalues")?;
    let count = rand_count(&args[2], with_values)?;
    let hash: Vec<(Vec<u8>, Vec<u8>)> = read(db, &args[1], hash_mut)?
        .unwrap_or_default()
        .into_iter()
        .collect();
    let chosen = picks(hash.len(), count);
    pairs_reply(
        out,
        chosen.iter().map(|&i| &hash[i]),
        chosen.len(),
        with_values,
    );
    Ok(())
}

/// Members (with their values when `with_values`): flat in RESP2, pairs
/// in RESP3.
fn pairs_reply<'a>(
    out: &mut Out,
    items: impl Iterator<Item = &'a (Vec<u8>, Vec<u8>)>,
    count: usize,
    with_values: bool,
) {
    if with_values && !out.resp3 {
        out.array(count * 2);
    } else {
        out.array(count);
    }
    for (member, value) in items {
        if with_values && out.resp3 {
            out.array(2);
        }
        out.bulk(member);
        if with_values {
            out.bulk(value);
        }
    }
}

fn zrandmember(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    if args.len() == 2 {
        let zset = read(db, &args[1], zset_mut)?.unwrap_or_default();
        let member = (!zset.is_empty()).then(|| random_below(zset.len()));
        bulk_or_null(
            out,
            member
                .and_then(|at| zset.keys().nth(at))
                .map(|m| m.as_slice()),
        );
        return Ok(());
    }
    let with_scores = with_option(args, "withscores")?;
    let count = rand_count(&args[2], with_scores)?;
    let zset: Vec<(Vec<u8>, f64)> = read(db, &args[1], zset_mut)?
        .unwrap_or_default()
        .into_iter()
        .collect();
    let chosen = picks(zset.len(), count);
    if with_scores && !out.resp3 {
        out.array(chosen.len() * 2);
    } else {
        out.array(chosen.len());
    }
    for &i in &chosen {
        let (member, score) = &zset[i];
        if with_scores && out.resp3 {
            out.array(2);
        }
        out.bulk(member);
        if with_scores {
            out.double(*score);
        }
    }
    Ok(())
}

fn srandmember(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    if args.len() > 3 {
        return err(SYNTAX_ERROR);
    }
    let set: Vec<Vec<u8>> = read(db, &args[1], set_mut)?
        .unwrap_or_default()
        .into_iter()
        .collect();
    match args.get(2) {
        None => bulk_or_null(
            out,
            (!set.is_empty()).then(|| set[random_below(set.len())].as_slice()),
        ),
        Some(arg) => {
            let count = rand_count(arg, false)?;
            let chosen = picks(set.len(), count);
            out.array(chosen.len());
            for i in chosen {
                out.bulk(&set[i]);
            }
        }
    }
    Ok(())
}

fn spop(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    if args.len() > 3 {
        return err(SYNTAX_ERROR);
    }
    let count = match args.get(2) {
        None => None,
        Some(arg) => match parse_i64(arg) {
            Ok(n) if n >= 0 => Some(n as usize),
            _ => return err("ERR value is out of range, must be positive"),
        },
    };
    let popped = db.update(&args[1], |slot| {
        if slot.is_none() {
            return Ok((Vec::new(), false));
        }
        let set = collection(slot, new_set, set_mut)?;
        let take = count.unwrap_or(1).min(set.len());
        let members: Vec<&Vec<u8>> = set.iter().collect();
        let chosen: Vec<Vec<u8>> = distinct_indexes(members.len(), take)
            .into_iter()
            .map(|i| members[i].clone())
            .collect();
        for member in &chosen {
            set.remove(member);
        }
        let changed = !chosen.is_empty();
        Ok((chosen, changed))
    })?;
    match count {
        None => bulk_or_null(out, popped.first().map(|v| v.as_slice())),
        Some(_) => {
            out.set(popped.len());
            for member in popped {
                out.bulk(&member);
            }
        }
    }
    Ok(())
}

/// `numkeys` at `at` (1 ≤ numkeys ≤ what follows): the count.
fn numkeys(args: &[Vec<u8>], at: usize) -> R<usize> {
    let n = parse_i64(&args[at])
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "ERR numkeys should be greater than 0".to_owned())?;
    if n as usize > args.len() - at - 1 {
        return err("ERR Number of keys can't be greater than number of args");
    }
    Ok(n as usize)
}

fn intercard(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let n = if name == "zintercard" {
        // ZINTERCARD parses its numkeys as ZINTER does.
        let n = parse_i64(&args[1])?;
        if n < 1 {
            return err("ERR at least 1 input key is needed for 'zintercard' command");
        }
        if n as usize > args.len() - 2 {
            return err(SYNTAX_ERROR);
        }
        n as usize
    } else {
        numkeys(args, 1)?
    };
    let mut limit = 0usize;
    let mut at = 2 + n;
    while at < args.len() {
        if lower(&args[at]) == "limit" && at + 1 < args.len() {
            limit = parse_i64(&args[at + 1])
                .ok()
                .filter(|&l| l >= 0)
                .ok_or_else(|| "ERR LIMIT can't be negative".to_owned())?
                as usize;
            at += 2;
        } else {
            return err(SYNTAX_ERROR);
        }
    }
    let mut inputs: Vec<BTreeSet<Vec<u8>>> = Vec::with_capacity(n);
    for key in &args[2..2 + n] {
        let members = match db.get(key)? {
            None => BTreeSet::new(),
            Some(Entry {
                value: Value::Set(set),
                ..
            }) => set,
            Some(Entry {
                value: Value::ZSet(zset),
                ..
            }) if name == "zintercard" => zset.into_keys().collect(),
            Some(_) => return err(WRONGTYPE),
        };
        inputs.push(members);
    }
    inputs.sort_by_key(BTreeSet::len);
    let mut count = 0usize;
    if let Some((first, rest)) = inputs.split_first() {
        for member in first {
            if rest.iter().all(|other| other.contains(member)) {
                count += 1;
                if limit != 0 && count >= limit {
                    break;
                }
            }
        }
    }
    out.int(count as i64);
    Ok(())
}

/// ZMPOP (`numkeys` at `at`) and BZMPOP (`blocking`: its timeout, when it
/// may wait).
fn zmpop(
    args: &[Vec<u8>],
    at: usize,
    out: &mut Out,
    db: &mut Db<'_>,
    blocking: Option<Option<std::time::Duration>>,
) -> R<Ran> {
    let n = parse_i64(&args[at])
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "ERR numkeys should be greater than 0".to_owned())? as usize;
    let where_at = at + 1 + n;
    if where_at >= args.len() {
        return err(SYNTAX_ERROR);
    }
    let min = match lower(&args[where_at]).as_str() {
        "min" => true,
        "max" => false,
        _ => return err(SYNTAX_ERROR),
    };
    let mut count: Option<usize> = None;
    let mut option = where_at + 1;
    while option < args.len() {
        if count.is_none() && lower(&args[option]) == "count" && option + 1 < args.len() {
            count = Some(
                parse_i64(&args[option + 1])
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(|| "ERR count should be greater than 0".to_owned())?
                    as usize,
            );
            option += 2;
        } else {
            return err(SYNTAX_ERROR);
        }
    }
    let count = count.unwrap_or(1);
    for key in &args[at + 1..where_at] {
        let popped = db.update(key, |slot| {
            if slot.is_none() {
                return Ok((Vec::new(), false));
            }
            let zset = collection(slot, new_zset, zset_mut)?;
            let mut items = crate::collections::sorted(zset);
            if !min {
                items.reverse();
            }
            items.truncate(count);
            let items: Vec<(f64, Vec<u8>)> =
                items.into_iter().map(|(s, m)| (s, m.clone())).collect();
            for (_, member) in &items {
                zset.remove(member);
            }
            let changed = !items.is_empty();
            Ok((items, changed))
        })?;
        if !popped.is_empty() {
            out.array(2);
            out.bulk(key);
            out.array(popped.len());
            for (score, member) in &popped {
                out.array(2);
                out.bulk(member);
                out.double(*score);
            }
            return Ok(Ran::Done);
        }
    }
    if let Some(timeout) = blocking {
        return Ok(Ran::Empty {
            timeout,
            null_bulk: false,
        });
    }
    out.null_array();
    Ok(Ran::Done)
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`.
fn lcs(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let (mut len, mut idx, mut with_match_len) = (false, false, false);
    let mut min_match_len = 0usize;
    let mut at = 3;
    while at < args.len() {
        match lower(&args[at]).as_str() {
            "len" => len = true,
            "idx" => idx = true,
            "withmatchlen" => with_match_len = true,
            "minmatchlen" if at + 1 < args.len() => {
                min_match_len = parse_i64(&args[at + 1])?.max(0) as usize;
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    if len && idx {
        return err("ERR If you want both the length and indexes, please just use IDX.");
    }
    let first = db.get(&args[1])?;
    let second = db.get(&args[2])?;
    let a = string_of(&first)
        .map_err(|_| "ERR The specified keys must contain string values".to_owned())?
        .cloned()
        .unwrap_or_default();
    let b = string_of(&second)
        .map_err(|_| "ERR The specified keys must contain string values".to_owned())?
        .cloned()
        .unwrap_or_default();
    if (a.len() as u64 + 1) * (b.len() as u64 + 1) > (1 << 30) {
        return err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    // table[i][j]: the LCS length of a[..i] and b[..j].
    let width = b.len() + 1;
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let length = table[a.len() * width + b.len()] as usize;
    if len {
        out.int(length as i64);
        return Ok(());
    }
    // Walk back from the end: the common string, and the matching ranges
    // (last first, as Redis lists them).
    let mut common = vec![0u8; length];
    let mut ranges: Vec<((usize, usize), (usize, usize))> = Vec::new();
    let mut current: Option<((usize, usize), (usize, usize))> = None;
    let (mut i, mut j, mut k) = (a.len(), b.len(), length);
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            k -= 1;
            common[k] = a[i - 1];
            current = match current {
                Some(((a_start, a_end), (b_start, b_end))) if a_start == i && b_start == j => {
                    Some(((i - 1, a_end), (j - 1, b_end)))
                }
                other => {
                    if let Some(range) = other {
                        ranges.push(range);
                    }
                    Some(((i - 1, i - 1), (j - 1, j - 1)))
                }
            };
            i -= 1;
            j -= 1;
        } else if table[(i - 1) * width + j] > table[i * width + j - 1] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    if let Some(range) = current {
        ranges.push(range);
    }
    if !idx {
        out.bulk(&common);
        return Ok(());
    }
    let kept: Vec<_> = ranges
        .into_iter()
        .filter(|((start, end), _)| end - start + 1 >= min_match_len)
        .collect();
    out.map(2);
    out.bulk(b"matches");
    out.array(kept.len());
    for ((a_start, a_end), (b_start, b_end)) in kept {
        out.array(if with_match_len { 3 } else { 2 });
        out.array(2);
        out.int(a_start as i64);
        out.int(a_end as i64);
        out.array(2);
        out.int(b_start as i64);
        out.int(b_end as i64);
        if with_match_len {
            out.int((a_end - a_start + 1) as i64);
        }
    }
    out.bulk(b"len");
    out.int(length as i64);
    Ok(())
}
