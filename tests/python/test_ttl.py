"""TTL semantics and expiry (void time, namespace default, nsup sweep)."""

import time

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers.operations import operations as op

from helpers import NEVER_EXPIRES, NS, SET, ns_stats, wait_for


def ttl_of(client, key):
    _, meta = client.exists(key)
    assert meta is not None
    return meta["ttl"]


def test_explicit_ttl_seconds(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 300})
    _, meta, _ = client.get(key)
    assert 295 <= meta["ttl"] <= 300, meta


def test_ttl_via_write_policy(client, key):
    client.put(key, {"a": 1}, policy={"ttl": 777})
    assert 770 <= ttl_of(client, key) <= 777


def test_ttl_never_expire(client, key):
    client.put(key, {"a": 1}, meta={"ttl": aerospike.TTL_NEVER_EXPIRE})
    _, meta, _ = client.get(key)
    assert meta["ttl"] == NEVER_EXPIRES, meta


def test_ttl_minus_one_literal_never_expires(client, key):
    # -1 is the documented "never expire" value; the client may or may not
    # accept a negative literal: if it does, the record must never expire.
    try:
        client.put(key, {"a": 1}, meta={"ttl": -1})
    except (ex.ParamError, OverflowError, TypeError):
        pytest.skip("client rejects a negative ttl literal")
    assert ttl_of(client, key) == NEVER_EXPIRES


def test_ttl_zero_on_default_ttl_zero_namespace_never_expires(client, key):
    # shared server: default-ttl 0
    client.put(key, {"a": 1}, meta={"ttl": aerospike.TTL_NAMESPACE_DEFAULT})
    assert ttl_of(client, key) == NEVER_EXPIRES
    client.put(key, {"a": 2})  # no ttl given -> client default policy -> ns default
    assert ttl_of(client, key) == NEVER_EXPIRES


def test_ttl_dont_update_keeps_existing(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 1000})
    time.sleep(1.1)
    client.put(key, {"a": 2}, meta={"ttl": aerospike.TTL_DONT_UPDATE})
    _, meta, bins = client.get(key)
    assert bins == {"a": 2}
    assert meta["gen"] == 2
    assert 990 <= meta["ttl"] <= 999, f"ttl must keep the old void time, got {meta}"


def test_ttl_dont_update_on_new_record_uses_default(client, key):
    client.put(key, {"a": 1}, meta={"ttl": aerospike.TTL_DONT_UPDATE})
    assert ttl_of(client, key) == NEVER_EXPIRES


def test_rewrite_with_default_resets_ttl(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 500})
    client.put(key, {"a": 2}, meta={"ttl": 2000})
    assert 1990 <= ttl_of(client, key) <= 2000
    client.put(key, {"a": 3}, meta={"ttl": aerospike.TTL_NEVER_EXPIRE})
    assert ttl_of(client, key) == NEVER_EXPIRES


def test_ttl_in_operate_response(client, key):
    _, meta, _ = client.operate(key, [op.write("a", 1)], meta={"ttl": 600})
    assert meta["gen"] == 1
    assert 595 <= meta["ttl"] <= 600, meta
    _, meta, bins = client.operate(key, [op.read("a")])
    assert bins == {"a": 1}
    assert meta["gen"] == 1
    assert 595 <= meta["ttl"] <= 600, meta


def test_namespace_default_ttl_applies(start_server):
    srv = start_server(namespace={"default-ttl": "100"})
    c = srv.client()
    k = (NS, SET, "default-ttl-key")
    c.put(k, {"a": 1})
    _, meta, _ = c.get(k)
    assert 95 <= meta["ttl"] <= 100, meta
    k2 = (NS, SET, "default-ttl-key-2")
    c.put(k2, {"a": 1}, meta={"ttl": aerospike.TTL_NAMESPACE_DEFAULT})
    _, meta = c.exists(k2)
    assert 95 <= meta["ttl"] <= 100, meta
    # explicit ttl overrides the default, never-expire still possible
    k3 = (NS, SET, "default-ttl-key-3")
    c.put(k3, {"a": 1}, meta={"ttl": 5000})
    assert 4990 <= c.exists(k3)[1]["ttl"] <= 5000
    k4 = (NS, SET, "default-ttl-key-4")
    c.put(k4, {"a": 1}, meta={"ttl": aerospike.TTL_NEVER_EXPIRE})
    assert c.exists(k4)[1]["ttl"] == NEVER_EXPIRES
    assert ns_stats(c)["default-ttl"] == "100"


