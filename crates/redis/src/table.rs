//! The command table: name, arity (negative: at least), flags, and key
//! positions (first, last, step), as `COMMAND` reports them and as the
//! dispatcher checks arity. Only commands Bolide serves are listed.

pub struct Spec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first: i32,
    pub last: i32,
    pub step: i32,
    pub category: &'static str,
}

const R: &[&str] = &["readonly", "fast"];
const RS: &[&str] = &["readonly"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write"];
const C: &[&str] = &["fast", "loading", "stale", "noscript"];
const B: &[&str] = &["write", "noscript", "blocking"];
const SCRIPT: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];
const SCRIPT_RO: &[&str] = &[
    "readonly",
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $first:expr, $last:expr, $step:expr, $category:literal) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first: $first,
            last: $last,
            step: $step,
            category: $category,
        }
    };
}

pub static COMMANDS: &[Spec] = &[
    // Connection and server.
    spec!("ping", -1, C, 0, 0, 0, "connection"),
    spec!("echo", 2, C, 0, 0, 0, "connection"),
    spec!("hello", -1, C, 0, 0, 0, "connection"),
    spec!("auth", -2, C, 0, 0, 0, "connection"),
    spec!("acl", -2, C, 0, 0, 0, "server"),
    spec!("client", -2, C, 0, 0, 0, "connection"),
    spec!("select", 2, C, 0, 0, 0, "connection"),
    spec!("quit", -1, C, 0, 0, 0, "connection"),
    spec!("reset", 1, C, 0, 0, 0, "connection"),
    spec!("info", -1, &["loading", "stale"], 0, 0, 0, "server"),
    spec!(
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        "server"
    ),
    spec!("command", -1, &["loading", "stale"], 0, 0, 0, "server"),
    spec!("dbsize", 1, R, 0, 0, 0, "keyspace"),
    spec!("flushdb", -1, WS, 0, 0, 0, "keyspace"),
    spec!("flushall", -1, WS, 0, 0, 0, "keyspace"),
    spec!("time", 1, C, 0, 0, 0, "server"),
    spec!("lastsave", 1, C, 0, 0, 0, "server"),
    spec!(
        "save",
        1,
        &["admin", "noscript", "no-multi"],
        0,
        0,
        0,
        "server"
    ),
    spec!(
        "bgsave",
        -1,
        &["admin", "noscript", "no-multi"],
        0,
        0,
        0,
        "server"
    ),
    spec!(
        "bgrewriteaof",
        1,
        &["admin", "noscript", "no-multi"],
        0,
        0,
        0,
        "server"
    ),
    spec!(
        "shutdown",
        -1,
        &["admin", "noscript", "loading", "stale", "no-multi"],
        0,
        0,
        0,
        "server"
    ),
    spec!("role", 1, C, 0, 0, 0, "server"),
    spec!("wait", 3, &["noscript"], 0, 0, 0, "connection"),
    spec!("function", -2, &["noscript"], 0, 0, 0, "scripting"),
    spec!(
        "slowlog",
        -2,
        &["admin", "random", "loading", "stale"],
        0,
        0,
        0,
        "server"
    ),
    // Scripting (crate::scripting).
    spec!("eval", -3, SCRIPT, 0, 0, 0, "scripting"),
    spec!("evalsha", -3, SCRIPT, 0, 0, 0, "scripting"),
    spec!("eval_ro", -3, SCRIPT_RO, 0, 0, 0, "scripting"),
    spec!("evalsha_ro", -3, SCRIPT_RO, 0, 0, 0, "scripting"),
    spec!("fcall", -3, SCRIPT, 0, 0, 0, "scripting"),
    spec!("fcall_ro", -3, SCRIPT_RO, 0, 0, 0, "scripting"),
    spec!("script", -2, &["noscript"], 0, 0, 0, "scripting"),
    spec!("cluster", -2, C, 0, 0, 0, "cluster"),
    spec!("readonly", 1, C, 0, 0, 0, "connection"),
    spec!("readwrite", 1, C, 0, 0, 0, "connection"),
    spec!("asking", 1, C, 0, 0, 0, "connection"),
    // Publish/subscribe.
    spec!(
        "subscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
        "pubsub"
    ),
    spec!(
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
        "pubsub"
    ),
    spec!(
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
        "pubsub"
    ),
    spec!(
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
        "pubsub"
    ),
    spec!(
        "ssubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        1,
        -1,
        1,
        "pubsub"
    ),
    spec!(
        "sunsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        1,
        -1,
        1,
        "pubsub"
    ),
    spec!(
        "spublish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        1,
        1,
        1,
        "pubsub"
    ),
    spec!(
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        0,
        0,
        0,
        "pubsub"
    ),
    spec!(
        "pubsub",
        -2,
        &["pubsub", "loading", "stale"],
        0,
        0,
        0,
        "pubsub"
    ),
    // Transactions.
    spec!("multi", 1, C, 0, 0, 0, "transaction"),
    spec!(
        "exec",
        1,
        &["noscript", "loading", "stale"],
        0,
        0,
        0,
        "transaction"
    ),
    spec!("discard", 1, C, 0, 0, 0, "transaction"),
    spec!("watch", -2, C, 1, -1, 1, "transaction"),
    spec!("unwatch", 1, C, 0, 0, 0, "transaction"),
    // Keys and expiry.
    spec!("del", -2, &["write"], 1, -1, 1, "keyspace"),
    spec!("unlink", -2, &["write", "fast"], 1, -1, 1, "keyspace"),
    spec!("exists", -2, R, 1, -1, 1, "keyspace"),
    spec!("touch", -2, R, 1, -1, 1, "keyspace"),
    spec!("type", 2, R, 1, 1, 1, "keyspace"),
    spec!("rename", 3, WS, 1, 2, 1, "keyspace"),
    spec!("renamenx", 3, &["write", "fast"], 1, 2, 1, "keyspace"),
    spec!("scan", -2, RS, 0, 0, 0, "keyspace"),
    spec!("keys", 2, RS, 0, 0, 0, "keyspace"),
    spec!("randomkey", 1, RS, 0, 0, 0, "keyspace"),
    spec!("expire", -3, &["write", "fast"], 1, 1, 1, "keyspace"),
    spec!("pexpire", -3, &["write", "fast"], 1, 1, 1, "keyspace"),
    spec!("expireat", -3, &["write", "fast"], 1, 1, 1, "keyspace"),
    spec!("pexpireat", -3, &["write", "fast"], 1, 1, 1, "keyspace"),
    spec!("ttl", 2, R, 1, 1, 1, "keyspace"),
    spec!("pttl", 2, R, 1, 1, 1, "keyspace"),
    spec!("expiretime", 2, R, 1, 1, 1, "keyspace"),
    spec!("pexpiretime", 2, R, 1, 1, 1, "keyspace"),
    spec!("persist", 2, &["write", "fast"], 1, 1, 1, "keyspace"),
    // Strings.
    spec!("get", 2, R, 1, 1, 1, "string"),
    spec!("set", -3, &["write", "denyoom"], 1, 1, 1, "string"),
    spec!("setnx", 3, W, 1, 1, 1, "string"),
    spec!("setex", 4, &["write", "denyoom"], 1, 1, 1, "string"),
    spec!("psetex", 4, &["write", "denyoom"], 1, 1, 1, "string"),
    spec!("mget", -2, R, 1, -1, 1, "string"),
    spec!("mset", -3, &["write", "denyoom"], 1, -1, 2, "string"),
    spec!("msetnx", -3, &["write", "denyoom"], 1, -1, 2, "string"),
    spec!("getset", 3, W, 1, 1, 1, "string"),
    spec!("getdel", 2, &["write", "fast"], 1, 1, 1, "string"),
    spec!("getex", -2, &["write", "fast"], 1, 1, 1, "string"),
    spec!("incr", 2, W, 1, 1, 1, "string"),
    spec!("decr", 2, W, 1, 1, 1, "string"),
    spec!("incrby", 3, W, 1, 1, 1, "string"),
    spec!("decrby", 3, W, 1, 1, 1, "string"),
    spec!("incrbyfloat", 3, W, 1, 1, 1, "string"),
    spec!("append", 3, W, 1, 1, 1, "string"),
    spec!("strlen", 2, R, 1, 1, 1, "string"),
    spec!("getrange", 4, RS, 1, 1, 1, "string"),
    spec!("substr", 4, RS, 1, 1, 1, "string"),
    spec!("setrange", 4, &["write", "denyoom"], 1, 1, 1, "string"),
    // Bitmaps.
    spec!("setbit", 4, W, 1, 1, 1, "bitmap"),
    spec!("getbit", 3, R, 1, 1, 1, "bitmap"),
    spec!("bitcount", -2, RS, 1, 1, 1, "bitmap"),
    spec!("bitpos", -3, RS, 1, 1, 1, "bitmap"),
    spec!("bitop", -4, &["write", "denyoom"], 2, -1, 1, "bitmap"),
    // HyperLogLog.
    spec!("pfadd", -2, W, 1, 1, 1, "hyperloglog"),
    spec!("pfcount", -2, RS, 1, -1, 1, "hyperloglog"),
    spec!(
        "pfmerge",
        -2,
        &["write", "denyoom"],
        1,
        -1,
        1,
        "hyperloglog"
    ),
    // Hashes.
    spec!("hset", -4, W, 1, 1, 1, "hash"),
    spec!("hmset", -4, W, 1, 1, 1, "hash"),
    spec!("hsetnx", 4, W, 1, 1, 1, "hash"),
    spec!("hget", 3, R, 1, 1, 1, "hash"),
    spec!("hmget", -3, R, 1, 1, 1, "hash"),
    spec!("hgetall", 2, RS, 1, 1, 1, "hash"),
    spec!("hdel", -3, &["write", "fast"], 1, 1, 1, "hash"),
    spec!("hexists", 3, R, 1, 1, 1, "hash"),
    spec!("hlen", 2, R, 1, 1, 1, "hash"),
    spec!("hkeys", 2, RS, 1, 1, 1, "hash"),
    spec!("hvals", 2, RS, 1, 1, 1, "hash"),
    spec!("hstrlen", 3, R, 1, 1, 1, "hash"),
    spec!("hincrby", 4, W, 1, 1, 1, "hash"),
    spec!("hincrbyfloat", 4, W, 1, 1, 1, "hash"),
    spec!("hscan", -3, RS, 1, 1, 1, "hash"),
    // Lists.
    spec!("lpush", -3, W, 1, 1, 1, "list"),
    spec!("rpush", -3, W, 1, 1, 1, "list"),
    spec!("lpushx", -3, W, 1, 1, 1, "list"),
    spec!("rpushx", -3, W, 1, 1, 1, "list"),
    spec!("lpop", -2, &["write", "fast"], 1, 1, 1, "list"),
    spec!("rpop", -2, &["write", "fast"], 1, 1, 1, "list"),
    spec!("llen", 2, R, 1, 1, 1, "list"),
    spec!("lrange", 4, RS, 1, 1, 1, "list"),
    spec!("lindex", 3, RS, 1, 1, 1, "list"),
    spec!("lset", 4, &["write", "denyoom"], 1, 1, 1, "list"),
    spec!("lrem", 4, WS, 1, 1, 1, "list"),
    spec!("ltrim", 4, WS, 1, 1, 1, "list"),
    spec!("linsert", 5, &["write", "denyoom"], 1, 1, 1, "list"),
    spec!("rpoplpush", 3, &["write", "denyoom"], 1, 2, 1, "list"),
    spec!("lmove", 5, &["write", "denyoom"], 1, 2, 1, "list"),
    spec!("blpop", -3, B, 1, -2, 1, "list"),
    spec!("lpos", -3, RS, 1, 1, 1, "list"),
    spec!("lmpop", -4, &["write", "movablekeys"], 0, 0, 0, "list"),
    spec!(
        "blmpop",
        -5,
        &["write", "noscript", "blocking", "movablekeys"],
        0,
        0,
        0,
        "list"
    ),
    spec!("blmove", 6, B, 1, 2, 1, "list"),
    spec!("brpop", -3, B, 1, -2, 1, "list"),
    // Sets.
    spec!("sadd", -3, W, 1, 1, 1, "set"),
    spec!("srem", -3, &["write", "fast"], 1, 1, 1, "set"),
    spec!("smembers", 2, RS, 1, 1, 1, "set"),
    spec!("sismember", 3, R, 1, 1, 1, "set"),
    spec!("smismember", -3, R, 1, 1, 1, "set"),
    spec!("scard", 2, R, 1, 1, 1, "set"),
    spec!("spop", -2, &["write", "fast"], 1, 1, 1, "set"),
    spec!("srandmember", -2, RS, 1, 1, 1, "set"),
    spec!("sinter", -2, RS, 1, -1, 1, "set"),
    spec!("sunion", -2, RS, 1, -1, 1, "set"),
    spec!("sdiff", -2, RS, 1, -1, 1, "set"),
    spec!("sinterstore", -3, &["write", "denyoom"], 1, -1, 1, "set"),
    spec!("sunionstore", -3, &["write", "denyoom"], 1, -1, 1, "set"),
    spec!("sdiffstore", -3, &["write", "denyoom"], 1, -1, 1, "set"),
    spec!("smove", 4, &["write", "fast"], 1, 2, 1, "set"),
    spec!("sscan", -3, RS, 1, 1, 1, "set"),
    // Sorted sets.
    spec!("zadd", -4, W, 1, 1, 1, "sortedset"),
    spec!("zincrby", 4, W, 1, 1, 1, "sortedset"),
    spec!("zrem", -3, &["write", "fast"], 1, 1, 1, "sortedset"),
    spec!("zscore", 3, R, 1, 1, 1, "sortedset"),
    spec!("zmscore", -3, R, 1, 1, 1, "sortedset"),
    spec!("zcard", 2, R, 1, 1, 1, "sortedset"),
    spec!("zcount", 4, R, 1, 1, 1, "sortedset"),
    spec!("zlexcount", 4, R, 1, 1, 1, "sortedset"),
    spec!("zrank", 3, R, 1, 1, 1, "sortedset"),
    spec!("zrevrank", 3, R, 1, 1, 1, "sortedset"),
    spec!("zrange", -4, RS, 1, 1, 1, "sortedset"),
    spec!("zrevrange", -4, RS, 1, 1, 1, "sortedset"),
    spec!("zrangebyscore", -4, RS, 1, 1, 1, "sortedset"),
    spec!("zrevrangebyscore", -4, RS, 1, 1, 1, "sortedset"),
    spec!("zrangebylex", -4, RS, 1, 1, 1, "sortedset"),
    spec!("zrevrangebylex", -4, RS, 1, 1, 1, "sortedset"),
    spec!("zpopmin", -2, &["write", "fast"], 1, 1, 1, "sortedset"),
    spec!("zpopmax", -2, &["write", "fast"], 1, 1, 1, "sortedset"),
    spec!("zremrangebyscore", 4, WS, 1, 1, 1, "sortedset"),
    spec!("zremrangebyrank", 4, WS, 1, 1, 1, "sortedset"),
    spec!("zscan", -3, RS, 1, 1, 1, "sortedset"),
    spec!(
        "bzpopmin",
        -3,
        &["write", "noscript", "blocking", "fast"],
        1,
        -2,
        1,
        "sortedset"
    ),
    spec!(
        "bzpopmax",
        -3,
        &["write", "noscript", "blocking", "fast"],
        1,
        -2,
        1,
        "sortedset"
    ),
    spec!(
        "zunion",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        "sortedset"
    ),
    spec!(
        "zinter",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        "sortedset"
    ),
    spec!(
        "zdiff",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        "sortedset"
    ),
    spec!(
        "zunionstore",
        -4,
        &["write", "denyoom", "movablekeys"],
        1,
        1,
        1,
        "sortedset"
    ),
    spec!(
        "zinterstore",
        -4,
        &["write", "denyoom", "movablekeys"],
        1,
        1,
        1,
        "sortedset"
    ),
    spec!(
        "zdiffstore",
        -4,
        &["write", "denyoom", "movablekeys"],
        1,
        1,
        1,
        "sortedset"
    ),
    spec!(
        "zrangestore",
        -5,
        &["write", "denyoom"],
        1,
        2,
        1,
        "sortedset"
    ),
    // Streams (crate::streams).
    spec!("xadd", -5, W, 1, 1, 1, "stream"),
    spec!("xlen", 2, R, 1, 1, 1, "stream"),
    spec!("xrange", -4, RS, 1, 1, 1, "stream"),
    spec!("xrevrange", -4, RS, 1, 1, 1, "stream"),
    spec!("xdel", -3, &["write", "fast"], 1, 1, 1, "stream"),
    spec!("xtrim", -4, WS, 1, 1, 1, "stream"),
    spec!(
        "xread",
        -4,
        &["readonly", "blocking", "movablekeys"],
        0,
        0,
        0,
        "stream"
    ),
    spec!(
        "xreadgroup",
        -7,
        &["write", "blocking", "movablekeys"],
        0,
        0,
        0,
        "stream"
    ),
    spec!("xgroup", -2, WS, 2, 2, 1, "stream"),
    spec!("xack", -4, &["write", "fast"], 1, 1, 1, "stream"),
    spec!("xpending", -3, RS, 1, 1, 1, "stream"),
    spec!("xclaim", -6, &["write", "fast"], 1, 1, 1, "stream"),
    spec!("xautoclaim", -6, &["write", "fast"], 1, 1, 1, "stream"),
    spec!("xinfo", -2, RS, 2, 2, 1, "stream"),
    spec!("xsetid", -3, W, 1, 1, 1, "stream"),
    // Keys.
    spec!("copy", -3, &["write", "denyoom"], 1, 2, 1, "keyspace"),
    spec!("dump", 2, RS, 1, 1, 1, "keyspace"),
    spec!("hrandfield", -2, RS, 1, 1, 1, "hash"),
    spec!("zrandmember", -2, RS, 1, 1, 1, "sortedset"),
    spec!("sintercard", -3, RS, 0, 0, 0, "set"),
    spec!("zintercard", -3, RS, 0, 0, 0, "sortedset"),
    spec!("zmpop", -4, &["write", "movablekeys"], 0, 0, 0, "sortedset"),
    spec!(
        "bzmpop",
        -5,
        &["write", "noscript", "blocking", "movablekeys"],
        0,
        0,
        0,
        "sortedset"
    ),
    spec!(
        "brpoplpush",
        4,
        &["write", "denyoom", "noscript", "blocking"],
        1,
        2,
        1,
        "list"
    ),
    spec!("zremrangebylex", 4, WS, 1, 1, 1, "sortedset"),
    spec!("lcs", -3, RS, 1, 2, 1, "string"),
    spec!("memory", -2, RS, 0, 0, 0, "server"),
    spec!(
        "latency",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        "server"
    ),
    spec!(
        "sort",
        -2,
        &["write", "denyoom", "movablekeys"],
        1,
        1,
        1,
        "list"
    ),
    spec!("sort_ro", -2, &["readonly", "movablekeys"], 1, 1, 1, "list"),
    spec!("geoadd", -5, &["write", "denyoom"], 1, 1, 1, "geo"),
    spec!("geopos", -2, RS, 1, 1, 1, "geo"),
    spec!("geodist", -4, RS, 1, 1, 1, "geo"),
    spec!("geohash", -2, RS, 1, 1, 1, "geo"),
    spec!(
        "georadius",
        -6,
        &["write", "denyoom", "movablekeys"],
        1,
        1,
        1,
        "geo"
    ),
    spec!("georadius_ro", -6, RS, 1, 1, 1, "geo"),
    spec!(
        "georadiusbymember",
        -5,
        &["write", "denyoom", "movablekeys"],
        1,
        1,
        1,
        "geo"
    ),
    spec!("georadiusbymember_ro", -5, RS, 1, 1, 1, "geo"),
    spec!("geosearch", -7, RS, 1, 1, 1, "geo"),
    spec!("geosearchstore", -8, &["write", "denyoom"], 1, 2, 1, "geo"),
    spec!("restore", -4, &["write", "denyoom"], 1, 1, 1, "keyspace"),
    spec!("object", -2, RS, 2, 2, 1, "keyspace"),
    spec!("bitfield", -2, &["write", "denyoom"], 1, 1, 1, "bitmap"),
    spec!("bitfield_ro", -2, R, 1, 1, 1, "bitmap"),
];

