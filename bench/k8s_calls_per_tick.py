"""API calls per daemon tick with the k8s launcher, idle and during a run, against kmock.

Drives the real scheduler (``Daemon.tick``) and the real client over HTTP to
kmock's emulator, and counts the HTTP requests the emulator received per tick
(and the client's own per-operation counter, which must agree).

    .venv/bin/python bench/k8s_calls_per_tick.py

Phases: a queued run waiting on cards, an empty queue, a queued run waiting
on a card-less pre-pull pod, and a run whose pod logs one step a tick.

Target: an idle tick makes at most 3 calls.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "k8s")]

from k8s_emulator import NODE, NS, Cluster

from daemon.home import Home
from daemon.launchers.k8s.launcher import K8sLauncher
from daemon.probes.host_reading import HostReading
from daemon.run.ingest import Ingest
from daemon.run.spec import validate
from daemon.scheduling.loop import Daemon
from trainer import records

IMAGE = "registry.example/furiosa-llm:2026.1"
TICKS = 20
IDLE_TARGET = 3


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="rngd-bench-"))
    cluster = Cluster(tmp)
    cluster.add_node(NODE, cards=8, images=[IMAGE])
    for i in range(30):  # a busy node: other people's pods in other namespaces
        cluster.add_pod(f"other-{i}", cards=0, namespace=f"team-{i % 5}")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    home = Home(tmp / "home").ensure()
    store = home.store()
    config = home.config()
    config.k8s.namespace, config.k8s.node, config.k8s.image = NS, NODE, IMAGE
    launcher = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                           proc=str(tmp / "proc"))
    (tmp / "proc").mkdir()
    host = HostReading(time=0, load=(1.0, 1.0, 1.0), holders=(), complete=True)
    daemon = Daemon(home, store, config, launcher, probe=lambda: host)
    launcher.startup()

    def tick(now: float) -> tuple[int, float]:
        before = len(cluster.requests)
        started = time.perf_counter()
        daemon.tick(now=now)
        return len(cluster.requests) - before, time.perf_counter() - started

    # Idle with a queued run that waits on cards: every tick is a full gate check.
    cluster.add_pod("holder", cards=8, namespace="inference")
    run_id = store.add_run(validate({"cards": 2, "resident": 2, "steps": 200}))
    idle = [tick(t) for t in range(TICKS)]
    # Idle with an empty queue: nothing to gate.
    store.request_cancel(run_id)
    empty = [tick(TICKS + t) for t in range(TICKS)]

    # A queued run whose image is not on the node: a card-less pre-pull pod pulls it.
    run_id = store.add_run(validate({"cards": 2, "resident": 2, "steps": 200,
                                     "image": "registry.example/other:1"}))
    prepull = [tick(2 * TICKS + t) for t in range(2)]
    [pod] = cluster.names("v1/pods")
    cluster.patch("v1/pods", pod, {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "prepull", "state": {"waiting": {"reason": "ContainerCreating"}}}]}})
    prepull += [tick(2 * TICKS + 2 + t) for t in range(TICKS - 3)]
    cluster.patch("v1/pods", pod, {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "prepull", "state": {"terminated": {"exitCode": 0}}}]}})
    prepull.append(tick(3 * TICKS))
    store.request_cancel(run_id)

    # A run: free the cards, launch, then tick while the pod logs steps.
    cluster.kmock.objects["v1/pods", "inference", "holder"].delete()
    run_id = store.add_run(validate({"cards": 2, "resident": 2, "steps": 200}))
    now = 100
    while store.run(run_id)["status"] == "queued":
        tick(now)
        now += 1
    pod = cluster.start_pod(store.run(run_id)["job_name"])
    before_ops = collections.Counter(launcher.client.calls)
    running = []
    for i in range(TICKS):
        step = records.dumps(records.Step(config_label="main", step=i + 1, loss=2.0,
                                          step_s=1.0, tokens=1024, lr=1e-5))
        cluster.log(pod, [(f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.5Z", step)])
        running.append(tick(now + i))
    ops = launcher.client.calls - before_ops
    steps = len(store.steps(run_id))

    def summary(rows):
        calls = [c for c, _ in rows]
        ms = sorted(s * 1000 for _, s in rows)
        return f"{min(calls)}-{max(calls)} calls (median tick {ms[len(ms) // 2]:.2f} ms)"

    print(f"idle, a queued run waiting on cards: {summary(idle)}")
    print(f"idle, empty queue:                   {summary(empty)}")
    print(f"a queued run waiting on a pre-pull:  {summary(prepull)}; first tick "
          f"{prepull[0][0]}, waiting {prepull[2][0]}, pulled {prepull[-1][0]}")
    print(f"during a run:                        {summary(running)}; per tick: "
          + ", ".join(f"{op} {n / TICKS:g}" for op, n in sorted(ops.items())))
    print(f"steps ingested during the run: {steps} of {TICKS}")
    launcher.close()
    store.close()
    cluster.close()
    worst_idle = max(c for c, _ in idle + empty)
    ok = worst_idle <= IDLE_TARGET and steps == TICKS
    print(f"target: idle tick <= {IDLE_TARGET} calls: {'met' if ok else 'NOT met'} "
          f"(worst idle tick {worst_idle})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
