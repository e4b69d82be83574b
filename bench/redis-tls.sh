#!/usr/bin/env bash
# What TLS costs on the Redis protocol, in Redis and in Bolide, measured
# side by side: Debian's redis-server and a bolided with a RESP port each
# serve a plain port and a TLS port (TLS 1.2 on both unless TLS_PROTOCOLS
# says otherwise, an ECDSA P-256 certificate from a PKI made here by the
# tls_certs example, no client certificates), both pinned to SERVER_CPU;
# redis-benchmark (on CLIENT_CPU) runs the same tests against each of the
# four ports in turn, ROUNDS rounds with the order rotating. Prints
# requests per second and the server's CPU time per request (user+system
# clock ticks of /proc/PID/stat, which count the threads that ended too,
# in nanoseconds per request: make REQUESTS large enough for a few hundred
# ticks), and the ratios TLS / plain per server, round by round.
#
#   cargo build --release -p bolide-server
#   cargo build --release -p bolide-server --example tls_certs
#   bench/redis-tls.sh
#
# Knobs (env): ROUNDS (3), REQUESTS (1000000), CLIENTS (50), DEPTHS ("1 16"),
# TESTS (set,get), VALUE_BYTES (100), KEYSPACE (100000), TLS_PROTOCOLS
# (TLSv1.2), SERVER_CPU (1), CLIENT_CPU (0), SERVER_THREADS (bolided's
# service-threads, 1), BOLIDED_BIN, REDIS_SERVER_BIN, REDIS_BENCHMARK_BIN,
# TLS_CERTS_BIN, RESULTS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-1000000}
CLIENTS=${CLIENTS:-50}
DEPTHS=${DEPTHS:-"1 16"}
TESTS=${TESTS:-"set,get"}
VALUE_BYTES=${VALUE_BYTES:-100}
KEYSPACE=${KEYSPACE:-100000}
TLS_PROTOCOLS=${TLS_PROTOCOLS:-TLSv1.2}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
SERVER_THREADS=${SERVER_THREADS:-1}
BOLIDED_BIN=${BOLIDED_BIN:-$root/target/release/bolided}
TLS_CERTS_BIN=${TLS_CERTS_BIN:-$root/target/release/examples/tls_certs}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}
REDIS_BENCHMARK_BIN=${REDIS_BENCHMARK_BIN:-$(command -v redis-benchmark || true)}
out=${RESULTS_DIR:-bench/results/redis-tls-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

die() { echo "redis-tls.sh: $*" >&2; exit 1; }
for binary in "$BOLIDED_BIN" "$TLS_CERTS_BIN" "$REDIS_SERVER_BIN" "$REDIS_BENCHMARK_BIN"; do
  [ -x "$binary" ] || die "$binary is missing"
done
"$REDIS_BENCHMARK_BIN" --help 2>&1 | grep -q -- '--tls' || die "redis-benchmark was built without TLS"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  die "nothing listens on port $1"
}
# User+system CPU of the whole process (threads that ended included), in
# nanoseconds, at the clock tick's resolution.
cpu_ns() { echo $(( $(awk '{ print $14 + $15 }' /proc/$1/stat) * (1000000000 / $(getconf CLK_TCK)) )); }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$TLS_CERTS_BIN" "$out/pki" bolide-node > /dev/null
pki=$out/pki

redis_plain=$(free_port); redis_tls=$(free_port)
taskset -c "$SERVER_CPU" "$REDIS_SERVER_BIN" --port "$redis_plain" --tls-port "$redis_tls" \
  --bind 127.0.0.1 --save '' --appendonly no --daemonize no --logfile "$out/redis.log" \
  --tls-cert-file "$pki/node.pem" --tls-key-file "$pki/node.key" --tls-ca-cert-file "$pki/ca.pem" \
  --tls-auth-clients no --tls-protocols "$TLS_PROTOCOLS" &
redis_pid=$!; pids+=($redis_pid)

