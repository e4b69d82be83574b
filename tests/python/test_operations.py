"""The operator's side (issue 15) through official clients and real
processes: every latency histogram counts its requests and `latencies:` is
read by the Python client and the Go `asinfo`; `/metrics` on a three-node
cluster (cluster, migration, proxy and replication figures, every family
described in docs/operations.md); the `bolide` tool against a three-node
cluster."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import aerospike
import pytest
from aerospike import predicates as p

from bolide_server import REPO_ROOT, BolideServer, free_ports
from cluster import LocalCluster, parse_kv
from helpers import info_value, wait_for

GOBIN = REPO_ROOT / ".cache" / "gobin"
BOLIDE = REPO_ROOT / "target" / "release" / "bolide"
BENCH = REPO_ROOT / "target" / "release" / "bolide-bench"
DOCS = (REPO_ROOT / "docs" / "operations.md").read_text()

KINDS = ["read", "write", "udf", "pi-query", "si-query"]

MODULE = """
function add(rec, bin, n)
    rec[bin] = (rec[bin] or 0) + n
    aerospike:update(rec)
    return rec[bin]
end
"""


def binary(path: Path) -> str:
    assert path.exists(), f"{path} is missing (cargo build --release; the Go tools come from tests/go/smoke.sh)"
    return str(path)


def http_get(port: int, path: str, host: str = "127.0.0.1") -> str:
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def samples(text: str) -> dict:
    """`name{labels}` -> value of every sample line of a scrape."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        out[series] = float(value)
    return out


