//! Function libraries (FUNCTION LOAD's code and what it registered) and
//! FUNCTION DUMP's payload: Redis 7.0's format, so a dump moves between
//! Bolide and Redis. Each library is the RDB opcode 245 followed by its
//! code as an RDB string; then the RDB version (10, two bytes
//! little-endian) and a CRC-64 (Jones, reflected) of everything before it,
//! eight bytes little-endian. Strings are written plain; LZF-compressed
//! strings (what Redis writes for code over 20 bytes) are read too.

use std::collections::BTreeMap;

const OPCODE_FUNCTION2: u8 = 245;
const RDB_VERSION: u16 = 10;
/// The largest library code a payload may declare.
const CODE_BYTES_MAX: usize = 512 << 20;

/// A function as FUNCTION LIST shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<String>,
    pub flags: Vec<&'static str>,
}

/// A loaded library.
#[derive(Clone, Debug, PartialEq)]
pub struct Library {
    /// The code as loaded, shebang line included.
    pub code: Vec<u8>,
    pub functions: Vec<FunctionInfo>,
}

/// Every library of the node, by name.
pub type Libraries = BTreeMap<String, Library>;

/// A library's metadata line: its name, and the code after the line
/// (starting with the line's newline, so line numbers hold).
pub fn metadata(code: &[u8]) -> Result<(String, &[u8]), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".to_owned());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("Invalid library metadata".to_owned());
    };
    let parts = crate::resp::split_args(&code[..end])
        .filter(|parts| !parts.is_empty())
        .ok_or_else(|| "Invalid library metadata".to_owned())?;
    let engine = String::from_utf8_lossy(&parts[0][2..]).into_owned();
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".to_owned(),
                );
            }
            name = Some(String::from_utf8_lossy(&part[5..]).into_owned());
            continue;
        }
        return Err(format!(
            "Invalid metadata value given: {}",
            String::from_utf8_lossy(part)
        ));
    }
    let Some(name) = name else {
        return Err("Library name was not given".to_owned());
    };
    if !super::lua::valid_name(&name) {
        return Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".to_owned());
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    Ok((name, &code[end..]))
}

