"""A network split of a 3-node cluster, healed: run inside a network
namespace of its own (test_network_split.py creates it), where the nodes
listen on 127.0.0.2, .3 and .4 and nftables rules cut node A off from B and
C. Exits non-zero (with the reason) if a check fails.

What it checks, as docs/cluster.md says it behaves (AP):
- under the split each side forms its own cluster (A alone, B+C) and
  serves reads and writes;
- nothing crashes;
- after the heal the sides merge into one cluster of 3, every partition is
  claimed exactly once per column, and every record written on only one
  side during the split is there with its value; a record written on both
  sides holds one of the two values.
"""

from __future__ import annotations

import subprocess
import sys
import time

import aerospike
from aerospike import exception as ex

from cluster import LocalCluster
from test_cluster import assert_map_exact

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)


def cut_off(a: str, others) -> None:
    rules = "\n".join(
        f"        ip saddr {x} ip daddr {y} drop" for o in others for x, y in ((a, o), (o, a))
    )
    nft(f"""table inet split {{
    chain input {{
        type filter hook input priority 0; policy accept;
{rules}
    }}
}}
""")


def heal() -> None:
    nft("delete table inet split")


def put_all(client, set_name, keys, value):
    for k in keys:
        client.put(("test", set_name, k), {"v": value})


def main() -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with LocalCluster(3, hosts=HOSTS, namespace={"replication-factor": "2"}) as cluster:
        cluster.wait_stable()
        base = cluster.client(seed=1)
        put_all(base, "base", range(300), "before")

        cut_off(HOSTS[0], HOSTS[1:])
        print("split: A cut off from B and C", flush=True)
        cluster.wait_formed(nodes=[1, 2], timeout=20)
        cluster.wait_formed(nodes=[0], timeout=20)
        print("both sides formed a cluster", flush=True)

        # Each side serves: a client seeded on each side sees only its side.
        side_a = aerospike.client(cluster.client_config(seed=0)).connect()
        side_bc = aerospike.client(cluster.client_config(seed=1)).connect()
        time.sleep(2)
        put_all(side_bc, "majority", range(200), "bc")
        put_all(side_a, "minority", range(200), "a")
        side_bc.put(("test", "both", 1), {"v": "bc"})
        side_a.put(("test", "both", 1), {"v": "a"})
        assert side_bc.get(("test", "majority", 7))[2] == {"v": "bc"}
        assert side_a.get(("test", "minority", 7))[2] == {"v": "a"}
        side_a.close()
        side_bc.close()

        heal()
        print("healed", flush=True)
        cluster.wait_stable(timeout=90)
        for node in cluster.nodes:
            assert node.alive(), f"node {node.index} died:\n{cluster.log_tail(node.index)}"
        assert_map_exact(cluster, [0, 1, 2], 2)

        client = aerospike.client(cluster.client_config(seed=2)).connect()
        deadline = time.monotonic() + 10
        while len(client.get_nodes()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        for set_name, value, count in (("base", "before", 300), ("majority", "bc", 200), ("minority", "a", 200)):
            for k in range(count):
                try:
                    bins = client.get(("test", set_name, k))[2]
                except ex.RecordNotFound:
                    bins = None
                assert bins == {"v": value}, f"{set_name}/{k}: {bins}, expected {value}"
        both = client.get(("test", "both", 1))[2]
        assert both in ({"v": "a"}, {"v": "bc"}), both
        copies = sum(int(cluster.ns_stats(i)["objects"]) for i in range(3))
        assert copies == 2 * 701, copies
        client.close()
        print("converged: every one-sided write kept, both-sided write kept one side", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as failure:
        print(f"FAILED: {failure}", flush=True)
        sys.exit(1)
