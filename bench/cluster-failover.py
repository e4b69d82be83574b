#!/usr/bin/env python3
"""Failover time: from kill -9 of a node to the first successful write of a
key that node mastered, under write load.

    bench/cluster-failover.py                 # 6 repetitions, defaults below
    REPEATS=3 KEYS=20000 bench/cluster-failover.py

Each repetition: a fresh 3-node cluster, RF 2, memory namespace (nodes on
SERVER_CPUS, heartbeat interval 150 ms, timeout 10), KEYS keys loaded;
then bolide-bench --cluster updates them (`-w RU,0 -g WRITE_RATE -c 16
-T 500`, seeded at a node that stays up) for the whole repetition. Before
the kill the script reads every node's `replicas` and picks a key (set
`failover`) whose partition the victim masters and another node holds as
its replica; it writes that key once through the replica (proxied to the
master) to check the path. Then it sends SIGKILL to the victim and, in a
tight loop, writes the key to the replica node, the partition's next
master: a fresh connection per attempt, the request's own deadline
PROBE_TTL_MS (the server answers 9 when it cannot finish in time) and a
socket timeout of 250 ms. Failover time = kill to the first answer 0.
Beside it a thread polls both survivors' `statistics` every 20 ms and
notes when they agree on a cluster of 2 with a settled map. The victim
rotates over the three nodes (node C003, the highest id, is the
principal). The script process (the probe loop) runs on CLIENT_CPUS with
bolide-bench.

Writes results.md and runs.json to bench/results/cluster-failover-<stamp>/
(or RESULTS_DIR). Knobs (env): REPEATS, KEYS, WRITE_RATE, PROBE_TTL_MS,
SERVER_CPUS, CLIENT_CPUS, BASE_PORT, BOLIDED_BIN, BOLIDE_BENCH_BIN.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clusterlib as cl  # noqa: E402

REPEATS = int(os.environ.get("REPEATS", "6"))
KEYS = int(os.environ.get("KEYS", "100000"))
WRITE_RATE = int(os.environ.get("WRITE_RATE", "10000"))
PROBE_TTL_MS = int(os.environ.get("PROBE_TTL_MS", "50"))
SERVER_CPUS = os.environ.get("SERVER_CPUS", "1")
CLIENT_CPUS = os.environ.get("CLIENT_CPUS", "0")
BASE_PORT = int(os.environ.get("BASE_PORT", "4700"))
LOAD_SECONDS = 30
KILL_AT = 8.0
PROBE_SET = "failover"


def write_request(d: bytes, value: int, ttl_ms: int) -> bytes:
    """AS_MSG write of one integer bin `v` to namespace test, set failover,
    by digest."""
    def field(kind: int, data: bytes) -> bytes:
        return struct.pack(">IB", len(data) + 1, kind) + data

    fields = field(0, b"test") + field(1, PROBE_SET.encode()) + field(4, d)
    op = struct.pack(">IBBBB", 4 + 1 + 8, 2, 1, 0, 1) + b"v" + struct.pack(">q", value)
    header = struct.pack(">BBBBBBIIIHH", 22, 0, 1, 0, 0, 0, 0, 0, ttl_ms, 3, 1)
    body = header + fields + op
    return struct.pack(">Q", (2 << 56) | (3 << 48) | len(body)) + body


def write_once(port: int, d: bytes, value: int) -> str:
    """One write on a fresh connection: the result code, or what went wrong."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.25) as s:
            s.settimeout(0.25)
            s.sendall(write_request(d, value, PROBE_TTL_MS))
            head = cl._recv_exact(s, 8)
            size = struct.unpack(">Q", head)[0] & 0xFFFF_FFFF_FFFF
            body = cl._recv_exact(s, size)
            return str(body[5])
    except socket.timeout:
        return "socket-timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as error:
        return type(error).__name__


class LoadLines:
    """bolide-bench's per-second lines with the time each arrived."""

    LINE = re.compile(r"update\(tps=(\d+) timeouts=(\d+) errors=(\d+)\)")

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.samples = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            m = self.LINE.search(line)
            if m:
                self.samples.append((time.monotonic(), *map(int, m.groups())))


def find_key(cluster: cl.Cluster, victim: int):
    """A key whose partition the victim masters, and the node holding its replica."""
    columns = {i: cl.replicas_columns(cl.info(cluster.port(i), ["replicas"])["replicas"]) for i in range(3)}
    for key in range(100_000):
        d = cl.digest(PROBE_SET, key)
        pid = cl.partition_of(d)
        if columns[victim][0][pid]:
            replica = [i for i in range(3) if i != victim and len(columns[i]) > 1 and columns[i][1][pid]]
            if replica:
                return key, d, pid, replica[0]
    raise RuntimeError("no key mastered by the victim")


