//! The Redis front end: RESP2/RESP3 framing (`resp`, no I/O), the command
//! table (`table`), one connection's state and dispatch (`session`, its
//! server commands in `session/admin.rs`), the Redis types mapped onto
//! records (`value`, `keyspace`, and the commands in `data`, `collections`,
//! `assorted`, `extras`, `sort`, `geo`, `streams`; docs/redis.md has the mapping), and
//! Lua scripting (`scripting`: EVAL, FUNCTION, FCALL on an engine thread
//! that owns the Lua states). Each Redis key is one
//! record in the Redis namespace, in set `redis<db>`, read and written
//! through the transaction layer's typed requests, so the Aerospike
//! clients see the same records.
//!
//! Depends on `bolide-types`, `bolide-wire` (its msgpack reader), `mlua`
//! (Lua 5.4, built from source, as `bolide-udf` uses it),
//! `bolide-store` (key scans and set truncation) and
//! `bolide-transaction` (typed requests and answers); knows nothing of
//! sockets: the server's connection feeds it bytes and writes its output.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

mod assorted;
pub mod cluster;
mod collections;
mod data;
mod extras;
mod geo;
pub mod hll;
pub mod keyspace;
pub mod pubsub;
pub mod resp;
pub mod scripting;
pub mod session;
mod sort;
pub mod streams;
pub mod table;
pub mod value;

#[cfg(test)]
mod tests;

pub use keyspace::Records;
pub use session::{Session, Shared, Step};
