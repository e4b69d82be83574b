//! The simulated world: nodes, network, clients, faults and checks.

use bolide_cluster::codec;
use bolide_cluster::conflict::{self, Stamp};
use bolide_cluster::node::{
    empty_versions, Action, ClusterNode, Config, DataEvent, Entropy, NamespaceConfig,
};
use bolide_cluster::partitions::{Emigration, EmigrationKind};
use bolide_cluster::routing::{ConflictPolicy, Routing, BITMAP_BYTES};
use bolide_cluster::{Endpoint, Envelope, NodeId, Version};
use bolide_types::PARTITION_COUNT;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt;
use std::sync::Arc;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// Faults injected one after another, each healed before the next.
    pub faults: usize,
    /// Print the trace as it goes.
    pub verbose: bool,
}

/// A run that passed every check.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    pub events: u64,
    pub virtual_ms: u64,
    pub acknowledged_writes: u64,
    pub timed_out_writes: u64,
    pub reads: u64,
    pub migrations: u64,
    pub faults: Vec<String>,
    /// Longest time from a node's death to a settled map without it.
    pub failover_ms_max: u64,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: ok after {} events, {:.1} s simulated; {} writes acknowledged, {} timed out, {} reads, {} migrations; longest failover {} ms; faults: {}",
            self.seed,
            self.events,
            self.virtual_ms as f64 / 1000.0,
            self.acknowledged_writes,
            self.timed_out_writes,
            self.reads,
            self.migrations,
            self.failover_ms_max,
            self.faults.join(", ")
        )
    }
}

/// A check that failed, with the end of the trace.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    pub at_ms: u64,
    pub message: String,
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} FAILED at {} ms: {}",
            self.seed, self.at_ms, self.message
        )?;
        writeln!(f, "--- last {} trace lines ---", self.trace.len())?;
        for line in &self.trace {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

const TICK_MS: u64 = 10;
const OP_DEADLINE_MS: u64 = 1000;
const WRITE_RETRY_MS: u64 = 100;
const MIGRATION_RETRY_MS: u64 = 250;
const CHUNK_RECORDS: usize = 16;
const KEY_SPACE: u32 = 600;
const OP_INTERVAL_MS: u64 = 4;
const CONVERGE_LIMIT_MS: u64 = 90_000;
const TRACE_LINES: usize = 400;

/// A record or a tombstone, with the stamp that orders its versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rec {
    stamp: Stamp,
    value: Option<u64>,
}

fn partition_of(key: u32) -> usize {
    (key.wrapping_mul(2_654_435_761) >> 20) as usize & (PARTITION_COUNT - 1)
}

struct SeededEntropy(Xoshiro256PlusPlus);

impl Entropy for SeededEntropy {
    fn next_u64(&mut self) -> u64 {
        self.0.random()
    }
}

#[derive(Clone, Debug)]
enum OpKind {
    Put(u64),
    Delete,
    Get,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum OpResult {
    Ok(Option<u64>),
    NotFound,
    Timeout,
}

struct Op {
    key: u32,
    kind: OpKind,
    entry: usize,
    deadline: u64,
    result: Option<OpResult>,
    /// Redirects followed in a row.
    hops: u32,
    issued: u64,
}

/// A write applied at a master, waiting for its copies' acknowledgements.
struct MasterWrite {
    pid: usize,
    key: u32,
    rec: Rec,
    /// Cluster key the pending destinations were computed under.
    sent_key: u64,
    pending: BTreeSet<NodeId>,
    /// Where the answer goes: the client (None) or the proxying node.
    reply_to: Option<usize>,
    deadline: u64,
    result: OpResult,
}

/// A write resolving its record against copies not merged yet.
struct DupRes {
    reply_to: Option<usize>,
    pid: usize,
    key: u32,
    waiting: BTreeSet<NodeId>,
    resolved: BTreeSet<NodeId>,
    best: Option<Rec>,
    deadline: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    Starting,
    Sending {
        records: Vec<(u32, Rec)>,
        next: usize,
    },
    /// Waiting for writes under way to finish before DONE (handoff).
    Draining,
    Done,
}

struct Emig {
    key: u64,
    kind: EmigrationKind,
    stage: Stage,
    last_sent_ms: u64,
}

#[derive(Clone, Debug)]
enum Msg {
    Cluster(Vec<u8>),
    Proxy {
        op: u64,
    },
    /// `result` None: not served there; `redirect` names who serves it as
    /// that node sees it.
    ProxyReply {
        op: u64,
        result: Option<OpResult>,
        redirect: Option<usize>,
    },
    ReplicaWrite {
        op: u64,
        pid: usize,
        key: u32,
        rec: Rec,
        cluster_key: u64,
    },
    ReplicaAck {
        op: u64,
        ok: bool,
        cluster_key: u64,
    },
    DupReq {
        op: u64,
        pid: usize,
        key: u32,
    },
    DupReply {
        op: u64,
        rec: Option<Rec>,
    },
    MigStart {
        pid: u16,
        key: u64,
    },
    MigStartReply {
        pid: u16,
        key: u64,
        ok: bool,
    },
    MigRecords {
        pid: u16,
        key: u64,
        seq: usize,
        records: Vec<(u32, Rec)>,
    },
    MigAck {
        pid: u16,
        key: u64,
        seq: usize,
    },
    MigDone {
        pid: u16,
        key: u64,
    },
    MigDoneAck {
        pid: u16,
        key: u64,
    },
}

#[derive(Clone, Debug)]
enum Event {
    Tick(usize),
    Deliver { from: usize, to: usize, msg: Msg },
    ClientOp,
    OpAtEntry { op: u64 },
    OpDeadline { op: u64 },
    WriteRetry { node: usize, op: u64 },
    DupResRetry { node: usize, op: u64 },
    MigrationTimer { node: usize, pid: u16, to: NodeId },
}

struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct SimNode {
    id: NodeId,
    up: bool,
    paused: bool,
    /// Keeps its records across a restart (a persistent namespace).
    persistent: bool,
    cluster: ClusterNode,
    routing: Arc<Routing>,
    data: Vec<BTreeMap<u32, Rec>>,
    closed: Vec<bool>,
    inflight: Vec<u32>,
    writes: BTreeMap<u64, MasterWrite>,
    emigrations: BTreeMap<(u16, NodeId), Emig>,
    /// Writes fetching the record's other copies before they apply.
    dupres: BTreeMap<u64, DupRes>,
    /// Messages that reached it while stopped, delivered when it resumes.
    held: Vec<(usize, Msg)>,
}

/// Per key, what clients were told.
#[derive(Default)]
struct KeyHistory {
    /// (op, value written or None for a delete), in completion order.
    acknowledged: Vec<(u64, Option<u64>)>,
    /// Writes whose outcome is unknown (timed out), by op id.
    in_doubt: Vec<(u64, Option<u64>)>,
    /// Written by the cut-off side of a split: AP may lose it.
    exempt: bool,
}

struct World {
    options: Options,
    rng: Xoshiro256PlusPlus,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    nodes: Vec<SimNode>,
    blocked: BTreeSet<(usize, usize)>,
    control_drop: f64,
    ops: BTreeMap<u64, Op>,
    next_op: u64,
    busy_keys: BTreeSet<u32>,
    history: BTreeMap<u32, KeyHistory>,
    load: bool,
    /// The node cut off by a split, while it lasts (and a little after).
    split: Option<usize>,
    /// From a split's heal until the cluster has converged: the sides may
    /// merge in steps, and a step that lacks every copy of a partition
    /// starts it empty again, as a side of the split did.
    merging: bool,
    trace: VecDeque<String>,
    events: u64,
    acknowledged: u64,
    timeouts: u64,
    /// Ops issued after this time that timed out.
    late_timeouts_since: u64,
    late_timeouts: u64,
    reads: u64,
    migrations: u64,
    failover_ms_max: u64,
    faults: Vec<String>,
    failure: Option<String>,
    conflict_policy: ConflictPolicy,
    /// A key whose every step is traced (SIM_WATCH_KEY).
    watch_key: Option<u32>,
    /// A partition whose every step is traced (SIM_WATCH_PID).
    watched_pid: Option<usize>,
}

fn endpoint(index: usize, port: u16) -> Endpoint {
    Endpoint {
        host: format!("10.0.0.{}", index + 1),
        port,
    }
}

fn node_id(index: usize) -> NodeId {
    0x0BB9_0000_11AC_4202 + ((index as u64 + 2) << 32)
}

/// Runs one seed.
pub fn run(options: &Options) -> Result<Outcome, Failure> {
    let mut world = World::new(options.clone());
    world.scenario();
    match world.failure.take() {
        Some(message) => Err(Failure {
            seed: options.seed,
            at_ms: world.now,
            message,
            trace: world.trace.iter().cloned().collect(),
        }),
        None => Ok(Outcome {
            seed: options.seed,
            events: world.events,
            virtual_ms: world.now,
            acknowledged_writes: world.acknowledged,
            timed_out_writes: world.timeouts,
            reads: world.reads,
            migrations: world.migrations,
            faults: world.faults.clone(),
            failover_ms_max: world.failover_ms_max,
        }),
    }
}

impl World {
    fn new(options: Options) -> World {
        let rng = Xoshiro256PlusPlus::seed_from_u64(options.seed);
        let mut world = World {
            options,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes: Vec::new(),
            blocked: BTreeSet::new(),
            control_drop: 0.0,
            ops: BTreeMap::new(),
            next_op: 0,
            busy_keys: BTreeSet::new(),
            history: BTreeMap::new(),
            load: false,
            split: None,
            merging: false,
            trace: VecDeque::new(),
            events: 0,
            acknowledged: 0,
            timeouts: 0,
            late_timeouts_since: u64::MAX,
            late_timeouts: 0,
            reads: 0,
            migrations: 0,
            failover_ms_max: 0,
            faults: Vec::new(),
            failure: None,
            conflict_policy: ConflictPolicy::Generation,
            watch_key: std::env::var("SIM_WATCH_KEY")
                .ok()
                .and_then(|k| k.parse().ok()),
            watched_pid: std::env::var("SIM_WATCH_PID")
                .ok()
                .and_then(|k| k.parse().ok()),
        };
        if world.rng.random_bool(0.3) {
            world.conflict_policy = ConflictPolicy::LastUpdateTime;
        }
        world
    }

