//! TLS contexts for [`super::Connection`]: what a TLS listener presents and
//! whom it lets in ([`ServerTls`]), and what a dialler presents and trusts
//! ([`ClientTls`]). rustls with the *ring* provider; TLS 1.2 by default,
//! as Aerospike (`protocols`), 1.3 on request.
//!
//! A [`TlsSettings`] is one `network { tls NAME { … } }` stanza: a
//! certificate chain and its key, the CAs that sign the peers' certificates
//! (`ca-file`, `ca-path`), the protocols and cipher suites allowed, and
//! revoked serial numbers (`cert-blacklist`). A listener adds how it checks
//! clients ([`ClientAuth`], `tls-authenticate-client`):
//!
//! ```text
//!  false        standard TLS: no client certificate asked
//!  any          mutual TLS: a certificate signed by the CA (the default)
//!  NAME...      mutual TLS: and its CN or a DNS name (SAN) is one of NAME
//! ```
//!
//! Every file is read when the context is built, and again by
//! [`ServerTls::reload`] and [`ClientTls::reload`] (`service {
//! tls-refresh-period }`): a new certificate, key, CA or blacklist applies
//! to the connections accepted or dialled after it, without a restart; a
//! reload that fails keeps the context in force. Errors name the file and
//! what was wrong with it.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme,
    SupportedCipherSuite,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One `tls NAME { … }` stanza.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub name: String,
    /// The certificate chain this node presents (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// CA certificates (PEM) that sign the peers' certificates.
    pub ca_file: Option<PathBuf>,
    /// A directory whose files hold more CA certificates.
    pub ca_path: Option<PathBuf>,
    pub protocols: Protocols,
    /// Cipher suites allowed, by OpenSSL or IANA name; empty: rustls's
    /// defaults for the protocols.
    pub cipher_suites: Vec<String>,
    /// A file of revoked certificates: one serial number (hex) per line,
    /// optionally followed by its issuer (`/C=../O=../CN=..`).
    pub cert_blacklist: Option<PathBuf>,
}

impl TlsSettings {
    /// A stanza with a certificate and key, TLS 1.2, nothing else.
    pub fn new(name: &str, cert_file: &Path, key_file: &Path) -> TlsSettings {
        TlsSettings {
            name: name.to_owned(),
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            ca_file: None,
            ca_path: None,
            protocols: Protocols::default(),
            cipher_suites: Vec::new(),
            cert_blacklist: None,
        }
    }

    pub fn has_ca(&self) -> bool {
        self.ca_file.is_some() || self.ca_path.is_some()
    }
}

/// TLS versions allowed (`protocols`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocols {
    pub tls12: bool,
    pub tls13: bool,
}

impl Default for Protocols {
    /// Aerospike's default, `TLSv1.2` (the C and Python clients offer
    /// nothing else).
    fn default() -> Protocols {
        Protocols {
            tls12: true,
            tls13: false,
        }
    }
}

impl Protocols {
    /// Parses Aerospike's (OpenSSL's) protocol list: names set the list
    /// (`TLSv1.2 TLSv1.3`), `+NAME`/`-NAME` add or remove, `all`/`-all`
    /// every version. SSLv3, TLSv1 and TLSv1.1 are refused: rustls does not
    /// speak them.
    pub fn parse(tokens: &[&str]) -> Result<Protocols, String> {
        let mut protocols = Protocols {
            tls12: false,
            tls13: false,
        };
        for token in tokens.iter().flat_map(|token| token.split(',')) {
            let token = token.trim();
            if token.is_empty() {
                continue;
            }
            let (on, name) = match token.as_bytes()[0] {
                b'+' => (true, &token[1..]),
                b'-' => (false, &token[1..]),
                _ => (true, token),
            };
            match name.to_ascii_lowercase().as_str() {
                "all" => {
                    protocols.tls12 = on;
                    protocols.tls13 = on;
                }
                "tlsv1.2" => protocols.tls12 = on,
                "tlsv1.3" => protocols.tls13 = on,
                "sslv3" | "tlsv1" | "tlsv1.1" => {
                    if on {
                        return Err(format!(
                            "'{name}' is not supported (rustls speaks TLSv1.2 and TLSv1.3 only)"
                        ));
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown protocol '{name}' (expected TLSv1.2, TLSv1.3, all, with + or -)"
                    ))
                }
            }
        }
        if !protocols.tls12 && !protocols.tls13 {
            return Err("no protocol left (allow TLSv1.2 or TLSv1.3)".to_owned());
        }
        Ok(protocols)
    }

    fn versions(self) -> Vec<&'static rustls::SupportedProtocolVersion> {
        let mut versions = Vec::new();
        if self.tls13 {
            versions.push(&rustls::version::TLS13);
        }
        if self.tls12 {
            versions.push(&rustls::version::TLS12);
        }
        versions
    }
}

