"""A network split, through a network namespace this test creates (as
root: `ip netns add`, nftables rules dropping traffic between the nodes'
127.x addresses). The scenario itself is split_scenario.py, run inside the
namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.time_limit(240)
def test_split_both_sides_serve_and_converge_when_healed():
    assert os.geteuid() == 0, "the split test creates a network namespace: it runs as root"
    for tool in ("ip", "nft"):
        assert shutil.which(tool), f"{tool} is missing: the test command installs iproute2 and nftables"
    namespace = f"bolide-split-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        result = subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, str(HERE / "split_scenario.py")],
            cwd=HERE, capture_output=True, text=True, timeout=220,
            env={**os.environ, "PYTHONPATH": str(HERE)},
        )
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "converged: every one-sided write kept" in output, output[-3000:]
