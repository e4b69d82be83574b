//! The Redis port's connections: bytes in, `bolide_redis::Session` answers
//! them, bytes out. Requests run on this event loop through the
//! transaction layer's typed requests, as the Aerospike port's do; a write
//! that replicates, and a write that waits for the device
//! (commit-to-device), is answered once that is done.

use crate::connection::Context;
use crate::net::{tls::ServerTls, Connection};
use bolide_cluster::Routing;
use bolide_redis::cluster::{ClusterMap, ClusterNode, NOBODY};
use bolide_redis::{Records, Session, Shared, Step};
use bolide_store::Store;
use bolide_transaction::{
    Answer, Caller, Cluster, Need, Permission, RecordRequest, Remote, Scratch,
};
use bolide_types::ResultCode;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

const READ_BYTES: usize = 16 * 1024;
/// The most a connection may buffer of requests not yet answered; a
/// client that sends more without reading is disconnected. (A record
/// holds at most the namespace's max-record-size, 8 MiB at most, so no
/// useful request is larger.)
const INPUT_BYTES_MAX: usize = 64 << 20;

/// Wakes a subscribed connection when a message is published to it.
struct Waker(tokio::sync::Notify);

impl bolide_redis::pubsub::Wake for Waker {
    fn wake(&self) {
        self.0.notify_one();
    }
}

/// Runs a connection's requests through the transaction layer.
struct Backend<'c> {
    context: &'c Context,
    shared: &'c Shared,
    peer: Option<std::net::SocketAddr>,
    /// The connection came in on the TLS port: the Redis Cluster map it
    /// is given names the nodes' TLS ports.
    tls: bool,
    /// Who the data path runs requests as: changes when AUTH logs in.
    caller: &'c mut Caller,
    /// On a secured node: the user the connection logged in as.
    login: &'c mut Option<Arc<bolide_security::Session>>,
    scratch: &'c mut Scratch,
    /// Writes applied here whose copies must reach the replicas before
    /// the answers go out.
    replicating: Vec<Copies>,
    /// Where the reply of the command running now starts in the output.
    command_at: usize,
}

/// A write's copies still to make, and the reply (a range of the output)
/// that answers it: if the copies fail, that reply becomes
/// [`bolide_redis::keyspace::INDOUBT`]. An empty range: no reply depends
/// on them (copies made before a command runs, or the reply was dropped
/// by CLIENT REPLY).
struct Copies {
    remote: Remote,
    reply: std::ops::Range<usize>,
}

/// A reply range not closed yet: the command is still running.
const OPEN: usize = usize::MAX;

/// Whether `answer`, what the data path answered once a write's copies
/// were done, says they failed (an Aerospike message with a result code;
/// a write that was copied answers what its local run answered, nothing
/// for a Redis request).
fn copies_failed(answer: &[u8]) -> bool {
    answer
        .get(bolide_wire::PROTO_HEADER_BYTES..)
        .and_then(|body| bolide_wire::message::decode_header(body).ok())
        .is_some_and(|(header, _)| header.result_code != ResultCode::Ok.as_u8())
}

/// Makes every write's copies; a command one of whose writes' copies
/// failed answers INDOUBT in place of its reply in `output`. Returns
/// whether any failed.
async fn make_copies(context: &Context, copies: Vec<Copies>, output: &mut Vec<u8>) -> bool {
    let mut failed: Vec<std::ops::Range<usize>> = Vec::new();
    let mut any = false;
    for copies in copies {
        let answer = context.remote.complete(copies.remote).await;
        if copies_failed(&answer) {
            any = true;
            let reply = copies.reply;
            if reply.end != OPEN && reply.start < reply.end && reply.end <= output.len() {
                failed.push(reply);
            }
        }
    }
    if failed.is_empty() {
        return any;
    }
    failed.sort_by_key(|reply| reply.start);
    failed.dedup();
    let mut rebuilt = Vec::with_capacity(output.len());
    let mut at = 0;
    for reply in failed {
        if reply.start < at {
            continue;
        }
        rebuilt.extend_from_slice(&output[at..reply.start]);
        rebuilt.push(b'-');
        rebuilt.extend_from_slice(bolide_redis::keyspace::INDOUBT.as_bytes());
        rebuilt.extend_from_slice(b"\r\n");
        at = reply.end;
    }
    rebuilt.extend_from_slice(&output[at..]);
    *output = rebuilt;
    true
}

