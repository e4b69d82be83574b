"""The Redis front end (RESP2/RESP3) against a real bolided: exact reply
bytes and error strings (as Redis 7.0.15 answers them, from
docs/redis.md and the reference), redis-py, redis-cli and redis-benchmark,
and the same records read and written through the Aerospike client."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time

import pytest

redis = pytest.importorskip("redis")

from bolide_server import BolideServer, free_ports, wait_for_port, with_redis_port  # noqa: E402


@pytest.fixture(scope="module")
def server():
    (redis_port,) = free_ports(1)
    srv = BolideServer()
    srv.config_text = with_redis_port(srv.config_text, redis_port)
    srv.redis_port = redis_port
    with srv:
        wait_for_port(redis_port)
        yield srv


@pytest.fixture
def r(server):
    client = redis.Redis(port=server.redis_port, protocol=2)
    client.flushall()
    yield client
    client.close()


def raw(server, payload: bytes, expect: int, timeout: float = 5.0) -> bytes:
    """Sends bytes on a fresh connection and reads until `expect` bytes."""
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=timeout) as s:
        s.sendall(payload)
        data = b""
        while len(data) < expect:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def exchange(sock: socket.socket, payload: bytes, expect: bytes) -> None:
    sock.sendall(payload)
    data = b""
    while len(data) < len(expect):
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    assert data == expect


def cmd(*args: bytes | str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


# ---- framing -------------------------------------------------------------

def test_resp2_reply_bytes_pipelined_and_inline(server, r):
    payload = (
        cmd("PING")
        + cmd("SET", "k", "v")
        + cmd("GET", "k")
        + cmd("GET", "missing")
        + cmd("MGET", "k", "missing")
        + cmd("INCR", "n")
        + b"set a \"hello world\"\r\n"
        + b"\r\n"  # an empty inline line gets no reply
        + b"GET a\r\n"
        + cmd("HGETALL", "nohash")
        + cmd("LPOP", "nolist", "2")
    )
    expect = (
        b"+PONG\r\n+OK\r\n$1\r\nv\r\n$-1\r\n*2\r\n$1\r\nv\r\n$-1\r\n:1\r\n"
        b"+OK\r\n$11\r\nhello world\r\n*0\r\n*-1\r\n"
    )
    assert raw(server, payload, len(expect)) == expect


def test_generic_errors_are_redis_strings(server, r):
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        exchange(s, cmd("NOSUCH", "a", "b"),
                 b"-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' \r\n")
        exchange(s, cmd("GET"), b"-ERR wrong number of arguments for 'get' command\r\n")
        exchange(s, cmd("SET", "s", "v") + cmd("LPUSH", "s", "x"),
                 b"+OK\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
        exchange(s, cmd("INCR", "s"), b"-ERR value is not an integer or out of range\r\n")
        exchange(s, cmd("SET", "k", "v", "KEEPTTL", "EX", "10"), b"-ERR syntax error\r\n")
        exchange(s, cmd("SET", "k", "v", "EX", "0"),
                 b"-ERR invalid expire time in 'set' command\r\n")
        exchange(s, cmd("SELECT", "16"), b"-ERR DB index is out of range\r\n")
        exchange(s, cmd("CLIENT", "BOGUS"),
                 b"-ERR unknown subcommand 'BOGUS'. Try CLIENT HELP.\r\n")
        exchange(s, cmd("HELLO", "4"), b"-NOPROTO unsupported protocol version\r\n")
        exchange(s, cmd("EXEC"), b"-ERR EXEC without MULTI\r\n")
        exchange(s, cmd("RENAME", "nokey", "x"), b"-ERR no such key\r\n")
        exchange(s, cmd("SCAN", "abc"), b"-ERR invalid cursor\r\n")


def test_protocol_error_is_sent_then_the_connection_closes(server, r):
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        s.sendall(b"*1\r\n:3\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        assert data == b"-Protocol error: expected '$', got ':'\r\n"
    reply = raw(server, b"set a \"unbalanced\r\n", 64)
    assert reply == b"-Protocol error: unbalanced quotes in request\r\n"
    # A huge declared bulk is refused before anything is buffered.
    assert raw(server, b"*1\r\n$99999999999\r\n", 64) == b"-Protocol error: invalid bulk length\r\n"


def test_resp3_after_hello(server, r):
    r.hset("h", mapping={"f1": "v1"})
    r.zadd("z", {"a": 1.5})
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        s.sendall(cmd("HELLO", "3"))
        data = b""
        while b"modules" not in data or not data.endswith(b"*0\r\n"):
            data += s.recv(4096)
        assert data.startswith(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n"
                               b"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:")
        assert data.endswith(b"$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
                             b"$7\r\nmodules\r\n*0\r\n")
        exchange(s, cmd("GET", "missing"), b"_\r\n")
        exchange(s, cmd("HGETALL", "h"), b"%1\r\n$2\r\nf1\r\n$2\r\nv1\r\n")
        exchange(s, cmd("SMEMBERS", "missing"), b"~0\r\n")
        exchange(s, cmd("ZSCORE", "z", "a"), b",1.5\r\n")
        exchange(s, cmd("ZRANGE", "z", "0", "-1", "WITHSCORES"),
                 b"*1\r\n*2\r\n$1\r\na\r\n,1.5\r\n")
        exchange(s, cmd("CONFIG", "GET", "maxmemory"), b"%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n")
        exchange(s, cmd("BLPOP", "nolist", "0.05"), b"_\r\n")
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        exchange(s, cmd("ZSCORE", "z", "a"), b"$3\r\n1.5\r\n")


def test_redis_py_in_resp3(server, r):
    r3 = redis.Redis(port=server.redis_port, protocol=3, decode_responses=True)
    try:
        r3.hset("h3", mapping={"a": "1", "b": "2"})
        assert r3.hgetall("h3") == {"a": "1", "b": "2"}
        r3.sadd("s3", "x", "y")
        assert r3.smembers("s3") == {"x", "y"}
        r3.zadd("z3", {"m": 0.5, "n": 2})
        assert r3.zrange("z3", 0, -1, withscores=True) == [["m", 0.5], ["n", 2.0]]
        assert r3.get("missing") is None
    finally:
        r3.close()


# ---- connection and server commands ---------------------------------------

def test_connection_commands(server, r):
    assert r.ping() is True
    assert r.echo("hi") == b"hi"
    assert r.client_getname() is None
    assert r.client_setname("worker-1") is True
    assert r.client_getname() == "worker-1"
    with pytest.raises(redis.ResponseError, match="Client names cannot contain spaces"):
        r.client_setname("bad name")
    client_id = r.client_id()
    assert isinstance(client_id, int) and client_id > 0
    info = r.client_info()
    assert info["name"] == "worker-1" and int(info["id"]) == client_id
    assert any(c["name"] == "worker-1" for c in r.client_list())
    info = r.info()
    assert info["redis_version"] == "7.0.15"
    assert info["arch_bits"] == 64 and info["cluster_enabled"] == 0
    assert info["tcp_port"] == server.redis_port
    assert r.config_get("maxmemory") == {"maxmemory": "0"}
    assert r.config_set("maxmemory-policy", "allkeys-lru") is True
    assert r.config_get("maxmemory-p*") == {"maxmemory-policy": "allkeys-lru"}
    with pytest.raises(redis.ResponseError,
                       match="Unknown option or number of arguments for CONFIG SET - 'nosuch'"):
        r.config_set("nosuch", "1")
    assert r.command_count() > 100
    get = r.command()["get"]
    assert get["arity"] == 2 and get["first_key_pos"] == 1 and get["last_key_pos"] == 1
    assert "readonly" in get["flags"]
    assert r.command_getkeys("MSET", "a", "1", "b", "2") == ["a", "b"]
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        exchange(s, cmd("COMMAND", "INFO", "get"),
                 b"*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n"
                 b":1\r\n:1\r\n:1\r\n*1\r\n+@string\r\n*0\r\n*0\r\n*0\r\n")
    secs, micros = r.time()
    assert abs(secs - time.time()) < 5 and 0 <= micros < 1_000_000


def test_client_list_filters_by_id_and_type_and_resetstat_clears_info_stats(server, r):
    others = [redis.Redis(host="127.0.0.1", port=server.redis_port) for _ in range(3)]
    ids = [str(c.client_id()) for c in others]
    # IDs in the order given; the caller and unknown IDs are left out.
    listed = r.client_list(client_id=list(reversed(ids)) + ["999999"])
    assert [c["id"] for c in listed] == list(reversed(ids))
    subscriber = others[0].pubsub()
    subscriber.subscribe("client-list-channel")
    assert subscriber.get_message(timeout=5)["type"] == "subscribe"
    pubsub_ids = {c["id"] for c in r.client_list(_type="pubsub")}
    normal_ids = {c["id"] for c in r.client_list(_type="normal")}
    assert str(r.client_id()) in normal_ids and not pubsub_ids & normal_ids
    assert len(pubsub_ids) == 1 and pubsub_ids.isdisjoint(ids[1:])
    assert r.client_list(_type="replica") == []
    with pytest.raises(redis.ResponseError, match="Unknown client type 'nosuch'"):
        r.execute_command("CLIENT LIST TYPE nosuch")
    with pytest.raises(redis.ResponseError, match="Invalid client ID"):
        r.execute_command("CLIENT LIST ID 1 x")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("CLIENT LIST NOSUCH")
    subscriber.close()
    for c in others:
        c.close()
    # CONFIG RESETSTAT clears INFO's command and connection counts.
    for _ in range(5):
        r.ping()
    before = r.info("stats")["total_commands_processed"]
    assert r.config_resetstat() is True
    assert r.info("stats")["total_commands_processed"] < before


def test_select_maps_databases_to_sets(server, r):
    r.set("k", "db0")
    r1 = redis.Redis(port=server.redis_port, db=1)
    try:
        assert r1.get("k") is None
        r1.set("k", "db1")
        assert r.get("k") == b"db0" and r1.get("k") == b"db1"
        assert r.dbsize() == 1 and r1.dbsize() == 1
        assert r1.flushdb() is True
        assert r1.dbsize() == 0 and r.get("k") == b"db0"
        info = r.info("keyspace")
        assert info["db0"]["keys"] == 1 and "db1" not in info
    finally:
        r1.close()


# ---- strings ---------------------------------------------------------------

def test_set_options(r):
    assert r.set("k", "v1") is True
    assert r.set("k", "v2", nx=True) is None
    assert r.set("other", "x", xx=True) is None
    assert r.get("other") is None
    assert r.set("k", "v3", xx=True, get=True) == b"v1"
    assert r.set("k", "v4", nx=True, get=True) == b"v3"  # NX+GET: old value, no write
    assert r.get("k") == b"v3"
    assert r.set("k", "v5", px=60_000) is True
    assert 59_000 < r.pttl("k") <= 60_000
    assert r.set("k", "v6", keepttl=True) is True
    assert 59_000 < r.pttl("k") <= 60_000
    assert r.set("k", "v7") is True
    assert r.ttl("k") == -1
    r.set("k", "v8", exat=int(time.time()) + 100)
    assert 98 <= r.ttl("k") <= 100
    r.lpush("list", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.set("list", "v", get=True)
    assert r.set("list", "now a string") is True
    assert r.type("list") == b"string"


def test_string_commands(r):
    assert r.setnx("a", "1") is True and r.setnx("a", "2") is False
    assert r.incr("a") == 2 and r.incrby("a", 10) == 12
    assert r.decr("a") == 11 and r.decrby("a", 20) == -9
    r.set("big", str(2**63 - 1))
    with pytest.raises(redis.ResponseError, match="increment or decrement would overflow"):
        r.incr("big")
    with pytest.raises(redis.ResponseError, match="^decrement would overflow"):
        r.decrby("a", -(2**63))
    r.set("f", "10.5")
    assert r.incrbyfloat("f", 0.1) == 10.6
    assert r.get("f") == b"10.6"
    assert r.incrbyfloat("g", 0.1) == 0.1 and r.incrbyfloat("g", 0.2) == 0.3
    assert r.get("g") == b"0.3"
    with pytest.raises(redis.ResponseError, match="value is not a valid float"):
        r.incrbyfloat("f", "abc")
    r.set("s", "010")
    assert r.get("s") == b"010"  # never reinterpreted as a number
    assert r.append("s", "20") == 5 and r.strlen("s") == 5 and r.strlen("none") == 0
    r.set("text", "Hello World")
    assert r.getrange("text", 0, 4) == b"Hello" and r.getrange("text", -5, -1) == b"World"
    assert r.setrange("text", 6, "Redis") == 11 and r.get("text") == b"Hello Redis"
    assert r.setrange("pad", 3, "x") == 4 and r.get("pad") == b"\x00\x00\x00x"
    with pytest.raises(redis.ResponseError, match="offset is out of range"):
        r.setrange("pad", -1, "x")
    assert r.mset({"m1": "a", "m2": "b"}) is True
    r.sadd("aset", "x")
    assert r.mget("m1", "m2", "none", "aset") == [b"a", b"b", None, None]
    assert r.msetnx({"m3": "c", "m1": "z"}) is False and r.get("m3") is None
    assert r.msetnx({"m3": "c", "m4": "d"}) is True
    assert r.getset("m1", "new") == b"a" and r.get("m1") == b"new"
    assert r.getdel("m1") == b"new" and r.exists("m1") == 0
    r.set("e", "v")
    assert r.getex("e", px=5000) == b"v" and 0 < r.pttl("e") <= 5000
    assert r.getex("e", persist=True) == b"v" and r.ttl("e") == -1
    assert r.setex("sx", 100, "v") is True and 99 <= r.ttl("sx") <= 100
    assert r.psetex("px", 1500, "v") is True and 0 < r.pttl("px") <= 1500
    binary = bytes(range(256))
    r.set(b"bin\x00key", binary)
    assert r.get(b"bin\x00key") == binary


# ---- keys and expiry ---------------------------------------------------------

def test_keys_commands(r):
    r.mset({"user:1": "a", "user:2": "b", "other": "c"})
    r.hset("hash", "f", "v")
    assert r.exists("user:1", "user:1", "nokey") == 2
    assert r.delete("user:1", "nokey") == 1 and r.unlink("user:2") == 1
    r.mset({"user:1": "a", "user:2": "b"})
    assert sorted(r.keys("user:*")) == [b"user:1", b"user:2"]
    assert sorted(r.keys("*")) == [b"hash", b"other", b"user:1", b"user:2"]
    assert r.type("hash") == b"hash" and r.type("none") == b"none"
    seen = set()
    cursor = 0
    rounds = 0
    while True:
        cursor, keys = r.scan(cursor, match="user:*", count=2)
        seen.update(keys)
        rounds += 1
        if cursor == 0:
            break
    assert seen == {b"user:1", b"user:2"} and rounds > 1
    assert set(r.scan_iter(_type="hash")) == {b"hash"}
    assert r.randomkey() in {b"hash", b"other", b"user:1", b"user:2"}
    assert r.rename("other", "moved") is True and r.get("moved") == b"c"
    assert r.renamenx("moved", "user:1") is False
    assert r.dbsize() == 4
    r.flushdb()
    assert r.dbsize() == 0 and r.randomkey() is None


def test_expiry_has_millisecond_precision(r):
    r.set("k", "v")
    assert r.ttl("k") == -1 and r.ttl("missing") == -2 and r.pttl("missing") == -2
    assert r.pexpire("k", 300) is True
    assert 0 < r.pttl("k") <= 300
    time.sleep(0.45)
    assert r.get("k") is None and r.exists("k") == 0 and r.ttl("k") == -2
    r.set("k", "v", px=200)
    time.sleep(0.3)
    assert r.get("k") is None
    r.set("k", "v")
    assert r.expire("k", 100, nx=True) is True
    assert r.expire("k", 50, gt=True) is False and r.expire("k", 200, gt=True) is True
    assert r.expire("k", 300, lt=True) is False and r.expire("k", 10, lt=True) is True
    with pytest.raises(redis.ResponseError,
                       match="NX and XX, GT or LT options at the same time are not compatible"):
        r.execute_command("EXPIRE", "k", "10", "NX", "XX")
    with pytest.raises(redis.ResponseError,
                       match="GT and LT options at the same time are not compatible"):
        r.execute_command("EXPIRE", "k", "10", "GT", "LT")
    assert r.persist("k") is True and r.persist("k") is False and r.ttl("k") == -1
    at = int(time.time() * 1000) + 10_000
    assert r.pexpireat("k", at) is True and r.pexpiretime("k") == at
    assert r.expireat("k", int(time.time()) - 1) is True  # in the past: deleted
    assert r.exists("k") == 0
    # In-place changes keep the TTL; overwrites clear it.
    r.set("c", "1", ex=100)
    r.incr("c")
    r.append("c", "0")
    assert 0 < r.ttl("c") <= 100
    r.set("c", "x")
    assert r.ttl("c") == -1


# ---- hashes, lists, sets, sorted sets, bitmaps -----------------------------

def test_hashes(r):
    assert r.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert r.hset("h", mapping={"a": "3", "c": "4"}) == 1
    assert r.hget("h", "a") == b"3" and r.hget("h", "zz") is None
    assert r.hmget("h", "a", "zz") == [b"3", None]
    assert r.hgetall("h") == {b"a": b"3", b"b": b"2", b"c": b"4"}
    assert r.hsetnx("h", "a", "x") == 0 and r.hsetnx("h", "d", "x") == 1
    assert r.hlen("h") == 4 and r.hexists("h", "d") and r.hstrlen("h", "a") == 1
    assert sorted(r.hkeys("h")) == [b"a", b"b", b"c", b"d"]
    assert r.hincrby("h", "a", 5) == 8
    with pytest.raises(redis.ResponseError, match="hash value is not an integer"):
        r.hincrby("h", "d", 1)
    assert r.hincrbyfloat("h", "f", 1.5) == 1.5
    with pytest.raises(redis.ResponseError, match="hash value is not a float"):
        r.hincrbyfloat("h", "d", 1)
    assert dict(r.hscan_iter("h", match="a")) == {b"a": b"8"}
    assert r.hdel("h", "a", "b", "c", "d", "f", "zz") == 5
    assert r.exists("h") == 0  # an empty hash deletes its key


def test_lists(r):
    assert r.rpush("l", "a", "b", "c") == 3 and r.lpush("l", "z") == 4
    assert r.lrange("l", 0, -1) == [b"z", b"a", b"b", b"c"]
    assert r.lrange("l", -2, 100) == [b"b", b"c"]
    assert r.lindex("l", -1) == b"c" and r.lindex("l", 10) is None
    assert r.lset("l", 0, "y") is True
    with pytest.raises(redis.ResponseError, match="index out of range"):
        r.lset("l", 10, "x")
    with pytest.raises(redis.ResponseError, match="no such key"):
        r.lset("nolist", 0, "x")
    assert r.linsert("l", "before", "b", "ab") == 5 and r.linsert("l", "after", "nope", "x") == -1
    assert r.lpushx("nolist", "x") == 0 and r.exists("nolist") == 0
    r.rpush("l", "b", "b")
    assert r.lrem("l", -1, "b") == 1 and r.lrem("l", 0, "b") == 2
    assert r.lpop("l") == b"y" and r.rpop("l", 2) == [b"c", b"ab"]
    assert r.lpop("l", 0) == [] and r.lpop("nolist") is None and r.lpop("nolist", 2) is None
    with pytest.raises(redis.ResponseError, match="value is out of range, must be positive"):
        r.lpop("l", -1)
    r.rpush("t", *"abcdef")
    assert r.ltrim("t", 1, -2) is True and r.lrange("t", 0, -1) == [b"b", b"c", b"d", b"e"]
    assert r.rpoplpush("t", "t") == b"e" and r.lrange("t", 0, 0) == [b"e"]
    assert r.lmove("t", "u", "LEFT", "RIGHT") == b"e" and r.lrange("u", 0, -1) == [b"e"]
    assert r.llen("t") == 3
    while r.lpop("t"):
        pass
    assert r.exists("t") == 0


def test_blocking_pops(server, r):
    start = time.monotonic()
    assert r.blpop(["nolist"], timeout=0.2) is None
    assert 0.15 < time.monotonic() - start < 3
    with pytest.raises(redis.ResponseError, match="timeout is negative"):
        r.blpop(["nolist"], timeout=-1)
    with pytest.raises(redis.ResponseError, match="timeout is not a float or out of range"):
        r.execute_command("BLPOP", "nolist", "abc")
    r.rpush("ready", "x")
    assert r.brpop(["nolist", "ready"], timeout=1) == (b"ready", b"x")
    waiter = redis.Redis(port=server.redis_port)
    got = {}

    def wait():
        got["value"] = waiter.blpop(["jobs"], timeout=5)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    r.rpush("jobs", "job-1")
    thread.join(timeout=10)
    waiter.close()
    assert got["value"] == (b"jobs", b"job-1")
    assert r.exists("jobs") == 0


def test_sets(r):
    assert r.sadd("s", "a", "b", "c", "a") == 3 and r.scard("s") == 3
    assert r.sismember("s", "a") == 1 and r.smismember("s", ["a", "z"]) == [1, 0]
    r.sadd("t", "b", "c", "d")
    assert r.sinter("s", "t") == {b"b", b"c"}
    assert r.sunion("s", "t") == {b"a", b"b", b"c", b"d"}
    assert r.sdiff("s", "t") == {b"a"}
    assert r.sinterstore("dst", ["s", "t"]) == 2 and r.smembers("dst") == {b"b", b"c"}
    assert r.smove("s", "t", "a") and r.sismember("t", "a") == 1
    assert r.srem("s", "b", "z") == 1
    popped = r.spop("s")
    assert popped == b"c" and r.exists("s") == 0
    assert len(r.srandmember("t", 2)) == 2 and len(r.srandmember("t", -10)) == 10
    assert set(r.sscan_iter("t")) == {b"a", b"b", b"c", b"d"}


def test_sorted_sets(server, r):
    assert r.zadd("z", {"a": 1, "b": 2, "c": 3}) == 3
    assert r.zadd("z", {"a": 5, "d": 0}, ch=True) == 2
    assert r.zadd("z", {"a": 1}, xx=True, gt=True) == 0 and r.zscore("z", "a") == 5
    assert r.zadd("z", {"a": 1}, lt=True, ch=True) == 1 and r.zscore("z", "a") == 1
    assert r.zadd("z", {"new": 1}, xx=True) == 0 and r.zscore("z", "new") is None
    assert r.zadd("z", {"a": 2}, incr=True) == 3.0
    with pytest.raises(redis.ResponseError, match="XX and NX options at the same time"):
        r.execute_command("ZADD", "z", "NX", "XX", "1", "a")
    with pytest.raises(redis.ResponseError, match="GT, LT, and/or NX options"):
        r.execute_command("ZADD", "z", "NX", "GT", "1", "a")
    with pytest.raises(redis.ResponseError, match="INCR option supports a single increment"):
        r.execute_command("ZADD", "z", "INCR", "1", "a", "2", "b")
    with pytest.raises(redis.ResponseError, match="value is not a valid float"):
        r.execute_command("ZADD", "z", "nan", "a")
    # d 0, b 2, a 3, c 3: ties break on the member.
    assert r.zrange("z", 0, -1, withscores=True) == [(b"d", 0), (b"b", 2), (b"a", 3), (b"c", 3)]
    assert r.zrevrange("z", 0, 1) == [b"c", b"a"]
    assert r.zrangebyscore("z", "(0", 3) == [b"b", b"a", b"c"]
    assert r.zrangebyscore("z", "-inf", "+inf", start=1, num=2) == [b"b", b"a"]
    assert r.zrevrangebyscore("z", 3, 2) == [b"c", b"a", b"b"]
    with pytest.raises(redis.ResponseError, match="min or max is not a float"):
        r.zrangebyscore("z", "x", 3)
    assert r.zrank("z", "a") == 2 and r.zrevrank("z", "a") == 1 and r.zrank("z", "no") is None
    assert r.zcount("z", 2, 3) == 3 and r.zcard("z") == 4
    assert r.zincrby("z", 0.5, "d") == 0.5
    assert r.zmscore("z", ["d", "no"]) == [0.5, None]
    assert r.zscore("z", "d") == 0.5
    r.zadd("lex", {"a": 0, "b": 0, "c": 0, "d": 0})
    assert r.zrangebylex("lex", "[b", "(d") == [b"b", b"c"]
    assert r.zrangebylex("lex", "-", "+") == [b"a", b"b", b"c", b"d"]
    assert r.zlexcount("lex", "(a", "+") == 3
    with pytest.raises(redis.ResponseError, match="min or max not valid string range item"):
        r.zrangebylex("lex", "b", "d")
    assert r.zrange("z", "(0", 2, byscore=True) == [b"d", b"b"]
    assert r.zrange("lex", "[c", "-", bylex=True, desc=True) == [b"c", b"b", b"a"]
    assert r.zpopmin("z") == [(b"d", 0.5)] and r.zpopmax("z", 2) == [(b"c", 3), (b"a", 3)]
    assert r.zrem("z", "b", "no") == 1 and r.exists("z") == 0
    r.zadd("r", {"a": 1, "b": 2, "c": 3})
    assert r.zremrangebyscore("r", 2, "+inf") == 2 and r.zremrangebyrank("r", 0, 0) == 1
    assert r.exists("r") == 0
    r.zadd("inf", {"x": float("inf")})
    r.zadd("p", {"x": 0.1})
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        exchange(s, cmd("ZSCORE", "inf", "x"), b"$3\r\ninf\r\n")
        # Scores print as %.17g, as Redis 7.0 prints them.
        exchange(s, cmd("ZSCORE", "p", "x"), b"$19\r\n0.10000000000000001\r\n")


def test_bitmaps(r):
    assert r.setbit("b", 7, 1) == 0 and r.setbit("b", 7, 1) == 1
    assert r.get("b") == b"\x01"
    assert r.getbit("b", 7) == 1 and r.getbit("b", 100) == 0
    r.setbit("b", 9, 1)
    assert r.get("b") == b"\x01\x40"
    assert r.bitcount("b") == 2 and r.bitcount("b", 1, 1) == 1
    assert r.bitpos("b", 1) == 7 and r.bitpos("b", 0) == 0
    with pytest.raises(redis.ResponseError, match="bit offset is not an integer or out of range"):
        r.setbit("b", 2**32, 1)
    with pytest.raises(redis.ResponseError, match="bit is not an integer or out of range"):
        r.execute_command("SETBIT", "b", "1", "2")
    r.set("x", b"\xff\x0f")
    r.set("y", b"\x0f")
    assert r.bitop("AND", "and", "x", "y") == 2 and r.get("and") == b"\x0f\x00"
    assert r.bitop("OR", "or", "x", "y") == 2 and r.get("or") == b"\xff\x0f"
    assert r.bitop("NOT", "not", "y") == 1 and r.get("not") == b"\xf0"
    with pytest.raises(redis.ResponseError, match="BITOP NOT must be called with a single source key."):
        r.bitop("NOT", "not", "x", "y")


def test_multi_exec_watch(server, r):
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        exchange(s, cmd("MULTI"), b"+OK\r\n")
        exchange(s, cmd("SET", "k", "v"), b"+QUEUED\r\n")
        exchange(s, cmd("INCR", "c"), b"+QUEUED\r\n")
        exchange(s, cmd("LPUSH", "k", "x"), b"+QUEUED\r\n")
        exchange(s, cmd("EXEC"),
                 b"*3\r\n+OK\r\n:1\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")
        exchange(s, cmd("MULTI") + cmd("MULTI"), b"+OK\r\n-ERR MULTI calls can not be nested\r\n")
        exchange(s, cmd("GET"), b"-ERR wrong number of arguments for 'get' command\r\n")
        exchange(s, cmd("EXEC"), b"-EXECABORT Transaction discarded because of previous errors.\r\n")
        exchange(s, cmd("DISCARD"), b"-ERR DISCARD without MULTI\r\n")
    assert r.get("k") == b"v" and r.get("c") == b"1"
    # WATCH: a change by another client aborts EXEC (null array).
    with r.pipeline() as pipe:
        pipe.watch("c")
        r.incr("c")
        pipe.multi()
        pipe.set("c", "100")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get("c") == b"2"
    with r.pipeline() as pipe:
        pipe.watch("c")
        pipe.multi()
        pipe.incr("c")
        assert pipe.execute() == [3]


# ---- the same records through the Aerospike client --------------------------

def aerospike_key(set_name: str, key: str):
    """The Aerospike key of Redis key `key`: the digest the client computes
    for the string key, with its partition bits set to the partition of the
    key's Redis Cluster slot (slot >> 2), as docs/redis.md describes."""
    import aerospike
    from redis.crc import key_slot

    digest = bytearray(aerospike.calc_digest("test", set_name, key))
    pid = key_slot(key.encode()) >> 2
    digest[0] = pid & 0xFF
    digest[1] = (digest[1] & 0xF0) | (pid >> 8)
    return ("test", set_name, None, digest)


