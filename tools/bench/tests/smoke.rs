//! Smoke test: runs bolide-bench for about two seconds against a bolided and
//! a redis-server it starts on free loopback ports, and checks the JSON
//! summary shows throughput and no errors; also checks the one-line errors
//! for an unknown namespace and an unreachable server.
//!
//! Needs target/release/bolided (or BOLIDED_BIN) and /usr/bin/redis-server
//! (or REDIS_SERVER_BIN); both missing cases fail with a clear message.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_bolide-bench");
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A server process we started; killed (by its own handle) when dropped.
struct Server {
    child: Child,
    port: u16,
    scratch: Option<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("bolide-bench-smoke-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Waits (bounded) until the server accepts connections.
fn wait_for_port(server: &mut Server, name: &str) {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("{name} exited during startup with {status}");
        }
        if TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{name} did not listen on 127.0.0.1:{} within {STARTUP_TIMEOUT:?}",
        server.port
    );
}

fn bolided_path() -> PathBuf {
    let path = std::env::var_os("BOLIDED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/bolided")
        });
    assert!(
        path.is_file(),
        "bolided not found at {}: run `cargo build --release -p bolide-server` or set BOLIDED_BIN",
        path.display()
    );
    path
}

fn redis_server_path() -> PathBuf {
    let path = std::env::var_os("REDIS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"));
    assert!(
        path.is_file(),
        "redis-server not found at {}: install it (apt-get install redis-server) or set REDIS_SERVER_BIN",
        path.display()
    );
    path
}

fn start_bolided() -> Server {
    let port = free_port();
    let dir = scratch_dir(&format!("bolided-{port}"));
    let config = dir.join("bolide.conf");
    let text = format!(
        "network {{\n    service {{\n        address 127.0.0.1\n        port {port}\n    }}\n}}\n\
         namespace test {{\n    storage-engine memory\n}}\n"
    );
    std::fs::write(&config, text).expect("write bolided config");
    let log = std::fs::File::create(dir.join("bolided.log")).expect("bolided log");
    let child = Command::new(bolided_path())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn bolided");
    let mut server = Server {
        child,
        port,
        scratch: Some(dir),
    };
    wait_for_port(&mut server, "bolided");
    server
}

fn start_redis() -> Server {
    let port = free_port();
    let child = Command::new(redis_server_path())
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--daemonize", "no", "--protected-mode", "yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server");
    let mut server = Server {
        child,
        port,
        scratch: None,
    };
    wait_for_port(&mut server, "redis-server");
    server
}

fn bench(arguments: &[&str]) -> Output {
    Command::new(BENCH)
        .args(arguments)
        .stdin(Stdio::null())
        .output()
        .expect("run bolide-bench")
}

/// Runs the bench with `--json -` and returns the parsed summary.
fn bench_json(arguments: &[&str]) -> serde_json::Value {
    let mut all = arguments.to_vec();
    all.extend(["--json", "-"]);
    let output = bench(&all);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bolide-bench {arguments:?} failed: {stderr}"
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "summary of {arguments:?} is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn assert_clean_throughput(summary: &serde_json::Value, what: &str) {
    let count = summary["total"]["count"].as_u64().expect("total.count");
    let tps = summary["total"]["tps"].as_f64().expect("total.tps");
    assert!(count > 0 && tps > 0.0, "{what}: no throughput: {summary}");
    assert_eq!(summary["total"]["errors"], 0, "{what}: errors: {summary}");
    assert_eq!(
        summary["total"]["timeouts"], 0,
        "{what}: timeouts: {summary}"
    );
}

fn load_and_run(protocol: &str, port: u16) {
    let port = port.to_string();
    let common = [
        "--protocol",
        protocol,
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-k",
        "2000",
        "-o",
        "S:100",
    ];
    let load = bench_json(&[&common[..], &["-w", "I", "-c", "4", "--depth", "8"]].concat());
    assert_clean_throughput(&load, "load");
    assert_eq!(load["operations"]["insert"]["count"], 2000, "{load}");
    let run = bench_json(
        &[
            &common[..],
            &[
                "-w", "RU,80", "-c", "4", "--depth", "4", "-d", "2s", "-L", "7,1",
            ],
        ]
        .concat(),
    );
    assert_clean_throughput(&run, "RU,80");
    assert!(
        run["operations"]["read"]["count"].as_u64() > Some(0),
        "{run}"
    );
    assert!(
        run["operations"]["update"]["count"].as_u64() > Some(0),
        "{run}"
    );
    assert_eq!(
        run["operations"]["read"]["not_found"], 0,
        "every key was loaded: {run}"
    );
    assert!(
        !run["timeline"].as_array().expect("timeline").is_empty(),
        "{run}"
    );
    // A YCSB workload at a target rate: latency counted from intended starts.
    let paced = bench_json(
        &[
            &common[..],
            &["-w", "F", "-c", "2", "-g", "2000", "-d", "1s"],
        ]
        .concat(),
    );
    assert_clean_throughput(&paced, "F at 2000 tps");
    let tps = paced["total"]["tps"].as_f64().expect("tps");
    assert!(
        (1000.0..=2600.0).contains(&tps),
        "paced run at {tps} tps: {paced}"
    );
}

#[test]
fn drives_bolided_over_the_aerospike_protocol() {
    let server = start_bolided();
    load_and_run("aerospike", server.port);
}

#[test]
fn drives_redis_over_resp() {
    let server = start_redis();
    load_and_run("redis", server.port);
}

#[test]
fn clear_errors_exit_non_zero() {
    let server = start_bolided();
    let port = server.port.to_string();
    let cases: [(&[&str], &str); 3] = [
        (
            &["-p", &port, "-n", "nosuchns", "-d", "1s"],
            "bolide-bench: namespace 'nosuchns' not found on 127.0.0.1:",
        ),
        (
            &["-p", "1", "-d", "1s"],
            "bolide-bench: cannot connect to 127.0.0.1:1:",
        ),
        (&["-o", "Q:1"], "bolide-bench: bad -o 'Q:1'"),
    ];
    for (arguments, expected) in cases {
        let output = bench(arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{arguments:?} succeeded");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{arguments:?}: not one line: {stderr}"
        );
        assert!(stderr.starts_with(expected), "{arguments:?}: {stderr}");
    }
}
