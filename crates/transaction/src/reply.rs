//! Where a request's answer goes. The transaction layer hands the answer
//! to a [`Reply`] piece by piece: it begins, bins follow in request order,
//! then it ends with the result code and the record's generation and void
//! time, or it fails with a code alone (dropping anything begun). The
//! Aerospike front end's [`WireReply`] encodes AS_MSG answer frames into
//! the connection's output buffer in place (the header is patched at the
//! end, so nothing is built twice); another protocol keeps typed values.

use bolide_types::ResultCode;
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_wire::message::{encode_header, encode_op, MsgHeader, MSG_HEADER_BYTES};
use bolide_wire::response::append_result_framed;
use bolide_wire::Framing;

/// The receiver of one request's answer.
pub trait Reply {
    /// An answer begins; `bin` calls and then `end` (or `fail`) follow.
    fn begin(&mut self);

    /// One bin of the answer, in request order: the op type that answers
    /// it (READ, or the list/map op type for a list/map op's result), the
    /// particle type (0 for nil) and the value as stored.
    fn bin(&mut self, op_type: u8, particle_type: u8, name: &[u8], value: &[u8]);

    /// The answer is complete: its result code (OK, or one that still
    /// carries bins, as a UDF failure does), and the record's generation
    /// and void time (0 where they do not apply).
    fn end(&mut self, code: ResultCode, generation: u16, void_time: u32);

    /// The request failed: whatever was begun is dropped and `code` alone
    /// answers it.
    fn fail(&mut self, code: ResultCode);

    /// Takes the finished answer out, to be sent later (once a write's
    /// copies are in), in the front end's own encoding.
    fn detach(&mut self) -> Vec<u8>;
}

/// Encodes answers as AS_MSG frames (a message of its own, or a batch row)
/// into an output buffer.
pub struct WireReply<'o> {
    out: &'o mut Vec<u8>,
    framing: Framing,
    /// Where the answer begun last starts in `out`.
    start: usize,
    n_ops: u16,
}

impl<'o> WireReply<'o> {
    pub fn new(out: &'o mut Vec<u8>, framing: Framing) -> WireReply<'o> {
        let start = out.len();
        WireReply {
            out,
            framing,
            start,
            n_ops: 0,
        }
    }

    /// Where the AS_MSG header of the answer begun last is.
    fn header_at(&self) -> usize {
        match self.framing {
            Framing::Message => self.start + PROTO_HEADER_BYTES,
            Framing::Row { .. } => self.start,
        }
    }
}

impl Reply for WireReply<'_> {
    // PERF: hot path: a header written once and patched in place.
    #[inline]
    fn begin(&mut self) {
        self.start = self.out.len();
        self.n_ops = 0;
        let mut header = MsgHeader::default();
        match self.framing {
            Framing::Message => self.out.extend_from_slice(&[0u8; PROTO_HEADER_BYTES]),
            // A batch row carries its index where a request has its timeout.
            Framing::Row { index } => header.transaction_ttl = index,
        }
        encode_header(self.out, &header);
    }

    #[inline]
    fn bin(&mut self, op_type: u8, particle_type: u8, name: &[u8], value: &[u8]) {
        encode_op(self.out, op_type, particle_type, name, value);
        self.n_ops += 1;
    }

    #[inline]
    fn end(&mut self, code: ResultCode, generation: u16, void_time: u32) {
        let header_at = self.header_at();
        if let Framing::Message = self.framing {
            let body = self.out.len() - header_at;
            let proto = ProtoHeader::encode(MessageType::Message, body);
            if let Some(slot) = self.out.get_mut(self.start..header_at) {
                slot.copy_from_slice(&proto);
            }
        }
        // Header offsets: 5 result code, 6 generation (u32), 10 record
        // ttl (u32), 18 n_fields (u16), 20 n_ops (u16).
        if let Some(header) = self.out.get_mut(header_at..header_at + MSG_HEADER_BYTES) {
            header[5] = code.as_u8();
            header[6..10].copy_from_slice(&u32::from(generation).to_be_bytes());
            header[10..14].copy_from_slice(&void_time.to_be_bytes());
            header[20..22].copy_from_slice(&self.n_ops.to_be_bytes());
        }
    }

    fn fail(&mut self, code: ResultCode) {
        self.out.truncate(self.start);
        append_result_framed(self.out, code.as_u8(), self.framing);
    }

    fn detach(&mut self) -> Vec<u8> {
        self.out.split_off(self.start.min(self.out.len()))
    }
}

/// A typed answer, kept as values: for callers that do not speak the
/// Aerospike protocol, and for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub code: Option<ResultCode>,
    pub generation: u16,
    pub void_time: u32,
    /// (op type, particle type, bin name, value), in request order.
    pub bins: Vec<(u8, u8, Vec<u8>, Vec<u8>)>,
}

impl Reply for Answer {
    fn begin(&mut self) {
        *self = Answer::default();
    }

    fn bin(&mut self, op_type: u8, particle_type: u8, name: &[u8], value: &[u8]) {
        self.bins
            .push((op_type, particle_type, name.to_vec(), value.to_vec()));
    }

    fn end(&mut self, code: ResultCode, generation: u16, void_time: u32) {
        self.code = Some(code);
        self.generation = generation;
        self.void_time = void_time;
    }

    fn fail(&mut self, code: ResultCode) {
        *self = Answer {
            code: Some(code),
            ..Answer::default()
        };
    }

    fn detach(&mut self) -> Vec<u8> {
        Vec::new()
    }
}
