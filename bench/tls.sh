#!/usr/bin/env bash
# TLS against plain on one bolided: the same node serves a plain port and a
# TLS port (standard TLS, TLS 1.2, ECDSA P-256 certificate from a PKI made
# here by the tls_certs example); bolide-bench sends exactly 100,000
# RU,50 requests to each port in turn, at depth 1 and 16, three rounds.
# Prints the throughput and the server's user+system clock ticks (1/100 s)
# per 100,000 requests (issue 22's goal: TLS under 15% more server CPU per
# request at depth 16).
#
#   cargo build --release -p bolide-server -p bolide-bench
#   cargo build --release -p bolide-server --example tls_certs
#   bench/tls.sh [BOLIDED] [BOLIDE_BENCH]
set -u
bolided=${1:-target/release/bolided}
bench=${2:-target/release/bolide-bench}
certs=${TLS_CERTS_BIN:-target/release/examples/tls_certs}
PORT=${PORT:-3391}
TLS_PORT=${TLS_PORT:-4391}
dir=$(mktemp -d)
"$certs" $dir/pki bolide-node || exit 1
cat > $dir/c.conf <<CONF
service {
    service-threads 1
}
network {
    tls bolide-node {
        cert-file $dir/pki/node.pem
        key-file $dir/pki/node.key
    }
    service {
        address 127.0.0.1
        port $PORT
        tls-port $TLS_PORT
        tls-name bolide-node
        tls-authenticate-client false
    }
}
namespace test {
    nsup-period 120
    storage-engine memory {
        data-size 1G
    }
}
CONF
cpu() { awk '{ print $14 + $15 }' /proc/$1/stat; }
taskset -c 1 "$bolided" --config $dir/c.conf > $dir/bolided.log 2>&1 & pid=$!
for i in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
tls=(--tls-enable --tls-name bolide-node --tls-cafile $dir/pki/ca.pem)
taskset -c 0 "$bench" -p $PORT -k 20000 -o S:100 -w I -c 16 --depth 16 > /dev/null
for round in 1 2 3; do
  for transport in plain tls; do
    port=$PORT; flags=()
    [ $transport = tls ] && { port=$TLS_PORT; flags=("${tls[@]}"); }
    for depth in 1 16; do
      before=$(cpu $pid)
      out=$(taskset -c 0 "$bench" -p $port "${flags[@]}" -k 20000 -o S:100 -w RU,50 -c 16 \
            --depth $depth -d 100000ops --json $dir/run.json 2>&1)
      after=$(cpu $pid)
      tps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["total"]["tps"]))' $dir/run.json 2>/dev/null || echo "?")
      echo "round=$round $transport depth=$depth ops_per_s=$tps ticks_per_100k=$((after - before))"
    done
  done
done
kill $pid; wait $pid 2>/dev/null
rm -rf $dir
