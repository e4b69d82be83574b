//! The value algebra: what Bolide computes over bin values, apart from any
//! record store.
//!
//! Owns list and map operations (`cdt`, with the server's msgpack value
//! order in `cdt::value`), bit operations on blobs (`bits`), HyperLogLog
//! sketches (`hll`), GeoJSON regions (`geo`), filter and operation
//! expressions (`expression`), and the bin-level write ops (`ops`:
//! write, increment, append, prepend; `particle_ops`: bit and HLL ops on a
//! write's working copy). Every function takes values (particle type and
//! bytes, as stored) and gives values or a `ResultCode`; none takes a lock
//! or touches storage. Where an expression needs a record (bins, metadata,
//! key, digest), it reads it through [`expression::Record`], which the
//! transaction layer implements.
//!
//! Depends on `bolide-types` and `bolide-wire` (its msgpack reader and the
//! protocol's op numbers) only: no store, no cluster, no locks.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

pub mod bits;
pub mod cdt;
pub mod expression;
pub mod geo;
pub mod hll;
pub mod ops;
pub mod particle_ops;
