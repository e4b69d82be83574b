//! `.asb` text, version 3.1 (and 3.0 to read, 3.2 for expression indexes).
//!
//! ```text
//! Version 3.1
//! # namespace test
//! # first-file
//! * i test demo idx_age N 1 age N          secondary index (3.2: "* e", with an expression)
//! * u L mod.lua 14 <14 raw bytes>          UDF module
//! + k S 4 key1                             user key (optional): I, D, S, X (base64 string), B, B!
//! + n test
//! + d 7JEZLUt/jONdXXjTS8ply6qqyWA=         digest, base64
//! + s demo                                 set (optional)
//! + g 1                                    generation
//! + t 428179113                            void time, seconds since 2010-01-01 (0: never expires)
//! + b 3                                    bin count, then that many bin lines
//! - I foo 123
//! - S bar 3 abc
//! - Z baz T
//! ```
//!
//! Names (namespace, set, bin, module, index names) are escaped: a `\`
//! before every `\`, space and newline. Values are never escaped: strings,
//! GeoJSON, raw blobs and module sources are `<length> <exactly length
//! bytes>`; base64 values give their encoded length. Blobs carry their
//! particle type in the bin's letter (B J C P R H E Y M L); lists and maps
//! are the server's msgpack, byte for byte.

use base64::Engine;
use std::io::Read;

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Longest name or other token, as the tools limit it.
pub const TOKEN_BYTES_MAX: usize = 1000;
/// Largest value accepted (a record is at most 8 MiB on the server).
pub const VALUE_BYTES_MAX: u64 = 128 << 20;
/// Largest size token the grammar allows.
const SIZE_MAX: u64 = 1 << 50;
pub const DIGEST_BYTES: usize = 20;

/// Particle types, as numbered on the wire (the server's own table).
pub use bolide_types::particle;

/// The letter of a blob particle type in a bin line, if it has one.
pub fn blob_letter(particle_type: u8) -> Option<u8> {
    Some(match particle_type {
        particle::BLOB => b'B',
        particle::JAVA_BLOB => b'J',
        particle::CSHARP_BLOB => b'C',
        particle::PYTHON_BLOB => b'P',
        particle::RUBY_BLOB => b'R',
        particle::PHP_BLOB => b'H',
        particle::ERLANG_BLOB => b'E',
        particle::HLL => b'Y',
        particle::MAP => b'M',
        particle::LIST => b'L',
        _ => return None,
    })
}

fn blob_particle(letter: u8) -> Option<u8> {
    Some(match letter {
        b'B' => particle::BLOB,
        b'J' => particle::JAVA_BLOB,
        b'C' => particle::CSHARP_BLOB,
        b'P' => particle::PYTHON_BLOB,
        b'R' => particle::RUBY_BLOB,
        b'H' => particle::PHP_BLOB,
        b'E' => particle::ERLANG_BLOB,
        b'Y' => particle::HLL,
        b'M' => particle::MAP,
        b'L' => particle::LIST,
        _ => return None,
    })
}

/// A record's user key.
#[derive(Clone, Debug)]
pub enum UserKey {
    Int(i64),
    Double(f64),
    String(Vec<u8>),
    Bytes(Vec<u8>),
}

impl PartialEq for UserKey {
    fn eq(&self, other: &UserKey) -> bool {
        match (self, other) {
            (UserKey::Int(a), UserKey::Int(b)) => a == b,
            (UserKey::Double(a), UserKey::Double(b)) => a.to_bits() == b.to_bits(),
            (UserKey::String(a), UserKey::String(b)) | (UserKey::Bytes(a), UserKey::Bytes(b)) => {
                a == b
            }
            _ => false,
        }
    }
}

impl UserKey {
    /// The key's particle type and bytes as the KEY field carries them.
    pub fn to_wire(&self) -> (u8, Vec<u8>) {
        match self {
            UserKey::Int(value) => (particle::INTEGER, value.to_be_bytes().to_vec()),
            UserKey::Double(value) => (particle::FLOAT, value.to_be_bytes().to_vec()),
            UserKey::String(bytes) => (particle::STRING, bytes.clone()),
            UserKey::Bytes(bytes) => (particle::BLOB, bytes.clone()),
        }
    }
}

/// A bin value.
#[derive(Clone, Debug)]
pub enum Value {
    /// `N`: no value (a bin delete when written).
    Nil,
    Bool(bool),
    Int(i64),
    Double(f64),
    String(Vec<u8>),
    /// The GeoJSON text alone (without the wire form's cell header).
    GeoJson(Vec<u8>),
    /// Blobs of every subtype, HLLs, lists and maps (their msgpack).
    Blob {
        particle_type: u8,
        bytes: Vec<u8>,
    },
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Nil, Value::Nil) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (Value::String(a), Value::String(b)) | (Value::GeoJson(a), Value::GeoJson(b)) => a == b,
            (
                Value::Blob {
                    particle_type: pa,
                    bytes: a,
                },
                Value::Blob {
                    particle_type: pb,
                    bytes: b,
                },
            ) => pa == pb && a == b,
            _ => false,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Bin {
    pub name: Vec<u8>,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub key: Option<UserKey>,
    pub namespace: Vec<u8>,
    pub digest: [u8; DIGEST_BYTES],
    pub set: Option<Vec<u8>>,
    pub generation: u16,
    /// Seconds since 2010-01-01T00:00:00Z; 0 = never expires.
    pub void_time: u32,
    pub bins: Vec<Bin>,
}

impl Record {
    /// The partition the record's digest maps to.
    pub fn partition_id(&self) -> u16 {
        partition_of(&self.digest)
    }
}

/// The partition of a digest: its first 12 bits, little-endian.
pub fn partition_of(digest: &[u8; DIGEST_BYTES]) -> u16 {
    (u16::from(digest[0]) | (u16::from(digest[1]) << 8)) & 0x0fff
}

/// A Lua UDF module.
#[derive(Clone, Debug, PartialEq)]
pub struct Udf {
    pub name: Vec<u8>,
    pub source: Vec<u8>,
}

/// What an index files a record under: the bin's value, or each element
/// of a list, each key or value of a map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collection {
    Default,
    List,
    MapKeys,
    MapValues,
}

