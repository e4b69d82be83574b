#!/usr/bin/env python3
"""Did the single-node hot path pay for clustering? Three variants of one
node, alternating, the same bolide-bench command for each:

  pre      BASE_BOLIDED (the last build before clustering landed) with the
           single-node config (no heartbeat block, RF 1)
  main     NEW_BOLIDED with the same config
  cluster1 NEW_BOLIDED with a heartbeat and fabric block, no seed, RF 2
           (a cluster of one: effective replication factor 1)

    bench/cluster-ab.py BASE_BOLIDED NEW_BOLIDED
    ROUNDS=5 KEYS=100000 SECONDS_PER_RUN=10 bench/cluster-ab.py A B

Each round starts a fresh node per variant (order rotated each round:
pre main cluster1, main cluster1 pre, ...), loads KEYS records of 100 bytes
(`-w I -c 32 --depth 16`), then runs each workload for SECONDS_PER_RUN at
each depth (`-c 32`). Node on SERVER_CPUS with service-threads 1,
bolide-bench on CLIENT_CPUS. Besides ops/s it records the node's CPU time
(user + system) per request, which moves far less with the machine's other
load than throughput does, and the 1-minute load average before each run.

Writes results.md and runs.json to bench/results/cluster-ab-<stamp>/ (or
RESULTS_DIR). Knobs (env): ROUNDS, KEYS, SECONDS_PER_RUN, DEPTHS,
WORKLOADS, SERVER_CPUS, CLIENT_CPUS, BASE_PORT, BOLIDE_BENCH_BIN.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clusterlib as cl  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
KEYS = int(os.environ.get("KEYS", "100000"))
SECONDS = int(os.environ.get("SECONDS_PER_RUN", "10"))
DEPTHS = [int(d) for d in os.environ.get("DEPTHS", "1 16").split()]
WORKLOADS = os.environ.get("WORKLOADS", "RU,100 RU,50").split()
SERVER_CPUS = os.environ.get("SERVER_CPUS", "1")
CLIENT_CPUS = os.environ.get("CLIENT_CPUS", "0")
BASE_PORT = int(os.environ.get("BASE_PORT", "4600"))
VARIANTS = ["pre", "main", "cluster1"]


def run_variant(variant: str, binaries: dict, out: Path, round_no: int) -> list:
    work = out / f"r{round_no}-{variant}"
    if variant == "cluster1":
        node = cl.Cluster(1, 2, work, BASE_PORT, SERVER_CPUS, binaries["main"], heartbeat=True)
    else:
        node = cl.Cluster(1, 1, work, BASE_PORT, SERVER_CPUS, binaries[variant], heartbeat=False)
    node.start()
    rows = []
    try:
        if variant == "cluster1":
            ns = node.ns_stats(0)
            assert ns.get("effective_replication_factor") == "1", ns.get("effective_replication_factor")
        cl.run_bench(BASE_PORT, ["-k", str(KEYS), "-o", "S:100", "-w", "I", "-c", "32", "--depth", "16"],
                     work / "load.json", CLIENT_CPUS, server_pids=node.pids())
        for depth in DEPTHS:
            for workload in WORKLOADS:
                name = f"d{depth}-{workload.replace(',', '_')}"
                summary = cl.run_bench(
                    BASE_PORT, ["-k", str(KEYS), "-o", "S:100", "-w", workload, "-c", "32", "--depth", str(depth),
                                "-d", f"{SECONDS}s"], work / f"{name}.json", CLIENT_CPUS, server_pids=node.pids())
                total = summary["total"]
                row = {
                    "round": round_no, "variant": variant, "depth": depth, "workload": workload,
                    "tps": round(total["tps"]), "count": total["count"],
                    "cpu_us_per_request": round(1e6 * summary["server_cpu_seconds"] / max(total["count"], 1), 2),
                    "errors": total["errors"], "timeouts": total["timeouts"], "loadavg": summary["loadavg_before"],
                    "command": summary["command"],
                }
                rows.append(row)
                print(f"round {round_no} {variant:8} depth {depth:2} {workload:6} {row['tps']:>8} ops/s  "
                      f"{row['cpu_us_per_request']:>6} µs CPU/request  load {row['loadavg']}", flush=True)
    finally:
        node.stop()
    return rows


def report(rows: list, out: Path, binaries: dict) -> str:
    lines = [
        f"# Single node before and after clustering (bench/cluster-ab.py), at commit {cl.git_commit()}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; pre = {binaries['pre']}, main = {binaries['main']}; "
        f"node on CPU {SERVER_CPUS} (service-threads 1), bolide-bench on CPU {CLIENT_CPUS}; -k {KEYS} -o S:100 -c 32, "
        f"{SECONDS} s per run; {ROUNDS} rounds, order rotated.",
        "",
        "| depth | workload | variant | ops/s median | per round | server CPU µs/request median | per round | main/pre, cluster1/pre (ops/s; CPU) |",
        "|---:|---|---|---:|---|---:|---|---|",
    ]
    for depth in DEPTHS:
        for workload in WORKLOADS:
            med = {}
            for variant in VARIANTS:
                mine = [r for r in rows if r["variant"] == variant and r["depth"] == depth and r["workload"] == workload]
                med[variant] = (cl.median([r["tps"] for r in mine]), cl.median([r["cpu_us_per_request"] for r in mine]))
                ratio = ""
                if variant != "pre" and med.get("pre"):
                    ratio = f"{med[variant][0] / med['pre'][0]:.3f}; {med[variant][1] / med['pre'][1]:.3f}"
                lines.append(
                    f"| {depth} | {workload} | {variant} | {med[variant][0]:,.0f} | "
                    f"{', '.join(format(r['tps'], ',') for r in mine)} | {med[variant][1]:.2f} | "
                    f"{', '.join(str(r['cpu_us_per_request']) for r in mine)} | {ratio} |")
    lines += ["", "Per-round ratios to pre in the same round, main then cluster1 (ops/s | CPU per request):", ""]
    for depth in DEPTHS:
        for workload in WORKLOADS:
            pairs = []
            for round_no in range(1, ROUNDS + 1):
                got = {r["variant"]: r for r in rows if r["round"] == round_no and r["depth"] == depth
                       and r["workload"] == workload}
                if len(got) == 3 and got["pre"]["tps"] and got["pre"]["cpu_us_per_request"]:
                    pre = got["pre"]
                    pairs.append(" ".join(f"{got[v]['tps'] / pre['tps']:.2f}" for v in ("main", "cluster1")) + " | "
                                 + " ".join(f"{got[v]['cpu_us_per_request'] / pre['cpu_us_per_request']:.2f}"
                                            for v in ("main", "cluster1")))
            lines.append(f"- depth {depth} {workload}: {'; '.join(pairs)}")
    loads = sorted({r["loadavg"] for r in rows}, key=float)
    lines += ["", f"Load average before the runs: {loads[0]}–{loads[-1]}" if loads else ""]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binaries = {"pre": Path(sys.argv[1]).resolve(), "main": Path(sys.argv[2]).resolve()}
    out = cl.results_dir("cluster-ab")
    rows = []
    for round_no in range(1, ROUNDS + 1):
        shift = (round_no - 1) % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            rows += run_variant(variant, binaries, out, round_no)
            (out / "runs.json").write_text(json.dumps(rows, indent=1))
    print(report(rows, out, binaries))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
