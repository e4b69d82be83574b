//! Admin (proto type 2) message bodies, answered by a secured node's access
//! control. Properties: `bolide_fuzzing::admin` (well-formed answers with
//! known codes, nothing without a session, a reloadable catalog).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| bolide_fuzzing::admin::check(bytes));
