//! Bytes a client sends to a TLS listener (the node's rustls context:
//! protocols, suites, client-certificate checks), or a certificate chain
//! put to its verifier and to PKI login. Properties: `bolide_fuzzing::tls`
//! (whole records back, no handshake completed by bytes that know no key,
//! only this test's genuine, admitted certificates accepted).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| bolide_fuzzing::tls::check(bytes));
