//! Carrying out a request's work on other nodes (a [`Remote`] from the
//! transaction layer): the cluster crate's [`Work`] machine decides
//! (proxy hop rule, waiting for the map, duplicate resolution, a write's
//! copies to the other holders, the deadline); the task here only sends
//! its calls over the fabric, runs the request again when it asks, feeds it
//! replies and ticks, and hands back its answer.

use super::fabric::{self, Mailbox, ReplyFrame};
use super::monotonic_ms;
use super::records::Records;
use super::Context as Node;
use bolide_cluster::datapath::{self, Finish, Need, Output, Proxied, Ran, Work};
use bolide_cluster::fabric::{Fabric, ProxyFraming};
use bolide_cluster::metadata::Item;
use bolide_cluster::NodeId;
use bolide_store::CommitWait;
use bolide_transaction::{Cluster, Outcome, Remote, RemoteRunner, Scratch};
use bolide_types::ResultCode;
use bolide_wire::response::append_result_framed;
use bolide_wire::Framing;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The answer to `remote`'s request once its work is done.
pub fn complete(node: Arc<Node>, remote: Remote) -> Pin<Box<dyn Future<Output = Vec<u8>>>> {
    Box::pin(async move {
        let Remote {
            need,
            request,
            answer,
        } = remote;
        let now = monotonic_ms();
        let mut work = Work::new(
            node.cluster.node_id,
            now,
            timeout_ms(&node, request.timeout_ms),
            request.body,
            proxy_framing(request.framing),
        );
        work.start(need, now, &node.cluster.routing.load());
        let local = Local {
            answer,
            waits: Vec::new(),
            framing: request.framing,
        };
        drive(node, work, local).await
    })
}

/// The request's own timeout, else `transaction-max-ms`.
fn timeout_ms(node: &Node, timeout_ms: u32) -> u64 {
    match timeout_ms {
        0 => node.cluster.transaction_max_ms,
        ms => u64::from(ms),
    }
}

fn proxy_framing(framing: Framing) -> ProxyFraming {
    match framing {
        Framing::Message => ProxyFraming::Message,
        Framing::Row { index } => ProxyFraming::Row(index),
    }
}

fn framing_of(framing: ProxyFraming) -> Framing {
    match framing {
        ProxyFraming::Message => Framing::Message,
        ProxyFraming::Row(index) => Framing::Row { index },
    }
}

fn timeout_answer(framing: Framing) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    append_result_framed(&mut out, ResultCode::Timeout.as_u8(), framing);
    out
}

/// What the latest local run of the request answered (for a write, the
/// answer sent once its copies are in), and the durability waits it
/// depends on.
struct Local {
    answer: Vec<u8>,
    waits: Vec<CommitWait>,
    framing: Framing,
}

/// Runs the request here now, with the current routing: its answer (and
/// the durability waits it depends on), or the remote work it needs.
#[allow(clippy::result_large_err)]
fn run_here(
    node: &Node,
    body: &[u8],
    framing: Framing,
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
        confirm_unapplied: true,
    };
    let mut out = Vec::new();
    let mut scratch = Scratch::default();
    match bolide_transaction::execute_framed(
        &node.store,
        &cluster,
        body,
        framing,
        &mut out,
        &mut scratch,
    ) {
        Outcome::Answered => Ok((out, scratch.take_commit_waits())),
        Outcome::Remote(remote) => Err(remote),
        Outcome::Stream(_) => {
            let mut out = Vec::new();
            append_result_framed(&mut out, ResultCode::Parameter.as_u8(), framing);
            Ok((out, Vec::new()))
        }
    }
}

