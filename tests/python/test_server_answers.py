"""Answers that must match the Aerospike server's exactly, each found
wrong by the Go client's own test suite (issue 14). Each test failed on
the build before its fix (the plain integer increment is a control)."""

import struct

import aerospike
import pytest

import wire
from helpers import NS, SET

OP_INCR, OP_APPEND, OP_PREPEND, OP_TOUCH = 5, 9, 10, 11


def _send(port, key_name, ops, info1=0, info2=0):
    digest = aerospike.calc_digest(NS, SET, key_name)
    with wire.connect(port) as s:
        s.sendall(wire.as_msg(wire.key_fields(NS, SET, digest), ops, info1=info1, info2=info2))
        return wire.read_response(s)


def test_touch_and_header_read_answer_no_bins(server, client, key):
    """operate [touch, read header] (the Go client's GetHeaderOp): a read op
    without a bin name reads all bins only when the request says GET_ALL.
    Before the fix every bin came back."""
    client.put(key, {"a": 1, "b": "two"})
    header = [wire.op_bytes(OP_TOUCH, 0, b""), wire.op_bytes(wire.OP_READ, 0, b"")]
    r = _send(server.port, key[2], header,
              info1=wire.INFO1_READ | wire.INFO1_NOBINDATA, info2=wire.INFO2_WRITE)
    assert r.result_code == 0
    assert r.generation == 2
    assert r.ops == []
    # With GET_ALL (the Go client's GetOp) the same op reads every bin.
    r = _send(server.port, key[2], header,
              info1=wire.INFO1_READ | wire.INFO1_GET_ALL, info2=wire.INFO2_WRITE)
    assert r.result_code == 0
    assert sorted(name for _, _, name, _ in r.ops) == [b"a", b"b"]


@pytest.mark.parametrize("op_type,particle,value,expected", [
    (OP_INCR, wire.PARTICLE_STRING, b"test", "test"),
    (OP_APPEND, wire.PARTICLE_INTEGER, struct.pack(">q", 7), 7),
    (OP_PREPEND, wire.PARTICLE_FLOAT, struct.pack(">d", 1.5), 1.5),
    (OP_INCR, wire.PARTICLE_INTEGER, struct.pack(">q", 3), 3),
])
def test_modify_ops_create_a_missing_bin(server, client, key, op_type, particle, value, expected):
    """add, append and prepend on a missing bin create it with the op's
    value, whatever its type, as the server does (it answered 12)."""
    client.put(key, {"other": 1})
    r = _send(server.port, key[2], [wire.op_bytes(op_type, particle, b"new", value)],
              info2=wire.INFO2_WRITE)
    assert r.result_code == 0
    assert client.get(key)[2] == {"other": 1, "new": expected}
    # on an existing bin of another type it is still 12
    r = _send(server.port, key[2], [wire.op_bytes(op_type, 3 if particle != 3 else 1, b"new",
                                                  b"x" if particle != 3 else struct.pack(">q", 1))],
              info2=wire.INFO2_WRITE)
    assert r.result_code == 12


def test_list_range_count_minus_one_reaches_the_end(client, key):
    """A negative count is read as unsigned by the server: get-range and
    trim with count -1 reach to the end (Bolide answered 4)."""
    from aerospike_helpers.operations import list_operations as lo
    client.put(key, {"l": [1, 2, 3, 4, 5]})
    _, _, bins = client.operate(key, [lo.list_get_range("l", 1, -1)])
    assert bins["l"] == [2, 3, 4, 5]
    _, _, bins = client.operate(key, [lo.list_remove_range("l", -2, -1)])
    assert bins["l"] == 2
    assert client.get(key)[2]["l"] == [1, 2, 3]
    _, _, bins = client.operate(key, [lo.list_trim("l", 1, -1)])
    assert bins["l"] == 1  # removed
    assert client.get(key)[2]["l"] == [2, 3]


def test_create_context_at_the_end_of_an_ordered_list(client, key):
    """A create context at index n of an ordered list of n elements adds the
    new list at the end, and the ordered list re-sorts (Bolide answered 26)."""
    from aerospike_helpers import cdt_ctx
    from aerospike_helpers.operations import list_operations as lo
    ordered = {"list_order": aerospike.LIST_ORDERED}
    client.operate(key, [lo.list_append_items("l", [[7, 9, 5], [1, 2, 3], [6, 5, 4, 1]], ordered)])
    assert client.get(key)[2]["l"] == [[1, 2, 3], [6, 5, 4, 1], [7, 9, 5]]
    ctx = [cdt_ctx.cdt_ctx_list_index_create(3, aerospike.LIST_ORDERED, False)]
    _, _, bins = client.operate(key, [lo.list_append("l", 2, ordered, ctx)])
    assert bins["l"] == 1
    assert client.get(key)[2]["l"] == [[1, 2, 3], [2], [6, 5, 4, 1], [7, 9, 5]]


