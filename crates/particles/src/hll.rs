//! HyperLogLog operations (HLL_READ 15 and HLL_MODIFY 16 ops, and the HLL
//! CALLs of expressions) on HLL bins (particle type 18), byte-exact with the
//! Aerospike server's `particle_hll.c`.
//!
//! An HLL bin is a HyperMinHash sketch:
//!
//! ```text
//! u8 flags (0) · u8 index bits (4..=16) · u8 minhash bits (0 or 4..=51)
//! · u64 cached count (little-endian, 0 = not cached) · registers
//! ```
//!
//! There are `2^index_bits` registers of `6 + minhash_bits` bits each,
//! packed most significant bit first. An element (its msgpack, in compact
//! form) is hashed with MurmurHash3 x64-128: the low index bits of the
//! first half pick the register, the next minhash bits are the minhash
//! value, and one plus the trailing zeros of the second half is the
//! HyperLogLog value; a register keeps the largest `value << minhash_bits |
//! minhash`. Counts use Ertl's improved estimator; intersections and
//! similarity use the HyperMinHash estimate when both sketches carry
//! minhash bits, else inclusion–exclusion of HyperLogLog counts.

use bolide_types::{particle, ResultCode};
use bolide_wire::msgpack::{Item, Reader};

const HEADER_BYTES: usize = 11;
const INDEX_BITS_MIN: u64 = 4;
const INDEX_BITS_MAX: u64 = 16;
const HLL_BITS: u32 = 6;
const HLL_VALUE_MAX: usize = 1 << HLL_BITS;
const MINHASH_BITS_MIN: u64 = 4;
const MINHASH_BITS_MAX: u64 = 64 - HLL_BITS as u64 - 7;
const INDEX_AND_MINHASH_BITS_MAX: u64 = 64;
/// "Not given" for index and minhash bits.
const UNSET: u8 = 0xff;
/// Most elements one op may carry (the message size bounds them anyway).
const ELEMENTS_MAX: u32 = 1 << 20;

mod code {
    pub const INIT: u64 = 0;
    pub const ADD: u64 = 1;
    pub const SET_UNION: u64 = 2;
    pub const REFRESH_COUNT: u64 = 3;
    pub const FOLD: u64 = 4;
    pub const COUNT: u64 = 50;
    pub const UNION: u64 = 51;
    pub const UNION_COUNT: u64 = 52;
    pub const INTERSECT_COUNT: u64 = 53;
    pub const SIMILARITY: u64 = 54;
    pub const DESCRIBE: u64 = 55;
    pub const MAY_CONTAIN: u64 = 56;
}

mod flag {
    pub const CREATE_ONLY: u64 = 1;
    pub const UPDATE_ONLY: u64 = 2;
    pub const NO_FAIL: u64 = 4;
    pub const ALLOW_FOLD: u64 = 8;
}

/// What an op answers: a particle type and its bytes.
pub type Answer = (u8, Vec<u8>);

/// A sketch borrowed from a bin or an argument (validated).
#[derive(Clone, Copy)]
struct Sketch<'a> {
    bytes: &'a [u8],
}

impl<'a> Sketch<'a> {
    fn index_bits(self) -> u8 {
        self.bytes[1]
    }

    fn minhash_bits(self) -> u8 {
        self.bytes[2]
    }

    fn cache(self) -> u64 {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&self.bytes[3..HEADER_BYTES]);
        u64::from_le_bytes(eight)
    }

    fn registers(self) -> &'a [u8] {
        &self.bytes[HEADER_BYTES..]
    }

    fn register(self, r: u32) -> u64 {
        read_register(self.registers(), register_bits(self.minhash_bits()), r)
    }
}

/// A sketch being built.
struct Owned {
    bytes: Vec<u8>,
}

impl Owned {
    fn new(index_bits: u8, minhash_bits: u8) -> Owned {
        let mut bytes = vec![0u8; required_bytes(index_bits, minhash_bits)];
        bytes[1] = index_bits;
        bytes[2] = minhash_bits;
        Owned { bytes }
    }

