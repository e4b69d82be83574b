//! TLS to the server (`--tls-enable`, `--tls-name`, `--tls-cafile`,
//! `--tls-certfile`, `--tls-keyfile`, as Aerospike's tools spell them):
//! a rustls client context built once, and a stream that is plain TCP or
//! TLS so the engine's hot path is the same code over both.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TLS client context and the name the server's certificate must carry.
#[derive(Clone)]
pub struct Tls {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish()
    }
}

impl Tls {
    /// Trusts `cafile`, expects `name`, presents `cert`/`key` if given.
    pub fn new(cafile: &Path, name: &str, identity: Option<(&Path, &Path)>) -> Result<Tls, String> {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(cafile)
            .map_err(|e| format!("{}: {e}", cafile.display()))?
        {
            let certificate = certificate.map_err(|e| format!("{}: {e}", cafile.display()))?;
            roots
                .add(certificate)
                .map_err(|e| format!("{}: bad CA certificate: {e}", cafile.display()))?;
        }
        if roots.is_empty() {
            return Err(format!("{}: no certificate in the file", cafile.display()));
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
        let config = match identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| format!("{}: {e}", cert.display()))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{}: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("{}: no usable private key: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("{}: {e}", cert.display()))?
            }
            None => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| format!("bad --tls-name '{name}': {e}"))?;
        Ok(Tls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            name,
        })
    }

    /// The handshake over a connected socket.
    pub async fn connect(&self, stream: TcpStream) -> io::Result<Stream> {
        let stream = self.connector.connect(self.name.clone(), stream).await?;
        Ok(Stream::Tls(Box::new(stream)))
    }
}

/// A connection to the server: plain TCP or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
