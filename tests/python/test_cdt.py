"""List and map (CDT) operations through operate() with the official client:
exact values, ordering, return types, write flags, nested contexts and
result codes."""

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers import cdt_ctx
from aerospike_helpers.operations import list_operations as lo
from aerospike_helpers.operations import map_operations as mo
from aerospike_helpers.operations import operations as op

INVERTED = True


def one(client, key, operation):
    """Runs one op and returns its result value."""
    _, _, bins = client.operate(key, [operation])
    return bins.get(operation["bin"])


def stored(client, key, name="l"):
    return client.get(key)[2][name]


# --------------------------------------------------------------------------
# Lists: writes
# --------------------------------------------------------------------------
def test_append_creates_record_and_answers_size(client, key):
    assert one(client, key, lo.list_append("l", 1)) == 1
    assert one(client, key, lo.list_append("l", "two")) == 2
    assert one(client, key, lo.list_append_items("l", [3.5, [4], {"k": 5}])) == 5
    assert stored(client, key) == [1, "two", 3.5, [4], {"k": 5}]
    assert client.get(key)[1]["gen"] == 3


def test_insert_negative_index_and_padding(client, key):
    client.put(key, {"l": [1, 2, 3]})
    assert one(client, key, lo.list_insert("l", -1, 9)) == 4
    assert stored(client, key) == [1, 2, 9, 3]
    assert one(client, key, lo.list_insert_items("l", 6, ["a", "b"])) == 8
    assert stored(client, key) == [1, 2, 9, 3, None, None, "a", "b"]


def test_insert_out_of_bounds_and_bounded(client, key):
    client.put(key, {"l": [1, 2]})
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_insert("l", -3, 0)])
    bounded = {"write_flags": aerospike.LIST_WRITE_INSERT_BOUNDED}
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_insert("l", 5, 0, bounded)])
    no_fail = {"write_flags": aerospike.LIST_WRITE_INSERT_BOUNDED | aerospike.LIST_WRITE_NO_FAIL}
    client.operate(key, [lo.list_insert("l", 5, 0, no_fail)])
    assert stored(client, key) == [1, 2]


def test_add_unique_flags(client, key):
    client.put(key, {"l": [1, 2]})
    unique = {"write_flags": aerospike.LIST_WRITE_ADD_UNIQUE}
    with pytest.raises(ex.ElementExistsError):
        client.operate(key, [lo.list_append("l", 2, unique)])
    with pytest.raises(ex.ElementExistsError):
        client.operate(key, [lo.list_append_items("l", [3, 3], unique)])
    no_fail = {"write_flags": aerospike.LIST_WRITE_ADD_UNIQUE | aerospike.LIST_WRITE_NO_FAIL}
    client.operate(key, [lo.list_append_items("l", [2, 3], no_fail)])
    assert stored(client, key) == [1, 2], "all or nothing without PARTIAL"
    partial = {
        "write_flags": aerospike.LIST_WRITE_ADD_UNIQUE
        | aerospike.LIST_WRITE_NO_FAIL
        | aerospike.LIST_WRITE_PARTIAL
    }
    assert one(client, key, lo.list_append_items("l", [2, 3, 4, 3], partial)) == 4
    assert stored(client, key) == [1, 2, 3, 4]


def test_set_pop_remove_trim_clear(client, key):
    client.put(key, {"l": [0, 1, 2, 3, 4, 5, 6]})
    client.operate(key, [lo.list_set("l", 1, "one")])
    assert one(client, key, lo.list_pop("l", -1)) == 6
    assert one(client, key, lo.list_pop_range("l", 0, 2)) == [0, "one"]
    assert one(client, key, lo.list_remove("l", 0)) == 1
    assert stored(client, key) == [3, 4, 5]
    assert one(client, key, lo.list_remove_range("l", 1, 10)) == 2
    assert stored(client, key) == [3]
    client.put(key, {"l": [0, 1, 2, 3, 4, 5]})
    assert one(client, key, lo.list_trim("l", 1, 3)) == 3
    assert stored(client, key) == [1, 2, 3]
    client.operate(key, [lo.list_clear("l")])
    assert stored(client, key) == []
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_pop("l", 0)])


