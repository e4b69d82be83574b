//! One client connection: read bytes, answer every complete frame in
//! order, write the answers back, repeat. Requests run to completion on
//! this event loop's thread; pipelined requests are answered in order.
//! Every byte goes through the connection's [`Connection`] (plain or TLS),
//! the answers of stream jobs (scans, large batches) included: the job
//! fills chunks on another thread and hands them back to this task.
//!
//! A connection gets a [`Context`], the parts of the node it uses, and
//! keeps its own buffers and accounts in a [`Session`].

use crate::access::Secured;
use crate::budget::{Budget, ConnectionBudget, Input, NoRoom, READ_CHUNK_BYTES};
use crate::counters::NodeCounters;
use crate::info::Info;
use crate::latency::{Latencies, Timing};
use crate::net::{tls::ServerTls, Connection};
use arc_swap::ArcSwap;
use bolide_cluster::routing::Gates;
use bolide_cluster::Routing;
use bolide_store::Store;
use bolide_transaction::{
    Caller, Cluster, Outcome, Remote, RemoteRunner, Scratch, StreamJob, CHUNK_BYTES,
};
use bolide_wire::frame::{frame_length, MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_wire::response::{append_admin_not_enabled, append_info};
use std::future::Future;
use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// What a client connection needs of the node.
pub struct Context {
    pub store: Arc<Store>,
    /// The routing in force (the cluster thread publishes new ones).
    pub routing: Arc<ArcSwap<Routing>>,
    pub gates: Arc<Gates>,
    /// Carries out batch rows' remote work from blocking threads.
    pub runner: Arc<dyn RemoteRunner>,
    /// Carries out single requests' remote work on this event loop.
    pub remote: Arc<dyn RemoteWork>,
    pub info: Arc<Info>,
    pub budget: Arc<Budget>,
    pub latencies: Arc<Latencies>,
    pub counters: Arc<NodeCounters>,
    /// Access control, on a secured node: every connection logs in first.
    pub secured: Option<Arc<Secured>>,
    /// A connection that sends nothing for this long is closed.
    pub idle: Option<Duration>,
}

/// The fabric, as a connection sees it: the work a request needs on other
/// nodes goes in, the request's answer comes out. (The cluster implements
/// it; a connection knows nothing of nodes or lanes.)
pub trait RemoteWork: Send + Sync {
    /// The answer to `remote`'s request once its work is done, framed as
    /// the request asked. Runs as a task of the calling event loop.
    fn complete(&self, remote: Remote) -> Pin<Box<dyn Future<Output = Vec<u8>>>>;
}

/// Why a connection is closed by the server.
#[derive(Debug)]
pub enum Close {
    Peer,
    Io(std::io::Error),
    BadFrame(bolide_wire::ProtoError),
    /// A TLS ClientHello on a plain port (a client configured for TLS
    /// reached the wrong port).
    TlsOnPlainPort,
    BadCompressed,
    Idle,
    /// Storage failed before the answers' writes were durable: no answer
    /// may claim success.
    StorageFailed,
    /// The buffer budget: closed to make room, or a request larger than
    /// the whole budget.
    Budget(NoRoom),
}

/// What answering the buffered frames left to do.
pub enum Step {
    /// Every complete frame is answered: read more.
    Read,
    /// The output reached its flush size: write it, then answer the rest.
    Flush,
    /// This frame's answer is a stream job; the answers before it go out
    /// first. The number is what its buffers charge to the budget.
    Stream(Box<dyn StreamJob>, u64),
    /// A compressed frame needs this many bytes of the budget to inflate.
    Inflate(u64),
    /// An admin message (its body) that hashes a password: answered off
    /// the event loop, after the answers before it.
    Admin(Vec<u8>),
    Close(Close),
}

/// One connection's buffers and accounts, reused across its requests.
pub struct Session<'c> {
    /// Received bytes not yet answered.
    pub input: Input,
    /// Answers not yet written.
    pub output: Vec<u8>,
    pub scratch: Scratch,
    pub budget: ConnectionBudget<'c>,
    pub timing: Timing<'c>,
    /// Requests that need other nodes, with where their answers go in
    /// `output`.
    pub pending: Vec<(usize, Remote)>,
    /// The address the client connected to (`service` answers it).
    pub local: SocketAddr,
    /// Who is asking: every request is checked against it.
    pub caller: Caller,
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// On a secured node: the user this connection logged in as.
    pub login: Option<Arc<bolide_security::Session>>,
    /// The user the client's TLS certificate names (its common name), for
    /// PKI login: None on a plain connection or without a certificate.
    pub certificate_user: Option<Arc<str>>,
}

