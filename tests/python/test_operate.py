"""operate(): several ops in one call, ordering, types and errors."""

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers.operations import operations as op


def test_multi_op_read_sees_earlier_writes(client, key):
    client.put(key, {"n": 1, "s": "abc", "f": 1.5})
    ops = [
        op.increment("n", 5),
        op.append("s", "x"),
        op.prepend("s", "y"),
        op.increment("f", 2.25),
        op.write("w", "new"),
        op.read("n"),
        op.read("s"),
        op.read("f"),
        op.read("w"),
    ]
    _, meta, bins = client.operate(key, ops)
    assert bins == {"n": 6, "s": "yabcx", "f": 3.75, "w": "new"}
    assert meta["gen"] == 2, "one operate with writes = one generation bump"
    _, meta, bins = client.get(key)
    assert bins == {"n": 6, "s": "yabcx", "f": 3.75, "w": "new"}
    assert meta["gen"] == 2


def test_read_only_operate_does_not_bump_generation(client, key):
    client.put(key, {"a": 1, "b": 2})
    _, meta, bins = client.operate(key, [op.read("a"), op.read("b")])
    assert bins == {"a": 1, "b": 2}
    assert meta["gen"] == 1
    assert client.exists(key)[1]["gen"] == 1


def test_read_before_write_sees_old_value(client, key):
    client.put(key, {"n": 10})
    _, _, res = client.operate_ordered(key, [op.read("n"), op.increment("n", 1), op.read("n")])
    values = [v for (_name, v) in res if v is not None]
    assert values == [10, 11], res


def test_operate_creates_missing_record(client, key):
    _, meta, bins = client.operate(key, [op.increment("n", 7), op.append("s", "hi"), op.read("n"), op.read("s")])
    assert bins == {"n": 7, "s": "hi"}
    assert meta["gen"] == 1


def test_increment_on_missing_bin_creates_it(client, key):
    client.put(key, {"a": 1})
    client.operate(key, [op.increment("cnt", -3), op.increment("fl", 0.5)])
    _, meta, bins = client.get(key)
    assert bins == {"a": 1, "cnt": -3, "fl": 0.5}
    assert meta["gen"] == 2


def test_increment_int_wraps(client, key):
    client.put(key, {"n": 2**63 - 1})
    _, _, bins = client.operate(key, [op.increment("n", 1), op.read("n")])
    assert bins["n"] == -(2**63)


def test_append_prepend_bytes(client, key):
    client.put(key, {"b": bytearray(b"\x01\x02")})
    client.operate(key, [op.append("b", bytearray(b"\x03")), op.prepend("b", bytearray(b"\x00"))])
    _, _, bins = client.get(key)
    assert bytes(bins["b"]) == b"\x00\x01\x02\x03"


def test_touch_op_with_ttl_and_read(client, key):
    client.put(key, {"a": 1}, meta={"ttl": 100})
    _, meta, bins = client.operate(key, [op.touch(), op.read("a")], meta={"ttl": 3000})
    assert bins == {"a": 1}
    assert meta["gen"] == 2
    assert 2990 <= meta["ttl"] <= 3000, meta


def test_touch_op_on_missing_record(client, key):
    with pytest.raises(ex.RecordNotFound) as ei:
        client.operate(key, [op.touch()])
    assert ei.value.code == 2


def test_delete_op_removes_record(client, key):
    client.put(key, {"a": 1, "b": 2})
    client.operate(key, [op.delete()])
    with pytest.raises(ex.RecordNotFound):
        client.get(key)


def test_delete_op_then_write_leaves_only_new_bins(client, key):
    client.put(key, {"a": 1, "b": 2})
    client.operate(key, [op.delete(), op.write("c", 3)])
    _, meta, bins = client.get(key)
    assert bins == {"c": 3}


def test_write_none_op_deletes_bin(client, key):
    client.put(key, {"a": 1, "b": 2})
    client.operate(key, [op.write("a", None)])
    _, meta, bins = client.get(key)
    assert bins == {"b": 2}
    assert meta["gen"] == 2


