//! The `bolide` binary against real bolided processes on loopback.
//!
//! The server binary comes from `BOLIDED_BIN`, else the workspace's
//! `target/release/bolided` (build it first: `cargo build --release -p
//! bolide-server`); a missing binary fails the test.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, Server};

impl Server {
    fn start(tag: &str) -> Server {
        Server::start_with(tag, "")
    }

    /// A node whose configuration ends with `extra` (a `security { }`).
    fn start_with(tag: &str, extra: &str) -> Server {
        Server::start_config("cli", tag, |_, port| {
            format!(
                "service {{\n    cluster-name cli-test\n    service-threads 2\n    ticker-interval 1\n}}\n\
                 network {{\n    service {{\n        address 127.0.0.1\n        port {port}\n    }}\n}}\n\
                 namespace test {{\n    default-ttl 0\n}}\nnamespace bar {{\n}}\n{extra}"
            )
        })
    }

    fn sql(&self, statements: &str) -> (String, String) {
        let output = self.bolide(&["sql", "-c", statements]);
        let (stdout, stderr) = texts(&output);
        assert!(
            output.status.success(),
            "{statements}\nstdout: {stdout}\nstderr: {stderr}"
        );
        (stdout, stderr)
    }

    /// Statements on stdin, one a line (too many for one argument).
    fn sql_stdin(&self, statements: &str) -> String {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bolide"))
            .args(["-p", &self.port.to_string(), "sql"])
            .env("HOME", &self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bolide");
        let mut stdin = child.stdin.take().expect("stdin");
        let input = statements.to_owned();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let output = child.wait_with_output().expect("wait");
        writer.join().expect("writer").expect("write statements");
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "stderr: {stderr}");
        stdout
    }

    fn info(&self, command: &str) -> String {
        let output = self.bolide(&["asinfo", command]);
        assert!(output.status.success());
        texts(&output).0.trim_end().to_owned()
    }
}

fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn stat(text: &str, key: &str) -> String {
    text.split(';')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} missing from {text}"))
        .to_owned()
}

/// Cells of the table rows that start with `first` (`│ a ┆ b │`).
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| {
            line.trim_matches(|c| c == '│' || c == ' ')
                .split('┆')
                .map(str::trim)
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first} in\n{table}"))
}

