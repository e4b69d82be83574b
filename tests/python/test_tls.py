"""TLS through the official Python client (the C client and OpenSSL
underneath) against a real bolided: standard TLS and mutual TLS, the name
the client checks, certificates refused (another CA, expired, revoked,
not on the names list), a plain client on the TLS port and a TLS client on
the plain port, certificates reloaded without a restart
(``tls-refresh-period``), and the statistics that count it all. The PKI is
made fresh by the ``tls_certs`` example for each run."""

from __future__ import annotations

import shutil
import socket
import ssl
import time

import aerospike
import pytest
from aerospike import exception as ex

from bolide_server import run_config_check as check
from helpers import parse_kv, wait_for
from tls_helpers import (
    NODE_NAME, make_pki, remove_pki, tls_client_config, tls_config, tls_server,
)

NS = "test"
SET = "tls"


@pytest.fixture(scope="module")
def pki():
    directory = make_pki()
    yield directory
    remove_pki(directory)


def tls_client(pki, port, **kwargs):
    return aerospike.client(tls_client_config(pki, port, **kwargs)).connect()


def refused(pki, port, **kwargs) -> str:
    """Connecting with this TLS configuration must fail; returns the
    client's error text."""
    with pytest.raises(ex.AerospikeError) as error:
        client = tls_client(pki, port, **kwargs)
        # Connected anyway: a request must not get through either.
        client.put((NS, SET, "never"), {"v": 1})
        client.close()
    return str(error.value)


def stats(client) -> dict:
    text = client.info_random_node("statistics").split("\t", 1)[-1].strip()
    return parse_kv(text)


def round_trip(client, key: str, value: int) -> None:
    client.put((NS, SET, key), {"v": value})
    _, _, bins = client.get((NS, SET, key))
    assert bins == {"v": value}


# ------------------------------------------------------------ standard TLS
@pytest.fixture(scope="module")
def standard(pki):
    server, port = tls_server(pki, authenticate="false")
    try:
        yield server, port
    finally:
        server.stop()


def test_standard_tls_serves_reads_writes_and_info(pki, standard):
    server, port = standard
    client = tls_client(pki, port)
    try:
        for i in range(20):
            round_trip(client, f"std-{i}", i)
        assert client.info_random_node("service-tls-std").split("\t", 1)[-1].strip() == (
            f"127.0.0.1:{port}"
        )
        # Aerospike's answer when the node has no peers.
        peers = client.info_random_node("peers-tls-std").split("\t", 1)[-1].strip()
        assert peers.endswith(",3000,[]"), peers
        network = parse_kv(
            client.info_random_node("get-config:context=network").split("\t", 1)[-1].strip()
        )
        assert network["service.tls-port"] == str(port)
        assert network["service.tls-name"] == NODE_NAME
        assert network["service.tls-authenticate-client"] == "false"
        counted = stats(client)
        assert int(counted["tls_connections"]) >= 1
        assert int(counted["tls_connections_opened"]) >= 1
    finally:
        client.close()
    # The same records through the plain port.
    plain = server.client()
    _, _, bins = plain.get((NS, SET, "std-7"))
    assert bins == {"v": 7}


def test_the_client_refuses_another_ca_a_wrong_name_and_an_expired_certificate(pki, standard):
    _, port = standard
    refused(pki, port, ca="other-ca.pem")
    refused(pki, port, name="not-the-node")
    # An expired node certificate: its own node.
    server, expired_port = tls_server(pki, authenticate="false", cert="expired")
    try:
        refused(pki, expired_port)
        counted = stats(server.client())
        assert int(counted["tls_handshake_failures"]) >= 1
    finally:
        server.stop()


def test_plain_and_tls_on_the_wrong_ports_fail_cleanly(pki, standard):
    server, port = standard
    plain = server.client()
    before = int(stats(plain)["tls_handshake_failures"])
    # A plain Aerospike client on the TLS port.
    cfg = server.client_config()
    cfg["hosts"] = [("127.0.0.1", port)]
    cfg["connect_timeout"] = 2000
    with pytest.raises(ex.AerospikeError):
        aerospike.client(cfg).connect()
    # A TLS client on the plain port: closed, and said so in the log.
    refused(pki, server.port)
    wait_for(lambda: "ignoring TLS connection" in server.log_text(), 10,
             what="the ClientHello on the plain port logged")
    # A raw plain info request on the TLS port gets no answer; the socket
    # is closed.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        body = b"statistics\n"
        raw.sendall(bytes([2, 1]) + len(body).to_bytes(6, "big") + body)
        raw.settimeout(15)
        answer = raw.recv(1024)
        assert not answer.startswith(bytes([2, 1])), answer
    wait_for(lambda: int(stats(plain)["tls_handshake_failures"]) > before, 15,
             what="failed handshakes counted")
    round_trip(plain, "still-serving", 1)
    client = tls_client(pki, port)
    round_trip(client, "still-serving-tls", 2)
    client.close()


