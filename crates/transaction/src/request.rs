//! A single-record request, typed: what a front end asks of one record
//! (read, write, delete, touch, operate, record UDF), without Aerospike's
//! message bytes. The Aerospike front end builds one from an AS_MSG
//! ([`Request::from_message`], borrowing its slices: nothing is copied or
//! allocated); another protocol builds one directly and hands its ops as a
//! slice. A batch is a sequence of them, each answered as a row.
//!
//! The fields name what the AS_MSG header's bits mean to the transaction
//! layer; [`Request::encode`] turns a request back into an AS_MSG when it
//! has to travel to another node.

use bolide_types::{Digest, ResultCode, DIGEST_BYTES};
use bolide_wire::message::{encode_field, encode_header, encode_op, MsgHeader, OpIter};
use bolide_wire::{field_type, info1, info2, info3, Message, Op};

/// What a request does to its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Reads bins or metadata (under the read lock).
    Read,
    /// Writes, touches or operates (under the write lock); with
    /// [`Policy::delete`], deletes.
    Write,
    /// Runs a record UDF (under the write lock).
    Udf,
}

/// The user key a request carries: to store with the record, or to check
/// against the one stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key<'a> {
    /// The KEY field as it came: one key-type byte, then the value.
    Field(&'a [u8]),
    /// Key type (a particle type) and value.
    Typed(u8, &'a [u8]),
}

impl<'a> Key<'a> {
    /// Key type and value; an empty KEY field is a bad parameter.
    pub fn parts(&self) -> Result<(u8, &'a [u8]), ResultCode> {
        match *self {
            Key::Field(field) => field
                .split_first()
                .map(|(&key_type, value)| (key_type, value))
                .ok_or(ResultCode::Parameter),
            Key::Typed(key_type, value) => Ok((key_type, value)),
        }
    }
}

/// A record UDF call: module, function, and the arguments as a msgpack
/// list (each may be missing in a malformed request; running it then
/// answers PARAMETER).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdfCall<'a> {
    pub module: Option<&'a [u8]>,
    pub function: Option<&'a [u8]>,
    pub args: Option<&'a [u8]>,
}

/// The info3 bits of the strong-consistency read mode.
const READ_MODE_SC_BITS: u8 = 0xC0;

/// How a request treats its record, as the AS_MSG header's bits say it.
/// The fields are independent, as the bits are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// The request reads (a write may then carry read ops too).
    pub read: bool,
    /// Read every bin (GET_ALL).
    pub read_all_bins: bool,
    /// Answer metadata only (NO_BIN_DATA): exists / header reads.
    pub metadata_only: bool,
    /// Answer every op, nil for those without a value.
    pub respond_all_ops: bool,
    /// The write deletes the record.
    pub delete: bool,
    /// Delete with a tombstone (an Enterprise feature: answers 125).
    pub durable_delete: bool,
    /// Fail if the record exists.
    pub create_only: bool,
    /// Fail if the record does not exist.
    pub update_only: bool,
    /// Replace every bin (create if missing).
    pub create_or_replace: bool,
    /// Replace every bin; fail if the record does not exist.
    pub replace_only: bool,
    /// Fail unless the record's generation equals `generation`.
    pub generation_equal: bool,
    /// Fail unless `generation` is above the record's generation.
    pub generation_greater: bool,
    pub generation: u32,
    /// Answer once the master has the write (not waiting for replicas).
    pub commit_master: bool,
    /// A write: the record's TTL in seconds (0: the namespace default,
    /// `u32::MAX`: never expire, `u32::MAX - 1`: keep the record's). A
    /// read: read-touch-ttl-percent (0: the default, 1–100, `u32::MAX`:
    /// never touch).
    pub ttl: u32,
    /// The client's deadline in milliseconds (0: none).
    pub timeout_ms: u32,
    /// A read's strong-consistency mode: info3 bits 0x80 (relax) and 0x40
    /// (`bolide_cluster::datapath::ReadMode::of_info3`).
    pub read_mode_sc: u8,
}

/// A request's ops: still encoded in an AS_MSG, or given as a slice.
#[derive(Clone, Debug)]
pub enum Ops<'a> {
    Wire(OpIter<'a>),
    Slice(&'a [Op<'a>]),
}

