#!/usr/bin/env python3
"""Batch and scan figures for BENCHMARKS.md (issue 5):

1. batch read of 100 keys vs 100 single gets, official Python client;
2. raw scan rate: records/s for a whole-namespace scan, counted by a
   minimal protocol reader (so the Python client's per-record cost does not
   hide the server's);
3. update throughput (Go benchmark, -w RU,0) with and without a concurrent
   full scan.

Usage: bench/scan_batch.py --port 3320 --gobin .cache/gobin [--records 1000000]
Expects a running bolided on 127.0.0.1:PORT; loads RECORDS x 100-byte
records with the Go benchmark first.
"""
import argparse
import os
import re
import socket
import statistics
import struct
import subprocess
import threading
import time

import aerospike


def load(args):
    subprocess.run(
        [f"{args.gobin}/benchmark", "-h", "127.0.0.1", "-p", str(args.port), "-n", "test", "-k", str(args.records),
         "-o", "S:100", "-w", "I", "-c", "32"],
        check=True, capture_output=True, timeout=900,
    )


def batch_vs_single(client, rounds=200):
    """Records/s through batch_read(100 keys) and through 100 gets, on
    10,000 records of one 100-byte string bin written here (the Go
    benchmark's string values are not UTF-8, which the Python client
    cannot decode)."""
    count = 10_000
    for i in range(count):
        client.put(("test", "batch", i), {"s": "x" * 100})
    started = time.perf_counter()
    for r in range(rounds):
        base = (r * 100) % (count - 100)
        result = client.batch_read([("test", "batch", base + i) for i in range(100)])
        assert all(record.result == 0 for record in result.batch_records)
    batch_rate = rounds * 100 / (time.perf_counter() - started)
    started = time.perf_counter()
    for r in range(rounds):
        base = (r * 100) % (count - 100)
        for i in range(100):
            client.get(("test", "batch", base + i))
    single_rate = rounds * 100 / (time.perf_counter() - started)
    return batch_rate, single_rate


def raw_scan(port):
    """Scans namespace test; returns (records, seconds). Counts records from
    the bytes received (each record carries namespace, digest and set
    fields, so its size is fixed for one set and bin layout) and checks
    only each frame's tail for LAST, to keep the client's CPU cost low."""
    fields = b""
    ns = b"test"
    fields += struct.pack(">IB", len(ns) + 1, 0) + ns
    fields += struct.pack(">IB", 9, 7) + struct.pack(">Q", 12345)
    body = struct.pack(">BBBBBBIIIHH", 22, 0x01, 0, 0x04, 0, 0, 0, 0, 0, 2, 0) + fields
    frame = struct.pack(">Q", (2 << 56) | (3 << 48) | len(body)) + body
    sock = socket.create_connection(("127.0.0.1", port))
    started = time.perf_counter()
    sock.sendall(frame)
    received = 0
    record_bytes = None
    buf = bytearray()
    while True:
        while len(buf) < 8:
            buf += sock.recv(1 << 20)
        size = struct.unpack(">Q", bytes(buf[:8]))[0] & 0xFFFFFFFFFFFF
        while len(buf) < 8 + size:
            buf += sock.recv(1 << 20)
        if record_bytes is None and size > 22:
            n_fields, n_ops = struct.unpack(">HH", bytes(buf[8 + 18:8 + 22]))
            pos = 8 + 22
            for _ in range(n_fields + n_ops):
                (length,) = struct.unpack(">I", bytes(buf[pos:pos + 4]))
                pos += 4 + length
            record_bytes = pos - 8
        last = buf[8 + size - 22 + 3] & 0x01
        received += size - (22 if last else 0)
        del buf[:8 + size]
        if last:
            break
    elapsed = time.perf_counter() - started
    sock.close()
    return (received // record_bytes if record_bytes else 0), elapsed

def update_tps(args, seconds, scan_after=None):
    """Per-second update TPS from the Go benchmark; optionally scans meanwhile."""
    proc = subprocess.Popen(
        ["taskset", "-c", args.client_cpu, f"{args.gobin}/benchmark", "-h", "127.0.0.1", "-p", str(args.port),
         "-n", "test", "-k", str(args.records), "-o", "S:100", "-w", "RU,0", "-c", "32"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    scan_result = {}
    if scan_after is not None:
        def scan():
            time.sleep(scan_after)
            scan_result["start"] = time.monotonic()
            # The scan reader shares CPU 0 with the load generator; at the
            # lowest priority it takes as little from it as it can. Full
            # scans run back to back for scan_seconds, so several one-second
            # samples fall inside the window.
            os.nice(19)
            scan_result["records"] = scan_result["seconds"] = scan_result["scans"] = 0
            while time.monotonic() - scan_result["start"] < args.scan_seconds:
                records, seconds = raw_scan(args.port)
                scan_result["records"] += records
                scan_result["seconds"] += seconds
                scan_result["scans"] += 1
            scan_result["end"] = time.monotonic()
        thread = threading.Thread(target=scan)
        thread.start()
    started = time.monotonic()
    samples = []
    try:
        for line in proc.stdout:
            m = re.search(r"write\(tps=(\d+)", line)
            if m:
                samples.append((time.monotonic(), int(m.group(1))))
            if time.monotonic() - started > seconds:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if scan_after is not None:
        thread.join()
    return samples, scan_result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=3320)
    parser.add_argument("--gobin", default=".cache/gobin")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--seconds", type=int, default=25)
    parser.add_argument("--scan-seconds", type=int, default=10)
    args = parser.parse_args()

    load(args)
    client = aerospike.client({"hosts": [("127.0.0.1", args.port)]}).connect()
    batch_rate, single_rate = batch_vs_single(client)
    print(f"batch read of 100 keys: {batch_rate:,.0f} records/s; 100 single gets: {single_rate:,.0f} records/s;"
          f" ratio {batch_rate / single_rate:.1f}x")
    records, seconds = raw_scan(args.port)
    print(f"full scan (idle server): {records:,} records in {seconds:.2f}s = {records / seconds:,.0f} records/s")

    baseline, _ = update_tps(args, args.seconds)
    base = statistics.median(t for _, t in baseline[2:])
    samples, scan = update_tps(args, args.seconds, scan_after=5)
    during = [t for when, t in samples if scan["start"] + 1 <= when <= scan["end"]]
    print(f"update TPS without scan: median {base:,.0f}")
    if during:
        print(f"update TPS during {scan['scans']} back-to-back full scans ({scan['records']:,} records in {scan['seconds']:.1f}s):"
              f" median {statistics.median(during):,.0f}, min {min(during):,} = "
              f"{statistics.median(during) / base:.0%} / {min(during) / base:.0%} of baseline")
    else:
        print(f"scan finished within a second ({scan['records']:,} records in {scan['seconds']:.2f}s); no interval to compare")


if __name__ == "__main__":
    main()
