#!/usr/bin/env bash
# What access control costs per request: a secured node against an open one.
#
#   cargo build --release -p bolide-server -p bolide-bench -p bolide-cli && bench/security.sh
#
# Side by side: an open node, a secured node (security { }) and a secured
# node with quotas on (security { enable-quotas true } and a quota on the
# user's role the load never reaches) run at the same time on SERVER_CPU
# (one event loop each); each is loaded by its own bolide-bench on
# CLIENT_CPU with the same workload, the secured ones as a user holding
# read-write (each connection logs in once, before the run). The scheduler
# gives the servers equal shares of the core, so the ratio of their
# throughputs is the inverse ratio of their CPU cost per request, and
# whatever else the machine does hits all of them alike. A control pair
# (the open node against a second open node) shows the method's noise.
# Goal (issue 22): secured within 3% of open.
#
# Then the cost of a login (LOGIN: PBKDF2 on the node's blocking pool) and
# of a new authenticated connection (AUTHENTICATE with a token, one info
# request) against a new open connection: bench/security_login.py.
#
# Knobs (env): KEYS, SECONDS_PER_RUN, ROUNDS, WORKLOADS, DEPTHS, CONCURRENCY, LOGINS,
# SERVER_CPU, CLIENT_CPU, BOLIDED, BOLIDE_BENCH_BIN, BOLIDE_BIN, RESULTS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

