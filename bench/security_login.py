#!/usr/bin/env python3
"""What a login and an authenticated connection cost, on raw sockets:

* login: a new connection and LOGIN (user and client hash; the node runs
  PBKDF2 on its blocking pool), one after another;
* authenticated connection: a new connection, AUTHENTICATE with a session
  token (one HMAC) and one info request (`node`);
* open connection (with --open-port): a new connection and the same info
  request on a node without security, for comparison.

Prints one Markdown table row per measure (median and p99 in µs, and
operations per second of one client). Only the standard library: runs on
any python3.

    bench/security_login.py --port SECURED [--open-port OPEN] [--count 2000]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import time

# The clients' bcrypt of "admin" with their fixed salt (docs/security.md).
ADMIN_HASH = b"$2a$10$7EqJtq98hPqEX7fNZaFWoO1mVO/4MLpGzsqojz6E9Gef6iXDjXdDa"


def frame(kind: int, body: bytes) -> bytes:
    return struct.pack(">Q", (2 << 56) | (kind << 48) | len(body)) + body


def admin(command: int, fields) -> bytes:
    body = struct.pack(">BBBB12x", 0, 0, command, len(fields))
    for field_id, data in fields:
        body += struct.pack(">IB", len(data) + 1, field_id) + data
    return frame(2, body)


def read_frame(s: socket.socket) -> bytes:
    header = b""
    while len(header) < 8:
        chunk = s.recv(8 - len(header))
        if not chunk:
            raise ConnectionError("closed")
        header += chunk
    size = struct.unpack(">Q", header)[0] & 0xFFFF_FFFF_FFFF
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return body


def fields(body: bytes) -> dict:
    out, at = {}, 16
    while at < len(body):
        size = struct.unpack(">I", body[at:at + 4])[0]
        out[body[at + 4]] = body[at + 5:at + 4 + size]
        at += 4 + size
    return out


def login(port: int, user: bytes, credential: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(admin(20, [(0, user), (3, credential)]))
        body = read_frame(s)
        if body[1] != 0:
            raise RuntimeError(f"login refused: {body[1]}")
        return fields(body)[5]


def authenticated_info(port: int, user: bytes, token: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(admin(0, [(0, user), (5, token)]))
        body = read_frame(s)
        if body[1] != 0:
            raise RuntimeError(f"authenticate refused: {body[1]}")
        s.sendall(frame(1, b"node\n"))
        read_frame(s)


def open_info(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(frame(1, b"node\n"))
        read_frame(s)


def measure(label: str, count: int, call) -> None:
    times = []
    start = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1e6)
    elapsed = time.perf_counter() - start
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(f"| {label} | {count} | {statistics.median(times):,.0f} | {p99:,.0f} | {count / elapsed:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="a secured node's service port")
    parser.add_argument("--open-port", type=int, help="an open node's service port")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--user", default="admin")
    args = parser.parse_args()
    user = args.user.encode()
    print("| measure | count | median µs | p99 µs | per second (one client) |")
    print("|---|---:|---:|---:|---:|")
    measure("new connection + LOGIN", args.count, lambda: login(args.port, user, ADMIN_HASH))
    token = login(args.port, user, ADMIN_HASH)
    measure("new connection + AUTHENTICATE (token) + info", args.count,
            lambda: authenticated_info(args.port, user, token))
    if args.open_port:
        measure("new connection + info, open node", args.count, lambda: open_info(args.open_port))


if __name__ == "__main__":
    main()
