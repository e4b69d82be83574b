//! What the data path reads: for every namespace and partition, whether
//! this node serves reads and writes, who the working master is, where
//! replica writes go, and the `replicas` bitmaps clients read. The cluster
//! state machine publishes a new [`Routing`] after every change; requests
//! read the current one without locks.

use crate::conflict::Stamp;
use crate::NodeId;
use bolide_types::{DIGEST_BYTES, PARTITION_COUNT};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

/// Largest cluster (member indices fit in a u64 mask).
pub const CLUSTER_SIZE_MAX: usize = 64;
/// Most replica-write destinations of one partition (RF 8).
pub const DESTINATIONS_MAX: usize = 7;
/// Bytes of one `replicas` bitmap (4096 bits).
pub const BITMAP_BYTES: usize = PARTITION_COUNT / 8;

/// Route flags.
pub mod flag {
    /// This node is the working master: writes are applied here.
    pub const WRITE: u8 = 1;
    /// This node has the partition's complete data: reads are served here.
    pub const READ: u8 = 2;
    /// The partition may be handed to another master: writes go through
    /// its gate (see `Gates`).
    pub const GATED: u8 = 4;
    /// Nobody serves it from here (no partition map yet, or an orphan past
    /// its grace): answer "unavailable".
    pub const UNAVAILABLE: u8 = 8;
}

/// How this node handles one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Route {
    pub flags: u8,
    /// Member index of the working master, as far as this node knows.
    pub master: u8,
    /// Member index of the final master (where writes go during a handoff).
    pub final_master: u8,
    /// Where this node's writes of the partition must also be applied
    /// (member indices, `destination_count` used): the replicas and the
    /// working master, other than this node. Set whatever this node's role,
    /// so a write retried after a change goes to the current copies.
    pub destination_count: u8,
    pub destinations: [u8; DESTINATIONS_MAX],
    /// Members whose migrations of this partition this node takes now.
    pub immigrate_from: u64,
    /// (Working master) members whose copy of a record must be fetched and
    /// resolved before the record is written: copies not merged yet.
    pub duplicates: u64,
}

impl Route {
    #[inline]
    pub fn writes_here(&self) -> bool {
        self.flags & flag::WRITE != 0
    }
    #[inline]
    pub fn reads_here(&self) -> bool {
        self.flags & flag::READ != 0
    }
    #[inline]
    pub fn unavailable(&self) -> bool {
        self.flags & flag::UNAVAILABLE != 0
    }
    #[inline]
    pub fn gated(&self) -> bool {
        self.flags & flag::GATED != 0
    }
    #[inline]
    pub fn resolves_duplicates(&self) -> bool {
        self.duplicates != 0
    }

    pub fn destinations(&self) -> &[u8] {
        &self.destinations[..usize::from(self.destination_count)]
    }
}

/// How conflicting copies of a record are resolved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// The higher generation wins; equal generations, the later update.
    #[default]
    Generation,
    /// The later update wins; equal times, the higher generation.
    LastUpdateTime,
}

/// One namespace's routes and claims.
#[derive(Clone, Debug)]
pub struct NamespaceRouting {
    pub name: String,
    pub replication_factor: usize,
    /// Effective replication factor (columns of `replicas`).
    pub n_replicas: usize,
    pub conflict_policy: ConflictPolicy,
    pub routes: Vec<Route>,
    /// This node's claims per `replicas` column, MSB-first bitmaps.
    pub claims: Vec<[u8; BITMAP_BYTES]>,
    /// Strong consistency: the regime `replicas` reports (0: AP).
    pub strong_consistency: bool,
    pub regime: u32,
    /// The cluster's clock skew is past the namespace's limit: writes are
    /// refused (22) until it comes back.
    pub clock_skew_stop_writes: bool,
    /// Each partition's first `n_replicas` members of its succession
    /// order, flattened: the final master, then the replicas (empty before
    /// a partition map). The same on every node of the cluster.
    pub order: Vec<u8>,
}

impl NamespaceRouting {
    /// Partition `pid`'s final master and replicas, in order.
    pub fn holders(&self, pid: usize) -> &[u8] {
        let n = self.n_replicas;
        self.order.get(pid * n..pid * n + n).unwrap_or(&[])
    }

