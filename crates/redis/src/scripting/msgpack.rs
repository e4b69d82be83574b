//! `cmsgpack` for scripts: `pack(...)`, `unpack(s)`, `unpack_one` and
//! `unpack_limit`, encoding as lua-cmsgpack 0.4 does (a table whose keys
//! are exactly 1..n is an array, other tables maps; integral numbers as
//! the smallest integer, others as a float when that loses nothing, else
//! a double; tables nested 16 deep become nil; strings as raw).

use mlua::{Lua, MultiValue, Table, Value};

const NESTING_MAX: usize = 16;
/// Deepest input `unpack` follows.
const DECODE_DEPTH_MAX: usize = 1000;

pub fn pack(lua: &Lua, args: MultiValue) -> mlua::Result<(bool, Value)> {
    let mut out = Vec::new();
    for value in args.iter() {
        encode(value, 0, &mut out)?;
    }
    Ok((true, Value::String(lua.create_string(&out)?)))
}

fn encode(value: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::String(s) => encode_bytes(&s.as_bytes(), out),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => encode_int(*n, out),
        Value::Number(n) => {
            if n.is_finite() && (*n as i64) as f64 == *n {
                encode_int(*n as i64, out);
            } else {
                encode_double(*n, out);
            }
        }
        Value::Table(table) if level < NESTING_MAX => encode_table(table, level, out)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn encode_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    let n = bytes.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

fn encode_double(value: f64, out: &mut Vec<u8>) {
    let single = value as f32;
    if f64::from(single) == value {
        out.push(0xca);
        out.extend_from_slice(&single.to_bits().to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&value.to_bits().to_be_bytes());
    }
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn header(out: &mut Vec<u8>, n: usize, fix: u8, sixteen: u8, thirty_two: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(sixteen);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(thirty_two);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode_table(table: &Table, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    let pairs: Vec<(Value, Value)> = table.pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
    let mut max = 0i64;
    let is_array = pairs.iter().all(|(key, _)| match key {
        Value::Integer(n) if *n > 0 => {
            max = max.max(*n);
            true
        }
        _ => false,
    }) && max == pairs.len() as i64;
    if is_array {
        let length = table.raw_len();
        header(out, length, 0x90, 0xdc, 0xdd);
        for index in 1..=length {
            let item: Value = table.get(index)?;
            encode(&item, level + 1, out)?;
        }
    } else {
        header(out, pairs.len(), 0x80, 0xde, 0xdf);
        for (key, value) in &pairs {
            encode(key, level + 1, out)?;
            encode(value, level + 1, out)?;
        }
    }
    Ok(())
}

/// Decodes up to `limit` values from `offset` (both 0: every value).
/// Answers `(true, values…)`, with the next offset first (-1 at the end)
/// unless every value was asked for; `(false, message)` on bad input.
pub fn unpack(lua: &Lua, (input, limit, offset): (Value, i64, i64)) -> mlua::Result<MultiValue> {
    let with_offset = limit != 0 || offset != 0;
    let mut answer = MultiValue::new();
    let Value::String(input) = input else {
        answer.push_back(Value::Boolean(false));
        answer.push_back(Value::String(
            lua.create_string("bad argument #1 to 'unpack' (string expected)")?,
        ));
        return Ok(answer);
    };
    let bytes = input.as_bytes();
    let fail = |message: String| -> mlua::Result<MultiValue> {
        let mut answer = MultiValue::new();
        answer.push_back(Value::Boolean(false));
        answer.push_back(Value::String(lua.create_string(message)?));
        Ok(answer)
    };
    if offset < 0 || limit < 0 {
        return fail(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            bytes.len()
        ));
    }
    if offset as usize > bytes.len() {
        return fail(format!(
            "Start offset {offset} greater than input length {}.",
            bytes.len()
        ));
    }
    let limit = if !with_offset {
        usize::MAX
    } else {
        limit as usize
    };
    let mut cursor = Cursor {
        bytes: &bytes,
        at: offset as usize,
    };
    let mut values = Vec::new();
    while cursor.at < bytes.len() && values.len() < limit {
        match cursor.value(lua, 0)? {
            Ok(value) => values.push(value),
            Err(Bad::Eof) => return fail("Missing bytes in input.".to_owned()),
            Err(Bad::Format) => return fail("Bad data format in input.".to_owned()),
        }
    }
    answer.push_back(Value::Boolean(true));
    if with_offset {
        let next = if cursor.at >= bytes.len() {
            -1
        } else {
            cursor.at as i64
        };
        answer.push_back(Value::Integer(next));
    }
    answer.extend(values);
    Ok(answer)
}

enum Bad {
    Eof,
    Format,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Bad> {
        let slice = self.bytes.get(self.at..self.at + n).ok_or(Bad::Eof)?;
        self.at += n;
        Ok(slice)
    }

    fn uint(&mut self, n: usize) -> Result<u64, Bad> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn value(&mut self, lua: &Lua, depth: usize) -> mlua::Result<Result<Value, Bad>> {
        if depth > DECODE_DEPTH_MAX {
            return Ok(Err(Bad::Format));
        }
        let byte = match self.take(1) {
            Ok(b) => b[0],
            Err(bad) => return Ok(Err(bad)),
        };
        macro_rules! tri {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(bad) => return Ok(Err(bad)),
                }
            };
        }
        let value = match byte {
            0x00..=0x7f => Value::Integer(i64::from(byte)),
            0xe0..=0xff => Value::Integer(i64::from(byte as i8)),
            0xcc => Value::Integer(tri!(self.uint(1)) as i64),
            0xcd => Value::Integer(tri!(self.uint(2)) as i64),
            0xce => Value::Integer(tri!(self.uint(4)) as i64),
            0xcf => Value::Integer(tri!(self.uint(8)) as i64),
            0xd0 => Value::Integer(i64::from(tri!(self.uint(1)) as u8 as i8)),
            0xd1 => Value::Integer(i64::from(tri!(self.uint(2)) as u16 as i16)),
            0xd2 => Value::Integer(i64::from(tri!(self.uint(4)) as u32 as i32)),
            0xd3 => Value::Integer(tri!(self.uint(8)) as i64),
            0xc0 => Value::Nil,
            0xc3 => Value::Boolean(true),
            0xc2 => Value::Boolean(false),
            0xca => Value::Number(f64::from(f32::from_bits(tri!(self.uint(4)) as u32))),
            0xcb => Value::Number(f64::from_bits(tri!(self.uint(8)))),
            0xa0..=0xbf | 0xd9 | 0xda | 0xdb => {
                let n = match byte {
                    0xd9 => tri!(self.uint(1)),
                    0xda => tri!(self.uint(2)),
                    0xdb => tri!(self.uint(4)),
                    _ => u64::from(byte & 0x1f),
                } as usize;
                let bytes = tri!(self.take(n));
                Value::String(lua.create_string(bytes)?)
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                let n = match byte {
                    0xdc => tri!(self.uint(2)),
                    0xdd => tri!(self.uint(4)),
                    _ => u64::from(byte & 0x0f),
                } as usize;
                let table = lua.create_table_with_capacity(n.min(1024), 0)?;
                for index in 1..=n {
                    let item = tri!(self.value(lua, depth + 1)?);
                    table.raw_set(index, item)?;
                }
                Value::Table(table)
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let n = match byte {
                    0xde => tri!(self.uint(2)),
                    0xdf => tri!(self.uint(4)),
                    _ => u64::from(byte & 0x0f),
                } as usize;
                let table = lua.create_table()?;
                for _ in 0..n {
                    let key = tri!(self.value(lua, depth + 1)?);
                    let value = tri!(self.value(lua, depth + 1)?);
                    if !key.is_nil() && !matches!(key, Value::Number(n) if n.is_nan()) {
                        table.raw_set(key, value)?;
                    }
                }
                Value::Table(table)
            }
            _ => return Ok(Err(Bad::Format)),
        };
        Ok(Ok(value))
    }
}
