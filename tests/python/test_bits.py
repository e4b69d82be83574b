"""Bit operations on blob bins through the official Python client
(aerospike_helpers.operations.bitwise_operations) and in expressions, with
the server's result codes, and hostile bit operands on a raw socket."""

import struct

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers import expressions as exp
from aerospike_helpers.operations import bitwise_operations as bw
from aerospike_helpers.operations import expression_operations as eo

import wire
from helpers import NS, SET


def put_blob(client, key, data: bytes):
    client.put(key, {"b": bytearray(data)})


def get_blob(client, key) -> bytes:
    return bytes(client.get(key)[2]["b"])


def test_modify_ops_change_only_their_bits(client, key):
    put_blob(client, key, b"\xf0\x0f")
    client.operate(key, [bw.bit_set("b", 2, 6, 1, bytearray(b"\xa8"))])
    assert get_blob(client, key) == bytes([0b1110_1010, 0b0000_1111])
    client.operate(key, [bw.bit_not("b", 0, 16)])
    assert get_blob(client, key) == bytes([0b0001_0101, 0b1111_0000])
    client.operate(key, [bw.bit_or("b", 12, 4, 1, bytearray(b"\xf0"))])
    assert get_blob(client, key) == bytes([0b0001_0101, 0b1111_1111])
    client.operate(key, [bw.bit_xor("b", 8, 8, 1, bytearray(b"\x0f"))])
    assert get_blob(client, key) == bytes([0b0001_0101, 0b1111_0000])
    client.operate(key, [bw.bit_and("b", 0, 8, 1, bytearray(b"\x0f"))])
    assert get_blob(client, key) == bytes([0b0000_0101, 0b1111_0000])
    client.operate(key, [bw.bit_lshift("b", 0, 16, 4)])
    assert get_blob(client, key) == bytes([0b0101_1111, 0b0000_0000])
    client.operate(key, [bw.bit_rshift("b", 4, 8, 2)])
    assert get_blob(client, key) == bytes([0b0101_0011, 0b1100_0000])


def test_resize_insert_remove(client, key):
    put_blob(client, key, b"\x01\x02\x03")
    client.operate(key, [bw.bit_resize("b", 5)])
    assert get_blob(client, key) == b"\x01\x02\x03\x00\x00"
    client.operate(key, [bw.bit_resize("b", 2, resize_flags=aerospike.BIT_RESIZE_FROM_FRONT)])
    assert get_blob(client, key) == b"\x00\x00"
    client.operate(key, [bw.bit_insert("b", 1, 2, bytearray(b"\xaa\xbb"))])
    assert get_blob(client, key) == b"\x00\xaa\xbb\x00"
    client.operate(key, [bw.bit_remove("b", 0, 2)])
    assert get_blob(client, key) == b"\xbb\x00"
    with pytest.raises(ex.InvalidRequest):  # 4: shrinking with grow-only
        client.operate(key, [bw.bit_resize("b", 1, resize_flags=aerospike.BIT_RESIZE_GROW_ONLY)])
    assert get_blob(client, key) == b"\xbb\x00"


def test_integer_ops_and_overflow(client, key):
    put_blob(client, key, b"\x00\xfe")
    client.operate(key, [bw.bit_add("b", 8, 8, 1, False, aerospike.BIT_OVERFLOW_FAIL)])
    assert get_blob(client, key) == b"\x00\xff"
    with pytest.raises(ex.OpNotApplicable):  # 26: 255 + 1 overflows
        client.operate(key, [bw.bit_add("b", 8, 8, 1, False, aerospike.BIT_OVERFLOW_FAIL)])
    client.operate(key, [bw.bit_add("b", 8, 8, 1, False, aerospike.BIT_OVERFLOW_WRAP)])
    assert get_blob(client, key) == b"\x00\x00"
    client.operate(key, [bw.bit_subtract("b", 8, 8, 1, False, aerospike.BIT_OVERFLOW_SATURATE)])
    assert get_blob(client, key) == b"\x00\x00"
    client.operate(key, [bw.bit_set_int("b", 4, 8, -3)])
    assert get_blob(client, key) == b"\x0f\xd0"
    _, _, bins = client.operate(key, [bw.bit_get_int("b", 4, 8, True)])
    assert bins["b"] == -3
    _, _, bins = client.operate(key, [bw.bit_get_int("b", 4, 8, False)])
    assert bins["b"] == 253


def test_read_ops(client, key):
    put_blob(client, key, bytes([0b0001_0010, 0b1000_0001]))
    ops = [
        bw.bit_count("b", 0, 16),
        bw.bit_lscan("b", 0, 16, True),
        bw.bit_rscan("b", 0, 16, True),
        bw.bit_get("b", 3, 7),
    ]
    _, _, bins = client.operate_ordered(key, ops)
    assert bins == [("b", 4), ("b", 3), ("b", 15), ("b", bytearray([0b1001_0100]))]


