//! Where a request meets the cluster: the partition's route decides
//! whether it runs here, waits for the map, must first resolve its record
//! against copies not merged yet, or goes to another node; a write that
//! ran here names the copies it must reach before it is answered.
//!
//! The routing rule itself is the cluster's
//! ([`bolide_cluster::datapath::decide`]), shared with the simulator. The
//! transaction layer does no I/O: it returns the work on other nodes as a
//! [`Remote`] value, and the server carries it out over the fabric.

pub use bolide_cluster::datapath::{Need, Replication};
use bolide_cluster::datapath::{Nodes, OwnedImage};
use bolide_cluster::routing::{GateGuard, Gates};
use bolide_cluster::{Route, Routing};
use bolide_store::Namespace;
use bolide_types::Digest;
use bolide_wire::Framing;
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
    /// (SC) A write that changes nothing confirms the regime with the
    /// other holders before it answers, as a linearize read does
    /// ([`bolide_cluster::datapath::confirm_unapplied`]). The Redis front
    /// end, whose reads are session reads, answers it at once.
    pub confirm_unapplied: bool,
}

impl<'a> Cluster<'a> {
    pub fn new(routing: &'a Arc<Routing>, gates: &'a Arc<Gates>) -> Cluster<'a> {
        Cluster {
            routing,
            gates,
            from_proxy: false,
            resolved: false,
            runner: None,
            confirm_unapplied: true,
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
}

impl Cluster<'_> {
    /// (SC) The copies of a record left unreplicated here (its last
    /// write's copies did not all reach the other holders): the work that
    /// sends its held copy to them again, with `guard` held until they
    /// have it, then runs the request (`then_run`) or ends. None when the
    /// record is not listed, or this node does not write its partition
    /// (the request goes where it is written). A record listed but no
    /// longer held (its partition dropped) is forgotten.
    pub fn copy_again(
        &self,
        index: usize,
        namespace: &Namespace,
        digest: &Digest,
        guard: Option<GateGuard>,
        then_run: bool,
    ) -> Option<Need> {
        let pid = digest.partition_id().index();
        if !self.gates.is_unreplicated(index, pid, &digest.0) {
            return None;
        }
        let route = self.route(index, pid);
        if route.unavailable() || !route.writes_here() {
            return None;
        }
        let mark = self.gates.rereplication_mark(index, pid, &digest.0)?;
        let Some(image) = held_image(namespace, digest) else {
            self.gates.forget_unreplicated(index, pid);
            return None;
        };
        Some(Need::Rereplicate {
            copies: Replication {
                namespace: index,
                pid: pid as u16,
                cluster_key: self.routing.cluster_key,
                regime: self.routing.namespaces.get(index).map_or(0, |ns| ns.regime),
                to: Nodes::of_members(self.routing, route.destinations()),
                image,
                commit_master: false,
                guard,
                mark: Some(mark),
            },
            then_run,
        })
    }
}

/// This node's copy of a record, or its tombstone, as the data path sends
/// it (duplicate resolution, re-replication).
pub fn held_image(ns: &Namespace, digest: &Digest) -> Option<OwnedImage> {
    let set_name = |set_id: u16| ns.set_name(set_id).unwrap_or_default().as_bytes().to_vec();
    let table = ns.read(digest);
    if let Some(entry) = table.get(digest) {
        let mut buf = Vec::new();
        let record = ns.record_bytes(&entry, &mut buf).ok()?.to_vec();
        return Some(OwnedImage {
            digest: digest.0,
            generation: entry.meta.generation,
            last_update_ms: entry.meta.last_update_ms,
            void_time: entry.meta.void_time,
            set_name: set_name(entry.meta.set_id),
            record: Some(record),
        });
    }
    table.tombstone(digest).map(|tombstone| OwnedImage {
        digest: digest.0,
        generation: tombstone.generation,
        last_update_ms: tombstone.last_update_ms,
        void_time: 0,
        set_name: set_name(tombstone.set_id),
        record: None,
    })
}

/// Work on other nodes a request needs before it is answered: what the
/// cluster's data path ([`bolide_cluster::datapath::Work`]) carries out.
pub struct Remote {
    pub need: Need,
    /// The request, to run again here or elsewhere (for a write that ran
    /// here, only its framing and timeout: its body is not kept).
    pub request: Request,
    /// (A write that ran here) the client's answer, sent once every copy
    /// is acknowledged.
    pub answer: Vec<u8>,
}

/// A request kept to run again or elsewhere.
pub struct Request {
    pub body: Vec<u8>,
    pub framing: Framing,
    /// The client's timeout from the message (0: the server's default).
    pub timeout_ms: u32,
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
