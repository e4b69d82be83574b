//! Three real cluster state machines (`bolide_cluster::ClusterNode`) on an
//! in-memory network, on a virtual clock: every message between them is
//! encoded and decoded by the real codec, migrations complete at once (the
//! nodes hold no data), and everything the machines ask for is recorded.
//! Deterministic: the same calls give the same cluster.

use bolide_cluster::codec;
use bolide_cluster::node::{empty_versions, Action, ClusterNode, Config, DataEvent, Entropy};
use bolide_cluster::routing::{ConflictPolicy, Routing};
use bolide_cluster::{Endpoint, Envelope, NamespaceConfig, NodeId};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub const CLUSTER_NAME: &str = "fuzz";
pub const NAMESPACE: &str = "test";
pub const REPLICATION_FACTOR: usize = 2;
/// The real nodes' ids, as `tests/python/cluster.py` names them.
pub const MEMBERS: [NodeId; 3] = [0xA1, 0xA2, 0xA3];
pub const TICK_MS: u64 = 10;
const HEARTBEAT_INTERVAL_MS: u64 = 20;
const HEARTBEAT_TIMEOUT: u64 = 5;
/// Wall clock at virtual time 0.
const EPOCH_MS: u64 = 1_700_000_000_000;
/// Steps the cluster may take to form.
const FORM_STEPS_MAX: usize = 3000;
/// Messages and data events handled in one step, at most.
const EVENTS_PER_STEP_MAX: usize = 100_000;

/// A fixed sequence per node (splitmix64): cluster keys replay exactly.
/// The state is shared with the harness, so a fork continues it.
struct SeededEntropy(Arc<AtomicU64>);

