//! `cjson` for scripts: `cjson.encode` and `cjson.decode` with the
//! behaviour and error texts of the lua-cjson 2.1 Redis ships (numbers
//! printed with 14 significant digits, `/` escaped, sparse arrays refused,
//! `null` decoded to `cjson.null`, nesting bounded at 1000).
//!
//! Each function answers `(true, value)` or `(false, message)`; the Lua
//! side raises the message at the caller's line.

use crate::resp::format_g;
use mlua::{LightUserData, Lua, Table, Value};

const DEPTH_MAX: usize = 1000;
const SPARSE_RATIO: i64 = 2;
const SPARSE_SAFE: i64 = 10;

type Answer = mlua::Result<(bool, Value)>;

fn failed(lua: &Lua, message: String) -> Answer {
    Ok((false, Value::String(lua.create_string(message)?)))
}

pub fn encode(lua: &Lua, value: Value) -> Answer {
    let mut out = Vec::new();
    match append(&value, 0, &mut out) {
        Ok(()) => Ok((true, Value::String(lua.create_string(&out)?))),
        Err(message) => failed(lua, message),
    }
}

/// Lua 5.1's name of a value's type, as lua-cjson's messages use it.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::LightUserData(_) | Value::UserData(_) | Value::Error(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

fn append(value: &Value, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    match value {
        Value::String(s) => append_string(&s.as_bytes(), out),
        Value::Integer(n) => append_number(*n as f64, "number", out)?,
        Value::Number(n) => append_number(*n, "number", out)?,
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(LightUserData(pointer)) if pointer.is_null() => {
            out.extend_from_slice(b"null")
        }
        Value::Table(table) => {
            let depth = depth + 1;
            if depth > DEPTH_MAX {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            match array_length(table)? {
                Some(length) if length > 0 => {
                    out.push(b'[');
                    for index in 1..=length {
                        if index > 1 {
                            out.push(b',');
                        }
                        let item = table.raw_get::<Value>(index).map_err(|e| e.to_string())?;
                        append(&item, depth, out)?;
                    }
                    out.push(b']');
                }
                _ => append_object(table, depth, out)?,
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                type_name(other)
            ))
        }
    }
    Ok(())
}

/// The length of a table that is an array (positive integer keys, not
/// too sparse), None for an object.
fn array_length(table: &Table) -> Result<Option<i64>, String> {
    let (mut max, mut items) = (0i64, 0i64);
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair.map_err(|e| e.to_string())?;
        let index = match key {
            Value::Integer(n) if n >= 1 => n,
            Value::Number(n) if n >= 1.0 && n.floor() == n && n < 9.0e15 => n as i64,
            _ => return Ok(None),
        };
        max = max.max(index);
        items += 1;
    }
    if max > items * SPARSE_RATIO && max > SPARSE_SAFE {
        return Err("Cannot serialise table: excessively sparse array".to_owned());
    }
    Ok(Some(max))
}

fn append_object(table: &Table, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    out.push(b'{');
    let mut first = true;
    for pair in table.pairs::<Value, Value>() {
        let (key, value) = pair.map_err(|e| e.to_string())?;
        if !first {
            out.push(b',');
        }
        first = false;
        match &key {
            Value::Integer(n) => {
                out.push(b'"');
                append_number(*n as f64, "number", out)?;
                out.extend_from_slice(b"\":");
            }
            Value::Number(n) => {
                out.push(b'"');
                append_number(*n, "number", out)?;
                out.extend_from_slice(b"\":");
            }
            Value::String(s) => {
                append_string(&s.as_bytes(), out);
                out.push(b':');
            }
            other => {
                return Err(format!(
                    "Cannot serialise {}: table key must be a number or string",
                    type_name(other)
                ))
            }
        }
        append(&value, depth, out)?;
    }
    out.push(b'}');
    Ok(())
}

fn append_number(value: f64, kind: &str, out: &mut Vec<u8>) -> Result<(), String> {
    if !value.is_finite() {
        return Err(format!("Cannot serialise {kind}: must not be NaN or Inf"));
    }
    out.extend_from_slice(format_g(value, 14).as_bytes());
    Ok(())
}

fn append_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in bytes {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            8 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            12 => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            other => out.push(other),
        }
    }
    out.push(b'"');
}

