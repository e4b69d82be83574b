//! Filter expressions (FILTER_EXP field, 43): parsed once per request from
//! the clients' MessagePack form, evaluated against each record's metadata
//! and bins. A record passes only if the expression is definitely true;
//! false or unknown (a missing bin, mismatched types) filters it out.
//!
//! Supported: literals (integer, float, string, blob, bool, nil, list, map),
//! comparisons (`==`, `!=`, `>`, `>=`, `<`, `<=`), `and`, `or`, `not`,
//! `exclusive`, bin values and bin types, record metadata (digest modulo,
//! last update, since update, void time, TTL, set name, key, key exists,
//! tombstone, record/memory/device size), arithmetic and bitwise operators,
//! `cond`, `let`/`var`, list and map reads (CALL, system CDT), regex and
//! geo comparisons. Anything else is answered with UNSUPPORTED_FEATURE
//! rather than guessed at.

use bolide_store::{RecordMeta, RecordView};
use bolide_types::{particle, Digest, ResultCode, CITRUSLEAF_EPOCH_UNIX_SECONDS};
use bolide_wire::msgpack::{Item, Reader};
use std::borrow::Cow;

const NODES_MAX: usize = 1024;
const DEPTH_MAX: usize = 32;

mod code {
    pub const UNKNOWN: i64 = 0;
    pub const EQ: i64 = 1;
    pub const NE: i64 = 2;
    pub const GT: i64 = 3;
    pub const GE: i64 = 4;
    pub const LT: i64 = 5;
    pub const LE: i64 = 6;
    pub const CMP_REGEX: i64 = 7;
    pub const CMP_GEO: i64 = 8;
    pub const AND: i64 = 16;
    pub const OR: i64 = 17;
    pub const NOT: i64 = 18;
    pub const EXCLUSIVE: i64 = 19;
    pub const ADD: i64 = 20;
    pub const SUB: i64 = 21;
    pub const MUL: i64 = 22;
    pub const DIV: i64 = 23;
    pub const POW: i64 = 24;
    pub const LOG: i64 = 25;
    pub const MOD: i64 = 26;
    pub const ABS: i64 = 27;
    pub const FLOOR: i64 = 28;
    pub const CEIL: i64 = 29;
    pub const TO_INT: i64 = 30;
    pub const TO_FLOAT: i64 = 31;
    pub const INT_AND: i64 = 32;
    pub const INT_OR: i64 = 33;
    pub const INT_XOR: i64 = 34;
    pub const INT_NOT: i64 = 35;
    pub const INT_LSHIFT: i64 = 36;
    pub const INT_RSHIFT: i64 = 37;
    pub const INT_ARSHIFT: i64 = 38;
    pub const INT_COUNT: i64 = 39;
    pub const INT_LSCAN: i64 = 40;
    pub const INT_RSCAN: i64 = 41;
    pub const MIN: i64 = 50;
    pub const MAX: i64 = 51;
    pub const DIGEST_MODULO: i64 = 64;
    pub const DEVICE_SIZE: i64 = 65;
    pub const LAST_UPDATE: i64 = 66;
    pub const SINCE_UPDATE: i64 = 67;
    pub const VOID_TIME: i64 = 68;
    pub const TTL: i64 = 69;
    pub const SET_NAME: i64 = 70;
    pub const KEY_EXISTS: i64 = 71;
    pub const IS_TOMBSTONE: i64 = 72;
    pub const MEMORY_SIZE: i64 = 73;
    pub const RECORD_SIZE: i64 = 74;
    pub const KEY: i64 = 80;
    pub const BIN: i64 = 81;
    pub const BIN_TYPE: i64 = 82;
    pub const COND: i64 = 123;
    pub const VAR: i64 = 124;
    pub const LET: i64 = 125;
    pub const QUOTED: i64 = 126;
    pub const CALL: i64 = 127;
}

/// Expression value types as the clients number them.
mod kind {
    pub const NIL: i64 = 0;
    pub const BOOL: i64 = 1;
    pub const INT: i64 = 2;
    pub const STRING: i64 = 3;
    pub const BLOB: i64 = 6;
    pub const FLOAT: i64 = 7;
    pub const GEO: i64 = 8;
    pub const LIST: i64 = 4;
    pub const MAP: i64 = 5;
}

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Literal(Literal),
    Compare(i64, Box<Expr>, Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Exclusive(Vec<Expr>),
    Bin {
        name: Vec<u8>,
        kind: i64,
    },
    BinType(Vec<u8>),
    Key(i64),
    Meta(i64),
    DigestModulo(i64),
    /// True if the string `subject` evaluates to matches.
    Regex(PosixRegex, Box<Expr>),
    /// True if one side is a point inside the region the other side is.
    Geo(GeoSide, GeoSide),
    /// A list or map read op (the msgpack `[code, args...]` payload, as in
    /// `operate`) on the list or map `bin` evaluates to.
    Call {
        call: Call,
        bin: Box<Expr>,
    },
    /// Arithmetic and bitwise operators on integers or floats.
    Arith(i64, Vec<Expr>),
    /// `[cond, action]` pairs, then the default.
    Cond(Vec<Expr>),
    /// Named values, then the expression that may use them.
    Let(Vec<(Vec<u8>, Expr)>, Box<Expr>),
    Var(Vec<u8>),
}

/// One side of a geo comparison: a literal, parsed once per request, or
/// an expression (a GeoJSON bin) parsed per record.
#[derive(Clone, Debug, PartialEq)]
pub enum GeoSide {
    Shape(crate::geo::Shape),
    Expr(Box<Expr>),
}

impl GeoSide {
    fn new(expr: Expr) -> Result<GeoSide, ResultCode> {
        match expr {
            Expr::Literal(Literal::Geo(text)) => crate::geo::Shape::parse(&text)
                .map(GeoSide::Shape)
                .ok_or(ResultCode::Parameter),
            other => Ok(GeoSide::Expr(Box::new(other))),
        }
    }
}

/// A POSIX regular expression (as `regcomp` takes it), compiled once per
/// request.
#[derive(Clone, Debug)]
pub struct PosixRegex(regex::bytes::Regex);

impl PartialEq for PosixRegex {
    fn eq(&self, other: &PosixRegex) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// `regcomp` flags as the clients send them (glibc's values).
mod regex_flag {
    pub const EXTENDED: i64 = 1;
    pub const ICASE: i64 = 2;
    pub const NEWLINE: i64 = 8;
}

/// Compiled patterns larger than this are refused (a request must not make
/// the server build an unbounded automaton).
const REGEX_SIZE_MAX: usize = 1 << 20;

impl PosixRegex {
    /// Compiles a POSIX basic (or, with REG_EXTENDED, extended) regular
    /// expression with `regcomp`'s flags: REG_ICASE ignores case;
    /// REG_NEWLINE makes `.` and bracket lists stop at newlines and `^`/`$`
    /// match at them. A pattern that does not compile is PARAMETER.
    pub fn compile(pattern: &[u8], flags: i64) -> Result<PosixRegex, ResultCode> {
        let pattern = std::str::from_utf8(pattern).map_err(|_| ResultCode::Parameter)?;
        let translated = translate_posix(pattern, flags & regex_flag::EXTENDED != 0);
        let newline = flags & regex_flag::NEWLINE != 0;
        regex::bytes::RegexBuilder::new(&translated)
            .case_insensitive(flags & regex_flag::ICASE != 0)
            .multi_line(newline)
            .dot_matches_new_line(!newline)
            .unicode(false)
            .size_limit(REGEX_SIZE_MAX)
            .build()
            .map(PosixRegex)
            .map_err(|_| ResultCode::Parameter)
    }

