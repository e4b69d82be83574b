//! The cluster state machine of one node: membership, the partition-version
//! exchange, the rebalance and the partitions' migration bookkeeping, and
//! cluster-wide metadata, behind one interface: feed it time, messages and
//! the data path's reports; take its actions.

use crate::balance::PartitionOrders;
use crate::membership::{self, Change, Identity, Membership, Timing};
use crate::message::{Endpoint, Envelope, Message, NamespaceSummary, NamespaceVersions};
use crate::metadata::{Item, Metadata};
use crate::partitions::{Effects, Emigration, NamespaceState};
use crate::plan::{self, Member};
use crate::routing::{flag, ConflictPolicy, Route, Routing};
use crate::sc::{self, Availability, Roster, RosterOrders, Witness};
use crate::skew::SkewMonitor;
use crate::version::Version;
use crate::NodeId;
use bolide_types::PARTITION_COUNT;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Randomness (cluster keys), injected so a simulation replays exactly.
pub trait Entropy: Send {
    fn next_u64(&mut self) -> u64;
}

/// A namespace as the cluster sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    pub name: String,
    pub replication_factor: usize,
    pub conflict_policy: ConflictPolicy,
    /// Strong consistency: a roster owns it, partitions without a quorum
    /// are unavailable, and it has a regime.
    pub strong_consistency: bool,
    /// (SC) the active roster and the regime as this node last saved them.
    pub roster: Roster,
    pub regime: u32,
    /// This node's `rack-id` for the namespace (0: none). AP spreads each
    /// partition's replicas over the racks members name; SC takes racks
    /// from the roster (`node@rack`).
    pub rack_id: u32,
    /// (SC) per partition, the last rebalance at which this node saw it
    /// available, as saved (empty: none saved).
    pub witnesses: Vec<Witness>,
    /// (AP) nsup runs (`nsup-period` not 0): writes stop past 40 s of
    /// clock skew, as Aerospike's nsup stops them.
    pub nsup: bool,
}

impl NamespaceConfig {
    /// An AP namespace.
    pub fn ap(name: &str, replication_factor: usize, conflict_policy: ConflictPolicy) -> Self {
        NamespaceConfig {
            name: name.to_owned(),
            replication_factor,
            conflict_policy,
            strong_consistency: false,
            roster: Roster::default(),
            regime: 0,
            rack_id: 0,
            witnesses: Vec::new(),
            nsup: false,
        }
    }
}

/// A namespace's strong-consistency state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScState {
    pub enabled: bool,
    /// The roster in force (adopted at the last rebalance).
    pub roster: Roster,
    /// Never goes down; 0 only for AP.
    pub regime: u32,
    /// Partitions this node's sub-cluster may not serve, by the rules:
    /// some roster nodes missing (unavailable), or all present (dead).
    pub unavailable: u64,
    pub dead: u64,
    /// Writes refused (22) while the cluster's clock skew is past the
    /// namespace's limit.
    pub clock_skew_stop_writes: bool,
}

/// (SC) A namespace's lineage on this node: what each partition's copies
/// are judged by at a rebalance, and what must be saved before a map is
/// used. Kept out of [`ScState`], which statistics copy often.
#[derive(Clone, Debug, Default)]
struct Lineage {
    /// Per partition, the last rebalance at which this node saw it
    /// available (empty for AP).
    witnesses: Vec<Witness>,
    /// Per partition, the verdict of the last rebalance.
    verdicts: Vec<Availability>,
    /// The active roster's orders (computed once per roster).
    orders: Option<(Roster, RosterOrders)>,
    /// Versions changed since the last save (a migration ended, a
    /// revive): saved at the next tick.
    unsaved: bool,
}

/// The metadata module that carries each SC namespace's pending roster.
pub const ROSTER_MODULE: &str = "roster";

/// A node's cluster configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub node: NodeId,
    pub cluster_name: String,
    /// Random per process start.
    pub boot_id: u64,
    pub heartbeat: Endpoint,
    pub fabric: Endpoint,
    /// Addresses clients reach this node at.
    pub service: Vec<Endpoint>,
    /// Where this node serves the Redis protocol (empty: nowhere).
    pub redis: Vec<Endpoint>,
    pub seeds: Vec<Endpoint>,
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout: u64,
    pub fabric_latency_max_ms: u64,
    pub min_cluster_size: usize,
    pub namespaces: Vec<NamespaceConfig>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// What the state machine asks its host to do.
#[derive(Clone, Debug)]
pub enum Action {
    /// Keep a heartbeat connection to this endpoint.
    Connect(Endpoint),
    /// Stop keeping it.
    Disconnect(Endpoint),
    /// Send to every heartbeat connection (pulses).
    Broadcast(Envelope),
    /// Send to one node, at its heartbeat endpoint.
    Send {
        to: NodeId,
        endpoint: Endpoint,
        envelope: Envelope,
    },
    /// The data path's routing changed.
    Publish(Arc<Routing>),
    /// Start sending a partition.
    Emigrate(Emigration),
    /// Delete this node's copy of a partition (namespace index, pid).
    Drop {
        namespace: usize,
        pid: u16,
    },
    /// A cluster-wide metadata item changed: apply (and persist) it.
    Metadata(Item),
    /// Every member has applied the item of [`ClusterNode::share_metadata`]
    /// that returned this ticket (or left, or did not answer within
    /// [`SHARE_WAIT_MS`]; the item then reaches it at the next cluster
    /// change).
    Shared(u64),
    /// (SC) a namespace's active roster, regime, partition versions or
    /// witnesses changed: persist them before anything else (a regime must
    /// never go down, even across restarts; a map must not be used before
    /// the witnesses of its rebalance are kept). `versions` are as a
    /// restart may trust them: a copy this node will give up (it is not a
    /// replica of the map) is saved as a subset.
    SaveSc {
        namespace: usize,
        roster: Roster,
        regime: u32,
        versions: Vec<Version>,
        witnesses: Vec<Witness>,
    },
    Log(Level, String),
}

/// What the data path reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataEvent {
    /// A whole copy of the partition arrived from `from`.
    ImmigrationDone {
        namespace: usize,
        pid: u16,
        from: NodeId,
        key: u64,
    },
    /// A copy sent to `to` was acknowledged whole.
    EmigrationDone {
        namespace: usize,
        pid: u16,
        to: NodeId,
        key: u64,
    },
}

/// A peer as clients learn it (`peers-clear-std`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub node: NodeId,
    pub service: Vec<Endpoint>,
    pub fabric: Endpoint,
    /// Where the peer serves the Redis protocol (empty: nowhere).
    pub redis: Vec<Endpoint>,
}

/// Per-namespace migration figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceStatus {
    pub tx_remaining: u64,
    pub rx_remaining: u64,
    pub signals_remaining: u64,
    pub tx_initial: u64,
    pub rx_initial: u64,
    pub signals_initial: u64,
    pub fresh_partitions: u64,
}

/// What `statistics` and the cluster info commands report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub node: NodeId,
    pub cluster_size: usize,
    pub cluster_key: u64,
    pub cluster_generation: u64,
    pub principal: NodeId,
    pub integrity: bool,
    pub is_member: bool,
    /// No exchange running: the partition map in force matches the cluster.
    pub migrate_allowed: bool,
    pub migrate_partitions_remaining: u64,
    pub succession: Vec<NodeId>,
    /// Members other than this node.
    pub peers: Vec<PeerInfo>,
    pub peers_generation: u64,
    pub heartbeat_nodes: usize,
    pub heartbeat_received_self: u64,
    pub heartbeat_received_foreign: u64,
    pub rebalance_generation: u64,
    pub last_rebalance_ms: u64,
    pub orphan_blocked: bool,
    pub namespaces: Vec<NamespaceStatus>,
    /// Per namespace, its strong-consistency state.
    pub sc: Vec<ScState>,
    /// A few partitions with migrations left, described (diagnostics).
    pub pending_sample: Vec<String>,
    /// Per namespace, the racks of the map in force and this node's.
    pub racks: Vec<NamespaceRacks>,
    /// Clock skew between the members (ms), as heartbeats show it.
    pub clock_skew_ms: u64,
    /// The skew at which strong-consistency writes stop (ms).
    pub clock_skew_stop_writes_ms: u64,
    /// Members whose clocks stand apart from the others' (while the skew
    /// is past a limit).
    pub clock_skew_outliers: Vec<NodeId>,
}

