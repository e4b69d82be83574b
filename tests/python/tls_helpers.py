"""TLS test fixtures: a PKI made fresh for each test run by the
``tls_certs`` example (crates/server/examples/tls_certs.rs; no key is ever
committed), and bolided configurations with a TLS client listener."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from bolide_server import REPO_ROOT, BolideServer, free_ports, wait_for_port

NODE_NAME = "bolide-node"


def tls_certs_path() -> Path:
    """The PKI generator: $TLS_CERTS_BIN, or the release or debug build of
    the example (built here with cargo when neither exists)."""
    env = os.environ.get("TLS_CERTS_BIN")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        path = REPO_ROOT / "target" / profile / "examples" / "tls_certs"
        if path.exists():
            return path
    subprocess.run(
        ["cargo", "build", "--release", "-p", "bolide-server", "--example", "tls_certs"],
        cwd=REPO_ROOT, check=True,
    )
    return REPO_ROOT / "target" / "release" / "examples" / "tls_certs"


def make_pki(node_name: str = NODE_NAME) -> Path:
    """A directory with a CA, node and client certificates (see the
    example's header for the list)."""
    directory = Path(tempfile.mkdtemp(prefix="bolide-pki-"))
    subprocess.run([str(tls_certs_path()), str(directory), node_name], check=True)
    return directory


def remove_pki(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def tls_config(
    pki: Path,
    tls_port: int,
    authenticate: Optional[str] = "false",
    stanza_extra: str = "",
    service_extra: str = "",
    top_service_extra: str = "",
    cert: str = "node",
    tls_name: str = NODE_NAME,
) -> str:
    """A BolideServer ``config_text`` (its ``{port}`` placeholders kept)
    with a TLS listener on ``tls_port`` presenting ``cert``.pem; clients
    checked as ``authenticate`` says (None: the directive is left out,
    Aerospike's default, which asks for a certificate)."""
    auth = f"        tls-authenticate-client {authenticate}\n" if authenticate is not None else ""
    return (
        "service {{\n"
        "    cluster-name bolide-tls\n"
        "    work-directory {work_directory}\n"
        f"{top_service_extra}"
        "}}\n"
        "logging {{\n    console {{\n        context any info\n    }}\n}}\n"
        "network {{\n"
        f"    tls {tls_name} {{{{\n"
        f"        cert-file {pki / (cert + '.pem')}\n"
        f"        key-file {pki / (cert + '.key')}\n"
        f"        ca-file {pki / 'ca.pem'}\n"
        f"{stanza_extra}"
        "    }}\n"
        "    service {{\n"
        "        address 127.0.0.1\n"
        "        port {port}\n"
        f"        tls-port {tls_port}\n"
        f"        tls-name {tls_name}\n"
        f"{auth}"
        f"{service_extra}"
        "    }}\n"
        "    heartbeat {{\n        mode mesh\n        port {heartbeat_port}\n    }}\n"
        "    fabric {{\n        port {fabric_port}\n    }}\n"
        "    info {{\n        port {info_port}\n    }}\n"
        "}}\n"
        "namespace test {{\n"
        "    replication-factor 1\n"
        "    default-ttl 0\n"
        "    storage-engine memory {{\n        data-size 64M\n    }}\n"
        "}}\n"
    )


def tls_server(pki: Path, **kwargs) -> tuple[BolideServer, int]:
    """A started bolided with a TLS listener, and its TLS port."""
    (tls_port,) = free_ports(1)
    server = BolideServer(config_text=tls_config(pki, tls_port, **kwargs))
    server.start()
    # start() returns once the plain port accepts; the TLS listener may
    # come up a moment later.
    wait_for_port(tls_port)
    return server, tls_port


def tls_client_config(
    pki: Path,
    tls_port: int,
    ca: str = "ca.pem",
    cert: Optional[str] = None,
    name: str = NODE_NAME,
) -> dict:
    """The Python client's configuration for the TLS port: the CA it
    trusts, the name it checks (in the host tuple, as the C client wants
    it) and, for mutual TLS, its certificate and key."""
    tls = {"enable": True, "cafile": str(pki / ca)}
    if cert is not None:
        tls["certfile"] = str(pki / f"{cert}.pem")
        tls["keyfile"] = str(pki / f"{cert}.key")
    return {
        "hosts": [("127.0.0.1", tls_port, name)],
        "tls": tls,
        "policies": {
            "read": {"total_timeout": 5000, "max_retries": 0},
            "write": {"total_timeout": 5000, "max_retries": 0},
            "info": {"timeout": 5000},
        },
        "connect_timeout": 3000,
    }
