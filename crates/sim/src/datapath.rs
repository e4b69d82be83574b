//! Each simulated node's data path: the cluster crate's machines (`Work`
//! for every request that needs other nodes, `Emigrator`, `Immigrator`,
//! the receivers of replica writes, fetches and proxies), driven the way
//! the server drives them, over fabric frames encoded and decoded by the
//! real codec. The only part supplied here is running an op on a node: the
//! routing rule (`decide`, shared with the server's transaction layer),
//! then a register read or write on the node's in-memory store.

use crate::store::{digest_of, partition_of, MemStore, Rec};
use crate::world::{Event, OpKind, OpResult, World, OP_DEADLINE_MS};
use bolide_cluster::codec;
use bolide_cluster::conflict;
use bolide_cluster::datapath::{
    self, Counter, Decision, Emigrator, Finish, Immigrator, Need, Nodes, Output, OwnedImage,
    Proxied, Ran, Replication, Reply, Token, Work,
};
use bolide_cluster::fabric::{Fabric, ProxyFraming};
use bolide_cluster::routing::{GateGuard, Gates, Routing};
use bolide_cluster::{ClusterNode, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Who waits for a request's answer.
#[derive(Clone, Copy, Debug)]
pub enum Origin {
    /// The client of op `op`, connected to this node.
    Client { op: u64 },
    /// The node that proxied it here, with its call's wire id.
    Proxied { from: usize, id: u64 },
    /// Nobody: a background re-replication (SC).
    Background,
}

/// A request whose work needs other nodes.
pub struct Pending {
    pub work: Work,
    pub origin: Origin,
    pub key: u32,
    /// The latest local run's answer.
    pub answer: OpResult,
    /// The latest local run applied a write here.
    pub applied: bool,
    /// The answer of a proxy's reply, when it is relayed.
    pub relayed: Option<OpResult>,
    /// The wake event already scheduled.
    pub wake_scheduled: Option<u64>,
}

/// Who made a call.
#[derive(Clone, Copy, Debug)]
pub enum Caller {
    Work(u64),
    Emigrator,
}

/// A call in flight from a node.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub caller: Caller,
    pub token: Token,
    pub to: usize,
}

/// What a node keeps on disk besides its records: the strong-consistency
/// state it saved (as the server's `<ns>.sc`) and its unreplicated records
/// (as `<ns>.unreplicated`).
#[derive(Clone, Debug, Default)]
pub struct Disk {
    pub roster: Option<bolide_cluster::sc::Roster>,
    pub regime: u32,
    pub versions: Vec<bolide_cluster::Version>,
    pub witnesses: Vec<bolide_cluster::sc::Witness>,
    /// (watermark ms, digests) of the last save of the unreplicated list.
    pub unreplicated: Option<(u64, Vec<[u8; bolide_types::DIGEST_BYTES]>)>,
}

pub struct SimNode {
    pub id: NodeId,
    pub up: bool,
    pub paused: bool,
    /// Keeps its records across a restart (a persistent namespace with
    /// commit-to-device: every acknowledged write survives a kill -9).
    pub persistent: bool,
    /// Bumped at each start: timers of an earlier life are ignored.
    pub boot: u64,
    pub disk: Disk,
    /// Added to the clock this node puts in its heartbeats (clock skew).
    pub clock_offset_ms: i64,
    pub cluster: ClusterNode,
    pub routing: Arc<Routing>,
    pub gates: Arc<Gates>,
    pub store: MemStore,
    pub works: BTreeMap<u64, Pending>,
    pub calls: BTreeMap<u64, Call>,
    pub emigrator: Emigrator,
    pub emigrator_wake: Option<u64>,
    pub immigrator: Immigrator,
    /// Frames that reached it while stopped, delivered when it resumes.
    pub held: Vec<(usize, crate::world::Port, Vec<u8>)>,
}

