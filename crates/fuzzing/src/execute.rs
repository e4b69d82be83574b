//! Decode and execute: any bytes as an AS_MSG body (what follows the proto
//! header of a type-3 frame), run by the transaction layer against the
//! fixture node; stream jobs run to their end.

use crate::answers::{self, check_scan_record, check_stream, Answer, Frame};
use crate::fixture;
use bolide_transaction::{Outcome, Scratch};
use bolide_types::ResultCode;
use bolide_wire::message::{decode_header, split_field};
use bolide_wire::{field_type, info1, Message};

/// A stream job must finish within this many chunks (the fixture is small;
/// a batch of 100,000 rows fits in far fewer).
const CHUNKS_MAX: usize = 100_000;

/// What kind of answer a request must get.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// Not a message: one answer, result 4.
    Malformed,
    /// A batch of `rows` rows.
    Batch { rows: u32 },
    /// A scan or query: records, then LAST.
    Scan,
    /// One record: one answer.
    Record,
}

/// Runs `body` and checks the answer; panics with the reason if a property
/// does not hold.
pub fn check(body: &[u8]) {
    let node = fixture::node();
    let body = without_throttle(body);
    let mut out = Vec::new();
    let outcome = fixture::execute_here(&node, &body, &mut out, &mut Scratch::default());
    assert!(
        !matches!(outcome, Outcome::Remote(_)),
        "a node alone needs no other node"
    );
    if let Outcome::Stream(mut job) = outcome {
        // Only a query answers part of its records inline before it
        // streams the rest.
        assert!(
            out.is_empty() || is_query(&body),
            "a stream job after an inline answer"
        );
        let mut chunks = 0;
        loop {
            chunks += 1;
            assert!(chunks <= CHUNKS_MAX, "stream job did not end");
            let start = out.len();
            let finished = job.fill(&mut out);
            assert!(out.len() > start, "stream job filled an empty chunk");
            if finished {
                break;
            }
        }
    }
    if let Err(reason) = check_answer(&body, &out) {
        panic!("{reason}\nrequest: {body:02x?}\nanswer: {out:02x?}");
    }
}

/// Checks the answer `out` to the request `body`.
pub fn check_answer(body: &[u8], out: &[u8]) -> Result<(), String> {
    let frames = answers::frames(out)?;
    let mut messages: Vec<Answer> = Vec::new();
    for frame in frames.iter() {
        match frame {
            Frame::Messages(list) => messages.extend(list.iter().cloned()),
            other => return Err(format!("a message answered with {other:?}")),
        }
    }
    match expectation(body) {
        Expect::Malformed => {
            one_answer(&frames, &messages)?;
            code_is(&messages, ResultCode::Parameter)
        }
        Expect::Record => one_answer(&frames, &messages),
        Expect::Scan => {
            check_stream(&messages)?;
            let records = messages.split_last().map_or(&[][..], |(_, rest)| rest);
            records.iter().try_for_each(check_scan_record)
        }
        Expect::Batch { rows } => {
            check_stream(&messages)?;
            let Some((last, answered)) = messages.split_last() else {
                return Err("batch answered nothing".into());
            };
            if last.header.result_code == 0 && answered.len() != rows as usize {
                return Err(format!(
                    "batch of {rows} rows answered {} and ended OK",
                    answered.len()
                ));
            }
            if answered.len() > rows as usize {
                return Err(format!("batch of {rows} rows answered {}", answered.len()));
            }
            Ok(())
        }
    }
}

fn one_answer(frames: &[Frame], messages: &[Answer]) -> Result<(), String> {
    if frames.len() != 1 || messages.len() != 1 {
        return Err(format!(
            "a single-record request answered {} frames, {} messages",
            frames.len(),
            messages.len()
        ));
    }
    Ok(())
}

fn code_is(messages: &[Answer], code: ResultCode) -> Result<(), String> {
    match messages.first() {
        Some(answer) if answer.header.result_code == code.as_u8() => Ok(()),
        other => Err(format!("expected result {}, got {other:?}", code.as_u8())),
    }
}

/// Whether the request is a secondary-index query (an INDEX_RANGE field).
fn is_query(body: &[u8]) -> bool {
    Message::decode(body).is_ok_and(|message| message.fields.index_range.is_some())
}

/// What the request is, decided independently of the server's own routing
/// where it can be (the batch row count comes from the BATCH_INDEX field).
fn expectation(body: &[u8]) -> Expect {
    let Ok(message) = Message::decode(body) else {
        return Expect::Malformed;
    };
    if message.header.info1 & info1::BATCH != 0 {
        let rows = message
            .fields
            .batch
            .and_then(|field| field.first_chunk::<4>())
            .map_or(0, |count| u32::from_be_bytes(*count));
        return Expect::Batch { rows };
    }
    if message.fields.digest.is_none() {
        return Expect::Scan;
    }
    Expect::Record
}

/// A copy of `body` whose RECORDS_PER_SECOND fields are zero: a throttled
/// scan sleeps in real time, which a fuzzer must not wait for. (Throttling
/// itself is covered by the Python tests.)
pub fn without_throttle(body: &[u8]) -> Vec<u8> {
    let mut copy = body.to_vec();
    let Ok((header, mut rest)) = decode_header(body) else {
        return copy;
    };
    for _ in 0..header.n_fields {
        let Ok((kind, data, after)) = split_field(rest) else {
            break;
        };
        if kind == field_type::RECORDS_PER_SECOND {
            let at = body.len() - after.len() - data.len();
            if let Some(slot) = copy.get_mut(at..at + data.len()) {
                slot.fill(0);
            }
        }
        rest = after;
    }
    copy
}
