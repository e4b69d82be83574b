//! `bolide roster show|set|recluster` against a real 3-node cluster with a
//! strong-consistency namespace (and an AP one it must leave out).
//!
//! The server binary comes from `BOLIDED_BIN`, else the workspace's
//! `target/release/bolided` (build it first: `cargo build --release -p
//! bolide-server`).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;

struct Node {
    id: String,
    port: u16,
    child: Option<Child>,
}

/// Three nodes A1..A3 on 127.0.0.1 with a mesh heartbeat, namespace
/// `test` strong-consistency with RF 2, namespace `bar` AP.
struct Cluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

fn server_binary() -> PathBuf {
    std::env::var_os("BOLIDED_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/bolided"),
        PathBuf::from,
    )
}

impl Cluster {
    fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("bolide-cli-roster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let ports: Vec<[u16; 3]> = (0..3)
            .map(|_| [free_port(), free_port(), free_port()])
            .collect();
        let mut nodes = Vec::new();
        for (i, [port, heartbeat, fabric]) in ports.iter().enumerate() {
            let id = format!("A{}", i + 1);
            let seed = ports[0][1];
            let config = format!(
                "service {{\n    cluster-name cli-roster\n    node-id {id}\n}}\n\
                 network {{\n    service {{\n        address 127.0.0.1\n        port {port}\n    }}\n\
                 \x20   heartbeat {{\n        mode mesh\n        address 127.0.0.1\n        port {heartbeat}\n\
                 \x20       mesh-seed-address-port 127.0.0.1 {seed}\n        interval 150\n        timeout 10\n    }}\n\
                 \x20   fabric {{\n        address 127.0.0.1\n        port {fabric}\n    }}\n}}\n\
                 namespace test {{\n    replication-factor 2\n    strong-consistency true\n\
                 \x20   storage-engine memory {{\n        data-size 64M\n    }}\n}}\n\
                 namespace bar {{\n    replication-factor 2\n    storage-engine memory {{\n        data-size 64M\n    }}\n}}\n"
            );
            let path = dir.join(format!("{id}.conf"));
            std::fs::write(&path, config).expect("config");
            let child = Command::new(server_binary())
                .arg("--config")
                .arg(&path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn bolided (cargo build --release -p bolide-server)");
            nodes.push(Node {
                id,
                port: *port,
                child: Some(child),
            });
        }
        for node in &nodes {
            let deadline = Instant::now() + Duration::from_secs(20);
            while TcpStream::connect(("127.0.0.1", node.port)).is_err() {
                assert!(Instant::now() < deadline, "{} did not start", node.id);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let cluster = Cluster { nodes, dir };
        // One cluster formed: the same key everywhere, three members, the
        // map settled (`cluster-stable` would not do: an SC namespace with
        // no roster may keep migrations it cannot run).
        cluster.wait(
            |c| {
                let keys: Vec<String> = (0..3)
                    .map(|i| c.stat(i, "statistics", "cluster_key"))
                    .collect();
                !keys[0].is_empty()
                    && keys.iter().all(|key| *key == keys[0])
                    && (0..3).all(|i| {
                        c.stat(i, "statistics", "cluster_size") == "3"
                            && c.stat(i, "statistics", "migrate_allowed") == "true"
                    })
            },
            "three nodes in one cluster",
        );
        cluster
    }

    /// `bolide -p PORT(node i) ARGS...`.
    fn bolide(&self, i: usize, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_bolide"))
            .args(["-p", &self.nodes[i].port.to_string()])
            .args(args)
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .output()
            .expect("run bolide")
    }

    fn info(&self, i: usize, command: &str) -> String {
        let output = self.bolide(i, &["asinfo", command]);
        String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned()
    }

    fn stat(&self, i: usize, command: &str, key: &str) -> String {
        self.info(i, command)
            .split(';')
            .find_map(|pair| pair.strip_prefix(&format!("{key}=")).map(str::to_owned))
            .unwrap_or_default()
    }

    fn roster(&self, i: usize) -> String {
        self.info(i, "roster:namespace=test")
    }

    fn wait(&self, done: impl Fn(&Cluster) -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            assert!(Instant::now() < deadline, "{what}: not within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Every table line's cells.
fn cells(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|line| line.starts_with('│'))
        .map(|line| {
            line.trim_matches(|c| c == '│' || c == ' ')
                .split('┆')
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The cells of the table row of `node` and namespace `test`.
fn row(table: &str, node: &str) -> Vec<String> {
    cells(table)
        .into_iter()
        .find(|cells| cells.len() > 2 && cells[0] == node && cells[1] == "test")
        .unwrap_or_else(|| panic!("no row for {node} in\n{table}"))
}

/// The recluster answers by node.
fn answers(table: &str) -> Vec<String> {
    cells(table)
        .into_iter()
        .filter(|cells| cells.len() == 2 && cells[0] != "Node")
        .map(|cells| cells[1].clone())
        .collect()
}

#[test]
fn roster_show_set_and_recluster_on_three_nodes() {
    let mut cluster = Cluster::start();

    // No roster: nothing served, and the tool says what to do.
    let output = cluster.bolide(1, &["roster", "show"]);
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}{err}");
    for node in ["A1", "A2", "A3"] {
        let cells = row(&out, node);
        assert_eq!(cells[2..5], ["null", "null", "A3,A2,A1"], "{out}");
        assert_eq!(cells[6], "4096", "{out}");
        assert_eq!(cells[7], "0", "{out}");
    }
    assert!(
        cells(&out)
            .iter()
            .all(|cells| cells.get(1).map(String::as_str) != Some("bar")),
        "an AP namespace has no roster: {out}"
    );
    assert!(out.contains("test: no roster in force"), "{out}");

    // A bad list is refused with the node's error; an AP namespace too.
    let output = cluster.bolide(0, &["roster", "set", "A1,zz"]);
    let (out, err) = texts(&output);
    assert!(!output.status.success(), "{out}");
    assert!(err.contains("ERROR:4"), "{err}");
    let output = cluster.bolide(0, &["roster", "set", "-n", "bar"]);
    assert!(!output.status.success());
    assert!(texts(&output)
        .1
        .contains("not a strong-consistency namespace"));
    assert!(cluster.roster(0).contains("pending_roster=null"));

    // Stage the observed nodes: pending everywhere, in force nowhere.
    let output = cluster.bolide(2, &["roster", "set"]);
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}{err}");
    assert!(out.contains("Staged the roster of test"), "{out}");
    for i in 0..3 {
        assert_eq!(
            cluster.roster(i),
            "roster=null:pending_roster=A3,A2,A1:observed_nodes=A3,A2,A1"
        );
    }
    let (out, _) = texts(&cluster.bolide(0, &["roster", "show", "-n", "test"]));
    assert!(out.contains("test: no roster in force"), "{out}");

    // Recluster: the principal takes it, the others ignore it, and the
    // roster is in force with every partition available.
    let output = cluster.bolide(0, &["roster", "recluster"]);
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}{err}");
    let mut got = answers(&out);
    got.sort();
    assert_eq!(
        got,
        ["ignored-by-non-principal", "ignored-by-non-principal", "ok"],
        "{out}"
    );
    for node in ["A1", "A2", "A3"] {
        let cells = row(&out, node);
        assert_eq!(cells[2..5], ["A3,A2,A1", "A3,A2,A1", "A3,A2,A1"], "{out}");
        assert_eq!(cells[5..8], ["3", "0", "0"], "{out}");
    }
    assert!(!out.contains("no roster in force"), "{out}");

    // A3 lost: the show says the roster misses it; a roster of the given
    // nodes is staged and put in force.
    cluster.kill(2);
    // The exchange sets cluster_size; the rebalance after it sets the
    // namespace's view (ns_cluster_size) and the peers list the tool reads.
    cluster.wait(
        |c| {
            (0..2).all(|i| {
                c.stat(i, "statistics", "cluster_size") == "2"
                    && c.stat(i, "namespace/test", "ns_cluster_size") == "2"
                    && c.info(i, "peers-clear-std").matches(",,[").count() == 1
            })
        },
        "A1 and A2 alone",
    );
    let (out, _) = texts(&cluster.bolide(0, &["roster", "show"]));
    assert!(out.contains("roster nodes not observed by A1: A3"), "{out}");
    assert_eq!(row(&out, "A1")[5..7], ["2", "0"], "{out}");
    let output = cluster.bolide(0, &["roster", "set", "-n", "test", "A1,A2"]);
    assert!(output.status.success(), "{:?}", texts(&output));
    let output = cluster.bolide(1, &["roster", "recluster"]);
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}{err}");
    for node in ["A1", "A2"] {
        let cells = row(&out, node);
        assert_eq!(cells[2..5], ["A2,A1", "A2,A1", "A2,A1"], "{out}");
        assert_eq!(cells[5..8], ["2", "0", "0"], "{out}");
    }
    assert!(!out.contains("not observed"), "{out}");
}