impl<'a> Ops<'a> {
    /// The ops in request order.
    pub fn iter(&self) -> OpsIter<'a> {
        match self {
            Ops::Wire(ops) => OpsIter::Wire(ops.clone()),
            Ops::Slice(ops) => OpsIter::Slice(ops.iter()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// Iterates [`Ops`].
#[derive(Clone, Debug)]
pub enum OpsIter<'a> {
    Wire(OpIter<'a>),
    Slice(std::slice::Iter<'a, Op<'a>>),
}

impl<'a> Iterator for OpsIter<'a> {
    type Item = Op<'a>;

    #[inline]
    fn next(&mut self) -> Option<Op<'a>> {
        match self {
            OpsIter::Wire(ops) => ops.next(),
            OpsIter::Slice(ops) => ops.next().copied(),
        }
    }
}

/// One single-record request.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub namespace: &'a [u8],
    /// The set the record is in (or is to be written in).
    pub set: Option<&'a [u8]>,
    pub digest: Digest,
    pub key: Option<Key<'a>>,
    pub action: Action,
    pub policy: Policy,
    pub ops: Ops<'a>,
    /// A filter expression (msgpack): the request applies only to a
    /// record it holds for.
    pub filter: Option<&'a [u8]>,
    pub udf: UdfCall<'a>,
}

impl<'a> Request<'a> {
    /// The request an AS_MSG single-record command makes (its DIGEST field
    /// present), borrowing the message's bytes. Answers PARAMETER for an
    /// unknown field type, a missing or malformed digest or neither READ
    /// nor WRITE, and UNSUPPORTED_FEATURE for transaction fields (in that
    /// order, as the checks ran before).
    pub fn from_message(message: &Message<'a>) -> Result<Request<'a>, ResultCode> {
        let fields = &message.fields;
        let header = &message.header;
        if fields.unknown_type.is_some() {
            return Err(ResultCode::Parameter);
        }
        if fields.transaction {
            return Err(ResultCode::UnsupportedFeature);
        }
        let digest = fields.digest.ok_or(ResultCode::Parameter)?;
        let digest: [u8; DIGEST_BYTES] = digest.try_into().map_err(|_| ResultCode::Parameter)?;
        let action = if fields.udf {
            Action::Udf
        } else if header.info2 & info2::WRITE != 0 {
            Action::Write
        } else if header.info1 & info1::READ != 0 {
            Action::Read
        } else {
            return Err(ResultCode::Parameter);
        };
        Ok(Request {
            namespace: fields.namespace.unwrap_or_default(),
            set: fields.set,
            digest: Digest(digest),
            key: fields.key.map(Key::Field),
            action,
            policy: Policy::from_header(header),
            ops: Ops::Wire(message.ops()),
            filter: fields.filter_expression,
            udf: UdfCall {
                module: fields.udf_filename,
                function: fields.udf_function,
                args: fields.udf_arglist,
            },
        })
    }

    /// What the request counts as in statistics (a record UDF counts as
    /// the write clients mark it).
    pub fn kind(&self) -> crate::Kind {
        match self.action {
            Action::Write | Action::Udf if self.policy.delete => crate::Kind::Delete,
            Action::Write | Action::Udf => crate::Kind::Write,
            Action::Read => crate::Kind::Read,
        }
    }

    /// The request as an AS_MSG body (after the proto header), to send to
    /// another node.
    pub fn encode(&self) -> Vec<u8> {
        let mut fields = Vec::with_capacity(64);
        let mut n_fields = 0u16;
        let mut field = |kind: u8, data: &[u8]| {
            encode_field(&mut fields, kind, data);
            n_fields += 1;
        };
        field(field_type::NAMESPACE, self.namespace);
        if let Some(set) = self.set {
            field(field_type::SET, set);
        }
        match self.key {
            Some(Key::Field(key)) => field(field_type::KEY, key),
            Some(Key::Typed(key_type, value)) => {
                let mut key = Vec::with_capacity(1 + value.len());
                key.push(key_type);
                key.extend_from_slice(value);
                field(field_type::KEY, &key);
            }
            None => {}
        }
        field(field_type::DIGEST, &self.digest.0);
        if let Some(filter) = self.filter {
            field(field_type::FILTER_EXPRESSION, filter);
        }
        for (kind, data) in [
            (field_type::UDF_FILENAME, self.udf.module),
            (field_type::UDF_FUNCTION, self.udf.function),
            (field_type::UDF_ARGLIST, self.udf.args),
        ] {
            if let Some(data) = data {
                field(kind, data);
            }
        }
        if self.action == Action::Udf && self.udf == UdfCall::default() {
            // A UDF request with none of its fields still says it is one.
            field(field_type::UDF_OP, &[1]);
        }
        let mut ops = Vec::new();
        let mut n_ops = 0u16;
        for op in self.ops.iter() {
            encode_op(&mut ops, op.op_type, op.particle_type, op.name, op.value);
            n_ops += 1;
        }
        let mut header = self.policy.to_header();
        match self.action {
            Action::Read => header.info1 |= info1::READ,
            // Clients mark a record UDF a write, too.
            Action::Write | Action::Udf => header.info2 |= info2::WRITE,
        }
        header.n_fields = n_fields;
        header.n_ops = n_ops;
        let mut body = Vec::with_capacity(32 + fields.len() + ops.len());
        encode_header(&mut body, &header);
        body.extend_from_slice(&fields);
        body.extend_from_slice(&ops);
        body
    }
}

impl Policy {
    /// The policy an AS_MSG header carries.
    pub fn from_header(header: &MsgHeader) -> Policy {
        Policy {
            read: header.info1 & info1::READ != 0,
            read_all_bins: header.info1 & info1::GET_ALL != 0,
            metadata_only: header.info1 & info1::NO_BIN_DATA != 0,
            respond_all_ops: header.info2 & info2::RESPOND_ALL_OPS != 0,
            delete: header.info2 & info2::DELETE != 0,
            durable_delete: header.info2 & info2::DURABLE_DELETE != 0,
            create_only: header.info2 & info2::CREATE_ONLY != 0,
            update_only: header.info3 & info3::UPDATE_ONLY != 0,
            create_or_replace: header.info3 & info3::CREATE_OR_REPLACE != 0,
            replace_only: header.info3 & info3::REPLACE_ONLY != 0,
            generation_equal: header.info2 & info2::GENERATION != 0,
            generation_greater: header.info2 & info2::GENERATION_GT != 0,
            generation: header.generation,
            commit_master: header.info3 & info3::COMMIT_MASTER != 0,
            ttl: header.record_ttl,
            timeout_ms: header.transaction_ttl,
            read_mode_sc: header.info3 & READ_MODE_SC_BITS,
        }
    }

