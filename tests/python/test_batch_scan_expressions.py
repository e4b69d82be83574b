"""Batch, scan/query, truncate and filter expressions through the official
Python client (issue 5; list and map operations are in test_cdt.py)."""

from __future__ import annotations

import os
import socket
import time
import uuid

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers import expressions as exp
from aerospike_helpers.batch import records as br
from aerospike_helpers.operations import operations as op

import wire
from helpers import NS, info_value, wait_for


@pytest.fixture
def fresh_set(client):
    """A set name of its own, truncated after the test."""
    name = f"s{uuid.uuid4().hex[:10]}"
    yield name
    client.truncate(NS, name, 0)


def load(client, set_name, count, send_key=True):
    policy = {"key": aerospike.POLICY_KEY_SEND} if send_key else {}
    for i in range(count):
        client.put((NS, set_name, i), {"i": i, "s": f"v{i}", "f": i / 2}, policy=policy)


# ---------------------------------------------------------------- batch


def test_batch_read_all_bins_named_bins_and_missing(client, fresh_set):
    load(client, fresh_set, 20)
    keys = [(NS, fresh_set, i) for i in range(20)] + [(NS, fresh_set, "missing")]
    result = client.batch_read(keys)
    assert len(result.batch_records) == 21
    for i, record in enumerate(result.batch_records[:20]):
        assert record.result == 0
        assert record.record[1]["gen"] == 1
        assert record.record[2] == {"i": i, "s": f"v{i}", "f": i / 2}
    assert result.batch_records[20].result == 2
    named = client.batch_read(keys[:5], ["s"])
    assert [r.record[2] for r in named.batch_records] == [{"s": f"v{i}"} for i in range(5)]


def test_batch_exists_only(client, fresh_set):
    load(client, fresh_set, 3)
    result = client.batch_read([(NS, fresh_set, 0), (NS, fresh_set, 99)], [])
    assert result.batch_records[0].result == 0
    assert result.batch_records[0].record[1]["gen"] == 1
    assert result.batch_records[1].result == 2


def test_large_batch_of_ten_thousand_keys(client, fresh_set):
    load(client, fresh_set, 2000, send_key=False)
    keys = [(NS, fresh_set, i) for i in range(10_000)]
    result = client.batch_read(keys, ["i"])
    found = [r for r in result.batch_records if r.result == 0]
    missing = [r for r in result.batch_records if r.result == 2]
    assert len(found) == 2000 and len(missing) == 8000
    assert sorted(r.record[2]["i"] for r in found) == list(range(2000))


def test_batch_write_operate_and_remove(client, fresh_set):
    load(client, fresh_set, 5)
    writes = br.BatchRecords(
        [br.Write((NS, fresh_set, 100 + i), [op.write("w", i)]) for i in range(10)]
        + [br.Remove((NS, fresh_set, 0)), br.Read((NS, fresh_set, 1), [op.read("s")])]
    )
    result = client.batch_write(writes)
    assert result.result == 0
    assert [r.result for r in result.batch_records] == [0] * 12
    assert result.batch_records[11].record[2] == {"s": "v1"}
    assert client.get((NS, fresh_set, 105))[2] == {"w": 5}
    with pytest.raises(ex.RecordNotFound):
        client.get((NS, fresh_set, 0))
    operated = client.batch_operate([(NS, fresh_set, i) for i in (1, 2)], [op.increment("i", 10), op.read("i")])
    assert [r.record[2]["i"] for r in operated.batch_records] == [11, 12]
    removed = client.batch_remove([(NS, fresh_set, 1), (NS, fresh_set, 424242)])
    assert [r.result for r in removed.batch_records] == [0, 2]


def test_batch_write_policies_report_per_record_codes(client, fresh_set):
    load(client, fresh_set, 1)
    writes = br.BatchRecords(
        [
            br.Write((NS, fresh_set, 0), [op.write("x", 1)], policy={"exists": aerospike.POLICY_EXISTS_CREATE}),
            br.Write((NS, fresh_set, 7), [op.write("x", 1)], policy={"exists": aerospike.POLICY_EXISTS_UPDATE}),
            br.Write((NS, fresh_set, 0), [op.increment("s", 1)]),
        ]
    )
    result = client.batch_write(writes)
    assert [r.result for r in result.batch_records] == [5, 2, 12]