def test_increment_string_bin_is_incompatible(client, key):
    client.put(key, {"s": "text", "n": 1})
    with pytest.raises(ex.BinIncompatibleType) as ei:
        client.operate(key, [op.increment("s", 1)])
    assert ei.value.code == 12
    _, meta, bins = client.get(key)
    assert bins == {"s": "text", "n": 1}, "failed operate must not apply any op"
    assert meta["gen"] == 1


def test_failed_op_is_atomic_with_earlier_ops(client, key):
    client.put(key, {"s": "text", "n": 1})
    with pytest.raises(ex.BinIncompatibleType):
        client.operate(key, [op.increment("n", 100), op.increment("s", 1)])
    _, meta, bins = client.get(key)
    assert bins == {"s": "text", "n": 1}, "whole operate must be rejected"
    assert meta["gen"] == 1


def test_client_increment_api_on_string_bin(client, key):
    client.put(key, {"s": "text"})
    with pytest.raises(ex.BinIncompatibleType) as ei:
        client.increment(key, "s", 1)
    assert ei.value.code == 12


def test_append_to_int_bin_is_incompatible(client, key):
    client.put(key, {"n": 5})
    with pytest.raises(ex.BinIncompatibleType) as ei:
        client.operate(key, [op.append("n", "x")])
    assert ei.value.code == 12


def test_int_increment_on_float_bin_is_incompatible(client, key):
    client.put(key, {"f": 1.5})
    with pytest.raises(ex.BinIncompatibleType) as ei:
        client.operate(key, [op.increment("f", 1)])
    assert ei.value.code == 12


def test_append_string_to_blob_is_incompatible(client, key):
    client.put(key, {"b": bytearray(b"ab")})
    with pytest.raises(ex.BinIncompatibleType) as ei:
        client.operate(key, [op.append("b", "c")])
    assert ei.value.code == 12


def test_client_helpers_append_prepend_increment(client, key):
    client.put(key, {"s": "mid", "n": 10})
    client.append(key, "s", "-end")
    client.prepend(key, "s", "start-")
    client.increment(key, "n", -4)
    _, meta, bins = client.get(key)
    assert bins == {"s": "start-mid-end", "n": 6}
    assert meta["gen"] == 4


def test_operate_with_update_only_policy(client, key):
    with pytest.raises(ex.RecordNotFound):
        client.operate(key, [op.write("a", 1)], policy={"exists": aerospike.POLICY_EXISTS_UPDATE})
    assert client.exists(key)[1] is None


def test_operate_with_generation_policy(client, key):
    client.put(key, {"a": 1})
    with pytest.raises(ex.RecordGenerationError) as ei:
        client.operate(key, [op.write("a", 2)], meta={"gen": 5}, policy={"gen": aerospike.POLICY_GEN_EQ})
    assert ei.value.code == 3
    _, meta, _ = client.operate(key, [op.write("a", 2)], meta={"gen": 1}, policy={"gen": aerospike.POLICY_GEN_EQ})
    assert meta["gen"] == 2


def test_read_only_operate_on_missing_record(client, key):
    with pytest.raises(ex.RecordNotFound) as ei:
        client.operate(key, [op.read("a")])
    assert ei.value.code == 2
    assert client.exists(key)[1] is None


def test_replace_policy_with_modify_op_is_parameter_error(client, key):
    """Replace (CREATE_OR_REPLACE / REPLACE_ONLY) cannot be combined with
    modify ops such as increment: the server answers 4."""
    client.put(key, {"n": 1, "other": "x"})
    for pol in (aerospike.POLICY_EXISTS_CREATE_OR_REPLACE, aerospike.POLICY_EXISTS_REPLACE):
        with pytest.raises(ex.InvalidRequest) as ei:
            client.operate(key, [op.increment("n", 1)], policy={"exists": pol})
        assert ei.value.code == 4
    _, meta, bins = client.get(key)
    assert bins == {"n": 1, "other": "x"}
    assert meta["gen"] == 1


def test_replace_policy_with_plain_writes_in_operate(client, key):
    client.put(key, {"n": 1, "other": "x"})
    client.operate(key, [op.write("n", 5)], policy={"exists": aerospike.POLICY_EXISTS_CREATE_OR_REPLACE})
    _, meta, bins = client.get(key)
    assert bins == {"n": 5}
    assert meta["gen"] == 2


