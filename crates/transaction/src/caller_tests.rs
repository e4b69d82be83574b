//! The caller hook sits on every path: a policy that refuses everything
//! and writes down what it was asked gets asked by a single read, write,
//! delete and read-write, a record UDF, each batch row, a scan, a
//! secondary-index query, an aggregation and both kinds of background
//! job, with the permission, namespace and set each needs; and each
//! answers 81 without doing its work.

use super::*;
use crate::caller::{Caller, Permission, Policy};
use bolide_store::NamespaceConfig;
use bolide_types::particle;
use bolide_wire::message::{encode_field, encode_header, encode_op};
use bolide_wire::{field_type, op_type};
use std::sync::{Arc, Mutex};

/// What the policy was asked: (permission, namespace, set).
type Asked = Vec<(Permission, Option<String>, Option<Vec<u8>>)>;

/// Refuses everything and records each question.
#[derive(Default)]
struct RefuseAll {
    asked: Mutex<Asked>,
}

impl Policy for RefuseAll {
    fn check(
        &self,
        _caller: &Caller,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
    ) -> Result<(), ResultCode> {
        if let Ok(mut asked) = self.asked.lock() {
            asked.push((
                permission,
                namespace.map(str::to_owned),
                set.map(<[u8]>::to_vec),
            ));
        }
        Err(ResultCode::RoleViolation)
    }
}

fn store() -> Store {
    Store::new(vec![NamespaceConfig::with_name("test")])
}

/// A message on `test`/`demo` with these header bits, extra fields and ops.
fn message(
    info1: u8,
    info2: u8,
    digest: Option<[u8; 20]>,
    fields: &[(u8, &[u8])],
    ops: &[(u8, u8, &str, &[u8])],
) -> Vec<u8> {
    let mut body = Vec::new();
    let n_fields = 2 + u16::from(digest.is_some()) + fields.len() as u16;
    encode_header(
        &mut body,
        &MsgHeader {
            info1,
            info2,
            n_fields,
            n_ops: ops.len() as u16,
            ..MsgHeader::default()
        },
    );
    encode_field(&mut body, field_type::NAMESPACE, b"test");
    encode_field(&mut body, field_type::SET, b"demo");
    if let Some(digest) = digest {
        encode_field(&mut body, field_type::DIGEST, &digest);
    }
    for (kind, data) in fields {
        encode_field(&mut body, *kind, data);
    }
    for (op, particle_type, name, value) in ops {
        encode_op(&mut body, *op, *particle_type, name.as_bytes(), value);
    }
    body
}

/// Runs `body` for `caller` to its end: every answer frame, and what the
/// policy was asked.
fn run(store: &Store, caller: &Caller, body: &[u8]) -> Vec<u8> {
    let standalone = crate::Standalone::new(store);
    let mut out = Vec::new();
    let outcome = execute(
        store,
        &standalone.cluster(),
        caller,
        body,
        &mut out,
        &mut Scratch::default(),
    );
    match outcome {
        Outcome::Answered => {}
        Outcome::Stream(mut job) => {
            let mut rounds = 0;
            while !job.fill(&mut out) {
                rounds += 1;
                assert!(rounds < 10_000, "stream job never finished");
            }
        }
        Outcome::Remote(_) => panic!("a node alone needs no other node"),
    }
    out
}

/// The result codes of every message in `out` (proto frames of one or
/// more messages each).
fn result_codes(out: &[u8]) -> Vec<u8> {
    let mut codes = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let (_, total) = bolide_wire::frame_length(rest)
            .expect("valid frame")
            .expect("complete frame");
        let mut body = &rest[8..total];
        while !body.is_empty() {
            let (header, rest) = bolide_wire::message::decode_header(body).expect("message header");
            let (_, rest) = Message::decode_parts(header, rest).expect("message");
            codes.push(header.result_code);
            body = rest;
        }
        rest = &rest[total..];
    }
    codes
}

fn refusing() -> (Arc<RefuseAll>, Caller) {
    let policy = Arc::new(RefuseAll::default());
    let caller = Caller::with_policy(None, policy.clone());
    (policy, caller)
}

fn asked(policy: &RefuseAll) -> Asked {
    std::mem::take(&mut *policy.asked.lock().expect("lock"))
}

fn on_demo(permission: Permission) -> (Permission, Option<String>, Option<Vec<u8>>) {
    (permission, Some("test".to_owned()), Some(b"demo".to_vec()))
}

const ROLE_VIOLATION: u8 = ResultCode::RoleViolation as u8;