def test_set_past_end_pads(client, key):
    client.put(key, {"l": [1]})
    client.operate(key, [lo.list_set("l", 3, "x")])
    assert stored(client, key) == [1, None, None, "x"]


def test_increment(client, key):
    client.put(key, {"l": [1, 2.5, "s"]})
    assert one(client, key, lo.list_increment("l", 0, 10)) == 11
    assert one(client, key, lo.list_increment("l", 1, 1.25)) == 3.75
    assert one(client, key, lo.list_increment("l", 4, 7)) == 7
    assert stored(client, key) == [11, 3.75, "s", None, 7]
    with pytest.raises(ex.InvalidRequest):
        client.operate(key, [lo.list_increment("l", 2, 1)])


def test_sort_and_order(client, key):
    client.put(key, {"l": [3, "b", 1, "a", 3, None, [1], 2.0, True]})
    client.operate(key, [lo.list_sort("l", aerospike.LIST_SORT_DROP_DUPLICATES)])
    assert stored(client, key) == [None, True, 1, 3, "a", "b", [1], 2.0]
    client.put(key, {"o": [5, 3, 9]})
    client.operate(key, [lo.list_set_order("o", aerospike.LIST_ORDERED)])
    assert stored(client, key, "o") == [3, 5, 9]
    client.operate(key, [lo.list_append("o", 4), lo.list_append_items("o", [10, 0])])
    assert stored(client, key, "o") == [0, 3, 4, 5, 9, 10]
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_insert("o", 0, 1)])
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_set("o", 0, 1)])


def test_ordered_list_created_by_policy(client, key):
    ordered = {"list_order": aerospike.LIST_ORDERED}
    for v in [5, 1, 3]:
        client.operate(key, [lo.list_append("l", v, ordered)])
    assert stored(client, key) == [1, 3, 5]
    # ordered: index == rank
    assert one(client, key, lo.list_get_by_index("l", 0, aerospike.LIST_RETURN_VALUE)) == 1


def test_value_order_across_types(client, key):
    values = [b"\x01", 2.5, {"a": 1}, [0], "s", 7, -3, True, False, None]
    client.put(key, {"l": values})
    ascending = [None, False, True, -3, 7, "s", [0], {"a": 1}, b"\x01", 2.5]
    # Sorting the list orders it by value.
    client.operate(key, [lo.list_sort("l", 0)])
    assert stored(client, key) == ascending
    # A rank range of an unordered list comes back as the server's partial
    # heap sort leaves it: taken from the low end (here: every element),
    # highest first.
    client.put(key, {"l": values})
    got = one(client, key, lo.list_get_by_rank_range("l", 0, aerospike.LIST_RETURN_VALUE))
    assert got == ascending[::-1]


# --------------------------------------------------------------------------
# Lists: reads and return types
# --------------------------------------------------------------------------
L = [5, 1, 4, 1, 3]


def test_size_get_range(client, key):
    client.put(key, {"l": L})
    _, _, bins = client.operate_ordered(
        key, [lo.list_size("l"), lo.list_get("l", -2), lo.list_get_range("l", 1, 3), lo.list_get_range("l", -10, 2)]
    )
    assert [v for _, v in bins] == [5, 1, [1, 4, 1], []]
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_get("l", 5)])
    assert client.get(key)[1]["gen"] == 1, "reads do not write"


@pytest.mark.parametrize(
    "return_type,expected",
    [
        (aerospike.LIST_RETURN_NONE, None),
        (aerospike.LIST_RETURN_INDEX, [1, 3]),
        (aerospike.LIST_RETURN_REVERSE_INDEX, [3, 1]),
        (aerospike.LIST_RETURN_RANK, [0, 1]),
        (aerospike.LIST_RETURN_REVERSE_RANK, [4, 3]),
        (aerospike.LIST_RETURN_COUNT, 2),
        (aerospike.LIST_RETURN_VALUE, [1, 1]),
        (aerospike.LIST_RETURN_EXISTS, True),
    ],
)
def test_get_by_value_return_types(client, key, return_type, expected):
    client.put(key, {"l": L})
    assert one(client, key, lo.list_get_by_value("l", 1, return_type)) == expected


