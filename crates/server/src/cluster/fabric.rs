//! Fabric connections between nodes.
//!
//! Outgoing: each thread that talks to other nodes (every event loop, the
//! fabric thread, the migrate thread) keeps its own connection ("lane") per
//! peer and channel, so a replica write leaves from the thread that ran
//! the write, with no hop to another thread. A lane multiplexes requests:
//! each carries an id its answer repeats, and the answer goes to the
//! [`Mailbox`] of the task that drives the data-path machine which sent it
//! (`bolide_cluster::datapath`), with the machine's call token.
//!
//! Incoming: a fabric connection starts with a HELLO, within
//! [`HELLO_TIMEOUT`], naming this cluster and a node that is a member of it
//! (of the committed cluster or of the partition map in force). Request
//! connections are served on the event loops like client connections; bulk
//! (migration) connections go to the migrate thread. Anything that is not a
//! valid frame from a node of this cluster closes the connection, counted
//! in `fabric_bad_frames` and logged (at most a line a second).

use super::records::Records;
use super::Context as Node;
use super::{bump, migrate, remote};
use crate::net::{Connection, WriteHalf};
use bolide_cluster::codec::{self, FRAME_HEADER_BYTES};
use bolide_cluster::datapath::{self, Reply, Token};
use bolide_cluster::fabric::{code, Channel, Fabric};
use bolide_cluster::NodeId;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Frames written in one go when several wait.
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// An answer as a lane hands it over.
pub enum ReplyFrame {
    /// An `Ack` (decoded at once: no copy of its frame).
    Ack(u8),
    Frame {
        kind: u8,
        body: Vec<u8>,
    },
    /// No answer will come: no route, or the connection failed or closed.
    Lost,
}

