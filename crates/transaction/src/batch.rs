//! Batch (info1 BATCH): many single-record commands in one request, each
//! row answered with its own result, in a stream ended by a LAST message.
//!
//! ```text
//! BATCH_INDEX field: u32 row count · u8 parent flags · rows
//! row: u32 index · 20-byte digest · u8 row flags · [row body]
//!   flags 0x01 REPEAT: no body, reuse the previous row's body with this digest
//!   flags 0x00 (old): u8 info1 · u16 n_fields · u16 n_ops · fields · ops
//!   otherwise: u8 info1 · [u8 info2 · u8 info3 if 0x02] · [u8 info4 if 0x10]
//!              · [u16 generation if 0x04] · [u32 ttl if 0x08] · u16 n_fields · u16 n_ops · fields · ops
//! ```

use crate::caller::Caller;
use crate::cluster::{Cluster, Remote};
use crate::{append_last, execute_record, Outcome, Scratch, StreamJob, CHUNK_BYTES};
use bolide_cluster::routing::Gates;
use bolide_cluster::Routing;
use bolide_particles::expression::Expr;
use bolide_store::{Namespace, Store};
use bolide_types::ResultCode;
use bolide_wire::message::{encode_field, encode_header, MsgHeader};
use bolide_wire::response::{begin_frame, finish_frame};
use bolide_wire::{field_type, info3, Framing, Message, ResponseWriter};
use std::sync::Arc;

/// Carries out a batch row's work on other nodes from a blocking thread
/// (the server implements it over the fabric).
pub trait RemoteRunner: Send + Sync {
    /// Does `remote` and returns the row's answer, framed as its request
    /// asked (an error answer if it could not be done in time).
    fn run_blocking(&self, remote: Remote) -> Vec<u8>;
}

/// Most rows one batch may carry (more → BATCH_MAX_REQUESTS).
pub const BATCH_ROWS_MAX: u32 = 100_000;
/// Batches with at most this many rows are answered inline on the event loop.
const INLINE_ROWS_MAX: u32 = 32;

const ROW_REPEAT: u8 = 0x01;
const ROW_INFO: u8 = 0x02;
const ROW_GENERATION: u8 = 0x04;
const ROW_TTL: u8 = 0x08;
const ROW_INFO4: u8 = 0x10;

/// A batch in progress.
pub struct BatchJob {
    namespaces: Vec<Arc<Namespace>>,
    body: Vec<u8>,
    position: usize,
    rows_left: u32,
    previous: Option<(usize, u8)>,
    /// The parent's filter, for rows without their own.
    filter: Option<Expr>,
    scratch: Scratch,
    /// Answered within `execute` (the caller waits for durability);
    /// otherwise each chunk waits before it is handed out.
    inline: bool,
    routing: Arc<Routing>,
    gates: Arc<Gates>,
    /// Runs rows other nodes must serve (None: such rows answer 11).
    remote: Option<Arc<dyn RemoteRunner>>,
    /// The parent's filter expression, for rows proxied elsewhere.
    parent_filter: Option<Vec<u8>>,
    /// Who asked: each row is checked as a request of its own.
    caller: Caller,
}

