"""Rack awareness through the official Python client against real
``bolided`` processes: four nodes in two racks with RF 2 keep each
partition's two copies on both racks (AP, and SC with a rack-aware roster
and an active rack), ``rack-id`` set in the config and changed with
``set-config`` then ``recluster:``, the ``racks:`` and ``rack-ids`` answers,
a rack-aware client reading from its own rack, and a whole rack killed
(kill -9 of both its nodes) under writes: every key stays readable and
writable and no acknowledged write is lost.
"""

from __future__ import annotations

import base64
import random
import threading
import time

import aerospike
import pytest
from aerospike import exception as ex

from cluster import LocalCluster, parse_kv

RACKS = {"A1": 1, "A2": 1, "A3": 2, "A4": 2}


def wait_for(predicate, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, KeyError, ValueError) as error:
            last = error
        time.sleep(0.2)
    raise AssertionError(f"{what}: {last}")


def columns(cluster, index, ns="test"):
    """The partitions node `index` claims in `replicas`, one set per column."""
    answer = cluster.info(index, "replicas")
    for part in answer.split(";"):
        name, _, rest = part.partition(":")
        if name != ns:
            continue
        fields = rest.split(",")
        count, bitmaps = int(fields[1]), fields[2:]
        assert len(bitmaps) == count, answer
        out = []
        for bitmap in bitmaps:
            raw = base64.b64decode(bitmap)
            out.append({p for p in range(4096) if raw[p >> 3] & (0x80 >> (p & 7))})
        return out
    raise AssertionError(f"no namespace {ns} in {answer!r}")


def holders(cluster, nodes, copies=2):
    """pid -> the node id claiming each column, checking that every column
    of every partition is claimed exactly once across `nodes`."""
    claimed = {i: columns(cluster, i) for i in nodes}
    out = {}
    for column in range(copies):
        for pid in range(4096):
            owners = [cluster.nodes[i].node_id for i in nodes if pid in claimed[i][column]]
            assert len(owners) == 1, f"column {column} pid {pid} claimed by {owners}"
            out.setdefault(pid, []).append(owners[0])
    return out


def rack_groups(answer):
    """`racks:` (`ns=NS:rack_1=A2,A1:...;ns=...`) as {ns: {group: {nodes}}}."""
    out = {}
    for part in answer.split(";"):
        fields = part.split(":")
        assert fields[0].startswith("ns="), answer
        groups = {}
        for field in fields[1:]:
            name, _, nodes = field.partition("=")
            groups[name] = set(nodes.split(","))
        out[fields[0][3:]] = groups
    return out


def read_counts(cluster, nodes):
    return {i: int(cluster.ns_stats(i)["client_read_success"]) for i in nodes}


def rack_client(cluster, seed, rack):
    """A client that reads from nodes of `rack` first (PREFER_RACK)."""
    config = cluster.client_config(seed, rack_aware=True, rack_id=rack, tend_interval=250)
    config["policies"]["read"]["replica"] = aerospike.POLICY_REPLICA_PREFER_RACK
    client = aerospike.client(config).connect()
    cluster._clients.append(client)
    # The client reads each node's `rack-ids` at its tends.
    time.sleep(2.0)
    return client


