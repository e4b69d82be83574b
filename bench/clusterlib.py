"""Shared pieces of the cluster benchmarks (bench/cluster-*.py): start N
bolided nodes on 127.0.0.1 pinned to given CPUs, ask them info commands,
run bolide-bench and read its summary. Standard library only.

Node i (0-based) of a cluster at BASE serves clients on BASE + 10*i, its
fabric on +1 and its heartbeat on +2; every node is told of the first
node's heartbeat port (as scripts/cluster.sh does). A node started with
``heartbeat=False`` gets no heartbeat or fabric block: the single-node
config every node had before clustering.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
BOLIDED = Path(os.environ.get("BOLIDED_BIN", ROOT / "target/release/bolided"))
BENCH = Path(os.environ.get("BOLIDE_BENCH_BIN", ROOT / "target/release/bolide-bench"))
REDIS = Path(os.environ.get("REDIS_SERVER_BIN", "/usr/bin/redis-server"))
PARTITIONS = 4096


def loadavg() -> str:
    """The 1-minute load average (the machine's other work shows here)."""
    return open("/proc/loadavg").read().split()[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_port(port: int, proc: Optional[subprocess.Popen] = None, timeout: float = 20.0,
              host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process for port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {host}:{port} after {timeout} s")


def info(port: int, commands: List[str], timeout: float = 2.0, host: str = "127.0.0.1") -> Dict[str, str]:
    """One info request (proto type 1); {command: answer}."""
    body = "".join(c + "\n" for c in commands).encode()
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">Q", (2 << 56) | (1 << 48) | len(body)) + body)
        head = _recv_exact(s, 8)
        size = struct.unpack(">Q", head)[0] & 0xFFFF_FFFF_FFFF
        text = _recv_exact(s, size).decode(errors="replace")
    out = {}
    for line in text.split("\n"):
        name, _, value = line.partition("\t")
        if name:
            out[name] = value
    return out


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def kv(text: str) -> Dict[str, str]:
    out = {}
    for part in text.strip().rstrip(";").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def digest(set_name: str, key: int) -> bytes:
    """RIPEMD-160 of set, integer key type (1) and the key's 8 bytes."""
    return hashlib.new("ripemd160", set_name.encode() + b"\x01" + struct.pack(">q", key)).digest()


def partition_of(d: bytes) -> int:
    return (d[0] | (d[1] << 8)) & (PARTITIONS - 1)


def replicas_columns(answer: str, namespace: str = "test") -> List[List[bool]]:
    """The columns of a node's `replicas` answer for one namespace: column 0
    the partitions it masters, column i those it holds as i-th replica."""
    for entry in answer.split(";"):
        if entry.startswith(namespace + ":"):
            parts = entry[len(namespace) + 1:].split(",")
            count = int(parts[1])
            columns = []
            for column in parts[2:2 + count]:
                bitmap = base64.b64decode(column)
                columns.append([bool(bitmap[p >> 3] & (0x80 >> (p & 7))) for p in range(PARTITIONS)])
            return columns
    raise ValueError(f"no namespace {namespace} in {answer[:80]}")


class Cluster:
    """N nodes of one cluster (or one node without a heartbeat block)."""

    def __init__(self, size: int, rf: int, workdir: Path, base_port: int = 4500,
                 cpus: str = "1", binary: Path = BOLIDED, heartbeat: bool = True,
                 service_threads: int = 1, data_size: str = "2G", name: str = "bench",
                 hosts: Optional[List[str]] = None):
        self.size = size
        self.rf = rf
        self.workdir = Path(workdir)
        self.base_port = base_port
        self.cpus = cpus
        self.binary = Path(binary)
        self.heartbeat = heartbeat
        self.service_threads = service_threads
        self.data_size = data_size
        self.name = name
        # One address per node (a network namespace can cut traffic
        # between them); all 127.0.0.1 by default.
        self.hosts = hosts
        self.procs: List[Optional[subprocess.Popen]] = [None] * size
        self._logs = [None] * size

    def port(self, i: int) -> int:
        return self.base_port + 10 * i

    def host(self, i: int) -> str:
        return self.hosts[i] if self.hosts else "127.0.0.1"

    def info(self, i: int, commands: List[str], timeout: float = 2.0) -> Dict[str, str]:
        return info(self.port(i), commands, timeout, self.host(i))

    def node_id(self, i: int) -> str:
        return f"C{i + 1:03X}"

    def config(self, i: int) -> str:
        port = self.port(i)
        lines = ["service {", f"    service-threads {self.service_threads}"]
        if self.heartbeat:
            lines += [f"    cluster-name {self.name}", f"    node-id {self.node_id(i)}"]
        host = self.host(i)
        lines += ["}", "network {", "    service {", f"        address {host}", f"        port {port}", "    }"]
        if self.heartbeat:
            lines += [
                "    heartbeat {", "        mode mesh", f"        address {host}", f"        port {port + 2}",
                f"        mesh-seed-address-port {self.host(0)} {self.base_port + 2}",
                "        interval 150", "        timeout 10", "    }",
                "    fabric {", f"        address {host}", f"        port {port + 1}", "    }",
            ]
        lines += ["}", "namespace test {", f"    replication-factor {self.rf}", "    nsup-period 120",
                  "    storage-engine memory {", f"        data-size {self.data_size}", "    }", "}"]
        return "\n".join(lines) + "\n"

    def start_node(self, i: int) -> None:
        ports = [self.port(i)] + ([self.port(i) + 1, self.port(i) + 2] if self.heartbeat else [])
        busy = [p for p in ports if not port_free(p)] if not self.hosts else []
        if busy:
            raise RuntimeError(f"ports {busy} are in use (set BASE_PORT)")
        node_dir = self.workdir / f"node{i + 1}"
        node_dir.mkdir(parents=True, exist_ok=True)
        (node_dir / "bolide.conf").write_text(self.config(i))
        log = open(node_dir / "bolided.log", "ab")
        self._logs[i] = log
        self.procs[i] = subprocess.Popen(
            ["taskset", "-c", self.cpus, str(self.binary), "--config", str(node_dir / "bolide.conf")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.port(i), self.procs[i], host=self.host(i))

    def start(self, timeout: float = 60.0) -> "Cluster":
        for i in range(self.size):
            self.start_node(i)
        self.wait_formed(list(range(self.size)), timeout)
        return self

    def pids(self) -> List[int]:
        return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def stats(self, i: int) -> Dict[str, str]:
        return kv(self.info(i, ["statistics"])["statistics"])

    def ns_stats(self, i: int) -> Dict[str, str]:
        return kv(self.info(i, ["namespace/test"])["namespace/test"])

    def wait_formed(self, nodes: List[int], timeout: float = 60.0) -> None:
        """Until every given node is in one cluster of exactly them with a
        settled map (a node without heartbeat: until it answers)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                stats = [self.stats(i) for i in nodes]
                if not self.heartbeat:
                    return
                keys = {s.get("cluster_key") for s in stats}
                sizes = {s.get("cluster_size") for s in stats}
                allowed = {s.get("migrate_allowed") for s in stats}
                last = (keys, sizes, allowed)
                if len(keys) == 1 and sizes == {str(len(nodes))} and allowed == {"true"}:
                    return
            except OSError as error:
                last = error
            time.sleep(0.1)
        raise RuntimeError(f"nodes {nodes} did not form within {timeout} s: {last}")

    def wait_stable(self, nodes: List[int], timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                answers = {self.info(i, [f"cluster-stable:size={len(nodes)}"])[f"cluster-stable:size={len(nodes)}"]
                           for i in nodes}
                last = answers
                if len(answers) == 1 and not next(iter(answers)).startswith("ERROR"):
                    return
            except OSError as error:
                last = error
            time.sleep(0.2)
        raise RuntimeError(f"nodes {nodes} not stable within {timeout} s: {last}")

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for i, proc in enumerate(self.procs):
            if proc is not None:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            if self._logs[i] is not None:
                self._logs[i].close()
                self._logs[i] = None


class Redis:
    def __init__(self, port: int, workdir: Path, cpus: str = "1"):
        self.port = port
        if not port_free(port):
            raise RuntimeError(f"port {port} is in use")
        self.proc = subprocess.Popen(
            ["taskset", "-c", cpus, str(REDIS), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--logfile", str(Path(workdir) / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_port(port, self.proc)

    def pids(self) -> List[int]:
        return [self.proc.pid]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)


def bench_command(port: int, args: List[str], cpus: str = "0", protocol: str = "aerospike",
                  cluster: bool = False, host: str = "127.0.0.1") -> List[str]:
    cmd = ["taskset", "-c", cpus, str(BENCH), "--protocol", protocol, "-h", host, "-p", str(port),
           "-n", "test", "-s", "bench"]
    if cluster:
        cmd.append("--cluster")
    return cmd + args


def run_bench(port: int, args: List[str], json_path: Path, cpus: str = "0", protocol: str = "aerospike",
              cluster: bool = False, server_pids: Optional[List[int]] = None, host: str = "127.0.0.1") -> dict:
    """Runs bolide-bench to completion; returns its JSON summary, with the
    command, the load average before it and the servers' CPU share added."""
    cmd = bench_command(port, args + ["--json", str(json_path)], cpus, protocol, cluster, host)
    load = loadavg()
    before = sum(cpu_seconds(p) for p in server_pids or [])
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - started
    after = sum(cpu_seconds(p) for p in server_pids or [])
    json_path.with_suffix(".log").write_text(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout.strip().splitlines()[-1:]}")
    summary = json.loads(json_path.read_text())
    summary["command"] = " ".join(cmd)
    summary["loadavg_before"] = load
    summary["server_cpu_seconds"] = after - before
    summary["server_cpu_percent"] = round(100 * (after - before) / wall, 1)
    return summary


def median(values):
    return statistics.median(values) if values else float("nan")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def results_dir(prefix: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(os.environ.get("RESULTS_DIR", ROOT / "bench" / "results" / f"{prefix}-{stamp}"))
    out.mkdir(parents=True, exist_ok=True)
    return out
