#!/usr/bin/env bash
# The single test command for Bolide:  ./scripts/test.sh
#
# Needs Rust (cargo with rustfmt + clippy), Go, Python 3.11, Node.js (npm), Java 17
# and Maven on PATH.
# Sections: cargo fmt --check, clippy -D warnings, release build, cargo tests,
# Go tools smoke test, the Go client's own test suite (on an open node, a secured node and a
# strong-consistency namespace), the Go and Java
# clients against a 3-node cluster, Python client suite (official `aerospike` 19.x in
# .venv). The build is fail-fast (everything else needs the binary); the other
# sections all run and the script exits non-zero at the end if any failed.
# The console tests need chromium (apt) and node/npm; they install
# playwright-core into tests/console/node_modules.
#
# Env knobs:
#   SKIP_RUST_CHECKS=1   skip fmt/clippy (quick local iterations)
#   PYTEST_ARGS="..."    extra pytest arguments (e.g. "-k ttl -x")
#   PYTHON=python3.11    interpreter used to create .venv
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

START=$(date +%s)
FAILED=()
section() {
    printf '\n==== %s  (+%ss) ====\n' "$*" "$(( $(date +%s) - START ))"
}
# stage <name> cmd... : run a section, record a failure instead of exiting
stage() {
    local name=$1; shift
    section "$name"
    if "$@"; then
        printf -- '---- %s: OK\n' "$name"
    else
        local rc=$?
        printf -- '---- %s: FAILED (exit %s)\n' "$name" "$rc"
        FAILED+=("$name")
    fi
}

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if [[ "${SKIP_RUST_CHECKS:-0}" != 1 ]]; then
    stage "cargo fmt --check" cargo fmt --all -- --check
    stage "cargo clippy --workspace --all-targets -D warnings" \
        cargo clippy --workspace --all-targets -- -D warnings
fi

section "cargo build --release -p bolide-server -p bolide-bench -p bolide-cli"
cargo build --release -p bolide-server -p bolide-bench -p bolide-cli
# The throwaway PKI of the TLS tests (tests/python/tls_helpers.py).
cargo build --release -p bolide-server --example tls_certs
export BOLIDED_BIN="$ROOT/target/release/bolided"
export BOLIDE_BENCH_BIN="$ROOT/target/release/bolide-bench"
[[ -x "$BOLIDED_BIN" ]] || { echo "missing $BOLIDED_BIN after build" >&2; exit 1; }

section "redis-server + redis-benchmark (bolide-bench smoke and compare tests)"
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
    else
        echo "redis-server is required: apt-get install redis-server" >&2
    fi
fi
redis-server --version

# ip (iproute2) and nft (nftables) split the cluster in a network namespace
# in tests/python/test_network_split.py.
if { ! command -v ip >/dev/null || ! command -v nft >/dev/null; } && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables >/dev/null
fi

# tmux drives the `bolide sql` prompt in tools/cli/tests/cli.rs.
if ! command -v tmux >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
fi

# The ci-test profile (Cargo.toml): release optimisation without thin LTO
# and debug info. Building the test binaries with them took 12.7 minutes on
# 2026-12-07 (the release dependencies already built), under this profile
# 7.4 minutes from nothing; the tests themselves run about 1 minute longer.
# The servers the client suites below start are the release build above.
stage "cargo test --workspace --profile ci-test" cargo test --workspace --profile ci-test

# The web console in a real browser: Debian's chromium (and its driver)
# from apt, playwright-core from npm (tests/console/package-lock.json).
section "chromium + playwright-core (tests/console)"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "chromium is required: apt-get install chromium chromium-driver" >&2
    fi
fi
chromium --version 2>/dev/null || true
stage "console in a browser (tests/console)" bash -c \
    'cd tests/console && npm ci --no-audit --no-fund --loglevel=error && npm test'

