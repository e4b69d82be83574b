#!/usr/bin/env bash
# Crash soak for persistent namespaces: many kill -9 trials under a write
# load, in commit-to-device and default mode (CI runs 3 of each inside
# ./scripts/test.sh).   TRIALS=50 ./scripts/crash-soak.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --release -p bolide-server
[[ -x .venv/bin/python ]] || { echo "run ./scripts/test.sh once to create .venv" >&2; exit 1; }
cd tests/python
BOLIDE_CRASH_TRIALS="${TRIALS:-50}" BOLIDE_TEST_TIMEOUT=3600 \
    ../../.venv/bin/python -m pytest -q test_persistence.py -k kill9
