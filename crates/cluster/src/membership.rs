//! Who is in the cluster: heartbeat adjacency and the clustering protocol,
//! following Aerospike rather than a majority quorum.
//!
//! Every node pulses every `interval`; a node not heard for `interval ×
//! timeout` is gone. At each quantum the principal (the highest node id of
//! the committed cluster) recomputes the member list: members minus the
//! dead and the faulty, plus orphans that asked to join, cut down to a
//! clique (every pair hears each other). If it changed, the principal
//! proposes it with a new random cluster key; every proposed member must
//! accept, then the principal commits it to all. An orphan (a node in no
//! cluster) asks an adjacent principal to take it in; orphans that see no
//! principal form a cluster under the highest of them. When two principals
//! see each other, the lower one dissolves its cluster and its members join
//! the higher one. Each side of a network split forms its own cluster and
//! serves (AP), and they merge when the split heals.

use crate::message::{Endpoint, Message, NamespaceSummary, ProposalId, Pulse, PROTOCOL};
use crate::NodeId;
use std::collections::{BTreeMap, BTreeSet};

/// Most nodes a node keeps track of (heard, or learned from others'
/// adjacency lists): four times the largest cluster. A pulse from a node
/// beyond it is ignored, so forged pulses under ever new node ids or
/// endpoints cannot grow the node's memory or its outgoing connections
/// without bound.
pub const TRACKED_NODES_MAX: usize = 4 * crate::CLUSTER_SIZE_MAX;

/// Timing of the protocol, from the heartbeat settings (all in ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub interval: u64,
    /// A node unheard this long is gone: interval × timeout.
    pub expiry: u64,
    /// The clustering period.
    pub quantum: u64,
    /// How long an orphan keeps serving from its last partition map.
    pub orphan_block: u64,
}

impl Timing {
    /// Aerospike's formulas: quantum = max(4 RTT, min(max(5000, 2I), T +
    /// 2(I + L))), with RTT = 2L.
    pub fn new(interval_ms: u64, timeout: u64, latency_max_ms: u64) -> Timing {
        let interval = interval_ms.max(1);
        let expiry = interval * timeout.max(3);
        let rtt = 2 * latency_max_ms;
        let quantum = (4 * rtt)
            .max((5000u64.max(2 * interval)).min(expiry + 2 * (interval + latency_max_ms)));
        Timing {
            interval,
            expiry,
            quantum,
            orphan_block: 5 * quantum,
        }
    }
}

/// What this node is configured to be.
#[derive(Clone, Debug)]
pub struct Identity {
    pub node: NodeId,
    pub cluster_name: String,
    pub boot_id: u64,
    pub heartbeat: Endpoint,
    pub fabric: Endpoint,
    pub service: Vec<Endpoint>,
    pub redis: Vec<Endpoint>,
    pub seeds: Vec<Endpoint>,
    pub namespaces: Vec<NamespaceSummary>,
    pub min_cluster_size: usize,
}

/// A node heard on the heartbeat.
#[derive(Clone, Debug)]
pub struct Peer {
    pub last_heard_ms: u64,
    pub pulse: Pulse,
    /// Same cluster name, protocol and namespaces: may cluster with us.
    pub compatible: bool,
    pub first_heard_ms: u64,
}

/// What a membership step decided, for the rest of the node to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new cluster was committed (this node is in `succession`).
    Committed { key: u64, succession: Vec<NodeId> },
    /// This node left its cluster.
    Orphaned,
}

#[derive(Clone)]
struct LastCommit {
    id: ProposalId,
    key: u64,
}

#[derive(Clone)]
struct Proposal {
    id: ProposalId,
    key: u64,
    succession: Vec<NodeId>,
    accepted: BTreeSet<NodeId>,
    started_ms: u64,
}

