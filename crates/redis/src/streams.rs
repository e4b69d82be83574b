//! Streams: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XREAD, XGROUP,
//! XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO and XSETID with
//! Redis 7.0.15's replies and error strings.
//!
//! A stream is one record, like the other collections: a map bin
//! `stream` an Aerospike client reads as a dict (docs/redis.md):
//!
//! ```text
//! {"entries":        [[id, [field, value, …]], …]   in ID order
//!  "last-id":        id                              the last ID generated
//!  "entries-added":  n                               entries ever added
//!  "max-deleted-id": id                              the largest XDEL'd ID
//!  "groups": {name: {"last-delivered-id": id,
//!                    "entries-read": n,              -1: not known
//!                    "consumers": {name: seen-time-ms},
//!                    "pending": [[id, consumer, delivery-time-ms, deliveries], …]}}}
//! ```
//!
//! with IDs as `"<ms>-<seq>"` strings. An empty stream keeps its key, as in
//! Redis. Every command is one read-compute-write of its key
//! (`Db::update`); a blocking XREAD or XREADGROUP looks at its keys again
//! until its timeout, as the blocking pops do.

use crate::data::{err, lower, Ran, R, SYNTAX_ERROR};
use crate::keyspace::{now_ms, Db, Entry, WRONGTYPE};
use crate::resp::Out;
use crate::session::parse_i64;
use crate::value::{array_header, map_header, map_len, string, Value};
use bolide_wire::msgpack::{Item, Reader};
use std::collections::BTreeMap;
use std::time::Duration;

pub const BIN_STREAM: &[u8] = b"stream";

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// Entries of one radix-tree node of a Redis stream
/// (`stream-node-max-entries`): approximate trimming removes whole nodes.
const NODE_ENTRIES: usize = 100;
/// What a blocked XREAD without COUNT is served at most (Redis's
/// `XREAD_BLOCKED_DEFAULT_COUNT`).
const BLOCKED_COUNT_DEFAULT: &[u8] = b"1000";

/// A stream entry ID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id {
    pub ms: u64,
    pub seq: u64,
}

impl Id {
    const MIN: Id = Id { ms: 0, seq: 0 };
    const MAX: Id = Id {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    fn next(self) -> Option<Id> {
        if self.seq < u64::MAX {
            Some(Id {
                ms: self.ms,
                seq: self.seq + 1,
            })
        } else if self.ms < u64::MAX {
            Some(Id {
                ms: self.ms + 1,
                seq: 0,
            })
        } else {
            None
        }
    }

    fn previous(self) -> Option<Id> {
        if self.seq > 0 {
            Some(Id {
                ms: self.ms,
                seq: self.seq - 1,
            })
        } else if self.ms > 0 {
            Some(Id {
                ms: self.ms - 1,
                seq: u64::MAX,
            })
        } else {
            None
        }
    }

    fn is_zero(self) -> bool {
        self == Id::MIN
    }

    pub fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    fn parse_text(text: &[u8]) -> Option<Id> {
        let text = std::str::from_utf8(text).ok()?;
        let (ms, seq) = text.split_once('-')?;
        Some(Id {
            ms: ms.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

/// A pending (delivered, not yet acknowledged) entry of a group.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub consumer: Vec<u8>,
    pub delivered_ms: u64,
    pub deliveries: u64,
}

/// A consumer group.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub last_id: Id,
    /// Entries the group has read (-1: not known).
    pub entries_read: i64,
    /// Consumer name → when it was last seen (ms).
    pub consumers: BTreeMap<Vec<u8>, u64>,
    pub pending: BTreeMap<Id, Pending>,
}

/// A stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stream {
    /// ID → its fields and values, flat.
    pub entries: BTreeMap<Id, Vec<Vec<u8>>>,
    pub last_id: Id,
    pub entries_added: u64,
    pub max_deleted: Id,
    pub groups: BTreeMap<Vec<u8>, Group>,
}

// ---- the record's bin ----------------------------------------------------

impl Stream {
    /// The `stream` map bin (msgpack, Aerospike's string prefixes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        map_header(&mut out, 5);
        string(&mut out, b"entries");
        array_header(&mut out, self.entries.len());
        for (id, fields) in &self.entries {
            array_header(&mut out, 2);
            string(&mut out, id.text().as_bytes());
            array_header(&mut out, fields.len());
            for field in fields {
                string(&mut out, field);
            }
        }
        string(&mut out, b"last-id");
        string(&mut out, self.last_id.text().as_bytes());
        string(&mut out, b"entries-added");
        integer(&mut out, self.entries_added as i64);
        string(&mut out, b"max-deleted-id");
        string(&mut out, self.max_deleted.text().as_bytes());
        string(&mut out, b"groups");
        map_header(&mut out, self.groups.len());
        for (name, group) in &self.groups {
            string(&mut out, name);
            map_header(&mut out, 4);
            string(&mut out, b"last-delivered-id");
            string(&mut out, group.last_id.text().as_bytes());
            string(&mut out, b"entries-read");
            integer(&mut out, group.entries_read);
            string(&mut out, b"consumers");
            map_header(&mut out, group.consumers.len());
            for (consumer, seen) in &group.consumers {
                string(&mut out, consumer);
                integer(&mut out, *seen as i64);
            }
            string(&mut out, b"pending");
            array_header(&mut out, group.pending.len());
            for (id, pending) in &group.pending {
                array_header(&mut out, 4);
                string(&mut out, id.text().as_bytes());
                string(&mut out, &pending.consumer);
                integer(&mut out, pending.delivered_ms as i64);
                integer(&mut out, pending.deliveries as i64);
            }
        }
        out
    }

    /// A stream from its bin; None if the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<Stream> {
        let mut reader = Reader::new(bytes);
        let mut stream = Stream::default();
        for _ in 0..map_len(&mut reader)? {
            let key = text(&mut reader)?;
            match key.as_slice() {
                b"entries" => {
                    for _ in 0..array(&mut reader)? {
                        if array(&mut reader)? != 2 {
                            return None;
                        }
                        let id = Id::parse_text(&text(&mut reader)?)?;
                        let n = array(&mut reader)?;
                        // The count comes from the record: reserve no more
                        // than a few, the bytes bound the rest.
                        let mut fields = Vec::with_capacity((n as usize).min(64));
                        for _ in 0..n {
                            fields.push(text(&mut reader)?);
                        }
                        stream.entries.insert(id, fields);
                    }
                }
                b"last-id" => stream.last_id = Id::parse_text(&text(&mut reader)?)?,
                b"entries-added" => stream.entries_added = number(&mut reader)?.max(0) as u64,
                b"max-deleted-id" => stream.max_deleted = Id::parse_text(&text(&mut reader)?)?,
                b"groups" => {
                    for _ in 0..map_len(&mut reader)? {
                        let name = text(&mut reader)?;
                        let group = decode_group(&mut reader)?;
                        stream.groups.insert(name, group);
                    }
                }
                _ => reader.skip().ok()?,
            }
        }
        Some(stream)
    }

    fn first_id(&self) -> Id {
        self.entries.keys().next().copied().unwrap_or(Id::MIN)
    }
}

