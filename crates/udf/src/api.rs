//! The Lua API a UDF uses: `record` (a record userdata and its functions),
//! `aerospike` (create, update, exists, remove, log), GeoJSON
//! values, `require` of other registered modules, and the conversion of
//! values between Lua and [`Value`]. Lists, maps and streams are Lua code
//! (`prelude.lua`); `bytes` is in `bytes.rs`.

use crate::bytes::Bytes;
use crate::value::Value;
use crate::{timed_out, RecordInfo, RecordOutcome, Sources, UdfError};
use bolide_types::{particle, BIN_NAME_BYTES_MAX};
use mlua::{
    AnyUserData, Function, Lua, MetaMethod, MultiValue, Table, UserData, UserDataMethods,
    Value as LuaValue,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Deepest nesting converted between Lua and [`Value`]; deeper (or
/// self-containing) lists and maps end in nil.
const DEPTH_MAX: usize = 64;
/// Bins a UDF may leave in a record.
const BINS_MAX: usize = bolide_types::BINS_PER_RECORD_MAX;

const PRELUDE: &str = include_str!("prelude.lua");
const LIST_META: &str = "bolide.list";
const MAP_META: &str = "bolide.map";

/// A record during one UDF call: its bins as stored, the changes the UDF
/// made but did not commit yet (`rec.bin = v` before `aerospike:update`),
/// and what it committed.
pub struct RecState {
    info: RecordInfo,
    read_only: bool,
    /// Uncommitted bin changes; None deletes the bin.
    pending: Vec<(Vec<u8>, Option<Value>)>,
    updated: bool,
    ttl: Option<u32>,
    drop_key: bool,
}

impl RecState {
    pub fn new(info: RecordInfo, read_only: bool) -> RecState {
        RecState {
            info,
            read_only,
            pending: Vec::new(),
            updated: false,
            ttl: None,
            drop_key: false,
        }
    }

    pub fn outcome(&self) -> RecordOutcome {
        RecordOutcome {
            updated: self.updated,
            exists: self.info.exists,
            bins: self.info.bins.clone(),
            ttl: self.ttl,
            drop_key: self.drop_key,
        }
    }

    fn bin(&self, name: &[u8]) -> Option<Value> {
        if let Some((_, change)) = self.pending.iter().rev().find(|(n, _)| n == name) {
            return change.clone();
        }
        self.info
            .bins
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.clone())
    }

    fn set(&mut self, name: Vec<u8>, value: Option<Value>) {
        match self.pending.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.pending.push((name, value)),
        }
    }

    /// Applies the pending changes (`aerospike:create`/`update`).
    fn commit(&mut self) -> i64 {
        for (name, change) in std::mem::take(&mut self.pending) {
            let position = self.info.bins.iter().position(|(n, _)| *n == name);
            match (position, change) {
                (Some(i), Some(value)) => {
                    if let Some(slot) = self.info.bins.get_mut(i) {
                        slot.1 = value;
                    }
                }
                (Some(i), None) => {
                    self.info.bins.remove(i);
                }
                (None, Some(value)) => self.info.bins.push((name, value)),
                (None, None) => {}
            }
        }
        if self.info.bins.len() > BINS_MAX {
            return -1;
        }
        self.updated = true;
        0
    }
}

/// The record userdata a UDF receives.
#[derive(Clone)]
pub struct Rec(pub Rc<RefCell<RecState>>);

impl UserData for Rec {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::Index, |lua, rec, name: mlua::String| {
            let value = rec.0.borrow().bin(&name.as_bytes());
            match value {
                Some(value) => to_lua(lua, &value, 0),
                None => Ok(LuaValue::Nil),
            }
        });
        methods.add_meta_method(
            MetaMethod::NewIndex,
            |lua, rec, (name, value): (mlua::String, LuaValue)| {
                let name = name.as_bytes().to_vec();
                if name.is_empty() || name.len() > BIN_NAME_BYTES_MAX {
                    return Err(mlua::Error::RuntimeError(format!(
                        "can't set bin {} - bin name too long",
                        String::from_utf8_lossy(&name)
                    )));
                }
                let change = match &value {
                    LuaValue::Nil => None,
                    LuaValue::Table(table) if !is_container(lua, table) => {
                        return Err(unsupported(&name))
                    }
                    LuaValue::Function(_)
                    | LuaValue::Thread(_)
                    | LuaValue::LightUserData(_)
                    | LuaValue::Error(_) => return Err(unsupported(&name)),
                    other => Some(from_lua(lua, other, 0)),
                };
                let mut state = rec.0.borrow_mut();
                if state.read_only {
                    return Err(mlua::Error::RuntimeError(
                        "can't set a bin of a record in a stream".to_owned(),
                    ));
                }
                state.set(name, change);
                Ok(())
            },
        );
    }
}