impl<'c> Session<'c> {
    pub fn new(context: &'c Context, local: SocketAddr, caller: Caller) -> Session<'c> {
        Session {
            input: Input::default(),
            output: Vec::with_capacity(READ_CHUNK_BYTES),
            scratch: Scratch::default(),
            budget: ConnectionBudget::new(&context.budget),
            timing: Timing::new(&context.latencies),
            pending: Vec::new(),
            local,
            caller,
            peer: None,
            login: None,
            certificate_user: None,
        }
    }
}

/// Serves one accepted socket until the peer leaves or misbehaves; with
/// `tls`, after the handshake.
pub async fn serve(context: Arc<Context>, stream: tokio::net::TcpStream, tls: Option<ServerTls>) {
    let peer = stream.peer_addr().ok();
    let mut connection = match Connection::accept(stream, tls.as_ref()).await {
        Ok(connection) => connection,
        Err(error) => {
            context
                .counters
                .tls_handshake_failures
                .fetch_add(1, Relaxed);
            context.counters.connections_closed.fetch_add(1, Relaxed);
            tracing::debug!(?peer, %error, "closing connection: TLS handshake failed");
            return;
        }
    };
    let local = connection
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let caller = match &context.secured {
        Some(secured) => secured.caller(peer, None),
        None => Caller::client(peer),
    };
    let tls = connection.is_tls();
    if tls {
        context
            .counters
            .tls_connections_opened
            .fetch_add(1, Relaxed);
    }
    let certificate_user = connection
        .peer_certificate()
        .and_then(crate::net::tls::certificate_user)
        .map(Arc::from);
    let reason = run(
        &context,
        &mut connection,
        Endpoints { local, peer },
        caller,
        certificate_user,
    )
    .await;
    if tls {
        context
            .counters
            .tls_connections_closed
            .fetch_add(1, Relaxed);
    }
    match &reason {
        Close::Peer => {}
        Close::BadFrame(error) => {
            context.counters.bad_frames.fetch_add(1, Relaxed);
            tracing::debug!(?peer, %error, "closing connection: bad frame");
        }
        Close::TlsOnPlainPort => {
            context.counters.bad_frames.fetch_add(1, Relaxed);
            tracing::info!(
                ?peer,
                "ignoring TLS connection: a TLS ClientHello on a plain port"
            );
        }
        Close::Io(error) => tracing::debug!(?peer, %error, "closing connection: i/o error"),
        other => tracing::debug!(?peer, reason = ?other, "closing connection"),
    }
    context.counters.connections_closed.fetch_add(1, Relaxed);
}

/// A connection's two addresses.
struct Endpoints {
    local: SocketAddr,
    peer: Option<SocketAddr>,
}

async fn run(
    context: &Context,
    connection: &mut Connection,
    endpoints: Endpoints,
    caller: Caller,
    certificate_user: Option<Arc<str>>,
) -> Close {
    let mut session = Session::new(context, endpoints.local, caller);
    session.peer = endpoints.peer;
    session.certificate_user = certificate_user;
    loop {
        let step = answer_buffered(context, &mut session);
        let Session {
            input,
            output,
            scratch,
            budget,
            timing,
            pending,
            caller,
            peer,
            login,
            certificate_user,
            ..
        } = &mut session;
        // Each runs as a task of this event loop (all at once); the
        // answers are put in order below.
        let remote: Vec<(usize, tokio::task::JoinHandle<Vec<u8>>)> = pending
            .drain(..)
            .map(|(at, work)| (at, tokio::task::spawn_local(context.remote.complete(work))))
            .collect();
        // commit-to-device: the answers wait until their writes are
        // durable; every connection waiting shares one flush (group commit).
        for wait in scratch.take_commit_waits() {
            if wait.wait().await.is_err() {
                return Close::StorageFailed;
            }
        }
        if !remote.is_empty() {
            // Pipelined requests are answered in order: each remote answer
            // goes where its request's answer belongs.
            let mut ordered = Vec::with_capacity(output.len() + remote.len() * 64);
            let mut copied = 0;
            for (at, answer) in remote {
                ordered.extend_from_slice(&output[copied..at]);
                copied = at;
                match answer.await {
                    Ok(answer) => ordered.extend_from_slice(&answer),
                    Err(_) => return Close::Io(std::io::Error::other("remote work failed")),
                }
            }
            ordered.extend_from_slice(&output[copied..]);
            *output = ordered;
        }
        if !output.is_empty() {
            budget.charge_output(output, output.capacity(), Some(connection.as_fd()));
            if let Err(error) = connection.write_all(output).await {
                return Close::Io(error);
            }
            timing.written();
            output.clear();
            budget.settle_output(output);
        }
        match step {
            Step::Read => {}
            Step::Flush => continue,
            Step::Stream(job, bytes) => {
                if let Err(no_room) = budget.reserve_job(bytes, Some(connection.as_fd())).await {
                    return Close::Budget(no_room);
                }
                let result = stream_job(connection, job).await;
                budget.release_job();
                if let Err(error) = result {
                    return Close::Io(error);
                }
                timing.stream_done();
                continue;
            }
            Step::Inflate(bytes) => {
                if let Err(no_room) = budget
                    .reserve_inflation(bytes, Some(connection.as_fd()))
                    .await
                {
                    return Close::Budget(no_room);
                }
                continue;
            }
            Step::Admin(body) => {
                let Some(secured) = &context.secured else {
                    continue;
                };
                let who = Who {
                    peer: *peer,
                    certificate_user: certificate_user.clone(),
                };
                let answer = admin_off_loop(secured, login, caller, who, body).await;
                if let Err(error) = connection.write_all(&answer).await {
                    return Close::Io(error);
                }
                continue;
            }
            Step::Close(close) => return close,
        }
        if let Err(no_room) = budget.make_room(input, Some(connection.as_fd())).await {
            return Close::Budget(no_room);
        }
        let read = connection.read_some(input.buffer());
        let read = match context.idle {
            Some(limit) => match tokio::time::timeout(limit, read).await {
                Ok(result) => result,
                Err(_) => return Close::Idle,
            },
            None => read.await,
        };
        match read {
            Ok(0) => return Close::Peer,
            Ok(_) => timing.arrived(),
            Err(error) => return Close::Io(error),
        }
    }
}

/// Answers every complete frame in the session's input, in order, into its
/// output, until one needs the connection's attention (a stream job, room
/// to inflate, a full output, a bad frame). Consumes the frames it
/// answered. A request that needs other nodes first goes to `pending`
/// with the place its answer takes in the output.
// PERF: hot path.
pub fn answer_buffered(context: &Context, session: &mut Session<'_>) -> Step {
    loop {
        if session.output.len() >= crate::budget::CONNECTION_FREE_BYTES {
            return Step::Flush;
        }
        let (header, total) = match frame_length(session.input.data()) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Step::Read,
            Err(_) if is_tls_client_hello(session.input.data()) => {
                return Step::Close(Close::TlsOnPlainPort)
            }
            Err(error) => return Step::Close(Close::BadFrame(error)),
        };
        let Session {
            input,
            output,
            scratch,
            budget,
            timing,
            pending,
            local,
            caller,
            peer,
            login,
            certificate_user,
        } = &mut *session;
        let body = input
            .data()
            .get(PROTO_HEADER_BYTES..total)
            .unwrap_or_default();
        if let (MessageType::Admin, Some(secured)) = (header.message_type, &context.secured) {
            context.counters.admin_requests.fetch_add(1, Relaxed);
            if Secured::is_quick(body) {
                let before = login.clone();
                secured.admin(
                    login,
                    client_address(*peer),
                    certificate_user.as_deref(),
                    body,
                    output,
                );
                if !same_login(&before, login) {
                    *caller = secured.caller(*peer, login.as_ref());
                }
                input.consume(total);
                continue;
            }
            let body = body.to_vec();
            input.consume(total);
            return Step::Admin(body);
        }
        let at = Place {
            local: *local,
            caller,
            login: login.as_ref(),
        };
        match dispatch(context, header, body, &at, output, scratch, budget, timing) {
            Ok(Outcome::Answered) => input.consume(total),
            Ok(Outcome::Remote(work)) => {
                input.consume(total);
                pending.push((output.len(), work));
            }
            Ok(Outcome::Stream(job)) => {
                // Answers before it go out first; frames after it wait.
                input.consume(total);
                timing.stream_started();
                return Step::Stream(job, stream_job_bytes(total));
            }
            Err(Dispatch::Inflate(bytes)) => return Step::Inflate(bytes),
            Err(Dispatch::Close(close)) => return Step::Close(close),
        }
    }
}

