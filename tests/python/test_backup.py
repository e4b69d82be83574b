"""`bolide backup` / `bolide restore` against real bolided nodes, filled and
read back through the official Python client (and raw AS_MSG reads where
the exact stored bytes matter): every particle type, keys, sets, generation
and TTL, UDF modules and index definitions; the sample file of asbackup's
own tests; asrestore's conflict policies; compression and encryption; bad
files; an interrupted backup resumed with --continue.

The cluster cases (a node killed during a backup) are in
test_backup_cluster.py.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import aerospike
import pytest
from aerospike_helpers import cdt_ctx
from aerospike_helpers import expressions as exp
from aerospike_helpers.operations import hll_operations as hll
from aerospike_helpers.operations import list_operations as lops
from aerospike_helpers.operations import map_operations as mops

import wire
from bolide_server import REPO_ROOT

NS = "test"
CITRUSLEAF_EPOCH = 1262304000
KEY_FILE = REPO_ROOT / "tools" / "cli" / "tests" / "data" / "backup-key-pkcs1.pem"
OTHER_KEY_FILE = REPO_ROOT / "tools" / "cli" / "tests" / "data" / "backup-key-other.pem"

# The 168-byte sample shipped with asbackup (test/test_backup_file.asb).
SAMPLE = (
    b"Version 3.1\n# namespace test\n# first-file\n+ k S 4 key1\n+ n test\n"
    b"+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ s demo\n+ g 1\n+ t 428179113\n+ b 3\n"
    b"- I foo 123\n- S bar 3 abc\n- Z baz T\n"
)


def bolide_bin() -> str:
    env = os.environ.get("BOLIDE_CLI_BIN")
    path = Path(env) if env else REPO_ROOT / "target" / "release" / "bolide"
    assert path.is_file(), f"bolide not found at {path} (cargo build --release -p bolide-cli)"
    return str(path)


def bolide(port: int, *args: str, ok: bool = True, timeout: float = 120, **popen) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [bolide_bin(), "-p", str(port), *args], capture_output=True, timeout=timeout, **popen
    )
    if ok:
        assert result.returncode == 0, f"{args}: {result.stderr.decode(errors='replace')}"
    return result


def summary(result: subprocess.CompletedProcess) -> dict:
    """The counts of a restore's summary line."""
    text = result.stderr.decode(errors="replace")
    counts = {}
    for number, what in re.findall(r"(\d+) (written|existed|fresher on the server|expired|skipped|ignored errors|bad records|UDF modules|indexes)", text):
        counts[what.split()[0]] = int(number)
    m = re.search(r"(?:restored|validated) (\d+) records", text)
    assert m, text
    counts["read"] = int(m.group(1))
    return counts


def raw_get(port: int, ns: str, set_name, digest: bytes):
    """(result, generation, void time, [(name, particle type, value)]) of a
    record, read with an AS_MSG get of every bin: the stored bytes."""
    fields = [wire.field_bytes(wire.FIELD_NAMESPACE, ns.encode())]
    if set_name:
        fields.append(wire.field_bytes(wire.FIELD_SET, set_name.encode()))
    fields.append(wire.field_bytes(wire.FIELD_DIGEST, bytes(digest)))
    s = wire.connect(port)
    try:
        s.sendall(wire.as_msg(fields, [], info1=wire.INFO1_READ | wire.INFO1_GET_ALL))
        r = wire.read_response(s)
    finally:
        s.close()
    return r.result_code, r.generation, r.record_ttl, [(name, ptype, value) for (_o, ptype, name, value) in r.ops]


def raw_put(port: int, ns: str, set_name: str, digest: bytes, bins) -> None:
    fields = wire.key_fields(ns, set_name, digest)
    ops = [wire.op_bytes(wire.OP_WRITE, ptype, name, value) for (name, ptype, value) in bins]
    s = wire.connect(port)
    try:
        s.sendall(wire.as_msg(fields, ops, info2=wire.INFO2_WRITE))
        assert wire.read_response(s).result_code == 0
    finally:
        s.close()