impl Collection {
    pub fn letter(self) -> u8 {
        match self {
            Collection::Default => b'N',
            Collection::List => b'L',
            Collection::MapKeys => b'K',
            Collection::MapValues => b'V',
        }
    }

    fn from_letter(letter: u8) -> Option<Collection> {
        Some(match letter {
            b'N' => Collection::Default,
            b'L' => Collection::List,
            b'K' => Collection::MapKeys,
            b'V' => Collection::MapValues,
            _ => return None,
        })
    }

    /// The `indextype` of the info commands.
    pub fn info_name(self) -> &'static str {
        match self {
            Collection::Default => "default",
            Collection::List => "list",
            Collection::MapKeys => "mapkeys",
            Collection::MapValues => "mapvalues",
        }
    }

    pub fn from_info_name(name: &str) -> Option<Collection> {
        Some(match name.to_ascii_lowercase().as_str() {
            "default" | "none" => Collection::Default,
            "list" => Collection::List,
            "mapkeys" => Collection::MapKeys,
            "mapvalues" => Collection::MapValues,
            _ => return None,
        })
    }
}

/// The value type an index keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexValue {
    String,
    Numeric,
    Geo2dSphere,
    Blob,
}

impl IndexValue {
    pub fn letter(self) -> u8 {
        match self {
            IndexValue::String => b'S',
            IndexValue::Numeric => b'N',
            IndexValue::Geo2dSphere => b'G',
            IndexValue::Blob => b'B',
        }
    }

    fn from_letter(letter: u8) -> Option<IndexValue> {
        Some(match letter {
            b'S' => IndexValue::String,
            b'N' => IndexValue::Numeric,
            b'G' => IndexValue::Geo2dSphere,
            b'B' => IndexValue::Blob,
            _ => return None,
        })
    }

    /// The `type` of the info commands.
    pub fn info_name(self) -> &'static str {
        match self {
            IndexValue::String => "string",
            IndexValue::Numeric => "numeric",
            IndexValue::Geo2dSphere => "geo2dsphere",
            IndexValue::Blob => "blob",
        }
    }

    pub fn from_info_name(name: &str) -> Option<IndexValue> {
        Some(match name.to_ascii_lowercase().as_str() {
            "string" | "text" => IndexValue::String,
            "numeric" | "int signed" => IndexValue::Numeric,
            "geo2dsphere" | "geojson" => IndexValue::Geo2dSphere,
            "blob" => IndexValue::Blob,
            _ => return None,
        })
    }
}

/// A secondary index definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Index {
    pub namespace: Vec<u8>,
    pub set: Option<Vec<u8>>,
    pub name: Vec<u8>,
    pub collection: Collection,
    /// Empty for an expression index.
    pub bin: Vec<u8>,
    pub value: IndexValue,
    /// Base64 msgpack CDT context.
    pub context: Option<String>,
    /// Base64 packed expression (an expression index, version 3.2).
    pub expression: Option<String>,
}

/// One block of a file.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Record(Record),
    Udf(Udf),
    Index(Index),
}

// ---------------------------------------------------------------- encoding

/// Appends `name` escaped: `\` before every `\`, space and newline.
pub fn escape(name: &[u8], out: &mut Vec<u8>) {
    for &byte in name {
        if matches!(byte, b'\\' | b' ' | b'\n') {
            out.push(b'\\');
        }
        out.push(byte);
    }
}

/// The file header: version line, `# namespace`, and `# first-file` for
/// the file that carries the indexes and modules.
pub fn encode_header(version: &str, namespace: &[u8], first_file: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(b"Version ");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\n# namespace ");
    escape(namespace, out);
    out.push(b'\n');
    if first_file {
        out.extend_from_slice(b"# first-file\n");
    }
}

/// A double as C's `%.17g` writes it (what asbackup writes).
pub fn format_double(value: f64) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan"
        } else {
            "nan"
        }
        .to_owned();
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..17).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    } else {
        let precision = usize::try_from(16 - exponent).unwrap_or(0);
        trim_fraction(&format!("{value:.precision$}")).to_owned()
    }
}

fn trim_fraction(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

fn push_number(out: &mut Vec<u8>, number: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "{number}");
}

fn push_sized_raw(out: &mut Vec<u8>, bytes: &[u8]) {
    push_number(out, bytes.len());
    out.push(b' ');
    out.extend_from_slice(bytes);
}

fn push_sized_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    push_number(out, base64::encoded_len(bytes.len(), true).unwrap_or(0));
    out.push(b' ');
    let encoded_at = out.len();
    out.resize(
        encoded_at + base64::encoded_len(bytes.len(), true).unwrap_or(0),
        0,
    );
    let written = BASE64
        .encode_slice(bytes, &mut out[encoded_at..])
        .unwrap_or(0);
    out.truncate(encoded_at + written);
    debug_assert!(out.len() > start);
}

/// Appends a record block. `compact`: blobs raw (`B!`) instead of base64.
pub fn encode_record(record: &Record, compact: bool, out: &mut Vec<u8>) {
    if let Some(key) = &record.key {
        out.extend_from_slice(b"+ k ");
        match key {
            UserKey::Int(value) => {
                out.extend_from_slice(b"I ");
                push_number(out, value);
            }
            UserKey::Double(value) => {
                out.extend_from_slice(b"D ");
                out.extend_from_slice(format_double(*value).as_bytes());
            }
            UserKey::String(bytes) => {
                out.extend_from_slice(b"S ");
                push_sized_raw(out, bytes);
            }
            UserKey::Bytes(bytes) if compact => {
                out.extend_from_slice(b"B! ");
                push_sized_raw(out, bytes);
            }
            UserKey::Bytes(bytes) => {
                out.extend_from_slice(b"B ");
                push_sized_base64(out, bytes);
            }
        }
        out.push(b'\n');
    }
    out.extend_from_slice(b"+ n ");
    escape(&record.namespace, out);
    out.extend_from_slice(b"\n+ d ");
    let at = out.len();
    out.resize(at + 28, 0);
    let written = BASE64
        .encode_slice(record.digest, &mut out[at..])
        .unwrap_or(0);
    out.truncate(at + written);
    out.push(b'\n');
    if let Some(set) = &record.set {
        out.extend_from_slice(b"+ s ");
        escape(set, out);
        out.push(b'\n');
    }
    out.extend_from_slice(b"+ g ");
    push_number(out, record.generation);
    out.extend_from_slice(b"\n+ t ");
    push_number(out, record.void_time);
    out.extend_from_slice(b"\n+ b ");
    push_number(out, record.bins.len());
    out.push(b'\n');
    for bin in &record.bins {
        encode_bin(bin, compact, out);
    }
}

