"""Single-record key-value semantics with the official Python client."""

import time

import aerospike
import pytest
from aerospike import exception as ex

from helpers import NS, SET

EXISTS = "exists"
GEN = "gen"


def gen_of(client, key):
    _, meta = client.exists(key)
    assert meta is not None, f"record {key} unexpectedly missing"
    return meta["gen"]


# ----------------------------------------------------------------- basic CRUD
def test_put_get_returns_bins_gen_and_ttl(client, key):
    client.put(key, {"name": "x", "n": 1})
    k, meta, bins = client.get(key)
    assert bins == {"name": "x", "n": 1}
    assert meta["gen"] == 1
    assert "ttl" in meta
    assert k[0] == NS and k[1] == SET
    assert k[3] == aerospike.calc_digest(NS, SET, key[2])


def test_get_missing_raises_record_not_found(client, key):
    with pytest.raises(ex.RecordNotFound) as ei:
        client.get(key)
    assert ei.value.code == 2


def test_put_merges_bins_by_default(client, key):
    client.put(key, {"a": 1, "b": "two"})
    client.put(key, {"b": "deux", "c": 3.5})
    _, meta, bins = client.get(key)
    assert bins == {"a": 1, "b": "deux", "c": 3.5}
    assert meta["gen"] == 2


def test_select_returns_only_named_bins(client, key):
    client.put(key, {"a": 1, "b": "two", "c": [3]})
    _, meta, bins = client.select(key, ["a", "c"])
    assert bins == {"a": 1, "c": [3]}
    assert meta["gen"] == 1
    _, _, bins = client.select(key, ["b", "does_not_exist"])
    assert bins == {"b": "two"}


def test_select_missing_record(client, key):
    with pytest.raises(ex.RecordNotFound) as ei:
        client.select(key, ["a"])
    assert ei.value.code == 2


def test_exists(client, key):
    k, meta = client.exists(key)
    assert meta is None
    client.put(key, {"a": 1})
    client.put(key, {"a": 2})
    k, meta = client.exists(key)
    assert meta is not None
    assert meta["gen"] == 2
    assert meta["ttl"] > 0


def test_remove_then_get_and_remove_missing(client, key):
    client.put(key, {"a": 1})
    client.remove(key)
    with pytest.raises(ex.RecordNotFound):
        client.get(key)
    _, meta = client.exists(key)
    assert meta is None
    with pytest.raises(ex.RecordNotFound) as ei:
        client.remove(key)
    assert ei.value.code == 2


def test_recreate_after_remove_starts_at_gen_1(client, key):
    client.put(key, {"a": 1})
    client.put(key, {"a": 2})
    client.remove(key)
    client.put(key, {"b": 1})
    _, meta, bins = client.get(key)
    assert bins == {"b": 1}
    assert meta["gen"] == 1


def test_write_none_deletes_bin_and_last_bin_deletes_record(client, key):
    client.put(key, {"a": 1, "b": 2})
    client.put(key, {"a": None})
    _, meta, bins = client.get(key)
    assert bins == {"b": 2}
    assert meta["gen"] == 2
    client.put(key, {"b": None})
    with pytest.raises(ex.RecordNotFound):
        client.get(key)


def test_remove_bin(client, key):
    client.put(key, {"a": 1, "b": 2, "c": 3})
    client.remove_bin(key, ["a", "c"])
    _, meta, bins = client.get(key)
    assert bins == {"b": 2}
    assert meta["gen"] == 2


def test_touch_bumps_gen_and_sets_ttl(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 1000})
    client.touch(key, 5000)
    _, meta, bins = client.get(key)
    assert bins == {"a": 1}
    assert meta["gen"] == 2
    assert 4990 <= meta["ttl"] <= 5000, meta


def test_touch_missing_record(client, key):
    with pytest.raises(ex.RecordNotFound) as ei:
        client.touch(key, 100)
    assert ei.value.code == 2


@pytest.mark.parametrize(
    "user_key",
    [12345, -7, "string-key-é", bytearray(b"\x00\x01binary-key\xff")],
    ids=["int", "negative-int", "str", "bytes"],
)
def test_key_types(client, user_key):
    k = (NS, SET, user_key)
    try:
        client.put(k, {"v": repr(user_key)})
        _, meta, bins = client.get(k)
        assert bins == {"v": repr(user_key)}
        assert meta["gen"] == 1
    finally:
        try:
            client.remove(k)
        except ex.RecordNotFound:
            pass


def test_digest_only_key(client, key):
    client.put(key, {"a": "by-key"})
    digest = aerospike.calc_digest(*key)
    _, meta, bins = client.get((NS, SET, None, digest))
    assert bins == {"a": "by-key"}
    assert meta["gen"] == 1


