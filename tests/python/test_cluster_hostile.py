"""Hostile traffic on the ports nodes use to talk to each other (heartbeat
and fabric), against a running 3-node cluster (replication factor 2) that
the official Python client keeps writing to.

From outside the cluster, on every node: random bytes; frames with a wrong
version, a bad checksum, reserved bits set or a huge declared length;
frames cut short and then held open (slowloris), a few slowly and many
quickly filled; well-formed messages from a node id that is not a member
(a different cluster name, another clustering protocol, other
namespaces, a compatible node that never asks to join, and clustering,
exchange, migration-signal and metadata messages from a node nobody
hears); well-formed messages in a member's name that the protocol refuses
(a commit of a proposal never made, a "move" from a member that is not the
principal); fabric HELLOs with another cluster name or from a node that is
not in the cluster, followed by replica writes and migration steps; and
connect/disconnect floods.

Meanwhile and afterwards: every node stays up, the cluster keeps its size
(3) and its key (no re-clustering), every write the client saw succeed
reads back with its value, each node's RSS stays under a fixed margin over
its size before the attack, every hostile connection that held a frame open
is closed by the node, and the nodes count the dropped connections
(`heartbeat_bad_frames`, `fabric_bad_frames`).

What a forged message in a member's own name can do (impersonation) is
outside this test: node-to-node traffic is for a trusted network
(docs/cluster.md#trust).
"""

import os
import random
import socket
import struct
import threading
import time

import aerospike
import pytest

import cluster_wire as cw
from cluster import LocalCluster

MIB = 1024 * 1024
ATTACK_SECONDS = 14.0
# Each node may grow this much over its RSS before the attack. Without a
# bound on unfinished heartbeat frames, the fast fillers alone would hold
# 6 x 15 MiB per node.
RSS_MARGIN_MIB = 64
FAST_FILLERS = 6
FAST_FILL_BYTES = 15 * MIB
SLOW_SENDERS = 12
WRITES = 3000
SET = "hostile"
MEMBERS = (0xA1, 0xA2, 0xA3)
# Higher than every member: a principal there would take the members in,
# if its pulses were from a compatible node.
HIGH_ID = 0xFFFF_0000_0000_0001


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def established(sock):
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return info[0] == 1  # TCP_ESTABLISHED


