"""AUTH on a secured node's Redis port: connections log in as Bolide users
(the users the Aerospike clients log in as), and the same access control
decides what they may do: NOAUTH before logging in, WRONGPASS for bad
credentials, NOPERM (Redis's exact text) for a read-only user's writes."""

from __future__ import annotations

import socket
import time

import pytest

redis = pytest.importorskip("redis")

from bolide_server import BolideServer, free_ports, wait_for_port, with_redis_port  # noqa: E402
from security_helpers import client, secured_config  # noqa: E402


@pytest.fixture(scope="module")
def node():
    (redis_port,) = free_ports(1)
    text = secured_config().replace(
        "network {{\n", f"network {{{{\n    redis {{{{\n        port {redis_port}\n    }}}}\n", 1)
    srv = BolideServer(config_text=text)
    srv.redis_port = redis_port
    with srv:
        wait_for_port(redis_port)
        admin = client(srv, "admin", "admin")
        admin.admin_create_user("writer", "wpass", ["read-write"])
        admin.admin_create_user("reader", "rpass", ["read"])
        admin.admin_create_user("default", "dpass", ["read-write"])
        admin.close()
        yield srv


def whoami(r) -> str:
    """ACL WHOAMI (redis-py decodes it in RESP2 only)."""
    name = r.acl_whoami()
    return name.decode() if isinstance(name, bytes) else name


def raw(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        time.sleep(0.3)
        s.settimeout(2)
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                if data.count(b"\r\n") >= payload.count(b"\r\n") // 2:
                    break
        except socket.timeout:
            pass
        return data


def test_unauthenticated_commands_get_noauth(node):
    r = redis.Redis(port=node.redis_port, protocol=2)
    with pytest.raises(redis.exceptions.AuthenticationError, match="^Authentication required.$"):
        r.get("k")
    with pytest.raises(redis.exceptions.AuthenticationError, match="^Authentication required.$"):
        r.set("k", "v")
    r.close()
    # The exact bytes, and the commands that need no login.
    assert raw(node.redis_port, b"GET k\r\n") == b"-NOAUTH Authentication required.\r\n"
    assert raw(node.redis_port, b"PING\r\n") == b"-NOAUTH Authentication required.\r\n"
    assert raw(node.redis_port, b"HELLO 3\r\n").startswith(
        b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        b"HELLO <proto> AUTH <user> <pass> option can be used")
    assert raw(node.redis_port, b"AUTH nobody x\r\n") == \
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert raw(node.redis_port, b"AUTH writer wrong\r\n") == \
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert raw(node.redis_port, b"AUTH a b c\r\n") == b"-ERR syntax error\r\n"
    assert raw(node.redis_port, b"AUTH writer wpass\r\nSET k v\r\nGET k\r\n") == \
        b"+OK\r\n+OK\r\n$1\r\nv\r\n"


def test_users_log_in_with_auth_and_hello(node):
    w = redis.Redis(port=node.redis_port, protocol=2, username="writer", password="wpass")
    assert w.set("shared", "1") is True and w.incr("shared") == 2
    assert whoami(w) == "writer"
    w.close()
    # redis-py's RESP3 connections log in with HELLO 3 AUTH.
    w3 = redis.Redis(port=node.redis_port, protocol=3, username="writer", password="wpass")
    assert w3.hset("h", mapping={"a": "1"}) == 1 and w3.hgetall("h") == {b"a": b"1"}
    assert whoami(w3) == "writer"
    w3.close()
    with pytest.raises(redis.exceptions.AuthenticationError, match="invalid username-password"):
        redis.Redis(port=node.redis_port, protocol=3, username="writer", password="no").ping()
    # AUTH <password> logs in as the user named `default`.
    d = redis.Redis(port=node.redis_port, protocol=2, password="dpass")
    assert whoami(d) == "default" and d.get("shared") == b"2"
    d.close()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=node.redis_port, protocol=2, password="wpass").ping()
    # The same records as the Aerospike side: a user the Aerospike client
    # logs in as reads them.
    reader = client(node, "reader", "rpass")
    scanned = {key[2] for key, _, _ in reader.scan("test", "redis0").results()}
    assert {"shared", "h"} <= scanned


def test_read_only_user_gets_noperm_on_writes(node):
    w = redis.Redis(port=node.redis_port, protocol=2, username="writer", password="wpass")
    w.set("ro", "value")
    w.close()
    r = redis.Redis(port=node.redis_port, protocol=2, username="reader", password="rpass")
    assert r.get("ro") == b"value" and r.exists("ro") == 1
    assert whoami(r) == "reader"
    with pytest.raises(redis.exceptions.NoPermissionError,
                       match="^this user has no permissions to run the 'set' command$"):
        r.set("ro", "other")
    with pytest.raises(redis.exceptions.NoPermissionError,
                       match="^this user has no permissions to run the 'incrby' command$"):
        r.incr("counter")
    with pytest.raises(redis.exceptions.NoPermissionError,
                       match="^this user has no permissions to run the 'del' command$"):
        r.delete("ro")
    with pytest.raises(redis.exceptions.NoPermissionError,
                       match="^this user has no permissions to run the 'flushdb' command$"):
        r.flushdb()
    assert r.get("ro") == b"value"
    r.close()
    assert raw(node.redis_port, b"AUTH reader rpass\r\nLPUSH l x\r\n") == \
        b"+OK\r\n-NOPERM this user has no permissions to run the 'lpush' command\r\n"
    # RESET logs the connection out again.
    assert raw(node.redis_port, b"AUTH reader rpass\r\nRESET\r\nGET ro\r\n") == \
        b"+OK\r\n+RESET\r\n-NOAUTH Authentication required.\r\n"


def test_open_node_auth_semantics():
    """Without security every connection is `default`, which takes any
    password (Redis's nopass default user); AUTH <password> alone is
    Redis's error for a server with no password."""
    (redis_port,) = free_ports(1)
    srv = BolideServer()
    srv.config_text = with_redis_port(srv.config_text, redis_port)
    with srv:
        wait_for_port(redis_port)
        assert raw(redis_port, b"ACL WHOAMI\r\n") == b"$7\r\ndefault\r\n"
        assert raw(redis_port, b"AUTH pw\r\n") == (
            b"-ERR AUTH <password> called without any password configured for the default "
            b"user. Are you sure your configuration is correct?\r\n")
        assert raw(redis_port, b"AUTH default anything\r\n") == b"+OK\r\n"
        assert raw(redis_port, b"AUTH someone pw\r\n") == \
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        r = redis.Redis(port=redis_port, protocol=3, username="default", password="x")
        assert r.set("k", "v") is True
        r.close()
