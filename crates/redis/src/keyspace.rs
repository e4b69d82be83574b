//! One Redis database as records: a key is a record in set `redis<db>` of
//! the Redis namespace, its digest computed from the set and the key as an
//! Aerospike client computes it for a string key, then placed in the
//! partition of the key's Redis Cluster slot (`crate::cluster::place`), so
//! hash-tagged keys share a partition and a Redis Cluster client's slot map
//! is where the records are. Every read runs as a typed read request; every
//! change is read, computed here, and written back with a generation check
//! (or create-only), retried on a conflict, so each Redis command is
//! atomic on its key.

use crate::value::{Value, BIN_EXPIRY};
use bolide_store::{RecordView, Store};
use bolide_transaction::{Action, Answer, Key, Ops, Policy, RecordRequest, UdfCall};
use bolide_types::{particle, Digest, ResultCode};
use bolide_wire::{message::op_type, Op};
use ripemd::{Digest as _, Ripemd160};

/// How a front end runs typed requests (the server implements it).
pub trait Records {
    /// Runs one single-record request into `answer`. `Err` carries a Redis
    /// error text when the request cannot be served from here.
    fn run(&mut self, request: &RecordRequest<'_>, answer: &mut Answer) -> Result<(), String>;
    fn store(&self) -> &Store;
    /// The partition map as Redis Cluster clients see it, when this node
    /// answers as a Redis Cluster node (None: standalone).
    fn cluster(&self) -> Option<std::sync::Arc<crate::cluster::ClusterMap>> {
        None
    }
    /// Whether connections must authenticate first (a secured node).
    fn secured(&self) -> bool {
        false
    }
    /// Logs the connection in as `user` (a secured node): Err is the
    /// Redis error to answer.
    fn login(&mut self, _user: &str, _password: &[u8]) -> Result<(), String> {
        Err(WRONGPASS.to_owned())
    }
    /// Whether the connection's user may do what needs `permission` on
    /// the Redis namespace's `set` (always, on an open node).
    fn permits(&self, _permission: bolide_transaction::Permission, _set: &[u8]) -> bool {
        true
    }
    /// (SC) Whether records of `keys` (in `set`) must first be copied to
    /// their replicas again (their last write here did not reach them
    /// all): if so the copies are queued, to be carried out by the
    /// connection before the command runs again (a strong-consistency
    /// namespace serves such a record only once copied).
    fn copy_first(&mut self, _set: &[u8], _keys: &[&[u8]]) -> bool {
        false
    }
    /// The session begins a command whose reply starts at `at` in the
    /// output: writes the command makes are that reply's, so a write
    /// whose copies then fail to reach the replicas turns it into an
    /// error (see [`Records::command_ended`]).
    fn command_started(&mut self, _at: usize) {}
    /// The command begun last ended; its reply (if it kept one) ends at
    /// `at`.
    fn command_ended(&mut self, _at: usize) {}
}

/// The reply a command gets in place of its own when one of its writes
/// was applied here but its copies did not reach every replica in time
/// (Aerospike's in-doubt timeout, result code 9): the write may or may
/// not survive the loss of this node, so success cannot be answered.
pub const INDOUBT: &str = "INDOUBT the write was applied on this node but its copies did not reach every replica in time: it may or may not be kept";

pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// A key's value and expiry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub value: Value,
    /// Absolute expiry in ms since the Unix epoch.
    pub expiry_ms: Option<u64>,
}

/// What a read found: the value (None when missing or expired) and the
/// record's generation (None when there is no record at all).
pub struct Loaded {
    pub entry: Option<Entry>,
    pub generation: Option<u16>,
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Most tries of one read-compute-write before giving up.
const TRIES_MAX: usize = 64;

/// Turns for read-modify-writes, striped by key: held only around one
/// synchronous read and write (never across an await or another key's
/// update, so turns cannot deadlock).
static TURNS: [std::sync::Mutex<()>; 256] = [const { std::sync::Mutex::new(()) }; 256];

fn turn(key: &[u8]) -> std::sync::MutexGuard<'static, ()> {
    let hash = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    });
    TURNS[(hash % TURNS.len() as u64) as usize]
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The set a database's keys live in.
pub fn set_name(db: usize) -> Vec<u8> {
    format!("redis{db}").into_bytes()
}

