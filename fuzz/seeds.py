"""Seed inputs for the fuzz targets, from real client traffic.

Starts a bolided, puts a recording proxy in front of it and drives the
official Python client through it (puts of every bin type, gets, operate
with list and map ops, expression filters and expression ops, batches,
scans and queries, info requests). Then writes:

- fuzz/corpus/execute/: each AS_MSG body the client sent;
- fuzz/corpus/connection/: each connection's byte stream (cut to 32 KiB),
  plus streams that mix info, admin, compressed and pipelined frames;
- fuzz/corpus/config/: configuration files, valid and not.

File names are the SHA-1 of the content, as libFuzzer names them. The
fuzzer and `cargo fuzz cmin` add to and shrink these directories; run this
again only to start over:

    .venv/bin/python fuzz/seeds.py            # needs target/release/bolided
"""

from __future__ import annotations

import hashlib
import socket
import struct
import sys
import threading
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import aerospike  # noqa: E402
from aerospike_helpers import expressions as exp  # noqa: E402
from aerospike_helpers.batch import records as batch_records  # noqa: E402
from aerospike_helpers.operations import expression_operations as expr_ops  # noqa: E402
from aerospike_helpers.operations import list_operations as lists  # noqa: E402
from aerospike_helpers.operations import map_operations as maps  # noqa: E402
from aerospike_helpers.operations import operations as ops  # noqa: E402

import wire  # noqa: E402
from bolide_server import BolideServer, free_ports, render_config  # noqa: E402

CORPUS = ROOT / "fuzz" / "corpus"
STREAM_BYTES_MAX = 32 * 1024
NS, SET = "test", "demo"


