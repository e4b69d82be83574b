//! The dispatcher and the commands over an in-memory stand-in for the
//! transaction layer (generation checks, create-only and deletes as the
//! real one answers them): fixed conversations, and hostile arguments to
//! every command, which must each get one reply and never panic.

use crate::keyspace::Records;
use crate::session::{Session, Shared, Step};
use bolide_store::{NamespaceConfig, Store};
use bolide_transaction::{Action, Answer, RecordRequest, Reply};
use bolide_types::ResultCode;
use std::collections::HashMap;
use std::sync::Arc;

type Bins = Vec<(Vec<u8>, u8, Vec<u8>)>;

struct Memory {
    records: HashMap<[u8; 20], (u16, Bins)>,
    store: Store,
}

impl Memory {
    fn new() -> Memory {
        Memory {
            records: HashMap::new(),
            store: Store::new(vec![NamespaceConfig::with_name("test")]),
        }
    }
}

impl Records for Memory {
    fn run(&mut self, request: &RecordRequest<'_>, answer: &mut Answer) -> Result<(), String> {
        let digest = request.digest.0;
        let existing = self.records.get(&digest);
        let generation = existing.map_or(0, |(g, _)| *g);
        let policy = request.policy;
        if request.action == Action::Read {
            match existing {
                Some((generation, bins)) => {
                    answer.begin();
                    for (name, particle_type, value) in bins {
                        answer.bin(1, *particle_type, name, value);
                    }
                    answer.end(ResultCode::Ok, *generation, 0);
                }
                None => answer.fail(ResultCode::NotFound),
            }
            return Ok(());
        }
        if policy.generation_equal && policy.generation != u32::from(generation) {
            answer.fail(ResultCode::Generation);
            return Ok(());
        }
        if policy.delete {
            match self.records.remove(&digest) {
                Some(_) => answer.end(ResultCode::Ok, 0, 0),
                None => answer.fail(ResultCode::NotFound),
            }
            return Ok(());
        }
        if policy.create_only && existing.is_some() {
            answer.fail(ResultCode::RecordExists);
            return Ok(());
        }
        let bins: Bins = request
            .ops
            .iter()
            .map(|op| (op.name.to_vec(), op.particle_type, op.value.to_vec()))
            .collect();
        let next = generation.wrapping_add(1).max(1);
        self.records.insert(digest, (next, bins));
        answer.end(ResultCode::Ok, next, 0);
        Ok(())
    }