#[derive(Clone)]
pub struct Membership {
    pub identity: Identity,
    pub timing: Timing,
    pub peers: BTreeMap<NodeId, Peer>,
    /// The committed cluster; 0 / empty while orphan.
    pub key: u64,
    pub succession: Vec<NodeId>,
    pub committed_ms: u64,
    pub orphan_since_ms: Option<u64>,
    pub cluster_generation: u64,
    pub integrity: bool,
    started_ms: u64,
    next_pulse_ms: u64,
    next_quantum_ms: u64,
    /// `recluster:` asked for a new cluster key at the next quantum.
    recluster: bool,
    last_quantum_ms: u64,
    proposal: Option<Proposal>,
    proposal_sequence: u64,
    promised: ProposalId,
    join_requests: BTreeMap<NodeId, u64>,
    join_target_turn: usize,
    last_commit: Option<LastCommit>,
    last_commit_resend_ms: u64,
    /// Heartbeat endpoints we keep connections to.
    pub connected: BTreeSet<Endpoint>,
    /// Endpoints learned from adjacency lists, with when, until a node
    /// pulses from them: forgotten like silent peers if none does.
    learned: BTreeMap<Endpoint, u64>,
    pub received_self: u64,
    pub received_foreign: u64,
    /// Pulses ignored because [`TRACKED_NODES_MAX`] nodes are tracked.
    pub ignored_untracked: u64,
    mismatch_logged_ms: BTreeMap<NodeId, u64>,
}

impl Membership {
    pub fn new(identity: Identity, timing: Timing, now_ms: u64) -> Membership {
        let alone = identity.seeds.is_empty();
        Membership {
            identity,
            timing,
            peers: BTreeMap::new(),
            key: 0,
            succession: Vec::new(),
            committed_ms: 0,
            orphan_since_ms: Some(now_ms),
            cluster_generation: 0,
            integrity: false,
            started_ms: now_ms,
            next_pulse_ms: now_ms,
            // A node told of no other forms its own cluster at once (others
            // may still join it); one with seeds first listens a quantum.
            next_quantum_ms: if alone {
                now_ms
            } else {
                now_ms + timing.quantum
            },
            recluster: false,
            last_quantum_ms: now_ms,
            proposal: None,
            proposal_sequence: 0,
            promised: ProposalId::default(),
            join_requests: BTreeMap::new(),
            join_target_turn: 0,
            last_commit: None,
            last_commit_resend_ms: 0,
            connected: BTreeSet::new(),
            learned: BTreeMap::new(),
            received_self: 0,
            received_foreign: 0,
            ignored_untracked: 0,
            mismatch_logged_ms: BTreeMap::new(),
        }
    }

    pub fn node(&self) -> NodeId {
        self.identity.node
    }

    pub fn is_orphan(&self) -> bool {
        self.key == 0
    }

    pub fn principal(&self) -> Option<NodeId> {
        self.succession.first().copied()
    }

    /// No proposal in flight, and every member of the committed cluster
    /// still heard from: no membership change is under way here.
    pub fn quiet(&self, now_ms: u64) -> bool {
        self.proposal.is_none()
            && self
                .succession
                .iter()
                .all(|&node| self.is_alive(node, now_ms))
    }

    /// Alive and compatible peers.
    pub fn alive(&self, now_ms: u64) -> impl Iterator<Item = (&NodeId, &Peer)> {
        let expiry = self.timing.expiry;
        self.peers
            .iter()
            .filter(move |(_, peer)| peer.compatible && now_ms < peer.last_heard_ms + expiry)
    }

    fn is_alive(&self, node: NodeId, now_ms: u64) -> bool {
        node == self.node()
            || self.peers.get(&node).is_some_and(|peer| {
                peer.compatible && now_ms < peer.last_heard_ms + self.timing.expiry
            })
    }

    /// The pulse this node sends now.
    pub fn pulse(&self, now_ms: u64, clock_ms: u64) -> Pulse {
        Pulse {
            cluster_name: self.identity.cluster_name.clone(),
            protocol: PROTOCOL,
            boot_id: self.identity.boot_id,
            heartbeat: self.identity.heartbeat.clone(),
            fabric: self.identity.fabric.clone(),
            service: self.identity.service.clone(),
            redis: self.identity.redis.clone(),
            adjacency: self
                .alive(now_ms)
                .map(|(&node, peer)| (node, peer.pulse.heartbeat.clone()))
                .collect(),
            cluster_key: self.key,
            succession: self.succession.clone(),
            namespaces: self.identity.namespaces.clone(),
            clock_ms,
        }
    }

