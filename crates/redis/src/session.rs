//! One Redis connection's state and the dispatcher: requests are parsed
//! off the input, checked (unknown command, arity, MULTI queueing) in
//! Redis's order, run, and answered in order into the output.

use crate::data;
use crate::keyspace::{set_name, Db, Records};
use crate::resp::{self, Out};
use crate::table::{self, Spec};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod admin;
use admin::command_command;

/// The Redis version whose semantics are served (clients and test suites
/// gate on it).
pub const REDIS_VERSION: &str = "7.0.15";
/// Databases `SELECT` accepts (0..DATABASES), each a set of the namespace.
pub const DATABASES: usize = 16;

/// What every Redis connection of the node shares.
pub struct Shared {
    /// The namespace Redis keys live in.
    pub namespace: String,
    /// The RESP port (INFO `tcp_port`).
    pub port: u16,
    started: Instant,
    next_client_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, String>>,
    config: Mutex<BTreeMap<String, String>>,
    /// The encoding limits of `config`, parsed.
    encodings: RwLock<crate::keyspace::Encodings>,
    pub connections_received: AtomicU64,
    pub commands_processed: AtomicU64,
    /// EXEC holds it exclusively, every other command shared: nothing
    /// interleaves with a running transaction.
    exec: RwLock<()>,
    run_id: String,
    /// Publish/subscribe on this node.
    pub hub: crate::pubsub::Hub,
    /// The last Redis Cluster map the server built, with what it was built
    /// from (its stamp) and when.
    pub cluster_map: Mutex<Option<(u64, Instant, Arc<crate::cluster::ClusterMap>)>>,
    /// The same for clients of the TLS port: it names the nodes' TLS
    /// ports.
    pub cluster_map_tls: Mutex<Option<(u64, Instant, Arc<crate::cluster::ClusterMap>)>>,
    /// This node has been in a cluster of two or more nodes since it
    /// started: it answers as a Redis Cluster node from then on, also when
    /// it is left alone.
    pub clustered: std::sync::atomic::AtomicBool,
    /// Connections waiting in a blocking command or a CLIENT PAUSE (INFO
    /// `blocked_clients`), each with what CLIENT UNBLOCK asked of it
    /// (None: nothing; Some(true): fail with UNBLOCKED, Some(false): time
    /// out now).
    blocked: Mutex<BTreeMap<u64, Option<bool>>>,
    /// Blocking commands waiting for data, first come first served: a
    /// write serves them right after it runs (see `Session::serve_waiters`).
    waiters: Mutex<Vec<Arc<Waiter>>>,
    /// Connections CLIENT KILL closed; each closes when it next runs.
    killed: Mutex<std::collections::BTreeSet<u64>>,
    /// How to wake each connection (to close it after CLIENT KILL).
    wakers: Mutex<BTreeMap<u64, Arc<dyn crate::pubsub::Wake>>>,
    /// CLIENT PAUSE: until when, and whether every command waits (ALL) or
    /// only writes (WRITE).
    pause: Mutex<Option<(Instant, bool)>>,
    /// INFO commandstats, one entry per command of the table.
    command_stats: Vec<CommandStats>,
    /// LATENCY HISTOGRAM of the commands with subcommands, by
    /// `command|subcommand`.
    subcommand_latency: Mutex<BTreeMap<String, [u64; LATENCY_BUCKETS]>>,
    /// The slow log, newest first, with its settings.
    slowlog: Mutex<std::collections::VecDeque<SlowEntry>>,
    slowlog_next_id: AtomicU64,
    slowlog_slower_than_us: std::sync::atomic::AtomicI64,
    slowlog_max_len: std::sync::atomic::AtomicUsize,
    /// Lua scripts and function libraries, and the script running now.
    pub scripts: Arc<crate::scripting::Scripts>,
}

/// A connection waiting in a blocking command (BLPOP, BLMOVE, BZPOPMIN…):
/// its command, and its answer once a write on another connection served
/// it. The lock is held while the command is tried, by the waiter itself
/// or by a writer on its behalf, so it is served once.
struct Waiter {
    id: u64,
    db: usize,
    resp3: bool,
    args: Vec<Vec<u8>>,
    answer: Mutex<Option<Vec<u8>>>,
}

/// The blocking commands that move an element to a destination key.
fn moves(name: &str) -> bool {
    matches!(name, "brpoplpush" | "blmove")
}

/// One command's INFO commandstats counters.
#[derive(Default)]
struct CommandStats {
    calls: AtomicU64,
    micros: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    /// LATENCY HISTOGRAM: calls that took under 2^(i+1) µs, by i.
    buckets: [AtomicU64; LATENCY_BUCKETS],
}

/// Power-of-two latency buckets, 1 µs to 2^24 µs (about 17 s) and above.
const LATENCY_BUCKETS: usize = 25;

fn latency_bucket(took: Duration) -> usize {
    let micros = took.as_micros().max(1) as u64;
    (63 - micros.leading_zeros() as usize).min(LATENCY_BUCKETS - 1)
}

/// One SLOWLOG entry.
struct SlowEntry {
    id: u64,
    unix_seconds: u64,
    micros: u64,
    args: Vec<Vec<u8>>,
    peer: String,
    name: Vec<u8>,
}

impl Shared {
    /// The node's exclusive turn (EXEC's, a script's): no other Redis
    /// command runs while it is held.
    pub(crate) fn alone(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.exec.write()
    }

    /// How long a script runs before other clients are answered BUSY
    /// (`busy-reply-threshold`, alias `lua-time-limit`).
    pub fn busy_threshold(&self) -> Duration {
        let ms = self
            .config
            .lock()
            .get("busy-reply-threshold")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(5000);
        Duration::from_millis(ms)
    }

    fn count_command(&self, spec: &'static Spec, ran: bool, failed: bool, took: Duration) {
        // The spec's index in the table, from its address.
        let index = (spec as *const Spec as usize).wrapping_sub(table::COMMANDS.as_ptr() as usize)
            / std::mem::size_of::<Spec>();
        let Some(stats) = self.command_stats.get(index) else {
            return;
        };
        if ran {
            stats.calls.fetch_add(1, Relaxed);
            stats.micros.fetch_add(took.as_micros() as u64, Relaxed);
            stats.buckets[latency_bucket(took)].fetch_add(1, Relaxed);
            if failed {
                stats.failed.fetch_add(1, Relaxed);
            }
        } else if failed {
            stats.rejected.fetch_add(1, Relaxed);
        }
    }

    /// INFO commandstats lines for the commands called or refused.
    fn command_stats_text(&self) -> String {
        let mut text = String::new();
        for (spec, stats) in table::COMMANDS.iter().zip(&self.command_stats) {
            let calls = stats.calls.load(Relaxed);
            let rejected = stats.rejected.load(Relaxed);
            if calls == 0 && rejected == 0 {
                continue;
            }
            let micros = stats.micros.load(Relaxed);
            text.push_str(&format!(
                "cmdstat_{}:calls={calls},usec={micros},usec_per_call={:.2},rejected_calls={rejected},failed_calls={}\r\n",
                spec.name,
                if calls == 0 { 0.0 } else { micros as f64 / calls as f64 },
                stats.failed.load(Relaxed),
            ));
        }
        text
    }

    fn reset_command_stats(&self) {
        for stats in &self.command_stats {
            stats.calls.store(0, Relaxed);
            stats.micros.store(0, Relaxed);
            stats.rejected.store(0, Relaxed);
            stats.failed.store(0, Relaxed);
            for bucket in &stats.buckets {
                bucket.store(0, Relaxed);
            }
        }
        self.subcommand_latency.lock().clear();
        // As Redis's CONFIG RESETSTAT: the INFO stats counters too.
        self.commands_processed.store(0, Relaxed);
        self.connections_received.store(0, Relaxed);
    }

    /// Counts a call of a command with subcommands (`client|id`) for
    /// LATENCY HISTOGRAM.
    fn count_subcommand(&self, name: &str, took: Duration) {
        let mut latency = self.subcommand_latency.lock();
        let buckets = latency
            .entry(name.to_owned())
            .or_insert([0; LATENCY_BUCKETS]);
        buckets[latency_bucket(took)] += 1;
    }

