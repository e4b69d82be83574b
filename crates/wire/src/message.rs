//! AS_MSG (proto type 3): a 22-byte header, then fields, then ops.
//!
//! ```text
//! msg offset  size  field
//!  0          1     header size (22)
//!  1          1     info1        (read flags)
//!  2          1     info2        (write flags)
//!  3          1     info3        (more flags)
//!  4          1     info4        (transaction flags)
//!  5          1     result code
//!  6          4     generation
//! 10          4     record ttl   (request: ttl; response: void time)
//! 14          4     transaction ttl (ms)
//! 18          2     n_fields
//! 20          2     n_ops
//! field:  u32 size (1 + data) · u8 type · data
//! op:     u32 size (4 + name + value) · u8 op type · u8 particle · u8 flags · u8 name_len · name · value
//! ```
//!
//! Decoding validates that fields and ops exactly fill the body, so every
//! later access is in bounds, and allocates nothing.

use crate::ProtoError;

pub const MSG_HEADER_BYTES: usize = 22;

pub mod info1 {
    pub const READ: u8 = 0x01;
    pub const GET_ALL: u8 = 0x02;
    pub const SHORT_QUERY: u8 = 0x04;
    pub const BATCH: u8 = 0x08;
    pub const NO_BIN_DATA: u8 = 0x20;
    pub const COMPRESS_RESPONSE: u8 = 0x80;
}

pub mod info2 {
    pub const WRITE: u8 = 0x01;
    pub const DELETE: u8 = 0x02;
    pub const GENERATION: u8 = 0x04;
    pub const GENERATION_GT: u8 = 0x08;
    pub const DURABLE_DELETE: u8 = 0x10;
    pub const CREATE_ONLY: u8 = 0x20;
    pub const RESPOND_ALL_OPS: u8 = 0x80;
}

pub mod info3 {
    pub const LAST: u8 = 0x01;
    pub const COMMIT_MASTER: u8 = 0x02;
    pub const PARTITION_DONE: u8 = 0x04;
    pub const UPDATE_ONLY: u8 = 0x08;
    pub const CREATE_OR_REPLACE: u8 = 0x10;
    pub const REPLACE_ONLY: u8 = 0x20;
}

pub mod field_type {
    pub const NAMESPACE: u8 = 0;
    pub const SET: u8 = 1;
    pub const KEY: u8 = 2;
    pub const RECORD_VERSION: u8 = 3;
    pub const DIGEST: u8 = 4;
    pub const TXN_ID: u8 = 5;
    pub const TXN_DEADLINE: u8 = 6;
    pub const TASK_ID: u8 = 7;
    pub const SOCKET_TIMEOUT: u8 = 9;
    pub const RECORDS_PER_SECOND: u8 = 10;
    pub const PID_ARRAY: u8 = 11;
    pub const DIGEST_ARRAY: u8 = 12;
    pub const MAX_RECORDS: u8 = 13;
    pub const BVAL_ARRAY: u8 = 15;
    pub const INDEX_NAME: u8 = 21;
    pub const INDEX_RANGE: u8 = 22;
    pub const INDEX_CONTEXT: u8 = 23;
    pub const INDEX_EXPRESSION: u8 = 24;
    pub const INDEX_TYPE: u8 = 26;
    pub const UDF_FILENAME: u8 = 30;
    pub const UDF_FUNCTION: u8 = 31;
    pub const UDF_ARGLIST: u8 = 32;
    pub const UDF_OP: u8 = 33;
    pub const QUERY_BINLIST: u8 = 40;
    pub const BATCH_INDEX: u8 = 41;
    pub const BATCH_INDEX_WITH_SET: u8 = 42;
    pub const FILTER_EXPRESSION: u8 = 43;
}

pub mod op_type {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const CDT_READ: u8 = 3;
    pub const CDT_MODIFY: u8 = 4;
    pub const INCR: u8 = 5;
    pub const EXP_READ: u8 = 7;
    pub const EXP_MODIFY: u8 = 8;
    pub const APPEND: u8 = 9;
    pub const PREPEND: u8 = 10;
    pub const TOUCH: u8 = 11;
    pub const BIT_READ: u8 = 12;
    pub const BIT_MODIFY: u8 = 13;
    pub const DELETE: u8 = 14;
    pub const HLL_READ: u8 = 15;
    pub const HLL_MODIFY: u8 = 16;
}

