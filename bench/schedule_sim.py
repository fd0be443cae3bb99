"""The scheduling simulation: the real daemon core against an emulated cluster of N nodes.

The real scheduler (``Daemon.tick``), the real k8s launcher with ``[k8s]
agents`` and leader election, and the official client over HTTP to kmock's
emulator (tests/k8s/k8s_emulator.py): N nodes of 8 RNGD cards that list the
image, each with a live agent ConfigMap (its heartbeat refreshed every tick,
as a DaemonSet's agent would), and R queued runs. The emulator plays the Job
controller and the kubelet: a created Job gets a pod that has already
succeeded with a start, 3 steps and an end record, so each run is launched,
followed, ingested and finished, and the queue drains. Simulated time moves on
by the tick (5 s) per tick; nothing sleeps.

    .venv/bin/python bench/schedule_sim.py --nodes 5 50 --runs 500 --ticks 300

Measured per tick:
- API calls: the HTTP requests the daemon made (the client's own counter,
  retries included), in two parts: scheduling and status (every call but the
  log reads: the cluster's reading, the Lease, the launch, the followed runs'
  Jobs and pods), and the log reads (one per pod whose container has started);
- tick CPU: the daemon thread's CPU time (``time.thread_time``) for one
  ``tick``; the emulator's server runs in another thread and is not counted.
- gates pass -> Job created: wall time from the tick's gate verdict that lets
  the head launch to ``launch`` returning (the Job created and recorded); the
  run's wait of ``[gates] consecutive`` (2) ticks before that verdict is by
  design and reported beside it.

``--followed K [K ...]`` measures the ticks with K runs followed at once
instead: K runs are launched (``[k8s] runs_per_node`` raised where K is more
than the nodes) and their pods stay Running, each writing one step a tick to
its log; the head of a queue of R runs is pinned to a node whose agent
reports too high a load, so every tick gates all N nodes and launches nothing. After the measured
ticks all K pods end in one tick (reported on its own line), and every run
must have stored each of its steps exactly once.

    .venv/bin/python bench/schedule_sim.py --nodes 5 50 --followed 0 1 20 --runs 500 --ticks 30

(``--run-ticks N``: the runs' pods stay Running and all end every N ticks, so
many runs are followed at once while the queue drains; ``--pin``: ``[k8s]
node`` set, for a launcher that needs it; ``--no-leader``: without leader
election.)

Targets (issue 13): at most 5 scheduling and status API calls per tick
whatever the node count and the number of runs followed (after the start-up
tick), log reads reported beside; tick CPU at most 50 ms at 50 nodes (p95).
Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "k8s")]

from k8s_emulator import NS, Cluster, stamp
from k8s_support import Clock, end_line, start_line, step_line

from daemon.gates import nodes
from daemon.home import Home
from daemon.launchers.k8s.launcher import K8sLauncher
from daemon.launchers.k8s.leader import LeaderElector
from daemon.probes.host_reading import HostReading
from daemon.run.ingest import Ingest
from daemon.run.spec import validate
from daemon.scheduling.loop import Daemon

IMAGE = "registry.example/furiosa-llm:2026.1"
TICK = 5.0
CALLS_TARGET = 5
CPU_TARGET_MS = 50.0
#: The log reads, counted apart from the scheduling and status calls.
LOG_OPS = frozenset({"pod_log"})
IDLE = HostReading(time=0, load=(1.0, 1.0, 1.0), holders=(), complete=True)


class TimedDaemon(Daemon):
    """The real scheduler; notes when a gate verdict lets the head launch."""

    passed_at: float | None = None

    def _gate(self, head, host, rows, now):
        verdict = super()._gate(head, host, rows, now)
        passed = verdict[0] if isinstance(verdict, tuple) else verdict
        self.passed_at = time.perf_counter() if passed else None
        return verdict


class TimedLauncher(K8sLauncher):
    """The real k8s launcher; notes the gates-pass -> Job-created time of each launch."""

    daemon: TimedDaemon | None = None
    waits: list

    def launch(self, run: dict) -> None:
        super().launch(run)
        if self.daemon is not None and self.daemon.passed_at is not None:
            self.waits.append(time.perf_counter() - self.daemon.passed_at)


def agent_configmap(node: str, now: float, load: float = 1.0) -> dict:
    reading = {"v": 1, "time": now, "load": [load] * 3, "complete": True,
               "unreadable": 0, "visibility": "every process is visible", "holders": [],
               "cards": [], "cards_note": None, "idle_since": {}}
    return nodes.agent_configmap(node, NS, reading, heartbeat=now, tick=TICK)


@dataclass
class Sim:
    """The emulated cluster, the store and the real daemon over them."""

    tmp: Path
    cluster: Cluster
    clock: Clock
    mono: Clock
    names: list
    store: object
    launcher: TimedLauncher
    daemon: TimedDaemon

    def tick(self) -> tuple:
        """One daemon tick after the agents published: (result, calls, cpu s, ops, wall s)."""
        for name in self.names:  # the agents publish (not the daemon's calls)
            cm = self.cluster.kmock.objects["v1/configmaps", NS, nodes.configmap_name(name)]
            cm.patch({"data": {"heartbeat": repr(self.clock.now)}})
        client = self.launcher.client
        before = collections.Counter(client.calls)
        cpu, wall = time.thread_time(), time.perf_counter()
        result = self.daemon.tick(now=self.clock.now)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        ops = client.calls - before
        self.clock.now += TICK
        self.mono.now += TICK
        return result, sum(ops.values()), cpu, ops, wall

    def close(self) -> None:
        self.daemon.stop("simulation over")
        self.daemon.close()
        self.store.close()
        self.cluster.close()


def setup(n_nodes: int, *, pin: bool, leader: bool, autopilot: list) -> Sim:
    tmp = Path(tempfile.mkdtemp(prefix="rngd-schedsim-"))
    cluster = Cluster(tmp)
    clock = Clock()
    names = [f"rngd-node-{i}" for i in range(1, n_nodes + 1)]
    for name in names:
        cluster.add_node(name, cards=8, images=[IMAGE])
        cluster.put("v1/configmaps", agent_configmap(name, clock.now))
    cluster.kmock.autopilot = autopilot
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    (tmp / "proc").mkdir()
    home = Home(tmp / "home").ensure()
    store = home.store()
    config = home.config()
    config.k8s.namespace, config.k8s.image, config.k8s.agents = NS, IMAGE, True
    config.k8s.agent_namespace = NS  # the emulator holds the agents' ConfigMaps beside the Jobs
    config.k8s.node = names[0] if pin else None
    config.daemon.tick = TICK
    launcher = TimedLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                             proc=str(tmp / "proc"), clock=clock)
    launcher.waits = []
    mono = Clock(1000.0)
    elector = LeaderElector(launcher.client, namespace=NS, name="rngdctl-daemon",
                            identity="sim/1", home=store.home_id, clock=mono,
                            wall=clock) if leader else None
    daemon = TimedDaemon(home, store, config, launcher, probe=lambda: IDLE, clock=clock,
                         leader=elector)
    launcher.daemon = daemon
    return Sim(tmp, cluster, clock, mono, names, store, launcher, daemon)


def simulate(n_nodes: int, n_runs: int, ticks: int, *, pin: bool, leader: bool,
             run_ticks: int = 0) -> dict:
    sim = setup(n_nodes, pin=pin, leader=leader,
                autopilot=[start_line(0), *(step_line(i) for i in (1, 2, 3)), end_line()])
    cluster, store = sim.cluster, sim.store
    # run_ticks: the pods stay Running, and every run_ticks ticks all of them end at once.
    cluster.kmock.autopilot_hold = run_ticks > 0
    for i in range(n_runs):
        store.add_run(validate({"cards": 2, "resident": 2, "steps": 3}), name=f"sim-{i}")
    sim.daemon.start()

    rows = []  # (kind, calls, cpu_s, per-op counter, wall_s, runs active)
    for i in range(ticks):
        if run_ticks and i % run_ticks == run_ticks - 1:
            cluster.call(cluster.kmock.release())
            cluster.kmock.autopilot_hold = True
        result, calls, cpu, ops, wall = sim.tick()
        kind = ("start-up" if not rows else
                "launching" if result.launched is not None else
                "following" if store.active_runs() or result.finished else "gating")
        rows.append((kind, calls, cpu, ops, wall, len(store.active_runs())))
        if not store.queue() and not store.active_runs():
            break
    done = len(store.runs(["done"]))
    waits = sim.launcher.waits
    sim.close()
    return {"nodes": n_nodes, "runs": n_runs, "ticks": len(rows), "done": done, "rows": rows,
            "waits": waits, "pinned": sim.names[0] if pin else None, "run_ticks": run_ticks}


def split(ops: collections.Counter) -> tuple[int, int]:
    """(scheduling and status calls, log reads) of one tick's calls."""
    logs = sum(n for op, n in ops.items() if op in LOG_OPS)
    return sum(ops.values()) - logs, logs


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def per_op(rows) -> str:
    ops = collections.Counter()
    for r in rows:
        ops.update(r[3])
    return ", ".join(f"{op} {n / len(rows):.2g}" for op, n in sorted(ops.items()))


