#!/usr/bin/env python3
"""Per-second storage activity next to per-second throughput.

  storage_activity.py sample PORT SECONDS OUT.jsonl
      polls `namespace/test` with an info request every 0.25 s for
      SECONDS and writes one JSON line per sample (time + storage counters);
  storage_activity.py report TIMELINE.json START OUT.jsonl
      lines up a bolide-bench timeline (started at unix time START) with the
      samples and prints each second's throughput (% of the median) beside
      the blocks defragmented, records rewritten, blocks written and syncs
      in that second, then the median throughput of seconds with and
      without defragmentation.

Used by bench/timeline-noise.sh. The sampler costs one small info request
(and connection) per 0.25 s on the server.
"""

import json
import os
import statistics
import sys
import time

# The raw info request of the test suite's protocol helpers.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import wire  # noqa: E402

COUNTERS = (
    "storage-engine.defrag_blocks",
    "storage-engine.defrag_writes",
    "storage-engine.blocks_written",
    "storage-engine.partial_flushes",
    "storage-engine.syncs",
)


def sample(port: int, seconds: float, path: str) -> None:
    end = time.time() + seconds
    with open(path, "w") as out:
        while time.time() < end:
            reply = wire.info_request(port, ["namespace/test"]).get("namespace/test", "")
            now = time.time()
            fields = dict(kv.split("=", 1) for kv in reply.strip().split(";") if "=" in kv)
            row = {"t": now}
            row.update({name: int(fields.get(name, "0")) for name in COUNTERS})
            out.write(json.dumps(row) + "\n")
            out.flush()
            time.sleep(0.25)


def value_at(samples: list, t: float, name: str) -> float:
    """A counter at time t, interpolated between the samples around it."""
    before = [s for s in samples if s["t"] <= t]
    after = [s for s in samples if s["t"] >= t]
    if not before:
        return samples[0][name]
    if not after:
        return samples[-1][name]
    a, b = before[-1], after[0]
    if b["t"] == a["t"]:
        return a[name]
    return a[name] + (b[name] - a[name]) * (t - a["t"]) / (b["t"] - a["t"])


def report(timeline_path: str, start: float, samples_path: str) -> None:
    timeline = json.load(open(timeline_path))["timeline"]
    samples = [json.loads(line) for line in open(samples_path)]
    rows = []
    for point in timeline[1:-1]:  # whole seconds only, as the other reports
        t1 = start + point["elapsed_seconds"]
        t0 = t1 - 1.0
        delta = {name: value_at(samples, t1, name) - value_at(samples, t0, name) for name in COUNTERS}
        rows.append((point["elapsed_seconds"], point["total_tps"], delta))
    median = statistics.median(tps for _, tps, _ in rows)
    print(f"{'second':>6} {'ops/s':>8} {'%med':>5} {'defrag blk':>10} {'rewritten':>9} "
          f"{'blk written':>11} {'partial':>7} {'syncs':>5}")
    for second, tps, d in rows:
        mark = "  <90%" if tps < 0.9 * median else ""
        print(f"{second:6.0f} {tps:8.0f} {100 * tps / median:5.0f} "
              f"{d['storage-engine.defrag_blocks']:10.1f} {d['storage-engine.defrag_writes']:9.0f} "
              f"{d['storage-engine.blocks_written']:11.1f} {d['storage-engine.partial_flushes']:7.1f} "
              f"{d['storage-engine.syncs']:5.1f}{mark}")
    busy = [tps for _, tps, d in rows if d["storage-engine.defrag_blocks"] >= 0.5]
    idle = [tps for _, tps, d in rows if d["storage-engine.defrag_blocks"] < 0.5]
    for label, group in (("with defrag", busy), ("without defrag", idle)):
        if group:
            print(f"seconds {label}: {len(group)}, median {statistics.median(group):.0f} ops/s "
                  f"({100 * statistics.median(group) / median:.0f}% of the overall median), "
                  f"worst {min(group):.0f} ({100 * min(group) / median:.0f}%)")
        else:
            print(f"seconds {label}: none")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "sample":
        sample(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) == 5 and sys.argv[1] == "report":
        report(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(__doc__)