/// Chunk buffers a stream job has: one being filled by the job while the
/// connection writes the other.
const STREAM_BUFFERS: usize = 2;
/// A chunk buffer's capacity: a chunk and the record that crosses its end.
const STREAM_BUFFER_BYTES: usize = CHUNK_BYTES + READ_CHUNK_BYTES;

/// What a stream job's buffers charge: its chunk buffers, and the copy of
/// its request a batch keeps.
fn stream_job_bytes(frame_bytes: usize) -> u64 {
    (STREAM_BUFFERS * STREAM_BUFFER_BYTES + frame_bytes) as u64
}

/// Runs a stream job (scan, query, large batch): the job fills chunks of
/// whole frames on another thread and hands each to this task through a
/// bounded channel; this task writes it through the connection and hands
/// the buffer back. With [`STREAM_BUFFERS`] buffers the job fills one
/// while the other is written, and memory stays at those buffers whatever
/// the result's size. A slow client slows the job (it waits for a buffer);
/// a client that stops reading for [`STREAM_WRITE_TIMEOUT`], or leaves,
/// ends the write with an error, the channels close, and the job stops at
/// its next chunk. The event loop serves its other connections meanwhile.
///
/// Foreground jobs (large batches, secondary-index queries) fill on the
/// blocking pool. Scans fill on a thread of their own in `SCHED_IDLE`,
/// which ends with the job: the scheduler runs it only when nothing else
/// on that CPU wants to run, so a scan takes the CPU time the event loops
/// leave and never the time they need. (A pool thread could not be handed
/// back: an unprivileged thread may not leave `SCHED_IDLE`.)
async fn stream_job(connection: &mut Connection, job: Box<dyn StreamJob>) -> std::io::Result<()> {
    let failed = || std::io::Error::other("stream job failed");
    let (filled_sender, mut filled) = tokio::sync::mpsc::channel(STREAM_BUFFERS);
    let (empty, empty_receiver) = std::sync::mpsc::sync_channel(STREAM_BUFFERS);
    for _ in 0..STREAM_BUFFERS {
        let _ = empty.try_send(Vec::with_capacity(STREAM_BUFFER_BYTES));
    }
    let (done_sender, done) = tokio::sync::oneshot::channel();
    let background = job.is_background();
    let fill = move || {
        if background {
            crate::system::set_thread_idle();
        }
        let finished = fill_chunks(job, &filled_sender, &empty_receiver);
        let _ = done_sender.send(finished);
    };
    if background {
        // At most SCAN_THREADS_MAX scans run at once; more wait their turn
        // here, so many scan connections cannot make a thread and chunk
        // buffers each.
        let permit = SCAN_THREADS.acquire().await.map_err(|_| failed())?;
        std::thread::Builder::new()
            .name("scan".into())
            .spawn(move || {
                let _permit = permit;
                fill();
            })?;
    } else {
        // Detached: the job reports through `done`.
        drop(tokio::task::spawn_blocking(fill));
    }
    let written = write_chunks(connection, &mut filled, &empty).await;
    // Whatever happened, the job ends now: with its channels closed it
    // stops at its next chunk. Its buffers are gone once it reports.
    drop(filled);
    drop(empty);
    let finished = done.await.unwrap_or(false);
    written?;
    if finished {
        Ok(())
    } else {
        Err(failed())
    }
}