def test_get_by_index_rank_single(client, key):
    client.put(key, {"l": L})
    assert one(client, key, lo.list_get_by_index("l", -1, aerospike.LIST_RETURN_VALUE)) == 3
    assert one(client, key, lo.list_get_by_index("l", 2, aerospike.LIST_RETURN_RANK)) == 3
    assert one(client, key, lo.list_get_by_rank("l", -1, aerospike.LIST_RETURN_VALUE)) == 5
    assert one(client, key, lo.list_get_by_rank("l", 0, aerospike.LIST_RETURN_INDEX)) == 1
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_get_by_index("l", 9, aerospike.LIST_RETURN_VALUE)])
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_get_by_rank("l", -6, aerospike.LIST_RETURN_VALUE)])


def test_get_by_ranges(client, key):
    client.put(key, {"l": L})
    V = aerospike.LIST_RETURN_VALUE
    assert one(client, key, lo.list_get_by_index_range("l", 1, V, 2)) == [1, 4]
    assert one(client, key, lo.list_get_by_index_range("l", 1, V, 2, INVERTED)) == [5, 1, 3]
    assert one(client, key, lo.list_get_by_index_range("l", -2, V)) == [1, 3]
    # A rank range of an unordered list comes back as the server's partial
    # heap sort leaves it: highest first when taken from the low end
    # (rank <= elements after the range), lowest first otherwise.
    assert one(client, key, lo.list_get_by_rank_range("l", 0, V, 3)) == [3, 1, 1]
    assert one(client, key, lo.list_get_by_rank_range("l", -2, V)) == [4, 5]
    assert one(client, key, lo.list_get_by_rank_range("l", 0, V, 2, INVERTED)) == [5, 4, 3]
    assert one(client, key, lo.list_get_by_value_range("l", V, 2, 5)) == [4, 3]
    assert one(client, key, lo.list_get_by_value_range("l", V, 2, 5, INVERTED)) == [5, 1, 1]
    assert one(client, key, lo.list_get_by_value_range("l", aerospike.LIST_RETURN_COUNT, 4, None)) == 2
    assert one(client, key, lo.list_get_by_value_list("l", [1, 5, 8], V)) == [5, 1, 1]
    assert one(client, key, lo.list_get_by_value_list("l", [1, 5], V, INVERTED)) == [4, 3]


def test_get_by_value_rel_rank_range(client, key):
    client.put(key, {"l": [0, 4, 5, 9, 11, 15]})
    V = aerospike.LIST_RETURN_VALUE
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 5, 0, V)) == [5, 9, 11, 15]
    # Relative rank ranges are rank ranges: the same heap order.
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 5, -1, V, 3)) == [9, 5, 4]
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 3, 3, V, 1)) == [11]
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 3, -3, V, 2)) == []
    assert one(client, key, lo.list_get_by_value_rank_range_relative("l", 3, -1, V, 3)) == [5, 4, 0]


def test_wildcard_and_infinite(client, key):
    client.put(key, {"l": [["a", 1], ["b", 2], ["a", 3], 7]})
    V = aerospike.LIST_RETURN_VALUE
    assert one(client, key, lo.list_get_by_value("l", ["a", aerospike.CDTWildcard()], V)) == [["a", 1], ["a", 3]]
    got = one(client, key, lo.list_get_by_value_range("l", V, ["b"], aerospike.CDTInfinite()))
    assert got == [["b", 2]]