    #[inline]
    pub fn route(&self, pid: usize) -> Route {
        self.routes.get(pid).copied().unwrap_or(Route {
            flags: flag::UNAVAILABLE,
            ..Route::default()
        })
    }
}

/// The routing of every namespace, as one snapshot.
#[derive(Clone, Debug)]
pub struct Routing {
    /// Key of the partition map in force (0: none yet).
    pub key: u64,
    /// The committed cluster key now. Writes wait while it differs from
    /// `key` (an exchange is running).
    pub cluster_key: u64,
    /// `partition-generation`: -1 until the first balance, then bumped on
    /// every change of this node's claims.
    pub generation: i64,
    /// Member index → node id, for the map in force.
    pub members: Vec<NodeId>,
    /// This node's member index.
    pub me: u8,
    pub namespaces: Vec<NamespaceRouting>,
    /// Member index → fabric endpoint.
    pub fabric: Vec<crate::message::Endpoint>,
}

impl Routing {
    /// Before any cluster forms: nothing is served (clients get 11 and see
    /// partition-generation -1).
    pub fn unformed(me: NodeId, namespaces: &[(String, usize, ConflictPolicy)]) -> Routing {
        Routing {
            key: 0,
            cluster_key: 0,
            generation: -1,
            members: vec![me],
            me: 0,
            fabric: Vec::new(),
            namespaces: namespaces
                .iter()
                .map(|(name, rf, policy)| NamespaceRouting {
                    name: name.clone(),
                    replication_factor: *rf,
                    n_replicas: 1,
                    conflict_policy: *policy,
                    routes: vec![
                        Route {
                            flags: flag::UNAVAILABLE,
                            ..Route::default()
                        };
                        PARTITION_COUNT
                    ],
                    claims: vec![[0u8; BITMAP_BYTES]],
                    strong_consistency: false,
                    regime: 0,
                    clock_skew_stop_writes: false,
                    order: Vec::new(),
                })
                .collect(),
        }
    }

    /// A node that is its own cluster and serves everything (a standalone
    /// node, and tests below the cluster layer).
    pub fn standalone(me: NodeId, namespaces: &[(String, usize, ConflictPolicy)]) -> Routing {
        let mut routing = Routing::unformed(me, namespaces);
        routing.key = 1;
        routing.cluster_key = 1;
        routing.generation = 0;
        for ns in &mut routing.namespaces {
            for route in &mut ns.routes {
                *route = Route {
                    flags: flag::WRITE | flag::READ,
                    ..Route::default()
                };
            }
            ns.claims = vec![[0xFF; BITMAP_BYTES]];
        }
        routing
    }

    pub fn member(&self, index: u8) -> Option<NodeId> {
        self.members.get(usize::from(index)).copied()
    }

    pub fn member_index(&self, node: NodeId) -> Option<u8> {
        self.members
            .iter()
            .position(|&m| m == node)
            .map(|i| i as u8)
    }

    pub fn namespace(&self, name: &str) -> Option<&NamespaceRouting> {
        self.namespaces.iter().find(|ns| ns.name == name)
    }

    /// Whether writes may be acknowledged under this map now.
    #[inline]
    pub fn settled(&self) -> bool {
        self.key != 0 && self.key == self.cluster_key
    }
}

/// Sets bit `pid` of an MSB-first bitmap.
pub fn set_bit(bitmap: &mut [u8; BITMAP_BYTES], pid: usize) {
    if let Some(byte) = bitmap.get_mut(pid >> 3) {
        *byte |= 0x80 >> (pid & 7);
    }
}

/// Per partition, a gate a handoff closes: while it is closed the working
/// master takes no new write of the partition, and the handoff waits until
/// the writes under way (counted here) have reached their copies.
///
/// (Strong consistency) The gate also lists the partition's records
/// written here whose copies have not all been acknowledged: a write that
/// timed out (in doubt) leaves its record *unreplicated* on the master,
/// and the next read or write of it copies it to the replicas again
/// before it is served, so that nothing a client has seen can be lost
/// with this node (see [`UnreplicatedMark`]).
#[derive(Debug, Default)]
pub struct Gate {
    pub closed: std::sync::atomic::AtomicBool,
    pub inflight: std::sync::atomic::AtomicU32,
    /// How many records `unreplicated` lists (read without the lock).
    unreplicated_count: std::sync::atomic::AtomicU32,
    /// Each record's digest and the stamp of its latest write here whose
    /// copies are not all in.
    unreplicated: std::sync::Mutex<Vec<([u8; DIGEST_BYTES], Stamp)>>,
}