fn encode_bin(bin: &Bin, compact: bool, out: &mut Vec<u8>) {
    let letter = |out: &mut Vec<u8>, letter: u8, raw: bool| {
        out.extend_from_slice(b"- ");
        out.push(letter);
        if raw {
            out.push(b'!');
        }
        out.push(b' ');
        escape(&bin.name, out);
    };
    match &bin.value {
        Value::Nil => letter(out, b'N', false),
        Value::Bool(value) => {
            letter(out, b'Z', false);
            out.extend_from_slice(if *value { b" T" } else { b" F" });
        }
        Value::Int(value) => {
            letter(out, b'I', false);
            out.push(b' ');
            push_number(out, value);
        }
        Value::Double(value) => {
            letter(out, b'D', false);
            out.push(b' ');
            out.extend_from_slice(format_double(*value).as_bytes());
        }
        Value::String(bytes) => {
            letter(out, b'S', false);
            out.push(b' ');
            push_sized_raw(out, bytes);
        }
        Value::GeoJson(bytes) => {
            letter(out, b'G', false);
            out.push(b' ');
            push_sized_raw(out, bytes);
        }
        Value::Blob {
            particle_type,
            bytes,
        } => {
            letter(out, blob_letter(*particle_type).unwrap_or(b'B'), compact);
            out.push(b' ');
            if compact {
                push_sized_raw(out, bytes);
            } else {
                push_sized_base64(out, bytes);
            }
        }
    }
    out.push(b'\n');
}

/// Appends a UDF line.
pub fn encode_udf(udf: &Udf, out: &mut Vec<u8>) {
    out.extend_from_slice(b"* u L ");
    escape(&udf.name, out);
    out.push(b' ');
    push_sized_raw(out, &udf.source);
    out.push(b'\n');
}

/// Appends an index line (`* e` for an expression index).
pub fn encode_index(index: &Index, out: &mut Vec<u8>) {
    out.extend_from_slice(if index.expression.is_some() {
        b"* e "
    } else {
        b"* i "
    });
    escape(&index.namespace, out);
    out.push(b' ');
    escape(index.set.as_deref().unwrap_or_default(), out);
    out.push(b' ');
    escape(&index.name, out);
    out.push(b' ');
    out.push(index.collection.letter());
    out.extend_from_slice(b" 1 ");
    escape(&index.bin, out);
    out.push(b' ');
    out.push(index.value.letter());
    if let Some(expression) = &index.expression {
        out.push(b' ');
        out.extend_from_slice(expression.as_bytes());
    } else if let Some(context) = &index.context {
        out.push(b' ');
        out.extend_from_slice(context.as_bytes());
    }
    out.push(b'\n');
}

/// Appends any item.
pub fn encode_item(item: &Item, compact: bool, out: &mut Vec<u8>) {
    match item {
        Item::Record(record) => encode_record(record, compact, out),
        Item::Udf(udf) => encode_udf(udf, out),
        Item::Index(index) => encode_index(index, out),
    }
}

// ---------------------------------------------------------------- decoding

/// Where and why decoding stopped. `line` counts from 1 (every newline
/// byte of the text, values included, starts a line); `byte` is the offset
/// in the decoded text (after decryption and decompression).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub line: u64,
    pub byte: u64,
    pub message: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, byte {}: {}",
            self.line, self.byte, self.message
        )
    }
}

impl std::error::Error for DecodeError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// 3.0: names are not unescaped, no global lines.
    Legacy,
    V31,
    V32,
}

const BUFFER_BYTES: usize = 64 << 10;

/// A read buffer that counts lines and bytes.
struct Source<R> {
    reader: R,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes consumed before `buffer[start]`.
    offset: u64,
    line: u64,
    /// The last byte consumed was a newline (or nothing was consumed).
    line_start: bool,
    eof: bool,
}

/// A position to report an error at.
#[derive(Clone, Copy)]
struct Mark {
    line: u64,
    byte: u64,
}

impl<R: Read> Source<R> {
    fn new(reader: R) -> Source<R> {
        Source {
            reader,
            buffer: vec![0; BUFFER_BYTES],
            start: 0,
            end: 0,
            offset: 0,
            line: 1,
            line_start: true,
            eof: false,
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            line: self.line,
            byte: self.offset,
        }
    }

    fn error(&self, at: Mark, message: impl Into<String>) -> DecodeError {
        DecodeError {
            line: at.line,
            byte: at.byte,
            message: message.into(),
        }
    }

    fn here(&self, message: impl Into<String>) -> DecodeError {
        self.error(self.mark(), message)
    }

