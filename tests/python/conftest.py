"""Shared fixtures: a session-wide bolided + Python client, a factory for
extra servers with custom configs, unique keys, and info helpers."""

from __future__ import annotations

import os
import signal
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aerospike  # noqa: E402

from bolide_server import BolideServer  # noqa: E402
from helpers import NS, SET, info_value, ns_stats  # noqa: E402

PER_TEST_TIMEOUT = int(os.environ.get("BOLIDE_TEST_TIMEOUT", "90"))


# --------------------------------------------------------------------------
# A bounded run time for every test (no pytest-timeout dependency).
# --------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    def _alarm(signum, frame):
        raise TimeoutError(f"test exceeded {limit}s")

    # @pytest.mark.time_limit(SECONDS) gives a long test its own bound.
    marker = item.get_closest_marker("time_limit")
    limit = int(marker.args[0]) if marker else PER_TEST_TIMEOUT
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def server():
    srv = BolideServer()
    srv.start()
    try:
        yield srv
    finally:
        alive = srv.alive()
        srv.stop()
        if not alive:
            # surface a crash of the shared server in the test output
            print("\n--- shared bolided had died; log tail ---\n" + srv.log_tail(80))


@pytest.fixture(scope="session")
def client(server):
    c = server.client(send_bool_as=aerospike.AS_BOOL)
    yield c
    try:
        c.close()
    except Exception:
        pass


@pytest.fixture
def start_server():
    """Factory: start_server(namespace={...}, storage={...}) or
    start_server(config_text=...). Every server started is stopped (by PID)
    at the end of the test."""
    started = []

    def _start(**kwargs) -> BolideServer:
        srv = BolideServer(**kwargs)
        started.append(srv)
        return srv.start()

    yield _start
    for srv in started:
        srv.stop()


# --------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------
@pytest.fixture
def key(request, client):
    """A unique key in test/pytest, removed (if present) after the test."""
    k = (NS, SET, f"{request.node.name}-{uuid.uuid4().hex[:12]}")
    yield k
    try:
        client.remove(k)
    except Exception:
        pass


@pytest.fixture
def make_key(request, client):
    made = []

    def _mk(suffix="", set_name=SET):
        k = (NS, set_name, f"{request.node.name}-{suffix}-{uuid.uuid4().hex[:12]}")
        made.append(k)
        return k

    yield _mk
    for k in made:
        try:
            client.remove(k)
        except Exception:
            pass


@pytest.fixture
def info():
    return info_value


@pytest.fixture
def nsinfo():
    return ns_stats