    /// LATENCY HISTOGRAM's entries: (command or command|subcommand,
    /// bucket counts), for the names wanted (all when empty).
    fn latency_histograms(&self, wanted: &[String]) -> Vec<(String, [u64; LATENCY_BUCKETS])> {
        let mut found: Vec<(String, [u64; LATENCY_BUCKETS])> = Vec::new();
        let subcommands = self.subcommand_latency.lock();
        let keep = |name: &str| {
            wanted.is_empty()
                || wanted.iter().any(|w| {
                    w == name || name.split('|').next() == Some(w.as_str()) && name.contains('|')
                })
        };
        for (spec, stats) in table::COMMANDS.iter().zip(&self.command_stats) {
            if SUBCOMMANDS.contains(&spec.name) {
                for (name, buckets) in subcommands.range(format!("{}|", spec.name)..) {
                    if !name.starts_with(&format!("{}|", spec.name)) {
                        break;
                    }
                    if keep(name) && !found.iter().any(|(n, _)| n == name) {
                        found.push((name.clone(), *buckets));
                    }
                }
                continue;
            }
            if stats.calls.load(Relaxed) == 0 || !keep(spec.name) {
                continue;
            }
            let mut buckets = [0; LATENCY_BUCKETS];
            for (count, bucket) in buckets.iter_mut().zip(&stats.buckets) {
                *count = bucket.load(Relaxed);
            }
            found.push((spec.name.to_owned(), buckets));
        }
        found
    }

