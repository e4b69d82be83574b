//! Aerospike requests and replies, encoded with `bolide-wire`.
//!
//! Keys are integers: digest = RIPEMD-160(set ‖ 0x01 ‖ key as 8 bytes BE).
//! Reads ask for all bins (info1 READ|GET_ALL, no ops); writes send one
//! WRITE op per bin; scans (YCSB E) are partition scans of the key's
//! partition limited to the scan length (info3 PARTITION_DONE, PID_ARRAY,
//! MAX_RECORDS), answered as a stream ending in a message with info3 LAST.

use crate::codec::{bin_name, Codec, Reply, Request, ValueSource};
use crate::config::BinSpec;
use crate::stats::Outcome;
use bolide_types::{particle, Digest, ResultCode, DIGEST_BYTES};
use bolide_wire::message::{
    decode_header, encode_field, encode_header, encode_op, split_field, split_op,
};
use bolide_wire::{field_type, frame_length, info1, info2, info3, op_type, MessageType, MsgHeader};
use bolide_wire::{ProtoHeader, PROTO_HEADER_BYTES};
use ripemd::{Digest as _, Ripemd160};

/// Key type byte of an integer key in the digest.
const KEY_TYPE_INTEGER: u8 = 1;

pub struct AerospikeCodec {
    namespace: Vec<u8>,
    set: Vec<u8>,
    bin_names: Vec<Vec<u8>>,
    values: ValueSource,
    transaction_ttl_milliseconds: u32,
    task_id: u64,
    /// info3 of reads: the strong-consistency read mode bits.
    read_info3: u8,
}

impl AerospikeCodec {
    pub fn new(
        namespace: &str,
        set: &str,
        values: ValueSource,
        timeout_milliseconds: u32,
    ) -> AerospikeCodec {
        let bin_names = (0..values.bins().len())
            .map(|index| bin_name(index).into_bytes())
            .collect();
        AerospikeCodec {
            namespace: namespace.as_bytes().to_vec(),
            set: set.as_bytes().to_vec(),
            bin_names,
            values,
            transaction_ttl_milliseconds: timeout_milliseconds,
            task_id: 0,
            read_info3: 0,
        }
    }

    /// Reads carry these info3 bits (0x40 linearize, 0x80 relax).
    pub fn with_read_info3(mut self, bits: u8) -> AerospikeCodec {
        self.read_info3 = bits;
        self
    }

    fn begin(out: &mut Vec<u8>, header: &MsgHeader) -> usize {
        let start = out.len();
        out.extend_from_slice(&[0u8; PROTO_HEADER_BYTES]);
        encode_header(out, header);
        start
    }

    fn finish(out: &mut [u8], start: usize) {
        let body_bytes = out.len() - start - PROTO_HEADER_BYTES;
        out[start..start + PROTO_HEADER_BYTES]
            .copy_from_slice(&ProtoHeader::encode(MessageType::Message, body_bytes));
    }

    fn encode_read(&self, digest: &Digest, out: &mut Vec<u8>) {
        let header = MsgHeader {
            info1: info1::READ | info1::GET_ALL,
            info3: self.read_info3,
            transaction_ttl: self.transaction_ttl_milliseconds,
            n_fields: 3,
            ..MsgHeader::default()
        };
        let start = Self::begin(out, &header);
        encode_field(out, field_type::NAMESPACE, &self.namespace);
        encode_field(out, field_type::SET, &self.set);
        encode_field(out, field_type::DIGEST, &digest.0);
        Self::finish(out, start);
    }

    fn encode_write(&mut self, digest: &Digest, out: &mut Vec<u8>) {
        let header = MsgHeader {
            info2: info2::WRITE,
            transaction_ttl: self.transaction_ttl_milliseconds,
            n_fields: 3,
            n_ops: self.bin_names.len() as u16,
            ..MsgHeader::default()
        };
        let start = Self::begin(out, &header);
        encode_field(out, field_type::NAMESPACE, &self.namespace);
        encode_field(out, field_type::SET, &self.set);
        encode_field(out, field_type::DIGEST, &digest.0);
        let names = &self.bin_names;
        self.values.for_each_value(|index, spec, value| {
            let particle_type = match spec {
                BinSpec::Integer => particle::INTEGER,
                BinSpec::String { .. } => particle::STRING,
                BinSpec::Blob { .. } => particle::BLOB,
            };
            encode_op(out, op_type::WRITE, particle_type, &names[index], value);
        });
        Self::finish(out, start);
    }