    pub fn is_match(&self, subject: &[u8]) -> bool {
        self.0.is_match(subject)
    }
}

/// Rewrites a POSIX pattern in the syntax of the `regex` crate. In a basic
/// expression `\(`, `\)`, `\{`, `\}`, `\|`, `\+` and `\?` are the operators
/// and the bare characters are literals (the reverse of extended syntax);
/// inside a bracket list a backslash is an ordinary character.
fn translate_posix(pattern: &str, extended: bool) -> String {
    const SWAPPED: &[char] = &['(', ')', '{', '}', '|', '+', '?'];
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    // Where a `*` has nothing to repeat (the start, after a leading `^` or
    // a group's opening) basic syntax reads it as a literal.
    let mut star_is_literal = !extended;
    while let Some(c) = chars.next() {
        let at_group_start = std::mem::replace(&mut star_is_literal, false);
        match c {
            '*' if at_group_start => out.push_str("\\*"),
            '^' if at_group_start => {
                out.push('^');
                star_is_literal = true;
            }
            // Elsewhere basic syntax reads `^` as a literal, and `$` too
            // unless it ends the pattern or a group.
            '^' if !extended => out.push_str("\\^"),
            '$' if !extended
                && chars.peek().is_some()
                && !chars.clone().take(2).eq(['\\', ')']) =>
            {
                out.push_str("\\$")
            }
            '[' => {
                // Copy the bracket list; `]` first (or after `^`) is literal.
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str("\\]");
                }
                while let Some(inner) = chars.next() {
                    match inner {
                        ']' => {
                            out.push(']');
                            break;
                        }
                        '\\' => out.push_str("\\\\"),
                        '[' if matches!(chars.peek(), Some(':' | '.' | '=')) => {
                            // A class like [:alpha:]: copy through its `]`.
                            out.push('[');
                            for class in chars.by_ref() {
                                out.push(class);
                                if class == ']' {
                                    break;
                                }
                            }
                        }
                        '[' => out.push_str("\\["),
                        other => out.push(other),
                    }
                }
            }
            '\\' if !extended && chars.peek().is_some_and(|next| SWAPPED.contains(next)) => {
                if let Some(next) = chars.next() {
                    out.push(next);
                    star_is_literal = next == '(';
                }
            }
            '\\' => {
                out.push('\\');
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            c if !extended && SWAPPED.contains(&c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
    /// A blob: its particle type (the client's blob kind) and bytes.
    Blob(u8, Vec<u8>),
    /// GeoJSON text.
    Geo(Vec<u8>),
    /// A list (sent quoted, `[126, list]`) or a map: its msgpack.
    List(Vec<u8>),
    Map(Vec<u8>),
    /// `unknown`: aborts an expression op (answer 26 unless it may fail).
    Unknown,
}

/// The op of a CALL. Its arguments are expressions too: literals, quoted
/// lists, maps, or expressions (a bin, a variable, another call) evaluated
/// for each record.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The payload when every argument is a literal (quotes removed).
    fixed: Option<Vec<u8>>,
    /// Everything before the arguments: the context if any, the array
    /// header and the op code.
    head: Vec<u8>,
    args: Vec<CallArg>,
}

#[derive(Clone, Debug, PartialEq)]
enum CallArg {
    /// Msgpack as the op takes it.
    Value(Vec<u8>),
    Expr(Expr),
}

/// A value during evaluation; `Unknown` poisons comparisons.
#[derive(Clone, Debug, PartialEq)]
enum Value<'v> {
    Unknown,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Borrowed from the request or the record, or the result of a list or
    /// map read.
    Str(Cow<'v, [u8]>),
    /// A blob: its particle type (the client's blob kind) and bytes.
    Blob(u8, Cow<'v, [u8]>),
    /// GeoJSON text.
    Geo(&'v [u8]),
    /// A list or map (stored, literal or a call's result): its particle
    /// type and msgpack.
    Collection(u8, Cow<'v, [u8]>),
}

impl Value<'_> {
    fn as_int(&self) -> Option<i64> {
        match *self {
            Value::Int(value) => Some(value),
            _ => None,
        }
    }

    fn as_float(&self) -> Option<f64> {
        match *self {
            Value::Float(value) => Some(value),
            _ => None,
        }
    }
}

/// What an expression is evaluated against.
pub struct Subject<'r> {
    pub digest: &'r Digest,
    pub meta: &'r RecordMeta,
    pub bins: Bins<'r>,
    /// The record's stored key (type, bytes), if it has one.
    pub key: Option<(u8, &'r [u8])>,
    pub record_bytes: usize,
    pub set_name: Option<&'r str>,
    pub now_ms: u64,
}

/// Where an expression reads bins from: a stored record, or the working
/// copy of a write (earlier ops of the same request already applied).
#[derive(Clone, Copy)]
pub enum Bins<'r> {
    Stored(&'r RecordView<'r>),
    Working(&'r [crate::ops::WorkBin<'r>]),
}

impl<'r> Bins<'r> {
    /// A bin's particle type and value.
    fn get(self, name: &[u8]) -> Option<(u8, &'r [u8])> {
        match self {
            Bins::Stored(record) => record.bin(name).map(|bin| (bin.particle_type, bin.value)),
            Bins::Working(bins) => bins
                .iter()
                .find(|bin| bin.name == name)
                .map(|bin| (bin.particle_type, bin.value.as_ref())),
        }
    }
}

/// Flags of an expression read or write op (`[expression, flags]`).
pub mod op_flag {
    pub const CREATE_ONLY: u64 = 1;
    pub const UPDATE_ONLY: u64 = 2;
    pub const ALLOW_DELETE: u64 = 4;
    pub const POLICY_NO_FAIL: u64 = 8;
    pub const EVAL_NO_FAIL: u64 = 16;
}

/// An expression op (EXP_READ 7, EXP_MODIFY 8): its expression and flags.
#[derive(Debug)]
pub struct ExpOp {
    pub expr: Expr,
    pub flags: u64,
}

/// Parses an expression op's value, the msgpack `[expression, flags?]`.
/// Flags a read or write does not have are a bad request.
pub fn parse_op(value: &[u8], modify: bool) -> Result<ExpOp, ResultCode> {
    let mut reader = Reader::new(value);
    let count = match reader.item() {
        Ok(Item::Array(count @ 1..=2)) => count,
        _ => return Err(ResultCode::Parameter),
    };
    let expr = parse(crate::cdt::value::next_item(&mut reader)?)?;
    let flags = if count == 2 {
        match reader.item() {
            Ok(Item::Int(flags)) if flags >= 0 => flags as u64,
            Ok(Item::Uint(flags)) => flags,
            _ => return Err(ResultCode::Parameter),
        }
    } else {
        0
    };
    let allowed = if modify {
        op_flag::CREATE_ONLY
            | op_flag::UPDATE_ONLY
            | op_flag::ALLOW_DELETE
            | op_flag::POLICY_NO_FAIL
            | op_flag::EVAL_NO_FAIL
    } else {
        op_flag::EVAL_NO_FAIL
    };
    if flags & !allowed != 0 || !reader.remaining().is_empty() {
        return Err(ResultCode::Parameter);
    }
    Ok(ExpOp { expr, flags })
}

/// What an expression op's expression evaluates to.
#[derive(Debug, PartialEq)]
pub enum Evaluated {
    /// It cannot be evaluated (a missing bin, mismatched types, `unknown`).
    Unknown,
    Nil,
    /// A bin value: particle type and stored bytes.
    Value(u8, Vec<u8>),
}

impl Evaluated {
    /// What an expression read answers: the value, `None` for nil (or,
    /// with EVAL_NO_FAIL, for a value that cannot be computed), or 26.
    pub fn read_answer(self, flags: u64) -> Result<Option<(u8, Vec<u8>)>, ResultCode> {
        match self {
            Evaluated::Value(particle_type, value) => Ok(Some((particle_type, value))),
            Evaluated::Unknown if flags & op_flag::EVAL_NO_FAIL == 0 => {
                Err(ResultCode::OpNotApplicable)
            }
            Evaluated::Unknown | Evaluated::Nil => Ok(None),
        }
    }
}

/// Evaluates an expression to a bin value.
pub fn evaluate(expr: &Expr, subject: &Subject<'_>) -> Evaluated {
    let (particle_type, bytes) = match eval(expr, subject, &mut Vec::new()) {
        Value::Unknown => return Evaluated::Unknown,
        Value::Nil => return Evaluated::Nil,
        Value::Bool(value) => (particle::BOOL, vec![u8::from(value)]),
        Value::Int(value) => (particle::INTEGER, value.to_be_bytes().to_vec()),
        Value::Float(value) => (particle::FLOAT, value.to_be_bytes().to_vec()),
        Value::Str(bytes) => (particle::STRING, bytes.into_owned()),
        Value::Blob(particle_type, bytes) => (particle_type, bytes.into_owned()),
        Value::Geo(text) => {
            let mut stored = vec![0, 0, 0];
            stored.extend_from_slice(text);
            (particle::GEOJSON, stored)
        }
        Value::Collection(particle_type, bytes) => (particle_type, bytes.into_owned()),
    };
    Evaluated::Value(particle_type, bytes)
}

/// Parses an expression; malformed input is PARAMETER, an unknown
/// operation UNSUPPORTED_FEATURE.
pub fn parse(bytes: &[u8]) -> Result<Expr, ResultCode> {
    let mut reader = Reader::new(bytes);
    let mut budget = NODES_MAX;
    let expr = parse_node(&mut reader, 0, &mut budget)?;
    if !reader.remaining().is_empty() {
        return Err(ResultCode::Parameter);
    }
    check_variables(&expr, &mut Vec::new())?;
    Ok(expr)
}

/// Every variable must be defined by an enclosing `let` (earlier
/// definitions of the same `let` count).
fn check_variables<'e>(expr: &'e Expr, scope: &mut Vec<&'e [u8]>) -> Result<(), ResultCode> {
    match expr {
        Expr::Var(name) if scope.iter().any(|defined| defined == name) => Ok(()),
        Expr::Var(_) => Err(ResultCode::Parameter),
        Expr::Let(definitions, body) => {
            let depth = scope.len();
            for (name, value) in definitions {
                check_variables(value, scope)?;
                scope.push(name);
            }
            let checked = check_variables(body, scope);
            scope.truncate(depth);
            checked
        }
        Expr::Compare(_, left, right) => {
            check_variables(left, scope)?;
            check_variables(right, scope)
        }
        Expr::Not(child) | Expr::Regex(_, child) => check_variables(child, scope),
        Expr::Geo(left, right) => [left, right].into_iter().try_for_each(|side| match side {
            GeoSide::Expr(expr) => check_variables(expr, scope),
            GeoSide::Shape(_) => Ok(()),
        }),
        Expr::Call { call, bin } => {
            check_variables(bin, scope)?;
            call.args.iter().try_for_each(|arg| match arg {
                CallArg::Expr(expr) => check_variables(expr, scope),
                CallArg::Value(_) => Ok(()),
            })
        }
        Expr::And(children)
        | Expr::Or(children)
        | Expr::Exclusive(children)
        | Expr::Arith(_, children)
        | Expr::Cond(children) => children
            .iter()
            .try_for_each(|child| check_variables(child, scope)),
        Expr::Literal(_)
        | Expr::Bin { .. }
        | Expr::BinType(_)
        | Expr::Key(_)
        | Expr::Meta(_)
        | Expr::DigestModulo(_) => Ok(()),
    }
}

/// A `let` name or `var` reference: a plain msgpack string.
fn variable_name(reader: &mut Reader<'_>) -> Result<Vec<u8>, ResultCode> {
    match reader.item().map_err(|_| ResultCode::Parameter)? {
        Item::Str(bytes) if !bytes.is_empty() => Ok(bytes.to_vec()),
        _ => Err(ResultCode::Parameter),
    }
}

/// The `system` of a CALL on a list or map (read only).
const CALL_SYSTEM_CDT: i64 = 0;

/// How many operands an arithmetic operator with a fixed count takes.
fn fixed_arity(op: i64) -> Option<u32> {
    match op {
        code::POW
        | code::LOG
        | code::MOD
        | code::INT_LSHIFT
        | code::INT_RSHIFT
        | code::INT_ARSHIFT => Some(2),
        code::ABS
        | code::FLOOR
        | code::CEIL
        | code::TO_INT
        | code::TO_FLOAT
        | code::INT_NOT
        | code::INT_COUNT => Some(1),
        _ => None,
    }
}

/// An arithmetic node. Literal operands of both number types are a bad
/// request, as the real server refuses them when compiling.
fn arith(op: i64, operands: Vec<Expr>) -> Result<Expr, ResultCode> {
    let has = |wanted: fn(&Literal) -> bool| {
        operands
            .iter()
            .any(|operand| matches!(operand, Expr::Literal(literal) if wanted(literal)))
    };
    let ints = has(|l| matches!(l, Literal::Int(_)));
    let floats = has(|l| matches!(l, Literal::Float(_)));
    let others = has(|l| !matches!(l, Literal::Int(_) | Literal::Float(_)));
    let shift = matches!(op, code::INT_LSHIFT | code::INT_RSHIFT | code::INT_ARSHIFT);
    if others || (ints && floats && !shift) {
        return Err(ResultCode::Parameter);
    }
    Ok(Expr::Arith(op, operands))
}

fn parse_node(
    reader: &mut Reader<'_>,
    depth: usize,
    budget: &mut usize,
) -> Result<Expr, ResultCode> {
    if depth > DEPTH_MAX || *budget == 0 {
        return Err(ResultCode::Parameter);
    }
    *budget -= 1;
    let before = reader.remaining();
    let item = reader.item().map_err(|_| ResultCode::Parameter)?;
    Ok(match item {
        Item::Nil => Expr::Literal(Literal::Nil),
        Item::Bool(value) => Expr::Literal(Literal::Bool(value)),
        Item::Int(value) => Expr::Literal(Literal::Int(value)),
        Item::Uint(value) => Expr::Literal(Literal::Int(value as i64)),
        Item::Float(value) => Expr::Literal(Literal::Float(value)),
        Item::Str(bytes) | Item::Bin(bytes) => Expr::Literal(particle_literal(bytes)?),
        Item::Array(count) => parse_call(reader, count, depth, budget)?,
        Item::Map(pairs) => {
            for _ in 0..u64::from(pairs) * 2 {
                reader.skip().map_err(|_| ResultCode::Parameter)?;
            }
            let used = before.len() - reader.remaining().len();
            Expr::Literal(Literal::Map(before[..used].to_vec()))
        }
        Item::Ext(..) => return Err(ResultCode::UnsupportedFeature),
    })
}

/// Strings and blobs carry their particle type in the first byte.
fn particle_literal(bytes: &[u8]) -> Result<Literal, ResultCode> {
    match bytes.split_first() {
        Some((&particle::STRING, rest)) => Ok(Literal::Str(rest.to_vec())),
        Some((&particle::GEOJSON, rest)) => Ok(Literal::Geo(rest.to_vec())),
        Some((&particle_type, rest)) if particle::is_blob(particle_type) => {
            Ok(Literal::Blob(particle_type, rest.to_vec()))
        }
        Some(_) => Err(ResultCode::UnsupportedFeature),
        None => Err(ResultCode::Parameter),
    }
}

/// The context marker of a CDT payload (`[0xff, context, [op, ...]]`).
const CDT_CONTEXT: i64 = 0xff;

/// A CALL's `[code, args...]` payload (or `[0xff, context, [code, args...]]`),
/// with each argument a literal or an expression.
fn call_payload(
    reader: &mut Reader<'_>,
    depth: usize,
    budget: &mut usize,
) -> Result<Call, ResultCode> {
    let start = reader.remaining();
    let Ok(Item::Array(count)) = reader.item() else {
        return Err(ResultCode::Parameter);
    };
    if count == 0 {
        return Err(ResultCode::Parameter);
    }
    let code = reader.int().map_err(|_| ResultCode::Parameter)?;
    let arguments = if code == CDT_CONTEXT {
        if count != 3 {
            return Err(ResultCode::Parameter);
        }
        // The context goes to the CDT code as it is.
        reader.skip().map_err(|_| ResultCode::Parameter)?;
        let Ok(Item::Array(op_count)) = reader.item() else {
            return Err(ResultCode::Parameter);
        };
        if op_count == 0 {
            return Err(ResultCode::Parameter);
        }
        reader.int().map_err(|_| ResultCode::Parameter)?;
        op_count - 1
    } else {
        count - 1
    };
    if arguments > crate::cdt::ARGS_MAX {
        return Err(ResultCode::Parameter);
    }
    let head = start[..start.len() - reader.remaining().len()].to_vec();
    let mut args = Vec::new();
    for _ in 0..arguments {
        let raw = crate::cdt::value::next_item(reader)?;
        let mut peek = Reader::new(raw);
        let arg = match peek.item() {
            Ok(Item::Array(2)) if peek.clone().int() == Ok(code::QUOTED) => {
                peek.int().map_err(|_| ResultCode::Parameter)?;
                CallArg::Value(crate::cdt::value::next_item(&mut peek)?.to_vec())
            }
            Ok(Item::Array(_)) => {
                CallArg::Expr(parse_node(&mut Reader::new(raw), depth + 1, budget)?)
            }
            _ => CallArg::Value(raw.to_vec()),
        };
        args.push(arg);
    }
    let fixed = args
        .iter()
        .all(|arg| matches!(arg, CallArg::Value(_)))
        .then(|| {
            let mut payload = head.clone();
            for arg in &args {
                if let CallArg::Value(bytes) = arg {
                    payload.extend_from_slice(bytes);
                }
            }
            payload
        });
    Ok(Call { fixed, head, args })
}

fn parse_call(
    reader: &mut Reader<'_>,
    count: u32,
    depth: usize,
    budget: &mut usize,
) -> Result<Expr, ResultCode> {
    if count == 0 {
        return Err(ResultCode::Parameter);
    }
    let op = reader.int().map_err(|_| ResultCode::Parameter)?;
    let arguments = count - 1;
    let children =
        |n: u32, reader: &mut Reader<'_>, budget: &mut usize| -> Result<Vec<Expr>, ResultCode> {
            (0..n)
                .map(|_| parse_node(reader, depth + 1, budget))
                .collect()
        };
    let expect = |n: u32| {
        if arguments == n {
            Ok(())
        } else {
            Err(ResultCode::Parameter)
        }
    };
    Ok(match op {
        code::EQ..=code::LE => {
            expect(2)?;
            let mut pair = children(2, reader, budget)?;
            let right = pair.pop().ok_or(ResultCode::Parameter)?;
            let left = pair.pop().ok_or(ResultCode::Parameter)?;
            check_types(&left, &right)?;
            Expr::Compare(op, Box::new(left), Box::new(right))
        }
        code::AND => Expr::And(children(arguments, reader, budget)?),
        code::OR => Expr::Or(children(arguments, reader, budget)?),
        code::EXCLUSIVE => Expr::Exclusive(children(arguments, reader, budget)?),
        code::NOT => {
            expect(1)?;
            Expr::Not(Box::new(
                children(1, reader, budget)?
                    .pop()
                    .ok_or(ResultCode::Parameter)?,
            ))
        }
        code::CMP_REGEX => {
            expect(3)?;
            let flags = reader.int().map_err(|_| ResultCode::Parameter)?;
            let pattern = match reader.item().map_err(|_| ResultCode::Parameter)? {
                Item::Str(bytes) => bytes,
                _ => return Err(ResultCode::Parameter),
            };
            let regex = PosixRegex::compile(pattern, flags)?;
            let subject = children(1, reader, budget)?
                .pop()
                .ok_or(ResultCode::Parameter)?;
            Expr::Regex(regex, Box::new(subject))
        }
        code::ADD
        | code::SUB
        | code::MUL
        | code::DIV
        | code::INT_AND
        | code::INT_OR
        | code::INT_XOR
        | code::MIN
        | code::MAX => {
            if arguments == 0 {
                return Err(ResultCode::Parameter);
            }
            arith(op, children(arguments, reader, budget)?)?
        }
        code::INT_LSCAN | code::INT_RSCAN => {
            // [value, bit to look for]
            expect(2)?;
            Expr::Arith(op, children(2, reader, budget)?)
        }
        _ if fixed_arity(op).is_some() => {
            let operands = fixed_arity(op).unwrap_or(1);
            expect(operands)?;
            arith(op, children(operands, reader, budget)?)?
        }
        code::COND => {
            if arguments < 3 || arguments.is_multiple_of(2) {
                return Err(ResultCode::Parameter);
            }
            Expr::Cond(children(arguments, reader, budget)?)
        }
        code::LET => {
            if arguments < 3 || arguments.is_multiple_of(2) {
                return Err(ResultCode::Parameter);
            }
            let mut definitions = Vec::new();
            for _ in 0..arguments / 2 {
                let name = variable_name(reader)?;
                let value = children(1, reader, budget)?
                    .pop()
                    .ok_or(ResultCode::Parameter)?;
                definitions.push((name, value));
            }
            let scope = children(1, reader, budget)?
                .pop()
                .ok_or(ResultCode::Parameter)?;
            Expr::Let(definitions, Box::new(scope))
        }
        code::VAR => {
            expect(1)?;
            Expr::Var(variable_name(reader)?)
        }
        code::CALL => {
            // [127, result type, system, payload, bin]
            expect(4)?;
            reader.int().map_err(|_| ResultCode::Parameter)?;
            let system = reader.int().map_err(|_| ResultCode::Parameter)?;
            if system != CALL_SYSTEM_CDT {
                // Bit and HyperLogLog calls, and modifying calls.
                return Err(ResultCode::UnsupportedFeature);
            }
            let call = call_payload(reader, depth, budget)?;
            let bin = children(1, reader, budget)?
                .pop()
                .ok_or(ResultCode::Parameter)?;
            Expr::Call {
                call,
                bin: Box::new(bin),
            }
        }
        code::UNKNOWN => {
            expect(0)?;
            Expr::Literal(Literal::Unknown)
        }
        code::QUOTED => {
            expect(1)?;
            let quoted = crate::cdt::value::next_item(reader)?;
            match crate::cdt::value::container_kind(quoted) {
                Some(true) => Expr::Literal(Literal::List(quoted.to_vec())),
                Some(false) => Expr::Literal(Literal::Map(quoted.to_vec())),
                None => parse_node(&mut Reader::new(quoted), depth + 1, budget)?,
            }
        }
        code::CMP_GEO => {
            expect(2)?;
            let mut pair = children(2, reader, budget)?;
            let right = pair.pop().ok_or(ResultCode::Parameter)?;
            let left = pair.pop().ok_or(ResultCode::Parameter)?;
            Expr::Geo(GeoSide::new(left)?, GeoSide::new(right)?)
        }
        code::DIGEST_MODULO => {
            expect(1)?;
            let modulus = reader.int().map_err(|_| ResultCode::Parameter)?;
            if modulus <= 0 {
                return Err(ResultCode::Parameter);
            }
            Expr::DigestModulo(modulus)
        }
        code::DEVICE_SIZE
        | code::LAST_UPDATE
        | code::SINCE_UPDATE
        | code::VOID_TIME
        | code::TTL
        | code::SET_NAME
        | code::KEY_EXISTS
        | code::IS_TOMBSTONE
        | code::MEMORY_SIZE
        | code::RECORD_SIZE => {
            expect(0)?;
            Expr::Meta(op)
        }
        code::KEY => {
            expect(1)?;
            Expr::Key(reader.int().map_err(|_| ResultCode::Parameter)?)
        }
        code::BIN => {
            expect(2)?;
            let kind = reader.int().map_err(|_| ResultCode::Parameter)?;
            Expr::Bin {
                name: name(reader)?,
                kind,
            }
        }
        code::BIN_TYPE => {
            expect(1)?;
            Expr::BinType(name(reader)?)
        }
        _ => return Err(ResultCode::UnsupportedFeature),
    })
}

/// A comparison of a typed bin with a literal of another type is a bad
/// request (the real server refuses it when compiling the expression).
fn check_types(left: &Expr, right: &Expr) -> Result<(), ResultCode> {
    let kind_of_literal = |expr: &Expr| match expr {
        Expr::Literal(Literal::Nil) => Some(kind::NIL),
        Expr::Literal(Literal::Bool(_)) => Some(kind::BOOL),
        Expr::Literal(Literal::Int(_)) => Some(kind::INT),
        Expr::Literal(Literal::Float(_)) => Some(kind::FLOAT),
        Expr::Literal(Literal::Str(_)) => Some(kind::STRING),
        Expr::Literal(Literal::Blob(..)) => Some(kind::BLOB),
        Expr::Literal(Literal::Geo(_)) => Some(kind::GEO),
        Expr::Literal(Literal::List(_)) => Some(kind::LIST),
        Expr::Literal(Literal::Map(_)) => Some(kind::MAP),
        _ => None,
    };
    let kind_of_bin = |expr: &Expr| match expr {
        Expr::Bin { kind, .. } => Some(*kind),
        _ => None,
    };
    for (bin, literal) in [(left, right), (right, left)] {
        if let (Some(bin_kind), Some(literal_kind)) = (kind_of_bin(bin), kind_of_literal(literal)) {
            if bin_kind != literal_kind && literal_kind != kind::NIL {
                return Err(ResultCode::Parameter);
            }
        }
    }
    Ok(())
}

fn name(reader: &mut Reader<'_>) -> Result<Vec<u8>, ResultCode> {
    match reader.item().map_err(|_| ResultCode::Parameter)? {
        Item::Str(bytes) if bytes.len() <= bolide_types::BIN_NAME_BYTES_MAX => Ok(bytes.to_vec()),
        Item::Str(_) => Err(ResultCode::BinName),
        _ => Err(ResultCode::Parameter),
    }
}

/// Whether `subject` passes the filter.
pub fn passes(expr: &Expr, subject: &Subject<'_>) -> bool {
    eval(expr, subject, &mut Vec::new()) == Value::Bool(true)
}

/// Variables bound by enclosing `let`s, innermost last.
type Env<'v> = Vec<(&'v [u8], Value<'v>)>;

fn eval<'v>(expr: &'v Expr, subject: &'v Subject<'v>, env: &mut Env<'v>) -> Value<'v> {
    match expr {
        Expr::Literal(literal) => match literal {
            Literal::Nil => Value::Nil,
            Literal::Bool(value) => Value::Bool(*value),
            Literal::Int(value) => Value::Int(*value),
            Literal::Float(value) => Value::Float(*value),
            Literal::Str(bytes) => Value::Str(Cow::Borrowed(bytes)),
            Literal::Blob(particle_type, bytes) => {
                Value::Blob(*particle_type, Cow::Borrowed(bytes))
            }
            Literal::Geo(text) => Value::Geo(text),
            Literal::List(bytes) => Value::Collection(particle::LIST, Cow::Borrowed(bytes)),
            Literal::Map(bytes) => Value::Collection(particle::MAP, Cow::Borrowed(bytes)),
            Literal::Unknown => Value::Unknown,
        },
        Expr::Call { call, bin } => {
            let Value::Collection(particle_type, bytes) = eval(bin, subject, env) else {
                return Value::Unknown;
            };
            let payload = match &call.fixed {
                Some(payload) => Cow::Borrowed(payload.as_slice()),
                None => {
                    let mut payload = call.head.clone();
                    for arg in &call.args {
                        match arg {
                            CallArg::Value(bytes) => payload.extend_from_slice(bytes),
                            CallArg::Expr(expr) => {
                                if !pack(&eval(expr, subject, env), &mut payload) {
                                    return Value::Unknown;
                                }
                            }
                        }
                    }
                    Cow::Owned(payload)
                }
            };
            match crate::cdt::execute(Some((particle_type, &bytes)), &payload, false) {
                Ok(outcome) => call_result(outcome.result),
                Err(_) => Value::Unknown,
            }
        }
        Expr::Geo(left, right) => match (
            geo_shape(left, subject, env),
            geo_shape(right, subject, env),
        ) {
            (Some(a), Some(b)) => Value::Bool(crate::geo::point_in_region(&a, &b)),
            _ => Value::Unknown,
        },
        Expr::Compare(op, left, right) => {
            let left = eval(left, subject, env);
            compare(*op, left, eval(right, subject, env))
        }
        Expr::And(children) => logic(children, subject, env, false),
        Expr::Or(children) => logic(children, subject, env, true),
        Expr::Not(child) => match eval(child, subject, env) {
            Value::Bool(value) => Value::Bool(!value),
            _ => Value::Unknown,
        },
        Expr::Exclusive(children) => {
            let mut trues = 0;
            for child in children {
                match eval(child, subject, env) {
                    Value::Bool(true) => trues += 1,
                    Value::Bool(false) => {}
                    _ => return Value::Unknown,
                }
            }
            Value::Bool(trues == 1)
        }
        Expr::Bin { name, kind } => bin_value(subject, name, *kind),
        Expr::Regex(regex, string) => match eval(string, subject, env) {
            Value::Str(bytes) => Value::Bool(regex.is_match(&bytes)),
            _ => Value::Unknown,
        },
        Expr::Arith(op, operands) => {
            let values: Vec<Value<'v>> = operands
                .iter()
                .map(|operand| eval(operand, subject, env))
                .collect();
            arithmetic(*op, &values)
        }
        Expr::Cond(parts) => {
            let mut pairs = parts.chunks_exact(2);
            for pair in pairs.by_ref() {
                match eval(&pair[0], subject, env) {
                    Value::Bool(true) => return eval(&pair[1], subject, env),
                    Value::Bool(false) => {}
                    _ => return Value::Unknown,
                }
            }
            match pairs.remainder() {
                [default] => eval(default, subject, env),
                _ => Value::Unknown,
            }
        }
        Expr::Let(definitions, body) => {
            let depth = env.len();
            for (name, value) in definitions {
                let value = eval(value, subject, env);
                env.push((name, value));
            }
            let result = eval(body, subject, env);
            env.truncate(depth);
            result
        }
        Expr::Var(name) => env
            .iter()
            .rev()
            .find(|(defined, _)| *defined == name.as_slice())
            .map_or(Value::Unknown, |(_, value)| value.clone()),
        Expr::BinType(name) => Value::Int(
            subject
                .bins
                .get(name)
                .map_or(i64::from(particle::NULL), |(particle_type, _)| {
                    i64::from(particle_type)
                }),
        ),
        Expr::Key(kind) => match subject.key {
            Some((key_type, bytes)) => typed(key_type, bytes, *kind),
            None => Value::Unknown,
        },
        Expr::Meta(op) => meta(*op, subject),
        Expr::DigestModulo(modulus) => {
            // The last four digest bytes as a big-endian number: the Python
            // client's own test expects `digest_modulo(256)` to be the last
            // digest byte.
            let mut four = [0u8; 4];
            four.copy_from_slice(&subject.digest.0[16..20]);
            Value::Int(i64::from(u32::from_be_bytes(four)) % modulus)
        }
    }
}

/// A geo side's shape: the literal's, or the GeoJSON its expression gives.
fn geo_shape<'v>(
    side: &'v GeoSide,
    subject: &'v Subject<'v>,
    env: &mut Env<'v>,
) -> Option<Cow<'v, crate::geo::Shape>> {
    match side {
        GeoSide::Shape(shape) => Some(Cow::Borrowed(shape)),
        GeoSide::Expr(expr) => match eval(expr, subject, env) {
            Value::Geo(text) => crate::geo::Shape::parse(text).map(Cow::Owned),
            _ => None,
        },
    }
}

