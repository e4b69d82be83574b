//! Unit tests of parsing and evaluation, and hostile expressions.

use super::arithmetic::arithmetic;
use super::eval::Value;
use super::regex::{regex_flag, translate_posix};
use super::*;
use bolide_types::particle;
use bolide_wire::msgpack::{Item, Reader};

#[test]
fn arithmetic_edges_are_unknown_not_wrong() {
    use Value::{Float, Int, Unknown};
    assert_eq!(arithmetic(code::ADD, &[Int(i64::MAX), Int(1)]), Unknown);
    assert_eq!(arithmetic(code::SUB, &[Int(i64::MIN)]), Unknown);
    assert_eq!(arithmetic(code::DIV, &[Int(i64::MIN), Int(-1)]), Unknown);
    assert_eq!(arithmetic(code::MOD, &[Int(5), Int(0)]), Unknown);
    assert_eq!(arithmetic(code::DIV, &[Int(-7), Int(2)]), Int(-3));
    assert_eq!(arithmetic(code::MOD, &[Int(-7), Int(2)]), Int(-1));
    assert_eq!(arithmetic(code::INT_LSHIFT, &[Int(1), Int(64)]), Unknown);
    assert_eq!(arithmetic(code::INT_RSHIFT, &[Int(-1), Int(60)]), Int(15));
    assert_eq!(arithmetic(code::INT_ARSHIFT, &[Int(-16), Int(2)]), Int(-4));
    assert_eq!(arithmetic(code::TO_INT, &[Float(f64::NAN)]), Unknown);
    assert_eq!(arithmetic(code::TO_INT, &[Float(1e300)]), Unknown);
    assert_eq!(arithmetic(code::TO_INT, &[Float(-2.7)]), Int(-2));
    assert_eq!(arithmetic(code::LOG, &[Float(8.0), Float(2.0)]), Float(3.0));
    assert_eq!(arithmetic(code::ADD, &[Int(1), Float(2.0)]), Unknown);
    use Value::Bool;
    assert_eq!(arithmetic(code::INT_LSCAN, &[Int(1), Bool(true)]), Int(63));
    assert_eq!(
        arithmetic(code::INT_LSCAN, &[Int(-1), Bool(false)]),
        Int(-1)
    );
    assert_eq!(
        arithmetic(code::INT_LSCAN, &[Int(i64::MAX), Bool(false)]),
        Int(0)
    );
    assert_eq!(
        arithmetic(code::INT_RSCAN, &[Int(0b1010), Bool(true)]),
        Int(62)
    );
    assert_eq!(arithmetic(code::INT_RSCAN, &[Int(0), Bool(true)]), Int(-1));
    assert_eq!(
        arithmetic(code::INT_RSCAN, &[Int(0b0111), Bool(false)]),
        Int(60)
    );
}

#[test]
fn posix_patterns_translate_to_the_regex_crate() {
    // Basic syntax swaps the meaning of escaped and bare operators.
    assert_eq!(translate_posix(r"a+b\(c\)\{2\}", false), r"a\+b(c){2}");
    assert_eq!(translate_posix(r"x|y?", false), r"x\|y\?");
    // A `*` with nothing before it is a literal in basic syntax.
    assert_eq!(translate_posix(r"*a\(*b\)", false), r"\*a(\*b)");
    assert_eq!(translate_posix(r"^*x*", false), r"^\*x*");
    assert_eq!(translate_posix(r"a^b$c$", false), r"a\^b\$c$");
    assert_eq!(translate_posix(r"\(a$\)b", false), r"(a$)b");
    // Extended syntax passes through.
    assert_eq!(translate_posix(r"(a|b)+\.", true), r"(a|b)+\.");
    // In a bracket list a backslash is literal, and so is a leading ].
    assert_eq!(translate_posix(r"[\]", true), r"[\\]");
    assert_eq!(translate_posix(r"[]a]", true), r"[\]a]");
    assert_eq!(translate_posix(r"[^[:digit:]x]", false), r"[^[:digit:]x]");
    let regex = PosixRegex::compile(br"^[[:alpha:]]\{3\}$", 0).expect("compiles");
    assert!(regex.is_match(b"abc") && !regex.is_match(b"abcd"));
    let icase = PosixRegex::compile(b"^ABC", regex_flag::ICASE).expect("compiles");
    assert!(icase.is_match(b"abcdef"));
    assert_eq!(
        PosixRegex::compile(b"(open", regex_flag::EXTENDED).err(),
        Some(ResultCode::Parameter)
    );
    assert_eq!(
        PosixRegex::compile(b"a{100000}{100000}", regex_flag::EXTENDED).err(),
        Some(ResultCode::Parameter)
    );
}

