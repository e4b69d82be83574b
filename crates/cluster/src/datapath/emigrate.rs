//! Emigration: sending this node's copy of a partition to the node the
//! rebalance names, at background priority.
//!
//! 1. The cluster state machine asks for it (`Action::Emigrate`) after
//!    publishing its map, so the routing a driver reads when it adds the
//!    emigration is that map or a newer one: if it is not the
//!    emigration's, the map has moved on and the emigration is dropped at
//!    once. (A driver that runs behind, as the server's migrate thread
//!    does at background priority, can take a whole map's emigrations
//!    after the next map is in force; none of them may hold a worker.)
//!    Otherwise it waits in a queue for one of `workers` slots
//!    (`migrate-threads` × 4); a new map drops it there too.
//! 2. START: the receiver checks that it expects this partition from this
//!    node under this map. Anything but OK is a failure (step 6).
//! 3. A snapshot of the partition's records and tombstones goes out in
//!    frames of up to 256 KiB, each acknowledged before the next, with
//!    `migrate-sleep` µs per record between frames. Writes made meanwhile
//!    reach the receiver as replica writes (it is one of the partition's
//!    holders); both are applied by conflict resolution, so order does
//!    not matter.
//! 4. A handoff (the acting master sending to the final master) then
//!    closes the partition's gate, so new writes go to the final master,
//!    and waits (up to 5 s) until the writes under way have reached their
//!    copies: the new master starts with every acknowledged write, and no
//!    two nodes take writes at once.
//! 5. DONE, acknowledged: reported to the cluster state machine
//!    (`DataEvent::EmigrationDone`).
//! 6. AGAIN to START (the receiver has enough immigrations, or its map is
//!    not in force yet) is no failure: the emigration goes back to the
//!    front of the queue and nothing more is started towards that
//!    receiver for 10 ms; the worker takes an emigration to another node
//!    meanwhile, as Aerospike re-queues it.
//! 7. A failure (any other refusal, no answer within 10 s, the drain not
//!    ending) reopens the gate and puts the emigration back at the end of
//!    the queue, to start again from START no sooner than 50 ms later
//!    (doubling to 1 s each failure); its worker takes the next one
//!    meanwhile. A new map cancels it.

use super::{Counter, Output, OwnedImage, RecordStore, Reply, Token, ROUTING_POLL_MS};
use crate::fabric::{code, Channel, Fabric, Image};
use crate::node::DataEvent;
use crate::partitions::{Emigration, EmigrationKind};
use crate::routing::Gates;
use crate::NodeId;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

/// Bytes of record images in one migration frame.
pub const FRAME_BYTES: usize = 256 * 1024;
/// Partitions each `migrate-threads` setting sends at once.
pub const PARTITIONS_PER_THREAD: usize = 4;
/// A step not answered within this fails.
pub const STEP_TIMEOUT_MS: u64 = 10_000;
/// How long a handoff waits for writes under way before it gives up (and
/// retries).
pub const DRAIN_TIMEOUT_MS: u64 = 5_000;
const DRAIN_POLL_MS: u64 = 1;
/// After AGAIN, nothing is started towards that receiver for this long.
pub const AGAIN_PAUSE_MS: u64 = 10;
const BACKOFF_FIRST_MS: u64 = 50;
const BACKOFF_MAX_MS: u64 = 1_000;

/// A namespace as emigrations need it.
#[derive(Clone, Debug)]
pub struct EmigrateNamespace {
    pub name: String,
    /// `migrate-sleep`: µs to pause per record sent.
    pub sleep_us: u32,
}

#[derive(Clone, Debug)]
pub struct EmigratorConfig {
    /// Emigrations under way at once.
    pub workers: usize,
    /// Indexed like the routing's namespaces.
    pub namespaces: Vec<EmigrateNamespace>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Start {
        token: Token,
        sent_ms: u64,
    },
    Records {
        token: Token,
        sent_ms: u64,
    },
    Pacing {
        until_ms: u64,
    },
    Draining {
        until_ms: u64,
    },
    Done {
        token: Token,
        sent_ms: u64,
    },
    /// Over (sent, cancelled or dropped): removed after this step.
    Finished,
}

