"""Helpers shared by the test modules (info parsing, bounded polling)."""

from __future__ import annotations

import time

NS = "test"
SET = "pytest"
# The Python client (C client underneath) converts the server's void time 0
# ("never expires") to (uint32_t)-1 and reports it as this unsigned value.
NEVER_EXPIRES = 4294967295


def info_value(c, command: str) -> str:
    """Value part of one info command answered by the (single) node."""
    resp = c.info_random_node(command)
    assert isinstance(resp, str), resp
    line = resp.rstrip("\n")
    if "\t" in line:
        name, _, value = line.partition("\t")
        assert name == command, f"info echoed {name!r} for {command!r}"
        return value
    return line


def parse_kv(text: str, sep: str = ";") -> dict:
    out = {}
    for part in text.split(sep):
        if not part:
            continue
        k, eq, v = part.partition("=")
        assert eq, f"malformed info pair {part!r} in {text!r}"
        out[k] = v
    return out


def ns_stats(c, ns: str = NS) -> dict:
    return parse_kv(info_value(c, f"namespace/{ns}"))


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until truthy or ``timeout`` seconds pass (bounded)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")
        time.sleep(interval)
