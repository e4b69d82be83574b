//! One request's work on other nodes, from the moment running it here
//! found it needs them until its answer: the proxy hop rule, a short wait
//! for the map, duplicate resolution, then running it again; or a write's
//! copies to the other holders. All of it is bounded by the request's
//! deadline (its own timeout, else `transaction-max-ms`); past it the
//! client gets a timeout (9).
//!
//! ```text
//!            ┌──────────── run here (driver) ◄─────────────┐
//!            │                                             │
//!   Need::Proxy ──► Proxy ── redirect ≤ 3 ──► Proxy        │
//!            │        └── refused / lost ── pause ─────────┤ (unresolved)
//!   Need::Again ──► pause 5 ms ────────────────────────────┤
//!   Need::Resolve ─► Resolve ── all copies in ─────────────┤ (resolved)
//!            │          └── a copy missing ── pause 10 ms ─┘
//!   Need::Replicate ─► Replicate ── every copy in ──► answer
//!   Need::Rereplicate ─► Replicate ── every copy in ───────┘ (or answer)
//! ```
//!
//! (Strong consistency) A record whose last write's copies did not all
//! arrive is *unreplicated* on its master (`Gates::mark_unreplicated`):
//! before the next read or write of it is served, its held copy goes to
//! the replicas again (`Need::Rereplicate`), and the request runs again
//! once they have it; past the deadline it times out, served by nobody.

use super::proxy::{self, Proxy};
use super::queue::Queue;
use super::replicate::{self, Replicate};
use super::resolve::{self, Resolve};
use super::{
    Counter, Finish, NamespaceName, Nodes, Output, OwnedImage, RecordStore, Reply, Token,
    AGAIN_PAUSE_MS, RESOLVE_RETRY_MS, ROUTING_POLL_MS,
};
use crate::fabric::{Channel, ProxyFraming};
use crate::routing::{GateGuard, Routing, UnreplicatedMark};
use crate::NodeId;
use bolide_types::DIGEST_BYTES;

/// Most outputs a request has waiting at once (sends to every holder, a
/// count, an answer).
const OUTPUTS_MAX: usize = 24;

/// The work a request needs on other nodes, as running it here found.
#[derive(Debug)]
pub enum Need {
    /// This node does not serve it: `to` does.
    Proxy { to: NodeId },
    /// A write while the map is being exchanged: run it again shortly.
    Again,
    /// Fetch the record's copies from `from`, apply the newest here, then
    /// run the request again.
    Resolve {
        namespace: usize,
        digest: [u8; DIGEST_BYTES],
        from: Vec<NodeId>,
    },
    /// The write was applied here; its copy must reach the other holders.
    Replicate(Replication),
    /// (SC) The record is unreplicated here: its held copy goes to the
    /// other holders first; then the request runs again (`then_run`), or
    /// (a background re-replication) the work answers.
    Rereplicate { copies: Replication, then_run: bool },
}

/// A write's copy on its way to the other holders of its partition.
#[derive(Debug)]
pub struct Replication {
    pub namespace: usize,
    pub pid: u16,
    /// The cluster key the destinations were chosen under.
    pub cluster_key: u64,
    /// The partition's regime (0 in AP).
    pub regime: u32,
    pub to: Nodes,
    pub image: OwnedImage,
    /// The client asked to be answered once the master has the write
    /// (commit level master): the copies go out without waiting.
    pub commit_master: bool,
    /// Holds the partition's gate until the copies are in.
    pub guard: Option<GateGuard>,
    /// (SC) Takes the record off the unreplicated list once every copy
    /// is in.
    pub mark: Option<UnreplicatedMark>,
}

/// What running the request here led to.
#[expect(
    clippy::large_enum_variant,
    reason = "handed straight to the work; boxing a need would allocate per request"
)]
#[derive(Debug)]
pub enum Ran {
    /// It was answered here (the driver holds the answer).
    Answered,
    Need(Need),
}

