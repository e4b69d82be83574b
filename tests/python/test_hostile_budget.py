"""The node-wide budget for connection buffers (`proto-buffer-budget`),
through real sockets: many connections announce large frames and send them
slowly, a few send most of a huge frame at once and stop, others pipeline
reads of a large record and never read the answers. Meanwhile the official
client keeps doing reads and writes (and one large write) with normal
latency, and the node's RSS stays under the budget plus a fixed margin."""

import socket
import statistics
import threading
import time

import aerospike
import pytest

import wire
from bolide_server import BolideServer
from helpers import NS, info_value, parse_kv, wait_for

MIB = 1024 * 1024
BUDGET_MIB = 32
# The node without hostile buffers: code, runtime, threads, the namespace's
# few records and every connection's first 32 KiB of input and of output.
MARGIN_MIB = 32
ATTACK_SECONDS = 8.0

SLOW_SENDERS = 24
FAST_FILLERS = 3
NON_READERS = 8
BIG_RECORD_BYTES = 900 * 1024

CONFIG = """
service {{
    service-threads 2
    proto-buffer-budget %dM
}}
logging {{
    console {{
        context any info
    }}
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
}}
namespace test {{
    replication-factor 1
    default-ttl 0
    max-record-size 4M
    storage-engine memory {{
        data-size 256M
    }}
}}
""" % BUDGET_MIB


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def established(sock):
    """Whether the TCP connection is still established (the server has not
    closed it), whatever unread data waits in it."""
    tcp_established = 1
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return info[0] == tcp_established


def node_stats(client):
    return parse_kv(info_value(client, "statistics"))


class Hostiles:
    """The hostile connections, each in its own thread, all bounded by
    ``deadline``. Counts how many the server closed."""

    def __init__(self, port, deadline, big_key_digest):
        self.port = port
        self.deadline = deadline
        self.digest = big_key_digest
        self.closed_by_server = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()
        self.sockets = []
        self.threads = []

    def _connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        with self.lock:
            self.sockets.append(sock)
        return sock

    def _count(self, sent=0, closed=False):
        with self.lock:
            self.bytes_sent += sent
            self.closed_by_server += int(closed)

    def slow_sender(self):
        """Announces a 64 MiB message and sends 128 KiB every 0.1 s."""
        sock = self._connect()
        sock.sendall(wire.proto_header(64 * MIB, wire.TYPE_MSG))
        sock.setblocking(False)
        chunk = b"\x16" + b"\x00" * (128 * 1024 - 1)
        while time.monotonic() < self.deadline:
            try:
                self._count(sent=sock.send(chunk))
            except BlockingIOError:
                pass  # the node stopped reading: its data waits in the kernel
            except OSError:
                self._count(closed=True)
                return
            if not established(sock):
                self._count(closed=True)
                return
            time.sleep(0.1)

    def fast_filler(self):
        """Announces 128 MiB, sends 40 MiB as fast as the node takes it,
        then stops sending and holds the connection."""
        sock = self._connect()
        sock.settimeout(0.5)
        sock.sendall(wire.proto_header(128 * MIB, wire.TYPE_MSG))
        chunk = b"\x00" * MIB
        sent = 0
        while sent < 40 * MIB and time.monotonic() < self.deadline:
            try:
                sock.sendall(chunk)
                sent += len(chunk)
                self._count(sent=len(chunk))
            except socket.timeout:
                continue
            except OSError:
                self._count(closed=True)
                return
        self._hold(sock)

    def non_reader(self):
        """Pipelines 300 reads of a ~900 KiB record and reads nothing."""
        sock = self._connect()
        read = wire.as_msg(wire.key_fields(NS, "budget", self.digest), [],
                           info1=wire.INFO1_READ | wire.INFO1_GET_ALL)
        sock.sendall(read * 300)
        self._hold(sock)

    def _hold(self, sock):
        """Waits for the deadline, noting whether the server closed us."""
        while time.monotonic() < self.deadline:
            if not established(sock):
                self._count(closed=True)
                return
            time.sleep(0.1)

    def start(self):
        kinds = ([self.slow_sender] * SLOW_SENDERS + [self.fast_filler] * FAST_FILLERS
                 + [self.non_reader] * NON_READERS)
        for target in kinds:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self):
        for thread in self.threads:
            thread.join(timeout=ATTACK_SECONDS + 10)
        for sock in self.sockets:
            sock.close()


