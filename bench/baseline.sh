#!/usr/bin/env bash
# Side-by-side baseline: the official Go `benchmark` against bolided and
# redis-benchmark against Debian's redis-server, in one run, same machine,
# server pinned to SERVER_CPU and load generator to CLIENT_CPU.
#
#   bench/baseline.sh                # full run (1M keys, 20 s per phase)
#   KEYS=100000 SECONDS_PER_RUN=5 bench/baseline.sh   # quick look
#
# Prints a markdown summary and leaves raw logs in bench/results/<stamp>/.
# Needs: cargo, go (for the benchmark tool), redis-server + redis-benchmark
# (apt-get install redis-server), taskset, perf (optional, for a profile).
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=${KEYS:-1000000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
CONCURRENCY=${CONCURRENCY:-32}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
BOLIDE_PORT=${BOLIDE_PORT:-3300}
REDIS_PORT=${REDIS_PORT:-6400}
GO_TOOLS_VERSION=${GO_TOOLS_VERSION:-v8.5.0}
PROFILE=${PROFILE:-1}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=bench/results/$stamp
mkdir -p "$out"
gobin=$PWD/.cache/gobin
if [ ! -x "$gobin/benchmark" ]; then
  GOBIN=$gobin go install "github.com/aerospike/aerospike-client-go/v8/tools/benchmark@$GO_TOOLS_VERSION"
fi
command -v redis-server >/dev/null || { echo "redis-server missing: apt-get install redis-server" >&2; exit 1; }
cargo build --release -q -p bolide-server

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# CPU seconds (user+sys) a process has used, from /proc.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

cat > "$out/bolide.conf" <<CONF
service {
    cluster-name bench
    service-threads 1
}
network {
    service {
        address 127.0.0.1
        port $BOLIDE_PORT
    }
}
namespace test {
    replication-factor 1
    nsup-period 120
    storage-engine memory {
        data-size 8G
    }
}
CONF

taskset -c "$SERVER_CPU" ./target/release/bolided --config "$out/bolide.conf" 2> "$out/bolided.log" &
bolide_pid=$!; pids+=("$bolide_pid")
wait_port "$BOLIDE_PORT"

taskset -c "$SERVER_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize no --logfile "$out/redis.log" &
redis_pid=$!; pids+=("$redis_pid")
wait_port "$REDIS_PORT"

# run_go NAME ARGS...: runs the Go benchmark for SECONDS_PER_RUN (or until done), recording
# the server's CPU use over the run.
run_go() {
  local name=$1; shift
  local before after started ended
  before=$(cpu_seconds "$bolide_pid"); started=$(date +%s.%N)
  timeout "$SECONDS_PER_RUN" taskset -c "$CLIENT_CPU" "$gobin/benchmark" -h 127.0.0.1 -p "$BOLIDE_PORT" \
    -n test -k "$KEYS" -o S:100 -c "$CONCURRENCY" -L 7,1 "$@" > "$out/$name.log" 2>&1 || true
  after=$(cpu_seconds "$bolide_pid"); ended=$(date +%s.%N)
  echo "$name server_cpu_pct=$(echo "($after - $before) * 100 / ($ended - $started)" | bc -l | cut -c1-5)" >> "$out/cpu.txt"
}

run_redis() {
  local name=$1; shift
  local before after started ended
  before=$(cpu_seconds "$redis_pid"); started=$(date +%s.%N)
  taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$CONCURRENCY" -d 100 \
    -r "$KEYS" "$@" --csv > "$out/$name.csv" 2> "$out/$name.err"
  after=$(cpu_seconds "$redis_pid"); ended=$(date +%s.%N)
  echo "$name server_cpu_pct=$(echo "($after - $before) * 100 / ($ended - $started)" | bc -l | cut -c1-5)" >> "$out/cpu.txt"
}

# Load phase: the insert workload ends by itself after KEYS records.
timeout 600 taskset -c "$CLIENT_CPU" "$gobin/benchmark" -h 127.0.0.1 -p "$BOLIDE_PORT" -n test -k "$KEYS" \
  -o S:100 -c "$CONCURRENCY" -w I > "$out/bolide-insert.log" 2>&1 || true
run_go bolide-ru100 -w RU,100
perf_pid=
if [ "$PROFILE" = 1 ] && command -v perf >/dev/null; then
  ( sleep 3; perf record -F 999 -g -p "$bolide_pid" -o "$out/perf.data" -- sleep 5 > /dev/null 2>&1 || true ) &
  perf_pid=$!
fi
run_go bolide-ru50 -w RU,50
[ -z "$perf_pid" ] || wait "$perf_pid" || true

# Redis: same key space, value size, clients, no pipelining. -n sized to
# last about SECONDS_PER_RUN at ~100k ops/s.
requests=$((SECONDS_PER_RUN * 100000))
run_redis redis-set -t set -n "$requests"
run_redis redis-get -t get -n "$requests"

rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$bolide_pid/status")
echo "bolided_rss_kib=$rss_kib" >> "$out/cpu.txt"

if [ -f "$out/perf.data" ]; then
  perf report -i "$out/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null \
    | grep -E '^ +[0-9]' | head -40 > "$out/perf-top.txt" || true
fi
bench/summarize.py "$out" | tee "$out/summary.md"
