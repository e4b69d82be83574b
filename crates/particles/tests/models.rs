//! The value algebra against simple models: list ops against a `Vec`, map
//! ops against a `BTreeMap` (key-ordered) or an insertion-ordered `Vec`,
//! bit ops against a `Vec<bool>`, HyperLogLog counts against the true
//! cardinality, integer and float arithmetic against Rust's checked
//! arithmetic, and the msgpack value order against a model order.
//!
//! Every case asserts on values (the bin after the op, the op's result,
//! the result code), so a divergence from the model fails the test.

use bolide_particles::cdt::{self, value};
use bolide_particles::expression::{self, Evaluated, Record};
use bolide_particles::{bits, hll, ops};
use bolide_types::{particle, Digest, ResultCode};
use bolide_wire::msgpack::{Item, Reader};
use proptest::prelude::*;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

// ------------------------------------------------------------ msgpack

fn int(value: i64) -> Vec<u8> {
    value::int_bytes(value)
}

fn array(items: &[Vec<u8>]) -> Vec<u8> {
    value::encode_items(items.iter().map(Vec::as_slice))
}

/// `[code, args...]`, the payload of a list, map, bit or HLL op.
fn payload(code: u64, args: &[Vec<u8>]) -> Vec<u8> {
    let mut items = vec![int(code as i64)];
    items.extend_from_slice(args);
    array(&items)
}

/// Reads one msgpack integer (or nil as `None`).
fn read_element(reader: &mut Reader<'_>) -> Option<i64> {
    match reader.item().expect("an element") {
        Item::Int(value) => Some(value),
        Item::Uint(value) => Some(value as i64),
        Item::Nil => None,
        other => panic!("unexpected element {other:?}"),
    }
}

/// A list particle's elements (integers or nil), its order flag skipped.
fn list_elements(bytes: &[u8]) -> Vec<Option<i64>> {
    let list = value::List::parse(bytes).expect("a list");
    list.items
        .iter()
        .map(|item| read_element(&mut Reader::new(item)))
        .collect()
}

fn int_result(result: &Option<(u8, Vec<u8>)>) -> i64 {
    let (particle_type, bytes) = result.as_ref().expect("a result");
    assert_eq!(*particle_type, particle::INTEGER);
    i64::from_be_bytes(bytes.as_slice().try_into().expect("8 bytes"))
}

// ------------------------------------------------------------ lists

/// List op codes (the clients' numbers).
mod list_op {
    pub const SET_TYPE: u64 = 0;
    pub const APPEND: u64 = 1;
    pub const INSERT: u64 = 3;
    pub const POP: u64 = 5;
    pub const POP_RANGE: u64 = 6;
    pub const REMOVE: u64 = 7;
    pub const REMOVE_RANGE: u64 = 8;
    pub const SET: u64 = 9;
    pub const TRIM: u64 = 10;
    pub const CLEAR: u64 = 11;
    pub const SORT: u64 = 13;
    pub const SIZE: u64 = 16;
    pub const GET_RANGE: u64 = 18;
    pub const GET_BY_RANK_RANGE: u64 = 26;
    pub const GET_BY_VALUE_INTERVAL: u64 = 25;
}

/// Return types.
const RETURN_COUNT: i64 = 5;
const RETURN_VALUE: i64 = 7;

#[derive(Clone, Debug)]
enum ListOp {
    Append(i64),
    Insert(i64, i64),
    Set(i64, i64),
    Remove(i64),
    Pop(i64),
    RemoveRange(i64, i64),
    PopRange(i64, i64),
    Trim(i64, i64),
    GetRange(i64, i64),
    GetByRankRange(i64, i64),
    CountInterval(i64, i64),
    Clear,
    Size,
    Sort,
}

fn list_op() -> impl Strategy<Value = ListOp> {
    let value = -20i64..20;
    let index = -12i64..12;
    let count = -2i64..8;
    prop_oneof![
        4 => value.clone().prop_map(ListOp::Append),
        2 => (index.clone(), value.clone()).prop_map(|(i, v)| ListOp::Insert(i, v)),
        2 => (index.clone(), value.clone()).prop_map(|(i, v)| ListOp::Set(i, v)),
        1 => index.clone().prop_map(ListOp::Remove),
        1 => index.clone().prop_map(ListOp::Pop),
        1 => (index.clone(), count.clone()).prop_map(|(i, c)| ListOp::RemoveRange(i, c)),
        1 => (index.clone(), count.clone()).prop_map(|(i, c)| ListOp::PopRange(i, c)),
        1 => (index.clone(), count.clone()).prop_map(|(i, c)| ListOp::Trim(i, c)),
        1 => (index.clone(), count.clone()).prop_map(|(i, c)| ListOp::GetRange(i, c)),
        1 => (index.clone(), count.clone()).prop_map(|(i, c)| ListOp::GetByRankRange(i, c)),
        1 => (value.clone(), value).prop_map(|(a, b)| ListOp::CountInterval(a, b)),
        1 => Just(ListOp::Clear),
        1 => Just(ListOp::Size),
        1 => Just(ListOp::Sort),
    ]
}

/// The model of a list: elements (nil as `None`) and its order flag.
#[derive(Clone, Debug, Default)]
struct ListModel {
    items: Vec<Option<i64>>,
    ordered: bool,
}

/// The server's range rule for `(index, count)` over `n` elements: a
/// negative index counts from the end, a negative count means "to the
/// end", and the range is clamped to the list (a start before the first
/// element shortens it).
fn model_range(index: i64, count: i64, n: usize) -> (usize, usize) {
    let n = n as i128;
    let count = if count < 0 {
        i128::from(u32::MAX)
    } else {
        i128::from(count)
    };
    let start = if index < 0 {
        n + i128::from(index)
    } else {
        i128::from(index)
    };
    let low = start.clamp(0, n);
    let high = (start + count).clamp(low, n);
    (low as usize, high as usize)
}

