#!/usr/bin/env python3
"""Secondary index figures for BENCHMARKS.md (issue 14):

1. the memory an index costs per record: the node's resident set size
   before an integer index is built over RECORDS records and after, and
   the index's own `used_bytes` estimate;
2. an equality query (1 matching record) and a range query (0.1% of the
   records) on the indexed bin, against a scan with the same filter
   expression: queries per second and latency (p50, p99) from one client
   running them back to back;
3. unless --no-redis: the nearest Redis analogue, a sorted set of RECORDS
   members (member = the record's 20-byte string bin s, score = its bin v)
   queried with ZRANGEBYSCORE x x (1 member) and ZRANGEBYSCORE x x+W-1
   (W members), from the same process on the same CPU, through a minimal
   RESP client (one socket, one command at a time, the reply split into
   one bytes object per member). Compare it with the range query that
   selects bin s only: that returns the same strings, plus each record's
   key digest and metadata, through the Python client.

Usage: BOLIDED_BIN=target/release/bolided bench/sindex.py [--records 1000000]
       bench/sindex.py --callgrind 2000 [--records 200000]

With --callgrind N the node runs under valgrind's callgrind (instrumented
only while measuring) and, instead of rates, the script prints the
server's user-space instructions per request over N requests of each
kind: the queries above, updates of the indexed bin, inserts of new
indexed records, and an update of a bin no index reads. These counts do
not depend on what else the machine runs.

Starts its own bolided (memory namespace, `service-threads 1`, 127.0.0.1,
free ports) and then its own redis-server (`--save '' --appendonly no`),
one after the other, each pinned to --server-cpu (default 1) with this
process pinned to --client-cpu (default 0); stops each by its PID. Run it
on a quiet machine.
"""
import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))

import aerospike  # noqa: E402
from aerospike import predicates as p  # noqa: E402
from aerospike_helpers import expressions as exp  # noqa: E402
from aerospike_helpers.batch import records as br  # noqa: E402
from aerospike_helpers.operations import operations as op  # noqa: E402

from bolide_server import BolideServer, free_ports, render_config  # noqa: E402
from helpers import info_value, parse_kv  # noqa: E402

# index_integer_create is the call every client version has.
warnings.filterwarnings("ignore", category=DeprecationWarning)

NS, SET = "test", "idx"


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pin_process(pid, cpu):
    """Pins every thread of `pid` to `cpu` (threads made later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def load(client, records):
    """Bin v = i (distinct), bin s = a 20-byte string, via batch writes."""
    batch = 5000
    for start in range(0, records, batch):
        client.batch_write(br.BatchRecords([
            br.Write((NS, SET, i), [op.write("v", i), op.write("s", f"value-{i:014d}")])
            for i in range(start, min(records, start + batch))
        ]))


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(run, seconds, expected, server_pid):
    """Runs `run` back to back for `seconds` (at least 3 times); returns
    (runs per second, p50 ms, p99 ms, server CPU ms per run). Each run must
    return `expected` records."""
    latencies = []
    cpu_before = cpu_seconds(server_pid)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(latencies) < 3:
        t = time.perf_counter()
        count = run()
        latencies.append(time.perf_counter() - t)
        assert count == expected, (count, expected)
    elapsed = time.perf_counter() - started
    cpu_ms = (cpu_seconds(server_pid) - cpu_before) * 1000 / len(latencies)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, p99 * 1000, cpu_ms


class Resp:
    """A minimal RESP client: one command at a time on one socket."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def simple(self, *args):
        """Sends one command; returns its reply line (status, integer)."""
        self.sock.sendall(self.encode(*args))
        line = self._line()
        assert not line.startswith(b"-"), line
        return line

    def pipeline_simple(self, commands):
        self.sock.sendall(b"".join(self.encode(*c) for c in commands))
        for _ in commands:
            line = self._line()
            assert not line.startswith(b"-"), line

    def members(self, *args, member_len):
        """Sends one command whose reply is an array of bulk strings of
        `member_len` bytes each; returns them as a list of bytes."""
        self.sock.sendall(self.encode(*args))
        header = self._line()
        assert header.startswith(b"*"), header
        count = int(header[1:])
        item = len(b"$%d\r\n" % member_len) + member_len + 2
        while len(self.buf) < count * item:
            self._fill()
        body, self.buf = self.buf[: count * item], self.buf[count * item:]
        parts = body.split(b"\r\n")
        out = parts[1:-1:2]
        assert len(out) == count and all(len(m) == member_len for m in out), header
        return out

    def info_memory(self):
        self.sock.sendall(self.encode("INFO", "memory"))
        header = self._line()
        size = int(header[1:])
        while len(self.buf) < size + 2:
            self._fill()
        body, self.buf = self.buf[:size], self.buf[size + 2:]
        return dict(line.split(":", 1) for line in body.decode().splitlines() if ":" in line)


