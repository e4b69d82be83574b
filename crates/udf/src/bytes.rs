//! The `bytes` module and type, as the server's mod-lua has them (its
//! `as_bytes`): a buffer with a capacity, of which the first `size` bytes
//! are the value. `bytes(n)` reserves n bytes and holds none; a write past
//! the size grows it (and the capacity, if needed); a read past the size
//! fails (nil). Indexes are 1-based. Failures answer false, 0 or nil, as on
//! the server, not errors.
//!
//! Two quirks of the server are kept on purpose: `bytes.set_size` only
//! tells whether the capacity is at least the given size (it changes
//! nothing), and `set_var_int` / `append_var_int` write into the buffer
//! without growing the size, so what `append_var_int` writes is not part of
//! the value until a later write reaches past it.
//!
//! The buffers live outside the Lua state's memory limit, so the `bytes`
//! values of one thread share a budget of their own.

use bolide_types::particle;
use mlua::{AnyUserData, Lua, MetaMethod, UserData, UserDataMethods, Value as LuaValue};
use std::cell::Cell;

/// Largest `bytes` value a UDF may build.
pub const BYTES_MAX: usize = 16 * 1024 * 1024;
/// Buffer bytes the live `bytes` values of one thread may hold together.
pub const BYTES_BUDGET: usize = crate::STATE_MEMORY_BYTES;

thread_local! {
    /// Buffer bytes held by this thread's live `bytes` values.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// Buffer bytes this thread's `bytes` values hold (for tests).
pub fn held() -> usize {
    HELD.with(Cell::get)
}

/// A blob (`bytes` in Lua) and its particle type.
#[derive(Debug)]
pub struct Bytes {
    pub(crate) kind: u8,
    /// The buffer; its length is the capacity.
    buf: Vec<u8>,
    size: usize,
}

impl Drop for Bytes {
    fn drop(&mut self) {
        let freed = self.buf.len();
        HELD.with(|held| held.set(held.get().saturating_sub(freed)));
    }
}

/// Takes `more` bytes from the thread's budget; when it would run over, a
/// garbage collection first frees the buffers of unreachable values (the
/// collector does not see their size, so it may not have run).
fn charge(lua: &Lua, more: usize) -> mlua::Result<()> {
    let over = || HELD.with(|held| held.get().saturating_add(more) > BYTES_BUDGET);
    if over() {
        lua.gc_collect()?;
        if over() {
            return Err(mlua::Error::MemoryError("not enough memory".to_owned()));
        }
    }
    HELD.with(|held| held.set(held.get() + more));
    Ok(())
}

impl Bytes {
    /// A value holding `data` (a bin's blob, a slice of another value).
    pub fn new(lua: &Lua, kind: u8, data: Vec<u8>) -> mlua::Result<Bytes> {
        charge(lua, data.len())?;
        let size = data.len();
        Ok(Bytes {
            kind,
            buf: data,
            size,
        })
    }

    /// An empty value with room for `capacity` bytes.
    fn with_capacity(lua: &Lua, capacity: usize) -> mlua::Result<Bytes> {
        charge(lua, capacity)?;
        Ok(Bytes {
            kind: particle::BLOB,
            buf: vec![0; capacity],
            size: 0,
        })
    }

    /// The value: the first `size` bytes.
    pub fn value(&self) -> &[u8] {
        self.buf.get(..self.size).unwrap_or_default()
    }

    fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Grows the capacity to at least `end`; false past [`BYTES_MAX`].
    fn ensure(&mut self, lua: &Lua, end: usize) -> mlua::Result<bool> {
        if end <= self.buf.len() {
            return Ok(true);
        }
        if end > BYTES_MAX {
            return Ok(false);
        }
        charge(lua, end - self.buf.len())?;
        self.buf.resize(end, 0);
        Ok(true)
    }

    /// Writes `data` at `pos`, growing the size to cover it.
    fn write(&mut self, lua: &Lua, pos: usize, data: &[u8]) -> mlua::Result<bool> {
        let Some(end) = pos.checked_add(data.len()) else {
            return Ok(false);
        };
        if !self.ensure(lua, end)? {
            return Ok(false);
        }
        if let Some(slot) = self.buf.get_mut(pos..end) {
            slot.copy_from_slice(data);
        }
        self.size = self.size.max(end);
        Ok(true)
    }

    /// `len` bytes of the value from `pos`, if the value holds them.
    fn read(&self, pos: usize, len: usize) -> Option<&[u8]> {
        self.value().get(pos..pos.checked_add(len)?)
    }

    /// Writes `value` in 7-bit groups (low first, high bit = more follow)
    /// at `pos` within the capacity, leaving the size as it is (as the
    /// server does); the number of bytes written, 0 if it does not fit.
    fn write_var_int(&mut self, lua: &Lua, pos: usize, value: u32) -> mlua::Result<usize> {
        if !self.ensure(lua, pos.saturating_add(5))? {
            return Ok(0);
        }
        let mut value = value;
        let mut written = 0;
        while value >= 0x80 {
            if let Some(slot) = self.buf.get_mut(pos + written) {
                *slot = (value as u8) | 0x80;
            }
            value >>= 7;
            written += 1;
        }
        if let Some(slot) = self.buf.get_mut(pos + written) {
            *slot = value as u8;
        }
        Ok(written + 1)
    }

    /// Reads a 7-bit-group integer at `pos` within the value: (value,
    /// bytes read).
    fn read_var_int(&self, pos: usize) -> Option<(u32, usize)> {
        let mut value: u32 = 0;
        let mut shift = 0u32;
        let mut read = 0;
        loop {
            let byte = *self.value().get(pos + read)?;
            read += 1;
            if shift < 32 {
                value |= u32::from(byte & 0x7f) << shift;
            }
            shift += 7;
            if byte & 0x80 == 0 {
                return Some((value, read));
            }
        }
    }
}

impl UserData for Bytes {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::Len, |_, b, ()| Ok(b.size));
        methods.add_meta_method(MetaMethod::Index, |_, b, i: i64| {
            Ok(position(i).and_then(|p| b.read(p, 1)).map(|s| s[0]))
        });
        methods.add_meta_method_mut(MetaMethod::NewIndex, |lua, b, (i, v): (i64, i64)| {
            if let (Some(pos), Ok(v)) = (position(i), u8::try_from(v)) {
                b.write(lua, pos, &[v])?;
            }
            Ok(())
        });
        methods.add_meta_method(MetaMethod::ToString, |_, b, ()| {
            if b.size == 0 {
                return Ok("Bytes()".to_owned());
            }
            let hex: Vec<String> = b.value().iter().map(|byte| format!("{byte:02X}")).collect();
            Ok(hex.join(" "))
        });
    }
}

