"""TLS between nodes, through real processes: a 3-node cluster whose
fabric (replica writes, proxies, migrations) and heartbeats are mutual TLS
only, with certificates made fresh by the ``tls_certs`` example. The
official Python client over TLS seeds one node and discovers all three
(``peers-tls-std``), writes with replication factor 2 and reads everything
back after a node is killed (failover and migrations over TLS). A fourth
node whose certificate comes from another CA cannot join; a plain HELLO on
a TLS fabric port is refused at the handshake; configuration mistakes name
the line and the directive."""

from __future__ import annotations

import socket
import time

import aerospike
import pytest

from bolide_server import free_ports
from bolide_server import run_config_check as check
from cluster import LocalCluster, parse_kv
from helpers import wait_for
from tls_helpers import NODE_NAME, make_pki, remove_pki

NS = "test"
SET = "tls-cluster"
RECORDS = 300


class TlsCluster(LocalCluster):
    """A LocalCluster whose fabric and heartbeats are TLS only, and whose
    nodes also serve clients over standard TLS (the plain service port
    stays, for the test's own info requests)."""

    def __init__(self, size: int, pki, **kwargs):
        self.pki = pki
        super().__init__(size, **kwargs)

    def add_node(self, start: bool = True, cert: str = "node", **kwargs):
        node = super().add_node(start=False, **kwargs)
        node.cert = cert
        node.blacklist = None
        (node.tls_port, node.redis_tls_port) = free_ports(2)
        if start:
            self.start(node.index)
        return node

    def config_text(self, node) -> str:
        text = super().config_text(node)
        blacklist = f"        cert-blacklist {node.blacklist}\n" if node.blacklist else ""
        stanza = (
            f"    tls {NODE_NAME} {{\n"
            f"        cert-file {self.pki / (node.cert + '.pem')}\n"
            f"        key-file {self.pki / (node.cert + '.key')}\n"
            f"        ca-file {self.pki / 'ca.pem'}\n"
            f"{blacklist}"
            "    }\n"
        )
        text = text.replace("network {\n", "network {\n" + stanza, 1)
        service = f"        port {node.port}\n"
        assert service in text
        text = text.replace(
            service,
            service + f"        tls-port {node.tls_port}\n        tls-name {NODE_NAME}\n"
            "        tls-authenticate-client false\n",
            1,
        )
        if self.redis:
            line = f"        port {node.redis_port}\n"
            assert line in text
            text = text.replace(
                line,
                line + f"        tls-port {node.redis_tls_port}\n        tls-name {NODE_NAME}\n"
                "        tls-authenticate-client false\n",
                1,
            )
        for port in (node.heartbeat_port, node.fabric_port):
            line = f"        port {port}\n"
            assert line in text
            text = text.replace(line, f"        tls-port {port}\n        tls-name {NODE_NAME}\n", 1)
        return text.replace("        mesh-seed-address-port", "        tls-mesh-seed-address-port")

    def tls_client(self, seed: int = 0):
        node = self.nodes[seed]
        config = self.client_config(seed)
        config["hosts"] = [(node.host, node.tls_port, NODE_NAME)]
        config["tls"] = {"enable": True, "cafile": str(self.pki / "ca.pem")}
        client = aerospike.client(config).connect()
        self._clients.append(client)
        return client


@pytest.fixture(scope="module")
def pki():
    directory = make_pki()
    yield directory
    remove_pki(directory)


@pytest.fixture(scope="module")
def cluster(pki):
    with TlsCluster(3, pki, redis=True) as cluster:
        cluster.wait_formed()
        cluster.wait_stable()
        yield cluster


def counter(cluster: LocalCluster, index: int, name: str) -> int:
    return int(cluster.stats(index)[name])


