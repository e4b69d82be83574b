//! List ops: op codes 0..=40.

use super::value::{self, List, Number, Particle};
use super::{
    multi_range, rank_order, remove_positions, select_and_build, select_shared, single_index,
    value_list, Args, Call, LevelOutcome, Selection, Shared, View, PAD_MAX,
};
use bolide_types::ResultCode;
use std::borrow::Cow;
use std::cmp::Ordering;

mod code {
    pub const SET_TYPE: u64 = 0;
    pub const APPEND: u64 = 1;
    pub const APPEND_ITEMS: u64 = 2;
    pub const INSERT: u64 = 3;
    pub const INSERT_ITEMS: u64 = 4;
    pub const POP: u64 = 5;
    pub const POP_RANGE: u64 = 6;
    pub const REMOVE: u64 = 7;
    pub const REMOVE_RANGE: u64 = 8;
    pub const SET: u64 = 9;
    pub const TRIM: u64 = 10;
    pub const CLEAR: u64 = 11;
    pub const INCREMENT: u64 = 12;
    pub const SORT: u64 = 13;
    pub const SIZE: u64 = 16;
    pub const GET: u64 = 17;
    pub const GET_RANGE: u64 = 18;
    pub const GET_BY_INDEX: u64 = 19;
    pub const GET_BY_VALUE: u64 = 20;
    pub const GET_BY_RANK: u64 = 21;
    pub const GET_ALL_BY_VALUE: u64 = 22;
    pub const GET_ALL_BY_VALUE_LIST: u64 = 23;
    pub const GET_BY_INDEX_RANGE: u64 = 24;
    pub const GET_BY_VALUE_INTERVAL: u64 = 25;
    pub const GET_BY_RANK_RANGE: u64 = 26;
    pub const GET_BY_VALUE_REL_RANK_RANGE: u64 = 27;
    pub const REMOVE_BY_INDEX: u64 = 32;
    pub const REMOVE_BY_VALUE_REL_RANK_RANGE: u64 = 40;
    /// A remove-by op's code minus this is its get-by counterpart.
    pub const REMOVE_TO_GET: u64 = 13;
}

/// List write flags.
mod flag {
    pub const ADD_UNIQUE: i64 = 1;
    pub const INSERT_BOUNDED: i64 = 2;
    pub const NO_FAIL: i64 = 4;
    pub const PARTIAL: i64 = 8;
}

/// Sort flags.
const SORT_DESCENDING: i64 = 1;
const SORT_DROP_DUPLICATES: i64 = 2;

const NIL: &[u8] = &[0xc0];

pub fn apply(
    current: Option<&[u8]>,
    call: &Call<'_>,
    modify: bool,
) -> Result<LevelOutcome, ResultCode> {
    let args = &call.args;
    let creates = matches!(
        call.code,
        code::SET_TYPE
            | code::APPEND
            | code::APPEND_ITEMS
            | code::INSERT
            | code::INSERT_ITEMS
            | code::SET
            | code::INCREMENT
    );
    let empty;
    let bytes = match current {
        Some(bytes) => bytes,
        None if call.code == code::SORT => return Err(ResultCode::IncompatibleType),
        None if !creates => return Ok((None, None)),
        None => {
            let create_flags = match call.code {
                code::APPEND | code::APPEND_ITEMS => args.int_or(1, 0)?,
                code::INCREMENT => args.int_or(2, 0)?,
                _ => 0,
            };
            empty = List {
                flags: (create_flags as u8) & value::LIST_ORDERED,
                items: Vec::new(),
            }
            .encode();
            empty.as_slice()
        }
    };
    let mut list = List::parse(bytes)?;
    let before = list.clone();
    let result = run(&mut list, call, modify)?;
    let changed = (current.is_none() || list != before).then(|| list.encode());
    Ok((changed, result))
}