    /// Makes at least `wanted` bytes available if the input has them;
    /// returns how many are.
    fn fill(&mut self, wanted: usize) -> Result<usize, DecodeError> {
        while self.end - self.start < wanted && !self.eof {
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buffer.len() {
                break;
            }
            match self.reader.read(&mut self.buffer[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(read) => self.end += read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(self.here(format!("cannot read: {error}"))),
            }
        }
        Ok(self.end - self.start)
    }

    fn peek(&mut self) -> Result<Option<u8>, DecodeError> {
        if self.fill(1)? == 0 {
            return Ok(None);
        }
        Ok(Some(self.buffer[self.start]))
    }

    /// Up to `count` bytes ahead, not consumed.
    fn peek_many(&mut self, count: usize) -> Result<&[u8], DecodeError> {
        let available = self.fill(count)?.min(count);
        Ok(&self.buffer[self.start..self.start + available])
    }

    fn advance(&mut self, count: usize) {
        let taken = &self.buffer[self.start..self.start + count];
        self.line += taken.iter().filter(|&&byte| byte == b'\n').count() as u64;
        if let Some(&last) = taken.last() {
            self.line_start = last == b'\n';
        }
        self.start += count;
        self.offset += count as u64;
    }

    fn byte(&mut self, what: &str) -> Result<u8, DecodeError> {
        match self.peek()? {
            Some(byte) => {
                self.advance(1);
                Ok(byte)
            }
            None => Err(self.here(format!("file ends in the middle of {what}"))),
        }
    }

    /// Consumes `expected` or fails without consuming anything.
    fn expect(&mut self, expected: u8, what: &str) -> Result<(), DecodeError> {
        match self.peek()? {
            Some(byte) if byte == expected => {
                self.advance(1);
                Ok(())
            }
            Some(byte) => Err(self.here(format!(
                "expected {} {what}, found {}",
                show(expected),
                show(byte)
            ))),
            None => Err(self.here(format!("file ends where {} {what} belongs", show(expected)))),
        }
    }

    /// Exactly `count` bytes (values: never escaped, may hold anything).
    fn bytes(&mut self, count: u64, what: &str) -> Result<Vec<u8>, DecodeError> {
        let at = self.mark();
        if count > VALUE_BYTES_MAX {
            return Err(self.error(
                at,
                format!("{what} of {count} bytes is larger than the {VALUE_BYTES_MAX}-byte limit"),
            ));
        }
        let count = count as usize;
        let mut out = Vec::with_capacity(count.min(BUFFER_BYTES));
        while out.len() < count {
            let available = self.fill(1)?;
            if available == 0 {
                return Err(self.error(
                    at,
                    format!(
                        "file ends inside {what}: {count} bytes announced, {} present",
                        out.len()
                    ),
                ));
            }
            let take = available.min(count - out.len());
            out.extend_from_slice(&self.buffer[self.start..self.start + take]);
            self.advance(take);
        }
        Ok(out)
    }

    /// A token up to (not including) a space or newline; `unescape`: a
    /// backslash takes the next byte literally.
    fn token(
        &mut self,
        unescape: bool,
        stop_at_space: bool,
        what: &str,
    ) -> Result<Vec<u8>, DecodeError> {
        let at = self.mark();
        let mut out = Vec::new();
        loop {
            let Some(byte) = self.peek()? else {
                return Err(self.error(at, format!("file ends inside {what}")));
            };
            if byte == b'\n' || (stop_at_space && byte == b' ') {
                return Ok(out);
            }
            self.advance(1);
            if unescape && byte == b'\\' {
                out.push(self.byte(what)?);
            } else {
                out.push(byte);
            }
            if out.len() > TOKEN_BYTES_MAX {
                return Err(
                    self.error(at, format!("{what} is longer than {TOKEN_BYTES_MAX} bytes"))
                );
            }
        }
    }

    /// The text of a number, up to `terminator` (not consumed).
    fn number_text(&mut self, terminator: u8, what: &str) -> Result<(Mark, String), DecodeError> {
        let at = self.mark();
        let mut text = String::new();
        loop {
            match self.peek()? {
                Some(byte) if byte == terminator => break,
                Some(byte) if byte.is_ascii_graphic() && text.len() < 64 => {
                    self.advance(1);
                    text.push(char::from(byte));
                }
                Some(byte) => {
                    return Err(self.here(format!("unexpected {} in {what}", show(byte))));
                }
                None => return Err(self.error(at, format!("file ends inside {what}"))),
            }
        }
        if text.is_empty() {
            return Err(self.error(at, format!("{what} is missing")));
        }
        Ok((at, text))
    }

    fn size(&mut self, what: &str) -> Result<u64, DecodeError> {
        let (at, text) = self.number_text(b' ', what)?;
        if !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(self.error(at, format!("{what} '{text}' is not a number")));
        }
        match text.parse::<u64>() {
            Ok(size) if size <= SIZE_MAX => {
                self.expect(b' ', &format!("after {what}"))?;
                Ok(size)
            }
            _ => Err(self.error(at, format!("{what} '{text}' is too large"))),
        }
    }

    fn integer(&mut self, what: &str) -> Result<i64, DecodeError> {
        let (at, text) = self.number_text(b'\n', what)?;
        let digits = text.strip_prefix(['-', '+']).unwrap_or(&text);
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(self.error(at, format!("{what} '{text}' is not an integer")));
        }
        text.parse::<i64>()
            .map_err(|_| self.error(at, format!("{what} '{text}' does not fit in 64 bits")))
    }

    fn unsigned(&mut self, what: &str, max: u64) -> Result<u64, DecodeError> {
        let (at, text) = self.number_text(b'\n', what)?;
        match text.parse::<u64>() {
            Ok(value) if value <= max && text.bytes().all(|byte| byte.is_ascii_digit()) => {
                Ok(value)
            }
            _ => Err(self.error(
                at,
                format!("{what} '{text}' is not a number from 0 to {max}"),
            )),
        }
    }

    fn double(&mut self, what: &str) -> Result<f64, DecodeError> {
        let (at, text) = self.number_text(b'\n', what)?;
        let lower = text.to_ascii_lowercase();
        let unsigned = lower.strip_prefix(['-', '+']).unwrap_or(&lower);
        let special = matches!(unsigned, "nan" | "inf" | "infinity");
        let plain = unsigned
            .split_once('e')
            .map_or(unsigned, |(mantissa, _)| mantissa);
        let exponent = unsigned.split_once('e').map(|(_, exponent)| exponent);
        let well_formed = special
            || (plain.bytes().filter(|&byte| byte == b'.').count() <= 1
                && plain.bytes().any(|byte| byte.is_ascii_digit())
                && plain
                    .bytes()
                    .all(|byte| byte.is_ascii_digit() || byte == b'.')
                && exponent.is_none_or(|exponent| {
                    let digits = exponent.strip_prefix(['-', '+']).unwrap_or(exponent);
                    !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
                }));
        if !well_formed {
            return Err(self.error(at, format!("{what} '{text}' is not a number")));
        }
        if special {
            let negative = lower.starts_with('-');
            let value = if unsigned == "nan" {
                f64::NAN
            } else {
                f64::INFINITY
            };
            return Ok(if negative { -value } else { value });
        }
        text.parse::<f64>()
            .map_err(|_| self.error(at, format!("{what} '{text}' is not a number")))
    }

    /// `<size> <size raw bytes>`.
    fn sized_raw(&mut self, what: &str) -> Result<Vec<u8>, DecodeError> {
        let size = self.size(&format!("the length of {what}"))?;
        self.bytes(size, what)
    }

    /// `<size> <base64 of that many characters>`, decoded.
    fn sized_base64(&mut self, what: &str) -> Result<Vec<u8>, DecodeError> {
        let size = self.size(&format!("the length of {what}"))?;
        let at = self.mark();
        if size % 4 != 0 {
            return Err(self.error(
                at,
                format!("{what}: base64 length {size} is not a multiple of 4"),
            ));
        }
        let text = self.bytes(size, what)?;
        BASE64
            .decode(&text)
            .map_err(|error| self.error(at, format!("{what} is not valid base64: {error}")))
    }
}

