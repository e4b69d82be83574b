"""Secured nodes for the security tests: configuration, clients logged in
as a user, and the admin protocol on raw sockets (LOGIN, AUTHENTICATE and
info requests after them), for what the official client does not show
(session tokens, the exact bytes of refusals)."""

from __future__ import annotations

import socket
import struct
import time
from typing import Dict, List, Optional, Tuple

import aerospike

from bolide_server import BolideServer, render_config
import wire

ADMIN_HASH = b"$2a$10$7EqJtq98hPqEX7fNZaFWoO1mVO/4MLpGzsqojz6E9Gef6iXDjXdDa"

# Admin commands and fields (reference §1.2, §1.3).
LOGIN = 20
AUTHENTICATE = 0
FIELD_USER = 0
FIELD_CREDENTIAL = 3
FIELD_SESSION_TOKEN = 5
FIELD_SESSION_TTL = 6


def secured_config(security: str = "security {\n    enable-quotas true\n}\n",
                   logging: str = "", namespace: Optional[Dict[str, str]] = None) -> str:
    """A BolideServer config_text (placeholders for the ports and the work
    directory) with ``security`` (and ``logging``, replacing the default
    console sink) appended."""
    text = render_config(1, 2, 3, 4, namespace=namespace, work_directory="WORKDIR")
    if logging:
        start = text.index("logging {")
        end = text.index("network {")
        text = text[:start] + logging + text[end:]
    text = text + security
    text = text.replace("{", "{{").replace("}", "}}")
    for value, name in (("port 1\n", "port {port}\n"), ("port 2\n", "port {fabric_port}\n"),
                        ("port 3\n", "port {heartbeat_port}\n"), ("port 4\n", "port {info_port}\n"),
                        ("WORKDIR", "{work_directory}")):
        text = text.replace(value, name)
    return text


def secured_server(**kwargs) -> BolideServer:
    return BolideServer(config_text=secured_config(**kwargs))


def client(srv: BolideServer, user: str, password: str, **extra):
    """A client of ``srv`` logged in as ``user``."""
    # The Python client 19 takes the user from the configuration (the
    # arguments of connect() are ignored).
    config = dict(srv.client_config(**extra), user=user, password=password)
    c = aerospike.client(config).connect()
    srv._clients.append(c)
    return c


def grant_all(srv: BolideServer) -> None:
    """Gives admin every role but its own (as the clients' suites set up)."""
    admin = client(srv, "admin", "admin")
    admin.admin_grant_roles("admin", ["sys-admin", "data-admin", "read-write-udf",
                                      "sindex-admin", "udf-admin", "truncate"])
    admin.close()


# ---------------------------------------------------------------- raw admin
def admin_message(command: int, fields: List[Tuple[int, bytes]], version: int = 2) -> bytes:
    body = struct.pack(">BBBB12x", 0, 0, command, len(fields))
    for field_id, data in fields:
        body += struct.pack(">IB", len(data) + 1, field_id) + data
    return wire.proto_header(len(body), wire.TYPE_ADMIN, version) + body


def read_frame(s: socket.socket) -> Tuple[int, int, bytes]:
    """(version, type, body) of one frame."""
    header = wire.recv_exact(s, 8)
    (word,) = struct.unpack(">Q", header)
    size = word & 0xFFFF_FFFF_FFFF
    return header[0], header[1], wire.recv_exact(s, size)


def admin_fields(body: bytes) -> Dict[int, bytes]:
    out = {}
    at = 16
    while at < len(body):
        (size,) = struct.unpack(">I", body[at:at + 4])
        out[body[at + 4]] = body[at + 5:at + 4 + size]
        at += 4 + size
    return out


def login(s: socket.socket, user: bytes, credential: bytes) -> Tuple[int, Dict[int, bytes], int]:
    """LOGIN on ``s``: (result, fields, reply size)."""
    s.sendall(admin_message(LOGIN, [(FIELD_USER, user), (FIELD_CREDENTIAL, credential)]))
    version, kind, body = read_frame(s)
    assert (version, kind) == (2, 2), (version, kind)
    return body[1], admin_fields(body), 8 + len(body)


def authenticate(s: socket.socket, user: bytes, token: bytes) -> int:
    s.sendall(admin_message(AUTHENTICATE, [(FIELD_USER, user), (FIELD_SESSION_TOKEN, token)]))
    version, kind, body = read_frame(s)
    assert (version, kind, len(body)) == (2, 2, 16), (version, kind, len(body))
    return body[1]


def raw_info(s: socket.socket, *commands: str) -> str:
    body = "".join(c + "\n" for c in commands).encode()
    s.sendall(wire.proto_header(len(body), wire.TYPE_INFO) + body)
    version, kind, answer = read_frame(s)
    assert kind == wire.TYPE_INFO, kind
    return answer.decode()


def connect(srv: BolideServer, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)


def wait_until(predicate, timeout: float = 10.0, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return value
        time.sleep(step)