impl Gate {
    fn unreplicated_list(&self) -> std::sync::MutexGuard<'_, Vec<([u8; DIGEST_BYTES], Stamp)>> {
        self.unreplicated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The gates of every namespace's partitions.
#[derive(Debug)]
pub struct Gates {
    namespaces: Vec<Box<[Gate]>>,
    /// Per namespace, how many records its gates list unreplicated (one
    /// load answers "none" for a whole namespace).
    unreplicated_totals: Vec<std::sync::atomic::AtomicU64>,
}

impl Gates {
    pub fn new(namespaces: usize) -> Gates {
        Gates {
            namespaces: (0..namespaces)
                .map(|_| (0..PARTITION_COUNT).map(|_| Gate::default()).collect())
                .collect(),
            unreplicated_totals: (0..namespaces)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
        }
    }

    pub fn gate(&self, namespace: usize, pid: usize) -> Option<&Gate> {
        self.namespaces.get(namespace)?.get(pid)
    }

    /// Opens every gate (a new map: no handoff is under way).
    pub fn open_all(&self) {
        for gates in &self.namespaces {
            for gate in gates.iter() {
                gate.closed.store(false, SeqCst);
            }
        }
    }

    /// A new routing is being published over `previous_key`: a new map
    /// ends every handoff, so every gate opens.
    pub fn on_publish(&self, previous_key: u64, routing: &Routing) {
        if routing.key != previous_key {
            self.open_all();
        }
    }

    /// (SC) A write of `digest` with `stamp` was applied here and its
    /// copies are on their way: the record is unreplicated until
    /// [`UnreplicatedMark::replicated`].
    pub fn mark_unreplicated(
        self: &Arc<Self>,
        namespace: usize,
        pid: usize,
        digest: [u8; DIGEST_BYTES],
        stamp: Stamp,
    ) -> Option<UnreplicatedMark> {
        let gate = self.gate(namespace, pid)?;
        let mut list = gate.unreplicated_list();
        match list.iter_mut().find(|(held, _)| *held == digest) {
            Some(entry) => entry.1 = stamp,
            None => {
                list.push((digest, stamp));
                gate.unreplicated_count.fetch_add(1, SeqCst);
                self.total(namespace, 1, true);
            }
        }
        Some(UnreplicatedMark::new(self, namespace, pid, digest, stamp))
    }

    /// Whether a record of the partition is unreplicated here.
    // PERF: hot path (SC requests): one atomic load when none is.
    #[inline]
    pub fn is_unreplicated(
        &self,
        namespace: usize,
        pid: usize,
        digest: &[u8; DIGEST_BYTES],
    ) -> bool {
        let Some(gate) = self.gate(namespace, pid) else {
            return false;
        };
        gate.unreplicated_count.load(SeqCst) != 0
            && gate
                .unreplicated_list()
                .iter()
                .any(|(held, _)| held == digest)
    }

    /// (SC) A mark for copying an unreplicated record again: its
    /// [`UnreplicatedMark::replicated`] takes the record off the list
    /// unless a later write marked it again meanwhile. Taken before the
    /// held copy is read, so that the copy sent covers the listed write.
    /// None if the record is not listed.
    pub fn rereplication_mark(
        self: &Arc<Self>,
        namespace: usize,
        pid: usize,
        digest: &[u8; DIGEST_BYTES],
    ) -> Option<UnreplicatedMark> {
        let gate = self.gate(namespace, pid)?;
        let stamp = gate
            .unreplicated_list()
            .iter()
            .find(|(held, _)| held == digest)
            .map(|&(_, stamp)| stamp)?;
        Some(UnreplicatedMark::new(self, namespace, pid, *digest, stamp))
    }

