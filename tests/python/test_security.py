"""Access control through the official Python client's admin API and login,
and the admin protocol's bytes on raw sockets, against a secured bolided
(``security { enable-quotas true }``): the default admin, users and roles,
passwords, allowlists, quotas, sessions, refusals and their exact codes,
the statistics that count them, and the users surviving a restart."""

from __future__ import annotations

import time

import aerospike
import pytest
from aerospike import exception as ex

from helpers import NS
from security_helpers import (
    ADMIN_HASH, authenticate, client, connect, login, raw_info, read_frame,
    admin_message, secured_config, secured_server, wait_until, FIELD_SESSION_TOKEN,
    FIELD_SESSION_TTL,
)

SET = "sec"


@pytest.fixture(scope="module")
def node():
    srv = secured_server()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def admin(node):
    return client(node, "admin", "admin")


def code_of(call):
    try:
        call()
    except ex.AerospikeError as error:
        return error.code
    return 0


def stats(c) -> dict:
    text = c.info_random_node("statistics")
    text = text.split("\t", 1)[-1].strip()
    return dict(pair.split("=", 1) for pair in text.split(";") if "=" in pair)


# ---------------------------------------------------------------- logins
def test_a_client_without_a_user_cannot_connect(node):
    with pytest.raises(ex.AerospikeError):
        c = aerospike.client(node.client_config()).connect()
        c.put((NS, SET, "x"), {"a": 1})


def test_wrong_password_and_unknown_user_are_refused(node):
    with pytest.raises(ex.AerospikeError) as error:
        client(node, "admin", "wrong")
    assert error.value.code in (62, 65), error.value
    with pytest.raises(ex.AerospikeError) as error:
        client(node, "nobody", "admin")
    assert error.value.code == 60, error.value


def test_the_default_admin_administers_users_and_nothing_else(node, admin):
    users = admin.admin_query_users_info()
    assert users["admin"]["roles"] == ["user-admin"]
    assert code_of(lambda: admin.put((NS, SET, "a"), {"v": 1})) == 81
    assert code_of(lambda: admin.get((NS, SET, "a"))) == 81


def test_login_gives_a_session_token_that_authenticates_other_sockets(node):
    with connect(node) as first:
        result, fields, size = login(first, b"admin", ADMIN_HASH)
        assert result == 0
        token = fields[FIELD_SESSION_TOKEN]
        assert 0 < len(token) and size < 8192
        assert int.from_bytes(fields[FIELD_SESSION_TTL], "big") == 86400
    with connect(node) as second:
        assert authenticate(second, b"admin", token) == 0
        assert "\t" in raw_info(second, "namespaces")
    with connect(node) as third:
        assert authenticate(third, b"admin", token[:-1] + bytes([token[-1] ^ 1])) == 65


def test_unauthenticated_info_is_one_error_line(node):
    with connect(node) as s:
        assert raw_info(s, "namespaces", "build") == "ERROR:80:not authenticated\n"


def test_admin_messages_with_version_zero_are_answered(node):
    # asadm and asinfo send proto version 0 on admin messages.
    with connect(node) as s:
        s.sendall(admin_message(20, [(0, b"admin"), (3, ADMIN_HASH)], version=0))
        version, kind, body = read_frame(s)
        assert (version, kind, body[1]) == (2, 2, 0)


# ---------------------------------------------------------------- users
def test_users_are_created_granted_revoked_and_dropped(node, admin):
    admin.admin_create_user("alice", "pw-alice", ["read-write", "sys-admin", "read"])
    try:
        info = admin.admin_query_user_info("alice")
        assert info["roles"] == ["read", "read-write", "sys-admin"]
        assert info["read_info"][0] == 0 and info["conns_in_use"] == 0
        assert code_of(lambda: admin.admin_create_user("alice", "x", ["read"])) == 61
        assert code_of(lambda: admin.admin_create_user("bob", "x", ["no-role"])) == 70
        admin.admin_revoke_roles("alice", ["sys-admin"])
        admin.admin_grant_roles("alice", ["truncate"])
        assert admin.admin_query_user_info("alice")["roles"] == ["read", "read-write", "truncate"]
        alice = client(node, "alice", "pw-alice")
        alice.put((NS, SET, "alice"), {"v": 1})
        assert alice.get((NS, SET, "alice"))[2] == {"v": 1}
        assert admin.admin_query_user_info("alice")["conns_in_use"] >= 1
        # No user-admin: 81.
        assert code_of(lambda: alice.admin_create_user("eve", "x", ["user-admin"])) == 81
    finally:
        admin.admin_drop_user("alice")
    assert code_of(lambda: admin.admin_query_user_info("alice")) == 60
    assert code_of(lambda: admin.admin_drop_user("alice")) == 60


