#!/usr/bin/env bash
# What the latency histograms and /metrics cost.
#
#   cargo build --release -p bolide-server -p bolide-bench && bench/observability.sh
#   BEFORE=/path/to/bolided bench/observability.sh      # compare with another build
#
# BEFORE is this commit with the connection loop's timing calls made empty
# (histograms never recorded) and no HTTP port; AFTER is the build as shipped,
# with its HTTP port open. Two measurements of each question:
#
# 1. Side by side: both servers run at the same time on SERVER_CPU (one event
#    loop each), each loaded by its own bolide-bench on CLIENT_CPU with the
#    same workload. The scheduler gives the two servers equal shares of the
#    core, so the ratio of their throughputs is the inverse ratio of their CPU
#    cost per request, and whatever else the machine does hits both alike.
#    The same with two AFTER servers, one of them scraped (/metrics) every
#    SCRAPE_INTERVALS seconds: the cost of being scraped under load.
# 2. Alternating: one server at a time, BEFORE and AFTER in turn (PAIRS
#    times), throughput and the server's CPU per request; on a busy machine
#    this spreads more than the side-by-side ratio.
#
# Then one scrape's CPU on an idle server and its size.
# Knobs (env): KEYS, SECONDS_PER_RUN, ROUNDS (side-by-side runs), PAIRS,
# WORKLOADS, DEPTHS, CONCURRENCY, SCRAPE_INTERVALS, SCRAPES, SERVER_CPU,
# CLIENT_CPU, BOLIDE_BENCH_BIN, BEFORE_DIR, RESULTS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

AFTER=${AFTER:-$root/target/release/bolided}
BOLIDE_BENCH_BIN=${BOLIDE_BENCH_BIN:-$root/target/release/bolide-bench}
KEYS=${KEYS:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
ROUNDS=${ROUNDS:-3}
PAIRS=${PAIRS:-2}
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

if [ -z "${BEFORE:-}" ]; then
  BEFORE_DIR=${BEFORE_DIR:-$root/target/observability-before}
  rm -rf "$BEFORE_DIR/src" && mkdir -p "$BEFORE_DIR/src"
  git archive HEAD | tar -x -C "$BEFORE_DIR/src"
  # Every Timing method returns at once (the connection loop still calls
  # them; they inline to nothing): no clock read, no classification, no
  # histogram update.
  timing_rs=$BEFORE_DIR/src/crates/server/src/latency.rs
  sed -i -E 's/^(    pub fn (arrived|answered|stream_started|written|stream_done)\(&mut self(, body: &\[u8\])?\) \{)$/\1\n        return;/' \
    "$timing_rs"
  if [ "$(grep -c '^        return;$' "$timing_rs")" != 5 ]; then
    echo "observability.sh: could not take the timing out of latency.rs" >&2; exit 1
  fi
  (cd "$BEFORE_DIR/src" && CARGO_TARGET_DIR="$BEFORE_DIR/target" cargo build --release -q -p bolide-server)
  BEFORE=$BEFORE_DIR/target/release/bolided
fi
for binary in "$BEFORE" "$AFTER" "$BOLIDE_BENCH_BIN"; do
  [ -x "$binary" ] || { echo "observability.sh: $binary is missing" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "observability.sh: curl is required" >&2; exit 1; }

hz=$(getconf CLK_TCK)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# start NAME BINARY: a loaded server; sets NAME_port, NAME_http, NAME_pid.
start() {
  local name=$1 binary=$2 port http conf
  port=$(free_port); http=$(free_port); conf="$out/$name.conf"
  {
    printf 'service {\n    service-threads 1\n}\nnetwork {\n    service {\n        address 127.0.0.1\n        port %s\n    }\n' "$port"
    if [ "$binary" != "$BEFORE" ]; then
      printf '    http {\n        address 127.0.0.1\n        port %s\n    }\n' "$http"
    fi
    printf '}\nnamespace test {\n    storage-engine memory {\n        data-size 2G\n    }\n}\n'
  } > "$conf"
  taskset -c "$SERVER_CPU" "$binary" --config "$conf" 2>> "$out/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" -p "$port" -k "$KEYS" -o S:100 -w I -c "$CONCURRENCY" \
    --depth 16 > /dev/null 2>&1
  printf -v "${name}_port" %s "$port"
  printf -v "${name}_http" %s "$http"
  printf -v "${name}_pid" %s "$pid"
}
stop() { local pid_var="${1}_pid"; kill "${!pid_var}" 2>/dev/null || true; wait "${!pid_var}" 2>/dev/null || true; }

# load FILE PORT WORKLOAD DEPTH: one bolide-bench run, JSON into FILE.
load() {
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" -p "$2" -k "$KEYS" -o S:100 -w "$3" -c "$CONCURRENCY" \
    --depth "$4" -d "${SECONDS_PER_RUN}s" --json "$1" > /dev/null 2>&1
}
tps() { python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["total"]["tps"]))' "$1"; }