def test_empty_set_name(client):
    k = (NS, None, "no-set-key-bolide")
    k2 = (NS, "other_set", "no-set-key-bolide")
    try:
        client.put(k, {"a": 1})
        _, _, bins = client.get(k)
        assert bins == {"a": 1}
        # same user key in another set is a different record
        with pytest.raises(ex.RecordNotFound):
            client.get(k2)
    finally:
        client.remove(k)


def test_send_key_policy_accepted(client, key):
    client.put(key, {"a": 1}, policy={"key": aerospike.POLICY_KEY_SEND})
    _, meta, bins = client.get(key, policy={"key": aerospike.POLICY_KEY_SEND})
    assert bins == {"a": 1}
    assert meta["gen"] == 1
    client.put(key, {"b": 2}, policy={"key": aerospike.POLICY_KEY_SEND})
    _, meta, bins = client.get(key)
    assert bins == {"a": 1, "b": 2}
    assert meta["gen"] == 2


# ------------------------------------------------------------ exists policies
def test_create_only_on_missing_then_existing(client, key):
    pol = {EXISTS: aerospike.POLICY_EXISTS_CREATE}
    client.put(key, {"a": 1}, policy=pol)
    with pytest.raises(ex.RecordExistsError) as ei:
        client.put(key, {"a": 2}, policy=pol)
    assert ei.value.code == 5
    _, meta, bins = client.get(key)
    assert bins == {"a": 1}, "failed create-only write must not modify the record"
    assert meta["gen"] == 1


def test_update_only(client, key):
    pol = {EXISTS: aerospike.POLICY_EXISTS_UPDATE}
    with pytest.raises(ex.RecordNotFound) as ei:
        client.put(key, {"a": 1}, policy=pol)
    assert ei.value.code == 2
    _, meta = client.exists(key)
    assert meta is None, "failed update-only write must not create the record"
    client.put(key, {"a": 1, "b": 2})
    client.put(key, {"b": 20, "c": 30}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"a": 1, "b": 20, "c": 30}, "update-only merges bins"
    assert meta["gen"] == 2


def test_create_or_replace(client, key):
    pol = {EXISTS: aerospike.POLICY_EXISTS_CREATE_OR_REPLACE}
    client.put(key, {"a": 1, "b": 2}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"a": 1, "b": 2}
    assert meta["gen"] == 1
    client.put(key, {"c": 3}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"c": 3}, "replace must drop bins not in the request"
    assert meta["gen"] == 2


def test_replace_only(client, key):
    pol = {EXISTS: aerospike.POLICY_EXISTS_REPLACE}
    with pytest.raises(ex.RecordNotFound) as ei:
        client.put(key, {"a": 1}, policy=pol)
    assert ei.value.code == 2
    _, meta = client.exists(key)
    assert meta is None
    client.put(key, {"a": 1, "b": 2})
    client.put(key, {"z": "only"}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"z": "only"}
    assert meta["gen"] == 2


def test_exists_ignore_is_upsert(client, key):
    pol = {EXISTS: aerospike.POLICY_EXISTS_IGNORE}
    client.put(key, {"a": 1}, policy=pol)
    client.put(key, {"b": 2}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"a": 1, "b": 2}
    assert meta["gen"] == 2


# -------------------------------------------------------- generation policies
def test_generation_increments_on_every_write(client, key):
    for i in range(1, 8):
        client.put(key, {"i": i})
        _, meta, bins = client.get(key)
        assert meta["gen"] == i
        assert bins == {"i": i}
    client.touch(key, 0)
    assert gen_of(client, key) == 8
    client.put(key, {"j": 1}, policy={EXISTS: aerospike.POLICY_EXISTS_UPDATE})
    assert gen_of(client, key) == 9


def test_generation_eq(client, key):
    pol = {GEN: aerospike.POLICY_GEN_EQ}
    client.put(key, {"a": 1})
    client.put(key, {"a": 2})  # gen 2
    with pytest.raises(ex.RecordGenerationError) as ei:
        client.put(key, {"a": 3}, meta={"gen": 1}, policy=pol)
    assert ei.value.code == 3
    with pytest.raises(ex.RecordGenerationError):
        client.put(key, {"a": 3}, meta={"gen": 3}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"a": 2} and meta["gen"] == 2
    client.put(key, {"a": 3}, meta={"gen": 2}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"a": 3} and meta["gen"] == 3


def test_generation_gt(client, key):
    pol = {GEN: aerospike.POLICY_GEN_GT}
    client.put(key, {"a": 1})
    client.put(key, {"a": 2})
    client.put(key, {"a": 3})  # gen 3
    for bad in (1, 3):
        with pytest.raises(ex.RecordGenerationError) as ei:
            client.put(key, {"a": 99}, meta={"gen": bad}, policy=pol)
        assert ei.value.code == 3
    _, meta, bins = client.get(key)
    assert bins == {"a": 3} and meta["gen"] == 3
    client.put(key, {"a": 4}, meta={"gen": 10}, policy=pol)
    _, meta, bins = client.get(key)
    assert bins == {"a": 4}
    assert meta["gen"] == 4, "gen-GT write increments the stored generation by one"