def digests_in(directory: Path) -> list:
    """The digest of every record block in the uncompressed .asb files."""
    found = []
    for path in sorted(directory.glob("*.asb")):
        for line in path.read_bytes().split(b"\n"):
            # (A value could hold such a line; the test values do not,
            # but for one string with a short digest line in it.)
            if re.fullmatch(rb"\+ d [A-Za-z0-9+/]{27}=", line):
                found.append(line[4:])
    return found


def fill_every_type(c, port: int) -> list:
    """Records of every kind; returns their keys (ns, set, key) with the
    digest for the records written without a stored key."""
    keys = []
    wp = {"key": aerospike.POLICY_KEY_SEND}
    strings = ["", "a b\nc", "nul\x00byte", "héllo ☃ 𝄞", "\n+ n test\n+ d AAAA\n- I x 1\n", "x" * 100_000, "back\\slash "]
    for i, s in enumerate(strings):
        k = (NS, "strings", f"s{i}")
        c.put(k, {"s": s, "len": len(s)}, policy=wp)
        keys.append(k)
    ints = [0, 1, -1, 2**63 - 1, -(2**63), 127, 128, -129]
    k = (NS, "numbers", 1)
    c.put(k, {f"i{n}": v for n, v in enumerate(ints)}, policy=wp)
    keys.append(k)
    k = (NS, "numbers", 2)
    c.put(k, {"d0": 0.1, "d1": -0.0, "d2": 1e300, "d3": float("inf"), "d4": -5e-324, "d5": 1 / 3}, policy=wp)
    keys.append(k)
    k = (NS, "numbers", -3)
    c.put(k, {"t": True, "f": False}, policy=wp)
    keys.append(k)
    k = (NS, "blobs", b"\x00\x01binary key\xff")
    c.put(k, {"b": bytearray(range(256)), "e": bytearray(b"\n \\"), "my bin": 7}, policy=wp)
    keys.append(k)
    k = (NS, "geo", "point")
    c.put(k, {"p": aerospike.GeoJSON({"type": "Point", "coordinates": [-122.0, 37.5]}),
              "r": aerospike.GeoJSON({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]})}, policy=wp)
    keys.append(k)
    k = (NS, "cdt", "lists")
    c.put(k, {"l": [1, "two", 3.5, b"four", [5, [6]], {"seven": 7}, None, True], "empty": []}, policy=wp)
    c.operate(k, [lops.list_set_order("sorted", aerospike.LIST_ORDERED)], policy=wp)
    c.operate(k, [lops.list_append_items("sorted", [5, 1, 3], {"list_order": aerospike.LIST_ORDERED})], policy=wp)
    keys.append(k)
    k = (NS, "cdt", "maps")
    c.put(k, {"m": {"z": 1, "a": [1, 2], 3: "three", b"b": {"nested": True}}}, policy=wp)
    c.put(k, {"om": aerospike.KeyOrderedDict({"b": 2, "a": 1, "c": {"x": 1}})}, policy=wp)
    c.operate(k, [mops.map_put_items("vo", {"k1": 3, "k2": 1, "k3": 2}, {"map_order": aerospike.MAP_KEY_VALUE_ORDERED})], policy=wp)
    keys.append(k)
    k = (NS, "hll", "h")
    c.operate(k, [hll.hll_add("h", [f"item{i}" for i in range(500)], 12)], policy=wp)
    keys.append(k)
    # Blobs of every language subtype (7-12): raw AS_MSG writes.
    k = (NS, "langblobs", "subtypes")
    digest = aerospike.calc_digest(NS, "langblobs", "subtypes")
    raw_put(port, NS, "langblobs", digest, [(f"t{p}".encode(), p, bytes([p]) * 5 + b"\n ") for p in range(7, 13)])
    keys.append((NS, "langblobs", None, digest))
    # No stored key (digest only), no set.
    c.put((NS, None, "nokey"), {"v": "digest only"})
    keys.append((NS, None, None, aerospike.calc_digest(NS, "", "nokey")))
    # Generation 5, a time to live.
    k = (NS, "meta", "gen5")
    for g in range(5):
        c.put(k, {"g": g}, policy=wp)
    keys.append(k)
    k = (NS, "meta", "ttl")
    c.put(k, {"v": 1}, meta={"ttl": 100_000}, policy=wp)
    keys.append(k)
    return keys


