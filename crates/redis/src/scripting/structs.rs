//! `struct` for scripts: `pack(fmt, ...)`, `unpack(fmt, s [, pos])` and
//! `size(fmt)` with Roberto Ierusalimschy's struct library's formats as
//! Redis builds it on x86-64: `>` `<` `!n` endianness and alignment,
//! `b B h H l L T i[n] I[n]` integers (`l`, `L`, `T` 8 bytes, `i`/`I` 4
//! by default, at most 32), `f` `d` floats, `s` zero-terminated and
//! `c[n]` fixed strings, `x` padding. Little-endian and unaligned unless
//! the format says otherwise.

use mlua::{Lua, MultiValue, Value};

const INT_SIZE_MAX: usize = 32;
const ALIGN_MAX: usize = 8;

type Answer = mlua::Result<(bool, Value)>;

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

struct Format<'a> {
    text: &'a [u8],
    at: usize,
    header: Header,
}

enum Item {
    Int { size: usize, signed: bool },
    Float,
    Double,
    Pad,
    Fixed(usize),
    Zero,
}

impl<'a> Format<'a> {
    fn new(text: &'a [u8]) -> Format<'a> {
        Format {
            text,
            at: 0,
            header: Header {
                little: true,
                align: 1,
            },
        }
    }

    fn number(&mut self, default: usize) -> Result<usize, String> {
        if !self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut n: usize = 0;
        while let Some(&digit) = self.text.get(self.at).filter(|d| d.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(usize::from(digit - b'0')))
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or("integral size overflow")?;
            self.at += 1;
        }
        Ok(n)
    }

    /// The next item (with its size), or None at the end; options that
    /// only change the header are applied on the way.
    fn next(&mut self) -> Result<Option<(u8, Item, usize)>, String> {
        while let Some(&option) = self.text.get(self.at) {
            self.at += 1;
            let (item, size) = match option {
                b'b' | b'B' => (int(1, option), 1),
                b'h' | b'H' => (int(2, option), 2),
                b'l' | b'L' | b'T' => (int(8, option), 8),
                b'i' | b'I' => {
                    let size = self.number(4)?;
                    if size > INT_SIZE_MAX {
                        return Err(format!(
                            "integral size {size} is larger than limit of {INT_SIZE_MAX}"
                        ));
                    }
                    (int(size, option), size)
                }
                b'f' => (Item::Float, 4),
                b'd' => (Item::Double, 8),
                b'x' => (Item::Pad, 1),
                b'c' => {
                    let size = self.number(1)?;
                    (Item::Fixed(size), size)
                }
                b's' => (Item::Zero, 0),
                b' ' => continue,
                b'>' => {
                    self.header.little = false;
                    continue;
                }
                b'<' => {
                    self.header.little = true;
                    continue;
                }
                b'!' => {
                    let align = self.number(ALIGN_MAX)?;
                    if align == 0 || !align.is_power_of_two() {
                        return Err(format!("alignment {align} is not a power of 2"));
                    }
                    self.header.align = align;
                    continue;
                }
                other => {
                    return Err(format!(
                        "bad argument #1 to 'pack' (invalid format option '{}')",
                        other as char
                    ))
                }
            };
            return Ok(Some((option, item, size)));
        }
        Ok(None)
    }

    fn padding(&self, position: usize, option: u8, size: usize) -> usize {
        if size == 0 || option == b'c' {
            return 0;
        }
        let size = size.min(self.header.align);
        (size - (position & (size - 1))) & (size - 1)
    }
}

fn int(size: usize, option: u8) -> Item {
    Item::Int {
        size,
        signed: option.is_ascii_lowercase(),
    }
}

fn text(lua: &Lua, value: &Value) -> Option<Vec<u8>> {
    let _ = lua;
    match value {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(n) => Some(n.to_string().into_bytes()),
        Value::Number(n) => Some(crate::resp::format_g(*n, 14).into_bytes()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => s.to_str().ok()?.trim().parse().ok(),
        _ => None,
    }
}

fn fail(lua: &Lua, message: String) -> Answer {
    Ok((false, Value::String(lua.create_string(message)?)))
}

pub fn pack(lua: &Lua, args: MultiValue) -> Answer {
    let mut args = args.into_iter();
    let Some(format) = args.next().and_then(|f| text(lua, &f)) else {
        return fail(
            lua,
            "bad argument #1 to 'pack' (string expected)".to_owned(),
        );
    };
    let mut format = Format::new(&format);
    let mut out = Vec::new();
    let mut argument = 1;
    loop {
        let (option, item, size) = match format.next() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(message) => return fail(lua, message),
        };
        let pad = format.padding(out.len(), option, size);
        out.resize(out.len() + pad, 0);
        match item {
            Item::Int { size, .. } => {
                argument += 1;
                let Some(n) = args.next().as_ref().and_then(number) else {
                    return fail(
                        lua,
                        format!("bad argument #{argument} to 'pack' (number expected)"),
                    );
                };
                let value: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                let bytes = value.to_le_bytes();
                let mut field: Vec<u8> = (0..size)
                    .map(|i| bytes.get(i).copied().unwrap_or(0))
                    .collect();
                if !format.header.little {
                    field.reverse();
                }
                out.extend_from_slice(&field);
            }
            Item::Float | Item::Double => {
                argument += 1;
                let Some(n) = args.next().as_ref().and_then(number) else {
                    return fail(
                        lua,
                        format!("bad argument #{argument} to 'pack' (number expected)"),
                    );
                };
                let mut field = if matches!(item, Item::Float) {
                    (n as f32).to_le_bytes().to_vec()
                } else {
                    n.to_le_bytes().to_vec()
                };
                if !format.header.little {
                    field.reverse();
                }
                out.extend_from_slice(&field);
            }
            Item::Pad => out.push(0),
            Item::Fixed(_) | Item::Zero => {
                argument += 1;
                let Some(bytes) = args.next().and_then(|v| text(lua, &v)) else {
                    return fail(
                        lua,
                        format!("bad argument #{argument} to 'pack' (string expected)"),
                    );
                };
                let size = if size == 0 { bytes.len() } else { size };
                if bytes.len() < size {
                    return fail(
                        lua,
                        format!(
                            "bad argument #{} to 'pack' (string too short)",
                            argument + 1
                        ),
                    );
                }
                out.extend_from_slice(&bytes[..size]);
                if matches!(item, Item::Zero) {
                    out.push(0);
                }
            }
        }
    }
    Ok((true, Value::String(lua.create_string(&out)?)))
}

