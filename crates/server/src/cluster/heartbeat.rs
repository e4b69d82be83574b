//! The cluster thread: heartbeat connections (a listener for what other
//! nodes send, a dialer per peer for what this node sends) and the cluster
//! state machine they feed. Every 10 ms the machine ticks; every message,
//! data-path report and metadata change goes in; its actions come out as
//! sends, routing snapshots, migrations and log lines.
//!
//! A peer that sends anything that is not a valid frame is disconnected;
//! nothing it sent is trusted. So is one that holds a frame unfinished
//! (or sends nothing) for longer than a few heartbeat timeouts, and one
//! whose unfinished frame would take the heartbeat connections' buffers
//! over [`BUFFERED_BYTES_MAX`]: garbage and stalled senders cost the node a
//! bounded amount of memory, and only for a while.

use super::{migrate, monotonic_ms, wall_ms, Context, Event};
use crate::net::Connection;
use bolide_cluster::codec::{self, CodecError, FRAME_HEADER_BYTES};
use bolide_cluster::message::Endpoint;
use bolide_cluster::node::{Action, ClusterNode, Config, Entropy, Level};
use bolide_cluster::{Envelope, Version};
use bolide_types::PARTITION_COUNT;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Largest heartbeat frame (an exchange commit of a large cluster).
pub const HEARTBEAT_FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Buffer each inbound heartbeat connection may hold without charging
/// [`BUFFERED_BYTES_MAX`]: every pulse fits in it.
pub const CONNECTION_FREE_BYTES: usize = 64 * 1024;
/// Most bytes of unfinished frames that inbound heartbeat connections hold
/// above their free share, all together: two of the largest frames.
pub const BUFFERED_BYTES_MAX: u64 = 2 * HEARTBEAT_FRAME_BYTES_MAX as u64;
/// Size of each read while no large frame is under way.
const READ_CHUNK_BYTES: usize = 4096;
/// An inbound connection must bring a whole frame at least this often (or
/// twice the heartbeat expiry, if longer); peers pulse every interval.
const FRAME_WAIT_MIN: Duration = Duration::from_secs(5);
/// Frames queued for a peer before new ones are dropped (it is slow or
/// gone; the protocol resends what matters).
const DIALER_QUEUE: usize = 1024;
const TICK: Duration = Duration::from_millis(10);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const RECONNECT_PAUSE: Duration = Duration::from_millis(150);

/// Randomness from the OS-seeded hasher of the standard library.
struct OsEntropy {
    counter: u64,
    state: std::collections::hash_map::RandomState,
}

impl Entropy for OsEntropy {
    fn next_u64(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(1);
        let mut hasher = self.state.build_hasher();
        hasher.write_u64(self.counter);
        hasher.write_u64(wall_ms());
        hasher.finish()
    }
}

fn entropy() -> OsEntropy {
    OsEntropy {
        counter: 0,
        state: std::collections::hash_map::RandomState::new(),
    }
}

/// Starts the cluster thread, on an already bound heartbeat listener if the
/// node clusters (without one it stays a cluster of one).
pub fn start(node: Arc<Context>, listener: Option<std::net::TcpListener>) -> Result<(), String> {
    let events = node
        .cluster
        .take_events()
        .ok_or("cluster thread already started")?;
    std::thread::Builder::new()
        .name("cluster".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "cannot start the cluster thread");
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, run(node, listener, events));
        })
        .map_err(|error| format!("cannot start the cluster thread: {error}"))?;
    Ok(())
}

/// A random non-zero cluster key for copies with no saved lineage.
fn restart_key(entropy: &mut OsEntropy) -> u64 {
    loop {
        let key = entropy.next_u64() & bolide_cluster::version::KEY_MASK;
        if key != 0 {
            break key;
        }
    }
}

