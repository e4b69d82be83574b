//! Fabric connections between nodes.
//!
//! Outgoing: each thread that talks to other nodes (every event loop, the
//! fabric thread, the migrate thread) keeps its own connection ("lane") per
//! peer and channel, so a replica write leaves from the thread that ran
//! the write, with no hop to another thread. A lane multiplexes requests:
//! each carries an id its answer repeats.
//!
//! Incoming: a fabric connection starts with a HELLO, within
//! [`HELLO_TIMEOUT`], naming this cluster and a node that is a member of it
//! (of the committed cluster or of the partition map in force). Request
//! connections are served on the event loops like client connections; bulk
//! (migration) connections go to the migrate thread. Anything that is not a
//! valid frame from a node of this cluster closes the connection, counted
//! in `fabric_bad_frames` and logged (at most a line a second).

use super::{bump, migrate, remote};
use crate::node::Node;
use bolide_cluster::codec::{self, CodecError, FRAME_HEADER_BYTES};
use bolide_cluster::conflict::{self, Stamp};
use bolide_cluster::fabric::{code, Channel, Fabric, Image};
use bolide_cluster::routing::ConflictPolicy;
use bolide_cluster::NodeId;
use bolide_store::{CommitWait, Copy};
use bolide_types::Digest;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Frames written in one go when several wait.
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// An answer frame, undecoded.
pub struct Answer {
    pub kind: u8,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn decode(&self) -> Result<Fabric<'_>, CodecError> {
        Fabric::decode(self.kind, &self.body)
    }

    /// The code of an Ack answer; FAILED for anything else.
    pub fn ack_code(&self) -> u8 {
        match self.decode() {
            Ok(Fabric::Ack { code, .. }) => code,
            _ => code::FAILED,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricError {
    /// No address is known for the node.
    NoRoute,
    /// The connection failed or closed before the answer came.
    Closed,
    Timeout,
}

struct Lane {
    frames: mpsc::UnboundedSender<Vec<u8>>,
    pending: RefCell<HashMap<u64, oneshot::Sender<Answer>>>,
    next_id: Cell<u64>,
    closed: Cell<bool>,
    key: (NodeId, u8),
}

impl Lane {
    fn close(&self) {
        self.closed.set(true);
        self.pending.borrow_mut().clear();
        LANES.with(|lanes| {
            let mut lanes = lanes.borrow_mut();
            if lanes.get(&self.key).is_some_and(|lane| lane.closed.get()) {
                lanes.remove(&self.key);
            }
        });
    }
}

thread_local! {
    static LANES: RefCell<HashMap<(NodeId, u8), Rc<Lane>>> = RefCell::new(HashMap::new());
}

fn channel_byte(channel: Channel) -> u8 {
    match channel {
        Channel::Requests => 1,
        Channel::Bulk => 2,
    }
}

/// Sends one request to `to` and waits for its answer (until `deadline`).
/// Must run inside a `LocalSet`.
pub async fn call(
    node: &Arc<Node>,
    to: NodeId,
    channel: Channel,
    deadline: Instant,
    encode: impl FnOnce(u64, &mut Vec<u8>),
) -> Result<Answer, FabricError> {
    let lane = lane(node, to, channel)?;
    let id = lane.next_id.get();
    lane.next_id.set(id.wrapping_add(1));
    let (sender, receiver) = oneshot::channel();
    lane.pending.borrow_mut().insert(id, sender);
    let mut frame = Vec::new();
    encode(id, &mut frame);
    if lane.frames.send(frame).is_err() {
        lane.close();
        return Err(FabricError::Closed);
    }
    match tokio::time::timeout_at(deadline.into(), receiver).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(_)) => Err(FabricError::Closed),
        Err(_) => {
            lane.pending.borrow_mut().remove(&id);
            Err(FabricError::Timeout)
        }
    }
}

fn lane(node: &Arc<Node>, to: NodeId, channel: Channel) -> Result<Rc<Lane>, FabricError> {
    let key = (to, channel_byte(channel));
    if let Some(lane) = LANES.with(|lanes| lanes.borrow().get(&key).cloned()) {
        if !lane.closed.get() {
            return Ok(lane);
        }
    }
    let endpoint = node
        .cluster
        .fabric_endpoint(to)
        .ok_or(FabricError::NoRoute)?;
    let (frames, receiver) = mpsc::unbounded_channel();
    let lane = Rc::new(Lane {
        frames,
        pending: RefCell::new(HashMap::new()),
        next_id: Cell::new(1),
        closed: Cell::new(false),
        key,
    });
    LANES.with(|lanes| lanes.borrow_mut().insert(key, Rc::clone(&lane)));
    tokio::task::spawn_local(run_lane(
        Arc::clone(node),
        Rc::clone(&lane),
        endpoint.to_string(),
        channel,
        receiver,
    ));
    Ok(lane)
}

