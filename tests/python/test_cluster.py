"""Clusters of real bolided processes on 127.0.0.1, through the official
Python client and the Go client's tools: formation from mesh seeds, smart
routing from one seed, replication, proxying, failover (kill -9, SIGSTOP),
a node joining, restarts from persistent files, cluster-wide truncation,
refusals of mismatched nodes and the cluster info commands."""

from __future__ import annotations

import base64
import os
import random
import struct
import subprocess
import threading
import time
from pathlib import Path

import aerospike
import pytest
from aerospike import exception as ex

import wire
from cluster import LocalCluster, parse_kv

REPO_ROOT = Path(__file__).resolve().parents[2]
GOBIN = Path(os.environ.get("GOBIN_DIR", REPO_ROOT / ".cache" / "gobin"))


def go_tool(name: str) -> str:
    path = GOBIN / name
    assert path.exists(), f"{path} is missing: the test command installs the Go tools first (tests/go/smoke.sh)"
    return str(path)


def claims(cluster: LocalCluster, index: int, ns: str = "test"):
    """This node's replicas bitmaps: a list of 4096-bit sets per column."""
    value = cluster.info(index, "replicas")
    for part in value.split(";"):
        name, _, rest = part.partition(":")
        if name != ns:
            continue
        fields = rest.split(",")
        regime, count, columns = int(fields[0]), int(fields[1]), fields[2:]
        assert regime == 0
        assert len(columns) == count
        out = []
        for column in columns:
            assert len(column) == 684, len(column)
            bitmap = base64.b64decode(column)
            out.append({p for p in range(4096) if bitmap[p >> 3] & (0x80 >> (p & 7))})
        return out
    raise AssertionError(f"no namespace {ns} in {value!r}")


def assert_map_exact(cluster: LocalCluster, nodes, columns: int):
    """Every partition is claimed exactly once per column across `nodes`."""
    per_node = {i: claims(cluster, i) for i in nodes}
    for column in range(columns):
        seen = [0] * 4096
        for i in nodes:
            assert len(per_node[i]) == columns, per_node[i]
            for pid in per_node[i][column]:
                seen[pid] += 1
        bad = [pid for pid in range(4096) if seen[pid] != 1]
        assert not bad, f"column {column}: partitions {bad[:10]} claimed {[seen[p] for p in bad[:10]]} times"


# --------------------------------------------------------------------------
# Formation
# --------------------------------------------------------------------------


@pytest.mark.time_limit(90)
def test_two_node_mesh_walkthrough():
    """PRODUCT.md's 2-node mesh: each node is told only of the other; the
    log says CLUSTER SIZE = 2; asinfo reports cluster_size 2 on each; the Go
    cli's set/get/delete works through either node."""
    cluster = LocalCluster(2)
    cluster.nodes[0].seed_heartbeat = cluster.nodes[1].heartbeat_port
    with cluster:
        cluster.wait_formed()
        for node in cluster.nodes:
            assert "CLUSTER SIZE = 2" in node.log_text(), node.log_text()[-2000:]
        for node in cluster.nodes:
            out = subprocess.run(
                [go_tool("asinfo"), "-h", "127.0.0.1", "-p", str(node.port), "-v", "statistics"],
                capture_output=True, text=True, timeout=30,
            )
            assert out.returncode == 0, out.stderr
            assert "cluster_size=2" in out.stdout, out.stdout[:500]
        a, b = (str(n.port) for n in cluster.nodes)
        cli = go_tool("cli")
        run = lambda *args: subprocess.run([cli, "-h", "127.0.0.1", *args], capture_output=True, text=True, timeout=30)
        assert run("-p", a, "-o", "set", "-n", "test", "-s", "test_set", "-k", "first_key", "-b", "bin_x", "-v", "first value").returncode == 0
        got = run("-p", b, "-o", "get", "-n", "test", "-s", "test_set", "-k", "first_key", "-b", "bin_x")
        assert got.returncode == 0 and "first value" in got.stdout, (got.stdout, got.stderr)
        assert run("-p", b, "-o", "delete", "-n", "test", "-s", "test_set", "-k", "first_key").returncode == 0
        gone = run("-p", a, "-o", "get", "-n", "test", "-s", "test_set", "-k", "first_key", "-b", "bin_x")
        assert "first value" not in gone.stdout