fn show(byte: u8) -> String {
    match byte {
        b'\n' => "a newline".to_owned(),
        b' ' => "a space".to_owned(),
        0x21..=0x7e => format!("'{}'", char::from(byte)),
        _ => format!("byte 0x{byte:02x}"),
    }
}

/// Reads a `.asb` text: the header at [`Decoder::new`], then one block at
/// a time. A record is returned only once it is complete and valid.
pub struct Decoder<R> {
    source: Source<R>,
    version: Version,
    namespace: Option<Vec<u8>>,
    first_file: bool,
}

impl<R: Read> Decoder<R> {
    /// Reads and checks the version line and the meta lines.
    pub fn new(reader: R) -> Result<Decoder<R>, DecodeError> {
        let mut source = Source::new(reader);
        let head = source.peek_many(12)?.to_vec();
        let version = match head.as_slice() {
            [b'V', b'e', b'r', b's', b'i', b'o', b'n', b' ', a, b'.', b, b'\n'] => match (a, b) {
                (b'3', b'0') => Version::Legacy,
                (b'3', b'1') => Version::V31,
                (b'3', b'2') => Version::V32,
                _ => {
                    return Err(source.here(format!(
                        "unsupported version {}.{} (3.0, 3.1 and 3.2 are read)",
                        char::from(*a),
                        char::from(*b)
                    )))
                }
            },
            _ => {
                return Err(source.here(
                    "not an .asb file: it does not start with 'Version 3.x' (a compressed or \
                     encrypted file needs the same --compress and --encrypt options as its backup)",
                ))
            }
        };
        source.advance(12);
        let mut decoder = Decoder {
            source,
            version,
            namespace: None,
            first_file: false,
        };
        decoder.meta_lines()?;
        Ok(decoder)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The `# namespace` meta line, if the file has one.
    pub fn namespace(&self) -> Option<&[u8]> {
        self.namespace.as_deref()
    }

    pub fn first_file(&self) -> bool {
        self.first_file
    }

    /// Bytes of text decoded so far.
    pub fn offset(&self) -> u64 {
        self.source.offset
    }

    pub fn line(&self) -> u64 {
        self.source.line
    }

    fn unescape(&self) -> bool {
        self.version != Version::Legacy
    }

    fn meta_lines(&mut self) -> Result<(), DecodeError> {
        while self.source.peek()? == Some(b'#') {
            let at = self.source.mark();
            self.source.advance(1);
            self.source.expect(b' ', "after '#'")?;
            let tag = self.source.token(false, true, "a meta tag")?;
            match tag.as_slice() {
                b"namespace" => {
                    self.source.expect(b' ', "after '# namespace'")?;
                    let name = self.source.token(self.unescape(), false, "the namespace")?;
                    self.namespace = Some(name);
                }
                b"first-file" => self.first_file = true,
                other => {
                    return Err(self.source.error(
                        at,
                        format!("unknown meta line '# {}'", String::from_utf8_lossy(other)),
                    ))
                }
            }
            self.source.expect(b'\n', "at the end of a meta line")?;
        }
        Ok(())
    }

    /// The next block, or `None` at the end of the text.
    pub fn next_item(&mut self) -> Result<Option<Item>, DecodeError> {
        match self.source.peek()? {
            None => Ok(None),
            Some(b'+') => self.record().map(|record| Some(Item::Record(record))),
            Some(b'*') => self.global().map(Some),
            Some(b'#') => Err(self
                .source
                .here("a meta line ('#') after the first record or global line")),
            Some(byte) => Err(self.source.here(format!(
                "expected a record ('+') or a global line ('*') at the start of a line, found {}",
                show(byte)
            ))),
        }
    }

    /// After an error: skips to the start of the next record or global
    /// line. `false` at the end of the text.
    pub fn skip_to_next_block(&mut self) -> Result<bool, DecodeError> {
        loop {
            if self.source.line_start {
                let ahead = self.source.peek_many(4)?;
                if ahead.is_empty() {
                    return Ok(false);
                }
                if matches!(ahead, b"+ k " | b"+ n " | b"* i " | b"* e " | b"* u ") {
                    return Ok(true);
                }
            }
            if self.source.fill(1)? == 0 {
                return Ok(false);
            }
            // Skip to just after the next newline in what is buffered.
            let buffered = &self.source.buffer[self.source.start..self.source.end];
            let skip = buffered
                .iter()
                .position(|&byte| byte == b'\n')
                .map_or(buffered.len(), |at| at + 1);
            self.source.advance(skip);
        }
    }

    /// `+ <kind> ` and returns the kind.
    fn record_line_kind(&mut self) -> Result<u8, DecodeError> {
        self.source.expect(b'+', "at the start of a record line")?;
        self.source.expect(b' ', "after '+'")?;
        let kind = self.source.byte("a record line")?;
        self.source.expect(b' ', "after the record line's letter")?;
        Ok(kind)
    }

    fn record(&mut self) -> Result<Record, DecodeError> {
        let start = self.source.mark();
        let mut kind_at = self.source.mark();
        let mut kind = self.record_line_kind()?;
        let mut key = None;
        if kind == b'k' {
            key = Some(self.user_key()?);
            self.source.expect(b'\n', "at the end of the key line")?;
            kind_at = self.source.mark();
            kind = self.record_line_kind()?;
        }
        let expect_kind = |decoder: &Decoder<R>, at: Mark, kind: u8, expected: u8| {
            if kind == expected {
                Ok(())
            } else {
                Err(decoder.source.error(
                    at,
                    format!(
                        "expected the record line '+ {}', found '+ {}'",
                        char::from(expected),
                        char::from(kind)
                    ),
                ))
            }
        };
        expect_kind(self, kind_at, kind, b'n')?;
        let namespace = self.source.token(self.unescape(), false, "the namespace")?;
        if namespace.is_empty() {
            return Err(self.source.error(kind_at, "empty namespace"));
        }
        self.source.expect(b'\n', "after the namespace")?;
        kind_at = self.source.mark();
        kind = self.record_line_kind()?;
        expect_kind(self, kind_at, kind, b'd')?;
        let digest_at = self.source.mark();
        let text = self.source.token(false, false, "the digest")?;
        let digest: [u8; DIGEST_BYTES] = BASE64
            .decode(&text)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| {
                self.source
                    .error(digest_at, "the digest is not 20 bytes in base64")
            })?;
        self.source.expect(b'\n', "after the digest")?;
        kind_at = self.source.mark();
        kind = self.record_line_kind()?;
        let mut set = None;
        if kind == b's' {
            set = Some(self.source.token(self.unescape(), false, "the set name")?);
            self.source.expect(b'\n', "after the set name")?;
            kind_at = self.source.mark();
            kind = self.record_line_kind()?;
        }
        expect_kind(self, kind_at, kind, b'g')?;
        let generation = self
            .source
            .unsigned("the generation", u64::from(u16::MAX))? as u16;
        self.source.expect(b'\n', "after the generation")?;
        kind_at = self.source.mark();
        kind = self.record_line_kind()?;
        expect_kind(self, kind_at, kind, b't')?;
        let void_time = self.source.unsigned("the void time", u64::from(u32::MAX))? as u32;
        self.source.expect(b'\n', "after the void time")?;
        kind_at = self.source.mark();
        kind = self.record_line_kind()?;
        expect_kind(self, kind_at, kind, b'b')?;
        let count = self.source.unsigned("the bin count", u64::from(u16::MAX))?;
        self.source.expect(b'\n', "after the bin count")?;
        let mut bins = Vec::with_capacity(count.min(1024) as usize);
        for _ in 0..count {
            bins.push(self.bin()?);
        }
        debug_assert!(self.source.offset > start.byte);
        Ok(Record {
            key,
            namespace,
            digest,
            set,
            generation,
            void_time,
            bins,
        })
    }

