"""Streams on the Redis port against a real bolided: XADD, XLEN, XRANGE,
XREVRANGE, XDEL, XTRIM, XREAD, XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM,
XAUTOCLAIM, XINFO and XSETID with Redis 7.0.15's reply bytes and error
strings (each expected reply below was captured from Debian's
redis-server 7.0.15 with the same command sequence), blocking XREAD and
XREADGROUP woken by an XADD from another connection, the stream as a
record the Aerospike client reads, and streams (with their consumer
groups) and function libraries surviving a restart of a persistent
namespace."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

redis = pytest.importorskip("redis")

from bolide_server import BolideServer, free_ports, wait_for_port, with_redis_port  # noqa: E402
from test_redis_scripting import Conn, cmd, read_reply  # noqa: E402


@pytest.fixture(scope="module")
def server():
    (redis_port,) = free_ports(1)
    srv = BolideServer()
    srv.config_text = with_redis_port(srv.config_text, redis_port).replace(
        "service {\n", "service {\n    service-threads 2\n", 1)
    srv.redis_port = redis_port
    with srv:
        wait_for_port(redis_port)
        yield srv


@pytest.fixture
def r(server):
    client = redis.Redis(port=server.redis_port, protocol=2)
    client.flushall()
    yield client
    client.close()


# One conversation, in order: (command, Redis 7.0.15's reply; None where
# the reply holds times, checked in the tests further down).
STREAM_CASES = [
    (['xgroup', 'foo'],
     b"-ERR unknown subcommand 'foo'. Try XGROUP HELP.\r\n"),
    (['xgroup', 'create', 's'],
     b"-ERR wrong number of arguments for 'xgroup|create' command\r\n"),
    (['xgroup', 'create', 's', 'g', '$', 'bogus'],
     b"-ERR unknown subcommand or wrong number of arguments for 'create'. Try XGROUP HELP.\r\n"),
    (['xgroup', 'create', 'nokey', 'g', '$'],
     b'-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.\r\n'),
    (['xgroup', 'destroy', 'nokey', 'g'],
     b'-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.\r\n'),
    (['xgroup', 'setid', 's', 'g'],
     b"-ERR wrong number of arguments for 'xgroup|setid' command\r\n"),
    (['xinfo', 'foo', 's'],
     b"-ERR unknown subcommand 'foo'. Try XINFO HELP.\r\n"),
    (['xinfo', 'stream', 'nokey'],
     b'-ERR no such key\r\n'),
    (['xinfo', 'stream'],
     b"-ERR wrong number of arguments for 'xinfo|stream' command\r\n"),
    (['xinfo', 'groups', 'nokey', 'x'],
     b"-ERR wrong number of arguments for 'xinfo|groups' command\r\n"),
    (['xread', 'count', 'x', 'streams', 's', '0'],
     b'-ERR value is not an integer or out of range\r\n'),
    (['xread', 'block', '-1', 'streams', 's', '0'],
     b'-ERR timeout is negative\r\n'),
    (['xread', 'block', 'x', 'streams', 's', '0'],
     b'-ERR timeout is not an integer or out of range\r\n'),
    (['xread', 'streams', 's'],
     b"-ERR wrong number of arguments for 'xread' command\r\n"),
    (['xread', 'count', '1', 'streams', 's', 'nokey', '0'],
     b"-ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.\r\n"),
    (['xreadgroup', 'streams', 's', '0'],
     b"-ERR wrong number of arguments for 'xreadgroup' command\r\n"),
    (['xreadgroup', 'group', 'g', 'c', 'streams', 's', '>'],
     b"-NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option\r\n"),
    (['xadd', 's', '0-0', 'f', 'v'],
     b'-ERR The ID specified in XADD must be greater than 0-0\r\n'),
    (['xadd', 's', '*', 'f'],
     b"-ERR wrong number of arguments for 'xadd' command\r\n"),
    (['xadd', 's', 'maxlen', '10', 'limit', '5', '*', 'f', 'v'],
     b'-ERR syntax error, LIMIT cannot be used without the special ~ option\r\n'),
    (['xadd', 's', 'maxlen', '-1', '*', 'f', 'v'],
     b'-ERR The MAXLEN argument must be >= 0.\r\n'),
    (['xadd', 's', 'minid', '5', 'maxlen', '4', '*', 'f', 'v'],
     b'-ERR syntax error, MAXLEN and MINID options at the same time are not compatible\r\n'),
    (['xadd', 's', 'bad', 'f', 'v'],
     b'-ERR Invalid stream ID specified as stream command argument\r\n'),
    (['xadd', 's', '1-1', 'f', 'v'],
     b'$3\r\n1-1\r\n'),
    (['xadd', 's', '1-1', 'f', 'v'],
     b'-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n'),
    (['xadd', 's', '1-*', 'f', 'v'],
     b'$3\r\n1-2\r\n'),
    (['xadd', 's', '1-*', 'f', 'v'],
     b'$3\r\n1-3\r\n'),
    (['xadd', 's', '5-*', 'g', 'w'],
     b'$3\r\n5-0\r\n'),
    (['xadd', 's', '5', 'h', 'x'],
     b'-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n'),
    (['xadd', 's', '10-3', 'a', '1', 'b', '2'],
     b'$4\r\n10-3\r\n'),
    (['xadd', 'nokey', 'nomkstream', '*', 'f', 'v'],
     b'$-1\r\n'),
    (['exists', 'nokey'],
     b':0\r\n'),
    (['xrange', 's', '-', '+'],
     b'*5\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-3\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*2\r\n$4\r\n10-3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n'),
    (['xrange', 's', '-', '+', 'count', '0'],
     b'*-1\r\n'),
    (['xrange', 's', '-', '+', 'count', '-1'],
     b'*-1\r\n'),
    (['xrange', 's', '-', '+', 'count', '2'],
     b'*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n'),
    (['xrange', 's', '(1-1', '+'],
     b'*4\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-3\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*2\r\n$4\r\n10-3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n'),
    (['xrange', 's', '-', '(10-3'],
     b'*4\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-3\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n'),
    (['xrange', 's', '(-', '+'],
     b'-ERR Invalid stream ID specified as stream command argument\r\n'),
    (['xrange', 's', '-', '(+'],
     b'-ERR Invalid stream ID specified as stream command argument\r\n'),
    (['xrange', 's', '5', '5'],
     b'*1\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n'),
    (['xrevrange', 's', '+', '-'],
     b'*5\r\n*2\r\n$4\r\n10-3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*2\r\n$3\r\n1-3\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n'),
    (['xrevrange', 's', '+', '-', 'count', '1'],
     b'*1\r\n*2\r\n$4\r\n10-3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n'),
    (['xrevrange', 's', '(10-3', '(1-1'],
     b'*3\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*2\r\n$3\r\n1-3\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n'),
    (['xrange', 's', '-', '+', 'bogus'],
     b'-ERR syntax error\r\n'),
    (['xlen', 's'],
     b':5\r\n'),
    (['xlen', 'nokey'],
     b':0\r\n'),
    (['set', 'str', 'x'],
     b'+OK\r\n'),
    (['xlen', 'str'],
     b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['xadd', 'str', '*', 'f', 'v'],
     b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['xrange', 'str', '-', '+'],
     b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['type', 's'],
     b'+stream\r\n'),
    (['xtrim', 's'],
     b"-ERR wrong number of arguments for 'xtrim' command\r\n"),
    (['xtrim', 's', 'maxlen', '1', 'limit', '1'],
     b'-ERR syntax error, LIMIT cannot be used without the special ~ option\r\n'),
    (['xtrim', 's', 'bogus', '1'],
     b'-ERR syntax error\r\n'),
    (['xpending', 's', 'g'],
     b"-NOGROUP No such key 's' or consumer group 'g'\r\n"),
    (['xclaim', 's', 'g', 'c', 'x', '0'],
     b"-NOGROUP No such key 's' or consumer group 'g'\r\n"),
    (['xautoclaim', 's', 'g', 'c', '0', '0', 'count', '0'],
     b'-ERR COUNT must be > 0\r\n'),
    (['xsetid', 's', '0'],
     b'-ERR The ID specified in XSETID is smaller than the target stream top item\r\n'),
    (['xdel', 's', 'bad'],
     b'-ERR Invalid stream ID specified as stream command argument\r\n'),
    (['xack', 's', 'g', 'bad'],
     b':0\r\n'),
    (['xgroup', 'create', 's', 'g', '0'],
     b'+OK\r\n'),
    (['xgroup', 'create', 's', 'g', '$'],
     b'-BUSYGROUP Consumer Group name already exists\r\n'),
    (['xgroup', 'createconsumer', 's', 'nog', 'c'],
     b"-NOGROUP No such consumer group 'nog' for key name 's'\r\n"),
    (['xgroup', 'createconsumer', 's', 'g', 'c'],
     b':1\r\n'),
    (['xgroup', 'createconsumer', 's', 'g', 'c'],
     b':0\r\n'),
    (['xgroup', 'delconsumer', 's', 'g', 'c'],
     b':0\r\n'),
    (['xgroup', 'create', 's', 'g2', '0', 'entriesread', '-5'],
     b'-ERR value for ENTRIESREAD must be positive or -1\r\n'),
    (['xreadgroup', 'group', 'g', 'c', 'streams', 's', '$'],
     b'-ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.\r\n'),
    (['xread', 'streams', 's', '>'],
     b'-ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.\r\n'),
    (['xinfo', 'groups', 's'],
     b'*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:0\r\n$7\r\npending\r\n:0\r\n$17\r\nlast-delivered-id\r\n$3\r\n0-0\r\n$12\r\nentries-read\r\n$-1\r\n$3\r\nlag\r\n:5\r\n'),
    (['xreadgroup', 'group', 'g', 'alice', 'count', '2', 'streams', 's', '>'],
     b'*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n'),
    (['xinfo', 'groups', 's'],
     b'*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:1\r\n$7\r\npending\r\n:2\r\n$17\r\nlast-delivered-id\r\n$3\r\n1-2\r\n$12\r\nentries-read\r\n:2\r\n$3\r\nlag\r\n:3\r\n'),
    (['xpending', 's', 'g'],
     b'*4\r\n:2\r\n$3\r\n1-1\r\n$3\r\n1-2\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n2\r\n'),
    (['xpending', 's', 'g', '-', '+', '10'], None),
    (['xpending', 's', 'g', '-', '+', 'x'],
     b'-ERR value is not an integer or out of range\r\n'),
    (['xpending', 's', 'g', '-', '+', '10', 'bob'], None),
    (['xreadgroup', 'group', 'g', 'alice', 'streams', 's', '0'],
     b'*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n'),
    (['xreadgroup', 'group', 'g', 'bob', 'noack', 'streams', 's', '>'],
     b'*1\r\n*2\r\n$1\r\ns\r\n*3\r\n*2\r\n$3\r\n1-3\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*2\r\n$4\r\n10-3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n'),
    (['xpending', 's', 'g'],
     b'*4\r\n:2\r\n$3\r\n1-1\r\n$3\r\n1-2\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n2\r\n'),
    (['xack', 's', 'g', '1-1', '1-1', '9-9'],
     b':1\r\n'),
    (['xpending', 's', 'g'],
     b'*4\r\n:1\r\n$3\r\n1-2\r\n$3\r\n1-2\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n1\r\n'),
    (['xdel', 's', '1-2'],
     b':1\r\n'),
    (['xreadgroup', 'group', 'g', 'alice', 'streams', 's', '0'],
     b'*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-2\r\n*-1\r\n'),
    (['xclaim', 's', 'g', 'bob', '0', '1-2', '5-0', 'justid'],
     b'*0\r\n'),
    (['xclaim', 's', 'g', 'bob', '0', '1-2', '5-0'],
     b'*0\r\n'),
    (['xclaim', 's', 'g', 'carol', '0', '5-0', '10-3', 'force', 'retrycount', '7'],
     b'*2\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*2\r\n$4\r\n10-3\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n'),
    (['xpending', 's', 'g', '-', '+', '10'], None),
    (['xautoclaim', 's', 'g', 'dave', '0', '0-0', 'count', '1'],
     b'*3\r\n$4\r\n10-3\r\n*1\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\ng\r\n$1\r\nw\r\n*0\r\n'),
    (['xautoclaim', 's', 'g', 'dave', '0', '0-0', 'justid'],
     b'*3\r\n$3\r\n0-0\r\n*2\r\n$3\r\n5-0\r\n$4\r\n10-3\r\n*0\r\n'),
    (['xclaim', 's', 'g', 'bob', '0', '5-0', 'bogus'],
     b"-ERR Unrecognized XCLAIM option 'bogus'\r\n"),
    (['xclaim', 's', 'g', 'bob', 'x', '5-0'],
     b'-ERR Invalid min-idle-time argument for XCLAIM\r\n'),
    (['xinfo', 'consumers', 's', 'g'], None),
    (['xinfo', 'consumers', 's', 'nog'],
     b"-NOGROUP No such consumer group 'nog' for key name 's'\r\n"),
    (['xgroup', 'setid', 's', 'g', '0', 'entriesread', '0'],
     b'+OK\r\n'),
    (['xinfo', 'groups', 's'],
     b'*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:4\r\n$7\r\npending\r\n:2\r\n$17\r\nlast-delivered-id\r\n$3\r\n0-0\r\n$12\r\nentries-read\r\n:0\r\n$3\r\nlag\r\n$-1\r\n'),
    (['xgroup', 'setid', 's', 'g', '$'],
     b'+OK\r\n'),
    (['xinfo', 'groups', 's'],
     b'*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:4\r\n$7\r\npending\r\n:2\r\n$17\r\nlast-delivered-id\r\n$4\r\n10-3\r\n$12\r\nentries-read\r\n$-1\r\n$3\r\nlag\r\n:0\r\n'),
    (['xgroup', 'delconsumer', 's', 'g', 'carol'],
     b':0\r\n'),
    (['xgroup', 'destroy', 's', 'g'],
     b':1\r\n'),
    (['xgroup', 'destroy', 's', 'g'],
     b':0\r\n'),
    (['xtrim', 's', 'maxlen', '1'],
     b':3\r\n'),
    (['xlen', 's'],
     b':1\r\n'),
    (['xtrim', 's', 'minid', '=', '11'],
     b':1\r\n'),
    (['xlen', 's'],
     b':0\r\n'),
    (['exists', 's'],
     b':1\r\n'),
    (['xrange', 's', '-', '+'],
     b'*0\r\n'),
    (['xinfo', 'groups', 's'],
     b'*0\r\n'),
    (['xsetid', 's', '10-3'],
     b'+OK\r\n'),
    (['xsetid', 's', '20-0', 'entriesadded', '1', 'maxdeletedid', '30-0'],
     b'-ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id\r\n'),
    (['xsetid', 's', '20-0', 'entriesadded', '-1'],
     b'-ERR entries_added must be positive\r\n'),
    (['xsetid', 's', '20-0', 'entriesadded', '10', 'maxdeletedid', '15-0'],
     b'+OK\r\n'),
    (['xadd', 's', 'maxlen', '~', '5', '100-1', 'x', 'y'],
     b'$5\r\n100-1\r\n'),
    (['xread', 'count', '1', 'streams', 's', 'nokey', '0', '0'],
     b'*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$5\r\n100-1\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n'),
    (['xread', 'streams', 'nokey', '0'],
     b'*-1\r\n'),
    (['xread', 'streams', 'str', '0'],
     b'-WRONGTYPE Operation against a key holding the wrong kind of value\r\n'),
    (['xgroup', 'create', 'e', 'g', '$', 'mkstream'],
     b'+OK\r\n'),
    (['xinfo', 'groups', 'e'],
     b'*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:0\r\n$7\r\npending\r\n:0\r\n$17\r\nlast-delivered-id\r\n$3\r\n0-0\r\n$12\r\nentries-read\r\n$-1\r\n$3\r\nlag\r\n:0\r\n'),
    (['xlen', 'e'],
     b':0\r\n'),
    (['exists', 'e'],
     b':1\r\n'),
    (['xreadgroup', 'group', 'g', 'c', 'block', '10', 'streams', 'e', '>'],
     b'*-1\r\n'),
    (['xread', 'block', '10', 'streams', 'e', '$'],
     b'*-1\r\n'),
    (['xgroup', 'help'],
     b"*17\r\n+XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n+CREATE <key> <groupname> <id|$> [option]\r\n+    Create a new consumer group. Options are:\r\n+    * MKSTREAM\r\n+      Create the empty stream if it does not exist.\r\n+    * ENTRIESREAD entries_read\r\n+      Set the group's entries_read counter (internal use).\r\n+CREATECONSUMER <key> <groupname> <consumer>\r\n+    Create a new consumer in the specified group.\r\n+DELCONSUMER <key> <groupname> <consumer>\r\n+    Remove the specified consumer.\r\n+DESTROY <key> <groupname>\r\n+    Remove the specified group.\r\n+SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]\r\n+    Set the current group ID and entries_read counter.\r\n+HELP\r\n+    Prints this help.\r\n"),
    (['xinfo', 'help'],
     b'*9\r\n+XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n+CONSUMERS <key> <groupname>\r\n+    Show consumers of <groupname>.\r\n+GROUPS <key>\r\n+    Show the stream consumer groups.\r\n+STREAM <key> [FULL [COUNT <count>]\r\n+    Show information about the stream.\r\n+HELP\r\n+    Prints this help.\r\n'),
    (['object', 'encoding', 'e'],
     b'$6\r\nstream\r\n'),
]

# The same kinds of replies for a RESP3 client (HELLO 3): maps for XREAD
# and XINFO, nulls as `_`. Times (13 digits) are compared as <TS>.
RESP3_CASES = [
    (['xadd', 'r3', '1-1', 'a', '1'],
     b'$3\r\n1-1\r\n'),
    (['xadd', 'r3', '2-1', 'b', '2', 'c', '3'],
     b'$3\r\n2-1\r\n'),
    (['xrange', 'r3', '-', '+'],
     b'*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\n2-1\r\n*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n'),
    (['xrange', 'r3', '-', '+', 'count', '0'],
     b'_\r\n'),
    (['xrange', 'nokey', '-', '+'],
     b'*0\r\n'),
    (['xread', 'streams', 'r3', 'nokey', '0', '0'],
     b'%1\r\n$2\r\nr3\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\n2-1\r\n*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n'),
    (['xread', 'count', '1', 'streams', 'r3', '0'],
     b'%1\r\n$2\r\nr3\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n'),
    (['xread', 'streams', 'nokey', '0'],
     b'_\r\n'),
    (['xgroup', 'create', 'r3', 'g', '0'],
     b'+OK\r\n'),
    (['xreadgroup', 'group', 'g', 'c', 'streams', 'r3', '>'],
     b'%1\r\n$2\r\nr3\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\n2-1\r\n*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n'),
    (['xpending', 'r3', 'g'],
     b'*4\r\n:2\r\n$3\r\n1-1\r\n$3\r\n2-1\r\n*1\r\n*2\r\n$1\r\nc\r\n$1\r\n2\r\n'),
    (['xpending', 'r3', 'nog'],
     b"-NOGROUP No such key 'r3' or consumer group 'nog'\r\n"),
    (['xinfo', 'groups', 'r3'],
     b'*1\r\n%6\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:1\r\n$7\r\npending\r\n:2\r\n$17\r\nlast-delivered-id\r\n$3\r\n2-1\r\n$12\r\nentries-read\r\n:2\r\n$3\r\nlag\r\n:0\r\n'),
    (['xinfo', 'stream', 'r3'],
     b'%10\r\n$6\r\nlength\r\n:2\r\n$15\r\nradix-tree-keys\r\n:1\r\n$16\r\nradix-tree-nodes\r\n:2\r\n$17\r\nlast-generated-id\r\n$3\r\n2-1\r\n$20\r\nmax-deleted-entry-id\r\n$3\r\n0-0\r\n$13\r\nentries-added\r\n:2\r\n$23\r\nrecorded-first-entry-id\r\n$3\r\n1-1\r\n$6\r\ngroups\r\n:1\r\n$11\r\nfirst-entry\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n$10\r\nlast-entry\r\n*2\r\n$3\r\n2-1\r\n*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n'),
    (['xautoclaim', 'r3', 'g', 'd', '0', '0', 'count', '1', 'justid'],
     b'*3\r\n$3\r\n2-1\r\n*1\r\n$3\r\n1-1\r\n*0\r\n'),
    (['xadd', 'nokey', 'nomkstream', '*', 'f', 'v'],
     b'_\r\n'),
    (['xinfo', 'stream', 'r3', 'full'],
     b'%9\r\n$6\r\nlength\r\n:2\r\n$15\r\nradix-tree-keys\r\n:1\r\n$16\r\nradix-tree-nodes\r\n:2\r\n$17\r\nlast-generated-id\r\n$3\r\n2-1\r\n$20\r\nmax-deleted-entry-id\r\n$3\r\n0-0\r\n$13\r\nentries-added\r\n:2\r\n$23\r\nrecorded-first-entry-id\r\n$3\r\n1-1\r\n$7\r\nentries\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\n2-1\r\n*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$6\r\ngroups\r\n*1\r\n%7\r\n$4\r\nname\r\n$1\r\ng\r\n$17\r\nlast-delivered-id\r\n$3\r\n2-1\r\n$12\r\nentries-read\r\n:2\r\n$3\r\nlag\r\n:0\r\n$9\r\npel-count\r\n:2\r\n$7\r\npending\r\n*2\r\n*4\r\n$3\r\n1-1\r\n$1\r\nd\r\n:1795878634442\r\n:1\r\n*4\r\n$3\r\n2-1\r\n$1\r\nc\r\n:1795878634441\r\n:1\r\n$9\r\nconsumers\r\n*2\r\n%4\r\n$4\r\nname\r\n$1\r\nc\r\n$9\r\nseen-time\r\n:1795878634441\r\n$9\r\npel-count\r\n:1\r\n$7\r\npending\r\n*1\r\n*3\r\n$3\r\n2-1\r\n:1795878634441\r\n:1\r\n%4\r\n$4\r\nname\r\n$1\r\nd\r\n$9\r\nseen-time\r\n:1795878634442\r\n$9\r\npel-count\r\n:1\r\n$7\r\npending\r\n*1\r\n*3\r\n$3\r\n1-1\r\n:1795878634442\r\n:1\r\n'),
    (['xpending', 'empty', 'g'],
     b"-NOGROUP No such key 'empty' or consumer group 'g'\r\n"),

]


def test_stream_commands_answer_as_redis(server, r):
    c = Conn(server.redis_port)
    try:
        for args, expected in STREAM_CASES:
            reply = c(*args)
            if expected is None:
                assert not reply.startswith(b"-"), (args, reply)
            else:
                assert reply == expected, args
    finally:
        c.close()


def test_stream_replies_in_resp3(server, r):
    times = re.compile(rb":\d{13}\r\n")
    c = Conn(server.redis_port)
    try:
        assert c("HELLO", "3").startswith(b"%7\r\n")
        for args, expected in RESP3_CASES:
            reply = c(*args)
            assert times.sub(b":<TS>\r\n", reply) == times.sub(b":<TS>\r\n", expected), args
    finally:
        c.close()


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")
def test_redis_cli_reads_and_writes_streams(server, r):
    def cli(*args: str) -> str:
        done = subprocess.run(["redis-cli", "-p", str(server.redis_port), *args],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout
    # What redis-cli prints against redis-server 7.0.15 for the same calls.
    assert cli("XADD", "cli", "1-1", "name", "ada") == "1-1\n"
    assert cli("XADD", "cli", "1-*", "name", "grace") == "1-2\n"
    assert cli("XRANGE", "cli", "-", "+") == "1-1\nname\nada\n1-2\nname\ngrace\n"
    assert cli("XLEN", "cli") == "2\n"
    assert cli("TYPE", "cli") == "stream\n"
    assert cli("XADD", "cli", "1-1", "x", "y").rstrip("\n") == \
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
    # A blocked redis-cli XREAD is woken by redis-py's XADD.
    reader = subprocess.Popen(
        ["redis-cli", "-p", str(server.redis_port), "XREAD", "BLOCK", "20000", "STREAMS", "cli", "$"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: r.info("clients")["blocked_clients"] == 1)
        assert r.xadd("cli", {"late": "1"}, id="3-0") == b"3-0"
        out, _ = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert out == "cli\n3-0\nlate\n1\n"


# ---- blocking reads ----------------------------------------------------------

def background(call):
    """Runs `call` in a thread; the thread and a list for its outcome."""
    outcome: list = []

    def run():
        try:
            outcome.append(call())
        except BaseException as error:  # noqa: BLE001  (checked by the caller)
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def wait_until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_blocking_xread_is_woken_by_xadd(server, r):
    r.xadd("bs", {"old": "1"}, id="1-0")
    reader = redis.Redis(port=server.redis_port, protocol=2, single_connection_client=True)
    writer = redis.Redis(port=server.redis_port, protocol=2, single_connection_client=True)
    try:
        # `$`: only what arrives after the read started.
        thread, outcome = background(
            lambda: reader.xread({"bs": "$"}, block=0))
        time.sleep(0.3)
        assert thread.is_alive(), outcome
        started = time.monotonic()
        assert writer.xadd("bs", {"new": "2"}, id="2-0") == b"2-0"
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert outcome == [[[b"bs", [(b"2-0", {b"new": b"2"})]]]]
        assert time.monotonic() - started < 5
        # A timeout answers nil; COUNT and several keys.
        assert reader.xread({"bs": "$", "other": "$"}, block=200) == []
        thread, outcome = background(
            lambda: reader.xread({"empty": "0-0", "bs": "2-0"}, count=1, block=10000))
        time.sleep(0.2)
        writer.xadd("bs", {"a": "1"}, id="3-0")
        writer.xadd("bs", {"b": "2"}, id="4-0")
        thread.join(timeout=30)
        assert outcome[0][0][0] == b"bs" and len(outcome[0][0][1]) == 1
    finally:
        reader.close()
        writer.close()
    # RESP3: a map, and `_` at the timeout.
    c = Conn(server.redis_port)
    try:
        c("HELLO", "3")
        assert c("XREAD", "BLOCK", "100", "STREAMS", "bs", "$") == b"_\r\n"
        assert c("XREAD", "STREAMS", "bs", "3-0") == \
            b"%1\r\n$2\r\nbs\r\n*1\r\n*2\r\n$3\r\n4-0\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n"
    finally:
        c.close()


def test_blocking_xreadgroup_is_woken_by_xadd(server, r):
    r.xgroup_create("jobs", "workers", id="$", mkstream=True)
    reader = redis.Redis(port=server.redis_port, protocol=2, single_connection_client=True)
    try:
        thread, outcome = background(lambda: reader.xreadgroup(
            "workers", "w1", {"jobs": ">"}, count=10, block=0))
        time.sleep(0.3)
        assert thread.is_alive(), outcome
        r.xadd("jobs", {"task": "a"}, id="5-0")
        thread.join(timeout=30)
        assert outcome == [[[b"jobs", [(b"5-0", {b"task": b"a"})]]]]
        pending = r.xpending("jobs", "workers")
        assert pending["pending"] == 1 and pending["consumers"] == [{"name": b"w1", "pending": 1}]
        # NOACK delivers without a pending entry.
        thread, outcome = background(lambda: reader.xreadgroup(
            "workers", "w2", {"jobs": ">"}, block=10000, noack=True))
        time.sleep(0.2)
        r.xadd("jobs", {"task": "b"}, id="6-0")
        thread.join(timeout=30)
        assert outcome[0][0][1][0][0] == b"6-0"
        assert r.xpending("jobs", "workers")["pending"] == 1
        # A read of history does not block: the consumer's pending entries.
        assert reader.xreadgroup("workers", "w1", {"jobs": "0"}, block=10000) == \
            [[b"jobs", [(b"5-0", {b"task": b"a"})]]]
        assert reader.xreadgroup("workers", "w1", {"jobs": ">"}, block=100) == []
        # The group destroyed, or the key deleted, while a reader waits:
        # Redis 7.0.15's NOGROUP and UNBLOCKED errors.
        for end, expected in (
                (lambda: r.xgroup_destroy("jobs", "gone"),
                 "NOGROUP the consumer group this client was blocked on no longer exists"),
                (lambda: r.delete("jobs"), "UNBLOCKED the stream key no longer exists")):
            r.xgroup_create("jobs", "gone", id="$", mkstream=True)
            thread, outcome = background(lambda: reader.xreadgroup(
                "gone", "w1", {"jobs": ">"}, block=20000))
            wait_until(lambda: r.info("clients")["blocked_clients"] == 1)
            assert end() == 1
            thread.join(timeout=30)
            assert not thread.is_alive()
            assert isinstance(outcome[0], redis.ResponseError), outcome
            assert str(outcome[0]) == expected
    finally:
        reader.close()


def test_blocking_reads_do_not_block_in_multi_or_scripts(server, r):
    with r.pipeline(transaction=True) as p:
        p.xread({"nothing": "$"}, block=0)
        assert p.execute() == [[]]
    with pytest.raises(redis.ResponseError,
                       match="XREAD command is not allowed with BLOCK option from scripts"):
        r.eval("return redis.call('XREAD', 'BLOCK', '0', 'STREAMS', 's', '$')", 0)
    r.xadd("s", {"f": "v"}, id="1-0")
    assert r.eval("return redis.call('xread', 'STREAMS', 's', '0')", 0) == \
        [[b"s", [[b"1-0", [b"f", b"v"]]]]]


# ---- consumer groups through redis-py -----------------------------------------

def test_consumer_groups(server, r):
    for n in range(1, 6):
        r.xadd("orders", {"n": str(n)}, id=f"{n}-0")
    assert r.xgroup_create("orders", "billing", id="0") is True
    with pytest.raises(redis.ResponseError, match="BUSYGROUP Consumer Group name already exists"):
        r.xgroup_create("orders", "billing", id="0")
    got = r.xreadgroup("billing", "alice", {"orders": ">"}, count=3)
    assert [entry[0] for entry in got[0][1]] == [b"1-0", b"2-0", b"3-0"]
    got = r.xreadgroup("billing", "bob", {"orders": ">"})
    assert [entry[0] for entry in got[0][1]] == [b"4-0", b"5-0"]
    summary = r.xpending("orders", "billing")
    assert summary == {"pending": 5, "min": b"1-0", "max": b"5-0",
                       "consumers": [{"name": b"alice", "pending": 3},
                                     {"name": b"bob", "pending": 2}]}
    assert r.xack("orders", "billing", "1-0", "9-0") == 1
    detail = r.xpending_range("orders", "billing", min="-", max="+", count=10)
    assert [(d["message_id"], d["consumer"], d["times_delivered"]) for d in detail] == [
        (b"2-0", b"alice", 1), (b"3-0", b"alice", 1), (b"4-0", b"bob", 1), (b"5-0", b"bob", 1)]
    # Age two entries by claiming them with an old delivery time, then
    # IDLE picks exactly those.
    claimed = r.xclaim("orders", "billing", "carol", 0, ["2-0", "4-0"], idle=60000)
    assert [entry[0] for entry in claimed] == [b"2-0", b"4-0"]
    idle = r.xpending_range("orders", "billing", min="-", max="+", count=10, idle=30000)
    assert [(d["message_id"], d["consumer"], d["times_delivered"]) for d in idle] == [
        (b"2-0", b"carol", 2), (b"4-0", b"carol", 2)]
    assert r.xpending_range("orders", "billing", min="-", max="+", count=10,
                            consumername="carol", idle=30000)[0]["time_since_delivered"] >= 30000
    # XAUTOCLAIM takes what has been idle long enough, from a start ID.
    next_id, entries, deleted = r.xautoclaim("orders", "billing", "dave", 30000, "0-0", count=10)
    assert next_id == b"0-0" and deleted == []
    assert [entry[0] for entry in entries] == [b"2-0", b"4-0"]
    c = Conn(server.redis_port)
    try:
        assert c("XAUTOCLAIM", "orders", "billing", "dave", "0", "0-0", "COUNT", "1", "JUSTID") \
            == b"*3\r\n$3\r\n3-0\r\n*1\r\n$3\r\n2-0\r\n*0\r\n"
    finally:
        c.close()
    # An entry deleted from the stream comes back as deleted.
    assert r.xdel("orders", "3-0") == 1
    next_id, entries, deleted = r.xautoclaim("orders", "billing", "dave", 0, "3-0", count=5)
    assert deleted == [b"3-0"]
    consumers = {c["name"]: c["pending"] for c in r.xinfo_consumers("orders", "billing")}
    assert consumers == {b"alice": 0, b"bob": 0, b"carol": 0, b"dave": 3}
    group = r.xinfo_groups("orders")[0]
    assert group["name"] == b"billing" and group["pending"] == 3
    assert group["last-delivered-id"] == b"5-0"
    assert group["entries-read"] == 5 and group["lag"] == 0
    info = r.xinfo_stream("orders")
    assert info["length"] == 4 and info["groups"] == 1
    assert info["first-entry"] == (b"1-0", {b"n": b"1"})
    assert info["last-entry"] == (b"5-0", {b"n": b"5"})
    assert info["max-deleted-entry-id"] == b"3-0" and info["entries-added"] == 5
    assert r.xgroup_delconsumer("orders", "billing", "dave") == 3
    assert r.xgroup_createconsumer("orders", "billing", "erin") == 1
    assert r.xgroup_setid("orders", "billing", id="$") is True
    assert r.xreadgroup("billing", "erin", {"orders": ">"}) == []
    assert r.xgroup_destroy("orders", "billing") == 1
    assert r.xinfo_groups("orders") == []


def test_trimming_and_an_empty_stream_keeps_its_key(server, r):
    for n in range(1, 251):
        r.xadd("t", {"n": str(n)}, id=f"{n}-0")
    # Approximate trimming removes whole nodes of 100 entries only.
    assert r.xtrim("t", maxlen=180, approximate=True) == 0
    assert r.xtrim("t", maxlen=140, approximate=True) == 100
    assert r.xlen("t") == 150
    assert r.xtrim("t", minid="240", approximate=False) == 139
    assert r.xrange("t", count=1)[0][0] == b"240-0"
    assert r.xadd("t", {"n": "x"}, id="251-0", maxlen=3, approximate=False) == b"251-0"
    assert [e[0] for e in r.xrange("t")] == [b"249-0", b"250-0", b"251-0"]
    assert r.xdel("t", "249-0", "250-0", "251-0") == 3
    assert r.xlen("t") == 0
    assert r.exists("t") == 1 and r.type("t") == b"stream"
    assert r.xinfo_stream("t")["last-generated-id"] == b"251-0"
    with pytest.raises(redis.ResponseError, match="equal or smaller than the target stream top"):
        r.xadd("t", {"n": "y"}, id="251-0")
    # SCAN TYPE and OBJECT ENCODING know streams.
    r.set("plain", "1")
    assert r.scan(0, _type="stream", count=1000)[1] == [b"t"]
    assert r.object("encoding", "t") == b"stream"


def test_a_stream_is_a_record_the_aerospike_client_reads(server, r):
    from test_redis import aerospike_key
    r.xadd("events", {"kind": "login", "user": "ada"}, id="7-1")
    r.xadd("events", {"kind": "logout"}, id="9-0")
    r.xgroup_create("events", "audit", id="0")
    r.xreadgroup("audit", "reader", {"events": ">"}, count=1)
    client = server.client()
    _, meta, bins = client.get(aerospike_key("redis0", "events"))
    stream = bins["stream"]
    assert stream["entries"] == [["7-1", ["kind", "login", "user", "ada"]],
                                 ["9-0", ["kind", "logout"]]]
    assert stream["last-id"] == "9-0" and stream["entries-added"] == 2
    assert stream["max-deleted-id"] == "0-0"
    group = stream["groups"]["audit"]
    assert group["last-delivered-id"] == "7-1" and group["entries-read"] == 1
    assert list(group["consumers"]) == ["reader"]
    assert [p[:2] for p in group["pending"]] == [["7-1", "reader"]]
    assert group["pending"][0][3] == 1


# ---- persistence -----------------------------------------------------------

PERSISTENT = """
service {{
    cluster-name bolide-streams
    work-directory @WORK@
}}
logging {{
    console {{
        context any info
    }}
}}
network {{
    service {{
        address 127.0.0.1
        port {port}
    }}
    redis {{
        port @REDIS@
    }}
}}
namespace test {{
    default-ttl 0
    nsup-period 1
    storage-engine device {{
        file @FILE@
        filesize 16M
        write-block-size 64K
        flush-max-ms 100
    }}
}}
"""


def test_streams_and_libraries_survive_a_restart(tmp_path):
    (redis_port,) = free_ports(1)
    work = tmp_path / "work"
    work.mkdir()
    text = (PERSISTENT.replace("@WORK@", str(work))
            .replace("@FILE@", str(tmp_path / "data.dat"))
            .replace("@REDIS@", str(redis_port)))
    first = BolideServer(config_text=text, ready_timeout=60)
    with first:
        wait_for_port(redis_port)
        r = redis.Redis(port=redis_port, protocol=2)
        for n in range(1, 4):
            r.xadd("kept", {"n": str(n)}, id=f"{n}-0")
        r.xgroup_create("kept", "g", id="0")
        r.xreadgroup("g", "c", {"kept": ">"}, count=2)
        r.xack("kept", "g", "1-0")
        r.xadd("emptied", {"x": "1"}, id="5-5")
        r.xdel("emptied", "5-5")
        assert r.function_load("#!lua name=keep\nredis.register_function('kept', "
                               "function(keys) return redis.call('xlen', keys[1]) end)") == b"keep"
        r.close()
        assert first.terminate() == 0
    second = BolideServer(config_text=text, ready_timeout=60)
    with second:
        wait_for_port(redis_port)
        r = redis.Redis(port=redis_port, protocol=2)
        assert [e[0] for e in r.xrange("kept")] == [b"1-0", b"2-0", b"3-0"]
        pending = r.xpending_range("kept", "g", min="-", max="+", count=10)
        assert [(p["message_id"], p["consumer"]) for p in pending] == [(b"2-0", b"c")]
        group = r.xinfo_groups("kept")[0]
        assert group["last-delivered-id"] == b"2-0" and group["entries-read"] == 2
        assert r.xreadgroup("g", "c", {"kept": ">"}) == [[b"kept", [(b"3-0", {b"n": b"3"})]]]
        assert r.exists("emptied") == 1 and r.xlen("emptied") == 0
        assert r.xinfo_stream("emptied")["max-deleted-entry-id"] == b"5-5"
        # The function library came back from the work directory.
        deadline = time.monotonic() + 30
        while True:
            try:
                assert r.fcall("kept", 1, "kept") == 3
                break
            except redis.ResponseError as error:
                assert "Function not found" in str(error)
                assert time.monotonic() < deadline, "the library did not come back"
                time.sleep(0.05)
        r.close()
