//! Op semantics through `execute`, and hostile payloads.

use super::value::{int_bytes, List, Map};
use super::*;
use proptest::prelude::*;

fn s(text: &str) -> Vec<u8> {
    let mut out = vec![0xa0 | (text.len() as u8 + 1), particle::STRING];
    out.extend_from_slice(text.as_bytes());
    out
}

/// `[code, args...]`
fn op(code: u64, args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    value::write_array_header(&mut out, args.len() + 1);
    value::write_int(&mut out, code as i64);
    for arg in args {
        out.extend_from_slice(arg);
    }
    out
}

fn list_of(items: &[i64]) -> Vec<u8> {
    let items: Vec<Vec<u8>> = items.iter().map(|&i| int_bytes(i)).collect();
    value::encode_items(items.iter().map(|i| i.as_slice()))
}

fn ints(particle: &Particle) -> Vec<i64> {
    let list = List::parse(&particle.1).expect("list");
    list.items
        .iter()
        .map(|item| match value::number(item) {
            Some(value::Number::Int(i)) => i,
            _ => panic!("not an int"),
        })
        .collect()
}

fn run(bin: &[u8], payload: &[u8], modify: bool) -> Result<Outcome, ResultCode> {
    let particle_type = match value::container_kind(bin) {
        Some(false) => particle::MAP,
        _ => particle::LIST,
    };
    execute(Some((particle_type, bin)), payload, modify)
}

#[test]
fn append_to_missing_bin_creates_list() {
    let outcome = execute(None, &op(1, &[&int_bytes(7)]), true).expect("append");
    assert_eq!(outcome.bin, Some((particle::LIST, list_of(&[7]))));
    assert_eq!(outcome.result, Some(value::int_particle(1)));
}

#[test]
fn reads_on_missing_bin_answer_nothing() {
    assert_eq!(execute(None, &op(16, &[]), false), Ok(Outcome::default()));
}

#[test]
fn wrong_types_and_op_classes() {
    let bin = list_of(&[1, 2, 3]);
    assert_eq!(
        execute(Some((particle::INTEGER, &[0; 8])), &op(16, &[]), false),
        Err(ResultCode::IncompatibleType)
    );
    // A map op on a list bin.
    assert_eq!(
        run(&bin, &op(96, &[]), false),
        Err(ResultCode::IncompatibleType)
    );
    // A modify code under CDT_READ.
    assert_eq!(
        run(&bin, &op(1, &[&int_bytes(1)]), false),
        Err(ResultCode::Parameter)
    );
    assert_eq!(
        run(&bin, &op(17, &[&int_bytes(3)]), false),
        Err(ResultCode::OpNotApplicable)
    );
}

#[test]
fn list_selection_and_return_types() {
    let bin = list_of(&[5, 1, 4, 1, 3]);
    // get_by_rank_range(0, 2) values come back in rank order.
    let got = run(
        &bin,
        &op(26, &[&int_bytes(7), &int_bytes(0), &int_bytes(2)]),
        false,
    )
    .expect("ok");
    assert_eq!(ints(&got.result.expect("result")), vec![1, 1]);
    // Indexes of value 1.
    let got = run(&bin, &op(22, &[&int_bytes(1), &int_bytes(1)]), false).expect("ok");
    assert_eq!(ints(&got.result.expect("result")), vec![1, 3]);
    // Inverted count of value interval [3, 5).
    let got = run(
        &bin,
        &op(25, &[&int_bytes(5 | 0x10000), &int_bytes(3), &int_bytes(5)]),
        false,
    )
    .expect("ok");
    assert_eq!(got.result, Some(value::int_particle(3)));
    // Relative rank: values >= 4 from rank 0.
    let got = run(
        &bin,
        &op(27, &[&int_bytes(7), &int_bytes(4), &int_bytes(0)]),
        false,
    )
    .expect("ok");
    assert_eq!(ints(&got.result.expect("result")), vec![4, 5]);
    // Remove by value list leaves [5, 4].
    let got = run(&bin, &op(36, &[&int_bytes(0), &list_of(&[1, 3])]), true).expect("ok");
    assert_eq!(got.bin, Some((particle::LIST, list_of(&[5, 4]))));
}

