//! TLS on the client port, end to end: a CA and a server certificate made
//! here (rcgen), a `bolided` started with a TLS listener (`network { tls
//! NAME { … } service { tls-port; tls-name; tls-authenticate-client false
//! } }`), and the Rust side of the node's own connection type
//! (`net::Connection::connect` with a `ClientTls`) sending an info request
//! and a put and a get through it. A plain client on the TLS port and a
//! TLS client on the plain port both fail cleanly, and the node serves on.

use bolide_server::net::{tls::ClientTls, Connection};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the server's certificate carries (its tls-name).
const TLS_NAME: &str = "bolide-test";

struct Node {
    child: Child,
    port: u16,
    tls_port: u16,
    dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Writes ca.pem, cert.pem and key.pem into `dir`: a CA, and a server
/// certificate it signed for [`TLS_NAME`] and 127.0.0.1.
fn make_certificates(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "Bolide test CA");
    let ca = ca.self_signed(&ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("server key");
    let mut server =
        rcgen::CertificateParams::new(vec![TLS_NAME.to_owned(), "127.0.0.1".to_owned()])
            .expect("server params");
    server
        .distinguished_name
        .push(rcgen::DnType::CommonName, TLS_NAME);
    let server = server
        .signed_by(&key, &ca, &ca_key)
        .expect("server certificate");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("ca.pem");
    std::fs::write(dir.join("cert.pem"), server.pem()).expect("cert.pem");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("key.pem");
}

impl Node {
    fn start() -> Node {
        let dir = std::env::temp_dir().join(format!("bolide-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        make_certificates(&dir);
        let (port, tls_port) = (free_port(), free_port());
        let config = format!(
            "service {{\n    service-threads 2\n}}\n\
             network {{\n\
             \x20   tls {TLS_NAME} {{\n\
             \x20       cert-file {cert}\n\
             \x20       key-file {key}\n\
             \x20   }}\n\
             \x20   service {{\n\
             \x20       address 127.0.0.1\n\
             \x20       port {port}\n\
             \x20       tls-port {tls_port}\n\
             \x20       tls-name {TLS_NAME}\n\
             \x20       tls-authenticate-client false\n\
             \x20   }}\n\
             }}\n\
             namespace test {{\n}}\n",
            cert = dir.join("cert.pem").display(),
            key = dir.join("key.pem").display(),
        );
        let path = dir.join("bolide.conf");
        std::fs::write(&path, config).expect("config");
        let child = Command::new(env!("CARGO_BIN_EXE_bolided"))
            .arg("--config")
            .arg(&path)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bolided");
        let node = Node {
            child,
            port,
            tls_port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err()
            || TcpStream::connect(("127.0.0.1", tls_port)).is_err()
        {
            assert!(Instant::now() < deadline, "bolided did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    fn client_tls(&self) -> ClientTls {
        ClientTls::from_ca_file(&self.dir.join("ca.pem"), TLS_NAME).expect("client TLS")
    }
}

fn frame(message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut out = ((2u64 << 56) | (u64::from(message_type) << 48) | body.len() as u64)
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

/// A put of bin `v` (`value`) or a get of digest [seed; 20] in test/demo.
fn message(seed: u8, write: Option<&[u8]>) -> Vec<u8> {
    let mut body = vec![22u8, 0, 0, 0, 0, 0];
    body[1] = if write.is_some() { 0 } else { 0x03 };
    body[2] = if write.is_some() { 0x01 } else { 0 };
    body.extend_from_slice(&[0u8; 12]);
    body.extend_from_slice(&3u16.to_be_bytes());
    body.extend_from_slice(&u16::from(write.is_some()).to_be_bytes());
    for (kind, data) in [(0u8, &b"test"[..]), (1, b"demo"), (4, &[seed; 20])] {
        body.extend_from_slice(&(data.len() as u32 + 1).to_be_bytes());
        body.push(kind);
        body.extend_from_slice(data);
    }
    if let Some(value) = write {
        body.extend_from_slice(&(4 + 1 + value.len() as u32).to_be_bytes());
        body.extend_from_slice(&[2, 3, 0, 1, b'v']);
        body.extend_from_slice(value);
    }
    body
}

/// Reads one whole frame through the connection: (type, body).
async fn read_frame(connection: &mut Connection, buffer: &mut Vec<u8>) -> (u8, Vec<u8>) {
    loop {
        if let Some(header) = buffer.first_chunk::<8>() {
            let size = (u64::from_be_bytes(*header) & 0xffff_ffff_ffff) as usize;
            if buffer.len() >= 8 + size {
                let kind = header[1];
                let body = buffer[8..8 + size].to_vec();
                buffer.drain(..8 + size);
                return (kind, body);
            }
        }
        buffer.reserve(16 * 1024);
        let read = tokio::time::timeout(Duration::from_secs(5), connection.read_some(buffer))
            .await
            .expect("answer within 5 s")
            .expect("read");
        assert!(read > 0, "the node closed the TLS connection");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The node's `statistics`, asked on its plain port.
fn statistics(port: u16) -> String {
    let mut plain = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    plain.write_all(&frame(1, b"statistics\n")).expect("write");
    let mut header = [0u8; 8];
    plain.read_exact(&mut header).expect("header");
    let mut body = vec![0u8; (u64::from_be_bytes(header) & 0xffff_ffff_ffff) as usize];
    plain.read_exact(&mut body).expect("body");
    String::from_utf8(body).expect("utf-8")
}

fn statistic(text: &str, name: &str) -> u64 {
    text.split(';')
        .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn info_put_and_get_over_tls_and_clean_failures_across_transports() {
    let node = Node::start();
    let tls = node.client_tls();
    let runtime = runtime();
    let local = IpAddr::from([127, 0, 0, 1]);
    let tls_address = format!("127.0.0.1:{}", node.tls_port);
    runtime.block_on(async {
        let mut connection = Connection::connect(local, &tls_address, Some(&tls))
            .await
            .expect("TLS connection");
        assert!(connection.is_tls());
        let mut buffer = Vec::new();
        connection
            .write_all(&frame(1, b"build\nservice-tls-std\n"))
            .await
            .expect("write info");
        let (kind, answer) = read_frame(&mut connection, &mut buffer).await;
        assert_eq!(kind, 1);
        assert_eq!(
            String::from_utf8(answer).expect("utf-8"),
            format!("build\t8.1.0.0\nservice-tls-std\t{tls_address}\n")
        );
        // A put, then a get of the same record, pipelined in one write.
        let mut both = frame(3, &message(9, Some(b"over tls")));
        both.extend(frame(3, &message(9, None)));
        connection
            .write_all(&both)
            .await
            .expect("write put and get");
        let (_, put) = read_frame(&mut connection, &mut buffer).await;
        assert_eq!(put[5], 0, "put result");
        let (_, get) = read_frame(&mut connection, &mut buffer).await;
        assert_eq!(get[5], 0, "get result");
        assert!(get.ends_with(b"over tls"), "{get:?}");
    });

    // (The start-up probe's connection to the TLS port left without a
    // handshake: counted already.)
    let failures_before = statistic(&statistics(node.port), "tls_handshake_failures");
    // A plain client on the TLS port: no answer, the connection closes.
    let mut plain = TcpStream::connect(("127.0.0.1", node.tls_port)).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    plain.write_all(&frame(1, b"build\n")).expect("write");
    let mut rest = Vec::new();
    plain
        .read_to_end(&mut rest)
        .expect("the node closes the connection");
    assert!(
        rest.first() != Some(&2),
        "a plain request on the TLS port was answered: {rest:?}"
    );

    // A TLS client on the plain port: the handshake fails, with an error.
    runtime.block_on(async {
        let plain_address = format!("127.0.0.1:{}", node.port);
        let failed = Connection::connect(local, &plain_address, Some(&tls)).await;
        assert!(
            failed.is_err(),
            "a TLS handshake with the plain port succeeded"
        );
    });

    // The node serves on, on both ports, and counted the failed handshake.
    assert_eq!(
        statistic(&statistics(node.port), "tls_handshake_failures"),
        failures_before + 1
    );
    runtime.block_on(async {
        let mut connection = Connection::connect(local, &tls_address, Some(&tls))
            .await
            .expect("TLS connection after the failures");
        connection
            .write_all(&frame(3, &message(9, None)))
            .await
            .expect("write get");
        let (_, get) = read_frame(&mut connection, &mut Vec::new()).await;
        assert_eq!(get[5], 0);
    });
}

#[test]
fn a_bad_certificate_file_stops_the_node_with_its_name() {
    let dir = std::env::temp_dir().join(format!("bolide-tls-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("cert.pem"), "not a certificate\n").expect("cert");
    std::fs::write(dir.join("key.pem"), "not a key\n").expect("key");
    let config = format!(
        "network {{\n    tls main {{\n        cert-file {dir}/cert.pem\n        key-file {dir}/key.pem\n    }}\n\
         \x20   service {{\n        address 127.0.0.1\n        port {port}\n        tls-port {tls_port}\n\
         \x20       tls-name main\n        tls-authenticate-client false\n    }}\n}}\nnamespace test {{\n}}\n",
        dir = dir.display(),
        port = free_port(),
        tls_port = free_port(),
    );
    std::fs::write(dir.join("bolide.conf"), config).expect("config");
    let output = Command::new(env!("CARGO_BIN_EXE_bolided"))
        .arg("--config")
        .arg(dir.join("bolide.conf"))
        .output()
        .expect("run");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("tls main") && stderr.contains("cert.pem"),
        "{stderr}"
    );
}