# -------------------------------------------------------------- mutual TLS
def test_mutual_tls_needs_a_certificate_from_the_ca(pki):
    # No tls-authenticate-client: Aerospike's default asks for one.
    server, port = tls_server(pki, authenticate=None)
    try:
        client = tls_client(pki, port, cert="client")
        round_trip(client, "mutual", 1)
        client.close()
        refused(pki, port)  # no certificate
        refused(pki, port, cert="other-client")  # signed by another CA
        refused(pki, port, cert="expired-client")
        counted = stats(server.client())
        assert int(counted["tls_handshake_failures"]) >= 3
    finally:
        server.stop()


def test_tls_authenticate_client_names_and_the_blacklist(pki):
    directory = pki / "blacklist"
    directory.mkdir(exist_ok=True)
    blacklist = directory / "revoked.txt"
    blacklist.write_text("# serial [issuer]\n0B01DE /O=Bolide test/CN=Bolide test CA\n")
    server, port = tls_server(
        pki,
        authenticate="client-a",
        stanza_extra=f"        cert-blacklist {blacklist}\n",
    )
    try:
        client = tls_client(pki, port, cert="client")  # CN client-a
        round_trip(client, "named", 1)
        client.close()
        refused(pki, port, cert="client-b")  # signed by the CA, another name
        refused(pki, port, cert="revoked")  # client-a, serial 0B01DE
        assert "none of tls-authenticate-client's names" in server.log_text()
        assert "revoked" in server.log_text()
    finally:
        server.stop()


# ----------------------------------------------------------------- reload
def test_certificates_reload_without_a_restart(pki):
    # The node's files are copies, replaced in place below.
    directory = pki / "rotation"
    directory.mkdir(exist_ok=True)
    for name in ("node.pem", "node.key", "ca.pem"):
        shutil.copy(pki / name, directory / name)
    for name in ("node-ca2.pem", "node-ca2.key", "ca-2.pem", "other-ca.pem", "client.pem",
                 "client.key"):
        shutil.copy(pki / name, directory / name)
    server, port = tls_server(
        directory,
        authenticate="false",
        top_service_extra="    tls-refresh-period 1\n",
    )
    try:
        plain = server.client()
        client = tls_client(directory, port)
        round_trip(client, "before", 1)
        refused(directory, port, ca="ca-2.pem")
        # A broken certificate file: counted, the one in force stays.
        (directory / "node.pem").write_text("not a certificate\n")
        wait_for(lambda: int(stats(plain)["tls_certificate_reload_failures"]) >= 1, 15,
                 what="a failed reload counted")
        again = tls_client(directory, port)
        round_trip(again, "during", 2)
        again.close()
        # Rotate to a certificate from a new CA: the key first, then the
        # certificate (a reload between the two fails and is retried).
        shutil.copy(directory / "node-ca2.key", directory / "node.key")
        shutil.copy(directory / "node-ca2.pem", directory / "node.pem")
        wait_for(lambda: int(stats(plain)["tls_certificate_reloads"]) >= 1, 15,
                 what="the new certificate loaded")
        rotated = tls_client(directory, port, ca="ca-2.pem")
        round_trip(rotated, "after", 3)
        rotated.close()
        refused(directory, port, ca="ca.pem")
        # The connection made before the rotation still serves.
        round_trip(client, "old-connection", 4)
        client.close()
        assert server.alive()
    finally:
        server.stop()


def test_the_server_certificate_seen_on_the_wire(pki, standard):
    """TLS 1.2 (what the C client offers) works; the node presents the
    certificate configured, with the name in its SAN."""
    _, port = standard
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(pki / "ca.pem"))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=NODE_NAME) as tls:
            assert tls.version() == "TLSv1.2"
            certificate = tls.getpeercert()
            assert ("DNS", NODE_NAME) in certificate["subjectAltName"]
    # TLS 1.3 is off unless protocols allows it (Aerospike's default).
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with pytest.raises(ssl.SSLError):
            context.wrap_socket(raw, server_hostname=NODE_NAME)


def test_protocols_can_allow_tls_1_3(pki):
    server, port = tls_server(
        pki, authenticate="false", stanza_extra="        protocols TLSv1.2 TLSv1.3\n"
    )
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(str(pki / "ca.pem"))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=NODE_NAME) as tls:
                assert tls.version() == "TLSv1.3"
        client = tls_client(pki, port)
        round_trip(client, "tls12-and-13", 1)
        client.close()
    finally:
        server.stop()