#[test]
fn insert_pads_and_bounded_refuses() {
    let bin = list_of(&[1]);
    let got = run(&bin, &op(3, &[&int_bytes(3), &int_bytes(9)]), true).expect("ok");
    assert_eq!(got.bin.expect("bin").1, vec![0x94, 1, 0xc0, 0xc0, 9]);
    assert_eq!(
        run(
            &bin,
            &op(3, &[&int_bytes(3), &int_bytes(9), &int_bytes(2)]),
            true
        ),
        Err(ResultCode::OpNotApplicable)
    );
    assert_eq!(
        run(&bin, &op(3, &[&int_bytes(-5), &int_bytes(9)]), true),
        Err(ResultCode::OpNotApplicable)
    );
    assert_eq!(
        run(&bin, &op(3, &[&int_bytes(1 << 40), &int_bytes(9)]), true),
        Err(ResultCode::RecordTooBig)
    );
}

#[test]
fn add_unique_flags() {
    let bin = list_of(&[1, 2]);
    let items = list_of(&[2, 3]);
    assert_eq!(
        run(&bin, &op(2, &[&items, &int_bytes(0), &int_bytes(1)]), true),
        Err(ResultCode::ElementExists)
    );
    let got = run(
        &bin,
        &op(2, &[&items, &int_bytes(0), &int_bytes(1 | 4)]),
        true,
    )
    .expect("ok");
    assert_eq!(got.bin, None, "no-fail without partial changes nothing");
    let got = run(
        &bin,
        &op(2, &[&items, &int_bytes(0), &int_bytes(1 | 4 | 8)]),
        true,
    )
    .expect("ok");
    assert_eq!(got.bin, Some((particle::LIST, list_of(&[1, 2, 3]))));
}

#[test]
fn ordered_list_keeps_order() {
    let outcome = execute(None, &op(0, &[&int_bytes(1)]), true).expect("set type");
    let bin = outcome.bin.expect("bin").1;
    let got = run(&bin, &op(2, &[&list_of(&[5, 1, 3])]), true).expect("append");
    let bin = got.bin.expect("bin").1;
    assert_eq!(bin, vec![0x94, 0xc7, 0x00, 0x01, 1, 3, 5]);
    assert_eq!(
        run(&bin, &op(3, &[&int_bytes(0), &int_bytes(1)]), true),
        Err(ResultCode::OpNotApplicable)
    );
}

#[test]
fn map_put_orders_and_flags() {
    let mut bin = Map {
        flags: value::MAP_K_ORDERED,
        pairs: Vec::new(),
    }
    .encode();
    for key in ["c", "a", "b"] {
        let got = run(&bin, &op(67, &[&s(key), &int_bytes(1)]), true).expect("put");
        bin = got.bin.expect("bin").1;
    }
    let map = Map::parse(&bin).expect("map");
    let keys: Vec<&[u8]> = map.pairs.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(
        keys,
        vec![s("a").as_slice(), s("b").as_slice(), s("c").as_slice()]
    );
    assert_eq!(
        run(
            &bin,
            &op(67, &[&s("a"), &int_bytes(2), &int_bytes(1), &int_bytes(1)]),
            true
        ),
        Err(ResultCode::ElementExists)
    );
    assert_eq!(
        run(
            &bin,
            &op(67, &[&s("z"), &int_bytes(2), &int_bytes(1), &int_bytes(2)]),
            true
        ),
        Err(ResultCode::ElementNotFound)
    );
    // get_by_key_interval ["a", "c") as key-value: preserve-order map.
    let got = run(&bin, &op(103, &[&int_bytes(8), &s("a"), &s("c")]), false).expect("ok");
    let result = got.result.expect("result");
    assert_eq!(result.0, particle::MAP);
    assert_eq!(&result.1[..4], &[0x83, 0xc7, 0x00, 0x08]);
}

