#!/usr/bin/env python3
"""Strong consistency against AP on a 3-node RF 2 loopback cluster, same
bolide-bench, same flags, same pinning, same run:

- writes: `-w I` over KEYS keys, AP against SC;
- reads: `RU,100` for SECONDS_PER_RUN, AP, SC session and SC linearize
  (`--read-mode-sc linearize`: the master confirms every read with the
  replica first);
- recovery: kill -9 two of the three roster nodes (the survivor is a
  minority: every partition unavailable), restart them, and time until
  every node reports `unavailable_partitions=0`;
- healed splits (as root, in a network namespace of its own with the
  nodes on 127.0.0.2-4 and nftables rules between them, SPLIT_ROUNDS
  times each): one node cut off from the other two, then every node cut
  off from every other (no side may serve anything); each healed after
  SPLIT_HOLD seconds, and timed from the heal until every node is in one
  cluster again and reports `unavailable_partitions=0` (no revive).

    bench/sc.py                                  # defaults below
    ROUNDS=1 KEYS=100000 SECONDS_PER_RUN=5 SPLIT_ROUNDS=1 bench/sc.py   # quick look
    ROUNDS=0 bench/sc.py                         # the healed splits only

Every server process runs on SERVER_CPUS (default CPU 1), bolide-bench on
CLIENT_CPUS (CPU 0). Writes results.md and runs.json to
bench/results/sc-<stamp>/ (or RESULTS_DIR). Knobs (env): ROUNDS, KEYS,
SECONDS_PER_RUN, DEPTH, CONCURRENCY, SPLIT_ROUNDS, SPLIT_HOLD, SPLIT_KEYS,
SERVER_CPUS, CLIENT_CPUS, BASE_PORT, BOLIDED_BIN, BOLIDE_BENCH_BIN.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clusterlib as cl  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
KEYS = int(os.environ.get("KEYS", "500000"))
SECONDS = int(os.environ.get("SECONDS_PER_RUN", "10"))
DEPTH = int(os.environ.get("DEPTH", "1"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "32"))
SERVER_CPUS = os.environ.get("SERVER_CPUS", "1")
CLIENT_CPUS = os.environ.get("CLIENT_CPUS", "0")
BASE_PORT = int(os.environ.get("BASE_PORT", "4700"))
SPLIT_ROUNDS = int(os.environ.get("SPLIT_ROUNDS", "3"))
SPLIT_HOLD = float(os.environ.get("SPLIT_HOLD", "5"))
SPLIT_KEYS = int(os.environ.get("SPLIT_KEYS", "100000"))
SPLIT_HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
NETNS_ENV = "BOLIDE_SC_BENCH_NETNS"


class ScCluster(cl.Cluster):
    """A cluster whose namespace is strong-consistency, with its roster set."""

    def config(self, i: int) -> str:
        text = super().config(i)
        return text.replace(f"    replication-factor {self.rf}\n",
                            f"    replication-factor {self.rf}\n    strong-consistency true\n"
                            f"    strong-consistency-allow-expunge true\n")

    def unavailable(self, i: int) -> int:
        return int(self.ns_stats(i).get("unavailable_partitions", "-1"))

    def wait_available(self, nodes, timeout: float = 120.0) -> float:
        started = time.monotonic()
        while time.monotonic() < started + timeout:
            try:
                if all(self.unavailable(i) == 0 for i in nodes):
                    return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"partitions still unavailable after {timeout} s")

    def set_roster(self) -> None:
        nodes = ",".join(self.node_id(i) for i in range(self.size))
        answer = self.info(0, [f"roster-set:namespace=test;nodes={nodes}"])
        assert list(answer.values()) == ["ok"], answer
        time.sleep(1)
        for i in range(self.size):
            self.info(i, ["recluster:"])
        self.wait_available(range(self.size))


def bench(server, name, workload, extra, work, round_no):
    args = ["-k", str(KEYS), "-o", "S:100", "-c", str(CONCURRENCY), "--depth", str(DEPTH), "-w", workload]
    if workload != "I":
        args += ["-d", f"{SECONDS}s"]
    summary = cl.run_bench(BASE_PORT, args + extra, work / f"{name}-{workload.replace(',', '_')}.json",
                           CLIENT_CPUS, "aerospike", True, server.pids())
    total = summary["total"]
    row = {"round": round_no, "config": name, "workload": workload, "tps": round(total["tps"]),
           "p50": total["latency_microseconds"]["p50"], "p99": total["latency_microseconds"]["p99"],
           "errors": total["errors"], "timeouts": total["timeouts"], "count": total["count"],
           "server_cpu_seconds": summary["server_cpu_seconds"], "loadavg": summary["loadavg_before"],
           "command": summary["command"]}
    print(f"round {round_no} {name:14} {workload:7} {row['tps']:>8} ops/s  p50 {row['p50']:>6}  "
          f"p99 {row['p99']:>6} µs  load {row['loadavg']}", flush=True)
    return row


def run_round(out: Path, round_no: int) -> list:
    rows = []
    work = out / f"r{round_no}-ap"
    work.mkdir(parents=True, exist_ok=True)
    server = cl.Cluster(3, 2, work, BASE_PORT, SERVER_CPUS).start()
    try:
        server.wait_stable(list(range(3)))
        rows.append(bench(server, "ap", "I", [], work, round_no))
        rows.append(bench(server, "ap", "RU,100", [], work, round_no))
    finally:
        server.stop()
    work = out / f"r{round_no}-sc"
    work.mkdir(parents=True, exist_ok=True)
    server = ScCluster(3, 2, work, BASE_PORT, SERVER_CPUS).start()
    try:
        server.set_roster()
        server.wait_stable(list(range(3)))
        rows.append(bench(server, "sc", "I", [], work, round_no))
        rows.append(bench(server, "sc-session", "RU,100", ["--read-mode-sc", "session"], work, round_no))
        rows.append(bench(server, "sc-linearize", "RU,100", ["--read-mode-sc", "linearize"], work, round_no))
        server.kill(1)
        server.kill(2)
        server.wait_formed([0])
        assert server.unavailable(0) == 4096, server.unavailable(0)
        server.start_node(1)
        server.start_node(2)
        seconds = server.wait_available(range(3))
        rows.append({"round": round_no, "config": "sc", "workload": "restart-to-available",
                     "seconds": round(seconds, 3)})
        print(f"round {round_no} sc restart of 2 of 3 nodes to every partition available: {seconds:.2f} s",
              flush=True)
    finally:
        server.stop()
    return rows


def nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)


def cut(pairs) -> None:
    """Drops every packet between the two nodes of each pair."""
    rules = "\n".join(f"        ip saddr {x} ip daddr {y} drop" for a, b in pairs for x, y in ((a, b), (b, a)))
    nft(f"table inet split {{\n    chain input {{\n        type filter hook input priority 0; policy accept;\n"
        f"{rules}\n    }}\n}}\n")


def heal() -> None:
    nft("delete table inet split")


def wait_until(predicate, what: str, timeout: float = 120.0) -> float:
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"{what}: not within {timeout} s")


def split_round(out: Path, round_no: int) -> list:
    """Inside the network namespace: a 3-node SC cluster on SPLIT_HOSTS,
    split twice, each split healed and timed."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = out / f"split-r{round_no}"
    work.mkdir(parents=True, exist_ok=True)
    server = ScCluster(3, 2, work, BASE_PORT, SERVER_CPUS, hosts=SPLIT_HOSTS)
    rows = []
    try:
        server.start()
        server.set_roster()
        cl.run_bench(BASE_PORT, ["-k", str(SPLIT_KEYS), "-o", "S:100", "-c", "16", "-w", "I"],
                     work / "load.json", CLIENT_CPUS, "aerospike", True, server.pids(), SPLIT_HOSTS[0])
        server.wait_stable(list(range(3)))
        scenarios = (
            ("minority cut off", [(SPLIT_HOSTS[0], SPLIT_HOSTS[1]), (SPLIT_HOSTS[0], SPLIT_HOSTS[2])]),
            ("every node alone", [(SPLIT_HOSTS[0], SPLIT_HOSTS[1]), (SPLIT_HOSTS[0], SPLIT_HOSTS[2]),
                                  (SPLIT_HOSTS[1], SPLIT_HOSTS[2])]),
        )
        for name, pairs in scenarios:
            cut(pairs)
            if name == "minority cut off":
                server.wait_formed([1, 2])
                wait_until(lambda: server.unavailable(0) == 4096, "the minority unavailable")
                wait_until(lambda: server.unavailable(1) == 0 and server.unavailable(2) == 0,
                           "the majority available")
            else:
                wait_until(lambda: all(server.unavailable(i) == 4096 for i in range(3)),
                           "every node unavailable")
            time.sleep(SPLIT_HOLD)
            heal()
            healed = time.monotonic()
            server.wait_formed([0, 1, 2], timeout=120)
            wait_until(lambda: all(server.unavailable(i) == 0 for i in range(3)), "every partition available")
            seconds = time.monotonic() - healed
            dead = [server.ns_stats(i)["dead_partitions"] for i in range(3)]
            assert dead == ["0", "0", "0"], dead
            rows.append({"round": round_no, "config": "sc", "workload": f"healed split: {name}",
                         "seconds": round(seconds, 3)})
            print(f"round {round_no} healed split ({name}) to every partition available: {seconds:.2f} s",
                  flush=True)
            server.wait_stable(list(range(3)))
    finally:
        subprocess.run(["nft", "delete", "table", "inet", "split"], capture_output=True)
        server.stop()
    return rows


