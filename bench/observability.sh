#!/usr/bin/env bash
# What the latency histograms and /metrics cost: the same workloads against
# two builds of bolided (BEFORE: this commit with the timing calls removed
# from the connection loop and no HTTP port; AFTER: as shipped, with the HTTP
# port open), in alternating runs with the same pinning; then AFTER under
# load with and without a Prometheus-style scraper, and the cost of a scrape.
#
#   cargo build --release -p bolide-server -p bolide-bench && bench/observability.sh
#   BEFORE=/path/to/bolided bench/observability.sh      # compare with another build
#
# Each server runs on SERVER_CPU with service-threads 1, bolide-bench on
# CLIENT_CPU (taskset). Knobs (env): KEYS, SECONDS_PER_RUN, PAIRS (alternating
# before/after pairs per workload), WORKLOADS, DEPTHS, CONCURRENCY,
# SCRAPE_INTERVALS (seconds between scrapes, space separated), SCRAPES (for the
# idle scrape timing), BOLIDE_BENCH_BIN, RESULTS_DIR.
# Writes results.md (also printed) and each run's JSON to RESULTS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

AFTER=${AFTER:-$root/target/release/bolided}
BOLIDE_BENCH_BIN=${BOLIDE_BENCH_BIN:-$root/target/release/bolide-bench}
KEYS=${KEYS:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
PAIRS=${PAIRS:-3}
WORKLOADS=${WORKLOADS:-"RU,100 RU,50"}
DEPTHS=${DEPTHS:-"1 16"}
CONCURRENCY=${CONCURRENCY:-32}
SCRAPE_INTERVALS=${SCRAPE_INTERVALS:-"1 0.1"}
SCRAPES=${SCRAPES:-500}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
out=${RESULTS_DIR:-bench/results/observability-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# BEFORE: the same commit with the timing calls taken out of the connection
# loop (histograms never recorded), built into $BEFORE_DIR, unless given.
if [ -z "${BEFORE:-}" ]; then
  BEFORE_DIR=${BEFORE_DIR:-$root/target/observability-before}
  rm -rf "$BEFORE_DIR/src" && mkdir -p "$BEFORE_DIR/src"
  git archive HEAD | tar -x -C "$BEFORE_DIR/src"
  sed -i -e 's/Ok(_) => timing.arrived(),/Ok(_) => {}/' -e '/timing/d' -e '/latency::Timing/d' \
    "$BEFORE_DIR/src/crates/server/src/connection.rs"
  ! grep -n 'timing' "$BEFORE_DIR/src/crates/server/src/connection.rs"
  (cd "$BEFORE_DIR/src" && CARGO_TARGET_DIR="$BEFORE_DIR/target" cargo build --release -q -p bolide-server)
  BEFORE=$BEFORE_DIR/target/release/bolided
fi

for binary in "$BEFORE" "$AFTER" "$BOLIDE_BENCH_BIN"; do
  [ -x "$binary" ] || { echo "observability.sh: $binary is missing" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "observability.sh: curl is required" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

server_pid=
start_server() { # binary -> sets port, http_port, server_pid
  port=$(free_port); http_port=$(free_port)
  cat > "$out/bolide.conf" <<EOF
service {
    service-threads 1
}
network {
    service {
        address 127.0.0.1
        port $port
    }
    http {
        address 127.0.0.1
        port $http_port
    }
}
namespace test {
    storage-engine memory {
        data-size 2G
    }
}
EOF
  # The build without histograms has no http context.
  if [ "$1" = "$BEFORE" ]; then
    python3 - "$out/bolide.conf" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
text = re.sub(r"    http \{\n.*?\n    \}\n", "", text, flags=re.S)
open(path, "w").write(text)
PY
  fi
  taskset -c "$SERVER_CPU" "$1" --config "$out/bolide.conf" 2>> "$out/bolided.log" &
  server_pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" -p "$port" -k "$KEYS" -o S:100 -w I -c "$CONCURRENCY" \
    --depth 16 > /dev/null 2>&1
}
stop_server() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
trap stop_server EXIT

hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
run() { # name workload depth -> prints "tps cpu-µs-per-request" (the server's user+system CPU)
  local t0 t1
  t0=$(ticks)
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" -p "$port" -k "$KEYS" -o S:100 -w "$2" -c "$CONCURRENCY" \
    --depth "$3" -d "${SECONDS_PER_RUN}s" --json "$out/$1.json" > /dev/null 2>&1
  t1=$(ticks)
  python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["total"]; print(round(t["tps"]), round((int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]) * 1e6 / t["count"], 3))' \
    "$out/$1.json" "$t0" "$t1" "$hz"
}

{
  echo "# Histograms and /metrics: cost"
  echo
  echo "$(date -u +%F) on $(hostname); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "before: $BEFORE"
  echo "after:  $AFTER"
  echo "KEYS=$KEYS SECONDS_PER_RUN=$SECONDS_PER_RUN PAIRS=$PAIRS CONCURRENCY=$CONCURRENCY server CPU $SERVER_CPU, client CPU $CLIENT_CPU"
  echo
  echo "## Before and after, alternating (ops/s; the server's CPU per request, medians)"
  echo
  echo "| workload | depth | before runs | after runs | before median | after median | after/before | before CPU µs/request | after CPU µs/request | after/before |"
  echo "|---|---:|---|---|---:|---:|---:|---:|---:|---:|"
} > "$out/results.md"

for workload in $WORKLOADS; do
  for depth in $DEPTHS; do
    before=(); after=()
    for pair in $(seq "$PAIRS"); do
      for side in before after; do
        binary=$BEFORE; [ "$side" = after ] && binary=$AFTER
        start_server "$binary"
        result=$(run "$side-$workload-d$depth-$pair" "$workload" "$depth")
        stop_server
        if [ "$side" = before ]; then before+=("$result"); else after+=("$result"); fi
      done
    done
    python3 - "$workload" "$depth" "${before[*]}" "${after[*]}" >> "$out/results.md" <<'PY'
import statistics, sys
workload, depth = sys.argv[1], sys.argv[2]
def parse(text):
    values = text.split()
    return [int(v) for v in values[0::2]], [float(v) for v in values[1::2]]
(bt, bc), (at, ac) = parse(sys.argv[3]), parse(sys.argv[4])
fmt = lambda xs: ", ".join(f"{x:,}" for x in xs)
mb, ma = statistics.median(bt), statistics.median(at)
cb, ca = statistics.median(bc), statistics.median(ac)
print(f"| `{workload}` | {depth} | {fmt(bt)} | {fmt(at)} | {mb:,.0f} | {ma:,.0f} | {ma / mb:.3f} | {cb:.2f} | {ca:.2f} | {ca / cb:.3f} |")
PY
  done
done

# /metrics under load: the same server, runs without and with a scraper.
{
  echo
  echo "## A scraper under load (after build, \`RU,50\`, depth 16, ops/s)"
  echo
  echo "| scrape every | runs without scraper | runs with scraper | ratio of medians | scrapes | scrape time p50 / p99 / max ms |"
  echo "|---|---|---|---:|---:|---|"
} >> "$out/results.md"
start_server "$AFTER"
for interval in $SCRAPE_INTERVALS; do
  without=(); with=()
  for pair in $(seq "$PAIRS"); do
    without+=("$(run "noscrape-$interval-$pair" RU,50 16 | cut -d' ' -f1)")
    : > "$out/scrape-$interval-$pair.txt"
    (
      end=$((SECONDS + SECONDS_PER_RUN))
      while [ "$SECONDS" -lt "$end" ]; do
        taskset -c "$CLIENT_CPU" curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$http_port/metrics" \
          >> "$out/scrape-$interval-$pair.txt"
        sleep "$interval"
      done
    ) &
    scraper=$!
    with+=("$(run "scrape-$interval-$pair" RU,50 16 | cut -d' ' -f1)")
    wait "$scraper"
  done
  python3 - "$interval" "${without[*]}" "${with[*]}" "$out" "$PAIRS" >> "$out/results.md" <<'PY'
import statistics, sys, glob
interval, without, with_, out, pairs = sys.argv[1], list(map(int, sys.argv[2].split())), list(map(int, sys.argv[3].split())), sys.argv[4], int(sys.argv[5])
times = []
for pair in range(1, pairs + 1):
    times += [float(x) * 1000 for x in open(f"{out}/scrape-{interval}-{pair}.txt").read().split()]
times.sort()
q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
fmt = lambda xs: ", ".join(f"{x:,}" for x in xs)
ratio = statistics.median(with_) / statistics.median(without)
print(f"| {interval} s | {fmt(without)} | {fmt(with_)} | {ratio:.3f} | {len(times)} | {q(0.5):.2f} / {q(0.99):.2f} / {times[-1]:.2f} |")
PY
done
# One scrape's CPU on the server: SCRAPES scrapes in a row, idle server.
size=$(curl -s "http://127.0.0.1:$http_port/metrics" | wc -c)
series=$(curl -s "http://127.0.0.1:$http_port/metrics" | grep -vc '^#')
t0=$(ticks); s0=$(date +%s.%N)
for _ in $(seq "$SCRAPES"); do curl -s -o /dev/null "http://127.0.0.1:$http_port/metrics"; done
t1=$(ticks); s1=$(date +%s.%N)
stop_server
python3 - "$t0" "$t1" "$hz" "$SCRAPES" "$s0" "$s1" "$size" "$series" >> "$out/results.md" <<'PY'
import sys
t0, t1, hz, n, s0, s1, size, series = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
print()
print(f"One scrape, idle server: {size:,} bytes, {series} series; {n} scrapes in a row took "
      f"{(s1 - s0) / n * 1000:.2f} ms each (curl included) and {(t1 - t0) / hz / n * 1000:.2f} ms of the server's CPU each.")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/results.md"
cat "$out/results.md"
