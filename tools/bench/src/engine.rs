//! Runs a workload: one task per connection, each pipelining `depth`
//! requests per round trip, paced to the target rate, and a reporter thread
//! that prints one line per second and gathers the totals.
//!
//! With a target rate each connection owns a schedule of intended start
//! times; latency is measured from the intended start, so when the server
//! stalls the queue that builds up is counted (no coordinated omission).

use crate::aerospike::AerospikeCodec;
use crate::codec::{Codec, Reply, Request, ValueSource};
use crate::config::{Config, Limit, Protocol};
use crate::redis::{self, RedisCodec, Resp};
use crate::stats::{self, IntervalSummary, Outcome, Stats};
use crate::tls::Stream;
use crate::workload::{Generator, InsertCursor, OpKind, Operation};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Outcome code recorded when the connection broke under a request.
pub const CONNECTION_ERROR_CODE: i32 = -2;
/// Pause between reconnection attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// Consecutive failed reconnections (at `RECONNECT_PAUSE`) before giving up.
const RECONNECT_ATTEMPTS_MAX: u32 = 50;
/// Stats shards per runtime thread: connections on one thread share them.
const SHARDS_PER_THREAD: usize = 4;
/// Receive buffer growth step.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// What a finished run hands back.
pub struct RunReport {
    /// The first error message a server sent, if any (Redis error replies).
    pub first_error_text: Option<String>,
    pub stats: Stats,
    pub elapsed_seconds: f64,
    pub timeline: Vec<IntervalSummary>,
}

/// State shared by the connections and the reporter.
struct Shared {
    stop: AtomicBool,
    operations_left: Option<AtomicU64>,
    inserts: Arc<InsertCursor>,
    shards: Vec<Mutex<Stats>>,
    fatal: Mutex<Option<String>>,
    /// The first error text a server sent (Redis error replies), for the report.
    first_error_text: Mutex<Option<String>>,
    /// `--cluster`: who masters each partition.
    map: Option<crate::cluster::SharedMap>,
}

impl Shared {
    fn shard(&self, worker: usize) -> MutexGuard<'_, Stats> {
        let shard = &self.shards[worker % self.shards.len()];
        shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims up to `want` operations from the run's budget; 0 = done.
    fn claim(&self, want: usize) -> usize {
        if self.stop.load(Ordering::Relaxed) {
            return 0;
        }
        let Some(left) = &self.operations_left else {
            return want;
        };
        let mut granted = 0;
        let _ = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            granted = left.min(want as u64) as usize;
            Some(left - granted as u64)
        });
        granted
    }

    fn fail(&self, message: String) {
        let mut fatal = self
            .fatal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        fatal.get_or_insert(message);
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Checks the server answers as expected, then runs the workload. The error
/// is one line for the user.
pub fn run(
    config: &Config,
    mut progress: Box<dyn std::io::Write + Send>,
) -> Result<RunReport, String> {
    let runtime = if config.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .enable_all()
            .build()
    }
    .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(probe(config))?;
    let map = if config.cluster {
        Some(crate::cluster::start(
            address(config),
            config.namespace.clone(),
        )?)
    } else {
        None
    };

    let shard_count = config.concurrency.min(config.threads * SHARDS_PER_THREAD);
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        operations_left: match config.limit {
            Limit::Operations(count) => Some(AtomicU64::new(count)),
            _ => None,
        },
        inserts: Arc::new(InsertCursor::default()),
        shards: (0..shard_count)
            .map(|_| Mutex::new(Stats::default()))
            .collect(),
        fatal: Mutex::new(None),
        first_error_text: Mutex::new(None),
        map,
    });
    let start = Instant::now();
    let (done_sender, done_receiver) = mpsc::channel::<()>();
    let reporter = {
        let shared = shared.clone();
        let config = config.clone();
        std::thread::spawn(move || report(&config, &shared, start, &done_receiver, &mut progress))
    };
    runtime.block_on(async {
        let stopper = shared.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stopper.stop.store(true, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..config.concurrency)
            .map(|id| tokio::spawn(worker(id, config.clone(), shared.clone(), start)))
            .collect();
        for handle in workers {
            if let Err(error) = handle.await {
                shared.fail(format!("a connection task failed: {error}"));
            }
        }
    });
    let _ = done_sender.send(());
    let report = reporter
        .join()
        .map_err(|_| "the reporter thread panicked".to_string())?;
    let fatal = shared
        .fatal
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    match fatal {
        Some(message) => Err(message),
        None => Ok(report),
    }
}