impl Records for Backend<'_> {
    fn run(&mut self, request: &RecordRequest<'_>, answer: &mut Answer) -> Result<(), String> {
        let routing = self.context.routing.load();
        let cluster = Cluster {
            runner: Some(&self.context.runner),
            // Session reads: a write that changes nothing answers at once.
            confirm_unapplied: false,
            ..Cluster::new(&routing, &self.context.gates)
        };
        match bolide_transaction::execute_request(
            &self.context.store,
            &cluster,
            &*self.caller,
            request,
            answer,
            self.scratch,
        ) {
            None => Ok(()),
            Some(remote) => match remote.need {
                Need::Replicate(_) => {
                    self.replicating.push(Copies {
                        remote,
                        reply: self.command_at..OPEN,
                    });
                    Ok(())
                }
                Need::Again => Err("TRYAGAIN the cluster is changing; try again".to_owned()),
                // (SC) Copied first by `copy_first` before the command
                // runs; this is the rare record listed since (or whose
                // copies did not complete in a few rounds).
                Need::Rereplicate { .. } => {
                    Err("TRYAGAIN the record is being copied to its replicas; try again".to_owned())
                }
                // The slot map said this node serves the key, but the
                // partition moved meanwhile: the client retries and then
                // follows the new map's MOVED.
                Need::Proxy { .. } | Need::Resolve { .. } => {
                    Err("TRYAGAIN this key's partition is moving; try again".to_owned())
                }
            },
        }
    }

    fn store(&self) -> &Store {
        &self.context.store
    }

    fn cluster(&self) -> Option<Arc<ClusterMap>> {
        cluster_map(self.context, self.shared, self.tls)
    }

    fn secured(&self) -> bool {
        self.context.secured.is_some()
    }

    fn login(&mut self, user: &str, password: &[u8]) -> Result<(), String> {
        let Some(secured) = &self.context.secured else {
            return Err(bolide_redis::keyspace::WRONGPASS.to_owned());
        };
        let client = self
            .peer
            .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        match secured.security.login_password(client, user, password) {
            Ok(session) => {
                *self.caller = secured.caller(self.peer, Some(&session));
                *self.login = Some(session);
                Ok(())
            }
            Err(
                ResultCode::InvalidUser
                | ResultCode::InvalidPassword
                | ResultCode::InvalidCredential
                | ResultCode::NotWhitelisted,
            ) => Err(bolide_redis::keyspace::WRONGPASS.to_owned()),
            Err(code) => Err(format!(
                "ERR login failed: result code {} ({code:?})",
                code.as_u8()
            )),
        }
    }

    fn copy_first(&mut self, set: &[u8], keys: &[&[u8]]) -> bool {
        let Some((index, ns)) = self
            .context
            .store
            .namespace_index(self.shared.namespace.as_bytes())
        else {
            return false;
        };
        // PERF: one load when nothing is unreplicated (every AP namespace).
        if !ns.config.strong_consistency || self.context.gates.unreplicated_count(index) == 0 {
            return false;
        }
        let routing = self.context.routing.load_full();
        let cluster = Cluster::new(&routing, &self.context.gates);
        let mut queued = false;
        for key in keys {
            let digest = bolide_redis::keyspace::digest(set, key);
            if let Some(need) = cluster.copy_again(index, ns, &digest, None, false) {
                self.replicating.push(Copies {
                    remote: Remote {
                        need,
                        request: bolide_transaction::Request {
                            body: Vec::new(),
                            framing: bolide_wire::Framing::Message,
                            timeout_ms: 0,
                        },
                        answer: Vec::new(),
                    },
                    // Made before the command runs: no reply yet.
                    reply: 0..0,
                });
                queued = true;
            }
        }
        queued
    }

    fn command_started(&mut self, at: usize) {
        self.command_at = at;
    }

    fn command_ended(&mut self, at: usize) {
        for copies in &mut self.replicating {
            if copies.reply.end == OPEN {
                copies.reply.end = at;
            }
        }
    }

    fn permits(&self, permission: Permission, set: &[u8]) -> bool {
        let Some(secured) = &self.context.secured else {
            return true;
        };
        let wanted = crate::access::security_permission(permission);
        secured
            .security
            .check(
                self.login.as_deref(),
                bolide_security::Needs::of(wanted),
                &self.shared.namespace,
                &String::from_utf8_lossy(set),
                wanted.name(),
            )
            .is_ok()
    }
}

