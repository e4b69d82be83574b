//! The Redis port's RESP parser (`bolide_redis::resp::parse`): any bytes a
//! client sends are taken off the front as whole requests until they run
//! out (`Ok(None)`) or a protocol error ends the connection. Every request
//! takes at least one byte and stays within Redis's limits, parsing is
//! deterministic, a strict prefix of a request is never a different
//! request, and a request re-encoded as a RESP array parses back to the
//! same arguments.

use bolide_redis::resp::{parse, ARGS_MAX, BULK_BYTES_MAX};

/// The longest input whose every prefix is also parsed (the prefix check
/// is quadratic).
const PREFIXES_UP_TO: usize = 4096;

pub fn check(bytes: &[u8]) {
    let mut at = 0;
    // Every request takes at least one byte, so this ends.
    while at < bytes.len() {
        let rest = &bytes[at..];
        let first = parse(rest);
        assert_eq!(first, parse(rest), "parsing is not deterministic");
        match first {
            Ok(None) => return,
            Err(error) => {
                assert!(!error.0.is_empty(), "a protocol error without text");
                assert!(error.text().starts_with("Protocol error: "));
                return;
            }
            Ok(Some((args, used))) => {
                assert!(
                    used > 0 && used <= rest.len(),
                    "took {used} of {}",
                    rest.len()
                );
                assert!(args.len() <= ARGS_MAX);
                assert!(args.iter().all(|arg| arg.len() <= BULK_BYTES_MAX));
                if used <= PREFIXES_UP_TO {
                    for cut in 0..used {
                        if let Ok(Some((other, took))) = parse(&rest[..cut]) {
                            // Only an inline line ended earlier may parse
                            // (a multibulk request needs all its bytes).
                            assert_ne!(rest[0], b'*', "a prefix of {cut} bytes parsed");
                            assert!(took <= cut);
                            assert!(other.len() <= ARGS_MAX);
                        }
                    }
                }
                let encoded = encode(&args);
                assert_eq!(
                    parse(&encoded),
                    Ok(Some((args.clone(), encoded.len()))),
                    "a request re-encoded parses differently"
                );
                at += used;
            }
        }
    }
}

/// Arguments as a RESP array of bulk strings (what a client library sends).
fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}
