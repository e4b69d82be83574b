//! List and map operations (CDT_READ and CDT_MODIFY ops): the op payload
//! is msgpack `[op_code, args...]`, or `[0xff, [ctx_type, ctx_value, ...],
//! [op_code, args...]]` to reach a nested list or map first.
//!
//! `execute` takes the bin's current particle (if any) and the op payload,
//! and gives back the bin's new value (if the op changed it) and the op's
//! result particle. Elements are kept as msgpack bytes; see `value.rs` for
//! the value order. Semantics and result codes follow the Aerospike
//! server's `cdt.c`, `particle_list.c` and `particle_map.c`.

mod list;
mod map;
pub mod value;

use bolide_types::{particle, ResultCode};
use bolide_wire::msgpack::{Item, Reader};
use std::borrow::Cow;
use std::cmp::Ordering;
use value::{List, Map, Particle};

/// Most context levels one op may name.
const CONTEXT_DEPTH_MAX: usize = 32;
/// Most arguments an op may carry.
pub const ARGS_MAX: u32 = 8;
/// Most nil elements a list insert past the end may add.
pub const PAD_MAX: usize = 1 << 20;

/// The op code introducing a context.
const CONTEXT_EVAL: u64 = 0xff;
/// Map op codes start here; list op codes are below.
const MAP_OPS_START: u64 = 64;

/// What a CDT op did.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// The bin's new particle, if the op changed it.
    pub bin: Option<Particle>,
    /// The op's result, if it has one.
    pub result: Option<Particle>,
}

/// An op after its payload is split up.
pub struct Call<'a> {
    pub code: u64,
    pub args: Args<'a>,
}

/// An op's arguments, each one whole msgpack item.
pub struct Args<'a>(Vec<&'a [u8]>);

impl<'a> Args<'a> {
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        self.0.get(i).copied()
    }

    pub fn payload(&self, i: usize) -> Result<&'a [u8], ResultCode> {
        self.get(i).ok_or(ResultCode::Parameter)
    }

    pub fn int(&self, i: usize) -> Result<i64, ResultCode> {
        match self.get(i).map(|bytes| Reader::new(bytes).item()) {
            Some(Ok(Item::Int(value))) => Ok(value),
            Some(Ok(Item::Uint(value))) => Ok(value as i64),
            _ => Err(ResultCode::Parameter),
        }
    }

    pub fn int_or(&self, i: usize, default: i64) -> Result<i64, ResultCode> {
        if self.get(i).is_none() {
            Ok(default)
        } else {
            self.int(i)
        }
    }

    /// A count argument; absent means "to the end". As on the server, a
    /// negative count is read as an unsigned number, so it also reaches to
    /// the end.
    pub fn count_or_all(&self, i: usize) -> Result<u64, ResultCode> {
        match self.get(i).map(|bytes| Reader::new(bytes).item()) {
            None => Ok(u64::from(u32::MAX)),
            Some(Ok(Item::Int(value))) => Ok(value as u64),
            Some(Ok(Item::Uint(value))) => Ok(value),
            _ => Err(ResultCode::Parameter),
        }
    }
}

/// Runs one CDT op against a bin (`None` when the bin does not exist).
pub fn execute(
    bin: Option<(u8, &[u8])>,
    payload: &[u8],
    modify: bool,
) -> Result<Outcome, ResultCode> {
    let (contexts, call) = split_payload(payload)?;
    let is_list = call.code < MAP_OPS_START;
    if !is_known(call.code, modify) {
        return Err(ResultCode::Parameter);
    }
    let current = match bin {
        None if !modify => return Ok(Outcome::default()),
        None => None,
        Some((particle::LIST | particle::MAP, value)) => Some(value),
        Some(_) if contexts.is_empty() => return Err(ResultCode::IncompatibleType),
        Some(_) => return Err(ResultCode::Parameter),
    };
    let (changed, result) = at_level(current, &contexts, &call, modify, is_list)?;
    let bin = changed.map(|bytes| {
        let particle_type = match value::container_kind(&bytes) {
            Some(false) => particle::MAP,
            _ => particle::LIST,
        };
        (particle_type, bytes)
    });
    Ok(Outcome { bin, result })
}

/// Whether the op code exists for this op type (reads under CDT_READ,
/// modifies under CDT_MODIFY).
fn is_known(code: u64, modify: bool) -> bool {
    let is_modify = matches!(code, 0..=13 | 32..=40 | 64..=89);
    let is_read = matches!(code, 16..=27 | 96..=110);
    if modify {
        is_modify
    } else {
        is_read
    }
}

type Contexts<'a> = Vec<(u64, &'a [u8])>;

fn split_payload(payload: &[u8]) -> Result<(Contexts<'_>, Call<'_>), ResultCode> {
    let mut reader = Reader::new(payload);
    let Ok(Item::Array(count)) = reader.item() else {
        return Err(ResultCode::Parameter);
    };
    if count == 0 {
        return Err(ResultCode::Parameter);
    }
    let code = uint(&mut reader)?;
    let mut contexts = Vec::new();
    let (code, arg_count) = if code == CONTEXT_EVAL {
        if count != 3 {
            return Err(ResultCode::Parameter);
        }
        let Ok(Item::Array(pairs)) = reader.item() else {
            return Err(ResultCode::Parameter);
        };
        if pairs == 0 || pairs % 2 != 0 || pairs as usize / 2 > CONTEXT_DEPTH_MAX {
            return Err(ResultCode::Parameter);
        }
        for _ in 0..pairs / 2 {
            let kind = uint(&mut reader)?;
            let item = value::next_item(&mut reader)?;
            contexts.push((kind, item));
        }
        let Ok(Item::Array(op_count)) = reader.item() else {
            return Err(ResultCode::Parameter);
        };
        if op_count == 0 {
            return Err(ResultCode::Parameter);
        }
        (uint(&mut reader)?, op_count - 1)
    } else {
        (code, count - 1)
    };
    if arg_count > ARGS_MAX {
        return Err(ResultCode::Parameter);
    }
    let mut args = Vec::with_capacity(arg_count as usize);
    for _ in 0..arg_count {
        args.push(value::next_item(&mut reader)?);
    }
    if !reader.remaining().is_empty() {
        return Err(ResultCode::Parameter);
    }
    Ok((
        contexts,
        Call {
            code,
            args: Args(args),
        },
    ))
}

