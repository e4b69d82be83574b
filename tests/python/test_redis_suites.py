"""The fast subsets of Redis's own test suites against a Bolide node: Redis
7.0.15's Tcl suite (tests/redis-suite/run.sh, QUICK=1: a few units in
external-server mode) and redis-py 6.4.0's own tests
(tests/redis-suite/redis-py.sh, QUICK=1: two files, RESP2 and RESP3).

Each script fetches its suite (Debian's source package, PyPI's sdist),
starts its own node from BOLIDED_BIN, counts passes and failures, and
exits non-zero on any failure or when fewer than MIN_PASSED pass. The
whole suites run from the same scripts without QUICK (docs/redis.md)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "tests" / "redis-suite"


def run_suite(script: str, min_passed: int, timeout: int) -> tuple[int, int, str]:
    env = dict(os.environ, QUICK="1", MIN_PASSED=str(min_passed), SKIP_BUILD="1")
    bolided = os.environ.get("BOLIDED_BIN")
    if bolided:
        env["BOLIDED_BIN"] = bolided
    done = subprocess.run(
        ["bash", str(SUITES / script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    totals = re.findall(r"^(\d+) passed, (\d+) failed$", done.stdout, re.MULTILINE)
    assert totals, f"{script} printed no totals (exit {done.returncode}):\n{output[-4000:]}"
    passed, failed = (int(n) for n in totals[-1])
    assert done.returncode == 0, f"{script} exit {done.returncode}:\n{output[-4000:]}"
    return passed, failed, output


@pytest.mark.time_limit(600)
def test_redis_tcl_suite_quick_units_pass():
    # unit/type/incr, unit/type/string, unit/expire, unit/type/hash,
    # unit/protocol, unit/scan and unit/bitfield: Redis 7.0.15 passes
    # 23 + 75 + 58 + 72 + 19 + 17 + 16 of them; skip.txt leaves out 4.
    passed, failed, output = run_suite("run.sh", min_passed=250, timeout=590)
    assert failed == 0, output[-4000:]
    assert passed >= 250


@pytest.mark.time_limit(600)
def test_redis_py_quick_files_pass_in_both_protocols():
    # tests/test_pipeline.py and test_encoding.py in RESP2 and RESP3: 29 +
    # 11 tests each, of which redis-py-skip.txt leaves out 2 (MONITOR).
    passed, failed, output = run_suite("redis-py.sh", min_passed=36, timeout=590)
    assert failed == 0, output[-4000:]
    assert passed >= 72