def test_the_channels_between_nodes_are_tls_only(cluster):
    for index, node in enumerate(cluster.nodes):
        network = parse_kv(cluster.info(index, "get-config:context=network"))
        assert network["fabric.tls-port"] == str(node.fabric_port)
        assert network["fabric.tls-name"] == NODE_NAME
        assert network["heartbeat.tls-port"] == str(node.heartbeat_port)
        assert network["heartbeat.port"] == "0" and network["fabric.port"] == "0"
    # A HELLO in the clear on the fabric port proves nothing now: the
    # connection is refused at the handshake, counted and logged.
    before = counter(cluster, 0, "fabric_tls_handshake_failures")
    node = cluster.nodes[0]
    with socket.create_connection((node.host, node.fabric_port), timeout=5) as s:
        s.sendall(b"\x00" * 64)
        s.settimeout(5)
        try:
            # Whatever comes back (an alert or nothing), the node closes.
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
    wait_for(lambda: counter(cluster, 0, "fabric_tls_handshake_failures") > before, 5,
             what="the refused handshake to be counted")
    # The count comes before the log line is written out.
    wait_for(lambda: "fabric: TLS handshake from" in node.log_text(), 5,
             what="the refused handshake to be logged")


def test_a_tls_client_seeding_one_node_discovers_all_three(cluster):
    peers = cluster.info(0, "peers-tls-std")
    for other in cluster.nodes[1:]:
        assert f"[{other.node_id},{NODE_NAME},[127.0.0.1:{other.tls_port}]]" in peers, peers
    assert cluster.nodes[0].node_id + "," not in peers.split(",3000,", 1)[1], peers
    # The clear list is unchanged.
    clear = cluster.info(0, "peers-clear-std")
    assert f"127.0.0.1:{cluster.nodes[1].port}" in clear, clear
    client = cluster.tls_client(0)
    tls_ports = {node.tls_port for node in cluster.nodes}
    wait_for(lambda: len(client.get_nodes()) == 3, 10, what="the client to see 3 nodes over TLS")
    assert {port for _, port in client.get_nodes()} == tls_ports, client.get_nodes()


def test_a_redis_cluster_client_over_tls_is_sent_to_tls_ports(cluster):
    """Each node shares its Redis TLS endpoint with the others: a client of
    a TLS port gets CLUSTER SLOTS, CLUSTER NODES and MOVED naming TLS ports,
    a client of a plain port plain ones, and redis-py's cluster client over
    TLS reaches every master."""
    import redis
    from redis.cluster import RedisCluster

    tls_ports = {node.redis_tls_port for node in cluster.nodes}
    plain_ports = {node.redis_port for node in cluster.nodes}
    ca = str(cluster.pki / "ca.pem")
    node = cluster.nodes[0]
    secure = redis.Redis(host=node.host, port=node.redis_tls_port, ssl=True, ssl_ca_certs=ca,
                         ssl_check_hostname=False, socket_timeout=5)

    def ports(client):
        slots = client.execute_command("CLUSTER SLOTS")
        if isinstance(slots, dict):  # redis-py parses it: {(first, last): {"primary": …}}
            return {int(entry["primary"][1]) for entry in slots.values()}
        return {int(entry[2][1]) for entry in slots}

    # The peers' TLS endpoints arrive as cluster metadata.
    wait_for(lambda: ports(secure) == tls_ports, 10, what="CLUSTER SLOTS to name every TLS port")
    plain = redis.Redis(host=node.host, port=node.redis_port, socket_timeout=5)
    assert ports(plain) == plain_ports
    nodes = secure.execute_command("CLUSTER NODES")
    text = nodes if isinstance(nodes, str) else str(nodes)
    for port in tls_ports:
        assert f":{port}" in text, text
    for port in plain_ports:
        assert f":{port}" not in text, text
    # A key mastered elsewhere: MOVED names that node's TLS port.
    moved = None
    for i in range(64):
        try:
            secure.get(f"tls-moved-{i}")
        except redis.exceptions.MovedError as error:
            moved = error
            break
    assert moved is not None
    assert moved.port in tls_ports - {node.redis_tls_port}, moved
    client = RedisCluster(host=node.host, port=node.redis_tls_port, ssl=True, ssl_ca_certs=ca,
                          ssl_check_hostname=False, socket_timeout=5)
    for i in range(100):
        assert client.set(f"tls-cluster-{i}", str(i))
    assert [client.get(f"tls-cluster-{i}") for i in range(100)] == [str(i).encode() for i in range(100)]
    assert {n.port for n in client.get_nodes()} == tls_ports
    # The next test counts the namespace's records.
    for i in range(100):
        assert client.delete(f"tls-cluster-{i}") == 1
    client.close()