fn uint(reader: &mut Reader<'_>) -> Result<u64, ResultCode> {
    match reader.item() {
        Ok(Item::Int(value)) if value >= 0 => Ok(value as u64),
        Ok(Item::Uint(value)) => Ok(value),
        _ => Err(ResultCode::Parameter),
    }
}

/// Context type bits.
mod ctx {
    pub const BASE_MASK: u64 = 0x0f;
    pub const INDEX: u64 = 0;
    pub const RANK: u64 = 1;
    pub const KEY: u64 = 2;
    pub const VALUE: u64 = 3;
    pub const LIST: u64 = 0x10;
    pub const MAP: u64 = 0x20;
    pub const CREATE_MASK: u64 = 0x1c0;
    pub const CREATE_ORDER_MASK: u64 = 0xc0;
    pub const CREATE_LIST_UNBOUND: u64 = 0x80;
    pub const CREATE_ORDERED_LIST: u64 = 0xc0;
    pub const CREATE_MAP_K_ORDERED: u64 = 0x80;
    pub const CREATE_MAP_KV_ORDERED: u64 = 0xc0;
}

/// Changed bytes (if any) and the result of an op at one context level.
type LevelOutcome = (Option<Vec<u8>>, Option<Particle>);

/// Applies the op at the container the contexts lead to. `current` is
/// `None` where a container does not exist yet (a missing bin, or an
/// element a create context adds).
fn at_level(
    current: Option<&[u8]>,
    contexts: &[(u64, &[u8])],
    call: &Call<'_>,
    modify: bool,
    is_list_op: bool,
) -> Result<LevelOutcome, ResultCode> {
    let Some(((kind, selector), rest)) = contexts.split_first() else {
        if let Some(bytes) = current {
            if value::container_kind(bytes) != Some(is_list_op) {
                return Err(ResultCode::IncompatibleType);
            }
        }
        return if is_list_op {
            list::apply(current, call, modify)
        } else {
            map::apply(current, call, modify)
        };
    };
    let (kind, selector) = (*kind, *selector);
    let base = kind & ctx::BASE_MASK;
    let create = kind & ctx::CREATE_MASK;
    let is_list = kind & ctx::LIST != 0;
    if base > ctx::VALUE || (kind & (ctx::LIST | ctx::MAP)) == (ctx::LIST | ctx::MAP) {
        return Err(ResultCode::OpNotApplicable);
    }
    if kind & (ctx::LIST | ctx::MAP) == 0 {
        return Err(ResultCode::OpNotApplicable);
    }
    let created;
    let bytes = match current {
        Some(bytes) => bytes,
        None => {
            if !modify || create == 0 {
                return Err(ResultCode::OpNotApplicable);
            }
            created = empty_container(is_list, kind & ctx::CREATE_ORDER_MASK);
            created.as_slice()
        }
    };
    if value::container_kind(bytes) != Some(is_list) {
        return Err(ResultCode::OpNotApplicable);
    }
    let allow_create = modify && create != 0;
    if is_list {
        let mut list = List::parse(bytes)?;
        let (position, child) = list_child(&list, base, selector, allow_create, kind)?;
        let (changed, result) = at_level(child, rest, call, modify, is_list_op)?;
        let Some(changed) = changed else {
            return Ok((None, result));
        };
        if position >= list.items.len() {
            if position - list.items.len() > PAD_MAX {
                return Err(ResultCode::RecordTooBig);
            }
            list.items.resize(position, Cow::Borrowed(&[0xc0]));
            list.items.push(Cow::Owned(changed));
        } else if let Some(slot) = list.items.get_mut(position) {
            *slot = Cow::Owned(changed);
        }
        if list.is_ordered() {
            // The changed element takes its place in the value order.
            list::sort_items(&mut list, false, false)?;
        }
        Ok((Some(list.encode()), result))
    } else {
        let mut map = Map::parse(bytes)?;
        let (position, child) = map_child(&map, base, selector, allow_create)?;
        let (changed, result) = at_level(child, rest, call, modify, is_list_op)?;
        let Some(changed) = changed else {
            return Ok((None, result));
        };
        match position {
            Some(position) => {
                if let Some(pair) = map.pairs.get_mut(position) {
                    pair.1 = Cow::Owned(changed);
                }
            }
            None => map::insert_pair(&mut map, Cow::Borrowed(selector), Cow::Owned(changed))?,
        }
        Ok((Some(map.encode()), result))
    }
}

