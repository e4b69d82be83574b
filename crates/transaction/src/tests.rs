//! Request-level tests: wire bytes in, wire bytes out.

use super::*;
use bolide_store::NamespaceConfig;
use bolide_types::particle;
use bolide_wire::message::{encode_field, encode_header, encode_op};
use bolide_wire::{field_type, op_type};

struct Request {
    header: MsgHeader,
    digest: [u8; 20],
    key: Option<Vec<u8>>,
    ops: Vec<(u8, u8, Vec<u8>, Vec<u8>)>,
}

impl Request {
    fn new(digest_seed: u8) -> Request {
        let mut digest = [digest_seed; 20];
        digest[5] = digest_seed.wrapping_mul(31);
        Request {
            header: MsgHeader::default(),
            digest,
            key: None,
            ops: Vec::new(),
        }
    }

    fn op(mut self, op: u8, particle_type: u8, name: &str, value: &[u8]) -> Request {
        self.ops
            .push((op, particle_type, name.as_bytes().to_vec(), value.to_vec()));
        self
    }

    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let n_fields = 3 + u16::from(self.key.is_some());
        encode_header(
            &mut body,
            &MsgHeader {
                n_fields,
                n_ops: self.ops.len() as u16,
                ..self.header
            },
        );
        encode_field(&mut body, field_type::NAMESPACE, b"test");
        encode_field(&mut body, field_type::SET, b"demo");
        encode_field(&mut body, field_type::DIGEST, &self.digest);
        if let Some(key) = &self.key {
            encode_field(&mut body, field_type::KEY, key);
        }
        for (op, particle_type, name, value) in &self.ops {
            encode_op(&mut body, *op, *particle_type, name, value);
        }
        body
    }
}

struct Reply {
    result: u8,
    generation: u32,
    void_time: u32,
    ops: Vec<(u8, u8, Vec<u8>, Vec<u8>)>,
}

fn run(store: &Store, request: &Request) -> Reply {
    let mut out = Vec::new();
    let standalone = crate::Standalone::new(store);
    let _ = execute(
        store,
        &standalone.cluster(),
        &Caller::client(None),
        &request.encode(),
        &mut out,
        &mut Scratch::default(),
    );
    let message = Message::decode(&out[8..]).expect("valid response");
    assert_eq!(
        out.len(),
        8 + (u64::from_be_bytes(out[..8].try_into().expect("8")) as usize & 0xffff_ffff_ffff)
    );
    Reply {
        result: message.header.result_code,
        generation: message.header.generation,
        void_time: message.header.record_ttl,
        ops: message
            .ops()
            .map(|op| {
                (
                    op.op_type,
                    op.particle_type,
                    op.name.to_vec(),
                    op.value.to_vec(),
                )
            })
            .collect(),
    }
}

/// Runs a stream job to its end, appending every chunk.
fn drain(outcome: Outcome, out: &mut Vec<u8>) {
    if let Outcome::Stream(mut job) = outcome {
        let mut rounds = 0;
        while !job.fill(out) {
            rounds += 1;
            assert!(rounds < 10_000, "stream job never finished");
        }
    }
}

/// Splits a buffer into its proto frames, checking each decodes.
fn frames(out: &[u8]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let (_, total) = bolide_wire::frame_length(rest)
            .expect("valid frame")
            .expect("complete frame");
        frames.push(rest[8..total].to_vec());
        rest = &rest[total..];
    }
    frames
}

fn store() -> Store {
    Store::new(vec![NamespaceConfig::with_name("test")])
}

fn put(seed: u8, name: &str, particle_type: u8, value: &[u8]) -> Request {
    let mut request = Request::new(seed).op(op_type::WRITE, particle_type, name, value);
    request.header.info2 = info2::WRITE;
    request
}

fn get(seed: u8) -> Request {
    let mut request = Request::new(seed);
    request.header.info1 = info1::READ | info1::GET_ALL;
    request
}

