//! The transaction layer: one request in, its answer out.
//!
//! `execute` decodes an AS_MSG; a single-record command becomes a typed
//! [`request::Request`] (borrowing the message's bytes), which is routed
//! to its namespace and partition and run under the partition lock (reads
//! under the read lock, writes under the write lock, so two writes to one
//! record never interleave); the answer goes to a [`reply::Reply`], here
//! the AS_MSG frame in the connection's output buffer. Another protocol
//! builds typed requests itself and calls `execute_request` with a sink of
//! its own. Everything runs to completion on the calling thread and never
//! blocks on I/O. Each request carries its `Caller` (who is asking);
//! `Caller::check` is the one access-control hook, asked on every path
//! before any work (`caller`).
//!
//! Owns the request's life: decode, route (`cluster`), lock, read and
//! write, replicate, batches, scans, queries, background jobs, secondary
//! indexes (`sindex`) and the glue to UDFs (`udf`). What is computed over
//! values (list and map ops, bits, HyperLogLog, geo, expressions, bin ops)
//! is `bolide-particles`; `record` lets it read records.
//!
//! Depends on `bolide-types`, `bolide-wire`, `bolide-store`,
//! `bolide-cluster`, `bolide-particles` and `bolide-udf`; knows nothing of
//! sockets.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

mod batch;
pub mod caller;
pub mod cluster;
pub mod jobs;
pub mod metadata;
mod query;
mod read;
mod read_touch;
mod record;
pub mod reply;
pub mod request;
mod scan;
pub mod sindex;
mod ttl;
pub mod udf;
mod write;

pub use batch::{BatchJob, RemoteRunner};
pub use bolide_cluster::routing::GateGuard;
pub use caller::{Caller, Permission, Policy as AccessPolicy};
pub use cluster::{Cluster, Need, Remote, Replication, Request, Standalone};
pub use reply::{Answer, Reply, WireReply};
pub use request::{Action, Key, Ops, Policy, Request as RecordRequest, UdfCall};
pub use scan::ScanJob;

/// The node's services above the store: secondary indexes and UDF
/// modules. Attached to every namespace (`Namespace::attach`), so every
/// request reaches them.
pub struct Services {
    pub sindexes: std::sync::Arc<sindex::Sindexes>,
    pub udfs: std::sync::Arc<udf::modules::UdfModules>,
    pub jobs: std::sync::Arc<jobs::Jobs>,
}

impl Services {
    /// Opens the services of `store`: metadata kept in `work_directory`
    /// (none: in memory only) is read back, indexes start populating, and
    /// the services are attached to the namespaces.
    pub fn open(
        store: &Store,
        work_directory: Option<&std::path::Path>,
        background: sindex::Background,
    ) -> Result<std::sync::Arc<Services>, String> {
        let services = std::sync::Arc::new(Services {
            sindexes: sindex::Sindexes::open(store, work_directory, background.clone())?,
            udfs: std::sync::Arc::new(udf::modules::UdfModules::open(work_directory)?),
            jobs: std::sync::Arc::new(jobs::Jobs::new(background)),
        });
        for namespace in store.namespaces() {
            namespace.attach(services.clone());
        }
        Ok(services)
    }
}

/// The services attached to `namespace`, if any.
pub fn services(namespace: &Namespace) -> Option<&Services> {
    namespace.attached::<Services>()
}

use bolide_cluster::conflict::Stamp;
use bolide_cluster::datapath::{self, Decision, Nodes, OwnedImage};
use bolide_particles::expression::{self, Expr};
use bolide_store::{CommitWait, Namespace, RecordMeta, RecordView, Store};
use bolide_types::{Digest, ResultCode};
use bolide_wire::message::MsgHeader;
use bolide_wire::response::{append_result, append_result_framed};
use bolide_wire::{info1, info2, info3, Framing, Message, ResponseWriter};
use std::sync::atomic::Ordering::Relaxed;

/// Buffers a connection reuses across requests, so the hot path allocates
/// as little as possible.
#[derive(Default)]
pub struct Scratch {
    record: Vec<u8>,
    /// A stored record read back from the device.
    loaded: Vec<u8>,
    /// Writes answered but not yet durable (commit-to-device): the
    /// answers must not leave before these waits end.
    commit_waits: Vec<CommitWait>,
    /// Set before a write whose copies go to other nodes: the write leaves
    /// its record's image (or tombstone) in `copy`.
    capture: bool,
    copy: Option<bolide_store::OwnedCopy>,
}