    fn encode_scan(&mut self, digest: &Digest, length: u32, out: &mut Vec<u8>) {
        self.task_id = self.task_id.wrapping_add(1);
        let header = MsgHeader {
            info1: info1::READ,
            info3: info3::PARTITION_DONE,
            transaction_ttl: self.transaction_ttl_milliseconds,
            n_fields: 5,
            ..MsgHeader::default()
        };
        let start = Self::begin(out, &header);
        encode_field(out, field_type::NAMESPACE, &self.namespace);
        encode_field(out, field_type::SET, &self.set);
        encode_field(
            out,
            field_type::PID_ARRAY,
            &digest.partition_id().0.to_le_bytes(),
        );
        encode_field(
            out,
            field_type::MAX_RECORDS,
            &u64::from(length).to_be_bytes(),
        );
        encode_field(out, field_type::TASK_ID, &self.task_id.to_be_bytes());
        Self::finish(out, start);
    }
}

impl Codec for AerospikeCodec {
    // PERF: hot path
    fn encode(&mut self, request: Request, key: u64, out: &mut Vec<u8>) {
        let digest = digest_of_integer_key(&self.set, key as i64);
        match request {
            Request::Read => self.encode_read(&digest, out),
            Request::Write => self.encode_write(&digest, out),
            Request::Scan { length } => self.encode_scan(&digest, length, out),
        }
    }

    fn decode(&mut self, request: Request, input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        match request {
            Request::Read | Request::Write => decode_single(input),
            Request::Scan { .. } => decode_stream(input),
        }
    }
}

/// The digest of an integer key in `set`.
pub fn digest_of_integer_key(set: &[u8], key: i64) -> Digest {
    let hash = Ripemd160::new()
        .chain_update(set)
        .chain_update([KEY_TYPE_INTEGER])
        .chain_update(key.to_be_bytes())
        .finalize();
    let mut bytes = [0u8; DIGEST_BYTES];
    bytes.copy_from_slice(&hash);
    Digest(bytes)
}

/// The outcome a result code stands for.
pub fn outcome_of(result_code: u8) -> Outcome {
    match result_code {
        0 => Outcome::Ok,
        2 => Outcome::NotFound,
        9 => Outcome::Timeout,
        code => Outcome::Error {
            code: i32::from(code),
        },
    }
}

/// The next complete type-3 frame: (body, total bytes).
fn next_frame(input: &[u8]) -> Result<Option<(&[u8], usize)>, String> {
    let Some((header, total)) = frame_length(input).map_err(|e| format!("bad reply: {e}"))? else {
        return Ok(None);
    };
    if header.message_type != MessageType::Message {
        return Err(format!(
            "unexpected reply of proto type {:?}",
            header.message_type
        ));
    }
    Ok(Some((&input[PROTO_HEADER_BYTES..total], total)))
}

fn decode_single(input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some((body, total)) = next_frame(input)? else {
        return Ok(None);
    };
    let (header, _) = decode_header(body).map_err(|e| format!("bad reply: {e}"))?;
    Ok(Some((Reply::of(outcome_of(header.result_code)), total)))
}