    /// The next connection's `CLIENT ID` (ids start at 1 and never repeat).
    pub fn take_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Relaxed)
    }

    pub fn new(namespace: String, port: u16) -> Shared {
        let config = [
            ("save", ""),
            ("appendonly", "no"),
            ("maxmemory", "0"),
            ("maxmemory-policy", "noeviction"),
            ("databases", "16"),
            ("notify-keyspace-events", ""),
            ("proto-max-bulk-len", "536870912"),
            ("busy-reply-threshold", "5000"),
            ("lua-time-limit", "5000"),
            ("slowlog-log-slower-than", "10000"),
            ("timeout", "0"),
            ("hash-max-listpack-entries", "128"),
            ("hash-max-listpack-value", "64"),
            ("hash-max-ziplist-entries", "128"),
            ("hash-max-ziplist-value", "64"),
            ("zset-max-listpack-entries", "128"),
            ("zset-max-listpack-value", "64"),
            ("zset-max-ziplist-entries", "128"),
            ("zset-max-ziplist-value", "64"),
            ("list-max-listpack-size", "-2"),
            ("list-max-ziplist-size", "-2"),
            ("set-max-intset-entries", "512"),
            ("stream-node-max-entries", "100"),
            ("stream-node-max-bytes", "4096"),
            ("slowlog-max-len", "128"),
            ("list-compress-depth", "0"),
            ("tracking-table-max-keys", "1000000"),
            ("latency-monitor-threshold", "0"),
            ("latency-tracking", "yes"),
            ("client-query-buffer-limit", "1073741824"),
            ("hll-sparse-max-bytes", "3000"),
            ("loglevel", "notice"),
            ("dir", "."),
            ("dbfilename", "dump.rdb"),
            ("aof-use-rdb-preamble", "yes"),
            ("appendfsync", "everysec"),
            ("auto-aof-rewrite-percentage", "100"),
            ("maxclients", "10000"),
            ("lazyfree-lazy-user-del", "no"),
            ("lazyfree-lazy-user-flush", "no"),
            ("activerehashing", "yes"),
            ("activedefrag", "no"),
            ("rdb-key-save-delay", "0"),
            ("key-load-delay", "0"),
            ("repl-ping-replica-period", "10"),
            ("replica-serve-stale-data", "yes"),
            ("replica-read-only", "yes"),
            ("min-replicas-to-write", "0"),
            ("hz", "10"),
            ("io-threads", "1"),
            ("lfu-log-factor", "10"),
            ("lfu-decay-time", "1"),
            ("maxmemory-samples", "5"),
            ("close-on-oom", "no"),
            ("protected-mode", "no"),
            ("daemonize", "no"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .chain([("port".to_owned(), port.to_string())])
        .collect();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let run_id = format!("{:040x}", seed ^ (u128::from(std::process::id()) << 64));
        Shared {
            namespace,
            port,
            started: Instant::now(),
            next_client_id: AtomicU64::new(1),
            clients: Mutex::new(BTreeMap::new()),
            config: Mutex::new(config),
            encodings: RwLock::new(crate::keyspace::Encodings::default()),
            connections_received: AtomicU64::new(0),
            commands_processed: AtomicU64::new(0),
            exec: RwLock::new(()),
            run_id: run_id[run_id.len() - 40..].to_owned(),
            hub: crate::pubsub::Hub::default(),
            cluster_map: Mutex::new(None),
            cluster_map_tls: Mutex::new(None),
            clustered: std::sync::atomic::AtomicBool::new(false),
            scripts: Arc::default(),
            blocked: Mutex::new(BTreeMap::new()),
            killed: Mutex::new(Default::default()),
            waiters: Mutex::new(Vec::new()),
            wakers: Mutex::new(BTreeMap::new()),
            pause: Mutex::new(None),
            command_stats: table::COMMANDS
                .iter()
                .map(|_| CommandStats::default())
                .collect(),
            subcommand_latency: Mutex::new(BTreeMap::new()),
            slowlog: Mutex::new(Default::default()),
            slowlog_next_id: AtomicU64::new(0),
            slowlog_slower_than_us: std::sync::atomic::AtomicI64::new(10_000),
            slowlog_max_len: std::sync::atomic::AtomicUsize::new(128),
        }
    }
}

/// What the connection does after `feed`.
#[derive(Debug)]
pub enum Step {
    /// Every complete request is answered: write the output, read more.
    Read,
    /// The output is large: write it, then call `feed` again.
    Flush,
    /// A blocking command waits: write the output, call `feed` again at
    /// (or before) this instant.
    Block(Instant),
    /// (SC) The next command's records must first reach their replicas
    /// again: carry out the copies the backend queued, then call `feed`
    /// again (the command is not consumed).
    Again,
    /// Write the output, then close.
    Close,
    /// A script command: write the output, run the call on the script
    /// engine (`Shared::scripts`), write its reply, then call `feed` again.
    Script(Box<crate::scripting::Call>),
}

impl PartialEq for Step {
    fn eq(&self, other: &Step) -> bool {
        match (self, other) {
            (Step::Block(a), Step::Block(b)) => a == b,
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Eq for Step {}

pub(crate) enum Flow {
    Done,
    Block,
    /// CLIENT PAUSE holds the command back until this instant.
    Paused(Instant),
    Close,
    /// Not run yet: its records are being copied first (`Step::Again`).
    Again,
    /// A script holds the node: try this request again shortly.
    Wait,
    Script(Box<crate::scripting::Call>),
}

/// CLIENT REPLY: whether the connection's commands are answered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reply {
    On,
    Off,
    /// The next command is not answered (then On again).
    SkipNext,
    /// This command is not answered (set from SkipNext as it starts).
    Skip,
}

/// A WATCHed key: its database, the key, and its record's generation and
/// value then (None: no record).
type Watched = (
    usize,
    Vec<u8>,
    Option<(u16, Option<crate::keyspace::Entry>)>,
);

/// A Redis connection.
pub struct Session {
    shared: Arc<Shared>,
    pub id: u64,
    name: Vec<u8>,
    db: usize,
    pub resp3: bool,
    peer: String,
    local: String,
    created: Instant,
    last_command: String,
    /// The size of the request being answered (CLIENT LIST's `qbuf`).
    query_bytes: usize,
    /// The command being answered, and whether it ran (else a check
    /// refused it), for INFO commandstats.
    stat: Option<(&'static Spec, bool)>,
    /// Queued commands inside MULTI.
    multi: Option<Vec<Vec<Vec<u8>>>>,
    /// (SC) Rounds the next command has waited for its records' copies.
    copy_rounds: u8,
    multi_failed: bool,
    /// WATCHed keys: (db, key, what the key was then).
    watched: Vec<Watched>,
    /// The deadline of the blocking command being retried.
    block_deadline: Option<Option<Instant>>,
    /// The connection is in `Shared::blocked`.
    blocked: bool,
    /// The connection's entry in `Shared::waiters` while it waits.
    waiter: Option<Arc<Waiter>>,
    /// Whether the waiting command times out with a null bulk (BLMOVE)
    /// rather than a null array.
    block_null_bulk: bool,
    reply: Reply,
    /// Where published messages for this connection wait (None: the
    /// connection cannot be woken, so it may not subscribe).
    mailbox: Option<Arc<crate::pubsub::Mailbox>>,
    channels: std::collections::BTreeSet<Vec<u8>>,
    patterns: std::collections::BTreeSet<Vec<u8>>,
    shard_channels: std::collections::BTreeSet<Vec<u8>>,
    /// The Redis Cluster map when the node answers as a cluster node
    /// (refreshed before every command).
    cluster: Option<Arc<crate::cluster::ClusterMap>>,
    /// READONLY: reads of slots this node holds a replica of are served
    /// here instead of redirected.
    readonly: bool,
    /// Who the connection is logged in as (None: nobody yet; a secured
    /// node then answers NOAUTH). An open node's connections are `default`.
    user: Option<String>,
}

const OUTPUT_FLUSH_BYTES: usize = 1 << 20;
/// Commands whose first argument is a subcommand (`client|list` in CLIENT
/// LIST, LATENCY HISTOGRAM).
const SUBCOMMANDS: &[&str] = &[
    "client", "config", "command", "cluster", "object", "memory", "slowlog", "acl", "pubsub",
    "function", "script", "latency",
];
/// How often a blocked command looks again.
const BLOCK_POLL: Duration = Duration::from_millis(5);
/// How often a request held up by a running script tries again.
const SCRIPT_POLL: Duration = Duration::from_millis(2);

impl Session {
    pub fn new(shared: Arc<Shared>, peer: String, local: String) -> Session {
        let id = shared.take_client_id();
        Session::with_id(shared, id, peer, local)
    }

    /// A session whose `CLIENT ID` was taken when its socket was accepted
    /// ([`Shared::take_client_id`]), so ids follow the order of accepts
    /// as in Redis, whichever service thread starts the session first.
    pub fn with_id(shared: Arc<Shared>, id: u64, peer: String, local: String) -> Session {
        shared.connections_received.fetch_add(1, Relaxed);
        let session = Session::unregistered(shared, id, peer, local);
        session.register();
        session
    }

    /// The client a script's `redis.call` commands run as: the caller's
    /// database, cluster map, READONLY and user; not listed by CLIENT
    /// LIST, and unable to block or subscribe.
    pub(crate) fn for_script(
        shared: Arc<Shared>,
        db: usize,
        cluster: Option<Arc<crate::cluster::ClusterMap>>,
        readonly: bool,
        user: Option<String>,
    ) -> Session {
        let mut session = Session::unregistered(shared, 0, String::new(), String::new());
        session.db = db;
        session.cluster = cluster;
        session.readonly = readonly;
        session.user = user;
        session
    }

    /// A fresh client in database 0, not yet listed by CLIENT LIST.
    fn unregistered(shared: Arc<Shared>, id: u64, peer: String, local: String) -> Session {
        Session {
            shared,
            id,
            name: Vec::new(),
            db: 0,
            resp3: false,
            peer,
            local,
            created: Instant::now(),
            last_command: "NULL".to_owned(),
            query_bytes: 0,
            stat: None,
            multi: None,
            copy_rounds: 0,
            multi_failed: false,
            watched: Vec::new(),
            block_deadline: None,
            blocked: false,
            waiter: None,
            block_null_bulk: false,
            reply: Reply::On,
            mailbox: None,
            channels: Default::default(),
            patterns: Default::default(),
            shard_channels: Default::default(),
            cluster: None,
            readonly: false,
            user: None,
        }
    }

    pub(crate) fn db_index(&self) -> usize {
        self.db
    }

    pub(crate) fn cluster_map(&self) -> Option<Arc<crate::cluster::ClusterMap>> {
        self.cluster.clone()
    }

    pub(crate) fn is_readonly(&self) -> bool {
        self.readonly
    }

    /// Runs a command a script called (nothing blocks).
    pub(crate) fn run_from_script(
        &mut self,
        spec: &Spec,
        args: &[Vec<u8>],
        out: &mut Out,
        records: &mut dyn Records,
        namespace: &[u8],
    ) {
        if matches!(spec.name, "xread" | "xreadgroup") && crate::streams::has_block(args) {
            out.error(&format!(
                "ERR {} command is not allowed with BLOCK option from scripts",
                String::from_utf8_lossy(&args[0])
            ));
            return;
        }
        self.run(spec, args, out, records, namespace, true);
    }

    /// Lets the connection receive published messages: `wake` is called
    /// when one arrives, and [`Session::drain_messages`] takes them.
    pub fn set_wake(&mut self, wake: Arc<dyn crate::pubsub::Wake>) {
        self.shared.wakers.lock().insert(self.id, Arc::clone(&wake));
        self.mailbox = Some(Arc::new(crate::pubsub::Mailbox::new(wake)));
    }

    fn enter_block(&mut self) {
        if !self.blocked {
            self.shared.blocked.lock().insert(self.id, None);
            self.blocked = true;
        }
    }

    fn leave_block(&mut self) {
        if self.blocked {
            self.shared.blocked.lock().remove(&self.id);
            self.blocked = false;
        }
        if let Some(waiter) = self.waiter.take() {
            self.shared
                .waiters
                .lock()
                .retain(|other| !Arc::ptr_eq(other, &waiter));
        }
    }

    /// Runs, for each connection waiting in a blocking command (first come
    /// first served), its command again, until a round serves none: a
    /// write served here reaches waiters before this connection's next
    /// command, as in Redis. Their answers go to their connections.
    fn serve_waiters(&self, records: &mut dyn Records, namespace: &[u8]) {
        loop {
            let waiters: Vec<Arc<Waiter>> = self.shared.waiters.lock().clone();
            if waiters.is_empty() {
                return;
            }
            let mut served = false;
            for waiter in waiters {
                if waiter.id == self.id {
                    continue;
                }
                let mut answer = waiter.answer.lock();
                if answer.is_some() {
                    continue;
                }
                let name = String::from_utf8_lossy(&waiter.args[0]).to_ascii_lowercase();
                let Some(spec) = table::find(&name) else {
                    continue;
                };
                let mut out = Out::new(waiter.resp3);
                let mut db = Db {
                    records: &mut *records,
                    namespace,
                    set: set_name(waiter.db),
                    encodings: *self.shared.encodings.read(),
                    memo: Default::default(),
                };
                match data::run(spec.name, &waiter.args, &mut out, &mut db, true) {
                    Ok(data::Ran::Done) => {}
                    // Nothing to pop, or a key now of another type: the
                    // waiter keeps waiting, as in Redis (but a move whose
                    // destination is of another type answers its error).
                    Ok(data::Ran::Empty { .. } | data::Ran::Wait { .. }) => continue,
                    Err(_) if !moves(spec.name) => continue,
                    Err(error) => out.error(&error),
                }
                *answer = Some(out.buf);
                drop(answer);
                served = true;
                self.shared
                    .waiters
                    .lock()
                    .retain(|other| !Arc::ptr_eq(other, &waiter));
                if let Some(wake) = self.shared.wakers.lock().get(&waiter.id) {
                    wake.wake();
                }
            }
            if !served {
                return;
            }
        }
    }

    /// What CLIENT UNBLOCK asked of this blocked connection, if anything.
    fn unblock_request(&self) -> Option<bool> {
        if !self.blocked {
            return None;
        }
        self.shared.blocked.lock().get(&self.id).copied().flatten()
    }

    /// Moves published messages into `out`; false if the connection fell
    /// too far behind and must be closed.
    pub fn drain_messages(&self, out: &mut Vec<u8>) -> bool {
        self.mailbox
            .as_ref()
            .is_none_or(|mailbox| mailbox.drain(out))
    }

    /// Whether the connection has subscriptions (and waits for messages).
    pub fn is_subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shard_channels.is_empty()
    }

    fn subscriptions(&self) -> i64 {
        (self.channels.len() + self.patterns.len()) as i64
    }

    fn unsubscribe_all(&mut self) {
        for channel in std::mem::take(&mut self.channels) {
            self.shared.hub.unsubscribe(false, &channel, self.id);
        }
        for pattern in std::mem::take(&mut self.patterns) {
            self.shared.hub.unsubscribe(true, &pattern, self.id);
        }
        for channel in std::mem::take(&mut self.shard_channels) {
            self.shared.hub.unsubscribe_shard(&channel, self.id);
        }
    }

    fn register(&self) {
        let line = self.client_line();
        self.shared.clients.lock().insert(self.id, line);
    }

    fn client_line(&self) -> String {
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle=0 flags={} db={} sub={} psub={} ssub={} multi={} \
             qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=1024 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 \
             events=r cmd={} user={} redir=-1 resp={}",
            self.id,
            self.peer,
            self.local,
            String::from_utf8_lossy(&self.name),
            self.created.elapsed().as_secs(),
            if self.multi.is_some() { "x" } else { "N" },
            self.db,
            self.channels.len(),
            self.patterns.len(),
            self.shard_channels.len(),
            self.multi.as_ref().map_or(-1, |queue| queue.len() as i64),
            self.query_bytes,
            self.last_command,
            self.user.as_deref().unwrap_or("default"),
            if self.resp3 { 3 } else { 2 },
        )
    }

    fn db<'r>(&self, records: &'r mut dyn Records, namespace: &'r [u8], db: usize) -> Db<'r> {
        Db {
            records,
            namespace,
            set: set_name(db),
            encodings: *self.shared.encodings.read(),
            memo: Default::default(),
        }
    }

    /// Answers every complete request at the front of `input` into `out`:
    /// the bytes consumed, and what to do next.
    pub fn feed(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        records: &mut dyn Records,
    ) -> (usize, Step) {
        let mut used = 0;
        let mut reply = Out {
            buf: std::mem::take(out),
            resp3: self.resp3,
        };
        let step = loop {
            if self.shared.killed.lock().remove(&self.id) {
                break Step::Close;
            }
            if reply.buf.len() >= OUTPUT_FLUSH_BYTES {
                break Step::Flush;
            }
            let (args, length) = match resp::parse(&input[used..]) {
                Ok(Some(request)) => request,
                Ok(None) => break Step::Read,
                Err(error) => {
                    reply.error(&error.text());
                    break Step::Close;
                }
            };
            if args.is_empty() {
                used += length;
                continue;
            }
            if self.reply == Reply::SkipNext {
                self.reply = Reply::Skip;
            }
            let answer_from = reply.buf.len();
            self.query_bytes = length;
            records.command_started(answer_from);
            let mut flow = self.command(&args, &mut reply, records);
            let dropped = matches!(self.reply, Reply::Off | Reply::Skip | Reply::SkipNext)
                && !matches!(
                    flow,
                    Flow::Block | Flow::Paused(_) | Flow::Again | Flow::Wait
                );
            if dropped {
                // A script runs on the engine and answers later: its
                // reply is dropped there.
                if let Flow::Script(call) = &mut flow {
                    call.silence();
                }
                // CLIENT REPLY OFF/SKIP: the answer is dropped, but not
                // the subscribe confirmations a RESP3 client gets as push
                // frames.
                let pushed = self.resp3
                    && reply.buf.get(answer_from) == Some(&b'>')
                    && args[0].to_ascii_lowercase().ends_with(b"subscribe");
                if !pushed {
                    reply.buf.truncate(answer_from);
                }
                if self.reply == Reply::Skip {
                    self.reply = Reply::On;
                }
            }
            records.command_ended(reply.buf.len());
            match flow {
                Flow::Done => used += length,
                Flow::Close => {
                    used += length;
                    break Step::Close;
                }
                Flow::Paused(until) => {
                    break Step::Block(until.min(Instant::now() + BLOCK_POLL));
                }
                Flow::Block => {
                    let deadline = self.block_deadline.flatten();
                    let poll = Instant::now() + BLOCK_POLL;
                    break Step::Block(deadline.map_or(poll, |d| d.min(poll)));
                }
                Flow::Again => break Step::Again,
                Flow::Wait => break Step::Block(Instant::now() + SCRIPT_POLL),
                Flow::Script(call) => {
                    used += length;
                    break Step::Script(call);
                }
            }
        };
        *out = reply.buf;
        (used, step)
    }

    /// Runs one request and counts it in INFO commandstats: a call when
    /// it ran (failed when it answered an error), rejected when a check
    /// refused it first.
    fn command(&mut self, args: &[Vec<u8>], out: &mut Out, records: &mut dyn Records) -> Flow {
        let start = out.buf.len();
        let started = Instant::now();
        self.stat = None;
        let flow = self.command_checked(args, out, records);
        if matches!(
            flow,
            Flow::Block | Flow::Paused(_) | Flow::Again | Flow::Wait
        ) {
            return flow;
        }
        if let Some((spec, ran)) = self.stat.take() {
            let failed = out.buf.get(start) == Some(&b'-');
            let took = started.elapsed();
            self.shared.count_command(spec, ran, failed, took);
            if ran && SUBCOMMANDS.contains(&spec.name) {
                self.shared.count_subcommand(&self.last_command, took);
            }
        }
        flow
    }

    fn command_checked(
        &mut self,
        args: &[Vec<u8>],
        out: &mut Out,
        records: &mut dyn Records,
    ) -> Flow {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let Some(spec) = table::find(&name) else {
            let mut text = format!(
                "ERR unknown command '{}', with args beginning with: ",
                truncate(&String::from_utf8_lossy(&args[0]))
            );
            for arg in &args[1..] {
                text.push_str(&format!("'{}' ", truncate(&String::from_utf8_lossy(arg))));
            }
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            out.error(&text);
            return Flow::Done;
        };
        self.stat = Some((spec, false));
        let n = args.len() as i32;
        if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            out.error(&format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            ));
            return Flow::Done;
        }
        if records.secured()
            && self.user.is_none()
            && !matches!(spec.name, "auth" | "hello" | "quit" | "reset")
        {
            if self.multi.is_some() {
                self.multi_failed = true;
            }
            out.error("NOAUTH Authentication required.");
            return Flow::Done;
        }
        if let Some(permission) = permission_of(spec, args) {
            if !records.permits(permission, &set_name(self.db)) {
                if self.multi.is_some() {
                    self.multi_failed = true;
                }
                out.error(&format!(
                    "NOPERM this user has no permissions to run the '{}' command",
                    spec.name
                ));
                return Flow::Done;
            }
        }
        self.cluster = records.cluster();
        if let Some(map) = &self.cluster {
            if let Some(error) = route(map, spec, args, self.readonly) {
                if self.multi.is_some() {
                    self.multi_failed = true;
                }
                out.error(&error);
                return Flow::Done;
            }
        }
        if !self.resp3
            && self.is_subscribed()
            && !matches!(
                spec.name,
                "subscribe"
                    | "unsubscribe"
                    | "psubscribe"
                    | "punsubscribe"
                    | "ssubscribe"
                    | "sunsubscribe"
                    | "ping"
                    | "quit"
                    | "reset"
            )
        {
            out.error(&format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
                 RESET are allowed in this context",
                spec.name
            ));
            return Flow::Done;
        }
        // A script holds the node: wait for it, and once it has run past
        // busy-reply-threshold answer BUSY to all but the few commands
        // Redis lets through.
        let busy = self.shared.scripts.busy();
        if let Some((running, eval)) = busy {
            if running < self.shared.busy_threshold() {
                return Flow::Wait;
            }
            if !crate::scripting::allowed_while_busy(spec, args) {
                let busy = if eval {
                    crate::scripting::BUSY_EVAL
                } else {
                    crate::scripting::BUSY_FUNCTION
                };
                if self.multi.is_some() && spec.name == "exec" {
                    // As Redis: the transaction is discarded (nothing of
                    // it runs) and the connection leaves MULTI.
                    self.multi = None;
                    self.multi_failed = false;
                    self.watched.clear();
                    out.error(&format!(
                        "EXECABORT Transaction discarded because of: {busy}"
                    ));
                    return Flow::Done;
                }
                if self.multi.is_some() {
                    self.multi_failed = true;
                }
                out.error(busy);
                return Flow::Done;
            }
        }
        if self.multi.is_some() && spec.flags.contains(&"no-multi") {
            self.multi_failed = true;
            out.error("ERR Command not allowed inside a transaction");
            return Flow::Done;
        }
        if self.multi.is_some()
            && !matches!(
                spec.name,
                "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
            )
        {
            if let Some(queue) = &mut self.multi {
                queue.push(args.to_vec());
            }
            // Counted when EXEC runs it.
            self.stat = None;
            out.simple("QUEUED");
            return Flow::Done;
        }
        if let Some(until) = self.paused_until(spec) {
            self.enter_block();
            return Flow::Paused(until);
        }
        if self.block_deadline.is_none() {
            // A paused command now runs (a blocking one stays counted
            // while it waits).
            self.leave_block();
        }
        if self.copies_first(spec, args, records) {
            return Flow::Again;
        }
        self.shared.commands_processed.fetch_add(1, Relaxed);
        self.stat = Some((spec, true));
        self.last_command = match args.get(1) {
            // Commands with subcommands show both, as Redis 7.0 does.
            Some(sub) if SUBCOMMANDS.contains(&spec.name) => {
                format!(
                    "{}|{}",
                    spec.name,
                    String::from_utf8_lossy(sub).to_ascii_lowercase()
                )
            }
            _ => spec.name.to_owned(),
        };
        let namespace = self.shared.namespace.clone();
        let shared = Arc::clone(&self.shared);
        let started = Instant::now();
        if spec.name == "exec" {
            // EXEC runs holding the node's turn alone; waiters see only
            // its final state.
            let Some(alone) = turn(&shared, true) else {
                return Flow::Wait;
            };
            let flow = self.exec(out, records, namespace.as_bytes(), alone);
            if let Some(_turn) = turn(&shared, false) {
                self.serve_waiters(records, namespace.as_bytes());
            }
            return flow;
        }
        if busy.is_some() || crate::scripting::needs_engine(spec, args) {
            // Answered without the node's turn: the engine takes it for a
            // script's run, and what runs while a script is busy only
            // looks at the script.
            return self.run(spec, args, out, records, namespace.as_bytes(), false);
        }
        let flow = {
            let Some(_turn) = turn(&shared, false) else {
                return Flow::Wait;
            };
            self.run(spec, args, out, records, namespace.as_bytes(), false)
        };
        if !matches!(flow, Flow::Block) {
            self.slowlog(spec, args, started);
            if spec.flags.contains(&"write") {
                // A script holding the node now: its waiters look again
                // themselves (BLOCK_POLL).
                if let Some(_turn) = turn(&shared, false) {
                    self.serve_waiters(records, namespace.as_bytes());
                }
            }
        }
        flow
    }

    /// Until when CLIENT PAUSE holds this command back (None: it runs).
    fn paused_until(&self, spec: &Spec) -> Option<Instant> {
        let mut pause = self.shared.pause.lock();
        let (until, all) = (*pause)?;
        if Instant::now() >= until {
            *pause = None;
            return None;
        }
        if spec.name == "client" {
            return None;
        }
        let writes = match spec.name {
            "exec" => self.multi.as_ref().is_some_and(|queue| {
                queue.iter().any(|args| {
                    table::find(&String::from_utf8_lossy(&args[0]).to_ascii_lowercase())
                        .is_some_and(|spec| spec.flags.contains(&"write") || spec.name == "publish")
                })
            }),
            "publish" | "pfcount" | "eval" | "evalsha" | "fcall" => true,
            _ => spec.flags.contains(&"write"),
        };
        (all || writes).then_some(until)
    }

    /// Runs one command (`in_exec`: inside EXEC, where nothing blocks).
    fn run(
        &mut self,
        spec: &Spec,
        args: &[Vec<u8>],
        out: &mut Out,
        records: &mut dyn Records,
        namespace: &[u8],
        in_exec: bool,
    ) -> Flow {
        let result = match spec.name {
            "exec" => return Flow::Done,
            "ping" if !self.resp3 && self.is_subscribed() => {
                out.array(2);
                out.bulk(b"pong");
                out.bulk(args.get(1).map_or(b"".as_slice(), |m| m.as_slice()));
                Ok(())
            }
            "subscribe" | "psubscribe" => {
                let pattern = spec.name == "psubscribe";
                let Some(mailbox) = self.mailbox.clone() else {
                    return {
                        out.error("ERR this connection cannot subscribe");
                        Flow::Done
                    };
                };
                for name in &args[1..] {
                    let set = if pattern {
                        &mut self.patterns
                    } else {
                        &mut self.channels
                    };
                    if set.insert(name.clone()) {
                        self.shared.hub.subscribe(pattern, name, self.id, &mailbox);
                    }
                    out.push(3);
                    out.bulk(spec.name.as_bytes());
                    out.bulk(name);
                    out.int(self.subscriptions());
                }
                // CLIENT LIST shows the subscription counts.
                self.register();
                Ok(())
            }
            "unsubscribe" | "punsubscribe" => {
                let pattern = spec.name == "punsubscribe";
                let names: Vec<Vec<u8>> = if args.len() > 1 {
                    args[1..].to_vec()
                } else if pattern {
                    self.patterns.iter().cloned().collect()
                } else {
                    self.channels.iter().cloned().collect()
                };
                if names.is_empty() {
                    out.push(3);
                    out.bulk(spec.name.as_bytes());
                    out.null();
                    out.int(self.subscriptions());
                }
                for name in names {
                    let set = if pattern {
                        &mut self.patterns
                    } else {
                        &mut self.channels
                    };
                    set.remove(&name);
                    self.shared.hub.unsubscribe(pattern, &name, self.id);
                    out.push(3);
                    out.bulk(spec.name.as_bytes());
                    out.bulk(&name);
                    out.int(self.subscriptions());
                }
                self.register();
                Ok(())
            }
            "publish" => {
                out.int(self.shared.hub.publish(&args[1], &args[2]) as i64);
                Ok(())
            }
            "spublish" => {
                out.int(self.shared.hub.publish_shard(&args[1], &args[2]) as i64);
                Ok(())
            }
            "ssubscribe" => {
                let Some(mailbox) = self.mailbox.clone() else {
                    out.error("ERR this connection cannot subscribe");
                    return Flow::Done;
                };
                for name in &args[1..] {
                    if self.shard_channels.insert(name.clone()) {
                        self.shared.hub.subscribe_shard(name, self.id, &mailbox);
                    }
                    out.push(3);
                    out.bulk(b"ssubscribe");
                    out.bulk(name);
                    out.int(self.shard_channels.len() as i64);
                }
                self.register();
                Ok(())
            }
            "sunsubscribe" => {
                let names: Vec<Vec<u8>> = if args.len() > 1 {
                    args[1..].to_vec()
                } else {
                    self.shard_channels.iter().cloned().collect()
                };
                if names.is_empty() {
                    out.push(3);
                    out.bulk(b"sunsubscribe");
                    out.null();
                    out.int(0);
                }
                for name in names {
                    self.shard_channels.remove(&name);
                    self.shared.hub.unsubscribe_shard(&name, self.id);
                    out.push(3);
                    out.bulk(b"sunsubscribe");
                    out.bulk(&name);
                    out.int(self.shard_channels.len() as i64);
                }
                self.register();
                Ok(())
            }
            "pubsub" => {
                let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
                match sub.as_str() {
                    "channels" => {
                        let names = self.shared.hub.channels(args.get(2).map(|p| p.as_slice()));
                        out.array(names.len());
                        for name in names {
                            out.bulk(&name);
                        }
                        Ok(())
                    }
                    "numsub" => {
                        // A flat array in RESP3 too, as Redis 7.0 answers.
                        out.array(2 * (args.len() - 2));
                        for name in &args[2..] {
                            out.bulk(name);
                            out.int(self.shared.hub.subscribers(name) as i64);
                        }
                        Ok(())
                    }
                    "numpat" => {
                        out.int(self.shared.hub.pattern_count() as i64);
                        Ok(())
                    }
                    "shardchannels" => {
                        let names = self
                            .shared
                            .hub
                            .shard_channels(args.get(2).map(|p| p.as_slice()));
                        out.array(names.len());
                        for name in names {
                            out.bulk(&name);
                        }
                        Ok(())
                    }
                    "shardnumsub" => {
                        // A flat array in RESP3 too, as Redis 7.0 answers.
                        out.array(2 * (args.len() - 2));
                        for name in &args[2..] {
                            out.bulk(name);
                            out.int(self.shared.hub.shard_subscribers(name) as i64);
                        }
                        Ok(())
                    }
                    _ => Err(format!(
                        "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
                        truncate(&String::from_utf8_lossy(&args[1]))
                    )),
                }
            }
            "ping" => {
                match args.get(1) {
                    Some(message) if args.len() == 2 => out.bulk(message),
                    Some(_) => out.error("ERR wrong number of arguments for 'ping' command"),
                    None => out.simple("PONG"),
                }
                Ok(())
            }
            "echo" => {
                out.bulk(&args[1]);
                Ok(())
            }
            "quit" => {
                out.ok();
                return Flow::Close;
            }
            "reset" => {
                self.unsubscribe_all();
                self.multi = None;
                self.multi_failed = false;
                self.watched.clear();
                self.db = 0;
                self.resp3 = false;
                out.resp3 = false;
                self.name.clear();
                self.readonly = false;
                self.reply = Reply::On;
                if records.secured() {
                    // Back to the default user, which a secured node does
                    // not have: log in again.
                    self.user = None;
                }
                out.simple("RESET");
                Ok(())
            }
            "hello" => self.hello(args, out, records),
            "auth" => {
                let (user, password) = match args.len() {
                    2 => (b"default".as_slice(), &args[1]),
                    3 => (args[1].as_slice(), &args[2]),
                    _ => {
                        out.error("ERR syntax error");
                        return Flow::Done;
                    }
                };
                if !records.secured() && args.len() == 2 {
                    Err(
                        "ERR AUTH <password> called without any password configured for the \
                         default user. Are you sure your configuration is correct?"
                            .to_owned(),
                    )
                } else {
                    self.login(records, user, password).map(|()| out.ok())
                }
            }
            "acl" => {
                let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
                match sub.as_str() {
                    "whoami" if args.len() == 2 => {
                        out.bulk(self.user.as_deref().unwrap_or("default").as_bytes());
                        Ok(())
                    }
                    "whoami" => {
                        Err("ERR wrong number of arguments for 'acl|whoami' command".to_owned())
                    }
                    _ => Err(format!(
                        "ERR unknown subcommand '{}'. Try ACL HELP.",
                        truncate(&String::from_utf8_lossy(&args[1]))
                    )),
                }
            }
            "client" => self.client(args, out),
            "slowlog" => self.slowlog_command(args, out),
            "latency" => self.latency_command(args, out),
            "select" => match parse_i64(&args[1]) {
                Ok(db) if db != 0 && self.cluster.is_some() => {
                    Err("ERR SELECT is not allowed in cluster mode".to_owned())
                }
                Ok(db) if (0..DATABASES as i64).contains(&db) => {
                    self.db = db as usize;
                    out.ok();
                    Ok(())
                }
                Ok(_) => Err("ERR DB index is out of range".to_owned()),
                Err(error) => Err(error),
            },
            "info" => {
                let mut db = self.db(records, namespace, self.db);
                let text = self.info(args, &mut db);
                out.verbatim(text.as_bytes());
                Ok(())
            }
            "config" => self.config(args, out),
            "command" => command_command(args, out),
            "time" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                out.array(2);
                out.bulk(now.as_secs().to_string().as_bytes());
                out.bulk(now.subsec_micros().to_string().as_bytes());
                Ok(())
            }
            // Bolide persists by itself (its storage engine), and a node
            // is stopped by its operator, not by a client.
            "save" => {
                out.ok();
                Ok(())
            }
            "bgsave" => {
                out.simple("Background saving started");
                Ok(())
            }
            "bgrewriteaof" => {
                out.simple("Background append only file rewriting started");
                Ok(())
            }
            "shutdown" => Err("ERR Errors trying to SHUTDOWN. Check logs.".to_owned()),
            "lastsave" => {
                out.int(crate::keyspace::now_ms() as i64 / 1000);
                Ok(())
            }
            "role" => {
                out.array(3);
                out.bulk(b"master");
                out.int(0);
                out.array(0);
                Ok(())
            }
            "wait" => {
                out.int(0);
                Ok(())
            }
            "eval" | "eval_ro" | "evalsha" | "evalsha_ro" | "fcall" | "fcall_ro" | "script"
            | "function" => {
                let caller = crate::scripting::Caller {
                    db: self.db,
                    resp3: self.resp3,
                    cluster: self.cluster.clone(),
                    readonly: self.readonly,
                    user: self.user.clone(),
                };
                match crate::scripting::command(&self.shared, caller, args, out) {
                    crate::scripting::Answer::Done => Ok(()),
                    // Inside EXEC the script runs here: EXEC holds the
                    // node's turn.
                    crate::scripting::Answer::Engine(call) if in_exec => {
                        let reply = call.run_here(records, false);
                        out.buf.extend_from_slice(&reply);
                        Ok(())
                    }
                    crate::scripting::Answer::Engine(call) => return Flow::Script(call),
                }
            }
            "cluster" | "readonly" | "readwrite" if self.cluster.is_none() => {
                Err("ERR This instance has cluster support disabled".to_owned())
            }
            "readonly" | "readwrite" => {
                self.readonly = spec.name == "readonly";
                out.ok();
                Ok(())
            }
            "cluster" => {
                let mut db = self.db(records, namespace, self.db);
                self.cluster_command(args, out, &mut db)
            }
            "asking" => {
                out.ok();
                Ok(())
            }
            "multi" => {
                if self.multi.is_some() {
                    Err("ERR MULTI calls can not be nested".to_owned())
                } else {
                    self.multi = Some(Vec::new());
                    self.multi_failed = false;
                    out.ok();
                    Ok(())
                }
            }
            "discard" => {
                if self.multi.take().is_some() {
                    self.multi_failed = false;
                    self.watched.clear();
                    out.ok();
                    Ok(())
                } else {
                    Err("ERR DISCARD without MULTI".to_owned())
                }
            }
            "watch" => {
                if self.multi.is_some() {
                    Err("ERR WATCH inside MULTI is not allowed".to_owned())
                } else {
                    let db_index = self.db;
                    let mut db = self.db(records, namespace, db_index);
                    let mut seen = Vec::new();
                    let mut failed = None;
                    for key in &args[1..] {
                        match db.load(key) {
                            Ok(loaded) => seen.push((
                                db_index,
                                key.clone(),
                                loaded.generation.map(|g| (g, loaded.entry)),
                            )),
                            Err(error) => {
                                failed = Some(error);
                                break;
                            }
                        }
                    }
                    match failed {
                        Some(error) => Err(error),
                        None => {
                            self.watched.extend(seen);
                            out.ok();
                            Ok(())
                        }
                    }
                }
            }
            "unwatch" => {
                self.watched.clear();
                out.ok();
                Ok(())
            }
            "flushall" => {
                let mut result = Ok(());
                for index in 0..DATABASES {
                    if let Err(error) = self.db(records, namespace, index).flush() {
                        result = Err(error);
                    }
                }
                result.map(|()| out.ok())
            }
            _ => {
                // A waiter a write already served: its answer.
                let waiter = self.waiter.clone();
                let mut served = waiter.as_ref().map(|waiter| waiter.answer.lock());
                let taken = served.as_mut().and_then(|answer| answer.take());
                if let Some(answer) = taken {
                    drop(served);
                    out.buf.extend_from_slice(&answer);
                    self.block_deadline = None;
                    self.leave_block();
                    return Flow::Done;
                }
                let db_index = self.db;
                // A waiting connection looks again as its waiter says
                // (a stream read's `$` resolved when it started waiting).
                let args = match &waiter {
                    Some(waiter) if waiter.args[0].eq_ignore_ascii_case(&args[0]) => {
                        waiter.args.as_slice()
                    }
                    _ => args,
                };
                let mut db = self.db(records, namespace, db_index);
                let blocking = !in_exec;
                // While this connection waits, it tries its command under
                // its waiter's lock, so a writer cannot serve it meanwhile.
                let ran = match data::run(spec.name, args, out, &mut db, blocking) {
                    // A waiting connection whose key became another type
                    // keeps waiting (only its first try answers WRONGTYPE).
                    Err(error)
                        if self.waiter.is_some()
                            && error.starts_with("WRONGTYPE")
                            && !moves(spec.name) =>
                    {
                        Ok(data::Ran::Empty {
                            timeout: None,
                            null_bulk: self.block_null_bulk,
                        })
                    }
                    // A waiting XREADGROUP whose group went away.
                    Err(error)
                        if self.waiter.is_some()
                            && spec.name == "xreadgroup"
                            && error.starts_with("NOGROUP") =>
                    {
                        Err(crate::streams::blocked_group_gone(&mut db, args))
                    }
                    other => other,
                };
                drop(served);
                // A stream read waits as a pop does, and looks again with
                // the arguments it gave.
                let (ran, mut resume) = match ran {
                    Ok(data::Ran::Wait { timeout, resume }) => (
                        Ok(data::Ran::Empty {
                            timeout,
                            null_bulk: false,
                        }),
                        Some(resume),
                    ),
                    other => (other, None),
                };
                match ran {
                    Ok(data::Ran::Done) => {
                        self.block_deadline = None;
                        self.leave_block();
                        Ok(())
                    }
                    Ok(data::Ran::Empty { timeout, null_bulk }) => {
                        self.block_null_bulk = null_bulk;
                        // A blocking pop found nothing: wait, or time out
                        // (now, if CLIENT UNBLOCK said so).
                        let deadline = *self
                            .block_deadline
                            .get_or_insert_with(|| timeout.map(|t| Instant::now() + t));
                        let request = self.unblock_request();
                        if request == Some(true) {
                            self.block_deadline = None;
                            self.leave_block();
                            Err("UNBLOCKED client unblocked via CLIENT UNBLOCK".to_owned())
                        } else if request == Some(false)
                            || deadline.is_some_and(|d| Instant::now() >= d)
                        {
                            self.block_deadline = None;
                            self.leave_block();
                            if null_bulk {
                                out.null();
                            } else {
                                out.null_array();
                            }
                            Ok(())
                        } else {
                            self.enter_block();
                            if self.waiter.is_none() {
                                let waiter = Arc::new(Waiter {
                                    id: self.id,
                                    db: self.db,
                                    resp3: self.resp3,
                                    args: resume.take().unwrap_or_else(|| args.to_vec()),
                                    answer: Mutex::new(None),
                                });
                                self.shared.waiters.lock().push(Arc::clone(&waiter));
                                self.waiter = Some(waiter);
                            }
                            return Flow::Block;
                        }
                    }
                    // Made an Empty above.
                    Ok(data::Ran::Wait { .. }) => Err("ERR internal error".to_owned()),
                    Err(error) => {
                        self.block_deadline = None;
                        self.leave_block();
                        Err(error)
                    }
                }
            }
        };
        if let Err(error) = result {
            out.error(&error);
        }
        Flow::Done
    }

    /// (SC) Whether the records this command touches (for EXEC, the
    /// queued commands' and the watched ones) must first be copied to their
    /// replicas, as Aerospike copies a record whose last write did not
    /// reach them all before serving it: the backend has queued the copies
    /// and the command runs once they are done. After a few rounds it runs
    /// anyway (and answers TRYAGAIN if the copy is still not done).
    fn copies_first(&mut self, spec: &Spec, args: &[Vec<u8>], records: &mut dyn Records) -> bool {
        const ROUNDS_MAX: u8 = 3;
        if self.copy_rounds >= ROUNDS_MAX {
            self.copy_rounds = 0;
            return false;
        }
        let set = set_name(self.db);
        let mut keys: Vec<&[u8]> = table::keys(spec, args);
        if spec.name == "exec" {
            for queued in self.multi.iter().flatten() {
                let name = String::from_utf8_lossy(&queued[0]).to_ascii_lowercase();
                if let Some(spec) = table::find(&name) {
                    keys.extend(table::keys(spec, queued));
                }
            }
            keys.extend(self.watched.iter().map(|(_, key, _)| key.as_slice()));
        }
        if keys.is_empty() || !records.copy_first(&set, &keys) {
            self.copy_rounds = 0;
            return false;
        }
        self.copy_rounds += 1;
        true
    }

    fn exec(
        &mut self,
        out: &mut Out,
        records: &mut dyn Records,
        namespace: &[u8],
        _alone: Turn<'_>,
    ) -> Flow {
        let Some(queue) = self.multi.take() else {
            out.error("ERR EXEC without MULTI");
            return Flow::Done;
        };
        let watched = std::mem::take(&mut self.watched);
        if std::mem::take(&mut self.multi_failed) {
            out.error("EXECABORT Transaction discarded because of previous errors.");
            return Flow::Done;
        }
        for (db_index, key, seen) in &watched {
            let mut db = self.db(records, namespace, *db_index);
            let now = match db.load(key) {
                Ok(loaded) => loaded.generation.map(|g| (g, loaded.entry)),
                Err(error) => {
                    out.error(&error);
                    return Flow::Done;
                }
            };
            // A key that expired since WATCH counts as changed, as in
            // Redis 7.0; one absent (or already expired) both times does
            // not.
            let unchanged = match (seen, &now) {
                (None | Some((_, None)), None | Some((_, None))) => true,
                (Some((a, Some(_))), Some((b, Some(_)))) => a == b,
                _ => false,
            };
            if !unchanged {
                out.null_array();
                return Flow::Done;
            }
        }
        out.array(queue.len());
        for args in &queue {
            let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
            if let Some(spec) = table::find(&name) {
                self.shared.commands_processed.fetch_add(1, Relaxed);
                let started = Instant::now();
                let start = out.buf.len();
                if let Flow::Close = self.run(spec, args, out, records, namespace, true) {
                    // QUIT is not queued; nothing else closes.
                }
                self.slowlog(spec, args, started);
                let failed = out.buf.get(start) == Some(&b'-');
                self.shared
                    .count_command(spec, true, failed, started.elapsed());
            }
        }
        Flow::Done
    }

    /// Logs the connection in: on a secured node as a Bolide user; on an
    /// open node only `default` exists, and any password opens it (Redis's
    /// `nopass` default user).
    fn login(
        &mut self,
        records: &mut dyn Records,
        user: &[u8],
        password: &[u8],
    ) -> Result<(), String> {
        let user = String::from_utf8_lossy(user).into_owned();
        if records.secured() {
            records.login(&user, password)?;
        } else if user != "default" {
            return Err(crate::keyspace::WRONGPASS.to_owned());
        }
        self.user = Some(user);
        self.register();
        Ok(())
    }

    fn hello(
        &mut self,
        args: &[Vec<u8>],
        out: &mut Out,
        records: &mut dyn Records,
    ) -> Result<(), String> {
        let mut resp3 = self.resp3;
        let mut name = None;
        let mut auth = None;
        if let Some(version) = args.get(1) {
            match parse_i64(version) {
                Ok(2) => resp3 = false,
                Ok(3) => resp3 = true,
                Ok(_) => return Err("NOPROTO unsupported protocol version".to_owned()),
                Err(_) => {
                    return Err("ERR Protocol version is not an integer or out of range".to_owned())
                }
            }
            let mut at = 2;
            while at < args.len() {
                let option = String::from_utf8_lossy(&args[at]).to_ascii_lowercase();
                match option.as_str() {
                    "auth" if at + 2 < args.len() => {
                        auth = Some((args[at + 1].clone(), args[at + 2].clone()));
                        at += 3;
                    }
                    "setname" if at + 1 < args.len() => {
                        check_name(&args[at + 1])?;
                        name = Some(args[at + 1].clone());
                        at += 2;
                    }
                    _ => {
                        return Err(format!(
                            "ERR Syntax error in HELLO option '{}'",
                            String::from_utf8_lossy(&args[at])
                        ))
                    }
                }
            }
        }
        match auth {
            Some((user, password)) => self.login(records, &user, &password)?,
            None if records.secured() && self.user.is_none() => {
                return Err(
                    "NOAUTH HELLO must be called with the client already authenticated, \
                     otherwise the HELLO <proto> AUTH <user> <pass> option can be used to \
                     authenticate the client and select the RESP protocol version at the same \
                     time"
                        .to_owned(),
                )
            }
            None => {}
        }
        self.resp3 = resp3;
        out.resp3 = resp3;
        if let Some(mailbox) = &self.mailbox {
            mailbox.set_resp3(resp3);
        }
        if let Some(name) = name {
            self.name = name;
        }
        self.register();
        out.map(7);
        out.bulk(b"server");
        out.bulk(b"redis");
        out.bulk(b"version");
        out.bulk(REDIS_VERSION.as_bytes());
        out.bulk(b"proto");
        out.int(if resp3 { 3 } else { 2 });
        out.bulk(b"id");
        out.int(self.id as i64);
        out.bulk(b"mode");
        out.bulk(if self.cluster.is_some() {
            b"cluster".as_slice()
        } else {
            b"standalone"
        });
        out.bulk(b"role");
        out.bulk(b"master");
        out.bulk(b"modules");
        out.array(0);
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.unsubscribe_all();
        self.leave_block();
        self.shared.clients.lock().remove(&self.id);
        self.shared.wakers.lock().remove(&self.id);
        self.shared.killed.lock().remove(&self.id);
    }
}

