"""Size limits, bin-name limits, unknown namespaces, memory limits."""

import time

import aerospike
import pytest
from aerospike import exception as ex

import wire
from helpers import NS, SET, ns_stats, wait_for


def test_record_larger_than_max_record_size(client, key):
    # shared server: max-record-size 1M
    with pytest.raises(ex.RecordTooBig) as ei:
        client.put(key, {"big": bytearray(b"x" * (2 * 1024 * 1024))})
    assert ei.value.code == 13
    assert client.exists(key)[1] is None


def test_record_below_max_record_size_ok(client, key):
    payload = bytearray(b"y" * (512 * 1024))
    client.put(key, {"big": payload})
    _, _, bins = client.get(key)
    assert bytes(bins["big"]) == bytes(payload)


def test_growing_record_past_limit_by_append(client, key):
    client.put(key, {"s": "a" * (700 * 1024)})
    with pytest.raises(ex.RecordTooBig) as ei:
        client.append(key, "s", "b" * (700 * 1024))
    assert ei.value.code == 13
    _, meta, bins = client.get(key)
    assert len(bins["s"]) == 700 * 1024
    assert meta["gen"] == 1


def test_small_max_record_size(start_server):
    srv = start_server(namespace={"max-record-size": "4K"})
    c = srv.client()
    c.put((NS, SET, "small"), {"v": "a" * 1000})
    with pytest.raises(ex.RecordTooBig) as ei:
        c.put((NS, SET, "big"), {"v": "a" * 8000})
    assert ei.value.code == 13


def test_bin_name_longer_than_15_bytes(client, key):
    name = "b" * 16
    with pytest.raises(ex.BinNameError) as ei:
        client.put(key, {name: 1})
    assert ei.value.code == 21
    assert client.exists(key)[1] is None


def test_bin_name_too_long_raw_server_answer(server, client):
    """The server itself must answer 21 (BIN_NAME) for a 16+ byte bin name,
    independently of client-side checks."""
    user_key = "raw-long-bin-name"
    digest = aerospike.calc_digest(NS, SET, user_key)
    msg = wire.as_msg(
        wire.key_fields(NS, SET, digest),
        [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"x" * 20, (1).to_bytes(8, "big"))],
        info2=wire.INFO2_WRITE,
    )
    with wire.connect(server.port) as s:
        s.sendall(msg)
        r = wire.read_response(s)
    assert r.version == 2 and r.msg_type == 3 and r.header_sz == 22
    assert r.result_code == 21, r.result_code
    assert client.exists((NS, SET, user_key))[1] is None


def test_unknown_namespace_client(client):
    with pytest.raises(ex.NamespaceNotFound) as ei:
        client.put(("nonexistent_ns", SET, "k"), {"a": 1})
    assert ei.value.code == 20
    with pytest.raises(ex.NamespaceNotFound) as ei:
        client.get(("nonexistent_ns", SET, "k"))
    assert ei.value.code == 20