/// The digest of Redis key `key` in `set`: the one an Aerospike client
/// computes for that string key ([`client_digest`]) with its partition bits
/// set to the key's slot's partition.
pub fn digest(set: &[u8], key: &[u8]) -> Digest {
    let mut digest = client_digest(set, key);
    crate::cluster::place(&mut digest, crate::cluster::key_slot(key));
    digest
}

/// The digest an Aerospike client computes for string key `key` in `set`.
pub fn client_digest(set: &[u8], key: &[u8]) -> Digest {
    let mut hasher = Ripemd160::new();
    hasher.update(set);
    hasher.update([particle::STRING]);
    hasher.update(key);
    let mut out = [0u8; 20];
    out.copy_from_slice(&hasher.finalize());
    Digest(out)
}

/// What a write expects of the record it replaces.
#[derive(Clone, Copy)]
enum Guard {
    /// Nothing: it replaces whatever is there.
    Any,
    /// No record.
    Absent,
    /// The record at this generation.
    Generation(u16),
}

/// A Redis database on a namespace.
pub struct Db<'r> {
    pub records: &'r mut dyn Records,
    pub namespace: &'r [u8],
    pub set: Vec<u8>,
    /// The size limits OBJECT ENCODING reports by (CONFIG SET's).
    pub encodings: Encodings,
    /// The last key's digest: a read-modify-write (INCR, HSET, LPUSH …)
    /// reads and writes one key, and RIPEMD-160 was 12% of INCR's CPU.
    pub memo: DigestMemo,
}

/// The digest of the last (set, key) asked for, when both fit.
#[derive(Clone)]
pub struct DigestMemo {
    len: usize,
    set_len: usize,
    bytes: [u8; DigestMemo::CAPACITY],
    digest: Digest,
}

impl DigestMemo {
    const CAPACITY: usize = 128;

    /// The digest of Redis key `key` in `set` ([`digest`]), computed
    /// only if it is not the last one asked for.
    pub fn digest(&mut self, set: &[u8], key: &[u8]) -> Digest {
        let len = set.len() + key.len();
        let hit = self.len == len
            && self.set_len == set.len()
            && len <= Self::CAPACITY
            && self.bytes[..set.len()] == *set
            && self.bytes[set.len()..len] == *key;
        if hit {
            return self.digest;
        }
        let digest = digest(set, key);
        if len <= Self::CAPACITY {
            self.bytes[..set.len()].copy_from_slice(set);
            self.bytes[set.len()..len].copy_from_slice(key);
            self.len = len;
            self.set_len = set.len();
            self.digest = digest;
        } else {
            self.len = usize::MAX;
        }
        digest
    }
}

impl Default for DigestMemo {
    fn default() -> DigestMemo {
        DigestMemo {
            len: usize::MAX,
            set_len: 0,
            bytes: [0; DigestMemo::CAPACITY],
            digest: Digest([0; 20]),
        }
    }
}

/// The limits under which Redis 7.0 keeps a value in its compact
/// encoding (`hash-max-listpack-entries` …), as CONFIG SET last set them.
/// Bolide stores every value the same way; OBJECT ENCODING answers what
/// Redis would use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encodings {
    pub hash_entries: usize,
    pub hash_value_bytes: usize,
    pub zset_entries: usize,
    pub zset_value_bytes: usize,
    pub set_intset_entries: usize,
}

impl Default for Encodings {
    fn default() -> Encodings {
        Encodings {
            hash_entries: 128,
            hash_value_bytes: 64,
            zset_entries: 128,
            zset_value_bytes: 64,
            set_intset_entries: 512,
        }
    }
}

