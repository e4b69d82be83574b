"""What the official Python client sees where Aerospike 8.1 answers in a
particular way (issue 23 §1): info commands on names that do not exist or
do not fit, list and map results in the server's order, nil operands,
stream UDF arguments, filters on records that lack the bin, and read-touch
in a batch. The expected values and result codes follow the Aerospike 8.1
server (`thr_info.c`, `sindex_manager.c`, `truncate.c`, `udf_cask.c`,
`particle.c`, `cdt.c`, `particle_list.c`, `particle_map.c`) and the
client's own tests where they pin one down."""

import time
import uuid

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers import cdt_ctx
from aerospike_helpers import expressions as exp
from aerospike_helpers.operations import expression_operations as expr_ops
from aerospike_helpers.operations import list_operations as lo
from aerospike_helpers.operations import map_operations as mo
from aerospike_helpers.operations import operations as op

from helpers import NS, info_value

VALUE = aerospike.LIST_RETURN_VALUE
RANK = aerospike.LIST_RETURN_RANK
INDEX = aerospike.LIST_RETURN_INDEX


def one(client, key, operation):
    _, _, bins = client.operate(key, [operation])
    return bins.get(operation["bin"])


@pytest.fixture
def fresh_set(client):
    name = f"a{uuid.uuid4().hex[:10]}"
    yield name
    client.truncate(NS, name, 0)


# ----------------------------------------------------------- info commands


def test_index_create_in_a_namespace_that_does_not_exist(client):
    # The server accepts the definition ("ok": nodes holding the namespace
    # build it); the client then waits for the build and hears
    # "namespace not found on node" (20).
    with pytest.raises(ex.NamespaceNotFound) as error:
        client.index_integer_create("no_such_ns", "demo", "age", "age_index")
    assert error.value.code == 20
    with pytest.raises(ex.NamespaceNotFound):
        client.index_string_create("no_such_ns", "demo", "name", "name_index")
    assert info_value(
        client, "sindex-create:namespace=no_such_ns;indexname=x;bin=b;type=numeric"
    ) == "ok"
    with pytest.raises(ex.NamespaceNotFound):
        client.info_random_node("sindex-stat:namespace=no_such_ns;indexname=x")
    # Nothing was built here.
    assert "no_such_ns" not in client.info_random_node("sindex-list")


def test_index_create_with_a_name_or_bin_too_long(client, fresh_set):
    # A value that does not fit the server's parameter buffer is a bad
    # parameter (4): an index name of 64 bytes, a bin name of 16.
    with pytest.raises(ex.InvalidRequest) as error:
        client.index_integer_create(NS, fresh_set, "age", "i" * 64)
    assert error.value.code == 4
    with pytest.raises(ex.InvalidRequest) as error:
        client.index_integer_create(NS, fresh_set, "b" * 16, "long_bin_index")
    assert error.value.code == 4
    # The longest that fit are taken.
    name = "i" * 63
    client.index_integer_create(NS, fresh_set, "b" * 15, name)
    try:
        assert f"indexname={name}" in client.info_random_node(f"sindex-list:namespace={NS}")
    finally:
        client.index_remove(NS, name)


def test_truncate_of_a_namespace_that_does_not_exist(client):
    # Accepted, as on Aerospike (the truncation is kept for nodes that hold
    # the namespace); a missing or too long name is result 20.
    assert client.truncate("no_such_ns", "a_set", 0) == 0
    assert client.truncate("no_such_ns", None, 0) == 0
    with pytest.raises(ex.NamespaceNotFound):
        client.truncate("", "a_set", 0)
    with pytest.raises(ex.NamespaceNotFound):
        client.info_random_node("truncate-namespace:namespace=" + "n" * 32)


def test_udf_remove_of_a_module_that_does_not_exist(client):
    assert client.udf_remove("some_fake_module_that_does_not_exist") == 0
    assert client.udf_remove("no_such_module.lua") == 0
    names = [udf["name"] for udf in client.udf_list()]
    assert "no_such_module.lua" not in names


# ----------------------------------------------------------- list and map order