/// A 1-based index (1..=u32::MAX) as a position.
fn position(i: i64) -> Option<usize> {
    if (1..=i64::from(u32::MAX)).contains(&i) {
        usize::try_from(i - 1).ok()
    } else {
        None
    }
}

/// A length or capacity argument (0..=u32::MAX).
fn length(n: i64) -> Option<usize> {
    if (0..=i64::from(u32::MAX)).contains(&n) {
        usize::try_from(n).ok()
    } else {
        None
    }
}

/// Copies another value's bytes (so that `b` may be the same value).
fn contents(v: &AnyUserData) -> mlua::Result<Vec<u8>> {
    Ok(v.borrow::<Bytes>()?.value().to_vec())
}

/// The integer widths: name, bytes, big-endian, and the range a value
/// to store must lie in.
const INTEGERS: [(&str, usize, bool, i64, i64); 9] = [
    ("int16", 2, true, i16::MIN as i64, i16::MAX as i64),
    ("int16_be", 2, true, i16::MIN as i64, i16::MAX as i64),
    ("int16_le", 2, false, i16::MIN as i64, i16::MAX as i64),
    ("int32", 4, true, i32::MIN as i64, i32::MAX as i64),
    ("int32_be", 4, true, i32::MIN as i64, i32::MAX as i64),
    ("int32_le", 4, false, i32::MIN as i64, i32::MAX as i64),
    ("int64", 8, true, i64::MIN, i64::MAX),
    ("int64_be", 8, true, i64::MIN, i64::MAX),
    ("int64_le", 8, false, i64::MIN, i64::MAX),
];

