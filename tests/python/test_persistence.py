"""Persistent namespaces (storage-engine device / memory with files) through
the official Python client against real bolided processes: restarts, kill -9
crashes, damaged files, defragmentation, a full device, truncation."""

from __future__ import annotations

import os
import random
import re
import subprocess
import threading
import time
from pathlib import Path

import aerospike
import pytest
from aerospike import exception as ex

from bolide_server import BolideServer
from helpers import ns_stats, wait_for

NS = "test"
SET = "persist"
BLOCK = 64 * 1024
FILE_HEADER = 256 * 1024

CONFIG = """
service {{
    cluster-name bolide-persist
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
    default-ttl 0
    nsup-period 1
    storage-engine @ENGINE@ {{
@STORAGE@
    }}
}}
"""

# Bounded: CI runs this many kill -9 trials per mode; scripts/crash-soak.sh more.
CRASH_TRIALS = int(os.environ.get("BOLIDE_CRASH_TRIALS", "3"))


def config(path: Path, engine: str = "device", **directives) -> str:
    storage = {
        "file": str(path),
        "filesize": "16M",
        "write-block-size": "64K",
        "flush-max-ms": "200",
    }
    storage.update({k.replace("_", "-"): v for k, v in directives.items()})
    body = "\n".join(f"        {k} {v}" for k, v in storage.items() if v is not None)
    return CONFIG.replace("@ENGINE@", engine).replace("@STORAGE@", body)


class Node:
    """A persistent node whose files outlive its processes."""

    def __init__(self, text: str):
        self.text = text
        self.server: BolideServer | None = None

    def start(self) -> "Node":
        self.server = BolideServer(config_text=self.text, ready_timeout=60)
        self.server.start()
        return self

    def client(self):
        assert self.server is not None
        return self.server.client()

    def stats(self) -> dict:
        assert self.server is not None
        return ns_stats(self.client(), NS)

    def kill9(self) -> None:
        assert self.server is not None and self.server.proc is not None
        self.server.proc.kill()
        self.server.proc.wait(timeout=10)
        self.server.stop()

    def stop(self) -> None:
        if self.server is not None:
            rc = self.server.terminate()
            assert rc == 0, f"clean shutdown expected, got {rc}"
            self.server.stop()

    def log(self) -> str:
        assert self.server is not None
        return self.server.log_text()


@pytest.fixture
def nodes():
    started: list[Node] = []

    def _make(text: str) -> Node:
        node = Node(text)
        started.append(node)
        return node

    yield _make
    for node in started:
        if node.server is not None:
            node.server.stop()


def key(i) -> tuple:
    return (NS, SET, i)


def get_or_none(client, k):
    try:
        return client.get(k)[2]
    except ex.RecordNotFound:
        return None


# --------------------------------------------------------------------------
# Restarts
# --------------------------------------------------------------------------
@pytest.mark.parametrize("engine, data_in_memory", [
    ("device", None), ("device", "true"), ("memory", None)])
def test_clean_restart_keeps_records_deletes_generations_and_ttls(
        nodes, tmp_path, engine, data_in_memory):
    node = nodes(config(tmp_path / "ns.dat", engine=engine,
                        data_in_memory=data_in_memory)).start()
    c = node.client()
    values = {}
    for i in range(3000):
        bins = {"i": i, "s": f"value-{i}" * 3, "f": i / 7, "b": bytearray([i % 256] * 5),
                "l": [i, "x", [1, 2]], "m": {"k": i, "n": {"deep": True}}}
        c.put(key(i), bins)
        values[i] = bins
    for i in range(0, 3000, 7):
        c.remove(key(i))
        del values[i]
    for i in range(1, 3000, 11):
        if i in values:
            c.put(key(i), {"i": -i})
            values[i]["i"] = -i
    c.put(key("ttl"), {"v": 1}, meta={"ttl": 3600})
    c.put(key("sendkey"), {"v": 2}, policy={"key": aerospike.POLICY_KEY_SEND})
    node.stop()

    node.start()
    c = node.client()
    stats = node.stats()
    assert int(stats["objects"]) == len(values) + 2
    assert int(stats["cold_start_records"]) == len(values) + 2
    assert int(stats["cold_start_damaged_entries"]) == 0
    for i in range(3000):
        got = get_or_none(c, key(i))
        if i not in values:
            assert got is None, f"deleted record {i} came back"
            continue
        assert got == values[i], i
        _, meta = c.exists(key(i))
        assert meta["gen"] == (2 if i % 11 == 1 else 1), i
    _, meta, bins = c.get(key("ttl"))
    assert bins == {"v": 1} and 3500 < meta["ttl"] <= 3600
    stored_keys = {k[2] for k, _, _ in c.query(NS, SET).results() if k[2] is not None}
    assert stored_keys == {"sendkey"}
    assert re.search(r"cold start done .*records=", node.log()), node.log()


