//! Immigration: receiving partitions from other nodes.
//!
//! 1. START: taken only if this node expects this partition from the
//!    sender under this map (the route's `immigrate_from`), else AGAIN (the
//!    sender retries: the map may not be in force here yet). At most
//!    `migrate-max-num-incoming` immigrations at once (AGAIN beyond).
//!    Each slot remembers the map it was taken under: a START under
//!    another map forgets the slots of older ones, even for a partition
//!    this node still expects from the same sender (its new emigration
//!    starts over). A slot whose sender has gone quiet for
//!    [`SLOT_IDLE_MS`] (longer than a sender waits for any step, so it
//!    has given that attempt up) is forgotten when the slots are full:
//!    otherwise a sender whose later attempt sits behind others towards
//!    this node would be answered AGAIN for ever.
//! 2. Records: each image is applied through the store by the namespace's
//!    conflict policy (a newer held copy stays), then acknowledged (after
//!    the durability waits, with commit-to-device). Not expected: REFUSED.
//! 3. DONE: the whole copy arrived; reported to the cluster state machine
//!    (`DataEvent::ImmigrationDone`) and acknowledged.

use super::emigrate::{DRAIN_TIMEOUT_MS, STEP_TIMEOUT_MS};
use super::{Counter, Output, RecordStore};
use crate::fabric::{code, Fabric};
use crate::node::DataEvent;
use crate::routing::Routing;
use crate::NodeId;
use std::collections::{BTreeMap, VecDeque};

/// A slot with no step from its sender for this long is given up.
pub const SLOT_IDLE_MS: u64 = STEP_TIMEOUT_MS + DRAIN_TIMEOUT_MS;

/// An immigration slot: the map it was taken under, and its last step.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u64,
    last_ms: u64,
}

/// The answer to one migration step.
#[derive(Debug)]
pub struct StepAnswer<W> {
    pub id: u64,
    pub code: u8,
    /// (commit-to-device) Acknowledge only once these are durable (if one
    /// fails, answer FAILED instead).
    pub waits: Vec<W>,
}

/// This node's immigrations under way.
#[derive(Debug)]
pub struct Immigrator {
    /// (namespace, partition, from).
    incoming: BTreeMap<(usize, u16, NodeId), Slot>,
    max_incoming: usize,
    outputs: VecDeque<Output>,
}

impl Immigrator {
    pub fn new(max_incoming: usize) -> Immigrator {
        Immigrator {
            incoming: BTreeMap::new(),
            max_incoming: max_incoming.max(1),
            outputs: VecDeque::new(),
        }
    }

    /// Takes a migration step from `from` at `now_ms`. None: not a
    /// migration step (the connection carries garbage).
    pub fn receive<S: RecordStore>(
        &mut self,
        store: &S,
        routing: &Routing,
        from: NodeId,
        message: &Fabric<'_>,
        now_ms: u64,
    ) -> Option<StepAnswer<S::Wait>> {
        let answer = |id: u64, code: u8| StepAnswer {
            id,
            code,
            waits: Vec::new(),
        };
        match message {
            Fabric::MigrateStart {
                id,
                namespace,
                pid,
                key,
            } => {
                let Some(index) = expected(routing, from, namespace, *pid, *key) else {
                    return Some(answer(*id, code::AGAIN));
                };
                // Forget immigrations of older maps (their senders gave
                // them up when the map changed).
                self.incoming.retain(|&(ns, p, sender), slot| {
                    slot.key == *key && expected_index(routing, sender, ns, p)
                });
                let slot = (index, *pid, from);
                if !self.incoming.contains_key(&slot) && self.incoming.len() >= self.max_incoming {
                    // Full: forget attempts their senders gave up.
                    self.incoming
                        .retain(|_, slot| now_ms < slot.last_ms.saturating_add(SLOT_IDLE_MS));
                    if self.incoming.len() >= self.max_incoming {
                        return Some(answer(*id, code::AGAIN));
                    }
                }
                self.incoming.insert(
                    slot,
                    Slot {
                        key: *key,
                        last_ms: now_ms,
                    },
                );
                assert!(self.incoming.len() <= self.max_incoming);
                Some(answer(*id, code::OK))
            }
            Fabric::MigrateRecords {
                id,
                namespace,
                pid,
                key,
                images,
            } => {
                let Some(index) = expected(routing, from, namespace, *pid, *key) else {
                    return Some(answer(*id, code::REFUSED));
                };
                if let Some(slot) = self.incoming.get_mut(&(index, *pid, from)) {
                    slot.last_ms = slot.last_ms.max(now_ms);
                }
                let policy = routing.namespaces[index].conflict_policy;
                self.count(Counter::MigrateRecordsReceived, images.len() as u64);
                let mut waits = Vec::new();
                let mut applied = 0;
                for image in images {
                    match store.apply(index, image, policy) {
                        Ok(result) => {
                            applied += u64::from(result.applied);
                            waits.extend(result.wait);
                        }
                        Err(_) => {
                            self.count(Counter::MigrateRecordsApplied, applied);
                            return Some(answer(*id, code::FAILED));
                        }
                    }
                }
                self.count(Counter::MigrateRecordsApplied, applied);
                Some(StepAnswer {
                    id: *id,
                    code: code::OK,
                    waits,
                })
            }
            Fabric::MigrateDone {
                id,
                namespace,
                pid,
                key,
            } => {
                let Some(index) = expected(routing, from, namespace, *pid, *key) else {
                    return Some(answer(*id, code::REFUSED));
                };
                self.incoming.remove(&(index, *pid, from));
                self.count(Counter::MigratePartitionsReceived, 1);
                self.outputs
                    .push_back(Output::Event(DataEvent::ImmigrationDone {
                        namespace: index,
                        pid: *pid,
                        from,
                        key: *key,
                    }));
                Some(answer(*id, code::OK))
            }
            _ => None,
        }
    }

    /// The next output: counts and `DataEvent`s.
    pub fn next_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Immigrations under way.
    pub fn incoming(&self) -> usize {
        self.incoming.len()
    }

    fn count(&mut self, counter: Counter, n: u64) {
        if n > 0 {
            self.outputs.push_back(Output::Count(counter, n));
        }
    }
}

/// The namespace index, if this node expects partition `pid` of
/// `namespace` from `from` under map `key`.
fn expected(routing: &Routing, from: NodeId, namespace: &str, pid: u16, key: u64) -> Option<usize> {
    if routing.key != key {
        return None;
    }
    let index = routing
        .namespaces
        .iter()
        .position(|ns| ns.name == namespace)?;
    expected_index(routing, from, index, pid).then_some(index)
}

fn expected_index(routing: &Routing, from: NodeId, namespace: usize, pid: u16) -> bool {
    let Some(member) = routing.member_index(from) else {
        return false;
    };
    routing
        .namespaces
        .get(namespace)
        .is_some_and(|ns| ns.route(usize::from(pid)).immigrate_from & (1u64 << member) != 0)
}