@pytest.mark.time_limit(60)
def test_a_lone_node_is_a_cluster_of_one_at_once():
    with LocalCluster(1) as cluster:
        key = cluster.wait_formed(timeout=5)
        stats = cluster.stats(0)
        assert stats["cluster_size"] == "1"
        assert stats["cluster_is_member"] == "true"
        assert stats["cluster_principal"] == "A1"
        assert cluster.info(0, "cluster-stable") == key
        assert cluster.info(0, "partition-generation") != "-1"
        assert_map_exact(cluster, [0], 1)


@pytest.mark.time_limit(90)
def test_mismatched_cluster_name_or_replication_factor_is_refused():
    with LocalCluster(2) as cluster:
        cluster.wait_formed()
        cluster.add_node(cluster_name="another-cluster")
        cluster.add_node(namespace={"replication-factor": "3"})
        time.sleep(4)
        assert cluster.stats(0)["cluster_size"] == "2"
        assert cluster.stats(2)["cluster_size"] == "1"
        assert cluster.stats(3)["cluster_size"] == "1"
        logs = cluster.nodes[0].log_text() + cluster.nodes[2].log_text()
        assert "cluster name 'another-cluster' differs" in logs or "differs from ours 'another-cluster'" in logs, logs[-3000:]
        logs = cluster.nodes[0].log_text() + cluster.nodes[3].log_text()
        assert "replication-factor 3 (ours 2)" in logs or "replication-factor 2 (ours 3)" in logs, logs[-3000:]


@pytest.mark.time_limit(60)
def test_cluster_stable_answers():
    with LocalCluster(2) as cluster:
        key = cluster.wait_stable()
        assert cluster.info(1, "cluster-stable") == key
        assert cluster.info(0, "cluster-stable:size=2;ignore-migrations=true;namespace=test") == key
        assert cluster.info(0, "cluster-stable:size=3") == "ERROR:7:cluster not specified size"
        assert cluster.info(0, "cluster-stable:size=1234") == "ERROR:4:'size' value too long"
        assert cluster.info(0, "cluster-stable:size=x") == "ERROR:4:bad size"
        assert cluster.info(0, "cluster-stable:ignore-migrations=maybe") == "ERROR:4:bad ignore migrations"
        assert cluster.info(0, "cluster-stable:namespace=nope").startswith("ERROR:20:")
        stats = cluster.stats(0)
        assert stats["cluster_key"] == key
        assert stats["cluster_integrity"] == "true"
        assert stats["migrate_partitions_remaining"] == "0"
        peers = cluster.info(0, "peers-clear-std")
        assert peers.endswith(f"[[A2,,[127.0.0.1:{cluster.nodes[1].port}]]]"), peers
        assert int(peers.split(",")[0]) == int(cluster.info(0, "peers-generation"))
        assert cluster.info(0, "services") == f"127.0.0.1:{cluster.nodes[1].port}"


# --------------------------------------------------------------------------
# Smart clients, replication, proxies
# --------------------------------------------------------------------------


