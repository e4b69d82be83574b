//! One Lua state for Redis scripts: the sandbox (`prelude.lua`), the
//! conversions between Lua values and RESP replies as Redis 7.0 makes
//! them, Redis's error handler, and the hook that stops a killed script or
//! a library that loads too long.

use super::{json, msgpack, structs};
use crate::resp::{format_g, Out};
use mlua::{
    ChunkMode, Function, HookTriggers, LightUserData, Lua, LuaOptions, MultiValue, StdLib, Table,
    Value, VmState,
};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// The chunk name of the sandbox's own code: its frames are skipped when
/// an error is placed on a script line.
const INTERNAL: &str = "=bolide";
/// Instructions between two looks at the kill flag.
const HOOK_INSTRUCTIONS: u32 = 10_000;
/// Memory one Lua state may use; past it a script fails with Lua's
/// "not enough memory".
pub const MEMORY_BYTES: usize = 128 << 20;
/// Deepest table a script may return (Redis stops at Lua's stack limit).
const REPLY_DEPTH_MAX: usize = 1000;
/// Most elements a script's reply may hold (a table that contains itself
/// several times would otherwise expand without end).
const REPLY_ELEMENTS_MAX: usize = 10_000_000;
pub const KILLED: &str = "Script killed by user with SCRIPT KILL...";
const LOAD_TIMEOUT: &str = "FUNCTION LOAD timeout";
/// Redis 7.0.15's version number (`REDIS_VERSION_NUM`).
const VERSION_NUM: i64 = 0x07_00_0f;

/// What the hook looks at, shared with the commands that stop a script.
#[derive(Default)]
pub struct Hook {
    /// SCRIPT KILL / FUNCTION KILL asked the running script to stop.
    pub kill: AtomicBool,
    /// A library being loaded must finish by then.
    pub load_deadline: Mutex<Option<Instant>>,
    load_timed_out: AtomicBool,
}

/// An error a Redis API function raises: Redis raises a table
/// `{err = text}`; it travels as this until the error handler, or a
/// protected call, turns it back into what Redis gives.
#[derive(Debug)]
struct ReplyError(String);

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplyError {}

/// A library's error message (as C libraries raise them with
/// `luaL_error`: a string starting with the calling line).
#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// Raises `{err = …}` made from `text` (see [`error_text_of`]).
fn reply_error(text: &str) -> mlua::Error {
    mlua::Error::external(ReplyError(error_text_of(text)))
}

/// Raises `message` prefixed with the calling script line, as
/// `luaL_error` does.
fn message_error(lua: &Lua, message: &str) -> mlua::Error {
    let place = lua
        .inspect_stack(1, |debug| {
            let source = debug.source();
            match (source.short_src, debug.current_line()) {
                (Some(src), Some(line)) if source.what != "C" => format!("{src}:{line}: "),
                _ => String::new(),
            }
        })
        .unwrap_or_default();
    mlua::Error::external(Message(format!("{place}{message}")))
}

/// What a raised error is to Lua code that catches it: a reply error's
/// table, a library's message, or mlua's text.
enum Caught {
    Reply(String),
    Message(String),
    Other(String),
}

fn caught(error: &mlua::Error) -> Caught {
    match error {
        mlua::Error::ExternalError(inner) => {
            if let Some(ReplyError(text)) = inner.downcast_ref::<ReplyError>() {
                return Caught::Reply(text.clone());
            }
            if let Some(Message(text)) = inner.downcast_ref::<Message>() {
                return Caught::Message(text.clone());
            }
            Caught::Other(inner.to_string())
        }
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            caught(cause)
        }
        other => Caught::Other(error_text(other)),
    }
}

/// What a running script's `redis.*` calls reach.
pub trait Host {
    /// Runs a command: its reply as RESP bytes (possibly an error reply),
    /// or an error raised before it ran (`ERR …` text, or `-CODE …`).
    fn call(&mut self, args: Vec<Vec<u8>>) -> Result<Vec<u8>, String>;
    /// Whether the user may run the command (`redis.acl_check_cmd`).
    fn acl_check(&mut self, args: Vec<Vec<u8>>) -> Result<bool, String>;
    fn set_resp3(&mut self, resp3: bool);
    fn resp3(&self) -> bool;
}

/// A function `redis.register_function` registered while a library loaded.
pub struct Registered {
    pub name: String,
    pub description: Option<String>,
    pub flags: Vec<&'static str>,
    pub function: Function,
}

/// A script to run: an EVAL body (KEYS and ARGV as globals) or a
/// registered function (called with the keys and args tables), and the
/// name its errors give (the script's SHA1 or the function's name).
#[derive(Clone, Copy)]
pub struct Invocation<'a> {
    pub function: &'a Function,
    pub eval: bool,
    pub keys: &'a [Vec<u8>],
    pub args: &'a [Vec<u8>],
    pub name: &'a str,
}

/// How a call ended: the reply bytes go to the client.
pub struct Outcome {
    /// The script raised no error.
    pub ok: bool,
}

/// The flags a script or function may declare, in Redis's order.
pub const FLAGS: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// A Lua state with the Redis scripting environment.
pub struct Vm {
    lua: Lua,
    backing: Table,
    globals_meta: Table,
    run: Function,
    /// The `redis` table behind scripts' read-only `redis`.
    redis: Table,
    /// `redis` while a library loads.
    load_redis: Table,
    load_globals: Table,
    hook: Arc<Hook>,
}

