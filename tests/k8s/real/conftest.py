"""The real tier: rngdctl's k8s launcher against a real control plane (``make test-k8s``).

One control plane for the session (control_plane.py), deploy/ applied to it with the
built kubectl (``--server-side``), and the daemon acting as the ``rngdctl`` ServiceAccount
through a TokenRequest token, so the real authorizer judges deploy/rbac.yaml. Where the
binaries are not built, or the machine lacks openssl, every test here skips naming why.

The kmock tier (tests/k8s) stays for fast tests and for faults a real server cannot be made
to show; its ``config`` and ``submit`` serve here too, and ``daemons`` stands for its
``launcher`` and ``daemon``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from admin import Admin, wait_for
from control_plane import ControlPlane, environment_problem
from k8s_support import IMAGE

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "deploy" / "k8s-test"))
import k8s_binaries  # deploy/k8s-test/k8s_binaries.py: where the binaries are

NS = "ml"  # deploy/'s namespace for the Jobs, and tests/k8s's config fixture's
AGENTS_NS = "rngdctl-agents"  # deploy/agent-daemonset.yaml's: the agents, privileged
NODE = "rngd-node-1"
CARDS = 8
OURS = "app.kubernetes.io%2Fmanaged-by%3Drngdctl"  # our Jobs' and pods' label, as a selector


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    """The running control plane (skips, naming why, where it cannot start here)."""
    why = k8s_binaries.why_not_built() or environment_problem()
    if why:
        pytest.skip(why)
    started = time.monotonic()
    plane = ControlPlane(k8s_binaries.bin_dir(), tmp_path_factory.mktemp("k8s"))
    plane.start()
    try:
        admin = Admin(plane)
        with plane.timed("the node Ready (kwok)"):
            try:
                admin.add_node(NODE, cards=CARDS, images=[IMAGE])
            except AssertionError:
                plane.check_alive()  # a component that died says so, with its log
                raise
        steps = ", ".join(f"{step} {s:.1f}" for step, s in plane.timings.items())
        print(f"\ncontrol plane up in {time.monotonic() - started:.1f} s ({steps}) at "
              f"{plane.server}", file=sys.stderr)
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def admin(plane) -> Admin:
    return Admin(plane)


@pytest.fixture(scope="session")
def deployed(plane) -> list[str]:
    """deploy/*.yaml applied server-side in namespace ``ml``: kubectl's lines, one an object."""
    plane.kubectl("create", "namespace", NS)
    out = plane.kubectl("apply", "--server-side", "-f", str(REPO / "deploy"))
    return out.strip().splitlines()


@pytest.fixture(scope="session")
def daemon_kubeconfig(plane, deployed, tmp_path_factory) -> Path:
    return plane.service_account_kubeconfig(NS, "rngdctl",
                                            tmp_path_factory.mktemp("sa") / "rngdctl")


@pytest.fixture(scope="session")
def agent_pod(admin, deployed) -> str:
    """The agent DaemonSet's pod on NODE: the DaemonSet controller made it, kwok runs it."""
    def on_node():
        pods = admin.items(f"/api/v1/namespaces/{AGENTS_NS}/pods?labelSelector="
                           "app.kubernetes.io%2Fname%3Drngdctl-agent")
        return next((p["metadata"]["name"] for p in pods
                     if (p.get("spec") or {}).get("nodeName") == NODE), None)
    return wait_for(on_node, f"the agent DaemonSet's pod on {NODE}")


@pytest.fixture(scope="session")
def agent_kubeconfig(plane, agent_pod, tmp_path_factory) -> Path:
    """The agent's account, with the token the kubelet gives its pod (it names NODE)."""
    return plane.service_account_kubeconfig(AGENTS_NS, "rngdctl-agent",
                                            tmp_path_factory.mktemp("sa") / "rngdctl-agent",
                                            pod=agent_pod)


@pytest.fixture
def as_daemon(plane, daemon_kubeconfig, monkeypatch, admin):
    """KUBECONFIG is the rngdctl ServiceAccount's; our Jobs and pods are gone after the test
    (each test's store numbers its runs from 1, and so names its Jobs alike)."""
    plane.check_alive()  # a component that died says so here, with its log, not as a timeout
    monkeypatch.setenv("KUBECONFIG", str(daemon_kubeconfig))
    yield daemon_kubeconfig
    ours = [f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector={OURS}",
            f"/api/v1/namespaces/{NS}/pods?labelSelector={OURS}"]
    for collection in ours:
        admin.request("DELETE", collection + "&propagationPolicy=Background")
    wait_for(lambda: not any(admin.items(collection) for collection in ours),
             "cleanup of our Jobs and pods")


@pytest.fixture
def config(config):
    """tests/k8s's, with the patience a real apiserver on 2 busy cores needs."""
    config.k8s.retry_backoff = 0.2
    config.k8s.request_timeout = 10.0
    return config


@pytest.fixture
def idle_probe():
    """This host as idle: the load of the engineers sharing this machine is not the gate's
    business here; the cluster side (cards, image) is what these tests judge."""
    from daemon.probes.host_reading import HostReading

    reading = HostReading(time=0, load=(0.1, 0.1, 0.1), holders=(), complete=True)
    return lambda: reading


class Daemons:
    """Daemons of one home, each with a k8s launcher of its own (as after a restart)."""

    def __init__(self, home, store, config, proc: Path, probe):
        self.home, self.store, self.config = home, store, config
        self.proc, self.probe = proc, probe
        self.running: list = []

    def start(self):
        from daemon.launchers.k8s.launcher import K8sLauncher
        from daemon.run.ingest import Ingest
        from daemon.scheduling.loop import Daemon

        launcher = K8sLauncher(home=self.home, store=self.store, config=self.config,
                               ingest=Ingest(self.store), proc=str(self.proc))
        daemon = Daemon(self.home, self.store, self.config, launcher, probe=self.probe)
        daemon.start()
        self.running.append(daemon)
        return daemon

    def stop(self, daemon, reason: str = "stopped by the test") -> None:
        """A clean stop: the lock and the client released; the Jobs run on."""
        self.running.remove(daemon)
        daemon.stop(reason)
        daemon.close()


@pytest.fixture
def daemons(home, store, config, tmp_path, idle_probe, as_daemon):
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    made = Daemons(home, store, config, proc, idle_probe)
    yield made
    for daemon in list(made.running):
        made.stop(daemon)


def tick_until(daemon, done, what: str, timeout: float = 60, every: float = 0.5):
    """Tick ``daemon`` on the real clock until ``done()``; AssertionError naming ``what``."""
    def ticked():
        daemon.tick()
        return done()
    return wait_for(ticked, what, timeout, every)
