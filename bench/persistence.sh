#!/usr/bin/env bash
# Persistence benchmarks (issue 3), Bolide and Redis side by side in one run:
#
#   1. write-heavy load (RU,50: 50% reads, 50% updates) on KEYS keys of
#      100 bytes: Bolide with a device file (default flush, flush-max-ms
#      1000) vs redis-server with appendonly yes + appendfsync everysec;
#   2. throughput per second over TIMELINE_SECONDS of the same load while
#      Bolide defragments (its updates empty old blocks) and while Redis runs
#      BGREWRITEAOF (started REWRITE_AT seconds in); then the same again
#      at a fixed offered load of TIMELINE_TARGET ops/s (bolide-bench -g):
#      below saturation this VM's jitter is absorbed by idle time, so a
#      second short of the target is a stall of the server; one PNG with
#      both timelines of both servers;
#   3. cold restart of COLD_KEYS records of 100 bytes: time to rebuild the
#      index, and index bytes per record in device mode.
#
#   bench/persistence.sh                       # defaults below
#   COLD_KEYS=1000000 RUN_SECONDS=5 TIMELINE_SECONDS=15 bench/persistence.sh   # quick look
#
# Servers run on SERVER_CPU, bolide-bench on CLIENT_CPU (taskset), same
# bolide-bench flags for both. Results: bench/results/persist-<stamp>/
# (results.md, JSON summaries, logs) and docs/persistence-throughput.png.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

