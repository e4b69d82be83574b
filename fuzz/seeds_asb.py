"""Seeds for the `asb` fuzz target (fuzz/corpus/asb/), named by content
hash as libFuzzer names them.

    cargo build --release -p bolide-server -p bolide-cli
    .venv/bin/python fuzz/seeds_asb.py            # from the repository root

The seeds: asbackup's sample file and the reference's example lines; a
real backup by `bolide backup` of a node filled with every particle type,
key type, sets, UDF module and index kind (tests/python/test_backup.py),
one record a seed; and damaged variants of those (cut at every line,
bytes flipped, lengths and letters changed).
"""

from __future__ import annotations

import hashlib
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

CORPUS = ROOT / "fuzz" / "corpus" / "asb"
SAMPLE = (
    b"Version 3.1\n# namespace test\n# first-file\n+ k S 4 key1\n+ n test\n"
    b"+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ s demo\n+ g 1\n+ t 428179113\n+ b 3\n"
    b"- I foo 123\n- S bar 3 abc\n- Z baz T\n"
)
EXAMPLES = (
    b"Version 3.1\n# namespace test\n"
    b"* u L my\\ mod.lua 13 local x = 1\n\n\n"
    b"* i test demo idx_age N 1 age N\n* i test  idx_age N 1 age N\n"
    b"+ n test\n+ d 7JEZLUt/jONdXXjTS8ply6qqyWA=\n+ g 2\n+ t 0\n+ b 5\n"
    b"- L tags 12 kqIDYaIDYg==\n- M m 8 gaIDYQE=\n- S note 5 a b\nc\n- I my\\ bin 5\n- N gone\n"
)


def save(seeds: set, data: bytes) -> None:
    if len(data) <= 16384:
        seeds.add(data)


def real_backup() -> bytes:
    import aerospike
    from bolide_server import BolideServer
    from test_backup import bolide, fill_every_type

    with BolideServer() as srv, tempfile.TemporaryDirectory() as tmp:
        c = srv.client(send_bool_as=aerospike.AS_BOOL)
        fill_every_type(c, srv.port)
        module = Path(tmp) / "seed_mod.lua"
        module.write_text("function f(rec)\n  return 1\nend\n")
        c.udf_put(str(module))
        c.index_integer_create("test", "numbers", "i0", "idx_num")
        out = Path(tmp) / "b.asb"
        bolide(srv.port, "backup", "-n", "test", "-o", str(out), "-C")
        compact = out.read_bytes()
        out.unlink()
        bolide(srv.port, "backup", "-n", "test", "-o", str(out))
        return out.read_bytes() + b"\0" + compact


def main() -> None:
    rng = random.Random(24)
    seeds: set = set()
    bases = [SAMPLE, EXAMPLES, SAMPLE.replace(b"3.1", b"3.0"), SAMPLE.replace(b"3.1", b"3.2")]
    for text in real_backup().split(b"\0"):
        header, _, body = text.partition(b"\n+ ")
        head = b"Version 3.1\n# namespace test\n"
        # One record a seed (the few large ones left out).
        for block in re.split(rb"\n(?=\+ [kn] )", b"+ " + body):
            bases.append(head + block.rstrip(b"\n") + b"\n")
        bases.append(header + b"\n")
    for base in bases:
        save(seeds, base)
    for base in [SAMPLE, EXAMPLES] + rng.sample(bases[4:], min(8, len(bases) - 4)):
        lines = base.split(b"\n")
        for cut in range(1, len(lines)):
            save(seeds, b"\n".join(lines[:cut]))
        for _ in range(6):
            damaged = bytearray(base)
            damaged[rng.randrange(len(damaged))] = rng.choice(b" \n\\+-*!0123456789ABINSZ")
            save(seeds, bytes(damaged))
        save(seeds, base.replace(b" 3 ", b" 30 "))
        save(seeds, base + base[12:])
    CORPUS.mkdir(parents=True, exist_ok=True)
    for old in CORPUS.iterdir():
        old.unlink()
    for data in seeds:
        (CORPUS / hashlib.sha1(data).hexdigest()).write_bytes(data)
    print(f"{len(seeds)} seeds in {CORPUS}")


if __name__ == "__main__":
    main()
