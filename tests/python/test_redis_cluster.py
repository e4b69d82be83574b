"""Redis Cluster on a real 3-node Bolide cluster: CLUSTER SLOTS / SHARDS /
NODES / INFO / KEYSLOT / MYID, MOVED to the master's RESP port, CROSSSLOT,
hash tags, READONLY on a replica, and the clients users run (redis-py's
RedisCluster and `redis-cli -c`), including after a node is killed (keys,
and streams with their consumer groups)."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

redis = pytest.importorskip("redis")
from redis.cluster import RedisCluster  # noqa: E402
from redis.crc import key_slot  # noqa: E402

from cluster import LocalCluster  # noqa: E402


def bulk_text(port: int, *args: str) -> str:
    """A command's bulk-string reply as text, read off a raw socket (redis-py
    parses CLUSTER NODES and INFO into dicts)."""
    import socket
    payload = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        data = b""
        while b"\r\n" not in data:
            data += s.recv(65536)
        header, rest = data.split(b"\r\n", 1)
        assert header.startswith(b"$"), data
        length = int(header[1:])
        while len(rest) < length + 2:
            rest += s.recv(65536)
        return rest[:length].decode()


def slot_owners(client: "redis.Redis") -> dict[int, tuple[str, int, list[int]]]:
    """slot → (master host, master port, replica ports) from CLUSTER SLOTS."""
    owners = {}
    for entry in client.execute_command("CLUSTER SLOTS"):
        start, end, master, *replicas = entry
        for slot in range(start, end + 1):
            owners[slot] = (master[0].decode(), master[1], [r[1] for r in replicas])
    return owners


def wait_for_full_map(nodes, timeout: float = 60.0):
    """Until every live node's CLUSTER SLOTS covers all 16,384 slots, with
    the same masters and one replica each (RF 2); returns node 0's map."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        maps = []
        try:
            for node in nodes:
                with redis.Redis(port=node.redis_port, protocol=2) as client:
                    maps.append(slot_owners(client))
        except redis.exceptions.RedisError as error:
            last = error
            time.sleep(0.2)
            continue
        masters = [{slot: owner[1] for slot, owner in m.items()} for m in maps]
        if (all(len(m) == 16384 for m in maps) and all(m == masters[0] for m in masters)
                and all(len(owner[2]) == 1 for owner in maps[0].values())):
            return maps[0]
        last = [len(m) for m in maps]
        time.sleep(0.2)
    raise AssertionError(f"no complete, agreed slot map: {last}")


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3, redis=True) as c:
        c.start_all()
        c.wait_stable()
        yield c


def test_cluster_topology_commands(cluster):
    owners = wait_for_full_map(cluster.nodes)
    ports = {node.redis_port for node in cluster.nodes}
    masters = {owner[1] for owner in owners.values()}
    assert masters == ports, "every node masters slots"
    # Runs of 4 slots per partition: every range starts and ends on a
    # partition boundary.
    with redis.Redis(port=cluster.nodes[0].redis_port, protocol=2) as r:
        for start, end, *_ in r.execute_command("CLUSTER SLOTS"):
            assert start % 4 == 0 and end % 4 == 3
        assert r.execute_command("CLUSTER KEYSLOT", "foo") == 12182
        assert r.execute_command("CLUSTER KEYSLOT", "{user1000}.following") == 3443
        myid = r.execute_command("CLUSTER MYID").decode()
        assert len(myid) == 40 and int(myid, 16) > 0
        nodes = bulk_text(cluster.nodes[0].redis_port, "CLUSTER", "NODES")
        assert nodes.endswith("\n")
        lines = [line for line in nodes.split("\n") if line]
        assert len(lines) == 3
        mine = [line for line in lines if "myself" in line]
        assert len(mine) == 1 and mine[0].startswith(myid + " ")
        fields = mine[0].split()
        assert fields[1].startswith(f"127.0.0.1:{cluster.nodes[0].redis_port}@")
        assert fields[2] == "myself,master" and fields[7] == "connected"
        claimed = 0
        for line in lines:
            for part in line.split()[8:]:
                start, end = map(int, part.split("-"))
                claimed += end - start + 1
        assert claimed == 16384
        info = bulk_text(cluster.nodes[0].redis_port, "CLUSTER", "INFO")
        assert "cluster_state:ok" in info
        assert "cluster_known_nodes:3" in info and "cluster_slots_assigned:16384" in info
        shards = r.execute_command("CLUSTER SHARDS")
        assert len(shards) == 3
        assert r.info("cluster")["cluster_enabled"] == 1
        hello = r.execute_command("HELLO", "2")
        assert hello[hello.index(b"mode") + 1] == b"cluster"
        with pytest.raises(redis.ResponseError, match="^SELECT is not allowed in cluster mode$"):
            r.execute_command("SELECT", "1")
        assert r.execute_command("SELECT", "0") in (b"OK", True)
        with pytest.raises(redis.ResponseError, match=r"^unknown subcommand 'NOPE'\. Try CLUSTER HELP\.$"):
            r.execute_command("CLUSTER", "NOPE")