fn address(config: &Config) -> String {
    format!("{}:{}", config.host, config.port)
}

async fn connect(config: &Config) -> Result<Stream, String> {
    connect_to(config, &address(config)).await
}

async fn connect_to(config: &Config, address: &str) -> Result<Stream, String> {
    let address = address.to_owned();
    let timeout = config.timeout.max(Duration::from_secs(1));
    let connecting = TcpStream::connect(address.as_str());
    let stream = tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| format!("cannot connect to {address}: timed out"))?
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("cannot set TCP_NODELAY on {address}: {e}"))?;
    let mut stream = match &config.tls {
        None => Stream::Plain(stream),
        Some(tls) => tokio::time::timeout(timeout, tls.connect(stream))
            .await
            .map_err(|_| format!("{address}: TLS handshake timed out"))?
            .map_err(|e| format!("{address}: TLS handshake failed: {e}"))?,
    };
    if let (Protocol::Aerospike, Some(credentials)) = (config.protocol, &config.credentials) {
        crate::login::login(&mut stream, credentials)
            .await
            .map_err(|e| format!("{address}: {e}"))?;
    }
    Ok(stream)
}

fn new_codec(config: &Config, seed: u64) -> Box<dyn Codec> {
    let values = ValueSource::new(config.bins.clone(), seed);
    match config.protocol {
        Protocol::Aerospike => {
            let timeout = u32::try_from(config.timeout.as_millis()).unwrap_or(u32::MAX);
            Box::new(AerospikeCodec::new(
                &config.namespace,
                &config.set,
                values,
                timeout,
            ))
        }
        Protocol::Redis => Box::new(RedisCodec::new(&config.set, values)),
    }
}

/// One request and its reply before the run, so that an unreachable server,
/// a wrong protocol, an unknown namespace or missing scans each end the
/// run with one clear line.
async fn probe(config: &Config) -> Result<(), String> {
    let stream = connect(config).await?;
    let mut connection = Connection::new(stream);
    let address = address(config);
    let deadline = tokio::time::Instant::now() + config.timeout.max(Duration::from_secs(2));
    match config.protocol {
        Protocol::Aerospike => {
            let mut codec = new_codec(config, config.seed);
            let mut requests = vec![Request::Read];
            if config.workload.mix.scan_percent > 0 {
                requests.push(Request::Scan { length: 1 });
            }
            for request in requests {
                let mut out = Vec::new();
                codec.encode(request, config.key_start, &mut out);
                let reply = connection
                    .exchange(&out, codec.as_mut(), request, deadline)
                    .await
                    .map_err(|e| e.describe(&address, "Aerospike"))?;
                check_probe_reply(config, &address, request, reply)?;
            }
        }
        Protocol::Redis => {
            let mut out = Vec::new();
            redis::encode_command(&mut out, &[b"PING"]);
            let mut ping = PingCodec::default();
            connection
                .exchange(&out, &mut ping, Request::Read, deadline)
                .await
                .map_err(|e| e.describe(&address, "Redis"))?;
            if let Some(answer) = ping.unexpected {
                return Err(format!("redis at {address} answered PING with '{answer}'"));
            }
        }
    }
    Ok(())
}

fn check_probe_reply(
    config: &Config,
    address: &str,
    request: Request,
    reply: Reply,
) -> Result<(), String> {
    match (request, reply.outcome) {
        (_, Outcome::Error { code: 20 }) => Err(format!(
            "namespace '{}' not found on {address} (Aerospike result code 20)",
            config.namespace
        )),
        (Request::Scan { .. }, Outcome::Error { code: 16 }) => Err(format!(
            "server at {address} does not support scans (result code 16 UNSUPPORTED_FEATURE); \
             workload {} needs them",
            config.workload_text
        )),
        (Request::Scan { .. }, Outcome::Error { code }) => Err(format!(
            "scan on {address} failed with Aerospike result code {code}"
        )),
        _ => Ok(()),
    }
}