/// A namespace's racks, as `racks:` and `rack-ids` report them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceRacks {
    /// This node's configured `rack-id` (sent at the next exchange).
    pub configured: u32,
    /// The rack this node is placed by now: its rack in the map in force
    /// (SC: its roster rack), else its configured one.
    pub effective: u32,
    /// Every member of the map in force and the rack it is placed by (SC:
    /// roster members by their roster rack, the others by the rack they
    /// sent).
    pub members: Vec<(NodeId, u32)>,
    /// Every member of the map in force and the rack it sent (its
    /// configured `rack-id`: SC's `observed_nodes`).
    pub observed: Vec<(NodeId, u32)>,
}

#[derive(Clone)]
struct Exchange {
    key: u64,
    succession: Vec<NodeId>,
    mine: Vec<NamespaceVersions>,
    received: BTreeMap<NodeId, Vec<NamespaceVersions>>,
    /// (Principal) the commit, once sent.
    commit: Option<Vec<(NodeId, Vec<NamespaceVersions>)>>,
    applied: bool,
    last_sent_ms: u64,
}

pub struct ClusterNode {
    membership: Membership,
    namespaces: Vec<NamespaceState>,
    exchange: Option<Exchange>,
    /// The members of the partition map in force, and its key.
    plan_members: Vec<NodeId>,
    plan_key: u64,
    plan_fabric: Vec<Endpoint>,
    metadata: Metadata,
    sc: Vec<ScState>,
    /// Per namespace, this node's configured rack.
    rack_ids: Vec<u32>,
    /// Per namespace, the rack each member of the map in force is placed
    /// by, and the rack it sent (both aligned with `plan_members`).
    plan_racks: Vec<Vec<u32>>,
    plan_racks_sent: Vec<Vec<u32>>,
    lineage: Vec<Lineage>,
    /// Per namespace: nsup runs (AP skew rule).
    nsup: Vec<bool>,
    skew: SkewMonitor,
    entropy: Box<dyn Entropy>,
    actions: Vec<Action>,
    generation: i64,
    routing_dirty: bool,
    /// Publish without waiting for the next tick (the cluster key or the
    /// map changed: writes must stop or start at once).
    urgent: bool,
    blocked: bool,
    peers_generation: u64,
    peers_signature: Vec<PeerInfo>,
    rebalance_generation: u64,
    last_rebalance_ms: u64,
    seeds_connected: bool,
    /// Metadata items set here whose members' acknowledgements are awaited.
    shares: Vec<Share>,
    next_ticket: u64,
}

/// How long [`ClusterNode::share_metadata`] waits for the members'
/// acknowledgements.
pub const SHARE_WAIT_MS: u64 = 1_000;

/// A shared metadata item waiting for its acknowledgements.
#[derive(Clone)]
struct Share {
    ticket: u64,
    waiting: Vec<NodeId>,
    deadline_ms: u64,
}

impl ClusterNode {
    /// A node starting up. `versions[ns]` are its partition versions as
    /// its storage left them (NULL where it has no data).
    pub fn new(
        config: Config,
        versions: Vec<Vec<Version>>,
        metadata: Vec<Item>,
        entropy: Box<dyn Entropy>,
        now_ms: u64,
    ) -> ClusterNode {
        assert_eq!(versions.len(), config.namespaces.len());
        let timing = Timing::new(
            config.heartbeat_interval_ms,
            config.heartbeat_timeout,
            config.fabric_latency_max_ms,
        );
        let identity = Identity {
            node: config.node,
            cluster_name: config.cluster_name.clone(),
            boot_id: config.boot_id,
            heartbeat: config.heartbeat.clone(),
            fabric: config.fabric.clone(),
            service: config.service.clone(),
            redis: config.redis.clone(),
            seeds: config.seeds.clone(),
            namespaces: config
                .namespaces
                .iter()
                .map(|ns| NamespaceSummary {
                    name: ns.name.clone(),
                    replication_factor: ns.replication_factor.min(255) as u8,
                })
                .collect(),
            min_cluster_size: config.min_cluster_size,
        };
        let namespaces = config
            .namespaces
            .iter()
            .zip(versions)
            .map(|(ns, versions)| {
                let mut state = NamespaceState::new(
                    ns.name.clone(),
                    ns.replication_factor,
                    ns.conflict_policy,
                    versions,
                );
                state.strong_consistency = ns.strong_consistency;
                state
            })
            .collect();
        ClusterNode {
            membership: Membership::new(identity, timing, now_ms),
            namespaces,
            exchange: None,
            plan_members: vec![config.node],
            plan_key: 0,
            plan_fabric: vec![config.fabric.clone()],
            metadata: Metadata::new(metadata),
            shares: Vec::new(),
            next_ticket: 0,
            rack_ids: config.namespaces.iter().map(|ns| ns.rack_id).collect(),
            plan_racks: Vec::new(),
            plan_racks_sent: Vec::new(),
            sc: config
                .namespaces
                .iter()
                .map(|ns| ScState {
                    enabled: ns.strong_consistency,
                    roster: ns.roster.clone(),
                    regime: if ns.strong_consistency {
                        ns.regime.max(sc::FIRST_REGIME)
                    } else {
                        0
                    },
                    unavailable: PARTITION_COUNT as u64,
                    dead: 0,
                    clock_skew_stop_writes: false,
                })
                .collect(),
            lineage: config
                .namespaces
                .iter()
                .map(|ns| Lineage {
                    witnesses: match ns.strong_consistency {
                        true if ns.witnesses.len() == PARTITION_COUNT => ns.witnesses.clone(),
                        true => vec![Witness::NONE; PARTITION_COUNT],
                        false => Vec::new(),
                    },
                    verdicts: vec![Availability::Unavailable; PARTITION_COUNT],
                    orders: None,
                    unsaved: false,
                })
                .collect(),
            nsup: config.namespaces.iter().map(|ns| ns.nsup).collect(),
            skew: SkewMonitor::new(config.heartbeat_interval_ms, config.heartbeat_timeout),
            entropy,
            actions: Vec::new(),
            generation: -1,
            routing_dirty: true,
            urgent: false,
            blocked: false,
            peers_generation: 0,
            peers_signature: Vec::new(),
            rebalance_generation: 0,
            last_rebalance_ms: now_ms,
            seeds_connected: false,
        }
    }

    pub fn node(&self) -> NodeId {
        self.membership.node()
    }

    pub fn timing(&self) -> Timing {
        self.membership.timing
    }

    /// A copy of this node in its present state, drawing randomness from
    /// `entropy` from now on (tests and fuzzing start many runs from one
    /// formed cluster).
    pub fn fork(&self, entropy: Box<dyn Entropy>) -> ClusterNode {
        ClusterNode {
            membership: self.membership.clone(),
            namespaces: self.namespaces.clone(),
            exchange: self.exchange.clone(),
            plan_members: self.plan_members.clone(),
            plan_key: self.plan_key,
            plan_fabric: self.plan_fabric.clone(),
            metadata: self.metadata.clone(),
            shares: self.shares.clone(),
            next_ticket: self.next_ticket,
            sc: self.sc.clone(),
            rack_ids: self.rack_ids.clone(),
            plan_racks: self.plan_racks.clone(),
            plan_racks_sent: self.plan_racks_sent.clone(),
            lineage: self.lineage.clone(),
            nsup: self.nsup.clone(),
            skew: self.skew.clone(),
            entropy,
            actions: self.actions.clone(),
            generation: self.generation,
            routing_dirty: self.routing_dirty,
            urgent: self.urgent,
            blocked: self.blocked,
            peers_generation: self.peers_generation,
            peers_signature: self.peers_signature.clone(),
            rebalance_generation: self.rebalance_generation,
            last_rebalance_ms: self.last_rebalance_ms,
            seeds_connected: self.seeds_connected,
        }
    }