    fn view(&self) -> Sketch<'_> {
        Sketch { bytes: &self.bytes }
    }

    fn set_cache(&mut self, value: u64) {
        self.bytes[3..HEADER_BYTES].copy_from_slice(&value.to_le_bytes());
    }

    fn set_register(&mut self, r: u32, value: u64) {
        let bits = register_bits(self.bytes[2]);
        write_register(&mut self.bytes[HEADER_BYTES..], bits, r, value);
    }
}

fn register_bits(minhash_bits: u8) -> u32 {
    HLL_BITS + u32::from(minhash_bits)
}

fn required_bytes(index_bits: u8, minhash_bits: u8) -> usize {
    HEADER_BYTES + ((register_bits(minhash_bits) as usize) << index_bits).div_ceil(8)
}

fn index_bits_valid(bits: u64) -> bool {
    (INDEX_BITS_MIN..=INDEX_BITS_MAX).contains(&bits)
}

fn minhash_bits_valid(bits: u64) -> bool {
    bits == 0 || (MINHASH_BITS_MIN..=MINHASH_BITS_MAX).contains(&bits)
}

fn combined_bits_valid(index_bits: u64, minhash_bits: u64) -> bool {
    index_bits_valid(index_bits)
        && minhash_bits_valid(minhash_bits)
        && index_bits + minhash_bits <= INDEX_AND_MINHASH_BITS_MAX
}

/// A stored HLL bin as a sketch, or why it cannot be used: 12 for another
/// type, 1 for a damaged sketch.
fn stored(bin: (u8, &[u8])) -> Result<Sketch<'_>, ResultCode> {
    let (particle_type, bytes) = bin;
    if particle_type != particle::HLL {
        return Err(ResultCode::IncompatibleType);
    }
    let valid = bytes.len() >= HEADER_BYTES
        && bytes[0] == 0
        && combined_bits_valid(u64::from(bytes[1]), u64::from(bytes[2]))
        && bytes.len() == required_bytes(bytes[1], bytes[2]);
    if valid {
        Ok(Sketch { bytes })
    } else {
        Err(ResultCode::Unknown)
    }
}

fn read_register(registers: &[u8], bits: u32, r: u32) -> u64 {
    let offset = bits as usize * r as usize;
    let first = offset / 8;
    let mut window = [0u8; 16];
    for (i, byte) in window.iter_mut().take(9).enumerate() {
        *byte = registers.get(first + i).copied().unwrap_or(0);
    }
    let value = u128::from_be_bytes(window);
    let shift = 128 - (offset % 8) as u32 - bits;
    ((value >> shift) as u64) & ((1u64 << bits) - 1)
}

fn write_register(registers: &mut [u8], bits: u32, r: u32, value: u64) {
    let offset = bits as usize * r as usize;
    let first = offset / 8;
    let shift = 128 - (offset % 8) as u32 - bits;
    let mask = u128::from((1u64 << bits) - 1) << shift;
    let mut window = [0u8; 16];
    for (i, byte) in window.iter_mut().take(9).enumerate() {
        *byte = registers.get(first + i).copied().unwrap_or(0);
    }
    let current = u128::from_be_bytes(window);
    let updated = (current & !mask) | ((u128::from(value) << shift) & mask);
    for (i, byte) in updated.to_be_bytes().iter().take(9).enumerate() {
        if let Some(slot) = registers.get_mut(first + i) {
            *slot = *byte;
        }
    }
}

/// A parsed op.
struct HllOp<'a> {
    code: u64,
    index_bits: u8,
    minhash_bits: u8,
    flags: u64,
    /// Elements to add or look for, in compact msgpack.
    elements: Vec<Vec<u8>>,
    /// Sketches given as arguments.
    sketches: Vec<Sketch<'a>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Arg {
    IndexBits,
    MinhashBits,
    Flags,
    Elements,
    Sketches,
    SketchesToIntersect,
}

struct OpDef {
    flags: u64,
    min_args: usize,
    args: &'static [Arg],
}