/// The fixed 22-byte AS_MSG header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsgHeader {
    pub info1: u8,
    pub info2: u8,
    pub info3: u8,
    pub info4: u8,
    pub result_code: u8,
    pub generation: u32,
    pub record_ttl: u32,
    pub transaction_ttl: u32,
    pub n_fields: u16,
    pub n_ops: u16,
}

/// The fields of a message, by type. Repeated known fields keep the last
/// occurrence; the first unknown type is remembered so the caller can
/// reject it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields<'a> {
    pub namespace: Option<&'a [u8]>,
    pub set: Option<&'a [u8]>,
    pub key: Option<&'a [u8]>,
    pub digest: Option<&'a [u8]>,
    pub task_id: Option<&'a [u8]>,
    pub socket_timeout: Option<&'a [u8]>,
    pub records_per_second: Option<&'a [u8]>,
    pub pid_array: Option<&'a [u8]>,
    pub digest_array: Option<&'a [u8]>,
    pub max_records: Option<&'a [u8]>,
    pub batch: Option<&'a [u8]>,
    pub batch_with_set: bool,
    pub filter_expression: Option<&'a [u8]>,
    /// Any UDF field (30–33) is present.
    pub udf: bool,
    pub udf_filename: Option<&'a [u8]>,
    pub udf_function: Option<&'a [u8]>,
    pub udf_arglist: Option<&'a [u8]>,
    pub udf_op: Option<&'a [u8]>,
    pub transaction: bool,
    /// Any secondary-index query field (15, 21–26, 40) is present.
    pub secondary_index: bool,
    pub bval_array: Option<&'a [u8]>,
    pub index_name: Option<&'a [u8]>,
    pub index_range: Option<&'a [u8]>,
    pub index_context: Option<&'a [u8]>,
    pub index_expression: Option<&'a [u8]>,
    pub index_type: Option<&'a [u8]>,
    pub unknown_type: Option<u8>,
}

/// A decoded AS_MSG borrowing the request bytes.
#[derive(Clone, Copy, Debug)]
pub struct Message<'a> {
    pub header: MsgHeader,
    pub fields: Fields<'a>,
    ops: &'a [u8],
}

/// One bin operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op<'a> {
    pub op_type: u8,
    pub particle_type: u8,
    pub flags: u8,
    pub name: &'a [u8],
    pub value: &'a [u8],
}

/// Iterates the ops of a validated message.
#[derive(Clone, Debug)]
pub struct OpIter<'a> {
    rest: &'a [u8],
}

impl<'a> Message<'a> {
    /// Decodes an AS_MSG body (everything after the 8-byte proto header).
    pub fn decode(body: &'a [u8]) -> Result<Message<'a>, ProtoError> {
        let (header, rest) = decode_header(body)?;
        let (message, rest) = Message::decode_parts(header, rest)?;
        if !rest.is_empty() {
            return Err(ProtoError::TrailingBytes { bytes: rest.len() });
        }
        Ok(message)
    }

    /// Decodes `header.n_fields` fields and `header.n_ops` ops from the
    /// front of `bytes` (a batch row carries them without a full header);
    /// returns the message and the bytes after it.
    pub fn decode_parts(
        header: MsgHeader,
        bytes: &'a [u8],
    ) -> Result<(Message<'a>, &'a [u8]), ProtoError> {
        let mut rest = bytes;
        let mut fields = Fields::default();
        for i in 0..header.n_fields {
            let last = i + 1 == header.n_fields && header.n_ops == 0;
            let (field_kind, data, after) = match split_field(rest) {
                Ok(parts) => parts,
                Err(error) => overlong_batch_field(rest, &fields, last).ok_or(error)?,
            };
            fields.assign(field_kind, data);
            rest = after;
        }
        let ops_start = rest;
        for _ in 0..header.n_ops {
            let (_, after) = split_op(rest)?;
            rest = after;
        }
        let ops = ops_start
            .get(..ops_start.len() - rest.len())
            .ok_or(ProtoError::Truncated { what: "ops" })?;
        Ok((
            Message {
                header,
                fields,
                ops,
            },
            rest,
        ))
    }

    /// The message's ops, in request order.
    pub fn ops(&self) -> OpIter<'a> {
        OpIter { rest: self.ops }
    }
}

