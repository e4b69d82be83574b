#!/usr/bin/env bash
# Server CPU time per 100,000 requests of two bolided builds, alternating:
# user+system clock ticks (1/100 s) of the server process while bolide-bench
# sends exactly 100,000 RU,50 requests, at depth 1 and 16. CPU time per
# request moves far less with the machine's load than throughput does.
#
#   bench/ab-server-cpu.sh BASE_BOLIDED NEW_BOLIDED [BOLIDE_BENCH]
set -u
base=${1:?usage: $0 BASE_BOLIDED NEW_BOLIDED [BOLIDE_BENCH]}
new=${2:?usage: $0 BASE_BOLIDED NEW_BOLIDED [BOLIDE_BENCH]}
bench=${3:-target/release/bolide-bench}
PORT=${PORT:-3391}
dir=$(mktemp -d)
cat > $dir/c.conf <<CONF
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
        data-size 1G
    }
}
CONF
cpu() { awk '{ print $14 + $15 }' /proc/$1/stat; }
for round in 1 2 3; do
  for name in base new; do
    bin=$base; [ $name = new ] && bin=$new
    taskset -c 1 $bin --config $dir/c.conf > /dev/null 2>&1 & pid=$!
    for i in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
    taskset -c 0 "$bench" -p $PORT -k 20000 -o S:100 -w I -c 16 --depth 16 > /dev/null
    for depth in 1 16; do
      before=$(cpu $pid)
      taskset -c 0 "$bench" -p $PORT -k 20000 -o S:100 -w RU,50 -c 16 --depth $depth -d 100000ops > /dev/null
      after=$(cpu $pid)
      echo "$name depth=$depth ticks_per_100k=$((after - before))"
    done
    kill $pid; wait $pid 2>/dev/null
  done
done
rm -rf $dir