fn decode_group(reader: &mut Reader<'_>) -> Option<Group> {
    let mut group = Group {
        last_id: Id::MIN,
        entries_read: -1,
        consumers: BTreeMap::new(),
        pending: BTreeMap::new(),
    };
    for _ in 0..map_len(reader)? {
        let key = text(reader)?;
        match key.as_slice() {
            b"last-delivered-id" => group.last_id = Id::parse_text(&text(reader)?)?,
            b"entries-read" => group.entries_read = number(reader)?,
            b"consumers" => {
                for _ in 0..map_len(reader)? {
                    let name = text(reader)?;
                    let seen = number(reader)?.max(0) as u64;
                    group.consumers.insert(name, seen);
                }
            }
            b"pending" => {
                for _ in 0..array(reader)? {
                    if array(reader)? != 4 {
                        return None;
                    }
                    let id = Id::parse_text(&text(reader)?)?;
                    let consumer = text(reader)?;
                    let delivered_ms = number(reader)?.max(0) as u64;
                    let deliveries = number(reader)?.max(0) as u64;
                    group.pending.insert(
                        id,
                        Pending {
                            consumer,
                            delivered_ms,
                            deliveries,
                        },
                    );
                }
            }
            _ => reader.skip().ok()?,
        }
    }
    Some(group)
}

fn integer(out: &mut Vec<u8>, n: i64) {
    out.push(0xd3);
    out.extend_from_slice(&n.to_be_bytes());
}

fn array(reader: &mut Reader<'_>) -> Option<u32> {
    match reader.item().ok()? {
        Item::Array(n) => Some(n),
        _ => None,
    }
}

fn number(reader: &mut Reader<'_>) -> Option<i64> {
    match reader.item().ok()? {
        Item::Int(n) => Some(n),
        Item::Uint(n) => i64::try_from(n).ok(),
        _ => None,
    }
}

fn text(reader: &mut Reader<'_>) -> Option<Vec<u8>> {
    match reader.item().ok()? {
        Item::Str(bytes) | Item::Bin(bytes) => Some(match bytes.split_first() {
            Some((&prefix, rest))
                if prefix == bolide_types::particle::STRING
                    || prefix == bolide_types::particle::BLOB =>
            {
                rest.to_vec()
            }
            _ => bytes.to_vec(),
        }),
        _ => None,
    }
}

// ---- arguments --------------------------------------------------------------

/// An unsigned decimal as Redis's `string2ull` reads it.
fn unsigned(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// An ID argument: `ms-seq`, `ms` (the sequence `missing_seq`), and unless
/// `strict` the `-` and `+` extremes.
fn parse_id(arg: &[u8], missing_seq: u64, strict: bool) -> R<Id> {
    if arg.len() > 127 {
        return err(INVALID_ID);
    }
    match arg {
        b"-" if !strict => return Ok(Id::MIN),
        b"+" if !strict => return Ok(Id::MAX),
        _ => {}
    }
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(dash) => (&arg[..dash], Some(&arg[dash + 1..])),
        None => (arg, None),
    };
    let ms = unsigned(ms).ok_or_else(|| INVALID_ID.to_owned())?;
    let seq = match seq {
        Some(seq) => unsigned(seq).ok_or_else(|| INVALID_ID.to_owned())?,
        None => missing_seq,
    };
    Ok(Id { ms, seq })
}

/// XADD's ID: `ms-seq`, `ms` or `ms-*` (the sequence to be chosen): the
/// ID and whether its sequence was given.
fn parse_add_id(arg: &[u8]) -> R<(Id, bool)> {
    if let Some(ms) = arg.strip_suffix(b"-*") {
        let ms = unsigned(ms).ok_or_else(|| INVALID_ID.to_owned())?;
        return Ok((Id { ms, seq: 0 }, false));
    }
    Ok((parse_id(arg, 0, true)?, true))
}

/// A range bound: `(` makes it exclusive (then `-` and `+` are refused).
fn parse_bound(arg: &[u8], missing_seq: u64) -> R<(Id, bool)> {
    if arg.len() > 1 && arg[0] == b'(' {
        return Ok((parse_id(&arg[1..], missing_seq, true)?, true));
    }
    Ok((parse_id(arg, missing_seq, false)?, false))
}

fn range_start(arg: &[u8]) -> R<Id> {
    let (id, exclusive) = parse_bound(arg, 0)?;
    if exclusive {
        return id
            .next()
            .ok_or_else(|| "ERR invalid start ID for the interval".to_owned());
    }
    Ok(id)
}

fn range_end(arg: &[u8]) -> R<Id> {
    let (id, exclusive) = parse_bound(arg, u64::MAX)?;
    if exclusive {
        return id
            .previous()
            .ok_or_else(|| "ERR invalid end ID for the interval".to_owned());
    }
    Ok(id)
}

fn integer_arg(arg: &[u8], error: &str) -> R<i64> {
    parse_i64(arg).map_err(|_| error.to_owned())
}

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    None,
    MaxLen(u64),
    MinId(Id),
}

/// XADD's and XTRIM's options.
struct Trim {
    strategy: Strategy,
    approximate: bool,
    /// Most entries to remove (0: no limit).
    limit: u64,
    no_mkstream: bool,
    /// (XADD) the ID given, if any, and whether its sequence was.
    id: Option<(Id, bool)>,
    /// (XADD) where the ID argument is.
    id_at: usize,
}

fn parse_trim(args: &[Vec<u8>], xadd: bool) -> R<Trim> {
    let mut trim = Trim {
        strategy: Strategy::None,
        approximate: false,
        limit: 0,
        no_mkstream: false,
        id: None,
        id_at: args.len(),
    };
    let mut limit_given = false;
    let mut at = 2;
    while at < args.len() {
        let more = args.len() - 1 - at;
        let option = lower(&args[at]);
        if xadd && args[at] == b"*" {
            trim.id_at = at;
            break;
        } else if (option == "maxlen" || option == "minid") && more > 0 {
            if trim.strategy != Strategy::None {
                return err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
            }
            trim.approximate = false;
            if more >= 2 && (args[at + 1] == b"~" || args[at + 1] == b"=") {
                trim.approximate = args[at + 1] == b"~";
                at += 1;
            }
            let value = &args[at + 1];
            if option == "maxlen" {
                let n = integer_arg(value, NOT_INTEGER)?;
                if n < 0 {
                    return err("ERR The MAXLEN argument must be >= 0.");
                }
                trim.strategy = Strategy::MaxLen(n as u64);
            } else {
                trim.strategy = Strategy::MinId(parse_id(value, 0, true)?);
            }
            at += 2;
        } else if option == "limit" && more > 0 {
            let n = integer_arg(&args[at + 1], NOT_INTEGER)?;
            if n < 0 {
                return err("ERR The LIMIT argument must be >= 0.");
            }
            trim.limit = n as u64;
            limit_given = true;
            at += 2;
        } else if xadd && option == "nomkstream" {
            trim.no_mkstream = true;
            at += 1;
        } else if xadd {
            trim.id = Some(parse_add_id(&args[at])?);
            trim.id_at = at;
            break;
        } else {
            return err(SYNTAX_ERROR);
        }
    }
    if trim.limit > 0 && trim.strategy == Strategy::None {
        return err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        );
    }
    if !xadd && trim.strategy == Strategy::None {
        return err("ERR syntax error, XTRIM must be called with a trimming strategy");
    }
    if limit_given {
        if !trim.approximate {
            return err("ERR syntax error, LIMIT cannot be used without the special ~ option");
        }
    } else if trim.approximate {
        trim.limit = (100 * NODE_ENTRIES) as u64;
    } else {
        trim.limit = 0;
    }
    Ok(trim)
}

// ---- stream operations --------------------------------------------------