impl<'a> Iterator for OpIter<'a> {
    type Item = Op<'a>;

    #[inline]
    fn next(&mut self) -> Option<Op<'a>> {
        // Already validated by Message::decode, so this never fails there;
        // on arbitrary input it stops instead.
        let (op, after) = split_op(self.rest).ok()?;
        self.rest = after;
        Some(op)
    }
}

impl<'a> Fields<'a> {
    fn assign(&mut self, field_kind: u8, data: &'a [u8]) {
        use field_type::*;
        match field_kind {
            NAMESPACE => self.namespace = Some(data),
            SET => self.set = Some(data),
            KEY => self.key = Some(data),
            DIGEST => self.digest = Some(data),
            TASK_ID => self.task_id = Some(data),
            SOCKET_TIMEOUT => self.socket_timeout = Some(data),
            RECORDS_PER_SECOND => self.records_per_second = Some(data),
            PID_ARRAY => self.pid_array = Some(data),
            DIGEST_ARRAY => self.digest_array = Some(data),
            MAX_RECORDS => self.max_records = Some(data),
            BATCH_INDEX => self.batch = Some(data),
            BATCH_INDEX_WITH_SET => {
                self.batch = Some(data);
                self.batch_with_set = true;
            }
            FILTER_EXPRESSION => self.filter_expression = Some(data),
            UDF_FILENAME | UDF_FUNCTION | UDF_ARGLIST | UDF_OP => {
                self.udf = true;
                match field_kind {
                    UDF_FILENAME => self.udf_filename = Some(data),
                    UDF_FUNCTION => self.udf_function = Some(data),
                    UDF_ARGLIST => self.udf_arglist = Some(data),
                    _ => self.udf_op = Some(data),
                }
            }
            RECORD_VERSION | TXN_ID | TXN_DEADLINE => self.transaction = true,
            BVAL_ARRAY | INDEX_NAME | INDEX_RANGE | INDEX_CONTEXT | INDEX_EXPRESSION
            | INDEX_TYPE | QUERY_BINLIST => {
                self.secondary_index = true;
                match field_kind {
                    BVAL_ARRAY => self.bval_array = Some(data),
                    INDEX_NAME => self.index_name = Some(data),
                    INDEX_RANGE => self.index_range = Some(data),
                    INDEX_CONTEXT => self.index_context = Some(data),
                    INDEX_EXPRESSION => self.index_expression = Some(data),
                    INDEX_TYPE => self.index_type = Some(data),
                    _ => {}
                }
            }
            other => {
                if self.unknown_type.is_none() {
                    self.unknown_type = Some(other);
                }
            }
        }
    }
}

/// Decodes the 22-byte header and returns it with the bytes after it.
pub fn decode_header(body: &[u8]) -> Result<(MsgHeader, &[u8]), ProtoError> {
    let Some((head, rest)) = body.split_first_chunk::<MSG_HEADER_BYTES>() else {
        return Err(ProtoError::Truncated {
            what: "AS_MSG header",
        });
    };
    let [header_bytes, info1, info2, info3, info4, result_code, g0, g1, g2, g3, r0, r1, r2, r3, t0, t1, t2, t3, f0, f1, o0, o1] =
        *head;
    if usize::from(header_bytes) != MSG_HEADER_BYTES {
        return Err(ProtoError::BadMsgHeader { header_bytes });
    }
    let header = MsgHeader {
        info1,
        info2,
        info3,
        info4,
        result_code,
        generation: u32::from_be_bytes([g0, g1, g2, g3]),
        record_ttl: u32::from_be_bytes([r0, r1, r2, r3]),
        transaction_ttl: u32::from_be_bytes([t0, t1, t2, t3]),
        n_fields: u16::from_be_bytes([f0, f1]),
        n_ops: u16::from_be_bytes([o0, o1]),
    };
    Ok((header, rest))
}