section "python venv (.venv: aerospike 19.x + pytest + redis-py 6.4.0)"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
if ! "$VENV/bin/python" - 2>/dev/null <<'PY'
import importlib.metadata as m, sys
import aerospike, pytest, redis  # noqa: F401  (must import, not just be listed)
sys.exit(0 if m.version("aerospike").startswith("19.") and m.version("redis") == "6.4.0" else 1)
PY
then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "aerospike==19.*" pytest "redis==6.4.0"
else
    echo "reusing $VENV"
fi
"$VENV/bin/python" -c 'import importlib.metadata as m; print("aerospike", m.version("aerospike"), "| pytest", m.version("pytest"))'

# test_sessions_expire sleeps out the shortest session-ttl Aerospike allows
# (120 s): it runs beside the Go stages, which it barely loads, instead of
# in the pytest stage (which deselects it).
SESSION_TEST=test_security.py::test_sessions_expire  # rootdir tests/python
SESSION_LOG="$ROOT/target/test-sessions-expire.log"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "tests/python/$SESSION_TEST" >"$SESSION_LOG" 2>&1 &
SESSION_PID=$!
session_test() {
    local rc=0
    wait "$SESSION_PID" || rc=$?
    cat "$SESSION_LOG"
    return "$rc"
}

# Before the Python suite: it installs the Go tools, whose benchmark drives
# the scan-under-load test (tests/python/test_scan_under_load.py).
stage "Go tools smoke test (tests/go/smoke.sh)" ./tests/go/smoke.sh

stage "Go client test suite (tests/go/suite.sh)" ./tests/go/suite.sh

# The same suite against a secured node, logging in as admin/admin: all of
# its security specs, and a subset of data specs through logged-in
# connections (the whole secured run, about 8 minutes:
# GO_SUITE_SECURITY=1 tests/go/suite.sh).
stage "Go client suite on a secured node (security specs and a data subset)" \
    env GO_SUITE_SECURITY=1 \
    GO_SUITE_FOCUS='^Aerospike Client Library Suite (Security tests|Scan operations|Query operations|Truncate operations test|Aerospike Error Tests) ' \
    ./tests/go/suite.sh

# The same suite against a strong-consistency namespace (a one-node
# roster set before the run): its SC-gated specs (multi-record
# transactions; those not built yet are listed in the script) and a data
# subset, under 2 minutes (the whole suite on SC, 4 to 9 minutes:
# GO_SUITE_SC=1 tests/go/suite.sh).
stage "Go client suite on a strong-consistency namespace (SC-gated specs and a data subset)" \
    env GO_SUITE_SC=1 \
    GO_SUITE_FOCUS='^Aerospike Client Library Suite (Aerospike Multi Record Transaction operations|Aerospike Data operations on native types|Aerospike Batch Write operations|Scan operations|Query operations|Truncate operations test) ' \
    ./tests/go/suite.sh

# The Go and Java clients against a 3-node, RF 2 cluster from one seed,
# then with rack awareness against 4 nodes in two racks
# (tests/python/with_cluster.py starts them; the Rust client's counterpart is
# tests/rust-client/tests/multi_node.rs in the cargo tests); the Java
# client over one-way and mutual TLS with PKI login too
# (tests/python/with_tls_nodes.py).
stage "Go client on a 3-node cluster and on two racks (tests/go/cluster.sh)" ./tests/go/cluster.sh

# Maven keeps what it downloads in ~/.m2/repository (once per machine).
if { ! command -v mvn >/dev/null || ! command -v javac >/dev/null; } && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven openjdk-17-jdk-headless >/dev/null
fi
stage "Java client on a 3-node cluster, on two racks and over TLS (tests/java/run.sh)" ./tests/java/run.sh

# shellcheck disable=SC2086
stage "pytest tests/python" "$VENV/bin/python" -m pytest tests/python -q --durations=25 \
    --deselect "$SESSION_TEST" ${PYTEST_ARGS:-}
stage "pytest tests/python/$SESSION_TEST (run beside the Go stages)" session_test

section "summary after $(( $(date +%s) - START ))s"
if (( ${#FAILED[@]} )); then
    printf 'FAILED sections:\n'
    printf '  - %s\n' "${FAILED[@]}"
    exit 1
fi
echo "ALL TESTS PASSED"