# ---------------------------------------------------------------------------
# Expression operations (EXP_READ 7, EXP_MODIFY 8)
# ---------------------------------------------------------------------------
from aerospike_helpers import expressions as exp  # noqa: E402
from aerospike_helpers.operations import expression_operations as eo  # noqa: E402


def test_expression_read_computes_a_value(client, key):
    client.put(key, {"balance": 50, "l": [3, 4, 5]})
    _, meta, bins = client.operate(key, [
        eo.expression_read("plus", exp.Add(exp.IntBin("balance"), 7).compile()),
        eo.expression_read("head", exp.ListGetByIndexRange(
            None, aerospike.LIST_RETURN_VALUE, 0, 2, exp.ListBin("l")).compile()),
        eo.expression_read("rich", exp.GT(exp.IntBin("balance"), 10).compile()),
    ])
    assert bins == {"plus": 57, "head": [3, 4], "rich": True}
    assert meta["gen"] == 1, "a read-only operate"
    # A value that cannot be computed: 26, unless EVAL_NO_FAIL.
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [eo.expression_read("x", exp.IntBin("missing").compile())])
    _, _, bins = client.operate(key, [eo.expression_read(
        "x", exp.IntBin("missing").compile(), aerospike.EXP_READ_EVAL_NO_FAIL)])
    assert bins == {"x": None}
    # Write flags on a read are a bad request.
    with pytest.raises(ex.InvalidRequest):
        client.operate(key, [eo.expression_read("x", exp.IntBin("balance").compile(),
                                                aerospike.EXP_WRITE_CREATE_ONLY)])


def test_expression_write_stores_the_value_and_sees_earlier_ops(client, key):
    client.put(key, {"balance": 50, "s": "abc"})
    _, meta, bins = client.operate(key, [
        eo.expression_write("balance", exp.Add(exp.IntBin("balance"), 50).compile()),
        op.write("t", 5),
        eo.expression_write("u", exp.Mul(exp.IntBin("t"), 3).compile()),
        op.read("balance"),
        op.read("u"),
    ])
    assert (bins["balance"], bins["u"]) == (100, 15)
    assert meta["gen"] == 2
    assert client.get(key)[2] == {"balance": 100, "s": "abc", "t": 5, "u": 15}
    # Values of every kind are stored as they evaluate: a blob stays a blob,
    # a list a list, a string a string.
    client.put(key, {"b": b"\x00\x01raw", "l": [1, [2]], "m": {"k": "v"}})
    client.operate(key, [
        eo.expression_write("b2", exp.BlobBin("b").compile()),
        eo.expression_write("l2", exp.ListBin("l").compile()),
        eo.expression_write("m2", exp.MapBin("m").compile()),
        eo.expression_write("f", exp.ToFloat(exp.IntBin("u")).compile()),
    ])
    bins = client.get(key)[2]
    assert (bins["b2"], bins["l2"], bins["m2"], bins["f"]) == (b"\x00\x01raw", [1, [2]], {"k": "v"}, 15.0)


def test_expression_write_flags(client, key):
    client.put(key, {"balance": 50, "s": "abc", "t": 1})
    with pytest.raises(ex.BinExistsError):
        client.operate(key, [eo.expression_write("balance", exp.Val(1).compile(), aerospike.EXP_WRITE_CREATE_ONLY)])
    with pytest.raises(ex.BinNotFound):
        client.operate(key, [eo.expression_write("new", exp.Val(1).compile(), aerospike.EXP_WRITE_UPDATE_ONLY)])
    # POLICY_NO_FAIL: the op is skipped, the others go ahead.
    client.operate(key, [
        eo.expression_write("balance", exp.Val(1).compile(),
                            aerospike.EXP_WRITE_CREATE_ONLY | aerospike.EXP_WRITE_POLICY_NO_FAIL),
        op.write("other", "x"),
    ])
    assert client.get(key)[2]["balance"] == 50
    # Nil deletes the bin only with ALLOW_DELETE; without flags it is 26.
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [eo.expression_write("s", exp.Val(None).compile())])
    client.operate(key, [eo.expression_write("t", exp.Val(None).compile(), aerospike.EXP_WRITE_ALLOW_DELETE)])
    assert "t" not in client.get(key)[2]
    # Unknown aborts the whole operate with 26, unless EVAL_NO_FAIL.
    rich = exp.Cond(exp.GT(exp.IntBin("balance"), 1000), exp.Val("rich"), exp.Unknown()).compile()
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [op.write("w", 1), eo.expression_write("s", rich)])
    assert "w" not in client.get(key)[2], "a failed op leaves the record as it was"
    client.operate(key, [eo.expression_write("s", rich, aerospike.EXP_WRITE_EVAL_NO_FAIL)])
    assert client.get(key)[2]["s"] == "abc"


