//! Unit tests: the hash, register packing, the estimator, and hostile
//! operands.

use super::*;
use crate::cdt::value::{encode_items, int_bytes};
use proptest::prelude::*;

fn payload(code: i64, args: &[Vec<u8>]) -> Vec<u8> {
    let mut items = vec![int_bytes(code)];
    items.extend_from_slice(args);
    encode_items(items.iter().map(Vec::as_slice))
}

fn i(value: i64) -> Vec<u8> {
    int_bytes(value)
}

/// A list of string elements as clients send them (particle type first).
fn strings(values: &[&str]) -> Vec<u8> {
    let items: Vec<Vec<u8>> = values
        .iter()
        .map(|value| {
            let mut out = vec![0xa0 | (value.len() as u8 + 1), particle::STRING];
            out.extend_from_slice(value.as_bytes());
            out
        })
        .collect();
    encode_items(items.iter().map(Vec::as_slice))
}

fn sketch_arg(sketch: &[u8]) -> Vec<u8> {
    let mut out = vec![0xc6];
    out.extend_from_slice(&(sketch.len() as u32 + 1).to_be_bytes());
    out.push(particle::HLL);
    out.extend_from_slice(sketch);
    out
}

fn count(sketch: &[u8]) -> u64 {
    let (particle_type, bytes) = read((particle::HLL, sketch), &payload(50, &[])).expect("count");
    assert_eq!(particle_type, particle::INTEGER);
    u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

fn add_all(sketch: Option<&[u8]>, values: &[&str], index_bits: i64, minhash_bits: i64) -> Vec<u8> {
    let bin = sketch.map(|bytes| (particle::HLL, bytes));
    let (new, _) = modify(
        bin,
        &payload(1, &[strings(values), i(index_bits), i(minhash_bits)]),
    )
    .expect("add");
    new.expect("a sketch")
}

#[test]
fn murmur3_matches_the_reference() {
    assert_eq!(murmur3_x64_128(b""), (0, 0));
    assert_eq!(
        murmur3_x64_128(b"hello"),
        (0xcbd8_a7b3_41bd_9b02, 0x5b1e_906a_48ae_1d19)
    );
}

#[test]
fn registers_pack_most_significant_bit_first() {
    let mut sketch = Owned::new(4, 4);
    // 10-bit registers: register 1 covers bits 10..20.
    sketch.set_register(1, 0b11_0000_0001);
    assert_eq!(sketch.view().register(1), 0b11_0000_0001);
    assert_eq!(sketch.view().register(0), 0);
    assert_eq!(sketch.view().register(2), 0);
    assert_eq!(
        &sketch.bytes[HEADER_BYTES..HEADER_BYTES + 3],
        &[0, 0x30, 0x10]
    );
    // The last register ends at the last byte.
    sketch.set_register(15, 0x3ff);
    assert_eq!(sketch.bytes.last(), Some(&0xff));
    assert_eq!(sketch.view().register(15), 0x3ff);
    assert_eq!(sketch.bytes.len(), 11 + 20);
}

#[test]
fn counts_follow_the_estimator() {
    let empty = Owned::new(8, 0);
    assert_eq!(count(&empty.bytes), 0);
    let names: Vec<String> = (0..1000).map(|n| format!("name{n}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let sketch = add_all(None, &refs, 14, 0);
    let estimate = count(&sketch);
    assert!((980..=1020).contains(&estimate), "{estimate}");
    // Adding the same elements again changes nothing and answers 0 added.
    let (again, answer) = modify(
        Some((particle::HLL, &sketch)),
        &payload(1, &[strings(&refs[..10])]),
    )
    .expect("add again");
    assert_eq!(again.as_deref(), Some(sketch.as_slice()));
    assert_eq!(
        answer,
        Some((particle::INTEGER, 0u64.to_be_bytes().to_vec()))
    );
    // A refreshed count is cached in the sketch (little-endian) and answered.
    let (refreshed, answer) =
        modify(Some((particle::HLL, &sketch)), &payload(3, &[])).expect("refresh");
    let refreshed = refreshed.expect("sketch");
    assert_eq!(
        answer,
        Some((particle::INTEGER, estimate.to_be_bytes().to_vec()))
    );
    assert_eq!(&refreshed[3..11], &estimate.to_le_bytes());
    assert_eq!(count(&refreshed), estimate);
}

#[test]
fn union_intersection_and_similarity() {
    let a: Vec<String> = (0..600).map(|n| format!("e{n}")).collect();
    let b: Vec<String> = (300..900).map(|n| format!("e{n}")).collect();
    let a_refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let b_refs: Vec<&str> = b.iter().map(String::as_str).collect();
    for minhash_bits in [0, 16] {
        let first = add_all(None, &a_refs, 12, minhash_bits);
        let second = add_all(None, &b_refs, 12, minhash_bits);
        let union_count = read(
            (particle::HLL, &first),
            &payload(52, &[sketch_arg(&second)]),
        )
        .expect("union count");
        let union_count = u64::from_be_bytes(union_count.1.try_into().expect("int"));
        assert!((860..=940).contains(&union_count), "{union_count}");
        let intersect = read(
            (particle::HLL, &first),
            &payload(53, &[sketch_arg(&second)]),
        )
        .expect("intersect");
        let intersect = u64::from_be_bytes(intersect.1.try_into().expect("int"));
        assert!(
            (200..=400).contains(&intersect),
            "{minhash_bits}: {intersect}"
        );
        let (particle_type, similarity) = read(
            (particle::HLL, &first),
            &payload(54, &[sketch_arg(&second)]),
        )
        .expect("similarity");
        assert_eq!(particle_type, particle::FLOAT);
        let similarity = f64::from_be_bytes(similarity.try_into().expect("float"));
        assert!(
            (0.2..0.45).contains(&similarity),
            "{minhash_bits}: {similarity}"
        );
        // The union sketch counts like the union count.
        let (particle_type, union) = read(
            (particle::HLL, &first),
            &payload(51, &[sketch_arg(&second)]),
        )
        .expect("union");
        assert_eq!(particle_type, particle::HLL);
        assert_eq!(count(&union), union_count);
    }
}

#[test]
fn policies_and_result_codes() {
    let sketch = add_all(None, &["a", "b"], 8, 0);
    let bin = Some((particle::HLL, sketch.as_slice()));
    // init without index bits cannot create (26); with them it resets.
    assert_eq!(
        modify(None, &payload(0, &[])),
        Err(ResultCode::OpNotApplicable)
    );
    let (reset, _) = modify(bin, &payload(0, &[i(-1), i(-1)])).expect("reset");
    assert_eq!(reset, Some(Owned::new(8, 0).bytes));
    assert_eq!(
        modify(bin, &payload(0, &[i(8), i(0), i(1)])),
        Err(ResultCode::BinExists)
    );
    assert_eq!(
        modify(bin, &payload(0, &[i(8), i(0), i(1 | 4)])),
        Ok((None, None))
    );
    assert_eq!(
        modify(None, &payload(0, &[i(8), i(0), i(2)])),
        Err(ResultCode::BinNotFound)
    );
    assert_eq!(modify(None, &payload(3, &[])), Err(ResultCode::BinNotFound));
    assert_eq!(
        modify(None, &payload(4, &[i(4)])),
        Err(ResultCode::BinNotFound)
    );
    // Fold to fewer index bits; not to more, nor with minhash bits.
    let (folded, _) = modify(bin, &payload(4, &[i(4)])).expect("fold");
    assert_eq!(folded.as_ref().map(|f| f[1]), Some(4));
    assert_eq!(
        modify(bin, &payload(4, &[i(12)])),
        Err(ResultCode::OpNotApplicable)
    );
    // Bad arguments.
    for bad in [
        payload(0, &[i(3)]),
        payload(0, &[i(17)]),
        payload(0, &[i(8), i(3)]),
        payload(0, &[i(16), i(51)]),
        payload(0, &[i(8), i(0), i(16)]),
        payload(1, &[encode_items(std::iter::empty())]),
        payload(
            1,
            &[encode_items([vec![0x91, 0x01]].iter().map(Vec::as_slice))],
        ),
        payload(2, &[sketch_arg(&[0, 8])]),
        payload(9, &[]),
        payload(50, &[i(1)]),
        vec![0x90],
        Vec::new(),
    ] {
        let answer = if bad.get(1) == Some(&50) {
            read((particle::HLL, &sketch), &bad).map(|_| (None, None))
        } else {
            modify(bin, &bad)
        };
        assert_eq!(answer, Err(ResultCode::Parameter), "{bad:?}");
    }
    // Another type is 12; a damaged sketch is 1.
    assert_eq!(
        read((particle::BLOB, &sketch), &payload(50, &[])),
        Err(ResultCode::IncompatibleType)
    );
    assert_eq!(
        read((particle::HLL, &sketch[..20]), &payload(50, &[])),
        Err(ResultCode::Unknown)
    );
}

#[test]
fn elements_hash_in_compact_form() {
    // An integer sent with a wide header hashes like its smallest form.
    assert_eq!(
        compact_element(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 5]),
        Ok(vec![5])
    );
    assert_eq!(compact_element(&[0xd1, 0, 200]), Ok(vec![0xcc, 200]));
    assert_eq!(compact_element(&[0xd0, 0xf0]), Ok(vec![0xf0]));
    // Short blobs become strings; a str 8 of 3 bytes a fixstr.
    assert_eq!(compact_element(&[0xc4, 1, 9]), Ok(vec![0xa1, 9]));
    assert_eq!(compact_element(&[0xd9, 2, 1, 2]), Ok(vec![0xa2, 1, 2]));
    let long: Vec<u8> = [vec![0xc4, 40], vec![7; 40]].concat();
    assert_eq!(compact_element(&long), Ok(long.clone()));
    assert_eq!(compact_element(&[0x90]), Err(ResultCode::Parameter));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn hostile_operands_never_panic(
        code in prop_oneof![0i64..5, 50i64..57, -1i64..100],
        args in proptest::collection::vec(
            prop_oneof![
                (-3i64..70).prop_map(int_bytes),
                any::<i64>().prop_map(int_bytes),
                Just(strings(&["x", "y"])),
                Just(sketch_arg(&Owned::new(4, 0).bytes)),
                Just(sketch_arg(&Owned::new(5, 4).bytes)),
                proptest::collection::vec(any::<u8>(), 0..14).prop_map(|b| sketch_arg(&b)),
                proptest::collection::vec(any::<u8>(), 0..6),
            ],
            0..5,
        ),
    ) {
        let bytes = payload(code, &args);
        let small = Owned::new(4, 4).bytes;
        let _ = modify(Some((particle::HLL, &small)), &bytes);
        let _ = modify(None, &bytes);
        let _ = read((particle::HLL, &small), &bytes);
        let _ = call(&small, &bytes, true);
    }
}