impl Scratch {
    fn add_commit_wait(&mut self, wait: Option<CommitWait>) {
        let Some(wait) = wait else { return };
        match self
            .commit_waits
            .iter_mut()
            .find(|pending| pending.same_device(&wait))
        {
            Some(pending) => pending.absorb(wait),
            None => self.commit_waits.push(wait),
        }
    }

    /// The durability waits the answers produced so far depend on.
    pub fn take_commit_waits(&mut self) -> Vec<CommitWait> {
        std::mem::take(&mut self.commit_waits)
    }
}

/// What kind of transaction a request was, for statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
    Delete,
    Other,
}

/// A response too large or too slow to build inline (a scan, a large
/// batch). The server runs it off the event loop and writes each chunk as
/// it comes, so memory stays bounded whatever the result size.
pub trait StreamJob: Send {
    /// Appends the next whole proto frames to `out`; true once the final
    /// (LAST) frame has been appended.
    fn fill(&mut self, out: &mut Vec<u8>) -> bool;

    /// Whether the job is background work (a scan) that should yield the
    /// CPU to foreground requests when both compete for it.
    fn is_background(&self) -> bool {
        false
    }
}

/// What `execute` did with a request.
#[expect(
    clippy::large_enum_variant,
    reason = "a replicated write's work moves once into its task; boxing it would allocate per write"
)]
pub enum Outcome {
    /// The whole response is in `out`.
    Answered,
    /// The response follows from this job. What was appended to `out`
    /// before it goes first (a query answers its first records inline and
    /// streams the rest; other jobs append nothing).
    Stream(Box<dyn StreamJob>),
    /// The response needs other nodes first (nothing was appended).
    Remote(Remote),
}