/// [op, [81, 2, "n"], 5] packed by hand.
fn int_bin_compare(op: u8, value: u8) -> Vec<u8> {
    vec![0x93, op, 0x93, 0x51, 0x02, 0xa1, b'n', value]
}

/// A record for the tests: bins in a `Vec`, fixed metadata.
pub(crate) struct TestRecord {
    pub bins: Vec<(Vec<u8>, u8, Vec<u8>)>,
    pub digest: Digest,
    pub key: Option<(u8, Vec<u8>)>,
    pub last_update_ms: u64,
    pub void_time: u32,
}

impl TestRecord {
    pub(crate) fn new(bins: Vec<(Vec<u8>, u8, Vec<u8>)>) -> TestRecord {
        TestRecord {
            bins,
            digest: Digest([0; 20]),
            key: None,
            last_update_ms: 0,
            void_time: 0,
        }
    }
}

impl Record for TestRecord {
    fn bin(&self, name: &[u8]) -> Option<(u8, &[u8])> {
        self.bins
            .iter()
            .find(|(bin, _, _)| bin == name)
            .map(|(_, particle_type, value)| (*particle_type, value.as_slice()))
    }

    fn digest(&self) -> &Digest {
        &self.digest
    }

    fn key(&self) -> Option<(u8, &[u8])> {
        self.key
            .as_ref()
            .map(|(key_type, key)| (*key_type, key.as_slice()))
    }

    fn last_update_ms(&self) -> u64 {
        self.last_update_ms
    }

    fn void_time(&self) -> u32 {
        self.void_time
    }

    fn set_name(&self) -> Option<&str> {
        Some("demo")
    }

    fn size_bytes(&self) -> usize {
        30
    }
}

const NOW_MS: u64 = 1_000_000;

#[test]
fn compares_integer_bins() {
    let subject = TestRecord::new(vec![(
        b"n".to_vec(),
        particle::INTEGER,
        7i64.to_be_bytes().to_vec(),
    )]);
    assert!(passes(
        &parse(&int_bin_compare(3, 5)).expect("gt"),
        &subject,
        NOW_MS
    ));
    assert!(!passes(
        &parse(&int_bin_compare(5, 5)).expect("lt"),
        &subject,
        NOW_MS
    ));
    assert!(passes(
        &parse(&int_bin_compare(1, 7)).expect("eq"),
        &subject,
        NOW_MS
    ));
    // A missing bin is unknown: filtered out under both EQ and NOT(EQ).
    let missing = vec![0x93, 0x01, 0x93, 0x51, 0x02, 0xa1, b'x', 0x07];
    assert!(!passes(&parse(&missing).expect("eq"), &subject, NOW_MS));
    let mut negated = vec![0x92, 0x12];
    negated.extend_from_slice(&missing);
    assert!(!passes(&parse(&negated).expect("not"), &subject, NOW_MS));
    // and(true-ish, false) is false; or is true.
    let mut and = vec![0x93, 0x10];
    and.extend(int_bin_compare(3, 5));
    and.extend(int_bin_compare(5, 5));
    assert!(!passes(&parse(&and).expect("and"), &subject, NOW_MS));
    and[1] = 0x11;
    assert!(passes(&parse(&and).expect("or"), &subject, NOW_MS));
}