fn logic<'v>(
    children: &'v [Expr],
    subject: &'v Subject<'v>,
    env: &mut Env<'v>,
    any: bool,
) -> Value<'v> {
    let mut unknown = false;
    for child in children {
        match eval(child, subject, env) {
            Value::Bool(value) if value == any => return Value::Bool(any),
            Value::Bool(_) => {}
            _ => unknown = true,
        }
    }
    if unknown {
        Value::Unknown
    } else {
        Value::Bool(!any)
    }
}

/// Applies an arithmetic or bitwise operator. Operands must all be
/// integers or all floats (as the operator allows); anything else, a
/// division by zero, an overflow or a shift outside 0..64 is unknown.
fn arithmetic(op: i64, values: &[Value<'_>]) -> Value<'static> {
    // Bit scans: the index (0 = most significant) of the first bit equal
    // to the one looked for, from the left or from the right; -1 if none.
    if let (code::INT_LSCAN | code::INT_RSCAN, [Value::Int(x), Value::Bool(bit)]) = (op, values) {
        let x = if *bit { *x } else { !*x };
        if x == 0 {
            return Value::Int(-1);
        }
        return Value::Int(if op == code::INT_LSCAN {
            i64::from(x.leading_zeros())
        } else {
            63 - i64::from(x.trailing_zeros())
        });
    }
    // All operands as one number type, if they are.
    let ints: Option<Vec<i64>> = values.iter().map(Value::as_int).collect();
    let floats: Option<Vec<f64>> = values.iter().map(Value::as_float).collect();
    let int = |value: Option<i64>| value.map_or(Value::Unknown, Value::Int);
    let float = |value: f64| {
        if value.is_nan() {
            Value::Unknown
        } else {
            Value::Float(value)
        }
    };
    let fold_int = |ints: &[i64], step: fn(i64, i64) -> Option<i64>| {
        let (first, rest) = ints.split_first()?;
        rest.iter().try_fold(*first, |acc, &x| step(acc, x))
    };
    let fold_float = |floats: &[f64], step: fn(f64, f64) -> f64| {
        floats
            .split_first()
            .map_or(Value::Unknown, |(first, rest)| {
                float(rest.iter().fold(*first, |acc, &x| step(acc, x)))
            })
    };
    match (op, ints.as_deref(), floats.as_deref()) {
        (code::ADD, Some(i), _) => int(fold_int(i, i64::checked_add)),
        (code::ADD, _, Some(f)) => fold_float(f, |a, b| a + b),
        (code::SUB, Some([x]), _) => int(x.checked_neg()),
        (code::SUB, _, Some([x])) => float(-x),
        (code::SUB, Some(i), _) => int(fold_int(i, i64::checked_sub)),
        (code::SUB, _, Some(f)) => fold_float(f, |a, b| a - b),
        (code::MUL, Some(i), _) => int(fold_int(i, i64::checked_mul)),
        (code::MUL, _, Some(f)) => fold_float(f, |a, b| a * b),
        (code::DIV, Some([x]), _) => int(1i64.checked_div(*x)),
        (code::DIV, _, Some([x])) => float(1.0 / x),
        (code::DIV, Some(i), _) => int(fold_int(i, i64::checked_div)),
        (code::DIV, _, Some(f)) => fold_float(f, |a, b| a / b),
        (code::POW, _, Some([base, exponent])) => float(base.powf(*exponent)),
        (code::LOG, _, Some([x, base])) => float(x.ln() / base.ln()),
        (code::MOD, Some([a, b]), _) => int(a.checked_rem(*b)),
        (code::ABS, Some([x]), _) => int(x.checked_abs()),
        (code::ABS, _, Some([x])) => float(x.abs()),
        (code::FLOOR, _, Some([x])) => float(x.floor()),
        (code::CEIL, _, Some([x])) => float(x.ceil()),
        (code::TO_INT, _, Some([x])) => {
            let truncated = x.trunc();
            if truncated.is_finite() && truncated >= i64::MIN as f64 && truncated < i64::MAX as f64
            {
                Value::Int(truncated as i64)
            } else {
                Value::Unknown
            }
        }
        (code::TO_FLOAT, Some([x]), _) => Value::Float(*x as f64),
        (code::INT_AND, Some(i), _) => int(fold_int(i, |a, b| Some(a & b))),
        (code::INT_OR, Some(i), _) => int(fold_int(i, |a, b| Some(a | b))),
        (code::INT_XOR, Some(i), _) => int(fold_int(i, |a, b| Some(a ^ b))),
        (code::INT_NOT, Some([x]), _) => Value::Int(!x),
        (code::INT_LSHIFT, Some([x, shift]), _) if (0..64).contains(shift) => {
            Value::Int(x << shift)
        }
        (code::INT_RSHIFT, Some([x, shift]), _) if (0..64).contains(shift) => {
            Value::Int(((*x as u64) >> shift) as i64)
        }
        (code::INT_ARSHIFT, Some([x, shift]), _) if (0..64).contains(shift) => {
            Value::Int(x >> shift)
        }
        (code::INT_COUNT, Some([x]), _) => Value::Int(i64::from(x.count_ones())),
        (code::MIN, Some(i), _) => int(i.iter().min().copied()),
        (code::MIN, _, Some(f)) => fold_float(f, f64::min),
        (code::MAX, Some(i), _) => int(i.iter().max().copied()),
        (code::MAX, _, Some(f)) => fold_float(f, f64::max),
        _ => Value::Unknown,
    }
}

fn compare(op: i64, left: Value<'_>, right: Value<'_>) -> Value<'static> {
    use std::cmp::Ordering;
    let ordering = match (left, right) {
        (Value::Int(a), Value::Int(b)) => a.cmp(&b),
        (Value::Float(a), Value::Float(b)) => match a.partial_cmp(&b) {
            Some(ordering) => ordering,
            None => return Value::Unknown,
        },
        (Value::Str(a), Value::Str(b)) | (Value::Blob(_, a), Value::Blob(_, b)) => a.cmp(&b),
        (Value::Bool(a), Value::Bool(b)) => a.cmp(&b),
        (Value::Nil, Value::Nil) => Ordering::Equal,
        (Value::Collection(a_type, a), Value::Collection(b_type, b)) => {
            match compare_collections(a_type, &a, b_type, &b) {
                Some(ordering) => ordering,
                None => return Value::Unknown,
            }
        }
        _ => return Value::Unknown,
    };
    Value::Bool(match op {
        code::EQ => ordering == Ordering::Equal,
        code::NE => ordering != Ordering::Equal,
        code::GT => ordering == Ordering::Greater,
        code::GE => ordering != Ordering::Less,
        code::LT => ordering == Ordering::Less,
        _ => ordering != Ordering::Greater,
    })
}

/// Lists compare element by element (Aerospike's value order); two maps
/// compare with their top-level pairs in key order, so the order a map was
/// written in does not matter.
fn compare_collections(a_type: u8, a: &[u8], b_type: u8, b: &[u8]) -> Option<std::cmp::Ordering> {
    use crate::cdt::value::{compare, encode_pairs, Map};
    if a_type == particle::MAP && b_type == particle::MAP {
        let sorted = |bytes: &[u8]| -> Option<Vec<u8>> {
            let mut map = Map::parse(bytes).ok()?;
            let mut failed = false;
            map.pairs.sort_by(|x, y| {
                compare(&x.0, &y.0).unwrap_or_else(|_| {
                    failed = true;
                    std::cmp::Ordering::Equal
                })
            });
            (!failed)
                .then(|| encode_pairs(0, map.pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))))
        };
        return compare(&sorted(a)?, &sorted(b)?).ok();
    }
    compare(a, b).ok()
}