def test_odd_names_and_empty_passwords_are_accepted(node, admin):
    name = "!#Q#AEQ@#$%&^*((^&*~~~````"
    admin.admin_create_user(name, "", [])
    try:
        assert name in admin.admin_query_users_info()
        assert admin.admin_query_user_info(name)["roles"] == []
        # (The Python client refuses an empty password at login: "Password
        # must not be empty", so the login is not tried here.)
    finally:
        admin.admin_drop_user(name)


def test_a_user_changes_its_own_password(node, admin):
    admin.admin_create_user("carol", "old-pw", ["read"])
    try:
        carol = client(node, "carol", "old-pw")
        carol.admin_change_password("carol", "new-pw")
        with pytest.raises(ex.AerospikeError) as error:
            client(node, "carol", "old-pw")
        assert error.value.code in (62, 65)
        client(node, "carol", "new-pw").close()
        # The client that changed it goes on working.
        assert code_of(lambda: carol.get((NS, SET, "nothing"))) == 2
        # An administrator sets it.
        admin.admin_set_password("carol", "reset-pw")
        client(node, "carol", "reset-pw").close()
    finally:
        admin.admin_drop_user("carol")


def test_a_dropped_users_open_connections_lose_access(node, admin):
    admin.admin_create_user("dave", "pw", ["read-write"])
    dave = client(node, "dave", "pw")
    dave.put((NS, SET, "dave"), {"v": 1})
    admin.admin_drop_user("dave")
    code = code_of(lambda: dave.get((NS, SET, "dave")))
    assert code in (80, 65, 60, -1), code  # refused, never the record
    with pytest.raises(ex.AerospikeError):
        client(node, "dave", "pw")


# ---------------------------------------------------------------- roles
def test_roles_are_created_granted_revoked_and_dropped(node, admin):
    # admin_query_role(s) answer the privileges; admin_get_role(s) the
    # whole role (privileges, allowlist, quotas).
    roles = admin.admin_get_roles()
    for predefined in ("user-admin", "sys-admin", "data-admin", "udf-admin", "sindex-admin",
                       "read", "read-write", "read-write-udf", "write", "truncate"):
        assert predefined in roles, predefined
    assert roles["read"]["privileges"] == [{"code": aerospike.PRIV_READ, "ns": "", "set": ""}]
    admin.admin_create_role("reader", [{"code": aerospike.PRIV_READ, "ns": NS, "set": "demo"}])
    try:
        role = admin.admin_get_role("reader")
        assert role["privileges"] == [{"code": aerospike.PRIV_READ, "ns": NS, "set": "demo"}]
        assert role["whitelist"] == [] and role["read_quota"] == 0 and role["write_quota"] == 0
        assert code_of(lambda: admin.admin_create_role(
            "reader", [{"code": aerospike.PRIV_READ}])) == 71
        admin.admin_grant_privileges("reader", [{"code": aerospike.PRIV_WRITE, "ns": NS}])
        admin.admin_revoke_privileges("reader", [{"code": aerospike.PRIV_READ, "ns": NS, "set": "demo"}])
        assert admin.admin_get_role("reader")["privileges"] == [
            {"code": aerospike.PRIV_WRITE, "ns": NS, "set": ""}]
        assert code_of(lambda: admin.admin_grant_privileges(
            "nope", [{"code": aerospike.PRIV_READ}])) == 70
    finally:
        admin.admin_drop_role("reader")
    assert code_of(lambda: admin.admin_get_role("reader")) == 70
    assert code_of(lambda: admin.admin_drop_role("reader")) == 70


