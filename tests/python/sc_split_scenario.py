"""A network split of a 3-node strong-consistency cluster, healed: run
inside a network namespace of its own (test_strong_consistency.py creates
it), where the nodes listen on 127.0.0.2, .3 and .4 and nftables rules cut
node A off from B and C. Exits non-zero (with the reason) if a check fails.

What it checks (docs/strong-consistency.md):
- the minority (A alone) acknowledges no write: each one fails with 11 or
  "no node" (definitely not applied) or times out flagged in doubt;
- the majority (B, C) serves every partition: writes and linearize reads;
- after the heal every partition is available again without revive, every
  majority write is there, a write refused definitely left the old value,
  and an in-doubt write left the old or the new value.
"""

from __future__ import annotations

import subprocess
import sys
import time

import aerospike
from aerospike import exception as ex

from cluster import LocalCluster, parse_kv
from split_scenario import HOSTS, cut_off, heal

LINEARIZE = {"read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE}


def wait_for(predicate, what, timeout=60.0):
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


def unavailable(cluster, index):
    return int(parse_kv(cluster.info(index, "namespace/test"))["unavailable_partitions"])


def master_pids(cluster, index):
    """The partitions node `index` claims as master (column 0)."""
    import base64
    for ns in cluster.info(index, "replicas").split(";"):
        name, rest = ns.split(":", 1)
        if name == "test":
            bitmap = base64.b64decode(rest.split(",")[2])
            return {pid for pid in range(4096) if bitmap[pid >> 3] & (0x80 >> (pid & 7))}
    raise AssertionError("no namespace test in replicas")


def pid_of(client, set_name, key):
    digest = aerospike.calc_digest("test", set_name, key)
    return (digest[0] | digest[1] << 8) & 0xFFF


def main() -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with LocalCluster(3, hosts=HOSTS, namespace={"replication-factor": "2",
                                                 "strong-consistency": "true"}) as cluster:
        cluster.start_all()
        cluster.wait_formed()
        assert cluster.info(0, "roster-set:namespace=test;nodes=A1,A2,A3") == "ok"
        wait_for(lambda: all("pending_roster=A3,A2,A1" in cluster.info(i, "roster:namespace=test")
                             for i in range(3)), "pending roster")
        assert {cluster.info(i, "recluster:") for i in range(3)} <= {"ok", "ignored-by-non-principal"}
        wait_for(lambda: all(unavailable(cluster, i) == 0 for i in range(3)), "roster in force")
        cluster.wait_stable()
        old = cluster.client(seed=0)
        for k in range(300):
            old.put(("test", "base", k), {"v": "before"})

        on_a = master_pids(cluster, 0)
        a_keys = [k for k in range(300) if pid_of(old, "base", k) in on_a][:12]
        late_keys = [k for k in range(1000, 3000) if pid_of(old, "base", k) in on_a][:12]
        assert len(a_keys) >= 5 and len(late_keys) >= 5, (a_keys, late_keys)

        cut_off(HOSTS[0], HOSTS[1:])
        print("split: A cut off from B and C", flush=True)
        # At once, before anyone notices: writes through the client that
        # knows A as the master of these keys' partitions. Whatever it is
        # told (A in doubt, or the majority once the client learns its new
        # map) must hold after the heal.
        outcomes = {}
        policy = {"max_retries": 0, "total_timeout": 4000, "socket_timeout": 4000}
        for k in a_keys:
            try:
                old.put(("test", "base", k), {"v": "minority"}, policy=policy)
                outcomes[k] = "ok"
            except ex.AerospikeError as error:
                outcomes[k] = (error.code, bool(error.in_doubt))
        cluster.wait_formed(nodes=[1, 2], timeout=30)
        wait_for(lambda: unavailable(cluster, 0) == 4096, "minority unavailable")
        wait_for(lambda: unavailable(cluster, 1) == 0, "majority available")
        print(f"minority outcomes: {sorted(set(outcomes.values()), key=str)}", flush=True)

        majority = aerospike.client(cluster.client_config(seed=1)).connect()
        time.sleep(2)
        for k in range(300, 400):
            majority.put(("test", "base", k), {"v": "majority"})
        for k in range(300, 400):
            assert majority.get(("test", "base", k), policy=LINEARIZE)[2] == {"v": "majority"}
        # A client that reaches only A (seeded there; A's cluster is A
        # alone): the minority acknowledges nothing.
        side_a = aerospike.client(cluster.client_config(seed=0)).connect()
        time.sleep(1.5)
        for k in late_keys:
            try:
                side_a.put(("test", "base", k), {"v": "late"}, policy=policy)
                outcomes[k] = "ok"
            except ex.AerospikeError as error:
                outcomes[k] = (error.code, bool(error.in_doubt))
        side_a.close()
        late = {k: outcomes[k] for k in late_keys}
        assert "ok" not in late.values(), late
        for k, outcome in outcomes.items():
            # Definite (11, or no node to send to), or a timeout: in doubt.
            assert outcome == "ok" or outcome[0] in (11, -8, 9), (k, outcome)
        majority.close()

        heal()
        print("healed", flush=True)
        cluster.wait_formed(timeout=60)
        wait_for(lambda: all(unavailable(cluster, i) == 0 for i in range(3)),
                 "every partition available without revive", timeout=60)
        client = aerospike.client(cluster.client_config(seed=2)).connect()
        deadline = time.monotonic() + 10
        while len(client.get_nodes()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)

        def value(k):
            for _ in range(50):
                try:
                    return client.get(("test", "base", k), policy=LINEARIZE)[2]["v"]
                except ex.RecordNotFound:
                    return None
                except (ex.TimeoutError, ex.ServerError, ex.ClusterError, ex.ConnectionError,
                        ex.InvalidNodeError):
                    # Right after the heal partitions change hands; a client
                    # that read two nodes' maps on either side of a handoff
                    # knows no master for a partition until its next tend.
                    time.sleep(0.2)
            raise AssertionError(f"key {k} unreadable after the heal")

        in_doubt = 0
        for k in range(300):
            got = value(k)
            outcome = outcomes.get(k)
            if outcome is None:
                assert got == "before", (k, got)
            elif outcome == "ok":
                assert got == "minority", (k, "acknowledged write lost", got)
            elif outcome[0] in (11, -8):
                assert got == "before", (k, outcome, got)
            else:
                in_doubt += 1
                assert got in ("before", "minority"), (k, outcome, got)
        for k in range(300, 400):
            assert value(k) == "majority", k
        for k in late_keys:
            got = value(k)
            if outcomes[k][0] in (11, -8):
                assert got is None, (k, outcomes[k], got)
            else:
                assert got in (None, "late"), (k, outcomes[k], got)
        client.close()
        print(f"healed: no minority write acknowledged, every acknowledged write kept, "
              f"{in_doubt} in doubt, "
              f"majority writes kept, all partitions available", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as failure:
        print(f"FAILED: {failure}", flush=True)
        sys.exit(1)