/// Output bytes a stream job appends per `fill` before yielding.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Runs one AS_MSG request (the body after the proto header) for `caller`:
/// either appends its whole response to `out`, or returns a job that
/// produces it, or the work other nodes must do first.
pub fn execute(
    store: &Store,
    cluster: &Cluster<'_>,
    caller: &Caller,
    body: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Outcome {
    let message = match Message::decode(body) {
        Ok(message) => message,
        Err(_) => {
            // A batch's client waits for LAST: any error answer ends it.
            if body.get(1).is_some_and(|flags| flags & info1::BATCH != 0) {
                append_last(out, ResultCode::Parameter);
            } else {
                append_result(out, ResultCode::Parameter.as_u8());
            }
            return Outcome::Answered;
        }
    };
    if message.header.info1 & info1::BATCH != 0 {
        return batch::start(store, cluster, caller, body, &message, out, scratch);
    }
    if message.fields.digest.is_none() {
        return scan::start(store, cluster, caller, &message, out);
    }
    let found = message
        .fields
        .namespace
        .and_then(|name| store.namespace_index(name));
    let Some((index, namespace)) = found else {
        append_result(out, ResultCode::Namespace.as_u8());
        return Outcome::Answered;
    };
    let keep = || body.to_vec();
    match execute_record(
        cluster,
        caller,
        index,
        namespace,
        &message,
        None,
        out,
        scratch,
        Framing::Message,
        &keep,
    ) {
        Some(remote) => Outcome::Remote(remote),
        None => Outcome::Answered,
    }
}

/// Runs a request that another node sent here (a proxy), or one of this
/// node's own requests run again, answered framed as `framing`: a message
/// of its own, or one row of a batch (a single record request answered as
/// that row). Such a request was admitted where it arrived from its
/// client, so it runs as the node ([`Caller::node`]).
pub fn execute_framed(
    store: &Store,
    cluster: &Cluster<'_>,
    body: &[u8],
    framing: Framing,
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Outcome {
    let caller = Caller::node();
    if framing == Framing::Message {
        return execute(store, cluster, &caller, body, out, scratch);
    }
    let message = match Message::decode(body) {
        Ok(message) if message.fields.digest.is_some() => message,
        _ => {
            append_result_framed(out, ResultCode::Parameter.as_u8(), framing);
            return Outcome::Answered;
        }
    };
    let found = message
        .fields
        .namespace
        .and_then(|name| store.namespace_index(name));
    let Some((index, namespace)) = found else {
        append_result_framed(out, ResultCode::Namespace.as_u8(), framing);
        return Outcome::Answered;
    };
    let keep = || body.to_vec();
    match execute_record(
        cluster, &caller, index, namespace, &message, None, out, scratch, framing, &keep,
    ) {
        Some(remote) => Outcome::Remote(remote),
        None => Outcome::Answered,
    }
}

/// Runs one single-record command (or batch row) against `namespace`
/// (index `index`), appending its response framed as asked, and counts it;
/// or returns the work other nodes must do first (nothing appended).
/// `keep` gives the request as a message of its own.
#[allow(clippy::too_many_arguments)]
fn execute_record(
    cluster: &Cluster<'_>,
    caller: &Caller,
    index: usize,
    namespace: &Namespace,
    message: &Message<'_>,
    parent_filter: Option<&Expr>,
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
    framing: Framing,
    keep: &dyn Fn() -> Vec<u8>,
) -> Option<Remote> {
    let mut reply = WireReply::new(out, framing);
    let request = match RecordRequest::from_message(message) {
        Ok(request) => request,
        Err(code) => {
            reply.fail(code);
            count(namespace, kind_of(&message.header), code);
            return None;
        }
    };
    run_record(
        cluster,
        caller,
        index,
        namespace,
        &request,
        parent_filter,
        &mut reply,
        scratch,
        framing,
        keep,
    )
}

/// Runs one typed single-record request, from a front end that does not
/// speak Aerospike's message bytes: the answer goes to `reply`; or the
/// work other nodes must do first comes back (nothing answered; a proxy
/// carries the request encoded as an AS_MSG, a replicated write's answer
/// is what `reply.detach()` gives).
pub fn execute_request<R: Reply + ?Sized>(
    store: &Store,
    cluster: &Cluster<'_>,
    caller: &Caller,
    request: &RecordRequest<'_>,
    reply: &mut R,
    scratch: &mut Scratch,
) -> Option<Remote> {
    let Some((index, namespace)) = store.namespace_index(request.namespace) else {
        reply.fail(ResultCode::Namespace);
        return None;
    };
    let keep = || request.encode();
    run_record(
        cluster,
        caller,
        index,
        namespace,
        request,
        None,
        reply,
        scratch,
        Framing::Message,
        &keep,
    )
}

/// What one row of a typed batch came to.
pub enum Row {
    Answered(Answer),
    /// The row needs other nodes first (see [`execute_request`]); boxed,
    /// as only rows of a cluster's other partitions need it.
    Remote(Box<Remote>),
}

/// Runs typed requests as a batch: each row runs like a single-record
/// request, in order, and answers on its own (a failed row does not stop
/// the others), as Aerospike's batch rows do.
pub fn execute_batch(
    store: &Store,
    cluster: &Cluster<'_>,
    caller: &Caller,
    requests: &[RecordRequest<'_>],
    scratch: &mut Scratch,
) -> Vec<Row> {
    requests
        .iter()
        .map(|request| {
            let mut answer = Answer::default();
            match execute_request(store, cluster, caller, request, &mut answer, scratch) {
                Some(remote) => Row::Remote(Box::new(remote)),
                None => Row::Answered(answer),
            }
        })
        .collect()
}

/// Runs a single-record request and counts it.
#[allow(clippy::too_many_arguments)]
// PERF: hot path.
fn run_record<R: Reply + ?Sized>(
    cluster: &Cluster<'_>,
    caller: &Caller,
    index: usize,
    namespace: &Namespace,
    request: &RecordRequest<'_>,
    parent_filter: Option<&Expr>,
    reply: &mut R,
    scratch: &mut Scratch,
    framing: Framing,
    keep: &dyn Fn() -> Vec<u8>,
) -> Option<Remote> {
    let kind = request.kind();
    let code = match route(
        cluster,
        caller,
        index,
        namespace,
        request,
        parent_filter,
        reply,
        scratch,
        framing,
        keep,
    ) {
        Ok(None) => ResultCode::Ok,
        Ok(Some(remote)) => {
            if let Need::Replicate(_) = remote.need {
                count(namespace, kind, ResultCode::Ok);
            }
            return Some(remote);
        }
        Err(code) => {
            reply.fail(code);
            code
        }
    };
    count(namespace, kind, code);
    None
}

/// A one-message answer ending a stream: LAST with a result code.
fn append_last(out: &mut Vec<u8>, code: ResultCode) {
    let header = MsgHeader {
        info3: info3::LAST,
        result_code: code.as_u8(),
        ..MsgHeader::default()
    };
    ResponseWriter::begin(out, &header).finish();
}

#[allow(clippy::too_many_arguments)]
fn route<R: Reply + ?Sized>(
    cluster: &Cluster<'_>,
    caller: &Caller,
    index: usize,
    namespace: &Namespace,
    record: &RecordRequest<'_>,
    parent_filter: Option<&Expr>,
    reply: &mut R,
    scratch: &mut Scratch,
    framing: Framing,
    keep: &dyn Fn() -> Vec<u8>,
) -> Result<Option<Remote>, ResultCode> {
    check_caller(caller, namespace, record)?;
    let digest = record.digest;
    let policy = &record.policy;
    let pid = digest.partition_id().index();
    let route = cluster.route(index, pid);
    let is_write = record.action != Action::Read;
    let remote = |need: Need| {
        Ok(Some(Remote {
            need,
            request: cluster::keep_request_bytes(keep(), framing, policy.timeout_ms),
            answer: Vec::new(),
        }))
    };
    let sc = namespace.config.strong_consistency;
    // The partition's gate counts this write until its copies are in.
    let guard = match datapath::decide(
        cluster.routing,
        cluster.gates,
        &route,
        index,
        pid,
        is_write,
        datapath::ReadMode::of_info3(policy.read_mode_sc),
        cluster.resolved,
    ) {
        Decision::Unavailable => return Err(ResultCode::Unavailable),
        Decision::Forbidden => return Err(ResultCode::Forbidden),
        Decision::Proxy(to) => return remote(Need::Proxy { to }),
        Decision::Again => return remote(Need::Again),
        Decision::Resolve => {
            return remote(Need::Resolve {
                namespace: index,
                digest: digest.0,
                from: datapath::resolve_from(
                    cluster.routing,
                    &route,
                    index,
                    is_write,
                    datapath::ReadMode::of_info3(policy.read_mode_sc),
                ),
            })
        }
        Decision::Read => None,
        Decision::Write(guard) => guard,
    };
    // (SC) A record whose last write here did not reach every replica is
    // copied to them again before anyone reads or writes it: what a
    // client sees must survive this node.
    let read_mode = datapath::ReadMode::of_info3(policy.read_mode_sc);
    if sc
        && (is_write || read_mode.strict())
        && cluster.gates.is_unreplicated(index, pid, &digest.0)
    {
        return match cluster.copy_again(index, namespace, &digest, guard, true) {
            Some(need) => remote(need),
            // Nothing held any more (dropped with its partition).
            None => remote(Need::Again),
        };
    }
    let own_filter = record.filter.map(expression::parse).transpose()?;
    let filter = own_filter.as_ref().or(parent_filter);
    if is_write {
        let destinations = route.destinations();
        scratch.capture = !destinations.is_empty();
        scratch.copy = None;
        // A record UDF runs at the master like any write (it may write).
        let result = if record.action == Action::Udf {
            udf::apply(namespace, &digest, record, filter, reply, scratch)
        } else {
            write::execute(namespace, &digest, record, filter, reply, scratch)
        };
        scratch.capture = false;
        // (SC) A write that changed nothing answers what this node holds:
        // the regime is confirmed with the other holders first, then it
        // runs again (whatever this run began answering is dropped).
        if sc && cluster.confirm_unapplied && (result.is_err() || scratch.copy.is_none()) {
            if let Some(from) =
                datapath::confirm_unapplied(cluster.routing, &route, index, cluster.resolved)
            {
                drop(reply.detach());
                return remote(Need::Resolve {
                    namespace: index,
                    digest: digest.0,
                    from,
                });
            }
        }
        result?;
        let Some(copy) = scratch.copy.take() else {
            return Ok(None);
        };
        // The answer waits for the copies.
        let answer = reply.detach();
        // (SC) Unreplicated until every copy is in.
        let mark = if sc {
            cluster.gates.mark_unreplicated(
                index,
                pid,
                copy.digest.0,
                Stamp {
                    generation: copy.generation,
                    last_update_ms: copy.last_update_ms,
                },
            )
        } else {
            None
        };
        // PERF: the image moves out of the copy; no allocation.
        let image = OwnedImage {
            digest: copy.digest.0,
            generation: copy.generation,
            last_update_ms: copy.last_update_ms,
            void_time: copy.void_time,
            set_name: copy.set_name,
            record: copy.record,
        };
        Ok(Some(Remote {
            need: Need::Replicate(Replication {
                namespace: index,
                pid: pid as u16,
                cluster_key: cluster.routing.cluster_key,
                regime: cluster
                    .routing
                    .namespaces
                    .get(index)
                    .map_or(0, |ns| ns.regime),
                to: Nodes::of_members(cluster.routing, destinations),
                image,
                // SC acknowledges only once every replica has the write.
                commit_master: framing == Framing::Message
                    && !sc
                    && (policy.commit_master || namespace.config.write_commit_level_master),
                guard,
                mark,
            }),
            request: Request {
                body: Vec::new(),
                framing,
                timeout_ms: policy.timeout_ms,
            },
            answer,
        }))
    } else {
        read::execute(
            namespace,
            &digest,
            record,
            filter,
            reply,
            &mut scratch.loaded,
        )
        .map(|()| None)
    }
}

/// Whether `caller` may run this single-record request (or batch row): a
/// read needs `Read`, a write `Write` (a delete `Delete`, and `Read` too
/// when it also reads), a record UDF `UdfApply`; scoped to the request's
/// namespace and set.
// PERF: hot path: one branch for an open caller.
#[inline]
fn check_caller(
    caller: &Caller,
    namespace: &Namespace,
    request: &RecordRequest<'_>,
) -> Result<(), ResultCode> {
    let set = request.set.filter(|set| !set.is_empty());
    let check = |permission| caller.check(permission, Some(namespace.name()), set);
    match request.action {
        Action::Udf => check(Permission::UdfApply),
        Action::Read => check(Permission::Read),
        Action::Write => {
            if request.policy.delete {
                check(Permission::Delete)?;
            } else {
                check(Permission::Write)?;
            }
            if request.policy.read {
                check(Permission::Read)?;
            }
            Ok(())
        }
    }
}

/// The bytes of a stored record: from memory, or read from the device into
/// `buf`. A record that cannot be read back answers UNKNOWN (the server
/// logs why).
fn record_bytes<'a>(
    namespace: &Namespace,
    entry: &bolide_store::Entry<'a>,
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], ResultCode> {
    namespace
        .record_bytes(entry, buf)
        .map_err(|_| ResultCode::Unknown)
}

/// FILTERED_OUT unless the record passes the request's filter expression.
fn check_filter(
    namespace: &Namespace,
    filter: Option<&Expr>,
    digest: &Digest,
    meta: &RecordMeta,
    record: &RecordView<'_>,
    record_bytes: usize,
) -> Result<(), ResultCode> {
    let Some(filter) = filter else {
        return Ok(());
    };
    let stored = record::Stored {
        record,
        digest,
        meta,
        set_name: namespace.set_name(meta.set_id),
        record_bytes,
    };
    if expression::passes(filter, &stored, bolide_types::now_citrusleaf_milliseconds()) {
        Ok(())
    } else {
        Err(ResultCode::FilteredOut)
    }
}

/// A request carrying its user key must match the key stored with the
/// record (when one was stored): else KEY_MISMATCH.
fn check_key(request: &RecordRequest<'_>, stored: Option<(u8, &[u8])>) -> Result<(), ResultCode> {
    let Some(key) = request.key else {
        return Ok(());
    };
    let requested = key.parts()?;
    match stored {
        Some(stored) if stored != requested => Err(ResultCode::KeyMismatch),
        _ => Ok(()),
    }
}

/// A request naming a set must name the record's set (the digest includes
/// the set, so a mismatch means a digest collision or a confused client).
fn check_set(
    namespace: &Namespace,
    request: &RecordRequest<'_>,
    set_id: u16,
) -> Result<(), ResultCode> {
    match request.set {
        Some(set) if !set.is_empty() => {
            let record_set = namespace
                .set_name(set_id)
                .map(str::as_bytes)
                .unwrap_or_default();
            if record_set == set {
                Ok(())
            } else {
                Err(ResultCode::Parameter)
            }
        }
        _ => Ok(()),
    }
}

fn kind_of(header: &MsgHeader) -> Kind {
    if header.info2 & info2::WRITE != 0 {
        if header.info2 & info2::DELETE != 0 {
            Kind::Delete
        } else {
            Kind::Write
        }
    } else if header.info1 & info1::READ != 0 {
        Kind::Read
    } else {
        Kind::Other
    }
}

fn count(namespace: &Namespace, kind: Kind, code: ResultCode) {
    let stats = &namespace.stats;
    let counter = match (kind, code) {
        (Kind::Read, ResultCode::Ok) => &stats.client_read_success,
        (Kind::Read, ResultCode::NotFound) => &stats.client_read_not_found,
        (Kind::Read | Kind::Other, _) => &stats.client_read_error,
        (Kind::Write, ResultCode::Ok) => &stats.client_write_success,
        (Kind::Write, _) => &stats.client_write_error,
        (Kind::Delete, ResultCode::Ok) => &stats.client_delete_success,
        (Kind::Delete, ResultCode::NotFound) => &stats.client_delete_not_found,
        (Kind::Delete, _) => &stats.client_delete_error,
    };
    counter.fetch_add(1, Relaxed);
    match code {
        ResultCode::FilteredOut => stats.filtered_out.fetch_add(1, Relaxed),
        ResultCode::Generation => stats.fail_generation.fetch_add(1, Relaxed),
        ResultCode::RecordTooBig => stats.fail_record_too_big.fetch_add(1, Relaxed),
        ResultCode::OutOfSpace => stats.fail_out_of_space.fetch_add(1, Relaxed),
        _ => 0,
    };
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod caller_tests;