/// Reads a scan's stream of frames up to the message with info3 LAST (or
/// an error), counting records.
fn decode_stream(input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let mut used = 0;
    let mut records = 0u64;
    loop {
        let Some((body, total)) = next_frame(&input[used..])? else {
            return Ok(None);
        };
        used += total;
        let mut rest = body;
        while !rest.is_empty() {
            let (header, after) =
                decode_header(rest).map_err(|e| format!("bad scan reply: {e}"))?;
            rest = skip_fields_and_ops(after, &header)?;
            let partition_done = header.info3 & info3::PARTITION_DONE != 0;
            if header.result_code != ResultCode::Ok.as_u8() && !partition_done {
                let reply = Reply {
                    outcome: outcome_of(header.result_code),
                    records,
                };
                return Ok(Some((reply, used)));
            }
            if header.info3 & info3::LAST != 0 {
                let reply = Reply {
                    outcome: Outcome::Ok,
                    records,
                };
                return Ok(Some((reply, used)));
            }
            if !partition_done {
                records += 1;
            }
        }
    }
}

fn skip_fields_and_ops<'a>(mut rest: &'a [u8], header: &MsgHeader) -> Result<&'a [u8], String> {
    for _ in 0..header.n_fields {
        rest = split_field(rest)
            .map_err(|e| format!("bad scan record: {e}"))?
            .2;
    }
    for _ in 0..header.n_ops {
        rest = split_op(rest)
            .map_err(|e| format!("bad scan record: {e}"))?
            .1;
    }
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_wire::response::ResponseWriter;
    use bolide_wire::Message;

    fn append_result(out: &mut Vec<u8>, result_code: u8) {
        let header = MsgHeader {
            result_code,
            ..MsgHeader::default()
        };
        ResponseWriter::begin(out, &header).finish();
    }

    fn hex(digest: &Digest) -> String {
        format!("{digest:?}")
    }

    fn codec(bins: Vec<BinSpec>) -> AerospikeCodec {
        AerospikeCodec::new("test", "demo", ValueSource::new(bins, 1), 1000)
    }

    #[test]
    fn digests_match_reference_vectors() {
        // Go client key_test.go vectors, set "set".
        assert_eq!(
            hex(&digest_of_integer_key(b"set", 0)),
            "93d943aae37b017ad7e011b0c1d2e2143c2fb37d"
        );
        assert_eq!(
            hex(&digest_of_integer_key(b"set", -1)),
            "22116d253745e29fc63fdf760b6e26f7e197e01d"
        );
    }

    fn only_frame(bytes: &[u8]) -> Message<'_> {
        let (header, total) = frame_length(bytes).expect("valid").expect("complete");
        assert_eq!(total, bytes.len());
        assert_eq!(header.message_type, MessageType::Message);
        Message::decode(&bytes[PROTO_HEADER_BYTES..]).expect("decodes")
    }

    #[test]
    fn read_request_asks_for_all_bins() {
        let mut out = Vec::new();
        codec(vec![BinSpec::Integer]).encode(Request::Read, 7, &mut out);
        let message = only_frame(&out);
        assert_eq!(message.header.info1, 0x03);
        assert_eq!(message.header.info2, 0);
        assert_eq!(message.header.n_ops, 0);
        assert_eq!(message.header.transaction_ttl, 1000);
        assert_eq!(message.fields.namespace, Some(&b"test"[..]));
        assert_eq!(message.fields.set, Some(&b"demo"[..]));
        let digest = digest_of_integer_key(b"demo", 7);
        assert_eq!(message.fields.digest, Some(&digest.0[..]));
    }

    #[test]
    fn write_request_sends_one_op_per_bin() {
        let mut out = Vec::new();
        let mut codec = codec(vec![
            BinSpec::Integer,
            BinSpec::String { bytes: 100 },
            BinSpec::Blob { bytes: 5 },
        ]);
        codec.encode(Request::Write, 7, &mut out);
        codec.encode(Request::Write, 8, &mut out);
        let (_, first) = frame_length(&out).expect("valid").expect("complete");
        let message = only_frame(&out[..first]);
        assert_eq!(message.header.info2, 0x01);
        let ops: Vec<_> = message.ops().collect();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (
                ops[0].op_type,
                ops[0].particle_type,
                ops[0].name,
                ops[0].value.len()
            ),
            (2, 1, &b"bin0"[..], 8)
        );
        assert_eq!(
            (ops[1].particle_type, ops[1].name, ops[1].value.len()),
            (3, &b"bin1"[..], 100)
        );
        assert_eq!((ops[2].particle_type, ops[2].value.len()), (4, 5));
        only_frame(&out[first..]);
    }

    #[test]
    fn scan_request_names_one_partition_and_a_limit() {
        let mut out = Vec::new();
        codec(vec![BinSpec::Integer]).encode(Request::Scan { length: 42 }, 7, &mut out);
        let message = only_frame(&out);
        assert_eq!(message.fields.digest, None);
        assert_eq!(message.header.info3, info3::PARTITION_DONE);
        let pid = digest_of_integer_key(b"demo", 7).partition_id().0;
        assert_eq!(message.fields.pid_array, Some(&pid.to_le_bytes()[..]));
        assert_eq!(message.fields.max_records, Some(&42u64.to_be_bytes()[..]));
    }

    #[test]
    fn decodes_single_replies_and_waits_for_partial_ones() {
        let mut codec = codec(vec![BinSpec::Integer]);
        let mut input = Vec::new();
        append_result(&mut input, 0);
        append_result(&mut input, 2);
        append_result(&mut input, 20);
        let mut at = 0;
        let mut outcomes = Vec::new();
        while let Some((reply, used)) = codec.decode(Request::Read, &input[at..]).expect("valid") {
            outcomes.push(reply.outcome);
            at += used;
        }
        assert_eq!(
            outcomes,
            vec![Outcome::Ok, Outcome::NotFound, Outcome::Error { code: 20 }]
        );
        assert_eq!(
            codec.decode(Request::Read, &input[..29]).expect("valid"),
            None
        );
        assert!(codec
            .decode(Request::Read, &[9, 9, 0, 0, 0, 0, 0, 0])
            .is_err());
    }

    #[test]
    fn decodes_scan_streams() {
        let mut codec = codec(vec![BinSpec::Integer]);
        let mut input = Vec::new();
        // Frame 1: two records; frame 2: a partition-done marker and LAST.
        for _ in 0..2 {
            let mut writer = ResponseWriter::begin(&mut input, &MsgHeader::default());
            writer.field(field_type::NAMESPACE, b"test");
            writer.field(field_type::DIGEST, &[1u8; 20]);
            writer.op(
                op_type::READ,
                particle::INTEGER,
                b"bin0",
                &5i64.to_be_bytes(),
            );
            writer.finish();
        }
        // Two records in one frame: rewrite the second frame's proto header away.
        let second = input.len() / 2;
        let merged_body = [
            &input[PROTO_HEADER_BYTES..second],
            &input[second + PROTO_HEADER_BYTES..],
        ]
        .concat();
        let mut stream = ProtoHeader::encode(MessageType::Message, merged_body.len()).to_vec();
        stream.extend_from_slice(&merged_body);
        let done = MsgHeader {
            info3: info3::PARTITION_DONE,
            result_code: 11,
            generation: 5,
            ..MsgHeader::default()
        };
        ResponseWriter::begin(&mut stream, &done).finish();
        let last = MsgHeader {
            info3: info3::LAST,
            ..MsgHeader::default()
        };
        ResponseWriter::begin(&mut stream, &last).finish();
        let request = Request::Scan { length: 10 };
        for cut in 0..stream.len() {
            assert_eq!(
                codec.decode(request, &stream[..cut]).expect("valid"),
                None,
                "cut {cut}"
            );
        }
        let (reply, used) = codec
            .decode(request, &stream)
            .expect("valid")
            .expect("complete");
        assert_eq!(used, stream.len());
        assert_eq!(
            reply,
            Reply {
                outcome: Outcome::Ok,
                records: 2
            }
        );
        // A server without scans: one LAST message with result 16.
        let mut unsupported = Vec::new();
        let header = MsgHeader {
            info3: info3::LAST,
            result_code: 16,
            ..MsgHeader::default()
        };
        ResponseWriter::begin(&mut unsupported, &header).finish();
        let (reply, _) = codec
            .decode(request, &unsupported)
            .expect("valid")
            .expect("complete");
        assert_eq!(reply.outcome, Outcome::Error { code: 16 });
    }
}
