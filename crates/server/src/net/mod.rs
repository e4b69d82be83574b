//! One connection type for every socket of the node: plain TCP or TLS
//! (rustls), accepted or dialled, with one API. Client connections (the
//! service and info ports), heartbeat, fabric and migration connections
//! use it; whatever reads or writes through a [`Connection`] works the
//! same over both transports, so TLS is a property of the listener or the
//! dialler, never of the code above.
//!
//! ```text
//!  Connection::accept(stream, tls)     a listener's socket (handshake here, bounded)
//!  Connection::connect(local, to, tls) a dialled socket, bound to the node's own address
//!  read_some / write_all / write_all_within     the hot path (no allocation)
//!  AsyncRead + AsyncWrite, into_split()         for code written against tokio's traits
//!  as_fd()                                       the TCP socket (the buffer budget shuts it down)
//! ```
//!
//! The plain transport keeps the client path as it was before TLS: one
//! `recv` and one `send` per request, and a read that drains the socket
//! clears the readiness flag itself ([`Connection::read_some`]). The choice
//! of transport is one branch per call on an enum; the TLS variant is boxed
//! so a plain connection stays small.

pub mod tls;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;

/// How long an accepted or dialled TLS connection may take to finish its
/// handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A socket of the node, plain or TLS.
pub struct Connection {
    transport: Transport,
}

enum Transport {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl Connection {
    /// A plain TCP connection (Nagle off: every write is a whole answer or
    /// frame, and waiting for more would only add latency).
    pub fn plain(stream: TcpStream) -> Connection {
        let _ = stream.set_nodelay(true);
        Connection {
            transport: Transport::Plain(stream),
        }
    }

    /// An accepted socket: plain, or TLS once the handshake is done (within
    /// [`HANDSHAKE_TIMEOUT`]). A peer that does not speak TLS on a TLS port
    /// fails here, and only its own connection is closed.
    pub async fn accept(stream: TcpStream, tls: Option<&tls::ServerTls>) -> io::Result<Connection> {
        let Some(tls) = tls else {
            return Ok(Connection::plain(stream));
        };
        let _ = stream.set_nodelay(true);
        let accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(Connection {
            transport: Transport::Tls(Box::new(tokio_rustls::TlsStream::Server(accepted))),
        })
    }

    /// Connects to `address` (`host:port`) from `local` (the node's own
    /// heartbeat or fabric address, unless unspecified), then, with `tls`,
    /// runs the handshake and checks the peer's certificate against the
    /// expected name.
    pub async fn connect(
        local: IpAddr,
        address: &str,
        tls: Option<&tls::ClientTls>,
    ) -> io::Result<Connection> {
        let stream = dial(local, address).await?;
        let Some(tls) = tls else {
            return Ok(Connection::plain(stream));
        };
        let _ = stream.set_nodelay(true);
        let connected = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            tls.connector().connect(tls.server_name(), stream),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(Connection {
            transport: Transport::Tls(Box::new(tokio_rustls::TlsStream::Client(connected))),
        })
    }

    pub fn is_tls(&self) -> bool {
        matches!(self.transport, Transport::Tls(_))
    }

    /// The certificate the other side presented in the TLS handshake (its
    /// leaf; the handshake checked the chain), or None: a plain
    /// connection, or a client asked for no certificate.
    pub fn peer_certificate(&self) -> Option<&rustls::pki_types::CertificateDer<'static>> {
        let Transport::Tls(stream) = &self.transport else {
            return None;
        };
        let certificates = match stream.as_ref() {
            tokio_rustls::TlsStream::Server(stream) => stream.get_ref().1.peer_certificates(),
            tokio_rustls::TlsStream::Client(stream) => stream.get_ref().1.peer_certificates(),
        };
        certificates.and_then(|chain| chain.first())
    }