pub fn find(name: &str) -> Option<&'static Spec> {
    COMMANDS.iter().find(|spec| spec.name == name)
}

/// The keys a command names, by its key positions (and, for the commands
/// with `numkeys`, by that count).
pub fn keys<'a>(spec: &Spec, args: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    if matches!(spec.name, "xread" | "xreadgroup") {
        return crate::streams::read_keys(args)
            .iter()
            .map(|key| key.as_slice())
            .collect();
    }
    let numkeys_at = match spec.name {
        "lmpop" | "zunion" | "zinter" | "zdiff" | "sintercard" | "zintercard" | "zmpop" => Some(1),
        "blmpop" | "zunionstore" | "zinterstore" | "zdiffstore" | "bzmpop" | "eval" | "evalsha"
        | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => Some(2),
        _ => None,
    };
    if spec.name == "memory" {
        // MEMORY USAGE key.
        return match (args.get(1), args.get(2)) {
            (Some(sub), Some(key)) if sub.eq_ignore_ascii_case(b"usage") => vec![key.as_slice()],
            _ => Vec::new(),
        };
    }
    if spec.name == "sort" {
        // The sorted key, and the destination of the last STORE.
        let mut out: Vec<&[u8]> = args.get(1).map(|key| key.as_slice()).into_iter().collect();
        let store = (2..args.len().saturating_sub(1))
            .rev()
            .find(|&at| args[at].eq_ignore_ascii_case(b"store"));
        out.extend(store.map(|at| args[at + 1].as_slice()));
        return out;
    }
    if let Some(at) = numkeys_at {
        let mut out: Vec<&[u8]> = Vec::new();
        if spec.name.ends_with("store") {
            out.extend(args.get(1).map(|key| key.as_slice()));
        }
        let count = args
            .get(at)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        out.extend(
            args.iter()
                .skip(at + 1)
                .take(count)
                .map(|key| key.as_slice()),
        );
        return out;
    }
    if spec.first <= 0 {
        return Vec::new();
    }
    let n = args.len() as i32;
    let last = if spec.last < 0 {
        n + spec.last
    } else {
        spec.last
    };
    let mut out = Vec::new();
    let mut at = spec.first;
    while at <= last && at < n {
        out.push(args[at as usize].as_slice());
        at += spec.step.max(1);
    }
    out
}
