#!/usr/bin/env python3
"""A fourth node joins a loaded 3-node cluster (RF 2) under a fixed offered
foreground load; per second: foreground throughput, partitions left to
migrate on each node, records migrated, the new node's records.

    bench/cluster-migration.py                # defaults below
    KEYS=100000 TARGET=4000 bench/cluster-migration.py   # quick look

Nodes on SERVER_CPUS (service-threads 1, memory namespace, the default
migrate-threads 1 and migrate-sleep 1), bolide-bench on CLIENT_CPUS. Steps:
three nodes form; KEYS records of 100 bytes are loaded (`-w I --cluster
-c 32 --depth 16`); once the cluster is stable, the foreground starts
(`bolide-bench --cluster -w RU,50 -g TARGET -c 32`, seeded at node 1) and
JOIN_AT seconds later the fourth node starts. The run goes on until every
node reports migrate_partitions_remaining = 0 in a cluster of 4, then
TAIL seconds more. A sampler reads `statistics` and `namespace/test` of
every node once a second.

Derived: the foreground's steady state (median second before the join),
its worst second while partitions moved (as % of the steady state and of
the offered rate), the migration rate (records sent by all nodes per
second), the time from the join until no partition is left to move on any
node, and the time until the new node holds 95% of its expected share
(2 × KEYS / 4 records, masters and replicas).

Writes results.md, samples.json and migration.png to
bench/results/cluster-migration-<stamp>/ (or RESULTS_DIR) and the plot to
PLOT (default docs/cluster-migration.png; empty for none). Knobs (env):
KEYS, TARGET, JOIN_AT, TAIL, MAX_SECONDS, SERVER_CPUS, CLIENT_CPUS,
BASE_PORT, BOLIDED_BIN, BOLIDE_BENCH_BIN. `--plot DIR` redraws the plot of
a finished run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clusterlib as cl  # noqa: E402

KEYS = int(os.environ.get("KEYS", "1000000"))
TARGET = int(os.environ.get("TARGET", "8000"))
JOIN_AT = float(os.environ.get("JOIN_AT", "20"))
TAIL = float(os.environ.get("TAIL", "30"))
MAX_SECONDS = float(os.environ.get("MAX_SECONDS", "900"))
SERVER_CPUS = os.environ.get("SERVER_CPUS", "1")
CLIENT_CPUS = os.environ.get("CLIENT_CPUS", "0")
BASE_PORT = int(os.environ.get("BASE_PORT", "4800"))
PLOT = os.environ.get("PLOT", str(cl.ROOT / "docs" / "cluster-migration.png"))
STAT_NAMES = ["cluster_size", "migrate_partitions_remaining", "migrate_records_transmitted",
              "migrate_record_receives", "migrate_partitions_sent", "migrate_partitions_received"]
NS_NAMES = ["master_objects", "prole_objects", "migrate_tx_partitions_remaining", "migrate_rx_partitions_remaining"]


class Foreground:
    """bolide-bench's per-second lines with the time each arrived."""

    LINE = re.compile(r"total\(tps=(\d+)\)")

    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.samples = []  # (time, total tps, timeouts, errors)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            m = self.LINE.search(line)
            if m:
                timeouts = sum(int(x) for x in re.findall(r"timeouts=(\d+)", line))
                errors = sum(int(x) for x in re.findall(r"errors=(\d+)", line))
                self.samples.append((time.monotonic(), int(m.group(1)), timeouts, errors))


def sample(cluster: cl.Cluster, nodes: list) -> dict:
    out = {}
    for i in nodes:
        try:
            answers = cl.info(cluster.port(i), ["statistics", "namespace/test"], timeout=2.0)
        except OSError:
            continue
        stats, ns = cl.kv(answers["statistics"]), cl.kv(answers["namespace/test"])
        row = {name: stats.get(name) for name in STAT_NAMES}
        row.update({name: ns.get(name) for name in NS_NAMES})
        out[cluster.node_id(i)] = {k: (int(v) if v is not None and v.lstrip("-").isdigit() else v)
                                   for k, v in row.items()}
    return out