/// What this node starts its cluster machine with: every namespace's
/// partition versions as its storage left them, the strong-consistency
/// namespaces' saved rosters, regimes and witnesses (in `config`), and
/// their staged rosters as metadata items.
///
/// An AP copy with records is a lineage of its own (merged into the
/// cluster's copies, never trusted over them); one without is nothing. An
/// SC copy keeps the version it was saved with, flagged untrusted (`e`)
/// unless the storage kept every acknowledged write: a clean shutdown (the
/// state file says so; the flag is cleared at once) or commit-to-device.
fn restore(
    node: &Context,
    config: &mut Config,
    entropy: &mut OsEntropy,
) -> (Vec<Vec<Version>>, Vec<bolide_cluster::metadata::Item>) {
    let key = restart_key(entropy);
    let work_directory = node.cluster.work_directory.as_deref();
    let mut pending = Vec::new();
    let mut all_versions = Vec::new();
    for (ns, ours) in config.namespaces.iter_mut().zip(node.store.namespaces()) {
        let holds = |pid: usize| {
            let (records, tombstones) = ours.partition_counts(pid);
            records + tombstones > 0
        };
        let ours = &ours.config;
        if !ours.strong_consistency {
            all_versions.push(
                (0..PARTITION_COUNT)
                    .map(|pid| {
                        if holds(pid) {
                            Version::full(key)
                        } else {
                            Version::NULL
                        }
                    })
                    .collect(),
            );
            continue;
        }
        let Some(path) = super::sc::state_path(work_directory, ours) else {
            tracing::warn!(
                namespace = ours.name,
                "strong-consistency namespace without work-directory or storage file: \
                 roster, regime and partition versions are not kept across restarts"
            );
            all_versions.push(bolide_cluster::sc::restart_versions(&[], false, holds, key));
            continue;
        };
        let saved = match super::sc::load(&path, &ours.name) {
            Ok(saved) => saved,
            Err(error) => {
                // A regime must never be guessed downwards: start far above
                // any regime a cluster reaches; the roster must be set
                // again, and no copy here is trusted.
                tracing::error!(%error, "strong-consistency state unreadable");
                ns.regime = u32::MAX / 2;
                all_versions.push(bolide_cluster::sc::restart_versions(&[], false, holds, key));
                continue;
            }
        };
        let device = ours.device.as_ref();
        let commit_to_device = device.is_some_and(|device| device.commit_to_device);
        let trusted = device.is_some() && (saved.clean || commit_to_device);
        if !saved.versions.is_empty() && !saved.clean {
            let consequence = if trusted {
                "commit-to-device: its copies are trusted"
            } else {
                "its copies are untrusted (e) until merged or revived"
            };
            tracing::warn!(
                namespace = ours.name,
                "{{{}}} prior shutdown not clean; {consequence}",
                ours.name
            );
        }
        ns.roster = saved.roster.clone();
        ns.regime = saved.regime;
        ns.witnesses = saved.witnesses.clone();
        let mut versions =
            bolide_cluster::sc::restart_versions(&saved.versions, trusted, holds, key);
        if ours.auto_revive {
            let revived = bolide_cluster::sc::auto_revive(&mut versions);
            if revived > 0 {
                tracing::warn!(
                    namespace = ours.name,
                    "{{{}}} {revived} partitions auto-revived",
                    ours.name
                );
            }
            if let Some((_, namespace)) = node.store.namespace_index(ours.name.as_bytes()) {
                namespace
                    .stats
                    .auto_revived_partitions
                    .store(revived as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
        all_versions.push(versions);
        pending.extend(saved.pending.clone());
        // From now until the next clean shutdown, a restart is unclean.
        if saved.clean {
            super::sc::update(&path, &ours.name, |saved| saved.clean = false);
        }
    }
    (all_versions, pending)
}

async fn run(
    node: Arc<Context>,
    listener: Option<std::net::TcpListener>,
    mut events: mpsc::UnboundedReceiver<Event>,
) {
    let service = &node.cluster;
    let mut entropy = entropy();
    let mut config = Config {
        node: service.node_id,
        cluster_name: service.cluster_name.clone(),
        boot_id: entropy.next_u64(),
        heartbeat: service.heartbeat.clone(),
        fabric: service.fabric.clone(),
        service: service.service.clone(),
        redis: service.redis.clone(),
        seeds: service.seeds.clone(),
        heartbeat_interval_ms: service.heartbeat_interval_ms,
        heartbeat_timeout: service.heartbeat_timeout,
        fabric_latency_max_ms: 5,
        min_cluster_size: service.min_cluster_size,
        namespaces: service.namespaces.clone(),
    };
    let (versions, mut metadata) = restore(&node, &mut config, &mut entropy);
    super::sc::restore_unreplicated(&node);
    metadata.extend(super::security::items(&node));
    let mut machine = ClusterNode::new(
        config,
        versions,
        metadata,
        Box::new(entropy),
        monotonic_ms(),
    );
    if let Some((name, endpoints)) = &service.service_tls {
        // The other nodes list it in their peers-tls-std.
        machine.set_metadata(
            super::info::TLS_SERVICE_MODULE,
            &format!("{:X}", service.node_id),
            &super::info::tls_service_value(name, endpoints),
            false,
            wall_ms(),
        );
    }
    if !service.redis_tls.is_empty() {
        // The other nodes name it to Redis Cluster clients of their TLS
        // port.
        machine.set_metadata(
            super::info::REDIS_TLS_MODULE,
            &format!("{:X}", service.node_id),
            &super::info::tls_service_value("redis", &service.redis_tls),
            false,
            wall_ms(),
        );
    }
    let (inbound, mut inbound_receiver) = mpsc::unbounded_channel::<Envelope>();
    if let Some(listener) = listener {
        match TcpListener::from_std(listener) {
            Ok(listener) => {
                tokio::task::spawn_local(accept(Arc::clone(&node), listener, inbound));
            }
            Err(error) => tracing::error!(%error, "cannot listen for heartbeats"),
        }
    }
    let mut dialers = Dialers::default();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_status = 0u64;
    // Metadata changes whose callers wait for every member, by ticket.
    let mut sharing = std::collections::HashMap::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                machine.tick(monotonic_ms(), clock_ms(service));
            }
            Some(envelope) = inbound_receiver.recv() => {
                machine.receive(envelope, monotonic_ms());
            }
            Some(event) = events.recv() => match event {
                Event::Data(event) => machine.data_event(event, monotonic_ms()),
                Event::Metadata { module, key, value, deleted, answer: None } => {
                    machine.set_metadata(&module, &key, &value, deleted, wall_ms());
                }
                Event::Metadata { module, key, value, deleted, answer: Some(answer) } => {
                    let ticket = machine.share_metadata(
                        &module, &key, &value, deleted, wall_ms(), monotonic_ms(),
                    );
                    sharing.insert(ticket, answer);
                }
                Event::Recluster => {
                    machine.recluster(monotonic_ms());
                }
                Event::RackId { namespace, rack } => machine.set_rack_id(namespace, rack),
                Event::Revive { namespace, answer } => {
                    let _ = answer.send(machine.revive(namespace));
                }
                Event::Shutdown { answer } => {
                    shut_down(&node, &machine, answer);
                    return;
                }
            },
        }
        // Saved state first (a map is used only once the witnesses of its
        // rebalance are kept), then the routing: the migrations of a new
        // map check that their map is the one in force.
        let mut actions = machine.take_actions();
        let published = actions
            .iter()
            .any(|action| matches!(action, Action::Publish(_)));
        actions.sort_by_key(|action| match action {
            Action::SaveSc { .. } => 0,
            Action::Publish(_) => 1,
            _ => 2,
        });
        for action in actions {
            if let Action::Shared(ticket) = action {
                if let Some(answer) = sharing.remove(&ticket) {
                    let _ = answer.send(());
                }
                continue;
            }
            act(&node, &mut dialers, action);
        }
        let now = monotonic_ms();
        if published || now >= last_status + 50 {
            last_status = now;
            if let Ok(mut status) = service.status.lock() {
                *status = machine.status(now);
            }
        }
    }
}

