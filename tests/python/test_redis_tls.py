"""The Redis port over TLS (``network { redis { tls-port; tls-name;
tls-authenticate-client } }``) through redis-py (``ssl=True``) and
``redis-cli --tls``: standard TLS, and mutual TLS with client
certificates checked against the CA and the names listed; the records
written over TLS are the ones the Aerospike clients and the plain RESP
port see; a plain client on the TLS port and a TLS client on the plain
port fail cleanly; configuration mistakes name the line and the
directive. The PKI is made fresh by the ``tls_certs`` example."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess

import pytest

redis = pytest.importorskip("redis")

from bolide_server import BolideServer, free_ports, run_config_check, wait_for_port  # noqa: E402
from helpers import parse_kv  # noqa: E402
from tls_helpers import NODE_NAME, make_pki, remove_pki, tls_config  # noqa: E402


@pytest.fixture(scope="module")
def pki():
    directory = make_pki()
    yield directory
    remove_pki(directory)


def redis_tls_config(pki, authenticate: str, extra: str = "") -> tuple[str, int, int]:
    """A node configuration (its ``{port}`` placeholders kept) with a plain
    RESP port and a TLS one checking clients as ``authenticate`` says;
    returns (text, plain RESP port, TLS RESP port)."""
    service_tls, redis_plain, redis_tls = free_ports(3)
    block = (
        "    redis {{\n"
        f"        port {redis_plain}\n"
        f"        tls-port {redis_tls}\n"
        f"        tls-name {NODE_NAME}\n"
        f"        tls-authenticate-client {authenticate}\n"
        f"{extra}"
        "    }}\n"
    )
    text = tls_config(pki, service_tls, authenticate="false")
    text = text.replace("network {{\n", "network {{\n" + block, 1)
    return text, redis_plain, redis_tls


def start(pki, authenticate: str):
    text, plain, port = redis_tls_config(pki, authenticate)
    server = BolideServer(config_text=text)
    server.start()
    wait_for_port(plain)
    wait_for_port(port)
    server.redis_plain, server.redis_tls = plain, port
    return server


@pytest.fixture(scope="module")
def standard(pki):
    server = start(pki, "false")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mutual(pki):
    server = start(pki, "client-a")
    try:
        yield server
    finally:
        server.stop()


def tls_redis(pki, port, ca="ca.pem", cert=None, **extra):
    """redis-py over TLS: the CA checked (the certificate names
    bolide-node, not 127.0.0.1, so the host name is not compared: redis-py
    has no option to expect another name)."""
    options = dict(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(pki / ca),
                   ssl_cert_reqs="required", ssl_check_hostname=False,
                   socket_timeout=5, socket_connect_timeout=5)
    if cert is not None:
        options.update(ssl_certfile=str(pki / f"{cert}.pem"), ssl_keyfile=str(pki / f"{cert}.key"))
    options.update(extra)
    return redis.Redis(**options)


def statistics(server) -> dict:
    client = server.client()
    text = client.info_random_node("statistics").split("\t", 1)[-1].strip()
    return parse_kv(text)


def test_redis_py_over_standard_tls(pki, standard):
    before = statistics(standard)
    r = tls_redis(pki, standard.redis_tls)
    assert r.ping()
    assert r.set("tls:greeting", "hello")
    assert r.get("tls:greeting") == b"hello"
    assert r.incrby("tls:counter", 5) == 5
    r.hset("tls:hash", mapping={"a": "1", "b": "2"})
    assert r.hgetall("tls:hash") == {b"a": b"1", b"b": b"2"}
    # A pipeline of 2,000 commands: many TLS records each way.
    pipe = r.pipeline(transaction=False)
    for i in range(1000):
        pipe.set(f"tls:p{i}", i)
        pipe.incr(f"tls:p{i}")
    answers = pipe.execute()
    assert answers == [a for i in range(1000) for a in (True, i + 1)]
    # Values larger than a TLS record (16 KiB) come back whole.
    big = bytes(range(256)) * 1024
    assert r.set("tls:big", big)
    assert r.get("tls:big") == big
    r.close()
    # The same records through the plain RESP port ...
    plain = redis.Redis(host="127.0.0.1", port=standard.redis_plain, socket_timeout=5)
    assert plain.get("tls:p999") == b"1000"
    assert plain.get("tls:big") == big
    plain.close()
    after = statistics(standard)
    assert int(after["tls_connections_opened"]) > int(before["tls_connections_opened"])


def test_redis_cli_over_tls(pki, standard):
    cli = shutil.which("redis-cli")
    assert cli, "redis-cli is not installed (scripts/test.sh installs redis-tools)"
    base = [cli, "-h", "127.0.0.1", "-p", str(standard.redis_tls), "--tls",
            "--cacert", str(pki / "ca.pem"), "--sni", NODE_NAME]
    run = subprocess.run(base + ["SET", "tls:cli", "from-redis-cli"], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run
    run = subprocess.run(base + ["GET", "tls:cli"], capture_output=True, text=True, timeout=30)
    assert run.stdout.strip() == "from-redis-cli", run
    # Another CA: redis-cli refuses the node.
    other = [cli, "-h", "127.0.0.1", "-p", str(standard.redis_tls), "--tls",
             "--cacert", str(pki / "other-ca.pem"), "PING"]
    run = subprocess.run(other, capture_output=True, text=True, timeout=30)
    assert "PONG" not in run.stdout, run
    assert "SSL" in run.stdout + run.stderr or "certificate" in (run.stdout + run.stderr).lower(), run


def test_the_wrong_port_or_ca_fails_cleanly(pki, standard):
    # A plain client on the TLS port: no answer it can read.
    plain_on_tls = redis.Redis(host="127.0.0.1", port=standard.redis_tls, socket_timeout=3,
                               socket_connect_timeout=3)
    with pytest.raises(redis.exceptions.RedisError):
        plain_on_tls.ping()
    # A TLS client on the plain port: its handshake fails.
    with pytest.raises(redis.exceptions.RedisError):
        tls_redis(pki, standard.redis_plain).ping()
    # A client trusting another CA.
    with pytest.raises(redis.exceptions.RedisError):
        tls_redis(pki, standard.redis_tls, ca="other-ca.pem").ping()
    # The node serves on.
    assert tls_redis(pki, standard.redis_tls).ping()
    assert redis.Redis(host="127.0.0.1", port=standard.redis_plain, socket_timeout=5).ping()
    assert standard.alive()


def test_mutual_tls_needs_a_listed_client_certificate(pki, mutual):
    before = int(statistics(mutual)["tls_handshake_failures"])
    r = tls_redis(pki, mutual.redis_tls, cert="client")
    assert r.set("mtls:k", "v")
    assert r.get("mtls:k") == b"v"
    r.close()
    refused = [None, "client-b", "other-client", "expired-client"]
    for cert in refused:
        with pytest.raises((redis.exceptions.RedisError, ssl.SSLError, OSError)):
            tls_redis(pki, mutual.redis_tls, cert=cert).ping()
    after = int(statistics(mutual)["tls_handshake_failures"])
    assert after >= before + len(refused), (before, after)
    # redis-cli with its certificate.
    cli = shutil.which("redis-cli")
    assert cli
    run = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(mutual.redis_tls), "--tls",
         "--cacert", str(pki / "ca.pem"), "--cert", str(pki / "client.pem"),
         "--key", str(pki / "client.key"), "GET", "mtls:k"],
        capture_output=True, text=True, timeout=30)
    assert run.stdout.strip() == "v", run
    run = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(mutual.redis_tls), "--tls",
         "--cacert", str(pki / "ca.pem"), "GET", "mtls:k"],
        capture_output=True, text=True, timeout=30)
    assert run.stdout.strip() != "v", run
    assert mutual.alive()


def test_get_config_shows_the_redis_tls_listener(pki, mutual):
    client = mutual.client()
    text = client.info_random_node("get-config:context=network").split("\t", 1)[-1].strip()
    config = dict(item.split("=", 1) for item in text.split(";") if "=" in item)
    assert config["redis.tls-port"] == str(mutual.redis_tls), text
    assert config["redis.tls-name"] == NODE_NAME, text
    assert config["redis.tls-authenticate-client"] == "client-a", text


def test_redis_tls_configuration_mistakes_name_the_line(pki, tmp_path):
    text, _, _ = redis_tls_config(pki, "false")
    cases = [
        # tls-port without tls-name
        (text.replace(f"        tls-name {NODE_NAME}\n        tls-authenticate-client false\n",
                      "        tls-authenticate-client false\n", 1), "tls-name"),
        # a tls-name naming no context
        (text.replace(f"        tls-name {NODE_NAME}\n        tls-authenticate",
                      "        tls-name nowhere\n        tls-authenticate", 1), "nowhere"),
        # an access address: the Redis port advertises none
        (redis_tls_config(pki, "false", "        tls-access-address 10.0.0.1\n")[0],
         "tls-access-address"),
    ]
    for bad, word in cases:
        assert bad != text
        rc, err, out = run_config_check(bad.replace("{work_directory}", str(tmp_path)))
        assert rc not in (0, None), (bad, err, out)
        assert "line" in err + out and word in err + out, err + out