def test_remove_with_generation(client, key):
    client.put(key, {"a": 1})
    client.put(key, {"a": 2})  # gen 2
    with pytest.raises(ex.RecordGenerationError) as ei:
        client.remove(key, meta={"gen": 1}, policy={GEN: aerospike.POLICY_GEN_EQ})
    assert ei.value.code == 3
    assert gen_of(client, key) == 2
    client.remove(key, meta={"gen": 2}, policy={GEN: aerospike.POLICY_GEN_EQ})
    _, meta = client.exists(key)
    assert meta is None


def test_concurrent_increments_are_atomic(client, key):
    import threading

    from aerospike_helpers.operations import operations as op

    client.put(key, {"n": 0})
    errors = []

    def worker():
        try:
            for _ in range(100):
                client.operate(key, [op.increment("n", 1)])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    _, meta, bins = client.get(key)
    assert bins == {"n": 400}
    assert meta["gen"] == 401


# ------------------------------------------------------------- misc semantics
def test_ttl_above_ten_years_is_parameter_error(client, key):
    with pytest.raises(ex.InvalidRequest) as ei:
        client.put(key, {"a": 1}, meta={"ttl": 315360001})
    assert ei.value.code == 4
    assert client.exists(key)[1] is None
    client.put(key, {"a": 1}, meta={"ttl": 315360000})  # exactly 10 years is allowed
    assert client.exists(key)[1]["ttl"] > 315360000 - 10


def test_truncate_set(client, make_key):
    doomed = [make_key(str(i), set_name="trunc_me") for i in range(5)]
    kept = make_key("kept", set_name="trunc_keep")
    for k in doomed:
        client.put(k, {"v": 1})
    client.put(kept, {"v": 2})
    # last-update times have millisecond resolution and the cut-off is "records
    # updated before now": make sure the writes are in an earlier millisecond
    time.sleep(0.01)
    client.truncate(NS, "trunc_me", 0)
    for k in doomed:
        assert client.exists(k)[1] is None
    assert client.get(kept)[2] == {"v": 2}
    # the set can be written again after a truncate
    client.put(doomed[0], {"v": 3})
    assert client.get(doomed[0])[2] == {"v": 3}


def test_key_mismatch_raw(server, client):
    """A record stored with its user key: a request carrying the same digest
    but a different KEY field is rejected with 19 (KEY_MISMATCH)."""
    import wire

    user_key = "stored-key-km"
    k = (NS, SET, user_key)
    client.put(k, {"a": 1}, policy={"key": aerospike.POLICY_KEY_SEND})
    try:
        digest = aerospike.calc_digest(NS, SET, user_key)
        fields = wire.key_fields(NS, SET, digest) + [wire.field_bytes(wire.FIELD_KEY, b"\x03" + b"other-key")]
        msg = wire.as_msg(fields, [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"a", (2).to_bytes(8, "big"))],
                          info2=wire.INFO2_WRITE)
        with wire.connect(server.port) as s:
            s.sendall(msg)
            r = wire.read_response(s)
        assert r.result_code == 19, r.result_code
        assert client.get(k)[2] == {"a": 1}
    finally:
        client.remove(k)


def test_generation_wraps_to_one(server, client, key):
    """The generation counter is 16 bits and wraps 65535 -> 1 (never 0)."""
    import wire

    client.put(key, {"n": 0})
    digest = aerospike.calc_digest(*key)
    one = wire.as_msg(wire.key_fields(NS, SET, digest),
                      [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"n", (1).to_bytes(8, "big"))],
                      info2=wire.INFO2_WRITE)
    remaining = 65534  # gen 1 -> 65535
    with wire.connect(server.port, timeout=30) as s:
        while remaining:
            batch = min(remaining, 2000)
            s.sendall(one * batch)
            for _ in range(batch):
                r = wire.read_response(s)
                assert r.result_code == 0
            remaining -= batch
        assert r.generation == 65535
        s.sendall(one)
        r = wire.read_response(s)
        assert r.result_code == 0
        assert r.generation == 1, f"generation after 65535 must wrap to 1, got {r.generation}"
    assert client.exists(key)[1]["gen"] == 1


def test_bin_delete_only_write_on_missing_record(client, key):
    """A write whose only op deletes a bin, on a record that does not exist,
    creates nothing and answers NOT_FOUND (2)."""
    with pytest.raises(ex.RecordNotFound) as ei:
        client.put(key, {"a": None})
    assert ei.value.code == 2
    assert client.exists(key)[1] is None


def test_select_only_missing_bins(client, key):
    client.put(key, {"a": 1})
    _, meta, bins = client.select(key, ["zz", "yy"])
    assert not bins, bins
    assert meta["gen"] == 1