def test_writes_replicate_over_tls_and_survive_a_killed_node(cluster):
    client = cluster.tls_client(0)
    wait_for(lambda: len(client.get_nodes()) == 3, 10, what="the client to see 3 nodes")
    sent_before = sum(counter(cluster, i, "replica_writes_sent") for i in range(3))
    for i in range(RECORDS):
        client.put((NS, SET, i), {"v": i, "s": f"value-{i}"})
    # Replication factor 2: every write went to a second node over the
    # TLS fabric.
    sent = sum(counter(cluster, i, "replica_writes_sent") for i in range(3)) - sent_before
    assert sent >= RECORDS, sent
    objects = sum(int(cluster.ns_stats(i)["master_objects"]) for i in range(3))
    replicas = sum(int(cluster.ns_stats(i)["prole_objects"]) for i in range(3))
    assert objects >= RECORDS and replicas >= RECORDS, (objects, replicas)

    received_before = sum(counter(cluster, i, "migrate_partitions_received") for i in (0, 2))
    cluster.kill(1)
    cluster.wait_formed([0, 2])
    cluster.wait_stable([0, 2])
    for i in range(RECORDS):
        _, _, bins = client.get((NS, SET, i))
        assert bins == {"v": i, "s": f"value-{i}"}, i
    # The survivors rebuilt the second copies over TLS bulk connections.
    received = sum(counter(cluster, i, "migrate_partitions_received") for i in (0, 2))
    assert received > received_before, (received_before, received)
    for index in (0, 2):
        stats = cluster.ns_stats(index)
        assert int(stats["master_objects"]) + int(stats["prole_objects"]) == RECORDS, stats
        assert counter(cluster, index, "fabric_bad_frames") == 0


def test_a_node_with_a_certificate_from_another_ca_cannot_join(cluster):
    live = cluster.live()
    before = counter(cluster, live[0], "heartbeat_tls_handshake_failures")
    rogue = cluster.add_node(start=True, cert="other-node")
    # Seeded to node 0 and trying: its handshakes are refused, both ways.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        for index in live:
            assert cluster.stats(index)["cluster_size"] == str(len(live))
        time.sleep(0.5)
    assert counter(cluster, live[0], "heartbeat_tls_handshake_failures") > before
    wait_for(lambda: "heartbeat: TLS handshake from" in cluster.nodes[live[0]].log_text(), 5,
             what="the refused handshake to be logged")
    rogue_log = rogue.log_text()
    assert "heartbeat: TLS handshake to" in rogue_log, rogue_log[-2000:]
    rogue_stats = cluster.stats(rogue.index)
    assert rogue_stats["cluster_size"] in ("0", "1"), rogue_stats["cluster_size"]
    assert int(rogue_stats["heartbeat_tls_handshake_failures"]) > 0
    cluster.stop(rogue.index)


def serial_of(certificate) -> str:
    """A certificate's serial number in hex, as cert-blacklist lists it."""
    import ssl

    return ssl._ssl._test_decode_cert(str(certificate))["serialNumber"]