    /// Takes a pulse. Returns a log line if the sender cannot cluster with
    /// us (at most one per sender per 10 s).
    ///
    /// Only a node that may cluster with us is connected to (and the nodes
    /// it hears): a pulse with another cluster name, protocol or namespaces
    /// is noted and logged, and nothing more.
    pub fn on_pulse(&mut self, from: NodeId, pulse: Pulse, now_ms: u64, log: &mut Vec<String>) {
        if from == self.node() {
            self.received_self += 1;
            return;
        }
        if !self.peers.contains_key(&from) && self.peers.len() >= TRACKED_NODES_MAX {
            self.ignored_untracked += 1;
            return;
        }
        self.received_foreign += 1;
        let mismatch = self.mismatch(&pulse);
        if let Some(reason) = &mismatch {
            let last = self.mismatch_logged_ms.get(&from).copied();
            let room = last.is_some() || self.mismatch_logged_ms.len() < TRACKED_NODES_MAX;
            if room && last.is_none_or(|at| now_ms >= at + 10_000) {
                self.mismatch_logged_ms.insert(from, now_ms);
                log.push(format!(
                    "ignoring heartbeat from node {from:x} ({}): {reason}",
                    pulse.heartbeat.to_string().escape_debug()
                ));
            }
        }
        // Learn the endpoints of nodes it hears, so the mesh is transitive.
        if mismatch.is_none() {
            for (node, endpoint) in &pulse.adjacency {
                let known = *node == self.node() || self.peers.contains_key(node);
                if !known
                    && !self.connected.contains(endpoint)
                    && self.connected.len() < TRACKED_NODES_MAX
                {
                    self.connected.insert(endpoint.clone());
                    self.learned.insert(endpoint.clone(), now_ms);
                }
            }
            self.connected.insert(pulse.heartbeat.clone());
        }
        self.learned.remove(&pulse.heartbeat);
        let restarted = self
            .peers
            .get(&from)
            .is_some_and(|peer| peer.pulse.boot_id != pulse.boot_id);
        let first_heard_ms = match self.peers.get(&from) {
            Some(peer) if !restarted && now_ms < peer.last_heard_ms + self.timing.expiry => {
                peer.first_heard_ms
            }
            _ => now_ms,
        };
        if restarted {
            log.push(format!("node {from:x} restarted"));
        }
        self.peers.insert(
            from,
            Peer {
                last_heard_ms: now_ms,
                compatible: mismatch.is_none(),
                pulse,
                first_heard_ms,
            },
        );
    }

    /// Why a node with this pulse may not cluster with us, if it may not.
    fn mismatch(&self, pulse: &Pulse) -> Option<String> {
        if pulse.cluster_name != self.identity.cluster_name {
            return Some(format!(
                "cluster name '{}' differs from ours '{}'",
                pulse.cluster_name.escape_debug(),
                self.identity.cluster_name
            ));
        }
        if pulse.protocol != PROTOCOL {
            return Some(format!(
                "clustering protocol {} (ours {PROTOCOL})",
                pulse.protocol
            ));
        }
        for ours in &self.identity.namespaces {
            match pulse.namespaces.iter().find(|ns| ns.name == ours.name) {
                None => return Some(format!("it has no namespace '{}'", ours.name)),
                Some(theirs) if theirs.replication_factor != ours.replication_factor => {
                    return Some(format!(
                        "namespace '{}' has replication-factor {} (ours {})",
                        ours.name, theirs.replication_factor, ours.replication_factor
                    ))
                }
                Some(_) => {}
            }
        }
        if pulse.namespaces.len() != self.identity.namespaces.len() {
            return Some("its namespaces differ from ours".to_owned());
        }
        None
    }

    /// Whether it is time to pulse; if so, schedules the next one.
    pub fn pulse_due(&mut self, now_ms: u64) -> bool {
        if now_ms < self.next_pulse_ms {
            return false;
        }
        self.next_pulse_ms = now_ms + self.timing.interval;
        true
    }

    /// Runs the clustering step when a quantum is due. Sends go to `out`.
    pub fn tick(
        &mut self,
        now_ms: u64,
        entropy: &mut dyn crate::Entropy,
        sends: &mut Vec<(NodeId, Message)>,
        log: &mut Vec<String>,
    ) -> Option<Change> {
        self.resend_commit(now_ms, sends);
        // A member whose principal is gone leaves at once.
        if let Some(change) = self.check_principal(now_ms, log) {
            self.next_quantum_ms = self.next_quantum_ms.min(now_ms + self.timing.quantum / 4);
            return Some(change);
        }
        if let Some(proposal) = &self.proposal {
            if now_ms >= proposal.started_ms + self.timing.quantum / 2 {
                log.push(format!("proposal {:?} timed out", proposal.id));
                self.proposal = None;
            }
        }
        // A departure among our members brings the quantum forward.
        if self.principal() == Some(self.node()) {
            let departed = self
                .succession
                .iter()
                .any(|&node| !self.is_alive(node, now_ms));
            if departed {
                self.next_quantum_ms = self.next_quantum_ms.min(now_ms + self.timing.interval * 2);
            }
        }
        if now_ms < self.next_quantum_ms || self.proposal.is_some() {
            return None;
        }
        self.last_quantum_ms = now_ms;
        self.next_quantum_ms = now_ms + self.timing.quantum;
        if self.is_orphan() {
            self.orphan_quantum(now_ms, entropy, sends, log)
        } else if self.principal() == Some(self.node()) {
            self.principal_quantum(now_ms, entropy, sends, log)
        } else {
            None
        }
    }