fn unsupported(name: &[u8]) -> mlua::Error {
    mlua::Error::RuntimeError(format!(
        "can't set bin {} to unsupported type",
        String::from_utf8_lossy(name)
    ))
}

/// A GeoJSON value.
#[derive(Clone, Debug)]
pub struct GeoJson(Vec<u8>);

impl UserData for GeoJson {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::ToString, |lua, g, ()| lua.create_string(&g.0));
    }
}

/// Sets up the API and the sandbox in a new state.
pub fn install(lua: &Lua, sources: Arc<dyn Sources>) -> mlua::Result<()> {
    let globals = lua.globals();
    globals.set(
        "bolide_timed_out",
        lua.create_function(|_, ()| Ok(timed_out()))?,
    )?;
    globals.set(
        "bolide_log",
        lua.create_function(|_, (level, message): (i64, mlua::String)| {
            let message = message.to_string_lossy();
            match level {
                1 => tracing::warn!(target: "udf", "{message}"),
                2 => tracing::info!(target: "udf", "{message}"),
                3 => tracing::debug!(target: "udf", "{message}"),
                _ => tracing::trace!(target: "udf", "{message}"),
            }
            Ok(())
        })?,
    )?;
    globals.set(
        "bolide_nbytes",
        lua.create_function(|lua, value: LuaValue| {
            Ok(from_lua(lua, &value, 0).to_msgpack().len())
        })?,
    )?;
    sandbox(lua, &globals, sources)?;
    lua.load(PRELUDE).set_name("@bolide").exec()?;
    let list_meta: Table = globals.get("List")?;
    let map_meta: Table = globals.get("Map")?;
    lua.set_named_registry_value(LIST_META, list_meta)?;
    lua.set_named_registry_value(MAP_META, map_meta)?;
    install_record(lua, &globals)?;
    crate::bytes::install(lua, &globals)?;
    install_aerospike(lua, &globals)?;
    Ok(())
}

/// No files, processes or native code: `io`, `debug` and most of `os`
/// are gone, and `require` finds only registered modules.
fn sandbox(lua: &Lua, globals: &Table, sources: Arc<dyn Sources>) -> mlua::Result<()> {
    globals.set("io", LuaValue::Nil)?;
    let os: Table = globals.get("os")?;
    let kept = lua.create_table()?;
    for name in ["time", "clock", "date", "difftime"] {
        kept.set(name, os.get::<LuaValue>(name)?)?;
    }
    globals.set("os", kept)?;
    let package: Table = globals.get("package")?;
    package.set("loadlib", LuaValue::Nil)?;
    package.set("path", "")?;
    package.set("cpath", "")?;
    let searchers: Table = package.get("searchers")?;
    let preload: Function = searchers.get(1)?;
    let from_sources = lua.create_function(move |lua, name: String| {
        let filename = format!("{name}.lua");
        match sources.source(&filename) {
            Some(source) => {
                let chunk = lua
                    .load(&*source)
                    .set_name(format!("@{filename}"))
                    .into_function()?;
                Ok(LuaValue::Function(chunk))
            }
            None => Ok(LuaValue::String(
                lua.create_string(format!("\n\tno registered module '{filename}'"))?,
            )),
        }
    })?;
    let replaced = lua.create_table()?;
    replaced.set(1, preload)?;
    replaced.set(2, from_sources)?;
    package.set("searchers", replaced)?;
    let collect: Function = globals.get("collectgarbage")?;
    let limited = lua.create_function(move |_, (option, arg): (Option<String>, LuaValue)| {
        match option.as_deref().unwrap_or("collect") {
            option @ ("collect" | "count" | "step") => collect.call::<MultiValue>((option, arg)),
            _ => Ok(MultiValue::new()),
        }
    })?;
    globals.set("collectgarbage", limited)?;
    Ok(())
}

