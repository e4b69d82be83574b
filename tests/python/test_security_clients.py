"""The Go and Java clients' admin APIs against a secured bolided
(``security { enable-quotas true }``): tests/go/client/security_test.go
through the official Go client and tests/java's SecurityAdminTest through
the official Java client, each run here against a node of its own (every
test creates and drops the same kind of users, so they do not share one).

Both make, change, query and drop users, roles, privileges, allowlists and
quotas, log in with user and password, and check the refusals' codes (81,
82, 83, 60, 61, 65, 70, 71, 73)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bolide_server import REPO_ROOT
from security_helpers import secured_server


@pytest.fixture
def node():
    srv = secured_server()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_the_go_clients_admin_api(node):
    env = dict(os.environ, BOLIDE_SECURE_PORT=str(node.port), GOFLAGS="-buildvcs=false")
    run = subprocess.run(
        ["go", "test", "-count=1", "-run", "^TestSecurity", "-v", "./..."],
        cwd=REPO_ROOT / "tests" / "go" / "client", env=env,
        capture_output=True, text=True, timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "--- PASS: TestSecurityLoginAndRefusals" in output, output
    assert "--- PASS: TestSecurityUsersRolesPrivilegesAllowlistsQuotas" in output, output
    assert node.alive()


def test_the_java_clients_admin_api(node):
    # scripts/test.sh installs Maven and a JDK before the Python suite.
    mvn = shutil.which("mvn")
    assert mvn, "mvn is not installed (scripts/test.sh installs it)"
    command = [mvn, "-B", "-ntp", "-f", str(REPO_ROOT / "tests" / "java" / "pom.xml"),
               "test", "-Dtest=SecurityAdminTest"]
    if os.environ.get("MAVEN_REPO_LOCAL"):
        command.append("-Dmaven.repo.local=" + os.environ["MAVEN_REPO_LOCAL"])
    env = dict(os.environ, BOLIDE_SECURE_PORT=str(node.port))
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "Tests run: 1, Failures: 0, Errors: 0, Skipped: 0" in output, output[-6000:]
    assert node.alive()