def report(sim: dict) -> bool:
    rows = sim["rows"]
    print(f"\n== {sim['nodes']} nodes, {sim['runs']} queued runs: {sim['ticks']} ticks "
          f"({sim['ticks'] * TICK:.0f} s simulated), {sim['done']} runs done"
          + (f"; [k8s] node = {sim['pinned']}" if sim["pinned"] else "")
          + (f"; each run's pod runs until the next {sim['run_ticks']}-tick release"
             if sim["run_ticks"] else "; each run's pod has ended when it is first read")
          + f"; runs active at once: at most {max(r[5] for r in rows)}")
    print(f"{'tick kind':<10} {'ticks':>5}  {'sched+status calls min/med/max':>30}  "
          f"{'log reads max':>13}  {'CPU ms median/p95/max':>22}  {'wall ms median':>14}  "
          f"calls per tick by operation (mean)")
    for kind in ("start-up", "gating", "launching", "following"):
        these = [r for r in rows if r[0] == kind]
        if not these:
            continue
        calls = [split(r[3])[0] for r in these]
        logs = [split(r[3])[1] for r in these]
        ms = [r[2] * 1000 for r in these]
        wall = statistics.median(r[4] * 1000 for r in these)
        print(f"{kind:<10} {len(these):>5}  {min(calls):>14} / {statistics.median(calls):>5g} / "
              f"{max(calls):>4}  {max(logs):>13}  {statistics.median(ms):>8.1f} / "
              f"{pct(ms, 0.95):>5.1f} / {max(ms):>5.1f}  {wall:>14.1f}  {per_op(these)}")
    waits = [w * 1000 for w in sim["waits"]]
    if waits:
        print(f"gates pass -> Job created: median {statistics.median(waits):.1f} ms, p95 "
              f"{pct(waits, 0.95):.1f} ms, max {max(waits):.1f} ms over {len(waits)} launches "
              f"(after the {2} ticks in a row the gates must pass: {TICK:g} s by design)")
    ticks = rows[1:]  # the first tick also starts the launcher up (list Jobs, pre-pull pods)
    scheduling = [split(r[3])[0] for r in ticks]
    logs = [split(r[3])[1] for r in ticks]
    worst = max(scheduling)
    print(f"scheduling and status calls per tick (after the start-up tick): max {worst}, "
          f"median {statistics.median(scheduling):g}; log reads: max {max(logs)} in a tick, "
          f"with up to {max(r[5] for r in rows)} runs active")
    return verdict(sim["nodes"], worst, pct([r[2] * 1000 for r in ticks], 0.95))