impl Stream {
    /// Removes entries from the head as the strategy says: exactly, or
    /// (approximately) only whole nodes of [`NODE_ENTRIES`] entries, at
    /// most `limit` (0: no limit). The number removed.
    fn trim(&mut self, strategy: Strategy, approximate: bool, limit: u64) -> u64 {
        let mut removed = 0u64;
        loop {
            let node: Vec<Id> = self.entries.keys().take(NODE_ENTRIES).copied().collect();
            let Some(&last) = node.last() else {
                break;
            };
            if limit > 0 && removed + node.len() as u64 > limit {
                break;
            }
            let whole = match strategy {
                Strategy::None => return removed,
                Strategy::MaxLen(max) => {
                    if self.entries.len() as u64 <= max {
                        break;
                    }
                    self.entries.len() as u64 - node.len() as u64 >= max
                }
                Strategy::MinId(min) => last < min,
            };
            if whole {
                for id in &node {
                    self.entries.remove(id);
                }
                removed += node.len() as u64;
                continue;
            }
            if approximate {
                break;
            }
            for id in node {
                let done = match strategy {
                    Strategy::MaxLen(max) => self.entries.len() as u64 <= max,
                    Strategy::MinId(min) => id >= min,
                    Strategy::None => true,
                };
                if done {
                    break;
                }
                self.entries.remove(&id);
                removed += 1;
            }
            break;
        }
        removed
    }

    /// Whether an XDEL'd entry lies in [start, end] (Redis's check: only
    /// the largest deleted ID is known).
    fn has_tombstones(&self, start: Option<Id>, end: Option<Id>) -> bool {
        if self.entries.is_empty() || self.max_deleted.is_zero() {
            return false;
        }
        if self.first_id() > self.max_deleted {
            return false;
        }
        let start = start.unwrap_or(Id::MIN);
        let end = end.unwrap_or(Id::MAX);
        start <= self.max_deleted && self.max_deleted <= end
    }

    /// The number of entries added up to `id`, when it can be known.
    fn distance_from_first_ever(&self, id: Id) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.entries.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.first_id();
        if self.max_deleted.is_zero() || self.max_deleted < first {
            if id < first {
                return Some(self.entries_added - self.entries.len() as u64);
            }
            if id == first {
                return Some(self.entries_added - self.entries.len() as u64 + 1);
            }
        }
        None
    }

    /// A group's lag (entries not yet delivered to it), when known.
    fn lag(&self, group: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if group.entries_read >= 0 && !self.has_tombstones(Some(group.last_id), None) {
            return Some(self.entries_added as i64 - group.entries_read);
        }
        self.distance_from_first_ever(group.last_id)
            .map(|read| self.entries_added as i64 - read as i64)
    }
}

fn reply_entry(out: &mut Out, id: Id, fields: &[Vec<u8>]) {
    out.array(2);
    out.bulk(id.text().as_bytes());
    out.array(fields.len());
    for field in fields {
        out.bulk(field);
    }
}

fn stream_of(entry: &Option<Entry>) -> R<Option<&Stream>> {
    match entry {
        None => Ok(None),
        Some(Entry {
            value: Value::Stream(stream),
            ..
        }) => Ok(Some(stream)),
        Some(_) => err(WRONGTYPE),
    }
}

fn stream_mut(entry: &mut Option<Entry>) -> R<Option<&mut Stream>> {
    match entry {
        None => Ok(None),
        Some(Entry {
            value: Value::Stream(stream),
            ..
        }) => Ok(Some(stream)),
        Some(_) => err(WRONGTYPE),
    }
}

fn no_group(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    )
}

fn no_consumer_group(group: &[u8], key: &[u8]) -> String {
    format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    )
}

// ---- commands ---------------------------------------------------------------

/// Runs stream command `name`. `blocking`: a blocking read may wait.
pub fn run(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    match name {
        "xadd" => xadd(args, out, db)?,
        "xlen" => {
            let entry = db.get(&args[1])?;
            out.int(stream_of(&entry)?.map_or(0, |s| s.entries.len()) as i64);
        }
        "xrange" | "xrevrange" => xrange(args, out, db, name == "xrevrange")?,
        "xdel" => xdel(args, out, db)?,
        "xtrim" => {
            let trim = parse_trim(args, false)?;
            let removed = db.update(&args[1], |slot| {
                let Some(stream) = stream_mut(slot)? else {
                    return Ok((0, false));
                };
                let removed = stream.trim(trim.strategy, trim.approximate, trim.limit);
                Ok((removed, removed > 0))
            })?;
            out.int(removed as i64);
        }
        "xread" | "xreadgroup" => return xread(name, args, out, db, blocking),
        "xgroup" => xgroup(args, out, db)?,
        "xack" => xack(args, out, db)?,
        "xpending" => xpending(args, out, db)?,
        "xclaim" => xclaim(args, out, db)?,
        "xautoclaim" => xautoclaim(args, out, db)?,
        "xinfo" => xinfo(args, out, db)?,
        "xsetid" => xsetid(args, out, db)?,
        _ => return err("ERR unknown stream command"),
    }
    Ok(Ran::Done)
}

fn xadd(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let trim = parse_trim(args, true)?;
    let fields_at = trim.id_at + 1;
    if args.len() < fields_at + 2 || !(args.len() - fields_at).is_multiple_of(2) {
        return err("ERR wrong number of arguments for 'xadd' command");
    }
    if let Some((id, true)) = trim.id {
        if id.is_zero() {
            return err("ERR The ID specified in XADD must be greater than 0-0");
        }
    }
    let fields = args[fields_at..].to_vec();
    let added = db.update(&args[1], |slot| {
        if slot.is_none() {
            if trim.no_mkstream {
                return Ok((None, false));
            }
            *slot = Some(Entry {
                value: Value::Stream(Box::default()),
                expiry_ms: None,
            });
        }
        let Some(stream) = stream_mut(slot)? else {
            return Ok((None, false));
        };
        if stream.last_id == Id::MAX {
            return err(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            );
        }
        let id = match trim.id {
            Some((id, true)) => Some(id),
            Some((id, false)) if id.ms == stream.last_id.ms => (stream.last_id.seq < u64::MAX)
                .then(|| Id {
                    ms: id.ms,
                    seq: stream.last_id.seq + 1,
                }),
            Some((id, false)) => Some(id),
            None => {
                let now = now_ms();
                if now > stream.last_id.ms {
                    Some(Id { ms: now, seq: 0 })
                } else {
                    stream.last_id.next()
                }
            }
        };
        let Some(id) = id.filter(|id| *id > stream.last_id) else {
            return err(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            );
        };
        stream.entries.insert(id, fields.clone());
        stream.last_id = id;
        stream.entries_added += 1;
        stream.trim(trim.strategy, trim.approximate, trim.limit);
        Ok((Some(id), true))
    })?;
    match added {
        Some(id) => out.bulk(id.text().as_bytes()),
        None => out.null(),
    }
    Ok(())
}