fn op_def(op: u64, modify: bool) -> Option<OpDef> {
    use Arg::*;
    let def = |flags, min_args, args| {
        Some(OpDef {
            flags,
            min_args,
            args,
        })
    };
    let create_update_no_fail = flag::CREATE_ONLY | flag::UPDATE_ONLY | flag::NO_FAIL;
    match (modify, op) {
        (true, code::INIT) => def(create_update_no_fail, 0, &[IndexBits, MinhashBits, Flags]),
        (true, code::ADD) => def(
            flag::CREATE_ONLY | flag::NO_FAIL,
            1,
            &[Elements, IndexBits, MinhashBits, Flags],
        ),
        (true, code::SET_UNION) => def(
            create_update_no_fail | flag::ALLOW_FOLD,
            1,
            &[Sketches, Flags],
        ),
        (true, code::REFRESH_COUNT) => def(0, 0, &[]),
        (true, code::FOLD) => def(0, 1, &[IndexBits]),
        (false, code::COUNT | code::DESCRIBE) => def(0, 0, &[]),
        (false, code::UNION | code::UNION_COUNT) => def(0, 1, &[Sketches]),
        (false, code::INTERSECT_COUNT | code::SIMILARITY) => def(0, 1, &[SketchesToIntersect]),
        (false, code::MAY_CONTAIN) => def(0, 1, &[Elements]),
        _ => None,
    }
}

fn parse(payload: &[u8], modify: bool) -> Result<HllOp<'_>, ResultCode> {
    let mut reader = Reader::new(payload);
    let count = match reader.item() {
        Ok(Item::Array(count)) if count > 0 => count as usize,
        _ => return Err(ResultCode::Parameter),
    };
    let code = match reader.item() {
        Ok(Item::Uint(code)) => code,
        Ok(Item::Int(code)) => code as u64,
        _ => return Err(ResultCode::Parameter),
    };
    let def = op_def(code, modify).ok_or(ResultCode::Parameter)?;
    let n_args = count - 1;
    // Read ops take exactly their arguments.
    let max_args = def.args.len();
    let min_args = if modify { def.min_args } else { max_args };
    if n_args < min_args || n_args > max_args {
        return Err(ResultCode::Parameter);
    }
    let mut op = HllOp {
        code,
        index_bits: UNSET,
        minhash_bits: UNSET,
        flags: 0,
        elements: Vec::new(),
        sketches: Vec::new(),
    };
    for arg in &def.args[..n_args] {
        parse_arg(&mut reader, *arg, &def, &mut op)?;
    }
    Ok(op)
}

fn int(reader: &mut Reader<'_>) -> Result<i64, ResultCode> {
    match reader.item() {
        Ok(Item::Int(value)) => Ok(value),
        Ok(Item::Uint(value)) => Ok(value as i64),
        _ => Err(ResultCode::Parameter),
    }
}

fn parse_arg<'a>(
    reader: &mut Reader<'a>,
    arg: Arg,
    def: &OpDef,
    op: &mut HllOp<'a>,
) -> Result<(), ResultCode> {
    match arg {
        Arg::IndexBits => {
            let bits = int(reader)?;
            if bits != -1 && !index_bits_valid(bits as u64) {
                return Err(ResultCode::Parameter);
            }
            op.index_bits = bits as u8;
        }
        Arg::MinhashBits => {
            let bits = int(reader)?;
            if bits != -1 {
                if !minhash_bits_valid(bits as u64) {
                    return Err(ResultCode::Parameter);
                }
                if op.index_bits != UNSET
                    && !combined_bits_valid(u64::from(op.index_bits), bits as u64)
                {
                    return Err(ResultCode::Parameter);
                }
            }
            op.minhash_bits = bits as u8;
        }
        Arg::Flags => {
            op.flags = int(reader)? as u64;
            if op.flags & !def.flags != 0 {
                return Err(ResultCode::Parameter);
            }
            if op.flags & flag::CREATE_ONLY != 0 && op.flags & flag::UPDATE_ONLY != 0 {
                return Err(ResultCode::Parameter);
            }
        }
        Arg::Elements => {
            let count = match reader.item() {
                Ok(Item::Array(count)) if count > 0 && count <= ELEMENTS_MAX => count,
                _ => return Err(ResultCode::Parameter),
            };
            for _ in 0..count {
                let element = crate::cdt::value::next_item(reader)?;
                op.elements.push(compact_element(element)?);
            }
        }
        Arg::Sketches | Arg::SketchesToIntersect => {
            let count = match Reader::new(reader.remaining()).item() {
                Ok(Item::Array(count)) => {
                    reader.item().map_err(|_| ResultCode::Parameter)?;
                    if count == 0 || count > ELEMENTS_MAX {
                        return Err(ResultCode::Parameter);
                    }
                    count
                }
                _ => 1,
            };
            for _ in 0..count {
                op.sketches.push(sketch_argument(reader)?);
            }
            if arg == Arg::SketchesToIntersect && op.sketches.len() > 2 {
                let minhash_bits = op.sketches[0].minhash_bits();
                if minhash_bits == 0
                    || op
                        .sketches
                        .iter()
                        .any(|sketch| sketch.minhash_bits() != minhash_bits)
                {
                    return Err(ResultCode::Parameter);
                }
            }
        }
    }
    Ok(())
}