fn run<'a>(
    list: &mut List<'a>,
    call: &Call<'a>,
    modify: bool,
) -> Result<Option<Particle>, ResultCode> {
    let args = &call.args;
    let n = list.items.len();
    match call.code {
        code::SET_TYPE => {
            let flags = args.int(0)?;
            if flags & i64::from(value::LIST_ORDERED) != 0 {
                sort_items(list, false, false)?;
                list.flags = value::LIST_ORDERED;
            } else {
                list.flags = 0;
            }
            Ok(None)
        }
        code::APPEND | code::APPEND_ITEMS => {
            let values = payload_values(args.payload(0)?, call.code == code::APPEND_ITEMS)?;
            add(list, None, values, args.int_or(2, 0)?)?;
            Ok(Some(value::int_particle(list.items.len() as i64)))
        }
        code::INSERT | code::INSERT_ITEMS => {
            let index = args.int(0)?;
            let values = payload_values(args.payload(1)?, call.code == code::INSERT_ITEMS)?;
            if list.is_ordered() {
                return Err(ResultCode::OpNotApplicable);
            }
            add(list, Some(index), values, args.int_or(2, 0)?)?;
            Ok(Some(value::int_particle(list.items.len() as i64)))
        }
        code::SET => {
            let index = args.int(0)?;
            let item = args.payload(1)?;
            check_storable(item)?;
            if list.is_ordered() {
                return Err(ResultCode::OpNotApplicable);
            }
            set(list, index, Cow::Borrowed(item), args.int_or(2, 0)?)?;
            Ok(None)
        }
        code::INCREMENT => increment(list, args),
        code::SORT => {
            let flags = args.int_or(0, 0)?;
            sort_items(
                list,
                flags & SORT_DESCENDING != 0,
                flags & SORT_DROP_DUPLICATES != 0,
            )?;
            Ok(None)
        }
        code::CLEAR => {
            list.items.clear();
            Ok(None)
        }
        code::SIZE => Ok(Some(value::int_particle(n as i64))),
        code::POP | code::REMOVE | code::GET => {
            let index = args.int(0)?;
            let position = single_index(index, n).ok_or(ResultCode::OpNotApplicable)?;
            let result = match call.code {
                code::REMOVE => Some(value::int_particle(1)),
                _ => list
                    .items
                    .get(position)
                    .map(|item| value::to_particle(item)),
            };
            if call.code != code::GET {
                list.items.remove(position);
            }
            Ok(result)
        }
        code::POP_RANGE | code::REMOVE_RANGE | code::GET_RANGE | code::TRIM => {
            let index = args.int(0)?;
            // TRIM needs its count; the others reach to the end without one.
            if call.code == code::TRIM {
                args.payload(1)?;
            }
            let count = args.count_or_all(1)?;
            let (start, len) = multi_range(index, count, n);
            let picked: Vec<usize> = if call.code == code::TRIM {
                (0..n).filter(|&i| i < start || i >= start + len).collect()
            } else {
                (start..start + len).collect()
            };
            let result = if matches!(call.code, code::POP_RANGE | code::GET_RANGE) {
                let items = picked
                    .iter()
                    .filter_map(|&i| list.items.get(i).map(|item| item.as_ref()));
                let items: Vec<&[u8]> = items.collect();
                (
                    bolide_types::particle::LIST,
                    value::encode_items(items.into_iter()),
                )
            } else {
                value::int_particle(picked.len() as i64)
            };
            if call.code != code::GET_RANGE {
                remove_positions(&mut list.items, &picked);
            }
            Ok(Some(result))
        }
        code::GET_BY_INDEX..=code::GET_BY_VALUE_REL_RANK_RANGE => {
            select_op(list, call.code, args, false)
        }
        code::REMOVE_BY_INDEX..=code::REMOVE_BY_VALUE_REL_RANK_RANGE if modify => {
            select_op(list, call.code - code::REMOVE_TO_GET, args, true)
        }
        _ => Err(ResultCode::Parameter),
    }
}

/// The get-by / remove-by ops: select, build the result, maybe remove.
fn select_op(
    list: &mut List<'_>,
    get_code: u64,
    args: &Args<'_>,
    remove: bool,
) -> Result<Option<Particle>, ResultCode> {
    let (positions, result) = {
        let view = View::list(list.items.iter().map(|item| item.as_ref()).collect())
            .with_flags(list.flags);
        select_and_build(&view, args, |view, inverted| {
            select(view, get_code, args, inverted)
        })?
    };
    if remove {
        remove_positions(&mut list.items, &positions);
    }
    Ok(result)
}

