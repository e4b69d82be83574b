//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT, FUNCTION,
//! FCALL and FCALL_RO with Redis 7.0.15's replies and error strings.
//!
//! Scripts run in Redis's environment (`lua.rs`, `prelude.lua`) on Lua
//! 5.4, on one engine thread per node (`redis-lua`) that owns the Lua
//! states: one for EVAL scripts, one for function libraries, as Redis
//! keeps them. A connection hands its script to the engine
//! ([`Call`], `Step::Script`) and its event loop goes on serving other
//! connections, so they can be told `BUSY` and send `SCRIPT KILL`. While
//! a script runs it holds the node's exclusive turn, the one EXEC takes:
//! no other Redis command runs between its calls. A script inside
//! MULTI/EXEC runs on the thread running EXEC, which holds that turn.
//!
//! Scripts loaded with SCRIPT LOAD and the function libraries travel to
//! every node of a Bolide cluster as cluster metadata (modules
//! [`SCRIPT_MODULE`] and [`FUNCTION_MODULE`]; the server wires
//! [`Scripts::set_spread`] and [`Scripts::apply_shared`]), so EVALSHA and
//! FCALL work on whichever node a key's slot lives; the libraries are also
//! saved, as a FUNCTION DUMP payload, in the node's work directory and
//! loaded at start. A script EVAL compiles stays in its node's cache.

mod json;
pub mod library;
pub mod lua;
mod msgpack;
mod structs;

use crate::cluster::ClusterMap;
use crate::keyspace::{set_name, Records};
use crate::resp::Out;
use crate::session::{Session, Shared};
use crate::table::{self, Spec};
use base64::Engine as _;
use library::{FunctionInfo, Libraries, Library};
use lua::{Host, Vm};
use mlua::Function;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
/// The cluster metadata module EVAL scripts travel in (key: SHA1, value:
/// the body in base64).
pub const SCRIPT_MODULE: &str = "redis-script";
/// The cluster metadata module function libraries travel in (key: the
/// library's name, value: its code in base64).
pub const FUNCTION_MODULE: &str = "redis-function";
/// How long FUNCTION LOAD may run a library's top level.
const LOAD_TIMEOUT: Duration = Duration::from_millis(500);
/// How long SCRIPT LOAD and FUNCTION LOAD wait, on a node of a cluster,
/// before answering: the script or library goes to the other nodes as
/// cluster metadata, which takes a moment, and a client's very next
/// EVALSHA or FCALL may go to one of them (redis-py's Script object does
/// exactly that after NOSCRIPT).
const SPREAD_WAIT: Duration = Duration::from_millis(200);
/// The engine thread's stack (reply conversion recurses into tables).
const ENGINE_STACK_BYTES: usize = 16 << 20;

/// Commands a script may not call (Redis 7.0's `noscript` commands that
/// Bolide serves).
const NOT_FROM_SCRIPTS: &[&str] = &[
    "auth",
    "hello",
    "quit",
    "reset",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "blpop",
    "brpop",
    "blmove",
    "bzpopmin",
    "bzpopmax",
    "wait",
    "role",
    "client",
    "config",
    "function",
    "script",
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
    "acl",
];

/// A cached EVAL script.
struct Script {
    body: Arc<[u8]>,
}

/// What a script's shebang (`#!lua flags=…`) declares; a script without
/// one runs in Redis's compatibility mode.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Flags {
    shebang: bool,
    no_writes: bool,
    no_cluster: bool,
    allow_cross_slot: bool,
}

impl Flags {
    fn of(names: &[&str]) -> Flags {
        Flags {
            shebang: true,
            no_writes: names.contains(&"no-writes"),
            no_cluster: names.contains(&"no-cluster"),
            allow_cross_slot: names.contains(&"allow-cross-slot-keys"),
        }
    }
}

/// The script running now.
struct Running {
    started: Instant,
    eval: bool,
    name: String,
    command: Vec<Vec<u8>>,
    /// It has run a write command (SCRIPT KILL then refuses).
    wrote: bool,
}

/// A job for the engine thread.
pub type Job = Box<dyn FnOnce(&mut Engine) + Send>;

/// Spreads a change to the other nodes: module, key, value, deleted.
pub type Spread = Arc<dyn Fn(&str, &str, &str, bool) + Send + Sync>;

/// Per (module, key), this node's changes not back yet: (deleted, value).
type OwnPending = HashMap<(String, String), Vec<(bool, String)>>;

/// The node's scripts: the EVAL cache, the function libraries, the script
/// running now, and the engine thread.
pub struct Scripts {
    id: u64,
    hook: Arc<lua::Hook>,
    cache: Mutex<HashMap<String, Script>>,
    /// Bumped by SCRIPT FLUSH: engines drop their compiled scripts.
    cache_epoch: AtomicU64,
    libraries: Mutex<Libraries>,
    /// Bumped by every change to the libraries: engines reload them.
    libraries_epoch: AtomicU64,
    running: Mutex<Option<Running>>,
    engine: Mutex<Option<mpsc::Sender<Job>>>,
    spread: Mutex<Option<Spread>>,
    /// This node's own changes spread and not back from the cluster yet,
    /// per (module, key), oldest first: (deleted, value). The echo of an
    /// older one must not undo a newer one (FUNCTION DELETE then LOAD: the
    /// delete coming back removed the library just loaded again, and an
    /// FCALL right after the LOAD answered "Function not found"). A library
    /// change is noted, and its echo judged, under the libraries' lock.
    own_pending: Mutex<OwnPending>,
    /// Where the libraries are saved (a FUNCTION DUMP payload).
    save_path: Mutex<Option<PathBuf>>,
}

static NEXT_SCRIPTS_ID: AtomicU64 = AtomicU64::new(1);

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts {
            id: NEXT_SCRIPTS_ID.fetch_add(1, Relaxed),
            hook: Arc::default(),
            cache: Mutex::new(HashMap::new()),
            cache_epoch: AtomicU64::new(0),
            libraries: Mutex::new(Libraries::new()),
            libraries_epoch: AtomicU64::new(0),
            running: Mutex::new(None),
            engine: Mutex::new(None),
            spread: Mutex::new(None),
            own_pending: Mutex::new(HashMap::new()),
            save_path: Mutex::new(None),
        }
    }
}

