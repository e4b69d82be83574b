//! Any bytes as a stream of node-to-node (BLDE) frames, as a heartbeat or
//! fabric connection reads them. Properties: `bolide_fuzzing::cluster_frames`
//! (refusals name the broken rule, whatever decodes round-trips, a damaged
//! checksum is always refused).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|stream: &[u8]| bolide_fuzzing::cluster_frames::check(stream));