FIELD_BATCH_INDEX, FIELD_FILTER, INFO1_BATCH, INFO3_LAST = 41, 43, 0x08, 0x01


def _batch_answers(sock):
    """Every row answer of a batch, up to and including the LAST message:
    (info3, result code, row index, ops)."""
    answers = []
    while True:
        r = wire.read_response(sock)
        body, pos = r.body, 0
        while pos < len(body):
            (hsz, _i1, _i2, info3, _i4, code, _gen, _ttl, index, n_fields, n_ops) = \
                struct.unpack(">BBBBBBIIIHH", body[pos:pos + 22])
            pos += hsz
            for _ in range(n_fields):
                pos += 4 + struct.unpack(">I", body[pos:pos + 4])[0]
            ops = []
            for _ in range(n_ops):
                (osz, _ot, _pt, _fl, nlen) = struct.unpack(">IBBBB", body[pos:pos + 8])
                ops.append((body[pos + 8:pos + 8 + nlen], body[pos + 8 + nlen:pos + 4 + osz]))
                pos += 4 + osz
            answers.append((info3, code, index, ops))
            if info3 & INFO3_LAST:
                return answers


def _batch_with_filter(keys, filter_exp, overrun):
    """A batch read of `keys` with a filter expression, its BATCH_INDEX size
    written as the Go client writes it (`overrun` extra bytes)."""
    rows = struct.pack(">IB", len(keys), 0)
    for i, k in enumerate(keys):
        digest = aerospike.calc_digest(NS, SET, k)
        if i == 0:
            ns_field = wire.field_bytes(wire.FIELD_NAMESPACE, NS.encode())
            rows += struct.pack(">I", i) + digest + struct.pack(">BBHH", 0, 0x03, 1, 0) + ns_field
        else:
            rows += struct.pack(">I", i) + digest + bytes([1])  # repeat
    filter_field = wire.field_bytes(FIELD_FILTER, filter_exp)
    batch_field = struct.pack(">IB", len(rows) + 1 + overrun, FIELD_BATCH_INDEX) + rows
    header = struct.pack(">BBBBBBIIIHH", 22, wire.INFO1_READ | INFO1_BATCH, 0, 0, 0, 0, 0, 0, 1000, 2, 0)
    body = header + filter_field + batch_field
    return wire.proto_header(len(body)) + body


def test_batch_with_a_filter_and_an_overlong_batch_field(server, client, make_key):
    """The Go client writes a filtered batch's BATCH_INDEX size too long by
    the filter field's size; the server tolerates it. Bolide answered one
    error without LAST, so the client waited for its timeout."""
    keys = [make_key(str(i)) for i in range(3)]
    for i, k in enumerate(keys):
        client.put(k, {"n": i})
    # [GT, [BIN, INT, "n"], 0]: n > 0
    filter_exp = bytes([0x93, 0x03, 0x93, 0x51, 0x02, 0xa1, ord("n"), 0x00])
    filter_len = 5 + len(filter_exp)
    with wire.connect(server.port) as s:
        s.sendall(_batch_with_filter([k[2] for k in keys], filter_exp, filter_len))
        answers = _batch_answers(s)
    rows = {index: code for info3, code, index, _ in answers if not info3 & INFO3_LAST}
    assert rows == {0: 27, 1: 0, 2: 0}  # the first record is filtered out
    assert answers[-1][0] & INFO3_LAST and answers[-1][1] == 0


def test_a_malformed_batch_is_answered_with_last(server, client, make_key):
    """Any error answer to a batch ends it with LAST (a size off by a byte
    more than the filter field is still refused)."""
    keys = [make_key(str(i)) for i in range(2)]
    filter_exp = bytes([0xc3])
    with wire.connect(server.port) as s:
        s.sendall(_batch_with_filter([k[2] for k in keys], filter_exp, 5 + len(filter_exp) + 1))
        answers = _batch_answers(s)
    assert len(answers) == 1
    info3, code, _, _ = answers[0]
    assert info3 & INFO3_LAST and code == 4
    assert server.alive()


def test_scan_with_bin_selection_skips_records_without_those_bins(client, make_key):
    """The server does not send a record that has none of the selected
    bins; Bolide sent it with no bins."""
    set_name = "select-" + make_key("s")[2][-8:]
    for i in range(6):
        bins = {"a": i} if i % 2 == 0 else {"b": i}
        client.put((NS, set_name, i), bins)
    try:
        scan = client.scan(NS, set_name)
        scan.select("a")
        found = sorted(b["a"] for _, _, b in scan.results())
        assert found == [0, 2, 4]
        query = client.query(NS, set_name)
        query.select("b")
        assert sorted(b["b"] for _, _, b in query.results()) == [1, 3, 5]
    finally:
        for i in range(6):
            client.remove((NS, set_name, i))