# --------------------------------------------------------------------------
# Lists: remove-by
# --------------------------------------------------------------------------
def test_remove_by_ops(client, key):
    client.put(key, {"l": L})
    assert one(client, key, lo.list_remove_by_value("l", 1, aerospike.LIST_RETURN_INDEX)) == [1, 3]
    assert stored(client, key) == [5, 4, 3]
    assert one(client, key, lo.list_remove_by_rank("l", 0, aerospike.LIST_RETURN_VALUE)) == 3
    assert stored(client, key) == [5, 4]
    assert one(client, key, lo.list_remove_by_index("l", 0, aerospike.LIST_RETURN_VALUE)) == 5
    client.put(key, {"l": L})
    assert one(client, key, lo.list_remove_by_value_range("l", aerospike.LIST_RETURN_COUNT, 3, 5)) == 2
    assert stored(client, key) == [5, 1, 1]
    client.put(key, {"l": L})
    # ranks 1..3 are the second 1 and the 3; the rest goes, in index order
    assert one(client, key, lo.list_remove_by_rank_range("l", 1, aerospike.LIST_RETURN_VALUE, 2, INVERTED)) == [5, 1, 4]
    assert stored(client, key) == [1, 3]
    client.put(key, {"l": L})
    got = one(client, key, lo.list_remove_by_index_range("l", 1, aerospike.LIST_RETURN_NONE, 3))
    assert got is None
    assert stored(client, key) == [5, 3]
    client.put(key, {"l": L})
    one(client, key, lo.list_remove_by_value_list("l", [1, 4], aerospike.LIST_RETURN_NONE, INVERTED))
    assert stored(client, key) == [1, 4, 1]
    client.put(key, {"l": L})
    got = one(client, key, lo.list_remove_by_value_rank_range_relative("l", 4, 0, aerospike.LIST_RETURN_VALUE))
    assert got == [4, 5]
    assert stored(client, key) == [1, 1, 3]


def test_remove_on_missing_bin_is_a_noop(client, key):
    client.put(key, {"a": 1})
    _, meta, bins = client.operate(key, [lo.list_pop("l", 0), lo.list_remove_by_value("l", 1, aerospike.LIST_RETURN_COUNT)])
    assert bins.get("l") is None
    assert client.get(key)[2] == {"a": 1}


def test_read_on_missing_bin_and_record(client, key):
    client.put(key, {"a": 1})
    _, _, bins = client.operate(key, [lo.list_size("l")])
    assert bins.get("l") is None
    other = (key[0], key[1], key[2] + "-missing")
    with pytest.raises(ex.RecordNotFound):
        client.operate(other, [lo.list_size("l")])


def test_wrong_bin_types(client, key):
    client.put(key, {"i": 1, "m": {"a": 1}, "l": [1]})
    with pytest.raises(ex.BinIncompatibleType):
        client.operate(key, [lo.list_append("i", 1)])
    with pytest.raises(ex.BinIncompatibleType):
        client.operate(key, [lo.list_size("m")])
    with pytest.raises(ex.BinIncompatibleType):
        client.operate(key, [mo.map_put("l", "k", 1)])
    with pytest.raises(ex.BinIncompatibleType):
        client.operate(key, [mo.map_size("i")])
    assert client.get(key)[1]["gen"] == 1


def test_failed_op_rolls_back_whole_operate(client, key):
    client.put(key, {"l": [1]})
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_append("l", 2), lo.list_get("l", 9)])
    assert stored(client, key) == [1]


def test_cdt_ops_mix_with_plain_ops(client, key):
    _, _, res = client.operate_ordered(
        key,
        [op.write("n", 1), lo.list_append("l", "x"), op.increment("n", 2), lo.list_get("l", 0), op.read("n")],
    )
    values = [v for _, v in res if v is not None]
    assert values == [1, "x", 3]


# --------------------------------------------------------------------------
# Maps
# --------------------------------------------------------------------------
M = {"a": 5, "b": 1, "c": 4, "d": 1, "e": 3}


def put_ordered(client, key, data, order=aerospike.MAP_KEY_ORDERED, name="m"):
    client.operate(key, [mo.map_put_items(name, data, {"map_order": order})])