    /// A non-principal member becomes orphan when its principal is gone or
    /// no longer lists it.
    fn check_principal(&mut self, now_ms: u64, log: &mut Vec<String>) -> Option<Change> {
        let principal = self.principal()?;
        if principal == self.node() {
            return None;
        }
        let reason = match self.peers.get(&principal) {
            _ if !self.is_alive(principal, now_ms) => Some("principal node is gone".to_owned()),
            Some(peer)
                if peer.pulse.cluster_key != self.key
                    && now_ms > self.committed_ms + 2 * self.timing.quantum =>
            {
                Some("principal moved to another cluster".to_owned())
            }
            Some(peer)
                if peer.pulse.cluster_key == self.key
                    && !peer.pulse.succession.contains(&self.node()) =>
            {
                Some("evicted by the principal".to_owned())
            }
            Some(peer)
                if peer.pulse.is_orphan() && now_ms > self.committed_ms + self.timing.quantum =>
            {
                Some("principal became orphan".to_owned())
            }
            _ => None,
        }?;
        log.push(format!(
            "leaving cluster {:x}: {reason} ({principal:x})",
            self.key
        ));
        self.become_orphan(now_ms);
        Some(Change::Orphaned)
    }

    /// Right after a commit the principal repeats it, once an interval, to
    /// members whose pulses do not show it yet (a lost commit).
    fn resend_commit(&mut self, now_ms: u64, sends: &mut Vec<(NodeId, Message)>) {
        let Some(commit) = &self.last_commit else {
            return;
        };
        if self.principal() != Some(self.node())
            || commit.key != self.key
            || now_ms > self.committed_ms + self.timing.quantum
            || now_ms < self.last_commit_resend_ms + self.timing.interval
        {
            return;
        }
        self.last_commit_resend_ms = now_ms;
        for &member in self.succession.iter().filter(|&&m| m != self.identity.node) {
            let behind = self
                .peers
                .get(&member)
                .is_some_and(|peer| peer.pulse.cluster_key != self.key);
            if behind && now_ms > self.committed_ms + self.timing.interval {
                sends.push((
                    member,
                    Message::Commit {
                        id: commit.id,
                        key: commit.key,
                        succession: self.succession.clone(),
                    },
                ));
            }
        }
    }

    /// `recluster:` on the principal: propose the same members under a new
    /// cluster key now, so every member runs a new exchange (a staged
    /// roster takes effect). False when this node is not the principal.
    pub fn request_recluster(&mut self, now_ms: u64) -> bool {
        if self.principal() != Some(self.node()) {
            return false;
        }
        self.recluster = true;
        self.next_quantum_ms = self.next_quantum_ms.min(now_ms);
        true
    }

    pub fn become_orphan(&mut self, now_ms: u64) {
        self.key = 0;
        self.succession.clear();
        self.orphan_since_ms = Some(now_ms);
        self.integrity = false;
        self.proposal = None;
        self.join_requests.clear();
    }

    /// Reduces `candidates` (which includes this node) to a clique in which
    /// every pair hears each other, by the heartbeats' adjacency lists.
    fn clique(&self, mut candidates: Vec<NodeId>, now_ms: u64) -> Vec<NodeId> {
        let me = self.node();
        let hears = |a: NodeId, b: NodeId| -> bool {
            if a == me {
                return self.is_alive(b, now_ms);
            }
            self.peers
                .get(&a)
                .is_some_and(|peer| peer.pulse.adjacency.iter().any(|(node, _)| *node == b))
        };
        let linked = |a: NodeId, b: NodeId| hears(a, b) && hears(b, a);
        candidates.retain(|&node| node == me || linked(me, node));
        loop {
            let missing: Vec<(usize, NodeId)> = candidates
                .iter()
                .map(|&a| {
                    let count = candidates
                        .iter()
                        .filter(|&&b| b != a && !linked(a, b))
                        .count();
                    (count, a)
                })
                .collect();
            let worst = missing
                .iter()
                .filter(|(count, node)| *count > 0 && *node != me)
                .max_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
            match worst {
                Some(&(_, node)) => candidates.retain(|&c| c != node),
                None => break,
            }
        }
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates
    }