/// How long a built Redis Cluster map is reused while the routing stays
/// the same (peers' RESP endpoints arrive with their heartbeats).
const CLUSTER_MAP_REUSE: Duration = Duration::from_millis(500);

/// The Redis Cluster map of the routing in force, or None while this node
/// has never been in a cluster of two or more nodes (it then answers as a
/// standalone Redis). Built once per routing change and reused.
fn cluster_map(context: &Context, shared: &Shared, tls: bool) -> Option<Arc<ClusterMap>> {
    let routing = context.routing.load();
    if routing.members.len() > 1 {
        shared.clustered.store(true, Relaxed);
    } else if !shared.clustered.load(Relaxed) {
        return None;
    }
    let stamp = (Arc::as_ptr(&*routing) as u64)
        ^ routing.key.rotate_left(17)
        ^ (routing.generation as u64).rotate_left(41);
    let mut cache = if tls {
        shared.cluster_map_tls.lock()
    } else {
        shared.cluster_map.lock()
    };
    if let Some((built, at, map)) = &*cache {
        if *built == stamp && at.elapsed() < CLUSTER_MAP_REUSE {
            return Some(Arc::clone(map));
        }
    }
    let map = Arc::new(build_map(context, &routing, &shared.namespace, tls));
    *cache = Some((stamp, Instant::now(), Arc::clone(&map)));
    Some(map)
}

/// Builds the map from this node's routing of the Redis namespace and the
/// RESP endpoints the members advertise (`tls`: their TLS endpoints).
fn build_map(context: &Context, routing: &Routing, namespace: &str, tls: bool) -> ClusterMap {
    let cluster = context.info.cluster();
    let service = &cluster.cluster;
    let status = service.status();
    // Member index → index in `nodes` (members without a RESP port are
    // left out: no client could be sent there).
    let mut slots_of = vec![NOBODY; routing.members.len()];
    let mut nodes = Vec::new();
    for (index, &node) in routing.members.iter().enumerate() {
        let redis = if tls {
            if index == usize::from(routing.me) {
                service.redis_tls.first().cloned()
            } else {
                crate::cluster::info::peer_redis_tls(cluster, node)
            }
        } else if index == usize::from(routing.me) {
            service.redis.first().cloned()
        } else {
            status
                .peers
                .iter()
                .find(|peer| peer.node == node)
                .and_then(|peer| peer.redis.first().cloned())
        };
        let Some(redis) = redis else {
            continue;
        };
        slots_of[index] = nodes.len() as u8;
        nodes.push(ClusterNode {
            id: format!("{node:040x}"),
            host: redis.host,
            port: redis.port,
            cport: routing.fabric.get(index).map_or(0, |fabric| fabric.port),
        });
    }
    let me = slots_of
        .get(usize::from(routing.me))
        .copied()
        .unwrap_or(NOBODY);
    let count = bolide_types::PARTITION_COUNT;
    let mut map = ClusterMap {
        me,
        nodes,
        masters: vec![NOBODY; count],
        replicas: vec![Vec::new(); count],
        writes_here: vec![false; count],
        reads_here: vec![false; count],
        epoch: routing.generation.max(0) as u64,
    };
    let Some(ns) = routing.namespace(namespace) else {
        return map;
    };
    let index_of = |member: u8| slots_of.get(usize::from(member)).copied().unwrap_or(NOBODY);
    // Who masters a partition, as far as this node knows: itself when it
    // is the working master; the working master it is taking over from when
    // it is the final master still filling; else the final master of the
    // plan (which every node computes alike; a handoff in progress then
    // costs the client a second MOVED, from the final master to the
    // working master).
    for pid in 0..count {
        let route = ns.route(pid);
        let holders = ns.holders(pid);
        let Some(&final_master) = holders.first() else {
            continue;
        };
        if route.unavailable() {
            continue;
        }
        map.writes_here[pid] = route.writes_here();
        map.reads_here[pid] = route.reads_here();
        let master = if route.writes_here() {
            routing.me
        } else if final_master == routing.me {
            route.master
        } else {
            final_master
        };
        map.masters[pid] = index_of(master);
        let mut replicas: Vec<u8> = holders
            .iter()
            .filter(|&&member| member != master && member != u8::MAX)
            .map(|&member| index_of(member))
            .filter(|&index| index != NOBODY)
            .collect();
        replicas.sort_unstable();
        replicas.dedup();
        map.replicas[pid] = replicas;
    }
    map
}

