#!/usr/bin/env bash
# Same workloads, same load generator, two servers: bolided over the
# Aerospike protocol and redis-server over RESP, both driven by bolide-bench.
#
#   bench/compare.sh                                   # defaults below
#   KEYS=10000 SECONDS_PER_RUN=3 WORKLOADS="RU,80 A" bench/compare.sh   # quick look
#
# Each server is pinned to SERVER_CPU and the load generator to CLIENT_CPU
# (taskset). Writes into bench/results/<stamp>/ (or RESULTS_DIR):
#   results.md                the comparison table (also printed)
#   <server>-<workload>.json  bolide-bench's JSON summary of each run
#   <server>-<workload>.log   its per-second lines
#   throughput-<workload>.png, latency.png   (PLOTS=1 and matplotlib in .cache/bench-venv)
#
# Knobs (env): KEYS, SECONDS_PER_RUN, WORKLOADS (space separated -w values; the
# load phase `I` always runs first), OBJECT (-o), CONCURRENCY (-c), DEPTH
# (--depth), THREADS (-z), TARGET_TPS (-g, 0 = unlimited), SERVER_CPU,
# CLIENT_CPU, SERVER_THREADS (bolided service-threads), PLOTS (1/0),
# SKIP_BUILD=1 with BOLIDED_BIN / BOLIDE_BENCH_BIN to use given binaries,
# REDIS_SERVER_BIN (default /usr/bin/redis-server), RESULTS_DIR,
# TOOL_CHECK=1 to also run redis-benchmark and bolide-bench --protocol redis
# with the same -c, --depth (-P) and value size (SET, then GET; redis-benchmark
# sends TOOL_CHECK_REQUESTS of each) and add a "tool check" table, which shows
# whether the load generator or the server is the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

KEYS=${KEYS:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
WORKLOADS=${WORKLOADS:-"RU,80 A B C D E F"}
OBJECT=${OBJECT:-S:100}
CONCURRENCY=${CONCURRENCY:-32}
DEPTH=${DEPTH:-1}
THREADS=${THREADS:-1}
TARGET_TPS=${TARGET_TPS:-0}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
SERVER_THREADS=${SERVER_THREADS:-1}
PLOTS=${PLOTS:-1}
TOOL_CHECK=${TOOL_CHECK:-0}
TOOL_CHECK_REQUESTS=${TOOL_CHECK_REQUESTS:-1000000}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${RESULTS_DIR:-bench/results/$stamp}
mkdir -p "$out"
out=$(cd "$out" && pwd)

die() { echo "compare.sh: $*" >&2; exit 1; }
[ -x "$REDIS_SERVER_BIN" ] || die "redis-server not found at $REDIS_SERVER_BIN (apt-get install redis-server)"
command -v taskset >/dev/null || die "taskset not found (apt-get install util-linux)"
command -v python3 >/dev/null || die "python3 not found"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p bolide-server -p bolide-bench
fi
BOLIDED_BIN=${BOLIDED_BIN:-$root/target/release/bolided}
BOLIDE_BENCH_BIN=${BOLIDE_BENCH_BIN:-$root/target/release/bolide-bench}
[ -x "$BOLIDED_BIN" ] || die "bolided not found at $BOLIDED_BIN"
[ -x "$BOLIDE_BENCH_BIN" ] || die "bolide-bench not found at $BOLIDE_BENCH_BIN"

# Only the servers this script started are stopped, by their PIDs.
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  die "nothing listening on 127.0.0.1:$1 after 10 s"
}
# CPU seconds (user+sys) used so far by this shell's finished children, into
# variable $1. `times` must run in this shell, not in a $(...) subshell.
children_cpu_seconds() {
  times > "$out/.times"
  printf -v "$1" '%s' "$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$out/.times")"
  rm -f "$out/.times"
}
# CPU seconds (user+sys) a process has used so far.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

bolide_port=$(free_port)
redis_port=$(free_port)
cat > "$out/bolide.conf" <<CONF
service {
    cluster-name compare
    service-threads $SERVER_THREADS
}
network {
    service {
        address 127.0.0.1
        port $bolide_port
    }
}
namespace test {
    replication-factor 1
    storage-engine memory {
        data-size 4G
    }
}
CONF
taskset -c "$SERVER_CPU" "$BOLIDED_BIN" --config "$out/bolide.conf" > "$out/bolided.log" 2>&1 &
bolide_pid=$!; pids+=("$bolide_pid")
taskset -c "$SERVER_CPU" "$REDIS_SERVER_BIN" --port "$redis_port" --bind 127.0.0.1 --save '' \
  --appendonly no --daemonize no --logfile "$out/redis.log" &