/// Decodes one RESP reply for the PING probe and remembers anything but PONG.
#[derive(Default)]
struct PingCodec {
    unexpected: Option<String>,
}

impl Codec for PingCodec {
    fn encode(&mut self, _: Request, _: u64, _: &mut Vec<u8>) {}

    fn decode(&mut self, _: Request, input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some((value, used)) = redis::parse(input, 0)? else {
            return Ok(None);
        };
        match value {
            Resp::Simple(b"PONG") => {}
            Resp::Simple(text) | Resp::Error(text) => {
                self.unexpected = Some(String::from_utf8_lossy(text).into_owned());
            }
            other => self.unexpected = Some(format!("{other:?}")),
        }
        Ok(Some((Reply::of(Outcome::Ok), used)))
    }
}

/// Why a round trip did not complete.
enum TripError {
    Timeout,
    Io(std::io::Error),
    Closed,
    Protocol(String),
}

impl TripError {
    fn describe(&self, address: &str, server: &str) -> String {
        match self {
            TripError::Timeout => {
                format!("{address} did not answer in time (is it a {server} server?)")
            }
            TripError::Io(error) => format!("connection to {address} failed: {error}"),
            TripError::Closed => {
                format!("{address} closed the connection (is it a {server} server?)")
            }
            TripError::Protocol(error) => {
                format!("{address} did not answer as a {server} server: {error}")
            }
        }
    }

    fn outcome(&self) -> Outcome {
        match self {
            TripError::Timeout => Outcome::Timeout,
            _ => Outcome::Error {
                code: CONNECTION_ERROR_CODE,
            },
        }
    }
}

/// A connection and the bytes received but not yet decoded.
struct Connection {
    stream: Stream,
    received: Vec<u8>,
    decoded: usize,
}

impl Connection {
    fn new(stream: Stream) -> Connection {
        Connection {
            stream,
            received: Vec::with_capacity(READ_CHUNK_BYTES),
            decoded: 0,
        }
    }

    async fn send(
        &mut self,
        bytes: &[u8],
        deadline: tokio::time::Instant,
    ) -> Result<(), TripError> {
        match tokio::time::timeout_at(deadline, self.stream.write_all(bytes)).await {
            Err(_) => Err(TripError::Timeout),
            Ok(Err(error)) => Err(TripError::Io(error)),
            Ok(Ok(())) => Ok(()),
        }
    }

    // PERF: hot path
    async fn receive(
        &mut self,
        codec: &mut dyn Codec,
        request: Request,
        deadline: tokio::time::Instant,
    ) -> Result<Reply, TripError> {
        loop {
            let pending = &self.received[self.decoded..];
            if let Some((reply, used)) = codec
                .decode(request, pending)
                .map_err(TripError::Protocol)?
            {
                self.decoded += used;
                if self.decoded == self.received.len() {
                    self.received.clear();
                    self.decoded = 0;
                }
                return Ok(reply);
            }
            if self.decoded > 0 {
                self.received.drain(..self.decoded);
                self.decoded = 0;
            }
            self.received.reserve(READ_CHUNK_BYTES);
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.received)).await
            {
                Err(_) => return Err(TripError::Timeout),
                Ok(Err(error)) => return Err(TripError::Io(error)),
                Ok(Ok(0)) => return Err(TripError::Closed),
                Ok(Ok(_)) => {}
            }
        }
    }

    async fn exchange(
        &mut self,
        bytes: &[u8],
        codec: &mut dyn Codec,
        request: Request,
        deadline: tokio::time::Instant,
    ) -> Result<Reply, TripError> {
        self.send(bytes, deadline).await?;
        self.receive(codec, request, deadline).await
    }
}

/// Most requests one operation makes.
const STEPS_MAX: usize = 2;