/// An op as a proxied request's body: op id, key, kind, value.
pub fn encode_op(op: u64, key: u32, kind: &OpKind) -> Vec<u8> {
    let mut body = Vec::with_capacity(21);
    body.extend_from_slice(&op.to_le_bytes());
    body.extend_from_slice(&key.to_le_bytes());
    let (kind, value) = match kind {
        OpKind::Put(value) => (0u8, *value),
        OpKind::Delete => (1, 0),
        OpKind::Get => (2, 0),
    };
    body.push(kind);
    body.extend_from_slice(&value.to_le_bytes());
    body
}

pub fn decode_op(body: &[u8]) -> Option<(u64, u32, OpKind)> {
    if body.len() != 21 {
        return None;
    }
    let op = u64::from_le_bytes(body[..8].try_into().ok()?);
    let key = u32::from_le_bytes(body[8..12].try_into().ok()?);
    let value = u64::from_le_bytes(body[13..21].try_into().ok()?);
    let kind = match body[12] {
        0 => OpKind::Put(value),
        1 => OpKind::Delete,
        2 => OpKind::Get,
        _ => return None,
    };
    Some((op, key, kind))
}

fn encode_result(result: &OpResult) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    match result {
        OpResult::Ok(Some(value)) => {
            out.push(0);
            out.extend_from_slice(&value.to_le_bytes());
        }
        OpResult::Ok(None) => out.push(1),
        OpResult::NotFound => out.push(2),
        OpResult::Timeout => out.push(3),
        OpResult::Unavailable => out.push(4),
        OpResult::Forbidden => out.push(5),
    }
    out
}

fn decode_result(bytes: &[u8]) -> Option<OpResult> {
    Some(match bytes.first()? {
        0 => OpResult::Ok(Some(u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?))),
        1 => OpResult::Ok(None),
        2 => OpResult::NotFound,
        3 => OpResult::Timeout,
        4 => OpResult::Unavailable,
        5 => OpResult::Forbidden,
        _ => return None,
    })
}

/// What running an op on a node gave.
pub struct Local {
    pub ran: Ran,
    pub answer: OpResult,
    /// A write was applied here.
    pub applied: bool,
}

impl World {
    /// Runs an op on node `index` with its routing now: the routing rule,
    /// then the register op. (The server runs the transaction layer here.)
    pub(crate) fn execute(
        &mut self,
        index: usize,
        key: u32,
        kind: &OpKind,
        resolved: bool,
    ) -> Local {
        let now = self.now;
        let node = &self.nodes[index];
        let routing = Arc::clone(&node.routing);
        let pid = partition_of(key);
        let route = routing.namespaces[0].route(pid);
        let is_write = !matches!(kind, OpKind::Get);
        let answered = |answer| Local {
            ran: Ran::Answered,
            answer,
            applied: false,
        };
        let need = |need| Local {
            ran: Ran::Need(need),
            answer: OpResult::Timeout,
            applied: false,
        };
        let guard = match datapath::decide(
            &routing,
            &node.gates,
            &route,
            0,
            pid,
            is_write,
            self.read_mode,
            resolved,
        ) {
            Decision::Unavailable => return answered(OpResult::Unavailable),
            Decision::Forbidden => return answered(OpResult::Forbidden),
            Decision::Proxy(to) => return need(Need::Proxy { to }),
            Decision::Again => return need(Need::Again),
            Decision::Resolve => {
                return need(Need::Resolve {
                    namespace: 0,
                    digest: digest_of(key),
                    from: datapath::resolve_from(&routing, &route, 0, is_write, self.read_mode),
                })
            }
            Decision::Read if self.unreplicated(index, key, false) => {
                return need(self.rereplication(index, key, None, true))
            }
            Decision::Read => {
                let value = node.store.get(key).and_then(|rec| rec.value);
                return answered(match value {
                    Some(value) => OpResult::Ok(Some(value)),
                    None => OpResult::NotFound,
                });
            }
            Decision::Write(guard) if self.unreplicated(index, key, true) => {
                return need(self.rereplication(index, key, guard, true))
            }
            Decision::Write(guard) => guard,
        };
        let node = &self.nodes[index];
        let old = node.store.get(key);
        let value = match kind {
            OpKind::Put(value) => Some(*value),
            OpKind::Delete => {
                if old.is_none_or(|rec| rec.value.is_none()) {
                    // (SC) A delete of nothing answers what this node
                    // holds: the regime is confirmed first, as the server
                    // does.
                    if let Some(from) = datapath::confirm_unapplied(&routing, &route, 0, resolved) {
                        return need(Need::Resolve {
                            namespace: 0,
                            digest: digest_of(key),
                            from,
                        });
                    }
                    return answered(OpResult::NotFound);
                }
                None
            }
            OpKind::Get => unreachable!("a read is not a write"),
        };
        let rec = Rec {
            stamp: conflict::next_stamp(old.map(|rec| rec.stamp), now),
            value,
        };
        node.store.put(key, rec);
        if self.watch_key == Some(key) {
            self.log(format!(
                "WATCH key {key} applied at node {index}: {rec:?} (was {old:?})"
            ));
        }
        let answer = OpResult::Ok(value);
        let to = Nodes::of_members(&routing, route.destinations());
        if to.is_empty() {
            return Local {
                ran: Ran::Answered,
                answer,
                applied: true,
            };
        }
        let image = image_of(key, &rec);
        // (SC) Unreplicated until every copy is in.
        let mark = if routing.namespaces[0].strong_consistency {
            self.nodes[index]
                .gates
                .mark_unreplicated(0, pid, digest_of(key), rec.stamp)
        } else {
            None
        };
        Local {
            ran: Ran::Need(Need::Replicate(Replication {
                namespace: 0,
                pid: pid as u16,
                cluster_key: routing.cluster_key,
                regime: routing.namespaces[0].regime,
                to,
                image,
                commit_master: false,
                guard,
                mark,
            })),
            answer,
            applied: true,
        }
    }

