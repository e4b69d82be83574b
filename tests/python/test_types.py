"""Every bin type round-trips exactly."""

import math

import aerospike
import pytest

from helpers import NS, SET

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    "value",
    [0, 1, -1, 42, -123456789, 2**31, -(2**31) - 1, 2**53 + 1, I64_MIN, I64_MAX],
)
def test_int_roundtrip(client, key, value):
    client.put(key, {"i": value})
    _, _, bins = client.get(key)
    assert type(bins["i"]) is int
    assert bins["i"] == value


@pytest.mark.parametrize(
    "value",
    [0.0, 1.5, -2.75, 3.141592653589793, 1e-300, -1e300, 1.7976931348623157e308, 5e-324],
)
def test_float_roundtrip(client, key, value):
    client.put(key, {"f": value})
    _, _, bins = client.get(key)
    assert type(bins["f"]) is float
    assert bins["f"] == value
    assert math.copysign(1.0, bins["f"]) == math.copysign(1.0, value)


def test_float_negative_zero_and_inf(client, key):
    client.put(key, {"nz": -0.0, "inf": float("inf"), "ninf": float("-inf")})
    _, _, bins = client.get(key)
    assert bins["nz"] == 0.0 and math.copysign(1.0, bins["nz"]) == -1.0
    assert bins["inf"] == float("inf")
    assert bins["ninf"] == float("-inf")


@pytest.mark.parametrize(
    "value",
    ["", "plain ascii", "café naïve", "日本語テキスト", "emoji 🚀🔥", "x" * 10000],
    ids=["empty", "ascii", "latin", "cjk", "emoji", "long"],
)
def test_string_roundtrip(client, key, value):
    client.put(key, {"s": value})
    _, _, bins = client.get(key)
    assert type(bins["s"]) is str
    assert bins["s"] == value


@pytest.mark.parametrize(
    "value",
    [bytearray(b"\x00\x01\x02\xff"), bytearray(bytes(range(256)) * 4), b"immutable bytes \x00\xfe", bytearray(b"\x00")],
    ids=["small", "all-bytes", "bytes-type", "single-zero"],
)
def test_blob_roundtrip(client, key, value):
    client.put(key, {"b": value})
    _, _, bins = client.get(key)
    assert isinstance(bins["b"], (bytes, bytearray))
    assert bytes(bins["b"]) == bytes(value)


def test_bool_roundtrip(server, key):
    c = server.client(send_bool_as=aerospike.AS_BOOL)
    c.put(key, {"t": True, "f": False})
    _, _, bins = c.get(key)
    assert bins["t"] is True
    assert bins["f"] is False


def test_list_roundtrip(client, key):
    value = [1, -2, 3.5, "str", "ünï", bytearray(b"\x00\xff"), [1, [2, [3]]], {"k": "v"}, None, True, False,
             I64_MIN, I64_MAX, ""]
    client.put(key, {"l": value})
    _, _, bins = client.get(key)
    got = bins["l"]
    assert isinstance(got, list)
    assert len(got) == len(value)
    assert got[:5] == value[:5]
    assert bytes(got[5]) == b"\x00\xff"
    assert got[6:] == value[6:]


def test_empty_list_and_map(client, key):
    client.put(key, {"l": [], "m": {}})
    _, _, bins = client.get(key)
    assert bins == {"l": [], "m": {}}


def test_nested_map_roundtrip(client, key):
    value = {
        "name": "n",
        "int": 7,
        "neg": -7,
        "float": 0.125,
        "list": [1, "two", 3.0, [4]],
        "nested": {"deep": {"deeper": {"x": [1, {"y": "z"}]}}},
        1: "int key",
        -5: "negative int key",
        "none": None,
        "bool": True,
    }
    client.put(key, {"m": value})
    _, _, bins = client.get(key)
    assert bins["m"] == value


def test_large_list_and_map(client, key):
    lst = list(range(5000))
    mp = {f"k{i}": i for i in range(2000)}
    client.put(key, {"l": lst, "m": mp})
    _, _, bins = client.get(key)
    assert bins["l"] == lst
    assert bins["m"] == mp


def test_geojson_roundtrip(client, key):
    point = aerospike.GeoJSON({"type": "Point", "coordinates": [-122.5, 37.25]})
    poly = aerospike.GeoJSON(
        {"type": "Polygon", "coordinates": [[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]]}
    )
    client.put(key, {"p": point, "poly": poly})
    _, _, bins = client.get(key)
    assert isinstance(bins["p"], aerospike.GeoJSON)
    assert bins["p"].unwrap() == {"type": "Point", "coordinates": [-122.5, 37.25]}
    assert isinstance(bins["poly"], aerospike.GeoJSON)
    assert bins["poly"].unwrap() == poly.unwrap()


def test_all_types_in_one_record(server, key):
    c = server.client(send_bool_as=aerospike.AS_BOOL)
    bins_in = {
        "int": I64_MIN,
        "float": -1.25,
        "str": "ßtring",
        "blob": bytearray(b"\x10\x20"),
        "bool": True,
        "list": [1, "a", [2.5]],
        "map": {"a": {"b": [1, 2]}},
        "geo": aerospike.GeoJSON({"type": "Point", "coordinates": [1.0, 2.0]}),
    }
    c.put(key, bins_in)
    _, meta, got = c.get(key)
    assert meta["gen"] == 1
    assert set(got) == set(bins_in)
    for name in ("int", "float", "str", "bool", "list", "map"):
        assert got[name] == bins_in[name], name
    assert bytes(got["blob"]) == b"\x10\x20"
    assert got["geo"].unwrap() == bins_in["geo"].unwrap()
    # select a subset keeps exact types too
    _, _, sel = c.select(key, ["int", "bool", "geo"])
    assert sel["int"] == I64_MIN and sel["bool"] is True
    assert sel["geo"].unwrap() == {"type": "Point", "coordinates": [1.0, 2.0]}


def test_many_bins(client, key):
    bins_in = {f"bin{i:03d}": i for i in range(200)}
    client.put(key, bins_in)
    _, _, got = client.get(key)
    assert got == bins_in


def test_bin_name_exactly_15_bytes_ok(client, key):
    name = "b" * 15
    client.put(key, {name: 1})
    _, _, got = client.get(key)
    assert got == {name: 1}