fn install_record(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let record = lua.create_table()?;
    let info = |f: fn(&RecState) -> RecordField| {
        move |lua: &Lua, rec: AnyUserData| -> mlua::Result<LuaValue> {
            let rec = rec.borrow::<Rec>()?;
            let state = rec.0.borrow();
            match f(&state) {
                RecordField::Int(i) => Ok(LuaValue::Integer(i)),
                RecordField::Str(s) => Ok(LuaValue::String(lua.create_string(s)?)),
                RecordField::Value(v) => to_lua(lua, &v, 0),
                RecordField::Nil => Ok(LuaValue::Nil),
            }
        }
    };
    record.set(
        "ttl",
        lua.create_function(info(|s| {
            RecordField::Int(if s.info.exists {
                i64::from(s.info.ttl)
            } else {
                0
            })
        }))?,
    )?;
    record.set(
        "gen",
        lua.create_function(info(|s| {
            RecordField::Int(if s.info.exists {
                i64::from(s.info.generation)
            } else {
                0
            })
        }))?,
    )?;
    record.set(
        "last_update_time",
        lua.create_function(info(|s| {
            RecordField::Int(i64::try_from(s.info.last_update_ms).unwrap_or(i64::MAX))
        }))?,
    )?;
    for name in ["size", "device_size", "memory_size"] {
        record.set(
            name,
            lua.create_function(info(|s| {
                RecordField::Int(i64::try_from(s.info.stored_bytes).unwrap_or(i64::MAX))
            }))?,
        )?;
    }
    record.set(
        "setname",
        lua.create_function(info(|s| match &s.info.set_name {
            Some(name) => RecordField::Str(name.clone()),
            None => RecordField::Nil,
        }))?,
    )?;
    record.set(
        "key",
        lua.create_function(info(|s| match &s.info.key {
            Some(key) => RecordField::Value(key.clone()),
            None => RecordField::Nil,
        }))?,
    )?;
    record.set(
        "digest",
        lua.create_function(info(|s| {
            RecordField::Value(Value::Bytes(particle::BLOB, s.info.digest.to_vec()))
        }))?,
    )?;
    record.set(
        "numbins",
        lua.create_function(info(|s| {
            RecordField::Int(i64::try_from(s.info.bins.len()).unwrap_or(i64::MAX))
        }))?,
    )?;
    record.set(
        "bin_names",
        lua.create_function(info(|s| {
            RecordField::Value(Value::List(
                s.info
                    .bins
                    .iter()
                    .map(|(name, _)| Value::Str(name.clone()))
                    .collect(),
            ))
        }))?,
    )?;
    record.set(
        "set_ttl",
        lua.create_function(|_, (rec, ttl): (AnyUserData, i64)| {
            let rec = rec.borrow::<Rec>()?;
            rec.0.borrow_mut().ttl = Some(ttl as u32);
            Ok(())
        })?,
    )?;
    record.set(
        "drop_key",
        lua.create_function(|_, rec: AnyUserData| {
            let rec = rec.borrow::<Rec>()?;
            rec.0.borrow_mut().drop_key = true;
            Ok(())
        })?,
    )?;
    globals.set("record", record)
}

enum RecordField {
    Int(i64),
    Str(String),
    Value(Value),
    Nil,
}

