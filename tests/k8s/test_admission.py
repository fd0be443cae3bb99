"""A pod the node refuses at admission (OutOf<resource>) is requeued, up to max_attempts tries."""

from __future__ import annotations

import pytest
from k8s_support import job_of, tick_until_launched

CARD_RACE = ("OutOffuriosa.ai/rngd", ("Pod was rejected: Node didn't have enough resource: "
                                      "furiosa.ai/rngd, requested: 2, used: 8, capacity: 8"))


def _reject(cluster, job, reason=CARD_RACE[0], message=CARD_RACE[1]):
    pod = cluster.start_pod(job, phase="Failed", state={"waiting": {
        "reason": "ContainerCreating"}})
    cluster.set_pod(pod, phase="Failed", state={"waiting": {"reason": "ContainerCreating"}},
                    reason=reason, message=message)
    return pod


@pytest.mark.parametrize("reason", ["OutOffuriosa.ai/rngd", "OutOfcpu", "OutOfmemory"])
@pytest.mark.parametrize("requeue_on_eviction", [True, False])
def test_a_pod_refused_for_want_of_a_resource_is_deleted_and_the_run_requeued(
        cluster, running, launcher, store, config, reason, requeue_on_eviction):
    config.k8s.requeue_on_eviction = requeue_on_eviction  # a refusal is not an eviction
    run_id, job = running()
    pod = _reject(cluster, job, reason, f"Pod was rejected: not enough {reason[5:]}")
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "requeue"
    assert outcome.reason == (f"pod {pod} was rejected by the node ({reason}): "
                              f"Pod was rejected: not enough {reason[5:]}")
    assert cluster.get("batch/v1/jobs", job) is None and cluster.get("v1/pods", pod) is None
    [event] = store.events(run_id=run_id, kinds=["admission_rejected"])
    assert event["message"].endswith("(try 1 of 3)")


def test_losing_the_card_race_on_every_try_fails_the_run_after_max_attempts(
        cluster, daemon, submit, store, config):
    config.k8s.max_attempts = 2
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    _reject(cluster, store.run(run_id)["job_name"])
    daemon.tick(now=now)
    assert store.run(run_id)["status"] == "queued"

    now = tick_until_launched(daemon, store, run_id, now + 1)
    assert store.run(run_id)["job_name"] == job_of(store, run_id, 2)
    pod = _reject(cluster, store.run(run_id)["job_name"])
    assert daemon.tick(now=now).finished == (run_id, "failed")
    run = store.run(run_id)
    assert run["attempts"] == 2
    assert run["exit_reason"] == (f"the node rejected the pod on 2 tries; last: pod {pod} was "
                                  f"rejected by the node ({CARD_RACE[0]}): {CARD_RACE[1]}")
    assert cluster.names("batch/v1/jobs") == [] and cluster.names("v1/pods") == []
