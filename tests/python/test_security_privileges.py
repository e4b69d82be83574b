"""Every privilege against every kind of operation it might guard, through
the official Python client on a secured node: each privilege's predefined
role is given to a user of its own, who then tries each operation; the
expected outcome (allowed, or refused with 81) is written out by hand in
TABLE. Scoped privileges (a namespace, a set) are checked after."""

from __future__ import annotations

import os
import tempfile

import aerospike
import pytest
from aerospike import exception as ex
from aerospike_helpers.operations import operations

from helpers import NS
from security_helpers import client, grant_all, secured_server

SET = "priv"
OTHER_SET = "other"
MODULE = "sec_priv"
UDF_SOURCE = """
function touch_bin(rec)
    rec['t'] = 1
    aerospike:update(rec)
    return 1
end

local function one(rec)
    return 1
end

local function add(a, b)
    return a + b
end

function count(stream)
    return stream : map(one) : reduce(add)
end
"""

OPERATIONS = [
    "read", "write", "read-write", "delete", "udf-apply", "batch-read",
    "query", "query-udf", "background-ops", "background-udf",
    "truncate", "sindex-create", "udf-put", "recluster", "query-abort", "create-user",
    "roster-set", "revive",
]

# 1: allowed; 0: refused with 81 (ROLE_VIOLATION).
TABLE = {
    #                  rd wr rw dl ua br qy qu bo bu tr si up rc qa cu rs rv
    "user-admin":     [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0],
    "sys-admin":      [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1],
    "data-admin":     [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0],
    "udf-admin":      [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0],
    "sindex-admin":   [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
    "read":           [1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    "read-write":     [1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    "read-write-udf": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    "write":          [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    "truncate":       [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
}


@pytest.fixture(scope="module")
def node():
    srv = secured_server()
    srv.start()
    try:
        grant_all(srv)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def admin(node):
    c = client(node, "admin", "admin")
    directory = tempfile.mkdtemp(prefix="bolide-sec-udf-")
    path = os.path.join(directory, MODULE + ".lua")
    with open(path, "w") as f:
        f.write(UDF_SOURCE)
    c.udf_put(path)
    return c


def outcome(call) -> int:
    """0 if the call went through (whatever it answered besides a security
    refusal), else the security code it was refused with."""
    try:
        result = call()
    except ex.AerospikeError as error:
        if error.code in (80, 81, 82, 83):
            return error.code
        return 0
    if isinstance(result, str) and "ERROR:81" in result:
        return 81
    return 0


def batch_outcome(c, keys) -> int:
    records = c.batch_read(keys)
    codes = {record.result for record in records.batch_records}
    if codes == {81}:
        return 81
    assert 81 not in codes, codes
    return 0


def run(c, operation: str, key, index: int) -> int:
    module = MODULE
    if operation == "read":
        return outcome(lambda: c.get(key))
    if operation == "write":
        return outcome(lambda: c.put(key, {"v": 2}))
    if operation == "read-write":
        return outcome(lambda: c.operate(key, [operations.write("v", 3), operations.read("v")]))
    if operation == "delete":
        return outcome(lambda: c.remove(key))
    if operation == "udf-apply":
        return outcome(lambda: c.apply(key, module, "touch_bin", []))
    if operation == "batch-read":
        return batch_outcome(c, [key, (NS, SET, "shared")])
    if operation == "query":
        return outcome(lambda: c.query(NS, SET).results())
    if operation == "query-udf":
        def aggregate():
            query = c.query(NS, SET)
            query.apply(module, "count")
            return query.results()
        return outcome(aggregate)
    if operation == "background-ops":
        def background_ops():
            query = c.query(NS, SET)
            query.add_ops([operations.write("bg", 1)])
            return query.execute_background()
        return outcome(background_ops)
    if operation == "background-udf":
        def background_udf():
            query = c.query(NS, SET)
            query.apply(module, "touch_bin", [])
            return query.execute_background()
        return outcome(background_udf)
    if operation == "truncate":
        return outcome(lambda: c.truncate(NS, OTHER_SET, 0))
    if operation == "sindex-create":
        return outcome(lambda: c.index_integer_create(NS, OTHER_SET, "n", f"priv_idx_{index}"))
    if operation == "udf-put":
        directory = tempfile.mkdtemp(prefix="bolide-sec-put-")
        path = os.path.join(directory, f"put_{index}.lua")
        with open(path, "w") as f:
            f.write("function f(rec)\n    return 1\nend\n")
        return outcome(lambda: c.udf_put(path))
    if operation == "recluster":
        return outcome(lambda: c.info_random_node("recluster:"))
    if operation == "roster-set":
        # An AP namespace: a caller with service-ctrl gets ERROR:4 (not
        # strong-consistency), one without it ERROR:81 first.
        return outcome(lambda: c.info_random_node(f"roster-set:namespace={NS};nodes=A1"))
    if operation == "revive":
        return outcome(lambda: c.info_random_node("revive:"))
    if operation == "query-abort":
        return outcome(lambda: c.info_random_node("query-abort:trid=123456"))
    if operation == "create-user":
        return outcome(lambda: c.admin_create_user(f"made-{index}", "pw", []))
    raise AssertionError(operation)


@pytest.mark.time_limit(300)
@pytest.mark.parametrize("privilege", list(TABLE))
def test_every_privilege_against_every_operation(node, admin, privilege):
    user = f"u-{privilege}"
    admin.admin_create_user(user, "pw", [privilege])
    try:
        c = client(node, user, "pw")
        mismatches = []
        for index, operation in enumerate(OPERATIONS):
            key = (NS, SET, f"{privilege}-{operation}")
            admin.put(key, {"v": 1})
            admin.put((NS, SET, "shared"), {"v": 1})
            got = run(c, operation, key, hash((privilege, index)) & 0xFFFF)
            want = 0 if TABLE[privilege][index] else 81
            if got != want:
                mismatches.append(f"{operation}: got {got}, want {want}")
        assert not mismatches, f"{privilege}: " + "; ".join(mismatches)
    finally:
        admin.admin_drop_user(user)


def test_scoped_privileges_reach_their_namespace_and_set_only(node, admin):
    admin.admin_create_role("scoped", [
        {"code": aerospike.PRIV_READ, "ns": NS},
        {"code": aerospike.PRIV_WRITE, "ns": NS, "set": SET},
    ])
    admin.admin_create_user("scoped-user", "pw", ["scoped"])
    try:
        c = client(node, "scoped-user", "pw")
        admin.put((NS, OTHER_SET, "s"), {"v": 1})
        assert outcome(lambda: c.get((NS, OTHER_SET, "s"))) == 0
        assert outcome(lambda: c.put((NS, SET, "s"), {"v": 1})) == 0
        assert outcome(lambda: c.put((NS, OTHER_SET, "s"), {"v": 1})) == 81
        # Reads and writes together: read from the namespace, write from the set.
        assert outcome(lambda: c.operate((NS, SET, "s"), [operations.write("v", 2), operations.read("v")])) == 0
        assert outcome(lambda: c.operate((NS, OTHER_SET, "s"), [operations.write("v", 2), operations.read("v")])) == 81
    finally:
        admin.admin_drop_user("scoped-user")
        admin.admin_drop_role("scoped")