    /// The actions produced so far, in order.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    fn log(&mut self, level: Level, line: String) {
        self.actions.push(Action::Log(level, line));
    }

    fn send(&mut self, to: NodeId, message: Message) {
        let Some(endpoint) = self.endpoint_of(to) else {
            return;
        };
        let envelope = Envelope {
            from: self.node(),
            message,
        };
        self.actions.push(Action::Send {
            to,
            endpoint,
            envelope,
        });
    }

    fn endpoint_of(&self, node: NodeId) -> Option<Endpoint> {
        self.membership
            .peers
            .get(&node)
            .map(|peer| peer.pulse.heartbeat.clone())
    }

    /// Advances time: pulses, clustering, retransmits.
    pub fn tick(&mut self, now_ms: u64, clock_ms: u64) {
        if !self.seeds_connected {
            self.seeds_connected = true;
            for seed in self.membership.identity.seeds.clone() {
                if seed != self.membership.identity.heartbeat {
                    self.membership.connected.insert(seed.clone());
                    self.actions.push(Action::Connect(seed));
                }
            }
        }
        if self.membership.pulse_due(now_ms) {
            let pulse = self.membership.pulse(now_ms, clock_ms);
            self.actions.push(Action::Broadcast(Envelope {
                from: self.node(),
                message: Message::Pulse(pulse),
            }));
        }
        let mut sends = Vec::new();
        let mut log = Vec::new();
        let change = self
            .membership
            .tick(now_ms, self.entropy.as_mut(), &mut sends, &mut log);
        self.flush_membership(sends, log);
        if let Some(change) = change {
            self.on_change(change, now_ms);
        }
        self.exchange_retransmit(now_ms);
        let mut effects = Effects::default();
        for (index, ns) in self.namespaces.iter_mut().enumerate() {
            ns.resend_signals(index, now_ms, &mut effects);
        }
        self.apply_effects(effects);
        self.check_orphan_block(now_ms);
        for endpoint in self.membership.forget_old_peers(now_ms) {
            self.actions.push(Action::Disconnect(endpoint));
        }
        self.update_peers();
        self.skew.tick(now_ms, clock_ms);
        self.check_clock_skew(now_ms);
        self.save_changed_lineage();
        self.settle_shares(now_ms);
        self.publish_if_dirty();
    }

    /// Completes the shares every member has acknowledged, whose members
    /// left, or whose wait is over.
    fn settle_shares(&mut self, now_ms: u64) {
        let succession = &self.membership.succession;
        let mut done = Vec::new();
        self.shares.retain_mut(|share| {
            share.waiting.retain(|node| succession.contains(node));
            let settled = share.waiting.is_empty() || now_ms >= share.deadline_ms;
            if settled {
                done.push((share.ticket, share.waiting.len()));
            }
            !settled
        });
        for (ticket, missing) in done {
            if missing > 0 {
                self.log(
                    Level::Warn,
                    format!(
                        "metadata change {ticket} not acknowledged by {missing} member(s) within {SHARE_WAIT_MS} ms; they get it at the next cluster change"
                    ),
                );
            }
            self.actions.push(Action::Shared(ticket));
        }
    }

    /// Takes a message from another node.
    pub fn receive(&mut self, envelope: Envelope, now_ms: u64) {
        let from = envelope.from;
        match envelope.message {
            Message::Pulse(pulse) => {
                self.skew
                    .observe(from, pulse.boot_id, pulse.clock_ms, now_ms);
                let before = self.membership.connected.clone();
                let mut log = Vec::new();
                self.membership.on_pulse(from, pulse, now_ms, &mut log);
                for line in log {
                    self.log(Level::Warn, line);
                }
                for endpoint in self.membership.connected.clone() {
                    if !before.contains(&endpoint) && endpoint != self.membership.identity.heartbeat
                    {
                        self.actions.push(Action::Connect(endpoint));
                    }
                }
            }
            Message::ExchangeData { key, namespaces } => {
                self.on_exchange_data(from, key, namespaces)
            }
            Message::ExchangeCommit { key, members } => {
                self.on_exchange_commit(from, key, members, now_ms)
            }
            Message::AllDone {
                key,
                namespace,
                pid,
            } => {
                // Only a member of the map in force signals its partitions.
                if key != self.plan_key || key == 0 || self.member_of(from).is_none() {
                    return;
                }
                let Some(index) = self.namespaces.iter().position(|ns| ns.name == namespace) else {
                    return;
                };
                let mut effects = Effects::default();
                let ack = self.namespaces[index].all_done(index, usize::from(pid), &mut effects);
                self.apply_effects(effects);
                if ack {
                    self.send(
                        from,
                        Message::AllDoneAck {
                            key,
                            namespace,
                            pid,
                        },
                    );
                }
            }
            Message::AllDoneAck {
                key,
                namespace,
                pid,
            } => {
                if key != self.plan_key || key == 0 {
                    return;
                }
                let member = self.member_of(from);
                if let (Some(ns), Some(member)) = (
                    self.namespaces.iter_mut().find(|ns| ns.name == namespace),
                    member,
                ) {
                    ns.all_done_ack(usize::from(pid), member);
                }
            }
            Message::MetadataAck { ticket } => {
                if let Some(share) = self.shares.iter_mut().find(|share| share.ticket == ticket) {
                    share.waiting.retain(|&node| node != from);
                }
                self.settle_shares(now_ms);
            }
            Message::Metadata { items, ticket, .. } => {
                // Items come from the members of this node's cluster: from
                // anyone else (a node of another cluster, a forged sender)
                // they could truncate or redefine this node's data. A
                // member's items missed here arrive again at the next
                // cluster change, when every member sends all of its own.
                let member = from != self.node() && self.membership.succession.contains(&from);
                if !member {
                    return;
                }
                for item in items {
                    if self.metadata.merge(item.clone()) {
                        self.actions.push(Action::Metadata(item));
                    }
                }
                if ticket != 0 {
                    // After the items' actions: applied before acknowledged.
                    self.send(from, Message::MetadataAck { ticket });
                }
            }
            message => {
                let mut sends = Vec::new();
                let mut log = Vec::new();
                let change = self
                    .membership
                    .on_message(from, message, now_ms, &mut sends, &mut log);
                self.flush_membership(sends, log);
                if let Some(change) = change {
                    self.on_change(change, now_ms);
                }
            }
        }
        if self.urgent {
            self.publish_if_dirty();
        }
    }

    /// Takes a report from the data path.
    pub fn data_event(&mut self, event: DataEvent, now_ms: u64) {
        let mut effects = Effects::default();
        let me = self.me();
        match event {
            DataEvent::ImmigrationDone {
                namespace,
                pid,
                from,
                key,
            } => {
                let Some(from) = self.member_of(from).filter(|_| key == self.plan_key) else {
                    return;
                };
                let members = self.plan_members.clone();
                if let Some(ns) = self.namespaces.get_mut(namespace) {
                    ns.immigration_done(
                        namespace,
                        usize::from(pid),
                        from,
                        &members,
                        me,
                        now_ms,
                        &mut effects,
                    );
                }
                // A node taking a partition over claims it at once: the
                // node that handed it over drops its claim only once the
                // acknowledgement reaches it (and at its next tick): the
                // two claims overlap instead of leaving a gap between them.
                // (A client that reads the two nodes' maps on either side
                // of the handoff can still miss both until its next tend.)
                self.urgent |= effects.claims_changed;
            }
            DataEvent::EmigrationDone {
                namespace,
                pid,
                to,
                key,
            } => {
                let Some(to) = self.member_of(to).filter(|_| key == self.plan_key) else {
                    return;
                };
                if let Some(ns) = self.namespaces.get_mut(namespace) {
                    ns.emigration_done(namespace, usize::from(pid), to, me, now_ms, &mut effects);
                }
            }
        }
        self.apply_effects(effects);
        if self.urgent {
            self.publish_if_dirty();
        }
    }

    /// Sets a cluster-wide metadata item here and sends it to every member.
    pub fn set_metadata(
        &mut self,
        module: &str,
        key: &str,
        value: &str,
        deleted: bool,
        clock_ms: u64,
    ) {
        self.spread_metadata(module, key, value, deleted, clock_ms, 0);
    }

    /// [`ClusterNode::set_metadata`], and [`Action::Shared`] with the
    /// returned ticket once every member has applied the item (or left, or
    /// [`SHARE_WAIT_MS`] passed).
    pub fn share_metadata(
        &mut self,
        module: &str,
        key: &str,
        value: &str,
        deleted: bool,
        clock_ms: u64,
        now_ms: u64,
    ) -> u64 {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        let waiting = self.spread_metadata(module, key, value, deleted, clock_ms, ticket);
        self.shares.push(Share {
            ticket,
            waiting,
            deadline_ms: now_ms + SHARE_WAIT_MS,
        });
        self.settle_shares(now_ms);
        ticket
    }

    /// Sets an item and sends it to every other member; returns them.
    fn spread_metadata(
        &mut self,
        module: &str,
        key: &str,
        value: &str,
        deleted: bool,
        clock_ms: u64,
        ticket: u64,
    ) -> Vec<NodeId> {
        let item = self.metadata.set(module, key, value, deleted, clock_ms);
        self.actions.push(Action::Metadata(item.clone()));
        let me = self.node();
        let others: Vec<NodeId> = self
            .membership
            .succession
            .iter()
            .copied()
            .filter(|&member| member != me)
            .collect();
        for &member in &others {
            self.send(
                member,
                Message::Metadata {
                    items: vec![item.clone()],
                    sync: false,
                    ticket,
                },
            );
        }
        others
    }

    /// (At an exchange's commit) an SC namespace takes the next regime and
    /// adopts the latest staged roster any member sent (as Aerospike's
    /// exchange adopts the pending roster of the highest generation), so
    /// that every member plans with the same roster; both are saved with
    /// the rebalance's witnesses before anything is served.
    fn adopt_sc(&mut self, index: usize, regime: u32, sent: Vec<Option<Item>>) {
        let Some(name) = self.namespaces.get(index).map(|ns| ns.name.clone()) else {
            return;
        };
        for item in sent.into_iter().flatten() {
            if item.module == ROSTER_MODULE && item.key == name && self.metadata.merge(item.clone())
            {
                self.actions.push(Action::Metadata(item));
            }
        }
        let pending = self
            .metadata
            .get(ROSTER_MODULE, &name)
            .filter(|item| !item.deleted)
            .and_then(|item| Roster::parse(&item.value).ok());
        let Some(state) = self.sc.get_mut(index).filter(|sc| sc.enabled) else {
            return;
        };
        state.regime = state.regime.max(regime);
        if let Some(pending) = pending {
            if pending != state.roster {
                state.roster = pending;
            }
        }
        self.log(
            Level::Info,
            format!("{{{name}}} eventual-regime {regime} ready"),
        );
    }

    /// (SC) Saves namespace `index`'s roster, regime, versions and
    /// witnesses (see [`Action::SaveSc`]).
    fn save_sc(&mut self, index: usize) {
        let Some(state) = self.sc.get(index).filter(|sc| sc.enabled) else {
            return;
        };
        let action = Action::SaveSc {
            namespace: index,
            roster: state.roster.clone(),
            regime: state.regime,
            versions: self.saved_versions(index),
            witnesses: self.lineage[index].witnesses.clone(),
        };
        self.lineage[index].unsaved = false;
        self.actions.push(action);
    }

    /// Saves the namespaces whose versions changed since their last save.
    fn save_changed_lineage(&mut self) {
        for index in 0..self.lineage.len() {
            if self.lineage[index].unsaved {
                self.save_sc(index);
            }
        }
    }

    /// A namespace's versions as a restart may trust them: a copy of an
    /// available partition this node is not a replica of (it will hand it
    /// off or drop it) is saved as a subset, so that a restart after its
    /// records are gone never claims it whole. Unavailable partitions keep
    /// their versions (nothing moves them).
    pub fn saved_versions(&self, index: usize) -> Vec<Version> {
        let ns = &self.namespaces[index];
        let verdicts = &self.lineage[index].verdicts;
        let me = self.me();
        let mut versions = ns.versions.clone();
        let Some(plan) = &ns.plan else {
            return versions;
        };
        for (pid, version) in versions.iter_mut().enumerate() {
            let available = verdicts.get(pid) == Some(&Availability::Available);
            let replica = plan.partitions[pid]
                .replica_position(me, plan.n_replicas)
                .is_some();
            if available && !replica && !version.is_null() {
                version.subset = true;
            }
        }
        versions
    }

    /// `revive:` of namespace `index` (every SC namespace when None): the
    /// partitions the last rebalance found dead are flagged revived here
    /// (`r`); the next rebalance (`recluster:`) serves them with what
    /// their copies hold. Returns how many were flagged.
    pub fn revive(&mut self, index: Option<usize>) -> u64 {
        let mut revived = 0;
        for ns in 0..self.namespaces.len() {
            if index.is_some_and(|wanted| wanted != ns) || !self.sc[ns].enabled {
                continue;
            }
            let mut flagged = 0;
            for pid in 0..PARTITION_COUNT {
                if self.lineage[ns].verdicts[pid] == Availability::Dead {
                    self.namespaces[ns].versions[pid].revived = true;
                    flagged += 1;
                }
            }
            if flagged > 0 {
                self.lineage[ns].unsaved = true;
                let line = format!(
                    "{{{}}} revive: {flagged} dead partitions flagged - issue 'recluster:' command",
                    self.namespaces[ns].name
                );
                self.log(Level::Info, line);
            }
            revived += flagged;
        }
        self.save_changed_lineage();
        revived
    }

    /// Compares the cluster's clock skew with each namespace's limit;
    /// writes stop (and start again) with the next routing.
    fn check_clock_skew(&mut self, now_ms: u64) {
        let me = self.node();
        let members = self.membership.succession.clone();
        let (skew_ms, _) = self.skew.skew(&members, me, now_ms);
        let sc_limit = self.skew.stop_writes_ms();
        let mut lines = Vec::new();
        for (index, state) in self.sc.iter_mut().enumerate() {
            let nsup = self.nsup.get(index).copied().unwrap_or(false);
            let stop = if state.enabled {
                skew_ms >= sc_limit
            } else {
                nsup && skew_ms >= crate::skew::AP_STOP_WRITES_MS
            };
            if stop != state.clock_skew_stop_writes {
                state.clock_skew_stop_writes = stop;
                self.routing_dirty = true;
                self.urgent = true;
                let name = &self.namespaces[index].name;
                lines.push(if stop {
                    (
                        Level::Warn,
                        format!("{{{name}}} clock skew {skew_ms} ms: writes stopped"),
                    )
                } else {
                    (
                        Level::Info,
                        format!("{{{name}}} clock skew {skew_ms} ms: writes allowed again"),
                    )
                });
            }
        }
        for (level, line) in lines {
            self.log(level, line);
        }
    }

    /// `recluster:`: the principal runs a new exchange now (a staged roster
    /// takes effect). Whether this node is the principal.
    pub fn recluster(&mut self, now_ms: u64) -> bool {
        self.membership.request_recluster(now_ms)
    }

    /// Sets this node's `rack-id` for namespace `index` (at most
    /// [`sc::RACK_ID_MAX`]). It is sent at the next exchange: placement
    /// changes at the next rebalance (`recluster:`, or any cluster change).
    pub fn set_rack_id(&mut self, index: usize, rack: u32) {
        assert!(rack <= sc::RACK_ID_MAX);
        if let Some(held) = self.rack_ids.get_mut(index) {
            *held = rack;
        }
    }

    /// Each namespace's strong-consistency state.
    pub fn sc(&self) -> &[ScState] {
        &self.sc
    }

    /// (SC) namespace `index`'s witnesses (empty for AP).
    pub fn witnesses(&self, index: usize) -> &[Witness] {
        self.lineage
            .get(index)
            .map_or(&[][..], |lineage| &lineage.witnesses[..])
    }

    /// (SC) each partition's verdict at the last rebalance.
    pub fn verdicts(&self, index: usize) -> &[Availability] {
        self.lineage
            .get(index)
            .map_or(&[][..], |lineage| &lineage.verdicts[..])
    }

    pub fn metadata(&self) -> impl Iterator<Item = &Item> {
        self.metadata.items()
    }

    fn me(&self) -> Member {
        self.member_of(self.node()).unwrap_or(0)
    }

    fn member_of(&self, node: NodeId) -> Option<Member> {
        self.plan_members
            .iter()
            .position(|&m| m == node)
            .map(|index| index as Member)
    }

    fn flush_membership(&mut self, sends: Vec<(NodeId, Message)>, log: Vec<String>) {
        for line in log {
            self.log(Level::Info, line);
        }
        for (to, message) in sends {
            self.send(to, message);
        }
    }

    fn on_change(&mut self, change: Change, now_ms: u64) {
        self.routing_dirty = true;
        self.urgent = true;
        match change {
            Change::Orphaned => {
                self.exchange = None;
            }
            Change::Committed { key, succession } => {
                let mine = self.my_versions();
                let principal = succession[0];
                self.log(
                    Level::Info,
                    format!("data exchange started with cluster key {key:x}"),
                );
                let mut exchange = Exchange {
                    key,
                    succession,
                    mine: mine.clone(),
                    received: BTreeMap::new(),
                    commit: None,
                    applied: false,
                    last_sent_ms: now_ms,
                };
                if principal == self.node() {
                    exchange.received.insert(self.node(), mine);
                    self.exchange = Some(exchange);
                    self.try_commit_exchange(now_ms);
                } else {
                    self.exchange = Some(exchange);
                    self.send(
                        principal,
                        Message::ExchangeData {
                            key,
                            namespaces: mine,
                        },
                    );
                }
            }
        }
    }

    fn my_versions(&self) -> Vec<NamespaceVersions> {
        self.namespaces
            .iter()
            .enumerate()
            .map(|(index, ns)| {
                let sc = self.sc.get(index).filter(|sc| sc.enabled);
                NamespaceVersions {
                    name: ns.name.clone(),
                    replication_factor: ns.replication_factor.min(255) as u8,
                    versions: ns.versions.clone(),
                    regime: self.sc.get(index).map_or(0, |sc| sc.regime),
                    rack_id: self.rack_ids.get(index).copied().unwrap_or(0),
                    witnesses: match sc {
                        Some(_) => self.lineage[index].witnesses.clone(),
                        None => Vec::new(),
                    },
                    pending_roster: sc.and_then(|_| {
                        self.metadata
                            .get(ROSTER_MODULE, &ns.name)
                            .filter(|item| !item.deleted)
                            .cloned()
                    }),
                }
            })
            .collect()
    }

    fn exchange_retransmit(&mut self, now_ms: u64) {
        let interval = self.membership.timing.interval;
        let Some(exchange) = &mut self.exchange else {
            return;
        };
        if exchange.applied || now_ms < exchange.last_sent_ms + interval {
            return;
        }
        exchange.last_sent_ms = now_ms;
        let principal = exchange.succession[0];
        if principal == self.membership.node() {
            return;
        }
        let message = Message::ExchangeData {
            key: exchange.key,
            namespaces: exchange.mine.clone(),
        };
        self.send(principal, message);
    }

    fn on_exchange_data(&mut self, from: NodeId, key: u64, namespaces: Vec<NamespaceVersions>) {
        let me = self.node();
        let Some(exchange) = &mut self.exchange else {
            return;
        };
        if exchange.key != key
            || exchange.succession[0] != me
            || !exchange.succession.contains(&from)
        {
            return;
        }
        if let Some(commit) = &exchange.commit {
            // It missed the commit: send it again.
            let message = Message::ExchangeCommit {
                key,
                members: commit.clone(),
            };
            self.send(from, message);
            return;
        }
        exchange.received.insert(from, namespaces);
        let now_ms = exchange.last_sent_ms;
        self.try_commit_exchange(now_ms);
    }

    /// (Principal) once every member's versions are in, commits them all.
    fn try_commit_exchange(&mut self, now_ms: u64) {
        let Some(exchange) = &mut self.exchange else {
            return;
        };
        if exchange.commit.is_some()
            || !exchange
                .succession
                .iter()
                .all(|node| exchange.received.contains_key(node))
        {
            return;
        }
        let members: Vec<(NodeId, Vec<NamespaceVersions>)> = exchange
            .succession
            .iter()
            .map(|node| {
                (
                    *node,
                    exchange.received.get(node).cloned().unwrap_or_default(),
                )
            })
            .collect();
        exchange.commit = Some(members.clone());
        let key = exchange.key;
        let others: Vec<NodeId> = exchange
            .succession
            .iter()
            .copied()
            .filter(|&node| node != self.membership.node())
            .collect();
        for node in others {
            self.send(
                node,
                Message::ExchangeCommit {
                    key,
                    members: members.clone(),
                },
            );
        }
        let me = self.node();
        self.on_exchange_commit(me, key, members, now_ms);
    }

    fn on_exchange_commit(
        &mut self,
        from: NodeId,
        key: u64,
        members: Vec<(NodeId, Vec<NamespaceVersions>)>,
        now_ms: u64,
    ) {
        let Some(exchange) = &self.exchange else {
            return;
        };
        if exchange.key != key || exchange.applied || exchange.succession[0] != from {
            return;
        }
        let succession = exchange.succession.clone();
        let listed: Vec<NodeId> = members.iter().map(|(node, _)| *node).collect();
        if listed != succession {
            self.log(
                Level::Warn,
                format!("exchange commit for {key:x} lists other members; ignored"),
            );
            return;
        }
        // Every member must hold every namespace with the same RF.
        let mut per_namespace: Vec<Vec<Vec<Version>>> = vec![Vec::new(); self.namespaces.len()];
        let mut regimes: Vec<Vec<u32>> = vec![Vec::new(); self.namespaces.len()];
        let mut racks: Vec<Vec<u32>> = vec![Vec::new(); self.namespaces.len()];
        let mut witnesses: Vec<Vec<Vec<Witness>>> = vec![Vec::new(); self.namespaces.len()];
        let mut rosters: Vec<Vec<Option<Item>>> = vec![Vec::new(); self.namespaces.len()];
        for (node, namespaces) in &members {
            for (index, ns) in self.namespaces.iter().enumerate() {
                match namespaces.iter().find(|theirs| theirs.name == ns.name) {
                    Some(theirs)
                        if usize::from(theirs.replication_factor)
                            == ns.replication_factor.min(255) =>
                    {
                        per_namespace[index].push(theirs.versions.clone());
                        regimes[index].push(theirs.regime);
                        racks[index].push(theirs.rack_id);
                        witnesses[index].push(theirs.witnesses.clone());
                        rosters[index].push(theirs.pending_roster.clone());
                    }
                    _ => {
                        let line = format!(
                            "node {node:x} has unmatched namespace '{}' or replication factor; exchange {key:x} abandoned",
                            ns.name
                        );
                        self.log(Level::Warn, line);
                        return;
                    }
                }
            }
        }
        let mut next = Vec::with_capacity(regimes.len());
        for (index, regimes) in regimes.iter().enumerate() {
            match sc::next_regime(regimes) {
                Some(regime) => next.push(regime),
                None => {
                    let line = format!(
                        "{{{}}} has mixture of AP and SC nodes; abandoned exchange {key:x} - fix configuration conflict",
                        self.namespaces[index].name
                    );
                    self.log(Level::Warn, line);
                    return;
                }
            }
        }
        if let Some(exchange) = &mut self.exchange {
            exchange.applied = true;
        }
        for ((index, regime), sent) in next.into_iter().enumerate().zip(rosters) {
            self.adopt_sc(index, regime, sent);
        }
        self.rebalance(key, succession, per_namespace, racks, witnesses, now_ms);
    }

    fn rebalance(
        &mut self,
        key: u64,
        succession: Vec<NodeId>,
        versions: Vec<Vec<Vec<Version>>>,
        racks: Vec<Vec<u32>>,
        witnesses: Vec<Vec<Vec<Witness>>>,
        now_ms: u64,
    ) {
        let previous = std::mem::replace(&mut self.plan_members, succession.clone());
        self.plan_key = key;
        self.plan_fabric = succession
            .iter()
            .map(|&node| {
                if node == self.node() {
                    self.membership.identity.fabric.clone()
                } else {
                    self.membership
                        .peers
                        .get(&node)
                        .map(|peer| peer.pulse.fabric.clone())
                        .unwrap_or_else(|| self.membership.identity.fabric.clone())
                }
            })
            .collect();
        let me = self.me();
        let orders = PartitionOrders::compute(&succession);
        let mut effects = Effects::default();
        let mut placed_by = Vec::with_capacity(racks.len());
        self.plan_racks_sent = racks.clone();
        for (((index, mut versions), witnesses), racks) in
            versions.into_iter().enumerate().zip(witnesses).zip(racks)
        {
            assert_eq!(racks.len(), succession.len());
            let replication_factor = self.namespaces[index].replication_factor;
            let n_replicas = replication_factor.min(succession.len());
            let mut frozen = None;
            let (orders, racks) = if self.sc.get(index).is_some_and(|sc| sc.enabled) {
                let roster_orders = self.roster_orders(index);
                let roster = &self.sc[index].roster;
                let racks = roster_racks(roster, &succession, racks);
                let rows = roster_first_orders(
                    roster,
                    &roster_orders,
                    &succession,
                    &orders,
                    &racks,
                    replication_factor,
                );
                frozen = Some(self.judge_sc(
                    index,
                    key,
                    &succession,
                    &roster_orders,
                    &mut versions,
                    &witnesses,
                ));
                // This node plans with its copies as judged.
                if let Some(mine) = versions.get(usize::from(me)) {
                    self.namespaces[index].versions = mine.clone();
                }
                (rows, racks)
            } else {
                (orders.rack_aware(&racks, n_replicas), racks)
            };
            let ns = &mut self.namespaces[index];
            let plan = plan::plan_namespace(key, replication_factor, &orders, &versions);
            ns.apply_plan(
                index,
                plan,
                &succession,
                me,
                now_ms,
                &mut effects,
                frozen.as_deref(),
            );
            placed_by.push(racks);
        }
        // The witnesses of this rebalance are kept before its map is used.
        for index in 0..self.namespaces.len() {
            self.save_sc(index);
        }
        self.plan_racks = placed_by;
        self.warn_of_rack_mismatch();
        self.rebalance_generation += 1;
        self.last_rebalance_ms = now_ms;
        self.blocked = false;
        let joined: Vec<NodeId> = succession
            .iter()
            .copied()
            .filter(|n| !previous.contains(n))
            .collect();
        let left: Vec<NodeId> = previous
            .iter()
            .copied()
            .filter(|n| !succession.contains(n))
            .collect();
        self.log(
            Level::Info,
            format!("data exchange completed with cluster key {key:x}"),
        );
        let mut line = format!(
            "CLUSTER SIZE = {} (cluster key {key:x}, principal {:x}, members {})",
            succession.len(),
            succession[0],
            membership::list(&succession)
        );
        if !joined.is_empty() {
            line.push_str(&format!("; joined: {}", membership::list(&joined)));
        }
        if !left.is_empty() {
            line.push_str(&format!("; left: {}", membership::list(&left)));
        }
        self.log(Level::Info, line);
        let mut lines = Vec::new();
        for ns in &self.namespaces {
            let status = namespace_status(ns, me);
            lines.push(format!(
                "{{{}}} rebalanced: replication factor {}, expected migrations ({},{},{}) fresh-partitions {}",
                ns.name,
                ns.plan.as_ref().map_or(0, |p| p.n_replicas),
                status.tx_remaining,
                status.rx_remaining,
                status.signals_remaining,
                status.fresh_partitions
            ));
        }
        for line in lines {
            self.log(Level::Info, line);
        }
        self.apply_effects(effects);
        // Every member sends every metadata item it has to every other.
        let items: Vec<Item> = self.metadata.items().cloned().collect();
        if !items.is_empty() {
            let me = self.node();
            for member in succession.into_iter().filter(|&m| m != me) {
                self.send(
                    member,
                    Message::Metadata {
                        items: items.clone(),
                        sync: true,
                        ticket: 0,
                    },
                );
            }
        }
        self.routing_dirty = true;
        self.urgent = true;
    }

    /// The active roster's orders, computed once per roster.
    fn roster_orders(&mut self, index: usize) -> RosterOrders {
        let roster = &self.sc[index].roster;
        let replication_factor = self.namespaces[index].replication_factor;
        match &self.lineage[index].orders {
            Some((held, orders)) if held == roster => orders.clone(),
            _ => {
                let orders = RosterOrders::new(roster, replication_factor);
                self.lineage[index].orders = Some((roster.clone(), orders.clone()));
                orders
            }
        }
    }

    /// (SC) Judges every partition of namespace `index` at the rebalance at
    /// `key` (see [`sc::judge`]): the members' copies come back as the plan
    /// must see them, this node's witnesses of the available partitions
    /// become this rebalance's, and the verdicts are kept for the routing.
    /// Returns which partitions are frozen (not available here: nothing
    /// about them moves).
    fn judge_sc(
        &mut self,
        index: usize,
        key: u64,
        succession: &[NodeId],
        roster_orders: &RosterOrders,
        versions: &mut [Vec<Version>],
        witnesses: &[Vec<Witness>],
    ) -> Vec<bool> {
        let regime = self.sc[index].regime;
        let replication_factor = self.namespaces[index].replication_factor;
        let present = |node: NodeId| succession.contains(&node);
        let roster = &self.sc[index].roster;
        let all_roster_present = !roster.is_empty() && roster.nodes().into_iter().all(present);
        let lineage = &mut self.lineage[index];
        let mut frozen = vec![true; PARTITION_COUNT];
        let mut copies = vec![Version::NULL; versions.len()];
        let mut seen = vec![Witness::NONE; versions.len()];
        for pid in 0..PARTITION_COUNT {
            let rule = if roster.is_empty() {
                Availability::Unavailable
            } else {
                roster_orders.availability(pid as u16, replication_factor, &present)
            };
            for (member, copy) in copies.iter_mut().enumerate() {
                *copy = versions[member][pid];
                seen[member] = witnesses[member].get(pid).copied().unwrap_or(Witness::NONE);
            }
            let verdict = sc::judge(rule, all_roster_present, &mut copies, &seen);
            lineage.verdicts[pid] = verdict;
            if verdict == Availability::Available {
                frozen[pid] = false;
                lineage.witnesses[pid] = Witness { regime, key };
                for (member, copy) in copies.iter().enumerate() {
                    versions[member][pid] = *copy;
                }
            }
        }
        frozen
    }

    fn apply_effects(&mut self, effects: Effects) {
        if effects.claims_changed {
            self.routing_dirty = true;
        }
        for emigration in effects.emigrations {
            self.actions.push(Action::Emigrate(emigration));
        }
        for (namespace, pid) in effects.drops {
            self.actions.push(Action::Drop { namespace, pid });
            self.routing_dirty = true;
        }
        for (to, index, pid) in effects.signals {
            let Some(&node) = self.plan_members.get(usize::from(to)) else {
                continue;
            };
            let message = Message::AllDone {
                key: self.plan_key,
                namespace: self.namespaces[index].name.clone(),
                pid,
            };
            self.send(node, message);
        }
    }

    /// An orphan serves its last map for a while, then nothing.
    fn check_orphan_block(&mut self, now_ms: u64) {
        let blocked = self
            .membership
            .orphan_since_ms
            .is_some_and(|since| now_ms >= since + self.membership.timing.orphan_block)
            && self.plan_key != 0;
        if blocked && !self.blocked {
            self.log(
                Level::Warn,
                "blocking client transactions in orphan state!".to_owned(),
            );
            self.blocked = true;
            self.routing_dirty = true;
            self.urgent = true;
        }
    }

    fn update_peers(&mut self) {
        let me = self.node();
        let peers: Vec<PeerInfo> = self
            .membership
            .succession
            .iter()
            .filter(|&&node| node != me)
            .filter_map(|node| {
                self.membership.peers.get(node).map(|peer| PeerInfo {
                    node: *node,
                    service: peer.pulse.service.clone(),
                    fabric: peer.pulse.fabric.clone(),
                    redis: peer.pulse.redis.clone(),
                })
            })
            .collect();
        if peers != self.peers_signature {
            self.peers_signature = peers;
            self.peers_generation += 1;
        }
    }

    fn publish_if_dirty(&mut self) {
        if !self.routing_dirty {
            return;
        }
        self.routing_dirty = false;
        self.urgent = false;
        if self.plan_key != 0 {
            self.generation += 1;
        }
        let me = self.me();
        let routing = Routing {
            key: self.plan_key,
            cluster_key: self.membership.key,
            generation: self.generation,
            members: self.plan_members.clone(),
            me,
            namespaces: self
                .namespaces
                .iter()
                .map(|ns| ns.routing(me, self.blocked))
                .collect(),
            fabric: self.plan_fabric.clone(),
        };
        let mut routing = routing;
        for (index, ns) in routing.namespaces.iter_mut().enumerate() {
            let Some(state) = self.sc.get_mut(index) else {
                continue;
            };
            ns.clock_skew_stop_writes = state.clock_skew_stop_writes;
            if !state.enabled {
                continue;
            }
            let verdicts = &self.lineage[index].verdicts;
            let (unavailable, dead) = apply_sc_rules(state, ns, verdicts, self.plan_key);
            state.unavailable = unavailable;
            state.dead = dead;
        }
        self.actions.push(Action::Publish(Arc::new(routing)));
    }

    /// The figures `statistics` and the cluster info commands report.
    /// No membership change under way on this node (see
    /// [`Membership::quiet`]).
    pub fn membership_quiet(&self, now_ms: u64) -> bool {
        self.membership.quiet(now_ms)
    }

    pub fn status(&self, now_ms: u64) -> Status {
        let me = self.me();
        let membership = &self.membership;
        let namespaces: Vec<NamespaceStatus> = self
            .namespaces
            .iter()
            .map(|ns| namespace_status(ns, me))
            .collect();
        let remaining = namespaces
            .iter()
            .map(|ns| ns.tx_remaining + ns.rx_remaining)
            .sum();
        let (skew_ms, outliers) = self.skew.skew(&membership.succession, self.node(), now_ms);
        Status {
            node: self.node(),
            cluster_size: if self.blocked {
                0
            } else {
                membership.succession.len()
            },
            cluster_key: membership.key,
            cluster_generation: membership.cluster_generation,
            principal: membership.principal().unwrap_or(0),
            integrity: membership.integrity && !membership.is_orphan(),
            is_member: !membership.is_orphan(),
            migrate_allowed: self.plan_key != 0 && self.plan_key == membership.key,
            migrate_partitions_remaining: remaining,
            succession: membership.succession.clone(),
            peers: self.peers_signature.clone(),
            peers_generation: self.peers_generation,
            heartbeat_nodes: membership.alive(now_ms).count(),
            heartbeat_received_self: membership.received_self,
            heartbeat_received_foreign: membership.received_foreign,
            rebalance_generation: self.rebalance_generation,
            last_rebalance_ms: self.last_rebalance_ms,
            orphan_blocked: self.blocked,
            namespaces,
            sc: self.sc.clone(),
            pending_sample: self.pending_sample(20),
            racks: self.racks(me),
            clock_skew_ms: skew_ms,
            clock_skew_stop_writes_ms: self.skew.stop_writes_ms(),
            clock_skew_outliers: if skew_ms >= self.skew.stop_writes_ms() * 3 / 4 {
                outliers
            } else {
                Vec::new()
            },
        }
    }

    /// Every namespace's racks (see [`NamespaceRacks`]).
    fn racks(&self, me: Member) -> Vec<NamespaceRacks> {
        self.rack_ids
            .iter()
            .enumerate()
            .map(|(index, &configured)| {
                let of_plan = |racks: &Vec<Vec<u32>>| {
                    racks
                        .get(index)
                        .filter(|racks| {
                            self.plan_key != 0 && racks.len() == self.plan_members.len()
                        })
                        .map(|racks| -> Vec<(NodeId, u32)> {
                            self.plan_members
                                .iter()
                                .copied()
                                .zip(racks.iter().copied())
                                .collect()
                        })
                };
                let (Some(members), Some(observed)) =
                    (of_plan(&self.plan_racks), of_plan(&self.plan_racks_sent))
                else {
                    return NamespaceRacks {
                        configured,
                        effective: configured,
                        members: vec![(self.node(), configured)],
                        observed: vec![(self.node(), configured)],
                    };
                };
                let effective = members
                    .get(usize::from(me))
                    .map_or(configured, |&(_, rack)| rack);
                NamespaceRacks {
                    configured,
                    effective,
                    members,
                    observed,
                }
            })
            .collect()
    }

    /// (SC) a roster rack that differs from the rack this node is
    /// configured with is logged: it places by the roster's, and asadm's
    /// `show roster` would flag it.
    fn warn_of_rack_mismatch(&mut self) {
        let mut lines = Vec::new();
        for (index, state) in self.sc.iter().enumerate().filter(|(_, sc)| sc.enabled) {
            let configured = self.rack_ids.get(index).copied().unwrap_or(0);
            let Some(entry) = state.roster.entries.iter().find(|e| e.node == self.node()) else {
                continue;
            };
            if entry.rack != configured {
                lines.push(format!(
                    "{{{}}} roster places node {:x} on rack {} but its rack-id is {configured}",
                    self.namespaces[index].name,
                    self.node(),
                    entry.rack
                ));
            }
        }
        for line in lines {
            self.log(Level::Warn, line);
        }
    }

    /// Up to `limit` partitions with work left, described.
    pub fn pending_sample(&self, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        for ns in &self.namespaces {
            for (pid, local) in ns.local.iter().enumerate() {
                if out.len() >= limit {
                    return out;
                }
                let busy = !local.sources.is_empty()
                    || local.fill_from.is_some()
                    || !local.emigrating.is_empty()
                    || !local.signals.is_empty()
                    || local.awaiting_all_done
                    || !local.fills_pending.is_empty();
                if busy {
                    out.push(format!(
                        "{}:{pid} version {} master {} sources {:?} fill_from {:?} emigrating {:?} fills {:?} signals {:?} awaiting {}",
                        ns.name,
                        ns.versions[pid],
                        local.master,
                        local.sources,
                        local.fill_from,
                        local.emigrating,
                        local.fills_pending,
                        local.signals,
                        local.awaiting_all_done
                    ));
                }
            }
        }
        out
    }

    /// This node's version of every partition of namespace `index`.
    pub fn versions(&self, index: usize) -> &[Version] {
        &self.namespaces[index].versions
    }

    /// The local state of one partition (tests, the simulator).
    pub fn local(&self, index: usize, pid: usize) -> &crate::partitions::Local {
        &self.namespaces[index].local[pid]
    }

    pub fn plan_key(&self) -> u64 {
        self.plan_key
    }

    pub fn cluster_key(&self) -> u64 {
        self.membership.key
    }

    pub fn succession(&self) -> &[NodeId] {
        &self.membership.succession
    }
}

