"""HyperLogLog operations on HLL bins through the official Python client
(aerospike_helpers.operations.hll_operations) and in expressions, with the
server's result codes; the sketch bytes checked against an independent
model of the server's layout; hostile HLL operands on a raw socket."""

import struct

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers import expressions as exp
from aerospike_helpers.operations import hll_operations as hll
from aerospike_helpers.operations import operations as ops

import wire
from helpers import NS, SET

MASK = (1 << 64) - 1


def murmur3_x64_128(data: bytes):
    """MurmurHash3 x64-128, seed 0 (the reference algorithm)."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & MASK

    def fmix(k):
        k ^= k >> 33
        k = (k * 0xFF51AFD7ED558CCD) & MASK
        k ^= k >> 33
        k = (k * 0xC4CEB9FE1A85EC53) & MASK
        return k ^ (k >> 33)

    h1 = h2 = 0
    n = len(data) // 16
    for i in range(n):
        k1, k2 = struct.unpack_from("<QQ", data, i * 16)
        h1 ^= (rotl((k1 * c1) & MASK, 31) * c2) & MASK
        h1 = (rotl(h1, 27) + h2) & MASK
        h1 = (h1 * 5 + 0x52DCE729) & MASK
        h2 ^= (rotl((k2 * c2) & MASK, 33) * c1) & MASK
        h2 = (rotl(h2, 31) + h1) & MASK
        h2 = (h2 * 5 + 0x38495AB5) & MASK
    tail = data[n * 16:]
    k1 = int.from_bytes(tail[:8], "little")
    k2 = int.from_bytes(tail[8:], "little")
    if len(tail) > 8:
        h2 ^= (rotl((k2 * c2) & MASK, 33) * c1) & MASK
    if tail:
        h1 ^= (rotl((k1 * c1) & MASK, 31) * c2) & MASK
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & MASK
    h2 = (h2 + h1) & MASK
    h1, h2 = fmix(h1), fmix(h2)
    h1 = (h1 + h2) & MASK
    h2 = (h2 + h1) & MASK
    return h1, h2


def model_sketch(strings, index_bits, minhash_bits):
    """The sketch the server builds: header, then 2^index_bits registers of
    6 + minhash_bits bits, most significant bit first."""
    n_bits = 6 + minhash_bits
    registers = [0] * (1 << index_bits)
    for s in strings:
        element = bytes([0xA0 | (len(s) + 1), 3]) + s.encode()  # fixstr, string type
        h1, h2 = murmur3_x64_128(element)
        r = h1 & ((1 << index_bits) - 1)
        minhash = (h1 >> index_bits) & ((1 << minhash_bits) - 1)
        trailing = (h2 & -h2).bit_length() - 1 if h2 else 64
        value = ((trailing + 1) << minhash_bits) | minhash
        registers[r] = max(registers[r], value)
    bits = "".join(format(v, f"0{n_bits}b") for v in registers)
    bits += "0" * (-len(bits) % 8)
    body = int(bits, 2).to_bytes(len(bits) // 8, "big")
    return bytes([0, index_bits, minhash_bits]) + bytes(8) + body


def test_murmur3_model_matches_the_reference():
    assert murmur3_x64_128(b"hello") == (0xCBD8A7B341BD9B02, 0x5B1E906A48AE1D19)


def test_add_builds_the_servers_sketch(client, key):
    words = ["apple", "banana", "cherry", "date", "elder", "fig", "grape"]
    _, _, bins = client.operate(key, [hll.hll_add("h", words, 6, 4)])
    assert bins["h"] == len(words)  # registers changed
    stored = bytes(client.get(key)[2]["h"])
    assert stored == model_sketch(words, 6, 4)
    # adding them again changes nothing
    _, _, bins = client.operate(key, [hll.hll_add("h", words)])
    assert bins["h"] == 0
    _, _, bins = client.operate_ordered(key, [hll.hll_get_count("h"), hll.hll_describe("h")])
    assert bins == [("h", len(words)), ("h", [6, 4])]


def test_count_union_intersect_similarity(client, make_key):
    a, b = make_key("a"), make_key("b")
    first = [f"e{n}" for n in range(0, 600)]
    second = [f"e{n}" for n in range(300, 900)]
    client.operate(a, [hll.hll_add("h", first, 12, 16)])
    client.operate(b, [hll.hll_add("h", second, 12, 16)])
    _, _, bins = client.operate(a, [hll.hll_get_count("h")])
    assert 570 <= bins["h"] <= 630
    other = client.get(b)[2]["h"]
    _, _, bins = client.operate_ordered(a, [
        hll.hll_get_union_count("h", [other]),
        hll.hll_get_intersect_count("h", [other]),
        hll.hll_get_similarity("h", [other]),
        hll.hll_get_union("h", [other]),
    ])
    union_count, intersect, similarity, union = (v for _, v in bins)
    assert 860 <= union_count <= 940
    assert 240 <= intersect <= 360
    assert 0.25 <= similarity <= 0.42
    assert bytes(union)[:3] == bytes([0, 12, 16])
    # the union sketch written to a bin counts like the union count
    client.operate(a, [hll.hll_set_union("h", [other])])
    _, _, bins = client.operate(a, [hll.hll_get_count("h")])
    assert bins["h"] == union_count


def test_refresh_fold_init_and_codes(client, key):
    client.operate(key, [hll.hll_add("h", ["x", "y", "z"], 10)])
    _, _, bins = client.operate(key, [hll.hll_refresh_count("h")])
    assert bins["h"] == 3
    stored = bytes(client.get(key)[2]["h"])
    assert stored[3:11] == (3).to_bytes(8, "little")  # the cached count
    client.operate(key, [hll.hll_fold("h", 6)])
    _, _, bins = client.operate(key, [hll.hll_describe("h")])
    assert bins["h"] == [6, 0]
    with pytest.raises(ex.OpNotApplicable):  # 26: fold to more index bits
        client.operate(key, [hll.hll_fold("h", 8)])
    with pytest.raises(ex.BinExistsError):  # 6
        client.operate(key, [hll.hll_init("h", 8, policy={"flags": aerospike.HLL_WRITE_CREATE_ONLY})])
    with pytest.raises(ex.BinNotFound):  # 17
        client.operate(key, [hll.hll_init("g", 8, policy={"flags": aerospike.HLL_WRITE_UPDATE_ONLY})])
    with pytest.raises(ex.BinNotFound):  # 17: refresh cannot create
        client.operate(key, [hll.hll_refresh_count("g")])
    with pytest.raises(ex.InvalidRequest):  # 4: index bits out of range
        client.operate(key, [hll.hll_init("g", 17)])
    client.operate(key, [hll.hll_init("h", 8)])  # init resets
    assert bytes(client.get(key)[2]["h"]) == bytes([0, 8, 0]) + bytes(8) + bytes(6 * 256 // 8)
    client.put(key, {"s": "text"})
    with pytest.raises(ex.BinIncompatibleType):  # 12
        client.operate(key, [hll.hll_get_count("s")])


def test_hll_expressions(client, key):
    client.operate(key, [hll.hll_add("h", ["a", "b", "c"], 8)])
    count = exp.HLLGetCount(exp.HLLBin("h"))
    assert client.get(key, {"expressions": exp.Eq(count, 3).compile()})[2]["h"]
    with pytest.raises(ex.FilteredOut):
        client.get(key, {"expressions": exp.Eq(count, 4).compile()})
    contains = exp.HLLMayContain(["a", "b"], exp.HLLBin("h"))
    assert client.get(key, {"expressions": exp.Eq(contains, 1).compile()})[2]["h"]
    described = exp.HLLDescribe(exp.HLLBin("h"))
    _, _, bins = client.operate(key, [ops.read("h"), __import__(
        "aerospike_helpers.operations.expression_operations", fromlist=["x"]
    ).expression_read("d", described.compile())])
    assert bins["d"] == [8, 0]


def _hll_op_msg(key_name, op_type, payload):
    digest = aerospike.calc_digest(NS, SET, key_name)
    op = wire.op_bytes(op_type, 4, b"h", payload)
    info1 = wire.INFO1_READ if op_type == 15 else 0
    info2 = wire.INFO2_WRITE if op_type == 16 else 0
    return wire.as_msg(wire.key_fields(NS, SET, digest), [op], info1=info1, info2=info2)


@pytest.mark.parametrize("op_type,payload,code", [
    (16, b"\x92\x00\x03", 4),                          # index bits 3
    (16, b"\x92\x00\x11", 4),                          # index bits 17
    (16, b"\x93\x00\x08\x03", 4),                      # minhash bits 3
    (16, b"\x93\x00\x10\x33", 4),                      # 16 + 51 bits
    (16, b"\x94\x00\x08\x00\x10", 4),                  # unknown flag
    (16, b"\x92\x01\x90", 4),                          # no elements
    (16, b"\x92\x01\x91\x91\x01", 4),                  # a list element
    (16, b"\x92\x01\x91\xc1", 4),                      # not msgpack
    (16, b"\x92\x02\xc4\x03\x12\x00\x08", 4),          # truncated sketch
    (16, b"\x92\x02\xc4\x0c\x12\x01\x08\x00" + bytes(9), 4),  # sketch flags
    (16, b"\x91\x09", 4),                              # unknown op
    (15, b"\x92\x32\x01", 4),                          # count takes no argument
    (15, b"\x91\x39", 4),                              # may-contain without elements
    (15, b"\x90", 4),
])
def test_hostile_hll_operands(server, client, key, op_type, payload, code):
    client.operate(key, [hll.hll_add("h", ["a"], 8)])
    before = bytes(client.get(key)[2]["h"])
    with wire.connect(server.port) as s:
        s.sendall(_hll_op_msg(key[2], op_type, payload))
        r = wire.read_response(s)
        assert r.result_code == code, r.result_code
    assert server.alive()
    assert bytes(client.get(key)[2]["h"]) == before
