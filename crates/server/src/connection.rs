//! One client connection: read bytes, answer every complete frame in
//! order, write the answers back, repeat. Requests run to completion on
//! this event loop's thread; pipelined requests are answered in order.

use crate::budget::{ConnectionBudget, Input, NoRoom, READ_CHUNK_BYTES};
use crate::info;
use crate::latency::Timing;
use crate::node::Node;
use bolide_transaction::{Cluster, Outcome, Remote, Scratch, StreamJob, CHUNK_BYTES};
use bolide_wire::frame::{frame_length, MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_wire::response::{append_admin_not_enabled, append_info};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// Why a connection is closed by the server.
#[derive(Debug)]
pub enum Close {
    Peer,
    Io(std::io::Error),
    BadFrame(bolide_wire::ProtoError),
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
    Close(Close),
}

/// Serves one connection until the peer leaves or misbehaves.
pub async fn serve(node: Arc<Node>, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let local = stream
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], node.config.service_port)));
    let peer = stream.peer_addr().ok();
    let reason = run(&node, &mut stream, local).await;
    match &reason {
        Close::Peer => {}
        Close::BadFrame(error) => {
            node.bad_frames.fetch_add(1, Relaxed);
            tracing::debug!(?peer, %error, "closing connection: bad frame");
        }
        Close::Io(error) => tracing::debug!(?peer, %error, "closing connection: i/o error"),
        other => tracing::debug!(?peer, reason = ?other, "closing connection"),
    }
    node.connections_closed.fetch_add(1, Relaxed);
}