impl Entropy for SeededEntropy {
    fn next_u64(&mut self) -> u64 {
        let state = self.0.load(Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.0.store(state, Relaxed);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

pub fn heartbeat_endpoint(index: usize) -> Endpoint {
    Endpoint {
        host: format!("10.0.0.{}", index + 1),
        port: 3002,
    }
}

fn endpoint(index: usize, port: u16) -> Endpoint {
    Endpoint {
        host: format!("10.0.0.{}", index + 1),
        port,
    }
}

pub struct SimNode {
    pub id: NodeId,
    pub machine: ClusterNode,
    entropy: Arc<AtomicU64>,
    /// The last routing it published.
    pub routing: Option<Arc<Routing>>,
    /// Heartbeat endpoints it keeps connections to.
    pub dialers: BTreeSet<Endpoint>,
    /// The routing last checked (each is checked once).
    pub(crate) checked: std::cell::Cell<*const Routing>,
}

enum Event {
    /// A frame for node `to`.
    Frame {
        to: usize,
        frame: Vec<u8>,
    },
    Data {
        to: usize,
        event: DataEvent,
    },
}

/// What identifies the cluster as each node sees it: (cluster key,
/// succession, key of the map in force, routing key, generation).
pub type Snapshot = Vec<(u64, Vec<NodeId>, u64, u64, i64)>;

pub struct Harness {
    pub nodes: Vec<SimNode>,
    pub now_ms: u64,
    events: VecDeque<Event>,
    /// Every frame the real nodes sent each other (seed material).
    pub traffic: Vec<Vec<u8>>,
    pub record_traffic: bool,
    /// Print the nodes' log lines (set `BOLIDE_FUZZ_LOG=1`).
    pub print_log: bool,
    /// Metadata applied and partitions dropped, once formed.
    changes: Vec<String>,
    formed: bool,
    /// (node index, ticket) of every [`Action::Shared`], in order.
    pub shared: Vec<(usize, u64)>,
    /// Lose every metadata acknowledgement (a member that does not answer).
    pub lose_metadata_acks: bool,
}

impl Harness {
    /// Three nodes, just started: the first has no seed, the others seed
    /// the first's heartbeat endpoint.
    pub fn new() -> Harness {
        let nodes = MEMBERS
            .iter()
            .enumerate()
            .map(|(index, &id)| {
                let config = Config {
                    node: id,
                    cluster_name: CLUSTER_NAME.to_owned(),
                    boot_id: id * 7919,
                    heartbeat: heartbeat_endpoint(index),
                    fabric: endpoint(index, 3001),
                    service: vec![endpoint(index, 3000)],
                    redis: Vec::new(),
                    seeds: if index == 0 {
                        Vec::new()
                    } else {
                        vec![heartbeat_endpoint(0)]
                    },
                    heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
                    heartbeat_timeout: HEARTBEAT_TIMEOUT,
                    fabric_latency_max_ms: 5,
                    min_cluster_size: 1,
                    namespaces: vec![NamespaceConfig::ap(
                        NAMESPACE,
                        REPLICATION_FACTOR,
                        ConflictPolicy::Generation,
                    )],
                };
                let entropy = Arc::new(AtomicU64::new(id));
                SimNode {
                    id,
                    machine: ClusterNode::new(
                        config,
                        vec![empty_versions()],
                        Vec::new(),
                        Box::new(SeededEntropy(Arc::clone(&entropy))),
                        0,
                    ),
                    entropy,
                    routing: None,
                    dialers: BTreeSet::new(),
                    checked: std::cell::Cell::new(std::ptr::null()),
                }
            })
            .collect();
        Harness {
            nodes,
            now_ms: 0,
            events: VecDeque::new(),
            traffic: Vec::new(),
            record_traffic: false,
            print_log: std::env::var_os("BOLIDE_FUZZ_LOG").is_some(),
            changes: Vec::new(),
            formed: false,
            shared: Vec::new(),
            lose_metadata_acks: false,
        }
    }

    /// Three nodes in one settled cluster with no migrations left: a fork
    /// of one formed once per thread (forming is most of a short run).
    pub fn formed() -> Harness {
        thread_local! {
            static FORMED: Harness = {
                let mut harness = Harness::new();
                harness.form();
                harness
            };
        }
        FORMED.with(Harness::fork)
    }

    /// An independent copy, in the same state, continuing the same way.
    pub fn fork(&self) -> Harness {
        assert!(self.events.is_empty(), "fork between steps");
        Harness {
            nodes: self
                .nodes
                .iter()
                .map(|node| {
                    let entropy = Arc::new(AtomicU64::new(node.entropy.load(Relaxed)));
                    SimNode {
                        id: node.id,
                        machine: node
                            .machine
                            .fork(Box::new(SeededEntropy(Arc::clone(&entropy)))),
                        entropy,
                        routing: node.routing.clone(),
                        dialers: node.dialers.clone(),
                        checked: std::cell::Cell::new(std::ptr::null()),
                    }
                })
                .collect(),
            now_ms: self.now_ms,
            events: VecDeque::new(),
            traffic: Vec::new(),
            record_traffic: self.record_traffic,
            print_log: self.print_log,
            changes: Vec::new(),
            formed: self.formed,
            shared: Vec::new(),
            lose_metadata_acks: false,
        }
    }

    /// Runs until the three form one settled cluster (panics if they do
    /// not within [`FORM_STEPS_MAX`] steps), then a little longer.
    pub fn form(&mut self) {
        let mut steps = 0;
        while !self.settled() {
            assert!(steps < FORM_STEPS_MAX, "the cluster did not form");
            self.step();
            steps += 1;
        }
        for _ in 0..20 {
            self.step();
        }
        assert!(self.settled(), "the cluster did not stay settled");
        self.formed = true;
        self.changes.clear();
    }

    /// One cluster of all three, its map in force everywhere, nothing left
    /// to migrate or signal.
    pub fn settled(&self) -> bool {
        let keys: BTreeSet<u64> = self.nodes.iter().map(|n| n.machine.cluster_key()).collect();
        keys.len() == 1
            && !keys.contains(&0)
            && self.nodes.iter().all(|node| {
                let status = node.machine.status(self.now_ms);
                status.cluster_size == MEMBERS.len()
                    && status.migrate_allowed
                    && status.migrate_partitions_remaining == 0
                    && status.namespaces.iter().all(|ns| ns.signals_remaining == 0)
                    && node
                        .routing
                        .as_ref()
                        .is_some_and(|routing| routing.key == status.cluster_key)
            })
    }

    pub fn principal(&self) -> NodeId {
        self.nodes[0].machine.status(self.now_ms).principal
    }

    pub fn snapshot(&self) -> Snapshot {
        self.nodes
            .iter()
            .map(|node| {
                let routing = node.routing.as_ref();
                (
                    node.machine.cluster_key(),
                    node.machine.succession().to_vec(),
                    node.machine.plan_key(),
                    routing.map_or(0, |r| r.key),
                    routing.map_or(-1, |r| r.generation),
                )
            })
            .collect()
    }

    /// Metadata applied and partitions dropped since the cluster formed.
    pub fn changes_since_formed(&self) -> &[String] {
        &self.changes
    }

    /// Advances the clock one tick: every node ticks, then everything
    /// they sent is delivered.
    pub fn step(&mut self) {
        self.now_ms += TICK_MS;
        for index in 0..self.nodes.len() {
            let now = self.now_ms;
            self.nodes[index].machine.tick(now, EPOCH_MS + now);
            self.collect(index);
        }
        self.deliver();
    }

    /// A forged peer's message, to node `to` (3: all of them), through
    /// the codec; then what the nodes send in answer is delivered.
    pub fn deliver_forged(&mut self, to: usize, envelope: &Envelope) {
        let mut frame = Vec::new();
        envelope.encode(&mut frame);
        let targets: Vec<usize> = if to >= self.nodes.len() {
            (0..self.nodes.len()).collect()
        } else {
            vec![to]
        };
        for to in targets {
            self.events.push_back(Event::Frame {
                to,
                frame: frame.clone(),
            });
        }
        self.deliver();
    }

    /// Every node's invariants, with its status (the full check).
    pub fn check_invariants(&self) {
        for index in 0..self.nodes.len() {
            crate::cluster_forged::check_node(index, self, true);
        }
    }

    /// The same without the status figures (cheap enough for every tick).
    pub fn check_quick(&self) {
        for index in 0..self.nodes.len() {
            crate::cluster_forged::check_node(index, self, false);
        }
    }

    fn index_of_endpoint(&self, endpoint: &Endpoint) -> Option<usize> {
        (0..self.nodes.len()).find(|&index| heartbeat_endpoint(index) == *endpoint)
    }

    fn index_of_node(&self, node: NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == node)
    }

    /// Takes node `index`'s actions: sends become events, the rest is
    /// recorded or done at once.
    fn collect(&mut self, index: usize) {
        for action in self.nodes[index].machine.take_actions() {
            match action {
                Action::Connect(endpoint) => {
                    self.nodes[index].dialers.insert(endpoint);
                }
                Action::Disconnect(endpoint) => {
                    self.nodes[index].dialers.remove(&endpoint);
                }
                Action::Broadcast(envelope) => {
                    let targets: Vec<usize> = self.nodes[index]
                        .dialers
                        .iter()
                        .filter_map(|endpoint| self.index_of_endpoint(endpoint))
                        .filter(|&to| to != index)
                        .collect();
                    self.send(targets, &envelope);
                }
                Action::Send {
                    endpoint, envelope, ..
                } => {
                    self.nodes[index].dialers.insert(endpoint.clone());
                    let targets: Vec<usize> =
                        self.index_of_endpoint(&endpoint).into_iter().collect();
                    self.send(targets, &envelope);
                }
                Action::Publish(routing) => self.nodes[index].routing = Some(routing),
                Action::Emigrate(emigration) => {
                    let from = self.nodes[index].id;
                    if let Some(to) = self.index_of_node(emigration.to) {
                        self.events.push_back(Event::Data {
                            to,
                            event: DataEvent::ImmigrationDone {
                                namespace: emigration.namespace,
                                pid: emigration.pid,
                                from,
                                key: emigration.key,
                            },
                        });
                        self.events.push_back(Event::Data {
                            to: index,
                            event: DataEvent::EmigrationDone {
                                namespace: emigration.namespace,
                                pid: emigration.pid,
                                to: emigration.to,
                                key: emigration.key,
                            },
                        });
                    }
                }
                Action::Drop { namespace, pid } => {
                    if self.formed {
                        self.changes.push(format!(
                            "node {:X} dropped partition {pid} of namespace {namespace}",
                            self.nodes[index].id
                        ));
                    }
                }
                Action::Metadata(item) => {
                    if self.formed {
                        self.changes.push(format!(
                            "node {:X} applied metadata {item:?}",
                            self.nodes[index].id
                        ));
                    }
                }
                Action::SaveSc { .. } => {}
                Action::Shared(ticket) => self.shared.push((index, ticket)),
                Action::Log(_, line) => {
                    if self.print_log {
                        eprintln!("{:>6} ms {:X}: {line}", self.now_ms, self.nodes[index].id);
                    }
                }
            }
        }
    }

    fn send(&mut self, targets: Vec<usize>, envelope: &Envelope) {
        if targets.is_empty()
            || (self.lose_metadata_acks
                && matches!(
                    envelope.message,
                    bolide_cluster::Message::MetadataAck { .. }
                ))
        {
            return;
        }
        let mut frame = Vec::new();
        envelope.encode(&mut frame);
        if self.record_traffic {
            self.traffic.push(frame.clone());
        }
        for to in targets {
            self.events.push_back(Event::Frame {
                to,
                frame: frame.clone(),
            });
        }
    }

    /// Delivers events until none is left (or the per-step bound).
    fn deliver(&mut self) {
        let mut handled = 0;
        while let Some(event) = self.events.pop_front() {
            handled += 1;
            assert!(
                handled <= EVENTS_PER_STEP_MAX,
                "the nodes keep messaging each other without end"
            );
            let now = self.now_ms;
            let to = match event {
                Event::Frame { to, frame } => {
                    let (header, body, total) = codec::split_frame(&frame)
                        .expect("a node's own frame is valid")
                        .expect("a node's own frame is whole");
                    assert_eq!(total, frame.len());
                    let envelope =
                        Envelope::decode(header.kind, body).expect("a node's own frame decodes");
                    self.nodes[to].machine.receive(envelope, now);
                    to
                }
                Event::Data { to, event } => {
                    self.nodes[to].machine.data_event(event, now);
                    to
                }
            };
            self.collect(to);
        }
    }
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new()
    }
}