/// The element a CDT context (a msgpack array `[type, selector, ...]`, as
/// secondary index definitions and queries carry it) selects inside a list
/// or map value: its bytes, or None if the path leads nowhere.
pub fn read_context(bytes: &[u8], context: &[u8]) -> Result<Option<Vec<u8>>, ResultCode> {
    let mut reader = Reader::new(context);
    let Ok(Item::Array(count)) = reader.item() else {
        return Err(ResultCode::Parameter);
    };
    if count == 0 || count % 2 != 0 || count as usize / 2 > CONTEXT_DEPTH_MAX {
        return Err(ResultCode::Parameter);
    }
    let mut current = bytes.to_vec();
    for _ in 0..count / 2 {
        let kind = uint(&mut reader)?;
        let selector = value::next_item(&mut reader)?;
        let base = kind & ctx::BASE_MASK;
        let is_list = kind & ctx::LIST != 0;
        if value::container_kind(&current) != Some(is_list) {
            return Ok(None);
        }
        let child = if is_list {
            let list = List::parse(&current)?;
            match list_child(&list, base, selector, false, kind) {
                Ok((_, child)) => child.map(<[u8]>::to_vec),
                Err(_) => None,
            }
        } else {
            let map = Map::parse(&current)?;
            match map_child(&map, base, selector, false) {
                Ok((_, child)) => child.map(<[u8]>::to_vec),
                Err(_) => None,
            }
        };
        match child {
            Some(child) => current = child,
            None => return Ok(None),
        }
    }
    Ok(Some(current))
}

/// An empty list or map for a create context's order bits.
fn empty_container(is_list: bool, order: u64) -> Vec<u8> {
    if is_list {
        let flags = if order == ctx::CREATE_ORDERED_LIST {
            value::LIST_ORDERED
        } else {
            0
        };
        List {
            flags,
            items: Vec::new(),
        }
        .encode()
    } else {
        let flags = match order {
            ctx::CREATE_MAP_K_ORDERED => value::MAP_K_ORDERED,
            ctx::CREATE_MAP_KV_ORDERED => value::MAP_KV_ORDERED,
            _ => 0,
        };
        Map {
            flags,
            pairs: Vec::new(),
        }
        .encode()
    }
}

/// The list element a context selects: its position and bytes (`None`
/// bytes when a create context adds it at that position).
fn list_child<'l>(
    list: &'l List<'_>,
    base: u64,
    selector: &[u8],
    allow_create: bool,
    kind: u64,
) -> Result<(usize, Option<&'l [u8]>), ResultCode> {
    let n = list.items.len();
    let items: Vec<&[u8]> = list.items.iter().map(|item| item.as_ref()).collect();
    let position = match base {
        ctx::INDEX => {
            let index = int_of(selector)?;
            match single_index(index, n) {
                Some(position) => position,
                // As on the server: -1 on an empty list and n add at the
                // end; past the end an ordered list adds at the end too, an
                // unbound unordered list pads with nils.
                None if allow_create && (index == n as i64 || (n == 0 && index == -1)) => {
                    return Ok((n, None));
                }
                None if allow_create && list.is_ordered() => return Ok((n, None)),
                None if allow_create && index > n as i64 => {
                    let unbound = kind & ctx::CREATE_ORDER_MASK == ctx::CREATE_LIST_UNBOUND;
                    if !unbound {
                        return Err(ResultCode::OpNotApplicable);
                    }
                    return Ok((index as usize, None));
                }
                None => return Err(ResultCode::OpNotApplicable),
            }
        }
        ctx::RANK => {
            let rank = single_index(int_of(selector)?, n).ok_or(ResultCode::OpNotApplicable)?;
            let order = rank_order(&items)?;
            *order.get(rank).ok_or(ResultCode::OpNotApplicable)?
        }
        ctx::VALUE => value::position_of(items, selector)?.ok_or(ResultCode::OpNotApplicable)?,
        _ => return Err(ResultCode::OpNotApplicable),
    };
    let child = list.items.get(position).map(|item| item.as_ref());
    Ok((position, child))
}

/// The map value a context selects: its pair position (`None` when a
/// create context adds the key) and bytes.
fn map_child<'m>(
    map: &'m Map<'_>,
    base: u64,
    selector: &[u8],
    allow_create: bool,
) -> Result<(Option<usize>, Option<&'m [u8]>), ResultCode> {
    let keys: Vec<&[u8]> = map.pairs.iter().map(|(k, _)| k.as_ref()).collect();
    let values: Vec<&[u8]> = map.pairs.iter().map(|(_, v)| v.as_ref()).collect();
    let n = keys.len();
    let position = match base {
        ctx::INDEX => {
            let index = single_index(int_of(selector)?, n).ok_or(ResultCode::OpNotApplicable)?;
            let order = rank_order(&keys)?;
            *order.get(index).ok_or(ResultCode::OpNotApplicable)?
        }
        ctx::RANK => {
            let rank = single_index(int_of(selector)?, n).ok_or(ResultCode::OpNotApplicable)?;
            let order = View::map(keys.clone(), values.clone()).rank_order()?;
            *order.get(rank).ok_or(ResultCode::OpNotApplicable)?
        }
        ctx::KEY => match value::position_of(keys.iter().copied(), selector)? {
            Some(i) => i,
            None if allow_create => {
                map::check_key(selector)?;
                return Ok((None, None));
            }
            None => return Err(ResultCode::OpNotApplicable),
        },
        ctx::VALUE => value::position_of(values.iter().copied(), selector)?
            .ok_or(ResultCode::OpNotApplicable)?,
        _ => return Err(ResultCode::OpNotApplicable),
    };
    Ok((Some(position), values.get(position).copied()))
}

fn int_of(bytes: &[u8]) -> Result<i64, ResultCode> {
    match Reader::new(bytes).item() {
        Ok(Item::Int(value)) => Ok(value),
        Ok(Item::Uint(value)) => i64::try_from(value).map_err(|_| ResultCode::Parameter),
        _ => Err(ResultCode::Parameter),
    }
}

