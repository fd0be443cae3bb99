"""Two `rngdctl daemon` processes on one home elect a leader through a real Lease (the
apiserver refuses a stale resourceVersion itself), and the standby takes over a leader
killed by SIGKILL: it waits for the Lease to expire, adopts the running Job and launches
the rest, each run once.

Both replicas act as the rngdctl ServiceAccount, so deploy/rbac.yaml's Lease grant (get and
update on rngdctl-daemon only) is what they run under. The test plays each run's trainer:
its log lines and its exit, through kwok.
"""

from __future__ import annotations

import collections
import datetime as dt
import signal

import pytest
from admin import wait_for
from conftest import NODE, NS
from k8s_support import IMAGE, DaemonProcesses, end_line, start_line, step_line

from daemon.scheduling import replicas

LEASE = "rngdctl-daemon"  # [k8s] lease_name's default, the one deploy/rbac.yaml grants
LEASE_S, RENEW_S, TICK = 4.0, 3.0, 0.2
STEPS = 3
PODS = ("rngdctl-0", "rngdctl-1")
CONTAINER = "trainer"


@pytest.fixture
def two(home, as_daemon, admin, tmp_path):
    home.config_path.write_text(
        f"[gates]\nload_max = 10000.0\n"  # the host's load is not the gates' business here
        f"[daemon]\ntick = {TICK}\n"
        f'[k8s]\nnamespace = "{NS}"\nnode = "{NODE}"\nimage = "{IMAGE}"\n'
        f"request_timeout = 10.0\nretry_backoff = 0.2\n"
        f"leader_election = true\nlease_duration = {LEASE_S}\nrenew_deadline = {RENEW_S}\n")
    pair = DaemonProcesses(home, PODS, tmp_path, lambda pod: {"KUBECONFIG": str(as_daemon)})
    yield pair
    pair.close()
    admin.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")


def _lease(admin) -> dict:
    return (admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")
            or {}).get("spec") or {}


def _stamp(micro_time: str) -> float:
    return dt.datetime.fromisoformat(micro_time).timestamp()


class Trainers:
    """The test's side of each run's pod: its log, then its exit once released."""

    def __init__(self, admin, store):
        self.admin, self.store = admin, store
        self.written: dict[int, int] = {}  # run -> log lines written
        self.exited: set[int] = set()
        self.held = True  # run 1 runs until the test lets it end
        self.uids: set[tuple[str, int]] = set()  # every Job of this home seen on the apiserver

    @property
    def jobs(self) -> dict[int, int]:
        """How many Jobs each run had."""
        return dict(collections.Counter(run for _, run in self.uids))

    def play(self) -> None:
        for job in self.admin.items(f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector="
                                    f"app.kubernetes.io%2Finstance%3D{self.store.home_id}"):
            meta = job["metadata"]
            self.uids.add((meta["uid"], int(meta["labels"]["rngdctl.io/run-id"])))
        for run in self.store.active_runs():
            if not run.get("job_name") or run["id"] in self.exited:
                continue
            pods = self.admin.items(f"/api/v1/namespaces/{NS}/pods?labelSelector="
                                    f"job-name%3D{run['job_name']}")
            pod = next((p["metadata"]["name"] for p in pods
                        if (p.get("status") or {}).get("phase") == "Running"), None)
            if pod is None:
                continue
            lines = [start_line(run["id"]), *map(step_line, range(1, STEPS + 1)), end_line()]
            upto = 2 if self.held and run["id"] == 1 else len(lines)
            done = self.written.get(run["id"], 0)
            if upto > done:
                self.admin.write_log(NS, pod, CONTAINER, lines[done:upto])
                self.written[run["id"]] = upto
            if upto == len(lines):
                self.admin.exit_pod(NS, pod, 0)
                self.exited.add(run["id"])


def test_of_two_daemon_processes_the_leader_launches_and_the_standby_takes_over_a_killed_one(
        two, submit, store, admin):
    runs = [submit(steps=STEPS) for _ in range(3)]
    trainers = Trainers(admin, store)

    def playing(probe):
        """Play the trainers, then ``probe()``; a replica that should live and exited fails."""
        def step():
            trainers.play()
            if probe():
                return True
            for pod, proc in two.procs.items():
                assert proc.poll() is None or pod not in alive, \
                    f"{pod} exited ({proc.returncode}): {two.log(pod)}"
            return False
        return step

    # 1. One replica takes the Lease and launches run 1; the other stands by.
    alive = set(PODS)
    wait_for(playing(lambda: store.steps(runs[0])), "run 1's first step", timeout=90)
    holder = _lease(admin)["holderIdentity"]
    leader = replicas.pod_of(holder)
    standby = next(pod for pod in PODS if pod != leader)
    assert [r["id"] for r in store.active_runs()] == [runs[0]]

    # 2. The leader dies without a word while run 1's pod runs.
    last_renewal = _stamp(_lease(admin)["renewTime"])
    two.procs[leader].send_signal(signal.SIGKILL)
    two.procs[leader].wait(10)
    alive = {standby}

    def taken():
        nonlocal last_renewal
        lease = _lease(admin)
        if lease.get("holderIdentity") == holder:
            last_renewal = _stamp(lease["renewTime"])  # a renewal sent just before the kill
        return replicas.pod_of(lease.get("holderIdentity") or "") == standby
    wait_for(playing(taken), "the standby holds the Lease", timeout=90)
    lease = _lease(admin)
    assert lease["leaseTransitions"] == 1
    # Not before the Lease expired: the takeover came at least lease_duration after the
    # dead leader's last renewal (both stamped by this host's clock).
    assert _stamp(lease["acquireTime"]) - last_renewal >= LEASE_S - 0.05

    # 3. The new leader adopts run 1, then launches the rest; it exits once idle.
    trainers.held = False
    survivor = two.procs[standby]
    wait_for(playing(lambda: survivor.poll() is not None), "the new leader to drain the queue",
             timeout=180)
    assert survivor.returncode == 0, two.log(standby)
    for run_id in runs:
        run = store.run(run_id)
        assert run["status"] == "done", store.events(run_id=run_id)
        assert [s["step"] for s in store.steps(run_id)] == list(range(1, STEPS + 1))
        # Launched once: one launch event, one attempt, whoever led.
        assert len(store.events(run_id=run_id, kinds=["launch"])) == 1 and run["attempts"] == 1
    # ... and one Job each, as the apiserver showed them all along.
    assert trainers.jobs == {run_id: 1 for run_id in runs}
    assert [e["message"] for e in store.events(run_id=runs[0], kinds=["adopt"])] == [
        f"adopted Job {NS}/{store.run(runs[0])['job_name']} after a restart"]
    leads = [e["message"] for e in store.events(kinds=["leader"]) if " leads " in e["message"]]
    assert leads == [f"{holder} leads (Lease {NS}/{LEASE})",
                     f"{standby}/{survivor.pid} leads (Lease {NS}/{LEASE})"]