/// Outputs waiting for the driver, and the next call token.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: Queue<Output, OUTPUTS_MAX>,
    next_token: Token,
}

impl Outbox {
    pub(crate) fn send(&mut self, to: NodeId, channel: Channel) -> Token {
        self.next_token = self.next_token.wrapping_add(1);
        let token = self.next_token;
        self.queue.push(Output::Send { token, to, channel });
        token
    }

    pub(crate) fn count(&mut self, counter: Counter, n: u64) {
        if n > 0 {
            self.queue.push(Output::Count(counter, n));
        }
    }

    pub(crate) fn push(&mut self, output: Output) {
        self.queue.push(output);
    }
}

#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "a request's work lives in its task; boxing a stage would allocate"
)]
enum Stage {
    /// Waiting for the driver to report a local run (`ran`).
    Running,
    Paused {
        until_ms: u64,
        resolved: bool,
    },
    Proxy(Proxy),
    Resolve(Resolve),
    Replicate(Replicate),
    Over,
}

/// One request's remote work (see the module's diagram).
#[derive(Debug)]
pub struct Work {
    me: NodeId,
    deadline_ms: u64,
    /// The request (AS_MSG body), to send elsewhere; empty for a write
    /// that already ran.
    body: Vec<u8>,
    framing: ProxyFraming,
    stage: Stage,
    outbox: Outbox,
    answered: bool,
    /// The latest time an input brought.
    seen_ms: u64,
    /// The copies going out are a re-replication: once in, the request
    /// runs again.
    run_after_copies: bool,
}

impl Work {
    /// Work for a request that arrived at `now_ms` and may take
    /// `timeout_ms`. `body` and `framing` are what a proxy sends.
    pub fn new(
        me: NodeId,
        now_ms: u64,
        timeout_ms: u64,
        body: Vec<u8>,
        framing: ProxyFraming,
    ) -> Work {
        Work {
            me,
            deadline_ms: now_ms.saturating_add(timeout_ms),
            body,
            framing,
            stage: Stage::Running,
            outbox: Outbox::default(),
            answered: false,
            seen_ms: now_ms,
            run_after_copies: false,
        }
    }

    /// Starts with what the first local run found.
    pub fn start(&mut self, need: Need, now_ms: u64, routing: &Routing) {
        assert!(matches!(self.stage, Stage::Running), "started twice");
        self.ran(Ran::Need(need), now_ms, routing);
    }

    /// The request ran here again (after an `Output::Run`).
    pub fn ran(&mut self, ran: Ran, now_ms: u64, routing: &Routing) {
        self.seen_ms = self.seen_ms.max(now_ms);
        if let Stage::Proxy(proxy) = &mut self.stage {
            if let Ran::Need(Need::Proxy { to }) = ran {
                proxy.send_to(to, now_ms, self.deadline_ms, &mut self.outbox);
                return;
            }
            self.outbox.count(Counter::ProxyEnded, 1);
            self.stage = Stage::Running;
        }
        assert!(
            matches!(self.stage, Stage::Running),
            "a local run the work did not ask for"
        );
        let need = match ran {
            Ran::Answered => return self.finish(Finish::Local),
            Ran::Need(need) => need,
        };
        match need {
            Need::Proxy { to } => {
                self.outbox.count(Counter::ProxyBegun, 1);
                let mut proxy = Proxy::new(self.me, to);
                proxy.send_to(to, now_ms, self.deadline_ms, &mut self.outbox);
                self.stage = Stage::Proxy(proxy);
            }
            Need::Again => self.pause(now_ms + AGAIN_PAUSE_MS, false),
            Need::Resolve {
                namespace,
                digest,
                from,
            } => {
                let mut resolve = Resolve::new(routing, namespace, digest, &from);
                let progress = resolve.start(&mut self.outbox);
                self.stage = Stage::Resolve(resolve);
                self.resolve_progress(progress, now_ms);
            }
            Need::Replicate(replication) => self.replicate(replication, routing, now_ms),
            Need::Rereplicate { copies, then_run } => {
                self.run_after_copies = then_run;
                self.replicate(copies, routing, now_ms)
            }
        }
    }

