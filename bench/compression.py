#!/usr/bin/env python3
"""Storage compression benchmark: for JSON-like documents, repetitive
strings and random bytes, the compression ratio, device bytes, write and
read throughput and the server's CPU time per request of each method
against no compression, in one run (run through bench/compression.sh).

For every (data kind, method) pair a fresh bolided with one device file
takes RECORDS writes, then RECORDS reads, from PROCESSES client processes
(the official Python client); the server's user+system CPU ticks
(/proc/PID/stat) are read around each phase. CPU per request moves far
less with the machine's load than throughput does; the client processes
are the same for every method, so the throughput columns compare too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aerospike

RECORDS = int(os.environ.get("RECORDS", "100000"))
PROCESSES = int(os.environ.get("PROCESSES", "4"))
SIZE = int(os.environ.get("SIZE", "1000"))
METHODS = os.environ.get("METHODS", "none,lz4,snappy,zstd").split(",")
KINDS = os.environ.get("KINDS", "json,repetitive,random").split(",")
SERVER_CPU = os.environ.get("SERVER_CPU", "1")
CLIENT_CPUS = os.environ.get("CLIENT_CPUS", "0")
TICKS = os.sysconf("SC_CLK_TCK")


def value(kind: str, i: int) -> dict:
    rng = random.Random(i)
    if kind == "json":
        doc = {
            "id": i,
            "name": f"customer-{i:08d}",
            "email": f"customer{i}@example.com",
            "active": i % 3 != 0,
            "tags": ["retail", "newsletter", f"tier-{i % 4}"],
            "events": [],
        }
        while len(json.dumps(doc)) < SIZE:
            doc["events"].append({"type": rng.choice(["view", "cart", "buy"]),
                                  "page": f"/item/{rng.randrange(10000)}",
                                  "ms": rng.randrange(10**9)})
        return {"doc": json.dumps(doc)[:SIZE]}
    if kind == "repetitive":
        text = f"status=OK;node=n{i % 8};region=eu-west;" * (SIZE // 30 + 1)
        return {"s": text[:SIZE]}
    return {"b": bytearray(rng.getrandbits(8) for _ in range(SIZE))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def info(port: int, name: str) -> dict:
    client = aerospike.client({"hosts": [("127.0.0.1", port)]}).connect()
    try:
        answer = client.info_random_node(f"namespace/{name}")
    finally:
        client.close()
    text = answer.split("\t", 1)[-1].strip()
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def worker(args):
    port, kind, phase, start, end = args
    client = aerospike.client({"hosts": [("127.0.0.1", port)],
                               "policies": {"total_timeout": 5000}}).connect()
    errors = 0
    for i in range(start, end):
        key = ("test", "bench", i)
        try:
            if phase == "write":
                client.put(key, value(kind, i))
            else:
                client.get(key)
        except aerospike.exception.AerospikeError:
            errors += 1
    client.close()
    return errors


def phase(pool, port: int, pid: int, kind: str, name: str) -> dict:
    share = RECORDS // PROCESSES
    jobs = [(port, kind, name, p * share, RECORDS if p == PROCESSES - 1 else (p + 1) * share)
            for p in range(PROCESSES)]
    before, started = cpu_ticks(pid), time.monotonic()
    errors = sum(pool.map(worker, jobs))
    seconds = time.monotonic() - started
    ticks = cpu_ticks(pid) - before
    return {"ops_per_s": RECORDS / seconds, "cpu_us_per_op": ticks / TICKS / RECORDS * 1e6,
            "errors": errors}


def run_one(bolided: Path, work: Path, kind: str, method: str, pool) -> dict:
    port = free_port()
    directory = work / f"{kind}-{method}"
    directory.mkdir(parents=True)
    file_size = max(64 << 20, RECORDS * (SIZE + 200) * 3)
    (directory / "bolide.conf").write_text(f"""
service {{
    service-threads 1
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
}}
namespace test {{
    storage-engine device {{
        file {directory}/test.dat
        filesize {file_size}
        compression {method}
    }}
}}
""")
    log = open(directory / "server.log", "w")
    server = subprocess.Popen(["taskset", "-c", SERVER_CPU, str(bolided), "--config",
                               str(directory / "bolide.conf")], stdout=log, stderr=log)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        write = phase(pool, port, server.pid, kind, "write")
        stats = info(port, "test")
        read = phase(pool, port, server.pid, kind, "read")
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    return {"kind": kind, "method": method, "write": write, "read": read,
            "ratio": float(stats.get("data_compression_ratio", "1")),
            "device_used_bytes": int(stats.get("device_used_bytes", "0")),
            "compressed_records": int(stats.get("storage-engine.compressed_records", "0"))}


def main() -> None:
    bolided, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {int(c) for c in CLIENT_CPUS.split(",")})
    results = []
    with tempfile.TemporaryDirectory(prefix="bolide-compression-") as work, \
            multiprocessing.Pool(PROCESSES) as pool:
        for kind in KINDS:
            for method in METHODS:
                result = run_one(bolided, Path(work), kind, method, pool)
                print(json.dumps(result), flush=True)
                results.append(result)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    lines = [f"# Storage compression, {RECORDS} records of {SIZE} bytes, {PROCESSES} client processes",
             "", "| data | method | ratio | device MiB | write ops/s | write CPU µs/op | "
             "read ops/s | read CPU µs/op | errors |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r['kind']} | {r['method']} | {r['ratio']:.3f} | {r['device_used_bytes'] / 2**20:.1f} | "
            f"{r['write']['ops_per_s']:.0f} | {r['write']['cpu_us_per_op']:.1f} | "
            f"{r['read']['ops_per_s']:.0f} | {r['read']['cpu_us_per_op']:.1f} | "
            f"{r['write']['errors'] + r['read']['errors']} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
