"""Lua UDFs through the official Python client against real bolided
processes (issue 14): module registration (udf-put/get/list/remove, kept
across restarts), record UDFs through apply and batch_apply, background
UDFs and write ops over scans and queries, stream UDFs (aggregations), and
hostile UDFs and arguments."""

from __future__ import annotations

import base64
import hashlib
import struct
import time
import uuid
from pathlib import Path

import aerospike
import pytest
from aerospike import exception as ex
from aerospike import predicates as p
from aerospike_helpers.operations import operations as op

import wire
from bolide_server import BolideServer
from helpers import NS, info_value, wait_for

RECORD_UDF = """
function get(rec, bin)
    return rec[bin]
end

function add(rec, bin, n)
    rec[bin] = (rec[bin] or 0) + n
    aerospike:update(rec)
    return rec[bin]
end

function make(rec, bin, value)
    rec[bin] = value
    return aerospike:create(rec)
end

function drop(rec)
    return aerospike:remove(rec)
end

function echo(rec, value)
    return value
end

function meta(rec)
    local m = map()
    m['gen'] = record.gen(rec)
    m['set'] = record.setname(rec)
    m['key'] = record.key(rec)
    m['bins'] = record.numbins(rec)
    m['exists'] = aerospike:exists(rec)
    return m
end

function shortlived(rec, ttl)
    rec['t'] = 1
    record.set_ttl(rec, ttl)
    aerospike:update(rec)
    return 0
end

function lists(rec)
    local l = list{3, 1, 2}
    list.append(l, 'x')
    local m = map{a = 1}
    m.b = l
    rec['nested'] = m
    aerospike:update(rec)
    return list.size(l)
end

function boom(rec)
    error("boom at the server")
end

function uncommitted(rec)
    rec['lost'] = 1
    return 'not written'
end
"""

HOSTILE_UDF = """
function spin(rec)
    while true do end
end

function spin_in_pcall(rec)
    while true do pcall(function() while true do end end) end
end

function hog(rec)
    local t = {}
    for i = 1, 1e9 do t[i] = string.rep('x', 1000000) .. i end
end

function bytes_hog(rec)
    local t = {}
    for i = 1, 1e6 do
        local b = bytes()
        bytes.set_byte(b, 4000000, 1)
        t[i] = b
    end
end

function escape(rec)
    return io.open('/etc/passwd'):read('*a')
end

function shell(rec)
    return os.execute('touch /tmp/bolide-udf-escaped')
end

function ok(rec)
    return 'still here'
end
"""

STREAM_UDF = """
local function add(a, b) return a + b end

function sum(s, bin)
    return s:map(function(r) return r[bin] end):reduce(add)
end

function count_where(s, bin, low)
    local function keep(r) return r[bin] >= low end
    local function one(r) return 1 end
    return s:filter(keep):map(one):reduce(add)
end

function stats(s, bin)
    local function collect(m, r)
        m['count'] = m['count'] + 1
        m['sum'] = m['sum'] + r[bin]
        return m
    end
    local function merge(a, b)
        return map{count = a['count'] + b['count'], sum = a['sum'] + b['sum']}
    end
    return s:aggregate(map{count = 0, sum = 0}, collect):reduce(merge)
end

function broken(s)
    return s:map(function(r) error('stream failure') end)
end
"""


