#!/usr/bin/env bash
# Redis's own Tcl test suite (Redis 7.0.15, from Debian's bookworm source
# package) in external-server mode against a Bolide node, or against
# Debian's redis-server for the count beside ours.
#
#   tests/redis-suite/run.sh                      # every unit, against Bolide
#   SERVER=redis tests/redis-suite/run.sh         # the same against redis-server
#   UNITS="unit/type/incr unit/expire" tests/redis-suite/run.sh
#   QUICK=1 tests/redis-suite/run.sh              # the fast subset (the test command's)
#
# The suite runs unit by unit (`./runtest --single UNIT`), each as
#   ./runtest --host 127.0.0.1 --port P --singledb --durable
#             --tags "-needs:repl -needs:debug -needs:pfdebug
#                     -needs:config-maxmemory -needs:save"
#             --skipfile <skip.txt without its reasons>   (Bolide only)
# so an error that stops one unit stops only that unit. The tags leave out
# what no external server is asked for here: replication (SYNC), DEBUG and
# PFDEBUG, CONFIG SET maxmemory and SAVE. Tests tagged external:skip are
# left out by the suite itself. skip.txt lists the tests Bolide skips, each
# with its reason; Redis runs without it. The node's namespace takes
# records up to 64 MiB (`max-record-size 64M`): the suite stores values of
# several megabytes.
#
# Counts every `[ok]` and `[err]` line (an `[exception]` that stops a unit
# counts once as a failure) and prints, per unit and in total,
# "N passed, N failed". Exits non-zero when a test fails, or, with
# MIN_PASSED=N, when fewer than N pass. Logs go to LOG_DIR
# (default target/redis-suite/logs-<server>).
#
# The source comes with `apt-get source redis` (a deb-src line for bookworm
# is added under /etc/apt/sources.list.d when missing and run as root) into
# SUITE_DIR (default target/redis-suite); none of it is committed.
#
# Knobs (env): SERVER (bolide|redis), UNITS, QUICK, SKIP_BUILD=1 with
# BOLIDED_BIN, REDIS_SERVER_BIN, SUITE_DIR, LOG_DIR, MIN_PASSED,
# UNIT_TIMEOUT (seconds one unit may take, default 900).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

SERVER=${SERVER:-bolide}
SUITE_DIR=${SUITE_DIR:-$root/target/redis-suite}
LOG_DIR=${LOG_DIR:-$SUITE_DIR/logs-$SERVER}
UNIT_TIMEOUT=${UNIT_TIMEOUT:-900}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}
VERSION=7.0.15
TAGS="-needs:repl -needs:debug -needs:pfdebug -needs:config-maxmemory -needs:save"

die() { echo "redis-suite: $*" >&2; exit 2; }

# The fast subset the test command runs (a few minutes in all).
QUICK_UNITS="unit/type/incr unit/type/string unit/expire unit/type/hash unit/protocol unit/scan unit/bitfield"


# ---- the suite's source ----
src=$SUITE_DIR/redis-$VERSION
if [ ! -x "$src/runtest" ]; then
    command -v tclsh >/dev/null || {
        [ "$(id -u)" = 0 ] || die "tclsh is required: apt-get install tcl"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcl >/dev/null
    }
    mkdir -p "$SUITE_DIR/download"
    if ! (cd "$SUITE_DIR/download" && apt-get source --download-only redis >/dev/null 2>&1); then
        [ "$(id -u)" = 0 ] || die "apt-get source redis failed; add a deb-src line for bookworm"
        cat > /etc/apt/sources.list.d/bolide-redis-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        apt-get update -qq
        (cd "$SUITE_DIR/download" && apt-get source --download-only redis >/dev/null) ||
            die "apt-get source redis failed"
    fi
    tar -xzf "$SUITE_DIR/download/redis_$VERSION.orig.tar.gz" -C "$SUITE_DIR"
    [ -x "$src/runtest" ] || die "no runtest in $src"
fi
command -v tclsh >/dev/null || die "tclsh is required: apt-get install tcl"
# Some tests run src/redis-cli and src/redis-benchmark: Debian's 7.0.15
# tools (redis-tools) stand in for the ones a build would leave there.
for tool in redis-cli redis-benchmark; do
    if [ ! -e "$src/src/$tool" ] && command -v "$tool" >/dev/null; then
        ln -s "$(command -v "$tool")" "$src/src/$tool"
    fi
done

if [ -n "${UNITS:-}" ]; then
    units=$UNITS
elif [ "${QUICK:-0}" = 1 ]; then
    units=$QUICK_UNITS
else
    # Every unit test_helper.tcl lists; those tagged external:skip as a
    # whole end at once.
    units=$(sed -n '/^set ::all_tests {/,/^}/p' "$src/tests/test_helper.tcl" | sed '1d;$d')
fi

# ---- the skip list (Bolide only): every entry must say why ----
skipfile=$SUITE_DIR/skip-$SERVER.txt
: > "$skipfile"
if [ "$SERVER" = bolide ]; then
    python3 - "$here/skip.txt" "$skipfile" <<'PY'
