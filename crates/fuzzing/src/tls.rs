//! The TLS handshake path: any bytes a client sends to a TLS listener,
//! accepted by a rustls connection built from the node's own
//! [`ServerTls`] (its protocols, cipher suites and client-certificate
//! verifier: the CA, the dates, `cert-blacklist`, `tls-authenticate-client`'s
//! names), and any certificate chain put to that verifier and to PKI
//! login's user-name extraction.
//!
//! Input: byte 0 picks the listener ([`LISTENERS`]: standard TLS 1.2,
//! mutual 1.2, mutual with names and a blacklist, mutual 1.2 and 1.3,
//! standard 1.3 only, and the node-to-node listener of fabric and
//! heartbeat); byte 1 the mode: with its top bit set the rest is a chain
//! of certificates (each a big-endian u16 length and its DER), else the
//! rest is what the client sends, fed in chunks of `byte 1` bytes (0: all
//! at once).
//!
//! What must hold: no panic; everything the listener sends back is whole
//! TLS records (content type 20–23, version 3.x, at most 16 KiB and an
//! expansion); the handshake never completes and no application data
//! comes out (completing needs the listener's ephemeral key, which no
//! input knows); once the connection fails it stays failed; a peer
//! certificate the connection keeps, and a chain the verifier accepts,
//! is one this test's CA issued, unrevoked, with a name the listener
//! admits; the user PKI login reads from a certificate is its common
//! name.
//!
//! The PKI is fixed (Ed25519 keys from constant seeds, fixed serials and
//! dates), so recorded handshakes in the corpus carry certificates that
//! still verify when replayed.

use bolide_server::net::tls::{
    certificate_user, ClientAuth, NodeTls, Protocols, ServerTls, TlsSettings,
};
use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The node's tls-name, and the stanza's name.
pub const NODE_NAME: &str = "bolide-node";
/// The listeners byte 0 picks from, by index.
pub const LISTENERS: usize = 6;
/// Byte 1's top bit: the rest is a certificate chain.
pub const CERTIFICATE_MODE: u8 = 0x80;
/// client-b's serial, on the blacklist of listener 2.
const REVOKED_SERIAL: u64 = 0x0B01DE;

/// A certificate and its key, in DER and PEM.
pub struct Issued {
    pub der: CertificateDer<'static>,
    pub pem: String,
    pub key_pem: String,
    pub key_der: Vec<u8>,
}

/// The fixed PKI and the listeners built from it.
pub struct Fixture {
    pub ca: Issued,
    pub node: Issued,
    /// CN client-a, from the CA.
    pub client_a: Issued,
    /// CN client-b, from the CA, revoked on listener 2.
    pub client_b: Issued,
    /// CN client-a, from another CA.
    pub other_client: Issued,
    pub listeners: Vec<ServerTls>,
    _directory: PathBuf,
}

/// An Ed25519 key from a constant seed (PKCS#8 v1).
fn key(seed: u8) -> KeyPair {
    let mut pkcs8 = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    pkcs8.extend([seed; 32]);
    let der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8);
    KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_ED25519).expect("ed25519 key")
}

fn params(common_name: &str, dns: &[&str], serial: u64) -> CertificateParams {
    let mut params = CertificateParams::new(
        dns.iter()
            .map(|name| (*name).to_owned())
            .collect::<Vec<_>>(),
    )
    .expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Bolide fuzz");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.serial_number = Some(SerialNumber::from(serial));
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2099, 1, 1);
    params
}

fn authority(name: &str, seed: u8) -> (Certificate, KeyPair) {
    let key = key(seed);
    let mut params = params(name, &[], u64::from(seed));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (params.self_signed(&key).expect("CA"), key)
}