    fn orphan_quantum(
        &mut self,
        now_ms: u64,
        entropy: &mut dyn crate::Entropy,
        sends: &mut Vec<(NodeId, Message)>,
        log: &mut Vec<String>,
    ) -> Option<Change> {
        let me = self.node();
        let mut principals: Vec<NodeId> = self
            .alive(now_ms)
            .filter(|(&node, peer)| !peer.pulse.is_orphan() && peer.pulse.principal() == Some(node))
            .map(|(&node, _)| node)
            .collect();
        principals.sort_unstable_by(|a, b| b.cmp(a));
        if !principals.is_empty() {
            let target = principals[self.join_target_turn % principals.len()];
            self.join_target_turn = self.join_target_turn.wrapping_add(1);
            sends.push((target, Message::JoinRequest));
            log.push(format!("sent cluster join request to {target:x}"));
            return None;
        }
        // No principal in sight: orphans form a cluster under the highest.
        // A node gives the mesh one quantum after it starts to be found,
        // and a node that just left a cluster waits two pulses, so that
        // every other member of its old cluster has noticed too.
        let anyone = self.alive(now_ms).next().is_some();
        if let (Some(since), true) = (self.orphan_since_ms, anyone) {
            let settle = since + 2 * self.timing.interval;
            if now_ms < settle {
                self.next_quantum_ms = settle;
                return None;
            }
        }
        // Peers still showing a cluster whose principal is gone are orphans
        // about to be: they take part.
        let orphans: Vec<NodeId> = self
            .alive(now_ms)
            .filter(|(_, peer)| {
                peer.pulse.is_orphan()
                    || peer.pulse.principal().is_none_or(|principal| {
                        principal != me && !self.is_alive(principal, now_ms)
                    })
            })
            .map(|(&node, _)| node)
            .chain(std::iter::once(me))
            .collect();
        let candidates = self.clique(orphans, now_ms);
        if candidates.first() != Some(&me) {
            return None;
        }
        if now_ms < self.started_ms + self.timing.quantum && !self.identity.seeds.is_empty() {
            return None;
        }
        if candidates.len() < self.identity.min_cluster_size.max(1) {
            return None;
        }
        self.propose(candidates, now_ms, entropy, sends, log)
    }

    fn principal_quantum(
        &mut self,
        now_ms: u64,
        entropy: &mut dyn crate::Entropy,
        sends: &mut Vec<(NodeId, Message)>,
        log: &mut Vec<String>,
    ) -> Option<Change> {
        let me = self.node();
        let dead: Vec<NodeId> = self
            .succession
            .iter()
            .copied()
            .filter(|&node| !self.is_alive(node, now_ms))
            .collect();
        let grace = now_ms > self.committed_ms + self.timing.quantum;
        let faulty: Vec<NodeId> = self
            .succession
            .iter()
            .copied()
            .filter(|&node| node != me && self.is_alive(node, now_ms))
            .filter(|node| {
                self.peers.get(node).is_some_and(|peer| {
                    grace
                        && (peer.pulse.cluster_key != self.key
                            || peer.pulse.succession != self.succession)
                })
            })
            .collect();
        self.integrity = dead.is_empty() && faulty.is_empty();
        if self.integrity {
            // Merge into a higher principal we can see, if all of us hear it.
            let higher = self
                .alive(now_ms)
                .filter(|(&node, peer)| {
                    node > me && !peer.pulse.is_orphan() && peer.pulse.principal() == Some(node)
                })
                .map(|(&node, _)| node)
                .max();
            if let Some(higher) = higher {
                let mut union: Vec<NodeId> = self.succession.clone();
                if let Some(peer) = self.peers.get(&higher) {
                    union.extend(peer.pulse.succession.iter().copied());
                }
                union.sort_unstable_by(|a, b| b.cmp(a));
                union.dedup();
                let everyone_hears = self.clique(union.clone(), now_ms).len() == union.len();
                if everyone_hears {
                    log.push(format!(
                        "merging cluster {:x} into the cluster of principal {higher:x}",
                        self.key
                    ));
                    for &member in self.succession.iter().filter(|&&m| m != me) {
                        sends.push((member, Message::Move { principal: higher }));
                    }
                    self.become_orphan(now_ms);
                    // Join the higher principal at the next step.
                    self.next_quantum_ms = now_ms + self.timing.interval * 2;
                    return Some(Change::Orphaned);
                }
            }
        }
        let mut members: Vec<NodeId> = self
            .succession
            .iter()
            .copied()
            .filter(|node| !dead.contains(node) && !faulty.contains(node))
            .collect();
        let expiry = self.timing.quantum * 3;
        self.join_requests.retain(|_, at| now_ms < *at + expiry);
        for &node in self.join_requests.keys() {
            let orphan = self
                .peers
                .get(&node)
                .is_some_and(|peer| peer.pulse.is_orphan());
            if orphan && self.is_alive(node, now_ms) && !members.contains(&node) {
                members.push(node);
            }
        }
        if !members.contains(&me) {
            members.push(me);
        }
        let members = self.clique(members, now_ms);
        // A faulty member (one that left, or missed a commit) that is back
        // as an orphan makes the same list: it still needs a new cluster.
        if members == self.succession && faulty.is_empty() && !self.recluster {
            return None;
        }
        self.recluster = false;
        if members.len() == 1 && !faulty.is_empty() && dead.is_empty() {
            // Alone among members that disagree with us: start over.
            log.push("all other members are faulty: leaving the cluster".to_owned());
            self.become_orphan(now_ms);
            return Some(Change::Orphaned);
        }
        if members.len() < self.identity.min_cluster_size.max(1) {
            log.push(format!(
                "cluster of {} would be below min-cluster-size {}: becoming orphan",
                members.len(),
                self.identity.min_cluster_size
            ));
            self.become_orphan(now_ms);
            return Some(Change::Orphaned);
        }
        self.propose(members, now_ms, entropy, sends, log)
    }

