#!/usr/bin/env python3
"""Linearizability of a strong-consistency namespace under faults, checked
with Porcupine: real `bolided` processes in a network namespace of their
own (nodes on 127.0.0.2, .3, ...; device storage with commit-to-device),
the official Go client recording writes and linearize reads
(tests/go/linearizability), and this harness driving the faults:

- split: nftables rules cut a minority of the nodes off from the rest,
  then a clean heal (the rules removed);
- kill: kill -9 of a minority of the nodes, then their restart;
- pause: SIGSTOP of one node (for less or more than the heartbeat
  timeout), then SIGCONT.

What it asserts, besides Porcupine finding every key's history
linearizable (a failing key's history is written out as Porcupine's HTML
visualisation):
- a minority that cannot hold every roster replica of any partition
  (fewer nodes than the replication factor) reports every partition
  unavailable and acknowledges no write: a client that knew the old map
  and a client seeded on the minority get 11, "no node" or an in-doubt
  timeout, never OK;
- after each heal, restart or resume every partition is available again
  on every node, and none is dead, without `revive`;
- each probe write kept after the heal exactly as it was answered: OK is
  there, a definite failure is not, in doubt is either;
- every key saw acknowledged writes and answered reads.

    tests/python/sc_linearizability.py                        # 3 nodes, RF 2, one round of each fault
    tests/python/sc_linearizability.py --nodes 5 --rf 3 --rounds 3
    tests/python/sc_linearizability.py --long                 # 3/RF 2, 5/RF 3 and 5/RF 2, 3 rounds each

It runs as root: outside a network namespace it creates one, runs itself
inside it and deletes it. It builds the Go recorder first (LINEARIZABILITY_BIN
to use another). Output (histories, visualisations, node logs on failure)
goes to --out (default a fresh directory under /tmp, kept). Exit status 0
when every check passed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GO_DIR = ROOT / "tests" / "go" / "linearizability"
DEFAULT_BIN = ROOT / "target" / "linearizability"
NETNS_ENV = "BOLIDE_LINEARIZABILITY_NETNS"
FAULTS = ("split", "kill", "pause")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---------------------------------------------------------------- outside
def build_recorder() -> Path:
    env_bin = os.environ.get("LINEARIZABILITY_BIN")
    if env_bin:
        return Path(env_bin)
    DEFAULT_BIN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(DEFAULT_BIN), "."], cwd=GO_DIR, check=True,
                   env={**os.environ, "GOFLAGS": os.environ.get("GOFLAGS", "") + " -buildvcs=false"})
    return DEFAULT_BIN


def run_in_netns(argv) -> int:
    """Builds the recorder (it needs the module proxy, which the namespace
    cannot reach), then runs this script inside a fresh network
    namespace."""
    if os.geteuid() != 0:
        print("the scenario creates a network namespace: run it as root", file=sys.stderr)
        return 2
    for tool in ("ip", "nft", "go"):
        if not shutil.which(tool):
            print(f"{tool} is missing (iproute2, nftables, Go)", file=sys.stderr)
            return 2
    binary = build_recorder()
    name = f"bolide-lin-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        env = {**os.environ, NETNS_ENV: name, "LINEARIZABILITY_BIN": str(binary),
               "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        return subprocess.run(["ip", "netns", "exec", name, sys.executable, str(Path(__file__).resolve()),
                               *argv], env=env).returncode
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


# ---------------------------------------------------------------- inside
sys.path.insert(0, str(HERE))


def nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)


def split(side_a, side_b) -> None:
    """Drops every packet between a node of side_a and one of side_b."""
    rules = "\n".join(f"        ip saddr {x} ip daddr {y} drop"
                      for a in side_a for b in side_b for x, y in ((a, b), (b, a)))
    nft(f"""table inet split {{
    chain input {{
        type filter hook input priority 0; policy accept;
{rules}
    }}
}}
""")


def heal() -> None:
    nft("delete table inet split")


def wait_for(predicate, what: str, timeout: float = 60.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, KeyError, ValueError, RuntimeError) as error:
            last = error
        time.sleep(interval)
    raise AssertionError(f"{what} (after {timeout:.0f} s): {last}")


class Scenario:
    def __init__(self, args, out: Path, rng: random.Random, binary: Path):
        from cluster import LocalCluster

        self.args = args
        self.out = out
        self.rng = rng
        self.binary = binary
        self.hosts = [f"127.0.0.{i + 2}" for i in range(args.nodes)]
        self.cluster = LocalCluster(
            args.nodes, hosts=self.hosts, storage="device",
            storage_extra={"commit-to-device": "true"},
            namespace={"replication-factor": str(args.rf), "strong-consistency": "true"})
        self.recorder = None
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.probes = {}  # key -> (outcome, value)
        self.probe_serial = 0
        self.down = set()  # killed or paused nodes

    # -- cluster --------------------------------------------------------
    def stats(self, index: int):
        from cluster import parse_kv

        return parse_kv(self.cluster.info(index, "namespace/test", timeout=3.0))

    def up(self):
        return [i for i in range(self.args.nodes) if i not in self.down]

    def wait_all_available(self, what: str) -> float:
        """Every running node: no partition unavailable, none dead. No
        revive is ever sent."""
        started = time.monotonic()
        nodes = self.up()
        self.cluster.wait_formed(nodes=nodes, timeout=60)

        def available():
            stats = [self.stats(i) for i in nodes]
            if all(s["unavailable_partitions"] == "0" for s in stats):
                return stats
            return None

        stats = wait_for(available, f"{what}: every partition available again", timeout=60)
        dead = {i: s["dead_partitions"] for i, s in zip(nodes, stats)}
        assert all(v == "0" for v in dead.values()), f"{what}: dead partitions {dead}"
        seconds = time.monotonic() - started
        log(f"{what}: every partition available on {len(nodes)} nodes after {seconds:.1f} s, none dead")
        return seconds

    def set_roster(self) -> None:
        c = self.cluster
        ids = ",".join(n.node_id for n in c.nodes)
        answer = c.info(0, f"roster-set:namespace=test;nodes={ids}")
        assert answer == "ok", answer
        wait_for(lambda: all("pending_roster=null" not in c.info(i, "roster:namespace=test")
                             for i in range(self.args.nodes)), "pending roster everywhere")
        answers = {c.info(i, "recluster:") for i in range(self.args.nodes)}
        assert "ok" in answers and answers <= {"ok", "ignored-by-non-principal"}, answers
        self.wait_all_available("roster set")
        c.wait_stable(timeout=90)

    # -- recorder -------------------------------------------------------
    def start_recorder(self) -> None:
        hosts = ",".join(f"{n.host}:{n.port}" for n in self.cluster.nodes)
        command = [str(self.binary), "record", "-hosts", hosts, "-keys", str(self.args.keys),
                   "-workers", str(self.args.workers), "-clients", "2",
                   "-seed", str(self.args.seed), "-out", str(self.out / "history.json"),
                   "-html", str(self.out / "html"), "-duration", "60m"]
        log(" ".join(command))
        self.recorder = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, bufsize=1)

        def pump():
            for line in self.recorder.stdout:
                self.lines.put(line.rstrip("\n"))
            self.lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        line = self.lines.get(timeout=60)
        assert line == "recording", f"the recorder did not start: {line}"

    def event(self, text: str) -> None:
        log(text)
        self.recorder.stdin.write(text + "\n")
        self.recorder.stdin.flush()

    def stop_recorder(self) -> dict:
        self.recorder.stdin.close()
        deadline = time.monotonic() + 600
        summary, output = None, []
        while True:
            line = self.lines.get(timeout=max(1.0, deadline - time.monotonic()))
            if line is None:
                break
            output.append(line)
            if line.startswith("{"):
                summary = json.loads(line)
        code = self.recorder.wait(timeout=60)
        (self.out / "recorder.log").write_text("\n".join(output) + "\n")
        assert summary is not None, f"the recorder printed no verdict (exit {code}):\n" + "\n".join(output[-20:])
        summary["exit"] = code
        return summary

    # -- probes ---------------------------------------------------------
    def client(self, seed: int):
        import aerospike

        config = self.cluster.client_config(seed=seed)
        config["policies"]["write"] = {"total_timeout": 1500, "socket_timeout": 1500, "max_retries": 0}
        config["policies"]["read"] = {"total_timeout": 2000, "max_retries": 2,
                                      "read_mode_sc": aerospike.POLICY_READ_MODE_SC_LINEARIZE}
        return aerospike.client(config).connect()

    def master_partitions(self, nodes):
        claimed = set()
        for index in nodes:
            for entry in self.cluster.info(index, "replicas").split(";"):
                name, rest = entry.split(":", 1)
                if name == "test":
                    bitmap = base64.b64decode(rest.split(",")[2])
                    claimed |= {p for p in range(4096) if bitmap[p >> 3] & (0x80 >> (p & 7))}
        return claimed

    def probe_keys(self, partitions, count: int):
        import aerospike

        keys = []
        while len(keys) < count:
            self.probe_serial += 1
            name = f"probe-{self.args.seed}-{self.probe_serial}"
            digest = aerospike.calc_digest("test", "probe", name)
            if partitions is None or ((digest[0] | digest[1] << 8) & 0xFFF) in partitions:
                keys.append(name)
        return keys

    def probe(self, client, keys, label: str):
        """Writes each key once (no retry); returns the outcomes."""
        from aerospike import exception as ex

        outcomes = []
        for name in keys:
            try:
                client.put(("test", "probe", name), {"v": name})
                outcome = "ok"
            except ex.AerospikeError as error:
                outcome = "in-doubt" if error.in_doubt else f"fail:{error.code}"
            self.probes[name] = outcome
            outcomes.append(outcome)
        log(f"{label}: {sorted((o, outcomes.count(o)) for o in set(outcomes))}")
        return outcomes

    def verify_probes(self) -> None:
        from aerospike import exception as ex

        if not self.probes:
            return
        client = self.client(seed=self.up()[0])
        try:
            for name, outcome in self.probes.items():
                deadline = time.monotonic() + 30
                while True:
                    try:
                        got = client.get(("test", "probe", name))[2]["v"]
                        break
                    except ex.RecordNotFound:
                        got = None
                        break
                    except ex.AerospikeError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                if outcome == "ok":
                    assert got == name, f"probe {name}: acknowledged, then read {got!r}"
                elif outcome.startswith("fail"):
                    assert got is None, f"probe {name}: refused definitely ({outcome}), then read {got!r}"
                else:
                    assert got in (None, name), f"probe {name}: {got!r}"
        finally:
            client.close()
        log(f"{len(self.probes)} probe writes read back as answered")
        self.probes = {}

    # -- faults -----------------------------------------------------------
    def minority(self):
        size = self.rng.randint(1, (self.args.nodes - 1) // 2)
        return sorted(self.rng.sample(range(self.args.nodes), size))

    def fault_split(self) -> None:
        c = self.cluster
        minority = self.minority()
        majority = [i for i in range(self.args.nodes) if i not in minority]
        names = lambda nodes: ",".join(c.nodes[i].node_id for i in nodes)  # noqa: E731
        blind = minority.copy()
        # A client that knows the old map, seeded on the minority, and
        # the keys of the partitions the minority masters.
        old = self.client(seed=minority[0])
        partitions = self.master_partitions(minority)
        keys = self.probe_keys(partitions, 4)
        split([self.hosts[i] for i in minority], [self.hosts[i] for i in majority])
        self.event(f"split {names(minority)} | {names(majority)}")
        can_serve = len(minority) >= self.args.rf
        early = self.probe(old, keys, "writes to the minority's partitions at the split")
        old.close()
        c.wait_formed(nodes=majority, timeout=60)
        if not can_serve:
            # Neither side can hold every roster replica of a partition
            # but the majority, which holds a majority of the roster and
            # a roster replica of each partition.
            for i in minority:
                wait_for(lambda: self.stats(i)["unavailable_partitions"] == "4096",
                         f"minority node {c.nodes[i].node_id} unavailable")
            wait_for(lambda: all(self.stats(i)["unavailable_partitions"] == "0" for i in majority),
                     "the majority serves every partition")
        seeded = self.client(seed=minority[0])
        late = self.probe(seeded, self.probe_keys(None, 6), "writes through a client seeded on the minority")
        seeded.close()
        # The client that knew the old map may have learnt the majority's
        # map by its next tend and written there: its answers are only
        # checked against what the heal leaves. The client that knows only
        # the minority must be told 11, "no node" or in doubt.
        assert all(o in ("ok", "in-doubt") or o.startswith("fail:") for o in early), early
        if not can_serve:
            for outcome in late:
                assert outcome != "ok", f"the minority {names(minority)} acknowledged a write"
                assert outcome == "in-doubt" or outcome.split(":")[1] in ("11", "-8", "-3"), outcome
        else:
            log(f"minority of {len(minority)} with RF {self.args.rf}: it may serve partitions whose "
                f"roster replicas it holds all")
        self.hold()
        heal()
        self.event(f"heal {names(blind)}")
        self.wait_all_available("after the heal")
        self.verify_probes()

    def fault_kill(self) -> None:
        c = self.cluster
        victims = self.minority()
        for i in victims:
            c.kill(i)
            self.down.add(i)
            self.event(f"kill -9 {c.nodes[i].node_id}")
        if len(victims) < self.args.rf:
            # The survivors hold a majority of the roster and a roster
            # replica of every partition.
            self.wait_all_available("minority killed")
        else:
            self.cluster.wait_formed(nodes=self.up(), timeout=60)
        self.hold()
        for i in victims:
            c.start(i)
            self.down.discard(i)
            self.event(f"restart {c.nodes[i].node_id}")
        self.wait_all_available("after the restart")

    def fault_pause(self) -> None:
        c = self.cluster
        victim = self.rng.randrange(self.args.nodes)
        # Shorter or longer than the heartbeat timeout (150 ms x 10).
        seconds = self.rng.choice([0.8, self.args.hold])
        c.pause(victim)
        self.down.add(victim)
        self.event(f"SIGSTOP {c.nodes[victim].node_id} for {seconds} s")
        time.sleep(seconds)
        c.resume(victim)
        self.down.discard(victim)
        self.event(f"SIGCONT {c.nodes[victim].node_id}")
        self.wait_all_available("after SIGCONT")

    def hold(self) -> None:
        time.sleep(self.args.hold)

    # -- run --------------------------------------------------------------
    def run(self) -> dict:
        c = self.cluster
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        c.start_all()
        c.wait_formed(timeout=60)
        self.set_roster()
        self.start_recorder()
        time.sleep(3)
        faults = []
        for _ in range(self.args.rounds):
            order = list(self.args.faults)
            self.rng.shuffle(order)
            faults += order
        for fault in faults:
            getattr(self, f"fault_{fault}")()
            time.sleep(2)
        self.event("end of faults")
        time.sleep(3)
        summary = self.stop_recorder()
        summary["faults"] = faults
        return summary

    def close(self) -> None:
        try:
            subprocess.run(["nft", "delete", "table", "inet", "split"], capture_output=True)
        finally:
            if self.recorder is not None and self.recorder.poll() is None:
                self.recorder.kill()
                self.recorder.wait(timeout=10)
            self.cluster.close()


def check_summary(summary: dict, args) -> list:
    problems = []
    if not summary["linearizable"]:
        for r in summary["results"]:
            if r["result"] != "Ok":
                problems.append(f"key {r['key']}: {r['result']} ({r['ops']} operations), "
                                f"visualisation {r.get('visualization')}")
    for k in summary["per_key"]:
        if k["writes_ok"] < 5 or k["reads_ok"] < 5:
            problems.append(f"key {k['key']}: too little history ({k['writes_ok']} writes "
                            f"acknowledged, {k['reads_ok']} reads answered)")
    if len(summary["per_key"]) != args.keys:
        problems.append(f"{len(summary['per_key'])} keys in the history, expected {args.keys}")
    return problems


def run_one(args, out: Path, binary: Path) -> bool:
    rng = random.Random(args.seed)
    out.mkdir(parents=True, exist_ok=True)
    log(f"{args.nodes} nodes, RF {args.rf}, faults {','.join(args.faults)} x {args.rounds}, "
        f"seed {args.seed}, output {out}")
    scenario = Scenario(args, out, rng, binary)
    ok = False
    try:
        summary = scenario.run()
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        problems = check_summary(summary, args)
        counts = summary["counts"]
        log(f"history: {counts['writes_ok']} writes acknowledged, {counts['writes_in_doubt']} in doubt, "
            f"{counts['writes_failed']} refused, {counts['reads_ok']} linearize reads answered, "
            f"{counts['reads_failed']} failed; codes {counts['codes']}; "
            f"checked in {summary['check_seconds']:.1f} s")
        for problem in problems:
            log(f"FAILED: {problem}")
        ok = not problems
        if ok:
            log(f"linearizable: {len(summary['per_key'])} keys, every check passed")
    except Exception as error:  # noqa: BLE001  (report, keep the logs)
        log(f"FAILED: {type(error).__name__}: {error}")
    finally:
        if not ok:
            for node in scenario.cluster.nodes:
                shutil.copy(node.log_path, out / f"{node.node_id}.log") if node.log_path.exists() else None
        scenario.close()
    return ok


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rf", type=int, default=2)
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated: split,kill,pause")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--hold", type=float, default=6.0, help="seconds each fault lasts")
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--long", action="store_true",
                        help="3 nodes RF 2, 5 nodes RF 3 and 5 nodes RF 2, --rounds 3 each")
    args = parser.parse_args(argv)
    if os.environ.get(NETNS_ENV) is None:
        return run_in_netns(argv)
    args.faults = [f for f in args.faults.split(",") if f]
    for fault in args.faults:
        if fault not in FAULTS:
            parser.error(f"unknown fault {fault}")
    if args.seed is None:
        args.seed = random.randrange(1, 1 << 30)
    out = args.out or Path(tempfile.mkdtemp(prefix="bolide-linearizability-"))
    binary = Path(os.environ["LINEARIZABILITY_BIN"])
    if not args.long:
        return 0 if run_one(args, out, binary) else 1
    failures = []
    for nodes, rf in ((3, 2), (5, 3), (5, 2)):
        one = argparse.Namespace(**{**vars(args), "nodes": nodes, "rf": rf,
                                    "rounds": max(args.rounds, 3)})
        if not run_one(one, out / f"{nodes}-nodes-rf{rf}", binary):
            failures.append(f"{nodes} nodes RF {rf}")
    log("long run: " + ("every scenario passed" if not failures else "FAILED: " + ", ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main(sys.argv[1:]))
