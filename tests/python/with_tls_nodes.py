#!/usr/bin/env python3
"""Run a command against two fresh TLS nodes of real bolided processes on
127.0.0.1, then stop them: the Java client's TLS test (tests/java) uses
it. The PKI is made fresh by the ``tls_certs`` example (tls_helpers.py).

    python3 tests/python/with_tls_nodes.py [--timeout 300] [--cwd DIR] -- CMD ARGS...

The command gets, in the environment:

    BOLIDE_TLS_DIR      the PKI (ca.pem, node.pem, client.pem, ...)
    BOLIDE_TLS_PORT     a node's TLS port, standard TLS (tls-authenticate-client false)
    BOLIDE_PLAIN_PORT   the same node's plain service port
    BOLIDE_MTLS_PORT    a secured node's TLS port asking for client
                        certificates (admin/admin, PKI login)

The exit status is the command's (124 when it ran past --timeout); on a
failure the tail of each node's log is printed. Only the standard library
is needed. Processes are stopped by their own PIDs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bolide_server import BolideServer, free_ports  # noqa: E402
from tls_helpers import make_pki, remove_pki, tls_config  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the command may run")
    parser.add_argument("--cwd", default=None, help="directory to run the command in")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    pki = make_pki()
    standard_port, mutual_port = free_ports(2)
    standard = BolideServer(config_text=tls_config(pki, standard_port, authenticate="false"))
    mutual = BolideServer(
        config_text=tls_config(pki, mutual_port, authenticate=None) + "security {{\n}}\n")
    nodes = [standard, mutual]
    try:
        for node in nodes:
            node.start()
        print(f"[with_tls_nodes] standard TLS on {standard_port} (plain {standard.port}), "
              f"mutual TLS and security on {mutual_port}", flush=True)
        env = dict(os.environ)
        env.update({
            "BOLIDE_TLS_DIR": str(pki),
            "BOLIDE_TLS_PORT": str(standard_port),
            "BOLIDE_PLAIN_PORT": str(standard.port),
            "BOLIDE_MTLS_PORT": str(mutual_port),
        })
        try:
            rc = subprocess.run(command, env=env, cwd=args.cwd, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"[with_tls_nodes] {command[0]} ran past {args.timeout}s", flush=True)
            rc = 124
        dead = [index for index, node in enumerate(nodes) if not node.alive()]
        if dead:
            print(f"[with_tls_nodes] nodes {dead} died during the run", flush=True)
            rc = rc or 1
        if rc != 0:
            for index, node in enumerate(nodes):
                print(f"---- node {index} log (tail) ----\n{node.log_tail(40)}", flush=True)
        return rc
    finally:
        for node in nodes:
            node.stop()
        remove_pki(pki)


if __name__ == "__main__":
    sys.exit(main())