// ---- decoding ----

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ObjectBegin,
    ObjectEnd,
    ArrayBegin,
    ArrayEnd,
    Str,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ObjectBegin => "T_OBJ_BEGIN",
            Kind::ObjectEnd => "T_OBJ_END",
            Kind::ArrayBegin => "T_ARR_BEGIN",
            Kind::ArrayEnd => "T_ARR_END",
            Kind::Str => "T_STRING",
            Kind::Number => "T_NUMBER",
            Kind::Boolean => "T_BOOLEAN",
            Kind::Null => "T_NULL",
            Kind::Colon => "T_COLON",
            Kind::Comma => "T_COMMA",
            Kind::End => "T_END",
            Kind::Error(reason) => reason,
        }
    }
}

struct Token {
    kind: Kind,
    /// Where it starts (0-based).
    index: usize,
    text: Vec<u8>,
    number: f64,
    boolean: bool,
}

struct Parser<'a> {
    data: &'a [u8],
    at: usize,
    depth: usize,
}

pub fn decode(lua: &Lua, value: Value) -> Answer {
    let text = match &value {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Integer(n) => n.to_string().into_bytes(),
        Value::Number(n) => format_g(*n, 14).into_bytes(),
        other => {
            return failed(
                lua,
                format!(
                    "bad argument #1 to 'decode' (string expected, got {})",
                    type_name(other)
                ),
            )
        }
    };
    if text.len() >= 2 && (text[0] == 0 || text[1] == 0) {
        return failed(
            lua,
            "JSON parser does not support UTF-16 or UTF-32".to_owned(),
        );
    }
    let mut parser = Parser {
        data: &text,
        at: 0,
        depth: 0,
    };
    let first = parser.next_token();
    let result = parser.value(lua, first).and_then(|value| {
        let last = parser.next_token();
        if last.kind == Kind::End {
            Ok(value)
        } else {
            Err(expected("the end", &last))
        }
    });
    match result {
        Ok(value) => Ok((true, value)),
        Err(Failure::Lua(error)) => Err(error),
        Err(Failure::Parse(message)) => failed(lua, message),
    }
}

enum Failure {
    Parse(String),
    Lua(mlua::Error),
}

impl From<mlua::Error> for Failure {
    fn from(error: mlua::Error) -> Failure {
        Failure::Lua(error)
    }
}

fn expected(what: &str, token: &Token) -> Failure {
    Failure::Parse(format!(
        "Expected {what} but found {} at character {}",
        token.kind.name(),
        token.index + 1
    ))
}

