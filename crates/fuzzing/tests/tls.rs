//! The TLS checks on real handshakes: a rustls client and the node's
//! listeners meet in memory (so the checks' PKI and listeners work, and
//! PKI login reads the user from a client certificate that got through),
//! the verifier's answers for each certificate, and the seeds of the `tls`
//! fuzz target (`write_tls_seeds`, ignored: run with BOLIDE_SEEDS_DIR).

use bolide_fuzzing::tls::{self, chain_input, fixture, Issued, CERTIFICATE_MODE, NODE_NAME};
use bolide_server::net::tls::certificate_user;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::sync::Arc;

fn client_config(
    versions: &[&'static rustls::SupportedProtocolVersion],
    certificate: Option<&Issued>,
) -> Arc<rustls::ClientConfig> {
    let fixture = fixture();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(fixture.ca.der.clone()).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("versions")
    .with_root_certificates(roots);
    let config = match certificate {
        Some(issued) => builder
            .with_client_auth_cert(
                vec![issued.der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.key_der.clone())),
            )
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// A handshake between a rustls client and listener `index`, in memory:
/// what the client sent (its first flight, everything), and the server's
/// connection at the end (None if either side failed).
struct Handshake {
    first_flight: Vec<u8>,
    sent: Vec<u8>,
    server: Option<rustls::ServerConnection>,
}

fn handshake(index: usize, config: Arc<rustls::ClientConfig>) -> Handshake {
    let listener = &fixture().listeners[index];
    let mut server = rustls::ServerConnection::new(listener.rustls_config()).expect("server");
    let mut client =
        rustls::ClientConnection::new(config, ServerName::try_from(NODE_NAME).expect("name"))
            .expect("client");
    let (mut first_flight, mut sent) = (Vec::new(), Vec::new());
    let mut failed = false;
    for round in 0..10 {
        let mut to_server = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut to_server).expect("client writes");
        }
        if round == 0 {
            first_flight = to_server.clone();
        }
        sent.extend_from_slice(&to_server);
        let mut cursor = to_server.as_slice();
        while !cursor.is_empty() {
            server.read_tls(&mut cursor).expect("server reads");
        }
        if server.process_new_packets().is_err() {
            failed = true;
        }
        let mut to_client = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut to_client).expect("server writes");
        }
        let mut cursor = to_client.as_slice();
        while !cursor.is_empty() {
            client.read_tls(&mut cursor).expect("client reads");
        }
        if client.process_new_packets().is_err() {
            failed = true;
        }
        if failed || (!client.is_handshaking() && !server.is_handshaking()) {
            break;
        }
    }
    let done = !failed && !server.is_handshaking() && !client.is_handshaking();
    Handshake {
        first_flight,
        sent,
        server: done.then_some(server),
    }
}

const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

#[test]
fn a_real_client_completes_where_the_checks_say_it_may() {
    let f = fixture();
    // Standard TLS 1.2, no client certificate.
    assert!(handshake(0, client_config(TLS12, None)).server.is_some());
    // Mutual: client-a gets in, and PKI login would take its common name.
    let done = handshake(1, client_config(TLS12, Some(&f.client_a)));
    let server = done.server.expect("client-a over mutual TLS");
    let leaf = server
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a certificate");
    assert_eq!(certificate_user(leaf).as_deref(), Some("client-a"));
    // No certificate, another CA's, a revoked one: refused.
    assert!(handshake(1, client_config(TLS12, None)).server.is_none());
    assert!(handshake(1, client_config(TLS12, Some(&f.other_client)))
        .server
        .is_none());
    assert!(handshake(2, client_config(TLS12, Some(&f.client_b)))
        .server
        .is_none());
    assert!(handshake(2, client_config(TLS12, Some(&f.client_a)))
        .server
        .is_some());
    // TLS 1.3 where allowed, not where it is not.
    assert!(handshake(3, client_config(TLS13, Some(&f.client_a)))
        .server
        .is_some());
    assert!(handshake(2, client_config(TLS13, Some(&f.client_a)))
        .server
        .is_none());
    assert!(handshake(4, client_config(TLS13, None)).server.is_some());
    // Between nodes: only the node's own name.
    assert!(handshake(5, client_config(TLS13, Some(&f.node)))
        .server
        .is_some());
    assert!(handshake(5, client_config(TLS13, Some(&f.client_a)))
        .server
        .is_none());
}

