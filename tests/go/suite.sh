#!/usr/bin/env bash
# The official Go client's own test suite (module
# github.com/aerospike/aerospike-client-go/v8, 783 Ginkgo specs) against a
# real bolided, run as its authors run it: `go test` in the module root with
# `-h 127.0.0.1 -p PORT`. The module comes through the Go module proxy into
# the module cache and is copied to .cache/ (the cache is read-only); nothing
# of it is committed.
#
# Against Aerospike CE 8.1.2 the suite passes 729 specs and skips 54 by
# itself (enterprise, strong consistency, security, XDR, transactions). This
# script passes when every spec passes except those the suite skips by
# itself and those in SKIPPED below, each with its reason; it also fails
# when a SKIPPED entry names no spec, so the list cannot go stale.
#
# Env:
#   BOLIDED_BIN            server binary (default: target/release/bolided)
#   AS_GO_CLIENT_VERSION   client module version (default v8.5.0)
#   GO_SUITE_FOCUS         a Ginkgo focus regex, to run part of the suite
#   GO_SUITE_REPORT        where to keep the JSON report (default: a temp dir)
#   GO_SUITE_SECURITY      1: a secured node (`security { enable-quotas true }`,
#                          edition "Bolide Enterprise Edition (access control)"),
#                          the suite logging in as admin/admin (`-U admin -P
#                          admin`, as its authors run it against a secured
#                          Aerospike) after admin is granted every role but
#                          its own (as the reference's §6.4 sets up); the
#                          suite's "Security tests" specs then run and must
#                          all pass (none may skip itself)
#   GO_SUITE_SC            1: namespace test is strong-consistency (RF 1,
#                          strong-consistency-allow-expunge for the suite's
#                          plain deletes), its one-node roster set and in
#                          force before the run (roster-set, recluster:):
#                          the client then sees an SC namespace (a non-zero
#                          regime in `replicas`) and the suite's SC-gated
#                          specs (its multi-record transactions) run: those
#                          not in SC_SKIPPED must pass (none may skip
#                          itself). The whole suite this way took 4 to
#                          9 minutes on a shared 2-core machine (most of
#                          it the HyperLogLog specs)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

VERSION="${AS_GO_CLIENT_VERSION:-v8.5.0}"
MODULE="github.com/aerospike/aerospike-client-go/v8"
BOLIDED_BIN="${BOLIDED_BIN:-$ROOT/target/release/bolided}"
BOLIDE_BIN="${BOLIDE_BIN:-$ROOT/target/release/bolide}"
SECURITY="${GO_SUITE_SECURITY:-0}"
SC="${GO_SUITE_SC:-0}"
SUITE_DIR="$ROOT/.cache/go-client-suite/$VERSION"

log() { printf '[go-suite] %s\n' "$*"; }
fail() { printf '[go-suite] FAIL: %s\n' "$*" >&2; exit 1; }

# Specs that cannot pass yet, one per line: the spec's full text (its
# containers' texts and its own, joined by spaces, as Ginkgo prints it),
# " :: ", the reason. Remove a line when its spec passes.
SKIPPED="$(cat <<'LIST'
Security tests Users Must Query all users :: its AfterEach drops test_user, which this spec never creates (the spec before it dropped it); a node answers 60 (invalid user) to dropping an unknown user, as Aerospike does (the PHP client's testDropUserNonExistentUser expects ERR_INVALID_USER), so this spec fails against Aerospike EE as well; its own body (nine users created, QueryUsers, dropped) passes on Bolide
LIST
)"

# Specs that cannot pass on a secured node whatever the server does (same
# form), skipped only with GO_SUITE_SECURITY=1.
SECURED_SKIPPED="$(cat <<'LIST'
Aerospike Node Tests Node circuit breaker When Circuit Breaker is Used should disable circuit breaker when MaxErrorRate is 0 :: it makes its own client without the suite's -U/-P, so a secured node refuses it (80, not authenticated), as a secured Aerospike would
LIST
)"
if [[ $SECURITY == 1 ]]; then
    SKIPPED="$SKIPPED"$'\n'"$SECURED_SKIPPED"
fi

# The SC-gated specs (the suite's multi-record transactions) that cannot
# pass on an SC namespace yet (same form), skipped only with GO_SUITE_SC=1.
# Their container is ordered: a failure there would skip the rest of it, so
# each is listed. The three that pass (the two empty transactions, "must
# support batch and abort") run and must pass.
SC_SKIPPED="$(cat <<'LIST'
Aerospike Multi Record Transaction operations must write and commit :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must write twice :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must write correctly during conflict :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must be blocked before other transaction is committed :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support write and read :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support write and abort :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support delete :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support delete and abort :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support delete twice :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support touch :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support touch and abort :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support operate write :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support operate write abort :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support UDF :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support UDF and abort :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support batchDelete :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support batchDelete and abort :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must support batch :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations UDF should not read expired record :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must handle different key pointers :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must ensure MRT_VERSION_MISMATCH is always returned regardless of the number of records :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
Aerospike Multi Record Transaction operations must succeed BatchGet with expressions and transaction :: multi-record transactions are not built: a command carrying the transaction id field answers 16 (unsupported feature)
LIST
)"
if [[ $SC == 1 ]]; then
    SKIPPED="$SKIPPED"$'\n'"$SC_SKIPPED"
