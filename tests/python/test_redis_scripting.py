"""Lua scripting on the Redis port against a real bolided: EVAL, EVALSHA,
the _RO forms, SCRIPT, FUNCTION and FCALL, with Redis 7.0.15's reply bytes
and error strings (each expected reply below was captured from Debian's
redis-server 7.0.15 with the same command), the sandbox, the cjson /
cmsgpack / bit / struct libraries, atomicity against two concurrent
clients on two service threads, and a never-ending script answered BUSY to
others and stopped with SCRIPT KILL (from a connection on the script
connection's own service thread too)."""

from __future__ import annotations

import hashlib
import os
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
    # Two service threads: connections opened one after another land on
    # alternate threads (the tests below rely on it).
    srv.config_text = with_redis_port(srv.config_text, redis_port).replace(
        "service {\n", "service {\n    service-threads 2\n", 1)
    assert "service-threads 2" in srv.config_text
    srv.redis_port = redis_port
    with srv:
        wait_for_port(redis_port)
        yield srv


@pytest.fixture
def r(server):
    client = redis.Redis(port=server.redis_port, protocol=2)
    client.flushall()
    client.script_flush()
    client.function_flush()
    client.config_set("busy-reply-threshold", "5000")
    yield client
    client.close()


def cmd(*args: bytes | str) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_reply(sock: socket.socket, buf: bytearray) -> bytes:
    """One complete RESP reply off the socket (RESP2 and RESP3 types)."""
    def need(n: int) -> None:
        while len(buf) < n:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {bytes(buf)!r}"
            buf.extend(chunk)

    def line_end(at: int) -> int:
        while True:
            end = buf.find(b"\r\n", at)
            if end >= 0:
                return end
            need(len(buf) + 1)

    def walk(at: int) -> int:
        need(at + 1)
        kind = buf[at:at + 1]
        end = line_end(at)
        head = bytes(buf[at + 1:end])
        at = end + 2
        if kind in b"$=!":
            n = int(head)
            if n < 0:
                return at
            need(at + n + 2)
            return at + n + 2
        if kind in b"*~>":
            for _ in range(max(int(head), 0)):
                at = walk(at)
            return at
        if kind in b"%|":
            for _ in range(2 * int(head)):
                at = walk(at)
            return at
        return at

    end = walk(0)
    reply = bytes(buf[:end])
    del buf[:end]
    return reply