fn inserts(count: usize) -> String {
    (0..count)
        .map(|i| format!("INSERT INTO test.demo (PK, n, s) VALUES ({i}, {i}, 'v{i}')"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn sql_writes_reads_and_deletes_records() {
    let server = Server::start("crud");
    let (out, _) = server.sql(
        "INSERT INTO test.demo (PK, name, n, f, l) VALUES ('k1', 'Ada', 36, 1.5, JSON('[1, {\"a\": \"b\"}]'))",
    );
    assert_eq!(out.trim(), "OK, 1 record affected.");
    server.sql("insert into test.demo (PK, name, n) values (2, 'Bob', 41)");
    server.sql("INSERT INTO test.other (PK, name) VALUES ('x', 'elsewhere')");
    assert_eq!(stat(&server.info("namespace/test"), "objects"), "3");

    let (out, _) = server.sql("SELECT * FROM test.demo WHERE PK = 'k1'");
    let cells = row(&out, "k1");
    assert_eq!(
        cells,
        ["k1", "Ada", "36", "1.5", "[1,{\"a\":\"b\"}]"],
        "{out}"
    );
    assert!(out.contains("1 row in set"), "{out}");

    // JSON: a valid array, values typed.
    let output = server.bolide(&["sql", "-o", "json", "-c", "SELECT name, n FROM test.demo"]);
    assert!(output.status.success());
    let (out, err) = texts(&output);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("JSON output");
    let mut rows = rows.as_array().expect("array").clone();
    rows.sort_by_key(|row| row["n"].as_i64());
    assert_eq!(
        rows,
        vec![
            serde_json::json!({"PK": "k1", "name": "Ada", "n": 36}),
            serde_json::json!({"PK": 2, "name": "Bob", "n": 41}),
        ]
    );
    assert!(err.contains("2 rows in set"), "{err}");

    // Filters run as scans with expressions.
    let (out, _) = server.sql("SELECT name FROM test.demo WHERE n = 41");
    assert_eq!(row(&out, "2"), ["2", "Bob"]);
    assert!(out.contains("1 row in set"));
    let (out, _) = server.sql("SELECT name FROM test.demo WHERE n BETWEEN 30 AND 40");
    assert_eq!(row(&out, "k1"), ["k1", "Ada"]);
    assert!(out.contains("1 row in set"));
    // Numbers compare by value: integer bounds on a float bin, a float
    // range over an integer bin.
    let (out, _) = server.sql("SELECT name FROM test.demo WHERE f BETWEEN 1 AND 2");
    assert_eq!(row(&out, "k1"), ["k1", "Ada"]);
    assert!(out.contains("1 row in set"), "{out}");
    let (out, _) = server.sql("SELECT name FROM test.demo WHERE n BETWEEN 35.5 AND 36");
    assert_eq!(row(&out, "k1"), ["k1", "Ada"]);
    let (out, _) = server.sql("SELECT name FROM test.demo WHERE n = 41.0");
    assert_eq!(row(&out, "2"), ["2", "Bob"]);
    let (out, _) = server.sql("SELECT name FROM test.demo WHERE n = 40.5");
    assert!(out.contains("0 rows in set"), "{out}");
    let (out, _) = server.sql("SELECT * FROM test.demo WHERE name = 'nobody'");
    assert!(out.contains("0 rows in set"), "{out}");
    let (out, _) = server.sql("SELECT * FROM test");
    assert!(out.contains("3 rows in set"), "{out}");
    let (out, _) = server.sql("SELECT * FROM test LIMIT 2");
    assert!(out.contains("2 rows in set"), "{out}");

    let (out, _) = server.sql("EXPLAIN SELECT * FROM test.demo WHERE PK = 'k1'");
    assert!(row(&out, "plan")[1].starts_with("PK lookup"), "{out}");
    let partition: usize = row(&out, "partition")[1].parse().expect("partition");
    assert!(partition < 4096);
    assert!(
        row(&out, "master node")[1].starts_with(&server.info("node")),
        "{out}"
    );
    assert_eq!(row(&out, "digest")[1].len(), 40);

    let (out, _) = server.sql("DELETE FROM test.demo WHERE PK = 'k1'");
    assert_eq!(out.trim(), "OK, 1 record affected.");
    let (out, _) = server.sql("DELETE FROM test.demo WHERE PK = 'k1'");
    assert_eq!(out.trim(), "OK, 0 records affected.");
    let (out, _) = server.sql("SELECT * FROM test.demo WHERE PK = 'k1'");
    assert!(out.contains("0 rows in set"), "{out}");
    assert_eq!(stat(&server.info("namespace/test"), "objects"), "2");
}

#[test]
fn bad_statements_get_a_clear_error_pointing_at_the_word() {
    let server = Server::start("errors");
    let output = server.bolide(&["sql", "-c", "SELECT * FORM test.demo"]);
    assert_eq!(output.status.code(), Some(1));
    let (_, err) = texts(&output);
    assert_eq!(
        err.trim_end(),
        "error: expected FROM, found 'FORM'\n  SELECT * FORM test.demo\n           ^^^^"
    );
    let output = server.bolide(&["sql", "-c", "INSERT INTO test.demo (PK, a) VALUES (1)"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(texts(&output).1.contains("2 names but 1 values"));
    // The server's refusal is reported too.
    let output = server.bolide(&["sql", "-c", "INSERT INTO nope.demo (PK, a) VALUES (1, 2)"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        texts(&output).1.starts_with("INSERT failed"),
        "{}",
        texts(&output).1
    );
    // Statements before a failing one ran; the ones after did not.
    let output = server.bolide(&[
        "sql",
        "-c",
        "INSERT INTO test.s (PK, a) VALUES (1, 1); SELEKT 1; INSERT INTO test.s (PK, a) VALUES (2, 2)",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stat(&server.info("namespace/test"), "objects"), "1");
    // Bad command lines and unreachable nodes.
    let output = server.bolide(&["show", "statistics", "namespace"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(texts(&output).1.contains("expected 'namespace NS'"));
    let output = server.bolide(&["show", "statistics", "namespace", "nope"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        texts(&output).1.contains("no such namespace"),
        "{}",
        texts(&output).1
    );
    let closed = free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_bolide"))
        .args(["-p", &closed.to_string(), "info"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    assert!(texts(&output)
        .1
        .contains(&format!("cannot connect to 127.0.0.1:{closed}")));
}

#[test]
fn a_big_select_streams_and_truncate_shows_progress() {
    let server = Server::start("stream");
    assert_eq!(
        server
            .sql_stdin(&inserts(2500))
            .matches("OK, 1 record affected.")
            .count(),
        2500
    );
    assert_eq!(stat(&server.info("namespace/test"), "objects"), "2500");
    // Table output comes in blocks of at most 1000 rows, as rows arrive.
    let output = server.bolide(&["sql", "--progress", "-c", "SELECT n FROM test.demo"]);
    assert!(output.status.success());
    let (out, err) = texts(&output);
    assert_eq!(
        out.matches("│ PK ").count(),
        3,
        "three tables of 1000, 1000 and 500 rows"
    );
    let data_rows = out
        .lines()
        .filter(|line| line.starts_with("│ ") && !line.starts_with("│ PK "))
        .count();
    assert_eq!(data_rows, 2500);
    assert!(
        out.contains("2,500 rows in set"),
        "{}",
        out.lines().last().unwrap_or("")
    );
    assert!(err.contains("SELECT: "), "progress on stderr: {err}");
    let output = server.bolide(&["sql", "-o", "json", "-c", "SELECT s FROM test.demo"]);
    let rows: serde_json::Value = serde_json::from_str(&texts(&output).0).expect("JSON");
    assert_eq!(rows.as_array().expect("array").len(), 2500);

    // A reader that is gone (`| head` that has read its lines): the tool
    // ends quietly, as command-line tools do, without a panic message.
    for args in [
        &["info"][..],
        &["show", "statistics"],
        &["sql", "-c", "SELECT * FROM test.demo"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bolide"))
            .args(["-p", &server.port.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let output = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(output.status.code(), Some(101), "{args:?}: {stderr}");
    }

    let output = server.bolide(&["sql", "--progress", "-c", "TRUNCATE test.demo"]);
    assert!(output.status.success());
    let (out, err) = texts(&output);
    assert_eq!(out.trim(), "OK, truncated test.demo (2500 records).");
    assert!(err.contains("TRUNCATE: "), "progress on stderr: {err}");
    assert_eq!(stat(&server.info("namespace/test"), "objects"), "0");
    let (out, _) = server.sql("SELECT * FROM test.demo");
    assert!(out.contains("0 rows in set"));
    // A whole namespace.
    server.sql("INSERT INTO bar.x (PK, a) VALUES (1, 1); INSERT INTO bar.y (PK, a) VALUES (2, 2)");
    let (out, _) = server.sql("TRUNCATE bar");
    assert_eq!(out.trim(), "OK, truncated bar (2 records).");
}

#[test]
fn info_show_and_asinfo_read_every_node() {
    let server = Server::start("admin");
    server.sql_stdin(&inserts(30));
    let node = server.info("node");
    let output = server.bolide(&["info"]);
    assert!(output.status.success());
    let (out, _) = texts(&output);
    let cells = row(&out, &node);
    assert_eq!(cells[1], format!("127.0.0.1:{}", server.port));
    assert_eq!(cells[3], "cli-test");
    assert_eq!(cells[7], "30");
    assert!(out.contains(&format!("Namespaces on {node} (127.0.0.1:{})", server.port)));
    assert_eq!(row(&out, "test")[2], "30");
    assert_eq!(row(&out, "bar")[2], "0");

    let output = server.bolide(&["show", "statistics", "namespace", "test"]);
    let (out, _) = texts(&output);
    assert!(out.starts_with("Namespace test statistics"));
    assert_eq!(row(&out, "objects"), ["objects", "30"]);
    assert_eq!(
        row(&out, "client_write_success"),
        ["client_write_success", "30"]
    );
    assert!(!out.contains("Namespace bar"));
    let output = server.bolide(&["show", "statistics"]);
    let (out, _) = texts(&output);
    assert!(out.contains("Service statistics") && out.contains("Namespace bar statistics"));
    assert_eq!(row(&out, "cluster_size")[1], "1");
    let output = server.bolide(&["show", "config"]);
    let (out, _) = texts(&output);
    assert_eq!(row(&out, "cluster-name")[1], "cli-test");
    assert_eq!(row(&out, "service.port")[1], server.port.to_string());

    // Latencies: reads in the last slice show up with a rate.
    let deadline = Instant::now() + Duration::from_secs(15);
    let out = loop {
        server.sql("SELECT * FROM test.demo WHERE PK = 1");
        let output = server.bolide(&["show", "latencies", "namespace", "test"]);
        let (out, _) = texts(&output);
        if row(&out, "{test}-read")[2] != "-" {
            break out;
        }
        assert!(Instant::now() < deadline, "no latency slice: {out}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let cells = row(&out, "{test}-read");
    assert_eq!(cells[1], node);
    let rate: f64 = cells[2].parse().expect("ops/sec");
    assert!(rate >= 0.0);
    assert!(
        cells[3..].iter().all(|cell| cell.parse::<f64>().is_ok()),
        "{out}"
    );
    assert!(!out.contains("{bar}-read"));

    let output = server.bolide(&["asinfo", "-l", "namespace/test"]);
    let (out, _) = texts(&output);
    assert!(out.lines().any(|line| line == "objects=30"), "{out}");
    let output = server.bolide(&["asinfo", "nonsense-command"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(texts(&output).0.starts_with("ERROR:4"));
}

/// A fake seed that names `peers` in `peers-clear-std` and answers the
/// few commands `bolide info` asks with fixed values.
fn fake_seed(peers: String) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let handle = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            stream.set_nonblocking(false).expect("blocking");
            let mut header = [0u8; 8];
            if stream.read_exact(&mut header).is_err() {
                continue;
            }
            let size = (u64::from_be_bytes(header) & 0xffff_ffff_ffff) as usize;
            let mut body = vec![0u8; size];
            stream.read_exact(&mut body).expect("body");
            let mut answer = String::new();
            for command in String::from_utf8_lossy(&body).lines() {
                let value = match command {
                    "node" => "5EED".to_owned(),
                    "peers-clear-std" => peers.clone(),
                    "build" => "8.1.0.0".to_owned(),
                    "cluster-name" => "fake".to_owned(),
                    "statistics" => "cluster_size=2;uptime=7;objects=0".to_owned(),
                    "namespaces" => String::new(),
                    _ => String::new(),
                };
                answer.push_str(&format!("{command}\t{value}\n"));
            }
            let frame = ((2u64 << 56) | (1u64 << 48) | answer.len() as u64).to_be_bytes();
            let _ = stream.write_all(&frame);
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, handle)
}

#[test]
fn every_node_is_found_from_one_seed() {
    let server = Server::start("seed");
    let node = server.info("node");
    let (port, _seed) = fake_seed(format!("4,{},[[{node},,[127.0.0.1]]]", server.port));
    let output = Command::new(env!("CARGO_BIN_EXE_bolide"))
        .args(["-p", &port.to_string(), "info"])
        .output()
        .expect("run");
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        out.starts_with(&format!("Nodes (2 found from 127.0.0.1:{port})")),
        "{out}"
    );
    assert_eq!(row(&out, "5EED")[1], format!("127.0.0.1:{port}"));
    assert_eq!(row(&out, &node)[1], format!("127.0.0.1:{}", server.port));
    assert!(out.contains("Namespaces on 5EED"));
    assert!(out.contains(&format!("Namespaces on {node}")));
}

#[test]
fn piped_statements_run_in_order_and_failures_set_the_exit_status() {
    let server = Server::start("piped");
    let run = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bolide"))
            .args(["-p", &server.port.to_string(), "sql"])
            .env("HOME", &server.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write");
        child.wait_with_output().expect("wait")
    };
    let output = run("INSERT INTO test.p (PK, a) VALUES ('one', 1)\nset output json\nSELECT a FROM test.p\nquit\nSELECT a FROM test.p\n");
    assert!(output.status.success());
    let (out, _) = texts(&output);
    assert!(out.contains("OK, 1 record affected."));
    assert!(out.contains("OUTPUT = JSON"));
    assert!(out.contains("{\"PK\":\"one\",\"a\":1}"), "{out}");
    assert_eq!(out.matches("\"PK\"").count(), 1, "nothing runs after QUIT");
    let output = run("SELECT * FROM test.p\nALTER TABLE x\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(texts(&output).1.contains("expected a statement"));
}

/// tmux drives the interactive prompt: history (Up) and line editing.
#[test]
fn the_prompt_has_history_and_line_editing() {
    let server = Server::start("prompt");
    server.sql("INSERT INTO test.t (PK, a) VALUES ('k', 7)");
    let session = format!("bolide-cli-test-{}", std::process::id());
    let tmux = |args: &[&str]| {
        let output = Command::new("tmux")
            .args(args)
            .output()
            .expect("tmux is required (apt-get install tmux)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let command = format!(
        "HOME={} {} -p {} sql",
        server.dir.display(),
        env!("CARGO_BIN_EXE_bolide"),
        server.port
    );
    /// Ends the tmux session however the test ends.
    struct Session(String);
    impl Drop for Session {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .output();
        }
    }
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "220",
        "-y",
        "60",
        &command,
    ]);
    let _guard = Session(session.clone());
    let screen = |wanted: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = tmux(&["capture-pane", "-p", "-t", &session]);
            if text.contains(wanted) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "'{wanted}' never appeared:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    screen("bolide>");
    tmux(&[
        "send-keys",
        "-t",
        &session,
        "SELECT a FROM test.t WHERE PK = 'k'",
        "Enter",
    ]);
    screen("1 row in set");
    // Up recalls the statement; Home and typing edit it in place.
    tmux(&["send-keys", "-t", &session, "Up"]);
    tmux(&["send-keys", "-t", &session, "Home"]);
    tmux(&["send-keys", "-t", &session, "-l", "EXPLAIN "]);
    tmux(&["send-keys", "-t", &session, "Enter"]);
    let text = screen("PK lookup");
    assert!(
        text.contains("bolide> EXPLAIN SELECT a FROM test.t WHERE PK = 'k'"),
        "{text}"
    );
    tmux(&["send-keys", "-t", &session, "QUIT", "Enter"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("tmux")
        .args(["has-session", "-t", &session])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
    {
        assert!(Instant::now() < deadline, "bolide sql did not exit on QUIT");
        std::thread::sleep(Duration::from_millis(50));
    }
    let history =
        std::fs::read_to_string(server.dir.join(".bolide_history")).expect("history file");
    assert!(
        history.contains("EXPLAIN SELECT a FROM test.t WHERE PK = 'k'"),
        "{history}"
    );
}

/// `count` of one histogram of `latency-histograms`.
fn histogram_count(server: &Server, name: &str) -> u64 {
    let answer = server.info(&format!("latency-histograms:hist={name}"));
    answer
        .split(':')
        .find_map(|field| field.strip_prefix("count="))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no count in {answer}"))
}

/// Waits until histogram `name` has counted `count` requests (a request is
/// counted just after its answer is written).
fn wait_for_count(server: &Server, name: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counted = histogram_count(server, name);
        assert!(counted <= count, "{name}: {counted} > {count}");
        if counted == count {
            return;
        }
        assert!(Instant::now() < deadline, "{name}: {counted}, not {count}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn where_reads_a_secondary_index_when_there_is_one() {
    let server = Server::start("sindex");
    server.sql_stdin(&inserts(60));
    server.sql("INSERT INTO test.other (PK, n, s) VALUES ('o', 15, 'v15')");
    let select = "SELECT s FROM test.demo WHERE n BETWEEN 10 AND 19";
    let explain = |statement: &str| {
        let (out, _) = server.sql(&format!("EXPLAIN {statement}"));
        out
    };
    let scans = histogram_count(&server, "{test}-pi-query");
    let queries = histogram_count(&server, "{test}-si-query");

    // No index: a scan with a filter expression.
    let out = explain(select);
    assert!(
        row(&out, "plan")[1].starts_with("scan of every partition"),
        "{out}"
    );
    let (out, _) = server.sql(select);
    assert!(out.contains("10 rows in set"), "{out}");
    wait_for_count(&server, "{test}-pi-query", scans + 1);
    assert_eq!(histogram_count(&server, "{test}-si-query"), queries);

    let (out, _) = server.sql("CREATE INDEX demo_n ON test.demo (n) NUMERIC");
    assert_eq!(out.trim(), "OK, index demo_n created.");
    let (out, _) = server.sql("CREATE INDEX all_s ON test (s) STRING");
    assert_eq!(out.trim(), "OK, index all_s created.");
    let (out, _) = server.sql("SHOW INDEXES");
    let cells = row(&out, &server.info("node"));
    assert!(cells.contains(&"demo_n") || out.contains("demo_n"), "{out}");
    assert_eq!(
        stat(
            &server.info("sindex-stat:namespace=test;indexname=demo_n"),
            "load_pct"
        ),
        "100"
    );

    // With it: the index answers, exactly the same rows.
    let out = explain(select);
    assert!(
        row(&out, "plan")[1].starts_with("secondary index query"),
        "{out}"
    );
    assert_eq!(row(&out, "index")[1], "demo_n (numeric on bin n, set demo)");
    let output = server.bolide(&["sql", "-o", "json", "-c", select]);
    let rows: serde_json::Value = serde_json::from_str(&texts(&output).0).expect("JSON");
    let mut keys: Vec<i64> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|row| row["PK"].as_i64().expect("PK"))
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, (10..20).collect::<Vec<_>>());
    wait_for_count(&server, "{test}-si-query", queries + 1);
    assert_eq!(histogram_count(&server, "{test}-pi-query"), scans + 1);
    let (out, _) = server.sql("SELECT * FROM test.demo WHERE n = 7");
    assert_eq!(row(&out, "7")[1..], ["7", "v7"], "{out}");
    wait_for_count(&server, "{test}-si-query", queries + 2);

    // A string index over every set answers a query on one set.
    let out = explain("SELECT * FROM test.demo WHERE s = 'v15'");
    assert_eq!(
        row(&out, "index")[1],
        "all_s (string on bin s, set (all sets))"
    );
    let (out, _) = server.sql("SELECT n FROM test.demo WHERE s = 'v15'");
    assert_eq!(row(&out, "15"), ["15", "15"]);
    assert!(out.contains("1 row in set"), "{out}");
    let (out, _) = server.sql("SELECT n FROM test WHERE s = 'v15'");
    assert!(out.contains("2 rows in set"), "{out}");
    wait_for_count(&server, "{test}-si-query", queries + 4);

    // A float range cannot use a numeric index: a scan, still right.
    let out = explain("SELECT * FROM test.demo WHERE n BETWEEN 1.5 AND 3");
    assert!(row(&out, "plan")[1].starts_with("scan"), "{out}");
    let (out, _) = server.sql("SELECT n FROM test.demo WHERE n BETWEEN 1.5 AND 3");
    assert!(out.contains("2 rows in set"), "{out}");

    let (out, _) = server.sql("DROP INDEX test.demo demo_n");
    assert_eq!(out.trim(), "OK, index demo_n dropped.");
    assert!(row(&explain(select), "plan")[1].starts_with("scan"));
    let output = server.bolide(&["sql", "-c", "CREATE INDEX x ON test.demo (n) GEO"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        texts(&output)
            .1
            .contains("expected NUMERIC or STRING, found 'GEO'"),
        "{}",
        texts(&output).1
    );
}

#[test]
fn acl_manages_users_and_roles_of_a_secured_node() {
    let server = Server::start_with("acl-secured", "security {\n}\n");
    let admin = |args: &[&str]| {
        let mut all = vec!["-U", "admin", "-P", "admin", "acl"];
        all.extend_from_slice(args);
        server.bolide(&all)
    };
    let output = admin(&["create-role", "app", "--privilege", "read-write.test"]);
    assert!(output.status.success(), "{:?}", texts(&output));
    // --new-password is the new user's; -P stays the admin's login.
    let output = admin(&[
        "create-user",
        "carl",
        "--new-password",
        "carl-pw",
        "--roles",
        "app",
    ]);
    assert!(output.status.success(), "{:?}", texts(&output));
    let output = admin(&["show-users"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("carl") && stdout.contains("app"),
        "{stdout}"
    );
    // carl logs in with his password and works in his namespace.
    let output = server.bolide(&[
        "-U",
        "carl",
        "-P",
        "carl-pw",
        "sql",
        "-c",
        "INSERT INTO test.demo (PK, v) VALUES ('k', 1)",
    ]);
    assert!(output.status.success(), "{:?}", texts(&output));
    // A wrong password is refused.
    let output = server.bolide(&["-U", "carl", "-P", "wrong", "acl", "show-users"]);
    assert!(!output.status.success());
    assert!(texts(&output).1.contains("62"), "{:?}", texts(&output));
    // carl holds no user-admin: 81.
    let output = server.bolide(&["-U", "carl", "-P", "carl-pw", "acl", "drop-user", "admin"]);
    assert!(!output.status.success());
    assert!(texts(&output).1.contains("81"), "{:?}", texts(&output));
    // A PKI user has no password: the marker word is not one.
    let output = admin(&["create-user", "dora", "--pki", "--roles", "app"]);
    assert!(output.status.success(), "{:?}", texts(&output));
    let output = server.bolide(&["-U", "dora", "-P", "nopassword", "acl", "show-users"]);
    assert!(!output.status.success());
    assert!(texts(&output).1.contains("62"), "{:?}", texts(&output));
    let output = admin(&["set-password", "dora", "--new-password", "x"]);
    assert!(!output.status.success());
    assert!(texts(&output).1.contains("64"), "{:?}", texts(&output));
}

#[test]
fn a_login_on_an_open_node_is_no_obstacle_and_acl_says_security_is_off() {
    let server = Server::start("login-open");
    // -U/-P: the node answers LOGIN with 52 (security not enabled); every
    // command goes on.
    let output = server.bolide(&["-U", "admin", "-P", "admin", "asinfo", "build"]);
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(!stdout.trim().is_empty(), "{stdout}");
    let output = server.bolide(&[
        "-U",
        "admin",
        "-P",
        "admin",
        "sql",
        "-c",
        "SELECT * FROM test",
    ]);
    assert!(output.status.success(), "{}", texts(&output).1);
    // User administration needs a secured node.
    let output = server.bolide(&["-U", "admin", "-P", "admin", "acl", "show-users"]);
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("52"), "{stderr}");
    // A bad privilege is refused before anything is sent.
    let output = server.bolide(&[
        "-U",
        "admin",
        "-P",
        "admin",
        "acl",
        "create-role",
        "r",
        "--privilege",
        "sys-admin.test",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        texts(&output).1.contains("global only"),
        "{}",
        texts(&output).1
    );
}