    /// Aborts the connection once data it sent has stayed unacknowledged
    /// for `timeout` (TCP_USER_TIMEOUT): a peer the network cut off is
    /// then noticed at the next write, instead of when TCP's
    /// retransmissions, backing off, give up or finally reach it after the
    /// network heals (seconds later).
    pub fn set_unacknowledged_timeout(&self, timeout: Duration) -> io::Result<()> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            socket2::SockRef::from(self.tcp()).set_tcp_user_timeout(Some(timeout))
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            let _ = timeout;
            Ok(())
        }
    }

    fn tcp(&self) -> &TcpStream {
        match &self.transport {
            Transport::Plain(stream) => stream,
            Transport::Tls(stream) => stream.get_ref().0,
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// Reads what is available into the spare capacity of `buffer` (the
    /// caller makes room first); `Ok(0)` means the peer closed.
    ///
    /// Plain: a read that returns less than the free space drained the
    /// socket, so the readiness flag is cleared right away; the next call
    /// then waits for the event loop instead of spending a `recv` to learn
    /// `EAGAIN`. With request/response traffic that saves one syscall per
    /// request. TLS: what rustls has decrypted already is handed out
    /// before the socket is read.
    // PERF: hot path.
    pub async fn read_some(&mut self, buffer: &mut Vec<u8>) -> io::Result<usize> {
        match &mut self.transport {
            Transport::Plain(stream) => read_plain(stream, buffer).await,
            Transport::Tls(stream) => read_tls(stream, buffer).await,
        }
    }

    /// Writes all of `bytes` (and, for TLS, the records they became).
    // PERF: hot path.
    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.transport {
            Transport::Plain(stream) => stream.write_all(bytes).await,
            Transport::Tls(stream) => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
        }
    }

    /// Writes all of `bytes`, failing with `TimedOut` if the peer accepts
    /// nothing for `stall` (a client that stopped reading).
    pub async fn write_all_within(&mut self, bytes: &[u8], stall: Duration) -> io::Result<()> {
        let stalled = || io::Error::new(io::ErrorKind::TimedOut, "peer stopped reading");
        let mut written = 0;
        while let Some(rest) = bytes.get(written..).filter(|rest| !rest.is_empty()) {
            let wrote = tokio::time::timeout(stall, self.write(rest))
                .await
                .map_err(|_| stalled())??;
            if wrote == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            written += wrote;
        }
        tokio::time::timeout(stall, self.flush())
            .await
            .map_err(|_| stalled())?
    }

    /// Splits the connection into halves that read and write independently
    /// (a fabric lane reads answers while it writes requests). Plain: the
    /// socket's own halves, no lock. TLS: one session shared by both
    /// halves under tokio's split lock.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self.transport {
            Transport::Plain(stream) => {
                let (read, write) = stream.into_split();
                (ReadHalf::Plain(read), WriteHalf::Plain(write))
            }
            Transport::Tls(stream) => {
                let (read, write) = tokio::io::split(*stream);
                (ReadHalf::Tls(read), WriteHalf::Tls(write))
            }
        }
    }
}

/// A connection on its way to another thread's runtime (a bulk fabric
/// connection to the migrate thread): a plain socket leaves the accepting
/// event loop's reactor and joins the new one; a TLS connection keeps its
/// session and stays registered with the accepting loop's reactor (which
/// runs for the node's life), whose readiness wakes the task that now owns
/// it.
pub enum Handoff {
    Plain(std::net::TcpStream),
    Moved(Connection),
}

impl Connection {
    /// Prepares the connection to be adopted by another runtime.
    pub fn hand_off(self) -> io::Result<Handoff> {
        match self.transport {
            Transport::Plain(stream) => Ok(Handoff::Plain(stream.into_std()?)),
            Transport::Tls(_) => Ok(Handoff::Moved(self)),
        }
    }
}

impl Handoff {
    /// The connection again, on the current runtime.
    pub fn adopt(self) -> io::Result<Connection> {
        match self {
            Handoff::Plain(stream) => Ok(Connection::plain(TcpStream::from_std(stream)?)),
            Handoff::Moved(connection) => Ok(connection),
        }
    }
}

impl AsFd for Connection {
    /// The TCP socket underneath (shutting it down ends any pending read or
    /// write, with or without TLS).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tls", &self.is_tls())
            .field("peer", &self.peer_addr().ok())
            .finish()
    }
}