fn install_aerospike(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let aerospike = lua.create_table()?;
    let with_rec = |f: fn(&mut RecState) -> i64| {
        move |_: &Lua, (_, rec): (LuaValue, AnyUserData)| -> mlua::Result<i64> {
            let rec = rec.borrow::<Rec>()?;
            let mut state = rec.0.borrow_mut();
            if state.read_only {
                return Ok(-1);
            }
            Ok(f(&mut state))
        }
    };
    aerospike.set(
        "create",
        lua.create_function(with_rec(|state| {
            if state.info.exists && !state.info.bins.is_empty() {
                return 1;
            }
            state.info.exists = true;
            state.commit()
        }))?,
    )?;
    aerospike.set(
        "update",
        lua.create_function(with_rec(|state| {
            if !state.info.exists {
                return -2;
            }
            state.commit()
        }))?,
    )?;
    aerospike.set(
        "remove",
        lua.create_function(with_rec(|state| {
            if !state.info.exists {
                return 1;
            }
            state.pending.clear();
            state.info.bins.clear();
            state.updated = true;
            0
        }))?,
    )?;
    aerospike.set(
        "exists",
        lua.create_function(|_, (_, rec): (LuaValue, AnyUserData)| {
            let rec = rec.borrow::<Rec>()?;
            let state = rec.0.borrow();
            Ok(state.info.exists && !state.info.bins.is_empty())
        })?,
    )?;
    aerospike.set(
        "log",
        lua.create_function(|lua, (_, level, message): (LuaValue, i64, mlua::String)| {
            let log: Function = lua.globals().get("bolide_log")?;
            log.call::<()>((level, message))
        })?,
    )?;
    aerospike.set(
        "get_current_time",
        lua.create_function(|_, _: LuaValue| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            Ok(i64::try_from(now).unwrap_or(i64::MAX))
        })?,
    )?;
    aerospike.set(
        "set_context",
        lua.create_function(|_, _: MultiValue| Ok(0))?,
    )?;
    aerospike.set("get_config", lua.create_function(|_, _: MultiValue| Ok(0))?)?;
    globals.set("aerospike", aerospike)
}

/// Calls record function `function` with the record and arguments.
pub fn call_record(
    lua: &Lua,
    function: &str,
    args: &[Value],
    state: Rc<RefCell<RecState>>,
) -> Result<Value, UdfError> {
    let run: Function = lua
        .globals()
        .get("bolide_run_record")
        .map_err(crate::failure)?;
    let mut values = MultiValue::new();
    values.push_back(LuaValue::String(
        lua.create_string(function).map_err(crate::failure)?,
    ));
    values.push_back(LuaValue::UserData(
        lua.create_userdata(Rec(state)).map_err(crate::failure)?,
    ));
    for arg in args {
        values.push_back(to_lua(lua, arg, 0).map_err(crate::failure)?);
    }
    let result: MultiValue = run.call(values).map_err(crate::failure)?;
    Ok(result
        .into_iter()
        .next()
        .map_or(Value::Nil, |value| from_lua(lua, &value, 0)))
}

/// Runs stream function `function` over `records`.
pub fn call_stream(
    lua: &Lua,
    function: &str,
    args: &[Value],
    records: &mut dyn Iterator<Item = RecordInfo>,
    emit: &mut dyn FnMut(Value),
) -> Result<(), UdfError> {
    let run: Function = lua
        .globals()
        .get("bolide_run_stream")
        .map_err(crate::failure)?;
    lua.scope(|scope| {
        let source = scope.create_function_mut(|lua, ()| match records.next() {
            Some(info) => {
                let state = Rc::new(RefCell::new(RecState::new(info, true)));
                Ok(LuaValue::UserData(lua.create_userdata(Rec(state))?))
            }
            None => Ok(LuaValue::Nil),
        })?;
        let sink = scope.create_function_mut(|lua, value: LuaValue| {
            emit(from_lua(lua, &value, 0));
            Ok(())
        })?;
        let mut values = MultiValue::new();
        values.push_back(LuaValue::String(lua.create_string(function)?));
        values.push_back(LuaValue::Function(source));
        values.push_back(LuaValue::Function(sink));
        for arg in args {
            values.push_back(to_lua(lua, arg, 0)?);
        }
        run.call::<()>(values)
    })
    .map_err(crate::failure)
}