#[test]
fn contexts_reach_and_create() {
    // {"a": [1, 2]}
    let mut inner = s("a");
    inner.extend_from_slice(&list_of(&[1, 2]));
    let mut bin = vec![0x81];
    bin.extend_from_slice(&inner);
    // [0xff, [0x22, "a"], [1, 3]] : append 3 inside bin["a"].
    let mut payload = vec![0x93, 0xcc, 0xff, 0x92, 0x22];
    payload.extend_from_slice(&s("a"));
    payload.extend_from_slice(&op(1, &[&int_bytes(3)]));
    let got = run(&bin, &payload, true).expect("ok");
    let mut expected = vec![0x81];
    expected.extend_from_slice(&s("a"));
    expected.extend_from_slice(&list_of(&[1, 2, 3]));
    assert_eq!(got.bin, Some((particle::MAP, expected)));
    // Missing key without create: 26; with create (0x22 | 0x40): added.
    let mut payload = vec![0x93, 0xcc, 0xff, 0x92, 0x22];
    payload.extend_from_slice(&s("b"));
    payload.extend_from_slice(&op(1, &[&int_bytes(3)]));
    assert_eq!(run(&bin, &payload, true), Err(ResultCode::OpNotApplicable));
    let mut payload = vec![0x93, 0xcc, 0xff, 0x92, 0x62];
    payload.extend_from_slice(&s("b"));
    payload.extend_from_slice(&op(1, &[&int_bytes(3)]));
    let got = run(&bin, &payload, true).expect("ok");
    let map = Map::parse(&got.bin.expect("bin").1)
        .expect("map")
        .pairs
        .len();
    assert_eq!(map, 2);
}

#[test]
fn ranges() {
    assert_eq!(multi_range(-2, 5, 4), (2, 2));
    assert_eq!(multi_range(-6, 3, 4), (0, 1));
    assert_eq!(multi_range(9, 3, 4), (4, 0));
    assert_eq!(single_index(-1, 3), Some(2));
    assert_eq!(single_index(-4, 3), None);
    assert_eq!(relative_range(-2, 3, 1), (0, 2));
}

fn arbitrary_msgpack() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        Just(vec![0xc0]),
        any::<i64>().prop_map(int_bytes),
        "[a-c]{0,3}".prop_map(|t| s(&t)),
        Just(vec![0xd4, 0xff, 0x00]),
        Just(vec![0xd4, 0xff, 0x01]),
        prop::collection::vec(any::<u8>(), 0..6),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5)
                .prop_map(|items| { value::encode_items(items.iter().map(|i| i.as_slice())) }),
            prop::collection::vec((inner.clone(), inner), 0..4).prop_map(|pairs| {
                value::encode_pairs(0, pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
            }),
        ]
    })
}

proptest! {
    #[test]
    fn hostile_payloads_never_panic(
        bin in arbitrary_msgpack(),
        code in prop_oneof![0u64..42, 64u64..112, Just(255u64)],
        args in prop::collection::vec(arbitrary_msgpack(), 0..5),
        raw in prop::collection::vec(any::<u8>(), 0..40),
        modify in any::<bool>(),
    ) {
        let arg_refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let payload = op(code, &arg_refs);
        for particle_type in [particle::LIST, particle::MAP] {
            let _ = execute(Some((particle_type, &bin)), &payload, modify);
            let _ = execute(Some((particle_type, &bin)), &raw, modify);
            let _ = execute(Some((particle_type, &raw)), &payload, modify);
        }
        let _ = execute(None, &payload, modify);
        // The same op behind a context.
        let mut wrapped = vec![0x93, 0xcc, 0xff, 0x92];
        wrapped.push(0x10 | (code as u8 % 4) | if modify { 0x40 } else { 0 });
        wrapped.extend_from_slice(args.first().map(|a| a.as_slice()).unwrap_or(&[0x00]));
        wrapped.extend_from_slice(&payload);
        let _ = execute(Some((particle::LIST, &bin)), &wrapped, modify);
        let _ = execute(None, &wrapped, modify);
    }
}