/// The rack each member of an SC namespace places by: a roster member its
/// roster rack, any other member the rack it sent.
fn roster_racks(roster: &Roster, succession: &[NodeId], sent: Vec<u32>) -> Vec<u32> {
    succession
        .iter()
        .zip(sent)
        .map(|(&node, sent)| {
            roster
                .entries
                .iter()
                .find(|entry| entry.node == node)
                .map_or(sent, |entry| entry.rack)
        })
        .collect()
}

/// Partition orders for an SC namespace: per partition, the present roster
/// members in the roster's (rack-aware) order, so the roster master
/// masters it whenever present; where roster replicas are missing, the
/// present roster members that stand in for them are taken on racks that
/// hold no copy yet; then the members not on the roster. `racks` is each
/// member's rack (see [`roster_racks`]).
fn roster_first_orders(
    roster: &Roster,
    roster_orders: &RosterOrders,
    succession: &[NodeId],
    orders: &PartitionOrders,
    racks: &[u32],
    replication_factor: usize,
) -> PartitionOrders {
    let n_replicas = replication_factor.min(succession.len());
    let index_of = |node: NodeId| succession.iter().position(|&m| m == node);
    let rack_of = |index: u8| racks[usize::from(index)];
    let spread = crate::balance::distinct_racks(racks) > 1;
    let mut rows = Vec::with_capacity(PARTITION_COUNT * succession.len());
    for pid in 0..PARTITION_COUNT as u16 {
        let start = rows.len();
        // The roster replicas present lead, in roster order.
        let mut replicas_present = 0;
        for (position, node) in roster_orders.order(pid).enumerate() {
            if let Some(index) = index_of(node) {
                if position < replication_factor {
                    replicas_present += 1;
                }
                rows.push(index as u8);
            }
        }
        if spread {
            let roster_part = &mut rows[start..];
            crate::balance::spread_over_racks(roster_part, rack_of, n_replicas, replicas_present);
        }
        for &index in orders.order(pid) {
            if !roster.contains(succession[usize::from(index)]) {
                rows.push(index);
            }
        }
        debug_assert_eq!(rows.len() - start, succession.len());
    }
    PartitionOrders::from_rows(succession.len(), rows)
}

