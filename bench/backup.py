"""Backup and restore throughput: `bolide backup` and `bolide restore` of
N records (default 1,000,000) on one node and on a 3-node RF 2 cluster, and
what a backup costs the foreground (bolide-bench's read/update throughput
alone, then while a backup runs, in the same run).

    cargo build --release -p bolide-server -p bolide-bench -p bolide-cli
    python3 bench/backup.py                       # 1M records, both topologies
    python3 bench/backup.py --records 50000 --quick   # a quick sanity run

Per topology it prints and writes to bench/results/backup-<commit>.json:
backup records/s and MB/s (of text, and of files), restore records/s and
MB/s into a fresh node or cluster of the same shape, the same with
`-z zstd`, and the foreground's ops/s alone and during a backup.
Standard library only; the nodes run on 127.0.0.1 from BASE_PORT (4700).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import clusterlib as cl

BOLIDE = Path(os.environ.get("BOLIDE_CLI_BIN", cl.ROOT / "target/release/bolide"))


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.asb"))


def run_tool(port: int, args: list) -> tuple:
    started = time.monotonic()
    done = subprocess.run([str(BOLIDE), "-p", str(port), *args], capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"bolide {' '.join(args)}: {done.stderr.strip()}")
    return seconds, done.stderr.strip()


def text_bytes(summary: str) -> float:
    m = re.search(r"\(([\d.]+) MB of text\)", summary)
    return float(m.group(1)) * 1e6 if m else float("nan")


def topology(name: str, size: int, rf: int, args, workdir: Path, base_port: int) -> dict:
    heartbeat = size > 1
    result = {"topology": name, "nodes": size, "replication_factor": rf, "records": args.records}
    source = cl.Cluster(size, rf, workdir / f"{name}-a", base_port=base_port, cpus=args.server_cpus,
                        heartbeat=heartbeat, service_threads=2, data_size=args.data_size, name=f"{name}a")
    target = cl.Cluster(size, rf, workdir / f"{name}-b", base_port=base_port + 100, cpus=args.server_cpus,
                        heartbeat=heartbeat, service_threads=2, data_size=args.data_size, name=f"{name}b")
    try:
        source.start()
        if heartbeat:
            source.wait_stable(list(range(size)))
        port = source.port(0)
        # Records of one integer and one 100-byte string bin.
        cl.run_bench(port, ["-k", str(args.records), "-w", "I", "-o", "I,S:100", "-c", "32", "--depth", "8",
                            "-z", "2"], workdir / f"{name}-load.json", cpus=args.bench_cpus, cluster=heartbeat)
        for label, extra in [("plain", []), ("zstd", ["-z", "zstd"])]:
            out = workdir / f"{name}-{label}"
            seconds, summary = run_tool(port, ["backup", "-n", "test", "-d", str(out), "-w", str(args.parallel),
                                               *extra])
            result[f"backup_{label}"] = {
                "seconds": round(seconds, 2),
                "records_per_second": round(args.records / seconds),
                "text_mb_per_second": round(text_bytes(summary) / 1e6 / seconds, 1),
                "file_mb": round(directory_bytes(out) / 1e6, 1),
                "file_mb_per_second": round(directory_bytes(out) / 1e6 / seconds, 1),
                "summary": summary,
            }
            target.start()
            if heartbeat:
                target.wait_stable(list(range(size)))
            seconds, summary = run_tool(target.port(0), ["restore", "-d", str(out), "-t", str(args.restore_parallel),
                                                         *extra])
            result[f"restore_{label}"] = {
                "seconds": round(seconds, 2),
                "records_per_second": round(args.records / seconds),
                "file_mb_per_second": round(directory_bytes(out) / 1e6 / seconds, 1),
                "summary": summary,
            }
            target.stop()
            shutil.rmtree(target.workdir, ignore_errors=True)
            if label == "plain":
                shutil.rmtree(out, ignore_errors=True)
            if args.quick:
                break
        # The foreground: read/update alone, then while a backup runs.
        bench_args = ["-k", str(args.records), "-w", "RU,80", "-o", "I,S:100", "-c", "32", "-d",
                      f"{args.foreground_seconds}s", "-z", "2"]
        alone = cl.run_bench(port, bench_args, workdir / f"{name}-alone.json", cpus=args.bench_cpus,
                             cluster=heartbeat, server_pids=source.pids())
        out = workdir / f"{name}-during"
        backup = {}

        def backup_loop():
            # Back up for the whole foreground run (again if it ends first).
            deadline = time.monotonic() + args.foreground_seconds
            rounds = 0
            while time.monotonic() < deadline:
                shutil.rmtree(out, ignore_errors=True)
                seconds, _ = run_tool(port, ["backup", "-n", "test", "-d", str(out), "-w", str(args.parallel)])
                rounds += 1
                backup["seconds"] = round(seconds, 2)
            backup["rounds"] = rounds

        thread = threading.Thread(target=backup_loop)
        thread.start()
        during = cl.run_bench(port, bench_args, workdir / f"{name}-during.json", cpus=args.bench_cpus,
                              cluster=heartbeat, server_pids=source.pids())
        thread.join()
        result["foreground"] = {
            "alone_tps": round(alone["total"]["tps"]),
            "during_backup_tps": round(during["total"]["tps"]),
            "ratio": round(during["total"]["tps"] / max(alone["total"]["tps"], 1), 3),
            "backup_during": backup,
            "command": alone["command"],
        }
        shutil.rmtree(out, ignore_errors=True)
    finally:
        source.stop()
        target.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--parallel", type=int, default=4, help="backup --parallel")
    parser.add_argument("--restore-parallel", type=int, default=16, help="restore --parallel")
    parser.add_argument("--foreground-seconds", type=int, default=20)
    parser.add_argument("--server-cpus", default="1")
    parser.add_argument("--bench-cpus", default="0")
    parser.add_argument("--data-size", default="4G")
    parser.add_argument("--only", choices=["single", "cluster"])
    parser.add_argument("--quick", action="store_true", help="plain files only (a sanity run)")
    args = parser.parse_args()
    base_port = int(os.environ.get("BASE_PORT", "4700"))
    results = {"commit": cl.git_commit(), "date": time.strftime("%Y-%m-%d"), "loadavg": cl.loadavg(),
               "topologies": []}
    with tempfile.TemporaryDirectory(prefix="bolide-backup-bench-") as tmp:
        workdir = Path(tmp)
        for name, size, rf in [("single", 1, 1), ("cluster", 3, 2)]:
            if args.only and args.only != name:
                continue
            row = topology(name, size, rf, args, workdir, base_port)
            results["topologies"].append(row)
            for key in [k for k in row if k.startswith(("backup_", "restore_"))]:
                r = row[key]
                print(f"{name:7} {key:15} {r['records_per_second']:>9} records/s  "
                      f"{r.get('text_mb_per_second', r['file_mb_per_second']):>7} MB/s  {r['seconds']} s")
            fg = row["foreground"]
            print(f"{name:7} foreground      {fg['alone_tps']:>9} ops/s alone, {fg['during_backup_tps']} during "
                  f"a backup ({fg['ratio']:.0%})")
    out = cl.ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"backup-{results['commit']}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {path}")


if __name__ == "__main__":
    main()
