"""Malformed admin messages (proto type 2) on raw sockets against a real
secured bolided: each answers a 24-byte reply with a result code the
clients know, or the node closes the connection; the node never dies and
keeps serving logins. (The decoder itself is fuzzed by the `admin` fuzz
target, whose corpus `cargo test -p bolide-fuzzing` replays.)"""

from __future__ import annotations

import random
import socket
import struct

import pytest

import wire
from security_helpers import (
    ADMIN_HASH, FIELD_CREDENTIAL, FIELD_USER, LOGIN, admin_message, connect, login, read_frame,
    secured_server,
)

# Result codes an admin reply may carry (reference §1.5).
KNOWN = {0, 4, 50, 51, 52, 53, 54, 55, 56, 60, 61, 62, 63, 64, 65, 66, 67, 70, 71, 72, 73,
         74, 75, 80, 81, 82, 83}


@pytest.fixture(scope="module")
def node():
    srv = secured_server()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def body(command: int, n_fields: int, fields: bytes, header_pad: bytes = b"\0" * 12) -> bytes:
    return struct.pack(">BBBB", 0, 0, command, n_fields) + header_pad + fields


def frame(payload: bytes, version: int = 2) -> bytes:
    return wire.proto_header(len(payload), wire.TYPE_ADMIN, version) + payload


def field(field_id: int, data: bytes, size: int = -1) -> bytes:
    return struct.pack(">IB", len(data) + 1 if size < 0 else size, field_id) + data


CASES = {
    "empty body": frame(b""),
    "short header": frame(b"\0\0\x14"),
    "unknown command": frame(body(99, 0, b"")),
    "field count over the fields": frame(body(LOGIN, 5, field(FIELD_USER, b"admin"))),
    "field size past the end": frame(body(LOGIN, 1, field(FIELD_USER, b"admin", size=4096))),
    "field size zero": frame(body(LOGIN, 1, struct.pack(">IB", 0, 0))),
    "unknown field id": frame(body(LOGIN, 1, field(200, b"x"))),
    "login without credential": frame(body(LOGIN, 1, field(FIELD_USER, b"admin"))),
    "login without user": frame(body(LOGIN, 1, field(FIELD_CREDENTIAL, ADMIN_HASH))),
    "user name of 64 KiB": frame(body(LOGIN, 2, field(FIELD_USER, b"u" * 65536)
                                      + field(FIELD_CREDENTIAL, ADMIN_HASH))),
    "non-UTF-8 user": frame(body(LOGIN, 2, field(FIELD_USER, b"\xff\xfe\x00")
                                 + field(FIELD_CREDENTIAL, ADMIN_HASH))),
    "create user unauthenticated": frame(body(1, 1, field(FIELD_USER, b"mallory"))),
    "query users unauthenticated": frame(body(9, 0, b"")),
    "bad version": frame(body(LOGIN, 0, b""), version=7),
}


def answer(node, data: bytes):
    """('reply', result code) for a well-formed 24-byte reply, or ('closed', None)."""
    with connect(node, timeout=5) as s:
        s.sendall(data)
        try:
            version, kind, reply = read_frame(s)
        except (ConnectionError, EOFError, socket.timeout, OSError, AssertionError):
            return "closed", None
        assert kind == wire.TYPE_ADMIN, kind
        assert len(reply) == 16, f"{len(reply)}-byte admin reply body: {reply!r}"
        return "reply", reply[1]


# What a connection that never logged in gets for a command other than
# LOGIN or AUTHENTICATE, however malformed: 80, before its fields are read.
UNAUTHENTICATED = {"create user unauthenticated", "query users unauthenticated",
                   "unknown command"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_admin_message_answers_a_code_or_closes(node, case):
    outcome, code = answer(node, CASES[case])
    if outcome == "reply":
        assert code in KNOWN, code
        assert code != 0, f"{case} succeeded"
    if case in UNAUTHENTICATED:
        assert (outcome, code) == ("reply", 80), (outcome, code)
    assert node.alive(), node.log_tail()
    # The node still serves a proper login afterwards.
    with connect(node) as s:
        assert login(s, b"admin", ADMIN_HASH)[0] == 0


def test_random_admin_bodies_never_stop_the_node(node):
    rng = random.Random(22)
    for _ in range(200):
        size = rng.choice([0, 1, 15, 16, 17, 40, 300])
        payload = bytes(rng.getrandbits(8) for _ in range(size))
        if size >= 4 and rng.random() < 0.7:
            # Mostly real commands, so the decoder gets past the header.
            payload = payload[:2] + bytes([rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15, 16, 20])]) + payload[3:]
        outcome, code = answer(node, frame(payload))
        if outcome == "reply":
            assert code in KNOWN, (payload, code)
    assert node.alive(), node.log_tail()
    assert "panicked" not in node.log_text()
    with connect(node) as s:
        assert login(s, b"admin", ADMIN_HASH)[0] == 0