def test_moved_crossslot_and_hash_tags(cluster):
    owners = wait_for_full_map(cluster.nodes)
    node0 = cluster.nodes[0].redis_port
    elsewhere = next(k for k in (f"key:{i}" for i in range(1000))
                     if owners[key_slot(k.encode())][1] != node0)
    here = next(k for k in (f"key:{i}" for i in range(1000))
                if owners[key_slot(k.encode())][1] == node0)
    slot = key_slot(elsewhere.encode())
    host, port, _ = owners[slot]
    with redis.Redis(port=node0, protocol=2) as r:
        with pytest.raises(redis.exceptions.ResponseError) as moved:
            r.execute_command("SET", elsewhere, "v")
        # redis-py turns MOVED into its own exception class.
        assert f"{slot} {host}:{port}" in str(moved.value)
        assert r.set(here, "v") is True and r.get(here) == b"v"
        with pytest.raises(redis.exceptions.ResponseError,
                           match="^Keys in request don't hash to the same slot$"):
            r.execute_command("MSET", "{a}x", "1", "{b}y", "2")
        with pytest.raises(redis.exceptions.ResponseError,
                           match="^Keys in request don't hash to the same slot$"):
            r.execute_command("ZUNIONSTORE", "{a}d", "2", "{a}x", "{b}y")
    # The MOVED target takes the write.
    with redis.Redis(host=host, port=port, protocol=2) as r:
        assert r.set(elsewhere, "v") is True
        tagged = ["{user1000}.following", "{user1000}.followers"]
        tag_owner = owners[3443][1]
    with redis.Redis(port=tag_owner, protocol=2) as r:
        assert r.mset({tagged[0]: "a", tagged[1]: "b"}) is True
        assert r.mget(tagged) == [b"a", b"b"]
        assert r.execute_command("RENAME", tagged[0], "{user1000}.renamed") in (b"OK", True)
    # Raw bytes of the redirection.
    import socket
    with socket.create_connection(("127.0.0.1", node0), timeout=5) as s:
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(elsewhere), elsewhere.encode()))
        data = s.recv(4096)
        assert data == f"-MOVED {slot} {host}:{port}\r\n".encode()


def test_keys_in_slot(cluster):
    owners = wait_for_full_map(cluster.nodes)
    slot = key_slot(b"{counted}")
    port = owners[slot][1]
    with redis.Redis(port=port, protocol=2) as r:
        assert r.mset({"{counted}:1": "a", "{counted}:2": "b", "{counted}:3": "c"}) is True
        assert r.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 3
        assert r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 2) == \
            [b"{counted}:1", b"{counted}:2"]
        # The slot's partition holds slots 4p..4p+3: only this slot counts.
        neighbour = slot ^ 1
        assert r.execute_command("CLUSTER", "COUNTKEYSINSLOT", neighbour) == 0
        with pytest.raises(redis.ResponseError, match="^Invalid slot$"):
            r.execute_command("CLUSTER", "COUNTKEYSINSLOT", 16384)


