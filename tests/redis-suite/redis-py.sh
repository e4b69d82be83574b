#!/usr/bin/env bash
# redis-py 6.4.0's own tests (from its PyPI sdist) against a Bolide node,
# or against Debian's redis-server for the count beside ours, in RESP2
# and RESP3.
#
#   tests/redis-suite/redis-py.sh                    # the core files, both protocols
#   SERVER=redis tests/redis-suite/redis-py.sh       # the same against redis-server
#   PROTOCOLS=3 FILES=tests/test_pipeline.py tests/redis-suite/redis-py.sh
#   QUICK=1 tests/redis-suite/redis-py.sh            # the fast subset (the test command's)
#
# The core tests are the standalone (not cluster, module or TLS) tests of
# the files in CORE_FILES below, run as
#   pytest CORE_FILES -m "not onlycluster and not redismod and not ssl"
#          --redis-url redis://127.0.0.1:P/0 --protocol 2|3
#          --redis-mod-url redis://127.0.0.1:P  (the same server: the suite
#            asks it for modules instead of waiting on localhost:6479)
#          --deselect <each entry of redis-py-skip.txt>   (Bolide only)
# redis-py-skip.txt lists the tests Bolide skips, each with its reason;
# Redis runs without it. Tests the suite itself skips (version gates,
# missing modules) count as skipped, neither passed nor failed.
#
# Prints "N passed, N failed" per protocol and in total. Exits non-zero
# when a test fails, or, with MIN_PASSED=N, when fewer than N pass in a
# protocol.
#
# Knobs (env): SERVER (bolide|redis), PROTOCOLS ("2 3"), FILES, QUICK,
# SKIP_BUILD=1 with BOLIDED_BIN, REDIS_SERVER_BIN, SUITE_DIR, LOG_DIR,
# MIN_PASSED, PYTHON (python3, for the suite's own venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

SERVER=${SERVER:-bolide}
PROTOCOLS=${PROTOCOLS:-"2 3"}
SUITE_DIR=${SUITE_DIR:-$root/target/redis-suite}
LOG_DIR=${LOG_DIR:-$SUITE_DIR/redis-py-logs-$SERVER}
REDIS_SERVER_BIN=${REDIS_SERVER_BIN:-/usr/bin/redis-server}
PYTHON=${PYTHON:-python3}
VERSION=6.4.0
CORE_FILES="tests/test_commands.py tests/test_pipeline.py tests/test_pubsub.py
tests/test_scripting.py tests/test_function.py tests/test_lock.py tests/test_encoding.py
tests/test_monitor.py"
QUICK_FILES="tests/test_pipeline.py tests/test_encoding.py"
MARKERS="not onlycluster and not redismod and not ssl"

die() { echo "redis-py-suite: $*" >&2; exit 2; }

if [ -n "${FILES:-}" ]; then
    files=$FILES
elif [ "${QUICK:-0}" = 1 ]; then
    files=$QUICK_FILES
else
    files=$CORE_FILES
fi

# ---- the suite's source and its own venv ----
src=$SUITE_DIR/redis-py-$VERSION
venv=$SUITE_DIR/redis-py-venv
if [ ! -f "$src/tests/conftest.py" ]; then
    mkdir -p "$SUITE_DIR/download"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "redis==$VERSION" \
        -d "$SUITE_DIR/download" || die "pip download redis==$VERSION failed"
    rm -rf "$SUITE_DIR/redis-$VERSION" "$src"
    tar -xzf "$SUITE_DIR/download/redis-$VERSION.tar.gz" -C "$SUITE_DIR"
    mv "$SUITE_DIR/redis-$VERSION" "$src"
fi
if ! "$venv/bin/python" -c 'import pytest, pytest_timeout, pytest_asyncio, packaging, coverage' 2>/dev/null; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "pytest==8.*" "pytest-timeout==2.*" \
        "pytest-asyncio==0.*" "packaging>=20.4" mock coverage
fi

# ---- the skip list (Bolide only): every entry must say why ----
deselect=()
if [ "$SERVER" = bolide ]; then
    while IFS= read -r entry; do
        deselect+=(--deselect "$entry")
    done < <(python3 - "$here/redis-py-skip.txt" <<'PY'
import sys
with open(sys.argv[1], encoding="utf-8") as source:
    for number, line in enumerate(source, 1):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, reason = line.partition(" ## ")
        if not sep or not reason.strip() or "::" not in name:
            sys.exit(f"redis-py-skip.txt line {number}: an entry is 'node id ## reason': {line!r}")
        print(name.strip())
PY
)
    echo "redis-py-skip.txt: $(( ${#deselect[@]} / 2 )) tests skipped, each with its reason" >&2
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
    cluster-name redis-py-suite
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
    storage-engine memory {
        data-size 1G
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

# ---- the runs ----
total_passed=0
total_failed=0
short=0
for protocol in $PROTOCOLS; do
    log=$LOG_DIR/resp$protocol.log
    # shellcheck disable=SC2086
    (cd "$src" && timeout -k 10 1800 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        -o addopts="" --timeout 60 -m "$MARKERS" \
        --redis-url "redis://127.0.0.1:$port/0" --redis-mod-url "redis://127.0.0.1:$port" \
        --protocol "$protocol" \
        "${deselect[@]}" -rfE $files > "$log" 2>&1) || true
    if ! kill -0 "$pid" 2>/dev/null; then
        die "the server died during the RESP$protocol run (see $LOG_DIR/server.log)"
    fi
    last=$(grep -E '^=*.*(passed|failed|error).* in [0-9.]+s' "$log" | tail -1 || true)
    passed=$(grep -oE '[0-9]+ passed' <<< "$last" | grep -oE '[0-9]+' || echo 0)
    failed=$(grep -oE '[0-9]+ failed' <<< "$last" | grep -oE '[0-9]+' || echo 0)
    errors=$(grep -oE '[0-9]+ errors?' <<< "$last" | grep -oE '[0-9]+' || echo 0)
    skipped=$(grep -oE '[0-9]+ skipped' <<< "$last" | grep -oE '[0-9]+' || echo 0)
    [ -n "$last" ] || failed=1
    failed=$((failed + errors))
    echo "redis-py $VERSION ($SERVER, RESP$protocol): $passed passed, $failed failed, $skipped skipped"
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    if [ -n "${MIN_PASSED:-}" ] && [ "$passed" -lt "$MIN_PASSED" ]; then
        echo "redis-py-suite: RESP$protocol: fewer than $MIN_PASSED passed" >&2
        short=1
    fi
done
echo "$total_passed passed, $total_failed failed"
[ "$short" = 0 ] && [ "$total_failed" = 0 ]
