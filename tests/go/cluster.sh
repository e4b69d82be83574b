#!/usr/bin/env bash
# The official Go client (aerospike-client-go/v8, tests/go/cluster) against
# a 3-node, RF 2 cluster of real bolided processes on 127.0.0.1, given one
# seed address: discovery, the partition map, put/get, batch, scan and
# partition queries (every record once) and the nodes' statistics (writes
# on the masters, proxies under 1%). Then against 4 nodes in two racks
# (rack_test.go): copies on both racks, and a RackAware client with
# PREFER_RACK reads from its own rack's nodes only.
# tests/python/with_cluster.py starts and stops each cluster (by PID).
#
# Env:
#   BOLIDED_BIN   server binary (default: target/release/bolided)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export BOLIDED_BIN="${BOLIDED_BIN:-$ROOT/target/release/bolided}"
[[ -x "$BOLIDED_BIN" ]] || { echo "bolided not found at $BOLIDED_BIN" >&2; exit 1; }

# Build the test binary first, so compiling does not count against the
# cluster's run.
(cd tests/go/cluster && GOFLAGS="${GOFLAGS:-} -buildvcs=false" go test -c -o "$ROOT/target/go-cluster.test" .)
python3 tests/python/with_cluster.py --nodes 3 --timeout 300 -- \
    "$ROOT/target/go-cluster.test" -test.v -test.count=1 -test.timeout=280s -test.skip '^TestRackAware'
exec python3 tests/python/with_cluster.py --nodes 4 --racks 1,1,2,2 --timeout 200 -- \
    "$ROOT/target/go-cluster.test" -test.v -test.count=1 -test.timeout=180s -test.run '^TestRackAware'
