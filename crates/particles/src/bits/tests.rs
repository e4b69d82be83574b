//! Unit tests of the bit ops against values worked out by hand from the
//! server's rules, and hostile operands.

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

/// A msgpack blob as clients send it: the particle type byte, then the bytes.
fn blob(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0xc4, bytes.len() as u8 + 1, particle::BLOB];
    out.extend_from_slice(bytes);
    out
}

fn boolean(value: bool) -> Vec<u8> {
    vec![if value { 0xc3 } else { 0xc2 }]
}

fn modify_blob(old: &[u8], code: i64, args: &[Vec<u8>]) -> Result<Option<Vec<u8>>, ResultCode> {
    modify(Some((particle::BLOB, old)), &payload(code, args))
}

fn read_int(old: &[u8], code: i64, args: &[Vec<u8>]) -> Result<i64, ResultCode> {
    let (particle_type, bytes) = read((particle::BLOB, old), &payload(code, args))?;
    assert_eq!(particle_type, particle::INTEGER);
    Ok(i64::from_be_bytes(bytes.try_into().expect("8 bytes")))
}

#[test]
fn set_or_xor_and_not_touch_only_their_bits() {
    let old = [0b1111_0000, 0b0000_1111];
    // 6 bits from bit 2: 101010.
    let set = modify_blob(&old, 3, &[i(2), i(6), blob(&[0b1010_1000])]).expect("set");
    assert_eq!(set, Some(vec![0b1110_1010, 0b0000_1111]));
    let or = modify_blob(&old, 4, &[i(6), i(4), blob(&[0b1111_0000])]).expect("or");
    assert_eq!(or, Some(vec![0b1111_0011, 0b1100_1111]));
    let xor = modify_blob(&old, 5, &[i(0), i(16), blob(&[0xff, 0xff])]).expect("xor");
    assert_eq!(xor, Some(vec![0b0000_1111, 0b1111_0000]));
    let and = modify_blob(&old, 6, &[i(3), i(2), blob(&[0])]).expect("and");
    assert_eq!(and, Some(vec![0b1110_0000, 0b0000_1111]));
    let not = modify_blob(&old, 7, &[i(-4), i(4)]).expect("not from the end");
    assert_eq!(not, Some(vec![0b1111_0000, 0b0000_0000]));
}

#[test]
fn shifts_stay_inside_their_range() {
    let old = [0b0110_0110, 0xff];
    let left = modify_blob(&old, 8, &[i(1), i(6), i(2)]).expect("lshift");
    assert_eq!(left, Some(vec![0b0001_1000, 0xff]));
    let right = modify_blob(&old, 9, &[i(0), i(8), i(3)]).expect("rshift");
    assert_eq!(right, Some(vec![0b0000_1100, 0xff]));
    let all = modify_blob(&old, 9, &[i(0), i(16), i(16)]).expect("rshift everything");
    assert_eq!(all, Some(vec![0, 0]));
}

