//! A write's copy on its way to every other holder of its partition.
//!
//! 1. The working master applied the write; its record's image (or
//!    tombstone) goes to every destination the route named, stamped with
//!    the cluster key they were chosen under.
//! 2. Each holder acknowledges with OK once it applied it (or held a
//!    newer copy). Any other answer, or a lost connection, sends that copy
//!    again after a pause (2, 4, 8, … up to 50 ms).
//! 3. When the routing's cluster key moves on (a node left or joined), the
//!    copies go to the holders of the new map, under the new key; acks of
//!    the old round no longer count.
//!    Under strong consistency the new map must still have this node as
//!    the partition's working master with the partition available; else
//!    the write is never complete (its answer is the deadline's: in
//!    doubt), since the copies it reached may not be the new regime's.
//! 4. Complete when every destination of the current round acknowledged.
//!    The deadline is the caller's (the request's `Work`).

use super::work::Outbox;
use super::{retry_pause_ms, Counter, NamespaceName, Nodes, OwnedImage, Reply, Token};
use crate::fabric::{code, Channel, Fabric};
use crate::routing::{GateGuard, Routing, UnreplicatedMark, DESTINATIONS_MAX};
use crate::NodeId;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    InFlight,
    /// Refused or lost: sent again at `retry_at`.
    Failed,
    Acked,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    node: NodeId,
    token: Token,
    state: SlotState,
}

/// Whether every copy is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Waiting,
    Complete,
}

#[derive(Debug)]
pub struct Replicate {
    namespace: usize,
    name: NamespaceName,
    pid: u16,
    /// The cluster key the destinations were chosen under.
    key: u64,
    regime: u32,
    image: OwnedImage,
    slots: [Slot; DESTINATIONS_MAX],
    len: usize,
    /// Slots acknowledged in this round (== slots in state Acked).
    acked: usize,
    attempt: u32,
    retry_at: Option<u64>,
    /// Holds the partition's gate until the copies are in.
    guard: Option<GateGuard>,
    /// (SC) the map moved on without this node as the partition's master:
    /// never complete.
    stalled: bool,
    /// (SC) Takes the record off the unreplicated list once complete.
    mark: Option<UnreplicatedMark>,
}

impl Replicate {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        namespace: usize,
        name: NamespaceName,
        pid: u16,
        key: u64,
        regime: u32,
        to: &Nodes,
        image: OwnedImage,
        guard: Option<GateGuard>,
        mark: Option<UnreplicatedMark>,
    ) -> Replicate {
        let mut replicate = Replicate {
            namespace,
            name,
            pid,
            key,
            regime,
            image,
            slots: [Slot::default(); DESTINATIONS_MAX],
            len: 0,
            acked: 0,
            attempt: 0,
            retry_at: None,
            guard,
            stalled: false,
            mark,
        };
        replicate.set_destinations(to);
        replicate
    }

    fn set_destinations(&mut self, to: &Nodes) {
        assert!(to.len() <= DESTINATIONS_MAX);
        self.len = to.len();
        self.acked = 0;
        for (slot, &node) in self.slots.iter_mut().zip(to.as_slice()) {
            *slot = Slot {
                node,
                token: 0,
                state: SlotState::InFlight,
            };
        }
    }

    /// Sends every copy.
    pub(crate) fn start(&mut self, out: &mut Outbox) -> Progress {
        self.send_all(out)
    }

    fn send_all(&mut self, out: &mut Outbox) -> Progress {
        if self.len == 0 {
            return self.progress();
        }
        for slot in &mut self.slots[..self.len] {
            slot.token = out.send(slot.node, Channel::Requests);
            slot.state = SlotState::InFlight;
        }
        out.count(Counter::ReplicaWritesSent, self.len as u64);
        Progress::Waiting
    }

    pub(crate) fn reply(
        &mut self,
        token: Token,
        reply: &Reply<'_>,
        now_ms: u64,
        _out: &mut Outbox,
    ) -> Progress {
        let Some(slot) = self.slots[..self.len]
            .iter_mut()
            .find(|slot| slot.token == token && slot.state == SlotState::InFlight)
        else {
            return self.progress();
        };
        if reply.ack_code() == Some(code::OK) {
            slot.state = SlotState::Acked;
            self.acked += 1;
            assert!(self.acked <= self.len, "a copy acknowledged twice");
        } else {
            slot.state = SlotState::Failed;
            if self.retry_at.is_none() {
                self.retry_at = Some(now_ms + retry_pause_ms(self.attempt));
                self.attempt += 1;
            }
        }
        self.check();
        self.progress()
    }

    pub(crate) fn tick(&mut self, now_ms: u64, routing: &Routing, out: &mut Outbox) -> Progress {
        if self.progress() == Progress::Complete {
            return Progress::Complete;
        }
        // The map moved on: the copies go to the partition's holders now.
        if routing.settled() && routing.cluster_key != self.key {
            self.key = routing.cluster_key;
            self.retry_at = None;
            let namespace = routing.namespaces.get(self.namespace);
            let route = namespace
                .map(|ns| ns.route(usize::from(self.pid)))
                .unwrap_or_default();
            if namespace.is_some_and(|ns| ns.strong_consistency) {
                self.regime = namespace.map_or(self.regime, |ns| ns.regime);
                if route.unavailable() || !route.writes_here() {
                    self.stalled = true;
                    self.set_destinations(&Nodes::default());
                    return Progress::Waiting;
                }
            }
            self.set_destinations(&Nodes::of_members(routing, route.destinations()));
            return self.send_all(out);
        }
        if self.retry_at.is_some_and(|at| now_ms >= at) {
            self.retry_at = None;
            let mut resent = 0;
            for slot in &mut self.slots[..self.len] {
                if slot.state == SlotState::Failed {
                    slot.token = out.send(slot.node, Channel::Requests);
                    slot.state = SlotState::InFlight;
                    resent += 1;
                }
            }
            out.count(Counter::ReplicaWritesSent, resent);
        }
        Progress::Waiting
    }

    pub(crate) fn wake_at(&self) -> Option<u64> {
        self.retry_at
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.acked == self.len && !self.stalled
    }

    fn progress(&self) -> Progress {
        if self.acked == self.len && !self.stalled {
            Progress::Complete
        } else {
            Progress::Waiting
        }
    }

    fn check(&self) {
        let acked = self.slots[..self.len]
            .iter()
            .filter(|slot| slot.state == SlotState::Acked)
            .count();
        assert_eq!(acked, self.acked, "acknowledged copies miscounted");
    }

    /// Releases the partition's gate (the copies are in, or will never be).
    pub(crate) fn release(&mut self) {
        self.guard = None;
    }

    /// Every copy is in: the record is replicated (unless written again
    /// meanwhile).
    pub(crate) fn replicated(&mut self) {
        if self.is_complete() {
            if let Some(mark) = self.mark.take() {
                mark.replicated();
            }
        }
    }

    pub(crate) fn encode(&self, token: Token, id: u64, out: &mut Vec<u8>) -> bool {
        if !self.slots[..self.len]
            .iter()
            .any(|slot| slot.token == token)
        {
            return false;
        }
        Fabric::ReplicaWrite {
            id,
            namespace: self.name.as_str(),
            cluster_key: self.key,
            regime: self.regime,
            image: self.image.image(),
        }
        .encode(out);
        true
    }
}