def split_rounds(out: Path) -> list:
    """Runs the split rounds in a fresh network namespace (as root)."""
    if os.geteuid() != 0:
        print("healed splits skipped: they create a network namespace and need root", flush=True)
        return []
    name = f"bolide-sc-bench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, sys.executable, str(Path(__file__).resolve())],
                       env={**os.environ, NETNS_ENV: "1", "RESULTS_DIR": str(out)}, check=True)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    return json.loads((out / "splits.json").read_text())


def report(rows: list, out: Path) -> str:
    lines = [f"# Strong consistency against AP (bench/sc.py), commit {cl.git_commit()}", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 3 nodes RF 2 on CPU {SERVER_CPUS}, "
             f"bolide-bench --cluster on CPU {CLIENT_CPUS}; -k {KEYS} -o S:100 -c {CONCURRENCY} --depth {DEPTH}, "
             f"{SECONDS} s per read run; {ROUNDS} rounds; medians (rounds in brackets).", "",
             "| config | workload | ops/s | p50 µs | p99 µs | server CPU µs/request | errors+timeouts |",
             "|---|---|---|---:|---:|---:|---:|"]
    for config, workload in (("ap", "I"), ("sc", "I"), ("ap", "RU,100"), ("sc-session", "RU,100"),
                             ("sc-linearize", "RU,100")):
        mine = [r for r in rows if r["config"] == config and r["workload"] == workload]
        if not mine:
            continue
        lines.append(
            f"| {config} | {workload} | {cl.median([r['tps'] for r in mine]):,.0f} "
            f"({', '.join(format(r['tps'], ',') for r in mine)}) | {cl.median([r['p50'] for r in mine]):,.0f} "
            f"| {cl.median([r['p99'] for r in mine]):,.0f} "
            f"| {cl.median([1e6 * r['server_cpu_seconds'] / max(r['count'], 1) for r in mine]):.1f} "
            f"| {sum(r['errors'] + r['timeouts'] for r in mine)} |")
    restarts = [r["seconds"] for r in rows if r["workload"] == "restart-to-available"]
    if restarts:
        lines += ["", f"Restart of 2 of 3 roster nodes to every partition available: median "
                      f"{cl.median(restarts):.2f} s ({', '.join(f'{s:.2f}' for s in restarts)})"]
    for name in ("minority cut off", "every node alone"):
        healed = [r["seconds"] for r in rows if r["workload"] == f"healed split: {name}"]
        if healed:
            lines += ["", f"Healed split ({name}, held {SPLIT_HOLD:g} s, {SPLIT_KEYS} records) to every "
                          f"partition available on every node: median {cl.median(healed):.2f} s "
                          f"({', '.join(f'{s:.2f}' for s in healed)})"]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


def main() -> None:
    out = Path(os.environ.get("RESULTS_DIR") or
               Path(__file__).resolve().parent / "results" / f"sc-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get(NETNS_ENV):
        splits = []
        for round_no in range(1, SPLIT_ROUNDS + 1):
            splits += split_round(out, round_no)
        (out / "splits.json").write_text(json.dumps(splits, indent=1))
        return
    rows = []
    for round_no in range(1, ROUNDS + 1):
        rows += run_round(out, round_no)
        (out / "runs.json").write_text(json.dumps(rows, indent=1))
    if SPLIT_ROUNDS > 0:
        rows += split_rounds(out)
        (out / "runs.json").write_text(json.dumps(rows, indent=1))
    print(report(rows, out))


if __name__ == "__main__":
    main()
