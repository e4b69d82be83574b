//! Aerospike wire protocol codec.
//!
//! Owns the byte layouts of the 8-byte proto header, the 22-byte AS_MSG
//! header, fields, ops and the text info protocol, and the encoders for
//! responses. It does no I/O and allocates nothing while decoding: a decoded
//! [`Message`] borrows the request bytes.
//!
//! Depends on `bolide-types` only.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
#![cfg_attr(test, allow(clippy::indexing_slicing, clippy::panic))]

pub mod admin;
mod error;
pub mod frame;
pub mod info;
pub mod message;
pub mod msgpack;
pub mod response;

pub use error::ProtoError;
pub use frame::{frame_length, MessageType, ProtoHeader, PROTO_HEADER_BYTES, PROTO_VERSION};
pub use message::{
    field_type, info1, info2, info3, op_type, Fields, Message, MsgHeader, Op, OpIter,
    MSG_HEADER_BYTES,
};
pub use response::{Framing, ResponseWriter};
