//! The data path between nodes as state machines: what a request does on
//! other nodes ([`work`]: the proxy hop rule, duplicate resolution, a
//! write's copies to the other holders), and migrations ([`emigrate`],
//! [`immigrate`]), with the receiving side of every fabric request.
//!
//! Nothing here does I/O. A machine takes inputs (a start, a reply to one
//! of its calls, a tick with the time and the routing in force, the result
//! of running the request locally) and leaves [`Output`]s: send a fabric
//! request, run the request here again, finish with an answer, count,
//! report a [`DataEvent`] to the cluster state machine. A driver carries
//! them out: the server over fabric connections on its event loops and
//! migrate thread, `bolide-sim` over a seeded network; both encode every
//! message with the real codec ([`crate::fabric`]). The record store is
//! behind [`RecordStore`].
//!
//! The contract every driver keeps:
//! - after every input, it takes every output ([`Work::next_output`] and
//!   the like) before the next input; a `Send` is encoded at once with the
//!   machine's `encode(token, id, out)`, where `id` is the wire id the
//!   driver chose (the answer repeats it);
//! - the answer to a call comes back as `reply(token, ..)`: an answer
//!   frame, or [`Reply::Lost`] when none will come (no route, connection
//!   closed). A reply for a token the machine no longer waits on is
//!   ignored, so late and duplicate answers are harmless;
//! - it ticks the machine no later than its `wake_at()`; ticking earlier
//!   or more often changes nothing.

pub mod emigrate;
pub mod immigrate;
mod proxy;
mod queue;
pub mod receive;
mod replicate;
pub mod rereplicate;
mod resolve;
#[cfg(test)]
mod tests;
pub mod work;

pub use emigrate::{Emigrator, EmigratorConfig};
pub use immigrate::Immigrator;
pub use receive::{apply_replica_write, serve_fetch, serve_proxied, OtherRegime, Proxied};
pub use work::{Need, Ran, Replication, Work};

use crate::fabric::{Channel, Fabric, Image};
use crate::node::DataEvent;
use crate::routing::{ConflictPolicy, GateGuard, Gates, Route, Routing, DESTINATIONS_MAX};
use crate::NodeId;
use bolide_types::{DIGEST_BYTES, NAMESPACE_NAME_BYTES_MAX};
use std::sync::Arc;

/// Identifies one call of a machine; the driver hands it back with the
/// call's reply.
pub type Token = u32;

/// The longest pause between two attempts of one request.
pub const RETRY_PAUSE_MAX_MS: u64 = 50;
/// A request that must wait for the map to settle runs again after this.
pub const AGAIN_PAUSE_MS: u64 = 5;
/// A duplicate resolution that could not fetch every copy routes the
/// request again after this.
pub const RESOLVE_RETRY_MS: u64 = 10;
/// Redirects a proxy follows in a row before it routes again itself.
pub const PROXY_HOPS_MAX: u32 = 3;
/// How often a waiting request looks at the routing (a map change sends a
/// write's copies to the new holders without waiting for its deadline).
pub const ROUTING_POLL_MS: u64 = 20;

/// The pause before attempt `attempt` + 1: 2, 4, 8, 16, 32, then 50 ms.
pub fn retry_pause_ms(attempt: u32) -> u64 {
    (2u64 << attempt.min(5)).min(RETRY_PAUSE_MAX_MS)
}

/// Statistics the data path keeps (the server's names in comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// `client_proxy_complete`
    ClientProxyComplete,
    /// `client_proxy_error`
    ClientProxyError,
    /// `client_proxy_timeout`
    ClientProxyTimeout,
    /// `proxy_in_progress` + 1
    ProxyBegun,
    /// `proxy_in_progress` - 1
    ProxyEnded,
    /// `from_proxy_complete`
    FromProxyComplete,
    /// `from_proxy_redirect`
    FromProxyRedirect,
    /// `replica_writes_sent`
    ReplicaWritesSent,
    /// `replica_writes_received`
    ReplicaWritesReceived,
    /// `replica_writes_refused`
    ReplicaWritesRefused,
    /// `replica_write_timeouts`
    ReplicaWriteTimeouts,
    /// `dup_res_fetches`
    DupResFetches,
    /// `migrate_records_transmitted`
    MigrateRecordsTransmitted,
    /// `migrate_record_receives`
    MigrateRecordsReceived,
    /// `migrate_records_applied`
    MigrateRecordsApplied,
    /// `migrate_records_skipped`
    MigrateRecordsSkipped,
    /// `migrate_partitions_sent`
    MigratePartitionsSent,
    /// `migrate_partitions_received`
    MigratePartitionsReceived,
}

