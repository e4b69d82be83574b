//! Redis requests and replies (RESP2).
//!
//! Key `n` is `<set>:<n>`. With one bin a record is a plain string
//! (`SET`/`GET`, as redis-benchmark uses); with several it is a hash
//! (`HSET`/`HGETALL`). Redis has no ordered key-range scan, so workload E's
//! scan is `SCAN <cursor> COUNT <length>`, continuing the connection's
//! cursor: it touches about `length` keys but reads names, not values.

use crate::codec::{bin_name, Codec, Reply, Request, ValueSource};
use crate::config::BinSpec;
use crate::stats::Outcome;

/// Deepest array nesting accepted in a reply (SCAN uses 2).
const NESTING_MAX: usize = 8;
/// Largest array accepted in a reply.
const ARRAY_ELEMENTS_MAX: i64 = 10_000_000;
/// Largest bulk string accepted in a reply (Redis' own limit).
const BULK_BYTES_MAX: i64 = 512 * 1024 * 1024;

/// Outcome code recorded for a Redis error reply (it has no numeric code).
pub const ERROR_REPLY_CODE: i32 = -1;

pub struct RedisCodec {
    prefix: Vec<u8>,
    bin_names: Vec<Vec<u8>>,
    values: ValueSource,
    scan_cursor: Vec<u8>,
    key: Vec<u8>,
    error_text: Option<String>,
}