    /// (SC) Whether a strict read or a write of `key` at node `index` must
    /// first copy the record to the replicas again.
    fn unreplicated(&self, index: usize, key: u32, is_write: bool) -> bool {
        let node = &self.nodes[index];
        node.routing.namespaces[0].strong_consistency
            && (is_write || self.read_mode.strict())
            && node
                .gates
                .is_unreplicated(0, partition_of(key), &digest_of(key))
    }

    /// (SC) The held copy of `key` at node `index`, to its replicas again;
    /// then the request runs again (`then_run`) or the work ends.
    pub(crate) fn rereplication(
        &self,
        index: usize,
        key: u32,
        guard: Option<GateGuard>,
        then_run: bool,
    ) -> Need {
        let node = &self.nodes[index];
        let routing = &node.routing;
        let pid = partition_of(key);
        let route = routing.namespaces[0].route(pid);
        let mark = node.gates.rereplication_mark(0, pid, &digest_of(key));
        let rec = node.store.get(key).unwrap_or(Rec {
            stamp: conflict::Stamp::default(),
            value: None,
        });
        Need::Rereplicate {
            copies: Replication {
                namespace: 0,
                pid: pid as u16,
                cluster_key: routing.cluster_key,
                regime: routing.namespaces[0].regime,
                to: Nodes::of_members(routing, route.destinations()),
                image: image_of(key, &rec),
                commit_master: false,
                guard,
                mark,
            },
            then_run,
        }
    }

    /// A client's op reaches the node it was sent to.
    pub(crate) fn op_at_entry(&mut self, op: u64) {
        let Some(state) = self.ops.get(&op) else {
            return;
        };
        if state.result.is_some() || self.now >= state.deadline {
            return;
        }
        let (entry, key, kind, deadline) =
            (state.entry, state.key, state.kind.clone(), state.deadline);
        let node = &self.nodes[entry];
        if !node.up || node.paused {
            // The client's connection hangs until its deadline.
            return;
        }
        let local = self.execute(entry, key, &kind, false);
        match local.ran {
            Ran::Answered => {
                if local.applied {
                    self.write_acknowledged_at(entry, key);
                }
                self.answer_client(op, local.answer);
            }
            Ran::Need(need) => {
                let now = self.now;
                let mut work = Work::new(
                    self.nodes[entry].id,
                    now,
                    deadline - now,
                    encode_op(op, key, &kind),
                    ProxyFraming::Message,
                );
                let routing = Arc::clone(&self.nodes[entry].routing);
                work.start(need, now, &routing);
                let id = self.new_work_id();
                let pending = Pending {
                    work,
                    origin: Origin::Client { op },
                    key,
                    answer: local.answer,
                    applied: local.applied,
                    relayed: None,
                    wake_scheduled: None,
                };
                self.drive(entry, id, pending);
            }
        }
    }

