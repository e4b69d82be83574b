//! The simulated world: nodes, network, clients, faults and checks. The
//! data path on each node is the cluster crate's (see `datapath.rs`).

use crate::datapath::{Disk, SimNode};
use crate::linearizability::{self, Action as Register, Operation};
use crate::store::{partition_of, MemStore};
use bolide_cluster::codec;
use bolide_cluster::datapath::emigrate::{EmigrateNamespace, PARTITIONS_PER_THREAD};
use bolide_cluster::datapath::ReadMode;
use bolide_cluster::datapath::{Emigrator, EmigratorConfig, Immigrator};
use bolide_cluster::node::{Action, ClusterNode, Config, Entropy, NamespaceConfig};
use bolide_cluster::routing::{ConflictPolicy, Gates, Routing, BITMAP_BYTES};
use bolide_cluster::sc::{self, Availability, Roster};
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
    /// The namespace is strong-consistency (its roster: the first nodes),
    /// reads are linearize reads, and every key's history is checked for
    /// linearizability at the end.
    pub sc: bool,
    /// Nodes sit in two racks (node i on rack i % 2 + 1; SC: the roster
    /// says so); every settled map must hold each partition's copies on
    /// both racks whenever both have a member.
    pub racks: bool,
    /// (SC) A quarter of the faults are roster changes instead: the
    /// roster becomes the live nodes (taking in nodes that joined), or
    /// the live nodes but one (which stays in the cluster, out of the
    /// roster), staged on one node (`roster-set`) and put in force by
    /// `recluster:`, under load. Off, the seeds replay as before.
    pub roster_changes: bool,
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
    /// Copies of writes sent to other holders.
    pub replica_writes: u64,
    /// Requests answered through another node.
    pub proxies: u64,
    /// Copies fetched to resolve a write against copies not merged yet.
    pub fetches: u64,
    pub faults: Vec<String>,
    /// Longest time from a node's death to a settled map without it.
    pub failover_ms_max: u64,
    /// (SC) keys whose histories were checked for linearizability, and
    /// the operations in them.
    pub linearizable_keys: u64,
    pub linearizable_operations: u64,
    /// (SC) partitions found dead after every copy was lost, then revived.
    pub revived_partitions: u64,
    /// Writes refused (22) while the clocks were skewed.
    pub skew_refused_writes: u64,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: ok after {} events, {:.1} s simulated; {} writes acknowledged, {} timed out, {} reads, {} migrations, {} replica writes, {} proxied, {} fetched; longest failover {} ms; {} keys ({} operations) linearizable; {} partitions dead then revived; {} writes refused for clock skew; faults: {}",
            self.seed,
            self.events,
            self.virtual_ms as f64 / 1000.0,
            self.acknowledged_writes,
            self.timed_out_writes,
            self.reads,
            self.migrations,
            self.replica_writes,
            self.proxies,
            self.fetches,
            self.failover_ms_max,
            self.linearizable_keys,
            self.linearizable_operations,
            self.revived_partitions,
            self.skew_refused_writes,
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
pub(crate) const OP_DEADLINE_MS: u64 = 1000;
const KEY_SPACE: u32 = 600;
const OP_INTERVAL_MS: u64 = 4;
const CONVERGE_LIMIT_MS: u64 = 90_000;
const TRACE_LINES: usize = 400;
/// The server's defaults.
const MIGRATE_THREADS: usize = 1;
const MIGRATE_MAX_NUM_INCOMING: usize = 4;
const MIGRATE_SLEEP_US: u32 = 1;
/// The simulated wall clocks' time at the start (2026-11-28).
const WALL_CLOCK_START_MS: u64 = 1_795_824_000_000;
/// How far a clock-skew fault moves a node's clock: past the 20 s at which
/// strong-consistency writes stop with the simulated heartbeat.
const SKEW_FAULT_MS: i64 = 25_000;
/// From a skew fault's start, writes must be refused after this (the
/// smoothed skew passes the limit within a few pulses).
const SKEW_DETECTED_MS: u64 = 2000;
/// As the server: records written this long before the saved watermark
/// are listed unreplicated again at a restart too.
const UNREPLICATED_SLACK_MS: u64 = bolide_cluster::datapath::rereplicate::WATERMARK_SLACK_MS;

fn datapath_sweep_ms() -> u64 {
    bolide_cluster::datapath::rereplicate::SWEEP_EVERY_MS
}

/// The digests of every record left unreplicated on a node.
fn unreplicated_digests(gates: &Gates) -> Vec<[u8; 20]> {
    let mut digests = Vec::new();
    if gates.unreplicated_count(0) > 0 {
        for pid in 0..PARTITION_COUNT {
            digests.extend(gates.unreplicated(0, pid));
        }
    }
    digests
}

struct SeededEntropy(Xoshiro256PlusPlus);

impl Entropy for SeededEntropy {
    fn next_u64(&mut self) -> u64 {
        self.0.random()
    }
}