def module_file(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


@pytest.fixture
def modules(client, tmp_path):
    """Registers modules from text; removes them afterwards."""
    names = []

    def _register(text: str, name: str | None = None) -> str:
        name = name or f"m{uuid.uuid4().hex[:10]}.lua"
        client.udf_put(str(module_file(tmp_path, name, text)))
        names.append(name)
        return name[:-4]

    yield _register
    for name in names:
        try:
            client.udf_remove(name)
        except ex.AerospikeError:
            pass


@pytest.fixture
def fresh_set(client):
    name = f"u{uuid.uuid4().hex[:10]}"
    yield name
    client.truncate(NS, name, 0)


def raw_info(server, command):
    return wire.info_request(server.port, [command])[command]


# ---------------------------------------------------------------- modules


def test_modules_are_registered_listed_read_and_removed(server, client, modules):
    module = modules(RECORD_UDF)
    listed = {entry["name"]: entry for entry in client.udf_list()}
    assert f"{module}.lua" in listed
    assert bytes(listed[f"{module}.lua"]["hash"]).decode() == hashlib.sha1(RECORD_UDF.encode()).hexdigest()
    assert client.udf_get(f"{module}.lua") == RECORD_UDF
    client.udf_remove(f"{module}.lua")
    assert f"{module}.lua" not in {entry["name"] for entry in client.udf_list()}
    assert raw_info(server, f"udf-get:filename={module}.lua") == "error=not_found"


@pytest.mark.parametrize("command, answer", [
    ("udf-put:content=AAAA;content-len=4", "error=invalid_filename"),
    ("udf-put:filename=../x.lua;content=AAAA;content-len=4", "error=invalid_filename"),
    ("udf-put:filename=nodot;content=AAAA;content-len=4", "error=invalid_filename"),
    ("udf-put:filename=a.lua;content=AAAA", "error=invalid_content_len"),
    ("udf-put:filename=a.lua;content=AAAA;content-len=3", "error=invalid_content_len"),
    ("udf-put:filename=a.lua;content=AAAA;content-len=8", "error=invalid_content"),
    ("udf-put:filename=a.lua;content=A@@A;content-len=4", "error=invalid_base64_content"),
    ("udf-put:filename=a.lua;content=AAAA;content-len=4;udf-type=PYTHON", "error=invalid_udf_type"),
    ("udf-get:filename=", "error=invalid_filename"),
    # Any name that fits is removed, or was not there: "ok", as on the
    # server; only a missing or too long one is refused.
    ("udf-remove:filename=a/b.lua", "ok"),
    ("udf-remove:name=a.lua", "error=invalid_filename"),
    ("udf-remove:filename=" + "a" * 128, "error=invalid_filename"),
    ("query-show:id=notanumber", "ERROR:4:bad job id"),
    ("query-show:id=12345", "ERROR:2:job not found"),
])
def test_hostile_module_requests_answer_errors(server, command, answer):
    assert raw_info(server, command) == answer
    assert "a.lua" not in raw_info(server, "udf-list")


def test_a_module_that_does_not_compile_is_refused_with_its_line(server):
    source = b"function f(\n  return 1 end\n"
    content = base64.b64encode(source).decode()
    answer = raw_info(server, f"udf-put:filename=bad.lua;content={content};content-len={len(content)};udf-type=LUA")
    assert answer.startswith("error=compile_error;file=bad.lua;line=2;message="), answer
    message = base64.b64decode(answer.split("message=")[1]).decode()
    assert "expected" in message
    assert "bad.lua" not in raw_info(server, "udf-list")


# ---------------------------------------------------------------- record UDFs


def test_record_udfs_read_write_create_and_remove(client, modules, fresh_set):
    module = modules(RECORD_UDF)
    key = (NS, fresh_set, "r1")
    client.put(key, {"n": 5}, policy={"key": aerospike.POLICY_KEY_SEND})
    assert client.apply(key, module, "get", ["n"]) == 5
    assert client.apply(key, module, "add", ["n", 10]) == 15
    _, meta, bins = client.get(key)
    assert bins == {"n": 15} and meta["gen"] == 2
    assert client.apply(key, module, "uncommitted", []) == "not written"
    assert client.get(key)[2] == {"n": 15}
    info = client.apply(key, module, "meta", [])
    assert info == {"gen": 2, "set": fresh_set, "key": "r1", "bins": 1, "exists": True}

    new = (NS, fresh_set, "r2")
    assert client.apply(new, module, "make", ["v", "hello"]) == 0
    assert client.get(new)[2] == {"v": "hello"}
    assert client.apply(new, module, "make", ["v", "again"]) == 1
    assert client.apply(new, module, "drop", []) == 0
    with pytest.raises(ex.RecordNotFound):
        client.get(new)

    assert client.apply(key, module, "lists", []) == 4
    assert client.get(key)[2]["nested"] == {"a": 1, "b": [3, 1, 2, "x"]}
    assert client.apply(key, module, "shortlived", [1000]) == 0
    assert 990 <= client.get(key)[1]["ttl"] <= 1000


BYTES_UDF = """
function pack(rec)
    local b = bytes(18)
    local empty = b[1] == nil and bytes.size(b) == 0
    bytes.set_int16(b, 1, 0x5555)
    bytes.set_int32(b, 3, 0x66778899)
    rec['blob'] = b
    aerospike:update(rec)
    return list{empty, bytes.size(b), tostring(b)}
end

function unpack(rec)
    local b = rec['blob']
    return list{bytes.get_int16(b, 1), bytes.get_int32_le(b, 3), bytes.get_byte(b, 7), bytes.get_type(b)}
end

function build(rec)
    local b = bytes()
    bytes.append_string(b, 'id:')
    bytes.append_int32_le(b, 258)
    bytes.append_bytes(b, rec['blob'], 2)
    return b
end
"""


def test_the_bytes_api_writes_and_reads_blob_bins_as_the_server_does(client, modules, fresh_set):
    """bytes(18) reserves 18 bytes and holds none (the server's as_bytes);
    a bin set to it stores what was written, not the capacity."""
    module = modules(BYTES_UDF)
    key = (NS, fresh_set, "b")
    client.put(key, {"n": 1})
    assert client.apply(key, module, "pack", []) == [True, 6, "55 55 66 77 88 99"]
    assert client.get(key)[2]["blob"] == b"\x55\x55\x66\x77\x88\x99"
    assert client.apply(key, module, "unpack", []) == [0x5555, -1719109786, None, 4]
    assert bytes(client.apply(key, module, "build", [])) == b"id:\x02\x01\x00\x00\x55\x55"


@pytest.fixture(scope="module")
def echo_module(client, tmp_path_factory):
    client.udf_put(str(module_file(tmp_path_factory.mktemp("echo"), "echo_values.lua", RECORD_UDF)))
    yield "echo_values"
    client.udf_remove("echo_values.lua")


@pytest.mark.parametrize("value", [
    7, -2**63, 2**63 - 1, 2.5, "text", "", b"\x00\xffbytes", bytearray(b"blob"), True, False, None,
    [1, "two", [3.0, None]], {"k": [1, 2], 7: "seven"}, aerospike.GeoJSON({"type": "Point", "coordinates": [1, 2]}),
])
def test_values_travel_to_lua_and_back_unchanged(client, echo_module, fresh_set, value):
    result = client.apply((NS, fresh_set, "echo"), echo_module, "echo", [value])
    if isinstance(value, (bytes, bytearray)):
        assert bytes(result) == bytes(value)
    elif isinstance(value, aerospike.GeoJSON):
        assert result.dumps() == value.dumps()
    else:
        assert result == value


def test_udf_failures_answer_100_with_the_error_text(client, modules, fresh_set):
    module = modules(RECORD_UDF)
    key = (NS, fresh_set, "f")
    client.put(key, {"n": 1})
    with pytest.raises(ex.UDFError) as error:
        client.apply(key, module, "boom", [])
    assert error.value.code == 100
    assert "boom at the server" in error.value.msg
    with pytest.raises(ex.UDFError) as error:
        client.apply(key, module, "no_such_function", [])
    assert "function not found" in error.value.msg
    with pytest.raises(ex.UDFError):
        client.apply(key, "no_such_module", "get", ["n"])
    assert client.get(key)[2] == {"n": 1}


def test_hostile_udfs_end_in_errors_and_the_node_stays_up(server, client, modules, fresh_set):
    module = modules(HOSTILE_UDF)
    key = (NS, fresh_set, "h")
    client.put(key, {"n": 1})
    # The memory hog gets time enough to reach the memory limit first.
    for function, text, timeout_ms in [("spin", "Timeout", 2000), ("spin_in_pcall", "Timeout", 2000),
                                       ("hog", "memory", 10000), ("bytes_hog", "memory", 10000),
                                       ("escape", "nil", 2000),
                                       ("shell", "nil", 2000)]:
        started = time.monotonic()
        with pytest.raises(ex.UDFError) as error:
            client.apply(key, module, function, [], policy={"total_timeout": timeout_ms})
        assert text in error.value.msg, (function, error.value.msg)
        assert time.monotonic() - started < timeout_ms / 1000 + 2
    assert not Path("/tmp/bolide-udf-escaped").exists()
    assert client.apply(key, module, "ok", []) == "still here"
    assert server.alive()


FIELD_UDF_FILENAME = 30
FIELD_UDF_FUNCTION = 31
FIELD_UDF_ARGLIST = 32


def test_hostile_udf_requests_answer_parameter(server, client, modules, fresh_set):
    module = modules(RECORD_UDF)
    digest = aerospike.calc_digest(NS, fresh_set, "x")
    cases = [
        [wire.field_bytes(FIELD_UDF_FILENAME, module.encode()), wire.field_bytes(FIELD_UDF_FUNCTION, b"get"),
         wire.field_bytes(FIELD_UDF_ARGLIST, b"\x91\xdd\xff\xff\xff\xff")],
        [wire.field_bytes(FIELD_UDF_FILENAME, module.encode()), wire.field_bytes(FIELD_UDF_FUNCTION, b"get"),
         wire.field_bytes(FIELD_UDF_ARGLIST, b"\x91" * 300)],
        [wire.field_bytes(FIELD_UDF_FILENAME, module.encode()), wire.field_bytes(FIELD_UDF_ARGLIST, b"\x90")],
        [wire.field_bytes(FIELD_UDF_FUNCTION, b"get"), wire.field_bytes(FIELD_UDF_ARGLIST, b"\x90")],
        [wire.field_bytes(FIELD_UDF_FILENAME, b"\xff\xfe"), wire.field_bytes(FIELD_UDF_FUNCTION, b"get")],
        [wire.field_bytes(FIELD_UDF_FILENAME, module.encode()), wire.field_bytes(FIELD_UDF_FUNCTION, b"get"),
         wire.field_bytes(FIELD_UDF_ARGLIST, b"\x92\x01")],
    ]
    for fields in cases:
        with wire.connect(server.port) as sock:
            sock.sendall(wire.as_msg(wire.key_fields(NS, fresh_set, digest) + fields, [], info2=wire.INFO2_WRITE))
            assert wire.read_response(sock).result_code == 4
    assert client.apply((NS, fresh_set, "x"), module, "echo", [1]) == 1


def test_batch_apply_runs_the_udf_on_every_key(client, modules, fresh_set):
    module = modules(RECORD_UDF)
    keys = [(NS, fresh_set, i) for i in range(20)]
    for i, key in enumerate(keys):
        client.put(key, {"n": i})
    result = client.batch_apply(keys, module, "add", ["n", 100])
    assert [record.result for record in result.batch_records] == [0] * 20
    assert [record.record[2]["SUCCESS"] for record in result.batch_records] == [i + 100 for i in range(20)]
    assert [client.get(key)[2]["n"] for key in keys] == [i + 100 for i in range(20)]


def test_udf_writes_keep_secondary_indexes_exact(client, modules, fresh_set):
    module = modules(RECORD_UDF)
    name = f"u_{uuid.uuid4().hex[:8]}"
    client.index_integer_create(NS, fresh_set, "n", name)
    try:
        for i in range(10):
            client.put((NS, fresh_set, i), {"n": i}, policy={"key": aerospike.POLICY_KEY_SEND})
        client.apply((NS, fresh_set, 3), module, "add", ["n", 100])
        client.apply((NS, fresh_set, 4), module, "drop", [])
        query = client.query(NS, fresh_set)
        query.where(p.between("n", 0, 200))
        got = sorted((key[2], bins["n"]) for key, _, bins in query.results())
        assert got == sorted([(i, i) for i in range(10) if i not in (3, 4)] + [(3, 103)])
    finally:
        client.index_remove(NS, name)


RESTART_CONFIG = """
service {{
    cluster-name bolide-udf
    work-directory @WORK@
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
}}
namespace test {{
    default-ttl 0
    nsup-period 1
    storage-engine memory {{
        data-size 64M
    }}
}}
"""


def test_modules_survive_a_restart(tmp_path):
    text = RESTART_CONFIG.replace("@WORK@", str(tmp_path / "work"))
    srv = BolideServer(config_text=text).start()
    try:
        c = srv.client()
        c.udf_put(str(module_file(tmp_path, "kept.lua", RECORD_UDF)))
        assert c.apply((NS, "k", 1), "kept", "echo", [5]) == 5
        assert srv.terminate() == 0
    finally:
        srv.stop()
    assert (tmp_path / "work" / "udf" / "lua" / "kept.lua").read_text() == RECORD_UDF
    srv = BolideServer(config_text=text).start()
    try:
        c = srv.client()
        assert "kept.lua" in {entry["name"] for entry in c.udf_list()}
        assert c.apply((NS, "k", 1), "kept", "echo", ["back"]) == "back"
    finally:
        srv.stop()


# ---------------------------------------------------------------- background jobs


def wait_job(client, job_id, module):
    return wait_for(lambda: client.job_info(job_id, module)["status"] == aerospike.JOB_STATUS_COMPLETED,
                    timeout=30, what=f"job {job_id}")


def test_background_udfs_over_scans_and_queries(client, modules, fresh_set):
    module = modules(RECORD_UDF)
    for i in range(100):
        client.put((NS, fresh_set, i), {"n": i})
    job = client.scan_apply(NS, fresh_set, module, "add", ["n", 1000])
    wait_job(client, job, aerospike.JOB_SCAN)
    assert sorted(bins["n"] for _, _, bins in client.scan(NS, fresh_set).results()) == list(range(1000, 1100))

    name = f"bg_{uuid.uuid4().hex[:8]}"
    client.index_integer_create(NS, fresh_set, "n", name)
    try:
        job = client.query_apply(NS, fresh_set, p.between("n", 1000, 1009), module, "add", ["n", 1000])
        wait_job(client, job, aerospike.JOB_QUERY)
        values = sorted(bins["n"] for _, _, bins in client.scan(NS, fresh_set).results())
        assert values == list(range(1010, 1100)) + list(range(2000, 2010))
        shown = info_value(client, f"query-show:id={job}")
        assert f"trid={job}" in shown and "status=done(ok)" in shown and "recs-succeeded=10" in shown
    finally:
        client.index_remove(NS, name)


def test_background_write_ops_over_a_query(client, fresh_set):
    for i in range(50):
        client.put((NS, fresh_set, i), {"n": i})
    name = f"ops_{uuid.uuid4().hex[:8]}"
    client.index_integer_create(NS, fresh_set, "n", name)
    try:
        query = client.query(NS, fresh_set)
        query.where(p.between("n", 10, 19))
        query.add_ops([op.write("flag", 1), op.increment("n", 100)])
        job = query.execute_background()
        wait_job(client, job, aerospike.JOB_QUERY)
        records = {key[2] if key[2] is not None else bins["n"]: bins for key, _, bins in client.scan(NS, fresh_set).results()}
        flagged = sorted(bins["n"] for bins in records.values() if bins.get("flag") == 1)
        assert flagged == list(range(110, 120))
        assert sum(1 for bins in records.values() if "flag" not in bins) == 40
    finally:
        client.index_remove(NS, name)


# ---------------------------------------------------------------- aggregations


def test_stream_udfs_aggregate_on_the_server(server, client, modules, fresh_set):
    # The client runs the last reduce itself, from the copy of the module
    # udf_put left in its Lua directory (bolide_server.CLIENT_LUA_DIR).
    module = modules(STREAM_UDF)
    for i in range(200):
        client.put((NS, fresh_set, i), {"n": i})
    query = client.query(NS, fresh_set)
    query.apply(module, "sum", ["n"])
    assert query.results() == [sum(range(200))]

    query = client.query(NS, fresh_set)
    query.apply(module, "count_where", ["n", 150])
    assert query.results() == [50]

    name = f"agg_{uuid.uuid4().hex[:8]}"
    client.index_integer_create(NS, fresh_set, "n", name)
    try:
        query = client.query(NS, fresh_set)
        query.where(p.between("n", 10, 19))
        query.apply(module, "stats", ["n"])
        assert query.results() == [{"count": 10, "sum": sum(range(10, 20))}]
    finally:
        client.index_remove(NS, name)

    query = client.query(NS, "no_such_set_here")
    query.apply(module, "sum", ["n"])
    assert query.results() == []

    query = client.query(NS, fresh_set)
    query.apply(module, "broken", [])
    with pytest.raises(ex.AerospikeError):
        query.results()
    assert server.alive()
