//! The node's side of the cluster: the thread that runs the cluster state
//! machine over heartbeat connections, the fabric that carries replica
//! writes, proxies, duplicate resolution and migrations between nodes, and
//! the routing snapshot every request reads.
//!
//! ```text
//!  cluster thread     heartbeat listener + dialers, ClusterNode (sans-I/O),
//!                     publishes Routing and Status
//!  event loops        client connections and fabric request connections;
//!                     each request's remote work (bolide_cluster::datapath::
//!                     Work: proxy, resolve, replicate) driven by a task
//!  fabric thread      the same remote work for batch rows (blocking callers)
//!  migrate thread     the Emigrator and Immigrator machines over the bulk
//!                     (migration) connections, at background priority
//! ```
//!
//! The data path's logic is the cluster crate's state machines; the code
//! here only carries out what they ask (fabric sends, store calls, answers,
//! timers) and feeds them replies, ticks and the routing in force.

pub mod fabric;
pub mod heartbeat;
pub mod info;
pub mod migrate;
pub mod records;
pub mod remote;
pub mod sc;
pub mod security;

use crate::config::Config;
use arc_swap::ArcSwap;
use bolide_cluster::datapath::Counter;
use bolide_cluster::message::Endpoint;
use bolide_cluster::metadata::Item;
use bolide_cluster::node::{DataEvent, NamespaceConfig, Status};
use bolide_cluster::routing::{ConflictPolicy, Gates};
use bolide_cluster::{NodeId, Routing};
use bolide_store::Store;
use bolide_transaction::{RemoteRunner, Services};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// What the other parts of the node tell the cluster thread.
#[derive(Debug)]
pub enum Event {
    Data(DataEvent),
    /// Set a cluster-wide metadata item (a truncation, an index
    /// definition, a UDF module), or mark it deleted.
    Metadata {
        module: String,
        key: String,
        value: String,
        deleted: bool,
        /// Told once every member has applied the item (or left, or
        /// did not answer in time).
        answer: Option<std::sync::mpsc::Sender<()>>,
    },
    /// Ask the principal to recompute the cluster now (`recluster:`).
    Recluster,
    /// This node's `rack-id` for a namespace changed (`set-config`): sent
    /// at the next exchange.
    RackId {
        namespace: usize,
        rack: u32,
    },
    /// `revive:` of one SC namespace (None: all): the partitions dead here
    /// are flagged revived; answers how many.
    Revive {
        namespace: Option<usize>,
        answer: std::sync::mpsc::Sender<u64>,
    },
    /// A clean shutdown: serve nothing from now on and answer each SC
    /// namespace's state to save once the storage is flushed.
    Shutdown {
        answer: std::sync::mpsc::Sender<Vec<(usize, sc::Saved)>>,
    },
}

/// Fabric and cluster counters (relaxed atomics: statistics).
#[derive(Default)]
pub struct Counters {
    pub client_proxy_complete: AtomicU64,
    pub client_proxy_error: AtomicU64,
    pub client_proxy_timeout: AtomicU64,
    pub from_proxy_complete: AtomicU64,
    pub from_proxy_redirect: AtomicU64,
    pub proxy_in_progress: AtomicU64,
    pub replica_writes_sent: AtomicU64,
    pub replica_writes_received: AtomicU64,
    pub replica_writes_refused: AtomicU64,
    pub replica_write_timeouts: AtomicU64,
    pub dup_res_fetches: AtomicU64,
    pub migrate_records_transmitted: AtomicU64,
    pub migrate_records_received: AtomicU64,
    pub migrate_records_applied: AtomicU64,
    pub migrate_partitions_sent: AtomicU64,
    pub migrate_partitions_received: AtomicU64,
    pub migrate_records_skipped: AtomicU64,
    pub fabric_connections_opened: AtomicU64,
    pub fabric_connections_closed: AtomicU64,
    pub fabric_bad_frames: AtomicU64,
    pub heartbeat_connections_opened: AtomicU64,
    pub heartbeat_connections_closed: AtomicU64,
    pub heartbeat_bad_frames: AtomicU64,
    /// TLS handshakes between nodes that failed (a peer without a
    /// certificate from this cluster's CA, or with another name; either
    /// side), accepted or dialled.
    pub fabric_tls_handshake_failures: AtomicU64,
    pub heartbeat_tls_handshake_failures: AtomicU64,
    pub tombstones_raided: AtomicU64,
    /// Bytes of unfinished heartbeat frames held above each connection's
    /// first [`heartbeat::CONNECTION_FREE_BYTES`] (a gauge, bounded by
    /// [`heartbeat::BUFFERED_BYTES_MAX`]).
    pub heartbeat_buffered_bytes: AtomicU64,
}