impl Scripts {
    /// Runs `job` on the engine thread (started on first use).
    pub fn submit(&self, job: Job) {
        let mut engine = self.engine.lock();
        if engine.is_none() {
            let (sender, receiver) = mpsc::channel::<Job>();
            let id = self.id;
            let spawned = std::thread::Builder::new()
                .name("redis-lua".to_owned())
                .stack_size(ENGINE_STACK_BYTES)
                .spawn(move || {
                    let mut engine = Engine::new(id);
                    for job in receiver {
                        job(&mut engine);
                    }
                });
            if let Err(error) = spawned {
                tracing::error!(%error, "redis: cannot start the script engine thread");
                return;
            }
            *engine = Some(sender);
        }
        if let Some(sender) = engine.as_ref() {
            let _ = sender.send(job);
        }
    }

    /// The running script's age and whether it is an EVAL (not a function).
    pub fn busy(&self) -> Option<(Duration, bool)> {
        self.running
            .lock()
            .as_ref()
            .map(|running| (running.started.elapsed(), running.eval))
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL.
    pub fn kill(&self, eval: bool) -> Result<(), String> {
        let running = self.running.lock();
        let Some(running) = running.as_ref() else {
            return Err("NOTBUSY No scripts in execution right now.".to_owned());
        };
        if running.wrote {
            return Err(
                "UNKILLABLE Sorry the script already executed write commands against the \
                        dataset. You can either wait the script termination or kill the server \
                        in a hard way using the SHUTDOWN NOSAVE command."
                    .to_owned(),
            );
        }
        if eval && !running.eval {
            return Err(BUSY_FUNCTION.to_owned());
        }
        if !eval && running.eval {
            return Err(BUSY_EVAL.to_owned());
        }
        self.hook.kill.store(true, Relaxed);
        Ok(())
    }

    fn start(&self, eval: bool, name: &str, command: &[Vec<u8>]) {
        let mut running = self.running.lock();
        self.hook.kill.store(false, Relaxed);
        *running = Some(Running {
            started: Instant::now(),
            eval,
            name: name.to_owned(),
            command: command.to_vec(),
            wrote: false,
        });
    }

    fn finish(&self) {
        let mut running = self.running.lock();
        *running = None;
        self.hook.kill.store(false, Relaxed);
    }

    fn mark_wrote(&self) {
        if let Some(running) = self.running.lock().as_mut() {
            running.wrote = true;
        }
    }

    /// Whether an EVALSHA's script is cached.
    pub fn cached(&self, sha: &str) -> bool {
        self.cache.lock().contains_key(sha)
    }

    /// How script and library changes reach the other nodes.
    pub fn set_spread(&self, spread: Spread) {
        *self.spread.lock() = Some(spread);
    }

    /// Saves the libraries at `path` from now on, after loading the ones
    /// saved there before (on the engine thread).
    pub fn set_save_path(self: &Arc<Self>, path: PathBuf) {
        let saved = std::fs::read(&path).ok();
        *self.save_path.lock() = Some(path);
        let Some(payload) = saved else {
            return;
        };
        match library::restore(&payload) {
            Ok(codes) => {
                for code in codes {
                    self.apply_library(code);
                }
            }
            Err(error) => tracing::warn!(%error, "redis: the saved function libraries are damaged"),
        }
    }

    fn share(&self, module: &str, key: &str, value: Option<&[u8]>) {
        let spread = self.spread.lock().clone();
        if let Some(spread) = spread {
            let text = value
                .map(|v| base64::engine::general_purpose::STANDARD.encode(v))
                .unwrap_or_default();
            self.own_pending
                .lock()
                .entry((module.to_owned(), key.to_owned()))
                .or_default()
                .push((value.is_none(), text.clone()));
            spread(module, key, &text, value.is_none());
        }
    }

    /// Whether a shared item is the echo of one of this node's own changes
    /// that a newer change of its own has overtaken (then it is not
    /// applied). The echo of the newest is applied, which changes nothing.
    fn overtaken_echo(&self, module: &str, key: &str, value: &str, deleted: bool) -> bool {
        let mut own = self.own_pending.lock();
        let id = (module.to_owned(), key.to_owned());
        let Some(pending) = own.get_mut(&id) else {
            return false;
        };
        let Some(at) = pending
            .iter()
            .position(|(was_deleted, text)| *was_deleted == deleted && (deleted || text == value))
        else {
            return false;
        };
        pending.drain(..=at);
        if pending.is_empty() {
            own.remove(&id);
            false
        } else {
            true
        }
    }

    /// A script or library another node shared (or this one, back from
    /// the cluster).
    pub fn apply_shared(self: &Arc<Self>, module: &str, key: &str, value: &str, deleted: bool) {
        let decoded = || base64::engine::general_purpose::STANDARD.decode(value).ok();
        if module == FUNCTION_MODULE {
            let mut libraries = self.libraries.lock();
            if self.overtaken_echo(module, key, value, deleted) {
                return;
            }
            if deleted {
                if libraries.remove(key).is_some() {
                    self.libraries_changed(&libraries);
                }
                return;
            }
            let Some(code) = decoded() else {
                tracing::warn!(library = key, "redis: a bad library from the cluster");
                return;
            };
            if libraries.values().any(|library| library.code == code) {
                return;
            }
            drop(libraries);
            self.load_on_engine(code);
            return;
        }
        if self.overtaken_echo(module, key, value, deleted) {
            return;
        }
        match module {
            SCRIPT_MODULE if deleted => {
                // Compiled copies go with the next look at the epoch.
                let removed = self.cache.lock().remove(key).is_some();
                if removed {
                    self.cache_epoch.fetch_add(1, Relaxed);
                }
            }
            SCRIPT_MODULE => {
                let Some(body) = decoded().filter(|body| lua::sha1_hex(body) == key) else {
                    tracing::warn!(sha = key, "redis: a bad script from the cluster");
                    return;
                };
                self.cache
                    .lock()
                    .entry(key.to_owned())
                    .or_insert_with(|| Script {
                        body: Arc::from(body),
                    });
            }
            _ => {}
        }
    }

    /// Loads a library (replacing one of its name) on the engine thread,
    /// unless it is loaded already.
    fn apply_library(self: &Arc<Self>, code: Vec<u8>) {
        if self
            .libraries
            .lock()
            .values()
            .any(|library| library.code == code)
        {
            return;
        }
        self.load_on_engine(code);
    }

    fn load_on_engine(self: &Arc<Self>, code: Vec<u8>) {
        let scripts = Arc::clone(self);
        self.submit(Box::new(move |engine| {
            if let Err(error) = load_library(engine, &scripts, &code, true, false) {
                tracing::warn!(%error, "redis: a function library from the cluster did not load");
            }
        }));
    }

    fn flush_cache(&self) {
        let mut cache = self.cache.lock();
        for sha in cache.keys() {
            self.share(SCRIPT_MODULE, sha, None);
        }
        cache.clear();
        self.cache_epoch.fetch_add(1, Relaxed);
    }

    /// After a change to the libraries (their lock held): engines reload
    /// them, and the saved copy follows.
    fn libraries_changed(&self, libraries: &Libraries) -> u64 {
        let epoch = self.libraries_epoch.fetch_add(1, Relaxed) + 1;
        if let Some(path) = self.save_path.lock().as_ref() {
            let payload = library::dump(libraries);
            let temporary = path.with_extension("tmp");
            let saved = std::fs::write(&temporary, &payload)
                .and_then(|()| std::fs::rename(&temporary, path));
            if let Err(error) = saved {
                tracing::warn!(%error, path = %path.display(), "redis: cannot save the function libraries");
            }
        }
        epoch
    }

    fn delete_library(&self, name: &str) -> bool {
        let mut libraries = self.libraries.lock();
        if libraries.remove(name).is_none() {
            return false;
        }
        self.libraries_changed(&libraries);
        self.share(FUNCTION_MODULE, name, None);
        true
    }

    fn flush_libraries(&self) {
        let mut libraries = self.libraries.lock();
        for name in libraries.keys() {
            self.share(FUNCTION_MODULE, name, None);
        }
        libraries.clear();
        self.libraries_changed(&libraries);
    }

    fn function_exists(&self, name: &str) -> bool {
        self.libraries
            .lock()
            .values()
            .any(|library| library.functions.iter().any(|f| f.name == name))
    }
}

/// The Lua states of one thread: EVAL's, and the libraries'.
pub struct Engine {
    scripts_id: u64,
    eval: Option<EvalState>,
    functions: Option<FunctionState>,
}

struct EvalState {
    epoch: u64,
    vm: Vm,
    compiled: HashMap<String, Function>,
}

struct FunctionState {
    epoch: u64,
    vm: Vm,
    functions: HashMap<String, Function>,
}

thread_local! {
    /// The engine of a thread running EXEC (scripts inside MULTI).
    static LOCAL: std::cell::RefCell<Option<Engine>> = const { std::cell::RefCell::new(None) };
}

impl Engine {
    fn new(scripts_id: u64) -> Engine {
        Engine {
            scripts_id,
            eval: None,
            functions: None,
        }
    }