/// What a machine asks its driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send a request to `to` on `channel`; encode it with the machine's
    /// `encode(token, id, out)`.
    Send {
        token: Token,
        to: NodeId,
        channel: Channel,
    },
    /// Run the request here again with the current routing and report
    /// what it led to with `ran` (`resolved`: its record was just resolved
    /// against the copies not merged yet).
    Run {
        resolved: bool,
    },
    /// The request's answer is ready.
    Finish(Finish),
    Count(Counter, u64),
    /// Report to the cluster state machine.
    Event(DataEvent),
}

/// Which answer the client gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The answer of the last local run (for a write, once its copies are
    /// in; with commit level master, at once).
    Local,
    /// The answer inside the reply just fed in (a proxy's `ProxyAnswer`).
    Relay,
    /// Not done before the deadline: a timeout (9). A write may have been
    /// applied (it is in doubt).
    Timeout,
}

/// What came back for a call.
#[derive(Clone, Copy, Debug)]
pub enum Reply<'a> {
    Answer(&'a Fabric<'a>),
    /// An answer that could not be decoded.
    Invalid,
    /// No answer will come: no route to the node, or its connection
    /// failed or closed.
    Lost,
}

impl Reply<'_> {
    /// The code of an `Ack`; None for anything else.
    pub fn ack_code(&self) -> Option<u8> {
        match self {
            Reply::Answer(Fabric::Ack { code, .. }) => Some(*code),
            _ => None,
        }
    }
}

/// A record's whole image, or a tombstone (`record` None), owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedImage {
    pub digest: [u8; DIGEST_BYTES],
    pub generation: u16,
    /// Milliseconds since 2010-01-01.
    pub last_update_ms: u64,
    /// Seconds since 2010-01-01; 0: never.
    pub void_time: u32,
    pub set_name: Vec<u8>,
    pub record: Option<Vec<u8>>,
}

impl OwnedImage {
    pub fn image(&self) -> Image<'_> {
        Image {
            digest: self.digest,
            generation: self.generation,
            last_update_ms: self.last_update_ms,
            void_time: self.void_time,
            set_name: &self.set_name,
            record: self.record.as_deref(),
        }
    }

    /// Bytes a migration frame counts for it.
    pub fn frame_bytes(&self) -> usize {
        64 + self.record.as_ref().map_or(0, Vec::len)
    }
}

impl Image<'_> {
    pub fn to_owned_image(&self) -> OwnedImage {
        OwnedImage {
            digest: self.digest,
            generation: self.generation,
            last_update_ms: self.last_update_ms,
            void_time: self.void_time,
            set_name: self.set_name.to_vec(),
            record: self.record.map(<[u8]>::to_vec),
        }
    }
}

/// The store could not apply a copy (full, failed, a set it cannot name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreFailed;

/// A copy offered to the store.
#[derive(Debug)]
pub struct Applied<W> {
    /// It won over the held copy and is stored now.
    pub applied: bool,
    /// (commit-to-device) Wait on this before acknowledging it.
    pub wait: Option<W>,
}

/// The record store as the data path needs it. Namespaces are the
/// routing's indices. The server implements it over `bolide-store`, the
/// simulator over an in-memory map.
pub trait RecordStore {
    /// A wait for a write to become durable, opaque here.
    type Wait;

    /// Applies `image` if it wins over the held copy under `policy`
    /// (equal stamps keep the held copy).
    fn apply(
        &self,
        namespace: usize,
        image: &Image<'_>,
        policy: ConflictPolicy,
    ) -> Result<Applied<Self::Wait>, StoreFailed>;

    /// This node's copy of a record or its tombstone.
    fn fetch(&self, namespace: usize, digest: &[u8; DIGEST_BYTES]) -> Option<OwnedImage>;