#[test]
fn put_then_get_round_trips_and_bumps_generation() {
    let store = store();
    assert_eq!(
        run(&store, &put(1, "a", particle::STRING, b"hello")).generation,
        1
    );
    let reply = run(&store, &put(1, "b", particle::INTEGER, &[0, 5]));
    assert_eq!((reply.result, reply.generation), (0, 2));
    let reply = run(&store, &get(1));
    assert_eq!(reply.result, 0);
    assert_eq!(reply.generation, 2);
    assert_eq!(
        reply.ops,
        vec![
            (1, particle::STRING, b"a".to_vec(), b"hello".to_vec()),
            (
                1,
                particle::INTEGER,
                b"b".to_vec(),
                5i64.to_be_bytes().to_vec()
            ),
        ]
    );
    assert_eq!(run(&store, &get(2)).result, ResultCode::NotFound.as_u8());
}

#[test]
fn exists_policies_and_generation_checks() {
    let store = store();
    let mut create = put(1, "a", particle::STRING, b"x");
    create.header.info2 |= info2::CREATE_ONLY;
    assert_eq!(run(&store, &create).result, 0);
    assert_eq!(
        run(&store, &create).result,
        ResultCode::RecordExists.as_u8()
    );
    let mut update = put(2, "a", particle::STRING, b"x");
    update.header.info3 = info3::UPDATE_ONLY;
    assert_eq!(run(&store, &update).result, ResultCode::NotFound.as_u8());
    let mut generation = put(1, "a", particle::STRING, b"y");
    generation.header.info2 |= info2::GENERATION;
    generation.header.generation = 5;
    assert_eq!(
        run(&store, &generation).result,
        ResultCode::Generation.as_u8()
    );
    generation.header.generation = 1;
    assert_eq!(run(&store, &generation).generation, 2);
}

/// Create-only is checked before the generation (the server's order): a
/// create-only write with an expected generation the record does not pass
/// answers "exists", not "generation".
#[test]
fn create_only_is_decided_before_the_generation() {
    let store = store();
    run(&store, &put(1, "a", particle::STRING, b"x"));
    run(&store, &put(1, "a", particle::STRING, b"y"));
    let mut restore = put(1, "a", particle::STRING, b"z");
    restore.header.info2 |= info2::CREATE_ONLY | info2::GENERATION_GT;
    restore.header.generation = 1;
    assert_eq!(
        run(&store, &restore).result,
        ResultCode::RecordExists.as_u8()
    );
    let mut update = put(2, "a", particle::STRING, b"z");
    update.header.info3 = info3::UPDATE_ONLY;
    update.header.info2 |= info2::GENERATION;
    update.header.generation = 3;
    assert_eq!(run(&store, &update).result, ResultCode::NotFound.as_u8());
    // Without create-only, the same generation check fails as before.
    restore.header.info2 &= !info2::CREATE_ONLY;
    assert_eq!(run(&store, &restore).result, ResultCode::Generation.as_u8());
}

#[test]
fn replace_drops_unnamed_bins() {
    let store = store();
    run(&store, &put(1, "a", particle::STRING, b"x"));
    let mut replace = put(1, "b", particle::STRING, b"y");
    replace.header.info3 = info3::CREATE_OR_REPLACE;
    assert_eq!(run(&store, &replace).result, 0);
    let reply = run(&store, &get(1));
    assert_eq!(reply.ops.len(), 1);
    assert_eq!(reply.ops[0].2, b"b".to_vec());
}

#[test]
fn operate_increments_appends_and_reads_in_order() {
    let store = store();
    run(&store, &put(1, "s", particle::STRING, b"mid"));
    let mut operate = Request::new(1)
        .op(op_type::INCR, particle::INTEGER, "n", &7i64.to_be_bytes())
        .op(op_type::APPEND, particle::STRING, "s", b"-end")
        .op(op_type::PREPEND, particle::STRING, "s", b"start-")
        .op(op_type::READ, 0, "n", &[])
        .op(op_type::READ, 0, "s", &[]);
    operate.header.info1 = info1::READ;
    operate.header.info2 = info2::WRITE;
    let reply = run(&store, &operate);
    assert_eq!(reply.result, 0);
    assert_eq!(reply.generation, 2);
    assert_eq!(reply.ops[0].3, 7i64.to_be_bytes().to_vec());
    assert_eq!(reply.ops[1].3, b"start-mid-end".to_vec());
    let mut wrong = Request::new(1).op(op_type::INCR, particle::INTEGER, "s", &1i64.to_be_bytes());
    wrong.header.info2 = info2::WRITE;
    assert_eq!(
        run(&store, &wrong).result,
        ResultCode::IncompatibleType.as_u8()
    );
}

