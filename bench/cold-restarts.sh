#!/usr/bin/env bash
# Cold restarts of one persistent namespace, alternating builds, to compare
# them on the same file under the same machine noise.
#
#   bench/cold-restarts.sh CONFIG PORT ROUNDS BINARY...
#
# Each round starts every BINARY in turn with CONFIG, waits for PORT to
# open, prints "BINARY cold_start_ms" from the log line `cold start done`,
# and stops it. Fill the namespace first (for 10M records of 100 bytes,
# see bench/persistence.sh part 3, or `bolide-bench -w I -k 10000000`).
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,11p "$0"; exit 2; }
config=$1 port=$2 rounds=$3
shift 3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for round in $(seq "$rounds"); do
  for binary in "$@"; do
    "$binary" --config "$config" > "$log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
      ss -ltn | grep -q ":$port " && break
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.1
    done
    ms=$(grep -o 'cold start done.*millis=[0-9]*' "$log" | sed 's/.*millis=//')
    echo "round $round $binary ${ms:-failed}"
    kill "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  done
done