# ---------------------------------------------------------------- scan / query


def test_scan_set_returns_every_record_with_its_stored_key(client, fresh_set):
    load(client, fresh_set, 300)
    records = client.scan(NS, fresh_set).results()
    assert len(records) == 300
    by_key = {key[2]: bins for key, meta, bins in records}
    assert sorted(by_key) == list(range(300))
    assert all(by_key[i]["i"] == i for i in range(300))


def test_query_without_index_selects_bins(client, fresh_set):
    load(client, fresh_set, 50)
    query = client.query(NS, fresh_set)
    query.select("s")
    records = query.results()
    assert len(records) == 50
    assert all(set(bins) == {"s"} for _, _, bins in records)


def test_scan_of_unknown_set_is_empty(client):
    assert client.scan(NS, "no_such_set_here").results() == []


def test_scan_max_records_and_partition_resume(client, fresh_set):
    load(client, fresh_set, 500)
    assert len(client.scan(NS, fresh_set).results(policy={"max_records": 100})) == 100
    # Page through the whole set with a partition filter and max_records:
    # every record exactly once.
    query = client.query(NS, fresh_set)
    query.max_records = 120
    partition_filter = {"begin": 0, "count": 4096}
    seen = []
    for _ in range(20):
        page = query.results(policy={"partition_filter": partition_filter})
        seen.extend(key[2] for key, _, _ in page)
        if query.is_done():
            break
        partition_filter = {"begin": 0, "count": 4096, "partition_status": query.get_partitions_status()}
    assert sorted(seen) == list(range(500))


def test_scan_of_some_partitions(client, fresh_set):
    load(client, fresh_set, 400)
    first_half = client.query(NS, fresh_set).results(policy={"partition_filter": {"begin": 0, "count": 2048}})
    second_half = client.query(NS, fresh_set).results(policy={"partition_filter": {"begin": 2048, "count": 2048}})
    keys = sorted(key[2] for key, _, _ in first_half + second_half)
    assert keys == list(range(400))
    assert 0 < len(first_half) < 400


def test_scan_throttled_by_records_per_second(client, fresh_set):
    import time

    load(client, fresh_set, 300)
    started = time.monotonic()
    records = client.scan(NS, fresh_set).results(policy={"records_per_second": 200})
    elapsed = time.monotonic() - started
    assert len(records) == 300
    assert elapsed >= 0.9, f"300 records at 200/s took only {elapsed:.2f}s"


SCHED_IDLE = 5


def scan_threads(pid):
    """(tid, scheduling policy) of the server's threads named "scan"."""
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != "scan":
                    continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                # Field 41 (policy), counted after the ")" closing field 2.
                found.append((tid, int(f.read().rsplit(")", 1)[1].split()[38])))
        except (FileNotFoundError, ProcessLookupError):
            # The thread ended between the listing and the read.
            continue
    return found


FIELD_RECORDS_PER_SECOND = 10


