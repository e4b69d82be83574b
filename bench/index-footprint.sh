#!/usr/bin/env bash
# Measures what 1,000,000 records with one 100-byte string bin cost bolided:
# the index's own accounting (index_used_bytes / objects) and the process RSS
# delta per record, loading through the official Go benchmark tool.
#
#   bench/index-footprint.sh            # RECORDS=1000000 by default
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${RECORDS:-1000000}
PORT=${PORT:-3310}
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