fn bin_value<'v>(subject: &'v Subject<'v>, name: &[u8], kind: i64) -> Value<'v> {
    match subject.bins.get(name) {
        Some((particle_type, value)) => typed(particle_type, value, kind),
        None => Value::Unknown,
    }
}

/// A value as a CDT op's argument (msgpack, strings and blobs with their
/// particle type first); false for unknown.
fn pack(value: &Value<'_>, out: &mut Vec<u8>) -> bool {
    use crate::cdt::value::{float_bytes, write_int, write_typed_bytes, Raw};
    match value {
        Value::Unknown => return false,
        Value::Nil => out.push(0xc0),
        Value::Bool(value) => out.push(if *value { 0xc3 } else { 0xc2 }),
        Value::Int(value) => write_int(out, *value),
        Value::Float(value) => out.extend_from_slice(&float_bytes(*value)),
        Value::Str(bytes) => write_typed_bytes(out, Raw::Str, particle::STRING, bytes),
        Value::Blob(particle_type, bytes) => {
            write_typed_bytes(out, Raw::Bin, *particle_type, bytes)
        }
        Value::Geo(text) => write_typed_bytes(out, Raw::Str, particle::GEOJSON, text),
        Value::Collection(_, bytes) => out.extend_from_slice(bytes),
    }
    true
}

