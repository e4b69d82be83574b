//! Lua UDFs: runs record UDFs and stream UDFs (aggregations) written
//! against the Aerospike UDF API (`record`, `list`, `map`, `bytes`,
//! `aerospike`, streams) in Lua 5.4 (built from source by `mlua`).
//!
//! Each thread keeps one Lua state per module, rebuilt when the modules
//! change. Every call runs under a deadline (checked every
//! [`HOOK_INSTRUCTIONS`] instructions; a protected call cannot swallow it)
//! and a memory limit per state; a state that failed is dropped, so a
//! hostile UDF answers an error and leaves nothing behind.
//!
//! The crate knows nothing of storage: the caller hands it a record's bins
//! and metadata ([`RecordInfo`]) and applies the [`RecordOutcome`].
//! Depends on `bolide-types` and `bolide-wire` (msgpack reader) only.
#![deny(unsafe_code)]
#![deny(clippy::unwrap_used)]

mod api;
pub mod bytes;
pub mod value;

pub use value::Value;

use mlua::{HookTriggers, Lua, LuaOptions, StdLib, VmState};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Instructions between two checks of the deadline.
pub const HOOK_INSTRUCTIONS: u32 = 1000;
/// Memory one Lua state may use.
pub const STATE_MEMORY_BYTES: usize = 64 * 1024 * 1024;
/// Longest a UDF may run when the request gives no timeout.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(1);
/// The error of a UDF past its deadline (the server's text).
pub const TIMEOUT_MESSAGE: &str = "UDF Execution Timeout";

/// Where UDF modules come from (the node's registered modules).
pub trait Sources: Send + Sync {
    /// Bumped by every change to any module.
    fn generation(&self) -> u64;
    /// A module's source by file name (`name.lua`).
    fn source(&self, filename: &str) -> Option<Arc<[u8]>>;
}

/// A record as a UDF sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordInfo {
    pub exists: bool,
    pub bins: Vec<(Vec<u8>, Value)>,
    pub generation: u16,
    /// Seconds to live; 0xFFFF_FFFF = never expires.
    pub ttl: u32,
    /// Milliseconds since 1970.
    pub last_update_ms: u64,
    pub set_name: Option<String>,
    pub digest: [u8; 20],
    pub key: Option<Value>,
    pub stored_bytes: usize,
}

/// What a record UDF did to its record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordOutcome {
    /// The record is to be written (or deleted, if no bins are left).
    pub updated: bool,
    /// The record exists (it existed, or the UDF created it).
    pub exists: bool,
    pub bins: Vec<(Vec<u8>, Value)>,
    /// A TTL the UDF set (`record.set_ttl`).
    pub ttl: Option<u32>,
    /// The UDF asked not to store the key (`record.drop_key`).
    pub drop_key: bool,
}

/// A UDF failure: the text the client gets in its `FAILURE` bin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdfError(pub String);

/// Why a module's source does not compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    pub line: u32,
    pub message: String,
}

thread_local! {
    /// This thread's Lua states: module file name → (sources generation, state).
    static STATES: RefCell<HashMap<String, (u64, Lua)>> = RefCell::new(HashMap::new());
    /// The deadline of the UDF running on this thread.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Compiles a module's source without running it.
pub fn check_source(filename: &str, source: &[u8]) -> Result<(), CompileError> {
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::default()).map_err(|error| CompileError {
        line: 0,
        message: error.to_string(),
    })?;
    let _ = lua.set_memory_limit(STATE_MEMORY_BYTES);
    match lua
        .load(source)
        .set_name(format!("@{filename}"))
        .into_function()
    {
        Ok(_) => Ok(()),
        Err(error) => {
            // "<file>:<line>: <message>", as Lua words it; the server
            // answers the line and the message apart.
            let text = api::error_text(&error);
            let mut parts = text.splitn(3, ':');
            let (_, line, message) = (parts.next(), parts.next(), parts.next());
            match (line.and_then(|line| line.trim().parse().ok()), message) {
                (Some(line), Some(message)) => Err(CompileError {
                    line,
                    message: message.trim_start().to_owned(),
                }),
                _ => Err(CompileError {
                    line: 0,
                    message: text,
                }),
            }
        }
    }
}

