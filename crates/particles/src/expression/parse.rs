//! Parsing: the clients' msgpack expression into an [`Expr`] tree, once per
//! request, with the checks the real server makes when it compiles one
//! (operand counts and literal types, variables defined by a `let`).

use super::{
    code, kind, op_flag, Call, CallArg, CallSystem, ExpOp, Expr, GeoSide, Literal, PosixRegex,
};
use bolide_types::{particle, ResultCode};
use bolide_wire::msgpack::{Item, Reader};

const NODES_MAX: usize = 1024;
const DEPTH_MAX: usize = 32;
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
    static_kind(&expr)?;
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

/// The `system` of a CALL: list and map, bit, HyperLogLog ops; with the
/// modify flag, the op modifies a copy of the value.
mod call_system {
    pub const CDT: i64 = 0;
    pub const BITS: i64 = 1;
    pub const HLL: i64 = 2;
    pub const MODIFY_LOCAL: i64 = 0x40;
}

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
        Some((&particle_type, rest))
            if particle::is_blob(particle_type) || particle_type == particle::HLL =>
        {
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
    Ok(Call {
        system: CallSystem::Cdt,
        modify: false,
        result_kind: kind::NIL,
        fixed,
        head,
        args,
    })
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
            let result_kind = reader.int().map_err(|_| ResultCode::Parameter)?;
            if !(kind::NIL..=kind::HLL).contains(&result_kind) {
                return Err(ResultCode::Parameter);
            }
            let system = reader.int().map_err(|_| ResultCode::Parameter)?;
            let modify = system & call_system::MODIFY_LOCAL != 0;
            let system = match system & !call_system::MODIFY_LOCAL {
                call_system::CDT => CallSystem::Cdt,
                call_system::BITS => CallSystem::Bits,
                call_system::HLL => CallSystem::Hll,
                _ => return Err(ResultCode::Parameter),
            };
            let mut call = call_payload(reader, depth, budget)?;
            call.system = system;
            call.modify = modify;
            call.result_kind = result_kind;
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
            // The server keeps the low 32 bits, as a signed number.
            let modulus = reader.int().map_err(|_| ResultCode::Parameter)? as i32;
            if modulus == 0 {
                return Err(ResultCode::Parameter);
            }
            Expr::DigestModulo(i64::from(modulus))
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
        Expr::Literal(Literal::Blob(particle::HLL, _)) => Some(kind::HLL),
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

/// The value type an expression has before it runs, where it is known,
/// checking its operands on the way as the server does when it compiles an
/// expression: logic takes booleans, arithmetic numbers of one type (each
/// operator the type it works on), a comparison two sides of one type
/// (neither GeoJSON nor HLL), a regex a string. A violation is a bad
/// request (4) at parse time instead of an unknown at run time. Variables
/// and `unknown` are not known, and check nothing.
fn static_kind(expr: &Expr) -> Result<Option<i64>, ResultCode> {
    let require = |kind: Option<i64>, wanted: i64| match kind {
        Some(kind) if kind != wanted => Err(ResultCode::Parameter),
        _ => Ok(()),
    };
    Ok(match expr {
        Expr::Literal(literal) => match literal {
            Literal::Nil => Some(kind::NIL),
            Literal::Bool(_) => Some(kind::BOOL),
            Literal::Int(_) => Some(kind::INT),
            Literal::Float(_) => Some(kind::FLOAT),
            Literal::Str(_) => Some(kind::STRING),
            Literal::Blob(particle::HLL, _) => Some(kind::HLL),
            Literal::Blob(..) => Some(kind::BLOB),
            Literal::Geo(_) => Some(kind::GEO),
            Literal::List(_) => Some(kind::LIST),
            Literal::Map(_) => Some(kind::MAP),
            Literal::Unknown => None,
        },
        Expr::Compare(_, left, right) => {
            let (left, right) = (static_kind(left)?, static_kind(right)?);
            if let (Some(left), Some(right)) = (left, right) {
                if left != right || left == kind::GEO || left == kind::HLL {
                    return Err(ResultCode::Parameter);
                }
            }
            Some(kind::BOOL)
        }
        Expr::And(children) | Expr::Or(children) | Expr::Exclusive(children) => {
            for child in children {
                require(static_kind(child)?, kind::BOOL)?;
            }
            Some(kind::BOOL)
        }
        Expr::Not(child) => {
            require(static_kind(child)?, kind::BOOL)?;
            Some(kind::BOOL)
        }
        Expr::Regex(_, subject) => {
            require(static_kind(subject)?, kind::STRING)?;
            Some(kind::BOOL)
        }
        Expr::Geo(left, right) => {
            for side in [left, right] {
                if let GeoSide::Expr(expr) = side {
                    require(static_kind(expr)?, kind::GEO)?;
                }
            }
            Some(kind::BOOL)
        }
        Expr::Bin { kind, .. } | Expr::Key(kind) => Some(*kind),
        Expr::BinType(_) | Expr::DigestModulo(_) => Some(kind::INT),
        Expr::Meta(op) => Some(match *op {
            code::SET_NAME => kind::STRING,
            code::KEY_EXISTS | code::IS_TOMBSTONE => kind::BOOL,
            _ => kind::INT,
        }),
        Expr::Call { call, bin } => {
            static_kind(bin)?;
            for arg in &call.args {
                if let CallArg::Expr(expr) = arg {
                    static_kind(expr)?;
                }
            }
            Some(call.result_kind)
        }
        Expr::Arith(op, operands) => arith_kind(*op, operands)?,
        Expr::Cond(parts) => {
            let mut result = None;
            let mut pairs = parts.chunks_exact(2);
            for pair in pairs.by_ref() {
                require(static_kind(&pair[0])?, kind::BOOL)?;
                result = result.or(static_kind(&pair[1])?);
            }
            for default in pairs.remainder() {
                result = result.or(static_kind(default)?);
            }
            result
        }
        Expr::Let(definitions, body) => {
            for (_, value) in definitions {
                static_kind(value)?;
            }
            static_kind(body)?
        }
        Expr::Var(_) => None,
    })
}

/// The type an arithmetic or bitwise operator answers, after checking its
/// operands' types.
fn arith_kind(op: i64, operands: &[Expr]) -> Result<Option<i64>, ResultCode> {
    let kinds = operands
        .iter()
        .map(static_kind)
        .collect::<Result<Vec<_>, _>>()?;
    let all = |wanted: i64| {
        if kinds.iter().flatten().all(|&kind| kind == wanted) {
            Ok(Some(wanted))
        } else {
            Err(ResultCode::Parameter)
        }
    };
    match op {
        code::ADD | code::SUB | code::MUL | code::DIV | code::MIN | code::MAX | code::ABS => {
            let mut number = None;
            for kind in kinds.iter().flatten() {
                if *kind != kind::INT && *kind != kind::FLOAT {
                    return Err(ResultCode::Parameter);
                }
                if number.is_some_and(|number| number != *kind) {
                    return Err(ResultCode::Parameter);
                }
                number = Some(*kind);
            }
            Ok(number)
        }
        code::POW | code::LOG | code::FLOOR | code::CEIL => all(kind::FLOAT),
        code::TO_INT => all(kind::FLOAT).map(|_| Some(kind::INT)),
        code::TO_FLOAT => all(kind::INT).map(|_| Some(kind::FLOAT)),
        code::INT_LSCAN | code::INT_RSCAN => {
            match (
                kinds.first().copied().flatten(),
                kinds.get(1).copied().flatten(),
            ) {
                (Some(value), _) if value != kind::INT => Err(ResultCode::Parameter),
                (_, Some(bit)) if bit != kind::BOOL => Err(ResultCode::Parameter),
                _ => Ok(Some(kind::INT)),
            }
        }
        _ => all(kind::INT),
    }
}