    fn user_key(&mut self) -> Result<UserKey, DecodeError> {
        let at = self.source.mark();
        let kind = self.source.byte("the key")?;
        let raw = self.source.peek()? == Some(b'!');
        if raw {
            if kind != b'B' {
                return Err(self.source.here("'!' (raw) is only for blob keys"));
            }
            self.source.advance(1);
        }
        self.source.expect(b' ', "after the key's type")?;
        Ok(match kind {
            b'I' => UserKey::Int(self.source.integer("the integer key")?),
            b'D' => UserKey::Double(self.source.double("the double key")?),
            b'S' => UserKey::String(self.source.sized_raw("the string key")?),
            b'X' => UserKey::String(self.source.sized_base64("the string key")?),
            b'B' if raw => UserKey::Bytes(self.source.sized_raw("the blob key")?),
            b'B' => UserKey::Bytes(self.source.sized_base64("the blob key")?),
            other => {
                return Err(self.source.error(
                    at,
                    format!("unknown key type {} (I, D, S, X or B)", show(other)),
                ))
            }
        })
    }

    fn bin(&mut self) -> Result<Bin, DecodeError> {
        self.source.expect(b'-', "at the start of a bin line")?;
        self.source.expect(b' ', "after '-'")?;
        let kind_at = self.source.mark();
        let kind = self.source.byte("a bin line")?;
        let raw = self.source.peek()? == Some(b'!');
        if raw {
            if blob_particle(kind).is_none() {
                return Err(self.source.here("'!' (raw) is only for blob bins"));
            }
            self.source.advance(1);
        }
        self.source.expect(b' ', "after the bin's type")?;
        let name = self.source.token(self.unescape(), true, "the bin name")?;
        if kind == b'N' {
            self.source.expect(b'\n', "after a nil bin's name")?;
            return Ok(Bin {
                name,
                value: Value::Nil,
            });
        }
        self.source.expect(b' ', "after the bin name")?;
        let value = match kind {
            b'Z' => {
                let at = self.source.mark();
                match self.source.byte("a boolean")? {
                    b'T' => Value::Bool(true),
                    b'F' => Value::Bool(false),
                    other => {
                        return Err(self
                            .source
                            .error(at, format!("a boolean is T or F, found {}", show(other))))
                    }
                }
            }
            b'I' => Value::Int(self.source.integer("the integer")?),
            b'D' => Value::Double(self.source.double("the double")?),
            b'S' => Value::String(self.source.sized_raw("the string")?),
            b'X' => Value::String(self.source.sized_base64("the string")?),
            b'G' => Value::GeoJson(self.source.sized_raw("the GeoJSON value")?),
            b'U' => {
                return Err(self.source.error(
                    kind_at,
                    "an LDT bin ('U'): restore this backup with an older restore tool",
                ))
            }
            letter => match blob_particle(letter) {
                Some(particle_type) => Value::Blob {
                    particle_type,
                    bytes: if raw {
                        self.source.sized_raw("the blob")?
                    } else {
                        self.source.sized_base64("the blob")?
                    },
                },
                None => {
                    return Err(self.source.error(
                        kind_at,
                        format!(
                            "unknown bin type {} (N Z I D S X G B J C P R H E Y M L)",
                            show(letter)
                        ),
                    ))
                }
            },
        };
        self.source.expect(b'\n', "at the end of the bin line")?;
        Ok(Bin { name, value })
    }