/// Applies the rebalance's verdicts to a namespace's routing: a partition
/// this sub-cluster may not serve (by the rules, or for want of its data)
/// is unavailable here and claimed by nobody. Returns (unavailable, dead)
/// counts.
fn apply_sc_rules(
    state: &ScState,
    ns: &mut crate::routing::NamespaceRouting,
    verdicts: &[Availability],
    plan_key: u64,
) -> (u64, u64) {
    ns.regime = state.regime;
    ns.strong_consistency = true;
    if plan_key == 0 || state.roster.is_empty() {
        clear_all(ns);
        return (PARTITION_COUNT as u64, 0);
    }
    let (mut unavailable, mut dead) = (0u64, 0u64);
    for (pid, &verdict) in verdicts.iter().enumerate().take(PARTITION_COUNT) {
        if verdict == Availability::Available {
            continue;
        }
        if verdict == Availability::Dead {
            dead += 1;
        } else {
            unavailable += 1;
        }
        if let Some(route) = ns.routes.get_mut(pid) {
            *route = Route {
                flags: flag::UNAVAILABLE,
                ..Route::default()
            };
        }
        for column in ns.claims.iter_mut() {
            if let Some(byte) = column.get_mut(pid >> 3) {
                *byte &= !(0x80 >> (pid & 7));
            }
        }
    }
    (unavailable, dead)
}

