"""Start, stop, kill, pause and restart several ``bolided`` processes that
form one cluster on 127.0.0.1, for tests.

Usage::

    from cluster import LocalCluster

    with LocalCluster(3, namespace={"replication-factor": "2"}) as cluster:
        cluster.wait_formed()
        client = cluster.client()
        ...
        cluster.kill(1)            # kill -9
        cluster.wait_formed(nodes=[0, 2])
        cluster.start(1)           # same ports, same node id, same files
        cluster.wait_stable()

Each node has fixed ports and a node id (``A1``, ``A2``, ...) for its whole
life, and its own directory (config, log, storage files) that survives its
restarts. Every node is told only of the first node's heartbeat port (the
mesh is transitive). Processes are stopped by their own PIDs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from bolide_server import CLIENT_LUA_DIR, bolided_path, free_ports
import wire


def parse_kv(text: str) -> Dict[str, str]:
    out = {}
    for part in text.strip().rstrip(";").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


class Node:
    def __init__(self, index: int, root: Path, seed_heartbeat: Optional[int], host: str = "127.0.0.1",
                 seed_host: str = "127.0.0.1"):
        self.index = index
        self.host = host
        self.seed_host = seed_host
        self.node_id = f"A{index + 1}"
        self.port, self.fabric_port, self.heartbeat_port, self.info_port, self.http_port = free_ports(5)
        self.dir = root / f"node{index + 1}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "bolided.log"
        self.config_path = self.dir / "bolide.conf"
        self.proc: Optional[subprocess.Popen] = None
        self.seed_heartbeat = seed_heartbeat
        self.redis_port: Optional[int] = None
        # More heartbeat directives for this node alone (test knobs such as
        # test-clock-offset-ms), written at its next start.
        self.heartbeat_extra: Dict[str, str] = {}
        self._log = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class LocalCluster:
    def __init__(
        self,
        size: int,
        namespace: Optional[Dict[str, str]] = None,
        storage: str = "memory",
        cluster_name: str = "bolide-cluster-test",
        heartbeat: Optional[Dict[str, str]] = None,
        service: Optional[Dict[str, str]] = None,
        binary: Optional[Path] = None,
        hosts: Optional[List[str]] = None,
        http: bool = False,
        storage_extra: Optional[Dict[str, str]] = None,
        redis: bool = False,
        seed_every_node: bool = False,
    ):
        # Every node lists every other node as a mesh seed (so that any two
        # can find each other while the first is down).
        self.seed_every_node = seed_every_node
        # Each node also serves the Redis protocol on its redis_port.
        self.redis = redis
        # More directives of the storage-engine device block.
        self.storage_extra = storage_extra or {}
        self.binary = Path(binary) if binary else bolided_path()
        # One loopback address per node (a network namespace can cut
        # traffic between them); all on 127.0.0.1 by default.
        self.hosts = hosts
        self.root = Path(tempfile.mkdtemp(prefix="bolide-cluster-"))
        self.namespace = {"replication-factor": "2", "default-ttl": "0", "nsup-period": "1"}
        self.namespace.update(namespace or {})
        self.storage = storage
        self.cluster_name = cluster_name
        self.heartbeat = {"interval": "150", "timeout": "10"}
        self.heartbeat.update(heartbeat or {})
        self.service = service or {}
        # Each node serves /metrics and the console on its http_port.
        self.http = http
        self.nodes: List[Node] = []
        self._clients = []
        for _ in range(size):
            self.add_node(start=False)

    # -- configuration --------------------------------------------------
    def add_node(self, start: bool = True, cluster_name: Optional[str] = None,
                 namespace: Optional[Dict[str, str]] = None) -> Node:
        seed = self.nodes[0].heartbeat_port if self.nodes else None
        index = len(self.nodes)
        host = self.hosts[index] if self.hosts else "127.0.0.1"
        seed_host = self.nodes[0].host if self.nodes else host
        node = Node(index, self.root, seed, host=host, seed_host=seed_host)
        node.cluster_name = cluster_name or self.cluster_name
        node.namespace = dict(self.namespace)
        node.namespace.update(namespace or {})
        self.nodes.append(node)
        if start:
            self.start(node.index)
        return node

    def config_text(self, node: Node) -> str:
        lines = [
            "service {",
            f"    cluster-name {node.cluster_name}",
            f"    node-id {node.node_id}",
        ]
        for k, v in self.service.items():
            lines.append(f"    {k} {v}")
        lines += [
            "}",
            "logging {",
            "    console {",
            "        context any info",
            "    }",
            "}",
            "network {",
            "    service {",
            f"        address {node.host}",
            f"        port {node.port}",
            "    }",
            "    heartbeat {",
            "        mode mesh",
            f"        address {node.host}",
            f"        port {node.heartbeat_port}",
        ]
        if self.seed_every_node:
            for other in self.nodes:
                if other is not node:
                    lines.append(f"        mesh-seed-address-port {other.host} {other.heartbeat_port}")
        elif node.seed_heartbeat is not None:
            lines.append(f"        mesh-seed-address-port {node.seed_host} {node.seed_heartbeat}")
        for k, v in {**self.heartbeat, **node.heartbeat_extra}.items():
            lines.append(f"        {k} {v}")
        lines += [
            "    }",
            "    fabric {",
            f"        address {node.host}",
            f"        port {node.fabric_port}",
            "    }",
            "    info {",
            f"        port {node.info_port}",
            "    }",
        ]
        if self.redis:
            if node.redis_port is None:
                (node.redis_port,) = free_ports(1)
            lines += [
                "    redis {",
                f"        address {node.host}",
                f"        port {node.redis_port}",
                "    }",
            ]
        if self.http:
            lines += [
                "    http {",
                f"        address {node.host}",
                f"        port {node.http_port}",
                "    }",
            ]
        lines += [
            "}",
            "namespace test {",
        ]
        for k, v in node.namespace.items():
            lines.append(f"    {k} {v}")
        if self.storage == "memory":
            lines += ["    storage-engine memory {", "        data-size 256M", "    }"]
        else:
            lines += [
                "    storage-engine device {",
                f"        file {node.dir / 'test.dat'}",
                "        filesize 256M",
                "        write-block-size 1M",
                *[f"        {k} {v}" for k, v in self.storage_extra.items()],
                "    }",
            ]
        lines.append("}")
        return "\n".join(lines) + "\n"

    # -- processes --------------------------------------------------------
    def start(self, index: int, timeout: float = 30.0) -> Node:
        node = self.nodes[index]
        assert not node.alive(), f"node {index} is already running"
        node.config_path.write_text(self.config_text(node))
        node._log = open(node.log_path, "ab")
        node.proc = subprocess.Popen(
            [str(self.binary), "--config", str(node.config_path)],
            stdin=subprocess.DEVNULL, stdout=node._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise RuntimeError(f"node {index} exited with {node.proc.returncode}:\n{self.log_tail(index)}")
            try:
                with socket.create_connection((node.host, node.port), timeout=0.5):
                    return node
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"node {index} did not listen within {timeout}s:\n{self.log_tail(index)}")

    def start_all(self) -> "LocalCluster":
        for node in self.nodes:
            if not node.alive():
                self.start(node.index)
        return self

    def kill(self, index: int) -> None:
        """kill -9."""
        node = self.nodes[index]
        if node.alive():
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=10)

    def stop(self, index: int, timeout: float = 15.0) -> None:
        """SIGTERM (a clean stop)."""
        node = self.nodes[index]
        if node.alive():
            node.proc.send_signal(signal.SIGTERM)
            try:
                node.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(timeout=10)

    def pause(self, index: int) -> None:
        self.nodes[index].proc.send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        self.nodes[index].proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        self._clients = []
        for node in self.nodes:
            if node.alive():
                try:
                    node.proc.send_signal(signal.SIGCONT)
                except Exception:
                    pass
                self.stop(node.index, timeout=10)
            if node._log is not None:
                node._log.close()
        if os.environ.get("BOLIDE_KEEP_TEST_FILES") != "1":
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start_all()
        except BaseException:
            # __exit__ does not run when __enter__ raises: stop the nodes
            # that did start, or they outlive the test.
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def log_tail(self, index: int, n: int = 40) -> str:
        return "\n".join(self.nodes[index].log_text().splitlines()[-n:])

    def logs(self) -> str:
        return "\n".join(
            f"--- node {n.index} ({n.node_id}) ---\n{self.log_tail(n.index, 60)}" for n in self.nodes
        )

    # -- info ---------------------------------------------------------------
    def info(self, index: int, command: str, timeout: float = 5.0) -> str:
        node = self.nodes[index]
        return wire.info_request(node.port, [command], timeout=timeout, host=node.host)[command]

    def stats(self, index: int) -> Dict[str, str]:
        return parse_kv(self.info(index, "statistics"))

    def ns_stats(self, index: int, ns: str = "test") -> Dict[str, str]:
        return parse_kv(self.info(index, f"namespace/{ns}"))

    def live(self, nodes: Optional[Iterable[int]] = None) -> List[int]:
        if nodes is not None:
            return list(nodes)
        return [n.index for n in self.nodes if n.alive()]

    def wait_formed(self, nodes: Optional[Iterable[int]] = None, timeout: float = 30.0) -> str:
        """Until every given node (default: all running) reports one cluster
        of exactly those nodes with a settled map; returns the cluster key."""
        indices = self.live(nodes)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                stats = [self.stats(i) for i in indices]
                keys = {s.get("cluster_key") for s in stats}
                sizes = {s.get("cluster_size") for s in stats}
                allowed = {s.get("migrate_allowed") for s in stats}
                last = (keys, sizes, allowed)
                if len(keys) == 1 and sizes == {str(len(indices))} and allowed == {"true"}:
                    return keys.pop()
            except OSError as error:
                last = error
            time.sleep(0.1)
        raise AssertionError(f"nodes {indices} did not form one cluster within {timeout}s: {last}\n{self.logs()}")

    def wait_stable(self, nodes: Optional[Iterable[int]] = None, timeout: float = 60.0) -> str:
        """Until every given node answers the same key to cluster-stable
        with the expected size (no migrations left)."""
        indices = self.live(nodes)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                answers = {self.info(i, f"cluster-stable:size={len(indices)}") for i in indices}
                last = answers
                if len(answers) == 1 and not next(iter(answers)).startswith("ERROR"):
                    return answers.pop()
            except OSError as error:
                last = error
            time.sleep(0.2)
        raise AssertionError(f"nodes {indices} not stable within {timeout}s: {last}\n{self.logs()}")

    # -- clients --------------------------------------------------------------
    def client_config(self, seed: int = 0, **extra) -> dict:
        cfg = {
            "hosts": [(self.nodes[seed].host, self.nodes[seed].port)],
            "policies": {
                "read": {"total_timeout": 3000, "max_retries": 2},
                "write": {"total_timeout": 3000, "max_retries": 2},
                "operate": {"total_timeout": 3000, "max_retries": 2},
                "remove": {"total_timeout": 3000, "max_retries": 2},
                "batch": {"total_timeout": 10000, "max_retries": 2},
                "scan": {"total_timeout": 30000},
                "info": {"timeout": 5000},
            },
            # Where the client keeps copies of the UDF modules it registers
            # and runs an aggregation's last reduce from (one per process).
            "lua": {"user_path": CLIENT_LUA_DIR},
        }
        cfg.update(extra)
        return cfg

    def client(self, seed: int = 0, **extra):
        import aerospike

        c = aerospike.client(self.client_config(seed, **extra)).connect()
        self._clients.append(c)
        return c