/// Runs record UDF `module.function(record, args...)`. Returns the UDF's
/// return value (or its failure) and what it did to the record.
pub fn apply_record(
    sources: &Arc<dyn Sources>,
    module: &str,
    function: &str,
    args: &[Value],
    record: RecordInfo,
    time_limit: Duration,
) -> (Result<Value, UdfError>, RecordOutcome) {
    let state = Rc::new(RefCell::new(api::RecState::new(record, false)));
    let result = with_state(sources, module, time_limit, |lua| {
        api::call_record(lua, function, args, state.clone())
    });
    let outcome = state.borrow().outcome();
    (result, outcome)
}

/// Runs stream UDF `module.function(stream, args...)` over `records`,
/// passing each value it outputs to `emit`.
pub fn apply_stream(
    sources: &Arc<dyn Sources>,
    module: &str,
    function: &str,
    args: &[Value],
    records: &mut dyn Iterator<Item = RecordInfo>,
    emit: &mut dyn FnMut(Value),
    time_limit: Duration,
) -> Result<(), UdfError> {
    with_state(sources, module, time_limit, |lua| {
        api::call_stream(lua, function, args, records, emit)
    })
}

/// Runs `body` in this thread's state for `module` (made if missing or
/// stale) under the deadline; a state whose call failed is dropped.
fn with_state<T>(
    sources: &Arc<dyn Sources>,
    module: &str,
    time_limit: Duration,
    body: impl FnOnce(&Lua) -> Result<T, UdfError>,
) -> Result<T, UdfError> {
    let filename = format!("{module}.lua");
    let generation = sources.generation();
    let cached = STATES.with(|states| {
        let mut states = states.borrow_mut();
        match states.remove(&filename) {
            Some((cached_generation, lua)) if cached_generation == generation => Some(lua),
            _ => None,
        }
    });
    // The deadline covers loading the module too (its top level runs then).
    DEADLINE.with(|deadline| deadline.set(Some(Instant::now() + time_limit)));
    let result = match cached {
        Some(lua) => Ok(lua),
        None => new_state(sources, &filename),
    }
    .and_then(|lua| body(&lua).map(|value| (value, lua)));
    DEADLINE.with(|deadline| deadline.set(None));
    let (value, lua) = result?;
    STATES.with(|states| {
        states.borrow_mut().insert(filename, (generation, lua));
    });
    Ok(value)
}

fn timed_out() -> bool {
    DEADLINE.with(|deadline| deadline.get().is_some_and(|at| Instant::now() >= at))
}

/// A sandboxed state with the UDF API and `filename` loaded.
fn new_state(sources: &Arc<dyn Sources>, filename: &str) -> Result<Lua, UdfError> {
    let source = sources
        .source(filename)
        .ok_or_else(|| UdfError(format!("module not found: {filename}")))?;
    let libs = StdLib::TABLE
        | StdLib::STRING
        | StdLib::MATH
        | StdLib::UTF8
        | StdLib::COROUTINE
        | StdLib::PACKAGE
        | StdLib::OS;
    let lua = Lua::new_with(libs, LuaOptions::default()).map_err(failure)?;
    lua.set_memory_limit(STATE_MEMORY_BYTES).map_err(failure)?;
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
        |_, _| {
            if timed_out() {
                Err(mlua::Error::RuntimeError(TIMEOUT_MESSAGE.to_owned()))
            } else {
                Ok(VmState::Continue)
            }
        },
    )
    .map_err(failure)?;
    api::install(&lua, sources.clone()).map_err(failure)?;
    lua.load(&*source)
        .set_name(format!("@{filename}"))
        .exec()
        .map_err(failure)?;
    Ok(lua)
}

fn failure(error: mlua::Error) -> UdfError {
    UdfError(api::error_text(&error))
}

#[cfg(test)]
mod tests;
