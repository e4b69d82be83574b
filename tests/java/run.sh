#!/usr/bin/env bash
# The official Aerospike Java client (com.aerospike:aerospike-client-jdk8,
# tests/java) against real bolided processes on 127.0.0.1:
# - a 3-node, RF 2 cluster given one seed address (ThreeNodeClusterTest):
#   discovery, the partition map, put/get, batch, scans and a partition
#   query (every record once) and the nodes' statistics (writes on the
#   masters, proxies under 1%);
# - 4 nodes in two racks (RackAwareTest): copies on both racks, and a
#   rackAware client with PREFER_RACK reads from its own rack's nodes only;
#   tests/python/with_cluster.py starts and stops each cluster (by PID);
# - TLS (TlsTest): one-way TLS, and mutual TLS with PKI login, with their
#   refusals; tests/python/with_tls_nodes.py starts the two nodes (the PKI
#   made by the tls_certs example, which scripts/test.sh builds).
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
rc=0
python3 tests/python/with_cluster.py --nodes 3 --timeout 300 -- \
    "${MVN[@]}" test -Dtest=ThreeNodeClusterTest || rc=$?
python3 tests/python/with_cluster.py --nodes 4 --racks 1,1,2,2 --timeout 240 -- \
    "${MVN[@]}" test -Dtest=RackAwareTest || rc=$?
python3 tests/python/with_tls_nodes.py --timeout 300 -- \
    "${MVN[@]}" test -Dtest=TlsTest || rc=$?
exit $rc