/// How a listener checks its clients (`tls-authenticate-client`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// `false`: standard TLS, no client certificate.
    Off,
    /// `any` (and the default): a certificate signed by the CA.
    Any,
    /// A certificate signed by the CA whose CN or a DNS SAN is one of
    /// these (compared without regard to case).
    Names(Vec<String>),
}

/// The OpenSSL and IANA names of the cipher suites rustls offers.
const SUITES: &[(&str, SupportedCipherSuite)] = {
    use rustls::crypto::ring::cipher_suite::*;
    &[
        ("TLS_AES_256_GCM_SHA384", TLS13_AES_256_GCM_SHA384),
        ("TLS_AES_128_GCM_SHA256", TLS13_AES_128_GCM_SHA256),
        (
            "TLS_CHACHA20_POLY1305_SHA256",
            TLS13_CHACHA20_POLY1305_SHA256,
        ),
        (
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (
            "ECDHE-RSA-AES256-GCM-SHA384",
            TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "ECDHE-RSA-AES128-GCM-SHA256",
            TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "ECDHE-RSA-CHACHA20-POLY1305",
            TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
    ]
};

/// The suite named `name` (OpenSSL's name, or IANA's as rustls spells it),
/// or an error listing the known ones.
pub fn cipher_suite(name: &str) -> Result<SupportedCipherSuite, String> {
    SUITES
        .iter()
        .find(|(openssl, suite)| {
            openssl.eq_ignore_ascii_case(name)
                || format!("{:?}", suite.suite()).eq_ignore_ascii_case(name)
        })
        .map(|(_, suite)| *suite)
        .ok_or_else(|| {
            let known: Vec<&str> = SUITES.iter().map(|(openssl, _)| *openssl).collect();
            format!(
                "unknown cipher suite '{name}' (OpenSSL keywords such as HIGH or !aNULL are not \
                 supported; name the suites: {})",
                known.join(":")
            )
        })
}

fn provider(settings: &TlsSettings) -> Result<Arc<CryptoProvider>, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        provider.cipher_suites = settings
            .cipher_suites
            .iter()
            .map(|name| cipher_suite(name))
            .collect::<Result<_, _>>()?;
    }
    let usable = provider.cipher_suites.iter().any(|suite| match suite {
        SupportedCipherSuite::Tls12(_) => settings.protocols.tls12,
        SupportedCipherSuite::Tls13(_) => settings.protocols.tls13,
    });
    if !usable {
        return Err("no cipher suite of cipher-suite fits the protocols allowed".to_owned());
    }
    Ok(Arc::new(provider))
}

/// Everything a context is built from, read from the files.
#[derive(Clone, PartialEq, Eq)]
struct Material {
    chain: Vec<CertificateDer<'static>>,
    key: Vec<u8>,
    roots: Vec<CertificateDer<'static>>,
    revoked: Vec<Revoked>,
}

impl Material {
    fn read(settings: &TlsSettings) -> Result<Material, String> {
        let chain = read_chain(&settings.cert_file)?;
        let key = std::fs::read(&settings.key_file)
            .map_err(|error| format!("{}: cannot read: {error}", settings.key_file.display()))?;
        let mut roots = Vec::new();
        if let Some(file) = &settings.ca_file {
            roots.extend(read_chain(file)?);
        }
        if let Some(directory) = &settings.ca_path {
            roots.extend(read_ca_path(directory)?);
        }
        let revoked = match &settings.cert_blacklist {
            Some(file) => read_blacklist(file)?,
            None => Vec::new(),
        };
        Ok(Material {
            chain,
            key,
            roots,
            revoked,
        })
    }