def test_list_rank_ranges_come_in_the_servers_heap_order(client, key):
    client.put(key, {"l": [7, 6, 5, 8, 9, 10]})
    # From the low end (rank 0..3, three elements after it): highest first.
    assert one(client, key, lo.list_get_by_rank_range("l", 0, VALUE, 3)) == [7, 6, 5]
    # Nearer the high end: lowest first.
    assert one(client, key, lo.list_get_by_rank_range("l", 2, VALUE)) == [7, 8, 9, 10]
    # Indexes and ranks come in ascending order whatever the values' order.
    assert one(client, key, lo.list_get_by_rank_range("l", 0, INDEX, 3)) == [0, 1, 2]
    assert one(client, key, lo.list_get_by_rank_range("l", 0, RANK, 3)) == [0, 1, 2]
    assert one(client, key, lo.list_get_by_rank_range("l", 0, aerospike.LIST_RETURN_REVERSE_RANK, 3)) == [5, 4, 3]
    # The inverse comes in list order.
    assert one(client, key, lo.list_get_by_rank_range("l", 0, VALUE, 3, True)) == [8, 9, 10]
    # A remove answers like the get and leaves the rest in order.
    assert one(client, key, lo.list_remove_by_rank_range("l", 0, VALUE, 3)) == [7, 6, 5]
    assert client.get(key)[2]["l"] == [8, 9, 10]


def test_list_relative_rank_ranges(client, key):
    client.put(key, {"l": [26, 27, 28, 3]})
    # Ranks 1..3 of four (from the value 26): taken from the low end.
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 26, 0, VALUE, 2)) == [27, 26]
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 26, 1, VALUE)) == [27, 28]
    assert one(client, key, lo.list_remove_by_value_rank_range_relative("l", 26, 0, VALUE, 2)) == [27, 26]
    assert client.get(key)[2]["l"] == [28, 3]


def test_list_by_value_list_and_index_range_ranks(client, key):
    client.put(key, {"l": ["numbers", [1, 2, 3]]})
    # Ranks in the order the values were asked for.
    assert one(client, key, lo.list_get_by_value_list("l", [[1, 2, 3], "numbers"], RANK)) == [1, 0]
    assert one(client, key, lo.list_get_by_value_list("l", [[1, 2, 3], "numbers"], INDEX)) == [0, 1]
    assert one(client, key, lo.list_get_by_value_list("l", ["numbers", [1, 2, 3]], VALUE)) == ["numbers", [1, 2, 3]]
    client.put(key, {"l": ["how", "are", ["you"]]})
    # Ranks of an index range, element by element in list order.
    assert one(client, key, lo.list_get_by_index_range("l", 0, RANK, 2)) == [1, 0]
    assert one(client, key, lo.list_remove_by_index_range("l", 2, RANK, 1, True)) == [1, 0]
    assert client.get(key)[2]["l"] == [["you"]]


def test_nested_contexts_answer_like_the_top_level(client, key):
    nested = [["hi", "friend", ["how", "are", ["you"]]], ["hey", ["numbers", [1, 2, 3]], "home boy"]]
    client.put(key, {"l": nested})
    ctx = [cdt_ctx.cdt_ctx_list_index(0), cdt_ctx.cdt_ctx_list_index(2)]
    assert one(client, key, lo.list_get_by_index_range("l", 0, RANK, 2, ctx=ctx)) == [1, 0]
    ctx = [cdt_ctx.cdt_ctx_list_index(1), cdt_ctx.cdt_ctx_list_index(1)]
    assert one(client, key, lo.list_get_by_value_list("l", [[1, 2, 3], "numbers"], RANK, ctx=ctx)) == [1, 0]
    # A return type the server does not know is not applicable (26), under
    # a context as at the top.
    for operation in (
        lo.list_get_by_index_range("l", 1, 42, 1, ctx=[cdt_ctx.cdt_ctx_list_index(1)]),
        lo.list_get_by_rank_range("l", 1, 42, 1, ctx=[cdt_ctx.cdt_ctx_list_index(1)]),
        lo.list_remove_by_index_range("l", 1, 42, 1, ctx=[cdt_ctx.cdt_ctx_list_index(1)]),
        lo.list_remove_by_rank_range("l", 1, 42, 1, ctx=[cdt_ctx.cdt_ctx_list_index(1)]),
        lo.list_get_by_index_range("l", 0, 42, 1),
    ):
        with pytest.raises(ex.OpNotApplicable):
            client.operate(key, [operation])
    assert client.get(key)[2]["l"] == nested


