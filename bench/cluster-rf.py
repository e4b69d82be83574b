#!/usr/bin/env python3
"""Replication factor 1 against 2 on 2- and 3-node loopback clusters, with
a single node (no heartbeat block) and Redis measured in the same run by
the same bolide-bench, the same flags and the same pinning.

    bench/cluster-rf.py                       # defaults below
    ROUNDS=1 KEYS=100000 SECONDS_PER_RUN=5 bench/cluster-rf.py   # quick look

Every server process (all nodes of a cluster, or redis-server) runs on
SERVER_CPUS (default CPU 1), bolide-bench on CLIENT_CPUS (CPU 0). So a
cluster's nodes share one core: the figures are the cost of replication
and routing per request, not a scaling figure. Each configuration: fresh
servers, `-w I` over KEYS keys (the insert figure), then `RU,50` and
`RU,100` for SECONDS_PER_RUN each; `-o S:100 -c 32 --depth DEPTH`;
bolide-bench gets `--cluster` for clusters of 2 and 3 nodes. ROUNDS
rounds, the order of the configurations rotated each round. The 1-minute
load average is recorded before each run, and so is how many requests the
nodes proxied during it (`client_proxy_*` in `statistics`: 0 at RF 1).

Writes results.md and runs.json to bench/results/cluster-rf-<stamp>/ (or
RESULTS_DIR). Knobs (env): ROUNDS, KEYS, SECONDS_PER_RUN, DEPTH,
CONCURRENCY, CONFIGS (space separated of redis single 2n-rf1 2n-rf2 3n-rf1
3n-rf2), SERVER_CPUS, CLIENT_CPUS, BASE_PORT, BOLIDED_BIN,
BOLIDE_BENCH_BIN, REDIS_SERVER_BIN.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clusterlib as cl  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
KEYS = int(os.environ.get("KEYS", "500000"))
SECONDS = int(os.environ.get("SECONDS_PER_RUN", "10"))
DEPTH = int(os.environ.get("DEPTH", "1"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "32"))
CONFIGS = os.environ.get("CONFIGS", "redis single 2n-rf1 2n-rf2 3n-rf1 3n-rf2").split()
SERVER_CPUS = os.environ.get("SERVER_CPUS", "1")
CLIENT_CPUS = os.environ.get("CLIENT_CPUS", "0")
BASE_PORT = int(os.environ.get("BASE_PORT", "4500"))
WORKLOADS = ["I", "RU,50", "RU,100"]


def proxied(server) -> int:
    """Requests the nodes proxied to another node so far (0 for Redis and a
    single node): at RF 1 a client that knows the map sends every request
    to its master, so this stays 0."""
    if not isinstance(server, cl.Cluster) or not server.heartbeat:
        return 0
    total = 0
    for i in range(server.size):
        stats = server.stats(i)
        total += sum(int(stats.get(k, "0")) for k in
                     ("client_proxy_complete", "client_proxy_error", "client_proxy_timeout"))
    return total


def run_config(name: str, out: Path, round_no: int) -> list:
    work = out / f"r{round_no}-{name}"
    work.mkdir(parents=True, exist_ok=True)
    if name == "redis":
        server = cl.Redis(BASE_PORT + 100, work, SERVER_CPUS)
        port, protocol, cluster = BASE_PORT + 100, "redis", False
    elif name == "single":
        server = cl.Cluster(1, 1, work, BASE_PORT, SERVER_CPUS, heartbeat=False).start()
        port, protocol, cluster = BASE_PORT, "aerospike", False
    else:
        nodes, rf = int(name[0]), int(name.split("rf")[1])
        server = cl.Cluster(nodes, rf, work, BASE_PORT, SERVER_CPUS).start()
        port, protocol, cluster = BASE_PORT, "aerospike", True
    rows = []
    try:
        proxied_before = proxied(server)
        for workload in WORKLOADS:
            args = ["-k", str(KEYS), "-o", "S:100", "-c", str(CONCURRENCY), "--depth", str(DEPTH), "-w", workload]
            if workload != "I":
                args += ["-d", f"{SECONDS}s"]
            summary = cl.run_bench(port, args, work / f"{workload.replace(',', '_')}.json", CLIENT_CPUS, protocol,
                                   cluster, server.pids())
            total = summary["total"]
            proxied_now = proxied(server)
            row = {
                "round": round_no, "config": name, "workload": workload, "tps": round(total["tps"]),
                "p50": total["latency_microseconds"]["p50"], "p99": total["latency_microseconds"]["p99"],
                "errors": total["errors"], "timeouts": total["timeouts"],
                "server_cpu_percent": summary["server_cpu_percent"], "loadavg": summary["loadavg_before"],
                "count": total["count"], "server_cpu_seconds": summary["server_cpu_seconds"],
                "command": summary["command"], "proxied": proxied_now - proxied_before,
            }
            proxied_before = proxied_now
            rows.append(row)
            print(f"round {round_no} {name:7} {workload:7} {row['tps']:>8} ops/s  p50 {row['p50']:>6}  "
                  f"p99 {row['p99']:>6} µs  server CPU {row['server_cpu_percent']}%  proxied {row['proxied']}  "
                f"load {row['loadavg']}",
                  flush=True)
    finally:
        server.stop()
    return rows


def cpu_per_request(row: dict) -> float:
    """Server CPU µs per request (from the CPU share and the rate in runs
    recorded before the exact figures were kept)."""
    if "server_cpu_seconds" in row:
        return 1e6 * row["server_cpu_seconds"] / max(row["count"], 1)
    return row["server_cpu_percent"] * 1e4 / max(row["tps"], 1)


def report(rows: list, out: Path) -> str:
    lines = [
        f"# Cluster RF 1 vs RF 2 (bench/cluster-rf.py), commit {cl.git_commit()}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; servers on CPU {SERVER_CPUS}, "
        f"bolide-bench on CPU {CLIENT_CPUS}; -k {KEYS} -o S:100 -c {CONCURRENCY} --depth {DEPTH}, "
        f"{SECONDS} s per workload; {ROUNDS} rounds.",
        "",
        "Medians over rounds (each round's figure in brackets); ratio = Bolide / Redis of the medians.",
        "",
        "Server CPU = all of the configuration's server processes, % of one core over the run; CPU µs/request ="
        " their CPU time over the requests answered.",
        "",
        "| workload | config | ops/s median (rounds) | ratio to Redis | p50 µs | p99 µs | server CPU % "
        "| CPU µs/request (ratio to Redis) | load avg |",
        "|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for workload in WORKLOADS:
        redis_tps = cl.median([r["tps"] for r in rows if r["config"] == "redis" and r["workload"] == workload])
        redis_cpu = cl.median([cpu_per_request(r) for r in rows if r["config"] == "redis" and r["workload"] == workload])
        for config in CONFIGS:
            mine = [r for r in rows if r["config"] == config and r["workload"] == workload]
            if not mine:
                continue
            tps = cl.median([r["tps"] for r in mine])
            ratio = tps / redis_tps if redis_tps == redis_tps and redis_tps else float("nan")
            lines.append(
                f"| {workload} | {config} | {tps:,.0f} ({', '.join(format(r['tps'], ',') for r in mine)}) | {ratio:.2f} "
                f"| {cl.median([r['p50'] for r in mine]):,.0f} | {cl.median([r['p99'] for r in mine]):,.0f} "
                f"| {cl.median([r['server_cpu_percent'] for r in mine]):.0f} "
                f"| {cl.median([cpu_per_request(r) for r in mine]):.1f} "
                f"({cl.median([cpu_per_request(r) for r in mine]) / redis_cpu:.2f}) "
                f"| {', '.join(r['loadavg'] for r in mine)} |")
    errors = [r for r in rows if r["errors"] or r["timeouts"]]
    lines += ["", f"Runs with errors or timeouts: {len(errors)}"]
    lines += [f"- round {r['round']} {r['config']} {r['workload']}: {r['errors']} errors, {r['timeouts']} timeouts"
              for r in errors]
    proxies = [r for r in rows if r.get("proxied")]
    lines += ["", f"Runs in which a node proxied requests (client_proxy_*): {len(proxies)}"]
    lines += [f"- round {r['round']} {r['config']} {r['workload']}: {r['proxied']} proxied" for r in proxies]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        out = Path(sys.argv[2])
        print(report(json.loads((out / "runs.json").read_text()), out))
        return
    out = cl.results_dir("cluster-rf")
    rows = []
    for round_no in range(1, ROUNDS + 1):
        shift = (round_no - 1) % len(CONFIGS)
        for name in CONFIGS[shift:] + CONFIGS[:shift]:
            rows += run_config(name, out, round_no)
            (out / "runs.json").write_text(json.dumps(rows, indent=1))
    print(report(rows, out))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
