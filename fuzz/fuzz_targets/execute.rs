//! Any bytes as an AS_MSG body, decoded and executed against a node with a
//! few records; scans and large batches run to the end. Properties:
//! `bolide_fuzzing::execute` (well-formed answers, known result codes, a
//! batch answers every row and ends with LAST).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| bolide_fuzzing::execute::check(body));