def raw_scan(port, set_name, records_per_second=0):
    """Starts a scan of `set_name` on a raw socket (small receive buffer)
    and returns the socket; the caller reads it, or not."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    fields = [wire.field_bytes(wire.FIELD_NAMESPACE, NS.encode()), wire.field_bytes(wire.FIELD_SET, set_name.encode())]
    if records_per_second:
        fields.append(wire.field_bytes(FIELD_RECORDS_PER_SECOND, records_per_second.to_bytes(4, "big")))
    sock.sendall(wire.as_msg(fields, [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
    return sock


def stalled_scan(port, set_name):
    """A raw scan whose client never reads: it stays stuck once the socket
    buffers are full (the set must hold several MB)."""
    return raw_scan(port, set_name)


def test_scan_runs_at_idle_priority_and_never_holds_up_writes(server, client, fresh_set):
    # 3,000 records of 4 KiB: far more than a small socket buffer holds, so a
    # scan whose client does not read stays stuck in the middle.
    for i in range(3000):
        client.put((NS, fresh_set, i), {"b": "x" * 4096})
    stalled = stalled_scan(server.port, fresh_set)
    try:
        wait_for(lambda: scan_threads(server.proc.pid), 5, what="a scan thread")
        # The scan's thread is in SCHED_IDLE: it gets only CPU time nothing
        # else wants.
        assert [policy for _, policy in scan_threads(server.proc.pid)] == [SCHED_IDLE]
        # Writes and reads of the same set go on while the scan is stuck.
        for i in range(200):
            client.put((NS, fresh_set, i), {"b": "y"})
            assert client.get((NS, fresh_set, i))[2] == {"b": "y"}
    finally:
        stalled.close()
    # A client that goes away ends the scan and its thread.
    wait_for(lambda: not scan_threads(server.proc.pid), 10, what="the scan thread to end")
    records = client.scan(NS, fresh_set).results()
    assert len(records) == 3000
    assert sum(1 for _, _, bins in records if bins == {"b": "y"}) == 200


SCAN_THREADS_MAX = 128


def test_concurrent_scans_beyond_the_limit_wait_their_turn(server, client, fresh_set):
    # More long scans (one record a second) than the limit: only
    # SCAN_THREADS_MAX get a thread, the rest wait; as clients leave,
    # waiting scans start.
    for i in range(600):
        client.put((NS, fresh_set, i), {"b": "x"})
    pid = server.proc.pid
    scans = [raw_scan(server.port, fresh_set, records_per_second=1) for _ in range(SCAN_THREADS_MAX + 12)]
    try:
        wait_for(lambda: len(scan_threads(pid)) == SCAN_THREADS_MAX, 20, what="the scan limit to fill")
        time.sleep(0.5)
        assert len(scan_threads(pid)) == SCAN_THREADS_MAX
        client.put((NS, fresh_set, "during"), {"b": "ok"})
        assert client.get((NS, fresh_set, "during"))[2] == {"b": "ok"}
        for sock in scans[:20]:
            sock.close()
        # The 12 waiting scans start in the freed places: 128 - 20 + 12.
        wait_for(lambda: len(scan_threads(pid)) == SCAN_THREADS_MAX - 8, 20, what="waiting scans to start")
    finally:
        for sock in scans:
            sock.close()
    wait_for(lambda: not scan_threads(pid), 20, what="every scan thread to end")
    assert len(client.scan(NS, fresh_set).results()) == 601


def test_a_throttled_scan_streams_records_as_they_fall_due(server, client, fresh_set):
    # 20 small records at 5 per second: the first arrive at once, not when
    # a whole chunk (or the scan) is done, and the whole scan takes ~4 s.
    for i in range(20):
        client.put((NS, fresh_set, i), {"b": i})
    sock = raw_scan(server.port, fresh_set, records_per_second=5)
    sock.settimeout(10)
    started = time.monotonic()
    first = wire.read_response(sock)
    first_at = time.monotonic() - started
    assert first.result_code == 0 and first.n_ops == 1, first
    assert first_at < 1.5, f"first record after {first_at:.2f}s"
    sock.close()
    # The client API sees every record, at the rate asked for.
    started = time.monotonic()
    records = client.scan(NS, fresh_set).results(policy={"records_per_second": 5})
    assert len(records) == 20
    assert time.monotonic() - started >= 3.0


# ---------------------------------------------------------------- truncate


def test_truncate_set_hides_and_removes_records(client, fresh_set):
    load(client, fresh_set, 100)
    other = fresh_set + "o"
    load(client, other, 10)
    client.truncate(NS, fresh_set, 0)
    with pytest.raises(ex.RecordNotFound):
        client.get((NS, fresh_set, 5))
    assert client.scan(NS, fresh_set).results() == []
    assert len(client.scan(NS, other).results()) == 10
    # New writes after the truncation are kept.
    client.put((NS, fresh_set, 5), {"again": 1})
    assert client.get((NS, fresh_set, 5))[2] == {"again": 1}
    wait_for(
        lambda: f"set={fresh_set}:objects=1:" in info_value(client, f"sets/{NS}"),
        timeout=10,
        what="truncated records freed",
    )
    client.truncate(NS, other, 0)


def test_truncate_info_command_and_errors(client, fresh_set):
    load(client, fresh_set, 5)
    assert info_value(client, f"truncate:namespace={NS};set={fresh_set}") == "ok"
    assert client.scan(NS, fresh_set).results() == []
    # As on Aerospike 8.1, a namespace this node does not hold is accepted
    # (nodes that hold it apply the truncation); a missing or empty one is
    # an error, which the C client turns into the matching exception.
    assert info_value(client, "truncate:namespace=nope;set=x") == "ok"
    with pytest.raises(ex.NamespaceNotFound):
        client.info_random_node("truncate:namespace=;set=x")
    with pytest.raises(ex.AerospikeError) as error:
        client.info_random_node(f"truncate:namespace={NS};set=x;lut=99999999999999999999")
    assert error.value.code == 4


# ---------------------------------------------------------------- expressions


def test_filter_on_get_put_and_remove(client, fresh_set):
    load(client, fresh_set, 3)
    key = (NS, fresh_set, 1)
    assert client.get(key, {"expressions": exp.Eq(exp.IntBin("i"), 1).compile()})[2]["i"] == 1
    with pytest.raises(ex.FilteredOut):
        client.get(key, {"expressions": exp.Eq(exp.IntBin("i"), 2).compile()})
    with pytest.raises(ex.FilteredOut):
        client.put(key, {"x": 1}, policy={"expressions": exp.GT(exp.IntBin("i"), 5).compile()})
    with pytest.raises(ex.FilteredOut):
        client.remove(key, policy={"expressions": exp.Eq(exp.StrBin("s"), "nope").compile()})
    client.remove(key, policy={"expressions": exp.Eq(exp.StrBin("s"), "v1").compile()})
    with pytest.raises(ex.RecordNotFound):
        client.get(key)
    # A new record is written whatever the filter says.
    client.put((NS, fresh_set, 50), {"i": 50}, policy={"expressions": exp.Eq(exp.IntBin("i"), -1).compile()})
    assert client.get((NS, fresh_set, 50))[2] == {"i": 50}


def test_filter_type_mismatch_is_a_bad_request(client, fresh_set):
    load(client, fresh_set, 1)
    with pytest.raises(ex.InvalidRequest):
        client.get((NS, fresh_set, 0), {"expressions": exp.GE(exp.StrBin("i"), 10).compile()})


def test_filter_logic_and_metadata_on_scans_and_batches(client, fresh_set):
    load(client, fresh_set, 100)
    expression = exp.And(
        exp.GE(exp.IntBin("i"), 10),
        exp.LT(exp.IntBin("i"), 20),
        exp.Not(exp.Eq(exp.StrBin("s"), "v15")),
    ).compile()
    found = sorted(bins["i"] for _, _, bins in client.query(NS, fresh_set).results({"expressions": expression}))
    assert found == [10, 11, 12, 13, 14, 16, 17, 18, 19]
    meta = exp.And(
        exp.Eq(exp.TTL(), -1), exp.KeyExists(), exp.Eq(exp.SetName(), fresh_set), exp.GT(exp.FloatBin("f"), 24.0)
    ).compile()
    assert len(client.scan(NS, fresh_set).results({"expressions": meta})) == 51
    modulo = client.scan(NS, fresh_set).results({"expressions": exp.Eq(exp.DigestMod(2), 0).compile()})
    expected = sum(1 for i in range(100) if digest_word(NS, fresh_set, i) % 2 == 0)
    assert len(modulo) == expected
    batch = client.batch_read(
        [(NS, fresh_set, i) for i in range(8)], policy={"expressions": exp.LT(exp.IntBin("i"), 4).compile()}
    )
    assert [r.result for r in batch.batch_records] == [0, 0, 0, 0, 27, 27, 27, 27]


def digest_word(ns, set_name, key):
    """What digest_modulo divides: digest bytes 16..20 read little-endian,
    as the server reads them (a host-order u32 on x86)."""
    return int.from_bytes(aerospike.calc_digest(ns, set_name, key)[16:20], "little")


def test_digest_modulo_reads_the_digest_little_endian(client, fresh_set):
    """Modulo 1000 tells the byte orders apart (modulo 2 did not: the
    build that read them big-endian passed the test above)."""
    load(client, fresh_set, 40)
    big = lambda i: int.from_bytes(aerospike.calc_digest(NS, fresh_set, i)[16:20], "big")
    assert any(digest_word(NS, fresh_set, i) % 1000 != big(i) % 1000 for i in range(40))
    for i in range(3):
        wanted = digest_word(NS, fresh_set, i) % 1000
        found = client.scan(NS, fresh_set).results(
            {"expressions": exp.Eq(exp.DigestMod(1000), wanted).compile()})
        keys = sorted(b["i"] for _, _, b in found)
        assert i in keys
        assert keys == sorted(j for j in range(40) if digest_word(NS, fresh_set, j) % 1000 == wanted)
    # A negative modulus works like its absolute value, as in C.
    wanted = digest_word(NS, fresh_set, 0) % 7
    found = client.scan(NS, fresh_set).results({"expressions": exp.Eq(exp.DigestMod(-7), wanted).compile()})
    assert 0 in [b["i"] for _, _, b in found]


def test_regex_filters_as_posix_regcomp_reads_them(client, fresh_set):
    names = ["alpha", "Alpha", "beta", "alpha+beta", "(alpha)", "line1\nalpha", "gamma.delta", "ab", "abab"]
    for i, name in enumerate(names):
        client.put((NS, fresh_set, i), {"name": name, "n": i})

    def matching(flags, pattern):
        expression = exp.CmpRegex(flags, pattern, exp.StrBin("name")).compile()
        return sorted(b["name"] for _, _, b in client.query(NS, fresh_set).results({"expressions": expression}))

    assert matching(aerospike.REGEX_NONE, "^alpha") == ["alpha", "alpha+beta"]
    assert matching(aerospike.REGEX_ICASE, "^alpha$") == ["Alpha", "alpha"]
    # Basic syntax: "+" and "(" are literals, "\(...\)" groups.
    assert matching(aerospike.REGEX_NONE, "a+b") == ["alpha+beta"]
    assert matching(aerospike.REGEX_NONE, "^(alpha)$") == ["(alpha)"]
    assert matching(aerospike.REGEX_NONE, r"^\(ab\)*$") == ["ab", "abab"]
    # Extended syntax: "+", "|" and "()" are operators.
    assert matching(aerospike.REGEX_EXTENDED, "^(ab)+$") == ["ab", "abab"]
    assert matching(aerospike.REGEX_EXTENDED, "^(beta|gamma)") == ["beta", "gamma.delta"]
    assert matching(aerospike.REGEX_EXTENDED, r"a\.d") == ["gamma.delta"]
    assert matching(aerospike.REGEX_EXTENDED, "^[[:upper:]]") == ["Alpha"]
    # Without REG_NEWLINE "^" is the start of the string only; with it, of any line.
    assert matching(aerospike.REGEX_NONE, "^alpha$") == ["alpha"]
    assert matching(aerospike.REGEX_NEWLINE, "^alpha$") == ["alpha", "line1\nalpha"]
    # On a single record: FILTERED_OUT when it does not match; a bin that is
    # not a string never matches.
    key = (NS, fresh_set, 2)
    assert client.get(key, {"expressions": exp.CmpRegex(0, "^be", exp.StrBin("name")).compile()})[2]["n"] == 2
    with pytest.raises(ex.FilteredOut):
        client.get(key, {"expressions": exp.CmpRegex(0, "^al", exp.StrBin("name")).compile()})
    with pytest.raises(ex.FilteredOut):
        client.get(key, {"expressions": exp.CmpRegex(0, ".*", exp.StrBin("n")).compile()})
    # A pattern that does not compile is a bad request.
    with pytest.raises(ex.InvalidRequest):
        client.get(key, {"expressions": exp.CmpRegex(aerospike.REGEX_EXTENDED, "(unclosed",
                                                     exp.StrBin("name")).compile()})


def test_arithmetic_cond_and_let_in_filters(client, fresh_set):
    for i in range(1, 21):
        client.put((NS, fresh_set, i), {"a": i, "b": 21 - i, "f": i / 4, "mask": 1 << (i % 8)})

    def picked(expression):
        found = client.query(NS, fresh_set).results({"expressions": expression.compile()})
        return sorted(b["a"] for _, _, b in found)

    a, b, f = exp.IntBin("a"), exp.IntBin("b"), exp.FloatBin("f")
    assert picked(exp.Eq(exp.Add(a, b), 21)) == list(range(1, 21))
    assert picked(exp.GT(exp.Sub(a, b), 15)) == [19, 20]
    assert picked(exp.Eq(exp.Sub(a), -3)) == [3]
    assert picked(exp.Eq(exp.Mul(a, 3), 30)) == [10]
    assert picked(exp.Eq(exp.Div(a, 7), 2)) == [14, 15, 16, 17, 18, 19, 20]
    assert picked(exp.Eq(exp.Mod(a, 7), 0)) == [7, 14]
    assert picked(exp.Eq(exp.Abs(exp.Sub(a, 10)), 2)) == [8, 12]
    assert picked(exp.Eq(exp.Floor(f), 2.0)) == [8, 9, 10, 11]
    assert picked(exp.Eq(exp.Ceil(f), 1.0)) == [1, 2, 3, 4]
    assert picked(exp.Eq(exp.ToInt(f), 4)) == [16, 17, 18, 19]
    assert picked(exp.GE(exp.ToFloat(a), 19.5)) == [20]
    assert picked(exp.Eq(exp.Pow(f, 2.0), 25.0)) == [20]
    assert picked(exp.Eq(exp.Min(a, b), 10)) == [10, 11]
    assert picked(exp.Eq(exp.Max(a, b, 15), 15)) == [6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    # Bitwise: mask is 1 << (a % 8).
    assert picked(exp.NE(exp.IntAnd(exp.IntBin("mask"), 0b1000), 0)) == [3, 11, 19]
    assert picked(exp.Eq(exp.IntLeftShift(exp.IntBin("mask"), 2), 16)) == [2, 10, 18]
    assert picked(exp.Eq(exp.IntCount(a), 1)) == [1, 2, 4, 8, 16]
    assert picked(exp.Eq(exp.IntXOr(a, 1), 4)) == [5]
    # Bit scans report the index from the most significant bit (0).
    assert picked(exp.Eq(exp.IntLeftScan(exp.IntBin("mask"), True), 60)) == [3, 11, 19]
    assert picked(exp.Eq(exp.IntRightScan(exp.IntBin("mask"), True), 63)) == [8, 16]
    assert picked(exp.Eq(exp.IntLeftScan(exp.IntBin("mask"), False), 0)) == list(range(1, 21))
    # Division by zero is unknown: nothing passes, nothing fails.
    assert picked(exp.Eq(exp.Div(a, exp.Sub(a, a)), 1)) == []
    # Cond: the first true condition's action, else the default.
    bucket = exp.Cond(exp.LT(a, 5), 0, exp.LT(a, 15), 1, 2)
    assert picked(exp.Eq(bucket, 0)) == [1, 2, 3, 4]
    assert picked(exp.Eq(bucket, 2)) == [15, 16, 17, 18, 19, 20]
    # Let: a named value used twice; later definitions see earlier ones.
    square = exp.Let(exp.Def("x", exp.Sub(a, 10)), exp.Def("y", exp.Mul(exp.Var("x"), exp.Var("x"))),
                     exp.And(exp.LE(exp.Var("y"), 4), exp.GE(exp.Var("x"), 0)))
    assert picked(square) == [10, 11, 12]
    # Mixed number types between literals, and a variable never defined,
    # are bad requests.
    key = (NS, fresh_set, 1)
    with pytest.raises(ex.InvalidRequest):
        client.get(key, {"expressions": exp.Eq(exp.Add(1, 2.0), 3).compile()})
    with pytest.raises(ex.InvalidRequest):
        client.get(key, {"expressions": exp.Eq(exp.Var("nope"), 1).compile()})


def test_geo_filters_find_points_in_regions(client, fresh_set):
    places = {"in-square": [2.0, 3.0], "in-hole": [5.0, 5.0], "east": [11.0, 5.0], "near-origin": [0.1, 0.5]}
    for name, coordinates in places.items():
        client.put((NS, fresh_set, name), {"name": name, "loc": aerospike.GeoJSON(
            {"type": "Point", "coordinates": coordinates})})
    client.put((NS, fresh_set, "area"), {"name": "area", "loc": aerospike.GeoJSON(
        {"type": "Polygon", "coordinates": [[[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]]})})

    def within(region):
        expression = exp.CmpGeo(exp.GeoBin("loc"), aerospike.GeoJSON(region)).compile()
        return sorted(b["name"] for _, _, b in client.query(NS, fresh_set).results({"expressions": expression}))

    square_with_hole = {"type": "Polygon", "coordinates": [
        [[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]], [[4, 4], [6, 4], [6, 6], [4, 6], [4, 4]]]}
    assert within(square_with_hole) == ["in-square", "near-origin"]
    # AeroCircle: center and radius in meters (near-origin is ~56.7 km from [0, 0]).
    assert within({"type": "AeroCircle", "coordinates": [[0.0, 0.0], 60000]}) == ["near-origin"]
    assert within({"type": "AeroCircle", "coordinates": [[0.0, 0.0], 50000]}) == []
    # A region bin containing a given point.
    contains = exp.CmpGeo(exp.GeoBin("loc"), aerospike.GeoJSON({"type": "Point", "coordinates": [9.0, 9.0]}))
    found = client.query(NS, fresh_set).results({"expressions": contains.compile()})
    assert [b["name"] for _, _, b in found] == ["area"]
    # Not GeoJSON this server understands: a bad request.
    with pytest.raises(ex.InvalidRequest):
        client.get((NS, fresh_set, "east"), {"expressions": exp.CmpGeo(
            exp.GeoBin("loc"), aerospike.GeoJSON({"type": "Nowhere", "coordinates": []})).compile()})


def test_list_and_map_values_in_filters(client, fresh_set):
    """Lists and maps as literals, as results and as call arguments: the
    client sends list literals quoted ([126, list]) and a call's arguments as
    expressions, which the server evaluates per record."""
    client.put((NS, fresh_set, 1), {"n": 2, "l": [1, 2, 3, [4]], "m": {"a": 1, "b": 2}})
    client.put((NS, fresh_set, 2), {"n": 9, "l": [5, 6], "m": {"b": 2, "a": 1}})
    client.put((NS, fresh_set, 3), {"n": 5, "l": [5], "m": {"a": 1, "b": 3}})

    def picked(expression):
        found = client.query(NS, fresh_set).results({"expressions": expression.compile()})
        return sorted(b["n"] for _, _, b in found)

    lst, mp = exp.ListBin("l"), exp.MapBin("m")
    # Bins compared with list and map literals; a map's written order does
    # not matter.
    assert picked(exp.Eq(lst, [1, 2, 3, [4]])) == [2]
    assert picked(exp.NE(lst, [5])) == [2, 9]
    assert picked(exp.GT(lst, [5])) == [9]
    assert picked(exp.Eq(mp, {"a": 1, "b": 2})) == [2, 9]
    assert picked(exp.Eq(mp, {"b": 3, "a": 1})) == [5]
    # A quoted list as a call's argument (a silent mismatch before).
    in_list = exp.ListGetByValueList(None, aerospike.LIST_RETURN_COUNT, [1, 2, 5], lst)
    assert picked(exp.Eq(in_list, 2)) == [2]
    assert picked(exp.Eq(in_list, 1)) == [5, 9]
    # A bin as a call's argument, evaluated for each record.
    count_n = exp.ListGetByValue(None, aerospike.LIST_RETURN_COUNT, exp.IntBin("n"), lst)
    assert picked(exp.Eq(count_n, 1)) == [2, 5]
    assert picked(exp.GE(exp.MapGetByValue(None, aerospike.MAP_RETURN_COUNT, exp.IntBin("n"), mp), 1)) == [2]
    # List and map results compared with literals, or read by another call.
    head = exp.ListGetByIndexRange(None, aerospike.LIST_RETURN_VALUE, 0, 2, lst)
    assert picked(exp.Eq(head, [5, 6])) == [9]
    assert picked(exp.Eq(exp.ListSize(None, head), 1)) == [5]
    keys = exp.MapGetByIndexRange(None, aerospike.MAP_RETURN_KEY, 0, 2, mp)
    assert picked(exp.Eq(keys, ["a", "b"])) == [2, 5, 9]
    # A list literal against an integer bin is a bad request.
    with pytest.raises(ex.InvalidRequest):
        client.get((NS, fresh_set, 1), {"expressions": exp.Eq(exp.IntBin("n"), [1]).compile()})


def test_list_and_map_reads_in_filters(client, fresh_set):
    for i in range(1, 9):
        client.put((NS, fresh_set, i), {"n": i, "l": list(range(i)),
                                         "m": {"k": i * 10, "odd": i % 2 == 1, "name": f"n{i}"}})

    def picked(expression):
        found = client.query(NS, fresh_set).results({"expressions": expression.compile()})
        return sorted(b["n"] for _, _, b in found)

    lst, mp = exp.ListBin("l"), exp.MapBin("m")
    assert picked(exp.GT(exp.ListSize(None, lst), 5)) == [6, 7, 8]
    assert picked(exp.Eq(exp.MapSize(None, mp), 3)) == list(range(1, 9))
    # String results compare like string bins.
    name = exp.MapGetByKey(None, aerospike.MAP_RETURN_VALUE, exp.ResultType.STRING, "name", mp)
    assert picked(exp.Eq(name, "n4")) == [4]
    assert picked(exp.CmpRegex(0, "^n[67]$", name)) == [6, 7]
    assert picked(exp.Eq(exp.MapGetByKey(None, aerospike.MAP_RETURN_VALUE, exp.ResultType.INTEGER, "k", mp),
                         30)) == [3]
    assert picked(exp.Eq(exp.ListGetByIndex(None, aerospike.LIST_RETURN_VALUE, exp.ResultType.INTEGER, -1, lst),
                         4)) == [5]
    assert picked(exp.GE(exp.ListGetByValueRange(None, aerospike.LIST_RETURN_COUNT, 2, 5, lst), 3)) == [5, 6, 7, 8]
    # A context reaches into a nested value the same way as in operate.
    client.put((NS, fresh_set, 100), {"n": 100, "l": [[1, 2, 3], [4]], "m": {}})
    from aerospike_helpers import cdt_ctx
    nested = exp.ListSize([cdt_ctx.cdt_ctx_list_index(0)], lst)
    assert picked(exp.Eq(nested, 3)) == [100]
    # A list result is a list: another call can read it (for the records
    # whose first element is an int, ListSize is unknown: filtered out).
    first = exp.ListGetByIndex(None, aerospike.LIST_RETURN_VALUE, exp.ResultType.LIST, 0, lst)
    assert picked(exp.Eq(exp.ListSize(None, first), 3)) == [100]
    # A modifying call works on a copy: the filter sees the list with 9
    # appended (record 1 holds [0]); the bin itself is unchanged.
    appended = exp.ListAppend(None, None, 9, lst)
    assert picked(exp.Eq(exp.ListSize(None, appended), 2)) == [1]
    assert picked(exp.Eq(appended, [0, 9])) == [1]
    assert client.get((NS, fresh_set, 1))[2]["l"] == [0]
