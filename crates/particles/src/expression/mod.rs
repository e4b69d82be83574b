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
//!
//! `parse` turns the msgpack into an [`Expr`] tree once per request
//! (`parse.rs`); `eval.rs` walks it per record; the operator families live
//! beside them (`arithmetic.rs`, `regex.rs`).

mod arithmetic;
mod eval;
mod parse;
mod regex;

pub use eval::{evaluate, passes};
pub use parse::{parse, parse_op};
pub use regex::PosixRegex;

use bolide_types::{Digest, ResultCode};

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
    pub const HLL: i64 = 9;
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
    /// A list, map, bit or HyperLogLog op (the msgpack `[code, args...]`
    /// payload, as in `operate`) on the value `bin` evaluates to: a read
    /// answers the op's result, a modify the modified value.
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
    /// Which family of ops the payload is for.
    system: CallSystem,
    /// A modify op on a copy of the value (the server's "modify local"
    /// flag): the call answers the modified value.
    modify: bool,
    /// The value type the client declared for the answer.
    result_kind: i64,
    /// The payload when every argument is a literal (quotes removed).
    fixed: Option<Vec<u8>>,
    /// Everything before the arguments: the context if any, the array
    /// header and the op code.
    head: Vec<u8>,
    args: Vec<CallArg>,
}

/// The op families a CALL may run, as the clients number them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CallSystem {
    Cdt,
    Bits,
    Hll,
}

#[derive(Clone, Debug, PartialEq)]
enum CallArg {
    /// Msgpack as the op takes it.
    Value(Vec<u8>),
    Expr(Expr),
}

/// The record an expression reads: its bins and what is kept beside
/// them. The layer that holds records implements it, over a stored record
/// or over the working copy of a write (the earlier ops of the same
/// request already applied), so evaluation needs no store.
pub trait Record {
    /// A bin's particle type and value.
    fn bin(&self, name: &[u8]) -> Option<(u8, &[u8])>;
    fn digest(&self) -> &Digest;
    /// The stored user key (key type, bytes), if the record has one.
    fn key(&self) -> Option<(u8, &[u8])>;
    /// Last-update time, milliseconds since 2010-01-01T00:00:00Z.
    fn last_update_ms(&self) -> u64;
    /// Void time, seconds since 2010-01-01T00:00:00Z (0: never expires).
    fn void_time(&self) -> u32;
    fn set_name(&self) -> Option<&str>;
    /// The record's stored size in bytes.
    fn size_bytes(&self) -> usize;
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

#[cfg(test)]
mod tests;
