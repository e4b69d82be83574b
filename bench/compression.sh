#!/usr/bin/env bash
# Storage compression (issue 24): for JSON-like documents, repetitive
# strings and random bytes, the ratio, device bytes, write and read
# throughput and server CPU per request of lz4, snappy and zstd against no
# compression, all in one run (bench/compression.py does the work).
#
#   bench/compression.sh                                  # 100,000 records of 1000 bytes
#   RECORDS=5000 PROCESSES=2 bench/compression.sh         # quick look
#   METHODS=none,zstd KINDS=json SIZE=4000 bench/compression.sh
#
# The server runs on SERVER_CPU (default 1), the client processes on
# CLIENT_CPUS (default 0). Results: bench/results/compression-<stamp>/
# (results.md, results.json, and each server's log in the run's temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cargo build --release -q -p bolide-server
py=$root/.venv/bin/python
[ -x "$py" ] || { echo "compression.sh: run ./scripts/test.sh once to create .venv" >&2; exit 1; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${RESULTS_DIR:-bench/results/compression-$stamp}
echo "results: $out"
"$py" bench/compression.py "$root/target/release/bolided" "$out"
