//! Any bytes a client could send on one connection, answered by the
//! server's frame loop whole and split at every byte boundary. Properties:
//! `bolide_fuzzing::connection` (same answers and end either way,
//! well-formed answers).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|stream: &[u8]| bolide_fuzzing::connection::check(stream));