def test_result_codes(client, key):
    put_blob(client, key, b"\x00\x00")
    with pytest.raises(ex.OpNotApplicable):  # 26: past the end
        client.operate(key, [bw.bit_set("b", 12, 8, 1, bytearray(b"\xff"))])
    # with the partial flag it changes what is inside
    client.operate(key, [bw.bit_set("b", 12, 8, 1, bytearray(b"\xff"),
                                    policy={"bit_write_flags": aerospike.BIT_WRITE_PARTIAL})])
    assert get_blob(client, key) == b"\x00\x0f"
    with pytest.raises(ex.BinExistsError):  # 6
        client.operate(key, [bw.bit_insert("b", 0, 1, bytearray(b"\x01"),
                                           policy={"bit_write_flags": aerospike.BIT_WRITE_CREATE_ONLY})])
    with pytest.raises(ex.BinNotFound):  # 17: only insert and resize create
        client.operate(key, [bw.bit_set("x", 0, 8, 1, bytearray(b"\x01"))])
    client.operate(key, [bw.bit_set("x", 0, 8, 1, bytearray(b"\x01"),
                                    policy={"bit_write_flags": aerospike.BIT_WRITE_NO_FAIL})])
    assert "x" not in client.get(key)[2]
    client.put(key, {"s": "text"})
    with pytest.raises(ex.BinIncompatibleType):  # 12
        client.operate(key, [bw.bit_count("s", 0, 8)])


def test_bit_expressions(client, key):
    put_blob(client, key, b"\x01\x42")
    # filter: count of bits 0..16 is 3
    count = exp.BitCount(0, 16, exp.BlobBin("b"))
    policy = {"expressions": exp.Eq(count, 3).compile()}
    assert client.get(key, policy)[2]["b"] == bytearray(b"\x01\x42")
    policy = {"expressions": exp.Eq(count, 4).compile()}
    with pytest.raises(ex.FilteredOut):
        client.get(key, policy)
    # a modifying bit expression answers the modified blob; the bin is unchanged
    flipped = exp.BitNot(None, 0, 8, exp.BlobBin("b"))
    _, _, bins = client.operate(key, [eo.expression_read("r", flipped.compile())])
    assert bins["r"] == bytearray(b"\xfe\x42")
    assert get_blob(client, key) == b"\x01\x42"
    _, _, bins = client.operate(key, [eo.expression_read(
        "i", exp.BitGetInt(8, 8, False, exp.BlobBin("b")).compile())])
    assert bins["i"] == 0x42


def _bit_op_msg(key_name, op_type, payload, particle=4):
    digest = aerospike.calc_digest(NS, SET, key_name)
    op = wire.op_bytes(op_type, particle, b"b", payload)
    info1 = wire.INFO1_READ if op_type == 12 else 0
    info2 = wire.INFO2_WRITE if op_type == 13 else 0
    return wire.as_msg(wire.key_fields(NS, SET, digest), [op], info1=info1, info2=info2)


@pytest.mark.parametrize("op_type,payload,code", [
    (13, b"\x93\x03\x00\x00", 4),                     # set with size 0
    (13, b"\x94\x03\x00\x08\xc4\x01\x04", 4),         # set with a bare type byte
    (13, b"\x94\x03\x00\x10\xc4\x02\x04\x01", 4),     # buffer shorter than size
    (13, b"\x93\x0a\x00\xcc\x41\x01", 4),             # 65-bit integer
    (13, b"\x95\x03\x00\x08\xc4\x02\x04\x01\x7f", 4), # unknown flags
    (13, b"\x92\x00\xd2\x08\x00\x00\x00", 4),         # resize past the protocol's max
    (13, b"\x91\x7f", 4),                             # unknown op
    (13, b"\x90", 4),                                 # empty
    (13, b"\xc1", 4),                                 # not msgpack
    (13, b"\x93\x03\x00", 4),                         # truncated
    (12, b"\x93\x34\x00\x08", 4),                     # lscan without its bit
    (12, b"\x93\x32\x00\xd3\x7f\xff\xff\xff\xff\xff\xff\xff", 4),  # huge size
    (12, b"\x93\x32\xd3\x80\x00\x00\x00\x00\x00\x00\x00\x08", 4),  # huge negative offset
    (13, b"\x94\x03\x00\x08\xc4\x02\x04\x01", 12),    # wrong op particle type
])
def test_hostile_bit_operands(server, client, key, op_type, payload, code):
    put_blob(client, key, b"\x00\x00")
    particle = 3 if code == 12 else 4
    with wire.connect(server.port) as s:
        s.sendall(_bit_op_msg(key[2], op_type, payload, particle))
        r = wire.read_response(s)
        assert r.result_code == code, r.result_code
    assert server.alive()
    assert get_blob(client, key) == b"\x00\x00"
