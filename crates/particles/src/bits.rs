//! Bit operations on blob bins (BIT_READ 12 and BIT_MODIFY 13 ops, and the
//! bit CALLs of expressions). The op value is msgpack `[op_code, args...]`.
//!
//! A blob is a string of bits, bit 0 being the most significant bit of
//! byte 0. Offsets count bits (bytes for insert, remove and resize) from
//! the start, or from the end when negative; sizes count bits. Argument
//! checks, policies and result codes follow the Aerospike server's
//! `particle_blob.c`: a modify that would reach past the end of the blob
//! answers 26 unless its policy allows a partial change, a read that does
//! answers 26, bad arguments answer 4, and the NO_FAIL flag turns a refusal
//! into a no-op.

use bolide_types::{particle, ResultCode};
use bolide_wire::msgpack::{Item, Reader};

/// The largest message the protocol carries; offsets, sizes and results
/// are bounded by it as on the server.
const PROTO_SIZE_MAX: u64 = 128 * 1024 * 1024;

mod code {
    pub const RESIZE: u64 = 0;
    pub const INSERT: u64 = 1;
    pub const REMOVE: u64 = 2;
    pub const SET: u64 = 3;
    pub const OR: u64 = 4;
    pub const XOR: u64 = 5;
    pub const AND: u64 = 6;
    pub const NOT: u64 = 7;
    pub const LSHIFT: u64 = 8;
    pub const RSHIFT: u64 = 9;
    pub const ADD: u64 = 10;
    pub const SUBTRACT: u64 = 11;
    pub const SET_INT: u64 = 12;
    pub const GET: u64 = 50;
    pub const COUNT: u64 = 51;
    pub const LSCAN: u64 = 52;
    pub const RSCAN: u64 = 53;
    pub const GET_INT: u64 = 54;
}

/// Write flags (the bit policy).
mod flag {
    pub const CREATE_ONLY: u64 = 1;
    pub const UPDATE_ONLY: u64 = 2;
    pub const NO_FAIL: u64 = 4;
    pub const PARTIAL: u64 = 8;
}

/// Resize and integer sub-flags.
mod subflag {
    pub const FROM_FRONT: u64 = 1;
    pub const GROW_ONLY: u64 = 2;
    pub const SHRINK_ONLY: u64 = 4;
    pub const SIGNED: u64 = 1;
    pub const SATURATE: u64 = 2;
    pub const WRAP: u64 = 4;
}

/// How each argument of an op is read.
#[derive(Clone, Copy, PartialEq)]
enum Arg {
    /// A byte offset (insert, remove).
    ByteOffset,
    /// A bit offset.
    Offset,
    /// A byte count, not 0 (remove).
    ByteSize,
    /// A byte count, 0 allowed (resize).
    ByteSizeOrZero,
    /// A bit count, not 0.
    Size,
    /// A bit count of 1 to 64 (integer ops).
    IntegerSize,
    /// Bytes (a msgpack blob with its type byte first).
    Buffer,
    /// A shift distance.
    ShiftBits,
    /// An integer operand.
    Integer,
    /// The bit a scan looks for.
    Boolean,
    Flags,
    ResizeSubflags,
    ArithmeticSubflags,
    GetIntegerSubflags,
}

struct OpDef {
    /// Flags the op accepts.
    flags: u64,
    min_args: usize,
    args: &'static [Arg],
}

fn modify_def(op: u64) -> Option<OpDef> {
    use Arg::*;
    const UPDATE: u64 = flag::UPDATE_ONLY | flag::NO_FAIL | flag::PARTIAL;
    const INTEGER: u64 = flag::UPDATE_ONLY | flag::NO_FAIL;
    let def = |flags, min_args, args| {
        Some(OpDef {
            flags,
            min_args,
            args,
        })
    };
    match op {
        code::RESIZE => def(
            flag::CREATE_ONLY | flag::UPDATE_ONLY | flag::NO_FAIL,
            1,
            &[ByteSizeOrZero, Flags, ResizeSubflags],
        ),
        code::INSERT => def(
            flag::CREATE_ONLY | flag::UPDATE_ONLY | flag::NO_FAIL,
            2,
            &[ByteOffset, Buffer, Flags],
        ),
        code::REMOVE => def(UPDATE, 2, &[ByteOffset, ByteSize, Flags]),
        code::SET | code::OR | code::XOR | code::AND => {
            def(UPDATE, 3, &[Offset, Size, Buffer, Flags])
        }
        code::NOT => def(UPDATE, 2, &[Offset, Size, Flags]),
        code::LSHIFT | code::RSHIFT => def(UPDATE, 3, &[Offset, Size, ShiftBits, Flags]),
        code::ADD | code::SUBTRACT => def(
            INTEGER,
            3,
            &[Offset, IntegerSize, Integer, Flags, ArithmeticSubflags],
        ),
        code::SET_INT => def(INTEGER, 3, &[Offset, IntegerSize, Integer, Flags]),
        _ => None,
    }
}