class Recorder:
    """A TCP proxy that keeps what each client connection sent."""

    def __init__(self, server_port: int):
        self.server_port = server_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.streams: list[bytearray] = []
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.server_port))
            sent = bytearray()
            self.streams.append(sent)
            threading.Thread(target=self._pump, args=(client, server, sent), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    @staticmethod
    def _pump(source, target, record):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if record is not None:
                    record.extend(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.running = False
        self.listener.close()


def drive(port: int):
    """The client's side: one of most things a client does."""
    client = aerospike.client({"hosts": [("127.0.0.1", port)],
                               "policies": {"batch": {"total_timeout": 5000}}}).connect()
    keys = [(NS, SET, f"k{i}") for i in range(10)]
    for i, key in enumerate(keys):
        client.put(key, {"i": i * 7 - 20, "s": f"value-{i}", "f": i / 4.0, "b": bytearray([i] * 5),
                         "l": [i, "a", [1, 2]], "m": {"a": i, "b": ["x"]}, "t": i % 2 == 0,
                         "g": aerospike.GeoJSON({"type": "Point", "coordinates": [i + 0.5, i + 0.25]})},
                   meta={"ttl": 0 if i < 5 else 3600}, policy={"key": aerospike.POLICY_KEY_SEND})
    client.get(keys[1])
    client.select(keys[2], ["i", "s"])
    client.exists(keys[3])
    client.touch(keys[4], 100)
    client.increment(keys[5], "i", 3)
    client.append(keys[5], "s", "-tail")
    client.prepend(keys[5], "s", "head-")
    client.put((NS, SET, "gen"), {"x": 1}, policy={"exists": aerospike.POLICY_EXISTS_CREATE})
    client.put((NS, SET, "gen"), {"x": 2}, meta={"gen": 1},
               policy={"gen": aerospike.POLICY_GEN_EQ})
    client.remove((NS, SET, "gen"))
    client.operate(keys[6], [ops.increment("i", 1), ops.read("i"), ops.write("w", "new"), ops.touch(60)])
    client.operate(keys[6], [lists.list_append("l", 9), lists.list_get_by_rank_range("l", 0, 2,
                             aerospike.LIST_RETURN_VALUE), lists.list_sort("l", 0), lists.list_size("l")])
    client.operate(keys[7], [maps.map_put("m", "c", 3), maps.map_get_by_key("m", "a", aerospike.MAP_RETURN_VALUE),
                             maps.map_remove_by_value_range("m", 0, 2, aerospike.MAP_RETURN_COUNT),
                             maps.map_get_by_rank_range("m", 0, 1, aerospike.MAP_RETURN_KEY_VALUE)])
    client.operate(keys[8], [expr_ops.expression_read("e", exp.Add(exp.IntBin("i"), 5).compile()),
                             expr_ops.expression_write("w", exp.Mul(exp.IntBin("i"), 3).compile())])
    filtered = {"expressions": exp.And(exp.GT(exp.IntBin("i"), -10),
                                       exp.Eq(exp.ListSize(None, exp.ListBin("l")), 3)).compile()}
    client.get(keys[2], policy=filtered)
    try:
        client.get(keys[0], policy={"expressions": exp.Eq(exp.StrBin("s"), "nope").compile()})
    except aerospike.exception.FilteredOut:
        pass
    geo = exp.CmpGeo(exp.GeoBin("g"), aerospike.GeoJSON(
        {"type": "AeroCircle", "coordinates": [[3.5, 3.25], 50000]}))
    client.batch_read(keys[:4], policy={"expressions": geo.compile()})
    client.batch_read(keys)
    client.batch_read(keys + [(NS, SET, f"missing-{i}") for i in range(30)], ["i", "s"])
    client.batch_read(keys[:5], [])
    client.batch_operate(keys[:3], [ops.increment("i", 1), ops.read("i")])
    client.batch_write(batch_records.BatchRecords([
        batch_records.Write(keys[0], [ops.write("bw", 1)]),
        batch_records.Read(keys[1], [ops.read("s")]),
        batch_records.Remove((NS, SET, "missing")),
    ]))
    client.batch_remove([(NS, SET, "missing-a"), (NS, SET, "missing-b")])
    client.scan(NS, SET).results()
    client.scan(NS, SET).results(policy={"expressions": exp.LT(exp.IntBin("i"), 20).compile()})
    query = client.query(NS, SET)
    query.select("i", "s")
    query.max_records = 3
    query.results()
    query = client.query(NS, SET)
    query.results(policy={"expressions": exp.Eq(exp.MapGetByKey(
        None, aerospike.MAP_RETURN_VALUE, exp.ResultType.INTEGER, "a", exp.MapBin("m")), 2).compile(),
        "partition_filter": {"begin": 100, "count": 200}})
    for command in ("statistics", "namespaces", f"namespace/{NS}", "sets", "bins", "build",
                    "partition-generation", "replicas", "get-config:context=namespace;id=test"):
        client.info_all(command)
    client.close()


def frames(stream: bytes):
    """(type, frame bytes) of each complete frame in a client stream."""
    at = 0
    while at + 8 <= len(stream):
        (word,) = struct.unpack(">Q", stream[at:at + 8])
        total = 8 + (word & 0xFFFFFFFFFFFF)
        if at + total > len(stream):
            return
        yield (word >> 48) & 0xFF, stream[at:at + total]
        at += total


def compressed(frame: bytes) -> bytes:
    body = struct.pack(">Q", len(frame)) + zlib.compress(frame)
    return wire.proto_header(len(body), 4) + body


def save(directory: Path, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def config_seeds() -> list[str]:
    ports = free_ports(4)
    good = render_config(*ports)
    docs = (ROOT / "docs" / "configuration.md").read_text().split("```")[3]
    seeds = [good, docs, "namespace test {\n}\n"]
    lines = good.splitlines()
    for extra in ("service-threads 0", "service-threads 300", "proto-fd-max 10", "proto-buffer-budget 64M",
                  "proto-buffer-budget 10K", "stop-writes-sys-memory-pct 101", "node-id zz", "bogus 1"):
        seeds.append("\n".join([lines[0], "service {", f"    {extra}", "}"] + lines[4:]) + "\n")
    namespace_extras = ["default-ttl 30d", "default-ttl forever", "nsup-period 0", "max-record-size 8M",
                        "replication-factor 2", "storage-engine device {\n        file /tmp/x.dat\n"
                        "        filesize 16M\n        commit-to-device true\n    }",
                        "memory-size 1G", "high-water-memory-pct 60", "allow-ttl-without-nsup true",
                        "storage-engine memory {\n        data-size 1G\n        evict-used-pct 101\n    }"]
    for extra in namespace_extras:
        seeds.append(good.replace("namespace test {", "namespace test {\n    " + extra, 1))
    seeds += [good.replace("}", "", 1), good + "}\n", good + good, "service {\n", "# only a comment\n",
              good.replace("namespace test", "namespace " + "n" * 40)]
    return seeds


def main():
    with BolideServer() as server:
        recorder = Recorder(server.port)
        drive(recorder.port)
        recorder.close()
    bodies, streams = set(), []
    for stream in recorder.streams:
        stream = bytes(stream)
        streams.append(stream[:STREAM_BYTES_MAX])
        # Windows of a few consecutive requests, pipelined.
        framed = [frame for _, frame in frames(stream)]
        for start in range(0, len(framed), 6):
            streams.append(b"".join(framed[start:start + 6])[:STREAM_BYTES_MAX])
        for kind, frame in frames(stream):
            if kind == 3:
                bodies.add(frame[8:])
    message_frames = [frame for stream in recorder.streams for kind, frame in frames(bytes(stream))
                      if kind == 3 and len(frame) < 2048]
    info = wire.proto_header(len(b"build\nnode\n"), wire.TYPE_INFO) + b"build\nnode\n"
    admin = wire.proto_header(16, wire.TYPE_ADMIN) + bytes(16)
    mixed = [
        info + admin + b"".join(message_frames[:6]),
        b"".join(compressed(frame) for frame in message_frames[:4]),
        info + compressed(message_frames[0]) + message_frames[1][:20],
        wire.proto_header(0, wire.TYPE_INFO),
        admin + b"\x00" * 8,
        b"GET / HTTP/1.1\r\n\r\n",
        wire.proto_header(100, wire.TYPE_MSG) + b"\x16" * 10,
    ]
    mixed += [compressed(frame) for frame in message_frames[4:8]]
    for commands in (b"", b"statistics\n", b"namespace/test\nsets\n", b"truncate:namespace=test;set=demo\n",
                     b"get-config:context=service\n", b"replicas\npartitions\n"):
        mixed.append(wire.proto_header(len(commands), wire.TYPE_INFO) + commands + message_frames[0])
    for body in sorted(bodies):
        save(CORPUS / "execute", body)
    for stream in streams + mixed:
        if stream:
            save(CORPUS / "connection", stream)
    for text in config_seeds():
        save(CORPUS / "config", text.encode())
    for target in ("execute", "connection", "config"):
        print(target, len(list((CORPUS / target).iterdir())), "files")


if __name__ == "__main__":
    main()
