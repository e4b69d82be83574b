"""Strong consistency checked with Porcupine (tests/go/linearizability):
the checker's own tests (it must reject a stale read after an
acknowledged write, a lost write, a write that failed definitely and was
seen), then one 3-node scenario of sc_linearizability.py: a split, a kill
-9 with restart and a SIGSTOP under the Go client's writes and linearize
reads, in a network namespace of its own (as root).

The long run (5 nodes too, three rounds of every fault):
`.venv/bin/python tests/python/sc_linearizability.py --long`
(docs/strong-consistency.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GO_DIR = HERE.parents[1] / "tests" / "go" / "linearizability"
RECORDER = Path(os.environ.get("LINEARIZABILITY_BIN") or HERE.parents[1] / "target" / "linearizability")


@pytest.mark.time_limit(300)
def test_porcupine_checker_rejects_non_linearizable_histories():
    assert shutil.which("go"), "Go is required (tests/go)"
    result = subprocess.run(["go", "test", "-count=1", "-v", "."], cwd=GO_DIR, capture_output=True,
                            text=True, timeout=280,
                            env={**os.environ, "GOFLAGS": os.environ.get("GOFLAGS", "") + " -buildvcs=false"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for name in ("TestStaleReadAfterAcknowledgedWriteIsRejected", "TestLostWriteIsRejected",
                 "TestDefinitelyFailedWriteSeenIsRejected", "TestWriteInDoubtSeenThenUnseenIsRejected",
                 "TestWriteInDoubtMayApplyLateOrNever", "TestFailingKeyIsVisualised"):
        assert f"--- PASS: {name}" in output, (name, output[-4000:])


@pytest.mark.time_limit(480)
def test_three_nodes_linearizable_under_split_kill_and_pause(tmp_path):
    assert os.geteuid() == 0, "the scenario creates a network namespace: it runs as root"
    for tool in ("ip", "nft", "go"):
        assert shutil.which(tool), f"{tool} is missing: the test command installs iproute2 and nftables"
    result = subprocess.run(
        [sys.executable, str(HERE / "sc_linearizability.py"), "--nodes", "3", "--rf", "2",
         "--faults", "split,kill,pause", "--out", str(tmp_path)],
        cwd=HERE, capture_output=True, text=True, timeout=460,
    )
    output = result.stdout + result.stderr
    failed = [line for line in output.splitlines() if "FAILED" in line]
    assert result.returncode == 0, output[-6000:] + "\n" + "\n".join(failed)
    assert "linearizable: 5 keys, every check passed" in output, output[-3000:]

    # The recorded history, with one stale read added (an acknowledged
    # value read back after a later acknowledged write replaced it),
    # must fail the same checker, and be written out for a person.
    history = json.loads((tmp_path / "history.json").read_text())
    ops = history["ops"]
    key = ops[0]["key"]
    writes = sorted((op for op in ops if op["key"] == key and op["kind"] == "write" and op["outcome"] == "ok"),
                    key=lambda op: op["return"])
    last = writes[-1]
    earlier = [op for op in writes if op["return"] < last["call"]]
    assert earlier, "no two acknowledged writes one after the other"
    end = max(max(op["call"], op["return"]) for op in ops)
    ops.append({"process": 10**6, "key": key, "kind": "read", "value": earlier[-1]["value"],
                "call": end + 1000, "return": end + 2000, "outcome": "ok"})
    tampered = tmp_path / "stale.json"
    tampered.write_text(json.dumps(history))
    check = subprocess.run([str(RECORDER), "check", "-history", str(tampered), "-html", str(tmp_path / "stale")],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 1, check.stdout + check.stderr
    verdict = json.loads(check.stdout.strip().splitlines()[-1])
    illegal = [r for r in verdict["results"] if r["result"] != "Ok"]
    assert [r["key"] for r in illegal] == [key], verdict["results"]
    assert (tmp_path / "stale" / f"{key}.html").stat().st_size > 1000