def as_key(k):
    return (k[0], k[1], None, k[3]) if len(k) == 4 else k


def plain(bins: dict) -> dict:
    """Bins with GeoJSON values as their text (GeoJSON objects do not compare)."""
    return {n: (v.dumps() if isinstance(v, aerospike.GeoJSON) else v) for n, v in bins.items()}


def compare_records(src_client, src_port, dst_client, dst_port, keys, gen_equal=False):
    for k in keys:
        key = as_key(k)
        (_, meta_a, bins_a) = src_client.get(key) if k[1] != "langblobs" else (None, None, None)
        digest = k[3] if len(k) == 4 else bytes(src_client.exists(key)[0][3])
        code_a, gen_a, void_a, raw_a = raw_get(src_port, k[0], k[1], digest)
        code_b, gen_b, void_b, raw_b = raw_get(dst_port, k[0], k[1], digest)
        assert code_a == 0 and code_b == 0, (k, code_a, code_b)
        # The stored bytes of every bin, in order.
        assert raw_b == raw_a, k
        if abs(void_a - void_b) > 3:
            raise AssertionError(f"{k}: void time {void_a} became {void_b}")
        if gen_equal:
            assert gen_b == gen_a, k
        if bins_a is not None:
            rec_b = dst_client.get(key)
            assert plain(rec_b[2]) == plain(bins_a), k
            for name, value in bins_a.items():
                if isinstance(value, dict):
                    assert list(rec_b[2][name].items()) == list(value.items()), (k, name)


def stored_keys(c) -> list:
    """(set, user key, digest) of every record, from a scan (which returns
    the keys stored with the records)."""
    return sorted((r[0][1] or "", repr(r[0][2]), bytes(r[0][3])) for r in c.query(NS, None).results())


