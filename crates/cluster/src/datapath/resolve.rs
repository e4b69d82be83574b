//! Duplicate resolution: before a write, the working master fetches the
//! record from every node whose copy of the partition is not merged yet.
//!
//! 1. A `Fetch` goes to each node the route names in `duplicates`.
//! 2. Each `FetchAnswer` with a copy is applied here through the store by
//!    the namespace's conflict policy (the newer copy wins); no copy there
//!    needs nothing.
//! 3. A node whose copy was merged meanwhile (it left the route's
//!    duplicates under the same map) needs no answer.
//! 4. Every answer in: the request runs again, resolved. A fetch lost or
//!    refused, or a copy the store could not take: the request routes
//!    again after a short pause, unresolved. A new map: it routes again at
//!    once.

use super::work::Outbox;
use super::{members_of, Counter, NamespaceName, RecordStore, Reply, Token};
use crate::fabric::{Channel, Fabric};
use crate::routing::{ConflictPolicy, Routing};
use crate::NodeId;
use bolide_types::DIGEST_BYTES;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Resolved,
    Failed,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    node: NodeId,
    token: Token,
    state: State,
}

/// Where a resolution stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Waiting,
    /// Every copy is in: run the request again, resolved.
    Resolved,
    /// A copy could not be had: route again after a pause.
    Failed,
    /// The map changed: route again now.
    Rerouted,
}

#[derive(Debug)]
pub struct Resolve {
    namespace: usize,
    name: NamespaceName,
    digest: [u8; DIGEST_BYTES],
    policy: ConflictPolicy,
    /// The map the duplicates were named under.
    key: u64,
    slots: Vec<Slot>,
}

impl Resolve {
    pub(crate) fn new(
        routing: &Routing,
        namespace: usize,
        digest: [u8; DIGEST_BYTES],
        from: &[NodeId],
    ) -> Resolve {
        let ns = routing.namespaces.get(namespace);
        Resolve {
            namespace,
            name: NamespaceName::new(ns.map_or("", |ns| ns.name.as_str())),
            digest,
            policy: ns.map(|ns| ns.conflict_policy).unwrap_or_default(),
            key: routing.key,
            slots: from
                .iter()
                .map(|&node| Slot {
                    node,
                    token: 0,
                    state: State::Waiting,
                })
                .collect(),
        }
    }

    pub(crate) fn start(&mut self, out: &mut Outbox) -> Progress {
        for slot in &mut self.slots {
            slot.token = out.send(slot.node, Channel::Requests);
        }
        out.count(Counter::DupResFetches, self.slots.len() as u64);
        self.progress()
    }

    pub(crate) fn reply<S: RecordStore>(
        &mut self,
        token: Token,
        reply: &Reply<'_>,
        store: &S,
    ) -> Progress {
        let Some(slot) = self
            .slots
            .iter_mut()
            .find(|slot| slot.token == token && slot.state == State::Waiting)
        else {
            return self.progress();
        };
        slot.state = match reply {
            Reply::Answer(Fabric::FetchAnswer { image: None, .. }) => State::Resolved,
            Reply::Answer(Fabric::FetchAnswer {
                image: Some(image), ..
            }) => match store.apply(self.namespace, image, self.policy) {
                Ok(_) => State::Resolved,
                Err(_) => State::Failed,
            },
            _ => State::Failed,
        };
        self.progress()
    }

    pub(crate) fn tick(&mut self, routing: &Routing) -> Progress {
        if self.progress() != Progress::Waiting {
            return self.progress();
        }
        if routing.key != self.key {
            return Progress::Rerouted;
        }
        // Copies merged meanwhile need no answer.
        let route = routing
            .namespaces
            .get(self.namespace)
            .map(|ns| ns.route(usize::from(super::pid_of(&self.digest))))
            .unwrap_or_default();
        let current = members_of(routing, route.duplicates);
        for slot in &mut self.slots {
            if slot.state == State::Waiting && !current.contains(&slot.node) {
                slot.state = State::Resolved;
            }
        }
        self.progress()
    }

    fn progress(&self) -> Progress {
        if self.slots.iter().any(|slot| slot.state == State::Waiting) {
            Progress::Waiting
        } else if self.slots.iter().any(|slot| slot.state == State::Failed) {
            Progress::Failed
        } else {
            Progress::Resolved
        }
    }

    pub(crate) fn encode(&self, token: Token, id: u64, out: &mut Vec<u8>) -> bool {
        if !self.slots.iter().any(|slot| slot.token == token) {
            return false;
        }
        Fabric::Fetch {
            id,
            namespace: self.name.as_str(),
            digest: self.digest,
        }
        .encode(out);
        true
    }
}
