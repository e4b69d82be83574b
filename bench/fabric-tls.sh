#!/usr/bin/env bash
# The cost of TLS between nodes on a replicated write: a 2-node cluster,
# replication factor 2, first with plain fabric and heartbeats, then with
# both TLS only (mutual TLS 1.2, ECDSA P-256 certificates from a PKI made
# here by the tls_certs example); clients on the plain service port in
# both. bolide-bench sends exactly 100,000 writes (-w RU,0: every request
# a write, each copied to the other node over the fabric) at depth 1 and
# 16, three rounds. Prints throughput and both nodes' user+system clock
# ticks (1/100 s) per 100,000 writes.
#
#   cargo build --release -p bolide-server -p bolide-bench
#   cargo build --release -p bolide-server --example tls_certs
#   bench/fabric-tls.sh [BOLIDED] [BOLIDE_BENCH]
set -u
bolided=${1:-target/release/bolided}
bench=${2:-target/release/bolide-bench}
certs=${TLS_CERTS_BIN:-target/release/examples/tls_certs}
BASE=${BASE:-3500}
OPS=${OPS:-100000}   # writes per run (a short sanity run: OPS=2000 ROUNDS=1)
ROUNDS=${ROUNDS:-3}
dir=$(mktemp -d)
"$certs" $dir/pki bolide-node || exit 1

# config MODE INDEX: node INDEX (0 or 1) of a cluster whose fabric and
# heartbeats are plain or tls.
config() {
  local mode=$1 i=$2 other=$((1 - $2))
  local port=$((BASE + 10 * i)) fabric=$((BASE + 10 * i + 1)) hb=$((BASE + 10 * i + 2))
  local seed_hb=$((BASE + 10 * other + 2))
  local fabric_lines="port $fabric" hb_lines="port $hb
        mesh-seed-address-port 127.0.0.1 $seed_hb"
  if [ $mode = tls ]; then
    fabric_lines="tls-port $fabric
        tls-name bolide-node"
    hb_lines="tls-port $hb
        tls-name bolide-node
        tls-mesh-seed-address-port 127.0.0.1 $seed_hb"
  fi
  cat <<CONF
service {
    service-threads 1
    cluster-name fabric-tls-bench
    node-id $((i + 1))
}
network {
    tls bolide-node {
        cert-file $dir/pki/node.pem
        key-file $dir/pki/node.key
        ca-file $dir/pki/ca.pem
    }
    service {
        address 127.0.0.1
        port $port
    }
    heartbeat {
        mode mesh
        address 127.0.0.1
        $hb_lines
    }
    fabric {
        address 127.0.0.1
        $fabric_lines
    }
}
namespace test {
    replication-factor 2
    nsup-period 120
    storage-engine memory {
        data-size 1G
    }
}
CONF
}

cpu() { awk '{ print $14 + $15 }' /proc/$1/stat; }
for mode in plain tls; do
  pids=()
  for i in 0 1; do
    config $mode $i > $dir/$mode-$i.conf
    taskset -c 1 "$bolided" --config $dir/$mode-$i.conf > $dir/$mode-$i.log 2>&1 & pids+=($!)
  done
  for _ in $(seq 1 100); do
    size=$(python3 - "$BASE" <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
body = b"statistics\n"
s.sendall(struct.pack(">Q", (2 << 56) | (1 << 48) | len(body)) + body)
head = s.recv(8); n = struct.unpack(">Q", head)[0] & ((1 << 48) - 1)
data = b""
while len(data) < n: data += s.recv(n - len(data))
print(dict(kv.split("=", 1) for kv in data.decode().split("\t", 1)[1].split(";") if "=" in kv).get("cluster_size"))
PY
    ) 2>/dev/null
    [ "$size" = 2 ] && break
    sleep 0.2
  done
  echo "$mode: cluster_size=$size"
  taskset -c 0 "$bench" -p $BASE -k 20000 -o S:100 -w I -c 16 --depth 16 > /dev/null
  for round in $(seq 1 $ROUNDS); do
    for depth in 1 16; do
      before=$(( $(cpu ${pids[0]}) + $(cpu ${pids[1]}) ))
      taskset -c 0 "$bench" -p $BASE -k 20000 -o S:100 -w RU,0 -c 16 \
        --depth $depth -d ${OPS}ops --json $dir/run.json > /dev/null 2>&1
      after=$(( $(cpu ${pids[0]}) + $(cpu ${pids[1]}) ))
      tps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["total"]["tps"]))' $dir/run.json 2>/dev/null || echo "?")
      echo "round=$round fabric=$mode depth=$depth ops_per_s=$tps ticks_per_100k=$(( (after - before) * 100000 / OPS ))"
    done
  done
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null
done
rm -rf $dir