def assert_reads_stay_on_rack(cluster, rack, keys, seed=0):
    client = rack_client(cluster, seed, rack)
    nodes = range(len(cluster.nodes))
    before = read_counts(cluster, nodes)
    for key in keys:
        _, _, bins = client.get(key)
        assert bins["v"] == key[2], (key, bins)
    after = read_counts(cluster, nodes)
    grew = {cluster.nodes[i].node_id: after[i] - before[i] for i in nodes}
    local = sum(n for node, n in grew.items() if RACKS[node] == rack)
    assert local == len(keys), grew
    assert all(n == 0 for node, n in grew.items() if RACKS[node] != rack), grew
    # Both nodes of the rack served: the copies are spread, not piled up.
    assert all(n > len(keys) // 5 for node, n in grew.items() if RACKS[node] == rack), grew


class Writer(threading.Thread):
    """Writes keys in a loop, remembering each key's last acknowledged
    value and the writes whose fate is unknown (timeouts, lost nodes)."""

    def __init__(self, client, set_name, keys, seconds, seed):
        super().__init__(daemon=True)
        self.client = client
        self.set_name = set_name
        self.keys = keys
        self.until = time.monotonic() + seconds
        self.random = random.Random(seed)
        self.acked = {}
        self.in_doubt = {}
        self.acks = 0
        self.errors = []

    def run(self):
        counter = 0
        while time.monotonic() < self.until:
            k = self.random.randrange(self.keys)
            counter += 1
            try:
                self.client.put(("test", self.set_name, k), {"v": counter})
                self.acked[k] = counter
                self.in_doubt.pop(k, None)
                self.acks += 1
            except (ex.TimeoutError, ex.ClientError, ex.ServerError) as error:
                self.in_doubt.setdefault(k, []).append(counter)
                code = getattr(error, "code", None)
                if not isinstance(error, (ex.TimeoutError, ex.ClientError)) and code not in (9, 11, -8, -3):
                    self.errors.append(repr(error))
                time.sleep(0.01)

    def lost(self, client, policy=None):
        lost = []
        for k, value in self.acked.items():
            allowed = {value, *self.in_doubt.get(k, [])}
            try:
                _, _, bins = client.get(("test", self.set_name, k), policy=policy)
                found = bins.get("v")
            except ex.RecordNotFound:
                found = None
            if found not in allowed:
                lost.append((k, value, found))
        return lost


def kill_rack(cluster, rack):
    """kill -9 of every node of `rack`, one right after the other."""
    for node in cluster.nodes:
        if RACKS[node.node_id] == rack:
            cluster.kill(node.index)


@pytest.mark.time_limit(240)
def test_ap_copies_on_both_racks_rack_reads_and_a_whole_rack_lost():
    cluster = LocalCluster(4)
    # A4 starts without a rack and is moved to rack 2 while it runs.
    for node, rack in zip(cluster.nodes, ["1", "1", "2", "0"]):
        node.namespace["rack-id"] = rack
    with cluster:
        cluster.wait_formed()
        cluster.wait_stable()
        a4 = 3
        config = lambda: parse_kv(cluster.info(a4, "get-config:context=namespace;id=test"))  # noqa: E731
        assert config()["rack-id"] == "0"
        assert rack_groups(cluster.info(0, "racks:")) == {
            "test": {"rack_0": {"A4"}, "rack_1": {"A1", "A2"}, "rack_2": {"A3"}}}

        # set-config: checked, then in force at the next rebalance.
        for bad in ("rack-id=1000001", "rack-id=east", "rack-id="):
            assert cluster.info(a4, f"set-config:context=namespace;id=test;{bad}").startswith("ERROR:4"), bad
        assert cluster.info(a4, "set-config:context=namespace;id=nope;rack-id=2").startswith("ERROR:20")
        assert cluster.info(a4, "set-config:context=namespace;id=test;rack-id=2") == "ok"
        assert config()["rack-id"] == "2"
        assert cluster.ns_stats(a4)["rack-id"] == "2"
        assert cluster.info(a4, "rack-ids") == "test:0"
        generation = int(cluster.info(a4, "rebalance-generation"))
        answers = {cluster.info(i, "recluster:") for i in range(4)}
        assert "ok" in answers and answers <= {"ok", "ignored-by-non-principal"}, answers
        wait_for(lambda: cluster.info(a4, "rack-ids") == "test:2", "A4 placed on rack 2")
        assert int(cluster.info(a4, "rebalance-generation")) > generation
        cluster.wait_stable()

        # Every node says the same racks; each node's own rack.
        for i in range(4):
            assert cluster.info(i, "racks:") == "ns=test:rack_1=A2,A1:rack_2=A4,A3"
            assert cluster.info(i, "racks:namespace=test") == "rack_1=A2,A1:rack_2=A4,A3"
            assert cluster.info(i, "rack-ids") == f"test:{RACKS[cluster.nodes[i].node_id]}"
        assert cluster.info(0, "racks:namespace=nope").startswith("ERROR:20")

        # Each partition's master and replica sit on the two racks; the
        # masters are spread over all four nodes.
        placed = holders(cluster, range(4))
        for pid, (master, replica) in placed.items():
            assert RACKS[master] != RACKS[replica], (pid, master, replica)
        masters = {node: sum(1 for m, _ in placed.values() if m == node) for node in RACKS}
        assert all(n > 700 for n in masters.values()), masters

        # A rack-aware client reads from its own rack only.
        client = cluster.client()
        keys = [("test", "racks", i) for i in range(400)]
        for key in keys:
            client.put(key, {"v": key[2]})
        assert_reads_stay_on_rack(cluster, 1, keys)
        assert_reads_stay_on_rack(cluster, 2, keys, seed=2)

        # A whole rack fails under writes: nothing acknowledged is lost,
        # every partition stays served, reads and writes go on.
        writer = Writer(cluster.client(seed=1), "rackloss", keys=500, seconds=10, seed=21)
        writer.start()
        time.sleep(2.5)
        kill_rack(cluster, 2)
        cluster.wait_formed(nodes=[0, 1], timeout=20)
        writer.join(timeout=60)
        assert not writer.is_alive()
        assert writer.acks > 300, writer.acks
        assert not writer.errors, writer.errors[:5]
        survivor = cluster.client(seed=0)
        lost = writer.lost(survivor)
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
        for key in keys:
            assert survivor.get(key)[2] == {"v": key[2]}, key
        for i in range(50):
            survivor.put(("test", "after", i), {"v": i})
            assert survivor.get(("test", "after", i))[2] == {"v": i}
        for i in (0, 1):
            stats = cluster.ns_stats(i)
            assert stats["unavailable_partitions"] == "0", stats
        assert cluster.info(0, "racks:") == "ns=test:rack_1=A2,A1"
        # Both survivors end up with every record (RF 2 on two nodes).
        cluster.wait_stable(nodes=[0, 1], timeout=60)
        objects = [int(cluster.ns_stats(i)["objects"]) for i in (0, 1)]
        assert objects[0] == objects[1], objects


SC = {"strong-consistency": "true", "replication-factor": "2"}


@pytest.mark.time_limit(240)
def test_sc_rack_aware_roster_with_active_rack_survives_the_other_rack():
    cluster = LocalCluster(4, namespace=SC)
    for node in cluster.nodes:
        node.namespace["rack-id"] = str(RACKS[node.node_id])
    with cluster:
        cluster.wait_formed()
        roster = lambda i=0: dict(  # noqa: E731
            part.split("=", 1) for part in cluster.info(i, "roster:namespace=test").split(":"))
        # The observed nodes carry their configured racks, ready to stage.
        observed = roster()["observed_nodes"]
        assert observed == "A4@2,A3@2,A2@1,A1@1", observed
        staged = "M1|" + observed
        assert cluster.info(0, f"roster-set:namespace=test;nodes={staged}") == "ok"
        wait_for(lambda: all(roster(i)["pending_roster"] == "M1|A4@2,A3@2,A2@1,A1@1" for i in range(4)),
                 "pending roster everywhere")
        answers = {cluster.info(i, "recluster:") for i in range(4)}
        assert "ok" in answers and answers <= {"ok", "ignored-by-non-principal"}, answers
        wait_for(lambda: all(cluster.ns_stats(i)["unavailable_partitions"] == "0" for i in range(4)),
                 "every partition available")
        cluster.wait_stable(timeout=90)
        assert roster(2)["roster"] == "M1|A4@2,A3@2,A2@1,A1@1"
        for i in range(4):
            node = cluster.nodes[i].node_id
            assert cluster.info(i, "rack-ids") == f"test:{RACKS[node]}"
            assert cluster.ns_stats(i)["effective_active_rack"] == "1"
            assert cluster.info(i, "racks:") == (
                "ns=test:rack_1=A2,A1:rack_2=A4,A3:roster_rack_1=A2,A1:roster_rack_2=A4,A3")

        # The active rack masters every partition; the replica is on the
        # other rack.
        placed = holders(cluster, range(4))
        for pid, (master, replica) in placed.items():
            assert (RACKS[master], RACKS[replica]) == (1, 2), (pid, master, replica)

        client = cluster.client()
        keys = [("test", "racks", i) for i in range(300)]
        for key in keys:
            client.put(key, {"v": key[2]})

        # Rack 2 dies under writes: half the roster with every roster
        # master is left, so every partition stays available.
        writer = Writer(cluster.client(seed=1), "rackloss", keys=400, seconds=10, seed=22)
        writer.start()
        time.sleep(2.5)
        kill_rack(cluster, 2)
        cluster.wait_formed(nodes=[0, 1], timeout=20)
        writer.join(timeout=60)
        assert not writer.is_alive()
        assert writer.acks > 300, writer.acks
        assert not writer.errors, writer.errors[:5]
        wait_for(lambda: all(cluster.ns_stats(i)["unavailable_partitions"] == "0" for i in (0, 1)),
                 "every partition available on rack 1")
        survivor = cluster.client(seed=0)
        linearize = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE}
        lost = writer.lost(survivor, policy=linearize)
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
        for key in keys:
            assert survivor.get(key, policy=linearize)[2] == {"v": key[2]}, key
        for i in range(50):
            survivor.put(("test", "after", i), {"v": i})
            assert survivor.get(("test", "after", i), policy=linearize)[2] == {"v": i}