#[test]
fn typed_bytes_use_the_smallest_msgpack_header() {
    use crate::cdt::value::{write_typed_bytes, Raw};
    let header = |raw, len: usize| {
        let mut out = Vec::new();
        write_typed_bytes(&mut out, raw, particle::STRING, &vec![b'x'; len]);
        let mut reader = Reader::new(&out);
        match reader.item() {
            Ok(Item::Str(bytes) | Item::Bin(bytes)) => assert_eq!(bytes.len(), len + 1),
            other => panic!("{other:?}"),
        }
        out[0]
    };
    assert_eq!(header(Raw::Str, 3), 0xa4);
    assert_eq!(header(Raw::Str, 31), 0xd9);
    assert_eq!(header(Raw::Str, 300), 0xda);
    assert_eq!(header(Raw::Str, 70_000), 0xdb);
    assert_eq!(header(Raw::Bin, 3), 0xc4);
    assert_eq!(header(Raw::Bin, 300), 0xc5);
    assert_eq!(header(Raw::Bin, 70_000), 0xc6);
}

#[test]
fn rejects_garbage_and_unknown_ops() {
    assert_eq!(parse(&[0x91, 0x60]), Err(ResultCode::UnsupportedFeature));
    // A CALL needs its four operands.
    assert_eq!(parse(&[0x91, 0x7f]), Err(ResultCode::Parameter));
    assert_eq!(parse(&[0x93, 0x01]), Err(ResultCode::Parameter));
    assert_eq!(parse(&[]), Err(ResultCode::Parameter));
    assert_eq!(parse(&[0x91; 100]), Err(ResultCode::Parameter));
}

// Hostile expressions: every operator with plausible and implausible
// operands, evaluated against records of every bin type. Parsing may
// refuse them; nothing may panic, loop or blow the stack.

fn pack_array(items: &[Vec<u8>]) -> Vec<u8> {
    crate::cdt::value::encode_items(items.iter().map(Vec::as_slice))
}

fn pack_int(value: i64) -> Vec<u8> {
    crate::cdt::value::int_bytes(value)
}

fn pack_str(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0xd9, bytes.len().min(255) as u8];
    out.extend_from_slice(&bytes[..bytes.len().min(255)]);
    out
}

fn particle_str(particle_type: u8, text: &[u8]) -> Vec<u8> {
    let mut bytes = vec![particle_type];
    bytes.extend_from_slice(text);
    pack_str(&bytes)
}

