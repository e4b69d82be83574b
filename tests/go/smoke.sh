#!/usr/bin/env bash
# Smoke test with the official Go client's tools (cli, asinfo, benchmark)
# and its library (tests/go/client: batch, scan) against a real bolided.
# Exits non-zero on any failure; always stops the server it started (by
# PID).
#
# Env:
#   BOLIDED_BIN        server binary (default: target/release/bolided)
#   AS_GO_TOOLS_VERSION  aerospike-client-go/v8 tools version (default pinned below)
#   BENCH_SECONDS      length of the RU,80 run (default 5)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

AS_GO_TOOLS_VERSION="${AS_GO_TOOLS_VERSION:-v8.5.0}"
GOBIN_DIR="$ROOT/.cache/gobin"
BOLIDED_BIN="${BOLIDED_BIN:-$ROOT/target/release/bolided}"
BENCH_SECONDS="${BENCH_SECONDS:-5}"

log() { printf '[go-smoke] %s\n' "$*"; }
fail() { printf '[go-smoke] FAIL: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- tools
install_tools() {
    mkdir -p "$GOBIN_DIR"
    local need=0 t
    for t in cli asinfo benchmark; do
        if [[ ! -x "$GOBIN_DIR/$t" ]]; then
            need=1
        elif ! go version -m "$GOBIN_DIR/$t" 2>/dev/null | grep -q "aerospike-client-go/v8[[:space:]]*${AS_GO_TOOLS_VERSION}"; then
            need=1
        fi
    done
    if [[ $need == 1 ]]; then
        log "installing Go tools @${AS_GO_TOOLS_VERSION} into $GOBIN_DIR"
        GOBIN="$GOBIN_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" timeout 900 go install \
            "github.com/aerospike/aerospike-client-go/v8/tools/cli@${AS_GO_TOOLS_VERSION}" \
            "github.com/aerospike/aerospike-client-go/v8/tools/asinfo@${AS_GO_TOOLS_VERSION}" \
            "github.com/aerospike/aerospike-client-go/v8/tools/benchmark@${AS_GO_TOOLS_VERSION}"
    else
        log "Go tools @${AS_GO_TOOLS_VERSION} already in $GOBIN_DIR"
    fi
}
install_tools
CLI="$GOBIN_DIR/cli"
ASINFO="$GOBIN_DIR/asinfo"
BENCH="$GOBIN_DIR/benchmark"

# ---------------------------------------------------------------- server
[[ -x "$BOLIDED_BIN" ]] || fail "bolided not found at $BOLIDED_BIN (cargo build --release -p bolide-server)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/bolide-go-smoke.XXXXXX")"
SERVER_PID=""
cleanup() {
    local rc=$?
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            kill -KILL "$SERVER_PID" 2>/dev/null || true
        fi
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $rc != 0 && -f "$WORK/bolided.log" ]]; then
        echo "---- bolided log (tail) ----" >&2
        tail -n 40 "$WORK/bolided.log" >&2 || true
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# four free loopback ports (service, fabric, heartbeat, info), never 3000-3003
read -r PORT FABRIC_PORT HB_PORT INFO_PORT < <(python3 - <<'PY'
import socket
socks, ports = [], []
while len(ports) < 4 and len(socks) < 40:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
    p = s.getsockname()[1]
    if not 3000 <= p <= 3003:
        ports.append(p)
print(*ports)
for s in socks: s.close()
PY
)

cat > "$WORK/bolide.conf" <<CONF
service {
    cluster-name bolide-go-smoke
}
logging {
    console {
        context any info
    }
}
network {
    service {
        address 127.0.0.1
        port $PORT
    }
    heartbeat {
        mode mesh
        port $HB_PORT
    }
    fabric {
        port $FABRIC_PORT
    }
    info {
        port $INFO_PORT
    }
}
namespace test {
    replication-factor 1
    default-ttl 0
    nsup-period 1
    storage-engine memory {
        data-size 256M
        stop-writes-used-pct 90
        evict-used-pct 80
    }
}
CONF

