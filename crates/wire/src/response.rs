//! Builds AS_MSG responses in place in an output buffer.
//!
//! A response is begun with its header, ops are appended, and `finish`
//! patches the proto size and op count, so nothing is built twice.

use crate::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use crate::message::{encode_header, encode_op, MsgHeader, MSG_HEADER_BYTES};

/// Writes one AS_MSG response into a caller-owned buffer.
pub struct ResponseWriter<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    framed: bool,
    n_fields: u16,
    n_ops: u16,
}

/// Whether a response is a message of its own or a row inside a batch or
/// scan stream (no proto header; the caller frames the rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// A complete proto frame.
    Message,
    /// An AS_MSG without proto header; `transaction_ttl` carries the batch
    /// row index.
    Row { index: u32 },
}

impl<'o> ResponseWriter<'o> {
    /// Begins a response with the given header values (counts are filled in
    /// by `finish`).
    pub fn begin(out: &'o mut Vec<u8>, header: &MsgHeader) -> ResponseWriter<'o> {
        ResponseWriter::begin_framed(out, header, Framing::Message)
    }

    /// Begins a response framed as asked.
    pub fn begin_framed(
        out: &'o mut Vec<u8>,
        header: &MsgHeader,
        framing: Framing,
    ) -> ResponseWriter<'o> {
        let start = out.len();
        let mut header = MsgHeader {
            n_fields: 0,
            n_ops: 0,
            ..*header
        };
        let framed = match framing {
            Framing::Message => {
                out.extend_from_slice(&[0u8; PROTO_HEADER_BYTES]);
                true
            }
            Framing::Row { index } => {
                header.transaction_ttl = index;
                false
            }
        };
        encode_header(out, &header);
        ResponseWriter {
            out,
            start,
            framed,
            n_fields: 0,
            n_ops: 0,
        }
    }

    /// Appends a field; fields must come before ops.
    pub fn field(&mut self, field_kind: u8, data: &[u8]) {
        assert_eq!(self.n_ops, 0, "fields must precede ops");
        crate::message::encode_field(self.out, field_kind, data);
        self.n_fields += 1;
    }

    /// Appends one bin op.
    #[inline]
    pub fn op(&mut self, op_type: u8, particle_type: u8, name: &[u8], value: &[u8]) {
        encode_op(self.out, op_type, particle_type, name, value);
        self.n_ops += 1;
    }

    /// Appends `count` already-encoded ops.
    pub fn encoded_ops(&mut self, ops: &[u8], count: u16) {
        self.out.extend_from_slice(ops);
        self.n_ops += count;
    }

    /// Ops written so far.
    pub fn n_ops(&self) -> u16 {
        self.n_ops
    }

    /// Patches sizes and counts.
    pub fn finish(self) {
        let header_at = if self.framed {
            self.start + PROTO_HEADER_BYTES
        } else {
            self.start
        };
        if self.framed {
            let body = self.out.len() - header_at;
            let proto = ProtoHeader::encode(MessageType::Message, body);
            if let Some(slot) = self.out.get_mut(self.start..header_at) {
                slot.copy_from_slice(&proto);
            }
        }
        let counts_at = header_at + MSG_HEADER_BYTES - 4;
        if let Some(slot) = self.out.get_mut(counts_at..counts_at + 4) {
            let [f0, f1] = self.n_fields.to_be_bytes();
            let [o0, o1] = self.n_ops.to_be_bytes();
            slot.copy_from_slice(&[f0, f1, o0, o1]);
        }
    }
}

/// Appends a header-only response carrying just a result code.
pub fn append_result(out: &mut Vec<u8>, result_code: u8) {
    append_result_framed(out, result_code, Framing::Message);
}

/// Appends a header-only response carrying just a result code, framed as asked.
pub fn append_result_framed(out: &mut Vec<u8>, result_code: u8, framing: Framing) {
    let header = MsgHeader {
        result_code,
        ..MsgHeader::default()
    };
    ResponseWriter::begin_framed(out, &header, framing).finish();
}

/// Starts a proto frame whose body the caller appends (streams of rows);
/// returns the offset to pass to [`finish_frame`].
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; PROTO_HEADER_BYTES]);
    start
}

/// Patches the size of a frame begun with [`begin_frame`].
pub fn finish_frame(out: &mut [u8], start: usize) {
    let body = out.len().saturating_sub(start + PROTO_HEADER_BYTES);
    let proto = ProtoHeader::encode(MessageType::Message, body);
    if let Some(slot) = out.get_mut(start..start + PROTO_HEADER_BYTES) {
        slot.copy_from_slice(&proto);
    }
}

/// Appends the 24-byte admin reply a server without security sends:
/// result 52 (security not enabled), no fields.
pub fn append_admin_not_enabled(out: &mut Vec<u8>) {
    out.extend_from_slice(&ProtoHeader::encode(MessageType::Admin, 16));
    let mut body = [0u8; 16];
    body[1] = bolide_types::ResultCode::SecurityNotEnabled.as_u8();
    out.extend_from_slice(&body);
}

/// Appends an info response frame around `body`.
pub fn append_info(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(&ProtoHeader::encode(MessageType::Info, body.len()));
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_get_response_bytes() {
        let mut out = Vec::new();
        let mut writer = ResponseWriter::begin(
            &mut out,
            &MsgHeader {
                generation: 1,
                ..MsgHeader::default()
            },
        );
        writer.op(1, 3, b"bin1", b"hello");
        writer.finish();
        let expected: [u8; 47] = [
            0x02, 0x03, 0, 0, 0, 0, 0, 0x27, 0x16, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0x0d, 0x01, 0x03, 0, 0x04, b'b', b'i', b'n', b'1', b'h',
            b'e', b'l', b'l', b'o',
        ];
        assert_eq!(out, expected);
    }

    #[test]
    fn reference_not_found_and_admin_replies() {
        let mut out = Vec::new();
        append_result(&mut out, 2);
        assert_eq!(out.len(), 30);
        assert_eq!(out[13], 2);
        let mut admin = Vec::new();
        append_admin_not_enabled(&mut admin);
        assert_eq!(admin.len(), 24);
        assert_eq!(&admin[..10], &[2, 2, 0, 0, 0, 0, 0, 0x10, 0, 0x34]);
    }
}