def test_map_put_size_and_ordered_storage(client, key):
    policy = {"map_order": aerospike.MAP_KEY_ORDERED}
    for k in ["z", "b", "m", "a"]:
        client.operate(key, [mo.map_put("m", k, ord(k), policy)])
    got = stored(client, key, "m")
    assert list(got.keys()) == ["a", "b", "m", "z"]
    assert got == {"a": 97, "b": 98, "m": 109, "z": 122}
    assert one(client, key, mo.map_size("m")) == 4
    assert one(client, key, mo.map_put_items("m", {"c": 1, "a": 0})) == 5


def test_map_write_flags(client, key):
    client.put(key, {"m": {"a": 1}})
    create_only = {"map_write_flags": aerospike.MAP_WRITE_FLAGS_CREATE_ONLY}
    update_only = {"map_write_flags": aerospike.MAP_WRITE_FLAGS_UPDATE_ONLY}
    with pytest.raises(ex.ElementExistsError):
        client.operate(key, [mo.map_put("m", "a", 2, create_only)])
    with pytest.raises(ex.ElementNotFoundError):
        client.operate(key, [mo.map_put("m", "b", 2, update_only)])
    no_fail = {"map_write_flags": aerospike.MAP_WRITE_FLAGS_CREATE_ONLY | aerospike.MAP_WRITE_FLAGS_NO_FAIL}
    client.operate(key, [mo.map_put_items("m", {"a": 9, "b": 2}, no_fail)])
    assert stored(client, key, "m") == {"a": 1}
    partial = {
        "map_write_flags": aerospike.MAP_WRITE_FLAGS_CREATE_ONLY
        | aerospike.MAP_WRITE_FLAGS_NO_FAIL
        | aerospike.MAP_WRITE_FLAGS_PARTIAL
    }
    assert one(client, key, mo.map_put_items("m", {"a": 9, "b": 2}, partial)) == 2
    assert stored(client, key, "m") == {"a": 1, "b": 2}
    client.operate(key, [mo.map_put("m", "a", 3, update_only)])
    assert stored(client, key, "m") == {"a": 3, "b": 2}


def test_map_increment_decrement(client, key):
    client.put(key, {"m": {"n": 1, "f": 1.5, "s": "x"}})
    assert one(client, key, mo.map_increment("m", "n", 4)) == 5
    assert one(client, key, mo.map_decrement("m", "n", 10)) == -5
    assert one(client, key, mo.map_increment("m", "f", 1.0)) == 2.5
    assert one(client, key, mo.map_increment("m", "new", 3)) == 3
    assert stored(client, key, "m") == {"n": -5, "f": 2.5, "s": "x", "new": 3}
    with pytest.raises(ex.InvalidRequest):
        client.operate(key, [mo.map_increment("m", "s", 1)])


def test_map_get_by_key(client, key):
    put_ordered(client, key, M)
    assert one(client, key, mo.map_get_by_key("m", "c", aerospike.MAP_RETURN_VALUE)) == 4
    assert one(client, key, mo.map_get_by_key("m", "c", aerospike.MAP_RETURN_INDEX)) == 2
    assert one(client, key, mo.map_get_by_key("m", "c", aerospike.MAP_RETURN_RANK)) == 3
    assert one(client, key, mo.map_get_by_key("m", "c", aerospike.MAP_RETURN_KEY_VALUE)) == ["c", 4]
    assert one(client, key, mo.map_get_by_key("m", "x", aerospike.MAP_RETURN_VALUE)) is None
    assert one(client, key, mo.map_get_by_key("m", "x", aerospike.MAP_RETURN_INDEX)) == -1
    assert one(client, key, mo.map_get_by_key("m", "x", aerospike.MAP_RETURN_EXISTS)) is False
    assert one(client, key, mo.map_get_by_key("m", "x", aerospike.MAP_RETURN_COUNT)) == 0


