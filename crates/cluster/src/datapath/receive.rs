//! The receiving side of the fabric's requests: a write's copy, a fetch
//! for duplicate resolution, and a request proxied here. (Migration steps
//! are received by [`super::Immigrator`].)

use super::{Counter, Need, OwnedImage, Ran, RecordStore, Work};
use crate::fabric::{code, Image, ProxyFraming};
use crate::routing::{ConflictPolicy, Routing};
use crate::NodeId;
use bolide_types::DIGEST_BYTES;

/// The answer to a replica write.
#[derive(Debug)]
pub struct ReplicaAck<W> {
    pub code: u8,
    /// (commit-to-device) Acknowledge only once this is durable.
    pub wait: Option<W>,
}

/// Applies a write's copy if this node is in the map the master used
/// (settled, same cluster key): else answers CLUSTER_KEY_MISMATCH and the
/// master sends it again under its current map. Copies are ordered by
/// last-update time (then generation), as Aerospike orders replica
/// writes, so a late or repeated one changes nothing.
pub fn apply_replica_write<S: RecordStore>(
    store: &S,
    routing: &Routing,
    namespace: &str,
    cluster_key: u64,
    image: &Image<'_>,
    count: &mut impl FnMut(Counter, u64),
) -> ReplicaAck<S::Wait> {
    count(Counter::ReplicaWritesReceived, 1);
    if !routing.settled() || routing.cluster_key != cluster_key {
        count(Counter::ReplicaWritesRefused, 1);
        return ReplicaAck {
            code: code::CLUSTER_KEY_MISMATCH,
            wait: None,
        };
    }
    let Some(index) = routing
        .namespaces
        .iter()
        .position(|ns| ns.name == namespace)
    else {
        return ReplicaAck {
            code: code::FAILED,
            wait: None,
        };
    };
    match store.apply(index, image, ConflictPolicy::LastUpdateTime) {
        Ok(applied) => ReplicaAck {
            code: code::OK,
            wait: applied.wait,
        },
        Err(_) => ReplicaAck {
            code: code::FAILED,
            wait: None,
        },
    }
}

/// This node's copy of a record, for another node's duplicate resolution
/// (None: no copy, or no such namespace).
pub fn serve_fetch<S: RecordStore>(
    store: &S,
    routing: &Routing,
    namespace: &str,
    digest: &[u8; DIGEST_BYTES],
) -> Option<OwnedImage> {
    let index = routing
        .namespaces
        .iter()
        .position(|ns| ns.name == namespace)?;
    store.fetch(index, digest)
}

/// What a request proxied here becomes.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "moved once into the task that drives it; boxing would allocate"
)]
pub enum Proxied {
    /// Answered here: send the answer back.
    Answered,
    /// Not served here either: send back the node that serves it as this
    /// node sees it (the proxying node goes there, or routes again).
    Redirect(NodeId),
    /// It needs other nodes too: drive this work; its answer goes back.
    Work(Work),
}

/// Serves a request another node proxied here, given what running it here
/// (as a proxied request, never proxied onward) found.
#[allow(clippy::too_many_arguments)]
pub fn serve_proxied(
    me: NodeId,
    ran: Ran,
    now_ms: u64,
    timeout_ms: u64,
    body: Vec<u8>,
    framing: ProxyFraming,
    routing: &Routing,
    count: &mut impl FnMut(Counter, u64),
) -> Proxied {
    match ran {
        Ran::Answered => {
            count(Counter::FromProxyComplete, 1);
            Proxied::Answered
        }
        Ran::Need(Need::Proxy { to }) => {
            count(Counter::FromProxyRedirect, 1);
            Proxied::Redirect(to)
        }
        Ran::Need(need) => {
            count(Counter::FromProxyComplete, 1);
            let mut work = Work::new(me, now_ms, timeout_ms, body, framing);
            work.start(need, now_ms, routing);
            Proxied::Work(work)
        }
    }
}