impl Vm {
    pub fn new(hook: Arc<Hook>) -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::COROUTINE;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        lua.set_memory_limit(MEMORY_BYTES)?;
        let hooked = Arc::clone(&hook);
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
            move |_, _| {
                if hooked.kill.load(Relaxed) {
                    return Err(mlua::Error::RuntimeError(KILLED.to_owned()));
                }
                if hooked
                    .load_deadline
                    .lock()
                    .is_some_and(|at| Instant::now() >= at)
                {
                    hooked.load_timed_out.store(true, Relaxed);
                    return Err(mlua::Error::RuntimeError(LOAD_TIMEOUT.to_owned()));
                }
                Ok(VmState::Continue)
            },
        )?;
        let native = natives(&lua, &hook)?;
        let (backing, globals_meta, run, redis, load_redis, load_globals): (
            Table,
            Table,
            Function,
            Table,
            Table,
            Table,
        ) = lua
            .load(include_str!("prelude.lua"))
            .set_name(INTERNAL)
            .set_mode(ChunkMode::Text)
            .call(native)?;
        Ok(Vm {
            lua,
            backing,
            globals_meta,
            run,
            redis,
            load_redis,
            load_globals,
            hook,
        })
    }

    /// Compiles a script body as Redis names it (`@user_script`, or
    /// `@user_function` for a library): the function, or Lua's message.
    pub fn compile(&self, body: &[u8], name: &str) -> Result<Function, String> {
        self.lua
            .load(body)
            .set_name(format!("@{name}"))
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|error| error_text(&error))
    }

    /// Runs the invocation and writes its reply, or its error, into `out`.
    pub fn call(&self, invocation: &Invocation<'_>, host: &mut dyn Host, out: &mut Out) -> Outcome {
        let Invocation {
            function,
            eval,
            keys,
            args,
            name,
        } = *invocation;
        let host = RefCell::new(host);
        // redis.call raises a failed command's error; redis.pcall
        // returns it as a table.
        let run_command = |lua: &Lua, args: MultiValue| -> mlua::Result<Result<Value, String>> {
            let argv = match command_args(args) {
                Ok(argv) => argv,
                Err(text) => return Ok(Err(text)),
            };
            let ran = host.borrow_mut().call(argv);
            match ran {
                Ok(reply) if reply.first() == Some(&b'-') => {
                    let line = reply.strip_suffix(b"\r\n").unwrap_or(&reply);
                    Ok(Err(String::from_utf8_lossy(line).into_owned()))
                }
                Ok(reply) => {
                    let mut at = 0;
                    Ok(Ok(reply_to_lua(lua, &reply, &mut at, 0)?))
                }
                Err(text) => Ok(Err(text)),
            }
        };
        let result = self.lua.scope(|scope| {
            let call =
                scope.create_function(|lua, args: MultiValue| match run_command(lua, args)? {
                    Ok(value) => Ok(value),
                    Err(text) => Err(reply_error(&text)),
                })?;
            let pcall =
                scope.create_function(|lua, args: MultiValue| match run_command(lua, args)? {
                    Ok(value) => Ok(value),
                    Err(text) => Ok(Value::Table(error_table(lua, &text)?)),
                })?;
            let setresp = scope.create_function(|_, args: MultiValue| {
                if args.len() != 1 {
                    return Err(reply_error("redis.setresp() requires one argument."));
                }
                let version = match args.front() {
                    Some(Value::Integer(n)) => *n,
                    Some(Value::Number(n)) => *n as i64,
                    Some(Value::String(s)) => s
                        .to_str()
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0),
                    _ => 0,
                };
                if version != 2 && version != 3 {
                    return Err(reply_error("RESP version must be 2 or 3."));
                }
                host.borrow_mut().set_resp3(version == 3);
                Ok(())
            })?;
            let acl_check = scope.create_function(|_, args: MultiValue| {
                let argv = command_args(args).map_err(|text| reply_error(&text))?;
                let checked = host.borrow_mut().acl_check(argv);
                checked.map_err(|text| reply_error(&text))
            })?;
            self.redis.raw_set("call", call)?;
            self.redis.raw_set("pcall", pcall)?;
            self.redis.raw_set("setresp", setresp)?;
            self.redis.raw_set("acl_check_cmd", acl_check)?;
            let keys = self.sequence(keys)?;
            let args = self.sequence(args)?;
            let result = if eval {
                self.backing.raw_set("KEYS", keys)?;
                self.backing.raw_set("ARGV", args)?;
                self.run.call::<MultiValue>(function)
            } else {
                self.run.call::<MultiValue>((function, keys, args))
            };
            for slot in ["call", "pcall", "setresp", "acl_check_cmd"] {
                self.redis.raw_set(slot, Value::Nil)?;
            }
            result
        });
        let resp3 = host.borrow().resp3();
        let mut values = match result {
            Ok(values) => values.into_iter(),
            Err(error) => {
                out.error(&format!(
                    "ERR Error running script {name}, {}",
                    truncated(&error_text(&error), 100)
                ));
                return Outcome { ok: false };
            }
        };
        let ok = matches!(values.next(), Some(Value::Boolean(true)));
        let value = values.next().unwrap_or(Value::Nil);
        if ok {
            let mut reply = Out {
                buf: Vec::new(),
                resp3: out.resp3,
            };
            let mut budget = REPLY_ELEMENTS_MAX;
            if lua_to_reply(&value, resp3, &mut reply, 0, &mut budget) {
                out.buf.extend_from_slice(&reply.buf);
            } else {
                out.error("ERR reached lua stack limit");
            }
            return Outcome { ok: true };
        }
        match value {
            Value::Table(error) => {
                let text = raw_string(&error, "err").unwrap_or_else(|| "ERR".to_owned());
                let source = raw_string(&error, "source");
                let line = error
                    .raw_get::<Value>("line")
                    .ok()
                    .and_then(|line| match line {
                        Value::Integer(n) => Some(n.to_string()),
                        Value::Number(n) => Some(format_g(n, 17)),
                        Value::String(s) => Some(s.to_string_lossy()),
                        _ => None,
                    });
                match (source, line) {
                    (Some(source), Some(line)) => {
                        out.error(&format!("{text} script: {name}, on {source}:{line}."))
                    }
                    _ => out.error(&text),
                }
            }
            other => {
                let text = match &other {
                    Value::String(s) => s.to_string_lossy(),
                    Value::Error(error) => error_text(error),
                    _ => "execution failure".to_owned(),
                };
                out.error(&format!(
                    "ERR Error running script {name}, {}",
                    truncated(&text, 100)
                ));
            }
        }
        Outcome { ok: false }
    }

    /// Runs a library's code with only the load API visible, collecting
    /// what it registers; the error text as Redis words it otherwise.
    pub fn load_library(&self, code: &[u8], deadline: Instant) -> Result<Vec<Registered>, String> {
        let function = self
            .compile(code, "user_function")
            .map_err(|error| format!("Error compiling function: {}", lua51_words(&error)))?;
        let registered: RefCell<Vec<Registered>> = RefCell::new(Vec::new());
        *self.hook.load_deadline.lock() = Some(deadline);
        self.hook.load_timed_out.store(false, Relaxed);
        let result = self.lua.scope(|scope| {
            let register = scope.create_function(|_, args: MultiValue| {
                let entry = register_args(args).map_err(reply_error)?;
                let mut registered = registered.borrow_mut();
                if !valid_name(&entry.name) {
                    return Err(reply_error(
                        "Library names can only contain letters, numbers, or underscores(_) \
                         and must be at least one character long",
                    ));
                }
                if registered.iter().any(|f| f.name == entry.name) {
                    return Err(reply_error("Function already exists in the library"));
                }
                registered.push(entry);
                Ok(())
            })?;
            self.load_redis.raw_set("register_function", register)?;
            self.globals_meta.raw_set("__index", &self.load_globals)?;
            let result = self.run.call::<MultiValue>(&function);
            self.globals_meta.raw_set("__index", &self.backing)?;
            self.load_redis.raw_set("register_function", Value::Nil)?;
            result
        });
        *self.hook.load_deadline.lock() = None;
        let timed_out = self.hook.load_timed_out.swap(false, Relaxed);
        let mut values = result
            .map_err(|error| format!("Error registering functions: {}", error_text(&error)))?
            .into_iter();
        if !matches!(values.next(), Some(Value::Boolean(true))) {
            let text = if timed_out {
                format!("ERR {LOAD_TIMEOUT}")
            } else {
                match values.next() {
                    Some(Value::Table(error)) => {
                        raw_string(&error, "err").unwrap_or_else(|| "ERR".to_owned())
                    }
                    Some(Value::String(s)) => format!("ERR {}", s.to_string_lossy()),
                    Some(Value::Error(error)) => match caught(&error) {
                        Caught::Reply(text) => text,
                        Caught::Message(text) | Caught::Other(text) => format!("ERR {text}"),
                    },
                    _ => "ERR execution failure".to_owned(),
                }
            };
            return Err(format!("Error registering functions: {text}"));
        }
        Ok(registered.into_inner())
    }

    fn sequence(&self, items: &[Vec<u8>]) -> mlua::Result<Table> {
        let table = self.lua.create_table_with_capacity(items.len(), 0)?;
        for (index, item) in items.iter().enumerate() {
            table.raw_set(index + 1, self.lua.create_string(item)?)?;
        }
        Ok(table)
    }

    /// Bytes the state holds.
    pub fn memory_bytes(&self) -> usize {
        self.lua.used_memory()
    }
}