def test_cross_protocol_hash_and_string(server, r):
    client = server.client()
    r.hset("user:7", mapping={"name": "Ada", "visits": "3"})
    # The plain client digest is another partition: not found there.
    _, meta = client.exists(("test", "redis0", "user:7"))
    assert meta is None
    key, meta, bins = client.get(aerospike_key("redis0", "user:7"))
    assert bins == {"hash": {"name": "Ada", "visits": "3"}}
    assert meta["gen"] >= 1
    r.set("greeting", "hello")
    _, _, bins = client.get(aerospike_key("redis0", "greeting"))
    assert bins == {"str": bytearray(b"hello")}
    # A scan of the set sees the Redis keys with their user keys.
    found = {}
    for (ns, set_name, user_key, _), _, bins in client.scan("test", "redis0").results():
        found[user_key] = bins
    assert found["greeting"] == {"str": bytearray(b"hello")}
    # The reverse: records the Aerospike client writes, read over RESP.
    client.put(aerospike_key("redis0", "profile"), {"hash": {"city": "Paris", "age": 36}})
    assert r.hgetall("profile") == {b"city": b"Paris", b"age": b"36"}
    assert r.type("profile") == b"hash"
    client.put(aerospike_key("redis0", "tags"), {"list": ["a", "b"]})
    assert r.lrange("tags", 0, -1) == [b"a", b"b"]
    client.put(aerospike_key("redis0", "blob"), {"str": bytearray(b"\x00\x01")})
    assert r.get("blob") == b"\x00\x01"
    r1 = redis.Redis(port=server.redis_port, db=3)
    try:
        r1.sadd("members", "x")
        _, _, bins = client.get(aerospike_key("redis3", "members"))
        assert bins == {"set": {"x": None}}
    finally:
        r1.close()


