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
fn many_bins_in_one_request_keep_each_name_once() {
    // Past a few dozen bins the write path finds bins through a map: bins
    // added, rewritten, removed (which shifts the ones after) and added
    // again in one request must come out as a scan of the bins would.
    let store = store();
    let mut first = Request::new(3);
    for i in 0..100u8 {
        first = first.op(op_type::WRITE, particle::INTEGER, &format!("b{i}"), &[i]);
    }
    first.header.info2 = info2::WRITE;
    assert_eq!(run(&store, &first).result, 0);
    let mut second = Request::new(3)
        .op(op_type::WRITE, particle::NULL, "b10", &[])
        .op(op_type::WRITE, particle::INTEGER, "b99", &[1, 0])
        .op(op_type::WRITE, particle::INTEGER, "new", &[7])
        .op(op_type::WRITE, particle::NULL, "b0", &[])
        .op(op_type::INCR, particle::INTEGER, "new", &[1])
        .op(op_type::WRITE, particle::INTEGER, "b10", &[42])
        .op(op_type::INCR, particle::INTEGER, "b50", &[100]);
    second.header.info2 = info2::WRITE;
    assert_eq!(run(&store, &second).result, 0);
    let reply = run(&store, &get(3));
    let bins: std::collections::HashMap<Vec<u8>, i64> = reply
        .ops
        .iter()
        .map(|(_, _, name, value)| {
            (
                name.clone(),
                i64::from_be_bytes(value[..8].try_into().expect("8 bytes")),
            )
        })
        .collect();
    assert_eq!(
        reply.ops.len(),
        100,
        "100 - b0 + new (b10 removed, then added again)"
    );
    assert_eq!(bins.len(), 100, "no name twice");
    assert!(!bins.contains_key(b"b0".as_slice()));
    assert_eq!(bins[b"b10".as_slice()], 42);
    assert_eq!(bins[b"b99".as_slice()], 256);
    assert_eq!(bins[b"new".as_slice()], 8);
    assert_eq!(bins[b"b50".as_slice()], 150);
    assert_eq!(bins[b"b1".as_slice()], 1);
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
fn strong_consistency_refuses_expunges_unless_allowed() {
    for allow_expunge in [false, true] {
        let mut config = NamespaceConfig::with_name("test");
        config.strong_consistency = true;
        config.strong_consistency_allow_expunge = allow_expunge;
        let store = Store::new(vec![config]);
        let refused = if allow_expunge {
            0
        } else {
            ResultCode::Forbidden.as_u8()
        };
        // A delete, and an operate whose delete op removes the record.
        run(&store, &put(1, "a", particle::STRING, b"x"));
        let mut delete = Request::new(1);
        delete.header.info2 = info2::WRITE | info2::DELETE;
        assert_eq!(run(&store, &delete).result, refused);
        run(&store, &put(2, "a", particle::STRING, b"x"));
        let mut operate = Request::new(2).op(op_type::DELETE, particle::NULL, "", b"");
        operate.header.info2 = info2::WRITE;
        assert_eq!(run(&store, &operate).result, refused);
        // Its last bin removed.
        run(&store, &put(3, "a", particle::STRING, b"x"));
        assert_eq!(
            run(&store, &put(3, "a", particle::NULL, b"")).result,
            refused
        );
        let found = if allow_expunge {
            ResultCode::NotFound.as_u8()
        } else {
            0
        };
        for seed in 1..=3 {
            assert_eq!(run(&store, &get(seed)).result, found, "seed {seed}");
        }
        // Durable, each deletes.
        if !allow_expunge {
            delete.header.info2 |= info2::DURABLE_DELETE;
            assert_eq!(run(&store, &delete).result, 0);
            operate.header.info2 |= info2::DURABLE_DELETE;
            assert_eq!(run(&store, &operate).result, 0);
            let mut last = put(3, "a", particle::NULL, b"");
            last.header.info2 |= info2::DURABLE_DELETE;
            assert_eq!(run(&store, &last).result, 0);
            for seed in 1..=3 {
                assert_eq!(run(&store, &get(seed)).result, ResultCode::NotFound.as_u8());
            }
        }
    }
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

// ---------------------------------------------------------------- typed requests

/// A typed request for record `seed` of test/demo.
fn typed<'a>(seed: u8, action: Action, ops: &'a [bolide_wire::Op<'a>]) -> RecordRequest<'a> {
    RecordRequest {
        namespace: b"test",
        set: Some(b"demo"),
        digest: Digest(Request::new(seed).digest),
        key: None,
        action,
        policy: Policy {
            read: action == Action::Read,
            ..Policy::default()
        },
        ops: Ops::Slice(ops),
        filter: None,
        udf: UdfCall::default(),
    }
}

fn typed_run(store: &Store, request: &RecordRequest<'_>) -> Answer {
    let standalone = crate::Standalone::new(store);
    let mut answer = Answer::default();
    let remote = execute_request(
        store,
        &standalone.cluster(),
        &Caller::client(None),
        request,
        &mut answer,
        &mut Scratch::default(),
    );
    assert!(remote.is_none());
    answer
}

fn op<'a>(op_type: u8, particle_type: u8, name: &'a [u8], value: &'a [u8]) -> bolide_wire::Op<'a> {
    bolide_wire::Op {
        op_type,
        particle_type,
        flags: 0,
        name,
        value,
    }
}

#[test]
fn typed_requests_write_read_operate_and_delete_without_message_bytes() {
    let store = store();
    let seven = 7i64.to_be_bytes();
    let write = [
        op(op_type::WRITE, particle::INTEGER, b"n", &seven),
        op(op_type::WRITE, particle::STRING, b"s", b"text"),
    ];
    let answer = typed_run(&store, &typed(40, Action::Write, &write));
    assert_eq!(answer.code, Some(ResultCode::Ok));
    assert_eq!(answer.generation, 1);
    assert!(answer.bins.is_empty());

    // Operate: an increment and a read of the result, answered in order.
    let three = 3i64.to_be_bytes();
    let operate = [
        op(op_type::INCR, particle::INTEGER, b"n", &three),
        op(op_type::READ, particle::NULL, b"n", &[]),
    ];
    let mut request = typed(40, Action::Write, &operate);
    request.policy.read = true;
    let answer = typed_run(&store, &request);
    assert_eq!(answer.code, Some(ResultCode::Ok));
    assert_eq!(answer.generation, 2);
    assert_eq!(
        answer.bins,
        vec![(
            op_type::READ,
            particle::INTEGER,
            b"n".to_vec(),
            10i64.to_be_bytes().to_vec()
        )]
    );

    // A read of every bin.
    let mut read = typed(40, Action::Read, &[]);
    read.policy.read_all_bins = true;
    let answer = typed_run(&store, &read);
    assert_eq!(answer.code, Some(ResultCode::Ok));
    assert_eq!(answer.bins.len(), 2);
    assert_eq!(
        answer.bins[1],
        (
            op_type::READ,
            particle::STRING,
            b"s".to_vec(),
            b"text".to_vec()
        )
    );

    // A list op through the value algebra, as a Redis RPUSH would send it.
    let payload = [0x92, 0x01, 0x05]; // [APPEND, 5]
    let append = [op(op_type::CDT_MODIFY, particle::NULL, b"l", &payload)];
    let answer = typed_run(&store, &typed(40, Action::Write, &append));
    assert_eq!(
        answer.bins,
        vec![(
            op_type::CDT_MODIFY,
            particle::INTEGER,
            b"l".to_vec(),
            1i64.to_be_bytes().to_vec()
        )]
    );

    // Policies: create-only on an existing record, a generation check.
    let mut create = typed(40, Action::Write, &write);
    create.policy.create_only = true;
    assert_eq!(
        typed_run(&store, &create).code,
        Some(ResultCode::RecordExists)
    );
    let mut checked = typed(40, Action::Write, &write);
    checked.policy.generation_equal = true;
    checked.policy.generation = 1;
    assert_eq!(
        typed_run(&store, &checked).code,
        Some(ResultCode::Generation)
    );

    // Delete, then the read answers not found.
    let mut delete = typed(40, Action::Write, &[]);
    delete.policy.delete = true;
    assert_eq!(typed_run(&store, &delete).code, Some(ResultCode::Ok));
    let answer = typed_run(&store, &read);
    assert_eq!(answer.code, Some(ResultCode::NotFound));
    assert!(answer.bins.is_empty());

    // A batch: rows answer on their own, in order.
    let mut rows = vec![typed(40, Action::Write, &write), read.clone(), read.clone()];
    rows[2].digest = Digest([0xee; 20]);
    let answers: Vec<Option<ResultCode>> = execute_batch(
        &store,
        &crate::Standalone::new(&store).cluster(),
        &Caller::client(None),
        &rows,
        &mut Scratch::default(),
    )
    .into_iter()
    .map(|row| match row {
        Row::Answered(answer) => answer.code,
        Row::Remote(_) => None,
    })
    .collect();
    assert_eq!(
        answers,
        vec![
            Some(ResultCode::Ok),
            Some(ResultCode::Ok),
            Some(ResultCode::NotFound)
        ]
    );

    let mut elsewhere = typed(40, Action::Read, &[]);
    elsewhere.namespace = b"nope";
    assert_eq!(
        typed_run(&store, &elsewhere).code,
        Some(ResultCode::Namespace)
    );
}

#[test]
fn typed_requests_answer_the_same_frames_as_their_messages() {
    // The same request as message bytes through `execute` and as a typed
    // request through `execute_request` with the Aerospike reply sink:
    // byte-identical answers, state by state.
    let store_bytes = store();
    let store_typed = store();
    let seven = 7i64.to_be_bytes();
    let payload = [0x93, 0x01, 0x05, 0x00]; // [APPEND, 5, 0]
    let write = [
        op(op_type::WRITE, particle::INTEGER, b"n", &seven),
        op(op_type::CDT_MODIFY, particle::NULL, b"l", &payload),
        op(op_type::READ, particle::NULL, b"n", &[]),
    ];
    let mut requests = Vec::new();
    let mut operate = typed(41, Action::Write, &write);
    operate.policy.read = true;
    operate.policy.respond_all_ops = true;
    operate.key = Some(Key::Typed(particle::STRING, b"user-key"));
    requests.push(operate.clone());
    let mut read = typed(41, Action::Read, &[]);
    read.policy.read_all_bins = true;
    requests.push(read.clone());
    let mut exists = typed(41, Action::Read, &[]);
    exists.policy.metadata_only = true;
    requests.push(exists);
    let mut mismatch = read.clone();
    mismatch.key = Some(Key::Typed(particle::STRING, b"other"));
    requests.push(mismatch);
    let mut create = operate.clone();
    create.policy.create_only = true;
    requests.push(create);
    let mut delete = typed(41, Action::Write, &[]);
    delete.policy.delete = true;
    requests.push(delete);
    requests.push(read);
    for request in &requests {
        let standalone = crate::Standalone::new(&store_bytes);
        let mut from_bytes = Vec::new();
        let _ = execute(
            &store_bytes,
            &standalone.cluster(),
            &Caller::client(None),
            &request.encode(),
            &mut from_bytes,
            &mut Scratch::default(),
        );
        let standalone = crate::Standalone::new(&store_typed);
        let mut from_typed = Vec::new();
        let mut reply = WireReply::new(&mut from_typed, Framing::Message);
        let remote = execute_request(
            &store_typed,
            &standalone.cluster(),
            &Caller::client(None),
            request,
            &mut reply,
            &mut Scratch::default(),
        );
        assert!(remote.is_none());
        assert_eq!(from_typed, from_bytes, "{request:?}");
        assert!(Message::decode(&from_typed[8..]).is_ok());
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// A request encoded as a message decodes to the same request.
    #[test]
    fn typed_requests_round_trip_through_messages(
        action in proptest::sample::select(vec![Action::Read, Action::Write, Action::Udf]),
        bits in proptest::collection::vec(proptest::bool::ANY, 14),
        generation in proptest::prelude::any::<u32>(),
        ttl in proptest::prelude::any::<u32>(),
        timeout_ms in proptest::prelude::any::<u32>(),
        set in proptest::option::of(proptest::collection::vec(b'a'..=b'z', 1..8)),
        key in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..12)),
        filter in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 1..12)),
        ops in proptest::collection::vec(
            (1u8..17, proptest::prelude::any::<u8>(), proptest::collection::vec(b'a'..=b'z', 0..15),
             proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20)),
            0..5,
        ),
    ) {
        let ops: Vec<bolide_wire::Op<'_>> = ops
            .iter()
            .map(|(op_type, particle_type, name, value)| op(*op_type, *particle_type, name, value))
            .collect();
        let udf = if action == Action::Udf {
            UdfCall { module: Some(b"m"), function: Some(b"f"), args: Some(&[0x90]) }
        } else {
            UdfCall::default()
        };
        let request = RecordRequest {
            namespace: b"test",
            set: set.as_deref(),
            digest: Digest([9; 20]),
            key: key.as_deref().map(Key::Field),
            action,
            policy: Policy {
                read: bits[0] || action == Action::Read,
                read_all_bins: bits[1],
                metadata_only: bits[2],
                respond_all_ops: bits[3],
                delete: bits[4],
                durable_delete: bits[5],
                create_only: bits[6],
                update_only: bits[7],
                create_or_replace: bits[8],
                replace_only: bits[9],
                generation_equal: bits[10],
                generation_greater: bits[11],
                generation,
                commit_master: bits[12],
                ttl,
                timeout_ms,
                read_mode_sc: 0,
            },
            ops: Ops::Slice(&ops),
            filter: filter.as_deref(),
            udf,
        };
        let body = request.encode();
        let message = Message::decode(&body).expect("decodes");
        let decoded = RecordRequest::from_message(&message).expect("a request");
        proptest::prop_assert_eq!(decoded.namespace, request.namespace);
        proptest::prop_assert_eq!(decoded.set, request.set);
        proptest::prop_assert_eq!(decoded.digest, request.digest);
        proptest::prop_assert_eq!(decoded.key, request.key);
        proptest::prop_assert_eq!(decoded.action, request.action);
        proptest::prop_assert_eq!(decoded.policy, request.policy);
        proptest::prop_assert_eq!(decoded.filter, request.filter);
        proptest::prop_assert_eq!(decoded.udf, request.udf);
        proptest::prop_assert_eq!(decoded.ops.iter().collect::<Vec<_>>(), ops);
    }
}