    /// Runs `body` with this thread's engine for `scripts`.
    fn local<T>(scripts: &Scripts, body: impl FnOnce(&mut Engine) -> T) -> T {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if local.as_ref().is_none_or(|e| e.scripts_id != scripts.id) {
                *local = Some(Engine::new(scripts.id));
            }
            match local.as_mut() {
                Some(engine) => body(engine),
                None => body(&mut Engine::new(scripts.id)),
            }
        })
    }

    fn eval_state(&mut self, scripts: &Scripts) -> Result<&mut EvalState, String> {
        let epoch = scripts.cache_epoch.load(Relaxed);
        if self.eval.as_ref().is_none_or(|state| state.epoch != epoch) {
            let vm = Vm::new(Arc::clone(&scripts.hook))
                .map_err(|error| format!("ERR cannot start Lua: {error}"))?;
            self.eval = Some(EvalState {
                epoch,
                vm,
                compiled: HashMap::new(),
            });
        }
        self.eval
            .as_mut()
            .ok_or_else(|| "ERR cannot start Lua".to_owned())
    }

    /// The function state, with every library of the node loaded.
    fn function_state(&mut self, scripts: &Scripts) -> Result<&mut FunctionState, String> {
        let libraries = scripts.libraries.lock();
        let epoch = scripts.libraries_epoch.load(Relaxed);
        if self
            .functions
            .as_ref()
            .is_none_or(|state| state.epoch != epoch)
        {
            let vm = Vm::new(Arc::clone(&scripts.hook))
                .map_err(|error| format!("ERR cannot start Lua: {error}"))?;
            let mut functions = HashMap::new();
            for (name, library) in libraries.iter() {
                let Ok((_, code)) = library::metadata(&library.code) else {
                    continue;
                };
                match vm.load_library(code, Instant::now() + LOAD_TIMEOUT) {
                    Ok(registered) => {
                        for function in registered {
                            functions.insert(function.name, function.function);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(library = %name, %error, "redis: a library failed to load again");
                    }
                }
            }
            self.functions = Some(FunctionState {
                epoch,
                vm,
                functions,
            });
        }
        drop(libraries);
        self.functions
            .as_mut()
            .ok_or_else(|| "ERR cannot start Lua".to_owned())
    }
}