def test_a_renewed_node_certificate_is_used_for_new_connections_without_a_restart(pki, tmp_path):
    """Node 1's certificate is renewed in place while it runs; node 0 then
    revokes the old one (cert-blacklist) and restarts, so node 1 must dial
    it again on heartbeat and fabric: it presents the renewed certificate
    (re-read every tls-refresh-period, on the dialling side as on the
    listening side) and the two form a cluster and replicate, with no
    handshake refused."""
    import shutil

    for suffix in ("pem", "key"):
        shutil.copy(pki / f"node.{suffix}", pki / f"node-live.{suffix}")
    old_serial = serial_of(pki / "node.pem")
    assert old_serial != serial_of(pki / "node-2.pem")
    revoked = tmp_path / "revoked.txt"
    revoked.write_text("# none yet\n")
    cluster = TlsCluster(2, pki, service={"tls-refresh-period": "1"})
    cluster.nodes[0].cert = "node-2"
    cluster.nodes[0].blacklist = revoked
    cluster.nodes[1].cert = "node-live"
    with cluster:
        cluster.wait_formed()
        cluster.wait_stable()

        # Renewed in place, key first: every context of node 1 (the service
        # listener, fabric and heartbeat, each listening and dialling) loads
        # it once the two files fit.
        before = counter(cluster, 1, "tls_certificate_reloads")
        shutil.copy(pki / "node-2.key", pki / "node-live.key")
        shutil.copy(pki / "node-2.pem", pki / "node-live.pem")
        wait_for(lambda: counter(cluster, 1, "tls_certificate_reloads") >= before + 5, 30,
                 what="node 1 to reload its renewed certificate")
        reloaded = [line for line in cluster.nodes[1].log_text().splitlines()
                    if "certificates reloaded" in line]
        assert any("dialler" in line for line in reloaded), reloaded

        # Node 0 revokes the old certificate, then restarts.
        before = counter(cluster, 0, "tls_certificate_reloads")
        revoked.write_text(f"{old_serial}\n")
        wait_for(lambda: counter(cluster, 0, "tls_certificate_reloads") > before, 30,
                 what="node 0 to reload its blacklist")
        cluster.stop(0)
        log_before = len(cluster.nodes[0].log_text())
        cluster.start(0)
        cluster.wait_formed()
        cluster.wait_stable()

        client = cluster.tls_client(0)
        wait_for(lambda: len(client.get_nodes()) == 2, 10, what="the client to see 2 nodes")
        sent_before = counter(cluster, 1, "replica_writes_sent")
        for i in range(200):
            client.put((NS, "renewed", i), {"v": i})
        # Half the masters are node 1's: their copies went to node 0 over
        # fabric connections node 1 dialled after the renewal.
        assert counter(cluster, 1, "replica_writes_sent") > sent_before
        for i in range(200):
            assert client.get((NS, "renewed", i))[2] == {"v": i}
        assert counter(cluster, 0, "heartbeat_tls_handshake_failures") == 0
        assert counter(cluster, 0, "fabric_tls_handshake_failures") == 0
        since_restart = cluster.nodes[0].log_text()[log_before:]
        assert "Revoked" not in since_restart, since_restart[-3000:]


CONFIG = """service {{
    cluster-name bolide-tls
}}
network {{
    tls cluster {{
        cert-file PKI/node.pem
        key-file PKI/node.key
        ca-file PKI/ca.pem
    }}
    service {{
        address 127.0.0.1
        port {port}
    }}
    heartbeat {{
        mode mesh
        tls-port {heartbeat_port}
        tls-name cluster
    }}
    fabric {{
FABRIC    }}
}}
namespace test {{
    storage-engine memory {{
        data-size 16M
    }}
}}
"""


def config(pki, fabric: str) -> str:
    return CONFIG.replace("PKI", str(pki)).replace("FABRIC", fabric)


def test_config_errors_name_the_line_and_the_directive(pki):
    rc, err, _ = check(config(pki, "        tls-port {fabric_port}\n        tls-name nowhere\n"))
    assert rc not in (0, None), err
    assert "line 21" in err and "'tls-name'" in err and "no 'tls nowhere" in err, err
    rc, err, _ = check(config(pki, "        port {fabric_port}\n        tls-port 1\n"
                              "        tls-name cluster\n"))
    assert rc not in (0, None), err
    assert "line 20" in err and "'port'" in err and "TLS only" in err, err
    # A file that cannot be read stops the node with its name.
    text = config(pki, "        tls-port {fabric_port}\n        tls-name cluster\n")
    rc, err, _ = check(text.replace(f"{pki}/ca.pem", f"{pki}/missing-ca.pem"))
    assert rc not in (0, None), err
    assert "missing-ca.pem" in err, err
