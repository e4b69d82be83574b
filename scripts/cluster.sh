#!/usr/bin/env bash
# Starts a Bolide cluster of N nodes on this machine (127.0.0.1):
#
#   ./scripts/cluster.sh            # 3 nodes, RF 2, namespace test in memory
#   ./scripts/cluster.sh 4          # 4 nodes
#   RF=3 STORAGE=device ./scripts/cluster.sh 3
#
# Node i (1..N) serves clients on port 3000 + 10*(i-1) (3000, 3010, 3020...),
# its fabric on +1 and its heartbeat on +2, and the web console and
# /metrics on HTTP port 8081 + (i-1) (8081, 8082...); every node is told only of the
# first node's heartbeat port (the mesh finds the rest). Configs, logs and
# storage files go to $DIR (default ./cluster-data). The script waits until
# every node reports the full cluster, prints how to reach it, and stops
# every node it started (by PID) on Ctrl-C or SIGTERM.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-3}"
RF="${RF:-2}"
STORAGE="${STORAGE:-memory}"
DIR="${DIR:-$ROOT/cluster-data}"
BASE_PORT="${BASE_PORT:-3000}"
HTTP_BASE_PORT="${HTTP_BASE_PORT:-8081}"
BOLIDED="${BOLIDED_BIN:-$ROOT/target/release/bolided}"

if [[ ! "$N" =~ ^[0-9]+$ ]] || (( N < 1 || N > 64 )); then
    echo "usage: $0 [NODES 1..64]" >&2
    exit 2
fi
if [[ ! -x "$BOLIDED" ]]; then
    (cd "$ROOT" && cargo build --release -p bolide-server)
fi
mkdir -p "$DIR"

pids=()
stop_all() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap 'stop_all; exit 0' INT TERM

seed_port=$((BASE_PORT + 2))
for i in $(seq 1 "$N"); do
    port=$((BASE_PORT + 10 * (i - 1)))
    node_dir="$DIR/node$i"
    mkdir -p "$node_dir"
    if [[ "$STORAGE" == device ]]; then
        engine="    storage-engine device {
        file $node_dir/test.dat
        filesize 1G
    }"
    else
        engine="    storage-engine memory {
        data-size 1G
    }"
    fi
    cat > "$node_dir/bolide.conf" <<EOF
service {
    cluster-name local
    node-id $(printf 'B%03X' "$i")
}
network {
    service {
        address 127.0.0.1
        port $port
    }
    heartbeat {
        mode mesh
        address 127.0.0.1
        port $((port + 2))
        mesh-seed-address-port 127.0.0.1 $seed_port
        interval 150
        timeout 10
    }
    fabric {
        address 127.0.0.1
        port $((port + 1))
    }
    http {
        address 127.0.0.1
        port $((HTTP_BASE_PORT + i - 1))
    }
}
namespace test {
    replication-factor $RF
$engine
}
EOF
    "$BOLIDED" --config "$node_dir/bolide.conf" > "$node_dir/bolided.log" 2>&1 &
    pids+=("$!")
    echo "node $i: pid $!, service 127.0.0.1:$port, console http://127.0.0.1:$((HTTP_BASE_PORT + i - 1))/, log $node_dir/bolided.log"
done

# Wait until every node's log says the full cluster formed.
deadline=$((SECONDS + 60))
while (( SECONDS < deadline )); do
    formed=0
    for i in $(seq 1 "$N"); do
        if grep -q "CLUSTER SIZE = $N " "$DIR/node$i/bolided.log" 2>/dev/null; then
            formed=$((formed + 1))
        fi
    done
    if (( formed == N )); then
        break
    fi
    for pid in "${pids[@]}"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "a node exited; see the logs in $DIR" >&2
            stop_all
            exit 1
        fi
    done
    sleep 0.2
done
if (( formed != N )); then
    echo "the cluster did not form within 60 s; see the logs in $DIR" >&2
    stop_all
    exit 1
fi
echo
echo "CLUSTER SIZE = $N. Seed any client with 127.0.0.1:$BASE_PORT, e.g."
echo "  asinfo -h 127.0.0.1 -p $BASE_PORT -v statistics"
echo "  benchmark -h 127.0.0.1 -p $BASE_PORT -n test -k 100000 -w RU,50"
echo "  bolide -p $BASE_PORT info"
echo "The console: http://127.0.0.1:$HTTP_BASE_PORT/ (every node's; Prometheus scrapes /metrics on each)."
echo "Ctrl-C stops every node."
wait