def test_every_type_round_trips_with_udfs_and_indexes(start_server, tmp_path):
    a = start_server()
    b = start_server()
    ca = a.client(send_bool_as=aerospike.AS_BOOL)
    cb = b.client(send_bool_as=aerospike.AS_BOOL)
    keys = fill_every_type(ca, a.port)
    module = tmp_path / "backup_mod.lua"
    module.write_text("function hello(rec)\n  return 'hi ' .. rec['v']\nend\n-- a b\n")
    ca.udf_put(str(module))
    ca.index_integer_create(NS, "numbers", "i0", "idx_num")
    ca.index_string_create(NS, None, "s", "idx_str")
    ca.index_cdt_create(NS, "cdt", "m", aerospike.INDEX_TYPE_LIST, aerospike.INDEX_NUMERIC, "idx_ctx",
                        [cdt_ctx.cdt_ctx_map_key("a")])
    adult = exp.Cond(exp.GE(exp.IntBin("len"), 5), 1, exp.Unknown()).compile()
    ca.index_expr_create(NS, "strings", aerospike.INDEX_TYPE_DEFAULT, aerospike.INDEX_NUMERIC, adult, "idx_expr")

    out = tmp_path / "backup"
    r = bolide(a.port, "backup", "-n", NS, "-d", str(out), "-w", "3")
    assert "backed up" in r.stderr.decode()
    first = (out / "test_00000.asb").read_bytes()
    # Expression index: the first file is version 3.2.
    assert first.startswith(b"Version 3.2\n# namespace test\n# first-file\n"), first[:80]
    assert b"\n* u L backup_mod.lua " in first
    assert b"\n* i test numbers idx_num N 1 i0 N\n" in first
    assert b"\n* i test  idx_str N 1 s S\n" in first
    assert b"\n* e test strings idx_expr N 1  N " in first
    ctx = base64.b64encode(bytes([0x92, 0x22, 0xa2, 0x03, ord("a")])).decode()
    assert f"\n* i test cdt idx_ctx L 1 m N {ctx}\n".encode() in first
    all_text = b"".join(p.read_bytes() for p in sorted(out.glob("*.asb")))
    # The generation and void time as the source holds them.
    block = all_text[all_text.index(b"+ k S 4 gen5\n"):]
    assert block.split(b"\n")[4] == b"+ g 5", block[:120]
    ttl_block = all_text[all_text.index(b"+ k S 3 ttl\n"):]
    void = int(ttl_block.split(b"\n")[5][4:])
    expected = int(time.time()) - CITRUSLEAF_EPOCH + ca.get((NS, "meta", "ttl"))[1]["ttl"]
    assert abs(void - expected) <= 2, (void, expected)
    assert b"- S s 11 back\\slash \n" in all_text
    assert len(digests_in(out)) == len(keys) == len(set(digests_in(out)))

    r = bolide(b.port, "restore", "-d", str(out))
    counts = summary(r)
    assert counts["written"] == len(keys), counts
    assert counts["UDF"] == 1 and counts["indexes"] == 4, counts
    compare_records(ca, a.port, cb, b.port, keys)
    # The stored user keys (of every type) and the sets, record by record.
    assert stored_keys(cb) == stored_keys(ca)
    assert len(stored_keys(cb)) == len(keys)
    # Restored records get the server's generation (asrestore's documented
    # behaviour), the backed-up one decided whether they were written.
    assert cb.get((NS, "meta", "gen5"))[1]["gen"] == 1
    assert abs(cb.get((NS, "meta", "ttl"))[1]["ttl"] - ca.get((NS, "meta", "ttl"))[1]["ttl"]) <= 3
    # Modules and indexes, as defined on the source.
    assert cb.udf_get("backup_mod.lua") == ca.udf_get("backup_mod.lua")

    def indexes(c):
        text = c.info_random_node(f"sindex-list:ns={NS}").split("\t")[-1]
        return sorted(re.sub(r":state=\w+", "", part) for part in text.strip().strip(";").split(";") if part)

    assert indexes(cb) == indexes(ca)
    # A query through the restored index finds the restored records.
    from aerospike import predicates as p
    q = cb.query(NS, "numbers")
    q.where(p.equals("i0", 0))
    assert [rec[2]["i0"] for rec in q.results()] == [0]

    # A backup of the restored node holds the same records, byte for byte,
    # but for the generation and void time lines (the server's own).
    out2 = tmp_path / "again"
    bolide(b.port, "backup", "-n", NS, "-d", str(out2), "-w", "3")

    def blocks(directory):
        found = []
        for path in sorted(directory.glob("*.asb")):
            for part in re.split(rb"\n(?=\+ [kn] )", path.read_bytes()):
                if part.startswith((b"+ k", b"+ n")):
                    found.append(re.sub(rb"\n\+ [gt] \d+", b"", part))
        return sorted(found)

    assert blocks(out2) == blocks(out)


def test_the_sample_file_restores_and_backs_up_byte_for_byte(start_server, tmp_path):
    srv = start_server()
    c = srv.client(send_bool_as=aerospike.AS_BOOL)
    sample = tmp_path / "test_backup_file.asb"
    sample.write_bytes(SAMPLE)
    assert len(SAMPLE) == 168
    # Its void time (2023-07-27) is past: asrestore skips it as expired.
    r = bolide(srv.port, "restore", "-i", str(sample))
    counts = summary(r)
    assert counts["expired"] == 1 and counts["written"] == 0, counts
    _, meta = c.exists((NS, "demo", "key1"))
    assert meta is None
    # With enough extra time to live it restores as the reference says.
    extra = int(time.time()) - CITRUSLEAF_EPOCH - 428179113 + 86400
    r = bolide(srv.port, "restore", "-i", str(sample), "--extra-ttl", str(extra))
    assert summary(r)["written"] == 1
    key, meta, bins = c.get((NS, "demo", "key1"))
    assert bins == {"foo": 123, "bar": "abc", "baz": True}
    assert stored_keys(c) == [("demo", repr("key1"), base64.b64decode("7JEZLUt/jONdXXjTS8ply6qqyWA="))]
    assert key[3] == base64.b64decode("7JEZLUt/jONdXXjTS8ply6qqyWA=")
    assert aerospike.calc_digest(NS, "demo", "key1") == base64.b64decode("7JEZLUt/jONdXXjTS8ply6qqyWA=")
    assert meta["gen"] == 1
    assert 86400 - 5 <= meta["ttl"] <= 86400
    # Backed up again: the same 168 bytes but for the void time.
    out = tmp_path / "out.asb"
    bolide(srv.port, "backup", "-n", NS, "-o", str(out))
    text = out.read_bytes()
    void = int(re.search(rb"\n\+ t (\d+)\n", text).group(1))
    assert abs(void - (428179113 + extra)) <= 2
    assert re.sub(rb"\n\+ t \d+\n", b"\n+ t 428179113\n", text) == SAMPLE


