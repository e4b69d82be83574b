//! Map ops: op codes 64..=110.

use super::value::{self, List, Map, Number, Particle};
use super::{
    index_range, multi_range, rank_order, relative_range, remove_positions, select_and_build,
    select_shared, single_index, value_list, Args, Call, LevelOutcome, Listing, Selection, Shared,
    View,
};
use bolide_types::ResultCode;
use bolide_wire::msgpack::{Item, Reader};
use std::borrow::Cow;
use std::cmp::Ordering;

mod code {
    pub const SET_TYPE: u64 = 64;
    pub const ADD: u64 = 65;
    pub const ADD_ITEMS: u64 = 66;
    pub const PUT: u64 = 67;
    pub const PUT_ITEMS: u64 = 68;
    pub const REPLACE: u64 = 69;
    pub const REPLACE_ITEMS: u64 = 70;
    pub const INCREMENT: u64 = 73;
    pub const DECREMENT: u64 = 74;
    pub const CLEAR: u64 = 75;
    pub const SIZE: u64 = 96;
    pub const GET_BY_KEY: u64 = 97;
    pub const GET_BY_INDEX: u64 = 98;
    pub const GET_BY_VALUE: u64 = 99;
    pub const GET_BY_RANK: u64 = 100;
    pub const GET_ALL_BY_VALUE: u64 = 102;
    pub const GET_BY_KEY_INTERVAL: u64 = 103;
    pub const GET_BY_INDEX_RANGE: u64 = 104;
    pub const GET_BY_VALUE_INTERVAL: u64 = 105;
    pub const GET_BY_RANK_RANGE: u64 = 106;
    pub const GET_BY_KEY_LIST: u64 = 107;
    pub const GET_BY_VALUE_LIST: u64 = 108;
    pub const GET_BY_KEY_REL_INDEX_RANGE: u64 = 109;
    pub const GET_BY_VALUE_REL_RANK_RANGE: u64 = 110;
}

/// The get-by op a remove-by op selects like.
fn get_code_of_remove(remove: u64) -> Option<u64> {
    Some(match remove {
        76 => code::GET_BY_KEY,
        77 => code::GET_BY_INDEX,
        78 => code::GET_BY_VALUE,
        79 => code::GET_BY_RANK,
        81 => code::GET_BY_KEY_LIST,
        82 => code::GET_ALL_BY_VALUE,
        83 => code::GET_BY_VALUE_LIST,
        84 => code::GET_BY_KEY_INTERVAL,
        85 => code::GET_BY_INDEX_RANGE,
        86 => code::GET_BY_VALUE_INTERVAL,
        87 => code::GET_BY_RANK_RANGE,
        88 => code::GET_BY_KEY_REL_INDEX_RANGE,
        89 => code::GET_BY_VALUE_REL_RANK_RANGE,
        _ => return None,
    })
}

/// Map write flags.
mod flag {
    pub const CREATE_ONLY: i64 = 1;
    pub const UPDATE_ONLY: i64 = 2;
    pub const NO_FAIL: i64 = 4;
    pub const PARTIAL: i64 = 8;
}

pub fn apply(
    current: Option<&[u8]>,
    call: &Call<'_>,
    modify: bool,
) -> Result<LevelOutcome, ResultCode> {
    let args = &call.args;
    let creates = matches!(
        call.code,
        code::SET_TYPE
            | code::ADD
            | code::ADD_ITEMS
            | code::PUT
            | code::PUT_ITEMS
            | code::REPLACE
            | code::REPLACE_ITEMS
            | code::INCREMENT
            | code::DECREMENT
    );
    let empty;
    let bytes = match current {
        Some(bytes) => bytes,
        None if !creates => return Ok((None, None)),
        None => {
            let attr = match call.code {
                code::ADD | code::INCREMENT | code::DECREMENT => args.int_or(2, 0)?,
                code::PUT => args.int_or(2, 0)?,
                code::ADD_ITEMS | code::PUT_ITEMS => args.int_or(1, 0)?,
                _ => 0,
            };
            empty = Map {
                flags: order_flags(attr),
                pairs: Vec::new(),
            }
            .encode();
            empty.as_slice()
        }
    };
    let mut map = Map::parse(bytes)?;
    let before = map.clone();
    let result = run(&mut map, call, modify)?;
    let changed = (current.is_none() || map != before).then(|| map.encode());
    Ok((changed, result))
}

/// The stored flags for a map order attribute.
fn order_flags(attr: i64) -> u8 {
    match attr & 0x03 {
        1 => value::MAP_K_ORDERED,
        3 => value::MAP_KV_ORDERED,
        _ => 0,
    }
}

