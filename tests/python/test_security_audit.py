"""The audit trail (``security { log { report-… } }``) through the official
Python client against a secured bolided whose audit lines also go to a file
of their own (``logging { file PATH { context audit info } }``): every kind
of event (authentication, user-admin, sys-admin, violation, data operations
in a namespace and set, by a user, by a role) is one line naming the user,
the client's address and the action, and nothing outside the configured
scopes is reported."""

from __future__ import annotations

import re
from pathlib import Path

import aerospike
import pytest
from aerospike import exception as ex

from helpers import NS
from security_helpers import ADMIN_HASH, client, connect, login, secured_server, wait_until

AUDITED = "audited"
QUIET = "quiet"
DORA_PASSWORD = "Dora-Secret-42"

SECURITY = """security {
    log {
        report-authentication true
        report-user-admin true
        report-sys-admin true
        report-violation true
        report-data-op %s %s
        report-data-op-user dora
        report-data-op-role auditor
    }
}
""" % (NS, AUDITED)

LOGGING = """logging {
    console {
        context any info
    }
    file WORKDIR/audit.log {
        context audit info
    }
}
"""

# 2026-11-25T20:01:02.345Z audit: KIND user=U client=IP:PORT action=A [detail="…"] result=N
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z audit: (\S+) user=(\S+) "
                  r"client=(\S+) action=(\S+)(?: detail=\"([^\"]*)\")? result=(\d+)$")


@pytest.fixture(scope="module")
def node():
    srv = secured_server(security=SECURITY, logging=LOGGING)
    srv.start()
    try:
        admin = client(srv, "admin", "admin")
        admin.admin_create_role("auditor", [{"code": aerospike.PRIV_READ}])
        admin.admin_create_user("ann", "pw", ["read-write", "sys-admin"])
        admin.admin_create_user("dora", DORA_PASSWORD, ["read-write"])
        admin.admin_create_user("otto", "pw", ["auditor"])
        admin.admin_create_user("vic", "pw", ["read"])
        yield srv
    finally:
        srv.stop()


def lines(srv) -> list:
    path = Path(srv.work_directory) / "audit.log"
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for raw in text.splitlines():
        match = LINE.match(raw)
        assert match, f"malformed audit line: {raw!r}"
        kind, user, address, action, detail, result = match.groups()
        out.append(dict(kind=kind, user=user, client=address, action=action,
                        detail=detail or "", result=int(result)))
    return out


def find(srv, **want):
    def matching():
        return [l for l in lines(srv) if all(l[k] == v for k, v in want.items())]
    return wait_until(matching, timeout=5) or []


def test_every_line_of_the_file_is_one_well_formed_event(node):
    found = lines(node)
    assert found, "the audit file is empty"
    for line in found:
        assert re.match(r"^127\.0\.0\.1:\d+$", line["client"]), line


def test_authentication_is_reported(node):
    assert find(node, kind="authentication", user="admin", action="login", result=0)
    with connect(node) as s:
        hash_of_wrong = b"$2a$10$7EqJtq98hPqEX7fNZaFWoOU4Rn.f3DX0Z38lDGiUMPCvtmdP43AAm"
        assert login(s, b"vic", hash_of_wrong)[0] != 0
    failed = find(node, kind="authentication", user="vic", action="login")
    assert any(line["result"] != 0 for line in failed), failed


def test_user_admin_is_reported_without_passwords(node):
    created = find(node, kind="user-admin", user="admin", action="create-user")
    assert any("user=dora" in line["detail"] for line in created), created
    text = (Path(node.work_directory) / "audit.log").read_text()
    assert DORA_PASSWORD not in text
    assert ADMIN_HASH.decode() not in text


def test_sys_admin_and_violations_are_reported(node):
    ann = client(node, "ann", "pw")
    ann.info_random_node("set-config:context=security;tps-weight=3")
    assert find(node, kind="sys-admin", user="ann", action="set-config")
    vic = client(node, "vic", "pw")
    with pytest.raises(ex.AerospikeError):
        vic.put((NS, AUDITED, "v"), {"v": 1})
    violations = find(node, kind="violation", user="vic", result=81)
    assert violations, lines(node)[-10:]


def test_data_ops_are_reported_in_their_scopes_only(node):
    ann = client(node, "ann", "pw")
    dora = client(node, "dora", DORA_PASSWORD)
    otto = client(node, "otto", "pw")
    before = len([l for l in lines(node) if l["kind"] == "data-op"])
    ann.put((NS, AUDITED, "a1"), {"v": 1})
    ann.get((NS, AUDITED, "a1"))
    ann.remove((NS, AUDITED, "a1"))
    ann.put((NS, QUIET, "a2"), {"v": 1})          # outside every scope
    dora.put((NS, QUIET, "d1"), {"v": 1})         # dora: every set
    otto.get((NS, QUIET, "d1"))                   # otto holds auditor

    def data_ops():
        found = [l for l in lines(node) if l["kind"] == "data-op"][before:]
        return found if len(found) >= 5 else None
    found = wait_until(data_ops, timeout=5) or []
    ann_lines = [l for l in found if l["user"] == "ann"]
    assert len(ann_lines) == 3, found
    assert all(f"ns={NS} set={AUDITED}" == l["detail"] for l in ann_lines), ann_lines
    assert len({l["action"] for l in ann_lines}) == 3, ann_lines   # write, read, delete
    assert [l["detail"] for l in found if l["user"] == "dora"] == [f"ns={NS} set={QUIET}"], found
    assert [l["detail"] for l in found if l["user"] == "otto"] == [f"ns={NS} set={QUIET}"], found
    assert len(found) == 5, found
