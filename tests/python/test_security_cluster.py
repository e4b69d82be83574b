"""Users and roles shared cluster-wide: a user created through one node of
a secured cluster logs in on every other node, on a node that joins later,
and a dropped user on none. Nodes are asked directly on raw sockets
(LOGIN to that node only), since the client logs in to every node it
discovers and would hide which node refused."""

from __future__ import annotations

import socket

import aerospike
import pytest

from cluster import LocalCluster
from security_helpers import ADMIN_HASH, admin_message, login, raw_info, read_frame, wait_until

# Users here get the password "admin", whose client hash the tests know
# (bcrypt with the clients' fixed salt): a raw LOGIN can then send it.
PASSWORD = "admin"


class SecuredCluster(LocalCluster):
    """A LocalCluster whose nodes run ``security { }``, each with a work
    directory of its own (its security.json), and whose info requests log
    in as admin first."""

    def config_text(self, node) -> str:
        text = super().config_text(node)
        text = text.replace("service {\n", f"service {{\n    work-directory {node.dir / 'work'}\n", 1)
        return text + "security {\n}\n"

    def info(self, index: int, command: str, timeout: float = 5.0) -> str:
        node = self.nodes[index]
        with socket.create_connection((node.host, node.port), timeout=timeout) as s:
            result, _, _ = login(s, b"admin", ADMIN_HASH)
            assert result == 0, f"admin login on node {index}: {result}"
            answer = raw_info(s, command)
        name, _, value = answer.rstrip("\n").partition("\t")
        assert name == command, answer
        return value

    def client_as(self, seed: int, user: str, password: str):
        config = dict(self.client_config(seed), user=user, password=password)
        c = aerospike.client(config).connect()
        self._clients.append(c)
        return c


def login_code(cluster: LocalCluster, index: int, user: str) -> int:
    node = cluster.nodes[index]
    with socket.create_connection((node.host, node.port), timeout=5) as s:
        return login(s, user.encode(), ADMIN_HASH)[0]


@pytest.mark.time_limit(240)
def test_a_user_created_on_one_node_logs_in_on_every_node_and_on_a_later_joiner():
    with SecuredCluster(2) as cluster:
        cluster.start_all()
        cluster.wait_formed()
        admin = cluster.client_as(0, "admin", "admin")
        admin.admin_create_role("writer", [{"code": aerospike.PRIV_READ_WRITE, "ns": "test"}])
        admin.admin_create_user("zoe", PASSWORD, ["writer"])
        assert wait_until(lambda: all(login_code(cluster, i, "zoe") == 0 for i in (0, 1)),
                          timeout=10), [login_code(cluster, i, "zoe") for i in (0, 1)]
        # The role came along: zoe writes and reads through either node.
        zoe = cluster.client_as(1, "zoe", PASSWORD)
        zoe.put(("test", "sec", "k"), {"v": 1})
        assert zoe.get(("test", "sec", "k"))[2] == {"v": 1}

        # A node that joins later learns the users and roles.
        cluster.add_node(start=True)
        cluster.wait_formed()
        assert wait_until(lambda: login_code(cluster, 2, "zoe") == 0, timeout=15), \
            login_code(cluster, 2, "zoe")
        stats = dict(pair.split("=", 1) for pair in cluster.info(2, "statistics").split(";")
                     if "=" in pair)
        assert int(stats["security_users"]) >= 2, stats
        assert int(stats["security_roles"]) >= 1, stats

        # A user dropped through one node is refused on every node.
        admin.admin_drop_user("zoe")
        assert wait_until(lambda: all(login_code(cluster, i, "zoe") == 60 for i in (0, 1, 2)),
                          timeout=10), [login_code(cluster, i, "zoe") for i in (0, 1, 2)]


CREATE_USER, CREATE_ROLE = 1, 10
FIELD_USER, FIELD_PASSWORD, FIELD_ROLES, FIELD_ROLE, FIELD_PRIVILEGES = 0, 1, 10, 11, 12


def admin_result(s: socket.socket, command: int, fields) -> int:
    s.sendall(admin_message(command, fields))
    _, _, body = read_frame(s)
    return body[1]


@pytest.mark.time_limit(240)
def test_an_admin_change_is_in_force_on_every_node_when_it_answers():
    """A client sends each admin command to any node: a role created
    through node 0 must be known to node 1 as soon as node 0 answers, so
    that a user created with it through node 1 the next moment is not
    refused with 70 (invalid role)."""
    with SecuredCluster(2) as cluster:
        cluster.start_all()
        cluster.wait_formed()
        sockets = []
        for node in cluster.nodes:
            s = socket.create_connection((node.host, node.port), timeout=5)
            sockets.append(s)
            assert login(s, b"admin", ADMIN_HASH)[0] == 0
        try:
            for i in range(20):
                role = f"role{i}".encode()
                # read-write on namespace test, no set.
                privileges = bytes([1, 11, 4]) + b"test" + bytes([0])
                assert admin_result(sockets[i % 2], CREATE_ROLE,
                                    [(FIELD_ROLE, role), (FIELD_PRIVILEGES, privileges)]) == 0, i
                roles = bytes([1, len(role)]) + role
                code = admin_result(sockets[(i + 1) % 2], CREATE_USER,
                                    [(FIELD_USER, f"user{i}".encode()),
                                     (FIELD_PASSWORD, ADMIN_HASH), (FIELD_ROLES, roles)])
                assert code == 0, (i, code)
                assert login_code(cluster, i % 2, f"user{i}") == 0, i
        finally:
            for s in sockets:
                s.close()


@pytest.mark.time_limit(240)
def test_users_survive_a_restart_of_every_node_and_reach_a_later_joiner():
    with SecuredCluster(2) as cluster:
        cluster.start_all()
        cluster.wait_formed()
        admin = cluster.client_as(0, "admin", "admin")
        admin.admin_create_user("yuri", PASSWORD, ["read"])
        assert wait_until(lambda: login_code(cluster, 1, "yuri") == 0, timeout=10)
        admin.close()
        cluster._clients = []
        for index in (0, 1):
            cluster.stop(index)
        for index in (0, 1):
            cluster.start(index)
        cluster.wait_formed()
        for index in (0, 1):
            assert login_code(cluster, index, "yuri") == 0, index
        # Known only from the restarted nodes' files: a new node learns it.
        cluster.add_node(start=True)
        cluster.wait_formed()
        assert wait_until(lambda: login_code(cluster, 2, "yuri") == 0, timeout=15), \
            login_code(cluster, 2, "yuri")