import sys
entries = 0
with open(sys.argv[1], encoding="utf-8") as source, open(sys.argv[2], "w", encoding="utf-8") as out:
    for number, line in enumerate(source, 1):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, reason = line.partition(" ## ")
        if not sep or not reason.strip() or not name.strip():
            sys.exit(f"skip.txt line {number}: an entry is 'test name ## reason': {line!r}")
        out.write(name.strip() + "\n")
        entries += 1
print(f"skip.txt: {entries} tests skipped, each with its reason", file=sys.stderr)
PY
fi

# ---- the server ----
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 1 400); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    die "nothing listens on port $1"
}
mkdir -p "$LOG_DIR"
LOG_DIR=$(cd "$LOG_DIR" && pwd)
pid=""
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi; }
trap stop EXIT

port=$(free_port)
case $SERVER in
bolide)
    if [ "${SKIP_BUILD:-0}" != 1 ] && [ -z "${BOLIDED_BIN:-}" ]; then
        cargo build --release -q -p bolide-server
    fi
    BOLIDED_BIN=${BOLIDED_BIN:-$root/target/release/bolided}
    [ -x "$BOLIDED_BIN" ] || die "bolided not found at $BOLIDED_BIN"
    service_port=$(free_port)
    cat > "$LOG_DIR/bolide.conf" <<CONF
service {
    cluster-name redis-suite
}
network {
    service {
        address 127.0.0.1
        port $service_port
    }
    redis {
        port $port
    }
}
namespace test {
    replication-factor 1
    max-record-size 64M
    storage-engine memory {
        data-size 4G
    }
}
CONF
    "$BOLIDED_BIN" --config "$LOG_DIR/bolide.conf" > "$LOG_DIR/server.log" 2>&1 &
    pid=$!
    ;;
redis)
    [ -x "$REDIS_SERVER_BIN" ] || die "redis-server not found at $REDIS_SERVER_BIN"
    "$REDIS_SERVER_BIN" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --logfile "$LOG_DIR/server.log" &
    pid=$!
    ;;
*) die "SERVER is bolide or redis" ;;
esac
wait_port "$port"

# ---- the units ----
# The suite's own test server listens just below --baseport: a port of
# this run's own, so two runs can share the machine. Its
# find_available_port also binds port + 10000, so the base stays at or
# under 55000 (above it every port of the range fails).
baseport=$(( $(free_port) | 1 ))
while [ "$baseport" -lt 1100 ] || [ "$baseport" -gt 55000 ]; do baseport=$(( $(free_port) | 1 )); done
total_ok=0
total_err=0
summary=$LOG_DIR/summary.txt
: > "$summary"
for unit in $units; do
    [ -f "$src/tests/$unit.tcl" ] || { echo "$unit: not in Redis $VERSION's suite" >> "$summary"; continue; }
    log=$LOG_DIR/$(echo "$unit" | tr / _).log
    rc=0
    skip_args=()
    [ -s "$skipfile" ] && skip_args=(--skipfile "$skipfile")
    (cd "$src" && TERM=dumb timeout -k 10 "$UNIT_TIMEOUT" ./runtest --host 127.0.0.1 --port "$port" \
        --baseport "$baseport" --singledb --durable --timeout 600 --tags "$TAGS" "${skip_args[@]}" \
        --single "$unit" > "$log" 2>&1) || rc=$?
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "$unit: the server died (see $LOG_DIR/server.log)" | tee -a "$summary"
        die "the server died during $unit"
    fi
    plain=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
    ok=$(grep -c '^\[ok\]:' <<< "$plain" || true)
    err=$(grep -c '^\[err\]:' <<< "$plain" || true)
    exc=$(grep -c '^\[exception\]:' <<< "$plain" || true)
    timed=$(grep -c '^\[TIMEOUT\]' <<< "$plain" || true)
    killed=0
    [ "$rc" = 124 ] && killed=1
    # A unit that did not get to its summary (the harness could not
    # start, or died) counts as a failure too.
    if [ "$killed" = 0 ] && ! grep -q 'Execution time of different units' <<< "$plain"; then
        killed=1
    fi
    err=$((err + exc + timed + killed))
    total_ok=$((total_ok + ok))
    total_err=$((total_err + err))
    line=$(printf '%-28s %4d passed, %4d failed' "$unit" "$ok" "$err")
    [ "$exc" -gt 0 ] && line="$line (stopped by an exception)"
    [ "$killed" = 1 ] && line="$line (did not finish: see $log)"
    echo "$line" | tee -a "$summary"
done
echo "redis-suite ($SERVER): $total_ok passed, $total_err failed" | tee -a "$summary"
echo "$total_ok passed, $total_err failed"
if [ -n "${MIN_PASSED:-}" ] && [ "$total_ok" -lt "$MIN_PASSED" ]; then
    echo "redis-suite: fewer than $MIN_PASSED passed" >&2
    exit 1
fi
[ "$total_err" = 0 ]