/// The node's turn a command holds: shared by ordinary commands, alone
/// for EXEC (and a script's run).
pub(crate) enum Turn<'a> {
    Shared(#[allow(dead_code)] parking_lot::RwLockReadGuard<'a, ()>),
    Alone(#[allow(dead_code)] parking_lot::RwLockWriteGuard<'a, ()>),
}

/// Takes the node's turn, shared or `alone`; None while a script holds it
/// (the request waits and is tried again, so the event loop stays free to
/// answer others BUSY and take SCRIPT KILL).
fn turn(shared: &Shared, alone: bool) -> Option<Turn<'_>> {
    let slice = Duration::from_millis(1);
    loop {
        let taken = if alone {
            shared.exec.try_write_for(slice).map(Turn::Alone)
        } else {
            shared.exec.try_read_for(slice).map(Turn::Shared)
        };
        if taken.is_some() {
            return taken;
        }
        if shared.scripts.busy().is_some() {
            return None;
        }
    }
}

/// Whether a command writes (a script writes unless it is a `_ro` one).
pub(crate) fn is_write(spec: &Spec, _args: &[Vec<u8>]) -> bool {
    match spec.name {
        "eval" | "evalsha" | "fcall" => true,
        "eval_ro" | "evalsha_ro" | "fcall_ro" => false,
        _ => spec.flags.contains(&"write"),
    }
}

