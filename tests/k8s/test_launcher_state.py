"""What the Kubernetes launcher knows between ticks lives in the store: a restart forgets nothing.

Each test stops the daemon at one state (its launcher is closed, as if
killed) and starts a new launcher and ``Daemon.start()`` against the same
store and the same emulator, then checks that the new daemon acts on what
the old one knew.
"""

from __future__ import annotations

import pytest
from k8s_support import (
    device_holder,
    end_line,
    job_of,
    pulled_before,
    start_line,
    tick_until_launched,
)

PULLING = {"phase": "Pending", "containerStatuses": [{"name": "prepull", "state": {
    "waiting": {"reason": "ContainerCreating", "message": ""}}}]}
DIGEST = "registry.example/furiosa-llm@sha256:" + "ab" * 32
ELSEWHERE = "registry.example/other:1"  # not in the node's status.images


def _pulled(digest: str = DIGEST) -> dict:
    return {"phase": "Succeeded", "containerStatuses": [{"name": "prepull", "imageID": digest,
                                                         "state": {"terminated": {"exitCode": 0}}}]}


@pytest.fixture
def restart(home, store, config, proc, clock):
    """Kill the daemon (its launcher stops mid-flight) and start a new one on the same store."""
    from daemon.launchers.k8s.launcher import K8sLauncher
    from daemon.run.ingest import Ingest
    from daemon.scheduling.loop import Daemon

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
    assert cluster.names("batch/v1/jobs") == [job_of(store, run_id, 2)]


def test_a_restart_between_the_failed_pull_and_the_pre_pull_still_pre_pulls_first(
        cluster, daemon, submit, store, restart):
    from daemon.launchers.base import REQUEUE

    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    _pull_fails(cluster, store, run_id)
    # The launcher sees the pull error; the daemon dies before the gate check.
    assert daemon.launcher.follow(store.run(run_id)).status == REQUEUE
    store.requeue(run_id)

    daemon = restart(daemon)
    assert daemon.tick(now=now).launched is None
    [prepull] = cluster.names("v1/pods")
    assert prepull.startswith("rngd-prepull-")
    assert daemon.tick(now=now + 1).launched is None
    assert cluster.names("batch/v1/jobs") == []


def test_a_restart_after_a_failed_pre_pull_waits_out_the_retry_delay(
        cluster, daemon, submit, store, config, clock, restart):
    config.k8s.prepull_retry = 60
    pulled_before(store, ELSEWHERE)  # a failed pull of it is retried (daemon/launchers/retry.py)
    run_id = submit(image=ELSEWHERE)
    daemon.tick(now=1)
    [prepull] = cluster.names("v1/pods")
    cluster.patch("v1/pods", prepull, {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "prepull", "state": {"waiting": {"reason": "ErrImagePull",
                                                  "message": "unauthorized"}}}]}})
    daemon.tick(now=2)
    assert cluster.names("v1/pods") == []

    daemon = restart(daemon)
    clock.now += 30
    daemon.tick(now=3)
    assert cluster.names("v1/pods") == []  # 30 s of 60: no new pod yet
    [check] = store.gate_checks(run_id=run_id, limit=1)
    assert "pre-pull failed: ErrImagePull: unauthorized; next try in 30 s" in str(check["gates"])
    clock.now += 30
    daemon.tick(now=4)
    assert len(cluster.names("v1/pods")) == 1


def test_a_restart_does_not_reset_the_pre_pull_timeout(cluster, daemon, submit, store, config,
                                                      clock, restart):
    config.k8s.prepull_timeout = 900
    run_id = submit(image=ELSEWHERE)
    daemon.tick(now=1)
    [prepull] = cluster.names("v1/pods")
    cluster.patch("v1/pods", prepull, {"status": PULLING})
    clock.now += 600

    daemon = restart(daemon)
    daemon.tick(now=2)
    assert cluster.names("v1/pods") == [prepull]
    clock.now += 300  # 900 s since the pod was made, 300 s since the restart
    daemon.tick(now=3)
    assert cluster.names("v1/pods") == []
    [failed] = store.events(run_id=run_id, kinds=["prepull_failed"])
    assert "not pulled within 900 s" in failed["message"]