def test_map_rank_ranges_and_their_inverse(client, key):
    inner = {"cat": "dog", "barn": {"horse": "shoe", "fish": "pond"}, "cage": ["bird"]}
    client.put(key, {"m": {"third": {"one": inner, "two": []}}})
    ctx = [cdt_ctx.cdt_ctx_map_key("third"), cdt_ctx.cdt_ctx_map_rank(1)]
    value = {"horse": "shoe", "fish": "pond"}
    V = aerospike.MAP_RETURN_VALUE
    # The inverse of a range touching an end is the range from the other
    # end, answered in value order: "dog" < ["bird"].
    got = one(client, key, mo.map_get_by_value_rank_range_relative("m", value, 0, V, 2, True, ctx))
    assert got == ["dog", ["bird"]]
    got = one(client, key, mo.map_remove_by_value_rank_range_relative("m", value, 0, V, 2, True, ctx))
    assert got == ["dog", ["bird"]]
    assert client.get(key)[2]["m"]["third"]["one"] == {"barn": value}


def test_map_ranges_answer_in_the_servers_order(client, key):
    client.put(key, {"m": {"a": 5, "b": 1, "c": 4, "d": 2, "e": 3}})
    K = aerospike.MAP_RETURN_KEY
    # A rank range: in value order.
    assert one(client, key, mo.map_get_by_rank_range("m", 0, 3, K)) == ["b", "d", "e"]
    assert one(client, key, mo.map_get_by_rank_range("m", 0, 3, aerospike.MAP_RETURN_INDEX)) == [1, 3, 4]
    # Its inverse (not touching an end): as stored.
    assert one(client, key, mo.map_get_by_rank_range("m", 1, 3, K, True)) == ["a", "b"]
    # Values found by a list of values: as stored, ranks in the asked order.
    assert one(client, key, mo.map_get_by_value_list("m", [4, 1], K)) == ["b", "c"]
    assert one(client, key, mo.map_get_by_value_list("m", [4, 1], aerospike.MAP_RETURN_RANK)) == [3, 0]
    assert one(client, key, mo.map_remove_by_rank_range("m", 0, 2, K)) == ["b", "d"]
    assert client.get(key)[2]["m"] == {"a": 5, "c": 4, "e": 3}


# ----------------------------------------------------------- nil operands


def test_prepend_append_and_increment_of_nil_are_bad_parameters(client, key):
    client.put(key, {"name": "John", "no": 3})
    for operator in (aerospike.OPERATOR_PREPEND, aerospike.OPERATOR_APPEND, aerospike.OPERATOR_INCR):
        for bin_name in ("no", "name", "missing"):
            with pytest.raises(ex.InvalidRequest) as error:
                client.operate(key, [{"op": operator, "bin": bin_name, "val": aerospike.null()}])
            assert error.value.code == 4
    assert client.get(key)[2] == {"name": "John", "no": 3}


def test_value_range_with_a_nil_end_is_empty(client, key):
    client.put(key, {"l": ["b", "d", "f"]})
    # nil is the lowest value: [b, nil) holds nothing, in expressions ...
    expression = exp.ListRemoveByValueRange(None, "b", aerospike.null(), "l")
    _, _, bins = client.operate(key, [expr_ops.expression_read("r", expression.compile())])
    assert bins["r"] == ["b", "d", "f"]
    # ... and with no end (CDTInfinite for an expression) it reaches the top.
    expression = exp.ListRemoveByValueRange(None, "c", None, "l")
    _, _, bins = client.operate(key, [expr_ops.expression_read("r", expression.compile())])
    assert bins["r"] == ["b"]
    # An operate op with no end has none.
    assert one(client, key, lo.list_get_by_value_range("l", VALUE, "c", None)) == ["d", "f"]


def test_modifying_list_expressions_on_a_sorted_list(client, key):
    client.put(key, {"l": ["b", "d", "f"]})
    read = lambda expression: client.operate(key, [expr_ops.expression_read("r", expression.compile())])[2]["r"]
    assert read(exp.ListRemoveByValueRange(None, "b", aerospike.null(),
                                           exp.ListRemoveByValueRelRankToEnd(None, "f", 0, "l"))) == ["b", "d"]
    assert read(exp.ListRemoveByValueRelRankRange(None, "d", 0, 2, exp.ListRemoveByIndex(None, 0, "l"))) == []
    assert read(exp.ListRemoveByRankRange(None, 1, 2, "l")) == ["b"]
    assert client.get(key)[2]["l"] == ["b", "d", "f"]


