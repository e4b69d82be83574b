//! What the server sends back, parsed strictly: proto frames, the AS_MSG
//! messages inside them (one per single-record answer, many per batch or
//! scan chunk), info text, admin replies. Every check fails with a message
//! naming what is wrong.

use bolide_types::ResultCode;
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_wire::message::{decode_header, split_field, split_op, MsgHeader};
use bolide_wire::{field_type, info3};

/// One answer frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Info(Vec<u8>),
    Admin(Vec<u8>),
    Messages(Vec<Answer>),
}

/// One AS_MSG answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub header: MsgHeader,
    /// (type, data) in order.
    pub fields: Vec<(u8, Vec<u8>)>,
    /// (op type, particle type, name, value) in order.
    pub ops: Vec<(u8, u8, Vec<u8>, Vec<u8>)>,
}

impl Answer {
    pub fn is_last(&self) -> bool {
        self.header.info3 & info3::LAST != 0
    }

    pub fn field(&self, kind: u8) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(field_kind, _)| *field_kind == kind)
            .map(|(_, data)| data.as_slice())
    }
}

/// Splits `bytes` into frames and checks each one.
pub fn frames(mut bytes: &[u8]) -> Result<Vec<Frame>, String> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let head = bytes
            .first_chunk::<PROTO_HEADER_BYTES>()
            .ok_or_else(|| format!("{} trailing bytes, not a frame header", bytes.len()))?;
        let header =
            ProtoHeader::decode(head).map_err(|error| format!("bad answer header: {error}"))?;
        if head[0] != 2 {
            return Err(format!("answer with proto version {}", head[0]));
        }
        let total = PROTO_HEADER_BYTES + header.body_bytes;
        let body = bytes
            .get(PROTO_HEADER_BYTES..total)
            .ok_or_else(|| format!("frame of {total} bytes cut at {}", bytes.len()))?;
        frames.push(match header.message_type {
            MessageType::Info => Frame::Info(info_answer(body)?),
            MessageType::Admin => Frame::Admin(admin_answer(body)?),
            MessageType::Message => Frame::Messages(messages(body)?),
            MessageType::Compressed => return Err("the server sent a compressed frame".into()),
        });
        bytes = bytes.get(total..).unwrap_or_default();
    }
    Ok(frames)
}

/// The messages of one type-3 frame body, which they must fill exactly.
pub fn messages(mut body: &[u8]) -> Result<Vec<Answer>, String> {
    if body.is_empty() {
        return Err("empty message frame".into());
    }
    let mut answers = Vec::new();
    while !body.is_empty() {
        let (header, mut rest) =
            decode_header(body).map_err(|error| format!("bad answer message: {error}"))?;
        known_result(header.result_code)?;
        let mut answer = Answer {
            header,
            fields: Vec::new(),
            ops: Vec::new(),
        };
        for _ in 0..header.n_fields {
            let (kind, data, after) =
                split_field(rest).map_err(|error| format!("bad answer field: {error}"))?;
            answer.fields.push((kind, data.to_vec()));
            rest = after;
        }
        for _ in 0..header.n_ops {
            let (op, after) = split_op(rest).map_err(|error| format!("bad answer op: {error}"))?;
            answer.ops.push((
                op.op_type,
                op.particle_type,
                op.name.to_vec(),
                op.value.to_vec(),
            ));
            rest = after;
        }
        answers.push(answer);
        body = rest;
    }
    Ok(answers)
}

/// Info answers are lines `name\tvalue\n` (or a bare value line).
fn info_answer(body: &[u8]) -> Result<Vec<u8>, String> {
    if !body.is_empty() && body.last() != Some(&b'\n') {
        return Err("info answer does not end with a newline".into());
    }
    Ok(body.to_vec())
}

/// The one admin reply: 16 bytes, result 52 (security not enabled).
fn admin_answer(body: &[u8]) -> Result<Vec<u8>, String> {
    if body.len() != 16 || body.get(1) != Some(&ResultCode::SecurityNotEnabled.as_u8()) {
        return Err(format!("unexpected admin answer {body:?}"));
    }
    Ok(body.to_vec())
}

/// Whether `code` is one of the result codes the server may answer.
pub fn known_result(code: u8) -> Result<(), String> {
    if ResultCode::ALL.iter().any(|known| known.as_u8() == code) {
        Ok(())
    } else {
        Err(format!("unknown result code {code}"))
    }
}

/// Checks a stream's messages (a scan or batch answer): each non-final
/// message is a record or row, exactly the last one carries LAST.
pub fn check_stream(answers: &[Answer]) -> Result<(), String> {
    let (last, rows) = answers
        .split_last()
        .ok_or_else(|| "stream answered nothing".to_owned())?;
    if !last.is_last() {
        return Err("stream does not end with LAST".into());
    }
    if let Some(position) = rows.iter().position(Answer::is_last) {
        return Err(format!(
            "LAST in the middle of a stream (message {position})"
        ));
    }
    Ok(())
}

/// Checks one scan record: result 0, namespace and digest fields.
pub fn check_scan_record(answer: &Answer) -> Result<(), String> {
    if answer.header.result_code != 0 {
        return Err(format!(
            "scan record with result {}",
            answer.header.result_code
        ));
    }
    if answer.field(field_type::NAMESPACE).is_none() {
        return Err("scan record without a namespace".into());
    }
    match answer.field(field_type::DIGEST) {
        Some(digest) if digest.len() == 20 => Ok(()),
        _ => Err("scan record without a 20-byte digest".into()),
    }
}