KEYS=${KEYS:-1000000}
COLD_KEYS=${COLD_KEYS:-10000000}
RUN_SECONDS=${RUN_SECONDS:-20}
TIMELINE_SECONDS=${TIMELINE_SECONDS:-40}
REWRITE_AT=${REWRITE_AT:-10}
TIMELINE_TARGET=${TIMELINE_TARGET:-40000}
CONCURRENCY=${CONCURRENCY:-32}
DEPTH=${DEPTH:-1}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
WORK=${WORK:-/tmp/bolide-persist-bench}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}
PLOT=${PLOT:-docs/persistence-throughput.png}
case $PLOT in /*) ;; *) PLOT=$PWD/$PLOT ;; esac

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${RESULTS_DIR:-bench/results/persist-$stamp}
mkdir -p "$out"
out=$(cd "$out" && pwd)
die() { echo "persistence.sh: $*" >&2; exit 1; }
[ -x "$REDIS_SERVER_BIN" ] || die "redis-server not found at $REDIS_SERVER_BIN"
command -v redis-cli >/dev/null || die "redis-cli not found (apt-get install redis-tools)"

cargo build --release -q -p bolide-server -p bolide-bench
BOLIDED=$root/target/release/bolided
BENCH=$root/target/release/bolide-bench

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  die "nothing listens on port $1"
}

# bolided with one device file: start_bolide <name> <port> <filesize> [cpu list] [threads]
start_bolide() {
  local name=$1 port=$2 size=$3 cpus=${4:-$SERVER_CPU} threads=${5:-1}
  mkdir -p "$WORK/$name"
  cat > "$WORK/$name/bolide.conf" <<EOF
service {
    service-threads $threads
}
network {
    service {
        address 127.0.0.1
        port $port
    }
}
namespace test {
    storage-engine device {
        file $WORK/$name/test.dat
        filesize $size
    }
}
EOF
  taskset -c "$cpus" "$BOLIDED" --config "$WORK/$name/bolide.conf" >> "$out/$name.server.log" 2>&1 &
  pids+=($!)
  BOLIDE_PID=$!
  wait_port "$port"
}

stop_pid() { kill -TERM "$1"; wait "$1" 2>/dev/null || true; }

start_redis() {
  local port=$1
  rm -rf "$WORK/redis"; mkdir -p "$WORK/redis"
  taskset -c "$SERVER_CPU" "$REDIS_SERVER_BIN" --port "$port" --bind 127.0.0.1 --dir "$WORK/redis" \
    --appendonly yes --appendfsync everysec --save '' --daemonize no \
    > "$out/redis.server.log" 2>&1 &
  pids+=($!)
  REDIS_PID=$!
  wait_port "$port"
}

bench() { # bench <label> <bench args...>
  local label=$1; shift
  taskset -c "$CLIENT_CPU" "$BENCH" -o S:100 -c "$CONCURRENCY" --depth "$DEPTH" \
    --json "$out/$label.json" "$@" > "$out/$label.log" 2>&1 \
    || die "bolide-bench failed for $label (see $out/$label.log)"
}

# One figure of `namespace/test`, through the Go client's asinfo (as
# bench/index-footprint.sh does).
GO_TOOLS_VERSION=${GO_TOOLS_VERSION:-v8.5.0}
gobin=$root/.cache/gobin
[ -x "$gobin/asinfo" ] || GOBIN=$gobin go install "github.com/aerospike/aerospike-client-go/v8/tools/asinfo@$GO_TOOLS_VERSION"
info() { # info <port> <stat>
  "$gobin/asinfo" -h 127.0.0.1 -p "$1" -v namespace/test 2>/dev/null | tr ';' '\n' \
    | awk -F= -v k="$2" '$1 == k {print $2}' | head -1
}

echo "results: $out"
rm -rf "$WORK"; mkdir -p "$WORK"

# ---- 1 + 2: write-heavy load and the timeline, Bolide then Redis ----------
bport=$(free_port)
start_bolide timeline "$bport" 2G
bench bolide-load -p "$bport" -k "$KEYS" -w I
bench bolide-ru50 -p "$bport" -k "$KEYS" -w RU,50 -d "${RUN_SECONDS}s"
echo "bolide defrag_blocks before the timeline=$(info "$bport" storage-engine.defrag_blocks)" | tee "$out/bolide-storage.txt"
bench bolide-timeline -p "$bport" -k "$KEYS" -w RU,50 -d "${TIMELINE_SECONDS}s"
for stat in device_used_bytes device_available_pct storage-engine.defrag_blocks storage-engine.defrag_writes; do
  echo "bolide $stat=$(info "$bport" "$stat")" | tee -a "$out/bolide-storage.txt"
done
bench bolide-paced -p "$bport" -k "$KEYS" -w RU,50 -d "${TIMELINE_SECONDS}s" -g "$TIMELINE_TARGET"
for stat in storage-engine.defrag_blocks storage-engine.defrag_writes; do
  echo "bolide after the paced timeline $stat=$(info "$bport" "$stat")" | tee -a "$out/bolide-storage.txt"
done
stop_pid "$BOLIDE_PID"

rport=$(free_port)
start_redis "$rport"
bench redis-load --protocol redis -p "$rport" -k "$KEYS" -w I
bench redis-ru50 --protocol redis -p "$rport" -k "$KEYS" -w RU,50 -d "${RUN_SECONDS}s"
( sleep "$REWRITE_AT"; redis-cli -p "$rport" BGREWRITEAOF > "$out/redis-bgrewriteaof.txt" 2>&1 ) &
rewrite=$!
bench redis-timeline --protocol redis -p "$rport" -k "$KEYS" -w RU,50 -d "${TIMELINE_SECONDS}s"
wait "$rewrite" || true
redis-cli -p "$rport" INFO persistence | grep -E "aof_last_rewrite_time_sec|aof_last_bgrewrite_status" \
  | tr -d '\r' | tee "$out/redis-aof.txt"
( sleep "$REWRITE_AT"; redis-cli -p "$rport" BGREWRITEAOF > "$out/redis-bgrewriteaof-paced.txt" 2>&1 ) &
rewrite=$!
bench redis-paced --protocol redis -p "$rport" -k "$KEYS" -w RU,50 -d "${TIMELINE_SECONDS}s" -g "$TIMELINE_TARGET"
wait "$rewrite" || true
redis-cli -p "$rport" INFO persistence | grep -E "aof_last_rewrite_time_sec|aof_last_bgrewrite_status" \
  | tr -d '\r' | sed 's/^/paced: /' | tee -a "$out/redis-aof.txt"
stop_pid "$REDIS_PID"

# ---- 3: cold restart ------------------------------------------------------
cport=$(free_port)
start_bolide cold "$cport" 8G "0,1" 2
taskset -c "$CLIENT_CPU" "$BENCH" -p "$cport" -k "$COLD_KEYS" -w I -o S:100 -c 64 --depth 16 \
  --json "$out/cold-load.json" > "$out/cold-load.log" 2>&1 || die "cold load failed"
objects=$(info "$cport" objects)
index_bytes=$(info "$cport" index_used_bytes)
stop_pid "$BOLIDE_PID"
started=$(date +%s.%N)
start_bolide cold "$cport" 8G "0,1" 2
ready=$(date +%s.%N)
cold_ms=$(info "$cport" cold_start_ms)
cold_records=$(info "$cport" cold_start_records)
index_after=$(info "$cport" index_used_bytes)
stop_pid "$BOLIDE_PID"

py=python3
[ -x "$root/.cache/bench-venv/bin/python" ] && py=$root/.cache/bench-venv/bin/python
"$py" - "$out" "$objects" "$index_bytes" "$started" "$ready" "$cold_ms" "$cold_records" \
  "$REWRITE_AT" "$PLOT" "$root" "$index_after" "$TIMELINE_TARGET" <<'PY'
import json, os, statistics, sys
out, objects, index_bytes, started, ready, cold_ms, cold_records, rewrite_at, plot, root, index_after, target = sys.argv[1:]
target = int(target)
load = lambda name: json.load(open(os.path.join(out, name + ".json")))
b, r = load("bolide-ru50"), load("redis-ru50")
lines = ["# Persistence benchmarks", ""]
lines.append("## Write-heavy load (RU,50), Bolide device file vs Redis AOF everysec")
lines.append("")
lines.append("| server | ops/s | p50 µs | p99 µs | p99.9 µs | max µs | errors |")
lines.append("|---|---:|---:|---:|---:|---:|---:|")
for name, d in (("bolide", b), ("redis", r)):
    t = d["total"]; l = t["latency_microseconds"]
    lines.append(f"| {name} | {t['tps']:.0f} | {l['p50']} | {l['p99']} | {l['p99_9']} | {l['max']} | {t['errors'] + t['timeouts']} |")
lines.append("")
lines.append(f"Throughput ratio Bolide/Redis: **{b['total']['tps'] / r['total']['tps']:.2f}×**")
lines.append("")
series = {}
for kind in ("timeline", "paced"):
    for name in ("bolide", "redis"):
        tl = load(f"{name}-{kind}")["timeline"]
        tps = [p["total_tps"] for p in tl]
        # Whole seconds only: drop the first (warm-up) and last (partial) interval.
        core = tps[1:-1] if len(tps) > 3 else tps
        steady = statistics.median(core)
        series[(kind, name)] = ([p["elapsed_seconds"] for p in tl], tps)
        worst = min(core)
        line = (f"- {name} {'timeline' if kind == 'timeline' else f'timeline at {target} ops/s offered'}: "
                f"median {steady:.0f} ops/s, worst second {worst:.0f} "
                f"({100 * worst / steady:.0f}% of median), {sum(1 for x in core if x < 0.9 * steady)} "
                f"of {len(core)} seconds below 90%")
        if kind == "paced":
            line += (f"; of the offered rate: worst {100 * worst / target:.0f}%, "
                     f"{sum(1 for x in core if x < 0.9 * target)} seconds below 90%")
        lines.append(line)
lines.append("")
per_record = int(index_bytes) / max(int(objects), 1)
lines.append("## Cold restart")
lines.append("")
lines.append(f"- {int(objects):,} records of 100 bytes inserted; index {int(index_bytes):,} bytes = "
             f"**{per_record:.1f} bytes/record** (device mode, tables grown 1.15x at a time)")
lines.append(f"- after the restart the index is {int(index_after):,} bytes = "
             f"**{int(index_after) / max(int(cold_records), 1):.1f} bytes/record** (tables sized to the record count)")
lines.append(f"- cold start (index rebuilt from the file): **{int(cold_ms) / 1000:.2f} s** for "
             f"{int(cold_records):,} records; process start to port open {float(ready) - float(started):.2f} s")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md"), "w").write(text)
print(text)
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("no matplotlib: no plot")
    sys.exit(0)
fig, axes = plt.subplots(2, 1, figsize=(8, 6.6), sharex=True)
for ax, kind in zip(axes, ("timeline", "paced")):
    for name in ("bolide", "redis"):
        x, y = series[(kind, name)]
        label = "Bolide (device file, defrag running)" if name == "bolide" else f"Redis AOF everysec (BGREWRITEAOF at {rewrite_at}s)"
        ax.plot(x, y, marker=".", label=label)
    ax.axvline(float(rewrite_at), color="gray", linestyle=":", linewidth=1)
    ax.set_ylabel("ops/s (50% reads, 50% updates)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower left", fontsize=8)
    if kind == "timeline":
        ax.set_title("Throughput per second during storage clean-up: as fast as each server goes")
    else:
        ax.axhline(0.9 * target, color="gray", linestyle="--", linewidth=1)
        ax.set_title(f"The same at {target} ops/s offered (dashed: 90% of it)")
axes[-1].set_xlabel("seconds")
fig.tight_layout()
fig.savefig(plot, dpi=110)
print("plot:", plot)
PY