impl Parser<'_> {
    fn byte(&self, at: usize) -> u8 {
        self.data.get(at).copied().unwrap_or(0)
    }

    fn next_token(&mut self) -> Token {
        while matches!(self.byte(self.at), b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
        let index = self.at;
        let mut token = Token {
            kind: Kind::End,
            index,
            text: Vec::new(),
            number: 0.0,
            boolean: false,
        };
        let byte = self.byte(self.at);
        let simple = match byte {
            0 => return token,
            b'{' => Some(Kind::ObjectBegin),
            b'}' => Some(Kind::ObjectEnd),
            b'[' => Some(Kind::ArrayBegin),
            b']' => Some(Kind::ArrayEnd),
            b',' => Some(Kind::Comma),
            b':' => Some(Kind::Colon),
            _ => None,
        };
        if let Some(kind) = simple {
            self.at += 1;
            token.kind = kind;
            return token;
        }
        let rest = &self.data[self.at..];
        if byte == b'"' {
            self.string(&mut token);
        } else if byte == b'-' || byte.is_ascii_digit() {
            self.number(&mut token);
        } else if rest.starts_with(b"true") {
            token.kind = Kind::Boolean;
            token.boolean = true;
            self.at += 4;
        } else if rest.starts_with(b"false") {
            token.kind = Kind::Boolean;
            self.at += 5;
        } else if rest.starts_with(b"null") {
            token.kind = Kind::Null;
            self.at += 4;
        } else if byte == b'+' || byte == b'i' || byte == b'I' || byte == b'n' || byte == b'N' {
            self.number(&mut token);
        } else {
            token.kind = Kind::Error("invalid token");
        }
        token
    }

    fn string(&mut self, token: &mut Token) {
        self.at += 1;
        loop {
            let byte = self.byte(self.at);
            match byte {
                b'"' => break,
                0 => {
                    token.kind = Kind::Error("unexpected end of string");
                    token.index = self.at;
                    return;
                }
                b'\\' => {
                    let escaped = match self.byte(self.at + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 8,
                        b'f' => 12,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            if !self.unicode_escape(&mut token.text) {
                                token.kind = Kind::Error("invalid unicode escape code");
                                token.index = self.at;
                                return;
                            }
                            continue;
                        }
                        _ => {
                            token.kind = Kind::Error("invalid escape code");
                            token.index = self.at;
                            return;
                        }
                    };
                    token.text.push(escaped);
                    self.at += 2;
                }
                other => {
                    token.text.push(other);
                    self.at += 1;
                }
            }
        }
        self.at += 1;
        token.kind = Kind::Str;
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.data.get(at..at + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        u32::from_str_radix(text, 16).ok()
    }

    fn unicode_escape(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(mut code) = self.hex4(self.at + 2) else {
            return false;
        };
        let mut length = 6;
        if code & 0xF800 == 0xD800 {
            if code & 0x400 != 0
                || self.byte(self.at + 6) != b'\\'
                || self.byte(self.at + 7) != b'u'
            {
                return false;
            }
            let Some(low) = self.hex4(self.at + 8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            code = (((code & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            length = 12;
        }
        let Some(c) = char::from_u32(code) else {
            return false;
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        self.at += length;
        true
    }

    fn number(&mut self, token: &mut Token) {
        let start = self.at;
        let mut end = start;
        while end < self.data.len()
            && matches!(self.data[end], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'x' | b'X' | b'a'..=b'd' | b'f' | b'A'..=b'D' | b'F' | b'i' | b'I' | b'n' | b'N' | b't' | b'T' | b'y' | b'Y')
        {
            end += 1;
        }
        // The longest prefix that reads as a number (as strtod stops).
        while end > start {
            let text = String::from_utf8_lossy(&self.data[start..end]);
            if let Some(value) = parse_number(&text) {
                token.kind = Kind::Number;
                token.number = value;
                self.at = end;
                return;
            }
            end -= 1;
        }
        token.kind = Kind::Error("invalid number");
    }

    fn value(&mut self, lua: &Lua, token: Token) -> Result<Value, Failure> {
        Ok(match token.kind {
            Kind::Str => Value::String(lua.create_string(&token.text)?),
            Kind::Number => number_value(token.number),
            Kind::Boolean => Value::Boolean(token.boolean),
            Kind::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
            Kind::ObjectBegin => self.object(lua)?,
            Kind::ArrayBegin => self.array(lua)?,
            _ => return Err(expected("value", &token)),
        })
    }

    fn descend(&mut self) -> Result<(), Failure> {
        self.depth += 1;
        if self.depth > DEPTH_MAX {
            return Err(Failure::Parse(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.at
            )));
        }
        Ok(())
    }

    fn object(&mut self, lua: &Lua) -> Result<Value, Failure> {
        self.descend()?;
        let table = lua.create_table()?;
        let mut token = self.next_token();
        if token.kind == Kind::ObjectEnd {
            self.depth -= 1;
            return Ok(Value::Table(table));
        }
        loop {
            if token.kind != Kind::Str {
                return Err(expected("object key string", &token));
            }
            let key = lua.create_string(&token.text)?;
            let colon = self.next_token();
            if colon.kind != Kind::Colon {
                return Err(expected("colon", &colon));
            }
            let next = self.next_token();
            let value = self.value(lua, next)?;
            table.raw_set(key, value)?;
            let after = self.next_token();
            if after.kind == Kind::ObjectEnd {
                self.depth -= 1;
                return Ok(Value::Table(table));
            }
            if after.kind != Kind::Comma {
                return Err(expected("comma or object end", &after));
            }
            token = self.next_token();
        }
    }

    fn array(&mut self, lua: &Lua) -> Result<Value, Failure> {
        self.descend()?;
        let table = lua.create_table()?;
        let mut token = self.next_token();
        if token.kind == Kind::ArrayEnd {
            self.depth -= 1;
            return Ok(Value::Table(table));
        }
        for index in 1.. {
            let value = self.value(lua, token)?;
            table.raw_set(index, value)?;
            let after = self.next_token();
            if after.kind == Kind::ArrayEnd {
                break;
            }
            if after.kind != Kind::Comma {
                return Err(expected("comma or array end", &after));
            }
            token = self.next_token();
        }
        self.depth -= 1;
        Ok(Value::Table(table))
    }
}

/// A decoded number: an integer when it is one (Lua 5.1 prints those
/// without a fraction), else a float.
fn number_value(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.007_199_254_740_992e15 {
        Value::Integer(value as i64)
    } else {
        Value::Number(value)
    }
}

fn parse_number(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let (sign, body) = match lower.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, lower.strip_prefix('+').unwrap_or(&lower)),
    };
    if let Some(hex) = body.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(|n| sign * n as f64);
    }
    match body {
        "inf" | "infinity" => return Some(sign * f64::INFINITY),
        "nan" => return Some(f64::NAN),
        _ => {}
    }
    if body.is_empty()
        || !body
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'.')
    {
        return None;
    }
    body.parse::<f64>().ok().map(|n| sign * n)
}