#[test]
fn single_record_requests_ask_for_what_they_do() {
    let store = store();
    let (policy, caller) = refusing();
    let digest = Some([7u8; 20]);
    let put = message(
        0,
        info2::WRITE,
        digest,
        &[],
        &[(
            op_type::WRITE,
            particle::INTEGER,
            "a",
            &[0, 0, 0, 0, 0, 0, 0, 1],
        )],
    );
    let get = message(info1::READ | info1::GET_ALL, 0, digest, &[], &[]);
    let delete = message(0, info2::WRITE | info2::DELETE, digest, &[], &[]);
    let operate = message(
        info1::READ,
        info2::WRITE,
        digest,
        &[],
        &[
            (
                op_type::WRITE,
                particle::INTEGER,
                "a",
                &[0, 0, 0, 0, 0, 0, 0, 2],
            ),
            (op_type::READ, 0, "a", &[]),
        ],
    );
    let udf = message(
        0,
        info2::WRITE,
        digest,
        &[
            (field_type::UDF_FILENAME, b"module"),
            (field_type::UDF_FUNCTION, b"function"),
            (field_type::UDF_ARGLIST, &[0x90]),
        ],
        &[],
    );
    for (body, expected) in [
        (&put, vec![on_demo(Permission::Write)]),
        (&get, vec![on_demo(Permission::Read)]),
        (&delete, vec![on_demo(Permission::Delete)]),
        // The first refusal answers: the read is not asked about.
        (&operate, vec![on_demo(Permission::Write)]),
        (&udf, vec![on_demo(Permission::UdfApply)]),
    ] {
        assert_eq!(result_codes(&run(&store, &caller, body)), [ROLE_VIOLATION]);
        assert_eq!(asked(&policy), expected);
    }
    // Nothing was written.
    let open = Caller::client(None);
    let codes = result_codes(&run(&store, &open, &get));
    assert_eq!(codes, [ResultCode::NotFound.as_u8()]);
    // An open caller is never refused.
    assert_eq!(result_codes(&run(&store, &open, &put)), [0]);
    assert_eq!(result_codes(&run(&store, &open, &get)), [0]);
}

/// A batch of `rows` rows on test/demo (new row format, each with its own
/// header bits and the namespace and set fields).
fn batch(rows: &[(u8, u8)]) -> Vec<u8> {
    let mut index = Vec::new();
    index.extend_from_slice(&(rows.len() as u32).to_be_bytes());
    index.push(0);
    for (row, (info1, info2)) in rows.iter().enumerate() {
        index.extend_from_slice(&(row as u32).to_be_bytes());
        index.extend_from_slice(&[row as u8 + 1; 20]);
        // Row flags 0x02: info1, info2 and info3 follow.
        index.push(0x02);
        index.extend_from_slice(&[*info1, *info2, 0]);
        index.extend_from_slice(&2u16.to_be_bytes());
        let ops: u16 = if info2 & info2::WRITE != 0 { 1 } else { 0 };
        index.extend_from_slice(&ops.to_be_bytes());
        encode_field(&mut index, field_type::NAMESPACE, b"test");
        encode_field(&mut index, field_type::SET, b"demo");
        if ops == 1 {
            encode_op(
                &mut index,
                op_type::WRITE,
                particle::INTEGER,
                b"a",
                &[0, 0, 0, 0, 0, 0, 0, 3],
            );
        }
    }
    let mut body = Vec::new();
    encode_header(
        &mut body,
        &MsgHeader {
            info1: info1::BATCH,
            n_fields: 1,
            ..MsgHeader::default()
        },
    );
    encode_field(&mut body, field_type::BATCH_INDEX, &index);
    body
}

#[test]
fn each_batch_row_is_checked() {
    let store = store();
    let (policy, caller) = refusing();
    let body = batch(&[(info1::READ | info1::GET_ALL, 0), (0, info2::WRITE)]);
    let codes = result_codes(&run(&store, &caller, &body));
    // Two rows refused, then the LAST message.
    assert_eq!(codes, [ROLE_VIOLATION, ROLE_VIOLATION, 0]);
    assert_eq!(
        asked(&policy),
        [on_demo(Permission::Read), on_demo(Permission::Write)]
    );
    let codes = result_codes(&run(&store, &Caller::client(None), &body));
    assert_eq!(codes, [ResultCode::NotFound.as_u8(), 0, 0]);
}

#[test]
fn scans_queries_aggregations_and_background_jobs_are_checked_at_their_start() {
    let store = store();
    let (policy, caller) = refusing();
    let write_op = [(op_type::WRITE, particle::INTEGER, "a", &[0u8; 8][..])];
    let cases = [
        (message(info1::READ, 0, None, &[], &[]), Permission::Query),
        (
            message(
                info1::READ,
                0,
                None,
                &[(field_type::INDEX_RANGE, &[1, 1, b'a', 1, 0, 0, 0, 0])],
                &[],
            ),
            Permission::Query,
        ),
        (
            message(
                info1::READ,
                0,
                None,
                &[
                    (field_type::UDF_OP, &[1]),
                    (field_type::UDF_FILENAME, b"module"),
                    (field_type::UDF_FUNCTION, b"function"),
                ],
                &[],
            ),
            Permission::UdfQuery,
        ),
        (
            message(
                0,
                info2::WRITE,
                None,
                &[
                    (field_type::UDF_OP, &[2]),
                    (field_type::UDF_FILENAME, b"module"),
                    (field_type::UDF_FUNCTION, b"function"),
                ],
                &[],
            ),
            Permission::UdfQuery,
        ),
        (
            message(0, info2::WRITE, None, &[], &write_op),
            Permission::OpsQuery,
        ),
    ];
    for (body, permission) in cases {
        // One LAST message carrying the refusal.
        assert_eq!(result_codes(&run(&store, &caller, &body)), [ROLE_VIOLATION]);
        assert_eq!(asked(&policy), [on_demo(permission)]);
    }
    // An open caller's scan runs (an empty namespace: just LAST, result 0).
    let scan = message(info1::READ, 0, None, &[], &[]);
    assert_eq!(
        result_codes(&run(&store, &Caller::client(None), &scan)),
        [0]
    );
}
