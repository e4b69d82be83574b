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
    n_fields: u16,
    n_ops: u16,
}

impl<'o> ResponseWriter<'o> {
    /// Begins a response with the given header values (counts are filled in
    /// by `finish`).
    pub fn begin(out: &'o mut Vec<u8>, header: &MsgHeader) -> ResponseWriter<'o> {
        let start = out.len();
        out.extend_from_slice(&[0u8; PROTO_HEADER_BYTES]);
        encode_header(
            out,
            &MsgHeader {
                n_fields: 0,
                n_ops: 0,
                ..*header
            },
        );
        ResponseWriter {
            out,
            start,
            n_fields: 0,
            n_ops: 0,
        }
    }

    /// Appends a field; fields must come before ops.
    pub fn field(&mut self, field_kind: u8, data: &[u8]) {
        debug_assert_eq!(self.n_ops, 0);
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
        let body = self.out.len() - self.start - PROTO_HEADER_BYTES;
        let proto = ProtoHeader::encode(MessageType::Message, body);
        let header_at = self.start + PROTO_HEADER_BYTES;
        if let Some(slot) = self.out.get_mut(self.start..header_at) {
            slot.copy_from_slice(&proto);
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
pub fn append_result(out: &mut Vec<u8>, result_code: u8, generation: u32, void_time: u32) {
    let header = MsgHeader {
        result_code,
        generation,
        record_ttl: void_time,
        ..MsgHeader::default()
    };
    ResponseWriter::begin(out, &header).finish();
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
        append_result(&mut out, 2, 0, 0);
        assert_eq!(out.len(), 30);
        assert_eq!(out[13], 2);
        let mut admin = Vec::new();
        append_admin_not_enabled(&mut admin);
        assert_eq!(admin.len(), 24);
        assert_eq!(&admin[..10], &[2, 2, 0, 0, 0, 0, 0, 0x10, 0, 0x34]);
    }
}