impl Counters {
    /// Counts what a data-path machine reports.
    pub fn count(&self, counter: Counter, n: u64) {
        let statistic = match counter {
            Counter::ClientProxyComplete => &self.client_proxy_complete,
            Counter::ClientProxyError => &self.client_proxy_error,
            Counter::ClientProxyTimeout => &self.client_proxy_timeout,
            Counter::ProxyBegun => &self.proxy_in_progress,
            Counter::ProxyEnded => {
                self.proxy_in_progress.fetch_sub(n, Relaxed);
                return;
            }
            Counter::FromProxyComplete => &self.from_proxy_complete,
            Counter::FromProxyRedirect => &self.from_proxy_redirect,
            Counter::ReplicaWritesSent => &self.replica_writes_sent,
            Counter::ReplicaWritesReceived => &self.replica_writes_received,
            Counter::ReplicaWritesRefused => &self.replica_writes_refused,
            Counter::ReplicaWriteTimeouts => &self.replica_write_timeouts,
            Counter::DupResFetches => &self.dup_res_fetches,
            Counter::MigrateRecordsTransmitted => &self.migrate_records_transmitted,
            Counter::MigrateRecordsReceived => &self.migrate_records_received,
            Counter::MigrateRecordsApplied => &self.migrate_records_applied,
            Counter::MigrateRecordsSkipped => &self.migrate_records_skipped,
            Counter::MigratePartitionsSent => &self.migrate_partitions_sent,
            Counter::MigratePartitionsReceived => &self.migrate_partitions_received,
        };
        statistic.fetch_add(n, Relaxed);
    }
}

/// What the node's work between nodes needs: the store, the services
/// above it (indexes, UDF modules, jobs) and the cluster service. The
/// cluster thread, the fabric, remote work and migrations share it; the
/// rest of the node gets narrower parts of it.
pub struct Context {
    pub store: Arc<Store>,
    pub services: Arc<Services>,
    pub cluster: ClusterService,
    /// A secured node's users and roles (metadata module `security`).
    pub security: std::sync::OnceLock<Arc<bolide_security::Security>>,
    /// The Redis port's scripts and function libraries (metadata modules
    /// `redis-script` and `redis-function`).
    pub redis_scripts: std::sync::OnceLock<Arc<bolide_redis::scripting::Scripts>>,
}

impl Context {
    pub fn new(
        config: &Config,
        node_id: NodeId,
        store: Arc<Store>,
        services: Arc<Services>,
    ) -> Arc<Context> {
        let cluster = ClusterService::new(config, node_id, &store);
        Arc::new(Context {
            store,
            services,
            cluster,
            security: std::sync::OnceLock::new(),
            redis_scripts: std::sync::OnceLock::new(),
        })
    }

    /// Carries out batch rows' and background jobs' remote work from
    /// blocking threads, on the fabric thread.
    pub fn runner(&self) -> Arc<dyn RemoteRunner> {
        Arc::new(remote::BlockingRunner {
            jobs: self.cluster.blocking.clone(),
        })
    }

    /// Serves every partition of every namespace here, with no cluster
    /// thread (a node embedded in tests and fuzz targets).
    pub fn serve_alone(&self) {
        self.cluster.serve_alone(&self.store);
    }
}