/// `v`'s low `width` bytes in the given order.
fn int_bytes(v: i64, width: usize, big_endian: bool) -> Vec<u8> {
    let all = if big_endian {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    };
    if big_endian {
        all[8 - width..].to_vec()
    } else {
        all[..width].to_vec()
    }
}

/// The signed integer in `bytes`.
fn int_value(bytes: &[u8], big_endian: bool) -> i64 {
    let width = bytes.len();
    let mut value: u64 = 0;
    for (k, byte) in bytes.iter().enumerate() {
        let shift = if big_endian { width - 1 - k } else { k } * 8;
        value |= u64::from(*byte) << shift;
    }
    let unused = 64 - width * 8;
    ((value << unused) as i64) >> unused
}

pub fn install(lua: &Lua, globals: &mlua::Table) -> mlua::Result<()> {
    let bytes = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set(
        "__call",
        lua.create_function(|lua, (_, capacity): (LuaValue, Option<i64>)| {
            let capacity = capacity.and_then(length).unwrap_or(0);
            if capacity > BYTES_MAX {
                return Err(mlua::Error::RuntimeError("bytes too large".to_owned()));
            }
            Bytes::with_capacity(lua, capacity)
        })?,
    )?;
    bytes.set_metatable(Some(meta))?;

    bytes.set(
        "size",
        lua.create_function(|_, b: AnyUserData| Ok(b.borrow::<Bytes>()?.size))?,
    )?;
    // The server's set_size only checks the capacity (it is its "ensure"
    // without resizing).
    bytes.set(
        "set_size",
        lua.create_function(|_, (b, n, resize): (AnyUserData, i64, Option<LuaValue>)| {
            let b = b.borrow::<Bytes>()?;
            Ok(resize.is_none() && length(n).is_some_and(|n| n <= b.capacity()))
        })?,
    )?;
    bytes.set(
        "get_type",
        lua.create_function(|_, b: AnyUserData| Ok(b.borrow::<Bytes>()?.kind))?,
    )?;
    bytes.set(
        "set_type",
        lua.create_function(|_, (b, kind): (AnyUserData, i64)| {
            let Ok(kind @ 1..) = u8::try_from(kind) else {
                return Ok(false);
            };
            b.borrow_mut::<Bytes>()?.kind = kind;
            Ok(true)
        })?,
    )?;

    // Reads.
    bytes.set(
        "get_byte",
        lua.create_function(|_, (b, i): (AnyUserData, i64)| {
            let b = b.borrow::<Bytes>()?;
            Ok(position(i).and_then(|p| b.read(p, 1)).map(|s| s[0]))
        })?,
    )?;
    bytes.set(
        "get_string",
        lua.create_function(|lua, (b, i, n): (AnyUserData, i64, i64)| {
            let b = b.borrow::<Bytes>()?;
            match position(i).zip(length(n)).and_then(|(p, n)| b.read(p, n)) {
                Some(slice) => Ok(LuaValue::String(lua.create_string(slice)?)),
                None => Ok(LuaValue::Nil),
            }
        })?,
    )?;
    bytes.set(
        "get_bytes",
        lua.create_function(|lua, (b, i, n): (AnyUserData, i64, i64)| {
            let slice = {
                let b = b.borrow::<Bytes>()?;
                position(i)
                    .zip(length(n))
                    .and_then(|(p, n)| b.read(p, n))
                    .map(<[u8]>::to_vec)
            };
            match slice {
                Some(data) => Ok(LuaValue::UserData(lua.create_userdata(Bytes::new(
                    lua,
                    particle::BLOB,
                    data,
                )?)?)),
                None => Ok(LuaValue::Nil),
            }
        })?,
    )?;
    bytes.set(
        "get_var_int",
        lua.create_function(|_, (b, i): (AnyUserData, i64)| {
            let b = b.borrow::<Bytes>()?;
            Ok(match position(i).and_then(|p| b.read_var_int(p)) {
                Some((value, read)) => (Some(value), Some(read)),
                None => (None, None),
            })
        })?,
    )?;

    // Writes at an index.
    bytes.set(
        "set_byte",
        lua.create_function(|lua, (b, i, v): (AnyUserData, i64, i64)| {
            let (Some(pos), Ok(v)) = (position(i), u8::try_from(v)) else {
                return Ok(false);
            };
            b.borrow_mut::<Bytes>()?.write(lua, pos, &[v])
        })?,
    )?;
    bytes.set(
        "set_string",
        lua.create_function(|lua, (b, i, s): (AnyUserData, i64, mlua::String)| {
            let Some(pos) = position(i) else {
                return Ok(false);
            };
            b.borrow_mut::<Bytes>()?.write(lua, pos, &s.as_bytes())
        })?,
    )?;
    bytes.set(
        "set_bytes",
        lua.create_function(|lua, (b, i, v, n): (AnyUserData, i64, AnyUserData, i64)| {
            let (Some(pos), Some(n)) = (position(i), length(n)) else {
                return Ok(false);
            };
            let data = contents(&v)?;
            let len = n.min(data.len());
            b.borrow_mut::<Bytes>()?
                .write(lua, pos, data.get(..len).unwrap_or_default())
        })?,
    )?;
    bytes.set(
        "set_var_int",
        lua.create_function(|lua, (b, i, v): (AnyUserData, i64, i64)| {
            let (Some(pos), Ok(v)) = (position(i), i32::try_from(v)) else {
                return Ok(0);
            };
            b.borrow_mut::<Bytes>()?.write_var_int(lua, pos, v as u32)
        })?,
    )?;

    // Appends.
    bytes.set(
        "append_byte",
        lua.create_function(|lua, (b, v): (AnyUserData, i64)| {
            let Ok(v) = u8::try_from(v) else {
                return Ok(false);
            };
            let mut b = b.borrow_mut::<Bytes>()?;
            let end = b.size;
            b.write(lua, end, &[v])
        })?,
    )?;
    bytes.set(
        "append_string",
        lua.create_function(|lua, (b, s): (AnyUserData, mlua::String)| {
            // An empty string is refused, as on the server.
            if s.as_bytes().is_empty() {
                return Ok(false);
            }
            let mut b = b.borrow_mut::<Bytes>()?;
            let end = b.size;
            b.write(lua, end, &s.as_bytes())
        })?,
    )?;
    bytes.set(
        "append_bytes",
        lua.create_function(|lua, (b, v, n): (AnyUserData, AnyUserData, Option<i64>)| {
            // The count is required, as on the server.
            let Some(n) = n.and_then(length) else {
                return Ok(false);
            };
            let data = contents(&v)?;
            let len = n.min(data.len());
            let mut b = b.borrow_mut::<Bytes>()?;
            let end = b.size;
            b.write(lua, end, data.get(..len).unwrap_or_default())
        })?,
    )?;
    bytes.set(
        "append_var_int",
        lua.create_function(|lua, (b, v): (AnyUserData, i64)| {
            let Ok(v) = i32::try_from(v) else {
                return Ok(0);
            };
            let mut b = b.borrow_mut::<Bytes>()?;
            let end = b.size;
            b.write_var_int(lua, end, v as u32)
        })?,
    )?;

    for (name, width, big_endian, min, max) in INTEGERS {
        bytes.set(
            format!("get_{name}"),
            lua.create_function(move |_, (b, i): (AnyUserData, i64)| {
                let b = b.borrow::<Bytes>()?;
                Ok(position(i)
                    .and_then(|p| b.read(p, width))
                    .map(|slice| int_value(slice, big_endian)))
            })?,
        )?;
        bytes.set(
            format!("set_{name}"),
            lua.create_function(move |lua, (b, i, v): (AnyUserData, i64, i64)| {
                let Some(pos) = position(i).filter(|_| (min..=max).contains(&v)) else {
                    return Ok(false);
                };
                b.borrow_mut::<Bytes>()?
                    .write(lua, pos, &int_bytes(v, width, big_endian))
            })?,
        )?;
        bytes.set(
            format!("append_{name}"),
            lua.create_function(move |lua, (b, v): (AnyUserData, i64)| {
                if !(min..=max).contains(&v) {
                    return Ok(false);
                }
                let mut b = b.borrow_mut::<Bytes>()?;
                let end = b.size;
                b.write(lua, end, &int_bytes(v, width, big_endian))
            })?,
        )?;
    }
    globals.set("bytes", bytes)
}