fn read_def(op: u64) -> Option<OpDef> {
    use Arg::*;
    let def = |min_args, args| {
        Some(OpDef {
            flags: 0,
            min_args,
            args,
        })
    };
    match op {
        code::GET | code::COUNT => def(2, &[Offset, Size]),
        code::LSCAN | code::RSCAN => def(3, &[Offset, Size, Boolean]),
        code::GET_INT => def(2, &[Offset, IntegerSize, GetIntegerSubflags]),
        _ => None,
    }
}

/// An op after its arguments are read.
#[derive(Default)]
struct BitsOp<'a> {
    code: u64,
    /// Bits (bytes × 8 for byte offsets); negative counts from the end.
    offset: i64,
    /// Bits.
    size: u64,
    value: u64,
    buffer: &'a [u8],
    flags: u64,
    subflags: u64,
}

impl BitsOp<'_> {
    fn no_fail(&self) -> bool {
        self.flags & flag::NO_FAIL != 0
    }

    /// A refusal: nothing happens with NO_FAIL, else `code`.
    fn refuse(&self, code: ResultCode) -> Result<Option<Vec<u8>>, ResultCode> {
        if self.no_fail() {
            Ok(None)
        } else {
            Err(code)
        }
    }
}

/// Parses `[op_code, args...]` against the modify or read table.
fn parse(payload: &[u8], modify: bool) -> Result<BitsOp<'_>, ResultCode> {
    let mut reader = Reader::new(payload);
    let count = match reader.item() {
        Ok(Item::Array(count)) if count > 0 => count as usize,
        _ => return Err(ResultCode::Parameter),
    };
    let code = uint(&mut reader)?;
    let def = if modify {
        modify_def(code)
    } else {
        read_def(code)
    }
    .ok_or(ResultCode::Parameter)?;
    let n_args = count - 1;
    if n_args < def.min_args || n_args > def.args.len() {
        return Err(ResultCode::Parameter);
    }
    let mut op = BitsOp {
        code,
        ..BitsOp::default()
    };
    for arg in &def.args[..n_args] {
        parse_arg(&mut reader, *arg, &def, &mut op)?;
    }
    Ok(op)
}