/// Serves one Redis connection until the client leaves or sends a
/// malformed request; from a TLS listener (`tls`), after the handshake.
pub async fn serve(
    context: Arc<Context>,
    shared: Arc<Shared>,
    stream: tokio::net::TcpStream,
    id: u64,
    tls: Option<ServerTls>,
) {
    context.counters.connections_opened.fetch_add(1, Relaxed);
    let peer = stream.peer_addr().ok();
    match Connection::accept(stream, tls.as_ref()).await {
        Ok(connection) if connection.is_tls() => {
            let counters = &context.counters;
            counters.tls_connections_opened.fetch_add(1, Relaxed);
            run(&context, shared, connection, id).await;
            counters.tls_connections_closed.fetch_add(1, Relaxed);
        }
        Ok(connection) => run(&context, shared, connection, id).await,
        Err(error) => {
            context
                .counters
                .tls_handshake_failures
                .fetch_add(1, Relaxed);
            tracing::debug!(?peer, %error, "redis: closing connection: TLS handshake failed");
        }
    }
    context.counters.connections_closed.fetch_add(1, Relaxed);
}

async fn run(context: &Arc<Context>, shared: Arc<Shared>, mut connection: Connection, id: u64) {
    let peer = connection.peer_addr().ok();
    let tls = connection.is_tls();
    let local = connection.local_addr().ok();
    let show =
        |address: Option<std::net::SocketAddr>| address.map_or(String::new(), |a| a.to_string());
    let mut session = Session::with_id(Arc::clone(&shared), id, show(peer), show(local));
    let waker = Arc::new(Waker(tokio::sync::Notify::new()));
    session.set_wake(Arc::clone(&waker) as Arc<dyn bolide_redis::pubsub::Wake>);
    let mut caller = match &context.secured {
        Some(secured) => secured.caller(peer, None),
        None => Caller::client(peer),
    };
    let mut login = None;
    let mut scratch = Scratch::default();
    let mut input: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut output: Vec<u8> = Vec::with_capacity(READ_BYTES);
    // A client configured for TLS that reached the plain port: its
    // ClientHello is no command, and it would wait for an answer that
    // never comes. Closed at once, as the Aerospike port does.
    let mut first_bytes_checked = connection.is_tls();
    loop {
        if !first_bytes_checked && !input.is_empty() {
            first_bytes_checked = true;
            if crate::connection::is_tls_client_hello(&input) {
                tracing::info!(
                    ?peer,
                    "redis: ignoring TLS connection: a TLS ClientHello on the plain port"
                );
                return;
            }
        }
        let mut backend = Backend {
            context: context.as_ref(),
            shared: &shared,
            peer,
            tls,
            caller: &mut caller,
            login: &mut login,
            scratch: &mut scratch,
            replicating: Vec::new(),
            command_at: 0,
        };
        // A bug in a command must not take the event loop down: the
        // client gets an error and the connection closes.
        let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            session.feed(&input, &mut output, &mut backend)
        }));
        let (used, step) = match fed {
            Ok(fed) => fed,
            Err(_) => {
                tracing::error!(
                    ?peer,
                    "redis: a command failed unexpectedly; closing the connection"
                );
                output.extend_from_slice(b"-ERR internal error\r\n");
                (0, Step::Close)
            }
        };
        let replicating = std::mem::take(&mut backend.replicating);
        if !session.drain_messages(&mut output) {
            return;
        }
        input.drain(..used);
        if !replicating.is_empty() {
            make_copies(context, replicating, &mut output).await;
        }
        for wait in scratch.take_commit_waits() {
            if wait.wait().await.is_err() {
                return;
            }
        }
        if !output.is_empty() {
            if connection.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
            if output.capacity() > 4 << 20 {
                output = Vec::with_capacity(READ_BYTES);
            }
        }
        match step {
            Step::Read => {
                // A subscriber also wakes for published messages, and any
                // connection when CLIENT KILL closes it.
                tokio::select! {
                    more = read_more(&mut connection, &mut input) => {
                        if !more {
                            return;
                        }
                    }
                    () = waker.0.notified() => {}
                }
            }
            // The copies ran above: the command runs now.
            Step::Flush | Step::Again => {}
            Step::Block(until) => {
                // Wait for the retry time, or until a write serves the
                // wait; a client that leaves meanwhile ends the wait (what
                // it sends is kept for later).
                let sleep = tokio::time::sleep_until(until.into());
                tokio::select! {
                    () = sleep => {}
                    // A write on another connection served the wait.
                    () = waker.0.notified() => {}
                    more = read_more(&mut connection, &mut input) => {
                        if !more {
                            return;
                        }
                    }
                }
            }
            Step::Close => return,
            Step::Script(call) => {
                let Some((reply, replicating, waits)) =
                    run_script(context, &shared, (peer, tls), &caller, &login, call).await
                else {
                    output.extend_from_slice(b"-ERR the script engine stopped\r\n");
                    continue;
                };
                // The script's writes reach their replicas (and the
                // device, with commit-to-device) before its reply goes.
                let mut reply = reply;
                // (An empty reply: CLIENT REPLY OFF or SKIP dropped it.)
                if !replicating.is_empty()
                    && make_copies(context, replicating, &mut Vec::new()).await
                    && !reply.is_empty()
                {
                    reply = format!("-{}\r\n", bolide_redis::keyspace::INDOUBT).into_bytes();
                }
                for wait in waits {
                    if wait.wait().await.is_err() {
                        return;
                    }
                }
                output.extend_from_slice(&reply);
            }
        }
    }
}