def test_expression_ops_in_batch_operate(client, key):
    keys = [(key[0], key[1], f"{key[2]}-{i}") for i in range(3)]
    for i, k in enumerate(keys):
        client.put(k, {"n": i})
    result = client.batch_operate(keys, [
        eo.expression_write("double", exp.Mul(exp.IntBin("n"), 2).compile()),
        op.read("double"),
    ])
    assert [r.result for r in result.batch_records] == [0, 0, 0]
    assert [r.record[2]["double"] for r in result.batch_records] == [0, 2, 4]
    for k in keys:
        client.remove(k)


def test_expression_write_keeps_the_blob_kind(server, client, key):
    # A blob of another kind than the Python client writes (7, a Java
    # serialized blob), written raw; an expression copies it; the copy must
    # keep kind 7 (it came back as 4 when values lost their kind).
    import wire
    digest = aerospike.calc_digest(*key)
    fields = wire.key_fields(key[0], key[1], digest)
    java_blob = 7
    with wire.connect(server.port) as sock:
        sock.sendall(wire.as_msg(fields, [wire.op_bytes(wire.OP_WRITE, java_blob, b"jb", b"\xac\xed\x00\x05")],
                                 info2=wire.INFO2_WRITE))
        assert wire.read_response(sock).result_code == 0
        client.operate(key, [eo.expression_write("copy", exp.BlobBin("jb").compile())])
        sock.sendall(wire.as_msg(fields, [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
        answer = wire.read_response(sock)
    assert answer.result_code == 0
    assert sorted((name, ptype, value) for _, ptype, name, value in answer.ops) == [
        (b"copy", java_blob, b"\xac\xed\x00\x05"), (b"jb", java_blob, b"\xac\xed\x00\x05")]


def test_modifying_list_and_map_expressions(client, key):
    """Every modifying list and map expression works on a copy of the bin:
    its result is the changed list or map (values worked out by hand from
    the server's documented semantics), the bin is unchanged, and an
    expression write stores the result."""
    original_l = [5, 3, 9, 1, 7]
    original_m = {"a": 1, "b": 5, "c": 3, "d": 9}
    client.put(key, {"l": original_l, "m": original_m})
    lst, mp = exp.ListBin("l"), exp.MapBin("m")
    list_cases = [
        (exp.ListAppend(None, None, 2, lst), [5, 3, 9, 1, 7, 2]),
        (exp.ListAppendItems(None, None, [4, 6], lst), [5, 3, 9, 1, 7, 4, 6]),
        (exp.ListInsert(None, None, 1, 8, lst), [5, 8, 3, 9, 1, 7]),
        (exp.ListInsertItems(None, None, 0, [0, 0], lst), [0, 0, 5, 3, 9, 1, 7]),
        (exp.ListIncrement(None, None, 2, 10, lst), [5, 3, 19, 1, 7]),
        (exp.ListSet(None, None, -1, 100, lst), [5, 3, 9, 1, 100]),
        (exp.ListClear(None, lst), []),
        (exp.ListSort(None, aerospike.LIST_SORT_DEFAULT, lst), [1, 3, 5, 7, 9]),
        (exp.ListRemoveByValue(None, 9, lst), [5, 3, 1, 7]),
        (exp.ListRemoveByValue(None, 9, lst, inverted=True), [9]),
        (exp.ListRemoveByValueList(None, [3, 7], lst), [5, 9, 1]),
        (exp.ListRemoveByValueRange(None, 3, 7, lst), [9, 1, 7]),
        (exp.ListRemoveByValueRelRankToEnd(None, 5, 1, lst), [5, 3, 1]),
        (exp.ListRemoveByValueRelRankRange(None, 5, -1, 2, lst), [9, 1, 7]),
        (exp.ListRemoveByIndex(None, 0, lst), [3, 9, 1, 7]),
        (exp.ListRemoveByIndexRangeToEnd(None, 3, lst), [5, 3, 9]),
        (exp.ListRemoveByIndexRange(None, 1, 2, lst), [5, 1, 7]),
        (exp.ListRemoveByIndexRange(None, 1, 2, lst, inverted=True), [3, 9]),
        (exp.ListRemoveByRank(None, 0, lst), [5, 3, 9, 7]),
        (exp.ListRemoveByRankRangeToEnd(None, 3, lst), [5, 3, 1]),
        (exp.ListRemoveByRankRange(None, 0, 2, lst), [5, 9, 7]),
    ]
    map_cases = [
        (exp.MapPut(None, None, "e", 4, mp), {**original_m, "e": 4}),
        (exp.MapPutItems(None, None, {"a": 10, "z": 0}, mp), {**original_m, "a": 10, "z": 0}),
        (exp.MapIncrement(None, None, "b", 2, mp), {**original_m, "b": 7}),
        (exp.MapClear(None, mp), {}),
        (exp.MapRemoveByKey(None, "a", mp), {"b": 5, "c": 3, "d": 9}),
        (exp.MapRemoveByKeyList(None, ["a", "d"], mp), {"b": 5, "c": 3}),
        (exp.MapRemoveByKeyRange(None, "b", "d", mp), {"a": 1, "d": 9}),
        (exp.MapRemoveByKeyRelIndexRangeToEnd(None, "b", 1, mp), {"a": 1, "b": 5}),
        (exp.MapRemoveByValue(None, 5, mp), {"a": 1, "c": 3, "d": 9}),
        (exp.MapRemoveByValueList(None, [1, 9], mp), {"b": 5, "c": 3}),
        (exp.MapRemoveByValueRange(None, 3, 6, mp), {"a": 1, "d": 9}),
        (exp.MapRemoveByValueRange(None, 3, 6, mp, inverted=True), {"b": 5, "c": 3}),
        (exp.MapRemoveByValueRelRankRangeToEnd(None, 5, 0, mp), {"a": 1, "c": 3}),
        (exp.MapRemoveByIndex(None, 0, mp), {"b": 5, "c": 3, "d": 9}),
        (exp.MapRemoveByIndexRangeToEnd(None, 2, mp), {"a": 1, "b": 5}),
        (exp.MapRemoveByIndexRange(None, 1, 2, mp), {"a": 1, "d": 9}),
        (exp.MapRemoveByRank(None, -1, mp), {"a": 1, "b": 5, "c": 3}),
        (exp.MapRemoveByRankRangeToEnd(None, 2, mp), {"a": 1, "c": 3}),
        (exp.MapRemoveByRankRange(None, 0, 2, mp), {"b": 5, "d": 9}),
    ]
    for expression, expected in list_cases + map_cases:
        _, _, bins = client.operate(key, [eo.expression_read("out", expression.compile())])
        assert bins["out"] == expected, (type(expression).__name__, bins["out"], expected)
    assert client.get(key)[2] == {"l": original_l, "m": original_m}
    # A modified copy in a nested call, and stored by an expression write.
    appended_sorted = exp.ListSort(None, aerospike.LIST_SORT_DEFAULT, exp.ListAppend(None, None, 4, lst))
    client.operate(key, [eo.expression_write("l2", appended_sorted.compile()),
                         eo.expression_write("m2", exp.MapPut(None, None, "k", [1], mp).compile())])
    bins = client.get(key)[2]
    assert bins["l2"] == [1, 3, 4, 5, 7, 9]
    assert bins["m2"] == {**original_m, "k": [1]}
    assert bins["l"] == original_l