def test_readonly_reads_from_a_replica(cluster):
    owners = wait_for_full_map(cluster.nodes)
    key = "replicated"
    slot = key_slot(key.encode())
    _, master, replicas = owners[slot]
    with redis.Redis(port=master, protocol=2) as r:
        assert r.set(key, "copy") is True
    with redis.Redis(port=replicas[0], protocol=2) as r:
        with pytest.raises(redis.exceptions.ResponseError, match=f"{slot} 127.0.0.1:{master}"):
            r.execute_command("GET", key)
        assert r.execute_command("READONLY") in (b"OK", True)
        assert r.get(key) == b"copy"
        with pytest.raises(redis.exceptions.ResponseError, match=f"{slot} 127.0.0.1:{master}"):
            r.execute_command("SET", key, "no")
        assert r.execute_command("READWRITE") in (b"OK", True)
        with pytest.raises(redis.exceptions.ResponseError, match=f"{slot} 127.0.0.1:{master}"):
            r.execute_command("GET", key)


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")
def test_redis_cli_follows_moved(cluster):
    wait_for_full_map(cluster.nodes)
    ports = [node.redis_port for node in cluster.nodes]

    def cli(port, *args):
        # TRYAGAIN (a partition handing over) is Redis Cluster's transient
        # answer, which redis-cli -c does not retry by itself: a user
        # repeats the command, and so does this test, a bounded number of
        # times; MOVED is followed by redis-cli.
        for _ in range(20):
            out = subprocess.run(["redis-cli", "-c", "-p", str(port), *args],
                                 capture_output=True, text=True, timeout=30)
            if "TRYAGAIN" not in out.stdout + out.stderr:
                return out
            time.sleep(0.25)
        return out

    for i in range(20):
        out = cli(ports[i % 3], "SET", f"cli:{i}", str(i))
        assert out.returncode == 0 and out.stdout.strip() == "OK", out.stdout + out.stderr
    for i in range(20):
        out = cli(ports[(i + 1) % 3], "GET", f"cli:{i}")
        assert out.returncode == 0 and out.stdout.strip() == str(i), out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("redis-benchmark") is None, reason="redis-benchmark not installed")