/// What a command needs of the connection's user on the database's set:
/// writes need write, reads of keys or of the keyspace need read, the
/// flushes need truncate; connection and server commands need nothing.
pub(crate) fn permission_of(
    spec: &Spec,
    args: &[Vec<u8>],
) -> Option<bolide_transaction::Permission> {
    use bolide_transaction::Permission;
    match spec.name {
        "flushdb" | "flushall" => Some(Permission::Truncate),
        "scan" | "keys" | "randomkey" | "dbsize" => Some(Permission::Read),
        _ if table::keys(spec, args).is_empty() => None,
        _ if is_write(spec, args) => Some(Permission::Write),
        _ => Some(Permission::Read),
    }
}

/// Redis Cluster's routing of one command: None when this node runs it,
/// else the error (`CROSSSLOT`, `MOVED`, `CLUSTERDOWN`).
fn route(
    map: &crate::cluster::ClusterMap,
    spec: &Spec,
    args: &[Vec<u8>],
    readonly: bool,
) -> Option<String> {
    let keys = table::keys(spec, args);
    let first = keys.first()?;
    let slot = crate::cluster::key_slot(first);
    if keys[1..]
        .iter()
        .any(|key| crate::cluster::key_slot(key) != slot)
    {
        return Some("CROSSSLOT Keys in request don't hash to the same slot".to_owned());
    }
    map.redirect(slot, is_write(spec, args), readonly)
}