/// The elements a get-by op names.
pub fn select(
    view: &View<'_>,
    get_code: u64,
    args: &Args<'_>,
    inverted: bool,
) -> Result<Selection, ResultCode> {
    let shared = match get_code {
        code::GET_BY_INDEX => {
            let position =
                single_index(args.int(1)?, view.len()).ok_or(ResultCode::OpNotApplicable)?;
            return Ok(Selection::single(vec![position]));
        }
        code::GET_ALL_BY_VALUE_LIST => {
            let targets = List::parse(args.payload(1)?).map_err(|_| ResultCode::Parameter)?;
            let targets: Vec<&[u8]> = targets.items.iter().map(|item| item.as_ref()).collect();
            return value_list(view, &targets, inverted);
        }
        code::GET_BY_RANK => Shared::ByRank,
        code::GET_BY_VALUE => Shared::ByValue,
        code::GET_ALL_BY_VALUE => Shared::AllByValue,
        code::GET_BY_INDEX_RANGE => Shared::IndexRange,
        code::GET_BY_VALUE_INTERVAL => Shared::ValueInterval,
        code::GET_BY_RANK_RANGE => Shared::RankRange,
        code::GET_BY_VALUE_REL_RANK_RANGE => Shared::ValueRelRankRange,
        _ => return Err(ResultCode::Parameter),
    };
    select_shared(view, shared, args, inverted)
}

/// A stored value must be one whole item and not a comparison-only value.
fn check_storable(item: &[u8]) -> Result<(), ResultCode> {
    value::check_one(item)?;
    if value::is_comparison_only(item) {
        return Err(ResultCode::Parameter);
    }
    Ok(())
}

/// One value, or the elements of a list payload.
fn payload_values(payload: &[u8], is_items: bool) -> Result<Vec<&[u8]>, ResultCode> {
    check_storable(payload)?;
    if !is_items {
        return Ok(vec![payload]);
    }
    let items = List::parse(payload).map_err(|_| ResultCode::Parameter)?;
    let mut values = Vec::with_capacity(items.items.len());
    for item in items.items {
        match item {
            Cow::Borrowed(item) => {
                check_storable(item)?;
                values.push(item);
            }
            Cow::Owned(_) => return Err(ResultCode::Parameter),
        }
    }
    Ok(values)
}

fn contains(items: &[Cow<'_, [u8]>], target: &[u8]) -> Result<bool, ResultCode> {
    Ok(value::position_of(items.iter().map(|item| item.as_ref()), target)?.is_some())
}

/// Appends (`index` None) or inserts values under the write flags.
fn add<'a>(
    list: &mut List<'a>,
    index: Option<i64>,
    values: Vec<&'a [u8]>,
    flags: i64,
) -> Result<(), ResultCode> {
    let no_fail = flags & flag::NO_FAIL != 0;
    let mut accepted: Vec<Cow<'a, [u8]>> = Vec::with_capacity(values.len());
    for item in values {
        if flags & flag::ADD_UNIQUE != 0
            && (contains(&list.items, item)? || contains(&accepted, item)?)
        {
            if !no_fail {
                return Err(ResultCode::ElementExists);
            }
            if flags & flag::PARTIAL == 0 {
                return Ok(());
            }
            continue;
        }
        accepted.push(Cow::Borrowed(item));
    }
    if accepted.is_empty() {
        return Ok(());
    }
    if list.is_ordered() {
        for item in accepted {
            let at = upper_bound(&list.items, &item)?;
            list.items.insert(at, item);
        }
        return Ok(());
    }
    let n = list.items.len();
    let position = match index {
        None => n,
        Some(index) => {
            let resolved = if index < 0 {
                (n as i64).saturating_add(index)
            } else {
                index
            };
            if resolved < 0 {
                return Err(ResultCode::OpNotApplicable);
            }
            let resolved = resolved as u64;
            if resolved > n as u64 && flags & flag::INSERT_BOUNDED != 0 {
                return if no_fail {
                    Ok(())
                } else {
                    Err(ResultCode::OpNotApplicable)
                };
            }
            if resolved - (n as u64).min(resolved) > PAD_MAX as u64 {
                return Err(ResultCode::RecordTooBig);
            }
            resolved as usize
        }
    };
    if position > n {
        list.items.resize(position, Cow::Borrowed(NIL));
    }
    let tail = list.items.split_off(position);
    list.items.extend(accepted);
    list.items.extend(tail);
    Ok(())
}

