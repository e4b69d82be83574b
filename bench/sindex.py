#!/usr/bin/env python3
"""Secondary index figures for BENCHMARKS.md (issue 14):

1. the memory an index costs per record: the node's resident set size
   before an integer index is built over RECORDS records and after, and
   the index's own `used_bytes` estimate;
2. an equality query (1 matching record) and a range query (0.1% of the
   records) on the indexed bin, against a scan with the same filter
   expression: queries per second and latency (p50, p99) from one client
   running them back to back.

Usage: BOLIDED_BIN=target/release/bolided bench/sindex.py [--records 1000000]
Starts its own bolided (memory namespace, 127.0.0.1, a free port) and stops
it by its PID at the end. Run it on a quiet machine.
"""
import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))

import aerospike  # noqa: E402
from aerospike import predicates as p  # noqa: E402
from aerospike_helpers import expressions as exp  # noqa: E402
from aerospike_helpers.batch import records as br  # noqa: E402
from aerospike_helpers.operations import operations as op  # noqa: E402

from bolide_server import BolideServer  # noqa: E402
from helpers import info_value, parse_kv  # noqa: E402

NS, SET = "test", "idx"


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def load(client, records):
    """Bin v = i (distinct), bin s = a 20-byte string, via batch writes."""
    batch = 5000
    for start in range(0, records, batch):
        client.batch_write(br.BatchRecords([
            br.Write((NS, SET, i), [op.write("v", i), op.write("s", f"value-{i:014d}")])
            for i in range(start, min(records, start + batch))
        ]))


def measure(run, seconds, expected):
    """Runs `run` back to back for `seconds` (at least 3 times); returns
    (runs per second, p50 ms, p99 ms). Each run must return `expected`
    records."""
    latencies = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(latencies) < 3:
        t = time.perf_counter()
        count = run()
        latencies.append(time.perf_counter() - t)
        assert count == expected, (count, expected)
    elapsed = time.perf_counter() - started
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, p99 * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    server = BolideServer(storage={"data-size": "4G", "stop-writes-used-pct": "90", "evict-used-pct": None})
    server.start()
    try:
        client = server.client()
        load(client, args.records)
        time.sleep(2)
        before = rss_bytes(server.proc.pid)
        started = time.perf_counter()
        client.index_integer_create(NS, SET, "v", "idx_v")
        build_s = time.perf_counter() - started
        time.sleep(2)
        after = rss_bytes(server.proc.pid)
        stat = parse_kv(info_value(client, f"sindex-stat:namespace={NS};indexname=idx_v"))
        entries = int(stat["entries"])
        assert entries == args.records, stat
        print(f"records {args.records}, index build {build_s:.2f} s (client wait included)")
        print(f"RSS before {before / 2**20:.1f} MiB, after {after / 2**20:.1f} MiB: "
              f"{(after - before) / entries:.1f} bytes per indexed record (estimate used_bytes "
              f"{int(stat['used_bytes']) / entries:.1f})")

        random.seed(14)
        width = max(1, args.records // 1000)

        def equality_query():
            x = random.randrange(args.records)
            query = client.query(NS, SET)
            query.where(p.equals("v", x))
            return len(query.results())

        def range_query():
            x = random.randrange(args.records - width)
            query = client.query(NS, SET)
            query.where(p.between("v", x, x + width - 1))
            return len(query.results())

        def equality_scan():
            x = random.randrange(args.records)
            query = client.query(NS, SET)
            return len(query.results(policy={"expressions": exp.Eq(exp.IntBin("v"), x).compile()}))

        def range_scan():
            x = random.randrange(args.records - width)
            filter_exp = exp.And(exp.GE(exp.IntBin("v"), x), exp.LE(exp.IntBin("v"), x + width - 1)).compile()
            query = client.query(NS, SET)
            return len(query.results(policy={"expressions": filter_exp}))

        print("| what | records back | runs/s | p50 ms | p99 ms |")
        print("|---|---:|---:|---:|---:|")
        for name, run, expected, seconds in [
            ("equality query (index)", equality_query, 1, args.seconds),
            ("equality scan + filter expression", equality_scan, 1, args.seconds),
            ("range query (index)", range_query, width, args.seconds),
            ("range scan + filter expression", range_scan, width, args.seconds),
        ]:
            rate, p50, p99 = measure(run, seconds, expected)
            print(f"| {name} | {expected} | {rate:.1f} | {p50:.2f} | {p99:.2f} |", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