/// Drives `work` until it answers; what is left (a write's copies after an
/// early answer) goes on in a task of its own.
async fn drive(node: Arc<Node>, mut work: Work, mut local: Local) -> Vec<u8> {
    let mailbox = Rc::new(Mailbox::default());
    let mut last_reply = None;
    loop {
        if let Some(finish) = carry_out(&node, &mut work, &mut local, &mailbox) {
            let answer = match finish {
                Finish::Local => finish_local(&mut local).await,
                Finish::Relay => relayed(last_reply.as_ref(), local.framing),
                Finish::Timeout => timeout_answer(local.framing),
            };
            if !work.is_over() {
                tokio::task::spawn_local(drive_rest(node, work, local, mailbox));
            }
            return answer;
        }
        if work.is_over() {
            // Over without an answer cannot happen; answer anyway.
            return timeout_answer(local.framing);
        }
        last_reply = wait(&node, &mut work, &mailbox).await;
    }
}

/// Drives an answered `work` to its end.
async fn drive_rest(node: Arc<Node>, mut work: Work, mut local: Local, mailbox: Rc<Mailbox>) {
    loop {
        carry_out(&node, &mut work, &mut local, &mailbox);
        if work.is_over() {
            return;
        }
        wait(&node, &mut work, &mailbox).await;
    }
}

/// Carries out every output `work` has; the answer, if one came.
fn carry_out(
    node: &Arc<Node>,
    work: &mut Work,
    local: &mut Local,
    mailbox: &Rc<Mailbox>,
) -> Option<Finish> {
    let mut finished = None;
    while let Some(output) = work.next_output() {
        match output {
            Output::Send { token, to, channel } => {
                fabric::send(node, to, channel, mailbox, token, |id, out| {
                    work.encode(token, id, out)
                });
            }
            Output::Run { resolved } => {
                let ran = match run_here(node, work.body(), local.framing, false, resolved) {
                    Ok((answer, waits)) => {
                        local.answer = answer;
                        local.waits = waits;
                        Ran::Answered
                    }
                    Err(remote) => {
                        if let Need::Replicate(_) = remote.need {
                            local.answer = remote.answer;
                        }
                        Ran::Need(remote.need)
                    }
                };
                work.ran(ran, monotonic_ms(), &node.cluster.routing.load());
            }
            Output::Finish(finish) => finished = Some(finish),
            Output::Count(counter, n) => node.cluster.counters.count(counter, n),
            Output::Event(_) => {}
        }
    }
    finished
}

/// Waits for a reply or the work's next wake time, and feeds it in; the
/// reply, if one came.
async fn wait(node: &Arc<Node>, work: &mut Work, mailbox: &Mailbox) -> Option<ReplyFrame> {
    let wake = work.wake_at()?;
    let sleep = Duration::from_millis(wake.saturating_sub(monotonic_ms()));
    tokio::select! {
        biased;
        (token, reply) = mailbox.recv() => {
            reply.with_reply(|decoded| {
                work.reply(token, decoded, monotonic_ms(), &Records(&node.store))
            });
            Some(reply)
        }
        () = tokio::time::sleep(sleep) => {
            work.tick(monotonic_ms(), &node.cluster.routing.load());
            None
        }
    }
}

/// Waits for the writes behind the local answer to be durable
/// (commit-to-device).
async fn finish_local(local: &mut Local) -> Vec<u8> {
    for wait in std::mem::take(&mut local.waits) {
        if wait.wait().await.is_err() {
            let mut out = Vec::new();
            append_result_framed(&mut out, ResultCode::Unknown.as_u8(), local.framing);
            return out;
        }
    }
    std::mem::take(&mut local.answer)
}

/// The answer inside a proxy's reply.
fn relayed(reply: Option<&ReplyFrame>, framing: Framing) -> Vec<u8> {
    if let Some(ReplyFrame::Frame { kind, body }) = reply {
        if let Ok(Fabric::ProxyAnswer { answer, .. }) = Fabric::decode(*kind, body) {
            return answer.to_vec();
        }
    }
    timeout_answer(framing)
}