/// What a script call asks of the engine.
#[derive(Debug)]
enum Task {
    Eval {
        /// The body (EVAL) or None (EVALSHA: from the cache).
        body: Option<Vec<u8>>,
        sha: String,
        read_only: bool,
    },
    Fcall {
        name: String,
        read_only: bool,
    },
    ScriptLoad(Vec<u8>),
    FunctionLoad {
        code: Vec<u8>,
        replace: bool,
    },
    FunctionRestore {
        payload: Vec<u8>,
        policy: Restore,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Restore {
    Append,
    Replace,
    Flush,
}

/// A script command to run on an engine, with what it needs of the
/// connection that sent it.
pub struct Call {
    task: Task,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    command: Vec<Vec<u8>>,
    shared: Arc<Shared>,
    db: usize,
    resp3: bool,
    cluster: Option<Arc<ClusterMap>>,
    readonly: bool,
    user: Option<String>,
    /// CLIENT REPLY OFF or SKIP was in force for the command: it runs,
    /// and its reply is dropped.
    silent: bool,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").field("task", &self.task).finish()
    }
}

/// Who sent a script command (the connection's state it runs with).
pub struct Caller {
    pub db: usize,
    pub resp3: bool,
    pub cluster: Option<Arc<ClusterMap>>,
    pub readonly: bool,
    pub user: Option<String>,
}

impl Call {
    /// The node's scripts (to submit this call to its engine thread).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Runs the call on `engine` and answers it: the reply bytes. `alone`:
    /// take the node's exclusive turn for the run (not inside EXEC, which
    /// holds it).
    pub fn run(self, engine: &mut Engine, records: &mut dyn Records, alone: bool) -> Vec<u8> {
        let silent = self.silent;
        let mut out = Out::new(self.resp3);
        let shared = Arc::clone(&self.shared);
        let scripts = &shared.scripts;
        let result = match &self.task {
            Task::Eval {
                body,
                sha,
                read_only,
            } => self.eval(
                engine,
                records,
                body.as_deref(),
                sha,
                *read_only,
                alone,
                &mut out,
            ),
            Task::Fcall { name, read_only } => {
                self.fcall(engine, records, name, *read_only, alone, &mut out)
            }
            Task::ScriptLoad(body) => load_script(engine, scripts, body).map(|sha| {
                self.wait_for_spread();
                out.bulk(sha.as_bytes());
            }),
            Task::FunctionLoad { code, replace } => {
                load_library(engine, scripts, code, *replace, true).map(|name| {
                    self.wait_for_spread();
                    out.bulk(name.as_bytes())
                })
            }
            Task::FunctionRestore { payload, policy } => {
                restore_libraries(engine, scripts, payload, *policy).map(|()| out.ok())
            }
        };
        if let Err(error) = result {
            out.error(&error);
        }
        if silent {
            return Vec::new();
        }
        out.buf
    }

    /// Drops the reply (CLIENT REPLY OFF or SKIP): [`Call::run`] answers
    /// nothing.
    pub fn silence(&mut self) {
        self.silent = true;
    }

    /// On a node of a cluster, gives a script or library just shared the
    /// time to reach the other nodes (see [`SPREAD_WAIT`]).
    fn wait_for_spread(&self) {
        if self.cluster.is_some() {
            std::thread::sleep(SPREAD_WAIT);
        }
    }

    /// Runs the call on this thread (inside EXEC, which holds the node's
    /// exclusive turn).
    pub fn run_here(self, records: &mut dyn Records, alone: bool) -> Vec<u8> {
        let shared = Arc::clone(&self.shared);
        Engine::local(&shared.scripts, |engine| self.run(engine, records, alone))
    }

    #[allow(clippy::too_many_arguments)]
    fn eval(
        &self,
        engine: &mut Engine,
        records: &mut dyn Records,
        body: Option<&[u8]>,
        sha: &str,
        read_only: bool,
        alone: bool,
        out: &mut Out,
    ) -> Result<(), String> {
        let scripts = &self.shared.scripts;
        let body: Arc<[u8]> = match body {
            Some(body) => Arc::from(body),
            None => match scripts.cache.lock().get(sha) {
                Some(script) => Arc::clone(&script.body),
                None => return Err(NOSCRIPT.to_owned()),
            },
        };
        let state = engine.eval_state(scripts)?;
        let (function, flags) = compile(state, scripts, sha, &body)?;
        self.check_flags(flags, read_only)?;
        let read_only = read_only || (flags.shebang && flags.no_writes);
        let cross_slot = !flags.shebang || flags.allow_cross_slot;
        self.execute(
            &state.vm, &function, true, sha, read_only, cross_slot, records, alone, out,
        );
        Ok(())
    }

    fn fcall(
        &self,
        engine: &mut Engine,
        records: &mut dyn Records,
        name: &str,
        read_only: bool,
        alone: bool,
        out: &mut Out,
    ) -> Result<(), String> {
        let scripts = &self.shared.scripts;
        let info = scripts
            .libraries
            .lock()
            .values()
            .flat_map(|library| library.functions.iter())
            .find(|f| f.name == name)
            .cloned()
            .ok_or_else(|| "ERR Function not found".to_owned())?;
        let flags = Flags::of(&info.flags);
        self.check_flags(flags, read_only)?;
        let state = engine.function_state(scripts)?;
        let function = state
            .functions
            .get(name)
            .cloned()
            .ok_or_else(|| "ERR Function not found".to_owned())?;
        let read_only = read_only || flags.no_writes;
        self.execute(
            &state.vm,
            &function,
            false,
            name,
            read_only,
            flags.allow_cross_slot,
            records,
            alone,
            out,
        );
        Ok(())
    }

