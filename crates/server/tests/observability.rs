//! Latency histograms, `/metrics` and the console's HTTP API, against a
//! real bolided process over loopback (info protocol and HTTP).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Node {
    child: Child,
    port: u16,
    http_port: u16,
    dir: std::path::PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

impl Node {
    fn start(tag: &str) -> Node {
        let dir =
            std::env::temp_dir().join(format!("bolide-observability-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (port, http_port) = (free_port(), free_port());
        let config = format!(
            "service {{\n    service-threads 2\n    ticker-interval 1\n}}\n\
             network {{\n    service {{\n        address 127.0.0.1\n        port {port}\n    }}\n\
             \x20   http {{\n        address 127.0.0.1\n        port {http_port}\n    }}\n}}\n\
             namespace test {{\n    storage-engine memory {{\n        data-size 256M\n    }}\n}}\n\
             namespace bar {{\n    storage-engine device {{\n        file {}\n        filesize 16M\n\
             \x20       write-block-size 1M\n    }}\n}}\n",
            dir.join("bar.dat").display()
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
            http_port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err()
            || TcpStream::connect(("127.0.0.1", http_port)).is_err()
        {
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

    fn info(&self, command: &str) -> String {
        let mut stream = self.connect();
        let answer = info(&mut stream, command);
        let prefix = format!("{command}\t");
        answer
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("answer to {command}: {answer}"))
            .trim_end_matches('\n')
            .to_owned()
    }

    fn http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String, String) {
        http(self.http_port, method, path, body)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 request: (status, content type, body).
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect http");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let mut content_type = String::new();
    let mut length = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("header line");
        match name.to_ascii_lowercase().as_str() {
            "content-type" => content_type = value.trim().to_owned(),
            "content-length" => length = value.trim().parse::<usize>().ok(),
            _ => {}
        }
    }
    let mut bytes = Vec::new();
    match length {
        Some(length) => {
            bytes.resize(length, 0);
            reader.read_exact(&mut bytes).expect("body");
        }
        None => {
            reader.read_to_end(&mut bytes).expect("body");
        }
    }
    (
        status,
        content_type,
        String::from_utf8(bytes).expect("utf-8 body"),
    )
}

fn frame(message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut out = ((2u64 << 56) | (u64::from(message_type) << 48) | body.len() as u64)
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

fn read_frame(stream: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).expect("frame header");
    let size = (u64::from_be_bytes(header) & 0xffff_ffff_ffff) as usize;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).expect("frame body");
    (header[1], body)
}

fn info(stream: &mut TcpStream, commands: &str) -> String {
    stream
        .write_all(&frame(1, format!("{commands}\n").as_bytes()))
        .expect("write");
    let (kind, body) = read_frame(stream);
    assert_eq!(kind, 1);
    String::from_utf8(body).expect("utf-8")
}

/// A put (`write`) or get of digest `[seed; 20]` in `namespace`/demo.
fn message(namespace: &str, seed: u8, write: bool) -> Vec<u8> {
    let mut body = vec![22u8, 0, 0, 0, 0, 0];
    body[1] = if write { 0 } else { 0x03 };
    body[2] = if write { 0x01 } else { 0 };
    body.extend_from_slice(&[0u8; 12]);
    body.extend_from_slice(&3u16.to_be_bytes());
    body.extend_from_slice(&u16::from(write).to_be_bytes());
    for (kind, data) in [(0u8, namespace.as_bytes()), (1, b"demo"), (4, &[seed; 20])] {
        body.extend_from_slice(&(data.len() as u32 + 1).to_be_bytes());
        body.push(kind);
        body.extend_from_slice(data);
    }
    if write {
        let (name, value) = (b"bin", 7i64.to_be_bytes());
        body.extend_from_slice(&((4 + name.len() + value.len()) as u32).to_be_bytes());
        body.extend_from_slice(&[2, 1, 0, name.len() as u8]);
        body.extend_from_slice(name);
        body.extend_from_slice(&value);
    }
    body
}

/// Sends `count` requests pipelined in one write and reads every answer.
fn requests(node: &Node, namespace: &str, count: usize, write: bool) {
    let mut stream = node.connect();
    let mut batch = Vec::new();
    for index in 0..count {
        batch.extend_from_slice(&frame(3, &message(namespace, index as u8, write)));
    }
    stream.write_all(&batch).expect("send");
    for _ in 0..count {
        let (kind, _) = read_frame(&mut stream);
        assert_eq!(kind, 3);
    }
}

fn stat<'a>(text: &'a str, key: &str) -> &'a str {
    text.split(';')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} missing from {text}"))
}