/// The Rust half of the sandbox, handed to `prelude.lua`.
fn natives(lua: &Lua, hook: &Arc<Hook>) -> mlua::Result<Table> {
    let native = lua.create_table()?;
    native.raw_set("version", crate::session::REDIS_VERSION)?;
    native.raw_set("version_num", VERSION_NUM)?;
    native.raw_set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    let killed = Arc::clone(hook);
    native.raw_set(
        "killed",
        lua.create_function(move |_, ()| Ok(killed.kill.load(Relaxed)))?,
    )?;
    native.raw_set(
        "kill_error",
        lua.create_function(|lua, ()| error_table(lua, KILLED))?,
    )?;
    native.raw_set(
        "error_table",
        lua.create_function(|lua, text: mlua::String| error_table(lua, &text.to_string_lossy()))?,
    )?;
    // What pcall returns for a caught error (Redis 7.0's pcall gives a
    // reply error as its text), and what xpcall's handler is given.
    native.raw_set(
        "pcall_error",
        lua.create_function(|lua, error: Value| {
            Ok(match error {
                Value::Error(error) => match caught(&error) {
                    Caught::Reply(text) | Caught::Message(text) | Caught::Other(text) => {
                        Value::String(lua.create_string(text)?)
                    }
                },
                Value::Table(table) => match table.raw_get::<Value>("err")? {
                    Value::String(text) => Value::String(text),
                    _ => Value::Table(table),
                },
                other => other,
            })
        })?,
    )?;
    native.raw_set(
        "error_value",
        lua.create_function(|lua, error: Value| {
            Ok(match error {
                Value::Error(error) => match caught(&error) {
                    Caught::Reply(text) => {
                        let table = lua.create_table()?;
                        table.raw_set("err", text)?;
                        Value::Table(table)
                    }
                    Caught::Message(text) | Caught::Other(text) => {
                        Value::String(lua.create_string(text)?)
                    }
                },
                other => other,
            })
        })?,
    )?;
    native.raw_set(
        "sha1hex",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return Err(reply_error("wrong number of arguments"));
            }
            let bytes = match args.front() {
                Some(Value::String(s)) => s.as_bytes().to_vec(),
                Some(Value::Integer(n)) => n.to_string().into_bytes(),
                Some(Value::Number(n)) => format_g(*n, 14).into_bytes(),
                _ => Vec::new(),
            };
            Ok(sha1_hex(&bytes))
        })?,
    )?;
    native.raw_set("log", lua.create_function(log)?)?;
    let base_load: Function = lua.globals().raw_get("load")?;
    native.raw_set(
        "load",
        lua.create_function(move |lua, (chunk, name): (Value, Option<mlua::String>)| {
            if !matches!(chunk, Value::Function(_)) {
                return Err(message_error(
                    lua,
                    &format!(
                        "bad argument #1 to 'load' (function expected, got {})",
                        lua51_type(&chunk)
                    ),
                ));
            }
            let name = name.map_or_else(|| "=(load)".to_owned(), |n| n.to_string_lossy());
            base_load.call::<MultiValue>((chunk, name, "t"))
        })?,
    )?;
    native.raw_set(
        "set_repl",
        lua.create_function(|_, args: MultiValue| {
            if args.len() != 1 {
                return Err(reply_error("redis.set_repl() requires two arguments."));
            }
            let flags = match args.front() {
                Some(Value::Integer(n)) => *n,
                Some(Value::Number(n)) => *n as i64,
                _ => 0,
            };
            if flags & !3 != 0 {
                return Err(reply_error(
                    "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                ));
            }
            // Every write replicates synchronously: nothing to choose.
            Ok(())
        })?,
    )?;
    let handled = Arc::clone(hook);
    native.raw_set(
        "error_handler",
        lua.create_function(move |lua, error: Value| error_handler(lua, error, &handled))?,
    )?;
    native.raw_set(
        "json_encode",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(message_error(
                    lua,
                    "bad argument #1 to 'encode' (expected 1 argument)",
                ));
            }
            settle(
                lua,
                json::encode(lua, args.into_iter().next().unwrap_or(Value::Nil))?,
            )
        })?,
    )?;
    native.raw_set(
        "json_decode",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(message_error(
                    lua,
                    "bad argument #1 to 'decode' (expected 1 argument)",
                ));
            }
            settle(
                lua,
                json::decode(lua, args.into_iter().next().unwrap_or(Value::Nil))?,
            )
        })?,
    )?;
    native.raw_set(
        "msgpack_pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(message_error(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            settle(lua, msgpack::pack(lua, args)?)
        })?,
    )?;
    native.raw_set(
        "msgpack_unpack",
        lua.create_function(|lua, input: Value| {
            settle_many(lua, msgpack::unpack(lua, (input, 0, 0))?)
        })?,
    )?;
    native.raw_set(
        "msgpack_unpack_one",
        lua.create_function(|lua, (input, offset): (Value, Option<i64>)| {
            settle_many(lua, msgpack::unpack(lua, (input, 1, offset.unwrap_or(0)))?)
        })?,
    )?;
    native.raw_set(
        "msgpack_unpack_limit",
        lua.create_function(|lua, (input, limit, offset): (Value, i64, Option<i64>)| {
            settle_many(
                lua,
                msgpack::unpack(lua, (input, limit, offset.unwrap_or(0)))?,
            )
        })?,
    )?;
    native.raw_set(
        "struct_pack",
        lua.create_function(|lua, args: MultiValue| settle(lua, structs::pack(lua, args)?))?,
    )?;
    native.raw_set(
        "struct_unpack",
        lua.create_function(|lua, args: MultiValue| settle_many(lua, structs::unpack(lua, args)?))?,
    )?;
    native.raw_set(
        "struct_size",
        lua.create_function(|lua, args: MultiValue| settle(lua, structs::size(lua, args)?))?,
    )?;
    Ok(native)
}

