//! Any bytes on the Redis port, taken off the front by the RESP parser.
//! Properties: `bolide_fuzzing::resp`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| bolide_fuzzing::resp::check(bytes));
