//! The cluster thread: heartbeat connections (a listener for what other
//! nodes send, a dialer per peer for what this node sends) and the cluster
//! state machine they feed. Every 10 ms the machine ticks; every message,
//! data-path report and metadata change goes in; its actions come out as
//! sends, routing snapshots, migrations and log lines.
//!
//! A peer that sends anything that is not a valid frame is disconnected;
//! nothing it sent is trusted.

use super::{migrate, monotonic_ms, wall_ms, Event};
use crate::node::Node;
use bolide_cluster::codec::{self, CodecError, FRAME_HEADER_BYTES};
use bolide_cluster::message::Endpoint;
use bolide_cluster::node::{Action, ClusterNode, Config, Entropy, Level};
use bolide_cluster::{Envelope, Version};
use bolide_types::PARTITION_COUNT;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Largest heartbeat frame (an exchange commit of a large cluster).
const HEARTBEAT_FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;
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
pub fn start(node: Arc<Node>, listener: Option<std::net::TcpListener>) -> Result<(), String> {
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

/// The versions of this node's copies as storage left them: a partition
/// with records is a lineage of its own (merged into the cluster's copies,
/// never trusted over them); one without is nothing.
fn initial_versions(node: &Node, entropy: &mut OsEntropy) -> Vec<Vec<Version>> {
    let restart_key = loop {
        let key = entropy.next_u64() & bolide_cluster::version::KEY_MASK;
        if key != 0 {
            break key;
        }
    };
    node.store
        .namespaces()
        .iter()
        .map(|namespace| {
            (0..PARTITION_COUNT)
                .map(|pid| {
                    let (records, tombstones) = namespace.partition_counts(pid);
                    if records + tombstones > 0 {
                        Version::full(restart_key)
                    } else {
                        Version::NULL
                    }
                })
                .collect()
        })
        .collect()
}

async fn run(
    node: Arc<Node>,
    listener: Option<std::net::TcpListener>,
    mut events: mpsc::UnboundedReceiver<Event>,
) {
    let service = &node.cluster;
    let mut entropy = entropy();
    let versions = initial_versions(&node, &mut entropy);
    let config = Config {
        node: service.node_id,
        cluster_name: service.cluster_name.clone(),
        boot_id: entropy.next_u64(),
        heartbeat: service.heartbeat.clone(),
        fabric: service.fabric.clone(),
        service: service.service.clone(),
        seeds: service.seeds.clone(),
        heartbeat_interval_ms: node.config.heartbeat_interval_ms,
        heartbeat_timeout: node.config.heartbeat_timeout,
        fabric_latency_max_ms: 5,
        min_cluster_size: node.config.min_cluster_size,
        namespaces: super::namespace_configs(&node.config),
    };
    let mut machine = ClusterNode::new(
        config,
        versions,
        Vec::new(),
        Box::new(entropy),
        monotonic_ms(),
    );
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
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                machine.tick(monotonic_ms(), wall_ms());
            }
            Some(envelope) = inbound_receiver.recv() => {
                machine.receive(envelope, monotonic_ms());
            }
            Some(event) = events.recv() => match event {
                Event::Data(event) => machine.data_event(event, monotonic_ms()),
                Event::Metadata { module, key, value, deleted } => {
                    machine.set_metadata(&module, &key, &value, deleted, wall_ms());
                }
                Event::Recluster => {}
            },
        }
        // The routing goes out first: the migrations of a new map check
        // that their map is the one in force.
        let mut actions = machine.take_actions();
        let published = actions
            .iter()
            .any(|action| matches!(action, Action::Publish(_)));
        actions.sort_by_key(|action| !matches!(action, Action::Publish(_)));
        for action in actions {
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

fn act(node: &Arc<Node>, dialers: &mut Dialers, action: Action) {
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
        Action::Metadata(item) => {
            crate::cluster::remote::apply_metadata(node, &item);
            if let Ok(mut items) = service.metadata.lock() {
                items.retain(|held| (&held.module, &held.key) != (&item.module, &item.key));
                items.push(item);
            }
        }
        Action::Log(Level::Info, line) => tracing::info!(target: "cluster", "{line}"),
        Action::Log(Level::Warn, line) => tracing::warn!(target: "cluster", "{line}"),
    }
}