#[test]
fn delete_then_not_found() {
    let store = store();
    run(&store, &put(1, "a", particle::STRING, b"x"));
    let mut delete = Request::new(1);
    delete.header.info2 = info2::WRITE | info2::DELETE;
    assert_eq!(run(&store, &delete).result, 0);
    assert_eq!(run(&store, &delete).result, ResultCode::NotFound.as_u8());
    assert_eq!(run(&store, &get(1)).result, ResultCode::NotFound.as_u8());
}

#[test]
fn ttl_sets_void_time() {
    let store = store();
    let mut request = put(1, "a", particle::STRING, b"x");
    request.header.record_ttl = 100;
    let reply = run(&store, &request);
    let now = now_citrusleaf_seconds_for_test();
    assert!(
        reply.void_time >= now + 99 && reply.void_time <= now + 101,
        "void {}",
        reply.void_time
    );
    request.header.record_ttl = u32::MAX - 1; // keep
    assert_eq!(run(&store, &request).void_time, reply.void_time);
    request.header.record_ttl = u32::MAX; // never
    assert_eq!(run(&store, &request).void_time, 0);
}

fn now_citrusleaf_seconds_for_test() -> u32 {
    bolide_types::now_citrusleaf_seconds()
}

#[test]
fn limits_answer_their_codes() {
    let mut config = NamespaceConfig::with_name("test");
    config.max_record_size_bytes = 100;
    let store = Store::new(vec![config]);
    assert_eq!(
        run(&store, &put(1, "a", particle::BLOB, &[0; 200])).result,
        ResultCode::RecordTooBig.as_u8()
    );
    assert_eq!(
        run(
            &store,
            &put(1, "a_very_long_bin_name", particle::BLOB, &[0])
        )
        .result,
        ResultCode::BinName.as_u8()
    );
    assert_eq!(
        run(&store, &put(1, "a", 99, &[0])).result,
        ResultCode::Parameter.as_u8()
    );
    assert_eq!(
        run(&store, &put(1, "a", particle::INTEGER, &[0, 0, 0])).result,
        ResultCode::Parameter.as_u8()
    );
}

#[test]
fn unknown_namespace_and_garbage() {
    let store = Store::new(vec![NamespaceConfig::with_name("other")]);
    assert_eq!(run(&store, &get(1)).result, ResultCode::Namespace.as_u8());
    let mut out = Vec::new();
    let standalone = crate::Standalone::new(&store);
    let _ = execute(
        &store,
        &standalone.cluster(),
        &Caller::client(None),
        &[1, 2, 3],
        &mut out,
        &mut Scratch::default(),
    );
    assert_eq!(out[13], ResultCode::Parameter.as_u8());
}

proptest::proptest! {
    #[test]
    fn any_bytes_get_exactly_one_well_formed_answer(body in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let store = store();
        let mut out = Vec::new();
        drain(execute(&store, &crate::Standalone::new(&store).cluster(), &Caller::client(None), &body, &mut out, &mut Scratch::default()), &mut out);
        let frames = frames(&out);
        proptest::prop_assert!(!frames.is_empty());
    }

    #[test]
    fn mutated_valid_requests_never_panic(position in 0usize..120, byte in proptest::num::u8::ANY) {
        let store = store();
        let mut body = put(1, "bin", particle::STRING, b"value").encode();
        if let Some(slot) = body.get_mut(position) {
            *slot = byte;
        }
        let mut out = Vec::new();
        drain(execute(&store, &crate::Standalone::new(&store).cluster(), &Caller::client(None), &body, &mut out, &mut Scratch::default()), &mut out);
        proptest::prop_assert!(out.len() >= 30);
    }
}
