"""`bolide backup` / `bolide restore` on 3-node clusters (RF 2), found from
one seed: every type round-trips cluster to cluster, and a backup during
which a node is killed (its partitions move) still holds every record
exactly once.
"""

from __future__ import annotations

import subprocess
import time

import aerospike
import pytest

from cluster import LocalCluster
from test_backup import (
    NS,
    bolide,
    bolide_bin,
    compare_records,
    digests_in,
    fill_every_type,
    raw_get,
    stored_keys,
    summary,
)


def serving_port(cluster: LocalCluster) -> int:
    return cluster.nodes[cluster.live()[0]].port


def compare_on_clusters(ca, a: LocalCluster, cb, b: LocalCluster, keys):
    """compare_records with each record read raw from a node that answers it."""

    def port_for(cluster, k, digest):
        for index in cluster.live():
            code, *_ = raw_get(cluster.nodes[index].port, k[0], k[1], digest)
            if code == 0:
                return cluster.nodes[index].port
        raise AssertionError(f"no node answers {k}")

    for k in keys:
        key = (k[0], k[1], None, k[3]) if len(k) == 4 else k
        digest = k[3] if len(k) == 4 else bytes(ca.exists(key)[0][3])
        compare_records(ca, port_for(a, k, digest), cb, port_for(b, k, digest), [k])


@pytest.mark.time_limit(300)
def test_every_type_round_trips_between_clusters(tmp_path):
    with LocalCluster(3) as a, LocalCluster(3) as b:
        a.start_all()
        b.start_all()
        a.wait_stable()
        b.wait_stable()
        ca = a.client(send_bool_as=aerospike.AS_BOOL)
        cb = b.client(send_bool_as=aerospike.AS_BOOL)
        # Raw writes (the language blobs) go to the seed, which proxies them.
        keys = fill_every_type(ca, a.nodes[0].port)
        for i in range(2000):
            ca.put((NS, "bulk", i), {"i": i})
        out = tmp_path / "c"
        bolide(a.nodes[1].port, "backup", "-n", NS, "-d", str(out), "-w", "4")
        found = digests_in(out)
        assert len(found) == len(keys) + 2000 == len(set(found))
        counts = summary(bolide(b.nodes[2].port, "restore", "-d", str(out)))
        assert counts["written"] == len(keys) + 2000, counts
        compare_on_clusters(ca, a, cb, b, keys)
        assert stored_keys(cb) == stored_keys(ca)


@pytest.mark.time_limit(300)
def test_a_node_killed_during_a_backup_leaves_every_record_once(tmp_path, start_server):
    total = 20_000
    with LocalCluster(3) as a:
        a.start_all()
        a.wait_stable()
        ca = a.client()
        for i in range(total):
            ca.put((NS, "kill", i), {"i": i, "pad": "x" * 40})
        out = tmp_path / "k"
        # Slow enough (about 5 s) that the kill lands in the middle.
        proc = subprocess.Popen(
            [bolide_bin(), "-p", str(a.nodes[0].port), "backup", "-n", NS, "-d", str(out),
             "-w", "4", "-L", "4000", "-F", "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        time.sleep(1.5)
        assert proc.poll() is None, "the backup ended before the kill"
        a.kill(0)  # the seed itself
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()
        found = digests_in(out)
        assert len(found) == total, (len(found), err.decode())
        assert len(set(found)) == total
        # And the backup restores whole into a fresh node.
        dst = start_server()
        counts = summary(bolide(dst.port, "restore", "-d", str(out)))
        assert counts["written"] == total, counts
        cd = dst.client()
        for i in range(0, total, 97):
            assert cd.get((NS, "kill", i))[2] == {"i": i, "pad": "x" * 40}


@pytest.mark.time_limit(300)
def test_partitions_moving_to_a_new_node_during_a_backup(tmp_path):
    """A third node joins a 2-node cluster mid-backup: partitions migrate
    and change masters, and the backup still holds every record once."""
    total = 20_000
    with LocalCluster(2) as a:
        a.start_all()
        a.wait_stable()
        ca = a.client()
        for i in range(total):
            ca.put((NS, "move", i), {"i": i})
        out = tmp_path / "m"
        proc = subprocess.Popen(
            [bolide_bin(), "-p", str(a.nodes[0].port), "backup", "-n", NS, "-d", str(out), "-w", "4", "-L", "4000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        time.sleep(1.0)
        assert proc.poll() is None, "the backup ended before the node joined"
        a.add_node()
        a.wait_formed()
        # The cluster has its new shape (new masters) while the backup runs.
        assert proc.poll() is None, "the backup ended before the cluster changed"
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()
        found = digests_in(out)
        assert len(found) == total == len(set(found)), (len(found), err.decode())