    fn key(&self, settings: &TlsSettings) -> Result<PrivateKeyDer<'static>, String> {
        PrivateKeyDer::from_pem_slice(&self.key).map_err(|error| {
            format!(
                "{}: no usable private key (PEM PKCS#8, PKCS#1 or SEC1; an encrypted key must \
                 be decrypted first): {error}",
                settings.key_file.display()
            )
        })
    }

    fn root_store(&self) -> Result<rustls::RootCertStore, String> {
        let mut store = rustls::RootCertStore::empty();
        for root in &self.roots {
            store
                .add(root.clone())
                .map_err(|error| format!("bad CA certificate: {error}"))?;
        }
        Ok(store)
    }
}

/// A listener's TLS context; clones share it, and a reload reaches them
/// all.
#[derive(Clone)]
pub struct ServerTls {
    shared: Arc<ServerShared>,
}

struct ServerShared {
    settings: TlsSettings,
    auth: ClientAuth,
    config: ArcSwap<Accepting>,
    material: Mutex<Material>,
}

/// What a listener accepts connections with: the rustls configuration,
/// and its client-certificate verifier (None: no certificate asked).
struct Accepting {
    config: Arc<rustls::ServerConfig>,
    verifier: Option<Arc<CheckedClients>>,
}

impl ServerTls {
    /// Reads the stanza's files and builds the context; errors name the
    /// stanza's file at fault.
    pub fn new(settings: &TlsSettings, auth: &ClientAuth) -> Result<ServerTls, String> {
        let material = Material::read(settings)?;
        let accepting = server_config(settings, auth, &material)?;
        Ok(ServerTls {
            shared: Arc::new(ServerShared {
                settings: settings.clone(),
                auth: auth.clone(),
                config: ArcSwap::from_pointee(accepting),
                material: Mutex::new(material),
            }),
        })
    }

    /// Presents the chain in `cert_file` with the key in `key_file`; asks
    /// clients for no certificate.
    pub fn from_files(cert_file: &Path, key_file: &Path) -> Result<ServerTls, String> {
        ServerTls::new(
            &TlsSettings::new("default", cert_file, key_file),
            &ClientAuth::Off,
        )
    }

    /// The stanza's name.
    pub fn name(&self) -> &str {
        &self.shared.settings.name
    }

    /// Reads the files again; when anything changed, connections accepted
    /// from now on get the new context (`Ok(true)`). On error the context
    /// in force stays.
    pub fn reload(&self) -> Result<bool, String> {
        let shared = &self.shared;
        let material = Material::read(&shared.settings)?;
        let mut current = shared.material.lock();
        if *current == material {
            return Ok(false);
        }
        let accepting = server_config(&shared.settings, &shared.auth, &material)?;
        shared.config.store(Arc::new(accepting));
        *current = material;
        Ok(true)
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.shared.config.load().config))
    }

    /// The rustls configuration connections are accepted with now (the
    /// `tls` fuzz target drives a rustls connection with it, without a
    /// socket).
    pub fn rustls_config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.shared.config.load().config)
    }

    /// Checks a client's certificate chain (leaf first) as the handshake
    /// does: signed by the CA, valid now, not on the blacklist, named as
    /// `tls-authenticate-client` asks. An error says why, or that this
    /// listener asks for no certificate.
    pub fn verify_client_chain(&self, chain: &[CertificateDer<'static>]) -> Result<(), String> {
        let accepting = self.shared.config.load();
        let verifier = accepting
            .verifier
            .as_ref()
            .ok_or("this listener asks for no client certificate")?;
        let (leaf, intermediates) = chain.split_first().ok_or("no certificate")?;
        verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|error| error.to_string())
    }
}