fn encode(envelope: &Envelope) -> Arc<Vec<u8>> {
    let mut frame = Vec::new();
    envelope.encode(&mut frame);
    Arc::new(frame)
}

/// Accepts heartbeat connections; each gets a reader.
async fn accept(node: Arc<Node>, listener: TcpListener, inbound: mpsc::UnboundedSender<Envelope>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                super::bump(&node.cluster.counters.heartbeat_connections_opened);
                let _ = stream.set_nodelay(true);
                let node = Arc::clone(&node);
                let inbound = inbound.clone();
                tokio::task::spawn_local(async move {
                    if let Err(error) = read_envelopes(stream, &inbound).await {
                        if !matches!(error, ReadError::Closed) {
                            super::bump(&node.cluster.counters.heartbeat_bad_frames);
                            tracing::warn!(target: "cluster", %peer, %error, "heartbeat connection dropped");
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
    Closed,
    Io(std::io::Error),
    Codec(CodecError),
    TooLarge(usize),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => write!(f, "closed"),
            ReadError::Io(error) => write!(f, "{error}"),
            ReadError::Codec(error) => write!(f, "bad frame: {error}"),
            ReadError::TooLarge(bytes) => write!(f, "frame of {bytes} bytes is too large"),
        }
    }
}

/// Reads frames until the peer leaves or sends something invalid.
async fn read_envelopes(
    mut stream: TcpStream,
    inbound: &mpsc::UnboundedSender<Envelope>,
) -> Result<(), ReadError> {
    let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        while let Some((header, body, total)) =
            codec::split_frame(&buffer).map_err(ReadError::Codec)?
        {
            let envelope = Envelope::decode(header.kind, body).map_err(ReadError::Codec)?;
            let _ = inbound.send(envelope);
            buffer.drain(..total);
        }
        if let Some(head) = buffer.first_chunk::<FRAME_HEADER_BYTES>() {
            let header = codec::read_header(head).map_err(ReadError::Codec)?;
            if header.body_bytes > HEARTBEAT_FRAME_BYTES_MAX {
                return Err(ReadError::TooLarge(header.body_bytes));
            }
        }
        let read = read_more(&mut stream, &mut buffer)
            .await
            .map_err(ReadError::Io)?;
        if read == 0 {
            return Err(ReadError::Closed);
        }
    }
}

pub(crate) async fn read_more(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let start = buffer.len();
    buffer.resize(start + 64 * 1024, 0);
    let result = stream.read(&mut buffer[start..]).await;
    let read = *result.as_ref().unwrap_or(&0);
    buffer.truncate(start + read);
    result
}

/// One outgoing heartbeat connection per endpoint.
#[derive(Default)]
struct Dialers {
    queues: HashMap<Endpoint, mpsc::Sender<Arc<Vec<u8>>>>,
}

impl Dialers {
    fn ensure(&mut self, node: &Arc<Node>, endpoint: &Endpoint) {
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
async fn dial(node: Arc<Node>, endpoint: Endpoint, mut frames: mpsc::Receiver<Arc<Vec<u8>>>) {
    let address = endpoint.to_string();
    loop {
        let local = node.cluster.heartbeat_bind.ip();
        let connected =
            tokio::time::timeout(CONNECT_TIMEOUT, super::connect_from(local, &address)).await;
        let mut stream = match connected {
            Ok(Ok(stream)) => stream,
            _ => {
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
        let _ = stream.set_nodelay(true);
        super::bump(&node.cluster.counters.heartbeat_connections_opened);
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
pub fn bind(node: &Node) -> Result<std::net::TcpListener, String> {
    let address = node.cluster.heartbeat_bind;
    crate::bind(address).map_err(|error| format!("heartbeat: {error}"))
}
