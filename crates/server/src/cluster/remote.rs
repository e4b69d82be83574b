//! Carrying out a request's work on other nodes (a [`Remote`] from the
//! transaction layer): proxying to the node that serves it, waiting for a
//! settling map, resolving a record against copies not merged yet, and
//! sending a write's copies to the other holders before the client hears
//! of it. All of it is bounded by the request's deadline (its own timeout,
//! else `transaction-max-ms`); past it the client gets a timeout (9).

use super::bump;
use super::fabric::{call, copy_of, image_of, wins, FabricError};
use super::Context as Node;
use bolide_cluster::fabric::{code, Channel, Fabric, ProxyFraming};
use bolide_cluster::metadata::Item;
use bolide_cluster::NodeId;
use bolide_store::CommitWait;
use bolide_transaction::{Cluster, Outcome, Remote, RemoteRunner, Replication, Request, Scratch};
use bolide_types::{Digest, ResultCode};
use bolide_wire::response::append_result_framed;
use bolide_wire::Framing;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest pause between two attempts of one request.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(50);

/// The answer to `remote`'s request once its work is done.
pub fn complete(node: Arc<Node>, remote: Remote) -> Pin<Box<dyn Future<Output = Vec<u8>>>> {
    let deadline = deadline_of(&node, timeout_of(&remote));
    complete_until(node, remote, deadline)
}

fn timeout_of(remote: &Remote) -> u32 {
    match remote {
        Remote::Proxy { request, .. }
        | Remote::Again { request }
        | Remote::Resolve { request, .. } => request.timeout_ms,
        Remote::Replicate(replication) => replication.timeout_ms,
    }
}

fn deadline_of(node: &Node, timeout_ms: u32) -> Instant {
    let timeout = match timeout_ms {
        0 => node.cluster.transaction_max_ms,
        ms => u64::from(ms),
    };
    Instant::now() + Duration::from_millis(timeout)
}

fn complete_until(
    node: Arc<Node>,
    remote: Remote,
    deadline: Instant,
) -> Pin<Box<dyn Future<Output = Vec<u8>>>> {
    Box::pin(async move {
        match remote {
            Remote::Replicate(replication) => replicate(&node, replication, deadline).await,
            Remote::Proxy { to, request } => proxy(&node, to, request, deadline).await,
            Remote::Again { request } => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                rerun(&node, request, false, deadline).await
            }
            Remote::Resolve {
                namespace,
                digest,
                from,
                request,
            } => resolve(&node, namespace, digest, from, request, deadline).await,
        }
    })
}

fn timeout_answer(framing: Framing) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    append_result_framed(&mut out, ResultCode::Timeout.as_u8(), framing);
    out
}

/// Runs the request here now, with the current routing: its answer (and
/// the durability waits it depends on), or the remote work it needs.
#[allow(clippy::result_large_err)]
fn run_here(
    node: &Node,
    request: &Request,
    from_proxy: bool,
    resolved: bool,
) -> Result<(Vec<u8>, Vec<CommitWait>), Remote> {
    let routing = node.cluster.routing.load_full();
    let cluster = Cluster {
        routing: &routing,
        gates: &node.cluster.gates,
        from_proxy,
        resolved,
        runner: None,
    };
    let mut out = Vec::new();
    let mut scratch = Scratch::default();
    match bolide_transaction::execute_framed(
        &node.store,
        &cluster,
        &request.body,
        request.framing,
        &mut out,
        &mut scratch,
    ) {
        Outcome::Answered => Ok((out, scratch.take_commit_waits())),
        Outcome::Remote(remote) => Err(remote),
        Outcome::Stream(_) => {
            let mut out = Vec::new();
            append_result_framed(&mut out, ResultCode::Parameter.as_u8(), request.framing);
            Ok((out, Vec::new()))
        }
    }
}

/// Runs the request again here (its map changed, or its record was just
/// resolved), and whatever remote work that leads to.
async fn rerun(node: &Arc<Node>, request: Request, resolved: bool, deadline: Instant) -> Vec<u8> {
    if Instant::now() >= deadline {
        return timeout_answer(request.framing);
    }
    match run_here(node, &request, false, resolved) {
        Ok((answer, waits)) => finish(answer, waits, request.framing).await,
        Err(remote) => complete_until(Arc::clone(node), remote, deadline).await,
    }
}

/// Waits for the writes behind `answer` to be durable (commit-to-device).
async fn finish(answer: Vec<u8>, waits: Vec<CommitWait>, framing: Framing) -> Vec<u8> {
    for wait in waits {
        if wait.wait().await.is_err() {
            let mut out = Vec::new();
            append_result_framed(&mut out, ResultCode::Unknown.as_u8(), framing);
            return out;
        }
    }
    answer
}