    /// Every record and tombstone of a partition; records that cannot be
    /// read are left out and counted in `skipped`.
    fn snapshot(&self, namespace: usize, pid: u16, skipped: &mut u64) -> Vec<OwnedImage>;

    /// Forgets this node's copy of a partition; how many records.
    fn drop_partition(&self, namespace: usize, pid: u16) -> u64;
}

/// A namespace name held inline (no allocation per request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceName {
    bytes: [u8; NAMESPACE_NAME_BYTES_MAX],
    len: u8,
}

impl NamespaceName {
    /// The name, cut at the longest a namespace name may be (names come
    /// from the configuration, which refuses longer ones).
    pub fn new(name: &str) -> NamespaceName {
        let mut cut = name.len().min(NAMESPACE_NAME_BYTES_MAX);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut bytes = [0u8; NAMESPACE_NAME_BYTES_MAX];
        bytes[..cut].copy_from_slice(&name.as_bytes()[..cut]);
        NamespaceName {
            bytes,
            len: cut as u8,
        }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// Up to [`DESTINATIONS_MAX`] nodes, held inline: a write's other holders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nodes {
    ids: [NodeId; DESTINATIONS_MAX],
    len: u8,
}

impl Nodes {
    /// The nodes of a route's member indices in `routing`.
    pub fn of_members(routing: &Routing, members: &[u8]) -> Nodes {
        let mut nodes = Nodes::default();
        for &member in members {
            if let Some(node) = routing.member(member) {
                nodes.push(node);
            }
        }
        nodes
    }

    pub fn push(&mut self, node: NodeId) {
        assert!(usize::from(self.len) < DESTINATIONS_MAX, "too many holders");
        self.ids[usize::from(self.len)] = node;
        self.len += 1;
    }

    pub fn as_slice(&self) -> &[NodeId] {
        &self.ids[..usize::from(self.len)]
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A read's strong-consistency mode, from its info3 bits (0x80 relax,
/// 0x40 type). AP namespaces ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// The working master only.
    #[default]
    Session,
    /// The working master only, under the committed cluster's map.
    Linearize,
    /// Any complete copy.
    AllowReplica,
    /// Any complete copy; any local copy of an unavailable partition.
    AllowUnavailable,
}

impl ReadMode {
    pub const RELAX: u8 = 0x80;
    pub const TYPE: u8 = 0x40;

    pub fn of_info3(info3: u8) -> ReadMode {
        match (info3 & Self::RELAX != 0, info3 & Self::TYPE != 0) {
            (false, false) => ReadMode::Session,
            (false, true) => ReadMode::Linearize,
            (true, false) => ReadMode::AllowReplica,
            (true, true) => ReadMode::AllowUnavailable,
        }
    }