/// Positions of `items` sorted by value (stable).
pub fn rank_order(items: &[&[u8]]) -> Result<Vec<usize>, ResultCode> {
    sorted_by_value((0..items.len()).collect(), items)
}

/// Sorts `order` (positions into `items`) by the items' values, stably.
fn sorted_by_value(mut order: Vec<usize>, items: &[&[u8]]) -> Result<Vec<usize>, ResultCode> {
    let mut failed = false;
    order.sort_by(|&a, &b| match (items.get(a), items.get(b)) {
        (Some(x), Some(y)) => value::compare(x, y).unwrap_or_else(|_| {
            failed = true;
            Ordering::Equal
        }),
        _ => Ordering::Equal,
    });
    if failed {
        Err(ResultCode::Parameter)
    } else {
        Ok(order)
    }
}

/// A single index (negative from the end) inside `0..n`.
pub fn single_index(index: i64, n: usize) -> Option<usize> {
    let resolved = if index < 0 {
        (n as i64).checked_add(index)?
    } else {
        index
    };
    if resolved < 0 || resolved as u64 >= n as u64 {
        None
    } else {
        Some(resolved as usize)
    }
}

/// The start and length of a multi-element index range, clamped to `n`
/// (a negative start before the first element shortens the range).
pub fn multi_range(index: i64, count: u64, n: usize) -> (usize, usize) {
    let n64 = n as i64;
    if index >= n64 {
        return (n, 0);
    }
    let resolved = if index < 0 {
        n64.saturating_add(index)
    } else {
        index
    };
    if resolved < 0 {
        let before = resolved.unsigned_abs();
        if before < count {
            let available = (count - before).min(n as u64);
            return (0, available as usize);
        }
        return (0, 0);
    }
    let start = resolved as usize;
    let available = (n - start) as u64;
    (start, count.min(available) as usize)
}

/// A range relative to a rank or index: `rel + index`, clamped at 0.
pub fn relative_range(index: i64, count: u64, rel: usize) -> (i64, u64) {
    let index = index.saturating_add(rel as i64);
    if index < 0 {
        let before = index.unsigned_abs();
        (0, count.saturating_sub(before))
    } else {
        (index, count)
    }
}

/// Return type codes and the inverted flag.
pub mod ret {
    pub const NONE: u64 = 0;
    pub const INDEX: u64 = 1;
    pub const REVERSE_INDEX: u64 = 2;
    pub const RANK: u64 = 3;
    pub const REVERSE_RANK: u64 = 4;
    pub const COUNT: u64 = 5;
    pub const KEY: u64 = 6;
    pub const VALUE: u64 = 7;
    pub const KEY_VALUE: u64 = 8;
    pub const EXISTS: u64 = 13;
    pub const UNORDERED_MAP: u64 = 16;
    pub const ORDERED_MAP: u64 = 17;
    pub const INVERTED: u64 = 0x10000;
    pub const TYPE_MASK: u64 = 0xffff;
}

/// The elements an op selects from: list values, or map keys and values
/// (a map's "index" is its key order, its "rank" its value order), with
/// the container's order flags.
pub struct View<'v> {
    values: Vec<&'v [u8]>,
    keys: Option<Vec<&'v [u8]>>,
    /// An ordered list, or a key-ordered map.
    ordered: bool,
    /// A key-value-ordered map: the server keeps an index of its value
    /// order, which changes the order some results come in.
    value_indexed: bool,
}

impl<'v> View<'v> {
    pub fn list(values: Vec<&'v [u8]>) -> View<'v> {
        View {
            values,
            keys: None,
            ordered: false,
            value_indexed: false,
        }
    }

    pub fn map(keys: Vec<&'v [u8]>, values: Vec<&'v [u8]>) -> View<'v> {
        View {
            values,
            keys: Some(keys),
            ordered: false,
            value_indexed: false,
        }
    }

    /// The container's order flags (`LIST_ORDERED`, or a map's
    /// `MAP_K_ORDERED` / `MAP_KV_ORDERED`).
    pub fn with_flags(mut self, flags: u8) -> View<'v> {
        if self.keys.is_some() {
            self.ordered = flags & value::MAP_K_ORDERED != 0;
            self.value_indexed = flags & value::MAP_KV_ORDERED == value::MAP_KV_ORDERED;
        } else {
            self.ordered = flags & value::LIST_ORDERED != 0;
        }
        self
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn is_map(&self) -> bool {
        self.keys.is_some()
    }