def test_read_touch_ttl_percent_pushes_the_void_time(client, key):
    """A read with read_touch_ttl_percent touches a record that is in the
    last part of its TTL: its TTL starts again, its generation stays.
    Bolide ignored the percent (the record expired as if never read)."""
    import time
    client.put(key, {"a": 1}, meta={"ttl": 4})
    time.sleep(1.2)
    _, meta, _ = client.get(key, {"read_touch_ttl_percent": -1})
    assert meta["ttl"] <= 3  # never touched with -1
    _, meta, bins = client.get(key, {"read_touch_ttl_percent": 100})
    assert bins == {"a": 1}
    _, meta, _ = client.get(key)
    assert meta["ttl"] >= 4 - 1 and meta["gen"] == 1
    # 50%: not yet due one second into a fresh four-second TTL
    _, before, _ = client.get(key)
    client.get(key, {"read_touch_ttl_percent": 50})
    assert client.get(key)[1]["ttl"] == before["ttl"]
    with pytest.raises(aerospike.exception.InvalidRequest):
        client.get(key, {"read_touch_ttl_percent": 101})


def test_put_items_leaves_an_unordered_map_in_key_order(client, key):
    """The server rewrites an unordered map in key order when it adds items
    to it, so index-based results (key order) and stored order agree. The
    Go suite's map specs failed at random on Bolide, which kept the order
    the items came in."""
    from aerospike_helpers.operations import map_operations as mo
    client.put(key, {"m": {"z": 0}})
    items = {"Jim": 98, "Charlie": 55, "John": 76, "Harry": 82}
    client.operate(key, [mo.map_put_items("m", items)])
    _, _, bins = client.operate(key, [mo.map_get_by_index_range("m", 0, 10, aerospike.MAP_RETURN_KEY)])
    assert bins["m"] == ["Charlie", "Harry", "Jim", "John", "z"]
    _, _, bins = client.operate(key, [
        mo.map_get_by_key_index_range_relative("m", "Jim", 0, aerospike.MAP_RETURN_KEY, 2)])
    assert bins["m"] == ["Jim", "John"]
    # inverted: everything but the two smallest values; the complement of a
    # rank range touching an end is the rank range from the other end, and
    # answers like one, in rank order (the server's particle_map.c)
    _, _, bins = client.operate(key, [
        mo.map_get_by_rank_range("m", 0, 2, aerospike.MAP_RETURN_KEY, inverted=True)])
    assert bins["m"] == ["John", "Harry", "Jim"]
    # the complement of a range in the middle comes in stored order
    _, _, bins = client.operate(key, [
        mo.map_get_by_rank_range("m", 1, 2, aerospike.MAP_RETURN_KEY, inverted=True)])
    assert bins["m"] == ["Harry", "Jim", "z"]


@pytest.mark.parametrize("expression", [
    lambda exp: exp.Eq(exp.Add(exp.IntBin("n"), 5.0), 6),        # int bin + float
    lambda exp: exp.And(exp.StrBin("s"), exp.Eq(exp.IntBin("n"), 1)),  # a string as a boolean
    lambda exp: exp.Not(exp.IntBin("n")),
    lambda exp: exp.Eq(exp.Add(exp.IntBin("n"), 1), 2.5),        # int result vs float
    lambda exp: exp.Eq(exp.ToInt(exp.IntBin("n")), 1),              # to-int of an int
    lambda exp: exp.Eq(exp.IntAnd(exp.FloatBin("f"), 1), 1),        # bit op on a float
    lambda exp: exp.CmpRegex(0, "a.*", exp.IntBin("n")),            # regex on an int
    lambda exp: exp.Eq(exp.StrBin("s"), exp.IntBin("n")),           # two bins of two types
])
def test_badly_typed_expressions_are_refused_at_parse_time(client, key, expression):
    """The server types an expression when it compiles it: a bad request
    (4) even when the record would not reach the bad part. Bolide evaluated
    it and filtered the record out (27)."""
    from aerospike_helpers import expressions as exp
    client.put(key, {"n": 1, "s": "x", "f": 1.0})
    with pytest.raises(aerospike.exception.InvalidRequest):
        client.get(key, {"expressions": expression(exp).compile()})
    # well typed, the same shapes pass
    ok = exp.And(exp.Eq(exp.Add(exp.IntBin("n"), 5), 6), exp.Eq(exp.ToInt(exp.FloatBin("f")), 1))
    assert client.get(key, {"expressions": ok.compile()})[2]["n"] == 1
