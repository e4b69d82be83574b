//! Where a request meets the cluster: the partition's route decides
//! whether it runs here, waits for the map, must first resolve its record
//! against copies not merged yet, or goes to another node; a write that
//! ran here names the copies it must reach before it is answered.
//!
//! The transaction layer does no I/O: it returns the work on other nodes
//! as a [`Remote`] value, and the server carries it out over the fabric.

use bolide_cluster::routing::{Gate, Gates};
use bolide_cluster::{NodeId, Route, Routing};
use bolide_store::OwnedCopy;
use bolide_types::Digest;
use bolide_wire::Framing;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

/// This node's standing in the cluster, for one request.
#[derive(Clone, Copy)]
pub struct Cluster<'a> {
    pub routing: &'a Arc<Routing>,
    pub gates: &'a Arc<Gates>,
    /// The request was proxied here by another node: it is never proxied
    /// again (the other node routes it again instead).
    pub from_proxy: bool,
    /// The request's record was already resolved against the copies not
    /// merged yet.
    pub resolved: bool,
    /// Runs batch rows that need other nodes (None: they answer 11).
    pub runner: Option<&'a Arc<dyn crate::RemoteRunner>>,
}

impl<'a> Cluster<'a> {
    pub fn new(routing: &'a Arc<Routing>, gates: &'a Arc<Gates>) -> Cluster<'a> {
        Cluster {
            routing,
            gates,
            from_proxy: false,
            resolved: false,
            runner: None,
        }
    }

    /// The route of partition `pid` of namespace `namespace` (index).
    // PERF: hot path.
    #[inline]
    pub fn route(&self, namespace: usize, pid: usize) -> Route {
        match self.routing.namespaces.get(namespace) {
            Some(ns) => ns.route(pid),
            None => Route {
                flags: bolide_cluster::routing::flag::UNAVAILABLE,
                ..Route::default()
            },
        }
    }

    fn member(&self, index: u8) -> Option<NodeId> {
        self.routing.member(index)
    }

    /// The node ids of a route's members mask.
    pub fn members_of(&self, mask: u64) -> Vec<NodeId> {
        (0..64u8)
            .filter(|m| mask & (1u64 << m) != 0)
            .filter_map(|m| self.member(m))
            .collect()
    }
}

/// Work on other nodes a request needs before it is answered.
pub enum Remote {
    /// This node does not serve the request: send it to `to` and relay its
    /// answer. `request` is the AS_MSG body, answered framed as `framing`.
    Proxy { to: NodeId, request: Request },
    /// The partition is not servable for writes until the map in force
    /// settles (an exchange is running): run the request again shortly.
    Again { request: Request },
    /// Fetch the record's copies from `from`, apply the newest here, then
    /// run the request again (duplicate resolution).
    Resolve {
        namespace: usize,
        digest: Digest,
        from: Vec<NodeId>,
        request: Request,
    },
    /// The write was applied here; `copy` must reach `to` before `answer`
    /// goes out.
    Replicate(Replication),
}

/// A request kept to run again or elsewhere.
pub struct Request {
    pub body: Vec<u8>,
    pub framing: Framing,
    /// The client's timeout from the message (0: the server's default).
    pub timeout_ms: u32,
}

/// A write's copy on its way to the other holders of its partition.
pub struct Replication {
    pub namespace: usize,
    pub pid: u16,
    /// The cluster key the destinations were chosen under.
    pub cluster_key: u64,
    pub to: Vec<NodeId>,
    pub copy: OwnedCopy,
    /// The client's answer, sent once every copy is acknowledged.
    pub answer: Vec<u8>,
    /// How the answer is framed (for an error answer instead).
    pub framing: Framing,
    /// The client asked to be answered once the master has the write
    /// (commit level master): the copies go out without waiting.
    pub commit_master: bool,
    pub timeout_ms: u32,
    /// Holds the partition's gate open count until the copies are in.
    pub guard: Option<GateGuard>,
}

/// Counts a write under way in a gated partition until dropped.
pub struct GateGuard {
    gates: Arc<Gates>,
    namespace: usize,
    pid: usize,
}

impl GateGuard {
    /// Enters the gate of a partition; None if it is closed (a handoff is
    /// draining it: the write must go to the new master).
    pub fn enter(gates: &Arc<Gates>, namespace: usize, pid: usize) -> Option<GateGuard> {
        let gate: &Gate = gates.gate(namespace, pid)?;
        gate.inflight.fetch_add(1, SeqCst);
        if gate.closed.load(SeqCst) {
            gate.inflight.fetch_sub(1, SeqCst);
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
            gate.inflight.fetch_sub(1, SeqCst);
        }
    }
}

/// A request kept as a message of its own.
pub(crate) fn keep_request_bytes(body: Vec<u8>, framing: Framing, timeout_ms: u32) -> Request {
    Request {
        body,
        framing,
        timeout_ms,
    }
}

/// A node on its own that serves every partition of every namespace (a
/// store without a cluster: tests, tools, fuzzing).
pub struct Standalone {
    routing: Arc<Routing>,
    gates: Arc<Gates>,
}

impl Standalone {
    pub fn new(store: &bolide_store::Store) -> Standalone {
        let namespaces: Vec<(String, usize, bolide_cluster::ConflictPolicy)> = store
            .namespaces()
            .iter()
            .map(|ns| {
                (
                    ns.name().to_owned(),
                    ns.config.replication_factor as usize,
                    bolide_cluster::ConflictPolicy::Generation,
                )
            })
            .collect();
        Standalone {
            routing: Arc::new(Routing::standalone(1, &namespaces)),
            gates: Arc::new(Gates::new(namespaces.len())),
        }
    }

    pub fn cluster(&self) -> Cluster<'_> {
        Cluster::new(&self.routing, &self.gates)
    }
}