async fn pause(attempt: &mut u32) {
    let pause = Duration::from_millis(2u64 << (*attempt).min(5)).min(RETRY_PAUSE_MAX);
    *attempt += 1;
    tokio::time::sleep(pause).await;
}

/// Sends the request to the node that serves it and relays the answer; if
/// that node does not serve it either (maps differ), routes it again here.
async fn proxy(node: &Arc<Node>, mut to: NodeId, request: Request, deadline: Instant) -> Vec<u8> {
    let counters = &node.cluster.counters;
    counters.proxy_in_progress.fetch_add(1, Relaxed);
    let framing = match request.framing {
        Framing::Message => ProxyFraming::Message,
        Framing::Row { index } => ProxyFraming::Row(index),
    };
    let mut attempt = 0;
    let mut hops = 0;
    let answer = loop {
        let now = Instant::now();
        if now >= deadline {
            bump(&counters.client_proxy_timeout);
            break timeout_answer(request.framing);
        }
        let timeout_ms = deadline
            .saturating_duration_since(now)
            .as_millis()
            .min(u128::from(u32::MAX)) as u32;
        let body = &request.body;
        let sent = call(node, to, Channel::Requests, deadline, |id, out| {
            Fabric::Proxy {
                id,
                timeout_ms: timeout_ms.max(1),
                framing,
                body,
            }
            .encode(out)
        })
        .await;
        let mut redirect = None;
        if let Ok(answer) = &sent {
            match answer.decode() {
                Ok(Fabric::ProxyAnswer {
                    redirect: None,
                    answer,
                    ..
                }) => {
                    bump(&counters.client_proxy_complete);
                    break answer.to_vec();
                }
                Ok(Fabric::ProxyAnswer {
                    redirect: Some(next),
                    ..
                }) => redirect = Some(next),
                _ => {}
            }
        }
        if matches!(sent, Err(FabricError::NoRoute | FabricError::Closed)) {
            bump(&counters.client_proxy_error);
        }
        // Not served there. The node it was sent to names who serves it
        // (mastership moved in a handoff this node does not see): go there.
        if let Some(next) = redirect.filter(|&next| next != node.cluster.node_id && next != to) {
            hops += 1;
            if hops <= 3 {
                to = next;
                continue;
            }
            hops = 0;
        }
        // Else route again with this node's current map.
        pause(&mut attempt).await;
        match run_here(node, &request, false, false) {
            Ok((answer, waits)) => break finish(answer, waits, request.framing).await,
            Err(Remote::Proxy { to: next, .. }) => to = next,
            Err(other) => break complete_until(Arc::clone(node), other, deadline).await,
        }
    };
    counters.proxy_in_progress.fetch_sub(1, Relaxed);
    answer
}

/// Serves a request another node proxied here. Returns (redirect, answer):
/// when this node does not serve it either, the node it would send it to.
pub async fn serve_proxy(
    node: &Arc<Node>,
    body: Vec<u8>,
    framing: ProxyFraming,
    timeout_ms: u32,
) -> (Option<NodeId>, Vec<u8>) {
    let request = Request {
        body,
        framing: match framing {
            ProxyFraming::Message => Framing::Message,
            ProxyFraming::Row(index) => Framing::Row { index },
        },
        timeout_ms,
    };
    let deadline = deadline_of(node, timeout_ms);
    match run_here(node, &request, true, false) {
        Ok((answer, waits)) => {
            bump(&node.cluster.counters.from_proxy_complete);
            (None, finish(answer, waits, request.framing).await)
        }
        Err(Remote::Proxy { to, .. }) => {
            bump(&node.cluster.counters.from_proxy_redirect);
            (Some(to), Vec::new())
        }
        Err(remote) => {
            bump(&node.cluster.counters.from_proxy_complete);
            (
                None,
                complete_until(Arc::clone(node), remote, deadline).await,
            )
        }
    }
}