def test_redis_benchmark_cluster_mode(cluster):
    """redis-benchmark --cluster reads CLUSTER NODES from one seed and sends
    each key to its master: every test runs, with no error."""
    wait_for_full_map(cluster.nodes)
    out = subprocess.run(
        ["redis-benchmark", "--cluster", "-p", str(cluster.nodes[0].redis_port), "-n", "600",
         "-c", "6", "-r", "1000", "-q", "--csv", "-t", "set,get,incr,lpush,hset,zadd"],
        capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Cluster has 3 master nodes" in out.stdout + out.stderr, out.stdout + out.stderr
    tests = {line.split(",")[0].strip('"') for line in out.stdout.splitlines()
             if line.startswith('"')}
    assert {"SET", "GET", "INCR", "LPUSH", "HSET", "ZADD"} <= tests, out.stdout
    assert "error" not in (out.stdout + out.stderr).lower(), out.stdout + out.stderr


def test_scripts_in_a_cluster(cluster):
    """A script's declared keys route like a command's (MOVED, CROSSSLOT);
    the keys it reaches must be on this node, and a script with a shebang
    must stay in one slot; RedisCluster routes EVAL by its first key."""
    owners = wait_for_full_map(cluster.nodes)
    node0 = cluster.nodes[0].redis_port
    keys = [f"script:{i}" for i in range(2000)]
    here = [k for k in keys if owners[key_slot(k.encode())][1] == node0]
    elsewhere = next(k for k in keys if owners[key_slot(k.encode())][1] != node0)
    other_slot_here = next(k for k in here[1:]
                           if key_slot(k.encode()) != key_slot(here[0].encode()))
    slot = key_slot(elsewhere.encode())
    host, port, _ = owners[slot]
    import hashlib
    import socket

    def suffix(body: str) -> str:
        return f" script: {hashlib.sha1(body.encode()).hexdigest()}, on @user_script:1."

    with socket.create_connection(("127.0.0.1", node0), timeout=5) as s:
        body = b"return 1"
        s.sendall(b"*4\r\n$4\r\nEVAL\r\n$8\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n"
                  % (body, len(elsewhere), elsewhere.encode()))
        assert s.recv(4096) == f"-MOVED {slot} {host}:{port}\r\n".encode()
    with redis.Redis(port=node0, protocol=2) as r:
        with pytest.raises(redis.exceptions.ResponseError,
                           match="^Keys in request don't hash to the same slot$"):
            r.eval("return 1", 2, "{a}x", "{b}y")
        assert r.eval("return redis.call('set', KEYS[1], ARGV[1])", 1, here[0], "v") == b"OK"
        body = "return redis.call('get', ARGV[1])"
        with pytest.raises(redis.exceptions.ResponseError) as error:
            r.eval(body, 0, elsewhere)
        assert str(error.value) == \
            "Script attempted to access a non local key in a cluster node" + suffix(body)
        # Without a shebang a script may touch several of this node's slots.
        assert r.eval("redis.call('set', KEYS[1], 1) return redis.call('set', ARGV[1], 2)",
                      1, here[0], other_slot_here) == b"OK"
        body = "#!lua\nredis.call('set', KEYS[1], 1) return redis.call('set', ARGV[1], 2)"
        with pytest.raises(redis.exceptions.ResponseError) as error:
            r.eval(body, 1, here[0], other_slot_here)
        assert str(error.value) == ("Script attempted to access keys that do not hash to the "
                                    "same slot" + suffix(body).replace(":1.", ":2."))
        with pytest.raises(redis.exceptions.ResponseError,
                           match="^Can not run script on cluster, 'no-cluster' flag is set.$"):
            r.eval("#!lua flags=no-cluster\nreturn 1", 0)
    rc = RedisCluster(host="127.0.0.1", port=node0, protocol=2)
    try:
        incr = rc.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
        for i in range(100):
            assert incr(keys=[f"counter:{i}"], args=[i]) == i
        assert [int(rc.get(f"counter:{i}")) for i in range(100)] == list(range(100))
    finally:
        rc.close()


def test_redis_cluster_client_survives_a_killed_node(cluster):
    wait_for_full_map(cluster.nodes)
    for protocol in (2, 3):
        rc = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].redis_port, protocol=protocol)
        try:
            for i in range(300):
                assert rc.set(f"rc{protocol}:{i}", i) is True
            assert [rc.get(f"rc{protocol}:{i}") for i in range(300)] == \
                [str(i).encode() for i in range(300)]
            assert rc.mset_nonatomic({f"m{protocol}:{i}": i for i in range(50)}) is not None
            assert rc.incr(f"{{ctr}}{protocol}") == 1
            assert rc.hset(f"h{protocol}", mapping={"a": "1"}) == 1
            assert rc.hgetall(f"h{protocol}") == {b"a": b"1"}
            tagged = [f"{{t{protocol}}}:{i}" for i in range(5)]
            assert rc.mset({k: "x" for k in tagged}) is True
            assert rc.mget(tagged) == [b"x"] * 5
            assert rc.keyslot("foo") == 12182
            # Commands with numkeys: the keys are found by count.
            rc.zadd(f"{{t{protocol}}}:za", {"a": 1})
            rc.zadd(f"{{t{protocol}}}:zb", {"a": 2, "b": 1})
            assert rc.zunionstore(f"{{t{protocol}}}:zu",
                                  [f"{{t{protocol}}}:za", f"{{t{protocol}}}:zb"]) == 2
            assert rc.zscore(f"{{t{protocol}}}:zu", "a") == 3.0
            rc.rpush(f"{{t{protocol}}}:l", "x")
            assert rc.lmpop(2, f"{{t{protocol}}}:none", f"{{t{protocol}}}:l",
                            direction="LEFT") == [f"{{t{protocol}}}:l".encode(), [b"x"]]
            assert len(rc.get_nodes()) == 3
        finally:
            rc.close()
    # Kill a node: RF 2 keeps every key; the client's next requests fail on
    # the dead node, it re-reads CLUSTER SLOTS and follows the new map.
    rc = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].redis_port, protocol=2)
    try:
        # Streams with a consumer group and a pending entry, their keys on
        # every node's slots, survive the kill as well.
        streams = [f"stream:{i}" for i in range(20)]
        for i, key in enumerate(streams):
            assert rc.xadd(key, {"n": str(i)}, id="1-1") == b"1-1"
            assert rc.xadd(key, {"n": "second"}, id="2-0") == b"2-0"
            assert rc.xgroup_create(key, "g", id="0") is True
            assert rc.xreadgroup("g", "c", {key: ">"}, count=1) == \
                [[key.encode(), [(b"1-1", {b"n": str(i).encode()})]]]
        cluster.kill(2)
        cluster.wait_stable(nodes=[0, 1])
        wait_for_full_map(cluster.nodes[:2])
        deadline = time.monotonic() + 60
        values = None
        while time.monotonic() < deadline:
            try:
                values = [rc.get(f"rc2:{i}") for i in range(300)]
                break
            except (redis.exceptions.ConnectionError, redis.exceptions.ClusterError,
                    redis.exceptions.TimeoutError, redis.exceptions.TryAgainError):
                time.sleep(0.5)
        assert values == [str(i).encode() for i in range(300)]
        for i, key in enumerate(streams):
            assert rc.xlen(key) == 2
            assert rc.xpending(key, "g")["pending"] == 1
            assert rc.xreadgroup("g", "c", {key: ">"}) == \
                [[key.encode(), [(b"2-0", {b"n": b"second"})]]]
            assert rc.xack(key, "g", "1-1", "2-0") == 2
        for i in range(100):
            assert rc.set(f"after:{i}", i) is True
        assert [rc.get(f"after:{i}") for i in range(100)] == [str(i).encode() for i in range(100)]
        dead = cluster.nodes[2].redis_port
        assert all(node.port != dead for node in rc.get_nodes())
    finally:
        rc.close()