fn check_name(name: &[u8]) -> Result<(), String> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(
            "ERR Client names cannot contain spaces, newlines or special characters.".to_owned(),
        );
    }
    Ok(())
}

fn truncate(text: &str) -> String {
    text.chars().take(128).collect()
}

pub fn parse_i64(bytes: &[u8]) -> Result<i64, String> {
    let error = || "ERR value is not an integer or out of range".to_owned();
    let text = std::str::from_utf8(bytes).map_err(|_| error())?;
    if text.is_empty()
        || text.starts_with('+')
        || (text.len() > 1 && text.starts_with('0'))
        || text.starts_with("-0")
    {
        return Err(error());
    }
    text.parse::<i64>().map_err(|_| error())
}

/// Redis's glob: `* ? [abc] [^a] [a-c]` and `\\` escapes, on bytes.
///
/// Runs in O(pattern × text): a mismatch goes back only to the last `*`
/// (an earlier star can never match more than the last one can), so a
/// pattern like `a*a*a*…b` cannot take exponential time.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    // Where to resume after the last star: pattern position, text position.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < pattern.len() {
            if pattern[pi] == b'*' {
                while pi < pattern.len() && pattern[pi] == b'*' {
                    pi += 1;
                }
                if pi == pattern.len() {
                    return true;
                }
                star = Some((pi, ti));
                continue;
            }
            if let Some(&byte) = text.get(ti) {
                if let Some(next) = glob_one(pattern, pi, byte) {
                    pi = next;
                    ti += 1;
                    continue;
                }
            }
        } else if ti == text.len() {
            return true;
        }
        match star {
            Some((resume, at)) if at < text.len() => {
                star = Some((resume, at + 1));
                pi = resume;
                ti = at + 1;
            }
            _ => return false,
        }
    }
}