/// FUNCTION DUMP's payload.
pub fn dump(libraries: &Libraries) -> Vec<u8> {
    let mut out = Vec::new();
    for library in libraries.values() {
        out.push(OPCODE_FUNCTION2);
        write_length(&mut out, library.code.len() as u64);
        out.extend_from_slice(&library.code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The library codes in a FUNCTION RESTORE payload.
pub fn restore(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let wrong = || "DUMP payload version or checksum are wrong".to_owned();
    if payload.len() < 10 {
        return Err(wrong());
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > RDB_VERSION {
        return Err(wrong());
    }
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&footer[2..]);
    if crc64(0, &payload[..payload.len() - 8]) != u64::from_le_bytes(crc) {
        return Err(wrong());
    }
    let mut codes = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let opcode = body[at];
        at += 1;
        if opcode != OPCODE_FUNCTION2 {
            return Err("given type is not a function".to_owned());
        }
        let code = read_string(body, &mut at)
            .ok_or_else(|| "failed loading the given functions payload".to_owned())?;
        codes.push(code);
    }
    Ok(codes)
}

fn write_length(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// An RDB length: the value, or with `true` a special encoding's number.
fn read_length(data: &[u8], at: &mut usize) -> Option<(u64, bool)> {
    let first = *data.get(*at)?;
    *at += 1;
    match first >> 6 {
        0 => Some((u64::from(first & 0x3f), false)),
        1 => {
            let second = *data.get(*at)?;
            *at += 1;
            Some(((u64::from(first & 0x3f) << 8) | u64::from(second), false))
        }
        2 => {
            let width = match first {
                0x80 => 4,
                0x81 => 8,
                _ => return None,
            };
            let bytes = data.get(*at..*at + width)?;
            *at += width;
            Some((
                bytes.iter().fold(0u64, |n, &b| (n << 8) | u64::from(b)),
                false,
            ))
        }
        _ => Some((u64::from(first & 0x3f), true)),
    }
}

fn read_string(data: &[u8], at: &mut usize) -> Option<Vec<u8>> {
    let (length, special) = read_length(data, at)?;
    if !special {
        let length = usize::try_from(length)
            .ok()
            .filter(|&n| n <= CODE_BYTES_MAX)?;
        let bytes = data.get(*at..*at + length)?.to_vec();
        *at += length;
        return Some(bytes);
    }
    match length {
        0..=2 => {
            let width = 1usize << length;
            let bytes = data.get(*at..*at + width)?;
            *at += width;
            let mut raw = [0u8; 8];
            raw[..width].copy_from_slice(bytes);
            let value = match width {
                1 => i64::from(bytes[0] as i8),
                2 => i64::from(i16::from_le_bytes([raw[0], raw[1]])),
                _ => i64::from(i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
            };
            Some(value.to_string().into_bytes())
        }
        3 => {
            let (compressed, _) = read_length(data, at)?;
            let (length, _) = read_length(data, at)?;
            let compressed = usize::try_from(compressed).ok()?;
            let length = usize::try_from(length)
                .ok()
                .filter(|&n| n <= CODE_BYTES_MAX)?;
            let input = data.get(*at..*at + compressed)?;
            *at += compressed;
            lzf_decompress(input, length)
        }
        _ => None,
    }
}

/// LZF decompression (the format liblzf writes): a literal run is a byte
/// below 32 (run length - 1) then the bytes; a back reference is a length
/// in the top three bits (7: one more length byte follows) and a 13-bit
/// distance.
fn lzf_decompress(input: &[u8], length: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(length);
    let mut at = 0;
    while at < input.len() {
        let control = usize::from(input[at]);
        at += 1;
        if control < 32 {
            let run = control + 1;
            out.extend_from_slice(input.get(at..at + run)?);
            at += run;
        } else {
            let mut run = control >> 5;
            if run == 7 {
                run += usize::from(*input.get(at)?);
                at += 1;
            }
            let distance = ((control & 0x1f) << 8) + usize::from(*input.get(at)?) + 1;
            at += 1;
            let start = out.len().checked_sub(distance)?;
            for i in 0..run + 2 {
                let byte = out[start + i];
                out.push(byte);
            }
        }
        if out.len() > length {
            return None;
        }
    }
    (out.len() == length).then_some(out)
}

/// CRC-64 as Redis computes it (Jones polynomial, reflected, no final
/// xor): `crc64(0, "123456789") == 0xe9c6d914c4b8d9ca`.
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 reflected
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_matches_redis() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn a_dump_restores() {
        let mut libraries = Libraries::new();
        libraries.insert(
            "a".to_owned(),
            Library {
                code: b"#!lua name=a\nredis.register_function('f', function() return 1 end)"
                    .to_vec(),
                functions: Vec::new(),
            },
        );
        let payload = dump(&libraries);
        assert_eq!(restore(&payload), Ok(vec![libraries["a"].code.clone()]));
        let mut damaged = payload.clone();
        damaged[3] ^= 1;
        assert_eq!(
            restore(&damaged),
            Err("DUMP payload version or checksum are wrong".to_owned())
        );
    }

    #[test]
    fn redis_dumps_restore() {
        // FUNCTION DUMP of Redis 7.0.15 holding the library below (its
        // code LZF-compressed).
        let payload = hex(
            "f5c34056405b1f23216c7561206e616d653d6d796c69620a72656469732e72656769737465725f0b\
             66756e6374696f6e28276d79400b02272c2040066012116b6579732c2061726773292072657475\
             726e600c075b315d20656e64290a008d5936adc6e707da",
        );
        assert_eq!(
            restore(&payload),
            Ok(vec![
                b"#!lua name=mylib\nredis.register_function('myfunc', \
                      function(keys, args) return args[1] end)"
                    .to_vec()
            ])
        );
    }

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| {
                u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("00"), 16).unwrap_or(0)
            })
            .collect()
    }

    #[test]
    fn metadata_follows_redis() {
        assert_eq!(
            metadata(b"return 1"),
            Err("Missing library metadata".to_owned())
        );
        assert_eq!(
            metadata(b"#!lua name=x"),
            Err("Invalid library metadata".to_owned())
        );
        assert_eq!(
            metadata(b"#!lua\nx"),
            Err("Library name was not given".to_owned())
        );
        assert_eq!(
            metadata(b"#!lua name=a foo=b\nx"),
            Err("Invalid metadata value given: foo=b".to_owned())
        );
        assert_eq!(
            metadata(b"#!js name=a\nx"),
            Err("Engine 'js' not found".to_owned())
        );
        assert_eq!(
            metadata(b"#!LUA name=a-b\nx"),
            Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".to_owned())
        );
        assert_eq!(
            metadata(b"#!lua name=mylib\nreturn 1"),
            Ok(("mylib".to_owned(), b"\nreturn 1".as_slice()))
        );
    }
}