    fn propose(
        &mut self,
        succession: Vec<NodeId>,
        now_ms: u64,
        entropy: &mut dyn crate::Entropy,
        sends: &mut Vec<(NodeId, Message)>,
        log: &mut Vec<String>,
    ) -> Option<Change> {
        let me = self.node();
        self.proposal_sequence = self.proposal_sequence.max(self.promised.sequence) + 1;
        let id = ProposalId {
            sequence: self.proposal_sequence,
            proposer: me,
        };
        let key = loop {
            let key = entropy.next_u64() & crate::version::KEY_MASK;
            if key != 0 && key != self.key {
                break key;
            }
        };
        self.promised = id;
        if succession == [me] {
            return Some(self.apply_commit(key, succession, now_ms, log));
        }
        log.push(format!(
            "proposing cluster key {key:x}, succession {}",
            list(&succession)
        ));
        for &member in succession.iter().filter(|&&m| m != me) {
            sends.push((
                member,
                Message::Propose {
                    id,
                    key,
                    succession: succession.clone(),
                },
            ));
        }
        self.proposal = Some(Proposal {
            id,
            key,
            succession,
            accepted: BTreeSet::from([me]),
            started_ms: now_ms,
        });
        None
    }

    fn apply_commit(
        &mut self,
        key: u64,
        succession: Vec<NodeId>,
        now_ms: u64,
        log: &mut Vec<String>,
    ) -> Change {
        log.push(format!("applied new cluster key {key:x}"));
        log.push(format!("applied new succession list {}", list(&succession)));
        log.push(format!("applied cluster size {}", succession.len()));
        self.key = key;
        self.succession = succession.clone();
        self.committed_ms = now_ms;
        self.orphan_since_ms = None;
        self.cluster_generation += 1;
        self.integrity = true;
        self.proposal = None;
        self.join_requests
            .retain(|node, _| !succession.contains(node));
        Change::Committed { key, succession }
    }

