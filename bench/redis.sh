#!/usr/bin/env bash
# redis-benchmark against Bolide's RESP port and Debian's redis-server, side
# by side: same tool, same flags, each server pinned to SERVER_CPU and
# redis-benchmark to CLIENT_CPU (taskset), one server at a time.
#
#   bench/redis.sh                                  # defaults below
#   REQUESTS=20000 DEPTHS=1 bench/redis.sh          # quick look
#
# For each pipeline depth in DEPTHS it runs `redis-benchmark -t TESTS -n
# REQUESTS -c CLIENTS -P depth -d VALUE_BYTES -r KEYSPACE --csv` against
# both, then the same with -3 (RESP3) when RESP3=1. Writes into
# bench/results/redis-<stamp>/ (or RESULTS_DIR): one CSV per server, depth
# and protocol, and results.md (requests per second side by side, and the
# ratio Bolide / Redis), also printed.
#
# Knobs (env): REQUESTS, CLIENTS, DEPTHS, VALUE_BYTES, KEYSPACE, TESTS,
# RESP3 (1/0), SERVER_CPU, CLIENT_CPU, SERVER_THREADS (bolided
# service-threads), SKIP_BUILD=1 with BOLIDED_BIN, REDIS_SERVER_BIN (default
# /usr/bin/redis-server), REDIS_BENCHMARK_BIN, RESULTS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. bench/lib.sh

REQUESTS=${REQUESTS:-1000000}
CLIENTS=${CLIENTS:-50}
DEPTHS=${DEPTHS:-"1 16"}
VALUE_BYTES=${VALUE_BYTES:-100}
KEYSPACE=${KEYSPACE:-1000000}
TESTS=${TESTS:-"set,get,incr,lpush,hset,zadd"}
RESP3=${RESP3:-0}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
SERVER_THREADS=${SERVER_THREADS:-1}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}
REDIS_BENCHMARK_BIN=${REDIS_BENCHMARK_BIN:-$(command -v redis-benchmark || true)}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${RESULTS_DIR:-bench/results/redis-$stamp}
mkdir -p "$out"
out=$(cd "$out" && pwd)

die() { echo "redis.sh: $*" >&2; exit 1; }
[ -x "$REDIS_SERVER_BIN" ] || die "redis-server not found at $REDIS_SERVER_BIN (apt-get install redis-server)"
[ -n "$REDIS_BENCHMARK_BIN" ] || die "redis-benchmark not found (apt-get install redis-tools)"
command -v taskset >/dev/null || die "taskset not found (apt-get install util-linux)"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p bolide-server
fi
BOLIDED_BIN=${BOLIDED_BIN:-$root/target/release/bolided}
[ -x "$BOLIDED_BIN" ] || die "bolided not found at $BOLIDED_BIN"

trap stop EXIT

start_bolide() {
  local service_port redis_port
  service_port=$(free_port)
  redis_port=$(free_port)
  resp_config "$out/bolide.conf" redis-bench "$service_port" "$redis_port" 4G "$SERVER_THREADS"
  taskset -c "$SERVER_CPU" "$BOLIDED_BIN" --config "$out/bolide.conf" > "$out/bolided.log" 2>&1 &
  pid=$!
  wait_port "$redis_port"
  port=$redis_port
}

start_redis() {
  port=$(free_port)
  taskset -c "$SERVER_CPU" "$REDIS_SERVER_BIN" --port "$port" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no --logfile "$out/redis.log" &
  pid=$!
  wait_port "$port"
}

protocols="2"
[ "$RESP3" = 1 ] && protocols="2 3"
for server in bolide redis; do
  "start_$server"
  for depth in $DEPTHS; do
    for protocol in $protocols; do
      extra=()
      [ "$protocol" = 3 ] && extra=(-3)
      echo "== $server depth $depth RESP$protocol" >&2
      taskset -c "$CLIENT_CPU" "$REDIS_BENCHMARK_BIN" -h 127.0.0.1 -p "$port" \
        -t "$TESTS" -n "$REQUESTS" -c "$CLIENTS" -P "$depth" -d "$VALUE_BYTES" -r "$KEYSPACE" \
        --csv "${extra[@]}" > "$out/$server-P$depth-resp$protocol.csv"
    done
  done
  stop
done

python3 - "$out" "$DEPTHS" "$protocols" <<'PY' | tee "$out/results.md"
import csv, sys
from pathlib import Path
out, depths, protocols = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split()
def load(path):
    rows = list(csv.reader(path.open()))
    return {row[0]: float(row[1]) for row in rows[1:] if len(row) > 1}
print("| test | depth | RESP | Bolide req/s | Redis req/s | Bolide / Redis |")
print("|---|---|---|---|---|---|")
for depth in depths:
    for protocol in protocols:
        bolide = load(out / f"bolide-P{depth}-resp{protocol}.csv")
        redis = load(out / f"redis-P{depth}-resp{protocol}.csv")
        for test, rps in bolide.items():
            other = redis.get(test, 0.0)
            ratio = f"{rps / other:.2f}" if other else "-"
            print(f"| {test} | {depth} | {protocol} | {rps:,.0f} | {other:,.0f} | {ratio} |")
PY