/// Splits one field off the front: (type, data, rest).
pub fn split_field(bytes: &[u8]) -> Result<(u8, &[u8], &[u8]), ProtoError> {
    let Some((size, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(ProtoError::Truncated { what: "field size" });
    };
    let size = u32::from_be_bytes(*size) as usize;
    if size == 0 {
        return Err(ProtoError::EmptyField);
    }
    if rest.len() < size {
        return Err(ProtoError::Truncated { what: "field" });
    }
    let (field, after) = rest.split_at(size);
    let Some((&kind, data)) = field.split_first() else {
        return Err(ProtoError::EmptyField);
    };
    Ok((kind, data, after))
}

/// The official clients write a batch's BATCH_INDEX field size as
/// everything after the AS_MSG header, so with a filter expression (whose
/// field comes first) the size is too long by exactly that field's size.
/// The server tolerates it; so does Bolide, for a last batch field overrunning
/// the message by exactly the filter field, and nothing else.
fn overlong_batch_field<'a>(
    bytes: &'a [u8],
    fields: &Fields<'a>,
    last: bool,
) -> Option<(u8, &'a [u8], &'a [u8])> {
    let filter = fields.filter_expression?;
    let (size, rest) = bytes.split_first_chunk::<4>()?;
    let (&kind, data) = rest.split_first()?;
    if !last
        || !matches!(
            kind,
            field_type::BATCH_INDEX | field_type::BATCH_INDEX_WITH_SET
        )
    {
        return None;
    }
    let declared = (u32::from_be_bytes(*size) as usize).checked_sub(1)?;
    let overrun = declared.checked_sub(data.len())?;
    (overrun == FIELD_HEADER_BYTES + filter.len()).then_some((kind, data, &[]))
}

/// Bytes before a field's data: u32 size and the type byte.
const FIELD_HEADER_BYTES: usize = 5;

/// Splits one op off the front: (op, rest).
#[inline]
pub fn split_op(bytes: &[u8]) -> Result<(Op<'_>, &[u8]), ProtoError> {
    let Some((size, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(ProtoError::Truncated { what: "op size" });
    };
    let size = u32::from_be_bytes(*size) as usize;
    if size < 4 || rest.len() < size {
        return Err(ProtoError::Truncated { what: "op" });
    }
    let (op, after) = rest.split_at(size);
    let Some((&[op_type, particle_type, flags, name_len], tail)) = op.split_first_chunk::<4>()
    else {
        return Err(ProtoError::Truncated { what: "op header" });
    };
    let name_len = usize::from(name_len);
    if tail.len() < name_len {
        return Err(ProtoError::BadOpSize);
    }
    let (name, value) = tail.split_at(name_len);
    Ok((
        Op {
            op_type,
            particle_type,
            flags,
            name,
            value,
        },
        after,
    ))
}

/// Appends a field (size, type, data) to `out`.
pub fn encode_field(out: &mut Vec<u8>, field_kind: u8, data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32 + 1).to_be_bytes());
    out.push(field_kind);
    out.extend_from_slice(data);
}