fn issue(
    issuer: &(Certificate, KeyPair),
    common_name: &str,
    dns: &[&str],
    seed: u8,
    serial: u64,
    node: bool,
) -> Issued {
    let key = key(seed);
    let mut params = params(common_name, dns, serial);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = if node {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    let certificate = params
        .signed_by(&key, &issuer.0, &issuer.1)
        .expect("certificate");
    Issued {
        der: certificate.der().clone(),
        pem: certificate.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    }
}

/// The PKI and the listeners, made once per process.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let ca = authority("Bolide fuzz CA", 1);
        let other = authority("Other fuzz CA", 5);
        let node = issue(&ca, NODE_NAME, &[NODE_NAME], 2, 2, true);
        let client_a = issue(&ca, "client-a", &[], 3, 3, false);
        let client_b = issue(&ca, "client-b", &[], 4, REVOKED_SERIAL, false);
        let other_client = issue(&other, "client-a", &[], 6, 6, false);
        let directory = std::env::temp_dir().join(format!(
            "bolide-fuzz-tls-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&directory).expect("directory");
        let write = |name: &str, text: &str| {
            let path = directory.join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let ca_file = write("ca.pem", &ca.0.pem());
        let cert_file = write("node.pem", &node.pem);
        let key_file = write("node.key", &node.key_pem);
        let blacklist = write("revoked.txt", &format!("{REVOKED_SERIAL:X}\n"));
        let stanza = |protocols: Protocols, blacklisted: bool| {
            let mut settings = TlsSettings::new(NODE_NAME, &cert_file, &key_file);
            settings.ca_file = Some(ca_file.clone());
            settings.protocols = protocols;
            if blacklisted {
                settings.cert_blacklist = Some(blacklist.clone());
            }
            settings
        };
        let tls12 = Protocols {
            tls12: true,
            tls13: false,
        };
        let both = Protocols {
            tls12: true,
            tls13: true,
        };
        let tls13 = Protocols {
            tls12: false,
            tls13: true,
        };
        let listener = |settings: TlsSettings, auth: ClientAuth| {
            ServerTls::new(&settings, &auth).expect("listener")
        };
        let listeners = vec![
            listener(stanza(tls12, false), ClientAuth::Off),
            listener(stanza(tls12, false), ClientAuth::Any),
            listener(
                stanza(tls12, true),
                ClientAuth::Names(vec!["client-a".into(), "client-b".into()]),
            ),
            listener(stanza(both, false), ClientAuth::Any),
            listener(stanza(tls13, false), ClientAuth::Off),
            NodeTls::new(&stanza(both, true)).expect("node").server,
        ];
        assert_eq!(listeners.len(), LISTENERS);
        Fixture {
            ca: Issued {
                der: ca.0.der().clone(),
                pem: ca.0.pem(),
                key_pem: ca.1.serialize_pem(),
                key_der: ca.1.serialize_der(),
            },
            node,
            client_a,
            client_b,
            other_client,
            listeners,
            _directory: directory,
        }
    })
}

/// Whether listener `index` admits the genuine certificate `der` (issued
/// by the CA, valid now): the names it lists, and its blacklist.
fn admits(fixture: &Fixture, index: usize, der: &CertificateDer<'_>) -> bool {
    let is = |issued: &Issued| issued.der.as_ref() == der.as_ref();
    match index {
        0 | 4 => false,
        1 | 3 => is(&fixture.client_a) || is(&fixture.client_b) || is(&fixture.node),
        // Names client-a, client-b; client-b is revoked.
        2 => is(&fixture.client_a),
        // Between nodes: the node's name; nobody revoked is a node.
        5 => is(&fixture.node),
        _ => false,
    }
}

pub fn check(bytes: &[u8]) {
    let fixture = fixture();
    let Some((&pick, rest)) = bytes.split_first() else {
        return;
    };
    let index = usize::from(pick) % LISTENERS;
    let listener = &fixture.listeners[index];
    let Some((&mode, rest)) = rest.split_first() else {
        return;
    };
    if mode & CERTIFICATE_MODE != 0 {
        check_chain(fixture, index, listener, rest);
    } else {
        check_handshake(fixture, index, listener, rest, usize::from(mode));
    }
}

/// A chain put to the listener's verifier and to PKI login's name.
fn check_chain(fixture: &Fixture, index: usize, listener: &ServerTls, bytes: &[u8]) {
    let chain = chain(bytes);
    let Some(leaf) = chain.first() else {
        return;
    };
    let user = certificate_user(leaf);
    if leaf.as_ref() == fixture.client_a.der.as_ref() {
        assert_eq!(user.as_deref(), Some("client-a"));
    }
    if let Some(user) = &user {
        assert!(user.len() <= leaf.len());
    }
    match listener.verify_client_chain(&chain) {
        Ok(()) => assert!(
            admits(fixture, index, leaf),
            "listener {index} accepted a certificate it must refuse"
        ),
        Err(_) => {
            let genuine_chain = chain.len() == 1
                || chain
                    .get(1)
                    .is_some_and(|ca| ca.as_ref() == fixture.ca.der.as_ref());
            if chain.len() <= 2 && genuine_chain && admits(fixture, index, leaf) {
                panic!("listener {index} refused a certificate it admits");
            }
        }
    }
}

/// Splits `bytes` into certificates, each after a u16 length.
pub fn chain(bytes: &[u8]) -> Vec<CertificateDer<'static>> {
    let mut chain = Vec::new();
    let mut rest = bytes;
    while chain.len() < 8 {
        let Some((length, after)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let length = usize::from(u16::from_be_bytes(*length));
        let (der, after) = after.split_at(length.min(after.len()));
        chain.push(CertificateDer::from(der.to_vec()));
        rest = after;
    }
    chain
}

/// What a client sends, fed to a rustls connection with the listener's
/// configuration in chunks of `chunk` bytes.
fn check_handshake(
    fixture: &Fixture,
    index: usize,
    listener: &ServerTls,
    bytes: &[u8],
    chunk: usize,
) {
    let mut connection =
        rustls::ServerConnection::new(listener.rustls_config()).expect("a server connection");
    let chunk = if chunk == 0 {
        bytes.len().max(1)
    } else {
        chunk
    };
    let mut failed = false;
    let mut sent = Vec::new();
    for piece in bytes.chunks(chunk) {
        let mut cursor = piece;
        while !cursor.is_empty() {
            match connection.read_tls(&mut cursor) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            match connection.process_new_packets() {
                Ok(state) => {
                    assert!(!failed, "a failed connection took more input");
                    assert_eq!(
                        state.plaintext_bytes_to_read(),
                        0,
                        "data before a handshake"
                    );
                }
                Err(_) => failed = true,
            }
            drain(&mut connection, &mut sent);
            if failed {
                break;
            }
        }
        if failed {
            // The connection's owner closes it now; fed more, it stays failed.
            assert!(connection.process_new_packets().is_err());
            break;
        }
    }
    drain(&mut connection, &mut sent);
    assert!(
        connection.is_handshaking(),
        "listener {index} finished a handshake with bytes that know no key"
    );
    let mut plain = [0u8; 64];
    assert!(
        !matches!(std::io::Read::read(&mut connection.reader(), &mut plain), Ok(read) if read > 0),
        "application data before the handshake"
    );
    if let Some(leaf) = connection
        .peer_certificates()
        .and_then(|chain| chain.first())
    {
        assert!(
            admits(fixture, index, leaf),
            "listener {index} kept a refused certificate"
        );
    }
    check_records(&sent);
}

fn drain(connection: &mut rustls::ServerConnection, sent: &mut Vec<u8>) {
    while connection.wants_write() {
        match connection.write_tls(sent) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// What the listener sent is whole TLS records.
fn check_records(mut sent: &[u8]) {
    while !sent.is_empty() {
        let (header, rest) = sent.split_first_chunk::<5>().expect("a record header");
        assert!((20..=23).contains(&header[0]), "content type {}", header[0]);
        assert_eq!(header[1], 3, "record version {}.{}", header[1], header[2]);
        let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
        assert!(length <= 16 * 1024 + 2048, "record of {length} bytes");
        assert!(rest.len() >= length, "a cut record");
        sent = &rest[length..];
    }
}

/// Joins certificates into a certificate-mode input for `listener`.
pub fn chain_input(listener: u8, chain: &[&[u8]]) -> Vec<u8> {
    let mut bytes = vec![listener, CERTIFICATE_MODE];
    for der in chain {
        let length = u16::try_from(der.len()).expect("certificate under 64 KiB");
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend_from_slice(der);
    }
    bytes
}