    /// A client's answer: an unavailable partition is tried again shortly
    /// (the client retries), anything else completes the op.
    fn answer_client(&mut self, op: u64, result: OpResult) {
        if result == OpResult::Unavailable {
            self.schedule(20, Event::OpAtEntry { op });
        } else {
            self.complete(op, result);
        }
    }

    /// (SC) A node's background sweep: the records left unreplicated on
    /// it go to their replicas again, as the server's fabric thread sends
    /// them (`rereplicate::sweep`).
    pub(crate) fn sweep_unreplicated(&mut self, index: usize) {
        use bolide_cluster::datapath::rereplicate;
        let node = &self.nodes[index];
        let copies = rereplicate::sweep(
            &node.store,
            &node.routing,
            &node.gates,
            &[0],
            rereplicate::SWEEP_BUDGET,
        );
        for copies in copies {
            let now = self.now;
            let key = u32::from_le_bytes(
                copies.image.digest[2..6]
                    .try_into()
                    .expect("a simulated digest holds its key"),
            );
            let mut work = Work::new(
                self.nodes[index].id,
                now,
                OP_DEADLINE_MS,
                encode_op(0, key, &OpKind::Get),
                ProxyFraming::Message,
            );
            let routing = Arc::clone(&self.nodes[index].routing);
            work.start(
                Need::Rereplicate {
                    copies,
                    then_run: false,
                },
                now,
                &routing,
            );
            let id = self.new_work_id();
            let pending = Pending {
                work,
                origin: Origin::Background,
                key,
                answer: OpResult::Timeout,
                applied: false,
                relayed: None,
                wake_scheduled: None,
            };
            self.drive(index, id, pending);
        }
    }

    fn new_work_id(&mut self) -> u64 {
        self.next_work += 1;
        self.next_work
    }

    /// Carries out a work's outputs; keeps it while it is not over.
    pub(crate) fn drive(&mut self, index: usize, id: u64, mut pending: Pending) {
        while let Some(output) = pending.work.next_output() {
            match output {
                Output::Send { token, to, .. } => {
                    let wire = self.new_wire_id();
                    let mut frame = Vec::new();
                    pending.work.encode(token, wire, &mut frame);
                    self.call(index, to, Caller::Work(id), token, wire, frame);
                }
                Output::Run { resolved } => {
                    let (op, key, kind) =
                        decode_op(pending.work.body()).expect("the simulator's own request");
                    let _ = op;
                    let local = self.execute(index, key, &kind, resolved);
                    pending.answer = local.answer;
                    pending.applied = local.applied;
                    let routing = Arc::clone(&self.nodes[index].routing);
                    pending.work.ran(local.ran, self.now, &routing);
                }
                Output::Finish(finish) => {
                    let result = match finish {
                        Finish::Local => {
                            if pending.applied {
                                self.write_acknowledged_at(index, pending.key);
                            }
                            pending.answer.clone()
                        }
                        Finish::Relay => pending.relayed.clone().unwrap_or(OpResult::Timeout),
                        Finish::Timeout => OpResult::Timeout,
                    };
                    self.answer_origin(index, pending.origin, result);
                }
                Output::Count(counter, n) => self.count(counter, n),
                Output::Event(_) => {}
            }
        }
        if pending.work.is_over() {
            return;
        }
        if let Some(at) = pending.work.wake_at() {
            if pending
                .wake_scheduled
                .is_none_or(|scheduled| at < scheduled || scheduled <= self.now)
            {
                pending.wake_scheduled = Some(at);
                let after = at.saturating_sub(self.now);
                self.schedule(
                    after,
                    Event::WorkWake {
                        node: index,
                        work: id,
                    },
                );
            }
        }
        self.nodes[index].works.insert(id, pending);
    }