pub fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let mut answer = MultiValue::new();
    let failed = |message: String| -> mlua::Result<MultiValue> {
        let mut answer = MultiValue::new();
        answer.push_back(Value::Boolean(false));
        answer.push_back(Value::String(lua.create_string(message)?));
        Ok(answer)
    };
    let mut args = args.into_iter();
    let Some(format) = args.next().and_then(|f| text(lua, &f)) else {
        return failed("bad argument #1 to 'unpack' (string expected)".to_owned());
    };
    let Some(data) = args.next().and_then(|d| text(lua, &d)) else {
        return failed("bad argument #2 to 'unpack' (string expected)".to_owned());
    };
    let start = match args.next() {
        None | Some(Value::Nil) => 1.0,
        Some(value) => match number(&value) {
            Some(n) => n,
            None => return failed("bad argument #3 to 'unpack' (number expected)".to_owned()),
        },
    };
    if start < 1.0 {
        return failed("bad argument #3 to 'unpack' (offset must be 1 or greater)".to_owned());
    }
    let mut position = start as usize - 1;
    let mut format = Format::new(&format);
    let mut values: Vec<Value> = Vec::new();
    let short = || "bad argument #2 to 'unpack' (data string too short)".to_owned();
    loop {
        let (option, item, mut size) = match format.next() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(message) => return failed(message.replace("'pack'", "'unpack'")),
        };
        position += format.padding(position, option, size);
        if size > data.len() || position > data.len() - size {
            return failed(short());
        }
        match item {
            Item::Int { size, signed } => {
                let mut field = data[position..position + size].to_vec();
                if !format.header.little {
                    field.reverse();
                }
                let mut value: u64 = 0;
                for (i, byte) in field.iter().enumerate().take(8) {
                    value |= u64::from(*byte) << (8 * i);
                }
                let negative = signed && size > 0 && size < 8 && (value >> (size * 8 - 1)) & 1 == 1;
                values.push(if negative {
                    Value::Integer((value | (u64::MAX << (size * 8))) as i64)
                } else if signed || value <= i64::MAX as u64 {
                    Value::Integer(value as i64)
                } else {
                    Value::Number(value as f64)
                });
            }
            Item::Float | Item::Double => {
                let mut field = data[position..position + size].to_vec();
                if !format.header.little {
                    field.reverse();
                }
                let value = if matches!(item, Item::Float) {
                    let mut raw = [0u8; 4];
                    raw.copy_from_slice(&field);
                    f64::from(f32::from_le_bytes(raw))
                } else {
                    let mut raw = [0u8; 8];
                    raw.copy_from_slice(&field);
                    f64::from_le_bytes(raw)
                };
                values.push(Value::Number(value));
            }
            Item::Pad => {}
            Item::Fixed(_) => {
                if size == 0 {
                    let previous = match values.pop() {
                        Some(Value::Integer(n)) if n >= 0 => n as usize,
                        Some(Value::Number(n)) if n >= 0.0 => n as usize,
                        _ => return failed("format 'c0' needs a previous size".to_owned()),
                    };
                    size = previous;
                    if size > data.len() || position > data.len() - size {
                        return failed(short());
                    }
                }
                values.push(Value::String(
                    lua.create_string(&data[position..position + size])?,
                ));
            }
            Item::Zero => {
                let Some(end) = data[position..].iter().position(|&b| b == 0) else {
                    return failed("unfinished string in data".to_owned());
                };
                values.push(Value::String(
                    lua.create_string(&data[position..position + end])?,
                ));
                size = end + 1;
            }
        }
        position += size;
    }
    answer.push_back(Value::Boolean(true));
    answer.extend(values);
    answer.push_back(Value::Integer(position as i64 + 1));
    Ok(answer)
}

pub fn size(lua: &Lua, args: MultiValue) -> Answer {
    let Some(format) = args.into_iter().next().and_then(|f| text(lua, &f)) else {
        return fail(
            lua,
            "bad argument #1 to 'size' (string expected)".to_owned(),
        );
    };
    let mut format = Format::new(&format);
    let mut position = 0usize;
    loop {
        let (option, item, size) = match format.next() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(message) => return fail(lua, message.replace("'pack'", "'size'")),
        };
        position += format.padding(position, option, size);
        match item {
            Item::Zero => {
                return fail(
                    lua,
                    "bad argument #1 to 'size' (option 's' has no fixed size)".to_owned(),
                )
            }
            Item::Fixed(0) => {
                return fail(
                    lua,
                    "bad argument #1 to 'size' (option 'c0' has no fixed size)".to_owned(),
                )
            }
            _ => position += size,
        }
    }
    Ok((true, Value::Integer(position as i64)))
}