/// A parsed reply, borrowing the received bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp<'a> {
    Simple(&'a [u8]),
    Error(&'a [u8]),
    Integer(i64),
    Bulk(Option<&'a [u8]>),
    Array(Option<Vec<Resp<'a>>>),
}

impl RedisCodec {
    pub fn new(set: &str, values: ValueSource) -> RedisCodec {
        let bin_names = (0..values.bins().len())
            .map(|index| bin_name(index).into_bytes())
            .collect();
        RedisCodec {
            prefix: format!("{set}:").into_bytes(),
            bin_names,
            values,
            scan_cursor: b"0".to_vec(),
            key: Vec::new(),
            error_text: None,
        }
    }

    fn set_key(&mut self, key: u64) {
        self.key.clear();
        self.key.extend_from_slice(&self.prefix);
        self.key
            .extend_from_slice(itoa::Buffer::new().format(key).as_bytes());
    }
}

impl Codec for RedisCodec {
    // PERF: hot path
    fn encode(&mut self, request: Request, key: u64, out: &mut Vec<u8>) {
        self.set_key(key);
        let hash = self.bin_names.len() > 1;
        match request {
            Request::Read => {
                let command: &[u8] = if hash { b"HGETALL" } else { b"GET" };
                encode_command(out, &[command, &self.key]);
            }
            Request::Write => {
                let arguments = if hash {
                    2 + 2 * self.bin_names.len()
                } else {
                    3
                };
                array_header(out, arguments);
                bulk(out, if hash { b"HSET" } else { b"SET" });
                bulk(out, &self.key);
                let names = &self.bin_names;
                self.values.for_each_value(|index, spec, value| {
                    if hash {
                        bulk(out, &names[index]);
                    }
                    match spec {
                        BinSpec::Integer => {
                            let mut eight = [0u8; 8];
                            eight.copy_from_slice(value);
                            let mut text = itoa::Buffer::new();
                            bulk(out, text.format(i64::from_be_bytes(eight)).as_bytes());
                        }
                        BinSpec::String { .. } | BinSpec::Blob { .. } => bulk(out, value),
                    }
                });
            }
            Request::Scan { length } => {
                let count = length.to_string();
                encode_command(
                    out,
                    &[b"SCAN", &self.scan_cursor, b"COUNT", count.as_bytes()],
                );
            }
        }
    }

    fn decode(&mut self, request: Request, input: &[u8]) -> Result<Option<(Reply, usize)>, String> {
        let Some((value, used)) = parse(input, 0)? else {
            return Ok(None);
        };
        let reply = match (request, value) {
            (_, Resp::Error(text)) => {
                if self.error_text.is_none() {
                    self.error_text = Some(String::from_utf8_lossy(text).into_owned());
                }
                Reply::of(Outcome::Error {
                    code: ERROR_REPLY_CODE,
                })
            }
            (Request::Read, Resp::Bulk(None)) => Reply::of(Outcome::NotFound),
            (Request::Read, Resp::Array(Some(items))) if items.is_empty() => {
                Reply::of(Outcome::NotFound)
            }
            (Request::Scan { .. }, Resp::Array(Some(items))) => match items.as_slice() {
                [Resp::Bulk(Some(cursor)), Resp::Array(Some(keys))] => {
                    self.scan_cursor = cursor.to_vec();
                    Reply {
                        outcome: Outcome::Ok,
                        records: keys.len() as u64,
                    }
                }
                _ => return Err("malformed SCAN reply".to_string()),
            },
            _ => Reply::of(Outcome::Ok),
        };
        Ok(Some((reply, used)))
    }

    fn take_error_text(&mut self) -> Option<String> {
        self.error_text.take()
    }
}

/// Appends `*<n>\r\n` then each argument as a bulk string.
pub fn encode_command(out: &mut Vec<u8>, arguments: &[&[u8]]) {
    array_header(out, arguments.len());
    for argument in arguments {
        bulk(out, argument);
    }
}

// PERF: hot path (itoa, not fmt: formatting was a tenth of the client's CPU)
fn array_header(out: &mut Vec<u8>, count: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(data.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Parses one reply from the front of `input`: `Ok(None)` while incomplete.
pub fn parse(input: &[u8], depth: usize) -> Result<Option<(Resp<'_>, usize)>, String> {
    if depth > NESTING_MAX {
        return Err("reply nested too deeply".to_string());
    }
    let Some(line_end) = input.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let Some((&kind, line)) = input[..line_end].split_first() else {
        return Err("empty reply line".to_string());
    };
    let after_line = line_end + 2;
    let number = || -> Result<i64, String> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .ok_or_else(|| format!("bad number in reply: {}", String::from_utf8_lossy(line)))
    };
    match kind {
        b'+' => Ok(Some((Resp::Simple(line), after_line))),
        b'-' => Ok(Some((Resp::Error(line), after_line))),
        b':' => Ok(Some((Resp::Integer(number()?), after_line))),
        b'$' => {
            let length = number()?;
            if length < 0 {
                return Ok(Some((Resp::Bulk(None), after_line)));
            }
            if length > BULK_BYTES_MAX {
                return Err(format!("bulk reply of {length} bytes is too large"));
            }
            let end = after_line + length as usize;
            if input.len() < end + 2 {
                return Ok(None);
            }
            if &input[end..end + 2] != b"\r\n" {
                return Err("bulk reply not followed by CRLF".to_string());
            }
            Ok(Some((Resp::Bulk(Some(&input[after_line..end])), end + 2)))
        }
        b'*' => {
            let count = number()?;
            if count < 0 {
                return Ok(Some((Resp::Array(None), after_line)));
            }
            if count > ARRAY_ELEMENTS_MAX {
                return Err(format!("array reply of {count} elements is too large"));
            }
            let mut items = Vec::with_capacity(count.min(1024) as usize);
            let mut at = after_line;
            for _ in 0..count {
                let Some((item, used)) = parse(&input[at..], depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                at += used;
            }
            Ok(Some((Resp::Array(Some(items)), at)))
        }
        other => Err(format!("unknown reply type byte 0x{other:02x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec(bins: Vec<BinSpec>) -> RedisCodec {
        RedisCodec::new("demo", ValueSource::new(bins, 1))
    }

    #[test]
    fn single_bin_uses_strings() {
        let mut codec = codec(vec![BinSpec::String { bytes: 3 }]);
        let mut out = Vec::new();
        codec.encode(Request::Read, 42, &mut out);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$7\r\ndemo:42\r\n");
        out.clear();
        codec.encode(Request::Write, 42, &mut out);
        assert!(out.starts_with(b"*3\r\n$3\r\nSET\r\n$7\r\ndemo:42\r\n$3\r\n"));
        assert_eq!(
            out.len(),
            b"*3\r\n$3\r\nSET\r\n$7\r\ndemo:42\r\n$3\r\nabc\r\n".len()
        );
    }

    #[test]
    fn several_bins_use_a_hash() {
        let mut codec = codec(vec![BinSpec::Integer, BinSpec::Blob { bytes: 2 }]);
        let mut out = Vec::new();
        codec.encode(Request::Write, 1, &mut out);
        let text = String::from_utf8(out.clone()).expect("text");
        assert!(
            text.starts_with("*6\r\n$4\r\nHSET\r\n$6\r\ndemo:1\r\n$4\r\nbin0\r\n"),
            "{text}"
        );
        let (value, used) = parse(&out, 0).expect("valid").expect("complete");
        assert_eq!(used, out.len());
        let Resp::Array(Some(items)) = value else {
            panic!("array")
        };
        assert_eq!(items.len(), 6);
        out.clear();
        codec.encode(Request::Read, 1, &mut out);
        assert_eq!(out, b"*2\r\n$7\r\nHGETALL\r\n$6\r\ndemo:1\r\n");
    }

    #[test]
    fn parses_replies_and_waits_for_partial_ones() {
        let input = b"+OK\r\n$-1\r\n$5\r\nhello\r\n-ERR wrong\r\n*0\r\n:12\r\n";
        let mut at = 0;
        let mut codec = codec(vec![BinSpec::Integer]);
        let mut outcomes = Vec::new();
        while let Some((reply, used)) = codec.decode(Request::Read, &input[at..]).expect("valid") {
            outcomes.push(reply.outcome);
            at += used;
        }
        assert_eq!(at, input.len());
        assert_eq!(codec.take_error_text().as_deref(), Some("ERR wrong"));
        assert_eq!(codec.take_error_text(), None);
        assert_eq!(
            outcomes,
            vec![
                Outcome::Ok,
                Outcome::NotFound,
                Outcome::Ok,
                Outcome::Error {
                    code: ERROR_REPLY_CODE
                },
                Outcome::NotFound,
                Outcome::Ok
            ]
        );
        for cut in 0..b"$5\r\nhello\r\n".len() {
            assert_eq!(parse(&b"$5\r\nhello\r\n"[..cut], 0), Ok(None));
        }
        assert!(parse(b"?x\r\n", 0).is_err());
        assert!(parse(b"$5\r\nhelloXX", 0).is_err());
    }

    #[test]
    fn scan_follows_the_cursor() {
        let mut codec = codec(vec![BinSpec::Integer]);
        let mut out = Vec::new();
        codec.encode(Request::Scan { length: 10 }, 0, &mut out);
        assert_eq!(
            out,
            b"*4\r\n$4\r\nSCAN\r\n$1\r\n0\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n"
        );
        let reply = b"*2\r\n$2\r\n17\r\n*2\r\n$3\r\na:1\r\n$3\r\na:2\r\n";
        let (decoded, used) = codec
            .decode(Request::Scan { length: 10 }, reply)
            .expect("valid")
            .expect("complete");
        assert_eq!(used, reply.len());
        assert_eq!(decoded.records, 2);
        out.clear();
        codec.encode(Request::Scan { length: 10 }, 0, &mut out);
        assert!(out.starts_with(b"*4\r\n$4\r\nSCAN\r\n$2\r\n17\r\n"));
    }
}