/// The requests an operation makes, in order (read-modify-write makes two).
fn steps(operation: &Operation) -> &'static [Request] {
    match operation.kind {
        OpKind::Read => &[Request::Read],
        OpKind::Update | OpKind::Insert => &[Request::Write],
        OpKind::Scan => &[Request::Scan { length: 0 }],
        OpKind::ReadModifyWrite => &[Request::Read, Request::Write],
    }
}

fn step_request(operation: &Operation, step: usize) -> Option<Request> {
    steps(operation).get(step).map(|request| match request {
        Request::Scan { .. } => Request::Scan {
            length: operation.scan_length,
        },
        other => *other,
    })
}

/// One operation's progress through a batch.
#[derive(Clone, Copy)]
struct Progress {
    outcome: Outcome,
    records: u64,
    finished: Option<Instant>,
}

/// Runs one pipelined batch: per step, write every request, then read every
/// reply in order. Fills `progress` (one per operation); an error means the
/// connection is unusable.
async fn run_batch(
    connection: &mut Connection,
    codec: &mut dyn Codec,
    operations: &[Operation],
    progress: &mut Vec<Progress>,
    out: &mut Vec<u8>,
    timeout: Duration,
) -> Result<(), TripError> {
    progress.clear();
    progress.extend(operations.iter().map(|_| Progress {
        outcome: Outcome::Ok,
        records: 0,
        finished: None,
    }));
    for step in 0..STEPS_MAX {
        out.clear();
        for (operation, entry) in operations.iter().zip(progress.iter()) {
            if entry.finished.is_some() {
                continue;
            }
            if let Some(request) = step_request(operation, step) {
                codec.encode(request, operation.key, out);
            }
        }
        if out.is_empty() {
            break;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if let Err(error) = connection.send(out, deadline).await {
            finish_all(progress, &error);
            return Err(error);
        }
        for (index, operation) in operations.iter().enumerate() {
            let Some(request) = step_request(operation, step) else {
                continue;
            };
            if progress[index].finished.is_some() {
                continue;
            }
            let reply = match connection.receive(codec, request, deadline).await {
                Ok(reply) => reply,
                Err(error) => {
                    finish_all(progress, &error);
                    return Err(error);
                }
            };
            let entry = &mut progress[index];
            entry.outcome = reply.outcome;
            entry.records += reply.records;
            let more_steps = step_request(operation, step + 1).is_some();
            let failed = matches!(reply.outcome, Outcome::Error { .. } | Outcome::Timeout);
            if failed || !more_steps {
                entry.finished = Some(Instant::now());
            }
        }
    }
    Ok(())
}

/// Marks every unfinished operation of a batch with the trip's error.
fn finish_all(progress: &mut [Progress], error: &TripError) {
    let now = Instant::now();
    for entry in progress.iter_mut().filter(|entry| entry.finished.is_none()) {
        entry.outcome = error.outcome();
        entry.finished = Some(now);
    }
}

/// One connection's loop: connect, claim a batch, pace, run, record.
async fn worker(id: usize, config: Config, shared: Arc<Shared>, start: Instant) {
    let seed = config
        .seed
        .wrapping_add((id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut codec = new_codec(&config, seed ^ 0x5555);
    let mut generator = Generator::new(
        config.workload,
        config.key_start,
        config.key_count,
        shared.inserts.clone(),
    );
    // Each connection's share of the target rate, started at staggered offsets.
    let period = config
        .target_tps
        .map(|tps| Duration::from_secs_f64(config.concurrency as f64 / tps as f64));
    let mut intended_next = start
        + period.map_or(Duration::ZERO, |p| {
            p.mul_f64(id as f64 / config.concurrency as f64)
        });
    // One connection per node (a single node: just the first).
    let mut connections: Vec<Option<Connection>> = Vec::new();
    let mut failed_connects = 0u32;
    let mut operations = Vec::with_capacity(config.depth);
    let mut progress = Vec::with_capacity(config.depth);
    let mut out = Vec::new();
    let mut groups: Vec<(usize, Vec<Operation>)> = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        let granted = shared.claim(config.depth);
        operations.clear();
        operations.extend((0..granted).map_while(|_| generator.next(&mut rng)));
        if operations.is_empty() {
            break;
        }
        let intended = match period {
            Some(period) => {
                let intended = intended_next;
                intended_next += period * operations.len() as u32;
                tokio::time::sleep_until(intended.into()).await;
                intended
            }
            None => Instant::now(),
        };
        // Each operation to the node that masters its key's partition.
        let map = shared
            .map
            .as_ref()
            .map(|map| map.read().map(|map| Arc::clone(&map)).unwrap_or_default());
        groups.clear();
        for operation in &operations {
            let node = match &map {
                Some(map) => {
                    let digest = crate::aerospike::digest_of_integer_key(
                        config.set.as_bytes(),
                        operation.key as i64,
                    );
                    map.node_of(digest.partition_id().index())
                }
                None => 0,
            };
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, group)) => group.push(*operation),
                None => groups.push((node, vec![*operation])),
            }
        }
        for (node, group) in &groups {
            if connections.len() <= *node {
                connections.resize_with(node + 1, || None);
            }
            if connections[*node].is_none() {
                let target = match &map {
                    Some(map) => map
                        .nodes
                        .get(*node)
                        .cloned()
                        .unwrap_or_else(|| address(&config)),
                    None => address(&config),
                };
                match connect_to(&config, &target).await {
                    Ok(stream) => {
                        connections[*node] = Some(Connection::new(stream));
                        failed_connects = 0;
                    }
                    Err(error) => {
                        failed_connects += 1;
                        if failed_connects >= RECONNECT_ATTEMPTS_MAX {
                            shared.fail(format!("lost the server: {error}"));
                            return;
                        }
                        // The operations count as failed connections.
                        progress.clear();
                        progress.extend(group.iter().map(|_| Progress {
                            outcome: Outcome::Error {
                                code: CONNECTION_ERROR_CODE,
                            },
                            records: 0,
                            finished: Some(Instant::now()),
                        }));
                        record_batch(&shared, id, &config, group, &progress, intended);
                        tokio::time::sleep(RECONNECT_PAUSE).await;
                        continue;
                    }
                }
            }
            let Some(live) = connections[*node].as_mut() else {
                continue;
            };
            let result = run_batch(
                live,
                codec.as_mut(),
                group,
                &mut progress,
                &mut out,
                config.timeout,
            )
            .await;
            record_batch(&shared, id, &config, group, &progress, intended);
            if let Some(text) = codec.take_error_text() {
                let mut first = shared
                    .first_error_text
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                first.get_or_insert(text);
            }
            if result.is_err() {
                connections[*node] = None;
            }
        }
    }
}