def redis_part(args, width, rows):
    port = free_ports(1)[0]
    proc = subprocess.Popen(
        ["taskset", "-c", str(args.server_cpu), "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                redis = Resp(port)
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                assert proc.poll() is None, "redis-server exited"
                time.sleep(0.05)
        before = int(redis.info_memory()["used_memory"])
        batch = 5000
        for start in range(0, args.records, batch):
            end = min(args.records, start + batch)
            redis.pipeline_simple([("ZADD", "z", i, f"value-{i:014d}") for i in range(start, end)])
        assert redis.simple("ZCARD", "z") == b":%d" % args.records
        after = int(redis.info_memory()["used_memory"])
        print(f"redis sorted set of {args.records} members: used_memory {(after - before) / args.records:.1f} "
              f"bytes per member (member string and score included)")

        random.seed(14)

        def zrange_equal():
            x = random.randrange(args.records)
            return len(redis.members("ZRANGEBYSCORE", "z", x, x, member_len=20))

        def zrange_range():
            x = random.randrange(args.records - width)
            return len(redis.members("ZRANGEBYSCORE", "z", x, x + width - 1, member_len=20))

        for name, run, expected in [
            ("redis ZRANGEBYSCORE x x", zrange_equal, 1),
            ("redis ZRANGEBYSCORE x x+W-1", zrange_range, width),
        ]:
            rate, p50, p99, cpu = measure(run, args.seconds, expected, proc.pid)
            rows.append((name, expected, rate, p50, p99))
            print(f"| {name} | {expected} | {rate:.1f} | {p50:.2f} | {p99:.2f} | {cpu:.3f} |", flush=True)
        redis.sock.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def bolide_server(binary=None):
    """A memory namespace of 4 GiB on a node with one service thread."""
    # BolideServer fills in the placeholders (its free ports, its work
    # directory); the braces of the config itself are doubled for format().
    text = render_config(0, 0, 0, 0, storage={"data-size": "4G", "stop-writes-used-pct": "90",
                                               "evict-used-pct": None})
    text = text.replace("{", "{{").replace("}", "}}")
    # The ports appear in the order service, heartbeat, fabric, info.
    for name in ["port", "heartbeat_port", "fabric_port", "info_port"]:
        text = text.replace("port 0\n", f"port {{{name}}}\n", 1)
    text = text.replace("service {{\n", "service {{\n    service-threads 1\n    work-directory {work_directory}\n", 1)
    # No expiry sweeps in the middle of a measurement.
    text = text.replace("nsup-period 1\n", "nsup-period 0\n", 1)
    return BolideServer(config_text=text, binary=binary, ready_timeout=120)


class Callgrind:
    """bolided under callgrind, instrumented only between start() and
    stop(); each stop() returns the instructions executed meanwhile."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.out = os.path.join(workdir, "callgrind.out")
        self.wrapper = os.path.join(workdir, "bolided-callgrind")
        real = os.environ.get("BOLIDED_BIN", "target/release/bolided")
        with open(self.wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    # Only requests count: what a connection's task and a
                    # stream job run, not timers, heartbeats or sweeps.
                    "exec valgrind --tool=callgrind --instr-atstart=no "
                    "--toggle-collect='*connection::serve*' --toggle-collect='*connection::run*' --toggle-collect='*connection::stream_job*' "
                    f"--callgrind-out-file={self.out} "
                    f"{os.path.abspath(real)} \"$@\"\n")
        os.chmod(self.wrapper, 0o755)
        self.dumps = 0
        self.pid = None

    def control(self, *args):
        subprocess.run(["callgrind_control", *args, str(self.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        self.control("-i", "on")
        self.control("-z")

    def stop(self):
        self.control("-d")
        self.control("-i", "off")
        self.dumps += 1
        # Each dump is a file of its own: <out>.<n>.
        deadline = time.monotonic() + 60
        while True:
            names = [n for n in os.listdir(self.workdir) if n.startswith("callgrind.out.")]
            if len(names) >= self.dumps:
                break
            assert time.monotonic() < deadline, "no callgrind dump"
            time.sleep(0.2)
        latest = max((os.path.join(self.workdir, n) for n in names), key=os.path.getmtime)
        time.sleep(0.5)
        with open(latest) as f:
            for line in f:
                if line.startswith("totals:") or line.startswith("summary:"):
                    return int(line.split()[1])
        raise AssertionError(f"no totals in {latest}")


def instructions(args, width):
    """--callgrind N: the server's instructions per request."""
    import tempfile
    workdir = tempfile.mkdtemp(prefix="bolide-callgrind-")
    grind = Callgrind(workdir)
    server = bolide_server(binary=grind.wrapper)
    server.start()
    grind.pid = server.proc.pid
    n = args.callgrind
    try:
        client = server.client()
        load(client, args.records)
        client.index_integer_create(NS, SET, "v", "idx_v")
        stat = parse_kv(info_value(client, f"sindex-stat:namespace={NS};indexname=idx_v"))
        assert int(stat["entries"]) == args.records, stat
        random.seed(14)

        def equality_query():
            x = random.randrange(args.records)
            query = client.query(NS, SET)
            query.where(p.equals("v", x))
            assert len(query.results()) == 1

        def range_query():
            x = random.randrange(args.records - width)
            query = client.query(NS, SET)
            query.where(p.between("v", x, x + width - 1))
            assert len(query.results()) == width

        def range_query_s():
            x = random.randrange(args.records - width)
            query = client.query(NS, SET)
            query.select("s")
            query.where(p.between("v", x, x + width - 1))
            assert len(query.results()) == width

        fresh = iter(range(args.records, args.records + 10 * n + 10))

        def update_indexed():
            # v moves to a value no other record has (kept distinct).
            i = random.randrange(args.records)
            client.put((NS, SET, i), {"v": next(fresh)})

        def insert_indexed():
            i = next(fresh)
            client.put((NS, SET, i), {"v": i, "s": f"value-{i:014d}"})

        def update_other_bin():
            i = random.randrange(args.records)
            client.put((NS, SET, i), {"s": f"other-{i:014d}"})

        def read():
            client.get((NS, SET, random.randrange(args.records)))

        print(f"records {args.records}, {n} requests each, server instructions per request (callgrind):")
        print("| request | instructions |")
        print("|---|---:|")
        for name, run in [
            ("equality query (index), 1 record", equality_query),
            (f"range query (index), {width} records", range_query),
            (f"range query (index), bin s only, {width} records", range_query_s),
            ("update of the indexed bin (put v)", update_indexed),
            ("insert of a new indexed record (put v, s)", insert_indexed),
            ("update of a bin no index reads (put s)", update_other_bin),
            ("read (get)", read),
        ]:
            run()
            grind.start()
            for _ in range(n):
                run()
            total = grind.stop()
            print(f"| {name} | {total / n:,.0f} |", flush=True)
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--server-cpu", type=int, default=1)
    parser.add_argument("--client-cpu", type=int, default=0)
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("--width", type=int, default=1000, help="records a range query selects")
    parser.add_argument("--callgrind", type=int, metavar="N", default=0,
                        help="print the server's instructions per request over N requests instead")
    args = parser.parse_args()
    width = min(args.width, args.records)
    if args.callgrind:
        instructions(args, width)
        return
    os.sched_setaffinity(0, {args.client_cpu})
    rows = []
    server = bolide_server()
    server.start()
    pin_process(server.proc.pid, args.server_cpu)
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
        print(f"records {args.records}, index build {int(stat['load_time']) / 1000:.2f} s (the index's "
              f"load_time; the client's create, which polls, returned after {build_s:.2f} s)")
        print(f"RSS before {before / 2**20:.1f} MiB, after {after / 2**20:.1f} MiB: "
              f"{(after - before) / entries:.1f} bytes per indexed record (estimate used_bytes "
              f"{int(stat['used_bytes']) / entries:.1f})")

        random.seed(14)

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

        def range_query_s():
            x = random.randrange(args.records - width)
            query = client.query(NS, SET)
            query.select("s")
            query.where(p.between("v", x, x + width - 1))
            records = query.results()
            assert all(len(bins) == 1 for _, _, bins in records)
            return len(records)

        def equality_scan():
            x = random.randrange(args.records)
            query = client.query(NS, SET)
            return len(query.results(policy={"expressions": exp.Eq(exp.IntBin("v"), x).compile()}))

        def range_scan():
            x = random.randrange(args.records - width)
            filter_exp = exp.And(exp.GE(exp.IntBin("v"), x), exp.LE(exp.IntBin("v"), x + width - 1)).compile()
            query = client.query(NS, SET)
            return len(query.results(policy={"expressions": filter_exp}))

        print("| what | records back | runs/s | p50 ms | p99 ms | server CPU ms/run |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, run, expected, seconds in [
            ("equality query (index)", equality_query, 1, args.seconds),
            ("equality scan + filter expression", equality_scan, 1, args.seconds),
            ("range query (index)", range_query, width, args.seconds),
            ("range query (index), bin s only", range_query_s, width, args.seconds),
            ("range scan + filter expression", range_scan, width, args.seconds),
        ]:
            rate, p50, p99, cpu = measure(run, seconds, expected, server.proc.pid)
            rows.append((name, expected, rate, p50, p99))
            print(f"| {name} | {expected} | {rate:.1f} | {p50:.2f} | {p99:.2f} | {cpu:.3f} |", flush=True)
    finally:
        server.stop()
    if not args.no_redis:
        redis_part(args, width, rows)
    rate = {name: r for name, _, r, _, _ in rows}
    print("ratios (runs/s):")
    print(f"  equality: index query / scan = {rate['equality query (index)'] / rate['equality scan + filter expression']:.1f}x")
    print(f"  range: index query / scan = {rate['range query (index)'] / rate['range scan + filter expression']:.1f}x")
    if not args.no_redis:
        print(f"  equality: index query / redis ZRANGEBYSCORE x x = "
              f"{rate['equality query (index)'] / rate['redis ZRANGEBYSCORE x x']:.2f}")
        print(f"  range, bin s only: index query / redis ZRANGEBYSCORE x x+W-1 = "
              f"{rate['range query (index), bin s only'] / rate['redis ZRANGEBYSCORE x x+W-1']:.2f}")


if __name__ == "__main__":
    main()