fn code_error(code: ResultCode) -> String {
    match code {
        ResultCode::RecordTooBig => {
            "ERR value too large: the record exceeds the namespace's max-record-size".to_owned()
        }
        ResultCode::OutOfSpace | ResultCode::DeviceOverload => {
            "OOM command not allowed when used memory > 'maxmemory'.".to_owned()
        }
        ResultCode::Namespace => "ERR the Redis namespace does not exist".to_owned(),
        ResultCode::Forbidden => "ERR the namespace refuses this write (forbidden)".to_owned(),
        ResultCode::Timeout => "TRYAGAIN the record is busy, try again".to_owned(),
        ResultCode::NotAuthenticated => "NOAUTH Authentication required.".to_owned(),
        ResultCode::RoleViolation => {
            "NOPERM this user has no permissions to access one of the keys used as arguments"
                .to_owned()
        }
        other => format!("ERR storage error {} ({other:?})", other.as_u8()),
    }
}

fn request<'a>(
    namespace: &'a [u8],
    set: &'a [u8],
    digest: Digest,
    key: &'a [u8],
    action: Action,
    policy: Policy,
    ops: &'a [Op<'a>],
) -> RecordRequest<'a> {
    RecordRequest {
        namespace,
        set: Some(set),
        digest,
        key: Some(Key::Typed(particle::STRING, key)),
        action,
        policy,
        ops: Ops::Slice(ops),
        filter: None,
        udf: UdfCall::default(),
    }
}

