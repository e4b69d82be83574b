#!/usr/bin/env bash
# Single-record throughput of two bolided builds, alternating, same command
# and pinning for both: server on SERVER_CPU (service-threads 1), bolide-bench
# on CLIENT_CPU. Each round starts a fresh node per build, loads KEYS records
# and runs each workload for SECONDS_PER_RUN.
#
#   bench/ab-single-record.sh BASE_BOLIDED NEW_BOLIDED
#   ROUNDS=3 KEYS=100000 SECONDS_PER_RUN=10 DEPTHS="1 16" bench/ab-single-record.sh A B
#
# Prints one line per run: build, depth, workload, ops/s.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:?usage: $0 BASE_BOLIDED NEW_BOLIDED}
new=${2:?usage: $0 BASE_BOLIDED NEW_BOLIDED}
ROUNDS=${ROUNDS:-3}
KEYS=${KEYS:-100000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
DEPTHS=${DEPTHS:-"1 16"}
WORKLOADS=${WORKLOADS:-"RU,100 RU,50"}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
PORT=${PORT:-3390}
BENCH=${BENCH:-target/release/bolide-bench}

[ -x "$BENCH" ] || cargo build --release -q -p bolide-bench
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

cat > "$dir/bolide.conf" <<CONF
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
    nsup-period 120
    storage-engine memory {
        data-size 4G
    }
}
CONF

wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

run_build() {
    local name=$1 binary=$2
    taskset -c "$SERVER_CPU" "$binary" --config "$dir/bolide.conf" > "$dir/$name.log" 2>&1 &
    pid=$!
    wait_port
    taskset -c "$CLIENT_CPU" "$BENCH" -p "$PORT" -k "$KEYS" -o S:100 -w I -c 32 --depth 16 > /dev/null
    for depth in $DEPTHS; do
        for workload in $WORKLOADS; do
            local tps
            tps=$(taskset -c "$CLIENT_CPU" "$BENCH" -p "$PORT" -k "$KEYS" -o S:100 -w "$workload" \
                -c 32 --depth "$depth" -d "${SECONDS_PER_RUN}s" --json - 2>/dev/null \
                | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["total"]["tps"]))')
            echo "$name depth=$depth $workload $tps"
        done
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
}

for round in $(seq 1 "$ROUNDS"); do
    echo "# round $round"
    run_build base "$base"
    run_build new "$new"
done