    /// An ordered list or a key-ordered map (stored order is index order).
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }

    pub fn is_value_indexed(&self) -> bool {
        self.value_indexed
    }

    /// Positions in index order (a list's own order, a map's key order).
    pub fn index_order(&self) -> Result<Vec<usize>, ResultCode> {
        match &self.keys {
            None => Ok((0..self.values.len()).collect()),
            Some(_) if self.ordered => Ok((0..self.values.len()).collect()),
            Some(keys) => rank_order(keys),
        }
    }

    /// Positions in value order (ties in index order).
    pub fn rank_order(&self) -> Result<Vec<usize>, ResultCode> {
        sorted_by_value(self.index_order()?, &self.values)
    }

    /// Inverse of an order: the index (or rank) of each position.
    fn place_of(order: &[usize]) -> Vec<usize> {
        let mut place = vec![0; order.len()];
        for (i, &position) in order.iter().enumerate() {
            if let Some(slot) = place.get_mut(position) {
                *slot = i;
            }
        }
        place
    }

    /// Positions whose value (or key, for `by_key`) lies in
    /// `[start, end)`; `end` absent means no upper bound.
    pub fn in_interval(
        &self,
        by_key: bool,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Result<Vec<usize>, ResultCode> {
        let items = self.items(by_key);
        let mut found = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if value::compare(item, start)? == Ordering::Less {
                continue;
            }
            if let Some(end) = end {
                if value::compare(item, end)? != Ordering::Less {
                    continue;
                }
            }
            found.push(i);
        }
        Ok(found)
    }

    /// Positions equal to any of `targets` (by key or by value).
    pub fn equal_to_any(&self, by_key: bool, targets: &[&[u8]]) -> Result<Vec<usize>, ResultCode> {
        let items = self.items(by_key);
        let mut found = Vec::new();
        for (i, item) in items.iter().enumerate() {
            for target in targets {
                if value::compare(item, target)? == Ordering::Equal {
                    found.push(i);
                    break;
                }
            }
        }
        Ok(found)
    }

    /// How many elements order before `target` (by key or by value).
    pub fn count_below(&self, by_key: bool, target: &[u8]) -> Result<usize, ResultCode> {
        let mut below = 0;
        for item in self.items(by_key) {
            if value::compare(item, target)? == Ordering::Less {
                below += 1;
            }
        }
        Ok(below)
    }

    fn items(&self, by_key: bool) -> &[&'v [u8]] {
        match (&self.keys, by_key) {
            (Some(keys), true) => keys,
            _ => &self.values,
        }
    }

    /// Positions `start..start + count` of an order.
    pub fn slice(order: &[usize], start: usize, count: usize) -> Vec<usize> {
        order.iter().skip(start).take(count).copied().collect()
    }

    /// The positions not in `chosen`, in stored order.
    pub fn complement(&self, chosen: &[usize]) -> Vec<usize> {
        let mut taken = vec![false; self.len()];
        for &position in chosen {
            if let Some(slot) = taken.get_mut(position) {
                *slot = true;
            }
        }
        (0..self.len())
            .filter(|&i| !taken.get(i).copied().unwrap_or(false))
            .collect()
    }

    /// The positions of ranks `start..start + count` (by value, or by key
    /// for `by_key`) in the order the server's partial heap sort leaves
    /// them, and whether it took the lowest elements (a min-heap, which
    /// leaves them highest first) or the highest (ascending).
    ///
    /// The server (`order_heap` in `cdt.c`) heapifies every position, then
    /// pops `count` plus the elements on the near side of the range off
    /// the top, writing each popped one backwards from the end of the
    /// array; the range is the first `count` of that tail. Equal elements
    /// come out in whatever order the heap leaves them, so this follows
    /// the same steps to list them the same way.
    pub fn heap_range(
        &self,
        by_key: bool,
        start: usize,
        count: usize,
    ) -> Result<(Vec<usize>, bool), ResultCode> {
        let items = self.items(by_key);
        let n = items.len();
        if start + count > n {
            return Err(ResultCode::Parameter);
        }
        let tail = n - start - count;
        let (wanted, discard) = if start <= tail {
            (Ordering::Less, start)
        } else {
            (Ordering::Greater, tail)
        };
        let mut heap = Heap {
            slots: (0..n).collect(),
            filled: n,
            wanted,
            items,
            failed: false,
        };
        for i in (0..n / 2).rev() {
            heap.sift_down(i);
        }
        let mut end = n;
        for _ in 0..count + discard {
            let Some(&top) = heap.slots.first() else {
                break;
            };
            heap.pop();
            end -= 1;
            if let Some(slot) = heap.slots.get_mut(end) {
                *slot = top;
            }
        }
        if heap.failed {
            return Err(ResultCode::Parameter);
        }
        let range = heap
            .slots
            .get(end..end + count)
            .unwrap_or_default()
            .to_vec();
        Ok((range, wanted == Ordering::Less))
    }
}

/// A binary heap of positions, ordered by their items (see
/// [`View::heap_range`]): `wanted` is the order a parent has to its
/// children (`Less` for a min-heap).
struct Heap<'h, 'v> {
    slots: Vec<usize>,
    filled: usize,
    wanted: Ordering,
    items: &'h [&'v [u8]],
    failed: bool,
}

impl Heap<'_, '_> {
    fn compare(&mut self, a: usize, b: usize) -> Ordering {
        let (Some(&a), Some(&b)) = (self.slots.get(a), self.slots.get(b)) else {
            return Ordering::Equal;
        };
        match (self.items.get(a), self.items.get(b)) {
            (Some(x), Some(y)) => value::compare(x, y).unwrap_or_else(|_| {
                self.failed = true;
                Ordering::Equal
            }),
            _ => Ordering::Equal,
        }
    }

    fn sift_down(&mut self, mut index: usize) {
        loop {
            let first = 2 * index + 1;
            let second = first + 1;
            if first >= self.filled {
                return;
            }
            let child = if second >= self.filled {
                first
            } else {
                match self.compare(first, second) {
                    Ordering::Equal => first,
                    order if order == self.wanted => first,
                    _ => second,
                }
            };
            if self.compare(child, index) != self.wanted {
                return;
            }
            self.slots.swap(index, child);
            index = child;
        }
    }

    /// Removes the top: the last filled slot takes its place.
    fn pop(&mut self) {
        if self.filled == 0 {
            return;
        }
        self.filled -= 1;
        let last = self.slots.get(self.filled).copied().unwrap_or(0);
        if let Some(top) = self.slots.first_mut() {
            *top = last;
        }
        self.sift_down(0);
    }
}