fn xrange(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, reverse: bool) -> R<()> {
    let (start_arg, end_arg) = if reverse {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let start = range_start(start_arg)?;
    let end = range_end(end_arg)?;
    let mut count: Option<usize> = None;
    let mut at = 4;
    while at < args.len() {
        if lower(&args[at]) == "count" && at + 1 < args.len() {
            count = Some(parse_i64(&args[at + 1])?.max(0) as usize);
            at += 2;
        } else {
            return err(SYNTAX_ERROR);
        }
    }
    let entry = db.get(&args[1])?;
    let Some(stream) = stream_of(&entry)? else {
        out.array(0);
        return Ok(());
    };
    if count == Some(0) {
        out.null_array();
        return Ok(());
    }
    let limit = count.unwrap_or(usize::MAX);
    if start > end {
        out.array(0);
        return Ok(());
    }
    let range = stream.entries.range(start..=end);
    let chosen: Vec<(&Id, &Vec<Vec<u8>>)> = if reverse {
        range.rev().take(limit).collect()
    } else {
        range.take(limit).collect()
    };
    out.array(chosen.len());
    for (id, fields) in chosen {
        reply_entry(out, *id, fields);
    }
    Ok(())
}

fn xdel(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let ids = args[2..]
        .iter()
        .map(|arg| parse_id(arg, 0, true))
        .collect::<R<Vec<Id>>>()?;
    let removed = db.update(&args[1], |slot| {
        let Some(stream) = stream_mut(slot)? else {
            return Ok((0, false));
        };
        let mut removed = 0;
        for id in &ids {
            if stream.entries.remove(id).is_some() {
                removed += 1;
                if *id > stream.max_deleted {
                    stream.max_deleted = *id;
                }
            }
        }
        Ok((removed, removed > 0))
    })?;
    out.int(removed);
    Ok(())
}

fn xsetid(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let id = parse_id(&args[2], 0, true)?;
    let mut entries_added: Option<u64> = None;
    let mut max_deleted = Id::MIN;
    let mut at = 3;
    while at < args.len() {
        let more = args.len() - 1 - at;
        match lower(&args[at]).as_str() {
            "entriesadded" if more > 0 => {
                let n = parse_i64(&args[at + 1])?;
                if n < 0 {
                    return err("ERR entries_added must be positive");
                }
                entries_added = Some(n as u64);
                at += 2;
            }
            "maxdeletedid" if more > 0 => {
                max_deleted = parse_id(&args[at + 1], 0, true)?;
                if id < max_deleted {
                    return err(
                        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    );
                }
                at += 2;
            }
            _ => return err(SYNTAX_ERROR),
        }
    }
    db.update(&args[1], |slot| {
        let Some(stream) = stream_mut(slot)? else {
            return err("ERR no such key");
        };
        if let Some(&top) = stream.entries.keys().next_back() {
            if id < top {
                return err(
                    "ERR The ID specified in XSETID is smaller than the target stream top item",
                );
            }
            if entries_added.is_some_and(|added| (stream.entries.len() as u64) > added) {
                return err("ERR The entries_added specified in XSETID is smaller than the target stream length");
            }
        }
        stream.last_id = id;
        if let Some(added) = entries_added {
            stream.entries_added = added;
        }
        if !max_deleted.is_zero() {
            stream.max_deleted = max_deleted;
        }
        Ok(((), true))
    })?;
    out.ok();
    Ok(())
}

// ---- XREAD and XREADGROUP ------------------------------------------------

/// What XREAD asked for one key: entries after this ID, or (XREADGROUP)
/// new entries (`>`).
#[derive(Clone, Copy, PartialEq)]
enum Cursor {
    After(Id),
    New,
}

struct ReadArgs {
    count: usize,
    block: Option<Option<Duration>>,
    count_given: bool,
    noack: bool,
    group: Option<(Vec<u8>, Vec<u8>)>,
    streams_at: usize,
    keys: usize,
}

/// Whether an XREAD or XREADGROUP asks to block (before its STREAMS).
pub fn has_block(args: &[Vec<u8>]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|arg| !arg.eq_ignore_ascii_case(b"streams"))
        .any(|arg| arg.eq_ignore_ascii_case(b"block"))
}

/// What a blocked XREADGROUP answers when its group went away while it
/// waited, as Redis 7.0.15 does: UNBLOCKED when a key is no stream any
/// more, NOGROUP when the group was destroyed.
pub fn blocked_group_gone(db: &mut Db<'_>, args: &[Vec<u8>]) -> String {
    let gone = read_keys(args).iter().any(|key| {
        !matches!(
            db.get(key),
            Ok(Some(Entry {
                value: Value::Stream(_),
                ..
            }))
        )
    });
    if gone {
        "UNBLOCKED the stream key no longer exists".to_owned()
    } else {
        "NOGROUP the consumer group this client was blocked on no longer exists".to_owned()
    }
}

/// The keys of an XREAD or XREADGROUP: the first half of what follows
/// STREAMS.
pub fn read_keys(args: &[Vec<u8>]) -> &[Vec<u8>] {
    let Some(at) = args
        .iter()
        .skip(1)
        .position(|arg| arg.eq_ignore_ascii_case(b"streams"))
    else {
        return &[];
    };
    let start = at + 2;
    let n = args.len().saturating_sub(start) / 2;
    &args[start..start + n]
}

