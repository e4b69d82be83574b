//! SORT and SORT_RO: `SORT key [BY pattern] [LIMIT offset count]
//! [GET pattern …] [ASC|DESC] [ALPHA] [STORE destination]` over a list,
//! set or sorted set, with Redis 7.0's order (numeric by default, ties by
//! element bytes), pattern lookups (`*` substitution, `->field` of a
//! hash, `#` for the element) and error strings.

use crate::data::{err, lower, Ran, R, SYNTAX_ERROR};
use crate::keyspace::{Db, Entry, WRONGTYPE};
use crate::resp::Out;
use crate::session::parse_i64;
use crate::value::Value;
use std::cmp::Ordering;
use std::collections::VecDeque;

/// An element being sorted: itself, its score (numeric sorts) and what
/// BY found for it (ALPHA with BY).
type Item = (Vec<u8>, f64, Option<Vec<u8>>);

struct Options {
    by: Option<Vec<u8>>,
    gets: Vec<Vec<u8>>,
    limit: Option<(i64, i64)>,
    desc: bool,
    alpha: bool,
    store: Option<Vec<u8>>,
}

pub fn run(
    name: &str,
    args: &[Vec<u8>],
    out: &mut Out,
    db: &mut Db<'_>,
    _blocking: bool,
) -> R<Ran> {
    match name {
        "sort" | "sort_ro" => sort(name == "sort_ro", args, out, db)?,
        _ => return crate::geo::run(name, args, out, db),
    }
    Ok(Ran::Done)
}

fn options(read_only: bool, args: &[Vec<u8>]) -> R<Options> {
    let mut options = Options {
        by: None,
        gets: Vec::new(),
        limit: None,
        desc: false,
        alpha: false,
        store: None,
    };
    let mut at = 2;
    while at < args.len() {
        let left = args.len() - at - 1;
        match lower(&args[at]).as_str() {
            "asc" => options.desc = false,
            "desc" => options.desc = true,
            "alpha" => options.alpha = true,
            "limit" if left >= 2 => {
                let offset = parse_i64(&args[at + 1])?;
                let count = parse_i64(&args[at + 2])?;
                options.limit = Some((offset, count));
                at += 2;
            }
            "store" if left >= 1 && !read_only => {
                options.store = Some(args[at + 1].clone());
                at += 1;
            }
            "by" if left >= 1 => {
                options.by = Some(args[at + 1].clone());
                at += 1;
            }
            "get" if left >= 1 => {
                options.gets.push(args[at + 1].clone());
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    Ok(options)
}

/// What a `BY`/`GET` pattern finds for `element`: `#` is the element, a
/// pattern without `*` finds nothing, `key*->field` a hash field, else the
/// string at the substituted key.
fn lookup(db: &mut Db<'_>, pattern: &[u8], element: &[u8]) -> R<Option<Vec<u8>>> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let arrow = pattern[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|at| star + 1 + at)
        .filter(|&at| at + 2 < pattern.len());
    let (key_pattern, field) = match arrow {
        Some(at) => (&pattern[..at], Some(&pattern[at + 2..])),
        None => (pattern, None),
    };
    let mut key = key_pattern[..star].to_vec();
    key.extend_from_slice(element);
    key.extend_from_slice(&key_pattern[star + 1..]);
    Ok(match (db.get(&key)?, field) {
        (
            Some(Entry {
                value: Value::Hash(hash),
                ..
            }),
            Some(field),
        ) => hash.get(field).cloned(),
        (
            Some(Entry {
                value: Value::Str(bytes),
                ..
            }),
            None,
        ) => Some(bytes),
        _ => None,
    })
}

/// A number as strtod reads a whole string (NaN refused).
fn sort_score(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let trimmed = text.trim_start();
    let value = match trimmed.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        t => t.parse::<f64>().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

fn sort(read_only: bool, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let options = options(read_only, args)?;
    let mut dont_sort = options.by.as_ref().is_some_and(|by| !by.contains(&b'*'));
    let mut alpha = options.alpha;
    let mut by = options.by.clone();
    let (elements, ordered): (Vec<Vec<u8>>, bool) = match db.get(&args[1])? {
        None => (Vec::new(), true),
        Some(entry) => match entry.value {
            Value::List(list) => (list.into_iter().collect(), true),
            Value::Set(set) => (set.into_iter().collect(), false),
            Value::ZSet(zset) => (
                crate::collections::sorted(&zset)
                    .into_iter()
                    .map(|(_, member)| member.clone())
                    .collect(),
                true,
            ),
            _ => return err(WRONGTYPE),
        },
    };
    // A set stored unsorted would depend on its internal order: Redis
    // sorts it by its elements then.
    if dont_sort && !ordered && options.store.is_some() {
        dont_sort = false;
        alpha = true;
        by = None;
    }
    let length = elements.len() as i64;
    let (offset, count) = options.limit.unwrap_or((0, -1));
    let mut start = offset.max(0).min(length);
    let count = count.max(-1).min(length);
    let mut end = if count < 0 {
        length - 1
    } else {
        start + count - 1
    };
    if start >= length {
        start = length - 1;
        end = length - 2;
    }
    if end >= length {
        end = length - 1;
    }
    let mut items: Vec<Item> = elements.into_iter().map(|e| (e, 0.0, None)).collect();
    if dont_sort {
        if options.desc && ordered {
            items.reverse();
        }
    } else {
        let mut bad_score = false;
        for item in &mut items {
            let value = match &by {
                Some(pattern) => match lookup(db, pattern, &item.0)? {
                    Some(value) => value,
                    None => continue,
                },
                None => item.0.clone(),
            };
            if alpha {
                if by.is_some() {
                    item.2 = Some(value);
                }
            } else {
                match sort_score(&value) {
                    Some(score) => item.1 = score,
                    None => bad_score = true,
                }
            }
        }
        if bad_score {
            return err("ERR One or more scores can't be converted into double");
        }
        let by_pattern = by.is_some();
        items.sort_by(|a, b| {
            let order = if !alpha {
                a.1.partial_cmp(&b.1)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| a.0.cmp(&b.0))
            } else if by_pattern {
                // Elements whose BY key is missing sort first.
                match (&a.2, &b.2) {
                    (Some(x), Some(y)) => x.cmp(y),
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                }
            } else {
                a.0.cmp(&b.0)
            };
            if options.desc {
                order.reverse()
            } else {
                order
            }
        });
    }
    let chosen: &[Item] = if end >= start && start >= 0 {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    let mut results: Vec<Option<Vec<u8>>> = Vec::new();
    for (element, _, _) in chosen {
        if options.gets.is_empty() {
            results.push(Some(element.clone()));
        }
        for pattern in &options.gets {
            results.push(lookup(db, pattern, element)?);
        }
    }
    match &options.store {
        Some(destination) => {
            let list: VecDeque<Vec<u8>> = results
                .iter()
                .map(|value| value.clone().unwrap_or_default())
                .collect();
            let stored = list.len();
            let entry = Entry {
                value: Value::List(list),
                expiry_ms: None,
            };
            // An empty result deletes the destination (the write drops an
            // empty list).
            db.put(destination, Some(&entry))?;
            out.int(stored as i64);
        }
        None => {
            out.array(results.len());
            for value in &results {
                match value {
                    Some(bytes) => out.bulk(bytes),
                    None => out.null(),
                }
            }
        }
    }
    Ok(())
}