fn parse_arg<'a>(
    reader: &mut Reader<'a>,
    arg: Arg,
    def: &OpDef,
    op: &mut BitsOp<'a>,
) -> Result<(), ResultCode> {
    let bits_max = PROTO_SIZE_MAX * 8;
    let bad = || Err(ResultCode::Parameter);
    match arg {
        Arg::ByteOffset => {
            let offset = int(reader)?;
            if offset.unsigned_abs() > PROTO_SIZE_MAX {
                return bad();
            }
            op.offset = offset * 8;
        }
        Arg::Offset => {
            let offset = int(reader)?;
            if offset.unsigned_abs() > bits_max {
                return bad();
            }
            op.offset = offset;
        }
        Arg::ByteSize | Arg::ByteSizeOrZero => {
            let size = uint(reader)?;
            if (size == 0 && arg == Arg::ByteSize) || size > PROTO_SIZE_MAX {
                return bad();
            }
            op.size = size * 8;
        }
        Arg::Size => {
            let size = uint(reader)?;
            if size == 0 || size > bits_max {
                return bad();
            }
            op.size = size;
        }
        Arg::IntegerSize => {
            let size = uint(reader)?;
            if size == 0 || size > 64 {
                return bad();
            }
            op.size = size;
        }
        Arg::Buffer => {
            // The blob's first byte is the client's particle type.
            let bytes = match reader.item() {
                Ok(Item::Bin(bytes) | Item::Str(bytes)) => bytes,
                _ => return bad(),
            };
            let Some((_, buffer)) = bytes.split_first() else {
                return bad();
            };
            if buffer.is_empty() {
                return bad();
            }
            let buffer_bits = buffer.len() as u64 * 8;
            if op.size == 0 {
                op.size = buffer_bits;
            } else if buffer_bits < op.size {
                return bad();
            }
            op.buffer = buffer;
        }
        Arg::ShiftBits => {
            op.value = uint(reader)?;
            if op.value > bits_max {
                return bad();
            }
        }
        Arg::Integer => op.value = uint(reader)?,
        Arg::Boolean => match reader.item() {
            Ok(Item::Bool(value)) => op.value = u64::from(value),
            _ => return bad(),
        },
        Arg::Flags => {
            op.flags = uint(reader)?;
            if op.flags & !def.flags != 0 {
                return bad();
            }
            if op.flags & flag::CREATE_ONLY != 0 && op.flags & flag::UPDATE_ONLY != 0 {
                return bad();
            }
        }
        Arg::ResizeSubflags => {
            op.subflags = uint(reader)?;
            let allowed = subflag::FROM_FRONT | subflag::GROW_ONLY | subflag::SHRINK_ONLY;
            let both = subflag::GROW_ONLY | subflag::SHRINK_ONLY;
            if op.subflags & !allowed != 0 || op.subflags & both == both {
                return bad();
            }
        }
        Arg::ArithmeticSubflags => {
            op.subflags = uint(reader)?;
            let allowed = subflag::SIGNED | subflag::SATURATE | subflag::WRAP;
            let both = subflag::SATURATE | subflag::WRAP;
            if op.subflags & !allowed != 0 || op.subflags & both == both {
                return bad();
            }
        }
        Arg::GetIntegerSubflags => {
            op.subflags = uint(reader)?;
            if op.subflags & !subflag::SIGNED != 0 {
                return bad();
            }
        }
    }
    Ok(())
}

/// An unsigned integer; negative integers are taken as their two's
/// complement, as the server's msgpack reader does.
fn uint(reader: &mut Reader<'_>) -> Result<u64, ResultCode> {
    match reader.item() {
        Ok(Item::Uint(value)) => Ok(value),
        Ok(Item::Int(value)) => Ok(value as u64),
        _ => Err(ResultCode::Parameter),
    }
}

fn int(reader: &mut Reader<'_>) -> Result<i64, ResultCode> {
    match reader.item() {
        Ok(Item::Int(value)) => Ok(value),
        Ok(Item::Uint(value)) => Ok(value as i64),
        _ => Err(ResultCode::Parameter),
    }
}

/// Where an op lands in the blob: its first byte, its bit offset in that
/// byte, and its length in bits.
struct Window {
    byte: usize,
    bit: u64,
    /// Bytes from `byte` that the op touches.
    bytes: usize,
}

/// Resolves a negative offset against the blob's size and splits it into
/// a byte and a bit offset.
fn window(op: &BitsOp<'_>, old_size: usize, live: bool) -> Result<Window, ResultCode> {
    let mut offset = op.offset;
    if offset < 0 {
        if !live {
            return Err(ResultCode::Parameter);
        }
        if offset.unsigned_abs() > old_size as u64 * 8 {
            return Err(ResultCode::Parameter);
        }
        offset += old_size as i64 * 8;
    }
    let offset = offset as u64;
    let bit = offset % 8;
    Ok(Window {
        byte: (offset / 8) as usize,
        bit,
        bytes: (bit + op.size).div_ceil(8) as usize,
    })
}

