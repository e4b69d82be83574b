#!/usr/bin/env bash
# Server CPU time of two bolided builds on the RESP port, alternating: the
# user+system clock ticks (1/100 s) of the server process (one service
# thread, pinned to CPU 1) while redis-benchmark (CPU 0) sends exactly
# REQUESTS requests of one test at depth DEPTH. CPU time per request moves
# far less with the machine's load than throughput does.
#
#   bench/redis-cpu-ab.sh BASE_BOLIDED NEW_BOLIDED [TEST] [ROUNDS]
#   bench/redis-cpu-ab.sh /tmp/bolided-base target/release/bolided incr 3
#
# Knobs (env): REQUESTS (1000000), DEPTH (16), CLIENTS (50), KEYSPACE (1000000).
set -euo pipefail
base=${1:?usage: $0 BASE_BOLIDED NEW_BOLIDED [TEST] [ROUNDS]}
new=${2:?usage: $0 BASE_BOLIDED NEW_BOLIDED [TEST] [ROUNDS]}
test=${3:-incr}
rounds=${4:-3}
REQUESTS=${REQUESTS:-1000000}
DEPTH=${DEPTH:-16}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-1000000}
dir=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
trap stop EXIT
for round in $(seq 1 "$rounds"); do
  for build in base new; do
    binary=$base
    [ "$build" = new ] && binary=$new
    service_port=$(free_port)
    redis_port=$(free_port)
    resp_config "$dir/c.conf" redis-cpu-ab "$service_port" "$redis_port" 4G 1
    taskset -c 1 "$binary" --config "$dir/c.conf" > "$dir/$build.log" 2>&1 &
    pid=$!
    wait_port "$redis_port"
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    taskset -c 0 redis-benchmark -p "$redis_port" -t "$test" -n "$REQUESTS" -c "$CLIENTS" \
      -P "$DEPTH" -r "$KEYSPACE" -q > /dev/null
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    echo "$test depth $DEPTH round $round $build: $((after - before)) ticks for $REQUESTS requests"
    stop
  done
done
