"""``set-config:context=security;…`` and ``get-config:context=security``
through the official Python client against a secured bolided: the dynamic
settings (session-ttl, privilege-refresh-period, tps-weight, the audit's
``log.report-…``) change with ``sys-admin`` and are refused (81) without it;
static ones (enable-quotas) and bad values answer an error naming them and
change nothing; a changed setting takes effect (a new login's session TTL,
audit lines appearing and stopping)."""

from __future__ import annotations

import pytest
from aerospike import exception as ex

from bolide_server import BolideServer
from helpers import NS
from security_helpers import (
    ADMIN_HASH, FIELD_SESSION_TTL, client, connect, login, secured_server, wait_until,
)

SET = "secconf"


@pytest.fixture(scope="module")
def node():
    srv = secured_server()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def sysadmin(node):
    admin = client(node, "admin", "admin")
    admin.admin_create_user("sam", "pw", ["sys-admin", "read-write"])
    return client(node, "sam", "pw")


def settings(c) -> dict:
    text = c.info_random_node("get-config:context=security").split("\t", 1)[-1].strip()
    return dict(pair.split("=", 1) for pair in text.split(";") if "=" in pair)


def answer(c, command: str) -> str:
    """The node's answer; the client turns ERROR answers into exceptions,
    whose text is returned instead."""
    try:
        return c.info_random_node(command).split("\t", 1)[-1].strip()
    except ex.AerospikeError as error:
        return f"{type(error).__name__}: {error.msg}"


def test_get_config_shows_the_settings(node, sysadmin):
    shown = settings(sysadmin)
    assert shown["enable-quotas"] == "true"
    assert shown["session-ttl"] == "86400"
    assert shown["privilege-refresh-period"] == "300"
    assert shown["tps-weight"] == "2"
    for flag in ("authentication", "user-admin", "sys-admin", "violation"):
        assert shown[f"log.report-{flag}"] == "false"
    assert shown["log.report-data-op"] == ""


def test_set_config_needs_sys_admin(node, sysadmin):
    admin = client(node, "admin", "admin")
    admin.admin_create_user("rita", "pw", ["read-write", "data-admin", "user-admin"])
    try:
        rita = client(node, "rita", "pw")
        refused = answer(rita, "set-config:context=security;session-ttl=600")
        assert "RoleViolation" in refused, refused
        assert "requires permission 'set-config'" in refused, refused
        assert settings(sysadmin)["session-ttl"] == "86400"
        # The default admin (user-admin only) is refused as well.
        assert "RoleViolation" in answer(admin, "set-config:context=security;log.report-violation=true")
        assert settings(sysadmin)["log.report-violation"] == "false"
    finally:
        admin.admin_drop_user("rita")


def test_session_ttl_changes_the_next_logins_session(node, sysadmin):
    assert answer(sysadmin, "set-config:context=security;session-ttl=600") == "ok"
    try:
        assert settings(sysadmin)["session-ttl"] == "600"
        with connect(node) as s:
            result, fields, _ = login(s, b"admin", ADMIN_HASH)
            assert result == 0
            assert int.from_bytes(fields[FIELD_SESSION_TTL], "big") == 600
    finally:
        assert answer(sysadmin, "set-config:context=security;session-ttl=86400") == "ok"
    with connect(node) as s:
        result, fields, _ = login(s, b"admin", ADMIN_HASH)
        assert int.from_bytes(fields[FIELD_SESSION_TTL], "big") == 86400


def test_other_dynamic_settings(node, sysadmin):
    assert answer(sysadmin, "set-config:context=security;privilege-refresh-period=60") == "ok"
    assert answer(sysadmin, "set-config:context=security;tps-weight=4") == "ok"
    shown = settings(sysadmin)
    assert (shown["privilege-refresh-period"], shown["tps-weight"]) == ("60", "4")


@pytest.mark.parametrize("command,words", [
    ("set-config:context=security;enable-quotas=false", "enable-quotas is not dynamic"),
    ("set-config:context=security;session-ttl=119", "session-ttl must be a number from 120 to 864000"),
    ("set-config:context=security;session-ttl=abc", "session-ttl must be a number"),
    ("set-config:context=security;tps-weight=1", "tps-weight must be a number from 2 to 20"),
    ("set-config:context=security;log.report-violation=maybe", "must be true or false"),
    ("set-config:context=security;log.report-data-op=true", "needs namespace="),
    ("set-config:context=security;no-such-thing=1", "unknown security setting no-such-thing"),
    ("set-config:context=security", "no security setting given"),
])
def test_static_settings_and_bad_values_are_refused_by_name(node, sysadmin, command, words):
    before = settings(sysadmin)
    refused = answer(sysadmin, command)
    assert words in refused, refused
    assert settings(sysadmin) == before


def test_audit_flags_turn_on_and_off_while_running(node, sysadmin):
    def logins_logged() -> int:
        return node.log_text().count("audit: authentication user=admin")

    base = logins_logged()
    with connect(node) as s:
        assert login(s, b"admin", ADMIN_HASH)[0] == 0
    assert logins_logged() == base, "logins reported before report-authentication was set"

    assert answer(sysadmin, "set-config:context=security;log.report-authentication=true") == "ok"
    assert settings(sysadmin)["log.report-authentication"] == "true"
    with connect(node) as s:
        assert login(s, b"admin", ADMIN_HASH)[0] == 0
    assert wait_until(lambda: logins_logged() > base, timeout=5), node.log_text()[-2000:]

    assert answer(sysadmin, "set-config:context=security;log.report-authentication=false") == "ok"
    now = logins_logged()
    with connect(node) as s:
        assert login(s, b"admin", ADMIN_HASH)[0] == 0
    assert logins_logged() == now


def test_data_op_reports_follow_their_scope(node, sysadmin):
    def reported(key: str) -> bool:
        return f"audit: data-op user=sam" in node.log_text() and f"set={SET}" in node.log_text() \
            and key in node.log_text()

    assert answer(sysadmin, f"set-config:context=security;log.report-data-op=true;namespace={NS};set={SET}") == "ok"
    assert settings(sysadmin)["log.report-data-op"] == f"{NS}:{SET}"
    sysadmin.put((NS, SET, "audited"), {"v": 1})
    sysadmin.put((NS, "elsewhere", "not-audited"), {"v": 1})

    def data_op_lines():
        return [line for line in node.log_text().splitlines() if "audit: data-op user=sam" in line]
    lines = wait_until(data_op_lines, timeout=5)
    assert lines, node.log_text()[-2000:]
    assert all(f"set={SET}" in line for line in lines), lines

    assert answer(sysadmin, f"set-config:context=security;log.report-data-op=false;namespace={NS};set={SET}") == "ok"
    assert settings(sysadmin)["log.report-data-op"] == ""
    count = len(data_op_lines())
    sysadmin.put((NS, SET, "after"), {"v": 1})
    assert len(data_op_lines()) == count


def test_an_open_node_has_no_security_settings():
    srv = BolideServer()
    with srv:
        c = srv.client()
        assert c.info_random_node("get-config:context=security").split("\t", 1)[-1].strip() == ""
        refused = answer(c, "set-config:context=security;session-ttl=600")
        assert "security is not enabled" in refused, refused
