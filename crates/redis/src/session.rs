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
    /// This node has been in a cluster of two or more nodes since it
    /// started: it answers as a Redis Cluster node from then on, also when
    /// it is left alone.
    pub clustered: std::sync::atomic::AtomicBool,
    /// Lua scripts and function libraries, and the script running now.
    pub scripts: Arc<crate::scripting::Scripts>,
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
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
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
            connections_received: AtomicU64::new(0),
            commands_processed: AtomicU64::new(0),
            exec: RwLock::new(()),
            run_id: run_id[run_id.len() - 40..].to_owned(),
            hub: crate::pubsub::Hub::default(),
            cluster_map: Mutex::new(None),
            clustered: std::sync::atomic::AtomicBool::new(false),
            scripts: Arc::default(),
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
    Close,
    /// A script holds the node: try this request again shortly.
    Wait,
    Script(Box<crate::scripting::Call>),
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
    lib_name: Vec<u8>,
    lib_version: Vec<u8>,
    db: usize,
    pub resp3: bool,
    peer: String,
    local: String,
    created: Instant,
    last_command: String,
    /// Queued commands inside MULTI.
    multi: Option<Vec<Vec<Vec<u8>>>>,
    multi_failed: bool,
    /// WATCHed keys: (db, key, what the key was then).
    watched: Vec<Watched>,
    /// The deadline of the blocking command being retried.
    block_deadline: Option<Option<Instant>>,
    /// Where published messages for this connection wait (None: the
    /// connection cannot be woken, so it may not subscribe).
    mailbox: Option<Arc<crate::pubsub::Mailbox>>,
    channels: std::collections::BTreeSet<Vec<u8>>,
    patterns: std::collections::BTreeSet<Vec<u8>>,
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
        let session = Session {
            shared,
            id,
            name: Vec::new(),
            lib_name: Vec::new(),
            lib_version: Vec::new(),
            db: 0,
            resp3: false,
            peer,
            local,
            created: Instant::now(),
            last_command: "NULL".to_owned(),
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            block_deadline: None,
            mailbox: None,
            channels: Default::default(),
            patterns: Default::default(),
            cluster: None,
            readonly: false,
            user: None,
        };
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
        Session {
            shared,
            id: 0,
            name: Vec::new(),
            lib_name: Vec::new(),
            lib_version: Vec::new(),
            db,
            resp3: false,
            peer: String::new(),
            local: String::new(),
            created: Instant::now(),
            last_command: "NULL".to_owned(),
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            block_deadline: None,
            mailbox: None,
            channels: Default::default(),
            patterns: Default::default(),
            cluster,
            readonly,
            user,
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
        self.run(spec, args, out, records, namespace, true);
    }

    /// Lets the connection receive published messages: `wake` is called
    /// when one arrives, and [`Session::drain_messages`] takes them.
    pub fn set_wake(&mut self, wake: Arc<dyn crate::pubsub::Wake>) {
        self.mailbox = Some(Arc::new(crate::pubsub::Mailbox::new(wake)));
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
        !self.channels.is_empty() || !self.patterns.is_empty()
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
    }

    fn register(&self) {
        let line = self.client_line();
        self.shared.clients.lock().insert(self.id, line);
    }

    fn client_line(&self) -> String {
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle=0 flags={} db={} sub=0 psub=0 ssub=0 multi={} \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=1024 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 \
             events=r cmd={} user={} lib-name={} lib-ver={} redir=-1 resp={}",
            self.id,
            self.peer,
            self.local,
            String::from_utf8_lossy(&self.name),
            self.created.elapsed().as_secs(),
            if self.multi.is_some() { "x" } else { "N" },
            self.db,
            self.multi.as_ref().map_or(-1, |queue| queue.len() as i64),
            self.last_command,
            self.user.as_deref().unwrap_or("default"),
            String::from_utf8_lossy(&self.lib_name),
            String::from_utf8_lossy(&self.lib_version),
            if self.resp3 { 3 } else { 2 },
        )
    }

    fn db<'r>(&self, records: &'r mut dyn Records, namespace: &'r [u8], db: usize) -> Db<'r> {
        Db {
            records,
            namespace,
            set: set_name(db),
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
            match self.command(&args, &mut reply, records) {
                Flow::Done => used += length,
                Flow::Close => {
                    used += length;
                    break Step::Close;
                }
                Flow::Block => {
                    let deadline = self.block_deadline.flatten();
                    let poll = Instant::now() + BLOCK_POLL;
                    break Step::Block(deadline.map_or(poll, |d| d.min(poll)));
                }
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

    fn command(&mut self, args: &[Vec<u8>], out: &mut Out, records: &mut dyn Records) -> Flow {
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
                if self.multi.is_some() {
                    self.multi_failed = true;
                }
                out.error(if eval {
                    crate::scripting::BUSY_EVAL
                } else {
                    crate::scripting::BUSY_FUNCTION
                });
                return Flow::Done;
            }
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
            out.simple("QUEUED");
            return Flow::Done;
        }
        self.shared.commands_processed.fetch_add(1, Relaxed);
        self.last_command = spec.name.to_owned();
        let namespace = self.shared.namespace.clone();
        let shared = Arc::clone(&self.shared);
        if spec.name == "exec" {
            // EXEC runs holding the node's turn alone.
            let Some(alone) = turn(&shared, true) else {
                return Flow::Wait;
            };
            return self.exec(out, records, namespace.as_bytes(), alone);
        }
        if busy.is_some() || crate::scripting::needs_engine(spec, args) {
            // Answered without the node's turn: the engine takes it for a
            // script's run, and what runs while a script is busy only
            // looks at the script.
            return self.run(spec, args, out, records, namespace.as_bytes(), false);
        }
        let Some(_turn) = turn(&shared, false) else {
            return Flow::Wait;
        };
        self.run(spec, args, out, records, namespace.as_bytes(), false)
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
                Ok(())
            }
            "publish" => {
                out.int(self.shared.hub.publish(&args[1], &args[2]) as i64);
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
                        out.map(args.len() - 2);
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
                let db_index = self.db;
                let mut db = self.db(records, namespace, db_index);
                let blocking = !in_exec;
                match data::run(spec.name, args, out, &mut db, blocking) {
                    Ok(data::Ran::Done) => {
                        self.block_deadline = None;
                        Ok(())
                    }
                    Ok(data::Ran::Empty { timeout, null_bulk }) => {
                        // A blocking pop found nothing: wait, or time out.
                        let deadline = *self
                            .block_deadline
                            .get_or_insert_with(|| timeout.map(|t| Instant::now() + t));
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            self.block_deadline = None;
                            if null_bulk {
                                out.null();
                            } else {
                                out.null_array();
                            }
                            Ok(())
                        } else {
                            return Flow::Block;
                        }
                    }
                    Err(error) => {
                        self.block_deadline = None;
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
            let unchanged = match (seen, &now) {
                (None, None) => true,
                (Some((_, None)), None) => true,
                (None, Some((_, None))) => true,
                (Some((a, _)), Some((b, _))) => a == b,
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
                if let Flow::Close = self.run(spec, args, out, records, namespace, true) {
                    // QUIT is not queued; nothing else closes.
                }
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

    /// `CLUSTER …` on a node that answers as a Redis Cluster node.
    fn cluster_command(
        &mut self,
        args: &[Vec<u8>],
        out: &mut Out,
        db: &mut Db<'_>,
    ) -> Result<(), String> {
        let Some(map) = self.cluster.clone() else {
            return Err("ERR This instance has cluster support disabled".to_owned());
        };
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let arity = |n: usize| -> Result<(), String> {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "ERR wrong number of arguments for 'cluster|{sub}' command"
                ))
            }
        };
        match sub.as_str() {
            "slots" => {
                arity(2)?;
                map.slots(out);
            }
            "shards" => {
                arity(2)?;
                map.shards(out);
            }
            "nodes" => {
                arity(2)?;
                out.verbatim(map.nodes_text().as_bytes());
            }
            "info" => {
                arity(2)?;
                out.verbatim(map.info_text().as_bytes());
            }
            "myid" => {
                arity(2)?;
                out.bulk(map.my_id().as_bytes());
            }
            "keyslot" => {
                arity(3)?;
                out.int(crate::cluster::key_slot(&args[2]) as i64);
            }
            "countkeysinslot" | "getkeysinslot" => {
                arity(if sub == "countkeysinslot" { 3 } else { 4 })?;
                let slot = parse_i64(&args[2])
                    .ok()
                    .filter(|slot| (0..crate::cluster::SLOTS as i64).contains(slot))
                    .ok_or_else(|| "ERR Invalid slot".to_owned())?
                    as usize;
                let limit = match args.get(3) {
                    Some(count) => parse_i64(count)
                        .ok()
                        .filter(|&n| n >= 0)
                        .ok_or_else(|| "ERR Invalid number of keys".to_owned())?
                        as usize,
                    None => usize::MAX,
                };
                // This node's copy of the slot's partition (empty where it
                // holds none), as Redis counts its own slots.
                let mut keys = db
                    .partition_keys(crate::cluster::slot_partition(slot), &mut |key, _| {
                        crate::cluster::key_slot(key) == slot
                    });
                if sub == "countkeysinslot" {
                    out.int(keys.len() as i64);
                } else {
                    keys.sort();
                    keys.truncate(limit);
                    out.array(keys.len());
                    for key in &keys {
                        out.bulk(key);
                    }
                }
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    fn client(&mut self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let arity = |n: usize, exact: bool| -> Result<(), String> {
            if (exact && args.len() != n) || (!exact && args.len() < n) {
                Err(format!(
                    "ERR wrong number of arguments for 'client|{sub}' command"
                ))
            } else {
                Ok(())
            }
        };
        match sub.as_str() {
            "id" => {
                arity(2, true)?;
                out.int(self.id as i64);
            }
            "setname" => {
                arity(3, true)?;
                check_name(&args[2])?;
                self.name = args[2].clone();
                self.register();
                out.ok();
            }
            "getname" => {
                arity(2, true)?;
                if self.name.is_empty() {
                    out.null();
                } else {
                    out.bulk(&self.name);
                }
            }
            "setinfo" => {
                arity(4, true)?;
                let attribute = String::from_utf8_lossy(&args[2]).to_ascii_lowercase();
                let value = &args[3];
                if value
                    .iter()
                    .any(|&b| b == b' ' || b == b'\n' || !(b'!'..=b'~').contains(&b))
                {
                    return Err(format!(
                        "ERR {} cannot contain spaces, newlines or special characters.",
                        attribute.to_ascii_uppercase()
                    ));
                }
                match attribute.as_str() {
                    "lib-name" => self.lib_name = value.clone(),
                    "lib-ver" => self.lib_version = value.clone(),
                    _ => {
                        return Err(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&args[2])
                        ))
                    }
                }
                self.register();
                out.ok();
            }
            "info" => {
                arity(2, true)?;
                let line = format!("{}\n", self.client_line());
                out.verbatim(line.as_bytes());
            }
            "list" => {
                self.register();
                let mut text = String::new();
                for line in self.shared.clients.lock().values() {
                    text.push_str(line);
                    text.push('\n');
                }
                out.verbatim(text.as_bytes());
            }
            "reply" | "no-evict" | "no-touch" | "tracking" => {
                out.ok();
            }
            "help" => {
                let lines = [
                    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "ID",
                    "GETNAME",
                    "SETNAME <name>",
                    "SETINFO <option> <value>",
                    "INFO",
                    "LIST",
                    "HELP",
                ];
                out.array(lines.len());
                for line in lines {
                    out.simple(line);
                }
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    fn config(&mut self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match sub.as_str() {
            "get" => {
                if args.len() < 3 {
                    return Err("ERR wrong number of arguments for 'config|get' command".to_owned());
                }
                let config = self.shared.config.lock();
                let mut found: Vec<(&String, &String)> = Vec::new();
                for pattern in &args[2..] {
                    let pattern = pattern.to_ascii_lowercase();
                    for (name, value) in config.iter() {
                        if glob(&pattern, name.as_bytes()) && !found.iter().any(|(n, _)| *n == name)
                        {
                            found.push((name, value));
                        }
                    }
                }
                out.map(found.len());
                for (name, value) in found {
                    out.bulk(name.as_bytes());
                    out.bulk(value.as_bytes());
                }
            }
            "set" => {
                if args.len() < 4 || !args.len().is_multiple_of(2) {
                    return Err("ERR wrong number of arguments for 'config|set' command".to_owned());
                }
                let mut config = self.shared.config.lock();
                for pair in args[2..].chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    if !config.contains_key(&name) {
                        return Err(format!(
                            "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                            String::from_utf8_lossy(&pair[0])
                        ));
                    }
                }
                for pair in args[2..].chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    let value = String::from_utf8_lossy(&pair[1]).into_owned();
                    // Two names of one setting.
                    if name == "busy-reply-threshold" || name == "lua-time-limit" {
                        config.insert("busy-reply-threshold".to_owned(), value.clone());
                        config.insert("lua-time-limit".to_owned(), value);
                        continue;
                    }
                    config.insert(name, value);
                }
                out.ok();
            }
            "resetstat" | "rewrite" => out.ok(),
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    fn info(&self, args: &[Vec<u8>], db: &mut Db<'_>) -> String {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
        let want = |section: &str| all || wanted.iter().any(|w| w == section);
        let mut text = String::new();
        let uptime = self.shared.started.elapsed().as_secs();
        if want("server") {
            text.push_str(&format!(
                "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
                 redis_build_id:0\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\n\
                 server_name:bolide\r\nbolide_version:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\n\
                 uptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nexecutable:bolided\r\n\r\n",
                std::env::consts::OS,
                std::env::consts::ARCH,
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                self.shared.run_id,
                self.shared.port,
                uptime / 86400,
            ));
        }
        if want("clients") {
            text.push_str(&format!(
                "# Clients\r\nconnected_clients:{}\r\nblocked_clients:0\r\ntracking_clients:0\r\n\r\n",
                self.shared.clients.lock().len()
            ));
        }
        if want("memory") {
            let used = db
                .records
                .store()
                .namespace(db.namespace)
                .map_or(0, |ns| ns.memory_used_bytes());
            text.push_str(&format!(
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\nmaxmemory:0\r\n\
                 maxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\n\r\n",
                used as f64 / (1 << 20) as f64
            ));
        }
        if want("persistence") {
            text.push_str("# Persistence\r\nloading:0\r\nasync_loading:0\r\naof_enabled:0\r\nrdb_changes_since_last_save:0\r\n\r\n");
        }
        if want("stats") {
            text.push_str(&format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
                 instantaneous_ops_per_sec:0\r\nexpired_keys:0\r\nevicted_keys:0\r\nkeyspace_hits:0\r\n\
                 keyspace_misses:0\r\n\r\n",
                self.shared.connections_received.load(Relaxed),
                self.shared.commands_processed.load(Relaxed),
            ));
        }
        if want("replication") {
            text.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
        }
        if want("cpu") {
            text.push_str("# CPU\r\n\r\n");
        }
        if want("modules") {
            text.push_str("# Modules\r\n\r\n");
        }
        if want("errorstats") {
            text.push_str("# Errorstats\r\n\r\n");
        }
        if want("cluster") {
            text.push_str(if self.cluster.is_some() {
                "# Cluster\r\ncluster_enabled:1\r\n\r\n"
            } else {
                "# Cluster\r\ncluster_enabled:0\r\n\r\n"
            });
        }
        if want("keyspace") {
            text.push_str("# Keyspace\r\n");
            for index in 0..DATABASES {
                let mut other = Db {
                    records: &mut *db.records,
                    namespace: db.namespace,
                    set: set_name(index),
                };
                let keys = data::count_keys(&mut other);
                if keys > 0 {
                    text.push_str(&format!("db{index}:keys={keys},expires=0,avg_ttl=0\r\n"));
                }
            }
            text.push_str("\r\n");
        }
        while text.ends_with("\r\n\r\n") {
            text.truncate(text.len() - 2);
        }
        text
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.unsubscribe_all();
        self.shared.clients.lock().remove(&self.id);
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

/// Redis's glob: `* ? [abc] [^a] [a-c]` and `\` escapes, on bytes.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    fn matches(p: &[u8], t: &[u8], depth: usize) -> bool {
        if depth > 1000 {
            return false;
        }
        let (mut pi, mut ti) = (0, 0);
        while pi < p.len() {
            match p[pi] {
                b'*' => {
                    while pi + 1 < p.len() && p[pi + 1] == b'*' {
                        pi += 1;
                    }
                    if pi + 1 == p.len() {
                        return true;
                    }
                    for start in ti..=t.len() {
                        if matches(&p[pi + 1..], &t[start..], depth + 1) {
                            return true;
                        }
                    }
                    return false;
                }
                b'?' => {
                    if ti >= t.len() {
                        return false;
                    }
                    ti += 1;
                    pi += 1;
                }
                b'[' => {
                    if ti >= t.len() {
                        return false;
                    }
                    pi += 1;
                    let negate = p.get(pi) == Some(&b'^');
                    if negate {
                        pi += 1;
                    }
                    let mut hit = false;
                    while pi < p.len() && p[pi] != b']' {
                        if p[pi] == b'\\' && pi + 1 < p.len() {
                            pi += 1;
                            hit |= p[pi] == t[ti];
                            pi += 1;
                        } else if pi + 2 < p.len() && p[pi + 1] == b'-' && p[pi + 2] != b']' {
                            let (low, high) = (p[pi].min(p[pi + 2]), p[pi].max(p[pi + 2]));
                            hit |= (low..=high).contains(&t[ti]);
                            pi += 3;
                        } else {
                            hit |= p[pi] == t[ti];
                            pi += 1;
                        }
                    }
                    pi += 1;
                    if hit == negate {
                        return false;
                    }
                    ti += 1;
                }
                b'\\' if pi + 1 < p.len() => {
                    if ti >= t.len() || p[pi + 1] != t[ti] {
                        return false;
                    }
                    pi += 2;
                    ti += 1;
                }
                byte => {
                    if ti >= t.len() || byte != t[ti] {
                        return false;
                    }
                    pi += 1;
                    ti += 1;
                }
            }
        }
        ti == t.len()
    }
    matches(pattern, text, 0)
}

fn command_command(args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
    let sub = args
        .get(1)
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    let describe = |out: &mut Out, spec: &Spec| {
        out.array(10);
        out.bulk(spec.name.as_bytes());
        out.int(i64::from(spec.arity));
        out.set(spec.flags.len());
        for flag in spec.flags {
            out.simple(flag);
        }
        out.int(i64::from(spec.first));
        out.int(i64::from(spec.last));
        out.int(i64::from(spec.step));
        out.set(1);
        out.simple(&format!("@{}", spec.category));
        out.set(0);
        out.array(0);
        out.array(0);
    };
    match sub.as_deref() {
        None => {
            out.array(table::COMMANDS.len());
            for spec in table::COMMANDS {
                describe(out, spec);
            }
        }
        Some("count") => out.int(table::COMMANDS.len() as i64),
        Some("info") => {
            let names: Vec<String> = if args.len() > 2 {
                args[2..]
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                    .collect()
            } else {
                table::COMMANDS.iter().map(|s| s.name.to_owned()).collect()
            };
            out.array(names.len());
            for name in names {
                match table::find(&name) {
                    Some(spec) => describe(out, spec),
                    None => out.null_array(),
                }
            }
        }
        Some("docs") => {
            let specs: Vec<&Spec> = if args.len() > 2 {
                args[2..]
                    .iter()
                    .filter_map(|a| table::find(&String::from_utf8_lossy(a).to_ascii_lowercase()))
                    .collect()
            } else {
                table::COMMANDS.iter().collect()
            };
            out.map(specs.len());
            for spec in specs {
                out.bulk(spec.name.as_bytes());
                out.map(3);
                out.bulk(b"summary");
                out.bulk(
                    format!("the Redis {} command", spec.name.to_ascii_uppercase()).as_bytes(),
                );
                out.bulk(b"since");
                out.bulk(b"1.0.0");
                out.bulk(b"group");
                out.bulk(spec.category.as_bytes());
            }
        }
        Some("getkeys") => {
            let name = args
                .get(2)
                .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                .unwrap_or_default();
            let Some(spec) = table::find(&name) else {
                return Err("ERR Invalid command specified".to_owned());
            };
            let keys = table::keys(spec, &args[2..]);
            if keys.is_empty() {
                return Err("ERR The command has no key arguments".to_owned());
            }
            out.array(keys.len());
            for key in keys {
                out.bulk(key);
            }
        }
        Some(other) => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                truncate(other)
            ))
        }
    }
    Ok(())
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
    }

    #[test]
    fn integers_parse_strictly() {
        assert_eq!(parse_i64(b"-12"), Ok(-12));
        assert!(parse_i64(b"012").is_err());
        assert!(parse_i64(b" 1").is_err());
        assert!(parse_i64(b"9223372036854775808").is_err());
    }
}