def test_map_ranges_and_return_types(client, key):
    # KEY_VALUE results are maps flagged "preserve order", which the client
    # unpacks into a flat [key, value, ...] list.
    put_ordered(client, key, M)
    K, V, KV = aerospike.MAP_RETURN_KEY, aerospike.MAP_RETURN_VALUE, aerospike.MAP_RETURN_KEY_VALUE
    assert one(client, key, mo.map_get_by_key_range("m", "b", "d", K)) == ["b", "c"]
    assert one(client, key, mo.map_get_by_key_range("m", "b", "d", KV)) == ["b", 1, "c", 4]
    assert one(client, key, mo.map_get_by_key_range("m", "b", "d", K, INVERTED)) == ["a", "d", "e"]
    assert one(client, key, mo.map_get_by_key_list("m", ["e", "a", "q"], V)) == [5, 3]
    assert one(client, key, mo.map_get_by_value("m", 1, K)) == ["b", "d"]
    assert one(client, key, mo.map_get_by_value_range("m", 3, 5, K)) == ["c", "e"]
    assert one(client, key, mo.map_get_by_value_list("m", [5, 4], K)) == ["a", "c"]
    assert one(client, key, mo.map_get_by_index("m", -1, KV)) == ["e", 3]
    assert one(client, key, mo.map_get_by_index_range("m", 1, 2, K)) == ["b", "c"]
    assert one(client, key, mo.map_get_by_rank("m", 0, K)) == "b"
    assert one(client, key, mo.map_get_by_rank("m", -1, V)) == 5
    assert one(client, key, mo.map_get_by_rank_range("m", 0, 3, V)) == [1, 1, 3]
    assert one(client, key, mo.map_get_by_rank_range("m", -2, 2, K)) == ["c", "a"]
    assert one(client, key, mo.map_get_by_rank_range("m", 0, 2, aerospike.MAP_RETURN_COUNT, INVERTED)) == 3
    end = aerospike.CDTInfinite()
    assert one(client, key, mo.map_get_by_key_range("m", "b", end, aerospike.MAP_RETURN_REVERSE_INDEX)) == [3, 2, 1, 0]
    # The client sends None as nil, the lowest value: an empty range.
    assert one(client, key, mo.map_get_by_key_range("m", "b", None, aerospike.MAP_RETURN_REVERSE_INDEX)) == []
    assert one(client, key, mo.map_get_by_key_index_range_relative("m", "c", 1, K)) == ["d", "e"]
    assert one(client, key, mo.map_get_by_key_index_range_relative("m", "c", -1, K, 2)) == ["b", "c"]
    assert one(client, key, mo.map_get_by_value_rank_range_relative("m", 3, 1, V)) == [4, 5]
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [mo.map_get_by_index("m", 5, V)])


def test_map_return_map_types(client, key):
    put_ordered(client, key, M)
    got = one(client, key, mo.map_get_by_key_range("m", "c", aerospike.CDTInfinite(), aerospike.MAP_RETURN_ORDERED_MAP))
    assert got == {"c": 4, "d": 1, "e": 3}
    assert list(got.keys()) == ["c", "d", "e"]
    got = one(client, key, mo.map_get_by_value("m", 1, aerospike.MAP_RETURN_UNORDERED_MAP))
    assert got == {"b": 1, "d": 1}


def test_unordered_map_index_is_key_order(client, key):
    client.put(key, {"m": {"z": 1, "a": 2, "m": 3}})
    assert one(client, key, mo.map_get_by_index("m", 0, aerospike.MAP_RETURN_KEY)) == "a"
    assert one(client, key, mo.map_get_by_key("m", "z", aerospike.MAP_RETURN_INDEX)) == 2
    client.operate(key, [mo.map_set_policy("m", {"map_order": aerospike.MAP_KEY_ORDERED})])
    assert list(stored(client, key, "m").keys()) == ["a", "m", "z"]