def families(text: str) -> set:
    return {line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def histogram_counts(text: str) -> dict:
    """`latency-histograms` -> {name: count}."""
    out = {}
    for entry in filter(None, text.split(";")):
        name, _, rest = entry.partition(":")
        out[name] = int(parse_kv(rest.replace(":", ";"))["count"])
    return out


def check_slice(name: str, value: str):
    """One `latencies:` entry with data: msec, ops/sec, 17 percentages."""
    columns = value.split(",")
    assert columns[0] == "msec", (name, value)
    assert float(columns[1]) > 0, (name, value)
    percents = [float(c) for c in columns[2:]]
    assert len(percents) == 17, (name, value)
    assert all(0.0 <= x <= 100.0 for x in percents), (name, value)
    assert percents == sorted(percents, reverse=True), (name, value)


def parse_latencies(text: str) -> dict:
    out = {}
    for entry in filter(None, text.strip().split(";")):
        name, _, value = entry.partition(":")
        out[name] = value
    return out


@pytest.fixture
def observed(start_server, tmp_path):
    http_port = free_ports(1)[0]
    config = f"""service {{{{
    cluster-name observed
    work-directory {{work_directory}}
    ticker-interval 1
}}}}
network {{{{
    service {{{{
        address 127.0.0.1
        port {{port}}
    }}}}
    http {{{{
        address 127.0.0.1
        port {http_port}
    }}}}
}}}}
namespace test {{{{
    storage-engine memory {{{{
        data-size 128M
    }}}}
}}}}
namespace bar {{{{
    storage-engine memory {{{{
        data-size 64M
    }}}}
}}}}
"""
    server = start_server(config_text=config)
    server.http_port = http_port
    client = server.client()
    module = tmp_path / "ops_add.lua"
    module.write_text(MODULE)
    client.udf_put(str(module))
    return server, client


@pytest.mark.time_limit(120)
def test_every_histogram_counts_its_requests_and_the_clients_read_them(observed):
    server, client = observed
    before = histogram_counts(info_value(client, "latency-histograms"))
    assert set(before) == {"batch-index"} | {f"{{{ns}}}-{kind}" for ns in ("test", "bar") for kind in KINDS}
    keys = [("test", "ops", i) for i in range(40)]
    for i, key in enumerate(keys):
        client.put(key, {"n": i, "s": f"v{i}"})  # 40 writes
    for key in keys[:25]:
        client.get(key)  # 25 reads
    client.put(("bar", "ops", "only"), {"n": 1})  # 1 write in bar
    client.batch_read(keys[:10])  # 1 batch
    client.batch_read(keys[10:30])  # 1 batch
    for key in keys[:7]:
        client.apply(key, "ops_add", "add", ["n", 1])  # 7 UDF calls
    scanned = client.query("test", "ops").results()  # a scan: a primary-index query
    assert len(scanned) == 40
    client.index_integer_create("test", "ops", "n", "ops_n_idx")
    wait_for(lambda: "load_pct=100" in info_value(client, "sindex-stat:namespace=test;indexname=ops_n_idx"),
             timeout=20, what="index built")
    query = client.query("test", "ops")
    query.where(p.between("n", 0, 9))
    assert len(query.results()) == 10  # a secondary-index query

    expected = {
        "{test}-write": 40, "{test}-read": 25, "{bar}-write": 1, "batch-index": 2,
        "{test}-udf": 7, "{test}-pi-query": 1, "{test}-si-query": 1,
    }

    def counted():
        now = histogram_counts(info_value(client, "latency-histograms"))
        return {name: now[name] - before[name] for name in now}

    # A request is counted just after its answer is written.
    wait_for(lambda: all(counted()[name] >= count for name, count in expected.items()), timeout=10,
             what=f"histograms {expected}")
    deltas = counted()
    for name, count in expected.items():
        assert deltas[name] == count, (name, deltas)
    for name in ("{bar}-read", "{bar}-udf", "{bar}-pi-query", "{bar}-si-query"):
        assert deltas[name] == 0, (name, deltas)

    # latencies: through the Python client: every histogram that saw
    # requests gets a slice with data after the next ticks.
    for name in expected:
        wait_for(lambda: parse_latencies(info_value(client, f"latencies:hist={name}")).get(name, "") != "",
                 timeout=10, what=f"a {name} slice")
    # Keep reads going so the last slice of {test}-read has some.
    deadline = time.monotonic() + 10
    while True:
        for key in keys[:20]:
            client.get(key)
        answer = parse_latencies(info_value(client, "latencies:"))
        if answer["{test}-read"].startswith("msec,") and float(answer["{test}-read"].split(",")[1]) > 0:
            break
        assert time.monotonic() < deadline, answer
        time.sleep(0.3)
    assert list(answer) == list(before), answer
    check_slice("{test}-read", answer["{test}-read"])
    assert answer["{bar}-read"] == ""  # never used: nothing after the name

    # ... and through the Go asinfo, as an operator types it.
    asinfo = binary(GOBIN / "asinfo")
    out = subprocess.run([asinfo, "-p", str(server.port), "-v", "latencies:hist={test}-read"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1].strip()
    assert line.startswith("{test}-read:msec,"), out.stdout
    assert len(line.rstrip(";").split(",")) == 19, line
    out = subprocess.run([asinfo, "-p", str(server.port), "-v", "latencies:hist={nope}-read"],
                         capture_output=True, text=True, timeout=30)
    assert "ERROR:4" in out.stdout, out.stdout

    # /metrics serves the same counts as Prometheus histograms.
    metrics = samples(http_get(server.http_port, "/metrics"))
    totals = histogram_counts(info_value(client, "latency-histograms"))
    for name, count in totals.items():
        match = re.fullmatch(r"\{(.+)\}-(.+)", name)
        labels = f'ns="{match[1]}",type="{match[2]}"' if match else f'type="{name}"'
        served = metrics[f"bolide_latency_seconds_count{{{labels}}}"]
        # The scrape comes after the info answer: it may have counted more.
        assert served >= count, (name, served, count)
        assert metrics[f'bolide_latency_seconds_bucket{{{labels},le="+Inf"}}'] == served
    assert metrics['bolide_set_objects{ns="test",set="ops"}'] == 40
    assert metrics['bolide_set_sindexes{ns="test",set="ops"}'] == 1
    assert metrics['bolide_set_index_populating{ns="test",set="ops"}'] == 0


def scrape_all(cluster):
    return [http_get(node.http_port, "/metrics") for node in cluster.nodes if node.alive()]


def load_records(cluster, count, seed=0, set_name="demo"):
    client = cluster.client(seed)
    for i in range(count):
        client.put(("test", set_name, i), {"n": i, "s": f"v{i}"})
    return client


@pytest.mark.time_limit(240)
def test_metrics_of_a_three_node_cluster():
    cluster = LocalCluster(3, http=True, namespace={"migrate-sleep": "1000"})
    with cluster:
        # Two nodes first, with records; the third joins and receives some.
        cluster.stop(2)
        cluster.wait_formed(nodes=[0, 1])
        cluster.wait_stable(nodes=[0, 1])
        load_records(cluster, 3000)
        cluster.start(2)
        # While it migrates, the scrapes say so.
        seen_remaining = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen_remaining:
            for text in scrape_all(cluster):
                s = samples(text)
                seen_remaining = max(seen_remaining, s.get("bolide_node_migrate_partitions_remaining", 0))
            time.sleep(0.1)
        assert seen_remaining > 0, "no scrape showed partitions left to migrate"
        key = cluster.wait_stable(timeout=120)
        texts = scrape_all(cluster)
        assert len(texts) == 3
        scraped = [samples(text) for text in texts]
        cluster_keys = set()
        for index, (text, s) in enumerate(zip(texts, scraped)):
            stats = cluster.stats(index)
            assert s["bolide_node_cluster_size"] == 3
            assert s["bolide_node_cluster_integrity"] == 1
            assert s["bolide_node_migrate_partitions_remaining"] == 0
            assert s['bolide_namespace_cluster_size{ns="test"}'] == 3
            assert s['bolide_namespace_effective_replication_factor{ns="test"}'] == 2
            info = [series for series in s if series.startswith("bolide_node_cluster_info{")]
            assert info == [f'bolide_node_cluster_info{{cluster_key="{stats["cluster_key"]}",'
                            f'principal="{stats["cluster_principal"]}"}}'], info
            cluster_keys.add(stats["cluster_key"])
            # Every figure is named and described, here and in the docs.
            assert "not yet described" not in text
            for family in families(text):
                assert f"`{family}`" in DOCS, f"docs/operations.md does not describe {family}"
        assert len(cluster_keys) == 1
        # Records once (masters), copies twice.
        assert sum(s['bolide_namespace_master_objects{ns="test"}'] for s in scraped) == 3000
        assert sum(s['bolide_namespace_objects{ns="test"}'] for s in scraped) == 6000
        assert sum(s['bolide_set_objects{ns="test",set="demo"}'] for s in scraped) == 6000
        # The joiner received partitions and records; the others sent them.
        joiner = scraped[2]
        assert joiner["bolide_node_migrate_partitions_received_total"] > 0
        assert joiner["bolide_node_migrate_record_receives_total"] > 0
        sent = sum(s["bolide_node_migrate_records_transmitted_total"] for s in scraped[:2])
        assert sent >= joiner["bolide_node_migrate_record_receives_total"] > 0
        assert sum(s["bolide_node_migrate_partitions_sent_total"] for s in scraped[:2]) > 0
        assert all(s["bolide_node_rebalance_generation"] >= 1 for s in scraped)

        # Requests sent to one node without the partition map are proxied.
        before = scraped
        out = subprocess.run([binary(BENCH), "-p", str(cluster.nodes[0].port), "-k", "1000", "-o", "S:50",
                              "-w", "RU,50", "-c", "2", "-g", "2000", "-d", "2s"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        after = [samples(text) for text in scrape_all(cluster)]

        def grew(index, series):
            return after[index][series] - before[index].get(series, 0)

        assert grew(0, "bolide_node_client_proxy_complete_total") > 0
        assert grew(1, "bolide_node_from_proxy_complete_total") + grew(2, "bolide_node_from_proxy_complete_total") > 0
        assert sum(grew(i, "bolide_node_replica_writes_sent_total") for i in range(3)) > 0
        assert sum(grew(i, "bolide_node_replica_writes_received_total") for i in range(3)) > 0
        assert all(after[i]["bolide_node_client_proxy_error_total"] == 0 for i in range(3))
        assert cluster.wait_stable() == key


def bolide(*args, port, stdin=None, timeout=60):
    out = subprocess.run([binary(BOLIDE), "-p", str(port), *args], input=stdin,
                         capture_output=True, text=True, timeout=timeout)
    return out


def table_rows(text: str):
    """Cells of every data row of comfy tables (`│ a ┆ b │`)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│ ").split("┆")])
    return rows


def partition_of(digest: bytes) -> int:
    return (digest[0] | (digest[1] << 8)) & 0x0FFF


def masters_of(cluster, index, namespace="test"):
    for entry in cluster.info(index, "replicas-master").split(";"):
        name, _, bitmap = entry.partition(":")
        if name == namespace:
            return base64.b64decode(bitmap)
    raise AssertionError("no replicas-master entry")


@pytest.mark.time_limit(240)
def test_the_bolide_tool_against_a_three_node_cluster():
    with LocalCluster(3, service={"ticker-interval": "1"}) as cluster:
        cluster.wait_formed()
        cluster.wait_stable()
        ids = sorted(node.node_id for node in cluster.nodes)
        ports = [node.port for node in cluster.nodes]

        # info: every node from any seed, each with its size and build.
        for port in ports:
            out = bolide("info", port=port)
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith(f"Nodes (3 found from 127.0.0.1:{port})"), out.stdout
            rows = [row for row in table_rows(out.stdout) if row[0] in ids]
            summary = {row[0]: row for row in rows if len(row) == 10}
            assert sorted(summary) == ids, out.stdout
            for node in cluster.nodes:
                row = summary[node.node_id]
                assert row[1] == f"127.0.0.1:{node.port}"
                assert row[3] == "bolide-cluster-test" and row[4] == "3" and row[9] == "0", row
            for node_id in ids:
                assert f"Namespaces on {node_id} (" in out.stdout

        # show: a column per node.
        out = bolide("show", "statistics", "namespace", "test", port=ports[1])
        assert out.returncode == 0, out.stderr
        header = [line for line in out.stdout.splitlines() if line.startswith("│") and "A1" in line][0]
        assert sorted(cell.strip() for cell in header.strip("│ ").split("┆") if cell.strip()) == ids
        sizes = [row for row in table_rows(out.stdout) if row[0] == "ns_cluster_size"]
        assert sizes == [["ns_cluster_size", "3", "3", "3"]], sizes
        out = bolide("show", "config", port=ports[2])
        assert out.returncode == 0, out.stderr
        names = [row for row in table_rows(out.stdout) if row[0] == "cluster-name"]
        assert names == [["cluster-name"] + ["bolide-cluster-test"] * 3], names

        # asinfo goes to the node named.
        for node in cluster.nodes:
            out = bolide("asinfo", "node", port=node.port)
            assert out.stdout.strip() == node.node_id

        # sql: rows written through one node are all read through another,
        # each once; EXPLAIN names the partition's master.
        statements = "".join(f"INSERT INTO test.demo (PK, n, s) VALUES ({i}, {i}, 'v{i}')\n" for i in range(300))
        out = bolide("sql", port=ports[0], stdin=statements)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("OK, 1 record affected.") == 300
        out = bolide("sql", "-o", "json", "-c", "SELECT n FROM test.demo", port=ports[2])
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)
        assert sorted(row["PK"] for row in rows) == list(range(300))
        assert "300 rows in set" in out.stderr
        out = bolide("sql", "-c", "EXPLAIN SELECT * FROM test.demo WHERE PK = 77", port=ports[1])
        assert out.returncode == 0, out.stderr
        plan = {row[0]: row[1] for row in table_rows(out.stdout) if len(row) == 2}
        partition = partition_of(aerospike.calc_digest("test", "demo", 77))
        assert plan["partition"] == str(partition), plan
        assert plan["nodes"] == "3"
        master = plan["master node"].split(" ")[0]
        index = [node.node_id for node in cluster.nodes].index(master)
        bitmap = masters_of(cluster, index)
        assert bitmap[partition >> 3] & (0x80 >> (partition & 7)), plan

        # An index built on every node answers WHERE from the index.
        out = bolide("sql", "-c", "CREATE INDEX demo_n ON test.demo (n) NUMERIC", port=ports[1])
        assert out.returncode == 0 and out.stdout.strip() == "OK, index demo_n created.", (out.stdout, out.stderr)
        for i in range(3):
            wait_for(lambda: "demo_n" in cluster.info(i, "sindex-list:ns=test"), timeout=10, what="index on every node")
        out = bolide("sql", "-c", "EXPLAIN SELECT * FROM test.demo WHERE n BETWEEN 100 AND 149", port=ports[0])
        plan = {row[0]: row[1] for row in table_rows(out.stdout) if len(row) == 2}
        assert plan["plan"].startswith("secondary index query"), plan
        assert plan["index"].startswith("demo_n (numeric on bin n"), plan
        out = bolide("sql", "-o", "json", "-c", "SELECT s FROM test.demo WHERE n BETWEEN 100 AND 149", port=ports[0])
        assert out.returncode == 0, out.stderr
        assert sorted(row["PK"] for row in json.loads(out.stdout)) == list(range(100, 150))

        # show latencies: each node's histograms.
        out = bolide("show", "latencies", "namespace", "test", port=ports[0])
        assert out.returncode == 0, out.stderr
        read_rows = [row for row in table_rows(out.stdout) if row[0] == "{test}-read"]
        assert sorted(row[1] for row in read_rows) == ids, out.stdout

        # TRUNCATE counts records once, not every copy.
        out = bolide("sql", "-c", "TRUNCATE test.demo", port=ports[2])
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "OK, truncated test.demo (300 records).", out.stdout
        for i in range(3):
            assert parse_kv(cluster.info(i, "namespace/test"))["objects"] == "0"
