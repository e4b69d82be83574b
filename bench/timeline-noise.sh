#!/usr/bin/env bash
# How much of the per-second throughput spread is the engine and how much
# the machine? Runs the persistence timeline load (1M keys × 100 bytes,
# RU,50 with bolide-bench, server on CPU 1, load generator on CPU 0) against
# four configurations of one namespace, one after the other:
#
#   memory       storage-engine memory (no storage at all)
#   no-defrag    device file 2G, defrag-lwm-pct 1 (defrag practically never runs)
#   defrag       device file 2G, defaults (defrag-lwm-pct 50, defrag-sleep 1000)
#   defrag-paced device file 2G, defrag-sleep 20000 (at most 50 blocks/s)
#
# and prints, for each, the median ops/s of the 40 s timeline, its worst
# second and how many seconds fell below 90% of the median. For the device
# configurations it also prints each second's storage activity (blocks
# defragmented, records rewritten, blocks written, syncs) beside its
# throughput (bench/storage_activity.py; SAMPLE=0 turns that off).
#
# SPIN=1 keeps CPU 1 (the server's) busy with an idle-priority busy loop
# during the timeline: on this VM work on one vCPU slows the other (see
# BENCHMARKS.md, Batch and scan), so the loop holds that effect constant
# instead of letting it follow the server's own idle time.
#
# TARGET=N offers a fixed N ops/s (bolide-bench -g) in the warm-up and the
# timeline instead of as many as the server takes. Below saturation the
# machine's jitter is absorbed by idle time, so a second that falls short
# of N is a stall of the server (the generator sends what fell behind as
# soon as it can, so a short stall shows as a dip and then a surplus).
#
#   bench/timeline-noise.sh [config ...]      # default: all four
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-3340}
KEYS=${KEYS:-1000000}
WORK=${WORK:-/tmp/bolide-timeline-noise}
BOLIDED=${BOLIDED:-target/release/bolided}
cargo build --release -q -p bolide-server -p bolide-bench
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(memory no-defrag defrag defrag-paced)

storage() {
  case $1 in
    memory) printf '    storage-engine memory {\n        data-size 4G\n    }\n' ;;
    no-defrag) printf '    storage-engine device {\n        file %s/test.dat\n        filesize 2G\n        defrag-lwm-pct 1\n    }\n' "$WORK" ;;
    defrag) printf '    storage-engine device {\n        file %s/test.dat\n        filesize 2G\n    }\n' "$WORK" ;;
    defrag-paced) printf '    storage-engine device {\n        file %s/test.dat\n        filesize 2G\n        defrag-sleep 20000\n    }\n' "$WORK" ;;
    *) echo "unknown config $1" >&2; exit 2 ;;
  esac
}

for config in "${configs[@]}"; do
  rm -rf "$WORK"; mkdir -p "$WORK"
  {
    printf 'service {\n    service-threads 1\n}\nnetwork {\n    service {\n        port %s\n    }\n}\n' "$PORT"
    printf 'namespace test {\n'; storage "$config"; printf '}\n'
  } > "$WORK/bolide.conf"
  taskset -c 1 "$BOLIDED" --config "$WORK/bolide.conf" > "$WORK/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
  bench="taskset -c 0 target/release/bolide-bench -p $PORT -o S:100 -c 32 --depth 1 -k $KEYS"
  $bench -w I > /dev/null
  paced=
  [ -z "${TARGET:-}" ] || paced="-g $TARGET"
  $bench -w RU,50 -d 20s $paced > /dev/null
  sampler=
  if [ "${SAMPLE:-1}" = 1 ] && [ "$config" != memory ]; then
    taskset -c 0 python3 bench/storage_activity.py sample "$PORT" 42 "$WORK/activity.jsonl" &
    sampler=$!
    sleep 0.5
  fi
  spinner=
  if [ "${SPIN:-0}" = 1 ]; then
    chrt --idle 0 taskset -c 1 sh -c 'while :; do :; done' &
    spinner=$!
  fi
  start=$(date +%s.%N)
  $bench -w RU,50 -d 40s $paced --json "$WORK/timeline.json" > /dev/null
  [ -z "$spinner" ] || { kill "$spinner"; wait "$spinner" 2>/dev/null || true; }
  [ -z "$sampler" ] || wait "$sampler"
  kill "$pid"; wait "$pid" || true
  [ -z "$sampler" ] || python3 bench/storage_activity.py report "$WORK/timeline.json" "$start" "$WORK/activity.jsonl"
  python3 - "$config" "$WORK/timeline.json" "${SPIN:-0}" "${TARGET:-0}" <<'PY'
import json, statistics, sys
config, path = sys.argv[1:3]
target = int(sys.argv[4])
tps = [p["total_tps"] for p in json.load(open(path))["timeline"]][1:-1]
m = statistics.median(tps)
label = config + (' +spin' if sys.argv[3] == '1' else '') + (f' @{target}' if target else '')
line = (f"{label:18} median {m:7.0f} ops/s, worst second {min(tps):7.0f} ({100 * min(tps) / m:.0f}%), "
        f"{sum(1 for x in tps if x < 0.9 * m)} of {len(tps)} seconds below 90%")
if target:
    line += f"; of the target: worst {100 * min(tps) / target:.0f}%, {sum(1 for x in tps if x < 0.9 * target)} seconds below 90%"
print(line)
PY
done