/// BIT_MODIFY: applies the op to the bin (`None` when it has none) and
/// answers the blob's new bytes, or `None` when the op changes nothing.
pub fn modify(bin: Option<(u8, &[u8])>, payload: &[u8]) -> Result<Option<Vec<u8>>, ResultCode> {
    let mut op = parse(payload, true)?;
    let old: &[u8] = match bin {
        Some(_) if op.flags & flag::CREATE_ONLY != 0 => return op.refuse(ResultCode::BinExists),
        Some((particle::BLOB, bytes)) => bytes,
        Some(_) => return Err(ResultCode::IncompatibleType),
        None if !matches!(op.code, code::INSERT | code::RESIZE)
            || op.flags & flag::UPDATE_ONLY != 0 =>
        {
            return op.refuse(ResultCode::BinNotFound)
        }
        None => &[],
    };
    let window = window(&op, old.len(), bin.is_some())?;
    let result = match op.code {
        code::RESIZE => resize(&op, old),
        code::INSERT => {
            let new_size = old.len().max(window.byte) + op.buffer.len();
            if new_size as u64 >= PROTO_SIZE_MAX {
                return Err(ResultCode::Parameter);
            }
            Ok(Some(insert(&op, old, &window)))
        }
        code::REMOVE => remove(&op, old, &window),
        code::ADD | code::SUBTRACT | code::SET_INT => {
            if let Some(refusal) = check_inside(&op, old.len(), &window) {
                return refusal;
            }
            integer(&op, old, &window)
        }
        _ => {
            if window.byte >= old.len() {
                return op.refuse(ResultCode::OpNotApplicable);
            }
            if window.byte + window.bytes > old.len() {
                if op.flags & flag::PARTIAL == 0 {
                    return op.refuse(ResultCode::OpNotApplicable);
                }
                op.size = (old.len() - window.byte) as u64 * 8 - window.bit;
            }
            Ok(Some(overwrite(&op, old, &window)))
        }
    }?;
    match result {
        Some(bytes) if bytes.len() as u64 >= PROTO_SIZE_MAX => Err(ResultCode::Parameter),
        other => Ok(other),
    }
}

/// What a read answers: a blob or an integer (particle type and bytes).
pub type Answer = (u8, Vec<u8>);

/// BIT_READ on a blob bin.
pub fn read(bin: (u8, &[u8]), payload: &[u8]) -> Result<Answer, ResultCode> {
    let op = parse(payload, false)?;
    let (particle::BLOB, old) = bin else {
        return Err(ResultCode::IncompatibleType);
    };
    let window = window(&op, old.len(), true)?;
    if window.byte >= old.len() || window.byte + window.bytes > old.len() {
        return Err(ResultCode::OpNotApplicable);
    }
    let start = window.byte * 8 + window.bit as usize;
    let size = op.size as usize;
    let integer = |value: i64| (particle::INTEGER, value.to_be_bytes().to_vec());
    Ok(match op.code {
        code::GET => (particle::BLOB, extract(old, start, size)),
        code::COUNT => {
            let ones: u32 = extract(old, start, size)
                .iter()
                .map(|b| b.count_ones())
                .sum();
            integer(i64::from(ones))
        }
        code::LSCAN => integer(lscan(old, start, size, op.value == 1)),
        code::RSCAN => integer(rscan(old, &window, size, op.value == 1)),
        _ => {
            let value = load(old, start, size);
            let value = if op.subflags & subflag::SIGNED != 0 {
                sign_extend(value, op.size)
            } else {
                value as i64
            };
            integer(value)
        }
    })
}

/// Modify ops that must stay inside the blob (the integer ops): the
/// refusal, if they do not.
fn check_inside(
    op: &BitsOp<'_>,
    old_size: usize,
    window: &Window,
) -> Option<Result<Option<Vec<u8>>, ResultCode>> {
    if window.byte >= old_size || window.byte + window.bytes > old_size {
        Some(op.refuse(ResultCode::OpNotApplicable))
    } else {
        None
    }
}

fn resize(op: &BitsOp<'_>, old: &[u8]) -> Result<Option<Vec<u8>>, ResultCode> {
    let new_size = (op.size / 8) as usize;
    let from_front = op.subflags & subflag::FROM_FRONT != 0;
    if new_size < old.len() {
        if op.subflags & subflag::GROW_ONLY != 0 {
            return op.refuse(ResultCode::Parameter);
        }
        let kept = if from_front {
            &old[old.len() - new_size..]
        } else {
            &old[..new_size]
        };
        Ok(Some(kept.to_vec()))
    } else if new_size > old.len() {
        if op.subflags & subflag::SHRINK_ONLY != 0 {
            return op.refuse(ResultCode::Parameter);
        }
        if new_size as u64 >= PROTO_SIZE_MAX {
            return Err(ResultCode::Parameter);
        }
        let mut grown = vec![0u8; new_size];
        if from_front {
            grown[new_size - old.len()..].copy_from_slice(old);
        } else {
            grown[..old.len()].copy_from_slice(old);
        }
        Ok(Some(grown))
    } else {
        Ok(None)
    }
}