    /// Handles a clustering message (not a pulse).
    pub fn on_message(
        &mut self,
        from: NodeId,
        message: Message,
        now_ms: u64,
        sends: &mut Vec<(NodeId, Message)>,
        log: &mut Vec<String>,
    ) -> Option<Change> {
        if !self.is_alive(from, now_ms) {
            // Only nodes we hear (and may cluster with) take part.
            return None;
        }
        match message {
            Message::JoinRequest => {
                if self.principal() == Some(self.node()) {
                    if !self.join_requests.contains_key(&from) {
                        log.push(format!("accepted join request from node {from:x}"));
                    }
                    self.join_requests.insert(from, now_ms);
                    let soonest = self.last_quantum_ms + self.timing.quantum / 2;
                    self.next_quantum_ms = self.next_quantum_ms.min(soonest.max(now_ms));
                }
                None
            }
            Message::Move { principal } => {
                if self.principal() == Some(from) && from != self.node() {
                    log.push(format!("told by principal {from:x} to join {principal:x}"));
                    self.become_orphan(now_ms);
                    self.next_quantum_ms = now_ms + self.timing.interval * 2;
                    return Some(Change::Orphaned);
                }
                None
            }
            Message::Propose {
                id,
                key,
                succession,
            } => {
                // An orphan takes any proposal that includes it; a member
                // only its own principal's. Never an older proposal.
                let _ = key;
                let acceptable = (self.is_orphan() || self.principal() == Some(from))
                    && id.proposer == from
                    && id > self.promised
                    && succession.contains(&self.node())
                    && succession.contains(&from);
                if acceptable {
                    self.promised = id;
                    self.proposal = None;
                }
                sends.push((
                    from,
                    Message::ProposeReply {
                        id,
                        accepted: acceptable,
                    },
                ));
                None
            }
            Message::ProposeReply { id, accepted } => {
                let proposal = self.proposal.as_mut()?;
                if proposal.id != id {
                    return None;
                }
                if !accepted {
                    log.push(format!("proposal rejected by node {from:x}"));
                    self.proposal = None;
                    return None;
                }
                proposal.accepted.insert(from);
                if proposal
                    .succession
                    .iter()
                    .all(|node| proposal.accepted.contains(node))
                {
                    let proposal = self.proposal.take()?;
                    self.last_commit = Some(LastCommit {
                        id: proposal.id,
                        key: proposal.key,
                    });
                    for &member in proposal.succession.iter().filter(|&&m| m != self.node()) {
                        sends.push((
                            member,
                            Message::Commit {
                                id: proposal.id,
                                key: proposal.key,
                                succession: proposal.succession.clone(),
                            },
                        ));
                    }
                    return Some(self.apply_commit(proposal.key, proposal.succession, now_ms, log));
                }
                None
            }
            Message::Commit {
                id,
                key,
                succession,
            } => {
                if id != self.promised || id.proposer != from || !succession.contains(&self.node())
                {
                    return None;
                }
                if self.key == key {
                    return None;
                }
                Some(self.apply_commit(key, succession, now_ms, log))
            }
            _ => None,
        }
    }

    /// Removes peers unheard for ten expiry periods, and endpoints learned
    /// that long ago from which no node pulsed. Returns the endpoints no
    /// longer connected to: never a seed's, nor one a remaining peer pulses
    /// from (a forged pulse may name a real node's endpoint).
    pub fn forget_old_peers(&mut self, now_ms: u64) -> Vec<Endpoint> {
        let horizon = self.timing.expiry * 10;
        let mut candidates = Vec::new();
        self.peers.retain(|_, peer| {
            let keep = now_ms < peer.last_heard_ms + horizon;
            if !keep {
                candidates.push(peer.pulse.heartbeat.clone());
            }
            keep
        });
        self.learned.retain(|endpoint, learned_ms| {
            let keep = now_ms < *learned_ms + horizon;
            if !keep {
                candidates.push(endpoint.clone());
            }
            keep
        });
        if !self.mismatch_logged_ms.is_empty() {
            self.mismatch_logged_ms
                .retain(|_, logged_ms| now_ms < *logged_ms + 10_000);
        }
        if candidates.is_empty() {
            return candidates;
        }
        candidates.sort();
        candidates.dedup();
        let seeds = &self.identity.seeds;
        let peers = &self.peers;
        candidates.retain(|endpoint| {
            !seeds.contains(endpoint)
                && !peers.values().any(|peer| peer.pulse.heartbeat == *endpoint)
        });
        for endpoint in &candidates {
            self.connected.remove(endpoint);
        }
        candidates
    }
}