fn act(node: &Arc<Context>, dialers: &mut Dialers, action: Action) {
    let service = &node.cluster;
    match action {
        Action::Connect(endpoint) => dialers.ensure(node, &endpoint),
        Action::Disconnect(endpoint) => dialers.remove(&endpoint),
        Action::Broadcast(envelope) => {
            let frame = encode(&envelope);
            dialers.broadcast(&frame);
        }
        Action::Send {
            endpoint, envelope, ..
        } => {
            let frame = encode(&envelope);
            dialers.ensure(node, &endpoint);
            dialers.send(&endpoint, frame);
        }
        Action::Publish(routing) => {
            if routing.key != service.routing.load().key {
                service.gates.open_all();
            }
            service.routing.store(routing);
        }
        Action::Emigrate(emigration) => {
            let _ = service
                .migrations
                .send(migrate::Command::Emigrate(emigration));
        }
        Action::Drop { namespace, pid } => {
            let _ = service
                .migrations
                .send(migrate::Command::Drop { namespace, pid });
        }
        Action::SaveSc {
            namespace,
            roster,
            regime,
            versions,
            witnesses,
        } => save_sc(node, namespace, |saved| {
            saved.roster = roster;
            saved.regime = regime;
            saved.versions = versions;
            saved.witnesses = witnesses;
            saved.clean = false;
        }),
        Action::Metadata(item) => {
            if item.module == bolide_cluster::node::ROSTER_MODULE {
                if let Some((index, _)) = node.store.namespace_index(item.key.as_bytes()) {
                    let pending = item.clone();
                    save_sc(node, index, |saved| saved.pending = Some(pending));
                }
            }
            super::remote::apply_metadata(node, &item);
            if let Ok(mut items) = service.metadata.lock() {
                items.retain(|held| (&held.module, &held.key) != (&item.module, &item.key));
                items.push(item);
            }
        }
        // Taken by the loop (it holds the waiting callers).
        Action::Shared(_) => {}
        Action::Log(Level::Info, line) => tracing::info!(target: "cluster", "{line}"),
        Action::Log(Level::Warn, line) => tracing::warn!(target: "cluster", "{line}"),
    }
}