fn run<'a>(
    map: &mut Map<'a>,
    call: &Call<'a>,
    modify: bool,
) -> Result<Option<Particle>, ResultCode> {
    let args = &call.args;
    match call.code {
        code::SET_TYPE => {
            map.flags = order_flags(args.int(0)?);
            if map.is_key_ordered() {
                sort_by_key(map)?;
            }
            Ok(None)
        }
        code::ADD | code::PUT | code::REPLACE => {
            let flags = match call.code {
                code::ADD => flag::CREATE_ONLY,
                code::REPLACE => flag::UPDATE_ONLY,
                _ => args.int_or(3, 0)?,
            };
            let pair = (args.payload(0)?, args.payload(1)?);
            put(map, vec![pair], flags)?;
            Ok(Some(value::int_particle(map.pairs.len() as i64)))
        }
        code::ADD_ITEMS | code::PUT_ITEMS | code::REPLACE_ITEMS => {
            let flags = match call.code {
                code::ADD_ITEMS => flag::CREATE_ONLY,
                code::REPLACE_ITEMS => flag::UPDATE_ONLY,
                _ => args.int_or(2, 0)?,
            };
            let items = args.payload(0)?;
            value::check_one(items)?;
            let items = Map::parse(items).map_err(|_| ResultCode::Parameter)?;
            let mut pairs = Vec::with_capacity(items.pairs.len());
            for pair in items.pairs {
                match pair {
                    (Cow::Borrowed(key), Cow::Borrowed(item)) => pairs.push((key, item)),
                    _ => return Err(ResultCode::Parameter),
                }
            }
            put(map, pairs, flags)?;
            if map.flags & value::MAP_K_ORDERED == 0 {
                // The server writes an unordered map in key order when it
                // adds items to it (its "in key order" conversion), so
                // index and storage order agree afterwards.
                sort_by_key(map)?;
            }
            Ok(Some(value::int_particle(map.pairs.len() as i64)))
        }
        code::INCREMENT | code::DECREMENT => increment(map, args, call.code == code::DECREMENT),
        code::CLEAR => {
            map.pairs.clear();
            Ok(None)
        }
        code::SIZE => Ok(Some(value::int_particle(map.pairs.len() as i64))),
        code::GET_BY_KEY..=code::GET_BY_VALUE_REL_RANK_RANGE => {
            select_op(map, call.code, args, false)
        }
        remove if modify => match get_code_of_remove(remove) {
            Some(get_code) => select_op(map, get_code, args, true),
            None => Err(ResultCode::Parameter),
        },
        _ => Err(ResultCode::Parameter),
    }
}

/// Keys must be scalars (integers, strings, bytes, doubles).
pub fn check_key(key: &[u8]) -> Result<(), ResultCode> {
    value::check_one(key)?;
    if value::is_comparison_only(key) {
        return Err(ResultCode::Parameter);
    }
    match Reader::new(key).item() {
        Ok(Item::Int(_) | Item::Uint(_) | Item::Str(_) | Item::Bin(_) | Item::Float(_)) => Ok(()),
        _ => Err(ResultCode::Parameter),
    }
}

fn find_key(map: &Map<'_>, key: &[u8]) -> Result<Option<usize>, ResultCode> {
    value::position_of(map.pairs.iter().map(|(existing, _)| existing.as_ref()), key)
}

/// Adds a pair, at its key's place in a key-ordered map, else at the end.
pub fn insert_pair<'a>(
    map: &mut Map<'a>,
    key: Cow<'a, [u8]>,
    item: Cow<'a, [u8]>,
) -> Result<(), ResultCode> {
    let at = if map.is_key_ordered() {
        let mut at = map.pairs.len();
        for (i, (existing, _)) in map.pairs.iter().enumerate() {
            if value::compare(existing, &key)? == Ordering::Greater {
                at = i;
                break;
            }
        }
        at
    } else {
        map.pairs.len()
    };
    map.pairs.insert(at, (key, item));
    Ok(())
}

/// Puts pairs under the write flags (all or nothing unless PARTIAL).
fn put<'a>(
    map: &mut Map<'a>,
    pairs: Vec<(&'a [u8], &'a [u8])>,
    flags: i64,
) -> Result<(), ResultCode> {
    let no_fail = flags & flag::NO_FAIL != 0;
    let mut staged = map.clone();
    for (key, item) in pairs {
        check_key(key)?;
        value::check_one(item)?;
        if value::is_comparison_only(item) {
            return Err(ResultCode::Parameter);
        }
        let existing = find_key(&staged, key)?;
        let refused = match existing {
            Some(_) if flags & flag::CREATE_ONLY != 0 => Some(ResultCode::ElementExists),
            None if flags & flag::UPDATE_ONLY != 0 => Some(ResultCode::ElementNotFound),
            _ => None,
        };
        if let Some(code) = refused {
            if !no_fail {
                return Err(code);
            }
            if flags & flag::PARTIAL == 0 {
                return Ok(());
            }
            continue;
        }
        match existing.and_then(|i| staged.pairs.get_mut(i)) {
            Some(pair) => pair.1 = Cow::Borrowed(item),
            None => insert_pair(&mut staged, Cow::Borrowed(key), Cow::Borrowed(item))?,
        }
    }
    *map = staged;
    Ok(())
}