    fn replicate(&mut self, replication: Replication, routing: &Routing, now_ms: u64) {
        let Replication {
            namespace,
            pid,
            cluster_key,
            regime,
            to,
            image,
            commit_master,
            guard,
            mark,
        } = replication;
        let name = routing
            .namespaces
            .get(namespace)
            .map_or("", |ns| ns.name.as_str());
        let mut replicate = Replicate::new(
            namespace,
            NamespaceName::new(name),
            pid,
            cluster_key,
            regime,
            &to,
            image,
            guard,
            mark,
        );
        if commit_master {
            // Answered at once; the copies still go out (and are retried).
            self.finish(Finish::Local);
        }
        match replicate.start(&mut self.outbox) {
            replicate::Progress::Complete => {
                self.stage = Stage::Replicate(replicate);
                self.replicated(now_ms);
            }
            replicate::Progress::Waiting => self.stage = Stage::Replicate(replicate),
        }
    }

    /// Takes the reply to call `token`.
    pub fn reply<S: RecordStore>(
        &mut self,
        token: Token,
        reply: Reply<'_>,
        now_ms: u64,
        store: &S,
    ) {
        self.seen_ms = self.seen_ms.max(now_ms);
        match &mut self.stage {
            Stage::Proxy(proxy) => {
                match proxy.reply(token, &reply, now_ms, self.deadline_ms, &mut self.outbox) {
                    proxy::Progress::Answered => {
                        self.outbox.count(Counter::ProxyEnded, 1);
                        self.finish(Finish::Relay);
                    }
                    proxy::Progress::Waiting | proxy::Progress::Reroute => {}
                }
            }
            Stage::Resolve(resolve) => {
                let progress = resolve.reply(token, &reply, store);
                self.resolve_progress(progress, now_ms);
            }
            Stage::Replicate(replicate) => {
                if replicate.reply(token, &reply, now_ms, &mut self.outbox)
                    == replicate::Progress::Complete
                {
                    self.replicated(now_ms);
                }
            }
            Stage::Running | Stage::Paused { .. } | Stage::Over => {}
        }
    }

    /// Advances time: the deadline, pauses, the routing in force.
    pub fn tick(&mut self, now_ms: u64, routing: &Routing) {
        self.seen_ms = self.seen_ms.max(now_ms);
        if matches!(self.stage, Stage::Over) {
            return;
        }
        if now_ms >= self.deadline_ms {
            return self.expire();
        }
        match &mut self.stage {
            Stage::Paused { until_ms, resolved } if now_ms >= *until_ms => {
                let resolved = *resolved;
                self.run(resolved, now_ms);
            }
            Stage::Proxy(proxy) => {
                if proxy.tick(now_ms) == proxy::Progress::Reroute {
                    self.outbox.push(Output::Run { resolved: false });
                }
            }
            Stage::Resolve(resolve) => {
                let progress = resolve.tick(routing);
                self.resolve_progress(progress, now_ms);
            }
            Stage::Replicate(replicate) => {
                if replicate.tick(now_ms, routing, &mut self.outbox)
                    == replicate::Progress::Complete
                {
                    self.replicated(now_ms);
                }
            }
            Stage::Running | Stage::Paused { .. } | Stage::Over => {}
        }
    }

    /// The next output, in order.
    pub fn next_output(&mut self) -> Option<Output> {
        self.outbox.queue.pop()
    }