    /// The header bits of this policy (no READ or WRITE bit, no counts).
    pub fn to_header(&self) -> MsgHeader {
        let bit = |on: bool, bit: u8| if on { bit } else { 0 };
        MsgHeader {
            info1: bit(self.read, info1::READ)
                | bit(self.read_all_bins, info1::GET_ALL)
                | bit(self.metadata_only, info1::NO_BIN_DATA),
            info2: bit(self.respond_all_ops, info2::RESPOND_ALL_OPS)
                | bit(self.delete, info2::DELETE)
                | bit(self.durable_delete, info2::DURABLE_DELETE)
                | bit(self.create_only, info2::CREATE_ONLY)
                | bit(self.generation_equal, info2::GENERATION)
                | bit(self.generation_greater, info2::GENERATION_GT),
            info3: bit(self.update_only, info3::UPDATE_ONLY)
                | bit(self.create_or_replace, info3::CREATE_OR_REPLACE)
                | bit(self.replace_only, info3::REPLACE_ONLY)
                | bit(self.commit_master, info3::COMMIT_MASTER)
                | (self.read_mode_sc & READ_MODE_SC_BITS),
            generation: self.generation,
            record_ttl: self.ttl,
            transaction_ttl: self.timeout_ms,
            ..MsgHeader::default()
        }
    }

    /// A record-replacing write (every bin the request does not write is
    /// dropped).
    pub fn replaces(&self) -> bool {
        self.create_or_replace || self.replace_only
    }
}