pub fn start(
    store: &Store,
    cluster: &Cluster<'_>,
    caller: &Caller,
    body: &[u8],
    message: &Message<'_>,
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Outcome {
    let Some(batch) = message.fields.batch else {
        append_last(out, ResultCode::Parameter);
        return Outcome::Answered;
    };
    let filter = match message
        .fields
        .filter_expression
        .map(bolide_particles::expression::parse)
        .transpose()
    {
        Ok(filter) => filter,
        Err(code) => {
            append_last(out, code);
            return Outcome::Answered;
        }
    };
    let Some((count, rest)) = batch.split_first_chunk::<4>() else {
        append_last(out, ResultCode::Parameter);
        return Outcome::Answered;
    };
    let count = u32::from_be_bytes(*count);
    if count == 0 || rest.is_empty() {
        append_last(out, ResultCode::Parameter);
        return Outcome::Answered;
    }
    if count > BATCH_ROWS_MAX {
        append_last(out, ResultCode::BatchMaxRequests);
        return Outcome::Answered;
    }
    // Rows start after the count and the parent flags byte.
    let rows_at = (batch.as_ptr() as usize - body.as_ptr() as usize) + 5;
    let mut job = BatchJob {
        namespaces: store.namespaces().to_vec(),
        body: body.to_vec(),
        position: rows_at,
        rows_left: count,
        previous: None,
        filter,
        scratch: Scratch::default(),
        // In a cluster a row may need other nodes: every batch runs where
        // it may block.
        inline: count <= INLINE_ROWS_MAX && cluster.routing.members.len() <= 1,
        routing: Arc::clone(cluster.routing),
        gates: Arc::clone(cluster.gates),
        remote: cluster.runner.cloned(),
        parent_filter: message.fields.filter_expression.map(<[u8]>::to_vec),
        caller: caller.clone(),
    };
    if job.inline {
        std::mem::swap(&mut job.scratch, scratch);
        while !job.fill(out) {}
        std::mem::swap(&mut job.scratch, scratch);
        return Outcome::Answered;
    }
    Outcome::Stream(Box::new(job))
}

impl StreamJob for BatchJob {
    fn fill(&mut self, out: &mut Vec<u8>) -> bool {
        let frame = begin_frame(out);
        while self.rows_left > 0 && out.len() - frame < CHUNK_BYTES {
            if self.row(out).is_err() {
                // The rest of the request cannot be parsed: end the batch.
                self.rows_left = 0;
                append_last_row(out, ResultCode::Parameter);
                finish_frame(out, frame);
                return true;
            }
            self.rows_left -= 1;
        }
        let finished = self.rows_left == 0;
        if finished {
            append_last_row(out, ResultCode::Ok);
        }
        finish_frame(out, frame);
        if !self.inline {
            // This runs on a blocking-pool thread: wait here until the
            // chunk's writes are durable (commit-to-device).
            for wait in self.scratch.take_commit_waits() {
                if wait.wait_blocking().is_err() {
                    // The device failed: answer nothing more than the code.
                    out.truncate(frame);
                    append_last(out, ResultCode::Unknown);
                    return true;
                }
            }
        }
        finished
    }
}

impl BatchJob {
    /// Executes the next row, appending its answer.
    fn row(&mut self, out: &mut Vec<u8>) -> Result<(), ()> {
        let body = &self.body;
        let at = self.position;
        let head = body.get(at..at + 25).ok_or(())?;
        let (index, rest) = head.split_first_chunk::<4>().ok_or(())?;
        let index = u32::from_be_bytes(*index);
        let (digest, flags) = rest.split_at(20);
        let flags = *flags.first().ok_or(())?;
        let (body_at, body_flags) = if flags & ROW_REPEAT != 0 {
            self.position = at + 25;
            self.previous.ok_or(())?
        } else {
            (at + 25, flags)
        };
        let row_body = body.get(body_at..).ok_or(())?;
        let (mut message, after) = decode_row(row_body, body_flags)?;
        if flags & ROW_REPEAT == 0 {
            self.previous = Some((body_at, flags));
            self.position = body.len() - after.len();
        }
        message.fields.digest = Some(digest);
        let framing = Framing::Row { index };
        let raw = fields_and_ops(row_body, body_flags, after);
        let found = message.fields.namespace.and_then(|name| {
            self.namespaces
                .iter()
                .enumerate()
                .find(|(_, ns)| ns.name().as_bytes() == name)
        });
        let Some((ns_index, namespace)) = found else {
            bolide_wire::response::append_result_framed(
                out,
                ResultCode::Namespace.as_u8(),
                framing,
            );
            return Ok(());
        };
        let parent_filter = match message.fields.filter_expression {
            Some(_) => None,
            None => self.parent_filter.as_deref(),
        };
        let keep = || row_request(&message.header, digest, raw, parent_filter);
        let cluster = Cluster::new(&self.routing, &self.gates);
        let remote = execute_record(
            &cluster,
            &self.caller,
            ns_index,
            namespace,
            &message,
            self.filter.as_ref(),
            out,
            &mut self.scratch,
            framing,
            &keep,
        );
        if let Some(remote) = remote {
            match &self.remote {
                Some(runner) => out.extend_from_slice(&runner.run_blocking(remote)),
                None => bolide_wire::response::append_result_framed(
                    out,
                    ResultCode::Unavailable.as_u8(),
                    framing,
                ),
            }
        }
        Ok(())
    }
}

/// The raw fields and ops of a row body (after its header bits).
fn fields_and_ops<'a>(row_body: &'a [u8], flags: u8, after: &[u8]) -> &'a [u8] {
    let mut header_bytes = 1 + 4;
    if flags != 0 {
        if flags & ROW_INFO != 0 {
            header_bytes += 2;
        }
        if flags & ROW_INFO4 != 0 {
            header_bytes += 1;
        }
        if flags & ROW_GENERATION != 0 {
            header_bytes += 2;
        }
        if flags & ROW_TTL != 0 {
            header_bytes += 4;
        }
    }
    let end = row_body.len().saturating_sub(after.len());
    row_body.get(header_bytes..end).unwrap_or_default()
}