def test_map_remove_by_ops(client, key):
    put_ordered(client, key, M)
    assert one(client, key, mo.map_remove_by_key("m", "a", aerospike.MAP_RETURN_VALUE)) == 5
    assert one(client, key, mo.map_remove_by_value("m", 1, aerospike.MAP_RETURN_KEY)) == ["b", "d"]
    assert stored(client, key, "m") == {"c": 4, "e": 3}
    put_ordered(client, key, M)
    assert one(client, key, mo.map_remove_by_key_list("m", ["a", "b", "q"], aerospike.MAP_RETURN_COUNT)) == 2
    assert one(client, key, mo.map_remove_by_rank_range("m", 0, 1, aerospike.MAP_RETURN_KEY)) == ["d"]
    assert stored(client, key, "m") == {"c": 4, "e": 3}
    put_ordered(client, key, M)
    one(client, key, mo.map_remove_by_key_range("m", "b", "e", aerospike.MAP_RETURN_NONE, INVERTED))
    assert stored(client, key, "m") == {"b": 1, "c": 4, "d": 1}
    one(client, key, mo.map_remove_by_index("m", 0, aerospike.MAP_RETURN_NONE))
    # None goes as nil, below every value: nothing is in [4, nil).
    one(client, key, mo.map_remove_by_value_range("m", 4, None, aerospike.MAP_RETURN_NONE))
    assert stored(client, key, "m") == {"c": 4, "d": 1}
    one(client, key, mo.map_remove_by_value_range("m", 4, aerospike.CDTInfinite(), aerospike.MAP_RETURN_NONE))
    assert stored(client, key, "m") == {"d": 1}
    client.operate(key, [mo.map_clear("m")])
    assert stored(client, key, "m") == {}
    assert one(client, key, mo.map_size("m")) == 0


def test_map_key_types(client, key):
    client.operate(key, [mo.map_put("m", 10, "ten"), mo.map_put("m", "10", "str"), mo.map_put("m", bytearray(b"\x01"), "b")])
    assert one(client, key, mo.map_get_by_index_range("m", 0, 3, aerospike.MAP_RETURN_VALUE)) == ["ten", "str", "b"]
    with pytest.raises(ex.InvalidRequest):
        client.operate(key, [mo.map_put("m", [1], "list key")])


# --------------------------------------------------------------------------
# Nested contexts
# --------------------------------------------------------------------------
def test_context_list_in_map(client, key):
    client.put(key, {"m": {"a": [3, 1], "b": {"x": [9]}}})
    ctx = [cdt_ctx.cdt_ctx_map_key("a")]
    assert one(client, key, lo.list_append("m", 2, ctx=ctx)) == 3
    assert one(client, key, lo.list_get_by_rank("m", 0, aerospike.LIST_RETURN_VALUE, ctx=ctx)) == 1
    deep = [cdt_ctx.cdt_ctx_map_key("b"), cdt_ctx.cdt_ctx_map_key("x")]
    client.operate(key, [lo.list_insert("m", 0, 8, ctx=deep)])
    assert stored(client, key, "m") == {"a": [3, 1, 2], "b": {"x": [8, 9]}}
    assert one(client, key, mo.map_size("m", ctx=[cdt_ctx.cdt_ctx_map_index(1)])) == 1


def test_context_map_in_list(client, key):
    client.put(key, {"l": [{"n": 1}, {"n": 5}, [7, 8]]})
    client.operate(key, [mo.map_increment("l", "n", 10, ctx=[cdt_ctx.cdt_ctx_list_index(-2)])])
    assert stored(client, key) == [{"n": 1}, {"n": 15}, [7, 8]]
    got = one(client, key, lo.list_get("l", 1, ctx=[cdt_ctx.cdt_ctx_list_value([7, 8])]))
    assert got == 8
    got = one(client, key, mo.map_get_by_key("l", "n", aerospike.MAP_RETURN_VALUE, ctx=[cdt_ctx.cdt_ctx_list_rank(-1)]))
    assert got == 15, "maps order after lists, then by size and pairs"


def test_context_rank_and_value(client, key):
    client.put(key, {"m": {"a": [1], "b": [0, 0], "c": [5]}})
    # Lists compare element by element: [0, 0] < [1] < [5].
    client.operate(key, [lo.list_append("m", 9, ctx=[cdt_ctx.cdt_ctx_map_rank(0)])])
    client.operate(key, [lo.list_append("m", 6, ctx=[cdt_ctx.cdt_ctx_map_value([5])])])
    assert stored(client, key, "m") == {"a": [1], "b": [0, 0, 9], "c": [5, 6]}