#[test]
fn the_verifier_accepts_exactly_the_certificates_a_listener_admits() {
    let f = fixture();
    let verify = |index: usize, issued: &Issued| {
        f.listeners[index]
            .verify_client_chain(std::slice::from_ref(&issued.der))
            .is_ok()
    };
    assert!(verify(1, &f.client_a) && verify(1, &f.client_b));
    assert!(verify(2, &f.client_a) && !verify(2, &f.client_b));
    assert!(!verify(1, &f.other_client));
    assert!(
        !verify(0, &f.client_a),
        "a listener asking no certificate checks none"
    );
    assert!(verify(5, &f.node) && !verify(5, &f.client_a));
    // The check accepts those, and panics on a listener that would admit
    // a certificate it must not: the property can fail.
    tls::check(&chain_input(1, &[&f.client_a.der]));
    tls::check(&chain_input(2, &[&f.client_b.der]));
    let mut tampered = f.client_a.der.to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    tls::check(&chain_input(1, &[&tampered]));
    let forged = CertificateDer::from(tampered);
    assert!(f.listeners[1].verify_client_chain(&[forged]).is_err());
}

#[test]
fn replayed_handshakes_never_complete() {
    let f = fixture();
    for (index, versions, certificate) in [
        (1usize, TLS12, Some(&f.client_a)),
        (3, TLS13, Some(&f.client_a)),
        (0, TLS12, None),
    ] {
        let recorded = handshake(index, client_config(versions, certificate));
        assert!(recorded.server.is_some());
        // The whole flight again: the listener's ephemeral key differs, so
        // the replay stops at the key exchange (the check asserts it).
        for chunk in [0u8, 1, 7, 100] {
            let mut input = vec![index as u8, chunk];
            input.extend_from_slice(&recorded.sent);
            tls::check(&input);
        }
    }
}

/// Writes the `tls` target's seeds into $BOLIDE_SEEDS_DIR (named by
/// content, as libFuzzer names them):
/// `BOLIDE_SEEDS_DIR=fuzz/corpus/tls cargo test -p bolide-fuzzing --test
/// tls -- --ignored write_tls_seeds`.
#[test]
#[ignore]
fn write_tls_seeds() {
    let directory = std::env::var("BOLIDE_SEEDS_DIR").expect("BOLIDE_SEEDS_DIR");
    let directory = std::path::Path::new(&directory);
    std::fs::create_dir_all(directory).expect("seeds directory");
    let f = fixture();
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    let flights = [
        (0usize, TLS12, None),
        (1, TLS12, Some(&f.client_a)),
        (1, TLS12, Some(&f.other_client)),
        (1, TLS12, None),
        (2, TLS12, Some(&f.client_a)),
        (2, TLS12, Some(&f.client_b)),
        (3, TLS13, Some(&f.client_a)),
        (3, TLS12, Some(&f.client_b)),
        (4, TLS13, None),
        (5, TLS13, Some(&f.node)),
        (5, TLS12, Some(&f.node)),
    ];
    for (index, versions, certificate) in flights {
        let recorded = handshake(index, client_config(versions, certificate));
        for (flight, chunk) in [
            (&recorded.first_flight, 0u8),
            (&recorded.sent, 0),
            (&recorded.sent, 5),
        ] {
            let mut seed = vec![index as u8, chunk];
            seed.extend_from_slice(flight);
            seeds.push(seed);
        }
    }
    for index in 0..tls::LISTENERS as u8 {
        for chain in [
            vec![f.client_a.der.as_ref()],
            vec![f.client_a.der.as_ref(), f.ca.der.as_ref()],
            vec![f.client_b.der.as_ref()],
            vec![f.other_client.der.as_ref()],
            vec![f.node.der.as_ref()],
        ] {
            seeds.push(chain_input(index, &chain));
        }
    }
    // Not TLS at all: an Aerospike info request, a RESP command, HTTP, an
    // SSLv2-style hello, nothing.
    for junk in [
        &b"\x02\x01\x00\x00\x00\x00\x00\x0bnamespaces\n"[..],
        b"*1\r\n$4\r\nPING\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x80\x2e\x01\x03\x01\x00\x15\x00\x00\x00\x10",
        b"",
    ] {
        let mut seed = vec![1, 0];
        seed.extend_from_slice(junk);
        seeds.push(seed);
    }
    assert!(seeds.iter().all(|seed| seed.len() >= 2 || seed.is_empty()));
    assert!(seeds.iter().any(|seed| seed[1] & CERTIFICATE_MODE != 0));
    for seed in &seeds {
        tls::check(seed);
        let name = format!("{:016x}", fnv(seed));
        std::fs::write(directory.join(name), seed).expect("seed");
    }
}

/// FNV-1a, for the seeds' file names.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
