//! Any bytes as the text of a `.asb` backup file. Properties:
//! `bolide_backup_format::fuzz` (no panic; errors name a line and byte of
//! the input; whatever decodes re-encodes to text that decodes the same).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &[u8]| bolide_backup_format::fuzz::check(text));
