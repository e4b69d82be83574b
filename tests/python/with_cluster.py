#!/usr/bin/env python3
"""Run a command against a fresh cluster of real bolided processes on
127.0.0.1, then stop the cluster. The other clients' cluster tests use it
(tests/go/cluster, tests/java), so every language sees the same cluster:
tests/python/cluster.py's LocalCluster (node ids A1, A2, ..., RF 2, in
memory), started and left stable (no migrations) before the command runs.

    python3 tests/python/with_cluster.py [--nodes 3] [--seed 1] [--timeout 300]
        [--racks 1,1,2,2] -- CMD ARGS...

The command gets ONE seed address, of node --seed (default the second
node, so not the principal), in the environment:

    BOLIDE_SEED_HOST, BOLIDE_SEED_PORT   the seed's service address
    BOLIDE_CLUSTER_NAME                  the cluster's name
    BOLIDE_CLUSTER_SIZE                  the number of nodes
    BOLIDE_RACKS                         with --racks: each node's id and
                                         rack-id, `A1:1,A2:1,A3:2,A4:2`

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

from cluster import LocalCluster  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1, help="index of the node given to the command")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the command may run")
    parser.add_argument("--cwd", default=None, help="directory to run the command in")
    parser.add_argument("--racks", default=None,
                        help="comma-separated rack-id of each node (namespace test), e.g. 1,1,2,2")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    if not 0 <= args.seed < args.nodes:
        parser.error("--seed must name one of the nodes")
    racks = args.racks.split(",") if args.racks else None
    if racks is not None and (len(racks) != args.nodes or not all(r.isdigit() for r in racks)):
        parser.error("--racks needs one rack-id per node")

    cluster = LocalCluster(args.nodes)
    for node, rack in zip(cluster.nodes, racks or []):
        node.namespace["rack-id"] = rack
    try:
        cluster.start_all()
        cluster.wait_formed(timeout=60)
        key = cluster.wait_stable(timeout=120)
        seed = cluster.nodes[args.seed]
        print(
            f"[with_cluster] {args.nodes} nodes stable (cluster key {key}), ports "
            + ", ".join(str(n.port) for n in cluster.nodes)
            + f"; seed {seed.host}:{seed.port}",
            flush=True,
        )
        env = dict(os.environ)
        env.update({
            "BOLIDE_SEED_HOST": seed.host,
            "BOLIDE_SEED_PORT": str(seed.port),
            "BOLIDE_CLUSTER_NAME": cluster.cluster_name,
            "BOLIDE_CLUSTER_SIZE": str(args.nodes),
        })
        if racks is not None:
            env["BOLIDE_RACKS"] = ",".join(f"{n.node_id}:{r}" for n, r in zip(cluster.nodes, racks))
        try:
            rc = subprocess.run(command, env=env, cwd=args.cwd, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"[with_cluster] {command[0]} ran past {args.timeout}s", flush=True)
            rc = 124
        dead = [n.index for n in cluster.nodes if not n.alive()]
        if dead:
            print(f"[with_cluster] nodes {dead} died during the run", flush=True)
            rc = rc or 1
        if rc != 0:
            print(cluster.logs(), flush=True)
        return rc
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