/// Whether the pattern element at `pi` (not a star) matches `byte`: the
/// position after the element if it does.
fn glob_one(pattern: &[u8], mut pi: usize, byte: u8) -> Option<usize> {
    match pattern[pi] {
        b'?' => Some(pi + 1),
        b'\\' if pi + 1 < pattern.len() => (pattern[pi + 1] == byte).then_some(pi + 2),
        b'[' => {
            pi += 1;
            let negate = pattern.get(pi) == Some(&b'^');
            if negate {
                pi += 1;
            }
            let mut hit = false;
            while pi < pattern.len() && pattern[pi] != b']' {
                if pattern[pi] == b'\\' && pi + 1 < pattern.len() {
                    hit |= pattern[pi + 1] == byte;
                    pi += 2;
                } else if pi + 2 < pattern.len()
                    && pattern[pi + 1] == b'-'
                    && pattern[pi + 2] != b']'
                {
                    let (low, high) = (
                        pattern[pi].min(pattern[pi + 2]),
                        pattern[pi].max(pattern[pi + 2]),
                    );
                    hit |= (low..=high).contains(&byte);
                    pi += 3;
                } else {
                    hit |= pattern[pi] == byte;
                    pi += 1;
                }
            }
            (hit != negate).then_some(pi + 1)
        }
        literal => (literal == byte).then_some(pi + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_as_redis() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"h?llo", b"hello"));
        assert!(glob(b"h[ae]llo", b"hallo"));
        assert!(!glob(b"h[^e]llo", b"hello"));
        assert!(glob(b"h[a-b]llo", b"hbllo"));
        assert!(glob(b"k\\*", b"k*"));
        assert!(!glob(b"k\\*", b"kx"));
        assert!(glob(b"user:*:name", b"user:42:name"));
        assert!(!glob(b"a*b", b"acd"));
        assert!(glob(b"*b*", b"abc"));
        assert!(glob(b"a*c*e", b"abcde"));
        assert!(!glob(b"a*c*e", b"abcdf"));
        assert!(glob(b"", b""));
        assert!(!glob(b"", b"a"));
        assert!(glob(b"**", b""));
    }

    #[test]
    fn glob_of_many_stars_is_not_exponential() {
        // The Tcl suite's "Regression for pattern matching very long
        // nested loops": an exponential matcher never returns.
        let text = vec![b'a'; 10_000];
        let mut pattern = b"a".to_vec();
        for _ in 0..50 {
            pattern.extend_from_slice(b"*a");
        }
        pattern.push(b'b');
        let started = std::time::Instant::now();
        assert!(!glob(&pattern, &text));
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn integers_parse_strictly() {
        assert_eq!(parse_i64(b"-12"), Ok(-12));
        assert!(parse_i64(b"012").is_err());
        assert!(parse_i64(b" 1").is_err());
        assert!(parse_i64(b"9223372036854775808").is_err());
    }
}