async fn run_lane(
    node: Arc<Node>,
    lane: Rc<Lane>,
    address: String,
    channel: Channel,
    mut frames: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let local = node.cluster.fabric_bind.ip();
    let stream =
        match tokio::time::timeout(CONNECT_TIMEOUT, super::connect_from(local, &address)).await {
            Ok(Ok(stream)) => stream,
            _ => {
                lane.close();
                return;
            }
        };
    let _ = stream.set_nodelay(true);
    bump(&node.cluster.counters.fabric_connections_opened);
    let (mut reader, mut writer) = stream.into_split();
    let mut hello = Vec::new();
    Fabric::Hello {
        node: node.cluster.node_id,
        cluster_name: &node.cluster.cluster_name,
        channel,
    }
    .encode(&mut hello);
    if writer.write_all(&hello).await.is_err() {
        lane.close();
        return;
    }
    let answers = Rc::clone(&lane);
    let reading = tokio::task::spawn_local(async move {
        let mut buffer = Vec::with_capacity(64 * 1024);
        loop {
            loop {
                match codec::split_frame(&buffer) {
                    Ok(Some((header, body, total))) => {
                        let id = body.first_chunk::<8>().map(|id| u64::from_le_bytes(*id));
                        let answer = Answer {
                            kind: header.kind,
                            body: body.to_vec(),
                        };
                        if let Some(sender) =
                            id.and_then(|id| answers.pending.borrow_mut().remove(&id))
                        {
                            let _ = sender.send(answer);
                        }
                        buffer.drain(..total);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        answers.close();
                        return;
                    }
                }
            }
            match read_more(&mut reader, &mut buffer).await {
                Ok(0) | Err(_) => {
                    answers.close();
                    return;
                }
                Ok(_) => {}
            }
        }
    });
    let mut batch = Vec::with_capacity(WRITE_BATCH_BYTES);
    while let Some(frame) = frames.recv().await {
        batch.clear();
        batch.extend_from_slice(&frame);
        while batch.len() < WRITE_BATCH_BYTES {
            match frames.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if writer.write_all(&batch).await.is_err() || lane.closed.get() {
            break;
        }
    }
    lane.close();
    reading.abort();
    bump(&node.cluster.counters.fabric_connections_closed);
}

async fn read_more(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    let start = buffer.len();
    buffer.resize(start + 64 * 1024, 0);
    let result = reader.read(&mut buffer[start..]).await;
    let read = *result.as_ref().unwrap_or(&0);
    buffer.truncate(start + read);
    result
}

/// Warnings about dropped fabric connections: at most one a second.
static DROPS_LOGGED: super::LogLimiter = super::LogLimiter::new();

/// Counts and logs a fabric connection dropped for what it sent.
fn dropped(node: &Node, address: Option<std::net::SocketAddr>, reason: &str) {
    bump(&node.cluster.counters.fabric_bad_frames);
    if let Some(held) = DROPS_LOGGED.allow() {
        tracing::warn!(
            target: "cluster",
            peer = ?address,
            "fabric connection dropped: {reason} (and {held} more not logged since the last line)"
        );
    }
}

/// Serves an accepted fabric connection: reads its HELLO, then serves
/// requests here or hands a bulk connection to the migrate thread.
pub async fn serve(node: Arc<Node>, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    bump(&node.cluster.counters.fabric_connections_opened);
    let address = stream.peer_addr().ok();
    let mut buffer = Vec::with_capacity(4096);
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut stream, &mut buffer)).await;
    let refused = match &hello {
        Ok(Ok((peer, _, name))) => {
            if *name != node.cluster.cluster_name {
                // Escaped and cut: the name is the sender's to choose.
                let name: String = name.escape_debug().take(80).collect();
                Some(format!("HELLO from node {peer:X} of cluster '{name}'"))
            } else if !node.cluster.is_member(*peer) {
                Some(format!("HELLO from node {peer:X}, not a member"))
            } else {
                None
            }
        }
        Ok(Err(HelloError::Closed)) => {
            bump(&node.cluster.counters.fabric_connections_closed);
            return;
        }
        Ok(Err(HelloError::Bad(reason))) => Some(reason.clone()),
        Err(_) => Some(format!("no HELLO within {} s", HELLO_TIMEOUT.as_secs())),
    };
    let (peer, channel) = match (hello, refused) {
        (Ok(Ok((peer, channel, _))), None) => (peer, channel),
        (_, reason) => {
            dropped(&node, address, reason.as_deref().unwrap_or("bad HELLO"));
            bump(&node.cluster.counters.fabric_connections_closed);
            return;
        }
    };
    match channel {
        Channel::Requests => {
            if serve_requests(&node, stream, buffer).await.is_err() {
                dropped(&node, address, "bad request frame");
            }
        }
        Channel::Bulk => {
            if let Ok(stream) = stream.into_std() {
                let _ = node.cluster.migrations.send(migrate::Command::Bulk {
                    stream,
                    leftover: buffer,
                    peer,
                });
                return;
            }
        }
    }
    bump(&node.cluster.counters.fabric_connections_closed);
}