BOLIDED=${BOLIDED:-$root/target/release/bolided}
BOLIDE_BENCH_BIN=${BOLIDE_BENCH_BIN:-$root/target/release/bolide-bench}
BOLIDE_BIN=${BOLIDE_BIN:-$root/target/release/bolide}
KEYS=${KEYS:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
ROUNDS=${ROUNDS:-3}
WORKLOADS=${WORKLOADS:-"RU,100 RU,50"}
DEPTHS=${DEPTHS:-"1 16"}
CONCURRENCY=${CONCURRENCY:-32}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
LOGINS=${LOGINS:-2000}
out=${RESULTS_DIR:-bench/results/security-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for binary in "$BOLIDED" "$BOLIDE_BENCH_BIN" "$BOLIDE_BIN"; do
  [ -x "$binary" ] || { echo "security.sh: $binary is missing" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# start NAME SECURITY: a loaded server; SECURITY is the security context
# ("" for none). Sets NAME_port, NAME_pid, NAME_login (bolide-bench flags).
start() {
  local name=$1 security=$2 port conf work login=()
  port=$(free_port); conf="$out/$name.conf"; work="$out/$name-work"
  mkdir -p "$work"
  {
    printf 'service {\n    service-threads 1\n    work-directory %s\n}\n' "$work"
    printf 'network {\n    service {\n        address 127.0.0.1\n        port %s\n    }\n}\n' "$port"
    printf 'namespace test {\n    storage-engine memory {\n        data-size 2G\n    }\n}\n'
    printf '%s' "$security"
  } > "$conf"
  taskset -c "$SERVER_CPU" "$BOLIDED" --config "$conf" 2>> "$out/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  if [ -n "$security" ]; then
    local role=read-write
    if [[ "$security" == *enable-quotas* ]]; then
      # A quota far above what one core serves: counted, never refusing.
      "$BOLIDE_BIN" -p "$port" -U admin -P admin acl create-role bench \
        --privilege read-write --read-quota 100000000 --write-quota 100000000 > /dev/null
      role=bench
    fi
    "$BOLIDE_BIN" -p "$port" -U admin -P admin acl create-user bench --new-password bench \
      --roles "$role" > /dev/null
    login=(-U bench -P bench)
  fi
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" -p "$port" "${login[@]}" -k "$KEYS" -o S:100 -w I \
    -c "$CONCURRENCY" --depth 16 > /dev/null 2>&1
  printf -v "${name}_port" %s "$port"
  printf -v "${name}_pid" %s "$pid"
  printf -v "${name}_login" %s "${login[*]}"
}

# load FILE NAME WORKLOAD DEPTH: one bolide-bench run against NAME, JSON into FILE.
load() {
  local port_var="${2}_port" login_var="${2}_login"
  # shellcheck disable=SC2086
  taskset -c "$CLIENT_CPU" "$BOLIDE_BENCH_BIN" -p "${!port_var}" ${!login_var} -k "$KEYS" -o S:100 \
    -w "$3" -c "$CONCURRENCY" --depth "$4" -d "${SECONDS_PER_RUN}s" --json "$1" > /dev/null 2>&1
}
tps() { python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["total"]["tps"]))' "$1"; }
errors() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total"]["errors"])' "$1"; }

ratios() { # label a-runs b-runs -> a table row: runs, ratio of each run, median ratio
  python3 - "$@" <<'PY'
import statistics, sys
label, a, b = sys.argv[1], list(map(int, sys.argv[2].split())), list(map(int, sys.argv[3].split()))
r = [y / x for x, y in zip(a, b)]
fmt = lambda xs: ", ".join(f"{x:,}" for x in xs)
print(f"| {label} | {fmt(a)} | {fmt(b)} | {', '.join(f'{x:.3f}' for x in r)} | {statistics.median(r):.3f} |")
PY
}

# pair A B: side-by-side rounds of A and B for every workload and depth.
pair() {
  local a_name=$1 b_name=$2 workload depth round first
  for workload in $WORKLOADS; do
    for depth in $DEPTHS; do
      a=(); b=()
      for round in $(seq "$ROUNDS"); do
        local fa="$out/$a_name-vs-$b_name-$workload-$depth-$round-a.json"
        local fb="$out/$a_name-vs-$b_name-$workload-$depth-$round-b.json"
        # Which client starts first alternates, so neither side keeps an edge.
        if [ $((round % 2)) = 1 ]; then
          load "$fa" "$a_name" "$workload" "$depth" & first=$!
          load "$fb" "$b_name" "$workload" "$depth"
        else
          load "$fb" "$b_name" "$workload" "$depth" & first=$!
          load "$fa" "$a_name" "$workload" "$depth"
        fi
        wait "$first"
        if [ "$(errors "$fb")" != 0 ] || [ "$(errors "$fa")" != 0 ]; then
          echo "security.sh: errors in $fa or $fb" >&2; exit 1
        fi
        a+=("$(tps "$fa")"); b+=("$(tps "$fb")")
      done
      ratios "\`$workload\`, $depth" "${a[*]}" "${b[*]}" >> "$out/results.md"
    done
  done
}

{
  echo "# Access control: cost per request"
  echo
  echo "$(date -u '+%F %H:%M') UTC, commit $(git rev-parse --short HEAD); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "KEYS=$KEYS SECONDS_PER_RUN=$SECONDS_PER_RUN ROUNDS=$ROUNDS CONCURRENCY=$CONCURRENCY; servers on CPU $SERVER_CPU (service-threads 1), bolide-bench on CPU $CLIENT_CPU"
} > "$out/results.md"

start open ""
start secured $'security {\n}\n'
start quotas $'security {\n    enable-quotas true\n}\n'
start control ""

for pair in "open secured" "open quotas" "open control"; do
  read -r a_name b_name <<< "$pair"
  {
    echo
    echo "## $b_name against $a_name, side by side on one core (ops/s of each)"
    echo
    echo "| workload, depth | $a_name | $b_name | $b_name/$a_name per run | median |"
    echo "|---|---|---|---|---:|"
  } >> "$out/results.md"
  pair "$a_name" "$b_name"
done

# What a login and an authenticated connection cost (the servers are idle
# now): sequential, one client, on raw sockets.
{
  echo
  echo "## Logins and new authenticated connections (one client, one after another)"
  echo
  taskset -c "$CLIENT_CPU" python3 bench/security_login.py --port "$secured_port" \
    --open-port "$open_port" --count "$LOGINS"
} >> "$out/results.md"

cat "$out/results.md"
echo "results in $out"