# scraper PORT INTERVAL FILE: scrape /metrics for SECONDS_PER_RUN, times into FILE.
scraper() {
  local end=$((SECONDS + SECONDS_PER_RUN))
  : > "$3"
  while [ "$SECONDS" -lt "$end" ]; do
    taskset -c "$CLIENT_CPU" curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$1/metrics" >> "$3"
    sleep "$2"
  done
}

ratios() { # title a-runs b-runs -> a table row: runs, ratio of each run, median ratio
  python3 - "$@" <<'PY'
import statistics, sys
label, a, b = sys.argv[1], list(map(int, sys.argv[2].split())), list(map(int, sys.argv[3].split()))
r = [y / x for x, y in zip(a, b)]
fmt = lambda xs: ", ".join(f"{x:,}" for x in xs)
print(f"| {label} | {fmt(a)} | {fmt(b)} | {', '.join(f'{x:.3f}' for x in r)} | {statistics.median(r):.3f} |")
PY
}

{
  echo "# Histograms and /metrics: cost"
  echo
  echo "$(date -u '+%F %H:%M') UTC, commit $(git rev-parse --short HEAD); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "before: $BEFORE"
  echo "after:  $AFTER"
  echo "KEYS=$KEYS SECONDS_PER_RUN=$SECONDS_PER_RUN ROUNDS=$ROUNDS PAIRS=$PAIRS CONCURRENCY=$CONCURRENCY; servers on CPU $SERVER_CPU (service-threads 1), bolide-bench on CPU $CLIENT_CPU"
  echo
  echo "## 1. Side by side: before and after on one core at once (ops/s of each)"
  echo
  echo "| workload, depth | before | after | after/before per run | median |"
  echo "|---|---|---|---|---:|"
} > "$out/results.md"

start before "$BEFORE"
start after "$AFTER"
for workload in $WORKLOADS; do
  for depth in $DEPTHS; do
    a=(); b=()
    for round in $(seq "$ROUNDS"); do
      # Which client starts first alternates, so neither side keeps an edge.
      if [ $((round % 2)) = 1 ]; then
        load "$out/sbs-before-$workload-$depth-$round.json" "$before_port" "$workload" "$depth" &
        first=$!
        load "$out/sbs-after-$workload-$depth-$round.json" "$after_port" "$workload" "$depth"
      else
        load "$out/sbs-after-$workload-$depth-$round.json" "$after_port" "$workload" "$depth" &
        first=$!
        load "$out/sbs-before-$workload-$depth-$round.json" "$before_port" "$workload" "$depth"
      fi
      wait "$first"
      a+=("$(tps "$out/sbs-before-$workload-$depth-$round.json")")
      b+=("$(tps "$out/sbs-after-$workload-$depth-$round.json")")
    done
    ratios "\`$workload\`, $depth" "${a[*]}" "${b[*]}" >> "$out/results.md"
  done
done
stop before

{
  echo
  echo "## 1b. Side by side: two after servers, one scraped (\`RU,50\`, depth 16, ops/s of each)"
  echo
  echo "| scrape every | not scraped | scraped | scraped/not per run | median | scrapes | scrape time p50 / p99 / max ms |"
  echo "|---|---|---|---|---:|---:|---|"
} >> "$out/results.md"
start other "$AFTER"
# Control: the same build on both sides, nobody scraped. How far from 1.000
# this lands is the noise of the method on this machine at this moment.
a=(); b=()
for round in $(seq "$ROUNDS"); do
  load "$out/control-other-$round.json" "$other_port" RU,50 16 &
  first=$!
  load "$out/control-after-$round.json" "$after_port" RU,50 16
  wait "$first"
  a+=("$(tps "$out/control-other-$round.json")")
  b+=("$(tps "$out/control-after-$round.json")")
