#!/usr/bin/env bash
# Before/after throughput of two bolided builds on the single-record path,
# with the same bolide-bench command, alternating A and B so that the
# machine's drift falls on both (odd rounds run A first, even rounds B):
#
#   bench/ab.sh BIN_A BIN_B [ROUNDS]
#
# Each run: a fresh node (memory namespace, one service thread, CPU 1),
# 100,000 records of 100 bytes loaded, then 50% reads / 50% updates from
# 32 connections, 8 requests pipelined each, for 15 s (bolide-bench on
# CPU 0). Prints one line per run and the medians.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
A="$1"
B="$2"
ROUNDS="${3:-3}"
BENCH="$ROOT/target/release/bolide-bench"
WORK="$(mktemp -d)"
PORT=${PORT:-3337}
cat > "$WORK/bolide.conf" <<CONF
service {
    service-threads 1
}
network {
    service {
        address 127.0.0.1
        port $PORT
    }
}
namespace test {
    storage-engine memory {
        data-size 1G
    }
}
CONF

run() {
    local bin=$1
    taskset -c 1 "$bin" --config "$WORK/bolide.conf" > "$WORK/server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
        sleep 0.1
    done
    taskset -c 0 "$BENCH" -p "$PORT" -n test -k 100000 -o S:100 -w I -c 32 > /dev/null
    taskset -c 0 "$BENCH" -p "$PORT" -n test -k 100000 -o S:100 -w RU,50 -c 32 --depth 8 -d 15s \
        --json "$WORK/run.json" > /dev/null
    kill -TERM "$pid"
    wait "$pid" || true
    python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['total']['tps']))" "$WORK/run.json"
}

declare -a TA TB
for round in $(seq 1 "$ROUNDS"); do
    # Odd rounds run A first, even rounds B first.
    if (( round % 2 )); then
        a=$(run "$A"); b=$(run "$B")
    else
        b=$(run "$B"); a=$(run "$A")
    fi
    TA+=("$a"); TB+=("$b")
    echo "round $round: A $a  B $b  (B/A $(python3 -c "print(f'{$b/$a:.3f}')"))"
done
python3 - "${TA[*]}" "${TB[*]}" <<'PY'
import statistics, sys
a = [int(x) for x in sys.argv[1].split()]
b = [int(x) for x in sys.argv[2].split()]
print(f"median A {statistics.median(a):.0f}  B {statistics.median(b):.0f}  B/A {statistics.median(b)/statistics.median(a):.3f}")
PY
rm -rf "$WORK"