@pytest.mark.time_limit(120)
def test_three_nodes_rf2_one_seed_routes_to_masters():
    with LocalCluster(3) as cluster:
        cluster.wait_stable()
        assert_map_exact(cluster, [0, 1, 2], 2)
        client = cluster.client(seed=1)
        # The client finds the other nodes from the seed's peers.
        wait_for(lambda: len(client.get_nodes()) == 3, 10, "the client to see 3 nodes")
        keys = [("test", "routed", i) for i in range(3000)]
        # Which node masters each key's partition (digest bytes 0-1, little-endian).
        master_of = {pid: i for i in range(3) for pid in claims(cluster, i)[0]}
        expected_writes = [0, 0, 0]
        for key in keys:
            digest = aerospike.calc_digest(*key)
            expected_writes[master_of[(digest[0] | digest[1] << 8) & 0xFFF]] += 1
        before = [{**cluster.stats(i), **cluster.ns_stats(i)} for i in range(3)]
        for i, key in enumerate(keys):
            client.put(key, {"i": i, "s": f"value-{i}"}, policy={"key": aerospike.POLICY_KEY_SEND})
        for i, key in enumerate(keys):
            _, meta, bins = client.get(key)
            assert bins == {"i": i, "s": f"value-{i}"}
            assert meta["gen"] == 1
        # Batch: every row found once.
        result = client.batch_read(keys)
        assert len(result.batch_records) == 3000
        assert all(r.result == 0 for r in result.batch_records)
        assert sorted(r.record[2]["i"] for r in result.batch_records) == list(range(3000))
        # Scan: every record once.
        seen = []
        client.scan("test", "routed").foreach(lambda record: seen.append(record[2]["i"]))
        assert sorted(seen) == list(range(3000))
        masters = sum(int(cluster.ns_stats(i)["master_objects"]) for i in range(3))
        proles = sum(int(cluster.ns_stats(i)["prole_objects"]) for i in range(3))
        assert masters == 3000 and proles == 3000, (masters, proles)
        after = [{**cluster.stats(i), **cluster.ns_stats(i)} for i in range(3)]

        def grew(i, name):
            return int(after[i].get(name, 0)) - int(before[i].get(name, 0))

        # Each write landed on its partition's master, with no hop.
        writes = [grew(i, "client_write_success") for i in range(3)]
        assert writes == expected_writes, (writes, expected_writes)
        reads = sum(grew(i, "client_read_success") for i in range(3))
        assert reads == 6000, f"{reads} reads counted for 3000 gets and 3000 batch rows"
        proxied = sum(grew(i, name) for i in range(3)
                      for name in ("client_proxy_complete", "client_proxy_error", "client_proxy_timeout"))
        assert proxied * 100 < 3000 + reads, f"{proxied} of {3000 + reads} requests were proxied"
        for i in range(3):
            assert cluster.ns_stats(i)["effective_replication_factor"] == "2"