@pytest.mark.parametrize("data_in_memory", ["false", "true"])
def test_data_on_the_device_or_in_memory_reads_back_from_every_stage(
        nodes, tmp_path, data_in_memory):
    # A long flush interval: the newest records are only in the open block
    # or in sealed blocks, older ones only in the file (page cache).
    node = nodes(config(tmp_path / "ns.dat", flush_max_ms="60000",
                        data_in_memory=data_in_memory)).start()
    c = node.client()
    for i in range(3000):
        c.put(key(i), {"i": i, "s": f"{i:06d}" * 30})
        if i % 97 == 0:
            # Read back at once (the open block) and an older one.
            assert c.get(key(i))[2] == {"i": i, "s": f"{i:06d}" * 30}
            assert c.get(key(i // 2))[2]["i"] == i // 2
    for i in range(0, 3000, 3):
        c.operate(key(i), [{"op": aerospike.OPERATOR_INCR, "bin": "i", "val": 1}])
    for i in range(3000):
        want = i + 1 if i % 3 == 0 else i
        assert c.get(key(i))[2] == {"i": want, "s": f"{i:06d}" * 30}, i
    scanned = sorted(b["s"] for _, _, b in c.query(NS, SET).results())
    assert scanned == sorted(f"{i:06d}" * 30 for i in range(3000))
    stats = node.stats()
    assert stats["storage-engine.data-in-memory"] == data_in_memory
    index, data = int(stats["index_used_bytes"]), int(stats["data_used_bytes"])
    assert data > 3000 * 180, stats
    if data_in_memory == "true":
        assert int(stats["memory_used_bytes"]) == index + data
    else:
        # Only the index is in memory.
        assert int(stats["memory_used_bytes"]) == index
    node.stop()
    node.start()
    c = node.client()
    for i in range(0, 3000, 7):
        want = i + 1 if i % 3 == 0 else i
        assert c.get(key(i))[2] == {"i": want, "s": f"{i:06d}" * 30}, i


def test_a_record_damaged_on_a_running_node_answers_an_error_not_garbage(nodes, tmp_path):
    path = tmp_path / "ns.dat"
    node = nodes(config(path, flush_max_ms="50")).start()
    c = node.client()
    for i in range(2000):
        c.put(key(i), {"s": f"<{i:06d}>" * 20})
    victim = 10
    marker = f"<{victim:06d}>".encode()
    # The victim's block was sealed long ago; wait until it is in the file.
    wait_for(lambda: marker in path.read_bytes(), timeout=10, what="the record in the file")
    with open(path, "r+b") as f:
        at = path.read_bytes().index(marker)
        f.seek(at + 3)
        f.write(b"X")
    with pytest.raises(ex.ServerError) as error:
        c.get(key(victim))
    assert error.value.code == 1, error.value
    assert "record damaged on the device" in node.log()
    # Exists is answered from the index alone: no device read.
    _, meta = c.exists(key(victim))
    assert meta is not None and meta["gen"] == 1
    # Every other record reads back intact.
    for i in range(2000):
        if i != victim:
            assert c.get(key(i))[2] == {"s": f"<{i:06d}>" * 20}, i
    # Writing the record anew replaces the damaged version.
    c.put(key(victim), {"s": "fresh"}, policy={"exists": aerospike.POLICY_EXISTS_REPLACE})
    assert c.get(key(victim))[2] == {"s": "fresh"}


def test_writes_after_restart_continue_the_log(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    for round_ in range(3):
        for i in range(500):
            c.put(key(i), {"round": round_})
        node.stop()
        node.start()
        c = node.client()
        assert all(c.get(key(i))[2] == {"round": round_} for i in range(500))
        assert int(node.stats()["objects"]) == 500


def test_cold_start_sizes_the_index_for_every_record(nodes, tmp_path):
    # After a restart the log continues in a fresh block, so five more
    # records leave the newest block almost empty. The index must still be
    # sized for all records (estimated from the fullest recent block), not
    # for five per block, which would make the tables grow and rehash
    # through the whole load.
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    for i in range(2400):
        c.put(key(i), {"p": "x" * 100})
    node.stop()
    node.start()
    c = node.client()
    for i in range(2400, 2405):
        c.put(key(i), {"p": "y"})
    node.stop()
    node.start()
    sized = re.findall(r"index sized for the records the blocks can hold.*?records=(\d+)", node.log())
    assert sized, node.log()[-2000:]
    assert int(sized[-1]) >= 2405, f"index sized for {sized[-1]} of 2405 records"
    assert int(node.stats()["objects"]) == 2405
    c = node.client()
    assert c.get(key(2404))[2] == {"p": "y"} and c.get(key(0))[2] == {"p": "x" * 100}


def test_expired_records_do_not_come_back(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    c.put(key("short"), {"v": 1}, meta={"ttl": 1})
    c.put(key("long"), {"v": 2}, meta={"ttl": 3600})
    node.stop()
    time.sleep(2.2)
    node.start()
    c = node.client()
    assert get_or_none(c, key("short")) is None
    assert get_or_none(c, key("long")) == {"v": 2}


def test_truncate_survives_restart(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    for i in range(200):
        c.put((NS, "gone", i), {"v": i})
        c.put((NS, "kept", i), {"v": i})
    c.truncate(NS, "gone", 0)
    c.put((NS, "gone", "after"), {"v": "after"})
    node.stop()
    node.start()
    c = node.client()
    assert all(get_or_none(c, (NS, "gone", i)) is None for i in range(200))
    assert get_or_none(c, (NS, "gone", "after")) == {"v": "after"}
    assert all(get_or_none(c, (NS, "kept", i)) == {"v": i} for i in range(200))
    # A namespace-wide truncate too.
    c.truncate(NS, None, 0)
    node.stop()
    node.start()
    assert int(node.stats()["objects"]) == 0


# --------------------------------------------------------------------------
# Crashes (kill -9 under load)
# --------------------------------------------------------------------------
class Load:
    """Writer threads: unique inserts, counters on hot keys, deletes.
    Records what was acknowledged and when."""

    def __init__(self, node: Node, threads: int = 4):
        self.node = node
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked_puts: dict = {}   # key -> (value, ack time)
        self.acked_deletes: dict = {}  # key -> ack time
        self.deleting: set = set()   # deletes sent but not acknowledged
        self.threads = [threading.Thread(target=self.run, args=(t,), daemon=True)
                        for t in range(threads)]

    def run(self, t: int) -> None:
        try:
            c = aerospike.client(self.node.server.client_config()).connect()
        except Exception:
            return
        n = 0
        rng = random.Random(t)
        while not self.stop.is_set():
            n += 1
            choice = rng.random()
            try:
                if choice < 0.6:
                    k, value = f"u-{t}-{n}", n
                elif choice < 0.9:
                    k, value = f"hot-{t}-{rng.randrange(20)}", n
                else:
                    victim = f"u-{t}-{rng.randrange(1, n)}" if n > 1 else f"u-{t}-1"
                    with self.lock:
                        self.deleting.add(victim)
                    c.remove(key(victim))
                    with self.lock:
                        self.acked_deletes[victim] = time.monotonic()
                        self.acked_puts.pop(victim, None)
                        self.deleting.discard(victim)
                    continue
                c.put(key(k), {"v": value, "pad": "p" * 64})
                with self.lock:
                    self.acked_puts[k] = (value, time.monotonic())
                    self.acked_deletes.pop(k, None)
            except ex.RecordNotFound:
                with self.lock:
                    self.deleting.discard(victim)
            except Exception:
                # The node died mid-request: unacknowledged, anything goes.
                if self.stop.is_set():
                    return
                time.sleep(0.01)
        c.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=20)


def check_after_crash(c, load: Load, durable_before: float) -> tuple[int, int]:
    """Every put acknowledged before `durable_before` is there with its
    value or a later attempted one; every delete acknowledged before it is
    absent (unless written again). Returns (checked puts, checked deletes)."""
    puts = deletes = 0
    for k, (value, acked_at) in load.acked_puts.items():
        got = get_or_none(c, key(k))
        if acked_at > durable_before or k in load.deleting:
            # Too recent, or a delete of it was in flight at the kill.
            if got is not None:
                assert got["pad"] == "p" * 64, f"{k} corrupt: {got}"
            continue
        puts += 1
        assert got is not None, f"acknowledged write {k}={value} lost"
        assert got["v"] >= value, f"{k}: older value {got['v']} < acknowledged {value}"
        assert got["pad"] == "p" * 64
    for k, acked_at in load.acked_deletes.items():
        if acked_at > durable_before or k in load.acked_puts:
            continue
        deletes += 1
        assert get_or_none(c, key(k)) is None, f"deleted {k} came back"
    return puts, deletes


def crash_trials(node: Node, seed: int, run_before_kill: float, slack: float) -> tuple[int, int]:
    """CRASH_TRIALS rounds of: load, kill -9 after a random time, restart,
    check. `slack`: how long before the kill a write must have been
    acknowledged to be required. Returns (checked puts, checked deletes)."""
    rng = random.Random(seed)
    total_puts = total_deletes = 0
    for trial in range(CRASH_TRIALS):
        with Load(node) as load:
            time.sleep(run_before_kill + rng.random())
            kill_at = time.monotonic()
            node.kill9()
        node.start()
        puts, deletes = check_after_crash(node.client(), load, durable_before=kill_at - slack)
        assert puts > 50, f"trial {trial}: load too small ({puts} puts)"
        total_puts += puts
        total_deletes += deletes
    node.stop()
    return total_puts, total_deletes


def test_kill9_with_commit_to_device_loses_no_acknowledged_write(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat", filesize="64M",
                        commit_to_device="true")).start()
    _, deletes = crash_trials(node, seed=7, run_before_kill=0.3, slack=0.0)
    assert deletes > 0


def test_kill9_in_default_mode_loses_nothing_older_than_the_flush_window(nodes, tmp_path):
    # flush-max-ms 200: anything acknowledged more than that (plus slack for
    # the flusher's write) before the kill must survive.
    node = nodes(config(tmp_path / "ns.dat", filesize="64M")).start()
    crash_trials(node, seed=11, run_before_kill=0.8, slack=0.5)


def test_kill9_after_a_large_batch_write_with_commit_to_device(nodes, tmp_path):
    # 200 rows: answered by a stream job, which waits for durability on its
    # own thread before sending its chunk.
    from aerospike_helpers.batch.records import BatchRecords, Write
    from aerospike_helpers.operations import operations as op
    node = nodes(config(tmp_path / "ns.dat", commit_to_device="true",
                        flush_max_ms="60000")).start()
    c = node.client()
    rows = [Write(key(f"b{i}"), [op.write("v", i)]) for i in range(200)]
    result = c.batch_write(BatchRecords(rows))
    assert result.result == 0
    assert all(r.result == 0 for r in result.batch_records)
    # flush-max-ms is a minute: only the commit made these durable.
    node.kill9()
    node.start()
    c = node.client()
    assert all(c.get(key(f"b{i}"))[2] == {"v": i} for i in range(200))


def test_files_are_striped_and_restart_together(nodes, tmp_path):
    files = [tmp_path / "a.dat", tmp_path / "b.dat"]
    text = config(files[0], filesize="8M").replace(
        f"        file {files[0]}\n", f"        file {files[0]}\n        file {files[1]}\n")
    node = nodes(text).start()
    c = node.client()
    for i in range(4000):
        c.put(key(i), {"i": i, "s": "x" * 200})
    stats = node.stats()
    blocks_per_file = (8 * 1024 * 1024 - FILE_HEADER) // BLOCK
    assert int(stats["device_total_blocks"]) == 2 * blocks_per_file
    assert stats["storage-engine.file[1]"] == str(files[1])
    node.stop()
    # Both files hold written blocks (a block header's magic at the start).
    for path in files:
        data = path.read_bytes()
        written = sum(1 for b in range(blocks_per_file)
                      if data[FILE_HEADER + b * BLOCK:FILE_HEADER + b * BLOCK + 4] == b"\x0c\xb1\x1d\xb0")
        assert written >= 4, (path, written)
    node.start()
    c = node.client()
    assert int(node.stats()["objects"]) == 4000
    assert all(c.get(key(i))[2] == {"i": i, "s": "x" * 200} for i in range(4000))


def test_truncate_answers_and_survives_restart_via_info(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    for i in range(50):
        c.put((NS, "viainfo", i), {"v": i})
    assert c.info_random_node(f"truncate:namespace={NS};set=viainfo").strip().endswith("ok")
    node.stop()
    node.start()
    c = node.client()
    assert all(get_or_none(c, (NS, "viainfo", i)) is None for i in range(50))


# --------------------------------------------------------------------------
# Damaged files
# --------------------------------------------------------------------------
def fill_and_stop(node: Node, count: int) -> dict:
    c = node.client()
    expected = {}
    for i in range(count):
        expected[i] = {"i": i, "s": f"{i:08d}" * 20}
        c.put(key(i), expected[i])
    node.stop()
    return expected


def test_flipped_bytes_are_detected_and_skipped(nodes, tmp_path):
    path = tmp_path / "ns.dat"
    node = nodes(config(path)).start()
    expected = fill_and_stop(node, 3000)
    data = bytearray(path.read_bytes())
    rng = random.Random(3)
    # Flip one byte in the middle of each of the first 8 blocks' entries.
    for block in range(8):
        at = FILE_HEADER + block * BLOCK + 4096 + rng.randrange(40_000)
        data[at] ^= 0x5A
    path.write_bytes(bytes(data))
    node.start()
    c = node.client()
    stats = node.stats()
    damaged = int(stats["cold_start_damaged_entries"])
    assert 1 <= damaged <= 8, stats
    assert "damaged entries skipped" in node.log()
    found = 0
    for i, bins in expected.items():
        got = get_or_none(c, key(i))
        if got is not None:
            assert got == bins, f"record {i} corrupt: {got}"
            found += 1
    assert found >= len(expected) - 8, (found, len(expected))
    assert int(stats["objects"]) == found
    # The node takes writes as usual.
    c.put(key("new"), {"ok": 1})
    assert c.get(key("new"))[2] == {"ok": 1}


def test_a_truncated_file_keeps_the_intact_records(nodes, tmp_path):
    path = tmp_path / "ns.dat"
    node = nodes(config(path)).start()
    expected = fill_and_stop(node, 3000)
    size = path.stat().st_size
    # Cut the file in the middle of the third block.
    cut = FILE_HEADER + 2 * BLOCK + BLOCK // 2
    with open(path, "r+b") as f:
        f.truncate(cut)
    node.start()
    c = node.client()
    assert path.stat().st_size == size, "the file is sized back to its configured size"
    found = sum(1 for i, bins in expected.items() if get_or_none(c, key(i)) == bins)
    missing = [i for i in expected if get_or_none(c, key(i)) is None]
    # Everything in the first two and a half blocks is there (each record
    # ~230 bytes: ~280 per 64K block), nothing returned is corrupt.
    assert found + len(missing) == len(expected)
    assert found >= 600, found
    assert found < len(expected)


def test_a_damaged_block_header_skips_only_that_block(nodes, tmp_path):
    path = tmp_path / "ns.dat"
    node = nodes(config(path)).start()
    expected = fill_and_stop(node, 3000)
    with open(path, "r+b") as f:
        f.seek(FILE_HEADER + 1 * BLOCK + 10)
        f.write(b"\xff\xff")
    node.start()
    c = node.client()
    stats = node.stats()
    assert int(stats["cold_start_bad_blocks"]) == 1, stats
    found = sum(1 for i, bins in expected.items() if get_or_none(c, key(i)) == bins)
    assert len(expected) - 400 < found < len(expected)


# --------------------------------------------------------------------------
# Defragmentation and a full device
# --------------------------------------------------------------------------
@pytest.mark.parametrize("data_in_memory", ["false", "true"])
def test_defrag_reclaims_space_under_overwrites(nodes, tmp_path, data_in_memory):
    # 16 MiB of blocks (256); write 4x that in overwrites of 300 keys, at
    # most about 20 MB/s. (Unpaced, one client writes 70 MB/s: a 16 MiB
    # file is then used up in a quarter of a second, faster than emptied
    # blocks come back, free blocks fall under min-avail-pct and writes
    # stop with 8, as Aerospike's would.)
    node = nodes(config(tmp_path / "ns.dat", filesize="16M", defrag_sleep="0",
                        flush_max_ms="50", data_in_memory=data_in_memory)).start()
    c = node.client()
    payload = "d" * 1000
    total = 0
    rounds = 250
    for r in range(rounds):
        started = time.monotonic()
        for i in range(300):
            c.put(key(i), {"r": r, "p": payload})
            total += 1100
        time.sleep(max(0.0, started + 0.016 - time.monotonic()))
    assert total > 4 * 16 * 1024 * 1024
    stats = node.stats()
    assert int(stats["storage-engine.defrag_blocks"]) > 50, stats
    assert int(stats["device_available_pct"]) >= 20, stats
    assert all(c.get(key(i))[2] == {"r": rounds - 1, "p": payload} for i in range(300))
    node.stop()
    node.start()
    c = node.client()
    assert int(node.stats()["objects"]) == 300
    assert all(c.get(key(i))[2] == {"r": rounds - 1, "p": payload} for i in range(300))


def test_full_device_stops_writes_keeps_reads_and_recovers(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat", filesize="4M", defrag_sleep="0",
                        stop_writes_used_pct="60")).start()
    c = node.client()
    payload = "f" * 2000
    written = []
    code = None
    for i in range(10_000):
        try:
            c.put(key(i), {"p": payload})
            written.append(i)
        except ex.ServerFull as error:
            code = error.code
            break
    assert code == 8, "writes must stop with code 8 before the device is full"
    assert len(written) > 500
    stats = node.stats()
    assert stats["stop_writes"] == "true", stats
    # Reads keep working.
    assert all(c.get(key(i))[2] == {"p": payload} for i in written[:200])
    with pytest.raises(ex.ServerFull):
        c.put(key("more"), {"p": payload})
    # Delete most of the data: defrag frees space, writes resume by themselves.
    for i in written[: len(written) * 3 // 4]:
        c.remove(key(i))
    wait_for(lambda: node.stats()["stop_writes"] == "false", timeout=20,
             what="stop_writes to clear after deletes")
    c.put(key("more"), {"p": payload})
    assert c.get(key("more"))[2] == {"p": payload}
    # The survivors are intact across a restart.
    node.stop()
    node.start()
    c = node.client()
    for i in written[len(written) * 3 // 4:]:
        assert c.get(key(i))[2] == {"p": payload}
    for i in written[: len(written) * 3 // 4]:
        assert get_or_none(c, key(i)) is None


@pytest.fixture
def freezable_fs(tmp_path):
    """A small ext4 file system on a loop device, which the test can freeze
    (`fsfreeze`): every write to it then blocks in the kernel, as on a
    device that has stopped keeping up."""
    image, mount = tmp_path / "fs.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(48 * 1024 * 1024)
    mount.mkdir()
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
    if made.returncode == 0:
        made = subprocess.run(["mount", "-o", "loop", str(image), str(mount)],
                              capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a loop file system here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["fsfreeze", "--unfreeze", str(mount)], capture_output=True)
    subprocess.run(["umount", str(mount)], check=False)


def test_a_stalled_device_answers_device_overload_then_recovers(freezable_fs, nodes):
    # (freezable_fs first: its teardown runs after the node has stopped.)
    # The device stops taking writes (its file system is frozen): the
    # flusher blocks in its write, sealed blocks pile up to max-write-cache,
    # then writes answer 18 (DEVICE_OVERLOAD) while reads go on. Once the
    # device takes writes again the queue drains by itself, writes succeed,
    # and every acknowledged write survives a restart.
    node = nodes(config(freezable_fs / "ns.dat", flush_max_ms="60000",
                        max_write_cache="128K")).start()
    c = node.client()
    c.put(key("before"), {"p": "b"})
    acknowledged = []
    subprocess.run(["fsfreeze", "--freeze", str(freezable_fs)], check=True)
    try:
        code = None
        for i in range(2000):
            try:
                c.put(key(i), {"p": f"{i:04d}" * 250})
                acknowledged.append(i)
            except ex.AerospikeError as error:
                code = error.code
                break
        assert code == 18, f"expected DEVICE_OVERLOAD after {len(acknowledged)} writes, got {code}"
        # 2 sealed 64K blocks (the cache) plus the open one: ~175 records.
        assert 100 < len(acknowledged) < 400, len(acknowledged)
        # Both cached blocks count as queued, the one the flusher holds
        # (blocked in its write) included.
        assert int(node.stats()["storage-engine.write_q"]) == 2
        assert c.get(key("before"))[2] == {"p": "b"}
        assert all(c.get(key(i))[2] == {"p": f"{i:04d}" * 250} for i in acknowledged)
        with pytest.raises(ex.AerospikeError) as again:
            c.put(key("refused"), {"p": "r" * 1000})
        assert again.value.code == 18
    finally:
        subprocess.run(["fsfreeze", "--unfreeze", str(freezable_fs)], check=True)
    wait_for(lambda: node.stats()["storage-engine.write_q"] == "0", timeout=10,
             what="the write queue to drain")
    c.put(key("after"), {"p": "a"})
    node.stop()
    node.start()
    c = node.client()
    assert all(c.get(key(i))[2] == {"p": f"{i:04d}" * 250} for i in acknowledged)
    assert c.get(key("after"))[2] == {"p": "a"}
    assert get_or_none(c, key("refused")) is None


@pytest.fixture
def loop_device(tmp_path):
    backing = tmp_path / "disk.img"
    with open(backing, "wb") as f:
        f.truncate(24 * 1024 * 1024)
    made = subprocess.run(["losetup", "--find", "--show", str(backing)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no loop device here: {made.stderr.strip()}")
    device = made.stdout.strip()
    yield device
    subprocess.run(["losetup", "--detach", device], check=False)


def test_a_raw_block_device_holds_a_namespace_across_restarts(loop_device, nodes, tmp_path):
    # `device PATH` with no filesize: the whole block device is used.
    node = nodes(config(tmp_path / "unused", file=None, device=loop_device,
                        filesize=None)).start()
    c = node.client()
    for i in range(2000):
        c.put(key(i), {"i": i, "s": f"{i:05d}" * 20})
    stats = node.stats()
    blocks = (24 * 1024 * 1024 - FILE_HEADER) // BLOCK
    assert int(stats["device_total_bytes"]) == blocks * BLOCK, stats
    assert stats["storage-engine.file[0]"] == loop_device
    node.stop()
    node.start()
    c = node.client()
    assert int(node.stats()["objects"]) == 2000
    assert all(c.get(key(i))[2] == {"i": i, "s": f"{i:05d}" * 20} for i in range(2000))


def test_failed_device_writes_are_retried_and_nothing_acknowledged_is_lost(loop_device, nodes, tmp_path):
    # The raw device refuses writes for a while (`blockdev --setro`: every
    # pwrite fails with EPERM). The flusher keeps the blocks and writes them
    # again once the device takes writes; reads go on; from the first failed
    # write until a retried round succeeds, new writes answer 18 (the node
    # takes no data it already knows it may not keep); and after the device
    # is back every acknowledged write survives a restart.
    node = nodes(config(tmp_path / "unused", file=None, device=loop_device, filesize=None,
                        flush_max_ms="100", max_write_cache="256K")).start()
    c = node.client()
    value = lambda i: {"i": i, "s": f"{i:05d}" * 40}
    for i in range(300):
        c.put(key(i), value(i))
    acknowledged = list(range(300))
    subprocess.run(["blockdev", "--setro", loop_device], check=True)
    try:
        refused = 0
        for i in range(300, 2300):
            try:
                c.put(key(i), value(i))
                acknowledged.append(i)
            except ex.AerospikeError as error:
                assert error.code == 18, error
                refused += 1
            if refused >= 3:
                break
        assert refused == 3, "writes must answer 18 while the device fails"
        stats = wait_for(lambda: (lambda st: st if int(st["storage-engine.write_errors"]) > 0
                                  else False)(node.stats()), timeout=10, what="write_errors > 0")
        assert stats["storage-engine.write_failing"] == "true", stats
        assert "storage write failed: retrying" in node.log()
        assert all(c.get(key(i))[2] == value(i) for i in acknowledged[::7])
    finally:
        subprocess.run(["blockdev", "--setrw", loop_device], check=True)
    wait_for(lambda: node.stats()["storage-engine.write_failing"] == "false"
             and node.stats()["storage-engine.write_q"] == "0", timeout=15,
             what="the flusher to catch up once the device takes writes")
    assert "storage writes succeed again" in node.log()
    c.put(key("after"), {"ok": 1})
    node.stop()
    node.start()
    c = node.client()
    assert int(node.stats()["objects"]) == len(acknowledged) + 1
    assert all(c.get(key(i))[2] == value(i) for i in acknowledged)


def test_commit_to_device_writes_wait_out_a_failing_device(loop_device, nodes, tmp_path):
    # With commit-to-device a write is answered only once durable. While the
    # device refuses writes the answer waits (the client times out: the
    # write is in doubt); once the device takes writes again the retried
    # flush makes it durable and later writes are answered at once.
    node = nodes(config(tmp_path / "unused", file=None, device=loop_device, filesize=None,
                        commit_to_device="true")).start()
    c = node.client()
    c.put(key("before"), {"v": 1})
    subprocess.run(["blockdev", "--setro", loop_device], check=True)
    try:
        with pytest.raises(ex.TimeoutError):
            c.put(key("in-doubt"), {"v": 2}, policy={"total_timeout": 700, "max_retries": 0})
        stats = node.stats()
        assert stats["storage-engine.write_failing"] == "true", stats
    finally:
        subprocess.run(["blockdev", "--setrw", loop_device], check=True)
    wait_for(lambda: node.stats()["storage-engine.write_failing"] == "false", timeout=10,
             what="the retried flush to succeed")
    started = time.monotonic()
    c.put(key("after"), {"v": 3})
    assert time.monotonic() - started < 0.5
    node.kill9()
    node.start()
    c = node.client()
    assert c.get(key("before"))[2] == {"v": 1}
    assert c.get(key("after"))[2] == {"v": 3}
    # The in-doubt write was appended before the failure and made durable
    # by the retry.
    assert c.get(key("in-doubt"))[2] == {"v": 2}


def test_eviction_follows_device_use_when_the_data_is_on_the_device(nodes, tmp_path):
    # 4M file (60 blocks of 64K). Above evict-used-pct of the device holding
    # live data, sweeps evict the soonest-expiring records; records without
    # a TTL stay. Memory use (the index alone) is far below any mark.
    node = nodes(config(tmp_path / "ns.dat", filesize="4M", evict_used_pct="20",
                        stop_writes_used_pct="90")).start()
    c = node.client()
    value = "e" * 4000
    for i in range(20):
        c.put(key(f"forever-{i}"), {"v": value}, meta={"ttl": aerospike.TTL_NEVER_EXPIRE})
    for i in range(200):  # 220 x ~4 KiB: about 23% of the device
        c.put(key(f"ttl-{i}"), {"v": value}, meta={"ttl": 100000 + i})
    stats = node.stats()
    assert int(stats["device_used_pct"]) >= 20, stats
    assert stats["hwm_breached"] == "true", stats
    assert int(stats["memory_used_bytes"]) < 1024 * 1024, stats
    stats = wait_for(lambda: (lambda st: st if int(st["evicted_objects"]) > 0 else False)(node.stats()),
                     timeout=20, what="evicted_objects > 0")
    assert int(stats["objects"]) < 220
    assert all(c.exists(key(f"forever-{i}"))[1] is not None for i in range(20))
    assert c.exists(key("ttl-0"))[1] is None, "the soonest-expiring record goes first"
    assert c.exists(key("ttl-199"))[1] is not None
    # Evictions are durable: they do not come back after a restart.
    gone = [i for i in range(200) if c.exists(key(f"ttl-{i}"))[1] is None]
    node.stop()
    node.start()
    c = node.client()
    assert all(c.exists(key(f"ttl-{i}"))[1] is None for i in gone)


def test_oversized_record_for_the_write_block_is_refused(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    with pytest.raises(ex.RecordTooBig):
        c.put(key("big"), {"p": "x" * (70 * 1024)})
    c.put(key("ok"), {"p": "x" * (60 * 1024)})
    assert len(c.get(key("ok"))[2]["p"]) == 60 * 1024


# --------------------------------------------------------------------------
# Visibility and configuration
# --------------------------------------------------------------------------
def test_namespace_info_shows_device_figures(nodes, tmp_path):
    node = nodes(config(tmp_path / "ns.dat")).start()
    c = node.client()
    for i in range(100):
        c.put(key(i), {"p": "x" * 100})
    stats = node.stats()
    assert stats["storage-engine"] == "device"
    total = int(stats["device_total_bytes"])
    assert total == (16 * 1024 * 1024 - FILE_HEADER) // BLOCK * BLOCK
    assert int(stats["device_used_bytes"]) > 100 * 100
    for name in ("device_available_pct", "device_free_pct", "storage-engine.write_q",
                 "storage-engine.defrag_q", "cold_start_ms", "cold_start_records"):
        assert name in stats, name
    assert stats["storage-engine.file[0]"] == str(tmp_path / "ns.dat")


@pytest.mark.parametrize("storage, line, words", [
    ("        filesize 16M\n", 19, "needs at least one file"),
    (f"        file /tmp/bolide-nosize-{os.getpid()}.dat\n", 19, "needs filesize"),
    ("        file /tmp/x.dat\n        filesize 16M\n        write-block-size 3000\n", 22,
     "write-block-size"),
    ("        file /tmp/x.dat\n        filesize 16M\n        defrag-lwm-pct 0\n", 22,
     "defrag-lwm-pct"),
    ("        file /tmp/x.dat\n        filesize 16M\n        bogus 1\n", 22, "bogus"),
])
def test_storage_config_errors_name_the_line(storage, line, words):
    from bolide_server import run_config_check
    text = CONFIG.replace("@ENGINE@", "device").replace("@STORAGE@", storage.rstrip("\n"))
    rc, stderr, _ = run_config_check(text)
    assert rc not in (0, None), stderr
    assert f"line {line}" in stderr and words in stderr, stderr


def test_files_of_another_block_size_are_refused(nodes, tmp_path):
    path = tmp_path / "ns.dat"
    node = nodes(config(path)).start()
    node.client().put(key(1), {"v": 1})
    node.stop()
    other = nodes(config(path, write_block_size="128K"))
    with pytest.raises(Exception) as failure:
        other.start()
    assert "write-block-size" in str(failure.value)