// PERF: hot path.
async fn read_plain(stream: &TcpStream, buffer: &mut Vec<u8>) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        let space = buffer.capacity() - buffer.len();
        match stream.try_read_buf(buffer) {
            Ok(read) => {
                if read > 0 && read < space {
                    let _ = stream.try_io(Interest::READABLE, || {
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    });
                }
                return Ok(read);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

async fn read_tls(
    stream: &mut tokio_rustls::TlsStream<TcpStream>,
    buffer: &mut Vec<u8>,
) -> io::Result<usize> {
    use tokio::io::AsyncReadExt;
    if buffer.capacity() == buffer.len() {
        // `read_buf` would grow the buffer behind the budget's back.
        return Err(io::Error::other("no room to read into"));
    }
    stream.read_buf(buffer).await
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().transport {
            Transport::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The reading half of a [`Connection`].
pub enum ReadHalf {
    Plain(tokio::net::tcp::OwnedReadHalf),
    Tls(tokio::io::ReadHalf<tokio_rustls::TlsStream<TcpStream>>),
}

/// The writing half of a [`Connection`].
pub enum WriteHalf {
    Plain(tokio::net::tcp::OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<tokio_rustls::TlsStream<TcpStream>>),
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(half) => Pin::new(half).poll_read(cx, buf),
            ReadHalf::Tls(half) => Pin::new(half).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Plain(half) => Pin::new(half).poll_write(cx, buf),
            WriteHalf::Tls(half) => Pin::new(half).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(half) => Pin::new(half).poll_flush(cx),
            WriteHalf::Tls(half) => Pin::new(half).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(half) => Pin::new(half).poll_shutdown(cx),
            WriteHalf::Tls(half) => Pin::new(half).poll_shutdown(cx),
        }
    }
}

/// Binds a listening socket (SO_REUSEADDR, backlog 1024, non-blocking);
/// the error names the address.
pub fn bind(address: SocketAddr) -> Result<TcpListener, String> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|error| format!("cannot create socket for {address}: {error}"))?;
    socket
        .set_reuse_address(true)
        .map_err(|error| format!("cannot set SO_REUSEADDR: {error}"))?;
    socket
        .bind(&address.into())
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    socket
        .listen(1024)
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    socket
        .set_nonblocking(true)
        .map_err(|error| format!("cannot set non-blocking: {error}"))?;
    Ok(socket.into())
}

/// Opens a TCP connection to `address` (`host:port`) from `local` (unless
/// unspecified), so that traffic between nodes carries their addresses on
/// both ends (firewall rules, and hosts with several addresses, rely on
/// it). Every address the name resolves to is tried in turn.
pub async fn dial(local: IpAddr, address: &str) -> io::Result<TcpStream> {
    let mut last = None;
    for target in tokio::net::lookup_host(address).await? {
        let socket = match target {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        if !local.is_unspecified() && local.is_ipv4() == target.is_ipv4() {
            socket.bind(SocketAddr::new(local, 0))?;
        }
        match socket.connect(target).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other(format!("{address}: no address"))))
}