@pytest.mark.time_limit(120)
def test_any_node_answers_anything_by_proxy():
    """Raw requests to every node, whoever owns the record: writes are
    proxied to the master, reads served or proxied; the answers are right."""
    with LocalCluster(3, namespace={"replication-factor": "1"}) as cluster:
        cluster.wait_stable()
        ports = [n.port for n in cluster.nodes]
        for i in range(300):
            digest = aerospike.calc_digest("test", "raw", i)
            with wire.connect(ports[i % 3]) as s:
                s.sendall(wire.as_msg(
                    wire.key_fields("test", "raw", digest),
                    [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"v", struct.pack(">q", i))],
                    info2=wire.INFO2_WRITE,
                ))
                assert wire.read_response(s).result_code == 0
            with wire.connect(ports[(i + 1) % 3]) as s:
                s.sendall(wire.as_msg(wire.key_fields("test", "raw", digest), [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
                response = wire.read_response(s)
                assert response.result_code == 0
                assert response.ops[0][3] == struct.pack(">q", i)
        proxied = sum(int(cluster.stats(i)["client_proxy_complete"]) for i in range(3))
        served = sum(int(cluster.stats(i)["from_proxy_complete"]) for i in range(3))
        # Two thirds of 600 requests land on a node that does not own them.
        assert 300 < proxied < 500, proxied
        assert served == proxied
        # RF 1: no copies, each record once.
        assert sum(int(cluster.ns_stats(i)["objects"]) for i in range(3)) == 300


@pytest.mark.time_limit(60)
def test_commit_level_master_and_all():
    with LocalCluster(2) as cluster:
        cluster.wait_stable()
        client = cluster.client()
        for i in range(200):
            policy = {"commit_level": aerospike.POLICY_COMMIT_LEVEL_MASTER if i % 2 else aerospike.POLICY_COMMIT_LEVEL_ALL}
            client.put(("test", "commit", i), {"i": i}, policy=policy)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            counts = [int(cluster.ns_stats(i)["objects"]) for i in range(2)]
            if counts == [200, 200]:
                break
            time.sleep(0.1)
        assert counts == [200, 200]


# --------------------------------------------------------------------------
# Failures: nothing acknowledged is lost
# --------------------------------------------------------------------------


class Writer(threading.Thread):
    """Writes (and sometimes deletes) keys in a loop, remembering the last
    acknowledged value of each key and the writes whose fate is unknown."""

    def __init__(self, client, set_name: str, keys: int, seconds: float, seed: int):
        super().__init__(daemon=True)
        self.client = client
        self.set_name = set_name
        self.keys = keys
        self.until = time.monotonic() + seconds
        self.random = random.Random(seed)
        self.acked = {}  # key -> value (None: deleted)
        self.in_doubt = {}  # key -> [values written after the last ack]
        self.acks = 0
        self.errors = []
        self.stop_flag = False

    def run(self):
        counter = 0
        while time.monotonic() < self.until and not self.stop_flag:
            k = self.random.randrange(self.keys)
            key = ("test", self.set_name, k)
            counter += 1
            delete = self.random.random() < 0.1 and self.acked.get(k) is not None
            try:
                if delete:
                    self.client.remove(key)
                    value = None
                else:
                    value = counter
                    self.client.put(key, {"v": value})
                self.acked[k] = value
                self.in_doubt.pop(k, None)
                self.acks += 1
            except ex.RecordNotFound:
                self.acked[k] = None
                self.in_doubt.pop(k, None)
            except (ex.TimeoutError, ex.ClientError, ex.ServerError) as error:
                # In doubt: the write may or may not have happened.
                self.in_doubt.setdefault(k, []).append(None if delete else counter)
                if not isinstance(error, (ex.TimeoutError, ex.ClientError)) and getattr(error, "code", None) not in (9, 11, -8, -3):
                    self.errors.append(repr(error))
                time.sleep(0.01)

    def verify(self, client):
        lost = []
        for k, value in self.acked.items():
            allowed = {value} | set(self.in_doubt.get(k, []))
            try:
                _, _, bins = client.get(("test", self.set_name, k))
                found = bins.get("v")
            except ex.RecordNotFound:
                found = None
            if found not in allowed:
                lost.append((k, value, found, self.in_doubt.get(k)))
        return lost


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.time_limit(180)
@pytest.mark.parametrize("storage", ["memory", "device"])
def test_kill_9_and_restart_under_writes_loses_nothing_acknowledged(storage):
    with LocalCluster(3, storage=storage) as cluster:
        cluster.wait_stable()
        client = cluster.client()
        writer = Writer(client, "killed", keys=600, seconds=14, seed=11)
        writer.start()
        time.sleep(2)
        killed_at = time.monotonic()
        cluster.kill(1)
        cluster.wait_formed(nodes=[0, 2], timeout=15)
        failover = time.monotonic() - killed_at
        time.sleep(2)
        cluster.start(1)
        writer.join(timeout=60)
        cluster.wait_stable(timeout=60)
        assert writer.acks > 500, writer.acks
        assert not writer.errors, writer.errors[:5]
        lost = writer.verify(cluster.client(seed=2))
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
        assert failover < 8, failover
        # Both copies of every record agree: each node's objects add up.
        live = sum(1 for v in writer.acked.values() if v is not None)
        in_doubt_keys = len(writer.in_doubt)
        total = sum(int(cluster.ns_stats(i)["objects"]) for i in range(3))
        assert abs(total - 2 * live) <= 2 * in_doubt_keys, (total, live, in_doubt_keys)


@pytest.mark.time_limit(150)
def test_sigstop_and_sigcont_under_writes_loses_nothing_acknowledged():
    with LocalCluster(3) as cluster:
        cluster.wait_stable()
        client = cluster.client()
        writer = Writer(client, "paused", keys=500, seconds=12, seed=5)
        writer.start()
        time.sleep(2)
        cluster.pause(0)
        cluster.wait_formed(nodes=[1, 2], timeout=15)
        time.sleep(2)
        cluster.resume(0)
        writer.join(timeout=60)
        cluster.wait_stable(timeout=60)
        lost = writer.verify(cluster.client(seed=1))
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
        assert writer.acks > 300


@pytest.mark.time_limit(150)
def test_a_joining_node_takes_its_share_under_writes():
    with LocalCluster(2) as cluster:
        cluster.wait_stable()
        client = cluster.client()
        for i in range(4000):
            client.put(("test", "join", i), {"v": -i})
        writer = Writer(client, "join", keys=4000, seconds=8, seed=3)
        writer.start()
        time.sleep(1)
        cluster.add_node()
        writer.join(timeout=60)
        cluster.wait_stable(timeout=60)
        assert_map_exact(cluster, [0, 1, 2], 2)
        masters = [int(cluster.ns_stats(i)["master_objects"]) for i in range(3)]
        assert sum(masters) == 4000 - sum(1 for v in writer.acked.values() if v is None), masters
        assert masters[2] > 800, masters
        assert sum(int(cluster.stats(i)["migrate_partitions_received"]) for i in range(3)) > 1000
        lost = writer.verify(client)
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
        # Untouched records moved whole.
        untouched = [i for i in range(4000) if i not in writer.acked]
        for i in untouched[:500]:
            assert client.get(("test", "join", i))[2] == {"v": -i}


@pytest.mark.time_limit(180)
def test_a_node_back_from_its_files_does_not_resurrect_or_roll_back():
    """A node restarted from its storage files after missing updates and
    deletes: merged by generation, it brings back nothing older."""
    with LocalCluster(3, storage="device") as cluster:
        cluster.wait_stable()
        client = cluster.client()
        for i in range(1000):
            client.put(("test", "back", i), {"v": 0})
        cluster.kill(2)
        cluster.wait_formed(nodes=[0, 1])
        for i in range(0, 1000, 10):
            client.remove(("test", "back", i))
        for i in range(5, 1000, 10):
            client.put(("test", "back", i), {"v": 1})
        cluster.start(2)
        cluster.wait_stable(timeout=60)
        for i in range(1000):
            try:
                bins = client.get(("test", "back", i))[2]
            except ex.RecordNotFound:
                bins = None
            if i % 10 == 0:
                assert bins is None, f"deleted record {i} came back: {bins}"
            elif i % 10 == 5:
                assert bins == {"v": 1}, (i, bins)
            else:
                assert bins == {"v": 0}, (i, bins)
        # Every node holds only current copies: 900 records, twice.
        assert sum(int(cluster.ns_stats(i)["objects"]) for i in range(3)) == 1800


# --------------------------------------------------------------------------
# Cluster-wide operations
# --------------------------------------------------------------------------


@pytest.mark.time_limit(90)
def test_truncate_on_one_node_truncates_everywhere():
    with LocalCluster(3) as cluster:
        cluster.wait_stable()
        client = cluster.client()
        for i in range(600):
            client.put(("test", "gone", i), {"i": i})
            client.put(("test", "kept", i), {"i": i})
        assert cluster.info(1, "truncate:namespace=test;set=gone") == "ok"

        def empty():
            seen = []
            client.scan("test", "gone").foreach(lambda r: seen.append(r))
            return not seen

        wait_for(empty, 10, "the truncated set to be empty everywhere")
        kept = []
        client.scan("test", "kept").foreach(lambda r: kept.append(r))
        assert len(kept) == 600
        for i in range(3):
            wait_for(
                lambda: cluster.info(i, "sets/test/gone").startswith("objects=0:"),
                10,
                f"node {i} to free the truncated records",
            )
        kept_copies = sum(
            int(parse_kv(cluster.info(i, "sets/test/kept").replace(":", ";"))["objects"]) for i in range(3)
        )
        assert kept_copies == 1200, kept_copies


@pytest.mark.time_limit(120)
def test_indexes_and_udfs_are_cluster_wide_and_reach_a_later_node():
    from aerospike import predicates

    with LocalCluster(2) as cluster:
        cluster.wait_stable()
        client = cluster.client()
        for i in range(300):
            client.put(("test", "idx", i), {"n": i, "s": f"v{i % 3}"})
        assert cluster.info(1, "sindex-create:namespace=test;set=idx;indexname=by_n;bin=n;type=numeric") == "ok"
        source = b"function twice(rec, bin)\n  rec[bin] = rec[bin] * 2\n  aerospike:update(rec)\n  return rec[bin]\nend\n"
        content = base64.b64encode(source).decode()
        answer = cluster.info(
            0, f"udf-put:filename=double.lua;content={content};content-len={len(content)};udf-type=LUA;"
        )
        assert answer in ("", "ok"), answer
        # A node that joins later learns both.
        cluster.add_node()
        cluster.wait_stable(timeout=60)
        for i in range(3):
            wait_for(lambda: "indexname=by_n" in cluster.info(i, "sindex-list:namespace=test"), 10,
                     f"node {i} to know the index")
            wait_for(lambda: "filename=double.lua" in cluster.info(i, "udf-list"), 10,
                     f"node {i} to know the UDF module")
            wait_for(lambda: "load_pct=100" in cluster.info(i, "sindex/test/by_n"), 20,
                     f"node {i} to build the index")
        client = cluster.client()
        wait_for(lambda: len(client.get_nodes()) == 3, 10, "the client to see 3 nodes")
        query = client.query("test", "idx")
        query.where(predicates.between("n", 100, 199))
        found = sorted(r[2]["n"] for r in query.results())
        assert found == list(range(100, 200))
        # After the migrations, each node indexes exactly the copies it
        # holds: records that came in are indexed, those it gave away are
        # not; two copies of each record, two entries.
        def entries(i):
            return int(parse_kv(cluster.info(i, "sindex-stat:namespace=test;indexname=by_n"))["entries"])

        wait_for(lambda: sum(entries(i) for i in range(3)) == 600, 20, "600 index entries in all")
        for i in range(3):
            assert entries(i) == int(cluster.ns_stats(i)["objects"]), i
        # The UDF runs at each record's master and its write is replicated.
        for i in range(0, 300, 7):
            assert client.apply(("test", "idx", i), "double", "twice", ["n"]) == 2 * i
        for i in range(0, 300, 7):
            assert client.get(("test", "idx", i))[2]["n"] == 2 * i
        copies = sum(int(cluster.ns_stats(i)["objects"]) for i in range(3))
        assert copies == 600, copies
        assert cluster.info(2, "sindex-delete:namespace=test;indexname=by_n") == "ok"
        for i in range(3):
            wait_for(lambda: "by_n" not in cluster.info(i, "sindex-list:namespace=test"), 10,
                     f"node {i} to drop the index")


STREAM_AND_RECORD_UDF = """
local function add(a, b) return a + b end

function sum(s, bin)
    return s:map(function(r) return r[bin] end):reduce(add)
end

function touch_once(rec)
    rec['hits'] = (rec['hits'] or 0) + 1
    aerospike:update(rec)
    return rec['hits']
end
"""


def counted(records):
    """{user key: how many times it came back}."""
    seen = {}
    for key, _, _ in records:
        seen[key[2]] = seen.get(key[2], 0) + 1
    return seen


@pytest.mark.time_limit(240)
def test_index_queries_aggregations_and_background_jobs_on_three_nodes(tmp_path):
    """On 3 nodes (RF 2), through the Python client from one seed: every
    query (equality, range, with a filter expression, in pages resumed by
    partition status) returns each matching record exactly once, an
    aggregation sums each once, and a background UDF and background write
    ops change each selected record once, on both of its copies."""
    from aerospike import predicates
    from aerospike_helpers import expressions as exp
    from aerospike_helpers.operations import operations as op

    with LocalCluster(3) as cluster:
        cluster.wait_stable()
        client = cluster.client(seed=1)
        wait_for(lambda: len(client.get_nodes()) == 3, 10, "the client to see 3 nodes")
        count = 3000
        send_key = {"key": aerospike.POLICY_KEY_SEND}
        for i in range(count):
            client.put(("test", "q3", i), {"n": i, "g": f"g{i % 7}"}, policy=send_key)
        client.index_integer_create("test", "q3", "n", "q3_n")
        client.index_string_create("test", "q3", "g", "q3_g")
        for node in range(3):
            for name in ("q3_n", "q3_g"):
                wait_for(lambda: "load_pct=100" in cluster.info(node, f"sindex/test/{name}"), 30,
                         f"node {node} to build {name}")
        # Each node indexes its own copies: two entries per record in all.
        entries = sum(int(parse_kv(cluster.info(i, "sindex-stat:namespace=test;indexname=q3_n"))["entries"])
                      for i in range(3))
        assert entries == 2 * count, entries

        def query(predicate, policy=None, select=None):
            q = client.query("test", "q3")
            if select:
                q.select(*select)
            q.where(predicate)
            return q.results(policy=policy)

        assert counted(query(predicates.between("n", 500, 1499))) == {i: 1 for i in range(500, 1500)}
        assert counted(query(predicates.equals("g", "g3"))) == {i: 1 for i in range(3, count, 7)}
        assert counted(query(predicates.equals("n", 2024))) == {2024: 1}
        even = exp.Eq(exp.Mod(exp.IntBin("n"), 2), 0).compile()
        assert counted(query(predicates.between("n", 0, 999), policy={"expressions": even})) == \
            {i: 1 for i in range(0, 1000, 2)}

        # Pages of at most 250 records resumed by partition status.
        q = client.query("test", "q3")
        q.where(predicates.between("n", 1000, 2999))
        q.max_records = 250
        seen = []
        partition_filter = {"begin": 0, "count": 4096}
        for _ in range(60):
            page = q.results(policy={"partition_filter": partition_filter})
            assert len(page) <= 250
            seen.extend(key[2] for key, _, _ in page)
            if q.is_done():
                break
            partition_filter = {"begin": 0, "count": 4096, "partition_status": q.get_partitions_status()}
        assert sorted(seen) == list(range(1000, 3000))

        # An aggregation: each node sums its part once; the client adds up.
        module_path = tmp_path / "q3udf.lua"
        module_path.write_text(STREAM_AND_RECORD_UDF)
        client.udf_put(str(module_path))
        for node in range(3):
            wait_for(lambda: "filename=q3udf.lua" in cluster.info(node, "udf-list"), 10,
                     f"node {node} to know the module")
        q = client.query("test", "q3")
        q.where(predicates.between("n", 100, 899))
        q.apply("q3udf", "sum", ["n"])
        assert q.results() == [sum(range(100, 900))]

        def wait_job(job, module):
            wait_for(lambda: client.job_info(job, module)["status"] == aerospike.JOB_STATUS_COMPLETED, 60,
                     f"job {job}")

        # A background UDF over a query and background write ops: each
        # selected record once, on its master and its replica.
        job = client.query_apply("test", "q3", predicates.between("n", 0, 299), "q3udf", "touch_once", [])
        wait_job(job, aerospike.JOB_QUERY)
        q = client.query("test", "q3")
        q.where(predicates.between("n", 0, 99))
        q.add_ops([op.increment("ops", 1)])
        wait_job(q.execute_background(), aerospike.JOB_QUERY)

        def read_all(replica):
            policy = {"replica": replica, "total_timeout": 3000, "max_retries": 0}
            keys = [("test", "q3", i) for i in range(400)]
            return {record.key[2]: record.record[2] for record in client.batch_read(keys, policy=policy).batch_records}

        for replica in (aerospike.POLICY_REPLICA_MASTER, aerospike.POLICY_REPLICA_SEQUENCE):
            bins = read_all(replica)
            assert {i for i, b in bins.items() if b.get("hits") == 1} == set(range(300))
            assert not any(b.get("hits", 1) != 1 for b in bins.values())
            assert {i for i, b in bins.items() if b.get("ops") == 1} == set(range(100))
        # The replica's copy holds the same: read each record from the node
        # that holds its replica (column 1 of the replicas map), which
        # answers from its own copy (no proxy).
        replica_of = {}
        for node in range(3):
            for pid in claims(cluster, node)[1]:
                replica_of[pid] = node
        proxied_before = sum(int(cluster.stats(i)["client_proxy_complete"]) for i in range(3))
        for i in range(400):
            digest = aerospike.calc_digest("test", "q3", i)
            pid = int.from_bytes(digest[:2], "little") & 0xFFF
            node = cluster.nodes[replica_of[pid]]
            with wire.connect(node.port, host=node.host) as sock:
                sock.sendall(wire.as_msg(wire.key_fields("test", "q3", digest), [],
                                         info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
                answer = wire.read_response(sock)
            assert answer.result_code == 0, (i, answer.result_code)
            bins = {name.decode(): struct.unpack(">q", value)[0]
                    for _, particle, name, value in answer.ops if particle == wire.PARTICLE_INTEGER}
            assert bins["n"] == i
            assert bins.get("hits") == (1 if i < 300 else None), (i, bins)
            assert bins.get("ops") == (1 if i < 100 else None), (i, bins)
        proxied_after = sum(int(cluster.stats(i)["client_proxy_complete"]) for i in range(3))
        assert proxied_after == proxied_before