def test_conflict_policies(start_server, tmp_path):
    src = start_server()
    dst = start_server()
    cs = src.client()
    cd = dst.client()
    wp = {"key": aerospike.POLICY_KEY_SEND}
    # In the backup: generation 3, one bin.
    for name in ["older", "newer", "missing", "same"]:
        for g in range(3):
            cs.put((NS, "p", name), {"a": f"new{g}"}, policy=wp)
    out = tmp_path / "b.asb"
    bolide(src.port, "backup", "-n", NS, "-o", str(out))

    def reset():
        cd.truncate(NS, None, 0)
        time.sleep(0.3)
        cd.put((NS, "p", "older"), {"a": "old", "extra": 1}, policy=wp)  # generation 1
        for g in range(5):
            cd.put((NS, "p", "newer"), {"a": "old", "extra": 1}, policy=wp)  # generation 5
        for g in range(3):
            cd.put((NS, "p", "same"), {"a": "old"}, policy=wp)  # generation 3

    def bins(name):
        try:
            return cd.get((NS, "p", name))[2]
        except aerospike.exception.RecordNotFound:
            return None

    # Default: written where the backed-up generation is higher; bins merged.
    reset()
    counts = summary(bolide(dst.port, "restore", "-i", str(out)))
    assert (counts["written"], counts["fresher"]) == (2, 2), counts
    assert bins("older") == {"a": "new2", "extra": 1}
    assert bins("newer") == {"a": "old", "extra": 1}
    assert bins("same") == {"a": "old"}
    assert bins("missing") == {"a": "new2"}
    # --replace: the record becomes the backed-up one, still only where newer.
    reset()
    counts = summary(bolide(dst.port, "restore", "-i", str(out), "--replace"))
    assert (counts["written"], counts["fresher"]) == (2, 2), counts
    assert bins("older") == {"a": "new2"}
    assert bins("newer") == {"a": "old", "extra": 1}
    # --no-generation: written whatever the server's generation.
    reset()
    counts = summary(bolide(dst.port, "restore", "-i", str(out), "--no-generation"))
    assert counts["written"] == 4, counts
    assert bins("newer") == {"a": "new2", "extra": 1}
    # --replace --no-generation: every record is exactly the backed-up one.
    reset()
    counts = summary(bolide(dst.port, "restore", "-i", str(out), "--replace", "--no-generation"))
    assert counts["written"] == 4, counts
    assert bins("newer") == {"a": "new2"} and bins("same") == {"a": "new2"}
    # --unique: only records that do not exist.
    reset()
    counts = summary(bolide(dst.port, "restore", "-i", str(out), "--unique"))
    assert (counts["written"], counts["existed"]) == (1, 3), counts
    assert bins("older") == {"a": "old", "extra": 1}
    assert bins("missing") == {"a": "new2"}
    # --unique excludes --replace and --no-generation.
    for flag in ["--replace", "--no-generation"]:
        r = bolide(dst.port, "restore", "-i", str(out), "--unique", flag, ok=False)
        assert r.returncode != 0 and b"--unique" in r.stderr