/// Why no HELLO came.
enum HelloError {
    /// Closed before sending anything.
    Closed,
    Bad(String),
}

/// Largest HELLO frame body.
const HELLO_BODY_BYTES_MAX: usize = 4096;

/// Reads the HELLO: (node, channel, cluster name).
async fn read_hello(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<(NodeId, Channel, String), HelloError> {
    let bad = |what: &str| HelloError::Bad(what.to_owned());
    loop {
        if let Some(head) = buffer.first_chunk::<FRAME_HEADER_BYTES>() {
            let header =
                codec::read_header(head).map_err(|error| bad(&format!("bad frame: {error}")))?;
            if header.body_bytes > HELLO_BODY_BYTES_MAX {
                return Err(bad(&format!(
                    "HELLO of {} bytes is too large",
                    header.body_bytes
                )));
            }
        }
        let split =
            codec::split_frame(buffer).map_err(|error| bad(&format!("bad frame: {error}")))?;
        if let Some((header, body, total)) = split {
            let hello = match Fabric::decode(header.kind, body) {
                Ok(Fabric::Hello {
                    node,
                    cluster_name,
                    channel,
                }) => (node, channel, cluster_name.to_owned()),
                Ok(_) => return Err(bad("first frame is not a HELLO")),
                Err(error) => return Err(bad(&format!("bad HELLO: {error}"))),
            };
            buffer.drain(..total);
            return Ok(hello);
        }
        let start = buffer.len();
        buffer.resize(start + 4096, 0);
        use tokio::io::AsyncReadExt;
        let read = stream.read(&mut buffer[start..]).await;
        buffer.truncate(start + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) | Err(_) if start == 0 => return Err(HelloError::Closed),
            Ok(0) => return Err(bad("closed in the middle of the HELLO")),
            Err(error) => return Err(bad(&format!("{error} in the middle of the HELLO"))),
            Ok(_) => {}
        }
    }
}