/// Serves a request another node proxied here. Returns (redirect, answer):
/// when this node does not serve it either, the node it would send it to.
pub async fn serve_proxy(
    node: &Arc<Node>,
    body: Vec<u8>,
    framing: ProxyFraming,
    timeout_ms_asked: u32,
) -> (Option<NodeId>, Vec<u8>) {
    let wire_framing = framing_of(framing);
    let mut local = Local {
        answer: Vec::new(),
        waits: Vec::new(),
        framing: wire_framing,
    };
    let ran = match run_here(node, &body, wire_framing, true, false) {
        Ok((answer, waits)) => {
            local.answer = answer;
            local.waits = waits;
            Ran::Answered
        }
        Err(remote) => {
            if let Need::Replicate(_) = remote.need {
                local.answer = remote.answer;
            }
            Ran::Need(remote.need)
        }
    };
    let counters = &node.cluster.counters;
    let proxied = datapath::serve_proxied(
        node.cluster.node_id,
        ran,
        monotonic_ms(),
        timeout_ms(node, timeout_ms_asked),
        body,
        framing,
        &node.cluster.routing.load(),
        &mut |counter, n| counters.count(counter, n),
    );
    match proxied {
        Proxied::Answered => (None, finish_local(&mut local).await),
        Proxied::Redirect(to) => (Some(to), Vec::new()),
        Proxied::Work(work) => (None, drive(Arc::clone(node), work, local).await),
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
        let framing = remote.request.framing;
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
            local.spawn_local(rereplicate_in_background(Arc::clone(&node)));
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

/// How often the unreplicated records are saved when they changed.
const UNREPLICATED_SAVE_EVERY: Duration = Duration::from_secs(1);
/// How often they are saved anyway (the watermark moves on).
const UNREPLICATED_REFRESH_EVERY: Duration = Duration::from_secs(10);

/// (SC) Copies the records left unreplicated here (a write that timed
/// out, or one a restart may have cut off) to their replicas again, a few
/// at a time ([`datapath::rereplicate::sweep`]), and saves the list for
/// the next start (see `sc::restore_unreplicated`).
async fn rereplicate_in_background(node: Arc<Node>) {
    let sc: Vec<usize> = node
        .store
        .namespaces()
        .iter()
        .enumerate()
        .filter(|(_, ns)| ns.config.strong_consistency)
        .map(|(index, _)| index)
        .collect();
    if sc.is_empty() {
        return;
    }
    let gates = Arc::clone(&node.cluster.gates);
    let mut saved = Vec::new();
    let mut last_save = std::time::Instant::now();
    let mut last_refresh = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(datapath::rereplicate::SWEEP_EVERY_MS)).await;
        if last_save.elapsed() >= UNREPLICATED_SAVE_EVERY {
            last_save = std::time::Instant::now();
            let refresh = last_refresh.elapsed() >= UNREPLICATED_REFRESH_EVERY;
            if refresh {
                last_refresh = last_save;
            }
            // The watermark is read before the list: a write applied after
            // it is listed or newer than it.
            let now_ms = bolide_types::now_citrusleaf_milliseconds();
            super::sc::save_unreplicated(&node, now_ms, refresh, &mut saved);
        }
        let routing = node.cluster.routing.load_full();
        let copies = datapath::rereplicate::sweep(
            &super::records::Records(&node.store),
            &routing,
            &gates,
            &sc,
            datapath::rereplicate::SWEEP_BUDGET,
        );
        for copies in copies {
            let remote = Remote {
                need: Need::Rereplicate {
                    copies,
                    then_run: false,
                },
                request: bolide_transaction::Request {
                    body: Vec::new(),
                    framing: Framing::Message,
                    timeout_ms: 0,
                },
                answer: Vec::new(),
            };
            tokio::task::spawn_local(complete(Arc::clone(&node), remote));
        }
    }
}

/// Applies a cluster-wide metadata item on this node.
pub fn apply_metadata(node: &Node, item: &Item) {
    match item.module.as_str() {
        "truncate" if !item.deleted => apply_truncation(node, item),
        "sindex" => apply_sindex(node, item),
        "udf" => apply_udf(node, item),
        super::security::MODULE => super::security::apply(node, item),
        bolide_redis::scripting::SCRIPT_MODULE | bolide_redis::scripting::FUNCTION_MODULE => {
            if let Some(scripts) = node.redis_scripts.get() {
                scripts.apply_shared(&item.module, &item.key, &item.value, item.deleted);
            }
        }
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