/// A sketch sent as an argument: a msgpack blob, its particle type byte
/// first.
fn sketch_argument<'a>(reader: &mut Reader<'a>) -> Result<Sketch<'a>, ResultCode> {
    let bytes = match reader.item() {
        Ok(Item::Bin(bytes) | Item::Str(bytes)) => bytes,
        _ => return Err(ResultCode::Parameter),
    };
    if bytes.len() < HEADER_BYTES + 1 {
        return Err(ResultCode::Parameter);
    }
    let bytes = &bytes[1..];
    let valid = bytes[0] == 0
        && index_bits_valid(u64::from(bytes[1]))
        && minhash_bits_valid(u64::from(bytes[2]))
        && bytes.len() == required_bytes(bytes[1], bytes[2]);
    if valid {
        Ok(Sketch { bytes })
    } else {
        Err(ResultCode::Parameter)
    }
}

/// An element in the server's compact msgpack form (the bytes it hashes):
/// integers in their smallest encoding, strings and short blobs with the
/// smallest string header. Lists and maps are refused.
fn compact_element(element: &[u8]) -> Result<Vec<u8>, ResultCode> {
    let mut reader = Reader::new(element);
    let item = reader.item().map_err(|_| ResultCode::Parameter)?;
    let header = element.first().copied().unwrap_or(0);
    let mut out = Vec::with_capacity(element.len());
    match item {
        Item::Array(_) | Item::Map(_) => return Err(ResultCode::Parameter),
        Item::Int(value) if value >= 0 => write_uint(&mut out, value as u64),
        Item::Int(value) => write_negative(&mut out, value),
        Item::Uint(value) => write_uint(&mut out, value),
        Item::Str(bytes) => write_str(&mut out, bytes),
        Item::Bin(bytes) => {
            // A blob stays a blob only when the server's parser finds its
            // header already compact: bin 8 of 32 bytes or more, bin 16 over
            // 255, bin 32 over 65535. Otherwise it becomes a string.
            let compact = match header {
                0xc4 => bytes.len() > 0x1f,
                0xc5 => bytes.len() > 0xff,
                _ => bytes.len() > 0xffff,
            };
            if compact {
                out.extend_from_slice(element);
            } else {
                write_str(&mut out, bytes);
            }
        }
        Item::Nil | Item::Bool(_) | Item::Float(_) | Item::Ext(..) => {
            out.extend_from_slice(element)
        }
    }
    Ok(out)
}