    fn store(&self) -> &Store {
        &self.store
    }
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn session() -> Session {
    Session::new(
        Arc::new(Shared::new("test".to_owned(), 6379)),
        "127.0.0.1:1".to_owned(),
        "127.0.0.1:6379".to_owned(),
    )
}

/// Sends one request; the reply bytes and the step.
fn send(session: &mut Session, memory: &mut Memory, args: &[&[u8]]) -> (Vec<u8>, Step) {
    let input = encode(args);
    let mut out = Vec::new();
    let (used, step) = session.feed(&input, &mut out, memory);
    if step != Step::Close && !matches!(step, Step::Block(_)) {
        assert_eq!(used, input.len());
    }
    (out, step)
}

#[test]
fn conversations_answer_as_redis() {
    let mut memory = Memory::new();
    let mut s = session();
    let mut say =
        |args: &[&[u8]]| String::from_utf8_lossy(&send(&mut s, &mut memory, args).0).into_owned();
    assert_eq!(say(&[b"SET", b"k", b"1"]), "+OK\r\n");
    assert_eq!(say(&[b"INCRBY", b"k", b"41"]), ":42\r\n");
    assert_eq!(say(&[b"GET", b"k"]), "$2\r\n42\r\n");
    assert_eq!(say(&[b"HSET", b"h", b"a", b"1"]), ":1\r\n");
    assert_eq!(
        say(&[b"GET", b"h"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(say(&[b"HDEL", b"h", b"a"]), ":1\r\n");
    assert_eq!(say(&[b"EXISTS", b"h"]), ":0\r\n");
    assert_eq!(say(&[b"MULTI"]), "+OK\r\n");
    assert_eq!(say(&[b"INCR", b"k"]), "+QUEUED\r\n");
    assert_eq!(say(&[b"LPUSH", b"k", b"x"]), "+QUEUED\r\n");
    assert_eq!(
        say(&[b"EXEC"]),
        "*2\r\n:43\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(
        say(&[b"ZADD", b"z", b"1", b"b", b"1", b"a", b"0.5", b"c"]),
        ":3\r\n"
    );
    assert_eq!(
        say(&[b"ZRANGE", b"z", b"0", b"-1"]),
        "*3\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
}

#[test]
fn a_blocking_pop_waits_then_times_out() {
    let mut memory = Memory::new();
    let mut s = session();
    let (out, step) = send(&mut s, &mut memory, &[b"BLPOP", b"q", b"0.05"]);
    assert!(out.is_empty());
    let Step::Block(_) = step else {
        panic!("expected the pop to wait, got {step:?}");
    };
    std::thread::sleep(std::time::Duration::from_millis(80));
    let (out, step) = send(&mut s, &mut memory, &[b"BLPOP", b"q", b"0.05"]);
    assert_eq!(out, b"*-1\r\n");
    assert_eq!(step, Step::Read);
    send(&mut s, &mut memory, &[b"RPUSH", b"q", b"job"]);
    let (out, _) = send(&mut s, &mut memory, &[b"BLPOP", b"q", b"0"]);
    assert_eq!(out, b"*2\r\n$1\r\nq\r\n$3\r\njob\r\n");
}

/// Counts the complete top-level replies in `bytes`.
fn replies(bytes: &[u8]) -> usize {
    fn one(bytes: &[u8], at: &mut usize) -> bool {
        let Some(&kind) = bytes.get(*at) else {
            return false;
        };
        let Some(end) = bytes[*at..].windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let line = &bytes[*at + 1..*at + end];
        *at += end + 2;
        let n: i64 = std::str::from_utf8(line)
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        match kind {
            b'$' | b'=' | b'!' if n >= 0 => {
                *at += n as usize + 2;
                true
            }
            b'*' | b'~' | b'>' => (0..n.max(0)).all(|_| one(bytes, at)),
            b'%' => (0..2 * n.max(0)).all(|_| one(bytes, at)),
            _ => true,
        }
    }
    let mut at = 0;
    let mut count = 0;
    while at < bytes.len() && one(bytes, &mut at) {
        count += 1;
    }
    count
}

#[test]
fn hostile_arguments_get_one_reply_each_and_never_panic() {
    let words: &[&[u8]] = &[
        b"",
        b"0",
        b"1",
        b"-1",
        b"2",
        b"3",
        b"-2",
        b"100",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"99999999999",
        b"4294967296",
        b"1.5",
        b"nan",
        b"inf",
        b"-inf",
        b"+inf",
        b"(1",
        b"[a",
        b"(a",
        b"-",
        b"+",
        b"abc",
        b"\xff\xfe",
        b"k1",
        b"k2",
        b"k3",
        b"k4",
        b"k5",
        b"withscores",
        b"limit",
        b"byscore",
        b"bylex",
        b"rev",
        b"ex",
        b"px",
        b"exat",
        b"pxat",
        b"keepttl",
        b"get",
        b"nx",
        b"xx",
        b"gt",
        b"lt",
        b"ch",
        b"incr",
        b"count",
        b"match",
        b"*",
        b"type",
        b"left",
        b"right",
        b"before",
        b"after",
        b"and",
        b"not",
        b"bit",
        b"byte",
        b"persist",
        b"setname",
        b"getname",
        b"id",
        b"info",
        b"list",
        b"setinfo",
        b"lib-name",
        b"get",
        b"set",
        b"maxmemory",
        b"3",
        b"auth",
        b"docs",
        b"getkeys",
    ];
    let mut memory = Memory::new();
    let mut s = session();
    for (key, args) in [
        (b"k1".as_slice(), vec![b"SET".as_slice(), b"k1", b"10"]),
        (b"k2", vec![b"RPUSH", b"k2", b"a", b"b", b"c"]),
        (b"k3", vec![b"HSET", b"k3", b"f", b"v", b"n", b"5"]),
        (b"k4", vec![b"SADD", b"k4", b"a", b"b"]),
        (b"k5", vec![b"ZADD", b"k5", b"1", b"a", b"2", b"b"]),
    ] {
        let _ = key;
        send(&mut s, &mut memory, &args);
    }
    for args in [
        vec![b"SRANDMEMBER".as_slice(), b"k4", b"-9223372036854775808"],
        vec![b"SETRANGE", b"k1", b"9223372036854775807", b"x"],
        vec![
            b"GETRANGE",
            b"k1",
            b"-9223372036854775808",
            b"9223372036854775807",
        ],
        vec![
            b"LRANGE",
            b"k2",
            b"-9223372036854775808",
            b"9223372036854775807",
        ],
        vec![
            b"ZRANGE",
            b"k5",
            b"0",
            b"-1",
            b"BYSCORE",
            b"LIMIT",
            b"9223372036854775807",
            b"-1",
        ],
        vec![b"SET", b"k9", b"v", b"PXAT", b"9223372036854775807"],
        vec![b"EXPIRE", b"k1", b"9223372036854775807"],
        vec![b"PEXPIREAT", b"k1", b"-9223372036854775808"],
        vec![b"INCRBYFLOAT", b"k1", b"1e308"],
        vec![b"INCRBYFLOAT", b"k1", b"1e308"],
        vec![b"BITCOUNT", b"k1", b"-9223372036854775808", b"-1", b"BIT"],
        vec![
            b"BITPOS",
            b"k1",
            b"0",
            b"-9223372036854775808",
            b"9223372036854775807",
            b"BIT",
        ],
    ] {
        let (out, _) = send(&mut s, &mut memory, &args);
        assert_eq!(
            replies(&out),
            1,
            "{:?} answered {:?}",
            args,
            String::from_utf8_lossy(&out)
        );
    }
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let names: Vec<&str> = crate::table::COMMANDS
        .iter()
        .map(|spec| spec.name)
        .filter(|name| {
            !matches!(
                *name,
                "quit"
                    | "flushall"
                    | "flushdb"
                    | "subscribe"
                    | "unsubscribe"
                    | "psubscribe"
                    | "punsubscribe"
                    | "ssubscribe"
                    | "sunsubscribe"
            )
        })
        .collect();
    for _ in 0..20_000 {
        let name = names[next(names.len())];
        let mut args: Vec<&[u8]> = vec![name.as_bytes()];
        for _ in 0..next(7) {
            args.push(words[next(words.len())]);
        }
        // A blocking pop with a timeout of 0 would wait forever: bounded.
        if matches!(name, "blpop" | "brpop") {
            args.push(b"0.001");
        }
        let input = encode(&args);
        let mut out = Vec::new();
        let (_, step) = s.feed(&input, &mut out, &mut memory);
        if let Step::Script(call) = step {
            // A script command runs on the engine; here, in place.
            out.extend_from_slice(&call.run_here(&mut memory, true));
            assert_eq!(replies(&out), 1, "{args:?}");
            continue;
        }
        if let Step::Block(_) = step {
            // Retried later; drop the wait.
            std::thread::sleep(std::time::Duration::from_millis(2));
            out.clear();
            let (_, step) = s.feed(&input, &mut out, &mut memory);
            assert!(!matches!(step, Step::Close), "{args:?}");
            if let Step::Block(_) = step {
                continue;
            }
        }
        assert_eq!(
            replies(&out),
            1,
            "{:?} answered {:?}",
            args,
            String::from_utf8_lossy(&out)
        );
        if name == "multi" {
            let mut out = Vec::new();
            s.feed(&encode(&[b"DISCARD"]), &mut out, &mut memory);
        }
    }
}

/// Sends one request and, when it is a script command, runs it on this
/// thread as the engine thread would.
fn send_script(session: &mut Session, memory: &mut Memory, args: &[&[u8]]) -> String {
    let (mut out, step) = send(session, memory, args);
    if let Step::Script(call) = step {
        out.extend_from_slice(&call.run_here(memory, true));
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn scripts_run_through_the_dispatcher() {
    let mut memory = Memory::new();
    let mut s = session();
    let mut say = |args: &[&[u8]]| send_script(&mut s, &mut memory, args);
    assert_eq!(
        say(&[
            b"EVAL",
            b"redis.call('set', KEYS[1], ARGV[1]) return redis.call('incr', KEYS[1])",
            b"1",
            b"n",
            b"41"
        ]),
        ":42\r\n"
    );
    assert_eq!(say(&[b"GET", b"n"]), "$2\r\n42\r\n");
    let sha = crate::scripting::lua::sha1_hex(b"return redis.call('get', KEYS[1])");
    assert_eq!(
        say(&[b"SCRIPT", b"LOAD", b"return redis.call('get', KEYS[1])"]),
        format!("$40\r\n{sha}\r\n")
    );
    assert_eq!(
        say(&[b"EVALSHA", sha.as_bytes(), b"1", b"n"]),
        "$2\r\n42\r\n"
    );
    assert_eq!(
        say(&[
            b"FUNCTION",
            b"LOAD",
            b"#!lua name=lib\nredis.register_function('double', function(keys) \
              return redis.call('incrby', keys[1], redis.call('get', keys[1])) end)"
        ]),
        "$3\r\nlib\r\n"
    );
    assert_eq!(say(&[b"FCALL", b"double", b"1", b"n"]), ":84\r\n");
    assert_eq!(
        say(&[b"FCALL_RO", b"double", b"1", b"n"]),
        "-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
    // Inside MULTI a script is queued and runs in EXEC.
    assert_eq!(say(&[b"MULTI"]), "+OK\r\n");
    assert_eq!(
        say(&[b"EVAL", b"return redis.call('incr', 'n')", b"0"]),
        "+QUEUED\r\n"
    );
    assert_eq!(say(&[b"EXEC"]), "*1\r\n:85\r\n");
}