fn parse_read(name: &str, args: &[Vec<u8>]) -> R<ReadArgs> {
    let group_command = name == "xreadgroup";
    let mut read = ReadArgs {
        count: 0,
        block: None,
        count_given: false,
        noack: false,
        group: None,
        streams_at: 0,
        keys: 0,
    };
    let mut at = 1;
    while at < args.len() {
        let more = args.len() - at - 1;
        match lower(&args[at]).as_str() {
            "block" if more > 0 => {
                let ms = parse_i64(&args[at + 1])
                    .map_err(|_| "ERR timeout is not an integer or out of range".to_owned())?;
                if ms < 0 {
                    return err("ERR timeout is negative");
                }
                read.block = Some((ms > 0).then(|| Duration::from_millis(ms as u64)));
                at += 2;
            }
            "count" if more > 0 => {
                read.count = parse_i64(&args[at + 1])?.max(0) as usize;
                read.count_given = true;
                at += 2;
            }
            "streams" if more > 0 => {
                read.streams_at = at + 1;
                let n = args.len() - read.streams_at;
                if !n.is_multiple_of(2) {
                    return err("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.");
                }
                read.keys = n / 2;
                break;
            }
            "group" if more >= 2 => {
                if !group_command {
                    return err("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.");
                }
                read.group = Some((args[at + 1].clone(), args[at + 2].clone()));
                at += 3;
            }
            "noack" => {
                if !group_command {
                    return err("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.");
                }
                read.noack = true;
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
    }
    if read.streams_at == 0 {
        return err(SYNTAX_ERROR);
    }
    if group_command && read.group.is_none() {
        return err("ERR Missing GROUP option for XREADGROUP");
    }
    Ok(read)
}

fn xread(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>, blocking: bool) -> R<Ran> {
    let read = parse_read(name, args)?;
    let keys = &args[read.streams_at..read.streams_at + read.keys];
    let id_args = &args[read.streams_at + read.keys..];
    let mut cursors = Vec::with_capacity(keys.len());
    // Every key and ID is checked before anything is served.
    for (key, id) in keys.iter().zip(id_args) {
        let entry = db.get(key)?;
        let stream = stream_of(&entry)?;
        if let Some((group, _)) = &read.group {
            if stream.is_none_or(|s| !s.groups.contains_key(group)) {
                return Err(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(group)
                ));
            }
        }
        cursors.push(if id.as_slice() == b"$" {
            if read.group.is_some() {
                return err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.");
            }
            Cursor::After(stream.map_or(Id::MIN, |s| s.last_id))
        } else if id.as_slice() == b">" {
            if read.group.is_none() {
                return err("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.");
            }
            Cursor::New
        } else {
            Cursor::After(parse_id(id, 0, true)?)
        });
    }
    let mut served: Vec<(Vec<u8>, Out)> = Vec::new();
    for (key, cursor) in keys.iter().zip(&cursors) {
        let mut reply = Out::new(out.resp3);
        let any = match &read.group {
            None => read_plain(db, key, *cursor, read.count, &mut reply)?,
            Some((group, consumer)) => {
                read_group(db, key, group, consumer, *cursor, &read, &mut reply)?
            }
        };
        if any {
            served.push((key.clone(), reply));
        }
    }
    if !served.is_empty() {
        if out.resp3 {
            out.map(served.len());
        } else {
            out.array(served.len());
        }
        for (key, reply) in served {
            if !out.resp3 {
                out.array(2);
            }
            out.bulk(&key);
            out.buf.extend_from_slice(&reply.buf);
        }
        return Ok(Ran::Done);
    }
    match read.block {
        Some(timeout) if blocking => {
            // Waits, then looks again with `$` resolved to the IDs it
            // meant now, and at most 1,000 entries unless COUNT says.
            let mut resume: Vec<Vec<u8>> = vec![args[0].clone()];
            if !read.count_given {
                resume.push(b"COUNT".to_vec());
                resume.push(BLOCKED_COUNT_DEFAULT.to_vec());
            }
            resume.extend_from_slice(&args[1..read.streams_at + read.keys]);
            for cursor in &cursors {
                resume.push(match cursor {
                    Cursor::After(id) => id.text().into_bytes(),
                    Cursor::New => b">".to_vec(),
                });
            }
            Ok(Ran::Wait { timeout, resume })
        }
        _ => {
            out.null_array();
            Ok(Ran::Done)
        }
    }
}

/// XREAD of one key: entries after the cursor into `reply`; false if none.
fn read_plain(
    db: &mut Db<'_>,
    key: &[u8],
    cursor: Cursor,
    count: usize,
    reply: &mut Out,
) -> R<bool> {
    let Cursor::After(after) = cursor else {
        return Ok(false);
    };
    let entry = db.get(key)?;
    let Some(stream) = stream_of(&entry)? else {
        return Ok(false);
    };
    let Some(start) = after.next() else {
        return Ok(false);
    };
    let limit = if count == 0 { usize::MAX } else { count };
    let chosen: Vec<_> = stream.entries.range(start..).take(limit).collect();
    if chosen.is_empty() {
        return Ok(false);
    }
    reply.array(chosen.len());
    for (id, fields) in chosen {
        reply_entry(reply, *id, fields);
    }
    Ok(true)
}

/// XREADGROUP of one key: new entries (delivered to the consumer and, but
/// for NOACK, made pending) or the consumer's pending history; false when
/// there is nothing to serve now.
fn read_group(
    db: &mut Db<'_>,
    key: &[u8],
    group_name: &[u8],
    consumer: &[u8],
    cursor: Cursor,
    read: &ReadArgs,
    reply: &mut Out,
) -> R<bool> {
    let resp3 = reply.resp3;
    let limit = if read.count == 0 {
        usize::MAX
    } else {
        read.count
    };
    let noack = read.noack;
    let served = db.update(key, |slot| {
        let Some(stream) = stream_mut(slot)? else {
            return Err(no_group_read(key, group_name));
        };
        let Some(group) = stream.groups.get(group_name) else {
            return Err(no_group_read(key, group_name));
        };
        let now = now_ms();
        let mut out = Out::new(resp3);
        match cursor {
            Cursor::After(after) => {
                // The consumer's history: its pending entries after the ID.
                let group = stream
                    .groups
                    .get_mut(group_name)
                    .ok_or_else(|| no_group_read(key, group_name))?;
                group.consumers.insert(consumer.to_vec(), now);
                let start = after.next().unwrap_or(Id::MAX);
                let ids: Vec<Id> = group
                    .pending
                    .range(start..)
                    .filter(|(_, p)| p.consumer == consumer)
                    .map(|(id, _)| *id)
                    .take(limit)
                    .collect();
                out.array(ids.len());
                for id in ids {
                    match stream.entries.get(&id) {
                        Some(fields) => {
                            reply_entry(&mut out, id, fields);
                            if let Some(pending) = group.pending.get_mut(&id) {
                                pending.delivered_ms = now;
                                pending.deliveries += 1;
                            }
                        }
                        None => {
                            out.array(2);
                            out.bulk(id.text().as_bytes());
                            out.null_array();
                        }
                    }
                }
                Ok((Some(out), true))
            }
            Cursor::New => {
                let start = group.last_id.next().unwrap_or(Id::MAX);
                let ids: Vec<Id> = stream
                    .entries
                    .range(start..)
                    .map(|(id, _)| *id)
                    .take(limit)
                    .collect();
                if ids.is_empty() {
                    return Ok((None, false));
                }
                let mut entries_read = group.entries_read;
                let mut last_id = group.last_id;
                for &id in &ids {
                    if id > last_id {
                        if entries_read >= 0 && !stream.has_tombstones(Some(id), None) {
                            entries_read += 1;
                        } else if stream.entries_added > 0 {
                            entries_read =
                                stream.distance_from_first_ever(id).map_or(-1, |n| n as i64);
                        }
                        last_id = id;
                    }
                }
                out.array(ids.len());
                for &id in &ids {
                    if let Some(fields) = stream.entries.get(&id) {
                        reply_entry(&mut out, id, fields);
                    }
                }
                let group = stream
                    .groups
                    .get_mut(group_name)
                    .ok_or_else(|| no_group_read(key, group_name))?;
                group.entries_read = entries_read;
                group.last_id = last_id;
                group.consumers.insert(consumer.to_vec(), now);
                if !noack {
                    for id in ids {
                        group.pending.insert(
                            id,
                            Pending {
                                consumer: consumer.to_vec(),
                                delivered_ms: now,
                                deliveries: 1,
                            },
                        );
                    }
                }
                Ok((Some(out), true))
            }
        }
    })?;
    match served {
        Some(out) => {
            reply.buf.extend_from_slice(&out.buf);
            Ok(true)
        }
        None => Ok(false),
    }
}

fn no_group_read(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    )
}

// ---- groups ------------------------------------------------------------------

fn sub_arity(command: &str, sub: &str, args: &[Vec<u8>], arity: i32) -> R<()> {
    let n = args.len() as i32;
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return err(&format!(
            "ERR wrong number of arguments for '{command}|{sub}' command"
        ));
    }
    Ok(())
}

fn subcommand_syntax(command: &str, sub: &[u8]) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
            .chars()
            .take(128)
            .collect::<String>()
    )
}

fn unknown_subcommand(command: &str, sub: &[u8]) -> String {
    format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
            .chars()
            .take(128)
            .collect::<String>()
    )
}

fn help(out: &mut Out, lines: &[&str]) {
    out.array(lines.len());
    for line in lines {
        out.simple(line);
    }
}

