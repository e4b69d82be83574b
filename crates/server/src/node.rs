//! The node: configuration, store, identity and node-wide counters, shared
//! by every event loop.

use crate::budget::Budget;
use crate::cluster::remote::BlockingRunner;
use crate::cluster::ClusterService;
use crate::config::Config;
use crate::latency::Latencies;
use bolide_store::Store;
use bolide_transaction::RemoteRunner;
use bolide_transaction::Services;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// The protocol version the node reports in `build`. Clients switch
/// features on it; 8.1 selects the current batch, scan and info syntaxes.
pub const PROTOCOL_BUILD: &str = "8.1.0.0";

pub struct Node {
    pub config: Config,
    pub store: Store,
    /// Secondary indexes and UDF modules (also attached to the store).
    pub services: Arc<Services>,
    pub node_id: u64,
    pub cluster: ClusterService,
    /// Carries out batch rows' work on other nodes (from blocking threads).
    pub runner: Arc<dyn RemoteRunner>,
    pub started: Instant,
    pub connections_opened: AtomicU64,
    pub connections_closed: AtomicU64,
    pub connections_refused: AtomicU64,
    pub info_requests: AtomicU64,
    pub admin_requests: AtomicU64,
    pub bad_frames: AtomicU64,
    /// Connection buffers beyond each connection's allowance.
    pub budget: Budget,
    /// Latency histograms (`latencies:`, `/metrics`, the console).
    pub latencies: Latencies,
}

impl Node {
    /// Builds the node; persistent namespaces are read back from storage
    /// here (the cold start).
    pub fn new(config: Config) -> Result<Node, String> {
        let node_id = config
            .node_id
            .unwrap_or_else(|| default_node_id(config.service_port));
        let store = Store::open(config.namespaces.clone())?;
        let cluster = ClusterService::new(&config, node_id, &store);
        let runner: Arc<dyn RemoteRunner> = Arc::new(BlockingRunner {
            jobs: cluster.blocking.clone(),
        });
        let budget = Budget::new(
            config
                .proto_buffer_budget_bytes
                .unwrap_or_else(Budget::default_limit_bytes),
        );
        let latencies = Latencies::new(
            store.namespaces().iter().map(|ns| ns.name()),
            config.service_threads,
        );
        // Index population is background work, like defragmentation.
        let services = Services::open(
            &store,
            config.work_directory.as_deref(),
            Arc::new(|| crate::connection::set_thread_nice(crate::connection::BACKGROUND_NICE)),
        )?;
        Ok(Node {
            config,
            store,
            services,
            node_id,
            cluster,
            runner,
            started: Instant::now(),
            connections_opened: AtomicU64::new(0),
            connections_closed: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            info_requests: AtomicU64::new(0),
            admin_requests: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            budget,
            latencies,
        })
    }

    /// Node name as clients see it: upper-case hex without leading zeros.
    pub fn name(&self) -> String {
        format!("{:X}", self.node_id)
    }

    pub fn open_connections(&self) -> u64 {
        self.connections_opened
            .load(Relaxed)
            .saturating_sub(self.connections_closed.load(Relaxed))
    }
}

/// A node id from the host name and port, like the real server's MAC+port:
/// stable across restarts, distinct for nodes on one host. Kept below 2^60
/// so the name has at most 15 hex digits.
fn default_node_id(port: u16) -> u64 {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in host.trim().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    ((hash & 0x0000_0fff_ffff_ffff) << 16 | u64::from(port)) & 0x0fff_ffff_ffff_ffff
        | 0x0100_0000_0000_0000
}

/// Resident set size of this process in bytes (Linux).
pub fn process_rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// (total, available) system memory in bytes (Linux).
pub fn system_memory_bytes() -> (u64, u64) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        meminfo
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("MemTotal:"), field("MemAvailable:"))
}
