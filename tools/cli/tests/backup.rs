//! `bolide backup` and `bolide restore` against real bolided processes on
//! loopback: asbackup's sample file byte for byte, a pipe through standard
//! output and input with compression and encryption, refused options.
//!
//! The server binary comes from `BOLIDED_BIN`, else the workspace's
//! `target/release/bolided` (build it first: `cargo build --release -p
//! bolide-server`); a missing binary fails the test. The client-level
//! tests (every particle type through the Python client, clusters,
//! resume) are tests/python/test_backup*.py.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

const SAMPLE: &[u8] = b"Version 3.1\n# namespace test\n# first-file\n+ k S 4 key1\n+ n test\n\
+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ s demo\n+ g 1\n+ t 428179113\n+ b 3\n\
- I foo 123\n- S bar 3 abc\n- Z baz T\n";
const CITRUSLEAF_EPOCH: u64 = 1_262_304_000;

mod common;
use common::Server;

impl Server {
    fn start(tag: &str) -> Server {
        Server::start_config("backup", tag, |dir, port| {
            format!(
                "service {{\n    cluster-name backup-test\n    service-threads 2\n    work-directory {}\n}}\n\
                 network {{\n    service {{\n        address 127.0.0.1\n        port {port}\n    }}\n}}\n\
                 namespace test {{\n    default-ttl 0\n}}\n",
                dir.join("work").display()
            )
        })
    }