/// The wall clock this node puts in its heartbeats: the machine's, moved
/// by `test-clock-offset-ms` (a test knob that provokes the clock-skew
/// rules without touching the machine's clock).
fn clock_ms(service: &super::ClusterService) -> u64 {
    wall_ms().saturating_add_signed(service.clock_offset_ms)
}

/// A clean shutdown: nothing is served from now on (requests get 11, copies
/// from other nodes are refused), and each SC namespace's state goes back
/// to be saved, marked clean, once the storage is flushed.
fn shut_down(
    node: &Context,
    machine: &ClusterNode,
    answer: std::sync::mpsc::Sender<Vec<(usize, super::sc::Saved)>>,
) {
    let service = &node.cluster;
    let namespaces: Vec<(String, usize, bolide_cluster::ConflictPolicy)> = service
        .namespaces
        .iter()
        .map(|ns| (ns.name.clone(), ns.replication_factor, ns.conflict_policy))
        .collect();
    service
        .routing
        .store(Arc::new(bolide_cluster::Routing::unformed(
            service.node_id,
            &namespaces,
        )));
    let mut states = Vec::new();
    for (index, state) in machine.sc().iter().enumerate() {
        if !state.enabled {
            continue;
        }
        states.push((
            index,
            super::sc::Saved {
                roster: state.roster.clone(),
                regime: state.regime,
                pending: None,
                clean: true,
                versions: machine.saved_versions(index),
                witnesses: machine.witnesses(index).to_vec(),
            },
        ));
    }
    let _ = answer.send(states);
}

fn save_sc(node: &Context, namespace: usize, change: impl FnOnce(&mut super::sc::Saved)) {
    let Some(ours) = node.store.namespaces().get(namespace) else {
        return;
    };
    let work_directory = node.cluster.work_directory.as_deref();
    if let Some(path) = super::sc::state_path(work_directory, &ours.config) {
        super::sc::update(&path, &ours.config.name, change);
    }
}

fn encode(envelope: &Envelope) -> Arc<Vec<u8>> {
    let mut frame = Vec::new();
    envelope.encode(&mut frame);
    Arc::new(frame)
}