fn expression() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let bin_names = prop_oneof![
        Just(b"n".to_vec()),
        Just(b"s".to_vec()),
        Just(b"f".to_vec()),
        Just(b"l".to_vec()),
        Just(b"m".to_vec()),
        Just(b"g".to_vec()),
        Just(b"x".to_vec()),
    ];
    let geo = prop_oneof![
        Just(br#"{"type":"Point","coordinates":[1.0,2.0]}"#.to_vec()),
        Just(br#"{"type":"AeroCircle","coordinates":[[1.0,2.0],1000]}"#.to_vec()),
        Just(br#"{"type":"Polygon","coordinates":[[[0,0],[0,5],[5,5],[0,0]]]}"#.to_vec()),
        Just(br#"{"type":"Polygon","coordinates":[]}"#.to_vec()),
        Just(br#"{"type":"MultiPolygon","coordinates":[[[]]]}"#.to_vec()),
        "[{}\\[\\]\",:a-z0-9]{0,20}".prop_map(String::into_bytes),
    ];
    let leaf = prop_oneof![
        Just(vec![0xc0]),
        any::<bool>().prop_map(|b| vec![if b { 0xc3 } else { 0xc2 }]),
        prop_oneof![any::<i64>(), -70i64..70].prop_map(pack_int),
        any::<f64>().prop_map(crate::cdt::value::float_bytes),
        "[abc.*^$()|+?{}\\[\\]\\\\]{0,8}"
            .prop_map(|t| particle_str(particle::STRING, t.as_bytes())),
        proptest::collection::vec(any::<u8>(), 0..6).prop_map(|b| particle_str(particle::BLOB, &b)),
        geo.prop_map(|g| particle_str(particle::GEOJSON, &g)),
        (0i64..10, bin_names.clone()).prop_map(|(kind, name)| pack_array(&[
            pack_int(code::BIN),
            pack_int(kind),
            pack_str(&name)
        ])),
        bin_names.prop_map(|name| pack_array(&[pack_int(code::BIN_TYPE), pack_str(&name)])),
        (64i64..75).prop_map(|op| pack_array(&[pack_int(op)])),
        (-2i64..5).prop_map(|m| pack_array(&[pack_int(code::DIGEST_MODULO), pack_int(m)])),
        (0i64..10).prop_map(|kind| pack_array(&[pack_int(code::KEY), pack_int(kind)])),
        prop_oneof![Just(b"a".to_vec()), Just(b"b".to_vec())]
            .prop_map(|name| pack_array(&[pack_int(code::VAR), pack_str(&name)])),
        proptest::collection::vec(any::<u8>(), 0..12),
        // map literals
        Just(vec![0x81, 0xa2, particle::STRING, b'a', 0x01]),
        Just(vec![0x80]),
    ];
    leaf.prop_recursive(5, 64, 5, |inner| {
        prop_oneof![
            // Any operator with any operands.
            (
                prop_oneof![1i64..9, 16i64..42, 50i64..52, 123i64..128],
                proptest::collection::vec(inner.clone(), 0..5),
            )
                .prop_map(|(op, args)| {
                    let mut items = vec![pack_int(op)];
                    items.extend(args);
                    pack_array(&items)
                }),
            // let a = x, b = y in z
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(x, y, z)| {
                pack_array(&[pack_int(code::LET), pack_str(b"a"), x, pack_str(b"b"), y, z])
            }),
            // regex with its flags and pattern
            (0i64..16, "[abc.*^$()|+?{}\\[\\]\\\\:]{0,10}", inner.clone()).prop_map(
                |(flags, pattern, subject)| {
                    pack_array(&[
                        pack_int(code::CMP_REGEX),
                        pack_int(flags),
                        pack_str(pattern.as_bytes()),
                        subject,
                    ])
                }
            ),
            // a list or map call: [127, type, 0, [op, args...], bin]
            (
                0i64..10,
                prop_oneof![0i64..32, 64i64..112],
                proptest::collection::vec(inner.clone(), 0..4),
                inner,
            )
                .prop_map(|(kind, op, args, bin)| {
                    let mut call = vec![pack_int(op)];
                    call.extend(args);
                    pack_array(&[
                        pack_int(code::CALL),
                        pack_int(kind),
                        pack_int(0),
                        pack_array(&call),
                        bin,
                    ])
                }),
        ]
    })
}

fn hostile_record() -> TestRecord {
    let list = pack_array(&[
        pack_int(1),
        particle_str(particle::STRING, b"a"),
        pack_array(&[pack_int(2)]),
    ]);
    let map = {
        let mut out = vec![0x82];
        out.extend(particle_str(particle::STRING, b"a"));
        out.extend(pack_int(1));
        out.extend(particle_str(particle::STRING, b"b"));
        out.extend(pack_array(&[]));
        out
    };
    let mut geo = vec![0u8, 0, 0];
    geo.extend_from_slice(br#"{"type":"Point","coordinates":[1.0,2.0]}"#);
    let bins = [
        (
            b"n".as_slice(),
            particle::INTEGER,
            7i64.to_be_bytes().to_vec(),
        ),
        (b"s", particle::STRING, b"abc".to_vec()),
        (b"f", particle::FLOAT, 1.5f64.to_be_bytes().to_vec()),
        (b"l", particle::LIST, list),
        (b"m", particle::MAP, map),
        (b"g", particle::GEOJSON, geo),
    ];
    TestRecord {
        bins: bins
            .into_iter()
            .map(|(name, particle_type, value)| (name.to_vec(), particle_type, value))
            .collect(),
        digest: Digest([7; 20]),
        key: Some((particle::STRING, b"key".to_vec())),
        last_update_ms: 0,
        void_time: 100,
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    #[test]
    fn hostile_expressions_never_panic(bytes in expression()) {
        let record = hostile_record();
        let empty = TestRecord::new(Vec::new());
        if let Ok(expr) = parse(&bytes) {
            let _ = passes(&expr, &record, NOW_MS);
            let _ = passes(&expr, &empty, NOW_MS);
            let _ = evaluate(&expr, &record, NOW_MS);
        }
        // And as the value of an expression op, `[expression, flags]`.
        let mut op = vec![0x92];
        op.extend_from_slice(&bytes);
        op.push(0x10);
        let _ = parse_op(&op, true);
    }
}