    fn ok(&self, args: &[&str]) -> Output {
        let output = self.bolide(args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// `count` records in test.p, through `bolide sql`.
    fn fill(&self, count: usize) {
        let inserts: String = (0..count)
            .map(|i| format!("INSERT INTO test.p (PK, n, s) VALUES ({i}, {i}, 'v {i}\\n')\n"))
            .collect();
        let mut child = self
            .command(&["sql"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("sql");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(inserts.as_bytes())
            .expect("write");
        assert!(child.wait().expect("wait").success());
        assert_eq!(self.objects(), count as u64);
    }

    fn objects(&self) -> u64 {
        let output = self.ok(&["asinfo", "namespace/test"]);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.split(';')
            .find_map(|pair| pair.strip_prefix("objects="))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no objects in {text}"))
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn now_citrusleaf() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - CITRUSLEAF_EPOCH
}

/// The reference's sample restores (with the time to live it needs: its
/// void time is past) and backs up to the same 168 bytes but for the void
/// time line.
#[test]
fn the_sample_file_restores_and_backs_up_byte_for_byte() {
    let server = Server::start("sample");
    let sample = server.dir.join("test_backup_file.asb");
    std::fs::write(&sample, SAMPLE).expect("write");
    let sample = sample.to_str().expect("path");
    let output = server.ok(&["restore", "-i", sample]);
    assert!(stderr(&output).contains("0 written"), "{}", stderr(&output));
    assert!(stderr(&output).contains("1 expired"), "{}", stderr(&output));
    assert_eq!(server.objects(), 0);

    let extra = now_citrusleaf() - 428_179_113 + 86_400;
    let output = server.ok(&["restore", "-i", sample, "--extra-ttl", &extra.to_string()]);
    assert!(stderr(&output).contains("1 written"), "{}", stderr(&output));
    assert_eq!(server.objects(), 1);
    let output = server.ok(&[
        "sql",
        "-o",
        "json",
        "-c",
        "SELECT * FROM test.demo WHERE PK = 'key1'",
    ]);
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(
        rows,
        serde_json::json!([{"PK": "key1", "foo": 123, "bar": "abc", "baz": true}])
    );

    let out = server.dir.join("out.asb");
    server.ok(&["backup", "-n", "test", "-o", out.to_str().expect("path")]);
    let text = std::fs::read(&out).expect("backup");
    let text = String::from_utf8(text).expect("text");
    let void_line = text
        .lines()
        .find(|line| line.starts_with("+ t "))
        .expect("void time line");
    let void: u64 = void_line[4..].parse().expect("number");
    assert!(void.abs_diff(428_179_113 + extra) <= 2, "{void_line}");
    assert_eq!(
        text.replace(void_line, "+ t 428179113").as_bytes(),
        SAMPLE,
        "{text}"
    );
}

/// Standard output into standard input, compressed and encrypted, between
/// two nodes; the same stream without the options is refused at line 1.
#[test]
fn a_compressed_encrypted_pipe_round_trips() {
    let source = Server::start("pipe-a");
    let target = Server::start("pipe-b");
    source.fill(300);
    let key = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/backup-key-pkcs8.pem");
    let key = key.to_str().expect("path");
    let options = ["-z", "zstd", "-y", "aes128", "--encryption-key-file", key];
    let mut args = vec!["backup", "-n", "test", "-o", "-"];
    args.extend_from_slice(&options);
    let dump = source.ok(&args).stdout;
    assert!(!dump.starts_with(b"Version"));

    let restore = |extra: &[&str]| {
        let mut args = vec!["restore", "-i", "-"];
        args.extend_from_slice(extra);
        let mut child = target
            .command(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("restore");
        let mut stdin = child.stdin.take().expect("stdin");
        let bytes = dump.clone();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
        let output = child.wait_with_output().expect("wait");
        writer.join().expect("writer");
        output
    };
    let refused = restore(&[]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("standard input: line 1, byte 0: not an .asb file"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(target.objects(), 0);
    let output = restore(&options);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("300 written"),
        "{}",
        stderr(&output)
    );
    assert_eq!(target.objects(), 300);
}

#[test]
fn options_that_cannot_work_are_refused() {
    let server = Server::start("refused");
    let file = server.dir.join("x.asb");
    std::fs::write(&file, SAMPLE).expect("write");
    let file = file.to_str().expect("path");
    for (args, message) in [
        (
            vec!["restore", "-i", file, "--unique", "--replace"],
            "--unique excludes",
        ),
        (
            vec!["restore", "-i", file, "-y", "aes128"],
            "--encrypt needs --encryption-key-file",
        ),
        (
            vec!["restore", "-i", file, "-P", "secret"],
            "-P/--password needs -U/--user",
        ),
        (
            vec!["restore"],
            "give one of -d/--directory and -i/--input-file",
        ),
        (
            vec!["backup", "-n", "test"],
            "give one of -d/--directory and -o/--output-file",
        ),
        (
            vec!["backup", "-n", "test", "-o", file],
            "exists; remove it with -r/--remove-files",
        ),
        (
            vec!["backup", "-n", "test", "-d", "/tmp", "-X", "0-5000"],
            "partitions are 0-4095",
        ),
        (
            vec!["backup", "-n", "nope", "-o", "-"],
            "namespace nope not found",
        ),
        (
            vec![
                "backup",
                "-n",
                "test",
                "-o",
                "-",
                "-a",
                "2030-01-01",
                "-b",
                "2020-01-01",
            ],
            "--modified-after must be before --modified-before",
        ),
    ] {
        let output = server.bolide(&args);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&output).contains(message),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // Nothing was written by any of them.
    assert_eq!(server.objects(), 0);
}

/// Progress lines on stderr with --progress (stderr is not a terminal
/// here), none without.
#[test]
fn progress_shows_with_the_flag_and_not_without() {
    let server = Server::start("progress");
    server.fill(400);
    let first = server.dir.join("a.asb");
    let output = server.ok(&[
        "backup",
        "-n",
        "test",
        "-o",
        first.to_str().expect("path"),
        "-L",
        "400",
        "--progress",
    ]);
    let text = stderr(&output);
    let line = text
        .lines()
        .find(|line| line.starts_with("backup: "))
        .unwrap_or_else(|| panic!("no progress line in {text}"));
    assert!(
        line.contains(" records, ") && line.contains(" records/s, ") && line.contains(" MB/s"),
        "{line}"
    );
    let second = server.dir.join("b.asb");
    let output = server.ok(&[
        "backup",
        "-n",
        "test",
        "-o",
        second.to_str().expect("path"),
        "-L",
        "400",
    ]);
    assert!(
        !stderr(&output)
            .lines()
            .any(|line| line.starts_with("backup: ")),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("backed up 400 records"),
        "{}",
        stderr(&output)
    );
}

/// The records of a single-file backup: their "+ k" lines.
fn keys_in(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("backup file")
        .lines()
        .filter(|line| line.starts_with("+ k "))
        .map(str::to_owned)
        .collect()
}

/// --no-ttl-only keeps the records that never expire, --filter-exp those
/// a client-built expression selects, --max-records stops at that many
/// (and says so); a --filter-exp that is not base64 is refused.
#[test]
fn no_ttl_only_filter_exp_and_max_records_select_records() {
    let server = Server::start("select");
    server.fill(10);
    // Give keys 0-3 a time to live: back them up, set a void time in the
    // file, restore them over themselves.
    let all = server.dir.join("all.asb");
    server.ok(&["backup", "-n", "test", "-o", all.to_str().expect("path")]);
    let future = now_citrusleaf() + 86_400;
    let mut text = String::new();
    let mut current_key = None;
    for line in std::fs::read_to_string(&all).expect("backup").lines() {
        if let Some(key) = line.strip_prefix("+ k I ") {
            current_key = key.trim().parse::<u64>().ok();
        }
        match (line.starts_with("+ t "), current_key) {
            (true, Some(key)) if key < 4 => text.push_str(&format!("+ t {future}\n")),
            _ => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    let with_ttl = server.dir.join("ttl.asb");
    std::fs::write(&with_ttl, text).expect("write");
    server.ok(&[
        "restore",
        "-i",
        with_ttl.to_str().expect("path"),
        "--no-generation",
    ]);

    let persistent = server.dir.join("persistent.asb");
    let output = server.ok(&[
        "backup",
        "-n",
        "test",
        "--no-ttl-only",
        "-o",
        persistent.to_str().expect("path"),
    ]);
    assert!(
        stderr(&output).contains("backed up 6 records"),
        "{}",
        stderr(&output)
    );
    let mut keys = keys_in(&persistent);
    keys.sort();
    assert_eq!(
        keys,
        (4..10).map(|k| format!("+ k I {k}")).collect::<Vec<_>>()
    );

    // n >= 7, as Exp.ge(Exp.int_bin("n"), Exp.val(7)).build() encodes it.
    use base64::Engine;
    let expression = [0x93, 0x04, 0x93, 0x51, 0x02, 0xa1, b'n', 0x07];
    let encoded = base64::engine::general_purpose::STANDARD.encode(expression);
    let filtered = server.dir.join("filtered.asb");
    let output = server.ok(&[
        "backup",
        "-n",
        "test",
        "--filter-exp",
        &encoded,
        "-o",
        filtered.to_str().expect("path"),
    ]);
    assert!(
        stderr(&output).contains("backed up 3 records"),
        "{}",
        stderr(&output)
    );
    let mut keys = keys_in(&filtered);
    keys.sort();
    assert_eq!(keys, ["+ k I 7", "+ k I 8", "+ k I 9"]);

    let some = server.dir.join("some.asb");
    let output = server.ok(&[
        "backup",
        "-n",
        "test",
        "-M",
        "3",
        "-o",
        some.to_str().expect("path"),
    ]);
    assert!(
        stderr(&output).contains("backed up 3 records"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("stopped at --max-records 3"),
        "{}",
        stderr(&output)
    );
    assert_eq!(keys_in(&some).len(), 3);
    // The rest comes with --continue: every record once.
    let state = server.dir.join("some.asb.state");
    assert!(state.is_file(), "no state file after --max-records");
    let output = server.ok(&[
        "backup",
        "-n",
        "test",
        "-o",
        some.to_str().expect("path"),
        "--continue",
        state.to_str().expect("path"),
    ]);
    assert!(
        stderr(&output).contains("backed up 7 records"),
        "{}",
        stderr(&output)
    );
    let mut keys = keys_in(&some);
    keys.sort_by_key(|key| key[6..].parse::<u32>().unwrap_or(u32::MAX));
    assert_eq!(
        keys,
        (0..10).map(|k| format!("+ k I {k}")).collect::<Vec<_>>()
    );

    let refused = server.bolide(&["backup", "-n", "test", "--filter-exp", "%%%", "-o", "-"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--filter-exp is not base64"),
        "{}",
        stderr(&refused)
    );
}
