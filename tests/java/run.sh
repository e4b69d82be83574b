#!/usr/bin/env bash
# The official Aerospike Java client (com.aerospike:aerospike-client-jdk8,
# tests/java) against a 3-node, RF 2 cluster of real bolided processes on
# 127.0.0.1, given one seed address: discovery, the partition map,
# put/get, batch, scans and a partition query (every record once) and the
# nodes' statistics (writes on the masters, proxies under 1%). Then against
# 4 nodes in two racks (RackAwareTest): copies on both racks, and a
# rackAware client with PREFER_RACK reads from its own rack's nodes only.
# tests/python/with_cluster.py starts and stops each cluster (by PID).
#
# Maven's repository is its default one (~/.m2/repository, or
# MAVEN_REPO_LOCAL), so a machine downloads the client and plugins once.
#
# Env:
#   BOLIDED_BIN        server binary (default: target/release/bolided)
#   MAVEN_REPO_LOCAL   another local Maven repository
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export BOLIDED_BIN="${BOLIDED_BIN:-$ROOT/target/release/bolided}"
[[ -x "$BOLIDED_BIN" ]] || { echo "bolided not found at $BOLIDED_BIN" >&2; exit 1; }

MVN=(mvn -B -ntp -f "$ROOT/tests/java/pom.xml")
[[ -n "${MAVEN_REPO_LOCAL:-}" ]] && MVN+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")

# Download and compile first (bounded), so neither counts against the
# cluster's run.
timeout 900 "${MVN[@]}" -q test-compile
python3 tests/python/with_cluster.py --nodes 3 --timeout 300 -- \
    "${MVN[@]}" test -Dtest=ThreeNodeClusterTest
exec python3 tests/python/with_cluster.py --nodes 4 --racks 1,1,2,2 --timeout 240 -- \
    "${MVN[@]}" test -Dtest=RackAwareTest
