"""API calls per daemon tick with the k8s launcher, idle and during a run.

Drives the real scheduler (``Daemon.tick``) and the real client over HTTP, against kmock's
emulator (the default) or, with ``--real``, against a real control plane
(tests/k8s/real/control_plane.py: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok at the release deploy/k8s-test pins; `make k8s-binaries` builds
them), where the daemon acts as the ``rngdctl`` ServiceAccount of deploy/rbac.yaml.

    .venv/bin/python bench/k8s_calls_per_tick.py
    .venv/bin/python bench/k8s_calls_per_tick.py --real
    .venv/bin/python bench/k8s_calls_per_tick.py --real --agents 50

Calls are counted where the requests arrive with kmock (its request log; the client's own
per-operation counter must agree), and by the client's counter against the real apiserver
(every HTTP request it sends, retries included). Ticks there run on the real clock, so a
tick's milliseconds include the apiserver's answers.

Phases: a queued run waiting on cards, an empty queue, a queued run waiting on a card-less
pre-pull pod (kmock only: kwok pulls no image, nor with agents), and a run whose pod logs
one step a tick.

``--agents N``: N card nodes, each with its agent's ConfigMap in rngdctl-agents (the bench
publishes them as the agents would, by its own hand: not counted), the daemon with ``[k8s]
agents = true`` and no ``[k8s] node``, gating every node each tick; on the real tier
deploy/agent-daemonset.yaml is applied too, so every node also runs an agent pod. Waiting on
cards, every node's cards are held by another namespace's pod.

Target: an idle tick makes at most 3 calls; at most 5 with agents.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "k8s"), str(REPO / "tests" / "k8s" / "real"),
                str(REPO / "deploy" / "k8s-test")]

from daemon.home import Home
from daemon.launchers.k8s.launcher import K8sLauncher
from daemon.probes.host_reading import HostReading
from daemon.run.ingest import Ingest
from daemon.run.spec import validate
from daemon.scheduling.loop import Daemon
from trainer import records

IMAGE = "registry.example/furiosa-llm:2026.1"
NODE, NS, AGENTS_NS = "rngd-node-1", "ml", "rngdctl-agents"
TICKS = 20
IDLE_TARGET = 3
IDLE_TARGET_AGENTS = 5
OTHER_PODS = 30  # a busy node: other people's pods in other namespaces
AGENT_TICK = 5.0  # the agents' own tick: the bench publishes again when this old


def node_names(count: int) -> list[str]:
    return [f"rngd-node-{i}" for i in range(1, count + 1)]


def agent_reading(node: str, now: float) -> dict:
    """A node's agent ConfigMap as ``rngdctl agent`` writes it: idle, no card readings."""
    from daemon.gates import nodes

    reading = {"v": 1, "time": now, "load": [1.0, 1.0, 1.0], "complete": True,
               "visibility": "", "holders": [], "cards": [],
               "cards_note": "furiosa-smi not found: no card readings", "idle_since": {}}
    return nodes.agent_configmap(node, AGENTS_NS, reading, heartbeat=now, tick=AGENT_TICK)


