//! The transaction layer: one AS_MSG request in, one response out.
//!
//! `execute` decodes the message, routes it to its namespace and partition,
//! runs its ops under the partition lock (reads under the read lock, writes
//! under the write lock, so two writes to one record never interleave) and
//! encodes the answer into the connection's output buffer. It runs to
//! completion on the calling thread and never blocks on I/O.
//!
//! Depends on `bolide-types`, `bolide-wire` and `bolide-store`; knows nothing
//! of sockets.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

mod ops;
mod read;
mod ttl;
mod write;

use bolide_store::{Namespace, Store};
use bolide_types::{Digest, ResultCode, DIGEST_BYTES};
use bolide_wire::message::MsgHeader;
use bolide_wire::response::append_result;
use bolide_wire::{info1, info2, info3, Message, ResponseWriter};
use std::sync::atomic::Ordering::Relaxed;

/// Buffers a connection reuses across requests, so the hot path allocates
/// as little as possible.
#[derive(Default)]
pub struct Scratch {
    record: Vec<u8>,
    results: Vec<u8>,
}

/// What kind of transaction a request was, for statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Delete,
    Other,
}

/// Runs one AS_MSG request (the body after the proto header) and appends
/// exactly one response frame to `out`.
pub fn execute(store: &Store, body: &[u8], out: &mut Vec<u8>, scratch: &mut Scratch) {
    let message = match Message::decode(body) {
        Ok(message) => message,
        Err(_) => {
            append_result(out, ResultCode::Parameter.as_u8(), 0, 0);
            return;
        }
    };
    if message.header.info1 & info1::BATCH != 0 || message.fields.digest.is_none() {
        // Batch and scan/query arrive with issue 5; answer as a finished
        // stream so clients raise a clear error instead of waiting.
        let header = MsgHeader {
            info3: info3::LAST,
            result_code: ResultCode::UnsupportedFeature.as_u8(),
            ..MsgHeader::default()
        };
        ResponseWriter::begin(out, &header).finish();
        return;
    }
    let Some(namespace) = message
        .fields
        .namespace
        .and_then(|name| store.namespace(name))
    else {
        append_result(out, ResultCode::Namespace.as_u8(), 0, 0);
        return;
    };
    let start = out.len();
    let kind = kind_of(&message.header);
    let result = route(namespace, &message, out, scratch);
    let code = match result {
        Ok(()) => ResultCode::Ok,
        Err(code) => {
            out.truncate(start);
            append_result(out, code.as_u8(), 0, 0);
            code
        }
    };
    count(namespace, kind, code);
}

fn route(
    namespace: &Namespace,
    message: &Message<'_>,
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Result<(), ResultCode> {
    let fields = &message.fields;
    if fields.unknown_type.is_some() {
        return Err(ResultCode::Parameter);
    }
    if fields.udf || fields.filter_expression.is_some() || fields.transaction {
        return Err(ResultCode::UnsupportedFeature);
    }
    let digest = fields.digest.ok_or(ResultCode::Parameter)?;
    let digest: [u8; DIGEST_BYTES] = digest.try_into().map_err(|_| ResultCode::Parameter)?;
    let digest = Digest(digest);
    let header = &message.header;
    if header.info2 & info2::WRITE != 0 {
        write::execute(namespace, &digest, message, out, scratch)
    } else if header.info1 & info1::READ != 0 {
        read::execute(namespace, &digest, message, out)
    } else {
        Err(ResultCode::Parameter)
    }
}

/// The KEY field: one key-type byte, then the value.
fn split_key(field: &[u8]) -> Result<(u8, &[u8]), ResultCode> {
    field
        .split_first()
        .map(|(&key_type, value)| (key_type, value))
        .ok_or(ResultCode::Parameter)
}

/// A request carrying its user key must match the key stored with the
/// record (when one was stored): else KEY_MISMATCH.
fn check_key(message: &Message<'_>, stored: Option<(u8, &[u8])>) -> Result<(), ResultCode> {
    let Some(field) = message.fields.key else {
        return Ok(());
    };
    let requested = split_key(field)?;
    match stored {
        Some(stored) if stored != requested => Err(ResultCode::KeyMismatch),
        _ => Ok(()),
    }
}

/// A request naming a set must name the record's set (the digest includes
/// the set, so a mismatch means a digest collision or a confused client).
fn check_set(namespace: &Namespace, message: &Message<'_>, set_id: u16) -> Result<(), ResultCode> {
    match message.fields.set {
        Some(set) if !set.is_empty() => {
            let record_set = namespace
                .set_name(set_id)
                .map(str::as_bytes)
                .unwrap_or_default();
            if record_set == set {
                Ok(())
            } else {
                Err(ResultCode::Parameter)
            }
        }
        _ => Ok(()),
    }
}

fn kind_of(header: &MsgHeader) -> Kind {
    if header.info2 & info2::WRITE != 0 {
        if header.info2 & info2::DELETE != 0 {
            Kind::Delete
        } else {
            Kind::Write
        }
    } else if header.info1 & info1::READ != 0 {
        Kind::Read
    } else {
        Kind::Other
    }
}

fn count(namespace: &Namespace, kind: Kind, code: ResultCode) {
    let stats = &namespace.stats;
    let counter = match (kind, code) {
        (Kind::Read, ResultCode::Ok) => &stats.client_read_success,
        (Kind::Read, ResultCode::NotFound) => &stats.client_read_not_found,
        (Kind::Read | Kind::Other, _) => &stats.client_read_error,
        (Kind::Write, ResultCode::Ok) => &stats.client_write_success,
        (Kind::Write, _) => &stats.client_write_error,
        (Kind::Delete, ResultCode::Ok) => &stats.client_delete_success,
        (Kind::Delete, ResultCode::NotFound) => &stats.client_delete_not_found,
        (Kind::Delete, _) => &stats.client_delete_error,
    };
    counter.fetch_add(1, Relaxed);
    match code {
        ResultCode::Generation => stats.fail_generation.fetch_add(1, Relaxed),
        ResultCode::RecordTooBig => stats.fail_record_too_big.fetch_add(1, Relaxed),
        ResultCode::OutOfSpace => stats.fail_out_of_space.fetch_add(1, Relaxed),
        _ => 0,
    };
}

#[cfg(test)]
mod tests;