/// What a script's run on the engine thread hands back: its reply, its
/// writes still to replicate, and its writes still to reach the device.
type ScriptDone = (Vec<u8>, Vec<Copies>, Vec<bolide_store::CommitWait>);

/// Runs a script command on the node's script engine thread, with the
/// connection's identity; the event loop serves its other connections
/// meanwhile (they may be answered BUSY, or send SCRIPT KILL).
async fn run_script(
    context: &Arc<Context>,
    shared: &Arc<Shared>,
    (peer, tls): (Option<std::net::SocketAddr>, bool),
    caller: &Caller,
    login: &Option<Arc<bolide_security::Session>>,
    call: Box<bolide_redis::scripting::Call>,
) -> Option<ScriptDone> {
    let (sender, receiver) = tokio::sync::oneshot::channel::<ScriptDone>();
    let context = Arc::clone(context);
    let job_shared = Arc::clone(shared);
    let mut caller = caller.clone();
    let mut login = login.clone();
    shared.scripts.submit(Box::new(move |engine| {
        let mut scratch = Scratch::default();
        let mut backend = Backend {
            context: context.as_ref(),
            shared: &job_shared,
            peer,
            tls,
            caller: &mut caller,
            login: &mut login,
            scratch: &mut scratch,
            replicating: Vec::new(),
            command_at: 0,
        };
        let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            call.run(engine, &mut backend, true)
        }))
        .unwrap_or_else(|_| {
            tracing::error!(?peer, "redis: a script failed unexpectedly");
            b"-ERR internal error\r\n".to_vec()
        });
        let replicating = std::mem::take(&mut backend.replicating);
        let waits = scratch.take_commit_waits();
        let _ = sender.send((reply, replicating, waits));
    }));
    receiver.await.ok()
}

/// Reads what the client sent; false if it left or sent too much.
async fn read_more(connection: &mut Connection, input: &mut Vec<u8>) -> bool {
    if input.len() >= INPUT_BYTES_MAX {
        return false;
    }
    input.reserve(
        READ_BYTES
            .max(input.len() / 2)
            .min(INPUT_BYTES_MAX - input.len()),
    );
    matches!(connection.read_some(input).await, Ok(read) if read > 0)
}
