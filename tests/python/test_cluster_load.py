"""A cluster under load through its whole life cycle: the official Go
``benchmark`` keeps reading and updating while a fourth node joins, one node
is killed with kill -9 and then restarted from its files. Beside it a Python
writer remembers the last acknowledged value of every key it writes.

The server must answer no request with an error. The clients may fail a
request they could not send: the Go client fails one routed to a node it
discovered less than a tend ago and has no connection to yet, or to a node
that died, and does the same against Aerospike; that may happen only while
a node appears or fails over. Timeouts (and the Python client's circuit
breaker tripping on a dead node) may happen only in the failover window
(from the kill until the survivors have formed their cluster and the
clients have their new map). Migrations must finish; afterwards every
acknowledged write is read back with its last acknowledged value, and the
nodes hold exactly two copies of every record.

Needs the Go benchmark tool: scripts/test.sh installs it (tests/go/smoke.sh)
before the Python suite runs.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from aerospike import exception as ex

from cluster import LocalCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
GO_BENCHMARK = Path(os.environ.get("GOBIN_DIR", REPO_ROOT / ".cache" / "gobin")) / "benchmark"
GO_SET = "testset"  # the Go benchmark's default set
GO_KEYS = 20_000
WRITER_KEYS = 3_000
# What the Go client reports for a command it could not send: it had no
# connection yet to a node it had just discovered (it opens them in the
# background and retries at once), or the node was gone. It does the same
# against Aerospike.
CLIENT_SIDE_CODES = {"NO_AVAILABLE_CONNECTIONS_TO_NODE", "NETWORK_ERROR", "TIMEOUT", "MAX_RETRIES_EXCEEDED",
                     "SERVER_NOT_AVAILABLE", "INVALID_NODE_ERROR"}
# What the Python client may report while a node's partitions fail over:
# a timeout, or its circuit breaker (max_error_rate) tripping on the dead
# node's refused connections.
WRITER_FAILOVER_ERRORS = (ex.TimeoutError, ex.MaxErrorRateExceeded)
# After the survivors report their new cluster, clients learn the new map
# at their next tend (1 s) and finish the requests they had in flight.
CLIENT_CATCH_UP = 3.0


class Load:
    """The Go benchmark's per-second report lines, with the time each
    arrived."""

    LINE = re.compile(r"write\(tps=(\d+) timeouts=(\d+) errors=(\d+)\) "
                      r"read\(tps=(\d+) timeouts=(\d+) errors=(\d+)\)")

    def __init__(self, port: int):
        self.proc = subprocess.Popen(
            [str(GO_BENCHMARK), "-h", "127.0.0.1", "-p", str(port), "-n", "test", "-k", str(GO_KEYS),
             "-o", "B:100", "-w", "RU,50", "-c", "8", "-g", "4000", "-T", "2000", "-d"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.samples = []  # (time, write tps, write timeouts, write errors, read tps, read timeouts, read errors)
        self.other = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            m = self.LINE.search(line)
            if m:
                self.samples.append((time.monotonic(), *map(int, m.groups())))
            else:
                self.other.append(line.rstrip())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.reader.join(timeout=10)


class Writer(threading.Thread):
    """Puts and deletes keys, remembering each key's last acknowledged value
    and the writes whose fate is unknown, and every failure with its time."""

    def __init__(self, client, until: float):
        super().__init__(daemon=True)
        self.client = client
        self.until = until
        self.random = random.Random(2026)
        self.acked = {}  # key -> value (None: deleted)
        self.in_doubt = {}  # key -> values written after the last ack
        self.acks = 0
        self.failures = []  # (time, error)

    def run(self):
        counter = 0
        policy = {"total_timeout": 2000, "max_retries": 2, "sleep_between_retries": 50}
        while time.monotonic() < self.until:
            k = self.random.randrange(WRITER_KEYS)
            key = ("test", "verified", k)
            counter += 1
            delete = self.random.random() < 0.1 and self.acked.get(k) is not None
            try:
                if delete:
                    self.client.remove(key, policy=policy)
                    value = None
                else:
                    value = counter
                    self.client.put(key, {"v": value}, policy=policy)
                self.acked[k] = value
                self.in_doubt.pop(k, None)
                self.acks += 1
            except ex.AerospikeError as error:
                self.in_doubt.setdefault(k, []).append(None if delete else counter)
                self.failures.append((time.monotonic(), error))
                time.sleep(0.01)
            time.sleep(0.001)

    def verify(self, client):
        lost = []
        for k, value in self.acked.items():
            allowed = {value} | set(self.in_doubt.get(k, []))
            try:
                _, _, bins = client.get(("test", "verified", k))
                found = bins.get("v")
            except ex.RecordNotFound:
                found = None
            if found not in allowed:
                lost.append((k, value, found, self.in_doubt.get(k)))
        return lost


def first_sample(load: "Load") -> float:
    return load.samples[0][0] if load.samples else 0.0


def migrations_done(cluster: LocalCluster, nodes) -> bool:
    return all(cluster.stats(i).get("migrate_partitions_remaining") == "0" for i in nodes)


@pytest.mark.time_limit(420)
def test_join_kill_and_restart_under_load_lose_nothing_acknowledged():
    assert GO_BENCHMARK.exists(), f"Go benchmark tool missing at {GO_BENCHMARK} (tests/go/smoke.sh installs it)"
    with LocalCluster(3, storage="device") as cluster:
        cluster.wait_stable()
        seed = cluster.nodes[0]
        subprocess.run([str(GO_BENCHMARK), "-h", "127.0.0.1", "-p", str(seed.port), "-n", "test", "-k",
                        str(GO_KEYS), "-o", "B:100", "-w", "I", "-c", "8"],
                       check=True, capture_output=True, timeout=300)
        client = cluster.client()
        load = Load(seed.port)
        writer = Writer(client, until=time.monotonic() + 600)
        writer.start()
        events = {}
        try:
            time.sleep(4)
            events["join"] = time.monotonic()
            cluster.add_node()
            cluster.wait_stable(timeout=150)
            events["joined"] = time.monotonic()
            time.sleep(2)

            events["kill"] = time.monotonic()
            cluster.kill(1)
            cluster.wait_formed(nodes=[0, 2, 3], timeout=20)
            events["formed"] = time.monotonic()
            cluster.wait_stable(nodes=[0, 2, 3], timeout=150)
            time.sleep(2)

            events["restart"] = time.monotonic()
            cluster.start(1)
            cluster.wait_stable(timeout=150)
            events["stable"] = time.monotonic()
            time.sleep(3)
        finally:
            writer.until = 0
            writer.join(timeout=30)
            load.stop()

        # The load ran the whole time. Answers from the server were never
        # errors; what the client could not send (it had no connection yet
        # to a node it had just discovered, or the node was dead) happened
        # only while a node appeared or failed over; timeouts only in the
        # failover window.
        timeline = {k: round(v - first_sample(load), 1) for k, v in events.items()}
        assert len(load.samples) >= 10, f"too few benchmark reports: {load.samples} {load.other[-20:]}"
        first = load.samples[0][0]
        ops = sum(s[1] + s[4] for s in load.samples)
        assert ops > 1000, f"the benchmark did almost nothing: {ops} ops"

        failover = (events["kill"], events["formed"] + CLIENT_CATCH_UP)
        appear = [(events["join"], events["joined"] + CLIENT_CATCH_UP),
                  (events["restart"], events["stable"] + CLIENT_CATCH_UP), failover]

        def during(windows, t: float) -> bool:
            # A report covers the second before it arrived.
            return any(lo <= t and t - 1.5 <= hi for lo, hi in windows)

        codes = {}
        for line in load.other:
            m = re.search(r"ResultCode: (\w+)", line)
            if m:
                codes[m.group(1)] = codes.get(m.group(1), 0) + 1
        unexpected = {c: n for c, n in codes.items() if c not in CLIENT_SIDE_CODES}
        assert not unexpected, (f"the Go benchmark got error answers from the server: {unexpected}; "
                                f"{[l for l in load.other if 'ResultCode' in l][:10]}")
        errors = [(round(s[0] - first, 1), s[1:]) for s in load.samples if (s[3] or s[6]) and not during(appear, s[0])]
        assert not errors, f"the Go benchmark saw errors outside the windows {timeline}: {errors} ({codes})"
        late = [(round(s[0] - first, 1), s[1:]) for s in load.samples
                if (s[2] or s[5]) and not during([failover], s[0])]
        assert not late, f"timeouts outside the failover window {timeline}: {late}"
        window = failover

        assert writer.acks > 1000, writer.acks
        bad = [(round(t - first, 1), repr(e)) for t, e in writer.failures
               if not isinstance(e, WRITER_FAILOVER_ERRORS) or not (window[0] <= t <= window[1])]
        assert not bad, f"the writer saw failures other than timeouts or a tripped circuit breaker in the failover window: {bad[:10]}"

        # Migrations finished and the map is settled on all four nodes.
        assert migrations_done(cluster, range(4))
        key = cluster.wait_stable(timeout=30)
        assert {cluster.stats(i)["cluster_key"] for i in range(4)} == {key}

        # Every acknowledged write is there with its last acknowledged value,
        # read through a new client seeded by the node that was killed.
        lost = writer.verify(cluster.client(seed=1))
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"

        # Exactly two copies of every record, one of them a master.
        live = sum(1 for v in writer.acked.values() if v is not None)
        doubt = len(writer.in_doubt)
        stats = [cluster.ns_stats(i) for i in range(4)]
        masters = sum(int(s["master_objects"]) for s in stats)
        objects = sum(int(s["objects"]) for s in stats)
        assert abs(masters - (GO_KEYS + live)) <= doubt, (masters, GO_KEYS, live, doubt)
        assert objects == 2 * masters, (objects, masters)
        assert all(int(s["master_objects"]) > 0 for s in stats), [s["master_objects"] for s in stats]

        print(f"timeline (s from the first report): {timeline}; ops {ops}; writer acks {writer.acks}; "
              f"writer timeouts {len(writer.failures)}; client-side errors {codes}")