/// `NAME:count=…:sum-us=…:buckets=…` → (count, buckets).
fn histogram(text: &str, name: &str) -> (u64, Vec<u64>) {
    let entry = text
        .split(';')
        .find_map(|entry| entry.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{name} missing from {text}"));
    let field = |key: &str| {
        entry
            .split(':')
            .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
            .expect("field")
    };
    let buckets = field("buckets")
        .split(',')
        .map(|count| count.parse().expect("count"))
        .collect();
    (field("count").parse().expect("count"), buckets)
}

/// Waits until histogram `name` has counted `count` requests: a request is
/// counted just after its answer is written, so the client may read the
/// answer a moment before.
fn wait_for_count(node: &Node, name: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counted = histogram(&node.info("latency-histograms"), name).0;
        if counted == count {
            return;
        }
        assert!(
            counted < count,
            "{name} counted {counted}, more than {count}"
        );
        assert!(
            Instant::now() < deadline,
            "{name} counted {counted}, not {count}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `latencies:` for `hist` has a slice with data.
fn wait_for_slice(node: &Node, hist: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = node.info(&format!("latencies:hist={hist}"));
        if answer.contains("msec") {
            return answer;
        }
        assert!(Instant::now() < deadline, "no slice for {hist}: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn latencies_are_answered_in_the_server_format() {
    let node = Node::start("latencies");
    // Before any request: every histogram listed, empty.
    assert_eq!(
        node.info("latencies:"),
        "batch-index:;{test}-read:;{test}-write:;{test}-udf:;{test}-pi-query:;{test}-si-query:;\
         {bar}-read:;{bar}-write:;{bar}-udf:;{bar}-pi-query:;{bar}-si-query:;"
    );
    requests(&node, "test", 120, true);
    requests(&node, "test", 200, false);
    requests(&node, "bar", 30, false);
    wait_for_count(&node, "{test}-write", 120);
    wait_for_count(&node, "{test}-read", 200);
    wait_for_count(&node, "{bar}-read", 30);
    // Counts are exact, per namespace and kind.
    let raw = node.info("latency-histograms");
    assert_eq!(histogram(&raw, "{test}-write").0, 120);
    assert_eq!(histogram(&raw, "{test}-read").0, 200);
    assert_eq!(histogram(&raw, "{bar}-read").0, 30);
    assert_eq!(histogram(&raw, "{bar}-write").0, 0);
    let (count, buckets) = histogram(&raw, "{test}-read");
    assert_eq!(buckets.len(), 28);
    assert_eq!(buckets.iter().sum::<u64>(), count);
    // The first slice after activation is empty; keep traffic going until
    // a slice has data, then check its shape: msec, ops/sec, 17 columns.
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        requests(&node, "test", 50, false);
        let answer = node.info("latencies:hist={test}-read");
        if answer.contains("msec") {
            break answer;
        }
        assert!(Instant::now() < deadline, "no slice: {answer}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let values: Vec<&str> = answer
        .strip_prefix("{test}-read:")
        .expect("named")
        .strip_suffix(';')
        .expect("ends with ;")
        .split(',')
        .collect();
    assert_eq!(values.len(), 19, "{answer}");
    assert_eq!(values[0], "msec");
    let rate: f64 = values[1].parse().expect("ops/sec");
    assert!(rate > 0.0, "{answer}");
    for value in &values[2..] {
        let percent: f64 = value.parse().expect("percentage");
        assert!((0.0..=100.0).contains(&percent), "{answer}");
        assert_eq!(value.split('.').nth(1).map(str::len), Some(2));
    }
    assert!(wait_for_slice(&node, "{test}-read").starts_with("{test}-read:msec,"));
    // Histograms never used stay empty; bad names are an error.
    assert_eq!(node.info("latencies:hist={test}-udf"), "{test}-udf:;");
    assert_eq!(
        node.info("latencies:hist={nope}-read"),
        "ERROR:4:bad hist name {nope}-read"
    );
}

#[test]
fn metrics_are_served_in_the_prometheus_text_format() {
    let node = Node::start("metrics");
    requests(&node, "test", 40, true);
    requests(&node, "test", 25, false);
    wait_for_count(&node, "{test}-write", 40);
    wait_for_count(&node, "{test}-read", 25);
    let (status, content_type, text) = node.http("GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    // Every line is a comment or `name{labels} value`, and every sample's
    // family was declared with a type.
    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("type line");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_owned());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample line");
        let name = series.split('{').next().expect("name");
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && name.starts_with("bolide_"),
            "bad metric name in {line}"
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| typed.contains(*base))
            })
            .unwrap_or(name);
        assert!(typed.contains(family), "{name} has no # TYPE");
        if family.ends_with("_total") {
            assert!(text.contains(&format!("# TYPE {family} counter")));
        }
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value in {line}"));
    }
    // The figures are the info answers' figures.
    let statistics = node.info("namespace/test");
    let sample = |series: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{series} missing"))
            .parse()
            .expect("number")
    };
    assert_eq!(
        sample("bolide_namespace_client_write_success_total{ns=\"test\"}"),
        40.0
    );
    assert_eq!(
        sample("bolide_namespace_client_read_success_total{ns=\"test\"}"),
        25.0
    );
    assert_eq!(
        sample("bolide_namespace_objects{ns=\"test\"}"),
        stat(&statistics, "objects")
            .parse::<f64>()
            .expect("objects")
    );
    assert_eq!(sample("bolide_namespace_objects{ns=\"test\"}"), 40.0);
    assert_eq!(sample("bolide_set_objects{ns=\"test\",set=\"demo\"}"), 40.0);
    assert_eq!(
        sample("bolide_namespace_config_data_size_bytes{ns=\"test\"}"),
        268435456.0
    );
    assert_eq!(
        sample("bolide_latency_seconds_count{ns=\"test\",type=\"write\"}"),
        40.0
    );
    assert_eq!(
        sample("bolide_latency_seconds_count{ns=\"test\",type=\"read\"}"),
        25.0
    );
    assert_eq!(
        sample("bolide_latency_seconds_bucket{ns=\"test\",type=\"read\",le=\"+Inf\"}"),
        25.0
    );
    assert!(sample("bolide_latency_seconds_sum{ns=\"test\",type=\"read\"}") > 0.0);
    assert!(sample("bolide_node_client_connections_opened_total") >= 2.0);
    assert!(sample("bolide_node_uptime_seconds") >= 0.0);
    // Buckets are cumulative.
    let mut previous = 0.0;
    for line in text
        .lines()
        .filter(|line| line.starts_with("bolide_latency_seconds_bucket{ns=\"test\",type=\"write\""))
    {
        let value: f64 = line
            .rsplit_once(' ')
            .expect("value")
            .1
            .parse()
            .expect("number");
        assert!(value >= previous, "{line}");
        previous = value;
    }
    assert_eq!(previous, 40.0);
}