redis_pid=$!; pids+=("$redis_pid")
wait_port "$bolide_port"
wait_port "$redis_port"

# run SERVER WORKLOAD [extra bench flags...]: one bolide-bench run, its JSON
# and log, and the server's CPU use over the run (appended to runs.tsv).
run() {
  local server=$1 workload=$2; shift 2
  local protocol port pid name before after started ended
  case $server in
    bolide) protocol=aerospike; port=$bolide_port; pid=$bolide_pid ;;
    redis) protocol=redis; port=$redis_port; pid=$redis_pid ;;
  esac
  name="$server-${workload//,/_}"
  before=$(cpu_seconds "$pid"); started=$(date +%s.%N)
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" --protocol "$protocol" -h 127.0.0.1 -p "$port" \
    -n test -s bench -k "$KEYS" -o "$OBJECT" -c "$CONCURRENCY" --depth "$DEPTH" -z "$THREADS" \
    -g "$TARGET_TPS" -L 7,1 -w "$workload" --json "$out/$name.json" "$@" > "$out/$name.log" 2>&1 \
    || die "$name failed: $(tail -n 1 "$out/$name.log")"
  after=$(cpu_seconds "$pid"); ended=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\n' "$server" "$workload" "$name.json" \
    "$(python3 -c "print(round(($after - $before) * 100 / ($ended - $started), 1))")" >> "$out/runs.tsv"
  echo "$name: $(tail -n 1 "$out/$name.log")"
}

printf 'server\tworkload\tjson\tserver_cpu_percent\n' > "$out/runs.tsv"
for server in bolide redis; do
  run "$server" I
  for workload in $WORKLOADS; do
    run "$server" "$workload" -d "${SECONDS_PER_RUN}s"
  done
done

tool_check_rows=()
if [ "$TOOL_CHECK" = 1 ]; then
  command -v redis-benchmark >/dev/null || die "TOOL_CHECK=1 needs redis-benchmark (apt-get install redis-tools)"
  value_bytes=${OBJECT#*:}
  [[ $value_bytes =~ ^[0-9]+$ ]] || die "TOOL_CHECK=1 needs OBJECT S:<bytes> or B:<bytes>, not $OBJECT"
  # tool_run LABEL COMMAND...: ops/s from the command's output, client and redis CPU %.
  tool_run() {
    local label=$1; shift
    local log="$out/tool-${label// /_}.log" before_client after_client before_server after_server started ended rate
    children_cpu_seconds before_client; before_server=$(cpu_seconds "$redis_pid"); started=$(date +%s.%N)
    taskset -c "$CLIENT_CPU" "$@" > "$log" 2>&1 || die "tool check '$label' failed: $(tail -n 1 "$log")"
    children_cpu_seconds after_client; after_server=$(cpu_seconds "$redis_pid"); ended=$(date +%s.%N)
    rate=$(python3 - "$log" <<'PY'
import csv, json, re, sys
text = open(sys.argv[1]).read()
match = re.search(r'^"(SET|GET)","([0-9.]+)"', text, re.M)
if match:
    print(round(float(match.group(2))))
else:
    print(re.search(r"ops in [0-9.]+ s: ([0-9]+) tps", text).group(1))
PY
)
    tool_check_rows+=("| $label | $rate | $(python3 -c "print(round(($after_client - $before_client) * 100 / ($ended - $started)))") | $(python3 -c "print(round(($after_server - $before_server) * 100 / ($ended - $started)))") | \`${*}\` |")
    echo "tool check $label: $rate ops/s"
  }
  rb=(redis-benchmark -h 127.0.0.1 -p "$redis_port" -c "$CONCURRENCY" -d "$value_bytes" -P "$DEPTH" -r "$KEYS" -n "$TOOL_CHECK_REQUESTS" --csv)
  bb=("$BOLIDE_BENCH_BIN" --protocol redis -h 127.0.0.1 -p "$redis_port" -s key -k "$KEYS" -o "$OBJECT" -c "$CONCURRENCY" --depth "$DEPTH" -z "$THREADS" -d "${SECONDS_PER_RUN}s")
  tool_run "redis-benchmark SET" "${rb[@]}" -t set
  tool_run "bolide-bench SET" "${bb[@]}" -w RU,0
  tool_run "redis-benchmark GET" "${rb[@]}" -t get
  tool_run "bolide-bench GET" "${bb[@]}" -w RU,100
fi

{
  echo "# bolide-bench: bolided vs redis-server"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))."
  echo "Servers on CPU $SERVER_CPU (bolided service-threads $SERVER_THREADS), bolide-bench on CPU $CLIENT_CPU."
  echo "Flags: -k $KEYS -o $OBJECT -c $CONCURRENCY --depth $DEPTH -z $THREADS -g $TARGET_TPS, ${SECONDS_PER_RUN} s per workload; load phase -w I first."
  echo "Redis: one bin = SET/GET string, several = HSET/HGETALL; E's scan is SCAN COUNT n there (not a key-range scan)."
  echo
  python3 - "$out" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "runs.tsv")), delimiter="\t"))