/// Lua 5.1's name of a value's type.
fn lua51_type(value: &Value) -> &'static str {
    match value {
        Value::LightUserData(_) | Value::UserData(_) | Value::Error(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        other => other.type_name(),
    }
}

/// A library function's `(ok, value)`: the value, or its message raised.
fn settle(lua: &Lua, (ok, value): (bool, Value)) -> mlua::Result<Value> {
    if ok {
        return Ok(value);
    }
    let text = match value {
        Value::String(s) => s.to_string_lossy(),
        other => format!("{other:?}"),
    };
    Err(message_error(lua, &text))
}

/// `(ok, values…)`: the values, or the message raised.
fn settle_many(lua: &Lua, mut values: MultiValue) -> mlua::Result<MultiValue> {
    match values.pop_front() {
        Some(Value::Boolean(true)) => Ok(values),
        _ => settle(lua, (false, values.pop_front().unwrap_or(Value::Nil)))
            .map(|_| MultiValue::new()),
    }
}

/// `redis.log(level, ...)`.
fn log(_: &Lua, args: MultiValue) -> mlua::Result<()> {
    if args.len() < 2 {
        return Err(reply_error("redis.log() requires two arguments or more."));
    }
    let mut args = args.into_iter();
    let level = match args.next() {
        Some(Value::Integer(n)) => n,
        Some(Value::Number(n)) => n as i64,
        Some(Value::String(s)) => {
            match s.to_str().ok().and_then(|s| s.trim().parse::<f64>().ok()) {
                Some(n) => n as i64,
                None => return Err(reply_error("First argument must be a number (log level).")),
            }
        }
        _ => return Err(reply_error("First argument must be a number (log level).")),
    };
    if !(0..=3).contains(&level) {
        return Err(reply_error("Invalid debug level."));
    }
    let mut parts = Vec::new();
    for arg in args {
        match arg {
            Value::String(s) => parts.push(s.to_string_lossy()),
            Value::Integer(n) => parts.push(n.to_string()),
            Value::Number(n) => parts.push(format_g(n, 14)),
            _ => {}
        }
    }
    let text = parts.join(" ");
    match level {
        0 | 1 => tracing::debug!(target: "redis_script", "{text}"),
        2 => tracing::info!(target: "redis_script", "{text}"),
        _ => tracing::warn!(target: "redis_script", "{text}"),
    }
    Ok(())
}