/// The cluster as the rest of the node sees it.
pub struct ClusterService {
    pub node_id: NodeId,
    pub cluster_name: String,
    /// The routing every request reads (lock-free). Shared: connections
    /// keep a handle of their own.
    pub routing: Arc<ArcSwap<Routing>>,
    /// The state machine's figures, refreshed after each of its steps.
    pub status: Mutex<Status>,
    pub gates: Arc<Gates>,
    pub counters: Counters,
    /// Per namespace: how conflicting copies are resolved.
    pub policies: Vec<ConflictPolicy>,
    pub transaction_max_ms: u64,
    /// The namespaces as the cluster state machine sees them.
    pub namespaces: Vec<NamespaceConfig>,
    /// Per namespace, this node's `rack-id` as configured now (the config
    /// file's, or the last `set-config`'s).
    pub rack_ids: Vec<AtomicU32>,
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout: u64,
    pub min_cluster_size: usize,
    pub migrate_threads: usize,
    pub migrate_max_num_incoming: usize,
    /// This node's fabric and heartbeat endpoints, as advertised.
    pub fabric: Endpoint,
    pub heartbeat: Endpoint,
    pub fabric_bind: SocketAddr,
    pub heartbeat_bind: SocketAddr,
    /// Mutual TLS on fabric (and migration) and heartbeat connections,
    /// when configured (`tls-port`, `tls-name`); set once at start,
    /// before any connection is made.
    pub fabric_tls: std::sync::OnceLock<crate::net::tls::NodeTls>,
    pub heartbeat_tls: std::sync::OnceLock<crate::net::tls::NodeTls>,
    /// Client addresses advertised to peers.
    pub service: Vec<Endpoint>,
    /// The TLS client listener's name and addresses, shared with the other
    /// nodes for their `peers-tls-std`.
    pub service_tls: Option<(String, Vec<Endpoint>)>,
    /// Where this node serves the Redis protocol, advertised to peers.
    pub redis: Vec<Endpoint>,
    /// Where it serves the Redis protocol over TLS (empty: nowhere),
    /// shared with the other nodes as cluster metadata (module
    /// [`info::REDIS_TLS_MODULE`]) so that the Redis Cluster answers a TLS
    /// client gets name TLS ports.
    pub redis_tls: Vec<Endpoint>,
    pub seeds: Vec<Endpoint>,
    events: mpsc::UnboundedSender<Event>,
    events_receiver: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    pub(crate) migrations: mpsc::UnboundedSender<migrate::Command>,
    migrations_receiver: Mutex<Option<mpsc::UnboundedReceiver<migrate::Command>>>,
    pub(crate) blocking: mpsc::UnboundedSender<remote::BlockingJob>,
    blocking_receiver: Mutex<Option<mpsc::UnboundedReceiver<remote::BlockingJob>>>,
    /// Cluster-wide metadata as last applied (for `get-config` and tests).
    pub metadata: Mutex<Vec<Item>>,
    /// Where strong-consistency state is kept (else beside the storage
    /// files; see `sc.rs`).
    pub work_directory: Option<std::path::PathBuf>,
    /// Test knob (`test-clock-offset-ms`): added to the wall clock this
    /// node puts in its heartbeats.
    pub clock_offset_ms: i64,
}

impl ClusterService {
    pub fn new(config: &Config, node_id: NodeId, store: &Store) -> ClusterService {
        let (events, events_receiver) = mpsc::unbounded_channel();
        let (migrations, migrations_receiver) = mpsc::unbounded_channel();
        let (blocking, blocking_receiver) = mpsc::unbounded_channel();
        let namespaces: Vec<(String, usize, ConflictPolicy)> = namespace_configs(config)
            .into_iter()
            .map(|ns| (ns.name, ns.replication_factor, ns.conflict_policy))
            .collect();
        let fabric_ip = config.fabric_address.unwrap_or(config.service_address);
        let heartbeat_ip = config.heartbeat_address.unwrap_or(config.service_address);
        let advertised = |ip: IpAddr| -> String {
            if ip.is_unspecified() {
                config
                    .access_address
                    .clone()
                    .unwrap_or_else(|| "127.0.0.1".to_owned())
            } else {
                ip.to_string()
            }
        };
        let service_host = advertised(config.service_address);
        let service_host = config.access_address.clone().unwrap_or(service_host);
        ClusterService {
            node_id,
            cluster_name: config.cluster_name.clone(),
            routing: Arc::new(ArcSwap::from_pointee(Routing::unformed(
                node_id,
                &namespaces,
            ))),
            status: Mutex::new(Status::default()),
            gates: Arc::new(Gates::new(store.namespaces().len())),
            counters: Counters::default(),
            policies: namespaces.iter().map(|(_, _, policy)| *policy).collect(),
            transaction_max_ms: config.transaction_max_ms,
            namespaces: namespace_configs(config),
            rack_ids: config
                .namespaces
                .iter()
                .map(|ns| AtomicU32::new(ns.rack_id))
                .collect(),
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            heartbeat_timeout: config.heartbeat_timeout,
            min_cluster_size: config.min_cluster_size,
            migrate_threads: config.migrate_threads,
            migrate_max_num_incoming: config.migrate_max_num_incoming,
            fabric: Endpoint {
                host: advertised(fabric_ip),
                port: config.fabric_port,
            },
            heartbeat: Endpoint {
                host: advertised(heartbeat_ip),
                port: config.heartbeat_port,
            },
            fabric_bind: SocketAddr::new(fabric_ip, config.fabric_port),
            heartbeat_bind: SocketAddr::new(heartbeat_ip, config.heartbeat_port),
            fabric_tls: std::sync::OnceLock::new(),
            heartbeat_tls: std::sync::OnceLock::new(),
            service_tls: config.service_tls.as_ref().map(|tls| {
                let host = tls
                    .access_address
                    .clone()
                    .unwrap_or_else(|| match tls.address {
                        Some(address) if !address.is_unspecified() => address.to_string(),
                        _ => service_host.clone(),
                    });
                (
                    tls.name.clone(),
                    vec![Endpoint {
                        host,
                        port: tls.access_port.unwrap_or(tls.port),
                    }],
                )
            }),
            service: vec![Endpoint {
                host: service_host,
                port: config.service_port,
            }],
            redis: config
                .redis_port
                .map(|port| Endpoint {
                    host: config
                        .access_address
                        .clone()
                        .unwrap_or_else(|| advertised(config.redis_address)),
                    port,
                })
                .into_iter()
                .collect(),
            redis_tls: config
                .redis_tls
                .as_ref()
                .map(|tls| Endpoint {
                    host: tls.access_address.clone().unwrap_or_else(|| {
                        config.access_address.clone().unwrap_or_else(|| {
                            advertised(tls.address.unwrap_or(config.redis_address))
                        })
                    }),
                    port: tls.access_port.unwrap_or(tls.port),
                })
                .into_iter()
                .collect(),
            seeds: config
                .mesh_seeds
                .iter()
                .map(|(host, port)| Endpoint {
                    host: host.clone(),
                    port: *port,
                })
                .collect(),
            events,
            events_receiver: Mutex::new(Some(events_receiver)),
            migrations,
            migrations_receiver: Mutex::new(Some(migrations_receiver)),
            blocking,
            blocking_receiver: Mutex::new(Some(blocking_receiver)),
            metadata: Mutex::new(Vec::new()),
            work_directory: config.work_directory.clone(),
            clock_offset_ms: config.test_clock_offset_ms,
        }
    }

