"""PKI login: a client that presents a certificate over mutual TLS and no
password logs in as the user its certificate's common name names
(``auth_mode`` PKI in the official Python client, a LOGIN without fields
on the wire). Users created with no password (``admin_create_pki_user``,
the hash of ``nopassword``) log in only this way; users with a password
may log in either way. Refused: no client certificate (a TLS port with
``tls-authenticate-client false``, or the plain port), a certificate
naming no user, a PKI user's password login or password change, an
address outside the user's allowlist. The token a PKI login gets opens
further connections, on the plain port too. The Go client's AuthModePKI
runs against the same node (tests/go/client/pki_test.go).

The PKI is made fresh by the ``tls_certs`` example: ``client.pem`` names
``client-a``, ``client-b.pem`` ``client-b``, ``client-c.pem``
``client-c``."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess

import aerospike
import pytest
from aerospike import exception as ex

from bolide_server import REPO_ROOT, BolideServer, free_ports
from helpers import parse_kv
from security_helpers import (
    ADMIN_HASH, AUTHENTICATE, FIELD_SESSION_TOKEN, FIELD_SESSION_TTL, LOGIN, admin_fields,
    admin_message, client as password_client, connect, login, raw_info, read_frame,
)
from tls_helpers import NODE_NAME, make_pki, remove_pki, tls_client_config, tls_config

NS = "test"
SET = "pki"


@pytest.fixture(scope="module")
def pki():
    directory = make_pki()
    yield directory
    remove_pki(directory)


def secured_tls_server(pki, authenticate):
    """A secured node with a TLS service port checking clients as
    ``authenticate`` says (None: the default, a certificate required)."""
    (tls_port,) = free_ports(1)
    text = tls_config(pki, tls_port, authenticate=authenticate) + (
        "security {{\n    log {{\n        report-authentication true\n    }}\n}}\n")
    server = BolideServer(config_text=text)
    server.start()
    return server, tls_port


@pytest.fixture(scope="module")
def mutual(pki):
    """A secured node asking TLS clients for certificates, with the users
    the tests log in as: ``client-a`` (PKI only, read-write), ``client-b``
    (a password too, read only); ``client-c`` is nobody."""
    server, port = secured_tls_server(pki, None)
    try:
        admin = password_client(server, "admin", "admin")
        admin.admin_create_pki_user("client-a", ["read-write"])
        admin.admin_create_user("client-b", "secret-b", ["read"])
        admin.close()
        yield server, port
    finally:
        server.stop()


def pki_client(pki, port, cert, **extra):
    config = tls_client_config(pki, port, cert=cert)
    config.setdefault("policies", {})["auth_mode"] = aerospike.AUTH_PKI
    config.update(extra)
    return aerospike.client(config).connect()


def pki_refused(pki, port, cert) -> ex.AerospikeError:
    with pytest.raises(ex.AerospikeError) as error:
        client = pki_client(pki, port, cert)
        # Connected anyway: a request must not get through either.
        client.put((NS, SET, "never"), {"v": 1})
        client.close()
    return error.value


def statistics(server) -> dict:
    with connect(server) as s:
        result, _, _ = login(s, b"admin", ADMIN_HASH)
        assert result == 0
        return parse_kv(raw_info(s, "statistics").split("\t", 1)[-1].strip())


def test_a_certificate_logs_in_as_the_user_its_common_name_names(pki, mutual):
    server, port = mutual
    logins = int(statistics(server)["security_logins"])
    client = pki_client(pki, port, "client")
    try:
        # client-a holds read-write: records go in and come back, through
        # the pool connections the client opens with the session token.
        for i in range(20):
            client.put((NS, SET, f"a{i}"), {"v": i})
        batch = client.batch_read([(NS, SET, f"a{i}") for i in range(20)])
        assert [row.record[2]["v"] for row in batch.batch_records] == list(range(20))
        # ... and nothing else: user administration needs user-admin.
        with pytest.raises(ex.AerospikeError) as error:
            client.admin_create_user("mallory", "x", ["read"])
        assert error.value.code == 81, error.value
        # The audit trail says who logged in, and how.
        lines = [line for line in server.log_text().splitlines() if "action=pki-login" in line]
        assert any("user=client-a" in line and "result=0" in line for line in lines), lines
    finally:
        client.close()
    assert int(statistics(server)["security_logins"]) > logins


def test_a_user_with_a_password_may_log_in_either_way(pki, mutual):
    server, port = mutual
    client = pki_client(pki, port, "client-b")
    try:
        _, _, bins = client.get((NS, SET, "a3"))
        assert bins == {"v": 3}
        # client-b reads only.
        with pytest.raises(ex.AerospikeError) as error:
            client.put((NS, SET, "b"), {"v": 1})
        assert error.value.code == 81, error.value
    finally:
        client.close()
    by_password = password_client(server, "client-b", "secret-b")
    _, _, bins = by_password.get((NS, SET, "a4"))
    assert bins == {"v": 4}
    by_password.close()


def test_a_certificate_naming_no_user_is_refused(pki, mutual):
    _, port = mutual
    error = pki_refused(pki, port, "client-c")
    assert error.code == 60, error  # INVALID_USER


def test_a_pki_user_has_no_password(pki, mutual):
    server, _ = mutual
    # The literal "nopassword" is the marker, not a password.
    for password in ("nopassword", "secret"):
        with pytest.raises(ex.AerospikeError) as error:
            password_client(server, "client-a", password)
        assert error.value.code in (62, 65), error.value
    admin = password_client(server, "admin", "admin")
    try:
        with pytest.raises(ex.AerospikeError) as error:
            admin.admin_set_password("client-a", "new-secret")
        assert error.value.code == 64, error.value  # FORBIDDEN_PASSWORD
        info = admin.admin_query_user_info("client-a")
        assert info["roles"] == ["read-write"], info
    finally:
        admin.close()


def test_a_pki_login_obeys_the_users_allowlist(pki, mutual):
    server, port = mutual
    admin = password_client(server, "admin", "admin")
    try:
        admin.admin_create_role("far-away", [{"code": aerospike.PRIV_READ}],
                                whitelist=["10.99.0.0/16"])
        admin.admin_grant_roles("client-b", ["far-away"])
        error = pki_refused(pki, port, "client-b")
        assert error.code == 82, error  # NOT_WHITELISTED
    finally:
        admin.admin_revoke_roles("client-b", ["far-away"])
        admin.admin_drop_role("far-away")
        admin.close()


def tls_socket(pki, port, cert):
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw, server_hostname=NODE_NAME)


def test_the_token_of_a_pki_login_opens_other_connections(pki, mutual):
    """On the wire: LOGIN without fields over mutual TLS answers a session
    token and its TTL; AUTHENTICATE with only that token opens another
    connection, on the plain port as well (Java's forLoginOnly)."""
    server, port = mutual
    with tls_socket(pki, port, "client") as s:
        s.sendall(admin_message(LOGIN, []))
        version, kind, body = read_frame(s)
        assert (version, kind, body[1]) == (2, 2, 0), body[:16]
        fields = admin_fields(body)
        token = fields[FIELD_SESSION_TOKEN]
        assert int.from_bytes(fields[FIELD_SESSION_TTL], "big") >= 120
        assert raw_info(s, "namespaces").split("\t")[-1].strip() == "test"
    with connect(server) as plain:
        plain.sendall(admin_message(AUTHENTICATE, [(FIELD_SESSION_TOKEN, token)]))
        _, _, body = read_frame(plain)
        assert body[1] == 0, body[:16]
        assert raw_info(plain, "namespaces").split("\t")[-1].strip() == "test"


def test_no_certificate_no_pki_login(pki, mutual):
    """A LOGIN without fields on a connection that presented no
    certificate is refused (65): on the plain port, and on a TLS port that
    asks for none."""
    server, _ = mutual
    with connect(server) as plain:
        plain.sendall(admin_message(LOGIN, []))
        _, _, body = read_frame(plain)
        assert len(body) == 16 and body[1] == 65, body
        assert raw_info(plain, "namespaces").startswith("ERROR:80")
    standard, port = secured_tls_server(pki, "false")
    try:
        with pytest.raises(ex.AerospikeError) as error:
            client = pki_client(pki, port, None)
            client.put((NS, SET, "never"), {"v": 1})
        assert error.value.code == 65, error.value
        # With a certificate the client offers, the node asked for none,
        # so none arrives: refused the same way.
        with pytest.raises(ex.AerospikeError) as error:
            pki_client(pki, port, "client")
        assert error.value.code == 65, error.value
        assert "without a client certificate" in standard.log_text()
    finally:
        standard.stop()


def test_the_go_clients_auth_mode_pki(pki, mutual):
    """tests/go/client/pki_test.go: the official Go client with
    AuthModePKI, its certificate naming client-a, and refusals."""
    server, port = mutual
    env = dict(os.environ, BOLIDE_PKI_PORT=str(port), BOLIDE_TLS_DIR=str(pki),
               GOFLAGS="-buildvcs=false")
    run = subprocess.run(
        ["go", "test", "-count=1", "-run", "^TestPKI", "-v", "./..."],
        cwd=REPO_ROOT / "tests" / "go" / "client", env=env,
        capture_output=True, text=True, timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "--- PASS: TestPKILogin" in output, output
    assert "--- PASS: TestPKIRefusals" in output, output
    assert server.alive()
