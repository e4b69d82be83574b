"""Strong consistency through the official Python client against real
``bolided`` processes: the roster walk-through (roster-set, recluster),
the regime clients detect SC from, availability when roster nodes are
missing, SC read modes, refused expunges, and the roster and regime kept
across a restart.
"""

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aerospike
import pytest
from aerospike import exception as ex

from cluster import LocalCluster, parse_kv

SC = {"strong-consistency": "true", "replication-factor": "2"}


def roster(cluster, index=0):
    return dict(part.split("=", 1) for part in cluster.info(index, "roster:namespace=test").split(":"))


def regimes(cluster, index):
    """The regime each node reports in `replicas` for namespace test."""
    answer = cluster.info(index, "replicas")
    for ns in answer.split(";"):
        name, rest = ns.split(":", 1)
        if name == "test":
            return int(rest.split(",", 1)[0])
    raise AssertionError(answer)


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


def get_settled(client, key, policy=None, timeout=10.0):
    """A read, retried while the client still routes to a node that is
    gone (it learns the new map at its next tend)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.get(key, policy=policy)
        except (ex.ConnectionError, ex.TimeoutError, ex.InvalidNodeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def put_settled(client, key, bins, timeout=10.0):
    """A write, retried while the client's map still lacks an owner (it
    reads each node's claims at its tend, at slightly different times)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.put(key, bins)
        except ex.InvalidNodeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def form_roster(cluster, nodes):
    ids = ",".join(cluster.nodes[i].node_id for i in nodes)
    assert cluster.info(0, f"roster-set:namespace=test;nodes={ids}") == "ok"
    wait_for(lambda: all(roster(cluster, i)["pending_roster"] != "null" for i in nodes),
             "pending roster everywhere")
    answers = {cluster.info(i, "recluster:") for i in nodes}
    assert "ok" in answers and answers <= {"ok", "ignored-by-non-principal"}, answers
    wait_for(lambda: all(parse_kv(cluster.info(i, "namespace/test"))["unavailable_partitions"] == "0"
                         for i in nodes), "every partition available")


@pytest.fixture
def sc_cluster():
    # commit-to-device: a kill -9 of every node holding a copy loses no
    # acknowledged write (without it that loss is SC's documented
    # exception, and Bolide does not yet mark such partitions dead).
    with LocalCluster(3, namespace=SC, storage="device",
                      storage_extra={"commit-to-device": "true"}) as cluster:
        cluster.start_all()
        cluster.wait_formed()
        yield cluster


def test_roster_walk_through_and_regime(sc_cluster):
    c = sc_cluster
    # Before a roster: SC is visible, nothing is served, the regime is set.
    first = roster(c)
    assert first["roster"] == "null" and first["pending_roster"] == "null"
    assert sorted(first["observed_nodes"].split(",")) == ["A1", "A2", "A3"]
    assert "strong-consistency=true" in c.info(0, "namespace/test")
    assert "strong-consistency=true" in c.info(0, "get-config:context=namespace;id=test")
    assert parse_kv(c.info(0, "namespace/test"))["unavailable_partitions"] == "4096"
    before = [regimes(c, i) for i in range(3)]
    assert all(r > 0 for r in before), before
    # No node claims a partition yet: the client finds no node (-8).
    client = c.client()
    with pytest.raises(ex.AerospikeError) as error:
        client.put(("test", None, "k"), {"v": 1})
    assert error.value.code in (-8, 11), error.value

    # Stage, recluster, serve.
    assert c.info(0, "roster-set:namespace=test;nodes=A1,zz") .startswith("ERROR:4")
    # Staged is not in force: no node takes the roster before recluster:.
    assert c.info(0, "roster-set:namespace=test;nodes=A1,A2,A3") == "ok"
    wait_for(lambda: all(roster(c, i)["pending_roster"] == "A3,A2,A1" for i in range(3)),
             "pending roster everywhere")
    time.sleep(1)
    for i in range(3):
        assert roster(c, i)["roster"] == "null", (i, roster(c, i))
        assert parse_kv(c.info(i, "namespace/test"))["unavailable_partitions"] == "4096"
    form_roster(c, [0, 1, 2])
    r = roster(c, 1)
    assert r["roster"] == r["pending_roster"] == "A3,A2,A1", r
    after = [regimes(c, i) for i in range(3)]
    assert len(set(after)) == 1 and after[0] > max(before), (before, after)
    stats = parse_kv(c.info(0, "namespace/test"))
    assert stats["dead_partitions"] == "0" and stats["ns_cluster_size"] == "3"

    client = c.client()
    for i in range(50):
        put_settled(client, ("test", None, i), {"v": i})
    linearize = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE}
    session = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_SESSION}
    replica = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_ALLOW_REPLICA}
    for i in range(50):
        for policy in (linearize, session, replica):
            _, _, bins = client.get(("test", None, i), policy=policy)
            assert bins == {"v": i}

    # Expunges are refused; durable deletes go through.
    with pytest.raises(ex.AerospikeError) as error:
        client.remove(("test", None, 1))
    assert error.value.code == 22, error.value
    client.remove(("test", None, 1), policy={"durable_delete": True})
    with pytest.raises(ex.RecordNotFound):
        client.get(("test", None, 1), policy=linearize)
    _, _, bins = client.get(("test", None, 2))
    assert bins == {"v": 2}


