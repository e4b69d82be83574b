#!/usr/bin/env bash
# Measures what 1,000,000 records with one 100-byte string bin cost bolided:
# the index's own accounting (index_used_bytes / objects), the record data
# (data_used_bytes), the process RSS delta per record and what is left of
# it for the allocator and per-record overhead, loading through the official
# Go benchmark tool. Then, unless NO_REDIS=1, the same number of 100-byte
# string values in a fresh redis-server (`--save '' --appendonly no`,
# loaded through `redis-cli --pipe`), its RSS delta per key, and the ratio
# of the two resident growths.
#
#   bench/index-footprint.sh            # RECORDS=1000000 by default
#   NO_REDIS=1 bench/index-footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${RECORDS:-1000000}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=${PORT:-$(free_port)}
GO_TOOLS_VERSION=${GO_TOOLS_VERSION:-v8.5.0}
gobin=$PWD/.cache/gobin
[ -x "$gobin/benchmark" ] || GOBIN=$gobin go install "github.com/aerospike/aerospike-client-go/v8/tools/benchmark@$GO_TOOLS_VERSION"
[ -x "$gobin/asinfo" ] || GOBIN=$gobin go install "github.com/aerospike/aerospike-client-go/v8/tools/asinfo@$GO_TOOLS_VERSION"
cargo build --release -q -p bolide-server
dir=$(mktemp -d)
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
    storage-engine memory {
        data-size 8G
    }
}
CONF
./target/release/bolided --config "$dir/bolide.conf" 2> "$dir/bolided.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

stat() { "$gobin/asinfo" -h 127.0.0.1 -p "$PORT" -v "$1" 2>/dev/null | tr ';' '\n' | awk -F= -v k="$2" '$1 == k {print $2}' | head -1; }
rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }

rss_before=$(rss)
timeout 900 "$gobin/benchmark" -h 127.0.0.1 -p "$PORT" -n test -k "$RECORDS" -o S:100 -w I -c 32 > "$dir/load.log" 2>&1 || true
sleep 1
rss_after=$(rss)
objects=$(stat namespace/test objects)
index=$(stat namespace/test index_used_bytes)
data=$(stat namespace/test data_used_bytes)
echo "records loaded:            $objects"
echo "index_used_bytes:          $index  ($(echo "$index / $objects" | bc -l | cut -c1-5) bytes/record, own accounting)"
echo "data_used_bytes:           $data  ($(echo "$data / $objects" | bc -l | cut -c1-6) bytes/record)"
echo "process RSS before/after:  $rss_before / $rss_after"
echo "RSS delta per record:      $(echo "($rss_after - $rss_before) / $objects" | bc -l | cut -c1-6) bytes (index + data + allocator)"
echo "  of which index:          $(echo "$index / $objects" | bc -l | cut -c1-6) bytes"
echo "  of which data:           $(echo "$data / $objects" | bc -l | cut -c1-6) bytes"
echo "  allocator and the rest:  $(echo "($rss_after - $rss_before - $index - $data) / $objects" | bc -l | cut -c1-6) bytes"
bolide_delta=$((rss_after - rss_before))
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true

[ "${NO_REDIS:-0}" = 1 ] && exit 0
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no > "$dir/redis.log" 2>&1 &
rpid=$!
trap 'kill $pid $rpid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 1 100); do redis-cli -p "$rport" ping > /dev/null 2>&1 && break; sleep 0.1; done
rrss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$rpid/status"; }
rbefore=$(rrss)
# SET key:<i> <100 bytes>, as RESP, piped in one stream.
python3 - "$RECORDS" > "$dir/load.resp" <<'PY'
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
value = b"v" * 100
for i in range(n):
    key = b"key:%d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(key), key, value))
PY
redis-cli -p "$rport" --pipe < "$dir/load.resp" > "$dir/redis-load.log"
sleep 1
rafter=$(rrss)
keys=$(redis-cli -p "$rport" dbsize)
used=$(redis-cli -p "$rport" info memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r')
echo "redis keys loaded:         $keys"
echo "redis RSS before/after:    $rbefore / $rafter"
echo "redis RSS delta per key:   $(echo "($rafter - $rbefore) / $keys" | bc -l | cut -c1-6) bytes (used_memory $(echo "$used / $keys" | bc -l | cut -c1-6) per key, baseline included)"
echo "bolide / redis resident:   $(echo "$bolide_delta / ($rafter - $rbefore)" | bc -l | cut -c1-5)"
