#!/usr/bin/env python3
"""Summarizes a bench/baseline.sh results folder as markdown."""
import csv
import re
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])


def go_tps(name):
    """Median and max of the per-second total TPS lines of a Go benchmark log, skipping the first two seconds."""
    values = []
    for line in (out / f"{name}.log").read_text(errors="replace").splitlines():
        m = re.search(r"total\(tps=(\d+)", line) or re.search(r"write\(tps=(\d+) timeouts=\d+ errors=\d+ totalCount", line)
        if m:
            values.append(int(m.group(1)))
    values = values[2:] if len(values) > 4 else values
    return (statistics.median(values) if values else 0, max(values) if values else 0, len(values))


def go_errors(name):
    text = (out / f"{name}.log").read_text(errors="replace")
    return sum(int(x) for x in re.findall(r"errors=(\d+)", text))


def go_latency(name):
    """Last latency table (<=1ms >1ms ...) lines of a Go benchmark log."""
    lines = (out / f"{name}.log").read_text(errors="replace").splitlines()
    table = [l for l in lines if re.search(r"(<=|>)\d+ms|^\s*(read|write)\s", l)]
    return "\n".join(table[-3:])


def redis(name):
    rows = list(csv.reader((out / f"{name}.csv").open()))
    header, row = rows[0], rows[1]
    return dict(zip(header, row))


cpu = dict(
    line.split(" ", 1)[0:2] if " " in line else (line.split("=")[0], line.split("=")[1])
    for line in (out / "cpu.txt").read_text().splitlines()
)

print(f"### Results {out.name}\n")
print("| workload | tool | median TPS | max TPS | server CPU % | errors |")
print("|---|---|---|---|---|---|")
for name, label in [("bolide-insert", "Bolide -w I"), ("bolide-ru100", "Bolide -w RU,100"), ("bolide-ru50", "Bolide -w RU,50")]:
    med, mx, n = go_tps(name)
    c = cpu.get(name, "").replace("server_cpu_pct=", "")
    print(f"| {label} | Go benchmark | {med:.0f} | {mx} | {c} | {go_errors(name)} |")
for name, label in [("redis-set", "Redis SET"), ("redis-get", "Redis GET")]:
    r = redis(name)
    c = cpu.get(name, "").replace("server_cpu_pct=", "")
    print(f"| {label} | redis-benchmark | {float(r['rps']):.0f} | | {c} | |")
print()
print("| workload | avg ms | p50 ms | p95 ms | p99 ms | max ms |")
print("|---|---|---|---|---|---|")
for name, label in [("redis-set", "Redis SET"), ("redis-get", "Redis GET")]:
    r = redis(name)
    print(f"| {label} | {r['avg_latency_ms']} | {r['p50_latency_ms']} | {r['p95_latency_ms']} | {r['p99_latency_ms']} | {r['max_latency_ms']} |")
print()
for name in ["bolide-ru100", "bolide-ru50"]:
    print(f"Latency columns, {name} (last interval):\n```\n{go_latency(name)}\n```")
ru100 = go_tps("bolide-ru100")[0]
get = float(redis("redis-get")["rps"])
ru50 = go_tps("bolide-ru50")[0]
set_ = float(redis("redis-set")["rps"])
print(f"\nRatios: Bolide RU,100 / Redis GET = {ru100 / get:.2f}; Bolide RU,50 / mean(Redis GET, SET) = {ru50 / ((get + set_) / 2):.2f}")
for line in (out / "cpu.txt").read_text().splitlines():
    if line.startswith("bolided_rss"):
        print(f"\n{line}")
