//! Arithmetic and bitwise operators on integers and floats.

use super::code;
use super::eval::Value;

/// Applies an arithmetic or bitwise operator. Operands must all be
/// integers or all floats (as the operator allows); anything else, a
/// division by zero, an overflow or a shift outside 0..64 is unknown.
pub(super) fn arithmetic(op: i64, values: &[Value<'_>]) -> Value<'static> {
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
