//! One bolided process on loopback for the `bolide` binary's tests.
//!
//! The server binary comes from `BOLIDED_BIN`, else the workspace's
//! `target/release/bolided` (build it first: `cargo build --release -p
//! bolide-server`); a missing binary fails the test. Each test binary uses
//! part of it.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

fn server_binary() -> PathBuf {
    let path = std::env::var_os("BOLIDED_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/bolided"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "bolided not found at {} (cargo build --release -p bolide-server)",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

impl Server {
    /// A node in a fresh directory `bolide-{prefix}-{tag}-{pid}` under the
    /// temporary directory; `body(dir, port)` is its configuration.
    pub fn start_config(
        prefix: &str,
        tag: &str,
        body: impl FnOnce(&PathBuf, u16) -> String,
    ) -> Server {
        let dir =
            std::env::temp_dir().join(format!("bolide-{prefix}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let port = free_port();
        std::fs::write(dir.join("bolide.conf"), body(&dir, port)).expect("config");
        let child = Command::new(server_binary())
            .arg("--config")
            .arg(dir.join("bolide.conf"))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bolided");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "bolided did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, port, dir }
    }

    /// `bolide -p PORT ARGS…` with HOME in the node's directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bolide"));
        command
            .args(["-p", &self.port.to_string()])
            .args(args)
            .env("HOME", &self.dir);
        command
    }

    /// The same with nothing on standard input, run to its end.
    pub fn bolide(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run bolide")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