#[test]
fn resize_insert_remove() {
    let old = [1, 2, 3];
    assert_eq!(modify_blob(&old, 0, &[i(5)]), Ok(Some(vec![1, 2, 3, 0, 0])));
    assert_eq!(
        modify_blob(&old, 0, &[i(5), i(0), i(1)]),
        Ok(Some(vec![0, 0, 1, 2, 3]))
    );
    assert_eq!(modify_blob(&old, 0, &[i(1), i(0), i(1)]), Ok(Some(vec![3])));
    assert_eq!(modify_blob(&old, 0, &[i(3)]), Ok(None));
    // Grow-only refuses to shrink (4), or does nothing with NO_FAIL.
    assert_eq!(
        modify_blob(&old, 0, &[i(1), i(0), i(2)]),
        Err(ResultCode::Parameter)
    );
    assert_eq!(modify_blob(&old, 0, &[i(1), i(4), i(2)]), Ok(None));
    assert_eq!(
        modify_blob(&old, 1, &[i(5), blob(&[9])]),
        Ok(Some(vec![1, 2, 3, 0, 0, 9]))
    );
    assert_eq!(
        modify_blob(&old, 1, &[i(-1), blob(&[9])]),
        Ok(Some(vec![1, 2, 9, 3]))
    );
    assert_eq!(modify_blob(&old, 2, &[i(1), i(1)]), Ok(Some(vec![1, 3])));
    assert_eq!(
        modify_blob(&old, 2, &[i(2), i(5)]),
        Err(ResultCode::Parameter)
    );
    assert_eq!(
        modify_blob(&old, 2, &[i(2), i(5), i(8)]),
        Ok(Some(vec![1, 2]))
    );
    // Only insert and resize create a bin.
    let create = payload(1, &[i(1), blob(&[7])]);
    assert_eq!(modify(None, &create), Ok(Some(vec![0, 7])));
    let set = payload(3, &[i(0), i(8), blob(&[7])]);
    assert_eq!(modify(None, &set), Err(ResultCode::BinNotFound));
    let set_no_fail = payload(3, &[i(0), i(8), blob(&[7]), i(4)]);
    assert_eq!(modify(None, &set_no_fail), Ok(None));
    let negative = payload(1, &[i(-1), blob(&[7])]);
    assert_eq!(modify(None, &negative), Err(ResultCode::Parameter));
}

#[test]
fn past_the_end_needs_the_partial_flag() {
    let old = [0u8, 0];
    let args = |flags| vec![i(12), i(8), blob(&[0xff]), i(flags)];
    assert_eq!(
        modify_blob(&old, 3, &args(0)),
        Err(ResultCode::OpNotApplicable)
    );
    assert_eq!(modify_blob(&old, 3, &args(4)), Ok(None));
    assert_eq!(modify_blob(&old, 3, &args(8)), Ok(Some(vec![0, 0x0f])));
    assert_eq!(
        modify_blob(&old, 3, &[i(16), i(1), blob(&[0xff]), i(8)]),
        Err(ResultCode::OpNotApplicable)
    );
    assert_eq!(
        read((particle::BLOB, &old), &payload(50, &[i(12), i(8)])),
        Err(ResultCode::OpNotApplicable)
    );
}

#[test]
fn integers_overflow_saturate_or_wrap() {
    let old = [0xfe];
    // Unsigned 8 bits: 254 + 3 overflows.
    assert_eq!(
        modify_blob(&old, 10, &[i(0), i(8), i(3)]),
        Err(ResultCode::OpNotApplicable)
    );
    assert_eq!(
        modify_blob(&old, 10, &[i(0), i(8), i(3), i(0), i(2)]),
        Ok(Some(vec![0xff]))
    );
    assert_eq!(
        modify_blob(&old, 10, &[i(0), i(8), i(3), i(0), i(4)]),
        Ok(Some(vec![0x01]))
    );
    // Signed 8 bits: -2 - 127 underflows; saturates at -128.
    assert_eq!(
        modify_blob(&old, 11, &[i(0), i(8), i(127), i(0), i(1 | 2)]),
        Ok(Some(vec![0x80]))
    );
    assert_eq!(
        modify_blob(&old, 11, &[i(0), i(8), i(127), i(0), i(1)]),
        Err(ResultCode::OpNotApplicable)
    );
    // set-int in the middle of a byte, then read back signed and unsigned.
    let set = modify_blob(&[0, 0], 12, &[i(4), i(6), i(-3)])
        .expect("set-int")
        .expect("changed");
    assert_eq!(set, vec![0b0000_1111, 0b0100_0000]);
    assert_eq!(read_int(&set, 54, &[i(4), i(6)]), Ok(61));
    assert_eq!(read_int(&set, 54, &[i(4), i(6), i(1)]), Ok(-3));
    // Saturate and wrap together are a bad request.
    assert_eq!(
        modify_blob(&old, 10, &[i(0), i(8), i(1), i(0), i(6)]),
        Err(ResultCode::Parameter)
    );
}