    fn global(&mut self) -> Result<Item, DecodeError> {
        let at = self.source.mark();
        self.source.expect(b'*', "at the start of a global line")?;
        if self.version == Version::Legacy {
            return Err(self
                .source
                .error(at, "a global line ('*') in a version 3.0 file"));
        }
        self.source.expect(b' ', "after '*'")?;
        let kind_at = self.source.mark();
        let kind = self.source.byte("a global line")?;
        self.source.expect(b' ', "after the global line's letter")?;
        let item = match kind {
            b'u' => {
                let type_at = self.source.mark();
                let language = self.source.byte("the UDF type")?;
                if language != b'L' {
                    return Err(self.source.error(
                        type_at,
                        format!("unknown UDF type {} (only L, Lua)", show(language)),
                    ));
                }
                self.source.expect(b' ', "after the UDF type")?;
                let name = self.source.token(true, true, "the UDF file name")?;
                self.source.expect(b' ', "after the UDF file name")?;
                let source = self.source.sized_raw("the UDF source")?;
                Item::Udf(Udf { name, source })
            }
            b'i' | b'e' => Item::Index(self.index(kind == b'e')?),
            other => {
                return Err(self.source.error(
                    kind_at,
                    format!("unknown global line type {} (i, e or u)", show(other)),
                ))
            }
        };
        self.source.expect(b'\n', "at the end of the global line")?;
        Ok(item)
    }

    fn index(&mut self, expression: bool) -> Result<Index, DecodeError> {
        let namespace = self.source.token(true, true, "the index namespace")?;
        self.source.expect(b' ', "after the index namespace")?;
        let set = self.source.token(true, true, "the index set")?;
        self.source.expect(b' ', "after the index set")?;
        let name = self.source.token(true, true, "the index name")?;
        self.source.expect(b' ', "after the index name")?;
        let at = self.source.mark();
        let collection = Collection::from_letter(self.source.byte("the index type")?)
            .ok_or_else(|| self.source.error(at, "unknown index type (N, L, K or V)"))?;
        self.source.expect(b' ', "after the index type")?;
        let at = self.source.mark();
        let paths = self.source.size("the index path count")?;
        if paths != 1 {
            return Err(self
                .source
                .error(at, format!("an index has 1 path, this one {paths}")));
        }
        let bin = self.source.token(true, true, "the index bin")?;
        self.source.expect(b' ', "after the index bin")?;
        let at = self.source.mark();
        let value = IndexValue::from_letter(self.source.byte("the index value type")?).ok_or_else(
            || {
                self.source
                    .error(at, "unknown index value type (S, N, G or B)")
            },
        )?;
        let mut extra = None;
        if self.source.peek()? == Some(b' ') {
            self.source.advance(1);
            let at = self.source.mark();
            let text = self.source.token(false, false, "the index context")?;
            let valid = !text.is_empty() && text.len() % 4 == 0 && BASE64.decode(&text).is_ok();
            if !valid {
                return Err(self
                    .source
                    .error(at, "the index context or expression is not base64"));
            }
            extra = Some(String::from_utf8_lossy(&text).into_owned());
        }
        if expression && extra.is_none() {
            return Err(self
                .source
                .here("an expression index line ('* e') without its expression"));
        }
        let (context, expression) = if expression {
            (None, extra)
        } else {
            (extra, None)
        };
        Ok(Index {
            namespace,
            set: (!set.is_empty()).then_some(set),
            name,
            collection,
            bin,
            value,
            context,
            expression,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 168-byte sample file shipped with asbackup
    /// (`test/test_backup_file.asb`).
    pub const SAMPLE: &[u8] =
        b"Version 3.1\n# namespace test\n# first-file\n+ k S 4 key1\n+ n test\n\
+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ s demo\n+ g 1\n+ t 428179113\n+ b 3\n\
- I foo 123\n- S bar 3 abc\n- Z baz T\n";

    fn decode_all(text: &[u8]) -> Result<Vec<Item>, DecodeError> {
        let mut decoder = Decoder::new(text)?;
        let mut items = Vec::new();
        while let Some(item) = decoder.next_item()? {
            items.push(item);
        }
        Ok(items)
    }

    #[test]
    fn the_sample_decodes_and_encodes_byte_for_byte() {
        assert_eq!(SAMPLE.len(), 168);
        let mut decoder = Decoder::new(SAMPLE).expect("header");
        assert_eq!(decoder.namespace(), Some(&b"test"[..]));
        assert!(decoder.first_file());
        let Some(Item::Record(record)) = decoder.next_item().expect("record") else {
            panic!("no record");
        };
        assert_eq!(record.key, Some(UserKey::String(b"key1".to_vec())));
        assert_eq!(record.set.as_deref(), Some(&b"demo"[..]));
        assert_eq!(record.generation, 1);
        assert_eq!(record.void_time, 428_179_113);
        assert_eq!(
            record.bins,
            vec![
                Bin {
                    name: b"foo".to_vec(),
                    value: Value::Int(123)
                },
                Bin {
                    name: b"bar".to_vec(),
                    value: Value::String(b"abc".to_vec())
                },
                Bin {
                    name: b"baz".to_vec(),
                    value: Value::Bool(true)
                },
            ]
        );
        assert_eq!(decoder.next_item(), Ok(None));
        let mut out = Vec::new();
        encode_header("3.1", b"test", true, &mut out);
        encode_record(&record, false, &mut out);
        assert_eq!(out, SAMPLE);
    }

    #[test]
    fn doubles_are_written_as_printf_17g() {
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(123.0), "123");
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(-2.25), "-2.25");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1e16), "10000000000000000");
        assert_eq!(format_double(1e17), "1e+17");
        assert_eq!(format_double(0.0001), "0.0001");
        assert_eq!(format_double(0.00001), "1.0000000000000001e-05");
        assert_eq!(format_double(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(format_double(5e-324), "4.9406564584124654e-324");
        assert_eq!(format_double(0.0), "0");
        assert_eq!(format_double(-0.0), "-0");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_double(f64::NAN), "nan");
        for value in [
            0.1,
            1.0 / 3.0,
            1e-300,
            123_456_789.123_456_79,
            -7e22,
            5e-324,
        ] {
            let text = format_double(value);
            assert_eq!(text.parse::<f64>().expect("parses"), value, "{text}");
        }
    }