# ----------------------------------------------------------- bad configs
def test_bad_tls_configurations_stop_the_node_naming_the_problem(pki, tmp_path):
    from bolide_server import free_ports

    (port,) = free_ports(1)

    def run_config_check(text):
        return check(text.replace("{work_directory}", str(tmp_path)))
    # A certificate file that does not exist.
    text = tls_config(pki, port, cert="missing")
    rc, err, out = run_config_check(text)
    assert rc not in (0, None), (rc, err, out)
    assert "missing.pem" in err + out, err + out
    # Client certificates asked for, but no CA to check them.
    text = tls_config(pki, port, authenticate="any").replace(
        f"        ca-file {pki / 'ca.pem'}\n", ""
    )
    rc, err, out = run_config_check(text)
    assert rc not in (0, None)
    assert "directive 'tls-port'" in err + out and "ca-file" in err + out, err + out
    # An OpenSSL cipher keyword.
    text = tls_config(pki, port, stanza_extra="        cipher-suite HIGH:!aNULL\n")
    rc, err, out = run_config_check(text)
    assert rc not in (0, None)
    assert "directive 'cipher-suite'" in err + out, err + out
    # A key that belongs to another certificate.
    text = tls_config(pki, port).replace(str(pki / "node.key"), str(pki / "client.key"))
    rc, err, out = run_config_check(text)
    assert rc not in (0, None)
    assert "do not fit" in err + out, err + out


# --------------------------------------------------------- other clients
def test_the_go_client_over_mutual_tls(pki):
    """tests/go/client/tls_test.go: the official Go client with its TLS
    config (RootCAs, a client certificate, the host's TLSName)."""
    import os
    import subprocess

    from bolide_server import REPO_ROOT

    server, port = tls_server(pki, authenticate="any")
    try:
        env = dict(os.environ, BOLIDE_TLS_PORT=str(port), BOLIDE_TLS_DIR=str(pki),
                   BOLIDE_PORT=str(server.port), GOFLAGS="-buildvcs=false")
        run = subprocess.run(
            ["go", "test", "-count=1", "-run", "^TestTLS", "-v", "./..."],
            cwd=REPO_ROOT / "tests" / "go" / "client", env=env,
            capture_output=True, text=True, timeout=600,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output
        assert "--- PASS: TestTLSMutualPutGetBatchAndInfo" in output, output
        assert "--- PASS: TestTLSRefusals" in output, output
    finally:
        server.stop()


def test_the_bolide_tool_and_bolide_bench_over_mutual_tls(pki):
    """``bolide --tls-enable …`` (info requests with the tool's own TLS, and
    records through the official Rust crate's TLS) and ``bolide-bench
    --tls-enable …`` against a node asking for client certificates."""
    import subprocess

    from bolide_server import REPO_ROOT

    bolide = REPO_ROOT / "target" / "release" / "bolide"
    bench = REPO_ROOT / "target" / "release" / "bolide-bench"
    server, port = tls_server(pki, authenticate="any")
    try:
        flags = ["-h", "127.0.0.1", "-p", str(port), "--tls-enable", "--tls-name", NODE_NAME,
                 "--tls-cafile", str(pki / "ca.pem"),
                 "--tls-certfile", str(pki / "client.pem"),
                 "--tls-keyfile", str(pki / "client.key")]
        run = subprocess.run([str(bolide), *flags, "asinfo", "service-tls-std"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert f"127.0.0.1:{port}" in run.stdout, run.stdout
        run = subprocess.run(
            [str(bolide), *flags, "sql", "-c", "INSERT INTO test.tls (PK, v) VALUES ('cli', 42)"],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        _, _, bins = server.client().get((NS, SET, "cli"))
        assert bins == {"v": 42}
        # Another CA: refused, and said so.
        bad = [*flags]
        bad[bad.index(str(pki / "ca.pem"))] = str(pki / "other-ca.pem")
        run = subprocess.run([str(bolide), *bad, "asinfo", "statistics"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode != 0
        assert "TLS handshake failed" in run.stderr, run.stderr
        # The load generator over TLS, bounded to 2 s.
        run = subprocess.run(
            [str(bench), *flags, "-k", "1000", "-o", "S:50", "-w", "RU,50", "-c", "2",
             "-d", "2s"],
            capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        counted = stats(server.client())
        # The bench's connections (at least 2) and the tool's went over TLS.
        assert int(counted["tls_connections_opened"]) >= 4, counted
        assert int(server.client().info_random_node("sets").count("tls")) >= 1
    finally:
        server.stop()