    fn log(&mut self, line: String) {
        let line = format!("{:>8} {line}", self.now);
        if self.options.verbose {
            println!("{line}");
        }
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    fn watching(&self, key: u32) -> bool {
        self.watch_key == Some(key)
    }

    fn watch_pid(&self, pid: usize) -> bool {
        self.watch_key.is_some_and(|key| partition_of(key) == pid) || self.watched_pid == Some(pid)
    }

    fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.log(format!("FAILURE: {message}"));
            self.failure = Some(message);
        }
    }

    fn schedule(&mut self, after: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at: self.now + after,
            seq: self.seq,
            event,
        }));
    }

    fn config(&self, index: usize) -> Config {
        Config {
            node: node_id(index),
            cluster_name: "sim".into(),
            boot_id: 0,
            heartbeat: endpoint(index, 3002),
            fabric: endpoint(index, 3001),
            service: vec![endpoint(index, 3000)],
            // Every node knows only the first: the mesh is transitive.
            seeds: vec![endpoint(0, 3002)],
            heartbeat_interval_ms: 150,
            heartbeat_timeout: 10,
            fabric_latency_max_ms: 5,
            min_cluster_size: 1,
            namespaces: vec![NamespaceConfig {
                name: "test".into(),
                replication_factor: 2,
                conflict_policy: self.conflict_policy,
            }],
        }
    }

    /// Starts (or restarts) node `index`.
    fn start_node(&mut self, index: usize) {
        let mut config = self.config(index);
        config.boot_id = self.rng.random();
        let persistent;
        let data;
        if index < self.nodes.len() {
            persistent = self.nodes[index].persistent;
            data = if persistent {
                std::mem::take(&mut self.nodes[index].data)
            } else {
                vec![BTreeMap::new(); PARTITION_COUNT]
            };
        } else {
            persistent = self.rng.random_bool(0.5);
            data = vec![BTreeMap::new(); PARTITION_COUNT];
        }
        // A restarted copy is a lineage of its own: merged, never trusted.
        let restart_key = (self.rng.random::<u64>() & 0xFFFF_FFFF_FFFF).max(1);
        let mut versions = empty_versions();
        for (pid, records) in data.iter().enumerate() {
            if !records.is_empty() {
                versions[pid] = Version::full(restart_key);
            }
        }
        let entropy = Box::new(SeededEntropy(Xoshiro256PlusPlus::seed_from_u64(
            self.rng.random(),
        )));
        let cluster = ClusterNode::new(
            config.clone(),
            vec![versions],
            Vec::new(),
            entropy,
            self.now,
        );
        let routing = Arc::new(Routing::unformed(
            config.node,
            &[("test".into(), 2, self.conflict_policy)],
        ));
        let node = SimNode {
            id: config.node,
            up: true,
            paused: false,
            persistent,
            cluster,
            routing,
            data,
            closed: vec![false; PARTITION_COUNT],
            inflight: vec![0; PARTITION_COUNT],
            writes: BTreeMap::new(),
            emigrations: BTreeMap::new(),
            dupres: BTreeMap::new(),
            held: Vec::new(),
        };
        if index < self.nodes.len() {
            self.nodes[index] = node;
        } else {
            self.nodes.push(node);
        }
        self.log(format!(
            "node {index} ({:x}) starts{}",
            config.node,
            if persistent {
                " with its data"
            } else {
                " empty"
            }
        ));
        let jitter = self.rng.random_range(0..TICK_MS);
        self.schedule(jitter, Event::Tick(index));
    }

    // ---------------------------------------------------------------
    // The scenario
    // ---------------------------------------------------------------

    fn scenario(&mut self) {
        let initial = self.rng.random_range(2..=4usize);
        for index in 0..initial {
            self.start_node(index);
            let gap = self.rng.random_range(0..800);
            self.run_for(gap);
        }
        if !self.converge("initial formation") {
            return;
        }
        self.load = true;
        self.schedule(0, Event::ClientOp);
        self.run_for(1500);
        for _ in 0..self.options.faults {
            if self.failure.is_some() {
                return;
            }
            self.fault();
            if self.failure.is_some() {
                return;
            }
            let label = self.faults.last().cloned().unwrap_or_default();
            if !self.converge(&label) {
                return;
            }
            self.merging = false;
            self.run_for(500);
        }
        // A settled cluster serves every request in time: a last stretch of
        // load without faults must see no timeout.
        self.late_timeouts_since = self.now;
        self.run_for(3000);
        let settled_timeouts = self.late_timeouts;
        if settled_timeouts > 0 {
            self.fail(format!(
                "{settled_timeouts} requests timed out in a settled cluster"
            ));
            return;
        }
        self.load = false;
        self.run_for(OP_DEADLINE_MS + 500);
        if !self.converge("end of load") {
            return;
        }
        self.check_data();
    }

    /// One fault, held for a while under load, then healed.
    fn fault(&mut self) {
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        let choice = self.rng.random_range(0..100u32);
        let victim = up[self.rng.random_range(0..up.len())];
        let hold: u64 = self.rng.random_range(500..6000);
        if choice < 30 && up.len() >= 2 {
            let killed_at = self.now;
            self.kill(victim);
            let label = format!("kill -9 node {victim}, restart after {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            let others: Vec<usize> = up.iter().copied().filter(|&i| i != victim).collect();
            let detected = self.run_until_settled_without(victim, &others, 15_000);
            if let Some(at) = detected {
                self.failover_ms_max = self.failover_ms_max.max(at - killed_at);
            }
            let remaining = hold.saturating_sub(self.now - killed_at);
            self.run_for(remaining);
            self.start_node(victim);
        } else if choice < 45 && up.len() >= 2 {
            let label = format!("SIGSTOP node {victim} for {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.nodes[victim].paused = true;
            self.run_for(hold);
            self.resume(victim);
        } else if choice < 70 && up.len() >= 2 {
            let label = format!("network split isolates node {victim} for {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.split = Some(victim);
            for &other in &up {
                if other != victim {
                    self.blocked.insert((victim, other));
                    self.blocked.insert((other, victim));
                }
            }
            self.run_for(hold);
            self.blocked.clear();
            self.log("split healed".into());
            self.merging = true;
            self.run_for(3000);
            self.split = None;
        } else if choice < 85 && self.nodes.len() < 5 {
            let index = self.nodes.len();
            let label = format!("node {index} joins");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.start_node(index);
        } else {
            let label = format!("heartbeat loss 30% for {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.control_drop = 0.3;
            self.run_for(hold);
            self.control_drop = 0.0;
        }
    }

    fn kill(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        node.up = false;
        node.paused = false;
        node.held.clear();
        node.writes.clear();
        node.emigrations.clear();
        node.dupres.clear();
        if !node.persistent {
            node.data = vec![BTreeMap::new(); PARTITION_COUNT];
        }
    }

    fn resume(&mut self, index: usize) {
        self.nodes[index].paused = false;
        let held = std::mem::take(&mut self.nodes[index].held);
        self.log(format!(
            "node {index} resumes with {} held messages",
            held.len()
        ));
        for (from, msg) in held {
            self.handle_message(from, index, msg);
        }
    }

    /// Runs until the nodes `others` share a settled map without `victim`;
    /// returns when, or None (no failover within `limit_ms`).
    fn run_until_settled_without(
        &mut self,
        victim: usize,
        others: &[usize],
        limit_ms: u64,
    ) -> Option<u64> {
        let until = self.now + limit_ms;
        let victim_id = self.nodes[victim].id;
        while self.now < until && self.failure.is_none() {
            self.run_for(TICK_MS);
            let settled = others.iter().all(|&i| {
                let routing = &self.nodes[i].routing;
                routing.settled() && !routing.members.contains(&victim_id)
            });
            if settled {
                return Some(self.now);
            }
        }
        None
    }

    fn run_for(&mut self, duration: u64) {
        let until = self.now + duration;
        while let Some(Reverse(next)) = self.queue.peek() {
            if next.at > until || self.failure.is_some() {
                break;
            }
            let Some(Reverse(next)) = self.queue.pop() else {
                break;
            };
            self.now = next.at;
            self.events += 1;
            self.dispatch(next.event);
        }
        if self.failure.is_none() {
            self.now = until;
        }
    }

    /// Runs until every live node agrees on one settled map, every
    /// migration is done and the claims cover each partition exactly once
    /// per column.
    fn converge(&mut self, after: &str) -> bool {
        let deadline = self.now + CONVERGE_LIMIT_MS;
        while self.now < deadline {
            if self.failure.is_some() {
                return false;
            }
            self.run_for(100);
            if self.converged() {
                self.log(format!("converged after {after}"));
                return true;
            }
        }
        let detail = self.convergence_report();
        self.fail(format!(
            "no convergence within {} s after {after}: {detail}",
            CONVERGE_LIMIT_MS / 1000
        ));
        false
    }

    fn live(&self) -> impl Iterator<Item = &SimNode> {
        self.nodes.iter().filter(|n| n.up && !n.paused)
    }

    fn converged(&self) -> bool {
        let live: Vec<&SimNode> = self.live().collect();
        let Some(first) = live.first() else {
            return false;
        };
        let key = first.routing.key;
        let members: BTreeSet<NodeId> = live.iter().map(|n| n.id).collect();
        for node in &live {
            let routing = &node.routing;
            if !routing.settled() || routing.key != key {
                return false;
            }
            let in_map: BTreeSet<NodeId> = routing.members.iter().copied().collect();
            if in_map != members {
                return false;
            }
            let status = node.cluster.status(self.now);
            if status.migrate_partitions_remaining != 0
                || status.namespaces.iter().any(|ns| ns.signals_remaining != 0)
            {
                return false;
            }
        }
        self.claims_exact(&live).is_ok()
    }

    fn claims_exact(&self, live: &[&SimNode]) -> Result<(), String> {
        let columns = live[0].routing.namespaces[0].n_replicas;
        for column in 0..columns {
            let mut count = vec![0u8; PARTITION_COUNT];
            for node in live {
                let ns = &node.routing.namespaces[0];
                let Some(bitmap) = ns.claims.get(column) else {
                    return Err(format!("node {:x} has no column {column}", node.id));
                };
                for (pid, slot) in count.iter_mut().enumerate() {
                    if bitmap[pid >> 3] & (0x80 >> (pid & 7)) != 0 {
                        *slot += 1;
                    }
                }
            }
            if let Some(pid) = count.iter().position(|&c| c != 1) {
                return Err(format!(
                    "column {column} pid {pid} claimed {} times",
                    count[pid]
                ));
            }
        }
        let _ = BITMAP_BYTES;
        Ok(())
    }

    fn convergence_report(&self) -> String {
        let mut parts = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if !node.up {
                parts.push(format!("node {index} down"));
                continue;
            }
            let status = node.cluster.status(self.now);
            parts.push(format!(
                "node {index}: key {:x} plan {:x} size {} remaining {} signals {} members {:x?}{}",
                status.cluster_key,
                node.routing.key,
                status.cluster_size,
                status.migrate_partitions_remaining,
                status
                    .namespaces
                    .iter()
                    .map(|ns| ns.signals_remaining)
                    .sum::<u64>(),
                node.routing.members,
                if node.paused { " (paused)" } else { "" }
            ));
        }
        let live: Vec<&SimNode> = self.live().collect();
        if !live.is_empty() {
            if let Err(claims) = self.claims_exact(&live) {
                parts.push(claims);
            }
        }
        parts.join("; ")
    }

    // ---------------------------------------------------------------
    // Events
    // ---------------------------------------------------------------

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Tick(index) => {
                if !self.nodes[index].up {
                    return;
                }
                self.schedule(TICK_MS, Event::Tick(index));
                if self.nodes[index].paused {
                    return;
                }
                let now = self.now;
                self.nodes[index].cluster.tick(now, now);
                self.drain_actions(index);
                self.migration_timers(index);
                self.check_single_master();
            }
            Event::Deliver { from, to, msg } => {
                let node = &mut self.nodes[to];
                if !node.up {
                    return;
                }
                if node.paused {
                    node.held.push((from, msg));
                    return;
                }
                self.handle_message(from, to, msg);
            }
            Event::ClientOp => self.client_op(),
            Event::OpAtEntry { op } => self.op_at_entry(op),
            Event::OpDeadline { op } => self.op_deadline(op),
            Event::WriteRetry { node, op } => self.write_retry(node, op),
            Event::DupResRetry { node, op } => self.dupres_retry(node, op),
            Event::MigrationTimer { node, pid, to } => self.migration_timer(node, pid, to),
        }
    }

    fn drain_actions(&mut self, index: usize) {
        let actions = self.nodes[index].cluster.take_actions();
        for action in actions {
            match action {
                Action::Connect(_) | Action::Disconnect(_) => {}
                Action::Broadcast(envelope) => {
                    for to in 0..self.nodes.len() {
                        if to != index {
                            self.send_control(index, to, &envelope);
                        }
                    }
                }
                Action::Send { to, envelope, .. } => {
                    if let Some(target) = self.nodes.iter().position(|n| n.id == to) {
                        self.send_control(index, target, &envelope);
                    }
                }
                Action::Publish(routing) => {
                    if let Some(pid) = self.watch_key.map(partition_of).or(self.watched_pid) {
                        let route = routing.namespaces[0].route(pid);
                        let version = self.nodes[index].cluster.versions(0)[pid];
                        let local = self.nodes[index].cluster.local(0, pid).clone();
                        self.log(format!("WATCH node {index} publishes map {:x}: pid {pid} route {route:?} version {version} local {local:?}", routing.key));
                    }
                    let node = &mut self.nodes[index];
                    if routing.key != node.routing.key {
                        node.closed = vec![false; PARTITION_COUNT];
                    }
                    node.routing = routing;
                }
                Action::Emigrate(emigration) => {
                    if self.watch_pid(usize::from(emigration.pid)) {
                        self.log(format!("WATCH node {index} emigrates {emigration:?}"));
                    }
                    self.start_emigration(index, emigration)
                }
                Action::Drop { pid, .. } => {
                    if self.watch_pid(usize::from(pid)) {
                        self.log(format!("WATCH node {index} drops partition {pid}"));
                    }
                    self.nodes[index].data[usize::from(pid)].clear();
                }
                Action::Metadata(_) => {}
                Action::Log(_, line) => {
                    self.log(format!("[{index}] {line}"));
                }
            }
        }
    }

    fn send_control(&mut self, from: usize, to: usize, envelope: &Envelope) {
        if self.control_drop > 0.0 && self.rng.random_bool(self.control_drop) {
            return;
        }
        let mut bytes = Vec::new();
        envelope.encode(&mut bytes);
        self.send(from, to, Msg::Cluster(bytes));
    }

    /// Sends over the simulated network: lost if either end is down or
    /// the link is cut, else delivered after a few ms (TCP keeps order per
    /// pair only approximately here, which is harsher).
    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        if !self.nodes[from].up || self.blocked.contains(&(from, to)) {
            return;
        }
        let delay = if self.rng.random_bool(0.02) {
            self.rng.random_range(20..120)
        } else {
            self.rng.random_range(1..6)
        };
        self.schedule(delay, Event::Deliver { from, to, msg });
    }

    fn handle_message(&mut self, from: usize, to: usize, msg: Msg) {
        if self.blocked.contains(&(from, to)) {
            return;
        }
        match msg {
            Msg::Cluster(bytes) => {
                let decoded = codec::split_frame(&bytes)
                    .ok()
                    .flatten()
                    .map(|(header, body, _)| Envelope::decode(header.kind, body));
                match decoded {
                    Some(Ok(envelope)) => {
                        let now = self.now;
                        self.nodes[to].cluster.receive(envelope, now);
                        self.drain_actions(to);
                    }
                    _ => self.fail(format!(
                        "node {to} could not decode a frame from node {from}"
                    )),
                }
            }
            Msg::Proxy { op } => self.proxy_request(from, to, op),
            Msg::ProxyReply {
                op,
                result,
                redirect,
            } => self.proxy_reply(to, op, result, redirect),
            Msg::ReplicaWrite {
                op,
                pid,
                key,
                rec,
                cluster_key,
            } => {
                let node = &mut self.nodes[to];
                let ok = node.routing.settled() && node.routing.cluster_key == cluster_key;
                let mut applied = false;
                if ok {
                    let local = node.data[pid].get(&key).map(|r| r.stamp);
                    if conflict::incoming_wins(ConflictPolicy::LastUpdateTime, local, rec.stamp) {
                        node.data[pid].insert(key, rec);
                        applied = true;
                    }
                }
                if self.watching(key) {
                    self.log(format!("WATCH op {op} replica write at node {to} from {from}: ok {ok} applied {applied} {rec:?}"));
                }
                self.send(
                    to,
                    from,
                    Msg::ReplicaAck {
                        op,
                        ok,
                        cluster_key,
                    },
                );
            }
            Msg::ReplicaAck {
                op,
                ok,
                cluster_key,
            } => {
                let sender = self.nodes[from].id;
                let node = &mut self.nodes[to];
                let Some(write) = node.writes.get_mut(&op) else {
                    return;
                };
                if ok && cluster_key == write.sent_key {
                    write.pending.remove(&sender);
                    if write.pending.is_empty() {
                        self.finish_write(to, op);
                    }
                }
            }
            Msg::DupReq { op, pid, key } => {
                let rec = self.nodes[to].data[pid].get(&key).copied();
                self.send(to, from, Msg::DupReply { op, rec });
            }
            Msg::DupReply { op, rec } => {
                let sender = self.nodes[from].id;
                let policy = self.conflict_policy;
                let node = &mut self.nodes[to];
                let Some(state) = node.dupres.get_mut(&op) else {
                    return;
                };
                if !state.waiting.remove(&sender) {
                    return;
                }
                state.resolved.insert(sender);
                if let Some(rec) = rec {
                    if conflict::incoming_wins(policy, state.best.map(|b| b.stamp), rec.stamp) {
                        state.best = Some(rec);
                    }
                }
                if state.waiting.is_empty() {
                    self.dupres_done(to, op);
                }
            }
            Msg::MigStart { pid, key } => {
                let sender = self.nodes[from].id;
                let routing = &self.nodes[to].routing;
                let ok = routing.key == key
                    && routing.member_index(sender).is_some_and(|m| {
                        routing.namespaces[0].route(usize::from(pid)).immigrate_from & (1u64 << m)
                            != 0
                    });
                self.send(to, from, Msg::MigStartReply { pid, key, ok });
            }
            Msg::MigStartReply { pid, key, ok } => {
                let target = self.nodes[to].id;
                let _ = target;
                let dest = self.nodes[from].id;
                let node = &mut self.nodes[to];
                let Some(emig) = node.emigrations.get_mut(&(pid, dest)) else {
                    return;
                };
                if emig.key != key || emig.stage != Stage::Starting {
                    return;
                }
                if ok {
                    let records: Vec<(u32, Rec)> = node.data[usize::from(pid)]
                        .iter()
                        .map(|(&k, &r)| (k, r))
                        .collect();
                    emig.stage = Stage::Sending { records, next: 0 };
                    self.send_chunk(to, pid, dest);
                } else {
                    emig.last_sent_ms = self.now;
                }
            }
            Msg::MigRecords {
                pid,
                key,
                seq,
                records,
            } => {
                let policy = self.conflict_policy;
                let node = &mut self.nodes[to];
                if node.routing.key != key {
                    return;
                }
                let mut watched = Vec::new();
                for (k, rec) in records {
                    let local = node.data[usize::from(pid)].get(&k).copied();
                    let wins = conflict::incoming_wins(policy, local.map(|r| r.stamp), rec.stamp);
                    if wins {
                        node.data[usize::from(pid)].insert(k, rec);
                    }
                    if self.watch_key == Some(k) {
                        watched.push(format!("WATCH migrated key {k} into node {to} from {from}: {rec:?} over {local:?} wins {wins}"));
                    }
                }
                for line in watched {
                    self.log(line);
                }
                self.send(to, from, Msg::MigAck { pid, key, seq });
            }
            Msg::MigAck { pid, key, seq } => {
                let dest = self.nodes[from].id;
                let node = &mut self.nodes[to];
                let Some(emig) = node.emigrations.get_mut(&(pid, dest)) else {
                    return;
                };
                if emig.key != key {
                    return;
                }
                if let Stage::Sending { next, .. } = &mut emig.stage {
                    if *next == seq {
                        *next += 1;
                        self.send_chunk(to, pid, dest);
                    }
                }
            }
            Msg::MigDone { pid, key } => {
                if self.watch_pid(usize::from(pid)) {
                    self.log(format!(
                        "WATCH node {to} gets DONE for {pid} from node {from} key {key:x}"
                    ));
                }
                let sender = self.nodes[from].id;
                if self.nodes[to].routing.key != key {
                    return;
                }
                let now = self.now;
                self.nodes[to].cluster.data_event(
                    DataEvent::ImmigrationDone {
                        namespace: 0,
                        pid,
                        from: sender,
                        key,
                    },
                    now,
                );
                self.drain_actions(to);
                self.send(to, from, Msg::MigDoneAck { pid, key });
            }
            Msg::MigDoneAck { pid, key } => {
                if self.watch_pid(usize::from(pid)) {
                    self.log(format!(
                        "WATCH node {to} gets DONE_ACK for {pid} from node {from} key {key:x}"
                    ));
                }
                let dest = self.nodes[from].id;
                let node = &mut self.nodes[to];
                let Some(emig) = node.emigrations.get(&(pid, dest)) else {
                    return;
                };
                if emig.key != key || emig.stage != Stage::Done {
                    return;
                }
                node.emigrations.remove(&(pid, dest));
                self.migrations += 1;
                let now = self.now;
                self.nodes[to].cluster.data_event(
                    DataEvent::EmigrationDone {
                        namespace: 0,
                        pid,
                        to: dest,
                        key,
                    },
                    now,
                );
                self.drain_actions(to);
            }
        }
    }

    // ---------------------------------------------------------------
    // Migrations (the model data path)
    // ---------------------------------------------------------------

    fn start_emigration(&mut self, index: usize, emigration: Emigration) {
        let Some(target) = self.nodes.iter().position(|n| n.id == emigration.to) else {
            return;
        };
        let node = &mut self.nodes[index];
        node.emigrations.insert(
            (emigration.pid, emigration.to),
            Emig {
                key: emigration.key,
                kind: emigration.kind,
                stage: Stage::Starting,
                last_sent_ms: self.now,
            },
        );
        self.send(
            index,
            target,
            Msg::MigStart {
                pid: emigration.pid,
                key: emigration.key,
            },
        );
    }

    fn send_chunk(&mut self, index: usize, pid: u16, dest: NodeId) {
        let Some(target) = self.nodes.iter().position(|n| n.id == dest) else {
            return;
        };
        let now = self.now;
        let node = &mut self.nodes[index];
        let Some(emig) = node.emigrations.get_mut(&(pid, dest)) else {
            return;
        };
        emig.last_sent_ms = now;
        let key = emig.key;
        let Stage::Sending { records, next } = &emig.stage else {
            return;
        };
        let start = next * CHUNK_RECORDS;
        if start < records.len() {
            let chunk = records[start..(start + CHUNK_RECORDS).min(records.len())].to_vec();
            let seq = *next;
            self.send(
                index,
                target,
                Msg::MigRecords {
                    pid,
                    key,
                    seq,
                    records: chunk,
                },
            );
            return;
        }
        // Everything acknowledged: a handoff first drains the writes under
        // way, so the new master starts with every acknowledged write.
        if emig.kind == EmigrationKind::Handoff {
            emig.stage = Stage::Draining;
            node.closed[usize::from(pid)] = true;
            self.schedule(
                1,
                Event::MigrationTimer {
                    node: index,
                    pid,
                    to: dest,
                },
            );
        } else {
            emig.stage = Stage::Done;
            self.send(index, target, Msg::MigDone { pid, key });
        }
    }

    fn migration_timer(&mut self, index: usize, pid: u16, dest: NodeId) {
        let node = &mut self.nodes[index];
        if !node.up || node.paused {
            return;
        }
        let Some(emig) = node.emigrations.get_mut(&(pid, dest)) else {
            return;
        };
        if emig.stage == Stage::Draining {
            if node.inflight[usize::from(pid)] == 0 {
                emig.stage = Stage::Done;
                let key = emig.key;
                emig.last_sent_ms = self.now;
                if let Some(target) = self.nodes.iter().position(|n| n.id == dest) {
                    self.send(index, target, Msg::MigDone { pid, key });
                }
            } else {
                self.schedule(
                    1,
                    Event::MigrationTimer {
                        node: index,
                        pid,
                        to: dest,
                    },
                );
            }
        }
    }

    /// Resends whatever an emigration waits on for too long; drops those of
    /// an old map.
    fn migration_timers(&mut self, index: usize) {
        let plan_key = self.nodes[index].cluster.plan_key();
        let now = self.now;
        let node = &mut self.nodes[index];
        node.emigrations.retain(|_, emig| emig.key == plan_key);
        let due: Vec<(u16, NodeId)> = node
            .emigrations
            .iter()
            .filter(|(_, emig)| {
                emig.stage != Stage::Draining && now >= emig.last_sent_ms + MIGRATION_RETRY_MS
            })
            .map(|(&slot, _)| slot)
            .collect();
        for (pid, dest) in due {
            let Some(target) = self.nodes.iter().position(|n| n.id == dest) else {
                continue;
            };
            let node = &mut self.nodes[index];
            let Some(emig) = node.emigrations.get_mut(&(pid, dest)) else {
                continue;
            };
            emig.last_sent_ms = now;
            let key = emig.key;
            match &emig.stage {
                Stage::Starting => self.send(index, target, Msg::MigStart { pid, key }),
                Stage::Sending { .. } => self.send_chunk(index, pid, dest),
                Stage::Done => self.send(index, target, Msg::MigDone { pid, key }),
                Stage::Draining => {}
            }
        }
    }

    // ---------------------------------------------------------------
    // Clients
    // ---------------------------------------------------------------

    fn client_op(&mut self) {
        if !self.load {
            return;
        }
        self.schedule(OP_INTERVAL_MS, Event::ClientOp);
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        if up.is_empty() {
            return;
        }
        let key = self.rng.random_range(0..KEY_SPACE);
        if self.busy_keys.contains(&key) {
            return;
        }
        let kind = match self.rng.random_range(0..100u32) {
            0..60 => OpKind::Put(self.next_op + 1),
            60..72 => OpKind::Delete,
            _ => OpKind::Get,
        };
        let entry = up[self.rng.random_range(0..up.len())];
        self.next_op += 1;
        let op = self.next_op;
        self.busy_keys.insert(key);
        self.ops.insert(
            op,
            Op {
                key,
                kind,
                entry,
                deadline: self.now + OP_DEADLINE_MS,
                result: None,
                hops: 0,
                issued: self.now,
            },
        );
        self.schedule(OP_DEADLINE_MS, Event::OpDeadline { op });
        self.op_at_entry(op);
    }

    /// The node a client sent `op` to handles it, or proxies it.
    fn op_at_entry(&mut self, op: u64) {
        let Some(state) = self.ops.get(&op) else {
            return;
        };
        if state.result.is_some() || self.now >= state.deadline {
            return;
        }
        let entry = state.entry;
        let key = state.key;
        let is_write = !matches!(state.kind, OpKind::Get);
        let node = &self.nodes[entry];
        if !node.up || node.paused {
            // The client's connection hangs until its deadline.
            return;
        }
        let pid = partition_of(key);
        let route = node.routing.namespaces[0].route(pid);
        if route.unavailable() || !node.routing.settled() && is_write {
            self.schedule(20, Event::OpAtEntry { op });
            return;
        }
        if is_write && route.writes_here() && !node.closed[pid] {
            self.master_write(entry, op, None);
            return;
        }
        if !is_write && route.reads_here() {
            let value = node.data[pid].get(&key).and_then(|r| r.value);
            self.complete(
                op,
                if value.is_some() {
                    OpResult::Ok(value)
                } else {
                    OpResult::NotFound
                },
            );
            return;
        }
        let target_member = if route.writes_here() {
            route.final_master
        } else {
            route.master
        };
        let Some(target_id) = node.routing.member(target_member) else {
            self.schedule(20, Event::OpAtEntry { op });
            return;
        };
        let Some(target) = self.nodes.iter().position(|n| n.id == target_id) else {
            return;
        };
        if target == entry {
            self.schedule(5, Event::OpAtEntry { op });
            return;
        }
        self.send(entry, target, Msg::Proxy { op });
    }

    fn proxy_request(&mut self, from: usize, to: usize, op: u64) {
        let Some(state) = self.ops.get(&op) else {
            return;
        };
        if state.result.is_some() {
            return;
        }
        let key = state.key;
        let is_write = !matches!(state.kind, OpKind::Get);
        let node = &self.nodes[to];
        let pid = partition_of(key);
        let route = node.routing.namespaces[0].route(pid);
        if is_write && node.routing.settled() && route.writes_here() && !node.closed[pid] {
            self.master_write(to, op, Some(from));
        } else if !is_write && route.reads_here() {
            let value = node.data[pid].get(&key).and_then(|r| r.value);
            let result = if value.is_some() {
                OpResult::Ok(value)
            } else {
                OpResult::NotFound
            };
            self.send(
                to,
                from,
                Msg::ProxyReply {
                    op,
                    result: Some(result),
                    redirect: None,
                },
            );
        } else {
            // Not here (views differ): the proxying node tries again where
            // this node would send it.
            let member = if route.writes_here() {
                route.final_master
            } else {
                route.master
            };
            let redirect = node
                .routing
                .member(member)
                .and_then(|id| self.nodes.iter().position(|n| n.id == id));
            self.send(
                to,
                from,
                Msg::ProxyReply {
                    op,
                    result: None,
                    redirect,
                },
            );
        }
    }

    fn proxy_reply(
        &mut self,
        at: usize,
        op: u64,
        result: Option<OpResult>,
        redirect: Option<usize>,
    ) {
        let Some(state) = self.ops.get_mut(&op) else {
            return;
        };
        if state.result.is_some() || state.entry != at {
            return;
        }
        match (result, redirect) {
            (Some(result), _) => self.complete(op, result),
            (None, Some(target)) if target != at && state.hops < 3 => {
                state.hops += 1;
                self.send(at, target, Msg::Proxy { op });
            }
            (None, _) => {
                state.hops = 0;
                self.schedule(5, Event::OpAtEntry { op })
            }
        }
    }

    fn master_write(&mut self, index: usize, op: u64, reply_to: Option<usize>) {
        let Some(state) = self.ops.get(&op) else {
            return;
        };
        let key = state.key;
        let deadline = state.deadline;
        let pid = partition_of(key);
        // Copies not merged yet may hold a newer version of the record:
        // fetch and resolve them first (duplicate resolution).
        let node = &self.nodes[index];
        let route = node.routing.namespaces[0].route(pid);
        let resolved = node
            .dupres
            .get(&op)
            .map(|d| d.resolved.clone())
            .unwrap_or_default();
        let waiting: BTreeSet<NodeId> = (0..64u8)
            .filter(|m| route.duplicates & (1u64 << m) != 0)
            .filter_map(|m| node.routing.member(m))
            .filter(|id| !resolved.contains(id))
            .collect();
        if !waiting.is_empty() {
            let previous = self.nodes[index].dupres.remove(&op);
            self.nodes[index].dupres.insert(
                op,
                DupRes {
                    reply_to,
                    pid,
                    key,
                    waiting: waiting.clone(),
                    resolved,
                    best: previous.and_then(|p| p.best),
                    deadline,
                },
            );
            if self.watching(key) {
                self.log(format!(
                    "WATCH op {op} resolves against {waiting:x?} at node {index}"
                ));
            }
            for dest in waiting {
                if let Some(target) = self.nodes.iter().position(|n| n.id == dest) {
                    self.send(index, target, Msg::DupReq { op, pid, key });
                }
            }
            self.schedule(WRITE_RETRY_MS, Event::DupResRetry { node: index, op });
            return;
        }
        if let Some(state) = self.nodes[index].dupres.remove(&op) {
            if let Some(best) = state.best {
                let local = self.nodes[index].data[pid].get(&key).map(|r| r.stamp);
                if conflict::incoming_wins(self.conflict_policy, local, best.stamp) {
                    self.nodes[index].data[pid].insert(key, best);
                }
            }
        }
        let Some(state) = self.ops.get(&op) else {
            return;
        };
        let kind = state.kind.clone();
        let now = self.now;
        let node = &mut self.nodes[index];
        let old = node.data[pid].get(&key).copied();
        let value = match kind {
            OpKind::Put(value) => Some(value),
            OpKind::Delete => {
                if old.is_none_or(|r| r.value.is_none()) {
                    self.reply(index, op, reply_to, OpResult::NotFound);
                    return;
                }
                None
            }
            OpKind::Get => return,
        };
        let rec = Rec {
            stamp: conflict::next_stamp(old.map(|r| r.stamp), now),
            value,
        };
        node.data[pid].insert(key, rec);
        node.inflight[pid] += 1;
        if self.watch_key == Some(key) {
            let line = format!(
                "WATCH op {op} key {key} applied at master node {index}: {rec:?} (was {old:?})"
            );
            self.log(line);
        }
        let node = &mut self.nodes[index];
        let route = node.routing.namespaces[0].route(pid);
        let pending: BTreeSet<NodeId> = route
            .destinations()
            .iter()
            .filter_map(|&m| node.routing.member(m))
            .collect();
        let sent_key = node.routing.cluster_key;
        node.writes.insert(
            op,
            MasterWrite {
                pid,
                key,
                rec,
                sent_key,
                pending: pending.clone(),
                reply_to,
                deadline,
                result: OpResult::Ok(value),
            },
        );
        if pending.is_empty() {
            self.finish_write(index, op);
            return;
        }
        for dest in pending {
            if let Some(target) = self.nodes.iter().position(|n| n.id == dest) {
                self.send(
                    index,
                    target,
                    Msg::ReplicaWrite {
                        op,
                        pid,
                        key,
                        rec,
                        cluster_key: sent_key,
                    },
                );
            }
        }
        self.schedule(WRITE_RETRY_MS, Event::WriteRetry { node: index, op });
    }

    /// Every copy answered: the write goes on if this node still masters
    /// the partition, else the client's node tries again.
    fn dupres_done(&mut self, index: usize, op: u64) {
        let Some(state) = self.nodes[index].dupres.get(&op) else {
            return;
        };
        let (pid, reply_to) = (state.pid, state.reply_to);
        let node = &self.nodes[index];
        let route = node.routing.namespaces[0].route(pid);
        if node.routing.settled() && route.writes_here() && !node.closed[pid] {
            self.master_write(index, op, reply_to);
        } else {
            self.nodes[index].dupres.remove(&op);
            match reply_to {
                Some(proxy) => self.send(
                    index,
                    proxy,
                    Msg::ProxyReply {
                        op,
                        result: None,
                        redirect: None,
                    },
                ),
                None => self.schedule(5, Event::OpAtEntry { op }),
            }
        }
    }

    fn dupres_retry(&mut self, index: usize, op: u64) {
        let now = self.now;
        let node = &mut self.nodes[index];
        if !node.up {
            return;
        }
        let Some(state) = node.dupres.get(&op) else {
            return;
        };
        if now >= state.deadline {
            let reply_to = state.reply_to;
            node.dupres.remove(&op);
            self.reply(index, op, reply_to, OpResult::Timeout);
            return;
        }
        let route = node.routing.namespaces[0].route(state.pid);
        let current: BTreeSet<NodeId> = (0..64u8)
            .filter(|m| route.duplicates & (1u64 << m) != 0)
            .filter_map(|m| node.routing.member(m))
            .collect();
        let Some(state) = node.dupres.get_mut(&op) else {
            return;
        };
        // Copies merged meanwhile need no answer.
        state.waiting.retain(|id| current.contains(id));
        if state.waiting.is_empty() {
            self.dupres_done(index, op);
            return;
        }
        let (pid, key) = (state.pid, state.key);
        let waiting: Vec<NodeId> = state.waiting.iter().copied().collect();
        for dest in waiting {
            if let Some(target) = self.nodes.iter().position(|n| n.id == dest) {
                self.send(index, target, Msg::DupReq { op, pid, key });
            }
        }
        self.schedule(WRITE_RETRY_MS, Event::DupResRetry { node: index, op });
    }

    /// Resends a write's copies to the destinations of the current map.
    fn write_retry(&mut self, index: usize, op: u64) {
        let now = self.now;
        let node = &mut self.nodes[index];
        if !node.up {
            return;
        }
        let Some(write) = node.writes.get_mut(&op) else {
            return;
        };
        if now >= write.deadline {
            write.result = OpResult::Timeout;
            self.finish_write(index, op);
            return;
        }
        if node.paused {
            self.schedule(WRITE_RETRY_MS, Event::WriteRetry { node: index, op });
            return;
        }
        let route = node.routing.namespaces[0].route(write.pid);
        if node.routing.cluster_key != write.sent_key || !node.routing.settled() {
            write.sent_key = node.routing.cluster_key;
            write.pending = route
                .destinations()
                .iter()
                .filter_map(|&m| node.routing.member(m))
                .collect();
        }
        let (pid, key, rec, sent_key) = (write.pid, write.key, write.rec, write.sent_key);
        let pending: Vec<NodeId> = write.pending.iter().copied().collect();
        if pending.is_empty() && node.routing.settled() {
            self.finish_write(index, op);
            return;
        }
        for dest in pending {
            if let Some(target) = self.nodes.iter().position(|n| n.id == dest) {
                self.send(
                    index,
                    target,
                    Msg::ReplicaWrite {
                        op,
                        pid,
                        key,
                        rec,
                        cluster_key: sent_key,
                    },
                );
            }
        }
        self.schedule(WRITE_RETRY_MS, Event::WriteRetry { node: index, op });
    }

    fn finish_write(&mut self, index: usize, op: u64) {
        let node = &mut self.nodes[index];
        let Some(write) = node.writes.remove(&op) else {
            return;
        };
        node.inflight[write.pid] -= 1;
        // What the cut-off side of a split acknowledges may lose to the
        // other side when they merge (AP, as documented): not checked. Nor
        // what a node acknowledges between the heal and convergence while
        // its cluster is not yet every live node (a partial merge is one
        // more side).
        let partial = self.merging && {
            let members: BTreeSet<NodeId> =
                self.nodes[index].routing.members.iter().copied().collect();
            self.live().any(|n| !members.contains(&n.id))
        };
        if self.split == Some(index) || partial {
            self.history.entry(write.key).or_default().exempt = true;
        }
        self.reply(index, op, write.reply_to, write.result);
    }

    fn reply(&mut self, index: usize, op: u64, reply_to: Option<usize>, result: OpResult) {
        match reply_to {
            None => self.complete(op, result),
            Some(proxy) => self.send(
                index,
                proxy,
                Msg::ProxyReply {
                    op,
                    result: Some(result),
                    redirect: None,
                },
            ),
        }
    }

    fn complete(&mut self, op: u64, result: OpResult) {
        let Some(state) = self.ops.get_mut(&op) else {
            return;
        };
        if state.result.is_some() {
            return;
        }
        state.result = Some(result.clone());
        let key = state.key;
        let kind = state.kind.clone();
        if self.watch_key == Some(key) {
            self.log(format!(
                "WATCH op {op} key {key} {kind:?} completes: {result:?}"
            ));
        }
        self.busy_keys.remove(&key);
        let history = self.history.entry(key).or_default();
        match (kind, result) {
            (OpKind::Get, _) => self.reads += 1,
            (OpKind::Put(value), OpResult::Ok(_)) => {
                history.acknowledged.push((op, Some(value)));
                self.acknowledged += 1;
            }
            (OpKind::Delete, OpResult::Ok(_)) => {
                history.acknowledged.push((op, None));
                self.acknowledged += 1;
            }
            (OpKind::Delete, OpResult::NotFound) => {}
            (OpKind::Put(value), OpResult::Timeout) => {
                history.in_doubt.push((op, Some(value)));
                self.timeouts += 1;
            }
            (OpKind::Delete, OpResult::Timeout) => {
                history.in_doubt.push((op, None));
                self.timeouts += 1;
            }
            (_, OpResult::NotFound) => {}
        }
        self.ops.remove(&op);
    }

    fn op_deadline(&mut self, op: u64) {
        if self
            .ops
            .get(&op)
            .is_some_and(|state| state.result.is_none())
        {
            if self
                .ops
                .get(&op)
                .is_some_and(|state| state.issued >= self.late_timeouts_since)
            {
                self.late_timeouts += 1;
                let key = self.ops.get(&op).map_or(0, |state| state.key);
                self.log(format!(
                    "op {op} on key {key} timed out in a settled cluster"
                ));
            }
            self.complete(op, OpResult::Timeout);
        }
    }

    // ---------------------------------------------------------------
    // Checks
    // ---------------------------------------------------------------

    /// No two nodes of one settled map accept writes for one partition.
    fn check_single_master(&mut self) {
        let mut by_key: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if node.up && !node.paused && node.routing.settled() {
                by_key.entry(node.routing.key).or_default().push(index);
            }
        }
        for (key, nodes) in by_key {
            if nodes.len() < 2 {
                continue;
            }
            let mut owner = vec![usize::MAX; PARTITION_COUNT];
            for &index in &nodes {
                let node = &self.nodes[index];
                for (pid, slot) in owner.iter_mut().enumerate() {
                    let route = node.routing.namespaces[0].routes[pid];
                    if route.writes_here() && !node.closed[pid] {
                        if *slot != usize::MAX {
                            let message = format!(
                                "nodes {} and {index} both accept writes for partition {pid} under map {key:x}",
                                *slot
                            );
                            self.fail(message);
                            return;
                        }
                        *slot = index;
                    }
                }
            }
        }
    }

    /// Every acknowledged write is there: the last acknowledged value of
    /// each key, or a value written after it whose outcome was unknown.
    fn check_data(&mut self) {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        let mut checked = 0u64;
        let keys: Vec<u32> = self.history.keys().copied().collect();
        for key in keys {
            let history = &self.history[&key];
            if history.exempt {
                continue;
            }
            let Some(&(last_op, last_value)) = history.acknowledged.last() else {
                continue;
            };
            let mut allowed: Vec<Option<u64>> = vec![last_value];
            allowed.extend(
                history
                    .in_doubt
                    .iter()
                    .filter(|(op, _)| *op > last_op)
                    .map(|(_, value)| *value),
            );
            let pid = partition_of(key);
            let master = live.iter().copied().find(|&i| {
                let node = &self.nodes[i];
                node.routing.namespaces[0].routes[pid].writes_here()
            });
            let Some(master) = master else {
                self.fail(format!("no master for partition {pid} at the end"));
                return;
            };
            let found = self.nodes[master].data[pid].get(&key).and_then(|r| r.value);
            if !allowed.contains(&found) {
                let message = format!(
                    "key {key} (partition {pid}) on master node {master} holds {found:?}; acknowledged last {last_value:?} (op {last_op}), allowed {allowed:?}"
                );
                self.fail(message);
                return;
            }
            // Every complete replica holds the same.
            for &index in &live {
                let node = &self.nodes[index];
                let route = node.routing.namespaces[0].routes[pid];
                if index != master && route.reads_here() {
                    let copy = node.data[pid].get(&key).and_then(|r| r.value);
                    if copy != found && history.in_doubt.is_empty() {
                        let message = format!(
                            "key {key} (partition {pid}): replica node {index} holds {copy:?}, master node {master} {found:?}"
                        );
                        self.fail(message);
                        return;
                    }
                }
            }
            checked += 1;
        }
        self.log(format!("checked {checked} keys"));
    }
}