    #[test]
    fn the_reference_examples_decode() {
        let text = b"Version 3.1\n# namespace test\n\
* u L my\\ mod.lua 13 local x = 1\n\n\n\
* i test demo idx_age N 1 age N\n\
* i test  idx_age N 1 age N\n\
+ n test\n+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ g 2\n+ t 0\n+ b 4\n\
- L tags 12 kqIDYaIDYg==\n- M m 8 gaIDYQE=\n- S note 5 a b\nc\n- I my\\ bin 5\n";
        let items = decode_all(text).expect("decodes");
        assert_eq!(
            items[0],
            Item::Udf(Udf {
                name: b"my mod.lua".to_vec(),
                source: b"local x = 1\n\n".to_vec()
            })
        );
        let Item::Index(index) = &items[1] else {
            panic!("index")
        };
        assert_eq!(index.set.as_deref(), Some(&b"demo"[..]));
        let Item::Index(index) = &items[2] else {
            panic!("index")
        };
        assert_eq!(index.set, None);
        let Item::Record(record) = &items[3] else {
            panic!("record")
        };
        assert_eq!(record.key, None);
        assert_eq!(record.set, None);
        assert_eq!(
            record.bins[0].value,
            Value::Blob {
                particle_type: particle::LIST,
                bytes: vec![0x92, 0xa2, 0x03, 0x61, 0xa2, 0x03, 0x62]
            }
        );
        assert_eq!(
            record.bins[1].value,
            Value::Blob {
                particle_type: particle::MAP,
                bytes: vec![0x81, 0xa2, 0x03, 0x61, 0x01]
            }
        );
        assert_eq!(record.bins[2].value, Value::String(b"a b\nc".to_vec()));
        assert_eq!(record.bins[3].name, b"my bin");
        // And back, byte for byte.
        let mut out = Vec::new();
        encode_header("3.1", b"test", false, &mut out);
        for item in &items {
            encode_item(item, false, &mut out);
        }
        assert_eq!(out, text);
    }

    #[test]
    fn every_value_round_trips_in_both_blob_forms() {
        let mut bins = vec![
            Bin {
                name: b"n\\ \n".to_vec(),
                value: Value::Nil,
            },
            Bin {
                name: b"z".to_vec(),
                value: Value::Bool(false),
            },
            Bin {
                name: b"i".to_vec(),
                value: Value::Int(i64::MIN),
            },
            Bin {
                name: b"d".to_vec(),
                value: Value::Double(-0.1),
            },
            Bin {
                name: b"s".to_vec(),
                value: Value::String(vec![0, b' ', b'\n', 0xff, b'\\']),
            },
            Bin {
                name: b"g".to_vec(),
                value: Value::GeoJson(br#"{"type":"Point","coordinates":[1,2]}"#.to_vec()),
            },
        ];
        for particle_type in [4, 7, 8, 9, 10, 11, 12, 18, 19, 20] {
            bins.push(Bin {
                name: vec![b'b', particle_type],
                value: Value::Blob {
                    particle_type,
                    bytes: vec![particle_type, b'\n', b' ', 0],
                },
            });
        }
        let keys = [
            None,
            Some(UserKey::Int(-5)),
            Some(UserKey::Double(2.5)),
            Some(UserKey::String(b"a b\n".to_vec())),
            Some(UserKey::Bytes(vec![0, 1, 2, b'\n'])),
        ];
        for key in keys {
            let record = Record {
                key,
                namespace: b"n s".to_vec(),
                digest: [7; 20],
                set: Some(b"s\\et".to_vec()),
                generation: 65535,
                void_time: u32::MAX,
                bins: bins.clone(),
            };
            for compact in [false, true] {
                let mut out = Vec::new();
                encode_header("3.1", b"n s", false, &mut out);
                encode_record(&record, compact, &mut out);
                let items = decode_all(&out).expect("decodes");
                assert_eq!(items, vec![Item::Record(record.clone())]);
            }
        }
    }

    #[test]
    fn errors_name_the_line_and_byte() {
        let cut = &SAMPLE[..SAMPLE.len() - 5];
        let mut decoder = Decoder::new(cut).expect("header");
        let error = decoder.next_item().expect_err("truncated");
        assert_eq!(error.line, 13, "{error}");
        assert!(error.message.contains("file ends"), "{error}");

        let bad = String::from_utf8_lossy(SAMPLE).replace("+ g 1", "+ g x");
        let error = decode_all(bad.as_bytes()).expect_err("bad generation");
        assert_eq!((error.line, error.byte), (8, 110), "{error}");

        let error = Decoder::new(&b"Version 4.0\n"[..]).err().expect("version");
        assert!(error.message.contains("unsupported version"));
        let error = Decoder::new(&b"\x28\xb5\x2f\xfd garbage"[..])
            .err()
            .expect("garbage");
        assert_eq!((error.line, error.byte), (1, 0));

        let error = decode_all(b"Version 3.1\n+ n t\n+ d AAAA\n").expect_err("digest");
        assert!(error.message.contains("digest"), "{error}");
        let error = decode_all(b"Version 3.1\n- I x 1\n").expect_err("stray bin");
        assert_eq!(error.line, 2);
        let error = decode_all(b"Version 3.0\n* u L a 1 x\n").expect_err("legacy");
        assert!(error.message.contains("3.0"));
    }

    #[test]
    fn a_bad_record_can_be_skipped() {
        let good = String::from_utf8_lossy(&SAMPLE[42..]).into_owned();
        let text = format!(
            "Version 3.1\n{good}{}{good}",
            good.replace("- Z baz T", "- Q baz T")
        );
        let mut decoder = Decoder::new(text.as_bytes()).expect("header");
        assert!(matches!(decoder.next_item(), Ok(Some(Item::Record(_)))));
        let error = decoder.next_item().expect_err("bad bin");
        assert_eq!(error.line, 21, "{error}");
        assert!(decoder.skip_to_next_block().expect("skip"));
        assert!(matches!(decoder.next_item(), Ok(Some(Item::Record(_)))));
        assert_eq!(decoder.next_item(), Ok(None));
    }
}