/// Writes the chunks a job fills, in order, and hands the buffers back.
async fn write_chunks(
    connection: &mut Connection,
    filled: &mut tokio::sync::mpsc::Receiver<Vec<u8>>,
    empty: &std::sync::mpsc::SyncSender<Vec<u8>>,
) -> std::io::Result<()> {
    while let Some(mut chunk) = filled.recv().await {
        if !chunk.is_empty() {
            connection
                .write_all_within(&chunk, STREAM_WRITE_TIMEOUT)
                .await?;
        }
        chunk.clear();
        if chunk.capacity() > STREAM_BUFFER_BYTES {
            // A record larger than a chunk grew it: back to the charged size.
            chunk = Vec::with_capacity(STREAM_BUFFER_BYTES);
        }
        let _ = empty.try_send(chunk);
    }
    Ok(())
}

/// Fills chunks until the job finishes (true) or the connection stops
/// taking them (false). Runs on the job's thread.
fn fill_chunks(
    mut job: Box<dyn StreamJob>,
    filled: &tokio::sync::mpsc::Sender<Vec<u8>>,
    empty: &std::sync::mpsc::Receiver<Vec<u8>>,
) -> bool {
    loop {
        let Ok(mut chunk) = empty.recv() else {
            return false;
        };
        chunk.clear();
        let finished = job.fill(&mut chunk);
        if filled.blocking_send(chunk).is_err() {
            return false;
        }
        if finished {
            return true;
        }
    }
}

