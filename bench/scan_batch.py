#!/usr/bin/env python3
"""Batch and scan figures for BENCHMARKS.md (issue 5):

1. batch read of 100 keys vs 100 single gets, official Python client;
2. raw scan rate: records/s for a whole-namespace scan, counted by a
   minimal protocol reader (so the Python client's per-record cost does not
   hide the server's);
3. update throughput (Go benchmark, -w RU,0) without a scan, with a neutral
   idle-priority busy loop on the server's CPU (the control), and during
   full scans.

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
    # One reusable buffer filled with recv_into (as the official clients
    # read into a reused buffer): no allocation or extra copy per read.
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    filled = 0
    pos = 0
    received = 0
    record_bytes = None

    def need(n):
        nonlocal filled, pos
        if filled - pos >= n:
            return
        if pos:
            buf[:filled - pos] = buf[pos:filled]
            filled -= pos
            pos = 0
        while filled < n:
            got = sock.recv_into(view[filled:])
            if got == 0:
                raise ConnectionError("server closed the scan")
            filled += got

    while True:
        need(8)
        size = int.from_bytes(buf[pos:pos + 8], "big") & 0xFFFFFFFFFFFF
        need(8 + size)
        if record_bytes is None and size > 22:
            n_fields, n_ops = struct.unpack_from(">HH", buf, pos + 8 + 18)
            at = pos + 8 + 22
            for _ in range(n_fields + n_ops):
                (length,) = struct.unpack_from(">I", buf, at)
                at += 4 + length
            record_bytes = at - pos - 8
        last = buf[pos + 8 + size - 22 + 3] & 0x01
        received += size - (22 if last else 0)
        pos += 8 + size
        if last:
            break
    elapsed = time.perf_counter() - started
    sock.close()
    return (received // record_bytes if record_bytes else 0), elapsed

def update_tps(args):
    """Per-second update TPS from the Go benchmark while scans come and go.

    After a warm-up, the run rotates through three phases of PERIOD seconds,
    CYCLES times: nothing else running ("quiet"), a neutral busy loop at
    idle priority on --reader-cpu ("spin"), and full scans back to back
    ("scan"). Rotating keeps the slow drift of a shared machine out of the
    ratios. The spin phase is the control: on this VM any work on the
    server's vCPU slows the load generator's vCPU (they share a host core),
    so "scan vs spin" isolates what the scan itself costs the writes.
    Returns {phase: [TPS samples]} and the scan totals."""
    period, cycles, warmup = args.period, args.cycles, 3
    proc = subprocess.Popen(
        ["taskset", "-c", args.client_cpu, f"{args.gobin}/benchmark", "-h", "127.0.0.1", "-p", str(args.port),
         "-n", "test", "-k", str(args.records), "-o", "S:100", "-w", "RU,0", "-c", "32"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    windows = []  # (phase, start, end)
    totals = {"records": 0, "seconds": 0.0, "scans": 0}
    done = threading.Event()

    def spin_phase():
        spinner = subprocess.Popen(
            ["chrt", "--idle", "0", "taskset", "-c", str(args.reader_cpu), "sh", "-c", "while :; do :; done"])
        try:
            done.wait(period)
        finally:
            spinner.kill()
            spinner.wait()

    def scan_phase():
        start = time.monotonic()
        while time.monotonic() - start < period and not done.is_set():
            records, seconds = raw_scan(args.port)
            totals["records"] += records
            totals["seconds"] += seconds
            totals["scans"] += 1

    def driver():
        # The scan reader runs at the lowest nice value, on --reader-cpu
        # (default: the server's CPU, so its receive work does not come out
        # of the load generator's CPU, which bounds the baseline).
        os.nice(19)
        os.sched_setaffinity(0, {args.reader_cpu})
        if done.wait(warmup):
            return
        for _ in range(cycles):
            for phase, run in (("quiet", lambda: done.wait(period)), ("spin", spin_phase), ("scan", scan_phase)):
                start = time.monotonic()
                run()
                windows.append((phase, start, time.monotonic()))
                if done.is_set():
                    return

    thread = threading.Thread(target=driver)
    started = time.monotonic()
    thread.start()
    samples = []
    try:
        for line in proc.stdout:
            m = re.search(r"write\(tps=(\d+)", line)
            if m:
                samples.append((time.monotonic(), int(m.group(1))))
            if time.monotonic() - started > warmup + 3 * cycles * period + 1:
                break
    finally:
        done.set()
        proc.terminate()
        proc.wait(timeout=10)
        thread.join()
    phases = {"quiet": [], "spin": [], "scan": []}
    for when, tps in samples:
        # A sample covers the second before `when`; it counts for a phase
        # when that whole second lies inside the phase.
        for phase, s, e in windows:
            if s + 1 <= when <= e:
                phases[phase].append(tps)
    return phases, totals


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=3320)
    parser.add_argument("--gobin", default=".cache/gobin")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--reader-cpu", type=int, default=1)
    parser.add_argument("--period", type=int, default=6, help="seconds per phase")
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--skip-load", action="store_true", help="the records are already there")
    parser.add_argument("--drop-caches", action="store_true",
                        help="drop the page cache every 0.5 s during the update runs (root), so device reads "
                             "come from the disk")
    args = parser.parse_args()

    if not args.skip_load:
        load(args)
    client = aerospike.client({"hosts": [("127.0.0.1", args.port)]}).connect()
    batch_rate, single_rate = batch_vs_single(client)
    print(f"batch read of 100 keys: {batch_rate:,.0f} records/s; 100 single gets: {single_rate:,.0f} records/s;"
          f" ratio {batch_rate / single_rate:.1f}x")
    records, seconds = raw_scan(args.port)
    print(f"full scan (idle server): {records:,} records in {seconds:.2f}s = {records / seconds:,.0f} records/s")

    dropper = None
    if args.drop_caches:
        dropper = subprocess.Popen(
            ["sh", "-c", "while :; do echo 1 > /proc/sys/vm/drop_caches; sleep 0.5; done"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        phases, totals = update_tps(args)
    finally:
        if dropper:
            dropper.kill()
            dropper.wait()
    base = statistics.median(phases["quiet"])
    spin = statistics.median(phases["spin"])
    scan = statistics.median(phases["scan"])
    for phase, label in (("quiet", "nothing else running"), ("spin", "idle-priority busy loop on the server CPU"),
                         ("scan", "full scans back to back")):
        values = phases[phase]
        print(f"update TPS, {label}: median {statistics.median(values):,.0f}, min {min(values):,}"
              f" ({len(values)} one-second samples)")
    print(f"scans: {totals['scans']} full scans, {totals['records']:,} records in {totals['seconds']:.1f}s"
          f" = {totals['records'] / totals['seconds']:,.0f} records/s")
    print(f"writes during scans: {scan / base:.0%} of quiet (worst second {min(phases['scan']) / base:.0%});"
          f" busy loop alone: {spin / base:.0%} of quiet; scans against the busy loop: {scan / spin:.0%}")


if __name__ == "__main__":
    main()