/// How the INDEX or RANK numbers of a multi-element result are listed.
/// The server builds them in different ways for different ops (from a
/// bit mask of the chosen positions, from a range, or element by
/// element), so the order differs too, and clients see it.
#[derive(Clone, Debug, PartialEq)]
pub enum Listing {
    /// Ascending (a reverse index or rank therefore descending).
    Ascending,
    /// In the order of the selection's positions.
    AsElements,
    /// In the order of the selection's positions, each list element's
    /// rank being the number of elements below it (equal elements share
    /// one), as the server computes it one element at a time.
    CountBelow,
    /// In the order of these positions.
    Given(Vec<usize>),
}

/// Which elements an op picked, and in which order each kind of result
/// lists them.
pub struct Selection {
    /// The selected positions, in the order values, keys and pairs are
    /// answered.
    pub positions: Vec<usize>,
    pub indexes: Listing,
    pub ranks: Listing,
    /// One element expected (results are scalars, not lists).
    pub multi: bool,
}

impl Selection {
    /// One element expected (a scalar result).
    pub fn single(positions: Vec<usize>) -> Selection {
        Selection {
            positions,
            indexes: Listing::Ascending,
            ranks: Listing::Ascending,
            multi: false,
        }
    }

    /// Any number of elements, answered in stored order with ascending
    /// numbers.
    pub fn stored(mut positions: Vec<usize>) -> Selection {
        positions.sort_unstable();
        Selection {
            positions,
            indexes: Listing::Ascending,
            ranks: Listing::Ascending,
            multi: true,
        }
    }

    /// Any number of elements, answered in the order given.
    pub fn ordered(positions: Vec<usize>) -> Selection {
        Selection {
            positions,
            indexes: Listing::Ascending,
            ranks: Listing::Ascending,
            multi: true,
        }
    }

    pub fn indexes(mut self, listing: Listing) -> Selection {
        self.indexes = listing;
        self
    }

    pub fn ranks(mut self, listing: Listing) -> Selection {
        self.ranks = listing;
        self
    }
}

/// The get-by ops lists and maps share, with the same arguments: `args`
/// are (return type, index or rank or value, count or interval end…).
/// `inverted` asks for the elements the op does not name. The orders
/// follow the server's `particle_list.c` and `particle_map.c`.
pub fn select_shared(
    view: &View<'_>,
    op: Shared,
    args: &Args<'_>,
    inverted: bool,
) -> Result<Selection, ResultCode> {
    let n = view.len();
    Ok(match op {
        Shared::ByRank => {
            let rank = single_index(args.int(1)?, n).ok_or(ResultCode::OpNotApplicable)?;
            Selection::single(View::slice(&view.rank_order()?, rank, 1))
        }
        Shared::ByValue => Selection::single(view.equal_to_any(false, &[args.payload(1)?])?),
        Shared::AllByValue => {
            let found = view.equal_to_any(false, &[args.payload(1)?])?;
            value_interval(view, found, inverted)?
        }
        Shared::ValueInterval => {
            // Only a missing end means "no upper bound": an end given as
            // nil is the lowest value, so nothing lies below it.
            let found = view.in_interval(false, args.payload(1)?, args.get(2))?;
            value_interval(view, found, inverted)?
        }
        Shared::IndexRange => {
            let (start, count) = multi_range(args.int(1)?, args.count_or_all(2)?, n);
            index_range(view, start, count, inverted)?
        }
        Shared::RankRange => {
            let (start, count) = multi_range(args.int(1)?, args.count_or_all(2)?, n);
            rank_range(view, start, count, inverted)?
        }
        Shared::ValueRelRankRange => {
            let anchor = view.count_below(false, args.payload(1)?)?;
            let (rank, count) = relative_range(args.int(2)?, args.count_or_all(3)?, anchor);
            let (start, count) = multi_range(rank, count, n);
            rank_range(view, start, count, inverted)?
        }
    })
}

/// The elements of index range `start..start + count` (in key order for
/// a map), or the others.
pub fn index_range(
    view: &View<'_>,
    start: usize,
    count: usize,
    inverted: bool,
) -> Result<Selection, ResultCode> {
    let n = view.len();
    let Some((start, count, inverted)) = reduce_inverted(start, count, n, inverted) else {
        return Ok(Selection::stored((0..n).collect()));
    };
    let index_order = view.index_order()?;
    let chosen = View::slice(&index_order, start, count);
    if !view.is_map() {
        // A list answers in its own order; an unordered list's ranks are
        // worked out element by element.
        let positions = if inverted {
            view.complement(&chosen)
        } else {
            chosen
        };
        // Taking every element, the server lists ranks 0..n.
        let ranks = if view.is_ordered() || positions.len() == n {
            Listing::Ascending
        } else {
            Listing::CountBelow
        };
        return Ok(Selection::ordered(positions).ranks(ranks));
    }
    if inverted {
        return Ok(Selection::ordered(view.complement(&chosen)).ranks(Listing::AsElements));
    }
    if count == n {
        // The whole map, as stored.
        return Ok(Selection::stored(chosen));
    }
    Ok(Selection::ordered(chosen).ranks(Listing::AsElements))
}