done
echo "$(ratios "control: none" "${a[*]}" "${b[*]}") - | - |" >> "$out/results.md"
for interval in $SCRAPE_INTERVALS; do
  a=(); b=()
  for round in $(seq "$ROUNDS"); do
    load "$out/quiet-$interval-$round.json" "$other_port" RU,50 16 &
    first=$!
    scraper "$after_http" "$interval" "$out/scrape-$interval-$round.txt" &
    scraping=$!
    load "$out/scraped-$interval-$round.json" "$after_port" RU,50 16
    wait "$first" "$scraping"
    a+=("$(tps "$out/quiet-$interval-$round.json")")
    b+=("$(tps "$out/scraped-$interval-$round.json")")
  done
  row=$(ratios "$interval s" "${a[*]}" "${b[*]}")
  times=$(cat "$out"/scrape-"$interval"-*.txt | python3 -c '
import sys
t = sorted(float(x) * 1000 for x in sys.stdin.read().split())
q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
print(f"{len(t)} | {q(0.5):.2f} / {q(0.99):.2f} / {t[-1]:.2f} |")')
  echo "$row $times" >> "$out/results.md"
done
stop other
stop after

{
  echo
  echo "## 2. Alternating: one server at a time (ops/s; the server's CPU µs per request)"
  echo
  echo "| workload, depth | before ops/s | after ops/s | before CPU µs | after CPU µs | after/before CPU (median) |"
  echo "|---|---|---|---|---|---:|"
} >> "$out/results.md"
for workload in $WORKLOADS; do
  for depth in $DEPTHS; do
    bt=(); at=(); bc=(); ac=()
    for pair in $(seq "$PAIRS"); do
      for side in before after; do
        binary=$BEFORE; [ "$side" = after ] && binary=$AFTER
        start solo "$binary"
        t0=$(ticks "$solo_pid")
        load "$out/alt-$side-$workload-$depth-$pair.json" "$solo_port" "$workload" "$depth"
        t1=$(ticks "$solo_pid")
        stop solo
        ops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total"]["count"])' "$out/alt-$side-$workload-$depth-$pair.json")
        cpu=$(python3 -c "print(round(($t1 - $t0) / $hz * 1e6 / $ops, 3))")
        if [ "$side" = before ]; then bt+=("$(tps "$out/alt-$side-$workload-$depth-$pair.json")"); bc+=("$cpu")
        else at+=("$(tps "$out/alt-$side-$workload-$depth-$pair.json")"); ac+=("$cpu"); fi
      done
    done
    python3 - "\`$workload\`, $depth" "${bt[*]}" "${at[*]}" "${bc[*]}" "${ac[*]}" >> "$out/results.md" <<'PY'
import statistics, sys
label, bt, at, bc, ac = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), list(map(float, sys.argv[4].split())), list(map(float, sys.argv[5].split()))
fmt = lambda xs: ", ".join(f"{int(x):,}" for x in xs)
print(f"| {label} | {fmt(bt)} | {fmt(at)} | {', '.join(map(str, bc))} | {', '.join(map(str, ac))} | {statistics.median(ac) / statistics.median(bc):.3f} |")
PY
  done
done

# One scrape on an idle server: its size and the server's CPU for it.
start idle "$AFTER"
size=$(curl -s "http://127.0.0.1:$idle_http/metrics" | wc -c)
series=$(curl -s "http://127.0.0.1:$idle_http/metrics" | grep -vc '^#')
t0=$(ticks "$idle_pid"); s0=$(date +%s.%N)
for _ in $(seq "$SCRAPES"); do curl -s -o /dev/null "http://127.0.0.1:$idle_http/metrics"; done
t1=$(ticks "$idle_pid"); s1=$(date +%s.%N)
stop idle
python3 - "$t0" "$t1" "$hz" "$SCRAPES" "$s0" "$s1" "$size" "$series" >> "$out/results.md" <<'PY'
import sys
t0, t1, hz, n, s0, s1, size, series = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
print()
print(f"One scrape, idle server (one namespace): {size:,} bytes, {series} series; {n} scrapes in a row took "
      f"{(s1 - s0) / n * 1000:.2f} ms each (curl included) and {(t1 - t0) / hz / n * 1000:.2f} ms of the server's CPU each.")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/results.md"
cat "$out/results.md"