/// Fetches the record's copies not merged yet, applies the newest here,
/// then runs the request (duplicate resolution before a write).
async fn resolve(
    node: &Arc<Node>,
    namespace: usize,
    digest: Digest,
    from: Vec<NodeId>,
    request: Request,
    deadline: Instant,
) -> Vec<u8> {
    let Some(ns) = node.store.namespaces().get(namespace).cloned() else {
        return timeout_answer(request.framing);
    };
    let policy = node.cluster.policy(namespace);
    let name = ns.name().to_owned();
    let fetches = from.iter().map(|&to| {
        let name = &name;
        async move {
            bump(&node.cluster.counters.dup_res_fetches);
            call(node, to, Channel::Requests, deadline, |id, out| {
                Fabric::Fetch {
                    id,
                    namespace: name,
                    digest: digest.0,
                }
                .encode(out)
            })
            .await
        }
    });
    let answers = futures::future::join_all(fetches).await;
    let mut complete = true;
    for answer in &answers {
        match answer.as_ref().map(|answer| answer.decode()) {
            Ok(Ok(Fabric::FetchAnswer { image, .. })) => {
                if let Some(image) = image {
                    let copy = copy_of(&image);
                    let mut writer = ns.write(&digest);
                    if writer
                        .apply_copy(&copy, |held, incoming| wins(policy, held, incoming))
                        .is_err()
                    {
                        complete = false;
                    }
                }
            }
            _ => complete = false,
        }
    }
    if !complete {
        // A copy could not be had: route again (the map may have moved on).
        tokio::time::sleep(Duration::from_millis(10)).await;
        return rerun(node, request, false, deadline).await;
    }
    rerun(node, request, true, deadline).await
}

/// Sends a write's copy to every other holder of its partition and waits
/// for each to apply it; retries with the current map until the deadline.
async fn replicate(node: &Arc<Node>, replication: Replication, deadline: Instant) -> Vec<u8> {
    let Replication {
        namespace,
        pid,
        cluster_key,
        to,
        copy,
        answer,
        framing,
        commit_master,
        guard,
        ..
    } = replication;
    let counters = &node.cluster.counters;
    let Some(name) = node
        .store
        .namespaces()
        .get(namespace)
        .map(|ns| ns.name().to_owned())
    else {
        return answer;
    };
    if commit_master {
        // Answered at once; the copies still go out (and are retried).
        let node = Arc::clone(node);
        tokio::task::spawn_local(async move {
            let _guard = guard;
            send_copies(
                &node,
                namespace,
                pid,
                &name,
                cluster_key,
                to,
                &copy,
                deadline,
            )
            .await;
        });
        return answer;
    }
    let _guard = guard;
    if send_copies(
        node,
        namespace,
        pid,
        &name,
        cluster_key,
        to,
        &copy,
        deadline,
    )
    .await
    {
        answer
    } else {
        bump(&counters.replica_write_timeouts);
        timeout_answer(framing)
    }
}

/// Whether every copy was acknowledged before the deadline.
#[allow(clippy::too_many_arguments)]
async fn send_copies(
    node: &Arc<Node>,
    namespace: usize,
    pid: u16,
    name: &str,
    mut key: u64,
    mut pending: Vec<NodeId>,
    copy: &bolide_store::OwnedCopy,
    deadline: Instant,
) -> bool {
    let counters = &node.cluster.counters;
    let image = image_of(&copy.as_copy());
    let mut attempt = 0;
    loop {
        let sends = pending.iter().map(|&to| async move {
            bump(&counters.replica_writes_sent);
            let answer = call(node, to, Channel::Requests, deadline, |id, out| {
                Fabric::ReplicaWrite {
                    id,
                    namespace: name,
                    cluster_key: key,
                    image,
                }
                .encode(out)
            })
            .await;
            (to, answer.map(|answer| answer.ack_code()))
        });
        let results = futures::future::join_all(sends).await;
        pending = results
            .into_iter()
            .filter(|(_, result)| *result != Ok(code::OK))
            .map(|(to, _)| to)
            .collect();
        if pending.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        pause(&mut attempt).await;
        // The map moved on: the copies go to the partition's holders now.
        let routing = node.cluster.routing.load();
        if routing.settled() && routing.cluster_key != key {
            key = routing.cluster_key;
            let route = routing
                .namespaces
                .get(namespace)
                .map(|ns| ns.route(usize::from(pid)))
                .unwrap_or_default();
            pending = route
                .destinations()
                .iter()
                .filter_map(|&member| routing.member(member))
                .collect();
            if pending.is_empty() {
                return true;
            }
        }
    }
}

/// A batch row's remote work, handed from a blocking thread to the fabric
/// thread.
pub struct BlockingJob {
    remote: Remote,
    answer: std::sync::mpsc::Sender<Vec<u8>>,
}

/// Runs batch rows' remote work on the fabric thread and waits for it.
pub struct BlockingRunner {
    pub(crate) jobs: tokio::sync::mpsc::UnboundedSender<BlockingJob>,
}