fn server_config(
    settings: &TlsSettings,
    auth: &ClientAuth,
    material: &Material,
) -> Result<Accepting, String> {
    let provider = provider(settings)?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&settings.protocols.versions())
        .map_err(|error| error.to_string())?;
    let mut verifier = None;
    let builder = match auth {
        ClientAuth::Off => builder.with_no_client_auth(),
        ClientAuth::Any | ClientAuth::Names(_) => {
            if material.roots.is_empty() {
                return Err(
                    "checking client certificates needs the CA that signs them (ca-file or \
                     ca-path)"
                        .to_owned(),
                );
            }
            let inner = WebPkiClientVerifier::builder_with_provider(
                Arc::new(material.root_store()?),
                provider,
            )
            .build()
            .map_err(|error| format!("cannot check client certificates: {error}"))?;
            let names = match auth {
                ClientAuth::Names(names) => Some(names.clone()),
                _ => None,
            };
            let checked = Arc::new(CheckedClients {
                inner,
                names,
                revoked: material.revoked.clone(),
            });
            verifier = Some(Arc::clone(&checked));
            builder.with_client_cert_verifier(checked)
        }
    };
    let config = builder
        .with_single_cert(material.chain.clone(), material.key(settings)?)
        .map_err(|error| {
            format!(
                "{} and {} do not fit: {error}",
                settings.cert_file.display(),
                settings.key_file.display()
            )
        })?;
    Ok(Accepting {
        config: Arc::new(config),
        verifier,
    })
}

/// The CA's check of a client certificate, then the blacklist and the
/// names `tls-authenticate-client` lists.
#[derive(Debug)]
struct CheckedClients {
    inner: Arc<dyn ClientCertVerifier>,
    names: Option<Vec<String>>,
    revoked: Vec<Revoked>,
}

impl ClientCertVerifier for CheckedClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let identity = unrevoked(end_entity, &self.revoked, "client")?;
        if let Some(names) = &self.names {
            if !identity.has_any_name(names) {
                tracing::warn!(
                    names = ?identity.names,
                    "TLS: refused a client certificate for none of tls-authenticate-client's names"
                );
                return Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName,
                ));
            }
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What the checks read from a certificate.
struct Identity {
    /// Lower-case hex, no leading zeros.
    serial: String,
    /// OpenSSL's one-line form: `/C=US/O=Acme/CN=Acme CA`.
    issuer: String,
    /// Its subject CNs and DNS SANs.
    names: Vec<String>,
}

impl Identity {
    fn of(der: &CertificateDer<'_>) -> Result<Identity, String> {
        use x509_parser::prelude::*;
        let (_, certificate) =
            X509Certificate::from_der(der).map_err(|error| format!("bad certificate: {error}"))?;
        let serial = normal_serial(&certificate.raw_serial_as_string().replace(':', ""));
        let mut issuer = String::new();
        for attribute in certificate.issuer().iter_attributes() {
            let key = match attribute.attr_type().to_id_string().as_str() {
                "2.5.4.6" => "C",
                "2.5.4.8" => "ST",
                "2.5.4.7" => "L",
                "2.5.4.10" => "O",
                "2.5.4.11" => "OU",
                "2.5.4.3" => "CN",
                other => other,
            }
            .to_owned();
            let value = attribute.as_str().unwrap_or_default();
            issuer.push_str(&format!("/{key}={value}"));
        }
        let mut names: Vec<String> = certificate
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .map(str::to_owned)
            .collect();
        if let Ok(Some(alternatives)) = certificate.subject_alternative_name() {
            for name in &alternatives.value.general_names {
                if let GeneralName::DNSName(dns) = name {
                    names.push((*dns).to_owned());
                }
            }
        }
        Ok(Identity {
            serial,
            issuer,
            names,
        })
    }

    fn has_any_name(&self, wanted: &[String]) -> bool {
        self.names
            .iter()
            .any(|name| wanted.iter().any(|want| want.eq_ignore_ascii_case(name)))
    }
}

/// The user a client certificate names for PKI login: its subject's
/// (first) common name, or an empty name if it has none; None if the
/// certificate does not parse.
pub fn certificate_user(der: &CertificateDer<'_>) -> Option<String> {
    use x509_parser::prelude::*;
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let name = certificate
        .subject()
        .iter_common_name()
        .next()
        .map(|cn| cn.as_str().map(str::to_owned).unwrap_or_default())
        .unwrap_or_default();
    Some(name)
}

fn normal_serial(hex: &str) -> String {
    let trimmed = hex.trim_start_matches('0').to_ascii_lowercase();
    if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed
    }
}

