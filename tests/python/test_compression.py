"""Storage compression (`compression none|lz4|snappy|zstd` on persistent
namespaces) through the official Python client against real bolided
processes: JSON-like documents, repetitive strings and random bytes read back
exactly, the ratio statistic follows the data, restarts, a method changed at
run time, defragmentation, the uncompressed size limit, config errors, and a
storage file of format version 1 read by today's server."""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
import urllib.request
from pathlib import Path

import aerospike
import pytest
from aerospike import exception as ex

from bolide_server import free_ports, run_config_check
from helpers import info_value
from test_persistence import CONFIG, NS, key, nodes  # noqa: F401  (fixture)
from test_persistence import config as storage_config

FIXTURE = Path(__file__).resolve().parents[2] / "crates/store/tests/fixtures/format-v1.dat"


def config(path: Path, **directives) -> str:
    return storage_config(path, **directives)


def document(i: int, rng: random.Random) -> dict:
    """A JSON-like document as users store them (nested map, list, text)."""
    return {
        "doc": {
            "id": i,
            "name": f"customer-{i:06d}",
            "email": f"customer{i}@example.com",
            "active": i % 3 != 0,
            "tags": ["retail", "newsletter", "tier-" + str(i % 4)],
            "address": {"city": rng.choice(["Lyon", "Paris", "Nantes"]), "zip": f"{69000 + i % 100}"},
        },
        "json": json.dumps({"events": [{"type": "view", "page": f"/item/{j}"} for j in range(12)]}),
    }


def repetitive(i: int) -> dict:
    return {"s": ("status=OK;" * 120) + str(i)}


def random_bytes(i: int, rng: random.Random) -> dict:
    return {"b": bytearray(rng.getrandbits(8) for _ in range(1200)), "i": i}


def ratio(node) -> float:
    return float(node.stats()["data_compression_ratio"])


def set_config(client, command: str) -> str:
    return info_value(client, f"set-config:{command}")


def set_config_refused(client, command: str) -> tuple:
    """The error code and message of a refused set-config (the client
    raises on an `ERROR:<code>:<message>` answer)."""
    with pytest.raises(ex.AerospikeError) as refused:
        set_config(client, command)
    return refused.value.code, refused.value.msg


@pytest.mark.parametrize("method", ["lz4", "snappy", "zstd"])
def test_records_read_back_exactly_and_the_ratio_follows_the_data(nodes, tmp_path, method):
    rng = random.Random(7)
    node = nodes(config(tmp_path / "ns.dat", compression=method, filesize="64M")).start()
    c = node.client()
    stats = node.stats()
    assert stats["storage-engine.compression"] == method
    assert ratio(node) == 1.0  # nothing compressed yet
    # Random bytes do not shrink: stored plain, the ratio stays at 1.
    randoms = {i: random_bytes(i, rng) for i in range(200)}
    for i, bins in randoms.items():
        c.put(key(f"r-{i}"), bins)
    stats = node.stats()
    assert float(stats["data_compression_ratio"]) >= 0.99, stats["data_compression_ratio"]
    assert int(stats["storage-engine.uncompressible_records"]) >= 200
    # Documents and repetitive strings do: the ratio drops well under 1.
    documents = {i: document(i, rng) for i in range(1500)}
    for i, bins in documents.items():
        c.put(key(f"d-{i}"), bins)
    for i in range(1500):
        c.put(key(f"s-{i}"), repetitive(i))
    stats = node.stats()
    assert float(stats["data_compression_ratio"]) < 0.6, stats["data_compression_ratio"]
    assert float(stats["device_compression_ratio"]) == float(stats["data_compression_ratio"])
    assert int(stats["storage-engine.compressed_records"]) >= 3000

    def check_all(client):
        for i, bins in randoms.items():
            assert client.get(key(f"r-{i}"))[2] == bins
        for i, bins in documents.items():
            assert client.get(key(f"d-{i}"))[2] == bins
        for i in range(1500):
            assert client.get(key(f"s-{i}"))[2] == repetitive(i)

    check_all(c)
    node.stop()
    node.start()  # cold start: every entry is read and decoded again
    check_all(node.client())
    assert int(node.stats()["cold_start_damaged_entries"]) == 0