/// A list or map op's result as a value.
fn call_result(result: Option<(u8, Vec<u8>)>) -> Value<'static> {
    match result {
        None => Value::Nil,
        Some((particle::INTEGER, bytes)) => bytes
            .as_slice()
            .try_into()
            .map_or(Value::Unknown, |b| Value::Int(i64::from_be_bytes(b))),
        Some((particle::FLOAT, bytes)) => bytes
            .as_slice()
            .try_into()
            .map_or(Value::Unknown, |b| Value::Float(f64::from_be_bytes(b))),
        Some((particle::BOOL, bytes)) => Value::Bool(bytes.first().is_some_and(|&b| b != 0)),
        Some((particle::NULL, _)) => Value::Nil,
        Some((particle::STRING, bytes)) => Value::Str(Cow::Owned(bytes)),
        Some((particle_type, bytes)) if particle::is_blob(particle_type) => {
            Value::Blob(particle_type, Cow::Owned(bytes))
        }
        Some((particle_type @ (particle::LIST | particle::MAP), bytes)) => {
            Value::Collection(particle_type, Cow::Owned(bytes))
        }
        Some(_) => Value::Unknown,
    }
}

/// A stored value as the expression type asks for it; a mismatch is unknown.
fn typed(particle_type: u8, bytes: &[u8], kind: i64) -> Value<'_> {
    match (kind, particle_type) {
        (kind::INT, particle::INTEGER) => bytes
            .try_into()
            .map_or(Value::Unknown, |b| Value::Int(i64::from_be_bytes(b))),
        (kind::FLOAT, particle::FLOAT) => bytes
            .try_into()
            .map_or(Value::Unknown, |b| Value::Float(f64::from_be_bytes(b))),
        (kind::STRING, particle::STRING) => Value::Str(Cow::Borrowed(bytes)),
        (kind::LIST, particle::LIST) | (kind::MAP, particle::MAP) => {
            Value::Collection(particle_type, Cow::Borrowed(bytes))
        }
        (kind::GEO, particle::GEOJSON) => {
            crate::geo::stored_text(bytes).map_or(Value::Unknown, Value::Geo)
        }
        (kind::BLOB, p) if particle::is_blob(p) => Value::Blob(p, Cow::Borrowed(bytes)),
        (kind::BOOL, particle::BOOL) => Value::Bool(bytes.first().is_some_and(|&b| b != 0)),
        (kind::NIL, _) => Value::Nil,
        _ => Value::Unknown,
    }
}