/// Appends an op to `out`.
pub fn encode_op(out: &mut Vec<u8>, op_type: u8, particle_type: u8, name: &[u8], value: &[u8]) {
    let size = 4 + name.len() + value.len();
    out.extend_from_slice(&(size as u32).to_be_bytes());
    out.extend_from_slice(&[op_type, particle_type, 0, name.len() as u8]);
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Appends a 22-byte AS_MSG header to `out`.
pub fn encode_header(out: &mut Vec<u8>, header: &MsgHeader) {
    out.push(MSG_HEADER_BYTES as u8);
    out.extend_from_slice(&[
        header.info1,
        header.info2,
        header.info3,
        header.info4,
        header.result_code,
    ]);
    out.extend_from_slice(&header.generation.to_be_bytes());
    out.extend_from_slice(&header.record_ttl.to_be_bytes());
    out.extend_from_slice(&header.transaction_ttl.to_be_bytes());
    out.extend_from_slice(&header.n_fields.to_be_bytes());
    out.extend_from_slice(&header.n_ops.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference put of ("test","demo","k1") bin1="hello", body only.
    fn reference_put_body() -> Vec<u8> {
        let hex = "1600010000000000000000000000000003e80003000100000005007465737400000005\
                   0164656d6f0000001504b747f5854d0b33259928d0cfab7fad81d6abfbf60000000d\
                   0203000462696e3168656c6c6f";
        let hex: String = hex.split_whitespace().collect();
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn decodes_reference_put() {
        let body = reference_put_body();
        assert_eq!(body.len(), 82);
        let message = Message::decode(&body).expect("valid put");
        assert_eq!(message.header.info2, info2::WRITE);
        assert_eq!(message.header.transaction_ttl, 1000);
        assert_eq!(message.fields.namespace, Some(&b"test"[..]));
        assert_eq!(message.fields.set, Some(&b"demo"[..]));
        assert_eq!(message.fields.digest.map(<[u8]>::len), Some(20));
        let ops: Vec<Op<'_>> = message.ops().collect();
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].op_type, op_type::WRITE);
        assert_eq!(ops[0].particle_type, 3);
        assert_eq!(ops[0].name, b"bin1");
        assert_eq!(ops[0].value, b"hello");
    }

    #[test]
    fn encode_decode_round_trip() {
        let header = MsgHeader {
            info1: 3,
            n_fields: 2,
            n_ops: 1,
            generation: 7,
            ..MsgHeader::default()
        };
        let mut out = Vec::new();
        encode_header(&mut out, &header);
        encode_field(&mut out, field_type::NAMESPACE, b"test");
        encode_field(&mut out, field_type::DIGEST, &[9u8; 20]);
        encode_op(&mut out, op_type::READ, 1, b"a", &5i64.to_be_bytes());
        let message = Message::decode(&out).expect("round trip");
        assert_eq!(message.header, header);
        assert_eq!(message.fields.digest, Some(&[9u8; 20][..]));
        let op = message.ops().next().expect("one op");
        assert_eq!(op.value, 5i64.to_be_bytes());
    }

    /// A batch whose BATCH_INDEX size counts the filter field before it,
    /// as the official clients write it: accepted for exactly that overrun.
    #[test]
    fn tolerates_a_batch_field_too_long_by_the_filter_field() {
        let message = |overrun: u32, n_ops: u16| {
            let header = MsgHeader {
                info1: info1::BATCH,
                n_fields: 2,
                n_ops,
                ..MsgHeader::default()
            };
            let mut out = Vec::new();
            encode_header(&mut out, &header);
            encode_field(&mut out, field_type::FILTER_EXPRESSION, &[0xc3]);
            let rows = [0u8, 0, 0, 1, 0, 1, 2, 3];
            out.extend_from_slice(&(1 + rows.len() as u32 + overrun).to_be_bytes());
            out.push(field_type::BATCH_INDEX);
            out.extend_from_slice(&rows);
            out
        };
        let exact = message(6, 0);
        let decoded = Message::decode(&exact).expect("tolerated");
        assert_eq!(decoded.fields.batch.map(<[u8]>::len), Some(8));
        assert_eq!(decoded.fields.filter_expression, Some(&[0xc3][..]));
        assert!(Message::decode(&message(0, 0)).is_ok());
        for bad in [message(5, 0), message(7, 0), message(6, 1)] {
            assert!(Message::decode(&bad).is_err());
        }
    }

    #[test]
    fn rejects_truncation_and_trailing_bytes() {
        let body = reference_put_body();
        for cut in 0..body.len() {
            assert!(
                Message::decode(&body[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        let mut longer = body.clone();
        longer.push(0);
        assert_eq!(
            Message::decode(&longer).err(),
            Some(ProtoError::TrailingBytes { bytes: 1 })
        );
    }
}