def test_allowlists(node, admin):
    admin.admin_create_role("far", [{"code": aerospike.PRIV_READ}])
    admin.admin_create_user("erin", "pw", ["far"])
    try:
        assert code_of(lambda: admin.admin_set_whitelist("far", ["bad_IP"])) == 73
        admin.admin_set_whitelist("far", ["10.0.2.0/24", "127.0.0.1", "127.0.0.2"])
        assert admin.admin_get_role("far")["whitelist"] == ["10.0.2.0/24", "127.0.0.1", "127.0.0.2"]
        client(node, "erin", "pw").close()
        admin.admin_set_whitelist("far", ["123.4.5.6"])
        with pytest.raises(ex.AerospikeError) as error:
            client(node, "erin", "pw")
        assert error.value.code == 82
        admin.admin_set_whitelist("far", [])
        assert admin.admin_get_role("far")["whitelist"] == []
        client(node, "erin", "pw").close()
    finally:
        admin.admin_drop_user("erin")
        admin.admin_drop_role("far")


def test_quotas_limit_reads_per_second(node, admin):
    admin.admin_create_role("slow", [{"code": aerospike.PRIV_READ_WRITE}], read_quota=20, write_quota=4500)
    admin.admin_create_user("frank", "pw", ["slow"])
    try:
        role = admin.admin_get_role("slow")
        assert (role["read_quota"], role["write_quota"]) == (20, 4500)
        admin.admin_set_quotas("slow", read_quota=10)
        role = admin.admin_get_role("slow")
        assert (role["read_quota"], role["write_quota"]) == (10, 4500)
        frank = client(node, "frank", "pw")
        frank.put((NS, SET, "frank"), {"v": 1})
        codes = [code_of(lambda: frank.get((NS, SET, "frank"))) for _ in range(60)]
        assert 83 in codes, codes
        assert codes.count(0) >= 10
        assert admin.admin_query_user_info("frank")["read_info"][0] == 10
        assert int(stats(admin)["security_quota_exceeded"]) >= 1
    finally:
        admin.admin_drop_user("frank")
        admin.admin_drop_role("slow")


# ---------------------------------------------------------------- refusals
def test_info_commands_need_their_permission(node, admin):
    admin.admin_create_user("gina", "pw", ["read"])
    try:
        gina = client(node, "gina", "pw")
        # The client turns an ERROR answer into an exception.
        with pytest.raises(ex.RoleViolation) as refused:
            gina.info_random_node(f"truncate:namespace={NS};set={SET}")
        assert "role violation - requires permission 'truncate'" in str(refused.value), refused.value
        assert "ERROR" not in gina.info_random_node("namespaces")
        before = int(stats(admin)["security_role_violations"])
        assert code_of(lambda: gina.put((NS, SET, "g"), {"v": 1})) == 81
        assert int(stats(admin)["security_role_violations"]) >= before + 1
    finally:
        admin.admin_drop_user("gina")


def test_wrong_passwords_are_held_off_and_logged(node, admin):
    hash_of_wrong = b"$2a$10$7EqJtq98hPqEX7fNZaFWoOU4Rn.f3DX0Z38lDGiUMPCvtmdP43AAm"
    for _ in range(5):
        with connect(node) as s:
            assert login(s, b"admin", hash_of_wrong)[0] == 62
    # Held off: the right password is refused too, for a while.
    with connect(node) as s:
        assert login(s, b"admin", ADMIN_HASH)[0] == 62
    assert "too many failed logins" in node.log_text()
    assert int(stats(admin)["security_logins_held_off"]) >= 1

    def logs_in():
        with connect(node) as s:
            return login(s, b"admin", ADMIN_HASH)[0] == 0
    assert wait_until(logs_in, timeout=15, step=1)