/// The elements of rank range `start..start + count`, or the others.
pub fn rank_range(
    view: &View<'_>,
    start: usize,
    count: usize,
    inverted: bool,
) -> Result<Selection, ResultCode> {
    let n = view.len();
    if !view.is_map() {
        if view.is_ordered() {
            // Rank is index in an ordered list.
            return index_range(view, start, count, inverted);
        }
        let (chosen, _) = view.heap_range(false, start, count)?;
        if inverted {
            return Ok(Selection::ordered(view.complement(&chosen)));
        }
        // Values as the heap leaves them; numbers from the mask and the
        // range.
        return Ok(Selection::ordered(chosen));
    }
    let (start, count, inverted) =
        reduce_inverted(start, count, n, inverted).unwrap_or((0, n, false));
    let chosen = if view.is_value_indexed() {
        View::slice(&view.rank_order()?, start, count)
    } else {
        let (mut chosen, lowest) = view.heap_range(false, start, count)?;
        if lowest {
            // The server turns a min-heap's range back to rank order.
            chosen.reverse();
        }
        chosen
    };
    if inverted {
        return Ok(Selection::ordered(view.complement(&chosen)).indexes(Listing::AsElements));
    }
    Ok(Selection::ordered(chosen).indexes(Listing::AsElements))
}

/// The elements an interval (or an equal value) found, in stored order,
/// or the others.
fn value_interval(
    view: &View<'_>,
    found: Vec<usize>,
    inverted: bool,
) -> Result<Selection, ResultCode> {
    if !view.is_map() {
        let positions = if inverted {
            view.complement(&found)
        } else {
            found
        };
        return Ok(Selection::stored(positions));
    }
    if inverted {
        if found.is_empty() {
            return Ok(Selection::stored((0..view.len()).collect()));
        }
        return Ok(Selection::stored(view.complement(&found)).indexes(Listing::AsElements));
    }
    if view.is_value_indexed() {
        // Found through the value index: in value order.
        let rank_order = view.rank_order()?;
        let mut chosen = vec![false; view.len()];
        for &position in &found {
            if let Some(slot) = chosen.get_mut(position) {
                *slot = true;
            }
        }
        let positions = rank_order
            .into_iter()
            .filter(|&p| chosen.get(p).copied().unwrap_or(false))
            .collect();
        return Ok(Selection::ordered(positions).indexes(Listing::AsElements));
    }
    Ok(Selection::stored(found).indexes(Listing::AsElements))
}

/// Elements equal to any value of a list: in stored order, with ranks
/// (and, for an ordered container, indexes or values) listed value by
/// value in the order the list gives them.
pub fn value_list(
    view: &View<'_>,
    targets: &[&[u8]],
    inverted: bool,
) -> Result<Selection, ResultCode> {
    let found = view.equal_to_any(false, targets)?;
    if inverted {
        let positions = view.complement(&found);
        return Ok(if view.is_map() {
            let listing = if view.is_value_indexed() {
                Listing::AsElements
            } else {
                Listing::Ascending
            };
            Selection::stored(positions)
                .indexes(Listing::AsElements)
                .ranks(listing)
        } else {
            Selection::stored(positions)
        });
    }
    // Value by value: each one's equal elements in rank order.
    let rank_order = view.rank_order()?;
    let mut by_value = Vec::with_capacity(found.len());
    let mut listed = vec![false; view.len()];
    for target in targets {
        for &position in &rank_order {
            let Some(item) = view.values.get(position) else {
                continue;
            };
            if listed.get(position).copied().unwrap_or(true) {
                continue;
            }
            if value::compare(item, target)? == Ordering::Equal {
                by_value.push(position);
                if let Some(slot) = listed.get_mut(position) {
                    *slot = true;
                }
            }
        }
    }
    if view.is_map() {
        let indexes = if view.is_value_indexed() {
            Listing::Given(by_value.clone())
        } else {
            Listing::AsElements
        };
        return Ok(Selection::stored(found)
            .indexes(indexes)
            .ranks(Listing::Given(by_value)));
    }
    if view.is_ordered() {
        return Ok(Selection::ordered(by_value)
            .indexes(Listing::AsElements)
            .ranks(Listing::AsElements));
    }
    Ok(Selection::stored(found).ranks(Listing::Given(by_value)))
}

/// How the server narrows an inverted range of `n` elements: the
/// complement of a range touching either end is a range itself (answered
/// like one, not inverted), the complement of everything is everything.
/// Gives the range and whether it is still inverted, or `None` for the
/// whole container.
fn reduce_inverted(
    start: usize,
    count: usize,
    n: usize,
    inverted: bool,
) -> Option<(usize, usize, bool)> {
    if !inverted {
        return Some((start, count, false));
    }
    if count == 0 {
        return None;
    }
    if start == 0 {
        return Some((count, n - count, false));
    }
    if start + count >= n {
        return Some((0, start, false));
    }
    Some((start, count, true))
}

/// Get-by ops that lists and maps both have (with their own op codes).
#[derive(Clone, Copy, Debug)]
pub enum Shared {
    ByRank,
    ByValue,
    AllByValue,
    ValueInterval,
    IndexRange,
    RankRange,
    ValueRelRankRange,
}