impl ReplyFrame {
    /// Hands the reply to `use_it` as the data-path machines take it.
    pub fn with_reply<R>(&self, use_it: impl FnOnce(Reply<'_>) -> R) -> R {
        match self {
            ReplyFrame::Ack(code) => use_it(Reply::Answer(&Fabric::Ack { id: 0, code: *code })),
            ReplyFrame::Frame { kind, body } => match Fabric::decode(*kind, body) {
                Ok(message) => use_it(Reply::Answer(&message)),
                Err(_) => use_it(Reply::Invalid),
            },
            ReplyFrame::Lost => use_it(Reply::Lost),
        }
    }
}

/// The replies to one task's calls, in the order they arrive. A task (one
/// thread's) owns it; lanes of that thread hold it for the calls in
/// flight.
#[derive(Default)]
pub struct Mailbox {
    replies: RefCell<VecDeque<(Token, ReplyFrame)>>,
    waker: RefCell<Option<Waker>>,
}

impl Mailbox {
    fn deliver(&self, token: Token, reply: ReplyFrame) {
        self.replies.borrow_mut().push_back((token, reply));
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// The next reply.
    pub async fn recv(&self) -> (Token, ReplyFrame) {
        std::future::poll_fn(|cx| match self.replies.borrow_mut().pop_front() {
            Some(reply) => Poll::Ready(reply),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Frames waiting to be written on one connection: whoever sends appends
/// whole frames to one buffer, and the connection's writer takes the
/// buffer whole (handing back its empty one) and writes it in one go. No
/// allocation or copy per frame, and every frame that piles up while a
/// write is under way leaves in the next one (acks under load, above all).
#[derive(Default)]
struct Outgoing {
    buffer: RefCell<Vec<u8>>,
    ready: Notify,
    closed: Cell<bool>,
}

impl Outgoing {
    /// Appends what `encode` writes (whole frames); false once the
    /// connection is closed.
    fn push(&self, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        if self.closed.get() {
            return false;
        }
        let mut buffer = self.buffer.borrow_mut();
        let was_empty = buffer.is_empty();
        encode(&mut buffer);
        if was_empty && !buffer.is_empty() {
            self.ready.notify_one();
        }
        true
    }

    fn close(&self) {
        self.closed.set(true);
        self.ready.notify_one();
    }

    /// Writes what is appended, in order, until it is closed (what was
    /// appended before goes out first) or a write fails (which closes it).
    async fn write_to(&self, writer: &mut WriteHalf) {
        let mut batch = Vec::with_capacity(WRITE_BATCH_BYTES);
        loop {
            if self.buffer.borrow().is_empty() {
                if self.closed.get() {
                    return;
                }
                self.ready.notified().await;
                continue;
            }
            std::mem::swap(&mut *self.buffer.borrow_mut(), &mut batch);
            // A TLS writer holds records until flushed.
            let failed = writer.write_all(&batch).await.is_err() || writer.flush().await.is_err();
            batch.clear();
            if batch.capacity() > WRITE_BATCH_BYTES {
                // A burst grew it: back to the usual size.
                batch = Vec::with_capacity(WRITE_BATCH_BYTES);
            }
            if failed {
                self.close();
                self.buffer.borrow_mut().clear();
                return;
            }
        }
    }
}

struct Lane {
    out: Outgoing,
    pending: RefCell<HashMap<u64, (Rc<Mailbox>, Token)>>,
    next_id: Cell<u64>,
    closed: Cell<bool>,
    key: (NodeId, u8),
}

impl Lane {
    fn close(&self) {
        self.closed.set(true);
        self.out.close();
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        for (_, (mailbox, token)) in pending {
            mailbox.deliver(token, ReplyFrame::Lost);
        }
        LANES.with(|lanes| {
            let mut lanes = lanes.borrow_mut();
            if lanes.get(&self.key).is_some_and(|lane| lane.closed.get()) {
                lanes.remove(&self.key);
            }
        });
    }

    /// An answer arrived: to the mailbox of the call it answers.
    fn answered(&self, kind: u8, body: &[u8]) {
        let Some(id) = body.first_chunk::<8>().map(|id| u64::from_le_bytes(*id)) else {
            return;
        };
        let Some((mailbox, token)) = self.pending.borrow_mut().remove(&id) else {
            return;
        };
        let reply = match Fabric::decode(kind, body) {
            Ok(Fabric::Ack { code, .. }) => ReplyFrame::Ack(code),
            _ => ReplyFrame::Frame {
                kind,
                body: body.to_vec(),
            },
        };
        mailbox.deliver(token, reply);
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

/// Sends one call of a data-path machine to `to`: `encode` writes the
/// frame with the wire id; the reply goes to `mailbox` with `token` (Lost
/// at once if there is no way to `to`). Must run inside a `LocalSet`.
// PERF: hot path (a replicated write's copies).
pub fn send(
    node: &Arc<Node>,
    to: NodeId,
    channel: Channel,
    mailbox: &Rc<Mailbox>,
    token: Token,
    encode: impl FnOnce(u64, &mut Vec<u8>),
) {
    let Some(lane) = lane(node, to, channel) else {
        mailbox.deliver(token, ReplyFrame::Lost);
        return;
    };
    let id = lane.next_id.get();
    lane.next_id.set(id.wrapping_add(1));
    lane.pending
        .borrow_mut()
        .insert(id, (Rc::clone(mailbox), token));
    if !lane.out.push(|out| encode(id, out)) {
        lane.close();
    }
}

fn lane(node: &Arc<Node>, to: NodeId, channel: Channel) -> Option<Rc<Lane>> {
    let key = (to, channel_byte(channel));
    if let Some(lane) = LANES.with(|lanes| lanes.borrow().get(&key).cloned()) {
        if !lane.closed.get() {
            return Some(lane);
        }
    }
    let endpoint = node.cluster.fabric_endpoint(to)?;
    let lane = Rc::new(Lane {
        out: Outgoing::default(),
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
    ));
    Some(lane)
}

async fn run_lane(node: Arc<Node>, lane: Rc<Lane>, address: String, channel: Channel) {
    let local = node.cluster.fabric_bind.ip();
    let tls = node.cluster.fabric_tls.get().map(|tls| &tls.client);
    // A handshake adds round trips (and signatures) to the connect.
    let limit = if tls.is_some() {
        CONNECT_TIMEOUT * 3
    } else {
        CONNECT_TIMEOUT
    };
    let stream = match tokio::time::timeout(limit, Connection::connect(local, &address, tls)).await
    {
        Ok(Ok(stream)) => stream,
        failed => {
            if let (Some(_), Ok(Err(error))) = (tls, &failed) {
                if super::is_handshake_error(error) {
                    super::handshake_failed(
                        &node.cluster.counters.fabric_tls_handshake_failures,
                        "fabric",
                        false,
                        &address,
                        error,
                    );
                }
            }
            lane.close();
            return;
        }
    };
    bump(&node.cluster.counters.fabric_connections_opened);
    let (mut reader, mut writer) = stream.into_split();
    let mut hello = Vec::new();
    Fabric::Hello {
        node: node.cluster.node_id,
        cluster_name: &node.cluster.cluster_name,
        channel,
    }
    .encode(&mut hello);
    // Flushed: a TLS session may hold what it was given.
    if writer.write_all(&hello).await.is_err() || writer.flush().await.is_err() {
        lane.close();
        return;
    }
    let answers = Rc::clone(&lane);
    let reading = tokio::task::spawn_local(async move {
        let mut buffer = Vec::with_capacity(64 * 1024);
        loop {
            let answered = each_frame(&mut buffer, |header, body| {
                answers.answered(header.kind, body);
                Ok(())
            });
            if answered.is_err() {
                answers.close();
                return;
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
    lane.out.write_to(&mut writer).await;
    lane.close();
    reading.abort();
    bump(&node.cluster.counters.fabric_connections_closed);
}

async fn read_more(
    reader: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    // Into the spare capacity: no zeroing of 64 KiB per read.
    if buffer.capacity() - buffer.len() < READ_SPARE_BYTES {
        buffer.reserve(READ_BYTES);
    }
    reader.read_buf(buffer).await
}

/// Bytes a fabric read asks for, and the spare room below which the
/// buffer grows before a read.
const READ_BYTES: usize = 64 * 1024;
const READ_SPARE_BYTES: usize = 16 * 1024;

/// Answers every complete frame at the start of `buffer` with `each`,
/// then drops them from it in one move; Err once a frame is invalid or
/// `each` fails.
fn each_frame(
    buffer: &mut Vec<u8>,
    mut each: impl FnMut(codec::FrameHeader, &[u8]) -> Result<(), ()>,
) -> Result<(), ()> {
    let mut done = 0;
    let result = loop {
        match codec::split_frame(buffer.get(done..).unwrap_or_default()) {
            Ok(Some((header, body, total))) => {
                if each(header, body).is_err() {
                    break Err(());
                }
                done += total;
            }
            Ok(None) => break Ok(()),
            Err(_) => break Err(()),
        }
    };
    buffer.drain(..done);
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
pub async fn serve(node: Arc<Node>, stream: TcpStream) {
    bump(&node.cluster.counters.fabric_connections_opened);
    let address = stream.peer_addr().ok();
    // With TLS, a peer without a certificate from the cluster's CA is
    // refused here, before its HELLO is read.
    let tls = node.cluster.fabric_tls.get().map(|tls| &tls.server);
    let mut stream = match Connection::accept(stream, tls).await {
        Ok(stream) => stream,
        Err(error) => {
            let peer = address.map_or_else(|| "?".to_owned(), |address| address.to_string());
            super::handshake_failed(
                &node.cluster.counters.fabric_tls_handshake_failures,
                "fabric",
                true,
                &peer,
                &error,
            );
            bump(&node.cluster.counters.fabric_connections_closed);
            return;
        }
    };
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
            if let Ok(stream) = stream.hand_off() {
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
    stream: &mut Connection,
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
    stream: Connection,
    mut buffer: Vec<u8>,
) -> Result<(), ()> {
    let (mut reader, mut writer) = stream.into_split();
    let answers = Rc::new(Outgoing::default());
    let writing = Rc::clone(&answers);
    tokio::task::spawn_local(async move { writing.write_to(&mut writer).await });
    // The writer ends once the connection does.
    struct CloseOnDrop(Rc<Outgoing>);
    impl Drop for CloseOnDrop {
        fn drop(&mut self) {
            self.0.close();
        }
    }
    let _close = CloseOnDrop(Rc::clone(&answers));
    loop {
        each_frame(&mut buffer, |header, body| {
            let request = Fabric::decode(header.kind, body).map_err(|_| ())?;
            handle_request(node, request, &answers)
        })?;
        match read_more(&mut reader, &mut buffer).await {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
}

fn send_ack(answers: &Outgoing, id: u64, code: u8) {
    answers.push(|out| Fabric::Ack { id, code }.encode(out));
}

fn handle_request(node: &Arc<Node>, request: Fabric<'_>, answers: &Rc<Outgoing>) -> Result<(), ()> {
    let counters = &node.cluster.counters;
    match request {
        Fabric::ReplicaWrite {
            id,
            namespace,
            cluster_key,
            image,
            ..
        } => {
            let routing = node.cluster.routing.load();
            let ack = datapath::apply_replica_write(
                &Records(&node.store),
                &routing,
                namespace,
                cluster_key,
                &image,
                &mut |counter, n| counters.count(counter, n),
            );
            match ack.wait {
                None => send_ack(answers, id, ack.code),
                Some(wait) => {
                    let answers = Rc::clone(answers);
                    tokio::task::spawn_local(async move {
                        let code = if wait.wait().await.is_ok() {
                            ack.code
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
            let answers = Rc::clone(answers);
            let body = body.to_vec();
            tokio::task::spawn_local(async move {
                let (redirect, answer) =
                    remote::serve_proxy(&node, body, framing, timeout_ms).await;
                answers.push(|out| {
                    Fabric::ProxyAnswer {
                        id,
                        redirect,
                        answer: &answer,
                    }
                    .encode(out)
                });
            });
        }
        Fabric::Fetch {
            id,
            namespace,
            digest,
            cluster_key,
        } => {
            let routing = node.cluster.routing.load();
            let store = Records(&node.store);
            let answer = datapath::serve_fetch(&store, &routing, namespace, &digest, cluster_key);
            answers.push(|out| match answer {
                Ok(copy) => Fabric::FetchAnswer {
                    id,
                    image: copy.as_ref().map(|copy| copy.image()),
                }
                .encode(out),
                Err(_) => Fabric::Ack {
                    id,
                    code: bolide_cluster::fabric::code::CLUSTER_KEY_MISMATCH,
                }
                .encode(out),
            });
        }
        _ => return Err(()),
    }
    Ok(())
}
