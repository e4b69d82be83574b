//! The cluster state machine (`bolide_cluster::ClusterNode`, sans-I/O)
//! under messages from a forged peer: three real nodes form a cluster over
//! an in-memory network (every message through the real codec), then the
//! input's messages reach them between ticks, then the forged peer falls
//! silent and time runs on.
//!
//! The input is a list of records: a selector byte (bits 0–1: which node
//! gets the message, 3 = all three; bits 2–7: how many 10 ms ticks to run
//! after it), a message kind byte, a u16 little-endian body length and the
//! body, decoded as a control message ([`Envelope::decode`]). The forged
//! peer computes its frames' checksums, as a real sender would: the codec
//! itself is the `cluster_frames` target's. A body that does not decode
//! ends the input (the server drops the connection there).
//!
//! Properties, after every step, on every node:
//! - nothing panics;
//! - its succession list is sorted high to low, without 0 or repeats, at
//!   most [`CLUSTER_SIZE_MAX`] long, holds the node whenever it is a member
//!   and is empty when it is not, and `cluster_size` is its length (0 once
//!   an orphan stops serving);
//! - every routing it publishes is well-formed: the node is a member of
//!   it, members are distinct, masters and replica-write destinations are
//!   members (destinations other than the node itself), masks name only
//!   members;
//! - it tracks at most [`TRACKED_NODES_MAX`] nodes.
//!
//! And when the forged peer never used a real node's id, never sent a
//! pulse a real node could cluster with from an id above the principal's,
//! and never asked to join with a pulse they could cluster with (that is,
//! when it never impersonated a member nor took a real peer's path into
//! the cluster): the cluster is exactly as before, with the same key and
//! members on every node, the same partition map in force, no metadata
//! applied and no partition dropped.

use crate::cluster_harness::{Harness, CLUSTER_NAME, MEMBERS, NAMESPACE, REPLICATION_FACTOR};
use bolide_cluster::membership::TRACKED_NODES_MAX;
use bolide_cluster::message::{Message, PROTOCOL};
use bolide_cluster::routing::{flag, DESTINATIONS_MAX};
use bolide_cluster::{Envelope, NodeId, CLUSTER_SIZE_MAX};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Records taken from one input.
const RECORDS_MAX: usize = 256;
/// Ticks run after the input, with the forged peer silent: two
/// clustering periods, for whatever the forged messages set in motion.
const SETTLE_TICKS: u64 = 40;

pub fn check(bytes: &[u8]) {
    let mut harness = Harness::formed();
    let before = harness.snapshot();
    let mut paths = RealPaths::default();
    let mut rest = bytes;
    for _ in 0..RECORDS_MAX {
        let Some((&[selector, kind, l0, l1], tail)) = rest.split_first_chunk::<4>() else {
            break;
        };
        let length = usize::from(u16::from_le_bytes([l0, l1]));
        let Some(body) = tail.get(..length) else {
            break;
        };
        rest = &tail[length..];
        let Ok(envelope) = Envelope::decode(kind, body) else {
            break;
        };
        paths.note(&envelope, harness.principal());
        let to = usize::from(selector & 3);
        harness.deliver_forged(to, &envelope);
        harness.check_quick();
        for _ in 0..(selector >> 2) {
            harness.step();
            harness.check_quick();
        }
        harness.check_invariants();
    }
    for _ in 0..SETTLE_TICKS {
        harness.step();
    }
    harness.check_invariants();
    if !paths.taken {
        let after = harness.snapshot();
        assert_eq!(
            after, before,
            "messages from a node outside the cluster changed it"
        );
        let changes = harness.changes_since_formed();
        assert!(
            changes.is_empty(),
            "messages from a node outside the cluster changed data: {changes:?}"
        );
    }
}

/// Whether the forged peer took a path the protocol gives real peers to
/// change the cluster: it claimed a member's id; or it pulsed as a node
/// the members may cluster with, from above the principal (principals
/// merge into a higher one); or, having pulsed as such a node, it asked to
/// join.
#[derive(Default)]
struct RealPaths {
    taken: bool,
    compatible: BTreeSet<NodeId>,
}

impl RealPaths {
    fn note(&mut self, envelope: &Envelope, principal: NodeId) {
        let from = envelope.from;
        if MEMBERS.contains(&from) {
            self.taken = true;
        }
        match &envelope.message {
            Message::Pulse(pulse) => {
                let compatible = pulse.cluster_name == CLUSTER_NAME
                    && pulse.protocol == PROTOCOL
                    && pulse.namespaces.len() == 1
                    && pulse.namespaces[0].name == NAMESPACE
                    && usize::from(pulse.namespaces[0].replication_factor) == REPLICATION_FACTOR;
                if compatible {
                    self.compatible.insert(from);
                    self.taken |= from > principal;
                }
            }
            Message::JoinRequest => self.taken |= self.compatible.contains(&from),
            _ => {}
        }
    }
}

/// Structural invariants of one node's state and of each routing it
/// published (each checked once); with `status`, of its status figures.
pub(crate) fn check_node(index: usize, harness: &Harness, status: bool) {
    let node = &harness.nodes[index];
    let me = node.id;
    let succession = node.machine.succession();
    assert!(succession.len() <= CLUSTER_SIZE_MAX, "succession too long");
    assert!(!succession.contains(&0), "node id 0 in the succession");
    assert!(
        succession.windows(2).all(|pair| pair[0] > pair[1]),
        "succession not sorted high to low: {succession:x?}"
    );
    let member = node.machine.cluster_key() != 0;
    assert_eq!(
        member,
        !succession.is_empty(),
        "cluster key and succession disagree"
    );
    if member {
        assert!(
            succession.contains(&me),
            "a member missing from its succession"
        );
    }
    if status {
        let status = node.machine.status(harness.now_ms);
        assert_eq!(status.is_member, member);
        assert_eq!(&status.succession, succession);
        if member {
            assert_eq!(status.principal, succession[0]);
        }
        assert!(
            status.cluster_size == succession.len()
                || (status.orphan_blocked && status.cluster_size == 0),
            "cluster_size {} for succession {succession:x?}",
            status.cluster_size
        );
        assert!(status.heartbeat_nodes <= TRACKED_NODES_MAX);
    }
    let Some(routing) = &node.routing else {
        return;
    };
    if node.checked.get() == Arc::as_ptr(routing) {
        return;
    }
    node.checked.set(Arc::as_ptr(routing));
    let members = routing.members.len();
    assert!((1..=CLUSTER_SIZE_MAX).contains(&members));
    assert_eq!(routing.members.get(usize::from(routing.me)), Some(&me));
    let mut sorted = routing.members.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        members,
        "repeated members: {:x?}",
        routing.members
    );
    let all: u64 = if members == 64 {
        u64::MAX
    } else {
        (1u64 << members) - 1
    };
    for ns in &routing.namespaces {
        for route in &ns.routes {
            if route.flags & flag::UNAVAILABLE != 0 {
                continue;
            }
            assert!(
                usize::from(route.master) < members,
                "master outside the members"
            );
            assert!(usize::from(route.final_master) < members);
            assert!(usize::from(route.destination_count) <= DESTINATIONS_MAX);
            for &destination in route.destinations() {
                assert!(usize::from(destination) < members);
                assert_ne!(destination, routing.me, "a replica write to itself");
            }
            assert_eq!(route.immigrate_from & !all, 0);
            assert_eq!(route.duplicates & !all, 0);
        }
    }
}
