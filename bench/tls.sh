#!/usr/bin/env bash
# TLS against plain on one bolided: the same node serves a plain port and a
# TLS port (standard TLS, TLS 1.2, ECDSA P-256 certificate from a PKI made
# here by the tls_certs example); bolide-bench sends a fixed number of
# RU,50 requests to each port in turn, at depth 1 and 16, ROUNDS rounds
# alternating the transports. Prints the throughput and the server's CPU
# time per request: the user+system clock ticks of /proc/PID/stat (1/100
# s; they count the threads that ended too), per 100,000 requests and in
# nanoseconds per request. Depth 16 sends REQUESTS_DEPTH16 requests (2
# million: a few hundred ticks) so the ratio resolves to about 1% (issue
# 22's goal: TLS under 15% more server CPU per request at depth 16).
#
#   cargo build --release -p bolide-server -p bolide-bench
#   cargo build --release -p bolide-server --example tls_certs
#   bench/tls.sh [BOLIDED] [BOLIDE_BENCH]
#
# Knobs (env): ROUNDS (5), REQUESTS_DEPTH1 (200000), REQUESTS_DEPTH16
# (2000000), DEPTHS ("1 16"), PORT, TLS_PORT, SERVER_CPU (1), CLIENT_CPU (0).
set -u
bolided=${1:-target/release/bolided}
bench=${2:-target/release/bolide-bench}
certs=${TLS_CERTS_BIN:-target/release/examples/tls_certs}
PORT=${PORT:-3391}
TLS_PORT=${TLS_PORT:-4391}
ROUNDS=${ROUNDS:-5}
DEPTHS=${DEPTHS:-"1 16"}
REQUESTS_DEPTH1=${REQUESTS_DEPTH1:-200000}
REQUESTS_DEPTH16=${REQUESTS_DEPTH16:-2000000}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
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
ticks() { awk '{ print $14 + $15 }' /proc/$1/stat; }
cpu_ns() { echo $(( $(awk '{ print $14 + $15 }' /proc/$1/stat) * (1000000000 / $(getconf CLK_TCK)) )); }
taskset -c $SERVER_CPU "$bolided" --config $dir/c.conf > $dir/bolided.log 2>&1 & pid=$!
for i in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
tls=(--tls-enable --tls-name bolide-node --tls-cafile $dir/pki/ca.pem)
taskset -c $CLIENT_CPU "$bench" -p $PORT -k 20000 -o S:100 -w I -c 16 --depth 16 > /dev/null
for round in $(seq 1 $ROUNDS); do
  for depth in $DEPTHS; do
    requests=$REQUESTS_DEPTH1
    [ $depth = 16 ] && requests=$REQUESTS_DEPTH16
    # Alternate which transport goes first, so drift hits both alike.
    order="plain tls"
    [ $((round % 2)) = 0 ] && order="tls plain"
    for transport in $order; do
      port=$PORT; flags=()
      [ $transport = tls ] && { port=$TLS_PORT; flags=("${tls[@]}"); }
      before_ticks=$(ticks $pid); before_ns=$(cpu_ns $pid)
      taskset -c $CLIENT_CPU "$bench" -p $port "${flags[@]}" -k 20000 -o S:100 -w RU,50 -c 16 \
            --depth $depth -d ${requests}ops --json $dir/run.json > $dir/run.out 2>&1
      after_ns=$(cpu_ns $pid); after_ticks=$(ticks $pid)
      tps=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["total"]["tps"]))' $dir/run.json 2>/dev/null || echo "?")
      ns_per_request=$(( (after_ns - before_ns) / requests ))
      ticks_per_100k=$(python3 -c "print(round(($after_ticks - $before_ticks) * 100000 / $requests, 1))")
      echo "round=$round $transport depth=$depth requests=$requests ops_per_s=$tps server_ns_per_request=$ns_per_request ticks_per_100k=$ticks_per_100k"
    done
  done
done
kill $pid; wait $pid 2>/dev/null
rm -rf $dir
