//! Any text as a configuration file. Properties: `bolide_fuzzing::config`
//! (a configuration within its bounds, or an error naming a line).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &[u8]| bolide_fuzzing::config::check(text));
