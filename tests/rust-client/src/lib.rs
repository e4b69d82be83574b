//! Shared harness for the end-to-end tests that drive a real `bolided`
//! process with the official Aerospike Rust client (`aerospike` crate 3.x).
//!
//! * The binary comes from `BOLIDED_BIN`, else
//!   `<workspace root>/target/release/bolided`. A missing binary is a hard
//!   failure (panic), never a silent skip.
//! * Every test starts its own server on a free loopback port with a fresh
//!   config file and kills it (by PID) when the [`BolideServer`] is dropped.
//!
//! Run: `cargo build --release -p bolide-server && cargo test --release -p bolide-client-tests`
//! (add `--no-fail-fast` to run every test binary even if one fails).

use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aerospike::{
    Client, ClientPolicy, Error, ErrorKind, Key, ReadPolicy, ResultCode, Value, WritePolicy,
};

pub mod cluster;

/// Namespace configured in every test server.
pub const NAMESPACE: &str = "test";
/// Cluster name configured in every test server.
pub const CLUSTER_NAME: &str = "bolide-test";

const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const START_ATTEMPTS: usize = 3;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Location of the `bolided` binary under test.
pub fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("BOLIDED_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "BOLIDED_BIN={} does not name an existing file",
            p.display()
        );
        return p;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join("target/release/bolided");
    assert!(
        p.is_file(),
        "bolided binary not found at {} — build it with \
         `cargo build --release -p bolide-server` or set BOLIDED_BIN",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .expect("bind 127.0.0.1:0 to pick a free port");
    l.local_addr().expect("local_addr").port()
}

/// A name part no other test of this run (or another run) uses.
pub fn unique_suffix() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{}-{}", std::process::id(), n, nanos)
}

/// Config file text for a server on `port`.
pub fn config_text(port: u16) -> String {
    format!(
        "service {{
    cluster-name {CLUSTER_NAME}
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
}}
namespace {NAMESPACE} {{
    replication-factor 1
    default-ttl 0
    nsup-period 1
    storage-engine memory {{
        data-size 256M
    }}
}}
"
    )
}

/// A running `bolided` process, killed (by its own PID) on drop.
pub struct BolideServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl BolideServer {
    /// Start a server on a free loopback port and wait (≤ 10 s) until its
    /// port accepts connections. Panics with the server's output on failure.
    pub fn start() -> BolideServer {
        let bin = server_binary();
        let mut last_err = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&bin) {
                Ok(s) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start {}: {last_err}", bin.display());
    }

    fn try_start(bin: &Path) -> Result<BolideServer, String> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("bolide-client-test-{}", unique_suffix()));
        fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let conf = dir.join("bolide.conf");
        fs::write(&conf, config_text(port)).map_err(|e| format!("write config: {e}"))?;
        let log = fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(bin)
            .arg("--config")
            .arg(&conf)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let mut server = BolideServer { child, port, dir };

        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "bolided exited during startup with {status}; output:\n{}",
                    server.log()
                ));
            }
            let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            if TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "bolided did not accept on 127.0.0.1:{port} within {STARTUP_TIMEOUT:?}; output:\n{}",
                    server.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Seed string for `Client::new`.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's combined stdout/stderr so far.
    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(self.dir.join("server.log")) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Client policy used by the tests: validates the cluster name.
    pub fn client_policy() -> ClientPolicy {
        ClientPolicy {
            cluster_name: Some(CLUSTER_NAME.to_string()),
            ..ClientPolicy::default()
        }
    }

    /// Connect a client (bounded to 10 s).
    pub async fn client(&self) -> Client {
        self.client_with(&Self::client_policy()).await
    }

    pub async fn client_with(&self, policy: &ClientPolicy) -> Client {
        let hosts = self.hosts();
        match tokio::time::timeout(Duration::from_secs(10), Client::new(policy, &hosts)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => panic!("Client::new({hosts}) failed: {e}"),
            Err(_) => panic!("Client::new({hosts}) did not finish in 10 s"),
        }
    }
}

impl Drop for BolideServer {
    fn drop(&mut self) {
        // Kill exactly the process we spawned, by PID.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: String = {
                let lines: Vec<&str> = log.lines().collect();
                let start = lines.len().saturating_sub(60);
                lines[start..].join("\n")
            };
            eprintln!(
                "---- bolided output (last 60 lines, port {}) ----\n{tail}\n----",
                self.port
            );
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A key in namespace `test`, set `set`, unique per call unless `name` repeats.
pub fn key(set: &str, name: &str) -> Key {
    Key::new(NAMESPACE, set, Value::from(name)).expect("valid key")
}

/// Write policy with a generous total timeout (for loaded machines).
pub fn wpolicy() -> WritePolicy {
    let mut p = WritePolicy::default();
    p.base_policy.total_timeout = 5_000;
    p
}

/// Read policy with a generous total timeout.
pub fn rpolicy() -> ReadPolicy {
    let mut p = ReadPolicy::default();
    p.base_policy.total_timeout = 5_000;
    p
}

/// Assert that `res` is a server error carrying exactly `expected`.
#[track_caller]
pub fn assert_server_error<T: std::fmt::Debug>(res: Result<T, Error>, expected: ResultCode) {
    match res {
        Ok(v) => panic!("expected server error {expected:?}, got Ok({v:?})"),
        Err(e) => {
            let rc = e.server_result_code();
            assert_eq!(
                rc,
                Some(expected),
                "expected server result code {expected:?} ({}), got error {e} (kind {:?}, result_code {})",
                u8::from(expected),
                e.kind(),
                e.result_code()
            );
            assert!(
                matches!(e.kind(), ErrorKind::Server { .. }),
                "expected ErrorKind::Server, got {:?}",
                e.kind()
            );
            assert_eq!(e.result_code(), i32::from(u8::from(expected)));
        }
    }
}

/// Remaining TTL of a record in whole seconds; `None` = never expires.
pub fn ttl_secs(rec: &aerospike::Record) -> Option<u64> {
    rec.time_to_live().map(|d| d.as_secs())
}