    /// Served by the working master only.
    pub fn strict(self) -> bool {
        matches!(self, ReadMode::Session | ReadMode::Linearize)
    }
}

/// How this node handles one request for one partition, by its route.
#[derive(Debug)]
pub enum Decision {
    /// Nobody serves it from here: answer 11.
    Unavailable,
    /// A write while the cluster's clock skew stops writes: answer 22.
    Forbidden,
    /// Another node serves it: proxy it there.
    Proxy(NodeId),
    /// A write while the map is being exchanged: run it again shortly.
    Again,
    /// A write whose record may have newer copies not merged yet: fetch
    /// them from the route's `duplicates` first.
    Resolve,
    /// Read it here.
    Read,
    /// Write it here; the guard (a gated partition) counts it until its
    /// copies are in.
    Write(Option<GateGuard>),
}

/// The routing rule every request follows, in order: unavailable; a write
/// goes to the working master (during a handoff whose gate is closed, to
/// the final master), waits while the map is being exchanged, resolves
/// its record against copies not merged yet; a read is served where the
/// data is complete, else by the working master. In a strong-consistency
/// namespace a session or linearize read is the working master's only (a
/// linearize read waits while the map is being exchanged; both resolve
/// the record against copies not merged yet), and an
/// allow-unavailable read of an unavailable partition reads the local
/// copy. While the cluster's clock skew is past the namespace's limit,
/// writes are refused.
// PERF: hot path (RF 1 and single nodes: a few flag tests).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn decide(
    routing: &Routing,
    gates: &Arc<Gates>,
    route: &Route,
    namespace: usize,
    pid: usize,
    is_write: bool,
    read_mode: ReadMode,
    resolved: bool,
) -> Decision {
    let sc = || {
        routing
            .namespaces
            .get(namespace)
            .is_some_and(|ns| ns.strong_consistency)
    };
    if route.unavailable() {
        if !is_write && read_mode == ReadMode::AllowUnavailable && sc() {
            return Decision::Read;
        }
        return Decision::Unavailable;
    }
    if is_write
        && routing
            .namespaces
            .get(namespace)
            .is_some_and(|ns| ns.clock_skew_stop_writes)
    {
        return Decision::Forbidden;
    }
    let proxy_to = |member: u8| match routing.member(member) {
        Some(node) => Decision::Proxy(node),
        None => Decision::Unavailable,
    };
    if !is_write {
        if route.reads_here() && (route.writes_here() || !read_mode.strict() || !sc()) {
            if read_mode.strict() && sc() {
                if read_mode == ReadMode::Linearize && !routing.settled() {
                    return Decision::Again;
                }
                // The master's copy may miss what the copies not merged
                // yet hold: resolve the record first, as a write does. A
                // linearize read also confirms the regime with every other
                // holder.
                let confirm = read_mode == ReadMode::Linearize && route.destination_count > 0;
                if (route.resolves_duplicates() || confirm) && !resolved {
                    return Decision::Resolve;
                }
            }
            return Decision::Read;
        }
        return proxy_to(route.master);
    }
    if !route.writes_here() {
        return proxy_to(route.master);
    }
    let mut guard = None;
    if route.gated() {
        match GateGuard::enter(gates, namespace, pid) {
            Some(entered) => guard = Some(entered),
            // Handing off: the final master takes it.
            None => return proxy_to(route.final_master),
        }
    }
    if !routing.settled() {
        return Decision::Again;
    }
    if route.resolves_duplicates() && !resolved {
        return Decision::Resolve;
    }
    Decision::Write(guard)
}

/// Whom a `Decision::Resolve` fetches from: the copies not merged yet
/// and, for a linearize read in a strong-consistency namespace, every
/// other holder too (their answers under this node's cluster key confirm
/// that the regime is still this node's).
pub fn resolve_from(
    routing: &Routing,
    route: &Route,
    namespace: usize,
    is_write: bool,
    read_mode: ReadMode,
) -> Vec<NodeId> {
    let mut mask = route.duplicates;
    let sc = routing
        .namespaces
        .get(namespace)
        .is_some_and(|ns| ns.strong_consistency);
    if sc && !is_write && read_mode == ReadMode::Linearize {
        for &member in route.destinations() {
            mask |= 1u64 << member;
        }
    }
    members_of(routing, mask)
}

/// (SC) Whom a write that left its record as it was (refused, or a
/// delete of nothing) first asks, before answering: every other holder of
/// the partition, as for a linearize read. Such an answer tells the client
/// what the master holds, as a read does, so the master first confirms
/// that the regime is still its own (a master paused or cut off while the
/// cluster moved on must not answer from the copy it was left with), and
/// takes in any newer copy; then the write runs again and answers. None:
/// answer now (AP, already confirmed, or no other holder).
pub fn confirm_unapplied(
    routing: &Routing,
    route: &Route,
    namespace: usize,
    resolved: bool,
) -> Option<Vec<NodeId>> {
    let sc = routing
        .namespaces
        .get(namespace)
        .is_some_and(|ns| ns.strong_consistency);
    if !sc || resolved || route.destination_count == 0 {
        return None;
    }
    let mut mask = route.duplicates;
    for &member in route.destinations() {
        mask |= 1u64 << member;
    }
    Some(members_of(routing, mask))
}

/// The node ids of a members mask in `routing`.
pub fn members_of(routing: &Routing, mask: u64) -> Vec<NodeId> {
    (0..64u8)
        .filter(|m| mask & (1u64 << m) != 0)
        .filter_map(|m| routing.member(m))
        .collect()
}

/// The partition of a record's digest.
pub fn pid_of(digest: &[u8; DIGEST_BYTES]) -> u16 {
    bolide_types::Digest(*digest).partition_id().0
}