#[test]
fn the_console_is_served_from_the_binary() {
    let node = Node::start("console");
    let (status, content_type, page) = node.http("GET", "/", None);
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"));
    assert!(page.contains("<title>Bolide"), "{page}");
    for (path, kind) in [
        ("/assets/app.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
        ("/assets/favicon.svg", "image/svg+xml"),
    ] {
        let (status, content_type, body) = node.http("GET", path, None);
        assert_eq!(status, 200, "{path}");
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        assert!(body.len() > 100, "{path} is empty");
        // Nothing is loaded from another origin.
        for external in ["http://", "https://", "//cdn", "@import"] {
            assert!(
                !body.contains(external) || path.ends_with(".svg"),
                "{path} refers to {external}"
            );
        }
    }
    for external in ["https://", "http://", "<link href=\"//"] {
        assert!(!page.contains(external), "index refers to {external}");
    }
    let (status, _, body) = node.http("GET", "/assets/nope.js", None);
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = node.http("GET", "/no/such/page", None);
    assert_eq!(status, 404);
    assert!(body.contains("\"ok\":false"), "{body}");
}

#[test]
fn the_console_api_answers_for_this_node_and_others() {
    let node = Node::start("api");
    let other = Node::start("api-other");
    requests(&node, "test", 10, true);
    wait_for_count(&node, "{test}-write", 10);
    let (status, _, body) = node.http("GET", "/api/v1/node?config=1", None);
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["ok"], true);
    let info = &json["info"];
    assert_eq!(info["node"], node.info("node"));
    assert_eq!(info["namespaces"], "test;bar");
    assert!(info["namespace/test"]
        .as_str()
        .expect("ns")
        .contains("objects=10;"));
    assert!(info["sets"]
        .as_str()
        .expect("sets")
        .contains("ns=test:set=demo:objects=10:"));
    assert!(info["get-config:context=namespace;id=bar"].is_string());
    assert!(info["latency-histograms"]
        .as_str()
        .expect("hist")
        .contains("{test}-write:count=10:"));
    // Another node, through its service port.
    let address = format!("127.0.0.1:{}", other.port);
    let (status, _, body) = node.http("GET", &format!("/api/v1/node?address={address}"), None);
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["info"]["node"], other.info("node"));
    assert_eq!(json["address"], address);
    assert!(json["info"]["namespace/test"]
        .as_str()
        .expect("ns")
        .contains("objects=0;"));
    let (status, _, body) = node.http("GET", &format!("/api/v1/cluster?seed={address}"), None);
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["nodes"][0]["name"], other.info("node"));
    assert_eq!(json["nodes"][0]["local"], false);
    assert_eq!(json["nodes"].as_array().expect("nodes").len(), 1);
    // Bad input: a clear error, never a hang.
    let (status, _, body) = node.http("GET", "/api/v1/node?address=nonsense", None);
    assert_eq!(status, 400);
    assert!(body.contains("is not HOST:PORT"), "{body}");
    let closed = free_port();
    let (status, _, body) = node.http(
        "GET",
        &format!("/api/v1/node?address=127.0.0.1:{closed}"),
        None,
    );
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("\"ok\":false"));
}

