//! TLS to the nodes, as asadm and asinfo take it: `--tls-enable`,
//! `--tls-name` (the name the node's certificate must carry; default: the
//! host), `--tls-cafile`/`--tls-capath` (the CA that signs the nodes'
//! certificates), and `--tls-certfile`/`--tls-keyfile` for a node that asks
//! for client certificates (mutual TLS). rustls; TLS 1.2 and 1.3.
//!
//! The settings are set once at start; info requests, logins, backups and
//! the official client's connections all use them.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The command line's TLS options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub enable: bool,
    pub name: Option<String>,
    pub cafile: Option<PathBuf>,
    pub capath: Option<PathBuf>,
    pub certfile: Option<PathBuf>,
    pub keyfile: Option<PathBuf>,
}

/// TLS as configured for this run.
pub struct Tls {
    pub config: Arc<rustls::ClientConfig>,
    /// `--tls-name`, if given.
    pub name: Option<String>,
}

static TLS: OnceLock<Option<Tls>> = OnceLock::new();

/// Builds the TLS context from `options` (once, at start); an error names
/// the file at fault.
pub fn set(options: &Options) -> Result<(), String> {
    let tls = if options.enable {
        Some(build(options)?)
    } else {
        if options.cafile.is_some() || options.certfile.is_some() || options.name.is_some() {
            return Err("TLS options given without --tls-enable".to_owned());
        }
        None
    };
    let _ = TLS.set(tls);
    Ok(())
}

/// The TLS context, when `--tls-enable` was given.
pub fn get() -> Option<&'static Tls> {
    TLS.get().and_then(Option::as_ref)
}

fn build(options: &Options) -> Result<Tls, String> {
    let mut roots = rustls::RootCertStore::empty();
    let mut add = |file: &Path, required: bool| -> Result<(), String> {
        let certificates = match CertificateDer::pem_file_iter(file) {
            Ok(iter) => iter.filter_map(Result::ok).collect::<Vec<_>>(),
            Err(error) if required => return Err(format!("{}: {error}", file.display())),
            Err(_) => Vec::new(),
        };
        if required && certificates.is_empty() {
            return Err(format!("{}: no certificate in the file", file.display()));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|error| format!("{}: bad CA certificate: {error}", file.display()))?;
        }
        Ok(())
    };
    if let Some(file) = &options.cafile {
        add(file, true)?;
    }
    if let Some(directory) = &options.capath {
        let entries = std::fs::read_dir(directory)
            .map_err(|error| format!("{}: {error}", directory.display()))?;
        for entry in entries.flatten() {
            if entry.path().is_file() {
                add(&entry.path(), false)?;
            }
        }
    }
    if roots.is_empty() {
        return Err("--tls-enable needs --tls-cafile or --tls-capath (the CA that signs the nodes' certificates)".to_owned());
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| error.to_string())?
    .with_root_certificates(roots);
    let config = match (&options.certfile, &options.keyfile) {
        (Some(certfile), Some(keyfile)) => {
            let chain = CertificateDer::pem_file_iter(certfile)
                .map_err(|error| format!("{}: {error}", certfile.display()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| format!("{}: {error}", certfile.display()))?;
            let key = PrivateKeyDer::from_pem_file(keyfile).map_err(|error| {
                format!("{}: no usable private key: {error}", keyfile.display())
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| format!("{}: {error}", certfile.display()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("--tls-certfile and --tls-keyfile go together".to_owned()),
    };
    Ok(Tls {
        config: Arc::new(config),
        name: options.name.clone(),
    })
}

/// A connection to a node: plain, or TLS when enabled.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.read(buffer),
            Stream::Tls(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.write(bytes),
            Stream::Tls(stream) => stream.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.flush(),
            Stream::Tls(stream) => stream.flush(),
        }
    }
}

impl Stream {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(stream) => stream,
            Stream::Tls(stream) => &stream.sock,
        }
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Connects to `address` (`host:port`) within `timeout`; with TLS, runs
/// the handshake, checking the node's certificate against `--tls-name` (or
/// the host).
pub fn connect(address: &str, timeout: Duration) -> Result<Stream, String> {
    let target = address
        .to_socket_addrs()
        .map_err(|error| format!("{address}: {error}"))?
        .next()
        .ok_or_else(|| format!("{address}: no address"))?;
    let stream = TcpStream::connect_timeout(&target, timeout)
        .map_err(|error| format!("cannot connect to {address}: {error}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|error| format!("{address}: {error}"))?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = get() else {
        return Ok(Stream::Plain(stream));
    };
    let name = tls
        .name
        .clone()
        .unwrap_or_else(|| host_of(address).to_owned());
    let server_name = ServerName::try_from(name.clone())
        .map_err(|error| format!("bad TLS name '{name}': {error}"))?;
    let connection = rustls::ClientConnection::new(Arc::clone(&tls.config), server_name)
        .map_err(|error| format!("{address}: {error}"))?;
    let mut stream = rustls::StreamOwned::new(connection, stream);
    // The handshake now, so that its failure reads as one.
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).map_err(|error| {
            format!("{address}: TLS handshake failed (tls-name '{name}'): {error}")
        })?;
    }
    Ok(Stream::Tls(Box::new(stream)))
}