/// Redis's error handler: the error as a table (`{err = "ERR …"}` for a
/// plain message) with the script line it was raised on.
fn error_handler(lua: &Lua, error: Value, hook: &Hook) -> mlua::Result<Table> {
    let table = if hook.kill.load(Relaxed) {
        error_table(lua, KILLED)?
    } else if hook.load_timed_out.load(Relaxed) {
        error_table(lua, LOAD_TIMEOUT)?
    } else {
        match error {
            Value::Table(table) => table,
            other => {
                let text = match &other {
                    Value::Error(error) => match caught(error) {
                        Caught::Reply(text) => text,
                        Caught::Message(text) | Caught::Other(text) => format!("ERR {text}"),
                    },
                    Value::String(s) => format!("ERR {}", s.to_string_lossy()),
                    Value::Integer(n) => format!("ERR {n}"),
                    Value::Number(n) => format!("ERR {}", format_g(*n, 14)),
                    Value::Boolean(b) => format!("ERR {b}"),
                    Value::Nil => "ERR nil".to_owned(),
                    other => format!("ERR {}", other.type_name()),
                };
                let table = lua.create_table()?;
                table.raw_set("err", text)?;
                table
            }
        }
    };
    for level in 1..32 {
        let frame = lua.inspect_stack(level, |debug| {
            let source = debug.source();
            (
                source.what,
                source.source.map(|s| s.into_owned()),
                debug.current_line(),
            )
        });
        let Some((what, source, line)) = frame else {
            break;
        };
        if what == "C" || source.as_deref() == Some(INTERNAL) {
            continue;
        }
        if let Some(source) = source {
            table.raw_set("source", source)?;
        }
        if let Some(line) = line {
            table.raw_set("line", line as i64)?;
        }
        break;
    }
    Ok(table)
}

/// An error table as Redis makes one from a message: `-CODE text` keeps
/// its code, anything else gets `ERR`; line breaks at the ends go.
pub fn error_table(lua: &Lua, text: &str) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set("err", error_text_of(text))?;
    Ok(table)
}

pub fn error_text_of(text: &str) -> String {
    let (code, message) = match text.strip_prefix('-') {
        Some(rest) => match rest.split_once(' ') {
            Some((code, message)) => (code, message),
            None => ("ERR", rest),
        },
        None => ("ERR", text),
    };
    let message = message.trim_matches(|c| c == '\r' || c == '\n');
    format!("{code} {message}")
}

/// The text of an error raised in Lua or by the Rust side.
pub fn error_text(error: &mlua::Error) -> String {
    match error {
        mlua::Error::RuntimeError(message)
        | mlua::Error::MemoryError(message)
        | mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        mlua::Error::WithContext { cause, .. } => error_text(cause),
        other => other.to_string(),
    }
}

fn truncated(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

fn raw_string(table: &Table, key: &str) -> Option<String> {
    match table.raw_get::<Value>(key).ok()? {
        Value::String(s) => Some(s.to_string_lossy()),
        _ => None,
    }
}

/// Lua 5.4's syntax messages worded as Lua 5.1 words the common ones.
pub fn lua51_words(message: &str) -> String {
    message.replace("near <eof>", "near '<eof>'")
}

pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// A name FUNCTION LOAD accepts for a library or a function.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `redis.call`'s arguments as command arguments: strings as they are,
/// numbers as `%.17g` (integers in full), anything else refused.
fn command_args(args: MultiValue) -> Result<Vec<Vec<u8>>, String> {
    if args.is_empty() {
        return Err("Please specify at least one argument for this redis lib call".to_owned());
    }
    let mut argv = Vec::with_capacity(args.len());
    for arg in args {
        argv.push(match arg {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Integer(n) => n.to_string().into_bytes(),
            Value::Number(n) => format_g(n, 17).into_bytes(),
            _ => {
                return Err(
                    "Lua redis lib command arguments must be strings or integers".to_owned(),
                )
            }
        });
    }
    Ok(argv)
}

/// `redis.register_function`'s arguments, positional or named.
fn register_args(args: MultiValue) -> Result<Registered, &'static str> {
    let mut args = args.into_iter();
    let count = args.len();
    if !(1..=2).contains(&count) {
        return Err("wrong number of arguments to redis.register_function");
    }
    let first = args.next().unwrap_or(Value::Nil);
    if count == 2 {
        let name = match first {
            Value::String(s) => s.to_string_lossy(),
            Value::Integer(n) => n.to_string(),
            Value::Number(n) => format_g(n, 14),
            _ => return Err("first argument to redis.register_function must be a string"),
        };
        let Some(Value::Function(function)) = args.next() else {
            return Err("second argument to redis.register_function must be a function");
        };
        return Ok(Registered {
            name,
            description: None,
            flags: Vec::new(),
            function,
        });
    }
    let Value::Table(named) = first else {
        return Err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
    };
    let (mut name, mut description, mut function, mut flags) = (None, None, None, Vec::new());
    for pair in named.pairs::<Value, Value>() {
        let Ok((key, value)) = pair else {
            return Err("named argument key given to redis.register_function is not a string");
        };
        let key = match key {
            Value::String(s) => s.to_string_lossy().to_ascii_lowercase(),
            Value::Integer(n) => n.to_string(),
            _ => return Err("named argument key given to redis.register_function is not a string"),
        };
        match key.as_str() {
            "function_name" => {
                match value {
                    Value::String(s) => name = Some(s.to_string_lossy()),
                    Value::Integer(n) => name = Some(n.to_string()),
                    _ => return Err(
                        "function_name argument given to redis.register_function must be a string",
                    ),
                }
            }
            "description" => {
                match value {
                    Value::String(s) => description = Some(s.to_string_lossy()),
                    Value::Integer(n) => description = Some(n.to_string()),
                    _ => return Err(
                        "description argument given to redis.register_function must be a string",
                    ),
                }
            }
            "callback" => match value {
                Value::Function(f) => function = Some(f),
                _ => {
                    return Err(
                        "callback argument given to redis.register_function must be a function",
                    )
                }
            },
            "flags" => {
                let Value::Table(list) = value else {
                    return Err("flags argument to redis.register_function must be a table representing function flags");
                };
                flags = read_flags(&list).ok_or("unknown flag given")?;
            }
            _ => return Err("unknown argument given to redis.register_function"),
        }
    }
    let Some(name) = name else {
        return Err("redis.register_function must get a function name argument");
    };
    let Some(function) = function else {
        return Err("redis.register_function must get a callback argument");
    };
    Ok(Registered {
        name,
        description,
        flags,
        function,
    })
}