/// Node ids in lower-case hex, space separated, as the logs print them.
pub fn list(nodes: &[NodeId]) -> String {
    nodes
        .iter()
        .map(|node| format!("{node:x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(port: u16) -> Endpoint {
        Endpoint {
            host: "10.0.0.1".into(),
            port,
        }
    }

    fn namespaces() -> Vec<NamespaceSummary> {
        vec![NamespaceSummary {
            name: "test".into(),
            replication_factor: 2,
        }]
    }

    fn membership() -> Membership {
        let identity = Identity {
            node: 0xA1,
            cluster_name: "prod".into(),
            boot_id: 1,
            heartbeat: endpoint(3002),
            fabric: endpoint(3001),
            service: vec![endpoint(3000)],
            redis: Vec::new(),
            seeds: vec![endpoint(4002)],
            namespaces: namespaces(),
            min_cluster_size: 1,
        };
        Membership::new(identity, Timing::new(100, 10, 5), 0)
    }

    fn pulse(cluster_name: &str, heartbeat: Endpoint) -> Pulse {
        Pulse {
            cluster_name: cluster_name.into(),
            protocol: PROTOCOL,
            boot_id: 9,
            heartbeat,
            fabric: endpoint(1),
            service: Vec::new(),
            redis: Vec::new(),
            adjacency: Vec::new(),
            cluster_key: 0,
            succession: Vec::new(),
            namespaces: namespaces(),
            clock_ms: 0,
        }
    }

    #[test]
    fn only_a_compatible_node_is_connected_to() {
        let mut m = membership();
        let mut log = Vec::new();
        m.on_pulse(0xB, pulse("other", endpoint(5002)), 10, &mut log);
        assert!(!m.connected.contains(&endpoint(5002)));
        assert_eq!(log.len(), 1, "{log:?}");
        m.on_pulse(0xC, pulse("prod", endpoint(6002)), 10, &mut log);
        assert!(m.connected.contains(&endpoint(6002)));
    }

    #[test]
    fn a_forgotten_forgery_does_not_disconnect_the_node_it_named() {
        let mut m = membership();
        let mut log = Vec::new();
        let real = endpoint(7002);
        // A forged node names a real peer's endpoint, then falls silent.
        m.on_pulse(0xF0, pulse("prod", real.clone()), 0, &mut log);
        let horizon = m.timing.expiry * 10;
        let mut now = 0;
        while now <= horizon + 100 {
            now += 100;
            m.on_pulse(0xB, pulse("prod", real.clone()), now, &mut log);
            let forgotten = m.forget_old_peers(now);
            assert!(!forgotten.contains(&real), "disconnected {real} at {now}");
        }
        assert!(!m.peers.contains_key(&0xF0));
        assert!(m.connected.contains(&real));
        // Once the real node is silent too, its endpoint goes.
        let forgotten = m.forget_old_peers(now + horizon + 1);
        assert_eq!(forgotten, vec![real.clone()]);
        assert!(!m.connected.contains(&real));
    }

    #[test]
    fn endpoints_learned_from_adjacency_are_forgotten_if_nobody_pulses_there() {
        let mut m = membership();
        let mut log = Vec::new();
        let mut forged = pulse("prod", endpoint(6002));
        forged.adjacency = (0..10)
            .map(|i| (0x100 + i, endpoint(8000 + i as u16)))
            .collect();
        m.on_pulse(0xC, forged, 0, &mut log);
        assert_eq!(m.connected.len(), 11);
        let horizon = m.timing.expiry * 10;
        assert!(m.forget_old_peers(horizon - 1).is_empty());
        let mut forgotten = m.forget_old_peers(horizon);
        forgotten.sort();
        let mut expected: Vec<Endpoint> = (0..10).map(|i| endpoint(8000 + i)).collect();
        expected.push(endpoint(6002));
        expected.sort();
        assert_eq!(forgotten, expected);
        assert!(m.connected.is_empty());
    }

    #[test]
    fn tracked_nodes_are_bounded() {
        let mut m = membership();
        let mut log = Vec::new();
        for node in 1..=(TRACKED_NODES_MAX as u64 + 50) {
            let name = if node % 2 == 0 { "prod" } else { "other" };
            m.on_pulse(node << 8, pulse(name, endpoint(node as u16)), 1, &mut log);
        }
        assert_eq!(m.peers.len(), TRACKED_NODES_MAX);
        assert_eq!(m.ignored_untracked, 50);
        assert!(m.connected.len() <= TRACKED_NODES_MAX);
        // Known nodes are still heard.
        m.on_pulse(1 << 8, pulse("other", endpoint(1)), 2, &mut log);
        assert_eq!(m.peers[&(1 << 8)].last_heard_ms, 2);
        // Mismatch lines are bounded too, and their memory is dropped.
        assert!(log.len() <= TRACKED_NODES_MAX, "{}", log.len());
        m.forget_old_peers(1_000_000);
        assert!(m.mismatch_logged_ms.is_empty());
    }
}