fn xgroup(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let sub = lower(&args[1]);
    let arity = match sub.as_str() {
        "create" | "setid" => -5,
        "destroy" => 4,
        "createconsumer" | "delconsumer" => 5,
        "help" => 2,
        _ => return Err(unknown_subcommand("XGROUP", &args[1])),
    };
    sub_arity("xgroup", &sub, args, arity)?;
    if sub == "help" {
        help(
            out,
            &[
                "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CREATE <key> <groupname> <id|$> [option]",
                "    Create a new consumer group. Options are:",
                "    * MKSTREAM",
                "      Create the empty stream if it does not exist.",
                "    * ENTRIESREAD entries_read",
                "      Set the group's entries_read counter (internal use).",
                "CREATECONSUMER <key> <groupname> <consumer>",
                "    Create a new consumer in the specified group.",
                "DELCONSUMER <key> <groupname> <consumer>",
                "    Remove the specified consumer.",
                "DESTROY <key> <groupname>",
                "    Remove the specified group.",
                "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
                "    Set the current group ID and entries_read counter.",
                "HELP",
                "    Prints this help.",
            ],
        );
        return Ok(());
    }
    let mut mkstream = false;
    let mut entries_read: i64 = -1;
    let mut at = 5;
    while at < args.len() {
        let option = lower(&args[at]);
        if sub == "create" && option == "mkstream" {
            mkstream = true;
            at += 1;
        } else if (sub == "create" || sub == "setid")
            && option == "entriesread"
            && at + 1 < args.len()
        {
            entries_read = parse_i64(&args[at + 1])?;
            if entries_read < -1 {
                return err("ERR value for ENTRIESREAD must be positive or -1");
            }
            at += 2;
        } else {
            return Err(subcommand_syntax("XGROUP", &args[1]));
        }
    }
    let valid_shape = match sub.as_str() {
        "create" => (5..=8).contains(&args.len()),
        "setid" => args.len() == 5 || args.len() == 7,
        _ => true,
    };
    let key = &args[2];
    let group_name = args[3].clone();
    let answer = db.update(key, |slot| {
        if slot.is_none() {
            if !mkstream {
                return err("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
            }
            *slot = Some(Entry {
                value: Value::Stream(Box::default()),
                expiry_ms: None,
            });
        }
        let Some(stream) = stream_mut(slot)? else {
            return err("ERR no such key");
        };
        let exists = stream.groups.contains_key(&group_name);
        if !exists && matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Err(no_consumer_group(&group_name, key));
        }
        if !valid_shape {
            return Err(subcommand_syntax("XGROUP", &args[1]));
        }
        let now = now_ms();
        match sub.as_str() {
            "create" => {
                let id = if args[4] == b"$" {
                    stream.last_id
                } else {
                    parse_id(&args[4], 0, true)?
                };
                if exists {
                    return Ok((Reply::Error("BUSYGROUP Consumer Group name already exists"), false));
                }
                stream.groups.insert(
                    group_name.clone(),
                    Group {
                        last_id: id,
                        entries_read,
                        consumers: BTreeMap::new(),
                        pending: BTreeMap::new(),
                    },
                );
                Ok((Reply::Ok, true))
            }
            "setid" => {
                let id = if args[4] == b"$" {
                    stream.last_id
                } else {
                    parse_id(&args[4], 0, false)?
                };
                if let Some(group) = stream.groups.get_mut(&group_name) {
                    group.last_id = id;
                    group.entries_read = entries_read;
                }
                Ok((Reply::Ok, true))
            }
            "destroy" => {
                let removed = stream.groups.remove(&group_name).is_some();
                Ok((Reply::Int(i64::from(removed)), removed))
            }
            "createconsumer" => {
                let Some(group) = stream.groups.get_mut(&group_name) else {
                    return Err(no_consumer_group(&group_name, key));
                };
                if group.consumers.contains_key(&args[4]) {
                    return Ok((Reply::Int(0), false));
                }
                group.consumers.insert(args[4].clone(), now);
                Ok((Reply::Int(1), true))
            }
            _ => {
                let Some(group) = stream.groups.get_mut(&group_name) else {
                    return Err(no_consumer_group(&group_name, key));
                };
                if group.consumers.remove(&args[4]).is_none() {
                    return Ok((Reply::Int(0), false));
                }
                let before = group.pending.len();
                group.pending.retain(|_, pending| pending.consumer != args[4]);
                Ok((Reply::Int((before - group.pending.len()) as i64), true))
            }
        }
    })?;
    match answer {
        Reply::Ok => out.ok(),
        Reply::Int(n) => out.int(n),
        Reply::Error(text) => out.error(text),
    }
    Ok(())
}

enum Reply {
    Ok,
    Int(i64),
    Error(&'static str),
}

fn xack(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let entry = db.get(&args[1])?;
    let present = stream_of(&entry)?.is_some_and(|s| s.groups.contains_key(&args[2]));
    if !present {
        out.int(0);
        return Ok(());
    }
    let ids = args[3..]
        .iter()
        .map(|arg| parse_id(arg, 0, true))
        .collect::<R<Vec<Id>>>()?;
    let acknowledged = db.update(&args[1], |slot| {
        let Some(group) = stream_mut(slot)?.and_then(|s| s.groups.get_mut(&args[2])) else {
            return Ok((0, false));
        };
        let acknowledged = ids
            .iter()
            .filter(|id| group.pending.remove(id).is_some())
            .count();
        Ok((acknowledged, acknowledged > 0))
    })?;
    out.int(acknowledged as i64);
    Ok(())
}

fn xpending(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let n = args.len();
    if n != 3 && !(6..=9).contains(&n) {
        return err(SYNTAX_ERROR);
    }
    let mut range: Option<(Id, Id, usize, Option<Vec<u8>>)> = None;
    let mut min_idle: i64 = 0;
    if n >= 6 {
        let mut at = 3;
        if lower(&args[3]) == "idle" {
            min_idle = parse_i64(&args[4])?;
            if n < 8 {
                return err(SYNTAX_ERROR);
            }
            at += 2;
        }
        let count = parse_i64(&args[at + 2])?.max(0) as usize;
        let start = range_start(&args[at])?;
        let end = range_end(&args[at + 1])?;
        let consumer = args.get(at + 3).cloned();
        range = Some((start, end, count, consumer));
    }
    let entry = db.get(&args[1])?;
    let stream = stream_of(&entry)?;
    let Some(group) = stream.and_then(|s| s.groups.get(&args[2])) else {
        return Err(no_group(&args[1], &args[2]));
    };
    let now = now_ms();
    let Some((start, end, count, consumer)) = range else {
        out.array(4);
        out.int(group.pending.len() as i64);
        let (Some(first), Some(last)) = (group.pending.keys().next(), group.pending.keys().last())
        else {
            out.null();
            out.null();
            out.null_array();
            return Ok(());
        };
        out.bulk(first.text().as_bytes());
        out.bulk(last.text().as_bytes());
        let mut per_consumer: BTreeMap<&[u8], usize> = BTreeMap::new();
        for pending in group.pending.values() {
            *per_consumer.entry(&pending.consumer).or_default() += 1;
        }
        out.array(per_consumer.len());
        for (name, count) in per_consumer {
            out.array(2);
            out.bulk(name);
            out.bulk(count.to_string().as_bytes());
        }
        return Ok(());
    };
    if let Some(consumer) = &consumer {
        if !group.consumers.contains_key(consumer) {
            out.array(0);
            return Ok(());
        }
    }
    let chosen: Vec<(&Id, &Pending)> = if start > end {
        Vec::new()
    } else {
        group
            .pending
            .range(start..=end)
            .filter(|(_, p)| consumer.as_ref().is_none_or(|c| p.consumer == *c))
            .filter(|(_, p)| min_idle <= 0 || now.saturating_sub(p.delivered_ms) as i64 >= min_idle)
            .take(count)
            .collect()
    };
    out.array(chosen.len());
    for (id, pending) in chosen {
        out.array(4);
        out.bulk(id.text().as_bytes());
        out.bulk(&pending.consumer);
        out.int(now.saturating_sub(pending.delivered_ms) as i64);
        out.int(pending.deliveries as i64);
    }
    Ok(())
}

fn xclaim(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    {
        let entry = db.get(&args[1])?;
        if !stream_of(&entry)?.is_some_and(|s| s.groups.contains_key(&args[2])) {
            return Err(no_group(&args[1], &args[2]));
        }
    }
    let min_idle = integer_arg(&args[4], "ERR Invalid min-idle-time argument for XCLAIM")?.max(0);
    let mut ids = Vec::new();
    let mut at = 5;
    while at < args.len() {
        match parse_id(&args[at], 0, true) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        at += 1;
    }
    let now = now_ms() as i64;
    let mut force = false;
    let mut justid = false;
    let mut delivery: Option<i64> = None;
    let mut retry_count: Option<i64> = None;
    let mut last_id = Id::MIN;
    while at < args.len() {
        let more = args.len() - 1 - at;
        match lower(&args[at]).as_str() {
            "force" => force = true,
            "justid" => justid = true,
            "idle" if more > 0 => {
                at += 1;
                let idle = integer_arg(&args[at], "ERR Invalid IDLE option argument for XCLAIM")?;
                delivery = Some(now - idle);
            }
            "time" if more > 0 => {
                at += 1;
                delivery = Some(integer_arg(
                    &args[at],
                    "ERR Invalid TIME option argument for XCLAIM",
                )?);
            }
            "retrycount" if more > 0 => {
                at += 1;
                retry_count = Some(integer_arg(
                    &args[at],
                    "ERR Invalid RETRYCOUNT option argument for XCLAIM",
                )?);
            }
            "lastid" if more > 0 => {
                at += 1;
                last_id = parse_id(&args[at], 0, true)?;
            }
            _ => {
                return Err(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(&args[at])
                ))
            }
        }
        at += 1;
    }
    let delivery = match delivery {
        Some(t) if t >= 0 && t <= now => t as u64,
        _ => now as u64,
    };
    let consumer = args[3].clone();
    let resp3 = out.resp3;
    let reply = db.update(&args[1], |slot| {
        let Some(stream) = stream_mut(slot)? else {
            return Err(no_group(&args[1], &args[2]));
        };
        let mut out = Out::new(resp3);
        let mut claimed: Vec<Id> = Vec::new();
        let mut changed = false;
        {
            let Some(group) = stream.groups.get_mut(&args[2]) else {
                return Err(no_group(&args[1], &args[2]));
            };
            if last_id > group.last_id {
                group.last_id = last_id;
                changed = true;
            }
            for id in &ids {
                if !stream.entries.contains_key(id) {
                    // A pending entry no longer in the stream goes.
                    changed |= group.pending.remove(id).is_some();
                    continue;
                }
                if force && !group.pending.contains_key(id) {
                    // Not delivered to anyone yet (Redis's NACK without a
                    // consumer), counted as delivered once.
                    group.pending.insert(
                        *id,
                        Pending {
                            consumer: Vec::new(),
                            delivered_ms: now as u64,
                            deliveries: 1,
                        },
                    );
                }
                let Some(pending) = group.pending.get_mut(id) else {
                    continue;
                };
                if !pending.consumer.is_empty()
                    && min_idle > 0
                    && (now - pending.delivered_ms as i64) < min_idle
                {
                    continue;
                }
                pending.consumer = consumer.clone();
                pending.delivered_ms = delivery;
                if let Some(count) = retry_count.filter(|c| *c >= 0) {
                    pending.deliveries = count as u64;
                } else if !justid {
                    pending.deliveries += 1;
                }
                group.consumers.insert(consumer.clone(), now as u64);
                claimed.push(*id);
                changed = true;
            }
        }
        out.array(claimed.len());
        for id in claimed {
            if justid {
                out.bulk(id.text().as_bytes());
            } else if let Some(fields) = stream.entries.get(&id) {
                reply_entry(&mut out, id, fields);
            }
        }
        Ok((out, changed))
    })?;
    out.buf.extend_from_slice(&reply.buf);
    Ok(())
}