fn read_flags(list: &Table) -> Option<Vec<&'static str>> {
    let mut flags = Vec::new();
    for index in 1.. {
        let text = match list.raw_get::<Value>(index).ok()? {
            Value::Nil => break,
            Value::String(s) => s.to_string_lossy(),
            Value::Integer(n) => n.to_string(),
            _ => return None,
        };
        let flag = FLAGS.iter().find(|flag| flag.eq_ignore_ascii_case(&text))?;
        if !flags.contains(flag) {
            flags.push(*flag);
        }
    }
    flags.sort_by_key(|flag| FLAGS.iter().position(|f| f == flag));
    Some(flags)
}

/// A float as C's `(long long)` cast gives it on x86-64: truncated, and
/// the "integer indefinite" value for NaN and out-of-range numbers.
fn truncate(n: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if (-LIMIT..LIMIT).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

/// A Lua value as the script's reply, as Redis converts it: numbers
/// truncated to integers, a table as an array up to its first nil unless
/// it is `{err=…}`, `{ok=…}`, `{double=…}`, `{map=…}`, `{set=…}`,
/// `{big_number=…}` or `{verbatim_string=…}`; `true` is 1 and `false` nil
/// (booleans under `redis.setresp(3)`). False when the reply is too deep
/// or too large.
fn lua_to_reply(
    value: &Value,
    script_resp3: bool,
    out: &mut Out,
    depth: usize,
    budget: &mut usize,
) -> bool {
    if depth > REPLY_DEPTH_MAX || *budget == 0 {
        return false;
    }
    *budget -= 1;
    match value {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Boolean(b) => {
            if script_resp3 {
                out.bool(*b);
            } else if *b {
                out.int(1);
            } else {
                out.null();
            }
        }
        Value::Integer(n) => out.int(*n),
        Value::Number(n) => out.int(truncate(*n)),
        Value::Table(table) => return table_to_reply(table, script_resp3, out, depth, budget),
        _ => out.null(),
    }
    true
}

fn table_to_reply(
    table: &Table,
    script_resp3: bool,
    out: &mut Out,
    depth: usize,
    budget: &mut usize,
) -> bool {
    if let Value::String(text) = table.raw_get::<Value>("err").unwrap_or(Value::Nil) {
        out.error(&text.to_string_lossy());
        return true;
    }
    if let Value::String(text) = table.raw_get::<Value>("ok").unwrap_or(Value::Nil) {
        let text = text.to_string_lossy().replace(['\r', '\n'], " ");
        out.simple(&text);
        return true;
    }
    match table.raw_get::<Value>("double").unwrap_or(Value::Nil) {
        Value::Integer(n) => {
            out.double(n as f64);
            return true;
        }
        Value::Number(n) => {
            out.double(n);
            return true;
        }
        _ => {}
    }
    if let Value::String(text) = table.raw_get::<Value>("big_number").unwrap_or(Value::Nil) {
        let text: Vec<u8> = text
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        out.big_number(&text);
        return true;
    }
    if let Value::Table(verbatim) = table
        .raw_get::<Value>("verbatim_string")
        .unwrap_or(Value::Nil)
    {
        let format = verbatim.raw_get::<Value>("format").unwrap_or(Value::Nil);
        let text = verbatim.raw_get::<Value>("string").unwrap_or(Value::Nil);
        if let (Value::String(format), Value::String(text)) = (format, text) {
            out.verbatim_as(&format.as_bytes(), &text.as_bytes());
            return true;
        }
    }
    if let Value::Table(map) = table.raw_get::<Value>("map").unwrap_or(Value::Nil) {
        let pairs: Vec<(Value, Value)> =
            map.pairs::<Value, Value>().filter_map(Result::ok).collect();
        out.map(pairs.len());
        for (key, value) in &pairs {
            if !lua_to_reply(key, script_resp3, out, depth + 1, budget)
                || !lua_to_reply(value, script_resp3, out, depth + 1, budget)
            {
                return false;
            }
        }
        return true;
    }
    if let Value::Table(set) = table.raw_get::<Value>("set").unwrap_or(Value::Nil) {
        let members: Vec<Value> = set
            .pairs::<Value, Value>()
            .filter_map(Result::ok)
            .map(|(key, _)| key)
            .collect();
        out.set(members.len());
        for member in &members {
            if !lua_to_reply(member, script_resp3, out, depth + 1, budget) {
                return false;
            }
        }
        return true;
    }
    let mut items = Vec::new();
    for index in 1.. {
        match table.raw_get::<Value>(index).unwrap_or(Value::Nil) {
            Value::Nil => break,
            value => items.push(value),
        }
        if items.len() > *budget {
            return false;
        }
    }
    out.array(items.len());
    for item in &items {
        if !lua_to_reply(item, script_resp3, out, depth + 1, budget) {
            return false;
        }
    }
    true
}

/// A command's RESP reply as the Lua value `redis.call` returns: an
/// integer, a string, false for a null bulk or array, a table for an
/// array, `{ok=…}`, `{err=…}`, and the RESP3 types as Redis maps them.
fn reply_to_lua(lua: &Lua, reply: &[u8], at: &mut usize, depth: usize) -> mlua::Result<Value> {
    let bad = || mlua::Error::RuntimeError("malformed reply".to_owned());
    if depth > REPLY_DEPTH_MAX {
        return Err(bad());
    }
    let kind = *reply.get(*at).ok_or_else(bad)?;
    let line_end = reply[*at..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or_else(bad)?
        + *at;
    let line = &reply[*at + 1..line_end];
    *at = line_end + 2;
    let number = || -> mlua::Result<i64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(bad)
    };
    let text = || String::from_utf8_lossy(line).into_owned();
    Ok(match kind {
        b'+' => {
            let table = lua.create_table()?;
            table.raw_set("ok", lua.create_string(line)?)?;
            Value::Table(table)
        }
        b'-' => Value::Table(error_table(lua, &format!("-{}", text()))?),
        b':' => Value::Integer(number()?),
        b'$' | b'=' | b'!' => {
            let length = number()?;
            if length < 0 {
                return Ok(Value::Boolean(false));
            }
            let end = *at + length as usize;
            let bytes = reply.get(*at..end).ok_or_else(bad)?;
            *at = end + 2;
            match kind {
                b'$' => Value::String(lua.create_string(bytes)?),
                b'!' => Value::Table(error_table(
                    lua,
                    &format!("-{}", String::from_utf8_lossy(bytes)),
                )?),
                _ => {
                    let (format, body) = bytes.split_at(bytes.len().min(4));
                    let inner = lua.create_table()?;
                    inner.raw_set("format", lua.create_string(&format[..format.len().min(3)])?)?;
                    inner.raw_set("string", lua.create_string(body)?)?;
                    let table = lua.create_table()?;
                    table.raw_set("verbatim_string", inner)?;
                    Value::Table(table)
                }
            }
        }
        b'*' | b'>' => {
            let count = number()?;
            if count < 0 {
                return Ok(Value::Boolean(false));
            }
            let table = lua.create_table_with_capacity(count as usize, 0)?;
            for index in 1..=count {
                table.raw_set(index, reply_to_lua(lua, reply, at, depth + 1)?)?;
            }
            Value::Table(table)
        }
        b'%' | b'|' => {
            let count = number()?;
            let map = lua.create_table()?;
            for _ in 0..count {
                let key = reply_to_lua(lua, reply, at, depth + 1)?;
                let value = reply_to_lua(lua, reply, at, depth + 1)?;
                if !key.is_nil() {
                    map.raw_set(key, value)?;
                }
            }
            if kind == b'|' {
                // An attribute: skipped, the reply follows.
                return reply_to_lua(lua, reply, at, depth);
            }
            let table = lua.create_table()?;
            table.raw_set("map", map)?;
            Value::Table(table)
        }
        b'~' => {
            let count = number()?;
            let set = lua.create_table()?;
            for _ in 0..count {
                let member = reply_to_lua(lua, reply, at, depth + 1)?;
                if !member.is_nil() {
                    set.raw_set(member, true)?;
                }
            }
            let table = lua.create_table()?;
            table.raw_set("set", set)?;
            Value::Table(table)
        }
        b'_' => Value::Nil,
        b'#' => Value::Boolean(line == b"t"),
        b',' => {
            let value = match text().as_str() {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                "nan" => f64::NAN,
                other => other.parse().map_err(|_| bad())?,
            };
            let table = lua.create_table()?;
            table.raw_set("double", value)?;
            Value::Table(table)
        }
        b'(' => {
            let table = lua.create_table()?;
            table.raw_set("big_number", lua.create_string(line)?)?;
            Value::Table(table)
        }
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo {
        resp3: bool,
        calls: Vec<Vec<Vec<u8>>>,
    }

    impl Host for Echo {
        fn call(&mut self, args: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
            self.calls.push(args.clone());
            match args[0].as_slice() {
                b"nosuch" => Err("Unknown Redis command called from script".to_owned()),
                b"wrongtype" => Ok(
                    b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
                        .to_vec(),
                ),
                b"nil" => Ok(b"$-1\r\n".to_vec()),
                b"mixed" => Ok(b"*4\r\n:1\r\n$1\r\nx\r\n*-1\r\n+OK\r\n".to_vec()),
                b"map" => Ok(b"%1\r\n$1\r\na\r\n,1.5\r\n".to_vec()),
                _ => Ok(b"+PONG\r\n".to_vec()),
            }
        }
        fn acl_check(&mut self, _: Vec<Vec<u8>>) -> Result<bool, String> {
            Ok(true)
        }
        fn set_resp3(&mut self, resp3: bool) {
            self.resp3 = resp3;
        }
        fn resp3(&self) -> bool {
            self.resp3
        }
    }

    fn eval(vm: &Vm, body: &str, keys: &[&str], args: &[&str]) -> String {
        let function = match vm.compile(body.as_bytes(), "user_script") {
            Ok(f) => f,
            Err(error) => return format!("compile: {error}"),
        };
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        let args: Vec<Vec<u8>> = args.iter().map(|k| k.as_bytes().to_vec()).collect();
        let mut host = Echo {
            resp3: false,
            calls: Vec::new(),
        };
        let mut out = Out::new(false);
        let invocation = Invocation {
            function: &function,
            eval: true,
            keys: &keys,
            args: &args,
            name: "sha",
        };
        vm.call(&invocation, &mut host, &mut out);
        String::from_utf8_lossy(&out.buf).into_owned()
    }

    #[test]
    fn values_convert_as_redis_converts_them() {
        let vm = Vm::new(Arc::default()).expect("state");
        assert_eq!(eval(&vm, "return 1.9", &[], &[]), ":1\r\n");
        assert_eq!(
            eval(&vm, "return {1,2,{3,'x'},nil,4}", &[], &[]),
            "*3\r\n:1\r\n:2\r\n*2\r\n:3\r\n$1\r\nx\r\n"
        );
        assert_eq!(eval(&vm, "return true", &[], &[]), ":1\r\n");
        assert_eq!(eval(&vm, "return false", &[], &[]), "$-1\r\n");
        assert_eq!(eval(&vm, "return {ok='fine'}", &[], &[]), "+fine\r\n");
        assert_eq!(eval(&vm, "return {ok=1}", &[], &[]), "*0\r\n");
        assert_eq!(
            eval(&vm, "return redis.error_reply('MYERR boom')", &[], &[]),
            "-MYERR boom\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.error_reply('boom')", &[], &[]),
            "-ERR boom\r\n"
        );
        assert_eq!(
            eval(&vm, "return {double=3.14}", &[], &[]),
            "$18\r\n3.1400000000000001\r\n"
        );
        assert_eq!(
            eval(&vm, "return {KEYS[1], ARGV[2]}", &["k"], &["a", "b"]),
            "*2\r\n$1\r\nk\r\n$1\r\nb\r\n"
        );
        assert_eq!(
            eval(
                &vm,
                "return tostring(4/2) .. ' ' .. tostring(3/2)",
                &[],
                &[]
            ),
            "$5\r\n2 1.5\r\n"
        );
    }

    #[test]
    fn replies_become_lua_values() {
        let vm = Vm::new(Arc::default()).expect("state");
        assert_eq!(
            eval(&vm, "return type(redis.call('nil'))", &[], &[]),
            "$7\r\nboolean\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.call('mixed')", &[], &[]),
            "*4\r\n:1\r\n$1\r\nx\r\n$-1\r\n+OK\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.call('map').map.a.double", &[], &[]),
            ":1\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.pcall('wrongtype')", &[], &[]),
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.call('wrongtype')", &[], &[]),
            "-WRONGTYPE Operation against a key holding the wrong kind of value script: sha, \
             on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(&vm, "\n\nreturn redis.call('nosuch')", &[], &[]),
            "-ERR Unknown Redis command called from script script: sha, on @user_script:3.\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.call()", &[], &[]),
            "-ERR Please specify at least one argument for this redis lib call script: sha, \
             on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(&vm, "return redis.call({})", &[], &[]),
            "-ERR Lua redis lib command arguments must be strings or integers script: sha, \
             on @user_script:1.\r\n"
        );
    }

    #[test]
    fn the_sandbox_refuses_globals_and_changes() {
        let vm = Vm::new(Arc::default()).expect("state");
        assert_eq!(
            eval(&vm, "os.exit()", &[], &[]),
            "-ERR user_script:1: Script attempted to access nonexistent global variable 'os' \
             script: sha, on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(&vm, "x = 1", &[], &[]),
            "-ERR user_script:1: Attempt to modify a readonly table script: sha, \
             on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(&vm, "redis.call = nil", &[], &[]),
            "-ERR user_script:1: Attempt to modify a readonly table script: sha, \
             on @user_script:1.\r\n"
        );
        for name in [
            "io", "require", "loadfile", "dofile", "print", "debug", "package",
        ] {
            let reply = eval(&vm, &format!("return {name}"), &[], &[]);
            assert!(
                reply.contains("nonexistent global variable"),
                "{name}: {reply}"
            );
        }
        assert_eq!(
            eval(
                &vm,
                "return load(string.dump(function() return 1 end))",
                &[],
                &[]
            ),
            "-ERR user_script:1: bad argument #1 to 'load' (function expected, got string) \
             script: sha, on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(
                &vm,
                "return loadstring(string.dump(function() return 1 end))",
                &[],
                &[]
            ),
            "$-1\r\n"
        );
        assert_eq!(eval(&vm, "return unpack({1,2})", &[], &[]), ":1\r\n");
        assert_eq!(
            eval(&vm, "return loadstring('return 7')()", &[], &[]),
            ":7\r\n"
        );
        // Nothing a script did is left for the next one.
        assert_eq!(
            eval(&vm, "rawset(_G, 'y', 1)", &[], &[]),
            "-ERR Attempt to modify a readonly table script: sha, on @user_script:1.\r\n"
        );
        assert_eq!(eval(&vm, "return _VERSION", &[], &[]), "$7\r\nLua 5.1\r\n");
    }

    #[test]
    fn errors_name_the_script_line() {
        let vm = Vm::new(Arc::default()).expect("state");
        assert_eq!(
            eval(&vm, "error('boom')", &[], &[]),
            "-ERR user_script:1: boom script: sha, on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(&vm, "error({err='MYERR x'})", &[], &[]),
            "-MYERR x script: sha, on @user_script:1.\r\n"
        );
        assert_eq!(
            eval(&vm, "return 1 +", &[], &[]),
            "compile: user_script:1: unexpected symbol near <eof>"
        );
    }

    #[test]
    fn a_killed_script_stops_even_inside_pcall() {
        let hook = Arc::new(Hook::default());
        let vm = Vm::new(Arc::clone(&hook)).expect("state");
        hook.kill.store(true, Relaxed);
        assert_eq!(
            eval(
                &vm,
                "while true do pcall(function() while true do end end) end",
                &[],
                &[]
            ),
            "-ERR Script killed by user with SCRIPT KILL... script: sha, on @user_script:1.\r\n"
        );
        hook.kill.store(false, Relaxed);
        assert_eq!(eval(&vm, "return 2", &[], &[]), ":2\r\n");
    }

    #[test]
    fn memory_is_bounded() {
        let vm = Vm::new(Arc::default()).expect("state");
        let reply = eval(
            &vm,
            "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end",
            &[],
            &[],
        );
        assert!(
            reply.starts_with("-ERR Error running script sha, not enough memory"),
            "{reply}"
        );
        assert_eq!(eval(&vm, "return 3", &[], &[]), ":3\r\n");
    }
}