    /// scriptPrepareForRun's checks of the declared flags.
    fn check_flags(&self, flags: Flags, read_only: bool) -> Result<(), String> {
        if !flags.shebang {
            return Ok(());
        }
        if flags.no_cluster && self.cluster.is_some() {
            return Err("ERR Can not run script on cluster, 'no-cluster' flag is set.".to_owned());
        }
        if !flags.no_writes && read_only {
            return Err(
                "ERR Can not execute a script with write flag using *_ro command.".to_owned(),
            );
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        vm: &Vm,
        function: &Function,
        eval: bool,
        name: &str,
        read_only: bool,
        cross_slot: bool,
        records: &mut dyn Records,
        alone: bool,
        out: &mut Out,
    ) {
        let scripts = &self.shared.scripts;
        scripts.start(eval, name, &self.command);
        let _alone = alone.then(|| self.shared.alone());
        let slot = self
            .keys
            .first()
            .filter(|_| self.cluster.is_some())
            .map(|key| crate::cluster::key_slot(key));
        let namespace = self.shared.namespace.as_bytes().to_vec();
        let mut host = ScriptHost {
            client: Session::for_script(
                Arc::clone(&self.shared),
                self.db,
                self.cluster.clone(),
                self.readonly,
                self.user.clone(),
            ),
            records,
            namespace,
            resp3: false,
            read_only,
            cross_slot,
            slot,
            scripts,
        };
        let invocation = lua::Invocation {
            function,
            eval,
            keys: &self.keys,
            args: &self.args,
            name,
        };
        vm.call(&invocation, &mut host, out);
        scripts.finish();
    }
}

/// Compiles (or finds compiled) the script with this SHA1: the function
/// and its flags. Errors as EVAL answers them.
fn compile(
    state: &mut EvalState,
    scripts: &Scripts,
    sha: &str,
    body: &[u8],
) -> Result<(Function, Flags), String> {
    let (flags, shebang_len) = shebang_flags(body)?;
    if let Some(function) = state.compiled.get(sha) {
        return Ok((function.clone(), flags));
    }
    let function = state
        .vm
        .compile(&body[shebang_len..], "user_script")
        .map_err(|error| {
            format!(
                "ERR Error compiling script (new function): {}",
                lua::lua51_words(&error)
            )
        })?;
    state.compiled.insert(sha.to_owned(), function.clone());
    scripts
        .cache
        .lock()
        .entry(sha.to_owned())
        .or_insert_with(|| Script {
            body: Arc::from(body),
        });
    Ok((function, flags))
}

/// A script's shebang flags and the length of the shebang line (the
/// newline is kept, so line numbers hold).
fn shebang_flags(body: &[u8]) -> Result<(Flags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((Flags::default(), 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".to_owned());
    };
    let parts = crate::resp::split_args(&body[..end])
        .filter(|parts| !parts.is_empty())
        .ok_or_else(|| "ERR Invalid engine in script shebang".to_owned())?;
    if parts[0] != b"#!lua" {
        return Err(format!(
            "ERR Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(&parts[0])
        ));
    }
    let mut names = Vec::new();
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix(b"flags=") else {
            return Err(format!(
                "ERR Unknown lua shebang option: {}",
                String::from_utf8_lossy(part)
            ));
        };
        for flag in list.split(|&b| b == b',') {
            let known = lua::FLAGS.iter().find(|known| known.as_bytes() == flag);
            match known {
                Some(flag) => names.push(*flag),
                None => {
                    return Err(format!(
                        "ERR Unexpected flag in script shebang: {}",
                        String::from_utf8_lossy(flag)
                    ))
                }
            }
        }
    }
    Ok((Flags::of(&names), end))
}

/// SCRIPT LOAD: compiles and caches the body; its SHA1.
fn load_script(engine: &mut Engine, scripts: &Scripts, body: &[u8]) -> Result<String, String> {
    let sha = lua::sha1_hex(body);
    let state = engine.eval_state(scripts)?;
    compile(state, scripts, &sha, body)?;
    // Every node of the cluster can run it by its SHA1 now (a script EVAL
    // sends stays on its node, as in Redis: clients that build scripts on
    // the fly would otherwise fill the cluster's metadata).
    scripts.share(SCRIPT_MODULE, &sha, Some(body));
    Ok(sha)
}

/// FUNCTION LOAD: the library's name once loaded.
fn load_library(
    engine: &mut Engine,
    scripts: &Scripts,
    code: &[u8],
    replace: bool,
    spread: bool,
) -> Result<String, String> {
    let (name, body) = library::metadata(code).map_err(|error| format!("ERR {error}"))?;
    if !replace && scripts.libraries.lock().contains_key(&name) {
        return Err(format!("ERR Library '{name}' already exists"));
    }
    let state = engine.function_state(scripts)?;
    let registered = state
        .vm
        .load_library(body, Instant::now() + LOAD_TIMEOUT)
        .map_err(|error| format!("ERR {error}"))?;
    if registered.is_empty() {
        return Err("ERR No functions registered".to_owned());
    }
    let mut libraries = scripts.libraries.lock();
    for function in &registered {
        let taken = libraries
            .iter()
            .filter(|(library, _)| **library != name)
            .any(|(_, library)| library.functions.iter().any(|f| f.name == function.name));
        if taken {
            return Err(format!("ERR Function {} already exists", function.name));
        }
    }
    let functions = registered
        .iter()
        .map(|f| FunctionInfo {
            name: f.name.clone(),
            description: f.description.clone(),
            flags: f.flags.clone(),
        })
        .collect();
    if let Some(old) = libraries.get(&name) {
        for function in &old.functions {
            state.functions.remove(&function.name);
        }
    }
    libraries.insert(
        name.clone(),
        Library {
            code: code.to_vec(),
            functions,
        },
    );
    for function in registered {
        state.functions.insert(function.name, function.function);
    }
    state.epoch = scripts.libraries_changed(&libraries);
    // Noted under the libraries' lock, as every library change is: an echo
    // of an older change must see it.
    if spread {
        scripts.share(FUNCTION_MODULE, &name, Some(code));
    }
    drop(libraries);
    Ok(name)
}

/// FUNCTION RESTORE: every library of the payload is loaded, or none.
fn restore_libraries(
    engine: &mut Engine,
    scripts: &Scripts,
    payload: &[u8],
    policy: Restore,
) -> Result<(), String> {
    let codes = library::restore(payload).map_err(|error| format!("ERR {error}"))?;
    let state = engine.function_state(scripts)?;
    let mut restored = Libraries::new();
    for code in codes {
        let (name, body) = library::metadata(&code).map_err(|error| format!("ERR {error}"))?;
        if restored.contains_key(&name) {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        let registered = state
            .vm
            .load_library(body, Instant::now() + LOAD_TIMEOUT)
            .map_err(|error| format!("ERR {error}"))?;
        if registered.is_empty() {
            return Err("ERR No functions registered".to_owned());
        }
        let functions: Vec<FunctionInfo> = registered
            .iter()
            .map(|f| FunctionInfo {
                name: f.name.clone(),
                description: f.description.clone(),
                flags: f.flags.clone(),
            })
            .collect();
        for function in &functions {
            if restored
                .values()
                .any(|library| library.functions.iter().any(|f| f.name == function.name))
            {
                return Err(format!("ERR Function {} already exists", function.name));
            }
        }
        restored.insert(name, Library { code, functions });
    }
    let mut libraries = scripts.libraries.lock();
    let mut merged = match policy {
        Restore::Flush => Libraries::new(),
        _ => libraries.clone(),
    };
    for (name, library) in restored {
        if policy == Restore::Append && merged.contains_key(&name) {
            return Err(format!("ERR Library {name} already exists"));
        }
        merged.remove(&name);
        for function in &library.functions {
            if merged
                .values()
                .any(|other| other.functions.iter().any(|f| f.name == function.name))
            {
                return Err(format!("ERR Function {} already exists", function.name));
            }
        }
        merged.insert(name, library);
    }
    for (name, library) in libraries.iter() {
        if merged.get(name) != Some(library) {
            scripts.share(FUNCTION_MODULE, name, None);
        }
    }
    for (name, library) in merged.iter() {
        if libraries.get(name) != Some(library) {
            scripts.share(FUNCTION_MODULE, name, Some(&library.code));
        }
    }
    *libraries = merged;
    scripts.libraries_changed(&libraries);
    Ok(())
}

/// What a script's `redis.call` runs through: the script's own client
/// (its database, which SELECT inside the script changes), and the checks
/// Redis makes before a command from a script.
struct ScriptHost<'a> {
    client: Session,
    records: &'a mut dyn Records,
    namespace: Vec<u8>,
    /// The script's protocol (`redis.setresp`).
    resp3: bool,
    read_only: bool,
    cross_slot: bool,
    /// (A cluster node) the slot the script's keys are in.
    slot: Option<usize>,
    scripts: &'a Scripts,
}

impl ScriptHost<'_> {
    fn admit(&mut self, args: &[Vec<u8>]) -> Result<&'static Spec, String> {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let Some(spec) = table::find(&name) else {
            return Err("Unknown Redis command called from script".to_owned());
        };
        let n = args.len() as i32;
        if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
            return Err("Wrong number of args calling Redis command from script".to_owned());
        }
        if NOT_FROM_SCRIPTS.contains(&spec.name) {
            return Err("This Redis command is not allowed from script".to_owned());
        }
        if let Some(permission) = crate::session::permission_of(spec, args) {
            if !self
                .records
                .permits(permission, &set_name(self.client.db_index()))
            {
                return Err(
                    "The user executing the script can't run this command or subcommand".to_owned(),
                );
            }
        }
        Ok(spec)
    }
}