/// One line of a `cert-blacklist` file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Revoked {
    serial: String,
    issuer: Option<String>,
}

impl Revoked {
    fn matches(&self, identity: &Identity) -> bool {
        self.serial == identity.serial
            && self
                .issuer
                .as_ref()
                .is_none_or(|issuer| issuer == &identity.issuer)
    }
}

/// The identity of a certificate the chain check accepted, or a refusal
/// (logged) if it is on the `cert-blacklist`; `whose` names the other side
/// in the log line.
fn unrevoked(
    end_entity: &CertificateDer<'_>,
    revoked: &[Revoked],
    whose: &str,
) -> Result<Identity, rustls::Error> {
    let identity = Identity::of(end_entity)
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
    if let Some(revoked) = revoked.iter().find(|revoked| revoked.matches(&identity)) {
        tracing::warn!(serial = %revoked.serial, "TLS: refused a revoked {whose} certificate");
        return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
    }
    Ok(identity)
}

fn read_blacklist(file: &Path) -> Result<Vec<Revoked>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|error| format!("{}: cannot read: {error}", file.display()))?;
    let mut revoked = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (serial, issuer) = match line.split_once(char::is_whitespace) {
            Some((serial, issuer)) => (serial, Some(issuer.trim().to_owned())),
            None => (line, None),
        };
        let serial = serial.replace(':', "");
        if serial.is_empty() || !serial.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(format!(
                "{}: line {}: '{serial}' is not a serial number in hex",
                file.display(),
                number + 1
            ));
        }
        revoked.push(Revoked {
            serial: normal_serial(&serial),
            issuer: issuer.filter(|issuer| !issuer.is_empty()),
        });
    }
    Ok(revoked)
}

/// A dialler's TLS context: the roots it trusts, the name it expects, and,
/// for mutual TLS, the certificate it presents. Clones share it; built
/// from a stanza, [`ClientTls::reload`] reads its files again and the
/// connections dialled after it use what changed (a renewed certificate,
/// a new CA, a new blacklist).
#[derive(Clone)]
pub struct ClientTls {
    shared: Arc<ClientShared>,
}

struct ClientShared {
    /// The stanza it was built from; None: roots given in memory, nothing
    /// to read again.
    settings: Option<TlsSettings>,
    name: ServerName<'static>,
    config: ArcSwap<rustls::ClientConfig>,
    material: Mutex<Option<Material>>,
}

impl ClientTls {
    /// Trusts the CA certificates in `ca_file`; the peer's certificate
    /// must name `name` (a DNS name, or an IP address).
    pub fn from_ca_file(ca_file: &Path, name: &str) -> Result<ClientTls, String> {
        let roots = read_chain(ca_file)?;
        ClientTls::from_roots(roots, name)
            .map_err(|error| format!("{}: {error}", ca_file.display()))
    }

    /// From CA certificates already in memory (DER).
    pub fn from_roots(
        roots: Vec<CertificateDer<'static>>,
        name: &str,
    ) -> Result<ClientTls, String> {
        let config = client_config(
            roots,
            None,
            Protocols {
                tls12: true,
                tls13: true,
            },
            Vec::new(),
        )?;
        ClientTls::with(None, config, None, name)
    }

    /// A stanza's context as a dialler: trusts its CA, presents its
    /// certificate (mutual TLS between nodes), expects `name`, and refuses
    /// a peer whose certificate is on the stanza's `cert-blacklist`.
    pub fn new(settings: &TlsSettings, name: &str) -> Result<ClientTls, String> {
        let material = Material::read(settings)?;
        let config = stanza_client_config(settings, &material)?;
        ClientTls::with(Some(settings.clone()), config, Some(material), name)
            .map_err(|error| format!("tls {}: {error}", settings.name))
    }

    fn with(
        settings: Option<TlsSettings>,
        config: rustls::ClientConfig,
        material: Option<Material>,
        name: &str,
    ) -> Result<ClientTls, String> {
        let name = ServerName::try_from(name.to_owned())
            .map_err(|error| format!("bad TLS name '{name}': {error}"))?;
        Ok(ClientTls {
            shared: Arc::new(ClientShared {
                settings,
                name,
                config: ArcSwap::from_pointee(config),
                material: Mutex::new(material),
            }),
        })
    }

