"""Bolide's node-to-node frames (BLDE v1, `crates/cluster/src/codec.rs`),
built by hand for tests that speak to heartbeat and fabric ports the way a
forged or broken peer would.

A frame is a 16-byte header (magic ``BLDE``, version 1, kind, two zero
bytes, the body length and the body's CRC-32C, both little-endian) and the
body, little-endian fields: strings and byte fields carry a u32 length,
lists a u32 count.
"""

import struct

MAGIC = b"BLDE"
VERSION = 1
HEADER_BYTES = 16

# Control messages (heartbeat port), crates/cluster/src/message.rs.
PULSE = 1
JOIN_REQUEST = 2
MOVE = 3
PROPOSE = 4
PROPOSE_REPLY = 5
COMMIT = 6
EXCHANGE_DATA = 7
EXCHANGE_COMMIT = 8
ALL_DONE = 9
ALL_DONE_ACK = 10
METADATA = 11
METADATA_ACK = 12
# Fabric messages (fabric port), crates/cluster/src/fabric.rs.
HELLO = 32
REPLICA_WRITE = 33
ACK = 34
PROXY = 35
FETCH = 37
MIGRATE_START = 40
MIGRATE_RECORDS = 41
MIGRATE_DONE = 42

CHANNEL_REQUESTS = 1
CHANNEL_BULK = 2
PARTITION_COUNT = 4096


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def header(kind: int, body_bytes: int, checksum: int, version: int = VERSION,
           magic: bytes = MAGIC, reserved: int = 0) -> bytes:
    return magic + struct.pack("<BBHII", version, kind, reserved, body_bytes, checksum)


def frame(kind: int, body: bytes) -> bytes:
    return header(kind, len(body), crc32c(body)) + body


# -- fields -----------------------------------------------------------------
def u8(v): return struct.pack("<B", v)
def u16(v): return struct.pack("<H", v)
def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)


def string(s) -> bytes:
    data = s.encode() if isinstance(s, str) else s
    return u32(len(data)) + data


def endpoint(host: str, port: int) -> bytes:
    return string(host) + u16(port)


def listed(items, each=lambda item: item) -> bytes:
    items = list(items)
    return u32(len(items)) + b"".join(each(item) for item in items)


# -- control messages ---------------------------------------------------------
def pulse(sender: int, cluster_name: str, heartbeat=("127.0.0.1", 1), fabric=("127.0.0.1", 1),
          namespaces=(("test", 2),), cluster_key=0, succession=(), adjacency=(),
          protocol=2, boot_id=1, clock_ms=0) -> bytes:
    body = (u64(sender) + string(cluster_name) + u32(protocol) + u64(boot_id)
            + endpoint(*heartbeat) + endpoint(*fabric)
            + listed([heartbeat], lambda e: endpoint(*e))
            + listed(adjacency, lambda a: u64(a[0]) + endpoint(*a[1]))
            + u64(cluster_key) + listed(succession, u64)
            + listed(namespaces, lambda ns: string(ns[0]) + u8(ns[1]))
            + u64(clock_ms))
    return frame(PULSE, body)


def join_request(sender: int) -> bytes:
    return frame(JOIN_REQUEST, u64(sender))


def move(sender: int, principal: int) -> bytes:
    return frame(MOVE, u64(sender) + u64(principal))


def proposal(kind: int, sender: int, sequence: int, proposer: int, key: int, succession) -> bytes:
    """PROPOSE or COMMIT."""
    return frame(kind, u64(sender) + u64(sequence) + u64(proposer) + u64(key) + listed(succession, u64))


def namespace_versions(name: str, replication_factor: int, version_bits: int = 0,
                       regime: int = 0, rack_id: int = 0) -> bytes:
    """Every partition at one version (one run), then the sender's regime
    of the namespace (0: AP), its rack-id (0: none), its partition
    witnesses (none: an AP sender's) and no staged roster."""
    return (string(name) + u8(replication_factor)
            + listed([(version_bits, PARTITION_COUNT)], lambda run: u64(run[0]) + u16(run[1]))
            + u32(regime) + u32(rack_id) + listed([]) + u8(0))


def exchange_commit(sender: int, key: int, members) -> bytes:
    return frame(EXCHANGE_COMMIT, u64(sender) + u64(key)
                 + listed(members, lambda m: u64(m) + listed([namespace_versions("test", 2)])))


def all_done(sender: int, key: int, namespace: str, pid: int) -> bytes:
    return frame(ALL_DONE, u64(sender) + u64(key) + string(namespace) + u16(pid))


def metadata(sender: int, items, reply=False, ticket=0) -> bytes:
    """items: (module, key, value, generation, timestamp_ms, deleted);
    a non-zero ticket asks the receiver for a METADATA_ACK."""
    def item(i):
        module, key, value, generation, timestamp_ms, deleted = i
        return (string(module) + string(key) + string(value) + u32(generation)
                + u64(timestamp_ms) + u8(int(deleted)))
    return frame(METADATA, u64(sender) + listed(items, item) + u8(int(reply)) + u64(ticket))


def metadata_ack(sender: int, ticket: int) -> bytes:
    return frame(METADATA_ACK, u64(sender) + u64(ticket))


# -- fabric messages ------------------------------------------------------------
def hello(sender: int, cluster_name: str, channel: int = CHANNEL_REQUESTS) -> bytes:
    return frame(HELLO, u64(sender) + string(cluster_name) + u8(channel))


def image(digest: bytes, record: bytes, generation=1, last_update_ms=0, void_time=0, set_name=b"") -> bytes:
    return (digest + u16(generation) + u64(last_update_ms) + u32(void_time) + string(set_name)
            + u8(1) + string(record))


def replica_write(request_id: int, namespace: str, cluster_key: int, image_bytes: bytes) -> bytes:
    return frame(REPLICA_WRITE, u64(request_id) + string(namespace) + u64(cluster_key) + image_bytes)


def migrate_start(request_id: int, namespace: str, pid: int, key: int) -> bytes:
    return frame(MIGRATE_START, u64(request_id) + string(namespace) + u16(pid) + u64(key))
