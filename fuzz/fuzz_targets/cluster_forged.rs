//! Messages from a forged peer, delivered between ticks to a formed
//! three-node cluster of real state machines. Properties:
//! `bolide_fuzzing::cluster_forged` (no panic, well-formed membership and
//! routing on every node, and a cluster that does not change unless the
//! forged peer took one of the protocol's own paths).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|records: &[u8]| bolide_fuzzing::cluster_forged::check(records));