def repetition(rep: int, out: Path) -> dict:
    victim = (rep - 1) % 3
    seed = (victim + 1) % 3
    work = out / f"rep{rep}"
    cluster = cl.Cluster(3, 2, work, BASE_PORT, SERVER_CPUS).start()
    try:
        cl.run_bench(cluster.port(seed), ["-k", str(KEYS), "-o", "S:100", "-w", "I", "-c", "32", "--depth", "16"],
                     work / "load.json", CLIENT_CPUS, cluster=True)
        load = LoadLines(cl.bench_command(cluster.port(seed), [
            "-k", str(KEYS), "-o", "S:100", "-w", "RU,0", "-c", "16", "-g", str(WRITE_RATE), "-T", "500",
            "-d", f"{LOAD_SECONDS}s", "--json", str(work / "writes.json")], CLIENT_CPUS, cluster=True))
        time.sleep(KILL_AT)
        key, d, pid, replica = find_key(cluster, victim)
        survivors = [i for i in range(3) if i != victim]
        # The path works before the kill (the machine may be slow: a few tries).
        checks = []
        for _ in range(20):
            checks.append(write_once(cluster.port(replica), d, -1))
            if checks[-1] == "0":
                break
            time.sleep(0.1)
        assert checks[-1] == "0", f"the writes before the kill answered {checks}"
        loadavg = cl.loadavg()

        formed = {}
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                try:
                    stats = [cluster.stats(i) for i in survivors]
                    if ({s.get("cluster_size") for s in stats} == {"2"} and len({s.get("cluster_key") for s in stats}) == 1
                            and {s.get("migrate_allowed") for s in stats} == {"true"}):
                        formed["at"] = time.monotonic()
                        return
                except OSError:
                    pass
                time.sleep(0.02)

        t0 = time.monotonic()
        cluster.procs[victim].send_signal(9)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        attempts = []
        first_ok = None
        value = 0
        while time.monotonic() - t0 < 30:
            value += 1
            outcome = write_once(cluster.port(replica), d, value)
            attempts.append((round(time.monotonic() - t0, 4), outcome))
            if outcome == "0":
                first_ok = time.monotonic() - t0
                break
        cluster.procs[victim].wait(timeout=10)
        watcher.join(timeout=30)
        stop.set()
        load.proc.wait(timeout=LOAD_SECONDS + 60)
        load.thread.join(timeout=5)
        summary = json.loads((work / "writes.json").read_text())
        outcomes = {}
        for _, outcome in attempts:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        seconds = [(round(t - t0, 1), tps, to, err) for t, tps, to, err in load.samples]
        pre = [tps for t, tps, _, _ in seconds if -6 < t < 0]
        after = [s for s in seconds if s[0] > 0]
        below = [s for s in after if s[1] < 0.9 * WRITE_RATE]
        row = {
            "rep": rep, "victim": cluster.node_id(victim), "victim_is_principal": victim == 2,
            "probe_node": cluster.node_id(replica), "key": key, "partition": pid, "loadavg": loadavg,
            "cluster_of_2_s": round(formed["at"] - t0, 3) if "at" in formed else None,
            "first_write_s": round(first_ok, 3) if first_ok is not None else None,
            "attempts": len(attempts), "outcomes": outcomes, "attempt_log": attempts,
            "load_pre_kill_tps": round(cl.median(pre)) if pre else None,
            "load_timeouts": summary["total"]["timeouts"], "load_errors": summary["total"]["errors"],
            "load_seconds_below_90pct": len(below),
            "load_seconds": seconds,
        }
        print(f"rep {rep}: victim {row['victim']}{' (principal)' if row['victim_is_principal'] else ''} "
              f"cluster of 2 at {row['cluster_of_2_s']} s, first write at {row['first_write_s']} s "
              f"({row['attempts']} attempts {outcomes}); load timeouts {row['load_timeouts']} errors "
              f"{row['load_errors']}, {len(below)} s below 90%; load avg {loadavg}", flush=True)
        return row
    finally:
        cluster.stop()


def report(rows: list, out: Path) -> str:
    firsts = [r["first_write_s"] for r in rows if r["first_write_s"] is not None]
    formed = [r["cluster_of_2_s"] for r in rows if r["cluster_of_2_s"] is not None]
    lines = [
        f"# Failover under write load (bench/cluster-failover.py), commit {cl.git_commit()}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 3 nodes RF 2 on CPU {SERVER_CPUS}, heartbeat "
        f"interval 150 ms timeout 10; {KEYS} keys; bolide-bench --cluster -w RU,0 -g {WRITE_RATE} -c 16 -T 500 on "
        f"CPU {CLIENT_CPUS}; probe writes with a {PROBE_TTL_MS} ms deadline to the partition's replica.",
        "",
        "| rep | victim | survivors in a cluster of 2 | first write of the victim's key | probe attempts (outcomes) "
        "| load: timeouts, errors, seconds < 90% of offered | load avg |",
        "|---:|---|---:|---:|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rep']} | {r['victim']}{' (principal)' if r['victim_is_principal'] else ''} "
            f"| {r['cluster_of_2_s']} s | **{r['first_write_s']} s** | {r['attempts']} ({r['outcomes']}) "
            f"| {r['load_timeouts']}, {r['load_errors']}, {r['load_seconds_below_90pct']} | {r['loadavg']} |")
    lines += ["", f"Median first write after the kill: {cl.median(firsts):.3f} s (range {min(firsts):.3f}–"
                  f"{max(firsts):.3f}); median cluster of 2: {cl.median(formed):.3f} s." if firsts and formed else ""]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


def main() -> None:
    os.sched_setaffinity(0, {int(c) for c in CLIENT_CPUS.split(",")})
    out = cl.results_dir("cluster-failover")
    rows = []
    for rep in range(1, REPEATS + 1):
        rows.append(repetition(rep, out))
        (out / "runs.json").write_text(json.dumps(rows, indent=1))
    print(report(rows, out))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