/// Aerospike's order of the model's elements: nil below every integer.
fn model_sort(items: &mut [Option<i64>]) {
    items.sort();
}

/// What the model says an op answers: the result (an integer, or a list
/// of elements) or a result code.
#[derive(Debug, PartialEq)]
enum Answer {
    Nothing,
    Int(i64),
    List(Vec<Option<i64>>),
    Code(ResultCode),
}

impl ListModel {
    fn apply(&mut self, op: &ListOp) -> Answer {
        let n = self.items.len();
        let single = |index: i64| -> Option<usize> {
            let at = if index < 0 { n as i64 + index } else { index };
            (0..n as i64).contains(&at).then_some(at as usize)
        };
        match *op {
            ListOp::Append(v) => {
                if self.ordered {
                    let at = self.items.partition_point(|item| *item <= Some(v));
                    self.items.insert(at, Some(v));
                } else {
                    self.items.push(Some(v));
                }
                Answer::Int(self.items.len() as i64)
            }
            ListOp::Insert(i, v) => {
                if self.ordered {
                    return Answer::Code(ResultCode::OpNotApplicable);
                }
                let at = if i < 0 { n as i64 + i } else { i };
                if at < 0 {
                    return Answer::Code(ResultCode::OpNotApplicable);
                }
                let at = at as usize;
                if at > n {
                    self.items.resize(at, None);
                }
                self.items.insert(at, Some(v));
                Answer::Int(self.items.len() as i64)
            }
            ListOp::Set(i, v) => {
                if self.ordered {
                    return Answer::Code(ResultCode::OpNotApplicable);
                }
                if i >= n as i64 {
                    self.items.resize(i as usize, None);
                    self.items.push(Some(v));
                    return Answer::Nothing;
                }
                match single(i) {
                    Some(at) => {
                        self.items[at] = Some(v);
                        Answer::Nothing
                    }
                    None => Answer::Code(ResultCode::OpNotApplicable),
                }
            }
            ListOp::Remove(i) => match single(i) {
                Some(at) => {
                    self.items.remove(at);
                    Answer::Int(1)
                }
                None => Answer::Code(ResultCode::OpNotApplicable),
            },
            ListOp::Pop(i) => match single(i) {
                Some(at) => match self.items.remove(at) {
                    Some(value) => Answer::Int(value),
                    None => Answer::Nothing,
                },
                None => Answer::Code(ResultCode::OpNotApplicable),
            },
            ListOp::RemoveRange(i, c) => {
                let (low, high) = model_range(i, c, n);
                self.items.drain(low..high);
                Answer::Int((high - low) as i64)
            }
            ListOp::PopRange(i, c) => {
                let (low, high) = model_range(i, c, n);
                Answer::List(self.items.drain(low..high).collect())
            }
            ListOp::Trim(i, c) => {
                let (low, high) = model_range(i, c, n);
                let kept: Vec<_> = self.items[low..high].to_vec();
                self.items = kept;
                Answer::Int((n - (high - low)) as i64)
            }
            ListOp::GetRange(i, c) => {
                let (low, high) = model_range(i, c, n);
                Answer::List(self.items[low..high].to_vec())
            }
            ListOp::GetByRankRange(i, c) => {
                let (low, high) = model_range(i, c, n);
                let mut sorted = self.items.clone();
                model_sort(&mut sorted);
                let mut picked = sorted[low..high].to_vec();
                picked.sort();
                Answer::List(picked)
            }
            ListOp::CountInterval(a, b) => {
                let (low, high) = (a.min(b), a.max(b));
                let count = self
                    .items
                    .iter()
                    .filter(|item| matches!(item, Some(v) if (low..high).contains(v)))
                    .count();
                Answer::Int(count as i64)
            }
            ListOp::Clear => {
                self.items.clear();
                Answer::Nothing
            }
            ListOp::Size => Answer::Int(n as i64),
            ListOp::Sort => {
                model_sort(&mut self.items);
                Answer::Nothing
            }
        }
    }
}

fn list_payload(op: &ListOp) -> (Vec<u8>, bool) {
    use list_op::*;
    match *op {
        ListOp::Append(v) => (payload(APPEND, &[int(v)]), true),
        ListOp::Insert(i, v) => (payload(INSERT, &[int(i), int(v)]), true),
        ListOp::Set(i, v) => (payload(SET, &[int(i), int(v)]), true),
        ListOp::Remove(i) => (payload(REMOVE, &[int(i)]), true),
        ListOp::Pop(i) => (payload(POP, &[int(i)]), true),
        ListOp::RemoveRange(i, c) => (payload(REMOVE_RANGE, &[int(i), int(c)]), true),
        ListOp::PopRange(i, c) => (payload(POP_RANGE, &[int(i), int(c)]), true),
        ListOp::Trim(i, c) => (payload(TRIM, &[int(i), int(c)]), true),
        ListOp::GetRange(i, c) => (payload(GET_RANGE, &[int(i), int(c)]), false),
        ListOp::GetByRankRange(i, c) => (
            payload(GET_BY_RANK_RANGE, &[int(RETURN_VALUE), int(i), int(c)]),
            false,
        ),
        ListOp::CountInterval(a, b) => (
            payload(
                GET_BY_VALUE_INTERVAL,
                &[int(RETURN_COUNT), int(a.min(b)), int(a.max(b))],
            ),
            false,
        ),
        ListOp::Clear => (payload(CLEAR, &[]), true),
        ListOp::Size => (payload(SIZE, &[]), false),
        ListOp::Sort => (payload(SORT, &[int(0)]), true),
    }
}