def test_get_by_value_rel_rank_range_in_expressions(client, fresh_set):
    for i in range(4):
        client.put((NS, fresh_set, i), {"l": [26, 27, 28, i]})
    keys = [(NS, fresh_set, i) for i in range(4)]
    relative = exp.ListGetByValueRelRankRange(None, aerospike.LIST_RETURN_VALUE, 26, 0, 2, "l")
    records = client.batch_read(keys, policy={"expressions": exp.Eq(relative, [27, 26]).compile()}).batch_records
    assert [r.result for r in records] == [0, 0, 0, 0]
    _, _, bins = client.operate(keys[0], [expr_ops.expression_read("r", relative.compile())])
    assert bins["r"] == [27, 26]


# ----------------------------------------------------------- stream UDF arguments

STREAM_ARGS = """
local function add(a, b) return a + b end

function over(s, bin, low)
    local function keep(r) return r[bin] > low end
    local function one(r) return 1 end
    return s:filter(keep):map(one):reduce(add)
end

function seen(s, a, b, c)
    local function pick(r) return list{type(a), a, b, c} end
    local function first(x, y) return x end
    return s:map(pick):reduce(first)
end
"""


def test_stream_udfs_receive_their_arguments(client, fresh_set, tmp_path):
    path = tmp_path / f"args{uuid.uuid4().hex[:8]}.lua"
    path.write_text(STREAM_ARGS)
    client.udf_put(str(path))
    module = path.stem
    try:
        for i in range(10):
            client.put((NS, fresh_set, i), {"n": i})
        query = client.query(NS, fresh_set)
        query.apply(module, "over", ["n", 6])
        assert query.results() == [3]
        query = client.query(NS, fresh_set)
        query.apply(module, "seen", [7, "text", [1, {"k": 2}]])
        assert query.results() == [["number", 7, "text", [1, {"k": 2}]]]
    finally:
        client.udf_remove(path.name)


def test_apply_with_an_empty_module_and_function_is_a_udf_error(client, key):
    client.put(key, {"n": 1})
    # Empty names fit the server's buffers: the call runs and finds no
    # module (100), it is not a bad request.
    with pytest.raises(ex.UDFError) as error:
        client.apply(key, "", "", ["n"])
    assert error.value.code == 100
    with pytest.raises(ex.UDFError):
        client.apply(key, "no_such_module", "", [])
    assert client.get(key)[2] == {"n": 1}


# ----------------------------------------------------------- filters on missing bins


def test_string_filters_skip_records_without_the_bin(client, fresh_set):
    for i in range(6):
        bins = {"n": i}
        if i % 2 == 0:
            bins["s"] = f"v{i}"
        client.put((NS, fresh_set, i), bins)
    cases = [
        (exp.NE(exp.StrBin("s"), "v2"), [0, 4]),
        (exp.CmpRegex(0, "v.*", exp.StrBin("s")), [0, 2, 4]),
        (exp.Not(exp.Eq(exp.StrBin("s"), "v2")), [0, 4]),
    ]
    for expression, expected in cases:
        policy = {"expressions": expression.compile()}
        assert sorted(r[2]["n"] for r in client.query(NS, fresh_set).results(policy)) == expected
        assert sorted(r[2]["n"] for r in client.scan(NS, fresh_set).results(policy)) == expected
        records = client.batch_read([(NS, fresh_set, i) for i in range(6)], policy=policy).batch_records
        assert [i for i, r in enumerate(records) if r.result == 0] == expected


# ----------------------------------------------------------- read-touch in a batch


def test_read_touch_ttl_percent_in_a_batch_as_on_a_single_read(client, fresh_set):
    keys = [(NS, fresh_set, i) for i in range(3)]
    for k in keys:
        client.put(k, {"n": 1}, meta={"ttl": 100})
    time.sleep(2.2)
    before = [client.get(k)[1]["ttl"] for k in keys]
    assert all(ttl <= 98 for ttl in before), before
    # 1%: not due, nothing moves.
    client.get(keys[0], policy={"read_touch_ttl_percent": 1})
    client.batch_read(keys[1:], policy={"read_touch_ttl_percent": 1})
    assert [client.get(k)[1]["ttl"] for k in keys] == before
    # 100%: due at once, the TTL starts again, for a single read and for
    # every row of a batch.
    client.get(keys[0], policy={"read_touch_ttl_percent": 100})
    client.batch_read(keys[1:2], policy={"read_touch_ttl_percent": 100})
    client.batch_operate(keys[2:], [op.read("n")], policy_batch={"read_touch_ttl_percent": 100})
    after = [client.get(k)[1]["ttl"] for k in keys]
    assert all(ttl >= 99 for ttl in after), after
    # The touch keeps the generation.
    assert all(client.get(k)[1]["gen"] == 1 for k in keys)
