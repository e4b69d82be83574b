#!/usr/bin/env bash
# Memory per key of Redis strings, Bolide's RESP port against Debian's
# redis-server, one server at a time: KEYS keys of KEY_BYTES bytes
# ("k:" and zero-padded digits) with VALUE_BYTES-byte values, loaded with
# `redis-cli --pipe` (SET), then the server's resident memory (VmRSS)
# before and after, and its growth per key.
#
#   bench/redis-memory.sh                       # 10,000,000 keys, 16 B keys, 100 B values
#   KEYS=1000000 bench/redis-memory.sh          # quick look
#
# Knobs (env): KEYS, KEY_BYTES, VALUE_BYTES, SKIP_BUILD=1 with BOLIDED_BIN,
# REDIS_SERVER_BIN (default /usr/bin/redis-server), REDIS_CLI_BIN,
# RESULTS_DIR. Writes results.md (also printed) into
# bench/results/redis-memory-<stamp>/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. bench/lib.sh

KEYS=${KEYS:-10000000}
KEY_BYTES=${KEY_BYTES:-16}
VALUE_BYTES=${VALUE_BYTES:-100}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}
REDIS_CLI_BIN=${REDIS_CLI_BIN:-$(command -v redis-cli || true)}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${RESULTS_DIR:-bench/results/redis-memory-$stamp}
mkdir -p "$out"
out=$(cd "$out" && pwd)

die() { echo "redis-memory.sh: $*" >&2; exit 1; }
[ -x "$REDIS_SERVER_BIN" ] || die "redis-server not found at $REDIS_SERVER_BIN (apt-get install redis-server)"
[ -n "$REDIS_CLI_BIN" ] || die "redis-cli not found (apt-get install redis-tools)"
(( KEY_BYTES >= 2 + ${#KEYS} )) || die "KEY_BYTES $KEY_BYTES cannot number $KEYS keys"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p bolide-server
fi
BOLIDED_BIN=${BOLIDED_BIN:-$root/target/release/bolided}
[ -x "$BOLIDED_BIN" ] || die "bolided not found at $BOLIDED_BIN"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
trap stop EXIT

start_bolide() {
  local service_port redis_port
  service_port=$(free_port)
  redis_port=$(free_port)
  resp_config "$out/bolide.conf" redis-memory "$service_port" "$redis_port" 16G
  "$BOLIDED_BIN" --config "$out/bolide.conf" > "$out/bolided.log" 2>&1 &
  pid=$!
  wait_port "$redis_port"
  port=$redis_port
}

start_redis() {
  port=$(free_port)
  "$REDIS_SERVER_BIN" --port "$port" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no --logfile "$out/redis.log" &
  pid=$!
  wait_port "$port"
}

# SET commands in RESP, streamed.
commands() {
  python3 - "$KEYS" "$KEY_BYTES" "$VALUE_BYTES" <<'PY'
import sys
keys, key_bytes, value_bytes = map(int, sys.argv[1:])
value = b"v" * value_bytes
head = b"*3\r\n$3\r\nSET\r\n$%d\r\n" % key_bytes
tail = b"\r\n$%d\r\n%s\r\n" % (value_bytes, value)
digits = key_bytes - 2
out = sys.stdout.buffer
batch = []
for i in range(keys):
    batch.append(head + b"k:" + str(i).zfill(digits).encode() + tail)
    if len(batch) == 10000:
        out.write(b"".join(batch))
        batch.clear()
out.write(b"".join(batch))
PY
}

: > "$out/rows"
for server in bolide redis; do
  "start_$server"
  sleep 1
  before=$(rss_kib "$pid")
  started=$(date +%s)
  commands | "$REDIS_CLI_BIN" -h 127.0.0.1 -p "$port" --pipe > "$out/$server-pipe.log" 2>&1 \
    || { cat "$out/$server-pipe.log" >&2; die "$server: redis-cli --pipe failed"; }
  loaded=$(( $(date +%s) - started ))
  grep -q "errors: 0," "$out/$server-pipe.log" || { cat "$out/$server-pipe.log" >&2; die "$server: errors while loading"; }
  count=$("$REDIS_CLI_BIN" -h 127.0.0.1 -p "$port" DBSIZE)
  [ "$count" = "$KEYS" ] || die "$server: DBSIZE $count, expected $KEYS"
  sleep 2
  after=$(rss_kib "$pid")
  echo "$server $before $after $loaded" >> "$out/rows"
  stop
done

python3 - "$out/rows" "$KEYS" "$KEY_BYTES" "$VALUE_BYTES" <<'PY' | tee "$out/results.md"
import sys
rows, keys, key_bytes, value_bytes = sys.argv[1], *map(int, sys.argv[2:])
got = {}
for line in open(rows):
    server, before, after, loaded = line.split()
    got[server] = (int(before), int(after), int(loaded))
print(f"{keys:,} keys of {key_bytes} B, values of {value_bytes} B (SET through redis-cli --pipe)")
print()
print("| server | RSS before (MiB) | RSS after (MiB) | growth per key (B) | load time (s) |")
print("|---|---|---|---|---|")
per = {}
for server, (before, after, loaded) in got.items():
    per[server] = (after - before) * 1024 / keys
    print(f"| {server} | {before / 1024:,.0f} | {after / 1024:,.0f} | {per[server]:,.0f} | {loaded} |")
if "redis" in per and per["redis"]:
    print()
    print(f"Bolide / Redis: {per['bolide'] / per['redis']:.2f}")
PY