    fn answer_origin(&mut self, index: usize, origin: Origin, result: OpResult) {
        match origin {
            Origin::Background => {}
            Origin::Client { op } => self.answer_client(op, result),
            Origin::Proxied { from, id } => {
                let answer = encode_result(&result);
                let mut frame = Vec::new();
                Fabric::ProxyAnswer {
                    id,
                    redirect: None,
                    answer: &answer,
                }
                .encode(&mut frame);
                self.send_fabric(index, from, frame);
            }
        }
    }

    /// A work's wake time came.
    pub(crate) fn work_wake(&mut self, index: usize, id: u64) {
        let node = &mut self.nodes[index];
        if !node.up || node.paused {
            return;
        }
        let Some(mut pending) = node.works.remove(&id) else {
            return;
        };
        if pending.wake_scheduled.is_some_and(|at| at <= self.now) {
            pending.wake_scheduled = None;
        }
        let routing = Arc::clone(&node.routing);
        pending.work.tick(self.now, &routing);
        self.drive(index, id, pending);
    }

    fn new_wire_id(&mut self) -> u64 {
        self.next_wire += 1;
        self.next_wire
    }

    /// Sends a call's frame to node `to` (a node id), or reports it lost.
    fn call(
        &mut self,
        index: usize,
        to: NodeId,
        caller: Caller,
        token: Token,
        wire: u64,
        frame: Vec<u8>,
    ) {
        let Some(target) = self.nodes.iter().position(|n| n.id == to) else {
            // No address for it: lost at once.
            self.schedule(
                1,
                Event::Lost {
                    node: index,
                    id: wire,
                },
            );
            self.nodes[index].calls.insert(
                wire,
                Call {
                    caller,
                    token,
                    to: index,
                },
            );
            return;
        };
        self.nodes[index].calls.insert(
            wire,
            Call {
                caller,
                token,
                to: target,
            },
        );
        self.send_fabric(index, target, frame);
    }

    /// A call's connection failed: no answer will come.
    pub(crate) fn lost(&mut self, index: usize, wire: u64) {
        if !self.nodes[index].up {
            return;
        }
        let Some(call) = self.nodes[index].calls.remove(&wire) else {
            return;
        };
        self.feed_reply(index, call, Reply::Lost, None);
    }

    /// Hands a reply to the machine that made the call.
    fn feed_reply(
        &mut self,
        index: usize,
        call: Call,
        reply: Reply<'_>,
        relayed: Option<OpResult>,
    ) {
        let now = self.now;
        match call.caller {
            Caller::Work(id) => {
                let Some(mut pending) = self.nodes[index].works.remove(&id) else {
                    return;
                };
                if relayed.is_some() {
                    pending.relayed = relayed;
                }
                pending
                    .work
                    .reply(call.token, reply, now, &self.nodes[index].store);
                self.drive(index, id, pending);
            }
            Caller::Emigrator => {
                let node = &mut self.nodes[index];
                let key = node.routing.key;
                node.emigrator
                    .reply(call.token, reply, now, key, &node.store);
                self.drive_emigrator(index);
            }
        }
    }