@pytest.mark.time_limit(200)
def test_sessions_expire():
    srv = secured_server(security="security {\n    session-ttl 120\n}\n")
    with srv:
        with connect(srv) as s:
            result, fields, _ = login(s, b"admin", ADMIN_HASH)
            assert result == 0
            assert int.from_bytes(fields[FIELD_SESSION_TTL], "big") == 120
            token = fields[FIELD_SESSION_TOKEN]
        with connect(srv) as s:
            assert authenticate(s, b"admin", token) == 0
        time.sleep(121)
        with connect(srv) as s:
            assert authenticate(s, b"admin", token) == 66


def test_users_survive_a_restart():
    srv = secured_server()
    with srv:
        admin = client(srv, "admin", "admin")
        admin.admin_create_user("hal", "pw", ["read"])
        admin.admin_create_role("r1", [{"code": aerospike.PRIV_WRITE, "ns": NS}])
        admin.close()
        srv._clients = []
        assert srv.terminate() == 0
        srv.start()
        admin = client(srv, "admin", "admin")
        assert admin.admin_query_user_info("hal")["roles"] == ["read"]
        assert admin.admin_get_role("r1")["privileges"] == [
            {"code": aerospike.PRIV_WRITE, "ns": NS, "set": ""}]
        client(srv, "hal", "pw").close()


# ---------------------------------------------------------------- console
def http_server():
    from bolide_server import BolideServer, free_ports
    (http_port,) = free_ports(1)
    text = secured_config().replace(
        "network {{\n", f"network {{{{\n    http {{{{\n        address 127.0.0.1\n        port {http_port}\n    }}}}\n", 1)
    return BolideServer(config_text=text), http_port


def http(port, method, path, user=None, password=None, body=None):
    import base64
    import http.client
    import json
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {}
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    if body is not None:
        headers["Content-Type"] = "application/json"
        body = json.dumps(body)
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def test_the_console_asks_for_a_login_and_runs_as_its_user():
    import json
    srv, port = http_server()
    with srv:
        status, headers, _ = http(port, "GET", "/api/v1/node")
        assert status == 401 and headers.get("www-authenticate", headers.get("WWW-Authenticate", "")).startswith("Basic")
        assert http(port, "GET", "/", )[0] == 401
        assert http(port, "GET", "/api/v1/node", "admin", "wrong")[0] == 401
        status, _, body = http(port, "GET", "/api/v1/node", "admin", "admin")
        assert status == 200, body
        answer = json.loads(body)
        assert answer["ok"] and "security_logins" in answer["info"]["statistics"]
        # /metrics stays open (node figures, no records).
        status, _, body = http(port, "GET", "/metrics")
        assert status == 200 and b"bolide_build_info" in body, body[:200]
        # admin holds user-admin only: the console's truncate is refused.
        status, _, body = http(port, "POST", "/api/v1/truncate", "admin", "admin",
                               {"namespace": NS, "set": SET})
        assert status == 400 and b"ERROR:81" in body, (status, body)
        admin = client(srv, "admin", "admin")
        admin.admin_create_user("tina", "pw", ["truncate"])
        status, _, body = http(port, "POST", "/api/v1/truncate", "tina", "pw",
                               {"namespace": NS, "set": SET})
        assert status == 200, (status, body)


# ---------------------------------------------------------------- audit
def test_the_audit_trail_reports_what_its_settings_name():
    security = ("security {\n    log {\n        report-authentication true\n"
                "        report-user-admin true\n        report-violation true\n"
                "        report-sys-admin true\n    }\n}\n")
    srv = secured_server(security=security)
    with srv:
        admin = client(srv, "admin", "admin")
        admin.admin_create_user("ivan", "pw", ["read"])
        ivan = client(srv, "ivan", "pw")
        assert code_of(lambda: ivan.put((NS, SET, "i"), {"v": 1})) == 81
        with pytest.raises(ex.RoleViolation):
            ivan.info_random_node(f"truncate:namespace={NS};set={SET}")

        def logged():
            text = srv.log_text()
            return ("action=login" in text and "user=admin" in text
                    and "action=create-user" in text
                    and "user=ivan" in text and "result=81" in text
                    and "sys-admin user=ivan" in text and "action=truncate" in text)
        assert wait_until(logged, timeout=5), srv.log_text()[-3000:]