impl Host for ScriptHost<'_> {
    fn call(&mut self, args: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
        let spec = self.admit(&args)?;
        let write = crate::session::is_write(spec, &args);
        if write && self.read_only {
            return Err("Write commands are not allowed from read-only scripts.".to_owned());
        }
        if write {
            self.scripts.mark_wrote();
        }
        if let Some(map) = self.client.cluster_map() {
            let keys = table::keys(spec, &args);
            if let Some(first) = keys.first() {
                let slot = crate::cluster::key_slot(first);
                let local = keys.iter().all(|key| crate::cluster::key_slot(key) == slot)
                    && map
                        .redirect(slot, write, self.client.is_readonly())
                        .is_none();
                if !local {
                    return Err(
                        "Script attempted to access a non local key in a cluster node".to_owned(),
                    );
                }
                if !self.cross_slot {
                    match self.slot {
                        None => self.slot = Some(slot),
                        Some(declared) if declared != slot => {
                            return Err("Script attempted to access keys that do not hash to \
                                        the same slot"
                                .to_owned())
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        let mut out = Out::new(self.resp3);
        self.client
            .run_from_script(spec, &args, &mut out, self.records, &self.namespace);
        Ok(out.buf)
    }

    fn acl_check(&mut self, args: Vec<Vec<u8>>) -> Result<bool, String> {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let Some(spec) = table::find(&name) else {
            return Err("Invalid command passed to redis.acl_check_cmd()".to_owned());
        };
        Ok(match crate::session::permission_of(spec, &args) {
            Some(permission) => self
                .records
                .permits(permission, &set_name(self.client.db_index())),
            None => true,
        })
    }

    fn set_resp3(&mut self, resp3: bool) {
        self.resp3 = resp3;
    }

    fn resp3(&self) -> bool {
        self.resp3
    }
}

/// How a script command is answered by the connection: now (the reply
/// is in `out`), or by the engine.
pub enum Answer {
    Done,
    Engine(Box<Call>),
}

/// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO, SCRIPT and
/// FUNCTION. Errors found before anything runs are answered here; what
/// needs a Lua state becomes a [`Call`].
pub fn command(shared: &Arc<Shared>, caller: Caller, args: &[Vec<u8>], out: &mut Out) -> Answer {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let result = match name.as_str() {
        "eval" | "eval_ro" | "evalsha" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            script_call(shared, caller, &name, args)
        }
        "script" => script_command(shared, caller, args, out),
        _ => function_command(shared, caller, args, out),
    };
    match result {
        Ok(answer) => answer,
        Err(error) => {
            out.error(&error);
            Answer::Done
        }
    }
}

fn call(shared: &Arc<Shared>, caller: Caller, task: Task, args: &[Vec<u8>]) -> Answer {
    Answer::Engine(Box::new(Call {
        task,
        keys: Vec::new(),
        args: Vec::new(),
        command: args.to_vec(),
        shared: Arc::clone(shared),
        db: caller.db,
        resp3: caller.resp3,
        cluster: caller.cluster,
        readonly: caller.readonly,
        user: caller.user,
        silent: false,
    }))
}

fn script_call(
    shared: &Arc<Shared>,
    caller: Caller,
    name: &str,
    args: &[Vec<u8>],
) -> Result<Answer, String> {
    let fcall = name.starts_with("fcall");
    let read_only = name.ends_with("_ro");
    let evalsha = name.starts_with("evalsha");
    let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    if fcall
        && !shared
            .scripts
            .function_exists(&String::from_utf8_lossy(&args[1]))
    {
        return Err("ERR Function not found".to_owned());
    }
    if evalsha && sha.len() != 40 {
        return Err(NOSCRIPT.to_owned());
    }
    let numkeys = match crate::session::parse_i64(&args[2]) {
        Ok(n) => n,
        Err(_) if fcall => return Err("ERR Bad number of keys provided".to_owned()),
        Err(error) => return Err(error),
    };
    if numkeys > args.len() as i64 - 3 {
        return Err("ERR Number of keys can't be greater than number of args".to_owned());
    }
    if numkeys < 0 {
        return Err("ERR Number of keys can't be negative".to_owned());
    }
    let split = 3 + numkeys as usize;
    let task = if fcall {
        Task::Fcall {
            name: String::from_utf8_lossy(&args[1]).into_owned(),
            read_only,
        }
    } else if evalsha {
        if !shared.scripts.cached(&sha) {
            return Err(NOSCRIPT.to_owned());
        }
        Task::Eval {
            body: None,
            sha,
            read_only,
        }
    } else {
        Task::Eval {
            sha: lua::sha1_hex(&args[1]),
            body: Some(args[1].clone()),
            read_only,
        }
    };
    let Answer::Engine(mut call) = call(shared, caller, task, args) else {
        return Ok(Answer::Done);
    };
    call.keys = args[3..split].to_vec();
    call.args = args[split..].to_vec();
    Ok(Answer::Engine(call))
}

fn script_command(
    shared: &Arc<Shared>,
    caller: Caller,
    args: &[Vec<u8>],
    out: &mut Out,
) -> Result<Answer, String> {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let scripts = &shared.scripts;
    match (sub.as_str(), args.len()) {
        ("help", 2) => {
            help(
                out,
                &[
                    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "DEBUG (YES|SYNC|NO)",
                    "    Set the debug mode for subsequent scripts executed.",
                    "EXISTS <sha1> [<sha1> ...]",
                    "    Return information about the existence of the scripts in the script cache.",
                    "FLUSH [ASYNC|SYNC]",
                    "    Flush the Lua scripts cache. Very dangerous on replicas.",
                    "    When called without the optional mode argument, the behavior is determined by the",
                    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                    "    * ASYNC: Asynchronously flush the scripts cache.",
                    "    * SYNC: Synchronously flush the scripts cache.",
                    "KILL",
                    "    Kill the currently executing Lua script.",
                    "LOAD <script>",
                    "    Load a script into the scripts cache without executing it.",
                    "HELP",
                    "    Prints this help.",
                ],
            );
        }
        ("flush", 2..=3) => {
            if args.len() == 3
                && !args[2].eq_ignore_ascii_case(b"sync")
                && !args[2].eq_ignore_ascii_case(b"async")
            {
                return Err("ERR SCRIPT FLUSH only support SYNC|ASYNC option".to_owned());
            }
            scripts.flush_cache();
            out.ok();
        }
        ("exists", n) if n >= 3 => {
            out.array(n - 2);
            for sha in &args[2..] {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                out.int(i64::from(scripts.cached(&sha)));
            }
        }
        ("load", 3) => {
            return Ok(call(
                shared,
                caller,
                Task::ScriptLoad(args[2].clone()),
                args,
            ));
        }
        ("kill", 2) => {
            scripts.kill(true)?;
            out.ok();
        }
        _ => return Err(subcommand_error("SCRIPT", &args[1])),
    }
    Ok(Answer::Done)
}

fn function_command(
    shared: &Arc<Shared>,
    caller: Caller,
    args: &[Vec<u8>],
    out: &mut Out,
) -> Result<Answer, String> {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let scripts = &shared.scripts;
    let arity = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(format!(
                "ERR wrong number of arguments for 'function|{sub}' command"
            ))
        }
    };
    match sub.as_str() {
        "load" => {
            arity(args.len() >= 3)?;
            let mut replace = false;
            let mut at = 2;
            while at < args.len() - 1 {
                if args[at].eq_ignore_ascii_case(b"replace") {
                    replace = true;
                    at += 1;
                    continue;
                }
                return Err(format!(
                    "ERR Unknown option given: {}",
                    String::from_utf8_lossy(&args[at])
                ));
            }
            let task = Task::FunctionLoad {
                code: args[args.len() - 1].clone(),
                replace,
            };
            return Ok(call(shared, caller, task, args));
        }
        "delete" => {
            arity(args.len() == 3)?;
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            if !scripts.delete_library(&name) {
                return Err("ERR Library not found".to_owned());
            }
            out.ok();
        }
        "flush" => {
            arity(args.len() <= 3)?;
            if args.len() == 3
                && !args[2].eq_ignore_ascii_case(b"sync")
                && !args[2].eq_ignore_ascii_case(b"async")
            {
                return Err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option".to_owned());
            }
            scripts.flush_libraries();
            out.ok();
        }
        "list" => function_list(scripts, args, out)?,
        "dump" => {
            arity(args.len() == 2)?;
            let payload = library::dump(&scripts.libraries.lock());
            out.bulk(&payload);
        }
        "restore" => {
            arity(args.len() >= 3)?;
            if args.len() > 4 {
                return Err(subcommand_error("FUNCTION", &args[1]));
            }
            let policy = match args.get(3).map(|p| p.to_ascii_lowercase()) {
                None => Restore::Append,
                Some(p) if p == b"append" => Restore::Append,
                Some(p) if p == b"replace" => Restore::Replace,
                Some(p) if p == b"flush" => Restore::Flush,
                Some(_) => {
                    return Err(
                        "ERR Wrong restore policy given, value should be either FLUSH, \
                                APPEND or REPLACE."
                            .to_owned(),
                    )
                }
            };
            let task = Task::FunctionRestore {
                payload: args[2].clone(),
                policy,
            };
            return Ok(call(shared, caller, task, args));
        }
        "kill" => {
            arity(args.len() == 2)?;
            scripts.kill(false)?;
            out.ok();
        }
        "stats" => {
            arity(args.len() == 2)?;
            function_stats(scripts, out)?;
        }
        "help" => {
            arity(args.len() == 2)?;
            help(
                out,
                &[
                    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "LOAD [REPLACE] <FUNCTION CODE>",
                    "    Create a new library with the given library name and code.",
                    "DELETE <LIBRARY NAME>",
                    "    Delete the given library.",
                    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
                    "    Return general information on all the libraries:",
                    "    * Library name",
                    "    * The engine used to run the Library",
                    "    * Library description",
                    "    * Functions list",
                    "    * Library code (if WITHCODE is given)",
                    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
                    "STATS",
                    "    Return information about the current function running:",
                    "    * Function name",
                    "    * Command used to run the function",
                    "    * Duration in MS that the function is running",
                    "    If no function is running, return nil",
                    "    In addition, returns a list of available engines.",
                    "KILL",
                    "    Kill the current running function.",
                    "FLUSH [ASYNC|SYNC]",
                    "    Delete all the libraries.",
                    "    When called without the optional mode argument, the behavior is determined by the",
                    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
                    "    * ASYNC: Asynchronously flush the libraries.",
                    "    * SYNC: Synchronously flush the libraries.",
                    "DUMP",
                    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
                    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
                    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
                    "    control how to handle existing libraries (default APPEND):",
                    "    * FLUSH: delete all existing libraries.",
                    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
                    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
                    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
                    "      in case of functions name collision with another library).",
                    "HELP",
                    "    Prints this help.",
                ],
            );
        }
        _ => return Err(subcommand_error("FUNCTION", &args[1])),
    }
    Ok(Answer::Done)
}

fn function_list(scripts: &Scripts, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut at = 2;
    while at < args.len() {
        if !with_code && args[at].eq_ignore_ascii_case(b"withcode") {
            with_code = true;
            at += 1;
            continue;
        }
        if pattern.is_none() && args[at].eq_ignore_ascii_case(b"libraryname") {
            let Some(p) = args.get(at + 1) else {
                return Err("ERR library name argument was not given".to_owned());
            };
            pattern = Some(p);
            at += 2;
            continue;
        }
        return Err(format!(
            "ERR Unknown argument {}",
            String::from_utf8_lossy(&args[at])
        ));
    }
    let libraries = scripts.libraries.lock();
    let chosen: Vec<(&String, &Library)> = libraries
        .iter()
        .filter(|(name, _)| {
            pattern.is_none_or(|p| {
                crate::session::glob(
                    &p.to_ascii_lowercase(),
                    name.to_ascii_lowercase().as_bytes(),
                )
            })
        })
        .collect();
    out.array(chosen.len());
    for (name, library) in chosen {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array(library.functions.len());
        for function in &library.functions {
            out.map(3);
            out.bulk(b"name");
            out.bulk(function.name.as_bytes());
            out.bulk(b"description");
            match &function.description {
                Some(text) => out.bulk(text.as_bytes()),
                None => out.null(),
            }
            out.bulk(b"flags");
            out.set(function.flags.len());
            for flag in &function.flags {
                out.simple(flag);
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&library.code);
        }
    }
    Ok(())
}

fn function_stats(scripts: &Scripts, out: &mut Out) -> Result<(), String> {
    let running = scripts.running.lock();
    if running.as_ref().is_some_and(|r| r.eval) {
        return Err(BUSY_EVAL.to_owned());
    }
    out.map(2);
    out.bulk(b"running_script");
    match running.as_ref() {
        None => out.null(),
        Some(running) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(running.name.as_bytes());
            out.bulk(b"command");
            out.array(running.command.len());
            for arg in &running.command {
                out.bulk(arg);
            }
            out.bulk(b"duration_ms");
            out.int(running.started.elapsed().as_millis() as i64);
        }
    }
    drop(running);
    let libraries = scripts.libraries.lock();
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(libraries.len() as i64);
    out.bulk(b"functions_count");
    out.int(libraries.values().map(|l| l.functions.len()).sum::<usize>() as i64);
    Ok(())
}