fi

# ---------------------------------------------------------------- module
if [[ ! -f "$SUITE_DIR/.complete" ]]; then
    log "fetching $MODULE@$VERSION through the Go module proxy"
    dir="$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    [[ -d "$dir" ]] || fail "go mod download gave no directory"
    rm -rf "$SUITE_DIR"
    mkdir -p "$(dirname "$SUITE_DIR")"
    cp -r "$dir" "$SUITE_DIR"
    chmod -R u+w "$SUITE_DIR"
    (cd "$SUITE_DIR" && go mod download)
    touch "$SUITE_DIR/.complete"
fi

# ---------------------------------------------------------------- skip regex
# Each entry becomes an anchored, escaped alternative; Ginkgo matches it
# against "<suite description> <spec text>".
SKIP_REGEX="$(python3 - "$SKIPPED" <<'PY'
import re, sys
specs = [line.split(" :: ", 1)[0].strip() for line in sys.argv[1].splitlines() if line.strip()]
print("|".join("^Aerospike Client Library Suite " + re.escape(s) + "$" for s in specs))
PY
)"

# ---------------------------------------------------------------- server
[[ -x "$BOLIDED_BIN" ]] || fail "bolided not found at $BOLIDED_BIN"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bolide-go-suite.XXXXXX")"
REPORT="${GO_SUITE_REPORT:-$WORK/report.json}"
SERVER_PID=""
cleanup() {
    local rc=$?
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null
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
    cluster-name bolide-go-suite
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
$(if [[ $SC == 1 ]]; then printf '    strong-consistency true\n    strong-consistency-allow-expunge true\n'; fi)
    storage-engine memory {
        data-size 1G
    }
}
CONF
if [[ $SECURITY == 1 ]]; then
    [[ -x "$BOLIDE_BIN" ]] || fail "bolide (the CLI) not found at $BOLIDE_BIN"
    printf 'security {\n    enable-quotas true\n}\n' >>"$WORK/bolide.conf"
fi

"$BOLIDED_BIN" --config "$WORK/bolide.conf" >"$WORK/bolided.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || fail "bolided exited during startup"
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    sleep 0.1
done
log "bolided pid $SERVER_PID on 127.0.0.1:$PORT"
if [[ $SC == 1 ]]; then
    # The one-node roster, staged and put in force, then every partition
    # available.
    python3 - "$PORT" <<'PY' || fail "setting the strong-consistency roster"
