//! Bin-level modify semantics: write, increment, append, prepend.

use bolide_types::{particle, ResultCode};
use bolide_wire::op_type;
use std::borrow::Cow;

/// A bin while a write is being applied: name borrowed from the request or
/// the stored record, value borrowed or newly computed.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkBin<'a> {
    pub name: &'a [u8],
    pub particle_type: u8,
    pub value: Cow<'a, [u8]>,
}

/// Whether `op` is an op type the protocol defines.
pub fn is_known(op: u8) -> bool {
    matches!(op, 1..=5 | 7..=16)
}

/// Whether `op` is a read-type op (allowed without info2 WRITE).
pub fn is_readable(op: u8) -> bool {
    matches!(op, 1 | 3 | 7 | 12 | 15)
}

/// Validates a value arriving in a write and brings it into stored form
/// (integers widened to 8 bytes big-endian).
pub fn stored_value(particle_type: u8, value: &[u8]) -> Result<Cow<'_, [u8]>, ResultCode> {
    match particle_type {
        particle::INTEGER if value.len() == 8 => Ok(Cow::Borrowed(value)),
        particle::INTEGER => Ok(Cow::Owned(integer_from_wire(value)?.to_be_bytes().to_vec())),
        particle::FLOAT if value.len() != 8 => Err(ResultCode::Parameter),
        particle::BOOL if value.len() != 1 => Err(ResultCode::Parameter),
        particle::GEOJSON if value.len() < 3 => Err(ResultCode::Parameter),
        other if particle::is_storable(other) => Ok(Cow::Borrowed(value)),
        _ => Err(ResultCode::Parameter),
    }
}

/// An integer of 1, 2, 4 or 8 big-endian bytes (shorter forms unsigned, as
/// the real server reads them).
pub fn integer_from_wire(value: &[u8]) -> Result<i64, ResultCode> {
    match value.len() {
        1 | 2 | 4 => Ok(value.iter().fold(0i64, |acc, &b| (acc << 8) | i64::from(b))),
        8 => {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(value);
            Ok(i64::from_be_bytes(eight))
        }
        _ => Err(ResultCode::Parameter),
    }
}

fn float_from_wire(value: &[u8]) -> Result<f64, ResultCode> {
    let eight: [u8; 8] = value.try_into().map_err(|_| ResultCode::Parameter)?;
    Ok(f64::from_be_bytes(eight))
}

/// INCR: adds an integer to an integer bin (wrapping) or a float to a float
/// bin. As on the server, an op on a missing bin creates it with the op's
/// value, whatever its type.
pub fn increment(
    current: Option<&WorkBin<'_>>,
    particle_type: u8,
    value: &[u8],
) -> Result<(u8, Vec<u8>), ResultCode> {
    // The op's own type is checked first, whatever the bin holds: nil or
    // an unknown type is a bad parameter (the server's
    // `safe_particle_type`), not an incompatible one.
    if !particle::is_storable(particle_type) {
        return Err(ResultCode::Parameter);
    }
    if current.is_none() {
        return Ok((
            particle_type,
            stored_value(particle_type, value)?.into_owned(),
        ));
    }
    match particle_type {
        particle::INTEGER => {
            let delta = integer_from_wire(value)?;
            let base = match current {
                None => 0,
                Some(bin) if bin.particle_type == particle::INTEGER => {
                    integer_from_wire(&bin.value)?
                }
                Some(_) => return Err(ResultCode::IncompatibleType),
            };
            Ok((
                particle::INTEGER,
                base.wrapping_add(delta).to_be_bytes().to_vec(),
            ))
        }
        particle::FLOAT => {
            let delta = float_from_wire(value)?;
            let base = match current {
                None => 0.0,
                Some(bin) if bin.particle_type == particle::FLOAT => float_from_wire(&bin.value)?,
                Some(_) => return Err(ResultCode::IncompatibleType),
            };
            Ok((particle::FLOAT, (base + delta).to_be_bytes().to_vec()))
        }
        _ => Err(ResultCode::IncompatibleType),
    }
}

/// APPEND / PREPEND: strings to strings, blobs to blobs of the same type;
/// on a missing bin, the op's value (of any type) creates it, as on the
/// server.
pub fn concatenate(
    current: Option<&WorkBin<'_>>,
    op: u8,
    particle_type: u8,
    value: &[u8],
) -> Result<(u8, Vec<u8>), ResultCode> {
    // As for `increment`: the op's type first.
    if !particle::is_storable(particle_type) {
        return Err(ResultCode::Parameter);
    }
    let Some(bin) = current else {
        return Ok((
            particle_type,
            stored_value(particle_type, value)?.into_owned(),
        ));
    };
    if particle_type != particle::STRING && !particle::is_blob(particle_type) {
        return Err(ResultCode::IncompatibleType);
    }
    if bin.particle_type != particle_type {
        return Err(ResultCode::IncompatibleType);
    }
    let mut joined = Vec::with_capacity(bin.value.len() + value.len());
    if op == op_type::APPEND {
        joined.extend_from_slice(&bin.value);
        joined.extend_from_slice(value);
    } else {
        joined.extend_from_slice(value);
        joined.extend_from_slice(&bin.value);
    }
    Ok((particle_type, joined))
}

