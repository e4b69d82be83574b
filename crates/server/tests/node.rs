//! The bolided process from outside: startup, config errors, shutdown,
//! framing, pipelining and hostile input, over real loopback sockets.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Node {
    child: Child,
    port: u16,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let path = std::env::temp_dir().join(format!("bolide-node-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&path).expect("temp dir");
    TempDir(path)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn config(port: u16, namespace_extra: &str) -> String {
    format!(
        "service {{\n    service-threads 2\n}}\nnetwork {{\n    service {{\n        address 127.0.0.1\n        port {port}\n    }}\n}}\n\
         namespace test {{\n    nsup-period 1\n{namespace_extra}}}\n"
    )
}

impl Node {
    fn start(tag: &str, namespace_extra: &str) -> Node {
        let dir = temp_dir(tag);
        let port = free_port();
        let path = dir.0.join("bolide.conf");
        std::fs::write(&path, config(port, namespace_extra)).expect("config");
        let child = Command::new(env!("CARGO_BIN_EXE_bolided"))
            .arg("--config")
            .arg(&path)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bolided");
        let node = Node {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "bolided did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn frame(message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut out = ((2u64 << 56) | (u64::from(message_type) << 48) | body.len() as u64)
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

fn read_frame(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).ok()?;
    let size = (u64::from_be_bytes(header) & 0xffff_ffff_ffff) as usize;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).ok()?;
    Some((header[1], body))
}

fn info(stream: &mut TcpStream, commands: &str) -> String {
    stream
        .write_all(&frame(1, commands.as_bytes()))
        .expect("write");
    let (kind, body) = read_frame(stream).expect("info answer");
    assert_eq!(kind, 1);
    String::from_utf8(body).expect("utf-8")
}

/// An AS_MSG body: put (`write`) or get-all of digest [seed; 20] in test/demo.
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

#[test]
fn info_answers_echo_commands_in_order() {
    let node = Node::start("info", "");
    let mut stream = node.connect();
    let answer = info(
        &mut stream,
        "node\npartition-generation\nbuild\nbogus-command\nnamespace/nope\n",
    );
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines.len(), 5, "{answer}");
    assert!(lines[0].starts_with("node\t"));
    // A node alone forms its cluster before it listens: its map is in
    // place (generation 0 or more, never the "not ready" -1).
    let generation = lines[1]
        .strip_prefix("partition-generation\t")
        .expect("generation");
    assert!(
        generation.parse::<i64>().expect("number") >= 0,
        "{generation}"
    );
    assert_eq!(lines[2], "build\t8.1.0.0");
    assert_eq!(lines[3], "bogus-command\tERROR:4:unrecognized command");
    assert_eq!(lines[4], "namespace/nope\ttype=unknown");
    let replicas = info(&mut stream, "replicas\n");
    let bitmap = replicas.trim_end().rsplit(',').next().expect("bitmap");
    assert_eq!(bitmap.len(), 684);
    assert!(bitmap.starts_with("//////") && bitmap.ends_with("8="));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let node = Node::start("pipeline", "");
    let mut stream = node.connect();
    let mut batch = Vec::new();
    for seed in 0..100u8 {
        batch.extend(frame(3, &message(seed, Some(&[seed]))));
        batch.extend(frame(3, &message(seed, None)));
    }
    stream.write_all(&batch).expect("write");
    for seed in 0..100u8 {
        let (_, put) = read_frame(&mut stream).expect("put answer");
        assert_eq!(put[5], 0, "put result");
        let (_, get) = read_frame(&mut stream).expect("get answer");
        assert_eq!(get[5], 0, "get result");
        assert_eq!(*get.last().expect("value"), seed, "answers out of order");
    }
}

#[test]
fn hostile_frames_close_only_their_connection() {
    let node = Node::start("hostile", "");
    let hostile: Vec<Vec<u8>> = vec![
        vec![9, 3, 0, 0, 0, 0, 0, 1, 0],                  // bad version
        vec![2, 7, 0, 0, 0, 0, 0, 1, 0],                  // bad type
        vec![2, 3, 0, 0, 0x10, 0, 0, 0],                  // 256 MiB body
        (0..200u8).map(|i| i.wrapping_mul(37)).collect(), // random bytes
    ];
    for bytes in hostile {
        let mut stream = node.connect();
        stream.write_all(&bytes).expect("write");
        let mut rest = Vec::new();
        let closed = stream.read_to_end(&mut rest);
        assert!(
            closed.is_ok(),
            "server must close the connection, got {closed:?}"
        );
    }
    // Truncated frame, then the client leaves mid-message.
    let mut stream = node.connect();
    let put = frame(3, &message(1, Some(b"x")));
    stream.write_all(&put[..put.len() / 2]).expect("write");
    drop(stream);
    // A message whose fields overrun the body gets result 4 (parameter).
    let mut stream = node.connect();
    let mut body = message(2, None);
    body[19] = 9; // n_fields 3 → 2313
    stream.write_all(&frame(3, &body)).expect("write");
    let (_, answer) = read_frame(&mut stream).expect("answer");
    assert_eq!(answer[5], 4);
    // Unknown namespace → 20.
    let mut body = message(2, None);
    body[27..31].copy_from_slice(b"nope");
    stream.write_all(&frame(3, &body)).expect("write");
    let (_, answer) = read_frame(&mut stream).expect("answer");
    assert_eq!(answer[5], 20);
    // Everyone else is still served.
    let mut stream = node.connect();
    stream
        .write_all(&frame(3, &message(3, Some(b"ok"))))
        .expect("write");
    assert_eq!(read_frame(&mut stream).expect("answer").1[5], 0);
    let stats = info(&mut stream, "statistics\n");
    let bad: u64 = stats
        .split(';')
        .find_map(|kv| kv.strip_prefix("bad_frames="))
        .and_then(|v| v.trim().parse().ok())
        .expect("bad_frames");
    assert!(bad >= 4, "bad_frames={bad}");
}

#[test]
fn admin_messages_answer_security_not_enabled() {
    let node = Node::start("admin", "");
    let mut stream = node.connect();
    stream.write_all(&frame(2, &[0u8; 16])).expect("write");
    let (kind, body) = read_frame(&mut stream).expect("answer");
    assert_eq!((kind, body.len(), body[1]), (2, 16, 52));
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut node = Node::start("sigterm", "");
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(node.child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = node.child.try_wait().expect("wait") {
            assert!(status.success(), "exit status {status:?}");
            break;
        }
        assert!(Instant::now() < deadline, "bolided did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn config_errors_name_line_and_directive_and_stop_startup() {
    let dir = temp_dir("config-error");
    let path = dir.0.join("bad.conf");
    std::fs::write(
        &path,
        "namespace test {\n    replication-factor 1\n    memory-szie 4G\n}\n",
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_bolided"))
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("line 3") && stderr.contains("memory-szie"),
        "{stderr}"
    );
}

/// Walks the rows of one stream frame; true if one carries info3 LAST.
fn frame_has_last(body: &[u8]) -> bool {
    let mut at = 0;
    while at + 22 <= body.len() {
        let info3 = body[at + 3];
        let n_fields = u16::from_be_bytes([body[at + 18], body[at + 19]]);
        let n_ops = u16::from_be_bytes([body[at + 20], body[at + 21]]);
        at += 22;
        for _ in 0..(usize::from(n_fields) + usize::from(n_ops)) {
            let size =
                u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]) as usize;
            at += 4 + size;
        }
        if info3 & 0x01 != 0 {
            return true;
        }
    }
    false
}

#[test]
fn a_scan_streams_in_chunks_and_the_connection_serves_the_next_request() {
    let node = Node::start("scan-then-get", "");
    let mut stream = node.connect();
    // ~750 KB of records: several 256 KiB chunks written by the job itself.
    let value = [7u8; 250];
    let mut puts = Vec::new();
    for seed in 0..=255u8 {
        for copy in 0..12u8 {
            let mut body = message(seed, Some(&value));
            // Vary the digest per copy (digest field starts at byte 48).
            body[48] = copy;
            puts.extend(frame(3, &body));
        }
    }
    stream.write_all(&puts).expect("write puts");
    for _ in 0..(256 * 12) {
        assert_eq!(read_frame(&mut stream).expect("put answer").1[5], 0);
    }
    // A scan of the namespace and, pipelined behind it, a get.
    let mut scan = vec![22u8, 0x01, 0, 0x04, 0, 0];
    scan.extend_from_slice(&[0u8; 12]);
    scan.extend_from_slice(&1u16.to_be_bytes());
    scan.extend_from_slice(&0u16.to_be_bytes());
    scan.extend_from_slice(&5u32.to_be_bytes());
    scan.push(0);
    scan.extend_from_slice(b"test");
    let mut both = frame(3, &scan);
    both.extend(frame(3, &message(9, None)));
    stream.write_all(&both).expect("write scan and get");
    let mut frames = 0;
    loop {
        let (kind, body) = read_frame(&mut stream).expect("scan frame");
        assert_eq!(kind, 3);
        frames += 1;
        if frame_has_last(&body) {
            break;
        }
    }
    assert!(frames >= 3, "expected several chunks, got {frames}");
    let (_, get) = read_frame(&mut stream).expect("get answer after the scan");
    assert_eq!(get[5], 0, "get result");
    // The connection is back in non-blocking service: another round trip.
    stream.write_all(&frame(1, b"build\n")).expect("write info");
    let (kind, answer) = read_frame(&mut stream).expect("info answer");
    assert_eq!((kind, answer.as_slice()), (1, &b"build\t8.1.0.0\n"[..]));
}
