"""What the Kubernetes launcher knows between ticks lives in the store: a restart forgets nothing.

Each test stops the daemon at one state (its launcher is closed, as if
killed) and starts a new launcher and ``Daemon.start()`` against the same
store and the same emulator, then checks that the new daemon acts on what
the old one knew.
"""

from __future__ import annotations

import pytest
from k8s_support import IMAGE, tick_until_launched

PULLING = {"phase": "Pending", "containerStatuses": [{"name": "prepull", "state": {
    "waiting": {"reason": "ContainerCreating", "message": ""}}}]}
DIGEST = "registry.example/furiosa-llm@sha256:" + "ab" * 32


def _pulled(digest: str = DIGEST) -> dict:
    return {"phase": "Succeeded", "containerStatuses": [{"name": "prepull", "imageID": digest,
                                                         "state": {"terminated": {"exitCode": 0}}}]}


@pytest.fixture
def restart(home, store, config, proc, clock):
    """Kill the daemon (its launcher stops mid-flight) and start a new one on the same store."""
    from daemon.ingest import Ingest
    from daemon.launchers.k8s import K8sLauncher
    from daemon.scheduler import Daemon

    started = []

    def again(old):
        old.launcher.close()
        if old in started:
            old._lock.release()  # the kill frees the flock
        launcher = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                               proc=str(proc), clock=clock)
        new = Daemon(home, store, config, launcher, probe=old.probe, clock=clock)
        new.start()
        started.append(new)
        return new

    yield again
    for d in started:
        d.close()


def _pull_fails(cluster, store, run_id):
    cluster.start_pod(store.run(run_id)["job_name"], phase="Pending", state={"waiting": {
        "reason": "ErrImagePull", "message": "rpc error: manifest unknown"}})


def test_a_restart_while_the_pre_pull_pulls_keeps_the_image_missing_until_the_pod_settles(
        cluster, daemon, submit, store, restart):
    # The node's status.images still lists the image (a stale hint): only the
    # stored fact that a pull failed keeps the gate shut.
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    _pull_fails(cluster, store, run_id)
    daemon.tick(now=now)  # the Job is deleted, the run requeued, the pre-pull starts
    [prepull] = cluster.names("v1/pods")
    cluster.patch("v1/pods", prepull, {"status": PULLING})

    daemon = restart(daemon)
    for tick in range(now + 1, now + 4):
        assert daemon.tick(now=tick).launched is None
    assert cluster.names("batch/v1/jobs") == []  # no card Job while the image is pulled
    assert cluster.names("v1/pods") == [prepull]
    [check] = store.gate_checks(run_id=run_id, limit=1)
    image_gate = next(g for g in check["gates"] if g["name"] == "image_present")
    assert image_gate["verdict"] == "fail" and "pre-pulling with pod" in image_gate["detail"]

    cluster.patch("v1/pods", prepull, {"status": _pulled()})
    tick_until_launched(daemon, store, run_id, now + 4)
    assert cluster.names("v1/pods") == []  # the pre-pull pod is not left behind
    assert cluster.names("batch/v1/jobs") == [f"rngd-{run_id}-a2"]