def test_compressed_and_encrypted_round_trip_and_wrong_options(start_server, tmp_path):
    src = start_server()
    dst = start_server()
    cs = src.client()
    cd = dst.client()
    for i in range(3000):
        cs.put((NS, "enc", i), {"i": i, "text": "repetitive text " * 8})
    out = tmp_path / "enc"
    options = ["-z", "zstd", "-y", "aes256", "--encryption-key-file", str(KEY_FILE)]
    bolide(src.port, "backup", "-n", NS, "-d", str(out), "-w", "2", *options)
    files = sorted(out.glob("*.asb"))
    plain_size = 3000 * 150
    assert sum(f.stat().st_size for f in files) < plain_size / 4, "not compressed"
    for f in files:
        assert not f.read_bytes().startswith(b"Version"), f
    # Without the options, or with another key or cipher: refused, naming
    # the file, line and byte, and nothing written.
    for wrong in (
        [],
        ["-z", "zstd"],
        ["-z", "zstd", "-y", "aes256", "--encryption-key-file", str(OTHER_KEY_FILE)],
        ["-z", "zstd", "-y", "aes128", "--encryption-key-file", str(KEY_FILE)],
    ):
        r = bolide(dst.port, "restore", "-d", str(out), *wrong, ok=False)
        err = r.stderr.decode()
        assert r.returncode != 0, wrong
        assert re.search(r"test_\d{5}\.asb: (line \d+, byte \d+: |)", err), err
        assert "line 1, byte 0" in err or "decompress" in err or "cannot read" in err, err
    assert cd.info_random_node(f"namespace/{NS}").split("objects=")[1].split(";")[0] == "0"
    counts = summary(bolide(dst.port, "restore", "-d", str(out), *options))
    assert counts["written"] == 3000
    for i in range(0, 3000, 97):
        assert cd.get((NS, "enc", i))[2] == {"i": i, "text": "repetitive text " * 8}
    # Through a pipe: standard output into standard input, aes128.
    options = ["-z", "zstd", "-y", "aes128", "--encryption-key-file", str(KEY_FILE)]
    cd.truncate(NS, None, 0)
    time.sleep(0.3)
    dump = bolide(src.port, "backup", "-n", NS, "-o", "-", *options).stdout
    r = subprocess.run([bolide_bin(), "-p", str(dst.port), "restore", "-i", "-", *options],
                       input=dump, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert summary(r)["written"] == 3000


def test_bad_files_stop_at_the_line_or_are_skipped(start_server, tmp_path):
    srv = start_server()
    c = srv.client()
    records = []
    for i in range(6):
        records.append(
            f"+ k I {i}\n+ n test\n+ d {base64.b64encode(aerospike.calc_digest(NS, 'bad', i)).decode()}\n"
            f"+ s bad\n+ g 1\n+ t 0\n+ b 2\n- I i {i}\n- S s 3 a\nb\n"
        )
    header = "Version 3.1\n# namespace test\n"
    good = header + "".join(records)
    # Record 3's second bin has an unknown type letter.
    corrupt = header + "".join(records[:3]) + records[3].replace("- S s", "- Q s") + "".join(records[4:])
    path = tmp_path / "corrupt.asb"
    path.write_text(corrupt)
    r = bolide(srv.port, "restore", "-i", str(path), "-t", "1", ok=False)
    err = r.stderr.decode()
    assert r.returncode != 0
    line = 2 + 10 * 3 + 9  # header lines, three records, then record 3's ninth line
    assert f"corrupt.asb: line {line}, byte " in err, err
    assert "unknown bin type 'Q'" in err, err
    # Nothing of the bad record, nothing after it; the ones before are whole.
    for i in range(6):
        exists = c.exists((NS, "bad", i))[1] is not None
        assert exists == (i < 3), (i, err)
    counts = summary(bolide(srv.port, "restore", "-i", str(path), "--ignore-record-error"))
    # The three restored already are as fresh (generation 1) on the server.
    assert (counts["bad"], counts["written"], counts["fresher"]) == (1, 2, 3), counts
    assert c.exists((NS, "bad", 3))[1] is None
    assert c.get((NS, "bad", 5))[2] == {"i": 5, "s": "a\nb"}

    # A file cut in the middle of a value.
    c.truncate(NS, None, 0)
    time.sleep(0.3)
    cut = good.encode()[: len(good) - 3]
    path = tmp_path / "cut.asb"
    path.write_bytes(cut)
    r = bolide(srv.port, "restore", "-i", str(path), "-t", "1", ok=False)
    err = r.stderr.decode()
    assert r.returncode != 0 and "cut.asb: line " in err and "file ends inside the string" in err, err
    assert [c.exists((NS, "bad", i))[1] is not None for i in range(6)] == [True] * 5 + [False]
    counts = summary(bolide(srv.port, "restore", "-i", str(path), "--ignore-record-error"))
    assert counts["bad"] == 1, counts
    # Not a backup at all.
    path.write_bytes(b"\x00\x01garbage")
    r = bolide(srv.port, "restore", "-i", str(path), ok=False)
    assert "line 1, byte 0: not an .asb file" in r.stderr.decode()
    # A record of another namespace than --namespace maps.
    path.write_text(good)
    r = bolide(srv.port, "restore", "-i", str(path), "-n", "other,test", ok=False)
    assert "namespace test is not other" in r.stderr.decode()


def test_an_interrupted_backup_resumes_and_covers_every_record_once(start_server, tmp_path):
    srv = start_server()
    c = srv.client()
    total = 12_000
    for i in range(total):
        c.put((NS, "resume", i), {"i": i, "pad": "p" * 50})
    for signum, name in [(signal.SIGINT, "int"), (signal.SIGKILL, "kill")]:
        out = tmp_path / name
        state = out / "test.asb.state"
        args = ["backup", "-n", NS, "-d", str(out), "-w", "3", "-F", "0.05", "-L", "3000"]
        proc = subprocess.Popen([bolide_bin(), "-p", str(srv.port), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.5)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        if signum == signal.SIGINT:
            assert b"--continue" in err, err
        assert state.is_file(), err
        partial = len(digests_in(out))
        assert 0 < partial < total, partial
        r = bolide(srv.port, "backup", "-n", NS, "-d", str(out), "-w", "3", "-F", "0.05", "--continue", str(state))
        assert not state.exists()
        found = digests_in(out)
        assert len(found) == total, (name, len(found))
        assert len(set(found)) == total, name
    # The resumed backup restores whole.
    dst = start_server()
    counts = summary(bolide(dst.port, "restore", "-d", str(tmp_path / "kill")))
    assert counts["written"] == total
    cd = dst.client()
    for i in range(0, total, 211):
        assert cd.get((NS, "resume", i))[2] == {"i": i, "pad": "p" * 50}


def test_an_interrupted_single_compressed_encrypted_file_resumes(start_server, tmp_path):
    """One output file, zstd and AES: cut back to the state's length and
    continued (a new zstd frame, the keystream where it stopped)."""
    srv = start_server()
    c = srv.client()
    total = 9000
    for i in range(total):
        c.put((NS, "single", i), {"i": i})
    out = tmp_path / "one.asb"
    options = ["-z", "zstd", "-y", "aes256", "--encryption-key-file", str(KEY_FILE)]
    proc = subprocess.Popen([bolide_bin(), "-p", str(srv.port), "backup", "-n", NS, "-o", str(out), "-w", "2",
                             "-L", "3000", *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and b"--continue" in err, err
    state = Path(f"{out}.state")
    assert state.is_file()
    partial = summary(bolide(srv.port, "restore", "-i", str(out), "--validate", *options))["read"]
    assert 0 < partial < total, partial
    bolide(srv.port, "backup", "-n", NS, "-o", str(out), "-w", "2", "--continue", str(state), *options)
    assert not state.exists()
    dst = start_server()
    counts = summary(bolide(dst.port, "restore", "-i", str(out), *options))
    # Every record once: as many read as written, and all of them.
    assert counts["read"] == counts["written"] == total, counts


def test_filters_partitions_and_estimate(start_server, tmp_path):
    srv = start_server()
    c = srv.client()
    for i in range(400):
        c.put((NS, "s1" if i % 2 else "s2", i), {"a": i, "b": "x"})
    for i in range(100):
        c.put((NS, "s3", i), {"a": i})
    time.sleep(1.1)
    t = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime())
    time.sleep(1.1)
    for i in range(50):
        c.put((NS, "late", i), {"a": i})

    def count(*args):
        out = tmp_path / f"f{len(list(tmp_path.iterdir()))}.asb"
        bolide(srv.port, "backup", "-n", NS, "-o", str(out), *args)
        return out.read_bytes()

    assert count("-s", "s1").count(b"\n+ s s1\n") == 200
    text = count("-s", "s1,s3")
    assert text.count(b"\n+ s s1\n") == 200 and text.count(b"\n+ s s3\n") == 100 and b"+ s s2" not in text
    assert count("-a", t).count(b"\n+ n test\n") == 50
    assert count("-b", t).count(b"\n+ n test\n") == 500
    text = count("-s", "s3", "-x")
    assert text.count(b"\n+ b 0\n") == 100
    text = count("-s", "s3", "-B", "a")
    assert text.count(b"\n- I a ") == 100
    # Partitions: 0-2047 and 2048-4095 split the records exactly.
    low = count("-X", "0-2048").count(b"\n+ n test\n")
    high = count("-X", "2048-2048").count(b"\n+ n test\n")
    assert low + high == 550 and 0 < low < 550
    r = bolide(srv.port, "backup", "-n", NS, "--estimate")
    assert b"about 550 records" in r.stdout, r.stdout
    r = bolide(srv.port, "backup", "-n", "nope", "-o", str(tmp_path / "x.asb"), ok=False)
    assert b"namespace nope not found" in r.stderr


def test_backup_and_restore_log_in_on_secured_nodes(start_server, tmp_path):
    """-U/-P: backup and restore log in on a secured node (their own
    connections and their info requests); without a login the node refuses
    them, and a user who may only read can back up but not restore."""
    from security_helpers import client as secured_client, grant_all, secured_config

    src = start_server(config_text=secured_config())
    dst = start_server(config_text=secured_config())
    for srv in (src, dst):
        grant_all(srv)
    admin = secured_client(src, "admin", "admin")
    keys = [(NS, "sec", f"k{i}") for i in range(200)]
    for i, key in enumerate(keys):
        admin.put(key, {"i": i, "s": f"value-{i}"})
    admin.admin_create_user("reader", "reader-pw", ["read"])
    out = tmp_path / "secured.asb"

    refused = bolide(src.port, "backup", "-n", NS, "-o", str(out), ok=False)
    assert refused.returncode != 0
    assert re.search(r"not authenticated|\b80\b", refused.stderr.decode(errors="replace")), refused.stderr

    bad = bolide(src.port, "backup", "-n", NS, "-o", str(out), "-U", "admin", "-P", "wrong", ok=False)
    assert bad.returncode != 0
    assert "login as 'admin' refused" in bad.stderr.decode(errors="replace"), bad.stderr

    r = bolide(src.port, "backup", "-n", NS, "-o", str(out), "-U", "reader", "-P", "reader-pw")
    assert "backed up 200 records" in r.stderr.decode(errors="replace"), r.stderr

    # The reader may not write: its restore is refused as a role violation.
    dst_admin = secured_client(dst, "admin", "admin")
    dst_admin.admin_create_user("reader", "reader-pw", ["read"])
    denied = bolide(dst.port, "restore", "-i", str(out), "-U", "reader", "-P", "reader-pw", ok=False)
    assert denied.returncode != 0
    assert re.search(r"role violation|\b81\b", denied.stderr.decode(errors="replace")), denied.stderr
    assert all(dst_admin.exists(key)[1] is None for key in keys[:5])

    counts = summary(bolide(dst.port, "restore", "-i", str(out), "-U", "admin", "-P", "admin"))
    assert counts["read"] == 200 and counts["written"] == 200
    for i, key in enumerate(keys):
        _, _, bins = dst_admin.get(key)
        assert bins == {"i": i, "s": f"value-{i}"}