def verdict(n_nodes: int, worst_calls: int, cpu_p95: float) -> bool:
    calls_ok = worst_calls <= CALLS_TARGET
    cpu_ok = cpu_p95 <= CPU_TARGET_MS or n_nodes < 50
    print(f"target <= {CALLS_TARGET} scheduling and status API calls per tick: "
          f"{'met' if calls_ok else 'NOT met'} (worst tick {worst_calls}); target tick CPU <= "
          f"{CPU_TARGET_MS:g} ms at 50 nodes: "
          + (f"{'met' if cpu_ok else 'NOT met'} (p95 {cpu_p95:.1f} ms)" if n_nodes >= 50
             else f"n/a below 50 nodes (p95 {cpu_p95:.1f} ms)"))
    return calls_ok and cpu_ok


# === K runs followed at once =================================================

#: The head of the queue in --followed is pinned to this node, whose agent then reports a load
#: above ``[gates] load_max``: every tick gates every node and launches nothing.
BUSY = "rngd-node-1"


def follow_many(n_nodes: int, k: int, ticks: int, *, queued: int, leader: bool) -> dict:
    """K runs followed, each pod writing a step a tick; the head of a queue of ``queued`` runs
    gates every node each tick and never launches."""
    sim = setup(n_nodes, pin=False, leader=leader, autopilot=lambda job: [
        start_line(0), step_line(1)])
    cluster, store = sim.cluster, sim.store
    cluster.kmock.autopilot_hold = True
    # Room for K runs of 2 cards (8 cards a node): at 5 nodes, 20 runs take 4 a node.
    sim.launcher.config.k8s.runs_per_node = max(1, -(-k // n_nodes))
    runs = [store.add_run(validate({"cards": 2, "resident": 2, "steps": 10_000}),
                          name=f"sim-{i}") for i in range(k)]
    sim.daemon.start()
    for _ in range(6 * k + 4):  # launch the K runs (2 ticks of passing gates each)
        if sum(r["status"] == "running" for r in map(store.run, runs)) == k:
            break
        sim.tick()
    if sum(r["status"] == "running" for r in map(store.run, runs)) != k:
        raise SystemExit(f"{k} runs did not all start: {[store.run(r)['status'] for r in runs]}")
    # BUSY's agent now reports a high load, and the queue's head waits for BUSY.
    load = sim.launcher.config.gates.load_max + 10
    cluster.put("v1/configmaps", agent_configmap(BUSY, sim.clock.now, load=load))
    store.add_run(validate({"cards": 2, "resident": 2, "steps": 3, "node": BUSY}),
                  name="pinned-busy")
    for i in range(queued - 1):
        store.add_run(validate({"cards": 2, "resident": 2, "steps": 3}), name=f"behind-{i}")
    sim.tick()  # the first gate check of the head (its start-up is over)
    pods = list(cluster.kmock.logs)  # the K runs' pods (the autopilot wrote their logs)
    steps = 1
    rows = []
    for _ in range(ticks):
        steps += 1
        for key in pods:  # each trainer writes one more step (a new second of the log)
            cluster.kmock.logs[key].append(
                (stamp(1_767_225_600 + steps), step_line(steps)))
        _, calls, cpu, ops, wall = sim.tick()
        rows.append(("followed", calls, cpu, ops, wall, k))
    # All K pods end in one tick.
    cluster.call(cluster.kmock.release())
    _, calls, cpu, ops, wall = sim.tick()
    ended = ("ended", calls, cpu, ops, wall, k)
    counts = [len(store.steps(r)) for r in runs]
    statuses = [store.run(r)["status"] for r in runs]
    sim.close()
    return {"nodes": n_nodes, "k": k, "queued": queued, "rows": rows, "ended": ended, "steps": steps,
            "counts": counts, "statuses": statuses}


def report_followed(sims: list[dict]) -> bool:
    print(f"\n== runs followed at once: each pod writes one step a tick; the head of a queue of "
          f"{sims[0]['queued']} runs is pinned to {BUSY}, whose load is too high, so every tick "
          f"gates every node and launches nothing")
    print(f"{'nodes':>5} {'followed':>8} {'ticks':>5}  {'sched+status calls min/max':>26}  "
          f"{'log reads max':>13}  {'CPU ms median/p95/max':>22}  {'end tick calls':>14}  "
          f"{'end tick CPU ms':>15}  steps stored once  calls per tick by operation (mean)")
    ok = True
    for s in sims:
        rows = s["rows"]
        calls = [split(r[3])[0] for r in rows]
        logs = [split(r[3])[1] for r in rows]
        ms = [r[2] * 1000 for r in rows]
        end_calls, end_logs = split(s["ended"][3])
        exact = all(c == s["steps"] for c in s["counts"]) and all(
            st == "done" for st in s["statuses"])
        print(f"{s['nodes']:>5} {s['k']:>8} {len(rows):>5}  {min(calls):>18} / {max(calls):>5}  "
              f"{max(logs):>13}  {statistics.median(ms):>8.1f} / {pct(ms, 0.95):>5.1f} / "
              f"{max(ms):>5.1f}  {end_calls:>7} + {end_logs:>2} log  "
              f"{s['ended'][2] * 1000:>15.1f}  "
              f"{'yes' if exact else 'NO: ' + str((s['counts'], s['statuses']))}  "
              f"{per_op(rows)}")
        worst = max(calls + [end_calls])
        ok &= exact
        ok &= verdict(s["nodes"], worst, pct(ms, 0.95))
    return ok


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5, 50])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--ticks", type=int, default=300, help="at most this many ticks")
    parser.add_argument("--pin", action="store_true",
                        help="set [k8s] node to the first node (a launcher that needs it)")
    parser.add_argument("--no-leader", action="store_true", help="without leader election")
    parser.add_argument("--run-ticks", type=int, default=0,
                        help="hold the runs' pods Running; end them all every N ticks")
    parser.add_argument("--followed", type=int, nargs="+", metavar="K",
                        help="measure ticks with K runs followed at once (e.g. 0 1 20)")
    args = parser.parse_args(argv)
    print(f"CPU: {cpu_name()} x {os.cpu_count()}; load average at start "
          f"{os.getloadavg()[0]:.1f}")
    ok = True
    if args.followed is not None:
        ok &= report_followed([follow_many(n, k, args.ticks, queued=args.runs,
                                           leader=not args.no_leader)
                               for n in args.nodes for k in args.followed])
    else:
        for n in args.nodes:
            ok &= report(simulate(n, args.runs, args.ticks, pin=args.pin,
                                  leader=not args.no_leader, run_ticks=args.run_ticks))
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