    /// The partition's unreplicated records (their digests).
    pub fn unreplicated(&self, namespace: usize, pid: usize) -> Vec<[u8; DIGEST_BYTES]> {
        match self.gate(namespace, pid) {
            Some(gate) if gate.unreplicated_count.load(SeqCst) != 0 => gate
                .unreplicated_list()
                .iter()
                .map(|(digest, _)| *digest)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// `unreplicated_records`: how many records of the namespace are
    /// unreplicated here.
    // PERF: one load.
    #[inline]
    pub fn unreplicated_count(&self, namespace: usize) -> u64 {
        self.unreplicated_totals
            .get(namespace)
            .map_or(0, |total| total.load(SeqCst))
    }

    /// Moves a namespace's total (under the gate's list lock).
    fn total(&self, namespace: usize, n: u64, add: bool) {
        if let Some(total) = self.unreplicated_totals.get(namespace) {
            if add {
                total.fetch_add(n, SeqCst);
            } else {
                let before = total.fetch_sub(n, SeqCst);
                assert!(before >= n, "unreplicated total underflows");
            }
        }
    }

    /// Forgets the partition's unreplicated records (this node no longer
    /// holds it, or is no longer its master: the new master's copies are
    /// the regime's).
    pub fn forget_unreplicated(&self, namespace: usize, pid: usize) {
        if let Some(gate) = self.gate(namespace, pid) {
            if gate.unreplicated_count.load(SeqCst) != 0 {
                let mut list = gate.unreplicated_list();
                let listed = list.len() as u64;
                list.clear();
                gate.unreplicated_count.store(0, SeqCst);
                self.total(namespace, listed, false);
            }
        }
    }
}

/// (SC) A record written (or about to be copied again) with `stamp`:
/// once every copy is acknowledged, [`UnreplicatedMark::replicated`]
/// takes it off the unreplicated list, unless a later write marked it
/// again meanwhile. Dropped without that (a timeout), it stays listed.
#[derive(Debug)]
pub struct UnreplicatedMark {
    gates: Arc<Gates>,
    namespace: usize,
    pid: usize,
    digest: [u8; DIGEST_BYTES],
    stamp: Stamp,
}

impl UnreplicatedMark {
    fn new(
        gates: &Arc<Gates>,
        namespace: usize,
        pid: usize,
        digest: [u8; DIGEST_BYTES],
        stamp: Stamp,
    ) -> UnreplicatedMark {
        UnreplicatedMark {
            gates: Arc::clone(gates),
            namespace,
            pid,
            digest,
            stamp,
        }
    }

    /// Every copy of the write with this stamp is in.
    pub fn replicated(self) {
        let Some(gate) = self.gates.gate(self.namespace, self.pid) else {
            return;
        };
        let mut list = gate.unreplicated_list();
        if let Some(at) = list
            .iter()
            .position(|&(digest, stamp)| digest == self.digest && stamp == self.stamp)
        {
            list.swap_remove(at);
            gate.unreplicated_count.fetch_sub(1, SeqCst);
            self.gates.total(self.namespace, 1, false);
        }
    }
}

/// Counts a write under way in a gated partition until dropped.
#[derive(Debug)]
pub struct GateGuard {
    gates: Arc<Gates>,
    namespace: usize,
    pid: usize,
}

impl GateGuard {
    /// Enters the gate of a partition; None if it is closed (a handoff is
    /// draining it: the write must go to the new master).
    pub fn enter(gates: &Arc<Gates>, namespace: usize, pid: usize) -> Option<GateGuard> {
        let gate = gates.gate(namespace, pid)?;
        let before = gate.inflight.fetch_add(1, SeqCst);
        assert!(before < u32::MAX, "gate in-flight count overflows");
        if gate.closed.load(SeqCst) {
            let held = gate.inflight.fetch_sub(1, SeqCst);
            assert!(held > 0, "gate in-flight count underflows");
            return None;
        }
        Some(GateGuard {
            gates: Arc::clone(gates),
            namespace,
            pid,
        })
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        if let Some(gate) = self.gates.gate(self.namespace, self.pid) {
            let held = gate.inflight.fetch_sub(1, SeqCst);
            assert!(held > 0, "gate in-flight count underflows");
        }
    }
}