fn insert(op: &BitsOp<'_>, old: &[u8], window: &Window) -> Vec<u8> {
    let at = window.byte;
    let mut new = Vec::with_capacity(old.len().max(at) + op.buffer.len());
    if at >= old.len() {
        new.extend_from_slice(old);
        new.resize(at, 0);
        new.extend_from_slice(op.buffer);
    } else {
        new.extend_from_slice(&old[..at]);
        new.extend_from_slice(op.buffer);
        new.extend_from_slice(&old[at..]);
    }
    new
}

fn remove(op: &BitsOp<'_>, old: &[u8], window: &Window) -> Result<Option<Vec<u8>>, ResultCode> {
    let at = window.byte;
    if at >= old.len() {
        return op.refuse(ResultCode::Parameter);
    }
    let end = at + window.bytes;
    let end = if end > old.len() {
        if op.flags & flag::PARTIAL == 0 {
            return op.refuse(ResultCode::Parameter);
        }
        old.len()
    } else {
        end
    };
    let mut new = Vec::with_capacity(old.len() - (end - at));
    new.extend_from_slice(&old[..at]);
    new.extend_from_slice(&old[end..]);
    Ok(Some(new))
}

/// SET, OR, XOR, AND, NOT, LSHIFT and RSHIFT: the op's bits are replaced.
fn overwrite(op: &BitsOp<'_>, old: &[u8], window: &Window) -> Vec<u8> {
    let start = window.byte * 8 + window.bit as usize;
    let size = op.size as usize;
    let mut bits = extract(old, start, size);
    match op.code {
        code::SET => bits = extract(op.buffer, 0, size),
        code::OR | code::XOR | code::AND => {
            let operand = extract(op.buffer, 0, size);
            for (bit, other) in bits.iter_mut().zip(operand) {
                match op.code {
                    code::OR => *bit |= other,
                    code::XOR => *bit ^= other,
                    _ => *bit &= other,
                }
            }
        }
        code::NOT => {
            for bit in bits.iter_mut() {
                *bit = !*bit;
            }
        }
        code::LSHIFT | code::RSHIFT => {
            let shift = op.value.min(size as u64) as usize;
            let mut shifted = vec![0u8; bits.len()];
            if op.code == code::LSHIFT {
                deposit(
                    &mut shifted,
                    0,
                    &extract(&bits, shift, size - shift),
                    size - shift,
                );
            } else {
                deposit(&mut shifted, shift, &bits, size - shift);
            }
            bits = shifted;
        }
        _ => {}
    }
    let mut new = old.to_vec();
    deposit(&mut new, start, &bits, size);
    new
}

/// ADD, SUBTRACT and SET_INT on an integer of 1 to 64 bits.
fn integer(op: &BitsOp<'_>, old: &[u8], window: &Window) -> Result<Option<Vec<u8>>, ResultCode> {
    let start = window.byte * 8 + window.bit as usize;
    let bits = op.size as u32;
    let mask = u64::MAX >> (64 - bits);
    let value = op.value & mask;
    let loaded = load(old, start, bits as usize);
    let wrap = op.subflags & subflag::WRAP != 0;
    let saturate = op.subflags & subflag::SATURATE != 0;
    let signed = op.subflags & subflag::SIGNED != 0;
    let result = match op.code {
        code::SET_INT => Some(value),
        code::ADD => {
            let sum = loaded.wrapping_add(value) & mask;
            if wrap {
                Some(sum)
            } else if signed {
                signed_overflow(bits, saturate, loaded, value, sum)
            } else if sum < loaded {
                saturate.then_some(mask)
            } else {
                Some(sum)
            }
        }
        _ => {
            let difference = loaded.wrapping_sub(value) & mask;
            if wrap {
                Some(difference)
            } else if signed {
                let negated = (value as i64).wrapping_neg() as u64;
                signed_overflow(bits, saturate, loaded, negated, difference)
            } else if difference > loaded {
                saturate.then_some(0)
            } else {
                Some(difference)
            }
        }
    };
    let Some(result) = result else {
        return op.refuse(ResultCode::OpNotApplicable);
    };
    let stored = (result << (64 - bits)).to_be_bytes();
    let mut new = old.to_vec();
    deposit(&mut new, start, &stored, bits as usize);
    Ok(Some(new))
}