    /// Serves every partition of every namespace here, with no cluster
    /// thread (a node embedded in tests and fuzz targets; `run` starts the
    /// cluster instead).
    pub fn serve_alone(&self, store: &Store) {
        let namespaces: Vec<(String, usize, ConflictPolicy)> = store
            .namespaces()
            .iter()
            .zip(&self.policies)
            .map(|(ns, policy)| {
                (
                    ns.name().to_owned(),
                    ns.config.replication_factor as usize,
                    *policy,
                )
            })
            .collect();
        self.routing
            .store(Arc::new(Routing::standalone(self.node_id, &namespaces)));
    }

    /// Tells the cluster thread something.
    pub fn send(&self, event: Event) {
        let _ = self.events.send(event);
    }

    /// Spreads a metadata item to every member (and later joiners).
    pub fn share(&self, module: &str, key: &str, value: &str, deleted: bool) {
        self.send(Event::Metadata {
            module: module.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            deleted,
            answer: None,
        });
    }

    /// [`ClusterService::share`] for each item, waiting until every member
    /// has applied them all (at most about
    /// [`bolide_cluster::node::SHARE_WAIT_MS`]): a change made through one
    /// node is in force on every node when its command answers (clients
    /// send admin commands to any node, one after the other). Blocks: not
    /// on an event loop.
    pub fn share_and_wait<'a>(
        &self,
        module: &str,
        items: impl IntoIterator<Item = (&'a str, &'a str, bool)>,
    ) {
        let mut answers = Vec::new();
        for (key, value, deleted) in items {
            let (answer, done) = std::sync::mpsc::channel();
            self.send(Event::Metadata {
                module: module.to_owned(),
                key: key.to_owned(),
                value: value.to_owned(),
                deleted,
                answer: Some(answer),
            });
            answers.push(done);
        }
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(bolide_cluster::node::SHARE_WAIT_MS + 500);
        for done in answers {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let _ = done.recv_timeout(left);
        }
    }

    /// A copy of the state machine's figures.
    pub fn status(&self) -> Status {
        self.status
            .lock()
            .map(|status| status.clone())
            .unwrap_or_default()
    }

    /// Whether `node` is another member of this node's cluster: of the
    /// committed cluster, or of the partition map in force (the two differ
    /// for a moment at each change). Only members may open fabric
    /// connections here.
    pub fn is_member(&self, node: NodeId) -> bool {
        if node == self.node_id || node == 0 {
            return false;
        }
        if self.routing.load().member_index(node).is_some() {
            return true;
        }
        self.status
            .lock()
            .is_ok_and(|status| status.succession.contains(&node))
    }

    /// The fabric endpoint of `node`: from the map in force, else from the
    /// cluster's peer list.
    pub fn fabric_endpoint(&self, node: NodeId) -> Option<Endpoint> {
        let routing = self.routing.load();
        if let Some(index) = routing.member_index(node) {
            if let Some(endpoint) = routing.fabric.get(usize::from(index)) {
                return Some(endpoint.clone());
            }
        }
        let status = self.status.lock().ok()?;
        status
            .peers
            .iter()
            .find(|peer| peer.node == node)
            .map(|peer| peer.fabric.clone())
    }

    /// This node's configured `rack-id` for namespace `index`.
    pub fn rack_id(&self, namespace: usize) -> u32 {
        self.rack_ids
            .get(namespace)
            .map_or(0, |rack| rack.load(Relaxed))
    }

    /// Sets this node's `rack-id` for namespace `index`; the cluster
    /// places by it from the next rebalance (`recluster:`).
    pub fn set_rack_id(&self, namespace: usize, rack: u32) {
        if let Some(held) = self.rack_ids.get(namespace) {
            held.store(rack, Relaxed);
            self.send(Event::RackId { namespace, rack });
        }
    }

    pub fn policy(&self, namespace: usize) -> ConflictPolicy {
        self.policies.get(namespace).copied().unwrap_or_default()
    }

    pub(crate) fn take_events(&self) -> Option<mpsc::UnboundedReceiver<Event>> {
        self.events_receiver.lock().ok()?.take()
    }

    pub(crate) fn take_migrations(&self) -> Option<mpsc::UnboundedReceiver<migrate::Command>> {
        self.migrations_receiver.lock().ok()?.take()
    }

    pub(crate) fn take_blocking(&self) -> Option<mpsc::UnboundedReceiver<remote::BlockingJob>> {
        self.blocking_receiver.lock().ok()?.take()
    }
}