impl Db<'_> {
    /// Reads a key.
    pub fn load(&mut self, key: &[u8]) -> Result<Loaded, String> {
        let policy = Policy {
            read: true,
            read_all_bins: true,
            ..Policy::default()
        };
        let request = request(
            self.namespace,
            &self.set,
            self.memo.digest(&self.set, key),
            key,
            Action::Read,
            policy,
            &[],
        );
        let mut answer = Answer::default();
        let run = self.records.run(&request, &mut answer);
        run?;
        match answer.code {
            Some(ResultCode::Ok) => {}
            Some(ResultCode::NotFound) => {
                return Ok(Loaded {
                    entry: None,
                    generation: None,
                })
            }
            Some(code) => return Err(code_error(code)),
            None => return Err("ERR no answer from storage".to_owned()),
        }
        let mut value = None;
        let mut expiry_ms = None;
        for (_, particle_type, name, bytes) in &answer.bins {
            if name == BIN_EXPIRY {
                if let Ok(be) = <[u8; 8]>::try_from(bytes.as_slice()) {
                    expiry_ms = Some(i64::from_be_bytes(be).max(0) as u64);
                }
            } else if value.is_none() {
                value = Value::decode(name, *particle_type, bytes);
            }
        }
        let expired = expiry_ms.is_some_and(|at| at <= now_ms());
        let entry = match value {
            Some(value) if !expired => Some(Entry { value, expiry_ms }),
            _ => None,
        };
        Ok(Loaded {
            entry,
            generation: Some(answer.generation),
        })
    }

    /// Writes (or with None deletes) a key whose record had `generation`
    /// when it was read. Ok(false): the record changed meanwhile.
    pub fn save(
        &mut self,
        key: &[u8],
        generation: Option<u16>,
        entry: Option<&Entry>,
    ) -> Result<bool, String> {
        let guard = match generation {
            Some(generation) => Guard::Generation(generation),
            None => Guard::Absent,
        };
        self.write(key, guard, entry)
    }

    /// Writes (or with None deletes) a key whatever it holds: one request,
    /// no read (a plain SET).
    pub fn put(&mut self, key: &[u8], entry: Option<&Entry>) -> Result<(), String> {
        self.write(key, Guard::Any, entry).map(|_| ())
    }

    fn write(&mut self, key: &[u8], guard: Guard, entry: Option<&Entry>) -> Result<bool, String> {
        let entry = entry.filter(|entry| {
            !entry.value.is_empty_collection() && entry.expiry_ms.is_none_or(|at| at > now_ms())
        });
        let Some(entry) = entry else {
            let generation = match guard {
                Guard::Absent => return Ok(true),
                Guard::Any => None,
                Guard::Generation(generation) => Some(generation),
            };
            let policy = Policy {
                delete: true,
                generation_equal: generation.is_some(),
                generation: generation.map_or(0, u32::from),
                ..Policy::default()
            };
            let request = request(
                self.namespace,
                &self.set,
                self.memo.digest(&self.set, key),
                key,
                Action::Write,
                policy,
                &[],
            );
            let mut answer = Answer::default();
            self.records.run(&request, &mut answer)?;
            return match answer.code {
                Some(ResultCode::Ok | ResultCode::NotFound) => Ok(true),
                Some(ResultCode::Generation) => Ok(false),
                Some(code) => Err(code_error(code)),
                None => Err("ERR no answer from storage".to_owned()),
            };
        };
        let (name, particle_type, bytes) = entry.value.encode();
        let expiry = entry.expiry_ms.map(|at| (at as i64).to_be_bytes());
        let mut ops = vec![Op {
            op_type: op_type::WRITE,
            particle_type,
            flags: 0,
            name,
            value: &bytes,
        }];
        if let Some(expiry) = &expiry {
            ops.push(Op {
                op_type: op_type::WRITE,
                particle_type: particle::INTEGER,
                flags: 0,
                name: BIN_EXPIRY,
                value: expiry,
            });
        }
        let mut ttl = match entry.expiry_ms {
            // The record outlives its Redis expiry by a second at most:
            // reads hide it from then on, and expiry removes it.
            Some(at) => {
                (at.saturating_sub(now_ms()).div_ceil(1000) + 1).min(u64::from(u32::MAX - 2)) as u32
            }
            None => u32::MAX,
        };
        loop {
            let policy = match guard {
                Guard::Generation(generation) => Policy {
                    create_or_replace: true,
                    generation_equal: true,
                    generation: u32::from(generation),
                    ttl,
                    ..Policy::default()
                },
                Guard::Absent => Policy {
                    create_only: true,
                    ttl,
                    ..Policy::default()
                },
                Guard::Any => Policy {
                    create_or_replace: true,
                    ttl,
                    ..Policy::default()
                },
            };
            let request = request(
                self.namespace,
                &self.set,
                self.memo.digest(&self.set, key),
                key,
                Action::Write,
                policy,
                &ops,
            );
            let mut answer = Answer::default();
            self.records.run(&request, &mut answer)?;
            return match answer.code {
                Some(ResultCode::Ok) => Ok(true),
                Some(ResultCode::Generation | ResultCode::RecordExists | ResultCode::NotFound) => {
                    Ok(false)
                }
                // A namespace without expiry refuses record TTLs: the key
                // then expires by its `pexp` bin alone (reads hide it).
                // An expiry beyond the namespace's longest TTL: the record
                // is kept without one and the key expires by `pexp` alone.
                Some(ResultCode::Forbidden | ResultCode::Parameter) if ttl != u32::MAX => {
                    ttl = u32::MAX;
                    continue;
                }
                Some(code) => Err(code_error(code)),
                None => Err("ERR no answer from storage".to_owned()),
            };
        }
    }

    /// Reads `key`, lets `change` modify it, and writes the result back if
    /// `change` says it changed it; retried from the read on a conflict.
    pub fn update<T>(
        &mut self,
        key: &[u8],
        mut change: impl FnMut(&mut Option<Entry>) -> Result<(T, bool), String>,
    ) -> Result<T, String> {
        // Redis connections on other service threads changing the same key
        // take turns instead of failing each other's generation checks
        // round after round; only a write from another protocol or node
        // still makes this retry.
        let _turn = turn(key);
        for _ in 0..TRIES_MAX {
            let Loaded {
                mut entry,
                generation,
            } = self.load(key)?;
            let (result, changed) = change(&mut entry)?;
            if !changed || self.save(key, generation, entry.as_ref())? {
                return Ok(result);
            }
        }
        Err("TRYAGAIN the key changed too often while this command ran".to_owned())
    }

    /// Just the value of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Entry>, String> {
        Ok(self.load(key)?.entry)
    }

    /// Keys of this database, from partition `cursor` on, at least `count`
    /// of them unless the partitions run out: the keys and the next cursor
    /// (0: done). `keep` filters.
    pub fn scan(
        &self,
        cursor: usize,
        count: usize,
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> (Vec<Vec<u8>>, usize) {
        self.scan_partitions(cursor, bolide_types::PARTITION_COUNT, count, keep)
    }

    /// The keys of this database in partition `pid` that `keep` keeps.
    pub fn partition_keys(
        &self,
        pid: usize,
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Vec<Vec<u8>> {
        self.scan_partitions(
            pid,
            (pid + 1).min(bolide_types::PARTITION_COUNT),
            usize::MAX,
            keep,
        )
        .0
    }

    fn scan_partitions(
        &self,
        cursor: usize,
        end: usize,
        count: usize,
        keep: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> (Vec<Vec<u8>>, usize) {
        let store = self.records.store();
        let mut keys = Vec::new();
        let Some(namespace) = store.namespace(self.namespace) else {
            return (keys, 0);
        };
        let Some(set_id) = namespace.existing_set_id(&self.set) else {
            return (keys, 0);
        };
        let now = bolide_types::now_citrusleaf_seconds();
        let now_unix_ms = now_ms();
        let mut partition = cursor;
        let mut buf = Vec::new();
        while partition < end && keys.len() < count {
            if let Some(table) = namespace.read_partition(partition) {
                table.for_each(|entry| {
                    if entry.meta.set_id != set_id || namespace.is_doomed(&entry.meta, now) {
                        return;
                    }
                    let Ok(bytes) = namespace.record_bytes(&entry, &mut buf) else {
                        return;
                    };
                    let Some(view) = RecordView::parse(bytes) else {
                        return;
                    };
                    let Some((_, key)) = view.key else {
                        return;
                    };
                    if let Some(bin) = view.bin(BIN_EXPIRY) {
                        if let Ok(be) = <[u8; 8]>::try_from(bin.value) {
                            if (i64::from_be_bytes(be).max(0) as u64) <= now_unix_ms {
                                return;
                            }
                        }
                    }
                    let type_bin = view.bins().next().map(|bin| bin.name).unwrap_or_default();
                    if keep(key, type_bin) {
                        keys.push(key.to_vec());
                    }
                });
            }
            partition += 1;
        }
        let next = if partition >= bolide_types::PARTITION_COUNT {
            0
        } else {
            partition
        };
        (keys, next)
    }

    /// Removes every key of this database (a set truncate).
    pub fn flush(&self) -> Result<(), String> {
        let store = self.records.store();
        let Some(namespace) = store.namespace(self.namespace) else {
            return Ok(());
        };
        let Some(set_id) = namespace.existing_set_id(&self.set) else {
            return Ok(());
        };
        // Everything written up to now goes. A record written many times
        // within a millisecond carries a last-update time ahead of the
        // clock (each write stamps at least its predecessor's plus one),
        // so the truncation point is after the latest of them; a write
        // after this reply is stamped later than the point.
        let mut latest = 0;
        for pid in 0..bolide_types::PARTITION_COUNT {
            if let Some(table) = namespace.read_partition(pid) {
                table.for_each(|entry| {
                    if entry.meta.set_id == set_id {
                        latest = latest.max(entry.meta.last_update_ms);
                    }
                });
            }
        }
        let before = (bolide_types::now_citrusleaf_milliseconds() + 1).max(latest + 1);
        namespace
            .truncate(Some(&self.set), before)
            .map_err(|error| format!("ERR flush failed: {error}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod memo_tests {
    use super::{digest, DigestMemo};

    #[test]
    fn the_memo_answers_what_digest_computes_hit_or_miss() {
        let mut memo = DigestMemo::default();
        let long = vec![b'x'; 200];
        let cases: [(&[u8], &[u8]); 8] = [
            (b"redis0", b"counter"),
            (b"redis0", b"counter"),
            (b"redis1", b"counter"),
            // The same bytes split differently between set and key.
            (b"redis1c", b"ounter"),
            (b"redis0", b""),
            (b"redis0", &long),
            (b"redis0", &long),
            (b"redis0", b"counter"),
        ];
        for (set, key) in cases {
            assert_eq!(
                memo.digest(set, key).0,
                digest(set, key).0,
                "{set:?} {key:?}"
            );
        }
    }
}