# ---- the real tools -------------------------------------------------------------

@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")
def test_redis_cli_and_pipe_mode(server, r):
    out = subprocess.run(
        ["redis-cli", "-p", str(server.redis_port), "SET", "cli", "value"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0 and out.stdout.strip() == "OK"
    out = subprocess.run(
        ["redis-cli", "-3", "-p", str(server.redis_port), "HGETALL", "nohash"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0
    commands = "".join(f"SET pipe:{i} {i}\r\n" for i in range(500))
    out = subprocess.run(
        ["redis-cli", "-p", str(server.redis_port), "--pipe"],
        input=commands, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "errors: 0, replies: 500" in out.stdout
    assert r.get("pipe:499") == b"499" and len(r.keys("pipe:*")) == 500


@pytest.mark.skipif(shutil.which("redis-benchmark") is None, reason="redis-benchmark not installed")
@pytest.mark.parametrize("resp3", [False, True])
def test_redis_benchmark_default_tests_run_without_errors(server, r, resp3):
    args = ["redis-benchmark", "-p", str(server.redis_port), "-n", "300", "-c", "4", "-P", "4",
            "-r", "100", "-q", "--csv"]
    if resp3:
        args.append("-3")
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith('"')]
    tests = {line.split(",")[0].strip('"') for line in lines[1:]}
    for name in ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPUSH", "LPOP",
                 "RPOP", "SADD", "HSET", "SPOP", "ZADD", "ZPOPMIN", "MSET (10 keys)"]:
        assert name in tests, out.stdout
    assert "error" not in (out.stdout + out.stderr).lower()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_hyperloglog_matches_redis(server, r, tmp_path):
    """PFADD/PFCOUNT agree with a real redis-server, and an HLL string
    copied from Redis (sparse) or to Redis (dense) keeps its count."""
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        real = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                real.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for n in (3, 1000, 20000):
            elements = [f"item:{i}" for i in range(n)]
            for client in (r, real):
                client.delete(f"hll{n}")
                for start in range(0, n, 1000):
                    client.pfadd(f"hll{n}", *elements[start:start + 1000])
            assert r.pfcount(f"hll{n}") == real.pfcount(f"hll{n}")
        assert r.pfadd("hll3", "item:0") == 0 and r.pfadd("hll3", "new") == 1
        r.pfmerge("merged", "hll1000", "hll20000")
        real.pfmerge("merged", "hll1000", "hll20000")
        assert r.pfcount("merged") == real.pfcount("merged")
        assert r.pfcount("hll1000", "hll20000") == real.pfcount("hll1000", "hll20000")
        # Redis's sparse string read here; Bolide's dense string read there.
        r.set("copied", real.get("hll1000"))
        assert r.pfcount("copied") == real.pfcount("hll1000")
        real.set("back", r.get("hll20000"))
        assert real.pfcount("back") == r.pfcount("hll20000")
        r.set("plain", "not an hll")
        with pytest.raises(redis.ResponseError,
                           match="Key is not a valid HyperLogLog string value."):
            r.pfadd("plain", "x")
        assert r.type("hll3") == b"string"
        real.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


CONFIG_TEMPLATE = """service {{
    cluster-name redis-config
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
    info {{
        port {info_port}
    }}
    redis {{
        %s
    }}
}}
namespace test {{
    replication-factor 1
    storage-engine memory {{
        data-size 64M
    }}
}}
"""


def test_config_errors_name_the_directive():
    from bolide_server import run_config_check

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        rc, err, out = run_config_check(CONFIG_TEMPLATE % f"port {port}")
        assert rc not in (0, None)
        assert f"network redis: cannot listen on 127.0.0.1:{port}" in err + out
    rc, err, out = run_config_check(CONFIG_TEMPLATE % "prot 1")
    assert rc not in (0, None)
    assert "line 13" in err + out and "unknown directive in network redis context" in err + out
    rc, err, out = run_config_check(CONFIG_TEMPLATE % "namespace nosuch")
    assert rc not in (0, None) and "no namespace nosuch is configured" in err + out


def test_publish_subscribe(server, r):
    subscriber = redis.Redis(port=server.redis_port)
    pubsub = subscriber.pubsub()
    try:
        pubsub.subscribe("news")
        pubsub.psubscribe("user.*")
        assert pubsub.get_message(timeout=2)["type"] == "subscribe"
        assert pubsub.get_message(timeout=2)["type"] == "psubscribe"
        assert r.publish("news", "hello") == 1
        assert r.publish("user.42", "hi") == 1
        assert r.publish("nobody", "x") == 0
        message = pubsub.get_message(timeout=2)
        assert (message["type"], message["channel"], message["data"]) == ("message", b"news", b"hello")
        message = pubsub.get_message(timeout=2)
        assert (message["type"], message["pattern"], message["channel"], message["data"]) == (
            "pmessage", b"user.*", b"user.42", b"hi")
        assert r.pubsub_channels() == [b"news"]
        assert r.pubsub_numsub("news", "none") == [(b"news", 1), (b"none", 0)]
        assert r.pubsub_numpat() == 1
    finally:
        pubsub.close()
        subscriber.close()
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        exchange(s, cmd("SUBSCRIBE", "a", "b"),
                 b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n")
        exchange(s, cmd("GET", "k"),
                 b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT"
                 b" / RESET are allowed in this context\r\n")
        exchange(s, cmd("PING"), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")
        assert r.publish("b", "payload") == 1
        exchange(s, b"", b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$7\r\npayload\r\n")
        exchange(s, cmd("UNSUBSCRIBE"),
                 b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n")
        exchange(s, cmd("UNSUBSCRIBE"), b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n")
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        # RESP3: NUMSUB and SHARDNUMSUB stay flat arrays (bytes of Redis 7.0.15).
        s.sendall(cmd("HELLO", "3"))
        s.settimeout(5)
        while b"modules" not in s.recv(65536):
            pass
        exchange(s, cmd("PUBSUB", "NUMSUB", "a"), b"*2\r\n$1\r\na\r\n:0\r\n")
        exchange(s, cmd("PUBSUB", "SHARDNUMSUB", "a"), b"*2\r\n$1\r\na\r\n:0\r\n")
    with socket.create_connection(("127.0.0.1", server.redis_port), timeout=5) as s:
        s.sendall(cmd("HELLO", "3"))
        data = b""
        while not data.endswith(b"$7\r\nmodules\r\n*0\r\n"):
            data += s.recv(4096)
        exchange(s, cmd("SUBSCRIBE", "c"), b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n")
        exchange(s, cmd("SET", "k", "v"), b"+OK\r\n")  # RESP3 subscribers run any command
        assert r.publish("c", "x") == 1
        exchange(s, b"", b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n")


# ---- the per-key turn of read-modify-writes ---------------------------------

def test_incr_from_two_service_threads_is_exact():
    """Two redis-py connections INCR one key as fast as they can. The node
    runs two service threads and deals accepted Redis connections to them
    in turn, so two connections opened one after the other run on
    different threads: their read-modify-writes of the key take turns
    (crates/redis/src/keyspace.rs `update`). Every INCR must succeed (no
    TRYAGAIN after too many generation conflicts), the values the two
    threads see must be distinct and together exactly 1..N, and the final
    count exact."""
    (redis_port,) = free_ports(1)
    srv = BolideServer()
    srv.config_text = with_redis_port(srv.config_text, redis_port).replace("service {\n", "service {\n    service-threads 2\n", 1)
    assert "service-threads 2" in srv.config_text
    per_thread = 3000
    with srv:
        wait_for_port(redis_port)
        # Two connections opened back to back: one per service thread.
        clients = [redis.Redis(port=redis_port, protocol=2, single_connection_client=True)
                   for _ in range(2)]
        ids = [c.client_id() for c in clients]
        assert ids[1] == ids[0] + 1, "no other connection came between them"
        seen: list[list[int]] = [[], []]
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def hammer(index: int) -> None:
            try:
                start.wait()
                for _ in range(per_thread):
                    seen[index].append(clients[index].incr("counter"))
            except BaseException as error:  # noqa: BLE001  (reported below)
                errors.append(error)

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert int(clients[0].get("counter")) == 2 * per_thread
        both = seen[0] + seen[1]
        assert sorted(both) == list(range(1, 2 * per_thread + 1))
        # They really interleaved: each thread saw values from all over.
        assert min(seen[0]) < per_thread and max(seen[0]) > per_thread
        assert min(seen[1]) < per_thread and max(seen[1]) > per_thread
        for c in clients:
            c.close()


# ---- LPOS, LMPOP, BLMOVE/BLMPOP, BZPOPMIN/MAX, zset algebra, COPY, OBJECT, BITFIELD

def test_lpos(r):
    r.delete("mylist")  # redis-benchmark, earlier in this file, leaves its own "mylist"
    r.rpush("mylist", "a", "b", "c", "1", "2", "3", "c", "c")
    ex = r.execute_command
    assert ex("LPOS", "mylist", "c") == 2
    assert ex("LPOS", "mylist", "c", "RANK", "2") == 6
    assert ex("LPOS", "mylist", "c", "RANK", "-1") == 7
    assert ex("LPOS", "mylist", "c", "COUNT", "2") == [2, 6]
    assert ex("LPOS", "mylist", "c", "COUNT", "0") == [2, 6, 7]
    assert ex("LPOS", "mylist", "c", "RANK", "-1", "COUNT", "2") == [7, 6]
    assert ex("LPOS", "mylist", "c", "MAXLEN", "1") is None
    assert ex("LPOS", "mylist", "c", "COUNT", "0", "MAXLEN", "7") == [2, 6]
    assert ex("LPOS", "mylist", "x") is None
    assert ex("LPOS", "nolist", "x") is None
    assert ex("LPOS", "nolist", "x", "COUNT", "0") == []
    with pytest.raises(redis.ResponseError, match=r"^RANK can't be zero: use 1 to start from the "
                       r"first match, 2 from the second \.\.\. or use negative to start from the "
                       r"end of the list$"):
        ex("LPOS", "mylist", "c", "RANK", "0")
    with pytest.raises(redis.ResponseError, match="^COUNT can't be negative$"):
        ex("LPOS", "mylist", "c", "COUNT", "-1")
    with pytest.raises(redis.ResponseError, match="^MAXLEN can't be negative$"):
        ex("LPOS", "mylist", "c", "MAXLEN", "-1")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("LPOS", "mylist", "c", "FOO", "1")
    r.set("str", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        ex("LPOS", "str", "x")


def test_lmpop_blmpop_blmove(server, r):
    ex = r.execute_command
    r.rpush("l1", "a", "b", "c")
    assert ex("LMPOP", "2", "none", "l1", "LEFT", "COUNT", "2") == [b"l1", [b"a", b"b"]]
    assert ex("LMPOP", "1", "l1", "RIGHT", "COUNT", "5") == [b"l1", [b"c"]]
    assert r.exists("l1") == 0, "the emptied list is deleted"
    assert ex("LMPOP", "1", "l1", "LEFT") is None
    with pytest.raises(redis.ResponseError, match="^numkeys should be greater than 0$"):
        ex("LMPOP", "0", "l1", "LEFT")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("LMPOP", "1", "l1", "MIDDLE")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("LMPOP", "5", "l1", "LEFT")
    with pytest.raises(redis.ResponseError, match="^count should be greater than 0$"):
        ex("LMPOP", "1", "l1", "LEFT", "COUNT", "0")
    # Blocking forms time out with Redis's nulls...
    started = time.monotonic()
    assert ex("BLMPOP", "0.2", "1", "l1", "LEFT") is None
    assert ex("BLMOVE", "l1", "l2", "LEFT", "RIGHT", "0.2") is None
    assert time.monotonic() - started >= 0.35
    assert raw(server, cmd("BLMOVE", "l1", "l2", "LEFT", "RIGHT", "0.1"), 5) == b"$-1\r\n"
    assert raw(server, cmd("BLMPOP", "0.1", "1", "l1", "LEFT"), 5) == b"*-1\r\n"
    # ...and wake when another connection pushes.
    def push_later():
        time.sleep(0.3)
        with redis.Redis(port=server.redis_port) as other:
            other.rpush("l1", "x", "y")
    threading.Thread(target=push_later).start()
    assert ex("BLMOVE", "l1", "l2", "LEFT", "RIGHT", "5") == b"x"
    assert ex("BLMPOP", "5", "2", "l0", "l1", "RIGHT", "COUNT", "3") == [b"l1", [b"y"]]
    assert r.lrange("l2", 0, -1) == [b"x"]
    with pytest.raises(redis.ResponseError, match="^timeout is negative$"):
        ex("BLMOVE", "l1", "l2", "LEFT", "RIGHT", "-1")


def test_bzpopmin_bzpopmax(server, r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert r.bzpopmin(["none", "z"], 1) == (b"z", b"a", 1.0)
    assert r.bzpopmax("z", 1) == (b"z", b"c", 3.0)
    assert raw(server, cmd("BZPOPMIN", "z", "1"), 25) == b"*3\r\n$1\r\nz\r\n$1\r\nb\r\n$1\r\n2\r\n"
    assert r.exists("z") == 0
    started = time.monotonic()
    assert r.bzpopmin("z", 0.2) is None
    assert time.monotonic() - started >= 0.15
    r3 = redis.Redis(port=server.redis_port, protocol=3)
    r3.zadd("z3", {"m": 1.5})
    assert r3.bzpopmax("z3", 1) == [b"z3", b"m", 1.5]
    r3.close()
    r.set("s", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.bzpopmin("s", 1)


def test_zunion_zinter_zdiff_and_store(r):
    ex = r.execute_command
    r.zadd("z1", {"a": 1, "b": 2})
    r.zadd("z2", {"b": 2, "c": 3})
    r.sadd("s", "b")
    assert r.zunion(["z1", "z2"], withscores=True) == [(b"a", 1.0), (b"c", 3.0), (b"b", 4.0)]
    assert r.zinter(["z1", "z2"], withscores=True) == [(b"b", 4.0)]
    assert ex("ZINTER", "2", "z1", "z2", "WEIGHTS", "2", "3", "AGGREGATE", "MAX",
              "WITHSCORES") == [b"b", b"6"]
    assert ex("ZUNION", "2", "z1", "z2", "AGGREGATE", "MIN") == [b"a", b"b", b"c"]
    assert r.zdiff(["z1", "z2"]) == [b"a"]
    # redis-py leaves ZDIFF's RESP2 reply flat, as Redis sends it.
    assert r.zdiff(["z1", "nothing"], withscores=True) == [b"a", b"1", b"b", b"2"]
    # A plain set counts its members with score 1.
    assert r.zinter(["z1", "s"], withscores=True) == [(b"b", 3.0)]
    assert r.zunionstore("u", ["z1", "z2"]) == 3
    assert r.zrange("u", 0, -1, withscores=True) == [(b"a", 1.0), (b"c", 3.0), (b"b", 4.0)]
    assert r.zinterstore("i", {"z1": 10, "z2": 1}) == 1 and r.zscore("i", "b") == 22.0
    assert r.zdiffstore("d", ["z1", "z2"]) == 1 and r.zrange("d", 0, -1) == [b"a"]
    assert r.zinterstore("d", ["z1", "nothing"]) == 0 and r.exists("d") == 0
    with pytest.raises(redis.ResponseError,
                       match="^at least 1 input key is needed for 'zunion' command$"):
        ex("ZUNION", "0", "z1")
    with pytest.raises(redis.ResponseError,
                       match="^at least 1 input key is needed for 'zunionstore' command$"):
        ex("ZUNIONSTORE", "d", "0", "z1")
    with pytest.raises(redis.ResponseError, match="^weight value is not a float$"):
        ex("ZUNION", "2", "z1", "z2", "WEIGHTS", "1", "x")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("ZUNIONSTORE", "d", "1", "z1", "WITHSCORES")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("ZDIFF", "1", "z1", "WEIGHTS", "2")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("ZUNION", "3", "z1", "z2")
    r.set("str", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.zunion(["z1", "str"])


def test_zrangestore(r):
    r.zadd("src", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert r.zrangestore("dst", "src", 1, 2) == 2
    assert r.zrange("dst", 0, -1, withscores=True) == [(b"b", 2.0), (b"c", 3.0)]
    assert r.execute_command("ZRANGESTORE", "dst", "src", "(1", "+inf", "BYSCORE",
                             "LIMIT", "0", "2") == 2
    assert r.zrange("dst", 0, -1) == [b"b", b"c"]
    assert r.execute_command("ZRANGESTORE", "dst", "src", "4", "1", "BYSCORE", "REV") == 4
    assert r.execute_command("ZRANGESTORE", "dst", "src", "[b", "[c", "BYLEX") == 2
    assert r.zrangestore("dst", "src", 10, 20) == 0 and r.exists("dst") == 0
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("ZRANGESTORE", "dst", "src", "0", "-1", "WITHSCORES")


def test_copy(r):
    r.set("a", "1", px=100000)
    assert r.copy("a", "b") is True and r.get("b") == b"1"
    assert 0 < r.pttl("b") <= 100000, "the TTL is copied"
    r.set("a", "2")
    assert r.copy("a", "b") is False and r.get("b") == b"1"
    assert r.copy("a", "b", replace=True) is True and r.get("b") == b"2"
    assert r.copy("missing", "b") is False
    r.hset("h", mapping={"f": "v"})
    assert r.copy("h", "h2") is True and r.hgetall("h2") == {b"f": b"v"}
    assert r.copy("a", "a", destination_db=1) is True
    r1 = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=1)
    assert r1.get("a") == b"2"
    r1.close()
    with pytest.raises(redis.ResponseError, match="^source and destination objects are the same$"):
        r.copy("a", "a")
    with pytest.raises(redis.ResponseError, match="^DB index is out of range$"):
        r.copy("a", "z", destination_db=99)


def test_object_encoding(r):
    enc = lambda key: r.object("encoding", key)  # noqa: E731
    r.set("n", "123")
    r.set("lead", "0123")
    r.set("s", "hello")
    r.set("long", "x" * 50)
    r.rpush("l", "a")
    r.sadd("ints", "1", "2")
    r.sadd("words", "a")
    r.hset("h", "f", "v")
    r.hset("bigh", "f", "v" * 100)
    r.zadd("z", {"a": 1})
    assert [enc(k) for k in ["n", "lead", "s", "long", "l", "ints", "words", "h", "bigh", "z"]] == [
        b"int", b"embstr", b"embstr", b"raw", b"quicklist", b"intset", b"hashtable", b"listpack",
        b"hashtable", b"listpack"]
    assert enc("missing") is None
    assert r.object("refcount", "n") == 1
    with pytest.raises(redis.ResponseError, match=r"^unknown subcommand 'FOO'\. Try OBJECT HELP\.$"):
        r.execute_command("OBJECT", "FOO", "n")


def test_bitfield(server, r):
    ex = r.execute_command
    # The examples of Redis's BITFIELD documentation.
    assert ex("BITFIELD", "mykey", "INCRBY", "i5", "100", "1", "GET", "u4", "0") == [1, 0]
    for expected in ([1, 1], [2, 2], [3, 3], [0, 3]):
        assert ex("BITFIELD", "ov", "INCRBY", "u2", "100", "1", "OVERFLOW", "SAT",
                  "INCRBY", "u2", "102", "1") == expected
    results = [ex("BITFIELD", "fail", "OVERFLOW", "FAIL", "INCRBY", "u2", "102", "1")
               for _ in range(4)]
    assert results == [[1], [2], [3], [None]]
    assert ex("BITFIELD", "bf", "SET", "i8", "0", "-100", "GET", "i8", "0", "GET", "u8", "0") == \
        [0, -100, 156]
    assert ex("BITFIELD", "bf", "SET", "u8", "#1", "255", "GET", "u16", "0") == [0, 0x9CFF]
    assert r.get("bf") == b"\x9c\xff"
    assert ex("BITFIELD", "bf", "OVERFLOW", "WRAP", "INCRBY", "i8", "0", "-100") == [56]
    assert ex("BITFIELD_RO", "bf", "GET", "u8", "8") == [255]
    assert ex("BITFIELD", "nokey", "GET", "i64", "0") == [0]
    assert r.exists("nokey") == 0
    with pytest.raises(redis.ResponseError, match=r"^Invalid bitfield type\. Use something like "
                       r"i16 u8\. Note that u64 is not supported but i64 is\.$"):
        ex("BITFIELD", "bf", "GET", "u64", "0")
    with pytest.raises(redis.ResponseError, match="^bit offset is not an integer or out of range$"):
        ex("BITFIELD", "bf", "GET", "u8", "-1")
    with pytest.raises(redis.ResponseError, match="^Invalid OVERFLOW type specified$"):
        ex("BITFIELD", "bf", "OVERFLOW", "MAYBE")
    with pytest.raises(redis.ResponseError, match="^BITFIELD_RO only supports the GET subcommand$"):
        ex("BITFIELD_RO", "bf", "SET", "u8", "0", "1")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        ex("BITFIELD", "bf", "PUT", "u8", "0", "1")
    r.rpush("lst", "a")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        ex("BITFIELD", "lst", "GET", "u8", "0")