/// How long a heartbeat connection's pulses may stay unacknowledged by
/// the peer's host before the connection is dropped and redialled: the
/// heartbeat expiry (interval × timeout), at least a second.
fn unacknowledged_timeout(node: &Context) -> Duration {
    let expiry_ms = node
        .cluster
        .heartbeat_interval_ms
        .max(1)
        .saturating_mul(node.cluster.heartbeat_timeout.max(1));
    Duration::from_millis(expiry_ms.max(1000))
}

/// How long an inbound connection may go without bringing a whole frame.
fn frame_wait(node: &Context) -> Duration {
    let expiry_ms = node
        .cluster
        .heartbeat_interval_ms
        .max(1)
        .saturating_mul(node.cluster.heartbeat_timeout.max(3));
    FRAME_WAIT_MIN.max(Duration::from_millis(expiry_ms.saturating_mul(2)))
}

/// Warnings about dropped heartbeat connections: at most one a second.
static DROPS_LOGGED: super::LogLimiter = super::LogLimiter::new();

/// Accepts heartbeat connections; each gets a reader.
async fn accept(
    node: Arc<Context>,
    listener: TcpListener,
    inbound: mpsc::UnboundedSender<Envelope>,
) {
    let wait = frame_wait(&node);
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                super::bump(&node.cluster.counters.heartbeat_connections_opened);
                let node = Arc::clone(&node);
                let inbound = inbound.clone();
                tokio::task::spawn_local(async move {
                    // With TLS, a peer without a certificate from the
                    // cluster's CA never gets to send a frame.
                    let tls = node.cluster.heartbeat_tls.get().map(|tls| &tls.server);
                    let stream = match Connection::accept(stream, tls).await {
                        Ok(stream) => stream,
                        Err(error) => {
                            super::handshake_failed(
                                &node.cluster.counters.heartbeat_tls_handshake_failures,
                                "heartbeat",
                                true,
                                &peer.to_string(),
                                &error,
                            );
                            super::bump(&node.cluster.counters.heartbeat_connections_closed);
                            return;
                        }
                    };
                    let pool = &node.cluster.counters.heartbeat_buffered_bytes;
                    if let Err(error) = read_envelopes(stream, &inbound, pool, wait).await {
                        if !matches!(error, ReadError::Closed) {
                            super::bump(&node.cluster.counters.heartbeat_bad_frames);
                            if let Some(held) = DROPS_LOGGED.allow() {
                                tracing::warn!(
                                    target: "cluster",
                                    %peer,
                                    %error,
                                    "heartbeat connection dropped (and {held} more not logged since the last line)"
                                );
                            }
                        }
                    }
                    super::bump(&node.cluster.counters.heartbeat_connections_closed);
                });
            }
            Err(error) => {
                tracing::warn!(%error, "heartbeat accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed (or reset) the connection between frames.
    Closed,
    /// It closed or failed in the middle of a frame.
    Cut(usize, Option<std::io::Error>),
    Codec(CodecError),
    TooLarge(usize),
    /// No whole frame for this long.
    Stalled(Duration),
    /// The unfinished frame does not fit [`BUFFERED_BYTES_MAX`].
    NoRoom(usize),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => write!(f, "closed"),
            ReadError::Cut(bytes, None) => write!(f, "closed after {bytes} bytes of a frame"),
            ReadError::Cut(bytes, Some(error)) => {
                write!(f, "{error} after {bytes} bytes of a frame")
            }
            ReadError::Codec(error) => write!(f, "bad frame: {error}"),
            ReadError::TooLarge(bytes) => write!(f, "frame of {bytes} bytes is too large"),
            ReadError::Stalled(wait) => write!(f, "no whole frame in {} s", wait.as_secs()),
            ReadError::NoRoom(bytes) => write!(
                f,
                "no room for a frame of {bytes} bytes: heartbeat buffers are full"
            ),
        }
    }
}

/// Bytes charged to a node-wide bound, given back when dropped.
struct Charge<'a> {
    pool: &'a AtomicU64,
    bytes: u64,
}