def test_unknown_namespace_raw_server_answer(server):
    digest = aerospike.calc_digest("nonexistent_ns", SET, "k")
    msg = wire.as_msg(wire.key_fields("nonexistent_ns", SET, digest), [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL)
    with wire.connect(server.port) as s:
        s.sendall(msg)
        r = wire.read_response(s)
    assert r.msg_type == 3
    assert r.result_code == 20


def test_memory_limit_stop_writes(start_server):
    """Fill a tiny namespace until writes fail with 8; reads and deletes keep
    working, the server stays up, and deleting data lets writes back in."""
    srv = start_server(
        namespace={"nsup-period": "1"},
        storage={"data-size": "2M", "stop-writes-used-pct": "50", "evict-used-pct": "90"},
    )
    c = srv.client()
    value = bytearray(b"z" * 8192)
    written = []
    full_error = None
    for i in range(2000):  # 2000 * 8 KiB = 16 MiB >> 2 MiB, bounded
        k = (NS, SET, f"fill-{i}")
        try:
            c.put(k, {"v": value, "i": i})
        except ex.ServerFull as e:
            full_error = e
            break
        written.append(k)
    assert full_error is not None, f"no OUT_OF_SPACE after {len(written)} writes of 8 KiB into data-size 2M"
    assert full_error.code == 8
    assert len(written) >= 10, "stop-writes kicked in far too early"
    assert srv.alive()

    stats = ns_stats(c)
    assert stats["stop_writes"] == "true", stats.get("stop_writes")
    assert int(stats["objects"]) == len(written)
    assert int(stats["client_write_error"]) >= 1

    # new writes keep failing with 8 (also small ones, also updates)
    with pytest.raises(ex.ServerFull):
        c.put((NS, SET, "one-more"), {"v": 1})
    with pytest.raises(ex.ServerFull):
        c.put(written[0], {"v": 1})

    # reads still work and return the right data
    for k in (written[0], written[len(written) // 2], written[-1]):
        _, meta, bins = c.get(k)
        assert bytes(bins["v"]) == bytes(value)
        assert bins["i"] == int(k[2].split("-")[1])
        assert meta["gen"] == 1

    # deletes still work
    for k in written:
        c.remove(k)
    assert ns_stats(c)["objects"] == "0"

    # with the data gone, writes are accepted again (stop_writes is re-evaluated,
    # at the latest by the next nsup cycle)
    def can_write():
        try:
            c.put((NS, SET, "after-free"), {"v": 1})
            return True
        except ex.ServerFull:
            return False

    wait_for(can_write, timeout=15, interval=0.5, what="writes accepted after freeing memory")
    assert ns_stats(c)["stop_writes"] == "false"
    _, _, bins = c.get((NS, SET, "after-free"))
    assert bins == {"v": 1}
    assert srv.alive()


def test_memory_limit_legacy_config(start_server):
    """Legacy memory-size / stop-writes-pct directly in the namespace."""
    srv = start_server(
        namespace={"memory-size": "2M", "high-water-memory-pct": "90", "stop-writes-pct": "50"},
        storage={"__none__": ""},
    )
    c = srv.client()
    value = bytearray(b"q" * 8192)
    n_ok = 0
    err = None
    for i in range(2000):
        try:
            c.put((NS, SET, f"legacy-{i}"), {"v": value})
            n_ok += 1
        except ex.ServerFull as e:
            err = e
            break
    assert err is not None and err.code == 8, f"no OUT_OF_SPACE after {n_ok} writes"
    _, _, bins = c.get((NS, SET, "legacy-0"))
    assert bytes(bins["v"]) == bytes(value)
    assert srv.alive()


def test_eviction_above_evict_used_pct(start_server):
    """Above evict-used-pct the background sweep evicts records that have a
    TTL (soonest-expiring first); records that never expire are not evicted."""
    srv = start_server(
        namespace={"nsup-period": "1"},
        storage={"data-size": "4M", "evict-used-pct": "20", "stop-writes-used-pct": "95"},
    )
    c = srv.client()
    value = bytearray(b"e" * 8192)
    for i in range(20):
        c.put((NS, SET, f"forever-{i}"), {"v": value}, meta={"ttl": aerospike.TTL_NEVER_EXPIRE})
    for i in range(150):  # 150 * 8 KiB ~ 1.2 MiB ~ 30% of 4 MiB
        c.put((NS, SET, f"ttl-{i}"), {"v": value}, meta={"ttl": 100000 + i})
    assert ns_stats(c)["objects"] == "170"

    s = wait_for(lambda: (lambda st: st if int(st.get("evicted_objects", "0")) > 0 else False)(ns_stats(c)),
                 timeout=20, interval=0.5, what="evicted_objects > 0")
    assert int(s["objects"]) < 170
    for i in range(20):
        assert c.exists((NS, SET, f"forever-{i}"))[1] is not None, "never-expiring records must not be evicted"
    # soonest-expiring records go first
    assert c.exists((NS, SET, "ttl-0"))[1] is None
    assert c.exists((NS, SET, "ttl-149"))[1] is not None


def test_bin_count_limit(client, key):
    """32,767 bins per record are allowed; one more is a parameter error (4)
    and the record keeps its previous state."""
    most = {f"b{i}": i for i in range(32_767)}
    client.put(key, most)
    _, meta, bins = client.get(key)
    assert len(bins) == 32_767 and bins["b32766"] == 32_766
    assert meta["gen"] == 1
    with pytest.raises(ex.InvalidRequest) as error:
        client.put(key, {"one_more": 1})
    assert error.value.code == 4
    _, meta, bins = client.get(key)
    assert len(bins) == 32_767 and "one_more" not in bins
    assert meta["gen"] == 1