/// A batch row as a message of its own (to run on another node): its
/// header, its digest, its fields and ops, and the parent's filter when
/// it has none of its own.
fn row_request(
    header: &MsgHeader,
    digest: &[u8],
    raw: &[u8],
    parent_filter: Option<&[u8]>,
) -> Vec<u8> {
    let mut header = *header;
    header.n_fields += 1 + u16::from(parent_filter.is_some());
    let mut body = Vec::with_capacity(64 + raw.len());
    encode_header(&mut body, &header);
    encode_field(&mut body, field_type::DIGEST, digest);
    if let Some(filter) = parent_filter {
        encode_field(&mut body, field_type::FILTER_EXPRESSION, filter);
    }
    body.extend_from_slice(raw);
    body
}

/// Parses a row body into a message (header bits from the row).
fn decode_row(bytes: &[u8], flags: u8) -> Result<(Message<'_>, &[u8]), ()> {
    let mut reader = Reader { bytes };
    let mut header = MsgHeader {
        info1: reader.u8()?,
        ..MsgHeader::default()
    };
    if flags != 0 {
        if flags & ROW_INFO != 0 {
            header.info2 = reader.u8()?;
            header.info3 = reader.u8()?;
        }
        if flags & ROW_INFO4 != 0 {
            header.info4 = reader.u8()?;
        }
        if flags & ROW_GENERATION != 0 {
            header.generation = u32::from(reader.u16()?);
        }
        if flags & ROW_TTL != 0 {
            header.record_ttl = reader.u32()?;
        }
    }
    header.n_fields = reader.u16()?;
    header.n_ops = reader.u16()?;
    Message::decode_parts(header, reader.bytes).map_err(|_| ())
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, ()> {
        let (&first, rest) = self.bytes.split_first().ok_or(())?;
        self.bytes = rest;
        Ok(first)
    }

    fn u16(&mut self) -> Result<u16, ()> {
        let (two, rest) = self.bytes.split_first_chunk::<2>().ok_or(())?;
        self.bytes = rest;
        Ok(u16::from_be_bytes(*two))
    }

    fn u32(&mut self) -> Result<u32, ()> {
        let (four, rest) = self.bytes.split_first_chunk::<4>().ok_or(())?;
        self.bytes = rest;
        Ok(u32::from_be_bytes(*four))
    }
}

fn append_last_row(out: &mut Vec<u8>, code: ResultCode) {
    let header = MsgHeader {
        info3: info3::LAST,
        result_code: code.as_u8(),
        ..MsgHeader::default()
    };
    ResponseWriter::begin_framed(out, &header, Framing::Row { index: 0 }).finish();
}