/// A signed add's result, saturated, or `None` when it overflowed and may
/// not saturate. As on the server, the operands are read as `bits`-bit
/// two's complement numbers and only overflow between two positive or two
/// negative operands is caught.
fn signed_overflow(bits: u32, saturate: bool, loaded: u64, value: u64, sum: u64) -> Option<u64> {
    let mask = u64::MAX >> (64 - bits);
    let (result, load, value) = (
        sign_extend(sum, u64::from(bits)),
        sign_extend(loaded, u64::from(bits)),
        sign_extend(value, u64::from(bits)),
    );
    if load < 0 && value < 0 && result > 0 {
        // The most negative number.
        saturate.then_some((mask >> (bits - 1)) << (bits - 1))
    } else if load > 0 && value > 0 && result < 0 {
        saturate.then_some(mask >> 1)
    } else {
        Some(sum)
    }
}

fn sign_extend(value: u64, bits: u64) -> i64 {
    let leading = 64 - bits as u32;
    ((value as i64) << leading) >> leading
}

/// The first bit equal to `wanted` in `size` bits from `start`, counted
/// from `start`; -1 if there is none.
fn lscan(data: &[u8], start: usize, size: usize, wanted: bool) -> i64 {
    let bits = extract(data, start, size);
    for (i, &byte) in bits.iter().enumerate() {
        let byte = if wanted { byte } else { !byte };
        if byte != 0 {
            let found = i * 8 + byte.leading_zeros() as usize;
            return if found < size { found as i64 } else { -1 };
        }
    }
    -1
}

/// The last bit equal to `wanted` up to the op's end, counted from the
/// op's start. As on the server, the bits before the start in the op's
/// first byte are looked at too, which answers a negative index.
fn rscan(data: &[u8], window: &Window, size: usize, wanted: bool) -> i64 {
    let first = window.byte * 8;
    let end = first + window.bit as usize + size;
    let bits = extract(data, first, end - first);
    let last = end - first;
    for (i, &byte) in bits.iter().enumerate().rev() {
        let mut byte = if wanted { byte } else { !byte };
        // Bits past the end of the op are not looked at.
        if (i + 1) * 8 > last {
            byte &= 0xffu8 << ((i + 1) * 8 - last);
        }
        if byte != 0 {
            let found = i * 8 + 7 - byte.trailing_zeros() as usize;
            return found as i64 - window.bit as i64;
        }
    }
    -1
}

/// Up to 64 bits from `start` as an unsigned number.
fn load(data: &[u8], start: usize, size: usize) -> u64 {
    let bits = extract(data, start, size);
    let mut eight = [0u8; 8];
    eight[..bits.len()].copy_from_slice(&bits);
    u64::from_be_bytes(eight) >> (64 - size)
}

/// `size` bits of `data` from bit `start`, left-aligned in whole bytes with
/// the bits past `size` zero. The caller keeps the range inside `data`.
fn extract(data: &[u8], start: usize, size: usize) -> Vec<u8> {
    let first = start / 8;
    let shift = (start % 8) as u32;
    let n_bytes = size.div_ceil(8);
    let mut out = Vec::with_capacity(n_bytes);
    for i in 0..n_bytes {
        let high = data.get(first + i).copied().unwrap_or(0);
        let low = data.get(first + i + 1).copied().unwrap_or(0);
        let byte = if shift == 0 {
            high
        } else {
            (high << shift) | (low >> (8 - shift))
        };
        out.push(byte);
    }
    if !size.is_multiple_of(8) {
        if let Some(last) = out.last_mut() {
            *last &= 0xffu8 << (8 - size % 8);
        }
    }
    out
}

/// Writes the first `size` bits of `bits` (left-aligned) into `data` from
/// bit `start`, leaving every other bit of `data` as it was.
fn deposit(data: &mut [u8], start: usize, bits: &[u8], size: usize) {
    let first = start / 8;
    let shift = (start % 8) as u32;
    for (j, &source) in bits.iter().enumerate().take(size.div_ceil(8)) {
        let valid = size - j * 8;
        let mask = if valid >= 8 {
            0xffu8
        } else {
            0xffu8 << (8 - valid)
        };
        let value = source & mask;
        if let Some(byte) = data.get_mut(first + j) {
            *byte = (*byte & !(mask >> shift)) | (value >> shift);
        }
        if shift != 0 {
            let low_mask = ((u16::from(mask) << (8 - shift)) & 0xff) as u8;
            if low_mask != 0 {
                if let Some(byte) = data.get_mut(first + j + 1) {
                    let low = ((u16::from(value) << (8 - shift)) & 0xff) as u8;
                    *byte = (*byte & !low_mask) | low;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