fn xautoclaim(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let min_idle = integer_arg(
        &args[4],
        "ERR Invalid min-idle-time argument for XAUTOCLAIM",
    )?
    .max(0);
    let start = range_start(&args[5])?;
    let mut count: usize = 100;
    let mut justid = false;
    let mut at = 6;
    while at < args.len() {
        let more = args.len() - 1 - at;
        match lower(&args[at]).as_str() {
            "count" if more > 0 => {
                let n = parse_i64(&args[at + 1]).map_err(|_| "ERR COUNT must be > 0".to_owned())?;
                if !(1..=(i64::MAX / 16)).contains(&n) {
                    return err("ERR COUNT must be > 0");
                }
                count = n as usize;
                at += 2;
            }
            "justid" => {
                justid = true;
                at += 1;
            }
            _ => return err(SYNTAX_ERROR),
        }
    }
    {
        let entry = db.get(&args[1])?;
        if !stream_of(&entry)?.is_some_and(|s| s.groups.contains_key(&args[2])) {
            return Err(no_group(&args[1], &args[2]));
        }
    }
    let consumer = args[3].clone();
    let resp3 = out.resp3;
    let reply = db.update(&args[1], |slot| {
        let Some(stream) = stream_mut(slot)? else {
            return Err(no_group(&args[1], &args[2]));
        };
        let now = now_ms();
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut next = Id::MIN;
        {
            let Some(group) = stream.groups.get_mut(&args[2]) else {
                return Err(no_group(&args[1], &args[2]));
            };
            let candidates: Vec<Id> = group.pending.range(start..).map(|(id, _)| *id).collect();
            let mut attempts = count.saturating_mul(10);
            let mut remaining = count;
            let mut index = 0;
            while attempts > 0 && remaining > 0 && index < candidates.len() {
                attempts -= 1;
                let id = candidates[index];
                index += 1;
                if !stream.entries.contains_key(&id) {
                    group.pending.remove(&id);
                    deleted.push(id);
                    remaining -= 1;
                    continue;
                }
                let Some(pending) = group.pending.get_mut(&id) else {
                    continue;
                };
                if min_idle > 0 && (now.saturating_sub(pending.delivered_ms) as i64) < min_idle {
                    continue;
                }
                pending.consumer = consumer.clone();
                pending.delivered_ms = now;
                if !justid {
                    pending.deliveries += 1;
                }
                group.consumers.insert(consumer.clone(), now);
                claimed.push(id);
                remaining -= 1;
            }
            if let Some(id) = candidates.get(index) {
                next = *id;
            }
        }
        let mut out = Out::new(resp3);
        out.array(3);
        out.bulk(next.text().as_bytes());
        out.array(claimed.len());
        for id in &claimed {
            if justid {
                out.bulk(id.text().as_bytes());
            } else if let Some(fields) = stream.entries.get(id) {
                reply_entry(&mut out, *id, fields);
            }
        }
        out.array(deleted.len());
        for id in &deleted {
            out.bulk(id.text().as_bytes());
        }
        let changed = !claimed.is_empty() || !deleted.is_empty();
        Ok((out, changed))
    })?;
    out.buf.extend_from_slice(&reply.buf);
    Ok(())
}

// ---- XINFO ---------------------------------------------------------------

fn xinfo(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let sub = lower(&args[1]);
    let arity = match sub.as_str() {
        "consumers" => 4,
        "groups" => 3,
        "stream" => -3,
        "help" => 2,
        _ => return Err(unknown_subcommand("XINFO", &args[1])),
    };
    sub_arity("xinfo", &sub, args, arity)?;
    if sub == "help" {
        help(
            out,
            &[
                "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CONSUMERS <key> <groupname>",
                "    Show consumers of <groupname>.",
                "GROUPS <key>",
                "    Show the stream consumer groups.",
                "STREAM <key> [FULL [COUNT <count>]",
                "    Show information about the stream.",
                "HELP",
                "    Prints this help.",
            ],
        );
        return Ok(());
    }
    let entry = db.get(&args[2])?;
    let Some(stream) = stream_of(&entry)? else {
        return err("ERR no such key");
    };
    let now = now_ms();
    match sub.as_str() {
        "consumers" => {
            let Some(group) = stream.groups.get(&args[3]) else {
                return Err(no_consumer_group(&args[3], &args[2]));
            };
            out.array(group.consumers.len());
            for (name, seen) in &group.consumers {
                out.map(3);
                out.bulk(b"name");
                out.bulk(name);
                out.bulk(b"pending");
                out.int(
                    group
                        .pending
                        .values()
                        .filter(|p| p.consumer == *name)
                        .count() as i64,
                );
                out.bulk(b"idle");
                out.int(now.saturating_sub(*seen) as i64);
            }
        }
        "groups" => {
            out.array(stream.groups.len());
            for (name, group) in &stream.groups {
                out.map(6);
                out.bulk(b"name");
                out.bulk(name);
                out.bulk(b"consumers");
                out.int(group.consumers.len() as i64);
                out.bulk(b"pending");
                out.int(group.pending.len() as i64);
                out.bulk(b"last-delivered-id");
                out.bulk(group.last_id.text().as_bytes());
                reply_read_and_lag(out, stream, group);
            }
        }
        _ => xinfo_stream(args, out, stream)?,
    }
    Ok(())
}

