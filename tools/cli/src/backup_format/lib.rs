//! The backup file format of Aerospike's tools (`asbackup`/`asrestore`,
//! `absctl`), `.asb` text version 3.1 (3.2 for expression indexes), and the
//! layers around it: one zstd stream over the whole file, then AES-CTR
//! with the IV block the tools write first. No I/O of its own beyond the
//! readers and writers it is given; the `bolide backup` and `bolide
//! restore` commands (`src/backup/`) drive it.
//!
//! - [`asb`]: records, UDF modules and index definitions, to and from
//!   text, byte for byte as the tools write them; a decoder that names the
//!   line and byte of any error and can skip a bad record.
//! - [`stream`]: compression and encryption writers and readers, the key
//!   file.
//! - [`fuzz`]: the properties the `asb` fuzz target and its corpus replay
//!   check.
#![forbid(unsafe_code)]

pub mod asb;
pub mod fuzz;
pub mod stream;