fn clear_all(ns: &mut crate::routing::NamespaceRouting) {
    for route in ns.routes.iter_mut() {
        *route = Route {
            flags: flag::UNAVAILABLE,
            ..Route::default()
        };
    }
    for column in ns.claims.iter_mut() {
        *column = [0u8; crate::routing::BITMAP_BYTES];
    }
}

fn namespace_status(ns: &NamespaceState, me: Member) -> NamespaceStatus {
    let (tx, rx, signals) = ns.remaining(me);
    NamespaceStatus {
        tx_remaining: tx,
        rx_remaining: rx,
        signals_remaining: signals,
        tx_initial: ns.counts.tx_initial,
        rx_initial: ns.counts.rx_initial,
        signals_initial: ns.counts.signals_initial,
        fresh_partitions: ns.counts.fresh_partitions,
    }
}

/// NULL versions for a node that holds nothing.
pub fn empty_versions() -> Vec<Version> {
    vec![Version::NULL; PARTITION_COUNT]
}

#[cfg(test)]
mod tests {
    use super::*;

    const A1: NodeId = 0xA1;
    const A2: NodeId = 0xA2;
    const A3: NodeId = 0xA3;
    const A4: NodeId = 0xA4;
    const B1: NodeId = 0xB1;

    fn rows(roster: &str, succession: &[NodeId], sent: &[u32]) -> (Vec<Vec<NodeId>>, Vec<u32>) {
        let roster = Roster::parse(roster).expect("valid");
        let racks = roster_racks(&roster, succession, sent.to_vec());
        let orders = PartitionOrders::compute(succession);
        let roster_orders = RosterOrders::new(&roster, 2);
        let orders = roster_first_orders(&roster, &roster_orders, succession, &orders, &racks, 2);
        let rows = (0..PARTITION_COUNT as u16)
            .map(|pid| {
                orders
                    .order(pid)
                    .iter()
                    .map(|&i| succession[usize::from(i)])
                    .collect()
            })
            .collect();
        (rows, racks)
    }