def test_default_ttl_with_suffix(start_server):
    srv = start_server(namespace={"default-ttl": "1h"})
    c = srv.client()
    assert ns_stats(c)["default-ttl"] == "3600"
    k = (NS, SET, "suffix-key")
    c.put(k, {"a": 1})
    assert 3590 <= c.exists(k)[1]["ttl"] <= 3600


def test_record_expires_and_reads_not_found(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 1})
    try:
        _, meta, _ = client.get(key)
        assert meta["ttl"] == 1, meta
    except ex.RecordNotFound:
        pass  # already expired: allowed, the point is below

    def gone():
        try:
            client.get(key)
            return False
        except ex.RecordNotFound:
            return True

    wait_for(gone, timeout=10, what="ttl=1 record to expire")
    _, meta = client.exists(key)
    assert meta is None
    with pytest.raises(ex.RecordNotFound):
        client.select(key, ["a"])


def test_expired_record_can_be_created_again(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 1})
    time.sleep(2.5)
    client.put(key, {"b": 2}, policy={"exists": aerospike.POLICY_EXISTS_CREATE})
    _, meta, bins = client.get(key)
    assert bins == {"b": 2}, "expired bins must not come back"
    assert meta["gen"] == 1


def test_update_only_on_expired_record_fails(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 1})
    time.sleep(2.5)
    with pytest.raises(ex.RecordNotFound):
        client.put(key, {"a": 2}, policy={"exists": aerospike.POLICY_EXISTS_UPDATE})
    with pytest.raises(ex.RecordNotFound):
        client.touch(key, 100)


def test_background_sweep_removes_expired_records(start_server):
    """With nsup-period 1 the sweep deletes expired records without anyone
    reading them: objects goes down and expired_objects goes up."""
    srv = start_server(namespace={"nsup-period": "1"})
    c = srv.client()
    before = ns_stats(c)
    assert before["objects"] == "0"
    assert int(before["expired_objects"]) == 0
    assert before["nsup-period"] == "1"
    for i in range(20):
        c.put((NS, SET, f"exp-{i}"), {"i": i}, meta={"ttl": 2})
    for i in range(5):
        c.put((NS, SET, f"keep-{i}"), {"i": i}, meta={"ttl": aerospike.TTL_NEVER_EXPIRE})
    assert ns_stats(c)["objects"] == "25"

    def swept():
        s = ns_stats(c)
        return s if s["objects"] == "5" and int(s["expired_objects"]) == 20 else False

    s = wait_for(swept, timeout=15, interval=0.25, what="nsup sweep (objects 25 -> 5, expired_objects 0 -> 20)")
    assert int(s["expired_objects"]) == 20
    for i in range(5):
        _, _, bins = c.get((NS, SET, f"keep-{i}"))
        assert bins == {"i": i}
    sets = c.info_random_node("sets")
    assert "set=pytest:objects=5:" in sets, sets


def test_shared_server_expired_objects_counter(client, make_key):
    before = int(ns_stats(client)["expired_objects"])
    keys = [make_key(str(i)) for i in range(3)]
    for k in keys:
        client.put(k, {"x": 1}, meta={"ttl": 1})
    wait_for(
        lambda: int(ns_stats(client)["expired_objects"]) >= before + 3,
        timeout=15, interval=0.25, what="expired_objects to grow by 3",
    )
    for k in keys:
        assert client.exists(k)[1] is None
