"""Info protocol through the Python client and raw sockets."""

import re
import time

import pytest

import wire
from helpers import NS, SET, info_value, ns_stats, parse_kv, wait_for


def test_build_has_four_numeric_parts(client):
    build = info_value(client, "build")
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", build), build


def test_namespaces_contains_test(client):
    namespaces = info_value(client, "namespaces")
    assert "test" in namespaces.split(";"), namespaces


def test_info_all_returns_one_node(client):
    res = client.info_all("namespaces")
    assert len(res) == 1, res
    (node, (err, resp)), = res.items()
    assert err is None
    assert node == info_value(client, "node")
    # info_all strips the echoed command name (the C client does), keep it tolerant
    value = resp.rstrip("\n").split("\t", 1)[-1]
    assert "test" in value.split(";"), resp


def test_statistics(client):
    stats = parse_kv(info_value(client, "statistics"))
    for k in ("uptime", "objects", "client_connections"):
        assert k in stats, f"missing {k} in statistics"
        assert stats[k].isdigit(), (k, stats[k])
    assert int(stats["client_connections"]) >= 1
    u1 = int(stats["uptime"])
    time.sleep(2.1)
    u2 = int(parse_kv(info_value(client, "statistics"))["uptime"])
    assert u2 >= u1 + 1, (u1, u2)


def test_namespace_info_fields_and_config(client):
    stats = ns_stats(client)
    for k in (
        "objects", "memory_used_bytes", "index_used_bytes", "data_used_bytes",
        "client_read_success", "client_read_not_found", "client_read_error",
        "client_write_success", "client_write_error", "client_delete_success",
        "client_delete_not_found", "expired_objects",
    ):
        assert k in stats, f"namespace/test lacks {k}"
        assert stats[k].lstrip("-").isdigit(), (k, stats[k])
    assert stats["stop_writes"] in ("true", "false")
    assert stats["stop_writes"] == "false"
    assert stats["replication-factor"] == "1"
    assert stats["default-ttl"] == "0"
    assert stats["nsup-period"] == "1"


def test_unknown_namespace_info(client):
    # real server: `type=unknown`, not an ERROR (the client raises on ERROR)
    try:
        value = info_value(client, "namespace/nonexistent_ns")
    except Exception as e:  # an ERROR answer is tolerated
        assert getattr(e, "code", None) is not None, e
        return
    assert "type=unknown" in value, value


def test_counters_are_exact(start_server):
    srv = start_server()
    c = srv.client()
    s0 = ns_stats(c)
    assert s0["objects"] == "0"
    keys = [(NS, "cnt", f"k{i}") for i in range(5)]
    for k in keys:
        c.put(k, {"v": "x" * 100})
    s1 = ns_stats(c)
    assert s1["objects"] == "5"
    assert int(s1["client_write_success"]) - int(s0["client_write_success"]) == 5
    for k in keys[:3]:
        c.get(k)
    for i in range(2):
        try:
            c.get((NS, "cnt", f"missing{i}"))
        except Exception:
            pass
    s2 = ns_stats(c)
    assert int(s2["client_read_success"]) - int(s1["client_read_success"]) == 3
    assert int(s2["client_read_not_found"]) - int(s1["client_read_not_found"]) == 2
    c.remove(keys[0])
    try:
        c.remove((NS, "cnt", "missing-del"))
    except Exception:
        pass
    s3 = ns_stats(c)
    assert s3["objects"] == "4"
    assert int(s3["client_delete_success"]) - int(s2["client_delete_success"]) == 1
    assert int(s3["client_delete_not_found"]) - int(s2["client_delete_not_found"]) == 1
    stats = parse_kv(info_value(c, "statistics"))
    assert stats["objects"] == "4"


def test_memory_accounting_moves(start_server):
    srv = start_server()
    c = srv.client()
    s0 = ns_stats(c)
    c.put((NS, SET, "mem"), {"v": bytearray(b"m" * 200_000)})
    s1 = ns_stats(c)
    grew = int(s1["data_used_bytes"]) - int(s0["data_used_bytes"])
    assert 200_000 <= grew <= 400_000, grew
    assert int(s1["memory_used_bytes"]) - int(s0["memory_used_bytes"]) >= 200_000
    assert int(s1["index_used_bytes"]) > int(s0["index_used_bytes"])
    c.remove((NS, SET, "mem"))
    s2 = ns_stats(c)
    assert int(s2["data_used_bytes"]) <= int(s0["data_used_bytes"]) + 1000
    assert int(s2["index_used_bytes"]) == int(s0["index_used_bytes"])


def test_sets_info(start_server):
    srv = start_server()
    c = srv.client()
    for i in range(3):
        c.put((NS, "demo", f"d{i}"), {"v": i})
    for i in range(2):
        c.put((NS, "other", f"o{i}"), {"v": i})
    sets = info_value(c, "sets")
    entries = {}
    for rec in sets.split(";"):
        if not rec:
            continue
        kv = parse_kv(rec, sep=":")
        entries[(kv["ns"], kv["set"])] = kv
    assert entries[("test", "demo")]["objects"] == "3"
    assert entries[("test", "other")]["objects"] == "2"
    c.remove((NS, "demo", "d0"))
    sets = info_value(c, "sets")
    assert "ns=test:set=demo:objects=2:" in sets, sets


def test_namespace_objects_follow_writes_on_shared_server(client, make_key):
    before = int(ns_stats(client)["objects"])
    keys = [make_key(str(i)) for i in range(4)]
    for k in keys:
        client.put(k, {"a": 1})
    after = int(ns_stats(client)["objects"])
    assert after == before + 4, (before, after)
    for k in keys:
        client.remove(k)
    assert int(ns_stats(client)["objects"]) == before


def test_raw_info_multiple_commands(server):
    res = wire.info_request(server.port, ["build", "namespaces", "node", "partitions"])
    assert set(res) == {"build", "namespaces", "node", "partitions"}
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", res["build"])
    assert "test" in res["namespaces"].split(";")
    assert res["node"]
    assert res["partitions"] == "4096"


def test_raw_info_unknown_command(server):
    res = wire.info_request(server.port, ["no-such-command-xyz", "build"])
    assert res["no-such-command-xyz"].startswith("ERROR"), res
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", res["build"])