impl Charge<'_> {
    /// Charges `bytes` in all, if they fit under `limit`.
    fn set(&mut self, bytes: u64, limit: u64) -> bool {
        if bytes <= self.bytes {
            self.pool.fetch_sub(self.bytes - bytes, Relaxed);
            self.bytes = bytes;
            return true;
        }
        let more = bytes - self.bytes;
        let fits = self
            .pool
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(more).filter(|&total| total <= limit)
            })
            .is_ok();
        if fits {
            self.bytes = bytes;
        }
        fits
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.pool.fetch_sub(self.bytes, Relaxed);
    }
}

/// Reads frames until the peer leaves, sends something invalid, holds a
/// frame unfinished (or sends nothing) for `wait`, or its unfinished frame
/// finds no room under [`BUFFERED_BYTES_MAX`] in `pool`. The buffer grows
/// with what arrives, never to what a header announces.
pub(crate) async fn read_envelopes(
    mut stream: Connection,
    inbound: &mpsc::UnboundedSender<Envelope>,
    pool: &AtomicU64,
    wait: Duration,
) -> Result<(), ReadError> {
    let mut charge = Charge { pool, bytes: 0 };
    let mut buffer: Vec<u8> = Vec::new();
    let mut deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut used = 0;
        while let Some((header, body, total)) =
            codec::split_frame(&buffer[used..]).map_err(ReadError::Codec)?
        {
            let envelope = Envelope::decode(header.kind, body).map_err(ReadError::Codec)?;
            let _ = inbound.send(envelope);
            used += total;
            deadline = tokio::time::Instant::now() + wait;
        }
        buffer.drain(..used);
        // The whole of the frame under way (its header, until it is in).
        let needed = match buffer.first_chunk::<FRAME_HEADER_BYTES>() {
            Some(head) => {
                let header = codec::read_header(head).map_err(ReadError::Codec)?;
                if header.body_bytes > HEARTBEAT_FRAME_BYTES_MAX {
                    return Err(ReadError::TooLarge(header.body_bytes));
                }
                FRAME_HEADER_BYTES + header.body_bytes
            }
            None => FRAME_HEADER_BYTES,
        };
        // A small read, or for a large frame up to twice what is in.
        let room = if needed > buffer.len() + READ_CHUNK_BYTES {
            (needed - buffer.len()).min(buffer.len().max(READ_CHUNK_BYTES))
        } else {
            READ_CHUNK_BYTES
        };
        if buffer.capacity() > CONNECTION_FREE_BYTES && buffer.len() + room <= READ_CHUNK_BYTES {
            buffer.shrink_to(READ_CHUNK_BYTES);
        }
        if buffer.capacity() < buffer.len() + room {
            let capacity = buffer.len() + room;
            let charged = capacity.saturating_sub(CONNECTION_FREE_BYTES) as u64;
            if !charge.set(charged, BUFFERED_BYTES_MAX) {
                return Err(ReadError::NoRoom(needed));
            }
            buffer.reserve_exact(room);
        }
        let charged = buffer.capacity().saturating_sub(CONNECTION_FREE_BYTES) as u64;
        if !charge.set(charged, BUFFERED_BYTES_MAX) {
            return Err(ReadError::NoRoom(needed));
        }
        let start = buffer.len();
        buffer.resize(start + room, 0);
        let read = tokio::time::timeout_at(deadline, stream.read(&mut buffer[start..])).await;
        let read = match read {
            Ok(read) => read,
            Err(_) => return Err(ReadError::Stalled(wait)),
        };
        buffer.truncate(start + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) if start == 0 => return Err(ReadError::Closed),
            Ok(0) => return Err(ReadError::Cut(start, None)),
            Err(_) if start == 0 => return Err(ReadError::Closed),
            Err(error) => return Err(ReadError::Cut(start, Some(error))),
            Ok(_) => {}
        }
    }
}

/// One outgoing heartbeat connection per endpoint.
#[derive(Default)]
struct Dialers {
    queues: HashMap<Endpoint, mpsc::Sender<Arc<Vec<u8>>>>,
}

impl Dialers {
    fn ensure(&mut self, node: &Arc<Context>, endpoint: &Endpoint) {
        if self
            .queues
            .get(endpoint)
            .is_some_and(|queue| !queue.is_closed())
        {
            return;
        }
        let (sender, receiver) = mpsc::channel(DIALER_QUEUE);
        self.queues.insert(endpoint.clone(), sender);
        tokio::task::spawn_local(dial(Arc::clone(node), endpoint.clone(), receiver));
    }