def test_an_image_our_pre_pull_got_is_not_pulled_again_after_a_restart(
        cluster, daemon, submit, store, restart):
    run_id = submit(image=ELSEWHERE)
    daemon.tick(now=1)
    [prepull] = cluster.names("v1/pods")
    cluster.patch("v1/pods", prepull, {"status": _pulled()})
    daemon.tick(now=2)  # pulled: the pod is deleted, the gate passes once
    assert cluster.names("v1/pods") == []

    daemon = restart(daemon)  # the scheduler counts passes in a row from 0 again
    assert tick_until_launched(daemon, store, run_id, 3)
    assert daemon.launcher.client.calls["create_pod"] == 0
    assert cluster.names("v1/pods") == []


def test_a_compiled_run_waiting_for_its_cards_says_so_once_across_a_restart(
        cluster, daemon, submit, store, restart):
    run_id = submit(precompile=True)
    now = tick_until_launched(daemon, store, run_id, 1)
    compile_job = store.run(run_id)["job_name"]
    cluster.start_pod(compile_job, phase="Succeeded",
                      state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.finish_job(compile_job, "Complete")
    cluster.add_pod("grabbed-meanwhile", cards=7, namespace="alice")
    daemon.tick(now=now)

    daemon = restart(daemon)
    daemon.tick(now=now + 1)
    assert store.run(run_id)["job_name"] == compile_job
    [waiting] = store.events(run_id=run_id, kinds=["compile"])
    assert waiting["message"] == (f"compile Job {compile_job} succeeded; waiting for 2 cards "
                                  f"(node rngd-node-1: 8 allocatable, 7 requested "
                                  f"(alice/grabbed-meanwhile=7))")


def test_a_restart_before_the_first_step_keeps_checking_the_device_holders(
        cluster, daemon, submit, store, proc, restart):
    device_holder(proc, 999, None)  # holds a card before the launch; its cgroup unreadable
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    job = store.run(run_id)["job_name"]
    cluster.start_pod(job)

    daemon = restart(daemon)
    daemon.tick(now=now)
    assert store.run(run_id)["status"] == "queued"
    assert cluster.get("batch/v1/jobs", job) is None
    [event] = store.events(run_id=run_id, kinds=["foreign_holder"])
    assert event["message"].startswith("pid 999 ")


def test_the_trainers_end_error_read_before_a_restart_is_in_the_failed_runs_reason(
        cluster, daemon, submit, store, restart):
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    pod = cluster.start_pod(store.run(run_id)["job_name"])
    cluster.log(pod, [("2026-01-01T00:00:02Z", start_line(run_id)),
                      ("2026-01-01T00:00:03Z", end_line("error", "device lost"))])
    daemon.tick(now=now)  # the end record is read; the container has not exited yet

    daemon = restart(daemon)
    cluster.set_pod(pod, phase="Failed", state={"terminated": {"exitCode": 1, "reason": "Error"}})
    assert daemon.tick(now=now + 1).finished == (run_id, "failed")
    assert "trainer: error: device lost" in store.run(run_id)["exit_reason"]


def test_an_api_outage_across_a_restart_is_one_event_and_its_end_another(
        cluster, daemon, submit, store, restart):
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    job = store.run(run_id)["job_name"]
    cluster.start_pod(job)
    # Each read of the Job is tried 3 times: the next three reads get no answer.
    cluster.fail("get", f"/apis/batch/v1/namespaces/ml/jobs/{job}", times=9)
    daemon.tick(now=now)

    daemon = restart(daemon)  # its recover() reads the Job: still down
    daemon.tick(now=now + 1)
    daemon.tick(now=now + 2)  # the API answers again
    kinds = [e["kind"] for e in store.events(run_id=run_id)
             if e["kind"] in ("k8s_unavailable", "k8s_available")]
    assert kinds == ["k8s_unavailable", "k8s_available"]


def _compile_then_pull_fails(cluster, daemon, store, run_id):
    """Compile Job done (image as DIGEST), card Job's pull fails: the pre-pull pod's name."""
    now = tick_until_launched(daemon, store, run_id, 1)
    compile_job = store.run(run_id)["job_name"]
    assert compile_job == job_of(store, run_id, 1, "compile")
    cluster.start_pod(compile_job, phase="Succeeded",
                      state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.finish_job(compile_job, "Complete")
    daemon.tick(now=now)  # the card Job is created
    _pull_fails(cluster, store, run_id)
    daemon.tick(now=now + 1)  # deleted, requeued; the pre-pull starts
    [prepull] = [p for p in cluster.names("v1/pods") if p.startswith("rngd-prepull-")]
    return prepull


def test_a_retry_after_a_failed_pull_skips_the_compile_done_for_the_same_digest(
        cluster, daemon, submit, store, restart):
    run_id = submit(precompile=True)
    prepull = _compile_then_pull_fails(cluster, daemon, store, run_id)
    daemon = restart(daemon)
    cluster.patch("v1/pods", prepull, {"status": _pulled(DIGEST)})
    tick_until_launched(daemon, store, run_id, 100)

    assert store.run(run_id)["job_name"] == job_of(store, run_id, 2)
    stages = [e["data"]["stage"] for e in store.events(run_id=run_id, kinds=["launch"])]
    assert stages == ["compile", "train", "train"]
    skipped = store.events(run_id=run_id, kinds=["compile"])[-1]
    assert skipped["message"].startswith(
        f"compile skipped: Job {job_of(store, run_id, 1, 'compile')} compiled")


def test_a_retry_compiles_again_when_the_image_on_the_node_has_another_digest(
        cluster, daemon, submit, store):
    run_id = submit(precompile=True)
    prepull = _compile_then_pull_fails(cluster, daemon, store, run_id)
    other = "registry.example/furiosa-llm@sha256:" + "cd" * 32  # the tag moved meanwhile
    cluster.patch("v1/pods", prepull, {"status": _pulled(other)})
    tick_until_launched(daemon, store, run_id, 100)
    assert store.run(run_id)["job_name"] == job_of(store, run_id, 2, "compile")


def _admission_reject(cluster, job):
    pod = cluster.start_pod(job, phase="Failed", state={"waiting": {"reason": "ContainerCreating"}})
    cluster.set_pod(pod, phase="Failed", state={"waiting": {"reason": "ContainerCreating"}},
                    reason="OutOffuriosa.ai/rngd", message="Pod was rejected: no card left")


@pytest.mark.parametrize("how", ["pull error", "card race lost", "evicted"])
def test_a_restart_after_the_job_was_deleted_but_before_the_requeue_was_stored_requeues(
        cluster, daemon, submit, store, restart, how):
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    job = store.run(run_id)["job_name"]
    if how == "pull error":
        _pull_fails(cluster, store, run_id)
    elif how == "card race lost":
        _admission_reject(cluster, job)
    else:
        pod = cluster.start_pod(job)
        cluster.set_pod(pod, phase="Failed", state={"terminated": {"exitCode": 137}},
                        reason="Evicted", message="The node was low on resource: memory.")
    # The launcher deletes the Job and answers "requeue"; the daemon dies before storing it.
    assert daemon.launcher.follow(store.run(run_id)).status == "requeue"
    assert cluster.get("batch/v1/jobs", job) is None
    assert store.run(run_id)["status"] == "running"

    daemon = restart(daemon)
    run = store.run(run_id)
    assert (run["status"], run["exit_reason"]) == ("queued", None)
    assert len(store.events(run_id=run_id, kinds=["requeue"])) == 1
    if how == "pull error":  # the image was pulled by the pre-pull pod first
        daemon.tick(now=now)
        [prepull] = cluster.names("v1/pods")
        cluster.patch("v1/pods", prepull, {"status": _pulled()})
    tick_until_launched(daemon, store, run_id, now + 1)
    assert store.run(run_id)["job_name"] == job_of(store, run_id, 2)