#[test]
fn reads_count_scan_and_get() {
    let data = [0b0001_0010, 0b1000_0001];
    assert_eq!(read_int(&data, 51, &[i(0), i(16)]), Ok(4));
    assert_eq!(read_int(&data, 51, &[i(4), i(5)]), Ok(2));
    assert_eq!(read_int(&data, 52, &[i(0), i(16), boolean(true)]), Ok(3));
    assert_eq!(read_int(&data, 52, &[i(4), i(3), boolean(true)]), Ok(2));
    assert_eq!(read_int(&data, 52, &[i(9), i(6), boolean(true)]), Ok(-1));
    assert_eq!(read_int(&data, 52, &[i(0), i(3), boolean(false)]), Ok(0));
    assert_eq!(read_int(&data, 53, &[i(0), i(16), boolean(true)]), Ok(15));
    assert_eq!(read_int(&data, 53, &[i(0), i(15), boolean(true)]), Ok(8));
    assert_eq!(read_int(&data, 53, &[i(1), i(14), boolean(false)]), Ok(13));
    // As on the server, a right scan sees the bits before the offset in
    // the first byte: bit 3 is found 2 bits before offset 5.
    assert_eq!(read_int(&data, 53, &[i(5), i(1), boolean(true)]), Ok(-2));
    let got = read((particle::BLOB, &data), &payload(50, &[i(3), i(7)])).expect("get");
    assert_eq!(got, (particle::BLOB, vec![0b1001_0100]));
    assert_eq!(
        read((particle::STRING, b"ab"), &payload(50, &[i(0), i(8)])),
        Err(ResultCode::IncompatibleType)
    );
}

#[test]
fn bad_arguments_are_refused() {
    let old = [0u8; 4];
    for bad in [
        payload(3, &[i(0), i(0), blob(&[1])]),
        payload(3, &[i(0), i(16), blob(&[1])]),
        payload(10, &[i(0), i(65), i(1)]),
        payload(10, &[i(0), i(0), i(1)]),
        payload(3, &[i(0), i(8), blob(&[1]), i(16)]),
        payload(3, &[i(0), i(8), blob(&[1]), i(3)]),
        payload(0, &[i(1), i(0), i(6)]),
        payload(99, &[]),
        payload(3, &[i(0)]),
        payload(1, &[i(0), vec![0xc4, 1, 4]]),
        payload(3, &[i(0), i(8), i(1)]),
        vec![0x90],
        vec![0xc0],
        Vec::new(),
    ] {
        assert_eq!(
            modify(Some((particle::BLOB, &old)), &bad),
            Err(ResultCode::Parameter),
            "{bad:?}"
        );
    }
    // A read op is not a modify op, and the reverse.
    assert_eq!(
        modify(Some((particle::BLOB, &old)), &payload(50, &[i(0), i(8)])),
        Err(ResultCode::Parameter)
    );
    assert_eq!(
        read(
            (particle::BLOB, &old),
            &payload(3, &[i(0), i(8), blob(&[1])])
        ),
        Err(ResultCode::Parameter)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn hostile_operands_never_panic(
        code in prop_oneof![0i64..13, 50i64..55, -2i64..100],
        args in proptest::collection::vec(
            prop_oneof![
                (-40i64..40).prop_map(int_bytes),
                any::<i64>().prop_map(int_bytes),
                proptest::collection::vec(any::<u8>(), 0..6).prop_map(|b| {
                    let mut out = vec![0xc4, b.len() as u8];
                    out.extend_from_slice(&b);
                    out
                }),
                any::<bool>().prop_map(boolean),
                proptest::collection::vec(any::<u8>(), 0..4),
            ],
            0..6,
        ),
        old in proptest::collection::vec(any::<u8>(), 0..10),
    ) {
        let bytes = payload(code, &args);
        let _ = modify(Some((particle::BLOB, &old)), &bytes);
        let _ = modify(None, &bytes);
        if let Ok(Some(new)) = modify(Some((particle::BLOB, &old)), &bytes) {
            // The operands here are at most two bytes of msgpack integer
            // (a resize or an insert of up to 65,535 bytes): growth stays
            // within what was asked for.
            prop_assert!(new.len() <= old.len() + 65_535 + 64);
        }
        let _ = read((particle::BLOB, &old), &bytes);
    }
}