    fn remove(&mut self, endpoint: &Endpoint) {
        self.queues.remove(endpoint);
    }

    fn send(&mut self, endpoint: &Endpoint, frame: Arc<Vec<u8>>) {
        if let Some(queue) = self.queues.get(endpoint) {
            let _ = queue.try_send(frame);
        }
    }

    fn broadcast(&mut self, frame: &Arc<Vec<u8>>) {
        for queue in self.queues.values() {
            let _ = queue.try_send(Arc::clone(frame));
        }
    }
}

/// Keeps a connection to one peer's heartbeat port and writes what is
/// queued for it; while the peer is unreachable, queued frames are dropped
/// (pulses go stale, and everything else is resent by the protocol).
async fn dial(node: Arc<Context>, endpoint: Endpoint, mut frames: mpsc::Receiver<Arc<Vec<u8>>>) {
    let address = endpoint.to_string();
    loop {
        let local = node.cluster.heartbeat_bind.ip();
        let tls = node.cluster.heartbeat_tls.get().map(|tls| &tls.client);
        // A handshake adds round trips (and signatures) to the connect.
        let limit = if tls.is_some() {
            CONNECT_TIMEOUT * 4
        } else {
            CONNECT_TIMEOUT
        };
        let connected =
            tokio::time::timeout(limit, Connection::connect(local, &address, tls)).await;
        let mut stream = match connected {
            Ok(Ok(stream)) => stream,
            failed => {
                if let (Some(_), Ok(Err(error))) = (tls, &failed) {
                    if super::is_handshake_error(error) {
                        super::handshake_failed(
                            &node.cluster.counters.heartbeat_tls_handshake_failures,
                            "heartbeat",
                            false,
                            &address,
                            error,
                        );
                    }
                }
                // Drop what waited meanwhile; stop once nobody sends here.
                loop {
                    match frames.try_recv() {
                        Ok(_) => continue,
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => return,
                    }
                }
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        };
        super::bump(&node.cluster.counters.heartbeat_connections_opened);
        // Pulses go out every interval: one unacknowledged for a whole
        // expiry means the peer is cut off. Closing then (rather than
        // writing into a connection TCP keeps retransmitting into, at ever
        // longer intervals) lets the redial below reach the peer within a
        // connect timeout of the network healing.
        let _ = stream.set_unacknowledged_timeout(unacknowledged_timeout(&node));
        loop {
            let Some(frame) = frames.recv().await else {
                return;
            };
            if stream.write_all(&frame).await.is_err() {
                super::bump(&node.cluster.counters.heartbeat_connections_closed);
                break;
            }
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// The heartbeat address a node binds (checked at start, so a port in use
/// is an error the operator sees at once).
pub fn bind(address: std::net::SocketAddr) -> Result<std::net::TcpListener, String> {
    crate::net::bind(address).map_err(|error| format!("heartbeat: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_cluster::Message;

    /// Runs `read_envelopes` on a loopback connection the test writes
    /// with `send`; returns how it ended and the envelopes it passed on.
    fn read_from(
        wait: Duration,
        pool: &AtomicU64,
        send: impl FnOnce(std::net::TcpStream) + Send + 'static,
    ) -> (Result<(), ReadError>, Vec<Envelope>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let address = listener.local_addr().expect("address");
            let writer = std::thread::spawn(move || {
                send(std::net::TcpStream::connect(address).expect("connect"))
            });
            let (stream, _) = listener.accept().await.expect("accept");
            let stream = Connection::plain(stream);
            let (inbound, mut received) = mpsc::unbounded_channel();
            let result = read_envelopes(stream, &inbound, pool, wait).await;
            writer.join().expect("writer");
            let mut envelopes = Vec::new();
            while let Ok(envelope) = received.try_recv() {
                envelopes.push(envelope);
            }
            (result, envelopes)
        })
    }

    fn join_request(from: u64) -> Vec<u8> {
        let mut frame = Vec::new();
        Envelope {
            from,
            message: Message::JoinRequest,
        }
        .encode(&mut frame);
        frame
    }

    fn header(body_bytes: u32) -> Vec<u8> {
        let mut frame = join_request(1);
        frame.truncate(FRAME_HEADER_BYTES);
        frame[8..12].copy_from_slice(&body_bytes.to_le_bytes());
        frame
    }

    #[test]
    fn valid_frames_pass_and_a_clean_close_is_not_an_error() {
        let pool = AtomicU64::new(0);
        let (result, envelopes) = read_from(Duration::from_secs(5), &pool, |mut stream| {
            use std::io::Write;
            let mut frames = join_request(7);
            frames.extend(join_request(8));
            stream.write_all(&frames).expect("write");
        });
        assert!(matches!(result, Err(ReadError::Closed)), "{result:?}");
        let senders: Vec<u64> = envelopes.iter().map(|e| e.from).collect();
        assert_eq!(senders, [7, 8]);
        assert_eq!(pool.load(Relaxed), 0);
    }

    #[test]
    fn a_frame_held_unfinished_is_dropped_after_the_wait() {
        let pool = AtomicU64::new(0);
        let started = std::time::Instant::now();
        let (result, _) = read_from(Duration::from_millis(300), &pool, |mut stream| {
            use std::io::{Read, Write};
            stream.write_all(&header(1000)).expect("write");
            stream.write_all(&[0; 10]).expect("write");
            // Hold it until the node closes it.
            let _ = stream.read(&mut [0; 1]);
        });
        assert!(matches!(result, Err(ReadError::Stalled(_))), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // Nor may a connection send nothing at all for that long.
        let (result, _) = read_from(Duration::from_millis(300), &pool, |mut stream| {
            use std::io::Read;
            let _ = stream.read(&mut [0; 1]);
        });
        assert!(matches!(result, Err(ReadError::Stalled(_))), "{result:?}");
    }

    #[test]
    fn a_cut_frame_is_an_error_and_a_huge_one_is_refused_on_its_header() {
        let pool = AtomicU64::new(0);
        let (result, _) = read_from(Duration::from_secs(5), &pool, |mut stream| {
            use std::io::Write;
            stream.write_all(&join_request(7)[..20]).expect("write");
        });
        assert!(matches!(result, Err(ReadError::Cut(20, _))), "{result:?}");
        let announced = HEARTBEAT_FRAME_BYTES_MAX as u32 + 1;
        let (result, _) = read_from(Duration::from_secs(5), &pool, move |mut stream| {
            use std::io::{Read, Write};
            stream.write_all(&header(announced)).expect("write");
            let _ = stream.read(&mut [0; 1]);
        });
        assert!(matches!(result, Err(ReadError::TooLarge(_))), "{result:?}");
    }

    #[test]
    fn unfinished_frames_share_a_bound_and_give_it_back() {
        // Most of the bound is taken by other connections.
        let pool = AtomicU64::new(BUFFERED_BYTES_MAX - 100_000);
        let (result, _) = read_from(Duration::from_secs(5), &pool, |mut stream| {
            use std::io::{Read, Write};
            stream.write_all(&header(1 << 20)).expect("write");
            let _ = stream.write_all(&vec![0; 1 << 20]);
            let _ = stream.read(&mut [0; 1]);
        });
        assert!(matches!(result, Err(ReadError::NoRoom(_))), "{result:?}");
        assert_eq!(pool.load(Relaxed), BUFFERED_BYTES_MAX - 100_000);
        // With room, the same frame is read (its bad checksum is refused
        // once it is whole), and its charge is given back.
        let pool = AtomicU64::new(0);
        let (result, _) = read_from(Duration::from_secs(5), &pool, |mut stream| {
            use std::io::{Read, Write};
            stream.write_all(&header(1 << 20)).expect("write");
            let _ = stream.write_all(&vec![0; 1 << 20]);
            let _ = stream.read(&mut [0; 1]);
        });
        assert!(
            matches!(
                result,
                Err(ReadError::Codec(CodecError::ChecksumMismatch { .. }))
            ),
            "{result:?}"
        );
        assert_eq!(pool.load(Relaxed), 0);
    }
}