import socket, struct, sys, time
port = int(sys.argv[1])
def info(command):
    body = (command + "\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">Q", (2 << 56) | (1 << 48) | len(body)) + body)
        head = b""
        while len(head) < 8:
            head += s.recv(8 - len(head))
        size, answer = struct.unpack(">Q", head)[0] & 0xFFFFFFFFFFFF, b""
        while len(answer) < size:
            answer += s.recv(size - len(answer))
    return answer.decode().split("\t", 1)[-1].strip()
node = info("node")
assert info(f"roster-set:namespace=test;nodes={node}") == "ok"
assert info("recluster:") == "ok"
deadline = time.monotonic() + 30
while "unavailable_partitions=0;" not in info("namespace/test") + ";":
    assert time.monotonic() < deadline, info("roster:namespace=test")
    time.sleep(0.1)
print(f"[go-suite] strong-consistency roster {info('roster:namespace=test')}")
PY
fi
if [[ $SECURITY == 1 ]]; then
    # A fresh secured node's admin holds only user-admin; the data specs
    # need the rest.
    "$BOLIDE_BIN" -h 127.0.0.1 -p "$PORT" -U admin -P admin acl grant-roles admin \
        sys-admin data-admin read-write-udf sindex-admin udf-admin truncate \
        || fail "granting admin its roles"
    log "secured node; the suite logs in as admin"
fi

# ---------------------------------------------------------------- run
args=(-h 127.0.0.1 -p "$PORT" -ginkgo.json-report="$REPORT" -ginkgo.timeout=40m)
[[ $SECURITY == 1 ]] && args+=(-U admin -P admin)
[[ -n "$SKIP_REGEX" ]] && args+=(-ginkgo.skip="$SKIP_REGEX")
[[ -n "${GO_SUITE_FOCUS:-}" ]] && args+=(-ginkgo.focus="$GO_SUITE_FOCUS")
RUN_DIR="$SUITE_DIR"
if [[ $SECURITY == 1 ]]; then
    # v8.5.0's isEnterpriseEdition() asks a node of 8.1 or later for
    # `release` but reads the answer under the key `edition`, which is then
    # always empty: its security specs skip themselves against every 8.1+
    # server, Aerospike's EE included. A copy of the suite gets that one
    # line mended (the value of `release` holds `edition=...`); the specs
    # themselves run unchanged. The cached module stays as fetched.
    RUN_DIR="$WORK/suite"
    cp -r "$SUITE_DIR" "$RUN_DIR"
    chmod -R u+w "$RUN_DIR"
    python3 - "$RUN_DIR/aerospike_suite_test.go" <<'PY' || fail "cannot mend isEnterpriseEdition in the suite copy"
import sys
path = sys.argv[1]
text = open(path).read()
old = 'return strings.Contains(infoMap["edition"], "Enterprise")'
if text.count(old) != 1:
    sys.exit("isEnterpriseEdition's edition check not found")
open(path, "w").write(text.replace(old, 'return strings.Contains(infoMap["edition"]+infoMap["release"], "Enterprise")'))
PY
fi
log "go test in $RUN_DIR ($(grep -c . <<<"$SKIPPED" || true) specs in SKIPPED)"
rc=0
(cd "$RUN_DIR" && GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
    timeout 2700 go test -count=1 -timeout 45m . -args "${args[@]}") >"$WORK/go-test.log" 2>&1 || rc=$?
grep -vE '^\s*$' "$WORK/go-test.log" | tail -n 60
kill -0 "$SERVER_PID" 2>/dev/null || fail "bolided died during the suite"
[[ -s "$REPORT" ]] || fail "go test wrote no report (exit $rc)"

# ---------------------------------------------------------------- verdict
python3 - "$REPORT" "$SKIPPED" "${GO_SUITE_FOCUS:-}" "$SECURITY" "$SC" <<'PY'
import json, sys
report, skipped_text, focus, security = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
sc = sys.argv[5] == "1"
listed = {}
for line in skipped_text.splitlines():
    if line.strip():
        spec, _, reason = line.partition(" :: ")
        listed[spec.strip()] = reason.strip()
specs = [s for suite in json.load(open(report)) for s in suite.get("SpecReports") or []
         if s.get("LeafNodeType") == "It"]
def text(s):
    return " ".join(t for t in (s.get("ContainerHierarchyTexts") or []) + [s.get("LeafNodeText", "")] if t)
counts, failed, ours = {}, [], 0
for s in specs:
    state = s["State"]
    if state == "skipped" and text(s) in listed:
        state = "skipped (listed)"
        ours += 1
    counts[state] = counts.get(state, 0) + 1
    if state not in ("passed", "skipped", "skipped (listed)", "pending"):
        failed.append((state, text(s), (s.get("Failure") or {}).get("Message", "")[:300]))
for state, name, message in failed:
    print(f"  {state.upper()}: {name}\n      {message.strip().splitlines()[0] if message.strip() else ''}")
names = {text(s) for s in specs}
stale = [spec for spec in listed if spec not in names] if not focus else []
for spec in stale:
    print(f"  STALE SKIPPED ENTRY (no such spec): {spec}")
# On a secured node the security specs must run: one that skips itself
# means the suite did not see an Enterprise edition with QueryRoles working.
security_specs = [s for s in specs if text(s).startswith("Security tests ")]
if security:
    for s in security_specs:
        if s["State"] != "passed" and text(s) not in listed:
            failed.append((s["State"], text(s), "a security spec did not pass on a secured node"))
            print(f"  NOT PASSED ON A SECURED NODE ({s['State']}): {text(s)}")
    if not security_specs:
        failed.append(("missing", "Security tests", "no security spec ran"))
        print("  NO SECURITY SPEC RAN")
    print(f"security specs: {sum(s['State'] == 'passed' for s in security_specs)} passed "
          f"of {len(security_specs)}")
# On an SC namespace the SC-gated specs must run: one that skips itself
# means the client did not see the namespace as strong-consistency.
if sc:
    gated = [s for s in specs if text(s).startswith("Aerospike Multi Record Transaction operations ")
             and text(s) not in listed]
    for s in gated:
        if s["State"] != "passed":
            failed.append((s["State"], text(s), "an SC-gated spec did not pass on an SC namespace"))
            print(f"  NOT PASSED ON AN SC NAMESPACE ({s['State']}): {text(s)}")
    if not gated:
        failed.append(("missing", "Multi Record Transaction operations", "no SC-gated spec ran"))
        print("  NO SC-GATED SPEC RAN")
    print(f"SC-gated specs: {sum(s['State'] == 'passed' for s in gated)} passed of {len(gated)} run, "
          f"{sum(text(s).startswith('Aerospike Multi Record Transaction operations ') for s in specs) - len(gated)} "
          f"listed in SC_SKIPPED")
print("go client suite: " + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
print(f"{counts.get('passed', 0)} passed, {len(failed)} failed, "
      f"{counts.get('skipped', 0) + ours} skipped ({ours} listed in tests/go/suite.sh)")
sys.exit(1 if failed or stale else 0)
PY