    /// A fabric frame reaches node `to`.
    pub(crate) fn fabric_frame(&mut self, from: usize, to: usize, frame: &[u8]) {
        let decoded = match codec::split_frame(frame) {
            Ok(Some((header, body, _))) => Fabric::decode(header.kind, body),
            Ok(None) => Err(codec::CodecError::Truncated),
            Err(error) => Err(error),
        };
        let message = match decoded {
            Ok(message) => message,
            Err(error) => {
                return self.fail(format!(
                    "node {to} could not decode a fabric frame from node {from}: {error}"
                ))
            }
        };
        match message {
            Fabric::Ack { id, .. }
            | Fabric::FetchAnswer { id, .. }
            | Fabric::ProxyAnswer { id, .. } => {
                let Some(call) = self.nodes[to].calls.remove(&id) else {
                    return;
                };
                let relayed = match &message {
                    Fabric::ProxyAnswer {
                        redirect: None,
                        answer,
                        ..
                    } => Some(decode_result(answer).unwrap_or(OpResult::Timeout)),
                    _ => None,
                };
                self.feed_reply(to, call, Reply::Answer(&message), relayed);
            }
            Fabric::ReplicaWrite {
                id,
                namespace,
                cluster_key,
                image,
                ..
            } => {
                let node = &self.nodes[to];
                let mut counts = Vec::new();
                let ack = datapath::apply_replica_write(
                    &node.store,
                    &node.routing,
                    namespace,
                    cluster_key,
                    &image,
                    &mut |counter, n| counts.push((counter, n)),
                );
                if self
                    .watch_key
                    .is_some_and(|key| digest_of(key) == image.digest)
                {
                    self.log(format!(
                        "WATCH replica write at node {to} from node {from}: code {}",
                        ack.code
                    ));
                }
                for (counter, n) in counts {
                    self.count(counter, n);
                }
                self.answer(to, from, Fabric::Ack { id, code: ack.code });
            }
            Fabric::Fetch {
                id,
                namespace,
                digest,
                cluster_key,
            } => {
                let node = &self.nodes[to];
                match datapath::serve_fetch(
                    &node.store,
                    &node.routing,
                    namespace,
                    &digest,
                    cluster_key,
                ) {
                    Ok(copy) => self.answer(
                        to,
                        from,
                        Fabric::FetchAnswer {
                            id,
                            image: copy.as_ref().map(OwnedImage::image),
                        },
                    ),
                    Err(_) => self.answer(
                        to,
                        from,
                        Fabric::Ack {
                            id,
                            code: bolide_cluster::fabric::code::CLUSTER_KEY_MISMATCH,
                        },
                    ),
                }
            }
            Fabric::Proxy {
                id,
                timeout_ms,
                framing,
                body,
            } => self.serve_proxy(from, to, id, u64::from(timeout_ms), framing, body.to_vec()),
            Fabric::MigrateStart { .. }
            | Fabric::MigrateRecords { .. }
            | Fabric::MigrateDone { .. } => self.immigrate(from, to, &message),
            Fabric::Hello { .. } => self.fail(format!("node {to} got a HELLO on a simulated lane")),
        }
    }

    fn answer(&mut self, from: usize, to: usize, message: Fabric<'_>) {
        let mut frame = Vec::new();
        message.encode(&mut frame);
        self.send_fabric(from, to, frame);
    }

    fn serve_proxy(
        &mut self,
        from: usize,
        to: usize,
        id: u64,
        timeout_ms: u64,
        framing: ProxyFraming,
        body: Vec<u8>,
    ) {
        let Some((_, key, kind)) = decode_op(&body) else {
            return self.fail(format!("node {to} got a proxy it cannot read"));
        };
        let local = self.execute(to, key, &kind, false);
        let (answer, applied) = (local.answer.clone(), local.applied);
        let me = self.nodes[to].id;
        let routing = Arc::clone(&self.nodes[to].routing);
        let mut counts = Vec::new();
        let proxied = datapath::serve_proxied(
            me,
            local.ran,
            self.now,
            timeout_ms,
            body,
            framing,
            &routing,
            &mut |counter, n| counts.push((counter, n)),
        );
        for (counter, n) in counts {
            self.count(counter, n);
        }
        match proxied {
            Proxied::Answered => {
                if applied {
                    self.write_acknowledged_at(to, key);
                }
                self.answer_origin(to, Origin::Proxied { from, id }, answer);
            }
            Proxied::Redirect(node) => self.answer(
                to,
                from,
                Fabric::ProxyAnswer {
                    id,
                    redirect: Some(node),
                    answer: &[],
                },
            ),
            Proxied::Work(work) => {
                let pending = Pending {
                    work,
                    origin: Origin::Proxied { from, id },
                    key,
                    answer,
                    applied,
                    relayed: None,
                    wake_scheduled: None,
                };
                let work_id = self.new_work_id();
                self.drive(to, work_id, pending);
            }
        }
    }