class Emulated:
    """kmock's emulator: the test plays the Job controller and the kubelet."""

    name = "kmock's emulator"

    def __init__(self, tmp: Path, nodes: list[str]):
        from k8s_emulator import Cluster

        self.nodes = nodes
        self.cluster = Cluster(tmp)
        for node in nodes:
            self.cluster.add_node(node, cards=8, images=[IMAGE])
        for i in range(OTHER_PODS):
            self.cluster.add_pod(f"other-{i}", cards=0, namespace=f"team-{i % 5}")
        os.environ["KUBECONFIG"] = str(self.cluster.kubeconfig)

    def requests(self, launcher) -> int:
        return len(self.cluster.requests)

    def hold_cards(self, cards: int) -> None:
        for i, node in enumerate(self.nodes):
            self.cluster.add_pod(f"holder-{i}", cards=cards, namespace="inference", node=node)

    def free_cards(self) -> None:
        self.cluster.kmock.objects["v1/pods", "inference", "holder-0"].delete()

    def publish_agents(self, now: float) -> None:
        for node in self.nodes:
            self.cluster.put("v1/configmaps", agent_reading(node, now), AGENTS_NS)

    def start_pod(self, job: str) -> str:
        return self.cluster.start_pod(job)

    def log(self, pod: str, i: int, line: str) -> None:
        self.cluster.log(pod, [(f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.5Z", line)])

    def close(self) -> None:
        self.cluster.close()


class Real:
    """A real control plane; kwok runs the pods the scheduler binds, the bench writes logs."""

    name = "a real kube-apiserver"

    def __init__(self, tmp: Path, nodes: list[str]):
        import k8s_binaries
        from admin import Admin
        from control_plane import ControlPlane

        why = k8s_binaries.why_not_built()
        if why:
            raise SystemExit(f"--real: {why}")
        self.nodes = nodes
        self.plane = ControlPlane(k8s_binaries.bin_dir(), tmp / "k8s")
        self.plane.start()
        self.admin = Admin(self.plane)
        for node in nodes:
            self.admin.add_node(node, cards=8, images=[IMAGE])
        self.plane.kubectl("create", "namespace", NS)
        for manifest in ("agent-daemonset.yaml", "rbac.yaml"):  # the agents' namespace first
            self.plane.kubectl("apply", "--server-side", "-f", str(REPO / "deploy" / manifest))
        for team in {f"team-{i % 5}" for i in range(OTHER_PODS)} | {"inference"}:
            self.plane.kubectl("create", "namespace", team)
        for i in range(OTHER_PODS):
            self._pod(f"team-{i % 5}", f"other-{i}", cards=0, node=NODE)
        self.published: set[str] = set()
        os.environ["KUBECONFIG"] = str(self.plane.service_account_kubeconfig(
            NS, "rngdctl", tmp / "rngdctl.kubeconfig"))

    def _pod(self, namespace: str, name: str, cards: int, node: str) -> None:
        resources = {"limits": {"furiosa.ai/rngd": str(cards)}} if cards else {}
        self.admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "image": "registry.example/other:1", "resources": resources}]}})

    def requests(self, launcher) -> int:
        return sum(launcher.client.calls.values())

    def hold_cards(self, cards: int) -> None:
        for i, node in enumerate(self.nodes):
            self._pod("inference", f"holder-{i}", cards, node=node)

    def free_cards(self) -> None:
        from admin import wait_for

        self.admin.request("DELETE", "/api/v1/namespaces/inference/pods/holder-0")
        wait_for(lambda: self.admin.get("/api/v1/namespaces/inference/pods/holder-0") is None,
                 "the holder pod gone")

    def publish_agents(self, now: float) -> None:
        """Each node's agent ConfigMap, created once and then patched, as the agents do."""
        for node in self.nodes:
            body = agent_reading(node, now)
            path = f"/api/v1/namespaces/{AGENTS_NS}/configmaps"
            if node in self.published:
                self.admin.merge_patch(f"{path}/{body['metadata']['name']}",
                                       {"data": body["data"]})
            else:
                self.admin.request("POST", path, body)
                self.published.add(node)

    def start_pod(self, job: str) -> str:
        return self.admin.running_pod(NS, job)["metadata"]["name"]

    def log(self, pod: str, i: int, line: str) -> None:
        self.admin.write_log(NS, pod, "trainer", [line])

    def close(self) -> None:
        self.plane.stop()


USAGE = "usage: k8s_calls_per_tick.py [--real] [--agents N]"


def parse(args: list[str]) -> tuple[bool, int | None]:
    """(--real, --agents N); SystemExit 2 with the usage for anything else."""
    real = "--real" in args
    rest = [a for a in args if a != "--real"]
    if not rest:
        return real, None
    if len(rest) == 2 and rest[0] == "--agents" and rest[1].isdigit() and int(rest[1]) >= 1:
        return real, int(rest[1])
    print(USAGE, file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str]) -> int:
    real, agents = parse(argv[1:])
    tmp = Path(tempfile.mkdtemp(prefix="rngd-bench-"))
    nodes = node_names(agents or 1)
    backend = Real(tmp, nodes) if real else Emulated(tmp, nodes)
    try:
        return measure(backend, tmp, real=real, agents=agents is not None)
    finally:
        backend.close()