impl RemoteRunner for BlockingRunner {
    fn run_blocking(&self, remote: Remote) -> Vec<u8> {
        let framing = match &remote {
            Remote::Proxy { request, .. }
            | Remote::Again { request }
            | Remote::Resolve { request, .. } => request.framing,
            Remote::Replicate(replication) => replication.framing,
        };
        let (sender, receiver) = std::sync::mpsc::channel();
        if self
            .jobs
            .send(BlockingJob {
                remote,
                answer: sender,
            })
            .is_err()
        {
            return timeout_answer(framing);
        }
        receiver.recv().unwrap_or_else(|_| timeout_answer(framing))
    }
}

/// Starts the fabric thread, which carries out batch rows' remote work.
pub fn start_fabric_thread(node: Arc<Node>) -> Result<(), String> {
    let mut jobs = node
        .cluster
        .take_blocking()
        .ok_or("fabric thread already started")?;
    std::thread::Builder::new()
        .name("fabric".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                tracing::error!("cannot start the fabric thread");
                return;
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                while let Some(job) = jobs.recv().await {
                    let node = Arc::clone(&node);
                    tokio::task::spawn_local(async move {
                        let answer = complete(node, job.remote).await;
                        let _ = job.answer.send(answer);
                    });
                }
            });
        })
        .map_err(|error| format!("cannot start the fabric thread: {error}"))?;
    Ok(())
}

/// Applies a cluster-wide metadata item on this node.
pub fn apply_metadata(node: &Node, item: &Item) {
    match item.module.as_str() {
        "truncate" if !item.deleted => apply_truncation(node, item),
        "sindex" => apply_sindex(node, item),
        "udf" => apply_udf(node, item),
        super::security::MODULE => super::security::apply(node, item),
        _ => {}
    }
}

/// An index definition from another node (or back from the cluster).
fn apply_sindex(node: &Node, item: &Item) {
    let sindexes = &node.services.sindexes;
    if item.deleted {
        if let Err(error) = sindexes.apply_remove(&item.key) {
            tracing::warn!(target: "cluster", %error, "index drop from the cluster not applied");
        }
        return;
    }
    let text = format!("sindex-create:{}", item.value);
    let command = bolide_wire::info::InfoCommand::parse(&text);
    match bolide_transaction::sindex::definition::Definition::from_create(&command) {
        Ok(definition) => {
            if let Err(error) = sindexes.apply_set(definition) {
                tracing::warn!(target: "cluster", %error, "index from the cluster not applied");
            }
        }
        Err(error) => {
            tracing::warn!(target: "cluster", ?error, "bad index definition from the cluster")
        }
    }
}

/// A UDF module from another node (or back from the cluster).
fn apply_udf(node: &Node, item: &Item) {
    use base64::Engine;
    let udfs = &node.services.udfs;
    if item.deleted {
        if let Err(error) = udfs.apply_remove(&item.key) {
            tracing::warn!(target: "cluster", %error, "UDF removal from the cluster not applied");
        }
        return;
    }
    let Ok(source) = base64::engine::general_purpose::STANDARD.decode(&item.value) else {
        tracing::warn!(target: "cluster", module = item.key, "bad UDF module from the cluster");
        return;
    };
    if udfs
        .get(&item.key)
        .is_some_and(|module| *module.source == *source)
    {
        return;
    }
    if let Err(error) = udfs.apply_set(&item.key, source) {
        tracing::warn!(target: "cluster", %error, "UDF module from the cluster not applied");
    }
}

/// A truncation from another node: `namespace` or `namespace|set`, cut-off
/// in ms since 2010.
fn apply_truncation(node: &Node, item: &Item) {
    let (namespace, set) = match item.key.split_once('|') {
        Some((namespace, set)) => (namespace, Some(set)),
        None => (item.key.as_str(), None),
    };
    let Ok(before_ms) = item.value.parse::<u64>() else {
        return;
    };
    let Some(ns) = node.store.namespace(namespace.as_bytes()) else {
        return;
    };
    match ns.truncate(set.map(str::as_bytes), before_ms) {
        Ok(_) => {
            tracing::info!(target: "cluster", namespace, set, before_ms, "truncated (cluster-wide)")
        }
        Err(error) => tracing::warn!(%error, "truncation not persisted"),
    }
    // The records are gone for clients already; a sweep frees them.
    let ns = Arc::clone(ns);
    let _ = std::thread::Builder::new()
        .name("truncate".into())
        .spawn(move || ns.sweep(bolide_types::now_citrusleaf_seconds()));
}

/// Asks the cluster to truncate everywhere.
pub fn truncate_cluster_wide(node: &Node, namespace: &str, set: Option<&str>, before_ms: u64) {
    let key = match set {
        Some(set) => format!("{namespace}|{set}"),
        None => namespace.to_owned(),
    };
    node.cluster
        .share("truncate", &key, &before_ms.to_string(), false);
}