#[test]
fn the_console_finds_every_node_from_one_seed() {
    // A seed that names two peers, as a cluster node answers peers-clear-std.
    let node = Node::start("peers");
    let other = Node::start("peers-other");
    let seed = TcpListener::bind("127.0.0.1:0").expect("bind seed");
    let seed_port = seed.local_addr().expect("addr").port();
    let peers = format!(
        "3,{},[[{},,[127.0.0.1]],[BEEF,,[127.0.0.1:{}]]]",
        other.port,
        other.info("node"),
        node.port
    );
    let server = std::thread::spawn(move || {
        let (mut stream, _) = seed.accept().expect("accept");
        let (kind, body) = read_frame(&mut stream);
        assert_eq!(kind, 1);
        let mut answer = String::new();
        for command in String::from_utf8(body).expect("utf-8").lines() {
            let value = match command {
                "node" => "5EED".to_owned(),
                "peers-clear-std" => peers.clone(),
                "cluster-name" => "fake".to_owned(),
                _ => String::new(),
            };
            answer.push_str(&format!("{command}\t{value}\n"));
        }
        stream
            .write_all(&frame(1, answer.as_bytes()))
            .expect("answer");
    });
    let (status, _, body) = node.http(
        "GET",
        &format!("/api/v1/cluster?seed=127.0.0.1:{seed_port}"),
        None,
    );
    server.join().expect("seed thread");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    let nodes = json["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{body}");
    assert_eq!(nodes[0]["name"], "5EED");
    assert_eq!(nodes[1]["name"], other.info("node"));
    assert_eq!(nodes[1]["address"], format!("127.0.0.1:{}", other.port));
    assert_eq!(nodes[1]["local"], false);
    assert_eq!(nodes[2]["address"], format!("127.0.0.1:{}", node.port));
    assert_eq!(nodes[2]["local"], true);
    assert_eq!(json["cluster_name"], "fake");
}