/// The namespaces as the cluster state machine sees them.
pub fn namespace_configs(config: &Config) -> Vec<NamespaceConfig> {
    config
        .namespaces
        .iter()
        .map(|ns| NamespaceConfig {
            name: ns.name.clone(),
            replication_factor: ns.replication_factor as usize,
            conflict_policy: if ns.conflict_resolution_last_update_time {
                ConflictPolicy::LastUpdateTime
            } else {
                ConflictPolicy::Generation
            },
            strong_consistency: ns.strong_consistency,
            roster: Default::default(),
            regime: 0,
            rack_id: ns.rack_id,
            witnesses: Vec::new(),
            nsup: ns.nsup_period_seconds > 0,
        })
        .collect()
}

/// Milliseconds on a monotonic clock, for the state machine.
pub fn monotonic_ms() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    start.elapsed().as_millis() as u64
}

/// Wall-clock milliseconds since 1970 (clock skew estimates, metadata).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Warnings about failed TLS handshakes between nodes: at most one a
/// second.
static HANDSHAKES_LOGGED: LogLimiter = LogLimiter::new();

/// Counts and logs a TLS handshake with another node that failed:
/// `accepted` from `peer`, or dialled to it. The line says why (rustls's
/// reason: an unknown issuer, a bad certificate, a name that does not
/// fit).
pub(crate) fn handshake_failed(
    counter: &AtomicU64,
    channel: &str,
    accepted: bool,
    peer: &str,
    error: &std::io::Error,
) {
    bump(counter);
    if let Some(held) = HANDSHAKES_LOGGED.allow() {
        let (direction, side) = if accepted {
            ("from", "refused")
        } else {
            ("to", "failed")
        };
        tracing::warn!(
            target: "cluster",
            "{channel}: TLS handshake {direction} {peer} {side}: {error} (a node needs a \
             certificate from this cluster's CA with the cluster's tls-name; {held} more not \
             logged since the last line)"
        );
    }
}

/// Whether a failed connection attempt got as far as a TLS handshake
/// that went wrong (a certificate refused either way), rather than no
/// answer at all.
pub(crate) fn is_handshake_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
    ) || error
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
}

/// Logs a kind of event at most once a second, counting the events it
/// stays quiet about (a flood of hostile connections must not flood the
/// log).
pub struct LogLimiter {
    last_ms: AtomicU64,
    held: AtomicU64,
}

impl LogLimiter {
    pub const fn new() -> LogLimiter {
        LogLimiter {
            last_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(events not logged since the last line)` when a line may be
    /// logged now; otherwise counts this event as held back.
    pub fn allow(&self) -> Option<u64> {
        let now = monotonic_ms() + 1000;
        let last = self.last_ms.load(Relaxed);
        if now >= last + 1000
            && self
                .last_ms
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            return Some(self.held.swap(0, Relaxed));
        }
        self.held.fetch_add(1, Relaxed);
        None
    }
}

impl Default for LogLimiter {
    fn default() -> LogLimiter {
        LogLimiter::new()
    }
}

/// Counts an increment of a relaxed counter.
#[inline]
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}