service_port=$(free_port); bolide_plain=$(free_port); bolide_tls=$(free_port)
cat > "$out/bolide.conf" <<CONF
service {
    cluster-name redis-tls-bench
    service-threads $SERVER_THREADS
}
network {
    tls bolide-node {
        cert-file $pki/node.pem
        key-file $pki/node.key
        protocols $TLS_PROTOCOLS
    }
    service {
        address 127.0.0.1
        port $service_port
    }
    redis {
        port $bolide_plain
        tls-port $bolide_tls
        tls-name bolide-node
        tls-authenticate-client false
    }
}
namespace test {
    replication-factor 1
    nsup-period 120
    storage-engine memory {
        data-size 2G
    }
}
CONF
taskset -c "$SERVER_CPU" "$BOLIDED_BIN" --config "$out/bolide.conf" > "$out/bolided.log" 2>&1 &
bolide_pid=$!; pids+=($bolide_pid)
for port in $redis_plain $redis_tls $bolide_plain $bolide_tls; do wait_port "$port"; done

tls_flags=(--tls --cacert "$pki/ca.pem" --sni bolide-node)
results=$out/runs.txt
: > "$results"
variants=("redis plain" "redis tls" "bolide plain" "bolide tls")
for round in $(seq 1 "$ROUNDS"); do
  for depth in $DEPTHS; do
    # Rotate the order each round.
    for i in 0 1 2 3; do
      variant=${variants[$(( (i + round - 1) % 4 ))]}
      read -r server transport <<< "$variant"
      pid=$redis_pid; port=$redis_plain; flags=()
      [ "$server" = bolide ] && { pid=$bolide_pid; port=$bolide_plain; }
      if [ "$transport" = tls ]; then
        flags=("${tls_flags[@]}")
        port=$redis_tls
        [ "$server" = bolide ] && port=$bolide_tls
      fi
      before=$(cpu_ns "$pid")
      taskset -c "$CLIENT_CPU" "$REDIS_BENCHMARK_BIN" -h 127.0.0.1 -p "$port" "${flags[@]}" \
        -t "$TESTS" -n "$REQUESTS" -c "$CLIENTS" -P "$depth" -d "$VALUE_BYTES" -r "$KEYSPACE" \
        --csv > "$out/run.csv"
      after=$(cpu_ns "$pid")
      tests=$(( $(wc -l < "$out/run.csv") - 1 ))
      ns=$(( (after - before) / (REQUESTS * tests) ))
      python3 - "$out/run.csv" "$round" "$depth" "$server" "$transport" "$ns" <<'PY' | tee -a "$results"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]
_, _, round_, depth, server, transport, ns = sys.argv
rps = " ".join(f"{row[0].lower()}={float(row[1]):.0f}" for row in rows)
print(f"round={round_} depth={depth} {server} {transport} {rps} server_ns_per_request={ns}")
PY
    done
  done
done

python3 - "$results" <<'PY' | tee "$out/results.md"
import re, sys
from collections import defaultdict
runs = defaultdict(dict)
for line in open(sys.argv[1]):
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    words = [w for w in line.split() if "=" not in w]
    server, transport = words
    runs[(fields["depth"], server, fields["round"])][transport] = fields
print("| server | depth | round | plain req/s (per test) | TLS req/s | TLS / plain req/s | server ns/request plain | TLS | TLS / plain CPU |")
print("|---|---|---|---|---|---|---|---|---|")
for (depth, server, round_), pair in sorted(runs.items(), key=lambda kv: (kv[0][1], int(kv[0][0]), int(kv[0][2]))):
    plain, tls = pair["plain"], pair["tls"]
    tests = [k for k in plain if k not in ("round", "depth", "server_ns_per_request")]
    rps = lambda f: " ".join(f"{t}:{int(f[t]):,}" for t in tests)
    ratio = " ".join(f"{t}:{int(tls[t]) / int(plain[t]):.2f}" for t in tests)
    cpu = int(tls["server_ns_per_request"]) / int(plain["server_ns_per_request"])
    print(f"| {server} | {depth} | {round_} | {rps(plain)} | {rps(tls)} | {ratio} | "
          f"{plain['server_ns_per_request']} | {tls['server_ns_per_request']} | {cpu:.2f} |")
PY