class Conn:
    """A raw RESP connection: send a command, get its exact reply bytes."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = bytearray()

    def __call__(self, *args: bytes | str) -> bytes:
        self.sock.sendall(cmd(*args))
        return read_reply(self.sock, self.buf)

    def close(self) -> None:
        self.sock.close()


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def suffix(body: str, line: int = 1) -> bytes:
    return f" script: {sha1(body)}, on @user_script:{line}.".encode()


# ---- EVAL: conversions, errors, sandbox -----------------------------------

CONVERSIONS = [
    ("return 1.9", b":1\r\n"),
    ("return -0.5", b":0\r\n"),
    ("return {1e100}", b"*1\r\n:-9223372036854775808\r\n"),
    ("return {1,2,{3,'x'},nil,4}", b"*3\r\n:1\r\n:2\r\n*2\r\n:3\r\n$1\r\nx\r\n"),
    ("return {1,2,3.9,'x',true,false,nil,5}",
     b"*6\r\n:1\r\n:2\r\n:3\r\n$1\r\nx\r\n:1\r\n$-1\r\n"),
    ("return true", b":1\r\n"),
    ("return false", b"$-1\r\n"),
    ("return nil", b"$-1\r\n"),
    ("return {err='x'}", b"-x\r\n"),
    ("return {err='MY x'}", b"-MY x\r\n"),
    ("return {ok=1}", b"*0\r\n"),
    ("return {ok='a\\r\\nb'}", b"+a  b\r\n"),
    ("return redis.error_reply('boom')", b"-ERR boom\r\n"),
    ("return redis.error_reply('-X boom')", b"-X boom\r\n"),
    ("return redis.status_reply('fine')", b"+fine\r\n"),
    ("return {double=3.14}", b"$18\r\n3.1400000000000001\r\n"),
    ("return {map={a=1}}", b"*2\r\n$1\r\na\r\n:1\r\n"),
    ("return {set={a=true}}", b"*1\r\n$1\r\na\r\n"),
    ("return redis.call('ping')", b"+PONG\r\n"),
    ("return redis.call('get','nokey')", b"$-1\r\n"),
    ("local t = redis.call('get','nokey'); return type(t)", b"$7\r\nboolean\r\n"),
    ("return redis.pcall('incr', 'x', 'y')",
     b"-ERR Wrong number of args calling Redis command from script\r\n"),
    ("return redis.call('set', 'n', 0.1)", b"+OK\r\n"),
    ("return redis.call('get', 'n')", b"$19\r\n0.10000000000000001\r\n"),
    ("return tostring(3/2)", b"$3\r\n1.5\r\n"),
    ("return tostring(4/2)", b"$1\r\n2\r\n"),
    ("return redis.sha1hex('')", b"$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"),
    ("return redis.REDIS_VERSION", b"$6\r\n7.0.15\r\n"),
    ("return redis.REDIS_VERSION_NUM", b":458767\r\n"),
    ("return redis.log(redis.LOG_WARNING, 'hi')", b"$-1\r\n"),
    ("return redis.call('echo', 'x')", b"$1\r\nx\r\n"),
    ("return {KEYS[1], ARGV[1], #KEYS, #ARGV}", None),  # with keys, below
    ("local ok, e = pcall(redis.call, 'nosuch'); return e",
     b"$44\r\nERR Unknown Redis command called from script\r\n"),
    ("return pcall(redis.call, 'nosuch')", b"$-1\r\n"),
    ("local ok, e = pcall(error, {err='x y'}); return e", b"$3\r\nx y\r\n"),
    ("return string.format('%d %s', 3, 'x')", b"$3\r\n3 x\r\n"),
    ("return table.getn({1,2,3})", b":3\r\n"),
    ("return unpack({7,8})", b":7\r\n"),
    ("return loadstring('return 9')()", b":9\r\n"),
    ("return _VERSION", b"$7\r\nLua 5.1\r\n"),
]


def test_eval_converts_values_as_redis(server, r):
    c = Conn(server.redis_port)
    try:
        for body, expected in CONVERSIONS:
            if expected is None:
                continue
            assert c("EVAL", body, "0") == expected, body
        assert c("EVAL", "return {KEYS[1], ARGV[1], #KEYS, #ARGV}", "2", "a", "b", "c") == \
            b"*4\r\n$1\r\na\r\n$1\r\nc\r\n:2\r\n:1\r\n"
        # Replies of commands become Lua values and back.
        assert c("EVAL", "return redis.call('hset','h','a','1')", "0") == b":1\r\n"
        assert c("EVAL", "return redis.call('hgetall','h')", "0") == \
            b"*2\r\n$1\r\na\r\n$1\r\n1\r\n"
        assert c("EVAL", "redis.setresp(3); return redis.call('hgetall','h')", "0") == \
            b"*2\r\n$1\r\na\r\n$1\r\n1\r\n"
        assert c("EVAL", "return redis.call('zadd','z','1.5','m')", "0") == b":1\r\n"
        assert c("EVAL", "return redis.call('zscore','z','m')", "0") == b"$3\r\n1.5\r\n"
        assert c("EVAL", "redis.setresp(3); return redis.call('zscore','z','m')", "0") == \
            b"$3\r\n1.5\r\n"
        assert c("EVAL", "redis.setresp(3); return redis.call('zscore','z','m').double * 2",
                 "0") == b":3\r\n"
        assert c("EVAL", "return redis.call('incrbyfloat','f','1.5')", "0") == b"$3\r\n1.5\r\n"
    finally:
        c.close()


def test_eval_resp3_replies(server, r):
    c = Conn(server.redis_port)
    try:
        assert c("HELLO", "3").startswith(b"%7\r\n")
        assert c("EVAL", "return {double=3.14}", "0") == b",3.1400000000000001\r\n"
        assert c("EVAL", "return {map={a=1}}", "0") == b"%1\r\n$1\r\na\r\n:1\r\n"
        assert c("EVAL", "return {set={a=true}}", "0") == b"~1\r\n$1\r\na\r\n"
        # Booleans stay :1 and null unless the script speaks RESP3 itself.
        assert c("EVAL", "return true", "0") == b":1\r\n"
        assert c("EVAL", "return false", "0") == b"_\r\n"
        assert c("EVAL", "redis.setresp(3); return false", "0") == b"#f\r\n"
        assert c("EVAL", "redis.setresp(3); return redis.call('get','nokey')", "0") == b"_\r\n"
        assert c("EVAL", "return {big_number='12345'}", "0") == b"(12345\r\n"
    finally:
        c.close()


def test_eval_errors_as_redis(server, r):
    c = Conn(server.redis_port)
    try:
        c("SET", "s", "x")
        cases = [
            (("EVAL", "return 1", "x"), b"-ERR value is not an integer or out of range\r\n"),
            (("EVAL", "return 1", "-1"), b"-ERR Number of keys can't be negative\r\n"),
            (("EVAL", "return 1", "3", "a"),
             b"-ERR Number of keys can't be greater than number of args\r\n"),
            (("EVAL",), b"-ERR wrong number of arguments for 'eval' command\r\n"),
            (("EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"),
             b"-NOSCRIPT No matching script. Please use EVAL.\r\n"),
            (("EVALSHA", "abc", "0"), b"-NOSCRIPT No matching script. Please use EVAL.\r\n"),
            (("EVAL", "return 1 +", "0"),
             b"-ERR Error compiling script (new function): user_script:1: "
             b"unexpected symbol near '<eof>'\r\n"),
        ]
        for args, expected in cases:
            assert c(*args) == expected, args
        raised = [
            ("return redis.call('lpush', KEYS[1], 'a')", ["s"],
             b"-WRONGTYPE Operation against a key holding the wrong kind of value"),
            ("return redis.call('nosuch')", [],
             b"-ERR Unknown Redis command called from script"),
            ("return redis.call('blpop','x',0)", [],
             b"-ERR This Redis command is not allowed from script"),
            ("return redis.call('subscribe','x')", [],
             b"-ERR This Redis command is not allowed from script"),
            ("return redis.call()", [],
             b"-ERR Please specify at least one argument for this redis lib call"),
            ("return redis.call({})", [],
             b"-ERR Lua redis lib command arguments must be strings or integers"),
            ("return redis.sha1hex()", [], b"-ERR wrong number of arguments"),
            ("return redis.setresp(4)", [], b"-ERR RESP version must be 2 or 3."),
            ("error('boom')", [], b"-ERR user_script:1: boom"),
            ("error({err='MYERR x'})", [], b"-MYERR x"),
            ("os.exit()", [],
             b"-ERR user_script:1: Script attempted to access nonexistent global variable 'os'"),
            ("return type(print)", [],
             b"-ERR user_script:1: Script attempted to access nonexistent global variable 'print'"),
            ("x = 1", [], b"-ERR user_script:1: Attempt to modify a readonly table"),
            ("redis.x = 1", [], b"-ERR user_script:1: Attempt to modify a readonly table"),
            ("return cjson.decode('{bad')", [],
             b"-ERR user_script:1: Expected object key string but found invalid token "
             b"at character 2"),
        ]
        for body, keys, expected in raised:
            reply = c("EVAL", body, str(len(keys)), *keys)
            assert reply == expected + suffix(body) + b"\r\n", body
        # redis.pcall gives the plain error.
        assert c("EVAL", "return redis.pcall('lpush', KEYS[1], 'a')", "1", "s") == \
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
        # The line of the error is the script's.
        body = "local a = 1\n\nreturn redis.call('nosuch')"
        assert c("EVAL", body, "0") == \
            b"-ERR Unknown Redis command called from script" + suffix(body, 3) + b"\r\n"
        # Nothing a script reaches lets it out or leaves state behind.
        for name in ["io", "require", "loadfile", "dofile", "debug", "package", "getfenv"]:
            reply = c("EVAL", f"return {name}", "0")
            assert b"Script attempted to access nonexistent global variable" in reply, name
        body = "return load(string.dump(function() return 1 end))"
        assert c("EVAL", body, "0") == b"-ERR user_script:1: bad argument #1 to 'load' (function " \
            b"expected, got string)" + suffix(body) + b"\r\n"
        assert c("EVAL", "return loadstring(string.dump(function() return 1 end))", "0") == \
            b"$-1\r\n"
        body = "rawset(_G, 'y', 1)"
        assert c("EVAL", body, "0") == \
            b"-ERR Attempt to modify a readonly table" + suffix(body) + b"\r\n"
        assert c("EVAL", "string.upper = nil", "0").startswith(
            b"-ERR user_script:1: Attempt to modify a readonly table")
    finally:
        c.close()


def test_scripts_are_bounded_in_memory(server, r):
    c = Conn(server.redis_port)
    try:
        body = "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end"
        reply = c("EVAL", body, "0")
        assert reply.startswith(b"-ERR Error running script " + sha1(body).encode() +
                                b", not enough memory"), reply
        assert c("EVAL", "return 1", "0") == b":1\r\n"
        assert c("PING") == b"+PONG\r\n"
    finally:
        c.close()


def test_script_cache(server, r):
    c = Conn(server.redis_port)
    try:
        body = "return ARGV[1] .. '!'"
        assert c("SCRIPT", "LOAD", body) == b"$40\r\n" + sha1(body).encode() + b"\r\n"
        assert c("EVALSHA", sha1(body), "0", "hi") == b"$3\r\nhi!\r\n"
        assert c("EVALSHA", sha1(body).upper(), "0", "yo") == b"$3\r\nyo!\r\n"
        assert c("SCRIPT", "EXISTS", sha1(body), "nope") == b"*2\r\n:1\r\n:0\r\n"
        assert c("EVAL_RO", "return 1", "0") == b":1\r\n"
        assert c("SCRIPT", "EXISTS", sha1("return 1")) == b"*1\r\n:1\r\n"
        assert c("SCRIPT", "FLUSH", "foo") == b"-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n"
        assert c("SCRIPT", "FLUSH", "ASYNC") == b"+OK\r\n"
        assert c("SCRIPT", "EXISTS", sha1(body)) == b"*1\r\n:0\r\n"
        assert c("EVALSHA", sha1(body), "0") == b"-NOSCRIPT No matching script. Please use EVAL.\r\n"
        assert c("SCRIPT", "KILL") == b"-NOTBUSY No scripts in execution right now.\r\n"
        assert c("SCRIPT", "FOO") == b"-ERR unknown subcommand 'FOO'. Try SCRIPT HELP.\r\n"
        # HELP: the exact bytes Redis 7.0.15 answers (their SHA-1, taken
        # from Debian's redis-server 7.0.15).
        help_reply = c("SCRIPT", "HELP")
        assert help_reply.startswith(b"*17\r\n+SCRIPT <subcommand> [<arg> [value] [opt] ...]")
        assert hashlib.sha1(help_reply).hexdigest() == "cc27b7a0657b65fe2fe03666b7a9c8ee0e2cd4d1"
        assert c("SCRIPT", "LOAD", "return 1 +") == \
            b"-ERR Error compiling script (new function): user_script:1: unexpected symbol " \
            b"near '<eof>'\r\n"
    finally:
        c.close()
    # redis-py's Script object: EVALSHA, and EVAL after NOSCRIPT.
    incr = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    assert incr(keys=["n"], args=[5]) == 5
    r.script_flush()
    assert incr(keys=["n"], args=[2]) == 7


def test_read_only_scripts_and_flags(server, r):
    c = Conn(server.redis_port)
    try:
        body = "return redis.call('set','a','b')"
        assert c("EVAL_RO", body, "0") == \
            b"-ERR Write commands are not allowed from read-only scripts." + suffix(body) + b"\r\n"
        body = "#!lua flags=no-writes\nreturn redis.call('set','a','b')"
        assert c("EVAL", body, "0") == \
            b"-ERR Write commands are not allowed from read-only scripts." + suffix(body, 2) + \
            b"\r\n"
        assert c("EVAL", "#!lua flags=bogus\nreturn 1", "0") == \
            b"-ERR Unexpected flag in script shebang: bogus\r\n"
        assert c("EVAL_RO", "#!lua\nreturn 1", "0") == \
            b"-ERR Can not execute a script with write flag using *_ro command.\r\n"
        assert c("EVAL_RO", "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", "1",
                 "a") == b"$-1\r\n"
        assert c("GET", "a") == b"$-1\r\n"
    finally:
        c.close()


def test_select_inside_a_script_stays_in_the_script(server, r):
    c = Conn(server.redis_port)
    try:
        assert c("EVAL", "redis.call('select', 3); return redis.call('set', 'k', 'in3')", "0") \
            == b"+OK\r\n"
        assert c("GET", "k") == b"$-1\r\n"
        assert c("SELECT", "3") == b"+OK\r\n"
        assert c("GET", "k") == b"$3\r\nin3\r\n"
        # A script runs in its caller's database.
        assert c("EVAL", "return redis.call('get', 'k')", "0") == b"$3\r\nin3\r\n"
    finally:
        c.close()


def test_libraries_cjson_cmsgpack_bit_struct(server, r):
    c = Conn(server.redis_port)
    try:
        cases = [
            ("return cjson.encode({1,2,{a=1}})", b'$13\r\n[1,2,{"a":1}]\r\n'),
            ("return cjson.encode({a=1.5})", b'$9\r\n{"a":1.5}\r\n'),
            ("return cjson.decode('[1,2,3]')[2]", b":2\r\n"),
            ("return cjson.encode(cjson.decode('{\"a\":[1,2,{\"b\":null}]}'))",
             b'$22\r\n{"a":[1,2,{"b":null}]}\r\n'),
            ("return cjson.encode({[1]=1,[3]=3})", b"$10\r\n[1,null,3]\r\n"),
            ("return cjson.encode('a/b\"\\\\')", b'$10\r\n"a\\/b\\"\\\\"\r\n'),
            ("return bit.band(7,3)", b":3\r\n"),
            ("return bit.tohex(255)", b"$8\r\n000000ff\r\n"),
            ("return bit.tohex(-1, -4)", b"$4\r\nFFFF\r\n"),
            ("return bit.lshift(1, 31)", b":-2147483648\r\n"),
            ("return bit.bnot(0)", b":-1\r\n"),
            ("return bit.arshift(-256, 4)", b":-16\r\n"),
            ("return bit.bswap(0x12345678)", b":2018915346\r\n"),
            ("return struct.pack('>I2', 258)", b"$2\r\n\x01\x02\r\n"),
            ("return {struct.unpack('<i4', struct.pack('<i4', -5))}", b"*2\r\n:-5\r\n:5\r\n"),
            ("return struct.size('!4 b i8')", b":12\r\n"),
            ("return struct.size('! b d')", b":16\r\n"),
            ("return cmsgpack.pack({1,2,3})", b"$4\r\n\x93\x01\x02\x03\r\n"),
            ("return cmsgpack.unpack(cmsgpack.pack({1,'a',{b=2}}))",
             b"*3\r\n:1\r\n$1\r\na\r\n*0\r\n"),
            ("return cmsgpack.pack(1.5, -1, 300, 'abc', true, {a=1})",
             b"$18\r\n\xca?\xc0\x00\x00\xff\xcd\x01,\xa3abc\xc3\x81\xa1a\x01\r\n"),
        ]
        for body, expected in cases:
            assert c("EVAL", body, "0") == expected, body
        for body, message in [
            ("return cjson.encode({[1]=1,[30]=3})",
             b"Cannot serialise table: excessively sparse array"),
            ("return cjson.encode(1/0)", b"Cannot serialise number: must not be NaN or Inf"),
            ("return cjson.decode('[1,2')",
             b"Expected comma or array end but found T_END at character 5"),
            ("return cjson.decode('')", b"Expected value but found T_END at character 1"),
            ("return cjson.decode('\"abc')",
             b"Expected value but found unexpected end of string at character 5"),
        ]:
            assert c("EVAL", body, "0") == b"-ERR user_script:1: " + message + suffix(body) + \
                b"\r\n", body
    finally:
        c.close()


def test_redis_cli_eval(server, r, tmp_path):
    script = tmp_path / "incr.lua"
    script.write_text("return redis.call('incrby', KEYS[1], ARGV[1])\n")
    run = lambda *args: subprocess.run(  # noqa: E731
        ["redis-cli", "-p", str(server.redis_port), *args],
        capture_output=True, text=True, timeout=30)
    assert run("--eval", str(script), "cli:n", ",", "4").stdout.strip() == "4"
    assert run("--eval", str(script), "cli:n", ",", "5").stdout.strip() == "9"
    assert run("get", "cli:n").stdout.strip() == "9"


# ---- FUNCTION and FCALL ----------------------------------------------------

MYLIB = ("#!lua name=mylib\n"
         "redis.register_function('myfunc', function(keys, args) return args[1] end)\n"
         "redis.register_function{function_name='ro', callback=function(keys, args) "
         "return redis.call('get', keys[1]) end, flags={'no-writes'}, description='a reader'}")
WRLIB = ("#!lua name=wr\n"
         "redis.register_function{function_name='w', callback=function(keys, args) "
         "return redis.call('set', keys[1], args[1]) end}\n"
         "redis.register_function{function_name='e', callback=function(keys, args) "
         "return redis.call('nosuch') end}")


def test_function_load_fcall_list_delete(server, r):
    c = Conn(server.redis_port)
    try:
        assert c("FUNCTION", "LOAD", MYLIB) == b"$5\r\nmylib\r\n"
        assert c("FUNCTION", "LOAD", "#!lua name=mylib\nredis.register_function('x', "
                 "function() end)") == b"-ERR Library 'mylib' already exists\r\n"
        assert c("FUNCTION", "LOAD", "#!lua name=other\nredis.register_function('myfunc', "
                 "function() end)") == b"-ERR Function myfunc already exists\r\n"
        assert c("FCALL", "myfunc", "0", "hello") == b"$5\r\nhello\r\n"
        assert c("FCALL", "nosuch", "0") == b"-ERR Function not found\r\n"
        assert c("FCALL", "myfunc", "x") == b"-ERR Bad number of keys provided\r\n"
        assert c("FCALL", "myfunc", "5") == \
            b"-ERR Number of keys can't be greater than number of args\r\n"
        assert c("SET", "s", "v") == b"+OK\r\n"
        assert c("FCALL_RO", "myfunc", "0", "a") == \
            b"-ERR Can not execute a script with write flag using *_ro command.\r\n"
        assert c("FCALL_RO", "ro", "1", "s") == b"$1\r\nv\r\n"
        assert c("FUNCTION", "LOAD", WRLIB) == b"$2\r\nwr\r\n"
        assert c("FCALL", "w", "1", "k", "v2") == b"+OK\r\n"
        assert c("GET", "k") == b"$2\r\nv2\r\n"
        assert c("FCALL", "e", "0") == b"-ERR Unknown Redis command called from script " \
            b"script: e, on @user_function:3.\r\n"
        assert c("FUNCTION", "STATS") == \
            b"*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n" \
            b"$15\r\nlibraries_count\r\n:2\r\n$15\r\nfunctions_count\r\n:4\r\n"
        assert c("FUNCTION", "LIST", "LIBRARYNAME", "zz") == b"*0\r\n"
        assert c("FUNCTION", "LIST", "BOGUS") == b"-ERR Unknown argument BOGUS\r\n"
        assert c("FUNCTION", "LIST", "LIBRARYNAME") == \
            b"-ERR library name argument was not given\r\n"
        assert c("FUNCTION", "LOAD", "REPLACE", "#!lua name=wr\nredis.register_function('w2', "
                 "function() return 2 end)") == b"$2\r\nwr\r\n"
        assert c("FCALL", "w", "1", "k", "v") == b"-ERR Function not found\r\n"
        assert c("FCALL", "w2", "0") == b":2\r\n"
        assert c("FUNCTION", "DELETE", "wr") == b"+OK\r\n"
        assert c("FUNCTION", "DELETE", "wr") == b"-ERR Library not found\r\n"
        assert c("FCALL", "w2", "0") == b"-ERR Function not found\r\n"
        assert c("FUNCTION", "FLUSH", "BOGUS") == \
            b"-ERR FUNCTION FLUSH only supports SYNC|ASYNC option\r\n"
        assert c("FUNCTION", "KILL") == b"-NOTBUSY No scripts in execution right now.\r\n"
        assert c("FUNCTION", "BOGUS") == b"-ERR unknown subcommand 'BOGUS'. Try FUNCTION HELP.\r\n"
        help_reply = c("FUNCTION", "HELP")
        assert help_reply.startswith(b"*40\r\n+FUNCTION <subcommand> [<arg> [value] [opt] ...]")
        assert hashlib.sha1(help_reply).hexdigest() == "39570bd6e0b3ff6be0a3b0323b23a10ab29d362b"
    finally:
        c.close()
    # redis-py's view of the same.
    listed = r.function_list(library="mylib", withcode=True)
    assert len(listed) == 1
    lib = {k.decode() if isinstance(k, bytes) else k: v
           for k, v in zip(listed[0][::2], listed[0][1::2])}
    assert lib["library_name"] == b"mylib" and lib["engine"] == b"LUA"
    assert lib["library_code"] == MYLIB.encode()
    functions = sorted(
        {f[i].decode(): f[i + 1] for i in range(0, len(f), 2)}["name"] for f in lib["functions"])
    assert functions == [b"myfunc", b"ro"]
    assert r.fcall("myfunc", 0, "x") == b"x"
    assert r.function_flush() is True
    assert r.function_list() == []


def test_a_library_deleted_and_loaded_again_at_once_stays_loaded(server, r):
    """Library changes are shared through the cluster metadata and come
    back to the node that made them: a delete coming back must not remove
    the library loaded again since (redis-py's test_fcall_ro saw
    "Function not found" right after FUNCTION LOAD on a loaded machine)."""
    code = ("#!lua name=echoback\nredis.register_function{function_name='echoback', "
            "callback=function(k, a) return a[1] end, flags={'no-writes'}}")
    for i in range(40):
        r.function_load(code, replace=True)
        r.function_delete("echoback")
        r.function_load(code)
        for _ in range(3):
            assert r.fcall_ro("echoback", 0, str(i)) == str(i).encode(), i
            time.sleep(0.005)
    r.function_delete("echoback")
    time.sleep(0.2)
    with pytest.raises(redis.ResponseError, match="Function not found"):
        r.fcall("echoback", 0, "x")
    assert r.function_list() == []


def test_function_load_errors(server, r):
    c = Conn(server.redis_port)
    try:
        cases = [
            ("return 1", b"-ERR Missing library metadata\r\n"),
            ("#!lua name=bad\nreturn 1", b"-ERR No functions registered\r\n"),
            ("#!lua name=bad\nx(",
             b"-ERR Error compiling function: user_function:2: unexpected symbol near '<eof>'\r\n"),
            ("#!lua name=bad\nredis.call('get','x')",
             b"-ERR Error registering functions: ERR user_function:2: Script attempted to "
             b"access nonexistent global variable 'call'\r\n"),
            ("#!lua name=bad\nlocal s = string.format('x')",
             b"-ERR Error registering functions: ERR user_function:2: Script attempted to "
             b"access nonexistent global variable 'string'\r\n"),
            ("#!lua name=bad\nredis.register_function('a-b', function() end)",
             b"-ERR Error registering functions: ERR Library names can only contain letters, "
             b"numbers, or underscores(_) and must be at least one character long\r\n"),
            ("#!lua name=bad\nredis.register_function('a', function() end)\n"
             "redis.register_function('a', function() end)",
             b"-ERR Error registering functions: ERR Function already exists in the library\r\n"),
            ("#!lua name=bad\nredis.register_function('a')",
             b"-ERR Error registering functions: ERR calling redis.register_function with a "
             b"single argument is only applicable to Lua table (representing named "
             b"arguments).\r\n"),
            ("#!lua name=bad\nredis.register_function{function_name='a', "
             "callback=function() end, flags={'bogus'}}",
             b"-ERR Error registering functions: ERR unknown flag given\r\n"),
            ("#!lua name=bad\nredis.register_function{function_name='a'}",
             b"-ERR Error registering functions: ERR redis.register_function must get a "
             b"callback argument\r\n"),
            ("#!lua name=bad foo=bar\nredis.register_function('a', function() end)",
             b"-ERR Invalid metadata value given: foo=bar\r\n"),
            ("#!lua\nredis.register_function('a', function() end)",
             b"-ERR Library name was not given\r\n"),
            ("#!js name=x\nredis.register_function('a', function() end)",
             b"-ERR Engine 'js' not found\r\n"),
            ("#!lua name=timeout\nwhile true do end",
             b"-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n"),
        ]
        for code, expected in cases:
            assert c("FUNCTION", "LOAD", code) == expected, code
        assert c("FUNCTION", "LOAD", "BOGUS", "#!lua name=x\n") == \
            b"-ERR Unknown option given: BOGUS\r\n"
        assert c("FUNCTION", "LIST") == b"*0\r\n"
    finally:
        c.close()


# FUNCTION DUMP of Redis 7.0.15 after FUNCTION LOAD of the library below
# (its code LZF-compressed, as Redis writes code over 20 bytes).
REDIS_DUMP = bytes.fromhex(
    "f5c34056405b1f23216c7561206e616d653d6d796c69620a72656469732e72656769737465725f0b"
    "66756e6374696f6e28276d79400b02272c2040066012116b6579732c2061726773292072657475"
    "726e600c075b315d20656e64290a008d5936adc6e707da")
REDIS_DUMP_CODE = (b"#!lua name=mylib\nredis.register_function('myfunc', "
                   b"function(keys, args) return args[1] end)")


def test_function_libraries_survive_a_restart():
    """Libraries are saved in the work-directory, which the node makes at
    start when it is missing (it was not, and nothing was saved)."""
    (redis_port,) = free_ports(1)
    srv = BolideServer()
    srv.config_text = with_redis_port(srv.config_text, redis_port)
    srv.keep_files = True  # the files outlive the stop, as on a real restart
    assert not os.path.exists(srv.work_directory)
    with srv:
        wait_for_port(redis_port)
        client = redis.Redis(port=redis_port)
        assert client.function_load(WRLIB.replace("name=wr", "name=kept")) == b"kept"
        assert os.path.exists(os.path.join(srv.work_directory, "redis-functions.rdb"))
        client.close()
        srv.stop()
        srv.start()
        wait_for_port(redis_port)
        client = redis.Redis(port=redis_port)
        assert [lib[1] for lib in client.function_list()] == [b"kept"]
        assert client.fcall("w", 1, "after-restart", "yes") == b"OK"
        client.close()
    shutil.rmtree(srv.tmpdir, ignore_errors=True)


def test_function_dump_and_restore(server, r):
    assert r.function_restore(REDIS_DUMP) is True
    assert r.fcall("myfunc", 0, "from-redis") == b"from-redis"
    with pytest.raises(redis.ResponseError, match="Library mylib already exists"):
        r.function_restore(REDIS_DUMP)
    assert r.function_load(WRLIB.replace("name=wr", "name=second")) == b"second"
    payload = r.function_dump()
    assert r.function_flush() is True
    assert r.function_list() == []
    assert r.function_restore(payload, "FLUSH") is True
    names = sorted(lib[1] for lib in r.function_list())
    assert names == [b"mylib", b"second"]
    assert r.fcall("w", 1, "dumped", "yes") == b"OK"
    assert r.get("dumped") == b"yes"
    assert r.function_restore(REDIS_DUMP, "REPLACE") is True
    damaged = bytearray(payload)
    damaged[5] ^= 0xFF
    with pytest.raises(redis.ResponseError, match="DUMP payload version or checksum are wrong"):
        r.function_restore(bytes(damaged))
    with pytest.raises(redis.ResponseError, match="Wrong restore policy given"):
        r.function_restore(payload, "BOGUS")
    code = [lib for lib in r.function_list(withcode=True) if lib[1] == b"mylib"][0][-1]
    assert code == REDIS_DUMP_CODE


# ---- atomicity, BUSY and SCRIPT KILL --------------------------------------

def spin_logged(server, client, name: str):
    """Runs a never-ending script on `client` in a thread, and returns once
    the script's own log line says it runs (every command waits while it
    does, so nothing else can tell): the thread, and the list its EVAL's
    outcome (a reply or an error) goes to."""
    outcome: list = []

    def spin() -> None:
        try:
            outcome.append(client.eval(
                f"redis.log(redis.LOG_WARNING, '{name} started') while true do end", 0))
        except redis.ResponseError as error:
            outcome.append(error)

    thread = threading.Thread(target=spin)
    thread.start()
    assert wait_for(lambda: f"{name} started" in server.log_text(), 10)
    return thread, outcome


def two_clients(port: int) -> list:
    """Two connections opened back to back: one per service thread."""
    clients = [redis.Redis(port=port, protocol=2, single_connection_client=True)
               for _ in range(2)]
    ids = [c.client_id() for c in clients]
    assert ids[1] == ids[0] + 1, "no other connection came between them"
    return clients


def test_scripts_are_atomic_across_service_threads(server, r):
    """Two connections on the two service threads each run a script that
    reads a counter, spins a while, then writes it plus one, and also sets
    a second key to the same value; a third connection reads both keys
    meanwhile. Without atomicity updates are lost and the reader sees the
    keys apart."""
    per_client = 200
    body = ("local v = tonumber(redis.call('get', KEYS[1]) or '0')\n"
            "for i = 1, 20000 do end\n"
            "redis.call('set', KEYS[1], v + 1)\n"
            "for i = 1, 20000 do end\n"
            "redis.call('set', KEYS[2], v + 1)\n"
            "return v + 1")
    clients = two_clients(server.redis_port)
    reader = redis.Redis(port=server.redis_port, protocol=2, single_connection_client=True)
    seen: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    apart: list[tuple] = []
    done = threading.Event()
    start = threading.Barrier(3)

    def run(index: int) -> None:
        try:
            start.wait()
            for _ in range(per_client):
                seen[index].append(clients[index].eval(body, 2, "{a}n", "{a}m"))
        except BaseException as error:  # noqa: BLE001  (reported below)
            errors.append(error)

    def read() -> None:
        start.wait()
        while not done.is_set():
            pair = tuple(reader.mget("{a}n", "{a}m"))
            if pair[0] != pair[1]:
                apart.append(pair)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    watcher = threading.Thread(target=read)
    for t in [*threads, watcher]:
        t.start()
    for t in threads:
        t.join(timeout=300)
    done.set()
    watcher.join(timeout=30)
    assert not any(t.is_alive() for t in [*threads, watcher])
    assert errors == []
    assert apart == []
    assert int(r.get("{a}n")) == 2 * per_client
    assert sorted(seen[0] + seen[1]) == list(range(1, 2 * per_client + 1))
    for c in [*clients, reader]:
        c.close()


def wait_for(predicate, timeout: float = 30.0, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(step)


def test_a_never_ending_script_is_busy_then_killed(server, r):
    """A script that never ends: other clients wait, then after
    busy-reply-threshold get BUSY; SCRIPT KILL (sent on the script
    connection's own service thread, and on the other) stops it."""
    r.config_set("busy-reply-threshold", "300")
    assert r.config_get("lua-time-limit") == {"lua-time-limit": "300"}
    runner, other = two_clients(server.redis_port)
    # The third connection is dealt to the runner's service thread.
    same_thread = redis.Redis(port=server.redis_port, protocol=2, single_connection_client=True)
    assert same_thread.client_id() == other.client_id() + 1
    outcome: list = []

    def spin() -> None:
        try:
            outcome.append(runner.eval("local i = 0 while true do i = i + 1 end", 0))
        except redis.ResponseError as error:
            outcome.append(error)

    thread = threading.Thread(target=spin)
    thread.start()
    for client in (other, same_thread):
        def busy(client=client):
            try:
                client.get("x")
            except redis.exceptions.BusyLoadingError:
                return False
            except redis.ResponseError as error:
                return str(error).startswith("BUSY Redis is busy running a script.")
            return False
        assert wait_for(busy)
    with pytest.raises(redis.ResponseError, match="BUSY Redis is busy running a script. "
                       "You can only call SCRIPT KILL or SHUTDOWN NOSAVE."):
        other.set("k", "v")
    with pytest.raises(redis.ResponseError,
                       match="BUSY Redis is busy running a script. You can only call "
                             "SCRIPT KILL or SHUTDOWN NOSAVE."):
        other.function_kill()
    assert same_thread.script_kill() is True
    thread.join(timeout=30)
    assert not thread.is_alive()
    body = "local i = 0 while true do i = i + 1 end"
    assert len(outcome) == 1 and isinstance(outcome[0], redis.ResponseError)
    assert str(outcome[0]) == ("Script killed by user with SCRIPT KILL..."
                               f" script: {sha1(body)}, on @user_script:1.")
    assert other.set("k", "v") is True
    with pytest.raises(redis.ResponseError, match="NOTBUSY No scripts in execution right now."):
        other.script_kill()
    for c in (runner, other, same_thread):
        c.close()


def test_client_reply_skip_holds_for_a_command_that_waited_for_a_script(server, r):
    """CLIENT REPLY SKIP drops the next command's answer even when that
    command first waited for a running script (and then got BUSY): the
    skip is not used up by the wait, so the answer after it is PONG's."""
    r.config_set("busy-reply-threshold", "2000")
    runner, other = two_clients(server.redis_port)
    raw = Conn(server.redis_port)
    raw.sock.sendall(cmd("CLIENT", "REPLY", "SKIP"))
    thread, outcome = spin_logged(server, runner, "reply-skip-spin")
    # Sent while the script runs, under busy-reply-threshold: it waits,
    # then answers BUSY, which the skip drops.
    raw.sock.sendall(cmd("SET", "skip:k", "v"))

    def busy():
        try:
            other.get("x")
        except redis.ResponseError as error:
            return str(error).startswith("BUSY Redis is busy running a script.")
        return False

    assert wait_for(busy)
    # The waiting SET looks again every 2 ms: let it get its BUSY before
    # the script ends.
    time.sleep(0.2)
    assert other.script_kill() is True
    thread.join(timeout=30)
    assert not thread.is_alive() and len(outcome) == 1
    assert raw("PING") == b"+PONG\r\n"
    assert r.get("skip:k") is None, "the SET ran before the script: nothing was checked"
    for c in (runner, other):
        c.close()
    raw.close()


def test_client_reply_skip_and_off_drop_a_scripts_reply(server, r):
    """A script's reply comes from the script engine after the command
    returned; CLIENT REPLY SKIP and OFF drop it all the same, and the
    script still runs."""
    raw = Conn(server.redis_port)
    raw.sock.sendall(cmd("CLIENT", "REPLY", "SKIP")
                     + cmd("EVAL", "redis.call('set', KEYS[1], 'a') return 'skipped'", "1", "reply:k")
                     + cmd("EVALSHA", "0" * 40, "0"))
    # Only the second script command answers (no such script).
    assert read_reply(raw.sock, raw.buf).startswith(b"-NOSCRIPT"), "the skipped EVAL answered"
    assert r.get("reply:k") == b"a"
    raw.sock.sendall(cmd("CLIENT", "REPLY", "OFF")
                     + cmd("EVAL", "redis.call('set', KEYS[1], 'b') return 'off'", "1", "reply:k")
                     + cmd("FUNCTION", "LOAD", "#!lua name=replyoff\nredis.register_function('f', function() return 1 end)")
                     + cmd("CLIENT", "REPLY", "ON"))
    assert read_reply(raw.sock, raw.buf) == b"+OK\r\n", "a dropped reply was sent"
    assert raw("PING") == b"+PONG\r\n"
    assert r.get("reply:k") == b"b"
    assert r.fcall("f", 0) == 1
    r.function_delete("replyoff")
    raw.close()


def test_exec_during_a_busy_script_is_discarded(server, r):
    """EXEC while a script has run past busy-reply-threshold: the whole
    transaction is discarded with EXECABORT … BUSY, none of it runs, and
    the connection is out of MULTI (Redis's unit/multi "just EXEC and
    script timeout")."""
    r.config_set("busy-reply-threshold", "100")
    r.set("xx", 1)
    runner, other = two_clients(server.redis_port)
    raw = Conn(server.redis_port)
    assert raw("MULTI") == b"+OK\r\n"
    assert raw("INCR", "xx") == b"+QUEUED\r\n"
    thread, outcome = spin_logged(server, runner, "exec-busy-spin")
    time.sleep(0.3)  # past busy-reply-threshold: EXEC is answered at once
    assert raw("EXEC") == (b"-EXECABORT Transaction discarded because of: BUSY Redis is busy "
                           b"running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n")
    assert other.script_kill() is True
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert r.get("xx") == b"1", "the discarded transaction ran"
    assert raw("PING", "asdf") == b"$4\r\nasdf\r\n", "still in MULTI"
    for c in (runner, other):
        c.close()
    raw.close()


def test_a_script_that_wrote_cannot_be_killed_and_functions_use_function_kill(server, r):
    r.config_set("busy-reply-threshold", "200")
    runner, other = two_clients(server.redis_port)
    # Writes, then runs for about 1.5 s by the server's clock.
    body = ("redis.call('set', KEYS[1], 'written')\n"
            "local t = redis.call('time')\n"
            "local start = t[1] * 1000000 + t[2]\n"
            "while true do\n"
            "  t = redis.call('time')\n"
            "  if t[1] * 1000000 + t[2] - start > 1500000 then return 'done' end\n"
            "end")
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(runner.eval(body, 1, "w")))
    thread.start()

    def busy() -> bool:
        try:
            other.ping()
        except redis.ResponseError as error:
            return "BUSY" in str(error)
        return False
    assert wait_for(busy)
    with pytest.raises(redis.ResponseError, match="UNKILLABLE Sorry the script already executed "
                       "write commands against the dataset."):
        other.script_kill()
    thread.join(timeout=60)
    assert outcome == [b"done"]
    assert other.get("w") == b"written"
    # A function is stopped with FUNCTION KILL, and FUNCTION STATS shows it.
    r.function_load("#!lua name=spin\nredis.register_function('spin', function() "
                    "while true do end end)")
    thread = threading.Thread(target=lambda: outcome.append(
        pytest.raises(redis.ResponseError, runner.fcall, "spin", 0)))
    thread.start()

    def stats():
        try:
            found = other.function_stats()
        except redis.ResponseError:
            return None
        return found if found[1] else None
    stats_reply = wait_for(stats)
    running = dict(zip(stats_reply[1][::2], stats_reply[1][1::2]))
    assert running[b"name"] == b"spin"
    assert running[b"command"] == [b"FCALL", b"spin", b"0"]
    with pytest.raises(redis.ResponseError, match="BUSY Redis is busy running a script. "
                       "You can only call FUNCTION KILL or SHUTDOWN NOSAVE."):
        other.script_kill()
    assert other.function_kill() == b"OK"
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert "Script killed by user with SCRIPT KILL... script: spin, on @user_function:2." \
        in str(outcome[-1].value)
    assert other.ping() is True
    for c in (runner, other):
        c.close()


def test_a_script_inside_multi_exec(server, r):
    with r.pipeline(transaction=True) as p:
        p.set("m", "1")
        p.eval("return redis.call('incr', KEYS[1])", 1, "m")
        p.get("m")
        assert p.execute() == [True, 2, b"2"]