def closed_by_peer(sock, timeout):
    """Whether the node closes the connection within `timeout` seconds
    (reading and discarding anything it sends)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


class Attack:
    """Every hostile connection, each kind in its own threads, all bounded
    by `deadline`. Counts what it sent and what the nodes did."""

    def __init__(self, cluster, deadline, cluster_key, digest):
        self.cluster = cluster
        self.deadline = deadline
        self.cluster_key = cluster_key
        self.digest = digest
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []
        self.threads = []

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def connect(self, node, port_name):
        port = node.heartbeat_port if port_name == "heartbeat" else node.fabric_port
        return socket.create_connection((node.host, port), timeout=5)

    def spawn(self, target, *args):
        def run():
            try:
                target(*args)
            except Exception as error:  # noqa: BLE001 - reported by the test
                with self.lock:
                    self.errors.append(f"{target.__name__}{args[1:]}: {error!r}")
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self):
        for thread in self.threads:
            thread.join(timeout=max(1.0, self.deadline - time.monotonic() + 30))
        assert not any(t.is_alive() for t in self.threads), "attack threads did not finish"

    # -- one bad frame per connection: the node must close it ----------------
    def bad_frames(self, node, port_name):
        """Connections each sending one invalid frame: the node must drop
        every one (it closes the connection)."""
        valid = cw.pulse(0x11, "x")
        kinds = {
            "random": lambda: os.urandom(random.randint(16, 4096)),
            "wrong_version": lambda: cw.header(cw.PULSE, 8, cw.crc32c(b"\0" * 8), version=2) + b"\0" * 8,
            "zero_version": lambda: cw.header(cw.PULSE, 8, cw.crc32c(b"\0" * 8), version=0) + b"\0" * 8,
            "bad_checksum": lambda: valid[:12] + struct.pack("<I", cw.crc32c(valid[16:]) ^ 1) + valid[16:],
            "reserved_bits": lambda: cw.header(cw.PULSE, 8, cw.crc32c(b"\0" * 8), reserved=1) + b"\0" * 8,
            "huge_length": lambda: cw.header(cw.PULSE, 0xFFFF_FFFF, 0),
            "over_frame_max": lambda: cw.header(cw.PULSE, 129 * MIB + 1, 0),
            # Within the codec's limit, above what the port takes: refused
            # on the header, before any of it is read.
            "large_length": lambda: cw.header(cw.PROXY if port_name == "fabric" else cw.PULSE, 100 * MIB, 0),
            "unknown_kind": lambda: cw.frame(200, b"\1" * 16),
            "short_body": lambda: cw.frame(cw.PULSE if port_name == "heartbeat" else cw.HELLO, b"\1\2\3"),
            "node_id_zero": lambda: cw.frame(cw.JOIN_REQUEST, b"\0" * 8),
        }
        rounds = 0
        while time.monotonic() < self.deadline and rounds < 4:
            rounds += 1
            for name, make in kinds.items():
                sock = self.connect(node, port_name)
                try:
                    sock.sendall(make())
                    if not closed_by_peer(sock, 5.0):
                        with self.lock:
                            self.errors.append(f"{port_name} {name}: node {node.node_id} kept the connection")
                    self.count(f"{port_name}_bad")
                finally:
                    sock.close()

    # -- cut short and held: slowloris ----------------------------------------
    def slow_sender(self, node, port_name):
        """Announces a frame (1 MiB on the heartbeat port, a 1000-byte HELLO
        on the fabric port) and sends a byte of it every 0.3 s."""
        sock = self.connect(node, port_name)
        self.count(f"{port_name}_held")
        try:
            if port_name == "heartbeat":
                sock.sendall(cw.header(cw.PULSE, MIB, 0))
            else:
                sock.sendall(cw.header(cw.HELLO, 1000, 0))
            sock.setblocking(False)
            while time.monotonic() < self.deadline:
                try:
                    sock.send(b"\0")
                except BlockingIOError:
                    pass
                except OSError:
                    self.count(f"{port_name}_held_closed")
                    return
                if not established(sock):
                    self.count(f"{port_name}_held_closed")
                    return
                time.sleep(0.3)
        finally:
            sock.close()

    def fast_filler(self, node):
        """Announces a 16 MiB heartbeat frame (the most the port takes),
        sends 15 MiB of it as fast as the node reads, then holds."""
        sock = self.connect(node, "heartbeat")
        self.count("heartbeat_held")
        try:
            sock.settimeout(0.5)
            sock.sendall(cw.header(cw.PULSE, 16 * MIB, 0))
            chunk = b"\0" * (256 * 1024)
            sent = 0
            while sent < FAST_FILL_BYTES and time.monotonic() < self.deadline:
                try:
                    sock.sendall(chunk)
                    sent += len(chunk)
                except socket.timeout:
                    continue
                except OSError:
                    self.count("heartbeat_held_closed")
                    return
            self.count("fast_fill_bytes", sent)
            remaining = self.deadline - time.monotonic()
            if closed_by_peer(sock, max(0.0, remaining)):
                self.count("heartbeat_held_closed")
        finally:
            sock.close()

    def fabric_after_hello(self, node, sender, channel):
        """A HELLO naming the cluster, from a node that is not a member,
        then a large request cut short: the node must not take it."""
        sock = self.connect(node, "fabric")
        self.count("fabric_held")
        try:
            sock.sendall(cw.hello(sender, self.cluster.cluster_name, channel))
            sock.sendall(cw.header(cw.PROXY, 100 * MIB, 0) + b"\0" * 4096)
            if closed_by_peer(sock, max(0.0, self.deadline - time.monotonic())):
                self.count("fabric_held_closed")
        finally:
            sock.close()

    # -- connect and go -----------------------------------------------------------
    def flood(self, node, port_name):
        """Connections opened and closed at once, some with a reset."""
        n = 0
        while time.monotonic() < self.deadline and n < 300:
            sock = self.connect(node, port_name)
            if n % 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            n += 1
        self.count(f"{port_name}_flood", n)

    # -- well-formed, from outside the cluster ------------------------------------
    def forged_heartbeat(self, node):
        """Well-formed control messages that must change nothing."""
        name = self.cluster.cluster_name
        key = self.cluster_key
        members = sorted(MEMBERS, reverse=True)
        dead_end = ("127.0.0.1", 1)  # nothing listens there
        frames = [
            # Another cluster's principal, higher than ours.
            cw.pulse(HIGH_ID, "some-other-cluster", heartbeat=dead_end, cluster_key=0x1234,
                     succession=[HIGH_ID]),
            # Our name, but another clustering protocol (a later one, and 1:
            # the build before the exchange carried racks) or other
            # namespaces.
            cw.pulse(HIGH_ID + 1, name, heartbeat=dead_end, protocol=3, cluster_key=0x1235,
                     succession=[HIGH_ID + 1]),
            cw.pulse(HIGH_ID + 4, name, heartbeat=dead_end, protocol=1, cluster_key=0x1238,
                     succession=[HIGH_ID + 4]),
            cw.pulse(HIGH_ID + 2, name, heartbeat=dead_end, namespaces=[("test", 3)],
                     cluster_key=0x1236, succession=[HIGH_ID + 2]),
            cw.pulse(HIGH_ID + 3, name, heartbeat=dead_end, namespaces=[("test", 2), ("more", 2)],
                     cluster_key=0x1237, succession=[HIGH_ID + 3]),
            # A compatible node that never asks to join, listing endpoints
            # of nodes that do not exist.
            cw.pulse(0x11, name, heartbeat=dead_end,
                     adjacency=[(0x12 + i, ("127.0.0.1", 2 + i)) for i in range(8)]),
            # Clustering messages from nodes nobody hears.
            cw.join_request(0x13),
            cw.move(0x14, HIGH_ID),
            cw.proposal(cw.PROPOSE, HIGH_ID + 5, 1 << 40, HIGH_ID + 5, 0x77, [HIGH_ID + 5] + members),
            cw.proposal(cw.COMMIT, HIGH_ID + 5, 1 << 40, HIGH_ID + 5, 0x77, [HIGH_ID + 5] + members),
            cw.exchange_commit(0x15, key, members),
            cw.metadata(0x16, [("truncate", "test", str(1 << 62), 1 << 31, 1 << 62, False)]),
            cw.metadata(0x16, [("truncate", f"test|{SET}", str(1 << 62), 1 << 31, 1 << 62, False)]),
            cw.metadata(0x16, [("udf", "evil.lua", "", 1 << 31, 1 << 62, True)], ticket=9),
            cw.metadata_ack(0x16, 1),
        ] + [cw.all_done(0x17, key, "test", pid) for pid in range(0, 4096, 64)] + [
            # In a member's name, refused by the protocol: a commit of a
            # proposal never made, a move from a member that is not the
            # principal.
            cw.proposal(cw.COMMIT, MEMBERS[2], 1 << 40, MEMBERS[2], 0x77, members),
            cw.move(MEMBERS[0], HIGH_ID),
        ]
        n = 0
        while time.monotonic() < self.deadline:
            sock = self.connect(node, "heartbeat")
            try:
                for data in frames:
                    sock.sendall(data)
                    n += 1
                # Still open: every frame was valid.
                time.sleep(0.3)
                assert established(sock), f"node {node.node_id} dropped a connection of valid frames"
            finally:
                sock.close()
        self.count("forged_heartbeat_frames", n)

    def forged_fabric(self, node):
        """HELLOs with another cluster name or from a node that is not in
        the cluster, each followed by a replica write over a record the
        client wrote and a migration start: refused."""
        name = self.cluster.cluster_name
        image = cw.image(self.digest, b"forged", generation=60000, last_update_ms=1 << 50, set_name=SET.encode())
        attempts = [
            (cw.hello(0xA1, "some-other-cluster"), cw.replica_write(1, "test", self.cluster_key, image)),
            (cw.hello(0x21, name), cw.replica_write(1, "test", self.cluster_key, image)),
            (cw.hello(HIGH_ID, name, cw.CHANNEL_BULK), cw.migrate_start(1, "test", 5, self.cluster_key)),
        ]
        n = 0
        while time.monotonic() < self.deadline and n < 60:
            for hello, request in attempts:
                sock = self.connect(node, "fabric")
                try:
                    sock.sendall(hello + request)
                    if not closed_by_peer(sock, 5.0):
                        with self.lock:
                            self.errors.append(f"fabric: node {node.node_id} kept a forged HELLO's connection")
                    n += 1
                finally:
                    sock.close()
        self.count("fabric_bad", n)


class Writer:
    """Bounded write load from the official client."""

    def __init__(self, client, deadline):
        self.client = client
        self.deadline = deadline
        self.acked = {}
        self.timeouts = 0
        self.failures = []

    def run(self):
        for i in range(WRITES):
            if time.monotonic() >= self.deadline:
                break
            key = ("test", SET, f"k{i}")
            value = {"i": i, "s": f"value-{i}" * 4}
            try:
                self.client.put(key, value)
                self.acked[i] = value
            except aerospike.exception.TimeoutError:
                self.timeouts += 1
            except aerospike.exception.AerospikeError as error:
                self.failures.append(f"k{i}: {error!r}")
            time.sleep(0.002)


@pytest.mark.time_limit(120)
def test_garbage_on_heartbeat_and_fabric_ports_is_dropped():
    with LocalCluster(3) as cluster:
        cluster_key = cluster.wait_formed()
        cluster.wait_stable()
        client = cluster.client()
        # The record the forged replica writes aim at.
        target = ("test", SET, "k0")
        client.put(target, {"i": 0, "s": "value-0" * 4})
        digest = bytes(aerospike.calc_digest("test", SET, "k0"))
        before = [cluster.stats(i) for i in range(3)]
        rss_before = [rss_bytes(node.proc.pid) for node in cluster.nodes]

        deadline = time.monotonic() + ATTACK_SECONDS
        writer = Writer(client, deadline + 2)
        attack = Attack(cluster, deadline, int(cluster_key, 16), digest)
        load = threading.Thread(target=writer.run, daemon=True)
        load.start()
        for node in cluster.nodes:
            for port_name in ("heartbeat", "fabric"):
                attack.spawn(attack.bad_frames, node, port_name)
                attack.spawn(attack.flood, node, port_name)
                for _ in range(SLOW_SENDERS // 2):
                    attack.spawn(attack.slow_sender, node, port_name)
            for _ in range(FAST_FILLERS):
                attack.spawn(attack.fast_filler, node)
            attack.spawn(attack.fabric_after_hello, node, 0x31, cw.CHANNEL_REQUESTS)
            attack.spawn(attack.fabric_after_hello, node, 0x32, cw.CHANNEL_BULK)
            attack.spawn(attack.forged_heartbeat, node)
            attack.spawn(attack.forged_fabric, node)

        # Watch the cluster and the nodes' memory while it lasts.
        samples = []
        rss_peak = list(rss_before)
        while time.monotonic() < deadline:
            for i, node in enumerate(cluster.nodes):
                assert node.alive(), f"node {i} died:\n{cluster.log_tail(i)}"
                rss_peak[i] = max(rss_peak[i], rss_bytes(node.proc.pid))
                stats = cluster.stats(i)
                samples.append((i, stats["cluster_size"], stats["cluster_key"]))
            time.sleep(0.25)
        attack.join()
        load.join(timeout=60)
        assert not load.is_alive()

        for i, node in enumerate(cluster.nodes):
            assert node.alive(), f"node {i} died:\n{cluster.log_tail(i)}"
        changed = [s for s in samples if s[1] != "3" or s[2] != cluster_key]
        assert not changed, f"the cluster changed under garbage: {changed[:10]}\n{cluster.logs()}"
        assert cluster.wait_formed(timeout=10) == cluster_key
        assert not attack.errors, "\n".join(attack.errors[:20])

        # Every write the client saw succeed is there, with its value.
        assert not writer.failures, writer.failures[:10]
        assert len(writer.acked) >= 200, f"only {len(writer.acked)} writes acknowledged"
        assert writer.timeouts <= len(writer.acked) // 20, f"{writer.timeouts} timeouts"
        for i, value in writer.acked.items():
            _, _, bins = client.get(("test", SET, f"k{i}"))
            assert bins == value, f"k{i}: {bins} != {value}"
        for i in range(3):
            assert cluster.ns_stats(i)["objects"] != "0"

        # Memory: bounded whatever the fillers sent.
        fill_mib = attack.counts.get("fast_fill_bytes", 0) // MIB
        for i in range(3):
            grown = (rss_peak[i] - rss_before[i]) // MIB
            assert grown <= RSS_MARGIN_MIB, (
                f"node {i} RSS grew {grown} MiB (fillers sent {fill_mib} MiB in all)")

        # Every connection that held a frame open was closed by the node.
        for port_name in ("heartbeat", "fabric"):
            held = attack.counts.get(f"{port_name}_held", 0)
            closed = attack.counts.get(f"{port_name}_held_closed", 0)
            assert held > 0 and closed == held, f"{port_name}: {closed} of {held} held connections closed"

        # Counted: every dropped connection.
        after = [cluster.stats(i) for i in range(3)]
        for port_name in ("heartbeat", "fabric"):
            dropped = sum(int(after[i][f"{port_name}_bad_frames"]) - int(before[i][f"{port_name}_bad_frames"])
                          for i in range(3))
            sent = attack.counts.get(f"{port_name}_bad", 0)
            assert dropped >= sent, f"{port_name}_bad_frames rose by {dropped}, {sent} bad connections"
        logs = "".join(node.log_text() for node in cluster.nodes)
        # A node of another clustering protocol is refused, and says why.
        assert f"ignoring heartbeat from node {HIGH_ID + 4:x}" in logs
        assert "clustering protocol 1 (ours 2)" in logs
        assert "clustering protocol 3 (ours 2)" in logs
        assert "heartbeat connection dropped" in logs
        assert "fabric connection dropped" in logs