/// A Lua value for `value`.
pub fn to_lua(lua: &Lua, value: &Value, depth: usize) -> mlua::Result<LuaValue> {
    if depth > DEPTH_MAX {
        return Ok(LuaValue::Nil);
    }
    Ok(match value {
        Value::Nil => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Int(i) => LuaValue::Integer(*i),
        Value::Float(f) => LuaValue::Number(*f),
        Value::Str(s) => LuaValue::String(lua.create_string(s)?),
        Value::Bytes(kind, data) => {
            LuaValue::UserData(lua.create_userdata(Bytes::new(lua, *kind, data.clone())?)?)
        }
        Value::Geo(text) => LuaValue::UserData(lua.create_userdata(GeoJson(text.clone()))?),
        Value::List(items) => {
            let values = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                values.raw_set(i + 1, to_lua(lua, item, depth + 1)?)?;
            }
            let list = lua.create_table()?;
            list.raw_set("_n", items.len())?;
            list.raw_set("_v", values)?;
            list.set_metatable(Some(lua.named_registry_value::<Table>(LIST_META)?))?;
            LuaValue::Table(list)
        }
        Value::Map(pairs) => {
            let keys = lua.create_table_with_capacity(pairs.len(), 0)?;
            let values = lua.create_table_with_capacity(0, pairs.len())?;
            let mut count = 0;
            for (key, value) in pairs {
                let key = to_lua(lua, key, depth + 1)?;
                if key.is_nil() || matches!(key, LuaValue::Number(f) if f.is_nan()) {
                    continue;
                }
                let value = to_lua(lua, value, depth + 1)?;
                if value.is_nil() {
                    continue;
                }
                if values.raw_get::<LuaValue>(key.clone())?.is_nil() {
                    count += 1;
                    keys.raw_set(count, key.clone())?;
                }
                values.raw_set(key, value)?;
            }
            let map = lua.create_table()?;
            map.raw_set("_k", keys)?;
            map.raw_set("_v", values)?;
            map.set_metatable(Some(lua.named_registry_value::<Table>(MAP_META)?))?;
            LuaValue::Table(map)
        }
    })
}

/// The [`Value`] of a Lua value; what has no Aerospike type is nil.
pub fn from_lua(lua: &Lua, value: &LuaValue, depth: usize) -> Value {
    if depth > DEPTH_MAX {
        return Value::Nil;
    }
    match value {
        LuaValue::Nil => Value::Nil,
        LuaValue::Boolean(b) => Value::Bool(*b),
        LuaValue::Integer(i) => Value::Int(*i),
        LuaValue::Number(f) => Value::Float(*f),
        LuaValue::String(s) => Value::Str(s.as_bytes().to_vec()),
        LuaValue::UserData(data) => {
            if let Ok(bytes) = data.borrow::<Bytes>() {
                Value::Bytes(bytes.kind, bytes.value().to_vec())
            } else if let Ok(geo) = data.borrow::<GeoJson>() {
                Value::Geo(geo.0.clone())
            } else {
                Value::Nil
            }
        }
        LuaValue::Table(table) => container_value(lua, table, depth).unwrap_or(Value::Nil),
        _ => Value::Nil,
    }
}

fn is_container(lua: &Lua, table: &Table) -> bool {
    let Some(meta) = table.metatable() else {
        return false;
    };
    [LIST_META, MAP_META].iter().any(|name| {
        lua.named_registry_value::<Table>(name)
            .is_ok_and(|known| known == meta)
    })
}

fn container_value(lua: &Lua, table: &Table, depth: usize) -> mlua::Result<Value> {
    let Some(meta) = table.metatable() else {
        return Ok(Value::Nil);
    };
    if meta == lua.named_registry_value::<Table>(LIST_META)? {
        let count: i64 = table.raw_get("_n")?;
        let values: Table = table.raw_get("_v")?;
        let mut items = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
        for i in 1..=count {
            items.push(from_lua(lua, &values.raw_get::<LuaValue>(i)?, depth + 1));
        }
        return Ok(Value::List(items));
    }
    if meta == lua.named_registry_value::<Table>(MAP_META)? {
        let keys: Table = table.raw_get("_k")?;
        let values: Table = table.raw_get("_v")?;
        let mut pairs = Vec::new();
        for i in 1..=keys.raw_len() {
            let key: LuaValue = keys.raw_get(i)?;
            let value: LuaValue = values.raw_get(key.clone())?;
            pairs.push((
                from_lua(lua, &key, depth + 1),
                from_lua(lua, &value, depth + 1),
            ));
        }
        return Ok(Value::Map(pairs));
    }
    Ok(Value::Nil)
}

/// The message of a Lua error, without mlua's traceback.
pub fn error_text(error: &mlua::Error) -> String {
    let text = match error {
        mlua::Error::RuntimeError(message)
        | mlua::Error::MemoryError(message)
        | mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::CallbackError { cause, .. } => return error_text(cause),
        mlua::Error::WithContext { cause, .. } => return error_text(cause),
        other => other.to_string(),
    };
    match text.find("\nstack traceback:") {
        Some(end) => text.get(..end).unwrap_or(&text).to_owned(),
        None => text,
    }
}