def run(out: Path) -> dict:
    cluster = cl.Cluster(4, 2, out, BASE_PORT, SERVER_CPUS)
    for i in range(3):
        cluster.start_node(i)
    try:
        cluster.wait_formed([0, 1, 2])
        load = cl.run_bench(cluster.port(0), ["-k", str(KEYS), "-o", "S:100", "-w", "I", "-c", "32", "--depth", "16"],
                            out / "load.json", CLIENT_CPUS, cluster=True)
        print(f"loaded {KEYS} records: {round(load['total']['tps'])} ops/s", flush=True)
        cluster.wait_stable([0, 1, 2])
        fg_cmd = cl.bench_command(cluster.port(0), [
            "-k", str(KEYS), "-o", "S:100", "-w", "RU,50", "-c", "32", "-g", str(TARGET),
            "-d", f"{int(MAX_SECONDS) + 60}s", "--json", str(out / "foreground.json")], CLIENT_CPUS, cluster=True)
        loadavg_start = cl.loadavg()
        fg = Foreground(fg_cmd)
        t0 = time.monotonic()
        samples = []
        joined = None
        done = None
        nodes = [0, 1, 2]
        while time.monotonic() - t0 < MAX_SECONDS:
            tick = t0 + len(samples) + 1
            time.sleep(max(0.0, tick - time.monotonic()))
            if joined is None and time.monotonic() - t0 >= JOIN_AT:
                joined = time.monotonic()
                cluster.start_node(3)
                nodes = [0, 1, 2, 3]
            now = time.monotonic()
            snap = sample(cluster, nodes)
            samples.append({"t": round(now - t0, 3), "loadavg": cl.loadavg(), "nodes": snap})
            if joined is not None and done is None and now - joined > 3 and len(snap) == 4 and all(
                    n["cluster_size"] == 4 and n["migrate_partitions_remaining"] == 0 for n in snap.values()):
                done = now
                print(f"migrations done {done - joined:.1f} s after the join", flush=True)
            if done is not None and now - done >= TAIL:
                break
            if fg.proc.poll() is not None:
                raise RuntimeError("the foreground load stopped early")
        fg.proc.send_signal(signal.SIGINT)
        fg.proc.wait(timeout=60)
        fg.thread.join(timeout=5)
        result = {
            "commit": cl.git_commit(), "keys": KEYS, "target": TARGET, "loadavg_start": loadavg_start,
            "load_command": load["command"], "foreground_command": " ".join(fg_cmd),
            "join_s": round(joined - t0, 3) if joined else None, "done_s": round(done - t0, 3) if done else None,
            "foreground": [(round(t - t0, 3), tps, to, err) for t, tps, to, err in fg.samples],
            "samples": samples, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        (out / "samples.json").write_text(json.dumps(result, indent=1))
        return result
    finally:
        cluster.stop()


def derive(result: dict) -> dict:
    join, done = result["join_s"], result["done_s"]
    fg = result["foreground"]
    steady_seconds = [tps for t, tps, _, _ in fg if 5 <= t < join]
    steady = cl.median(steady_seconds)
    end = done if done is not None else fg[-1][0]
    during = [(t, tps) for t, tps, _, _ in fg if join < t <= end + 1]
    worst = min(during, key=lambda x: x[1]) if during else (None, float("nan"))
    samples = result["samples"]
    sent = [(s["t"], sum(n.get("migrate_records_transmitted") or 0 for n in s["nodes"].values())) for s in samples]
    base = [v for t, v in sent if t <= join]
    base = base[-1] if base else 0
    total_sent = sent[-1][1] - base
    rates = [(sent[i][0], (sent[i][1] - sent[i - 1][1]) / max(sent[i][0] - sent[i - 1][0], 1e-6))
             for i in range(1, len(sent))]
    moving = [r for t, r in rates if join < t <= end + 1 and r > 0]
    expected = 2 * result["keys"] / 4
    share_at = None
    new_objects = []
    for s in samples:
        n4 = s["nodes"].get("C004")
        if n4:
            objects = (n4.get("master_objects") or 0) + (n4.get("prole_objects") or 0)
            new_objects.append((s["t"], objects))
            if share_at is None and objects >= 0.95 * expected:
                share_at = s["t"]
    return {
        "steady": steady, "worst_t": worst[0], "worst": worst[1],
        "worst_pct_steady": 100 * worst[1] / steady if steady else float("nan"),
        "worst_pct_offered": 100 * worst[1] / result["target"],
        "below_90_steady": sum(1 for _, tps in during if tps < 0.9 * steady),
        "during_seconds": len(during),
        "total_sent": total_sent,
        "mean_rate": total_sent / (done - join) if done else float("nan"),
        "peak_rate": max(moving) if moving else 0,
        "to_done": done - join if done else None,
        "to_share": share_at - join if share_at is not None else None,
        "expected": expected,
        "new_objects_end": new_objects[-1][1] if new_objects else None,
        "timeouts": sum(to for _, _, to, _ in fg), "errors": sum(err for _, _, _, err in fg),
        "loadavg": sorted({s["loadavg"] for s in samples}, key=float),
    }


def report(result: dict, d: dict, out: Path) -> str:
    fmt = lambda v, spec=",.0f": format(v, spec) if isinstance(v, (int, float)) else str(v)  # noqa: E731
    lines = [
        f"# A fourth node joins (bench/cluster-migration.py), commit {result['commit']}",
        "",
        f"{result['date']}; {result['keys']:,} records (RF 2) on 3 nodes, foreground `-w RU,50 -g {result['target']}` "
        f"(`{result['foreground_command']}`); nodes on CPU {SERVER_CPUS}, bolide-bench on CPU {CLIENT_CPUS}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| foreground steady state (median second before the join) | {fmt(d['steady'])} ops/s (offered {result['target']:,}) |",
        f"| worst foreground second while partitions moved | {fmt(d['worst'])} ops/s at {d['worst_t']} s = "
        f"{d['worst_pct_steady']:.0f}% of steady, {d['worst_pct_offered']:.0f}% of offered |",
        f"| seconds below 90% of steady while partitions moved | {d['below_90_steady']} of {d['during_seconds']} |",
        f"| foreground timeouts / errors over the run | {d['timeouts']} / {d['errors']} |",
        f"| join → no partition left to move on any node | {fmt(d['to_done'], '.1f')} s |",
        f"| join → the new node holds 95% of its share ({fmt(d['expected'])} records) | {fmt(d['to_share'], '.1f')} s |",
        f"| new node's records at the end (masters + replicas) | {fmt(d['new_objects_end'])} |",
        f"| records migrated (sent, all nodes) | {fmt(d['total_sent'])} |",
        f"| migration rate: mean over join → done; peak second | {fmt(d['mean_rate'])}; {fmt(d['peak_rate'])} records/s |",
        f"| load average (1 min) during the run | {d['loadavg'][0]}–{d['loadavg'][-1]} |",
    ]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


def plot(out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = json.loads((out / "samples.json").read_text())
    join = result["join_s"]
    fg = result["foreground"]
    samples = result["samples"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax = axes[0]
    ax.plot([t - join for t, *_ in fg], [tps for _, tps, *_ in fg], marker=".", label="foreground ops/s")
    ax.axhline(result["target"], color="grey", linestyle="--", linewidth=1, label=f"offered {result['target']:,}")
    ax.axhline(0.9 * result["target"], color="red", linestyle=":", linewidth=1, label="90% of offered")
    ax.set_ylabel("ops/s")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(f"4th node joins a 3-node RF 2 cluster holding {result['keys']:,} records (commit {result['commit']})")
    ax = axes[1]
    names = sorted({name for s in samples for name in s["nodes"]})
    for name in names:
        points = [(s["t"] - join, s["nodes"][name]["migrate_partitions_remaining"]) for s in samples
                  if name in s["nodes"] and s["nodes"][name].get("migrate_partitions_remaining") is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name)
    ax.set_ylabel("migrate_partitions_remaining")
    ax.legend(loc="upper right", fontsize=8)
    ax = axes[2]
    sent = [(s["t"] - join, sum(n.get("migrate_records_transmitted") or 0 for n in s["nodes"].values()))
            for s in samples]
    rate = [(sent[i][0], (sent[i][1] - sent[i - 1][1]) / max(sent[i][0] - sent[i - 1][0], 1e-6))
            for i in range(1, len(sent))]
    ax.plot([r[0] for r in rate], [r[1] for r in rate], color="tab:purple", label="records migrated/s (all nodes)")
    ax.set_ylabel("records/s")
    ax.set_xlabel("seconds since the 4th node started")
    ax2 = ax.twinx()
    objects = [(s["t"] - join, (s["nodes"]["C004"].get("master_objects") or 0)
                + (s["nodes"]["C004"].get("prole_objects") or 0)) for s in samples if "C004" in s["nodes"]]
    ax2.plot([o[0] for o in objects], [o[1] for o in objects], color="tab:green", label="new node's records")
    ax2.set_ylabel("records on the new node")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "migration.png", dpi=100)
    if PLOT:
        fig.savefig(PLOT, dpi=100)


def plot_with_venv(out: Path) -> None:
    try:
        import matplotlib  # noqa: F401
        plot(out)
        return
    except ImportError:
        pass
    venv = cl.ROOT / ".cache" / "bench-venv"
    python = venv / "bin" / "python"
    if not python.exists() or subprocess.run([str(python), "-c", "import matplotlib"], capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "matplotlib"], check=True)
    subprocess.run([str(python), __file__, "--plot", str(out)], check=True)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--plot":
        plot(Path(sys.argv[2]))
        return
    out = cl.results_dir("cluster-migration")
    result = run(out)
    d = derive(result)
    print(report(result, d, out))
    if PLOT is not None:
        plot_with_venv(out)
    print(f"results in {out}")


if __name__ == "__main__":
    main()