    #[test]
    fn sc_members_place_by_their_roster_rack() {
        let roster = Roster::parse("A1@1,A2@2").expect("valid");
        // A2 sends rack 5 but the roster says 2; B1 is not on the roster.
        assert_eq!(
            roster_racks(&roster, &[B1, A2, A1], vec![3, 5, 1]),
            vec![3, 2, 1]
        );
    }

    #[test]
    fn a_missing_roster_replica_is_stood_in_for_on_another_rack() {
        let roster = "A1@1,A2@1,A3@2,A4@2";
        let full = RosterOrders::new(&Roster::parse(roster).expect("valid"), 2);
        // A2 (rack 1) is gone; B1 (rack 1, not on the roster) is here.
        let succession = [B1, A4, A3, A1];
        let (rows, racks) = rows(roster, &succession, &[1, 2, 2, 1]);
        let rack =
            |node: NodeId| racks[succession.iter().position(|&n| n == node).expect("member")];
        let mut stood_in = 0;
        for (pid, row) in rows.iter().enumerate() {
            let replicas = full.replicas(pid as u16, 2);
            // The present roster replicas lead, in roster order.
            let present: Vec<NodeId> = replicas.iter().copied().filter(|&n| n != A2).collect();
            assert_eq!(&row[..present.len()], &present[..], "pid {pid}");
            // The two copies are on two racks, both on the roster.
            assert_ne!(rack(row[0]), rack(row[1]), "pid {pid}: {row:x?}");
            assert_ne!(row[0], B1);
            assert_ne!(row[1], B1);
            // The non-roster node comes last.
            assert_eq!(row[3], B1);
            if replicas.contains(&A2) {
                stood_in += 1;
                // A1, the only other rack-1 roster node, stands in.
                assert!(row[..2].contains(&A1), "pid {pid}: {row:x?}");
            }
        }
        assert!(stood_in > 1000, "{stood_in}");
    }

    #[test]
    fn an_sc_roster_without_racks_keeps_its_plain_order() {
        let roster = "A1,A2,A3,A4";
        let full = RosterOrders::new(&Roster::parse(roster).expect("valid"), 2);
        let succession = [A4, A3, A2, A1];
        let (rows, _) = rows(roster, &succession, &[0; 4]);
        for (pid, row) in rows.iter().enumerate() {
            let whole: Vec<NodeId> = full.order(pid as u16).collect();
            assert_eq!(row, &whole);
        }
    }
}
