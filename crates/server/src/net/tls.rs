//! TLS contexts for [`super::Connection`]: what a TLS listener presents
//! ([`ServerTls`]: a certificate chain and its key) and what a dialler
//! trusts ([`ClientTls`]: a CA and the name the peer's certificate must
//! carry). rustls with the *ring* provider; TLS 1.2 and 1.3 (the official
//! C and Python clients offer 1.2 only).
//!
//! Certificates and keys are read from PEM files. Errors name the file and
//! what was wrong with it, so a configuration mistake stops the node with
//! a message the operator can act on.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::Path;
use std::sync::Arc;

/// A listener's TLS context.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: tokio_rustls::TlsAcceptor,
}

/// A dialler's TLS context: the roots it trusts and the name it expects.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

impl ServerTls {
    /// Presents the chain in `cert_file` with the key in `key_file`; asks
    /// clients for no certificate.
    pub fn from_files(cert_file: &Path, key_file: &Path) -> Result<ServerTls, String> {
        let chain = read_chain(cert_file)?;
        let key = PrivateKeyDer::from_pem_file(key_file)
            .map_err(|error| format!("{}: no usable private key: {error}", key_file.display()))?;
        ServerTls::from_parts(chain, key)
            .map_err(|error| format!("{}: {error}", cert_file.display()))
    }

    /// From a chain and key already in memory (DER).
    pub fn from_parts(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<ServerTls, String> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|error| error.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|error| format!("certificate and key do not fit: {error}"))?;
        Ok(ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }
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
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store
                .add(root)
                .map_err(|error| format!("bad CA certificate: {error}"))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|error| error.to_string())?
            .with_root_certificates(store)
            .with_no_client_auth();
        let name = ServerName::try_from(name.to_owned())
            .map_err(|error| format!("bad TLS name '{name}': {error}"))?;
        Ok(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            name,
        })
    }

    pub(crate) fn connector(&self) -> &tokio_rustls::TlsConnector {
        &self.connector
    }

    pub(crate) fn server_name(&self) -> ServerName<'static> {
        self.name.clone()
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
