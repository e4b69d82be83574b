"""Config-file handling and process lifecycle."""

import socket

import pytest

from bolide_server import BolideServer, render_config, run_config_check
from helpers import NS, SET, ns_stats


def test_default_config_starts_and_serves(start_server):
    srv = start_server()
    c = srv.client()
    c.put((NS, SET, "cfg"), {"a": 1})
    assert c.get((NS, SET, "cfg"))[2] == {"a": 1}


def test_namespace_config_is_reported(start_server):
    srv = start_server(namespace={"default-ttl": "2d", "nsup-period": "7", "replication-factor": "1"})
    s = ns_stats(srv.client())
    assert s["default-ttl"] == str(2 * 86400)
    assert s["nsup-period"] == "7"
    assert s["replication-factor"] == "1"


def test_ttl_suffixes(start_server):
    srv = start_server(namespace={"default-ttl": "30m"})
    assert ns_stats(srv.client())["default-ttl"] == "1800"


def test_legacy_memory_size_form_starts(start_server):
    srv = start_server(namespace={"memory-size": "64M", "high-water-memory-pct": "60", "stop-writes-pct": "90"},
                       storage={"__none__": ""})
    c = srv.client()
    c.put((NS, SET, "legacy"), {"a": 1})
    assert c.get((NS, SET, "legacy"))[2] == {"a": 1}


SENTINELS = {"61111": "{port}", "62222": "{fabric_port}", "63333": "{heartbeat_port}", "64444": "{info_port}"}


def _config_with_line(extra_line):
    """Full default config with ``extra_line`` inserted as the first directive
    of the namespace block. Returns (template_text, line_number_of_extra)."""
    text = render_config(61111, 62222, 63333, 64444)
    lines = text.splitlines()
    idx = next(i for i, line in enumerate(lines) if line.startswith("namespace test {"))
    lines.insert(idx + 1, extra_line)
    text = "\n".join(lines) + "\n"
    text = text.replace("{", "{{").replace("}", "}}")
    for sentinel, placeholder in SENTINELS.items():
        text = text.replace(sentinel, placeholder)
    return text, idx + 2


def test_good_minimal_config_template_is_valid():
    """Control for the negative tests below: the same template with a valid
    directive on line 12 starts (so failures below are due to line 12)."""
    text, _ = _config_with_line("    default-ttl 0")
    srv = BolideServer(config_text=text)
    try:
        srv.start()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=2):
            pass
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "line,directive",
    [
        ("    bogus-directive 5", "bogus-directive"),
        ("    default-ttl notanumber", "default-ttl"),
        ("    nsup-period -3x", "nsup-period"),
        ("    rack-id 1000001", "rack-id"),
        ("    rack-id east", "rack-id"),
    ],
    ids=["unknown-directive", "bad-ttl-value", "bad-nsup-value", "rack-id-too-big", "rack-id-not-a-number"],
)
def test_bad_directive_fails_fast_with_line_number(line, directive):
    text, lineno = _config_with_line(line)
    rc, err, out = run_config_check(text, timeout=15)
    assert rc is not None, "bolided kept running with an invalid config"
    assert rc != 0, f"exit code 0 for invalid config; stderr={err!r}"
    assert f"line {lineno}" in err, f"stderr should name line {lineno}: {err!r}"
    assert directive in err, f"stderr should name {directive!r}: {err!r}"


def test_unbalanced_braces_fail():
    text, _ = _config_with_line("    default-ttl 0")
    text = text.rstrip("\n")
    text = text[: text.rfind("}}")]  # drop the final closing brace
    rc, err, out = run_config_check(text, timeout=15)
    assert rc is not None and rc != 0, (rc, err)
    assert err.strip(), "an error message on stderr is expected"


def test_missing_config_file_fails():
    import subprocess

    from bolide_server import bolided_path

    p = subprocess.run([str(bolided_path()), "--config", "/nonexistent/bolide.conf"],
                       capture_output=True, timeout=15)
    assert p.returncode != 0
    assert p.stderr.strip()


def test_sigterm_graceful_exit_zero(start_server):
    srv = start_server()
    c = srv.client()
    c.put((NS, SET, "before-term"), {"a": 1})
    # an idle raw connection and the client's pool stay open during shutdown
    idle = socket.create_connection(("127.0.0.1", srv.port), timeout=2)
    try:
        rc = srv.terminate(timeout=15)
    finally:
        idle.close()
    assert rc == 0, f"SIGTERM exit code {rc} (None = had to SIGKILL); log:\n{srv.log_tail()}"
    # port released
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_signal_right_after_ready_is_graceful(signame):
    """Ready = the port accepts connections. A SIGINT/SIGTERM sent at that
    moment must already be a graceful shutdown (exit 0), not the default
    signal action (exit -2/-15): handlers must be installed before listening.
    Repeated because it is a race."""
    import signal

    sig = getattr(signal, signame)
    for attempt in range(5):
        srv = BolideServer()
        srv.start()
        try:
            srv.proc.send_signal(sig)
            rc = srv.proc.wait(timeout=15)
            assert rc == 0, f"attempt {attempt}: {signame} right after ready gave exit code {rc}"
        finally:
            srv.stop()


def test_two_servers_independent(start_server):
    a = start_server()
    b = start_server()
    ca, cb = a.client(), b.client()
    ca.put((NS, SET, "only-in-a"), {"v": 1})
    assert ca.get((NS, SET, "only-in-a"))[2] == {"v": 1}
    assert cb.exists((NS, SET, "only-in-a"))[1] is None