/// Requests from another node on one connection, answered in any order.
async fn serve_requests(
    node: &Arc<Node>,
    stream: TcpStream,
    mut buffer: Vec<u8>,
) -> Result<(), ()> {
    let (mut reader, writer) = stream.into_split();
    let (answers, receiver) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::task::spawn_local(write_answers(writer, receiver));
    loop {
        while let Some((header, body, total)) = codec::split_frame(&buffer).map_err(|_| ())? {
            let request = Fabric::decode(header.kind, body).map_err(|_| ())?;
            handle_request(node, request, &answers)?;
            buffer.drain(..total);
        }
        match read_more(&mut reader, &mut buffer).await {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
}

async fn write_answers(mut writer: OwnedWriteHalf, mut answers: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut batch = Vec::with_capacity(WRITE_BATCH_BYTES);
    while let Some(answer) = answers.recv().await {
        batch.clear();
        batch.extend_from_slice(&answer);
        while batch.len() < WRITE_BATCH_BYTES {
            match answers.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if writer.write_all(&batch).await.is_err() {
            return;
        }
    }
}

fn send_ack(answers: &mpsc::UnboundedSender<Vec<u8>>, id: u64, code: u8) {
    let mut frame = Vec::with_capacity(32);
    Fabric::Ack { id, code }.encode(&mut frame);
    let _ = answers.send(frame);
}

fn handle_request(
    node: &Arc<Node>,
    request: Fabric<'_>,
    answers: &mpsc::UnboundedSender<Vec<u8>>,
) -> Result<(), ()> {
    match request {
        Fabric::ReplicaWrite {
            id,
            namespace,
            cluster_key,
            regime: _,
            image,
        } => {
            bump(&node.cluster.counters.replica_writes_received);
            let (code, wait) = apply_replica_write(node, namespace, cluster_key, &image);
            match wait {
                None => send_ack(answers, id, code),
                Some(wait) => {
                    let answers = answers.clone();
                    tokio::task::spawn_local(async move {
                        let code = if wait.wait().await.is_ok() {
                            code
                        } else {
                            code::FAILED
                        };
                        send_ack(&answers, id, code);
                    });
                }
            }
        }
        Fabric::Proxy {
            id,
            timeout_ms,
            framing,
            body,
        } => {
            let node = Arc::clone(node);
            let answers = answers.clone();
            let body = body.to_vec();
            tokio::task::spawn_local(async move {
                let (redirect, answer) =
                    remote::serve_proxy(&node, body, framing, timeout_ms).await;
                let redirect = redirect.filter(|&to| to != node.cluster.node_id);
                let mut frame = Vec::with_capacity(answer.len() + 48);
                Fabric::ProxyAnswer {
                    id,
                    redirect,
                    answer: &answer,
                }
                .encode(&mut frame);
                let _ = answers.send(frame);
            });
        }
        Fabric::Fetch {
            id,
            namespace,
            digest,
        } => {
            let mut frame = Vec::new();
            let copy = fetch_copy(node, namespace, &Digest(digest));
            let image = copy.as_ref().map(|copy| image_of(&copy.as_copy()));
            Fabric::FetchAnswer { id, image }.encode(&mut frame);
            let _ = answers.send(frame);
        }
        _ => return Err(()),
    }
    Ok(())
}

/// Applies a replica write if this node is in the map the master used.
/// Replica writes are ordered by last-update time (then generation), as
/// Aerospike orders them, so a late or repeated one changes nothing.
fn apply_replica_write(
    node: &Node,
    namespace: &str,
    cluster_key: u64,
    image: &Image<'_>,
) -> (u8, Option<CommitWait>) {
    let routing = node.cluster.routing.load();
    if !routing.settled() || routing.cluster_key != cluster_key {
        bump(&node.cluster.counters.replica_writes_refused);
        return (code::CLUSTER_KEY_MISMATCH, None);
    }
    let Some((_, ns)) = node.store.namespace_index(namespace.as_bytes()) else {
        return (code::FAILED, None);
    };
    let copy = copy_of(image);
    let mut writer = ns.write(&copy.digest);
    match writer.apply_copy(&copy, |held, incoming| {
        wins(ConflictPolicy::LastUpdateTime, held, incoming)
    }) {
        Ok((_, wait)) => (code::OK, wait),
        Err(error) => {
            tracing::warn!(?error, "replica write refused by storage");
            (code::FAILED, None)
        }
    }
}

/// Whether an incoming copy beats the held one under `policy`.
pub fn wins(policy: ConflictPolicy, held: Option<(u16, u64)>, incoming: (u16, u64)) -> bool {
    let stamp = |(generation, last_update_ms): (u16, u64)| Stamp {
        generation,
        last_update_ms,
    };
    conflict::incoming_wins(policy, held.map(stamp), stamp(incoming))
}

/// This node's copy of a record (or its tombstone), for duplicate
/// resolution.
pub fn fetch_copy(
    node: &Node,
    namespace: &str,
    digest: &Digest,
) -> Option<bolide_store::OwnedCopy> {
    let (_, ns) = node.store.namespace_index(namespace.as_bytes())?;
    let table = ns.read(digest);
    if let Some(entry) = table.get(digest) {
        let mut buf = Vec::new();
        let record = ns.record_bytes(&entry, &mut buf).ok()?.to_vec();
        return Some(bolide_store::OwnedCopy {
            digest: *digest,
            generation: entry.meta.generation,
            last_update_ms: entry.meta.last_update_ms,
            void_time: entry.meta.void_time,
            set_name: ns
                .set_name(entry.meta.set_id)
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
            record: Some(record),
        });
    }
    table.tombstone(digest).map(|t| bolide_store::OwnedCopy {
        digest: *digest,
        generation: t.generation,
        last_update_ms: t.last_update_ms,
        void_time: 0,
        set_name: ns
            .set_name(t.set_id)
            .unwrap_or_default()
            .as_bytes()
            .to_vec(),
        record: None,
    })
}

pub fn image_of<'a>(copy: &Copy<'a>) -> Image<'a> {
    Image {
        digest: copy.digest.0,
        generation: copy.generation,
        last_update_ms: copy.last_update_ms,
        void_time: copy.void_time,
        set_name: copy.set_name,
        record: copy.record,
    }
}

pub fn copy_of<'a>(image: &Image<'a>) -> Copy<'a> {
    Copy {
        digest: Digest(image.digest),
        generation: image.generation,
        last_update_ms: image.last_update_ms,
        void_time: image.void_time,
        set_name: image.set_name,
        record: image.record,
    }
}