fn reply_read_and_lag(out: &mut Out, stream: &Stream, group: &Group) {
    out.bulk(b"entries-read");
    if group.entries_read >= 0 {
        out.int(group.entries_read);
    } else {
        out.null();
    }
    out.bulk(b"lag");
    match stream.lag(group) {
        Some(lag) => out.int(lag),
        None => out.null(),
    }
}

/// The radix-tree figures XINFO STREAM reports, for nodes of
/// [`NODE_ENTRIES`] entries.
fn tree_figures(stream: &Stream) -> (i64, i64) {
    let keys = stream.entries.len().div_ceil(NODE_ENTRIES) as i64;
    (keys, keys + 1)
}

fn xinfo_stream(args: &[Vec<u8>], out: &mut Out, stream: &Stream) -> R<()> {
    let options = &args[3..];
    let full = !options.is_empty();
    let mut count: usize = 10;
    if full {
        if (options.len() != 1 && options.len() != 3) || lower(&options[0]) != "full" {
            return Err(subcommand_syntax("XINFO", &args[1]));
        }
        if options.len() == 3 {
            if lower(&options[1]) != "count" {
                return Err(subcommand_syntax("XINFO", &args[1]));
            }
            let n = parse_i64(&options[2])?;
            count = if n < 0 { 10 } else { n as usize };
        }
    }
    let limit = if count == 0 { usize::MAX } else { count };
    let (keys, nodes) = tree_figures(stream);
    out.map(if full { 9 } else { 10 });
    out.bulk(b"length");
    out.int(stream.entries.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(keys);
    out.bulk(b"radix-tree-nodes");
    out.int(nodes);
    out.bulk(b"last-generated-id");
    out.bulk(stream.last_id.text().as_bytes());
    out.bulk(b"max-deleted-entry-id");
    out.bulk(stream.max_deleted.text().as_bytes());
    out.bulk(b"entries-added");
    out.int(stream.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    out.bulk(stream.first_id().text().as_bytes());
    if !full {
        out.bulk(b"groups");
        out.int(stream.groups.len() as i64);
        out.bulk(b"first-entry");
        match stream.entries.iter().next() {
            Some((id, fields)) => reply_entry(out, *id, fields),
            None => out.null(),
        }
        out.bulk(b"last-entry");
        match stream.entries.iter().next_back() {
            Some((id, fields)) => reply_entry(out, *id, fields),
            None => out.null(),
        }
        return Ok(());
    }
    out.bulk(b"entries");
    let entries: Vec<_> = stream.entries.iter().take(limit).collect();
    out.array(entries.len());
    for (id, fields) in entries {
        reply_entry(out, *id, fields);
    }
    out.bulk(b"groups");
    out.array(stream.groups.len());
    for (name, group) in &stream.groups {
        out.map(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        out.bulk(group.last_id.text().as_bytes());
        reply_read_and_lag(out, stream, group);
        out.bulk(b"pel-count");
        out.int(group.pending.len() as i64);
        out.bulk(b"pending");
        let pending: Vec<_> = group.pending.iter().take(limit).collect();
        out.array(pending.len());
        for (id, p) in pending {
            out.array(4);
            out.bulk(id.text().as_bytes());
            out.bulk(&p.consumer);
            out.int(p.delivered_ms as i64);
            out.int(p.deliveries as i64);
        }
        out.bulk(b"consumers");
        out.array(group.consumers.len());
        for (consumer, seen) in &group.consumers {
            let own: Vec<_> = group
                .pending
                .iter()
                .filter(|(_, p)| p.consumer == *consumer)
                .collect();
            out.map(4);
            out.bulk(b"name");
            out.bulk(consumer);
            out.bulk(b"seen-time");
            out.int(*seen as i64);
            out.bulk(b"pel-count");
            out.int(own.len() as i64);
            out.bulk(b"pending");
            let shown: Vec<_> = own.into_iter().take(limit).collect();
            out.array(shown.len());
            for (id, p) in shown {
                out.array(3);
                out.bulk(id.text().as_bytes());
                out.int(p.delivered_ms as i64);
                out.int(p.deliveries as i64);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> Id {
        Id { ms, seq }
    }

    #[test]
    fn ids_parse_as_redis() {
        assert_eq!(parse_id(b"5", 0, true), Ok(id(5, 0)));
        assert_eq!(parse_id(b"5", u64::MAX, true), Ok(id(5, u64::MAX)));
        assert_eq!(parse_id(b"5-3", 0, true), Ok(id(5, 3)));
        assert_eq!(parse_id(b"-", 0, false), Ok(Id::MIN));
        assert_eq!(parse_id(b"+", 0, false), Ok(Id::MAX));
        assert_eq!(parse_id(b"-", 0, true), Err(INVALID_ID.to_owned()));
        assert_eq!(parse_id(b"x", 0, false), Err(INVALID_ID.to_owned()));
        assert_eq!(parse_id(b"1-x", 0, false), Err(INVALID_ID.to_owned()));
        assert_eq!(parse_add_id(b"7-*"), Ok((id(7, 0), false)));
        assert_eq!(range_start(b"(1-5"), Ok(id(1, 6)));
        assert_eq!(range_end(b"(1-0"), Ok(id(0, u64::MAX)));
        assert!(range_start(b"(-").is_err());
        assert_eq!(
            range_end(b"(0-0"),
            Err("ERR invalid end ID for the interval".to_owned())
        );
    }

    #[test]
    fn a_stream_round_trips_through_its_bin() {
        let mut stream = Stream::default();
        for n in 1..=3 {
            stream
                .entries
                .insert(id(n, 0), vec![b"f".to_vec(), vec![0xff, n as u8]]);
        }
        stream.last_id = id(3, 0);
        stream.entries_added = 3;
        stream.max_deleted = id(0, 7);
        let mut group = Group {
            last_id: id(2, 0),
            entries_read: 2,
            consumers: BTreeMap::new(),
            pending: BTreeMap::new(),
        };
        group.consumers.insert(b"alice".to_vec(), 123);
        group.pending.insert(
            id(1, 0),
            Pending {
                consumer: b"alice".to_vec(),
                delivered_ms: 99,
                deliveries: 2,
            },
        );
        stream.groups.insert(b"g".to_vec(), group);
        assert_eq!(Stream::decode(&stream.encode()), Some(stream.clone()));
        assert_eq!(
            Stream::decode(&Stream::default().encode()),
            Some(Stream::default())
        );
    }

    #[test]
    fn a_bin_claiming_more_than_it_holds_is_no_stream() {
        // A record written by another client: an entry says it has
        // 2^32 - 1 fields and holds none.
        let mut bytes = Vec::new();
        map_header(&mut bytes, 1);
        string(&mut bytes, b"entries");
        array_header(&mut bytes, 1);
        array_header(&mut bytes, 2);
        string(&mut bytes, b"1-1");
        bytes.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(Stream::decode(&bytes), None);
        let mut whole = Stream::default().encode();
        whole.truncate(whole.len() - 1);
        assert_eq!(Stream::decode(&whole), None);
    }

    #[test]
    fn trimming_removes_whole_nodes_when_approximate() {
        let mut stream = Stream::default();
        for n in 1..=250 {
            stream.entries.insert(id(n, 0), Vec::new());
        }
        assert_eq!(stream.trim(Strategy::MaxLen(180), true, 10_000), 0);
        assert_eq!(stream.trim(Strategy::MaxLen(140), true, 10_000), 100);
        assert_eq!(stream.entries.len(), 150);
        assert_eq!(stream.trim(Strategy::MaxLen(5), false, 0), 145);
        assert_eq!(stream.entries.len(), 5);
        assert_eq!(stream.first_id(), id(246, 0));
        assert_eq!(stream.trim(Strategy::MinId(id(248, 0)), false, 0), 2);
        assert_eq!(stream.first_id(), id(248, 0));
    }
}