fn meta<'v>(op: i64, subject: &'v Subject<'v>) -> Value<'v> {
    let meta = subject.meta;
    let epoch_ms = CITRUSLEAF_EPOCH_UNIX_SECONDS * 1000;
    match op {
        code::LAST_UPDATE => Value::Int(((meta.last_update_ms + epoch_ms) * 1_000_000) as i64),
        code::SINCE_UPDATE => Value::Int(subject.now_ms.saturating_sub(meta.last_update_ms) as i64),
        code::VOID_TIME => match meta.void_time {
            0 => Value::Int(-1),
            void => Value::Int(
                ((u64::from(void) + CITRUSLEAF_EPOCH_UNIX_SECONDS) * 1_000_000_000) as i64,
            ),
        },
        code::TTL => match meta.void_time {
            0 => Value::Int(-1),
            void => Value::Int(i64::from(void) - (subject.now_ms / 1000) as i64),
        },
        code::SET_NAME => Value::Str(Cow::Borrowed(subject.set_name.unwrap_or("").as_bytes())),
        code::KEY_EXISTS => Value::Bool(subject.key.is_some()),
        code::IS_TOMBSTONE => Value::Bool(false),
        code::RECORD_SIZE | code::MEMORY_SIZE => Value::Int(subject.record_bytes as i64),
        code::DEVICE_SIZE => Value::Int(0),
        _ => Value::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_edges_are_unknown_not_wrong() {
        use Value::{Float, Int, Unknown};
        assert_eq!(arithmetic(code::ADD, &[Int(i64::MAX), Int(1)]), Unknown);
        assert_eq!(arithmetic(code::SUB, &[Int(i64::MIN)]), Unknown);
        assert_eq!(arithmetic(code::DIV, &[Int(i64::MIN), Int(-1)]), Unknown);
        assert_eq!(arithmetic(code::MOD, &[Int(5), Int(0)]), Unknown);
        assert_eq!(arithmetic(code::DIV, &[Int(-7), Int(2)]), Int(-3));
        assert_eq!(arithmetic(code::MOD, &[Int(-7), Int(2)]), Int(-1));
        assert_eq!(arithmetic(code::INT_LSHIFT, &[Int(1), Int(64)]), Unknown);
        assert_eq!(arithmetic(code::INT_RSHIFT, &[Int(-1), Int(60)]), Int(15));
        assert_eq!(arithmetic(code::INT_ARSHIFT, &[Int(-16), Int(2)]), Int(-4));
        assert_eq!(arithmetic(code::TO_INT, &[Float(f64::NAN)]), Unknown);
        assert_eq!(arithmetic(code::TO_INT, &[Float(1e300)]), Unknown);
        assert_eq!(arithmetic(code::TO_INT, &[Float(-2.7)]), Int(-2));
        assert_eq!(arithmetic(code::LOG, &[Float(8.0), Float(2.0)]), Float(3.0));
        assert_eq!(arithmetic(code::ADD, &[Int(1), Float(2.0)]), Unknown);
        use Value::Bool;
        assert_eq!(arithmetic(code::INT_LSCAN, &[Int(1), Bool(true)]), Int(63));
        assert_eq!(
            arithmetic(code::INT_LSCAN, &[Int(-1), Bool(false)]),
            Int(-1)
        );
        assert_eq!(
            arithmetic(code::INT_LSCAN, &[Int(i64::MAX), Bool(false)]),
            Int(0)
        );
        assert_eq!(
            arithmetic(code::INT_RSCAN, &[Int(0b1010), Bool(true)]),
            Int(62)
        );
        assert_eq!(arithmetic(code::INT_RSCAN, &[Int(0), Bool(true)]), Int(-1));
        assert_eq!(
            arithmetic(code::INT_RSCAN, &[Int(0b0111), Bool(false)]),
            Int(60)
        );
    }

    #[test]
    fn posix_patterns_translate_to_the_regex_crate() {
        // Basic syntax swaps the meaning of escaped and bare operators.
        assert_eq!(translate_posix(r"a+b\(c\)\{2\}", false), r"a\+b(c){2}");
        assert_eq!(translate_posix(r"x|y?", false), r"x\|y\?");
        // A `*` with nothing before it is a literal in basic syntax.
        assert_eq!(translate_posix(r"*a\(*b\)", false), r"\*a(\*b)");
        assert_eq!(translate_posix(r"^*x*", false), r"^\*x*");
        assert_eq!(translate_posix(r"a^b$c$", false), r"a\^b\$c$");
        assert_eq!(translate_posix(r"\(a$\)b", false), r"(a$)b");
        // Extended syntax passes through.
        assert_eq!(translate_posix(r"(a|b)+\.", true), r"(a|b)+\.");
        // In a bracket list a backslash is literal, and so is a leading ].
        assert_eq!(translate_posix(r"[\]", true), r"[\\]");
        assert_eq!(translate_posix(r"[]a]", true), r"[\]a]");
        assert_eq!(translate_posix(r"[^[:digit:]x]", false), r"[^[:digit:]x]");
        let regex = PosixRegex::compile(br"^[[:alpha:]]\{3\}$", 0).expect("compiles");
        assert!(regex.is_match(b"abc") && !regex.is_match(b"abcd"));
        let icase = PosixRegex::compile(b"^ABC", regex_flag::ICASE).expect("compiles");
        assert!(icase.is_match(b"abcdef"));
        assert_eq!(
            PosixRegex::compile(b"(open", regex_flag::EXTENDED).err(),
            Some(ResultCode::Parameter)
        );
        assert_eq!(
            PosixRegex::compile(b"a{100000}{100000}", regex_flag::EXTENDED).err(),
            Some(ResultCode::Parameter)
        );
    }

    /// [op, [81, 2, "n"], 5] packed by hand.
    fn int_bin_compare(op: u8, value: u8) -> Vec<u8> {
        vec![0x93, op, 0x93, 0x51, 0x02, 0xa1, b'n', value]
    }

    fn subject_with<'r>(
        record: &'r RecordView<'r>,
        meta: &'r RecordMeta,
        digest: &'r Digest,
    ) -> Subject<'r> {
        Subject {
            digest,
            meta,
            bins: Bins::Stored(record),
            key: record.key,
            record_bytes: 30,
            set_name: Some("demo"),
            now_ms: 1_000_000,
        }
    }

    #[test]
    fn compares_integer_bins() {
        let mut bytes = Vec::new();
        bolide_store::record::encode(
            &mut bytes,
            None,
            [bolide_store::Bin {
                name: b"n",
                particle_type: particle::INTEGER,
                value: &7i64.to_be_bytes(),
            }]
            .into_iter(),
        );
        let record = RecordView::parse(&bytes).expect("record");
        let meta = RecordMeta {
            generation: 1,
            ..RecordMeta::default()
        };
        let digest = Digest([0; 20]);
        let subject = subject_with(&record, &meta, &digest);
        assert!(passes(
            &parse(&int_bin_compare(3, 5)).expect("gt"),
            &subject
        ));
        assert!(!passes(
            &parse(&int_bin_compare(5, 5)).expect("lt"),
            &subject
        ));
        assert!(passes(
            &parse(&int_bin_compare(1, 7)).expect("eq"),
            &subject
        ));
        // A missing bin is unknown: filtered out under both EQ and NOT(EQ).
        let missing = vec![0x93, 0x01, 0x93, 0x51, 0x02, 0xa1, b'x', 0x07];
        assert!(!passes(&parse(&missing).expect("eq"), &subject));
        let mut negated = vec![0x92, 0x12];
        negated.extend_from_slice(&missing);
        assert!(!passes(&parse(&negated).expect("not"), &subject));
        // and(true-ish, false) is false; or is true.
        let mut and = vec![0x93, 0x10];
        and.extend(int_bin_compare(3, 5));
        and.extend(int_bin_compare(5, 5));
        assert!(!passes(&parse(&and).expect("and"), &subject));
        and[1] = 0x11;
        assert!(passes(&parse(&and).expect("or"), &subject));
    }

    #[test]
    fn typed_bytes_use_the_smallest_msgpack_header() {
        use crate::cdt::value::{write_typed_bytes, Raw};
        let header = |raw, len: usize| {
            let mut out = Vec::new();
            write_typed_bytes(&mut out, raw, particle::STRING, &vec![b'x'; len]);
            let mut reader = Reader::new(&out);
            match reader.item() {
                Ok(Item::Str(bytes) | Item::Bin(bytes)) => assert_eq!(bytes.len(), len + 1),
                other => panic!("{other:?}"),
            }
            out[0]
        };
        assert_eq!(header(Raw::Str, 3), 0xa4);
        assert_eq!(header(Raw::Str, 31), 0xd9);
        assert_eq!(header(Raw::Str, 300), 0xda);
        assert_eq!(header(Raw::Str, 70_000), 0xdb);
        assert_eq!(header(Raw::Bin, 3), 0xc4);
        assert_eq!(header(Raw::Bin, 300), 0xc5);
        assert_eq!(header(Raw::Bin, 70_000), 0xc6);
    }

    #[test]
    fn rejects_garbage_and_unknown_ops() {
        assert_eq!(parse(&[0x91, 0x60]), Err(ResultCode::UnsupportedFeature));
        // A CALL needs its four operands.
        assert_eq!(parse(&[0x91, 0x7f]), Err(ResultCode::Parameter));
        assert_eq!(parse(&[0x93, 0x01]), Err(ResultCode::Parameter));
        assert_eq!(parse(&[]), Err(ResultCode::Parameter));
        assert_eq!(parse(&[0x91; 100]), Err(ResultCode::Parameter));
    }

    // Hostile expressions: every operator with plausible and implausible
    // operands, evaluated against records of every bin type. Parsing may
    // refuse them; nothing may panic, loop or blow the stack.

    fn pack_array(items: &[Vec<u8>]) -> Vec<u8> {
        crate::cdt::value::encode_items(items.iter().map(Vec::as_slice))
    }

    fn pack_int(value: i64) -> Vec<u8> {
        crate::cdt::value::int_bytes(value)
    }

    fn pack_str(bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![0xd9, bytes.len().min(255) as u8];
        out.extend_from_slice(&bytes[..bytes.len().min(255)]);
        out
    }

    fn particle_str(particle_type: u8, text: &[u8]) -> Vec<u8> {
        let mut bytes = vec![particle_type];
        bytes.extend_from_slice(text);
        pack_str(&bytes)
    }

    fn expression() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let bin_names = prop_oneof![
            Just(b"n".to_vec()),
            Just(b"s".to_vec()),
            Just(b"f".to_vec()),
            Just(b"l".to_vec()),
            Just(b"m".to_vec()),
            Just(b"g".to_vec()),
            Just(b"x".to_vec()),
        ];
        let geo = prop_oneof![
            Just(br#"{"type":"Point","coordinates":[1.0,2.0]}"#.to_vec()),
            Just(br#"{"type":"AeroCircle","coordinates":[[1.0,2.0],1000]}"#.to_vec()),
            Just(br#"{"type":"Polygon","coordinates":[[[0,0],[0,5],[5,5],[0,0]]]}"#.to_vec()),
            Just(br#"{"type":"Polygon","coordinates":[]}"#.to_vec()),
            Just(br#"{"type":"MultiPolygon","coordinates":[[[]]]}"#.to_vec()),
            "[{}\\[\\]\",:a-z0-9]{0,20}".prop_map(String::into_bytes),
        ];
        let leaf = prop_oneof![
            Just(vec![0xc0]),
            any::<bool>().prop_map(|b| vec![if b { 0xc3 } else { 0xc2 }]),
            prop_oneof![any::<i64>(), -70i64..70].prop_map(pack_int),
            any::<f64>().prop_map(crate::cdt::value::float_bytes),
            "[abc.*^$()|+?{}\\[\\]\\\\]{0,8}"
                .prop_map(|t| particle_str(particle::STRING, t.as_bytes())),
            proptest::collection::vec(any::<u8>(), 0..6)
                .prop_map(|b| particle_str(particle::BLOB, &b)),
            geo.prop_map(|g| particle_str(particle::GEOJSON, &g)),
            (0i64..10, bin_names.clone()).prop_map(|(kind, name)| pack_array(&[
                pack_int(code::BIN),
                pack_int(kind),
                pack_str(&name)
            ])),
            bin_names.prop_map(|name| pack_array(&[pack_int(code::BIN_TYPE), pack_str(&name)])),
            (64i64..75).prop_map(|op| pack_array(&[pack_int(op)])),
            (-2i64..5).prop_map(|m| pack_array(&[pack_int(code::DIGEST_MODULO), pack_int(m)])),
            (0i64..10).prop_map(|kind| pack_array(&[pack_int(code::KEY), pack_int(kind)])),
            prop_oneof![Just(b"a".to_vec()), Just(b"b".to_vec())]
                .prop_map(|name| pack_array(&[pack_int(code::VAR), pack_str(&name)])),
            proptest::collection::vec(any::<u8>(), 0..12),
            // map literals
            Just(vec![0x81, 0xa2, particle::STRING, b'a', 0x01]),
            Just(vec![0x80]),
        ];
        leaf.prop_recursive(5, 64, 5, |inner| {
            prop_oneof![
                // Any operator with any operands.
                (
                    prop_oneof![1i64..9, 16i64..42, 50i64..52, 123i64..128],
                    proptest::collection::vec(inner.clone(), 0..5),
                )
                    .prop_map(|(op, args)| {
                        let mut items = vec![pack_int(op)];
                        items.extend(args);
                        pack_array(&items)
                    }),
                // let a = x, b = y in z
                (inner.clone(), inner.clone(), inner.clone()).prop_map(|(x, y, z)| {
                    pack_array(&[pack_int(code::LET), pack_str(b"a"), x, pack_str(b"b"), y, z])
                }),
                // regex with its flags and pattern
                (0i64..16, "[abc.*^$()|+?{}\\[\\]\\\\:]{0,10}", inner.clone()).prop_map(
                    |(flags, pattern, subject)| {
                        pack_array(&[
                            pack_int(code::CMP_REGEX),
                            pack_int(flags),
                            pack_str(pattern.as_bytes()),
                            subject,
                        ])
                    }
                ),
                // a list or map call: [127, type, 0, [op, args...], bin]
                (
                    0i64..10,
                    prop_oneof![0i64..32, 64i64..112],
                    proptest::collection::vec(inner.clone(), 0..4),
                    inner,
                )
                    .prop_map(|(kind, op, args, bin)| {
                        let mut call = vec![pack_int(op)];
                        call.extend(args);
                        pack_array(&[
                            pack_int(code::CALL),
                            pack_int(kind),
                            pack_int(0),
                            pack_array(&call),
                            bin,
                        ])
                    }),
            ]
        })
    }

    fn hostile_record() -> Vec<u8> {
        let list = pack_array(&[
            pack_int(1),
            particle_str(particle::STRING, b"a"),
            pack_array(&[pack_int(2)]),
        ]);
        let map = {
            let mut out = vec![0x82];
            out.extend(particle_str(particle::STRING, b"a"));
            out.extend(pack_int(1));
            out.extend(particle_str(particle::STRING, b"b"));
            out.extend(pack_array(&[]));
            out
        };
        let mut geo = vec![0u8, 0, 0];
        geo.extend_from_slice(br#"{"type":"Point","coordinates":[1.0,2.0]}"#);
        let mut bytes = Vec::new();
        let bins = [
            (
                b"n".as_slice(),
                particle::INTEGER,
                7i64.to_be_bytes().to_vec(),
            ),
            (b"s", particle::STRING, b"abc".to_vec()),
            (b"f", particle::FLOAT, 1.5f64.to_be_bytes().to_vec()),
            (b"l", particle::LIST, list),
            (b"m", particle::MAP, map),
            (b"g", particle::GEOJSON, geo),
        ];
        bolide_store::record::encode(
            &mut bytes,
            Some((particle::STRING, b"key".as_slice())),
            bins.iter()
                .map(|(name, particle_type, value)| bolide_store::Bin {
                    name,
                    particle_type: *particle_type,
                    value,
                }),
        );
        bytes
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn hostile_expressions_never_panic(bytes in expression()) {
            let stored = hostile_record();
            let record = RecordView::parse(&stored).expect("record");
            let mut empty_bytes = Vec::new();
            bolide_store::record::encode(&mut empty_bytes, None, std::iter::empty());
            let empty = RecordView::parse(&empty_bytes).expect("empty record");
            let meta = RecordMeta { generation: 3, void_time: 100, ..RecordMeta::default() };
            let digest = Digest([7; 20]);
            if let Ok(expr) = parse(&bytes) {
                let _ = passes(&expr, &subject_with(&record, &meta, &digest));
                let _ = passes(&expr, &subject_with(&empty, &meta, &digest));
                // As an expression op sees a write's working copy.
                let working: Vec<crate::ops::WorkBin<'_>> = record
                    .bins()
                    .map(|bin| crate::ops::WorkBin {
                        name: bin.name,
                        particle_type: bin.particle_type,
                        value: Cow::Borrowed(bin.value),
                    })
                    .collect();
                let subject = Subject {
                    bins: Bins::Working(&working),
                    ..subject_with(&record, &meta, &digest)
                };
                let _ = evaluate(&expr, &subject);
            }
            // And as the value of an expression op, `[expression, flags]`.
            let mut op = vec![0x92];
            op.extend_from_slice(&bytes);
            op.push(0x10);
            let _ = parse_op(&op, true);
        }
    }
}