def measure(backend, tmp: Path, *, real: bool, agents: bool = False) -> int:
    home = Home(tmp / "home").ensure()
    store = home.store()
    config = home.config()
    config.k8s.namespace, config.k8s.node, config.k8s.image = NS, NODE, IMAGE
    if agents:  # every node gated from its agent; the run goes where the cards are
        config.k8s.agents, config.k8s.node, config.k8s.agent_namespace = True, None, AGENTS_NS
    (tmp / "proc").mkdir()
    launcher = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                           proc=str(tmp / "proc"))
    host = HostReading(time=0, load=(1.0, 1.0, 1.0), holders=(), complete=True)
    daemon = Daemon(home, store, config, launcher, probe=lambda: host)
    launcher.startup()
    clock = time.time if real else None  # the apiserver's pods and logs live in real time

    published = [-AGENT_TICK]

    def tick(at: float) -> tuple[int, float]:
        if agents and time.time() - published[0] >= AGENT_TICK:  # the agents' heartbeats
            published[0] = time.time()
            backend.publish_agents(published[0])
        before = backend.requests(launcher)
        started = time.perf_counter()
        daemon.tick(now=clock() if clock else at)
        return backend.requests(launcher) - before, time.perf_counter() - started

    # Idle with a queued run that waits on cards: every tick is a full gate check.
    backend.hold_cards(8)
    run_id = store.add_run(validate({"cards": 2, "resident": 2, "steps": 200}))
    idle = [tick(t) for t in range(TICKS)]
    # Idle with an empty queue: nothing to gate.
    store.request_cancel(run_id)
    empty = [tick(TICKS + t) for t in range(TICKS)]

    prepull = [] if real or agents else prepull_phase(backend.cluster, store, tick)

    # A run: free the cards, launch, then tick while the pod logs steps.
    backend.free_cards()
    run_id = store.add_run(validate({"cards": 2, "resident": 2, "steps": 200}))
    now = 100
    while store.run(run_id)["status"] == "queued":
        tick(now)
        now += 1
    pod = backend.start_pod(store.run(run_id)["job_name"])
    before_ops = collections.Counter(launcher.client.calls)
    running = []
    for i in range(TICKS):
        step = records.dumps(records.Step(config_label="main", step=i + 1, loss=2.0,
                                          step_s=1.0, tokens=1024, lr=1e-5))
        backend.log(pod, i, step)
        if real:
            time.sleep(0.2)  # kwok serves the line from its file: let the write land
        running.append(tick(now + i))
    ops = launcher.client.calls - before_ops
    steps = len(store.steps(run_id))

    def summary(rows):
        calls = [c for c, _ in rows]
        ms = sorted(s * 1000 for _, s in rows)
        return f"{min(calls)}-{max(calls)} calls (median tick {ms[len(ms) // 2]:.2f} ms)"

    where = f", {len(backend.nodes)} nodes with agents" if agents else ", one node"
    print(f"against {backend.name}{where}")
    print(f"idle, a queued run waiting on cards: {summary(idle)}")
    print(f"idle, empty queue:                   {summary(empty)}")
    if prepull:
        print(f"a queued run waiting on a pre-pull:  {summary(prepull)}; first tick "
              f"{prepull[0][0]}, waiting {prepull[2][0]}, pulled {prepull[-1][0]}")
    print(f"during a run:                        {summary(running)}; per tick: "
          + ", ".join(f"{op} {n / TICKS:g}" for op, n in sorted(ops.items())))
    print(f"steps ingested during the run: {steps} of {TICKS}")
    launcher.close()
    store.close()
    worst_idle = max(c for c, _ in idle + empty)
    target = IDLE_TARGET_AGENTS if agents else IDLE_TARGET
    ok = worst_idle <= target and steps == TICKS
    print(f"target: idle tick <= {target} calls: {'met' if ok else 'NOT met'} "
          f"(worst idle tick {worst_idle})")
    return 0 if ok else 1


def prepull_phase(cluster, store, tick) -> list[tuple[int, float]]:
    """A queued run whose image is not on the node: a card-less pre-pull pod pulls it."""
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
    return prepull


if __name__ == "__main__":
    sys.exit(main(sys.argv))