/// The common part of a get-by or remove-by op: reads and checks the
/// return type (`args[0]`), selects (the inverted flag passed on), and
/// builds the result. Returns the selected positions (for a remove) and
/// the result.
pub fn select_and_build(
    view: &View<'_>,
    args: &Args<'_>,
    select: impl FnOnce(&View<'_>, bool) -> Result<Selection, ResultCode>,
) -> Result<(Vec<usize>, Option<Particle>), ResultCode> {
    let return_type = u64::try_from(args.int(0)?).map_err(|_| ResultCode::Parameter)?;
    check_return_type(return_type)?;
    let inverted = return_type & ret::INVERTED != 0;
    let selection = select(view, inverted)?;
    if inverted && !selection.multi {
        return Err(ResultCode::OpNotApplicable);
    }
    let result = build_result(view, &selection, return_type)?;
    Ok((selection.positions, result))
}

/// Removes the elements at `positions` (any order, duplicates allowed).
pub fn remove_positions<T>(items: &mut Vec<T>, positions: &[usize]) {
    if positions.is_empty() {
        return;
    }
    let mut remove = vec![false; items.len()];
    for &position in positions {
        if let Some(slot) = remove.get_mut(position) {
            *slot = true;
        }
    }
    let mut i = 0;
    items.retain(|_| {
        let keep = !remove.get(i).copied().unwrap_or(false);
        i += 1;
        keep
    });
}

/// The INDEX or RANK numbers of a selection, listed as it asks.
fn numbers(
    view: &View<'_>,
    selection: &Selection,
    by_index: bool,
    reverse: bool,
) -> Result<Vec<i64>, ResultCode> {
    let n = view.len();
    let listing = if by_index {
        &selection.indexes
    } else {
        &selection.ranks
    };
    let count_below = *listing == Listing::CountBelow;
    let place = if count_below {
        Vec::new()
    } else if by_index {
        View::place_of(&view.index_order()?)
    } else {
        View::place_of(&view.rank_order()?)
    };
    let number_of = |position: usize| -> Result<usize, ResultCode> {
        if count_below {
            let item = view.values.get(position).ok_or(ResultCode::Parameter)?;
            return view.count_below(false, item);
        }
        Ok(place.get(position).copied().unwrap_or(0))
    };
    let positions = match listing {
        Listing::Given(given) => given.as_slice(),
        _ => selection.positions.as_slice(),
    };
    let mut forward = Vec::with_capacity(positions.len());
    for &position in positions {
        forward.push(number_of(position)?);
    }
    if *listing == Listing::Ascending {
        forward.sort_unstable();
    }
    Ok(forward
        .into_iter()
        .map(|at| {
            if reverse {
                (n - 1 - at.min(n.saturating_sub(1))) as i64
            } else {
                at as i64
            }
        })
        .collect())
}

/// Builds an op's result from its selection and return type.
pub fn build_result(
    view: &View<'_>,
    selection: &Selection,
    return_type: u64,
) -> Result<Option<Particle>, ResultCode> {
    let kind = return_type & ret::TYPE_MASK;
    let positions = &selection.positions;
    let is_map = view.keys.is_some();
    match kind {
        ret::NONE => Ok(None),
        ret::COUNT => Ok(Some(value::int_particle(positions.len() as i64))),
        ret::EXISTS => Ok(Some(value::bool_particle(!positions.is_empty()))),
        ret::INDEX | ret::REVERSE_INDEX | ret::RANK | ret::REVERSE_RANK => {
            let by_index = matches!(kind, ret::INDEX | ret::REVERSE_INDEX);
            let reverse = matches!(kind, ret::REVERSE_INDEX | ret::REVERSE_RANK);
            let numbers = numbers(view, selection, by_index, reverse)?;
            if !selection.multi {
                return Ok(Some(value::int_particle(
                    numbers.first().copied().unwrap_or(-1),
                )));
            }
            let mut out = Vec::new();
            value::write_array_header(&mut out, numbers.len());
            for number in numbers {
                value::write_int(&mut out, number);
            }
            Ok(Some((particle::LIST, out)))
        }
        ret::VALUE | ret::KEY => {
            let items = if kind == ret::KEY {
                match &view.keys {
                    Some(keys) => keys,
                    None => return Err(ResultCode::OpNotApplicable),
                }
            } else {
                &view.values
            };
            let picked = positions.iter().filter_map(|&p| items.get(p).copied());
            if selection.multi {
                let picked: Vec<&[u8]> = picked.collect();
                Ok(Some((
                    particle::LIST,
                    value::encode_items(picked.into_iter()),
                )))
            } else {
                Ok(picked.map(value::to_particle).next())
            }
        }
        ret::KEY_VALUE | ret::UNORDERED_MAP | ret::ORDERED_MAP if is_map => {
            let (Some(keys), values) = (&view.keys, &view.values) else {
                return Err(ResultCode::OpNotApplicable);
            };
            let mut pairs: Vec<(&[u8], &[u8])> = positions
                .iter()
                .filter_map(|&p| Some((*keys.get(p)?, *values.get(p)?)))
                .collect();
            let flags = match kind {
                ret::KEY_VALUE => value::MAP_PRESERVE_ORDER,
                ret::ORDERED_MAP => {
                    let key_list: Vec<&[u8]> = pairs.iter().map(|(k, _)| *k).collect();
                    let order = rank_order(&key_list)?;
                    pairs = order
                        .iter()
                        .filter_map(|&i| pairs.get(i).copied())
                        .collect();
                    value::MAP_K_ORDERED
                }
                _ => 0,
            };
            Ok(Some((
                particle::MAP,
                value::encode_pairs(flags, pairs.into_iter()),
            )))
        }
        // A return type the op does not have (a map type on a list, an
        // unknown number) is not applicable, as the server answers.
        _ => Err(ResultCode::OpNotApplicable),
    }
}

/// Whether a selection op's return type is valid for removal bookkeeping.
pub fn check_return_type(return_type: u64) -> Result<(), ResultCode> {
    match return_type & !(ret::TYPE_MASK | ret::INVERTED) {
        0 => Ok(()),
        _ => Err(ResultCode::Parameter),
    }
}

#[cfg(test)]
mod tests;