def timed_ops(client, prefix, seconds):
    """Puts and gets small records for ``seconds``; returns the latencies (s)."""
    latencies = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        key = (NS, "budget", f"{prefix}-{i % 200}")
        start = time.monotonic()
        client.put(key, {"n": i, "s": "x" * 100})
        _, _, bins = client.get(key)
        latencies.append(time.monotonic() - start)
        assert bins == {"n": i, "s": "x" * 100}
        i += 1
    return latencies


def p99(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@pytest.mark.time_limit(120)
def test_budget_bounds_memory_under_hostile_clients_while_a_client_is_served():
    with BolideServer(config_text=CONFIG) as server:
        client = server.client()
        pid = server.proc.pid
        big_key = (NS, "budget", "big")
        client.put(big_key, {"b": bytearray(b"\xab" * BIG_RECORD_BYTES)})
        stats = node_stats(client)
        assert int(stats["proto_buffer_budget_bytes"]) == BUDGET_MIB * MIB

        quiet = timed_ops(client, "quiet", 2.0)
        rss_before = rss_bytes(pid)

        samples = []
        sampling = threading.Event()

        def sample_rss():
            while not sampling.is_set():
                samples.append(rss_bytes(pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        deadline = time.monotonic() + ATTACK_SECONDS
        hostiles = Hostiles(server.port, deadline, aerospike.calc_digest(NS, "budget", "big"))
        hostiles.start()
        try:
            time.sleep(1.0)
            under_attack = timed_ops(client, "attack", 2.0)
            # A well-behaved large write (3 MiB frame) gets its room: the
            # node closes the oldest holders for it.
            large = (NS, "budget", "large")
            started = time.monotonic()
            client.put(large, {"b": bytearray(b"\x5a" * (3 * MIB))},
                       policy={"total_timeout": 10000})
            large_seconds = time.monotonic() - started
            assert client.get(large)[2]["b"] == b"\x5a" * (3 * MIB)
            under_attack += timed_ops(client, "attack2", max(0.5, deadline - time.monotonic() - 0.5))
            stats_during = node_stats(client)
        finally:
            hostiles.stop()
            sampling.set()
            sampler.join(timeout=5)

        assert server.alive(), server.log_tail()
        max_rss = max(samples)
        print(f"\nRSS before {rss_before / MIB:.1f} MiB, max under attack {max_rss / MIB:.1f} MiB "
              f"({len(samples)} samples); hostile bytes sent {hostiles.bytes_sent / MIB:.0f} MiB, "
              f"closed by the server {hostiles.closed_by_server} of "
              f"{SLOW_SENDERS + FAST_FILLERS + NON_READERS}")
        print(f"client p50/p99/max ms: quiet {statistics.median(quiet) * 1e3:.2f}/"
              f"{p99(quiet) * 1e3:.2f}/{max(quiet) * 1e3:.2f}, under attack "
              f"{statistics.median(under_attack) * 1e3:.2f}/{p99(under_attack) * 1e3:.2f}/"
              f"{max(under_attack) * 1e3:.2f} ({len(under_attack)} ops); 3 MiB put {large_seconds:.2f} s")
        print(f"stats during: {({k: v for k, v in stats_during.items() if k.startswith('proto_buffer')})}")

        # The attack offered far more than the budget, and the node stayed
        # within it.
        assert hostiles.bytes_sent > 2 * BUDGET_MIB * MIB
        assert max_rss <= (BUDGET_MIB + MARGIN_MIB) * MIB, f"RSS {max_rss / MIB:.1f} MiB"
        # The node throttled and closed hostile connections, and said so.
        assert int(stats_during["proto_buffer_waits"]) > 0
        assert int(stats_during["proto_buffer_closed"]) > 0
        assert hostiles.closed_by_server > 0
        assert "connection buffers at their budget" in server.log_text()
        # The well-behaved client kept its latency.
        assert len(under_attack) > 100
        assert statistics.median(under_attack) <= max(5 * statistics.median(quiet), 0.005)
        assert p99(under_attack) <= max(10 * p99(quiet), 0.050)
        assert large_seconds < 5.0
        # Everything charged comes back once the hostile connections are gone.
        wait_for(lambda: int(node_stats(client)["proto_buffer_used_bytes"]) == 0, 5.0,
                 what="proto_buffer_used_bytes back to 0")
        client.remove(big_key)
        client.remove(large)