    fn immigrate(&mut self, from: usize, to: usize, message: &Fabric<'_>) {
        let sender = self.nodes[from].id;
        let now = self.now;
        let node = &mut self.nodes[to];
        let Some(step) = node
            .immigrator
            .receive(&node.store, &node.routing, sender, message, now)
        else {
            return;
        };
        let mut outputs = Vec::new();
        while let Some(output) = self.nodes[to].immigrator.next_output() {
            outputs.push(output);
        }
        for output in outputs {
            match output {
                Output::Count(counter, n) => self.count(counter, n),
                Output::Event(event) => {
                    if self.watch_pid(usize::from(event_pid(&event))) {
                        self.log(format!("WATCH node {to}: {event:?}"));
                    }
                    let now = self.now;
                    self.nodes[to].cluster.data_event(event, now);
                    self.drain_actions(to);
                }
                Output::Send { .. } | Output::Run { .. } | Output::Finish(_) => {}
            }
        }
        self.answer(
            to,
            from,
            Fabric::Ack {
                id: step.id,
                code: step.code,
            },
        );
    }

    /// Carries out the emigrator's outputs and schedules its next tick.
    pub(crate) fn drive_emigrator(&mut self, index: usize) {
        // A handoff may have closed or opened a gate.
        self.masters_dirty = true;
        while let Some(output) = self.nodes[index].emigrator.next_output() {
            match output {
                Output::Send { token, to, .. } => {
                    let wire = self.new_wire_id();
                    let mut frame = Vec::new();
                    self.nodes[index].emigrator.encode(token, wire, &mut frame);
                    self.call(index, to, Caller::Emigrator, token, wire, frame);
                }
                Output::Count(counter, n) => self.count(counter, n),
                Output::Event(event) => {
                    self.migrations += 1;
                    if self.watch_pid(usize::from(event_pid(&event))) {
                        self.log(format!("WATCH node {index}: {event:?}"));
                    }
                    let now = self.now;
                    self.nodes[index].cluster.data_event(event, now);
                    self.drain_actions(index);
                }
                Output::Run { .. } | Output::Finish(_) => {}
            }
        }
        let node = &mut self.nodes[index];
        if let Some(at) = node.emigrator.wake_at() {
            if node
                .emigrator_wake
                .is_none_or(|scheduled| at < scheduled || scheduled <= self.now)
            {
                node.emigrator_wake = Some(at);
                let after = at.saturating_sub(self.now);
                self.schedule(after, Event::EmigratorWake { node: index });
            }
        }
    }

    pub(crate) fn emigrator_wake(&mut self, index: usize) {
        let now = self.now;
        let node = &mut self.nodes[index];
        if !node.up || node.paused {
            return;
        }
        if node.emigrator_wake.is_some_and(|at| at <= now) {
            node.emigrator_wake = None;
        }
        let key = node.routing.key;
        node.emigrator.tick(now, key);
        self.drive_emigrator(index);
    }

    fn count(&mut self, counter: Counter, n: u64) {
        match counter {
            Counter::ReplicaWritesSent => self.replica_writes += n,
            Counter::ClientProxyComplete => self.proxies += n,
            Counter::DupResFetches => self.fetches += n,
            _ => {}
        }
    }
}

fn event_pid(event: &bolide_cluster::DataEvent) -> u16 {
    match event {
        bolide_cluster::DataEvent::ImmigrationDone { pid, .. }
        | bolide_cluster::DataEvent::EmigrationDone { pid, .. } => *pid,
    }
}

/// A simulated record's image, as the data path sends it.
fn image_of(key: u32, rec: &Rec) -> OwnedImage {
    OwnedImage {
        digest: digest_of(key),
        generation: rec.stamp.generation,
        last_update_ms: rec.stamp.last_update_ms,
        void_time: 0,
        set_name: Vec::new(),
        record: rec.value.map(|value| value.to_le_bytes().to_vec()),
    }
}
