"""Two real `rngdctl daemon` processes on one home: one leads, the standby takes over.

Both replicas are subprocesses with their own pod name (POD_NAME) and their own
kubeconfig token, so every request the emulator records says which replica
made it. They share the home's store on a tmp dir, the k8s launcher talks to
kmock's emulator over HTTP, and the Lease lasts 4 s ([k8s] lease_duration).
The leader is SIGKILLed while its run's pod runs: the standby must wait for
the Lease to expire, take it, adopt the run (no second Job) and launch the
rest. Deadlines are generous; the one timing assertion is a lower bound, read
from the Lease writes themselves, that load can only make easier to meet.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from k8s_emulator import LEASES, NODE, NS
from k8s_support import IMAGE, DaemonProcesses, end_line, start_line, step_line

from daemon.launchers.k8s import jobspec
from daemon.scheduling import replicas

LEASE = "rngdctl-daemon"
LEASE_S, RENEW_S, TICK = 4.0, 3.0, 0.2
STEPS = 3
PODS = ("rngdctl-0", "rngdctl-1")


def _lines(job: dict) -> list[str]:
    run_id = int(job["metadata"]["labels"][jobspec.RUN_LABEL])
    return [start_line(run_id), *(step_line(i) for i in range(1, STEPS + 1)), end_line()]


def _kubeconfig(cluster, tmp_path, pod: str) -> Path:
    """The emulator's kubeconfig with a token of the pod's own: the requests tell who sent them."""
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = pod
    path = tmp_path / f"kubeconfig-{pod}"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def two(cluster, home, tmp_path):
    home.config_path.write_text(
        f"[daemon]\ntick = {TICK}\n"
        f'[k8s]\nnamespace = "{NS}"\nnode = "{NODE}"\nimage = "{IMAGE}"\n'
        f"leader_election = true\nlease_duration = {LEASE_S}\nrenew_deadline = {RENEW_S}\n")
    cluster.kmock.autopilot = _lines
    cluster.kmock.autopilot_hold = True  # a run's pod runs until the test releases it
    pair = DaemonProcesses(
        home, PODS, tmp_path,
        lambda pod: {"KUBECONFIG": str(_kubeconfig(cluster, tmp_path, pod))},
        argv=("--context", "emu", "--tick", str(TICK)))
    yield pair
    pair.close()


def _wait(what: str, predicate, timeout: float = 60.0, procs=None):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        for pod, proc in (procs or {}).items():
            assert proc.poll() is None, f"{pod} exited ({proc.returncode}) before {what}"
        time.sleep(0.05)
    return found


def _sent(cluster, method: str, plural: str) -> list:
    return [r for r in cluster.requests if r.method.value == method
            and r.resource is not None and r.resource.plural == plural]


def _pod_of(request) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ")


def _lease(cluster) -> dict | None:
    """The Lease as stored, read on the emulator's own loop: its objects change under the
    daemons' requests, and a dict is not read from another thread while it changes."""
    async def read():
        return cluster.get(LEASES, LEASE)

    return cluster.call(read())


def _holder(cluster) -> str:
    return ((_lease(cluster) or {}).get("spec") or {}).get("holderIdentity") or ""


def _stamp(micro_time: str) -> float:
    return dt.datetime.fromisoformat(micro_time).timestamp()


def test_of_two_daemon_processes_only_the_leader_launches_and_the_standby_takes_over_a_killed_one(
        two, cluster, store, submit):
    runs = [submit(cards=2, steps=STEPS) for _ in range(3)]

    # 1. One of the two takes the Lease and launches the head of the queue; the other waits.
    _wait("a run is running", lambda: store.active_runs(), procs=two.procs)
    holder = _wait("the Lease has a holder", lambda: _holder(cluster))
    leader = replicas.pod_of(holder)
    standby = next(pod for pod in PODS if pod != leader)
    _wait("the standby has read the Lease a few times", lambda: sum(
        _pod_of(r) == standby for r in _sent(cluster, "GET", "leases")) >= 5, procs=two.procs)
    [first] = store.active_runs()
    assert first["id"] == runs[0]
    jobs = _sent(cluster, "POST", "jobs")
    assert [_pod_of(r) for r in jobs] == [leader], "a Job not created by the leader"
    # The standby probes, follows and launches nothing: all it sent were Lease reads, and
    # at most the create of the Lease that lost the race at start (409: the leader's stands).
    sent = collections.Counter((r.method.value, r.resource.plural) for r in cluster.requests
                               if _pod_of(r) == standby)
    assert set(sent) <= {("GET", "leases"), ("POST", "leases")} and sent["POST", "leases"] <= 1
    assert _lease(cluster)["spec"]["leaseTransitions"] == 0
    # What `runs`, `show` and the TUI print, from the two processes' own rows.
    view = replicas.read(store, TICK)
    assert view.leader.identity == holder and view.leader_since is not None
    assert [s.identity.split("/")[0] for s in view.standbys] == [standby]

    # 2. The leader dies without a word while run 1's pod runs.
    two.procs[leader].send_signal(signal.SIGKILL)
    two.procs[leader].wait(10)
    _wait("the standby holds the Lease", lambda: replicas.pod_of(_holder(cluster)) == standby,
          timeout=90, procs={standby: two.procs[standby]})
    lease = _lease(cluster)["spec"]
    assert lease["leaseTransitions"] == 1
    # Not before the Lease expired: the takeover came at least lease_duration after the
    # dead leader's last renewal (both stamped by this host's clock).
    last_renewal = max(_stamp(r.data["spec"]["renewTime"]) for r in _sent(cluster, "PUT", "leases")
                       if _pod_of(r) == leader)
    assert _stamp(lease["acquireTime"]) - last_renewal >= LEASE_S - 0.05
    cluster.call(cluster.kmock.release())  # run 1's pod succeeds; later ones at once

    # 3. The new leader adopts run 1 and launches the rest, then exits (--exit-when-idle).
    survivor = two.procs[standby]
    try:
        survivor.wait(120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the new leader did not drain the queue: {two.log(standby)}")
    assert survivor.returncode == 0, two.log(standby)
    for run_id in runs:
        run = store.run(run_id)
        assert run["status"] == "done", store.events(run_id=run_id)
        assert [s["step"] for s in store.steps(run_id)] == list(range(1, STEPS + 1))
    created = collections.defaultdict(list)
    for r in _sent(cluster, "POST", "jobs"):
        created[int(r.data["metadata"]["labels"][jobspec.RUN_LABEL])].append(_pod_of(r))
    # Every run launched once, never two Jobs for one run: run 1 by the dead leader,
    # the rest by the replica that took over.
    assert dict(created) == {runs[0]: [leader], runs[1]: [standby], runs[2]: [standby]}
    leads = [e["message"] for e in store.events(kinds=["leader"]) if " leads " in e["message"]]
    assert leads == [f"{holder} leads (Lease {NS}/{LEASE})",
                     f"{standby}/{survivor.pid} leads (Lease {NS}/{LEASE})"]