#[derive(Clone, Debug)]
pub(crate) enum OpKind {
    Put(u64),
    Delete,
    Get,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OpResult {
    Ok(Option<u64>),
    NotFound,
    Timeout,
    /// Nobody serves the partition from that node now (11).
    Unavailable,
    /// Writes stopped: the cluster's clocks are too far apart (22).
    Forbidden,
}

pub(crate) struct Op {
    pub key: u32,
    pub kind: OpKind,
    pub entry: usize,
    pub deadline: u64,
    pub result: Option<OpResult>,
    pub issued: u64,
}

/// Which of a node's ports a frame arrives at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Port {
    Heartbeat,
    Fabric,
}

#[derive(Clone, Debug)]
pub(crate) enum Event {
    Tick(usize),
    Deliver {
        from: usize,
        to: usize,
        port: Port,
        frame: Vec<u8>,
    },
    ClientOp,
    OpAtEntry {
        op: u64,
    },
    OpDeadline {
        op: u64,
    },
    /// A request's work asked to be ticked.
    WorkWake {
        node: usize,
        work: u64,
    },
    EmigratorWake {
        node: usize,
    },
    /// (SC) a node's background sweep of its unreplicated records, and
    /// the save of their list (`boot`: the life it was scheduled in).
    Sweep {
        node: usize,
        boot: u64,
    },
    /// A call's connection failed (its node died): no answer will come.
    Lost {
        node: usize,
        id: u64,
    },
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

pub(crate) struct World {
    options: Options,
    rng: Xoshiro256PlusPlus,
    pub(crate) now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    pub(crate) nodes: Vec<SimNode>,
    blocked: BTreeSet<(usize, usize)>,
    control_drop: f64,
    pub(crate) ops: BTreeMap<u64, Op>,
    next_op: u64,
    /// Wire ids of fabric calls and ids of works: never reused, across
    /// restarts too.
    pub(crate) next_wire: u64,
    pub(crate) next_work: u64,
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
    pub(crate) migrations: u64,
    pub(crate) replica_writes: u64,
    pub(crate) proxies: u64,
    pub(crate) fetches: u64,
    failover_ms_max: u64,
    /// A routing or a gate may have changed since the last single-master
    /// check.
    pub(crate) masters_dirty: bool,
    faults: Vec<String>,
    failure: Option<String>,
    conflict_policy: ConflictPolicy,
    /// A key whose every step is traced (SIM_WATCH_KEY).
    pub(crate) watch_key: Option<u32>,
    /// A partition whose every step is traced (SIM_WATCH_PID).
    watched_pid: Option<usize>,
    /// How reads are sent (linearize under SC).
    pub(crate) read_mode: ReadMode,
    /// (SC) the roster: the nodes started first.
    roster: Roster,
    /// (SC) per key, every operation with a known or in-doubt outcome.
    operations: BTreeMap<u32, Vec<Operation>>,
    /// (SC) per key whose partition was revived: when (operations called
    /// before then belong to the earlier history).
    epochs: BTreeMap<u32, u64>,
    /// (SC) histories closed by a revive: the key, its operations, and the
    /// values the register may hold at its start.
    closed: Vec<(u32, Vec<Operation>, Vec<Option<u64>>)>,
    /// (SC) per key revived, the values it may hold when its current
    /// history starts.
    starts: BTreeMap<u32, Vec<Option<u64>>>,
    linearizable_keys: u64,
    linearizable_operations: u64,
    revived_partitions: u64,
    skew_refused_writes: u64,
    /// While a clock-skew fault lasts: writes acknowledged after this time
    /// fail the run (SC stops writes).
    skew_since: Option<u64>,
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
            replica_writes: world.replica_writes,
            proxies: world.proxies,
            fetches: world.fetches,
            faults: world.faults.clone(),
            failover_ms_max: world.failover_ms_max,
            linearizable_keys: world.linearizable_keys,
            linearizable_operations: world.linearizable_operations,
            revived_partitions: world.revived_partitions,
            skew_refused_writes: world.skew_refused_writes,
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
            next_wire: 0,
            next_work: 0,
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
            replica_writes: 0,
            proxies: 0,
            fetches: 0,
            failover_ms_max: 0,
            masters_dirty: true,
            faults: Vec::new(),
            failure: None,
            conflict_policy: ConflictPolicy::Generation,
            watch_key: std::env::var("SIM_WATCH_KEY")
                .ok()
                .and_then(|k| k.parse().ok()),
            watched_pid: std::env::var("SIM_WATCH_PID")
                .ok()
                .and_then(|k| k.parse().ok()),
            read_mode: ReadMode::Session,
            roster: Roster::default(),
            operations: BTreeMap::new(),
            epochs: BTreeMap::new(),
            closed: Vec::new(),
            starts: BTreeMap::new(),
            linearizable_keys: 0,
            linearizable_operations: 0,
            revived_partitions: 0,
            skew_refused_writes: 0,
            skew_since: None,
        };
        if world.options.sc {
            world.read_mode = ReadMode::Linearize;
        }
        if world.rng.random_bool(0.3) {
            world.conflict_policy = ConflictPolicy::LastUpdateTime;
        }
        world
    }

    pub(crate) fn log(&mut self, line: String) {
        let line = format!("{:>8} {line}", self.now);
        if self.options.verbose {
            println!("{line}");
        }
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    pub(crate) fn watch_pid(&self, pid: usize) -> bool {
        self.watch_key.is_some_and(|key| partition_of(key) == pid) || self.watched_pid == Some(pid)
    }

    pub(crate) fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.log(format!("FAILURE: {message}"));
            self.failure = Some(message);
        }
    }

    pub(crate) fn schedule(&mut self, after: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at: self.now + after,
            seq: self.seq,
            event,
        }));
    }

    fn config(&self, index: usize, disk: &Disk) -> Config {
        Config {
            node: node_id(index),
            cluster_name: "sim".into(),
            boot_id: 0,
            heartbeat: endpoint(index, 3002),
            fabric: endpoint(index, 3001),
            service: vec![endpoint(index, 3000)],
            redis: Vec::new(),
            // Every node knows only the first: the mesh is transitive.
            seeds: vec![endpoint(0, 3002)],
            heartbeat_interval_ms: 150,
            heartbeat_timeout: 10,
            fabric_latency_max_ms: 5,
            min_cluster_size: 1,
            namespaces: vec![NamespaceConfig {
                strong_consistency: self.options.sc,
                roster: disk.roster.clone().unwrap_or_else(|| self.roster.clone()),
                regime: if self.options.sc {
                    disk.regime.max(1)
                } else {
                    0
                },
                witnesses: disk.witnesses.clone(),
                rack_id: self.rack_of(index),
                ..NamespaceConfig::ap("test", 2, self.conflict_policy)
            }],
        }
    }

    /// Starts (or restarts) node `index` with the records its store holds
    /// (a node killed without its data has an empty one). `trusted`: its
    /// storage kept every write it acknowledged (a clean stop, or
    /// commit-to-device), as the server decides at start.
    fn start_node(&mut self, index: usize, trusted: bool) {
        let persistent;
        let store;
        let disk;
        let boot;
        if index < self.nodes.len() {
            persistent = self.nodes[index].persistent;
            store = std::mem::replace(&mut self.nodes[index].store, MemStore::new());
            disk = self.nodes[index].disk.clone();
            boot = self.nodes[index].boot + 1;
        } else {
            persistent = self.rng.random_bool(0.5);
            store = MemStore::new();
            disk = Disk::default();
            boot = 0;
        }
        let mut config = self.config(index, &disk);
        config.boot_id = self.rng.random();
        // A copy with no saved lineage is one of its own: merged, never
        // trusted.
        let restart_key = (self.rng.random::<u64>() & 0xFFFF_FFFF_FFFF).max(1);
        let versions = if self.options.sc {
            sc::restart_versions(&disk.versions, trusted, |pid| store.holds(pid), restart_key)
        } else {
            (0..PARTITION_COUNT)
                .map(|pid| {
                    if store.holds(pid) {
                        Version::full(restart_key)
                    } else {
                        Version::NULL
                    }
                })
                .collect()
        };
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
        let gates = Arc::new(Gates::new(1));
        if self.options.sc && trusted {
            // The records a crash may have cut off from their replicas are
            // unreplicated again, as the server lists them at start.
            let (watermark, saved) = disk.unreplicated.clone().unwrap_or_default();
            let from = watermark.saturating_sub(UNREPLICATED_SLACK_MS);
            for pid in 0..PARTITION_COUNT {
                let saved_here: Vec<[u8; 20]> = saved
                    .iter()
                    .filter(|digest| usize::from(bolide_cluster::datapath::pid_of(digest)) == pid)
                    .copied()
                    .collect();
                let held = store.stamps(pid).into_iter();
                for (digest, stamp) in
                    bolide_cluster::datapath::rereplicate::restart_list(&saved_here, from, held)
                {
                    drop(gates.mark_unreplicated(0, pid, digest, stamp));
                }
            }
        }
        let emigrator = Emigrator::new(
            EmigratorConfig {
                workers: MIGRATE_THREADS * PARTITIONS_PER_THREAD,
                namespaces: vec![EmigrateNamespace {
                    name: "test".into(),
                    sleep_us: MIGRATE_SLEEP_US,
                }],
            },
            Arc::clone(&gates),
        );
        let unreplicated = gates.unreplicated_count(0);
        let node = SimNode {
            id: config.node,
            up: true,
            paused: false,
            persistent,
            boot,
            disk,
            clock_offset_ms: 0,
            cluster,
            routing,
            gates,
            store,
            works: BTreeMap::new(),
            calls: BTreeMap::new(),
            emigrator,
            emigrator_wake: None,
            immigrator: Immigrator::new(MIGRATE_MAX_NUM_INCOMING),
            held: Vec::new(),
        };
        if index < self.nodes.len() {
            self.nodes[index] = node;
        } else {
            self.nodes.push(node);
        }
        self.log(format!(
            "node {index} ({:x}) starts{}{}{}",
            config.node,
            if self.nodes[index].store.is_empty() {
                " empty"
            } else {
                " with its data"
            },
            if trusted { "" } else { ", untrusted" },
            if unreplicated > 0 {
                format!(", {unreplicated} records unreplicated")
            } else {
                String::new()
            }
        ));
        let jitter = self.rng.random_range(0..TICK_MS);
        self.schedule(jitter, Event::Tick(index));
        self.schedule(
            jitter + datapath_sweep_ms(),
            Event::Sweep { node: index, boot },
        );
    }

    // ---------------------------------------------------------------
    // The scenario
    // ---------------------------------------------------------------

    fn scenario(&mut self) {
        let initial = self.rng.random_range(2..=4usize);
        if self.options.sc {
            // The roster, as if staged and reclustered before: every
            // initial node saved it.
            let nodes: Vec<String> = (0..initial)
                .map(|i| match self.rack_of(i) {
                    0 => format!("{:X}", node_id(i)),
                    rack => format!("{:X}@{rack}", node_id(i)),
                })
                .collect();
            self.roster = Roster::parse(&nodes.join(",")).expect("roster of node ids");
        }
        for index in 0..initial {
            self.start_node(index, true);
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
        if self.options.sc && self.failure.is_none() {
            self.check_linearizable();
        }
    }

    /// (SC) every key's history is linearizable (a history a revive
    /// closed, and the one after it, each on its own: the revive accepted
    /// whatever the copies held).
    fn check_linearizable(&mut self) {
        let mut histories = std::mem::take(&mut self.closed);
        for (key, history) in std::mem::take(&mut self.operations) {
            let starts = self.starts.get(&key).cloned().unwrap_or(vec![None]);
            histories.push((key, history, starts));
        }
        for (key, history, starts) in &histories {
            let mut exhausted = false;
            let result = linearizability::check_from(starts, history, 2_000_000, &mut exhausted);
            if exhausted {
                self.fail(format!(
                    "key {key}: linearizability search gave up ({} operations)",
                    history.len()
                ));
                return;
            }
            if let Err(violation) = result {
                self.fail(format!(
                    "key {key} (partition {}): history of {} operations is not linearizable:\n{}",
                    partition_of(*key),
                    violation.operations,
                    violation.described
                ));
                return;
            }
            self.linearizable_keys += 1;
            self.linearizable_operations += history.len() as u64;
        }
        self.log(format!(
            "{} keys' histories linearizable",
            self.linearizable_keys
        ));
    }

    /// One fault, held for a while under load, then healed.
    fn fault(&mut self) {
        if self.options.sc && self.options.roster_changes && self.rng.random_bool(0.25) {
            self.change_roster();
            return;
        }
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        let choice = self.rng.random_range(0..100u32);
        let victim = up[self.rng.random_range(0..up.len())];
        let hold: u64 = self.rng.random_range(500..6000);
        if choice < 22 && up.len() >= 2 {
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
            // A persistent node has commit-to-device: nothing it
            // acknowledged is lost, its copies are trusted.
            let trusted = self.nodes[victim].persistent;
            self.start_node(victim, trusted);
        } else if choice < 30 && self.options.sc && up.len() >= 2 {
            self.lose_every_copy(hold);
        } else if choice < 36 && up.len() >= 2 {
            let label = format!("clean restart of node {victim} after {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.stop_cleanly(victim);
            self.run_for(hold);
            let trusted = self.nodes[victim].persistent;
            self.start_node(victim, trusted);
        } else if choice < 48 && up.len() >= 2 {
            let label = format!("SIGSTOP node {victim} for {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.nodes[victim].paused = true;
            self.masters_dirty = true;
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
        } else if choice < 82 && self.nodes.len() < 5 {
            let index = self.nodes.len();
            let label = format!("node {index} joins");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.start_node(index, true);
        } else if choice < 90 && self.options.sc && up.len() >= 2 {
            let ahead = if self.rng.random_bool(0.5) { 1 } else { -1 };
            let offset = ahead * SKEW_FAULT_MS;
            let hold = hold.max(3 * SKEW_DETECTED_MS);
            let label = format!("clock of node {victim} {offset} ms off for {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.nodes[victim].clock_offset_ms = offset;
            self.skew_since = Some(self.now + SKEW_DETECTED_MS);
            let refused = self.skew_refused_writes;
            self.run_for(hold);
            self.skew_since = None;
            self.nodes[victim].clock_offset_ms = 0;
            if self.skew_refused_writes == refused && self.nodes[victim].up {
                self.fail(format!("no write refused while {label}"));
            }
        } else {
            let label = format!("heartbeat loss 30% for {hold} ms");
            self.faults.push(label.clone());
            self.log(format!("FAULT {label}"));
            self.control_drop = 0.3;
            self.run_for(hold);
            self.control_drop = 0.0;
        }
    }

    /// (SC) Every node holding a complete copy of some partition is
    /// killed at once and comes back without its data: the partitions they
    /// alone held must be dead (and only those) once every roster node is
    /// back, and `revive:` on every node then `recluster:` must serve them
    /// again, with whatever is left.
    fn lose_every_copy(&mut self, hold: u64) {
        let pid = self.rng.random_range(0..PARTITION_COUNT);
        let holders = self.complete_holders(pid);
        let victims: Vec<usize> = holders.into_iter().collect();
        let label = format!(
            "kill -9 nodes {victims:?} (every copy of partition {pid}) without their data, restart after {hold} ms"
        );
        self.faults.push(label.clone());
        self.log(format!("FAULT {label}"));
        let expected: BTreeSet<usize> = (0..PARTITION_COUNT)
            .filter(|&p| {
                let holders = self.complete_holders(p);
                !holders.is_empty() && holders.iter().all(|h| victims.contains(h))
            })
            .collect();
        for &victim in &victims {
            self.kill(victim);
            self.nodes[victim].store = MemStore::new();
        }
        self.run_for(hold);
        for &victim in &victims {
            self.start_node(victim, false);
        }
        // Every roster node is back: wait for one map of every live node.
        let until = self.now + 30_000;
        loop {
            self.run_for(100);
            if self.failure.is_some() {
                return;
            }
            let live: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].up)
                .collect();
            let members: BTreeSet<NodeId> = live.iter().map(|&i| self.nodes[i].id).collect();
            let formed = live.iter().all(|&i| {
                let routing = &self.nodes[i].routing;
                routing.settled()
                    && routing.key == self.nodes[live[0]].routing.key
                    && routing.members.iter().copied().collect::<BTreeSet<_>>() == members
            });
            if formed {
                break;
            }
            if self.now >= until {
                self.fail(format!("no map of every node after {label}"));
                return;
            }
        }
        for index in (0..self.nodes.len()).filter(|&i| self.nodes[i].up) {
            let dead: BTreeSet<usize> = self.nodes[index]
                .cluster
                .verdicts(0)
                .iter()
                .enumerate()
                .filter(|(_, &verdict)| verdict == Availability::Dead)
                .map(|(pid, _)| pid)
                .collect();
            if dead != expected {
                let missing: Vec<&usize> = expected.difference(&dead).take(5).collect();
                let extra: Vec<&usize> = dead.difference(&expected).take(5).collect();
                self.fail(format!(
                    "node {index}: {} dead partitions, {} expected after {label} (not dead: {missing:?}; dead, not expected: {extra:?})",
                    dead.len(),
                    expected.len()
                ));
                return;
            }
        }
        self.log(format!(
            "{} partitions dead as expected: revive",
            expected.len()
        ));
        let now = self.now;
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        for &index in &live {
            let revived = self.nodes[index].cluster.revive(None);
            if revived != expected.len() as u64 {
                self.fail(format!(
                    "node {index} revived {revived} partitions, {} dead",
                    expected.len()
                ));
                return;
            }
            self.drain_actions(index);
        }
        self.start_epochs(&expected);
        self.revived_partitions += expected.len() as u64;
        for &index in &live {
            self.nodes[index].cluster.recluster(now);
            self.drain_actions(index);
        }
    }

    /// (SC) `roster-set` on one node, then `recluster:` on every node, as
    /// an operator does: the roster becomes the live nodes, or the live
    /// nodes but one. Whatever the change, no acknowledged write may be
    /// lost and every history must stay linearizable; once the new roster
    /// is whole in the cluster, every partition must be available.
    fn change_roster(&mut self) {
        const REPLICATION_FACTOR: usize = 2;
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        let mut chosen = live.clone();
        let unchanged = {
            let roster: BTreeSet<NodeId> = self.roster.nodes().into_iter().collect();
            roster == live.iter().map(|&i| self.nodes[i].id).collect()
        };
        // The live nodes but one half of the time, and whenever the live
        // nodes are the roster already (when RF allows).
        if chosen.len() > REPLICATION_FACTOR && (unchanged || self.rng.random_bool(0.5)) {
            let out = self.rng.random_range(0..chosen.len());
            chosen.remove(out);
        }
        let entries: Vec<String> = chosen
            .iter()
            .map(|&i| match self.rack_of(i) {
                0 => format!("{:X}", node_id(i)),
                rack => format!("{:X}@{rack}", node_id(i)),
            })
            .collect();
        let roster = Roster::parse(&entries.join(",")).expect("roster of node ids");
        let at = live[self.rng.random_range(0..live.len())];
        let label = format!("roster-set on node {at} to nodes {chosen:?}, then recluster");
        self.faults.push(label.clone());
        self.log(format!("FAULT {label}"));
        let clock =
            (WALL_CLOCK_START_MS + self.now).saturating_add_signed(self.nodes[at].clock_offset_ms);
        self.nodes[at].cluster.set_metadata(
            bolide_cluster::node::ROSTER_MODULE,
            "test",
            &roster.to_string(),
            false,
            clock,
        );
        self.drain_actions(at);
        // The staged roster reaches the other nodes; `recluster:` on each.
        let hold: u64 = self.rng.random_range(100..1000);
        self.run_for(hold);
        self.roster = roster;
        let now = self.now;
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .collect();
        for index in up {
            self.nodes[index].cluster.recluster(now);
            self.drain_actions(index);
        }
        self.run_for(hold);
    }

    /// Live nodes holding a complete copy of `pid`: its working master
    /// and the replicas that may serve reads.
    fn complete_holders(&self, pid: usize) -> BTreeSet<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up)
            .filter(|&i| {
                let route = self.nodes[i].routing.namespaces[0].route(pid);
                !route.unavailable() && (route.writes_here() || route.reads_here())
            })
            .collect()
    }

    /// A clean stop (SIGTERM): the node saves its state and its exact
    /// unreplicated list, as the server does after flushing its storage.
    fn stop_cleanly(&mut self, index: usize) {
        let now = self.now;
        let node = &mut self.nodes[index];
        if self.options.sc {
            node.disk.versions = node.cluster.saved_versions(0);
            node.disk.witnesses = node.cluster.witnesses(0).to_vec();
            node.disk.regime = node.cluster.sc()[0].regime;
            node.disk.roster = Some(node.cluster.sc()[0].roster.clone());
            node.disk.unreplicated = Some((now, unreplicated_digests(&node.gates)));
        }
        self.kill(index);
    }

    /// (SC) The keys of revived partitions start a new history: the one
    /// so far is checked on its own, and the register may hold any value
    /// it had (or nothing) when the new one starts.
    fn start_epochs(&mut self, pids: &BTreeSet<usize>) {
        for key in 0..KEY_SPACE {
            if !pids.contains(&partition_of(key)) {
                continue;
            }
            let history = self.operations.remove(&key).unwrap_or_default();
            let starts = self.starts.remove(&key).unwrap_or(vec![None]);
            let mut next: BTreeSet<Option<u64>> = starts.iter().copied().collect();
            for operation in &history {
                if let Register::Write(value) = operation.action {
                    next.insert(value);
                }
            }
            if !history.is_empty() {
                self.closed.push((key, history, starts));
            }
            self.starts.insert(key, next.into_iter().collect());
            self.epochs.insert(key, self.now);
            if let Some(history) = self.history.get_mut(&key) {
                history.acknowledged.clear();
            }
        }
    }

    fn kill(&mut self, index: usize) {
        self.masters_dirty = true;
        let node = &mut self.nodes[index];
        node.up = false;
        node.paused = false;
        node.held.clear();
        node.works.clear();
        node.calls.clear();
        if !node.persistent {
            node.store = MemStore::new();
        }
        // Its connections close: calls waiting on it learn at once.
        for other in 0..self.nodes.len() {
            let lost: Vec<u64> = self.nodes[other]
                .calls
                .iter()
                .filter(|(_, call)| call.to == index)
                .map(|(&id, _)| id)
                .collect();
            for id in lost {
                self.schedule(1, Event::Lost { node: other, id });
            }
        }
    }

    fn resume(&mut self, index: usize) {
        self.masters_dirty = true;
        self.nodes[index].paused = false;
        let held = std::mem::take(&mut self.nodes[index].held);
        self.log(format!(
            "node {index} resumes with {} held messages",
            held.len()
        ));
        for (from, port, frame) in held {
            self.deliver(from, index, port, frame);
        }
        // Its timers fire late, all at once.
        let works: Vec<u64> = self.nodes[index].works.keys().copied().collect();
        for work in works {
            self.schedule(0, Event::WorkWake { node: index, work });
        }
        self.schedule(0, Event::EmigratorWake { node: index });
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
                if self.options.racks {
                    // The claims of a migration that has just ended are
                    // published at the node's next tick.
                    self.run_for(2 * TICK_MS);
                    self.check_racks();
                }
                return self.failure.is_none();
            }
        }
        let detail = self.convergence_report();
        self.fail(format!(
            "no convergence within {} s after {after}: {detail}",
            CONVERGE_LIMIT_MS / 1000
        ));
        false
    }

    /// Node `index`'s rack (0 without `--racks`).
    fn rack_of(&self, index: usize) -> u32 {
        if self.options.racks {
            index as u32 % 2 + 1
        } else {
            0
        }
    }

    /// (Racks) in a settled map each partition's copies sit on both racks
    /// when both have a member; under SC only when the live nodes are
    /// exactly the roster (otherwise stand-ins come from the roster first).
    fn check_racks(&mut self) {
        if !self.options.racks {
            return;
        }
        let live: Vec<(NodeId, u32)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up && !n.paused)
            .map(|(index, n)| (n.id, self.rack_of(index)))
            .collect();
        let racks: BTreeSet<u32> = live.iter().map(|&(_, rack)| rack).collect();
        let roster: BTreeSet<NodeId> = self.roster.nodes().into_iter().collect();
        let members: BTreeSet<NodeId> = live.iter().map(|&(node, _)| node).collect();
        if racks.len() < 2 || (self.options.sc && members != roster) {
            return;
        }
        let columns = self
            .nodes
            .iter()
            .find(|n| n.up && !n.paused)
            .map_or(0, |n| n.routing.namespaces[0].n_replicas);
        for pid in 0..PARTITION_COUNT {
            let mut held = BTreeSet::new();
            for node in self.live() {
                let ns = &node.routing.namespaces[0];
                for column in ns.claims.iter().take(columns) {
                    if column[pid >> 3] & (0x80 >> (pid & 7)) != 0 {
                        let rack = live
                            .iter()
                            .find(|&&(id, _)| id == node.id)
                            .map_or(0, |&(_, r)| r);
                        held.insert(rack);
                    }
                }
            }
            if held.len() < columns.min(racks.len()) {
                let message = format!("pid {pid}: its {columns} copies sit on racks {held:?} only");
                self.fail(message);
                return;
            }
        }
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
            // A node resumed after a pause as long as the heartbeat
            // timeout looks settled until the principal's eviction of it
            // (already proposed) commits.
            if !node.cluster.membership_quiet(self.now) {
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
                "node {index}: key {:x} plan {:x} size {} remaining {} signals {} emigrations {} active {} queued, {} immigrations, {} requests under way, {:?}{}",
                status.cluster_key,
                node.routing.key,
                status.cluster_size,
                status.migrate_partitions_remaining,
                status
                    .namespaces
                    .iter()
                    .map(|ns| ns.signals_remaining)
                    .sum::<u64>(),
                node.emigrator.active(),
                node.emigrator.queued(),
                node.immigrator.incoming(),
                node.works.len(),
                node.emigrator.describe(),
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
                let clock = (WALL_CLOCK_START_MS + now)
                    .saturating_add_signed(self.nodes[index].clock_offset_ms);
                self.nodes[index].cluster.tick(now, clock);
                self.drain_actions(index);
                if std::mem::take(&mut self.masters_dirty) {
                    self.check_single_master();
                }
            }
            Event::Deliver {
                from,
                to,
                port,
                frame,
            } => self.deliver(from, to, port, frame),
            Event::ClientOp => self.client_op(),
            Event::OpAtEntry { op } => self.op_at_entry(op),
            Event::OpDeadline { op } => self.op_deadline(op),
            Event::WorkWake { node, work } => self.work_wake(node, work),
            Event::EmigratorWake { node } => self.emigrator_wake(node),
            Event::Lost { node, id } => self.lost(node, id),
            Event::Sweep { node, boot } => {
                if !self.nodes[node].up || self.nodes[node].boot != boot {
                    return;
                }
                self.schedule(datapath_sweep_ms(), Event::Sweep { node, boot });
                if self.nodes[node].paused || !self.options.sc {
                    return;
                }
                let now = self.now;
                let digests = unreplicated_digests(&self.nodes[node].gates);
                self.nodes[node].disk.unreplicated = Some((now, digests));
                self.sweep_unreplicated(node);
            }
        }
    }

    /// Carries out the cluster state machine's actions; a new routing
    /// first, as the server does (the migrations of a new map check that
    /// their map is the one in force).
    pub(crate) fn drain_actions(&mut self, index: usize) {
        let mut actions = self.nodes[index].cluster.take_actions();
        actions.sort_by_key(|action| match action {
            Action::SaveSc { .. } => 0,
            Action::Publish(_) => 1,
            _ => 2,
        });
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
                    node.gates.on_publish(node.routing.key, &routing);
                    node.routing = routing;
                    self.masters_dirty = true;
                }
                Action::Emigrate(emigration) => {
                    if self.watch_pid(usize::from(emigration.pid)) {
                        self.log(format!("WATCH node {index} emigrates {emigration:?}"));
                    }
                    let now = self.now;
                    let node = &mut self.nodes[index];
                    let key = node.routing.key;
                    node.emigrator.add(emigration, now, key);
                    self.drive_emigrator(index);
                }
                Action::Drop { namespace, pid } => {
                    if self.watch_pid(usize::from(pid)) {
                        self.log(format!("WATCH node {index} drops partition {pid}"));
                    }
                    use bolide_cluster::datapath::RecordStore;
                    self.nodes[index].store.drop_partition(namespace, pid);
                    self.nodes[index]
                        .gates
                        .forget_unreplicated(namespace, usize::from(pid));
                }
                Action::SaveSc {
                    roster,
                    regime,
                    versions,
                    witnesses,
                    ..
                } => {
                    let disk = &mut self.nodes[index].disk;
                    disk.roster = Some(roster);
                    disk.regime = regime;
                    disk.versions = versions;
                    disk.witnesses = witnesses;
                }
                Action::Metadata(_) | Action::Shared(_) => {}
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
        let mut frame = Vec::new();
        envelope.encode(&mut frame);
        self.send(from, to, Port::Heartbeat, frame);
    }

    pub(crate) fn send_fabric(&mut self, from: usize, to: usize, frame: Vec<u8>) {
        self.send(from, to, Port::Fabric, frame);
    }

    /// Sends a frame over the simulated network: lost if the sender is
    /// down or the link is cut, else delivered after a few ms (in any
    /// order, which is harsher than TCP).
    fn send(&mut self, from: usize, to: usize, port: Port, frame: Vec<u8>) {
        if !self.nodes[from].up || self.blocked.contains(&(from, to)) {
            return;
        }
        let delay = if self.rng.random_bool(0.02) {
            self.rng.random_range(20..120)
        } else {
            self.rng.random_range(1..6)
        };
        self.schedule(
            delay,
            Event::Deliver {
                from,
                to,
                port,
                frame,
            },
        );
    }

    /// A frame arrives: held by a stopped node; to a dead node, the
    /// sender's connection fails (its call is lost).
    fn deliver(&mut self, from: usize, to: usize, port: Port, frame: Vec<u8>) {
        if self.blocked.contains(&(from, to)) {
            return;
        }
        let node = &mut self.nodes[to];
        if !node.up {
            if port == Port::Fabric && self.nodes[from].up {
                if let Some(id) = fabric_id(&frame) {
                    self.schedule(1, Event::Lost { node: from, id });
                }
            }
            return;
        }
        if node.paused {
            node.held.push((from, port, frame));
            return;
        }
        match port {
            Port::Heartbeat => self.control_frame(from, to, &frame),
            Port::Fabric => self.fabric_frame(from, to, &frame),
        }
    }

    fn control_frame(&mut self, from: usize, to: usize, frame: &[u8]) {
        let decoded = codec::split_frame(frame)
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
                issued: self.now,
            },
        );
        self.schedule(OP_DEADLINE_MS, Event::OpDeadline { op });
        self.op_at_entry(op);
    }

    /// A write was acknowledged by node `index`, which applied it. What the
    /// cut-off side of a split acknowledges may lose to the other side when
    /// they merge (AP, as documented): not checked. Nor what a node
    /// acknowledges between the heal and convergence while its cluster is
    /// not yet every live node (a partial merge is one more side).
    pub(crate) fn write_acknowledged_at(&mut self, index: usize, key: u32) {
        let partial = self.merging && {
            let members: BTreeSet<NodeId> =
                self.nodes[index].routing.members.iter().copied().collect();
            self.live().any(|n| !members.contains(&n.id))
        };
        if self.split == Some(index) || partial {
            self.history.entry(key).or_default().exempt = true;
        }
    }

    pub(crate) fn complete(&mut self, op: u64, result: OpResult) {
        let Some(state) = self.ops.get_mut(&op) else {
            return;
        };
        if state.result.is_some() {
            return;
        }
        state.result = Some(result.clone());
        let key = state.key;
        let kind = state.kind.clone();
        let issued = state.issued;
        if self.options.sc
            && matches!(kind, OpKind::Put(_) | OpKind::Delete)
            && result
                == OpResult::Ok(match &kind {
                    OpKind::Put(value) => Some(*value),
                    _ => None,
                })
            && self.skew_since.is_some_and(|since| issued >= since)
        {
            self.fail(format!(
                "op {op} on key {key}: a write acknowledged while the clocks were skewed"
            ));
        }
        // Called before its key's partition was revived: a write may take
        // effect in the new history (in doubt), a read belongs to neither.
        let before_revive = self.epochs.get(&key).is_some_and(|&epoch| issued < epoch);
        if self.options.sc {
            let action = match (&kind, &result) {
                (OpKind::Get, OpResult::Ok(value)) => Some((Register::Read(*value), true)),
                (OpKind::Get | OpKind::Delete, OpResult::NotFound) => {
                    Some((Register::Read(None), true))
                }
                (OpKind::Put(value), OpResult::Ok(_)) => {
                    Some((Register::Write(Some(*value)), true))
                }
                (OpKind::Delete, OpResult::Ok(_)) => Some((Register::Write(None), true)),
                (OpKind::Put(value), OpResult::Timeout) => {
                    Some((Register::Write(Some(*value)), false))
                }
                (OpKind::Delete, OpResult::Timeout) => Some((Register::Write(None), false)),
                // A read that failed, or a write refused with 11: nothing.
                _ => None,
            };
            let action = match action {
                Some((Register::Read(_), _)) if before_revive => None,
                Some((write, _)) if before_revive => Some((write, false)),
                action => action,
            };
            if let Some((action, known)) = action {
                let ops = self.operations.entry(key).or_default();
                if ops.len() < 128 {
                    ops.push(Operation {
                        call: issued,
                        ret: known.then_some(self.now),
                        action,
                    });
                }
            }
        }
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
            (_, OpResult::Unavailable) => {}
            (_, OpResult::Forbidden) => self.skew_refused_writes += 1,
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
    pub(crate) fn check_single_master(&mut self) {
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
                    let closed = node
                        .gates
                        .gate(0, pid)
                        .is_some_and(|gate| gate.closed.load(std::sync::atomic::Ordering::SeqCst));
                    if route.writes_here() && !closed {
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
    /// each key, or the value of a write whose outcome was unknown.
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
            // A write whose client saw a timeout may take effect at any time
            // after it was sent, even after writes acknowledged later: a node
            // stopped with it in its socket runs it when it resumes (the
            // server does; docs/cluster.md, "Failures"). So the last value
            // is the last acknowledged one or any in-doubt one.
            let mut allowed: Vec<Option<u64>> = vec![last_value];
            allowed.extend(history.in_doubt.iter().map(|(_, value)| *value));
            let pid = partition_of(key);
            let master = live.iter().copied().find(|&i| {
                let node = &self.nodes[i];
                node.routing.namespaces[0].routes[pid].writes_here()
            });
            let Some(master) = master else {
                self.fail(format!("no master for partition {pid} at the end"));
                return;
            };
            let found = self.nodes[master].store.get(key).and_then(|r| r.value);
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
                    let copy = node.store.get(key).and_then(|r| r.value);
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

/// The id of a fabric frame (every fabric message starts with it).
fn fabric_id(frame: &[u8]) -> Option<u64> {
    let (_, body, _) = codec::split_frame(frame).ok()??;
    body.first_chunk::<8>().map(|id| u64::from_le_bytes(*id))
}