print("| workload | server | ops/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | timeouts | server CPU % |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
order = []
for row in rows:
    if row["workload"] not in order:
        order.append(row["workload"])
for workload in order:
    for row in rows:
        if row["workload"] != workload:
            continue
        summary = json.load(open(os.path.join(out, row["json"])))
        total = summary["total"]
        latency = total["latency_microseconds"]
        print(f"| {workload} | {row['server']} | {total['tps']:.0f} | {latency['p50']} | {latency['p90']} "
              f"| {latency['p99']} | {latency['p99_9']} | {latency['max']} | {total['errors']} "
              f"| {total['timeouts']} | {row['server_cpu_percent']} |")
PY
  if [ "${#tool_check_rows[@]}" -gt 0 ]; then
    echo
    echo "## Tool check: redis-benchmark vs bolide-bench on the same redis-server"
    echo
    echo "Same -c $CONCURRENCY, pipeline depth $DEPTH, $OBJECT values, $KEYS keys. CPU % = share of one core over the run."
    echo
    echo "| tool | ops/s | client CPU % | redis CPU % | command |"
    echo "|---|---:|---:|---:|---|"
    printf '%s\n' "${tool_check_rows[@]}"
  fi
} > "$out/results.md"

if [ "$PLOTS" = 1 ]; then
  venv=$root/.cache/bench-venv
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    { python3 -m venv "$venv" && "$venv/bin/python" -m pip install --quiet matplotlib; } \
      > "$out/venv.log" 2>&1 || echo "compare.sh: no plots (matplotlib venv failed, see $out/venv.log)" >&2
  fi
  if "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    "$venv/bin/python" - "$out" <<'PY'
import csv, json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "runs.tsv")), delimiter="\t"))
summaries = {(r["server"], r["workload"]): json.load(open(os.path.join(out, r["json"]))) for r in rows}
workloads = []
for r in rows:
    if r["workload"] not in workloads:
        workloads.append(r["workload"])
servers = ["bolide", "redis"]
for workload in workloads:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for server in servers:
        summary = summaries.get((server, workload))
        if summary:
            points = summary["timeline"]
            ax.plot([p["elapsed_seconds"] for p in points], [p["total_tps"] for p in points],
                    marker="o", label=server)
    ax.set_title(f"throughput, workload {workload}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("ops/s")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"throughput-{workload.replace(',', '_')}.png"))
    plt.close(fig)
names = ["p50", "p90", "p99", "p99_9"]
fig, axes = plt.subplots(1, len(workloads), figsize=(3 * len(workloads), 3.5), squeeze=False)
for ax, workload in zip(axes[0], workloads):
    for offset, server in enumerate(servers):
        summary = summaries.get((server, workload))
        if summary:
            latency = summary["total"]["latency_microseconds"]
            ax.bar([i + offset * 0.4 for i in range(len(names))], [latency[n] for n in names],
                   width=0.4, label=server)
    ax.set_xticks([i + 0.2 for i in range(len(names))], ["p50", "p90", "p99", "p99.9"])
    ax.set_yscale("log")
    ax.set_title(workload)
axes[0][0].set_ylabel("latency µs")
axes[0][0].legend()
fig.tight_layout()
fig.savefig(os.path.join(out, "latency.png"))
PY
  fi
fi

cat "$out/results.md"
echo
echo "results in $out"