    /// The stanza's name (empty for roots given in memory).
    pub fn name(&self) -> &str {
        self.shared
            .settings
            .as_ref()
            .map_or("", |settings| settings.name.as_str())
    }

    /// Reads the stanza's files again; when anything changed, connections
    /// dialled from now on present and check with the new ones
    /// (`Ok(true)`). On error the context in force stays.
    pub fn reload(&self) -> Result<bool, String> {
        let shared = &self.shared;
        let Some(settings) = &shared.settings else {
            return Ok(false);
        };
        let material = Material::read(settings)?;
        let mut current = shared.material.lock();
        if current.as_ref() == Some(&material) {
            return Ok(false);
        }
        let config = stanza_client_config(settings, &material)?;
        shared.config.store(Arc::new(config));
        *current = Some(material);
        Ok(true)
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.shared.config.load_full())
    }

    pub(crate) fn server_name(&self) -> ServerName<'static> {
        self.shared.name.clone()
    }
}

/// A stanza's dialling config: its CA (required), its certificate, its
/// protocols and blacklist.
fn stanza_client_config(
    settings: &TlsSettings,
    material: &Material,
) -> Result<rustls::ClientConfig, String> {
    if material.roots.is_empty() {
        return Err(format!(
            "tls {}: dialling with TLS needs the CA that signs the peers (ca-file or ca-path)",
            settings.name
        ));
    }
    let key = material.key(settings)?;
    client_config(
        material.roots.clone(),
        Some((material.chain.clone(), key)),
        settings.protocols,
        material.revoked.clone(),
    )
    .map_err(|error| format!("tls {}: {error}", settings.name))
}