log "starting $BOLIDED_BIN on 127.0.0.1:$PORT"
"$BOLIDED_BIN" --config "$WORK/bolide.conf" >"$WORK/bolided.log" 2>&1 &
SERVER_PID=$!
ready=0
for _ in $(seq 1 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || fail "bolided exited during startup"
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then ready=1; break; fi
    sleep 0.1
done
[[ $ready == 1 ]] || fail "bolided did not listen on $PORT within 30s"
log "server ready (pid $SERVER_PID)"

# ---------------------------------------------------------------- helpers
OUT=""
run() {  # run <timeout-seconds> cmd... ; output in $OUT, fails on non-zero exit
    local t=$1; shift
    local rc=0
    OUT="$(timeout "$t" "$@" 2>&1)" || rc=$?
    local shown=("$@"); shown[0]="${shown[0]#"$GOBIN_DIR"/}"
    printf '  $'; printf ' %q' "${shown[@]}"; printf '\n'
    printf '%s\n' "$OUT" | sed 's/^/    /' | head -n 30
    return $rc
}
expect_contains() {  # expect_contains <what> <needle>
    grep -qF -- "$2" <<<"$OUT" || fail "$1: expected output to contain '$2'"
}
expect_not_contains() {
    if grep -qiF -- "$2" <<<"$OUT"; then fail "$1: output must not contain '$2'"; fi
}
H=(-h 127.0.0.1 -p "$PORT")

# ---------------------------------------------------------------- cli day one
log "cli day-one sequence"
run 30 "$CLI" "${H[@]}" -o set -n test -s test_set -k first_key -b bin_x -v "first value" \
    || fail "cli set bin_x"
expect_not_contains "cli set bin_x" "error"
run 30 "$CLI" "${H[@]}" -o set -n test -s test_set -k first_key -b bin_y -v "second value" \
    || fail "cli set bin_y"
expect_not_contains "cli set bin_y" "error"
# the cli prints only the value of the bin named by -b, so read each bin
run 30 "$CLI" "${H[@]}" -o get -n test -s test_set -k first_key -b bin_x || fail "cli get bin_x"
[[ "$OUT" == "first value" ]] || fail "cli get bin_x printed '$OUT', expected 'first value'"
run 30 "$CLI" "${H[@]}" -o get -n test -s test_set -k first_key -b bin_y || fail "cli get bin_y"
[[ "$OUT" == "second value" ]] || fail "cli get bin_y printed '$OUT', expected 'second value'"
run 30 "$CLI" "${H[@]}" -o delete -n test -s test_set -k first_key || fail "cli delete"
[[ "$OUT" == "key deleted successfully." ]] || fail "cli delete printed '$OUT'"
# a get of the deleted key: the Go client returns KEY_NOT_FOUND_ERROR, which
# the cli prints via log.Fatal (exit 1); older versions print "Record not found."
rc=0
run 30 "$CLI" "${H[@]}" -o get -n test -s test_set -k first_key -b bin_x || rc=$?
if [[ "$OUT" == "Record not found." ]]; then
    :
elif [[ $rc != 0 ]] && grep -qE "KEY_NOT_FOUND|not found" <<<"$OUT"; then
    :
else
    fail "cli get after delete: expected 'no record' (KEY_NOT_FOUND), got rc=$rc '$OUT'"
fi
expect_not_contains "cli get after delete" "first value"
run 30 "$CLI" "${H[@]}" -o delete -n test -s test_set -k first_key || fail "cli delete missing key"
[[ "$OUT" == "key didn't exist." ]] || fail "cli delete of missing key printed '$OUT'"

# ---------------------------------------------------------------- asinfo
log "asinfo"
info_value() {  # value printed by asinfo for one command (line after the header)
    awk 'NR==2 { sub(/^ +/, ""); print; exit }' <<<"$OUT"
}
run 30 "$ASINFO" "${H[@]}" -v build || fail "asinfo build"
v="$(info_value)"
[[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "asinfo build: '$v' is not N.N.N.N"

run 30 "$ASINFO" "${H[@]}" -v namespaces || fail "asinfo namespaces"
v="$(info_value)"
[[ ";$v;" == *";test;"* ]] || fail "asinfo namespaces: '$v' lacks test"

run 30 "$ASINFO" "${H[@]}" -v statistics || fail "asinfo statistics"
v="$(info_value)"
for k in uptime objects client_connections; do
    [[ ";$v" =~ \;$k=[0-9]+(\;|$) ]] || fail "asinfo statistics: no numeric $k in '$v'"
done

run 30 "$ASINFO" "${H[@]}" -v namespace/test || fail "asinfo namespace/test"
v="$(info_value)"
for k in objects memory_used_bytes client_write_success client_delete_success; do
    [[ ";$v" =~ \;$k=[0-9]+(\;|$) ]] || fail "asinfo namespace/test: no numeric $k"
done
[[ ";$v" =~ \;objects=0(\;|$) ]] || fail "asinfo namespace/test: objects should be 0 after the cli delete"
[[ ";$v" =~ \;client_write_success=2(\;|$) ]] || fail "asinfo namespace/test: client_write_success should be 2"
[[ ";$v" =~ \;client_delete_success=1(\;|$) ]] || fail "asinfo namespace/test: client_delete_success should be 1"

run 30 "$CLI" "${H[@]}" -o set -n test -s test_set -k k2 -b b -v v >/dev/null || fail "cli set k2"
run 30 "$ASINFO" "${H[@]}" -v sets || fail "asinfo sets"
expect_contains "asinfo sets" "ns=test:set=test_set:objects=1:"

run 30 "$ASINFO" "${H[@]}" -v no-such-info-command || true
grep -qi "error" <<<"$OUT" || fail "asinfo unknown command: expected an ERROR answer"

# ---------------------------------------------------------------- benchmark
check_bench() {  # check_bench <what> <file> <mode: I|RU>
    local what=$1 file=$2 mode=$3
    grep -Ei "panic|fatal|ResultCode|error:" "$file" | grep -v "errors=" | head -n 5 >"$WORK/bench.err" || true
    [[ ! -s "$WORK/bench.err" ]] || { cat "$WORK/bench.err" >&2; fail "$what: error lines in output"; }
    local lines
    if [[ $mode == I ]]; then
        lines="$(grep -E 'write\(tps=[0-9]+ timeouts=[0-9]+ errors=[0-9]+ totalCount=[0-9]+\)' "$file" || true)"
    else
        lines="$(grep -E 'total\(tps=[0-9]+ timeouts=[0-9]+ errors=[0-9]+, count=[0-9]+\)' "$file" || true)"
    fi
    [[ -n "$lines" ]] || { tail -n 20 "$file" >&2; fail "$what: no throughput report lines"; }
    if grep -qE 'timeouts=[1-9][0-9]*|errors=[1-9][0-9]*' <<<"$lines"; then
        grep -E 'timeouts=[1-9]|errors=[1-9]' <<<"$lines" | head -n 5 >&2
        fail "$what: timeouts or errors reported"
    fi
    local maxtps
    if [[ $mode == I ]]; then
        maxtps="$(sed -nE 's/.*write\(tps=([0-9]+).*/\1/p' <<<"$lines" | sort -n | tail -n 1)"
    else
        maxtps="$(sed -nE 's/.*total\(tps=([0-9]+).*/\1/p' <<<"$lines" | sort -n | tail -n 1)"
    fi
    [[ -n "$maxtps" && "$maxtps" -gt 0 ]] || fail "$what: TPS never above 0"
    log "$what: peak TPS $maxtps, $(wc -l <<<"$lines") report lines, no errors/timeouts"
}

log "benchmark: load 20000 keys (-w I)"
rc=0
timeout 120 "$BENCH" "${H[@]}" -n test -s bench -k 20000 -o S:100 -w I -c 16 -warmUp 16 >"$WORK/bench_i.log" 2>&1 || rc=$?
[[ $rc == 0 ]] || { tail -n 20 "$WORK/bench_i.log" >&2; fail "benchmark -w I exited with $rc"; }
check_bench "benchmark -w I" "$WORK/bench_i.log" I
grep -qE 'totalCount=20000\)' "$WORK/bench_i.log" || fail "benchmark -w I did not report totalCount=20000"

run 30 "$ASINFO" "${H[@]}" -v sets || fail "asinfo sets after load"
expect_contains "asinfo sets after load" "ns=test:set=bench:objects=20000:"

log "benchmark: ${BENCH_SECONDS}s of -w RU,80 -L 7,1"
rc=0
timeout -s INT "$BENCH_SECONDS" "$BENCH" "${H[@]}" -n test -s bench -k 20000 -o S:100 -w RU,80 -c 16 -warmUp 16 -L 7,1 \
    >"$WORK/bench_ru.log" 2>&1 || rc=$?
# the RU workload runs until interrupted: timeout's 124 (or 130 via SIGINT) is expected
[[ $rc == 0 || $rc == 124 || $rc == 130 ]] || { tail -n 20 "$WORK/bench_ru.log" >&2; fail "benchmark -w RU,80 exited with $rc"; }
check_bench "benchmark -w RU,80" "$WORK/bench_ru.log" RU
grep -qE 'READ[[:space:]]' "$WORK/bench_ru.log" || fail "benchmark -L: no latency rows"

log "official Go client: batch get/exists/operate, scan, partition queries (tests/go/client)"
rc=0
(cd "$ROOT/tests/go/client" && BOLIDE_PORT="$PORT" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
    timeout 600 go test -count=1 -skip '^(TestTLS|TestSecurity|TestPKI)' ./...) || rc=$?
# (TestTLS* and TestPKI* need a TLS port and a PKI: tests/python/test_tls.py and
# test_security_pki.py run them.)
[[ $rc == 0 ]] || fail "go test in tests/go/client exited with $rc"

kill -0 "$SERVER_PID" 2>/dev/null || fail "bolided died during the smoke test"
log "graceful shutdown"
kill -TERM "$SERVER_PID"
rc=0
for _ in $(seq 1 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$SERVER_PID" 2>/dev/null; then fail "bolided did not exit within 15s of SIGTERM"; fi
wait "$SERVER_PID" || rc=$?
SERVER_PID=""
[[ $rc == 0 ]] || fail "bolided exited with $rc after SIGTERM"
log "OK"