def test_minority_is_unavailable_majority_serves_and_state_survives_restart(sc_cluster):
    c = sc_cluster
    form_roster(c, [0, 1, 2])
    client = c.client()
    for i in range(200):
        put_settled(client, ("test", None, i), {"v": i})
    regime_before = regimes(c, 0)

    # One roster node gone: {A1,A2} is a majority holding a roster
    # replica of every partition (RF 2): all stay available.
    c.kill(2)
    c.wait_formed(nodes=[0, 1])
    wait_for(lambda: parse_kv(c.info(0, "namespace/test"))["unavailable_partitions"] == "0",
             "majority serves everything")
    for i in range(200):
        _, _, bins = get_settled(client, ("test", None, i),
                                 policy={"read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE})
        assert bins == {"v": i}

    # Two roster nodes gone: the lone node serves only partitions whose
    # roster replicas are all on it (none with RF 2 and 3 nodes... unless
    # both replicas are A1): most are unavailable, none are dead.
    c.kill(1)
    c.wait_formed(nodes=[0])
    stats = wait_for(lambda: (lambda s: s if int(s["unavailable_partitions"]) > 0 else None)(
        parse_kv(c.info(0, "namespace/test"))), "minority is unavailable")
    assert int(stats["unavailable_partitions"]) == 4096, stats
    assert stats["dead_partitions"] == "0"
    assert regimes(c, 0) >= regime_before
    # No write succeeds on the minority: the client that knew the old map
    # reaches A1 for A1's old partitions and gets 11; the others have no
    # live owner (connection error, or no node: -8).
    codes = []
    for i in range(40):
        with pytest.raises(ex.AerospikeError) as error:
            client.put(("test", None, 1000 + i), {"v": 1}, policy={"max_retries": 0})
        codes.append(error.value.code)
    assert 11 in codes, codes
    assert set(codes) <= {11, -8, -10, 9}, codes

    # The roster and the regime come back with the restarted nodes, and
    # every partition is available again without revive.
    c.start(1)
    c.start(2)
    c.wait_formed()
    wait_for(lambda: all(parse_kv(c.info(i, "namespace/test"))["unavailable_partitions"] == "0"
                         for i in range(3)), "healed cluster serves everything")
    assert roster(c, 2)["roster"] == "A3,A2,A1"
    assert all(regimes(c, i) > regime_before for i in range(3))
    # No waiting for migrations: a restarted copy is a subset until merged,
    # so reads go to a full copy meanwhile.
    client = c.client()
    for i in range(200):
        _, _, bins = get_settled(client, ("test", None, i))
        assert bins == {"v": i}


def test_node_back_without_its_saved_roster_takes_the_roster_in_force():
    """A memory namespace without work-directory keeps no roster across a
    restart: the node takes the roster in force from its cluster when it
    joins, instead of serving nothing until the next recluster:."""
    with LocalCluster(3, namespace=SC) as c:
        c.start_all()
        c.wait_formed()
        form_roster(c, [0, 1, 2])
        c.kill(2)
        c.wait_formed(nodes=[0, 1])
        c.start(2)
        c.wait_formed()
        wait_for(lambda: roster(c, 2)["roster"] == "A3,A2,A1", "the restarted node's roster")
        wait_for(lambda: all(parse_kv(c.info(i, "namespace/test"))["unavailable_partitions"] == "0"
                             for i in range(3)), "every partition available")
        assert parse_kv(c.info(2, "namespace/test"))["ns_cluster_size"] == "3"


def holders(cluster, key):
    """(master, replica) node indices of the key's partition, from the
    nodes' `replicas` claims."""
    import base64
    digest = aerospike.calc_digest(*key[:2], key[2])
    pid = (digest[0] | digest[1] << 8) & 0xFFF
    found = [None, None]
    for index in range(len(cluster.nodes)):
        for ns in cluster.info(index, "replicas").split(";"):
            name, rest = ns.split(":", 1)
            if name != "test":
                continue
            columns = rest.split(",")
            for column, bitmap in enumerate(columns[2:4]):
                bits = base64.b64decode(bitmap)
                if bits[pid >> 3] & (0x80 >> (pid & 7)) and found[column] is None:
                    found[column] = index
    assert None not in found, found
    return tuple(found)


def test_timed_out_write_is_unreplicated_until_copied_again(sc_cluster):
    """A write whose copy does not reach the replica in time answers in
    doubt and leaves the record unreplicated on the master
    (`unreplicated_records`); the master copies it again, and once the
    write has been read it survives the master's loss."""
    c = sc_cluster
    form_roster(c, [0, 1, 2])
    client = c.client()
    key = ("test", "sc", "in-doubt")
    put_settled(client, key, {"v": 1})
    c.wait_stable()
    master, replica = holders(c, key)
    assert master != replica, (master, replica)
    assert c.ns_stats(master)["unreplicated_records"] == "0"
    c.pause(replica)
    try:
        with pytest.raises(ex.AerospikeError) as error:
            client.put(key, {"v": 2}, policy={"total_timeout": 300, "socket_timeout": 300,
                                              "max_retries": 0})
        assert error.value.code == 9 and error.value.in_doubt, error.value
        assert c.ns_stats(master)["unreplicated_records"] == "1"
    finally:
        c.resume(replica)
    wait_for(lambda: c.ns_stats(master)["unreplicated_records"] == "0",
             "copied to the replica again", timeout=15)
    linearize = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE}
    assert get_settled(client, key, policy=linearize)[2] == {"v": 2}
    # The replica has it: the master's loss loses nothing read.
    c.kill(master)
    others = [i for i in range(3) if i != master]
    c.wait_formed(nodes=others)
    client = c.client(seed=others[0])
    assert get_settled(client, key, policy=linearize, timeout=20)[2] == {"v": 2}


def recluster_quickly(cluster, nodes, times=3):
    """`recluster:` several times in a row while migrations run: every
    exchange a new map that expects, for many partitions, the same copy
    from the same sender as the one before."""
    for _ in range(times):
        answers = {cluster.info(i, "recluster:") for i in nodes}
        assert "ok" in answers, answers
        time.sleep(0.08)


def test_quick_successive_maps_settle(sc_cluster):
    """Two rebalances in quick succession (a node joins, then
    `recluster:`) must settle: the slots a receiver gave immigrations
    under the first map are forgotten under the second, or they fill
    migrate-max-num-incoming for ever and cluster-stable answers
    "unstable cluster" with migrations remaining (a CI failure of the
    split test on 2026-11-25)."""
    c = sc_cluster
    form_roster(c, [0, 1, 2])
    client = c.client()
    for i in range(3000):
        put_settled(client, ("test", None, i), {"v": i})
    c.wait_stable()
    # A node leaves: the survivors rebuild the second copies.
    c.kill(2)
    c.wait_formed(nodes=[0, 1])
    recluster_quickly(c, [0, 1])
    c.wait_stable(nodes=[0, 1], timeout=40)
    # It comes back: its copies merge while the map changes again.
    c.start(2)
    c.wait_formed()
    recluster_quickly(c, [0, 1, 2])
    c.wait_stable(timeout=40)
    for index in range(3):
        stats = parse_kv(c.info(index, "namespace/test"))
        assert stats["unavailable_partitions"] == "0", stats
        for name in ("migrate_tx_partitions_remaining", "migrate_rx_partitions_remaining",
                     "migrate_signals_remaining"):
            assert stats[name] == "0", (index, name, stats[name])
    client = c.client()
    linearize = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE}
    for i in range(0, 3000, 7):
        _, _, bins = get_settled(client, ("test", None, i), policy=linearize)
        assert bins == {"v": i}


@pytest.mark.time_limit(300)
def test_split_minority_acknowledges_nothing_and_heals_without_revive():
    """sc_split_scenario.py in a network namespace of its own (as root:
    `ip netns add`, nftables rules cutting node A off from B and C)."""
    assert os.geteuid() == 0, "the split test creates a network namespace: it runs as root"
    for tool in ("ip", "nft"):
        assert shutil.which(tool), f"{tool} is missing: the test command installs iproute2 and nftables"
    here = Path(__file__).resolve().parent
    namespace = f"bolide-sc-split-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        result = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, str(here / "sc_split_scenario.py")],
            cwd=here, capture_output=True, text=True, timeout=280,
            env={**os.environ, "PYTHONPATH": str(here)},
        )
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    output = result.stdout + result.stderr
    # The scenario's own verdict last: the node logs before it can run
    # to thousands of characters.
    verdict = [line for line in result.stdout.splitlines() if line.startswith("FAILED:")]
    assert result.returncode == 0, output[-6000:] + "\n" + "\n".join(verdict)
    assert "healed: no minority write acknowledged" in output, output[-3000:] + "\n" + "\n".join(verdict)