fn client_config(
    roots: Vec<CertificateDer<'static>>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    protocols: Protocols,
    revoked: Vec<Revoked>,
) -> Result<rustls::ClientConfig, String> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store
            .add(root)
            .map_err(|error| format!("bad CA certificate: {error}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&protocols.versions())
        .map_err(|error| error.to_string())?;
    let builder = if revoked.is_empty() {
        builder.with_root_certificates(store)
    } else {
        let inner =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map_err(|error| format!("cannot check server certificates: {error}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CheckedServers { inner, revoked }))
    };
    match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|error| format!("certificate and key do not fit: {error}")),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The CA's check of a server certificate (chain, dates, name), then the
/// blacklist.
#[derive(Debug)]
struct CheckedServers {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    revoked: Vec<Revoked>,
}

impl rustls::client::danger::ServerCertVerifier for CheckedServers {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        unrevoked(end_entity, &self.revoked, "peer")?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The TLS of the connections between nodes (fabric, heartbeat,
/// migrations), from one `tls NAME { }` stanza: mutual both ways. The node
/// accepts only peers whose certificate its CA signed and whose CN or DNS
/// SAN is the stanza's name, and dials peers presenting its own
/// certificate, checking theirs against the same CA and name (a DNS SAN:
/// rustls checks no CN).
#[derive(Clone)]
pub struct NodeTls {
    pub server: ServerTls,
    pub client: ClientTls,
}

/// A TLS context whose files `tls-refresh-period` reads again: a
/// listener's or a dialler's.
#[derive(Clone)]
pub enum Refreshed {
    Listener(ServerTls),
    Dialler(ClientTls),
}

impl Refreshed {
    pub fn name(&self) -> &str {
        match self {
            Refreshed::Listener(tls) => tls.name(),
            Refreshed::Dialler(tls) => tls.name(),
        }
    }

    /// `listener` or `dialler`, for the log.
    pub fn side(&self) -> &'static str {
        match self {
            Refreshed::Listener(_) => "listener",
            Refreshed::Dialler(_) => "dialler",
        }
    }

    pub fn reload(&self) -> Result<bool, String> {
        match self {
            Refreshed::Listener(tls) => tls.reload(),
            Refreshed::Dialler(tls) => tls.reload(),
        }
    }
}

impl NodeTls {
    pub fn new(settings: &TlsSettings) -> Result<NodeTls, String> {
        if !settings.has_ca() {
            return Err(format!(
                "tls {}: TLS between nodes needs the CA that signs every node (ca-file or \
                 ca-path)",
                settings.name
            ));
        }
        let server = ServerTls::new(settings, &ClientAuth::Names(vec![settings.name.clone()]))
            .map_err(|error| format!("tls {}: {error}", settings.name))?;
        let client = ClientTls::new(settings, &settings.name)?;
        Ok(NodeTls { server, client })
    }

    /// Both sides, for the refresh: a node presents a renewed certificate
    /// when it accepts and when it dials.
    pub fn refreshed(&self) -> [Refreshed; 2] {
        [
            Refreshed::Listener(self.server.clone()),
            Refreshed::Dialler(self.client.clone()),
        ]
    }
}

/// Every certificate in a PEM file; at least one.
fn read_chain(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(file)
        .map_err(|error| format!("{}: cannot read: {error}", file.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{}: bad PEM certificate: {error}", file.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in the file", file.display()));
    }
    Ok(chain)
}

/// The certificates of every file in `directory` (files without one, such
/// as OpenSSL's hash links to nothing, are passed over); at least one.
fn read_ca_path(directory: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let entries = std::fs::read_dir(directory)
        .map_err(|error| format!("{}: cannot read: {error}", directory.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    let mut roots = Vec::new();
    for path in paths {
        if let Ok(iter) = CertificateDer::pem_file_iter(&path) {
            roots.extend(iter.filter_map(Result::ok));
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "{}: no CA certificate in the directory",
            directory.display()
        ));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_as_openssl_lists() {
        let parse = |text: &str| Protocols::parse(&text.split(' ').collect::<Vec<_>>());
        assert_eq!(
            parse("TLSv1.2"),
            Ok(Protocols {
                tls12: true,
                tls13: false
            })
        );
        assert_eq!(
            parse("-all +TLSv1.2"),
            Ok(Protocols {
                tls12: true,
                tls13: false
            })
        );
        assert_eq!(
            parse("TLSv1.2 TLSv1.3"),
            Ok(Protocols {
                tls12: true,
                tls13: true
            })
        );
        assert_eq!(
            parse("all -TLSv1.2"),
            Ok(Protocols {
                tls12: false,
                tls13: true
            })
        );
        assert_eq!(
            parse("all -SSLv3 -TLSv1"),
            Ok(Protocols {
                tls12: true,
                tls13: true
            })
        );
        assert!(parse("TLSv1.1").unwrap_err().contains("not supported"));
        assert!(parse("TLSv9").unwrap_err().contains("unknown protocol"));
        assert!(parse("-all").unwrap_err().contains("no protocol"));
    }

    #[test]
    fn cipher_suites_by_openssl_or_iana_name() {
        assert!(cipher_suite("ECDHE-RSA-AES128-GCM-SHA256").is_ok());
        assert!(cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").is_ok());
        assert!(cipher_suite("TLS13_AES_128_GCM_SHA256").is_ok());
        assert!(cipher_suite("HIGH")
            .unwrap_err()
            .contains("OpenSSL keywords"));
    }

    #[test]
    fn blacklist_lines_and_serials() {
        let directory =
            std::env::temp_dir().join(format!("bolide-blacklist-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let file = directory.join("revoked");
        std::fs::write(&file, "# revoked\n00A1B2 /C=US/CN=Test CA\n\nff\n").unwrap();
        let revoked = read_blacklist(&file).unwrap();
        assert_eq!(
            revoked,
            [
                Revoked {
                    serial: "a1b2".into(),
                    issuer: Some("/C=US/CN=Test CA".into())
                },
                Revoked {
                    serial: "ff".into(),
                    issuer: None
                },
            ]
        );
        let identity = Identity {
            serial: "ff".into(),
            issuer: "/CN=x".into(),
            names: vec![],
        };
        assert!(revoked[1].matches(&identity));
        assert!(!revoked[0].matches(&identity));
        std::fs::write(&file, "zz12\n").unwrap();
        assert!(read_blacklist(&file).unwrap_err().contains("line 1"));
        let _ = std::fs::remove_dir_all(&directory);
    }
}
