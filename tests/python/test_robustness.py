"""Hostile or broken input on raw sockets: the server must close the
connection (or answer an error), never hang or crash, and a normal client
must keep working afterwards."""

import socket
import struct
import time

import aerospike
import pytest

import wire
from helpers import NS, SET


@pytest.fixture
def check_server_ok(server, client):
    """After the test: process alive and a normal client round-trip works."""
    yield
    assert server.alive(), "bolided died:\n" + server.log_tail()
    k = (NS, SET, "robustness-probe")
    client.put(k, {"ok": 1})
    _, meta, bins = client.get(k)
    assert bins == {"ok": 1}
    client.remove(k)


def assert_closed_or_error(sock, what):
    closed, got = wire.wait_closed(sock, timeout=5.0)
    if got:
        # an answer is tolerated only if it is a well-formed error
        assert len(got) >= 8, f"{what}: short garbage answer {got!r}"
        (word,) = struct.unpack(">Q", got[:8])
        assert word >> 56 == 2, f"{what}: answer has bad proto version: {got[:16]!r}"
        if (word >> 48) & 0xFF == 3 and len(got) >= 14:
            assert got[13] != 0, f"{what}: server answered success"
    assert closed or got, f"{what}: server neither closed the connection nor answered within 5s"


def test_garbage_bytes(server, check_server_ok):
    with wire.connect(server.port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
        assert_closed_or_error(s, "garbage")


def test_all_zero_header(server, check_server_ok):
    with wire.connect(server.port) as s:
        s.sendall(b"\x00" * 64)
        assert_closed_or_error(s, "zero header")


def test_bad_proto_version(server, check_server_ok):
    body = b"build\n"
    with wire.connect(server.port) as s:
        s.sendall(wire.proto_header(len(body), wire.TYPE_INFO, version=7) + body)
        assert_closed_or_error(s, "proto version 7")


@pytest.mark.parametrize("mtype", [0, 6, 99, 255])
def test_unknown_message_type(server, check_server_ok, mtype):
    body = b"\x16" + b"\x00" * 21
    with wire.connect(server.port) as s:
        s.sendall(wire.proto_header(len(body), mtype) + body)
        assert_closed_or_error(s, f"message type {mtype}")


def test_oversized_size_field(server, check_server_ok):
    with wire.connect(server.port) as s:
        s.sendall(wire.proto_header(200 * 1024 * 1024, wire.TYPE_MSG) + b"\x16" + b"\x00" * 21)
        assert_closed_or_error(s, "200 MiB size field")


def test_max_48bit_size_field(server, check_server_ok):
    with wire.connect(server.port) as s:
        s.sendall(struct.pack(">Q", (2 << 56) | (1 << 48) | 0xFFFFFFFFFFFF))
        assert_closed_or_error(s, "2^48-1 size field")


def test_truncated_frame_then_disconnect(server, check_server_ok):
    for _ in range(20):
        s = wire.connect(server.port)
        s.sendall(wire.proto_header(100, wire.TYPE_MSG) + b"\x16\x00\x00")
        s.close()
    # header itself truncated
    s = wire.connect(server.port)
    s.sendall(b"\x02\x03\x00")
    s.close()


def test_stalled_partial_frame_does_not_block_others(server, client, check_server_ok):
    stalled = wire.connect(server.port)
    try:
        stalled.sendall(wire.proto_header(1000, wire.TYPE_MSG) + b"\x16\x00\x01")
        k = (NS, SET, "while-stalled")
        t0 = time.monotonic()
        client.put(k, {"a": 1})
        assert client.get(k)[2] == {"a": 1}
        client.remove(k)
        assert time.monotonic() - t0 < 3
    finally:
        stalled.close()


def test_many_connections_opened_and_dropped(server, check_server_ok):
    socks = [wire.connect(server.port) for _ in range(50)]
    for s in socks:
        s.close()


def test_rst_close_mid_request(server, check_server_ok):
    s = wire.connect(server.port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(wire.proto_header(500, wire.TYPE_MSG) + b"\x16" * 10)
    s.close()  # sends RST


def _write_msg(user_key, ops, extra_fields=(), n_fields=None):
    digest = aerospike.calc_digest(NS, SET, user_key)
    fields = wire.key_fields(NS, SET, digest) + list(extra_fields)
    return wire.as_msg(fields, ops, info2=wire.INFO2_WRITE, n_fields=n_fields)


def test_well_formed_raw_write_and_read(server, client):
    """Sanity check of the raw encoder itself: a correct write gets 0."""
    msg = _write_msg("raw-ok", [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_STRING, b"bin1", b"hello")])
    with wire.connect(server.port) as s:
        s.sendall(msg)
        r = wire.read_response(s)
        assert (r.version, r.msg_type, r.header_sz, r.result_code) == (2, 3, 22, 0)
        assert r.generation == 1
        digest = aerospike.calc_digest(NS, SET, "raw-ok")
        s.sendall(wire.as_msg(wire.key_fields(NS, SET, digest), [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
        r = wire.read_response(s)
        assert r.result_code == 0
        assert r.ops == [(wire.OP_READ, wire.PARTICLE_STRING, b"bin1", b"hello")]
    assert client.get((NS, SET, "raw-ok"))[2] == {"bin1": "hello"}
    client.remove((NS, SET, "raw-ok"))


def test_bad_particle_type_gets_error(server, client, check_server_ok):
    msg = _write_msg("raw-bad-particle", [wire.op_bytes(wire.OP_WRITE, 99, b"bin1", b"\x01\x02\x03")])
    with wire.connect(server.port) as s:
        s.sendall(msg)
        r = wire.read_response(s)
        assert (r.version, r.msg_type, r.header_sz) == (2, 3, 22)
        assert r.result_code != 0, "write with particle type 99 must fail"
        assert r.result_code in (4, 12), r.result_code
    assert client.exists((NS, SET, "raw-bad-particle"))[1] is None


def test_bad_integer_size_gets_parameter_error(server, client, check_server_ok):
    msg = _write_msg("raw-bad-int", [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"n", b"\x01\x02\x03")])
    with wire.connect(server.port) as s:
        s.sendall(msg)
        r = wire.read_response(s)
        assert r.result_code == 4, r.result_code
    assert client.exists((NS, SET, "raw-bad-int"))[1] is None


def _answers_code_and_stays_usable(port, msg, code):
    """Sends a complete but invalid message: the server must answer with
    exactly ``code`` and keep serving the same connection."""
    with wire.connect(port) as s:
        s.sendall(msg)
        r = wire.read_response(s)
        assert (r.version, r.msg_type, r.header_sz) == (2, 3, 22)
        assert r.result_code == code, r.result_code
        s.sendall(wire.as_msg(
            wire.key_fields(NS, SET, aerospike.calc_digest(NS, SET, "still-usable-zz")), [],
            info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
        assert wire.read_response(s).result_code == 2


def test_unknown_op_type_gets_parameter_error(server, client, check_server_ok):
    msg = _write_msg("raw-bad-op", [wire.op_bytes(200, wire.PARTICLE_INTEGER, b"n", (1).to_bytes(8, "big"))])
    _answers_code_and_stays_usable(server.port, msg, 4)
    assert client.exists((NS, SET, "raw-bad-op"))[1] is None


def test_unknown_field_type_gets_parameter_error(server, client, check_server_ok):
    msg = _write_msg(
        "raw-unknown-field",
        [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"n", (5).to_bytes(8, "big"))],
        extra_fields=[wire.field_bytes(250, b"whatever")],
    )
    _answers_code_and_stays_usable(server.port, msg, 4)
    assert client.exists((NS, SET, "raw-unknown-field"))[1] is None


def test_field_size_overruns_body(server, check_server_ok):
    """A field whose size points past the end of the message is a parameter
    error (4); the frame itself is intact, so the connection stays open."""
    digest = aerospike.calc_digest(NS, SET, "overrun")
    bad = struct.pack(">IB", 5000, wire.FIELD_KEY) + b"\x03abc"
    msg = wire.as_msg(wire.key_fields(NS, SET, digest) + [bad], [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL)
    _answers_code_and_stays_usable(server.port, msg, 4)


def test_op_count_larger_than_body(server, check_server_ok):
    digest = aerospike.calc_digest(NS, SET, "opcount")
    msg = wire.as_msg(wire.key_fields(NS, SET, digest),
                      [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"n", (1).to_bytes(8, "big"))],
                      info2=wire.INFO2_WRITE, n_ops=50)
    _answers_code_and_stays_usable(server.port, msg, 4)


def test_missing_namespace_field(server, check_server_ok):
    digest = aerospike.calc_digest(NS, SET, "nons")
    fields = [wire.field_bytes(wire.FIELD_SET, SET.encode()), wire.field_bytes(wire.FIELD_DIGEST, bytes(digest))]
    msg = wire.as_msg(fields, [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL)
    _answers_code_and_stays_usable(server.port, msg, 20)


def test_pipelined_requests_answered_in_order(server, client):
    keys = [f"pipe-{i}" for i in range(10)]
    msgs = b"".join(
        _write_msg(k, [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_INTEGER, b"i", i.to_bytes(8, "big"))])
        for i, k in enumerate(keys)
    )
    reads = b"".join(
        wire.as_msg(wire.key_fields(NS, SET, aerospike.calc_digest(NS, SET, k)), [],
                    info1=wire.INFO1_READ | wire.INFO1_GET_ALL)
        for k in keys
    )
    with wire.connect(server.port) as s:
        s.sendall(msgs + reads)
        for _ in keys:
            assert wire.read_response(s).result_code == 0
        for i, _ in enumerate(keys):
            r = wire.read_response(s)
            assert r.result_code == 0
            assert r.ops == [(wire.OP_READ, wire.PARTICLE_INTEGER, b"i", i.to_bytes(8, "big"))]
    for k in keys:
        client.remove((NS, SET, k))


def test_client_survives_server_side_noise(server, client, check_server_ok):
    """Interleave hostile connections with real traffic."""
    for i in range(10):
        with wire.connect(server.port) as s:
            s.sendall(b"\xff" * 32)
        k = (NS, SET, f"noise-{i}")
        client.put(k, {"i": i})
        assert client.get(k)[2] == {"i": i}
        client.remove(k)


def test_compressed_frame_with_garbage_payload(server, check_server_ok):
    """Type 4 (AS_MSG_COMPRESSED) whose payload is not a zlib stream: closed
    connection or an error answer (CE answers 25), never success or a hang."""
    body = struct.pack(">Q", 100) + b"this is not zlib data at all"
    with wire.connect(server.port) as s:
        s.sendall(wire.proto_header(len(body), 4) + body)
        closed, got = wire.wait_closed(s, timeout=5.0)
    assert closed or got, "no answer and connection left open"
    if got:
        assert got[0] == 2, got[:16]
        if got[1] == 3 and len(got) >= 14:
            assert got[13] != 0, "garbage compressed frame answered with success"


def test_compressed_frame_roundtrip_or_enterprise_only(server, client):
    """A valid zlib-compressed put (type 4) either works (the server
    implements compression) or is answered 25 ENTERPRISE_ONLY like CE."""
    import zlib

    user_key = "compressed-put"
    inner = _write_msg(user_key, [wire.op_bytes(wire.OP_WRITE, wire.PARTICLE_STRING, b"c", b"zipped")])
    body = struct.pack(">Q", len(inner)) + zlib.compress(inner, 1)
    with wire.connect(server.port) as s:
        s.sendall(wire.proto_header(len(body), 4) + body)
        r = wire.read_response(s)
    assert r.version == 2
    if r.msg_type == 4:
        inflated = zlib.decompress(r.body[8:])
        assert inflated[13] == 0, inflated[:30]
    else:
        assert r.msg_type == 3
        assert r.result_code in (0, 25), r.result_code
        if r.result_code == 25:
            assert client.exists((NS, SET, user_key))[1] is None
            return
    assert client.get((NS, SET, user_key))[2] == {"c": "zipped"}
    client.remove((NS, SET, user_key))