/// What the algebra answered, in the model's terms.
fn list_answer(op: &ListOp, result: &Option<(u8, Vec<u8>)>) -> Answer {
    match (op, result) {
        (_, None) => Answer::Nothing,
        (ListOp::Pop(_), Some((particle::NULL, _))) => Answer::Nothing,
        (_, Some((particle::LIST, bytes))) => {
            let mut items = list_elements(bytes);
            if matches!(op, ListOp::GetByRankRange(..)) {
                // The server lists a rank range in its heap's order; the
                // model compares the elements.
                items.sort();
            }
            Answer::List(items)
        }
        (_, Some(_)) => Answer::Int(int_result(result)),
    }
}

/// Whether a list op creates a missing bin (the others leave it missing).
fn creates_list(op: &ListOp) -> bool {
    matches!(op, ListOp::Append(_) | ListOp::Insert(..) | ListOp::Set(..))
}

fn run_list(ordered: bool, ops: &[ListOp]) -> Result<(), TestCaseError> {
    let mut model = ListModel::default();
    let mut bin: Option<Vec<u8>> = None;
    if ordered {
        let outcome =
            cdt::execute(None, &payload(list_op::SET_TYPE, &[int(1)]), true).expect("set type");
        bin = outcome.bin.map(|(_, bytes)| bytes);
        model.ordered = true;
    }
    for op in ops {
        let (payload, modify) = list_payload(op);
        let current = bin.as_deref().map(|bytes| (particle::LIST, bytes));
        if current.is_none() && !creates_list(op) {
            // On a missing bin other ops do nothing (a sort refuses).
            match cdt::execute(None, &payload, modify) {
                Ok(outcome) => prop_assert_eq!(outcome, cdt::Outcome::default(), "{:?}", op),
                Err(code) => {
                    prop_assert!(matches!(op, ListOp::Sort), "{:?}", op);
                    prop_assert_eq!(code, ResultCode::IncompatibleType);
                }
            }
            continue;
        }
        let expected = model.apply(op);
        match cdt::execute(current, &payload, modify) {
            Ok(outcome) => {
                prop_assert_eq!(list_answer(op, &outcome.result), expected, "{:?}", op);
                if let Some((particle_type, bytes)) = outcome.bin {
                    prop_assert_eq!(particle_type, particle::LIST);
                    bin = Some(bytes);
                }
            }
            Err(code) => prop_assert_eq!(Answer::Code(code), expected, "{:?}", op),
        }
        let stored = bin.as_deref().map(list_elements).unwrap_or_default();
        prop_assert_eq!(&stored, &model.items, "after {:?}", op);
        if let Some(bytes) = &bin {
            prop_assert_eq!(
                value::List::parse(bytes).expect("list").is_ordered(),
                ordered
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn unordered_lists_follow_a_vec(ops in prop::collection::vec(list_op(), 1..40)) {
        run_list(false, &ops)?;
    }

    #[test]
    fn ordered_lists_stay_sorted(ops in prop::collection::vec(list_op(), 1..40)) {
        run_list(true, &ops)?;
    }
}

// ------------------------------------------------------------ maps

mod map_op {
    pub const SET_TYPE: u64 = 64;
    pub const PUT: u64 = 67;
    pub const REMOVE_BY_KEY: u64 = 76;
    pub const REMOVE_BY_KEY_INTERVAL: u64 = 84;
    pub const SIZE: u64 = 96;
    pub const GET_BY_KEY: u64 = 97;
    pub const GET_BY_KEY_INTERVAL: u64 = 103;
    pub const GET_BY_INDEX_RANGE: u64 = 104;
}

const RETURN_KEY: i64 = 6;

#[derive(Clone, Debug)]
enum MapOp {
    Put(i64, i64),
    Remove(i64),
    RemoveInterval(i64, i64),
    Get(i64),
    KeysInInterval(i64, i64),
    KeysByIndex(i64, i64),
    Size,
}

fn map_op() -> impl Strategy<Value = MapOp> {
    let key = -15i64..15;
    prop_oneof![
        5 => (key.clone(), -100i64..100).prop_map(|(k, v)| MapOp::Put(k, v)),
        2 => key.clone().prop_map(MapOp::Remove),
        1 => (key.clone(), key.clone()).prop_map(|(a, b)| MapOp::RemoveInterval(a, b)),
        2 => key.clone().prop_map(MapOp::Get),
        1 => (key.clone(), key).prop_map(|(a, b)| MapOp::KeysInInterval(a, b)),
        1 => (-8i64..8, -1i64..6).prop_map(|(i, c)| MapOp::KeysByIndex(i, c)),
        1 => Just(MapOp::Size),
    ]
}

/// A map's pairs, in stored order.
fn map_pairs(bytes: &[u8]) -> Vec<(i64, i64)> {
    let map = value::Map::parse(bytes).expect("a map");
    map.pairs
        .iter()
        .map(|(k, v)| {
            let key = read_element(&mut Reader::new(k)).expect("integer key");
            let value = read_element(&mut Reader::new(v)).expect("integer value");
            (key, value)
        })
        .collect()
}

fn ints_of_list(result: &Option<(u8, Vec<u8>)>) -> Vec<i64> {
    match result {
        Some((particle::LIST, bytes)) => list_elements(bytes)
            .into_iter()
            .map(|item| item.expect("integer"))
            .collect(),
        other => panic!("expected a list, got {other:?}"),
    }
}

fn map_payload(op: &MapOp) -> (Vec<u8>, bool) {
    use map_op::*;
    match *op {
        MapOp::Put(k, v) => (payload(PUT, &[int(k), int(v)]), true),
        MapOp::Remove(k) => (payload(REMOVE_BY_KEY, &[int(0), int(k)]), true),
        MapOp::RemoveInterval(a, b) => (
            payload(
                REMOVE_BY_KEY_INTERVAL,
                &[int(RETURN_COUNT), int(a.min(b)), int(a.max(b))],
            ),
            true,
        ),
        MapOp::Get(k) => (payload(GET_BY_KEY, &[int(RETURN_VALUE), int(k)]), false),
        MapOp::KeysInInterval(a, b) => (
            payload(
                GET_BY_KEY_INTERVAL,
                &[int(RETURN_KEY), int(a.min(b)), int(a.max(b))],
            ),
            false,
        ),
        MapOp::KeysByIndex(i, c) => (
            payload(GET_BY_INDEX_RANGE, &[int(RETURN_KEY), int(i), int(c)]),
            false,
        ),
        MapOp::Size => (payload(SIZE, &[]), false),
    }
}

/// The model: pairs in insertion order (an unordered map keeps the order
/// keys arrived in; a key-ordered one is read back sorted).
#[derive(Default)]
struct MapModel {
    pairs: Vec<(i64, i64)>,
    key_ordered: bool,
}

impl MapModel {
    fn sorted(&self) -> BTreeMap<i64, i64> {
        self.pairs.iter().copied().collect()
    }

    fn stored(&self) -> Vec<(i64, i64)> {
        if self.key_ordered {
            self.sorted().into_iter().collect()
        } else {
            self.pairs.clone()
        }
    }

    /// Applies an op; gives what it answers (`None`: no result).
    fn apply(&mut self, op: &MapOp) -> Option<Answer> {
        match *op {
            MapOp::Put(k, v) => {
                match self.pairs.iter_mut().find(|(key, _)| *key == k) {
                    Some(pair) => pair.1 = v,
                    None => self.pairs.push((k, v)),
                }
                Some(Answer::Int(self.pairs.len() as i64))
            }
            MapOp::Remove(k) => {
                self.pairs.retain(|(key, _)| *key != k);
                None
            }
            MapOp::RemoveInterval(a, b) => {
                let range = a.min(b)..a.max(b);
                let before = self.pairs.len();
                self.pairs.retain(|(key, _)| !range.contains(key));
                Some(Answer::Int((before - self.pairs.len()) as i64))
            }
            MapOp::Get(k) => self
                .pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| Answer::Int(*v)),
            MapOp::KeysInInterval(a, b) => {
                let range = a.min(b)..a.max(b);
                // Found in stored order (key order when key-ordered).
                let keys = self
                    .stored()
                    .into_iter()
                    .map(|(key, _)| key)
                    .filter(|key| range.contains(key))
                    .map(Some)
                    .collect();
                Some(Answer::List(keys))
            }
            MapOp::KeysByIndex(i, c) => {
                // A map's index is its key order; the whole map comes back
                // as stored.
                let keys: Vec<i64> = self.sorted().into_keys().collect();
                let (low, high) = model_range(i, c, keys.len());
                if high - low == keys.len() {
                    let stored = self.stored().into_iter().map(|(key, _)| Some(key));
                    return Some(Answer::List(stored.collect()));
                }
                Some(Answer::List(
                    keys[low..high].iter().copied().map(Some).collect(),
                ))
            }
            MapOp::Size => Some(Answer::Int(self.pairs.len() as i64)),
        }
    }
}

fn run_map(key_ordered: bool, ops: &[MapOp]) -> Result<(), TestCaseError> {
    let mut model = MapModel {
        key_ordered,
        ..MapModel::default()
    };
    let mut bin: Option<Vec<u8>> = None;
    if key_ordered {
        let outcome =
            cdt::execute(None, &payload(map_op::SET_TYPE, &[int(1)]), true).expect("set type");
        bin = outcome.bin.map(|(_, bytes)| bytes);
    }
    for op in ops {
        let (payload, modify) = map_payload(op);
        let current = bin.as_deref().map(|bytes| (particle::MAP, bytes));
        if current.is_none() && !matches!(op, MapOp::Put(..)) {
            // On a missing bin only a put does anything.
            let outcome = cdt::execute(None, &payload, modify)
                .map_err(|code| TestCaseError::fail(format!("{op:?}: {code:?}")))?;
            prop_assert_eq!(outcome, cdt::Outcome::default(), "{:?}", op);
            continue;
        }
        let expected = model.apply(op);
        let outcome = cdt::execute(current, &payload, modify)
            .map_err(|code| TestCaseError::fail(format!("{op:?}: {code:?}")))?;
        let answer = match (&expected, &outcome.result) {
            (_, None) => None,
            (Some(Answer::List(_)), result) => Some(Answer::List(
                ints_of_list(result).into_iter().map(Some).collect(),
            )),
            (_, result) => Some(Answer::Int(int_result(result))),
        };
        prop_assert_eq!(answer, expected, "{:?}", op);
        if let Some((particle_type, bytes)) = outcome.bin {
            prop_assert_eq!(particle_type, particle::MAP);
            bin = Some(bytes);
        }
        let stored = bin.as_deref().map(map_pairs).unwrap_or_default();
        prop_assert_eq!(&stored, &model.stored(), "after {:?}", op);
        if let Some(bytes) = &bin {
            prop_assert_eq!(
                value::Map::parse(bytes).expect("map").is_key_ordered(),
                key_ordered
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn unordered_maps_keep_insertion_order(ops in prop::collection::vec(map_op(), 1..40)) {
        run_map(false, &ops)?;
    }

    #[test]
    fn key_ordered_maps_stay_ordered(ops in prop::collection::vec(map_op(), 1..40)) {
        run_map(true, &ops)?;
    }
}

// ------------------------------------------------------------ bits

mod bit_op {
    pub const RESIZE: u64 = 0;
    pub const INSERT: u64 = 1;
    pub const REMOVE: u64 = 2;
    pub const SET: u64 = 3;
    pub const OR: u64 = 4;
    pub const XOR: u64 = 5;
    pub const AND: u64 = 6;
    pub const NOT: u64 = 7;
    pub const GET: u64 = 50;
    pub const COUNT: u64 = 51;
}

/// A msgpack blob as clients send it: the particle type byte first.
fn blob(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0xc4, bytes.len() as u8 + 1, particle::BLOB];
    out.extend_from_slice(bytes);
    out
}

fn to_bits(bytes: &[u8]) -> Vec<bool> {
    bytes
        .iter()
        .flat_map(|byte| (0..8).rev().map(move |i| byte >> i & 1 == 1))
        .collect()
}

fn to_bytes(bits: &[bool]) -> Vec<u8> {
    bits.chunks(8)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u8, |byte, (i, &bit)| byte | (u8::from(bit) << (7 - i)))
        })
        .collect()
}

#[derive(Clone, Debug)]
enum BitOp {
    /// Offset (bits), size (bits), operand bytes, which combinator.
    Combine(u64, i64, i64, Vec<u8>),
    Not(i64, i64),
    Insert(i64, Vec<u8>),
    Remove(i64, i64),
    Resize(i64),
    Get(i64, i64),
    Count(i64, i64),
}

fn bit_op() -> impl Strategy<Value = BitOp> {
    let offset = -40i64..40;
    let size = 1i64..24;
    let operand = prop::collection::vec(any::<u8>(), 1..4);
    prop_oneof![
        4 => (prop::sample::select(vec![bit_op::SET, bit_op::OR, bit_op::XOR, bit_op::AND]),
              offset.clone(), size.clone(), operand.clone())
            .prop_map(|(code, o, s, v)| BitOp::Combine(code, o, s, v)),
        1 => (offset.clone(), size.clone()).prop_map(|(o, s)| BitOp::Not(o, s)),
        1 => (-6i64..6, operand).prop_map(|(o, v)| BitOp::Insert(o, v)),
        1 => (-6i64..6, 1i64..4).prop_map(|(o, s)| BitOp::Remove(o, s)),
        1 => (0i64..8).prop_map(BitOp::Resize),
        2 => (offset.clone(), size.clone()).prop_map(|(o, s)| BitOp::Get(o, s)),
        2 => (offset, size).prop_map(|(o, s)| BitOp::Count(o, s)),
    ]
}

/// The model's answer to a bit op: the new bits, a read's answer, or a
/// result code.
enum BitAnswer {
    Bits(Vec<bool>),
    Read(Vec<bool>),
    Count(i64),
}

/// A bit range `offset..offset + size` inside `len` bits (a negative
/// offset counts from the end): a start before the first bit is a bad
/// parameter, an end past the last one is not applicable.
fn bit_range(offset: i64, size: i64, len: usize) -> Result<(usize, usize), ResultCode> {
    let start = if offset < 0 {
        if offset.unsigned_abs() > len as u64 {
            return Err(ResultCode::Parameter);
        }
        len as i64 + offset
    } else {
        offset
    };
    if start + size > len as i64 {
        return Err(ResultCode::OpNotApplicable);
    }
    Ok((start as usize, (start + size) as usize))
}

/// A byte offset (insert, remove) from the start or, negative, the end.
fn byte_offset(offset: i64, bytes: usize) -> Result<usize, ResultCode> {
    let at = if offset < 0 {
        bytes as i64 + offset
    } else {
        offset
    };
    usize::try_from(at).map_err(|_| ResultCode::Parameter)
}

fn bit_model(bits: &[bool], op: &BitOp) -> Result<BitAnswer, ResultCode> {
    let len = bits.len();
    Ok(match op {
        BitOp::Combine(code, offset, size, operand) => {
            let operand = to_bits(operand);
            // The operand must hold `size` bits.
            if *size as usize > operand.len() {
                return Err(ResultCode::Parameter);
            }
            let (low, high) = bit_range(*offset, *size, len)?;
            let mut out = bits.to_vec();
            for (i, bit) in out[low..high].iter_mut().enumerate() {
                let with = operand[i];
                *bit = match *code {
                    bit_op::SET => with,
                    bit_op::OR => *bit | with,
                    bit_op::XOR => *bit ^ with,
                    _ => *bit & with,
                };
            }
            BitAnswer::Bits(out)
        }
        BitOp::Not(offset, size) => {
            let (low, high) = bit_range(*offset, *size, len)?;
            let mut out = bits.to_vec();
            for bit in &mut out[low..high] {
                *bit = !*bit;
            }
            BitAnswer::Bits(out)
        }
        BitOp::Insert(offset, operand) => {
            let at = byte_offset(*offset, len / 8)?;
            let mut out = to_bytes(bits);
            if at > out.len() {
                out.resize(at, 0);
            }
            let tail = out.split_off(at);
            out.extend_from_slice(operand);
            out.extend_from_slice(&tail);
            BitAnswer::Bits(to_bits(&out))
        }
        BitOp::Remove(offset, size) => {
            let bytes = len / 8;
            let at = byte_offset(*offset, bytes)?;
            // Removing past the end is a bad parameter.
            if at + *size as usize > bytes {
                return Err(ResultCode::Parameter);
            }
            let mut out = to_bytes(bits);
            out.drain(at..at + *size as usize);
            BitAnswer::Bits(to_bits(&out))
        }
        BitOp::Resize(bytes) => {
            let mut out = to_bytes(bits);
            out.resize(*bytes as usize, 0);
            BitAnswer::Bits(to_bits(&out))
        }
        BitOp::Get(offset, size) => {
            let (low, high) = bit_range(*offset, *size, len)?;
            BitAnswer::Read(bits[low..high].to_vec())
        }
        BitOp::Count(offset, size) => {
            let (low, high) = bit_range(*offset, *size, len)?;
            BitAnswer::Count(bits[low..high].iter().filter(|bit| **bit).count() as i64)
        }
    })
}

fn bit_payload(op: &BitOp) -> (Vec<u8>, bool) {
    match op {
        BitOp::Combine(code, o, s, v) => (payload(*code, &[int(*o), int(*s), blob(v)]), true),
        BitOp::Not(o, s) => (payload(bit_op::NOT, &[int(*o), int(*s)]), true),
        BitOp::Insert(o, v) => (payload(bit_op::INSERT, &[int(*o), blob(v)]), true),
        BitOp::Remove(o, s) => (payload(bit_op::REMOVE, &[int(*o), int(*s)]), true),
        BitOp::Resize(b) => (payload(bit_op::RESIZE, &[int(*b)]), true),
        BitOp::Get(o, s) => (payload(bit_op::GET, &[int(*o), int(*s)]), false),
        BitOp::Count(o, s) => (payload(bit_op::COUNT, &[int(*o), int(*s)]), false),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn bits_follow_a_vec_of_bools(
        start in prop::collection::vec(any::<u8>(), 1..5),
        ops in prop::collection::vec(bit_op(), 1..30),
    ) {
        let mut blob_bytes = start;
        for op in &ops {
            let expected = bit_model(&to_bits(&blob_bytes), op);
            let (payload, modify) = bit_payload(op);
            let current = (particle::BLOB, blob_bytes.as_slice());
            if modify {
                let got = bits::modify(Some(current), &payload);
                match expected {
                    Ok(BitAnswer::Bits(bits)) => {
                        let new = got.map_err(|code| TestCaseError::fail(format!("{op:?}: {code:?}")))?;
                        // No change answers `None`.
                        let new = new.unwrap_or_else(|| blob_bytes.clone());
                        prop_assert_eq!(to_bits(&new), bits, "{:?}", op);
                        blob_bytes = new;
                    }
                    Err(code) => prop_assert_eq!(got, Err(code), "{:?}", op),
                    Ok(_) => unreachable!("modify ops answer bits"),
                }
            } else {
                let got = bits::read(current, &payload);
                match expected {
                    Ok(BitAnswer::Read(wanted)) => {
                        let (particle_type, bytes) = got
                            .map_err(|code| TestCaseError::fail(format!("{op:?}: {code:?}")))?;
                        prop_assert_eq!(particle_type, particle::BLOB);
                        prop_assert_eq!(bytes.len(), wanted.len().div_ceil(8));
                        let mut padded = wanted.clone();
                        padded.resize(bytes.len() * 8, false);
                        prop_assert_eq!(to_bits(&bytes), padded, "{:?}", op);
                    }
                    Ok(BitAnswer::Count(count)) => {
                        let answer = got
                            .map_err(|code| TestCaseError::fail(format!("{op:?}: {code:?}")))?;
                        prop_assert_eq!(int_result(&Some(answer)), count, "{:?}", op);
                    }
                    Err(code) => prop_assert_eq!(got, Err(code), "{:?}", op),
                    Ok(BitAnswer::Bits(_)) => unreachable!("reads answer values"),
                }
            }
        }
    }
}

// ------------------------------------------------------------ HyperLogLog

/// A list of integer elements.
fn elements(values: impl Iterator<Item = i64>) -> Vec<u8> {
    let items: Vec<Vec<u8>> = values.map(int).collect();
    array(&items)
}

fn hll_add(sketch: Option<&[u8]>, values: impl Iterator<Item = i64>, index_bits: i64) -> Vec<u8> {
    let bin = sketch.map(|bytes| (particle::HLL, bytes));
    let (new, _) = hll::modify(
        bin,
        &payload(1, &[elements(values), int(index_bits), int(0)]),
    )
    .expect("add");
    new.unwrap_or_else(|| sketch.expect("a sketch").to_vec())
}

fn hll_read(sketch: &[u8], code: u64, args: &[Vec<u8>]) -> (u8, Vec<u8>) {
    hll::read((particle::HLL, sketch), &payload(code, args)).expect("read")
}

fn hll_count(sketch: &[u8]) -> u64 {
    let (particle_type, bytes) = hll_read(sketch, 50, &[]);
    assert_eq!(particle_type, particle::INTEGER);
    u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

/// A sketch as a list argument of union and intersection ops.
fn sketches(sketch: &[u8]) -> Vec<u8> {
    let mut one = vec![0xc6];
    one.extend_from_slice(&(sketch.len() as u32 + 1).to_be_bytes());
    one.push(particle::HLL);
    one.extend_from_slice(sketch);
    array(&[one])
}

/// HyperLogLog's relative standard error for `2^index_bits` registers.
fn standard_error(index_bits: i64) -> f64 {
    1.04 / ((1u64 << index_bits) as f64).sqrt()
}

/// Whether `estimate` is within 5 standard errors (plus 3 for the
/// smallest sets) of `truth`.
fn close(estimate: u64, truth: u64, index_bits: i64) -> bool {
    let allowed = 5.0 * standard_error(index_bits) * truth as f64 + 3.0;
    (estimate as f64 - truth as f64).abs() <= allowed
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn hll_counts_within_the_expected_error(
        values in prop::collection::btree_set(any::<i64>(), 0..3000),
        repeats in 1usize..3,
        index_bits in 8i64..14,
    ) {
        let truth = values.len() as u64;
        // Adding the same elements again changes nothing.
        let mut sketch = hll_add(None, values.iter().copied(), index_bits);
        for _ in 1..repeats {
            sketch = hll_add(Some(&sketch), values.iter().copied(), index_bits);
        }
        let estimate = hll_count(&sketch);
        prop_assert!(close(estimate, truth, index_bits), "{} of {}", estimate, truth);
    }

    #[test]
    fn hll_union_and_intersection_estimates(
        shared in 0u64..1500,
        only_a in 0u64..1500,
        only_b in 0u64..1500,
        seed in any::<i64>(),
    ) {
        let index_bits = 12;
        let a: BTreeSet<i64> = (0..shared + only_a).map(|i| seed.wrapping_add(i as i64)).collect();
        let b: BTreeSet<i64> = (0..shared)
            .chain(shared + only_a..shared + only_a + only_b)
            .map(|i| seed.wrapping_add(i as i64))
            .collect();
        let first = hll_add(None, a.iter().copied(), index_bits);
        let second = hll_add(None, b.iter().copied(), index_bits);
        let union_truth = a.union(&b).count() as u64;
        let (_, union) = hll_read(&first, 52, &[sketches(&second)]);
        let union = u64::from_be_bytes(union.try_into().expect("8 bytes"));
        prop_assert!(close(union, union_truth, index_bits), "union {} of {}", union, union_truth);
        // The union sketch counts what union_count answers.
        let (_, union_sketch) = hll_read(&first, 51, &[sketches(&second)]);
        prop_assert_eq!(hll_count(&union_sketch), union);
        // Intersection by inclusion–exclusion: its error is that of the
        // three counts it is made of.
        let (_, intersect) = hll_read(&first, 53, &[sketches(&second)]);
        let intersect = u64::from_be_bytes(intersect.try_into().expect("8 bytes"));
        let allowed = 5.0 * standard_error(index_bits)
            * (a.len() + b.len() + union_truth as usize) as f64 + 3.0;
        prop_assert!(
            (intersect as f64 - shared as f64).abs() <= allowed,
            "intersect {} of {} (allowed {})", intersect, shared, allowed
        );
    }
}

// ------------------------------------------------------------ arithmetic

/// A record with no bins: arithmetic needs none.
struct Empty(Digest);

impl Record for Empty {
    fn bin(&self, _: &[u8]) -> Option<(u8, &[u8])> {
        None
    }

    fn digest(&self) -> &Digest {
        &self.0
    }

    fn key(&self) -> Option<(u8, &[u8])> {
        None
    }

    fn last_update_ms(&self) -> u64 {
        0
    }

    fn void_time(&self) -> u32 {
        0
    }

    fn set_name(&self) -> Option<&str> {
        None
    }

    fn size_bytes(&self) -> usize {
        0
    }
}

/// Expression codes of the arithmetic operators.
mod arith {
    pub const ADD: i64 = 20;
    pub const SUB: i64 = 21;
    pub const MUL: i64 = 22;
    pub const DIV: i64 = 23;
    pub const MOD: i64 = 26;
    pub const ABS: i64 = 27;
}

fn evaluate(expression: &[u8]) -> Evaluated {
    let parsed = expression::parse(expression).expect("parses");
    expression::evaluate(&parsed, &Empty(Digest([0; 20])), 0)
}

fn float_literal(value: f64) -> Vec<u8> {
    value::float_bytes(value)
}

fn as_int(evaluated: Evaluated) -> Option<i64> {
    match evaluated {
        Evaluated::Value(particle::INTEGER, bytes) => {
            Some(i64::from_be_bytes(bytes.try_into().expect("8 bytes")))
        }
        Evaluated::Unknown => None,
        other => panic!("unexpected {other:?}"),
    }
}

fn as_float(evaluated: Evaluated) -> Option<f64> {
    match evaluated {
        Evaluated::Value(particle::FLOAT, bytes) => {
            Some(f64::from_be_bytes(bytes.try_into().expect("8 bytes")))
        }
        Evaluated::Unknown => None,
        other => panic!("unexpected {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Expression arithmetic on integers: an overflow (or a division by
    /// zero) is unknown, never a wrapped value.
    #[test]
    fn integer_expressions_are_checked(a in any::<i64>(), b in any::<i64>()) {
        let pair = |code: i64| array(&[int(code), int(a), int(b)]);
        prop_assert_eq!(as_int(evaluate(&pair(arith::ADD))), a.checked_add(b));
        prop_assert_eq!(as_int(evaluate(&pair(arith::SUB))), a.checked_sub(b));
        prop_assert_eq!(as_int(evaluate(&pair(arith::MUL))), a.checked_mul(b));
        prop_assert_eq!(as_int(evaluate(&pair(arith::DIV))), a.checked_div(b));
        prop_assert_eq!(as_int(evaluate(&pair(arith::MOD))), a.checked_rem(b));
        prop_assert_eq!(as_int(evaluate(&array(&[int(arith::ABS), int(a)]))), a.checked_abs());
    }

    /// Float arithmetic follows IEEE 754 (no overflow check: infinity is
    /// a value).
    #[test]
    fn float_expressions_are_ieee(a in -1e300f64..1e300, b in -1e300f64..1e300) {
        let pair = |code: i64| array(&[int(code), float_literal(a), float_literal(b)]);
        prop_assert_eq!(as_float(evaluate(&pair(arith::ADD))), Some(a + b));
        prop_assert_eq!(as_float(evaluate(&pair(arith::SUB))), Some(a - b));
        prop_assert_eq!(as_float(evaluate(&pair(arith::MUL))), Some(a * b));
        // An integer and a float in one operator are refused when parsed.
        prop_assert!(expression::parse(&array(&[int(arith::ADD), int(1), float_literal(a)])).is_err());
    }

    /// INCR on a bin wraps, as the server's `integer_incr_from_wire`
    /// does; a float INCR adds.
    #[test]
    fn increment_ops_wrap(a in any::<i64>(), b in any::<i64>(), x in -1e300f64..1e300, y in -1e300f64..1e300) {
        let current = ops::WorkBin {
            name: b"n",
            particle_type: particle::INTEGER,
            value: Cow::Owned(a.to_be_bytes().to_vec()),
        };
        prop_assert_eq!(
            ops::increment(Some(&current), particle::INTEGER, &b.to_be_bytes()),
            Ok((particle::INTEGER, a.wrapping_add(b).to_be_bytes().to_vec()))
        );
        let current = ops::WorkBin {
            name: b"f",
            particle_type: particle::FLOAT,
            value: Cow::Owned(x.to_be_bytes().to_vec()),
        };
        prop_assert_eq!(
            ops::increment(Some(&current), particle::FLOAT, &y.to_be_bytes()),
            Ok((particle::FLOAT, (x + y).to_be_bytes().to_vec()))
        );
    }
}

// ------------------------------------------------------------ value order

/// A msgpack value as the model sees it.
#[derive(Clone, Debug)]
enum Model {
    Nil,
    Bool(bool),
    Int(i64),
    Str(Vec<u8>),
    Bytes(Vec<u8>),
    Float(f64),
    List(Vec<Model>),
    Map(Vec<(Model, Model)>),
}

impl Model {
    /// Aerospike's type order: nil < bool < integer < string < list < map
    /// < bytes < double.
    fn type_rank(&self) -> u8 {
        match self {
            Model::Nil => 0,
            Model::Bool(_) => 1,
            Model::Int(_) => 2,
            Model::Str(_) => 3,
            Model::List(_) => 4,
            Model::Map(_) => 5,
            Model::Bytes(_) => 6,
            Model::Float(_) => 7,
        }
    }

    /// The model order: by type, then by value; lists element by element
    /// then by length; maps by size, then pair by pair in stored order.
    fn order(&self, other: &Model) -> Ordering {
        match self.type_rank().cmp(&other.type_rank()) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
        match (self, other) {
            (Model::Bool(a), Model::Bool(b)) => a.cmp(b),
            (Model::Int(a), Model::Int(b)) => a.cmp(b),
            (Model::Str(a), Model::Str(b)) | (Model::Bytes(a), Model::Bytes(b)) => a.cmp(b),
            (Model::Float(a), Model::Float(b)) => a.partial_cmp(b).expect("no NaN"),
            (Model::List(a), Model::List(b)) => {
                for (x, y) in a.iter().zip(b) {
                    match x.order(y) {
                        Ordering::Equal => {}
                        unequal => return unequal,
                    }
                }
                a.len().cmp(&b.len())
            }
            (Model::Map(a), Model::Map(b)) => {
                match a.len().cmp(&b.len()) {
                    Ordering::Equal => {}
                    unequal => return unequal,
                }
                for ((xk, xv), (yk, yv)) in a.iter().zip(b) {
                    match xk.order(yk).then_with(|| xv.order(yv)) {
                        Ordering::Equal => {}
                        unequal => return unequal,
                    }
                }
                Ordering::Equal
            }
            _ => Ordering::Equal,
        }
    }

    /// Msgpack as clients send it, integers in one of the encodings that
    /// hold them (`width` picks which), strings and bytes with their
    /// particle type first.
    fn encode(&self, width: u8, out: &mut Vec<u8>) {
        match self {
            Model::Nil => out.push(0xc0),
            Model::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Model::Int(v) => encode_int(*v, width, out),
            Model::Str(bytes) => {
                value::write_typed_bytes(out, value::Raw::Str, particle::STRING, bytes)
            }
            Model::Bytes(bytes) => {
                value::write_typed_bytes(out, value::Raw::Bin, particle::BLOB, bytes)
            }
            Model::Float(v) => out.extend_from_slice(&value::float_bytes(*v)),
            Model::List(items) => {
                value::write_array_header(out, items.len());
                for item in items {
                    item.encode(width.rotate_left(1), out);
                }
            }
            Model::Map(pairs) => {
                value::write_map_header(out, pairs.len());
                for (k, v) in pairs {
                    k.encode(width.rotate_left(1), out);
                    v.encode(width.rotate_left(2), out);
                }
            }
        }
    }
}

/// An integer in the smallest encoding, or (by `width`) a wider one.
fn encode_int(v: i64, width: u8, out: &mut Vec<u8>) {
    match width % 3 {
        0 => value::write_int(out, v),
        1 if v >= 0 => {
            out.push(0xcf);
            out.extend_from_slice(&(v as u64).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

fn model() -> impl Strategy<Value = Model> {
    let leaf = prop_oneof![
        Just(Model::Nil),
        any::<bool>().prop_map(Model::Bool),
        prop_oneof![any::<i64>(), -3i64..3].prop_map(Model::Int),
        prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 0..4)
            .prop_map(Model::Str),
        prop::collection::vec(0u8..3, 0..3).prop_map(Model::Bytes),
        prop_oneof![-2.0f64..2.0, Just(0.0), Just(1.5)].prop_map(Model::Float),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Model::List),
            prop::collection::vec((inner.clone(), inner), 0..3).prop_map(Model::Map),
        ]
    })
}

fn encoded(model: &Model, width: u8) -> Vec<u8> {
    let mut out = Vec::new();
    model.encode(width, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The value order equals the model order, whatever the integer
    /// encodings, so it is a total order and "equal" means equal values.
    #[test]
    fn value_order_is_the_model_order(a in model(), b in model(), wa in any::<u8>(), wb in any::<u8>()) {
        let x = encoded(&a, wa);
        let y = encoded(&b, wb);
        let order = value::compare(&x, &y).expect("compares");
        prop_assert_eq!(order, a.order(&b), "{:?} vs {:?}", a, b);
        prop_assert_eq!(value::compare(&y, &x).expect("compares"), order.reverse());
        // A value equals itself in any encoding.
        prop_assert_eq!(value::compare(&x, &encoded(&a, wa.wrapping_add(1))), Ok(Ordering::Equal));
    }

    #[test]
    fn value_order_is_transitive(a in model(), b in model(), c in model()) {
        let (x, y, z) = (encoded(&a, 0), encoded(&b, 1), encoded(&c, 2));
        let xy = value::compare(&x, &y).expect("compares");
        let yz = value::compare(&y, &z).expect("compares");
        let xz = value::compare(&x, &z).expect("compares");
        if xy != Ordering::Greater && yz != Ordering::Greater {
            prop_assert_ne!(xz, Ordering::Greater);
        }
        if xy == Ordering::Equal && yz == Ordering::Equal {
            prop_assert_eq!(xz, Ordering::Equal);
        }
    }
}