    /// The latest time the driver must tick by (None: over).
    pub fn wake_at(&self) -> Option<u64> {
        let poll = self.seen_ms + ROUTING_POLL_MS;
        let stage = match &self.stage {
            Stage::Over => return None,
            Stage::Running => None,
            Stage::Paused { until_ms, .. } => Some(*until_ms),
            Stage::Proxy(proxy) => proxy.wake_at(),
            Stage::Resolve(_) => Some(poll),
            Stage::Replicate(replicate) => {
                Some(replicate.wake_at().map_or(poll, |at| at.min(poll)))
            }
        };
        Some(stage.map_or(self.deadline_ms, |at| at.min(self.deadline_ms)))
    }

    /// Encodes the request of call `token` with wire id `id`.
    pub fn encode(&self, token: Token, id: u64, out: &mut Vec<u8>) {
        let encoded = match &self.stage {
            Stage::Proxy(proxy) => proxy.encode(token, id, &self.body, self.framing, out),
            Stage::Resolve(resolve) => resolve.encode(token, id, out),
            Stage::Replicate(replicate) => replicate.encode(token, id, out),
            Stage::Running | Stage::Paused { .. } | Stage::Over => false,
        };
        assert!(encoded, "encode for call {token}, which is not in flight");
    }

    /// Nothing left to do (the answer went out, and the copies are in or
    /// given up).
    pub fn is_over(&self) -> bool {
        matches!(self.stage, Stage::Over)
    }

    /// The answer went out (`Output::Finish`).
    pub fn is_answered(&self) -> bool {
        self.answered
    }

    /// The request, to run here again or send elsewhere.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    pub fn framing(&self) -> ProxyFraming {
        self.framing
    }

    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// The node a proxying request waits on (tests, tracing).
    pub fn proxied_to(&self) -> Option<NodeId> {
        match &self.stage {
            Stage::Proxy(proxy) => Some(proxy.to()),
            _ => None,
        }
    }

    fn resolve_progress(&mut self, progress: resolve::Progress, now_ms: u64) {
        match progress {
            resolve::Progress::Waiting => {}
            resolve::Progress::Resolved => self.run(true, now_ms),
            resolve::Progress::Failed => self.pause(now_ms + RESOLVE_RETRY_MS, false),
            resolve::Progress::Rerouted => self.run(false, now_ms),
        }
    }

    fn pause(&mut self, until_ms: u64, resolved: bool) {
        self.stage = Stage::Paused { until_ms, resolved };
    }

    /// Asks the driver to run the request again, unless its time is up.
    fn run(&mut self, resolved: bool, now_ms: u64) {
        if now_ms >= self.deadline_ms {
            self.stage = Stage::Running;
            return self.expire();
        }
        self.stage = Stage::Running;
        self.outbox.push(Output::Run { resolved });
    }

    fn replicated(&mut self, now_ms: u64) {
        if let Stage::Replicate(replicate) = &mut self.stage {
            replicate.release();
            replicate.replicated();
        }
        if std::mem::take(&mut self.run_after_copies) {
            return self.run(false, now_ms);
        }
        self.finish(Finish::Local);
    }

    /// The deadline passed.
    fn expire(&mut self) {
        match &mut self.stage {
            Stage::Proxy(_) => {
                self.outbox.count(Counter::ClientProxyTimeout, 1);
                self.outbox.count(Counter::ProxyEnded, 1);
            }
            Stage::Replicate(replicate) => {
                replicate.release();
                if !self.answered {
                    self.outbox.count(Counter::ReplicaWriteTimeouts, 1);
                }
            }
            Stage::Running | Stage::Paused { .. } | Stage::Resolve(_) | Stage::Over => {}
        }
        self.finish(Finish::Timeout);
    }

    /// Answers (once) and ends the work, unless copies are still going
    /// out after an early answer.
    fn finish(&mut self, finish: Finish) {
        if !self.answered {
            self.answered = true;
            self.outbox.push(Output::Finish(finish));
        }
        let copies_left = match &self.stage {
            Stage::Replicate(replicate) => !replicate.is_complete(),
            _ => false,
        };
        if !copies_left || finish == Finish::Timeout {
            self.stage = Stage::Over;
        }
    }
}