def test_context_not_found_and_wrong_type(client, key):
    client.put(key, {"m": {"a": [1]}, "i": 3})
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_append("m", 1, ctx=[cdt_ctx.cdt_ctx_map_key("zz")])])
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_size("m", ctx=[cdt_ctx.cdt_ctx_list_index(0)])])
    with pytest.raises(ex.BinIncompatibleType):
        client.operate(key, [mo.map_size("m", ctx=[cdt_ctx.cdt_ctx_map_key("a")])])
    with pytest.raises(ex.InvalidRequest):
        client.operate(key, [lo.list_size("i", ctx=[cdt_ctx.cdt_ctx_list_index(0)])])


def test_context_create(client, key):
    ctx = [cdt_ctx.cdt_ctx_map_key_create("a", aerospike.MAP_KEY_ORDERED), cdt_ctx.cdt_ctx_map_key_create("b")]
    assert one(client, key, lo.list_append("m", 1, ctx=ctx)) == 1
    assert stored(client, key, "m") == {"a": {"b": [1]}}
    ctx = [cdt_ctx.cdt_ctx_map_key_create("a"), cdt_ctx.cdt_ctx_map_key_create("c")]
    client.operate(key, [mo.map_put("m", "k", "v", ctx=ctx)])
    got = stored(client, key, "m")
    assert got == {"a": {"b": [1], "c": {"k": "v"}}}
    client.put(key, {"l": [1]})
    pad = [cdt_ctx.cdt_ctx_list_index_create(3, aerospike.LIST_UNORDERED, True)]
    client.operate(key, [lo.list_append("l", "x", ctx=pad)])
    assert stored(client, key) == [1, None, None, ["x"]]
    with pytest.raises(ex.OpNotApplicable):
        client.operate(key, [lo.list_append("l", "y", ctx=[cdt_ctx.cdt_ctx_list_index_create(9, aerospike.LIST_UNORDERED, False)])])


def test_unchanged_elements_round_trip(client, key):
    value = [1.5, "é", b"\x00\xff", {"k": [None, True]}, -(2**63), 2**63 - 1]
    client.put(key, {"l": value})
    client.operate(key, [lo.list_append("l", 0), lo.list_pop("l", -1)])
    assert stored(client, key) == value


def test_list_and_map_create_at_context(client, key):
    client.put(key, {"m": {"a": 1}})
    client.operate(
        key,
        [
            lo.list_create("m", aerospike.LIST_ORDERED, False, False, ctx=[cdt_ctx.cdt_ctx_map_key_create("x")]),
            mo.map_create("m", aerospike.MAP_KEY_ORDERED, False, ctx=[cdt_ctx.cdt_ctx_map_key_create("y")]),
        ],
    )
    assert stored(client, key, "m") == {"a": 1, "x": [], "y": {}}
    x = [cdt_ctx.cdt_ctx_map_key("x")]
    client.operate(key, [lo.list_append("m", 5, ctx=x), lo.list_append("m", 2, ctx=x)])
    assert stored(client, key, "m")["x"] == [2, 5], "the created list is ordered"


def test_cdt_ops_in_batch_operate(client, make_key):
    keys = [make_key(str(i)) for i in range(3)]
    for i, k in enumerate(keys[:2]):
        client.put(k, {"l": list(range(i + 2))})
    res = client.batch_operate(keys, [lo.list_append("l", 9), lo.list_get("l", -1)])
    results = [(r.result, r.record[2] if r.record else None) for r in res.batch_records]
    assert results[0] == (0, {"l": 9})
    assert results[1] == (0, {"l": 9})
    assert results[2][0] == 0, "operate with writes creates the missing record"
    assert client.get(keys[1])[2] == {"l": [0, 1, 2, 9]}
    res = client.batch_operate(keys[:2], [lo.list_size("l")])
    assert [r.record[2] for r in res.batch_records] == [{"l": 3}, {"l": 4}]