/// A non-negative integer in its smallest msgpack form (the server's
/// `as_pack_uint64`).
fn write_uint(out: &mut Vec<u8>, value: u64) {
    if value < 1 << 7 {
        out.push(value as u8);
    } else if value < 1 << 8 {
        out.extend_from_slice(&[0xcc, value as u8]);
    } else if value < 1 << 16 {
        out.push(0xcd);
        out.extend_from_slice(&(value as u16).to_be_bytes());
    } else if value < 1 << 32 {
        out.push(0xce);
        out.extend_from_slice(&(value as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// A negative integer in its smallest msgpack form (`as_pack_int64`).
fn write_negative(out: &mut Vec<u8>, value: i64) {
    if value >= -(1 << 5) {
        out.push(value as u8);
    } else if value >= -(1 << 7) {
        out.extend_from_slice(&[0xd0, value as u8]);
    } else if value >= -(1 << 15) {
        out.push(0xd1);
        out.extend_from_slice(&(value as i16).to_be_bytes());
    } else if value >= -(1 << 31) {
        out.push(0xd2);
        out.extend_from_slice(&(value as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// A string with the smallest header (`as_pack_str`).
fn write_str(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len < 256 {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len < 65536 {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

/// HLL_MODIFY: the bin's new sketch (`None`: unchanged) and the op's
/// answer, if it has one.
pub fn modify(
    bin: Option<(u8, &[u8])>,
    payload: &[u8],
) -> Result<(Option<Vec<u8>>, Option<Answer>), ResultCode> {
    let old = bin.map(stored).transpose()?;
    let mut op = parse(payload, true)?;
    let no_fail = op.flags & flag::NO_FAIL != 0;
    match old {
        Some(_) if op.flags & flag::CREATE_ONLY != 0 => {
            return if no_fail {
                Ok((None, None))
            } else {
                Err(ResultCode::BinExists)
            };
        }
        None if op.flags & flag::UPDATE_ONLY != 0 => {
            return if no_fail {
                Ok((None, None))
            } else {
                Err(ResultCode::BinNotFound)
            };
        }
        _ => {}
    }
    prepare_modify(&mut op, old)?;
    let integer = |value: u64| Some((particle::INTEGER, value.to_be_bytes().to_vec()));
    let (new, answer) = match op.code {
        code::INIT => (Owned::new(op.index_bits, op.minhash_bits), None),
        code::ADD => {
            let mut new = match old {
                Some(old) => Owned {
                    bytes: old.bytes.to_vec(),
                },
                None => Owned::new(op.index_bits, op.minhash_bits),
            };
            let added = op
                .elements
                .iter()
                .filter(|element| add(&mut new, element))
                .count();
            (new, integer(added as u64))
        }
        code::SET_UNION => {
            let mut all = op.sketches.clone();
            all.extend(old);
            // As on the server, the union takes the shape of all the
            // sketches; `prepare_modify` settled the same shape or refused.
            let (index_bits, minhash_bits) = template(&all);
            let mut new = Owned::new(index_bits, minhash_bits);
            for sketch in &all {
                union_into(&mut new, *sketch);
            }
            (new, None)
        }
        code::REFRESH_COUNT => {
            let old = old.ok_or(ResultCode::BinNotFound)?;
            let mut new = Owned {
                bytes: old.bytes.to_vec(),
            };
            let count = estimate(new.view());
            new.set_cache(count);
            (new, integer(count))
        }
        _ => {
            let old = old.ok_or(ResultCode::BinNotFound)?;
            if op.index_bits == old.index_bits() {
                (
                    Owned {
                        bytes: old.bytes.to_vec(),
                    },
                    None,
                )
            } else {
                let mut new = Owned::new(op.index_bits, 0);
                union_into(&mut new, old);
                (new, None)
            }
        }
    };
    Ok((Some(new.bytes), answer))
}

/// The server's `prepare` step: settles the new sketch's index and minhash
/// bits, or refuses.
fn prepare_modify(op: &mut HllOp<'_>, old: Option<Sketch<'_>>) -> Result<(), ResultCode> {
    match op.code {
        code::INIT | code::ADD => match old {
            None => {
                if op.index_bits == UNSET {
                    return Err(ResultCode::OpNotApplicable);
                }
                if op.minhash_bits == UNSET {
                    op.minhash_bits = 0;
                }
            }
            Some(old) if op.code == code::ADD => {
                op.index_bits = old.index_bits();
                op.minhash_bits = old.minhash_bits();
            }
            Some(old) => {
                if op.index_bits == UNSET {
                    op.index_bits = old.index_bits();
                }
                if op.minhash_bits == UNSET {
                    op.minhash_bits = old.minhash_bits();
                }
                if !combined_bits_valid(u64::from(op.index_bits), u64::from(op.minhash_bits)) {
                    return Err(ResultCode::OpNotApplicable);
                }
            }
        },
        code::SET_UNION => {
            let mut index_bits = UNSET;
            let mut minhash_bits = UNSET;
            for sketch in &op.sketches {
                index_bits = index_bits.min(sketch.index_bits());
                if sketch.minhash_bits() != minhash_bits {
                    minhash_bits = if minhash_bits == UNSET {
                        sketch.minhash_bits()
                    } else {
                        0
                    };
                }
            }
            match old {
                None => {
                    op.index_bits = index_bits;
                    op.minhash_bits = minhash_bits;
                }
                Some(old) if op.flags & flag::ALLOW_FOLD == 0 => {
                    if old.index_bits() > index_bits {
                        return Err(ResultCode::OpNotApplicable);
                    }
                    if old.minhash_bits() != 0 && old.minhash_bits() != minhash_bits {
                        return Err(ResultCode::OpNotApplicable);
                    }
                    op.index_bits = old.index_bits();
                    op.minhash_bits = old.minhash_bits();
                }
                Some(old) => {
                    op.index_bits = old.index_bits().min(index_bits);
                    op.minhash_bits = if old.minhash_bits() != minhash_bits {
                        0
                    } else {
                        minhash_bits
                    };
                }
            }
        }
        code::REFRESH_COUNT => {
            if old.is_none() {
                return Err(ResultCode::BinNotFound);
            }
        }
        _ => {
            let old = old.ok_or(ResultCode::BinNotFound)?;
            if old.minhash_bits() > 0 || old.index_bits() < op.index_bits {
                return Err(ResultCode::OpNotApplicable);
            }
            op.minhash_bits = 0;
        }
    }
    Ok(())
}

/// HLL_READ on an HLL bin.
pub fn read(bin: (u8, &[u8]), payload: &[u8]) -> Result<Answer, ResultCode> {
    let sketch = stored(bin)?;
    let op = parse(payload, false)?;
    let integer = |value: u64| (particle::INTEGER, value.to_be_bytes().to_vec());
    let mut all = op.sketches.clone();
    all.push(sketch);
    Ok(match op.code {
        code::COUNT => integer(estimate(sketch)),
        code::UNION => {
            let (index_bits, minhash_bits) = template(&all);
            let mut union = Owned::new(index_bits, minhash_bits);
            for each in &all {
                union_into(&mut union, *each);
            }
            (particle::HLL, union.bytes)
        }
        code::UNION_COUNT => integer(union_estimate(&all)),
        code::INTERSECT_COUNT | code::SIMILARITY => {
            let given_minhash = op.sketches[0].minhash_bits();
            if op.sketches.len() > 2
                && (sketch.minhash_bits() == 0 || sketch.minhash_bits() != given_minhash)
            {
                return Err(ResultCode::OpNotApplicable);
            }
            if op.code == code::INTERSECT_COUNT {
                integer(intersect_estimate(&all))
            } else {
                (particle::FLOAT, similarity(&all).to_be_bytes().to_vec())
            }
        }
        code::DESCRIBE => {
            let mut list = vec![0x92];
            crate::cdt::value::write_int(&mut list, i64::from(sketch.index_bits()));
            crate::cdt::value::write_int(&mut list, i64::from(sketch.minhash_bits()));
            (particle::LIST, list)
        }
        _ => {
            let all_in = op
                .elements
                .iter()
                .all(|element| may_contain(sketch, element));
            integer(u64::from(all_in))
        }
    })
}

/// An HLL CALL of an expression on a sketch value: a read answers the op's
/// result, a modify the modified sketch.
pub fn call(sketch: &[u8], payload: &[u8], modify_copy: bool) -> Result<Answer, ResultCode> {
    if modify_copy {
        match modify(Some((particle::HLL, sketch)), payload)? {
            (Some(new), _) => Ok((particle::HLL, new)),
            (None, _) => Ok((particle::HLL, sketch.to_vec())),
        }
    } else {
        read((particle::HLL, sketch), payload)
    }
}

/// The register and value an element hashes to in a sketch of this shape.
fn hash(index_bits: u8, minhash_bits: u8, element: &[u8]) -> (u32, u64) {
    let (h1, h2) = murmur3_x64_128(element);
    let register = (h1 & ((1u64 << index_bits) - 1)) as u32;
    let minhash = (h1 >> index_bits) & ((1u64 << minhash_bits) - 1);
    let hll_value = u64::from(h2.trailing_zeros() + 1);
    (register, (hll_value << minhash_bits) | minhash)
}

fn add(sketch: &mut Owned, element: &[u8]) -> bool {
    let view = sketch.view();
    let (register, value) = hash(view.index_bits(), view.minhash_bits(), element);
    if view.register(register) < value {
        sketch.set_register(register, value);
        sketch.set_cache(0);
        true
    } else {
        false
    }
}

fn may_contain(sketch: Sketch<'_>, element: &[u8]) -> bool {
    let (register, value) = hash(sketch.index_bits(), sketch.minhash_bits(), element);
    value <= sketch.register(register)
}

/// The index and minhash bits a union of these sketches can have.
fn template(sketches: &[Sketch<'_>]) -> (u8, u8) {
    let mut index_bits = sketches[0].index_bits();
    let mut minhash_bits = sketches[0].minhash_bits();
    for sketch in &sketches[1..] {
        index_bits = index_bits.min(sketch.index_bits());
        if minhash_bits != 0 && minhash_bits != sketch.minhash_bits() {
            minhash_bits = 0;
        }
    }
    (index_bits, minhash_bits)
}

/// Merges `sketch` into `union`, whose index bits are not more than the
/// sketch's (registers fold onto `r mod 2^union_bits`).
fn union_into(union: &mut Owned, sketch: Sketch<'_>) {
    let union_minhash = union.bytes[2];
    let mask = (1u32 << union.bytes[1]) - 1;
    for r in 0..1u32 << sketch.index_bits() {
        let target = r & mask;
        let current = union.view().register(target);
        let value = sketch.register(r);
        if union_minhash == 0 {
            let current = current >> union_minhash;
            let value = value >> sketch.minhash_bits();
            if current < value {
                union.set_register(target, value);
            }
        } else if current < value {
            union.set_register(target, value);
        }
    }
    if union_minhash != 0 {
        union.set_cache(0);
    }
}

/// Ertl's improved estimator (arXiv 1702.01284, algorithm 6), or the
/// cached count.
fn estimate(sketch: Sketch<'_>) -> u64 {
    let cache = sketch.cache();
    if cache != 0 {
        return cache;
    }
    let registers = 1u32 << sketch.index_bits();
    let m = f64::from(registers);
    let mut counts = [0u32; HLL_VALUE_MAX + 1];
    for r in 0..registers {
        let value = (sketch.register(r) >> sketch.minhash_bits()) as u8 as usize;
        if let Some(count) = counts.get_mut(value) {
            *count += 1;
        }
    }
    let mut z = m * tau(f64::from(counts[HLL_VALUE_MAX]) / m);
    for k in (1..=HLL_VALUE_MAX).rev() {
        z = 0.5 * (z + f64::from(counts[k]));
    }
    z += m * sigma(f64::from(counts[0]) / m);
    let estimate = (alpha(sketch.index_bits()) * m * m / z).round();
    estimate as i64 as u64
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn alpha(index_bits: u8) -> f64 {
    match index_bits {
        4 => 0.673,
        5 => 0.697,
        6 => 0.709,
        bits => 0.7213 / (1.0 + 1.079 / f64::from(1u32 << bits)),
    }
}

fn union_estimate(sketches: &[Sketch<'_>]) -> u64 {
    let (index_bits, minhash_bits) = template(sketches);
    let mut union = Owned::new(index_bits, minhash_bits);
    for sketch in sketches {
        union_into(&mut union, *sketch);
    }
    estimate(union.view())
}

fn intersect_estimate(sketches: &[Sketch<'_>]) -> u64 {
    let (_, minhash_bits) = template(sketches);
    if minhash_bits == 0 {
        return hll_intersect_estimate(sketches);
    }
    let j = similarity(sketches);
    if j.is_nan() {
        return 0;
    }
    let union = union_estimate(sketches);
    (union as f64 * j).round() as i64 as u64
}

/// Inclusion–exclusion of HyperLogLog counts, for two or three sketches.
fn hll_intersect_estimate(sketches: &[Sketch<'_>]) -> u64 {
    let union = union_estimate(sketches);
    let mut sum: u64 = 0;
    for sketch in sketches {
        match sum.checked_add(estimate(*sketch)) {
            Some(total) => sum = total,
            None => {
                sum = u64::MAX;
                break;
            }
        }
    }
    if sketches.len() == 2 {
        return sum.saturating_sub(union);
    }
    let pairs = intersect_estimate(&sketches[0..2])
        .wrapping_add(intersect_estimate(&sketches[1..3]))
        .wrapping_add(intersect_estimate(&[sketches[0], sketches[2]]));
    let result = (union as i64).wrapping_sub((sum as i64).wrapping_sub(pairs as i64));
    result.max(0) as u64
}

/// HyperMinHash Jaccard similarity (arXiv 1710.08436), or the ratio of
/// HyperLogLog intersection and union counts without minhash bits.
fn similarity(sketches: &[Sketch<'_>]) -> f64 {
    let (index_bits, minhash_bits) = template(sketches);
    if minhash_bits == 0 {
        let intersect = hll_intersect_estimate(sketches);
        let union = union_estimate(sketches);
        return intersect as f64 / union as f64;
    }
    let with_data = sketches.iter().filter(|sketch| has_data(**sketch)).count();
    if with_data < sketches.len() {
        return if with_data > 0 { 0.0 } else { f64::NAN };
    }
    let mut aggregate = Owned::new(index_bits, minhash_bits);
    for sketch in sketches {
        union_into(&mut aggregate, *sketch);
    }
    let union_used = used_registers(aggregate.view());
    let mut aggregate = Owned::new(index_bits, minhash_bits);
    union_into(&mut aggregate, sketches[0]);
    for sketch in &sketches[1..] {
        intersect_one(&mut aggregate, *sketch);
    }
    let intersect_used = used_registers(aggregate.view());
    let collisions = if sketches.len() == 2 {
        expected_collisions(
            index_bits,
            minhash_bits,
            estimate(sketches[0]),
            estimate(sketches[1]),
        )
    } else {
        0.0
    };
    let result = (f64::from(intersect_used) - collisions) / f64::from(union_used);
    if result < 0.0 {
        0.0
    } else {
        result
    }
}

/// Whether any of the first `2^index_bits` register bytes is set (what the
/// server looks at).
fn has_data(sketch: Sketch<'_>) -> bool {
    let registers = sketch.registers();
    let n = (1usize << sketch.index_bits()).min(registers.len());
    registers[..n].iter().any(|&byte| byte != 0)
}

fn intersect_one(intersection: &mut Owned, sketch: Sketch<'_>) {
    let mask = (1u32 << intersection.bytes[1]) - 1;
    for r in 0..1u32 << sketch.index_bits() {
        let target = r & mask;
        let current = intersection.view().register(target);
        let value = sketch.register(r);
        intersection.set_register(target, if current == value { current } else { 0 });
    }
}

fn used_registers(sketch: Sketch<'_>) -> u32 {
    (0..1u32 << sketch.index_bits())
        .filter(|&r| sketch.register(r) != 0)
        .count() as u32
}

/// Expected minhash collisions between two sets of these sizes.
fn expected_collisions(index_bits: u8, minhash_bits: u8, count0: u64, count1: u64) -> f64 {
    let registers = f64::from(1u32 << index_bits);
    let buckets = 1i32 << HLL_BITS;
    let mut collisions = 0.0;
    for i in 1..=buckets {
        let (mut b1, mut b2) = if i != buckets {
            (2f64.powi(-i), 2f64.powi(-i + 1))
        } else {
            (0.0, 2f64.powi(-i + 1))
        };
        b1 /= registers;
        b2 /= registers;
        let pr_x = (1.0 - b1).powf(count0 as f64) - (1.0 - b2).powf(count0 as f64);
        let pr_y = (1.0 - b1).powf(count1 as f64) - (1.0 - b2).powf(count1 as f64);
        collisions += pr_x * pr_y;
    }
    collisions * registers / 2f64.powi(i32::from(minhash_bits))
}

/// MurmurHash3 x64-128 with seed 0: the two 64-bit halves.
fn murmur3_x64_128(data: &[u8]) -> (u64, u64) {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let mut h1: u64 = 0;
    let mut h2: u64 = 0;
    let mut blocks = data.chunks_exact(16);
    for block in blocks.by_ref() {
        let mut k1 = u64::from_le_bytes(block[..8].try_into().unwrap_or([0; 8]));
        let mut k2 = u64::from_le_bytes(block[8..].try_into().unwrap_or([0; 8]));
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    let mut k1: u64 = 0;
    let mut k2: u64 = 0;
    for (i, &byte) in tail.iter().enumerate().rev() {
        if i >= 8 {
            k2 ^= u64::from(byte) << ((i - 8) * 8);
        } else {
            k1 ^= u64::from(byte) << (i * 8);
        }
    }
    if tail.len() > 8 {
        h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    }
    if !tail.is_empty() {
        h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests;
