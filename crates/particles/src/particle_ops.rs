//! Bit (BIT_READ, BIT_MODIFY) and HyperLogLog (HLL_READ, HLL_MODIFY) ops
//! in `operate`: the op and the bin's value go to `bits` or `hll`, and the
//! answer or new value comes back into the working copy of the record.

use crate::ops::{set_bin, WorkBin};
use bolide_types::{particle, ResultCode};
use bolide_wire::{op_type, Op};
use std::borrow::Cow;

/// Applies a bit or HyperLogLog op to the working bins (the write path);
/// gives its answer, if it has one.
pub fn apply<'a>(
    bins: &mut Vec<WorkBin<'a>>,
    position: Option<usize>,
    op: &Op<'a>,
) -> Result<Option<(u8, Vec<u8>)>, ResultCode> {
    let is_bits = matches!(op.op_type, op_type::BIT_READ | op_type::BIT_MODIFY);
    if is_bits && op.particle_type != particle::BLOB {
        return Err(ResultCode::IncompatibleType);
    }
    let current = position
        .and_then(|i| bins.get(i))
        .map(|bin| (bin.particle_type, bin.value.as_ref()));
    let answer = match op.op_type {
        op_type::HLL_MODIFY => {
            let (value, answer) = crate::hll::modify(current, op.value)?;
            if let Some(value) = value {
                set_bin(bins, position, op.name, particle::HLL, Cow::Owned(value));
            }
            answer
        }
        op_type::HLL_READ => match current {
            Some(bin) => Some(crate::hll::read(bin, op.value)?),
            None => None,
        },
        op_type::BIT_MODIFY => {
            if let Some(value) = crate::bits::modify(current, op.value)? {
                set_bin(bins, position, op.name, particle::BLOB, Cow::Owned(value));
            }
            None
        }
        _ => match current {
            Some(bin) => Some(crate::bits::read(bin, op.value)?),
            None => None,
        },
    };
    Ok(answer)
}

/// A read op of the read path (no write lock): the answer for a bin the
/// record has, `None` for one it does not.
pub fn read(op: &Op<'_>, bin: Option<(u8, &[u8])>) -> Result<Option<(u8, Vec<u8>)>, ResultCode> {
    if op.op_type == op_type::HLL_READ {
        return bin.map(|bin| crate::hll::read(bin, op.value)).transpose();
    }
    if op.particle_type != particle::BLOB {
        return Err(ResultCode::IncompatibleType);
    }
    bin.map(|bin| crate::bits::read(bin, op.value)).transpose()
}