impl Stage {
    fn in_flight(&self) -> Option<(Token, u64)> {
        match *self {
            Stage::Start { token, sent_ms }
            | Stage::Records { token, sent_ms }
            | Stage::Done { token, sent_ms } => Some((token, sent_ms)),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Active {
    emigration: Emigration,
    stage: Stage,
    images: Vec<OwnedImage>,
    /// The first image of the frame in flight (or of the next frame).
    next: usize,
    /// One past the last image of the frame in flight.
    frame_end: usize,
    backoff_ms: u64,
    /// This emigration closed the partition's gate (a handoff draining).
    gate_closed: bool,
}

/// An emigration waiting for a worker.
#[derive(Clone, Copy, Debug)]
struct Queued {
    emigration: Emigration,
    /// Not to start before (a retry's pause).
    not_before_ms: u64,
    backoff_ms: u64,
}

/// This node's emigrations: queued, and under way.
#[derive(Debug)]
pub struct Emigrator {
    config: EmigratorConfig,
    gates: Arc<Gates>,
    queue: VecDeque<Queued>,
    active: Vec<Active>,
    next_token: Token,
    outputs: VecDeque<Output>,
    seen_ms: u64,
    /// Receivers that answered AGAIN: nothing is started towards them
    /// before the time given.
    busy_until: BTreeMap<NodeId, u64>,
}

impl Emigrator {
    pub fn new(config: EmigratorConfig, gates: Arc<Gates>) -> Emigrator {
        assert!(config.workers > 0, "an emigrator needs a worker");
        Emigrator {
            config,
            gates,
            queue: VecDeque::new(),
            active: Vec::new(),
            next_token: 0,
            outputs: VecDeque::new(),
            seen_ms: 0,
            busy_until: BTreeMap::new(),
        }
    }

    /// Queues an emigration the cluster state machine asked for after
    /// publishing its map. `routing_key`: the key of the map in force
    /// now; if it is not the emigration's, that map was left behind and
    /// the emigration is dropped (false).
    pub fn add(&mut self, emigration: Emigration, now_ms: u64, routing_key: u64) -> bool {
        self.seen_ms = self.seen_ms.max(now_ms);
        if emigration.key != routing_key {
            return false;
        }
        self.queue.push_back(Queued {
            emigration,
            not_before_ms: now_ms,
            backoff_ms: BACKOFF_FIRST_MS,
        });
        self.fill(now_ms, routing_key);
        true
    }

    /// Advances time: pacing, drains, step timeouts, retries, and cancels
    /// what an older map asked for.
    pub fn tick(&mut self, now_ms: u64, routing_key: u64) {
        self.seen_ms = self.seen_ms.max(now_ms);
        for index in 0..self.active.len() {
            self.tick_one(index, now_ms, routing_key);
        }
        self.sweep(now_ms, routing_key);
    }

    /// Takes the reply to call `token`.
    pub fn reply<S: RecordStore>(
        &mut self,
        token: Token,
        reply: Reply<'_>,
        now_ms: u64,
        routing_key: u64,
        store: &S,
    ) {
        self.seen_ms = self.seen_ms.max(now_ms);
        let Some(index) = self
            .active
            .iter()
            .position(|a| a.stage.in_flight().is_some_and(|(t, _)| t == token))
        else {
            return;
        };
        if self.active[index].emigration.key != routing_key {
            self.cancel(index);
        } else if reply.ack_code() == Some(code::AGAIN)
            && matches!(self.active[index].stage, Stage::Start { .. })
        {
            self.busy(index, now_ms);
        } else if reply.ack_code() != Some(code::OK) {
            self.fail(index, now_ms);
        } else {
            match self.active[index].stage {
                Stage::Start { .. } => self.started(index, now_ms, store),
                Stage::Records { .. } => self.frame_acked(index, now_ms),
                Stage::Done { .. } => self.done(index),
                _ => unreachable!("only steps in flight have tokens"),
            }
        }
        self.sweep(now_ms, routing_key);
    }

    /// The next output: sends, counts, `DataEvent`s.
    pub fn next_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The latest time the driver must tick by (None: nothing to do).
    pub fn wake_at(&self) -> Option<u64> {
        let poll = self.seen_ms + ROUTING_POLL_MS;
        let queued = if self.active.len() < self.config.workers {
            self.queue.iter().map(|queued| self.ready_at(queued)).min()
        } else {
            None
        };
        let active = self
            .active
            .iter()
            .map(|a| match a.stage {
                Stage::Start { sent_ms, .. }
                | Stage::Records { sent_ms, .. }
                | Stage::Done { sent_ms, .. } => (sent_ms + STEP_TIMEOUT_MS).min(poll),
                Stage::Pacing { until_ms } => until_ms.min(poll),
                Stage::Draining { until_ms } => until_ms.min(self.seen_ms + DRAIN_POLL_MS),
                Stage::Finished => self.seen_ms,
            })
            .min();
        match (active, queued) {
            (Some(a), Some(q)) => Some(a.min(q)),
            (a, q) => a.or(q),
        }
    }

    /// Encodes the step of call `token` with wire id `id`.
    pub fn encode(&self, token: Token, id: u64, out: &mut Vec<u8>) {
        let active = self
            .active
            .iter()
            .find(|a| a.stage.in_flight().is_some_and(|(t, _)| t == token));
        let Some(active) = active else {
            panic!("encode for call {token}, which is not in flight");
        };
        let Emigration {
            namespace,
            pid,
            key,
            ..
        } = active.emigration;
        let namespace = self
            .config
            .namespaces
            .get(namespace)
            .map_or("", |ns| ns.name.as_str());
        match active.stage {
            Stage::Start { .. } => Fabric::MigrateStart {
                id,
                namespace,
                pid,
                key,
            }
            .encode(out),
            Stage::Records { .. } => {
                let images: Vec<Image<'_>> = active.images[active.next..active.frame_end]
                    .iter()
                    .map(OwnedImage::image)
                    .collect();
                Fabric::MigrateRecords {
                    id,
                    namespace,
                    pid,
                    key,
                    images,
                }
                .encode(out)
            }
            Stage::Done { .. } => Fabric::MigrateDone {
                id,
                namespace,
                pid,
                key,
            }
            .encode(out),
            _ => unreachable!("only steps in flight have tokens"),
        }
    }

    /// Emigrations under way.
    pub fn active(&self) -> usize {
        self.active.len()
    }

    /// The emigrations under way, described (diagnostics).
    pub fn describe(&self) -> Vec<String> {
        self.active
            .iter()
            .map(|a| {
                format!(
                    "pid {} to {:x} {:?} {:?} frame {}..{} of {}",
                    a.emigration.pid,
                    a.emigration.to,
                    a.emigration.kind,
                    a.stage,
                    a.next,
                    a.frame_end,
                    a.images.len()
                )
            })
            .collect()
    }

    /// Emigrations waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    fn tick_one(&mut self, index: usize, now_ms: u64, routing_key: u64) {
        let active = &self.active[index];
        let current = active.emigration.key == routing_key;
        match active.stage {
            Stage::Finished => {}
            _ if !current => self.cancel(index),
            Stage::Start { sent_ms, .. }
            | Stage::Records { sent_ms, .. }
            | Stage::Done { sent_ms, .. } => {
                if now_ms >= sent_ms + STEP_TIMEOUT_MS {
                    self.fail(index, now_ms);
                }
            }
            Stage::Pacing { until_ms } => {
                if now_ms >= until_ms {
                    self.next_frame(index, now_ms);
                }
            }
            Stage::Draining { .. } => self.check_drain(index, now_ms),
        }
    }

    /// Removes what is over and gives free slots to queued emigrations.
    fn sweep(&mut self, now_ms: u64, routing_key: u64) {
        self.active.retain(|a| a.stage != Stage::Finished);
        self.fill(now_ms, routing_key);
    }

    fn fill(&mut self, now_ms: u64, routing_key: u64) {
        while self.active.len() < self.config.workers {
            // Emigrations of a map the routing has left go at once.
            self.queue
                .retain(|queued| queued.emigration.key == routing_key);
            self.busy_until.retain(|_, until| *until > now_ms);
            let Some(position) = self
                .queue
                .iter()
                .position(|queued| self.ready_at(queued) <= now_ms)
            else {
                break;
            };
            let Some(queued) = self.queue.remove(position) else {
                break;
            };
            self.active.push(Active {
                emigration: queued.emigration,
                stage: Stage::Finished,
                images: Vec::new(),
                next: 0,
                frame_end: 0,
                backoff_ms: queued.backoff_ms,
                gate_closed: false,
            });
            let index = self.active.len() - 1;
            self.send_step(index, now_ms, StepKind::Start);
        }
        assert!(self.active.len() <= self.config.workers);
    }

    fn send_step(&mut self, index: usize, now_ms: u64, kind: StepKind) {
        self.next_token = self.next_token.wrapping_add(1);
        let token = self.next_token;
        let active = &mut self.active[index];
        active.stage = match kind {
            StepKind::Start => Stage::Start {
                token,
                sent_ms: now_ms,
            },
            StepKind::Records => Stage::Records {
                token,
                sent_ms: now_ms,
            },
            StepKind::Done => Stage::Done {
                token,
                sent_ms: now_ms,
            },
        };
        self.outputs.push_back(Output::Send {
            token,
            to: active.emigration.to,
            channel: Channel::Bulk,
        });
    }

    /// START acknowledged: take the snapshot and send it.
    fn started<S: RecordStore>(&mut self, index: usize, now_ms: u64, store: &S) {
        let Emigration { namespace, pid, .. } = self.active[index].emigration;
        let mut skipped = 0;
        let images = store.snapshot(namespace, pid, &mut skipped);
        self.count(Counter::MigrateRecordsSkipped, skipped);
        let active = &mut self.active[index];
        active.images = images;
        active.next = 0;
        active.frame_end = 0;
        self.next_frame(index, now_ms);
    }

    fn next_frame(&mut self, index: usize, now_ms: u64) {
        let active = &mut self.active[index];
        let start = active.next;
        if start >= active.images.len() {
            return self.frames_sent(index, now_ms);
        }
        let mut bytes = 0;
        let mut end = start;
        while end < active.images.len() && (bytes < FRAME_BYTES || end == start) {
            bytes += active.images[end].frame_bytes();
            end += 1;
        }
        assert!(end > start);
        active.frame_end = end;
        self.send_step(index, now_ms, StepKind::Records);
    }

    fn frame_acked(&mut self, index: usize, now_ms: u64) {
        let active = &mut self.active[index];
        assert!(
            active.frame_end > active.next,
            "an empty frame acknowledged"
        );
        let sent = (active.frame_end - active.next) as u64;
        active.next = active.frame_end;
        let sleep_us = self
            .config
            .namespaces
            .get(active.emigration.namespace)
            .map_or(0, |ns| u64::from(ns.sleep_us));
        let pause_ms = (sleep_us * sent).div_ceil(1000);
        if pause_ms > 0 {
            active.stage = Stage::Pacing {
                until_ms: now_ms + pause_ms,
            };
        }
        self.count(Counter::MigrateRecordsTransmitted, sent);
        if pause_ms == 0 {
            self.next_frame(index, now_ms);
        }
    }

    /// Every frame is in: a handoff drains its gate, then DONE.
    fn frames_sent(&mut self, index: usize, now_ms: u64) {
        let active = &mut self.active[index];
        active.images = Vec::new();
        if active.emigration.kind != EmigrationKind::Handoff {
            return self.send_step(index, now_ms, StepKind::Done);
        }
        let Emigration { namespace, pid, .. } = active.emigration;
        let Some(gate) = self.gates.gate(namespace, usize::from(pid)) else {
            return self.fail(index, now_ms);
        };
        gate.closed.store(true, SeqCst);
        active.gate_closed = true;
        active.stage = Stage::Draining {
            until_ms: now_ms + DRAIN_TIMEOUT_MS,
        };
        self.check_drain(index, now_ms);
    }

    fn check_drain(&mut self, index: usize, now_ms: u64) {
        let active = &self.active[index];
        let Stage::Draining { until_ms } = active.stage else {
            return;
        };
        let Emigration { namespace, pid, .. } = active.emigration;
        let inflight = self
            .gates
            .gate(namespace, usize::from(pid))
            .map_or(0, |gate| gate.inflight.load(SeqCst));
        if inflight == 0 {
            self.send_step(index, now_ms, StepKind::Done);
        } else if now_ms >= until_ms {
            self.fail(index, now_ms);
        }
    }

    fn done(&mut self, index: usize) {
        let active = &mut self.active[index];
        let Emigration {
            namespace,
            pid,
            to,
            key,
            ..
        } = active.emigration;
        active.stage = Stage::Finished;
        self.count(Counter::MigratePartitionsSent, 1);
        self.outputs
            .push_back(Output::Event(DataEvent::EmigrationDone {
                namespace,
                pid,
                to,
                key,
            }));
    }

    /// When a queued emigration may start: after its pause, and once its
    /// receiver is no longer busy.
    fn ready_at(&self, queued: &Queued) -> u64 {
        let busy = self
            .busy_until
            .get(&queued.emigration.to)
            .copied()
            .unwrap_or(0);
        queued.not_before_ms.max(busy)
    }

    /// The receiver is busy: back to the front of the queue, with no
    /// longer pause of its own; nothing starts towards that receiver for
    /// a moment, and the worker takes one to another node.
    fn busy(&mut self, index: usize, now_ms: u64) {
        let active = &mut self.active[index];
        assert!(
            !active.gate_closed,
            "a gate closed before START was accepted"
        );
        active.stage = Stage::Finished;
        self.busy_until
            .insert(active.emigration.to, now_ms + AGAIN_PAUSE_MS);
        self.queue.push_front(Queued {
            emigration: active.emigration,
            not_before_ms: now_ms,
            backoff_ms: active.backoff_ms,
        });
    }

    /// Back to the end of the queue, to start again from START after a
    /// pause; the worker is free for the next one.
    fn fail(&mut self, index: usize, now_ms: u64) {
        self.reopen_gate(index);
        let active = &mut self.active[index];
        active.images = Vec::new();
        active.stage = Stage::Finished;
        self.queue.push_back(Queued {
            emigration: active.emigration,
            not_before_ms: now_ms + active.backoff_ms,
            backoff_ms: (active.backoff_ms * 2).min(BACKOFF_MAX_MS),
        });
    }

    /// A new map: this emigration is no longer wanted. Its gate is left
    /// as it is: the new map's publication opened every gate, and a
    /// handoff of the new map may have closed this one again since (two
    /// workers: the old handoff, still draining, is cancelled only at its
    /// next tick). Opening it here let the old master take writes after
    /// handing the partition over (simulator seed 253, `--sc`).
    fn cancel(&mut self, index: usize) {
        let active = &mut self.active[index];
        active.gate_closed = false;
        active.images = Vec::new();
        active.stage = Stage::Finished;
    }

    fn reopen_gate(&mut self, index: usize) {
        let active = &mut self.active[index];
        if active.gate_closed {
            active.gate_closed = false;
            let Emigration { namespace, pid, .. } = active.emigration;
            if let Some(gate) = self.gates.gate(namespace, usize::from(pid)) {
                gate.closed.store(false, SeqCst);
            }
        }
    }

    fn count(&mut self, counter: Counter, n: u64) {
        if n > 0 {
            self.outputs.push_back(Output::Count(counter, n));
        }
    }
}

#[derive(Clone, Copy)]
enum StepKind {
    Start,
    Records,
    Done,
}