/// Scans running at once, per process (Aerospike's `query-threads-limit`
/// default); further scans wait for one to end.
pub const SCAN_THREADS_MAX: usize = 128;
static SCAN_THREADS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(SCAN_THREADS_MAX);

/// How long a stream job waits for a client that accepts no byte.
const STREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a frame came from: the connection's address, its caller and (on
/// a secured node) its login.
struct Place<'s> {
    local: SocketAddr,
    caller: &'s Caller,
    login: Option<&'s Arc<bolide_security::Session>>,
}

/// The address the security checks see for a client without one.
fn client_address(peer: Option<SocketAddr>) -> SocketAddr {
    peer.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}

fn same_login(
    a: &Option<Arc<bolide_security::Session>>,
    b: &Option<Arc<bolide_security::Session>>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Who sent an admin message: the client's address and the user its TLS
/// certificate names.
struct Who {
    peer: Option<SocketAddr>,
    certificate_user: Option<Arc<str>>,
}

/// Answers an admin message that hashes a password (LOGIN, a password
/// AUTHENTICATE, the commands that set passwords) on the blocking pool,
/// so the event loop serves its other connections meanwhile (PBKDF2 takes
/// milliseconds). Updates the connection's login and caller; returns the
/// reply.
async fn admin_off_loop(
    secured: &Arc<Secured>,
    login: &mut Option<Arc<bolide_security::Session>>,
    caller: &mut Caller,
    who: Who,
    body: Vec<u8>,
) -> Vec<u8> {
    let before = login.clone();
    let peer = who.peer;
    let work = {
        let secured = Arc::clone(secured);
        let mut after = before.clone();
        move || {
            let mut out = Vec::new();
            secured.admin(
                &mut after,
                client_address(who.peer),
                who.certificate_user.as_deref(),
                &body,
                &mut out,
            );
            (after, out)
        }
    };
    match tokio::task::spawn_blocking(work).await {
        Ok((after, out)) => {
            if !same_login(&before, &after) {
                *caller = secured.caller(peer, after.as_ref());
                *login = after;
            }
            out
        }
        Err(_) => {
            let mut out = Vec::new();
            bolide_wire::admin::append_result(&mut out, bolide_types::ResultCode::Unknown);
            out
        }
    }
}

/// Why a frame was not answered.
enum Dispatch {
    /// Inflating it needs this many bytes of the budget first.
    Inflate(u64),
    Close(Close),
}

/// Answers one frame into `output`.
// PERF: hot path.
#[expect(
    clippy::too_many_arguments,
    reason = "the connection's parts, borrowed separately on the hot path"
)]
fn dispatch(
    context: &Context,
    header: ProtoHeader,
    body: &[u8],
    at: &Place<'_>,
    output: &mut Vec<u8>,
    scratch: &mut Scratch,
    budget: &mut ConnectionBudget<'_>,
    timing: &mut Timing<'_>,
) -> Result<Outcome, Dispatch> {
    if let Some(secured) = &context.secured {
        if !matches!(header.message_type, MessageType::Admin) && at.login.is_none() {
            return Ok(not_authenticated(context, secured, header, output));
        }
        if matches!(header.message_type, MessageType::Info) && !secured.is_current(at.login) {
            return Ok(not_authenticated(context, secured, header, output));
        }
    }
    match header.message_type {
        MessageType::Message => {
            timing.answered(body);
            let routing = context.routing.load();
            let cluster = Cluster {
                runner: Some(&context.runner),
                ..Cluster::new(&routing, &context.gates)
            };
            return Ok(bolide_transaction::execute(
                &context.store,
                &cluster,
                at.caller,
                body,
                output,
                scratch,
            ));
        }
        MessageType::Info => {
            context.counters.info_requests.fetch_add(1, Relaxed);
            let mut answer = Vec::new();
            context.info.answer(body, at.local, at.caller, &mut answer);
            append_info(output, &answer);
        }
        MessageType::Admin => {
            context.counters.admin_requests.fetch_add(1, Relaxed);
            append_admin_not_enabled(output);
        }
        MessageType::Compressed => {
            // Held while the message is inflated and executed.
            let _inflation = budget.inflation(body).map_err(Dispatch::Inflate)?;
            let bad = || Dispatch::Close(Close::BadCompressed);
            let inner = inflate(body).ok_or_else(bad)?;
            let (inner_header, total) = frame_length(&inner)
                .map_err(|error| Dispatch::Close(Close::BadFrame(error)))?
                .ok_or_else(bad)?;
            if inner_header.message_type != MessageType::Message || total != inner.len() {
                return Err(bad());
            }
            let inner_body = inner.get(PROTO_HEADER_BYTES..).unwrap_or_default();
            timing.answered(inner_body);
            let routing = context.routing.load();
            let cluster = Cluster {
                runner: Some(&context.runner),
                ..Cluster::new(&routing, &context.gates)
            };
            return Ok(bolide_transaction::execute(
                &context.store,
                &cluster,
                at.caller,
                inner_body,
                output,
                scratch,
            ));
        }
    }
    Ok(Outcome::Answered)
}