fn help(out: &mut Out, lines: &[&str]) {
    out.array(lines.len());
    for line in lines {
        out.simple(line);
    }
}

fn subcommand_error(command: &str, sub: &[u8]) -> String {
    format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        String::from_utf8_lossy(sub)
            .chars()
            .take(128)
            .collect::<String>()
    )
}

/// The script commands that run on an engine (a Lua state is needed).
pub fn needs_engine(spec: &Spec, args: &[Vec<u8>]) -> bool {
    match spec.name {
        "eval" | "eval_ro" | "evalsha" | "evalsha_ro" | "fcall" | "fcall_ro" => true,
        "script" => args.get(1).is_some_and(|s| s.eq_ignore_ascii_case(b"load")),
        "function" => args
            .get(1)
            .is_some_and(|s| s.eq_ignore_ascii_case(b"load") || s.eq_ignore_ascii_case(b"restore")),
        _ => false,
    }
}

/// Commands that run while a script is busy (Redis's `allow-busy`).
pub fn allowed_while_busy(spec: &Spec, args: &[Vec<u8>]) -> bool {
    match spec.name {
        "auth" | "hello" | "quit" | "reset" | "multi" | "discard" | "watch" | "unwatch" => true,
        "script" | "function" => args.get(1).is_some_and(|sub| {
            sub.eq_ignore_ascii_case(b"kill")
                || (spec.name == "function" && sub.eq_ignore_ascii_case(b"stats"))
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_parse_as_redis() {
        assert_eq!(shebang_flags(b"return 1"), Ok((Flags::default(), 0)));
        assert_eq!(
            shebang_flags(b"#!lua flags=no-writes,allow-cross-slot-keys\nreturn 1"),
            Ok((
                Flags {
                    shebang: true,
                    no_writes: true,
                    no_cluster: false,
                    allow_cross_slot: true,
                },
                43
            ))
        );
        assert_eq!(
            shebang_flags(b"#!lua flags=bogus\nreturn 1"),
            Err("ERR Unexpected flag in script shebang: bogus".to_owned())
        );
        assert_eq!(
            shebang_flags(b"#!js\nreturn 1"),
            Err("ERR Unexpected engine in script shebang: #!js".to_owned())
        );
        assert_eq!(
            shebang_flags(b"#!lua"),
            Err("ERR Invalid script shebang".to_owned())
        );
        assert_eq!(
            shebang_flags(b"#!lua foo=bar\n"),
            Err("ERR Unknown lua shebang option: foo=bar".to_owned())
        );
    }
}