def test_compression_saves_device_space_against_none_on_the_same_data(nodes, tmp_path):
    used = {}
    for method in ("none", "zstd"):
        node = nodes(config(tmp_path / f"{method}.dat", compression=method)).start()
        c = node.client()
        for i in range(2000):
            c.put(key(i), repetitive(i))
        used[method] = int(node.stats()["device_used_bytes"])
        assert node.stats()["storage-engine.compression"] == method
        node.stop()
    assert used["zstd"] * 4 < used["none"], used


def test_changing_the_method_at_run_time_affects_new_writes_only(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    assert node.stats()["storage-engine.compression"] == "none"
    for i in range(300):
        c.put(key(f"plain-{i}"), repetitive(i))
    assert int(node.stats()["storage-engine.compressed_records"]) == 0
    assert set_config(c, f"context=namespace;id={NS};compression=zstd;compression-level=3") == "ok"
    stats = node.stats()
    assert stats["storage-engine.compression"] == "zstd"
    assert stats["storage-engine.compression-level"] == "3"
    config_answer = info_value(c, f"get-config:context=namespace;namespace={NS}")
    assert "storage-engine.compression=zstd" in config_answer
    for i in range(300):
        c.put(key(f"zstd-{i}"), repetitive(i))
    assert int(node.stats()["storage-engine.compressed_records"]) == 300
    assert set_config(c, f"context=namespace;namespace={NS};compression=lz4;compression-acceleration=8") == "ok"
    for i in range(300):
        c.put(key(f"lz4-{i}"), repetitive(i))
    assert node.stats()["storage-engine.compression-acceleration"] == "8"
    # Back to none: the ratio reads 1 again, and old records still read.
    assert set_config(c, f"context=namespace;id={NS};compression=none") == "ok"
    assert ratio(node) == 1.0
    assert "device_compression_ratio" not in node.stats()
    for i in range(300):
        c.put(key(f"none-again-{i}"), {"s": "x" * 500})
    for prefix in ("plain", "zstd", "lz4"):
        assert all(c.get(key(f"{prefix}-{i}"))[2] == repetitive(i) for i in range(300)), prefix
    # Bad requests say why and change nothing.
    code, msg = set_config_refused(c, f"context=namespace;id={NS};compression=gzip")
    assert code == 4 and "'gzip' is not a compression method" in msg, (code, msg)
    code, msg = set_config_refused(c, f"context=namespace;id={NS};compression-level=10")
    assert code == 4 and "compression-level must be 1 to 9" in msg, (code, msg)
    code, msg = set_config_refused(c, "context=namespace;id=nope;compression=lz4")
    assert code == 20, (code, msg)
    code, msg = set_config_refused(c, f"context=service;id={NS};compression=lz4")
    assert code == 4, (code, msg)
    assert node.stats()["storage-engine.compression"] == "none"
    # A restart reads the mix of methods (the configured one applies again).
    node.stop()
    node.start()
    c = node.client()
    for prefix in ("plain", "zstd", "lz4"):
        assert all(c.get(key(f"{prefix}-{i}"))[2] == repetitive(i) for i in range(300)), prefix
    assert all(c.get(key(f"none-again-{i}"))[2] == {"s": "x" * 500} for i in range(300))


@pytest.mark.parametrize("engine, data_in_memory", [("device", None), ("memory", None)])
def test_defrag_keeps_compressed_records_and_their_method(nodes, tmp_path, engine, data_in_memory):
    node = nodes(config(tmp_path / "ns.dat", engine=engine, compression="snappy", filesize="4M",
                        defrag_sleep="0", data_in_memory=data_in_memory)).start()
    c = node.client()
    rounds = 30

    def bins(r, i):
        # Half repetitive, half hex digits: compresses, but not to nothing.
        noise = random.Random(r * 1000 + i).getrandbits(1600).to_bytes(200, "big").hex()
        return {"r": r, "s": f"round {r} " * 60, "h": noise}

    for r in range(rounds):
        for i in range(200):
            c.put(key(i), bins(r, i))
        if r == rounds // 2:
            # Half the versions from now on are stored with another method.
            assert set_config(c, f"context=namespace;id={NS};compression=zstd") == "ok"
    stats = node.stats()
    assert int(stats["storage-engine.defrag_blocks"]) > 10, stats
    assert all(c.get(key(i))[2] == bins(rounds - 1, i) for i in range(200))
    node.stop()
    node.start()
    c = node.client()
    assert int(node.stats()["objects"]) == 200
    assert all(c.get(key(i))[2] == bins(rounds - 1, i) for i in range(200))


def test_the_size_limit_is_the_uncompressed_size(nodes, tmp_path):
    # A 64K write block: a record of 80K would compress to almost nothing,
    # but as Aerospike it is refused on its uncompressed size.
    node = nodes(config(tmp_path / "ns.dat", compression="zstd")).start()
    c = node.client()
    with pytest.raises(ex.RecordTooBig):
        c.put(key("big"), {"s": "a" * 80_000})
    c.put(key("fits"), {"s": "a" * 60_000})
    assert c.get(key("fits"))[2] == {"s": "a" * 60_000}


@pytest.mark.parametrize("storage, line, words", [
    ("        file /tmp/x.dat\n        filesize 16M\n        compression gzip\n", 22,
     "'gzip' is not a compression method"),
    ("        file /tmp/x.dat\n        filesize 16M\n        compression-level 10\n", 22,
     "compression-level must be 1 to 9"),
    ("        file /tmp/x.dat\n        filesize 16M\n        compression-acceleration 0\n", 22,
     "compression-acceleration must be 1 to 65537"),
])
def test_compression_config_errors_name_the_line(storage, line, words):
    text = CONFIG.replace("@ENGINE@", "device").replace("@STORAGE@", storage.rstrip("\n"))
    rc, stderr, _ = run_config_check(text)
    assert rc not in (0, None), stderr
    assert f"line {line}" in stderr and words in stderr, stderr


def test_compression_without_storage_files_is_refused_by_line():
    text = CONFIG.replace("@ENGINE@", "memory").replace("@STORAGE@", "        compression lz4")
    rc, stderr, _ = run_config_check(text)
    assert rc not in (0, None), stderr
    assert "line 20" in stderr and "needs storage files" in stderr, stderr


def test_the_ratio_is_served_on_metrics(nodes, tmp_path):
    (http_port,) = free_ports(1)
    text = config(tmp_path / "ns.dat", compression="lz4").replace(
        "    service {{\n        address 127.0.0.1",
        f"    http {{{{\n        port {http_port}\n    }}}}\n    service {{{{\n        address 127.0.0.1",
    )
    node = nodes(text).start()
    c = node.client()
    for i in range(500):
        c.put(key(i), repetitive(i))
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        scrape = response.read().decode()
    match = re.search(r'^bolide_namespace_data_compression_ratio\{ns="test"\} (\S+)$', scrape, re.M)
    assert match, scrape[:2000]
    assert 0 < float(match[1]) < 0.5
    assert re.search(r'^bolide_namespace_storage_compressed_records_total\{ns="test"\} 500$', scrape, re.M)


def fixture_digest(n: int) -> bytearray:
    """The digests the fixture was written with (`namespace::tests::digest`)."""
    return bytearray(struct.pack("<II", n, (n * 2654435761) % 2**32) + bytes(12))


def test_a_format_1_storage_file_is_read_by_this_server(nodes, tmp_path):
    # crates/store/tests/fixtures/format-v1.dat: namespace `fixture`, set
    # `demo`, written before format 2 (see the README beside it).
    path = tmp_path / "fixture.dat"
    shutil.copy(FIXTURE, path)
    text = config(path, write_block_size="4K", filesize=str(256 * 1024 + 8 * 4096)).replace(
        "namespace test {{", "namespace fixture {{")
    node = nodes(text).start()
    c = node.client()
    assert int(ns_stats_of(c, "fixture")["objects"]) == 32
    for n in range(40):
        k = ("fixture", "demo", None, fixture_digest(n))
        if n % 5 == 0:
            with pytest.raises(ex.RecordNotFound):
                c.get(k)
            continue
        v = n + 1000 if n % 4 == 0 else n
        assert c.get(k)[2] == {"v": v, "s": f"value-{v}"}, n
    # New writes go on in format 2 (compressed now) beside the old entries.
    assert set_config(c, "context=namespace;id=fixture;compression=zstd") == "ok"
    for i in range(20):
        c.put(("fixture", "new", i), {"s": "new " * 50})
    node.stop()
    node.start()
    c = node.client()
    assert int(ns_stats_of(c, "fixture")["objects"]) == 52
    assert c.get(("fixture", "demo", None, fixture_digest(1)))[2] == {"v": 1, "s": "value-1"}
    assert all(c.get(("fixture", "new", i))[2] == {"s": "new " * 50} for i in range(20))


def ns_stats_of(c, ns: str) -> dict:
    return dict(part.split("=", 1) for part in info_value(c, f"namespace/{ns}").split(";") if part)