/// Sets the bin at `position` (the working copy's index of the bin named
/// `name`, if it has one) to a value, or adds it.
pub fn set_bin<'a>(
    bins: &mut Vec<WorkBin<'a>>,
    position: Option<usize>,
    name: &'a [u8],
    particle_type: u8,
    value: Cow<'a, [u8]>,
) {
    match position.and_then(|i| bins.get_mut(i)) {
        Some(bin) => {
            bin.particle_type = particle_type;
            bin.value = value;
        }
        None => bins.push(WorkBin {
            name,
            particle_type,
            value,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(particle_type: u8, value: &[u8]) -> WorkBin<'_> {
        WorkBin {
            name: b"b",
            particle_type,
            value: Cow::Borrowed(value),
        }
    }

    #[test]
    fn integers_widen_and_wrap() {
        assert_eq!(
            stored_value(particle::INTEGER, &[0x01, 0x00]).map(|v| v.to_vec()),
            Ok(256i64.to_be_bytes().to_vec())
        );
        assert_eq!(
            stored_value(particle::INTEGER, &[1, 2, 3]),
            Err(ResultCode::Parameter)
        );
        let max = i64::MAX.to_be_bytes();
        let (_, sum) = increment(
            Some(&bin(particle::INTEGER, &max)),
            particle::INTEGER,
            &1i64.to_be_bytes(),
        )
        .expect("adds");
        assert_eq!(sum, i64::MIN.to_be_bytes());
    }

    #[test]
    fn incompatible_types_are_refused() {
        assert_eq!(
            increment(
                Some(&bin(particle::STRING, b"x")),
                particle::INTEGER,
                &1i64.to_be_bytes()
            ),
            Err(ResultCode::IncompatibleType)
        );
        assert_eq!(
            increment(
                Some(&bin(particle::INTEGER, &[0; 8])),
                particle::FLOAT,
                &1f64.to_be_bytes()
            ),
            Err(ResultCode::IncompatibleType)
        );
        assert_eq!(
            concatenate(
                Some(&bin(particle::BLOB, b"x")),
                op_type::APPEND,
                particle::STRING,
                b"y"
            ),
            Err(ResultCode::IncompatibleType)
        );
        assert_eq!(
            concatenate(
                Some(&bin(particle::INTEGER, &[0; 8])),
                op_type::APPEND,
                particle::INTEGER,
                &[0; 8]
            ),
            Err(ResultCode::IncompatibleType)
        );
    }

    #[test]
    fn any_modify_op_creates_a_missing_bin() {
        assert_eq!(
            increment(None, particle::STRING, b"test"),
            Ok((particle::STRING, b"test".to_vec()))
        );
        assert_eq!(
            concatenate(None, op_type::APPEND, particle::INTEGER, &[0, 7]),
            Ok((particle::INTEGER, 7i64.to_be_bytes().to_vec()))
        );
        assert_eq!(
            concatenate(None, op_type::PREPEND, particle::INTEGER, &[1, 2, 3]),
            Err(ResultCode::Parameter)
        );
        assert_eq!(increment(None, 99, b"x"), Err(ResultCode::Parameter));
    }

    #[test]
    fn a_nil_operand_is_a_bad_parameter_whatever_the_bin_holds() {
        for current in [
            None,
            Some(bin(particle::INTEGER, &[0; 8])),
            Some(bin(particle::STRING, b"x")),
        ] {
            for op in [op_type::APPEND, op_type::PREPEND] {
                assert_eq!(
                    concatenate(current.as_ref(), op, particle::NULL, &[]),
                    Err(ResultCode::Parameter)
                );
            }
            assert_eq!(
                increment(current.as_ref(), particle::NULL, &[]),
                Err(ResultCode::Parameter)
            );
        }
    }

    #[test]
    fn append_and_prepend() {
        let current = bin(particle::STRING, b"mid");
        assert_eq!(
            concatenate(Some(&current), op_type::APPEND, particle::STRING, b"-end"),
            Ok((3, b"mid-end".to_vec()))
        );
        assert_eq!(
            concatenate(
                Some(&current),
                op_type::PREPEND,
                particle::STRING,
                b"start-"
            ),
            Ok((3, b"start-mid".to_vec()))
        );
        assert_eq!(
            concatenate(None, op_type::APPEND, particle::BLOB, b"new"),
            Ok((4, b"new".to_vec()))
        );
    }
}