/// Position after every element not above `item` (ordered insert).
fn upper_bound(items: &[Cow<'_, [u8]>], item: &[u8]) -> Result<usize, ResultCode> {
    let mut low = 0;
    let mut high = items.len();
    while low < high {
        let mid = (low + high) / 2;
        let at = items.get(mid).ok_or(ResultCode::Parameter)?;
        if value::compare(at, item)? == Ordering::Greater {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    Ok(low)
}

/// LIST_SET: replaces an element, or adds one past the end (padding).
fn set<'a>(
    list: &mut List<'a>,
    index: i64,
    item: Cow<'a, [u8]>,
    flags: i64,
) -> Result<(), ResultCode> {
    let n = list.items.len();
    if index >= n as i64 {
        if let Cow::Borrowed(item) = item {
            return add(list, Some(index), vec![item], flags);
        }
        let position = index as u64;
        if position > n as u64 && flags & flag::INSERT_BOUNDED != 0 {
            return if flags & flag::NO_FAIL != 0 {
                Ok(())
            } else {
                Err(ResultCode::OpNotApplicable)
            };
        }
        if position - n as u64 > PAD_MAX as u64 {
            return Err(ResultCode::RecordTooBig);
        }
        list.items.resize(position as usize, Cow::Borrowed(NIL));
        list.items.push(item);
        return Ok(());
    }
    let position = single_index(index, n).ok_or(ResultCode::OpNotApplicable)?;
    if flags & flag::ADD_UNIQUE != 0 {
        for (i, existing) in list.items.iter().enumerate() {
            if i != position && value::compare(existing, &item)? == Ordering::Equal {
                return if flags & flag::NO_FAIL != 0 {
                    Ok(())
                } else {
                    Err(ResultCode::ElementExists)
                };
            }
        }
    }
    if let Some(slot) = list.items.get_mut(position) {
        *slot = item;
    }
    Ok(())
}

/// LIST_INCREMENT: adds to a number element (a missing one counts as 0);
/// answers the new value.
fn increment(list: &mut List<'_>, args: &Args<'_>) -> Result<Option<Particle>, ResultCode> {
    let index = args.int(0)?;
    let delta = match args.get(1) {
        None => Number::Int(1),
        Some(bytes) => value::number(bytes).ok_or(ResultCode::Parameter)?,
    };
    let flags = args.int_or(3, 0)?;
    let n = list.items.len();
    let resolved = if index < 0 {
        (n as i64).saturating_add(index)
    } else {
        index
    };
    if resolved < 0 || resolved > i64::from(i32::MAX) {
        return Err(ResultCode::OpNotApplicable);
    }
    let position = resolved as usize;
    let current = match list.items.get(position) {
        Some(item) => Some(value::number(item).ok_or(ResultCode::Parameter)?),
        None => None,
    };
    let bytes = Number::incremented(current, delta);
    let result = value::to_particle(&bytes);
    if list.is_ordered() {
        if position >= n {
            return Err(ResultCode::OpNotApplicable);
        }
        list.items.remove(position);
        let at = upper_bound(&list.items, &bytes)?;
        list.items.insert(at, Cow::Owned(bytes));
    } else {
        set(list, position as i64, Cow::Owned(bytes), flags)?;
    }
    Ok(Some(result))
}

pub(super) fn sort_items(
    list: &mut List<'_>,
    descending: bool,
    drop_duplicates: bool,
) -> Result<(), ResultCode> {
    let items: Vec<&[u8]> = list.items.iter().map(|item| item.as_ref()).collect();
    let mut order = rank_order(&items)?;
    if drop_duplicates {
        let mut kept: Vec<usize> = Vec::with_capacity(order.len());
        for position in order {
            let duplicate = match (kept.last().and_then(|&k| items.get(k)), items.get(position)) {
                (Some(last), Some(item)) => value::compare(last, item)? == Ordering::Equal,
                _ => false,
            };
            if !duplicate {
                kept.push(position);
            }
        }
        order = kept;
    }
    if descending {
        order.reverse();
    }
    let sorted: Vec<_> = order
        .iter()
        .filter_map(|&i| list.items.get(i).cloned())
        .collect();
    list.items = sorted;
    Ok(())
}