fn record_batch(
    shared: &Shared,
    worker: usize,
    config: &Config,
    operations: &[Operation],
    progress: &[Progress],
    intended: Instant,
) {
    let mut namespace_missing = false;
    {
        let mut stats = shared.shard(worker);
        for (operation, entry) in operations.iter().zip(progress) {
            let finished = entry.finished.unwrap_or_else(Instant::now);
            let latency = finished.saturating_duration_since(intended).as_micros() as u64;
            stats.record(operation.kind, entry.outcome, latency);
            if entry.records > 0 {
                stats.add_records(operation.kind, entry.records);
            }
            namespace_missing |= entry.outcome == (Outcome::Error { code: 20 });
        }
    }
    if namespace_missing {
        shared.fail(format!(
            "namespace '{}' not found on {} (Aerospike result code 20)",
            config.namespace,
            address(config)
        ));
    }
}

/// The reporter: every second, swap out each shard's stats, print a line,
/// add them to the totals; stop the run when its time is up.
fn report(
    config: &Config,
    shared: &Shared,
    start: Instant,
    done: &mpsc::Receiver<()>,
    progress: &mut Box<dyn std::io::Write + Send>,
) -> RunReport {
    let stop_at = match config.limit {
        Limit::Duration(duration) => Some(start + duration),
        _ => None,
    };
    let mut total = Stats::default();
    let mut interval = Stats::default();
    let mut scratch = Stats::default();
    let mut timeline = Vec::new();
    let mut interval_start = start;
    let mut second = 1u64;
    // Bounded: each pass waits for a tick or the end, and the workers end
    // at the time limit, the operation budget, the end of the load, or a stop.
    loop {
        let tick = start + Duration::from_secs(second);
        let wake = match stop_at {
            Some(stop_at) if !shared.stop.load(Ordering::Relaxed) => tick.min(stop_at),
            _ => tick,
        };
        let finished = !matches!(
            done.recv_timeout(wake.saturating_duration_since(Instant::now())),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        let now = Instant::now();
        if stop_at.is_some_and(|stop_at| now >= stop_at) {
            shared.stop.store(true, Ordering::Relaxed);
        }
        if !finished && now < tick {
            continue;
        }
        for shard in &shared.shards {
            std::mem::swap(
                &mut *shard
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                &mut scratch,
            );
            interval.add(&scratch);
            scratch.reset();
        }
        let seconds = now.duration_since(interval_start).as_secs_f64();
        let elapsed = now.duration_since(start).as_secs_f64();
        // The drain after the time limit is counted but not shown as a second of its own.
        let drain = finished && !timeline.is_empty() && seconds < 0.5;
        if !drain && (interval.total_count() > 0 || !finished) {
            let _ = writeln!(
                progress,
                "{}",
                stats::interval_line(second, &interval, seconds)
            );
            if let Some(columns) = config.latency_columns {
                let _ = writeln!(progress, "{}", stats::latency_column_header(columns));
                for (kind, kind_stats) in interval.active_kinds() {
                    let line =
                        stats::latency_column_line(kind.name(), &kind_stats.latency, columns);
                    let _ = writeln!(progress, "{line}");
                }
            }
            timeline.push(IntervalSummary::of(elapsed, &interval, seconds));
        }
        total.add(&interval);
        interval.reset();
        interval_start = now;
        second += 1;
        if finished {
            let first_error_text = shared
                .first_error_text
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            return RunReport {
                first_error_text,
                stats: total,
                elapsed_seconds: elapsed,
                timeline,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::net::TcpListener;

    /// Connections the fake server accepts before it stops listening.
    const FAKE_CONNECTIONS_MAX: usize = 4;

    /// A RESP server on a loopback port that answers PING, GET (not found)
    /// and SET, and stalls once for `stall` before answering request
    /// number `stall_at` of the second connection (the first is the probe).
    fn fake_redis(stall_at: usize, stall: Duration) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        std::thread::spawn(move || {
            for (index, stream) in listener.incoming().take(FAKE_CONNECTIONS_MAX).enumerate() {
                let Ok(stream) = stream else { return };
                std::thread::spawn(move || {
                    serve(stream, (index == 1).then_some((stall_at, stall)))
                });
            }
        });
        port
    }

    fn serve(mut stream: std::net::TcpStream, stall: Option<(usize, Duration)>) {
        let mut received = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut answered = 0usize;
        loop {
            let Ok(read) = stream.read(&mut chunk) else {
                return;
            };
            if read == 0 {
                return;
            }
            received.extend_from_slice(&chunk[..read]);
            let mut out = Vec::new();
            let mut used_total = 0;
            while let Ok(Some((command, used))) = redis::parse(&received[used_total..], 0) {
                used_total += used;
                answered += 1;
                if stall.is_some_and(|(at, _)| at == answered) {
                    std::thread::sleep(stall.map_or(Duration::ZERO, |(_, pause)| pause));
                }
                let Resp::Array(Some(items)) = command else {
                    return;
                };
                out.extend_from_slice(match items.first() {
                    Some(Resp::Bulk(Some(b"PING"))) => b"+PONG\r\n".as_slice(),
                    Some(Resp::Bulk(Some(b"GET"))) => b"$-1\r\n",
                    _ => b"+OK\r\n",
                });
            }
            received.drain(..used_total);
            if stream.write_all(&out).is_err() {
                return;
            }
        }
    }

    fn parse_config(line: &str) -> Config {
        let arguments = std::iter::once("bolide-bench").chain(line.split_whitespace());
        Config::from_args(arguments).unwrap_or_else(|_| panic!("valid flags: {line}"))
    }

    #[test]
    fn stalls_count_as_latency_of_every_operation_scheduled_during_them() {
        // 1000 ops/s on one connection for 1 s; the server stalls 300 ms at
        // request 100. Measured from intended starts, the ~300 operations due
        // during the stall all wait: p90 is tens of ms and p99 near 300 ms.
        // Measured from send times only one operation would be slow.
        let port = fake_redis(100, Duration::from_millis(300));
        let config = parse_config(&format!(
            "--protocol redis -p {port} -w RU,100 -c 1 -g 1000 -d 1s -T 2000 --seed 1"
        ));
        let report = run(&config, Box::new(std::io::sink())).expect("run");
        let reads = report.stats.kind(OpKind::Read);
        // Kept: about 1000 (the ops due during the stall are sent late, not
        // dropped). A machine busy enough to starve this thread costs some;
        // 841 were seen at load 10 on 2 cores. Dropping the stalled ones
        // would leave about 700.
        assert!(
            reads.count() >= 800,
            "schedule not kept: {} ops",
            reads.count()
        );
        assert_eq!(reads.not_found, reads.count());
        let p90 = reads.latency.value_at_quantile(0.90);
        let p99 = reads.latency.value_at_quantile(0.99);
        assert!(p90 >= 20_000, "p90 {p90} µs hides the stall");
        assert!((200_000..400_000).contains(&p99), "p99 {p99} µs");
        let p50 = reads.latency.value_at_quantile(0.50);
        assert!(p50 < 20_000, "p50 {p50} µs");
    }

    #[test]
    fn operation_budget_and_timeouts() {
        let port = fake_redis(usize::MAX, Duration::ZERO);
        let config = parse_config(&format!(
            "--protocol redis -p {port} -w RU,0 -c 3 --depth 7 -d 1000ops"
        ));
        let report = run(&config, Box::new(std::io::sink())).expect("run");
        assert_eq!(report.stats.kind(OpKind::Update).ok, 1000);
        // A server that stalls past the timeout: the batch counts as timeouts.
        let port = fake_redis(1, Duration::from_millis(400));
        let config = parse_config(&format!(
            "--protocol redis -p {port} -w RU,0 -c 1 --depth 5 -d 5ops -T 100"
        ));
        let report = run(&config, Box::new(std::io::sink())).expect("run");
        assert_eq!(report.stats.total_timeouts(), 5);
    }

    #[test]
    fn every_operation_fits_in_a_batch() {
        for kind in OpKind::ALL {
            let operation = Operation {
                kind,
                key: 1,
                scan_length: 9,
            };
            assert!(
                (1..=STEPS_MAX).contains(&steps(&operation).len()),
                "{kind:?}"
            );
        }
        let scan = Operation {
            kind: OpKind::Scan,
            key: 1,
            scan_length: 9,
        };
        assert_eq!(step_request(&scan, 0), Some(Request::Scan { length: 9 }));
        assert_eq!(step_request(&scan, 1), None);
    }

    #[test]
    fn probe_replies_name_the_problem() {
        let config = parse_config("-p 3100 -n nope -w E");
        let scan = Request::Scan { length: 1 };
        let missing = Reply::of(Outcome::Error { code: 20 });
        let error = check_probe_reply(&config, "h:1", Request::Read, missing).expect_err("20");
        assert_eq!(
            error,
            "namespace 'nope' not found on h:1 (Aerospike result code 20)"
        );
        let unsupported = Reply::of(Outcome::Error { code: 16 });
        let error = check_probe_reply(&config, "h:1", scan, unsupported).expect_err("16");
        assert!(
            error.starts_with("server at h:1 does not support scans (result code 16"),
            "{error}"
        );
        assert!(
            check_probe_reply(&config, "h:1", Request::Read, Reply::of(Outcome::NotFound)).is_ok()
        );
    }

    #[test]
    fn unreachable_server_is_one_clear_error() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").port()
        };
        let config = parse_config(&format!("--protocol redis -p {port} -d 1s"));
        let error = run(&config, Box::new(std::io::sink()))
            .err()
            .expect("fails");
        assert!(
            error.starts_with(&format!("cannot connect to 127.0.0.1:{port}")),
            "{error}"
        );
    }
}
