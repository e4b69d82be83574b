"""Minimal raw Aerospike wire-protocol helpers for robustness tests.

Layouts follow docs in /work/shared/reference/aerospike-wire-protocol.md
(§1.2 proto header, §4 AS_MSG, §5.2 responses).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

PROTO_VERSION = 2
TYPE_INFO = 1
TYPE_ADMIN = 2
TYPE_MSG = 3

INFO1_READ = 0x01
INFO1_GET_ALL = 0x02
INFO1_NOBINDATA = 0x20
INFO2_WRITE = 0x01
INFO2_DELETE = 0x02

FIELD_NAMESPACE = 0
FIELD_SET = 1
FIELD_KEY = 2
FIELD_DIGEST = 4

OP_READ = 1
OP_WRITE = 2

PARTICLE_NULL = 0
PARTICLE_INTEGER = 1
PARTICLE_FLOAT = 2
PARTICLE_STRING = 3
PARTICLE_BLOB = 4


def proto_header(body_len: int, msg_type: int = TYPE_MSG, version: int = PROTO_VERSION) -> bytes:
    return struct.pack(">Q", (version << 56) | (msg_type << 48) | body_len)


def field_bytes(ftype: int, data: bytes) -> bytes:
    return struct.pack(">IB", len(data) + 1, ftype) + data


def op_bytes(op_type: int, particle: int, name: bytes, value: bytes = b"") -> bytes:
    return struct.pack(">IBBBB", 4 + len(name) + len(value), op_type, particle, 0, len(name)) + name + value


def as_msg(
    fields: List[bytes],
    ops: List[bytes],
    info1: int = 0,
    info2: int = 0,
    info3: int = 0,
    generation: int = 0,
    record_ttl: int = 0,
    transaction_ttl: int = 1000,
    n_fields: Optional[int] = None,
    n_ops: Optional[int] = None,
) -> bytes:
    hdr = struct.pack(
        ">BBBBBBIIIHH",
        22, info1, info2, info3, 0, 0, generation, record_ttl, transaction_ttl,
        len(fields) if n_fields is None else n_fields,
        len(ops) if n_ops is None else n_ops,
    )
    body = hdr + b"".join(fields) + b"".join(ops)
    return proto_header(len(body)) + body


def key_fields(ns: str, set_name: str, digest: bytes) -> List[bytes]:
    return [
        field_bytes(FIELD_NAMESPACE, ns.encode()),
        field_bytes(FIELD_SET, set_name.encode()),
        field_bytes(FIELD_DIGEST, bytes(digest)),
    ]


@dataclass
class Response:
    version: int
    msg_type: int
    body: bytes
    header_sz: int = 0
    result_code: int = -1
    generation: int = 0
    record_ttl: int = 0
    n_fields: int = 0
    n_ops: int = 0
    ops: List[Tuple[int, int, bytes, bytes]] = field(default_factory=list)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_response(sock: socket.socket) -> Response:
    hdr = recv_exact(sock, 8)
    (word,) = struct.unpack(">Q", hdr)
    version = word >> 56
    mtype = (word >> 48) & 0xFF
    size = word & 0xFFFFFFFFFFFF
    if size > 16 * 1024 * 1024:
        raise ValueError(f"implausible response size {size}")
    body = recv_exact(sock, size)
    r = Response(version=version, msg_type=mtype, body=body)
    if mtype == TYPE_MSG and len(body) >= 22:
        (r.header_sz, _i1, _i2, _i3, _i4, r.result_code, r.generation, r.record_ttl,
         _tt, r.n_fields, r.n_ops) = struct.unpack(">BBBBBBIIIHH", body[:22])
        pos = r.header_sz
        for _ in range(r.n_fields):
            (fsz,) = struct.unpack(">I", body[pos:pos + 4])
            pos += 4 + fsz
        for _ in range(r.n_ops):
            (osz, otype, ptype, _flags, nlen) = struct.unpack(">IBBBB", body[pos:pos + 8])
            name = body[pos + 8:pos + 8 + nlen]
            value = body[pos + 8 + nlen:pos + 4 + osz]
            r.ops.append((otype, ptype, name, value))
            pos += 4 + osz
    return r


def connect(port: int, timeout: float = 5.0, host: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def wait_closed(sock: socket.socket, timeout: float = 5.0) -> Tuple[bool, bytes]:
    """Read until the peer closes or ``timeout`` passes.
    Returns (closed, bytes_received)."""
    deadline = time.monotonic() + timeout
    got = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return False, got
        except (ConnectionResetError, BrokenPipeError):
            return True, got
        if not chunk:
            return True, got
        got += chunk
        if len(got) > 1 << 20:
            return False, got
    return False, got


def info_request(port: int, commands: List[str], timeout: float = 5.0, host: str = "127.0.0.1") -> dict:
    """Raw info request; returns {command: value}."""
    body = "".join(c + "\n" for c in commands).encode()
    with connect(port, timeout, host) as s:
        s.sendall(proto_header(len(body), TYPE_INFO) + body)
        r = read_response(s)
    assert r.version == 2 and r.msg_type == TYPE_INFO, (r.version, r.msg_type)
    out = {}
    for line in r.body.decode().split("\n"):
        if not line:
            continue
        name, _, value = line.partition("\t")
        out[name] = value
    return out