/// MAP_INCREMENT / MAP_DECREMENT: a missing key counts as 0; answers the
/// new value.
fn increment(
    map: &mut Map<'_>,
    args: &Args<'_>,
    negate: bool,
) -> Result<Option<Particle>, ResultCode> {
    let key = args.payload(0)?;
    check_key(key)?;
    let mut delta = match args.get(1) {
        None => Number::Int(1),
        Some(bytes) => value::number(bytes).ok_or(ResultCode::Parameter)?,
    };
    if negate {
        delta = match delta {
            Number::Int(value) => Number::Int(value.wrapping_neg()),
            Number::Float(value) => Number::Float(-value),
        };
    }
    let existing = find_key(map, key)?;
    let current = match existing.and_then(|i| map.pairs.get(i)) {
        Some((_, item)) => Some(value::number(item).ok_or(ResultCode::Parameter)?),
        None => None,
    };
    let bytes = Number::incremented(current, delta);
    let result = value::to_particle(&bytes);
    match existing.and_then(|i| map.pairs.get_mut(i)) {
        Some(pair) => pair.1 = Cow::Owned(bytes),
        None => insert_pair(map, Cow::Owned(key.to_vec()), Cow::Owned(bytes))?,
    }
    Ok(Some(result))
}

fn sort_by_key(map: &mut Map<'_>) -> Result<(), ResultCode> {
    let keys: Vec<&[u8]> = map.pairs.iter().map(|(k, _)| k.as_ref()).collect();
    let order = rank_order(&keys)?;
    let sorted: Vec<_> = order
        .iter()
        .filter_map(|&i| map.pairs.get(i).cloned())
        .collect();
    map.pairs = sorted;
    Ok(())
}

fn select_op(
    map: &mut Map<'_>,
    get_code: u64,
    args: &Args<'_>,
    remove: bool,
) -> Result<Option<Particle>, ResultCode> {
    let (positions, result) = {
        let view = View::map(
            map.pairs.iter().map(|(k, _)| k.as_ref()).collect(),
            map.pairs.iter().map(|(_, v)| v.as_ref()).collect(),
        )
        .with_flags(map.flags);
        select_and_build(&view, args, |view, inverted| {
            select(view, get_code, args, inverted)
        })?
    };
    if remove {
        remove_positions(&mut map.pairs, &positions);
    }
    Ok(result)
}

fn payload_list(bytes: &[u8]) -> Result<Vec<&[u8]>, ResultCode> {
    let list = List::parse(bytes).map_err(|_| ResultCode::Parameter)?;
    let mut items = Vec::with_capacity(list.items.len());
    for item in list.items {
        match item {
            Cow::Borrowed(item) => items.push(item),
            Cow::Owned(_) => return Err(ResultCode::Parameter),
        }
    }
    Ok(items)
}

fn select(
    view: &View<'_>,
    get_code: u64,
    args: &Args<'_>,
    inverted: bool,
) -> Result<Selection, ResultCode> {
    let n = view.len();
    let shared = match get_code {
        code::GET_BY_KEY => {
            return Ok(Selection::single(
                view.equal_to_any(true, &[args.payload(1)?])?,
            ))
        }
        code::GET_BY_INDEX => {
            let index = single_index(args.int(1)?, n).ok_or(ResultCode::OpNotApplicable)?;
            return Ok(Selection::single(View::slice(
                &view.index_order()?,
                index,
                1,
            )));
        }
        code::GET_BY_KEY_LIST => {
            let keys = payload_list(args.payload(1)?)?;
            let found = view.equal_to_any(true, &keys)?;
            let positions = if inverted {
                view.complement(&found)
            } else {
                found
            };
            return Ok(Selection::stored(positions));
        }
        code::GET_BY_VALUE_LIST => {
            let values = payload_list(args.payload(1)?)?;
            return value_list(view, &values, inverted);
        }
        code::GET_BY_KEY_INTERVAL => {
            // Only a missing end means "no upper bound" (see
            // `select_shared`).
            let found = view.in_interval(true, args.payload(1)?, args.get(2))?;
            if view.is_ordered() {
                // A key-ordered map finds an index range.
                let start = found.first().copied().unwrap_or(0);
                return index_range(view, start, found.len(), inverted);
            }
            let positions = if inverted {
                view.complement(&found)
            } else {
                found
            };
            return Ok(Selection::stored(positions).ranks(Listing::AsElements));
        }
        code::GET_BY_KEY_REL_INDEX_RANGE => {
            let anchor = view.count_below(true, args.payload(1)?)?;
            let (index, count) = relative_range(args.int(2)?, args.count_or_all(3)?, anchor);
            let (start, count) = multi_range(index, count, n);
            return index_range(view, start, count, inverted);
        }
        code::GET_BY_VALUE => Shared::ByValue,
        code::GET_ALL_BY_VALUE => Shared::AllByValue,
        code::GET_BY_RANK => Shared::ByRank,
        code::GET_BY_VALUE_INTERVAL => Shared::ValueInterval,
        code::GET_BY_INDEX_RANGE => Shared::IndexRange,
        code::GET_BY_RANK_RANGE => Shared::RankRange,
        code::GET_BY_VALUE_REL_RANK_RANGE => Shared::ValueRelRankRange,
        _ => return Err(ResultCode::Parameter),
    };
    select_shared(view, shared, args, inverted)
}