async fn run(node: &Arc<Node>, stream: &mut TcpStream, local: SocketAddr) -> Close {
    let mut input = Input::default();
    // Requests that need other nodes, with where their answers go.
    let mut pending: Vec<(usize, Remote)> = Vec::new();
    let mut output: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut scratch = Scratch::default();
    let mut budget = ConnectionBudget::new(&node.budget);
    let mut timing = Timing::new(&node.latencies);
    let idle = match node.config.proto_fd_idle_ms {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    };
    loop {
        let step = answer_buffered(
            node,
            &mut input,
            &mut output,
            &mut scratch,
            &mut budget,
            &mut timing,
            local,
            &mut pending,
        );
        // Each runs as a task of this event loop (all at once); the
        // answers are put in order below.
        let remote: Vec<(usize, tokio::task::JoinHandle<Vec<u8>>)> = pending
            .drain(..)
            .map(|(at, work)| {
                let answer = crate::cluster::remote::complete(Arc::clone(node), work);
                (at, tokio::task::spawn_local(answer))
            })
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
            output = ordered;
        }
        if !output.is_empty() {
            budget.charge_output(&output, output.capacity(), Some(stream.as_fd()));
            if let Err(error) = stream.write_all(&output).await {
                return Close::Io(error);
            }
            timing.written();
            output.clear();
            budget.settle_output(&mut output);
        }
        match step {
            Step::Read => {}
            Step::Flush => continue,
            Step::Stream(job, bytes) => {
                if let Err(no_room) = budget.reserve_job(bytes, Some(stream.as_fd())).await {
                    return Close::Budget(no_room);
                }
                let result = stream_job(stream, job).await;
                budget.release_job();
                if let Err(error) = result {
                    return Close::Io(error);
                }
                timing.stream_done();
                continue;
            }
            Step::Inflate(bytes) => {
                if let Err(no_room) = budget.reserve_inflation(bytes, Some(stream.as_fd())).await {
                    return Close::Budget(no_room);
                }
                continue;
            }
            Step::Close(close) => return close,
        }
        if let Err(no_room) = budget.make_room(&mut input, Some(stream.as_fd())).await {
            return Close::Budget(no_room);
        }
        let read = read_some(stream, input.buffer());
        let read = match idle {
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

/// Answers every complete frame in `input`, in order, into `output`, until
/// one needs the connection's attention (a stream job, room to inflate, a
/// full output, a bad frame). Consumes the frames it answered. A request
/// that needs other nodes first goes to `pending` with the place its
/// answer takes in `output`.
// PERF: hot path.
#[allow(clippy::too_many_arguments)]
pub fn answer_buffered(
    node: &Node,
    input: &mut Input,
    output: &mut Vec<u8>,
    scratch: &mut Scratch,
    budget: &mut ConnectionBudget<'_>,
    timing: &mut Timing<'_>,
    local: SocketAddr,
    pending: &mut Vec<(usize, Remote)>,
) -> Step {
    loop {
        if output.len() >= crate::budget::CONNECTION_FREE_BYTES {
            return Step::Flush;
        }
        let (header, total) = match frame_length(input.data()) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Step::Read,
            Err(error) => return Step::Close(Close::BadFrame(error)),
        };
        let body = input
            .data()
            .get(PROTO_HEADER_BYTES..total)
            .unwrap_or_default();
        match dispatch(node, header, body, local, output, scratch, budget, timing) {
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

/// What a stream job's buffers charge: its chunk, and the copy of its
/// request a batch keeps.
fn stream_job_bytes(frame_bytes: usize) -> u64 {
    (CHUNK_BYTES + READ_CHUNK_BYTES + frame_bytes) as u64
}

/// Reads whatever is available into `input`.
///
/// A read that returns less than the free space drained the socket, so the
/// readiness flag is cleared right away: the next call then waits for the
/// event loop instead of spending a `read` syscall to learn `EAGAIN`. With
/// request/response traffic that saves one syscall per request.
// PERF: hot path.
async fn read_some(stream: &TcpStream, input: &mut Vec<u8>) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        let space = input.capacity() - input.len();
        match stream.try_read_buf(input) {
            Ok(read) => {
                if read > 0 && read < space {
                    let _ = stream.try_io(Interest::READABLE, || {
                        Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                    });
                }
                return Ok(read);
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

/// Runs a stream job (scan, large batch) off the event loop. The job also
/// writes its chunks to the client through a duplicate of the socket in
/// blocking mode: the kernel's send work then runs on the job's thread (at
/// the job's priority) instead of on the event loop. The event loop does not
/// touch this connection until the job ends; a client that stops reading
/// for [`STREAM_WRITE_TIMEOUT`] or goes away ends the job with an error, and
/// the connection is closed.
///
/// Foreground jobs (large batches) run on the blocking pool. Background jobs
/// (scans) get a thread of their own in `SCHED_IDLE`, which ends with the
/// job: the scheduler runs it only when nothing else on that CPU wants to
/// run, so a scan takes the CPU time the event loops leave and never the
/// time they need. (A pool thread could not be handed back: an unprivileged
/// thread may not leave `SCHED_IDLE`.)
async fn stream_job(stream: &mut TcpStream, job: Box<dyn StreamJob>) -> std::io::Result<()> {
    let mut socket = std::net::TcpStream::from(stream.as_fd().try_clone_to_owned()?);
    socket.set_nonblocking(false)?;
    socket.set_write_timeout(Some(STREAM_WRITE_TIMEOUT))?;
    let background = job.is_background();
    let run = move || {
        if background {
            set_thread_idle();
        }
        let written = write_stream(job, &mut socket);
        // The duplicate shares the socket's flags: hand it back non-blocking.
        let restored = socket
            .set_write_timeout(None)
            .and_then(|()| socket.set_nonblocking(true));
        written.and(restored)
    };
    let failed = || std::io::Error::other("stream job failed");
    if !background {
        return tokio::task::spawn_blocking(run)
            .await
            .map_err(|_| failed())?;
    }
    // At most SCAN_THREADS_MAX scans run at once; more wait their turn here
    // (as they did for the blocking pool), so many scan connections cannot
    // make a thread and a chunk buffer each.
    let permit = SCAN_THREADS.acquire().await.map_err(|_| failed())?;
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("scan".into())
        .spawn(move || {
            let _permit = permit;
            // The connection may be gone; then nobody wants the result.
            let _ = done.send(run());
        })?;
    result.await.map_err(|_| failed())?
}

/// Fills and sends the job's chunks until it finishes or the client fails.
fn write_stream(
    mut job: Box<dyn StreamJob>,
    socket: &mut std::net::TcpStream,
) -> std::io::Result<()> {
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + READ_CHUNK_BYTES);
    loop {
        chunk.clear();
        let finished = job.fill(&mut chunk);
        socket.write_all(&chunk)?;
        if finished {
            return Ok(());
        }
    }
}

/// Scans running at once, per process (Aerospike's `query-threads-limit`
/// default); further scans wait for one to end.
pub const SCAN_THREADS_MAX: usize = 128;
static SCAN_THREADS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(SCAN_THREADS_MAX);

/// How long a stream job waits for a client that does not read.
const STREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Nice value of the defragmentation thread. Under CFS a nice-10 thread
/// gets about a tenth of a core that a nice-0 event loop also wants, and
/// all of an idle one. (Not `SCHED_IDLE` like scans: defragmentation must
/// keep up with overwrites on a saturated node, or writes stop.)
pub(crate) const BACKGROUND_NICE: i32 = 10;

/// Sets the calling thread's nice value (Linux: per thread). Best effort.
pub(crate) fn set_thread_nice(nice: i32) {
    #[expect(unsafe_code, reason = "libc calls on the current thread")]
    // SAFETY: gettid has no preconditions; setpriority only reads its
    // arguments and changes this thread's scheduling weight. Lowering
    // priority needs no privilege.
    unsafe {
        let thread = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, nice);
    }
}

/// Puts the calling thread in `SCHED_IDLE`. Best effort.
fn set_thread_idle() {
    #[expect(unsafe_code, reason = "libc call on the current thread")]
    // SAFETY: sched_setscheduler(0, ..) changes only the calling thread and
    // reads only `param`, which lives across the call.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        let _ = libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
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
    node: &Node,
    header: ProtoHeader,
    body: &[u8],
    local: SocketAddr,
    output: &mut Vec<u8>,
    scratch: &mut Scratch,
    budget: &mut ConnectionBudget<'_>,
    timing: &mut Timing<'_>,
) -> Result<Outcome, Dispatch> {
    match header.message_type {
        MessageType::Message => {
            timing.answered(body);
            let routing = node.cluster.routing.load();
            let cluster = Cluster {
                runner: Some(&node.runner),
                ..Cluster::new(&routing, &node.cluster.gates)
            };
            return Ok(bolide_transaction::execute(
                &node.store,
                &cluster,
                body,
                output,
                scratch,
            ));
        }
        MessageType::Info => {
            node.info_requests.fetch_add(1, Relaxed);
            let mut answer = Vec::new();
            info::answer(node, body, local, &mut answer);
            append_info(output, &answer);
        }
        MessageType::Admin => {
            node.admin_requests.fetch_add(1, Relaxed);
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
            let routing = node.cluster.routing.load();
            let cluster = Cluster {
                runner: Some(&node.runner),
                ..Cluster::new(&routing, &node.cluster.gates)
            };
            return Ok(bolide_transaction::execute(
                &node.store,
                &cluster,
                inner_body,
                output,
                scratch,
            ));
        }
    }
    Ok(Outcome::Answered)
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