/// The answer to a request on a connection that has not logged in (or
/// whose user is gone): info answers the one line Aerospike answers, a
/// data request result 80.
fn not_authenticated(
    context: &Context,
    secured: &Secured,
    header: ProtoHeader,
    output: &mut Vec<u8>,
) -> Outcome {
    secured
        .security
        .counters
        .not_authenticated
        .fetch_add(1, Relaxed);
    if matches!(header.message_type, MessageType::Info) {
        context.counters.info_requests.fetch_add(1, Relaxed);
        append_info(output, b"ERROR:80:not authenticated\n");
    } else {
        bolide_wire::response::append_result(
            output,
            bolide_types::ResultCode::NotAuthenticated.as_u8(),
        );
    }
    Outcome::Answered
}

/// Inflates a type-4 body: u64 BE uncompressed length, then a zlib stream.
/// The declared and actual lengths must agree and stay within the limit.
fn inflate(body: &[u8]) -> Option<Vec<u8>> {
    let (length, stream) = body.split_first_chunk::<8>()?;
    let length = u64::from_be_bytes(*length);
    if length > bolide_types::PROTO_BODY_BYTES_MAX + PROTO_HEADER_BYTES as u64 {
        return None;
    }
    let mut inflated = Vec::with_capacity(length.min(1 << 20) as usize);
    let mut decoder = flate2::read::ZlibDecoder::new(stream).take(length + 1);
    decoder.read_to_end(&mut inflated).ok()?;
    (inflated.len() as u64 == length).then_some(inflated)
}

/// A TLS record holding a ClientHello: content type 22 (handshake), major
/// version 3, handshake type 1 (as Aerospike recognises one on a clear
/// port).
pub(crate) fn is_tls_client_hello(bytes: &[u8]) -> bool {
    matches!(bytes, [22, 3, _, _, _, 1, ..])
}