// Bulk (migration) connections move from the event loop that accepted them
// to the migrate thread.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Connection>();
    assert_send::<ReadHalf>();
    assert_send::<WriteHalf>();
    assert_send::<Handoff>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// A TLS context pair: a listener presenting a certificate for
    /// `name`, and a dialler trusting it.
    fn tls_pair(name: &str) -> (tls::ServerTls, tls::ClientTls) {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
        let certificate = params.self_signed(&key).expect("certificate");
        let der = certificate.der().clone();
        static PAIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let directory = std::env::temp_dir().join(format!(
            "bolide-net-tls-{}-{}",
            std::process::id(),
            PAIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&directory).expect("directory");
        let (cert_file, key_file) = (directory.join("cert.pem"), directory.join("key.pem"));
        std::fs::write(&cert_file, certificate.pem()).expect("write");
        std::fs::write(&key_file, key.serialize_pem()).expect("write");
        let server = tls::ServerTls::from_files(&cert_file, &key_file).expect("server");
        let _ = std::fs::remove_dir_all(&directory);
        let client = tls::ClientTls::from_roots(vec![der], name).expect("client");
        (server, client)
    }

    /// Accepts one connection on a loopback listener, with `server` TLS,
    /// and dials it with `client` TLS.
    async fn pair(
        server: Option<&tls::ServerTls>,
        client: Option<&tls::ClientTls>,
    ) -> (Connection, Connection) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let local = IpAddr::from([127, 0, 0, 1]);
        let (accepted, dialled) = tokio::join!(
            async {
                let (stream, _) = listener.accept().await.expect("accept");
                Connection::accept(stream, server).await.expect("handshake")
            },
            Connection::connect(local, &address, client)
        );
        (accepted, dialled.expect("connect"))
    }

    #[test]
    fn both_transports_carry_bytes_both_ways_and_split() {
        let (server, client) = tls_pair("node-a");
        runtime().block_on(async {
            for tls in [false, true] {
                let (mut accepted, dialled) = if tls {
                    pair(Some(&server), Some(&client)).await
                } else {
                    pair(None, None).await
                };
                assert_eq!(accepted.is_tls(), tls);
                assert_eq!(dialled.is_tls(), tls);
                // A fabric lane: requests out on one half, answers in on
                // the other.
                let (mut reader, mut writer) = dialled.into_split();
                let request = vec![7u8; 100_000];
                writer.write_all(&request).await.expect("write");
                writer.flush().await.expect("flush");
                let mut received = Vec::with_capacity(request.len());
                while received.len() < request.len() {
                    received.reserve(16 * 1024);
                    let read = accepted.read_some(&mut received).await.expect("read");
                    assert!(read > 0);
                }
                assert_eq!(received, request);
                accepted.write_all(b"answer").await.expect("answer");
                let mut answer = [0u8; 6];
                reader.read_exact(&mut answer).await.expect("read answer");
                assert_eq!(&answer, b"answer");
            }
        });
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_unacknowledged_timeout_is_set_on_the_socket_of_both_transports() {
        let (server, client) = tls_pair("node-u");
        runtime().block_on(async {
            for tls in [false, true] {
                let (_accepted, dialled) = if tls {
                    pair(Some(&server), Some(&client)).await
                } else {
                    pair(None, None).await
                };
                let before = socket2::SockRef::from(dialled.tcp())
                    .tcp_user_timeout()
                    .expect("get");
                assert_eq!(before, None);
                dialled
                    .set_unacknowledged_timeout(Duration::from_millis(1500))
                    .expect("set");
                let after = socket2::SockRef::from(dialled.tcp())
                    .tcp_user_timeout()
                    .expect("get");
                assert_eq!(after, Some(Duration::from_millis(1500)));
            }
        });
    }

    #[test]
    fn a_peer_that_stops_reading_fails_a_bounded_write() {
        let (server, client) = tls_pair("node-b");
        runtime().block_on(async {
            for tls in [false, true] {
                let (_accepted, mut dialled) = if tls {
                    pair(Some(&server), Some(&client)).await
                } else {
                    pair(None, None).await
                };
                // The peer never reads: the socket buffers fill, and then
                // nothing is accepted for the stall time.
                let bytes = vec![1u8; 64 << 20];
                let started = std::time::Instant::now();
                let error = dialled
                    .write_all_within(&bytes, Duration::from_millis(300))
                    .await
                    .expect_err("the write must stall");
                assert_eq!(error.kind(), io::ErrorKind::TimedOut);
                assert!(started.elapsed() < Duration::from_secs(10));
            }
        });
    }

    #[test]
    fn a_tls_client_refuses_a_certificate_for_another_name() {
        let (server, _) = tls_pair("node-c");
        let (_, other) = tls_pair("node-c");
        runtime().block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = listener.local_addr().expect("address").to_string();
            let serving = async {
                let (stream, _) = listener.accept().await.expect("accept");
                Connection::accept(stream, Some(&server)).await
            };
            let dialling =
                Connection::connect(IpAddr::from([127, 0, 0, 1]), &address, Some(&other));
            let (accepted, dialled) = tokio::join!(serving, dialling);
            // Signed by another key than the one the client trusts.
            assert!(dialled.is_err());
            assert!(accepted.is_err());
        });
    }

    /// A CA, and the files of a `tls NAME { }` stanza for a node
    /// certificate it signs carrying `cert_name` (CN and DNS SAN).
    struct Pki {
        directory: std::path::PathBuf,
        ca: rcgen::Certificate,
        ca_key: rcgen::KeyPair,
    }

    impl Pki {
        fn new(tag: &str) -> Pki {
            use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
            let directory =
                std::env::temp_dir().join(format!("bolide-node-tls-{}-{tag}", std::process::id()));
            std::fs::create_dir_all(&directory).expect("directory");
            let ca_key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, format!("CA {tag}"));
            let ca = params.self_signed(&ca_key).expect("CA");
            std::fs::write(directory.join("ca.pem"), ca.pem()).expect("write");
            Pki {
                directory,
                ca,
                ca_key,
            }
        }

        /// A stanza named `stanza` presenting a certificate for
        /// `cert_name`, trusting this CA.
        fn node(&self, stanza: &str, cert_name: &str) -> tls::TlsSettings {
            self.node_with_serial(stanza, cert_name, None)
        }

        fn node_with_serial(
            &self,
            stanza: &str,
            cert_name: &str,
            serial: Option<u64>,
        ) -> tls::TlsSettings {
            let file = format!("{cert_name}-{}", serial.unwrap_or(0));
            let cert_file = self.directory.join(format!("{file}.pem"));
            let key_file = self.directory.join(format!("{file}.key"));
            self.write_pair(&cert_file, &key_file, cert_name, serial);
            let mut settings = tls::TlsSettings::new(stanza, &cert_file, &key_file);
            settings.ca_file = Some(self.directory.join("ca.pem"));
            settings
        }

        /// Writes a node certificate for `cert_name` (CN and DNS SAN) this
        /// CA signs, and its key, to these files.
        fn write_pair(
            &self,
            cert_file: &std::path::Path,
            key_file: &std::path::Path,
            cert_name: &str,
            serial: Option<u64>,
        ) {
            use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(vec![cert_name.to_owned()]).expect("params");
            params.serial_number = serial.map(rcgen::SerialNumber::from);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cert_name);
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let certificate = params
                .signed_by(&key, &self.ca, &self.ca_key)
                .expect("certificate");
            std::fs::write(cert_file, certificate.pem()).expect("write");
            std::fs::write(key_file, key.serialize_pem()).expect("write");
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.directory);
        }
    }

    /// One connection from `dialler` to `listener`, both as nodes do it:
    /// (accepted, dialled).
    fn node_pair(
        runtime: &tokio::runtime::Runtime,
        listener: &tls::NodeTls,
        dialler: &tls::NodeTls,
    ) -> (io::Result<Connection>, io::Result<Connection>) {
        runtime.block_on(async {
            let socket = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = socket.local_addr().expect("address").to_string();
            let serving = async {
                let (stream, _) = socket.accept().await.expect("accept");
                Connection::accept(stream, Some(&listener.server)).await
            };
            let dialling = Connection::connect(
                IpAddr::from([127, 0, 0, 1]),
                &address,
                Some(&dialler.client),
            );
            tokio::join!(serving, dialling)
        })
    }

    #[test]
    fn a_renewed_certificate_is_presented_when_dialling_after_a_reload() {
        let runtime = runtime();
        let pki = Pki::new("renewal");
        // The listener revokes the dialler's first certificate.
        let blacklist = pki.directory.join("revoked-0C0FFE.txt");
        std::fs::write(&blacklist, "0C0FFE\n").expect("write");
        let mut listening = pki.node("cluster", "cluster");
        listening.cert_blacklist = Some(blacklist);
        let listener = tls::NodeTls::new(&listening).expect("listener");
        let old = pki.node_with_serial("cluster", "cluster", Some(0x0C0FFE));
        let dialler = tls::NodeTls::new(&old).expect("dialler");
        let (accepted, dialled) = node_pair(&runtime, &listener, &dialler);
        let both = format!(
            "{} / {}",
            accepted.expect_err("the old certificate is refused"),
            dialled.expect_err("the dialler fails too")
        );
        assert!(both.contains("Revoked"), "{both}");
        // Unchanged files: nothing to reload.
        assert_eq!(dialler.client.reload(), Ok(false));
        // The certificate is renewed in place (key first, then the
        // certificate, as an operator replaces them): the dialler picks it
        // up without being rebuilt, and is let in.
        pki.write_pair(&old.cert_file, &old.key_file, "cluster", Some(0x0C0FFF));
        assert_eq!(dialler.client.reload(), Ok(true));
        let (accepted, dialled) = node_pair(&runtime, &listener, &dialler);
        assert!(accepted.expect("accepted").is_tls());
        assert!(dialled.expect("dialled").is_tls());
        // A file that cannot be read keeps the context in force.
        std::fs::write(&old.key_file, "not a key").expect("write");
        assert!(dialler.client.reload().is_err());
        let (accepted, dialled) = node_pair(&runtime, &listener, &dialler);
        assert!(accepted.is_ok() && dialled.is_ok());
    }

    #[test]
    fn nodes_of_one_ca_and_name_connect_mutually_and_others_are_refused() {
        let runtime = runtime();
        let pki = Pki::new("cluster");
        let a = tls::NodeTls::new(&pki.node("cluster", "cluster")).expect("node a");
        let b = tls::NodeTls::new(&pki.node("cluster", "cluster")).expect("node b");
        let (accepted, dialled) = node_pair(&runtime, &a, &b);
        let (mut accepted, dialled) = (accepted.expect("accepted"), dialled.expect("dialled"));
        assert!(accepted.is_tls() && dialled.is_tls());
        runtime.block_on(async {
            let (_, mut writer) = dialled.into_split();
            writer.write_all(b"HELLO").await.expect("write");
            writer.flush().await.expect("flush");
            let mut received = Vec::with_capacity(16);
            while received.len() < 5 {
                accepted.read_some(&mut received).await.expect("read");
            }
            assert_eq!(received, b"HELLO");
        });

        // Another CA, the same name; the cluster's CA, another name:
        // refused both ways (whichever side checks first, both fail, and
        // one says why).
        let other = Pki::new("other");
        let rogue = tls::NodeTls::new(&other.node("cluster", "cluster")).expect("rogue");
        let stray = tls::NodeTls::new(&pki.node("cluster", "stray")).expect("stray");
        for (listener, dialler, reasons) in [
            (&a, &rogue, ["UnknownIssuer", "UnknownCA"]),
            (&rogue, &a, ["UnknownIssuer", "UnknownCA"]),
            (&a, &stray, ["NotValidForName", "BadCertificate"]),
            (&stray, &a, ["NotValidForName", "BadCertificate"]),
        ] {
            let (accepted, dialled) = node_pair(&runtime, listener, dialler);
            let accepted = accepted.expect_err("the listener fails");
            let dialled = dialled.expect_err("the dialler fails");
            let both = format!("{accepted} / {dialled}");
            assert!(reasons.iter().any(|reason| both.contains(reason)), "{both}");
        }

        // A revoked node certificate (cert-blacklist) is refused by the
        // node that accepts and by the node that dials.
        let blacklist = pki.directory.join("revoked.txt");
        std::fs::write(&blacklist, "0B01DE\n").expect("write");
        let mut checking = pki.node("cluster", "cluster");
        checking.cert_blacklist = Some(blacklist);
        let checking = tls::NodeTls::new(&checking).expect("checking");
        let revoked =
            tls::NodeTls::new(&pki.node_with_serial("cluster", "cluster", Some(0x0B01DE)))
                .expect("revoked");
        for (listener, dialler) in [(&checking, &revoked), (&revoked, &checking)] {
            let (accepted, dialled) = node_pair(&runtime, listener, dialler);
            let both = format!(
                "{} / {}",
                accepted.expect_err("the listener fails"),
                dialled.expect_err("the dialler fails")
            );
            assert!(both.contains("Revoked"), "{both}");
        }

        // A plain dialler on a node's TLS port never gets through.
        let (accepted, _) = runtime.block_on(async {
            let socket = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = socket.local_addr().expect("address").to_string();
            let serving = async {
                let (stream, _) = socket.accept().await.expect("accept");
                Connection::accept(stream, Some(&a.server)).await
            };
            let dialling = async {
                let mut plain = Connection::connect(IpAddr::from([127, 0, 0, 1]), &address, None)
                    .await
                    .expect("connect");
                let _ = plain.write_all(&[0u8; 64]).await;
                plain
            };
            tokio::join!(serving, dialling)
        });
        assert!(accepted.is_err());

        // A stanza without a CA cannot serve between nodes.
        let mut bare = pki.node("cluster", "cluster");
        bare.ca_file = None;
        let error = tls::NodeTls::new(&bare).err().expect("no CA");
        assert!(error.contains("ca-file"), "{error}");
    }
}
