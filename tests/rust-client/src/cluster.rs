//! Several `bolided` processes forming one cluster on 127.0.0.1, for the
//! multi-node tests: the same configuration as `tests/python/cluster.py`
//! (node ids `A1`, `A2`, ..., a mesh heartbeat where every node is told of
//! the first node's heartbeat port, an in-memory namespace `test` with
//! replication factor 2). Each node has its own service, fabric, heartbeat
//! and info ports and its own directory; every process is killed by its own
//! PID when the [`BolideCluster`] is dropped.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{server_binary, unique_suffix, NAMESPACE};

/// Cluster name configured on every node of a [`BolideCluster`].
pub const MULTI_NODE_CLUSTER_NAME: &str = "bolide-multi-node-test";

/// One node of a [`BolideCluster`].
pub struct ClusterNode {
    pub node_id: String,
    pub port: u16,
    pub fabric_port: u16,
    pub heartbeat_port: u16,
    pub info_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl ClusterNode {
    fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(self.dir.join("bolided.log")) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

/// A running cluster of `bolided` processes.
pub struct BolideCluster {
    pub nodes: Vec<ClusterNode>,
    root: PathBuf,
}

/// `n` distinct free loopback ports (never 3000–3003), all held open until
/// every one is picked so none repeats.
fn free_ports(n: usize) -> Vec<u16> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < n {
        let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .expect("bind 127.0.0.1:0 to pick a free port");
        let port = l.local_addr().expect("local_addr").port();
        if !(3000..=3003).contains(&port) && !ports.contains(&port) {
            ports.push(port);
        }
        held.push(l);
    }
    ports
}

fn config_text(node: &ClusterNode, seed_heartbeat: Option<u16>, replication_factor: u32) -> String {
    let seed = seed_heartbeat
        .map(|p| format!("        mesh-seed-address-port 127.0.0.1 {p}\n"))
        .unwrap_or_default();
    format!(
        "service {{
    cluster-name {MULTI_NODE_CLUSTER_NAME}
    node-id {id}
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
    heartbeat {{
        mode mesh
        address 127.0.0.1
        port {hb}
{seed}        interval 150
        timeout 10
    }}
    fabric {{
        address 127.0.0.1
        port {fabric}
    }}
    info {{
        port {info}
    }}
}}
namespace {NAMESPACE} {{
    replication-factor {replication_factor}
    default-ttl 0
    nsup-period 1
    storage-engine memory {{
        data-size 256M
    }}
}}
",
        id = node.node_id,
        port = node.port,
        hb = node.heartbeat_port,
        fabric = node.fabric_port,
        info = node.info_port,
    )
}

/// One info command over a fresh connection (protocol version 2, type 1).
pub fn info_request(port: u16, command: &str, timeout: Duration) -> std::io::Result<String> {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into();
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let body = format!("{command}\n");
    let header = (2u64 << 56) | (1u64 << 48) | body.len() as u64;
    stream.write_all(&header.to_be_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut head = [0u8; 8];
    stream.read_exact(&mut head)?;
    let len = (u64::from_be_bytes(head) & ((1 << 48) - 1)) as usize;
    let mut answer = vec![0u8; len];
    stream.read_exact(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    // "<command>\t<value>\n"
    let value = text
        .strip_prefix(command)
        .and_then(|rest| rest.strip_prefix('\t'))
        .unwrap_or(&text);
    Ok(value.trim_end_matches('\n').to_string())
}

/// `k=v;k=v` into pairs.
pub fn parse_kv(text: &str) -> std::collections::HashMap<String, String> {
    text.trim()
        .trim_end_matches(';')
        .split(';')
        .filter_map(|part| part.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl BolideCluster {
    /// Start `size` nodes with replication factor `replication_factor` and
    /// wait (≤ 60 s) until they form one cluster with no migration left.
    pub fn start(size: usize, replication_factor: u32) -> BolideCluster {
        let bin = server_binary();
        let root = std::env::temp_dir().join(format!("bolide-multi-node-{}", unique_suffix()));
        fs::create_dir_all(&root).expect("create the cluster's directory");
        let mut cluster = BolideCluster {
            nodes: Vec::new(),
            root,
        };
        let ports = free_ports(4 * size);
        for i in 0..size {
            let dir = cluster.root.join(format!("node{}", i + 1));
            fs::create_dir_all(&dir).expect("create a node's directory");
            cluster.nodes.push(ClusterNode {
                node_id: format!("A{}", i + 1),
                port: ports[4 * i],
                fabric_port: ports[4 * i + 1],
                heartbeat_port: ports[4 * i + 2],
                info_port: ports[4 * i + 3],
                dir,
                child: None,
            });
        }
        let seed = cluster.nodes[0].heartbeat_port;
        for i in 0..size {
            let node = &cluster.nodes[i];
            let conf = node.dir.join("bolide.conf");
            let seed = if i == 0 { None } else { Some(seed) };
            fs::write(&conf, config_text(node, seed, replication_factor)).expect("write config");
            let log = fs::File::create(node.dir.join("bolided.log")).expect("create log");
            let log2 = log.try_clone().expect("clone log");
            let child = Command::new(&bin)
                .arg("--config")
                .arg(&conf)
                .current_dir(&node.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log2))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            cluster.nodes[i].child = Some(child);
        }
        cluster.wait_stable(Duration::from_secs(60));
        cluster
    }

    /// Until every node answers `cluster-stable:size=N` with one same key.
    pub fn wait_stable(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let command = format!("cluster-stable:size={}", self.nodes.len());
        let mut last = Vec::new();
        while Instant::now() < deadline {
            for node in &mut self.nodes {
                if let Some(Ok(Some(status))) = node.child.as_mut().map(|c| c.try_wait()) {
                    panic!(
                        "node {} exited with {status}:\n{}",
                        node.node_id,
                        node.log()
                    );
                }
            }
            last = self
                .nodes
                .iter()
                .map(|n| {
                    info_request(n.port, &command, Duration::from_secs(2))
                        .unwrap_or_else(|e| format!("error: {e}"))
                })
                .collect();
            let first = &last[0];
            if !first.starts_with("ERROR")
                && !first.starts_with("error")
                && last.iter().all(|a| a == first)
            {
                return first.clone();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "the cluster was not stable within {timeout:?}: {last:?}\n{}",
            self.logs()
        );
    }

    /// The service address of node `index`, as a client seed.
    pub fn seed(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[index].port)
    }

    /// `statistics` or `namespace/<ns>` of node `index`, parsed.
    pub fn stats(&self, index: usize, command: &str) -> std::collections::HashMap<String, String> {
        let answer = info_request(self.nodes[index].port, command, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("info {command} on node {index}: {e}"));
        parse_kv(&answer)
    }

    /// The tail of every node's log.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let log = node.log();
            let lines: Vec<&str> = log.lines().collect();
            let start = lines.len().saturating_sub(40);
            out.push_str(&format!(
                "--- {} (port {}) ---\n{}\n",
                node.node_id,
                node.port,
                lines[start..].join("\n")
            ));
        }
        out
    }
}

impl Drop for BolideCluster {
    fn drop(&mut self) {
        // Kill exactly the processes we spawned, by PID.
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!("---- bolided logs ----\n{}", self.logs());
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}