#[test]
fn truncate_from_the_console_api() {
    let node = Node::start("truncate");
    requests(&node, "test", 30, true);
    assert_eq!(stat(&node.info("namespace/test"), "objects"), "30");
    let bad = [
        (r#"{"namespace":"test","set":"de;mo"}"#, 400, "bad set name"),
        (r#"{"namespace":"nope","set":"demo"}"#, 404, "ERROR:20"),
        (r#"{"namespace":""}"#, 400, "bad namespace name"),
        (r#"{"set":"demo"}"#, 422, ""),
        ("not json", 400, ""),
    ];
    for (body, expected, message) in bad {
        let (status, _, answer) = node.http("POST", "/api/v1/truncate", Some(body));
        assert_eq!(status, expected, "{body}: {answer}");
        assert!(answer.contains(message), "{body}: {answer}");
    }
    assert_eq!(stat(&node.info("namespace/test"), "objects"), "30");
    // GET is not a way to change anything.
    let (status, _, _) = node.http("GET", "/api/v1/truncate", None);
    assert_eq!(status, 405);
    let (status, _, answer) = node.http(
        "POST",
        "/api/v1/truncate",
        Some(r#"{"namespace":"test","set":"demo"}"#),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"ok\":true"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while stat(&node.info("namespace/test"), "objects") != "0" {
        assert!(Instant::now() < deadline, "truncate did not empty the set");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The metric families of a scrape (histograms by their base name).
fn families(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_dashboard_and_the_docs_name_the_metrics_served() {
    let node = Node::start("dashboard");
    requests(&node, "test", 5, true);
    requests(&node, "bar", 5, true);
    let (status, _, text) = node.http("GET", "/metrics", None);
    assert_eq!(status, 200);
    let served = families(&text);
    assert!(
        served.contains("bolide_namespace_storage_defrag_queue_blocks"),
        "{served:?}"
    );
    // Every figure of this node has a name and a description.
    assert!(!text.contains("not yet described"), "{text}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let docs =
        std::fs::read_to_string(root.join("docs/operations.md")).expect("docs/operations.md");
    for family in &served {
        assert!(
            docs.contains(&format!("`{family}`")),
            "docs/operations.md does not describe {family}"
        );
    }
    let dashboard = std::fs::read_to_string(root.join("docs/grafana/bolide-dashboard.json"))
        .expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard is JSON");
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let mut rest = expr;
            while let Some(start) = rest.find("bolide_") {
                let tail = &rest[start..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| {
                        name.strip_suffix(suffix)
                            .filter(|base| served.contains(*base))
                    })
                    .unwrap_or(name);
                assert!(
                    served.contains(family),
                    "the dashboard uses {name}, which /metrics does not serve"
                );
                checked += 1;
                rest = &tail[end..];
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} metric references in the dashboard"
    );
}
